//! Key facts: does a report state what the answer to its question must contain, and does it
//! cite the page that says so? Measured against a hand-written set (`questions.json`): each
//! question lists the pages that answer it and its key facts, each fact as alternative short
//! phrases.
//!
//! - A phrase matches a sentence when every content word of the phrase is a word of that one
//!   sentence, in any order. Both are lowercased and every character that is not a letter
//!   or a digit becomes a space (`__init__.py` reads `init py`, `O(1)` reads `o 1`). Content
//!   words are the phrase's words minus [`STOP_WORDS`]. A phrase word ending in `*` matches
//!   any word it begins (`tuple*`: tuple, tuples). No other stemming.
//! - A fact is stated when one of its phrases matches one sentence of the report's sections
//!   (not the title, not the source list, not the writer's fixed notes; sentences as
//!   [`super::check_citations`] splits them, markers `[n]` left out of the words).
//! - Key-fact recall: facts stated over facts expected.
//! - Right page: at least one sentence stating a key fact cites (a marker `[n]`) a source
//!   whose URL, without its `#` fragment, ends with `/` and one of the expected pages.

use serde::Serialize;
use serde_json::Value;

use super::{is_writer_note, paragraph_sentences};
use crate::report::{Report, citations};

/// Words a phrase may carry for readability that need not appear in the sentence: articles,
/// forms of "be", "do" and "have", common prepositions, conjunctions, pronouns and modal
/// verbs. Negations ("not", "no") and "only" are content words.
pub const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "of", "to", "is", "are", "was", "were", "be", "been", "being", "and", "or",
    "in", "on", "at", "for", "by", "with", "as", "it", "its", "that", "this", "these", "those",
    "from", "into", "than", "then", "so", "do", "does", "did", "have", "has", "had", "can",
    "could", "would", "should", "will", "shall", "may", "might", "which", "who", "whom", "what",
    "when", "where", "how", "why", "there", "their", "they", "them", "you", "your", "we", "our",
    "i", "me", "my", "he", "she", "his", "her", "if", "but", "also", "such",
];

/// Bounds on a questions file.
pub const MAX_QUESTIONS: usize = 1000;
pub const MAX_PAGES: usize = 20;
pub const MAX_FACTS: usize = 20;
pub const MAX_ALTERNATIVES: usize = 20;
pub const MAX_PHRASE_CHARS: usize = 200;

/// One question of a key-fact set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyFactQuestion {
    pub question: String,
    /// The pages that answer it, as paths relative to the corpus folder
    /// (`tutorial/controlflow.html`).
    pub pages: Vec<String>,
    /// The facts the answer must state, each as alternative phrases.
    pub facts: Vec<Vec<String>>,
}

/// Why a questions file was refused. Entries are numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFactsError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("expected a JSON array of questions")]
    NotAnArray,
    #[error("has no question")]
    Empty,
    #[error("has more than {MAX_QUESTIONS} questions")]
    TooMany,
    #[error("entry {entry}: {problem}")]
    Entry { entry: usize, problem: String },
}

/// Reads a key-fact set: a JSON array of `{"question", "pages", "facts"}` objects. Every
/// field is required and no other is allowed; each page a relative path, each fact a
/// non-empty list of phrases that each have a content word.
pub fn parse_key_facts(text: &str) -> Result<Vec<KeyFactQuestion>, KeyFactsError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| KeyFactsError::Json(e.to_string()))?;
    let entries = value.as_array().ok_or(KeyFactsError::NotAnArray)?;
    if entries.is_empty() {
        return Err(KeyFactsError::Empty);
    }
    if entries.len() > MAX_QUESTIONS {
        return Err(KeyFactsError::TooMany);
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            parse_entry(e).map_err(|problem| KeyFactsError::Entry {
                entry: i + 1,
                problem,
            })
        })
        .collect()
}

