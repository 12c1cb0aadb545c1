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

/// Checks a JSON payload: that it decodes as the event type, and any rule the workflow adds.
type Validator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// Why a start event is refused by a rule that looks beyond the event itself (the session it
/// names, say): checked before the run is created, so a refused start stores nothing.
#[derive(Debug)]
pub enum StartRefusal {
    /// The event asks for something that cannot be (it names nothing that exists).
    Invalid(String),
    /// The event is fine, but what it names is not in a state to start from (yet).
    Conflict(String),
    /// The rule could not be checked (storage failed): not the caller's fault. The failure is
    /// kept, for logs; the caller is told only that storage failed.
    Failed(crate::BoxError),
}

/// An asynchronous rule start events must meet (it may read storage).
type StartGuard = Arc<dyn Fn(Value) -> BoxFuture<Result<(), StartRefusal>> + Send + Sync>;

/// How a run stopped without completing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Cancelled, by the API key named `by` when the server has keys.
    Cancelled { by: Option<String> },
    /// Failed (a step gave up, or the run's deadline passed), and why.
    Failed(String),
}

type StoppedHook = Arc<dyn Fn(Value, Stopped) -> BoxFuture<()> + Send + Sync>;

/// What part an event type plays in a workflow, for the schemas and graph it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRole {
    Start,
    /// Sent between steps.
    Internal,
    /// Sent from outside and waited for (an approval).
    External,
    /// Written to the run's stream.
    Streamed,
    Stop,
}

impl EventRole {
    pub fn as_str(self) -> &'static str {
        match self {
            EventRole::Start => "start",
            EventRole::Internal => "internal",
            EventRole::External => "external",
            EventRole::Streamed => "streamed",
            EventRole::Stop => "stop",
        }
    }
}

/// An event type a workflow declares, with the JSON Schema of its value.
#[derive(Debug, Clone)]
pub struct EventInfo {
    pub event_type: &'static str,
    pub role: EventRole,
    pub schema: Value,
}

fn event_info<E: Event>(role: EventRole) -> EventInfo {
    EventInfo {
        event_type: E::TYPE,
        role,
        schema: E::value_schema(),
    }
}

/// A validator that decodes the payload as `E`, then applies `check` to it.
fn validator<E: Event>(
    check: impl Fn(&E) -> Result<(), String> + Send + Sync + 'static,
) -> Validator {
    Arc::new(move |v: &Value| {
        let event = serde_json::from_value::<E>(v.clone()).map_err(|e| e.to_string())?;
        check(&event)
    })
}

/// What a step returns: the events it hands on. A step's return type is its outgoing edges in
/// the published graph, so what a step may emit is declared once, by its signature.
pub trait Emits: Send + 'static {
    /// The event types a step returning this may emit, with their role.
    fn declared() -> Vec<EventInfo>;
    /// Sends (or, for [`Stop`], ends the run with) what the step returned.
    fn emit<S: WorkflowState>(self, ctx: &Ctx<S>) -> Result<(), StepError>;
}

/// A step that sends nothing by its return value (it may still call [`Ctx::send`]).
impl Emits for () {
    fn declared() -> Vec<EventInfo> {
        Vec::new()
    }
    fn emit<S: WorkflowState>(self, _: &Ctx<S>) -> Result<(), StepError> {
        Ok(())
    }
}

/// A step returning an event sends it to the step that accepts its type.
impl<E: Event> Emits for E {
    fn declared() -> Vec<EventInfo> {
        vec![event_info::<E>(EventRole::Internal)]
    }
    fn emit<S: WorkflowState>(self, ctx: &Ctx<S>) -> Result<(), StepError> {
        ctx.send(self)
    }
}

/// One of two outcomes, for a step with two ways on (approve or re-plan).
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

impl<A: Emits, B: Emits> Emits for Either<A, B> {
    fn declared() -> Vec<EventInfo> {
        let mut v = A::declared();
        v.extend(B::declared());
        v
    }
    fn emit<S: WorkflowState>(self, ctx: &Ctx<S>) -> Result<(), StepError> {
        match self {
            Either::Left(a) => a.emit(ctx),
            Either::Right(b) => b.emit(ctx),
        }
    }
}

/// Ends the run with this result, streamed last; declares it as the workflow's stop event.
pub struct Stop<E: Event>(pub E);

impl<E: Event> Emits for Stop<E> {
    fn declared() -> Vec<EventInfo> {
        vec![event_info::<E>(EventRole::Stop)]
    }
    fn emit<S: WorkflowState>(self, ctx: &Ctx<S>) -> Result<(), StepError> {
        ctx.stop(&self.0)
    }
}

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

