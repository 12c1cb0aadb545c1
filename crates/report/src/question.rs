//! What a question asks for, read from its form: a definition ("what is"), a mechanism
//! ("how"), reasons ("why"), a comparison of two subjects, or something general. The offline
//! planner draws its outline from it and the extractive writer its idea of an answer.

use fathom_parse::text::{is_stopword, words};

/// The question's form, which decides the outline.
#[derive(Debug, PartialEq)]
pub enum Form {
    Definition,
    Mechanism,
    Reasons,
    Comparison(String, String),
    General,
}

/// Words that open a comparison's two subjects ("difference between A and B"), and the word
/// that joins them, in the languages the offline writer knows.
const COMPARISON_OPENERS: &[(&str, &[&str])] = &[
    ("differences between ", &[" and ", " with "]),
    ("difference between ", &[" and ", " with "]),
    ("unterschiede zwischen ", &[" und "]),
    ("unterschied zwischen ", &[" und "]),
    ("différences entre ", &[" et "]),
    ("différence entre ", &[" et "]),
    ("diferencias entre ", &[" y "]),
    ("diferencia entre ", &[" y "]),
];

/// Openings that ask how, why, or what something is, in English, German, French, Spanish and
/// Chinese (which has no spaces, so its markers are looked for anywhere).
const MECHANISM: &[&str] = &["how", "wie", "comment", "cómo", "como"];
const REASONS: &[&str] = &["why", "warum", "wieso", "weshalb", "pourquoi", "porqué"];
const DEFINITION_PHRASES: &[&str] = &[
    "what is ",
    "what are ",
    "define ",
    "who is ",
    "was ist ",
    "was sind ",
    "wer ist ",
    "qu'est-ce ",
    "qu’est-ce ",
    "que signifie ",
    "qué es ",
    "que es ",
    "qué son ",
];

pub fn form_of(question: &str) -> Form {
    let q = question
        .trim()
        .trim_start_matches(['¿', '¡'])
        .trim_end_matches(['?', '？'])
        .trim()
        .to_lowercase();
    for sep in [" vs. ", " vs ", " versus "] {
        if let Some((a, b)) = q.split_once(sep) {
            let a = a.trim_start_matches("compare ").trim();
            return comparison(a, b);
        }
    }
    let opened = COMPARISON_OPENERS.iter().find_map(|(opener, joins)| {
        let rest = q.split_once(opener)?.1;
        joins.iter().find_map(|j| rest.split_once(j))
    });
    let compared = q.strip_prefix("compare ").and_then(|rest| {
        rest.split_once(" and ")
            .or_else(|| rest.split_once(" with "))
    });
    if let Some((a, b)) = opened.or(compared) {
        return comparison(a, b);
    }
    let first = q.split_whitespace().next().unwrap_or("");
    let opens = |phrases: &[&str]| phrases.iter().any(|p| q.starts_with(p));
    if q.starts_with("por qué") || REASONS.contains(&first) || q.contains("为什么") {
        Form::Reasons
    } else if MECHANISM.contains(&first) || ["如何", "怎么", "怎样"].iter().any(|m| q.contains(m))
    {
        Form::Mechanism
    } else if (first == "what" && (q.contains(" is ") || q.contains(" are ")))
        || opens(DEFINITION_PHRASES)
        || q.starts_with("什么是")
        || q.contains("是什么")
    {
        Form::Definition
    } else {
        Form::General
    }
}

/// A comparison of `a` and `b`, each without the setting the question is in, unless that
/// setting is what tells them apart ("error handling in Go vs error handling in Rust").
fn comparison(a: &str, b: &str) -> Form {
    let (sa, sb) = (side_of(a), side_of(b));
    if sa.is_empty() || sb.is_empty() || sa == sb {
        Form::Comparison(topic_of(a), topic_of(b.trim()))
    } else {
        Form::Comparison(sa, sb)
    }
}

/// A comparison's side without the setting the whole question is in ("a tuple in Python").
fn side_of(text: &str) -> String {
    let text = text.trim();
    let text = match text.rsplit_once(" in ") {
        Some((side, setting)) if setting.split_whitespace().count() <= 2 => side,
        _ => text,
    };
    topic_of(text)
}

/// Content words of a phrase, in their original order.
pub fn topic_of(text: &str) -> String {
    let mut seen = Vec::new();
    for w in words(text) {
        if w.chars().count() > 1 && !is_stopword(&w) && !seen.contains(&w) {
            seen.push(w);
        }
    }
    seen.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_read_in_five_languages() {
        for (q, form) in [
            ("How does ownership work in Rust?", Form::Mechanism),
            ("Wie funktioniert Ownership in Rust?", Form::Mechanism),
            ("Comment fonctionne l'emprunt en Rust ?", Form::Mechanism),
            ("¿Cómo funciona el préstamo en Rust?", Form::Mechanism),
            ("Rust 的所有权是如何工作的？", Form::Mechanism),
            ("Why does Rust have lifetimes?", Form::Reasons),
            ("Warum hat Rust Lebensdauern?", Form::Reasons),
            ("Pourquoi Rust a-t-il des durées de vie ?", Form::Reasons),
            ("¿Por qué Rust tiene tiempos de vida?", Form::Reasons),
            ("为什么 Rust 需要生命周期？", Form::Reasons),
            ("What is a trait?", Form::Definition),
            ("Was ist ein Trait?", Form::Definition),
            ("Qu'est-ce qu'un trait ?", Form::Definition),
            ("¿Qué es un trait?", Form::Definition),
            ("什么是 trait？", Form::Definition),
            ("Rust traits", Form::General),
        ] {
            assert_eq!(form_of(q), form, "{q}");
        }
        for q in [
            "Box vs Rc",
            "What is the difference between Box and Rc?",
            "Was ist der Unterschied zwischen Box und Rc?",
            "Quelle est la différence entre Box et Rc ?",
            "¿Cuál es la diferencia entre Box y Rc?",
        ] {
            assert_eq!(
                form_of(q),
                Form::Comparison("box".into(), "rc".into()),
                "{q}"
            );
        }
    }
}
