//! The coordinator's choice offline: how a question is answered, read from its form. A short
//! factual question gets a direct answer; one about what is new gets a quick web look; one that
//! asks for explanation, comparison or breadth gets the full research flow.

use serde::{Deserialize, Serialize};

use crate::settings::Mode;

/// Who chose a run's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutedBy {
    /// The `mode` setting named it.
    Setting,
    /// The question's form, by the rules below.
    Rules,
    /// The coordinator model.
    Model,
}

/// How a run answers its question, and why; on the stream and in the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub mode: Mode,
    pub reason: String,
    pub by: RoutedBy,
}

/// Words asking for what is new: only the web can know.
/// ("current" and "now" are left out: "the current working directory" is no news.)
const RECENT: &[&str] = &[
    "latest",
    "newest",
    "today",
    "yesterday",
    "recent",
    "recently",
    "news",
    "upcoming",
    "announced",
];

/// Phrases asking for explanation, comparison or breadth: a report's work.
const DEEP: &[&str] = &[
    "compare",
    "comparison",
    " vs ",
    " vs. ",
    "versus",
    "difference between",
    "differences between",
    "pros and cons",
    "trade-off",
    "tradeoff",
    "advantages",
    "disadvantages",
    "overview",
    "in depth",
    "research",
    "report on",
    "history of",
    "impact of",
    "state of the art",
    "explain",
    "survey",
];

/// Openings of a question that wants one fact or one how-to.
const FACTUAL: &[&str] = &[
    "what is",
    "what's",
    "what are",
    "what does",
    "what do",
    "which",
    "who",
    "when",
    "where",
    "how many",
    "how much",
    "how do i",
    "how can i",
    "how to",
    "is there",
    "is it",
    "can i",
    "can you",
    "does",
    "do i",
    "should i",
    "define",
];

/// Words at most for a question answered in a few sentences.
const SHORT: usize = 14;
/// Words from which a question is a research brief, whatever its form.
const LONG: usize = 24;

/// The mode for `question` by its form, and why. `web`: whether a web search is configured
/// (without one, a question about what is new is researched in the local sources).
pub fn by_rules(question: &str, web: bool) -> (Mode, String) {
    let q = format!(
        " {} ",
        question
            .to_lowercase()
            .replace(
                |c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'),
                " "
            )
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    let words = q.split_whitespace().count();
    let questions = question.matches('?').count();
    if let Some(w) = RECENT.iter().find(|w| q.contains(&format!(" {w} "))) {
        return if web {
            (
                Mode::Web,
                format!("it asks about what is new (\"{w}\"): a quick look on the web"),
            )
        } else {
            (
                Mode::Deep,
                format!(
                    "it asks about what is new (\"{w}\"), and with no web search configured it is researched in the local sources"
                ),
            )
        };
    }
    if let Some(p) = DEEP.iter().find(|p| q.contains(&format!(" {} ", p.trim()))) {
        return (
            Mode::Deep,
            format!(
                "it asks for {} (\"{}\"): a planned, sectioned report",
                if ["vs", "vs.", "versus"].contains(&p.trim())
                    || p.contains("compar")
                    || p.contains("differen")
                {
                    "a comparison"
                } else {
                    "explanation or breadth"
                },
                p.trim()
            ),
        );
    }
    if words >= LONG || questions > 1 {
        return (
            Mode::Deep,
            "it is a research brief (several questions or a long one): a planned, sectioned report"
                .into(),
        );
    }
    let trimmed = q.trim_start();
    let works = q.contains(" work ") || q.contains(" works ");
    if trimmed.starts_with("why ") || (trimmed.starts_with("how ") && works) {
        return (
            Mode::Deep,
            "it asks how or why something works: a planned, sectioned report".into(),
        );
    }
    if words <= SHORT
        && let Some(f) = FACTUAL
            .iter()
            .find(|f| trimmed.starts_with(&format!("{f} ")))
    {
        return (
            Mode::Simple,
            format!(
                "a short factual question (\"{f} ...\"): answered directly from the best passages"
            ),
        );
    }
    (
        Mode::Deep,
        "an open question: a planned, sectioned report".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_goes_where_a_person_would_send_it() {
        let cases = [
            ("What does str.split return?", Mode::Simple),
            ("How do I read a file line by line?", Mode::Simple),
            ("What is the default encoding of open()?", Mode::Simple),
            ("How does ownership work in Rust?", Mode::Deep),
            ("Why do honeybees swarm?", Mode::Deep),
            ("Compare lists and tuples", Mode::Deep),
            (
                "What is the difference between a list and a tuple?",
                Mode::Deep,
            ),
            ("What is the latest release of Python?", Mode::Web),
            ("How do I get the current working directory?", Mode::Simple),
            ("How many workers does the pool use?", Mode::Simple),
            ("Which changes were announced recently.", Mode::Web),
            ("Tokio vs async-std for a web server", Mode::Deep),
            ("honeybee winter survival", Mode::Deep),
            (
                "What is a closure? When does it capture by reference? How is it stored?",
                Mode::Deep,
            ),
        ];
        for (q, want) in cases {
            let (got, why) = by_rules(q, true);
            assert_eq!(got, want, "{q}: {why}");
            assert!(!why.is_empty());
        }
        let (mode, why) = by_rules("What is the latest release of Python?", false);
        assert_eq!(mode, Mode::Deep, "no web search: {why}");
        assert!(why.contains("no web search"), "{why}");
        assert!(by_rules("Rust versus Go", true).1.contains("a comparison"));
    }
}