/// A stored value of a run written in an older stored format, as handed to the workflow's
/// upgrade to be rewritten in the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored<'a> {
    /// The run's state.
    State,
    /// A pending event sent to a step, of this type.
    StepEvent(&'a str),
    /// A journaled call's result, under this key.
    CallResult(&'a str),
}

/// Rewrites one stored value from format `from` (older than the workflow's) to the current
/// form. Stream events and external events are not passed: they are the public contract and
/// change only compatibly.
pub type Upgrade = Arc<dyn Fn(u32, Stored<'_>, Value) -> Result<Value, String> + Send + Sync>;

/// A workflow: a start event type, steps keyed by the event type each accepts, and the external
/// event types it may wait for.
pub struct Workflow<S: WorkflowState> {
    name: String,
    start_type: &'static str,
    validate_start: Validator,
    guard_start: Option<StartGuard>,
    on_stopped: Option<StoppedHook>,
    steps: Vec<StepDef<S>>,
    by_event: HashMap<&'static str, usize>,
    external: Vec<(&'static str, Validator)>,
    /// External event types that are decisions: one at a time (see [`Workflow::decision`]).
    decisions: Vec<&'static str>,
    run_timeout: Option<Duration>,
    events: Vec<EventInfo>,
    /// (step, event type it emits): the graph's step-to-event edges.
    emits: Vec<(&'static str, &'static str)>,
    /// The version of the stored forms this definition writes, and how older ones are read.
    format: u32,
    upgrade: Option<Upgrade>,
}

impl<S: WorkflowState> Workflow<S> {
    /// A workflow started by events of type `Start`.
    pub fn new<Start: Event>(name: impl Into<String>) -> Self {
        Workflow {
            name: name.into(),
            start_type: Start::TYPE,
            validate_start: validator::<Start>(|_| Ok(())),
            guard_start: None,
            on_stopped: None,
            steps: Vec::new(),
            by_event: HashMap::new(),
            external: Vec::new(),
            decisions: Vec::new(),
            run_timeout: None,
            events: vec![event_info::<Start>(EventRole::Start)],
            emits: Vec::new(),
            format: 1,
            upgrade: None,
        }
    }

    /// Declares that this definition stores its state, step events and journaled results in
    /// version `format` (from 1, the default), and how a value stored by an older version is
    /// brought to this one. A run of an older format is upgraded whole when a process of
    /// this version claims it; a process of an older version leaves a run of a newer format
    /// alone, so versions can run side by side during a deploy.
    pub fn stored_format(
        mut self,
        format: u32,
        upgrade: impl Fn(u32, Stored<'_>, Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        assert!(format >= 1, "stored formats count from 1");
        self.format = format;
        self.upgrade = Some(Arc::new(upgrade));
        self
    }

    /// Adds a rule start events must meet beyond decoding (checked before a run is created).
    pub fn check_start<Start: Event>(
        mut self,
        check: impl Fn(&Start) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        assert_eq!(
            Start::TYPE,
            self.start_type,
            "check_start for another event type"
        );
        self.validate_start = validator::<Start>(check);
        self
    }

    /// Adds a rule start events must meet that needs to look elsewhere (storage): run after
    /// [`Self::check_start`]'s, before a run is created.
    pub fn guard_start<Start, F, Fut>(mut self, guard: F) -> Self
    where
        Start: Event,
        F: Fn(Start) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), StartRefusal>> + Send + 'static,
    {
        assert_eq!(
            Start::TYPE,
            self.start_type,
            "guard_start for another event type"
        );
        let guard = Arc::new(guard);
        self.guard_start = Some(Arc::new(move |payload: Value| {
            let guard = guard.clone();
            Box::pin(async move {
                let event: Start = serde_json::from_value(payload)
                    .map_err(|e| StartRefusal::Invalid(e.to_string()))?;
                guard(event).await
            })
        }));
        self
    }

    /// Bookkeeping outside the run when it is cancelled or fails (a session record told so):
    /// `hook` gets the run's last committed state, in the process that cancelled or failed
    /// it, after that is committed. Best effort and bounded in time: a failure is logged.
    pub fn on_stopped<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(S, Stopped) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let hook = Arc::new(hook);
        self.on_stopped = Some(Arc::new(move |state: Value, how: Stopped| {
            let hook = hook.clone();
            Box::pin(async move {
                match serde_json::from_value::<S>(state) {
                    Ok(state) => hook(state, how).await,
                    Err(e) => tracing::warn!(error = %e, "a stopped run's state did not read"),
                }
            })
        }));
        self
    }

    fn declare(&mut self, info: EventInfo) {
        if !self
            .events
            .iter()
            .any(|e| e.event_type == info.event_type && e.role == info.role)
        {
            self.events.push(info);
        }
    }

    /// Declares the event that ends the run with its result.
    pub fn stops_with<E: Event>(mut self) -> Self {
        self.declare(event_info::<E>(EventRole::Stop));
        self
    }

    /// Declares an event type the run writes to its stream.
    pub fn streams<E: Event>(mut self) -> Self {
        self.declare(event_info::<E>(EventRole::Streamed));
        self
    }

    /// Adds a step run for every event of type `E`; what it returns ([`Emits`]) is sent on,
    /// and is its outgoing edges in the published graph. Panics if another step accepts `E`:
    /// that is a bug in the workflow definition, found when it is built.
    pub fn step<E, O, F, Fut>(self, name: &'static str, f: F) -> Self
    where
        E: Event,
        O: Emits,
        F: Fn(Ctx<S>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, StepError>> + Send + 'static,
    {
        self.step_with(name, StepOptions::default(), f)
    }

    pub fn step_with<E, O, F, Fut>(mut self, name: &'static str, opts: StepOptions, f: F) -> Self
    where
        E: Event,
        O: Emits,
        F: Fn(Ctx<S>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, StepError>> + Send + 'static,
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
                let event: E = serde_json::from_value(payload).map_err(|e| {
                    StepError::permanent_because(format!("bad {} payload", E::TYPE), e)
                })?;
                f(ctx.clone(), event).await?.emit(&ctx)
            })
        });
        for info in O::declared() {
            self.emits.push((name, info.event_type));
            if info.role == EventRole::Stop {
                self.declare(info);
            }
        }
        self.by_event.insert(E::TYPE, self.steps.len());
        if E::TYPE != self.start_type {
            self.declare(event_info::<E>(EventRole::Internal));
        }
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
    pub fn accepts_external<E: Event>(self) -> Self {
        self.accepts_external_checked::<E>(|_| Ok(()))
    }

    /// Like [`Self::accepts_external`], with a rule the event must meet beyond decoding; a
    /// sender whose event breaks it gets the message and nothing is delivered.
    pub fn accepts_external_checked<E: Event>(
        mut self,
        check: impl Fn(&E) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.external.push((E::TYPE, validator::<E>(check)));
        self.events.retain(|e| e.event_type != E::TYPE);
        self.declare(event_info::<E>(EventRole::External));
        self
    }

    /// Declares the external event type `E` a decision (an approval, say): of two sent to a
    /// run at once, or one sent while another waits to be taken up, the second is refused as
    /// a conflict; and one sent while the run waits for it is refused if the run has moved on
    /// by the time it lands. The same delivery again (one idempotency key) is not refused.
    pub fn decision<E: Event>(mut self) -> Self {
        self.decisions.push(E::TYPE);
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
    /// The workflow's asynchronous start rule, if it has one (after [`Self::validate_start`]).
    fn guard_start(&self, payload: &Value) -> BoxFuture<Result<(), StartRefusal>>;
    /// The workflow's [`Workflow::on_stopped`] hook, run on a state (a no-op without one).
    fn on_stopped(&self, state: Value, how: Stopped) -> BoxFuture<()>;
    fn initial_state(&self) -> Value;
    fn external_types(&self) -> Vec<&'static str>;
    fn validate_external(&self, event_type: &str, payload: &Value) -> Option<Result<(), String>>;
    /// Whether `event_type` is a decision ([`Workflow::decision`]).
    fn is_decision(&self, event_type: &str) -> bool;
    fn step_names(&self) -> Vec<(&'static str, &'static str)>;
    /// Declared event types with their schemas, start event first.
    fn events(&self) -> &[EventInfo];
    /// (step, event type) pairs: which step emits which event.
    fn emits(&self) -> &[(&'static str, &'static str)];
    fn run_timeout(&self) -> Option<Duration>;
    /// The version of the stored forms this definition writes.
    fn format(&self) -> u32;
    /// Brings a value stored in format `from` to [`Self::format`].
    fn upgrade(&self, from: u32, what: Stored<'_>, value: Value) -> Result<Value, String>;
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
    fn format(&self) -> u32 {
        self.format
    }
    fn upgrade(&self, from: u32, what: Stored<'_>, value: Value) -> Result<Value, String> {
        match &self.upgrade {
            Some(upgrade) if from < self.format => upgrade(from, what, value),
            _ => Ok(value),
        }
    }
    fn start_type(&self) -> &'static str {
        self.start_type
    }
    fn validate_start(&self, payload: &Value) -> Result<(), String> {
        (self.validate_start)(payload)
    }
    fn guard_start(&self, payload: &Value) -> BoxFuture<Result<(), StartRefusal>> {
        match &self.guard_start {
            Some(g) => g(payload.clone()),
            None => Box::pin(async { Ok(()) }),
        }
    }
    fn on_stopped(&self, state: Value, how: Stopped) -> BoxFuture<()> {
        match &self.on_stopped {
            Some(hook) => hook(state, how),
            None => Box::pin(async {}),
        }
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
    fn is_decision(&self, event_type: &str) -> bool {
        self.decisions.contains(&event_type)
    }
    fn step_names(&self) -> Vec<(&'static str, &'static str)> {
        self.steps.iter().map(|s| (s.name, s.accepts)).collect()
    }
    fn events(&self) -> &[EventInfo] {
        &self.events
    }
    fn emits(&self) -> &[(&'static str, &'static str)] {
        &self.emits
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
            return Box::pin(async move { (Err(StepError::failed(msg)), StepEffects::default()) });
        };
        let handler = self.steps[*idx].handler.clone();
        Box::pin(async move {
            let state: S = match serde_json::from_value(state) {
                Ok(s) => s,
                Err(e) => {
                    let err = StepError::failed_because("stored state does not fit", e);
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
