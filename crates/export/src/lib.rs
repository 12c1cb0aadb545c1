//! # fathom-export: a finished report as HTML, PDF or DOCX
//!
//! A report's Markdown is read once into a small document model ([`Document`]: headings,
//! paragraphs of styled runs, lists, tables, code, the sources list and the citations that
//! point into it), which three writers turn into a file: a standalone HTML page, a PDF in the
//! standard fonts, a DOCX. [`render`] does that for any Markdown; [`SessionExports`] does it
//! for a saved research session, keeping each export as a content-addressed artifact recorded
//! in the session's `exports`, so the same export of the same report is made once.
//! [`render_fragment`] gives a page of its own (the web UI's) the same HTML without the page
//! around it, and the sources list as data.
//!
//! The writers are deterministic (no clock, no random ids in the files): the same report
//! always gives the same bytes, hence the same `file_id`.

pub mod document;
mod docx;
mod html;
mod pdf;
mod stored;

use std::fmt;
use std::str::FromStr;

pub use document::{Document, ListedSource};
pub use stored::{EXPORTS_FIELD, RENDERER_VERSION, SessionExports, StoredExport};

/// Reports larger than this are refused: an export is read into memory whole, and no report
/// a run writes comes near it.
pub const MAX_REPORT_BYTES: usize = 8 * 1024 * 1024;

/// A file format a report is exported to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Html,
    Pdf,
    Docx,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Html, Format::Pdf, Format::Docx];

    /// `html`, `pdf` or `docx`, in any case.
    pub fn parse(name: &str) -> Result<Format, ExportError> {
        let wanted = name.trim().trim_start_matches('.');
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| ExportError::UnknownFormat(name.to_string()))
    }

    /// The name used in URLs, on the command line and in the session's `exports`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
        }
    }

    /// The file name extension, without the dot.
    pub fn extension(self) -> &'static str {
        self.name()
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Pdf => "application/pdf",
            Format::Docx => {
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
            }
        }
    }

    /// The formats, as a person reads them in an error: `html, pdf, docx`.
    pub fn names() -> String {
        Format::ALL.map(Format::name).join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ExportError;

    fn from_str(s: &str) -> Result<Format, ExportError> {
        Format::parse(s)
    }
}

/// Why an export could not be made. Every message but `Write`'s and `Storage`'s describes the
/// request's own problem, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("unknown export format '{0}': use one of html, pdf, docx")]
    UnknownFormat(String),
    #[error("research session '{0}' not found")]
    UnknownSession(String),
    #[error(
        "research session '{id}' is not finished (status: {status}); a report can be exported once its research has completed"
    )]
    NotFinished { id: String, status: String },
    #[error("research session '{0}' completed without a report to export")]
    NoReport(String),
    #[error("the report is {size} bytes, more than the {limit} bytes an export takes")]
    TooLarge { size: usize, limit: usize },
    /// Writing the file failed: a fault of ours, for logs. `what` says which writer failed;
    /// the failure underneath (the PDF library's, the zip writer's, a crashed task's) is kept
    /// as the source.
    #[error("{what}")]
    Write {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    #[error(transparent)]
    Storage(#[from] fathom_data::StoreError),
}

/// The report `markdown`, in `language` (ISO 639-1), as a file of `format`.
pub fn render(markdown: &str, format: Format, language: &str) -> Result<Vec<u8>, ExportError> {
    if markdown.len() > MAX_REPORT_BYTES {
        return Err(ExportError::TooLarge {
            size: markdown.len(),
            limit: MAX_REPORT_BYTES,
        });
    }
    let mut doc = Document::from_markdown(markdown);
    if fathom_report::lang::name(language).is_some() {
        doc.language = language.to_string();
    }
    match format {
        Format::Html => Ok(html::write(&doc)),
        Format::Pdf => pdf::write(&doc),
        Format::Docx => docx::write(&doc),
    }
}

/// A report for a page of its own: its body as the HTML export writes it, and its sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// The first H1's text, else "Report".
    pub title: String,
    /// The body, without the sources list: markup only (no scripts, styles or event handlers),
    /// every text escaped. A citation is `<a class="cite" href="#source-N" data-n="N">[N]</a>`.
    pub html: String,
    /// The sources list's entries, in order.
    pub sources: Vec<ListedSource>,
    /// The sources the body cites, each once, in the order first cited.
    pub citations: Vec<u32>,
}

/// The report `markdown` as a [`Fragment`].
pub fn render_fragment(markdown: &str) -> Result<Fragment, ExportError> {
    if markdown.len() > MAX_REPORT_BYTES {
        return Err(ExportError::TooLarge {
            size: markdown.len(),
            limit: MAX_REPORT_BYTES,
        });
    }
    let doc = Document::from_markdown(markdown);
    Ok(Fragment {
        html: html::fragment(&doc),
        sources: doc.listed_sources(),
        citations: doc.citations(),
        title: doc.title,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_and_unknown_ones_say_which_exist() {
        assert_eq!(Format::parse("PDF").unwrap(), Format::Pdf);
        assert_eq!(Format::parse(".docx").unwrap(), Format::Docx);
        let err = Format::parse("odt").unwrap_err().to_string();
        assert!(
            err.contains("'odt'") && err.contains("html, pdf, docx"),
            "{err}"
        );
        assert_eq!(Format::names(), "html, pdf, docx");
    }

    #[test]
    fn the_same_report_gives_the_same_bytes() {
        let md = "# T\n\nText [1].\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n## Sources\n\n1. S — `https://a.test/`\n";
        for f in Format::ALL {
            assert_eq!(
                render(md, f, "en").unwrap(),
                render(md, f, "en").unwrap(),
                "{f}"
            );
        }
    }

    #[test]
    fn a_report_in_another_language_keeps_its_sources_and_says_its_language() {
        let md = "# Wie?\n\nSo ist es [1].\n\n## Quellen\n\n1. Seite — `https://a.test/`\n";
        let html = String::from_utf8(render(md, Format::Html, "de").unwrap()).unwrap();
        assert!(html.contains("<html lang=\"de\">"), "{html}");
        assert!(
            html.contains("href=\"#source-1\""),
            "the citation links: {html}"
        );
        assert!(html.contains("<li id=\"source-1\">"), "{html}");
        // A code that is not a language is not written into the file.
        let html = String::from_utf8(render(md, Format::Html, "\"><x").unwrap()).unwrap();
        assert!(html.contains("<html lang=\"en\">"), "{html}");
    }

    #[test]
    fn an_oversized_report_is_refused() {
        let md = "a".repeat(MAX_REPORT_BYTES + 1);
        assert!(matches!(
            render(&md, Format::Html, "en"),
            Err(ExportError::TooLarge { .. })
        ));
    }
}
