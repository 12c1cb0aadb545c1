//! Delivery of a finished report, end to end: `fathom research --yes` with `deliver_webhook`
//! and `deliver_email` set, against a webhook receiver and an SMTP server written here on
//! loopback (real HTTP, real SMTP). The receiver fails twice then accepts: exactly one
//! accepted delivery, its signature checked with the shared secret by an HMAC of the test's
//! own. The SMTP server receives the message: its HTML body, and its PDF attachment read
//! back. A process SIGKILLed after the receiver acknowledged and before the acknowledgement
//! was journaled sends once more on resume, with the same delivery id; one killed after it
//! was journaled sends nothing more. An unreachable webhook and a refused SMTP login are
//! recorded as failed deliveries with their reason, and the research completes.

mod common;
use common::{ok, session_of};

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use fathom_engine::store::RunStore;
use fathom_store::SqlStore;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2_next::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const SECRET: &str = "test-shared-secret";
const QUESTION: &str = "How does ownership work in Rust?";

struct Env {
    _tmp: tempfile::TempDir,
    _keep: Option<tempfile::TempDir>,
    work: PathBuf,
    corpus: PathBuf,
    config: PathBuf,
    db: String,
    /// Extra environment (the secrets, the relay).
    vars: Vec<(String, String)>,
}

/// A work folder, the sample corpus, a SQLite database, and the shipped config with loopback
/// allow-listed for webhooks and short backoffs.
async fn env(max_attempts: u32) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let mut config: Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    config["delivery"] = json!({
        "webhook_allow": ["127.0.0.1"],
        "timeout_seconds": 5,
        "max_attempts": max_attempts,
        "initial_backoff_ms": 100,
        "max_backoff_ms": 400
    });
    let config_path = tmp.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let (db, keep) = fathom_testkit::db::fresh_url(fathom_store::Dialect::Sqlite).await;
    Env {
        _tmp: tmp,
        _keep: keep,
        work,
        corpus,
        config: config_path,
        db,
        vars: vec![("FATHOM_WEBHOOK_SECRET".into(), SECRET.into())],
    }
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fathom"));
        c.current_dir(&self.work)
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_WEBHOOK_SECRET")
            .env_remove("FATHOM_SMTP_URL")
            .env_remove("FATHOM_SMTP_FROM")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .arg("--database-url")
            .arg(&self.db)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn research(&self, settings: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = [
            "research",
            QUESTION,
            "--corpus",
            self.corpus.to_str().unwrap(),
            "--yes",
        ]
        .map(String::from)
        .to_vec();
        for s in settings {
            a.push("--set".into());
            a.push(s.to_string());
        }
        a
    }

    /// Runs fathom to its end off the async threads (the loopback servers keep answering),
    /// killed if it takes more than two minutes.
    async fn run(&self, args: Vec<String>) -> Output {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = self.cmd(&args);
        tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(120)))
            .await
            .unwrap()
    }

    async fn session(&self, id: &str) -> Value {
        let store = Arc::new(SqlStore::connect(&self.db).await.unwrap());
        fathom_research::Sessions::new(store, &fathom_testkit::research_config())
            .get(id)
            .await
            .unwrap()
    }

    /// The results of `tool` on the run's stream, in order.
    async fn results(&self, id: &str, tool: &str) -> Vec<Value> {
        let store = SqlStore::connect(&self.db).await.unwrap();
        store
            .events_after(id, -1, 10_000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.envelope.event_type == "ToolCallResult")
            .map(|e| e.envelope.value)
            .filter(|v| v["tool_name"] == tool)
            .collect()
    }
}

fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fathom");
    let deadline = Instant::now() + limit;
    // Polled: a process that hangs is killed at the deadline and the test says so.
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("fathom did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

// ---- The webhook receiver ----

#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: Vec<u8>,
    answered: u16,
}

#[derive(Default)]
struct Receiver {
    /// Answers to give, in order; after them, 200.
    script: Mutex<Vec<u16>>,
    got: Mutex<Vec<Received>>,
}

