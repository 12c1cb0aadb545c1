//! Each format opened again the way a reader opens it: the PDF's text extracted by poppler's
//! `pdftotext` and by our own PDF reader, the DOCX read by our own DOCX reader, the HTML
//! parsed by the HTML parser our reader uses and checked as well-formed markup.

use std::io::Write;
use std::process::{Command, Stdio};

use fathom_export::{Format, render};

/// A report with every kind of block the writers know, cited like a research report.
const REPORT: &str = r#"# How does “ownership” work in Rust?

_Research stopped early: the deadline came._

## Summary

Each value has exactly one owner at a time [1]. Borrowing lets code use a value without owning it [2].

## The rules

- A value has **one owner** [1].
- When the owner goes out of scope, the value is *dropped* [3].
  1. Moving transfers ownership.
  2. Cloning copies the buffer.

| Type | Copy? | Notes |
|:-----|:-----:|------:|
| `i32` | yes | lives on the stack [1] |
| `String` | no | owns a heap buffer [3] |

### In code

```rust
fn main() {
    let s = String::from("hi"); // the owner
    let t = s;                  // moved
}
```

> A quote: "references must never outlive their value" [2].

Naïve café — Łódź → 日本 ✓

## Sources

1. The Rust book, p. 3 — `file:///corpus/book.pdf#page=3`
2. References and borrowing — `https://doc.rust-lang.org/book/ch04-02-references-and-borrowing.html`
3. Drop — `https://doc.rust-lang.org/std/ops/trait.Drop.html`
"#;

const HEADINGS: [&str; 5] = [
    "How does “ownership” work in Rust?",
    "Summary",
    "The rules",
    "In code",
    "Sources",
];

