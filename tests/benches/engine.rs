//! Engine benchmark: a no-op six-step workflow with an external-event wait, run N times at
//! concurrency 1 and 8 on SQLite and (when DATABASE_URL is set) Postgres. Prints runs/s,
//! per-step overhead, commits per run, and ratios against the floor measured in the same run:
//! a bare single-row INSERT committed on the same database (each writer on a connection it
//! holds, so none of the pool's costs are in it), just before and just after each
//! of three rounds (the row shows the median round and the spread).
//!
//! cargo bench -p fathom-e2e --bench engine [-- RUNS]
//!
//! `FATHOM_BENCH_ONLY=sqlite-1` (or `postgres-8`, ...) measures that row alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fathom_engine::store::RunStatus;
use fathom_engine::{Ctx, Engine, EngineConfig, StartOptions, Workflow, impl_event};
use fathom_store::{Dialect, SqlStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Begin {}
impl_event!(Begin, "Begin");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Next {
    i: u32,
}
impl_event!(Next, "Next");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Approve {}
impl_event!(Approve, "Approve");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Gate {}
impl_event!(Gate, "Gate");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Done {}
impl_event!(
    Done,
    "Done",
    qualified = "bench.Done",
    types = ["StopEvent"]
);

const STEPS: f64 = 6.0;

fn noop_workflow() -> Arc<dyn fathom_engine::ErasedWorkflow> {
    // begin -> gate (waits for Approve) -> next 1..=3 -> done: six steps.
    Workflow::<serde_json::Value>::new::<Begin>("noop")
        .accepts_external::<Approve>()
        .step(
            "begin",
            |ctx: Ctx<serde_json::Value>, _: Begin| async move { ctx.send(Gate {}) },
        )
        .step("gate", |ctx: Ctx<serde_json::Value>, _: Gate| async move {
            ctx.wait_for::<Approve>().await?;
            ctx.send(Next { i: 1 })
        })
        .step("next", |ctx: Ctx<serde_json::Value>, ev: Next| async move {
            if ev.i < 4 {
                ctx.send(Next { i: ev.i + 1 })
            } else {
                ctx.stop(&Done {})
            }
        })
        .build()
}

async fn floor(store: &SqlStore, n: usize, concurrency: usize) -> f64 {
    let pool = store.pool().clone();
    let _ = sqlx::query("CREATE TABLE IF NOT EXISTS bench_floor (v BIGINT NOT NULL)")
        .execute(&pool)
        .await;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        // Taken for direct use once per writer: the store gives a kept connection back to
        // the pool each time, so every writer finds one.
        let pool = store.pool().clone();
        tasks.push(tokio::spawn(async move {
            // Each writer holds its connection: the floor pays for the commit and nothing
            // of the pool's (taking a connection and the ping sqlx sends on handing it back;
            // the store keeps connections between statements too).
            let mut conn = pool.acquire().await.expect("floor connection");
            for i in 0..n / concurrency {
                sqlx::query("INSERT INTO bench_floor (v) VALUES ($1)")
                    .bind((w * n + i) as i64)
                    .execute(&mut *conn)
                    .await
                    .expect("floor insert");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (n / concurrency * concurrency) as f64 / t.elapsed().as_secs_f64()
}

/// One engine round: `runs` runs at `concurrency`; returns (runs/s, ms per step, commits per
/// run).
async fn engine_round(
    store: &SqlStore,
    label: &str,
    round: usize,
    runs: usize,
    concurrency: usize,
) -> (f64, f64, f64) {
    let engine = Arc::new(
        Engine::new(
            Arc::new(store.clone()),
            EngineConfig {
                owner: format!("bench-{label}-{concurrency}-{round}"),
                lease_ttl: Duration::from_secs(30),
                poll_interval: Duration::from_millis(100),
                max_concurrent_runs: concurrency,
                ..Default::default()
            },
        )
        .register(noop_workflow()),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(engine.clone().run_worker(stop_rx));
    let commits_before = store.stats().commits.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut drivers = Vec::new();
    for d in 0..concurrency {
        let engine = engine.clone();
        let per = runs / concurrency;
        drivers.push(tokio::spawn(async move {
            for i in 0..per {
                let run = engine
                    .start(
                        "noop",
                        json!({}),
                        StartOptions {
                            run_id: Some(format!("r{round}-{d}-{i}")),
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap();
                let ended = fathom_e2e::approve_and_finish(
                    &engine,
                    &run.id,
                    |r| r.status == RunStatus::Waiting,
                    ("Approve", json!({})),
                    Duration::from_secs(30),
                )
                .await
                .expect("the run moves on");
                assert_eq!(ended.status, RunStatus::Completed);
            }
        }));
    }
    for d in drivers {
        d.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let commits = store.stats().commits.load(Ordering::Relaxed) - commits_before;
    let _ = stop_tx.send(true);
    let _ = worker.await;
    let done = (runs / concurrency * concurrency) as f64;
    let step_ms = elapsed * 1000.0 * concurrency as f64 / (done * STEPS);
    (done / elapsed, step_ms, commits as f64 / done)
}

/// Rounds per row: the machine is shared, so each round measures the floor just before and
/// just after the engine, and the row reports the median round.
const ROUNDS: usize = 3;

async fn bench(store: SqlStore, label: &str, runs: usize, concurrency: usize) {
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        let before = floor(&store, 1000, concurrency).await;
        let (runs_per_s, step_ms, commits_per_run) =
            engine_round(&store, label, round, runs, concurrency).await;
        let after = floor(&store, 1000, concurrency).await;
        let floor_cps = (before + after) / 2.0;
        let floor_ms = 1000.0 * concurrency as f64 / floor_cps;
        rounds.push((
            step_ms / floor_ms,
            runs_per_s,
            step_ms,
            commits_per_run,
            floor_cps,
        ));
    }
    rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let spread = (rounds[0].0, rounds[ROUNDS - 1].0);
    let (ratio, runs_per_s, step_ms, commits_per_run, floor_cps) = rounds[ROUNDS / 2];
    let floor_ms = 1000.0 * concurrency as f64 / floor_cps;
    println!(
        "{label:<8} c={concurrency:<2} runs={runs:<5} {runs_per_s:>8.1} runs/s  step {step_ms:>6.3} ms  \
         commits/run {commits_per_run:>5.1}  floor {floor_cps:>8.0} commits/s ({floor_ms:.3} ms)  \
         step/floor-commit {ratio:>5.1}x (rounds {:.1}-{:.1}x)  run/floor-commit {:>5.1}x",
        spread.0,
        spread.1,
        (1000.0 / runs_per_s * concurrency as f64) / floor_ms,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(400);
    println!(
        "engine bench: six-step no-op workflow with one external-event wait, {runs} runs per row"
    );
    let only = std::env::var("FATHOM_BENCH_ONLY").ok();
    let wanted = |label: &str, c: usize| only.as_ref().is_none_or(|o| *o == format!("{label}-{c}"));
    for concurrency in [1, 8] {
        if !wanted("sqlite", concurrency) {
            continue;
        }
        let db = fathom_testkit::db::fresh(Dialect::Sqlite).await;
        bench(db.store.clone(), "sqlite", runs, concurrency).await;
    }
    if std::env::var("DATABASE_URL").is_ok() {
        for concurrency in [1, 8] {
            if !wanted("postgres", concurrency) {
                continue;
            }
            let db = fathom_testkit::db::fresh(Dialect::Postgres).await;
            bench(db.store.clone(), "postgres", runs, concurrency).await;
        }
    } else {
        println!("postgres: skipped (set DATABASE_URL, e.g. from scripts/test-db.sh)");
    }
}