fn parse_entry(e: &Value) -> Result<KeyFactQuestion, String> {
    let obj = e.as_object().ok_or("expected an object")?;
    if let Some(k) = obj
        .keys()
        .find(|k| !["question", "pages", "facts"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown field \"{k}\" (the fields are question, pages, facts)"
        ));
    }
    let question = match obj.get("question") {
        None => return Err("field \"question\" is missing".into()),
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(_) => return Err("field \"question\" must be a non-empty string".into()),
    };
    let with_question = |p: String| format!("{p} (question \"{question}\")");
    let pages = string_list(obj.get("pages"), "pages", MAX_PAGES).map_err(with_question)?;
    for p in &pages {
        if p.starts_with('/')
            || p.contains('\\')
            || p.contains('#')
            || p.split('/').any(|s| s == "..")
        {
            return Err(with_question(format!(
                "field \"pages\": \"{p}\" must be a path relative to the corpus folder, \
                 without \"..\", \"\\\" or \"#\""
            )));
        }
    }
    let facts = match obj.get("facts") {
        None => return Err(with_question("field \"facts\" is missing".into())),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_FACTS => a,
        Some(_) => {
            return Err(with_question(format!(
                "field \"facts\" must be an array of 1 to {MAX_FACTS} facts"
            )));
        }
    };
    let mut out = Vec::with_capacity(facts.len());
    for (i, f) in facts.iter().enumerate() {
        let field = format!("facts[{i}]");
        let alts = string_list(Some(f), &field, MAX_ALTERNATIVES).map_err(with_question)?;
        for a in &alts {
            if a.chars().count() > MAX_PHRASE_CHARS {
                return Err(with_question(format!(
                    "field \"{field}\": a phrase is longer than {MAX_PHRASE_CHARS} characters"
                )));
            }
            if phrase_words(a).is_empty() {
                return Err(with_question(format!(
                    "field \"{field}\": \"{a}\" has no content word"
                )));
            }
        }
        out.push(alts);
    }
    Ok(KeyFactQuestion {
        question,
        pages,
        facts: out,
    })
}

/// A non-empty array of 1 to `max` non-empty strings, trimmed.
fn string_list(v: Option<&Value>, field: &str, max: usize) -> Result<Vec<String>, String> {
    let bad = || format!("field \"{field}\" must be an array of 1 to {max} non-empty strings");
    let items = match v {
        None => return Err(format!("field \"{field}\" is missing")),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= max => a,
        Some(_) => return Err(bad()),
    };
    items
        .iter()
        .map(|s| match s.as_str().map(str::trim) {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(bad()),
        })
        .collect()
}

/// What a report states of a question's key facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FactCheck {
    /// Per expected fact, in order: the first sentence of the report that states it.
    pub found: Vec<Option<String>>,
    /// Whether a sentence stating a key fact cites one of the expected pages.
    pub right_page: bool,
}

impl FactCheck {
    pub fn expected(&self) -> usize {
        self.found.len()
    }
    pub fn stated(&self) -> usize {
        self.found.iter().filter(|f| f.is_some()).count()
    }
    /// Key-fact recall: facts stated over facts expected.
    pub fn recall(&self) -> f64 {
        super::ratio(self.stated(), self.expected())
    }
    /// The indices of the facts the report does not state.
    pub fn missed(&self) -> Vec<usize> {
        (0..self.found.len())
            .filter(|&i| self.found[i].is_none())
            .collect()
    }
}

/// Key-fact figures summed over questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FactTotals {
    pub questions: usize,
    pub expected: usize,
    pub stated: usize,
    /// Questions whose report cites an expected page in a sentence stating a key fact.
    pub right_page: usize,
}

impl FactTotals {
    pub fn add(&mut self, c: &FactCheck) {
        self.questions += 1;
        self.expected += c.expected();
        self.stated += c.stated();
        self.right_page += usize::from(c.right_page);
    }
    pub fn recall(&self) -> f64 {
        super::ratio(self.stated, self.expected)
    }
}

