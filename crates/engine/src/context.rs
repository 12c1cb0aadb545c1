//! The run context a step works through: typed state, events to other steps, events to the
//! stream, journaled side effects and durable waits. State and sent events are buffered and
//! committed with the step, in one transaction. Stream events are committed with the next
//! journaled call to start (with its result), or else with the step: so a long step shows its
//! calls as they finish, and a step run again after a crash shows each of them once.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tracing::Instrument as _;

use crate::error::StepError;
use crate::event::{Envelope, Event};
use crate::store::{Lease, RunStore};

/// How often a running [`Ctx::run_live`] call's output is appended to the stream.
pub const LIVE_FLUSH: Duration = Duration::from_millis(200);

/// A journaled call's result: found in the journal, or just computed and not yet stored.
enum Journaled<T> {
    Found(T),
    Fresh(T),
}

/// What the executor hands a step besides its event and state.
#[derive(Clone)]
pub struct CtxParts {
    pub store: Arc<dyn RunStore>,
    pub lease: Lease,
    pub workflow: String,
    pub step: &'static str,
    /// The id of the pending event being handled: the scope of the step's journal keys.
    pub scope: i64,
    pub attempt: u32,
    pub deadline: Option<Instant>,
    /// Whether the step's journal is known to be empty: its event was sent by a commit of
    /// this lease holder and the step has not run on it before, so no call of it can have
    /// been journaled and none needs looking up.
    pub journal_empty: bool,
    /// Where this process announces events it committed (stream readers wait on it).
    pub(crate) signals: Arc<crate::signal::Signals>,
    /// What the driver knows of the run's mailbox without looking.
    pub(crate) known_mail: Option<KnownMail>,
    /// The step runs on an event its predecessor sent and that is not stored yet (the two
    /// are to be committed together): it has no scope, so anything keyed by one (a
    /// journaled call, an idempotency key) ends it with [`StepError::RanAhead`] instead.
    pub(crate) ahead_of_commit: bool,
    /// A step before it in the same commit took mail, which the store still holds as
    /// pending: a wait would find it again, so it ends the step with
    /// [`StepError::RanAhead`] instead.
    pub(crate) mail_taken_ahead: bool,
}

/// What a driver knows of its run's mailbox without reading it, so that a step's wait need
/// not look: from the write that took the run. A wait that parks on it is still safe: the
/// park is refused if anything was delivered since `mailbox_seq`, and the step runs again.
#[derive(Debug, Clone)]
pub(crate) enum KnownMail {
    /// Nothing pending when the counter read `mailbox_seq`: a run just created here.
    Empty { mailbox_seq: i64 },
    /// The message that just woke the run, delivered here: the oldest pending one of its
    /// type, since a run parks only when none of the type it waits for is pending.
    Woke {
        event_type: String,
        id: i64,
        payload: Value,
        mailbox_seq: i64,
    },
}

impl KnownMail {
    /// What a look at the mailbox for `event_type` would see, if known.
    fn view(&self, event_type: &str) -> Option<crate::store::MailboxView> {
        match self {
            KnownMail::Empty { mailbox_seq } => Some(crate::store::MailboxView {
                message: None,
                mailbox_seq: *mailbox_seq,
            }),
            KnownMail::Woke {
                event_type: woke_by,
                id,
                payload,
                mailbox_seq,
            } => (woke_by == event_type).then(|| crate::store::MailboxView {
                message: Some((*id, payload.clone())),
                mailbox_seq: *mailbox_seq,
            }),
        }
    }
}

/// Everything a step produced, for the commit.
#[derive(Debug, Default)]
pub struct StepEffects {
    pub state: Option<Value>,
    pub stream: Vec<Envelope>,
    pub sent: Vec<(String, Value)>,
    pub stop: Option<Envelope>,
    pub mailbox_consumed: Vec<i64>,
    pub error: Option<String>,
    /// The step ran ahead of its event's commit and was refused something that needs it
    /// (see [`StepError::RanAhead`]): whatever it made of the refusal, it runs again.
    pub ran_ahead: bool,
}

struct Buffers<S> {
    state: S,
    state_dirty: bool,
    /// Journaled calls completed in this execution, for crash points.
    calls_done: u32,
    /// Journaled calls running now: stream writes are refused meanwhile, since which call
    /// they would be committed with would depend on timing.
    calls_in_flight: u32,
    effects: StepEffects,
}

/// The context of one step execution. Cheap to clone; clones share buffers, so a step may
/// hand it to tasks it runs in parallel.
pub struct Ctx<S> {
    parts: Arc<CtxParts>,
    buf: Arc<Mutex<Buffers<S>>>,
}

impl<S> Clone for Ctx<S> {
    fn clone(&self) -> Self {
        Ctx {
            parts: self.parts.clone(),
            buf: self.buf.clone(),
        }
    }
}

