//! `parse_content`: turns fetched bytes into a titled list of prose blocks.

use serde::{Deserialize, Serialize};

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
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            DocKind::Html => "text/html",
            DocKind::Markdown => "text/markdown",
            DocKind::Text => "text/plain",
            DocKind::Docx => DOCX_TYPE,
        }
    }

    pub fn from_content_type(ct: &str) -> Option<DocKind> {
        let base = ct.split(';').next()?.trim().to_ascii_lowercase();
        match base.as_str() {
            "text/html" | "application/xhtml+xml" => Some(DocKind::Html),
            "text/markdown" | "text/x-markdown" => Some(DocKind::Markdown),
            "text/plain" => Some(DocKind::Text),
            DOCX_TYPE => Some(DocKind::Docx),
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
    Docx(String),
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

/// Parses a document: HTML through a Readability port (main content only, as Markdown),
/// Markdown and text directly.
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
    let (docx_title, text) = match kind {
        DocKind::Docx => {
            let (title, markdown) =
                crate::docx::docx_to_markdown(bytes).map_err(ParseError::Docx)?;
            (title, markdown)
        }
        _ => (None, decode_text(bytes, kind, charset)?),
    };
    let fallback_title = url
        .rsplit('/')
        .next()
        .unwrap_or(url)
        .rsplit_once('.')
        .map(|(stem, _)| stem.replace(['-', '_'], " "))
        .unwrap_or_else(|| url.to_string());
    let (title, blocks) = match kind {
        DocKind::Html => {
            let (title, markdown) = html_to_markdown(url, &text)?;
            let (h1, blocks) = markdown_blocks(&markdown);
            (title.or(h1), blocks)
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
    };
    let words = blocks
        .iter()
        .map(|b| b.text.split_whitespace().count())
        .sum();
    if words == 0 {
        return Err(ParseError::Empty);
    }
    Ok(ParsedDoc {
        url: url.to_string(),
        title: title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(fallback_title),
        kind,
        blocks,
        words,
    })
}

fn html_to_markdown(url: &str, html: &str) -> Result<(Option<String>, String), ParseError> {
    let cfg = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Markdown,
        ..Default::default()
    };
    let mut reader = dom_smoothie::Readability::new(html, Some(url), Some(cfg))
        .map_err(|e| ParseError::Html(e.to_string()))?;
    let article = reader
        .parse()
        .map_err(|e| ParseError::Html(e.to_string()))?;
    let title = Some(article.title.trim().to_string()).filter(|t| !t.is_empty());
    Ok((title, article.text_content.to_string()))
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
