//! What the scenarios share: a Postgres cluster of their own (so that stopping it touches no
//! other test), readers that reconnect as a real client does, and the check that nothing was
//! lost between the store and what the clients saw.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fathom_engine::store::RunStore;
use serde_json::{Value, json};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;

use crate::served::{self, DEADLINE, QUESTION};

/// A throwaway Postgres cluster started by `scripts/test-db.sh`, which a scenario may stop
/// and start again. Stopped and removed on drop.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub url: String,
    port: u16,
}

fn pg_bin(name: &str) -> PathBuf {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "command -v {name} || ls -d /usr/lib/postgresql/*/bin/{name} 2>/dev/null | sort -V | tail -1"
        ))
        .output()
        .expect("look for the Postgres binaries");
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "no {name}: scripts/test.sh installs postgresql"
    );
    PathBuf::from(path)
}

/// `program args` as the `postgres` user when we are root (Postgres refuses root).
fn as_postgres(program: &Path) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-db.sh");
        // Stopped at once (a crash, a failover) and started again, the cluster must keep
        // every commit it acknowledged, as a production database does: a commit waits for
        // its WAL to reach the kernel. Without that, an approval answered 200 just before
        // the stop could be gone after it, and its run waited at the gate for good.
        let out = Command::new(script)
            .env("FATHOM_PG_DIR", dir.path())
            .env("FATHOM_PG_SYNCHRONOUS_COMMIT", "on")
            .output()
            .expect("run scripts/test-db.sh");
        assert!(
            out.status.success(),
            "scripts/test-db.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("a port in the cluster's URL");
        Cluster { dir, url, port }
    }

    /// Stops the server at once, as a crash or a failover would.
    pub fn stop(&self) {
        let status = as_postgres(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output()
            .expect("pg_ctl stop");
        assert!(status.status.success(), "pg_ctl stop: {status:?}");
    }

    /// Starts it again on the same port.
    pub fn resume(&self) {
        let dir = self.dir.path();
        let status = as_postgres(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
                 -c full_page_writes=off -c synchronous_commit=on -c max_connections=300",
                self.port,
                dir.display()
            ))
            .arg("start")
            .output()
            .expect("pg_ctl start");
        assert!(status.status.success(), "pg_ctl start: {status:?}");
    }

    /// A new, empty database on this cluster.
    pub async fn database(&self) -> String {
        sqlx::any::install_default_drivers();
        let name = format!("fathom_chaos_{}", fathom_engine::new_id().to_lowercase());
        let pool = sqlx::AnyPool::connect(&self.url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let base = self.url.rsplit_once('/').map(|(b, _)| b).unwrap();
        format!("{base}/{name}")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// What a reader that reconnects saw of a run's stream.
#[derive(Debug, Default)]
pub struct Seen {
    pub events: Vec<(i64, Value)>,
    /// When each event arrived.
    pub arrived: Vec<Instant>,
    /// Connections it made (1 when nothing broke).
    pub connections: usize,
    /// Answers other than 200 while (re)connecting, by status.
    pub refused: Vec<u16>,
}

/// Follows run `id`'s stream through whichever of `apis` answers, as a real client does:
/// when the stream breaks or a server refuses, it waits a little and reconnects with
/// `Last-Event-ID`, until the stop event or the deadline.
pub async fn follow_reconnecting(client: reqwest::Client, apis: Vec<String>, id: String) -> Seen {
    let deadline = Instant::now() + DEADLINE * 2;
    let mut seen = Seen::default();
    let mut turn = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "run {id}: no stop event within the deadline; saw {} events",
            seen.events.len()
        );
        let api = &apis[turn % apis.len()];
        turn += 1;
        let mut req = client
            .get(format!("{api}/events/{id}"))
            .timeout(Duration::from_secs(600));
        if let Some((last, _)) = seen.events.last() {
            req = req.header("Last-Event-ID", last.to_string());
        }
        match req.send().await {
            Ok(resp) if resp.status() == 200 => {
                seen.connections += 1;
                let mut events = resp.bytes_stream().eventsource();
                while let Some(Ok(ev)) = events.next().await {
                    let Ok(value) = serde_json::from_str::<Value>(&ev.data) else {
                        break;
                    };
                    seen.events.push((ev.id.parse().unwrap_or(-1), value));
                    seen.arrived.push(Instant::now());
                    if seen.events.last().is_some_and(|(_, e)| is_stop(e)) {
                        return seen;
                    }
                }
            }
            Ok(resp) => seen.refused.push(resp.status().as_u16()),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn is_stop(e: &Value) -> bool {
    e["types"]
        .as_array()
        .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
}

/// Starts `n` research runs through `api`, one after another; their handler ids. A start
/// answered with anything but a handler id fails the test.
pub async fn start_runs(client: &reqwest::Client, api: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(served::start_run(client, api).await);
    }
    ids
}

/// Everything the store holds of a run, compared with what its client saw: the stream event
/// for event, the stop event's result with `GET /results`, the saved session (completed,
/// with the same report), and the report's stored artifact. Each difference is one line.
pub async fn nothing_lost(
    store: &fathom_store::SqlStore,
    client: &reqwest::Client,
    root: &str,
    id: &str,
    seen: &[(i64, Value)],
) -> Vec<String> {
    let mut diffs = Vec::new();
    let stored = served::stored_events(store, id).await;
    if stored.len() != seen.len() {
        diffs.push(format!(
            "run {id}: {} events stored, {} seen",
            stored.len(),
            seen.len()
        ));
    }
    for ((s_seq, s_ev), (c_seq, c_ev)) in stored.iter().zip(seen) {
        if s_seq != c_seq || s_ev != c_ev {
            diffs.push(format!(
                "run {id}: event {s_seq} stored differs from event {c_seq} seen"
            ));
            break;
        }
    }
    let Some((_, stop)) = seen.last() else {
        diffs.push(format!("run {id}: nothing seen"));
        return diffs;
    };
    let result = &stop["value"];
    let api = format!("{root}/deployments/deep-research");
    match client.get(format!("{api}/results/{id}")).send().await {
        Ok(r) if r.status() == 200 => {
            let body: Value = r.json().await.unwrap_or(Value::Null);
            if body["result"] != *result {
                diffs.push(format!(
                    "run {id}: GET /results differs from the stop event seen"
                ));
            }
        }
        other => diffs.push(format!("run {id}: GET /results answered {other:?}")),
    }
    let research_id = result["research_id"].as_str().unwrap_or_default();
    let page: Value = client
        .post(format!("{root}/api/v1/beta/agent-data/:search"))
        .json(
            &json!({"deployment_name": "_public", "collection": "research-sessions",
                      "filter": {"research_id": {"eq": research_id}}, "page_size": 10}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = page["items"].as_array().cloned().unwrap_or_default();
    match items.as_slice() {
        [one] => {
            let data = &one["data"];
            if data["status"] != "completed" {
                diffs.push(format!("run {id}: session status {}", data["status"]));
            }
            if data["report_markdown"] != result["report_markdown"] {
                diffs.push(format!(
                    "run {id}: the session's report differs from the result's"
                ));
            }
        }
        other => diffs.push(format!("run {id}: {} sessions saved", other.len())),
    }
    if let Some(file) = result["report_file_id"].as_str() {
        let got = client.get(format!("{root}/artifacts/{file}")).send().await;
        if !got.is_ok_and(|r| r.status() == 200) {
            diffs.push(format!("run {id}: report artifact {file} not served"));
        }
    }
    diffs
}

/// How many of the runs' steps committed more often than the same step of `reference` (a run
/// that met no fault) did: a step committed twice.
pub async fn steps_committed_twice(
    store: &fathom_store::SqlStore,
    reference: &str,
    runs: &[String],
) -> usize {
    let counts = |id: String| async move {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT step, COUNT(*) FROM step_journal WHERE run_id = $1 \
             AND outcome <> 'failed' GROUP BY step",
        )
        .bind(id)
        .fetch_all(store.pool())
        .await
        .unwrap();
        rows.into_iter()
            .collect::<std::collections::HashMap<_, _>>()
    };
    let expected = counts(reference.to_string()).await;
    let mut twice = 0;
    for id in runs {
        for (step, n) in counts(id.clone()).await {
            if n > expected.get(&step).copied().unwrap_or(0) {
                twice += (n - expected.get(&step).copied().unwrap_or(0)) as usize;
            }
        }
    }
    twice
}

/// Runs of `ids` not completed in the store.
pub async fn stranded(store: &fathom_store::SqlStore, ids: &[String]) -> usize {
    let mut n = 0;
    for id in ids {
        let run = store.get_run(id).await.unwrap();
        if run.is_none_or(|r| r.status != fathom_engine::store::RunStatus::Completed) {
            n += 1;
        }
    }
    n
}

/// Whether the stream a client saw is gap-free and repeats nothing (ids 0..n).
pub fn gap_free(seen: &[(i64, Value)]) -> bool {
    seen.iter().map(|(i, _)| *i).eq(0..seen.len() as i64)
}

/// Sends `req()` until the server answers with one of `ok` (restarts in between refuse
/// connections, and a database away answers 503); the status it answered.
pub async fn until_answered(
    what: &str,
    ok: &[u16],
    req: impl Fn() -> reqwest::RequestBuilder,
) -> u16 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(resp) = req().timeout(Duration::from_secs(10)).send().await {
            let status = resp.status().as_u16();
            if ok.contains(&status) {
                return status;
            }
            assert!(
                status >= 500,
                "{what}: {status} {}",
                resp.text().await.unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no answer within the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One client: starts run `id` (its id chosen by the client, so that a start retried after
/// a kill cannot make a second run), approves it (kept in the mailbox if the plan is not
/// ready yet) and reads its stream to the stop event.
pub async fn client_run(client: reqwest::Client, api: String, id: String) -> Seen {
    let start = json!({"handler_id": id, "start_event": {"query": QUESTION}});
    // 409: the start was taken before the connection broke.
    until_answered(&format!("start {id}"), &[200, 409], || {
        client
            .post(format!("{api}/workflows/deep-research/run-nowait"))
            .json(&start)
    })
    .await;
    let approve = json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
    until_answered(&format!("approve {id}"), &[200], || {
        client
            .post(format!("{api}/events/{id}"))
            .header("Idempotency-Key", format!("approve-{id}"))
            .json(&approve)
    })
    .await;
    follow_reconnecting(client, vec![api], id).await
}

/// Waits until every run of `ids` waits at its gate.
pub async fn wait_at_gate(store: &fathom_store::SqlStore, ids: &[String]) {
    served::wait_until("every run waits at the gate", || async {
        let waiting = store
            .list_runs(&fathom_engine::store::RunFilter {
                statuses: vec![fathom_engine::store::RunStatus::Waiting],
                ..Default::default()
            })
            .await
            .unwrap();
        ids.iter().all(|id| waiting.iter().any(|r| &r.id == id))
    })
    .await;
}

/// The rows every scenario that pushes runs through a fault records: how many completed,
/// stranded or committed a step twice, and whether any stream had a gap.
pub fn record_runs(scenario: &str, runs: usize, stranded: usize, twice: usize, seen: &[Seen]) {
    let gaps = seen.iter().filter(|s| !gap_free(&s.events)).count();
    let reconnects: usize = seen.iter().map(|s| s.connections.saturating_sub(1)).sum();
    crate::figures::record(
        scenario,
        "completed / stranded / steps committed twice",
        format!("{}/{runs} / {stranded} / {twice}", runs - stranded),
        "all / 0 / 0",
        stranded == 0 && twice == 0,
    );
    crate::figures::record(
        scenario,
        "streams with a gap or repeat / reconnections",
        format!("{gaps} / {reconnects}"),
        "0 / any",
        gaps == 0,
    );
}

/// How the runs of a scenario ended, read back from the store and set against what their
/// clients saw.
pub struct RunsOutcome {
    pub stranded: usize,
    pub twice: usize,
    pub gaps: usize,
    /// Differences between the store and what the clients saw.
    pub lost: Vec<String>,
    /// Runs the store holds (the reference run included).
    pub all_runs: usize,
}

impl RunsOutcome {
    pub async fn read(
        store: &fathom_store::SqlStore,
        client: &reqwest::Client,
        root: &str,
        reference: &str,
        ids: &[String],
        seen: &[Seen],
    ) -> RunsOutcome {
        let mut lost = Vec::new();
        for (id, s) in ids.iter().zip(seen) {
            lost.extend(nothing_lost(store, client, root, id, &s.events).await);
        }
        RunsOutcome {
            stranded: stranded(store, ids).await,
            twice: steps_committed_twice(store, reference, ids).await,
            gaps: seen.iter().filter(|s| !gap_free(&s.events)).count(),
            lost,
            all_runs: store.list_runs(&Default::default()).await.unwrap().len(),
        }
    }

    /// Fails unless every one of `runs` completed once, gap-free, nothing lost, and the store
    /// holds them and the reference run only (`why` says why no other run may be there).
    pub fn assert_held(&self, runs: usize, why: &str) {
        assert_eq!(self.stranded, 0, "runs stranded");
        assert_eq!(self.twice, 0, "steps committed twice");
        assert_eq!(self.gaps, 0, "streams with a gap or a repeat");
        assert!(self.lost.is_empty(), "differences: {:#?}", self.lost);
        assert_eq!(self.all_runs, runs + 1, "{why}");
    }
}
