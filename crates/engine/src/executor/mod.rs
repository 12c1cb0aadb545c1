//! The executor: the engine's face (register workflows, start runs, send them events,
//! cancel them), its worker (claims runs through leases into a bounded number of slots)
//! and its drivers (run a claimed run step by step, committing as they go).

mod driver;
mod worker;

use driver::DriverDone;
use worker::{Adopted, Driving};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{Instrument as _, debug, info, warn};

use crate::context::{CtxParts, KnownMail};
use crate::error::{EngineError, ErrorChain, StepError};
use crate::event::{
    Envelope, ExceptionInfo, WorkflowCancelledEvent, WorkflowFailedEvent, WorkflowTimedOutEvent,
};
use crate::signal::{News, Signals};
use crate::store::{
    CancelOutcome, ChainedStep, Claimed, DeliverOutcome, Lease, NewMessage, NewRun, PendingEvent,
    RunHead, RunRecord, RunStatus, RunStore, RunUpgrade, StepCommit, StepOutcome, StoreError,
    SuspendOutcome, again_while_away, now_ms,
};
use crate::telemetry::{self, RunTracer};
use crate::workflow::{ErasedWorkflow, StartRefusal, Stopped, Stored};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Identifies this process in leases. Keep it stable across restarts of the same process
    /// so a restart takes its runs back at once.
    pub owner: String,
    pub lease_ttl: Duration,
    /// How often idle workers look for runnable runs made by other processes.
    pub poll_interval: Duration,
    pub max_concurrent_runs: usize,
    /// On shutdown, how long steps in flight may take to finish before they are cut off;
    /// either way their runs' leases are let go, so another process takes them at once.
    pub shutdown_grace: Duration,
    /// Hangs each run's step spans in one trace (OpenTelemetry), when the process exports
    /// traces.
    pub tracer: Option<Arc<dyn RunTracer>>,
    /// How long a step's commit may wait for the steps run after it on its event, to be
    /// committed with them (quick steps share one commit); zero commits each step alone.
    pub chain_wait: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            owner: format!("fathom-{}", crate::new_id()),
            lease_ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(250),
            max_concurrent_runs: 16,
            shutdown_grace: Duration::from_secs(30),
            tracer: None,
            chain_wait: Duration::from_millis(5),
        }
    }
}

/// How a worker stopped: the runs it was driving when told to, and how many of them were
/// still inside a step when the grace ran out (cut off; their step runs again elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStopped {
    pub in_flight: usize,
    pub cut_off: u64,
}

#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    pub run_id: Option<String>,
    /// Overrides the workflow's run timeout.
    pub timeout: Option<Duration>,
}

