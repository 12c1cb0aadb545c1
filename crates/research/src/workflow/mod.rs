//! The `deep-research` workflow and `research-metadata`. A question is routed first
//! (`route_query`), the local corpus looked at (`investigate_background`); a simple question
//! is then answered from the best local documents (`fetch_parse_sources` →
//! `synthesize_and_patch` → `persist_session`), any other planned and researched
//! (`draft_plan` → `await_approval` → `run_web_research` → `fetch_parse_sources` →
//! `synthesize_and_patch` → `persist_session`).
//! Each step's signature is its place in the graph: the event it takes and what it returns.
//!
//! Phase A (`draft_plan`) has no handle on search or fetch: the tools that reach outside are
//! only called from the steps after the gate.

mod claims;
mod deliver;
mod follow;
mod gather;
mod plan;
mod route;
mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fathom_data::CollectionStore;
use fathom_engine::store::{StoreError, again_while_away};
use fathom_engine::{
    Ctx, ErasedWorkflow, ErrorChain, RetryPolicy, StartRefusal, StepError, StepOptions, Stop,
    Stopped, Workflow,
};

use crate::checks::{check_decision, check_delivery, check_parent, check_sources, check_start};
use crate::delivery::Delivery;
use crate::error::ResearchError;
use crate::events::*;
use crate::sessions::Sessions;
use crate::settings::ResearchConfig;
use crate::state::{ResearchState, RunCtx, SessionStatus};
use crate::tools::Tools;

/// How long saving how a run stopped is tried while the database is away: within the
/// engine's 10 s limit on the hook.
const STOP_SAVE_LIMIT: Duration = Duration::from_secs(8);

pub const DEEP_RESEARCH: &str = "deep-research";
pub const RESEARCH_METADATA: &str = "research-metadata";
const COORDINATOR: &str = "coordinator";
const PLANNER: &str = "planner";
const WRITER: &str = "writer";
const RESEARCHER: &str = "researcher";

/// What the research workflows need from outside: the tools' reach (search, fetch, parse,
/// artifacts), the models, where sessions are saved, and the config.
#[derive(Clone)]
pub struct ResearchDeps {
    pub config: ResearchConfig,
    /// What the research tools reach; the agents get this and nothing else.
    pub tools: Tools,
    /// The agent's models; None runs the offline planner and extractive writer.
    pub models: Option<crate::agent::Models>,
    pub sessions: Arc<dyn CollectionStore>,
    /// How finished reports are delivered (webhook, email), as this server is set up.
    pub delivery: Delivery,
}

impl ResearchDeps {
    /// Writes the session record as the step of `ctx` holds it. A crash point first
    /// (`<step>:save_session`): a test can hold a step just before its save.
    async fn save_step(&self, ctx: &RunCtx) -> Result<(), StepError> {
        ctx.crash_point("save_session").await;
        self.save_session(&ctx.state()).await
    }

    /// Writes the session record: delete by `research_id` plus insert, in one transaction.
    async fn save_session(&self, state: &ResearchState) -> Result<(), StepError> {
        Sessions::new(self.sessions.clone(), &self.config)
            .put(&state.research_id, state.snapshot())
            .await
            .map_err(|e| match e {
                // The database is away: the run waits for it, no attempt is spent.
                e @ StoreError::Unavailable(_) => StepError::Store(e),
                e => StepError::failed_because("could not save the session", e),
            })
    }
}

