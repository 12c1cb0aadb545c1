//! The route table. Handlers live in one module per resource; each carries its
//! `#[utoipa::path]` so `/openapi.json` documents exactly what is routed here.

pub mod agent_data;
pub mod artifacts;
pub mod events;
pub mod handlers;
pub mod health;
pub mod workflows;

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::AppState;
use crate::error::ApiError;

type State = Arc<AppState>;

/// The workflows API, served at the root and under `/deployments/{name}`.
pub fn workflows_api() -> Router<State> {
    Router::new()
        .route("/workflows", get(workflows::list_workflows))
        .route("/workflows/{name}/run", post(workflows::run_workflow))
        .route("/workflows/{name}/run-nowait", post(workflows::run_nowait))
        .route("/workflows/{name}/schema", get(workflows::workflow_schema))
        .route(
            "/workflows/{name}/representation",
            get(workflows::workflow_representation),
        )
        .route("/workflows/{name}/events", get(workflows::workflow_events))
        .route("/handlers", get(handlers::list_handlers))
        .route("/handlers/{handler_id}", get(handlers::get_handler))
        .route(
            "/handlers/{handler_id}/cancel",
            post(handlers::cancel_handler),
        )
        .route("/results/{handler_id}", get(handlers::get_result))
        .route(
            "/events/{handler_id}",
            get(events::stream_events).post(events::send_event),
        )
        .route("/artifacts/{file_id}", get(artifacts::get_artifact))
        .route("/openapi.json", get(health::openapi_json))
}

/// `/health` under a deployment: the workflow server's own answer.
pub fn deployment_health() -> Router<State> {
    Router::new().route("/health", get(health::workflow_server_health))
}

/// The app server's health routes at the root.
pub fn root_health() -> Router<State> {
    Router::new()
        .route("/health", get(health::app_health))
        .route("/healthz", get(health::app_health))
        .route("/livez", get(health::live))
        .route("/readyz", get(health::app_health))
}

/// The Agent Data API. Its verbs are path segments (`/agent-data/:search`), which the router
/// sees as an item id: `post_verb` dispatches them.
pub fn agent_data_api() -> Router<State> {
    const BASE: &str = "/api/v1/beta/agent-data";
    Router::new()
        .route(BASE, post(agent_data::create_item))
        .route(
            &format!("{BASE}/{{item_id}}"),
            get(agent_data::get_item)
                .put(agent_data::update_item)
                .delete(agent_data::delete_item)
                .post(agent_data::post_verb),
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
