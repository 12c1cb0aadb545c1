//! `fathom serve` as a process: the real Python and npm clients against it, and a server
//! killed mid-run whose SSE clients resume after the restart without gap or duplicate.

#[path = "common/served.rs"]
mod served;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_store::Dialect;
use serde_json::{Value, json};
use served::*;

/// The server is SIGKILLed inside fetch_parse_sources while a client streams; a new server
/// process takes the run back, and the client reconnects with `Last-Event-ID` to get the rest
/// without gap or duplicate, up to the completed result.
async fn killed_server_resumes(dialect: Dialect) {
    let env = env(dialect).await;
    let first = Served::start(&env, "w1", Some("fetch_parse_sources:3"));
    let client = http();
    let started: Value = client
        .post(format!(
            "{}/workflows/deep-research/run-nowait",
            first.api()
        ))
        .json(&json!({"start_event": {"query": QUESTION}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["handler_id"].as_str().unwrap().to_string();
    let sent = client
        .post(format!("{}/events/{id}", first.api()))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    let resp = client
        .get(format!("{}/events/{id}", first.api()))
        .send()
        .await
        .unwrap();
    let mut before = Vec::new();
    let reader = tokio::spawn(async move {
        read_sse(resp, &mut before).await;
        before
    });
    first.wait_for_line("crash point fetch_parse_sources:3 reached");
    drop(first); // SIGKILL
    let before = tokio::time::timeout(DEADLINE, reader)
        .await
        .unwrap()
        .unwrap();
    let last = before.last().expect("events before the kill").0;
    assert!(
        before
            .iter()
            .any(|(_, e)| e["value"]["tool_name"] == "web_search"),
        "the search ran before the kill"
    );

    let second = Served::start(&env, "w1", None);
    let resp = client
        .get(format!("{}/events/{id}", second.api()))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut after = Vec::new();
    tokio::time::timeout(DEADLINE, read_sse(resp, &mut after))
        .await
        .expect("the rest of the stream within the deadline");

    let all: Vec<&(i64, Value)> = before.iter().chain(after.iter()).collect();
    let ids: Vec<i64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        ids,
        (0..ids.len() as i64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let result = &all.last().unwrap().1;
    assert_eq!(result["type"], "ResearchResult");
    assert_eq!(result["value"]["status"], "completed");
    let count = |ty: &str, tool: &str| {
        all.iter()
            .filter(|(_, e)| e["type"] == ty && e["value"]["tool_name"] == tool)
            .count()
    };
    assert!(count("ToolCall", "fetch_url") > 0);
    assert_eq!(
        count("ToolCall", "fetch_url"),
        count("ToolCallResult", "fetch_url")
    );
    let handler = client
        .get(format!("{}/handlers/{id}", second.api()))
        .send()
        .await
        .unwrap();
    assert_eq!(handler.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_resumes_sqlite() {
    killed_server_resumes(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_resumes_postgres() {
    killed_server_resumes(Dialect::Postgres).await;
}

/// Where `scripts/test.sh` installs the clients.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pyproject-compat/clients")
}

fn run_client(program: &Path, script: &str, served: &Served) -> Value {
    let out = Command::new(program)
        .current_dir(clients_dir())
        .arg(script)
        .arg(&served.root)
        .arg("deep-research")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("summary line")
}

/// The real clients, unchanged, each run deep-research to a cited report; the Python one also
/// reads the saved session back through the LlamaCloud SDK's agent-data client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_npm_clients() {
    let python = clients_dir().join(".venv/bin/python");
    let node_modules = clients_dir().join("node_modules/@llamaindex/workflows-client");
    assert!(
        python.is_file() && node_modules.is_dir(),
        "the client libraries are not installed: run scripts/test.sh, which installs them"
    );
    let env = env(Dialect::Sqlite).await;
    let served = Served::start(&env, "clients", None);
    let py = run_client(&python, "python_clients.py", &served);
    assert!(py["sources"].as_u64().unwrap() > 0, "{py}");
    assert!(py["session_item"].is_string(), "{py}");
    let node = run_client(Path::new("node"), "node_client.mjs", &served);
    assert!(node["sources"].as_u64().unwrap() > 0, "{node}");
    assert_ne!(py["handler_id"], node["handler_id"]);
}

/// Two API processes (`serve --no-worker`) and two workers on one Postgres. Worker one takes
/// the first ten of twenty approved runs and is SIGKILLed while it is inside one of them;
/// the other worker carries on. Every run completes exactly once (one session, one
/// persist_session commit), and every stream, read through the API process that did not start
/// the runs, is gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_worker_roles_on_one_postgres() {
    const RUNS: usize = 20;
    let mut env = env(Dialect::Postgres).await;
    with_engine_config(&mut env, json!({"lease_ttl_seconds": 3}));
    let api1 = Served::spawn(&env, &["serve", "--no-worker"], &[], "serving deployment");
    let api2 = Served::spawn(&env, &["serve", "--no-worker"], &[], "serving deployment");
    let mut w1 = Served::spawn(
        &env,
        &["worker", "--worker-id", "w1", "--max-concurrent-runs", "10"],
        &[("FATHOM_CRASH_AT", "fetch_parse_sources:2")],
        "driving runs",
    );
    let client = http();
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        ids.push(start_run(&client, &api1.api()).await);
    }
    let readers: Vec<_> = ids
        .iter()
        .map(|id| tokio::spawn(follow_to_end(client.clone(), api2.api(), id.clone())))
        .collect();
    // Every plan is drafted and waits at the gate before anything is approved.
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    wait_until("every run waits at the gate", || async {
        let waiting = store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Waiting],
                ..Default::default()
            })
            .await
            .unwrap();
        waiting.len() == RUNS
    })
    .await;
    for id in &ids {
        approve(&client, &api1.api(), id).await;
    }
    // Worker one holds its ten runs when the second worker joins.
    w1.wait_for_line("crash point fetch_parse_sources:2 reached");
    let w2 = Served::spawn(
        &env,
        &["worker", "--worker-id", "w2", "--max-concurrent-runs", "10"],
        &[],
        "driving runs",
    );
    let held = leased_by(&store, "w1").await;
    assert!(held > 0, "worker one is inside a run when it is killed");
    w1.child.kill().unwrap();
    w1.wait_exit();
    eprintln!("killed worker one holding {held} run(s)");

    let mut research_ids = Vec::new();
    for (id, reader) in ids.iter().zip(readers) {
        let events = reader.await.unwrap();
        assert_completed_once(id, &events);
        let result = &events.last().unwrap().1["value"];
        research_ids.push(result["research_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let run = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Completed, "run {id}");
        let saved = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM step_journal WHERE run_id = $1 AND step = 'persist_session'",
        )
        .bind(id.as_str())
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(saved, 1, "run {id}: persisted once");
    }
    // One saved session per run, read back through the other API process.
    let page: Value = client
        .post(format!("{}/api/v1/beta/agent-data/:search", api2.root))
        .json(
            &json!({"deployment_name": "_public", "collection": "research-sessions",
                      "page_size": 100}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut saved: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["data"]["research_id"].as_str().unwrap().to_string())
        .collect();
    saved.sort();
    research_ids.sort();
    assert_eq!(saved, research_ids, "one session per run");

    // What the operator sees: the API process that started the runs counted them; the
    // second worker says it took over the runs whose holder died (not the ones nobody held).
    let m = scrape(&client, &api1.root).await;
    let wf = &[("workflow", "deep-research")];
    assert_eq!(
        sample(&m, "fathom_runs_started_total", wf),
        Some(RUNS as f64),
        "{m}"
    );
    assert_eq!(
        sample(&m, "fathom_runs", &[wf[0], ("status", "running")]),
        Some(0.0),
        "{m}"
    );
    let m = scrape(&client, &w2.root).await;
    let taken = sample(&m, "fathom_lease_takeovers_total", &[]).unwrap_or(0.0);
    assert!(
        (1.0..=10.0).contains(&taken),
        "runs taken over from worker one: {taken}\n{m}"
    );
    let done = sample(&m, "fathom_runs_completed_total", wf).unwrap_or(0.0);
    assert!(
        done >= taken,
        "worker two completed {done} run(s), took over {taken}"
    );
}

/// SIGTERM reaches the process driving a research run while it is inside
/// fetch_parse_sources, with a worker waiting beside it. With `hold` the step is slow but
/// finishes within the grace (held 6 s; SIGTERM comes meanwhile): it commits there and is
/// not run again. Without, it never
/// finishes: the grace (1 s) runs out, the step is cut off and runs again in the other
/// process, its journaled calls not repeated. Either way the run is let go at once: the
/// waiting worker carries on with it long before the lease (an hour) would have expired: well
/// inside the test's deadline.
async fn sigterm_hands_the_run_over(dialect: Dialect, hold: Option<&str>) {
    let mut env = env(dialect).await;
    with_engine_config(
        &mut env,
        json!({"lease_ttl_seconds": 3600, "poll_interval_ms": 100}),
    );
    let mut envs = vec![("FATHOM_CRASH_AT", "fetch_parse_sources:2")];
    if let Some(ms) = hold {
        envs.push(("FATHOM_CRASH_HOLD_MS", ms));
    }
    // A held step has time to finish; a stuck one is cut off after a second.
    let grace = if hold.is_some() { "30" } else { "1" };
    let mut first = Served::spawn(
        &env,
        &[
            "serve",
            "--worker-id",
            "first",
            "--shutdown-grace-secs",
            grace,
        ],
        &envs,
        "serving deployment",
    );
    let client = http();
    let id = start_run(&client, &first.api()).await;
    approve(&client, &first.api(), &id).await;
    first.wait_for_line("crash point fetch_parse_sources:2 reached");
    let second = Served::spawn(
        &env,
        &["worker", "--worker-id", "second"],
        &[],
        "driving runs",
    );
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    assert_eq!(
        leased_by(&store, "first").await,
        1,
        "the first process holds the run"
    );

    first.terminate();
    let stopped = first.wait_for_line("worker stopped");
    let let_go = Instant::now();
    let status = first.wait_exit();
    assert!(status.success(), "a clean exit after SIGTERM: {status}");
    let at_stop = stored_events(&store, &id).await.len();
    // The second process writes the run's next event.
    wait_until("the second process carries on", || async {
        stored_events(&store, &id).await.len() > at_stop
    })
    .await;
    let takeover = let_go.elapsed();
    wait_until("the run completes", || async {
        store
            .get_run(&id)
            .await
            .unwrap()
            .unwrap()
            .status
            .is_terminal()
    })
    .await;
    // Taken over within the wait's deadline, an hour before the lease would have expired:
    // the first process let the run go.
    eprintln!("{stopped}; taken over {} ms after", takeover.as_millis());
    let events = stored_events(&store, &id).await;
    assert_completed_once(&id, &events);
    let fetch_commits = sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM step_journal WHERE run_id = $1 AND step = 'fetch_parse_sources'",
    )
    .bind(id.as_str())
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(fetch_commits, 1, "fetch_parse_sources committed once");
    let (finished_in_first, cut_off) = match hold {
        Some(_) => (true, "0 cut off"),
        None => (false, "1 cut off"),
    };
    assert!(stopped.contains(cut_off), "{stopped}");
    // Where the step committed: before the first process let go, or after, in the second.
    let committed_before = sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM step_journal WHERE run_id = $1 AND step = 'fetch_parse_sources' \
         AND finished_at <= (SELECT MIN(created_at) FROM run_events WHERE run_id = $1 AND seq >= $2)",
    )
    .bind(id.as_str())
    .bind(at_stop as i64)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(committed_before == 1, finished_in_first);
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_step_then_lets_go_sqlite() {
    sigterm_hands_the_run_over(Dialect::Sqlite, Some("6000")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cuts_off_a_stuck_step_after_the_grace_postgres() {
    sigterm_hands_the_run_over(Dialect::Postgres, None).await;
}

/// A cancel lands while a step of the run, driven by another process, is on its way to save
/// the session: the worker is held just before that save. The API process (`serve
/// --no-worker`) records the cancel and, before it answers, saves the session as cancelled;
/// then the worker's step goes on and saves the session as it holds it, running, and its
/// commit is refused. The session says cancelled, and still does once the worker has let the
/// run go: the late save wrote nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_outlasts_a_session_save_from_another_process() {
    let mut env = env(Dialect::Postgres).await;
    // Leases of an hour: the worker learns of the cancel from its commit, not its heartbeat.
    with_engine_config(&mut env, json!({"lease_ttl_seconds": 3600}));
    let go_on = env.tmp.path().join("go-on");
    let api = Served::spawn(&env, &["serve", "--no-worker"], &[], "serving deployment");
    let worker = Served::spawn(
        &env,
        &["worker", "--worker-id", "saver"],
        &[
            ("FATHOM_CRASH_AT", "fetch_parse_sources:save_session"),
            ("FATHOM_CRASH_HOLD_UNTIL", go_on.to_str().unwrap()),
            // Says when it stops driving the run.
            ("RUST_LOG", "fathom_engine=warn"),
        ],
        "driving runs",
    );
    let client = http();
    let id = start_run(&client, &api.api()).await;
    approve(&client, &api.api(), &id).await;
    worker.wait_for_line("crash point fetch_parse_sources:save_session reached");
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    let sessions = fathom_research::Sessions::new(
        std::sync::Arc::new(store.clone()),
        &fathom_testkit::research_config(),
    );
    let status = |session: Value| session["status"].as_str().unwrap_or_default().to_string();
    assert_eq!(status(sessions.get(&id).await.unwrap()), "running");

    let cancelled = client
        .post(format!("{}/handlers/{id}/cancel", api.api()))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    assert_eq!(
        status(sessions.get(&id).await.unwrap()),
        "cancelled",
        "saved by the cancelling process before it answered"
    );
    std::fs::write(&go_on, b"").unwrap();
    worker.wait_for_line("crash point fetch_parse_sources:save_session let go");
    // After its save, the step's commit is refused: the run is no longer the worker's.
    worker.wait_for_line("stopped driving run");
    let session = sessions.get(&id).await.unwrap();
    assert_eq!(status(session.clone()), "cancelled", "{session}");
    let last = session["decisions"].as_array().unwrap().last().unwrap();
    assert_eq!(last["action"], "cancelled", "{session}");
    let run = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let events = stored_events(&store, &id).await;
    let stops: Vec<&Value> = events
        .iter()
        .map(|(_, e)| e)
        .filter(|e| {
            e["types"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
        })
        .collect();
    assert_eq!(stops.len(), 1, "one stop event");
    assert_eq!(stops[0]["type"], "WorkflowCancelledEvent");
    assert_eq!(events.last().unwrap().1["type"], "WorkflowCancelledEvent");
}

/// Stopped by SIGTERM, `fathom serve` leaves its SQLite database as one file: the write-ahead
/// log folded in, so a copy of `fathom.db` alone holds the runs it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_leaves_its_database_as_one_file() {
    let env = env(Dialect::Sqlite).await;
    let mut served = Served::spawn(&env, &["serve"], &[], "serving deployment");
    let id = start_run(&http(), &served.api()).await;
    served.terminate();
    assert!(served.wait_exit().success(), "a clean exit after SIGTERM");
    let copy = fathom_testkit::db::copy_of_closed_file(&env.db, env.tmp.path());
    let store = fathom_store::SqlStore::connect(copy.to_str().unwrap())
        .await
        .unwrap();
    assert!(
        store.get_run(&id).await.unwrap().is_some(),
        "run {id} in the copy"
    );
}
