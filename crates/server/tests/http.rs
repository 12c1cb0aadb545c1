//! The HTTP API end to end: a real server on loopback over SQLite and Postgres, driven with a
//! plain HTTP client and an SSE parser, as a frontend would.

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use fathom_engine::EngineConfig;
use fathom_engine::store::{RunStatus, RunStore};
use fathom_research::Research;
use fathom_server::{AppState, Deployment, ServerConfig};
use fathom_store::Dialect;
use fathom_testkit::db::{TestDb, fresh};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

const QUESTION: &str = "How does ownership work in Rust?";
const D: &str = "/deployments/deep-research";
const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    base: String,
    http: reqwest::Client,
    db: TestDb,
    _dir: tempfile::TempDir,
    stop: watch::Sender<bool>,
}

/// How a test server is set up.
struct Opts {
    dialect: Dialect,
    api_key: Option<&'static str>,
    /// Run the engine's worker (drive runs) in this server.
    drive: bool,
    /// The stream readers' poll interval.
    poll: Duration,
    /// Connect to this database instead of a fresh one (a second process on the same data).
    url: Option<String>,
}

impl Opts {
    fn new(dialect: Dialect) -> Opts {
        Opts {
            dialect,
            api_key: None,
            drive: true,
            poll: Duration::from_millis(50),
            url: None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn server(dialect: Dialect, api_key: Option<&'static str>) -> Server {
    server_with(Opts {
        api_key,
        ..Opts::new(dialect)
    })
    .await
}

async fn server_with(opts: Opts) -> Server {
    let db = match &opts.url {
        Some(url) => TestDb::open(url).await,
        None => fresh(opts.dialect).await,
    };
    let dir = tempfile::tempdir().unwrap();
    let corpus = fathom_testkit::fixtures::sample_corpus(dir.path()).await;
    let store = Arc::new(db.store.clone());
    let deps = fathom_testkit::offline_research_deps(corpus, store.clone());
    // The stream readers' poll interval is the engine's.
    let engine_config = EngineConfig {
        poll_interval: opts.poll,
        ..Default::default()
    };
    let research = Research::new(store.clone(), engine_config, deps);
    let config = ServerConfig {
        api_key: opts.api_key.map(String::from),
        // The origin of a UI served apart (a dev server), allowed beside the server's own.
        cors_origins: vec!["http://localhost:5173".into()],
        heartbeat: Duration::from_millis(300),
        body_limit: 64 * 1024,
        ..ServerConfig::new(Deployment::load(None).unwrap())
    };
    let state = AppState::new(research.engine.clone(), store.clone(), store, config).unwrap();
    let app = fathom_server::router(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stop_rx) = watch::channel(false);
    let mut shut = stop_rx.clone();
    // Served as `fathom serve` serves it.
    tokio::spawn(fathom_server::serve(listener, app, async move {
        let _ = shut.changed().await;
    }));
    if opts.drive {
        tokio::spawn(research.engine.clone().run_worker(stop_rx));
    }
    if let Some(listening) = db.store.relay_changes(research.engine.clone()) {
        let mut stopped = stop.subscribe();
        tokio::spawn(async move {
            let _ = stopped.changed().await;
            listening.abort();
        });
    }
    Server {
        base,
        http: fathom_fetch::client_builder()
            .timeout(DEADLINE)
            .build()
            .unwrap(),
        db,
        _dir: dir,
        stop,
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn call(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, body)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(self.http.get(self.url(path))).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(self.http.post(self.url(path)).json(&body)).await
    }

    async fn start(&self, query: &str) -> String {
        let (status, body) = self
            .post(
                &format!("{D}/workflows/deep-research/run-nowait"),
                json!({"start_event": {"query": query}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "running");
        body["handler_id"].as_str().unwrap().to_string()
    }

    /// An SSE stream of a run: (id, envelope) pairs.
    async fn sse(
        &self,
        id: &str,
        query: &str,
        last_event_id: Option<i64>,
    ) -> impl futures_util::Stream<Item = (i64, Value)> + Unpin + use<> {
        let mut req = self.http.get(self.url(&format!("{D}/events/{id}{query}")));
        if let Some(last) = last_event_id {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Box::pin(resp.bytes_stream().eventsource().map(|ev| {
            let ev = ev.expect("SSE frame");
            (
                ev.id.parse().expect("numeric id"),
                serde_json::from_str(&ev.data).unwrap(),
            )
        }))
    }
}

/// Reads until an event matches `pred`; returns everything read, the match last.
async fn read_until(
    stream: &mut (impl futures_util::Stream<Item = (i64, Value)> + Unpin),
    pred: impl Fn(&Value) -> bool,
) -> Vec<(i64, Value)> {
    let mut seen = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some((id, ev)) = stream.next().await {
            let done = pred(&ev);
            seen.push((id, ev));
            if done {
                return;
            }
        }
        panic!("stream ended before the event arrived; saw {seen:?}");
    })
    .await
    .expect("event within the deadline");
    seen
}

/// Two processes on one Postgres, as two `fathom serve` instances behind a load balancer: one
/// drives the run; the other serves the client and polls only once a minute. The client still
/// follows the run through the gate to its result at once: the driver's commits NOTIFY, and
/// the serving process wakes its stream on the LISTEN side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_served_by_another_process_is_woken_by_notify() {
    let reader = server_with(Opts {
        drive: false,
        poll: Duration::from_secs(60),
        ..Opts::new(Dialect::Postgres)
    })
    .await;
    let _driver = server_with(Opts {
        url: Some(reader.db.url.clone()),
        ..Opts::new(Dialect::Postgres)
    })
    .await;
    let id = reader.start(QUESTION).await;
    let mut stream = reader.sse(&id, "", None).await;
    // Well inside the reader's 60 s poll: only a notice can bring these events this soon.
    let soon = Duration::from_secs(20);
    let planned = tokio::time::timeout(soon, read_until(&mut stream, is_plan))
        .await
        .expect("the plan arrived without waiting for a poll");
    assert_eq!(planned[0].0, 0);
    let approve = json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
    let (status, _) = reader.post(&format!("{D}/events/{id}"), approve).await;
    assert_eq!(status, 200);
    let rest = tokio::time::timeout(soon, read_until(&mut stream, is_stop))
        .await
        .expect("the result arrived without waiting for a poll");
    assert_eq!(rest.last().unwrap().1["type"], "ResearchResult");
    let ids: Vec<i64> = planned.iter().chain(&rest).map(|(i, _)| *i).collect();
    assert_eq!(ids, (0..ids.len() as i64).collect::<Vec<_>>(), "gap-free");
}

fn is_plan(ev: &Value) -> bool {
    ev["type"] == "ToolCallResult" && ev["value"]["tool_name"] == "decompose_query"
}

fn is_stop(ev: &Value) -> bool {
    ev["type"] == "StopEvent"
        || ev["types"]
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x == "StopEvent"))
}

async fn gate_reject_edit_approve(dialect: Dialect) {
    let s = server(dialect, None).await;
    let id = s.start(QUESTION).await;
    let mut stream = s.sse(&id, "", None).await;
    let first = read_until(&mut stream, is_plan).await;
    assert_eq!(first[0].0, 0, "replay starts at the run's first event");

    // A rejection with feedback re-plans; sent twice with one key, it applies once.
    let reject = json!({"event": {"type": "ApproveEvent",
        "value": {"approved": false, "feedback": "focus on lifetimes"}}});
    for _ in 0..2 {
        let (status, body) = s
            .call(
                s.http
                    .post(s.url(&format!("{D}/events/{id}")))
                    .header("Idempotency-Key", "reject-1")
                    .json(&reject),
            )
            .await;
        assert_eq!((status, &body), (200, &json!({"status": "sent"})));
    }
    let second = read_until(&mut stream, is_plan).await;
    let plan = second.last().unwrap().1["value"]["tool_output"]["raw_output"].clone();
    let outline: Vec<String> = serde_json::from_value(plan["outline"].clone()).unwrap();
    assert!(
        outline.iter().any(|s| s.contains("Lifetimes")),
        "{outline:?}"
    );

    // The edited plan is what runs: two sections only.
    let mut edited = plan.clone();
    edited["outline"] = json!(["Overview", "Lifetimes"]);
    let approve = json!({"event": {"type": "ApproveEvent", "qualified_name": "ApproveEvent",
        "types": [], "value": {"approved": true, "feedback": null, "plan": edited}}, "step": null});
    let send_approve = |key: &'static str| {
        s.call(
            s.http
                .post(s.url(&format!("{D}/events/{id}")))
                .header("Idempotency-Key", key)
                .json(&approve),
        )
    };
    let (status, _) = send_approve("approve-1").await;
    assert_eq!(status, 200);
    let rest = read_until(&mut stream, is_stop).await;
    // The approval commits with the decision said to the planner (who, when, which plan;
    // nobody's without keys), then an AgentInput for the research phase, carrying the plan.
    assert_eq!(rest[0].1["type"], "AgentInput");
    let decision = &rest[0].1["value"]["input"][0]["additional_kwargs"]["decision"];
    assert_eq!(decision["action"], "approved");
    assert_eq!(decision["by"], Value::Null);
    assert_eq!(decision["plan_round"], 2);
    assert_eq!(decision["edited"], true);
    assert_eq!(rest[1].1["type"], "AgentInput");
    assert_eq!(rest[1].1["value"]["current_agent_name"], "researcher");
    let handed = rest[1].1["value"]["input"][0]["blocks"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        handed.contains("Lifetimes") && !handed.contains("Examples"),
        "{handed}"
    );
    assert!(
        tokio::time::timeout(DEADLINE, stream.next())
            .await
            .unwrap()
            .is_none(),
        "the stream closes after the stop event"
    );
    // A retry of the approval the run took is answered as the approval was, though the run
    // has ended since; a new decision is refused.
    let (status, body) = send_approve("approve-1").await;
    assert_eq!((status, &body), (200, &json!({"status": "sent"})));
    let (status, body) = send_approve("approve-2").await;
    assert_eq!(
        (status, body["detail"].as_str()),
        (409, Some("Workflow already completed"))
    );

