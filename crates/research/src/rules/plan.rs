//! `decompose_query` offline: a deterministic planner. It reads the question's form (what
//! is, how, why, comparison) and its content words, asks for clarification when there is
//! too little to research, and proposes search queries and a report outline. Feedback and
//! answers from a rejected round steer the next plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use fathom_corpus::SearchHit;
use fathom_parse::text::terms;
use fathom_report::lang;

use crate::settings::SourceKind;
use fathom_report::question::{Form, form_of, topic_of};

/// A research plan, as proposed by `decompose_query` and approved (or edited) at the gate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Plan {
    pub question: String,
    /// Asked when the question is too vague to research well; answer them to re-plan.
    #[serde(default)]
    pub clarifying_questions: Vec<String>,
    pub queries: Vec<String>,
    /// Section titles of the report, in order.
    pub outline: Vec<String>,
    /// What a first look at the local corpus found (never the web: it ran before approval);
    /// it informed the queries and outline and is shown with the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub background: Vec<SearchHit>,
    /// For a follow-up question: which queries the parent session's sources answer (not
    /// searched again) and which are searched. Worked out again for an edited plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<crate::follow_up::FollowUp>,
    /// Which sources each query searches, when the run may search more than one kind (a
    /// query not listed searches all the run's sources). Shown and editable at the gate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query_sources: BTreeMap<String, Vec<SourceKind>>,
}

impl Plan {
    /// Checks an edited plan before it is run.
    pub fn validate(&self) -> Result<(), String> {
        if self.queries.iter().all(|q| q.trim().is_empty()) {
            return Err("plan has no search query".into());
        }
        if self.outline.iter().all(|s| s.trim().is_empty()) {
            return Err("plan has no outline section".into());
        }
        if self.queries.len() > 50 || self.outline.len() > 50 {
            return Err("plan has more than 50 queries or sections".into());
        }
        if let Some((q, _)) = self.query_sources.iter().find(|(_, k)| k.is_empty()) {
            return Err(format!("query \"{q}\" searches no source (corpus, web)"));
        }
        Ok(())
    }

    /// The sources query `query` searches: its own, else all of `run` (the run's).
    pub fn sources_of(&self, query: &str, run: &[SourceKind]) -> Vec<SourceKind> {
        match self.query_sources.get(query.trim()) {
            Some(own) => own.clone(),
            None => run.to_vec(),
        }
    }

    /// Gives every query the run's sources, where the run has a choice of more than one, so
    /// the plan shows (and a person can change) what each query searches.
    pub fn with_sources(mut self, run: &[SourceKind]) -> Plan {
        if run.len() > 1 {
            for q in &self.queries {
                self.query_sources
                    .entry(q.clone())
                    .or_insert_with(|| run.to_vec());
            }
        }
        self
    }

    /// A query as a line of the editable plan: `query [corpus, web]` when it names sources.
    pub fn query_line(&self, query: &str) -> String {
        match self.query_sources.get(query) {
            Some(kinds) => format!("{query} {}", sources_tag(kinds)),
            None => query.to_string(),
        }
    }

    /// Reads a query line back: the query, and the sources of a trailing `[...]` if any.
    pub fn parse_query_line(line: &str) -> Result<(String, Option<Vec<SourceKind>>), String> {
        let line = line.trim();
        let Some(open) = line.rfind('[').filter(|_| line.ends_with(']')) else {
            return Ok((line.to_string(), None));
        };
        let inner = &line[open + 1..line.len() - 1];
        let mut kinds = Vec::new();
        for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let kind = SourceKind::parse(part)
                .ok_or_else(|| format!("'{part}' is not a source to search: use corpus or web"))?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok((line[..open].trim().to_string(), Some(kinds)))
    }

