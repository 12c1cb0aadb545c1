//! Claim-level verification, offline: does the cited document say what a report sentence
//! says? [`best_span`] finds the passage that matches the claim best, and [`entails`] checks
//! that passage by rules stricter than word overlap: numbers, negation and names must agree,
//! and most content terms must be there. Rules, not a model: the same input gives the same
//! verdict in every process, so a resumed run decides exactly as an uninterrupted one.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use fathom_parse::ParsedDoc;

use crate::sentence_blocks;
use fathom_parse::text::{is_stopword, sentences, stem, terms, words};

/// The share of a claim's content terms the passage must contain: 4 in 5. Integers, so the
/// threshold has no rounding that could differ between builds.
const COVERAGE: (usize, usize) = (4, 5);
/// Consecutive sentences a passage may span.
const MAX_WINDOW: usize = 3;
/// How many content words after a negation it governs (within its clause).
const NEGATION_SCOPE: usize = 3;
const NEGATIONS: &[&str] = &["cannot", "never", "no", "none", "not", "without"];
/// Spelled-out numbers a claim may use for digits its source writes (or the reverse).
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve",
];
/// Words before "one" that make it a pronoun ("no one", "the one"), not a count.
const ONE_AS_PRONOUN_AFTER: &[&str] = &[
    "another", "any", "each", "every", "no", "that", "the", "this", "which",
];
/// Words after "one" that make it a pronoun ("one of", "one another").
const ONE_AS_PRONOUN_BEFORE: &[&str] = &["another", "of"];
/// How many missing terms a reason lists.
const MAX_LISTED: usize = 4;

/// The passage of a document a claim is checked against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// Inline Markdown, as the document's blocks store it (escaped), so a sentence of it can
    /// go into the report verbatim.
    pub text: String,
    /// The PDF page it is on.
    #[serde(default)]
    pub page: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Supported,
    Unsupported,
}

/// The offline check of one claim against one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub verdict: Verdict,
    /// The passage checked (also when it does not support the claim, for a rewrite).
    pub span: Option<Span>,
    pub reason: String,
}

