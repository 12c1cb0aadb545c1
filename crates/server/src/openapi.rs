//! The OpenAPI document: gathered from the routers (each routed handler's `#[utoipa::path]`),
//! plus the Agent Data verbs that one handler dispatches. A test checks that each documented
//! path is routed.

use serde_json::Value;
use utoipa::OpenApi;

use crate::routes::{self, agent_data};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fathom",
        description = "Durable workflows with an HTTP approval gate. The workflows API is served \
            at the root and under /deployments/{deployment_name}; it follows the LlamaIndex \
            workflows server. The Agent Data API follows LlamaCloud's.",
        license(name = "Apache-2.0")
    ),
    paths(agent_data::search, agent_data::aggregate, agent_data::delete_where),
    components(schemas(crate::ErrorBody)),
    tags(
        (name = "workflows", description = "Workflows and starting runs"),
        (name = "handlers", description = "Runs (handlers): status, results, cancellation"),
        (name = "events", description = "A run's event stream, and events sent into it"),
        (name = "agent-data", description = "JSON items by deployment and collection"),
        (name = "artifacts", description = "Fetched sources, parsed text and reports, by sha256"),
        (name = "sessions", description = "Saved research sessions: a finished report as HTML, PDF or DOCX"),
    )
)]
struct ApiDoc;

pub fn openapi_document() -> Value {
    static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.info.version = env!("CARGO_PKG_VERSION").to_string();
        for api in [
            routes::deployment_health(),
            routes::workflows_api(),
            routes::agent_data_api(),
        ] {
            doc.merge(api.into_openapi());
        }
        serde_json::to_value(&doc).unwrap_or(Value::Null)
    })
    .clone()
}
