use async_trait::async_trait;
use serde_json::Value;

use super::StoreResult;
use crate::event::Envelope;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Has work to do; claimable by any worker whose lease it is not under.
    Running,
    /// Suspended until an external event arrives; holds no lease, memory or task.
    Waiting,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => RunStatus::Running,
            "waiting" => RunStatus::Waiting,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

#[derive(Debug, Clone)]
pub struct RunRecord {
    pub id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub state: Value,
    /// The stop event's envelope once completed.
    pub result: Option<Envelope>,
    pub error: Option<String>,
    pub waiting_for: Option<String>,
    /// Sequence number the next streamed event will get.
    pub next_seq: i64,
    /// Messages delivered to the run so far (its mailbox counter).
    pub mailbox_seq: i64,
    /// The version of the workflow's stored forms the run's rows are in.
    pub format: u32,
    pub deadline_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    pub workflow: String,
    pub state: Value,
    pub start_type: String,
    pub start_payload: Value,
    pub deadline_at: Option<i64>,
    /// The workflow's current stored format.
    pub format: u32,
}

/// Ownership of a run. Every write made while driving a run carries it; the store refuses
/// the write when `fence` is no longer the run's current token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub run_id: String,
    pub owner: String,
    pub fence: i64,
}

/// An event sent to a step and not yet consumed by a committed step.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    pub id: i64,
    pub event_type: String,
    pub payload: Value,
    /// Failed attempts recorded so far.
    pub attempts: i64,
}

#[derive(Debug, Clone)]
pub enum StepOutcome {
    /// The run goes on with whatever events are pending.
    Continue,
    /// The run completed; the envelope is its result (also streamed as the last event).
    Completed(Envelope),
    /// The run failed; the envelope (a `WorkflowFailedEvent` or similar) is streamed last.
    Failed { error: String, event: Envelope },
}

/// Everything one step produced. Applied in one transaction, or not at all.
#[derive(Debug, Clone)]
pub struct StepCommit {
    /// The pending event the step consumed (None for run-level decisions such as a deadline).
    pub consumed: Option<i64>,
    pub step: String,
    pub attempt: i64,
    pub started_at: i64,
    pub state: Option<Value>,
    /// Events for the stream, in order; they get consecutive sequence numbers.
    pub stream: Vec<Envelope>,
    /// Events sent to other steps: (type, payload).
    pub sent: Vec<(String, Value)>,
    /// Mailbox messages the step consumed. Other pending messages of the same type are
    /// superseded in the same transaction, so of two conflicting decisions exactly one applies.
    pub mailbox_consumed: Vec<i64>,
    pub outcome: StepOutcome,
    /// Steps that ran after this one before it was committed, each on the one event the
    /// step before it sent, and are committed with it: their effects are merged into the
    /// fields above (the events they took were never stored), and each gets its own row in
    /// the step journal. Empty for a step committed on its own.
    pub chained: Vec<ChainedStep>,
    /// Parks the run after the commit, waiting for this event type, as
    /// [`RunStore::suspend`] would with this mailbox counter: unless mail arrived since, then
    /// the run stays running under the lease ([`Committed::parked`] says which). With a
    /// [`StepOutcome::Continue`] only.
    pub park: Option<(String, i64)>,
}

/// A step run on an event that was never stored: the one event the step before it sent, in
/// the same commit (see [`StepCommit::chained`]).
#[derive(Debug, Clone)]
pub struct ChainedStep {
    pub step: String,
    pub attempt: i64,
    pub started_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspendOutcome {
    Suspended,
    /// A message arrived after the step looked: the run stays claimed, run the step again.
    MailArrived,
}

#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub event_type: String,
    pub payload: Value,
    /// Deliveries with the same key apply once. None: every delivery is distinct.
    pub idempotency_key: Option<String>,
    /// A decision (an approval, say): refused with [`StoreError::Conflict`](super::StoreError::Conflict) while another
    /// message of its type is pending, so of two decisions sent at once one is taken and
    /// the other told so, rather than superseded in silence.
    pub exclusive: bool,
    /// The run's next stream sequence number when the sender looked (the run waiting for
    /// this message): refused with [`StoreError::Conflict`](super::StoreError::Conflict) if the run has moved on since, so
    /// a decision is never taken up by a later wait than the one it was sent for.
    pub at_seq: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliverOutcome {
    Accepted {
        message_id: i64,
    },
    Duplicate {
        message_id: i64,
    },
    /// Not delivered: an exclusive message sent with no `at_seq` while the run waits for
    /// none, after one of its type was taken up already. It can only be for the run's next
    /// wait: send it again with `at_seq` once the run waits (nothing was stored).
    BetweenWaits,
    RunNotFound,
    RunTerminal(RunStatus),
}

#[derive(Debug, Clone)]
pub struct MailboxView {
    /// The oldest pending message of the asked type.
    pub message: Option<(i64, Value)>,
    /// The run's mailbox counter when looked at; a suspend is refused if it moved since.
    pub mailbox_seq: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    Cancelled,
    NotFound,
    AlreadyTerminal(RunStatus),
}

/// A run a worker claimed.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub run: RunRecord,
    pub lease: Lease,
    /// The run's first pending step events (as [`RunStore::pending_events`] with its page
    /// size), when the store read them with the claim.
    pub pending: Option<Vec<PendingEvent>>,
}

