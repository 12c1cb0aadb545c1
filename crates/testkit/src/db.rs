//! Fresh databases for tests: a SQLite file in a temporary folder, or a new database on the
//! Postgres cluster named by `DATABASE_URL` (the test script starts one).

use fathom_store::{Dialect, SqlStore};

/// Keeps a test database alive; the SQLite folder is removed on drop.
pub struct TestDb {
    pub store: SqlStore,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The Postgres cluster for tests. Tests on Postgres fail without it, rather than pass
/// without running: run them through `scripts/test.sh`.
pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!("DATABASE_URL is not set: run the tests with scripts/test.sh, which starts Postgres")
    })
}

/// A URL for a new, empty database of the given kind.
pub async fn fresh_url(dialect: Dialect) -> (String, Option<tempfile::TempDir>) {
    match dialect {
        Dialect::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = dir.path().join("fathom.db").display().to_string();
            (url, Some(dir))
        }
        Dialect::Postgres => {
            sqlx::any::install_default_drivers();
            let admin = postgres_url();
            let name = format!("fathom_t_{}", uuid::Uuid::new_v4().simple());
            let pool = sqlx::AnyPool::connect(&admin)
                .await
                .expect("connect to test postgres");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&pool)
                .await
                .expect("create test database");
            pool.close().await;
            let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
            (format!("{base}/{name}"), None)
        }
    }
}

impl TestDb {
    /// Another connection to an existing test database (a second process on the same data).
    pub async fn open(url: &str) -> TestDb {
        TestDb {
            store: SqlStore::connect(url).await.expect("connect test store"),
            url: url.to_string(),
            _dir: None,
        }
    }
}

pub async fn fresh(dialect: Dialect) -> TestDb {
    let (url, dir) = fresh_url(dialect).await;
    let store = SqlStore::connect(&url).await.expect("connect test store");
    TestDb {
        store,
        url,
        _dir: dir,
    }
}

/// The SQLite database file at `path` copied alone into `dir`, as a backup would take it,
/// once no write-ahead log is left beside it (whoever wrote it has closed it): the copy must
/// then hold everything committed.
pub fn copy_of_closed_file(path: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let log = std::path::PathBuf::from(format!("{path}-wal"));
    assert!(!log.exists(), "{} left behind", log.display());
    let copy = dir.join("copy.db");
    std::fs::copy(path, &copy).expect("copy the database file");
    copy
}
