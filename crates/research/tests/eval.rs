//! Citation checks over a report written from real documents (the sample corpus parsed as
//! Markdown and HTML, and a PDF's pages): fabricated markers, and ALCE-style citation
//! precision and recall.

use fathom_evidence::check_claim;
use fathom_parse::pdf::{PdfPage, PdfText};
use fathom_parse::{DocKind, ParsedDoc, parse_content, pdf_to_doc};
use fathom_report::eval::*;
use fathom_report::report::{Report, Section, Source};

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
        language: String::new(),
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
    let sections = fathom_report::writer::draft_sections(
        "How does ownership work in Rust?",
        &outline,
        &docs,
        3,
    );
    let mut report = Report::new("How does ownership work in Rust?");
    for p in fathom_report::writer::pack_patches(&report, &sections, 2000) {
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

// Key facts: what a report states of a hand-written answer key, and whether a sentence that
// states a key fact cites a right page.

fn key_facts(pages: &[&str], facts: &[&[&str]]) -> KeyFactQuestion {
    KeyFactQuestion {
        question: "What is the difference between a list and a tuple?".into(),
        pages: pages.iter().map(|p| p.to_string()).collect(),
        facts: facts
            .iter()
            .map(|alts| alts.iter().map(|a| a.to_string()).collect())
            .collect(),
    }
}

const CORPUS: &str = "file:///home/u/pydoc/corpus";

/// A report in the offline writer's shape: quoted sentences, each with its marker.
fn list_and_tuple_report() -> Report {
    Report {
        title: "What is the difference between a list and a tuple? Tuples are immutable.".into(),
        notice: Some("Lists are mutable.".into()),
        language: String::new(),
        sections: vec![
            Section {
                title: "Tuples are immutable".into(),
                paragraphs: vec![
                    // Both facts about tuples in one sentence; the page is the glossary.
                    "Tuples are immutable, and usually contain a heterogeneous sequence of \
                     elements. [1] Lists, on the other hand, are more like arrays in other \
                     languages. [2]"
                        .into(),
                    // "mutable" and "lists" are here, but in two sentences.
                    "Some objects are mutable. Others, such as lists, are not. [3]".into(),
                ],
            },
            Section {
                title: "Lists are homogeneous".into(),
                paragraphs: vec!["_None of the sources read covered this section._".into()],
            },
        ],
        sources: vec![
            source(1, &format!("{CORPUS}/glossary.html"), None),
            source(2, &format!("{CORPUS}/faq/design.html"), None),
            source(3, &format!("{CORPUS}/tutorial/introduction.html"), None),
        ],
    }
}

#[test]
fn a_fact_counts_when_one_sentence_holds_all_its_words() {
    let report = list_and_tuple_report();
    let q = key_facts(
        &["tutorial/datastructures.html"],
        &[
            &["the tuples are immutable"],
            // Its words stand in the report, split over two sentences: not stated.
            &["lists are mutable"],
            // Only in a section title (the report's title and notice hold further facts):
            // titles are not sentences of the report.
            &["lists homogeneous"],
        ],
    );
    let c = check_key_facts(&report, &q);
    assert_eq!(
        c.found,
        [
            Some(
                "Tuples are immutable, and usually contain a heterogeneous sequence of \
                 elements. [1]"
                    .to_string()
            ),
            None,
            None
        ]
    );
    assert_eq!((c.stated(), c.expected(), c.missed()), (1, 3, vec![1, 2]));
    assert_eq!(c.recall(), 1.0 / 3.0);
}

#[test]
fn alternatives_and_prefixes_state_a_fact() {
    let report = list_and_tuple_report();
    let q = key_facts(
        &["faq/design.html"],
        &[
            // The first alternative is nowhere; the second is.
            &["tuples records structs", "tuple* heterogeneous"],
            // A prefix matches the words it begins, not a shorter one.
            &["list* arrays languages"],
            &["tuples immutab*"],
            &["tuplesx* immutable"],
            // Word order does not matter; case and punctuation do not either.
            &["ARRAYS, on: lists!"],
        ],
    );
    let c = check_key_facts(&report, &q);
    let stated: Vec<bool> = c.found.iter().map(Option::is_some).collect();
    assert_eq!(stated, [true, true, true, false, true]);
}

#[test]
fn the_right_page_is_cited_by_a_sentence_stating_a_key_fact() {
    let report = list_and_tuple_report();
    let fact: &[&str] = &["tuples immutable heterogeneous"];
    // The sentence stating the fact cites the glossary.
    assert!(check_key_facts(&report, &key_facts(&["glossary.html"], &[fact])).right_page);
    // Any expected page will do.
    assert!(
        check_key_facts(
            &report,
            &key_facts(&["tutorial/datastructures.html", "glossary.html"], &[fact])
        )
        .right_page
    );
    // The design FAQ is cited, but by a sentence stating no key fact.
    let c = check_key_facts(&report, &key_facts(&["faq/design.html"], &[fact]));
    assert_eq!((c.stated(), c.right_page), (1, false));
    // With a fact that sentence states, it counts.
    let c = check_key_facts(
        &report,
        &key_facts(&["faq/design.html"], &[fact, &["lists arrays"]]),
    );
    assert_eq!((c.stated(), c.right_page), (2, true));
    // A page of the same name in another folder is another page.
    assert!(!check_key_facts(&report, &key_facts(&["faq/glossary.html"], &[fact])).right_page);
    // No fact stated, no right page.
    let c = check_key_facts(
        &report,
        &key_facts(&["glossary.html"], &[&["dictionary keys"]]),
    );
    assert_eq!((c.stated(), c.right_page), (0, false));
}

#[test]
fn a_page_of_a_pdf_is_its_document() {
    let mut report = list_and_tuple_report();
    report.sources[0] = source(1, &format!("{CORPUS}/guide.pdf#page=3"), Some(3));
    let q = key_facts(&["guide.pdf"], &[&["tuples immutable"]]);
    assert!(check_key_facts(&report, &q).right_page);
}

#[test]
fn fact_totals_add_up_over_questions() {
    let report = list_and_tuple_report();
    let one = check_key_facts(
        &report,
        &key_facts(&["glossary.html"], &[&["tuples immutable"], &["dict"]]),
    );
    let other = check_key_facts(
        &report,
        &key_facts(
            &["faq/design.html"],
            &[&["tuples immutable"], &["lists arrays"]],
        ),
    );
    let mut total = FactTotals::default();
    total.add(&one);
    total.add(&other);
    total.add(&check_key_facts(
        &Report::new("Q"),
        &key_facts(&["x.html"], &[&["x"]]),
    ));
    assert_eq!(
        total,
        FactTotals {
            questions: 3,
            expected: 5,
            stated: 3,
            right_page: 2
        }
    );
    assert_eq!(total.recall(), 0.6);
}

#[test]
fn a_key_fact_set_is_read_with_its_bounds() {
    let set = parse_key_facts(
        r#"[{"question": " Why? ", "pages": ["a/b.html"], "facts": [["x y", "z*"], ["w"]]}]"#,
    )
    .unwrap();
    assert_eq!(
        set,
        [KeyFactQuestion {
            question: "Why?".into(),
            pages: vec!["a/b.html".into()],
            facts: vec![vec!["x y".into(), "z*".into()], vec!["w".into()]],
        }]
    );
}

#[test]
fn a_malformed_key_fact_set_is_refused_naming_the_entry_and_field() {
    let err = |text: &str| parse_key_facts(text).unwrap_err().to_string();
    assert!(err("[{").starts_with("not valid JSON: "), "{}", err("[{"));
    assert_eq!(
        err(r#"{"question": "Q"}"#),
        "expected a JSON array of questions"
    );
    assert_eq!(err("[]"), "has no question");
    let ok = r#"{"question": "Q", "pages": ["p.html"], "facts": [["f"]]}"#;
    assert_eq!(err(&format!("[{ok}, 3]")), "entry 2: expected an object");
    assert_eq!(
        err(&format!(
            r#"[{ok}, {{"pages": ["p.html"], "facts": [["f"]]}}]"#
        )),
        "entry 2: field \"question\" is missing"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "page": ["p.html"], "facts": [["f"]]}]"#),
        "entry 1: unknown field \"page\" (the fields are question, pages, facts)"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "pages": "p.html", "facts": [["f"]]}]"#),
        "entry 1: field \"pages\" must be an array of 1 to 20 non-empty strings (question \"Q\")"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "pages": ["../p.html"], "facts": [["f"]]}]"#),
        "entry 1: field \"pages\": \"../p.html\" must be a path relative to the corpus folder, \
         without \"..\", \"\\\" or \"#\" (question \"Q\")"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "pages": ["p.html"], "facts": []}]"#),
        "entry 1: field \"facts\" must be an array of 1 to 20 facts (question \"Q\")"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "pages": ["p.html"], "facts": [["f"], "g"]}]"#),
        "entry 1: field \"facts[1]\" must be an array of 1 to 20 non-empty strings (question \"Q\")"
    );
    assert_eq!(
        err(r#"[{"question": "Q", "pages": ["p.html"], "facts": [["f", "the of a"]]}]"#),
        "entry 1: field \"facts[0]\": \"the of a\" has no content word (question \"Q\")"
    );
    let many = format!("[{}]", vec![ok; 1001].join(","));
    assert_eq!(err(&many), "has more than 1000 questions");
}

#[test]
fn the_python_documentation_set_is_well_formed() {
    // tests/pydoc: every question's pages are files of its corpus, and it has the questions
    // and facts its README says.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/pydoc");
    let set =
        parse_key_facts(&std::fs::read_to_string(dir.join("questions.json")).unwrap()).unwrap();
    assert!(set.len() >= 22, "{}", set.len());
    for q in &set {
        assert!((2..=4).contains(&q.facts.len()), "{q:?}");
        for p in &q.pages {
            assert!(dir.join("corpus").join(p).is_file(), "{p} of {q:?}");
        }
    }
}