/// What a look for runs to claim took, and whether it left any behind.
#[derive(Debug, Clone, Default)]
pub struct Claims {
    pub runs: Vec<Claimed>,
    /// Runs it could have taken may be left: more were claimable than it took. It may say
    /// true when none are (a store that cannot tell says so whenever the limit was reached;
    /// on Postgres, runs another claimer had locked at that moment count), never false when
    /// some are.
    pub more: bool,
}

/// Pending step events a claim reads with each run it takes.
pub const CLAIM_INBOX_PAGE: i64 = 64;

/// What a step commit gave out: the sequence numbers of its stream events and the ids of
/// the events it sent to other steps, in the order given.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    pub seqs: Vec<i64>,
    pub sent_ids: Vec<i64>,
    /// The commit parked the run (see [`StepCommit::park`]).
    pub parked: bool,
}

/// Where a run stands, for telling whether it moved and for deciding what may be sent to it,
/// without its state (which may be large): its stream's next sequence number, its status and
/// what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHead {
    pub id: String,
    pub workflow: String,
    pub next_seq: i64,
    pub status: RunStatus,
    pub waiting_for: Option<String>,
}

impl RunRecord {
    /// Where the run stands ([`RunHead`]).
    pub fn head(&self) -> RunHead {
        RunHead {
            id: self.id.clone(),
            workflow: self.workflow.clone(),
            next_seq: self.next_seq,
            status: self.status,
            waiting_for: self.waiting_for.clone(),
        }
    }
}

/// A run's rows rewritten in a newer stored format by the process holding its lease.
#[derive(Debug, Clone)]
pub struct RunUpgrade {
    pub format: u32,
    pub state: Value,
    /// Pending step events: (id, payload).
    pub inbox: Vec<(i64, Value)>,
    /// Journaled results: (scope, key, result).
    pub journal: Vec<(i64, String, Value)>,
}

#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: i64,
    pub envelope: Envelope,
    pub created_at: i64,
}

#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub workflows: Vec<String>,
    pub statuses: Vec<RunStatus>,
    pub limit: Option<i64>,
}

