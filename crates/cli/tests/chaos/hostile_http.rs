//! Hostile HTTP input and access control, against real `fathom serve` processes on loopback:
//! a schemathesis fuzz of every operation of the OpenAPI document (stateful phase included) on
//! SQLite and Postgres, with and without the API key; NUL characters, oversized, deeply nested
//! and non-UTF-8 bodies, a huge header and `..` paths; the API key on every route; the refusal
//! to listen beyond loopback without a key; and the CORS policy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fathom_store::Dialect;
use serde_json::{Value, json};

use crate::figures;
use crate::served::{Env, Served, env, http, wait_until};

const KEY: &str = "k3y-that-must-never-be-echoed-7f1c";
const D: &str = "/deployments/deep-research";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's config with runs that need no approval, so the fuzz's `run` calls end.
fn no_gate_config(env: &mut Env) {
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("configs/config.json")).unwrap())
            .unwrap();
    config["research"]["defaults"]["require_approval"] = json!(false);
    let path = env.tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    env.config = Some(path);
}

fn serve(env: &Env, extra: &[&str]) -> Served {
    let mut args = vec!["serve", "--worker-id", "hostile"];
    args.extend_from_slice(extra);
    Served::spawn(env, &args, &[("RUST_LOG", "info")], "serving deployment")
}

fn dialect_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "SQLite",
        Dialect::Postgres => "Postgres",
    }
}

// ---- The fuzz ----

/// What one fuzz run saw, counted from the log the hooks write (one JSON line per request).
#[derive(Debug, Default)]
struct FuzzCount {
    cases: usize,
    /// Requests with a method the path does not document.
    other_methods: usize,
    server_errors: Vec<String>,
    exempt_500: usize,
    undocumented: Vec<String>,
    valid_refused: Vec<String>,
}

fn count_fuzz(log: &str, doc: &Value) -> FuzzCount {
    let mut c = FuzzCount::default();
    for line in log.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        c.cases += 1;
        let status = r["status"].as_u64().unwrap_or(0);
        let method = r["method"].as_str().unwrap_or("").to_ascii_lowercase();
        let path = r["path"].as_str().unwrap_or("");
        let what = format!(
            "{} {path} -> {status}: {}",
            method.to_uppercase(),
            r["body"]
        );
        if status >= 500 {
            if r["exempt"] == true {
                c.exempt_500 += 1;
            } else {
                c.server_errors.push(what.clone());
            }
        }
        let documented = match doc["paths"][path][&method]["responses"].as_object() {
            Some(responses) => responses.contains_key(&status.to_string()),
            // A probe with a method the path does not have: 405, or for OPTIONS (CORS
            // preflights) an empty 200.
            None => {
                c.other_methods += 1;
                status == 405 || (method == "options" && status == 200)
            }
        };
        if !documented {
            c.undocumented.push(what.clone());
        }
        if r["mode"] == "positive" && matches!(status, 400 | 413 | 415 | 422) {
            c.valid_refused.push(what);
        }
    }
    c
}

fn venv_bin(name: &str) -> PathBuf {
    let bin = repo().join("pyproject-compat/clients/.venv/bin").join(name);
    assert!(
        bin.is_file(),
        "{} is missing: scripts/test.sh installs it (pip install -r pyproject-compat/clients/requirements.txt)",
        bin.display()
    );
    bin
}

