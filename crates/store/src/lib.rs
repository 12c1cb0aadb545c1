//! # fathom-store: the engine's storage on Postgres and SQLite
//!
//! One implementation, [`SqlStore`], serves both databases through sqlx's `Any` driver: the SQL
//! is shared, and the few places where the dialects differ (row locking, JSON access, write
//! transactions) are isolated in [`dialect`]. Migrations for each database are embedded and
//! applied by [`SqlStore::connect`].

mod artifacts;
mod backup;
mod checkpoint;
mod collections;
mod commit;
mod config;
pub mod dialect;
mod runs;
mod sql;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fathom_engine::store::{StoreError, StoreResult};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

pub use backup::Inventory;
pub use config::StorageSection;
pub use dialect::Dialect;

/// How long a statement waits for a connection from the pool before the database counts as
/// unavailable ([`StoreError::Unavailable`]).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// This process's turn to write to SQLite, held while it lasts ([`SqlStore::write_turn`]).
pub(crate) type WriteTurn = Option<tokio::sync::OwnedMutexGuard<()>>;

/// How long a SQLite connection is used before it is opened again (see `connect`).
const SQLITE_CONNECTION_LIFETIME: Duration = Duration::from_secs(15);

/// Counters a benchmark or operator can read.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Write transactions committed (each step commit, journal write, delivery... is one).
    pub commits: AtomicU64,
    /// Reads of a run's stream events (pages of [`fathom_engine::store::RunStore::events_after`]):
    /// what readers could not take from this process's commits as they landed.
    pub stream_reads: AtomicU64,
    /// Looks for runs to claim (one statement each, whether it took any).
    pub claim_looks: AtomicU64,
}

/// The engine's storage over one database.
#[derive(Clone)]
pub struct SqlStore {
    /// The pool, and connections kept between statements (see [`fathom_pool`]).
    db: fathom_pool::Kept<sqlx::Any>,
    dialect: Dialect,
    stats: Arc<StoreStats>,
    /// The connection URL, for the change listener (Postgres).
    url: Arc<str>,
    /// Tags this process's work announcements, so its own listener skips them.
    origin: Arc<str>,
    /// Artifacts known stored (see [`artifacts::Stored`]).
    stored: Arc<artifacts::Stored>,
    /// SQLite: this process's writers take turns here (see [`SqlStore::write_turn`]).
    writers: Option<Arc<tokio::sync::Mutex<()>>>,
    /// SQLite with a file: checkpoints its log in the background while the store lives.
    _checkpointer: Option<Arc<checkpoint::Checkpointer>>,
}

/// The channel stream changes are announced on.
pub(crate) const CHANGES_CHANNEL: &str = "fathom_run_events";
/// Between the writer's origin and the run id in a change notice (no id holds it).
const NOTICE_SEPARATOR: char = '\u{1f}';
/// Between the writer's origin and the stream's new head, where a notice tells it. A process
/// that knows no head reads origin and head together as some other origin, and wakes its
/// readers as for any other process's change.
const HEAD_SEPARATOR: char = '\u{1e}';
/// The channel that tells workers there may be a run to claim (a run created, a message
/// delivered, a lease let go); the payload is the announcing process's origin tag and the
/// run's workflow, with [`NOTICE_SEPARATOR`] between them.
pub(crate) const WORK_CHANNEL: &str = "fathom_work";

/// Listens until the connection fails; `listening` tells whether it got that far.
async fn listen(
    url: &str,
    origin: &str,
    engine: &fathom_engine::Engine,
    listening: &mut bool,
) -> sqlx::Error {
    let mut listener = match sqlx::postgres::PgListener::connect(url).await {
        Ok(l) => l,
        Err(e) => return e,
    };
    // A lost connection is ours to notice: connected again behind our back, the feed would
    // look live while the notices sent meanwhile were gone, and a reader waiting for one of
    // them would wait for the next change of its run.
    listener.eager_reconnect(false);
    if let Err(e) = listener.listen_all([CHANGES_CHANNEL, WORK_CHANNEL]).await {
        return e;
    }
    *listening = true;
    engine.set_relay_live(true);
    loop {
        match listener.try_recv().await {
            Ok(None) => {
                return sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the change feed's connection was lost",
                ));
            }
            Ok(Some(n)) if n.channel() == WORK_CHANNEL => {
                match n.payload().split_once(NOTICE_SEPARATOR) {
                    Some((from, _)) if from == origin => {}
                    Some((_, workflow)) => engine.nudge_for(workflow),
                    // From a version that sent its origin alone.
                    None if n.payload() != origin => engine.nudge(),
                    None => {}
                }
            }
            Ok(Some(n)) => match n.payload().split_once(NOTICE_SEPARATOR) {
                Some((from, run_id)) => {
                    let (from, head) = match from.split_once(HEAD_SEPARATOR) {
                        Some((from, head)) => (from, head.parse().ok()),
                        None => (from, None),
                    };
                    if from == origin {
                        engine.announce_own(run_id, head);
                    } else {
                        engine.announce(run_id);
                    }
                }
                // From a version that sent the run id alone.
                None => engine.announce(n.payload()),
            },
            Err(e) => return e,
        }
    }
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("dialect", &self.dialect)
            .finish()
    }
}

