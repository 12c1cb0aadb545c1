//! The living report: a structured model rendered to Markdown after every `update_report`
//! change. Citations `[n]` are bound to sources that were actually read, numbered in order of
//! first citation, so numbers never change as the report grows.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Source {
    pub n: usize,
    pub title: String,
    /// The document's URL; with `#page=N` when the source is one page of a PDF.
    pub url: String,
    /// The page cited, for paged documents (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub title: String,
    pub paragraphs: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub title: String,
    /// A line under the title a reader must see first (research cut short, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    pub sections: Vec<Section>,
    pub sources: Vec<Source>,
    /// The language of the report's own words (ISO 639-1; empty: English).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub language: String,
}

/// A sentence to add, with the document it was taken from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quote {
    pub text: String,
    pub source_url: String,
    pub source_title: String,
    /// The page the sentence is on (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// Further documents the sentence rests on, cited after the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<AlsoCited>,
}

/// A further source of a sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlsoCited {
    pub url: String,
    pub title: String,
}

/// One `update_report` change: sentences appended to a section (created if new), as a new
/// paragraph or continuing the last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    pub section: String,
    pub quotes: Vec<Quote>,
    /// Text written when a section has no quote (nothing in the sources covered it).
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("change of {size} characters exceeds max_report_update_size {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("report would not be valid Markdown: {0}")]
    Invalid(String),
}

impl Report {
    pub fn new(title: &str) -> Report {
        Report {
            title: title.split_whitespace().collect::<Vec<_>>().join(" "),
            ..Default::default()
        }
    }

    /// The report with its own words (the sources heading) in language `code`.
    pub fn in_language(mut self, code: &str) -> Report {
        self.language = code.to_string();
        self
    }

    /// The number of a source, listed on first use. A page of a PDF is a source of its own
    /// (`url#page=N`), so a reader lands on the page the sentence came from.
    fn cite(&mut self, url: &str, title: &str, page: Option<u32>) -> usize {
        let url = match page {
            Some(p) => format!("{url}#page={p}"),
            None => url.to_string(),
        };
        if let Some(s) = self.sources.iter().find(|s| s.url == url) {
            return s.n;
        }
        let n = self.sources.len() + 1;
        self.sources.push(Source {
            n,
            title: match page {
                Some(p) => format!("{title}, p. {p}"),
                None => title.to_string(),
            },
            url,
            page,
        });
        n
    }

    /// Applies `patch` if the Markdown grows by at most `limit` characters and stays valid;
    /// otherwise the report is left as it was.
    pub fn apply(&mut self, patch: &Patch, limit: usize) -> Result<String, ReportError> {
        let before = self.render();
        let mut next = self.clone();
        let mut text = String::new();
        for q in &patch.quotes {
            if !text.is_empty() {
                text.push(' ');
            }
            // A sentence with no source (the agent's connecting prose) carries no marker.
            text.push_str(q.text.trim());
            if !q.source_url.is_empty() {
                let mut marks = vec![next.cite(&q.source_url, &q.source_title, q.page)];
                for a in &q.also {
                    let n = next.cite(&a.url, &a.title, None);
                    if !marks.contains(&n) {
                        marks.push(n);
                    }
                }
                for n in marks {
                    text.push_str(&format!(" [{n}]"));
                }
            }
        }
        if patch.quotes.is_empty()
            && let Some(note) = &patch.note
        {
            text.push_str(&format!("_{}_", note.trim()));
        }
        match next.sections.iter_mut().find(|s| s.title == patch.section) {
            Some(section) if !text.is_empty() => section.paragraphs.push(text),
            Some(_) => {}
            None => next.sections.push(Section {
                title: patch.section.clone(),
                paragraphs: if text.is_empty() { vec![] } else { vec![text] },
            }),
        }
        let after = next.render();
        let size = after.chars().count().saturating_sub(before.chars().count());
        if size > limit {
            return Err(ReportError::TooLarge { size, limit });
        }
        check_markdown(&after, next.sources.len()).map_err(ReportError::Invalid)?;
        *self = next;
        Ok(after)
    }

