//! The LLM research agent: the planner (phase A, no tools at all), researchers with
//! `web_search` and `fetch_url` (phase B, after the gate), a reflection after each research
//! step, and the writer. Every model call is one journaled call ([`turn`]): after a crash its
//! answer is read back, never asked for again, and its stream events appear once.

pub mod planner;
pub mod researcher;
pub mod writer;

use std::sync::{Arc, Mutex};

use fathom_engine::{Envelope, StepError};
use fathom_llm::{ChatModel, ChatRequest, ChatResponse, OpenAiChat, StreamDelta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::{AgentOutput, AgentStream, ChatMessage, ToolSelection};
use crate::state::RunCtx;

/// The model settings of each role (all three, or the agent is not used).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRoles {
    pub planner: fathom_llm::ModelConfig,
    pub researcher: fathom_llm::ModelConfig,
    pub writer: fathom_llm::ModelConfig,
}

/// The model of each role.
#[derive(Clone)]
pub struct Models {
    pub planner: Arc<dyn ChatModel>,
    pub researcher: Arc<dyn ChatModel>,
    pub writer: Arc<dyn ChatModel>,
}

impl Models {
    pub fn from_roles(roles: &AgentRoles) -> Result<Models, fathom_llm::LlmError> {
        Ok(Models {
            planner: Arc::new(OpenAiChat::new(roles.planner.clone())?),
            researcher: Arc::new(OpenAiChat::new(roles.researcher.clone())?),
            writer: Arc::new(OpenAiChat::new(roles.writer.clone())?),
        })
    }
}

/// A model answer as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Turn {
    pub response: ChatResponse,
}

/// Text received and not yet on the stream, and all text so far.
#[derive(Default)]
struct Pending {
    fresh: String,
    so_far: String,
}

/// One model call through the journal under `key`, streamed live: `before` events (an
/// `AgentInput`, say) go on the stream when it starts, the text as `AgentStream` deltas as
/// it arrives (every [`fathom_engine::LIVE_FLUSH`]), and an `AgentOutput` with the result. A
/// failure (after the client's own retries) is journaled too, as a message, so a step run
/// again does not ask again. Tokens are added to the run's count.
pub async fn turn(
    ctx: &RunCtx,
    key: &str,
    agent: &str,
    model: &Arc<dyn ChatModel>,
    request: ChatRequest,
    before: Vec<Envelope>,
) -> Result<Result<Turn, String>, StepError> {
    let name = agent.to_string();
    let structured = request.response_format.is_some();
    let model = model.clone();
    let pending = Arc::new(Mutex::new(Pending::default()));
    let sink = pending.clone();
    let tick = {
        let name = name.clone();
        move || -> Result<Vec<Envelope>, StepError> {
            let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.fresh.is_empty() {
                return Ok(Vec::new());
            }
            let delta = std::mem::take(&mut p.fresh);
            Ok(vec![Envelope::of(&AgentStream {
                delta,
                response: p.so_far.clone(),
                current_agent_name: name.clone(),
                tool_calls: Vec::new(),
                thinking_delta: None,
            })?])
        }
    };
    let outcome: Result<Turn, String> = ctx
        .run_live(
            key,
            before,
            || async move {
                let on_delta = |d: StreamDelta| {
                    if let StreamDelta::Text(t) = d {
                        let mut p = sink.lock().unwrap_or_else(|e| e.into_inner());
                        p.fresh.push_str(&t);
                        p.so_far.push_str(&t);
                    }
                };
                match model.chat(&request, &on_delta).await {
                    Ok(response) => Ok(Ok(Turn { response })),
                    // A refused key, an unknown model, a bad URL: no later attempt will do
                    // better, and a report written without the model would hide it. The
                    // step fails (it is not journaled) and the run reports why.
                    Err(e) if is_setup_error(&e) => Err(StepError::permanent(e)),
                    // The server stayed unavailable: journaled, and the agent goes on
                    // without this answer.
                    Err(e) => Ok(Err(e.to_string())),
                }
            },
            tick,
            move |outcome: &Result<Turn, String>| output_event(&name, structured, outcome),
        )
        .await?;
    if let Ok(t) = &outcome {
        let used = t.response.usage.unwrap_or_default();
        ctx.edit_state(|s| s.tokens_used += used.total_tokens);
    }
    Ok(outcome)
}

/// Errors that come from how the model is set up rather than from the moment.
fn is_setup_error(e: &fathom_llm::LlmError) -> bool {
    use fathom_llm::LlmError;
    match e {
        LlmError::Config(_) => true,
        LlmError::Refused { status, .. } => matches!(status, 401 | 403 | 404),
        _ => false,
    }
}

/// The `AgentOutput` of a model call.
fn output_event(
    agent: &str,
    structured: bool,
    outcome: &Result<Turn, String>,
) -> Result<Vec<Envelope>, StepError> {
    let mut usage = None;
    let (text, calls, structured_response) = match outcome {
        Ok(t) => {
            let calls: Vec<ToolSelection> = t
                .response
                .tool_calls
                .iter()
                .map(|c| ToolSelection {
                    tool_id: c.id.clone(),
                    tool_name: c.name.clone(),
                    tool_kwargs: c.kwargs().unwrap_or(Value::Null),
                })
                .collect();
            let structured_response = if structured { t.response.json() } else { None };
            usage = t.response.usage;
            (t.response.content.clone(), calls, structured_response)
        }
        Err(e) => (format!("The model call failed: {e}"), Vec::new(), None),
    };
    // The call's token usage rides along where llama_index keeps provider extras.
    let mut response = ChatMessage::new("assistant", text);
    if let Some(u) = usage {
        response
            .additional_kwargs
            .insert("usage".into(), serde_json::to_value(u)?);
    }
    Ok(vec![Envelope::of(&AgentOutput {
        response,
        structured_response,
        current_agent_name: agent.into(),
        tool_calls: calls,
        retry_messages: Vec::new(),
    })?])
}

/// A JSON Schema for `T`, inlined (no `$ref`s), as models and strict mode want it.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
        m.remove("title");
    }
    v
}
