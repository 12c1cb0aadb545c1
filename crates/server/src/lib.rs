//! # fathom-server: the HTTP edge
//!
//! Serves the workflows API of the LlamaIndex workflows server (`llama-compat.md` §2-§6) at the
//! root and under `/deployments/{name}`, the LlamaCloud Agent Data API (§9) at
//! `/api/v1/beta/agent-data`, health routes, an OpenAPI document at `/openapi.json`, a
//! finished session's report exported as HTML, PDF or DOCX at `/sessions/{id}/export`, a
//! report's Markdown rendered as the exports render it at `/reports/render`, and a web UI at
//! `/` and `/deployments/{name}/ui/` (files under `ui/`, embedded).
//! Everything goes through the engine and the store traits; this crate knows no SQL.
//!
//! Where Fathom departs from the Python server, on purpose:
//! - `GET /events/{id}` with no position replays the run's stream from the start; the Python
//!   server starts at `now` and drops what was emitted before the first subscribe. Pass
//!   `after_sequence=now` for the Python behaviour.
//! - `POST /events/{id}` is idempotent: the same event sent twice while the run is at the same
//!   point is delivered once (or give an `Idempotency-Key` header). Events sent before the run
//!   waits for them are kept, never dropped.
//! - Cancelling a finished handler is 409 `Handler already completed` (Python answers 404).

mod auth;
mod connection;
mod deployment;
mod error;
mod extract;
mod guard;
mod openapi;
mod owners;
mod routes;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use fathom_data::{ArtifactStore, CollectionScope, CollectionStore};
use fathom_engine::Engine;
use tower_http::catch_panic::CatchPanicLayer;

pub use auth::{ApiKey, Caller, KeyEntry, Role, parse_keys_file};
pub use deployment::{Deployment, DeploymentError, EMBEDDED_PYPROJECT};
pub use error::{ApiError, ErrorBody};
pub use openapi::openapi_document;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub deployment: Deployment,
    /// When set, every route but health needs `Authorization: Bearer <key>` (or `?api_key=`
    /// for EventSource, which cannot send headers). This key is an `admin` key named
    /// [`DEFAULT_KEY_NAME`], beside those in `keys`.
    pub api_key: Option<String>,
    /// Named keys with roles (a keys file). With none here and no `api_key`, the API is open.
    pub keys: Vec<ApiKey>,
    /// Web origins allowed beside the server's own (the bundled UI), e.g.
    /// `http://localhost:5173`; `*` allows any. A request from any other origin is refused.
    pub cors_origins: Vec<String>,
    pub body_limit: usize,
    /// Idle time after which an SSE stream gets a `: heartbeat` comment.
    pub heartbeat: Duration,
    /// The Agent Data collection research sessions are saved in (exports read them there).
    pub sessions: CollectionScope,
    /// Renders this process's metrics for `GET /metrics`; none: the route answers 404.
    pub metrics: Option<MetricsExport>,
    /// The server listens on loopback only: a request addressed to any other host name (a
    /// web page whose name was made to resolve to 127.0.0.1, DNS rebinding) is refused.
    pub loopback_only: bool,
}

/// Renders the process's metrics in the Prometheus text format.
#[derive(Clone)]
pub struct MetricsExport(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsExport")
    }
}

