//! Parse and fetch throughput, each beside a baseline measured in the same run (the machine
//! is shared and noisy, so only ratios carry over):
//! - HTML: the Rust book's pages through the Readability parser, against decoding the same
//!   bytes and counting their words (the floor any parser pays).
//! - PDF: the book's text set as PDFs, read in the isolated worker, against the same
//!   extraction in this process (the price of isolation).
//! - Fetch plus parse of 100 loopback pages through the SSRF-safe fetcher, 8 at a time,
//!   against one at a time; and against fetching alone.
//!
//! `cargo bench -p fathom-bench --bench parse`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fathom_fetch::{FetchConfig, SafeFetcher};
use fathom_parse::pdf::{PdfLimits, PdfSandbox, extract};
use fathom_parse::{ContentParser, DocKind, decode_text, parse_content};
use fathom_testkit::fixtures::sample_pdf;

/// The book's chapter pages (the all-in-one print page left out), largest first.
fn pages(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (install the rust-docs component)", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .filter(|p| !p.ends_with("print.html"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort_by_key(|(_, b)| std::cmp::Reverse(b.len()));
    out
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1_000_000.0
}

/// Best of `rounds` timings of `f`, in seconds: the least disturbed run.
fn best_of(rounds: usize, mut f: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn html(pages: &[(String, Vec<u8>)]) {
    let bytes: usize = pages.iter().map(|(_, b)| b.len()).sum();
    let floor = best_of(3, || {
        let words: usize = pages
            .iter()
            .map(|(_, b)| {
                decode_text(b, DocKind::Html, None)
                    .unwrap()
                    .split_whitespace()
                    .count()
            })
            .sum();
        assert!(words > 0);
    });
    let mut words = 0;
    let parse = best_of(3, || {
        words = pages
            .iter()
            .map(|(name, b)| {
                parse_content(&format!("https://book.test/{name}"), DocKind::Html, b)
                    .map(|d| d.words)
                    .unwrap_or(0)
            })
            .sum();
    });
    println!(
        "html  {} pages, {:.1} MB -> {words} words of main content: {:.1} MB/s parsed, {:.0} MB/s decode+count baseline; parse costs {:.1}x the baseline",
        pages.len(),
        mb(bytes),
        mb(bytes) / parse,
        mb(bytes) / floor,
        parse / floor
    );
}

/// The book's text as PDFs: each chapter's words, 60 lines of 90 characters to a page.
fn book_pdfs(pages: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    pages
        .iter()
        .take(40)
        .map(|(name, b)| {
            let doc = parse_content(&format!("https://book.test/{name}"), DocKind::Html, b)
                .expect("book page");
            let text: String = doc
                .blocks
                .iter()
                .map(|b| b.text.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let mut lines = Vec::new();
            let mut line = String::new();
            for w in text.split_whitespace() {
                if line.len() + w.len() > 90 {
                    lines.push(std::mem::take(&mut line));
                }
                line.push_str(w);
                line.push(' ');
            }
            lines.push(line);
            let pdf_pages: Vec<String> = lines.chunks(60).map(|c| c.join("\n")).collect();
            let refs: Vec<&str> = pdf_pages.iter().map(String::as_str).collect();
            sample_pdf(&refs, name, "The Rust Project")
        })
        .collect()
}

fn pdf(rt: &tokio::runtime::Runtime, pdfs: &[Vec<u8>]) {
    let bytes: usize = pdfs.iter().map(Vec::len).sum();
    let page_count: u32 = pdfs
        .iter()
        .map(|p| extract(p, 10_000).unwrap().page_count)
        .sum();
    let in_process = best_of(3, || {
        for p in pdfs {
            extract(p, 10_000).unwrap();
        }
    });
    let sandbox = PdfSandbox {
        program: fathom_bench::fathom_bin(),
        args: vec!["pdf-worker".into()],
        limits: PdfLimits::default(),
    };
    let isolated = best_of(3, || {
        rt.block_on(async {
            for p in pdfs {
                sandbox.read(p).await.unwrap();
            }
        })
    });
    println!(
        "pdf   {} files, {page_count} pages, {:.1} MB: {:.1} MB/s in the isolated worker ({:.0} pages/s), {:.1} MB/s in-process baseline; isolation costs {:.2}x",
        pdfs.len(),
        mb(bytes),
        mb(bytes) / isolated,
        page_count as f64 / isolated,
        mb(bytes) / in_process,
        isolated / in_process
    );
}

fn fetch_and_parse(rt: &tokio::runtime::Runtime, pages: &[(String, Vec<u8>)]) {
    let served: Vec<(String, Vec<u8>)> = pages.iter().cycle().take(100).cloned().collect();
    let bytes: usize = served.iter().map(|(_, b)| b.len()).sum();
    let origin = rt.block_on(async {
        let mut app = axum::Router::new();
        for (i, (_, body)) in served.iter().enumerate() {
            let body = body.clone();
            app = app.route(
                &format!("/p/{i}"),
                axum::routing::get(move || {
                    let body = body.clone();
                    async move { ([("content-type", "text/html; charset=utf-8")], body) }
                }),
            );
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr.to_string()
    });
    let fetcher = Arc::new(SafeFetcher::new(FetchConfig {
        trusted_origins: vec![origin.clone()],
        per_host_interval: Duration::ZERO,
        ..Default::default()
    }));
    let parser = ContentParser::default();
    let run = |concurrency: usize, parse: bool| {
        best_of(3, || {
            rt.block_on(async {
                let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
                let mut set = tokio::task::JoinSet::new();
                for i in 0..served.len() {
                    let (fetcher, parser, sem) = (fetcher.clone(), parser.clone(), sem.clone());
                    let url = format!("http://{origin}/p/{i}");
                    set.spawn(async move {
                        let _permit = sem.acquire().await.unwrap();
                        let f = fetcher.fetch(&url).await.unwrap();
                        if parse {
                            parser
                                .parse(&f.final_url, DocKind::Html, f.bytes, f.charset)
                                .await
                                .unwrap();
                        }
                    });
                }
                while let Some(r) = set.join_next().await {
                    r.unwrap();
                }
            })
        })
    };
    let serial = run(1, true);
    let parallel = run(8, true);
    let fetch_only = run(8, false);
    println!(
        "fetch 100 loopback pages, {:.1} MB: fetch+parse {:.0} pages/s at 8 concurrent vs {:.0} pages/s one at a time ({:.2}x); fetch alone {:.0} pages/s (parse is {:.0}% of fetch+parse time)",
        mb(bytes),
        100.0 / parallel,
        100.0 / serial,
        serial / parallel,
        100.0 / fetch_only,
        100.0 * (1.0 - fetch_only / parallel).max(0.0)
    );
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pages = pages(&fathom_bench::book());
    println!(
        "cores: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    html(&pages);
    pdf(&rt, &book_pdfs(&pages));
    fetch_and_parse(&rt, &pages);
}
