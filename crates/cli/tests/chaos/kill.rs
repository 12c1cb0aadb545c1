//! The server SIGKILLed again and again under load: many clients each start a run, approve
//! it and read its stream to the end while a supervisor kills `fathom serve` and starts it
//! again on the same port as soon as it has exited. Clients reconnect with `Last-Event-ID`;
//! every run completes exactly once, no stream has a gap or a repeat, nothing is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::figures;
use crate::served::*;
use crate::support::*;

const LEASE_TTL_SECS: u64 = 3600;

async fn kill_under_load(runs: usize, concurrency: usize, kills: usize) {
    let scenario = format!("serve SIGKILLed {kills}x, {runs} runs at concurrency {concurrency}");
    let mut env = env(fathom_store::Dialect::Postgres).await;
    // Leases of an hour: a run the killed process held can only go on within the clients'
    // deadline if the restarted server takes it back, not because its lease expired.
    with_engine_config(
        &mut env,
        serde_json::json!({"lease_ttl_seconds": LEASE_TTL_SECS}),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = |env: &Env| {
        Served::spawn_at(
            env,
            &["serve", "--worker-id", "supervised"],
            &[],
            "serving deployment",
            port,
        )
    };
    let mut server = start(&env);
    let api = server.api();
    let root = server.root.clone();
    let client = http();

    let reference = "chaos-kill-reference".to_string();
    let reference_seen = client_run(client.clone(), api.clone(), reference.clone()).await;
    assert!(gap_free(&reference_seen.events));

    let done = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let ids: Vec<String> = (0..runs).map(|i| format!("chaos-kill-{i}")).collect();
    let clients: Vec<_> = ids
        .iter()
        .map(|id| {
            let (client, api, id) = (client.clone(), api.clone(), id.clone());
            let (gate, done) = (gate.clone(), done.clone());
            tokio::spawn(async move {
                let _slot = gate.acquire_owned().await.unwrap();
                let seen = client_run(client, api, id).await;
                done.fetch_add(1, Ordering::SeqCst);
                seen
            })
        })
        .collect();

    // The supervisor: a kill each time another share of the runs has completed, and a
    // restart on the same port as soon as the process has exited.
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    let unfinished = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM runs WHERE status IN ('running', 'waiting')",
        )
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    let mut killed_at = Vec::new();
    // Kills that found work left in flight: the restarted server must carry it on.
    let mut with_work = 0;
    for k in 0..kills {
        let due = (k + 1) * runs / (kills + 1);
        wait_until("runs complete between kills", || async {
            done.load(Ordering::SeqCst) >= due
        })
        .await;
        server.child.kill().unwrap();
        server.wait_exit();
        let killed = Instant::now();
        let killed_ms = fathom_engine::store::now_ms();
        let left = unfinished().await > 0;
        server = start(&env);
        if left {
            with_work += 1;
            killed_at.push((killed_ms, killed.elapsed()));
        }
    }
    let mut seen = Vec::new();
    for c in clients {
        seen.push(c.await.unwrap());
    }

    // Recovery: from each kill to the first event the restarted server committed (nothing
    // committed after a kill can come from the process killed).
    let mut recoveries = Vec::new();
    let mut restarts = Vec::new();
    for (killed_ms, restart) in &killed_at {
        let first: Option<i64> =
            sqlx::query_scalar("SELECT MIN(created_at) FROM run_events WHERE created_at > $1")
                .bind(killed_ms)
                .fetch_one(store.pool())
                .await
                .unwrap();
        if let Some(first) = first {
            recoveries.push(Duration::from_millis((first - killed_ms) as u64));
        }
        restarts.push(*restart);
    }
    let worst = recoveries.iter().max().copied().unwrap_or_default();
    let mean = recoveries.iter().sum::<Duration>() / recoveries.len().max(1) as u32;
    let restart = restarts.iter().sum::<Duration>() / restarts.len().max(1) as u32;

    let outcome = RunsOutcome::read(&store, &client, &root, &reference, &ids, &seen).await;
    let RunsOutcome {
        stranded,
        twice,
        ref lost,
        all_runs,
        ..
    } = outcome;

    record_runs(&scenario, runs, stranded, twice, &seen);
    figures::record(
        &scenario,
        "kill to the restarted server's first commit: mean / worst (of which restart)",
        format!(
            "{:.2} s / {:.2} s ({:.2} s)",
            mean.as_secs_f64(),
            worst.as_secs_f64(),
            restart.as_secs_f64()
        ),
        "each kill's runs taken back, before their lease (1 h) expired",
        recoveries.len() == with_work && worst < Duration::from_secs(LEASE_TTL_SECS),
    );
    figures::record(
        &scenario,
        "store vs clients: differences; runs stored",
        format!("{}; {all_runs}", lost.len()),
        &format!("0; {}", runs + 1),
        lost.is_empty() && all_runs == runs + 1,
    );
    outcome.assert_held(runs, "one run per client, however often it retried");
    assert!(with_work > 0, "no kill found a run in flight");
    assert_eq!(
        recoveries.len(),
        with_work,
        "the server went on after each kill that found work in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_killed_under_load() {
    kill_under_load(
        figures::scale(30, 200),
        figures::scale(10, 50),
        figures::scale(3, 10),
    )
    .await;
}
