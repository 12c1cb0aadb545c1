//! The database goes away under load: Postgres stopped while research runs are in flight
//! with readers attached. The server stays up, refuses what needs the database with 503 and
//! `Retry-After` (never a 500 or a hang), and once the database is back every run completes
//! once, every stream gap-free, nothing lost.

use std::time::{Duration, Instant};

use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use serde_json::json;

use crate::figures;
use crate::served::*;
use crate::support::*;

/// What one kind of request met while the database was away.
#[derive(Default)]
struct Probe {
    answers: usize,
    /// Answered 503 with `Retry-After`.
    refused_well: usize,
    /// Anything else: another status, a 503 without `Retry-After`, no answer in 5 s.
    other: Vec<String>,
    slowest: Duration,
}

impl Probe {
    async fn send(&mut self, req: reqwest::RequestBuilder, healthy_ok: bool) {
        let sent = Instant::now();
        let answered = req.timeout(Duration::from_secs(5)).send().await;
        self.slowest = self.slowest.max(sent.elapsed());
        self.answers += 1;
        match answered {
            Ok(r)
                if r.status() == 503 && (healthy_ok || r.headers().contains_key("retry-after")) =>
            {
                self.refused_well += 1
            }
            // The database may be back between two probes.
            Ok(r) if r.status().is_success() && healthy_ok => self.refused_well += 1,
            Ok(r) => {
                let status = r.status();
                self.other
                    .push(format!("{status}: {}", r.text().await.unwrap_or_default()))
            }
            Err(e) => self.other.push(format!("no answer: {e}")),
        }
    }
}

