//! What the CLI end-to-end tests share.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `cmd` with the crash point `crash_at` (`step:n`); once the process says it halted
/// there, kills it with SIGKILL and returns the session id it printed before.
#[allow(dead_code)]
pub fn run_until_crash(mut cmd: Command, crash_at: &str) -> String {
    let mut child = cmd
        .env("FATHOM_CRASH_AT", crash_at)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fathom");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(l);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut session = None;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!("no crash point {crash_at} within 120 s; output: {seen:#?}")
        });
        if let Some(id) = line.strip_prefix("session ") {
            session = Some(id.trim().to_string());
        }
        if line.contains("crash point") {
            break;
        }
        seen.push(line);
    }
    child.kill().expect("SIGKILL fathom");
    child.wait().unwrap();
    session.expect("session id printed before the crash point")
}

/// `fathom <args>` on the database `db`, in `dir`, with `stdin` as its input (whatever
/// DATABASE_URL the test process has is not passed on).
#[allow(dead_code)]
pub fn fathom_on(db: &str, dir: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_fathom"))
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .args(["--database-url", db])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fathom");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The standard output of a fathom run that must have succeeded; fails with all it said
/// otherwise.
#[allow(dead_code)] // not every test binary uses every helper
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "fathom failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The session id a `fathom research` run printed (`session ID`).
#[allow(dead_code)]
pub fn session_of(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .expect("session line")
        .trim()
        .to_string()
}

/// Asserts the run failed with one line of error that contains `needle`.
#[allow(dead_code)]
pub fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one-line error, got: {err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
}