/// `pdftotext -layout`'s text of `pdf`. The tests need poppler-utils: `scripts/test.sh`
/// installs it, and elsewhere this fails saying so rather than skipping.
fn pdftotext(pdf: &[u8]) -> String {
    let mut child = match Command::new("pdftotext")
        .args(["-enc", "UTF-8", "-", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!(
            "pdftotext is needed to read the exported PDF back ({e}); install poppler-utils \
             (apt-get install -y poppler-utils) or run scripts/test.sh, which does"
        ),
    };
    let mut stdin = child.stdin.take().unwrap();
    let bytes = pdf.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "pdftotext refused the PDF: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Text with runs of whitespace made one space, so words a line broke apart still match.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_pdf_read_back_has_every_heading_citation_and_source() {
    let pdf = render(REPORT, Format::Pdf, "en").unwrap();
    assert!(pdf.starts_with(b"%PDF-1.7"));
    let poppler = squeeze(&pdftotext(&pdf));
    let ours = fathom_parse::pdf::extract(&pdf, 100).expect("our PDF reader reads it");
    assert_eq!(
        ours.title.as_deref(),
        Some("How does “ownership” work in Rust?")
    );
    let ours_text = squeeze(
        &ours
            .pages
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for (reader, text) in [("pdftotext", &poppler), ("fathom-parse", &ours_text)] {
        for h in HEADINGS {
            assert!(
                text.contains(h),
                "{reader}: heading '{h}' missing from {text}"
            );
        }
        for cite in ["[1]", "[2]", "[3]"] {
            assert!(text.contains(cite), "{reader}: {cite} missing from {text}");
        }
        for s in [
            "The Rust book, p. 3",
            "file:///corpus/book.pdf#page=3",
            "References and borrowing",
            "https://doc.rust-lang.org/std/ops/trait.Drop.html",
            "one owner",
            "Moving transfers ownership.",
            "owns a heap buffer",
            "let s = String::from(\"hi\"); // the owner",
            "references must never outlive their value",
            "Naïve café — Lódz -> ?? v",
            "Page 1 of 1",
        ] {
            assert!(text.contains(s), "{reader}: '{s}' missing from {text}");
        }
        // The sources list comes last, in order, after the text that cites it.
        let at = |s: &str| text.rfind(s).unwrap();
        assert!(
            at("owns a heap buffer") < at("The Rust book, p. 3"),
            "{reader}"
        );
        assert!(
            at("The Rust book, p. 3") < at("References and borrowing"),
            "{reader}"
        );
    }
    // The sources' addresses and the citations are links.
    let (uris, internal) = links(&pdf);
    assert_eq!(
        uris,
        [
            "file:///corpus/book.pdf#page=3",
            "https://doc.rust-lang.org/book/ch04-02-references-and-borrowing.html",
            "https://doc.rust-lang.org/std/ops/trait.Drop.html"
        ]
    );
    assert_eq!(internal, 7, "each citation links to its source");
}

/// The PDF's link annotations: the addresses they open, and how many lead inside the file.
fn links(pdf: &[u8]) -> (Vec<String>, usize) {
    let doc = lopdf::Document::load_mem(pdf).unwrap();
    let mut uris = Vec::new();
    let mut internal = 0;
    for (_, page) in doc.get_pages() {
        for annot in doc.get_page_annotations(page).unwrap() {
            if let Ok(dest) = annot.get(b"Dest") {
                assert!(dest.as_array().is_ok_and(|d| d.len() == 5), "{dest:?}");
                internal += 1;
            } else {
                let action = annot.get(b"A").unwrap().as_dict().unwrap();
                let uri = action.get(b"URI").unwrap().as_str().unwrap();
                uris.push(String::from_utf8(uri.to_vec()).unwrap());
            }
        }
    }
    (uris, internal)
}

#[test]
fn a_long_pdf_is_paginated_with_numbered_pages_and_nothing_lost() {
    let mut md = String::from("# A long report\n\n");
    for s in 1..=12 {
        md.push_str(&format!("## Section {s}\n\n"));
        for p in 1..=4 {
            md.push_str(&format!(
                "Paragraph {s}.{p} says something long enough to wrap over several lines of the page, so that the report runs to many pages and every one of them needs its number at the foot [1].\n\n"
            ));
        }
    }
    md.push_str("| Row | Value |\n|---|---|\n");
    for r in 1..=80 {
        md.push_str(&format!("| row {r} | value {r} |\n"));
    }
    md.push_str("\n```\n");
    for l in 1..=120 {
        md.push_str(&format!("code line {l}\n"));
    }
    md.push_str("```\n\n## Sources\n\n1. Only source — `https://a.test/`\n");
    let pdf = render(&md, Format::Pdf, "en").unwrap();
    let text = pdftotext(&pdf);
    let pages: Vec<&str> = text
        .split('\u{c}')
        .filter(|p| !p.trim().is_empty())
        .collect();
    let n = pages.len();
    assert!(n >= 5, "{n} pages");
    for (i, page) in pages.iter().enumerate() {
        assert!(
            page.contains(&format!("Page {} of {n}", i + 1)),
            "page {} has no number: {page}",
            i + 1
        );
    }
    let all = squeeze(&text);
    for s in 1..=12 {
        for p in 1..=4 {
            assert!(
                all.contains(&format!("Paragraph {s}.{p} says")),
                "{s}.{p} lost"
            );
        }
    }
    for r in 1..=80 {
        assert!(
            all.contains(&format!("row {r} value {r}")),
            "table row {r} lost"
        );
    }
    for l in 1..=120 {
        assert!(
            all.contains(&format!("code line {l}")),
            "code line {l} lost"
        );
    }
    // A table continued on a new page repeats its header there.
    let header_pages = pages
        .iter()
        .filter(|p| p.contains("Row") && p.contains("Value"))
        .count();
    let row_pages = pages.iter().filter(|p| p.contains("row ")).count();
    assert_eq!(
        header_pages, row_pages,
        "header not repeated on each table page"
    );
}

#[test]
fn the_docx_read_back_has_its_headings_as_headings_and_its_table() {
    let docx = render(REPORT, Format::Docx, "en").unwrap();
    let read = fathom_parse::docx::docx_to_markdown(&docx).expect("our DOCX reader reads it");
    assert!(read.unread.is_empty(), "{:?}", read.unread);
    assert_eq!(
        read.title.as_deref(),
        Some("How does “ownership” work in Rust?")
    );
    // The reader writes Markdown: its escapes are not the text.
    let md = unescape(&read.markdown);
    let lines: Vec<&str> = md.lines().collect();
    // The reader writes Title as `#` and Heading1 as `##`, as the report had them.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("# ") && l.contains("ownership")),
        "{md}"
    );
    for h in ["## Summary", "## The rules", "### In code", "## Sources"] {
        assert!(lines.contains(&h), "heading '{h}' missing: {md}");
    }
    let rows: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with('|'))
        .collect();
    assert!(
        rows.iter()
            .any(|r| r.contains("Type") && r.contains("Copy?") && r.contains("Notes")),
        "{md}"
    );
    assert!(
        rows.iter().any(|r| r.contains("String")
            && r.contains("no")
            && r.contains("owns a heap buffer [3]")),
        "{md}"
    );
    for s in [
        "Each value has exactly one owner at a time [1].",
        "- A value has",
        "Moving transfers ownership.",
        "String::from(\"hi\"); // the owner",
        "references must never outlive their value",
        "Naïve café — Łódź → 日本 ✓",
        "The Rust book, p. 3",
        "https://doc.rust-lang.org/book/ch04-02-references-and-borrowing.html",
    ] {
        assert!(md.contains(s), "'{s}' missing: {md}");
    }
    // The nested list keeps its numbers.
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("1. Moving")),
        "{md}"
    );
    let ordered_sources: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("1. The Rust book") || l.starts_with("3. Drop"))
        .collect();
    assert_eq!(ordered_sources.len(), 2, "{md}");
}

