//! Scale at the approval gate: N deep-research runs parked at the gate, each with one SSE
//! reader, against the release `fathom serve`. Prints, each beside a baseline measured in the
//! same run (the machine is shared and noisy, so figures are read against each other):
//!
//! - the server's CPU (utime + stime of all its threads, as % of one core) and resident
//!   memory over a window: idle with nothing; idle with the N runs parked and no reader; idle
//!   with the N runs parked and one SSE reader each;
//! - approval-to-resume (the approval POST sent to the first event after the plan arriving on
//!   the run's SSE stream), p50 and p99 over K approvals one at a time, with no other reader
//!   attached and with the N readers attached;
//! - the memory 1,000 SSE clients on running runs add (20 runs x 50 clients, from their
//!   start to their end), beside 20 runs x 1 client;
//! - warnings and errors in the server's log.
//!
//! `cargo bench -p fathom-bench --bench parked`. Env: FATHOM_BENCH_PARKED=N (default 10000),
//! FATHOM_BENCH_APPROVALS=K (default 50), FATHOM_BENCH_WINDOW_SECS (default 30: longer than
//! the 25 s heartbeat, so every stream's heartbeat falls in the window),
//! FATHOM_BENCH_DATABASE_URL=postgres://... to run on Postgres (a fresh database is created
//! there for the run and dropped after), FATHOM_BENCH_SERVER_ARGS="..." for extra `serve`
//! flags (split on spaces).
// Unsafe: getrlimit/setrlimit, to allow the open files a thousand parked streams need.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fathom_bench::{env_usize, percentile, process};
use futures_util::StreamExt;
use serde_json::{Value, json};
use sqlx::Connection as _;
use tokio::sync::{Notify, mpsc};

const QUESTION: &str = "How does ownership work in Rust?";
/// Runs started at once.
const START_CONCURRENCY: usize = 32;
/// SSE streams opened at once.
const ATTACH_CONCURRENCY: usize = 64;
/// Longest SSE event accepted by the bench's reader (a report is tens of kB).
const MAX_FRAME: usize = 16 << 20;
/// Any single approval, or a run's resumption, takes less than this or counts as lost.
const STEP_DEADLINE: Duration = Duration::from_secs(30);
/// Running-runs figure: runs, and SSE clients on each.
const RUNNING_RUNS: usize = 20;
const CLIENTS_PER_RUNNING_RUN: usize = 50;

struct Server {
    child: process::Started,
    api: String,
    base: String,
    log: PathBuf,
}

impl Server {
    fn status_field_kib(&self, name: &str) -> u64 {
        process::status_field(self.child.id(), name)
    }

    fn rss_mib(&self) -> f64 {
        self.status_field_kib("VmRSS:") as f64 / 1024.0
    }

    fn peak_rss_mib(&self) -> f64 {
        self.status_field_kib("VmHWM:") as f64 / 1024.0
    }

    /// Resets the peak RSS to the current RSS; false if the kernel refused.
    fn reset_peak(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").is_ok()
    }

    /// Resident memory by where it lies: the main heap (brk), other anonymous mappings
    /// (malloc arenas of other threads, thread stacks, large allocations), and the rest
    /// (files), in MiB.
    fn rss_by_kind(&self) -> (f64, f64, f64) {
        let smaps =
            std::fs::read_to_string(format!("/proc/{}/smaps", self.child.id())).unwrap_or_default();
        let (mut heap, mut anon, mut other) = (0u64, 0u64, 0u64);
        let mut kind = 2;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                let fields: Vec<&str> = line.split_whitespace().collect();
                kind = match fields.get(5) {
                    Some(&"[heap]") => 0,
                    None => 1,
                    Some(_) => 2,
                };
            } else if let Some(v) = line.strip_prefix("Rss:") {
                let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                match kind {
                    0 => heap += kib,
                    1 => anon += kib,
                    _ => other += kib,
                }
            }
        }
        (
            heap as f64 / 1024.0,
            anon as f64 / 1024.0,
            other as f64 / 1024.0,
        )
    }

    fn threads(&self) -> u64 {
        process::status_field(self.child.id(), "Threads:")
    }

    /// CPU time used so far (user and system, all threads), in seconds.
    fn cpu_s(&self) -> f64 {
        process::cpu_ms(self.child.id()) / 1000.0
    }
}

