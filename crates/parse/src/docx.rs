//! DOCX to Markdown: paragraphs, headings (`Title`, `HeadingN` styles), line breaks, tabs and
//! tables from `word/document.xml`; the title from `docProps/core.xml`. Sizes are capped, so a
//! zip bomb stops at the cap.

use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::Event;

/// Largest `word/document.xml` read, uncompressed.
const MAX_XML_BYTES: u64 = 64 * 1024 * 1024;

/// A DOCX file as Markdown, with its title if the file names one.
pub fn docx_to_markdown(bytes: &[u8]) -> Result<(Option<String>, String), String> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| format!("not a DOCX (zip) file: {e}"))?;
    let document = read_entry(&mut zip, "word/document.xml")?
        .ok_or("not a DOCX file: word/document.xml is missing")?;
    let title = read_entry(&mut zip, "docProps/core.xml")
        .ok()
        .flatten()
        .and_then(|core| element_text(&core, "title"));
    Ok((title, body_markdown(&document)?))
}

fn read_entry(
    zip: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let entry = match zip.by_name(name) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(format!("{name}: {e}")),
    };
    let mut out = Vec::new();
    entry
        .take(MAX_XML_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("{name}: {e}"))?;
    if out.len() as u64 > MAX_XML_BYTES {
        return Err(format!("{name} is larger than {MAX_XML_BYTES} bytes"));
    }
    Ok(Some(out))
}

/// The text of the first element with local name `name`.
fn element_text(xml: &[u8], name: &str) -> Option<String> {
    let mut reader = Reader::from_reader(xml);
    let mut inside = false;
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).ok()? {
            Event::Start(e) if e.local_name().into_inner() == name => inside = true,
            Event::Text(t) if inside => {
                let text = t.xml10_content().trim().to_string();
                return (!text.is_empty()).then_some(text);
            }
            Event::End(e) if e.local_name().into_inner() == name => return None,
            Event::Eof => return None,
            _ => {}
        }
        buf.clear();
    }
}

fn escape_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn body_markdown(xml: &[u8]) -> Result<String, String> {
    let mut reader = Reader::from_reader(xml);
    let mut out = String::new();
    let mut para = String::new();
    let mut style: Option<String> = None;
    let mut in_text = false;
    // Tables: rows of cells, the cell being read; nested tables are flattened into cells.
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut cell: Option<String> = None;
    let mut depth = 0usize;
    let mut buf = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("word/document.xml is not valid XML: {e}"))?;
        match event {
            Event::Start(e) | Event::Empty(e) if e.local_name().into_inner() == "pStyle" => {
                style = e
                    .attributes()
                    .flatten()
                    .find(|a| a.key.local_name().into_inner() == "val")
                    .and_then(|a| {
                        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .ok()
                            .map(|v| v.into_owned())
                    });
            }
            Event::Start(e) => match e.local_name().into_inner() {
                "p" => {
                    para.clear();
                    style = None;
                }
                "t" => in_text = true,
                "tbl" => depth += 1,
                "tr" if depth == 1 => table.push(Vec::new()),
                "tc" if depth == 1 => cell = Some(String::new()),
                _ => {}
            },
            Event::Empty(e) => match e.local_name().into_inner() {
                "tab" => para.push('\t'),
                "br" | "cr" => para.push('\n'),
                _ => {}
            },
            Event::Text(t) if in_text => {
                para.push_str(&t.xml10_content());
            }
            Event::GeneralRef(r) if in_text => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    para.push(c);
                } else {
                    let name = r.xml10_content();
                    para.push_str(match name.as_ref() {
                        "amp" => "&",
                        "lt" => "<",
                        "gt" => ">",
                        "quot" => "\"",
                        "apos" => "'",
                        _ => "",
                    });
                }
            }
            Event::End(e) => match e.local_name().into_inner() {
                "t" => in_text = false,
                "p" => {
                    let text = para.trim();
                    if let Some(c) = cell.as_mut() {
                        if !text.is_empty() {
                            if !c.is_empty() {
                                c.push(' ');
                            }
                            c.push_str(text);
                        }
                    } else if !text.is_empty() {
                        let level = style.as_deref().and_then(heading_level);
                        match level {
                            Some(n) => out.push_str(&format!(
                                "{} {}\n\n",
                                "#".repeat(n),
                                text.replace('\n', " ")
                            )),
                            None => out.push_str(&format!("{text}\n\n")),
                        }
                    }
                    para.clear();
                }
                "tc" if depth == 1 => {
                    if let (Some(c), Some(row)) = (cell.take(), table.last_mut()) {
                        row.push(c);
                    }
                }
                "tbl" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        out.push_str(&render_table(&std::mem::take(&mut table)));
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(out)
}

