//! The OpenAPI document: gathered from the routers (each routed handler's `#[utoipa::path]`),
//! plus the Agent Data verbs that one handler dispatches. A test checks that each documented
//! path is routed.

use serde_json::{Value, json};
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
        (name = "reports", description = "A report's Markdown rendered as the exports render it"),
    )
)]
struct ApiDoc;

/// `GET /openapi.json`: the document.
pub async fn serve_document() -> axum::Json<Value> {
    axum::Json(openapi_document())
}

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
        let mut doc = serde_json::to_value(&doc).unwrap_or(Value::Null);
        add_common_answers(&mut doc);
        narrow_accepted_values(&mut doc);
        doc
    })
    .clone()
}

fn error_answer(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// The answers any operation may give that its handler does not: the API key (401), a key
/// whose role is below the operation's or a request from a foreign web page (403), and a request refused before the handler reads it
/// (400 for a path or query that does not decode, 413 and 415 for its body).
fn add_common_answers(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, ops) in paths.iter_mut() {
        let Some(ops) = ops.as_object_mut() else {
            continue;
        };
        for (method, op) in ops.iter_mut() {
            let has_params = op
                .get("parameters")
                .and_then(Value::as_array)
                .is_some_and(|p| !p.is_empty());
            let has_body = op.get("requestBody").is_some();
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            let mut add = |code: &str, description: &str| {
                responses
                    .entry(code)
                    .or_insert_with(|| error_answer(description));
            };
            if path != "/health" {
                add(
                    "401",
                    "the server has an API key and the request did not give it (Authorization: Bearer)",
                );
            }
            let method = axum::http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .unwrap_or(axum::http::Method::POST);
            let (role, _) = crate::auth::needed_role(&method, path, None);
            let own = if path.ends_with("/cancel") {
                " (a run another key started, or purge=true: admin)"
            } else {
                ""
            };
            let foreign = "sent by a web page whose origin the server does not allow (see \
                           --cors-origin)";
            // Every key may read: there a 403 is only a foreign page's.
            if path == "/health" || role == crate::auth::Role::Read {
                add("403", foreign);
            } else {
                add(
                    "403",
                    &format!(
                        "the API key's role is below {role}, which this needs{own}; or {foreign}"
                    ),
                );
            }
            if uses_database(path) {
                add(
                    "503",
                    "the database does not answer; try again after Retry-After seconds",
                );
            }
            if has_params || has_body {
                add("400", "a parameter or the body is not valid");
            }
            if has_body {
                add("413", "the body is larger than the server accepts");
                add(
                    "415",
                    "the body is not JSON (Content-Type: application/json)",
                );
            }
        }
    }
}

/// Everything but the workflows' names and descriptions (answered from memory) and rendering
/// a report (from the request alone) reads or writes the database.
fn uses_database(path: &str) -> bool {
    let describes = path == "/workflows"
        || (path.starts_with("/workflows/")
            && ["/schema", "/representation", "/events"]
                .iter()
                .any(|tail| path.ends_with(tail)));
    !describes && path != "/reports/render"
}

/// Field names in Agent Data queries (`created_at`, `id` or a dotted path into `data`).
const DATA_FIELD: &str = "[A-Za-z0-9_-]{1,128}(\\.[A-Za-z0-9_-]{1,128}){0,7}";