/// Registered workflows, a store, and the worker loop that drives runs.
pub struct Engine {
    store: Arc<dyn RunStore>,
    workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
    /// The names of `workflows`, sorted: the runs this process's worker claims.
    workflow_names: Vec<String>,
    config: EngineConfig,
    wake: Notify,
    /// Runs this process drives.
    active: Mutex<HashMap<String, Driving>>,
    signals: Arc<Signals>,
    /// Whether other processes' commits reach this one through [`Engine::announce`].
    relay_live: AtomicBool,
    poller_started: AtomicBool,
    /// Turned on by a shutdown: drivers stop at their next step boundary and let go.
    draining: watch::Sender<bool>,
    /// Runs stored in a format newer than this binary reads: left to a newer process.
    newer: Mutex<HashSet<String>>,
    /// Slots taken of [`EngineConfig::max_concurrent_runs`]: runs driven or being claimed.
    slots_taken: AtomicUsize,
    /// Runs may wait for a slot here: the worker's last look ran out of slots. Until it looks
    /// again (when a run here ends) and takes them, oldest first, a start or a delivery takes
    /// no slot of its own: a slot that frees goes to the run that waited longest, not to
    /// whoever asks first.
    backlog: AtomicBool,
    /// While a worker runs here and is not draining: where runs claimed outside its looks
    /// (eager start and resume) are handed to it to drive.
    adopt: Mutex<Option<mpsc::UnboundedSender<Adopted>>>,
    /// Steps (workflow, step) not run ahead of their event's commit: those that once needed
    /// their event stored (a journaled call) or ran out of the chain's wait, and, while it
    /// runs, a step being run ahead (so one that panics there is not chained again).
    not_chained: Mutex<HashSet<(String, &'static str)>>,
}

impl Engine {
    pub fn new(store: Arc<dyn RunStore>, config: EngineConfig) -> Self {
        Engine {
            store,
            workflows: HashMap::new(),
            workflow_names: Vec::new(),
            config,
            wake: Notify::new(),
            active: Mutex::new(HashMap::new()),
            signals: Arc::new(Signals::default()),
            relay_live: AtomicBool::new(false),
            poller_started: AtomicBool::new(false),
            draining: watch::channel(false).0,
            newer: Mutex::new(HashSet::new()),
            slots_taken: AtomicUsize::new(0),
            backlog: AtomicBool::new(false),
            adopt: Mutex::new(None),
            not_chained: Mutex::new(HashSet::new()),
        }
    }

    pub fn register(mut self, wf: Arc<dyn ErasedWorkflow>) -> Self {
        self.workflows.insert(wf.name().to_string(), wf);
        self.workflow_names = self.workflows.keys().cloned().collect();
        self.workflow_names.sort();
        self
    }

    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn workflow(&self, name: &str) -> Option<&Arc<dyn ErasedWorkflow>> {
        self.workflows.get(name)
    }

    /// The workflows registered here, by name, sorted.
    pub fn workflow_names(&self) -> &[String] {
        &self.workflow_names
    }

    /// Tells this process's readers of run `run_id` that it changed elsewhere (another
    /// process committed to it), so they read it now.
    pub fn announce(&self, run_id: &str) {
        self.signals.raise(run_id);
    }

    /// Like [`Engine::announce`], for a change written through this process's own store:
    /// nothing to tell when this engine drives the run, since only the lease holder writes
    /// its stream and this engine's commits wake its readers themselves (the relay's echo
    /// would have every reader look twice). Another engine sharing the store may have
    /// written it otherwise. `head`, when the notice tells it, is the stream's next sequence
    /// number after the change: the echo of the last commit this engine published (its
    /// driver has let go since) is news its readers have already.
    pub fn announce_own(&self, run_id: &str, head: Option<i64>) {
        if self.lock_active().contains_key(run_id)
            || head.is_some_and(|h| self.signals.has_news_up_to(run_id, h))
        {
            return;
        }
        self.signals.raise(run_id);
    }

    /// Says whether other processes' changes are being relayed through [`Engine::announce`]
    /// (a change feed such as LISTEN/NOTIFY is connected). While they are, nothing polls.
    /// When a feed comes back, every reader looks once for what it may have missed.
    pub fn set_relay_live(&self, live: bool) {
        let was = self.relay_live.swap(live, Ordering::SeqCst);
        if live && !was {
            // Notices may have been missed while the relay was down.
            self.signals.raise_all();
            self.wake.notify_one();
        }
    }

    /// Whether other processes' changes are being relayed now (see [`Engine::set_relay_live`]).
    pub fn relay_live(&self) -> bool {
        self.relay_live.load(Ordering::SeqCst)
    }

    pub(crate) fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    /// True if the fallback poller was started already; marks it started.
    pub(crate) fn poller_started(&self) -> bool {
        self.poller_started.swap(true, Ordering::SeqCst)
    }

    fn notify(&self, run_id: &str) {
        self.signals.raise(run_id);
    }

