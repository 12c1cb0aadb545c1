//! The extractive writer: for each outline section it picks relevant, non-redundant sentences
//! from the documents read (BM25 relevance to the question, the section and the heading a
//! sentence stands under, then maximal marginal relevance for diversity) and packs them into
//! bounded report changes. Each section opens with the sentence that best answers it for the
//! question's form (a definition for "what", a mechanism or rule for "how", a cause for
//! "why", both sides for a comparison); a list a chosen item belongs to comes whole; sentences
//! that only point elsewhere ("In Chapter 4 we ...") or are fragments are never quoted.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::question::{Form, form_of};
use crate::report::{Patch, Quote, Report, ReportError};
use fathom_parse::ParsedDoc;
use fathom_parse::text::{sentences, stem, terms};

const MIN_CHARS: usize = 40;
/// Longer sentences are rarely quotable and could not fit a small update limit.
const MAX_CHARS: usize = 360;
const LAMBDA: f64 = 0.7;
/// Above this similarity to a chosen sentence, a candidate says the same thing again.
const NEAR_DUPLICATE: f64 = 0.6;
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Extra terms a section title implies: what sentences under such a heading tend to say.
const CUES: &[(&str, &[&str])] = &[
    ("example", &["example", "instance", "consider", "suppose"]),
    (
        "pitfall",
        &[
            "error", "cannot", "mistake", "problem", "fail", "panic", "bug",
        ],
    ),
    ("error", &["error", "cannot", "compile", "fail", "panic"]),
    (
        "rule",
        &["rule", "must", "only", "allow", "cannot", "always"],
    ),
    ("constraint", &["restriction", "must", "only", "allow"]),
    ("work", &["when", "because", "mean", "call"]),
    (
        "difference",
        &["whereas", "unlike", "difference", "instead", "different"],
    ),
    ("reason", &["because", "reason", "benefit", "why", "allow"]),
    (
        "trade",
        &["cost", "overhead", "performance", "tradeoff", "however"],
    ),
    ("definition", &["call", "mean", "refer", "defin"]),
    ("limitation", &["cannot", "limit", "however", "only"]),
];

/// Words of a section title that say where it stands in a report, not what it is about.
const GENERIC_TITLE_WORDS: &[&str] = &[
    "overview",
    "summary",
    "background",
    "introduction",
    "example",
    "conclusion",
    "detail",
    "key",
    "concept",
    "how",
    "work",
    "when",
    "use",
    "each",
    "other",
];

/// Words that make a sentence point at something the report cannot show.
const DANGLING: &[&str] = &["listing", "following", "below", "above", "figure", "shown"];

/// Phrases of a sentence that only points at another part of its book, never quoted.
const ELSEWHERE: &[&str] = &[
    "this chapter",
    "next chapter",
    "previous chapter",
    "later chapter",
    "next section",
    "previous section",
    "this section",
    "the rest of the book",
    "this tutorial",
];

/// The voice of a guide talking to its reader, not a statement about the subject.
const NARRATION: &[&str] = &[
    " we ",
    "we're",
    "we’re",
    "we'll",
    "we’ll",
    "we will",
    "let's",
    "let’s",
    "luckily",
    "you'll",
    "you’ll",
    "we've",
    "we’ve",
    "as we saw",
    "we saw",
];

/// Words of a question that say what kind of answer it wants rather than what about: the
/// cues of the section titles carry them, and as search terms they pull in any sentence
/// that says "difference" or "work".
const FORM_WORDS: &str = "differ differs difference differences compare comparison work works use uses mean means explain example examples";

/// Signs of a sentence that answers a question of each form.
const DEFINES: &[&str] = &[
    " is a ",
    " is an ",
    " is the ",
    " are a ",
    " are ",
    " refers to ",
    " means ",
    " is called ",
    " is used to ",
    " are used to ",
    " is one ",
    " represents ",
];
const MECHANISM: &[&str] = &[
    " must ",
    " when ",
    " by ",
    " each ",
    " only ",
    " always ",
    " never ",
    " rule",
    " uses ",
    " can ",
    " cannot ",
    " returns ",
    " use ",
];
const CAUSE: &[&str] = &[
    " because ",
    " so that ",
    " since ",
    " reason",
    " advantage",
    " allows ",
    " avoid",
    " prevent",
    " benefit",
    " ensure",
];

/// What a sentence keeps of its relevance when the part it stands in holds none of the
/// question's terms beyond its own (the rest comes with the part's share of them).
const PART_BASE: f64 = 0.4;

/// What each question term a sentence's heading (or entry label) names adds to its
/// relevance, as a share of the term's weight in the sentence itself.
const HEADING_WEIGHT: f64 = 0.7;
/// What a sentence that goes on about its predecessor's subject ("It avoids ...") keeps of
/// the predecessor's relevance.
const CONTINUATION_SHARE: f64 = 0.8;
/// The opening sentences of a part, and what they weigh more in the part that answers best.
const LEAD_SENTENCES: usize = 2;
const LEAD_BONUS: f64 = 0.5;
/// Items at most taken as one list.
const MAX_LIST: usize = 8;
/// A list item is a short block: at most this many characters.
const LIST_ITEM_CHARS: usize = 160;
/// Share of the best question relevance a sentence needs to be quoted at all: below it, a
/// section says less rather than padding itself with sentences that merely share a word.
const MIN_SHARE: f64 = 0.2;
/// A sentence of one document as the writer weighs it: everything about it that depends on
/// its document alone (see [`Weighed`]).
struct Candidate {
    text: String,
    page: Option<u32>,
    terms: Vec<String>,
    // Ordered, so float sums come out bit-identical in every process: a resumed run must
    // choose exactly what an uninterrupted one chose.
    tf: BTreeMap<String, f64>,
    norm: f64,
    dangling: bool,
    /// The terms of the heading the sentence stands under (with an entry's label).
    heading_terms: Arc<[String]>,
    /// The text in lower case, padded with spaces, for phrase tests.
    lower: String,
    narration: bool,
    /// The list it is an item of, numbered within its document, if any.
    doc_list: Option<usize>,
    /// Which sentence of its part (document and heading) it is, counting from 0.
    pos: usize,
    /// The part it stands in (the text under one heading, or one reference entry), numbered
    /// within its document.
    doc_part: usize,
    /// The subject it says what it is of, if it opens that way (see [`defined_subject`]).
    defines: Vec<String>,
    /// The terms of its first three words.
    opening: Vec<String>,
}

