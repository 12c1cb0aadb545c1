//! The OpenAPI document: every routed handler's `#[utoipa::path]`, gathered here. A test
//! checks that each documented path is routed.

use serde_json::Value;
use utoipa::OpenApi;

use crate::routes::{agent_data, artifacts, events, handlers, health, workflows};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fathom",
        description = "Durable workflows with an HTTP approval gate. The workflows API is served \
            at the root and under /deployments/{deployment_name}; it follows the LlamaIndex \
            workflows server. The Agent Data API follows LlamaCloud's.",
        license(name = "Apache-2.0")
    ),
    paths(
        health::workflow_server_health,
        workflows::list_workflows,
        workflows::run_workflow,
        workflows::run_nowait,
        workflows::workflow_schema,
        workflows::workflow_representation,
        workflows::workflow_events,
        handlers::list_handlers,
        handlers::get_handler,
        handlers::cancel_handler,
        handlers::get_result,
        events::stream_events,
        events::send_event,
        artifacts::get_artifact,
        agent_data::create_item,
        agent_data::get_item,
        agent_data::update_item,
        agent_data::delete_item,
        agent_data::search,
        agent_data::aggregate,
        agent_data::delete_where,
    ),
    components(schemas(crate::ErrorBody)),
    tags(
        (name = "workflows", description = "Workflows and starting runs"),
        (name = "handlers", description = "Runs (handlers): status, results, cancellation"),
        (name = "events", description = "A run's event stream, and events sent into it"),
        (name = "agent-data", description = "JSON items by deployment and collection"),
        (name = "artifacts", description = "Fetched sources, parsed text and reports, by sha256"),
    )
)]
struct ApiDoc;

pub fn openapi_document() -> Value {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    serde_json::to_value(&doc).unwrap_or(Value::Null)
}
