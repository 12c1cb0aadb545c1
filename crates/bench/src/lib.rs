//! What the benchmarks share: the `fathom` binary they run, the corpus they read, what /proc
//! says of a process they started ([`process`]), and the small sums they report with.
//!
//! The benchmarks (`benches/`) measure Fathom from outside, as a user runs it: research,
//! serve and parked start the `fathom` binary, parse starts it as its PDF worker.

pub mod process;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The Rust book that ships with every rustup toolchain (the `rust-docs` component).
pub fn book() -> PathBuf {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("share/doc/rust/html/book")
}

/// This workspace's `fathom` binary, built once per benchmark process by the cargo that runs
/// the benchmark, with the profile `cargo bench` builds with (`dev` in a debug build of the
/// benchmark): the binary a benchmark inside fathom-cli got as `CARGO_BIN_EXE_fathom`, which
/// cargo sets for a package's own binaries only. Its build's output goes to stderr.
pub fn fathom_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_fathom).clone()
}

fn build_fathom() -> PathBuf {
    // `cargo bench` sets CARGO for what it runs; the cargo that built this is the fallback.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "bench"
    };
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/Cargo.toml");
    let out = Command::new(&cargo)
        .args(["build", "--profile", profile, "--bin", "fathom"])
        .args(["--manifest-path", manifest])
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", cargo.to_string_lossy()));
    assert!(
        out.status.success(),
        "building fathom failed (`cargo build --profile {profile} -p fathom-cli`); the research \
         and serve benchmarks run another build given as FATHOM_BENCH_BIN=PATH"
    );
    // The compiler-artifact message of the binary names where it was written.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "fathom")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo built fathom but named no executable")
}

/// A positive whole number from the environment variable `name`, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// The value at fraction `p` (0 to 1) of `sorted`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
