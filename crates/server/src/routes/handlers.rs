//! Handlers: one run of a workflow, seen as the Python server shows it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fathom_data::format_timestamp_ms;
use fathom_engine::store::{CancelOutcome, RunFilter, RunRecord, RunStatus};
use serde::Serialize;
use serde_json::{Value, json};

use super::State as AppRef;
use crate::AppState;
use crate::auth::{CallerOf, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::{PathParam, QueryParams};

/// A run as the workflows API shows it (`llama-compat.md` §3).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HandlerView {
    pub handler_id: String,
    pub workflow_name: String,
    pub run_id: String,
    /// `running`, `completed`, `failed` or `cancelled`; a run parked at a gate is `running`.
    pub status: String,
    pub error: Option<String>,
    /// The stop event as a read envelope, once completed.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    pub started_at: String,
    pub updated_at: Option<String>,
    pub completed_at: Option<String>,
    pub result_unreadable: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HandlersList {
    pub handlers: Vec<HandlerView>,
}

/// `running` covers runs with work to do and runs waiting for an event.
pub fn public_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running | RunStatus::Waiting => "running",
        other => other.as_str(),
    }
}

impl HandlerView {
    pub fn of(state: &AppState, run: &RunRecord) -> HandlerView {
        HandlerView {
            handler_id: run.id.clone(),
            workflow_name: state
                .config
                .deployment
                .public_name(&run.workflow)
                .to_string(),
            run_id: run.id.clone(),
            status: public_status(run.status).to_string(),
            error: run.error.clone(),
            result: run
                .result
                .as_ref()
                .filter(|_| run.status == RunStatus::Completed)
                .and_then(|r| serde_json::to_value(r).ok()),
            started_at: format_timestamp_ms(run.created_at),
            updated_at: Some(format_timestamp_ms(run.updated_at)),
            completed_at: run.completed_at.map(format_timestamp_ms),
            result_unreadable: false,
        }
    }
}

/// The status code the Python server gives a handler: 202 running, 200 completed, 500 failed
/// or cancelled, always with the handler as the body (the UI reads it from a 500 too).
pub fn handler_status_code(status: RunStatus) -> StatusCode {
    match status {
        RunStatus::Running | RunStatus::Waiting => StatusCode::ACCEPTED,
        RunStatus::Completed => StatusCode::OK,
        RunStatus::Failed | RunStatus::Cancelled => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub async fn load_run(state: &AppState, id: &str) -> ApiResult<RunRecord> {
    state
        .engine
        .store()
        .get_run(id)
        .await?
        .ok_or_else(ApiError::handler_not_found)
}

/// Lists handlers, newest first.
#[utoipa::path(get, path = "/handlers", tag = "handlers",
    params(("status" = Option<Vec<String>>, Query, description = "repeatable: running, completed, failed, cancelled"),
           ("workflow_name" = Option<Vec<String>>, Query, description = "repeatable")),
    responses((status = 200, body = HandlersList), (status = 400, body = crate::ErrorBody)))]
pub async fn list_handlers(
    State(state): State<AppRef>,
    query: QueryParams,
) -> ApiResult<Json<HandlersList>> {
    let mut statuses = Vec::new();
    for s in query.all("status") {
        match s {
            "running" => statuses.extend([RunStatus::Running, RunStatus::Waiting]),
            "completed" => statuses.push(RunStatus::Completed),
            "failed" => statuses.push(RunStatus::Failed),
            "cancelled" => statuses.push(RunStatus::Cancelled),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown status '{other}'; expected running, completed, failed or cancelled"
                )));
            }
        }
    }
    let deployment = &state.config.deployment;
    let names = query.all("workflow_name");
    // No workflow is named with a NUL character (nor can the database compare one).
    if !names.is_empty() && names.iter().all(|n| n.contains('\0')) {
        return Ok(Json(HandlersList {
            handlers: Vec::new(),
        }));
    }
    let workflows: Vec<String> = names
        .into_iter()
        .filter(|n| !n.contains('\0'))
        .map(|w| deployment.engine_name(w).unwrap_or(w).to_string())
        .collect();
    let runs = state
        .engine
        .store()
        .list_runs(&RunFilter {
            workflows,
            statuses,
            limit: Some(1000),
        })
        .await?;
    Ok(Json(HandlersList {
        handlers: runs.iter().map(|r| HandlerView::of(&state, r)).collect(),
    }))
}

