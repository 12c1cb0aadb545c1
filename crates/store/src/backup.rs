//! Online backups: a consistent copy of a live SQLite database, taken while it serves, and
//! what a database holds, so a person can check a copy against its original.

use std::collections::BTreeMap;
use std::path::Path;

use fathom_engine::store::{StoreError, StoreResult};

use crate::{Dialect, SqlStore, db_err};

/// What a database holds: enough to see that a backup has everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Runs by status (`completed`, `waiting`, ...).
    pub runs: BTreeMap<String, i64>,
    /// Events on the runs' streams.
    pub events: i64,
    /// Agent Data items (research sessions among them).
    pub items: i64,
    /// Stored artifacts (documents read, reports).
    pub artifacts: i64,
}

impl std::fmt::Display for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: i64 = self.runs.values().sum();
        let by_status: Vec<String> = self.runs.iter().map(|(s, n)| format!("{n} {s}")).collect();
        write!(
            f,
            "{total} runs ({}), {} stream events, {} Agent Data items, {} artifacts",
            if by_status.is_empty() {
                "none".to_string()
            } else {
                by_status.join(", ")
            },
            self.events,
            self.items,
            self.artifacts
        )
    }
}

impl SqlStore {
    /// Writes a consistent copy of this live SQLite database to `dest`, a file that must not
    /// exist yet. `VACUUM INTO` reads one snapshot in a read transaction, so runs go on being
    /// written meanwhile, and the copy holds every transaction committed before it began (a
    /// copy of the file alone can miss what is still in the write-ahead log). Postgres is
    /// backed up with its own tools (`pg_dump`), so this refuses it.
    pub async fn backup_sqlite_into(&self, dest: &Path) -> StoreResult<()> {
        if self.dialect != Dialect::Sqlite {
            return Err(StoreError::Invalid(
                "an online copy is made of a SQLite database; back up Postgres with pg_dump".into(),
            ));
        }
        if dest.exists() {
            return Err(StoreError::Conflict(format!(
                "{} exists already; a backup is written to a new file",
                dest.display()
            )));
        }
        let path = dest.to_str().ok_or_else(|| {
            StoreError::Invalid(format!("{} is not a UTF-8 path", dest.display()))
        })?;
        sqlx::query("VACUUM INTO ?")
            .bind(path)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    /// Whether SQLite finds this database sound (`PRAGMA integrity_check`): None when it is,
    /// else what it found. Postgres checks itself; there it is always None.
    pub async fn integrity_problem(&self) -> StoreResult<Option<String>> {
        if self.dialect != Dialect::Sqlite {
            return Ok(None);
        }
        let found: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_all(self.pool())
            .await
            .map_err(db_err)?;
        Ok((found != ["ok"]).then(|| found.join("; ")))
    }

    /// What this database holds now.
    pub async fn inventory(&self) -> StoreResult<Inventory> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status")
                .fetch_all(self.pool())
                .await
                .map_err(db_err)?;
        let count = |table: &'static str| async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table}"
            )))
            .fetch_one(self.pool())
            .await
            .map_err(db_err)
        };
        Ok(Inventory {
            runs: rows.into_iter().collect(),
            events: count("run_events").await?,
            items: count("collection_items").await?,
            artifacts: count("artifacts").await?,
        })
    }
}