    pub fn render(&self) -> String {
        let mut md = format!("# {}\n", fathom_parse::text::escape_inline(&self.title));
        if let Some(notice) = &self.notice {
            md.push_str(&format!(
                "\n_{}_\n",
                fathom_parse::text::escape_inline(notice)
            ));
        }
        for s in &self.sections {
            md.push_str(&format!(
                "\n## {}\n",
                fathom_parse::text::escape_inline(&s.title)
            ));
            for p in &s.paragraphs {
                md.push_str(&format!("\n{p}\n"));
            }
        }
        if !self.sources.is_empty() {
            let words = crate::lang::words(&self.language);
            md.push_str(&format!("\n## {}\n\n", words.sources));
            // A report citing local files and web pages says which each source is.
            let local = |s: &Source| s.url.starts_with("file://");
            let mixed = self.sources.iter().any(local) && !self.sources.iter().all(local);
            for s in &self.sources {
                let kind = match (mixed, local(s)) {
                    (false, _) => String::new(),
                    (true, true) => format!(" ({})", words.local_file),
                    (true, false) => format!(" ({})", words.web_page),
                };
                md.push_str(&format!(
                    "{}. {}{kind} — {}\n",
                    s.n,
                    fathom_parse::text::escape_inline(&s.title),
                    fathom_parse::text::code_span(&s.url)
                ));
            }
        }
        md
    }
}

/// Inline Markdown a model wrote, made safe for a report paragraph: the code spans, emphasis
/// (`*`, `**`, `_`, `__`, in pairs) and http(s) links it wrote are kept; everything else that
/// Markdown would read as markup is escaped: a bracket that is not a link's (a stray `[3]` is
/// not one of the report's citations), an unpaired backtick or emphasis marker, `#`, `<`, `>`,
/// `|`, `~`, a backslash, and an opening that would start a list (`- `, `1. `).
pub fn model_markdown(text: &str) -> String {
    let chars: Vec<char> = text.trim().chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '`' => {
                let run = chars[i..].iter().take_while(|&&x| x == '`').count();
                match closing_ticks(&chars, i + run, run) {
                    Some(end) => {
                        out.extend(&chars[i..end + run]);
                        i = end + run;
                    }
                    None => {
                        for _ in 0..run {
                            out.push_str("\\`");
                        }
                        i += run;
                    }
                }
                continue;
            }
            '*' | '_' => {
                let run = chars[i..].iter().take_while(|&&x| x == c).count();
                match closing_emphasis(&chars, i, run) {
                    Some(end) => {
                        out.extend(&chars[i..i + run]);
                        out.push_str(&model_markdown(
                            &chars[i + run..end].iter().collect::<String>(),
                        ));
                        out.extend(&chars[end..end + run]);
                        i = end + run;
                    }
                    None => {
                        for _ in 0..run {
                            out.push('\\');
                            out.push(c);
                        }
                        i += run;
                    }
                }
                continue;
            }
            '[' => {
                if let Some((close, end)) = web_link(&chars, i) {
                    out.push('[');
                    out.push_str(&model_markdown(
                        &chars[i + 1..close].iter().collect::<String>(),
                    ));
                    out.extend(&chars[close..end]);
                    i = end;
                    continue;
                }
                out.push_str("\\[");
            }
            ']' | '#' | '<' | '>' | '|' | '~' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
        i += 1;
    }
    // "- x", "+ x" or "1. x" opening a paragraph would make it a list.
    let digits = out.chars().take_while(char::is_ascii_digit).count();
    let list = out.starts_with("- ")
        || out.starts_with("+ ")
        || (digits > 0 && matches!(out[digits..].chars().next(), Some('.' | ')')));
    if list {
        let at = if digits > 0 { digits } else { 0 };
        out.insert(at, '\\');
    }
    out
}

/// Where the code span opened by `run` backticks before `from` closes: the index of a run of
/// exactly as many.
fn closing_ticks(chars: &[char], from: usize, run: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j] == '`' {
            let n = chars[j..].iter().take_while(|&&x| x == '`').count();
            if n == run && j > from {
                return Some(j);
            }
            j += n;
        } else {
            j += 1;
        }
    }
    None
}

