//! What an operator sees of Fathom at work: `/metrics` scraped from `fathom serve` before,
//! during and after a research run; the spans a run sends to an OTLP/HTTP collector (a
//! loopback receiver that decodes what it gets); and JSON log lines.

mod common;
#[path = "common/served.rs"]
mod served;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use fathom_store::Dialect;
use fathom_testkit::agent::scripted_agent;
use fathom_testkit::fixtures::write_sample_corpus;
use fathom_testkit::llm::Server;
use fathom_testkit::web::SearchAndPages;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::Value;
use served::*;

const WORKFLOW: &str = "deep-research";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_a_served_run() {
    let mut env = env(Dialect::Sqlite).await;
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let config = env.tmp.path().join("config.json");
    std::fs::write(&config, web_config(&web).to_string()).unwrap();
    env.config = Some(config);
    let served = Served::spawn(
        &env,
        &[
            "serve",
            "--worker-id",
            "metrics-1",
            "--heartbeat-secs",
            "3600",
        ],
        &[
            ("OPENAI_BASE_URL", llm.base_url.as_str()),
            ("OPENAI_MODEL", "scripted"),
        ],
        "serving deployment",
    );
    let client = http();
    let m = scrape(&client, &served.root).await;
    assert!(
        m.contains("# TYPE fathom_store_up gauge")
            && sample(&m, "fathom_store_up", &[]) == Some(1.0),
        "{m}"
    );
    let runs = |m: &str, status: &str| {
        sample(
            m,
            "fathom_runs",
            &[("workflow", WORKFLOW), ("status", status)],
        )
    };
    assert_eq!(runs(&m, "waiting"), Some(0.0), "{m}");

    let id = start_run(&client, &served.api()).await;
    // A reader on the run's stream while it waits at the gate.
    let stream = client
        .get(format!("{}/events/{id}", served.api()))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    wait_until("the run waits at the gate, seen in the metrics", || async {
        runs(&scrape(&client, &served.root).await, "waiting") == Some(1.0)
    })
    .await;
    let m = scrape(&client, &served.root).await;
    assert_eq!(sample(&m, "fathom_stream_clients", &[]), Some(1.0), "{m}");
    assert_eq!(
        sample(&m, "fathom_runs_started_total", &[("workflow", WORKFLOW)]),
        Some(1.0),
        "{m}"
    );
    let parked = &[("step", "await_approval"), ("outcome", "parked")];
    assert_eq!(
        sample(&m, "fathom_step_duration_seconds_count", parked),
        Some(1.0),
        "{m}"
    );
    drop(stream);
    // A reader that leaves while its run waits is let go then: not at the run's next event,
    // nor at the next heartbeat failing to reach it (an hour away: --heartbeat-secs).
    wait_until("the reader that left is let go", || async {
        sample(
            &scrape(&client, &served.root).await,
            "fathom_stream_clients",
            &[],
        ) == Some(0.0)
    })
    .await;

    approve(&client, &served.api(), &id).await;
    let events = follow_to_end(client.clone(), served.api(), id.clone()).await;
    assert_completed_once(&id, &events);
    wait_until("the stream readers are gone", || async {
        sample(
            &scrape(&client, &served.root).await,
            "fathom_stream_clients",
            &[],
        ) == Some(0.0)
    })
    .await;
    let m = scrape(&client, &served.root).await;
    let wf = &[("workflow", WORKFLOW)];
    assert_eq!(
        sample(&m, "fathom_runs_completed_total", wf),
        Some(1.0),
        "{m}"
    );
    assert_eq!(sample(&m, "fathom_runs_failed_total", wf), None, "{m}");
    assert_eq!(runs(&m, "waiting"), Some(0.0), "{m}");
    assert_eq!(runs(&m, "running"), Some(0.0), "{m}");
    // Every step of the run committed once, timed.
    for step in [
        "draft_plan",
        "await_approval",
        "run_web_research",
        "fetch_parse_sources",
        "synthesize_and_patch",
        "persist_session",
    ] {
        let committed = &[("step", step), ("outcome", "committed")];
        assert_eq!(
            sample(&m, "fathom_step_duration_seconds_count", committed),
            Some(1.0),
            "{step}: {m}"
        );
        assert!(
            sample(&m, "fathom_step_duration_seconds_sum", committed).unwrap() > 0.0,
            "{step}"
        );
        assert!(
            sample(
                &m,
                "fathom_step_duration_seconds_bucket",
                &[committed[0], ("le", "+Inf")]
            )
            .unwrap()
                >= 1.0,
            "{step}: histogram buckets: {m}"
        );
    }
    // The agent asked the model, searched the web and read pages; its calls were journaled,
    // and none was replayed in a run that never stopped.
    // Every scripted reply reports the same usage, so the totals are exact.
    let model = &[("model", "scripted")];
    let calls = llm.requests().len() as f64;
    assert_eq!(
        sample(
            &m,
            "fathom_llm_tokens_total",
            &[model[0], ("kind", "input")]
        ),
        Some(calls * fathom_testkit::llm::PROMPT_TOKENS as f64),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "fathom_llm_tokens_total",
            &[model[0], ("kind", "output")]
        ),
        Some(calls * fathom_testkit::llm::COMPLETION_TOKENS as f64),
        "{m}"
    );
    assert_eq!(
        sample(&m, "fathom_llm_calls_total", &[model[0], ("outcome", "ok")]),
        Some(llm.requests().len() as f64),
        "{m}"
    );
    // Each search and page read the loopback web server answered, counted once.
    assert_eq!(
        sample(
            &m,
            "fathom_search_total",
            &[("provider", "searxng"), ("outcome", "ok")]
        ),
        Some(web.searches.load(std::sync::atomic::Ordering::SeqCst) as f64),
        "{m}"
    );
    assert_eq!(
        sample(&m, "fathom_fetch_total", &[("outcome", "ok")]),
        Some(web.pages.load(std::sync::atomic::Ordering::SeqCst) as f64),
        "{m}"
    );
    assert!(
        sample(&m, "fathom_journaled_calls_total", &[("outcome", "made")]).unwrap() >= 1.0,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "fathom_journaled_calls_total",
            &[("outcome", "replayed")]
        ),
        None,
        "{m}"
    );
    assert_eq!(sample(&m, "fathom_lease_takeovers_total", &[]), None, "{m}");
    assert_eq!(
        sample(&m, "fathom_stream_connections_total", &[("format", "sse")]),
        Some(2.0),
        "{m}"
    );
}

