//! A web on loopback: a search API and the pages it finds.

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
                            s.fetch_add(1, Ordering::SeqCst);
                            let query = q.get("q").cloned().unwrap_or_default();
                            if query.contains("(no results)") {
                                return axum::Json(serde_json::json!({"results": []}));
                            }
                            let slug = query.replace(' ', "-");
                            axum::Json(serde_json::json!({"results": [
                                {"url": format!("{base}/pages/{slug}"),
                                 "title": format!("All about {query}"), "content": "a page"}]}))
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