impl<S: Serialize + Clone> Ctx<S> {
    pub(crate) fn new(parts: CtxParts, state: S) -> Self {
        Ctx {
            parts: Arc::new(parts),
            buf: Arc::new(Mutex::new(Buffers {
                state,
                state_dirty: false,
                calls_done: 0,
                calls_in_flight: 0,
                effects: StepEffects::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Buffers<S>> {
        // A panic while holding this lock cannot leave the buffers half-written in a way that
        // matters: the step's effects are discarded on panic anyway.
        self.buf.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn into_effects(self) -> StepEffects {
        let mut b = self.lock();
        let mut effects = std::mem::take(&mut b.effects);
        if b.state_dirty {
            match serde_json::to_value(&b.state) {
                Ok(v) => effects.state = Some(v),
                Err(e) => effects.error = Some(format!("state does not serialize: {e}")),
            }
        }
        effects
    }

    pub fn run_id(&self) -> &str {
        &self.parts.lease.run_id
    }

    pub fn workflow(&self) -> &str {
        &self.parts.workflow
    }

    pub fn step_name(&self) -> &'static str {
        self.parts.step
    }

    /// 1 on the first try of this step invocation, 2 on its first retry, and so on.
    pub fn attempt(&self) -> u32 {
        self.parts.attempt
    }

    /// Time left before the run's global deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.parts
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// A copy of the run's state as this step sees it.
    pub fn state(&self) -> S {
        self.lock().state.clone()
    }

    /// Reads the run's state in place, without the copy [`Ctx::state`] makes.
    pub fn read_state<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().state)
    }

    /// Changes the run's state; the change is committed with the step.
    pub fn edit_state<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut b = self.lock();
        b.state_dirty = true;
        f(&mut b.state)
    }

    /// Sends an event to the step that accepts its type (after this step commits).
    pub fn send<E: Event>(&self, event: E) -> Result<(), StepError> {
        let payload = serde_json::to_value(&event)?;
        self.lock()
            .effects
            .sent
            .push((E::TYPE.to_string(), payload));
        Ok(())
    }

    /// Writes an event to the run's stream, numbered in order; committed with the next
    /// journaled call or the step. Refused while a journaled call of this step is running
    /// (parallel branches pass their events to [`Ctx::run_streamed`] instead).
    pub fn write_stream<E: Event>(&self, event: &E) -> Result<(), StepError> {
        self.write_envelope(Envelope::of(event)?)
    }

    /// [`Ctx::write_stream`] of an event already in its envelope.
    pub fn write_envelope(&self, env: Envelope) -> Result<(), StepError> {
        let mut b = self.lock();
        if b.calls_in_flight > 0 {
            return Err(StepError::failed(format!(
                "{} written to the stream while a journaled call runs; pass it to run_streamed",
                env.event_type
            )));
        }
        b.effects.stream.push(env);
        Ok(())
    }

    /// Ends the run with `result` as its stop event, streamed last.
    pub fn stop<E: Event>(&self, result: &E) -> Result<(), StepError> {
        let env = Envelope::of(result)?;
        self.lock().effects.stop = Some(env);
        Ok(())
    }

    /// A crash-testing hook: with `FATHOM_CRASH_AT=<this step>:<label>`, the process halts
    /// here (a test then SIGKILLs it), e.g. inside a call after its effect and before its
    /// result is journaled. Unset, it does nothing.
    pub async fn crash_point(&self, label: &str) {
        crash_point(self.parts.step, label).await;
    }

    /// A stable key for an external call, for services that deduplicate by idempotency key.
    pub fn idempotency_key(&self, key: &str) -> Result<String, StepError> {
        self.scoped()?;
        Ok(format!(
            "{}:{}:{}",
            self.parts.lease.run_id, self.parts.scope, key
        ))
    }

    /// Refuses what needs the step's scope while the step runs ahead of its event's commit.
    fn scoped(&self) -> Result<(), StepError> {
        match self.parts.ahead_of_commit {
            true => self.ran_ahead(),
            false => Ok(()),
        }
    }

    /// Refuses what the step may not do ahead of its event's commit, and remembers it: a
    /// step that swallows the error still runs again.
    fn ran_ahead(&self) -> Result<(), StepError> {
        self.lock().effects.ran_ahead = true;
        Err(StepError::RanAhead)
    }

    /// Whether a result is journaled under `key` for this step invocation: a step run again
    /// after a crash reuses what the first execution did, even where it would not start
    /// that work now (its deadline has passed, say).
    pub async fn is_journaled(&self, key: &str) -> Result<bool, StepError> {
        let p = &self.parts;
        if p.journal_empty {
            return Ok(false);
        }
        Ok(p.store
            .journal_get(&p.lease.run_id, p.scope, key)
            .await?
            .is_some())
    }

    /// Runs a side effect once: if a result is journaled under `key` for this step invocation,
    /// it is returned without running `f`; otherwise `f` runs and its result is journaled
    /// before being returned. Errors are not journaled: the step fails and is retried.
    pub async fn run<T, E, F, Fut>(&self, key: &str, f: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_streamed(key, Vec::new(), f, |_| Ok(Vec::new()))
            .await
    }

    /// [`Ctx::run`], with stream events committed in the same transaction as the result:
    /// the stream events written before this call, then `before`, then what `after` makes of
    /// the result. When the result is already journaled (a step run again after a crash),
    /// those events are already in the stream and are not written again.
    ///
    /// Parallel branches of a step call this with their own events; the events written with
    /// [`Ctx::write_stream`] before it go with the call that starts first, which is the
    /// same call in every execution because the check happens before the first await.
    pub async fn run_streamed<T, E, F, Fut>(
        &self,
        key: &str,
        before: Vec<Envelope>,
        f: F,
        after: impl FnOnce(&T) -> Result<Vec<Envelope>, StepError>,
    ) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call(key, before, f, None, after).await
    }

    /// [`Ctx::run_streamed`] for a call that streams while it runs (a model's answer): the
    /// events before it are committed when it starts, then every [`LIVE_FLUSH`] what `tick`
    /// returns (the text received since the last tick, say), then `after`'s events with the
    /// result. A completed call is read back from the journal and streams nothing again; a
    /// call cut off by a crash runs again, so a reader may see its partial output followed by
    /// the new attempt's.
    pub async fn run_live<T, E, F, Fut>(
        &self,
        key: &str,
        before: Vec<Envelope>,
        f: F,
        mut tick: impl FnMut() -> Result<Vec<Envelope>, StepError> + Send,
        after: impl FnOnce(&T) -> Result<Vec<Envelope>, StepError>,
    ) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call(key, before, f, Some(&mut tick), after).await
    }

