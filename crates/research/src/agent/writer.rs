//! The writer: each section of the approved outline written by the model from the findings
//! (not from raw pages), with citations resolved in code. A marker `[n]` is kept only when
//! `n` names a source the researchers actually read; any other is removed and logged. The
//! sentences then go through the same `update_report` patches as the offline writer, so
//! citation numbers stay stable as the report grows and every change is bounded.

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message};

use super::{Models, ask, output_tokens};
use crate::parsed::ParsedRef;
use crate::rules::plan::Plan;
use crate::state::RunCtx;
use crate::state::{CheckedBy, ClaimRecord, Gathered, Outcome};
use fathom_evidence::{Verdict, plain_text};
use fathom_parse::text::terms;
use fathom_report::report::{AlsoCited, Quote, model_markdown};
use std::collections::HashSet;

const WRITER: &str = "You write one section of a research report. Use only the findings \
given, which come from the numbered sources listed. After every sentence, cite the source it \
rests on as [n], with n a source number from the list. Write plain prose: no headings, no \
lists, no code, no links. Stay within the section's subject.";

/// The sections' sentences as quotes, how many citation markers were removed, and the
/// sentences left out as about neither their section nor the question ([`fit_to_headings`]).
pub async fn draft(
    ctx: &RunCtx,
    models: &Models,
    plan: &Plan,
    gathered: &Gathered,
    sentences_per_section: usize,
) -> Result<(Vec<(String, Vec<Quote>)>, usize, Vec<ClaimRecord>), StepError> {
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
        // The sources first, the section last: every section's prompt then opens alike, and
        // a local model's server reads that long common part once (its prompt cache).
        let prompt = format!(
            "Report question: {}\n\nSources and findings:\n{sources}\nSection to write: {section}\nAt most {} sentences.",
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
    let off_topic = fit_to_headings(&mut out, &plan.question);
    Ok((out, dropped, off_topic))
}

/// Each sentence under the heading it is about. A sentence that shares no content term (nor
/// the start of one: "measur", "measurement") with its section's title, in a section whose
/// title its sentences do use (an "Overview" names no subject of its own), goes to the one
/// other section whose title it shares the most terms with, two at least. A sentence that
/// shares no term with its title, any other title or the question is about something else:
/// it is left out, and recorded.
pub fn fit_to_headings(sections: &mut [(String, Vec<Quote>)], question: &str) -> Vec<ClaimRecord> {
    let set = |text: &str| -> HashSet<String> { terms(&plain_text(text)).into_iter().collect() };
    let titles: Vec<HashSet<String>> = sections.iter().map(|(t, _)| set(t)).collect();
    let asked = set(question);
    let mut moves: Vec<(usize, Quote)> = Vec::new();
    let mut records = Vec::new();
    for (i, (title, quotes)) in sections.iter_mut().enumerate() {
        let held: Vec<HashSet<String>> = quotes.iter().map(|q| set(&q.text)).collect();
        // Terms meet when one is the other or begins it ("measur", "measurement"): the
        // stemmer leaves some forms of a word apart.
        let shares = |a: &HashSet<String>, b: &HashSet<String>| {
            a.iter()
                .filter(|x| {
                    b.iter().any(|y| {
                        let (short, long) = if x.len() <= y.len() {
                            (x.as_str(), y.as_str())
                        } else {
                            (y.as_str(), x.as_str())
                        };
                        short == long || (short.len() >= 4 && long.starts_with(short))
                    })
                })
                .count()
        };
        let named = held.iter().any(|h| shares(h, &titles[i]) > 0);
        let mut kept = Vec::with_capacity(quotes.len());
        for (q, h) in std::mem::take(quotes).into_iter().zip(&held) {
            // A heading or a transition is judged by the claim check, not here.
            if shares(h, &titles[i]) > 0 || !fathom_evidence::is_claim(&q.text) {
                kept.push(q);
                continue;
            }
            let mut others: Vec<(usize, usize)> = titles
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(j, t)| (shares(h, t), j))
                .collect();
            others.sort_unstable_by(|a, b| b.cmp(a));
            let best = others.first().copied().unwrap_or((0, i));
            let runner_up = others.get(1).map_or(0, |o| o.0);
            if named && best.0 >= 2 && best.0 > runner_up {
                moves.push((best.1, q));
            } else if best.0 == 0 && shares(h, &asked) == 0 {
                records.push(ClaimRecord {
                    section: title.clone(),
                    sentence: q.text.clone(),
                    source_url: q.source_url.clone(),
                    span: None,
                    verdict: Verdict::Unsupported,
                    outcome: Outcome::Removed,
                    rewritten: None,
                    checked_by: CheckedBy::Offline,
                    reason: "about neither its section's subject nor the question".into(),
                });
            } else {
                kept.push(q);
            }
        }
        *quotes = kept;
    }
    for (j, q) in moves {
        sections[j].1.push(q);
    }
    records
}

