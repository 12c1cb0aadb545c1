//! A DOCX file (WordprocessingML in a zip), written directly: the report's H1 in the `Title`
//! style and its sections in `Heading1` and below (as Word numbers them), lists numbered by
//! `word/numbering.xml`, tables as real `w:tbl` with their grid, code in a `Code` style,
//! sources' addresses as hyperlinks and each citation a link to its source in the list, and
//! page numbers in the footer. Everything a word processor needs and nothing more: Word,
//! LibreOffice and our own reader open it.

use std::io::Write;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::ExportError;
use crate::document::{Align, Block, Document, Inline, ListItem, Run};

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

/// The DOCX file of `doc`.
pub fn write(doc: &Document) -> Result<Vec<u8>, ExportError> {
    let mut body = Body::default();
    body.blocks(&doc.blocks, 0);

    let mut rels = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"{REL_NS}\">\
         <Relationship Id=\"rIdStyles\" Type=\"{REL_TYPE}/styles\" Target=\"styles.xml\"/>\
         <Relationship Id=\"rIdNumbering\" Type=\"{REL_TYPE}/numbering\" Target=\"numbering.xml\"/>\
         <Relationship Id=\"rIdFooter\" Type=\"{REL_TYPE}/footer\" Target=\"footer1.xml\"/>"
    );
    for (i, url) in body.hyperlinks.iter().enumerate() {
        rels.push_str(&format!(
            "<Relationship Id=\"rIdLink{}\" Type=\"{REL_TYPE}/hyperlink\" Target=\"{}\" TargetMode=\"External\"/>",
            i + 1,
            escape(url)
        ));
    }
    rels.push_str("</Relationships>");

    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
         <w:document xmlns:w=\"{W_NS}\" xmlns:r=\"{R_NS}\"><w:body>{}\
         <w:sectPr><w:footerReference w:type=\"default\" r:id=\"rIdFooter\"/>\
         <w:pgSz w:w=\"{PAGE_WIDTH}\" w:h=\"{PAGE_HEIGHT}\"/>\
         <w:pgMar w:top=\"{MARGIN}\" w:right=\"{MARGIN}\" w:bottom=\"{MARGIN}\" w:left=\"{MARGIN}\" w:header=\"567\" w:footer=\"567\" w:gutter=\"0\"/>\
         </w:sectPr></w:body></w:document>",
        body.xml
    );

    let parts: [(&str, String); 8] = [
        ("[Content_Types].xml", CONTENT_TYPES.to_string()),
        ("_rels/.rels", package_rels()),
        ("docProps/core.xml", core_properties(&doc.title)),
        ("word/document.xml", document),
        ("word/_rels/document.xml.rels", rels),
        ("word/styles.xml", styles(&doc.language)),
        (
            "word/numbering.xml",
            numbering(body.ordered_lists.as_slice()),
        ),
        ("word/footer1.xml", footer()),
    ];
    let mut zip = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    // A fixed time: the same report gives the same bytes, so it is stored once.
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .last_modified_time(DateTime::default());
    let zip_error =
        |e: &dyn std::fmt::Display| ExportError::Write(format!("could not write the DOCX: {e}"));
    for (name, xml) in parts {
        zip.start_file(name, options).map_err(|e| zip_error(&e))?;
        zip.write_all(xml.as_bytes()).map_err(|e| zip_error(&e))?;
    }
    let cursor = zip.finish().map_err(|e| zip_error(&e))?;
    Ok(cursor.into_inner())
}

/// `word/document.xml`'s body as it is written, with what the other parts must list.
#[derive(Default)]
struct Body {
    xml: String,
    /// External addresses, as relationships `rIdLink1`, `rIdLink2`, ...
    hyperlinks: Vec<String>,
    /// The start number and level of each ordered list, numbered from 2 (`w:numId`).
    ordered_lists: Vec<(u64, usize)>,
}

impl Body {
    fn blocks(&mut self, blocks: &[Block], level: usize) {
        for b in blocks {
            self.block(b, level);
        }
    }