/// A candidate placed among all the documents written from: its document, and its part
/// and list numbered over all of them.
struct Placed<'a> {
    c: &'a Candidate,
    doc: usize,
    part: usize,
    list: Option<usize>,
}

impl std::ops::Deref for Placed<'_> {
    type Target = Candidate;
    fn deref(&self) -> &Candidate {
        self.c
    }
}

/// A document's sentences as the writer weighs them. They depend on the document alone, so
/// a caller that writes from the same document again (another question on the same corpus)
/// keeps them instead of splitting and weighing its text again.
pub struct Weighed {
    words: usize,
    /// Every sentence's key (lower case), to tell which document is a sentence's home.
    keys: Vec<String>,
    /// The sentences fit to quote, in order: key, whether in a list, and the candidate
    /// (none when it has no term to weigh, yet it still counts as said).
    fitting: Vec<(String, bool, Option<Candidate>)>,
    parts: usize,
    lists: usize,
}

impl Weighed {
    pub fn of(doc: &ParsedDoc) -> Weighed {
        weigh(doc, &doc.block_sentences())
    }

    /// [`Weighed::of`] with the document's blocks already cut into sentences
    /// ([`ParsedDoc::block_sentences`]).
    pub fn of_cut(doc: &ParsedDoc, cut: &[Vec<String>]) -> Weighed {
        weigh(doc, cut)
    }
}

fn alpha_words(s: &str) -> usize {
    s.split_whitespace()
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .count()
}

/// Whether a sentence reads as a statement on its own: a full sentence of a sensible length,
/// not a question (a FAQ's heading), not a lead-in to something left out (ending in ":"), not
/// a fragment cut where a code block stood, not a pointer to another chapter.
fn quotable(s: &str) -> bool {
    let n = s.chars().count();
    (MIN_CHARS..=MAX_CHARS).contains(&n)
        && alpha_words(s) >= 6
        && complete(s)
        && starts_well(s)
        && s.chars().filter(|&c| c == '`').count() % 2 == 0
        && !elsewhere(s)
        && !not_content(s)
}

/// Opens as a sentence does: a capital, a code span, or a name written as code
/// (`mem::transmute\<T, U\> takes ...`, `-C opt-level` ...), which keeps its lower case.
fn starts_well(s: &str) -> bool {
    let first = s.split_whitespace().next().unwrap_or("");
    s.chars()
        .next()
        .is_some_and(|c| c.is_uppercase() || c == '`')
        || (first.chars().count() > 2
            && first.contains(|c: char| "_:\\<(=".contains(c))
            && first
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '-'))
}

/// Ends as a statement does: a full stop or an exclamation, perhaps inside a quote or
/// bracket.
fn complete(s: &str) -> bool {
    let end = s.trim_end_matches(['"', '\'', '’', '”', ')', '*', '_']);
    end.ends_with('.') || end.ends_with('!')
}

/// Sentences that are about the page or the reader, not the subject: a stub's or a
/// redirect's notice, an edition notice, an exercise for the reader, a note on getting the
/// book. Never quoted.
const NOT_CONTENT: &[&str] = &[
    "redirecting",
    "this page has moved",
    "page is a stub",
    "is a stub,",
    "sending a pr",
    "no longer distributed",
    "edition of the book",
    "of this book is",
    "if you have an internet connection",
    "if you don't have an internet connection",
    "as an exercise",
    "exercise for the reader",
    "see if you can",
    "try it yourself",
    "go ahead and",
];
/// Openings of an exercise ("Try adding code to `main` that ...").
const EXERCISE: &[&str] = &["try ", "now try ", "exercise", "challenge:"];

/// A sentence about the page or the reader rather than the subject (see [`NOT_CONTENT`]).
fn not_content(s: &str) -> bool {
    let lower = s.to_lowercase();
    let lower = lower.trim_start_matches(['*', '_', '⚠', '️', ' ']);
    NOT_CONTENT.iter().any(|p| lower.contains(p)) || EXERCISE.iter().any(|p| lower.starts_with(p))
}

/// A sentence that points at another part of its book ("In Chapter 4 we ..."). A pointer in
/// brackets ("(see later in this section)") is an aside: the sentence still says something.
fn elsewhere(s: &str) -> bool {
    let mut lower = String::with_capacity(s.len());
    let mut depth = 0usize;
    for c in s.to_lowercase().chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => lower.push(c),
            _ => {}
        }
    }
    let words: Vec<&str> = lower.split_whitespace().collect();
    ELSEWHERE.iter().any(|p| lower.contains(p))
        || words.windows(2).any(|w| {
            (w[0] == "chapter" || w[0] == "section")
                && w[1].starts_with(|c: char| c.is_ascii_digit())
        })
}

/// A lead-in to a code block or a list the report leaves out ("Syntax errors, also known as
/// parsing errors, are ...:") still states something when it is a full clause: it is quoted
/// ending in a full stop. One that only announces ("For example:"), or that points at what it
/// introduces ("... is shown by the following loop, which ...:"), stays a fragment: without
/// its list or code it would promise what the report does not show.
fn lead_in_as_statement(s: &str) -> Cow<'_, str> {
    let Some(clause) = s.trim_end().strip_suffix(':') else {
        return Cow::Borrowed(s);
    };
    // A pointer in a trailing phrase of its own (", like this", ", as follows") goes, and the
    // clause before it says what it says.
    let clause = match clause.rsplit_once(',') {
        Some((before, tail)) if points_ahead(tail) && alpha_words(tail) <= 4 => before,
        _ => clause,
    };
    if alpha_words(clause) >= 6 && !clause.ends_with(':') && !points_ahead(clause) {
        Cow::Owned(format!("{}.", clause.trim_end()))
    } else {
        Cow::Borrowed(s)
    }
}

/// Phrases by which a lead-in points at what follows it, wherever they stand ("... the
/// following loop ...:", "... like this instead:"). A word such as "these" alone may point
/// back ("These scenarios can be solved with ...:"), so it is not among them.
const POINTS_AHEAD: &[&str] = &[
    "the following",
    "as follows",
    "below",
    "like this",
    "like so",
    "this example",
    "shown",
];

