//! Workflows: list them, start runs, and describe them (schemas and graph).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use fathom_engine::{ErasedWorkflow, EventRole, StartOptions, StopEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::State as AppRef;
use super::handlers::{HandlerView, handler_status_code};
use crate::AppState;
use crate::auth::{Caller, CallerOf};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, PathParam};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WorkflowsList {
    pub workflows: Vec<String>,
}

/// The body of `run` and `run-nowait`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct RunRequest {
    /// The start event: its fields, or an envelope `{"type", "value"}`.
    #[schema(value_type = Option<Object>)]
    pub start_event: Option<Value>,
    /// Defaults to a new 10-character id.
    pub handler_id: Option<String>,
    /// Start event fields, used when `start_event` is absent.
    #[schema(value_type = Option<Object>)]
    pub kwargs: Option<Value>,
    /// Serialized workflow context: not supported.
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
}

fn workflow(state: &AppState, public: &str) -> ApiResult<(String, Arc<dyn ErasedWorkflow>)> {
    let engine_name = state
        .config
        .deployment
        .engine_name(public)
        .ok_or_else(ApiError::workflow_not_found)?;
    let wf = state
        .engine
        .workflow(engine_name)
        .ok_or_else(ApiError::workflow_not_found)?;
    Ok((engine_name.to_string(), wf.clone()))
}

/// The start payload from a run request: an envelope's `value` (or legacy `data`), the plain
/// object, or `kwargs`.
fn start_payload(req: &RunRequest) -> ApiResult<Value> {
    // Clients send `"context": {}` on every run; only a real context is refused.
    let has_context = match &req.context {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    if has_context {
        return Err(ApiError::bad_request(
            "'context' is not supported: Fathom keeps run state on the server",
        ));
    }
    let given = match (&req.start_event, &req.kwargs) {
        (Some(Value::Null) | None, Some(kwargs)) => kwargs.clone(),
        (Some(Value::Null) | None, None) => json!({}),
        (Some(Value::String(s)), _) => serde_json::from_str(s).map_err(|e| {
            ApiError::bad_request(format!("'start_event' is a string but not JSON: {e}"))
        })?,
        (Some(v), _) => v.clone(),
    };
    let Value::Object(obj) = given else {
        return Err(ApiError::bad_request(
            "Validation error for 'start_event': expected an object",
        ));
    };
    match obj.get("value").or_else(|| obj.get("data")) {
        Some(inner) if obj.contains_key("type") || obj.contains_key("value") => Ok(inner.clone()),
        _ => Ok(Value::Object(obj)),
    }
}

async fn start(
    state: &AppState,
    caller: &Caller,
    public: &str,
    req: RunRequest,
) -> ApiResult<HandlerView> {
    let (engine_name, _) = workflow(state, public)?;
    let payload = start_payload(&req)?;
    if let Some(id) = &req.handler_id
        && (id.is_empty()
            || id.len() > 128
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        return Err(ApiError::bad_request(
            "handler_id must be 1-128 letters, digits, '-' or '_'",
        ));
    }
    let run = state
        .engine
        .start(
            &engine_name,
            payload,
            StartOptions {
                run_id: req.handler_id,
                ..Default::default()
            },
        )
        .await?;
    // A `run` key may cancel the runs it started: which key that was is recorded.
    if let Some(key) = &caller.name {
        crate::owners::record(state, &run.id, key).await?;
    }
    Ok(HandlerView::of(state, &run))
}

/// Names of the workflows this deployment serves.
#[utoipa::path(get, path = "/workflows", tag = "workflows",
    responses((status = 200, body = WorkflowsList)))]
pub async fn list_workflows(State(state): State<AppRef>) -> Json<WorkflowsList> {
    Json(WorkflowsList {
        workflows: state.config.deployment.workflows.keys().cloned().collect(),
    })
}

/// Starts a run and waits for it to end: 200 with the handler when completed, 500 with the
/// handler when failed or cancelled.
#[utoipa::path(post, path = "/workflows/{name}/run", tag = "workflows",
    params(("name" = String, Path)), request_body = RunRequest,
    responses((status = 200, body = HandlerView), (status = 500, body = HandlerView),
              (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody),
              (status = 409, body = crate::ErrorBody)))]
