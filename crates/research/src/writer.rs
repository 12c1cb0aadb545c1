//! The extractive writer: for each outline section it picks relevant, non-redundant sentences
//! from the documents read (BM25 relevance to the question and the section, then maximal
//! marginal relevance for diversity) and packs them into bounded report changes.

use std::collections::{BTreeMap, HashMap};

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
}

fn quotable(s: &str) -> bool {
    let n = s.chars().count();
    let alpha_words = s
        .split_whitespace()
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .count();
    (MIN_CHARS..=MAX_CHARS).contains(&n)
        && alpha_words >= 6
        && !s.ends_with(':')
        && s.chars()
            .next()
            .is_some_and(|c| c.is_uppercase() || c == '`')
        && s.chars().filter(|&c| c == '`').count() % 2 == 0
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
    for (d, doc) in docs.iter().enumerate() {
        for block in &doc.blocks {
            for s in sentences(&block.text) {
                let key = s.to_lowercase();
                if !quotable(&s) || home.get(&key) != Some(&d) || !seen.insert(key) {
                    continue;
                }
                let terms = terms(&s);
                if terms.is_empty() {
                    continue;
                }
                let mut tf = BTreeMap::new();
                for t in &terms {
                    *tf.entry(t.clone()).or_insert(0.0) += 1.0;
                }
                let norm = tf.values().map(|v: &f64| v * v).sum::<f64>().sqrt();
                let lower = s.to_lowercase();
                let dangling = DANGLING.iter().any(|w| lower.contains(w));
                out.push(Candidate {
                    text: s,
                    doc: d,
                    page: block.page,
                    terms,
                    tf,
                    norm,
                    dangling,
                });
            }
        }
    }
    out
}

struct Bm25 {
    idf: HashMap<String, f64>,
    avg_len: f64,
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
        Bm25 { idf, avg_len }
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

/// Chooses up to `per_section` quotes for each outline section. Deterministic: the same
/// documents in the same order give the same choice.
pub fn draft_sections(
    question: &str,
    outline: &[String],
    docs: &[ParsedDoc],
    per_section: usize,
) -> Vec<(String, Vec<Quote>)> {
    let cands = candidates(docs);
    let bm25 = Bm25::new(&cands);
    let q_terms = unique(terms(question));
    let mut used = vec![false; cands.len()];
    // Every sentence quoted so far, in any section: the report never says a thing twice.
    let mut quoted: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for title in outline {
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
        let rel: Vec<f64> = cands
            .iter()
            .map(|c| {
                let on_topic = bm25.score(c, &q_terms);
                if on_topic <= 0.0 {
                    return 0.0;
                }
                let r = on_topic + 0.5 * bm25.score(c, &cue_terms);
                // Short exclamations and asides say little; full statements are preferred.
                let fullness = (c.terms.len() as f64 / 8.0).min(1.0);
                let r = r * fullness;
                if c.dangling { r * 0.5 } else { r }
            })
            .collect();
        let max_rel = rel.iter().cloned().fold(0.0, f64::max);
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < per_section && max_rel > 0.0 {
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
            used[i] = true;
            chosen.push(i);
            quoted.push(i);
        }
        // Read in document order, so quotes from one source stay in its own sequence.
        chosen.sort();
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