/// Phrases that point ahead only when they end the lead-in ("... tools such as:"); inside it
/// they name what they name ("objects such as a list").
const POINTS_AHEAD_AT_END: &[&str] = &[
    "such as",
    "for example",
    "for instance",
    "here is",
    "here are",
    "include",
    "including",
];

/// Whether a lead-in's clause points at the list, table or code after it.
fn points_ahead(clause: &str) -> bool {
    let words: String = clause
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ");
    let padded = format!(" {words} ");
    POINTS_AHEAD
        .iter()
        .any(|p| padded.contains(&format!(" {p} ")))
        || POINTS_AHEAD_AT_END
            .iter()
            .any(|p| padded.ends_with(&format!(" {p} ")))
}

/// Whether a sentence goes on about its predecessor's subject: it opens with a pronoun.
fn continues(s: &str) -> bool {
    let first = s.split_whitespace().next().unwrap_or("");
    ["It", "They", "Its", "Their", "This", "These"].contains(&first)
}

/// A short line that names rather than says: a signature or a definition term.
fn is_label(text: &str) -> bool {
    let t = text.trim();
    t.chars().count() <= 100 && !complete(t) && sentences(t).len() <= 1
}

/// A list item worth keeping with its list: a short block (one sentence) of at least three
/// words.
fn list_item(text: &str) -> bool {
    text.chars().count() <= LIST_ITEM_CHARS
        && sentences(text).len() <= 1
        && alpha_words(text) >= 3
        && starts_well(text)
        && !elsewhere(text)
        && !not_content(text)
}

/// The lists of a document worth keeping whole: runs of two to [`MAX_LIST`] short items
/// under one heading (a longer list, or one of long items, is prose: its items are quoted as
/// sentences). Block index → list number. A lead-in before a list ("... divided into six
/// levels:") stays quotable: as a full clause it states something true without its items.
fn lists(doc: &ParsedDoc, next_id: &mut usize) -> HashMap<usize, usize> {
    let mut out = HashMap::new();
    let blocks = &doc.blocks;
    let mut i = 0;
    while i < blocks.len() {
        let run: Vec<usize> = (i..blocks.len())
            .take_while(|&j| blocks[j].item && blocks[j].heading == blocks[i].heading)
            .collect();
        if run.is_empty() {
            i += 1;
            continue;
        }
        if (2..=MAX_LIST).contains(&run.len()) && run.iter().all(|&j| list_item(&blocks[j].text)) {
            for &j in &run {
                out.insert(j, *next_id);
            }
            *next_id += 1;
        }
        i = run[run.len() - 1] + 1;
    }
    out
}

/// Where a sentence stands in its document: what [`Candidate::new`] needs beside its text.
struct Placing {
    page: Option<u32>,
    heading_terms: Arc<[String]>,
    list: Option<usize>,
    pos: usize,
    part: usize,
}

impl Candidate {
    /// A sentence fit to quote, with what the writer weighs it by worked out once: its term
    /// counts and their norm, its lower-case text, the subject it defines, its opening terms,
    /// and whether it points at a figure or narrates.
    fn new(text: String, terms: Vec<String>, at: Placing) -> Candidate {
        let mut tf = BTreeMap::new();
        for t in &terms {
            *tf.entry(t.clone()).or_insert(0.0) += 1.0;
        }
        let norm = tf.values().map(|v: &f64| v * v).sum::<f64>().sqrt();
        let lower = format!(" {} ", text.to_lowercase());
        let defines = defined_subject(&text);
        let opening = fathom_parse::text::terms(
            &text
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        );
        let dangling = DANGLING.iter().any(|w| lower.contains(w));
        let narration = NARRATION.iter().any(|w| lower.contains(w));
        Candidate {
            text,
            page: at.page,
            terms,
            tf,
            norm,
            dangling,
            heading_terms: at.heading_terms,
            lower,
            narration,
            doc_list: at.list,
            pos: at.pos,
            doc_part: at.part,
            defines,
            opening,
        }
    }
}

/// `split`: each of `doc`'s blocks cut into sentences, used for the keys and for the
/// candidates alike.
fn weigh(doc: &ParsedDoc, split: &[Vec<String>]) -> Weighed {
    let keys: Vec<String> = split.iter().flatten().map(|s| s.to_lowercase()).collect();
    // Where each block's sentences start among the keys.
    let first_key: Vec<usize> = split
        .iter()
        .scan(0, |at, block| {
            let first = *at;
            *at += block.len();
            Some(first)
        })
        .collect();
    let mut fitting = Vec::new();
    let mut lists_found = 0;
    let in_list = lists(doc, &mut lists_found);
    // The part a sentence stands in (a heading's text, or a reference entry) and the
    // sentence's place in it.
    let mut part = 0usize;
    let mut pos = 0usize;
    let mut last_heading: Option<&str> = None;
    // A reference entry's name stands in a short label before its text (a definition term, a
    // signature): it is the heading of every paragraph of the entry, up to the next label or
    // heading.
    let mut label: Option<(&str, Vec<String>)> = None;
    for (b, block) in doc.blocks.iter().enumerate() {
        let list = in_list.get(&b).copied();
        if last_heading != Some(block.heading.as_str()) {
            last_heading = Some(block.heading.as_str());
            label = None;
            part += 1;
            pos = 0;
        }
        if !block.item && !block.text.contains(" | ") && is_label(&block.text) {
            label = Some((block.heading.as_str(), terms(&block.text)));
            part += 1;
            pos = 0;
            continue;
        }
        let mut heading_terms = terms(&block.heading);
        if let Some((_, label_terms)) = &label {
            heading_terms.extend(label_terms.iter().cloned());
        }
        // Shared by the block's candidates.
        let heading_terms: Arc<[String]> = heading_terms.into();
        for (i, s) in split[b].iter().enumerate() {
            let at = pos;
            pos += 1;
            let s = lead_in_as_statement(s);
            // A list's items are quoted as they stand (short, perhaps unpunctuated).
            let fits = match list {
                Some(_) => s.chars().count() <= MAX_CHARS && !elsewhere(&s),
                None => quotable(&s),
            };
            if !fits {
                continue;
            }
            let key = keys[first_key[b] + i].clone();
            let terms = terms(&s);
            if terms.is_empty() {
                fitting.push((key, list.is_some(), None));
                continue;
            }
            let s = s.into_owned();
            // An item without its full stop would run into the next sentence quoted.
            let s = if list.is_some() && !complete(&s) {
                format!("{}.", s.trim_end_matches([';', ',', ':']))
            } else {
                s
            };
            let c = Candidate::new(
                s,
                terms,
                Placing {
                    page: block.page,
                    heading_terms: heading_terms.clone(),
                    list,
                    pos: at,
                    part,
                },
            );
            fitting.push((key, list.is_some(), Some(c)));
        }
    }
    Weighed {
        words: doc.words,
        keys,
        fitting,
        parts: part + 1,
        lists: lists_found,
    }
}

