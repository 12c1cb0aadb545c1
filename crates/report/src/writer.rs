//! The extractive writer: for each outline section it picks relevant, non-redundant sentences
//! from the documents read (BM25 relevance to the question, the section and the heading a
//! sentence stands under, then maximal marginal relevance for diversity) and packs them into
//! bounded report changes. Each section opens with the sentence that best answers it for the
//! question's form (a definition for "what", a mechanism or rule for "how", a cause for
//! "why", both sides for a comparison); a list a chosen item belongs to comes whole; sentences
//! that only point elsewhere ("In Chapter 4 we ...") or are fragments are never quoted.

use std::collections::{BTreeMap, HashMap};

use crate::question::{Form, form_of};
use crate::report::{Patch, Quote, Report, ReportError};
use fathom_parse::ParsedDoc;
use fathom_parse::text::{sentences, terms};

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

/// Items at most taken as one list.
const MAX_LIST: usize = 8;
/// A list item is a short block: at most this many characters.
const LIST_ITEM_CHARS: usize = 160;
/// Share of the best question relevance a sentence needs to be quoted at all: below it, a
/// section says less rather than padding itself with sentences that merely share a word.
const MIN_SHARE: f64 = 0.2;
struct Candidate {
    text: String,
    doc: usize,
    page: Option<u32>,
    terms: Vec<String>,
    // Ordered, so float sums come out bit-identical in every process: a resumed run must
    // choose exactly what an uninterrupted one chose.
    tf: BTreeMap<String, f64>,
    norm: f64,
    dangling: bool,
    /// The heading the sentence stands under, and its terms (with an entry's label).
    heading: String,
    heading_terms: Vec<String>,
    /// The text in lower case, padded with spaces, for phrase tests.
    lower: String,
    narration: bool,
    /// The list it is an item of (an index shared by its items), if any.
    list: Option<usize>,
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
}

fn starts_well(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_uppercase() || c == '`')
}

/// Ends as a statement does: a full stop or an exclamation, perhaps inside a quote or
/// bracket.
fn complete(s: &str) -> bool {
    let end = s.trim_end_matches(['"', '\'', '’', '”', ')', '*', '_']);
    end.ends_with('.') || end.ends_with('!')
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
}

/// The lists of a document worth keeping whole: runs of two to [`MAX_LIST`] short items
/// under one heading (a longer list, or one of long items, is prose: its items are quoted as
/// sentences). Block index → list number.
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

