//! Routing measured on the labelled sets (`tests/routing`: questions across forms, corpora and
//! languages, labelled by hand before any router ran on them; `questions.json` tuned on, the
//! two `heldout-*.json` sets written later): the offline rules agree with at least 95% of the
//! labels of each set, and a question the rules call simple is one a single passage answers in
//! form (a definition, a fact, one how-to).

use std::path::Path;

use fathom_research::route_eval::{Confusion, parse_labelled};
use fathom_research::rules::route::by_rules;

#[test]
fn the_rules_agree_with_at_least_95_percent_of_the_labelled_routes() {
    agrees_with_95_percent("questions.json", 80);
}

#[test]
fn the_rules_agree_with_at_least_95_percent_of_each_held_out_set() {
    agrees_with_95_percent("heldout-1.json", 30);
    agrees_with_95_percent("heldout-2.json", 30);
}

fn agrees_with_95_percent(file: &str, at_least: usize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/routing")
        .join(file);
    let set = parse_labelled(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(set.len() >= at_least, "{file} has {} questions", set.len());
    let mut confusion = Confusion::default();
    let mut wrong = Vec::new();
    for q in &set {
        let route = by_rules(&q.question, true);
        confusion.add(q.label, route.mode);
        if route.mode != q.label {
            wrong.push(format!(
                "{} [{}] labelled {}, routed {}: {}",
                q.question,
                q.form,
                q.label.as_str(),
                route.mode.as_str(),
                route.reason
            ));
        }
    }
    assert!(
        confusion.agreement() >= 0.95,
        "{file}: agreement {}/{}\n{}\n{}",
        confusion.agreed,
        confusion.total,
        confusion.table(),
        wrong.join("\n")
    );
}

#[test]
fn a_labelled_set_with_an_unknown_mode_or_field_is_refused() {
    let bad_mode =
        r#"[{"question": "q", "label": "quick", "form": "fact", "corpus": "x", "language": "en"}]"#;
    assert!(
        parse_labelled(bad_mode)
            .unwrap_err()
            .to_string()
            .contains("quick")
    );
    let extra = r#"[{"question": "q", "label": "simple", "form": "fact", "corpus": "x", "language": "en", "note": 1}]"#;
    assert!(
        parse_labelled(extra)
            .unwrap_err()
            .to_string()
            .contains("note")
    );
    assert!(parse_labelled("[]").is_err());
}