/// The candidates of all the documents, in order: a sentence found in several documents (a
/// chapter and an all-in-one print page, say) is quoted from the most specific one (the
/// shortest), once; a list item stands with its list even when its words stand elsewhere
/// too (a rule stated again later).
fn candidates<'a>(docs: &[&'a Weighed]) -> Vec<Placed<'a>> {
    let mut home: HashMap<&str, usize> = HashMap::new();
    for (d, doc) in docs.iter().enumerate() {
        for key in &doc.keys {
            let e = home.entry(key).or_insert(d);
            if docs[*e].words > doc.words {
                *e = d;
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let (mut parts, mut lists) = (0, 0);
    for (d, doc) in docs.iter().enumerate() {
        for (key, listed, c) in &doc.fitting {
            if !listed && home.get(key.as_str()) != Some(&d) {
                continue;
            }
            if !seen.insert(key.as_str()) && !listed {
                continue;
            }
            if let Some(c) = c {
                out.push(Placed {
                    c,
                    doc: d,
                    part: parts + c.doc_part,
                    list: c.doc_list.map(|l| lists + l),
                });
            }
        }
        parts += doc.parts;
        lists += doc.lists;
    }
    out
}

/// A part of a document as one passage, for finding where the question is answered.
struct Part<'a> {
    tf: BTreeMap<&'a str, f64>,
    len: f64,
    /// Its title holds every term of the question.
    named: bool,
}

struct Bm25 {
    idf: HashMap<String, f64>,
    avg_len: f64,
    /// The weight of a term found in a fifth of the sentences: below it, a term is common.
    common_idf: f64,
    /// The weight of a term in no sentence (one only a heading or an entry's label names).
    rare_idf: f64,
}

impl Bm25 {
    fn new(cands: &[Placed]) -> Bm25 {
        let mut df: HashMap<String, f64> = HashMap::new();
        for c in cands {
            for t in c.tf.keys() {
                *df.entry(t.clone()).or_insert(0.0) += 1.0;
            }
        }
        let n = cands.len().max(1) as f64;
        let idf = df
            .into_iter()
            .map(|(t, f)| (t, ((n - f + 0.5) / (f + 0.5) + 1.0).ln()))
            .collect();
        let avg_len = cands.iter().map(|c| c.terms.len()).sum::<usize>() as f64 / n;
        let f = n / 5.0;
        let common_idf = ((n - f + 0.5) / (f + 0.5) + 1.0).ln();
        Bm25 {
            idf,
            avg_len,
            common_idf,
            rare_idf: ((n + 0.5) / 0.5 + 1.0).ln(),
        }
    }

    /// How much finding `term` says: the rarer among the sentences, the more.
    fn weight(&self, term: &str) -> f64 {
        self.idf.get(term).copied().unwrap_or(self.rare_idf)
    }

    fn score(&self, c: &Placed, query: &[String]) -> f64 {
        let len = c.terms.len() as f64;
        query
            .iter()
            .map(|q| {
                let tf = c.tf.get(q).copied().unwrap_or(0.0);
                let idf = self.idf.get(q).copied().unwrap_or(0.0);
                idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.avg_len.max(1.0)))
            })
            .sum()
    }
}

fn cosine(a: &Placed, b: &Placed) -> f64 {
    let dot: f64 =
        a.tf.iter()
            .map(|(t, v)| v * b.tf.get(t).copied().unwrap_or(0.0))
            .sum();
    dot / (a.norm * b.norm).max(f64::EPSILON)
}

fn unique(mut v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.retain(|t| seen.insert(t.clone()));
    v
}

/// How well a sentence answers a question of `form`: 1 for none of the signs, more for each.
fn answers_form(c: &Placed, form: &Form, sides: &[Vec<String>]) -> f64 {
    let signs = |list: &[&str]| list.iter().filter(|p| c.lower.contains(*p)).count() as f64;
    match form {
        Form::Definition | Form::General => 1.0 + 0.5 * signs(DEFINES).min(1.0),
        Form::Mechanism => 1.0 + 0.15 * signs(MECHANISM).min(3.0),
        Form::Reasons => 1.0 + 0.5 * signs(CAUSE).min(1.0),
        // A sentence that names both sides compares them.
        Form::Comparison(..) => {
            let named = sides
                .iter()
                .filter(|side| side.iter().any(|t| c.tf.contains_key(t)))
                .count();
            if named >= 2 { 1.6 } else { 1.0 }
        }
    }
}

/// What a sentence stating what the subject is weighs in a section that wants that.
const DEFINITION_BONUS: f64 = 2.0;
/// Verbs that make a sentence opening with its subject a statement of what the subject is.
const COPULAS: &[&str] = &["is", "are", "refers", "means", "denotes", "describes"];

/// Whether the sentence says what one of `focus` is: its subject (a short noun phrase at the
/// start, perhaps after an article) holds a focus term and a copula follows it ("A module is
/// a file ...", "Packages are a way ..."), the way a manual defines a thing.
fn defines_focus(c: &Placed, focus: &[String]) -> bool {
    let held = focus.iter().filter(|t| c.defines.contains(t)).count();
    held > 0 && held * 2 >= focus.len()
}