/// A webhook receiver on loopback answering with `script` then 200; its URL and what it got.
async fn receiver(script: Vec<u16>) -> (String, Arc<Receiver>) {
    let state = Arc::new(Receiver {
        script: Mutex::new(script),
        got: Mutex::new(Vec::new()),
    });
    async fn hook(
        State(r): State<Arc<Receiver>>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> StatusCode {
        let answer = {
            let mut s = r.script.lock().unwrap();
            if s.is_empty() { 200 } else { s.remove(0) }
        };
        r.got.lock().unwrap().push(Received {
            headers,
            body: body.to_vec(),
            answered: answer,
        });
        StatusCode::from_u16(answer).unwrap()
    }
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, state)
}

fn header<'a>(r: &'a Received, name: &str) -> &'a str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header"))
}

/// The receiver's check, with an HMAC of the test's own: sha256=hex(HMAC(secret, ts "." body)).
fn signed_by_secret(r: &Received) -> bool {
    let ts = header(r, "x-fathom-timestamp");
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let fresh = ts.parse::<u64>().unwrap().abs_diff(now) < 300;
    header(r, "x-fathom-signature") == expected && fresh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_failing_twice_gets_one_accepted_signed_delivery() {
    let env = env(4).await;
    let (url, hook) = receiver(vec![500, 500]).await;
    let out = ok(&env
        .run(env.research(&[&format!("deliver_webhook={url}")]))
        .await);
    let id = session_of(&out);
    assert!(
        out.contains("delivery webhook: delivered after 3 attempts"),
        "{out}"
    );

    let got = hook.got.lock().unwrap().clone();
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        vec![500, 500, 200],
        "two failures, then one accepted delivery, and nothing after it"
    );
    for r in &got {
        assert!(
            signed_by_secret(r),
            "signature checks out with the shared secret"
        );
        assert_eq!(header(r, "content-type"), "application/json");
    }
    let ids: Vec<&str> = got.iter().map(|r| header(r, "x-fathom-delivery")).collect();
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "one delivery id on every attempt: {ids:?}"
    );
    assert_eq!(
        got.iter()
            .map(|r| header(r, "x-fathom-attempt"))
            .collect::<Vec<_>>(),
        vec!["1", "2", "3"]
    );
    // A body signed with another secret, or altered, would not pass.
    let mut forged = got[2].clone();
    forged.body.extend_from_slice(b" ");
    assert!(!signed_by_secret(&forged));

    // The body is the result: the report the CLI wrote.
    let body: Value = serde_json::from_slice(&got[2].body).unwrap();
    assert_eq!(body["type"], "research.completed");
    assert_eq!(body["research_id"], id.as_str());
    assert_eq!(body["delivery_id"], ids[0]);
    let report =
        std::fs::read_to_string(env.work.join(format!(".fathom/reports/{id}.md"))).unwrap();
    assert_eq!(body["result"]["report_markdown"], report.as_str());
    assert!(
        body["result"]["sources"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );

    let s = env.session(&id).await;
    let d = &s["delivery"]["webhook"];
    assert_eq!(d["status"], "delivered", "{d}");
    assert_eq!(d["attempts"], 3);
    assert_eq!(d["http_status"], 200);
    assert_eq!(d["delivery_id"], ids[0]);
    assert_eq!(s["status"], "completed");
    let results = env.results(&id, "deliver_webhook").await;
    assert_eq!(
        results
            .iter()
            .map(|r| r["tool_output"]["is_error"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        vec![true, true, false],
        "each attempt is on the stream"
    );
    assert!(
        results[0]["tool_output"]["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .contains("HTTP 500; trying again")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_webhook_is_recorded_as_failed_and_the_research_completes() {
    let env = env(2).await;
    // Nothing listens on the port of a listener just dropped.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let out = ok(&env
        .run(env.research(&[&format!("deliver_webhook={url}")]))
        .await);
    let id = session_of(&out);
    assert!(
        out.contains("delivery webhook: failed after 2 attempts: cannot connect"),
        "{out}"
    );
    let s = env.session(&id).await;
    assert_eq!(s["status"], "completed");
    assert!(
        s["report_markdown"]
            .as_str()
            .unwrap()
            .contains("## Sources")
    );
    let d = &s["delivery"]["webhook"];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64()),
        (Some("failed"), Some(2)),
        "{d}"
    );
    assert!(d["reason"].as_str().unwrap().contains("refused"), "{d}");

    // A private address that is not allow-listed is refused at once, not retried.
    let out = ok(&env
        .run(env.research(&["deliver_webhook=http://10.255.255.1/hook"]))
        .await);
    let s = env.session(&session_of(&out)).await;
    let d = &s["delivery"]["webhook"];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64()),
        (Some("failed"), Some(1)),
        "{d}"
    );
    assert!(d["reason"].as_str().unwrap().contains("private"), "{d}");

    // A malformed target, or one this server has no secret for, is refused at start: one
    // line, nothing stored.
    let before = ok(&env.run(vec!["sessions".into(), "list".into()]).await);
    let out = env
        .run(env.research(&["deliver_webhook=ftp://x.example/"]))
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("deliver_webhook: webhooks are http or https URLs"),
        "{err}"
    );
    let args = env.research(&["deliver_webhook=https://hooks.example.com/x"]);
    let out = env_run_without_secret(&env, args).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set FATHOM_WEBHOOK_SECRET"), "{err}");
    let out = env
        .run(env.research(&["deliver_email=[\"a@example.org\"]"]))
        .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("set FATHOM_SMTP_URL and FATHOM_SMTP_FROM"),
        "{err}"
    );
    assert_eq!(
        ok(&env.run(vec!["sessions".into(), "list".into()]).await),
        before
    );
}