    let all: Vec<(i64, Value)> = first.into_iter().chain(second).chain(rest).collect();
    let ids: Vec<i64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        ids,
        (0..ids.len() as i64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let plans = all.iter().filter(|(_, e)| is_plan(e)).count();
    assert_eq!(plans, 2, "the duplicate rejection was applied once");
    let result = &all.last().unwrap().1;
    assert_eq!(result["type"], "ResearchResult");
    assert_eq!(result["types"], json!(["StopEvent"]));
    let value = &result["value"];
    assert_eq!(value["status"], "completed");
    assert_eq!(value["research_id"], id.as_str());
    assert_eq!(value["plan"]["outline"], json!(["Overview", "Lifetimes"]));
    let report = value["report_markdown"].as_str().unwrap();
    assert!(
        report.contains("## Lifetimes") && !report.contains("## Examples"),
        "{report}"
    );
    assert!(report.contains("[1]"), "cited: {report}");
    assert!(!value["sources"].as_array().unwrap().is_empty());

    let (status, handler) = s.get(&format!("{D}/handlers/{id}")).await;
    assert_eq!(
        (status, handler["status"].as_str()),
        (200, Some("completed"))
    );
    assert_eq!(handler["result"], *result);
    assert!(handler["completed_at"].is_string());

    // Replay: NDJSON from the start gives the same events; a consumed stream is 204.
    let nd = s
        .http
        .get(s.url(&format!("{D}/events/{id}?sse=false")))
        .send()
        .await
        .unwrap();
    assert_eq!(nd.headers()["content-type"], "application/x-ndjson");
    let lines: Vec<Value> = nd
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        all.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>()
    );
    let last = all.len() - 1;
    let tail = s
        .get(&format!("{D}/events/{id}?after_sequence={last}"))
        .await;
    assert_eq!(tail.0, 204);
    let (status, body) = s
        .post(
            &format!("{D}/events/{id}"),
            json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}}),
        )
        .await;
    assert_eq!(
        (status, body["detail"].as_str()),
        (409, Some("Workflow already completed"))
    );

    // The report and every fetched source are downloadable by content address, inert.
    let report_id = value["report_file_id"].as_str().unwrap();
    let resp = s
        .http
        .get(s.url(&format!("{D}/artifacts/{report_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-security-policy"],
        "sandbox; default-src 'none'"
    );
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    assert_eq!(resp.text().await.unwrap(), report);

    // The session is saved in the research collection, for a frontend to reload.
    let (status, found) = s
        .post(
            "/api/v1/beta/agent-data/:search",
            json!({"deployment_name": "_public", "collection": "research-sessions",
                   "filter": {"research_id": {"eq": id}}, "include_total": true}),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["total_size"], 1);
    let session = &found["items"][0]["data"];
    assert_eq!(session["status"], "completed");
    assert_eq!(session["report_markdown"], value["report_markdown"]);
}