/// Where the emphasis opened by the `run` markers at `at` closes: the index of the same run
/// touching a word on its left, before any other marker run. The opening must touch a word
/// on its right and not stand inside a word.
fn closing_emphasis(chars: &[char], at: usize, run: usize) -> Option<usize> {
    let c = chars[at];
    let before = at.checked_sub(1).map(|j| chars[j]);
    let after = chars.get(at + run).copied();
    if run > 2 || after.is_none_or(char::is_whitespace) || before.is_some_and(char::is_alphanumeric)
    {
        return None;
    }
    let mut j = at + run;
    while j < chars.len() {
        if chars[j] == '`' {
            return None;
        }
        if chars[j] == c {
            let n = chars[j..].iter().take_while(|&&x| x == c).count();
            let closes = n == run
                && !chars[j - 1].is_whitespace()
                && chars.get(j + n).is_none_or(|x| !x.is_alphanumeric());
            return closes.then_some(j);
        }
        j += 1;
    }
    None
}

/// The link `[text](http…)` opening at `open`: the index of its `]` and the index after its
/// `)`. Only web addresses, with no space or parenthesis in them.
fn web_link(chars: &[char], open: usize) -> Option<(usize, usize)> {
    let close = open
        + 1
        + chars[open + 1..]
            .iter()
            .position(|&c| c == ']' || c == '[')?;
    if chars[close] != ']' || close == open + 1 || chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let rest = &chars[close + 2..];
    let end = rest
        .iter()
        .position(|&c| c == ')' || c == '(' || c.is_whitespace() || c == '<' || c == '>')?;
    let url: String = rest[..end].iter().collect();
    let web = url.starts_with("https://") || url.starts_with("http://");
    (rest[end] == ')' && web).then_some((close, close + 2 + end + 1))
}

/// The invariants every version of the report keeps: one H1 first, no skipped heading level,
/// no raw HTML, no code block, and every `[n]` naming a listed source.
pub fn check_markdown(md: &str, sources: usize) -> Result<(), String> {
    use pulldown_cmark::{Event, HeadingLevel, Parser, Tag};
    let mut h1 = 0;
    let mut last = 1;
    for (i, ev) in Parser::new(md).enumerate() {
        match ev {
            Event::Start(Tag::Heading { level, .. }) => {
                let l = level as usize;
                if level == HeadingLevel::H1 {
                    h1 += 1;
                    if i != 0 {
                        return Err("the H1 title is not first".into());
                    }
                }
                if l > last + 1 {
                    return Err(format!("heading level jumps from {last} to {l}"));
                }
                last = l;
            }
            Event::Html(_) | Event::InlineHtml(_) => return Err("raw HTML".into()),
            Event::Start(Tag::CodeBlock(_)) => return Err("a code block".into()),
            _ => {}
        }
    }
    if h1 != 1 {
        return Err(format!("{h1} H1 headings, expected 1"));
    }
    for n in citations(md) {
        if n == 0 || n > sources {
            return Err(format!("citation [{n}] names no source"));
        }
    }
    Ok(())
}