/// Fathom's config with web search through the loopback SearxNG-format server, whose pages
/// may be fetched.
fn web_config(web: &SearchAndPages) -> Value {
    let mut config: Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    config["search"]["provider"] = "searxng".into();
    config["search"]["base_url"] = format!("http://{}", web.origin).into();
    config["fetch"]["allow_private_networks"] = true.into();
    config["fetch"]["per_host_interval_ms"] = 0.into();
    config
}

/// A loopback OTLP/HTTP collector: every span it was sent, decoded.
async fn collector() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref()?.value.clone());
                    assert_eq!(service, Some(AnyValue::StringValue("fathom".into())));
                    for ss in rs.scope_spans {
                        kept.lock().unwrap().extend(ss.spans);
                    }
                }
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

fn attr(span: &Span, key: &str) -> Option<AnyValue> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.clone())
}

fn int_attr(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        AnyValue::IntValue(n) => Some(n),
        _ => None,
    }
}

/// `fathom research` with a model, OTEL_EXPORTER_OTLP_ENDPOINT set and JSON logs: the
/// collector gets one trace for the run (its root span, each step under it, each journaled
/// call and model call under its step, with token counts), and each log line is a JSON object
/// that names the run and step it comes from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_one_trace_and_logs_are_json() {
    let (endpoint, spans) = collector().await;
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    write_sample_corpus(&corpus);
    let config_path = tmp.path().join("config.json");
    std::fs::write(&config_path, web_config(&web).to_string()).unwrap();
    let out = tokio::task::spawn_blocking({
        let dir = tmp.path().to_path_buf();
        let llm = llm.base_url.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_fathom"))
                .current_dir(&dir)
                .env_remove("DATABASE_URL")
                .env_remove("OPENAI_API_KEY")
                .env_remove("OTEL_SERVICE_NAME")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                .env("RUST_LOG", "fathom_engine=debug")
                .env("OPENAI_BASE_URL", &llm)
                .env("OPENAI_MODEL", "scripted")
                .env("FATHOM_CONFIG", &config_path)
                .args(["--database-url", "traces.db", "--log-format", "json"])
                .args([
                    "research",
                    "What did the survey measure?",
                    "--yes",
                    // Researched in full: the rules would answer it directly.
                    "--set",
                    "mode=deep",
                    "-o",
                    "r.md",
                ])
                .arg("--corpus")
                .arg(&corpus)
                .args(["--set", "max_parallel_researchers=1"])
                .stdin(Stdio::null())
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = common::ok(&out);
    let run_id = common::session_of(&stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);

    // JSON logs: each log line parses, and the engine's step lines name their run and step.
    let logs: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let starts: Vec<&Value> = logs
        .iter()
        .filter(|l| l["fields"]["message"] == "step start")
        .collect();
    assert!(starts.len() >= 6, "step start lines: {stderr}");
    for l in &starts {
        assert_eq!(l["level"], "DEBUG");
        assert_eq!(l["span"]["run_id"], run_id.as_str(), "{l}");
        assert!(l["span"]["step"].is_string(), "{l}");
    }

    // Traces: sent by the time the process exits.
    let spans = spans.lock().unwrap().clone();
    let by_name = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let roots = by_name("run deep-research");
    assert_eq!(roots.len(), 1, "one root span: {:?}", names(&spans));
    let root = roots[0];
    assert!(root.parent_span_id.is_empty());
    assert_eq!(
        attr(root, "status"),
        Some(AnyValue::StringValue("completed".into()))
    );
    assert!(
        spans.iter().all(|s| s.trace_id == root.trace_id),
        "every span in the run's one trace"
    );
    let steps: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_id)
        .collect();
    let step_names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    for step in [
        "draft_plan",
        "run_web_research",
        "synthesize_and_patch",
        "persist_session",
    ] {
        assert!(
            step_names.contains(&step),
            "{step} under the root: {step_names:?}"
        );
    }
    for s in &steps {
        assert_eq!(
            attr(s, "run_id"),
            Some(AnyValue::StringValue(run_id.clone()))
        );
    }
    let is_step = |id: &[u8]| steps.iter().any(|s| s.span_id == id);
    let calls = by_name("journaled call");
    assert!(!calls.is_empty());
    for c in &calls {
        assert!(
            is_step(&c.parent_span_id),
            "a journaled call under its step"
        );
    }
    let model_calls = by_name("model call");
    assert!(model_calls.len() >= 3, "{:?}", names(&spans));
    for m in &model_calls {
        assert_eq!(
            attr(m, "gen_ai.request.model"),
            Some(AnyValue::StringValue("scripted".into()))
        );
        assert_eq!(int_attr(m, "attempts"), Some(1));
        assert_eq!(
            int_attr(m, "gen_ai.usage.input_tokens"),
            Some(fathom_testkit::llm::PROMPT_TOKENS as i64)
        );
        assert_eq!(
            int_attr(m, "gen_ai.usage.output_tokens"),
            Some(fathom_testkit::llm::COMPLETION_TOKENS as i64)
        );
        let parent = spans
            .iter()
            .find(|s| s.span_id == m.parent_span_id)
            .expect("a model call's parent was sent");
        assert_eq!(parent.name, "journaled call");
    }
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}
