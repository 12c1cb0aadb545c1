//! SQLite checkpoints, off the write path.
//!
//! Left to itself, SQLite checkpoints its write-ahead log from inside the commit that takes
//! it past 1,000 pages: that commit copies the log into the database file and syncs both
//! (two `fsync`s, 3-4 ms each on an ordinary disk) before it returns. A research run writes
//! a few hundred pages, so every other run had one of its commits, and the reader waiting on
//! it, held up by ~8 ms. Here the store's connections do not checkpoint on commit
//! (`wal_autocheckpoint = 0`, see `SqlStore::connect`); a task checkpoints in the background
//! instead, on a connection of its own from the pool, without waiting for readers or writers
//! (`PASSIVE`, which costs a hop and a look at the log's index when there is nothing to copy).
//!
//! SQLite starts the log again from its beginning only when a writer finds every frame in it
//! copied; under a steady stream of writes a checkpoint that does not hold them off never
//! leaves it so, and the log grew without end (740 MB while 2,000 research runs reached the
//! gate). So when a checkpoint finds more than [`LONG_LOG`] frames in the log, a second one
//! (`RESTART`) holds writers off while it copies what came in meanwhile and until readers
//! have left the log, so the next write starts it again: this process's run writers wait
//! their turn (`SqlStore::write_turn`), others SQLite's lock. A short wait (that tail, and
//! the syncs), only while the log grows. A reader that keeps the log open (a backup tool, a
//! shell with a transaction open) would hold that checkpoint, and every writer with it, for
//! the whole busy timeout: so it waits for readers 100 ms at most, and is not
//! tried again for [`RESTART_BACKOFF`] after it found one.
//!
//! It also bounds how long a commit waits for its sync: with `synchronous = NORMAL` the log
//! is synced only at checkpoints, and SQLite's 1,000 pages could take hours to fill on a
//! quiet server, where here a commit is synced within about [`TICK`] (unless a reader keeps
//! the log open meanwhile).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sqlx::Row;
use tracing::{debug, warn};

/// How often the log is checkpointed.
const TICK: Duration = Duration::from_millis(250);

/// Frames (pages) in the log past which it is checkpointed again while writers wait, if it
/// is still growing, so that it starts over: SQLite's own checkpoint threshold.
const LONG_LOG: i64 = 1_000;

/// How long the checkpointer waits for the writers' turn before leaving it for next time.
const TURN_WAIT: Duration = Duration::from_secs(2);

/// After a `RESTART` checkpoint found a reader in the way, only passive ones for this long.
const RESTART_BACKOFF: Duration = Duration::from_secs(5);

/// How long a statement on the store's SQLite connections waits for another process's lock.
const BUSY_TIMEOUT_MS: u32 = 10_000;

/// Copies what it can, waiting for nobody.
const PASSIVE: &str = "PRAGMA wal_checkpoint(PASSIVE)";
/// Holds writers off, copies everything, and waits 100 ms at most for readers to leave
/// the log, so that the next write starts it over; then the connection's usual busy timeout
/// again.
static RESTART: LazyLock<String> = LazyLock::new(|| {
    format!(
        "PRAGMA busy_timeout = 100; PRAGMA wal_checkpoint(RESTART); \
         PRAGMA busy_timeout = {BUSY_TIMEOUT_MS};"
    )
});

/// Set on each of the store's SQLite connections when it opens. Besides the log's mode and
/// the busy timeout: no checkpoint inside a commit, and the log truncated to 16 MiB when
/// SQLite starts it again from the beginning after a checkpoint, so a burst of writes does
/// not leave a large file behind.
pub(crate) static PRAGMAS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}; PRAGMA foreign_keys = ON; \
         PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 16777216;"
    )
});

/// Stops the checkpointer when the last clone of the store goes.
pub(crate) struct Checkpointer(tokio::task::JoinHandle<()>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Checkpointer {
    /// Starts checkpointing the SQLite database at `path` through `db`; `writers` is the
    /// turn this process's writers take (`SqlStore::write_turn`). None for an in-memory
    /// database, which has no log.
    pub(crate) fn start(
        db: fathom_pool::Kept<sqlx::Any>,
        path: &str,
        writers: Arc<tokio::sync::Mutex<()>>,
    ) -> Option<Checkpointer> {
        if path == ":memory:" || path.is_empty() {
            return None;
        }
        Some(Checkpointer(tokio::spawn(run(db, writers))))
    }
}

async fn run(db: fathom_pool::Kept<sqlx::Any>, writers: Arc<tokio::sync::Mutex<()>>) {
    // Frames in the log at the last tick: a log that grows past LONG_LOG has not started
    // over, and under steady writing would not.
    let mut last_frames = 0;
    let mut restart_after = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Runs until the store is dropped (the task is aborted then) or closed.
    loop {
        ticks.tick().await;
        let mut done = checkpoint(&db, PASSIVE).await;
        if let Ok(Progress { frames, .. }) = done
            && frames > LONG_LOG
            && frames > last_frames
            && Instant::now() >= restart_after
            && let Ok(_turn) = tokio::time::timeout(TURN_WAIT, writers.lock()).await
        {
            done = checkpoint(&db, RESTART.as_str()).await;
            if let Ok(Progress { busy: true, .. }) = done {
                restart_after = Instant::now() + RESTART_BACKOFF;
            }
        }
        match done {
            Ok(Progress { frames, .. }) => last_frames = frames,
            // The store was closed.
            Err(sqlx::Error::PoolClosed) => return,
            // The database away or busy: the next tick tries again.
            Err(e) => debug!(error = %e, "checkpoint failed"),
        }
    }
}

/// What a checkpoint found: the frames in the log, and whether a reader or writer kept it
/// from finishing.
#[derive(Clone, Copy)]
struct Progress {
    frames: i64,
    busy: bool,
}

/// One checkpoint: `sql` is [`PASSIVE`] or [`RESTART`]; its result is the one row of three
/// columns among the statements' rows.
async fn checkpoint(
    db: &fathom_pool::Kept<sqlx::Any>,
    sql: &'static str,
) -> Result<Progress, sqlx::Error> {
    let started = Instant::now();
    let rows = sqlx::query(sql).fetch_all(db).await?;
    let Some(row) = rows.iter().find(|r| r.len() == 3) else {
        return Err(sqlx::Error::Protocol("no checkpoint result".into()));
    };
    // (busy, frames in the log, frames copied); -1 when the database is not in WAL mode.
    let (busy, frames, copied): (i64, i64, i64) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    if started.elapsed() > Duration::from_secs(1) {
        warn!(
            sql,
            frames,
            copied,
            took_ms = started.elapsed().as_millis() as u64,
            "slow checkpoint"
        );
    }
    Ok(Progress {
        frames,
        busy: busy != 0,
    })
}