    fn block(&mut self, block: &Block, level: usize) {
        match block {
            Block::Heading { level: h, text } => {
                // Word's convention, which our reader follows: Title, then Heading1 and on.
                let style = match h {
                    1 => "Title".to_string(),
                    n => format!("Heading{}", (n - 1).min(5)),
                };
                self.paragraph(&format!("<w:pStyle w:val=\"{style}\"/>"), text);
            }
            Block::Paragraph(text) => {
                let indent = indent(level);
                self.paragraph(&indent, text);
            }
            Block::List { start, items } => self.list(*start, items, level),
            Block::Table {
                align,
                header,
                rows,
            } => self.table(align, header, rows),
            Block::Code { text, .. } => {
                for line in text.split('\n') {
                    self.xml.push_str(&format!(
                        "<w:p><w:pPr><w:pStyle w:val=\"Code\"/>{}</w:pPr>",
                        indent(level)
                    ));
                    if !line.is_empty() {
                        self.xml.push_str(&format!(
                            "<w:r><w:t xml:space=\"preserve\">{}</w:t></w:r>",
                            escape(&line.replace('\t', "    "))
                        ));
                    }
                    self.xml.push_str("</w:p>");
                }
            }
            Block::Quote(blocks) => {
                for b in blocks {
                    match b {
                        Block::Paragraph(text) => {
                            self.paragraph("<w:pStyle w:val=\"Quote\"/>", text);
                        }
                        other => self.block(other, level + 1),
                    }
                }
            }
            Block::Rule => self.xml.push_str(
                "<w:p><w:pPr><w:pBdr><w:bottom w:val=\"single\" w:sz=\"6\" w:space=\"1\" w:color=\"BFBFBF\"/></w:pBdr></w:pPr></w:p>",
            ),
        }
    }

    fn list(&mut self, start: Option<u64>, items: &[ListItem], level: usize) {
        let ilvl = level.min(LIST_LEVELS - 1);
        let num_id = match start {
            Some(n) => {
                self.ordered_lists.push((n, ilvl));
                self.ordered_lists.len() + 1
            }
            None => BULLETS_NUM_ID,
        };
        for item in items {
            let mut first = true;
            let anchor = item.anchor.as_deref();
            for b in &item.blocks {
                match b {
                    Block::Paragraph(text) if first => {
                        let props = format!(
                            "<w:pStyle w:val=\"ListParagraph\"/><w:numPr><w:ilvl w:val=\"{ilvl}\"/><w:numId w:val=\"{num_id}\"/></w:numPr>"
                        );
                        self.xml.push_str(&format!("<w:p><w:pPr>{props}</w:pPr>"));
                        if let Some(a) = anchor {
                            self.xml.push_str(&format!(
                                "<w:bookmarkStart w:id=\"{}\" w:name=\"{}\"/><w:bookmarkEnd w:id=\"{}\"/>",
                                bookmark_id(a),
                                escape(a),
                                bookmark_id(a)
                            ));
                        }
                        self.runs(text);
                        self.xml.push_str("</w:p>");
                    }
                    // Further paragraphs, nested lists, tables: under the item's text.
                    other => self.block(other, level + 1),
                }
                first = false;
            }
            if item.blocks.is_empty() {
                self.xml.push_str(&format!(
                    "<w:p><w:pPr><w:pStyle w:val=\"ListParagraph\"/><w:numPr><w:ilvl w:val=\"{ilvl}\"/><w:numId w:val=\"{num_id}\"/></w:numPr></w:pPr></w:p>"
                ));
            }
        }
    }

    fn table(&mut self, align: &[Align], header: &[Vec<Inline>], rows: &[Vec<Vec<Inline>>]) {
        let columns = rows
            .iter()
            .map(Vec::len)
            .chain([header.len()])
            .max()
            .unwrap_or(0);
        if columns == 0 {
            return;
        }
        let col_width = TEXT_WIDTH / columns as u32;
        self.xml.push_str(
            "<w:tbl><w:tblPr><w:tblW w:w=\"5000\" w:type=\"pct\"/><w:tblBorders>\
             <w:top w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             <w:left w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             <w:bottom w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             <w:right w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             <w:insideH w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             <w:insideV w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"A6A6A6\"/>\
             </w:tblBorders><w:tblLayout w:type=\"fixed\"/>\
             <w:tblCellMar><w:left w:w=\"80\" w:type=\"dxa\"/><w:right w:w=\"80\" w:type=\"dxa\"/></w:tblCellMar>\
             <w:tblLook w:val=\"04A0\" w:firstRow=\"1\" w:lastRow=\"0\" w:firstColumn=\"0\" w:lastColumn=\"0\" w:noHBand=\"0\" w:noVBand=\"1\"/>\
             </w:tblPr><w:tblGrid>",
        );
        for _ in 0..columns {
            self.xml
                .push_str(&format!("<w:gridCol w:w=\"{col_width}\"/>"));
        }
        self.xml.push_str("</w:tblGrid>");
        if !header.is_empty() {
            self.row(header, columns, col_width, align, true);
        }
        for r in rows {
            self.row(r, columns, col_width, align, false);
        }
        self.xml.push_str("</w:tbl>");
        // Word joins two tables with nothing between them: a paragraph keeps them apart.
        self.xml.push_str("<w:p/>");
    }

