//! A DOCX file (WordprocessingML in a zip), written directly: the report's H1 in the `Title`
//! style and its sections in `Heading1` and below (as Word numbers them), lists numbered by
//! `word/numbering.xml`, tables as real `w:tbl` with their grid, code in a `Code` style,
//! sources' addresses as hyperlinks and each citation a link to its source in the list, and
//! page numbers in the footer. Everything a word processor needs and nothing more: Word,
//! LibreOffice and our own reader open it.
//!
//! Each part's XML is written with `quick_xml::Writer`, which escapes text and attribute
//! values; the helpers at the end of this file keep the element writing short.

use std::borrow::Cow;
use std::io::{self, Write};

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use zip::result::ZipError;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::ExportError;
use crate::document::{Align, Block, Document, Inline, ListItem, Run, Style};

/// A4 in twentieths of a point, with 2 cm margins.
const PAGE_WIDTH: u32 = 11906;
const PAGE_HEIGHT: u32 = 16838;
const MARGIN: u32 = 1134;
const TEXT_WIDTH: u32 = PAGE_WIDTH - 2 * MARGIN;
/// The list levels `word/numbering.xml` defines (Word's nine).
const LIST_LEVELS: usize = 9;
/// The bulleted list's numbering; ordered lists get their own from 2 up, so each restarts.
const BULLETS_NUM_ID: usize = 1;

const W_NS: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
const R_NS: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const REL_NS: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
const REL_TYPE: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const CT_NS: &str = "http://schemas.openxmlformats.org/package/2006/content-types";