pub async fn run_workflow(
    State(state): State<AppRef>,
    caller: CallerOf,
    PathParam(name): PathParam,
    ApiJson(req): ApiJson<RunRequest>,
) -> ApiResult<Response> {
    let started = start(&state, &caller.0, &name, req).await?;
    let run = state.engine.wait_terminal(&started.handler_id).await?;
    Ok((
        handler_status_code(run.status),
        Json(HandlerView::of(&state, &run)),
    )
        .into_response())
}

/// Starts a run and returns at once.
#[utoipa::path(post, path = "/workflows/{name}/run-nowait", tag = "workflows",
    params(("name" = String, Path)), request_body = RunRequest,
    responses((status = 200, body = HandlerView), (status = 400, body = crate::ErrorBody),
              (status = 404, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub async fn run_nowait(
    State(state): State<AppRef>,
    caller: CallerOf,
    PathParam(name): PathParam,
    ApiJson(req): ApiJson<RunRequest>,
) -> ApiResult<Json<HandlerView>> {
    Ok(Json(start(&state, &caller.0, &name, req).await?))
}

/// JSON Schemas of the start and stop events.
#[utoipa::path(get, path = "/workflows/{name}/schema", tag = "workflows",
    params(("name" = String, Path)),
    responses((status = 200, description = "`{\"start\": schema, \"stop\": schema}`"),
              (status = 404, body = crate::ErrorBody)))]
pub async fn workflow_schema(
    State(state): State<AppRef>,
    PathParam(name): PathParam,
) -> ApiResult<Json<Value>> {
    let (_, wf) = workflow(&state, &name)?;
    let of_role = |role| wf.events().iter().find(|e| e.role == role);
    let start = of_role(EventRole::Start).map(|e| e.schema.clone());
    let stop = of_role(EventRole::Stop)
        .map(|e| e.schema.clone())
        .unwrap_or_else(<StopEvent as fathom_engine::Event>::value_schema);
    Ok(Json(json!({"start": start, "stop": stop})))
}

/// The workflow as a graph: steps and event types, with edges from each event type to the
/// step that accepts it and from each step to the events it emits.
#[utoipa::path(get, path = "/workflows/{name}/representation", tag = "workflows",
    params(("name" = String, Path)),
    responses((status = 200, description = "`{\"graph\": {name, description, nodes, edges}}`"),
              (status = 404, body = crate::ErrorBody)))]
pub async fn workflow_representation(
    State(state): State<AppRef>,
    PathParam(name): PathParam,
) -> ApiResult<Json<Value>> {
    let (_, wf) = workflow(&state, &name)?;
    let graph = fathom_engine::StepGraph::of(wf.as_ref());
    let steps = graph.step_names();
    let mut nodes: Vec<Value> = steps
        .iter()
        .map(|step| {
            json!({"id": step, "label": step, "node_type": "step", "title": step, "event_type": null})
        })
        .collect();
    let mut seen_events = std::collections::HashSet::new();
    for (ev, role) in &graph.events {
        if seen_events.insert(*ev) {
            nodes.push(json!({"id": ev, "label": ev, "node_type": "event",
                   "title": ev, "event_type": ev, "event_role": role.as_str()}));
        }
    }
    let mut edges: Vec<Value> = graph
        .steps
        .iter()
        .map(|(step, accepts)| json!({"source": accepts, "target": step, "label": null}))
        .collect();
    edges.extend(
        graph
            .emits
            .iter()
            .map(|(step, ev)| json!({"source": step, "target": ev, "label": null})),
    );
    Ok(Json(json!({"graph": {
        "name": name,
        "description": format!("{} steps, started by {}", steps.len(), graph.start),
        "nodes": nodes,
        "edges": edges,
    }})))
}

/// JSON Schemas of every event type the workflow declares.
#[utoipa::path(get, path = "/workflows/{name}/events", tag = "workflows",
    params(("name" = String, Path)),
    responses((status = 200, description = "`{\"events\": [schema, ...]}`"),
              (status = 404, body = crate::ErrorBody)))]
pub async fn workflow_events(
    State(state): State<AppRef>,
    PathParam(name): PathParam,
) -> ApiResult<Json<Value>> {
    let (_, wf) = workflow(&state, &name)?;
    let events: Vec<Value> = wf.events().iter().map(|e| e.schema.clone()).collect();
    Ok(Json(json!({"events": events})))
}
