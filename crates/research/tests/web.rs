//! `web_search` and `fetch_url` on the web, against a loopback server that speaks the SearxNG,
//! Tavily and Brave formats, fails the ways search APIs fail, and serves the pages found.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use fathom_engine::store::{RunStatus, RunStore};
use fathom_engine::{EngineConfig, StartOptions};
use fathom_fetch::{FetchConfig, SafeFetcher};
use fathom_research::tools::SearchProvider;
use fathom_research::tools::web::{SearchApi, WebFetcher, WebSearch, canonical_url};
use fathom_research::{DEEP_RESEARCH, Research, ResearchDeps};
use fathom_store::Dialect;
use fathom_testkit::db as testing;
use serde_json::{Value, json};

const OWNERSHIP: &str = "Ownership is a set of rules that govern how a Rust program manages memory. Each value has exactly one owner at a time. When the owner goes out of scope, the value is dropped. Moving a value transfers ownership to another variable.";
const BORROWING: &str = "Borrowing lets code use a value without taking ownership of it. The borrow checker allows many shared references or one mutable reference at a time. References must never outlive the value they point to.";

struct Fixture {
    origin: String,
    flaky_calls: Arc<AtomicUsize>,
    down_calls: Arc<AtomicUsize>,
    tavily_calls: Arc<AtomicUsize>,
}

