//! Documents for tests: a sample corpus, parsed documents, and PDFs written by hand (hostile
//! ones too).

use std::path::Path;

/// A small corpus on the language topics the question touches, in the three formats.
pub fn write_sample_corpus(dir: &Path) {
    let topics = [
        (
            "ownership",
            "Ownership is a set of rules that govern how a program manages memory. Each value has exactly one owner at a time. When the owner goes out of scope, the value is dropped and its memory is returned. Moving a value transfers ownership to the new variable, and the old variable can no longer be used.",
        ),
        (
            "borrowing",
            "A reference lets code use a value without taking ownership of it. Borrowing rules allow many immutable references or exactly one mutable reference at a time. The borrow checker enforces these rules at compile time, so data races cannot compile. A reference must never outlive the value it points to.",
        ),
        (
            "lifetimes",
            "Lifetimes describe how long references stay valid. The compiler infers most lifetimes with elision rules. Explicit lifetime annotations relate the lifetimes of several references to each other. A dangling reference is rejected because its lifetime is shorter than the reference that uses it.",
        ),
        (
            "smart-pointers",
            "Smart pointers own the data they point to and add behaviour on top of references. Box stores a value on the heap with a single owner. Reference counting with Rc enables multiple ownership of one value in single-threaded code. When the last owner is dropped, the value is cleaned up.",
        ),
        (
            "threads",
            "Threads let a program run code in parallel. A closure moved into a thread takes ownership of the values it captures. Channels transfer ownership of messages from one thread to another. Mutex and Arc share state safely because ownership rules still apply across threads.",
        ),
        (
            "drop",
            "The Drop trait runs code when a value goes out of scope. Rust calls drop automatically, so resources are released exactly once. Double free errors cannot happen because only the owner frees memory. A value can be dropped early by passing it to the drop function.",
        ),
        (
            "strings",
            "A String owns a heap buffer that holds its text. Assigning a String to another variable moves ownership instead of copying the buffer. Cloning makes a deep copy when two owners are really needed. String slices borrow part of a String without owning it.",
        ),
        (
            "copy",
            "Types that implement Copy are duplicated instead of moved. Integers, booleans and characters are Copy because they live entirely on the stack. A type that owns heap memory cannot be Copy. Copy types keep their original variable usable after assignment.",
        ),
    ];
    for (i, (name, text)) in topics.iter().enumerate() {
        let paras: Vec<String> = (0..3)
            .map(|k| format!("{text} This is note {k} on {name} ownership in Rust programs."))
            .collect();
        match i % 3 {
            0 => std::fs::write(
                dir.join(format!("{name}.md")),
                format!("# The {name} chapter\n\n{}\n", paras.join("\n\n")),
            ),
            1 => std::fs::write(
                dir.join(format!("{name}.html")),
                format!(
                    "<html><head><title>The {name} chapter</title></head><body><nav>Home Next</nav><main><h1>The {name} chapter</h1>{}</main></body></html>",
                    paras.iter().map(|p| format!("<p>{p}</p>")).collect::<String>()
                ),
            ),
            _ => std::fs::write(
                dir.join(format!("{name}.txt")),
                format!("The {name} chapter\n\n{}\n", paras.join("\n\n")),
            ),
        }
        .expect("write corpus file");
    }
}

/// The sample corpus written into `dir/corpus`, opened with its index in `dir/index` and
/// indexed: what a test server searches.
pub async fn sample_corpus(dir: &Path) -> std::sync::Arc<fathom_corpus::Corpus> {
    let corpus_dir = dir.join("corpus");
    std::fs::create_dir_all(&corpus_dir).unwrap();
    write_sample_corpus(&corpus_dir);
    let corpus = fathom_corpus::Corpus::open(&corpus_dir, &dir.join("index"))
        .await
        .unwrap();
    corpus.refresh(&|_, _| {}).await.unwrap();
    std::sync::Arc::new(corpus)
}

/// A parsed plain-text document of `paras`, titled by its URL, claiming `words` words (the
/// writer weighs documents by it).
pub fn text_doc(url: &str, paras: &[&str], words: usize) -> fathom_parse::ParsedDoc {
    let blocks = paras
        .iter()
        .map(|p| fathom_parse::text::Block {
            heading: String::new(),
            text: p.to_string(),
            page: None,
            item: false,
        })
        .collect();
    fathom_parse::ParsedDoc {
        words,
        ..fathom_parse::ParsedDoc::new(url, url, fathom_parse::DocKind::Text, blocks)
    }
}

/// A PDF with one page per entry of `pages` (lines split on `\n`, Helvetica), and an Info
/// dictionary with `title` and `author`. Written by hand so tests need no PDF library.
pub fn sample_pdf(pages: &[&str], title: &str, author: &str) -> Vec<u8> {
    let contents: Vec<PageContent> = pages
        .iter()
        .map(|text| {
            let mut ops = String::from("BT /F1 11 Tf 14 TL 72 720 Td\n");
            for line in text.lines() {
                ops.push_str(&format!("({}) Tj T*\n", pdf_escape(line)));
            }
            ops.push_str("ET");
            PageContent::Plain(ops.into_bytes())
        })
        .collect();
    pdf_document(&contents, title, author)
}

fn pdf_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('(', "\\(")
        .replace(')', "\\)")
}

/// A page's content stream, as written or deflated (`/FlateDecode`).
pub enum PageContent {
    Plain(Vec<u8>),
    Deflated(Vec<u8>),
}

/// A PDF whose pages draw `contents` in Helvetica, with an Info dictionary. Builds hostile
/// files too: a deflated stream can inflate to far more than the file's size.
pub fn pdf_document(contents: &[PageContent], title: &str, author: &str) -> Vec<u8> {
    use std::io::Write;
    let n = contents.len();
    // Objects: 1 catalog, 2 page tree, 3 font, 4 info, then a page and its content per page.
    let page_id = |i: usize| 5 + 2 * i;
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Count {n} /Kids [{}] >>",
            (0..n)
                .map(|i| format!("{} 0 R", page_id(i)))
                .collect::<Vec<_>>()
                .join(" ")
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
        format!(
            "<< /Title ({}) /Author ({}) /CreationDate (D:20240315120000Z) >>",
            pdf_escape(title),
            pdf_escape(author)
        )
        .into_bytes(),
    ];
    for (i, content) in contents.iter().enumerate() {
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
                 /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
                page_id(i) + 1
            )
            .into_bytes(),
        );
        let (filter, data) = match content {
            PageContent::Plain(b) => ("", b.clone()),
            PageContent::Deflated(b) => {
                let mut z =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
                z.write_all(b).expect("in-memory write");
                (
                    " /Filter /FlateDecode",
                    z.finish().expect("in-memory write"),
                )
            }
        };
        let mut obj = format!("<< /Length {}{filter} >>\nstream\n", data.len()).into_bytes();
        obj.extend_from_slice(&data);
        obj.extend_from_slice(b"\nendstream");
        objects.push(obj);
    }
    pdf_from_objects(&objects, "/Info 4 0 R")
}

/// A PDF file of `objects` (numbered from 1; the first is the catalog) with its
/// cross-reference table; `trailer` adds entries to the trailer. For files whose structure a
/// test writes itself (hostile page trees, reference loops).
pub fn pdf_from_objects(objects: &[Vec<u8>], trailer: &str) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for off in offsets {
        out.extend_from_slice(format!("{off:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer} >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}