/// `s` as a reader sees it: Markdown escapes undone (`\[` → `[`), citation markers `[n]`
/// removed, a model's emphasis markers dropped and its links reduced to their text, and
/// whitespace collapsed. Report sentences and document blocks are both stored
/// escaped; inside a code span nothing is touched, as Markdown does.
pub fn plain_text(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut in_code = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            in_code = !in_code;
        } else if !in_code && c == '\\' {
            if let Some(&next) = chars.get(i + 1) {
                out.push(next);
            }
            i += 2;
            continue;
        } else if !in_code && c == '[' {
            let digits = chars[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if digits > 0 && chars.get(i + 1 + digits) == Some(&']') {
                i += digits + 2;
                continue;
            }
            // A link a model wrote, `[text](url)`: its text, not its address.
            if let Some((text_end, after)) = link_at(&chars, i) {
                out.extend(&chars[i + 1..text_end]);
                i = after;
                continue;
            }
        } else if !in_code && matches!(c, '*' | '_') {
            // Emphasis a model wrote (`**word**`, `_word_`): the markers go, the words stay.
            let run = chars[i..].iter().take_while(|&&x| x == c).count();
            if emphasis_run(&chars, i, run) {
                i += run;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Where the link `[text](url)` opening at `open` ends: the index of its `]` and the index
/// after its `)`. The address has no space and no parenthesis.
fn link_at(chars: &[char], open: usize) -> Option<(usize, usize)> {
    let close = open
        + 1
        + chars[open + 1..]
            .iter()
            .position(|&c| c == ']' || c == '[')?;
    if chars[close] != ']' || chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let end = close
        + 2
        + chars[close + 2..]
            .iter()
            .position(|&c| c == ')' || c == '(' || c.is_whitespace())?;
    (chars[end] == ')' && end > close + 2).then_some((close, end + 1))
}

/// Whether the run of `run` unescaped `*` or `_` at `at` delimits emphasis: it touches
/// a word on one side and space or punctuation (or the text's end) on the other. Inside a
/// word (`max_len`, `2*3`) it is the character itself.
fn emphasis_run(chars: &[char], at: usize, run: usize) -> bool {
    let before = at.checked_sub(1).map(|j| chars[j]);
    let after = chars.get(at + run).copied();
    let open = |x: Option<char>| x.is_none_or(|x| x.is_whitespace() || x.is_ascii_punctuation());
    let word = |x: Option<char>| x.is_some_and(|x| !x.is_whitespace());
    let inside =
        before.is_some_and(char::is_alphanumeric) && after.is_some_and(char::is_alphanumeric);
    run <= 3 && !inside && ((open(before) && word(after)) || (word(before) && open(after)))
}

/// The passage of `doc` (restricted to `page` when given) that best matches `claim`: a window
/// of up to 3 consecutive sentences within a block, chosen by coverage of the claim's content
/// terms and numbers (ties: the shorter, then the first). None when nothing shares one.
pub fn best_span(claim: &str, doc: &ParsedDoc, page: Option<u32>) -> Option<Span> {
    DocSentences::of(doc, page).best_span(claim)
}

/// A document's sentences (on one page, when given) with the terms and numbers of each, read
/// once: checking many claims against one document then looks up the claim's terms, not
/// every sentence of the document per claim.
pub struct DocSentences {
    /// Every sentence kept, in document order.
    sentences: Vec<String>,
    /// Per sentence: its block (windows never cross one), its length in chars, its page.
    meta: Vec<SentenceMeta>,
    /// Each term and number ("#42") to the sentences holding it, in document order.
    postings: HashMap<String, Vec<u32>>,
}

struct SentenceMeta {
    block: u32,
    chars: u32,
    page: Option<u32>,
}

impl DocSentences {
    pub fn of(doc: &ParsedDoc, page: Option<u32>) -> DocSentences {
        DocSentences::build(doc, page, None)
    }

    /// [`DocSentences::of`] with the document's blocks already cut into sentences
    /// ([`ParsedDoc::block_sentences`]).
    pub fn of_cut(doc: &ParsedDoc, page: Option<u32>, cut: &[Vec<String>]) -> DocSentences {
        DocSentences::build(doc, page, Some(cut))
    }

    fn build(doc: &ParsedDoc, page: Option<u32>, cut: Option<&[Vec<String>]>) -> DocSentences {
        let mut out = DocSentences {
            sentences: Vec::new(),
            meta: Vec::new(),
            postings: HashMap::new(),
        };
        for (b, block) in sentence_blocks(doc, page, cut).into_iter().enumerate() {
            for sentence in block.sentences {
                let at = out.sentences.len() as u32;
                for term in features(&plain_text(&sentence)) {
                    out.postings.entry(term).or_default().push(at);
                }
                out.meta.push(SentenceMeta {
                    block: b as u32,
                    chars: sentence.chars().count() as u32,
                    page: block.page,
                });
                out.sentences.push(sentence);
            }
        }
        out
    }

    /// [`best_span`] over these sentences.
    pub fn best_span(&self, claim: &str) -> Option<Span> {
        let claim_terms = features(&plain_text(claim));
        if claim_terms.is_empty() {
            return None;
        }
        // The sentences holding any of the claim's terms, each with which (by index).
        let mut hits: Vec<(u32, u32)> = Vec::new();
        for (i, term) in claim_terms.iter().enumerate() {
            if let Some(at) = self.postings.get(term) {
                hits.extend(at.iter().map(|&s| (s, i as u32)));
            }
        }
        hits.sort_unstable();
        let mut holding: Vec<(u32, Vec<u32>)> = Vec::new();
        for (s, term) in hits {
            match holding.last_mut() {
                Some((last, terms)) if *last == s => terms.push(term),
                _ => holding.push((s, vec![term])),
            }
        }
        // Windows of up to MAX_WINDOW sentences within a block, by coverage of the claim's
        // terms, then fewer chars, then the first. A window that starts or ends on a sentence
        // with none of them is beaten by the same window without it, so only windows from a
        // holding sentence to a holding sentence are weighed, in the order of all windows.
        let mut seen = vec![usize::MAX; claim_terms.len()];
        // (covered, chars, first and last sentence)
        let mut best: Option<(usize, usize, usize, usize)> = None;
        for (k, (start, _)) in holding.iter().enumerate() {
            let start = *start as usize;
            let block = self.meta[start].block;
            let mut covered = 0;
            for (end, terms) in &holding[k..] {
                let end = *end as usize;
                if end >= start + MAX_WINDOW || self.meta[end].block != block {
                    break;
                }
                for &t in terms {
                    if seen[t as usize] != k {
                        seen[t as usize] = k;
                        covered += 1;
                    }
                }
                // The window's sentences joined by one space each.
                let chars = self.meta[start..=end]
                    .iter()
                    .map(|m| m.chars as usize)
                    .sum::<usize>()
                    + (end - start);
                let better = match best {
                    None => true,
                    Some((c, n, ..)) => covered > c || (covered == c && chars < n),
                };
                if better {
                    best = Some((covered, chars, start, end));
                }
            }
        }
        best.map(|(_, _, start, end)| Span {
            text: self.sentences[start..=end].join(" "),
            page: self.meta[start].page,
        })
    }

    /// [`check_claim`] over these sentences.
    pub fn check(&self, claim: &str, page: Option<u32>) -> Check {
        check_span(claim, self.best_span(claim), page)
    }
}

/// Entailment-style check of a claim by a passage: Ok when the passage supports it; Err with
/// a short, specific reason otherwise. Stricter than word overlap, in this order:
/// - every number of the claim (digits, decimals, percentages; "one" to "twelve" read as
///   digits) is in the passage;
/// - every name is: capitalised words not starting the sentence, `code spans`, and
///   identifiers (words with `::`, `_`, or a letter then digits);
/// - at least 80% of the claim's content terms (stemmed as `fathom_parse::text::terms`
///   does) are in the passage;
/// - negation agrees: a "not", "no", "never", "cannot", "n't", "without" or "none" governing
///   the matched terms in the claim but not in the best-matching passage sentence (or the
///   reverse) fails.
///
/// Markdown escapes and citation markers `[n]` are ignored on both sides.
pub fn entails(claim: &str, passage: &str) -> Result<(), String> {
    let claim = plain_text(claim);
    let passage = plain_text(passage);
    let claim_terms = content_terms(&claim);
    if claim_terms.is_empty() {
        return Err("the claim has no content terms to check".into());
    }

    let in_passage = numbers(&passage);
    for n in numbers(&claim) {
        let found = in_passage
            .iter()
            .any(|p| p.value == n.value && (p.percent || !n.percent));
        if !found {
            let shown = if n.percent {
                format!("{}%", n.value)
            } else {
                n.value
            };
            return Err(format!("the number {shown} is not in the passage"));
        }
    }

    let passage_words: BTreeSet<String> = words(&passage).into_iter().collect();
    let passage_stems: BTreeSet<String> = passage_words.iter().map(|w| stem(w)).collect();
    let passage_lower = passage.to_lowercase();
    for e in entities(&claim) {
        let found = match &e {
            Entity::Code(code) => passage.contains(code.as_str()),
            Entity::Ident(id) => contains_word(&passage_lower, &id.to_lowercase()),
            Entity::Name(name) => name_parts(name)
                .iter()
                .all(|p| passage_words.contains(p) || passage_stems.contains(&stem(p))),
        };
        if !found {
            return Err(match e {
                Entity::Code(code) => format!("`{code}` is not in the passage"),
                Entity::Ident(s) | Entity::Name(s) => {
                    format!("\"{s}\" is not named in the passage")
                }
            });
        }
    }

    let passage_terms = content_terms(&passage);
    let missing: Vec<&String> = claim_terms
        .iter()
        .filter(|t| !passage_terms.contains(*t))
        .collect();
    let found = claim_terms.len() - missing.len();
    if found * COVERAGE.1 < claim_terms.len() * COVERAGE.0 {
        let listed: Vec<&str> = missing
            .iter()
            .take(MAX_LISTED)
            .map(|s| s.as_str())
            .collect();
        let more = if missing.len() > MAX_LISTED {
            ", …"
        } else {
            ""
        };
        return Err(format!(
            "only {found} of {} content terms are in the passage (missing: {}{more})",
            claim_terms.len(),
            listed.join(", ")
        ));
    }

    // Negation is judged where the claim's terms are: in the passage sentences that cover the
    // most of them. Any one of those agreeing is enough.
    let relevant: BTreeSet<String> = claim_terms
        .iter()
        .filter(|t| passage_terms.contains(*t))
        .cloned()
        .collect();
    let claim_negated = negated(&claim, &relevant);
    let scored: Vec<(usize, String)> = sentences(&passage)
        .into_iter()
        .map(|s| {
            let t = content_terms(&s);
            (relevant.iter().filter(|r| t.contains(*r)).count(), s)
        })
        .collect();
    let top = scored.iter().map(|(n, _)| *n).max().unwrap_or(0);
    let agrees = scored
        .iter()
        .filter(|(n, _)| *n == top)
        .any(|(_, s)| negated(s, &relevant) == claim_negated);
    if !agrees {
        return Err(if claim_negated {
            "the claim is negated and the passage is not".into()
        } else {
            "the passage negates what the claim affirms".into()
        });
    }
    Ok(())
}

/// [`best_span`] then [`entails`].
pub fn check_claim(claim: &str, doc: &ParsedDoc, page: Option<u32>) -> Check {
    check_span(claim, best_span(claim, doc, page), page)
}

fn check_span(claim: &str, span: Option<Span>, page: Option<u32>) -> Check {
    let Some(span) = span else {
        let reason = match page {
            Some(p) => format!("nothing on page {p} shares a content term with the claim"),
            None => "nothing in the document shares a content term with the claim".into(),
        };
        return Check {
            verdict: Verdict::Unsupported,
            span: None,
            reason,
        };
    };
    match entails(claim, &span.text) {
        Ok(()) => Check {
            verdict: Verdict::Supported,
            span: Some(span),
            reason: "the passage states it: numbers, names, negation and terms agree".into(),
        },
        Err(reason) => Check {
            verdict: Verdict::Unsupported,
            span: Some(span),
            reason,
        },
    }
}

/// The one sentence of `span` that best restates `claim` (most of the claim's content terms;
/// ties: the shorter, then the first), verbatim as the document writes it; used to rewrite an
/// unsupported claim from its passage. None when no sentence shares more than half of the
/// claim's content terms: the claim is then removed rather than replaced by something else.
pub fn closest_sentence(claim: &str, span: &Span) -> Option<String> {
    let claim_terms = features(&plain_text(claim));
    let mut best: Option<(usize, usize, String)> = None;
    for s in sentences(&span.text) {
        let t = features(&plain_text(&s));
        let shared = claim_terms.iter().filter(|c| t.contains(*c)).count();
        let chars = s.chars().count();
        if shared * 2 <= claim_terms.len() {
            continue;
        }
        let better = match &best {
            None => true,
            Some((c, n, _)) => shared > *c || (shared == *c && chars < *n),
        };
        if better {
            best = Some((shared, chars, s));
        }
    }
    best.map(|(_, _, s)| s)
}

/// How many content terms and numbers of `claim` the sentence `other` holds (Markdown and
/// citation markers aside): how closely it restates the claim.
pub fn shared_terms(claim: &str, other: &str) -> usize {
    let have = features(&plain_text(other));
    features(&plain_text(claim))
        .iter()
        .filter(|t| have.contains(*t))
        .count()
}

/// Content terms exactly as `fathom_parse::text::terms` makes them, less numbers ("42",
/// "three", "percent"): the number rule checks those, whatever their notation, and "1,200"
/// would otherwise count as terms "1" and "200" that "1200" lacks.
fn content_terms(text: &str) -> BTreeSet<String> {
    terms(text)
        .into_iter()
        .filter(|t| {
            !t.chars().all(|c| c.is_ascii_digit()) && number_word(t).is_none() && t != "percent"
        })
        .collect()
}

/// What a passage is chosen by: content terms and numbers ("#42").
fn features(text: &str) -> BTreeSet<String> {
    let mut f = content_terms(text);
    f.extend(numbers(text).into_iter().map(|n| format!("#{}", n.value)));
    f
}

fn number_word(w: &str) -> Option<String> {
    NUMBER_WORDS
        .iter()
        .position(|n| *n == w)
        .map(|i| (i + 1).to_string())
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Num {
    value: String,
    percent: bool,
}

/// The numbers of `text`: "1,000" as 1000, "2.50" as 2.5, "50%" and "50 percent" marked as
/// percentages, "three" as 3. Digits inside identifiers ("x86_64", "v1.2") are not numbers.
fn numbers(text: &str) -> BTreeSet<Num> {
    let tokens: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, '-' | '–' | '—' | '/' | '~'))
        .map(|t| {
            t.trim_start_matches(|c: char| !c.is_alphanumeric())
                .trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '%'))
        })
        .filter(|t| !t.is_empty())
        .collect();
    // Most tokens are lower-case ASCII already: borrowed, not copied.
    let lower: Vec<Cow<str>> = tokens
        .iter()
        .map(|t| {
            if t.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
                Cow::Borrowed(*t)
            } else {
                Cow::Owned(t.to_lowercase())
            }
        })
        .collect();
    let mut out = BTreeSet::new();
    for (i, tok) in tokens.iter().enumerate() {
        let next = lower.get(i + 1).map(|t| t.as_ref());
        if tok.starts_with(|c: char| c.is_ascii_digit()) {
            let digits: String = tok
                .chars()
                .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | ','))
                .collect();
            let digits = digits.trim_end_matches(['.', ',']);
            let rest = &tok[digits.len()..];
            let percent = rest.starts_with('%')
                || (rest.is_empty()
                    && (next == Some("percent")
                        || (next == Some("per")
                            && lower.get(i + 2).map(|t| t.as_ref()) == Some("cent"))));
            out.insert(Num {
                value: normalise_number(digits),
                percent,
            });
        } else if let Some(d) = number_word(&lower[i]) {
            let prev = i
                .checked_sub(1)
                .and_then(|p| lower.get(p))
                .map(|t| t.as_ref());
            let pronoun = lower[i] == "one"
                && (prev.is_some_and(|p| ONE_AS_PRONOUN_AFTER.contains(&p))
                    || next.is_some_and(|n| ONE_AS_PRONOUN_BEFORE.contains(&n)));
            if !pronoun {
                let percent = next == Some("percent");
                out.insert(Num { value: d, percent });
            }
        }
    }
    out
}

