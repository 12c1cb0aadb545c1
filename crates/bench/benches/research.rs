//! Research over the Rust book that ships with every rustup toolchain: cold index time, warm
//! run time, CPU and peak memory, each as a ratio to a baseline measured in the same run (the
//! machine is shared and noisy, so absolute figures alone mean little).
//!
//! CPU is user + system time of the child process (`getrusage(RUSAGE_CHILDREN)` before and
//! after it), so it counts every thread: tokio's, SQLite's workers, the blocking pool. A warm
//! run in its own process counts the process's start too (config, database, migrations,
//! opening the index); the run alone, as a server that is already up pays for it, is what
//! `fathom eval` reports per question: its process's CPU (every thread) from the run's start
//! to its end, without eval's own checking of the report afterwards.
//!
//! `cargo bench -p fathom-bench --bench research [-- CORPUS_DIR]`
// Unsafe: getrusage(2), the children's CPU time as the kernel counted it.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// CPU time (user, system) in ms of the children waited for so far.
fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: getrusage writes only into `u`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    assert_eq!(rc, 0, "getrusage failed");
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    (ms(u.ru_utime), ms(u.ru_stime))
}

/// One fathom process's figures.
#[derive(Clone, Copy)]
struct Figures {
    elapsed_ms: f64,
    peak_kib: f64,
    user_ms: f64,
    sys_ms: f64,
}

impl Figures {
    fn cpu_ms(&self) -> f64 {
        self.user_ms + self.sys_ms
    }
}

/// The median by `key` of `n` runs of `f`.
fn median(n: usize, mut f: impl FnMut() -> Figures, key: fn(&Figures) -> f64) -> Figures {
    let mut all: Vec<Figures> = (0..n).map(|_| f()).collect();
    all.sort_by(|a, b| key(a).total_cmp(&key(b)));
    all[n / 2]
}

/// Runs fathom with `--stats`; returns its elapsed time, peak memory and CPU.
fn fathom(work: &Path, args: &[&str]) -> Figures {
    fathom_out(work, args).0
}

/// [`fathom`], with what the command printed.
fn fathom_out(work: &Path, args: &[&str]) -> (Figures, String) {
    // FATHOM_BENCH_BIN measures another build (an earlier one, say) the same way. Taken
    // before the CPU count starts: the first call builds fathom.
    let bin =
        std::env::var_os("FATHOM_BENCH_BIN").map_or_else(fathom_bench::fathom_bin, PathBuf::from);
    let (u0, s0) = children_cpu();
    let out = Command::new(bin)
        .current_dir(work)
        .env_remove("DATABASE_URL")
        .args([
            "--stats",
            "--database-url",
            "bench.db",
            "--index-dir",
            "index",
        ])
        .args(args)
        .output()
        .expect("run fathom");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fathom {args:?} failed: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("stats:"))
        .expect("stats line");
    let field = |name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let (u1, s1) = children_cpu();
    let figures = Figures {
        elapsed_ms: field("elapsed_ms="),
        peak_kib: field("peak_rss_kib="),
        user_ms: u1 - u0,
        sys_ms: s1 - s0,
    };
    (figures, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Questions about the book for `fathom eval`.
const QUESTIONS: &[&str] = &[
    "How does ownership work in Rust?",
    "What is a trait object and when is dynamic dispatch used?",
    "How do lifetimes prevent dangling references?",
    "How are errors propagated with the question mark operator?",
    "What does the borrow checker allow for mutable references?",
];

/// Reading every file the index would read, with nothing else: the floor of a cold index.
fn read_all(dir: &Path) -> (usize, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if [".html", ".htm", ".md", ".txt"]
                .iter()
                .any(|x| name.ends_with(x))
            {
                files += 1;
                bytes += std::fs::read(&p).unwrap().len() as u64;
            }
        }
    }
    (files, bytes)
}

fn main() {
    let corpus = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(fathom_bench::book);
    let c = corpus.to_str().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();

    let t = Instant::now();
    let (files, bytes) = read_all(&corpus);
    let read_ms = t.elapsed().as_secs_f64() * 1000.0;
    let idle = median(3, || fathom(w, &["migrate"]), Figures::cpu_ms);

    let cold = fathom(w, &["index", c]);
    let warm_index = fathom(w, &["index", c]);
    let q = QUESTIONS[0];
    let mut peak = 0f64;
    let warm = median(
        5,
        || {
            let f = fathom(w, &["research", q, "--corpus", c, "--yes", "-o", "r.md"]);
            peak = peak.max(f.peak_kib);
            f
        },
        Figures::cpu_ms,
    );
    // The run alone: the CPU its process spends while the run is in flight (every thread),
    // as `fathom eval` reports per question, without the process's start or eval's checking.
    let all = w.join("all.txt");
    std::fs::write(&all, QUESTIONS.join("\n")).unwrap();
    let mut per_run: Vec<f64> = Vec::new();
    for _ in 0..3 {
        let (_, out) = fathom_out(
            w,
            &[
                "eval",
                "--json",
                "--corpus",
                c,
                "--questions",
                all.to_str().unwrap(),
            ],
        );
        let report: serde_json::Value = serde_json::from_str(&out).expect("eval --json");
        for q in report["questions"].as_array().expect("questions") {
            per_run.push(q["cpu_ms"].as_f64().expect("cpu_ms"));
        }
    }
    per_run.sort_by(f64::total_cmp);
    let alone_ms = per_run[per_run.len() / 2];

    println!(
        "corpus: {} ({files} files, {:.1} MiB)",
        corpus.display(),
        bytes as f64 / 1048576.0
    );
    println!("baseline read all files:       {read_ms:8.1} ms");
    println!(
        "baseline fathom migrate:       {:8.1} ms  {:7.1} MiB peak  CPU {:6.1} ms (user {:.1} + sys {:.1})",
        idle.elapsed_ms,
        idle.peak_kib / 1024.0,
        idle.cpu_ms(),
        idle.user_ms,
        idle.sys_ms
    );
    println!(
        "cold index:                    {:8.1} ms  {:7.1} MiB peak  ({:.1}x reading the files)",
        cold.elapsed_ms,
        cold.peak_kib / 1024.0,
        cold.elapsed_ms / read_ms
    );
    println!(
        "warm index check:              {:8.1} ms  ({:.2}x an idle fathom start)",
        warm_index.elapsed_ms,
        warm_index.elapsed_ms / idle.elapsed_ms
    );
    println!(
        "warm research run (median/5):  {:8.1} ms  {:7.1} MiB peak  ({:.2}x an idle fathom start, {:.1}x its memory)",
        warm.elapsed_ms,
        peak / 1024.0,
        warm.elapsed_ms / idle.elapsed_ms,
        peak / idle.peak_kib
    );
    println!(
        "warm research run, CPU:        {:8.1} ms  (user {:.1} + sys {:.1}; {:.1}x an idle fathom start's CPU)",
        warm.cpu_ms(),
        warm.user_ms,
        warm.sys_ms,
        warm.cpu_ms() / idle.cpu_ms()
    );
    println!(
        "a run alone, CPU (median of {} runs in an open process): {alone_ms:6.1} ms  (min {:.1}, max {:.1}; {:.1}x an idle fathom start's CPU)",
        per_run.len(),
        per_run[0],
        per_run[per_run.len() - 1],
        alone_ms / idle.cpu_ms()
    );
}