/// Which of `expected`'s key facts `report` states, and whether it cites a right page for one.
pub fn check_key_facts(report: &Report, expected: &KeyFactQuestion) -> FactCheck {
    let facts: Vec<Vec<Vec<String>>> = expected
        .facts
        .iter()
        .map(|alts| alts.iter().map(|a| phrase_words(a)).collect())
        .collect();
    let mut out = FactCheck {
        found: vec![None; facts.len()],
        right_page: false,
    };
    for paragraph in report.sections.iter().flat_map(|s| &s.paragraphs) {
        if is_writer_note(paragraph) {
            continue;
        }
        for sentence in paragraph_sentences(paragraph) {
            let words = sentence_words(&sentence);
            let mut states_a_fact = false;
            for (fact, alts) in facts.iter().enumerate() {
                if alts.iter().any(|alt| phrase_matches(alt, &words)) {
                    states_a_fact = true;
                    out.found[fact].get_or_insert_with(|| sentence.clone());
                }
            }
            if states_a_fact && !out.right_page {
                out.right_page = citations(&sentence).into_iter().any(|n| {
                    n.checked_sub(1)
                        .and_then(|i| report.sources.get(i))
                        .is_some_and(|s| expected.pages.iter().any(|p| is_page(&s.url, p)))
                });
            }
        }
    }
    out
}

/// Whether `url` (a fragment such as `#page=2` left out) names the corpus page `page`.
pub fn is_page(url: &str, page: &str) -> bool {
    let url = url.split('#').next().unwrap_or(url);
    let page = page.trim_start_matches("./");
    url == page
        || url
            .strip_suffix(page)
            .is_some_and(|rest| rest.ends_with('/'))
}

/// Lowercase words of `text`: every character not a letter or digit splits.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// A phrase's content words; a trailing `*` (a prefix) is kept.
fn phrase_words(phrase: &str) -> Vec<String> {
    phrase
        .split_whitespace()
        .flat_map(|token| {
            // "tuple*" stays a prefix; "list.sort*" reads "list", "sort*".
            let prefix = token.ends_with('*');
            let mut ws: Vec<String> = words(token).collect();
            if prefix && let Some(last) = ws.last_mut() {
                last.push('*');
            }
            ws
        })
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// A sentence's words, its citation markers left out.
fn sentence_words(sentence: &str) -> Vec<String> {
    let mut text = String::with_capacity(sentence.len());
    let mut rest = sentence;
    while let Some(start) = rest.find('[') {
        let after = &rest[start + 1..];
        match after.find(']') {
            Some(end) if end > 0 && after[..end].chars().all(|c| c.is_ascii_digit()) => {
                text.push_str(&rest[..start]);
                text.push(' ');
                rest = &after[end + 1..];
            }
            _ => {
                text.push_str(&rest[..start + 1]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    words(&text).collect()
}

fn phrase_matches(phrase: &[String], words: &[String]) -> bool {
    !phrase.is_empty()
        && phrase.iter().all(|p| match p.strip_suffix('*') {
            Some(prefix) => words.iter().any(|w| w.starts_with(prefix)),
            None => words.contains(p),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_lose_stop_words_and_keep_prefixes() {
        assert_eq!(
            phrase_words("The tuples are immutable"),
            ["tuples", "immutable"]
        );
        assert_eq!(
            phrase_words("tuple* not mutable"),
            ["tuple*", "not", "mutable"]
        );
        assert_eq!(phrase_words("__init__.py files"), ["init", "py", "files"]);
        assert_eq!(phrase_words("the of a"), Vec::<String>::new());
    }

    #[test]
    fn markers_are_not_words() {
        assert_eq!(
            sentence_words("Use O(1) [not] pops. [12] [3]"),
            ["use", "o", "1", "not", "pops"]
        );
    }

    #[test]
    fn pages_match_on_whole_path_segments() {
        assert!(is_page(
            "file:///c/tutorial/venv.html",
            "tutorial/venv.html"
        ));
        assert!(is_page(
            "file:///c/tutorial/venv.html#page=2",
            "tutorial/venv.html"
        ));
        assert!(!is_page(
            "file:///c/library/venv.html",
            "tutorial/venv.html"
        ));
        assert!(!is_page(
            "file:///c/mytutorial/venv.html",
            "tutorial/venv.html"
        ));
        assert!(is_page("file:///c/glossary.html", "glossary.html"));
    }
}