/// A connection as a browser's EventSource or a proxy uses it, read byte by byte: the event
/// stream's response is well-formed HTTP/1.1 (chunked, dated), ends with its run, and the same
/// connection then serves the client's next requests (the stream again; a run's status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_connection_serves_on_after_its_stream() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let s = server(Dialect::Sqlite, None).await;
    let id = s.start(QUESTION).await;
    let host = s.base.trim_start_matches("http://").to_string();
    let mut conn = BufReader::new(tokio::net::TcpStream::connect(&host).await.unwrap());

    /// Reads a response head: the status code and the headers, names lower-cased.
    async fn head(conn: &mut BufReader<tokio::net::TcpStream>) -> (u16, Vec<(String, String)>) {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let status: u16 = line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|l| l.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP/1.1 status line: {line:?}"));
        let mut headers = Vec::new();
        loop {
            line.clear();
            conn.read_line(&mut line).await.unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                return (status, headers);
            }
            let (name, value) = l.split_once(':').expect("a header line");
            headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// Reads one chunk of a chunked body and the CRLF after it; empty at the body's end.
    async fn chunk(conn: &mut BufReader<tokio::net::TcpStream>) -> Vec<u8> {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let len = usize::from_str_radix(line.trim_end(), 16)
            .unwrap_or_else(|_| panic!("not a chunk size: {line:?}"));
        let mut data = vec![0u8; len + 2];
        conn.read_exact(&mut data).await.unwrap();
        assert_eq!(&data[len..], b"\r\n", "a chunk ends with CRLF");
        data.truncate(len);
        data
    }
    let stream_request = format!("GET {D}/events/{id}?sse=true HTTP/1.1\r\nHost: {host}\r\n\r\n");
    conn.get_mut()
        .write_all(stream_request.as_bytes())
        .await
        .unwrap();
    let (status, headers) = head(&mut conn).await;
    assert_eq!(status, 200, "{headers:?}");
    assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
    assert!(
        header(&headers, "content-type").is_some_and(|t| t.starts_with("text/event-stream")),
        "{headers:?}"
    );
    assert!(header(&headers, "date").is_some(), "{headers:?}");
    assert_eq!(
        header(&headers, "connection"),
        None,
        "kept open: {headers:?}"
    );

    // Chunks until the body's end, approving at the plan; SSE frames may span chunks.
    let mut text = String::new();
    let mut approved = false;
    let body = tokio::time::timeout(DEADLINE, async {
        loop {
            let data = chunk(&mut conn).await;
            // The body's end: a zero-length chunk and no trailers (its CRLF read with it).
            if data.is_empty() {
                return;
            }
            text.push_str(std::str::from_utf8(&data).unwrap());
            if !approved && text.contains("decompose_query") {
                let approve =
                    json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
                assert_eq!(s.post(&format!("{D}/events/{id}"), approve).await.0, 200);
                approved = true;
            }
        }
    });
    if body.await.is_err() {
        panic!("the stream did not end with its run; approved: {approved}; read: {text}");
    }
    let ids: Vec<i64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
        .map(|i| i.trim().parse().unwrap())
        .collect();
    assert!(ids.len() > 3, "{text}");
    assert_eq!(ids, (0..ids.len() as i64).collect::<Vec<_>>(), "gap-free");
    assert!(text.contains("StopEvent"), "{text}");

    // The same connection: the stream again from where it ended (a 204: all was read), then,
    // sent together, the run's status and the stream once more, the connection then closed.
    let last = ids.last().unwrap();
    let again =
        format!("GET {D}/events/{id}?after_sequence={last} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    conn.get_mut().write_all(again.as_bytes()).await.unwrap();
    let (status, headers) = head(&mut conn).await;
    assert_eq!(status, 204, "{headers:?}");
    for framing in ["content-length", "transfer-encoding"] {
        assert_eq!(header(&headers, framing), None, "{headers:?}");
    }
    let together = format!(
        "GET {D}/handlers/{id} HTTP/1.1\r\nHost: {host}\r\n\r\n\
         GET {D}/events/{id}?after_sequence={last} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    );
    conn.get_mut().write_all(together.as_bytes()).await.unwrap();
    let (status, headers) = head(&mut conn).await;
    assert_eq!(status, 200, "{headers:?}");
    let len: usize = header(&headers, "content-length").unwrap().parse().unwrap();
    let mut json_body = vec![0u8; len];
    conn.read_exact(&mut json_body).await.unwrap();
    let handler: Value = serde_json::from_slice(&json_body).unwrap();
    assert_eq!(handler["status"], "completed", "{handler}");
    let (status, headers) = head(&mut conn).await;
    assert_eq!(status, 204, "{headers:?}");
    let mut rest = Vec::new();
    tokio::time::timeout(DEADLINE, conn.read_to_end(&mut rest))
        .await
        .expect("the connection closed as asked")
        .unwrap();
    assert!(rest.is_empty(), "nothing after a 204: {rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_reject_edit_approve_sqlite() {
    gate_reject_edit_approve(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_reject_edit_approve_postgres() {
    gate_reject_edit_approve(Dialect::Postgres).await;
}

/// `run` waits for the end; an approval sent before the run reaches its gate is kept. The
/// server taking the request drives no runs, and the one that does starts only once the
/// approval is in: the run cannot have reached its gate before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_run_with_early_approval_and_many_readers() {
    let s = Arc::new(
        server_with(Opts {
            drive: false,
            ..Opts::new(Dialect::Sqlite)
        })
        .await,
    );
    let runner = {
        let s = s.clone();
        tokio::spawn(async move {
            s.post(
                &format!("{D}/workflows/deep-research/run"),
                json!({"start_event": {"type": "ResearchStart", "value": {"query": QUESTION}},
                       "handler_id": "early-1"}),
            )
            .await
        })
    };
    let approve = json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
    let sent = tokio::time::timeout(DEADLINE, async {
        loop {
            let (status, body) = s
                .post(&format!("{D}/events/early-1"), approve.clone())
                .await;
            match status {
                200 => return,
                404 => tokio::time::sleep(Duration::from_millis(5)).await,
                other => panic!("{other}: {body}"),
            }
        }
    })
    .await;
    assert!(sent.is_ok(), "approval delivered within the deadline");
    let before = s.db.store.get_run("early-1").await.unwrap().unwrap();
    assert_eq!(
        (before.next_seq, before.waiting_for, before.mailbox_seq),
        (0, None, 1),
        "the approval is in and nothing of the run has happened yet"
    );
    let _driver = server_with(Opts {
        url: Some(s.db.url.clone()),
        ..Opts::new(Dialect::Sqlite)
    })
    .await;
    // Three readers, one from the start, one from `now`, one resuming mid-way: each gets a
    // gap-free tail ending with the result.
    let mut readers = Vec::new();
    for (q, last) in [("", None), ("?after_sequence=now", None), ("", Some(2))] {
        let mut st = s.sse("early-1", q, last).await;
        readers.push(tokio::spawn(
            async move { read_until(&mut st, is_stop).await },
        ));
    }
    let (status, handler) = tokio::time::timeout(DEADLINE, runner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200, "{handler}");
    assert_eq!(handler["handler_id"], "early-1");
    assert_eq!(handler["result"]["value"]["status"], "completed");
    for (n, r) in readers.into_iter().enumerate() {
        let seen = r.await.unwrap();
        let ids: Vec<i64> = seen.iter().map(|(i, _)| *i).collect();
        let first = ids[0];
        assert_eq!(
            ids,
            (first..first + ids.len() as i64).collect::<Vec<_>>(),
            "reader {n}"
        );
        if n == 0 {
            assert_eq!(first, 0);
        }
        if n == 2 {
            assert_eq!(first, 3, "Last-Event-ID 2 resumes at 3");
        }
    }
    let (status, body) = s
        .post(
            &format!("{D}/workflows/deep-research/run-nowait"),
            json!({"start_event": {"query": QUESTION}, "handler_id": "early-1"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
}

/// A subscriber that arrives once the run waits at its gate, the approval prompt (the plan)
/// emitted long before and nothing more to come until someone decides (llama-agents#560):
/// opened as the web UI opens it, with no `after_sequence`, it is given the prompt from the
/// stream's start without waiting for anything new; one resuming from just before the
/// prompt (`Last-Event-ID`) gets it too. After the approval the first reads on to the result.
async fn a_subscriber_arriving_after_the_prompt_gets_it(dialect: Dialect) {
    let s = server(dialect, None).await;
    let id = s.start(QUESTION).await;
    let parked =
        || async { s.db.store.get_run(&id).await.unwrap().unwrap().status == RunStatus::Waiting };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !parked().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached the gate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut late = s.sse(&id, "", None).await;
    let prompt = read_until(&mut late, is_plan).await;
    assert_eq!(prompt[0].0, 0, "replayed from the stream's start");
    let plan_seq = prompt.last().unwrap().0;
    let mut resumed = s.sse(&id, "", Some(plan_seq - 1)).await;
    let again = read_until(&mut resumed, is_plan).await;
    assert_eq!(again.len(), 1, "resumed just before the prompt: {again:?}");
    assert_eq!(again[0].0, plan_seq);
    assert!(
        parked().await,
        "the prompt came from the stream, not from anything new"
    );

    let approve = json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
    let (status, body) = s.post(&format!("{D}/events/{id}"), approve).await;
    assert_eq!(status, 200, "{body}");
    let rest = read_until(&mut late, is_stop).await;
    let all: Vec<(i64, Value)> = prompt.into_iter().chain(rest).collect();
    let ids: Vec<i64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        ids,
        (0..ids.len() as i64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    assert_eq!(all.iter().filter(|(_, e)| is_plan(e)).count(), 1);
    assert_eq!(all.last().unwrap().1["type"], "ResearchResult");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_arriving_after_the_prompt_gets_it_sqlite() {
    a_subscriber_arriving_after_the_prompt_gets_it(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_arriving_after_the_prompt_gets_it_postgres() {
    a_subscriber_arriving_after_the_prompt_gets_it(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_purge() {
    let s = server(Dialect::Sqlite, None).await;
    let id = s.start(QUESTION).await;
    let mut stream = s.sse(&id, "", None).await;
    read_until(&mut stream, is_plan).await;
    // Parked at the gate, a stream from `now` gets nothing but heartbeat comments.
    let mut raw = s
        .http
        .get(s.url(&format!("{D}/events/{id}?after_sequence=now")))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let first = tokio::time::timeout(DEADLINE, raw.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b": heartbeat\n\n");
    let (status, body) = s
        .post(&format!("{D}/handlers/{id}/cancel"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"status": "cancelled"})));
    let end = read_until(&mut stream, is_stop).await;
    assert_eq!(end.last().unwrap().1["type"], "WorkflowCancelledEvent");
    let (status, handler) = s.get(&format!("{D}/handlers/{id}")).await;
    assert_eq!(
        (status, handler["status"].as_str()),
        (500, Some("cancelled"))
    );
    assert_eq!(handler["error"], Value::Null);
    let (status, _) = s
        .post(&format!("{D}/handlers/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 409);
    let (status, listed) = s
        .get("/handlers?status=cancelled&workflow_name=deep-research")
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["handlers"].as_array().unwrap().len(), 1);
    let (status, body) = s
        .post(&format!("{D}/handlers/{id}/cancel?purge=true"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"status": "deleted"})));
    assert_eq!(s.get(&format!("{D}/handlers/{id}")).await.0, 404);
    assert_eq!(s.get(&format!("{D}/events/{id}")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_schemas_and_graph() {
    let s = server(Dialect::Sqlite, None).await;
    let (status, workflows) = s.get(&format!("{D}/workflows")).await;
    assert_eq!(status, 200);
    assert_eq!(
        workflows,
        json!({"workflows": ["deep-research", "research-metadata"]})
    );
    let (status, handler) = s
        .post(
            &format!("{D}/workflows/research-metadata/run"),
            json!({"start_event": {}}),
        )
        .await;
    assert_eq!(status, 200, "{handler}");
    let meta = &handler["result"]["value"];
    assert_eq!(meta["research_collection"], "research-sessions");
    assert_eq!(meta["json_schema"]["type"], "object");
    let flattened = s
        .get(&format!(
            "{D}/results/{}",
            handler["handler_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(flattened.1["result"], *meta);

    let (_, schema) = s.get(&format!("{D}/workflows/deep-research/schema")).await;
    assert_eq!(schema["start"]["title"], "ResearchStart");
    assert_eq!(schema["start"]["required"], json!(["query"]));
    assert_eq!(schema["stop"]["title"], "ResearchResult");
    let (_, graph) = s
        .get(&format!("{D}/workflows/deep-research/representation"))
        .await;
    let steps: Vec<&str> = graph["graph"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["node_type"] == "step")
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "route_query",
            "investigate_background",
            "draft_plan",
            "replan",
            "await_approval",
            "run_web_research",
            "fetch_parse_sources",
            "synthesize_and_patch",
            "persist_session",
            "deliver_report"
        ]
    );
    let edges = graph["graph"]["edges"].as_array().unwrap();
    // A simple question skips the plan and the gate: the first look hands its sources on.
    assert!(edges.contains(
        &json!({"source": "investigate_background", "target": "SourcesFound", "label": null})
    ));
    assert!(edges.contains(
        &json!({"source": "persist_session", "target": "ResearchResult", "label": null})
    ));
    // A run asking for delivery ends after `deliver_report`.
    assert!(
        edges.contains(
            &json!({"source": "persist_session", "target": "DeliverReport", "label": null})
        )
    );
    assert!(
        edges.contains(
            &json!({"source": "deliver_report", "target": "ResearchResult", "label": null})
        )
    );
    let (_, events) = s.get(&format!("{D}/workflows/deep-research/events")).await;
    let titles: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["title"].as_str().unwrap())
        .collect();
    for t in [
        "ResearchStart",
        "ApproveEvent",
        "ToolCall",
        "ToolCallResult",
        "AgentStream",
        "ResearchResult",
    ] {
        assert!(titles.contains(&t), "{t} in {titles:?}");
    }
    assert_eq!(s.get(&format!("{D}/workflows/nope/schema")).await.0, 404);
    // Health at the root (app server) and under the deployment (workflow server).
    assert_eq!(s.get("/health").await, (200, json!({"status": "Healthy"})));
    assert_eq!(
        s.get(&format!("{D}/health")).await,
        (200, json!({"status": "healthy"}))
    );
}

/// Every kind of bad request is a 4xx with a `detail` that says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_4xx() {
    let s = server(Dialect::Sqlite, None).await;
    let id = s.start(QUESTION).await;
    let run = format!("{D}/workflows/deep-research/run-nowait");
    let ev = format!("{D}/events/{id}");
    let raw = |path: &str, ct: &str, body: &str| {
        s.http
            .post(s.url(path))
            .header("content-type", ct)
            .body(body.to_string())
    };
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            raw(&run, "application/json", "{\"start_event\": "),
            400,
            "invalid JSON body",
        ),
        (
            raw(&run, "text/plain", "{}"),
            415,
            "expected Content-Type: application/json",
        ),
        (
            raw(&run, "application/json", &"x".repeat(70 * 1024)),
            413,
            "larger than",
        ),
        (
            raw(&format!("{D}/workflows/nope/run"), "application/json", "{}"),
            404,
            "Workflow not found",
        ),
        (
            raw(
                &run,
                "application/json",
                "{\"start_event\": {\"query\": \"  \"}}",
            ),
            400,
            "the question is empty",
        ),
        (
            raw(
                &run,
                "application/json",
                "{\"start_event\": {\"query\": \"q\", \"settings\": {\"max_sources\": 0, \"colour\": 1}}}",
            ),
            400,
            "max_sources",
        ),
        (
            raw(
                &run,
                "application/json",
                "{\"start_event\": {\"query\": \"q\", \"settings\": {\"max_sources\": 0, \"colour\": 1}}}",
            ),
            400,
            "'colour' was unexpected",
        ),
        (
            raw(
                &run,
                "application/json",
                "{\"start_event\": {\"query\": \"q\"}, \"context\": {\"state\": {}}}",
            ),
            400,
            "'context' is not supported",
        ),
        (
            raw(
                &run,
                "application/json",
                "{\"start_event\": {\"query\": \"q\"}, \"handler_id\": \"a/b\"}",
            ),
            400,
            "handler_id",
        ),
        (
            raw(
                "/deployments/deep-research/events/nope",
                "application/json",
                "{\"event\": {\"type\": \"ApproveEvent\", \"value\": {\"approved\": true}}}",
            ),
            404,
            "Handler not found",
        ),
        (
            raw(
                &ev,
                "application/json",
                "{\"event\": {\"type\": \"Nope\", \"value\": {}}}",
            ),
            400,
            "Invalid event type: Nope. Expected one of ApproveEvent",
        ),
        (
            raw(&ev, "application/json", "{}"),
            400,
            "Event data is required",
        ),
        (
            raw(
                &ev,
                "application/json",
                "{\"event\": {\"type\": \"ApproveEvent\", \"value\": {\"approved\": \"yes\"}}}",
            ),
            400,
            "Validation error for 'ApproveEvent'",
        ),
        (
            raw(
                &ev,
                "application/json",
                "{\"event\": {\"type\": \"ApproveEvent\", \"value\": {\"approved\": true, \"mood\": 1}}}",
            ),
            400,
            "unknown field `mood`",
        ),
        (
            raw(
                &ev,
                "application/json",
                "{\"event\": {\"type\": \"ApproveEvent\", \"value\": {\"approved\": false, \"plan\": {\"question\": \"q\", \"queries\": [\"a\"], \"outline\": [\"b\"]}}}}",
            ),
            400,
            "only be given with approved: true",
        ),
        (
            raw(
                &ev,
                "application/json",
                "{\"event\": {\"type\": \"ApproveEvent\", \"value\": {\"approved\": true}}, \"step\": \"nope\"}",
            ),
            400,
            "no step named 'nope'",
        ),
        (
            s.http
                .get(s.url(&format!("{D}/events/{id}?after_sequence=soon"))),
            400,
            "after_sequence",
        ),
        (
            s.http.get(s.url(&format!("{D}/events/{id}?sse=maybe"))),
            400,
            "'sse' must be true or false",
        ),
        (
            s.http.get(s.url(&format!("{D}/handlers?status=sleeping"))),
            400,
            "unknown status 'sleeping'",
        ),
        (
            s.http.get(s.url(&format!("{D}/handlers/nope"))),
            404,
            "Handler not found",
        ),
        (
            s.http.get(s.url("/deployments/other/workflows")),
            404,
            "Not Found",
        ),
        (
            s.http.delete(s.url(&format!("{D}/workflows"))),
            405,
            "Method Not Allowed",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:search",
                "application/json",
                "{\"deployment_name\": \"d\", \"filter\": {\"age\": {\"between\": 1}}}",
            ),
            400,
            "unknown operator 'between'",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:search",
                "application/json",
                "{\"deployment_name\": \"d\", \"order_by\": \"name\"}",
            ),
            400,
            "data.",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:search",
                "application/json",
                "{\"deployment_name\": \"d\", \"page_size\": 0}",
            ),
            400,
            "page_size",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:search",
                "application/json",
                "{\"deployment_name\": \"d\", \"page_token\": \"zzz\"}",
            ),
            400,
            "invalid page_token",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:search",
                "application/json",
                "{\"collection\": \"c\"}",
            ),
            400,
            "deployment_name",
        ),
        (
            raw(
                "/api/v1/beta/agent-data/:frobnicate",
                "application/json",
                "{\"deployment_name\": \"d\"}",
            ),
            405,
            ":search, :aggregate and :delete",
        ),
        (
            raw(
                "/api/v1/beta/agent-data",
                "application/json",
                "{\"deployment_name\": \"d\", \"data\": [1]}",
            ),
            400,
            "'data' must be a JSON object",
        ),
        (
            s.http.get(s.url("/api/v1/beta/agent-data/nope")),
            404,
            "not found",
        ),
    ];
    for (req, want, needle) in cases {
        let (status, body) = s.call(req).await;
        let detail = body["detail"].as_str().unwrap_or_default();
        assert_eq!(status, want, "{needle}: {body}");
        assert!(detail.contains(needle), "want '{needle}' in '{detail}'");
    }
    // Nothing bad was stored: only the one good run exists, still at its gate.
    let (_, listed) = s.get(&format!("{D}/handlers")).await;
    assert_eq!(listed["handlers"].as_array().unwrap().len(), 1);
    assert_eq!(listed["handlers"][0]["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_data_crud_search_aggregate() {
    let s = server(Dialect::Sqlite, None).await;
    let base = "/api/v1/beta/agent-data";
    let mut ids = Vec::new();
    for (i, (name, tag)) in [
        ("ann", "a"),
        ("bob", "b"),
        ("cy", "a"),
        ("di", "b"),
        ("ed", "a"),
    ]
    .iter()
    .enumerate()
    {
        let (status, item) = s
            .call(
                s.http
                    .post(s.url(base))
                    .header("Project-Id", "p1")
                    .json(&json!({
                "deployment_name": "dep", "collection": "people",
                "data": {"name": name, "tag": tag, "age": 20 + i, "skills": [tag, "rust"]}})),
            )
            .await;
        assert_eq!(status, 200, "{item}");
        assert_eq!(item["project_id"], "p1");
        assert!(item["created_at"].is_string());
        ids.push(item["id"].as_str().unwrap().to_string());
    }
    let (_, got) = s.get(&format!("{base}/{}", ids[0])).await;
    assert_eq!(got["data"]["name"], "ann");
    let (status, put) = s
        .call(
            s.http
                .put(s.url(&format!("{base}/{}", ids[0])))
                .json(&json!({"data": {"name": "ann", "tag": "a", "age": 99, "skills": ["go"]}})),
        )
        .await;
    assert_eq!((status, &put["data"]["age"]), (200, &json!(99)));

    // Paged search with a filter and an order, following next_page_token to the end.
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let (status, page) = s
            .post(
                &format!("{base}/:search"),
                json!({"deployment_name": "dep", "collection": "people",
                "filter": {"age": {"gte": 21}}, "order_by": "data.age desc", "page_size": 2,
                "page_token": token, "include_total": true}),
            )
            .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["total_size"], 5);
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["data"]["name"].as_str().unwrap().to_string()),
        );
        token = page["next_page_token"].as_str().map(String::from);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(names, ["ann", "ed", "di", "cy", "bob"]);
    let (_, rust) = s
        .post(&format!("{base}/:search"), json!({"deployment_name": "dep", "collection": "people",
            "filter": {"skills": {"includes": ["rust"]}, "tag": {"eq": "a"}}, "order_by": "data.name"}))
        .await;
    let names: Vec<&str> = rust["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cy", "ed"]);

    let (_, groups) = s
        .post(
            &format!("{base}/:aggregate"),
            json!({"deployment_name": "dep", "collection": "people",
            "group_by": ["tag"], "count": true, "order_by": "data.tag"}),
        )
        .await;
    let counts: Vec<(String, i64)> = groups["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group_key"]["tag"].as_str().unwrap().to_string(),
                g["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, [("a".to_string(), 3), ("b".to_string(), 2)]);
    let (_, total) = s
        .post(&format!("{base}/:aggregate"), json!({"deployment_name": "dep", "collection": "people", "group_by": [], "count": true}))
        .await;
    assert_eq!(total["items"][0]["count"], 5);

    let (_, deleted) = s
        .post(&format!("{base}/:delete"), json!({"deployment_name": "dep", "collection": "people", "filter": {"tag": {"eq": "b"}}}))
        .await;
    assert_eq!(deleted, json!({"deleted_count": 2}));
    let (status, body) = s
        .call(s.http.delete(s.url(&format!("{base}/{}", ids[2]))))
        .await;
    assert_eq!((status, body), (200, json!({})));
    assert_eq!(s.get(&format!("{base}/{}", ids[2])).await.0, 404);
    let (_, left) = s
        .post(
            &format!("{base}/:search"),
            json!({"deployment_name": "dep", "collection": "people", "include_total": true}),
        )
        .await;
    assert_eq!(left["total_size"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_and_cors() {
    let s = server(Dialect::Sqlite, Some("s3cret")).await;
    let (status, body) = s.get(&format!("{D}/workflows")).await;
    assert_eq!(status, 401);
    assert!(body["detail"].as_str().unwrap().contains("missing API key"));
    let wrong = s
        .call(
            s.http
                .get(s.url(&format!("{D}/workflows")))
                .bearer_auth("nope"),
        )
        .await;
    assert_eq!(wrong.0, 401);
    let ok = s
        .call(
            s.http
                .get(s.url(&format!("{D}/workflows")))
                .bearer_auth("s3cret"),
        )
        .await;
    assert_eq!(ok.0, 200);
    assert_eq!(s.get("/healthz").await.0, 200);
    assert_eq!(s.get(&format!("{D}/health")).await.0, 200);
    let (status, h) = s
        .call(
            s.http
                .post(s.url(&format!("{D}/workflows/deep-research/run-nowait")))
                .bearer_auth("s3cret")
                .json(&json!({"start_event": {"query": QUESTION}})),
        )
        .await;
    assert_eq!(status, 200);
    // EventSource cannot send headers: the key may come in the query string.
    let id = h["handler_id"].as_str().unwrap();
    let mut stream = s.sse(id, "?api_key=s3cret", None).await;
    read_until(&mut stream, is_plan).await;

    // CORS: a preflight from a configured browser origin is answered without the key, and the
    // origin is echoed with credentials allowed, as EventSource(url, {withCredentials: true})
    // needs.
    let origin = "http://localhost:5173";
    let pre = s
        .http
        .request(reqwest::Method::OPTIONS, s.url(&format!("{D}/events/{id}")))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "GET")
        .header(
            "Access-Control-Request-Headers",
            "authorization,last-event-id",
        )
        .send()
        .await
        .unwrap();
    assert!(pre.status().is_success(), "{}", pre.status());
    let h = pre.headers();
    assert_eq!(h["access-control-allow-origin"], origin);
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("last-event-id")
    );
    let get = s
        .http
        .get(s.url(&format!("{D}/handlers/{id}")))
        .header("Origin", origin)
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(get.headers()["access-control-allow-origin"], origin);
}

/// The OpenAPI document is stable (snapshot) and every path it documents is routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document() {
    let s = server(Dialect::Sqlite, None).await;
    let (status, doc) = s.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(s.get(&format!("{D}/openapi.json")).await.1, doc);
    insta::assert_json_snapshot!("openapi", doc);
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{name}", "deep-research")
                .replace("{handler_id}", "none")
                .replace("{item_id}", "none");
            let req = s
                .http
                .request(method.to_uppercase().parse().unwrap(), s.url(&concrete));
            let req = if method == "post" || method == "put" {
                req.json(&json!({"deployment_name": "d", "data": {}}))
            } else {
                req
            };
            let (status, body) = s.call(req).await;
            assert!(
                !(status == 404 && body["detail"] == "Not Found") && status != 405,
                "{method} {path} is documented but not routed: {status} {body}"
            );
        }
    }
}

/// The web UI's files: served at `/` and under the deployment, with their content types and
/// revalidation; every module a module imports is served; no key is needed for them, while
/// the API still wants one; and API paths that do not exist stay JSON 404s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_ui_files() {
    let s = server(Dialect::Sqlite, Some("s3cret")).await;
    let get = |path: String| {
        let req = s.http.get(s.url(&path));
        async move { req.send().await.unwrap() }
    };
    for root in ["/", &format!("{D}/ui/")] {
        let page = get(root.to_string()).await;
        assert_eq!(page.status(), 200, "{root}");
        let h = page.headers().clone();
        assert_eq!(h["content-type"], "text/html; charset=utf-8");
        assert_eq!(h["cache-control"], "no-cache");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        let html = page.text().await.unwrap();
        assert!(html.contains("<script type=\"module\" src=\"assets/app.js\">"));

        // Every module reachable from app.js is served, as JavaScript.
        let mut todo = vec!["app.js".to_string()];
        let mut seen = std::collections::HashSet::new();
        while let Some(file) = todo.pop() {
            if !seen.insert(file.clone()) {
                continue;
            }
            let resp = get(format!("{root}assets/{file}")).await;
            assert_eq!(resp.status(), 200, "{root}assets/{file}");
            assert_eq!(
                resp.headers()["content-type"],
                "text/javascript; charset=utf-8"
            );
            let js = resp.text().await.unwrap();
            for line in js.lines().filter(|l| l.starts_with("import ")) {
                let from = line.rsplit("from '").next().unwrap();
                let name = from.trim_end_matches("';").trim_start_matches("./");
                todo.push(name.to_string());
            }
        }
        assert!(seen.len() >= 8, "{seen:?}");
        let css = get(format!("{root}assets/app.css")).await;
        assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    }

    // Revalidation: the entity tag answers 304.
    let first = get("/assets/app.js".into()).await;
    let etag = first.headers()["etag"].clone();
    let again = s
        .http
        .get(s.url("/assets/app.js"))
        .header("If-None-Match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // The deployment's own address leads to its UI.
    let no_redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in [D.to_string(), format!("{D}/"), format!("{D}/ui")] {
        let resp = no_redirect.get(s.url(&path)).send().await.unwrap();
        assert_eq!(resp.status(), 308, "{path}");
        assert_eq!(resp.headers()["location"], &format!("{D}/ui/"));
    }

    // The API still wants the key; unknown paths stay JSON.
    assert_eq!(s.get(&format!("{D}/handlers")).await.0, 401);
    assert_eq!(
        s.get("/assets/nope.js").await,
        (404, json!({"detail": "Not Found"}))
    );
    assert_eq!(s.get("/nope").await.0, 401);
    let (status, body) = s
        .call(s.http.get(s.url("/nope")).bearer_auth("s3cret"))
        .await;
    assert_eq!((status, body), (404, json!({"detail": "Not Found"})));
    let (status, body) = s.call(s.http.post(s.url("/"))).await;
    assert_eq!(
        (status, body),
        (405, json!({"detail": "Method Not Allowed"}))
    );
}

/// A report's Markdown rendered as the exports render it: a table, a nested list, an escaped
/// bracket and code come back as markup with every text escaped, citations as links to their
/// sources, and the sources list as data; bad requests are 4xx with a detail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_rendered_for_a_page_as_the_exports_render_it() {
    let s = server(Dialect::Sqlite, None).await;
    let md = "# Ownership <b>in</b> Rust\n\n\
              Values have one owner [1]; \\[2\\] is text, not a citation.\n\n\
              - moves\n  1. a move [2]\n  2. a copy\n     - `Copy` types\n- drops\n\n\
              | Type | Copy? |\n|:--|--:|\n| `i32` | yes [1] |\n| a \\| b | no |\n\n\
              ```\n<script>alert(1)</script>\n```\n\n\
              <img src=x onerror=alert(2)> and [a link](javascript:alert(3)).\n\n\
              ## Sources\n\n\
              1. The book, p. 3 — `file:///corpus/book.pdf#page=3`\n\
              2. A page — `https://example.org/a`\n";
    for root in ["", D] {
        let (status, body) = s
            .post(&format!("{root}/reports/render"), json!({"markdown": md}))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["title"], "Ownership <b>in</b> Rust");
        assert_eq!(
            body["sources"],
            json!([
                {"n": 1, "title": "The book, p. 3", "url": "file:///corpus/book.pdf#page=3"},
                {"n": 2, "title": "A page", "url": "https://example.org/a"},
            ])
        );
        assert_eq!(body["citations"], json!([1, 2]));
        let html = body["html"].as_str().unwrap();
        let cite = |n: u32| {
            format!(
                "<a class=\"cite\" href=\"#source-{n}\" data-n=\"{n}\" aria-label=\"Source {n}\">[{n}]</a>"
            )
        };
        for want in [
            "<h1>Ownership &lt;b&gt;in&lt;/b&gt; Rust</h1>".to_string(),
            format!(
                "<p>Values have one owner {}; [2] is text, not a citation.</p>",
                cite(1)
            ),
            format!(
                "<ul>\n<li><p>moves</p>\n<ol>\n<li>a move {}</li>\n<li><p>a copy</p>\n<ul>\n<li><code>Copy</code> types</li>\n</ul>\n</li>\n</ol>\n</li>\n<li>drops</li>\n</ul>",
                cite(2)
            ),
            "<th>Type</th><th class=\"align-right\">Copy?</th>".to_string(),
            format!(
                "<td><code>i32</code></td><td class=\"align-right\">yes {}</td>",
                cite(1)
            ),
            "<td>a | b</td>".to_string(),
            "<pre><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></pre>".to_string(),
            "<p>&lt;img src=x onerror=alert(2)&gt; and a link.</p>".to_string(),
        ] {
            assert!(html.contains(&want), "{want}\nmissing from\n{html}");
        }
        assert_eq!(html.matches("class=\"cite\"").count(), 3, "{html}");
        // The sources list is data, not part of the body.
        assert!(
            !html.contains("Sources") && !html.contains("example.org"),
            "{html}"
        );
    }

    let big = json!({"markdown": "a".repeat(65 * 1024)});
    let cases = [
        (
            s.http
                .post(s.url("/reports/render"))
                .json(&json!({"text": "# T"})),
            400,
            "markdown",
        ),
        (
            s.http
                .post(s.url("/reports/render"))
                .json(&json!({"markdown": 3})),
            400,
            "invalid JSON body",
        ),
        (
            s.http.post(s.url("/reports/render")).body("# T"),
            415,
            "application/json",
        ),
        (
            s.http.post(s.url("/reports/render")).json(&big),
            413,
            "larger than the server accepts",
        ),
        (
            s.http.get(s.url("/reports/render")),
            405,
            "Method Not Allowed",
        ),
    ];
    for (req, code, detail) in cases {
        let (status, body) = s.call(req).await;
        assert_eq!(status, code, "{body}");
        assert!(body["detail"].as_str().unwrap().contains(detail), "{body}");
    }
}