/// What some parameters and fields really accept, where the handlers' types say less, so
/// that a request this document allows is not refused.
fn narrow_accepted_values(doc: &mut Value) {
    set_param(
        doc,
        "/artifacts/{file_id}",
        "get",
        "file_id",
        json!({"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}),
    );
    set_param(
        doc,
        "/events/{handler_id}",
        "get",
        "after_sequence",
        json!({"type": "string", "pattern": "^(now|-1|[0-9]{1,18})$",
            "description": "an integer (-1: from the start) or `now`; default: from the start. \
                The `Last-Event-ID` header wins in SSE mode"}),
    );
    set_param(
        doc,
        "/handlers",
        "get",
        "status",
        json!({
            "type": "array",
            "items": {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]}
        }),
    );
    set_param(
        doc,
        "/sessions/{research_id}/export",
        "get",
        "format",
        json!({"type": "string", "enum": ["html", "pdf", "docx"]}),
    );
    let name = json!({"type": "string", "minLength": 1, "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$",
        "description": "not blank; no NUL character"});
    let collection = json!({"type": ["string", "null"], "pattern": "^[^\\x00]*$",
        "description": "Defaults to `default` when absent or blank; no NUL character."});
    for schema in ["CreateItem", "QueryBody"] {
        if let Some(props) = doc.pointer_mut(&format!("/components/schemas/{schema}/properties")) {
            props["deployment_name"] = name.clone();
            props["collection"] = collection.clone();
        }
    }
    if let Some(props) = doc.pointer_mut("/components/schemas/RunRequest/properties") {
        props["handler_id"] = json!({"type": ["string", "null"], "pattern": "^[A-Za-z0-9_-]{1,128}$",
            "description": "Defaults to a new 10-character id."});
        props["context"] = json!({"type": ["object", "null"], "maxProperties": 0,
            "description": "Serialized workflow context: not supported (only `{}` is accepted)."});
    }
    if let Some(schema) = doc.pointer_mut("/components/schemas/SendEventRequest") {
        schema["required"] = json!(["event"]);
    }
    if let Some(props) = doc.pointer_mut("/components/schemas/SendEventRequest/properties") {
        props["event"] = json!({"type": "object", "required": ["type"],
            "properties": {"type": {"type": "string", "minLength": 1}, "value": {"type": "object"}},
            "description": "`{\"type\": \"ApproveEvent\", \"value\": {...}}`: an event type the run accepts and its value (see GET /workflows/{name}/events)."});
    }
    if let Some(props) = doc.pointer_mut("/components/schemas/QueryBody/properties") {
        props["page_size"] = json!({"type": ["integer", "null"], "minimum": 1, "maximum": 1000,
            "description": "1 to 1000; default 10."});
        props["offset"] =
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": agent_data::MAX_OFFSET});
        props["page_token"] = json!({"type": ["string", "null"], "pattern": "^[0-9]{0,12}$",
            "description": "`next_page_token` of the previous page"});
        let order_item =
            format!("(id|created_at|updated_at|data\\.{DATA_FIELD})( +(asc|desc|ASC|DESC))?");
        props["order_by"] = json!({"type": ["string", "null"],
            "pattern": format!("^ *({order_item}( *, *{order_item}){{0,7}})? *$"),
            "description": "e.g. `\"data.name desc, created_at\"`: up to 8 fields, each `id`, `created_at`, `updated_at` or `data.` and a dotted path, and `asc` or `desc`."});
        props["group_by"] = json!({"type": ["array", "null"], "maxItems": 8,
            "items": {"type": "string", "pattern": format!("^(data\\.)?{DATA_FIELD}$")},
            "description": "`:aggregate` only: data fields to group by."});
        props["filter"] = filter_schema();
    }
}

fn set_param(doc: &mut Value, path: &str, method: &str, name: &str, schema: Value) {
    let pointer = format!(
        "/paths/{}/{method}/parameters",
        path.replace('~', "~0").replace('/', "~1")
    );
    if let Some(p) = doc
        .pointer_mut(&pointer)
        .and_then(Value::as_array_mut)
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == name))
    {
        p["schema"] = schema;
    }
}

/// The filter grammar of `fathom_data::Filter`: `{"field": {"op": value}}`.
fn filter_schema() -> Value {
    let ops = |scalar: Value, ordered: Value| {
        json!({
            "type": "object",
            "minProperties": 1,
            "additionalProperties": false,
            "properties": {
                "eq": scalar, "ne": scalar,
                "gt": ordered, "gte": ordered, "lt": ordered, "lte": ordered,
                "includes": {"type": "array", "maxItems": 1000, "items": scalar},
                "excludes": {"type": "array", "maxItems": 1000, "items": scalar},
            }
        })
    };
    let data_scalar = json!({"type": ["string", "number", "boolean", "null"]});
    let data_ordered = json!({"type": ["string", "number"]});
    let id = json!({"type": "string"});
    let time = json!({"type": "integer", "minimum": -fathom_data::MAX_EXACT_INTEGER,
        "maximum": fathom_data::MAX_EXACT_INTEGER,
        "description": "milliseconds since 1970, or an ISO-8601 date or datetime as a string"});
    json!({
        "type": ["object", "null"],
        "maxProperties": 8,
        "propertyNames": {"pattern": format!("^(id|created_at|updated_at|(data\\.)?{DATA_FIELD})$")},
        "properties": {
            "id": ops(id.clone(), id),
            "created_at": ops(time.clone(), time.clone()),
            "updated_at": ops(time.clone(), time),
        },
        "additionalProperties": ops(data_scalar, data_ordered),
        "description": "`{\"field\": {\"op\": value}}`: fields are `id`, `created_at`, `updated_at` or a dotted path into `data` (letters, digits, `_`, `-`); ops eq, ne, gt, gte, lt, lte, includes, excludes.",
    })
}
