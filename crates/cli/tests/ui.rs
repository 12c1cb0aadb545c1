//! The web UI in a real browser: headless chromium (Debian's, driven over WebDriver by
//! chromedriver) against a real `fathom serve` on loopback with a corpus written here. Each
//! test drives what a person does, and fails when the UI does not let them do it:
//! - start with settings from the schema (a bad value refused with the server's message), edit
//!   a query, approve, watch the run (pages read, the report growing before the run ends, a
//!   source that could not be read), click a citation, reload, reopen from the sessions list;
//! - at 390 px, with the keyboard: answer clarifying questions, reject with feedback, see the
//!   new plan, cancel;
//! - with an API key: asked once, kept across a reload and a server restart in the middle of a
//!   run, which the page reattaches to;
//! - a saved report with a table, nested lists, an escaped bracket, code and hostile input, as
//!   the server renders it, each citation leading to its source.
//!
//! With `FATHOM_SCREENSHOTS=DIR` the tests also save the README's screenshots there
//! (`scripts/screenshots.sh`).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fathom_testkit::webdriver::Browser;
use serde_json::{Value, json};

const QUESTION: &str = "How does ownership work in Rust?";

struct Env {
    tmp: tempfile::TempDir,
    corpus: PathBuf,
    db: String,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let db = format!("sqlite://{}", tmp.path().join("fathom.db").display());
    Env { tmp, corpus, db }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `fathom serve`, killed (SIGKILL) on drop.
struct Served {
    child: Child,
    root: String,
    lines: mpsc::Receiver<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(env: &Env, port: u16, api_key: Option<&str>) -> Served {
        Served::start_with(env, port, api_key, &[])
    }