async fn fuzz(dialect: Dialect, with_key: bool) {
    let mut env = env(dialect).await;
    no_gate_config(&mut env);
    let server = serve(&env, if with_key { &["--api-key", KEY] } else { &[] });
    let scenario = format!(
        "fuzz, {}, {}",
        dialect_name(dialect),
        if with_key { "with key" } else { "no key" }
    );
    let client = http();
    let mut doc_request = client.get(format!("{}/openapi.json", server.root));
    if with_key {
        doc_request = doc_request.bearer_auth(KEY);
    }
    let doc: Value = doc_request.send().await.unwrap().json().await.unwrap();
    let log = env.tmp.path().join("fuzz.jsonl");
    let schema_file = env.tmp.path().join("openapi.json");
    std::fs::write(&schema_file, doc.to_string()).unwrap();
    // Runs are started of `research-metadata`, whose start event is any object, so that the
    // stateful phase follows real handlers (a random workflow name only finds 404s, and
    // `deep-research`'s start event is checked against its settings, which the document
    // cannot say per workflow).
    let config = env.tmp.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        "[parameters]\n\"path.name\" = \"research-metadata\"\n",
    )
    .unwrap();
    let seconds = figures::scale(25, 600);
    let mut cmd = Command::new(venv_bin("schemathesis"));
    cmd.current_dir(env.tmp.path())
        .arg("--config-file")
        .arg(&config)
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("PYTHONPATH", repo().join("crates/cli/tests/fixtures"))
        .env("FATHOM_FUZZ_LOG", &log)
        .args(["run"])
        .arg(&schema_file)
        .args(["--url", &server.root])
        .args([
            "--checks",
            "fathom_no_server_error,status_code_conformance,positive_data_acceptance",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            &figures::scale(25, 500).to_string(),
            "--max-time",
            &seconds.to_string(),
            "--request-timeout",
            "60",
            "--generation-database",
            "none",
            "--workers",
            "1",
            "--no-color",
        ]);
    if with_key {
        cmd.args(["-H", &format!("Authorization: Bearer {KEY}")]);
    }
    // The short suite (CI) replays one seed, so that its cases are the same on every run and
    // a failure is reproducible; the long suite draws new ones each time.
    if !figures::long() {
        cmd.args(["--seed", "20261125"]);
    }
    // The run is bounded by --max-time; the process by this deadline on top.
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start schemathesis");
        let deadline = std::time::Instant::now() + Duration::from_secs(seconds + 240);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let count = count_fuzz(&std::fs::read_to_string(&log).unwrap_or_default(), &doc);
    let held = count.server_errors.is_empty()
        && count.undocumented.is_empty()
        && count.valid_refused.is_empty()
        && out.status.success();
    figures::record(
        &scenario,
        "cases / 5xx / undocumented status / valid refused (500s of failed or cancelled handlers, exempt)",
        format!(
            "{} / {} / {} / {} ({})",
            count.cases,
            count.server_errors.len(),
            count.undocumented.len(),
            count.valid_refused.len(),
            count.exempt_500
        ),
        "- / 0 / 0 / 0",
        held,
    );
    assert!(
        count.cases >= 100,
        "{scenario}: only {} cases ran: {said}",
        count.cases
    );
    assert!(
        held,
        "{scenario}: server errors {:#?}\nundocumented {:#?}\nvalid refused {:#?}\nschemathesis: {said}",
        &count.server_errors[..count.server_errors.len().min(10)],
        &count.undocumented[..count.undocumented.len().min(10)],
        &count.valid_refused[..count.valid_refused.len().min(10)],
    );
    // With the key set, no request the fuzz made without it got through (it sent it on all).
    let logged = server.output_so_far().join("\n");
    assert!(
        !logged.contains(KEY),
        "{scenario}: the API key is in the server's output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_sqlite_without_key() {
    fuzz(Dialect::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_sqlite_with_key() {
    fuzz(Dialect::Sqlite, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_postgres_without_key() {
    fuzz(Dialect::Postgres, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_postgres_with_key() {
    fuzz(Dialect::Postgres, true).await;
}

// ---- Hostile input, one by one ----

/// Items in a collection, read through the API.
async fn items(
    client: &reqwest::Client,
    root: &str,
    deployment: &str,
    collection: &str,
) -> Vec<Value> {
    let found: Value = client
        .post(format!("{root}/api/v1/beta/agent-data/:search"))
        .json(&json!({"deployment_name": deployment, "collection": collection, "page_size": 1000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    found["items"].as_array().cloned().unwrap_or_default()
}

async fn handler_count(client: &reqwest::Client, root: &str) -> usize {
    let list: Value = client
        .get(format!("{root}/handlers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["handlers"].as_array().map_or(0, Vec::len)
}

/// Sends raw bytes as one HTTP/1.1 request and returns the status code of the answer (0 when
/// the connection was closed without one).
fn raw_request(root: &str, request: &[u8]) -> u16 {
    let addr = root.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The server may answer and close before it has read everything sent: the answer is read
    // while the request is still being written, so it is not lost with the connection.
    let mut writer = stream.try_clone().unwrap();
    let request = request.to_vec();
    let writing = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let _ = writing.join();
    let text = String::from_utf8_lossy(&answer);
    // An interim `100 Continue` is not the answer.
    let text = text
        .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
        .unwrap_or(&text);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

async fn hostile_input(dialect: Dialect) {
    let mut env = env(dialect).await;
    no_gate_config(&mut env);
    let server = serve(&env, &[]);
    let root = server.root.clone();
    let client = http();
    let db = dialect_name(dialect);
    let agent_data = format!("{root}/api/v1/beta/agent-data");
    // What raw requests name in `Host` (anything else is refused on loopback).
    let addr = root.trim_start_matches("http://").to_string();

    // NUL in Agent Data: stored faithfully, in values and keys, found by a filter on it, and
    // read back the same on both databases.
    let data = json!({"note": "a\u{0}b", "k\u{0}ey": ["\u{0}", "\u{10FFFF}0", "plain"], "n": 1});
    let created = client
        .post(&agent_data)
        .json(&json!({"deployment_name": "nul", "data": data}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200, "{db}: create with NUL");
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["data"], data);
    let id = created["id"].as_str().unwrap();
    let read: Value = client
        .get(format!("{agent_data}/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read["data"], data, "{db}: NUL read back as given");
    let found: Value = client
        .post(format!("{agent_data}/:search"))
        .json(&json!({"deployment_name": "nul", "filter": {"note": {"eq": "a\u{0}b"}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        found["items"].as_array().map(Vec::len),
        Some(1),
        "{db}: {found}"
    );
    let updated = client
        .put(format!("{agent_data}/{id}"))
        .json(&json!({"data": {"note": "\u{0}"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), 200);
    assert_eq!(
        updated.json::<Value>().await.unwrap()["data"]["note"],
        "\u{0}"
    );
    // A name cannot hold one: refused, naming the field; nothing stored.
    for (field, url, body) in [
        (
            "deployment_name",
            agent_data.clone(),
            json!({"deployment_name": "n\u{0}ul", "data": {}}),
        ),
        (
            "collection",
            agent_data.clone(),
            json!({"deployment_name": "nul", "collection": "c\u{0}", "data": {}}),
        ),
        (
            "project_id",
            format!("{agent_data}?project_id=p%00"),
            json!({"deployment_name": "nul", "data": {}}),
        ),
    ] {
        let refused = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(refused.status(), 400, "{db}: {field}");
        let detail: Value = refused.json().await.unwrap();
        assert!(
            detail["detail"].as_str().unwrap().contains(field),
            "{db}: {detail}"
        );
    }
    assert_eq!(
        items(&client, &root, "nul", "default").await.len(),
        1,
        "{db}"
    );
    // A path holding one names nothing.
    let missing = client
        .get(format!("{root}/handlers/a%00b"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404, "{db}");

    // NUL in a start event (the question) and in a sent event: stored faithfully; the
    // finished session keeps the question as asked. A setting holding one is refused by name.
    let question = "How does ownership\u{0} work in Rust?";
    let started = client
        .post(format!("{root}{D}/workflows/deep-research/run-nowait"))
        .json(&json!({"start_event": {"query": question, "settings": {"require_approval": true}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 200, "{db}: start with NUL");
    let run: Value = started.json().await.unwrap();
    let run_id = run["handler_id"].as_str().unwrap().to_string();
    let sent = client
        .post(format!("{root}{D}/events/{run_id}"))
        .json(&json!({"event": {"type": "ApproveEvent", "value": {"approved": true, "feedback": "ok\u{0}"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200, "{db}: send with NUL");
    let status_url = format!("{root}/handlers/{run_id}");
    wait_until("the run with a NUL in its question completes", || {
        let (client, url) = (client.clone(), status_url.clone());
        async move {
            let h: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
            h["status"] == "completed"
        }
    })
    .await;
    let sessions = items(&client, &root, "_public", "research-sessions").await;
    assert!(
        sessions.iter().any(|s| s["data"]["query"] == question),
        "{db}: the session keeps the question with its NUL: {sessions:?}"
    );
    let bad_setting = client
        .post(format!("{root}{D}/workflows/deep-research/run-nowait"))
        .json(&json!({"start_event": {"query": "q", "settings": {"language": "e\u{0}n"}}}))
        .send()
        .await
        .unwrap();
    let status = bad_setting.status();
    let detail: Value = bad_setting.json().await.unwrap();
    assert!(
        status.is_client_error() && detail["detail"].as_str().unwrap().contains("language"),
        "{db}: {status} {detail}"
    );

    // Bodies refused before anything is stored.
    let before_items = items(&client, &root, "hostile", "default").await.len();
    let before_runs = handler_count(&client, &root).await;
    let deep = format!(
        "{{\"deployment_name\": \"hostile\", \"data\": {{\"x\": {}{}}}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let mut not_utf8 = br#"{"deployment_name": "hostile", "data": {"x": ""#.to_vec();
    not_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    not_utf8.extend_from_slice(br#""}}"#);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("nested 10,000 deep", deep.into_bytes()),
        ("invalid UTF-8", not_utf8),
    ];
    for (what, body) in bodies {
        for url in [
            agent_data.clone(),
            format!("{root}{D}/workflows/deep-research/run-nowait"),
        ] {
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let detail: Value = resp.json().await.unwrap_or(Value::Null);
            assert!(
                status.is_client_error() && detail["detail"].is_string(),
                "{db}: a body {what} to {url}: {status} {detail}"
            );
        }
    }
    // A body over the limit (1 MiB by default) is refused from its length, before it is
    // read: the client asks whether to send it (a server that answers and closes while a
    // client still sends may have the answer lost with the connection).
    for path in [
        "/api/v1/beta/agent-data",
        "/deployments/deep-research/workflows/deep-research/run-nowait",
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
            2 * 1024 * 1024
        );
        let status = raw_request(&root, request.as_bytes());
        assert_eq!(status, 413, "{db}: a 2 MiB body to {path}");
    }
    // A 1 MB header: refused (431) before any handler runs.
    let huge = format!(
        "POST /api/v1/beta/agent-data HTTP/1.1\r\nHost: {addr}\r\nX-Big: {}\r\nContent-Type: application/json\r\nContent-Length: 44\r\nConnection: close\r\n\r\n{{\"deployment_name\":\"hostile\",\"data\":{{\"a\":1}}}}",
        "a".repeat(1024 * 1024)
    );
    let status = raw_request(&root, huge.as_bytes());
    assert_eq!(status, 431, "{db}: a 1 MB header");
    // `..` towards the artifact routes, raw (a client would normalise it away).
    for path in [
        "/artifacts/../../etc/passwd",
        "/artifacts/..%2F..%2Fetc%2Fpasswd",
        "/artifacts/%2e%2e",
        "/deployments/deep-research/artifacts/..%2f..%2fCargo.toml",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let status = raw_request(&root, request.as_bytes());
        assert!(matches!(status, 400 | 404), "{db}: GET {path}: {status}");
    }
    assert_eq!(
        items(&client, &root, "hostile", "default").await.len(),
        before_items,
        "{db}: nothing stored"
    );
    assert_eq!(
        handler_count(&client, &root).await,
        before_runs,
        "{db}: no run started"
    );
    figures::record(
        &format!("hostile input, {db}"),
        "NUL stored faithfully / bodies, header, `..` refused with 4xx / stored after",
        "yes / 3 bodies (over the limit, 10,000 deep, not UTF-8) x 2 routes, 1 MB header, 4 paths / 0",
        "yes / all 4xx / 0",
        true,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_sqlite() {
    hostile_input(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_postgres() {
    hostile_input(Dialect::Postgres).await;
}

// ---- Access ----

/// Every route a client can call: each path and method of the OpenAPI document, at the root
/// and (the workflows API) under the deployment, and the router's own routes beside it.
fn every_route(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{file_id}", &"a".repeat(64))
            .replace("{deployment_name}", "deep-research")
            .replace(['{', '}'], "");
        for method in ops.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            routes.insert((method.clone(), concrete.clone()));
            if !concrete.starts_with("/api/") {
                routes.insert((method, format!("{D}{concrete}")));
            }
        }
    }
    for (method, path) in [
        ("GET", "/openapi.json"),
        ("GET", "/deployments/deep-research/openapi.json"),
        ("GET", "/metrics"),
        ("POST", "/mcp"),
        ("GET", "/health"),
        ("GET", "/healthz"),
        ("GET", "/livez"),
        ("GET", "/readyz"),
    ] {
        routes.insert((method.into(), path.into()));
    }
    routes
}

fn is_health(path: &str) -> bool {
    let tail = path.strip_prefix(D).unwrap_or(path);
    matches!(tail, "/health" | "/healthz" | "/livez" | "/readyz")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_health_needs_the_key() {
    let env = env(Dialect::Sqlite).await;
    let server = serve(&env, &["--api-key", KEY]);
    let client = http();
    let doc: Value = client
        .get(format!("{}/openapi.json", server.root))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let routes = every_route(&doc);
    let mut refused = 0;
    let mut bodies = Vec::new();
    for (method, path) in &routes {
        let url = format!("{}{path}", server.root);
        let method: reqwest::Method = method.parse().unwrap();
        let attempts = [
            ("no key", client.request(method.clone(), &url)),
            (
                "wrong key",
                client.request(method.clone(), &url).bearer_auth("wrong"),
            ),
            (
                "wrong key in the query",
                client.request(method.clone(), format!("{url}?api_key=wrong")),
            ),
            (
                "the key, cut short",
                client
                    .request(method.clone(), &url)
                    .bearer_auth(&KEY[..KEY.len() - 1]),
            ),
        ];
        for (how, request) in attempts {
            let resp = request
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let text = resp.text().await.unwrap();
            assert!(!text.contains(KEY), "{method} {path}: the key in a body");
            if is_health(path) {
                assert_ne!(status, 401, "{method} {path} ({how}) is open");
                continue;
            }
            assert_eq!(status, 401, "{method} {path} ({how}): {text}");
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            assert!(body["detail"].is_string(), "{method} {path}: {text}");
            refused += 1;
            bodies.push(text);
        }
        // With the key, the route is reached (whatever it then answers).
        let resp = client
            .request(method.clone(), &url)
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body("{}")
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap();
        assert_ne!(resp.status(), 401, "{method} {path} with the key");
    }
    // A run started with the key: its events do not hold it.
    let started: Value = client
        .post(format!(
            "{}{D}/workflows/deep-research/run-nowait",
            server.root
        ))
        .bearer_auth(KEY)
        .json(&json!({"start_event": {"query": "How does ownership work in Rust?"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["handler_id"].as_str().unwrap();
    let stream = client
        .get(format!(
            "{}{D}/events/{id}?sse=false&api_key={KEY}",
            server.root
        ))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // The run waits at the gate: read what it has streamed until the timeout cuts it.
    let mut events = String::new();
    let mut body = stream;
    while let Ok(Some(chunk)) = body.chunk().await {
        events.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        events.contains("decompose_query") || events.contains("AgentInput"),
        "{events}"
    );
    assert!(!events.contains(KEY), "the key in the run's events");
    let output = server.output_so_far().join("\n");
    assert!(!output.contains(KEY), "the key in the server's output");
    let open = routes.iter().filter(|(_, p)| is_health(p)).count();
    figures::record(
        "access, API key",
        "routes / refused without the right key (4 ways each) / open (health) / key seen in output, events, bodies",
        format!("{} / {refused} / {open} / 0", routes.len()),
        "- / 4 x (routes - health) / health only / 0",
        refused == 4 * (routes.len() - open),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_beyond_loopback_needs_a_key() {
    let env = env(Dialect::Sqlite).await;
    let refused = Command::new(env!("CARGO_BIN_EXE_fathom"))
        .current_dir(env.tmp.path())
        .env_remove("FATHOM_API_KEY")
        .env_remove("FATHOM_INSECURE_NO_AUTH")
        .args([
            "--database-url",
            &env.db,
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ])
        .arg("--corpus")
        .arg(&env.corpus)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "it started: {said}");
    assert_eq!(said.trim().lines().count(), 1, "a one-line error: {said}");
    assert!(
        said.contains("--insecure-no-auth") && said.contains("--api-key"),
        "{said}"
    );
    for extra in [&["--insecure-no-auth"][..], &["--api-key", KEY][..]] {
        let mut args = vec!["--host", "0.0.0.0"];
        args.extend_from_slice(extra);
        let served = serve(&env, &args);
        let health = http()
            .get(format!(
                "{}/livez",
                served.root.replace("0.0.0.0", "127.0.0.1")
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200, "{extra:?}");
    }
}

/// What a browser sees of a request from `origin`: the status, and the origin the answer
/// allows (none: the browser keeps the answer from the page).
async fn from_origin(request: reqwest::RequestBuilder, origin: &str) -> (u16, Option<String>) {
    let resp = request.header("Origin", origin).send().await.unwrap();
    let allowed = resp
        .headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_only_the_own_and_configured_origins() {
    let env = env(Dialect::Sqlite).await;
    let configured = "http://localhost:5173";
    let server = serve(&env, &["--cors-origin", configured]);
    let root = &server.root;
    let own = root.clone();
    let client = http();
    let run_url = format!("{root}{D}/workflows/deep-research/run-nowait");
    let mut rows = BTreeMap::new();
    for origin in [
        "https://evil.example",
        "null",
        "http://localhost:5174",
        configured,
        own.as_str(),
    ] {
        let allowed_origin = origin == configured || origin == own;
        let read = from_origin(client.get(format!("{root}/handlers")), origin).await;
        let write = from_origin(
            client
                .post(&run_url)
                .json(&json!({"start_event": {"query": "How does ownership work in Rust?"}})),
            origin,
        )
        .await;
        let preflight = from_origin(
            client
                .request(reqwest::Method::OPTIONS, &run_url)
                .header("Access-Control-Request-Method", "POST")
                .header(
                    "Access-Control-Request-Headers",
                    "content-type,authorization",
                ),
            origin,
        )
        .await;
        for (what, (status, allow)) in [
            ("read", &read),
            ("write", &write),
            ("preflight", &preflight),
        ] {
            if allowed_origin {
                assert!(status < &400, "{origin} {what}: {status}");
                assert_eq!(allow.as_deref(), Some(origin), "{origin} {what}");
            } else {
                assert_eq!(*status, 403, "{origin} {what}");
                assert_eq!(allow, &None, "{origin} {what}: no CORS allowance");
            }
        }
        rows.insert(origin.to_string(), allowed_origin);
    }
    // Two runs were started: by the configured origin and the server's own; none by others.
    let list: Value = client
        .get(format!("{root}/handlers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["handlers"].as_array().unwrap().len(), 2);
    // A page whose host name was made to resolve to 127.0.0.1 (DNS rebinding) is same-origin
    // with itself and sends no Origin on a GET: refused by the name it addresses.
    let port = root.rsplit(':').next().unwrap();
    for (host, want) in [
        ("evil.example", 403),
        ("localhost", 200),
        ("127.0.0.1", 200),
    ] {
        let request =
            format!("GET /handlers HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
        assert_eq!(raw_request(root, request.as_bytes()), want, "Host: {host}");
    }
    // Programs that send no Origin are not browsers: unaffected.
    assert_eq!(
        client
            .get(format!("{root}/handlers"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    figures::record(
        "access, CORS",
        "foreign origins refused (read, write, preflight) / allowed origins served / rebinding host refused",
        format!(
            "{} / {} / yes",
            rows.values().filter(|a| !**a).count(),
            rows.values().filter(|a| **a).count()
        ),
        "3 / 2 / yes",
        true,
    );
}
