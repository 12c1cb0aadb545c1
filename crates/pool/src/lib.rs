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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, Describe, Either, Execute, Executor, Pool, SqlStr};

/// A pool and the connections kept out of it between statements.
pub struct Kept<DB: Database> {
    pool: Pool<DB>,
    kept: Arc<Shelf<DB>>,
}

impl<DB: Database> Clone for Kept<DB> {
    fn clone(&self) -> Self {
        Kept {
            pool: self.pool.clone(),
            kept: self.kept.clone(),
        }
    }
}

struct Shelf<DB: Database> {
    idle: Mutex<Vec<(PoolConnection<DB>, Instant)>>,
    /// Connections kept at most: half the pool, so that the other half stays with the pool
    /// for whatever takes a connection from it directly (transactions, tests).
    max: usize,
    /// How long a connection is kept before it goes back to the pool, whose own lifetime
    /// for connections then applies.
    lifetime: Duration,
}

impl<DB: Database> Kept<DB> {
    /// Keeps up to half of `pool`'s `max_connections`, each for at most `lifetime`.
    pub fn new(pool: Pool<DB>, max_connections: u32, lifetime: Duration) -> Kept<DB> {
        Kept {
            pool,
            kept: Arc::new(Shelf {
                idle: Mutex::new(Vec::new()),
                max: (max_connections / 2).max(1) as usize,
                lifetime,
            }),
        }
    }

    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(PoolConnection<DB>, Instant)>> {
        self.kept.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection for a statement or a body of them: a kept one, else one from the pool.
    /// Hand it back with [`Lent::done`] once its work ran to its end.
    pub async fn lend(&self) -> Result<Lent<DB>, sqlx::Error> {
        let (kept, stale) = {
            let mut idle = self.idle();
            let lifetime = self.kept.lifetime;
            let (stale, young): (Vec<_>, Vec<_>) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|(_, since)| since.elapsed() >= lifetime);
            *idle = young;
            (idle.pop(), stale)
        };
        // Outside the lock: dropping a connection hands it back to the pool.
        drop(stale);
        let (conn, since) = match kept {
            Some(kept) => kept,
            None => (self.pool.acquire().await?, Instant::now()),
        };
        Ok(Lent {
            conn: Some(conn),
            since,
            kept: self.kept.clone(),
        })
    }

    /// The kept connections, out of the shelf: for work on each idle connection (they go
    /// back to the pool when dropped).
    pub fn take_idle(&self) -> Vec<PoolConnection<DB>> {
        std::mem::take(&mut *self.idle())
            .into_iter()
            .map(|(conn, _)| conn)
            .collect()
    }

    /// Lets go of every kept connection, to the pool: before closing it, which waits for
    /// every connection out of it.
    pub fn release_all(&self) {
        drop(self.take_idle());
    }
}

/// A connection lent by [`Kept::lend`]. Dropped without [`Lent::done`] (its statement failed,
/// or was cancelled halfway), it goes back to the pool, which checks it.
pub struct Lent<DB: Database> {
    conn: Option<PoolConnection<DB>>,
    since: Instant,
    kept: Arc<Shelf<DB>>,
}

impl<DB: Database> Lent<DB> {
    pub fn get(&mut self) -> &mut DB::Connection {
        // Taken out only by `done` and `into_inner`, which consume the loan.
        self.conn
            .as_mut()
            .expect("a lent connection is held until done")
    }

    /// Its work ran to its end: it is kept for the next statement, unless it was left inside
    /// a transaction or enough are kept.
    pub fn done(mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.is_in_transaction() {
            return;
        }
        let mut idle = self.kept.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.kept.max {
            idle.push((conn, self.since));
        } else {
            drop(idle);
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
            let row = conn.get().fetch_optional(query).await?;
            conn.done();
            Ok(row)
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
            .connect(&url)
            .await
            .unwrap();
        Kept::new(pool, 4, Duration::from_secs(60))
    }

    fn on_shelf(kept: &Kept<Sqlite>) -> usize {
        kept.idle().len()
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
        assert_eq!(db.pool().size(), 1, "one connection opened for them all");
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

    #[tokio::test]
    async fn at_most_half_the_pool_is_kept_and_closing_lets_every_one_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = kept(&dir).await;
        let lent: Vec<Lent<Sqlite>> = futures_util::future::try_join_all((0..4).map(|_| db.lend()))
            .await
            .unwrap();
        assert_eq!(db.pool().size(), 4);
        for l in lent {
            l.done();
        }
        assert_eq!(on_shelf(&db), 2);
        db.release_all();
        // Closing waits for every connection out of the pool: none is kept from it.
        tokio::time::timeout(Duration::from_secs(10), db.pool().close())
            .await
            .expect("the pool closes");
    }
}
