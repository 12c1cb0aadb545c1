//! The route table. Handlers live in one module per resource; each carries its
//! `#[utoipa::path]`, which both routes it and documents it, so `/openapi.json` documents
//! exactly what is routed here.

pub mod agent_data;
pub mod artifacts;
pub mod events;
pub mod exports;
pub mod handlers;
pub mod health;
pub mod metrics;
pub mod reports;
pub mod workflows;

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::error::ApiError;

type State = Arc<AppState>;

/// The workflows API, served at the root and under `/deployments/{name}`. Each handler is
/// routed at the path and method its `#[utoipa::path]` names, and documented from it: one
/// list serves the router and the OpenAPI document.
pub fn workflows_api() -> OpenApiRouter<State> {
    OpenApiRouter::new()
        .routes(routes!(workflows::list_workflows))
        .routes(routes!(workflows::run_workflow))
        .routes(routes!(workflows::run_nowait))
        .routes(routes!(workflows::workflow_schema))
        .routes(routes!(workflows::workflow_representation))
        .routes(routes!(workflows::workflow_events))
        .routes(routes!(handlers::list_handlers))
        .routes(routes!(handlers::get_handler))
        .routes(routes!(handlers::cancel_handler))
        .routes(routes!(handlers::get_result))
        .routes(routes!(events::stream_events, events::send_event))
        .routes(routes!(artifacts::get_artifact))
        .routes(routes!(exports::export_session))
        .routes(routes!(reports::render_report))
}

/// `/health` under a deployment: the workflow server's own answer.
pub fn deployment_health() -> OpenApiRouter<State> {
    OpenApiRouter::new().routes(routes!(health::workflow_server_health))
}

/// The app server's health routes at the root (probes, not part of the API document).
pub fn root_health() -> Router<State> {
    Router::new()
        .route("/health", get(health::app_health))
        .route("/healthz", get(health::app_health))
        .route("/livez", get(health::live))
        .route("/readyz", get(health::app_health))
}

/// `GET /metrics` (Prometheus), behind the API key when one is set.
pub fn metrics() -> Router<State> {
    Router::new().route("/metrics", get(metrics::metrics))
}

/// The Agent Data API. Its verbs are path segments (`/agent-data/:search`), which the router
/// sees as an item id: `post_verb` dispatches them, so they are documented in
/// [`crate::openapi`] rather than routed here.
pub fn agent_data_api() -> OpenApiRouter<State> {
    OpenApiRouter::new()
        .routes(routes!(agent_data::create_item))
        .routes(routes!(
            agent_data::get_item,
            agent_data::update_item,
            agent_data::delete_item
        ))
        .route(
            "/api/v1/beta/agent-data/{item_id}",
            post(agent_data::post_verb),
        )
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("Not Found")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// A panic in a handler becomes a 500 with the usual body; the panic is logged.
pub fn panic_response(err: Box<dyn Any + Send + 'static>) -> Response<axum::body::Body> {
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    ApiError::internal(format!("handler panicked: {msg}")).into_response()
}
