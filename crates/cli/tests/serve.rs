//! `fathom serve` as a process: the real Python and npm clients against it, and a server
//! killed mid-run whose SSE clients resume after the restart without gap or duplicate.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_store::Dialect;
use futures_util::StreamExt;
use serde_json::{Value, json};

const QUESTION: &str = "How does ownership work in Rust?";
const DEADLINE: Duration = Duration::from_secs(120);

struct Env {
    tmp: tempfile::TempDir,
    corpus: PathBuf,
    db: String,
    /// A config file for every process, when the test needs one.
    config: Option<PathBuf>,
    _keep: Option<tempfile::TempDir>,
}

async fn env(dialect: Dialect) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let (db, keep) = fathom_testkit::db::fresh_url(dialect).await;
    Env {
        tmp,
        corpus,
        db,
        config: None,
        _keep: keep,
    }
}

/// A running `fathom serve`, killed on drop.
struct Served {
    child: Child,
    root: String,
    lines: mpsc::Receiver<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(env: &Env, worker_id: &str, crash_at: Option<&str>) -> Served {
        let envs: Vec<(&str, &str)> = crash_at
            .map(|at| ("FATHOM_CRASH_AT", at))
            .into_iter()
            .collect();
        Served::spawn(
            env,
            &["serve", "--worker-id", worker_id],
            &envs,
            "serving deployment",
        )
    }

    /// Starts `fathom <args>` on `env`'s database and corpus, port 0, and waits for the line
    /// with `ready` that names its address.
    fn spawn(env: &Env, args: &[&str], envs: &[(&str, &str)], ready: &str) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fathom"));
        cmd.current_dir(env.tmp.path())
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_API_KEY")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CRASH_HOLD_MS")
            .args(["--database-url", &env.db])
            .args(args)
            .args(["--port", "0"])
            .arg("--corpus")
            .arg(&env.corpus)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(config) = &env.config {
            cmd.arg("--config").arg(config);
        }
        cmd.envs(envs.iter().copied());
        let mut child = cmd.spawn().expect("spawn fathom");
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
        }
        let mut served = Served {
            child,
            root: String::new(),
            lines,
        };
        let line = served.wait_for_line(ready);
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("an address in the ready line");
        served.root = url.trim_end_matches("/health").to_string();
        served
    }

    /// Sends SIGTERM, as a supervisor stopping the process would.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits for the process to exit by itself; its exit status.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_for_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(l) => seen.push(l),
                Err(_) => panic!("no '{needle}' from fathom serve; output: {seen:#?}"),
            }
        }
    }

    fn api(&self) -> String {
        format!("{}/deployments/deep-research", self.root)
    }
}

fn http() -> reqwest::Client {
    fathom_fetch::client_builder()
        .timeout(DEADLINE)
        .build()
        .unwrap()
}

/// Reads SSE events into `into` until the stop event or the connection ends.
async fn read_sse(resp: reqwest::Response, into: &mut Vec<(i64, Value)>) {
    let mut events = resp.bytes_stream().eventsource();
    while let Some(Ok(ev)) = events.next().await {
        let value: Value = serde_json::from_str(&ev.data).unwrap();
        let stop = value["types"]
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x == "StopEvent"));
        into.push((ev.id.parse().unwrap(), value));
        if stop {
            return;
        }
    }
}

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

/// Starts a research run through `api` and returns its handler id.
async fn start_run(client: &reqwest::Client, api: &str) -> String {
    let started: Value = client
        .post(format!("{api}/workflows/deep-research/run-nowait"))
        .json(&json!({"start_event": {"query": QUESTION}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    started["handler_id"]
        .as_str()
        .expect("a handler id")
        .to_string()
}

async fn approve(client: &reqwest::Client, api: &str, id: &str) {
    let sent = client
        .post(format!("{api}/events/{id}"))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200, "approve {id}");
}

/// A run's whole stream read through `api`, to its stop event.
async fn follow_to_end(client: reqwest::Client, api: String, id: String) -> Vec<(i64, Value)> {
    let resp = client
        .get(format!("{api}/events/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut events = Vec::new();
    tokio::time::timeout(DEADLINE, read_sse(resp, &mut events))
        .await
        .unwrap_or_else(|_| panic!("run {id} did not end within the deadline"));
    events
}

/// What a client must see of a research run that completed once: ids 0..n with no gap or
/// repeat, one stop event (the last) with a completed result, and each tool call once with
/// its result.
fn assert_completed_once(id: &str, events: &[(i64, Value)]) {
    let ids: Vec<i64> = events.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        ids,
        (0..ids.len() as i64).collect::<Vec<_>>(),
        "run {id}: no gap, no duplicate"
    );
    let stops = events
        .iter()
        .filter(|(_, e)| {
            e["types"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
        })
        .count();
    assert_eq!(stops, 1, "run {id}: one stop event");
    let last = &events.last().unwrap().1;
    assert_eq!(last["type"], "ResearchResult", "run {id}");
    assert_eq!(last["value"]["status"], "completed", "run {id}");
    let tool_ids = |ty: &str| {
        let mut ids: Vec<String> = events
            .iter()
            .filter(|(_, e)| e["type"] == ty)
            .map(|(_, e)| e["value"]["tool_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let calls = tool_ids("ToolCall");
    assert!(!calls.is_empty(), "run {id}: tool calls");
    let mut unique = calls.clone();
    unique.dedup();
    assert_eq!(calls, unique, "run {id}: each tool call once");
    assert_eq!(
        calls,
        tool_ids("ToolCallResult"),
        "run {id}: each call's result"
    );
}

/// Writes a config file for the test's processes: the repository's, with `engine` settings
/// replaced.
fn with_engine_config(env: &mut Env, engine: Value) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(repo).unwrap()).unwrap();
    for (key, value) in engine.as_object().unwrap() {
        config["engine"][key] = value.clone();
    }
    let path = env.tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    env.config = Some(path);
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
    let _w2 = Served::spawn(
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
}

/// Runs leased by `owner` now.
async fn leased_by(store: &fathom_store::SqlStore, owner: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM runs WHERE lease_owner = $1")
        .bind(owner)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// Waits for `check` to hold, polling, up to the deadline.
async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A run's stream as stored, read straight from the database.
async fn stored_events(store: &fathom_store::SqlStore, id: &str) -> Vec<(i64, Value)> {
    store
        .events_after(id, -1, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, serde_json::to_value(&e.envelope).unwrap()))
        .collect()
}

/// SIGTERM reaches the process driving a research run while it is inside
/// fetch_parse_sources, with a worker waiting beside it. With `hold` the step is slow but
/// finishes within the grace (held 6 s; SIGTERM comes meanwhile): it commits there and is
/// not run again. Without, it never
/// finishes: the grace (1 s) runs out, the step is cut off and runs again in the other
/// process, its journaled calls not repeated. Either way the run is let go at once: the
/// waiting worker carries on with it long before the lease (60 s) would have expired.
async fn sigterm_hands_the_run_over(dialect: Dialect, hold: Option<&str>) {
    let mut env = env(dialect).await;
    with_engine_config(
        &mut env,
        json!({"lease_ttl_seconds": 60, "poll_interval_ms": 100}),
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
    eprintln!("{stopped}; taken over {} ms after", takeover.as_millis());
    assert!(
        takeover < Duration::from_secs(10),
        "taken over at once, not at lease expiry: {takeover:?}"
    );
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
