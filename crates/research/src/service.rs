//! The research service: what the CLI and the HTTP server do with research runs (start,
//! decide at the gate, read sessions), with input checked before anything is stored.

use std::sync::Arc;

use fathom_engine::store::{DeliverOutcome, RunRecord, RunStore, StoreError};
use fathom_engine::{Engine, EngineConfig, StartOptions};
use serde_json::Value;

use crate::checks::{check_delivery, check_parent, check_sources, check_start};
use crate::error::ResearchError;
use crate::events::{ApproveEvent, ResearchStart};
use crate::sessions::Sessions;
use crate::workflow::{DEEP_RESEARCH, ResearchDeps, deep_research, research_metadata};

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