    fn row(
        &mut self,
        cells: &[Vec<Inline>],
        columns: usize,
        width: u32,
        align: &[Align],
        header: bool,
    ) {
        self.xml.push_str("<w:tr>");
        if header {
            self.xml.push_str("<w:trPr><w:tblHeader/></w:trPr>");
        }
        for c in 0..columns {
            self.xml.push_str(&format!(
                "<w:tc><w:tcPr><w:tcW w:w=\"{width}\" w:type=\"dxa\"/>{}</w:tcPr>",
                if header {
                    "<w:shd w:val=\"clear\" w:color=\"auto\" w:fill=\"EFEFEF\"/>"
                } else {
                    ""
                }
            ));
            let jc = match align.get(c) {
                Some(Align::Center) => "<w:jc w:val=\"center\"/>",
                Some(Align::Right) => "<w:jc w:val=\"right\"/>",
                _ => "",
            };
            // A cell must hold a paragraph, even an empty one.
            let empty = Vec::new();
            let text = cells.get(c).unwrap_or(&empty);
            self.xml.push_str(&format!(
                "<w:p><w:pPr><w:spacing w:before=\"40\" w:after=\"40\"/>{jc}</w:pPr>"
            ));
            if header {
                let bold: Vec<Inline> = text
                    .iter()
                    .map(|i| match i {
                        Inline::Run(r) => Inline::Run(Run {
                            style: crate::document::Style {
                                bold: true,
                                ..r.style
                            },
                            ..r.clone()
                        }),
                        other => other.clone(),
                    })
                    .collect();
                self.runs(&bold);
            } else {
                self.runs(text);
            }
            self.xml.push_str("</w:p></w:tc>");
        }
        self.xml.push_str("</w:tr>");
    }

    fn paragraph(&mut self, props: &str, text: &[Inline]) {
        self.xml.push_str("<w:p>");
        if !props.is_empty() {
            self.xml.push_str(&format!("<w:pPr>{props}</w:pPr>"));
        }
        self.runs(text);
        self.xml.push_str("</w:p>");
    }

    fn runs(&mut self, text: &[Inline]) {
        for inline in text {
            match inline {
                Inline::Run(run) => match &run.link {
                    Some(href) if href.starts_with('#') => {
                        self.xml.push_str(&format!(
                            "<w:hyperlink w:anchor=\"{}\">",
                            escape(&href[1..])
                        ));
                        self.run(run, Some("Hyperlink"));
                        self.xml.push_str("</w:hyperlink>");
                    }
                    Some(href) => {
                        let id = match self.hyperlinks.iter().position(|h| h == href) {
                            Some(i) => i + 1,
                            None => {
                                self.hyperlinks.push(href.clone());
                                self.hyperlinks.len()
                            }
                        };
                        self.xml
                            .push_str(&format!("<w:hyperlink r:id=\"rIdLink{id}\">"));
                        self.run(run, Some("Hyperlink"));
                        self.xml.push_str("</w:hyperlink>");
                    }
                    None => self.run(run, None),
                },
                Inline::Citation(n) => self.xml.push_str(&format!(
                    "<w:hyperlink w:anchor=\"source-{n}\"><w:r><w:rPr><w:rStyle w:val=\"Hyperlink\"/></w:rPr><w:t>[{n}]</w:t></w:r></w:hyperlink>"
                )),
                Inline::LineBreak => self.xml.push_str("<w:r><w:br/></w:r>"),
            }
        }
    }

    fn run(&mut self, run: &Run, char_style: Option<&str>) {
        let mut props = String::new();
        if let Some(s) = char_style {
            props.push_str(&format!("<w:rStyle w:val=\"{s}\"/>"));
        } else if run.style.code {
            props.push_str("<w:rStyle w:val=\"CodeChar\"/>");
        }
        if run.style.bold {
            props.push_str("<w:b/>");
        }
        if run.style.italic {
            props.push_str("<w:i/>");
        }
        self.xml.push_str("<w:r>");
        if !props.is_empty() {
            self.xml.push_str(&format!("<w:rPr>{props}</w:rPr>"));
        }
        self.xml.push_str(&format!(
            "<w:t xml:space=\"preserve\">{}</w:t></w:r>",
            escape(&run.text)
        ));
    }
}

/// A paragraph's left indent inside lists and quotes: level with the text of a list item
/// one level up (see the indents in `numbering`).
fn indent(level: usize) -> String {
    if level == 0 {
        String::new()
    } else {
        format!(
            "<w:ind w:left=\"{}\"/>",
            720 + 360 * (level.min(LIST_LEVELS) - 1)
        )
    }
}

