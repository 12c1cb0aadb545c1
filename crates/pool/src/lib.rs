//! # fathom-pool: database connections kept between statements
//!
//! sqlx's pool checks every connection handed back to it with a ping (on Postgres a Sync and
//! its reply, on SQLite a hop to the connection's thread and back), from a task it spawns for
//! the purpose: a second round trip for every statement, and on Postgres work for the server,
//! which is what runs out first under load. A connection whose statement ran to its end is
//! known to be good, so [`Kept`] keeps it for the next statement instead. One whose statement
//! failed, or was cancelled halfway, goes back to the pool, which checks it as before.
//!
//! Statements run on `&Kept<DB>` as on `&Pool<DB>`. The run store and the corpus index use it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, Describe, Either, Execute, Executor, Pool, SqlStr};

/// A pool and the connections kept out of it between statements.
pub struct Kept<DB: Database> {
    pool: Pool<DB>,
    shelf: Arc<Shelf<DB>>,
}

impl<DB: Database> Clone for Kept<DB> {
    fn clone(&self) -> Self {
        Kept {
            pool: self.pool.clone(),
            shelf: self.shelf.clone(),
        }
    }
}

struct Shelf<DB: Database> {
    state: Mutex<ShelfState<DB>>,
    /// Connections kept at most: half the pool, so that the other half stays with it.
    max: usize,
    /// The pool's own bounds, applied to kept connections too: how long one is used at
    /// most (from when it was taken), and how long one may sit unused.
    lifetime: Duration,
    idle_timeout: Duration,
    /// Callers waiting for a connection from the pool. While any wait, a connection whose
    /// statement ended goes back to the pool for them rather than onto the shelf, where
    /// none of them would look: kept from them, they would time out with connections idle.
    waiting: AtomicUsize,
}

/// A caller counted in [`Shelf::waiting`] while it lives (a cancelled wait included).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct ShelfState<DB: Database> {
    idle: Vec<Shelved<DB>>,
    /// Closing: nothing goes on the shelf any more.
    closed: bool,
}

struct Shelved<DB: Database> {
    conn: PoolConnection<DB>,
    /// When it was taken from the pool (it was opened then or earlier).
    taken: Instant,
    /// When its last statement ended.
    used: Instant,
}

impl<DB: Database> Shelf<DB> {
    fn state(&self) -> MutexGuard<'_, ShelfState<DB>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the connections past the pool's bounds off the shelf, for the caller to drop
    /// (outside the lock: dropping one hands it back to the pool).
    fn take_stale(&self, state: &mut ShelfState<DB>) -> Vec<Shelved<DB>> {
        let is_stale = |s: &Shelved<DB>| {
            s.taken.elapsed() >= self.lifetime || s.used.elapsed() >= self.idle_timeout
        };
        // Looked at before every statement: nothing is allocated when none is stale.
        if !state.idle.iter().any(is_stale) {
            return Vec::new();
        }
        let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut state.idle)
            .into_iter()
            .partition(is_stale);
        state.idle = fresh;
        stale
    }
}

impl<DB: Database> Drop for Shelf<DB> {
    fn drop(&mut self) {
        // A pooled connection dropped hands itself back to the pool from a task it spawns,
        // which needs a runtime: without one (the last handle dropped after it stopped), the
        // kept connections are closed here instead.
        if tokio::runtime::Handle::try_current().is_err() {
            let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
            for s in state.idle.drain(..) {
                drop(s.conn.detach());
            }
        }
    }
}

