//! What is committed to a SQLite database reaches its file within seconds, with no help from
//! its log: the store copies the log into the file in the background (a checkpoint), not
//! inside the commits that happen to fill it, so the file alone (a backup of it, a copy sent
//! elsewhere) is current, and no commit waits for the copy and its syncs. Under steady writing
//! the log still starts over, so it stays small.

use std::time::{Duration, Instant};

use fathom_engine::store::{NewRun, RunStore};
use fathom_store::SqlStore;
use serde_json::json;
use sqlx::Connection;

/// Creates run `run-{i}` holding `state`: one commit.
async fn create_run(store: &SqlStore, i: usize, state: serde_json::Value) {
    store
        .create_run(NewRun {
            id: format!("run-{i}"),
            workflow: "wf".into(),
            state,
            start_type: "Start".into(),
            start_payload: json!({}),
            deadline_at: None,
            format: 1,
        })
        .await
        .unwrap();
}

/// A store on a new SQLite file in `dir`, and that file's path.
async fn store_in(dir: &std::path::Path) -> (std::path::PathBuf, SqlStore) {
    let file = dir.join("fathom.db");
    let store = SqlStore::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    (file, store)
}

/// Runs in a copy of the database file made without its log; None while the copy cannot be
/// read (taken mid-checkpoint, or before the tables reached the file).
async fn runs_in_copy_of_file(file: &std::path::Path, copy: &std::path::Path) -> Option<i64> {
    std::fs::copy(file, copy).ok()?;
    let url = format!("sqlite://{}", copy.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.ok()?;
    let n = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&mut conn)
        .await
        .ok();
    let _ = conn.close().await;
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
    }
    n
}

#[tokio::test]
async fn commits_reach_the_database_file_without_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let (file, store) = store_in(dir.path()).await;
    let copy = dir.path().join("copy.db");
    // A few commits: far fewer pages than SQLite's own checkpoint waits for (1,000).
    for i in 0..20 {
        create_run(&store, i, json!({"i": i})).await;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = None;
    while Instant::now() < deadline {
        seen = runs_in_copy_of_file(&file, &copy).await;
        if seen == Some(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen,
        Some(20),
        "the database file without its log holds {seen:?} of the 20 runs committed"
    );
    // The store still writes after its checkpoints.
    assert!(store.get_run("run-19").await.unwrap().is_some());
}

#[tokio::test]
async fn the_log_stays_small_under_steady_writing() {
    let dir = tempfile::tempdir().unwrap();
    let (file, store) = store_in(dir.path()).await;
    let log = file.with_extension("db-wal");
    // 96 MiB of run state written back to back: a log that never started over would hold
    // all of it.
    let state = json!({"text": "x".repeat(24 * 1024)});
    let mut largest = 0;
    for i in 0..4096 {
        create_run(&store, i, state.clone()).await;
        largest = largest.max(std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
    }
    // Well under what was written: the log starts over every few ticks, and between two
    // starts it holds what those ticks wrote (up to ~35 MiB here with other tests running
    // beside it). A log that never starts over grew to 254 MiB.
    assert!(
        largest < 72 << 20,
        "the log grew to {} MiB while 96 MiB were written",
        largest >> 20
    );
}