/// Raises this process's open-file limit to its hard limit (the children inherit it).
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn start_server(dir: &Path, database: &str, corpus: &Path) -> Server {
    let log = dir.join("server.log");
    let mut cmd = Command::new(fathom_bench::fathom_bin());
    cmd.current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_API_KEY")
        .args(["--database-url", database])
        .args(["serve", "--port", "0", "--corpus"])
        .arg(corpus);
    if let Ok(extra) = std::env::var("FATHOM_BENCH_SERVER_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("server log"))
        .spawn()
        .expect("cannot start fathom serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Bounded: the server prints a few lines before this one, or exits.
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("fathom exited before serving; see {}", log.display()))
            .unwrap();
        if line.contains("serving deployment") {
            let after = line.rsplit(" on ").next().unwrap();
            break after.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server {
        child: process::Started(child),
        api: format!("{url}/deployments/deep-research"),
        base: url,
        log,
    }
}

/// What one SSE reader has seen.
#[derive(Default)]
struct Reader {
    events: AtomicUsize,
    heartbeats: AtomicUsize,
    /// When the first event after the plan arrived.
    resumed: OnceLock<Instant>,
    resumed_note: Notify,
    /// The stream ended (stop event, closed by the server, or failed).
    ended: AtomicBool,
    stopped: AtomicBool,
    ended_note: Notify,
}

impl Reader {
    fn end(&self, stopped: bool) {
        self.stopped.store(stopped, Ordering::SeqCst);
        self.ended.store(true, Ordering::SeqCst);
        self.ended_note.notify_one();
    }
}

/// Reads run `id`'s SSE stream from the start until its stop event or its end; tells
/// `plan_seen` once the plan has arrived.
async fn read_stream(
    http: reqwest::Client,
    api: String,
    id: String,
    reader: Arc<Reader>,
    plan_seen: Option<mpsc::UnboundedSender<()>>,
) {
    let resp = match http
        .get(format!("{api}/events/{id}?after_sequence=-1"))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            eprintln!("stream of {id}: {}", r.status());
            return reader.end(false);
        }
        Err(e) => {
            eprintln!("stream of {id}: {e}");
            return reader.end(false);
        }
    };
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut plan = false;
    let mut plan_seen = plan_seen;
    // Bounded by the run's stream (it ends after the stop event) and the frame limit.
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else {
            return reader.end(false);
        };
        buf.extend_from_slice(&chunk);
        if buf.len() > MAX_FRAME {
            eprintln!("stream of {id}: a frame over {MAX_FRAME} bytes");
            return reader.end(false);
        }
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..end + 2).collect();
            let frame = String::from_utf8_lossy(&frame);
            let data: String = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect::<Vec<_>>()
                .join("\n");
            if data.is_empty() {
                if frame.trim_start().starts_with(':') {
                    reader.heartbeats.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let now = Instant::now();
            reader.events.fetch_add(1, Ordering::Relaxed);
            let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            if plan && reader.resumed.set(now).is_ok() {
                reader.resumed_note.notify_one();
            }
            if !plan
                && v["type"] == "ToolCallResult"
                && v["value"]["tool_name"] == "decompose_query"
            {
                plan = true;
                if let Some(tx) = plan_seen.take() {
                    let _ = tx.send(());
                }
            }
            if v["types"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
            {
                return reader.end(true);
            }
        }
    }
    reader.end(false)
}

