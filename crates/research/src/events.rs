//! Events of the research workflows: what clients send and receive (`llama-compat.md` §4, §7)
//! and what the steps pass each other.

use fathom_engine::impl_event;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::parsed::ParsedRef;
use crate::rules::plan::Plan;
use crate::settings::Mode;
use fathom_corpus::SearchHit;
use fathom_report::report::Source;

// ---- Sent by clients ----

/// Starts a research run: `{"query": "...", "settings": {...}}`, and `"follow_up_of": ID` for
/// a follow-up question on a finished session (also accepted as `parent_id`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResearchStart {
    pub query: String,
    #[serde(default)]
    pub settings: Option<Value>,
    /// A completed session this question follows up: its sources are read first, and only
    /// what they do not cover is searched again.
    #[serde(default, alias = "parent_id", skip_serializing_if = "Option::is_none")]
    pub follow_up_of: Option<String>,
}
impl_event!(
    ResearchStart,
    "ResearchStart",
    qualified = "fathom.research.ResearchStart"
);

/// The decision at the gate. Approval runs `plan` if given (an edited plan), else the
/// proposed one; rejection re-plans with `feedback` and `answers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveEvent {
    pub approved: bool,
    #[serde(default)]
    pub feedback: Option<String>,
    #[serde(default)]
    pub plan: Option<Plan>,
    #[serde(default)]
    pub answers: Option<Vec<String>>,
    /// Who decided: the name of the API key the server took the decision from. Set by the
    /// server on `POST /events/{id}` (what a sender puts here is replaced); null when the
    /// server has no keys, and from the command line or MCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When the server took the decision (ISO 8601, UTC); set by the server like `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}
impl_event!(
    ApproveEvent,
    "ApproveEvent",
    qualified = "fathom.research.ApproveEvent",
    types = ["HumanResponseEvent"]
);

/// The start event of `research-metadata`: `{}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartEvent {}
impl_event!(
    StartEvent,
    "StartEvent",
    qualified = "workflows.events.StartEvent"
);

// ---- Between steps (never streamed) ----

/// The coordinator's choice, made: `simple`, `web` or `deep` (the reason is in the state).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueryRouted {
    pub mode: Mode,
}
impl_event!(QueryRouted, "QueryRouted");

/// The first look at the local corpus, done; its passages are in the state for the planner.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Investigated {
    pub hits: usize,
}
impl_event!(Investigated, "Investigated");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Replan {
    pub feedback: Option<String>,
    #[serde(default)]
    pub answers: Vec<String>,
}
impl_event!(Replan, "Replan");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanDrafted {
    pub round: u32,
}
impl_event!(PlanDrafted, "PlanDrafted");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanApproved {
    pub plan: Plan,
}
impl_event!(PlanApproved, "PlanApproved");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourcesFound {
    pub hits: Vec<SearchHit>,
}
impl_event!(SourcesFound, "SourcesFound");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourcesParsed {
    pub docs: Vec<ParsedRef>,
}
impl_event!(SourcesParsed, "SourcesParsed");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReportWritten {}
impl_event!(ReportWritten, "ReportWritten");

/// The session is saved as completed and the run asked for its report to be delivered: the
/// result to deliver, and to end the run with once delivery is done (or given up on).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeliverReport {
    pub result: ResearchResult,
}
impl_event!(DeliverReport, "DeliverReport");

// ---- Results (StopEvent subclasses) ----

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResearchResult {
    pub research_id: String,
    pub status: String,
    pub query: String,
    pub plan: Option<Plan>,
    pub report_markdown: String,
    pub sources: Vec<Source>,
    /// The stored report (content-addressed artifact id).
    pub report_file_id: Option<String>,
    /// The session this run followed up, if it was a follow-up question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}
impl_event!(
    ResearchResult,
    "ResearchResult",
    qualified = "fathom.research.ResearchResult",
    types = ["StopEvent"]
);

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetadataResponse {
    pub json_schema: Value,
    pub extracted_data_collection: String,
    pub research_collection: String,
    pub deployment_name: String,
    pub settings_defaults: Map<String, Value>,
}
impl_event!(
    MetadataResponse,
    "MetadataResponse",
    qualified = "fathom.research.MetadataResponse",
    types = ["StopEvent"]
);

// ---- Agent events, with the field shapes of llama_index's FunctionAgent (§7) ----

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TextBlock {
    pub block_type: String,
    pub text: String,
}

impl TextBlock {
    pub fn new(text: impl Into<String>) -> Self {
        TextBlock {
            block_type: "text".into(),
            text: text.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChatMessage {
    pub role: String,
    pub additional_kwargs: Map<String, Value>,
    pub blocks: Vec<TextBlock>,
}

impl ChatMessage {
    pub fn new(role: &str, text: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            additional_kwargs: Map::new(),
            blocks: vec![TextBlock::new(text)],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolSelection {
    pub tool_id: String,
    pub tool_name: String,
    pub tool_kwargs: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentInput {
    pub input: Vec<ChatMessage>,
    pub current_agent_name: String,
}
impl_event!(
    AgentInput,
    "AgentInput",
    qualified = "llama_index.core.agent.workflow.workflow_events.AgentInput"
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentStream {
    pub delta: String,
    pub response: String,
    pub current_agent_name: String,
    pub tool_calls: Vec<ToolSelection>,
    pub thinking_delta: Option<String>,
}
impl_event!(
    AgentStream,
    "AgentStream",
    qualified = "llama_index.core.agent.workflow.workflow_events.AgentStream"
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCall {
    pub tool_name: String,
    pub tool_kwargs: Value,
    pub tool_id: String,
}
impl_event!(
    ToolCall,
    "ToolCall",
    qualified = "llama_index.core.agent.workflow.workflow_events.ToolCall"
);

/// `ToolOutput` as llama_index core 0.14.25 serializes it (text in `blocks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolOutput {
    pub blocks: Vec<TextBlock>,
    pub tool_name: String,
    pub raw_input: Value,
    pub raw_output: Value,
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCallResult {
    pub tool_name: String,
    pub tool_kwargs: Value,
    pub tool_id: String,
    pub tool_output: ToolOutput,
    pub return_direct: bool,
}
impl_event!(
    ToolCallResult,
    "ToolCallResult",
    qualified = "llama_index.core.agent.workflow.workflow_events.ToolCallResult"
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentOutput {
    pub response: ChatMessage,
    pub structured_response: Option<Value>,
    pub current_agent_name: String,
    pub tool_calls: Vec<ToolSelection>,
    pub retry_messages: Vec<ChatMessage>,
}
impl_event!(
    AgentOutput,
    "AgentOutput",
    qualified = "llama_index.core.agent.workflow.workflow_events.AgentOutput"
);
