//! Citation checks: fabricated and unsupported citations.

use fathom_parse::ParsedDoc;
use fathom_research::eval::*;
use fathom_research::report::{Report, Section, Source};

fn doc(url: &str, text: &str) -> ParsedDoc {
    fathom_testkit::fixtures::text_doc(url, &[text], 10)
}

#[test]
fn fabricated_and_unsupported_citations_are_counted() {
    let source = |n, url: &str| Source {
        n,
        title: "t".into(),
        url: url.into(),
        page: None,
    };
    let report = Report {
        title: "Q".into(),
        notice: None,
        sections: vec![Section {
            title: "S".into(),
            paragraphs: vec![
                "Each value has exactly one owner. [1] The moon is made of cheese. [1] \
                 Data races cannot compile. [2] Uncited prose here."
                    .into(),
                "Something from nowhere. [3] And from a page never read. [4]".into(),
            ],
        }],
        sources: vec![
            source(1, "file:///own"),
            source(2, "file:///borrow"),
            source(3, "https://never.read/x"),
        ],
    };
    let read = vec![
        doc(
            "file:///own",
            "In Rust each value has exactly one owner at a time.",
        ),
        doc(
            "file:///borrow",
            "Because of these rules, data races cannot compile.",
        ),
    ];
    let c = check_citations(&report, &read);
    assert_eq!(
        c,
        CitationCheck {
            markers: 5,
            fabricated: 2,
            cited_sentences: 5,
            supported: 2
        }
    );
    assert_eq!(c.fabricated_rate(), 0.4);
    assert_eq!(c.support(), 0.4);
}