    /// The plan as a person reads it: queries, outline, and any clarifying questions.
    pub fn to_text(&self) -> String {
        let mut s = format!("Plan for: {}\n\nSearch queries:\n", self.question);
        for q in &self.queries {
            let shown = self.query_line(q);
            let q = &shown;
            let from_parent = self
                .follow_up
                .as_ref()
                .and_then(|f| f.covered.iter().find(|c| &c.query == q));
            match (&self.follow_up, from_parent) {
                (Some(f), Some(c)) => s.push_str(&format!(
                    "  - {q} (answered by the sources of session {}: {} documents; not searched again)\n",
                    f.parent_id,
                    c.sources.len()
                )),
                (Some(_), None) => s.push_str(&format!("  - {q} (new search)\n")),
                (None, _) => s.push_str(&format!("  - {q}\n")),
            }
        }
        s.push_str("Report outline:\n");
        for (i, o) in self.outline.iter().enumerate() {
            s.push_str(&format!("  {}. {o}\n", i + 1));
        }
        if !self.background.is_empty() {
            s.push_str("What the local sources say:\n");
            for b in &self.background {
                let at = if b.heading.is_empty() || b.heading == b.title {
                    b.title.clone()
                } else {
                    format!("{} > {}", b.title, b.heading)
                };
                s.push_str(&format!("  - {at}: {}\n", b.snippet.trim()));
            }
        }
        if !self.clarifying_questions.is_empty() {
            s.push_str("The question is vague; answering these would help:\n");
            for q in &self.clarifying_questions {
                s.push_str(&format!("  ? {q}\n"));
            }
        }
        s
    }

    /// The plan without blank entries.
    pub fn cleaned(mut self) -> Plan {
        self.queries.retain(|q| !q.trim().is_empty());
        self.outline.retain(|s| !s.trim().is_empty());
        let queries = &self.queries;
        self.query_sources.retain(|q, _| queries.contains(q));
        self
    }
}