impl ServerConfig {
    pub fn new(deployment: Deployment) -> Self {
        ServerConfig {
            deployment,
            api_key: None,
            keys: Vec::new(),
            cors_origins: Vec::new(),
            body_limit: 1024 * 1024,
            heartbeat: Duration::from_secs(25),
            sessions: CollectionScope {
                deployment_name: "_public".into(),
                collection: "research-sessions".into(),
            },
            metrics: None,
            loopback_only: false,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then accepts nothing more, lets
/// every open connection finish the request it is serving, and returns once all have closed.
///
/// HTTP/1. Requests are read and their responses written by [`connection`], which holds no
/// buffer between requests or while an event stream waits; the odd ones (`HEAD`, chunked or
/// large bodies, `Expect`, upgrades) go to hyper's own HTTP/1 connection builder with the
/// rest of their connection, the bytes left unread in the socket for hyper to read directly
/// (with `axum::serve`, which hands bytes it read back to hyper through a rewinding wrapper,
/// hyper's read buffer was 16 KiB for the connection's life, not 8).
///
/// Nagle's algorithm is off: an SSE event or a small response is sent when written, not held
/// back until the client acknowledges the previous one (with delayed acknowledgements that
/// held an approval's first streamed event back by up to 40 ms).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let http = hyper::server::conn::http1::Builder::new();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // Each connection's task holds a sender: once all are dropped, every connection closed.
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<std::convert::Infallible>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    // Bounded by `shutdown`; each pass accepts one connection.
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let connection = connection::serve(tcp, app.clone(), http.clone(), stopping.clone());
        let open = open.clone();
        tokio::spawn(async move {
            connection.await;
            drop(open);
        });
    }
    drop(listener);
    stop.send_replace(true);
    drop(open);
    let _ = all_closed.recv().await;
}

/// After a failed accept: nothing for an error of that one connection; otherwise (out of
/// file descriptors, say) logs it and waits a second, so that some may be freed meanwhile.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept error");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The name of the key given as `api_key` (`FATHOM_API_KEY`), an `admin` key.
pub const DEFAULT_KEY_NAME: &str = "default";

/// What every request handler reaches.
pub struct AppState {
    pub engine: Arc<Engine>,
    pub collections: Arc<dyn CollectionStore>,
    /// Fetched documents and reports, served at `/artifacts/{file_id}`.
    pub artifacts: Arc<dyn ArtifactStore>,
    pub config: ServerConfig,
    /// Every key the server takes: `config.keys` and `config.api_key`. Empty: no auth.
    pub(crate) keys: Vec<ApiKey>,
    /// Turned on when the server shuts down: open event streams end, so their clients
    /// reconnect (with `Last-Event-ID`) to a server that stays.
    closing: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// Checks that every workflow the deployment names is registered with the engine.
    pub fn new(
        engine: Arc<Engine>,
        collections: Arc<dyn CollectionStore>,
        artifacts: Arc<dyn ArtifactStore>,
        config: ServerConfig,
    ) -> Result<Arc<AppState>, DeploymentError> {
        for (public, engine_name) in &config.deployment.workflows {
            if engine.workflow(engine_name).is_none() {
                return Err(DeploymentError::Invalid {
                    path: "deployment".into(),
                    reason: format!(
                        "workflow '{public}' names 'fathom:{engine_name}', which this server \
                         does not have (it has: {})",
                        engine.workflow_names().join(", ")
                    ),
                });
            }
        }
        let mut keys = config.keys.clone();
        if let Some(secret) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            if keys.iter().any(|k| k.name == DEFAULT_KEY_NAME) {
                return Err(DeploymentError::Invalid {
                    path: "keys".into(),
                    reason: format!(
                        "the keys file names a key '{DEFAULT_KEY_NAME}', the name of the key \
                         given as FATHOM_API_KEY; rename one"
                    ),
                });
            }
            keys.push(ApiKey::from_secret(DEFAULT_KEY_NAME, Role::Admin, secret));
        }
        Ok(Arc::new(AppState {
            engine,
            collections,
            artifacts,
            config,
            keys,
            closing: tokio::sync::watch::channel(false).0,
        }))
    }

    /// Ends every open event stream (at shutdown), and any opened from now on.
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }

    pub(crate) fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }
}

/// What a process that serves no API (`fathom worker`) answers on its side port: the health
/// routes, so an orchestrator can probe it, and its metrics.
pub fn health_router(state: Arc<AppState>) -> Router {
    routes::root_health()
        .merge(routes::metrics())
        .fallback(routes::not_found)
        .with_state(state)
}

/// The whole HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    router_with(state, None)
}

/// The whole HTTP application, with `protected` routes of the caller's (the MCP endpoint)
/// beside the API, behind the same API key, CORS and limits.
pub fn router_with(state: Arc<AppState>, protected: Option<Router<Arc<AppState>>>) -> Router {
    // The document itself is served beside the API it describes, not part of it.
    let api: Router<Arc<AppState>> = Router::from(routes::workflows_api())
        .route("/openapi.json", axum::routing::get(openapi::serve_document));
    let deployment_health: Router<Arc<AppState>> = routes::deployment_health().into();
    let deployment_path = format!("/deployments/{}", state.config.deployment.name);
    let api = Router::new()
        .merge(routes::root_health())
        .merge(routes::metrics())
        .merge(api.clone())
        .nest(&deployment_path, api.merge(deployment_health))
        .merge(Router::from(routes::agent_data_api()))
        .merge(protected.unwrap_or_default())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ));
    // The UI's own files need no key: the page asks a person for it.
    let app = ui::router(&state.config.deployment.name)
        .merge(api)
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::refuse_declared_oversize,
        ))
        .layer(CatchPanicLayer::custom(routes::panic_response))
        .layer(guard::cors(state.config.cors_origins.clone()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::refuse_foreign_web_requests,
        ));
    app.with_state(state)
}