/// A bookmark's numeric id, stable for its name.
fn bookmark_id(name: &str) -> u32 {
    name.strip_prefix("source-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Text made literal in XML; characters XML 1.0 does not allow (most control characters)
/// are left out, as Word refuses a file that has them.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{0}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

const CONTENT_TYPES: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">\
<Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/>\
<Default Extension=\"xml\" ContentType=\"application/xml\"/>\
<Override PartName=\"/word/document.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml\"/>\
<Override PartName=\"/word/styles.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml\"/>\
<Override PartName=\"/word/numbering.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.numbering+xml\"/>\
<Override PartName=\"/word/footer1.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.footer+xml\"/>\
<Override PartName=\"/docProps/core.xml\" ContentType=\"application/vnd.openxmlformats-package.core-properties+xml\"/>\
</Types>";

fn package_rels() -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"{REL_NS}\">\
         <Relationship Id=\"rId1\" Type=\"{REL_TYPE}/officeDocument\" Target=\"word/document.xml\"/>\
         <Relationship Id=\"rId2\" Type=\"http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties\" Target=\"docProps/core.xml\"/>\
         </Relationships>"
    )
}

fn core_properties(title: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
         <cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" \
         xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>{}</dc:title><dc:creator>Fathom</dc:creator></cp:coreProperties>",
        escape(title)
    )
}

/// The styles part; `lang` (a checked ISO 639-1 code) tags the text's language.
fn styles(lang: &str) -> String {
    let heading = |id: &str, name: &str, size: u32, outline: u32, before: u32| {
        format!(
            "<w:style w:type=\"paragraph\" w:styleId=\"{id}\"><w:name w:val=\"{name}\"/><w:basedOn w:val=\"Normal\"/>\
             <w:next w:val=\"Normal\"/><w:qFormat/><w:pPr><w:keepNext/><w:keepLines/>\
             <w:spacing w:before=\"{before}\" w:after=\"120\"/><w:outlineLvl w:val=\"{outline}\"/></w:pPr>\
             <w:rPr><w:b/><w:sz w:val=\"{size}\"/><w:szCs w:val=\"{size}\"/></w:rPr></w:style>"
        )
    };
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:styles xmlns:w=\"{W_NS}\">\
         <w:docDefaults><w:rPrDefault><w:rPr><w:rFonts w:ascii=\"Calibri\" w:hAnsi=\"Calibri\" w:eastAsia=\"Calibri\" w:cs=\"Calibri\"/>\
         <w:sz w:val=\"22\"/><w:szCs w:val=\"22\"/><w:lang w:val=\"{lang}\"/></w:rPr></w:rPrDefault>\
         <w:pPrDefault><w:pPr><w:spacing w:after=\"120\" w:line=\"276\" w:lineRule=\"auto\"/></w:pPr></w:pPrDefault></w:docDefaults>\
         <w:style w:type=\"paragraph\" w:default=\"1\" w:styleId=\"Normal\"><w:name w:val=\"Normal\"/><w:qFormat/></w:style>\
         <w:style w:type=\"paragraph\" w:styleId=\"Title\"><w:name w:val=\"Title\"/><w:basedOn w:val=\"Normal\"/>\
         <w:next w:val=\"Normal\"/><w:qFormat/><w:pPr><w:keepNext/><w:spacing w:after=\"240\"/></w:pPr>\
         <w:rPr><w:b/><w:sz w:val=\"44\"/><w:szCs w:val=\"44\"/></w:rPr></w:style>"
    );
    for (level, size) in [(1u32, 32u32), (2, 26), (3, 24), (4, 22), (5, 22)] {
        out.push_str(&heading(
            &format!("Heading{level}"),
            &format!("heading {level}"),
            size,
            level - 1,
            if level == 1 { 360 } else { 240 },
        ));
    }
    out.push_str(
        "<w:style w:type=\"paragraph\" w:styleId=\"ListParagraph\"><w:name w:val=\"List Paragraph\"/>\
         <w:basedOn w:val=\"Normal\"/><w:qFormat/><w:pPr><w:spacing w:after=\"60\"/><w:contextualSpacing/></w:pPr></w:style>\
         <w:style w:type=\"paragraph\" w:styleId=\"Code\"><w:name w:val=\"Code\"/><w:basedOn w:val=\"Normal\"/>\
         <w:pPr><w:spacing w:after=\"0\" w:line=\"240\" w:lineRule=\"auto\"/><w:shd w:val=\"clear\" w:color=\"auto\" w:fill=\"F3F3F3\"/></w:pPr>\
         <w:rPr><w:rFonts w:ascii=\"Courier New\" w:hAnsi=\"Courier New\" w:cs=\"Courier New\"/><w:sz w:val=\"18\"/><w:szCs w:val=\"18\"/></w:rPr></w:style>\
         <w:style w:type=\"paragraph\" w:styleId=\"Quote\"><w:name w:val=\"Quote\"/><w:basedOn w:val=\"Normal\"/>\
         <w:pPr><w:ind w:left=\"567\"/><w:pBdr><w:left w:val=\"single\" w:sz=\"18\" w:space=\"8\" w:color=\"CCCCCC\"/></w:pBdr></w:pPr>\
         <w:rPr><w:color w:val=\"444444\"/></w:rPr></w:style>\
         <w:style w:type=\"character\" w:styleId=\"CodeChar\"><w:name w:val=\"Code Char\"/>\
         <w:rPr><w:rFonts w:ascii=\"Courier New\" w:hAnsi=\"Courier New\" w:cs=\"Courier New\"/><w:sz w:val=\"20\"/></w:rPr></w:style>\
         <w:style w:type=\"character\" w:styleId=\"Hyperlink\"><w:name w:val=\"Hyperlink\"/>\
         <w:rPr><w:color w:val=\"0B57D0\"/><w:u w:val=\"single\"/></w:rPr></w:style>\
         <w:style w:type=\"paragraph\" w:styleId=\"Footer\"><w:name w:val=\"footer\"/><w:basedOn w:val=\"Normal\"/>\
         <w:pPr><w:jc w:val=\"center\"/></w:pPr><w:rPr><w:color w:val=\"666666\"/><w:sz w:val=\"18\"/></w:rPr></w:style>\
         </w:styles>",
    );
    out
}

