//! `parse_content`: turns fetched bytes into a titled list of prose blocks, with what a
//! citation needs (URL, title, byline, date, page).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::pdf::{PdfSandbox, PdfText};
use crate::text::{Block, markdown_blocks, plain_blocks};

const DOCX_TYPE: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

/// The document kinds Fathom reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocKind {
    Html,
    Markdown,
    Text,
    Docx,
    Pdf,
}

impl DocKind {
    /// The kind a file name's extension says, if Fathom reads it.
    pub fn from_path(path: &str) -> Option<DocKind> {
        let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" | "xhtml" => Some(DocKind::Html),
            "md" | "markdown" | "mdown" => Some(DocKind::Markdown),
            "txt" | "text" | "rst" => Some(DocKind::Text),
            "docx" => Some(DocKind::Docx),
            "pdf" => Some(DocKind::Pdf),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            DocKind::Html => "text/html",
            DocKind::Markdown => "text/markdown",
            DocKind::Text => "text/plain",
            DocKind::Docx => DOCX_TYPE,
            DocKind::Pdf => "application/pdf",
        }
    }

    pub fn from_content_type(ct: &str) -> Option<DocKind> {
        let base = ct.split(';').next()?.trim().to_ascii_lowercase();
        match base.as_str() {
            "text/html" | "application/xhtml+xml" => Some(DocKind::Html),
            "text/markdown" | "text/x-markdown" => Some(DocKind::Markdown),
            "text/plain" => Some(DocKind::Text),
            DOCX_TYPE => Some(DocKind::Docx),
            "application/pdf" | "application/x-pdf" => Some(DocKind::Pdf),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedDoc {
    pub url: String,
    pub title: String,
    pub kind: DocKind,
    pub blocks: Vec<Block>,
    pub words: usize,
    /// Who wrote it, as the page or the PDF's Info says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byline: Option<String>,
    /// When it was published, as written by the source (ISO 8601 for most pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    /// The address the page names as its own (`<link rel="canonical">`, `og:url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_name: Option<String>,
    /// Pages in the document (PDF only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u32>,
    /// How the text was taken from the page, and why (HTML only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extraction: Option<Extraction>,
    /// Parts of the source that could not be read, in words a person can act on (the text
    /// that could be read is kept). Empty when all was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

/// Which extraction of a page's text a document holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtractionMethod {
    /// The main content, as a Readability port finds it (navigation and the like left out).
    MainContent,
    /// The whole page less its navigation, scripts, forms and the like: used when the main
    /// content extraction kept too little of the page.
    FullPage,
}

/// The extraction a page was read with, with the figures that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extraction {
    pub method: ExtractionMethod,
    /// Why, for a person: e.g. "main content kept 40 of 900 words; used the full page".
    pub reason: String,
}

impl ParsedDoc {
    /// Each block cut into sentences ([`crate::text::sentences`]), in order: for whoever
    /// reads the document sentence by sentence. The cut is most of that reading's work, so a
    /// reader that keeps the document hands the same cut to each such use.
    pub fn block_sentences(&self) -> Vec<Vec<String>> {
        self.blocks
            .iter()
            .map(|b| crate::text::sentences(&b.text))
            .collect()
    }

    /// A document of `blocks` with its words counted and no metadata besides its title.
    pub fn new(url: &str, title: &str, kind: DocKind, blocks: Vec<Block>) -> ParsedDoc {
        ParsedDoc {
            url: url.to_string(),
            title: title.to_string(),
            kind,
            words: blocks
                .iter()
                .map(|b| b.text.split_whitespace().count())
                .sum(),
            blocks,
            byline: None,
            published: None,
            canonical_url: None,
            site_name: None,
            pages: None,
            extraction: None,
            unread: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    #[error("binary content, not {0}")]
    Binary(&'static str),
    #[error("not valid UTF-8 text")]
    NotText,
    #[error("no readable text")]
    Empty,
    #[error("unreadable HTML: {0}")]
    Html(String),
    #[error("unreadable DOCX: {0}")]
    Docx(#[from] crate::docx::DocxError),
    /// Why the PDF worker read nothing; the message names the PDF.
    #[error("{0}")]
    Pdf(String),
    #[error("the parser crashed: {0}")]
    Crashed(String),
    #[error("PDF reading needs the isolated PDF worker, which this program does not configure")]
    PdfUnavailable,
}

/// Decodes bytes as text. A byte-order mark wins, then the charset the server declared, then
/// UTF-8, then (for HTML) a `<meta charset>` in the first KiB, then a statistical guess
/// (chardetng). Refuses binary data, and undeclared bytes that decode to no plausible text.
pub fn decode_text(
    bytes: &[u8],
    kind: DocKind,
    declared: Option<&str>,
) -> Result<String, ParseError> {
    use encoding_rs::{Encoding, UTF_8};
    if let Some((enc, bom)) = Encoding::for_bom(bytes) {
        let text = enc.decode_without_bom_handling(&bytes[bom..]).0;
        // A BOM in front of binary data (FF FE 00 00 is also UTF-32's) decodes to NULs.
        if text.contains('\0') {
            return Err(ParseError::Binary(kind.content_type()));
        }
        return Ok(text.into_owned());
    }
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return Err(ParseError::Binary(kind.content_type()));
    }
    let declared = declared.and_then(|l| Encoding::for_label(l.trim().as_bytes()));
    if let Some(enc) = declared.filter(|e| *e != UTF_8) {
        return Ok(enc.decode_without_bom_handling(bytes).0.into_owned());
    }
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Ok(s.to_string());
    }
    let sniffed = (kind == DocKind::Html)
        .then(|| meta_charset(&bytes[..bytes.len().min(1024)]))
        .flatten()
        .filter(|e| *e != UTF_8);
    if let Some(enc) = sniffed {
        return Ok(enc.decode_without_bom_handling(bytes).0.into_owned());
    }
    let lossy = String::from_utf8_lossy(bytes);
    let bad = lossy.chars().filter(|&c| c == '\u{FFFD}').count();
    // A stray byte or two in a large UTF-8 file is tolerable.
    if bad * 200 <= lossy.chars().count().max(1) {
        return Ok(lossy.into_owned());
    }
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    detector.feed(bytes, true);
    let guess = detector.guess(None, chardetng::Utf8Detection::Allow);
    let text = guess.decode_without_bom_handling(bytes).0;
    if guess != UTF_8 && plausible_text(&text) {
        Ok(text.into_owned())
    } else {
        Err(ParseError::NotText)
    }
}

/// The encoding a `<meta charset=...>` or `content="...; charset=..."` names.
fn meta_charset(head: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let lower = String::from_utf8_lossy(head).to_ascii_lowercase();
    let at = lower.find("charset=")? + "charset=".len();
    let label: String = lower[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    encoding_rs::Encoding::for_label(label.as_bytes())
}

/// Mostly letters, digits, spaces and common punctuation: text, not decoded noise.
fn plausible_text(text: &str) -> bool {
    let total = text.chars().count().max(1);
    let good = text
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace() || ".,;:!?'\"()-".contains(*c))
        .count();
    good * 10 >= total * 7
}

/// Parses a document: HTML through a Readability port (main content only, as Markdown, unless
/// that keeps too little of the page: see [`Extraction`]), Markdown and text directly, DOCX
/// through [`crate::docx`].
pub fn parse_content(url: &str, kind: DocKind, bytes: &[u8]) -> Result<ParsedDoc, ParseError> {
    parse_content_as(url, kind, bytes, None)
}

/// [`parse_content`] with the charset the server declared, if any.
pub fn parse_content_as(
    url: &str,
    kind: DocKind,
    bytes: &[u8],
    charset: Option<&str>,
) -> Result<ParsedDoc, ParseError> {
    let mut unread = Vec::new();
    let (docx_title, text) = match kind {
        DocKind::Docx => {
            let docx = crate::docx::docx_to_markdown(bytes)?;
            unread = docx.unread;
            (docx.title, docx.markdown)
        }
        // Only in the isolated worker: see [`ContentParser`].
        DocKind::Pdf => return Err(ParseError::PdfUnavailable),
        _ => (None, decode_text(bytes, kind, charset)?),
    };
    let mut meta = HtmlMeta::default();
    let mut extraction = None;
    let (title, blocks) = match kind {
        DocKind::Html => {
            // A page nested past the cap would hold the parser for hours: flattened first.
            let flat = crate::nesting::flatten(&text);
            if let Some(f) = &flat {
                unread.push(format!(
                    "the page nests elements deeper than {} levels; {} tags past that depth were \
                     dropped and their text kept",
                    crate::nesting::MAX_DEPTH,
                    f.dropped
                ));
            }
            let html = flat.as_ref().map_or(text.as_str(), |f| f.html.as_str());
            let (m, markdown, how) = html_to_markdown(url, html)?;
            meta = m;
            extraction = Some(how);
            let (h1, blocks) = markdown_blocks(&markdown);
            (meta.title.take().or(h1), blocks)
        }
        DocKind::Markdown => markdown_blocks(&text),
        DocKind::Docx => {
            let (h1, blocks) = markdown_blocks(&text);
            (docx_title.or(h1), blocks)
        }
        DocKind::Text => {
            let title = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .filter(|l| l.len() <= 120)
                .map(str::to_string);
            (title, plain_blocks(&text))
        }
        DocKind::Pdf => unreachable!("returned above"),
    };
    let mut doc = finish(url, kind, title, blocks)?;
    doc.byline = meta.byline;
    doc.published = meta.published;
    doc.canonical_url = meta.canonical_url;
    doc.site_name = meta.site_name;
    doc.extraction = extraction;
    doc.unread = unread;
    Ok(doc)
}

/// A document from its title and blocks: counts words, refuses an empty one, and names an
/// untitled one after its file.
fn finish(
    url: &str,
    kind: DocKind,
    title: Option<String>,
    blocks: Vec<Block>,
) -> Result<ParsedDoc, ParseError> {
    let fallback_title = url
        .rsplit('/')
        .next()
        .unwrap_or(url)
        .rsplit_once('.')
        .map(|(stem, _)| stem.replace(['-', '_'], " "))
        .unwrap_or_else(|| url.to_string());
    let title = title
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
        .unwrap_or(fallback_title);
    let doc = ParsedDoc::new(url, &title, kind, blocks);
    if doc.words == 0 {
        return Err(ParseError::Empty);
    }
    Ok(doc)
}

/// What a page says about itself.
#[derive(Debug, Default)]
struct HtmlMeta {
    title: Option<String>,
    byline: Option<String>,
    published: Option<String>,
    canonical_url: Option<String>,
    site_name: Option<String>,
}

/// Page chrome left out of the full-page extraction: navigation, sidebars, forms and what the
/// page hides. Headers and footers are left out too unless they sit in an `article` or `main`
/// (where they hold the article's title, byline or notes).
const PAGE_CHROME: &str = "nav, aside, form, button, select, dialog, iframe, canvas, svg, \
    [hidden], [aria-hidden=true], [role=navigation], [role=banner], [role=contentinfo], \
    [role=complementary], [role=search], [role=dialog]";
/// A list with at least this share of its words in links is navigation, left out of the full
/// page wherever it sits. At 4/5, a list whose links each come with a sentence of comment is
/// kept.
const LINK_LIST: (usize, usize) = (4, 5);
/// Elements skipped, with their content, when the full page is written as Markdown.
const SKIPPED_TAGS: [&str; 6] = ["script", "style", "meta", "head", "noscript", "template"];

/// The main content is replaced by the full page when it holds under 2/5 of the page's prose
/// words. Prose words are words outside links, so the link lists that chrome is made of count
/// for nothing, and the full page is counted without its chrome ([`PAGE_CHROME`]). What is
/// left beside an article is captions, a byline, a comment or two: on an article page the
/// main content holds well over half of it. Under 40% means Readability picked one part of a
/// page whose text is spread over several (an intro beside a data table, a page of many short
/// sections) and dropped more than it kept.
const MAIN_SHARE: (usize, usize) = (2, 5);
/// Pages with fewer prose words than this keep the main content whatever its share: on a
/// page that short, a few lines of leftovers (a date line, a caption, a cookie notice) would
/// make the share swing without the main content having lost anything.
const FULL_PAGE_MIN_WORDS: usize = 150;

/// Whitespace-separated words of Markdown's text outside links and code blocks.
fn prose_words(markdown: &str) -> usize {
    use pulldown_cmark::{Event as Md, Options, Parser, Tag, TagEnd};
    let (mut links, mut code, mut n) = (0usize, 0usize, 0usize);
    for ev in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match ev {
            Md::Start(Tag::Link { .. }) => links += 1,
            Md::End(TagEnd::Link) => links = links.saturating_sub(1),
            Md::Start(Tag::CodeBlock(_)) => code += 1,
            Md::End(TagEnd::CodeBlock) => code = code.saturating_sub(1),
            Md::Text(t) | Md::Code(t) if links == 0 && code == 0 => {
                n += t.split_whitespace().count()
            }
            _ => {}
        }
    }
    n
}

/// The page's metadata and text as Markdown: its main content, or the full page when the main
/// content keeps too little of it (see [`MAIN_SHARE`]) or cannot be found; which one, and
/// why, in the [`Extraction`].
fn html_to_markdown(url: &str, html: &str) -> Result<(HtmlMeta, String, Extraction), ParseError> {
    let cfg = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Markdown,
        ..Default::default()
    };
    let mut reader = dom_smoothie::Readability::new(html, Some(url), Some(cfg))
        .map_err(|e| ParseError::Html(e.to_string()))?;
    // Read before `parse`, which rewrites the document.
    let canonical = reader
        .doc
        .select(r#"link[rel="canonical"]"#)
        .attr("href")
        .map(|h| h.trim().to_string());
    let full_page = {
        let page = reader.doc.clone();
        page.select(PAGE_CHROME).remove();
        for node in page.select("header, footer").nodes() {
            let in_article = node
                .ancestors_it(None)
                .any(|a| a.has_name("article") || a.has_name("main"));
            if !in_article {
                node.remove_from_parent();
            }
        }
        // Lists that are mostly links are menus and link farms in a `div`.
        for list in page.select("ul, ol").iter() {
            let words = list.text().split_whitespace().count();
            let linked = list.select("a").text().split_whitespace().count();
            if linked * LINK_LIST.1 >= words * LINK_LIST.0 {
                list.remove();
            }
        }
        let body = page.select("body");
        match body.nodes().first() {
            Some(body) => body.md(Some(&SKIPPED_TAGS)).to_string(),
            None => page.md(Some(&SKIPPED_TAGS)).to_string(),
        }
    };
    let full_words = prose_words(&full_page);
    let article = match reader.parse() {
        Ok(article) => article,
        Err(e) if full_words > 0 => {
            let meta = HtmlMeta {
                title: clean(Some(&reader.get_article_title())),
                ..HtmlMeta::default()
            };
            let how = Extraction {
                method: ExtractionMethod::FullPage,
                reason: format!(
                    "main content extraction failed ({e}); used the full page ({full_words} \
                     words outside links)"
                ),
            };
            return Ok((meta, full_page, how));
        }
        Err(e) => return Err(ParseError::Html(e.to_string())),
    };
    // Relative canonical links resolve against the page; only http(s) results are kept.
    let base = url::Url::parse(url).ok();
    let canonical_url = canonical
        .or_else(|| article.url.clone())
        .and_then(|href| match &base {
            Some(b) => b.join(&href).ok(),
            None => url::Url::parse(&href).ok(),
        })
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .map(String::from);
    let meta = HtmlMeta {
        title: clean(Some(&article.title)),
        byline: clean(article.byline.as_deref()),
        published: clean(article.published_time.as_deref()),
        canonical_url,
        site_name: clean(article.site_name.as_deref()),
    };
    let main = article.text_content.to_string();
    let main_words = prose_words(&main);
    let kept = format!("main content kept {main_words} of {full_words} words outside links");
    let too_little = main_words * MAIN_SHARE.1 < full_words * MAIN_SHARE.0;
    if too_little && full_words >= FULL_PAGE_MIN_WORDS {
        let how = Extraction {
            method: ExtractionMethod::FullPage,
            reason: format!("{kept}; used the full page"),
        };
        Ok((meta, full_page, how))
    } else {
        let how = Extraction {
            method: ExtractionMethod::MainContent,
            reason: if too_little {
                format!("{kept}; the page is too short to prefer the full page")
            } else {
                kept
            },
        };
        Ok((meta, main, how))
    }
}

/// Text with its whitespace runs made single spaces; None when nothing is left.
fn clean(s: Option<&str>) -> Option<String> {
    s.map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
}

/// A PDF's pages as blocks that remember their page, for `#page=N` citations.
pub fn pdf_to_doc(url: &str, pdf: PdfText) -> Result<ParsedDoc, ParseError> {
    let mut blocks = Vec::new();
    for page in &pdf.pages {
        for mut b in plain_blocks(&join_hyphenated(&page.text)) {
            b.page = Some(page.n);
            blocks.push(b);
        }
    }
    let first_line = pdf
        .pages
        .iter()
        .flat_map(|p| p.text.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .filter(|l| l.len() <= 120)
        .map(str::to_string);
    let mut doc = finish(url, DocKind::Pdf, pdf.title.or(first_line), blocks)?;
    doc.byline = pdf.author;
    doc.published = pdf.created.as_deref().and_then(pdf_date);
    doc.pages = Some(pdf.page_count);
    let read = pdf.pages.len() as u32;
    if pdf.page_count > read {
        doc.unread.push(format!(
            "only the first {read} of the {} pages the document claims were read",
            pdf.page_count
        ));
    }
    Ok(doc)
}

/// "exam-\nple" → "example": words broken across lines by the typesetter are joined.
fn join_hyphenated(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let next_starts_lower = lines
            .peek()
            .and_then(|n| n.trim_start().chars().next())
            .is_some_and(char::is_lowercase);
        let broken = line.len() > 2
            && line.ends_with('-')
            && line[..line.len() - 1]
                .chars()
                .last()
                .is_some_and(char::is_alphabetic);
        if broken && next_starts_lower {
            out.push_str(&line[..line.len() - 1]);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A PDF date (`D:YYYYMMDDHHmmSS...`) as ISO 8601 (`YYYY-MM-DD`); None when unreadable.
fn pdf_date(raw: &str) -> Option<String> {
    let digits: String = raw
        .trim()
        .trim_start_matches("D:")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let (y, m, d) = (
        digits.get(0..4)?,
        digits.get(4..6).unwrap_or("01"),
        digits.get(6..8).unwrap_or("01"),
    );
    let (mi, di): (u32, u32) = (m.parse().ok()?, d.parse().ok()?);
    ((1..=12).contains(&mi) && (1..=31).contains(&di)).then(|| format!("{y}-{m}-{d}"))
}

/// Parses any kind Fathom reads. Text formats parse on the blocking pool; PDFs in the
/// isolated worker when one is configured (else they are refused with a clear reason), at
/// most one worker per core at a time, so concurrent runs cannot multiply the worker's memory
/// limit beyond what the machine has. Clones share that bound.
#[derive(Debug, Clone, Default)]
pub struct ContentParser {
    pdf: Option<(Arc<PdfSandbox>, Arc<tokio::sync::Semaphore>)>,
}

impl ContentParser {
    pub fn new(pdf: Option<PdfSandbox>) -> ContentParser {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        ContentParser {
            pdf: pdf.map(|p| (Arc::new(p), Arc::new(tokio::sync::Semaphore::new(workers)))),
        }
    }

    pub async fn parse(
        &self,
        url: &str,
        kind: DocKind,
        bytes: Vec<u8>,
        charset: Option<String>,
    ) -> Result<ParsedDoc, ParseError> {
        if kind == DocKind::Pdf {
            let (sandbox, slots) = self.pdf.as_ref().ok_or(ParseError::PdfUnavailable)?;
            let _slot = slots
                .acquire()
                .await
                .map_err(|_| ParseError::PdfUnavailable)?;
            let text = sandbox.read(&bytes).await.map_err(ParseError::Pdf)?;
            return pdf_to_doc(url, text);
        }
        let url = url.to_string();
        tokio::task::spawn_blocking(move || {
            parse_content_as(&url, kind, &bytes, charset.as_deref())
        })
        .await
        // The text parsers return errors rather than panic; a panic is a bug in one of
        // them, reported as this document's failure.
        .unwrap_or_else(|e| Err(ParseError::Crashed(e.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_keeps_the_article_and_drops_navigation() {
        let html = r#"<html><head><title>Borrowing</title></head><body>
            <nav><a href="/">Home</a> <a href="/x">Other chapter</a></nav>
            <main><h1>Borrowing</h1>
            <p>A reference lets you refer to a value without taking ownership of it. References
            are immutable by default, and the borrow checker enforces this at compile time.</p>
            <p>Mutable references have one big restriction: if you have a mutable reference to a
            value, you can have no other references to that value.</p>
            <pre><code>let r = &amp;s;</code></pre></main>
            <footer>Copyright</footer></body></html>"#;
        let doc = parse_content("file:///b/borrow.html", DocKind::Html, html.as_bytes()).unwrap();
        assert_eq!(doc.title, "Borrowing");
        let all: String = doc.blocks.iter().map(|b| b.text.as_str()).collect();
        assert!(
            all.contains("A reference lets you refer to a value"),
            "{all}"
        );
        assert!(!all.contains("Other chapter"), "{all}");
        assert!(!all.contains("let r"), "{all}");
    }

    #[test]
    fn html_metadata_byline_date_canonical_and_site() {
        let html = r#"<html><head><title>Borrowing, explained | Rust Notes</title>
            <link rel="canonical" href="/guide/borrowing">
            <meta property="og:site_name" content="Rust Notes">
            <meta name="author" content="Ada Lovelace">
            <meta property="article:published_time" content="2024-05-02T09:30:00Z">
            </head><body><article><h1>Borrowing, explained</h1>
            <p>A reference lets you refer to a value without taking ownership of it, and the
            borrow checker makes sure the reference never outlives the value.</p>
            <p>Mutable references are exclusive: while one exists, no other reference to the
            same value may be used, which rules out data races at compile time.</p>
            </article></body></html>"#;
        let doc = parse_content(
            "https://notes.example/guide/borrowing?utm_source=x",
            DocKind::Html,
            html.as_bytes(),
        )
        .unwrap();
        assert_eq!(doc.byline.as_deref(), Some("Ada Lovelace"));
        assert_eq!(doc.published.as_deref(), Some("2024-05-02T09:30:00Z"));
        assert_eq!(
            doc.canonical_url.as_deref(),
            Some("https://notes.example/guide/borrowing")
        );
        assert_eq!(doc.site_name.as_deref(), Some("Rust Notes"));
        // A page without any of it has none of it, and a javascript: canonical is dropped.
        let bare = r#"<html><head><link rel="canonical" href="javascript:alert(1)"></head>
            <body><p>Plain words in a plain page, long enough to be the main content here.</p>
            </body></html>"#;
        let doc = parse_content("https://x.example/a", DocKind::Html, bare.as_bytes()).unwrap();
        assert_eq!(
            (doc.byline, doc.published, doc.canonical_url, doc.site_name),
            (None, None, None, None)
        );
    }

    #[test]
    fn pdf_pages_become_blocks_that_keep_their_page() {
        let text = PdfText {
            title: None,
            author: Some("Ferris".into()),
            created: Some("D:20240315120000Z".into()),
            page_count: 9,
            pages: vec![
                crate::pdf::PdfPage {
                    n: 1,
                    text: "Ownership and Borrowing\nEach value has one own-\ner at a time.\n\nA second paragraph.".into(),
                },
                crate::pdf::PdfPage {
                    n: 2,
                    text: "A well-known rule: references never outlive values.".into(),
                },
            ],
        };
        let doc = pdf_to_doc("https://x.example/book.pdf", text).unwrap();
        assert_eq!(doc.kind, DocKind::Pdf);
        assert_eq!(doc.title, "Ownership and Borrowing");
        assert_eq!(doc.byline.as_deref(), Some("Ferris"));
        assert_eq!(doc.published.as_deref(), Some("2024-03-15"));
        assert_eq!(doc.pages, Some(9));
        // 2 of 9 read: the cut is recorded.
        assert_eq!(
            doc.unread,
            ["only the first 2 of the 9 pages the document claims were read"]
        );
        let pages: Vec<Option<u32>> = doc.blocks.iter().map(|b| b.page).collect();
        assert_eq!(pages, [Some(1), Some(1), Some(2)]);
        assert!(
            doc.blocks[0].text.contains("one owner at a time"),
            "{:?}",
            doc.blocks
        );
        assert!(
            doc.blocks[2].text.contains("well-known"),
            "{:?}",
            doc.blocks
        );
        assert_eq!(pdf_date("D:2024"), Some("2024-01-01".into()));
        assert_eq!(pdf_date("D:20241399"), None);
        assert_eq!(pdf_date("yesterday"), None);
    }

    #[test]
    fn pdf_without_a_worker_is_refused_with_a_reason() {
        let e = parse_content("file:///x.pdf", DocKind::Pdf, b"%PDF-1.4").unwrap_err();
        assert_eq!(e, ParseError::PdfUnavailable);
        assert!(e.to_string().contains("isolated PDF worker"));
    }

    #[test]
    fn charsets_declared_sniffed_and_guessed() {
        let latin1 = b"<html><body><p>Un caf\xe9 cr\xe8me br\xfbl\xe9e, s'il vous pla\xeet.</p></body></html>";
        let doc =
            parse_content_as("https://x/", DocKind::Html, latin1, Some("ISO-8859-1")).unwrap();
        assert!(
            doc.blocks[0].text.contains("café crème brûlée"),
            "{:?}",
            doc.blocks
        );
        let meta = b"<html><head><meta charset=\"windows-1252\"></head><body><p>na\xefve \x93quotes\x94 and more words here</p></body></html>";
        let doc = parse_content("https://x/", DocKind::Html, meta).unwrap();
        assert!(
            doc.blocks[0].text.contains("naïve “quotes”"),
            "{:?}",
            doc.blocks
        );
        let sjis = encoding_rs::SHIFT_JIS
            .encode("日本語のテキストです。所有権について説明します。")
            .0;
        let text = decode_text(&sjis, DocKind::Text, None).unwrap();
        assert!(text.contains("所有権"), "{text}");
        let utf16 = [
            &[0xFF, 0xFE][..],
            &"hi there"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect::<Vec<u8>>(),
        ]
        .concat();
        assert_eq!(
            decode_text(&utf16, DocKind::Text, None).unwrap(),
            "hi there"
        );
    }

    #[test]
    fn binary_and_garbage_are_refused() {
        let e = parse_content("file:///x.txt", DocKind::Text, b"abc\0\x01\x02").unwrap_err();
        assert_eq!(e, ParseError::Binary("text/plain"));
        let junk: Vec<u8> = (0..400).map(|i| 0x80 + (i % 60) as u8).collect();
        assert_eq!(
            parse_content("file:///x.txt", DocKind::Text, &junk).unwrap_err(),
            ParseError::NotText
        );
        assert_eq!(
            parse_content("file:///x.md", DocKind::Markdown, b"   \n\n").unwrap_err(),
            ParseError::Empty
        );
    }
}