impl<DB: Database> Kept<DB> {
    /// Keeps up to half of `pool`'s connections (none when the pool keeps a minimum of its
    /// own, whose upkeep needs a runtime when a connection is dropped), each for at most half
    /// the pool's lifetime from when it was taken (the pool does not say when it opened it,
    /// so none outlives one and a half lifetimes) and no longer unused than the pool's idle
    /// timeout. Within a Tokio runtime, a task lets go of those past these bounds, as the
    /// pool's own reaper would.
    pub fn new(pool: Pool<DB>) -> Kept<DB> {
        let options = pool.options();
        let max = if options.get_min_connections() > 0 {
            0
        } else {
            (options.get_max_connections() / 2) as usize
        };
        let shelf = Arc::new(Shelf {
            state: Mutex::new(ShelfState {
                idle: Vec::new(),
                closed: false,
            }),
            max,
            lifetime: options
                .get_max_lifetime()
                .map_or(Duration::MAX, |lifetime| lifetime / 2),
            idle_timeout: options.get_idle_timeout().unwrap_or(Duration::MAX),
            waiting: AtomicUsize::new(0),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let period = (shelf.idle_timeout.min(shelf.lifetime) / 2)
                .clamp(Duration::from_secs(1), Duration::from_secs(3600));
            runtime.spawn(reap(Arc::downgrade(&shelf), period));
        }
        Kept { pool, shelf }
    }

    /// The pool, for taking a connection from it directly (a transaction, a tool): one kept
    /// connection goes back to it first, so the shelf never leaves it short.
    pub fn direct(&self) -> &Pool<DB> {
        let one = self.shelf.state().idle.pop();
        drop(one);
        &self.pool
    }

    /// Awaits `take`, a caller taking a connection from the pool itself (through
    /// [`Kept::direct`]: a transaction begun), counted among those waiting for one, so that
    /// connections done meanwhile go to the pool for it rather than onto the shelf.
    pub async fn counted<T>(&self, take: impl std::future::Future<Output = T>) -> T {
        let _waiting = Waiting::enter(&self.shelf.waiting);
        take.await
    }

    /// A connection for a statement or a body of them: a kept one, else one from the pool.
    /// Hand it back with [`Lent::done`] once its work ran to its end.
    pub async fn lend(&self) -> Result<Lent<DB>, sqlx::Error> {
        let take_kept = || {
            let (kept, stale) = {
                let mut state = self.shelf.state();
                let stale = self.shelf.take_stale(&mut state);
                (state.idle.pop(), stale)
            };
            drop(stale);
            kept
        };
        let (conn, taken) = match take_kept() {
            Some(s) => (s.conn, s.taken),
            None => {
                let _waiting = Waiting::enter(&self.shelf.waiting);
                // Counted first, then looked again: one kept between the first look and
                // the count would otherwise sit on the shelf while this caller waits.
                match take_kept() {
                    Some(s) => (s.conn, s.taken),
                    None => (self.pool.acquire().await?, Instant::now()),
                }
            }
        };
        Ok(Lent {
            conn: Some(conn),
            taken,
            shelf: self.shelf.clone(),
        })
    }

    /// The kept connections, off the shelf: for work on each idle connection (each goes
    /// back to the pool when dropped).
    pub fn take_idle(&self) -> Vec<PoolConnection<DB>> {
        std::mem::take(&mut self.shelf.state().idle)
            .into_iter()
            .map(|s| s.conn)
            .collect()
    }

    /// Closes the pool: nothing is kept from now on, the kept connections go back to it,
    /// and it waits for every connection out of it.
    pub async fn close(&self) {
        let kept = {
            let mut state = self.shelf.state();
            state.closed = true;
            std::mem::take(&mut state.idle)
        };
        drop(kept);
        self.pool.close().await;
    }
}

/// Lets go of kept connections past the pool's bounds every `period`, until the shelf is
/// gone.
async fn reap<DB: Database>(shelf: Weak<Shelf<DB>>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(shelf) = shelf.upgrade() else { return };
        let stale = shelf.take_stale(&mut shelf.state());
        drop(stale);
    }
}

/// A connection lent by [`Kept::lend`]. Dropped without [`Lent::done`] (its statement failed,
/// or was cancelled halfway), it goes back to the pool, which checks it.
pub struct Lent<DB: Database> {
    conn: Option<PoolConnection<DB>>,
    taken: Instant,
    shelf: Arc<Shelf<DB>>,
}

impl<DB: Database> Lent<DB> {
    pub fn get(&mut self) -> &mut DB::Connection {
        // Taken out only by `done` and `into_inner`, which consume the loan.
        self.conn
            .as_mut()
            .expect("a lent connection is held until done")
    }