async fn postgres_outage(seconds: u64) {
    let runs = 20;
    let scenario = format!("Postgres stopped {seconds} s, {runs} runs in flight");
    let cluster = Cluster::start();
    let mut env = env_on(cluster.database().await);
    with_engine_config(&mut env, json!({"lease_ttl_seconds": 10}));
    // Each run holds a moment before committing fetch_parse_sources, so the outage finds
    // runs in the middle of their work.
    let server = Served::spawn(
        &env,
        &["serve", "--worker-id", "outage"],
        &[
            ("FATHOM_CRASH_AT", "fetch_parse_sources:commit"),
            ("FATHOM_CRASH_HOLD_MS", "1500"),
        ],
        "serving deployment",
    );
    let api = server.api();
    let client = http();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();

    // A run that meets no fault: what every run's steps should look like.
    let reference = start_run(&client, &api).await;
    approve(&client, &api, &reference).await;
    let reference_seen =
        follow_reconnecting(client.clone(), vec![api.clone()], reference.clone()).await;
    assert!(gap_free(&reference_seen.events));

    let ids = start_runs(&client, &api, runs).await;
    let readers: Vec<_> = ids
        .iter()
        .map(|id| {
            tokio::spawn(follow_reconnecting(
                client.clone(),
                vec![api.clone()],
                id.clone(),
            ))
        })
        .collect();
    wait_until("every run waits at the gate", || async {
        let waiting = store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Waiting],
                ..Default::default()
            })
            .await
            .unwrap();
        waiting.len() == runs
    })
    .await;
    for id in &ids {
        approve(&client, &api, id).await;
    }
    server.wait_for_line("crash point fetch_parse_sources:commit reached");

    cluster.stop();
    let stopped = Instant::now();
    let (mut reads, mut writes, mut health) =
        (Probe::default(), Probe::default(), Probe::default());
    while stopped.elapsed() < Duration::from_secs(seconds) {
        reads
            .send(client.get(format!("{api}/handlers/{}", ids[0])), false)
            .await;
        writes
            .send(
                client
                    .post(format!("{api}/workflows/deep-research/run-nowait"))
                    .json(&json!({"start_event": {"query": QUESTION}})),
                false,
            )
            .await;
        health
            .send(client.get(format!("{}/health", server.root)), true)
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut server = server;
    let up = server.child.try_wait().unwrap().is_none();
    cluster.resume();
    let back = Instant::now();

    let mut seen = Vec::new();
    for reader in readers {
        seen.push(reader.await.unwrap());
    }
    let recovered = back.elapsed();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    let stranded = stranded(&store, &ids).await;
    let twice = steps_committed_twice(&store, &reference, &ids).await;
    let gaps = seen.iter().filter(|s| !gap_free(&s.events)).count();
    let mut lost = Vec::new();
    for (id, s) in ids.iter().zip(&seen) {
        lost.extend(nothing_lost(&store, &client, &server.root, id, &s.events).await);
    }
    let all_runs = store.list_runs(&RunFilter::default()).await.unwrap().len();
    let reconnects: usize = seen.iter().map(|s| s.connections.saturating_sub(1)).sum();

    let probe_row = |name: &str, p: &Probe| {
        figures::record(
            &scenario,
            &format!("{name} while away: 503 + Retry-After / answered; slowest"),
            format!(
                "{}/{}; {:.2} s",
                p.refused_well,
                p.answers,
                p.slowest.as_secs_f64()
            ),
            "all; < 3 s",
            p.other.is_empty() && p.slowest < Duration::from_secs(3),
        );
    };
    probe_row("GET /handlers/{id}", &reads);
    probe_row("POST run-nowait", &writes);
    figures::record(
        &scenario,
        "/health while away: 503 / answered; slowest",
        format!(
            "{}/{}; {:.2} s",
            health.refused_well,
            health.answers,
            health.slowest.as_secs_f64()
        ),
        "all; < 2 s",
        health.other.is_empty() && health.slowest < Duration::from_secs(2),
    );
    figures::record(&scenario, "server process up throughout", up, "true", up);
    figures::record(
        &scenario,
        "completed / stranded / steps committed twice",
        format!("{}/{runs} / {stranded} / {twice}", runs - stranded),
        "all / 0 / 0",
        stranded == 0 && twice == 0,
    );
    figures::record(
        &scenario,
        "streams with a gap or repeat / reconnections",
        format!("{gaps} / {reconnects}"),
        "0 / any",
        gaps == 0,
    );
    figures::record(
        &scenario,
        "last run completed after the database was back",
        format!("{:.1} s", recovered.as_secs_f64()),
        "< lease TTL (10 s) + a run",
        true,
    );
    figures::record(
        &scenario,
        "store vs clients: differences; runs stored (refused starts store nothing)",
        format!("{}; {all_runs}", lost.len()),
        &format!("0; {}", runs + 1),
        lost.is_empty() && all_runs == runs + 1,
    );

    assert!(up, "the server stayed up");
    assert!(
        reads.other.is_empty(),
        "reads while away: {:?}",
        reads.other
    );
    assert!(
        writes.other.is_empty(),
        "writes while away: {:?}",
        writes.other
    );
    assert!(
        health.other.is_empty(),
        "health while away: {:?}",
        health.other
    );
    assert!(reads.refused_well > 0 && writes.refused_well > 0);
    assert!(
        reads.slowest < Duration::from_secs(3),
        "a read hung {:?}",
        reads.slowest
    );
    assert!(
        writes.slowest < Duration::from_secs(3),
        "a write hung {:?}",
        writes.slowest
    );
    assert!(
        health.slowest < Duration::from_secs(2),
        "health hung {:?}",
        health.slowest
    );
    assert_eq!(stranded, 0, "runs stranded");
    assert_eq!(twice, 0, "steps committed twice");
    assert_eq!(gaps, 0, "streams with a gap or a repeat");
    assert!(lost.is_empty(), "differences: {lost:#?}");
    assert_eq!(
        all_runs,
        runs + 1,
        "a start refused with 503 stored nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_under_load() {
    postgres_outage(10).await;
    if figures::long() {
        postgres_outage(60).await;
    }
}
