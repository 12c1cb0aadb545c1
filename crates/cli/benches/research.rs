//! Research over the Rust book that ships with every rustup toolchain: cold index time, warm
//! run time and peak memory, each as a ratio to a baseline measured in the same run (the
//! machine is shared and noisy, so absolute figures alone mean little).
//!
//! `cargo bench -p fathom-cli --bench research [-- CORPUS_DIR]`

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Runs fathom with `--stats`; returns (elapsed ms, peak RSS KiB).
fn fathom(work: &Path, args: &[&str]) -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_fathom"))
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
    (field("elapsed_ms="), field("peak_rss_kib="))
}

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
        .unwrap_or_else(common::book);
    let c = corpus.to_str().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();

    let t = Instant::now();
    let (files, bytes) = read_all(&corpus);
    let read_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (idle_ms, idle_kib) = fathom(w, &["migrate"]);

    let (cold_ms, cold_kib) = fathom(w, &["index", c]);
    let (warm_index_ms, _) = fathom(w, &["index", c]);
    let q = "How does ownership work in Rust?";
    let mut runs = Vec::new();
    let mut peak = 0f64;
    for _ in 0..3 {
        let (ms, kib) = fathom(w, &["research", q, "--corpus", c, "--yes", "-o", "r.md"]);
        runs.push(ms);
        peak = peak.max(kib);
    }
    runs.sort_by(f64::total_cmp);
    let warm_ms = runs[1];

    println!(
        "corpus: {} ({files} files, {:.1} MiB)",
        corpus.display(),
        bytes as f64 / 1048576.0
    );
    println!("baseline read all files:       {read_ms:8.1} ms");
    println!(
        "baseline fathom migrate:       {idle_ms:8.1} ms  {:7.1} MiB peak",
        idle_kib / 1024.0
    );
    println!(
        "cold index:                    {cold_ms:8.1} ms  {:7.1} MiB peak  ({:.1}x reading the files)",
        cold_kib / 1024.0,
        cold_ms / read_ms
    );
    println!(
        "warm index check:              {warm_index_ms:8.1} ms  ({:.2}x an idle fathom start)",
        warm_index_ms / idle_ms
    );
    println!(
        "warm research run (median/3):  {warm_ms:8.1} ms  {:7.1} MiB peak  ({:.2}x an idle fathom start, {:.1}x its memory)",
        peak / 1024.0,
        warm_ms / idle_ms,
        peak / idle_kib
    );
}