fn candidates(docs: &[ParsedDoc]) -> Vec<Candidate> {
    // A sentence found in several documents (a chapter and an all-in-one print page, say) is
    // credited to the most specific one: the shortest.
    let mut home: HashMap<String, usize> = HashMap::new();
    for (d, doc) in docs.iter().enumerate() {
        for block in &doc.blocks {
            for s in sentences(&block.text) {
                let e = home.entry(s.to_lowercase()).or_insert(d);
                if docs[*e].words > doc.words {
                    *e = d;
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut list_ids = 0;
    for (d, doc) in docs.iter().enumerate() {
        let in_list = lists(doc, &mut list_ids);
        for (b, block) in doc.blocks.iter().enumerate() {
            let list = in_list.get(&b).copied();
            let mut heading_terms = terms(&block.heading);
            // A reference entry's name stands in a short label just before its text (a
            // definition term, a signature): it is the entry's heading.
            if let Some(prev) = b.checked_sub(1).map(|p| &doc.blocks[p])
                && prev.heading == block.heading
                && is_label(&prev.text)
            {
                heading_terms.extend(terms(&prev.text));
            }
            for s in sentences(&block.text) {
                let key = s.to_lowercase();
                // A list's items are quoted as they stand (short, perhaps unpunctuated).
                let fits = match list {
                    Some(_) => s.chars().count() <= MAX_CHARS && !elsewhere(&s),
                    None => quotable(&s),
                };
                // A sentence is quoted from its home document, once; a list item stands with its
                // list even when its words stand elsewhere too (a rule stated again later).
                if !fits || (list.is_none() && home.get(&key) != Some(&d)) {
                    continue;
                }
                if !seen.insert(key) && list.is_none() {
                    continue;
                }
                let terms = terms(&s);
                if terms.is_empty() {
                    continue;
                }
                // An item without its full stop would run into the next sentence quoted.
                let s = if list.is_some() && !complete(&s) {
                    format!("{}.", s.trim_end_matches([';', ',', ':']))
                } else {
                    s
                };
                let mut tf = BTreeMap::new();
                for t in &terms {
                    *tf.entry(t.clone()).or_insert(0.0) += 1.0;
                }
                let norm = tf.values().map(|v: &f64| v * v).sum::<f64>().sqrt();
                let lower = format!(" {} ", s.to_lowercase());
                let dangling = DANGLING.iter().any(|w| lower.contains(w));
                let narration = NARRATION.iter().any(|w| lower.contains(w));
                out.push(Candidate {
                    text: s,
                    doc: d,
                    page: block.page,
                    terms,
                    tf,
                    norm,
                    dangling,
                    heading: block.heading.clone(),
                    heading_terms: heading_terms.clone(),
                    lower,
                    narration,
                    list,
                });
            }
        }
    }
    out
}

struct Bm25 {
    idf: HashMap<String, f64>,
    avg_len: f64,
    /// The weight of a term found in a fifth of the sentences: below it, a term is common.
    common_idf: f64,
}

impl Bm25 {
    fn new(cands: &[Candidate]) -> Bm25 {
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
        }
    }

    /// The largest weight among `query`'s terms: what a match on the heading is worth.
    fn max_idf(&self, query: &[String]) -> f64 {
        query
            .iter()
            .filter_map(|q| self.idf.get(q).copied())
            .fold(0.0, f64::max)
    }

    fn score(&self, c: &Candidate, query: &[String]) -> f64 {
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

fn cosine(a: &Candidate, b: &Candidate) -> f64 {
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
fn answers_form(c: &Candidate, form: &Form, sides: &[Vec<String>]) -> f64 {
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

/// Chooses up to `per_section` quotes for each outline section (a list a chosen item belongs
/// to may add its other items). Deterministic: the same documents in the same order give the
/// same choice.
pub fn draft_sections(
    question: &str,
    outline: &[String],
    docs: &[ParsedDoc],
    per_section: usize,
) -> Vec<(String, Vec<Quote>)> {
    let cands = candidates(docs);
    let bm25 = Bm25::new(&cands);
    let form = form_of(question);
    let sides: Vec<Vec<String>> = match &form {
        Form::Comparison(a, b) => vec![terms(a), terms(b)],
        _ => Vec::new(),
    };
    let form_words = terms(FORM_WORDS);
    let q_terms: Vec<String> = unique(terms(question))
        .into_iter()
        .filter(|t| !form_words.contains(t))
        .collect();
    // How much a sentence is about the question: its own words, and (less) the heading it
    // stands under, which names what a terse reference entry is about.
    let about: Vec<f64> = cands
        .iter()
        .map(|c| {
            let own = bm25.score(c, &q_terms);
            let shared = q_terms
                .iter()
                .filter(|t| c.heading_terms.contains(t))
                .count();
            let under = shared as f64 / q_terms.len().max(1) as f64;
            if own <= 0.0 && under < 0.5 {
                return 0.0;
            }
            own + under * bm25.max_idf(&q_terms)
        })
        .collect();
    // Where in the documents the question is answered: the part (document and heading) whose
    // sentences and heading together hold the most of the question's terms, by weight. A
    // sentence there is worth more than one that shares a word from elsewhere.
    let mut parts: HashMap<(usize, &str), std::collections::BTreeSet<&str>> = HashMap::new();
    for c in &cands {
        let held = parts.entry((c.doc, c.heading.as_str())).or_default();
        held.extend(c.tf.keys().map(String::as_str));
        held.extend(c.heading_terms.iter().map(String::as_str));
    }
    let cover = |held: &std::collections::BTreeSet<&str>| -> f64 {
        q_terms
            .iter()
            .filter(|t| held.contains(t.as_str()))
            .map(|t| bm25.idf.get(t).copied().unwrap_or(0.0))
            .sum()
    };
    let best_part = parts
        .values()
        .map(cover)
        .fold(0.0, f64::max)
        .max(f64::EPSILON);
    let about: Vec<f64> = cands
        .iter()
        .zip(about)
        .map(|(c, a)| {
            let part = cover(&parts[&(c.doc, c.heading.as_str())]) / best_part;
            a * (PART_BASE + (1.0 - PART_BASE) * part)
        })
        .collect();
    let floor = MIN_SHARE * about.iter().cloned().fold(0.0, f64::max);
    let mut used = vec![false; cands.len()];
    // Every sentence quoted so far, in any section: the report never says a thing twice.
    let mut quoted: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for (nth, title) in outline.iter().enumerate() {
        let title_terms = terms(title);
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
        let cue_terms = unique(cue_terms);
        // What this section is about: one side of a comparison when its title names one, else
        // the question's subject.
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
                .filter(|t| bm25.idf.get(*t).is_some_and(|&idf| idf >= bm25.common_idf))
                .cloned()
                .collect(),
        };

        let rel: Vec<f64> = cands
            .iter()
            .zip(&about)
            .map(|(c, &on_topic)| {
                if on_topic <= 0.0 || on_topic < floor {
                    return 0.0;
                }
                let r = on_topic + 0.5 * bm25.score(c, &cue_terms);
                // Short exclamations and asides say little; full statements are preferred.
                // (A list's items are short by nature: the list is the statement.)
                let fullness = match c.list {
                    Some(_) => 1.0,
                    None => (c.terms.len() as f64 / 8.0).min(1.0),
                };
                // An overview of one side wants what is said of it, not the comparison.
                let form_weight = if focus_is_side {
                    1.0
                } else {
                    answers_form(c, &form, &sides)
                };
                // The opening section of any question says what the subject is.
                let opening_section = nth == 0
                    || title_terms
                        .iter()
                        .any(|t| t.starts_with("overview") || t.starts_with("definit"));
                let defines = if opening_section && !focus_is_side {
                    answers_form(c, &Form::Definition, &sides)
                } else {
                    1.0
                };
                let mut r = r * fullness * form_weight.max(defines);
                // A sentence whose subject is what the question (or, for one side of a
                // comparison, the section) is about states something of it.
                let opening: Vec<String> = terms(
                    &c.text
                        .split_whitespace()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                if opening.iter().any(|t| focus.contains(t)) {
                    // One side of a comparison, stated on its own, is what its overview needs.
                    r *= if focus_is_side { 1.8 } else { 1.3 };
                }
                if c.dangling {
                    r *= 0.5;
                }
                if c.narration {
                    r *= 0.6;
                }
                r
            })
            .collect();
        let max_rel = rel.iter().cloned().fold(0.0, f64::max);
        let mut chosen: Vec<usize> = Vec::new();
        let mut picks = 0;
        while picks < per_section && max_rel > 0.0 {
            let mut best: Option<(usize, f64)> = None;
            for (i, c) in cands.iter().enumerate() {
                if used[i] || rel[i] <= 0.0 {
                    continue;
                }
                let redundancy = quoted
                    .iter()
                    .map(|&j| cosine(c, &cands[j]))
                    .fold(0.0, f64::max);
                if redundancy > NEAR_DUPLICATE {
                    continue;
                }
                let mmr = LAMBDA * rel[i] / max_rel - (1.0 - LAMBDA) * redundancy;
                if best.is_none_or(|(_, b)| mmr > b) {
                    best = Some((i, mmr));
                }
            }
            let Some((i, _)) = best else { break };
            // A list comes whole, in its order: its items mean little apart. Its items count
            // towards the section's sentences (the last pick may run over by the rest of a list).
            let members: Vec<usize> = match cands[i].list {
                Some(l) => (0..cands.len())
                    .filter(|&j| cands[j].list == Some(l) && !used[j])
                    .collect(),
                None => vec![i],
            };
            picks += members.len();
            for j in members {
                used[j] = true;
                chosen.push(j);
                quoted.push(j);
            }
        }
        // The section opens with its best answer; the rest follow in document order, so
        // quotes from one source (and a list's items) stay in their own sequence.
        let lead = chosen
            .iter()
            .copied()
            .filter(|&i| cands[i].list.is_none())
            .max_by(|&a, &b| rel[a].total_cmp(&rel[b]).then(b.cmp(&a)));
        chosen.sort();
        if let Some(lead) = lead {
            chosen.retain(|&i| i != lead);
            chosen.insert(0, lead);
        }
        let quotes = chosen
            .into_iter()
            .map(|i| Quote {
                text: cands[i].text.clone(),
                source_url: docs[cands[i].doc].url.clone(),
                source_title: docs[cands[i].doc].title.clone(),
                page: cands[i].page,
                also: Vec::new(),
            })
            .collect();
        out.push((title.clone(), quotes));
    }
    out
}

/// What a section says when no source read covered it.
pub const NOTHING_COVERED: &str = "None of the sources read covered this section.";

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
            current.note = Some(NOTHING_COVERED.into());
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