    /// Hands a step commit's events to this process's readers of the run, and says whether
    /// it changed the run's record (its state, its end, or, with `parked`, its park).
    fn publish(&self, run_id: &str, commit: &StepCommit, seqs: &[i64], parked: bool) {
        self.signals.publish(run_id, || {
            let last = match &commit.outcome {
                StepOutcome::Continue => None,
                StepOutcome::Completed(env) => Some(env),
                StepOutcome::Failed { event, .. } => Some(event),
            };
            let mut news = News::stored(commit.stream.iter().chain(last), seqs.iter().copied());
            news.record_changed = commit.state.is_some() || last.is_some() || parked;
            news
        });
    }

    /// Tells this process's worker that there may be a run to claim (another process created
    /// one, delivered a message, or let a lease go).
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    /// [`Engine::nudge`] for a run of `workflow`: nothing when this engine does not drive it
    /// (its worker would look and find nothing it may take). An engine with no workflow
    /// registered claims runs of any, so any wakes it.
    pub fn nudge_for(&self, workflow: &str) {
        if self.workflow_names.is_empty()
            || self
                .workflow_names
                .binary_search_by(|w| w.as_str().cmp(workflow))
                .is_ok()
        {
            self.nudge();
        }
    }

    /// Creates a run with `start` as its first event. When this process's worker has a slot
    /// free, the run is created under its lease and driven here at once; otherwise by
    /// whichever worker claims it first.
    pub async fn start(
        self: &Arc<Self>,
        workflow: &str,
        start: Value,
        opts: StartOptions,
    ) -> Result<RunRecord, EngineError> {
        let wf = self
            .workflows
            .get(workflow)
            .ok_or_else(|| EngineError::UnknownWorkflow(workflow.to_string()))?;
        wf.validate_start(&start)
            .map_err(|reason| EngineError::InvalidStart {
                workflow: workflow.to_string(),
                reason,
            })?;
        wf.guard_start(&start).await.map_err(|r| match r {
            StartRefusal::Invalid(reason) => EngineError::InvalidStart {
                workflow: workflow.to_string(),
                reason,
            },
            StartRefusal::Conflict(reason) => EngineError::StartConflict {
                workflow: workflow.to_string(),
                reason,
            },
            StartRefusal::Failed(cause) => EngineError::Store(StoreError::backend_cause(cause)),
        })?;
        let timeout = opts.timeout.or(wf.run_timeout());
        let id = opts.run_id.unwrap_or_else(crate::new_id);
        let new = NewRun {
            id: id.clone(),
            workflow: workflow.to_string(),
            state: wf.initial_state(),
            start_type: wf.start_type().to_string(),
            start_payload: start,
            deadline_at: timeout.map(|t| now_ms() + t.as_millis() as i64),
            format: wf.format(),
        };
        let exists = |e| match e {
            StoreError::Conflict(_) => EngineError::RunExists(id.clone()),
            other => other.into(),
        };
        // With a slot free here, the run is created under this process's lease and driven at
        // once: no claim, no wait for the worker to look.
        let run = match self.eager_slot() {
            Some(slot) => {
                let created = slot.take_run(|store, owner, ttl| async move {
                    let claimed = store.create_claimed(new, &owner, ttl).await?;
                    let run = claimed.run.clone();
                    let mailbox_seq = run.mailbox_seq;
                    Ok(Some((claimed, KnownMail::Empty { mailbox_seq }, run)))
                });
                // A create that succeeds always takes the run.
                created.await.map_err(exists)?.ok_or_else(|| {
                    EngineError::Store(StoreError::backend("the run was not created"))
                })?
            }
            None => {
                let run = self.store.create_run(new).await.map_err(exists)?;
                self.wake.notify_one();
                run
            }
        };
        telemetry::run_started(workflow);
        Ok(run)
    }

