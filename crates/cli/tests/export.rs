//! `fathom export` as a person runs it: an offline research over a small corpus, then its
//! report written as PDF, DOCX and HTML and opened again; the same export asked for twice,
//! here and from a `fathom serve` on the same database, made once; bad requests refused
//! with a reason and a failing exit status.

mod common;
use common::ok;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fathom_store::{Dialect, SqlStore};

const QUESTION: &str = "How does ownership work in Rust?";

struct Env {
    _tmp: tempfile::TempDir,
    work: PathBuf,
    corpus: PathBuf,
    db: String,
    _keep: Option<tempfile::TempDir>,
}

async fn env(dialect: Dialect) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let (db, keep) = fathom_testkit::db::fresh_url(dialect).await;
    Env {
        _tmp: tmp,
        work,
        corpus,
        db,
        _keep: keep,
    }
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fathom"));
        c.current_dir(&self.work)
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CONFIG")
            .arg("--database-url")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run fathom")
    }

    /// Researches QUESTION offline; returns the session id and the report's Markdown.
    fn research(&self, approve: bool) -> (String, String) {
        let mut args = vec![
            "research",
            QUESTION,
            "--corpus",
            self.corpus.to_str().unwrap(),
        ];
        if approve {
            args.push("--yes");
        }
        let out = ok(&self.run(&args));
        let id = out
            .lines()
            .find_map(|l| l.strip_prefix("session "))
            .expect("session line")
            .trim()
            .to_string();
        let report = std::fs::read_to_string(self.work.join(format!(".fathom/reports/{id}.md")))
            .unwrap_or_default();
        (id, report)
    }
}

/// Fails with what fathom said unless it failed with `message`.
fn refused(out: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(message),
        "expected a failure saying '{message}', got {}: {stderr}",
        out.status
    );
}

/// `pdftotext`'s text of `pdf`. `scripts/test.sh` installs poppler-utils; without it this
/// fails and says so rather than skipping.
fn pdftotext(pdf: &[u8]) -> String {
    let mut child = Command::new("pdftotext")
        .args(["-enc", "UTF-8", "-", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "pdftotext is needed to read the exported PDF back ({e}); install poppler-utils \
                 or run scripts/test.sh, which does"
            )
        });
    let mut stdin = child.stdin.take().unwrap();
    let bytes = pdf.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "pdftotext refused the exported PDF");
    String::from_utf8(out.stdout).unwrap()
}

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The report's headings (without their `#`s and escapes) and citation markers.
fn headings_and_citations(report: &str) -> (Vec<String>, Vec<String>) {
    let headings: Vec<String> = report
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().replace('\\', ""))
        .collect();
    let mut citations: Vec<String> = Vec::new();
    for n in 1..=200 {
        let marker = format!("[{n}]");
        if report.contains(&marker) {
            citations.push(marker);
        }
    }
    (headings, citations)
}