/// `Title` is level 1; `HeadingN` (or `heading N`) is level N+1, at most 6.
fn heading_level(style: &str) -> Option<usize> {
    let s = style.to_ascii_lowercase().replace(' ', "");
    if s == "title" {
        return Some(1);
    }
    let n: usize = s.strip_prefix("heading")?.parse().ok()?;
    Some((n + 1).clamp(2, 6))
}

fn render_table(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = (0..width)
            .map(|k| escape_cell(row.get(k).map_or("", String::as_str)))
            .collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
        if i == 0 {
            out.push_str(&format!("|{}\n", " --- |".repeat(width)));
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// A DOCX as Word writes it: a zip with the document and its properties.
    pub(crate) fn sample_docx(title: &str, body_xml: &str) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default();
        zip.start_file("[Content_Types].xml", opts).unwrap();
        zip.write_all(b"<?xml version=\"1.0\"?><Types/>").unwrap();
        zip.start_file("docProps/core.xml", opts).unwrap();
        write!(zip, "<?xml version=\"1.0\"?><cp:coreProperties xmlns:cp=\"c\" xmlns:dc=\"d\"><dc:title>{title}</dc:title></cp:coreProperties>").unwrap();
        zip.start_file("word/document.xml", opts).unwrap();
        write!(zip, "<?xml version=\"1.0\"?><w:document xmlns:w=\"w\"><w:body>{body_xml}</w:body></w:document>").unwrap();
        zip.finish().unwrap().into_inner()
    }

    #[test]
    fn headings_paragraphs_tables_and_entities() {
        let body = r#"
            <w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Ownership</w:t></w:r></w:p>
            <w:p><w:r><w:t xml:space="preserve">Each value has </w:t></w:r><w:r><w:t>one owner &amp; one scope.</w:t></w:r></w:p>
            <w:tbl>
              <w:tr><w:tc><w:p><w:r><w:t>Type</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Copy?</w:t></w:r></w:p></w:tc></w:tr>
              <w:tr><w:tc><w:p><w:r><w:t>i32</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>yes | always</w:t></w:r></w:p></w:tc></w:tr>
            </w:tbl>
            <w:p><w:r><w:t>Line one</w:t><w:br/><w:t>line two</w:t></w:r></w:p>"#;
        let (title, md) = docx_to_markdown(&sample_docx("Rust notes", body)).unwrap();
        assert_eq!(title.as_deref(), Some("Rust notes"));
        assert!(
            md.starts_with("## Ownership\n\nEach value has one owner & one scope.\n\n"),
            "{md}"
        );
        assert!(
            md.contains("| Type | Copy? |\n| --- | --- |\n| i32 | yes \\| always |\n"),
            "{md}"
        );
        assert!(md.contains("Line one\nline two"), "{md}");
    }

    #[test]
    fn docx_files_parse_like_any_document() {
        use crate::document::{DocKind, parse_content};
        let body = r#"<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Borrowing</w:t></w:r></w:p>
            <w:p><w:r><w:t>A reference lets code use a value without taking ownership of it.</w:t></w:r></w:p>"#;
        let kind = DocKind::from_path("notes/borrowing.docx").unwrap();
        assert_eq!(kind, DocKind::Docx);
        let doc = parse_content(
            "file:///notes/borrowing.docx",
            kind,
            &sample_docx("Borrowing notes", body),
        )
        .unwrap();
        assert_eq!(doc.title, "Borrowing notes");
        assert_eq!(doc.blocks[0].heading, "Borrowing");
        assert!(
            doc.blocks[0]
                .text
                .starts_with("A reference lets code use a value")
        );
        let err = parse_content("file:///x.docx", kind, b"not a zip").unwrap_err();
        assert!(
            err.to_string().starts_with("unreadable DOCX: not a DOCX"),
            "{err}"
        );
    }

    #[test]
    fn broken_files_are_refused_with_a_reason() {
        assert!(
            docx_to_markdown(b"PK\x03\x04 garbage")
                .unwrap_err()
                .contains("not a DOCX")
        );
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("other.xml", zip::write::SimpleFileOptions::default())
            .unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        assert!(
            docx_to_markdown(&bytes)
                .unwrap_err()
                .contains("word/document.xml is missing")
        );
        let bad = sample_docx("t", "<w:p><w:r><w:t>unclosed</w:r></w:p>");
        assert!(
            docx_to_markdown(&bad)
                .unwrap_err()
                .contains("not valid XML")
        );
    }
}