    /// Delivers an external event to a run's durable mailbox. It is kept until a step waits
    /// for it, even if it arrives first; the same idempotency key applies once.
    pub async fn send(
        self: &Arc<Self>,
        run_id: &str,
        event_type: &str,
        payload: Value,
        idempotency_key: Option<String>,
    ) -> Result<DeliverOutcome, EngineError> {
        let run = self
            .store
            .run_head(run_id)
            .await?
            .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
        self.send_to(&run, event_type, payload, idempotency_key)
            .await
    }

    /// What a run that ended answers a delivery, before the event is read: a retry of one
    /// it took before it ended (the same idempotency key) as that one was, anything else
    /// [`EngineError::RunTerminal`].
    pub async fn send_to_ended(
        &self,
        run: &RunHead,
        idempotency_key: Option<&str>,
    ) -> Result<DeliverOutcome, EngineError> {
        if let Some(key) = idempotency_key
            && let Some(message_id) = self.store.delivered_with_key(&run.id, key).await?
        {
            return Ok(DeliverOutcome::Duplicate { message_id });
        }
        Err(EngineError::RunTerminal(run.status.as_str()))
    }

    /// [`Engine::send`] to a run whose head its caller has just read (saves reading it
    /// again; [`RunRecord::head`] gives it from a whole record).
    pub async fn send_to(
        self: &Arc<Self>,
        run: &RunHead,
        event_type: &str,
        payload: Value,
        idempotency_key: Option<String>,
    ) -> Result<DeliverOutcome, EngineError> {
        let run_id = run.id.as_str();
        if run.status.is_terminal() {
            return self.send_to_ended(run, idempotency_key.as_deref()).await;
        }
        let wf = self
            .workflows
            .get(&run.workflow)
            .ok_or_else(|| EngineError::UnknownWorkflow(run.workflow.clone()))?;
        match wf.validate_external(event_type, &payload) {
            None => {
                return Err(EngineError::UnknownEventType {
                    given: event_type.to_string(),
                    expected: wf.external_types().join(", "),
                });
            }
            Some(Err(reason)) => {
                return Err(EngineError::InvalidEvent {
                    event_type: event_type.to_string(),
                    reason,
                });
            }
            Some(Ok(())) => {}
        }
        let decision = wf.is_decision(event_type);
        // A decision sent while the run waits for one is for that wait only.
        let waits_for_it =
            run.status == RunStatus::Waiting && run.waiting_for.as_deref() == Some(event_type);
        let mut message = NewMessage {
            event_type: event_type.to_string(),
            payload,
            idempotency_key,
            exclusive: decision,
            at_seq: (decision && waits_for_it).then_some(run.next_seq),
        };
        // A message the run waits for wakes it: with a slot free here, under this process's
        // lease, driven on at once.
        if waits_for_it
            && !self.lock_active().contains_key(run_id)
            && let Some(slot) = self.eager_slot()
        {
            let (run_id, message) = (run_id.to_string(), message.clone());
            let woken = slot.take_run(|store, owner, ttl| async move {
                let Some((id, claimed)) = store
                    .deliver_claiming(&run_id, &message, &owner, ttl)
                    .await?
                else {
                    return Ok(None);
                };
                let mail = KnownMail::Woke {
                    event_type: message.event_type,
                    id,
                    payload: message.payload,
                    mailbox_seq: claimed.run.mailbox_seq,
                };
                Ok(Some((claimed, mail, id)))
            });
            if let Some(message_id) = woken.await? {
                return Ok(DeliverOutcome::Accepted { message_id });
            }
        }
        let mut outcome = self.store.deliver(run_id, message.clone()).await?;
        if outcome == DeliverOutcome::BetweenWaits {
            // A decision that came between two waits (a plan being drafted again after a
            // rejection) is for the next wait only if the run streamed nothing between its
            // arrival and that wait: then its sender saw what the wait is about.
            self.wait_until_waiting(run_id, event_type, BETWEEN_WAITS_LIMIT)
                .await;
            message.at_seq = Some(run.next_seq);
            outcome = self.store.deliver(run_id, message).await?;
        }
        match &outcome {
            DeliverOutcome::RunNotFound => return Err(EngineError::UnknownRun(run_id.into())),
            DeliverOutcome::RunTerminal(s) => return Err(EngineError::RunTerminal(s.as_str())),
            DeliverOutcome::BetweenWaits => {
                return Err(EngineError::Store(StoreError::Conflict(format!(
                    "a {event_type} was already taken up and the run has moved on; \
                     read its state and decide again"
                ))));
            }
            _ => {}
        }
        self.delivered(run_id);
        Ok(outcome)
    }

