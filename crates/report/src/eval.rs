//! How trustworthy a finished report's citations are, measured in code, after ALCE (Gao et
//! al., "Enabling Large Language Models to Generate Text with Citations", 2023), per sentence:
//! - fabricated: markers `[n]` that name no listed source, or a source that was never read;
//! - citation precision: cited sentences their first cited source supports, over cited
//!   sentences. Support is [`fathom_evidence::check_claim`]: the best-matching passage of the
//!   document (of the cited page, for a PDF page source) must carry the sentence's numbers,
//!   names and negation and most of its content terms;
//! - citation recall: claim sentences with a supporting citation, over claim sentences (every
//!   sentence of the sections except the writer's fixed notes).
//!
//! [`facts`] measures what the report says against a hand-written answer key: key-fact
//! recall and whether the right page is cited.

pub mod facts;

pub use facts::{
    FactCheck, FactTotals, KeyFactQuestion, KeyFactsError, check_key_facts, parse_key_facts,
};

use std::collections::HashMap;

use serde::Serialize;

use crate::report::{Report, citations};
use fathom_evidence::{DocSentences, Verdict};
use fathom_parse::ParsedDoc;
use fathom_parse::text::sentences;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CitationCheck {
    /// Citation markers in the report.
    pub markers: usize,
    /// Markers naming no listed source, or a source that was not read.
    pub fabricated: usize,
    /// Sentences carrying at least one marker.
    pub cited_sentences: usize,
    /// Cited sentences their first cited source (the first marker naming a source read)
    /// supports.
    pub supported: usize,
    /// Sentences of the sections that make a claim: all but the writer's fixed notes.
    pub claim_sentences: usize,
}

impl CitationCheck {
    pub fn add(&mut self, o: CitationCheck) {
        self.markers += o.markers;
        self.fabricated += o.fabricated;
        self.cited_sentences += o.cited_sentences;
        self.supported += o.supported;
        self.claim_sentences += o.claim_sentences;
    }
    pub fn fabricated_rate(&self) -> f64 {
        ratio(self.fabricated, self.markers)
    }
    /// Citation precision: supported over cited sentences (0 when nothing is cited).
    pub fn precision(&self) -> f64 {
        ratio(self.supported, self.cited_sentences)
    }
    /// Citation recall: supported over claim sentences (0 when there is no claim).
    pub fn recall(&self) -> f64 {
        ratio(self.supported, self.claim_sentences)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Checks every sentence of `report` against the documents that were read.
pub fn check_citations(report: &Report, read: &[ParsedDoc]) -> CitationCheck {
    let mut out = CitationCheck::default();
    // Each document (or page) is read sentence by sentence once, for every claim citing it.
    let mut readings: HashMap<(usize, Option<u32>), DocSentences> = HashMap::new();
    for paragraph in report.sections.iter().flat_map(|s| &s.paragraphs) {
        // A note is a paragraph of its own; whole, since "_Note._" splits after the period.
        if is_writer_note(paragraph) {
            continue;
        }
        for sentence in paragraph_sentences(paragraph) {
            out.claim_sentences += 1;
            let markers = citations(&sentence);
            if markers.is_empty() {
                continue;
            }
            out.cited_sentences += 1;
            out.markers += markers.len();
            let mut first_doc = None;
            for n in markers {
                let doc = n
                    .checked_sub(1)
                    .and_then(|i| report.sources.get(i))
                    .and_then(|s| {
                        let url = s.url.split("#page=").next().unwrap_or(&s.url);
                        read.iter().position(|d| d.url == url).map(|d| (d, s.page))
                    });
                match doc {
                    Some(d) => {
                        first_doc.get_or_insert(d);
                    }
                    None => out.fabricated += 1,
                }
            }
            if let Some((doc, page)) = first_doc
                && readings
                    .entry((doc, page))
                    .or_insert_with(|| DocSentences::of(&read[doc], page))
                    .check(&sentence, page)
                    .verdict
                    == Verdict::Supported
            {
                out.supported += 1;
            }
        }
    }
    out
}

/// A fixed note as the report stores it: the note itself, set in italics (`_note_`). What
/// the writers put in a section in place of claims, word for word (the offline writer's note
/// for a section nothing covered, in any language: `crate::writer::pack_patches`), is not a
/// claim, so not counted against recall.
fn is_writer_note(paragraph: &str) -> bool {
    let s = paragraph.trim();
    let bare = s
        .strip_prefix('_')
        .and_then(|s| s.strip_suffix('_'))
        .unwrap_or(s);
    crate::lang::nothing_covered_notes().any(|n| n == bare)
}

/// A paragraph's sentences, each with the markers that follow it (`text. [1]`).
fn paragraph_sentences(paragraph: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in sentences(paragraph) {
        let only_markers = s
            .split_whitespace()
            .all(|w| w.starts_with('[') && w.ends_with(']'));
        match out.last_mut() {
            // "Text. [1] Next." splits as "Text." and "[1] Next.": the marker goes back.
            Some(prev) if only_markers => prev.push_str(&format!(" {s}")),
            _ => out.push(s),
        }
    }
    // Leading markers of a sentence belong to the one before it.
    let mut fixed: Vec<String> = Vec::new();
    for s in out {
        let mut rest = s.as_str();
        let mut moved = String::new();
        while let Some(stripped) = rest.strip_prefix('[') {
            match stripped.find(']') {
                Some(end) if stripped[..end].chars().all(|c| c.is_ascii_digit()) => {
                    moved.push_str(&format!(" [{}]", &stripped[..end]));
                    rest = stripped[end + 1..].trim_start();
                }
                _ => break,
            }
        }
        if let Some(prev) = fixed.last_mut() {
            prev.push_str(&moved);
        }
        if !rest.is_empty() {
            fixed.push(rest.to_string());
        }
    }
    fixed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::pack_patches;

    #[test]
    fn the_offline_writers_note_is_not_a_claim() {
        // The note comes from the writer itself, so a change of its wording shows up here.
        let mut report = Report::new("Q");
        for p in pack_patches(&report, &[("Empty".to_string(), Vec::new())], 1000) {
            report.apply(&p, 1000).unwrap();
        }
        assert_eq!(report.sections[0].paragraphs.len(), 1, "{report:?}");
        assert_eq!(check_citations(&report, &[]), CitationCheck::default());
    }

    #[test]
    fn markers_stay_with_their_sentence() {
        assert_eq!(
            paragraph_sentences("One here. [1] Two there. [2] [3] Three."),
            ["One here. [1]", "Two there. [2] [3]", "Three."]
        );
    }
}
