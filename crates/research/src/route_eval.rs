//! Routing measured: a labelled set of questions (`tests/routing/questions.json`), each with
//! the mode a person would send it to and the kind of answer it asks for, and the agreement of
//! a router (the rules, or the model) with those labels as a confusion matrix.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::settings::Mode;

/// One labelled question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelledQuestion {
    pub question: String,
    /// The mode a person would send it to, a web search configured.
    pub label: Mode,
    /// The kind of answer asked for, as written in the set (`definition`, `how-to`, ...).
    pub form: String,
    /// The corpus it is asked over (`rust-book`, `cargo`, `general`, ...).
    pub corpus: String,
    /// Its language, ISO 639-1.
    pub language: String,
}

/// Why a labelled set was refused.
#[derive(Debug, thiserror::Error)]
pub enum LabelledError {
    #[error("not a labelled set: {0}")]
    Json(#[from] serde_json::Error),
    #[error("has no question")]
    Empty,
    #[error("has more than {MAX_LABELLED} questions")]
    TooMany,
}

/// Questions at most in a labelled set.
pub const MAX_LABELLED: usize = 5000;

/// Reads a labelled set: a JSON array of `{"question", "label", "form", "corpus",
/// "language"}`.
pub fn parse_labelled(text: &str) -> Result<Vec<LabelledQuestion>, LabelledError> {
    let set: Vec<LabelledQuestion> = serde_json::from_str(text)?;
    if set.is_empty() {
        return Err(LabelledError::Empty);
    }
    if set.len() > MAX_LABELLED {
        return Err(LabelledError::TooMany);
    }
    Ok(set)
}

const MODES: [Mode; 3] = [Mode::Simple, Mode::Web, Mode::Deep];

/// Counts of (label, routed) pairs.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Confusion {
    /// label → routed → count.
    pub counts: BTreeMap<String, BTreeMap<String, usize>>,
    pub total: usize,
    pub agreed: usize,
}

impl Confusion {
    pub fn add(&mut self, label: Mode, routed: Mode) {
        *self
            .counts
            .entry(label.as_str().into())
            .or_default()
            .entry(routed.as_str().into())
            .or_default() += 1;
        self.total += 1;
        self.agreed += usize::from(label == routed);
    }

    pub fn agreement(&self) -> f64 {
        self.agreed as f64 / self.total.max(1) as f64
    }

    /// The matrix as text: a row per label, a column per mode routed to.
    pub fn table(&self) -> String {
        let mut out = format!("{:>14}", "label \\ routed");
        for m in MODES {
            out.push_str(&format!("{:>8}", m.as_str()));
        }
        out.push('\n');
        for label in MODES {
            out.push_str(&format!("{:>14}", label.as_str()));
            let row = self.counts.get(label.as_str());
            for routed in MODES {
                let n = row.and_then(|r| r.get(routed.as_str())).copied();
                out.push_str(&format!("{:>8}", n.unwrap_or(0)));
            }
            out.push('\n');
        }
        out
    }
}

/// Agreement per value of one field (form, corpus, language): `(agreed, total)`.
pub fn agreement_by<'a>(
    rows: impl IntoIterator<Item = (&'a str, bool)>,
) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (key, agreed) in rows {
        let e = out.entry(key.to_string()).or_default();
        e.0 += usize::from(agreed);
        e.1 += 1;
    }
    out
}
