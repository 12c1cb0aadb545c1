//! Load on `fathom serve` over HTTP, as users make it: U users at once, each starting a
//! deep-research run, following it with M SSE clients, approving it as soon as its plan
//! arrives, and starting the next once it ended. Prints runs/s, approval-to-resume latency
//! (approval POST sent to the first event of the next step on the client's stream, p50 and
//! p99), time to plan (start POST sent to the plan on the stream: what a new user waits), the
//! server's CPU time per run (user and system, all threads, from /proc) and its
//! memory, for three servers in the same run:
//! - `fathom serve` doing real offline research (the sample corpus, or FATHOM_BENCH_CORPUS);
//! - Fathom serving a workflow of the same shape with no work in it (same six steps, the same
//!   number and size of events, measured on a research run first), in a child process of this
//!   benchmark: the engine, the store and the API alone;
//! - the Python `llama-agents-server` 0.8 (its SQLite store) serving that same shape.
//!
//! and the ratios of both Fathom servers to the Python one. A peer run that does not end is
//! counted and said, not folded into the figures.
//!
//! `cargo bench -p fathom-bench --bench serve` (env: FATHOM_BENCH_RUNS, default 64;
//! FATHOM_BENCH_CONCURRENCY, default 8; FATHOM_BENCH_CLIENTS, default 1;
//! FATHOM_BENCH_DATABASE_URL=postgres://... for Fathom on Postgres, else SQLite;
//! FATHOM_BENCH_CONFIG=FILE for the config `fathom serve` runs with; FATHOM_BENCH_BIN=PATH to
//! serve with another build of `fathom`;
//! FATHOM_BENCH_ONLY=research to measure that server alone, without ratios; the Python
//! server comes from pyproject-compat/clients/.venv, which scripts/test.sh makes).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use fathom_bench::{env_usize, percentile, process};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

const QUESTION: &str = "How does ownership work in Rust?";
const DEADLINE: Duration = Duration::from_secs(120);

struct Server {
    name: &'static str,
    child: process::Started,
    /// Base of the workflows API.
    api: String,
}

impl Server {
    /// Resident memory of the server process now, and its peak so far (KiB).
    fn memory_kib(&self) -> (u64, u64) {
        let pid = self.child.id();
        (
            process::status_field(pid, "VmRSS:"),
            process::status_field(pid, "VmHWM:"),
        )
    }

    /// CPU time the server process has used so far (user and system, all threads), in ms.
    fn cpu_ms(&self) -> f64 {
        process::cpu_ms(self.child.id())
    }
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
        child: process::Started(child),
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
pub struct Shape {
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
    /// Start POST sent to the plan received on the first stream: what a new user waits.
    plan_ms: f64,
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
    let started_at = Instant::now();
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
    let plan_ms = started_at.elapsed().as_secs_f64() * 1000.0;
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
        plan_ms,
        resume_ms,
        events_per_client,
    }
}

struct LoadResult {
    runs_per_s: f64,
    p50: f64,
    p99: f64,
    /// Start to plan, p50 and p99 (ms).
    plan_p50: f64,
    plan_p99: f64,
    /// SSE clients whose stream ended before the run's stop event, of all clients.
    cut_streams: (usize, usize),
    /// Runs that did not end within the deadline.
    stuck: usize,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    /// The server's CPU time per run that ended.
    cpu_ms_per_run: f64,
}