/// The file_id `fathom export` reported.
fn file_id_of(stdout: &str) -> String {
    stdout
        .split("file_id ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .expect("file_id in the output")
        .to_string()
}

async fn artifacts_of_type(db: &str, content_type: &str) -> i64 {
    let store = SqlStore::connect(db).await.unwrap();
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM artifacts WHERE content_type = '{content_type}'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// A running `fathom serve` on the environment's database, killed on drop.
struct Served {
    child: Child,
    root: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(env: &Env) -> Served {
    let mut child = env
        .cmd(&[
            "serve",
            "--port",
            "0",
            "--corpus",
            env.corpus.to_str().unwrap(),
        ])
        .env_remove("FATHOM_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fathom serve");
    let (tx, rx) = mpsc::channel();
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
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    let root = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("serving deployment") => {
                let at = l.rsplit(" on ").next().unwrap();
                break at.split_whitespace().next().unwrap().to_string();
            }
            Ok(l) => seen.push(l),
            Err(_) => panic!("fathom serve did not start: {seen:#?}"),
        }
    };
    Served { child, root }
}

async fn research_then_export(dialect: Dialect) {
    let env = env(dialect).await;
    let (id, report) = env.research(true);
    let (headings, citations) = headings_and_citations(&report);
    assert!(
        headings.len() >= 3 && headings.last().map(String::as_str) == Some("Sources"),
        "{report}"
    );
    assert!(!citations.is_empty(), "{report}");

    // PDF: every heading, citation and source of the report in the text read back.
    let out = ok(&env.run(&["export", &id, "--format", "pdf", "-o", "out/report.pdf"]));
    assert!(out.contains("made now"), "{out}");
    let pdf_id = file_id_of(&out);
    let pdf = std::fs::read(env.work.join("out/report.pdf")).unwrap();
    let text = squeeze(&pdftotext(&pdf));
    for want in headings.iter().chain(&citations) {
        assert!(
            text.contains(want.as_str()),
            "PDF: '{want}' missing from {text}"
        );
    }
    let sources = report.split("## Sources").nth(1).unwrap();
    for line in sources.lines().filter(|l| !l.trim().is_empty()) {
        // `1. Title — `file:///…``: the number, title and address, as the report lists them.
        let (title, url) = line.split_once(" — ").unwrap();
        let url = url.trim_matches('`');
        let title = title.replace('\\', "");
        assert!(
            text.contains(&title),
            "PDF: source '{title}' missing from {text}"
        );
        let tail = &url[url.len().saturating_sub(20)..];
        assert!(
            text.contains(tail),
            "PDF: address '{url}' missing from {text}"
        );
    }

    // Again: the stored export, not a new one.
    let again = ok(&env.run(&["export", &id, "--format", "pdf", "-o", "again.pdf"]));
    assert!(again.contains("stored earlier"), "{again}");
    assert_eq!(file_id_of(&again), pdf_id);
    assert_eq!(std::fs::read(env.work.join("again.pdf")).unwrap(), pdf);
    assert_eq!(artifacts_of_type(&env.db, "application/pdf").await, 1);

    // DOCX, named by its extension: our reader finds the headings as headings.
    let out = ok(&env.run(&["export", &id, "-o", "report.docx"]));
    assert!(out.contains("(docx,"), "{out}");
    let docx = std::fs::read(env.work.join("report.docx")).unwrap();
    let md = fathom_parse::docx::docx_to_markdown(&docx)
        .unwrap()
        .markdown;
    let md_headings: Vec<String> = md
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().replace('\\', ""))
        .collect();
    assert_eq!(md_headings, headings, "{md}");
    let md = md.replace('\\', "");
    for c in &citations {
        assert!(md.contains(c.as_str()), "DOCX: {c} missing from {md}");
    }

    // HTML, to the default path and to standard output: the same page.
    let out = ok(&env.run(&["export", &id, "--format", "html"]));
    let html_path = env.work.join(format!(".fathom/exports/{id}.html"));
    assert!(out.contains(&format!(".fathom/exports/{id}.html")), "{out}");
    let html = std::fs::read(&html_path).unwrap();
    let piped = env.run(&["export", &id, "--format", "html", "-o", "-"]);
    assert_eq!(ok(&piped).as_bytes(), html.as_slice());
    assert!(String::from_utf8_lossy(&piped.stderr).contains("stored earlier"));
    let page = String::from_utf8(html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for c in &citations {
        let n = &c[1..c.len() - 1];
        assert!(
            page.contains(&format!("href=\"#source-{n}\"")),
            "{c} is not a link"
        );
        assert!(
            page.contains(&format!("<li id=\"source-{n}\">")),
            "source {n} missing"
        );
    }

    // Over HTTP, a server on the same database hands out the same stored files.
    let served = serve(&env);
    let http = fathom_fetch::client_builder().build().unwrap();
    let resp = http
        .get(format!(
            "{}/deployments/deep-research/sessions/{id}/export?format=pdf",
            served.root
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-fathom-file-id"].to_str().unwrap(), pdf_id);
    assert_eq!(resp.bytes().await.unwrap().to_vec(), pdf);
    let resp = http
        .get(format!("{}/sessions/{id}/export?format=tex", served.root))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("html, pdf, docx"),
        "{body}"
    );
    let resp = http
        .get(format!(
            "{}/sessions/unknown-id/export?format=pdf",
            served.root
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["detail"], "research session 'unknown-id' not found");
    assert_eq!(artifacts_of_type(&env.db, "application/pdf").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_then_export_sqlite() {
    research_then_export(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_then_export_postgres() {
    research_then_export(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_exports_fail_with_a_reason_and_write_nothing() {
    let env = env(Dialect::Sqlite).await;
    // Without --yes and without a terminal, the session waits at its gate.
    let (waiting, _) = env.research(false);
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "export",
                "no-such-session",
                "--format",
                "pdf",
                "-o",
                "x.pdf",
            ],
            "research session 'no-such-session' not found",
        ),
        (
            &["export", &waiting, "--format", "pdf", "-o", "x.pdf"],
            "is not finished (status: awaiting_approval)",
        ),
        (
            &["export", &waiting, "--format", "odt", "-o", "x.pdf"],
            "unknown export format 'odt': use one of html, pdf, docx",
        ),
        (
            &["export", &waiting],
            "--format is required: one of html, pdf, docx",
        ),
        (
            &["export", &waiting, "-o", "notes.txt"],
            "'notes.txt' does not end in one: pass --format (one of html, pdf, docx)",
        ),
    ];
    for (args, message) in cases {
        refused(&env.run(args), message);
    }
    assert!(!Path::new(&env.work.join("x.pdf")).exists());
    assert!(!env.work.join(".fathom/exports").exists());
    // The waiting session is as it was: approving it still finishes the research.
    let out = ok(&env.run(&["resume", &waiting, "--yes"]));
    assert!(out.contains("report "), "{out}");
    ok(&env.run(&["export", &waiting, "--format", "pdf", "-o", "x.pdf"]));
}
