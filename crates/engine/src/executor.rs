//! The executor: claims runs through leases and drives them step by step.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{Instrument as _, debug, info, warn};

use crate::context::{CtxParts, KnownMail};
use crate::error::{EngineError, StepError};
use crate::event::{
    Envelope, ExceptionInfo, WorkflowCancelledEvent, WorkflowFailedEvent, WorkflowTimedOutEvent,
};
use crate::signal::{News, Signals};
use crate::store::{
    CancelOutcome, ChainedStep, Claimed, DeliverOutcome, Lease, NewMessage, NewRun, PendingEvent,
    RunHead, RunRecord, RunStatus, RunStore, RunUpgrade, StepCommit, StepOutcome, StoreError,
    SuspendOutcome, now_ms,
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

/// How a driver stopped driving a run.
#[derive(Debug, Clone, Copy)]
struct LetGo {
    /// It still holds the lease, to be released (false when the lease is already gone).
    release: bool,
    /// Every change it made was told to this process's readers, as news or as a touch: they
    /// need not look at the store. Never so when it lost the lease: whoever took the run, or
    /// cancelled it, wrote what those readers have not heard.
    told: bool,
}

impl LetGo {
    /// The lease is gone (lost, or let go with the run's last commit), nothing more told.
    const GONE: LetGo = LetGo {
        release: false,
        told: false,
    };
    /// The lease is still held, to be released; readers look at the store for what changed.
    const UNTOLD: LetGo = LetGo {
        release: true,
        told: false,
    };
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

/// A run claimed outside the worker's looks, handed to it with what is known of its mailbox
/// and its let-go switch.
type Adopted = (
    Claimed,
    Option<KnownMail>,
    (watch::Sender<bool>, watch::Receiver<bool>),
);

/// A slot reserved for a run about to be claimed outside the worker's looks; given back
/// unless the run is handed over.
struct EagerSlot {
    engine: Arc<Engine>,
    to_worker: Option<mpsc::UnboundedSender<Adopted>>,
}

impl EagerSlot {
    /// Runs `write` (given the store, this process's owner id and the lease's length in ms),
    /// which takes a run under this process's lease, and hands the run it took to the
    /// worker with what is known of its mailbox; returns what else the write gave. The write
    /// runs in a task of its own: once a run is taken here it is handed over, even if the
    /// caller goes away meanwhile. A write that took nothing gives the slot back.
    async fn take_run<T, F, Fut>(self, write: F) -> Result<Option<T>, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn RunStore>, String, i64) -> Fut,
        Fut: Future<Output = Result<Option<(Claimed, KnownMail, T)>, StoreError>> + Send + 'static,
    {
        let e = &self.engine;
        let written = write(e.store.clone(), e.config.owner.clone(), e.lease_ttl_ms());
        let task = tokio::spawn(async move {
            let Some((claimed, mail, out)) = written.await? else {
                return Ok(None);
            };
            self.hand_over(claimed, mail);
            Ok(Some(out))
        });
        task.await
            .map_err(|e| StoreError::Backend(format!("the write was interrupted: {e}")))?
    }

    /// Hands a claimed run to the worker, which drives it in this slot. A worker that has
    /// stopped meanwhile gets nothing: the lease is let go.
    fn hand_over(mut self, claimed: Claimed, mail: KnownMail) {
        let Some(to_worker) = self.to_worker.take() else {
            return;
        };
        let id = claimed.run.id.clone();
        let lost = self.engine.activate(&id);
        let switch = lost.0.clone();
        if let Err(mpsc::error::SendError((claimed, ..))) =
            to_worker.send((claimed, Some(mail), lost))
        {
            self.engine.deactivate(&id, &switch);
            self.engine.release_slots(1);
            self.engine.wake.notify_one();
            let store = self.engine.store.clone();
            tokio::spawn(async move {
                let _ = store.release_lease(&claimed.lease).await;
            });
        }
    }
}

impl Drop for EagerSlot {
    fn drop(&mut self) {
        if self.to_worker.is_some() {
            self.engine.release_slots(1);
            // A look that found no slot while this one was held waits for a run to end
            // here, which may never come: it looks again now.
            self.engine.wake.notify_one();
        }
    }
}

/// What a driver holds, given back when its task ends however it ends (a step that panics
/// unwinds through it): its entry among the runs driven here, and its slot.
struct DriverDone {
    engine: Arc<Engine>,
    run_id: String,
    lost: watch::Sender<bool>,
}

impl Drop for DriverDone {
    fn drop(&mut self) {
        self.engine.deactivate(&self.run_id, &self.lost);
        self.engine.release_slots(1);
    }
}

/// Aborts a task when dropped: a driver's heartbeat stops with it, even one that panics.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
            StartRefusal::Failed(reason) => EngineError::Store(StoreError::Backend(reason)),
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
                    EngineError::Store(StoreError::Backend("the run was not created".into()))
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
            return Err(EngineError::RunTerminal(run.status.as_str()));
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
        let env = Envelope::of(&WorkflowCancelledEvent {})
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let outcome = self.store.cancel_run(run_id, env).await?;
        // A run this process drives lets go now rather than at its next write.
        if let Some(driving) = self.lock_active().get(run_id) {
            let _ = driving.lost.send(true);
        }
        if matches!(outcome, CancelOutcome::Cancelled)
            && let Ok(Some(run)) = self.store.get_run(run_id).await
        {
            self.ended(&run, "cancelled");
            // A step of it running here has let go first, so nothing it writes outside the
            // run (a session saved mid-step) lands after the workflow's hook.
            let deadline = Instant::now() + STOPPED_HOOK_LIMIT;
            while self.lock_active().contains_key(run_id) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.stopped(&run, Stopped::Cancelled).await;
        }
        self.notify(run_id);
        Ok(outcome)
    }

    /// Drives runs until `shutdown` turns true, then drains: claims nothing more, lets each
    /// step in flight finish within [`EngineConfig::shutdown_grace`] (its run is let go at
    /// the step boundary), cuts off what is still running after that, and lets go of every
    /// lease this owner holds, so another process carries on at once instead of after lease
    /// expiry. Frees this owner's leases from an earlier incarnation first, so a restarted
    /// process carries on with its runs at once.
    pub async fn run_worker(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) -> WorkerStopped {
        match self.store.release_owner(&self.config.owner).await {
            Ok(n) if n > 0 => {
                info!(owner = %self.config.owner, runs = n, "took back runs after restart")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "could not release stale leases"),
        }
        let mut tasks = tokio::task::JoinSet::new();
        let (to_worker, mut adopted) = mpsc::unbounded_channel::<Adopted>();
        // Runs are handed over once the first look is done (it takes what was left waiting).
        let mut to_worker = Some(to_worker);
        // A look that had no free slot for all it may have found: done when a run ending here
        // frees one. (A run that parks or ends makes no new work; starts wake the worker
        // themselves, deliveries too, or, to a run driven here, when its driver lets go; the
        // timer finds the rest.)
        let mut owed: Option<Look> = None;
        let mut look = Some(Look::Everything);
        // Kept across wakes: a worker woken more often than this still looks for runs whose
        // holder died.
        let mut next_poll = tokio::time::Instant::now() + self.config.poll_interval;
        loop {
            if *shutdown.borrow() {
                break;
            }
            while tasks.try_join_next().is_some() {}
            if let Some(kind) = look {
                let left = self.look_for_runs(kind, &mut tasks).await;
                self.backlog.store(left.is_some(), Ordering::SeqCst);
                owed = match (owed, left) {
                    (o, Some(l)) => Some(o.map_or(l, |o| o.and(l))),
                    (Some(o), None) if !kind.covers(o) => Some(o),
                    _ => None,
                };
            }
            if let Some(to_worker) = to_worker.take() {
                *self.lock_adopt() = Some(to_worker);
            }
            look = tokio::select! {
                _ = self.wake.notified() => Some(Look::Free),
                // Other processes' new work reaches this one by notice while the relay is
                // live; only runs whose holder died are found by looking.
                _ = tokio::time::sleep_until(next_poll) => {
                    next_poll = tokio::time::Instant::now() + self.config.poll_interval;
                    Some(if self.relay_live() {
                        Look::Expired
                    } else {
                        Look::Everything
                    })
                }
                _ = shutdown.changed() => None,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => owed.take(),
                Some((claimed, mail, lost)) = adopted.recv() => {
                    self.spawn_driver(&mut tasks, claimed, mail, lost);
                    None
                }
            };
        }
        // No more runs are handed over; those already are driven (and let go at once).
        self.lock_adopt().take();
        adopted.close();
        while let Some((claimed, mail, lost)) = adopted.recv().await {
            self.spawn_driver(&mut tasks, claimed, mail, lost);
        }
        self.draining.send_replace(true);
        let in_flight = tasks.len();
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !drained {
            warn!(
                runs = tasks.len(),
                grace_secs = self.config.shutdown_grace.as_secs_f64(),
                "steps still running after the shutdown grace; cutting them off"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        // Whatever is still leased here (steps cut off) goes now; the fence moves, so a
        // write from a step that was cut off could not land anyway.
        let cut_off = match self.store.release_owner(&self.config.owner).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "could not let go of leases at shutdown");
                0
            }
        };
        info!(in_flight, cut_off, "worker stopped; runs let go");
        WorkerStopped { in_flight, cut_off }
    }

    /// Claims runs for the free slots, as many as one statement gives, and drives each.
    /// Returns the part of the look left undone when the slots ran out (runs may be left).
    async fn look_for_runs(
        self: &Arc<Self>,
        kind: Look,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> Option<Look> {
        let passes: &[bool] = match kind {
            Look::Free => &[false],
            Look::Expired => &[true],
            Look::Everything => &[false, true],
        };
        for &expired in passes {
            // From this pass on.
            let rest = if expired { Look::Expired } else { kind };
            // Each round takes at least one run or ends the pass.
            loop {
                let free = self.reserve_slots(self.config.max_concurrent_runs);
                if free == 0 {
                    return Some(rest);
                }
                let mut exclude: Vec<String> = self.pass_over_active(!expired);
                exclude.extend(self.lock_newer().iter().cloned());
                let claimed = match self
                    .store
                    .claim_runs(
                        &self.config.owner,
                        self.lease_ttl_ms(),
                        &exclude,
                        &self.workflow_names,
                        free,
                        expired,
                    )
                    .await
                {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.release_slots(free);
                        warn!(error = %e, "claim failed");
                        return None;
                    }
                };
                let (taken, more) = (claimed.runs.len(), claimed.more);
                self.release_slots(free - taken);
                for claimed in claimed.runs {
                    let lost = self.activate(&claimed.run.id);
                    self.spawn_driver(tasks, claimed, None, lost);
                }
                if !more || taken == 0 {
                    break;
                }
                // The slots filled with runs left to take: the rest of the look comes when a
                // run ends here. Fewer than asked with some left (a store takes so many at a
                // time): another round.
                if taken == free {
                    return Some(rest);
                }
            }
        }
        None
    }

    /// Whether a worker runs here and takes runs: it has made its first look for runs left
    /// waiting, and is not shutting down.
    pub fn is_taking_runs(&self) -> bool {
        self.lock_adopt().is_some()
    }

    /// How many runs this process drives right now (steps running or about to).
    pub fn runs_driven_here(&self) -> usize {
        self.lock_active().len()
    }

    /// Whether this process is shutting down (drivers let go at their next step boundary).
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Drives one run in this process until it finishes, parks at a wait, or is found leased
    /// by another live process; returns its status then. For tools that own a single run,
    /// like the CLI: no other run is touched. Leases this owner held in an earlier
    /// incarnation are taken back first.
    pub async fn drive_run(self: &Arc<Self>, run_id: &str) -> Result<RunStatus, EngineError> {
        self.store.release_owner(&self.config.owner).await?;
        // Bounded: each pass either drives the run a step further or returns.
        for _ in 0..10_000 {
            match self
                .store
                .claim_run(run_id, &self.config.owner, self.lease_ttl_ms())
                .await?
            {
                Some((run, lease)) => {
                    let lost = self.activate(run_id);
                    let switch = lost.0.clone();
                    self.drive(run, lease, None, None, lost).await;
                    self.deactivate(run_id, &switch);
                    if self.lock_newer().contains(run_id) {
                        let run = self.store.get_run(run_id).await?;
                        let wf = run.as_ref().and_then(|r| self.workflows.get(&r.workflow));
                        return Err(EngineError::NewerFormat {
                            run: run_id.to_string(),
                            format: run.as_ref().map_or(0, |r| r.format),
                            supported: wf.map_or(0, |w| w.format()),
                        });
                    }
                }
                None => {
                    let run = self
                        .store
                        .get_run(run_id)
                        .await?
                        .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
                    return Ok(run.status);
                }
            }
        }
        let run = self.store.get_run(run_id).await?;
        Ok(run.map_or(RunStatus::Running, |r| r.status))
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashMap<String, Driving>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a run this process is about to drive; the switch turns when it must let go.
    fn activate(&self, run_id: &str) -> (watch::Sender<bool>, watch::Receiver<bool>) {
        let (lost_tx, lost_rx) = watch::channel(false);
        self.lock_active().insert(
            run_id.to_string(),
            Driving {
                lost: lost_tx.clone(),
                passed_over: false,
                ended: false,
            },
        );
        (lost_tx, lost_rx)
    }

    /// The driver of `run_id` let go. If a look for free runs passed over it meanwhile (the
    /// run parked and was woken by a delivery before its driver was done, say), the worker
    /// looks again: nothing else would tell it the run is free. A run that ended here is
    /// never free again: no look.
    /// Only the entry `lost` (the driver's switch) belongs to is removed: a driver still
    /// letting go of a run parked again leaves alone the entry of the one that took it up.
    fn deactivate(&self, run_id: &str, lost: &watch::Sender<bool>) {
        let look_again = {
            let mut active = self.lock_active();
            match active.get(run_id) {
                Some(d) if d.lost.same_channel(lost) => active
                    .remove(run_id)
                    .is_some_and(|d| d.passed_over && !d.ended),
                _ => false,
            }
        };
        if look_again {
            self.wake.notify_one();
        }
    }

    /// Tells the worker that a delivery may have made run `run_id` free to claim. A run driven
    /// here is not free until its driver lets go, so a look now would find nothing: it is
    /// marked for a look then instead.
    fn delivered(&self, run_id: &str) {
        if let Some(d) = self.lock_active().get_mut(run_id) {
            d.passed_over = true;
            return;
        }
        self.wake.notify_one();
    }

    /// Drives a claimed run in a slot already taken for it; the slot is given back when its
    /// driver lets go.
    fn spawn_driver(
        self: &Arc<Self>,
        tasks: &mut tokio::task::JoinSet<()>,
        Claimed {
            run,
            lease,
            pending,
        }: Claimed,
        mail: Option<KnownMail>,
        lost: (watch::Sender<bool>, watch::Receiver<bool>),
    ) {
        let done = DriverDone {
            engine: self.clone(),
            run_id: lease.run_id.clone(),
            lost: lost.0.clone(),
        };
        let me = self.clone();
        tasks.spawn(async move {
            let _done = done;
            me.drive(run, lease, pending, mail, lost).await;
        });
    }

    /// Takes up to `wanted` of the free slots; returns how many it took.
    fn reserve_slots(&self, wanted: usize) -> usize {
        let max = self.config.max_concurrent_runs;
        let mut took = 0;
        let _ = self
            .slots_taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                took = wanted.min(max.saturating_sub(taken));
                Some(taken + took)
            });
        took
    }

    /// Gives back `n` slots taken with [`Engine::reserve_slots`].
    fn release_slots(&self, n: usize) {
        let _ = self
            .slots_taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                debug_assert!(taken >= n, "{n} slots given back of {taken} taken");
                Some(taken.saturating_sub(n))
            });
    }

    fn lock_adopt(&self) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<Adopted>>> {
        self.adopt.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a run claimed outside the worker's looks, when a worker runs here (and is
    /// not draining) and has one free.
    fn eager_slot(self: &Arc<Self>) -> Option<EagerSlot> {
        if self.backlog.load(Ordering::SeqCst) {
            return None;
        }
        let to_worker = self.lock_adopt().clone()?;
        // Built only once the slot is taken: dropping one gives a slot back.
        (self.reserve_slots(1) == 1).then(|| EagerSlot {
            engine: self.clone(),
            to_worker: Some(to_worker),
        })
    }

    fn lock_not_chained(&self) -> std::sync::MutexGuard<'_, HashSet<(String, &'static str)>> {
        self.not_chained.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_newer(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.newer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The runs a look must pass over (driven here); marked as passed over by a look for
    /// free runs (`free`), which could have claimed them were they not driven here.
    fn pass_over_active(&self, free: bool) -> Vec<String> {
        let mut active = self.lock_active();
        if free {
            active.values_mut().for_each(|d| d.passed_over = true);
        }
        active.keys().cloned().collect()
    }

    fn lease_ttl_ms(&self) -> i64 {
        self.config.lease_ttl.as_millis() as i64
    }

    /// Drives one claimed run until it finishes, parks, or the lease is lost.
    async fn drive(
        self: &Arc<Self>,
        run: RunRecord,
        lease: Lease,
        pending: Option<Vec<PendingEvent>>,
        mail: Option<KnownMail>,
        (lost_tx, lost_rx): (watch::Sender<bool>, watch::Receiver<bool>),
    ) {
        let Some(wf) = self.workflows.get(&run.workflow).cloned() else {
            // Another process may know this workflow; let it have the run.
            warn!(run = %run.id, workflow = %run.workflow, "claimed a run of an unknown workflow");
            let _ = self.store.release_lease(&lease).await;
            return;
        };
        if run.format > wf.format() {
            // Written by a newer version during a deploy: a process of that version drives it.
            warn!(run = %run.id, format = run.format, reads_up_to = wf.format(),
                  "run stored in a newer format; leaving it to a newer process");
            self.lock_newer().insert(run.id.clone());
            let _ = self.store.release_lease(&lease).await;
            return;
        }
        let (run, pending) = if run.format < wf.format() {
            // The upgrade rewrites the pending events: they are read again.
            match self.upgrade(&wf, run, &lease).await {
                Ok(Some(run)) => (run, None),
                Ok(None) => return,
                Err(e) => {
                    warn!(run = %lease.run_id, error = %e, "could not upgrade run");
                    let _ = self.store.release_lease(&lease).await;
                    return;
                }
            }
        } else {
            (run, pending)
        };
        let heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
            self.store.clone(),
            lease.clone(),
            self.config.lease_ttl,
            lost_tx,
        )));
        let id = run.id.clone();
        let inbox = pending.map(Inbox::first_page).unwrap_or_default();
        let LetGo { release, told } = match self
            .drive_steps(&wf, run, inbox, mail, &lease, lost_rx)
            .await
        {
            Ok(let_go) => let_go,
            Err(StoreError::Unavailable(e)) => {
                // Nothing the step did counts as an attempt: the run is let go as soon as the
                // database is back, and claimed again (here or elsewhere) from what it holds.
                warn!(run = %id, error = %e, "database unavailable; run let go when it is back");
                drop(heartbeat);
                self.release_when_back(&lease).await;
                self.notify(&id);
                self.wake.notify_one();
                return;
            }
            Err(e) => {
                warn!(run = %id, error = %e, "stopped driving run");
                LetGo::UNTOLD
            }
        };
        drop(heartbeat);
        if release {
            let _ = self.store.release_lease(&lease).await;
        }
        if !told {
            self.notify(&id);
        } else if release {
            // The lease was let go: the record changed, the stream did not.
            self.signals.touch(&id);
        }
    }

    /// Runs the claimed run's steps one after another. While the lease is held nobody else
    /// writes the run's state or its step inbox, so both are kept here between steps rather
    /// than read back: a step costs its own work and one commit. Quick steps share one: a
    /// step whose only result is one event for the next step is not committed at once; the
    /// next step runs on that event, and both commit together (see [`Chain`]). Returns how
    /// it let go of the run.
    async fn drive_steps(
        self: &Arc<Self>,
        wf: &Arc<dyn ErasedWorkflow>,
        mut run: RunRecord,
        mut inbox: Inbox,
        mut known_mail: Option<KnownMail>,
        lease: &Lease,
        lost: watch::Receiver<bool>,
    ) -> Result<LetGo, StoreError> {
        let deadline = run
            .deadline_at
            .map(|at| Instant::now() + Duration::from_millis((at - now_ms()).max(0) as u64));
        let mut draining = self.draining.subscribe();
        let mut chain: Option<Chain> = None;
        // A step cut off by its time limit may have stored a journaled call's events that
        // it never told: from then on, what this driver tells is a raise, not a touch.
        let mut cut_off = false;
        loop {
            if *lost.borrow() {
                return Ok(LetGo::GONE);
            }
            if *draining.borrow_and_update() {
                debug!(run = %run.id, "shutting down; letting the run go");
                if let Some(c) = chain.take() {
                    self.commit_chain(lease, &mut run, &mut inbox, c, None)
                        .await?;
                }
                return Ok(LetGo {
                    release: true,
                    told: !cut_off,
                });
            }
            if run.status != RunStatus::Running {
                return Ok(LetGo {
                    release: true,
                    told: !cut_off,
                });
            }
            let pending = match &chain {
                // The event the last step sent, not stored: it has no id.
                Some(c) => PendingEvent {
                    id: 0,
                    event_type: c.next.0.clone(),
                    payload: c.next.1.clone(),
                    attempts: 0,
                },
                None => match inbox.next(self.store.as_ref(), &run.id).await? {
                    Some(pending) => pending,
                    None => {
                        self.fail_run(
                            lease,
                            &run,
                            "workflow",
                            "no step sent an event or stopped the run",
                            1,
                            0.0,
                        )
                        .await?;
                        return Ok(LetGo::GONE);
                    }
                },
            };
            let Some((step, step_timeout, retry)) = wf.step_for(&pending.event_type) else {
                let msg = format!("no step accepts {}", pending.event_type);
                self.fail_run(lease, &run, "workflow", &msg, 1, 0.0).await?;
                return Ok(LetGo::GONE);
            };
            if let Some(d) = deadline
                && Instant::now() >= d
            {
                if let Some(c) = chain.take() {
                    self.commit_chain(lease, &mut run, &mut inbox, c, None)
                        .await?;
                }
                self.time_out(lease, &run, step).await?;
                return Ok(LetGo::GONE);
            }
            let ahead = chain.is_some();
            if ahead {
                // Kept out of chains until it is simply done: if it panics, the steps run
                // before it would be lost with it at every try; not chained, they commit.
                self.lock_not_chained().insert((run.workflow.clone(), step));
            }
            let attempt = pending.attempts as u32 + 1;
            let parts = CtxParts {
                store: self.store.clone(),
                lease: lease.clone(),
                workflow: run.workflow.clone(),
                step,
                scope: pending.id,
                attempt,
                deadline,
                journal_empty: ahead || inbox.first_run(pending.id),
                signals: self.signals.clone(),
                known_mail: known_mail.clone(),
                ahead_of_commit: ahead,
                mail_taken_ahead: chain
                    .as_ref()
                    .is_some_and(|c| !c.commit.mailbox_consumed.is_empty()),
            };
            // The message that woke the run is for the step it woke only; an empty mailbox
            // stays known empty (a delivery since moves its counter, and a park sees that).
            if matches!(known_mail, Some(KnownMail::Woke { .. })) {
                known_mail = None;
            }
            let mut limit = match deadline {
                Some(d) => step_timeout.min(d.saturating_duration_since(Instant::now())),
                None => step_timeout,
            };
            // A step run ahead of the commit before it holds back that commit's events: it
            // has until the chain's wait is over.
            if let Some(c) = &chain {
                limit = limit.min(self.config.chain_wait.saturating_sub(c.since.elapsed()));
            }
            let started = Instant::now();
            let started_at = now_ms();
            let span = tracing::info_span!("step", otel.name = step, run_id = %run.id,
                workflow = %run.workflow, step, attempt);
            if let Some(tracer) = &self.config.tracer {
                tracer.adopt(&span, &run.id);
            }
            debug!(parent: &span, "step start");
            let fut = wf
                .run_step(
                    parts,
                    &pending.event_type,
                    pending.payload.clone(),
                    run.state.clone(),
                )
                .instrument(span);
            let mut lost_wait = lost.clone();
            let outcome = tokio::select! {
                r = tokio::time::timeout(limit, fut) => r,
                _ = lost_wait.wait_for(|l| *l) => return Ok(LetGo::GONE),
            };
            let simply_done =
                matches!(&outcome, Ok((Ok(()), e)) if e.error.is_none() && !e.ran_ahead);
            if ahead && simply_done {
                self.lock_not_chained()
                    .remove(&(run.workflow.clone(), step));
            }
            if let Some(c) = chain.take_if(|_| !simply_done) {
                // Run ahead and not simply done (it needs its event stored, waits, took too
                // long, or failed): what ran before it is committed with its event, and it
                // runs again on the stored event, as after a crash. A step that needed its
                // event or ran out of time is not run ahead again in this process.
                let not_for_chains = match &outcome {
                    Ok((Err(StepError::RanAhead), _)) => true,
                    Ok((_, effects)) => effects.ran_ahead,
                    Err(_) => true,
                };
                if !not_for_chains {
                    self.lock_not_chained()
                        .remove(&(run.workflow.clone(), step));
                }
                // A step that waits parks the run in the same commit (unless mail arrived
                // since it looked): it runs again when woken, as it would have anyway.
                let park = match &outcome {
                    Ok((
                        Err(StepError::Suspend {
                            event_type,
                            mailbox_seq,
                        }),
                        effects,
                    )) if !effects.ran_ahead => Some((event_type.clone(), *mailbox_seq)),
                    _ => None,
                };
                let parking = park.clone();
                if self
                    .commit_chain(lease, &mut run, &mut inbox, c, park)
                    .await?
                {
                    let event_type = parking.map(|(t, _)| t).unwrap_or_default();
                    debug!(run = %run.id, step, %event_type, "parked");
                    telemetry::step_ran(&run.workflow, step, "parked", started.elapsed());
                    // Its news said so.
                    return Ok(LetGo {
                        release: false,
                        told: !cut_off,
                    });
                }
                if parking.is_some() {
                    // Mail arrived: the step runs again and looks.
                    known_mail = None;
                }
                continue;
            }
            let (result, effects) = match outcome {
                Ok(pair) => pair,
                Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    self.time_out(lease, &run, step).await?;
                    return Ok(LetGo::GONE);
                }
                Err(_) => {
                    cut_off = true;
                    (
                        Err(StepError::Failed(format!(
                            "step timed out after {:.1}s",
                            limit.as_secs_f64()
                        ))),
                        Default::default(),
                    )
                }
            };
            let result = match (result, &effects.error) {
                (Ok(()), Some(e)) => Err(StepError::Failed(e.clone())),
                (r, _) => r,
            };
            match result {
                Ok(()) => {
                    let outcome = match effects.stop.clone() {
                        Some(env) => StepOutcome::Completed(env),
                        None => StepOutcome::Continue,
                    };
                    let done = !matches!(outcome, StepOutcome::Continue);
                    let commit = StepCommit {
                        consumed: Some(pending.id),
                        step: step.to_string(),
                        attempt: attempt as i64,
                        started_at,
                        state: effects.state,
                        stream: effects.stream,
                        sent: effects.sent,
                        mailbox_consumed: effects.mailbox_consumed,
                        outcome,
                        chained: Vec::new(),
                        park: None,
                    };
                    crate::context::crash_point(step, "commit").await;
                    let mut c = match chain.take() {
                        Some(c) => c.then(commit, step, started),
                        None => Chain::first(commit, step, started),
                    };
                    if !done && self.may_run_ahead(wf, &run.workflow, &c, &inbox, deadline) {
                        // The next step takes the one event sent, before it is stored.
                        if let Some(state) = &c.commit.state {
                            run.state = state.clone();
                        }
                        c.next = c.commit.sent.pop().unwrap_or_default();
                        chain = Some(c);
                        continue;
                    }
                    if self.commit_steps(lease, &mut run, &mut inbox, c).await? {
                        return Ok(LetGo {
                            release: false,
                            told: !cut_off,
                        });
                    }
                }
                Err(StepError::RanAhead) => {
                    // Only a step run ahead of its event's commit ends so; handled above.
                    return Err(StoreError::Backend(format!(
                        "step {step} ran ahead of a commit that was not pending"
                    )));
                }
                Err(StepError::Suspend {
                    event_type,
                    mailbox_seq,
                }) => match self.store.suspend(lease, &event_type, mailbox_seq).await? {
                    SuspendOutcome::Suspended => {
                        debug!(run = %run.id, step, %event_type, "parked");
                        telemetry::step_ran(&run.workflow, step, "parked", started.elapsed());
                        // A park stores no event: only the record changed.
                        if cut_off {
                            self.notify(&run.id);
                        } else {
                            self.signals.touch(&run.id);
                        }
                        return Ok(LetGo {
                            release: false,
                            told: true,
                        });
                    }
                    SuspendOutcome::MailArrived => {
                        known_mail = None;
                        continue;
                    }
                },
                Err(StepError::LeaseLost) => return Ok(LetGo::GONE),
                Err(StepError::Store(StoreError::Unavailable(e))) => {
                    return Err(StoreError::Unavailable(e));
                }
                Err(
                    err @ (StepError::Failed(_) | StepError::Store(_) | StepError::Permanent(_)),
                ) => {
                    let msg = err.to_string();
                    if err.is_retryable() && attempt < retry.max_attempts {
                        warn!(run = %run.id, step, attempt, error = %msg, "step failed; retrying");
                        telemetry::step_ran(&run.workflow, step, "retried", started.elapsed());
                        self.store
                            .record_attempt_failure(lease, pending.id, &msg)
                            .await?;
                        inbox.failed(pending.id);
                        let mut lost_wait = lost.clone();
                        tokio::select! {
                            _ = tokio::time::sleep(retry.backoff(attempt + 1)) => {}
                            _ = lost_wait.wait_for(|l| *l) => return Ok(LetGo::GONE),
                            _ = draining.wait_for(|d| *d) => return Ok(LetGo::UNTOLD),
                        }
                    } else {
                        warn!(run = %run.id, step, attempt, error = %msg, "step failed; run failed");
                        telemetry::step_ran(&run.workflow, step, "failed", started.elapsed());
                        let elapsed = started.elapsed().as_secs_f64();
                        self.fail_run(lease, &run, step, &msg, attempt, elapsed)
                            .await?;
                        return Ok(LetGo::GONE);
                    }
                }
            }
        }
    }

    /// Whether the next step may run on the one event `c`'s last step sent, before it is
    /// stored: nothing else is pending, the chain is short and young enough to give the step
    /// at least half the chain's wait, the run's deadline is not near, and that step has not
    /// needed its event stored before.
    fn may_run_ahead(
        &self,
        wf: &Arc<dyn ErasedWorkflow>,
        workflow: &str,
        c: &Chain,
        inbox: &Inbox,
        deadline: Option<Instant>,
    ) -> bool {
        let ([(event_type, _)], Some(head)) = (c.commit.sent.as_slice(), c.commit.consumed) else {
            return false;
        };
        let wait = self.config.chain_wait;
        c.ran.len() < CHAIN_STEPS
            && c.since.elapsed() < wait / 2
            && deadline.is_none_or(|d| d > Instant::now() + wait)
            && inbox.holds_only(head)
            && !self.is_draining()
            && wf.step_for(event_type).is_some_and(|(next, ..)| {
                !self
                    .lock_not_chained()
                    .contains(&(workflow.to_string(), next))
            })
    }

    /// Commits the steps of `c` and takes note of it here: their events go to this
    /// process's readers, the run's state and sent events to the driver's copies. Returns
    /// whether the run ended or parked (no longer driven here).
    async fn commit_steps(
        &self,
        lease: &Lease,
        run: &mut RunRecord,
        inbox: &mut Inbox,
        c: Chain,
    ) -> Result<bool, StoreError> {
        let Chain { commit, ran, .. } = c;
        let receipt = self.store.commit_step(lease, &commit).await?;
        self.publish(&run.id, &commit, &receipt.seqs, receipt.parked);
        for (step, started) in ran {
            telemetry::step_ran(&run.workflow, step, "committed", started.elapsed());
        }
        if !matches!(commit.outcome, StepOutcome::Continue) {
            self.ended(run, "completed");
            return Ok(true);
        }
        if receipt.parked {
            return Ok(true);
        }
        if let Some(state) = commit.state {
            run.state = state;
        }
        if let Some(consumed) = commit.consumed {
            inbox.committed(consumed, receipt.sent_ids.into_iter().zip(commit.sent));
        }
        Ok(false)
    }

    /// Commits a chain whose next step is not to be chained to it after all: with that
    /// step's event stored as sent, so the step runs on it as it would after a crash; and,
    /// with `park`, parks the run waiting for that event type in the same write, unless mail
    /// arrived since its mailbox counter. Returns whether the run parked.
    async fn commit_chain(
        &self,
        lease: &Lease,
        run: &mut RunRecord,
        inbox: &mut Inbox,
        mut c: Chain,
        park: Option<(String, i64)>,
    ) -> Result<bool, StoreError> {
        c.commit.sent.push(std::mem::take(&mut c.next));
        c.commit.park = park;
        self.commit_steps(lease, run, inbox, c).await
    }

    /// Lets go of `lease` once the database answers again, trying with backoff until the
    /// lease would have expired anyway (then whoever claims it first carries on).
    async fn release_when_back(&self, lease: &Lease) {
        let give_up = Instant::now() + self.config.lease_ttl;
        let mut wait = Duration::from_millis(100);
        loop {
            match self.store.release_lease(lease).await {
                Err(StoreError::Unavailable(_)) if Instant::now() < give_up => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    warn!(run = %lease.run_id, error = %e, "could not let the run go");
                    return;
                }
                Ok(_) => return,
            }
        }
    }

    /// Rewrites a run stored in an older format in the workflow's current one: its state, its
    /// pending step events and their journaled results, in one fenced write. A value the
    /// workflow cannot upgrade fails the run, saying why. None: the run has ended.
    async fn upgrade(
        &self,
        wf: &Arc<dyn ErasedWorkflow>,
        mut run: RunRecord,
        lease: &Lease,
    ) -> Result<Option<RunRecord>, StoreError> {
        let from = run.format;
        let pending = self.store.pending_events(&run.id, 10_000).await?;
        let scopes: Vec<i64> = pending.iter().map(|p| p.id).collect();
        let journal = self.store.journal_entries(&run.id, &scopes).await?;
        let upgraded = (|| {
            let state = wf.upgrade(from, Stored::State, run.state.clone())?;
            let inbox = pending
                .into_iter()
                .map(|p| {
                    Ok((
                        p.id,
                        wf.upgrade(from, Stored::StepEvent(&p.event_type), p.payload)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let journal = journal
                .into_iter()
                .map(|(scope, key, v)| {
                    let v = wf.upgrade(from, Stored::CallResult(&key), v)?;
                    Ok((scope, key, v))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok::<_, String>(RunUpgrade {
                format: wf.format(),
                state,
                inbox,
                journal,
            })
        })();
        match upgraded {
            Ok(upgrade) => {
                self.store.upgrade_run(lease, &upgrade).await?;
                info!(run = %run.id, from, to = upgrade.format, "run upgraded to the current stored format");
                run.state = upgrade.state;
                run.format = upgrade.format;
                Ok(Some(run))
            }
            Err(why) => {
                let msg = format!(
                    "the run was stored in format {from} and cannot be read in format {}: {why}",
                    wf.format()
                );
                warn!(run = %run.id, error = %msg, "run cannot be upgraded; failing it");
                self.fail_run(lease, &run, "upgrade", &msg, 1, 0.0).await?;
                self.notify(&run.id);
                Ok(None)
            }
        }
    }

    async fn fail_run(
        &self,
        lease: &Lease,
        run: &RunRecord,
        step: &str,
        message: &str,
        attempts: u32,
        elapsed_seconds: f64,
    ) -> Result<(), StoreError> {
        let event = Envelope::of(&WorkflowFailedEvent {
            step_name: step.to_string(),
            exception: ExceptionInfo {
                exception_type: "StepError".to_string(),
                exception_message: message.to_string(),
            },
            attempts,
            elapsed_seconds,
        })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        self.finish(
            lease,
            run,
            step,
            StepOutcome::Failed {
                error: message.to_string(),
                event,
            },
        )
        .await?;
        self.ended(run, "failed");
        self.stopped(run, Stopped::Failed(message.to_string()))
            .await;
        Ok(())
    }

    async fn time_out(&self, lease: &Lease, run: &RunRecord, step: &str) -> Result<(), StoreError> {
        let timeout = run
            .deadline_at
            .map(|d| (d - run.created_at) as f64 / 1000.0)
            .unwrap_or(0.0);
        let event = Envelope::of(&WorkflowTimedOutEvent {
            timeout,
            active_steps: vec![step.to_string()],
        })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let error = format!("run timed out after {timeout:.1}s in step {step}");
        self.finish(
            lease,
            run,
            step,
            StepOutcome::Failed {
                error: error.clone(),
                event,
            },
        )
        .await?;
        self.ended(run, "timed_out");
        self.stopped(run, Stopped::Failed(error)).await;
        Ok(())
    }

    /// Runs the workflow's hook for a run that was cancelled or failed, bounded in time.
    async fn stopped(&self, run: &RunRecord, how: Stopped) {
        let Some(wf) = self.workflows.get(&run.workflow) else {
            return;
        };
        let hook = wf.on_stopped(run.state.clone(), how);
        if tokio::time::timeout(STOPPED_HOOK_LIMIT, hook)
            .await
            .is_err()
        {
            warn!(run = %run.id, "the stopped run's hook did not finish in time");
        }
    }

    /// Counts a run that ended here and closes its trace.
    fn ended(&self, run: &RunRecord, status: &'static str) {
        if let Some(d) = self.lock_active().get_mut(&run.id) {
            d.ended = true;
        }
        telemetry::run_ended(&run.workflow, status);
        if let Some(tracer) = &self.config.tracer {
            tracer.ended(&run.id, &run.workflow, run.created_at, status);
        }
    }

    async fn finish(
        &self,
        lease: &Lease,
        run: &RunRecord,
        step: &str,
        outcome: StepOutcome,
    ) -> Result<(), StoreError> {
        let commit = StepCommit {
            consumed: None,
            step: step.to_string(),
            attempt: 0,
            started_at: now_ms(),
            state: None,
            stream: Vec::new(),
            sent: Vec::new(),
            mailbox_consumed: Vec::new(),
            outcome,
            chained: Vec::new(),
            park: None,
        };
        self.store.commit_step(lease, &commit).await?;
        self.notify(&run.id);
        Ok(())
    }
}

/// Renews the lease every third of its lifetime; reports loss so the step is abandoned.
async fn heartbeat(
    store: Arc<dyn RunStore>,
    lease: Lease,
    ttl: Duration,
    lost: watch::Sender<bool>,
) {
    let ttl_ms = ttl.as_millis() as i64;
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store.renew_lease(&lease, ttl_ms).await {
            Ok(true) => {}
            Ok(false) => {
                let _ = lost.send(true);
                return;
            }
            // A transient failure: try again; the lease still has two thirds of its life.
            Err(e) => warn!(run = %lease.run_id, error = %e, "lease renewal failed"),
        }
    }
}

/// The run's pending step events, oldest first, as known to the process holding its lease.
/// Read from the store a page at a time; what a commit consumes and sends is applied here.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<PendingEvent>,
    /// Whether `queue` holds every pending event, so events sent by a commit go at its end;
    /// otherwise the next page is read from the store once `queue` runs out.
    complete: bool,
    /// Events sent by this lease holder's commits that no step has run on yet: nothing can
    /// be journaled under them.
    unrun: HashSet<i64>,
}

/// Steps run and not committed yet: a step whose only result was one event for the next
/// step, and the steps run on such events after it, up to [`CHAIN_STEPS`] and for at most
/// [`EngineConfig::chain_wait`] (the first one's events wait for the commit). They are
/// committed as one [`StepCommit`]; the events passed between them are never stored. A crash
/// before the commit runs them again from the first one's event, as it would that step alone.
struct Chain {
    commit: StepCommit,
    /// The event the next step runs on, taken out of `commit.sent`.
    next: (String, Value),
    /// When its first step was done.
    since: Instant,
    /// Its steps, and when each started (for telemetry once committed).
    ran: Vec<(&'static str, Instant)>,
}

impl Chain {
    fn first(commit: StepCommit, step: &'static str, started: Instant) -> Chain {
        Chain {
            commit,
            next: Default::default(),
            since: Instant::now(),
            ran: vec![(step, started)],
        }
    }

    /// `step` ran on the chain's next event, with `c` as its result.
    fn then(mut self, c: StepCommit, step: &'static str, started: Instant) -> Chain {
        let merged = &mut self.commit;
        if c.state.is_some() {
            merged.state = c.state;
        }
        merged.stream.extend(c.stream);
        merged.sent = c.sent;
        merged.mailbox_consumed.extend(c.mailbox_consumed);
        merged.outcome = c.outcome;
        merged.chained.push(ChainedStep {
            step: c.step,
            attempt: c.attempt,
            started_at: c.started_at,
        });
        self.ran.push((step, started));
        self
    }
}

/// Steps committed together at most.
const CHAIN_STEPS: usize = 16;

/// A run this process drives.
struct Driving {
    /// The switch that makes its driver let go at once.
    lost: watch::Sender<bool>,
    /// A look for runs to claim left it out since it was claimed.
    passed_over: bool,
    /// The run ended while driven here.
    ended: bool,
}

/// What a worker looks for when it claims runs.
#[derive(Debug, Clone, Copy)]
enum Look {
    /// Runs nobody holds (one was started, sent mail, or let go).
    Free,
    /// Runs whose holder's lease ran out (it died or hangs).
    Expired,
    Everything,
}

impl Look {
    fn covers(self, other: Look) -> bool {
        matches!(
            (self, other),
            (Look::Everything, _) | (Look::Free, Look::Free) | (Look::Expired, Look::Expired)
        )
    }

    /// A look covering both.
    fn and(self, other: Look) -> Look {
        match (self, other) {
            (Look::Free, Look::Free) => Look::Free,
            (Look::Expired, Look::Expired) => Look::Expired,
            _ => Look::Everything,
        }
    }
}

/// How long a decision sent between two waits waits for the next one (see `send`).
const BETWEEN_WAITS_LIMIT: Duration = Duration::from_secs(2);

/// How long a workflow's `on_stopped` hook may take.
const STOPPED_HOOK_LIMIT: Duration = Duration::from_secs(10);

/// Pending events read from the store at a time.
const INBOX_PAGE: i64 = crate::store::CLAIM_INBOX_PAGE;

impl Inbox {
    /// The inbox of a run whose first page of pending events came with its claim.
    fn first_page(page: Vec<PendingEvent>) -> Inbox {
        Inbox {
            complete: (page.len() as i64) < INBOX_PAGE,
            queue: page.into(),
            unrun: HashSet::new(),
        }
    }

    async fn next(
        &mut self,
        store: &dyn RunStore,
        run_id: &str,
    ) -> Result<Option<PendingEvent>, StoreError> {
        if self.queue.is_empty() && !self.complete {
            let page = store.pending_events(run_id, INBOX_PAGE).await?;
            self.complete = (page.len() as i64) < INBOX_PAGE;
            self.queue.extend(page);
        }
        Ok(self.queue.front().cloned())
    }

    /// The front event was consumed by a commit that sent `sent` (id, type, payload).
    fn committed(&mut self, consumed: i64, sent: impl Iterator<Item = (i64, (String, Value))>) {
        if self.queue.front().is_some_and(|p| p.id == consumed) {
            self.queue.pop_front();
        }
        for (id, (event_type, payload)) in sent {
            self.unrun.insert(id);
            if self.complete {
                self.queue.push_back(PendingEvent {
                    id,
                    event_type,
                    payload,
                    attempts: 0,
                });
            }
        }
    }

    /// Whether a step is about to run on `pending` for the first time since this lease
    /// holder's commit sent it (a step run again, after a failure or on mail that arrived
    /// as it parked, may have journaled calls).
    fn first_run(&mut self, pending: i64) -> bool {
        self.unrun.remove(&pending)
    }

    /// Whether no event is pending but `id` (or none at all).
    fn holds_only(&self, id: i64) -> bool {
        self.complete && self.queue.iter().all(|p| p.id == id)
    }

    /// The front event's attempt failed and was recorded.
    fn failed(&mut self, pending: i64) {
        if let Some(p) = self.queue.front_mut()
            && p.id == pending
        {
            p.attempts += 1;
        }
    }
}
