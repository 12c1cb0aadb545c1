//! Load on `fathom serve`: K concurrent deep-research runs, each with M SSE clients, approved
//! as soon as their plan arrives. Prints runs/s, approval-to-resume latency (p50, p99) and
//! server memory, then the same load against the Python `llama-agents-server` 0.8 (SQLite
//! store) serving a workflow of the same shape — same six steps, the same number and size of
//! events, measured on a Fathom run first, no network — and the ratios. Both servers use
//! SQLite and run on this machine at the same time of the same run.
//!
//! Also prints each server's CPU time per run (user and system, all threads, from /proc),
//! and the ratio of Fathom's to the Python server's.
//!
//! `cargo bench -p fathom-cli --bench serve` (env FATHOM_BENCH_RUNS=K, FATHOM_BENCH_CLIENTS=M;
//! FATHOM_BENCH_CORPUS=DIR to research another folder than the small sample corpus, the Rust
//! book say; FATHOM_BENCH_DATABASE_URL=postgres://... to run Fathom on Postgres; the Python
//! server comes from pyproject-compat/clients/.venv, which scripts/test.sh makes).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

const QUESTION: &str = "How does ownership work in Rust?";
const DEADLINE: Duration = Duration::from_secs(120);

struct Server {
    name: &'static str,
    child: Child,
    /// Base of the workflows API.
    api: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Resident memory of the server process now, and its peak so far (KiB).
    fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// CPU time the server process has used so far (user and system, all threads), in ms.
    fn cpu_ms(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) and its closing parenthesis:
        // utime and stime are the 14th and 15th of the line.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let ticks: f64 = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse::<f64>().ok())
            .sum();
        ticks * 1000.0 / clock_ticks_per_s()
    }
}