/// Splits the model's text into sentences, each tied to the sources its markers name among
/// those read. Markers naming nothing read are removed (and counted); a sentence left with no
/// valid marker stays, uncited, for the claim check to cite, rewrite or remove. Headings the
/// model wrote are dropped (they never run into the prose), each list item is a sentence of
/// its own, and the Markdown it wrote inside a sentence (code, emphasis, web links) is kept.
pub fn resolve(text: &str, gathered: &Gathered) -> (Vec<Quote>, usize) {
    let mut removed = 0;
    let mut quotes = Vec::new();
    for unit in prose_units(text) {
        for sentence in fathom_parse::text::sentences(&unit) {
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
                text: model_markdown(clean),
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
    }
    (quotes, removed)
}

/// The model's text as runs of prose, each ending a sentence: paragraphs (their lines joined),
/// and list items one by one, markers stripped. Headings (`#` lines, a line that is all
/// emphasis, a short capitalised line with no end punctuation) and code blocks are left out.
/// A run that does not end a sentence is given a period, so the next never runs into it.
fn prose_units(text: &str) -> Vec<String> {
    let mut units: Vec<String> = Vec::new();
    let mut open = false;
    let mut in_code = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("```") || line.starts_with("~~~") {
            in_code = !in_code;
            open = false;
            continue;
        }
        if in_code || line.is_empty() || is_heading_line(line) {
            open = false;
            continue;
        }
        let line = line.trim_start_matches('>').trim_start();
        let (item, body) = match list_item(line) {
            Some(body) => (true, body),
            None => (false, line),
        };
        // A line wrapped inside a sentence goes on with a small letter.
        let continues = open && !item && body.starts_with(|c: char| c.is_lowercase());
        match units.last_mut() {
            Some(last) if continues || (open && !item && !ends_sentence(last)) => {
                last.push(' ');
                last.push_str(body);
            }
            _ => units.push(body.to_string()),
        }
        open = !item;
    }
    units
        .into_iter()
        .map(|mut u| {
            if !ends_sentence(&u) {
                u.push('.');
            }
            u
        })
        .collect()
}

/// Whether `line` is a heading the model wrote: `#` first, all of it emphasis
/// (`**Ownership**`, `**Ownership:**`), or a line with no end punctuation that is not a claim
/// ([`fathom_evidence::is_claim`]: "Borrowing Mechanisms").
fn is_heading_line(line: &str) -> bool {
    if line.starts_with('#') {
        return true;
    }
    let bare = line.trim_end_matches(':');
    let emphasised = ["**", "__", "*", "_"].iter().any(|m| {
        bare.len() > 2 * m.len()
            && bare.starts_with(m)
            && bare.ends_with(m)
            && !bare[m.len()..bare.len() - m.len()].contains(m)
    });
    if emphasised {
        return true;
    }
    list_item(line).is_none() && !ends_sentence(line) && !fathom_evidence::is_claim(line)
}

/// The text of a list item (`- x`, `* x`, `+ x`, `1. x`, `1) x`), if `line` is one.
fn list_item(line: &str) -> Option<&str> {
    for m in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = line.strip_prefix(m) {
            return Some(rest.trim_start());
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits < 3 {
        let rest = &line[digits..];
        if let Some(r) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some(r.trim_start());
        }
    }
    None
}

