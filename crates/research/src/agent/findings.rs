//! A researcher's findings made to stand on what it read. Small models invent URLs, report
//! nothing, or answer in prose: a finding tied to a URL that was not read is matched to the
//! passage it came from or dropped (with a note), and a researcher that read something but
//! reported nothing usable is given the best sentences of what it read instead.

use std::collections::BTreeSet;

use fathom_parse::text::{sentences, terms};
use serde_json::Value;

use crate::state::Finding;
use crate::tools::web::canonical_url;
use fathom_evidence::{Passage, cut};

/// A document a researcher read, with the passages it was shown.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReadDoc {
    pub url: String,
    pub title: String,
    /// The parsed document's artifact.
    pub file_id: String,
    #[serde(default)]
    pub passages: Vec<Passage>,
}

/// Share of a finding's content terms one document's passages must hold for the finding to
/// be credited to that document when the URL it gave was not read.
const MATCH_SHARE: f64 = 0.6;
/// Findings kept from one researcher.
const MAX_FINDINGS: usize = 20;
/// Characters of one finding.
const MAX_FACT: usize = 500;

/// The findings in a researcher's answer, each tied to a document it read, and notes on
/// what had to be changed or dropped.
pub fn findings_of(content: &str, read: &[ReadDoc]) -> (Vec<Finding>, Vec<String>) {
    let mut notes = Vec::new();
    let mut out = Vec::new();
    for (fact, url) in parse(content) {
        if out.len() == MAX_FINDINGS {
            break;
        }
        let fact = cut(fact.trim(), MAX_FACT);
        if fact.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
            continue;
        }
        let wanted = canonical_url(&url);
        if let Some(doc) = read.iter().find(|d| canonical_url(&d.url) == wanted) {
            out.push(Finding {
                fact,
                url: doc.url.clone(),
            });
            continue;
        }
        match source_of(&fact, read) {
            Some(doc) => {
                notes.push(format!(
                    "a finding cited {}, which was not read; it matches a passage of {}",
                    shown(&url),
                    doc.url
                ));
                out.push(Finding {
                    fact,
                    url: doc.url.clone(),
                });
            }
            None => notes.push(format!(
                "a finding cited {}, which was not read, and matches no passage read; dropped",
                shown(&url)
            )),
        }
    }
    (out, notes)
}

/// The best sentences of what was read, as findings: for a researcher whose own were empty
/// or unusable. Round-robin over the documents, at most `max`.
pub fn from_passages(read: &[ReadDoc], max: usize) -> Vec<Finding> {
    let per_doc: Vec<Vec<(String, &str)>> = read
        .iter()
        .map(|d| {
            d.passages
                .iter()
                .flat_map(|p| sentences(&p.text))
                .filter(|s| s.split_whitespace().count() >= 6 && !s.ends_with('…'))
                .map(|s| (s, d.url.as_str()))
                .collect()
        })
        .collect();
    let mut out: Vec<Finding> = Vec::new();
    let longest = per_doc.iter().map(Vec::len).max().unwrap_or(0);
    for rank in 0..longest {
        for doc in &per_doc {
            if out.len() == max {
                return out;
            }
            if let Some((s, url)) = doc.get(rank)
                && !out.iter().any(|f| &f.fact == s)
            {
                out.push(Finding {
                    fact: s.clone(),
                    url: url.to_string(),
                });
            }
        }
    }
    out
}

/// The document whose passages hold the most of the fact's content terms, if enough.
fn source_of<'a>(fact: &str, read: &'a [ReadDoc]) -> Option<&'a ReadDoc> {
    let wanted: BTreeSet<String> = terms(fact).into_iter().collect();
    if wanted.is_empty() {
        return None;
    }
    let mut best: Option<(f64, &ReadDoc)> = None;
    for doc in read {
        let text: String = doc
            .passages
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let have: BTreeSet<String> = terms(&text).into_iter().collect();
        let share =
            wanted.iter().filter(|t| have.contains(*t)).count() as f64 / wanted.len() as f64;
        if share >= MATCH_SHARE && best.is_none_or(|(b, _)| share > b) {
            best = Some((share, doc));
        }
    }
    best.map(|(_, d)| d)
}

/// `(fact, url)` pairs from a findings answer, read tolerantly: `{"findings": [...]}` or a
/// bare list, each item an object with `fact` (or `text`, `claim`, `finding`) and `url` (or
/// `source`), or a plain string (no URL).
fn parse(content: &str) -> Vec<(String, String)> {
    let Some(v) = fathom_llm::parse_loose_json(content) else {
        return Vec::new();
    };
    let items = match &v {
        Value::Array(a) => a.as_slice(),
        Value::Object(m) => match m.get("findings").or_else(|| m.get("facts")) {
            Some(Value::Array(a)) => a.as_slice(),
            _ => std::slice::from_ref(&v),
        },
        _ => return Vec::new(),
    };
    let field = |o: &serde_json::Map<String, Value>, names: &[&str]| {
        names
            .iter()
            .find_map(|n| o.get(*n).and_then(Value::as_str))
            .unwrap_or("")
            .to_string()
    };
    items
        .iter()
        .take(4 * MAX_FINDINGS)
        .filter_map(|item| match item {
            Value::String(s) => Some((s.clone(), String::new())),
            Value::Object(o) => Some((
                field(o, &["fact", "text", "claim", "finding"]),
                field(o, &["url", "source", "source_url"]),
            )),
            _ => None,
        })
        .collect()
}

fn shown(url: &str) -> String {
    if url.trim().is_empty() {
        "no URL".into()
    } else {
        cut(url, 120)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(url: &str, text: &str) -> ReadDoc {
        ReadDoc {
            url: url.into(),
            title: "T".into(),
            file_id: "f".into(),
            passages: vec![Passage {
                text: text.into(),
                page: None,
            }],
        }
    }

    #[test]
    fn findings_with_unread_urls_are_matched_to_their_passage_or_dropped() {
        let read = [
            doc(
                "file:///book/ch04.md",
                "Each value in Rust has an owner. There can only be one owner at a time.",
            ),
            doc(
                "file:///book/ch16.md",
                "Threads can share data through channels and mutexes.",
            ),
        ];
        let answer = r#"Here are my findings:
```json
{"findings": [
  {"fact": "Each value in Rust has exactly one owner at a time.", "url": "https://doc.rust-lang.org/book/ch04.html"},
  {"fact": "Channels let threads share data.", "url": "file:///book/ch16.md"},
  {"fact": "Rust was created at Mozilla in 2006.", "url": "https://invented.example/"}
]}
```"#;
        let (found, notes) = findings_of(answer, &read);
        let got: Vec<(&str, &str)> = found
            .iter()
            .map(|f| (f.fact.as_str(), f.url.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Each value in Rust has exactly one owner at a time.",
                    "file:///book/ch04.md"
                ),
                ("Channels let threads share data.", "file:///book/ch16.md"),
            ]
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("matches a passage of file:///book/ch04.md"));
        assert!(notes[1].contains("invented.example") && notes[1].ends_with("dropped"));
    }

    #[test]
    fn prose_gives_no_findings_and_passages_stand_in() {
        let read = [doc(
            "file:///a.md",
            "Ownership rules are checked by the compiler at build time. Short one.",
        )];
        assert_eq!(
            findings_of("I found that ownership matters.", &read).0,
            vec![]
        );
        let facts = from_passages(&read, 5);
        assert_eq!(facts.len(), 1);
        assert_eq!(
            facts[0].fact,
            "Ownership rules are checked by the compiler at build time."
        );
        assert_eq!(facts[0].url, "file:///a.md");
    }
}
