//! Follow-up questions on a saved session. A follow-up run loads its parent once (the
//! documents it read, parsed and stored, and its question), takes its first look in those
//! documents instead of the corpus, and its plan says which queries they already answer
//! (not searched again) and which need a new search.

use fathom_parse::ParsedDoc;
use fathom_parse::text::terms;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::parsed::ParsedRef;
use fathom_evidence::best_passages;

/// Documents taken from a parent, at most.
pub const MAX_PARENT_DOCS: usize = 100;

/// The session a follow-up starts from, as loaded (and journaled) when it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Parent {
    pub research_id: String,
    pub query: String,
    /// The documents the parent read, as stored parsed: read again from storage, never
    /// fetched again.
    pub docs: Vec<ParsedRef>,
    /// The fetched bytes of each document (URL, artifact), where the parent kept them.
    #[serde(default)]
    pub raw: Vec<(String, String)>,
    /// The parent's stored report.
    #[serde(default)]
    pub report_file_id: Option<String>,
}

impl Parent {
    /// The stored copy of the document read at `url` (its fetched bytes, else its parsed
    /// text).
    pub fn stored_copy(&self, doc: &ParsedRef) -> String {
        self.raw
            .iter()
            .find(|(u, _)| *u == doc.url)
            .map_or_else(|| doc.file_id.clone(), |(_, f)| f.clone())
    }
}

impl Parent {
    /// The parent described by its saved session record.
    pub fn from_record(record: &Value) -> Parent {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let sources = record["sources"].as_array().cloned().unwrap_or_default();
        let title_of = |url: &str| {
            sources
                .iter()
                .find(|s| s["url"] == url)
                .map(|s| text(&s["title"]))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| url.to_string())
        };
        let mut docs: Vec<ParsedRef> = Vec::new();
        let mut raw: Vec<(String, String)> = Vec::new();
        let mut report_file_id = None;
        for a in record["artifacts"].as_array().into_iter().flatten() {
            let (kind, url, file_id) = (text(&a["kind"]), text(&a["url"]), text(&a["file_id"]));
            if kind == "report" && !file_id.is_empty() {
                report_file_id = Some(file_id);
                continue;
            }
            if url.is_empty() || file_id.is_empty() {
                continue;
            }
            if kind == "raw" {
                if raw.len() < MAX_PARENT_DOCS && !raw.iter().any(|(u, _)| *u == url) {
                    raw.push((url, file_id));
                }
                continue;
            }
            if kind != "parsed" {
                continue;
            }
            if docs.len() < MAX_PARENT_DOCS && !docs.iter().any(|d| d.url == url) {
                docs.push(ParsedRef {
                    title: title_of(&url),
                    url,
                    file_id,
                });
            }
        }
        Parent {
            research_id: text(&record["research_id"]),
            query: text(&record["query"]),
            docs,
            raw,
            report_file_id,
        }
    }
}

/// A follow-up plan's split of its queries: those a passage of the parent's documents
/// answers, and those searched again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FollowUp {
    /// The session followed up.
    pub parent_id: String,
    /// Queries the parent's sources answer: not searched again.
    pub covered: Vec<Covered>,
    /// Queries the parent's sources do not cover: searched.
    pub search: Vec<String>,
}

/// A query the parent's sources answer, and which of them do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Covered {
    pub query: String,
    /// URLs of the parent's documents with a passage that answers it.
    pub sources: Vec<String>,
}

/// Passages of a document looked at per query.
const PASSAGES: usize = 3;

/// Whether a passage of `doc` answers `query`: one passage (a few consecutive sentences)
/// holds at least two thirds of the query's distinct terms (all of them for one or two).
pub fn answers(doc: &ParsedDoc, query: &str) -> bool {
    let mut wanted = terms(query);
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return false;
    }
    best_passages(doc, query, PASSAGES, usize::MAX)
        .iter()
        .any(|p| {
            let held = terms(&p.text);
            let hits = wanted.iter().filter(|t| held.contains(t)).count();
            hits * 3 >= wanted.len() * 2
        })
}

/// Splits `queries` into those the parent's documents answer and those to search.
pub fn coverage(parent_id: &str, queries: &[String], docs: &[(ParsedRef, ParsedDoc)]) -> FollowUp {
    let mut out = FollowUp {
        parent_id: parent_id.to_string(),
        ..Default::default()
    };
    for q in queries {
        let sources: Vec<String> = docs
            .iter()
            .filter(|(_, d)| answers(d, q))
            .map(|(r, _)| r.url.clone())
            .collect();
        if sources.is_empty() {
            out.search.push(q.clone());
        } else {
            out.covered.push(Covered {
                query: q.clone(),
                sources,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(url: &str, text: &str) -> ParsedDoc {
        let (_, blocks) = fathom_parse::text::markdown_blocks(text);
        ParsedDoc::new(url, url, fathom_parse::DocKind::Markdown, blocks)
    }

    #[test]
    fn a_query_is_covered_when_one_passage_holds_most_of_its_terms() {
        let bees = doc(
            "file:///bees.md",
            "Honeybees tell each other where flowers are with the waggle dance. The angle of the dance gives the direction of the food.",
        );
        let r = ParsedRef {
            url: "file:///bees.md".into(),
            title: "Bees".into(),
            file_id: "f".into(),
        };
        let c = coverage(
            "p1",
            &[
                "waggle dance honeybees".into(),
                "waggle dance direction example".into(),
                "how honeybees make wax".into(),
            ],
            &[(r, bees)],
        );
        assert_eq!(c.covered.len(), 2, "{c:?}");
        assert_eq!(c.covered[0].sources, vec!["file:///bees.md".to_string()]);
        assert_eq!(c.search, vec!["how honeybees make wax".to_string()]);
    }

    #[test]
    fn the_parent_is_read_from_its_session_record() {
        let record = json!({
            "research_id": "P", "query": "Q?",
            "sources": [{"url": "u1", "title": "One", "status": "read"}],
            "artifacts": [
                {"kind": "raw", "url": "u1", "file_id": "r1"},
                {"kind": "parsed", "url": "u1", "file_id": "p1"},
                {"kind": "parsed", "url": "u1", "file_id": "p1"},
                {"kind": "parsed", "url": "u2", "file_id": "p2"},
                {"kind": "report", "url": null, "file_id": "rep"}
            ]
        });
        let p = Parent::from_record(&record);
        assert_eq!((p.research_id.as_str(), p.query.as_str()), ("P", "Q?"));
        assert_eq!(p.docs.len(), 2);
        assert_eq!(
            (p.docs[0].title.as_str(), p.docs[0].file_id.as_str()),
            ("One", "p1")
        );
        assert_eq!(p.docs[1].title, "u2");
        assert_eq!(p.report_file_id.as_deref(), Some("rep"));
        assert_eq!(p.stored_copy(&p.docs[0]), "r1");
        assert_eq!(p.stored_copy(&p.docs[1]), "p2");
    }
}