/// A finished session's report exported over HTTP in each format, made once, and the bad
/// requests: an unknown session, one still at its gate, an unknown or missing format.
async fn session_exports(dialect: Dialect) {
    let s = server(dialect, None).await;
    let (status, handler) = s
        .post(
            &format!("{D}/workflows/deep-research/run"),
            json!({"start_event": {"query": QUESTION, "settings": {"require_approval": false}}}),
        )
        .await;
    assert_eq!(status, 200, "{handler}");
    let id = handler["handler_id"].as_str().unwrap().to_string();
    let session = session_record(&s, &id).await;
    assert_eq!(session["status"], "completed");
    let report = session["report_markdown"].as_str().unwrap().to_string();
    let headings: Vec<String> = report
        .lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|h| h.replace('\\', ""))
        .collect();
    assert!(
        headings.len() >= 3 && headings.iter().any(|h| h == "Sources"),
        "{report}"
    );
    let citations: Vec<String> = fathom_report::report::citations(&report)
        .into_iter()
        .map(|n| format!("[{n}]"))
        .collect();
    assert!(!citations.is_empty(), "{report}");

    let get = |path: String| {
        let req = s.http.get(s.url(&path));
        async move { req.send().await.unwrap() }
    };
    let mut file_ids = Vec::new();
    for format in ["pdf", "docx", "html"] {
        let resp = get(format!("{D}/sessions/{id}/export?format={format}")).await;
        assert_eq!(resp.status(), 200, "{format}");
        let h = resp.headers().clone();
        let disposition = h["content-disposition"].to_str().unwrap().to_string();
        assert_eq!(
            disposition,
            format!("attachment; filename=\"how-does-ownership-work-in-rust.{format}\"")
        );
        let file_id = h["x-fathom-file-id"].to_str().unwrap().to_string();
        let bytes = resp.bytes().await.unwrap().to_vec();
        let text = match format {
            "pdf" => {
                assert_eq!(h["content-type"], "application/pdf");
                let pdf = fathom_parse::pdf::extract(&bytes, 100).unwrap();
                pdf.pages
                    .iter()
                    .map(|p| p.text.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            "docx" => {
                assert!(
                    h["content-type"]
                        .to_str()
                        .unwrap()
                        .contains("wordprocessingml")
                );
                fathom_parse::docx::docx_to_markdown(&bytes)
                    .unwrap()
                    .markdown
                    .replace('\\', "")
            }
            _ => {
                assert_eq!(h["content-type"], "text/html; charset=utf-8");
                String::from_utf8(bytes.clone()).unwrap()
            }
        };
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for want in headings.iter().chain(&citations) {
            assert!(
                flat.contains(want.as_str()),
                "{format}: '{want}' missing from {flat}"
            );
        }
        // Asked again, the same stored file comes back; the artifact route serves it too.
        let again = get(format!(
            "/sessions/{id}/export?format={}",
            format.to_uppercase()
        ))
        .await;
        assert_eq!(again.status(), 200);
        assert_eq!(
            again.headers()["x-fathom-file-id"].to_str().unwrap(),
            file_id
        );
        assert_eq!(again.bytes().await.unwrap().to_vec(), bytes);
        let stored = get(format!("{D}/artifacts/{file_id}")).await;
        assert_eq!(stored.status(), 200);
        assert_eq!(stored.bytes().await.unwrap().to_vec(), bytes);
        file_ids.push((format, file_id));
    }
    // The session records each export's artifact.
    let session = session_record(&s, &id).await;
    for (format, file_id) in &file_ids {
        assert_eq!(
            session["exports"][format]["file_id"],
            file_id.as_str(),
            "{session}"
        );
    }
    assert_eq!(session["report_markdown"], report.as_str());

    // Bad requests, each a 4xx with a detail that says what to do.
    let waiting = s.start(QUESTION).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // Saved once planning starts, and again at the gate.
    while session_record(&s, &waiting).await["status"] != "awaiting_approval" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached the gate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = s
        .get(&format!("{D}/sessions/{waiting}/export?format=pdf"))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("is not finished (status: awaiting_approval)"),
        "{body}"
    );
    let cases = [
        (
            "/sessions/nope/export?format=pdf".to_string(),
            404,
            "research session 'nope' not found",
        ),
        (
            format!("/sessions/{id}/export?format=odt"),
            400,
            "unknown export format 'odt': use one of html, pdf, docx",
        ),
        (
            format!("/sessions/{id}/export"),
            400,
            "'format' is required: one of html, pdf, docx",
        ),
    ];
    for (path, code, detail) in cases {
        let (status, body) = s.get(&path).await;
        assert_eq!(status, code, "{path}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains(detail),
            "{path}: {body}"
        );
    }
}

