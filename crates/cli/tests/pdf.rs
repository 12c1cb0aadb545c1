//! PDFs, read page by page in the isolated worker: from the web (`fathom fetch`) and from a
//! corpus (`fathom index`, `fathom research`), with hostile files (a decompression bomb, a
//! file that takes too long, one that makes the parser panic, a truncated one) contained:
//! each is refused with its reason and the rest of the work goes on.

use std::path::Path;
use std::process::{Command, Output};

use axum::Router;
use axum::http::header;
use axum::routing::get;
use fathom_testkit::fixtures::{PageContent, pdf_document, sample_pdf};

/// Time and memory limits small enough for the hostile files to hit them.
const TIMEOUT_S: u64 = 1;
const MEMORY_MIB: u64 = 128;

fn good_pdf() -> Vec<u8> {
    sample_pdf(
        &[
            "Notes on Rust\nA short study of references.",
            "Borrowing lets code use a value without taking ownership of it.\n\
             The borrow checker allows many shared references or exactly one mutable reference at a time.",
            "Lifetimes make sure that a reference never outlives the value it points to.",
        ],
        "Notes on Rust",
        "Ferris Crab",
    )
}

/// Inflates from a few hundred KiB to 256 MiB: more than the worker may hold.
fn bomb_pdf() -> Vec<u8> {
    pdf_document(
        &[PageContent::Deflated(vec![b' '; 256 * 1024 * 1024])],
        "Bomb",
        "x",
    )
}

/// Small, but its pages hold millions of drawing operations: seconds of parsing.
fn slow_pdf() -> Vec<u8> {
    let ops = format!(
        "BT /F1 11 Tf 72 720 Td {} ET",
        "() Tj 0 0 Td ".repeat(40_000)
    );
    let pages: Vec<PageContent> = (0..80)
        .map(|_| PageContent::Deflated(ops.clone().into_bytes()))
        .collect();
    pdf_document(&pages, "Slow", "x")
}

/// A font encoding pdf-extract does not know: it panics (on purpose) on such input. Same
/// length as the real name, so the cross-reference offsets stay right.
fn panicking_pdf() -> Vec<u8> {
    let mut pdf = sample_pdf(&["Some words on a page."], "Odd font", "x");
    let (real, odd) = (b"/WinAnsiEncoding", b"/BogusAnEncoding");
    let at = pdf.windows(real.len()).position(|w| w == real).unwrap();
    pdf[at..at + real.len()].copy_from_slice(odd);
    pdf
}

fn config_with_limits(dir: &Path) -> std::path::PathBuf {
    let mut json: serde_json::Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    json["parse"]["pdf_timeout_seconds"] = TIMEOUT_S.into();
    json["parse"]["pdf_memory_mib"] = MEMORY_MIB.into();
    let path = dir.join("config.json");
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

fn fathom(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fathom"))
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env("FATHOM_CONFIG", config_with_limits(dir))
        .args(args)
        .output()
        .expect("run fathom")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdfs_from_the_web_are_read_by_page_and_hostile_ones_are_refused() {
    let serve = |bytes: Vec<u8>| {
        get(move || {
            let bytes = bytes.clone();
            async move { ([(header::CONTENT_TYPE, "application/pdf")], bytes) }
        })
    };
    let app = Router::new()
        .route("/paper.pdf", serve(good_pdf()))
        .route("/bomb.pdf", serve(bomb_pdf()))
        .route("/slow.pdf", serve(slow_pdf()))
        .route("/odd.pdf", serve(panicking_pdf()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let fetch = |path: &str| {
        let (dir, url) = (dir.path().to_path_buf(), format!("{base}{path}"));
        tokio::task::spawn_blocking(move || {
            fathom(&dir, &["fetch", &url, "--allow-private-network", "--json"])
        })
    };

    let good = fetch("/paper.pdf").await.unwrap();
    assert!(good.status.success(), "{}", text(&good.stderr));
    let v: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(v["content_type"], "application/pdf");
    assert_eq!(v["title"], "Notes on Rust");
    assert_eq!(v["byline"], "Ferris Crab");
    assert_eq!(v["published"], "2024-03-15");
    assert_eq!(v["pages"], 3);
    let md = v["markdown"].as_str().unwrap();
    let (p2, p3) = (md.find("## Page 2").unwrap(), md.find("## Page 3").unwrap());
    let borrow = md.find("exactly one mutable reference").unwrap();
    assert!(p2 < borrow && borrow < p3, "{md}");

    for (path, reason) in [
        ("/bomb.pdf", format!("needed more than {MEMORY_MIB} MiB")),
        ("/slow.pdf", format!("took longer than {TIMEOUT_S} s")),
        (
            "/odd.pdf",
            "the PDF parser gave up: unexpected encoding".to_string(),
        ),
    ] {
        let out = fetch(path).await.unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{path}: {}", text(&out.stdout));
        assert!(err.contains(path) && err.contains(&reason), "{path}: {err}");
        assert!(!err.contains("panicked"), "{path}: {err}");
    }
}

#[test]
fn a_corpus_with_pdfs_is_indexed_once_and_cited_by_page() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("notes.pdf"), good_pdf()).unwrap();
    std::fs::write(corpus.join("bomb.pdf"), bomb_pdf()).unwrap();
    std::fs::write(corpus.join("slow.pdf"), slow_pdf()).unwrap();
    std::fs::write(corpus.join("odd.pdf"), panicking_pdf()).unwrap();
    let good = good_pdf();
    std::fs::write(corpus.join("cut.pdf"), &good[..good.len() / 2]).unwrap();
    std::fs::write(
        corpus.join("threads.md"),
        "# Threads\n\nThreads run code in parallel, and channels move values between them.\n",
    )
    .unwrap();
    let c = corpus.to_str().unwrap();

    let first = fathom(tmp.path(), &["index", c]);
    let err = text(&first.stderr);
    assert!(first.status.success(), "{err}");
    assert!(
        err.contains("corpus: 2 documents (2 new, 0 changed, 0 removed)"),
        "{err}"
    );
    assert!(err.contains("4 files skipped"), "{err}");
    for (file, reason) in [
        ("bomb.pdf", format!("needed more than {MEMORY_MIB} MiB")),
        ("slow.pdf", format!("took longer than {TIMEOUT_S} s")),
        ("odd.pdf", "unexpected encoding".to_string()),
        ("cut.pdf", "unreadable PDF".to_string()),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("skipped {file}: ")) && l.contains(&reason)),
            "{file}: {err}"
        );
    }
    // Unchanged bad files are remembered, not parsed again (they would count as new).
    let second = fathom(tmp.path(), &["index", c]);
    let err = text(&second.stderr);
    assert!(
        err.contains("corpus: 2 documents (0 new, 0 changed, 0 removed)"),
        "{err}"
    );
    assert!(err.contains("4 files skipped"), "{err}");

    let report = tmp.path().join("report.md");
    let out = fathom(
        tmp.path(),
        &[
            "research",
            "How does borrowing work with references?",
            "--corpus",
            c,
            "--yes",
            "--output",
            report.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(
        md.contains("exactly one mutable reference at a time"),
        "{md}"
    );
    let notes = format!(
        "file://{}",
        corpus.canonicalize().unwrap().join("notes.pdf").display()
    );
    assert!(
        md.contains(&format!("Notes on Rust, p. 2 — `{notes}#page=2`")),
        "{md}"
    );
}