fn unescape(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut chars = md.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek().is_some_and(|n| n.is_ascii_punctuation()) {
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn the_docx_has_the_parts_word_needs() {
    let docx = render(REPORT, Format::Docx, "en").unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(docx)).unwrap();
    let mut part = |name: &str| {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut zip.by_name(name).unwrap(), &mut s).unwrap();
        s
    };
    let document = part("word/document.xml");
    assert!(
        document.contains("<w:tblGrid><w:gridCol"),
        "table without grid"
    );
    assert!(document.contains("<w:numPr>"), "lists not numbered");
    let rels = part("word/_rels/document.xml.rels");
    assert!(rels.contains(
        "Target=\"https://doc.rust-lang.org/std/ops/trait.Drop.html\" TargetMode=\"External\""
    ));
    for name in [
        "[Content_Types].xml",
        "_rels/.rels",
        "word/styles.xml",
        "word/numbering.xml",
        "word/footer1.xml",
        "docProps/core.xml",
        "word/document.xml",
        "word/_rels/document.xml.rels",
    ] {
        well_formed(&part(name), name);
    }
}

#[test]
fn the_docx_keeps_markup_characters_as_text_and_leaves_out_control_characters() {
    let md = "# A < b & \"c\" 'd'\n\nIf a < b && c > \"d\" then 'e' [1].\u{1}\n\n\
              所有权 [链接](https://a.test/?a=1&b='2')\n\n## Sources\n\n\
              1. Page — `https://e.test/?a=1&b=2`\n";
    let docx = render(md, Format::Docx, "zh").unwrap();
    let read = fathom_parse::docx::docx_to_markdown(&docx).expect("our DOCX reader reads it");
    assert!(read.unread.is_empty(), "{:?}", read.unread);
    let text = unescape(&read.markdown);
    for s in [
        "# A < b & \"c\" 'd'",
        "If a < b && c > \"d\" then 'e' [1].",
        "所有权",
        "https://e.test/?a=1&b=2",
    ] {
        assert!(text.contains(s), "'{s}' missing: {text}");
    }
    // XML 1.0 allows no such character, and Word refuses a file that has one.
    assert!(!text.contains('\u{1}'), "{text:?}");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(docx)).unwrap();
    for i in 0..zip.len() {
        let mut file = zip.by_index(i).unwrap();
        let name = file.name().unwrap().to_string();
        let mut xml = String::new();
        std::io::Read::read_to_string(&mut file, &mut xml).unwrap();
        assert!(!xml.contains('\u{1}'), "{name}");
        well_formed(&xml, &name);
        if name == "word/_rels/document.xml.rels" {
            let targets = attribute_values(&xml, "Target");
            assert!(
                targets.contains(&"https://a.test/?a=1&b='2'".to_string()),
                "{targets:?}"
            );
        }
    }
}

/// The values of the attributes named `name` in `xml`, unescaped.
fn attribute_values(xml: &str, name: &str) -> Vec<String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut values = Vec::new();
    // Each pass reads one event; the input is finite.
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                if let Some(a) = e.try_get_attribute(name).unwrap() {
                    let value = a.normalized_value(quick_xml::XmlVersion::Implicit1_0);
                    values.push(value.unwrap().into_owned());
                }
            }
            quick_xml::events::Event::Eof => return values,
            _ => {}
        }
    }
}

/// Fails unless `xml` is well-formed XML.
fn well_formed(xml: &str, name: &str) {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut depth = 0i64;
    // Each pass reads one event; the input is finite.
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(_)) => depth += 1,
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!(
                "{name} is not well-formed at {}: {e}",
                reader.buffer_position()
            ),
        }
    }
    assert_eq!(depth, 0, "{name}: unbalanced elements");
}