/// `[corpus, web]`: the sources a query searches, as the plan shows them.
pub fn sources_tag(kinds: &[SourceKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    format!("[{}]", names.join(", "))
}

const GENERIC: &[&str] = &[
    "anything",
    "everything",
    "info",
    "information",
    "question",
    "something",
    "stuff",
    "thing",
    "things",
    "topic",
];

/// Words of feedback that steer rather than name a subject ("focus on X", "add Y").
const STEER_NOISE: &[&str] = &[
    "add", "cover", "emphasis", "focus", "include", "instead", "less", "mention", "rather",
];

const MAX_QUERIES: usize = 8;

fn push_unique(list: &mut Vec<String>, item: String) {
    let item = item.split_whitespace().collect::<Vec<_>>().join(" ");
    if !item.is_empty() && !list.iter().any(|x| x.eq_ignore_ascii_case(&item)) {
        list.push(item);
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Headings of the local sources at most taken as queries, and as outline sections.
const BACKGROUND_QUERIES: usize = 2;
const BACKGROUND_SECTIONS: usize = 1;

/// A one-step plan for a quick look (the `web` mode): the question itself, answered in one
/// section with its details after; section titles in language `language`.
pub fn one_step(question: &str, language: &str) -> Plan {
    let question = question.split_whitespace().collect::<Vec<_>>().join(" ");
    let w = lang::words(language);
    Plan {
        queries: vec![question.trim_end_matches(['?', '？']).to_string()],
        outline: vec![w.answer.into(), w.details.into()],
        question,
        ..Default::default()
    }
}

/// Headings of the background hits that name something the question is about (a shared
/// content term), cleaned of numbering and question marks, best hit first, without repeats.
fn background_headings(topic: &str, background: &[SearchHit]) -> Vec<String> {
    let topic_terms = terms(topic);
    let mut out: Vec<String> = Vec::new();
    for hit in background {
        let heading = hit
            .heading
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .trim_end_matches(['?', ':', '.'])
            .trim();
        let words = heading.split_whitespace().count();
        if !(2..=8).contains(&words) || heading.eq_ignore_ascii_case(hit.title.trim()) {
            continue;
        }
        if terms(heading).iter().any(|t| topic_terms.contains(t)) {
            push_unique(&mut out, heading.to_string());
        }
    }
    out
}

/// Drafts a plan for `question`, steered by the feedback and answers of earlier rounds and by
/// what a first look at the local sources found (`background`): headings there that name the
/// question's subject become queries, and the best of them a section, so the plan asks the
/// corpus in its own words. The outline's own titles are in language `language`.
pub fn decompose_query(
    question: &str,
    feedback: &[String],
    answers: &[String],
    background: &[SearchHit],
    language: &str,
) -> Plan {
    let w = lang::words(language);
    let question = question.split_whitespace().collect::<Vec<_>>().join(" ");
    let topic = topic_of(&question);
    let form = form_of(&question);
    let steer: Vec<String> = feedback
        .iter()
        .chain(answers)
        .map(|s| {
            topic_of(s)
                .split_whitespace()
                .filter(|w| !STEER_NOISE.contains(w))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty())
        .collect();

    let content: Vec<String> = topic
        .split_whitespace()
        .chain(steer.iter().flat_map(|s| s.split_whitespace()))
        .filter(|w| !GENERIC.contains(w))
        .map(str::to_string)
        .collect();
    let mut clarifying_questions = Vec::new();
    if content.is_empty() {
        clarifying_questions.push("What subject should the research cover?".to_string());
        clarifying_questions
            .push("What do you want to do with the answer (learn, decide, compare)?".to_string());
    } else if content.len() == 1 && question.split_whitespace().count() <= 3 {
        let t = &content[0];
        clarifying_questions.push(format!(
            "Which aspect of {t} matters most: what it is, how it works, examples, or pitfalls?"
        ));
        clarifying_questions.push(format!(
            "Is {t} meant in a particular context (a language, a library, a field)?"
        ));
    }

    let mut outline = Vec::new();
    let mut queries = Vec::new();
    push_unique(
        &mut queries,
        question.trim_end_matches(['?', '？']).to_string(),
    );
    match &form {
        Form::Comparison(a, b) => {
            for s in [
                w.overview_of(a),
                w.overview_of(b),
                w.differences(a, b),
                w.when_to_use_each.to_string(),
            ] {
                push_unique(&mut outline, s);
            }
            push_unique(&mut queries, a.clone());
            push_unique(&mut queries, b.clone());
            push_unique(&mut queries, format!("{a} {b} difference"));
        }
        Form::Definition => {
            for s in [w.definition, w.how_it_works, w.examples, w.pitfalls] {
                push_unique(&mut outline, s.to_string());
            }
            push_unique(&mut queries, topic.clone());
            push_unique(&mut queries, format!("{topic} example"));
        }
        Form::Mechanism => {
            for s in [w.overview, w.how_it_works, w.rules, w.examples, w.pitfalls] {
                push_unique(&mut outline, s.to_string());
            }
            push_unique(&mut queries, topic.clone());
            push_unique(&mut queries, format!("{topic} rules"));
            push_unique(&mut queries, format!("{topic} example"));
        }
        Form::Reasons => {
            for s in [w.background, w.reasons, w.tradeoffs, w.examples] {
                push_unique(&mut outline, s.to_string());
            }
            push_unique(&mut queries, topic.clone());
            push_unique(&mut queries, format!("{topic} reason benefit"));
        }
        Form::General => {
            for s in [w.overview, w.key_concepts, w.examples, w.limitations] {
                push_unique(&mut outline, s.to_string());
            }
            push_unique(&mut queries, topic.clone());
            push_unique(&mut queries, format!("{topic} example"));
        }
    }
    for s in &steer {
        push_unique(&mut outline, capitalized(s));
        push_unique(&mut queries, format!("{topic} {s}"));
    }
    let headings = background_headings(&topic, background);
    for h in headings.iter().take(BACKGROUND_QUERIES) {
        push_unique(&mut queries, h.clone());
    }
    // A heading whose words no section title has yet is a part of the subject the sources
    // treat on its own: it gets a section, before the examples and pitfalls.
    let covered: Vec<String> = outline.iter().flat_map(|o| terms(o)).collect();
    let new_sections: Vec<String> = headings
        .iter()
        .filter(|h| {
            terms(h)
                .iter()
                .filter(|t| !topic.contains(t.as_str()))
                .all(|t| !covered.contains(t))
        })
        .take(BACKGROUND_SECTIONS)
        .map(|h| capitalized(h))
        .collect();
    let at = outline
        .iter()
        .position(|o| o.starts_with(w.examples))
        .unwrap_or(outline.len());
    for (i, s) in new_sections.into_iter().enumerate() {
        if !outline.iter().any(|o| o.eq_ignore_ascii_case(&s)) {
            outline.insert(at + i, s);
        }
    }
    queries.truncate(MAX_QUERIES);
    Plan {
        question,
        clarifying_questions,
        queries,
        outline,
        background: background.to_vec(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_line_says_where_it_searches_and_reads_back() {
        let both = [SourceKind::Corpus, SourceKind::Web];
        let p = decompose_query("How does ownership work in Rust?", &[], &[], &[], "en")
            .with_sources(&both);
        let q = p.queries[0].clone();
        assert_eq!(p.query_line(&q), format!("{q} [corpus, web]"));
        assert!(p.to_text().contains(&format!("  - {q} [corpus, web]")));
        assert_eq!(
            Plan::parse_query_line("ownership rules [ web ]").unwrap(),
            ("ownership rules".to_string(), Some(vec![SourceKind::Web]))
        );
        assert_eq!(
            Plan::parse_query_line("Vec<T> in Rust").unwrap(),
            ("Vec<T> in Rust".to_string(), None)
        );
        let e = Plan::parse_query_line("x [corpus, ftp]").unwrap_err();
        assert!(e.contains("'ftp' is not a source"), "{e}");
        // A query that searches nothing is not a plan to run; one kind alone is not shown.
        let mut none = p.clone();
        none.query_sources.insert(q.clone(), Vec::new());
        assert!(none.validate().unwrap_err().contains("searches no source"));
        let one = decompose_query("How does ownership work in Rust?", &[], &[], &[], "en")
            .with_sources(&[SourceKind::Corpus]);
        assert!(one.query_sources.is_empty());
    }

    #[test]
    fn how_questions_get_a_mechanism_outline_and_focused_queries() {
        let p = decompose_query("How does ownership work in Rust?", &[], &[], &[], "en");
        assert!(p.clarifying_questions.is_empty());
        assert_eq!(p.outline[1], "How it works");
        assert!(
            p.queries.contains(&"ownership rust".to_string()),
            "{:?}",
            p.queries
        );
        assert_eq!(
            p,
            decompose_query("How does  ownership work in Rust?", &[], &[], &[], "en")
        );
    }

    #[test]
    fn comparisons_name_both_subjects() {
        let p = decompose_query("Compare Box and Rc", &[], &[], &[], "en");
        assert_eq!(p.outline[0], "Overview of box");
        assert!(
            p.outline
                .contains(&"Differences between box and rc".to_string())
        );
    }

    #[test]
    fn vague_questions_ask_for_clarification_and_answers_steer() {
        let p = decompose_query("stuff", &[], &[], &[], "en");
        assert_eq!(p.clarifying_questions.len(), 2);
        let p = decompose_query("traits", &[], &[], &[], "en");
        assert_eq!(p.clarifying_questions.len(), 2);
        let p = decompose_query(
            "traits",
            &["focus on generics and trait objects".into()],
            &[],
            &[],
            "en",
        );
        assert!(p.clarifying_questions.is_empty());
        assert!(
            p.outline.contains(&"Generics trait objects".to_string()),
            "{:?}",
            p.outline
        );
    }

    fn hit(title: &str, heading: &str) -> SearchHit {
        SearchHit {
            url: format!("file:///book/{title}.md"),
            title: title.into(),
            heading: heading.into(),
            snippet: "Each value in Rust has an owner.".into(),
            score: 1.0,
        }
    }

    #[test]
    fn the_local_sources_headings_shape_queries_and_a_section() {
        let background = [
            hit("What Is Ownership?", "Ownership Rules"),
            hit("What Is Ownership?", "The Stack and the Heap"),
            hit("References and Borrowing", "Dangling References"),
        ];
        let p = decompose_query(
            "How does ownership work in Rust?",
            &[],
            &[],
            &background,
            "en",
        );
        assert!(
            p.queries.contains(&"Ownership Rules".to_string()),
            "{:?}",
            p.queries
        );
        // Unrelated headings stay out; "Ownership Rules" adds nothing "Rules and
        // constraints" does not already name.
        assert!(
            !p.queries.iter().any(|q| q.contains("Stack")),
            "{:?}",
            p.queries
        );
        assert_eq!(p.outline.len(), 5, "{:?}", p.outline);
        assert_eq!(p.background.len(), 3);
        assert!(p.to_text().contains("What Is Ownership? > Ownership Rules"));
        let p = decompose_query(
            "What is borrowing in Rust?",
            &[],
            &[],
            &[hit(
                "References and Borrowing",
                "Mutable borrowing of references",
            )],
            "en",
        );
        assert!(
            p.outline
                .contains(&"Mutable borrowing of references".to_string()),
            "{:?}",
            p.outline
        );
    }
}
