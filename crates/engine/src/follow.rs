//! Following a run: its stream events from a position as they are committed, and its end.
//! The one way every reader (SSE, the blocking run route, the CLI) follows a run. Woken by
//! this process's notices, which include other processes' commits when the store relays
//! them ([`Engine::announce`], LISTEN/NOTIFY on Postgres); the engine's poll interval is the
//! fallback for stores that announce nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::error::EngineError;
use crate::executor::{Engine, RunNotice};
use crate::store::{RunRecord, StoreError, StoredEvent};

/// Stream events read from the store per query.
const PAGE: i64 = 256;

/// A run's stream from a position: [`Follower::next`] gives each event once, in order, and
/// `None` after the stop event or once the run has ended and everything was read.
pub struct Follower {
    engine: Arc<Engine>,
    run_id: String,
    after: i64,
    buffer: VecDeque<StoredEvent>,
    notices: broadcast::Receiver<RunNotice>,
    ended: bool,
}

impl Follower {
    /// The last sequence number handed out (or the starting position).
    pub fn position(&self) -> i64 {
        self.after
    }

    /// The next event, waiting for it if none is committed yet. Cancel-safe: dropping the
    /// future loses no event.
    pub async fn next(&mut self) -> Result<Option<StoredEvent>, StoreError> {
        // Bounded by the run's events; each pass hands one out, reads a page, or waits.
        loop {
            if let Some(ev) = self.take() {
                return Ok(Some(ev));
            }
            if self.ended {
                return Ok(None);
            }
            if self.fill().await? {
                continue;
            }
            let store = self.engine.store();
            match store.get_run(&self.run_id).await? {
                None => self.ended = true,
                Some(run) if run.status.is_terminal() && self.after >= run.next_seq - 1 => {
                    self.ended = true
                }
                Some(_) => wait_for_notice(&self.engine, &self.run_id, &mut self.notices).await,
            }
        }
    }

    /// Every event committed so far and not yet handed out, without waiting.
    pub async fn drain(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        let mut out = Vec::new();
        // Bounded: the run's stream is finite and read a page at a time.
        loop {
            while let Some(ev) = self.take() {
                out.push(ev);
            }
            if self.ended || !self.fill().await? {
                return Ok(out);
            }
        }
    }

    fn take(&mut self) -> Option<StoredEvent> {
        let ev = self.buffer.pop_front()?;
        self.after = ev.seq;
        if ev.envelope.is_stop() {
            self.ended = true;
            self.buffer.clear();
        }
        Some(ev)
    }

    /// Reads the next page; false when nothing new was committed.
    async fn fill(&mut self) -> Result<bool, StoreError> {
        let batch = self
            .engine
            .store()
            .events_after(&self.run_id, self.after, PAGE)
            .await?;
        let any = !batch.is_empty();
        self.buffer.extend(batch);
        Ok(any)
    }
}

/// Waits for a notice about `run_id`, or the poll interval.
async fn wait_for_notice(
    engine: &Engine,
    run_id: &str,
    notices: &mut broadcast::Receiver<RunNotice>,
) {
    let poll = tokio::time::sleep(engine.config().poll_interval);
    tokio::pin!(poll);
    loop {
        tokio::select! {
            _ = &mut poll => return,
            notice = notices.recv() => match notice {
                Ok(n) if n.run_id != run_id => continue,
                // Ours, or notices were dropped (lagged): look again.
                _ => return,
            },
        }
    }
}

impl Engine {
    /// Follows run `run_id`'s stream after sequence number `after` (-1: from the start).
    pub fn follow(self: &Arc<Self>, run_id: &str, after: i64) -> Follower {
        Follower {
            notices: self.subscribe(),
            engine: self.clone(),
            run_id: run_id.to_string(),
            after,
            buffer: VecDeque::new(),
            ended: false,
        }
    }

    /// Waits until run `run_id` has ended (completed, failed or cancelled).
    pub async fn wait_terminal(&self, run_id: &str) -> Result<RunRecord, EngineError> {
        let mut notices = self.subscribe();
        // Bounded by the run's life; each pass reads the run once and waits for a change.
        loop {
            let run = self
                .store()
                .get_run(run_id)
                .await?
                .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
            if run.status.is_terminal() {
                return Ok(run);
            }
            wait_for_notice(self, run_id, &mut notices).await;
        }
    }

    /// Waits until something may have changed about run `run_id`: a notice, or the poll
    /// interval. For a caller that looks again itself (a run leased by another process).
    pub async fn changed(&self, run_id: &str) {
        let mut notices = self.subscribe();
        wait_for_notice(self, run_id, &mut notices).await;
    }
}
