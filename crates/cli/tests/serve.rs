//! `fathom serve` as a process: the real Python and npm clients against it, and a server
//! killed mid-run whose SSE clients resume after the restart without gap or duplicate.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use fathom_store::Dialect;
use futures_util::StreamExt;
use serde_json::{Value, json};

const QUESTION: &str = "How does ownership work in Rust?";
const DEADLINE: Duration = Duration::from_secs(120);

struct Env {
    tmp: tempfile::TempDir,
    corpus: PathBuf,
    db: String,
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fathom"));
        cmd.current_dir(env.tmp.path())
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_API_KEY")
            .env_remove("FATHOM_CRASH_AT")
            .args(["--database-url", &env.db, "serve", "--port", "0"])
            .arg("--corpus")
            .arg(&env.corpus)
            .args(["--worker-id", worker_id])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(at) = crash_at {
            cmd.env("FATHOM_CRASH_AT", at);
        }
        let mut child = cmd.spawn().expect("spawn fathom serve");
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
        let line = served.wait_for_line("serving deployment");
        let url = line
            .rsplit(" on ")
            .next()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        served.root = url.to_string();
        served
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
