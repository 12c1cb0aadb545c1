//! Following a run: its stream events from a position as they are committed, and its end.
//! The one way every reader (SSE, the blocking run route, the CLI) follows a run. A reader
//! waits on its own run's signal, raised by this process's commits and by other processes'
//! commits when the store relays them ([`Engine::announce`], LISTEN/NOTIFY on Postgres).
//! Where nothing relays them, one poller per process ([`Engine::poll_changes`]) looks for
//! changed runs on behalf of all readers: no reader polls the store on its own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use crate::error::EngineError;
use crate::executor::Engine;
use crate::signal::{Look, RunWatch};
use crate::store::{RunHead, RunRecord, StoreError, StoredEvent, now_ms};

/// Stream events read from the store per query.
const PAGE: i64 = 256;
const PAGE_LEN: usize = PAGE as usize;

/// A run's stream from a position: [`Follower::next`] gives each event once, in order, and
/// `None` after the stop event or once the run has ended and everything was read.
pub struct Follower {
    engine: Arc<Engine>,
    run_id: String,
    after: i64,
    buffer: VecDeque<StoredEvent>,
    watch: RunWatch,
    ended: bool,
    /// In step: everything committed before the last look at the signal has been read (or
    /// taken from news), so until the signal is raised again there is nothing to read. False
    /// for a new reader, and from any look that sends it to the store until that read is done.
    synced: bool,
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
            // Seen before looking: a commit after the look raises the signal again. A reader
            // in step (it read everything there was at its last look) learns from the signal
            // alone; any other looks at the store, which then says where it stands.
            match self.watch.look() {
                // The one commit since, made here, follows on from this reader's position:
                // its events are taken from memory.
                Look::News { news, .. }
                    if self.synced
                        && news.events.first().map(|e| e.seq) == Some(self.after + 1) =>
                {
                    self.buffer.extend(news.events.iter().cloned());
                    continue;
                }
                // It holds nothing this reader has not handed out already.
                Look::News { news, .. }
                    if self.synced && news.events.last().is_none_or(|e| e.seq <= self.after) =>
                {
                    self.wait().await;
                    continue;
                }
                // The stream did not move (the run parked or was let go by its driver here).
                Look::Unchanged | Look::Touched if self.synced => {
                    self.wait().await;
                    continue;
                }
                // Until a read below succeeds, this reader is not in step: a failed read
                // (the database away) is read again when the reader is asked again.
                _ => self.synced = false,
            }
            match self.fill().await? {
                // A whole page: there may be more.
                PAGE_LEN.. => continue,
                1.. => {
                    self.synced = true;
                    continue;
                }
                0 => {}
            }
            // Every way a run ends streams a stop event, which `take` sees; the run is read
            // only to notice one that vanished or ended before this reader came.
            // Its head only: not its state, which may be large and is of no use here.
            let ended = match self.engine.store().run_head(&self.run_id).await? {
                None => true,
                Some(run) => run.status.is_terminal() && self.after >= run.next_seq - 1,
            };
            self.synced = true;
            if ended {
                self.ended = true;
            } else {
                self.wait().await;
            }
        }
    }

    /// Waits for the run's signal with nothing buffered and no buffer held: a page read from
    /// the store leaves its capacity behind (about 1 kB), and a reader may wait for days at
    /// an approval gate.
    async fn wait(&mut self) {
        debug_assert!(self.buffer.is_empty());
        self.buffer = VecDeque::new();
        self.watch.changed().await;
    }

    /// Every event committed so far and not yet handed out, without waiting.
    pub async fn drain(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        let mut out = Vec::new();
        // Bounded: the run's stream is finite and read a page at a time.
        loop {
            while let Some(ev) = self.take() {
                out.push(ev);
            }
            if self.ended || self.fill().await? == 0 {
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

    /// Reads the next page; how many events it held (none: nothing new was committed).
    async fn fill(&mut self) -> Result<usize, StoreError> {
        let batch = self
            .engine
            .store()
            .events_after(&self.run_id, self.after, PAGE)
            .await?;
        let read = batch.len();
        self.buffer.extend(batch);
        Ok(read)
    }
}

impl Engine {
    /// Follows run `run_id`'s stream after sequence number `after` (-1: from the start).
    pub fn follow(self: &Arc<Self>, run_id: &str, after: i64) -> Follower {
        Follower {
            watch: self.watch(run_id),
            engine: self.clone(),
            run_id: run_id.to_string(),
            after,
            buffer: VecDeque::new(),
            ended: false,
            synced: false,
        }
    }

    /// Waits until run `run_id` has ended (completed, failed or cancelled).
    pub async fn wait_terminal(self: &Arc<Self>, run_id: &str) -> Result<RunRecord, EngineError> {
        let mut watch = self.watch(run_id);
        // Bounded by the run's life; each pass reads the run once and waits for a change.
        loop {
            watch.mark_seen();
            let run = self
                .store()
                .get_run(run_id)
                .await?
                .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
            if run.status.is_terminal() {
                return Ok(run);
            }
            // Not held while waiting: a waiting run's record can be large.
            drop(run);
            watch.changed().await;
        }
    }

    /// Waits until something may have changed about run `run_id`. For a caller that looks
    /// again itself (a run leased by another process); bounded by the poll interval, since
    /// the change it waits for may have happened just before it started waiting.
    pub async fn changed(self: &Arc<Self>, run_id: &str) {
        let mut watch = self.watch(run_id);
        let _ = tokio::time::timeout(self.config().poll_interval, watch.changed()).await;
    }

    /// Watches run `run_id`: [`RunWatch::changed`] returns when it may have moved (new stream
    /// events, a new status), whichever process moved it.
    pub fn watch(self: &Arc<Self>, run_id: &str) -> RunWatch {
        self.ensure_poller();
        self.signals().watch(run_id)
    }

    /// Starts this process's fallback poller once, the first time someone watches a run.
    fn ensure_poller(self: &Arc<Self>) {
        if self.poller_started() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(poll_changes(Arc::downgrade(self)));
        }
    }
}

/// Looks for changes made by other processes on behalf of every watcher in this process, with
/// one query per poll interval, for as long as the engine lives. Needed where the store
/// relays no changes (SQLite shared by several processes), or while its relay is down;
/// idle while [`Engine::set_relay_live`] says the relay works or nobody watches. A look costs
/// what changed, not how many watch: 10,000 idle readers add nothing to it.
async fn poll_changes(engine: Weak<Engine>) {
    // The heads the last look saw. Looks overlap (each goes back CLOCK_SLACK_MS), and a run
    // that shows again with the same head has no news; one missing from the last look but in
    // this one changed since (its update time only grows).
    let mut heads: HashMap<String, RunHead> = HashMap::new();
    let mut since = now_ms();
    // Bounded by the engine's life: each pass holds it only for one look.
    loop {
        let interval = match engine.upgrade() {
            Some(e) => e.config().poll_interval,
            None => return,
        };
        tokio::time::sleep(interval).await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.relay_live() || !engine.signals().any_watched() {
            heads.clear();
            since = now_ms();
            continue;
        }
        // Clocks of other processes may lag ours: look back a little and compare heads.
        let from = since - CLOCK_SLACK_MS;
        since = now_ms();
        let changed = match engine.store().changed_since(from, POLL_LIMIT).await {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!(error = %crate::ErrorChain(&e), "looking for changed runs failed");
                continue;
            }
        };
        if changed.len() as i64 >= POLL_LIMIT {
            // More changed than one look tells: every reader looks for itself once.
            engine.signals().raise_all();
            heads.clear();
            continue;
        }
        let mut seen = HashMap::with_capacity(changed.len());
        for head in changed {
            if heads.get(&head.id) != Some(&head) {
                // Wakes the run's watchers, if it has any. A stream that ends where this
                // process's last news of it ends did not move: only its record may have.
                if engine.signals().has_news_up_to(&head.id, head.next_seq) {
                    engine.signals().touch(&head.id);
                } else {
                    engine.signals().raise(&head.id);
                }
            }
            seen.insert(head.id.clone(), head);
        }
        heads = seen;
    }
}

/// How far back the fallback poller looks, for clocks of other processes that lag ours.
const CLOCK_SLACK_MS: i64 = 2_000;
/// Changed runs read per look.
const POLL_LIMIT: i64 = 5_000;
