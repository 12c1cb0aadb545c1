//! DOCX files read faithfully: tables without a grid, merged and nested cells, lists, and
//! footnotes. Each file is written here, as a zip, the way Word or another writer lays it out.

use std::io::{Cursor, Write};

use fathom_parse::docx::docx_to_markdown;
use fathom_parse::{DocKind, ParsedDoc, parse_content};

const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";

/// A DOCX of `body` (the children of `w:body`) and further parts (name, XML).
fn docx(body: &str, parts: &[(&str, &str)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    zip.start_file("[Content_Types].xml", opts).unwrap();
    zip.write_all(b"<?xml version=\"1.0\"?><Types/>").unwrap();
    zip.start_file("word/document.xml", opts).unwrap();
    write!(
        zip,
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{W}"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    )
    .unwrap();
    for (name, xml) in parts {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(xml.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn para(text: &str) -> String {
    format!(r#"<w:p><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>"#)
}

/// A paragraph numbered by instance `num` at level `ilvl`.
fn item(num: u32, ilvl: u32, text: &str) -> String {
    format!(
        r#"<w:p><w:pPr><w:pStyle w:val="ListParagraph"/><w:numPr><w:ilvl w:val="{ilvl}"/><w:numId w:val="{num}"/></w:numPr></w:pPr><w:r><w:t>{text}</w:t></w:r></w:p>"#
    )
}

/// A cell of one paragraph, with cell properties `props` (`w:gridSpan`, `w:vMerge`).
fn cell(props: &str, text: &str) -> String {
    format!(
        r#"<w:tc><w:tcPr><w:tcW w:w="2000" w:type="dxa"/>{props}</w:tcPr>{}</w:tc>"#,
        para(text)
    )
}

fn row(cells: &[String]) -> String {
    format!("<w:tr>{}</w:tr>", cells.concat())
}

fn plain_row(texts: &[&str]) -> String {
    row(&texts.iter().map(|t| cell("", t)).collect::<Vec<_>>())
}

fn parse(bytes: &[u8]) -> ParsedDoc {
    parse_content("file:///docs/report.docx", DocKind::Docx, bytes).unwrap()
}

fn block_texts(doc: &ParsedDoc) -> Vec<&str> {
    doc.blocks.iter().map(|b| b.text.as_str()).collect()
}

#[test]
fn a_table_without_a_grid_is_read_in_table_form() {
    // No w:tblGrid: Word and LibreOffice open such a table; its columns come from its cells.
    let table = format!(
        r#"<w:tbl><w:tblPr><w:tblW w:w="0" w:type="auto"/></w:tblPr>{}{}{}</w:tbl>"#,
        plain_row(&["Station", "Rain", "Frost days"]),
        plain_row(&["Oslo", "41 mm", "12"]),
        plain_row(&["Bergen", "190 mm", "3"]),
    );
    let body = format!(
        "{}{table}{}",
        para("Rain in March."),
        para("Next paragraph.")
    );
    let bytes = docx(&body, &[]);
    let md = docx_to_markdown(&bytes).unwrap().markdown;
    assert_eq!(
        md,
        "Rain in March.\n\n\
         | Station | Rain | Frost days |\n| --- | --- | --- |\n\
         | Oslo | 41 mm | 12 |\n| Bergen | 190 mm | 3 |\n\n\
         Next paragraph.\n\n"
    );
    // The same table with a grid reads the same.
    let with_grid = table.replace(
        "</w:tblPr>",
        r#"</w:tblPr><w:tblGrid><w:gridCol w:w="2000"/><w:gridCol w:w="2000"/><w:gridCol w:w="2000"/></w:tblGrid>"#,
    );
    let body = format!(
        "{}{with_grid}{}",
        para("Rain in March."),
        para("Next paragraph.")
    );
    assert_eq!(docx_to_markdown(&docx(&body, &[])).unwrap().markdown, md);
    // And the parsed document, what the index and the writers see, has its rows.
    let doc = parse(&bytes);
    assert_eq!(
        block_texts(&doc),
        [
            "Rain in March.",
            "Station \\| Rain \\| Frost days",
            "Oslo \\| 41 mm \\| 12",
            "Bergen \\| 190 mm \\| 3",
            "Next paragraph.",
        ]
    );
    assert!(doc.unread.is_empty(), "{:?}", doc.unread);
}

#[test]
fn merged_cells_keep_the_columns_aligned_and_their_text_once() {
    let restart = r#"<w:vMerge w:val="restart"/>"#;
    let cont = "<w:vMerge/>";
    let span2 = r#"<w:gridSpan w:val="2"/>"#;
    let rows = [
        plain_row(&["Region", "City", "Q1", "Q2"]),
        row(&[
            cell(restart, "North"),
            cell("", "Oslo"),
            cell("", "10"),
            cell("", "12"),
        ]),
        // The merged cell below "North": present, empty, holding its column.
        row(&[
            format!("<w:tc><w:tcPr>{cont}</w:tcPr><w:p/></w:tc>"),
            cell("", "Bergen"),
            cell("", "7"),
            cell("", "9"),
        ]),
        row(&[cell(span2, "All north"), cell("", "17"), cell("", "21")]),
        // A row that starts one grid column in.
        row(&[cell("", "Tromsø"), cell("", "3"), cell("", "4")]).replacen(
            "<w:tr>",
            r#"<w:tr><w:trPr><w:gridBefore w:val="1"/></w:trPr>"#,
            1,
        ),
    ];
    let table = format!("<w:tbl>{}</w:tbl>", rows.concat());
    let md = docx_to_markdown(&docx(&table, &[])).unwrap().markdown;
    assert_eq!(
        md,
        "| Region | City | Q1 | Q2 |\n| --- | --- | --- | --- |\n\
         | North | Oslo | 10 | 12 |\n\
         |  | Bergen | 7 | 9 |\n\
         | All north |  | 17 | 21 |\n\
         |  | Tromsø | 3 | 4 |\n\n"
    );
    assert_eq!(md.matches("North").count(), 1, "{md}");
    assert_eq!(md.matches("north").count(), 1, "{md}");
}

#[test]
fn a_nested_table_keeps_its_text_once_in_its_cell() {
    let inner = format!(
        "<w:tbl>{}{}</w:tbl>",
        plain_row(&["Mon-Fri", "9-17"]),
        plain_row(&["Sat", "10-14"])
    );
    let hours = format!(
        "<w:tc><w:tcPr/>{}{inner}<w:p/></w:tc>",
        para("Opening hours:")
    );
    let table = format!(
        "<w:tbl><w:tblGrid><w:gridCol/><w:gridCol/></w:tblGrid>{}{}{}</w:tbl>",
        plain_row(&["Place", "Hours"]),
        row(&[cell("", "Library"), hours]),
        plain_row(&["Pool", "closed"]),
    );
    let bytes = docx(&table, &[]);
    let md = docx_to_markdown(&bytes).unwrap().markdown;
    assert_eq!(
        md,
        "| Place | Hours |\n| --- | --- |\n\
         | Library | Opening hours: Mon-Fri / 9-17; Sat / 10-14 |\n\
         | Pool | closed |\n\n"
    );
    for text in ["Mon-Fri", "9-17", "Sat", "10-14"] {
        assert_eq!(md.matches(text).count(), 1, "{text} in {md}");
    }
    let doc = parse(&bytes);
    assert!(
        block_texts(&doc).contains(&"Library \\| Opening hours: Mon-Fri / 9-17; Sat / 10-14"),
        "{:?}",
        doc.blocks
    );
}

const NUMBERING: &str = r#"<?xml version="1.0"?><w:numbering xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
  <w:abstractNum w:abstractNumId="0">
    <w:lvl w:ilvl="0"><w:start w:val="1"/><w:numFmt w:val="decimal"/><w:lvlText w:val="%1."/></w:lvl>
    <w:lvl w:ilvl="1"><w:start w:val="1"/><w:numFmt w:val="lowerLetter"/><w:lvlText w:val="%2)"/></w:lvl>
    <w:lvl w:ilvl="2"><w:numFmt w:val="bullet"/><w:lvlText w:val="o"/></w:lvl>
  </w:abstractNum>
  <w:abstractNum w:abstractNumId="7">
    <w:lvl w:ilvl="0"><w:numFmt w:val="bullet"/><w:lvlText w:val="*"/></w:lvl>
    <w:lvl w:ilvl="1"><w:numFmt w:val="bullet"/><w:lvlText w:val="-"/></w:lvl>
  </w:abstractNum>
  <w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>
  <w:num w:numId="2"><w:abstractNumId w:val="7"/></w:num>
  <w:num w:numId="3"><w:abstractNumId w:val="0"/><w:lvlOverride w:ilvl="0"><w:startOverride w:val="4"/></w:lvlOverride></w:num>
</w:numbering>"#;

/// The list style python-docx and Word's "List Bullet" use: the style carries the numbering.
const STYLES: &str = r#"<?xml version="1.0"?><w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
  <w:style w:type="paragraph" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
  <w:style w:type="paragraph" w:styleId="ListBullet"><w:name w:val="List Bullet"/><w:pPr><w:numPr><w:numId w:val="2"/></w:numPr></w:pPr></w:style>
</w:styles>"#;

#[test]
fn numbered_and_bulleted_lists_keep_their_numbers_and_nesting() {
    let body = [
        para("Steps:"),
        item(1, 0, "Unpack the box"),
        item(1, 1, "Check the cables"),
        item(1, 1, "Check the screws"),
        item(1, 2, "Small ones first"),
        item(1, 0, "Assemble the frame"),
        item(1, 1, "Start at the base"),
        para("Keep:"),
        item(2, 0, "The receipt"),
        item(2, 1, "Or a photo of it"),
        r#"<w:p><w:pPr><w:pStyle w:val="ListBullet"/></w:pPr><w:r><w:t>The manual</w:t></w:r></w:p>"#
            .to_string(),
        para("Later:"),
        item(3, 0, "Fourth step, as the override says"),
        // Numbered by a paragraph Word numbered, but not a list here: stays a paragraph.
        para("1. Not a list item, a sentence that starts with a number."),
    ]
    .concat();
    let bytes = docx(
        &body,
        &[
            ("word/numbering.xml", NUMBERING),
            ("word/styles.xml", STYLES),
        ],
    );
    let md = docx_to_markdown(&bytes).unwrap().markdown;
    assert_eq!(
        md,
        "Steps:\n\n\
         1. Unpack the box\n\
         \x20  1. Check the cables\n\
         \x20  2. Check the screws\n\
         \x20     - Small ones first\n\
         2. Assemble the frame\n\
         \x20  1. Start at the base\n\n\
         Keep:\n\n\
         - The receipt\n\
         \x20 - Or a photo of it\n\
         - The manual\n\n\
         Later:\n\n\
         4. Fourth step, as the override says\n\n\
         1\\. Not a list item, a sentence that starts with a number.\n\n"
    );
    // Each item is a block of its own; the last paragraph keeps its number.
    let doc = parse(&bytes);
    let texts = block_texts(&doc);
    for item in [
        "Unpack the box",
        "Check the cables",
        "Small ones first",
        "Start at the base",
        "Or a photo of it",
        "The manual",
    ] {
        assert!(texts.contains(&item), "{item} in {texts:?}");
    }
    assert_eq!(
        texts.last(),
        Some(&"1. Not a list item, a sentence that starts with a number.")
    );
}

#[test]
fn lists_without_numbering_xml_are_bullets_with_their_nesting() {
    let body = [
        item(5, 0, "Top"),
        item(5, 1, "Under it"),
        item(5, 0, "Next"),
    ]
    .concat();
    let md = docx_to_markdown(&docx(&body, &[])).unwrap().markdown;
    assert_eq!(md, "- Top\n  - Under it\n- Next\n\n");
}

const FOOTNOTES: &str = r#"<?xml version="1.0"?><w:footnotes xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
  <w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
  <w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/></w:r></w:p></w:footnote>
  <w:footnote w:id="1"><w:p><w:pPr><w:pStyle w:val="FootnoteText"/></w:pPr><w:r><w:rPr><w:rStyle w:val="FootnoteReference"/></w:rPr><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> Measured at noon.</w:t></w:r></w:p></w:footnote>
  <w:footnote w:id="2"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> Source: the 2023 survey, </w:t></w:r><w:r><w:t>table 4.</w:t></w:r></w:p><w:p><w:r><w:t>Second paragraph of the note.</w:t></w:r></w:p></w:footnote>
</w:footnotes>"#;

const ENDNOTES: &str = r#"<?xml version="1.0"?><w:endnotes xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
  <w:endnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:endnote>
  <w:endnote w:id="1"><w:p><w:r><w:endnoteRef/></w:r><w:r><w:t xml:space="preserve"> See the appendix.</w:t></w:r></w:p></w:endnote>
</w:endnotes>"#;

fn note_ref(kind: &str, id: u32) -> String {
    format!(
        r#"<w:r><w:rPr><w:rStyle w:val="FootnoteReference"/></w:rPr><w:{kind}Reference w:id="{id}"/></w:r>"#
    )
}

#[test]
fn footnotes_and_endnotes_keep_their_markers_and_their_text() {
    let body = format!(
        r#"<w:p><w:r><w:t>Rain fell on 12 days</w:t></w:r>{}<w:r><w:t xml:space="preserve"> and snow on 3</w:t></w:r>{}<w:r><w:t>.</w:t></w:r></w:p>
           <w:p><w:r><w:t>The network was rebuilt</w:t></w:r>{}<w:r><w:t xml:space="preserve"> in 2019.</w:t></w:r></w:p>
           <w:tbl>{}<w:tr><w:tc><w:p><w:r><w:t>Oslo</w:t></w:r>{}</w:p></w:tc><w:tc>{}</w:tc></w:tr></w:tbl>"#,
        // Referenced out of id order: numbered as Word shows them, by order of reference.
        note_ref("footnote", 2),
        note_ref("footnote", 1),
        note_ref("endnote", 1),
        plain_row(&["Station", "Rain"]),
        note_ref("footnote", 1),
        para("41 mm"),
    );
    let bytes = docx(
        &body,
        &[
            ("word/footnotes.xml", FOOTNOTES),
            ("word/endnotes.xml", ENDNOTES),
        ],
    );
    let md = docx_to_markdown(&bytes).unwrap().markdown;
    assert_eq!(
        md,
        "Rain fell on 12 days[^1] and snow on 3[^2].\n\n\
         The network was rebuilt[^e1] in 2019.\n\n\
         | Station | Rain |\n| --- | --- |\n| Oslo[^2] | 41 mm |\n\n\
         [^1]: Source: the 2023 survey, table 4. Second paragraph of the note.\n\n\
         [^2]: Measured at noon.\n\n\
         [^e1]: See the appendix.\n\n"
    );
    let doc = parse(&bytes);
    assert!(doc.unread.is_empty(), "{:?}", doc.unread);
    let texts = block_texts(&doc);
    assert_eq!(
        texts[0],
        "Rain fell on 12 days\\[^1\\] and snow on 3\\[^2\\]."
    );
    let notes: Vec<&str> = doc
        .blocks
        .iter()
        .filter(|b| b.heading == "Notes")
        .map(|b| b.text.as_str())
        .collect();
    assert_eq!(
        notes,
        [
            "\\[^1\\]: Source: the 2023 survey, table 4. Second paragraph of the note.",
            "\\[^2\\]: Measured at noon.",
            "\\[^e1\\]: See the appendix.",
        ]
    );
}

#[test]
fn an_unreadable_part_costs_only_its_own_text_and_is_recorded() {
    // The second footnote breaks off; the numbering part is not XML at all.
    let broken_notes = format!(
        r#"<?xml version="1.0"?><w:footnotes xmlns:w="{W}"><w:footnote w:id="1"><w:p><w:r><w:t>Kept note.</w:t></w:r></w:p></w:footnote><w:footnote w:id="2"><w:p><w:r><w:t>Lost</w:p></w:footnote></w:footnotes>"#
    );
    let body = format!(
        r#"<w:p><w:r><w:t>First claim</w:t></w:r>{}<w:r><w:t xml:space="preserve"> and second claim</w:t></w:r>{}<w:r><w:t>.</w:t></w:r></w:p>{}"#,
        note_ref("footnote", 1),
        note_ref("footnote", 2),
        item(1, 0, "A list item still read"),
    );
    let bytes = docx(
        &body,
        &[
            ("word/footnotes.xml", &broken_notes),
            ("word/numbering.xml", "this is not XML <<<"),
        ],
    );
    let doc = parse(&bytes);
    let texts = block_texts(&doc);
    assert_eq!(
        texts,
        [
            "First claim\\[^1\\] and second claim\\[^2\\].",
            "A list item still read",
            "\\[^1\\]: Kept note.",
        ]
    );
    let unread = doc.unread.join("\n");
    assert!(
        unread.contains("word/footnotes.xml is not valid XML"),
        "{unread}"
    );
    assert!(
        unread.contains("1 footnote(s) referenced in the text have no text in word/footnotes.xml"),
        "{unread}"
    );
    assert!(
        unread.contains("word/numbering.xml is not valid XML"),
        "{unread}"
    );
    assert_eq!(doc.unread.len(), 3, "{unread}");
    // Recorded where a reader of the stored document sees it.
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["unread"].as_array().map(Vec::len), Some(3), "{json}");
}

#[test]
fn text_boxes_are_read_once_and_literal_text_stays_literal() {
    // Word writes a text box twice: the drawing (mc:Choice) and a VML fallback.
    let text_box = |text: &str| format!(r#"<w:txbxContent>{}</w:txbxContent>"#, para(text));
    let body = format!(
        r#"<w:p><w:r><w:t xml:space="preserve">Before the box. </w:t></w:r><w:r><mc:AlternateContent xmlns:mc="mc"><mc:Choice Requires="wps"><w:drawing>{}</w:drawing></mc:Choice><mc:Fallback><w:pict>{}</w:pict></mc:Fallback></mc:AlternateContent></w:r><w:r><w:t>After the box.</w:t></w:r></w:p>{}"#,
        text_box("Inside the box."),
        text_box("Inside the box."),
        para("Rates: 5*3 = 15 and a_b [sic] &lt;tag&gt;"),
    );
    let md = docx_to_markdown(&docx(&body, &[])).unwrap().markdown;
    assert_eq!(md.matches("Inside the box.").count(), 1, "{md}");
    assert!(md.contains("Before the box. After the box."), "{md}");
    let doc = parse(&docx(&body, &[]));
    assert!(
        block_texts(&doc).contains(&"Rates: 5\\*3 = 15 and a\\_b \\[sic\\] \\<tag\\>"),
        "{:?}",
        doc.blocks
    );
}

#[test]
fn a_forged_span_cannot_blow_a_table_up_and_loses_no_text() {
    let huge = r#"<w:gridSpan w:val="4000000000"/>"#;
    let table = format!(
        "<w:tbl>{}{}</w:tbl>",
        plain_row(&["Name", "Value"]),
        row(&[cell(huge, "spread"), cell("", "after the span")]),
    );
    let doc = docx_to_markdown(&docx(&table, &[])).unwrap();
    let widest = doc
        .markdown
        .lines()
        .map(|l| l.matches(" |").count())
        .max()
        .unwrap_or(0);
    assert!(widest <= 64, "{widest} columns");
    assert!(doc.markdown.contains("| spread |"), "{}", doc.markdown);
    assert!(
        doc.markdown.contains("after the span |"),
        "{}",
        doc.markdown
    );
    assert_eq!(doc.unread.len(), 1, "{:?}", doc.unread);
    assert!(
        doc.unread[0].contains("wider than 64 columns"),
        "{:?}",
        doc.unread
    );
}
