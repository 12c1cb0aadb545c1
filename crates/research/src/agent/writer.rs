//! The writer: each section of the approved outline written by the model from the findings
//! (not from raw pages), with citations resolved in code. A marker `[n]` is kept only when
//! `n` names a source the researchers actually read; any other is removed and logged. The
//! sentences then go through the same `update_report` patches as the offline writer, so
//! citation numbers stay stable as the report grows and every change is bounded.

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message};

use super::{Models, ask, output_tokens};
use crate::events::ParsedRef;
use crate::report::{AlsoCited, Quote};
use crate::rules::plan::Plan;
use crate::state::Gathered;
use crate::state::RunCtx;

const WRITER: &str = "You write one section of a research report. Use only the findings \
given, which come from the numbered sources listed. After every sentence, cite the source it \
rests on as [n], with n a source number from the list. Write plain prose: no headings, no \
lists, no code, no links. Stay within the section's subject.";

/// The sections' sentences as quotes, and how many citation markers were removed.
pub async fn draft(
    ctx: &RunCtx,
    models: &Models,
    plan: &Plan,
    gathered: &Gathered,
    sentences_per_section: usize,
) -> Result<(Vec<(String, Vec<Quote>)>, usize), StepError> {
    let mut sources = String::new();
    for (i, doc) in gathered.read.iter().enumerate() {
        sources.push_str(&format!("[{}] {} <{}>\n", i + 1, doc.title, doc.url));
        for f in gathered.findings.iter().filter(|f| f.url == doc.url) {
            sources.push_str(&format!("  - {}\n", f.fact));
        }
    }
    let mut out = Vec::new();
    let mut dropped = 0;
    for (i, section) in plan.outline.iter().enumerate() {
        if gathered.findings.is_empty() {
            out.push((section.clone(), Vec::new()));
            continue;
        }
        let prompt = format!(
            "Report question: {}\nSection to write: {section}\nAt most {} sentences.\n\nSources and findings:\n{sources}",
            plan.question,
            sentences_per_section.max(1) * 2
        );
        let request = ChatRequest {
            messages: vec![super::system(ctx, WRITER), Message::user(prompt)],
            temperature: Some(0.3),
            max_tokens: Some(output_tokens::WRITE),
            ..Default::default()
        };
        let key = format!("llm:write:{}", i + 1);
        let quotes = match ask(ctx, &key, "writer", &models.writer, request, Vec::new()).await? {
            Ok(t) => {
                let (quotes, removed) = resolve(&t.response.content, gathered);
                dropped += removed;
                quotes
            }
            Err(e) => {
                tracing::warn!(section = %section, error = %e, "section not written");
                Vec::new()
            }
        };
        out.push((section.clone(), quotes));
    }
    Ok((out, dropped))
}

/// Splits the model's text into sentences, each tied to the sources its markers name among
/// those read. Markers naming nothing read are removed (and counted); a sentence left with no
/// valid marker stays, uncited.
pub fn resolve(text: &str, gathered: &Gathered) -> (Vec<Quote>, usize) {
    let mut removed = 0;
    let mut quotes = Vec::new();
    let flat = text
        .lines()
        .map(|l| l.trim().trim_start_matches(['#', '-', '*', '>']).trim())
        .collect::<Vec<_>>()
        .join(" ");
    for sentence in fathom_parse::text::sentences(&flat) {
        let (clean, markers) = strip_markers(&sentence);
        let mut cited: Vec<&ParsedRef> = Vec::new();
        for n in markers {
            match n.checked_sub(1).and_then(|i| gathered.read.get(i)) {
                Some(doc) => {
                    if !cited.iter().any(|d| d.url == doc.url) {
                        cited.push(doc);
                    }
                }
                None => {
                    removed += 1;
                    tracing::warn!(
                        marker = n,
                        sources = gathered.read.len(),
                        "citation names no source read; removed"
                    );
                }
            }
        }
        let clean = clean.trim();
        if clean.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
            continue;
        }
        let first = cited.first();
        quotes.push(Quote {
            text: fathom_parse::text::escape_inline(clean),
            source_url: first.map(|d| d.url.clone()).unwrap_or_default(),
            source_title: first.map(|d| d.title.clone()).unwrap_or_default(),
            page: None,
            also: cited
                .iter()
                .skip(1)
                .map(|d| AlsoCited {
                    url: d.url.clone(),
                    title: d.title.clone(),
                })
                .collect(),
        });
    }
    (quotes, removed)
}

/// The sentence without its `[n]` / `[n, m]` markers, and the numbers they named.
fn strip_markers(sentence: &str) -> (String, Vec<usize>) {
    let mut text = String::with_capacity(sentence.len());
    let mut numbers = Vec::new();
    let mut rest = sentence;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let close = after.find(']');
        let inner = close.map(|c| &after[..c]);
        let parsed: Option<Vec<usize>> = inner.and_then(|s| {
            s.split([',', ';'])
                .map(|p| p.trim().parse::<usize>().ok())
                .collect()
        });
        match (close, parsed) {
            (Some(c), Some(ns)) if !ns.is_empty() => {
                text.push_str(rest[..open].trim_end());
                numbers.extend(ns);
                rest = &after[c + 1..];
            }
            _ => {
                text.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    // "fact [1]." leaves "fact ." behind.
    let text = text.replace(" .", ".").replace(" ,", ",");
    (text, numbers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Finding;

    #[test]
    fn markers_resolve_to_sources_read_and_others_are_removed() {
        let read = |n: usize| ParsedRef {
            url: format!("https://x.test/{n}"),
            title: format!("Doc {n}"),
            file_id: format!("f{n}"),
        };
        let gathered = Gathered {
            findings: vec![Finding {
                fact: "f".into(),
                url: "https://x.test/1".into(),
            }],
            read: vec![read(1), read(2)],
            ..Default::default()
        };
        let (quotes, removed) = resolve(
            "## Heading\nBorrowing is checked at compile time [2]. Rust has no garbage \
             collector [7]. Lifetimes are inferred [9, 1]. See [the book] for more. Both \
             agree [2][1][2].",
            &gathered,
        );
        assert_eq!(removed, 2);
        let got: Vec<(&str, &str)> = quotes
            .iter()
            .map(|q| (q.text.as_str(), q.source_url.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Heading Borrowing is checked at compile time.",
                    "https://x.test/2"
                ),
                ("Rust has no garbage collector.", ""),
                ("Lifetimes are inferred.", "https://x.test/1"),
                ("See \\[the book\\] for more.", ""),
                ("Both agree.", "https://x.test/2"),
            ]
        );
        assert_eq!(quotes[4].also.len(), 1, "the repeated [2] counts once");
        assert_eq!(quotes[4].also[0].url, "https://x.test/1");
    }
}