/// The stemmed words of the subject a sentence states what it is ("A module is a file ...":
/// `module`), read once per sentence; empty when it does not open that way.
fn defined_subject(text: &str) -> Vec<String> {
    let words: Vec<String> = fathom_parse::text::words(text)
        .into_iter()
        .take(8)
        .collect();
    let article = |w: &String| ["a", "an", "the", "one"].contains(&w.as_str());
    let start = usize::from(words.first().is_some_and(article));
    let Some(verb) =
        (start + 1..words.len().min(start + 4)).find(|&i| COPULAS.contains(&words[i].as_str()))
    else {
        return Vec::new();
    };
    // "is a ...", "are the ...": a kind of thing, not a property ("the sort is stable").
    let names_a_kind = matches!(words[verb].as_str(), "is" | "are")
        .then(|| words.get(verb + 1).is_some_and(article))
        .unwrap_or(true);
    if !names_a_kind {
        return Vec::new();
    }
    words[start..verb].iter().map(|w| stem(w)).collect()
}

/// Chooses up to `per_section` quotes for each outline section (a list a chosen item belongs
/// to may add its other items). Deterministic: the same documents in the same order give the
/// same choice.
pub fn draft_sections(
    question: &str,
    outline: &[String],
    docs: &[ParsedDoc],
    per_section: usize,
) -> Vec<(String, Vec<Quote>)> {
    let weighed: Vec<Weighed> = docs.iter().map(Weighed::of).collect();
    let read: Vec<(&ParsedDoc, &Weighed)> = docs.iter().zip(&weighed).collect();
    draft_weighed(question, outline, &read, per_section)
}

/// [`draft_sections`] from documents already weighed (see [`Weighed`]). In four phases: how
/// much each sentence is about the question ([`about_scores`]); for each section, what it
/// asks for ([`SectionAsk`]) and how well each sentence answers it ([`SectionAsk::relevance`]);
/// the sentences picked, never one said before ([`Picker::pick`]); and their order
/// ([`reading_order`]).
pub fn draft_weighed(
    question: &str,
    outline: &[String],
    docs: &[(&ParsedDoc, &Weighed)],
    per_section: usize,
) -> Vec<(String, Vec<Quote>)> {
    let cands = candidates(&docs.iter().map(|(_, w)| *w).collect::<Vec<_>>());
    let bm25 = Bm25::new(&cands);
    let form = form_of(question);
    let sides: Vec<Vec<String>> = match &form {
        Form::Comparison(a, b) => vec![terms(a), terms(b)],
        _ => Vec::new(),
    };
    let q_terms = question_terms(question);
    let titles: Vec<&str> = docs.iter().map(|(d, _)| d.title.as_str()).collect();
    if !holds_the_matter(&cands, &titles, &q_terms) {
        return outline.iter().map(|t| (t.clone(), Vec::new())).collect();
    }
    let about = about_scores(&cands, &bm25, &q_terms);
    let floor = MIN_SHARE * about.iter().cloned().fold(0.0, f64::max);
    let mut picker = Picker::new(cands.len());
    let mut out = Vec::new();
    for (nth, title) in outline.iter().enumerate() {
        let ask = SectionAsk::of(nth, title, &q_terms, &sides, &bm25);
        let rel: Vec<f64> = cands
            .iter()
            .zip(&about)
            .map(|(c, &on_topic)| {
                if on_topic <= 0.0 || on_topic < floor {
                    0.0
                } else {
                    ask.relevance(c, on_topic, &form, &sides, &bm25)
                }
            })
            .collect();
        let chosen = picker.pick(&cands, &rel, per_section);
        let quotes = reading_order(&cands, &rel, chosen)
            .into_iter()
            .map(|i| quote(docs, &cands[i]))
            .collect();
        out.push((title.clone(), quotes));
    }
    out
}

/// Whether the sources hold what a question asked in another script is about. A question
/// whose own terms are all written in a script the documents do not use ("Rust 如何防止
/// 线程之间的数据竞争？" over an English book), beside the name every document read bears
/// ("rust" in each page of a book about Rust), shares only that name with the
/// sources: quoting what holds it would answer another question, so the report says instead
/// that nothing covered it. A question with a term in the sources' script ("Rust 的所有权
/// (ownership) 是什么？") is answered from what that term finds.
fn holds_the_matter(cands: &[Placed], titles: &[&str], q_terms: &[String]) -> bool {
    let title_terms: Vec<Vec<String>> = titles.iter().map(|t| terms(t)).collect();
    // In how many documents a term stands (candidates come document by document).
    let docs_holding = |t: &String| {
        let mut seen: Vec<usize> = cands
            .iter()
            .filter(|c| c.tf.contains_key(t) || c.heading_terms.contains(t))
            .map(|c| c.doc)
            .collect();
        seen.dedup();
        seen.len()
    };
    let names_the_sources = |t: &String| {
        titles.len() >= 2
            && (title_terms.iter().all(|tt| tt.contains(t)) || docs_holding(t) == titles.len())
    };
    let foreign = |t: &String| t.chars().any(|c| c.is_alphabetic() && c > '\u{024F}');
    let matter: Vec<&String> = q_terms.iter().filter(|t| !names_the_sources(t)).collect();
    matter.is_empty() || matter.iter().any(|t| !foreign(t) || docs_holding(t) > 0)
}

/// Candidate `c` as a quote of its document.
fn quote(docs: &[(&ParsedDoc, &Weighed)], c: &Placed) -> Quote {
    let doc = docs[c.doc].0;
    Quote {
        text: c.text.clone(),
        source_url: doc.url.clone(),
        source_title: doc.title.clone(),
        page: c.page,
        also: Vec::new(),
    }
}

/// Whether candidate `i` goes on about its predecessor's subject ("It avoids ..."), right
/// after it in the same part.
fn follows(cands: &[Placed], i: usize) -> bool {
    i > 0
        && cands[i - 1].part == cands[i].part
        && cands[i - 1].pos + 1 == cands[i].pos
        && continues(&cands[i].text)
}

/// How much each candidate is about the question: its words and heading
/// ([`about_question`]), weighed by how well its part (the text under a heading, or a
/// reference entry) answers the question as a whole; a part's opening sentences weigh more
/// in the part that answers best; a sentence opening with a pronoun shares its
/// predecessor's score.
fn about_scores(cands: &[Placed], bm25: &Bm25, q_terms: &[String]) -> Vec<f64> {
    let part_scores = score_parts(cands, bm25, q_terms);
    let best_part = part_scores
        .values()
        .copied()
        .fold(0.0, f64::max)
        .max(f64::EPSILON);
    let mut about: Vec<f64> = cands
        .iter()
        .map(|c| {
            let a = about_question(c, bm25, q_terms);
            let part = part_scores[&c.part] / best_part;
            let lead = if c.pos < LEAD_SENTENCES {
                1.0 + LEAD_BONUS * part
            } else {
                1.0
            };
            a * (PART_BASE + (1.0 - PART_BASE) * part) * lead
        })
        .collect();
    for i in 1..cands.len() {
        if follows(cands, i) {
            about[i] = about[i].max(CONTINUATION_SHARE * about[i - 1]);
        }
    }
    about
}