/// One handler: 202 while running, 200 completed, 500 failed or cancelled (body: the handler).
#[utoipa::path(get, path = "/handlers/{handler_id}", tag = "handlers",
    params(("handler_id" = String, Path)),
    responses((status = 200, body = HandlerView), (status = 202, body = HandlerView),
              (status = 500, body = HandlerView, description = "failed or cancelled"),
              (status = 404, body = crate::ErrorBody)))]
pub async fn get_handler(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
) -> ApiResult<Response> {
    let run = load_run(&state, &id).await?;
    Ok((
        handler_status_code(run.status),
        Json(HandlerView::of(&state, &run)),
    )
        .into_response())
}

/// Cancels a handler; with `purge=true` also deletes it and everything recorded for it.
#[utoipa::path(post, path = "/handlers/{handler_id}/cancel", tag = "handlers",
    params(("handler_id" = String, Path), ("purge" = Option<bool>, Query)),
    responses((status = 200, description = "`{\"status\":\"cancelled\"}` or `{\"status\":\"deleted\"}`"),
              (status = 404, body = crate::ErrorBody),
              (status = 409, body = crate::ErrorBody, description = "already finished (without purge)")))]
pub async fn cancel_handler(
    State(state): State<AppRef>,
    CallerOf(caller): CallerOf,
    PathParam(id): PathParam,
    query: QueryParams,
) -> ApiResult<Json<Value>> {
    let purge = query.bool("purge", false)?;
    if purge && caller.role < Role::Admin {
        return Err(caller.refused("purging a run", Role::Admin));
    }
    if caller.role < Role::Admin {
        // A `run` or `approve` key cancels the runs it started, and no other.
        if state.engine.store().run_head(&id).await?.is_none() {
            return Err(ApiError::handler_not_found());
        }
        let starter = crate::owners::starter(&state, &id).await?;
        if starter.is_none() || starter != caller.name {
            return Err(caller.refused("cancelling a run another key started", Role::Admin));
        }
    }
    match state.engine.cancel_by(&id, caller.name.as_deref()).await? {
        CancelOutcome::NotFound => return Err(ApiError::handler_not_found()),
        CancelOutcome::AlreadyTerminal(s) if !purge => {
            return Err(ApiError::conflict(format!(
                "Handler already {}",
                public_status(s)
            )));
        }
        CancelOutcome::Cancelled | CancelOutcome::AlreadyTerminal(_) => {}
    }
    if purge {
        state.engine.store().delete_run(&id).await?;
        crate::owners::forget(&state, &id).await?;
        return Ok(Json(json!({"status": "deleted"})));
    }
    Ok(Json(json!({"status": "cancelled"})))
}

/// Deprecated form of `GET /handlers/{id}`: `result` is the stop event's value (or its
/// `result` field for a plain `StopEvent`).
#[utoipa::path(get, path = "/results/{handler_id}", tag = "handlers",
    params(("handler_id" = String, Path)),
    responses((status = 200, body = HandlerView), (status = 202, body = HandlerView),
              (status = 500, body = HandlerView), (status = 404, body = crate::ErrorBody)))]
pub async fn get_result(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
) -> ApiResult<Response> {
    let run = load_run(&state, &id).await?;
    let mut view = HandlerView::of(&state, &run);
    if let Some(env) = run.result.as_ref().filter(|_| view.result.is_some()) {
        view.result = Some(
            if env.qualified_name.as_deref() == Some("workflows.events.StopEvent") {
                env.value.get("result").cloned().unwrap_or(Value::Null)
            } else {
                env.value.clone()
            },
        );
    }
    Ok((handler_status_code(run.status), Json(view)).into_response())
}