/// Builds `deep-research`. The graph is the steps' signatures: each takes one event type and
/// returns what it hands on.
pub fn deep_research(deps: Arc<ResearchDeps>) -> Arc<dyn ErasedWorkflow> {
    // Routing and planning are one or two model calls: seconds with a hosted model, a minute
    // or more with a small one on a CPU (it reads its prompt at about 20 tokens a second).
    let quick = StepOptions {
        timeout: Duration::from_secs(if deps.models.is_some() { 300 } else { 60 }),
        retry: RetryPolicy::attempts(3),
    };
    // Search and reading take as long as their sources do; the research deadline bounds them.
    let long = StepOptions {
        timeout: Duration::from_secs(24 * 3600),
        retry: RetryPolicy::attempts(3),
    };
    // Every attempt of every channel, with its backoff: bounded by the delivery settings.
    let delivering = StepOptions {
        timeout: deps.delivery.step_timeout(),
        retry: RetryPolicy::attempts(3),
    };
    let (config, delivery, tools) = (
        deps.config.clone(),
        deps.delivery.clone(),
        deps.tools.clone(),
    );
    let guarded = deps.clone();
    let stopping = deps.clone();
    Workflow::<ResearchState>::new::<ResearchStart>(DEEP_RESEARCH)
        // A run cancelled or failed says so in its saved session, which would otherwise
        // show it planning or running for ever.
        .on_stopped(move |mut state: ResearchState, how| {
            let deps = stopping.clone();
            async move {
                state.status = match how {
                    Stopped::Cancelled { by } => {
                        let at = fathom_data::format_timestamp_ms(fathom_engine::store::now_ms());
                        let plan_round = state.round;
                        state.decisions.push(crate::state::Decision {
                            action: "cancelled".into(),
                            by,
                            at,
                            approved: false,
                            feedback: None,
                            plan_round,
                            edited: false,
                        });
                        SessionStatus::Cancelled
                    }
                    Stopped::Failed(why) => {
                        state.notes.push(format!("the run failed: {why}"));
                        SessionStatus::Failed
                    }
                };
                if state.research_id.is_empty() {
                    return;
                }
                // Saved again while the database is away, within the engine's limit on
                // the hook: otherwise the session would say running for good.
                let (deps, state) = (&deps, &state);
                let saved = again_while_away(Instant::now() + STOP_SAVE_LIMIT, || async move {
                    match deps.save_session(state).await {
                        Err(StepError::Store(e)) => Err(e),
                        Err(e) => Err(StoreError::backend_cause(e)),
                        Ok(()) => Ok(()),
                    }
                })
                .await;
                if let Err(e) = saved {
                    tracing::warn!(error = %ErrorChain(&e), "could not record how the run stopped");
                }
            }
        })
        .check_start(move |ev: &ResearchStart| {
            let start =
                check_start(&config, &ev.query, ev.settings.clone()).map_err(|e| e.to_string())?;
            let start = ResearchStart {
                follow_up_of: ev.follow_up_of.clone(),
                ..start
            };
            check_delivery(&config, &delivery, &start).map_err(|e| e.to_string())?;
            check_sources(&config, &tools.available(), &start).map_err(|e| e.to_string())
        })
        // A follow-up names a session that must exist and be finished: looked up in storage.
        .guard_start(move |ev: ResearchStart| {
            let deps = guarded.clone();
            async move {
                let Some(parent) = ev.follow_up_of else {
                    return Ok(());
                };
                let sessions = Sessions::new(deps.sessions.clone(), &deps.config);
                match check_parent(&sessions, &parent).await {
                    Ok(_) => Ok(()),
                    Err(e @ ResearchError::ParentNotFinished { .. }) => {
                        Err(StartRefusal::Conflict(e.to_string()))
                    }
                    Err(e @ ResearchError::UnknownParent(_)) => {
                        Err(StartRefusal::Invalid(format!("follow_up_of: {e}")))
                    }
                    Err(e) => Err(StartRefusal::Failed(e.into())),
                }
            }
        })
        .step_with("route_query", quick, with_deps(&deps, route::route_query))
        .step_with(
            "investigate_background",
            quick,
            with_deps(&deps, route::investigate_background),
        )
        .step_with("draft_plan", quick, with_deps(&deps, plan::draft_plan))
        .step_with("replan", quick, with_deps(&deps, plan::replan))
        .step_with(
            "await_approval",
            quick,
            with_deps(&deps, plan::await_approval),
        )
        .step_with(
            "run_web_research",
            long,
            with_deps(&deps, gather::run_web_research),
        )
        .step_with(
            "fetch_parse_sources",
            long,
            with_deps(&deps, gather::fetch_parse_sources),
        )
        .step_with(
            "synthesize_and_patch",
            long,
            with_deps(&deps, write::synthesize_and_patch),
        )
        .step_with(
            "persist_session",
            quick,
            with_deps(&deps, write::persist_session),
        )
        .step_with(
            "deliver_report",
            delivering,
            with_deps(&deps, deliver::deliver_report),
        )
        .accepts_external_checked::<ApproveEvent>(check_decision)
        // One decision per plan: of two sent at once, the second is refused (409).
        .decision::<ApproveEvent>()
        .streams::<AgentInput>()
        .streams::<AgentStream>()
        .streams::<ToolCall>()
        .streams::<ToolCallResult>()
        .streams::<AgentOutput>()
        .build()
}

/// A step function given the workflow's dependencies.
fn with_deps<E, Fut>(
    deps: &Arc<ResearchDeps>,
    f: impl Fn(RunCtx, Arc<ResearchDeps>, E) -> Fut + Send + Sync + 'static,
) -> impl Fn(RunCtx, E) -> Fut + Send + Sync + 'static {
    let deps = deps.clone();
    move |ctx, ev| f(ctx, deps.clone(), ev)
}

/// Builds `research-metadata`: the research collection and the settings schema, `$ref`s
/// resolved.
pub fn research_metadata(config: ResearchConfig) -> Arc<dyn ErasedWorkflow> {
    Workflow::<()>::new::<StartEvent>(RESEARCH_METADATA)
        .step("metadata", move |_ctx: Ctx<()>, _ev: StartEvent| {
            let config = config.clone();
            async move {
                Ok(Stop(MetadataResponse {
                    json_schema: config.resolved_schema.clone(),
                    extracted_data_collection: config.research_collection.clone(),
                    research_collection: config.research_collection.clone(),
                    deployment_name: config.deployment_name.clone(),
                    settings_defaults: config.defaults.clone(),
                }))
            }
        })
        .build()
}