/// `runs` runs, `concurrency` at a time: each of `concurrency` users starts a run, follows
/// it with `clients` streams, approves it, and starts the next once it ended.
async fn load(
    server: &Server,
    runs: usize,
    concurrency: usize,
    clients: usize,
    shape: Shape,
) -> LoadResult {
    let http = fathom_fetch::client_builder()
        .timeout(DEADLINE)
        .pool_max_idle_per_host(concurrency * (clients + 1))
        .build()
        .unwrap();
    one_run(&http, &server.api, clients, shape.pre).await; // warm-up
    let (idle, _) = server.memory_kib();
    let cpu_before = server.cpu_ms();
    let began = Instant::now();
    let per_user = runs.div_ceil(concurrency);
    let users: Vec<_> = (0..concurrency)
        .map(|u| {
            let (http, api) = (http.clone(), server.api.clone());
            let mine = per_user.min(runs.saturating_sub(u * per_user));
            tokio::spawn(async move {
                let mut timings = Vec::new();
                for _ in 0..mine {
                    match tokio::time::timeout(
                        DEADLINE * 2,
                        one_run(&http, &api, clients, shape.pre),
                    )
                    .await
                    {
                        Ok(t) => timings.push(Some(t)),
                        Err(_) => timings.push(None),
                    }
                }
                timings
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut plans = Vec::new();
    let expected = shape.pre + shape.post + 1;
    let (mut cut, mut stuck) = (0, 0);
    for user in users {
        for timing in user.await.unwrap() {
            let timing = match timing {
                Some(t) if t.finished => t,
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
            plans.push(timing.plan_ms);
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
    plans.sort_by(f64::total_cmp);
    LoadResult {
        runs_per_s: (runs - stuck) as f64 / wall,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        plan_p50: percentile(&plans, 0.5),
        plan_p99: percentile(&plans, 0.99),
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

impl Shape {
    fn flags(&self) -> [(&'static str, usize); 5] {
        [
            ("--pre", self.pre),
            ("--pre-bytes", self.pre_bytes),
            ("--post", self.post),
            ("--post-bytes", self.post_bytes),
            ("--result-bytes", self.result_bytes),
        ]
    }

    fn from_args(args: &[String]) -> Shape {
        let get = |flag: &str| -> usize {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} N is required"))
        };
        Shape {
            pre: get("--pre"),
            pre_bytes: get("--pre-bytes"),
            post: get("--post"),
            post_bytes: get("--post-bytes"),
            result_bytes: get("--result-bytes"),
        }
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pyproject-compat/clients")
}

fn report(name: &str, r: &LoadResult) {
    println!(
        "{name:<34} {:>8.2} runs/s   cpu {:>7.2} ms/run   resume p50 {:>7.3} ms  p99 {:>7.3} ms   plan p50 {:>7.1} ms  p99 {:>7.1} ms   rss idle {:>6.1} MiB  peak {:>6.1} MiB   streams cut short {}/{}   runs not ended {}",
        r.runs_per_s,
        r.cpu_ms_per_run,
        r.p50,
        r.p99,
        r.plan_p50,
        r.plan_p99,
        r.idle_rss_mib,
        r.peak_rss_mib,
        r.cut_streams.0,
        r.cut_streams.1,
        r.stuck
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--shape-server") {
        let database = args
            .iter()
            .position(|a| a == "--database")
            .and_then(|i| args.get(i + 1))
            .expect("--database URL");
        shape::serve(Shape::from_args(&args), database).await;
        return;
    }
    let runs = env_usize("FATHOM_BENCH_RUNS", 64);
    let concurrency = env_usize("FATHOM_BENCH_CONCURRENCY", 8);
    let clients = env_usize("FATHOM_BENCH_CLIENTS", 1);
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
    // FATHOM_BENCH_BIN serves with another build (an earlier one, say), as the research
    // bench does.
    let bin =
        std::env::var_os("FATHOM_BENCH_BIN").map_or_else(fathom_bench::fathom_bin, PathBuf::from);
    let mut cmd = Command::new(bin);
    cmd.current_dir(tmp.path())
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_API_KEY")
        .args(["--database-url", &database]);
    if let Some(config) = std::env::var_os("FATHOM_BENCH_CONFIG") {
        cmd.arg("--config").arg(config);
    }
    cmd.args(["serve", "--port", "0", "--corpus"]).arg(&corpus);
    let fathom = start(
        "fathom",
        cmd,
        "serving deployment",
        "/deployments/deep-research",
    );
    let shape = measure_shape(&fathom.api).await;
    println!(
        "load: {runs} runs, {concurrency} at a time, {clients} SSE client(s) each; a research \
         run streams {} events (~{} B) before the plan, {} after (~{} B) and a {} B result",
        shape.pre, shape.pre_bytes, shape.post, shape.post_bytes, shape.result_bytes
    );
    let research = load(&fathom, runs, concurrency, clients, shape).await;
    report(&format!("fathom research ({on})"), &research);
    drop(fathom);
    if std::env::var("FATHOM_BENCH_ONLY").is_ok_and(|v| v == "research") {
        return;
    }

    // The same shape with no work in it, served by Fathom: the engine and the API alone.
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.current_dir(tmp.path())
        .args(["--shape-server", "--database", &database]);
    for (flag, v) in shape.flags() {
        cmd.args([flag, &v.to_string()]);
    }
    let fathom_shape = start(
        "fathom shape",
        cmd,
        "serving deployment",
        "/deployments/deep-research",
    );
    let ours = load(&fathom_shape, runs, concurrency, clients, shape).await;
    report(&format!("fathom same shape ({on})"), &ours);
    drop(fathom_shape);

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
    for (flag, v) in shape.flags() {
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
    let theirs = load(&baseline, runs, concurrency, clients, shape).await;
    report("llama-agents-server 0.8 (sqlite)", &theirs);
    if theirs.stuck > 0 {
        println!(
            "note: {} of the peer's runs did not end within {}s; its figures count the others",
            theirs.stuck,
            (DEADLINE * 2).as_secs()
        );
    }
    for (name, r) in [("same shape", &ours), ("research", &research)] {
        println!(
            "ratios, fathom {name} / python: throughput {:.1}x   cpu per run {:.3}x   \
             resume p50 {:.3}x  p99 {:.3}x   peak rss {:.2}x",
            r.runs_per_s / theirs.runs_per_s,
            r.cpu_ms_per_run / theirs.cpu_ms_per_run,
            r.p50 / theirs.p50,
            r.p99 / theirs.p99,
            r.peak_rss_mib / theirs.peak_rss_mib
        );
    }
}

/// A workflow of deep-research's shape and nothing else, served by Fathom the way the Python
/// peer serves its own (`python_baseline_server.py`): same six step names, the same events
/// of the same sizes, one wait for an `ApproveEvent`. The benchmark runs it in a child
/// process of itself (`--shape-server`), so its CPU and memory are measured apart.
mod shape {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use fathom_engine::{Ctx, Engine, EngineConfig, ErasedWorkflow, Workflow, impl_event};
    use fathom_server::{AppState, Deployment, ServerConfig};
    use fathom_store::SqlStore;
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use super::Shape;

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct Start {
        query: String,
    }
    impl_event!(
        Start,
        "StartEvent",
        qualified = "workflows.events.StartEvent"
    );

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct Progress {
        text: String,
    }
    impl_event!(Progress, "Progress");

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct ApproveEvent {
        approved: bool,
        #[serde(default)]
        feedback: Option<String>,
    }
    impl_event!(
        ApproveEvent,
        "ApproveEvent",
        qualified = "bench.ApproveEvent",
        types = ["HumanResponseEvent"]
    );

    /// Between two steps: which of the four post-gate steps comes next.
    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct After {
        step: usize,
    }
    impl_event!(After, "After");

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct PlanDrafted {}
    impl_event!(PlanDrafted, "PlanDrafted");

    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct ResearchResult {
        research_id: String,
        status: String,
        report_markdown: String,
    }
    impl_event!(
        ResearchResult,
        "ResearchResult",
        qualified = "bench.ResearchResult",
        types = ["StopEvent"]
    );

    /// run_web_research, fetch_parse_sources, synthesize_and_patch, persist_session.
    const POST_STEPS: usize = 4;

    fn workflow(shape: Shape) -> Arc<dyn ErasedWorkflow> {
        let pre_text = Arc::new("p".repeat(shape.pre_bytes));
        let post_text = Arc::new("q".repeat(shape.post_bytes));
        // The post-gate events, spread over the four steps after the gate as the peer does.
        let shares: Arc<Vec<usize>> = Arc::new(
            (0..4)
                .map(|i| shape.post / 4 + usize::from(i < shape.post % 4))
                .collect(),
        );
        let result = Arc::new("r".repeat(shape.result_bytes));
        Workflow::<Value>::new::<Start>("shape")
            .accepts_external::<ApproveEvent>()
            .step("draft_plan", move |ctx: Ctx<Value>, _: Start| {
                let text = pre_text.clone();
                async move {
                    for _ in 0..shape.pre {
                        ctx.write_stream(&Progress {
                            text: text.to_string(),
                        })?;
                    }
                    ctx.send(PlanDrafted {})
                }
            })
            .step(
                "await_approval",
                |ctx: Ctx<Value>, _: PlanDrafted| async move {
                    let decision = ctx.wait_for::<ApproveEvent>().await?;
                    assert!(decision.approved);
                    ctx.send(After { step: 0 })
                },
            )
            // The four post-gate steps are one handler on `After` (the engine routes a step
            // by its event's type), run four times.
            .step("post_gate", move |ctx: Ctx<Value>, ev: After| {
                let (text, shares, result) = (post_text.clone(), shares.clone(), result.clone());
                async move {
                    for _ in 0..shares[ev.step] {
                        ctx.write_stream(&Progress {
                            text: text.to_string(),
                        })?;
                    }
                    if ev.step + 1 < POST_STEPS {
                        ctx.send(After { step: ev.step + 1 })
                    } else {
                        ctx.stop(&ResearchResult {
                            research_id: "baseline".into(),
                            status: "completed".into(),
                            report_markdown: result.to_string(),
                        })
                    }
                }
            })
            .build()
    }

    /// Serves the shaped workflow as deployment `deep-research` on a free loopback port
    /// and prints the address as `fathom serve` does.
    pub async fn serve(shape: Shape, database: &str) {
        let store = Arc::new(
            SqlStore::connect(database)
                .await
                .expect("open the database"),
        );
        let engine = Arc::new(
            Engine::new(
                store.clone(),
                EngineConfig {
                    owner: format!("bench-shape-{}", std::process::id()),
                    ..Default::default()
                },
            )
            .register(workflow(shape)),
        );
        let deployment = Deployment {
            name: "deep-research".into(),
            workflows: BTreeMap::from([("deep-research".to_string(), "shape".to_string())]),
        };
        let config = ServerConfig {
            loopback_only: true,
            ..ServerConfig::new(deployment)
        };
        let state =
            AppState::new(engine.clone(), store.clone(), store.clone(), config).expect("state");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let _worker = tokio::spawn(engine.clone().run_worker(stop_rx));
        let _relay = store.relay_changes(engine.clone());
        println!("fathom shape: serving deployment on http://{addr}");
        fathom_server::serve(
            listener,
            fathom_server::router(state),
            std::future::pending(),
        )
        .await;
    }
}