    async fn call<T, E, F, Fut>(
        &self,
        key: &str,
        before: Vec<Envelope>,
        f: F,
        tick: Option<&mut (dyn FnMut() -> Result<Vec<Envelope>, StepError> + Send)>,
        after: impl FnOnce(&T) -> Result<Vec<Envelope>, StepError>,
    ) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.scoped()?;
        // Taken before the first await, so the same call takes them in every execution.
        let mut events = {
            let mut b = self.lock();
            b.calls_in_flight += 1;
            std::mem::take(&mut b.effects.stream)
        };
        let span = tracing::info_span!("journaled call", key, replayed = tracing::field::Empty);
        let outcome = self
            .fresh(key, &mut events, before, f, tick)
            .instrument(span.clone())
            .await;
        self.lock().calls_in_flight -= 1;
        let value = match outcome? {
            // Stored by an earlier execution, with its events.
            Journaled::Found(v) => {
                span.record("replayed", true);
                crate::telemetry::journaled_call(self.parts.step, "replayed");
                return Ok(v);
            }
            Journaled::Fresh(v) => v,
        };
        crate::telemetry::journaled_call(self.parts.step, "made");
        events.extend(after(&value)?);
        let p = &self.parts;
        let json = serde_json::to_value(&value)?;
        let (kept, last_seq) = p
            .store
            .journal_put(&p.lease, p.scope, key, &json, &events)
            .instrument(span)
            .await?;
        self.announce(&events, last_seq);
        let done = {
            let mut b = self.lock();
            b.calls_done += 1;
            b.calls_done
        };
        crash_point(p.step, &done.to_string()).await;
        if kept == json {
            Ok(value)
        } else {
            Ok(serde_json::from_value(kept)?)
        }
    }

    /// The journaled result of `key`, or `f`'s fresh one (not yet stored). `before` joins
    /// `events` to go with the result; with a `tick`, they are appended to the stream at
    /// once and `tick`'s events as `f` runs.
    async fn fresh<T, E, F, Fut>(
        &self,
        key: &str,
        events: &mut Vec<Envelope>,
        before: Vec<Envelope>,
        f: F,
        tick: Option<&mut (dyn FnMut() -> Result<Vec<Envelope>, StepError> + Send)>,
    ) -> Result<Journaled<T>, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let p = &self.parts;
        let stored = match p.journal_empty {
            true => None,
            false => p.store.journal_get(&p.lease.run_id, p.scope, key).await?,
        };
        if let Some(v) = stored {
            return serde_json::from_value(v)
                .map(Journaled::Found)
                .map_err(|e| {
                    StepError::permanent_because(
                        format!("journaled result of '{key}' no longer fits"),
                        e,
                    )
                });
        }
        events.extend(before);
        let failed = |e: E| e.into().about(key);
        let Some(tick) = tick else {
            return f().await.map(Journaled::Fresh).map_err(failed);
        };
        let started = std::mem::take(events);
        let last = p.store.append_stream(&p.lease, &started).await?;
        self.announce(&started, last);
        let work = f();
        tokio::pin!(work);
        let value = loop {
            tokio::select! {
                v = &mut work => break v.map_err(failed)?,
                () = tokio::time::sleep(LIVE_FLUSH) => {
                    let batch = tick()?;
                    let last = p.store.append_stream(&p.lease, &batch).await?;
                    self.announce(&batch, last);
                }
            }
        };
        // What arrived since the last tick goes with the result.
        events.extend(tick()?);
        Ok(Journaled::Fresh(value))
    }

    /// Tells this process's stream readers that `events`, the last numbered `last_seq`, are
    /// stored; they take them from here rather than read them back.
    fn announce(&self, events: &[Envelope], last_seq: Option<i64>) {
        let Some(last) = last_seq else {
            return;
        };
        let first = last + 1 - events.len() as i64;
        self.parts.signals.publish(&self.parts.lease.run_id, || {
            crate::signal::News::stored(events, first..)
        });
    }

    /// Returns the oldest undelivered external event of type `E`, consuming it when the step
    /// commits. If none has arrived, the step ends here and the run is parked, holding no
    /// task or memory, until one arrives; then the step runs again from the top.
    pub async fn wait_for<E: Event>(&self) -> Result<E, StepError> {
        let p = &self.parts;
        if p.ahead_of_commit && p.mail_taken_ahead {
            self.ran_ahead()?;
        }
        let view = match p.known_mail.as_ref().and_then(|k| k.view(E::TYPE)) {
            Some(view) => view,
            None => p.store.mailbox_peek(&p.lease.run_id, E::TYPE).await?,
        };
        match view.message {
            Some((id, payload)) => {
                let event: E = serde_json::from_value(payload).map_err(|e| {
                    StepError::permanent_because(format!("undecodable {} in mailbox", E::TYPE), e)
                })?;
                self.lock().effects.mailbox_consumed.push(id);
                Ok(event)
            }
            None => Err(StepError::Suspend {
                event_type: E::TYPE.to_string(),
                mailbox_seq: view.mailbox_seq,
            }),
        }
    }
}