    /// Its work ran to its end (every row of every statement read): it is kept for the next
    /// statement, unless it is inside a transaction begun through sqlx, the pool is closing,
    /// enough are kept, or a caller waits for one from the pool (then it goes there). A
    /// transaction begun by the SQL itself is not seen here: a body that begins one must end
    /// it before it is done (the store's write bodies commit last).
    pub fn done(mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.is_in_transaction() {
            return;
        }
        let mut state = self.shelf.state();
        if !state.closed
            && state.idle.len() < self.shelf.max
            && self.shelf.waiting.load(Ordering::SeqCst) == 0
        {
            state.idle.push(Shelved {
                conn,
                taken: self.taken,
                used: Instant::now(),
            });
        } else {
            drop(state);
            drop(conn);
        }
    }

    /// The pooled connection itself, for a caller that closes it rather than hand it back.
    pub fn into_inner(mut self) -> PoolConnection<DB> {
        self.conn
            .take()
            .expect("a lent connection is held until done")
    }
}

impl<DB: Database> std::fmt::Debug for Kept<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").finish_non_exhaustive()
    }
}

impl<'p, DB: Database> Executor<'p> for &'_ Kept<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    type Database = DB;

    /// Every row is read before the first is handed on: the connection is kept only once its
    /// statement ran to the end (callers here read whole results anyway).
    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<DB::QueryResult, DB::Row>, sqlx::Error>>
    where
        E: 'q + Execute<'q, DB>,
    {
        let kept = self.clone();
        futures_util::stream::once(async move {
            let mut conn = kept.lend().await?;
            let all: Vec<_> = conn.get().fetch_many(query).try_collect().await?;
            conn.done();
            Ok::<_, sqlx::Error>(futures_util::stream::iter(all.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<DB::Row>, sqlx::Error>>
    where
        E: 'q + Execute<'q, DB>,
    {
        let kept = self.clone();
        Box::pin(async move {
            let mut conn = kept.lend().await?;
            // Read to the end, not to the first row: what follows it (another statement of
            // a body, an error of the implicit commit) belongs to this statement, not to the
            // next one on the connection.
            let mut first = None;
            let mut results = conn.get().fetch_many(query);
            while let Some(result) = results.try_next().await? {
                if let Either::Right(row) = result
                    && first.is_none()
                {
                    first = Some(row);
                }
            }
            drop(results);
            conn.done();
            Ok(first)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [DB::TypeInfo],
    ) -> BoxFuture<'e, Result<DB::Statement, sqlx::Error>>
    where
        'p: 'e,
    {
        let kept = self.clone();
        Box::pin(async move {
            let mut conn = kept.lend().await?;
            let statement = conn.get().prepare_with(sql, parameters).await?;
            conn.done();
            Ok(statement)
        })
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<DB>, sqlx::Error>> {
        let kept = self.clone();
        Box::pin(async move {
            let mut conn = kept.lend().await?;
            let described = conn.get().describe(sql).await?;
            conn.done();
            Ok(described)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Sqlite;
    use sqlx::sqlite::SqlitePoolOptions;

    async fn kept(dir: &tempfile::TempDir) -> Kept<Sqlite> {
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            // As the store's pool does: one handed back inside a transaction is not reused.
            .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            .connect(&url)
            .await
            .unwrap();
        Kept::new(pool)
    }

    /// Waits until `done` holds, for 10 s at most.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            tokio::task::yield_now().await;
        }
    }

    fn on_shelf(kept: &Kept<Sqlite>) -> usize {
        kept.shelf.state().idle.len()
    }

    #[tokio::test]
    async fn statements_one_after_another_run_on_one_kept_connection() {
        let dir = tempfile::tempdir().unwrap();
        let db = kept(&dir).await;
        // A temporary table lives on the connection that made it.
        sqlx::query("CREATE TEMP TABLE mine (x INTEGER)")
            .execute(&db)
            .await
            .unwrap();
        for i in 0..20 {
            sqlx::query("INSERT INTO temp.mine VALUES ($1)")
                .bind(i)
                .execute(&db)
                .await
                .unwrap();
        }
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM temp.mine")
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!(n, 20);
        assert_eq!(db.pool.size(), 1, "one connection opened for them all");
        assert_eq!(on_shelf(&db), 1);
    }

    #[tokio::test]
    async fn a_connection_whose_statement_failed_goes_back_to_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let db = kept(&dir).await;
        sqlx::query("SELECT 1").execute(&db).await.unwrap();
        assert_eq!(on_shelf(&db), 1);
        let Err(err) = sqlx::query("SELECT * FROM nowhere").fetch_all(&db).await else {
            panic!("a table that is not there was read");
        };
        assert!(err.to_string().contains("nowhere"), "{err}");
        assert_eq!(on_shelf(&db), 0, "not kept: the pool checks it");
        // Cancelled halfway: dropped before it ran to its end, it is not kept either.
        drop(db.lend().await.unwrap());
        assert_eq!(on_shelf(&db), 0);
        // Left inside a transaction: not kept.
        let mut lent = db.lend().await.unwrap();
        std::mem::forget(lent.get().begin().await.unwrap());
        lent.done();
        assert_eq!(on_shelf(&db), 0);
        sqlx::query("SELECT 1").execute(&db).await.unwrap();
        assert_eq!(on_shelf(&db), 1);
    }

    /// A caller that found no kept connection and waits on a full pool gets the next one
    /// whose statement ends: it is not kept on the shelf where the caller does not look.
    #[tokio::test]
    async fn a_caller_waiting_on_the_pool_gets_the_next_connection_done() {
        let dir = tempfile::tempdir().unwrap();
        let db = kept(&dir).await;
        let lent: Vec<Lent<Sqlite>> = futures_util::future::try_join_all((0..4).map(|_| db.lend()))
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let db = db.clone();
            async move { db.lend().await.map(|l| l.done()) }
        });
        until("the caller waits on the pool", || {
            db.shelf.waiting.load(Ordering::SeqCst) > 0
        })
        .await;
        let mut lent = lent.into_iter();
        lent.next().unwrap().done();
        assert_eq!(
            on_shelf(&db),
            0,
            "handed to the pool for the caller, not kept"
        );
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiting caller gets it")
            .unwrap()
            .expect("within the pool's timeout");
        // Nobody waits now: the next one done is kept again.
        lent.next().unwrap().done();
        assert_eq!(on_shelf(&db), 2);
        // A caller beginning a transaction on the pool itself is counted too.
        let held = [db.lend().await.unwrap(), db.lend().await.unwrap()];
        let direct = tokio::spawn({
            let db = db.clone();
            async move { db.counted(db.direct().begin()).await.map(drop) }
        });
        until("the transaction waits on the pool", || {
            db.shelf.waiting.load(Ordering::SeqCst) > 0
        })
        .await;
        let [first, _second] = held;
        first.done();
        assert_eq!(on_shelf(&db), 0, "handed to the pool for the transaction");
        tokio::time::timeout(Duration::from_secs(10), direct)
            .await
            .expect("the transaction begins")
            .unwrap()
            .expect("within the pool's timeout");
    }

    #[tokio::test]
    async fn at_most_half_the_pool_is_kept_and_closing_lets_every_one_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = kept(&dir).await;
        let lent: Vec<Lent<Sqlite>> = futures_util::future::try_join_all((0..4).map(|_| db.lend()))
            .await
            .unwrap();
        assert_eq!(db.pool.size(), 4);
        for l in lent {
            l.done();
        }
        assert_eq!(on_shelf(&db), 2);
        // Taking the pool for direct use gives one kept connection back to it first.
        let _ = db.direct().acquire().await.unwrap();
        assert_eq!(on_shelf(&db), 1);
        // A statement still running when the pool closes does not keep its connection from
        // it: closing ends.
        let late = db.lend().await.unwrap();
        let closing = tokio::spawn({
            let db = db.clone();
            async move { db.close().await }
        });
        until("the pool starts closing", || db.pool.is_closed()).await;
        late.done();
        tokio::time::timeout(Duration::from_secs(10), closing)
            .await
            .expect("the pool closes")
            .unwrap();
        assert_eq!(on_shelf(&db), 0);
    }
}