    /// Waits, up to `limit`, for run `run_id` to wait for an `event_type` (or to end).
    async fn wait_until_waiting(self: &Arc<Self>, run_id: &str, event_type: &str, limit: Duration) {
        let mut watch = self.watch(run_id);
        let _ = tokio::time::timeout(limit, async {
            // Bounded by the limit; each pass looks once and waits for a change.
            loop {
                watch.mark_seen();
                match self.store.get_run(run_id).await {
                    Ok(Some(r))
                        if r.status.is_terminal()
                            || r.waiting_for.as_deref() == Some(event_type) =>
                    {
                        return;
                    }
                    Ok(Some(_)) => watch.changed().await,
                    _ => return,
                }
            }
        })
        .await;
    }

    /// Cancels a run: it stops at its next commit, and a `WorkflowCancelledEvent` ends its
    /// stream.
    pub async fn cancel(&self, run_id: &str) -> Result<CancelOutcome, EngineError> {
        self.cancel_by(run_id, None).await
    }

    /// [`Self::cancel`], saying who cancelled (an API key's name): on the
    /// `WorkflowCancelledEvent` and to the workflow's `on_stopped` hook.
    pub async fn cancel_by(
        &self,
        run_id: &str,
        by: Option<&str>,
    ) -> Result<CancelOutcome, EngineError> {
        let by = by.map(String::from);
        let mut env = Envelope::of(&WorkflowCancelledEvent {})
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        // `{}` as the Python server sends it; `{"by": name}` when a key's name is known.
        if let (Some(name), Some(value)) = (&by, env.value.as_object_mut()) {
            value.insert("by".into(), Value::String(name.clone()));
        }
        let outcome = self.store.cancel_run(run_id, env).await?;
        // A run this process drives lets go now rather than at its next write.
        if let Some(driving) = self.lock_active().get(run_id) {
            let _ = driving.lost.send(true);
        }
        let deadline = Instant::now() + STOPPED_HOOK_LIMIT;
        if matches!(outcome, CancelOutcome::Cancelled)
            && let Some(run) = self.read_cancelled(run_id, deadline).await
        {
            self.ended(&run, "cancelled");
            // A step of it running here has let go first, so nothing it writes outside the
            // run (a session saved mid-step) lands after the workflow's hook.
            while self.lock_active().contains_key(run_id) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.stopped(&run, Stopped::Cancelled { by }).await;
        }
        self.notify(run_id);
        Ok(outcome)
    }

    /// The record of run `run_id`, just cancelled, for its hook: read again while the
    /// database is away (the cancel is stored; the hook is what tells the workflow), until
    /// `deadline`.
    async fn read_cancelled(&self, run_id: &str, deadline: Instant) -> Option<RunRecord> {
        match again_while_away(deadline, || self.store.get_run(run_id)).await {
            Ok(run) => run,
            Err(e) => {
                warn!(run = %run_id, error = %ErrorChain(&e), "cancelled run not read; its hook did not run");
                None
            }
        }
    }
}

/// How long a decision sent between two waits waits for the next one (see `send`).
const BETWEEN_WAITS_LIMIT: Duration = Duration::from_secs(2);

/// How long a workflow's `on_stopped` hook may take.
const STOPPED_HOOK_LIMIT: Duration = Duration::from_secs(10);