/// Opens one reader per run, at most [`ATTACH_CONCURRENCY`] connecting at once, and waits
/// until each has received its run's plan. Returns the readers and their tasks.
async fn attach(
    http: &reqwest::Client,
    api: &str,
    ids: &[String],
    deadline: Duration,
) -> (Vec<Arc<Reader>>, Vec<tokio::task::JoinHandle<()>>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut readers = Vec::with_capacity(ids.len());
    let mut tasks = Vec::with_capacity(ids.len());
    let began = Instant::now();
    let mut seen = 0usize;
    for (i, id) in ids.iter().enumerate() {
        // Keeps at most ATTACH_CONCURRENCY streams between opening and their plan.
        while i - seen >= ATTACH_CONCURRENCY {
            match tokio::time::timeout(deadline.saturating_sub(began.elapsed()), rx.recv()).await {
                Ok(Some(())) => seen += 1,
                _ => panic!("readers: {seen} of {} saw their plan in time", ids.len()),
            }
        }
        let reader = Arc::new(Reader::default());
        readers.push(reader.clone());
        tasks.push(tokio::spawn(read_stream(
            http.clone(),
            api.to_string(),
            id.clone(),
            reader,
            Some(tx.clone()),
        )));
    }
    while seen < ids.len() {
        match tokio::time::timeout(deadline.saturating_sub(began.elapsed()), rx.recv()).await {
            Ok(Some(())) => seen += 1,
            _ => panic!("readers: {seen} of {} saw their plan in time", ids.len()),
        }
    }
    (readers, tasks)
}

fn approve_body() -> Value {
    json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}})
}

/// Approves the run `reader` follows and returns the time from sending the approval to the
/// first event after the plan on its stream; then waits for the run's stream to end, so the
/// next approval meets a quiet server.
async fn approve_and_time(http: &reqwest::Client, api: &str, id: &str, reader: &Reader) -> f64 {
    let sent = Instant::now();
    let resp = http
        .post(format!("{api}/events/{id}"))
        .json(&approve_body())
        .send()
        .await
        .expect("approval POST");
    assert!(
        resp.status().is_success(),
        "approving {id}: {}",
        resp.status()
    );
    if reader.resumed.get().is_none() {
        tokio::time::timeout(STEP_DEADLINE, reader.resumed_note.notified())
            .await
            .unwrap_or_else(|_| panic!("{id} did not resume on its stream"));
    }
    let latency = reader.resumed.get().unwrap().duration_since(sent);
    if !reader.ended.load(Ordering::SeqCst) {
        tokio::time::timeout(STEP_DEADLINE, reader.ended_note.notified())
            .await
            .unwrap_or_else(|_| panic!("{id}'s stream did not end after approval"));
    }
    assert!(
        reader.stopped.load(Ordering::SeqCst),
        "{id}'s stream ended before its stop event"
    );
    latency.as_secs_f64() * 1000.0
}

fn p50_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// Starts `n` runs, [`START_CONCURRENCY`] at a time; returns their ids.
async fn start_runs(http: &reqwest::Client, api: &str, n: usize) -> Vec<String> {
    futures_util::stream::iter(0..n)
        .map(|_| async move {
            let resp = http
                .post(format!("{api}/workflows/deep-research/run-nowait"))
                .json(&json!({"start_event": {"query": QUESTION}}))
                .send()
                .await
                .expect("run-nowait");
            assert!(resp.status().is_success(), "run-nowait: {}", resp.status());
            let v: Value = resp.json().await.expect("run-nowait body");
            v["handler_id"].as_str().expect("handler_id").to_string()
        })
        .buffer_unordered(START_CONCURRENCY)
        .collect()
        .await
}

/// Reads `fathom_runs{status=...}` summed over workflows, and the stream-client gauge.
async fn scrape(http: &reqwest::Client, base: &str) -> (u64, u64, u64) {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    let (mut running, mut waiting, mut clients) = (0.0, 0.0, 0.0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        if name.starts_with("fathom_runs{") && name.contains("status=\"running\"") {
            running += value;
        } else if name.starts_with("fathom_runs{") && name.contains("status=\"waiting\"") {
            waiting += value;
        } else if name.starts_with("fathom_stream_clients") {
            clients += value;
        }
    }
    (running as u64, waiting as u64, clients as u64)
}

