//! A worker process for the crash test: drives crash-workflow runs until it is killed, or,
//! with `--until-done`, until no run is left unfinished.
//!
//! usage: crash-worker DATABASE OWNER [--until-done]

use std::sync::Arc;
use std::time::Duration;

use fathom_e2e::crash_workflow;
use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_engine::{Engine, EngineConfig};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (db, owner) = match (args.get(1), args.get(2)) {
        (Some(db), Some(owner)) => (db.clone(), owner.clone()),
        _ => anyhow::bail!("usage: crash-worker DATABASE OWNER [--until-done]"),
    };
    let until_done = args.iter().any(|a| a == "--until-done");
    let store = fathom_e2e::connect(&db).await;
    let pool = store.pool().clone();
    let engine = Arc::new(
        Engine::new(
            Arc::new(store.clone()),
            EngineConfig {
                owner,
                lease_ttl: Duration::from_secs(5),
                poll_interval: Duration::from_millis(50),
                max_concurrent_runs: 4,
                ..Default::default()
            },
        )
        .register(crash_workflow(pool)),
    );
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(engine.clone().run_worker(stop_rx));
    if !until_done {
        worker.await?;
        return Ok(());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let open = store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Running, RunStatus::Waiting],
                ..Default::default()
            })
            .await?;
        if open.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{} runs still open",
            open.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
