//! # fathom-engine: durable, event-driven workflow execution
//!
//! A [`Workflow`] is a set of typed steps, each run for every event of the type it accepts. A
//! run starts with a start event; steps change the run's typed state through
//! [`Ctx::edit_state`], send events to other steps with [`Ctx::send`], write events to the
//! run's stream with [`Ctx::write_stream`], make side-effect calls through [`Ctx::run`], wait for
//! external events with [`Ctx::wait_for`], and end the run with [`Ctx::stop`]. The [`Engine`]
//! drives runs; it knows no SQL and no HTTP, and reaches storage only through the traits in
//! [`store`].
//!
//! ## Durability contract
//!
//! What a user may rely on, on every store that passes the conformance suite:
//!
//! 1. **A step commits atomically.** Its state change, the events it wrote to the stream since
//!    its last journaled call (each given the next per-run sequence number), the events it
//!    sent to other steps, the mailbox messages it consumed, the consumption of its own input
//!    event and its step-journal record are written in one transaction. A crash leaves all of
//!    it or none of it. Quick steps may share a transaction: a step whose only result is one
//!    event for the next step is held back (for at most [`EngineConfig::chain_wait`]) while
//!    that step runs on the event, which is then never stored, and both commit together; a
//!    crash before that commit runs both again from the first one's event. A step run this
//!    way that needs its own event stored (a journaled call, an idempotency key) is refused
//!    with [`StepError::RanAhead`] before it does anything: the steps before it commit, and
//!    it runs again on its stored event.
//! 2. **Steps run at least once; their commits apply exactly once.** After a crash the step
//!    that was in flight runs again from the top, against the state of the last commit.
//! 3. **Side effects are journaled.** [`Ctx::run`] stores each call's result under
//!    `(run, step invocation, key)` as soon as the call returns, fenced by the lease. When the
//!    step runs again, every call whose result was stored returns it without running again.
//!    A call interrupted between its effect and the journal write runs again: external effects
//!    are at-least-once, and [`Ctx::idempotency_key`] gives a stable key to pass to services
//!    that deduplicate. The stream events written before a call, and those the call adds
//!    ([`Ctx::run_streamed`]), are committed with its result: a long step shows its calls as
//!    they finish, and a step run again shows each of them once. A call that streams while it
//!    runs ([`Ctx::run_live`], a model's answer) appends its output as it comes; if it is cut
//!    off by a crash it runs again, and its partial output stays on the stream before the new
//!    attempt's.
//! 4. **Runs are owned through leases with fencing tokens.** Claiming a run bumps its fence
//!    (a run started in a process with a slot free, or woken there by the message it waited
//!    for, is claimed by the same write that creates or wakes it, and driven there at once);
//!    every write made while driving it names the fence, and the store refuses a write whose
//!    fence is stale ([`store::StoreError::LeaseLost`]). A process that dies loses its leases
//!    when they expire; a restarted process with the same owner id takes its runs back at once.
//!    No run is stranded and no step commits twice.
//! 5. **Waiting costs nothing.** A run waiting in [`Ctx::wait_for`] is parked: a row with no
//!    lease, task or memory. An external event sent with [`Engine::send`] goes to a durable
//!    mailbox; if it arrives before the run waits, it is kept; deliveries with the same
//!    idempotency key apply once; when a step consumes one message of a type, the other
//!    pending messages of that type are superseded in the same commit, so of two conflicting
//!    decisions exactly one applies. Any process may deliver; any process may resume the run.
//! 6. **The stream is a log.** Stream events are stored with gap-free per-run sequence numbers
//!    starting at 0 and can be read from any point ([`store::RunStore::events_after`]).
//! 7. **Time is bounded.** Each step has a timeout and a retry policy; each run may have a
//!    wall-clock deadline, after which it ends with a `WorkflowTimedOutEvent`. Steps see the
//!    time left through [`Ctx::remaining`] and can wrap up before it.
//!
//! Stream events are committed with their step, so a client sees a step's events when the
//! step commits, never events of a step that is later run again.
//!
//! A step's signature is its place in the graph: the event type it accepts, and what it
//! returns ([`Emits`]: an event, [`Either`] of two, or [`Stop`] with the result). A step fails
//! retryably ([`StepError::Failed`], storage errors) or permanently ([`StepError::Permanent`]:
//! the run fails at once). Readers follow a run through [`Engine::follow`] and
//! [`Engine::wait_terminal`], each woken only by its own run's commits (and, through
//! [`Engine::announce`], other processes' commits); where no change feed relays those, one
//! poller per process looks for changed runs on behalf of every reader.

mod config;
mod context;
mod error;
mod event;
mod executor;
mod follow;
mod graph;
mod signal;
pub mod store;
mod telemetry;
mod workflow;

pub use config::EngineSection;
pub use context::{Ctx, CtxParts, LIVE_FLUSH, StepEffects};
pub use error::{BoxError, EngineError, ErrorChain, StepError};
pub use event::{
    Envelope, Event, ExceptionInfo, StopEvent, WorkflowCancelledEvent, WorkflowFailedEvent,
    WorkflowTimedOutEvent,
};
pub use executor::{Engine, EngineConfig, StartOptions, WorkerStopped};
pub use follow::Follower;
pub use graph::StepGraph;
pub use signal::RunWatch;
pub use telemetry::RunTracer;
pub use workflow::{
    BoxFuture, Either, Emits, ErasedWorkflow, EventInfo, EventRole, RetryPolicy, StartRefusal,
    StepOptions, Stop, Stopped, Stored, Upgrade, Workflow, WorkflowState,
};

/// A new 10-character id from the URL-safe alphabet, like the handler ids of the Python
/// workflows server.
pub fn new_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut n = uuid::Uuid::new_v4().as_u128();
    (0..10)
        .map(|_| {
            let c = ALPHABET[(n % 62) as usize] as char;
            n /= 62;
            c
        })
        .collect()
}