/// Whether `text` ends a sentence (end punctuation, perhaps then citation markers, quotes or
/// a closing parenthesis).
fn ends_sentence(text: &str) -> bool {
    let mut t = text.trim_end();
    // "… it [1]" ends where the marker's sentence ends.
    while let Some(open) = t.strip_suffix(']').and_then(|x| x.rfind('[')) {
        if !t[open + 1..t.len() - 1]
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == ' ')
        {
            break;
        }
        t = t[..open].trim_end();
    }
    let t = t.trim_end_matches(['"', '\'', ')', '”', '’', '*', '_']);
    t.ends_with(['.', '!', '?', '…', '。', '！', '？', ':', ';'])
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
                ("Borrowing is checked at compile time.", "https://x.test/2"),
                ("Rust has no garbage collector.", ""),
                ("Lifetimes are inferred.", "https://x.test/1"),
                ("See \\[the book\\] for more.", ""),
                ("Both agree.", "https://x.test/2"),
            ]
        );
        assert_eq!(quotes[4].also.len(), 1, "the repeated [2] counts once");
        assert_eq!(quotes[4].also[0].url, "https://x.test/1");
    }

    #[test]
    fn sentences_go_under_the_heading_they_are_about_or_go() {
        let q = |text: &str| Quote {
            text: text.into(),
            source_url: "https://x.test/1".into(),
            source_title: "Doc".into(),
            page: None,
            also: Vec::new(),
        };
        let mut sections = vec![
            (
                "Overview".to_string(),
                vec![q("Rust prevents data races at compile time.")],
            ),
            (
                "Message Passing".to_string(),
                vec![
                    q("Channels pass a message from one thread to another."),
                    q("A mutex guards shared state so one thread at a time changes it."),
                    q("The variable s1 goes out of scope at the closing brace."),
                ],
            ),
            (
                "Shared-State Concurrency".to_string(),
                vec![q("Shared state needs a lock.")],
            ),
        ];
        let records = fit_to_headings(
            &mut sections,
            "How does Rust prevent data races between threads?",
        );
        let texts =
            |i: usize| -> Vec<&str> { sections[i].1.iter().map(|q| q.text.as_str()).collect() };
        assert_eq!(texts(0), ["Rust prevents data races at compile time."]);
        assert_eq!(
            texts(1),
            ["Channels pass a message from one thread to another."]
        );
        assert_eq!(
            texts(2),
            [
                "Shared state needs a lock.",
                "A mutex guards shared state so one thread at a time changes it."
            ]
        );
        assert_eq!(records.len(), 1);
        assert!(records[0].sentence.contains("s1 goes out of scope"));
        assert_eq!(records[0].outcome, Outcome::Removed);
    }

    #[test]
    fn headings_the_model_writes_never_run_into_the_prose_and_its_markdown_stays() {
        let gathered = Gathered {
            read: vec![ParsedRef {
                url: "https://x.test/1".into(),
                title: "Doc".into(),
                file_id: "f1".into(),
            }],
            ..Default::default()
        };
        let text = "### Borrowing Mechanisms\n\
            Rust's references are checked by the `borrow checker` [1].\n\n\
            Borrowing Mechanisms\n\
            A **mutable** reference is _exclusive_ [1]\n\
            **Message Passing**\n\
            - Channels move values between threads [1]\n\
            - `Mutex<T>` guards shared data\n\
            1. Only one thread holds the lock at a time.\n\
            ```rust\nlet x = 5;\n```\n\
            A sentence wrapped by the model\n\
            over two lines [1].";
        let (quotes, _) = resolve(text, &gathered);
        let got: Vec<&str> = quotes.iter().map(|q| q.text.as_str()).collect();
        assert_eq!(
            got,
            [
                "Rust's references are checked by the `borrow checker`.",
                "A **mutable** reference is _exclusive_.",
                "Channels move values between threads.",
                "`Mutex<T>` guards shared data.",
                "Only one thread holds the lock at a time.",
                "A sentence wrapped by the model over two lines.",
            ]
        );
        assert!(quotes.iter().all(|q| !q.text.contains("Mechanisms")));
    }
}