/// "1,000" → "1000", "2.50" → "2.5", "007" → "7", "1,5" → "1.5"; anything else as written.
fn normalise_number(raw: &str) -> String {
    let seps: Vec<char> = raw.chars().filter(|c| matches!(c, '.' | ',')).collect();
    let groups: Vec<&str> = raw.split(['.', ',']).collect();
    let thousands = !seps.is_empty()
        && seps.iter().all(|c| *c == ',')
        && groups.iter().skip(1).all(|g| g.len() == 3);
    let (int, frac) = if seps.is_empty() || thousands {
        (groups.concat(), String::new())
    } else if seps.len() == 1 {
        (
            groups[0].to_string(),
            groups[1].trim_end_matches('0').to_string(),
        )
    } else {
        return raw.to_string();
    };
    let int = match int.trim_start_matches('0') {
        "" => "0".to_string(),
        s => s.to_string(),
    };
    if frac.is_empty() {
        int
    } else {
        format!("{int}.{frac}")
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Entity {
    /// The text of a `code span`, matched exactly.
    Code(String),
    /// A word with `::`, `_` or digits after a letter, matched whole, in any case.
    Ident(String),
    /// A capitalised word, matched in any case and word form ("Mutexes" meets "Mutex").
    Name(String),
}

/// The names a claim depends on.
fn entities(claim: &str) -> Vec<Entity> {
    let mut out = Vec::new();
    // Code spans first, then the prose around them.
    let mut prose = String::with_capacity(claim.len());
    for (i, part) in claim.split('`').enumerate() {
        if i % 2 == 1 {
            let code = part.split_whitespace().collect::<Vec<_>>().join(" ");
            if !code.is_empty() {
                out.push(Entity::Code(code));
            }
            prose.push(' ');
        } else {
            prose.push_str(part);
        }
    }
    let mut sentence_start = true;
    for raw in prose.split_whitespace() {
        let core = raw
            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '_'))
            .to_string();
        let starts = sentence_start;
        sentence_start = raw
            .trim_end_matches(['"', '\'', ')', '”', '’'])
            .ends_with(['.', '!', '?']);
        if core.is_empty() {
            continue;
        }
        let first = core.chars().next().unwrap_or(' ');
        let has_digit = core.chars().any(|c| c.is_ascii_digit());
        if core.contains("::") || core.contains('_') || (first.is_alphabetic() && has_digit) {
            out.push(Entity::Ident(core));
        } else if !starts
            && first.is_uppercase()
            && core.chars().filter(|c| c.is_alphabetic()).count() >= 2
            && !name_parts(&core).is_empty()
        {
            out.push(Entity::Name(core));
        }
    }
    out
}