/// Runs, their step inbox, the call journal, the event log and the mailbox.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Creates a run with its start event pending. Fails with `Conflict` if the id exists.
    async fn create_run(&self, run: NewRun) -> StoreResult<RunRecord>;
    /// [`RunStore::create_run`] with the run's lease taken by `owner` in the same write
    /// (eager start): a process that starts a run with a slot free drives it at once, with no
    /// claim of its own. The claim holds the start event as the run's pending inbox.
    async fn create_claimed(&self, run: NewRun, owner: &str, ttl_ms: i64) -> StoreResult<Claimed>;
    async fn get_run(&self, id: &str) -> StoreResult<Option<RunRecord>>;
    /// Where a run stands ([`RunHead`]), without its state (which may be large): for readers
    /// that only ask whether it moved or ended, and for deciding what may be sent to it.
    async fn run_head(&self, id: &str) -> StoreResult<Option<RunHead>> {
        Ok(self.get_run(id).await?.map(|r| r.head()))
    }
    async fn list_runs(&self, filter: &RunFilter) -> StoreResult<Vec<RunRecord>>;
    /// How many runs are running and how many waiting, by workflow (for an operator's
    /// metrics: what every process on the store sees alike).
    async fn count_active_runs(&self) -> StoreResult<Vec<(String, RunStatus, i64)>>;
    /// Deletes a run and everything recorded for it. Called for runs that ended (the API
    /// cancels a run before purging it); a commit under way when it comes is waited for, and
    /// what it wrote goes too.
    async fn delete_run(&self, id: &str) -> StoreResult<bool>;

    /// Takes the leases of up to `limit` running runs, oldest (by creation) first, bumping
    /// their fences: runs nobody holds, or (`expired`) runs whose holder's lease ran out (a
    /// takeover). `exclude` lists runs this worker already drives; `workflows`, when not
    /// empty, the only workflows whose runs it takes (those it can drive: a run of another
    /// is left to a process that knows it, not taken and let go again). [`Claims::more`]
    /// says whether runs were left behind (a store may take fewer than `limit` at a time).
    #[allow(clippy::too_many_arguments)]
    async fn claim_runs(
        &self,
        owner: &str,
        ttl_ms: i64,
        exclude: &[String],
        workflows: &[String],
        limit: usize,
        expired: bool,
    ) -> StoreResult<Claims>;
    /// Takes the lease of one running run that nobody holds, or else of one whose lease
    /// expired.
    async fn claim_next(
        &self,
        owner: &str,
        ttl_ms: i64,
        exclude: &[String],
    ) -> StoreResult<Option<(RunRecord, Lease)>> {
        for expired in [false, true] {
            let claimed = self
                .claim_runs(owner, ttl_ms, exclude, &[], 1, expired)
                .await?;
            if let Some(c) = claimed.runs.into_iter().next() {
                return Ok(Some((c.run, c.lease)));
            }
        }
        Ok(None)
    }
    /// Takes the lease of one specific run if it is running and free.
    async fn claim_run(
        &self,
        id: &str,
        owner: &str,
        ttl_ms: i64,
    ) -> StoreResult<Option<(RunRecord, Lease)>>;
    /// Extends a lease; false when it was lost.
    async fn renew_lease(&self, lease: &Lease, ttl_ms: i64) -> StoreResult<bool>;
    async fn release_lease(&self, lease: &Lease) -> StoreResult<()>;
    /// Frees every lease `owner` holds: a restarted process calls it to take its runs back at
    /// once instead of waiting for expiry. Fences are bumped so a zombie cannot commit.
    async fn release_owner(&self, owner: &str) -> StoreResult<u64>;

    /// The run's pending step events, oldest first, at most `limit`.
    async fn pending_events(&self, run_id: &str, limit: i64) -> StoreResult<Vec<PendingEvent>>;
    /// Records a failed attempt of a step on its pending event (fenced).
    async fn record_attempt_failure(
        &self,
        lease: &Lease,
        pending_id: i64,
        error: &str,
    ) -> StoreResult<()>;
    /// Applies a step's results atomically (fenced), in one round trip to the database where
    /// it allows.
    async fn commit_step(&self, lease: &Lease, commit: &StepCommit) -> StoreResult<Committed>;
    /// Parks the run until a message of `event_type` arrives, releasing the lease (fenced).
    async fn suspend(
        &self,
        lease: &Lease,
        event_type: &str,
        seen_mailbox_seq: i64,
    ) -> StoreResult<SuspendOutcome>;

    async fn journal_get(&self, run_id: &str, scope: i64, key: &str) -> StoreResult<Option<Value>>;
    /// The journaled results of the given step invocations: (scope, key, result).
    async fn journal_entries(
        &self,
        run_id: &str,
        scopes: &[i64],
    ) -> StoreResult<Vec<(i64, String, Value)>>;
    /// Rewrites a run's state, pending step events and journaled results in a newer stored
    /// format, and records the format, in one transaction; fenced by the lease.
    async fn upgrade_run(&self, lease: &Lease, upgrade: &RunUpgrade) -> StoreResult<()>;
    /// Stores a call result (fenced), and appends `stream` to the run's stream in the same
    /// transaction, so the stream shows the call as soon as it is done. The first stored
    /// result for a key wins and is returned; a put that loses writes no events. Returns the
    /// stored result and the last sequence number written, if any.
    async fn journal_put(
        &self,
        lease: &Lease,
        scope: i64,
        key: &str,
        value: &Value,
        stream: &[crate::event::Envelope],
    ) -> StoreResult<(Value, Option<i64>)>;

    /// Appends `stream` to the run's stream now (fenced), outside any step commit: the live
    /// part of a call that is still running. Returns the last sequence number written.
    async fn append_stream(
        &self,
        lease: &Lease,
        stream: &[crate::event::Envelope],
    ) -> StoreResult<Option<i64>>;

    async fn deliver(&self, run_id: &str, message: NewMessage) -> StoreResult<DeliverOutcome>;
    /// The id of the message delivered to run `run_id` under idempotency key `key`, if one
    /// was: a retry of it is answered as it was, whatever the run has done since.
    async fn delivered_with_key(&self, run_id: &str, key: &str) -> StoreResult<Option<i64>>;
    /// [`RunStore::deliver`] to a run waiting for the message's type, taking the run's lease
    /// for `owner` in the same write (eager resume): the process the message reached drives
    /// the run on at once, with no claim of its own. Applies only while the run waits for
    /// this type and the message would be accepted; otherwise nothing is written and None
    /// says to deliver it the ordinary way. Returns the stored message's id and the claim.
    async fn deliver_claiming(
        &self,
        run_id: &str,
        message: &NewMessage,
        owner: &str,
        ttl_ms: i64,
    ) -> StoreResult<Option<(i64, Claimed)>>;
    async fn mailbox_peek(&self, run_id: &str, event_type: &str) -> StoreResult<MailboxView>;

    /// Stream events with `seq > after`, oldest first, at most `limit`.
    async fn events_after(
        &self,
        run_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>>;

    /// Runs changed (new stream events, a new status) at or after `since_ms`, at most
    /// `limit`: for a process that looks for other processes' changes by polling.
    async fn changed_since(&self, since_ms: i64, limit: i64) -> StoreResult<Vec<RunHead>>;

    /// Cancels a running or waiting run and streams a `WorkflowCancelledEvent`.
    async fn cancel_run(&self, id: &str, cancelled: Envelope) -> StoreResult<CancelOutcome>;
}