#[test]
fn the_html_is_valid_standalone_and_links_only_to_its_sources() {
    let html = String::from_utf8(render(REPORT, Format::Html, "en").unwrap()).unwrap();
    // Written as well-formed markup, which catches any unclosed element.
    well_formed(&html.replacen("<!DOCTYPE html>", "", 1), "the HTML page");
    let page = dom_query::Document::from(html.as_str());
    assert_eq!(page.select("title").text().to_string(), HEADINGS[0]);
    assert_eq!(page.select("h1").text().to_string(), HEADINGS[0]);
    let h2: Vec<String> = page
        .select("h2")
        .iter()
        .map(|h| h.text().to_string())
        .collect();
    assert_eq!(h2, ["Summary", "The rules", "Sources"]);
    assert_eq!(page.select("h3").text().to_string(), "In code");
    let th: Vec<String> = page
        .select("table th")
        .iter()
        .map(|c| c.text().to_string())
        .collect();
    assert_eq!(th, ["Type", "Copy?", "Notes"]);
    let td: Vec<String> = page
        .select("table td")
        .iter()
        .map(|c| c.text().to_string())
        .collect();
    assert_eq!(
        td,
        [
            "i32",
            "yes",
            "lives on the stack [1]",
            "String",
            "no",
            "owns a heap buffer [3]"
        ]
    );
    assert!(
        page.select("pre code.language-rust")
            .text()
            .contains("let t = s;")
    );
    assert_eq!(page.select("blockquote").length(), 1);
    assert_eq!(page.select("ul > li").length(), 2);
    assert_eq!(page.select("ul ol > li").length(), 2);

    // Nothing is loaded from elsewhere: no scripts, stylesheets, images or frames, no
    // attribute that fetches, and a policy that forbids it.
    for tag in [
        "script", "link", "img", "iframe", "object", "embed", "video", "audio", "source",
    ] {
        assert_eq!(page.select(tag).length(), 0, "<{tag}> in the page");
    }
    assert_eq!(page.select("[src]").length(), 0);
    assert_eq!(page.select("[srcset]").length(), 0);
    let csp = page.select("meta[http-equiv=Content-Security-Policy]");
    assert!(csp.attr("content").unwrap().contains("default-src 'none'"));
    assert!(!html.contains("url("), "the styles load something");
    assert!(!html.contains("@import"));

    // Links: each citation to its source in the list, each source's address.
    let links: Vec<String> = page
        .select("a[href]")
        .iter()
        .map(|a| a.attr("href").unwrap().to_string())
        .collect();
    let external: Vec<&String> = links.iter().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        external,
        [
            "file:///corpus/book.pdf#page=3",
            "https://doc.rust-lang.org/book/ch04-02-references-and-borrowing.html",
            "https://doc.rust-lang.org/std/ops/trait.Drop.html"
        ]
    );
    for l in links.iter().filter(|l| l.starts_with('#')) {
        let id = &l[1..];
        assert_eq!(
            page.select(&format!("li[id='{id}']")).length(),
            1,
            "{l} leads nowhere"
        );
    }
    assert_eq!(page.select("a.cite").length(), 7);
    let first_source = page.select("li#source-1").text().to_string();
    assert!(
        first_source.contains("The Rust book, p. 3"),
        "{first_source}"
    );
    // Characters beyond Latin-1 are kept as they are.
    assert!(html.contains("Naïve café — Łódź → 日本 ✓"));
}

#[test]
fn hostile_markdown_never_panics_and_every_format_is_written() {
    let mut cases = vec![
        String::new(),
        "no heading at all".to_string(),
        "# \u{0}\u{1}\u{7f}\u{fffe}".to_string(),
        "| a |\n|---|\n| b | c | d | e |\n".to_string(),
        "- \n- \n".to_string(),
        "<div onclick=x>raw</div>\n\n<img src=https://evil.test/x.png>".to_string(),
        "[x](javascript:alert(1)) ![img](https://evil.test/i.png)".to_string(),
        format!("{}x", ">".repeat(5000)),
        format!("{}x", "- ".repeat(3000)),
        "w".repeat(100_000),
        "🦀".repeat(10_000),
        "## Sources\n\n99999999999. x — `https://a.test`\n\n[99999999999]".to_string(),
    ];
    cases.push(format!("```\n{}\n```", "\t".repeat(1000)));
    for md in &cases {
        for f in Format::ALL {
            let out = render(md, f, "en").unwrap_or_else(|e| panic!("{f} of {md:.40?}: {e}"));
            assert!(!out.is_empty());
        }
        let html = String::from_utf8(render(md, Format::Html, "en").unwrap()).unwrap();
        let page = dom_query::Document::from(html.as_str());
        assert_eq!(
            page.select("[src], script, img, [onclick]").length(),
            0,
            "{md:.40?}"
        );
        let pdf = render(md, Format::Pdf, "en").unwrap();
        pdftotext(&pdf);
        let docx = render(md, Format::Docx, "en").unwrap();
        fathom_parse::docx::docx_to_markdown(&docx).unwrap();
    }
}