/// What one outline section asks for, read from its title beside the question.
struct SectionAsk {
    /// Terms the title cues beyond the question's ("pitfalls" → "error", "panic", ...).
    cue_terms: Vec<String>,
    /// The title's own words beyond the question's, generic titles' words left out.
    own_title: Vec<String>,
    /// What the section is about: one side of a comparison when its title names one, else
    /// the question's subject.
    focus: Vec<String>,
    focus_is_side: bool,
    /// The opening section, or one titled as an overview or definition: it says what the
    /// subject is.
    opening: bool,
}

impl SectionAsk {
    fn of(
        nth: usize,
        title: &str,
        q_terms: &[String],
        sides: &[Vec<String>],
        bm25: &Bm25,
    ) -> SectionAsk {
        // A title of the planner's own in another language cues what its English one does.
        let title_terms = terms(crate::lang::in_english(title));
        let mut cue_terms: Vec<String> = title_terms
            .iter()
            .filter(|t| !q_terms.contains(t))
            .cloned()
            .collect();
        for (key, cues) in CUES {
            if title_terms.iter().any(|t| t.starts_with(key)) {
                cue_terms.extend(cues.iter().map(|c| c.to_string()));
            }
        }
        // The section title's own words beyond the question's ("rule" of "Rules and
        // constraints"); generic titles ("Overview", "Examples") name no matter.
        let own_title: Vec<String> = title_terms
            .iter()
            .filter(|t| !q_terms.contains(t) && !GENERIC_TITLE_WORDS.contains(&t.as_str()))
            .cloned()
            .collect();
        let side_focus = sides
            .iter()
            .find(|side| side.iter().all(|t| title_terms.contains(t)) && sides.len() == 2)
            .filter(|_| {
                !sides
                    .iter()
                    .all(|s| s.iter().all(|t| title_terms.contains(t)))
            });
        let focus_is_side = side_focus.is_some();
        let focus: Vec<String> = match side_focus {
            Some(side) => side.clone(),
            // A term in most sentences ("rust" in a book about Rust) names no subject.
            _ => q_terms
                .iter()
                .filter(|t| bm25.weight(t) >= bm25.common_idf)
                .cloned()
                .collect(),
        };
        let opening = nth == 0
            || title_terms
                .iter()
                .any(|t| t.starts_with("overview") || t.starts_with("definit"));
        SectionAsk {
            cue_terms: unique(cue_terms),
            own_title,
            focus,
            focus_is_side,
            opening,
        }
    }

    /// How well sentence `c`, `on_topic` about the question, answers this section.
    fn relevance(
        &self,
        c: &Placed,
        on_topic: f64,
        form: &Form,
        sides: &[Vec<String>],
        bm25: &Bm25,
    ) -> f64 {
        // A sentence under a heading that names what the section is for ("Ownership Rules"
        // for "Rules and constraints") is where that section's matter stands.
        let titled: f64 = self
            .own_title
            .iter()
            .filter(|t| c.heading_terms.contains(t))
            .map(|t| bm25.weight(t))
            .sum();
        let r = on_topic + 0.5 * bm25.score(c, &self.cue_terms) + HEADING_WEIGHT * titled;
        // Short exclamations and asides say little; full statements are preferred. (A list's
        // items are short by nature: the list is the statement.)
        let fullness = match c.list {
            Some(_) => 1.0,
            None => (c.terms.len() as f64 / 8.0).min(1.0),
        };
        // An overview of one side wants what is said of it, not the comparison.
        let form_weight = if self.focus_is_side {
            1.0
        } else {
            answers_form(c, form, sides)
        };
        let defines = if self.opening && !self.focus_is_side {
            answers_form(c, &Form::Definition, sides)
        } else {
            1.0
        };
        let mut r = r * fullness * form_weight.max(defines);
        // What the subject is, said in so many words, is what an opening wants first.
        let wants_definition =
            self.opening || matches!(form, Form::Definition) || self.focus_is_side;
        if wants_definition && defines_focus(c, &self.focus) {
            r *= DEFINITION_BONUS;
        }
        // A sentence whose subject is what the question (or, for one side of a comparison,
        // the section) is about states something of it.
        if c.opening.iter().any(|t| self.focus.contains(t)) {
            // One side of a comparison, stated on its own, is what its overview needs.
            r *= if self.focus_is_side { 1.8 } else { 1.3 };
        }
        if c.dangling {
            r *= 0.5;
        }
        if c.narration {
            r *= 0.6;
        }
        r
    }
}

/// What has been quoted so far, across sections: the report never says a thing twice.
struct Picker {
    used: Vec<bool>,
    /// Every sentence quoted so far, in any section.
    quoted: Vec<usize>,
    /// Each candidate's greatest likeness to a sentence quoted, over the first `seen[i]` of
    /// `quoted`: brought up to date when it is next weighed, so each pair is compared once.
    likeness: Vec<f64>,
    seen: Vec<usize>,
}

impl Picker {
    fn new(n: usize) -> Picker {
        Picker {
            used: vec![false; n],
            quoted: Vec::new(),
            likeness: vec![0.0; n],
            seen: vec![0; n],
        }
    }