/// The saved session record of research `id`, through Agent Data as a frontend reads it.
async fn session_record(s: &Server, id: &str) -> Value {
    let (status, page) = s
        .post(
            "/api/v1/beta/agent-data/:search",
            json!({"deployment_name": "_public", "collection": "research-sessions",
                   "filter": {"research_id": {"eq": id}}}),
        )
        .await;
    assert_eq!(status, 200, "{page}");
    page["items"][0]["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_exports_sqlite() {
    session_exports(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_exports_postgres() {
    session_exports(Dialect::Postgres).await;
}

/// One finished session exported 100 times at once, in mixed formats, while follow-ups of it
/// start: every format's export is recorded in the session (none lost to another written at
/// the same moment), the rest of the record is as the run left it, and every follow-up runs
/// to its end with its own session.
async fn exports_and_follow_ups_at_once(dialect: Dialect) {
    const EXPORTS: usize = 100;
    const FOLLOW_UPS: usize = 10;
    const FORMATS: [&str; 3] = ["pdf", "docx", "html"];
    let s = Arc::new(server(dialect, None).await);
    let quick = json!({"require_approval": false});
    let (status, handler) = s
        .post(
            &format!("{D}/workflows/deep-research/run"),
            json!({"start_event": {"query": QUESTION, "settings": quick}}),
        )
        .await;
    assert_eq!(status, 200, "{handler}");
    let parent = handler["handler_id"].as_str().unwrap().to_string();
    let before = session_record(&s, &parent).await;

    let mut exports = tokio::task::JoinSet::new();
    let mut follow_ups = tokio::task::JoinSet::new();
    for i in 0..EXPORTS {
        let (server, of) = (s.clone(), parent.clone());
        exports.spawn(async move {
            let format = FORMATS[i % FORMATS.len()];
            let path = format!("{D}/sessions/{of}/export?format={format}");
            // A 503 (every database connection busy for a moment) did nothing: asked again,
            // as a client told to retry does.
            let deadline = tokio::time::Instant::now() + DEADLINE;
            let resp = loop {
                let resp = server.http.get(server.url(&path)).send().await.unwrap();
                if resp.status() != 503 || tokio::time::Instant::now() > deadline {
                    break resp;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            assert_eq!(resp.status(), 200, "export {i} ({format})");
            let file_id = resp.headers()["x-fathom-file-id"].to_str().unwrap();
            (format, file_id.to_string())
        });
        if i % (EXPORTS / FOLLOW_UPS) == 0 {
            let (s, parent, quick) = (s.clone(), parent.clone(), quick.clone());
            follow_ups.spawn(async move {
                let (status, body) = s
                    .post(
                        &format!("{D}/workflows/deep-research/run-nowait"),
                        json!({"start_event": {"query": format!("What are the ownership rules in Rust? ({i})"),
                               "follow_up_of": parent, "settings": quick}}),
                    )
                    .await;
                assert_eq!(status, 200, "follow-up {i}: {body}");
                body["handler_id"].as_str().unwrap().to_string()
            });
        }
    }
    let mut made: Vec<(&str, String)> = exports.join_all().await;
    made.sort();
    made.dedup();
    assert_eq!(
        made.len(),
        FORMATS.len(),
        "one file per format, however often made: {made:?}"
    );
    let session = session_record(&s, &parent).await;
    for (format, file_id) in &made {
        assert_eq!(
            session["exports"][format]["file_id"],
            file_id.as_str(),
            "{format} not recorded: {}",
            session["exports"]
        );
    }
    for field in ["status", "report_markdown", "sources", "plan", "decisions"] {
        assert_eq!(session[field], before[field], "{field}");
    }

    let ids = follow_ups.join_all().await;
    assert_eq!(ids.len(), FOLLOW_UPS);
    for id in &ids {
        let deadline = tokio::time::Instant::now() + DEADLINE * 2;
        let handler = loop {
            let (status, handler) = s.get(&format!("{D}/handlers/{id}")).await;
            if status != 202 {
                assert_eq!(status, 200, "follow-up {id}: {handler}");
                break handler;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "follow-up {id} still running"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(handler["result"]["value"]["parent_id"], parent.as_str());
        let record = session_record(&s, id).await;
        assert_eq!(record["status"], "completed", "{record}");
        assert_eq!(record["parent_id"], parent.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exports_and_follow_ups_at_once_sqlite() {
    exports_and_follow_ups_at_once(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exports_and_follow_ups_at_once_postgres() {
    exports_and_follow_ups_at_once(Dialect::Postgres).await;
}

/// Follow-ups over HTTP: `follow_up_of` (or `parent_id`) in the start event. One on a
/// completed session runs and is linked to it; an unknown session is a 400, one not finished
/// a 409, each with its reason and nothing stored. Deliveries this server is not set up for,
/// or aimed at a malformed target, are a 400 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_and_delivery_settings_over_http() {
    let s = server(Dialect::Sqlite, None).await;
    let run = format!("{D}/workflows/deep-research/run");
    let quick = json!({"require_approval": false});
    let (status, parent) = s
        .post(
            &run,
            json!({"start_event": {"query": QUESTION, "settings": quick}}),
        )
        .await;
    assert_eq!(status, 200, "{parent}");
    let parent = parent["handler_id"].as_str().unwrap().to_string();
    // A session waiting at the gate, once its record is saved.
    let (status, waiting) = s
        .post(
            &format!("{D}/workflows/deep-research/run-nowait"),
            json!({"start_event": {"query": "What is borrowing in Rust?", "settings": {"mode": "deep"}}}),
        )
        .await;
    assert_eq!(status, 200, "{waiting}");
    let waiting = waiting["handler_id"].as_str().unwrap().to_string();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while session_record(&s, &waiting).await["status"] != "awaiting_approval" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached the gate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, before) = s.get("/handlers").await;

    let nowait = format!("{D}/workflows/deep-research/run-nowait");
    for (start, code, says) in [
        (
            json!({"query": "Why?", "follow_up_of": "nope"}),
            400,
            "follow_up_of: no research session 'nope' to follow up".to_string(),
        ),
        (
            json!({"query": "Why?", "parent_id": waiting}),
            409,
            format!("research session '{waiting}' is not finished (status: awaiting_approval)"),
        ),
        (
            json!({"query": "Why?", "follow_up_of": "../etc"}),
            400,
            "no research session '../etc' to follow up".to_string(),
        ),
        (
            json!({"query": "Why?", "settings": {"deliver_webhook": "https://hooks.example.com/x"}}),
            400,
            "deliver_webhook: webhook delivery is not set up on this server: set FATHOM_WEBHOOK_SECRET".to_string(),
        ),
        (
            json!({"query": "Why?", "settings": {"deliver_webhook": "gopher://x.example/"}}),
            400,
            "deliver_webhook: webhooks are http or https URLs".to_string(),
        ),
        (
            json!({"query": "Why?", "settings": {"deliver_email": ["ana@example.org"]}}),
            400,
            "set FATHOM_SMTP_URL and FATHOM_SMTP_FROM".to_string(),
        ),
        (
            json!({"query": "Why?", "settings": {"deliver_email": ["not an address"]}}),
            400,
            "deliver_email".to_string(),
        ),
    ] {
        let (status, body) = s.post(&nowait, json!({ "start_event": start })).await;
        assert_eq!(status, code, "{start}: {body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&says), "{start}: {detail}");
    }
    let (_, after) = s.get("/handlers").await;
    assert_eq!(
        before["handlers"].as_array().map(Vec::len),
        after["handlers"].as_array().map(Vec::len),
        "nothing stored"
    );

    // A follow-up of the completed session runs, linked to it, and says so in its result.
    let (status, handler) = s
        .post(
            &run,
            json!({"start_event": {"query": "What are the ownership rules in Rust?",
                                   "follow_up_of": parent, "settings": quick}}),
        )
        .await;
    assert_eq!(status, 200, "{handler}");
    let id = handler["handler_id"].as_str().unwrap();
    assert_eq!(
        handler["result"]["value"]["parent_id"],
        parent.as_str(),
        "{handler}"
    );
    let record = session_record(&s, id).await;
    assert_eq!(record["parent_id"], parent.as_str());
    assert_eq!(record["parent_query"], QUESTION);
    assert_eq!(record["plan"]["follow_up"]["parent_id"], parent.as_str());
}
