//! The offline writer: relevant, non-redundant sentences, and bounded patches.

use fathom_parse::ParsedDoc;
use fathom_report::report::*;
use fathom_report::writer::*;

fn doc(url: &str, paras: &[&str]) -> ParsedDoc {
    let blocks = fathom_parse::text::plain_blocks(&paras.join("\n\n"));
    ParsedDoc {
        words: 100,
        ..ParsedDoc::new(url, url, fathom_parse::DocKind::Text, blocks)
    }
}

#[test]
fn picks_relevant_sentences_without_repeating_itself() {
    let docs = vec![
        doc(
            "a",
            &[
                "Ownership is a set of rules that govern how a program manages memory. Ownership rules are checked by the compiler at compile time.",
                "The weather today is sunny and warm across the whole region, said the forecast.",
            ],
        ),
        doc(
            "b",
            &[
                "Ownership is a set of rules that govern how a program manages its memory. For example, moving a String transfers ownership to the new variable binding.",
            ],
        ),
    ];
    let sections = draft_sections(
        "How does ownership work?",
        &["Examples".into(), "Overview".into()],
        &docs,
        2,
    );
    let all: Vec<&str> = sections
        .iter()
        .flat_map(|(_, q)| q.iter().map(|q| q.text.as_str()))
        .collect();
    assert!(!all.iter().any(|s| s.contains("weather")), "{all:?}");
    let near_dups = all
        .iter()
        .filter(|s| s.starts_with("Ownership is a set of rules"))
        .count();
    assert_eq!(near_dups, 1, "{all:?}");
    assert!(
        sections[0].1.iter().any(|q| q.text.contains("For example")),
        "{sections:?}"
    );
}

#[test]
fn patches_respect_the_limit_and_cover_every_section() {
    let q = |i: usize| Quote {
        text: format!("Sentence number {i} says something long enough to be quoted in a report."),
        source_url: format!("file:///s{}", i % 3),
        source_title: "Source".into(),
        page: None,
        also: Vec::new(),
    };
    let sections = vec![
        ("One".to_string(), (0..12).map(q).collect::<Vec<_>>()),
        ("Empty".to_string(), vec![]),
    ];
    let mut report = Report::new("Q");
    let patches = pack_patches(&report, &sections, 400);
    assert!(patches.len() > 3);
    for p in &patches {
        report.apply(p, 400).expect("each packed patch applies");
    }
    let md = report.render();
    assert!(md.contains("Sentence number 11"), "{md}");
    assert!(
        md.contains("## Empty\n\n_None of the sources read covered this section._"),
        "{md}"
    );
}