/// Why the DOCX could not be written. Both are written into memory, so neither is expected.
#[derive(Debug, thiserror::Error)]
enum DocxError {
    #[error("could not write the DOCX's XML")]
    Xml(#[from] io::Error),
    #[error("could not write the DOCX")]
    Zip(#[from] ZipError),
}

impl From<DocxError> for ExportError {
    fn from(e: DocxError) -> ExportError {
        ExportError::Write {
            what: e.to_string(),
            source: e.into(),
        }
    }
}

/// The DOCX file of `doc`.
pub fn write(doc: &Document) -> Result<Vec<u8>, ExportError> {
    Ok(package(doc)?)
}

fn package(doc: &Document) -> Result<Vec<u8>, DocxError> {
    let Body {
        w,
        hyperlinks,
        ordered_lists,
    } = document(&doc.blocks)?;
    let parts: [(&str, Vec<u8>); 8] = [
        ("[Content_Types].xml", content_types()?),
        ("_rels/.rels", package_rels()?),
        ("docProps/core.xml", core_properties(&doc.title)?),
        ("word/document.xml", w.into_inner()),
        ("word/_rels/document.xml.rels", document_rels(&hyperlinks)?),
        ("word/styles.xml", styles(&doc.language)?),
        ("word/numbering.xml", numbering(&ordered_lists)?),
        ("word/footer1.xml", footer()?),
    ];
    let mut zip = ZipWriter::new(io::Cursor::new(Vec::new()));
    // A fixed time: the same report gives the same bytes, so it is stored once.
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .last_modified_time(DateTime::default());
    for (name, xml) in parts {
        zip.start_file(name, options)?;
        zip.write_all(&xml).map_err(ZipError::Io)?;
    }
    Ok(zip.finish()?.into_inner())
}

/// `word/document.xml` as it is written, with what the other parts must list.
struct Body {
    w: Xml,
    /// External addresses, as relationships `rIdLink1`, `rIdLink2`, ...
    hyperlinks: Vec<String>,
    /// The start number and level of each ordered list, numbered from 2 (`w:numId`).
    ordered_lists: Vec<(u64, usize)>,
}

/// `word/document.xml`: the blocks, then the page setup.
fn document(blocks: &[Block]) -> io::Result<Body> {
    let mut body = Body {
        w: declared()?,
        hyperlinks: Vec::new(),
        ordered_lists: Vec::new(),
    };
    start(
        &mut body.w,
        "w:document",
        &[("xmlns:w", W_NS), ("xmlns:r", R_NS)],
    )?;
    start(&mut body.w, "w:body", &[])?;
    body.blocks(blocks, 0)?;
    section(&mut body.w)?;
    end(&mut body.w, "w:body")?;
    end(&mut body.w, "w:document")?;
    Ok(body)
}

impl Body {
    fn blocks(&mut self, blocks: &[Block], level: usize) -> io::Result<()> {
        for b in blocks {
            self.block(b, level)?;
        }
        Ok(())
    }

    fn block(&mut self, block: &Block, level: usize) -> io::Result<()> {
        match block {
            Block::Heading { level: h, text } => {
                // Word's convention, which our reader follows: Title, then Heading1 and on.
                let style = match h {
                    1 => "Title".to_string(),
                    n => format!("Heading{}", (n - 1).min(5)),
                };
                self.paragraph(|w| paragraph_props(w, Some(&style), 0), text)
            }
            Block::Paragraph(text) => self.paragraph(|w| paragraph_props(w, None, level), text),
            Block::List { start, items } => self.list(*start, items, level),
            Block::Table {
                align,
                header,
                rows,
            } => self.table(align, header, rows),
            Block::Code { text, .. } => {
                // A paragraph a line, so the lines keep their breaks and indents.
                for line in text.split('\n') {
                    el(&mut self.w, "w:p", &[], |w| {
                        paragraph_props(w, Some("Code"), level)?;
                        if line.is_empty() {
                            return Ok(());
                        }
                        run(w, &line.replace('\t', "    "), None, Style::default())
                    })?;
                }
                Ok(())
            }
            Block::Quote(blocks) => {
                for b in blocks {
                    match b {
                        Block::Paragraph(text) => {
                            self.paragraph(|w| paragraph_props(w, Some("Quote"), 0), text)?;
                        }
                        other => self.block(other, level + 1)?,
                    }
                }
                Ok(())
            }
            Block::Rule => el(&mut self.w, "w:p", &[], |w| {
                el(w, "w:pPr", &[], |w| {
                    el(w, "w:pBdr", &[], |w| {
                        let line = [
                            ("w:val", "single"),
                            ("w:sz", "6"),
                            ("w:space", "1"),
                            ("w:color", "BFBFBF"),
                        ];
                        empty(w, "w:bottom", &line)
                    })
                })
            }),
        }
    }

    fn list(&mut self, start: Option<u64>, items: &[ListItem], level: usize) -> io::Result<()> {
        let ilvl = level.min(LIST_LEVELS - 1);
        let num_id = match start {
            Some(n) => {
                self.ordered_lists.push((n, ilvl));
                self.ordered_lists.len() + 1
            }
            None => BULLETS_NUM_ID,
        };
        for item in items {
            for (i, b) in item.blocks.iter().enumerate() {
                match b {
                    // The number or bullet goes on the item's first paragraph, where its
                    // bookmark is too (a source's, which citations link to).
                    Block::Paragraph(text) if i == 0 => {
                        let anchor = item.anchor.as_deref();
                        self.paragraph(
                            |w| {
                                list_props(w, ilvl, num_id)?;
                                anchor.map_or(Ok(()), |a| bookmark(w, a))
                            },
                            text,
                        )?;
                    }
                    // Further paragraphs, nested lists, tables: under the item's text.
                    other => self.block(other, level + 1)?,
                }
            }
            if item.blocks.is_empty() {
                self.paragraph(|w| list_props(w, ilvl, num_id), &[])?;
            }
        }
        Ok(())
    }

    fn table(
        &mut self,
        align: &[Align],
        header: &[Vec<Inline>],
        rows: &[Vec<Vec<Inline>>],
    ) -> io::Result<()> {
        let columns = rows
            .iter()
            .map(Vec::len)
            .chain([header.len()])
            .max()
            .unwrap_or(0);
        if columns == 0 {
            return Ok(());
        }
        let col_width = TEXT_WIDTH / columns as u32;
        start(&mut self.w, "w:tbl", &[])?;
        table_props(&mut self.w, columns, col_width)?;
        if !header.is_empty() {
            self.row(header, columns, col_width, align, true)?;
        }
        for r in rows {
            self.row(r, columns, col_width, align, false)?;
        }
        end(&mut self.w, "w:tbl")?;
        // Word joins two tables with nothing between them: a paragraph keeps them apart.
        empty(&mut self.w, "w:p", &[])
    }

    fn row(
        &mut self,
        cells: &[Vec<Inline>],
        columns: usize,
        width: u32,
        align: &[Align],
        header: bool,
    ) -> io::Result<()> {
        let width = width.to_string();
        start(&mut self.w, "w:tr", &[])?;
        if header {
            el(&mut self.w, "w:trPr", &[], |w| empty(w, "w:tblHeader", &[]))?;
        }
        for c in 0..columns {
            start(&mut self.w, "w:tc", &[])?;
            el(&mut self.w, "w:tcPr", &[], |w| {
                empty(w, "w:tcW", &[("w:w", &width), ("w:type", "dxa")])?;
                if header {
                    let shading = [
                        ("w:val", "clear"),
                        ("w:color", "auto"),
                        ("w:fill", "EFEFEF"),
                    ];
                    empty(w, "w:shd", &shading)?;
                }
                Ok(())
            })?;
            let jc = match align.get(c) {
                Some(Align::Center) => Some("center"),
                Some(Align::Right) => Some("right"),
                _ => None,
            };
            let props = |w: &mut Xml| {
                el(w, "w:pPr", &[], |w| {
                    empty(w, "w:spacing", &[("w:before", "40"), ("w:after", "40")])?;
                    jc.map_or(Ok(()), |jc| val(w, "w:jc", jc))
                })
            };
            // A cell must hold a paragraph, even an empty one.
            let text = cells.get(c).map_or(&[][..], Vec::as_slice);
            if header {
                self.paragraph(props, &emboldened(text))?;
            } else {
                self.paragraph(props, text)?;
            }
            end(&mut self.w, "w:tc")?;
        }
        end(&mut self.w, "w:tr")
    }

    /// A paragraph of `text`, after what `props` writes (its `w:pPr`, if it has one).
    fn paragraph(
        &mut self,
        props: impl FnOnce(&mut Xml) -> io::Result<()>,
        text: &[Inline],
    ) -> io::Result<()> {
        start(&mut self.w, "w:p", &[])?;
        props(&mut self.w)?;
        self.runs(text)?;
        end(&mut self.w, "w:p")
    }

    fn runs(&mut self, text: &[Inline]) -> io::Result<()> {
        for inline in text {
            match inline {
                Inline::Run(r) => match r.link.as_deref() {
                    None => run(&mut self.w, &r.text, None, r.style)?,
                    Some(href) => {
                        // A `#fragment` names a bookmark here; an address goes through a
                        // relationship of `word/_rels/document.xml.rels`.
                        let target = match href.strip_prefix('#') {
                            Some(anchor) => ("w:anchor", anchor.to_string()),
                            None => ("r:id", format!("rIdLink{}", self.hyperlink_id(href))),
                        };
                        el(&mut self.w, "w:hyperlink", &[(target.0, &target.1)], |w| {
                            run(w, &r.text, Some("Hyperlink"), r.style)
                        })?;
                    }
                },
                Inline::Citation(n) => {
                    let anchor = format!("source-{n}");
                    el(&mut self.w, "w:hyperlink", &[("w:anchor", &anchor)], |w| {
                        el(w, "w:r", &[], |w| {
                            el(w, "w:rPr", &[], |w| val(w, "w:rStyle", "Hyperlink"))?;
                            text_el(w, "w:t", &[], &format!("[{n}]"))
                        })
                    })?;
                }
                Inline::LineBreak => el(&mut self.w, "w:r", &[], |w| empty(w, "w:br", &[]))?,
            }
        }
        Ok(())
    }

    /// The number of `href`'s relationship, the same for each link to it.
    fn hyperlink_id(&mut self, href: &str) -> usize {
        match self.hyperlinks.iter().position(|h| h == href) {
            Some(i) => i + 1,
            None => {
                self.hyperlinks.push(href.to_string());
                self.hyperlinks.len()
            }
        }
    }
}

/// A run of `text`: in `char_style` if given (a link's), else in the code style if `style`
/// says code; bold and italic as `style` says.
fn run(w: &mut Xml, text: &str, char_style: Option<&str>, style: Style) -> io::Result<()> {
    let char_style = char_style.or(style.code.then_some("CodeChar"));
    el(w, "w:r", &[], |w| {
        if char_style.is_some() || style.bold || style.italic {
            el(w, "w:rPr", &[], |w| {
                if let Some(s) = char_style {
                    val(w, "w:rStyle", s)?;
                }
                if style.bold {
                    empty(w, "w:b", &[])?;
                }
                if style.italic {
                    empty(w, "w:i", &[])?;
                }
                Ok(())
            })?;
        }
        // Word drops a run's leading and trailing spaces unless told to keep them.
        text_el(w, "w:t", &[("xml:space", "preserve")], text)
    })
}

/// A table header's text, in bold.
fn emboldened(text: &[Inline]) -> Vec<Inline> {
    text.iter()
        .map(|i| match i {
            Inline::Run(r) => Inline::Run(Run {
                style: Style {
                    bold: true,
                    ..r.style
                },
                ..r.clone()
            }),
            other => other.clone(),
        })
        .collect()
}

/// A paragraph's `w:pPr` with its style and its indent at `level`; none when it has neither.
fn paragraph_props(w: &mut Xml, style: Option<&str>, level: usize) -> io::Result<()> {
    if style.is_none() && level == 0 {
        return Ok(());
    }
    el(w, "w:pPr", &[], |w| {
        if let Some(s) = style {
            val(w, "w:pStyle", s)?;
        }
        indent(w, level)
    })
}

/// A list item's `w:pPr`: its level and its list's numbering.
fn list_props(w: &mut Xml, ilvl: usize, num_id: usize) -> io::Result<()> {
    el(w, "w:pPr", &[], |w| {
        val(w, "w:pStyle", "ListParagraph")?;
        el(w, "w:numPr", &[], |w| {
            val(w, "w:ilvl", &ilvl.to_string())?;
            val(w, "w:numId", &num_id.to_string())
        })
    })
}

/// A paragraph's left indent inside lists and quotes: level with the text of a list item
/// one level up (see the indents in `numbering`).
fn indent(w: &mut Xml, level: usize) -> io::Result<()> {
    if level == 0 {
        return Ok(());
    }
    let left = 720 + 360 * (level.min(LIST_LEVELS) - 1);
    empty(w, "w:ind", &[("w:left", &left.to_string())])
}

/// An empty bookmark named `name`, for links to it.
fn bookmark(w: &mut Xml, name: &str) -> io::Result<()> {
    let id = bookmark_id(name).to_string();
    empty(w, "w:bookmarkStart", &[("w:id", &id), ("w:name", name)])?;
    empty(w, "w:bookmarkEnd", &[("w:id", &id)])
}

/// A bookmark's numeric id, stable for its name.
fn bookmark_id(name: &str) -> u32 {
    name.strip_prefix("source-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A table's properties (full width, thin grey borders, fixed layout) and its column grid.
fn table_props(w: &mut Xml, columns: usize, col_width: u32) -> io::Result<()> {
    el(w, "w:tblPr", &[], |w| {
        empty(w, "w:tblW", &[("w:w", "5000"), ("w:type", "pct")])?;
        el(w, "w:tblBorders", &[], |w| {
            let line = [
                ("w:val", "single"),
                ("w:sz", "4"),
                ("w:space", "0"),
                ("w:color", "A6A6A6"),
            ];
            for side in [
                "w:top",
                "w:left",
                "w:bottom",
                "w:right",
                "w:insideH",
                "w:insideV",
            ] {
                empty(w, side, &line)?;
            }
            Ok(())
        })?;
        empty(w, "w:tblLayout", &[("w:type", "fixed")])?;
        el(w, "w:tblCellMar", &[], |w| {
            empty(w, "w:left", &[("w:w", "80"), ("w:type", "dxa")])?;
            empty(w, "w:right", &[("w:w", "80"), ("w:type", "dxa")])
        })?;
        let look = [
            ("w:val", "04A0"),
            ("w:firstRow", "1"),
            ("w:lastRow", "0"),
            ("w:firstColumn", "0"),
            ("w:lastColumn", "0"),
            ("w:noHBand", "0"),
            ("w:noVBand", "1"),
        ];
        empty(w, "w:tblLook", &look)
    })?;
    let col_width = col_width.to_string();
    el(w, "w:tblGrid", &[], |w| {
        for _ in 0..columns {
            empty(w, "w:gridCol", &[("w:w", &col_width)])?;
        }
        Ok(())
    })
}

/// The page: A4, its margins, the footer with the page numbers.
fn section(w: &mut Xml) -> io::Result<()> {
    el(w, "w:sectPr", &[], |w| {
        empty(
            w,
            "w:footerReference",
            &[("w:type", "default"), ("r:id", "rIdFooter")],
        )?;
        let (width, height) = (PAGE_WIDTH.to_string(), PAGE_HEIGHT.to_string());
        empty(w, "w:pgSz", &[("w:w", &width), ("w:h", &height)])?;
        let m = MARGIN.to_string();
        let margins = [
            ("w:top", m.as_str()),
            ("w:right", &m),
            ("w:bottom", &m),
            ("w:left", &m),
            ("w:header", "567"),
            ("w:footer", "567"),
            ("w:gutter", "0"),
        ];
        empty(w, "w:pgMar", &margins)
    })
}

fn content_types() -> io::Result<Vec<u8>> {
    const OOXML: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml";
    part(|w| {
        el(w, "Types", &[("xmlns", CT_NS)], |w| {
            for (extension, content_type) in [
                (
                    "rels",
                    "application/vnd.openxmlformats-package.relationships+xml",
                ),
                ("xml", "application/xml"),
            ] {
                let attrs = [("Extension", extension), ("ContentType", content_type)];
                empty(w, "Default", &attrs)?;
            }
            for (name, content_type) in [
                ("/word/document.xml", format!("{OOXML}.document.main+xml")),
                ("/word/styles.xml", format!("{OOXML}.styles+xml")),
                ("/word/numbering.xml", format!("{OOXML}.numbering+xml")),
                ("/word/footer1.xml", format!("{OOXML}.footer+xml")),
                (
                    "/docProps/core.xml",
                    "application/vnd.openxmlformats-package.core-properties+xml".to_string(),
                ),
            ] {
                let attrs = [("PartName", name), ("ContentType", &content_type)];
                empty(w, "Override", &attrs)?;
            }
            Ok(())
        })
    })
}

fn package_rels() -> io::Result<Vec<u8>> {
    part(|w| {
        el(w, "Relationships", &[("xmlns", REL_NS)], |w| {
            let document = format!("{REL_TYPE}/officeDocument");
            relationship(w, "rId1", &document, "word/document.xml")?;
            let core = "http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties";
            relationship(w, "rId2", core, "docProps/core.xml")
        })
    })
}

/// The document's relationships: its other parts, and each external link's address.
fn document_rels(hyperlinks: &[String]) -> io::Result<Vec<u8>> {
    part(|w| {
        el(w, "Relationships", &[("xmlns", REL_NS)], |w| {
            for (id, kind, target) in [
                ("rIdStyles", "styles", "styles.xml"),
                ("rIdNumbering", "numbering", "numbering.xml"),
                ("rIdFooter", "footer", "footer1.xml"),
            ] {
                relationship(w, id, &format!("{REL_TYPE}/{kind}"), target)?;
            }
            let hyperlink = format!("{REL_TYPE}/hyperlink");
            for (i, url) in hyperlinks.iter().enumerate() {
                let id = format!("rIdLink{}", i + 1);
                let attrs = [
                    ("Id", id.as_str()),
                    ("Type", &hyperlink),
                    ("Target", url),
                    ("TargetMode", "External"),
                ];
                empty(w, "Relationship", &attrs)?;
            }
            Ok(())
        })
    })
}

/// A relationship to another part of the package.
fn relationship(w: &mut Xml, id: &str, kind: &str, target: &str) -> io::Result<()> {
    empty(
        w,
        "Relationship",
        &[("Id", id), ("Type", kind), ("Target", target)],
    )
}

fn core_properties(title: &str) -> io::Result<Vec<u8>> {
    let namespaces = [
        (
            "xmlns:cp",
            "http://schemas.openxmlformats.org/package/2006/metadata/core-properties",
        ),
        ("xmlns:dc", "http://purl.org/dc/elements/1.1/"),
    ];
    part(|w| {
        el(w, "cp:coreProperties", &namespaces, |w| {
            text_el(w, "dc:title", &[], title)?;
            text_el(w, "dc:creator", &[], "Fathom")
        })
    })
}

/// The styles part; `lang` (a checked ISO 639-1 code) tags the text's language.
fn styles(lang: &str) -> io::Result<Vec<u8>> {
    part(|w| {
        el(w, "w:styles", &[("xmlns:w", W_NS)], |w| {
            defaults(w, lang)?;
            heading_styles(w)?;
            body_styles(w)
        })
    })
}

/// Calibri 11 pt in `lang`, with a little space after each paragraph.
fn defaults(w: &mut Xml, lang: &str) -> io::Result<()> {
    el(w, "w:docDefaults", &[], |w| {
        el(w, "w:rPrDefault", &[], |w| {
            el(w, "w:rPr", &[], |w| {
                let calibri = [
                    ("w:ascii", "Calibri"),
                    ("w:hAnsi", "Calibri"),
                    ("w:eastAsia", "Calibri"),
                    ("w:cs", "Calibri"),
                ];
                empty(w, "w:rFonts", &calibri)?;
                size(w, "22")?;
                val(w, "w:lang", lang)
            })
        })?;
        el(w, "w:pPrDefault", &[], |w| {
            el(w, "w:pPr", &[], |w| {
                let spacing = [
                    ("w:after", "120"),
                    ("w:line", "276"),
                    ("w:lineRule", "auto"),
                ];
                empty(w, "w:spacing", &spacing)
            })
        })
    })
}

/// Normal, then the title and the headings that are built on it.
fn heading_styles(w: &mut Xml) -> io::Result<()> {
    let normal = [
        ("w:type", "paragraph"),
        ("w:default", "1"),
        ("w:styleId", "Normal"),
    ];
    el(w, "w:style", &normal, |w| {
        val(w, "w:name", "Normal")?;
        empty(w, "w:qFormat", &[])
    })?;
    style(w, "paragraph", "Title", "Title", |w| {
        heading_basis(w)?;
        el(w, "w:pPr", &[], |w| {
            empty(w, "w:keepNext", &[])?;
            empty(w, "w:spacing", &[("w:after", "240")])
        })?;
        bold_of_size(w, "44")
    })?;
    for (level, size) in [(1u32, "32"), (2, "26"), (3, "24"), (4, "22"), (5, "22")] {
        let id = format!("Heading{level}");
        let name = format!("heading {level}");
        let before = if level == 1 { "360" } else { "240" };
        style(w, "paragraph", &id, &name, |w| {
            heading_basis(w)?;
            el(w, "w:pPr", &[], |w| {
                empty(w, "w:keepNext", &[])?;
                empty(w, "w:keepLines", &[])?;
                empty(w, "w:spacing", &[("w:before", before), ("w:after", "120")])?;
                val(w, "w:outlineLvl", &(level - 1).to_string())
            })?;
            bold_of_size(w, size)
        })?;
    }
    Ok(())
}

/// The styles of lists, code, quotes, links and the footer.
fn body_styles(w: &mut Xml) -> io::Result<()> {
    style(w, "paragraph", "ListParagraph", "List Paragraph", |w| {
        val(w, "w:basedOn", "Normal")?;
        empty(w, "w:qFormat", &[])?;
        el(w, "w:pPr", &[], |w| {
            empty(w, "w:spacing", &[("w:after", "60")])?;
            empty(w, "w:contextualSpacing", &[])
        })
    })?;
    style(w, "paragraph", "Code", "Code", |w| {
        val(w, "w:basedOn", "Normal")?;
        el(w, "w:pPr", &[], |w| {
            let spacing = [("w:after", "0"), ("w:line", "240"), ("w:lineRule", "auto")];
            empty(w, "w:spacing", &spacing)?;
            let shading = [
                ("w:val", "clear"),
                ("w:color", "auto"),
                ("w:fill", "F3F3F3"),
            ];
            empty(w, "w:shd", &shading)
        })?;
        el(w, "w:rPr", &[], |w| {
            courier(w)?;
            size(w, "18")
        })
    })?;
    style(w, "paragraph", "Quote", "Quote", |w| {
        val(w, "w:basedOn", "Normal")?;
        el(w, "w:pPr", &[], |w| {
            empty(w, "w:ind", &[("w:left", "567")])?;
            el(w, "w:pBdr", &[], |w| {
                let line = [
                    ("w:val", "single"),
                    ("w:sz", "18"),
                    ("w:space", "8"),
                    ("w:color", "CCCCCC"),
                ];
                empty(w, "w:left", &line)
            })
        })?;
        el(w, "w:rPr", &[], |w| val(w, "w:color", "444444"))
    })?;
    style(w, "character", "CodeChar", "Code Char", |w| {
        el(w, "w:rPr", &[], |w| {
            courier(w)?;
            val(w, "w:sz", "20")
        })
    })?;
    style(w, "character", "Hyperlink", "Hyperlink", |w| {
        el(w, "w:rPr", &[], |w| {
            val(w, "w:color", "0B57D0")?;
            val(w, "w:u", "single")
        })
    })?;
    style(w, "paragraph", "Footer", "footer", |w| {
        val(w, "w:basedOn", "Normal")?;
        el(w, "w:pPr", &[], |w| val(w, "w:jc", "center"))?;
        el(w, "w:rPr", &[], |w| {
            val(w, "w:color", "666666")?;
            val(w, "w:sz", "18")
        })
    })
}

/// A style of `kind` (`paragraph` or `character`), then what `props` writes after its name.
fn style(
    w: &mut Xml,
    kind: &str,
    id: &str,
    name: &str,
    props: impl FnOnce(&mut Xml) -> io::Result<()>,
) -> io::Result<()> {
    el(w, "w:style", &[("w:type", kind), ("w:styleId", id)], |w| {
        val(w, "w:name", name)?;
        props(w)
    })
}

/// What the title and the headings share: built on Normal, followed by Normal, offered in
/// Word's style gallery.
fn heading_basis(w: &mut Xml) -> io::Result<()> {
    val(w, "w:basedOn", "Normal")?;
    val(w, "w:next", "Normal")?;
    empty(w, "w:qFormat", &[])
}

/// Bold text of `half_points`.
fn bold_of_size(w: &mut Xml, half_points: &str) -> io::Result<()> {
    el(w, "w:rPr", &[], |w| {
        empty(w, "w:b", &[])?;
        size(w, half_points)
    })
}

/// A font size in half points, for all scripts.
fn size(w: &mut Xml, half_points: &str) -> io::Result<()> {
    val(w, "w:sz", half_points)?;
    val(w, "w:szCs", half_points)
}

fn courier(w: &mut Xml) -> io::Result<()> {
    let fonts = [
        ("w:ascii", "Courier New"),
        ("w:hAnsi", "Courier New"),
        ("w:cs", "Courier New"),
    ];
    empty(w, "w:rFonts", &fonts)
}

/// Bullets (`w:numId` 1), and one decimal numbering per ordered list, from its own start at
/// its own level.
fn numbering(ordered_lists: &[(u64, usize)]) -> io::Result<Vec<u8>> {
    part(|w| {
        el(w, "w:numbering", &[("xmlns:w", W_NS)], |w| {
            for (abstract_id, ordered) in [("0", false), ("1", true)] {
                el(
                    w,
                    "w:abstractNum",
                    &[("w:abstractNumId", abstract_id)],
                    |w| {
                        val(w, "w:multiLevelType", "hybridMultilevel")?;
                        (0..LIST_LEVELS).try_for_each(|level| list_level(w, level, ordered))
                    },
                )?;
            }
            let bullets = BULLETS_NUM_ID.to_string();
            el(w, "w:num", &[("w:numId", &bullets)], |w| {
                val(w, "w:abstractNumId", "0")
            })?;
            for (i, &(start, list_level)) in ordered_lists.iter().enumerate() {
                let start = start.min(u64::from(u32::MAX));
                el(w, "w:num", &[("w:numId", &(i + 2).to_string())], |w| {
                    val(w, "w:abstractNumId", "1")?;
                    for level in 0..LIST_LEVELS {
                        let from = if level == list_level { start } else { 1 };
                        el(w, "w:lvlOverride", &[("w:ilvl", &level.to_string())], |w| {
                            val(w, "w:startOverride", &from.to_string())
                        })?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })
    })
}

/// One level of a list's numbering: decimal or a bullet, indented a step further than the
/// level above.
fn list_level(w: &mut Xml, level: usize, ordered: bool) -> io::Result<()> {
    let (format, text) = if ordered {
        ("decimal", format!("%{}.", level + 1))
    } else {
        (
            "bullet",
            ["\u{2022}", "\u{25E6}", "\u{25AA}"][level % 3].to_string(),
        )
    };
    let left = (720 + 360 * level).to_string();
    el(w, "w:lvl", &[("w:ilvl", &level.to_string())], |w| {
        val(w, "w:start", "1")?;
        val(w, "w:numFmt", format)?;
        val(w, "w:lvlText", &text)?;
        val(w, "w:lvlJc", "left")?;
        el(w, "w:pPr", &[], |w| {
            empty(w, "w:ind", &[("w:left", &left), ("w:hanging", "360")])
        })
    })
}

/// "Page n of m", centred; Word fills in the fields.
fn footer() -> io::Result<Vec<u8>> {
    let field = |w: &mut Xml, instruction: &str| {
        el(w, "w:fldSimple", &[("w:instr", instruction)], |w| {
            el(w, "w:r", &[], |w| text_el(w, "w:t", &[], "1"))
        })
    };
    let words = |w: &mut Xml, text: &str| {
        el(w, "w:r", &[], |w| {
            text_el(w, "w:t", &[("xml:space", "preserve")], text)
        })
    };
    part(|w| {
        el(w, "w:ftr", &[("xmlns:w", W_NS)], |w| {
            el(w, "w:p", &[], |w| {
                el(w, "w:pPr", &[], |w| val(w, "w:pStyle", "Footer"))?;
                words(w, "Page ")?;
                field(w, " PAGE ")?;
                words(w, " of ")?;
                field(w, " NUMPAGES ")
            })
        })
    })
}

// What the writing above is made of.

type Xml = Writer<Vec<u8>>;
/// An element's attributes, as names and unescaped values.
type Attrs<'a> = &'a [(&'a str, &'a str)];

/// A writer with the XML declaration written.
fn declared() -> io::Result<Xml> {
    let mut w = Writer::new(Vec::new());
    let declaration = BytesDecl::new("1.0", Some("UTF-8"), Some("yes"));
    w.write_event(Event::Decl(declaration))?;
    w.write_event(Event::Text(BytesText::new("\n")))?;
    Ok(w)
}

/// A part: the XML declaration, then the root element `root` writes.
fn part(root: impl FnOnce(&mut Xml) -> io::Result<()>) -> io::Result<Vec<u8>> {
    let mut w = declared()?;
    root(&mut w)?;
    Ok(w.into_inner())
}

/// `<name attrs>`, its values escaped by quick-xml.
fn tag<'a>(name: &'a str, attrs: Attrs<'a>) -> BytesStart<'a> {
    BytesStart::new(name).with_attributes(attrs.iter().map(|&(k, v)| (k, xml_chars(v))))
}

fn start(w: &mut Xml, name: &str, attrs: Attrs) -> io::Result<()> {
    w.write_event(Event::Start(tag(name, attrs)))
}

fn end(w: &mut Xml, name: &str) -> io::Result<()> {
    w.write_event(Event::End(BytesEnd::new(name)))
}

fn empty(w: &mut Xml, name: &str, attrs: Attrs) -> io::Result<()> {
    w.write_event(Event::Empty(tag(name, attrs)))
}

/// `<name w:val="value"/>`, the way WordprocessingML sets most properties.
fn val(w: &mut Xml, name: &str, value: &str) -> io::Result<()> {
    empty(w, name, &[("w:val", value)])
}

/// An element holding what `inner` writes.
fn el(
    w: &mut Xml,
    name: &str,
    attrs: Attrs,
    inner: impl FnOnce(&mut Xml) -> io::Result<()>,
) -> io::Result<()> {
    start(w, name, attrs)?;
    inner(w)?;
    end(w, name)
}

/// An element holding `text`, escaped by quick-xml.
fn text_el(w: &mut Xml, name: &str, attrs: Attrs, text: &str) -> io::Result<()> {
    el(w, name, attrs, |w| {
        w.write_event(Event::Text(BytesText::new(&xml_chars(text))))
    })
}

/// `text` without the characters XML 1.0 does not allow (most control characters): Word
/// refuses a file that has them, and escaping cannot make them allowed.
fn xml_chars(text: &str) -> Cow<'_, str> {
    let allowed = |c: char| !matches!(c, '\u{0}'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}');
    if text.chars().all(allowed) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.chars().filter(|&c| allowed(c)).collect())
    }
}