/// The kernel's clock ticks per second, in which /proc reports CPU time.
fn clock_ticks_per_s() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Starts `cmd` and waits for the line containing `marker`, whose last word is the URL.
fn start(name: &'static str, mut cmd: Command, marker: &str, api_path: &str) -> Server {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = out.lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("{name} exited before serving"))
            .unwrap();
        if line.contains(marker) {
            let after = line.rsplit(" on ").next().unwrap();
            break after.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server {
        name,
        child,
        api: format!("{url}{api_path}"),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What one run streams: events up to and including the plan, events after it, their mean
/// sizes, and the size of the result.
#[derive(Debug, Clone, Copy)]
struct Shape {
    pre: usize,
    pre_bytes: usize,
    post: usize,
    post_bytes: usize,
    result_bytes: usize,
}

#[derive(Debug)]
struct RunTiming {
    /// The run reached a terminal status within the deadline.
    finished: bool,
    resume_ms: f64,
    events_per_client: Vec<usize>,
}

/// Starts a deep-research run; returns its handler id.
async fn start_run(http: &reqwest::Client, api: &str) -> String {
    let started: Value = http
        .post(format!("{api}/workflows/deep-research/run-nowait"))
        .json(&json!({"start_event": {"query": QUESTION}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    started["handler_id"].as_str().unwrap().to_string()
}

/// One run: start it, open `clients` SSE streams, approve once `pre` events arrived on the
/// first, and wait for every stream to end. Returns the approval-to-resume latency (POST sent
/// to the first post-gate event received) and what each client received.
async fn one_run(http: &reqwest::Client, api: &str, clients: usize, pre: usize) -> RunTiming {
    let id = start_run(http, api).await;
    let plan_seen = Arc::new(Notify::new());
    let approved_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut readers = Vec::new();
    for c in 0..clients {
        let (http, url) = (http.clone(), format!("{api}/events/{id}?after_sequence=-1"));
        let (plan_seen, approved_at) = (plan_seen.clone(), approved_at.clone());
        readers.push(tokio::spawn(async move {
            let resp = http.get(url).send().await.unwrap();
            let mut events = resp.bytes_stream().eventsource();
            let (mut n, mut resumed) = (0usize, None);
            while let Some(Ok(ev)) = events.next().await {
                n += 1;
                if c == 0 && n == pre {
                    plan_seen.notify_one();
                }
                if c == 0 && n == pre + 1 {
                    resumed = Some(Instant::now());
                }
                let v: Value = serde_json::from_str(&ev.data).unwrap();
                if v["types"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
                {
                    break;
                }
            }
            let latency = resumed.and_then(|r| {
                approved_at
                    .lock()
                    .unwrap()
                    .map(|a| r.duration_since(a).as_secs_f64() * 1000.0)
            });
            (n, latency)
        }));
    }
    plan_seen.notified().await;
    *approved_at.lock().unwrap() = Some(Instant::now());
    let resp = http
        .post(format!("{api}/events/{id}"))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}))
        .send()
        .await
        .unwrap();
    if !resp.status().is_success() {
        eprintln!("{api}: approving {id} failed: {}", resp.status());
    }
    let mut events_per_client = Vec::new();
    let mut resume_ms = f64::NAN;
    for r in readers {
        let (n, latency) = r.await.unwrap();
        events_per_client.push(n);
        if let Some(l) = latency {
            resume_ms = l;
        }
    }
    // A stream that ended early says nothing of the run: wait for the run itself to end.
    let began = Instant::now();
    let mut finished = false;
    while began.elapsed() < DEADLINE {
        let status = http.get(format!("{api}/handlers/{id}")).send().await;
        if status.is_ok_and(|r| r.status() != reqwest::StatusCode::ACCEPTED) {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    RunTiming {
        finished,
        resume_ms,
        events_per_client,
    }
}

struct LoadResult {
    runs_per_s: f64,
    p50: f64,
    p99: f64,
    /// SSE clients whose stream ended before the run's stop event, of all clients.
    cut_streams: (usize, usize),
    /// Runs that did not end within the deadline.
    stuck: usize,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    /// The server's CPU time per run that ended.
    cpu_ms_per_run: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn load(server: &Server, runs: usize, clients: usize, shape: Shape) -> LoadResult {
    let http = fathom_fetch::client_builder()
        .timeout(DEADLINE)
        .pool_max_idle_per_host(runs * (clients + 1))
        .build()
        .unwrap();
    one_run(&http, &server.api, clients, shape.pre).await; // warm-up
    let (idle, _) = server.memory_kib();
    let cpu_before = server.cpu_ms();
    let began = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|_| {
            let (http, api) = (http.clone(), server.api.clone());
            tokio::spawn(async move { one_run(&http, &api, clients, shape.pre).await })
        })
        .collect();
    let mut latencies = Vec::new();
    let expected = shape.pre + shape.post + 1;
    let (mut cut, mut stuck) = (0, 0);
    for t in tasks {
        let timing = match tokio::time::timeout(DEADLINE * 2, t).await {
            Ok(Ok(timing)) if timing.finished => timing,
            _ => {
                stuck += 1;
                continue;
            }
        };
        cut += timing
            .events_per_client
            .iter()
            .filter(|n| **n != expected)
            .count();
        if !timing.resume_ms.is_nan() {
            latencies.push(timing.resume_ms);
        }
    }
    assert!(
        !latencies.is_empty(),
        "{}: no run resumed on a stream",
        server.name
    );
    let wall = began.elapsed().as_secs_f64();
    let cpu = server.cpu_ms() - cpu_before;
    let (_, peak) = server.memory_kib();
    latencies.sort_by(f64::total_cmp);
    LoadResult {
        runs_per_s: (runs - stuck) as f64 / wall,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        cut_streams: (cut, runs * clients),
        stuck,
        idle_rss_mib: idle as f64 / 1024.0,
        peak_rss_mib: peak as f64 / 1024.0,
        cpu_ms_per_run: cpu / (runs - stuck).max(1) as f64,
    }
}

/// Counts and sizes of what one Fathom run streams.
async fn measure_shape(api: &str) -> Shape {
    let http = fathom_fetch::client_builder().build().unwrap();
    let id = start_run(&http, api).await;
    http.post(format!("{api}/events/{id}"))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}))
        .send()
        .await
        .unwrap();
    let text = http
        .get(format!("{api}/events/{id}?sse=false"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let plan = events
        .iter()
        .position(|e| e["type"] == "ToolCallResult" && e["value"]["tool_name"] == "decompose_query")
        .expect("plan event");
    let size = |e: &Value| e["value"].to_string().len();
    let mean = |es: &[Value]| es.iter().map(size).sum::<usize>() / es.len().max(1);
    let (pre, rest) = events.split_at(plan + 1);
    let (post, result) = rest.split_at(rest.len() - 1);
    Shape {
        pre: pre.len(),
        pre_bytes: mean(pre),
        post: post.len(),
        post_bytes: mean(post),
        result_bytes: size(&result[0]),
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pyproject-compat/clients")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn report(name: &str, r: &LoadResult) {
    println!(
        "{name:<24} {:>8.2} runs/s   cpu {:>7.1} ms/run   resume p50 {:>7.1} ms  p99 {:>7.1} ms   rss idle {:>6.1} MiB  peak {:>6.1} MiB   streams cut short {}/{}   runs not ended {}",
        r.runs_per_s,
        r.cpu_ms_per_run,
        r.p50,
        r.p99,
        r.idle_rss_mib,
        r.peak_rss_mib,
        r.cut_streams.0,
        r.cut_streams.1,
        r.stuck
    );
}

#[tokio::main]
async fn main() {
    let runs = env_usize("FATHOM_BENCH_RUNS", 16);
    let clients = env_usize("FATHOM_BENCH_CLIENTS", 3);
    let tmp = tempfile::tempdir().unwrap();
    let corpus = match std::env::var_os("FATHOM_BENCH_CORPUS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let corpus = tmp.path().join("corpus");
            std::fs::create_dir_all(&corpus).unwrap();
            fathom_testkit::fixtures::write_sample_corpus(&corpus);
            corpus
        }
    };
    let database = std::env::var("FATHOM_BENCH_DATABASE_URL").unwrap_or("fathom.db".into());
    let on = if database.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    println!("fathom on {on}, corpus {}", corpus.display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fathom"));
    cmd.current_dir(tmp.path())
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_API_KEY")
        .args(["--database-url", &database])
        .args(["serve", "--port", "0", "--corpus"])
        .arg(&corpus);
    let fathom = start(
        "fathom",
        cmd,
        "serving deployment",
        "/deployments/deep-research",
    );
    let shape = measure_shape(&fathom.api).await;
    println!(
        "load: {runs} concurrent runs x {clients} SSE clients; each run streams {} events \
         (~{} B) before the plan, {} after (~{} B) and a {} B result",
        shape.pre, shape.pre_bytes, shape.post, shape.post_bytes, shape.result_bytes
    );
    let ours = load(&fathom, runs, clients, shape).await;
    report(&format!("fathom ({on})"), &ours);
    drop(fathom);

    let python = clients_dir().join(".venv/bin/python");
    if !python.is_file() {
        println!("python baseline: not installed (run scripts/test.sh); no ratios");
        return;
    }
    let port = free_port();
    let mut cmd = Command::new(&python);
    cmd.current_dir(clients_dir())
        .arg("python_baseline_server.py")
        .args(["--port", &port.to_string()])
        .arg("--db")
        .arg(tmp.path().join("baseline.db"));
    for (flag, v) in [
        ("--pre", shape.pre),
        ("--pre-bytes", shape.pre_bytes),
        ("--post", shape.post),
        ("--post-bytes", shape.post_bytes),
        ("--result-bytes", shape.result_bytes),
    ] {
        cmd.args([flag, &v.to_string()]);
    }
    let baseline = start("llama-agents-server", cmd, "baseline serving", "");
    // uvicorn starts listening a moment after the script prints.
    let http = fathom_fetch::client_builder().build().unwrap();
    let ready = Instant::now();
    while http
        .get(format!("{}/workflows", baseline.api))
        .send()
        .await
        .is_err()
    {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "baseline did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let theirs = load(&baseline, runs, clients, shape).await;
    report("llama-agents-server 0.8", &theirs);
    println!(
        "ratios (fathom / python): throughput {:.2}x   cpu per run {:.3}x   resume p50 {:.2}x  p99 {:.2}x   peak rss {:.2}x",
        ours.runs_per_s / theirs.runs_per_s,
        ours.cpu_ms_per_run / theirs.cpu_ms_per_run,
        ours.p50 / theirs.p50,
        ours.p99 / theirs.p99,
        ours.peak_rss_mib / theirs.peak_rss_mib
    );
}
