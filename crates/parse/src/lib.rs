//! # fathom-parse: documents to text a citation can point at
//!
//! Text decoding (BOM, declared charset, `<meta charset>`, a statistical guess), and HTML,
//! Markdown, plain text, DOCX and PDF turned into a titled list of prose blocks with what a
//! citation needs (URL, title, byline, date, canonical URL, page). PDFs are read in an
//! isolated worker process ([`pdf::PdfSandbox`]). The [`text`] module holds the word and
//! sentence tools the index and the writers share. Knows nothing of runs.

pub mod config;
mod document;
pub mod docx;
pub mod nesting;
pub mod pdf;
pub mod text;

pub use config::ParseSection;
pub use document::{
    ContentParser, DocKind, Extraction, ExtractionMethod, ParseError, ParsedDoc, decode_text,
    parse_content, parse_content_as, pdf_to_doc,
};