/// How to reach a database: a `postgres://` URL, a `sqlite:` URL, or a plain file path
/// (taken as SQLite).
#[derive(Debug, Clone)]
pub struct DatabaseTarget {
    pub url: String,
    pub dialect: Dialect,
}

impl DatabaseTarget {
    pub fn parse(s: &str) -> StoreResult<Self> {
        let s = s.trim();
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(DatabaseTarget {
                url: s.to_string(),
                dialect: Dialect::Postgres,
            });
        }
        if let Some(rest) = s.strip_prefix("sqlite:") {
            return Self::sqlite(rest.strip_prefix("//").unwrap_or(rest));
        }
        if s.contains("://") {
            return Err(StoreError::Invalid(format!(
                "unsupported database URL '{}': use postgres://... or a SQLite file path",
                s.split("://").next().unwrap_or_default()
            )));
        }
        Self::sqlite(s)
    }

    /// A SQLite file (`path`, with any `?key=value` options), created when missing unless the
    /// options say another `mode`: `sqlite://rel/file.db`, `sqlite:///abs/file.db` and a plain
    /// path all open the same way.
    fn sqlite(path_and_query: &str) -> StoreResult<Self> {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        if path.is_empty() {
            return Err(StoreError::Invalid("empty database path".into()));
        }
        let mut options: Vec<&str> = query.split('&').filter(|o| !o.is_empty()).collect();
        if path != ":memory:" && !options.iter().any(|o| o.starts_with("mode=")) {
            options.push("mode=rwc");
        }
        let url = match options.is_empty() {
            true => format!("sqlite://{path}"),
            false => format!("sqlite://{path}?{}", options.join("&")),
        };
        Ok(DatabaseTarget {
            url,
            dialect: Dialect::Sqlite,
        })
    }

    /// The SQLite file this target names, if any.
    pub fn sqlite_path(&self) -> Option<&str> {
        if self.dialect != Dialect::Sqlite {
            return None;
        }
        let rest = self
            .url
            .strip_prefix("sqlite://")
            .or_else(|| self.url.strip_prefix("sqlite:"))?;
        Some(rest.split('?').next().unwrap_or(rest))
    }
}