    /// Up to `per_section` sentences for one section by maximal marginal relevance: the most
    /// relevant, less what it repeats of what was quoted. A list comes whole (its items count
    /// towards the section's sentences; the last pick may run over by the rest of a list),
    /// and a sentence that goes on about its predecessor's subject comes with it.
    fn pick(&mut self, cands: &[Placed], rel: &[f64], per_section: usize) -> Vec<usize> {
        let max_rel = rel.iter().cloned().fold(0.0, f64::max);
        let mut chosen: Vec<usize> = Vec::new();
        let mut picks = 0;
        while picks < per_section && max_rel > 0.0 {
            let mut best: Option<(usize, f64)> = None;
            for (i, c) in cands.iter().enumerate() {
                // A sentence that goes on from one quoted in another section would stand
                // without what it refers to.
                let orphan = follows(cands, i) && self.used[i - 1] && !chosen.contains(&(i - 1));
                if self.used[i] || rel[i] <= 0.0 || orphan {
                    continue;
                }
                for &j in &self.quoted[self.seen[i]..] {
                    self.likeness[i] = self.likeness[i].max(cosine(c, &cands[j]));
                }
                self.seen[i] = self.quoted.len();
                let redundancy = self.likeness[i];
                if redundancy > NEAR_DUPLICATE {
                    continue;
                }
                let mmr = LAMBDA * rel[i] / max_rel - (1.0 - LAMBDA) * redundancy;
                if best.is_none_or(|(_, b)| mmr > b) {
                    best = Some((i, mmr));
                }
            }
            let Some((i, _)) = best else { break };
            let members: Vec<usize> = match cands[i].list {
                Some(l) => (0..cands.len())
                    .filter(|&j| cands[j].list == Some(l) && !self.used[j])
                    .collect(),
                None if follows(cands, i) && !self.used[i - 1] => vec![i - 1, i],
                None => vec![i],
            };
            picks += members.len();
            for j in members {
                self.used[j] = true;
                chosen.push(j);
                self.quoted.push(j);
            }
        }
        chosen
    }
}

/// A section's sentences as they are read: its best answer first (with the sentences that go
/// on from it), the rest in document order, so quotes from one source (and a list's items)
/// stay in their own sequence.
fn reading_order(cands: &[Placed], rel: &[f64], mut chosen: Vec<usize>) -> Vec<usize> {
    let lead = chosen
        .iter()
        .copied()
        .filter(|&i| cands[i].list.is_none() && !follows(cands, i))
        .max_by(|&a, &b| rel[a].total_cmp(&rel[b]).then(b.cmp(&a)));
    chosen.sort();
    if let Some(lead) = lead {
        let at = chosen.iter().position(|&i| i == lead).unwrap_or(0);
        let run = 1 + chosen[at + 1..]
            .iter()
            .zip(lead + 1..)
            .take_while(|&(&j, next)| j == next && follows(cands, j))
            .count();
        let moved: Vec<usize> = chosen.drain(at..at + run).collect();
        chosen.splice(0..0, moved);
    }
    chosen
}

/// How much a sentence is about the question: its own words, and (less) the heading it stands
/// under, which names what a terse reference entry is about. Nothing when it shares no word
/// and its heading names less than half of what is asked.
fn about_question(c: &Placed, bm25: &Bm25, q_terms: &[String]) -> f64 {
    let own = bm25.score(c, q_terms);
    let named: Vec<&String> = q_terms
        .iter()
        .filter(|t| c.heading_terms.contains(t))
        .collect();
    if own <= 0.0 && named.len() * 2 < q_terms.len() {
        return 0.0;
    }
    own + HEADING_WEIGHT * named.into_iter().map(|t| bm25.weight(t)).sum::<f64>()
}

/// The terms of a question that say what it is about: its own, without the words that say
/// what kind of answer it wants ([`FORM_WORDS`]).
fn question_terms(question: &str) -> Vec<String> {
    let form_words = terms(FORM_WORDS);
    unique(terms(question))
        .into_iter()
        .filter(|t| !form_words.contains(t))
        .collect()
}

/// Parts at most a direct answer quotes from.
const ANSWER_PARTS: usize = 3;

/// A direct answer, for a question one passage answers: the part of the documents that answers
/// best (see [`score_parts`]), quoted in its own order, from its start unless the answer stands
/// further in (the run of up to `sentences` sentences most about the question, its opening
/// preferred); a list comes whole, with its lead-in. When that part says less than
/// `sentences`, the next best parts go on. Deterministic, like [`draft_weighed`].
pub fn draft_answer(
    question: &str,
    docs: &[(&ParsedDoc, &Weighed)],
    sentences: usize,
) -> Vec<Quote> {
    let cands = candidates(&docs.iter().map(|(_, w)| *w).collect::<Vec<_>>());
    let bm25 = Bm25::new(&cands);
    let q_terms = question_terms(question);
    let titles: Vec<&str> = docs.iter().map(|(d, _)| d.title.as_str()).collect();
    if !holds_the_matter(&cands, &titles, &q_terms) {
        return Vec::new();
    }
    let mut ranked: Vec<(usize, f64)> = score_parts(&cands, &bm25, &q_terms)
        .into_iter()
        .filter(|(_, score)| *score > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // How much each sentence is about the question: its words, and (less) its heading's.
    let about: Vec<f64> = cands
        .iter()
        .map(|c| about_question(c, &bm25, &q_terms))
        .collect();
    // The sentence most about the question, wherever it stands, has a place in the answer
    // even when the best passage is elsewhere.
    let top = (0..cands.len())
        .filter(|&i| about[i] > 0.0)
        .max_by(|&a, &b| about[a].total_cmp(&about[b]).then(b.cmp(&a)));
    let mut chosen: Vec<usize> = Vec::new();
    for &(part, _) in ranked.iter().take(ANSWER_PARTS) {
        let reserved =
            usize::from(top.is_some_and(|t| !chosen.contains(&t) && cands[t].part != part));
        let room = sentences.saturating_sub(chosen.len() + reserved);
        if room == 0 {
            break;
        }
        let members: Vec<usize> = (0..cands.len())
            .filter(|&i| cands[i].part == part)
            .collect();
        if members.is_empty() {
            continue;
        }
        let width = room.min(members.len());
        let best = members.iter().map(|&i| about[i]).fold(0.0, f64::max);
        // The window of `width` sentences most about the question; the part's opening (what
        // the passage is about) is worth half its best sentence more.
        let start = (0..=members.len() - width)
            .max_by(|&a, &b| {
                let score = |s: usize| {
                    members[s..s + width].iter().map(|&i| about[i]).sum::<f64>()
                        + if s == 0 { LEAD_BONUS * best } else { 0.0 }
                };
                score(a).total_cmp(&score(b)).then(b.cmp(&a))
            })
            .unwrap_or(0);
        // A sentence that goes on from the one before it ("It ...") starts with that one.
        let start = if start > 0 && continues(&cands[members[start]].text) {
            start - 1
        } else {
            start
        };
        for &i in &members[start..(start + width).min(members.len())] {
            // A list comes whole, its lead-in first.
            let whole: Vec<usize> = match cands[i].list {
                Some(l) => (0..cands.len())
                    .filter(|&j| cands[j].list == Some(l))
                    .collect(),
                None => vec![i],
            };
            for j in whole {
                if !chosen.contains(&j) {
                    chosen.push(j);
                }
            }
        }
    }
    if let Some(t) = top
        && !chosen.contains(&t)
    {
        chosen.push(t);
    }
    chosen.into_iter().map(|i| quote(docs, &cands[i])).collect()
}

/// Each part (the text under a heading, or one reference entry) scored as one passage for the
/// question's terms: BM25 over its title and its sentences together, and a part whose title
/// names everything asked about (the reference entry of the very function asked about) is
/// the question's home, however long it runs.
fn score_parts(cands: &[Placed], bm25: &Bm25, q_terms: &[String]) -> HashMap<usize, f64> {
    let idf = |t: &String| bm25.weight(t);
    let mut parts: HashMap<usize, Part> = HashMap::new();
    for c in cands {
        let part = parts.entry(c.part).or_insert_with(|| {
            let mut tf = BTreeMap::new();
            for t in c.heading_terms.iter() {
                *tf.entry(t.as_str()).or_insert(0.0) += 1.0;
            }
            Part {
                tf,
                len: c.heading_terms.len() as f64,
                named: !q_terms.is_empty() && q_terms.iter().all(|q| c.heading_terms.contains(q)),
            }
        });
        for (t, n) in &c.tf {
            *part.tf.entry(t.as_str()).or_insert(0.0) += n;
        }
        part.len += c.terms.len() as f64;
    }
    let avg_part = parts.values().map(|p| p.len).sum::<f64>() / parts.len().max(1) as f64;
    let part_score = |p: &Part| -> f64 {
        // A part whose title names everything the question asks about (the reference entry
        // of the very function asked about) is the question's home, however long it runs.
        let home = if p.named {
            q_terms.iter().map(idf).sum()
        } else {
            0.0
        };
        let body: f64 = q_terms
            .iter()
            .map(|q| {
                let f = p.tf.get(q.as_str()).copied().unwrap_or(0.0);
                idf(q) * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * p.len / avg_part.max(1.0)))
            })
            .sum();
        home + body
    };
    parts.iter().map(|(k, p)| (*k, part_score(p))).collect()
}

