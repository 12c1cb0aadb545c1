//! The LLM research agent: the planner (phase A, no tools at all), researchers with
//! `web_search` and `fetch_url` (phase B, after the gate), a reflection after each research
//! step, and the writer. Every model call is one journaled call ([`turn`]): after a crash its
//! answer is read back, never asked for again, and its stream events appear once.

pub mod coordinator;
pub(crate) mod findings;
pub mod planner;
pub mod researcher;
pub mod verifier;
pub mod writer;

use std::sync::{Arc, Mutex};

use fathom_engine::{Envelope, StepError};
use fathom_llm::{ChatModel, ChatRequest, ChatResponse, Message, OpenAiChat, StreamDelta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::{AgentInput, AgentOutput, AgentStream, ChatMessage, ToolSelection};
use crate::state::RunCtx;

/// The run's language (ISO 639-1), as fixed when it started.
pub(crate) fn language(ctx: &RunCtx) -> String {
    ctx.read_state(|s| s.settings.as_ref().map(|x| x.language.clone()))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| fathom_report::lang::DEFAULT.to_string())
}

/// A role's system prompt, asking for the run's language: everything the model writes (plans,
/// findings, sections, reasons) is in it, while what it quotes stays as written.
pub(crate) fn system(ctx: &RunCtx, prompt: &str) -> Message {
    system_in(prompt, &language(ctx))
}

/// [`system`] for the language `code` (ISO 639-1).
pub fn system_in(prompt: &str, code: &str) -> Message {
    let name = fathom_report::lang::name(code).unwrap_or("English");
    Message::system(format!(
        "{prompt}\n\nWrite everything you write in {name} (language code {code}), whatever \
         language the sources are in; quote a source's words only as they are written."
    ))
}

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

/// A model call that gave no usable answer, as journaled: why, and whether the conversation
/// was too long for the model (the caller may shorten it and ask again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "FailureRepr")]
pub struct CallFailure {
    pub message: String,
    #[serde(default)]
    pub overflow: bool,
}

/// Journals written before failures said whether the context overflowed hold a bare message.
#[derive(Deserialize)]
#[serde(untagged)]
enum FailureRepr {
    Message(String),
    Full {
        message: String,
        #[serde(default)]
        overflow: bool,
    },
}

impl From<FailureRepr> for CallFailure {
    fn from(r: FailureRepr) -> CallFailure {
        match r {
            FailureRepr::Message(message) => CallFailure {
                message,
                overflow: false,
            },
            FailureRepr::Full { message, overflow } => CallFailure { message, overflow },
        }
    }
}

impl CallFailure {
    fn new(message: impl Into<String>) -> CallFailure {
        CallFailure {
            message: message.into(),
            overflow: false,
        }
    }
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a model call may cost in answer tokens, by role: enough for what each must say, and
/// a bound on a model that would go on forever.
pub mod output_tokens {
    pub const ROUTE: u32 = 120;
    pub const PLAN: u32 = 700;
    pub const RESEARCH: u32 = 700;
    pub const REFLECT: u32 = 300;
    pub const WRITE: u32 = 700;
    pub const VERIFY: u32 = 150;
}

/// How many times an unusable answer is asked for again.
const RETRIES: u32 = 1;

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
) -> Result<Result<Turn, CallFailure>, StepError> {
    let name = agent.to_string();
    let structured = request.response_format.is_some();
    let request_chars: usize = request.messages.iter().map(|m| m.content.len()).sum();
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
    let outcome: Result<Turn, CallFailure> = ctx
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
                    Err(e) if is_setup_error(&e) => {
                        Err(StepError::permanent_because("the model cannot be used", e))
                    }
                    // Too long a conversation: the caller may shorten it and ask again.
                    Err(e @ fathom_llm::LlmError::ContextExceeded { .. }) => Ok(Err(CallFailure {
                        message: e.to_string(),
                        overflow: true,
                    })),
                    // The server stayed unavailable: journaled, and the agent goes on
                    // without this answer.
                    Err(e) => Ok(Err(CallFailure::new(e.to_string()))),
                }
            },
            tick,
            move |outcome: &Result<Turn, CallFailure>| output_event(&name, structured, outcome),
        )
        .await?;
    if let Ok(t) = &outcome {
        // An answer cut off (a loop, say) comes without usage: estimated at four characters
        // a token, so a model that keeps looping still spends the budget.
        let used = t.response.usage.map_or_else(
            || {
                let chars: usize = t.response.content.len() + request_chars;
                (chars / 4) as u64
            },
            |u| u.total_tokens,
        );
        ctx.edit_state(|s| s.tokens_used += used);
    }
    Ok(outcome)
}

/// Why the agent cannot use an answer as it is, if it cannot.
fn flaw(r: &ChatResponse, structured: bool) -> Option<&'static str> {
    if r.finish_reason == fathom_llm::FINISH_REPETITION {
        return Some("repeated itself");
    }
    if r.content.trim().is_empty() && r.tool_calls.is_empty() {
        return Some("was empty");
    }
    // Prose where JSON was asked for is the caller's to handle (the planner says what was
    // wrong; others go on without); JSON cut off by the length bound is worth a shorter try.
    if structured && r.finish_reason == "length" && r.json().is_none() {
        return Some("was cut off at its length limit");
    }
    None
}

/// A model call as [`turn`], asked again when the answer is one the agent cannot use (it
/// repeated itself and was cut, it was empty, or its JSON was cut off by the length bound):
/// at most `RETRIES` times, each under a key of its own (so a resumed run asks exactly
/// what an uninterrupted one asked), each shown on the stream as an `AgentInput` saying
/// what was wrong. An answer still unusable after that is given up on, with that reason.
pub async fn ask(
    ctx: &RunCtx,
    key: &str,
    agent: &str,
    model: &Arc<dyn ChatModel>,
    mut request: ChatRequest,
    mut before: Vec<Envelope>,
) -> Result<Result<Turn, CallFailure>, StepError> {
    let structured = request.response_format.is_some();
    let mut attempt = 0;
    loop {
        let key = match attempt {
            0 => key.to_string(),
            n => format!("{key}:again{n}"),
        };
        let t = match turn(ctx, &key, agent, model, request.clone(), before).await? {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        let Some(why) = flaw(&t.response, structured) else {
            return Ok(Ok(t));
        };
        if attempt == RETRIES {
            // A loop cut at its first copy still says what it said once.
            if t.response.finish_reason == fathom_llm::FINISH_REPETITION
                && !t.response.content.trim().is_empty()
            {
                tracing::warn!(
                    agent,
                    "model answer repeated itself again; its first copy is used"
                );
                return Ok(Ok(t));
            }
            tracing::warn!(agent, why, "model answer unusable; given up");
            return Ok(Err(CallFailure::new(format!(
                "the model's answer {why}, {} times",
                attempt + 1
            ))));
        }
        tracing::warn!(agent, why, "model answer unusable; asking again");
        let again = format!(
            "Your answer {why}. Answer again, briefly{}.",
            if structured {
                ", with the JSON object only"
            } else {
                ""
            }
        );
        // The unusable answer is not sent back: a loop read again tends to be written again,
        // and so does one at the same temperature.
        request.messages.push(Message::user(again.clone()));
        request.temperature = Some(request.temperature.unwrap_or(0.2) + 0.3);
        before = vec![Envelope::of(&AgentInput {
            input: vec![ChatMessage::new("user", again)],
            current_agent_name: agent.into(),
        })?];
        attempt += 1;
    }
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
    outcome: &Result<Turn, CallFailure>,
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
