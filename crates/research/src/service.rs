//! The research service: what the CLI and the HTTP server do with research runs (start,
//! decide at the gate, read sessions), with input checked before anything is stored.

use std::sync::Arc;

use fathom_data::DataError;
use fathom_engine::store::{DeliverOutcome, RunRecord, RunStore, StoreError};
use fathom_engine::{Engine, EngineConfig, EngineError, StartOptions};
use serde_json::Value;

use crate::delivery::Delivery;
use crate::events::{ApproveEvent, ResearchStart};
use crate::sessions::Sessions;
use crate::settings::{ResearchConfig, SettingsError, SourceKind};
use crate::workflow::{DEEP_RESEARCH, ResearchDeps, deep_research, research_metadata};

/// Questions longer than this are not questions but documents.
pub const MAX_QUESTION_CHARS: usize = 4000;
const MAX_FEEDBACK_CHARS: usize = 4000;

#[derive(Debug, thiserror::Error)]
pub enum ResearchError {
    #[error("the question is empty")]
    EmptyQuestion,
    #[error("the question is {0} characters long; the limit is {MAX_QUESTION_CHARS}")]
    QuestionTooLong(usize),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("no research session '{0}'")]
    UnknownSession(String),
    #[error("no research session '{0}' to follow up")]
    UnknownParent(String),
    #[error(
        "research session '{id}' is not finished (status: {status}); a follow-up can be asked once it has completed"
    )]
    ParentNotFinished { id: String, status: String },
    /// The run asks for a delivery this server is not set up for.
    #[error("{0}")]
    Delivery(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Data(#[from] DataError),
}

/// Research runs on an engine with both research workflows registered.
pub struct Research {
    pub engine: Arc<Engine>,
    pub deps: Arc<ResearchDeps>,
}

impl Research {
    pub fn new(store: Arc<dyn RunStore>, config: EngineConfig, deps: ResearchDeps) -> Research {
        let deps = Arc::new(deps);
        let engine = Engine::new(store, config)
            .register(deep_research(deps.clone()))
            .register(research_metadata(deps.config.clone()));
        Research {
            engine: Arc::new(engine),
            deps,
        }
    }

    /// Checks a question and settings and starts a run; nothing is stored if they are bad.
    pub async fn start(
        &self,
        query: &str,
        settings: Option<Value>,
    ) -> Result<RunRecord, ResearchError> {
        self.start_follow_up(query, settings, None).await
    }

    /// [`Research::start`] for a question that follows up session `follow_up_of`, when given:
    /// the session must exist and have completed.
    pub async fn start_follow_up(
        &self,
        query: &str,
        settings: Option<Value>,
        follow_up_of: Option<String>,
    ) -> Result<RunRecord, ResearchError> {
        let mut start = self.check_start(query, settings)?;
        if let Some(parent) = follow_up_of {
            self.check_follow_up(&parent).await?;
            start.follow_up_of = Some(parent);
        }
        let payload =
            serde_json::to_value(&start).map_err(|e| StoreError::Invalid(e.to_string()))?;
        Ok(self
            .engine
            .start(DEEP_RESEARCH, payload, StartOptions::default())
            .await?)
    }

    pub fn check_start(
        &self,
        query: &str,
        settings: Option<Value>,
    ) -> Result<ResearchStart, ResearchError> {
        let start = check_start(&self.deps.config, query, settings)?;
        check_delivery(&self.deps.config, &self.deps.delivery, &start)?;
        check_sources(&self.deps.config, &self.deps.tools.available(), &start)?;
        Ok(start)
    }

    /// Checks that session `id` can be followed up: it exists and has completed.
    pub async fn check_follow_up(&self, id: &str) -> Result<(), ResearchError> {
        check_parent(&self.sessions(), id).await.map(|_| ())
    }

    /// Delivers a decision to the gate of run `id`; the workflow checks it first (an edited
    /// plan must be runnable). An early decision is kept until the run reaches the gate; the
    /// same `idempotency_key` applies once.
    pub async fn decide(
        &self,
        id: &str,
        decision: ApproveEvent,
        idempotency_key: Option<String>,
    ) -> Result<DeliverOutcome, ResearchError> {
        let payload =
            serde_json::to_value(&decision).map_err(|e| StoreError::Invalid(e.to_string()))?;
        Ok(self
            .engine
            .send(id, "ApproveEvent", payload, idempotency_key)
            .await?)
    }

    pub fn sessions(&self) -> Sessions {
        Sessions::new(self.deps.sessions.clone(), &self.deps.config)
    }
}

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
        return Err(ResearchError::QuestionTooLong(n));
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
