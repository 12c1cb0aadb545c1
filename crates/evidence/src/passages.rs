//! The best passages of a document for a query: what a researcher is shown of each search
//! result and of each page it reads, so that even a model that never reads a page itself
//! sees the sentences that matter, and a short prompt carries them.

use std::collections::{BTreeMap, BTreeSet};

use fathom_parse::ParsedDoc;
use fathom_parse::text::terms;

use crate::sentence_blocks;
use serde::{Deserialize, Serialize};

/// A few consecutive sentences of one block of a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    pub text: String,
    /// The page it is on (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
}

/// Sentences per passage.
const WINDOW: usize = 3;

struct Window {
    text: String,
    page: Option<u32>,
    /// Index of its first sentence in document order.
    first: usize,
    last: usize,
    terms: BTreeSet<String>,
}

/// Up to `k` passages of `doc` that best match `query` (distinct query terms they hold,
/// weighted by how rare each is in the document), none overlapping another, each cut to
/// `max_chars`, in document order. Deterministic. Empty when nothing matches; then the
/// document's opening is the best there is and [`opening`] gives it.
pub fn best_passages(doc: &ParsedDoc, query: &str, k: usize, max_chars: usize) -> Vec<Passage> {
    let query: BTreeSet<String> = terms(query).into_iter().collect();
    if query.is_empty() || k == 0 {
        return Vec::new();
    }
    let windows = windows(doc);
    // How many windows hold each query term: a term found everywhere tells little.
    let mut df: BTreeMap<&str, f64> = BTreeMap::new();
    for w in &windows {
        for t in query.iter().filter(|t| w.terms.contains(*t)) {
            *df.entry(t.as_str()).or_default() += 1.0;
        }
    }
    let n = windows.len().max(1) as f64;
    let mut scored: Vec<(f64, usize)> = windows
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let score: f64 = query
                .iter()
                .filter(|t| w.terms.contains(*t))
                .map(|t| (1.0 + n / df.get(t.as_str()).copied().unwrap_or(1.0)).ln())
                .sum();
            (score > 0.0).then_some((score, i))
        })
        .collect();
    // Best first; ties go to the earlier passage.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut chosen: Vec<&Window> = Vec::new();
    for (_, i) in scored {
        let w = &windows[i];
        if chosen.iter().all(|c| w.last < c.first || w.first > c.last) {
            chosen.push(w);
            if chosen.len() == k {
                break;
            }
        }
    }
    chosen.sort_by_key(|w| w.first);
    chosen
        .into_iter()
        .map(|w| Passage {
            text: cut(&w.text, max_chars),
            page: w.page,
        })
        .collect()
}

/// The document's first `max_chars` of text, as one passage.
pub fn opening(doc: &ParsedDoc, max_chars: usize) -> Option<Passage> {
    let block = doc.blocks.iter().find(|b| !b.text.trim().is_empty())?;
    Some(Passage {
        text: cut(&block.text, max_chars),
        page: block.page,
    })
}

/// Windows of up to [`WINDOW`] consecutive sentences, each within one block.
fn windows(doc: &ParsedDoc) -> Vec<Window> {
    let mut out = Vec::new();
    for block in sentence_blocks(doc, None, None) {
        let sents = &block.sentences;
        let starts = sents.len().saturating_sub(WINDOW - 1).max(1);
        for s in 0..starts.min(sents.len()) {
            let part = &sents[s..(s + WINDOW).min(sents.len())];
            let text = part.join(" ");
            out.push(Window {
                terms: terms(&text).into_iter().collect(),
                text,
                page: block.page,
                first: block.first + s,
                last: block.first + s + part.len() - 1,
            });
        }
    }
    out
}

/// `text` cut to at most `max` characters, at a word boundary, marked when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max.saturating_sub(1)).collect();
    // Back to the last space, unless that loses more than half of what may be kept.
    let head = match head.rfind(char::is_whitespace) {
        Some(i) if head[..i].chars().count() > max / 2 => &head[..i],
        _ => head.as_str(),
    };
    format!("{}…", head.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fathom_parse::text::Block;

    fn doc(blocks: &[&str]) -> ParsedDoc {
        let blocks: Vec<Block> = blocks
            .iter()
            .map(|t| Block {
                heading: String::new(),
                text: t.to_string(),
                page: None,
                item: false,
            })
            .collect();
        ParsedDoc::new("file:///d.md", "D", fathom_parse::DocKind::Markdown, blocks)
    }

    #[test]
    fn the_passages_holding_the_query_are_chosen_in_document_order() {
        let d = doc(&[
            "Cargo is the build tool. It downloads crates. It runs tests.",
            "The borrow checker enforces ownership rules. References must not outlive \
             their owner. Moves transfer ownership.",
            "Unrelated text about gardening. Tomatoes like sun.",
            "Ownership is checked at compile time, so there is no garbage collector.",
        ]);
        let got = best_passages(
            &d,
            "how does ownership work without a garbage collector",
            2,
            500,
        );
        assert_eq!(got.len(), 2);
        assert!(got[0].text.starts_with("The borrow checker"), "{got:?}");
        assert!(got[1].text.contains("no garbage collector"), "{got:?}");
        assert!(best_passages(&d, "quantum chromodynamics", 2, 500).is_empty());
        assert_eq!(
            opening(&d, 20).unwrap().text,
            "Cargo is the build…",
            "cut at a word boundary"
        );
    }
}