/// Share of the shorter sentence's content terms the longer must hold for the two to say the
/// same thing.
const REPEAT_OVERLAP: f64 = 0.8;

/// Removes every sentence that says again what an earlier one (in this section or one
/// before) already said, keeping the first; returns the ones that went, with their section.
/// Small models restate their findings in every section.
pub fn drop_repeats(sections: &mut [(String, Vec<Quote>)]) -> Vec<(String, String)> {
    let mut seen: Vec<std::collections::BTreeSet<String>> = Vec::new();
    let mut dropped = Vec::new();
    for (title, quotes) in sections.iter_mut() {
        quotes.retain(|q| {
            let t: std::collections::BTreeSet<String> = terms(&q.text).into_iter().collect();
            let repeat = seen.iter().any(|s| {
                let shorter = s.len().min(t.len());
                if shorter < 3 {
                    return *s == t;
                }
                s.intersection(&t).count() as f64 >= REPEAT_OVERLAP * shorter as f64
            });
            if repeat {
                dropped.push((title.clone(), q.text.clone()));
            } else {
                seen.push(t);
            }
            !repeat
        });
    }
    dropped
}

/// Packs each section's quotes into changes the report accepts under `limit`. A quote that
/// cannot fit any change on its own is left out.
pub fn pack_patches(
    report: &Report,
    sections: &[(String, Vec<Quote>)],
    limit: usize,
) -> Vec<Patch> {
    let mut sim = report.clone();
    let mut out = Vec::new();
    for (title, quotes) in sections {
        let mut current = Patch {
            section: title.clone(),
            quotes: Vec::new(),
            note: None,
        };
        for q in quotes {
            let mut trial = current.clone();
            trial.quotes.push(q.clone());
            match sim.clone().apply(&trial, limit) {
                Ok(_) => current = trial,
                Err(ReportError::TooLarge { .. }) if !current.quotes.is_empty() => {
                    sim.apply(&current, limit).ok();
                    out.push(current);
                    current = Patch {
                        section: title.clone(),
                        quotes: vec![q.clone()],
                        note: None,
                    };
                    if sim.clone().apply(&current, limit).is_err() {
                        current.quotes.clear();
                    }
                }
                Err(_) => {}
            }
        }
        if current.quotes.is_empty() && !sim.sections.iter().any(|s| &s.title == title) {
            // What a section says when no source read covered it.
            current.note = Some(crate::lang::words(&report.language).nothing_covered.into());
        }
        if !current.quotes.is_empty() || current.note.is_some() {
            sim.apply(&current, limit).ok();
            out.push(current);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quote(text: &str) -> Quote {
        Quote {
            text: text.into(),
            source_url: "file:///w.md".into(),
            source_title: "W".into(),
            page: None,
            also: Vec::new(),
        }
    }

    #[test]
    fn a_sentence_said_again_in_any_section_is_left_out() {
        let mut sections = vec![
            (
                "Intro".to_string(),
                vec![
                    quote("The waggle dance tells nestmates the direction of food."),
                    quote("The waggle dance tells nestmates the direction of food."),
                ],
            ),
            (
                "Details".to_string(),
                vec![
                    quote("The waggle dance tells nestmates the direction of the food source."),
                    quote("Distance is measured by optic flow during the flight."),
                ],
            ),
        ];
        assert_eq!(drop_repeats(&mut sections).len(), 2);
        let left: Vec<&str> = sections
            .iter()
            .flat_map(|(_, q)| q.iter().map(|q| q.text.as_str()))
            .collect();
        assert_eq!(
            left,
            [
                "The waggle dance tells nestmates the direction of food.",
                "Distance is measured by optic flow during the flight."
            ]
        );
    }
}