/// Waits until `n` runs wait at the gate and none runs, printing progress.
async fn wait_parked(http: &reqwest::Client, base: &str, n: u64, deadline: Duration) {
    let began = Instant::now();
    let mut last_print = Instant::now();
    // Bounded by the deadline.
    loop {
        let (running, waiting, _) = scrape(http, base).await;
        if waiting == n && running == 0 {
            return;
        }
        assert!(
            began.elapsed() < deadline,
            "only {waiting} of {n} runs parked after {:.0?} ({running} running)",
            began.elapsed()
        );
        if last_print.elapsed() > Duration::from_secs(15) {
            println!("  ... {waiting} of {n} parked, {running} running");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

struct Window {
    cpu_pct: f64,
    rss_mib: f64,
    max_rss_mib: f64,
}

/// The server's CPU as % of one core, and its RSS (at the end, and the most seen), over
/// `secs`.
async fn measure(server: &Server, secs: u64) -> Window {
    let cpu0 = server.cpu_s();
    let t0 = Instant::now();
    let mut max_rss: f64 = server.rss_mib();
    let end = t0 + Duration::from_secs(secs);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        max_rss = max_rss.max(server.rss_mib());
    }
    let cpu = server.cpu_s() - cpu0;
    Window {
        cpu_pct: cpu / t0.elapsed().as_secs_f64() * 100.0,
        rss_mib: server.rss_mib(),
        max_rss_mib: max_rss,
    }
}

/// The memory `clients` SSE clients on each of [`RUNNING_RUNS`] running runs add, on a fresh
/// server of its own (memory a previous phase freed but kept would hide it): from before the
/// clients attach (the runs parked at the gate) to the peak while the runs, approved all at
/// once, stream to their end. Returns (peak added MiB, RSS before, streams cut short).
async fn running_clients(
    http: &reqwest::Client,
    sse: &reqwest::Client,
    database: &str,
    corpus: &Path,
    clients: usize,
) -> (f64, f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), database, corpus);
    let runs = start_runs(http, &server.api, RUNNING_RUNS).await;
    wait_parked(http, &server.base, RUNNING_RUNS as u64, STEP_DEADLINE * 4).await;
    let reset = server.reset_peak();
    let before = server.rss_mib();
    let per_client: Vec<String> = runs
        .iter()
        .flat_map(|id| std::iter::repeat_n(id.clone(), clients))
        .collect();
    let (readers, _tasks) = attach(sse, &server.api, &per_client, STEP_DEADLINE * 4).await;
    let approvals = runs.iter().map(|id| {
        let url = format!("{}/events/{id}", server.api);
        async move {
            let resp = http.post(url).json(&approve_body()).send().await;
            assert!(resp.is_ok_and(|r| r.status().is_success()), "approval");
        }
    });
    futures_util::future::join_all(approvals).await;
    for r in &readers {
        if !r.ended.load(Ordering::SeqCst) {
            tokio::time::timeout(STEP_DEADLINE * 4, r.ended_note.notified())
                .await
                .expect("a stream on a running run did not end");
        }
    }
    let cut = readers
        .iter()
        .filter(|r| !r.stopped.load(Ordering::SeqCst))
        .count();
    let peak = if reset {
        server.peak_rss_mib()
    } else {
        f64::NAN
    };
    let (problems, lines) = log_problems(&server.log, 5);
    for l in lines {
        println!("  server log ({problems} problems): {l}");
    }
    (peak - before, before, cut)
}

/// On Postgres, a fresh database for this run beside the one named: (its URL, a guard that
/// drops it).
async fn fresh_postgres(url: &str) -> (String, PgDrop) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "fathom_bench_parked_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut conn = tokio::time::timeout(Duration::from_secs(30), sqlx::PgConnection::connect(url))
        .await
        .expect("connecting to Postgres timed out")
        .expect("connecting to Postgres");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create database");
    let (head, query) = url.split_once('?').map_or((url, ""), |(h, q)| (h, q));
    let base = head.rsplit_once('/').map_or(head, |(b, _)| b);
    let fresh = if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    };
    (
        fresh,
        PgDrop {
            admin: url.to_string(),
            name,
        },
    )
}

struct PgDrop {
    admin: String,
    name: String,
}

impl PgDrop {
    async fn drop_db(self) {
        let Ok(Ok(mut conn)) = tokio::time::timeout(
            Duration::from_secs(30),
            sqlx::PgConnection::connect(&self.admin),
        )
        .await
        else {
            eprintln!("could not drop database {}", self.name);
            return;
        };
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut conn)
        .await;
    }
}

