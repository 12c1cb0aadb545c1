//! The crash test: worker processes driving crash-workflow runs are SIGKILLed at random points
//! many times and restarted. Every run must complete with the right result; the stream of each
//! run must have no gap and no duplicate; no journaled call whose result was stored may have run
//! again; and exactly one of two conflicting external decisions may apply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fathom_e2e::*;
use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_engine::{Engine, EngineConfig, StartOptions};
use fathom_store::Dialect;
use fathom_testkit::db::fresh_url;
use serde_json::json;
use sqlx::Row;

const RUNS: i64 = 16;
const KILLS: usize = 14;

/// xorshift: enough randomness for kill timing, with the seed printed for reproduction.
struct Rng(u64);
impl Rng {
    fn next(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

fn spawn_worker(url: &str, until_done: bool) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_crash-worker"));
    cmd.arg(url).arg("crash-worker-1");
    if until_done {
        cmd.arg("--until-done");
    }
    cmd.env("RUST_LOG", "off")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn crash-worker")
}

async fn crash_and_recover(dialect: Dialect) {
    let (url, _dir) = fresh_url(dialect).await;
    let store = connect(&url).await;
    create_effects_table(store.pool(), dialect).await;
    // This engine only starts runs and delivers events; the worker processes drive them.
    let engine = Arc::new(
        Engine::new(Arc::new(store.clone()), EngineConfig::default())
            .register(crash_workflow(store.pool().clone())),
    );
    let mut ids = Vec::new();
    for n in 0..RUNS {
        let run = engine
            .start(CRASH_WORKFLOW, json!({"n": n}), StartOptions::default())
            .await
            .unwrap();
        ids.push(run.id);
    }
    let bonus = |i: usize| 7 * i as i64 + 3;
    // Half the approvals arrive before any run reaches its wait, each twice (same key).
    for (i, id) in ids.iter().enumerate().take(ids.len() / 2) {
        for _ in 0..2 {
            engine
                .send(
                    id,
                    "Go",
                    json!({"bonus": bonus(i)}),
                    Some(format!("go-{id}")),
                )
                .await
                .unwrap();
        }
    }

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("{dialect:?}: kill seed {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    for round in 0..KILLS {
        let mut child = spawn_worker(&url, false);
        tokio::time::sleep(Duration::from_millis(rng.next(40, 350))).await;
        if child.try_wait().unwrap().is_none() {
            child.start_kill().unwrap();
            kills += 1;
        }
        child.wait().await.unwrap();
        if round == KILLS / 2 {
            // The rest arrive mid-way, each followed by a conflicting decision.
            for (i, id) in ids.iter().enumerate().skip(ids.len() / 2) {
                engine
                    .send(
                        id,
                        "Go",
                        json!({"bonus": bonus(i)}),
                        Some(format!("go-{id}")),
                    )
                    .await
                    .unwrap();
                engine
                    .send(
                        id,
                        "Go",
                        json!({"bonus": -1_000_000}),
                        Some(format!("late-{id}")),
                    )
                    .await
                    .unwrap();
            }
        }
    }
    println!("{dialect:?}: {kills} SIGKILLs");
    assert!(
        kills >= KILLS / 2,
        "too few workers were killed mid-flight ({kills})"
    );

    let mut last = spawn_worker(&url, true);
    let status = tokio::time::timeout(Duration::from_secs(200), last.wait())
        .await
        .expect("final worker hung")
        .unwrap();
    assert!(status.success(), "final worker failed: {status}");

    // No run stranded; every result right.
    let open = store
        .list_runs(&RunFilter {
            statuses: vec![RunStatus::Running, RunStatus::Waiting],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        open.is_empty(),
        "stranded runs: {:?}",
        open.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    for (i, id) in ids.iter().enumerate() {
        let run = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "run {id}: {:?}",
            run.error
        );
        let result = run.result.expect("result");
        assert_eq!(result.event_type, "CrashResult");
        assert_eq!(
            result.value["total"],
            expected_total(i as i64, bonus(i)),
            "run {id} total"
        );

        // The stream: 0..n with no gap or duplicate, one event per step, the stop event last.
        let events = store.events_after(id, -1, 1000).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..8).collect::<Vec<_>>(), "run {id} stream seqs");
        let steps: Vec<String> = events
            .iter()
            .map(|e| {
                e.envelope.value["step"]
                    .as_str()
                    .unwrap_or("stop")
                    .to_string()
            })
            .collect();
        assert_eq!(
            steps,
            [
                "first", "hop2", "gate", "hop3", "hop4", "hop5", "last", "stop"
            ],
            "run {id} stream order"
        );
    }

    // Journaled calls: the stored result of each call is its last execution, so nothing ran
    // again once a result was stored. Extra executions happen only for calls cut off between
    // the effect and the journal write.
    let rows = sqlx::query("SELECT run_id, call_key, id FROM crash_effects")
        .fetch_all(store.pool())
        .await
        .unwrap();
    let mut execs: HashMap<(String, String), Vec<i64>> = HashMap::new();
    for r in &rows {
        execs
            .entry((r.get::<String, _>(0), r.get::<String, _>(1)))
            .or_default()
            .push(r.get::<i64, _>(2));
    }
    let journal = sqlx::query("SELECT run_id, scope, key, result FROM call_journal")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(
        journal.len() as i64,
        RUNS * 11,
        "journaled calls: 2 in first, 2 in each of four hops, 1 in last"
    );
    let mut reran = 0;
    for r in &journal {
        let run_id = r.get::<String, _>(0);
        let key = (
            run_id.clone(),
            format!("{run_id}:{}:{}", r.get::<i64, _>(1), r.get::<String, _>(2)),
        );
        let stored: serde_json::Value = serde_json::from_str(&r.get::<String, _>(3)).unwrap();
        let stored_exec = stored["exec_id"].as_i64().unwrap();
        let ran = execs.get(&key).expect("call without execution");
        let latest = *ran.iter().max().unwrap();
        assert_eq!(
            stored_exec, latest,
            "{key:?} ran again after its result was stored: {ran:?}"
        );
        reran += ran.len() - 1;
    }
    println!(
        "{dialect:?}: {} calls, {} executions, {reran} re-executions of interrupted calls",
        journal.len(),
        rows.len()
    );

    // Exactly one decision consumed per run; the conflicting one superseded.
    let consumed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM mailbox WHERE status = 'consumed'")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(consumed, RUNS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_runs_survive_repeated_sigkill() {
    crash_and_recover(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_runs_survive_repeated_sigkill() {
    crash_and_recover(Dialect::Postgres).await;
}
