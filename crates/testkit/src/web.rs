//! A web on loopback: a search API and the pages it finds.

/// One result as SearxNG's `/search?format=json` gives it (the fields of its `results`
/// entries; `number_of_results` beside them is 0 when the engines give no estimate).
pub fn searxng_result(url: &str, title: &str, content: &str) -> serde_json::Value {
    let parsed = url::Url::parse(url).ok();
    serde_json::json!({
        "url": url,
        "title": title,
        "content": content,
        "publishedDate": null,
        "thumbnail": "",
        "engine": "duckduckgo",
        "template": "default.html",
        "parsed_url": [
            parsed.as_ref().map_or("", |u| u.scheme()),
            parsed.as_ref().and_then(|u| u.host_str()).unwrap_or(""),
            parsed.as_ref().map_or("", |u| u.path()),
            "", "", ""
        ],
        "img_src": "",
        "priority": "",
        "engines": ["duckduckgo", "brave"],
        "positions": [1, 2],
        "score": 3.0,
        "category": "general",
    })
}

/// The web for agent tests, on loopback: `/search?q=` in SearxNG's JSON format (one result
/// per query, a page named after it) and the pages, each stating one fact about its topic.
/// Counts search and page requests.
pub struct SearchAndPages {
    /// `127.0.0.1:port`.
    pub origin: String,
    pub searches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub pages: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SearchAndPages {
    pub async fn start() -> SearchAndPages {
        use axum::extract::{Path, Query};
        use axum::routing::get;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (searches, pages) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let origin = format!("127.0.0.1:{}", listener.local_addr().expect("bound").port());
        let base = format!("http://{origin}");
        let (s, p) = (searches.clone(), pages.clone());
        let app = axum::Router::new()
            .route(
                "/search",
                get(
                    move |Query(q): Query<std::collections::HashMap<String, String>>| {
                        let (s, base) = (s.clone(), base.clone());
                        async move {
                            use axum::response::IntoResponse;
                            s.fetch_add(1, Ordering::SeqCst);
                            // SearxNG answers JSON only when asked for it (and allowed to).
                            if q.get("format").map(String::as_str) != Some("json") {
                                return (axum::http::StatusCode::FORBIDDEN, "403 Forbidden")
                                    .into_response();
                            }
                            let query = q.get("q").cloned().unwrap_or_default();
                            let page: u32 =
                                q.get("pageno").and_then(|p| p.parse().ok()).unwrap_or(1);
                            let results = if query.contains("(no results)") || page > 1 {
                                Vec::new()
                            } else {
                                let slug = query.replace(' ', "-");
                                let url = format!("{base}/pages/{slug}");
                                vec![searxng_result(
                                    &url,
                                    &format!("All about {query}"),
                                    "a page",
                                )]
                            };
                            axum::Json(serde_json::json!({
                                "query": query,
                                "number_of_results": 0,
                                "results": results,
                                "answers": [],
                                "corrections": [],
                                "infoboxes": [],
                                "suggestions": [],
                                "unresponsive_engines": [["wikidata", "timeout"]],
                            }))
                            .into_response()
                        }
                    },
                ),
            )
            .route(
                "/pages/{slug}",
                get(move |Path(slug): Path<String>| {
                    let p = p.clone();
                    async move {
                        p.fetch_add(1, Ordering::SeqCst);
                        let topic = slug.replace('-', " ");
                        axum::response::Html(format!(
                            "<html><head><title>All about {topic}</title></head><body><article>\
                             <h1>All about {topic}</h1><p>The key fact about {topic} is that it \
                             was measured at 42 units in 2024 by the survey team.</p><p>A second \
                             paragraph about {topic} keeps the page long enough to be an \
                             article.</p></article></body></html>"
                        ))
                    }
                }),
            )
            .route("/robots.txt", get(|| async { "User-agent: *\nAllow: /\n" }));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SearchAndPages {
            origin,
            searches,
            pages,
        }
    }
}
