//! Citation checks over a report written from real documents (the sample corpus parsed as
//! Markdown and HTML, and a PDF's pages): fabricated markers, and ALCE-style citation
//! precision and recall.

use fathom_evidence::check_claim;
use fathom_parse::pdf::{PdfPage, PdfText};
use fathom_parse::{DocKind, ParsedDoc, parse_content, pdf_to_doc};
use fathom_research::eval::*;
use fathom_research::report::{Report, Section, Source};

const PDF: &str = "https://x.test/lifetimes.pdf";

/// The sample corpus's ownership (Markdown) and borrowing (HTML) chapters, parsed, and a
/// two-page PDF on lifetimes.
fn read_documents() -> Vec<ParsedDoc> {
    let dir = tempfile::tempdir().unwrap();
    fathom_testkit::fixtures::write_sample_corpus(dir.path());
    let parse = |name: &str, kind| {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        parse_content(&format!("file:///corpus/{name}"), kind, &bytes).unwrap()
    };
    let pdf = pdf_to_doc(
        PDF,
        PdfText {
            title: Some("Lifetimes".into()),
            author: None,
            created: None,
            page_count: 2,
            pages: vec![
                PdfPage {
                    n: 1,
                    text: "Lifetimes describe how long references stay valid.".into(),
                },
                PdfPage {
                    n: 2,
                    text: "The compiler infers most lifetimes with elision rules. Explicit \
                           lifetime annotations relate the lifetimes of several references \
                           to each other."
                        .into(),
                },
            ],
        },
    )
    .unwrap();
    vec![
        parse("ownership.md", DocKind::Markdown),
        parse("borrowing.html", DocKind::Html),
        pdf,
    ]
}

fn source(n: usize, url: &str, page: Option<u32>) -> Source {
    Source {
        n,
        title: format!("Source {n}"),
        url: url.into(),
        page,
    }
}

#[test]
fn precision_and_recall_of_a_report_over_real_documents() {
    let read = read_documents();
    let report = Report {
        title: "How does ownership work?".into(),
        notice: None,
        sections: vec![
            Section {
                title: "Ownership".into(),
                paragraphs: vec![
                    // Quoted verbatim: supported.
                    "Each value has exactly one owner at a time. [1] \
                     When its owner goes out of scope, a value is dropped and its memory \
                     returned. [1] \
                     Each value has exactly two owners at a time. [1]"
                        .into(),
                    // Verbatim (supported); the page says "must never" (unsupported); true,
                    // but uncited (a claim without a supporting citation).
                    "The borrow checker enforces these rules at compile time, so data races \
                     cannot compile. [2] \
                     A reference can outlive the value it points to. [2] \
                     Moving a value transfers ownership to the new variable."
                        .into(),
                    // A source never read, and a marker naming no source: fabricated.
                    "Something from nowhere. [3] And from a source never listed. [6]".into(),
                ],
            },
            Section {
                title: "Lifetimes".into(),
                // Both sentences are on page 2: the one citing page 1 is unsupported.
                paragraphs: vec![
                    "The compiler infers most lifetimes with elision rules. [4] \
                     Explicit lifetime annotations relate the lifetimes of several references \
                     to each other. [5]"
                        .into(),
                ],
            },
            Section {
                title: "Pitfalls".into(),
                // The writer's note: no claim.
                paragraphs: vec!["_None of the sources read covered this section._".into()],
            },
        ],
        sources: vec![
            source(1, "file:///corpus/ownership.md", None),
            source(2, "file:///corpus/borrowing.html", None),
            source(3, "https://never.read/x", None),
            source(4, &format!("{PDF}#page=2"), Some(2)),
            source(5, &format!("{PDF}#page=1"), Some(1)),
        ],
    };
    let c = check_citations(&report, &read);
    assert_eq!(
        c,
        CitationCheck {
            markers: 9,
            fabricated: 2,
            cited_sentences: 9,
            // The verbatim quote, the paraphrase that keeps the facts, the verbatim borrow
            // checker sentence and the page-2 sentence cited to page 2. Not: the wrong count
            // ("two owners"), the flipped negation, the two fabricated, the wrong page.
            supported: 4,
            claim_sentences: 10,
        }
    );
    // Why the cited sentences the documents do not bear out fail.
    let why = |claim: &str, doc: usize, page| check_claim(claim, &read[doc], page).reason;
    assert_eq!(
        why("Each value has exactly two owners at a time. [1]", 0, None),
        "the number 2 is not in the passage"
    );
    assert_eq!(
        why(
            "A reference can outlive the value it points to. [2]",
            1,
            None
        ),
        "the passage negates what the claim affirms"
    );
    let wrong_page = why(
        "Explicit lifetime annotations relate the lifetimes of several references to each \
         other. [5]",
        2,
        Some(1),
    );
    assert!(
        wrong_page.starts_with("only 2 of 6 content terms"),
        "{wrong_page}"
    );

    assert_eq!(c.fabricated_rate(), 2.0 / 9.0);
    assert_eq!(c.precision(), 4.0 / 9.0);
    assert_eq!(c.recall(), 0.4);

    // Totals add up across reports; the ratios are of the sums.
    let mut total = CitationCheck::default();
    total.add(c);
    total.add(c);
    assert_eq!((total.supported, total.claim_sentences), (8, 20));
    assert_eq!(total.recall(), 0.4);
}

#[test]
fn a_report_with_no_claims_has_zero_precision_and_recall() {
    let c = check_citations(&Report::new("Q"), &[]);
    assert_eq!(c, CitationCheck::default());
    assert_eq!(
        (c.precision(), c.recall(), c.fabricated_rate()),
        (0.0, 0.0, 0.0)
    );
}

#[test]
fn the_offline_writers_quotes_are_all_supported() {
    // The extractive writer quotes its sources verbatim: every cited sentence holds up, and
    // every claim carries a citation.
    let dir = tempfile::tempdir().unwrap();
    fathom_testkit::fixtures::write_sample_corpus(dir.path());
    let mut docs = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    for name in names {
        let kind = DocKind::from_path(&name).unwrap();
        let bytes = std::fs::read(dir.path().join(&name)).unwrap();
        docs.push(parse_content(&format!("file:///corpus/{name}"), kind, &bytes).unwrap());
    }
    let outline: Vec<String> = ["Overview", "Rules", "Pitfalls"].map(String::from).to_vec();
    let sections = fathom_research::writer::draft_sections(
        "How does ownership work in Rust?",
        &outline,
        &docs,
        3,
    );
    let mut report = Report::new("How does ownership work in Rust?");
    for p in fathom_research::writer::pack_patches(&report, &sections, 2000) {
        report.apply(&p, 2000).unwrap();
    }
    let c = check_citations(&report, &docs);
    assert!(c.cited_sentences >= 6, "{c:?}\n{}", report.render());
    assert_eq!(c.fabricated, 0);
    assert_eq!(
        (c.precision(), c.recall()),
        (1.0, 1.0),
        "{c:?}\n{}",
        report.render()
    );
}