/// Crash testing. With `FATHOM_CRASH_AT=<step>:<n>` in the environment, a process halts
/// after the n-th journaled call of `<step>` has been stored, announcing it on stderr, so a
/// test can SIGKILL it at a known point inside the step. `<step>:<label>` halts where the step
/// calls [`Ctx::crash_point`] with that label instead (inside a call, before its result is
/// stored), and `<step>:commit` halts when the step is done, before its commit. With
/// `FATHOM_CRASH_HOLD_MS=<ms>` as well, the step is held there that long and then goes on (a
/// slow step, for shutdown tests); with `FATHOM_CRASH_HOLD_UNTIL=<path>`, until a file is at
/// `path` (a test lets the step go on once it has done what must happen meanwhile), saying so
/// on stderr. Unset, this costs one lookup.
pub(crate) async fn crash_point(step: &str, at: &str) {
    enum Hold {
        Halt,
        For(Duration),
        Until(std::path::PathBuf),
    }
    static TARGET: std::sync::OnceLock<Option<(String, String, Hold)>> = std::sync::OnceLock::new();
    let target = TARGET.get_or_init(|| {
        let spec = std::env::var("FATHOM_CRASH_AT").ok()?;
        let (s, n) = spec.rsplit_once(':')?;
        let hold = match (
            std::env::var("FATHOM_CRASH_HOLD_MS")
                .ok()
                .and_then(|ms| ms.parse().ok()),
            std::env::var_os("FATHOM_CRASH_HOLD_UNTIL"),
        ) {
            (Some(ms), _) => Hold::For(Duration::from_millis(ms)),
            (None, Some(path)) => Hold::Until(path.into()),
            (None, None) => Hold::Halt,
        };
        Some((s.to_string(), n.to_string(), hold))
    });
    let Some((s, n, hold)) = target else {
        return;
    };
    if s != step || n != at {
        return;
    }
    match hold {
        Hold::For(ms) => {
            eprintln!(
                "fathom: crash point {step}:{at} reached, holding {} ms",
                ms.as_millis()
            );
            tokio::time::sleep(*ms).await;
        }
        Hold::Until(path) => {
            eprintln!(
                "fathom: crash point {step}:{at} reached, holding until {} exists",
                path.display()
            );
            while !path.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            eprintln!("fathom: crash point {step}:{at} let go");
        }
        Hold::Halt => {
            eprintln!("fathom: crash point {step}:{at} reached, halting");
            std::future::pending::<()>().await;
        }
    }
}