impl SqlStore {
    /// Connects, creating a SQLite file (and its folder) if needed, and applies migrations.
    pub async fn connect(database: &str) -> StoreResult<Self> {
        sqlx::any::install_default_drivers();
        let target = DatabaseTarget::parse(database)?;
        if let Some(path) = target.sqlite_path()
            && path != ":memory:"
            && let Some(dir) = Path::new(path).parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Invalid(format!(
                    "cannot create database folder {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let options = AnyConnectOptions::from_str(&target.url)
            .map_err(|e| StoreError::Invalid(format!("bad database URL: {e}")))?;
        let dialect = target.dialect;
        let pool = AnyPoolOptions::new()
            .max_connections(match dialect {
                Dialect::Postgres => 16,
                Dialect::Sqlite => 8,
            })
            // Short: while the database is away a request is answered 503 within this time
            // rather than hanging; the engine tries again by itself.
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // No ping before each use: it cost every statement a second round trip (on
            // Postgres a Sync and its ReadyForQuery; on SQLite a hop to the connection's
            // thread and back). A connection that broke fails its statement, which is
            // reported as the database being unavailable and is closed, not reused.
            .test_before_acquire(false)
            // A connection handed back inside a transaction (its rollback failed: the
            // database went away or refused writes meanwhile) is closed, not reused: it would
            // refuse every transaction begun on it.
            .before_acquire(|conn, _| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
            })
            // SQLite opens a file it may not write (made read-only for a while) read-only,
            // for good: such a connection refuses every write after the file is writable
            // again. Connections are renewed often enough that the pool heals by itself.
            .max_lifetime(match dialect {
                Dialect::Postgres => Some(Duration::from_secs(30 * 60)),
                Dialect::Sqlite => Some(SQLITE_CONNECTION_LIFETIME),
            })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        conn.execute(checkpoint::PRAGMAS.as_str()).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .map_err(|e| connect_error(&target, e))?;
        let mut migrator = match dialect {
            Dialect::Postgres => sqlx::migrate!("../../migrations/postgres"),
            Dialect::Sqlite => sqlx::migrate!("../../migrations/sqlite"),
        };
        // Migrations add tables, columns and indexes, and replace an index only where the
        // older process's queries are still served (0006), so a process older than the
        // database's schema still works on it: during a rolling upgrade, or after a rollback,
        // it starts rather than refusing a migration it does not know (runs written in a newer
        // format it leaves alone, see `NewerFormat`).
        migrator.set_ignore_missing(true);
        migrator
            .run(&pool)
            .await
            .map_err(|e| StoreError::backend_because("migrations failed", e))?;
        let db = fathom_pool::Kept::new(pool);
        let writers: Option<Arc<tokio::sync::Mutex<()>>> =
            (dialect == Dialect::Sqlite).then(Default::default);
        let checkpointer = target
            .sqlite_path()
            .zip(writers.clone())
            .and_then(|(path, writers)| checkpoint::Checkpointer::start(db.clone(), path, writers))
            .map(Arc::new);
        Ok(SqlStore {
            db,
            dialect,
            stats: Arc::new(StoreStats::default()),
            url: Arc::from(target.url.as_str()),
            origin: Arc::from(fathom_engine::new_id().as_str()),
            stored: Default::default(),
            writers,
            _checkpointer: checkpointer,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// A SQL expression that tells other processes' workers, when the statement commits,
    /// that there may be a run of its `workflow` column's workflow to claim (a worker that
    /// does not drive that workflow is not woken): for a `RETURNING` or select list over a
    /// run's row on Postgres (None on SQLite, whose workers poll). The origin tag is our own
    /// id, safe as a literal.
    pub(crate) fn work_notice(&self) -> Option<String> {
        (self.dialect == Dialect::Postgres).then(|| {
            format!(
                "pg_notify('{WORK_CHANNEL}', '{}' || chr({}) || workflow)",
                self.origin, NOTICE_SEPARATOR as u32
            )
        })
    }

    /// The payload of a change notice for run `run_id`: this store's origin and the run, so
    /// that the relay of the process that wrote it need not wake its readers twice.
    pub(crate) fn change_notice(&self, run_id: &str) -> String {
        format!("{}{NOTICE_SEPARATOR}{run_id}", self.origin)
    }

    /// A change notice for run `run_id` that also tells the stream's new head, as the two
    /// texts to put before and after the head (Postgres computes it in the statement): the
    /// relay of the process that wrote it then knows whether its readers have that change as
    /// news already.
    pub(crate) fn change_notice_around_head(&self, run_id: &str) -> (String, String) {
        (
            format!("{}{HEAD_SEPARATOR}", self.origin),
            format!("{NOTICE_SEPARATOR}{run_id}"),
        )
    }

    /// [`SqlStore::work_notice`] as a `RETURNING` clause for an UPDATE, or nothing.
    pub(crate) fn returning_work_notice(&self) -> String {
        self.work_notice()
            .map(|n| format!(" RETURNING {n}"))
            .unwrap_or_default()
    }

    /// Relays other processes' changes to `engine`'s readers as they commit (LISTEN/NOTIFY
    /// on Postgres), and tells the engine while the relay is live so that nothing polls;
    /// reconnects with backoff when the connection drops. Wakes the engine's worker when
    /// another process makes work of a workflow it drives ([`WORK_CHANNEL`]). None on
    /// SQLite, which relays nothing (the engine's poller looks for changes, and its worker
    /// for runs, instead).
    pub fn relay_changes(
        &self,
        engine: Arc<fathom_engine::Engine>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if self.dialect != Dialect::Postgres {
            return None;
        }
        let url = self.url.clone();
        let origin = self.origin.clone();
        Some(tokio::spawn(async move {
            let mut backoff = Duration::from_millis(250);
            loop {
                let mut listening = false;
                let e = listen(&url, &origin, &engine, &mut listening).await;
                engine.set_relay_live(false);
                tracing::warn!(error = %e, "change listener lost; reconnecting");
                // A listener that worked starts its retries afresh.
                if listening {
                    backoff = Duration::from_millis(250);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }))
    }

    /// The pool, for tests and tools that need raw access.
    pub fn pool(&self) -> &AnyPool {
        self.db.direct()
    }

    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Begins a write transaction, with this process's turn to write held for its length
    /// (keep the guard until the transaction ends). On SQLite it takes the write lock at
    /// once, so two writers queue on the busy timeout instead of failing on a lock upgrade.
    async fn begin_write(&self) -> StoreResult<(sqlx::Transaction<'static, sqlx::Any>, WriteTurn)> {
        let turn = self.write_turn().await;
        let tx = match self.dialect {
            Dialect::Postgres => self.db.counted(self.db.direct().begin()).await,
            Dialect::Sqlite => {
                self.db
                    .counted(self.db.direct().begin_with("BEGIN IMMEDIATE"))
                    .await
            }
        };
        Ok((tx.map_err(db_err)?, turn))
    }

    async fn commit(&self, tx: sqlx::Transaction<'static, sqlx::Any>) -> StoreResult<()> {
        tx.commit().await.map_err(db_err)?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// This process's turn to write, on SQLite (None on Postgres, whose writers do not
    /// exclude each other): held around every write. SQLite lets one writer in at a time,
    /// and one that finds the lock taken sleeps in its busy handler for at least a
    /// millisecond, several times a write's length, while the cores stand idle. Waiting here
    /// instead, in turn, hands the lock on the moment it is free. Other processes on the same
    /// file still meet SQLite's lock and its busy handler, and under sustained load here they
    /// wait longer than this process's writers do. The wait is bounded: when a write holds
    /// the turn that long (another process holds SQLite's lock, or the pool is exhausted), a
    /// writer goes on without its turn, to meet SQLite's lock itself, rather than queue
    /// behind every write before it, each waiting its own timeout.
    pub(crate) async fn write_turn(&self) -> WriteTurn {
        let writers = self.writers.as_ref()?;
        tokio::time::timeout(ACQUIRE_TIMEOUT, writers.clone().lock_owned())
            .await
            .ok()
    }

    fn count_commit(&self) {
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
    }
}

fn connect_error(target: &DatabaseTarget, e: sqlx::Error) -> StoreError {
    match target.sqlite_path() {
        Some(path) => StoreError::Invalid(format!("cannot open database file {path}: {e}")),
        None => StoreError::backend_because("cannot connect to database", e),
    }
}

/// A database failure: `Invalid` for a value the database cannot hold, `Unavailable` when
/// the database cannot be reached or refuses writes for now (worth trying again shortly),
/// else `Backend`. The last two keep the database's error as their source, for logs only:
/// their messages say no more than that the database is away or failed.
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    // Postgres text cannot hold U+0000 (22021, and 22P05 for jsonb): a value given, not the
    // database, is at fault.
    if let sqlx::Error::Database(db) = &e
        && matches!(db.code().as_deref(), Some("22021" | "22P05"))
    {
        return StoreError::Invalid(
            "a text value holds a NUL character (\\u0000), which cannot be stored".into(),
        );
    }
    if is_unavailable(&e) {
        StoreError::unavailable(e)
    } else {
        StoreError::backend_cause(e)
    }
}

/// Whether `e` says the database is out of reach rather than that the statement failed: no
/// connection to be had, a connection lost, the server shutting down or starting up, or
/// (SQLite) a database file that is locked, read-only or cannot be written just now.
fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // Postgres SQLSTATEs: class 08 connection exceptions, 57P01-57P03 shutting down
            // or starting up, 53300 too many connections, 25006 a read-only transaction
            // (a standby). SQLite result codes, primary part: BUSY 5, LOCKED 6, READONLY 8,
            // IOERR 10, FULL 13, CANTOPEN 14.
            if code.starts_with("08")
                || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300" | "25006")
            {
                return true;
            }
            code.parse::<i64>()
                .is_ok_and(|n| matches!(n & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
        }
        _ => false,
    }
}

pub(crate) fn json_err(e: serde_json::Error) -> StoreError {
    StoreError::backend_because("stored JSON unreadable", e)
}