async fn env_run_without_secret(env: &Env, args: Vec<String>) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.cmd(&args);
    cmd.env_remove("FATHOM_WEBHOOK_SECRET");
    tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(60)))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_acknowledgement_and_journal_sends_once_more_with_the_same_id() {
    let env = env(4).await;
    let (url, hook) = receiver(Vec::new()).await;
    let args = env.research(&[&format!("deliver_webhook={url}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cmd = env.cmd(&args);
    // Halts right after the receiver answered 200, before the attempt is journaled.
    let id = tokio::task::spawn_blocking(move || {
        common::run_until_crash(cmd, "deliver_report:webhook-accepted")
    })
    .await
    .unwrap();
    assert_eq!(hook.got.lock().unwrap().len(), 1);
    let s = env.session(&id).await;
    assert_eq!(
        s["status"], "completed",
        "the research was done before delivery"
    );
    assert_eq!(s["delivery"]["webhook"]["status"], "pending");

    // Resumed: the acknowledgement was lost with the process, so it is sent again, with the
    // same delivery id (a receiver that keeps ids sees a duplicate and drops it); then it is
    // journaled as delivered.
    let out = ok(&env.run(vec!["resume".into(), id.clone()]).await);
    assert!(
        out.contains("delivery webhook: delivered after 1 attempt"),
        "{out}"
    );
    let got = hook.got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "at most one more delivery");
    assert_eq!(
        header(&got[0], "x-fathom-delivery"),
        header(&got[1], "x-fathom-delivery")
    );
    assert!(got.iter().all(signed_by_secret));
    assert_eq!(
        env.session(&id).await["delivery"]["webhook"]["status"],
        "delivered"
    );
    // Once journaled, never again.
    ok(&env.run(vec!["resume".into(), id.clone()]).await);
    assert_eq!(hook.got.lock().unwrap().len(), 2);

    // Killed just after the acknowledgement was journaled: resumed, nothing is sent again.
    let (url, hook) = receiver(Vec::new()).await;
    let args = env.research(&[&format!("deliver_webhook={url}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cmd = env.cmd(&args);
    let id = tokio::task::spawn_blocking(move || common::run_until_crash(cmd, "deliver_report:1"))
        .await
        .unwrap();
    assert_eq!(hook.got.lock().unwrap().len(), 1);
    let out = ok(&env.run(vec!["resume".into(), id.clone()]).await);
    assert!(
        out.contains("delivery webhook: delivered after 1 attempt"),
        "{out}"
    );
    assert_eq!(
        hook.got.lock().unwrap().len(),
        1,
        "exactly once after the acknowledgement"
    );
}

// ---- The SMTP server ----

#[derive(Debug, Clone, Default)]
struct Mail {
    from: String,
    to: Vec<String>,
    data: String,
}

#[derive(Default)]
struct Relay {
    mails: Mutex<Vec<Mail>>,
    logins: Mutex<Vec<(String, String)>>,
}

/// An SMTP server on loopback speaking enough of RFC 5321 for a client: EHLO (offering
/// AUTH PLAIN), AUTH PLAIN, MAIL FROM, RCPT TO, DATA (dot-unstuffed), RSET, NOOP, QUIT. It
/// accepts the login `fathom`/`letmein` and refuses any other with 535.
async fn relay() -> (u16, Arc<Relay>) {
    let state = Arc::new(Relay::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let _ = smtp_session(stream, s).await;
            });
        }
    });
    (port, state)
}

async fn smtp_session(stream: tokio::net::TcpStream, relay: Arc<Relay>) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"220 loopback ESMTP test relay\r\n").await?;
    let mut mail = Mail::default();
    let mut line = String::new();
    // A client sends a handful of commands per message; the bound only guards the test.
    for _ in 0..200 {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") {
            b"250-loopback greets you\r\n250-AUTH PLAIN\r\n250 8BITMIME\r\n"
        } else if upper.starts_with("HELO") {
            b"250 loopback\r\n"
        } else if let Some(b64) = cmd.get(11..).filter(|_| upper.starts_with("AUTH PLAIN ")) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap_or_default();
            let parts: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            let (user, pass) = (
                parts.get(1).cloned().unwrap_or_default(),
                parts.get(2).cloned().unwrap_or_default(),
            );
            relay
                .logins
                .lock()
                .unwrap()
                .push((user.clone(), pass.clone()));
            if user == "fathom" && pass == "letmein" {
                b"235 2.7.0 Authentication successful\r\n"
            } else {
                b"535 5.7.8 Authentication credentials invalid\r\n"
            }
        } else if upper.starts_with("MAIL FROM:") {
            mail = Mail {
                from: cmd[10..].to_string(),
                ..Default::default()
            };
            b"250 2.1.0 OK\r\n"
        } else if upper.starts_with("RCPT TO:") {
            mail.to.push(cmd[8..].trim().to_string());
            b"250 2.1.5 OK\r\n"
        } else if upper == "DATA" {
            w.write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = String::new();
            loop {
                line.clear();
                if r.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                // Dot-unstuffing (RFC 5321 4.5.2).
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            mail.data = data;
            relay.mails.lock().unwrap().push(mail.clone());
            b"250 2.0.0 OK queued\r\n"
        } else if upper == "RSET" || upper == "NOOP" {
            b"250 2.0.0 OK\r\n"
        } else if upper == "QUIT" {
            w.write_all(b"221 2.0.0 Bye\r\n").await?;
            return Ok(());
        } else {
            b"502 5.5.2 Command not recognized\r\n"
        };
        w.write_all(reply).await?;
    }
    Ok(())
}