/// The words of a name that must appear: "Rust's" → ["rust"]; stopwords ("The") need not.
fn name_parts(name: &str) -> Vec<String> {
    words(name)
        .into_iter()
        .filter(|w| w.chars().count() > 1 && !is_stopword(w))
        .collect()
}

/// Whether `needle` occurs in `hay` as a whole word (not inside a longer identifier).
fn contains_word(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let inner = |c: char| c.is_alphanumeric() || c == '_';
    hay.match_indices(needle).any(|(at, _)| {
        let before = hay[..at].chars().next_back().is_none_or(|c| !inner(c));
        let after = hay[at + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !inner(c));
        before && after
    })
}

/// Whether a negation in `sentence` governs one of `relevant`: a cue followed, within its
/// clause, by one of `relevant` among its next few content words. Negation scopes forward in
/// English ("cannot compile", "no other reference"), which keeps "X cannot outlive Y, but it
/// can be borrowed" from negating the borrowing.
fn negated(sentence: &str, relevant: &BTreeSet<String>) -> bool {
    let tokens: Vec<&str> = sentence.split_whitespace().collect();
    for (i, raw) in tokens.iter().enumerate() {
        if !is_negation(raw) || ends_clause(raw) {
            continue;
        }
        let mut seen = 0;
        for next in &tokens[i + 1..] {
            if bare(next) == "but" {
                break;
            }
            for t in content_terms(next) {
                if relevant.contains(&t) {
                    return true;
                }
                seen += 1;
            }
            if seen >= NEGATION_SCOPE || ends_clause(next) {
                break;
            }
        }
    }
    false
}

