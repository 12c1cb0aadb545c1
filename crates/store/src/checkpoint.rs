//! SQLite checkpoints, off the write path.
//!
//! Left to itself, SQLite checkpoints its write-ahead log from inside the commit that takes
//! it past 1,000 pages: that commit copies the log into the database file and syncs both
//! (two `fsync`s, 3-4 ms each on an ordinary disk) before it returns. A research run writes
//! a few hundred pages, so every other run had one of its commits, and the reader waiting on
//! it, held up by ~8 ms. Here the store's connections do not checkpoint on commit
//! (`wal_autocheckpoint = 0`, see `SqlStore::connect`); a task checkpoints in the background
//! instead, on a connection of its own from the pool, without waiting for readers or writers
//! (`PASSIVE`), a short while after the log has changed.
//!
//! SQLite starts the log again from its beginning only when a writer finds every frame in it
//! copied; under a steady stream of writes a checkpoint that does not hold them off never
//! leaves it so, and the log grew without end (740 MB while 2,000 research runs reached the
//! gate). So when a checkpoint finds more than [`LONG_LOG`] frames in the log, a second one
//! (`RESTART`) holds writers off while it copies what came in meanwhile and until readers
//! have left the log, so the next write starts it again: this process's run writers wait
//! their turn (`SqlStore::write_turn`), others SQLite's lock. A short wait (that tail, and
//! the syncs), and only under sustained writing.
//!
//! It also bounds how long a commit waits for its sync: with `synchronous = NORMAL` the log
//! is synced only at checkpoints, and SQLite's 1,000 pages could take hours to fill on a
//! quiet server, where here a commit is on disk within [`TICK`] or so, and within
//! [`AT_LEAST_EVERY`] whatever the clock says of the file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sqlx::Row;
use tracing::{debug, warn};

/// How often the log is looked at.
const TICK: Duration = Duration::from_millis(250);

/// A checkpoint runs at least this often, even if the log seems unchanged: its modification
/// time is coarse (a write in the same clock tick as the last look leaves it as it was).
const AT_LEAST_EVERY: Duration = Duration::from_secs(5);

/// Frames (pages) in the log past which it is checkpointed again while writers wait, so that
/// it starts over: SQLite's own checkpoint threshold.
const LONG_LOG: i64 = 1_000;

/// How long the checkpointer waits for the writers' turn before leaving it for next time.
const TURN_WAIT: Duration = Duration::from_secs(2);

/// Copies what it can, waiting for nobody.
const PASSIVE: &str = "PRAGMA wal_checkpoint(PASSIVE)";
/// Holds writers off, copies everything, and waits for readers to leave the log, so that
/// the next write starts it over.
const RESTART: &str = "PRAGMA wal_checkpoint(RESTART)";

/// Set on each of the store's SQLite connections: no checkpoint inside a commit, and the log
/// truncated to 16 MiB when SQLite starts it again from the beginning after a checkpoint, so
/// a burst of writes does not leave a large file behind.
pub(crate) const PRAGMAS: &str =
    "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 16777216;";

/// Stops the checkpointer when the last clone of the store goes.
pub(crate) struct Checkpointer(tokio::task::JoinHandle<()>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Checkpointer {
    /// Starts checkpointing the SQLite database at `path` (the file, not its log) through
    /// `db`. None for an in-memory database, which has no log.
    /// `writers` is the turn this process's writers take (`SqlStore::write_turn`).
    pub(crate) fn start(
        db: fathom_pool::Kept<sqlx::Any>,
        path: &str,
        writers: Arc<tokio::sync::Mutex<()>>,
    ) -> Option<Checkpointer> {
        if path == ":memory:" || path.is_empty() || path.contains("mode=memory") {
            return None;
        }
        let log = PathBuf::from(format!("{path}-wal"));
        Some(Checkpointer(tokio::spawn(run(db, log, writers))))
    }
}

/// What the file system says of the log: its length and when it was last written.
type Look = Option<(u64, SystemTime)>;

fn look(log: &PathBuf) -> Look {
    let meta = std::fs::metadata(log).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

async fn run(db: fathom_pool::Kept<sqlx::Any>, log: PathBuf, writers: Arc<tokio::sync::Mutex<()>>) {
    // The log as it was when a checkpoint last found nothing left to copy.
    let mut clean: Look = None;
    let mut last = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Runs until the store is dropped (the task is aborted then).
    loop {
        ticks.tick().await;
        let before = look(&log);
        // No log (nothing written since the last connection closed), or none changed.
        if before.is_none() || (before == clean && last.elapsed() < AT_LEAST_EVERY) {
            continue;
        }
        last = Instant::now();
        let mut done = checkpoint(&db, PASSIVE).await;
        // Past SQLite's own threshold, the log has not been started again: under steady
        // writing it would not be.
        if let Ok(Progress { frames, .. }) = done
            && frames > LONG_LOG
            && let Ok(_turn) = tokio::time::timeout(TURN_WAIT, writers.lock()).await
        {
            done = checkpoint(&db, RESTART).await;
        }
        match done {
            Ok(Progress { left, .. }) => {
                clean = (!left).then_some(before).flatten();
            }
            // The store was closed.
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => {
                clean = None;
                // The database away or busy: the next tick tries again.
                debug!(error = %e, "checkpoint failed");
            }
        }
    }
}

/// What a checkpoint left: the frames in the log, and whether some are not copied yet (or
/// a reader kept it from trying).
#[derive(Clone, Copy)]
struct Progress {
    frames: i64,
    left: bool,
}

/// One checkpoint: `sql` is [`PASSIVE`] or [`RESTART`].
async fn checkpoint(
    db: &fathom_pool::Kept<sqlx::Any>,
    sql: &'static str,
) -> Result<Progress, sqlx::Error> {
    let started = Instant::now();
    let row = sqlx::query(sql).fetch_one(db).await?;
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
        left: busy != 0 || frames != copied,
    })
}
