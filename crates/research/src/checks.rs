//! What is refused before anything is stored: a start's question and settings, the sources
//! and deliveries it asks of this server, the session it follows up, a decision at the gate.

use serde_json::Value;

use crate::delivery::Delivery;
use crate::error::ResearchError;
use crate::events::{ApproveEvent, ResearchStart};
use crate::sessions::Sessions;
use crate::settings::{ResearchConfig, SettingsError, SourceKind};

/// Questions longer than this are not questions but documents.
pub const MAX_QUESTION_CHARS: usize = 4000;
const MAX_FEEDBACK_CHARS: usize = 4000;

/// The start event for `query` and `settings`, if both are acceptable.
pub fn check_start(
    config: &ResearchConfig,
    query: &str,
    settings: Option<Value>,
) -> Result<ResearchStart, ResearchError> {
    let q = query.split_whitespace().collect::<Vec<_>>().join(" ");
    if q.is_empty() {
        return Err(ResearchError::EmptyQuestion);
    }
    let n = q.chars().count();
    if n > MAX_QUESTION_CHARS {
        return Err(ResearchError::QuestionTooLong {
            length: n,
            limit: MAX_QUESTION_CHARS,
        });
    }
    let checked = config.settings(settings.as_ref())?;
    // The targets' form: a webhook that is not an http(s) URL or an address that is not one
    // is refused before anything is stored (whether they answer is the delivery's business).
    let mut problems = Vec::new();
    if let Some(url) = checked.webhook()
        && let Err(e) = fathom_deliver::Webhook::check_url(url)
    {
        problems.push(format!("deliver_webhook: {e}"));
    }
    for address in checked.email_to() {
        if let Err(e) = fathom_deliver::email::check_address(&address) {
            problems.push(format!("deliver_email: {e}"));
        }
    }
    let language = checked.language.as_str();
    if !language.is_empty() && fathom_report::lang::name(language).is_none() {
        problems.push(format!(
            "language: '{language}' is not a language Fathom knows; give an ISO 639-1 code: {}",
            fathom_report::lang::codes().collect::<Vec<_>>().join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(SettingsError(problems).into());
    }
    Ok(ResearchStart {
        query: q,
        settings,
        follow_up_of: None,
    })
}

/// Checks that this server can search where a start asks it to: a web search of a server with
/// no provider would find nothing and say so only at the end.
pub fn check_sources(
    config: &ResearchConfig,
    available: &[SourceKind],
    start: &ResearchStart,
) -> Result<(), ResearchError> {
    let asked = config.settings(start.settings.as_ref())?.sources;
    match asked.iter().find(|k| !available.contains(k)) {
        Some(k) => {
            let why = match k {
                SourceKind::Web => "no web search provider is configured (search.provider)",
                SourceKind::Corpus => "it has no local corpus",
            };
            Err(SettingsError(vec![format!(
                "sources: this server cannot search {}: {why}",
                k.as_str()
            )])
            .into())
        }
        None => Ok(()),
    }
}

/// Checks that this server can make the deliveries a start asks for (a secret, a relay) and
/// that the session it follows up is named well.
pub fn check_delivery(
    config: &ResearchConfig,
    delivery: &Delivery,
    start: &ResearchStart,
) -> Result<(), ResearchError> {
    let settings = config.settings(start.settings.as_ref())?;
    delivery.check(&settings).map_err(ResearchError::Delivery)?;
    if let Some(id) = &start.follow_up_of
        && (id.is_empty()
            || id.len() > 128
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        return Err(ResearchError::UnknownParent(id.clone()));
    }
    Ok(())
}

/// The saved record of session `id` if it can be followed up: it exists and has completed.
pub async fn check_parent(sessions: &Sessions, id: &str) -> Result<Value, ResearchError> {
    let record = sessions
        .find(id)
        .await?
        .ok_or_else(|| ResearchError::UnknownParent(id.to_string()))?;
    match record["status"].as_str() {
        Some("completed") => Ok(record),
        other => Err(ResearchError::ParentNotFinished {
            id: id.to_string(),
            status: other.unwrap_or("unknown").to_string(),
        }),
    }
}

/// What is wrong with a decision, if anything: an edited plan must be runnable, and texts
/// bounded.
pub fn check_decision(d: &ApproveEvent) -> Result<(), String> {
    if let Some(plan) = &d.plan {
        if !d.approved {
            return Err("a plan can only be given with approved: true".into());
        }
        plan.clone().cleaned().validate()?;
    }
    let answers = d.answers.iter().flatten();
    for text in d.feedback.iter().chain(answers) {
        if text.chars().count() > MAX_FEEDBACK_CHARS {
            return Err(format!(
                "feedback and answers are limited to {MAX_FEEDBACK_CHARS} characters"
            ));
        }
    }
    Ok(())
}
