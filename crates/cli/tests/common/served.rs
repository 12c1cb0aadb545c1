//! What the tests that start `fathom serve` and `fathom worker` processes share: the
//! processes, their database and corpus, and what a client reads from them.
#![allow(dead_code)] // not every test binary uses every helper

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use fathom_engine::store::RunStore;
use fathom_store::Dialect;
use futures_util::StreamExt;
use serde_json::{Value, json};

pub const QUESTION: &str = "How does ownership work in Rust?";
pub const DEADLINE: Duration = Duration::from_secs(120);

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub corpus: PathBuf,
    pub db: String,
    /// A config file for every process, when the test needs one.
    pub config: Option<PathBuf>,
    _keep: Option<tempfile::TempDir>,
}

pub async fn env(dialect: Dialect) -> Env {
    let (db, keep) = fathom_testkit::db::fresh_url(dialect).await;
    Env {
        _keep: keep,
        ..env_on(db)
    }
}

/// A corpus and a working folder for processes on the database at `db`.
pub fn env_on(db: String) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    Env {
        tmp,
        corpus,
        db,
        config: None,
        _keep: None,
    }
}

/// A running `fathom serve`, killed on drop.
pub struct Served {
    pub child: Child,
    pub root: String,
    lines: mpsc::Receiver<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    pub fn start(env: &Env, worker_id: &str, crash_at: Option<&str>) -> Served {
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
    pub fn spawn(env: &Env, args: &[&str], envs: &[(&str, &str)], ready: &str) -> Served {
        Served::spawn_at(env, args, envs, ready, 0)
    }

    /// [`Served::spawn`] on a given port (0: any free one), as a supervisor restarting a
    /// process on its address would.
    pub fn spawn_at(
        env: &Env,
        args: &[&str],
        envs: &[(&str, &str)],
        ready: &str,
        port: u16,
    ) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fathom"));
        cmd.current_dir(env.tmp.path())
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_API_KEY")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CRASH_HOLD_MS")
            .args(["--database-url", &env.db])
            .args(args)
            .args(["--port", &port.to_string()])
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
            // FATHOM_TEST_SERVER_LOG names a file every served process's output is appended
            // to, for looking into a scenario that went wrong.
            let mut log = std::env::var_os("FATHOM_TEST_SERVER_LOG").and_then(|path| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .ok()
            });
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(file) = log.as_mut() {
                        use std::io::Write;
                        let _ = writeln!(file, "{l}");
                    }
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
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits for the process to exit by itself; its exit status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn wait_for_line(&self, needle: &str) -> String {
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

    pub fn api(&self) -> String {
        format!("{}/deployments/deep-research", self.root)
    }
}

pub fn http() -> reqwest::Client {
    fathom_fetch::client_builder()
        .timeout(DEADLINE)
        .build()
        .unwrap()
}

/// Reads SSE events into `into` until the stop event or the connection ends.
pub async fn read_sse(resp: reqwest::Response, into: &mut Vec<(i64, Value)>) {
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

/// Starts a research run through `api` and returns its handler id.
pub async fn start_run(client: &reqwest::Client, api: &str) -> String {
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

pub async fn approve(client: &reqwest::Client, api: &str, id: &str) {
    let sent = client
        .post(format!("{api}/events/{id}"))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200, "approve {id}");
}

/// A run's whole stream read through `api`, to its stop event.
pub async fn follow_to_end(client: reqwest::Client, api: String, id: String) -> Vec<(i64, Value)> {
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
pub fn assert_completed_once(id: &str, events: &[(i64, Value)]) {
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
pub fn with_engine_config(env: &mut Env, engine: Value) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(repo).unwrap()).unwrap();
    for (key, value) in engine.as_object().unwrap() {
        config["engine"][key] = value.clone();
    }
    let path = env.tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    env.config = Some(path);
}

/// Runs leased by `owner` now.
pub async fn leased_by(store: &fathom_store::SqlStore, owner: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM runs WHERE lease_owner = $1")
        .bind(owner)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// Waits for `check` to hold, polling, up to the deadline.
pub async fn wait_until<F, Fut>(what: &str, check: F)
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
pub async fn stored_events(store: &fathom_store::SqlStore, id: &str) -> Vec<(i64, Value)> {
    store
        .events_after(id, -1, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, serde_json::to_value(&e.envelope).unwrap()))
        .collect()
}

/// `GET /metrics` from the process at `root`.
pub async fn scrape(client: &reqwest::Client, root: &str) -> String {
    let resp = client.get(format!("{root}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "GET {root}/metrics");
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    resp.text().await.unwrap()
}

/// The sum of the samples of `name` (Prometheus text format) whose labels include `labels`;
/// None when there is no such sample.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, label_text) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let has = |(k, v): &(&str, &str)| label_text.contains(&format!("{k}=\"{v}\""));
        if labels.iter().all(has) {
            *found.get_or_insert(0.0) += value.parse::<f64>().expect("a sample value");
        }
    }
    found
}

impl Served {
    /// What the process has printed (stdout and stderr) since the last line read.
    pub fn output_so_far(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}
