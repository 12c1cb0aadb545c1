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

const FILLER: [&str; 8] = [
    "Strings can be sliced with indices that count from the start of the text.",
    "Floating point numbers are stored as binary fractions in the hardware.",
    "A list keeps its elements in the order in which they were appended.",
    "Dictionaries map hashable keys to arbitrary values of any type.",
    "The print function writes its arguments separated by single spaces.",
    "Loops over a range stop before the end value that was given.",
    "Exceptions raised inside a try block are matched against the handlers.",
    "Classes bundle data and the functions that operate on that data.",
];

fn all_quotes(sections: &[(String, Vec<Quote>)]) -> Vec<&str> {
    sections
        .iter()
        .flat_map(|(_, q)| q.iter().map(|q| q.text.as_str()))
        .collect()
}

#[test]
fn a_definition_opens_the_answer_and_a_sentence_going_on_from_it_follows_it() {
    let docs = vec![
        doc(
            "manual/modules",
            &[
                "Modules are imported with the import statement at the top of a script.",
                "A module is a file containing Python definitions and statements. It lets you reuse the definitions in other programs without copying them.",
            ],
        ),
        doc(
            "manual/other",
            &["Every package name found on the search path can be imported."],
        ),
        // The rest of the manual, about other things: what makes "module" a rare word.
        doc("manual/misc", &FILLER),
    ];
    let sections = draft_sections("What is a module?", &["Overview".into()], &docs, 3);
    let quotes = all_quotes(&sections);
    assert_eq!(
        quotes.first().copied(),
        Some("A module is a file containing Python definitions and statements."),
        "{quotes:?}"
    );
    // The pronoun sentence never stands apart from what "It" refers to.
    let it = quotes
        .iter()
        .position(|q| q.starts_with("It lets you reuse"));
    assert_eq!(it, Some(1), "{quotes:?}");
}

#[test]
fn a_reference_entry_is_found_by_its_label_across_its_paragraphs() {
    // A reference page: a signature line, then paragraphs that never repeat the name.
    let docs = vec![
        doc(
            "library/functools",
            &[
                "@functools.lru_cache(maxsize=128)",
                "Decorator to wrap a function with a memoizing callable that saves up to the maxsize most recent calls.",
                "Since a dictionary is used to cache results, the positional and keyword arguments to the function must be hashable.",
                "@functools.total_ordering",
                "Given a class defining one or more rich comparison ordering methods, this class decorator supplies the rest.",
            ],
        ),
        doc("manual/misc", &FILLER),
    ];
    let sections = draft_sections(
        "What does functools.lru_cache do?",
        &["Overview".into()],
        &docs,
        2,
    );
    let quotes = all_quotes(&sections);
    assert!(
        quotes.iter().any(|q| q.starts_with("Decorator to wrap")),
        "{quotes:?}"
    );
    assert!(
        quotes.iter().any(|q| q.contains("must be hashable")),
        "{quotes:?}"
    );
    assert!(
        !quotes.iter().any(|q| q.contains("rich comparison")),
        "{quotes:?}"
    );
}

#[test]
fn a_lead_in_that_states_something_is_quoted_as_a_statement() {
    let docs = vec![doc(
        "tutorial/errors",
        &[
            "Syntax errors, also known as parsing errors, are perhaps the most common kind of complaint you get while learning:",
            "For example:",
        ],
    )];
    let sections = draft_sections("What is a syntax error?", &["Overview".into()], &docs, 2);
    let quotes = all_quotes(&sections);
    assert_eq!(
        quotes,
        [
            "Syntax errors, also known as parsing errors, are perhaps the most common kind of complaint you get while learning."
        ]
    );
}

/// A lead-in that points at the code or list after it promises what a report of quotes does
/// not show: it is not quoted. A pointer in a trailing phrase of its own (", like this:") goes,
/// and the clause before it is quoted as the statement it is.
#[test]
fn a_lead_in_pointing_at_what_follows_is_not_quoted_without_it() {
    let docs = vec![doc(
        "tutorial/defaults",
        &[
            "If you do not want the default value shared between calls, you can write the function like this instead:",
            "The default value is evaluated only once, when the function is defined.",
            "A default value is shared between all later calls of the function when it is a mutable object such as a list, like this:",
            "This default value example prints the list below:",
        ],
    )];
    let sections = draft_sections(
        "Why is a default value shared between calls?",
        &["Overview".into()],
        &docs,
        4,
    );
    let mut quotes = all_quotes(&sections);
    quotes.sort();
    assert_eq!(
        quotes,
        [
            "A default value is shared between all later calls of the function when it is a mutable object such as a list.",
            "The default value is evaluated only once, when the function is defined."
        ]
    );
}

/// A question whose own words are all in a script the sources do not use, beside the name
/// every source bears, gets no quotes (the report says nothing covered it) rather than
/// sentences that share only that name; a word of the sources' own language in it is enough
/// to find its matter.
#[test]
fn a_question_in_another_script_is_not_answered_with_what_shares_only_the_sources_name() {
    let docs = vec![
        doc(
            "a",
            &[
                "Rust checks ownership at compile time, so a moved value cannot be used again by the old variable.",
                "Rust programs manage memory through a set of ownership rules checked by the compiler.",
            ],
        ),
        doc(
            "b",
            &[
                "Rust prevents data races by refusing to compile code that shares mutable state between threads unsafely.",
            ],
        ),
    ];
    let outline = ["概述".to_string(), "示例".to_string()];
    let sections = draft_sections("Rust 如何防止线程之间的数据竞争？", &outline, &docs, 3);
    assert_eq!(sections.len(), 2);
    assert!(
        sections.iter().all(|(_, quotes)| quotes.is_empty()),
        "{sections:?}"
    );
    assert!(draft_answer_quotes("Rust 如何防止线程之间的数据竞争？", &docs).is_empty());

    let sections = draft_sections("Rust 如何防止 data races？", &outline, &docs, 3);
    let quoted: Vec<&str> = sections
        .iter()
        .flat_map(|(_, q)| q.iter().map(|q| q.text.as_str()))
        .collect();
    assert!(
        quoted.iter().any(|t| t.contains("prevents data races")),
        "{quoted:?}"
    );
}

fn draft_answer_quotes(question: &str, docs: &[ParsedDoc]) -> Vec<Quote> {
    let weighed: Vec<Weighed> = docs.iter().map(Weighed::of).collect();
    let read: Vec<(&ParsedDoc, &Weighed)> = docs.iter().zip(&weighed).collect();
    draft_answer(question, &read, 3)
}