/// Bullets (`w:numId` 1), and one decimal numbering per ordered list, from its own start at
/// its own level.
fn numbering(ordered_lists: &[(u64, usize)]) -> String {
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:numbering xmlns:w=\"{W_NS}\">"
    );
    for (abstract_id, ordered) in [(0, false), (1, true)] {
        out.push_str(&format!(
            "<w:abstractNum w:abstractNumId=\"{abstract_id}\"><w:multiLevelType w:val=\"hybridMultilevel\"/>"
        ));
        for level in 0..LIST_LEVELS {
            let (fmt, text) = if ordered {
                ("decimal", format!("%{}.", level + 1))
            } else {
                (
                    "bullet",
                    ["\u{2022}", "\u{25E6}", "\u{25AA}"][level % 3].to_string(),
                )
            };
            let left = 720 + 360 * level;
            out.push_str(&format!(
                "<w:lvl w:ilvl=\"{level}\"><w:start w:val=\"1\"/><w:numFmt w:val=\"{fmt}\"/>\
                 <w:lvlText w:val=\"{text}\"/><w:lvlJc w:val=\"left\"/>\
                 <w:pPr><w:ind w:left=\"{left}\" w:hanging=\"360\"/></w:pPr></w:lvl>"
            ));
        }
        out.push_str("</w:abstractNum>");
    }
    out.push_str(&format!(
        "<w:num w:numId=\"{BULLETS_NUM_ID}\"><w:abstractNumId w:val=\"0\"/></w:num>"
    ));
    for (i, &(start, list_level)) in ordered_lists.iter().enumerate() {
        let start = start.min(u64::from(u32::MAX));
        out.push_str(&format!(
            "<w:num w:numId=\"{}\"><w:abstractNumId w:val=\"1\"/>",
            i + 2
        ));
        for level in 0..LIST_LEVELS {
            out.push_str(&format!(
                "<w:lvlOverride w:ilvl=\"{level}\"><w:startOverride w:val=\"{}\"/></w:lvlOverride>",
                if level == list_level { start } else { 1 }
            ));
        }
        out.push_str("</w:num>");
    }
    out.push_str("</w:numbering>");
    out
}

fn footer() -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:ftr xmlns:w=\"{W_NS}\">\
         <w:p><w:pPr><w:pStyle w:val=\"Footer\"/></w:pPr><w:r><w:t xml:space=\"preserve\">Page </w:t></w:r>\
         <w:fldSimple w:instr=\" PAGE \"><w:r><w:t>1</w:t></w:r></w:fldSimple>\
         <w:r><w:t xml:space=\"preserve\"> of </w:t></w:r>\
         <w:fldSimple w:instr=\" NUMPAGES \"><w:r><w:t>1</w:t></w:r></w:fldSimple></w:p></w:ftr>"
    )
}
