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

pub fn form_of(question: &str) -> Form {
    let q = question.trim().trim_end_matches('?').to_lowercase();
    for sep in [" vs. ", " vs ", " versus "] {
        if let Some((a, b)) = q.split_once(sep) {
            let a = a.trim_start_matches("compare ").trim();
            return comparison(a, b);
        }
    }
    if let Some(rest) = q
        .strip_prefix("compare ")
        .or_else(|| q.split_once("difference between ").map(|(_, r)| r))
        .or_else(|| q.split_once("differences between ").map(|(_, r)| r))
        && let Some((a, b)) = rest
            .split_once(" and ")
            .or_else(|| rest.split_once(" with "))
    {
        return comparison(a, b);
    }
    let first = q.split_whitespace().next().unwrap_or("");
    match first {
        "how" => Form::Mechanism,
        "why" => Form::Reasons,
        "what" | "define" | "who"
            if q.contains(" is ") || q.contains(" are ") || first == "define" =>
        {
            Form::Definition
        }
        _ => Form::General,
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
