//! How trustworthy a finished report's citations are, measured in code:
//! - fabricated: markers `[n]` that name no listed source, or a source that was never read;
//! - support: the share of cited sentences whose content the cited document contains (at
//!   least [`SUPPORT_SHARE`] of the sentence's content terms appear in it; for a PDF page
//!   source, in that page).

use std::collections::HashSet;

use serde::Serialize;

use crate::report::{Report, citations};
use fathom_parse::ParsedDoc;
use fathom_parse::text::{sentences, terms};

/// Share of a sentence's content terms the cited document must contain.
pub const SUPPORT_SHARE: f64 = 0.8;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CitationCheck {
    /// Citation markers in the report.
    pub markers: usize,
    /// Markers naming no listed source, or a source that was not read.
    pub fabricated: usize,
    /// Sentences carrying at least one marker.
    pub cited_sentences: usize,
    /// Cited sentences whose content the (first) cited document contains.
    pub supported: usize,
}

impl CitationCheck {
    pub fn add(&mut self, o: CitationCheck) {
        self.markers += o.markers;
        self.fabricated += o.fabricated;
        self.cited_sentences += o.cited_sentences;
        self.supported += o.supported;
    }
    pub fn fabricated_rate(&self) -> f64 {
        ratio(self.fabricated, self.markers)
    }
    pub fn support(&self) -> f64 {
        ratio(self.supported, self.cited_sentences)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Checks every cited sentence of `report` against the documents that were read.
pub fn check_citations(report: &Report, read: &[ParsedDoc]) -> CitationCheck {
    let mut out = CitationCheck::default();
    for paragraph in report.sections.iter().flat_map(|s| &s.paragraphs) {
        for sentence in cited_sentences(paragraph) {
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
                        read.iter().find(|d| d.url == url).map(|d| (d, s.page))
                    });
                match doc {
                    Some(d) => {
                        first_doc.get_or_insert(d);
                    }
                    None => out.fabricated += 1,
                }
            }
            if let Some((doc, page)) = first_doc
                && supports(doc, page, &sentence)
            {
                out.supported += 1;
            }
        }
    }
    out
}

/// A paragraph's sentences, each with the markers that follow it (`text. [1]`).
fn cited_sentences(paragraph: &str) -> Vec<String> {
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

fn supports(doc: &ParsedDoc, page: Option<u32>, sentence: &str) -> bool {
    let claim: HashSet<String> = terms(&unescape(sentence)).into_iter().collect();
    if claim.is_empty() {
        return false;
    }
    let text: String = doc
        .blocks
        .iter()
        .filter(|b| page.is_none() || b.page == page)
        .map(|b| unescape(&b.text))
        .collect::<Vec<_>>()
        .join(" ");
    let source: HashSet<String> = terms(&text).into_iter().collect();
    let found = claim.iter().filter(|t| source.contains(*t)).count();
    found as f64 >= SUPPORT_SHARE * claim.len() as f64
}

/// Markdown escapes and citation markers removed.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}