async fn fixture() -> Fixture {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    let base = format!("http://{origin}");
    let results = {
        let base = base.clone();
        move || {
            json!([
                {"url": format!("{base}/pages/ownership"), "title": "Ownership", "content": "What <strong>ownership</strong> is"},
                {"url": format!("{base}/pages/borrowing"), "title": "Borrowing", "content": null, "score": "high"},
                {"url": format!("{base}/pages/borrowing/?utm_source=feed#top"), "title": "Borrowing again", "content": "dup"},
                {"url": format!("{base}/pages/latin1"), "title": "Propriété", "content": "latin-1"},
                {"url": "http://10.0.0.7/internal", "title": "Internal", "content": "private"},
                {"url": format!("{base}/private/notes"), "title": "Notes", "content": "robots says no"},
                {"url": "file:///etc/passwd", "title": "passwd", "content": "not a web result"}
            ])
        }
    };
    let (flaky_calls, down_calls, tavily_calls) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let page = |title: &str, body: &str| {
        format!(
            "<html><head><title>{title}</title><meta name=\"author\" content=\"Docs Team\"><link rel=\"canonical\" href=\"/pages/{}\"></head><body><nav>Home | Docs</nav><main><h1>{title}</h1><p>{body}</p><p>{body}</p></main></body></html>",
            title.to_lowercase()
        )
    };
    let (own, bor) = (page("Ownership", OWNERSHIP), page("Borrowing", BORROWING));
    let r1 = results.clone();
    let r2 = results.clone();
    let r3 = results;
    let (fc, dc, tc) = (
        flaky_calls.clone(),
        down_calls.clone(),
        tavily_calls.clone(),
    );
    let app = Router::new()
        .route("/robots.txt", get(|| async { "User-agent: *\nDisallow: /private\n" }))
        .route(
            "/searxng/search",
            get(move |Query(q): Query<Vec<(String, String)>>| async move {
                assert!(q.contains(&("format".into(), "json".into())));
                axum::Json(json!({"query": q[0].1, "results": r1()}))
            }),
        )
        .route(
            "/searxng-html-only/search",
            get(|| async { (StatusCode::FORBIDDEN, "403 Forbidden") }),
        )
        .route(
            "/tavily/search",
            post(move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
                tc.fetch_add(1, Ordering::SeqCst);
                if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer tk") {
                    return (StatusCode::UNAUTHORIZED, "bad key").into_response();
                }
                let n = body["max_results"].as_u64().unwrap() as usize;
                let rows: Vec<Value> = r2().as_array().unwrap().iter().take(n).cloned().collect();
                axum::Json(json!({"results": rows})).into_response()
            }),
        )
        .route(
            "/brave/res/v1/web/search",
            get(move |headers: HeaderMap| async move {
                assert_eq!(headers["x-subscription-token"], "bk");
                let rows: Vec<Value> = r3()
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| json!({"url": r["url"], "title": r["title"], "description": r["content"]}))
                    .collect();
                axum::Json(json!({"web": {"results": rows}}))
            }),
        )
        .route(
            "/flaky/search",
            get(move || async move {
                if fc.fetch_add(1, Ordering::SeqCst) == 0 {
                    return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "0")], "slow down")
                        .into_response();
                }
                axum::Json(json!({"results": [{"url": "https://example.org/a", "title": "A"}]}))
                    .into_response()
            }),
        )
        .route(
            "/down/search",
            get(move || async move {
                dc.fetch_add(1, Ordering::SeqCst);
                StatusCode::SERVICE_UNAVAILABLE
            }),
        )
        .route(
            "/slow/search",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route("/pages/ownership", get(move || { let own = own.clone(); async move { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], own) } }))
        .route("/pages/borrowing", get(move || { let bor = bor.clone(); async move { ([(header::CONTENT_TYPE, "text/html")], bor) } }))
        .route(
            "/pages/latin1",
            get(|| async {
                let mut body = b"<html><head><title>Propri\xe9t\xe9 et caf\xe9</title></head><body><p>".to_vec();
                body.extend_from_slice(OWNERSHIP.as_bytes());
                body.extend_from_slice(b"</p></body></html>");
                ([(header::CONTENT_TYPE, "text/html; charset=ISO-8859-1")], body)
            }),
        )
        .route("/private/notes", get(|| async { "should never be read" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Fixture {
        origin,
        flaky_calls,
        down_calls,
        tavily_calls,
    }
}

fn search(api: SearchApi) -> WebSearch {
    WebSearch::new(api, Duration::from_millis(500))
        .unwrap()
        .with_retries(3, Duration::from_millis(10))
}

#[tokio::test]
async fn providers_speak_their_formats_and_fail_usefully() {
    let f = fixture().await;
    let base = format!("http://{}", f.origin);
    let searx = search(SearchApi::Searxng {
        base_url: format!("{base}/searxng"),
    });
    let hits = searx.search("ownership", 10).await.unwrap();
    assert_eq!(hits.len(), 6, "the file:// result is dropped: {hits:?}");
    assert_eq!(hits[0].snippet, "What ownership is");
    let tavily = search(SearchApi::Tavily {
        base_url: format!("{base}/tavily"),
        api_key: "tk".into(),
    });
    assert_eq!(tavily.search("q", 2).await.unwrap().len(), 2);
    let brave = search(SearchApi::Brave {
        base_url: format!("{base}/brave"),
        api_key: "bk".into(),
    });
    let hits = brave.search("q", 3).await.unwrap();
    assert_eq!((hits.len(), hits[1].title.as_str()), (3, "Borrowing"));

    // 429 with Retry-After, then success: two requests.
    let flaky = search(SearchApi::Searxng {
        base_url: format!("{base}/flaky"),
    });
    assert_eq!(flaky.search("q", 5).await.unwrap().len(), 1);
    assert_eq!(f.flaky_calls.load(Ordering::SeqCst), 2);
    // 503 every time: three attempts, then a message a person can act on.
    let down = search(SearchApi::Searxng {
        base_url: format!("{base}/down"),
    });
    let err = down.search("q", 5).await.unwrap_err();
    assert!(
        err.contains("HTTP 503") && err.contains("3 attempts"),
        "{err}"
    );
    assert_eq!(f.down_calls.load(Ordering::SeqCst), 3);
    let slow = search(SearchApi::Searxng {
        base_url: format!("{base}/slow"),
    });
    let err = slow.search("q", 5).await.unwrap_err();
    assert!(err.contains("timed out"), "{err}");
    // A SearxNG whose settings do not enable JSON: told so, not retried.
    let html_only = search(SearchApi::Searxng {
        base_url: format!("{base}/searxng-html-only"),
    });
    let err = html_only.search("q", 5).await.unwrap_err();
    assert!(
        err.contains("HTTP 403") && err.contains("search.formats"),
        "{err}"
    );
    // A bad key is not retried.
    let before = f.tavily_calls.load(Ordering::SeqCst);
    let bad = search(SearchApi::Tavily {
        base_url: format!("{base}/tavily"),
        api_key: "nope".into(),
    });
    let err = bad.search("q", 5).await.unwrap_err();
    assert!(
        err.contains("HTTP 401") && err.contains("check the search settings"),
        "{err}"
    );
    assert_eq!(f.tavily_calls.load(Ordering::SeqCst), before + 1);

    assert_eq!(
        canonical_url("HTTP://Example.COM:80/a/b/?utm_source=x&id=3#frag"),
        "http://example.com/a/b?id=3"
    );
}

/// deep-research with SearxNG and the safe fetcher: sources deduplicated by canonical URL, a
/// private address and a robots-disallowed page reported as tool errors while the run goes
/// on, a Latin-1 page decoded, and a cited report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_research_over_the_web() {
    let f = fixture().await;
    let db = testing::fresh(Dialect::Sqlite).await;
    let store = Arc::new(db.store.clone());
    let fetcher = SafeFetcher::new(FetchConfig {
        trusted_origins: vec![f.origin.clone()],
        per_host_interval: Duration::ZERO,
        ..Default::default()
    });
    let deps = ResearchDeps {
        config: fathom_testkit::research_config(),
        tools: fathom_research::tools::Tools {
            search: Arc::new(search(SearchApi::Searxng {
                base_url: format!("http://{}/searxng", f.origin),
            })),
            local: None,
            fetcher: Arc::new(WebFetcher::new(fetcher, None)),
            parser: fathom_parse::ContentParser::default(),
            artifacts: store.clone(),
            docs: Default::default(),
            external: None,
        },
        models: None,
        sessions: store.clone(),
        delivery: Default::default(),
    };
    let research = Research::new(store.clone(), EngineConfig::default(), deps);
    let start = json!({"query": "How does ownership work in Rust?",
                       "settings": {"require_approval": false, "max_sources": 10,
                                    "max_search_results_per_query": 10}});
    let run = research
        .engine
        .start(DEEP_RESEARCH, start, StartOptions::default())
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), research.engine.drive_run(&run.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, RunStatus::Completed);
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e.envelope.event_type == "ToolCallResult")
        .map(|e| &e.envelope.value)
        .collect();
    let of = |tool: &str| -> Vec<&Value> {
        results
            .iter()
            .copied()
            .filter(|v| v["tool_name"] == tool)
            .collect()
    };
    let fetched: Vec<&str> = of("fetch_url")
        .iter()
        .map(|v| v["tool_kwargs"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        fetched.len(),
        5,
        "6 distinct sources less the file:// one: {fetched:?}"
    );
    assert!(
        !fetched.iter().any(|u| u.contains("utm_source")),
        "deduplicated: {fetched:?}"
    );
    let error_of = |needle: &str| {
        of("fetch_url")
            .into_iter()
            .find(|v| v["tool_kwargs"]["url"].as_str().unwrap().contains(needle))
            .map(|v| {
                (
                    v["tool_output"]["is_error"].clone(),
                    v["tool_output"]["blocks"][0]["text"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .unwrap()
    };
    let (is_error, text) = error_of("10.0.0.7");
    assert_eq!(is_error, json!(true));
    assert!(text.contains("private addresses are not fetched"), "{text}");
    let (is_error, text) = error_of("/private/notes");
    assert_eq!(is_error, json!(true));
    assert!(text.contains("robots.txt"), "{text}");
    let parsed: Vec<String> = of("parse_content")
        .iter()
        .map(|v| {
            v["tool_output"]["blocks"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        parsed.iter().any(|t| t.contains("Propriété et café")),
        "{parsed:?}"
    );
    let run = store.get_run(&run.id).await.unwrap().unwrap();
    let value = run.result.unwrap().value;
    let report = value["report_markdown"].as_str().unwrap();
    assert!(report.contains("[1]"), "{report}");
    let sources = value["sources"].as_array().unwrap();
    assert!(
        sources
            .iter()
            .all(|s| s["url"].as_str().unwrap().starts_with("http://127.0.0.1"))
    );
    // The saved session: each read source keeps its raw artifact and what a citation shows.
    let config = fathom_testkit::research_config();
    let session = fathom_research::Sessions::new(store.clone(), &config)
        .get(value["research_id"].as_str().unwrap())
        .await
        .unwrap();
    let raw_ids: Vec<&Value> = session["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "raw")
        .map(|a| &a["file_id"])
        .collect();
    let read: Vec<&Value> = session["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "read")
        .collect();
    assert_eq!(read.len(), 3, "{read:?}");
    assert!(
        read.iter().all(|s| raw_ids.contains(&&s["file_id"])),
        "{session}"
    );
    let own = read.iter().find(|s| s["title"] == "Ownership").unwrap();
    assert_eq!(own["byline"], "Docs Team");
    assert_eq!(
        own["canonical_url"],
        format!("http://{}/pages/ownership", f.origin)
    );
}
