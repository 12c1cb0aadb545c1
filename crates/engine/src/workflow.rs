//! Workflow definitions: typed steps chosen by the type of event they accept.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::context::{Ctx, CtxParts, StepEffects};
use crate::error::StepError;
use crate::event::Event;

/// A run's typed state, persisted with every committed step.
pub trait WorkflowState:
    Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static
{
}
impl<T: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static> WorkflowState
    for T
{
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Retries with exponential backoff. `max_attempts` counts the first try.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl RetryPolicy {
    pub const NONE: RetryPolicy = RetryPolicy {
        max_attempts: 1,
        initial_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
    };

    pub fn attempts(max_attempts: u32) -> Self {
        RetryPolicy {
            max_attempts: max_attempts.max(1),
            ..Self::default()
        }
    }

    /// Backoff before attempt `next` (2-based: the wait after the first failure).
    pub fn backoff(&self, next: u32) -> Duration {
        let exp = next.saturating_sub(2).min(16);
        self.initial_backoff
            .saturating_mul(1 << exp)
            .min(self.max_backoff)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Checks that a JSON payload decodes as a given event type.
type Validator = fn(&Value) -> Result<(), String>;

type Handler<S> = Arc<dyn Fn(Ctx<S>, Value) -> BoxFuture<Result<(), StepError>> + Send + Sync>;

pub struct StepDef<S> {
    pub name: &'static str,
    pub accepts: &'static str,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    handler: Handler<S>,
}

/// Per-step options.
#[derive(Debug, Clone, Copy)]
pub struct StepOptions {
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for StepOptions {
    fn default() -> Self {
        StepOptions {
            timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
        }
    }
}

/// A workflow: a start event type, steps keyed by the event type each accepts, and the external
/// event types it may wait for.
pub struct Workflow<S: WorkflowState> {
    name: String,
    start_type: &'static str,
    validate_start: Validator,
    steps: Vec<StepDef<S>>,
    by_event: HashMap<&'static str, usize>,
    external: Vec<(&'static str, Validator)>,
    run_timeout: Option<Duration>,
}

fn validate_as<E: Event>(v: &Value) -> Result<(), String> {
    serde_json::from_value::<E>(v.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl<S: WorkflowState> Workflow<S> {
    /// A workflow started by events of type `Start`.
    pub fn new<Start: Event>(name: impl Into<String>) -> Self {
        Workflow {
            name: name.into(),
            start_type: Start::TYPE,
            validate_start: validate_as::<Start>,
            steps: Vec::new(),
            by_event: HashMap::new(),
            external: Vec::new(),
            run_timeout: None,
        }
    }

    /// Adds a step run for every event of type `E`. Panics if another step accepts `E`:
    /// that is a bug in the workflow definition, found when it is built.
    pub fn step<E, F, Fut>(self, name: &'static str, f: F) -> Self
    where
        E: Event,
        F: Fn(Ctx<S>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.step_with(name, StepOptions::default(), f)
    }

    pub fn step_with<E, F, Fut>(mut self, name: &'static str, opts: StepOptions, f: F) -> Self
    where
        E: Event,
        F: Fn(Ctx<S>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        assert!(
            !self.by_event.contains_key(E::TYPE),
            "workflow '{}': two steps accept {}",
            self.name,
            E::TYPE
        );
        let f = Arc::new(f);
        let handler: Handler<S> = Arc::new(move |ctx, payload| {
            let f = f.clone();
            Box::pin(async move {
                let event: E = serde_json::from_value(payload)
                    .map_err(|e| StepError::Failed(format!("bad {} payload: {e}", E::TYPE)))?;
                f(ctx, event).await
            })
        });
        self.by_event.insert(E::TYPE, self.steps.len());
        self.steps.push(StepDef {
            name,
            accepts: E::TYPE,
            timeout: opts.timeout,
            retry: opts.retry,
            handler,
        });
        self
    }

    /// Declares an event type that may be sent to runs from outside (and waited for).
    pub fn accepts_external<E: Event>(mut self) -> Self {
        self.external.push((E::TYPE, validate_as::<E>));
        self
    }

    /// Default wall-clock deadline for a run of this workflow.
    pub fn run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = Some(timeout);
        self
    }

    pub fn build(self) -> Arc<dyn ErasedWorkflow> {
        Arc::new(self)
    }
}

/// What the executor needs of a workflow, with its state type erased.
pub trait ErasedWorkflow: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn start_type(&self) -> &'static str;
    fn validate_start(&self, payload: &Value) -> Result<(), String>;
    fn initial_state(&self) -> Value;
    fn external_types(&self) -> Vec<&'static str>;
    fn validate_external(&self, event_type: &str, payload: &Value) -> Option<Result<(), String>>;
    fn step_names(&self) -> Vec<(&'static str, &'static str)>;
    fn run_timeout(&self) -> Option<Duration>;
    /// The step accepting `event_type`: (name, timeout, retry).
    fn step_for(&self, event_type: &str) -> Option<(&'static str, Duration, RetryPolicy)>;
    /// Runs the step accepting `event_type` against `state`; returns what it produced.
    fn run_step(
        &self,
        parts: CtxParts,
        event_type: &str,
        payload: Value,
        state: Value,
    ) -> BoxFuture<(Result<(), StepError>, StepEffects)>;
}

impl<S: WorkflowState> ErasedWorkflow for Workflow<S> {
    fn name(&self) -> &str {
        &self.name
    }
    fn start_type(&self) -> &'static str {
        self.start_type
    }
    fn validate_start(&self, payload: &Value) -> Result<(), String> {
        (self.validate_start)(payload)
    }
    fn initial_state(&self) -> Value {
        serde_json::to_value(S::default()).unwrap_or(Value::Null)
    }
    fn external_types(&self) -> Vec<&'static str> {
        self.external.iter().map(|(t, _)| *t).collect()
    }
    fn validate_external(&self, event_type: &str, payload: &Value) -> Option<Result<(), String>> {
        self.external
            .iter()
            .find(|(t, _)| *t == event_type)
            .map(|(_, v)| v(payload))
    }
    fn step_names(&self) -> Vec<(&'static str, &'static str)> {
        self.steps.iter().map(|s| (s.name, s.accepts)).collect()
    }
    fn run_timeout(&self) -> Option<Duration> {
        self.run_timeout
    }
    fn step_for(&self, event_type: &str) -> Option<(&'static str, Duration, RetryPolicy)> {
        let s = &self.steps[*self.by_event.get(event_type)?];
        Some((s.name, s.timeout, s.retry))
    }
    fn run_step(
        &self,
        parts: CtxParts,
        event_type: &str,
        payload: Value,
        state: Value,
    ) -> BoxFuture<(Result<(), StepError>, StepEffects)> {
        let Some(idx) = self.by_event.get(event_type) else {
            let msg = format!("no step accepts {event_type}");
            return Box::pin(async move { (Err(StepError::Failed(msg)), StepEffects::default()) });
        };
        let handler = self.steps[*idx].handler.clone();
        Box::pin(async move {
            let state: S = match serde_json::from_value(state) {
                Ok(s) => s,
                Err(e) => {
                    let err = StepError::Failed(format!("stored state does not fit: {e}"));
                    return (Err(err), StepEffects::default());
                }
            };
            let ctx = Ctx::new(parts, state);
            let result = handler(ctx.clone(), payload).await;
            let effects = ctx.into_effects();
            (result, effects)
        })
    }
}
