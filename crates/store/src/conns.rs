//! The store's connections: sqlx's pool, and connections kept out of it between statements.
//!
//! sqlx's pool checks every connection handed back to it with a ping (on Postgres a Sync and
//! its reply, on SQLite a hop to the connection's thread and back), from a task it spawns for
//! the purpose: a second round trip for every statement, and on Postgres work for the server
//! that is the bottleneck under load. A connection whose statement ran to its end is known to
//! be good, so [`Db`] keeps it for the next statement instead. One whose statement failed or
//! was cancelled halfway goes back to the pool, which checks it as before.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::any::{AnyQueryResult, AnyRow, AnyTypeInfo};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Either, Execute, Executor, SqlStr};

/// The pool and the connections kept warm beside it. Statements run on `&Db` as on a pool.
#[derive(Clone)]
pub(crate) struct Db {
    pool: AnyPool,
    kept: Arc<Kept>,
}

struct Kept {
    idle: Mutex<Vec<(PoolConnection<Any>, Instant)>>,
    /// Connections kept at most: half the pool, so that the other half stays with the pool
    /// for whatever takes a connection from it directly (transactions, tests).
    max: usize,
    /// How long a connection is kept before it goes back to the pool, whose own lifetime
    /// for connections it then applies.
    lifetime: Duration,
}

impl Db {
    pub(crate) fn new(pool: AnyPool, max_connections: u32, lifetime: Duration) -> Db {
        Db {
            pool,
            kept: Arc::new(Kept {
                idle: Mutex::new(Vec::new()),
                max: (max_connections / 2).max(1) as usize,
                lifetime,
            }),
        }
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// A connection for a statement or a body of them: a kept one, else one from the pool.
    /// Hand it back with [`Lent::done`] once its work ran to its end.
    pub(crate) async fn lend(&self) -> Result<Lent, sqlx::Error> {
        let (kept, stale) = {
            let mut idle = self.kept.idle.lock().unwrap_or_else(|e| e.into_inner());
            let stale: Vec<_> = {
                let lifetime = self.kept.lifetime;
                let (old, young): (Vec<_>, Vec<_>) = std::mem::take(&mut *idle)
                    .into_iter()
                    .partition(|(_, since)| since.elapsed() >= lifetime);
                *idle = young;
                old
            };
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

    /// Lets go of every kept connection (to the pool), as before closing it.
    pub(crate) fn release_all(&self) {
        let all = std::mem::take(&mut *self.kept.idle.lock().unwrap_or_else(|e| e.into_inner()));
        drop(all);
    }
}

/// A connection lent by [`Db::lend`]. Dropped without [`Lent::done`] (its statement failed, or
/// was cancelled halfway), it goes back to the pool, which checks it.
pub(crate) struct Lent {
    conn: Option<PoolConnection<Any>>,
    since: Instant,
    kept: Arc<Kept>,
}

impl Lent {
    pub(crate) fn get(&mut self) -> &mut AnyConnection {
        // Taken out only by `done` and `into_inner`, which consume the loan.
        self.conn
            .as_mut()
            .expect("a lent connection is held until done")
    }

    /// Its work ran to its end: keep it for the next statement, unless it was left inside
    /// a transaction or enough are kept.
    pub(crate) fn done(mut self) {
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
    pub(crate) fn into_inner(mut self) -> PoolConnection<Any> {
        self.conn
            .take()
            .expect("a lent connection is held until done")
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

impl<'p> Executor<'p> for &'_ Db {
    type Database = Any;

    /// Every row is read before the first is handed on: the connection is kept only once its
    /// statement ran to the end (the store reads whole results anyway).
    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let db = self.clone();
        futures_util::stream::once(async move {
            let mut conn = db.lend().await?;
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
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let db = self.clone();
        Box::pin(async move {
            let mut conn = db.lend().await?;
            let row = conn.get().fetch_optional(query).await?;
            conn.done();
            Ok(row)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<sqlx::any::AnyStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        let db = self.clone();
        Box::pin(async move {
            let mut conn = db.lend().await?;
            let statement = conn.get().prepare_with(sql, parameters).await?;
            conn.done();
            Ok(statement)
        })
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<sqlx::Describe<Any>, sqlx::Error>> {
        let db = self.clone();
        Box::pin(async move {
            let mut conn = db.lend().await?;
            let described = conn.get().describe(sql).await?;
            conn.done();
            Ok(described)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn db(dir: &tempfile::TempDir) -> Db {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap();
        Db::new(pool, 4, Duration::from_secs(60))
    }

    fn kept(db: &Db) -> usize {
        db.kept.idle.lock().unwrap().len()
    }

    #[tokio::test]
    async fn statements_one_after_another_run_on_one_kept_connection() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir).await;
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
        assert_eq!(kept(&db), 1);
    }

    #[tokio::test]
    async fn a_connection_whose_statement_failed_goes_back_to_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir).await;
        sqlx::query("SELECT 1").execute(&db).await.unwrap();
        assert_eq!(kept(&db), 1);
        let Err(err) = sqlx::query("SELECT * FROM nowhere").fetch_all(&db).await else {
            panic!("a table that is not there was read");
        };
        assert!(err.to_string().contains("nowhere"), "{err}");
        assert_eq!(kept(&db), 0, "not kept: the pool checks it");
        // Cancelled halfway: dropped before it ran to its end, it is not kept either.
        let lent = db.lend().await.unwrap();
        drop(lent);
        assert_eq!(kept(&db), 0);
        sqlx::query("SELECT 1").execute(&db).await.unwrap();
        assert_eq!(kept(&db), 1);
    }

    #[tokio::test]
    async fn at_most_half_the_pool_is_kept_and_closing_lets_every_one_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir).await;
        let lent: Vec<Lent> = futures_util::future::try_join_all((0..4).map(|_| db.lend()))
            .await
            .unwrap();
        assert_eq!(db.pool().size(), 4);
        for l in lent {
            l.done();
        }
        assert_eq!(kept(&db), 2);
        db.release_all();
        // Closing waits for every connection out of the pool: none is kept from it.
        tokio::time::timeout(Duration::from_secs(10), db.pool().close())
            .await
            .expect("the pool closes");
    }
}