/// The numbers of unescaped `[n]` markers in `md`.
pub fn citations(md: &str) -> Vec<usize> {
    let b = md.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' && (i == 0 || b[i - 1] != b'\\') {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits > 0 && b.get(i + 1 + digits) == Some(&b']') {
                if let Ok(n) = md[i + 1..i + 1 + digits].parse() {
                    out.push(n);
                }
                i += digits + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quote(text: &str, url: &str) -> Quote {
        Quote {
            text: text.into(),
            source_url: url.into(),
            source_title: format!("Title of {url}"),
            page: None,
            also: Vec::new(),
        }
    }

    #[test]
    fn a_sentence_may_rest_on_several_sources() {
        let mut r = Report::new("Q");
        let both = Quote {
            also: vec![AlsoCited {
                url: "file:///b".into(),
                title: "B".into(),
            }],
            ..quote("Both say so.", "file:///a")
        };
        let md = r
            .apply(
                &Patch {
                    section: "S".into(),
                    quotes: vec![quote("B alone.", "file:///b"), both],
                    note: None,
                },
                1000,
            )
            .unwrap();
        assert!(md.contains("B alone. [1] Both say so. [2] [1]"), "{md}");
        assert_eq!(citations(&md), vec![1, 2, 1]);
    }

    #[test]
    fn each_cited_pdf_page_is_a_source_that_links_to_its_page() {
        let on_page = |text: &str, page| Quote {
            page: Some(page),
            ..quote(text, "https://x.test/paper.pdf")
        };
        let mut r = Report::new("Q");
        let md = r
            .apply(
                &Patch {
                    section: "S".into(),
                    quotes: vec![on_page("One.", 2), on_page("Two.", 5), on_page("Three.", 2)],
                    note: None,
                },
                1000,
            )
            .unwrap();
        assert!(md.contains("One. [1] Two. [2] Three. [1]"), "{md}");
        assert!(
            md.contains(
                "1. Title of https://x.test/paper.pdf, p. 2 — `https://x.test/paper.pdf#page=2`"
            ),
            "{md}"
        );
        assert_eq!(r.sources[1].page, Some(5));
    }

    #[test]
    fn citations_are_numbered_by_first_use_and_stay_stable() {
        let mut r = Report::new("How does it work?");
        r.apply(
            &Patch {
                section: "Overview".into(),
                quotes: vec![
                    quote("B says so.", "file:///b"),
                    quote("A says so.", "file:///a"),
                ],
                note: None,
            },
            1000,
        )
        .unwrap();
        let md = r
            .apply(
                &Patch {
                    section: "Details".into(),
                    quotes: vec![quote("A again.", "file:///a"), quote("C.", "file:///c")],
                    note: None,
                },
                1000,
            )
            .unwrap();
        assert!(md.contains("B says so. [1] A says so. [2]"), "{md}");
        assert!(md.contains("A again. [2] C. [3]"), "{md}");
        assert!(
            md.ends_with("3. Title of file:///c — `file:///c`\n"),
            "{md}"
        );
        assert_eq!(citations(&md), vec![1, 2, 2, 3]);
    }

    #[test]
    fn oversized_changes_are_refused_and_leave_the_report_alone() {
        let mut r = Report::new("Q");
        let long = "word ".repeat(100);
        let err = r
            .apply(
                &Patch {
                    section: "S".into(),
                    quotes: vec![quote(&long, "file:///a")],
                    note: None,
                },
                200,
            )
            .unwrap_err();
        assert!(matches!(err, ReportError::TooLarge { .. }));
        assert_eq!(r, Report::new("Q"));
    }

    #[test]
    fn a_models_markdown_keeps_code_emphasis_and_links() {
        assert_eq!(
            model_markdown(
                "`Box<T>` is a **smart pointer**; see _the book_ or [ch15](https://doc.rust-lang.org/book/ch15-01-box.html)."
            ),
            "`Box<T>` is a **smart pointer**; see _the book_ or [ch15](https://doc.rust-lang.org/book/ch15-01-box.html)."
        );
        // What would break the report is escaped: a stray citation, a heading mark, raw
        // HTML, a link that is not to the web, an unpaired marker, a list opening.
        assert_eq!(
            model_markdown("# Data races [3] need <b>two</b> threads [x](javascript:alert)"),
            r"\# Data races \[3\] need \<b\>two\</b\> threads \[x\](javascript:alert)"
        );
        assert_eq!(
            model_markdown("a * b and 2*3 with max_len and `x"),
            r"a \* b and 2\*3 with max\_len and \`x"
        );
        assert_eq!(model_markdown("- not a list"), r"\- not a list");
        assert_eq!(model_markdown("1. not a list"), r"1\. not a list");
        assert_eq!(
            model_markdown("``a ` b`` stays code"),
            "``a ` b`` stays code"
        );
        // Each renders as the model meant, and the report stays valid with no citation.
        let mut r = Report::new("Q");
        let md = r
            .apply(
                &Patch {
                    section: "S".into(),
                    quotes: vec![quote(
                        &model_markdown("# Not a heading [7] `Box`."),
                        "file:///a",
                    )],
                    note: None,
                },
                1000,
            )
            .unwrap();
        assert!(md.contains(r"\# Not a heading \[7\] `Box`. [1]"), "{md}");
        assert_eq!(citations(&md), vec![1]);
    }

    #[test]
    fn invalid_markdown_is_caught() {
        assert!(check_markdown("# A\n\n### skipped\n", 0).is_err());
        assert!(check_markdown("# A\n\n<div>x</div>\n", 0).is_err());
        assert!(check_markdown("# A\n\ntext [2]\n", 1).is_err());
        assert!(check_markdown("# A\n\n## B\n\ntext \\[2\\] [1]\n", 1).is_ok());
    }
}