    /// With more environment variables (a model server, say).
    fn start_with(env: &Env, port: u16, api_key: Option<&str>, vars: &[(&str, &str)]) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fathom"));
        cmd.current_dir(env.tmp.path())
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_API_KEY")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CORS_ORIGINS")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_BASE_URL")
            .envs(vars.iter().copied())
            .args(["--database-url", &env.db, "serve", "--port"])
            .arg(port.to_string())
            .arg("--corpus")
            .arg(&env.corpus)
            .args(["--worker-id", "ui-test"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(k) = api_key {
            cmd.args(["--api-key", k]);
        }
        let mut child = cmd.spawn().expect("spawn fathom serve");
        let (tx, lines) = mpsc::channel();
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
        let served = Served {
            child,
            root: format!("http://127.0.0.1:{port}"),
            lines,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match served.lines.recv_timeout(left) {
                Ok(l) if l.contains("serving deployment") => break,
                Ok(l) => seen.push(l),
                Err(_) => panic!("fathom serve did not start; output: {seen:#?}"),
            }
        }
        served
    }
}

fn http() -> reqwest::Client {
    fathom_fetch::client_builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Waits until `n` sessions are saved (a run saves its first when its plan is ready).
async fn wait_for_sessions(served: &Served, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page: Value = http()
            .post(format!("{}/api/v1/beta/agent-data/:search", served.root))
            .json(&json!({"deployment_name": "_public", "collection": "research-sessions"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["items"].as_array().map_or(0, Vec::len) >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{n} sessions not saved: {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn browser(width: u32, height: u32) -> Browser {
    Browser::start(width, height)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Where to save screenshots, when asked to.
fn shots() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("FATHOM_SCREENSHOTS")?);
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    Some(dir)
}

/// Saves a screenshot named `name` if screenshots were asked for. The focus ring and caret are
/// taken off first, so the picture shows the page as a reader sees it.
async fn shot(b: &Browser, name: &str) {
    shot_sized(b, name, None).await;
}

/// A screenshot with the page `height` pixels tall for the picture (then as it was).
async fn shot_sized(b: &Browser, name: &str, height: Option<(u32, u32)>) {
    if let Some(dir) = shots() {
        if let Some((_, tall)) = height {
            let w = b.exec("return window.innerWidth;", vec![]).await;
            b.set_viewport(w.as_u64().unwrap_or(1440) as u32, tall)
                .await;
        }
        b.exec(
            "document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);",
            vec![],
        )
        .await;
        b.exec(AT_REST, vec![]).await;
        b.save_screenshot(&dir.join(format!("{name}.png"))).await;
        if let Some((usual, _)) = height {
            let w = b.exec("return window.innerWidth;", vec![]).await;
            b.set_viewport(w.as_u64().unwrap_or(1440) as u32, usual)
                .await;
        }
    }
}

/// Text in the page whose contrast with its background is below WCAG AA (4.5:1, or 3:1 for
/// large text), computed from the styles the browser applied.
const CONTRAST: &str = r#"
function parse(s) {
  const m = /rgba?\(([^)]+)\)/.exec(s || '');
  if (!m) return null;
  const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
  return { rgb: p.slice(0, 3), a: p.length > 3 ? p[3] : 1 };
}
function lum(rgb) {
  const c = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
}
function background(el) {
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
  }
  let base = [255, 255, 255];
  for (const l of layers.reverse()) base = base.map((v, i) => l.rgb[i] * l.a + v * (1 - l.a));
  return base;
}
const fails = [];
let checked = 0;
for (const el of document.querySelectorAll('body *')) {
  if (!Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
  const cs = getComputedStyle(el);
  if (cs.visibility === 'hidden' || el.getClientRects().length === 0) continue;
  if (el.closest('.visually-hidden, button:disabled, input:disabled')) continue;
  const bg = background(el);
  const fg = parse(cs.color);
  const f = fg.rgb.map((v, i) => v * fg.a + bg[i] * (1 - fg.a));
  const l1 = lum(f), l2 = lum(bg);
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  const size = parseFloat(cs.fontSize);
  const large = size >= 24 || (Number(cs.fontWeight) >= 700 && size >= 18.66);
  checked += 1;
  if (ratio < (large ? 3 : 4.5)) fails.push(`${el.tagName.toLowerCase()}.${el.className} "${el.textContent.trim().slice(0, 40)}": ${ratio.toFixed(2)}`);
}
return { checked, fails };
"#;

/// Ends the highlight of freshly written report sections (an animation), so the page is
/// measured and pictured at rest.
const AT_REST: &str =
    "document.querySelectorAll('.fresh').forEach((e) => e.classList.remove('fresh'));";

async fn assert_contrast(b: &Browser, screen: &str) {
    b.exec(AT_REST, vec![]).await;
    let r = b.exec(CONTRAST, vec![]).await;
    assert!(r["checked"].as_u64().unwrap_or(0) > 5, "{screen}: {r}");
    assert_eq!(
        r["fails"],
        json!([]),
        "{screen}: text below WCAG AA contrast"
    );
}

/// Every control can be reached by the keyboard and has a name a screen reader says.
async fn assert_controls_named(b: &Browser, screen: &str) {
    let unnamed = b
        .exec(
            r#"
            const bad = [];
            for (const el of document.querySelectorAll('a[href], button, input, select, textarea, summary')) {
              if (el.getClientRects().length === 0 || el.closest('.visually-hidden')) continue;
              if (el.tabIndex < 0) bad.push(`${el.tagName} not focusable`);
              const labelled = (el.labels && el.labels.length) || el.getAttribute('aria-label')
                || el.getAttribute('aria-labelledby') || el.textContent.trim() || el.title;
              if (!labelled) bad.push(`${el.tagName}#${el.id}.${el.className} has no name`);
            }
            return bad;
            "#,
            vec![],
        )
        .await;
    assert_eq!(unnamed, json!([]), "{screen}");
}

/// No horizontal scrolling at the window's width, and nothing marked hidden on screen.
async fn assert_fits(b: &Browser, screen: &str) {
    let shown = b
        .exec(
            "return Array.from(document.querySelectorAll('[hidden]')) \
               .filter((e) => e.getClientRects().length > 0).map((e) => e.id || e.className);",
            vec![],
        )
        .await;
    assert_eq!(shown, json!([]), "{screen}: hidden elements on screen");
    let r = b
        .exec(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        )
        .await;
    assert!(
        r[0].as_u64() <= r[1].as_u64(),
        "{screen}: the page is wider than the window: {r}"
    );
}

async fn run_id(b: &Browser) -> String {
    let url = b
        .wait_until(
            "the run's address",
            "return location.hash.startsWith('#/run/') ? location.hash : null;",
            vec![],
        )
        .await;
    url.as_str()
        .unwrap()
        .trim_start_matches("#/run/")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// Records, as the page changes, whether a report section was on screen while the run was
/// still running (an `update_report` rendered before the run ended), and whether the page
/// ever said its live updates were interrupted.
const WATCH_LIVE_REPORT: &str = r#"
window.__liveReport = 0;
window.__interrupted = null;
new MutationObserver(() => {
  const status = document.getElementById('run-status');
  const report = document.getElementById('report');
  if (status && report && status.dataset.status === 'running' && report.querySelector('.md-h2')) {
    window.__liveReport = Math.max(window.__liveReport, Number(report.dataset.updates || 0));
  }
  const conn = document.getElementById('run-connection');
  if (conn && !conn.hidden && !window.__interrupted) window.__interrupted = conn.textContent;
}).observe(document.getElementById('main'), { subtree: true, childList: true, attributes: true, characterData: true });
return true;
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_edit_approve_watch_cite_and_reopen() {
    let env = env();
    let served = Served::start(&env, free_port(), None);
    // A document the index holds but that is gone when the run reads it: a source that
    // cannot be read, with its reason.
    std::fs::remove_file(env.corpus.join("threads.html")).unwrap();
    let b = browser(1440, 900).await;
    b.goto(&format!("{}/", served.root)).await;

    // The settings form comes from the schema, with the defaults filled in.
    b.wait_for("#question").await;
    b.wait_until(
        "the settings fields",
        "return document.querySelector('input[name=max_sources]');",
        vec![],
    )
    .await;
    b.click_css("#settings > summary").await;
    let defaults = b
        .exec(
            "const v = (n) => document.querySelector(`[name=${n}]`); \
             return [v('max_sources').value, v('depth').value, v('require_approval').checked, \
                     document.querySelector('label[for=' + v('max_sources').id + ']').textContent];",
            vec![],
        )
        .await;
    assert_eq!(defaults, json!(["8", "medium", true, "Max sources"]));
    assert_controls_named(&b, "home").await;
    assert_fits(&b, "home").await;
    b.fill("#question", QUESTION).await;
    shot(&b, "start").await;
    assert_contrast(&b, "home").await;

    // A bad value is refused with the server's message, and nothing starts.
    b.fill("#question", QUESTION).await;
    b.fill("input[name=max_report_update_size]", "10").await;
    b.click_css("#start-button").await;
    let err = b
        .wait_for_text("#start-error", "max_report_update_size")
        .await;
    let err = b.text(&err).await;
    assert!(
        err.contains("400"),
        "the server's message names the minimum: {err}"
    );
    assert!(!b.current_url().await.contains("#/run/"));

    // Small report changes and a pause between fetches: the run can be watched.
    b.fill("input[name=max_report_update_size]", "400").await;
    b.fill("input[name=fetch_delay_ms]", "500").await;
    b.click_css("#start-button").await;
    let id = run_id(&b).await;

    // The plan: edit a query, then approve.
    b.wait_for("#plan-form").await;
    let queries = b
        .exec(
            "return Array.from(document.querySelectorAll('[data-list=query] input')).map((i) => i.value);",
            vec![],
        )
        .await;
    assert!(
        queries.as_array().is_some_and(|q| q.len() >= 2),
        "{queries}"
    );
    b.wait_for_text("#plan-form", "Report outline").await;
    shot(&b, "plan-review").await;
    b.fill(
        "[data-list=query] li:first-child input",
        "threads channels closures",
    )
    .await;
    b.exec(WATCH_LIVE_REPORT, vec![]).await;
    b.click_css("#approve-button").await;

    // Live: pages are read while the run is running, by the researcher.
    b.wait_until(
        "a page read while the run is running",
        "return document.querySelector('#run-status').dataset.status === 'running' \
           && document.querySelectorAll('#timeline [data-tool=fetch_url][data-state=ok]').length >= 2;",
        vec![],
    )
    .await;
    b.wait_for_text("#agents", "pages read").await;
    assert_fits(&b, "live run").await;
    shot(&b, "live-run").await;

    // The run ends; a report section was on screen before it did.
    b.wait_until_for(
        "the run to complete",
        "return document.querySelector('#run-status').dataset.status === 'completed';",
        vec![],
        Duration::from_secs(120),
    )
    .await;
    let live = b.exec("return window.__liveReport;", vec![]).await;
    assert!(
        live.as_u64().unwrap_or(0) >= 1,
        "no update_report was rendered while the run was running: {live}"
    );
    // The server ends the stream after the run's last event: that is no interruption.
    let interrupted = b.exec("return window.__interrupted;", vec![]).await;
    assert_eq!(interrupted, Value::Null, "the page said: {interrupted}");
    // The edited query is what was searched.
    b.wait_for_text(
        "#timeline [data-tool=web_search]",
        "threads channels closures",
    )
    .await;
    // The source that could not be read, with why.
    let failed = b.wait_for_text("#failed-sources", "threads").await;
    let failed = b.text(&failed).await;
    assert!(failed.contains("Why:"), "{failed}");
    assert!(
        failed.to_lowercase().contains("no such file"),
        "the reason is shown: {failed}"
    );

    // The report, rendered: a title, sections, citations linked to their sources.
    b.wait_for("#report .md-h1").await;
    let cites = b.find_all("#report a.cite").await;
    assert!(!cites.is_empty(), "no citation links");
    assert_contrast(&b, "finished report").await;
    shot_sized(&b, "report", Some((900, 1500))).await;
    let n = b
        .exec(
            "return document.querySelector('#report a.cite').dataset.n;",
            vec![],
        )
        .await
        .as_str()
        .unwrap()
        .to_string();
    b.click(&cites[0]).await;
    b.wait_until(
        "the cited source to take the focus",
        "return document.activeElement && document.activeElement.id === 'source-' + arguments[0] \
           && document.activeElement.classList.contains('flash');",
        vec![json!(n)],
    )
    .await;
    assert!(
        b.current_url()
            .await
            .ends_with(&format!("#/run/{id}/source/{n}")),
        "a citation has an address"
    );
    // Clicked again (the address does not change), it still leads there.
    b.exec("document.activeElement.blur();", vec![]).await;
    b.click(&cites[0]).await;
    b.wait_until(
        "the cited source to take the focus again",
        "return document.activeElement && document.activeElement.id === 'source-' + arguments[0];",
        vec![json!(n)],
    )
    .await;
    let source = b.find(&format!("#source-{n}")).await.unwrap();
    let text = b.text(&source).await;
    assert!(text.contains("Download the stored copy"), "{text}");
    let link = b
        .find(&format!("#source-{n} a.artifact-link"))
        .await
        .expect("a download of the stored copy");
    let href = b.property(&link, "href").await;
    let bytes = http()
        .get(href.as_str().unwrap())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&bytes).contains("ownership"),
        "the stored copy is the source read"
    );

    // The finished report offers its exports; each link downloads the file.
    let formats = b
        .exec(
            "return Array.from(document.querySelectorAll('#report-panel a.export-link')).map((a) => a.textContent);",
            vec![],
        )
        .await;
    assert_eq!(formats, json!(["HTML", "PDF", "DOCX"]));
    let pdf_link = b
        .find("#report-panel a.export-link[data-format=pdf]")
        .await
        .unwrap();
    let href = b.property(&pdf_link, "href").await;
    let resp = http().get(href.as_str().unwrap()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/pdf");
    assert!(resp.bytes().await.unwrap().starts_with(b"%PDF-"));

    // The plan shown is the one approved, with the edit.
    b.click_css("#plan-details > summary").await;
    b.wait_for_text("#plan-details .queries-ro", "threads channels closures")
        .await;
    b.wait_for_text("#plan-details > summary", "as edited")
        .await;
    // Without keys the decision is recorded as nobody's.
    b.wait_for_text("#plan-decision", "Approved by anonymous at ")
        .await;

    // A second session, so that searching the list means something.
    let other: Value = http()
        .post(format!(
            "{}/deployments/deep-research/workflows/deep-research/run-nowait",
            served.root
        ))
        .json(&json!({"start_event": {"query": "Why do lifetimes exist?"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(other["handler_id"].is_string(), "{other}");
    wait_for_sessions(&served, 2).await;

    // Reload: the finished run is rebuilt as it was.
    b.refresh().await;
    b.wait_until(
        "the completed run after a reload",
        "return document.querySelector('#run-status').dataset.status === 'completed' \
           && document.querySelectorAll('#report a.cite').length > 0 \
           && document.querySelector('#plan-details > summary').textContent.includes('as edited');",
        vec![],
    )
    .await;

    // The sessions list, newest first, searchable by question; reopen the session.
    b.click_css(".top nav a[href='#/sessions']").await;
    b.wait_until(
        "both sessions in the list",
        "return document.querySelectorAll('#session-list li').length >= 2;",
        vec![],
    )
    .await;
    let order = b
        .exec(
            "return Array.from(document.querySelectorAll('#session-list .session-query')).map((e) => e.textContent);",
            vec![],
        )
        .await;
    assert_eq!(order[0], "Why do lifetimes exist?", "newest first: {order}");
    b.fill("#session-search", "ownership").await;
    b.wait_until(
        "the search to keep one session",
        "const li = document.querySelectorAll('#session-list li'); \
         return li.length === 1 && li[0].dataset.id === arguments[0];",
        vec![json!(id)],
    )
    .await;
    b.click_css(&format!("#session-list li[data-id='{id}'] a"))
        .await;
    b.wait_until(
        "the reopened session",
        "return document.querySelector('#run-status').dataset.status === 'completed' \
           && document.querySelectorAll('#report a.cite').length > 0 \
           && document.querySelector('#run-title').textContent === arguments[0];",
        vec![json!(QUESTION)],
    )
    .await;

    // A session still at its gate, reopened from the list, is live: its plan can be decided.
    b.click_css(".top nav a[href='#/sessions']").await;
    b.wait_for("#session-list li[data-id] a").await;
    let other_id = other["handler_id"].as_str().unwrap();
    b.click_css(&format!("#session-list li[data-id='{other_id}'] a"))
        .await;
    b.wait_for("#plan-form #approve-button").await;
    b.wait_for_text("#run-title", "Why do lifetimes exist?")
        .await;
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrow_keyboard_clarify_reject_with_feedback_and_cancel() {
    let env = env();
    let served = Served::start(&env, free_port(), None);
    let b = browser(390, 844).await;
    b.goto(&format!("{}/", served.root)).await;

    // With the keyboard only: the question has the focus; Tab reaches the start button.
    b.wait_until(
        "the question to have the focus",
        "return document.activeElement && document.activeElement.id === 'question' \
           && document.querySelector('input[name=max_sources]');",
        vec![],
    )
    .await;
    let size = b
        .exec("return [window.innerWidth, window.innerHeight];", vec![])
        .await;
    assert_eq!(size, json!([390, 844]), "the page is 390 px wide");
    assert_fits(&b, "home at 390 px").await;
    b.keys("ownership").await;
    b.keys("\u{E004}\u{E004}").await; // Tab past the settings to the button
    let focused = b.exec("return document.activeElement.id;", vec![]).await;
    assert_eq!(focused, "start-button");
    b.keys("\u{E007}").await; // Enter
    let _id = run_id(&b).await;

    // A vague question: clarifying questions to answer.
    b.wait_for("#plan-form .clarify input").await;
    b.wait_for_text(".plan-question", "round 1").await;
    assert_fits(&b, "plan review at 390 px").await;
    assert_controls_named(&b, "plan review").await;
    assert_contrast(&b, "plan review at 390 px").await;
    shot(&b, "plan-review-narrow").await;

    // Re-planning needs something to go on.
    b.click_css("#reject-button").await;
    b.wait_for_text("#plan-form .form-error", "Answer at least one question")
        .await;

    b.fill(
        "#plan-form .clarify .field:first-of-type input",
        "how moving values between threads works",
    )
    .await;
    b.fill("#plan-form textarea", "focus on threads and channels")
        .await;
    b.click_css("#reject-button").await;

    // The new plan, steered by the answer and the feedback.
    b.wait_for_text(".plan-question", "round 2").await;
    b.wait_for_text(".feedback-so-far", "focus on threads and channels")
        .await;
    let queries = b
        .exec(
            "return Array.from(document.querySelectorAll('[data-list=query] input')).map((i) => i.value).join(' | ');",
            vec![],
        )
        .await;
    assert!(
        queries.as_str().unwrap().contains("threads"),
        "the new plan follows the feedback: {queries}"
    );

    // Cancel, with a confirmation.
    b.click_css("#cancel-button").await;
    b.click_css("#cancel-confirm").await;
    b.wait_until(
        "the run to be cancelled",
        "return document.querySelector('#run-status').dataset.status === 'cancelled';",
        vec![],
    )
    .await;
    b.wait_for_text("#run-alert", "cancelled").await;
    assert!(
        b.find("#plan-form").await.is_none(),
        "no decision can be sent to a cancelled run"
    );
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_reload_and_server_restart_mid_run() {
    let env = env();
    let port = free_port();
    let key = "k3y-for-the-ui";
    let served = Served::start(&env, port, Some(key));
    let b = browser(1440, 900).await;
    b.goto(&format!("{}/deployments/deep-research/ui/", served.root))
        .await;

    // The page loads without the key, then asks for it; a wrong one is refused.
    b.wait_for("#key-form").await;
    b.fill("#api-key", "wrong").await;
    b.click_css("#key-form button[type=submit]").await;
    b.wait_for_text("#key-form .form-error", "invalid API key")
        .await;
    assert_contrast(&b, "API key form").await;
    assert_controls_named(&b, "API key form").await;
    b.fill("#api-key", key).await;
    b.click_css("#key-form button[type=submit]").await;
    b.wait_until(
        "the settings, loaded with the key",
        "return document.querySelector('input[name=fetch_delay_ms]');",
        vec![],
    )
    .await;
    b.click_css("#settings > summary").await;
    b.fill("#question", QUESTION).await;
    b.fill("input[name=fetch_delay_ms]", "700").await;
    b.click_css("#start-button").await;
    let id = run_id(&b).await;
    b.wait_for("#plan-form").await;

    // Reload at the gate: the plan is there again, and the key was not asked again.
    b.refresh().await;
    b.wait_for("#plan-form").await;
    assert!(b.find("#key-form").await.is_none());

    // The server goes away while the page waits: the page says so, and finds the run again
    // when the server is back.
    drop(served);
    b.wait_until(
        "the page to say the server is gone",
        "const c = document.querySelector('#run-connection'); \
         const banner = document.querySelector('#banner'); \
         return (c && !c.hidden) || (banner && !banner.hidden);",
        vec![],
    )
    .await;
    let served = Served::start(&env, port, Some(key));
    b.wait_until(
        "the page to reconnect",
        "const c = document.querySelector('#run-connection'); \
         const banner = document.querySelector('#banner'); \
         return c && c.hidden && banner.hidden && document.querySelector('#plan-form');",
        vec![],
    )
    .await;
    b.click_css("#approve-button").await;
    // Who approved: the key FATHOM_API_KEY gives is the admin key named `default`.
    b.wait_for_text("#plan-decision", "Approved by default at ")
        .await;

    // Mid-run: reload, and the page reattaches to the live stream from its start.
    b.wait_until(
        "a page read",
        "return document.querySelectorAll('#timeline [data-tool=fetch_url][data-state=ok]').length >= 1;",
        vec![],
    )
    .await;
    b.refresh().await;
    b.wait_until(
        "the run rebuilt from its start",
        "return document.querySelectorAll('#timeline [data-tool=web_search]').length >= 1 \
           && document.querySelectorAll('#timeline [data-tool=decompose_query]').length === 1;",
        vec![],
    )
    .await;
    b.wait_until_for(
        "the run to complete",
        "return document.querySelector('#run-status').dataset.status === 'completed' \
           && document.querySelectorAll('#report a.cite').length > 0;",
        vec![],
        Duration::from_secs(120),
    )
    .await;
    // Each event once, though the stream was read across a restart and a reload.
    let results = b
        .exec(
            "return document.querySelectorAll('#timeline [data-kind=stop]').length;",
            vec![],
        )
        .await;
    assert_eq!(results, 1);
    assert!(b.current_url().await.ends_with(&format!("#/run/{id}")));
    // An export asked for with the key is fetched with it and saved under the server's name.
    b.exec(
        "window.savedFiles = []; \
         const created = URL.createObjectURL; \
         URL.createObjectURL = (blob) => { window.lastBlob = blob; return created(blob); }; \
         const click = HTMLAnchorElement.prototype.click; \
         HTMLAnchorElement.prototype.click = function () { \
           if (this.href.startsWith('blob:')) { \
             window.savedFiles.push({ name: this.download, type: window.lastBlob.type, size: window.lastBlob.size }); \
             return; } \
           return click.call(this); };",
        vec![],
    )
    .await;
    b.click_css("#report-panel a.export-link[data-format=docx]")
        .await;
    let saved = b
        .wait_until(
            "the DOCX export to be saved",
            "return window.savedFiles.length === 1 && window.savedFiles[0];",
            vec![],
        )
        .await;
    assert_eq!(
        saved["name"], "how-does-ownership-work-in-rust.docx",
        "{saved}"
    );
    assert!(
        saved["type"].as_str().unwrap().contains("wordprocessingml"),
        "{saved}"
    );
    assert!(saved["size"].as_u64().unwrap() > 1000, "{saved}");
    // The API itself still wants the key.
    let status = http()
        .get(format!(
            "{}/deployments/deep-research/handlers",
            served.root
        ))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
    drop(served);
}

/// A saved report with what two readers of Markdown would disagree on (a table, nested
/// lists, an escaped bracket, code) and hostile input.
const MARKUP_REPORT: &str = r#"# Title with <b>tags</b>

<img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>

A [bad](javascript:window.__pwned=3) link, a [good](https://example.org/x) one,
a **strong** and _em_ word, snake_case_name, `code <i>`, \[2\] escaped, cited [1] [3].

## Lists

- one
- two with [1]
  1. nested first
  2. nested second
     - deeper

## A table

| Kind | Count |
|:-----|------:|
| boxes | 12 |
| x \| y | [2] |

> quoted

```
<script>not run</script>
```

## Sources

1. The Rust book — `https://doc.rust-lang.org/book/`
2. A local note, p. 2 — `file:///corpus/note.pdf#page=2`
3. The reference — `https://doc.rust-lang.org/reference/`
"#;

/// What the report panel shows of [`MARKUP_REPORT`], read from the page.
const READ_REPORT: &str = r#"
const report = document.getElementById('report');
const all = (css) => Array.from(report.querySelectorAll(css));
const text = (css) => { const e = report.querySelector(css); return e ? e.textContent : null; };
return {
  pwned: window.__pwned || 0,
  elements: all('*').map((e) => e.tagName.toLowerCase()).filter((t, i, a) => a.indexOf(t) === i).sort(),
  title: text('h3.md-h1'),
  sections: all('h4.md-h2').map((e) => e.textContent),
  links: all('a:not(.cite)').map((a) => [a.getAttribute('href'), a.target]),
  cites: all('a.cite').map((a) => [a.textContent, a.getAttribute('href').replace(/^#\/run\/[^/]+/, ''), a.title]),
  para2: report.querySelectorAll('p')[1].textContent,
  nested: all('ul > li > ol > li').map((e) => e.firstChild.textContent),
  deeper: all('ol > li > ul > li').map((e) => e.textContent),
  head: all('th').map((e) => [e.textContent, getComputedStyle(e).textAlign]),
  cells: all('tbody td').map((e) => [e.textContent, getComputedStyle(e).textAlign]),
  tableScrolls: Boolean(report.querySelector('.table-wrap > table')),
  code: text('pre code'),
  quote: text('blockquote'),
  sources: Array.from(document.querySelectorAll('#cited-sources > li'))
    .filter((li) => li.getClientRects().length > 0)
    .map((li) => [li.id, li.querySelector('.source-title').textContent, li.querySelector('.source-url').textContent]),
};
"#;

/// A saved report, as the page shows it: rendered by the server as its exports are, hostile
/// input inert, a table, nested lists, an escaped bracket and code right, each citation
/// leading to its source. Then the UI's own modules: events and plan fields it does not know
/// are shown as they are (another workflow version may add them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_markup_unknown_fields_and_a_failed_run_in_the_browser() {
    let corpus_env = env();
    let served = Served::start(&corpus_env, free_port(), None);
    let saved: Value = http()
        .post(format!("{}/api/v1/beta/agent-data", served.root))
        .json(&json!({
            "deployment_name": "_public",
            "collection": "research-sessions",
            "data": {
                "research_id": "saved-markup",
                "query": "How is a report shown?",
                "status": "completed",
                "report_markdown": MARKUP_REPORT,
                "settings": {},
            },
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(saved["id"].is_string(), "{saved}");
    let b = browser(1024, 768).await;
    b.goto(&format!("{}/#/run/saved-markup", served.root)).await;
    b.wait_until(
        "the saved report, rendered, and its sources",
        "return document.querySelector('#report .md-h1') \
           && document.querySelectorAll('#cited-sources > li').length === 3;",
        vec![],
    )
    .await;
    let r = b.exec(READ_REPORT, vec![]).await;
    assert_eq!(r["pwned"], 0, "{r}");
    assert_eq!(
        r["elements"],
        json!([
            "a",
            "blockquote",
            "code",
            "div",
            "em",
            "h3",
            "h4",
            "li",
            "ol",
            "p",
            "pre",
            "strong",
            "table",
            "tbody",
            "td",
            "th",
            "thead",
            "tr",
            "ul"
        ]),
        "no element but Markdown's: {r}"
    );
    assert_eq!(r["title"], "Title with <b>tags</b>", "{r}");
    assert_eq!(r["sections"], json!(["Lists", "A table"]), "{r}");
    // The javascript: link is text, not a link; the web link opens apart.
    assert_eq!(
        r["links"],
        json!([["https://example.org/x", "_blank"]]),
        "{r}"
    );
    let para2 = r["para2"].as_str().unwrap();
    for want in ["A bad link", "snake_case_name", "code <i>", "[2] escaped"] {
        assert!(para2.contains(want), "{want}: {r}");
    }
    // Each citation leads to its source and names it; the escaped [2] is not one.
    assert_eq!(
        r["cites"],
        json!([
            ["[1]", "/source/1", "The Rust book"],
            ["[3]", "/source/3", "The reference"],
            ["[1]", "/source/1", "The Rust book"],
            ["[2]", "/source/2", "A local note, p. 2"]
        ]),
        "{r}"
    );
    assert_eq!(r["nested"], json!(["nested first", "nested second"]), "{r}");
    assert_eq!(r["deeper"], json!(["deeper"]), "{r}");
    assert_eq!(
        r["head"],
        json!([["Kind", "left"], ["Count", "right"]]),
        "{r}"
    );
    assert_eq!(
        r["cells"],
        json!([
            ["boxes", "left"],
            ["12", "right"],
            ["x | y", "left"],
            ["[2]", "right"]
        ]),
        "{r}"
    );
    assert_eq!(r["tableScrolls"], true, "{r}");
    assert_eq!(r["code"], "<script>not run</script>", "{r}");
    assert_eq!(r["quote"].as_str().map(str::trim), Some("quoted"), "{r}");
    // The sources are listed on the page, from the report's own list as the server read it
    // (this session records no others).
    assert_eq!(
        r["sources"],
        json!([
            [
                "source-1",
                "The Rust book",
                "https://doc.rust-lang.org/book/"
            ],
            ["source-2", "A local note, p. 2", "/corpus/note.pdf"],
            [
                "source-3",
                "The reference",
                "https://doc.rust-lang.org/reference/"
            ]
        ]),
        "{r}"
    );
    assert_contrast(&b, "report markup").await;
    assert_fits(&b, "report markup").await;
    shot_sized(&b, "report-markup", Some((768, 1800))).await;
    b.click_css("#report a.cite[data-n='2']").await;
    b.wait_until(
        "the cited source to take the focus",
        "return document.activeElement && document.activeElement.id === 'source-2' \
           && document.activeElement.classList.contains('flash');",
        vec![],
    )
    .await;
    assert!(
        b.current_url()
            .await
            .ends_with("#/run/saved-markup/source/2"),
        "a citation has an address"
    );

    let r = b
        .exec_async(
            r#"
            const done = arguments[arguments.length - 1];
            (async () => {
              const state = await import('./assets/run-state.js');
              const plan = await import('./assets/plan-review.js');
              const out = {};
              // An event type this UI does not know, and one it does.
              const run = state.newRun('x');
              const changed = state.apply(run, { type: 'QueryModeChosen', types: null, value: { mode: 'deep', why: 'broad' } }, 3);
              out.unknown = changed.entry && changed.entry.kind;
              out.unknownType = changed.entry && changed.entry.type;
              state.apply(run, { type: 'ToolCallResult', value: { tool_name: 'decompose_query', tool_id: 'decompose_query-1', tool_kwargs: {}, tool_output: { blocks: [{ text: 'plan' }], is_error: false, raw_output: { question: 'q', queries: ['a'], outline: ['b'], mode: 'deep', background_investigation: { summary: 'What the corpus holds', documents: ['x.md'] } } } } }, 4);
              out.phase = run.phase;
              const view = plan.planSummary(run.plan);
              out.extras = Array.from(view.querySelectorAll('.extra h4')).map((h) => h.textContent);
              out.extraText = view.querySelector('.plan-extra').textContent;
              state.apply(run, { type: 'WorkflowFailedEvent', types: ['StopEvent'], value: { step_name: 's', exception: { exception_type: 'E', exception_message: 'the model server refused the key' } } }, 5);
              out.failed = [run.status, run.error];
              done(out);
            })().catch((e) => done({ error: String(e && e.stack || e) }));
            "#,
            vec![],
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(r["unknown"], "other");
    assert_eq!(r["unknownType"], "QueryModeChosen");
    assert_eq!(r["phase"], "review");
    assert_eq!(r["extras"], json!(["Mode", "Background investigation"]));
    assert!(
        r["extraText"]
            .as_str()
            .unwrap()
            .contains("What the corpus holds"),
        "{r}"
    );
    assert_eq!(
        r["failed"],
        json!(["failed", "the model server refused the key"])
    );
    drop(served);

    // A run that fails, end to end: a model server that refuses the key. The page says the
    // run failed and why.
    let refusing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model_url = format!("http://{}/v1", refusing.local_addr().unwrap());
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async {
            (
                axum::http::StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": {"message": "Incorrect API key provided"}})),
            )
        });
        axum::serve(refusing, app).await.unwrap();
    });
    let failing = env();
    let served = Served::start_with(
        &failing,
        free_port(),
        None,
        &[
            ("OPENAI_MODEL", "some-model"),
            ("OPENAI_BASE_URL", &model_url),
        ],
    );
    b.goto(&format!("{}/", served.root)).await;
    b.fill("#question", QUESTION).await;
    b.click_css("#start-button").await;
    b.wait_until(
        "the run to fail",
        "return document.querySelector('#run-status') \
           && document.querySelector('#run-status').dataset.status === 'failed';",
        vec![],
    )
    .await;
    let alert = b.wait_for_text("#run-alert", "The run failed").await;
    let alert = b.text(&alert).await;
    assert!(
        alert.contains("Incorrect API key provided") || alert.contains("401"),
        "the reason is shown: {alert}"
    );
    assert!(b.find("#cancel-button").await.is_none());
    assert_contrast(&b, "failed run").await;
    drop(served);
}

/// A follow-up asked on a finished report, in the browser: the form under the report starts
/// it, the plan at the gate says which queries the first session's sources answer, the run
/// names the session it follows, and the sessions list shows the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_is_asked_on_a_finished_report_and_listed_with_its_parent() {
    let env = env();
    let served = Served::start(&env, free_port(), None);
    let parent: Value = http()
        .post(format!("{}/workflows/deep-research/run", served.root))
        .json(&json!({"start_event": {"query": QUESTION, "settings": {"require_approval": false}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(parent["status"], "completed", "{parent}");
    let parent_id = parent["handler_id"].as_str().unwrap().to_string();

    let b = browser(1280, 900).await;
    b.goto(&format!("{}/#/run/{parent_id}", served.root)).await;
    b.wait_until(
        "the finished report with its follow-up form",
        "return document.querySelector('#run-status').dataset.status === 'completed' \
           && !document.querySelector('#follow-up').hidden;",
        vec![],
    )
    .await;
    b.fill(
        "#follow-up textarea",
        "What are the ownership rules in Rust?",
    )
    .await;
    b.click_css("#follow-up-button").await;
    b.wait_until(
        "the follow-up's own page",
        "return location.hash.startsWith('#/run/') && !location.hash.includes(arguments[0]);",
        vec![json!(parent_id)],
    )
    .await;
    let id = run_id(&b).await;
    // At the gate: the plan says which queries the parent's sources answer.
    b.wait_until(
        "the follow-up plan and the session it follows",
        "const f = document.querySelector(\"[data-field='follow_up']\"); \
         const link = document.querySelector('#run-follows a'); \
         return f && f.querySelectorAll(\"[data-list='covered'] li\").length > 0 \
           && link && link.getAttribute('href') === '#/run/' + arguments[0];",
        vec![json!(parent_id)],
    )
    .await;
    b.click_css("#approve-button").await;
    b.wait_until(
        "the follow-up's report",
        "return document.querySelector('#run-status').dataset.status === 'completed' \
           && document.querySelectorAll('#report a.cite').length > 0;",
        vec![],
    )
    .await;

    b.click_css(".top nav a[href='#/sessions']").await;
    let shown = b
        .wait_until(
            "the follow-up listed with its parent",
            "const p = document.querySelector(`#session-list li[data-id='${arguments[0]}'] .session-parent`); \
             return p && p.querySelector('a').getAttribute('href') === '#/run/' + arguments[1] ? p.textContent : null;",
            vec![json!(id), json!(parent_id)],
        )
        .await;
    assert_eq!(shown, json!(format!("Follow-up of “{QUESTION}”")));
    drop(served);
}

/// A server with a corpus and a web search: the settings offer where to look, the plan shows
/// where each query searches, and a person who unticks the web for every query at the gate
/// gets a report from the local files alone: the web is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_each_query_searches_is_chosen_at_the_gate() {
    use std::sync::atomic::Ordering;
    let env = env();
    let web = fathom_testkit::web::SearchAndPages::start().await;
    let mut config: Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    config["search"]["provider"] = "searxng".into();
    config["search"]["base_url"] = format!("http://{}", web.origin).into();
    config["fetch"]["allow_private_networks"] = true.into();
    config["fetch"]["per_host_interval_ms"] = 0.into();
    let path = env.tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let served = Served::start_with(
        &env,
        free_port(),
        None,
        &[("FATHOM_CONFIG", path.to_str().unwrap())],
    );
    let b = browser(1440, 900).await;
    b.goto(&format!("{}/", served.root)).await;
    b.wait_for("#question").await;
    b.wait_until(
        "the sources choices",
        "return document.querySelectorAll('input[name=sources]').length === 2;",
        vec![],
    )
    .await;
    b.fill("#question", QUESTION).await;
    b.click_css("#start-button").await;
    let id = run_id(&b).await;

    // Every query searches both, and says so; the web was not asked before approval.
    b.wait_for("#plan-form").await;
    let kinds = b
        .exec(
            "return Array.from(document.querySelectorAll('[data-list=query] li')).map((li) => \
               Array.from(li.querySelectorAll('input[data-kind]')).filter((c) => c.checked).map((c) => c.dataset.kind));",
            vec![],
        )
        .await;
    let rows = kinds.as_array().unwrap();
    assert!(rows.len() >= 2, "{kinds}");
    assert!(
        rows.iter().all(|r| r == &json!(["corpus", "web"])),
        "{kinds}"
    );
    assert_eq!(
        web.searches.load(Ordering::SeqCst),
        0,
        "nothing before approval"
    );
    assert_controls_named(&b, "plan with sources").await;
    shot(&b, "plan-sources").await;
    b.exec(
        "document.querySelectorAll('[data-list=query] input[data-kind=web]').forEach((c) => c.click()); return true;",
        vec![],
    )
    .await;
    b.click_css("#approve-button").await;
    b.wait_until_for(
        "the run to complete",
        "return document.querySelector('#run-status').dataset.status === 'completed';",
        vec![],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        web.searches.load(Ordering::SeqCst),
        0,
        "the web was never asked"
    );
    assert_eq!(web.pages.load(Ordering::SeqCst), 0);
    // The plan as approved says where each query searched.
    let run: Value = http()
        .get(format!("{}/handlers/{id}", served.root))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let plan = &run["result"]["value"]["plan"];
    let searched: Vec<&Value> = plan["query_sources"]
        .as_object()
        .unwrap()
        .values()
        .collect();
    assert!(
        !searched.is_empty() && searched.iter().all(|k| *k == &json!(["corpus"])),
        "{plan}"
    );
}