/// One MIME part: its headers (unfolded, names lower-case) and its raw body.
struct Part {
    headers: Vec<(String, String)>,
    body: String,
}

impl Part {
    fn parse(raw: &str) -> Part {
        let raw = raw.replace("\r\n", "\n");
        let (head, body) = raw.split_once("\n\n").unwrap_or((&raw, ""));
        let mut headers: Vec<(String, String)> = Vec::new();
        for l in head.lines() {
            if l.starts_with([' ', '\t']) {
                if let Some(last) = headers.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(l.trim());
                }
            } else if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        Part {
            headers,
            body: body.to_string(),
        }
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The parts of a multipart part, else itself, depth first.
    fn leaves(self) -> Vec<Part> {
        let ct = self.header("content-type").to_string();
        let Some(b) = ct
            .split(';')
            .find_map(|p| p.trim().strip_prefix("boundary="))
        else {
            return vec![self];
        };
        let boundary = format!("--{}", b.trim_matches('"'));
        self.body
            .split(&boundary)
            .skip(1)
            .take_while(|p| !p.starts_with("--"))
            .flat_map(|p| Part::parse(p.trim_start_matches('\n')).leaves())
            .collect()
    }

    /// The body, its transfer encoding undone (base64, quoted-printable, or none).
    fn decoded(&self) -> Vec<u8> {
        match self
            .header("content-transfer-encoding")
            .to_ascii_lowercase()
            .as_str()
        {
            "base64" => {
                let compact: String = self.body.split_whitespace().collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .unwrap()
            }
            "quoted-printable" => {
                let mut out = Vec::new();
                let text = self.body.replace("=\n", "");
                let b = text.as_bytes();
                let mut i = 0;
                while i < b.len() {
                    if b[i] == b'=' && i + 2 < b.len() {
                        let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                        out.push(u8::from_str_radix(hex, 16).unwrap());
                        i += 3;
                    } else {
                        out.push(b[i]);
                        i += 1;
                    }
                }
                out
            }
            _ => self.body.as_bytes().to_vec(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_is_emailed_as_html_with_its_pdf_attached() {
    let mut env = env(3).await;
    let (port, relay) = relay().await;
    env.vars.push((
        "FATHOM_SMTP_URL".into(),
        format!("smtp://fathom:letmein@127.0.0.1:{port}"),
    ));
    env.vars.push((
        "FATHOM_SMTP_FROM".into(),
        "Fathom <fathom@example.org>".into(),
    ));
    let out = ok(&env
        .run(env.research(&["deliver_email=[\"ana@example.org\", \"ben@example.org\"]"]))
        .await);
    let id = session_of(&out);
    assert!(
        out.contains("delivery email: delivered after 1 attempt"),
        "{out}"
    );
    let mails = relay.mails.lock().unwrap().clone();
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    assert!(mail.from.contains("fathom@example.org"), "{}", mail.from);
    assert_eq!(mail.to, vec!["<ana@example.org>", "<ben@example.org>"]);
    assert_eq!(
        relay.logins.lock().unwrap().clone(),
        vec![("fathom".to_string(), "letmein".to_string())]
    );

    let s = env.session(&id).await;
    let d = &s["delivery"]["email"];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64()),
        (Some("delivered"), Some(1)),
        "{d}"
    );
    let message = Part::parse(&mail.data);
    assert_eq!(
        message.header("message-id"),
        d["delivery_id"].as_str().unwrap()
    );
    assert!(
        message.header("subject").contains("Research report"),
        "{}",
        message.header("subject")
    );
    let report = s["report_markdown"].as_str().unwrap();
    let headings: Vec<&str> = report
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    assert!(headings.len() >= 3, "{report}");

    let parts = message.leaves();
    let html = parts
        .iter()
        .find(|p| p.header("content-type").starts_with("text/html"))
        .expect("an HTML body");
    let html = String::from_utf8(html.decoded()).unwrap();
    assert!(html.contains("<h1"), "{html}");
    for h in &headings {
        assert!(
            html.contains(&format!(">{h}</h2>")),
            "heading '{h}' in the HTML body"
        );
    }
    let pdf = parts
        .iter()
        .find(|p| p.header("content-type").starts_with("application/pdf"))
        .expect("a PDF attachment");
    assert!(
        pdf.header("content-disposition")
            .contains(&format!("fathom-report-{id}.pdf")),
        "{}",
        pdf.header("content-disposition")
    );
    let bytes = pdf.decoded();
    assert!(bytes.starts_with(b"%PDF-"));
    let text = fathom_parse::pdf::extract(&bytes, 100).expect("the attachment is a readable PDF");
    let text = text
        .pages
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for h in &headings {
        assert!(text.contains(h), "heading '{h}' in the PDF: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_smtp_login_is_recorded_as_failed_and_the_research_completes() {
    let mut env = env(3).await;
    let (port, relay) = relay().await;
    env.vars.push((
        "FATHOM_SMTP_URL".into(),
        format!("smtp://fathom:wrong-password@127.0.0.1:{port}"),
    ));
    env.vars
        .push(("FATHOM_SMTP_FROM".into(), "fathom@example.org".into()));
    let out = ok(&env
        .run(env.research(&["deliver_email=[\"ana@example.org\"]"]))
        .await);
    let id = session_of(&out);
    assert!(
        out.contains("delivery email: failed after 1 attempt"),
        "{out}"
    );
    assert!(relay.mails.lock().unwrap().is_empty());
    // Refused for good (535): not tried again.
    assert_eq!(relay.logins.lock().unwrap().len(), 1);
    let s = env.session(&id).await;
    assert_eq!(s["status"], "completed");
    let d = &s["delivery"]["email"];
    assert_eq!(d["status"], "failed", "{d}");
    let reason = d["reason"].as_str().unwrap();
    assert!(reason.contains("535"), "{reason}");
    assert!(
        !reason.contains("wrong-password"),
        "no secret in the reason: {reason}"
    );
    assert!(std::fs::read_to_string(env.work.join(format!(".fathom/reports/{id}.md"))).is_ok());
}
