//! Whether a sentence of a report states something a source could support: a claim. Headings
//! a model wrote into its prose, questions, lead-ins to a list and transitions ("Let us look
//! at…", "The following sections…") are not claims: they are never put to the claim check,
//! never rewritten from a passage, and a report need not cite them.

use fathom_parse::text::{terms, words};

use crate::claim::plain_text;

/// Content terms a sentence needs to state something ("Rust is safe." has two).
const MIN_TERMS: usize = 2;
/// Ideographs a sentence of a language written without spaces needs to state something.
const MIN_IDEOGRAPHS: usize = 6;
/// Words at most of a heading-like line: no end punctuation, every word capitalised.
const HEADING_WORDS: usize = 8;
/// Words at most of a fragment with no end punctuation that is read as a heading.
const SHORT_FRAGMENT: usize = 4;

/// Openers that join a sentence to the one before it; what follows them is judged.
const CONNECTIVES: &[&str] = &[
    "additionally",
    "also",
    "as discussed",
    "as mentioned",
    "as noted",
    "as we have seen",
    "finally",
    "first",
    "firstly",
    "furthermore",
    "however",
    "in addition",
    "in conclusion",
    "in short",
    "in summary",
    "lastly",
    "moreover",
    "next",
    "overall",
    "second",
    "secondly",
    "so",
    "then",
    "therefore",
    "thus",
    "to conclude",
    "to summarize",
    "to sum up",
];

/// Openers of a sentence about the report itself, not its subject.
const META: &[&str] = &[
    "as we will see",
    "below",
    "here is",
    "here are",
    "here we",
    "here's",
    "in the following",
    "in the next section",
    "in this chapter",
    "in this report",
    "in this section",
    "let us",
    "let's",
    "now let's",
    "now we",
    "the following section",
    "the following sections",
    "the next section",
    "the next sections",
    "the rest of this",
    "the sections below",
    "this chapter",
    "this report",
    "this section",
    "we can now",
    "we now",
    "we will",
    "we'll",
];

/// Whether `sentence` states something: its Markdown escapes, emphasis, links and citation
/// markers aside, it is not
/// - a question (ends with `?`) or a lead-in (ends with `:`);
/// - a heading: no end punctuation, and either every word capitalised (up to eight words,
///   "Borrowing Mechanisms") or at most four words;
/// - about the report rather than its subject: after any connective ("In summary,",
///   "However,"), it opens with "Let us", "This section", "The following sections", "We
///   will", "Here is" and the like;
///
/// and it has at least two content terms (words that are not stopwords, as the index and
/// the claim check count them), or six ideographs in a language written without spaces:
/// "It is interesting." states nothing a source could carry.
pub fn is_claim(sentence: &str) -> bool {
    let text = plain_text(sentence);
    let text = text.trim();
    let Some(last) = text.chars().last() else {
        return false;
    };
    if matches!(last, '?' | ':' | '？' | '：') {
        return false;
    }
    let ended = matches!(
        last,
        '.' | '!' | '"' | '\'' | ')' | '”' | '’' | '…' | '。' | '！' | '`'
    );
    if !ended {
        let n = text.split_whitespace().count();
        let capitalised = text
            .split_whitespace()
            .filter(|w| w.chars().any(char::is_alphabetic))
            .all(|w| {
                w.chars()
                    .find(|c| c.is_alphabetic())
                    .is_some_and(char::is_uppercase)
                    || is_small_word(w)
            });
        if n <= SHORT_FRAGMENT || (capitalised && n <= HEADING_WORDS) {
            return false;
        }
    }
    let rest = without_connectives(text);
    let lower = rest.to_lowercase();
    if META.iter().any(|m| opens_with(&lower, m)) {
        return false;
    }
    // Chinese and Japanese write no spaces: a run of their characters counts by length.
    let ideographs = rest.chars().filter(|c| is_ideograph(*c)).count();
    terms(&rest).len() >= MIN_TERMS || ideographs >= MIN_IDEOGRAPHS
}

/// A CJK ideograph, kana or hangul syllable.
fn is_ideograph(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// Words a title leaves in lower case ("Rules of the Road").
fn is_small_word(w: &str) -> bool {
    matches!(
        w.to_lowercase().as_str(),
        "a" | "an"
            | "and"
            | "as"
            | "at"
            | "by"
            | "for"
            | "in"
            | "of"
            | "on"
            | "or"
            | "the"
            | "to"
            | "vs"
            | "vs."
            | "with"
    )
}

/// `text` without the connectives it opens with ("In summary, however, …").
fn without_connectives(text: &str) -> String {
    let mut rest = text.trim().to_string();
    loop {
        let lower = rest.to_lowercase();
        let Some(c) = CONNECTIVES.iter().find(|c| opens_with(&lower, c)) else {
            return rest;
        };
        rest = rest[c.len()..]
            .trim_start_matches([',', ' ', ';', '—', '-'])
            .to_string();
    }
}

/// Whether `lower` opens with the phrase `p` as whole words.
fn opens_with(lower: &str, p: &str) -> bool {
    lower.starts_with(p)
        && lower[p.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_alphanumeric())
        && !words(p).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_claims() {
        for s in [
            "Rust is safe.",
            "The `Send` marker trait indicates that ownership can be transferred between threads. [2]",
            "In summary, the borrow checker rejects two mutable references to one value.",
            "However, `Rc<T>` is only for use in single-threaded scenarios.",
            "A **data race** happens when two pointers access the same data at the same time.",
            "The [reference](https://doc.rust-lang.org/reference/) lists every keyword.",
            "the Mutex type guards its data with a lock acquired before each access",
            "Rust 通过所有权系统在编译时防止数据竞争。",
        ] {
            assert!(is_claim(s), "{s}");
        }
    }

    #[test]
    fn headings_questions_lead_ins_and_transitions_are_not() {
        for s in [
            "Borrowing Mechanisms",
            "Message Passing Between Threads",
            "Send and Sync traits",
            "## Overview",
            "**Shared-State Concurrency**",
            "What is a data race?",
            "A data race happens when these three behaviors occur:",
            "Let us look at how threads share data.",
            "Let's explore the ownership rules in detail.",
            "In summary, this section covers the subject in some depth.",
            "The following sections explain each approach.",
            "In this section, we will discuss message passing.",
            "We will now turn to channels.",
            "It is interesting.",
            "Yes.",
            "",
        ] {
            assert!(!is_claim(s), "{s}");
        }
    }
}
