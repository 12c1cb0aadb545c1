//! `fathom backup` taken from a live deployment and restored into a new process: one run
//! finished and one waiting at the gate when the copy is made (SQLite online, Postgres by
//! pg_dump and pg_restore into an empty database); the server is then killed and the original
//! set aside. On the copy, the finished run's stream replays as its client saw it, its session
//! reads back, everything the original held is there, and the waiting run is approved and
//! completes.

mod common;
#[path = "common/served.rs"]
mod served;

use std::path::Path;
use std::process::Command;

use common::{fathom_on, ok};
use fathom_engine::store::{RunStatus, RunStore};
use fathom_store::{Dialect, SqlStore};
use served::*;

fn fathom(db: &str, dir: &Path, args: &[&str]) -> std::process::Output {
    fathom_on(db, dir, args, "")
}

async fn a_backup_restores_into_a_new_process(dialect: Dialect) {
    let env = env(dialect).await;
    let first = Served::start(&env, "first", None);
    let client = http();
    let finished = start_run(&client, &first.api()).await;
    approve(&client, &first.api(), &finished).await;
    let seen = follow_to_end(client.clone(), first.api(), finished.clone()).await;
    assert_completed_once(&finished, &seen);
    let waiting = start_run(&client, &first.api()).await;
    let store = SqlStore::connect(&env.db).await.unwrap();
    wait_until("the second run waits at the gate", || async {
        store.get_run(&waiting).await.unwrap().unwrap().status == RunStatus::Waiting
    })
    .await;

    // Taken while the server runs.
    let to = env.tmp.path().join(match dialect {
        Dialect::Sqlite => "backup.db",
        Dialect::Postgres => "backup.dump",
    });
    let out = ok(&fathom(
        &env.db,
        env.tmp.path(),
        &["backup", "--to", to.to_str().unwrap()],
    ));
    let held = store.inventory().await.unwrap();
    assert_eq!(
        held.runs.get("completed").zip(held.runs.get("waiting")),
        Some((&1, &1)),
        "{held}"
    );
    assert!(out.contains(&format!("holds  {held}")), "{out}");
    assert!(out.contains("restore: "), "the way back is said: {out}");
    // A second backup to the same file is refused, and the first is left whole.
    let again = fathom(
        &env.db,
        env.tmp.path(),
        &["backup", "--to", to.to_str().unwrap()],
    );
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists already"),
        "{again:?}"
    );

    // The deployment is lost: its server killed, its SQLite file removed.
    drop(first);
    store.close().await;
    if dialect == Dialect::Sqlite {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", env.db));
        }
    }
    let restored = match dialect {
        Dialect::Sqlite => to.display().to_string(),
        Dialect::Postgres => {
            let (url, _) = fathom_testkit::db::fresh_url(Dialect::Postgres).await;
            let status = Command::new("pg_restore")
                .args(["--no-owner", "--dbname", &url])
                .arg(&to)
                .status()
                .expect("run pg_restore");
            assert!(status.success(), "pg_restore: {status}");
            url
        }
    };
    let back = env_on(restored);
    let copy = SqlStore::connect(&back.db).await.unwrap();
    assert_eq!(
        copy.inventory().await.unwrap(),
        held,
        "everything came back"
    );
    copy.close().await;

    let second = Served::start(&back, "second", None);
    let replayed = follow_to_end(client.clone(), second.api(), finished.clone()).await;
    assert_eq!(
        replayed, seen,
        "the finished run's stream replays as it was seen"
    );
    approve(&client, &second.api(), &waiting).await;
    let resumed = follow_to_end(client.clone(), second.api(), waiting.clone()).await;
    assert_completed_once(&waiting, &resumed);
    drop(second);

    let shown = ok(&fathom(
        &back.db,
        back.tmp.path(),
        &["sessions", "show", &finished],
    ));
    assert!(shown.contains("status    completed"), "{shown}");
    assert!(
        shown.contains("## Sources"),
        "the report reads back: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_process_sqlite() {
    a_backup_restores_into_a_new_process(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_process_postgres() {
    a_backup_restores_into_a_new_process(Dialect::Postgres).await;
}