/// A token lower-cased without surrounding punctuation, curly apostrophes made straight.
fn bare(raw: &str) -> String {
    raw.trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
        .replace('’', "'")
}

fn is_negation(raw: &str) -> bool {
    let w = bare(raw);
    NEGATIONS.contains(&w.as_str()) || w.ends_with("n't")
}

fn ends_clause(raw: &str) -> bool {
    raw.trim_end_matches(['"', '\'', ')', ']', '”', '’'])
        .ends_with([',', ';', ':', '.', '!', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use fathom_parse::text::Block;
    use fathom_parse::{DocKind, ParsedDoc};

    fn doc(blocks: &[(&str, Option<u32>)]) -> ParsedDoc {
        let blocks = blocks
            .iter()
            .map(|(text, page)| Block {
                heading: String::new(),
                text: text.to_string(),
                page: *page,
                item: false,
            })
            .collect();
        ParsedDoc::new("https://x.test/doc", "Doc", DocKind::Text, blocks)
    }

    const SURVEY: &str = "The 2024 survey of 1,200 developers found that 38.5% of them use \
        Rust at work. Most respondents said the borrow checker was hard to learn at first.";

    #[test]
    fn a_sentence_quoted_verbatim_is_supported() {
        let d = doc(&[(SURVEY, None)]);
        let claim = "Most respondents said the borrow checker was hard to learn at first. [1]";
        let c = check_claim(claim, &d, None);
        assert_eq!(c.verdict, Verdict::Supported, "{c:?}");
        assert_eq!(
            c.span.map(|s| s.text).as_deref(),
            Some("Most respondents said the borrow checker was hard to learn at first.")
        );
    }

    #[test]
    fn a_paraphrase_that_keeps_the_facts_is_supported() {
        // Other word forms and order, "1200" for "1,200" and "38.5 percent" for "38.5%".
        let claim = "In 2024, a survey of 1200 developers found 38.5 percent use Rust at work.";
        assert_eq!(entails(claim, SURVEY), Ok(()));
        assert_eq!(
            entails(
                "Borrowing rules allow two mutable references.",
                "Borrowing rules allow 2 mutable references."
            ),
            Ok(())
        );
    }

    #[test]
    fn a_wrong_number_is_not_supported() {
        let e = entails(
            "The 2024 survey of 1,200 developers found that 45% of them use Rust at work.",
            SURVEY,
        )
        .unwrap_err();
        assert_eq!(e, "the number 45% is not in the passage");
        // A spelled-out count is a number too.
        let e = entails(
            "Borrowing rules allow three mutable references at a time.",
            "Borrowing rules allow exactly one mutable reference at a time.",
        )
        .unwrap_err();
        assert_eq!(e, "the number 3 is not in the passage");
        // Digits inside an identifier are not a number of the claim.
        assert_eq!(
            entails(
                "The x86_64 target is supported.",
                "Rust supports the x86_64 target."
            ),
            Ok(())
        );
    }

    #[test]
    fn a_negated_claim_against_an_affirmative_passage_is_not_supported() {
        let passage = "The borrow checker enforces these rules at compile time, so data races \
                       are caught at compile time.";
        let e = entails(
            "The borrow checker does not enforce these rules at compile time.",
            passage,
        )
        .unwrap_err();
        assert_eq!(e, "the claim is negated and the passage is not");
        // And the reverse: the passage denies what the claim affirms.
        let e = entails(
            "A reference may outlive the value it points to.",
            "A reference must never outlive the value it points to.",
        )
        .unwrap_err();
        assert_eq!(e, "the passage negates what the claim affirms");
        // Both negated, in other words ("can't" for "cannot"): supported.
        assert_eq!(
            entails(
                "Data races can't compile.",
                "Because of these rules, data races cannot compile."
            ),
            Ok(())
        );
        // A negation elsewhere in the sentence governs other words.
        assert_eq!(
            entails(
                "A reference can be borrowed many times.",
                "A reference cannot outlive its value, but it can be borrowed many times."
            ),
            Ok(())
        );
    }

    #[test]
    fn a_missing_name_is_not_supported() {
        let passage = "Reference counting with Rc enables multiple ownership of one value in \
                       single-threaded code.";
        let e = entails(
            "Reference counting with Arc enables multiple ownership of one value.",
            passage,
        )
        .unwrap_err();
        assert_eq!(e, "\"Arc\" is not named in the passage");
        let e = entails(
            "Reference counting with `Rc::clone` enables multiple ownership.",
            passage,
        )
        .unwrap_err();
        assert_eq!(e, "`Rc::clone` is not in the passage");
        assert_eq!(
            entails(
                "Reference counting with Rc enables multiple ownership.",
                passage
            ),
            Ok(())
        );
    }

    #[test]
    fn too_few_content_terms_is_not_supported() {
        let e = entails(
            "The borrow checker rejects programs with dangling pointers and leaked memory.",
            "The borrow checker rejects programs with dangling references.",
        )
        .unwrap_err();
        assert!(e.starts_with("only 5 of 8 content terms"), "{e}");
        assert!(e.contains("missing: leak, memory, pointer"), "{e}");
    }

    #[test]
    fn escapes_and_markers_are_ignored() {
        let passage = r"Use \[brackets\] and a \* star in `Vec<T>` code.";
        assert_eq!(
            entails(
                r"Use \[brackets\] and a \* star in `Vec<T>` code. [2] [3]",
                passage
            ),
            Ok(())
        );
        assert_eq!(plain_text(r"A \[1\] b. [1]"), "A [1] b.");
    }

    #[test]
    fn a_models_emphasis_and_links_read_as_their_words() {
        assert_eq!(
            plain_text("A **data race** needs _two_ threads; see [the book](https://x.test/b)."),
            "A data race needs two threads; see the book."
        );
        // Inside a word, in code, escaped or standing alone, the characters stay.
        assert_eq!(
            plain_text(r"max_len is 2*3, `*p` and \*args; a * b [not a link] (x)"),
            "max_len is 2*3, `*p` and *args; a * b [not a link] (x)"
        );
        assert_eq!(
            entails(
                "The **`Send`** trait marks types that can move to _another_ thread.",
                "The `Send` trait marks types that can move to another thread."
            ),
            Ok(())
        );
    }

    #[test]
    fn best_span_picks_the_window_that_covers_the_claim() {
        let d = doc(&[
            (
                "Ownership is a set of rules. Values are dropped at scope end.",
                None,
            ),
            (
                "Each value has an owner. There can only be one owner at a time. When the \
                 owner goes out of scope, the value is dropped. Unrelated closing words.",
                None,
            ),
        ]);
        // The claim spans two sentences of the second block: the window is exactly those two.
        let s = best_span(
            "Only one owner at a time exists, and it drops the value when it goes out of scope.",
            &d,
            None,
        )
        .unwrap();
        assert_eq!(
            s.text,
            "There can only be one owner at a time. When the owner goes out of scope, the value is dropped."
        );
        assert_eq!(best_span("Quantum chromodynamics.", &d, None), None);
    }

    #[test]
    fn a_page_restriction_checks_only_that_page() {
        let d = doc(&[
            (
                "Lifetimes are inferred by the compiler with elision rules.",
                Some(1),
            ),
            ("Smart pointers own the data they point to.", Some(2)),
        ]);
        let claim = "The compiler infers lifetimes with elision rules.";
        let on1 = check_claim(claim, &d, Some(1));
        assert_eq!(on1.verdict, Verdict::Supported, "{on1:?}");
        assert_eq!(on1.span.and_then(|s| s.page), Some(1));
        let on2 = check_claim(claim, &d, Some(2));
        assert_eq!(on2.verdict, Verdict::Unsupported);
        assert_eq!(
            on2.reason,
            "nothing on page 2 shares a content term with the claim"
        );
        let on3 = check_claim(claim, &d, Some(3));
        assert_eq!((on3.verdict, on3.span), (Verdict::Unsupported, None));
    }

    #[test]
    fn closest_sentence_restates_the_claim_from_its_passage() {
        let span = Span {
            text: "The 2024 survey of 1,200 developers found that 38.5% of them use Rust at \
                   work. Most respondents said the borrow checker was hard to learn."
                .into(),
            page: None,
        };
        // A wrong figure is replaced by the sentence that has the right one, verbatim.
        let wrong = "The survey of 1,200 developers found that 45% use Rust at work.";
        assert!(entails(wrong, &span.text).is_err());
        let s = closest_sentence(wrong, &span).unwrap();
        assert_eq!(
            s,
            "The 2024 survey of 1,200 developers found that 38.5% of them use Rust at work."
        );
        assert_eq!(entails(&s, &span.text), Ok(()));
        // Nothing close enough: the claim goes rather than being replaced by another.
        assert_eq!(
            closest_sentence("Developers prefer tabs over spaces in Go code.", &span),
            None
        );
    }

    #[test]
    fn numbers_are_normalised() {
        let n = |t: &str| {
            numbers(t)
                .into_iter()
                .map(|n| format!("{}{}", n.value, if n.percent { "%" } else { "" }))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            n("1,000 and 2.50 in 2020-2024."),
            ["1000", "2.5", "2020", "2024"]
        );
        assert_eq!(n("50 percent, twelve, v1.2 and x86"), ["12", "50%"]);
        assert_eq!(n("No one said one of them; exactly one owner."), ["1"]);
    }
}