/// Warnings, errors and panics in the server's log (at most `limit` lines), and their count.
fn log_problems(log: &Path, limit: usize) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();
    (
        bad.len(),
        bad.iter().take(limit).map(|l| l.to_string()).collect(),
    )
}

#[tokio::main]
async fn main() {
    let n = env_usize("FATHOM_BENCH_PARKED", 10_000);
    let k = env_usize("FATHOM_BENCH_APPROVALS", 50);
    let window = env_usize("FATHOM_BENCH_WINDOW_SECS", 30) as u64;
    let nofile = raise_nofile();
    assert!(
        nofile as usize > n + 1_000,
        "open-file limit {nofile} is too low for {n} streams"
    );
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let (database, pg) = match std::env::var("FATHOM_BENCH_DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => {
            let (fresh, guard) = fresh_postgres(&url).await;
            (fresh, Some(guard))
        }
        _ => ("fathom.db".to_string(), None),
    };
    let on = if pg.is_some() { "postgres" } else { "sqlite" };
    let server = start_server(tmp.path(), &database, &corpus);
    println!(
        "fathom serve (release) on {on}; {n} parked runs, {k} approvals, {window} s windows; \
         open-file limit {nofile}; server log {}",
        server.log.display()
    );
    // Requests: each has a deadline. Streams: no total deadline, but a read timeout longer
    // than the heartbeat interval (a stream that gets no heartbeat fails).
    let http = fathom_fetch::client_builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    let sse = fathom_fetch::client_builder()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    // 1. Idle with nothing.
    let empty = measure(&server, window).await;
    println!(
        "idle, nothing:             cpu {:>6.2}% of a core   rss {:>6.1} MiB   threads {}",
        empty.cpu_pct,
        empty.rss_mib,
        server.threads()
    );

    // 2. Park N runs, and the extra runs the latency and running-clients figures use.
    let extra = k;
    let total = n + extra;
    let began = Instant::now();
    let cpu0 = server.cpu_s();
    let mut ids = start_runs(&http, &server.api, total).await;
    let started = began.elapsed();
    wait_parked(
        &http,
        &server.base,
        total as u64,
        Duration::from_secs(120) + Duration::from_millis(100) * total as u32,
    )
    .await;
    println!(
        "started {total} runs in {:.1} s ({:.0} runs/s), all parked at the gate after {:.1} s \
         ({:.1} ms of server CPU per run)",
        started.as_secs_f64(),
        total as f64 / started.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        (server.cpu_s() - cpu0) * 1000.0 / total as f64
    );
    let parked = ids.split_off(extra);
    let mut extra_ids = VecDeque::from(ids);

    // 3. Approval-to-resume with no other reader: one reader, on the approved run only.
    let mut alone = Vec::with_capacity(k);
    for _ in 0..k {
        let id = extra_ids.pop_front().unwrap();
        let (readers, _tasks) =
            attach(&sse, &server.api, std::slice::from_ref(&id), STEP_DEADLINE).await;
        alone.push(approve_and_time(&http, &server.api, &id, &readers[0]).await);
    }
    let (alone50, alone99) = p50_p99(alone);

    // 5. Idle with N runs parked and no reader.
    let quiet = measure(&server, window).await;
    println!(
        "idle, {n} parked, no reader: cpu {:>6.2}% of a core   rss {:>6.1} MiB   threads {}",
        quiet.cpu_pct,
        quiet.rss_mib,
        server.threads()
    );

    // 6. One SSE reader on each parked run.
    let began = Instant::now();
    let (readers, tasks) = attach(
        &sse,
        &server.api,
        &parked,
        Duration::from_secs(60) + Duration::from_millis(20) * n as u32,
    )
    .await;
    let attached = began.elapsed();
    let (_, _, clients) = scrape(&http, &server.base).await;
    let hb0: usize = readers
        .iter()
        .map(|r| r.heartbeats.load(Ordering::Relaxed))
        .sum();
    let ev0: usize = readers
        .iter()
        .map(|r| r.events.load(Ordering::Relaxed))
        .sum();
    let watched = measure(&server, window).await;
    let (heap, anon, files) = server.rss_by_kind();
    println!(
        "  rss by kind with readers: main heap {heap:.1} MiB, other anonymous {anon:.1} MiB \
         (arenas, stacks), files {files:.1} MiB"
    );
    let hb = readers
        .iter()
        .map(|r| r.heartbeats.load(Ordering::Relaxed))
        .sum::<usize>()
        - hb0;
    let ev = readers
        .iter()
        .map(|r| r.events.load(Ordering::Relaxed))
        .sum::<usize>()
        - ev0;
    let lost = readers
        .iter()
        .filter(|r| r.ended.load(Ordering::SeqCst))
        .count();
    println!(
        "idle, {n} parked, {n} readers: cpu {:>6.2}% of a core   rss {:>6.1} MiB (most {:.1})   \
         threads {}   ({} attached in {:.1} s; in the window: {hb} heartbeats, {ev} events, \
         {lost} streams ended)",
        watched.cpu_pct,
        watched.rss_mib,
        watched.max_rss_mib,
        server.threads(),
        clients,
        attached.as_secs_f64()
    );

    // 7. Approval-to-resume with every reader attached.
    let mut busy = Vec::with_capacity(k);
    for (id, reader) in parked.iter().zip(&readers).take(k) {
        busy.push(approve_and_time(&http, &server.api, id, reader).await);
    }
    let (busy50, busy99) = p50_p99(busy);
    let lost_after = readers
        .iter()
        .skip(k)
        .filter(|r| r.ended.load(Ordering::SeqCst))
        .count();

    println!();
    println!("== figures ({on}, {n} parked runs) ==");
    println!(
        "{n} readers add {:.2}% of a core (baseline: {:.2}% with the runs parked and no reader, \
         {:.2}% with nothing)",
        watched.cpu_pct - quiet.cpu_pct,
        quiet.cpu_pct,
        empty.cpu_pct
    );
    println!(
        "rss with {n} parked runs and readers: {:.1} MiB (baseline {:.1} MiB parked without \
         readers, {:.1} MiB with nothing; readers +{:.1} MiB, {:.2} MiB per 1,000 readers)",
        watched.rss_mib,
        quiet.rss_mib,
        empty.rss_mib,
        watched.rss_mib - quiet.rss_mib,
        (watched.rss_mib - quiet.rss_mib) * 1000.0 / n as f64
    );
    println!(
        "approval to resume over {k} approvals: with {n} readers p50 {busy50:.2} ms p99 \
         {busy99:.2} ms; baseline with no other reader p50 {alone50:.2} ms p99 {alone99:.2} ms \
         (ratio p50 {:.2}x, p99 {:.2}x)",
        busy50 / alone50,
        busy99 / alone99
    );
    println!(
        "parked streams that ended without being approved: {lost_after} of {}",
        n - k
    );

    drop(readers);
    for t in tasks {
        t.abort();
    }
    let log = server.log.clone();
    drop(server);
    let (count, lines) = log_problems(&log, 10);
    println!("server log: {count} warning/error lines");
    for l in lines {
        println!("  {l}");
    }
    if let Some(pg) = pg {
        pg.drop_db().await;
    }

    // 8. Memory SSE clients on running runs add, each on a fresh server (and database).
    for clients in [CLIENTS_PER_RUNNING_RUN, 1] {
        let admin = std::env::var("FATHOM_BENCH_DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres"));
        let (database, pg) = match admin {
            Some(url) => {
                let (fresh, guard) = fresh_postgres(&url).await;
                (fresh, Some(guard))
            }
            None => ("fathom.db".to_string(), None),
        };
        let (added, before, cut) = running_clients(&http, &sse, &database, &corpus, clients).await;
        println!(
            "{} SSE clients on {RUNNING_RUNS} running runs add {added:.1} MiB at peak \
             (rss before {before:.1} MiB, a fresh server with the runs parked; streams cut \
             short {cut})",
            clients * RUNNING_RUNS
        );
        if let Some(pg) = pg {
            pg.drop_db().await;
        }
    }
}
