//! Health routes and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use fathom_engine::store::RunFilter;
use serde_json::{Value, json};

use super::State as AppRef;

/// Whether the store answers: a run listing of one row, within a second (a probe must not
/// hang while the database is away).
async fn store_ok(state: &AppRef) -> bool {
    let probe = RunFilter {
        limit: Some(1),
        ..Default::default()
    };
    let answered = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        state.engine.store().list_runs(&probe),
    )
    .await;
    matches!(answered, Ok(Ok(_)))
}

/// Health of the workflow server and its store.
#[utoipa::path(get, path = "/health", tag = "workflows",
    responses((status = 200, description = "`{\"status\":\"healthy\"}`"),
              (status = 503, description = "`{\"status\":\"unhealthy\"}`: the store does not answer")))]
pub async fn workflow_server_health(State(state): State<AppRef>) -> (StatusCode, Json<Value>) {
    if store_ok(&state).await {
        (StatusCode::OK, Json(json!({"status": "healthy"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unhealthy"})),
        )
    }
}

/// Health of the app server (`/health`, `/healthz`, `/readyz` at the root).
pub async fn app_health(State(state): State<AppRef>) -> (StatusCode, Json<Value>) {
    if store_ok(&state).await {
        (StatusCode::OK, Json(json!({"status": "Healthy"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "Unhealthy"})),
        )
    }
}

/// Liveness: the process answers.
pub async fn live() -> Json<Value> {
    Json(json!({"status": "Healthy"}))
}
