//! The model-facing types: messages, tools, requests, answers, usage, errors.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation, as the chat-completions API takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// The calls an assistant message asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Message {
        Message::plain(Role::System, text)
    }
    pub fn user(text: impl Into<String>) -> Message {
        Message::plain(Role::User, text)
    }
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCallRequest>) -> Message {
        Message {
            tool_calls,
            ..Message::plain(Role::Assistant, text)
        }
    }
    pub fn tool(call_id: impl Into<String>, text: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Message::plain(Role::Tool, text)
        }
    }
    fn plain(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool the model may call: its name, what it does, and a JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A tool call the model asked for. `arguments` is the JSON text as the model wrote it;
/// `kwargs` the parsed object (tolerantly: see [`crate::parse_loose_json`]), or an error
/// message the agent can hand back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCallRequest {
    pub fn kwargs(&self) -> Result<Value, String> {
        if self.arguments.trim().is_empty() {
            return Ok(Value::Object(Default::default()));
        }
        match crate::parse_loose_json(&self.arguments) {
            Some(v @ Value::Object(_)) => Ok(v),
            Some(other) => Err(format!(
                "arguments of {} must be a JSON object, not {other}",
                self.name
            )),
            None => Err(format!(
                "arguments of {} are not valid JSON: {}",
                self.name, self.arguments
            )),
        }
    }
}

/// Ask for an answer that is JSON matching a schema. Servers that support it get
/// `response_format: json_schema`; the answer is parsed tolerantly either way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    pub name: String,
    pub schema: Value,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub response_format: Option<ResponseFormat>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// The `finish_reason` of an answer cut short because it repeated itself: its content ends
/// with the first copy of the repeated text, and its usage may be missing.
pub const FINISH_REPETITION: &str = "repetition";

/// A whole answer: the text, the tool calls (in index order), why it stopped, what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCallRequest>,
    /// `stop`, `tool_calls`, `length`, ... as the server said; empty if it said nothing;
    /// [`FINISH_REPETITION`] if the client cut the answer off.
    pub finish_reason: String,
    /// None when the server reported no usage.
    pub usage: Option<Usage>,
    pub model: String,
    /// Attempts it took (1 unless retried).
    pub attempts: u32,
}

impl ChatResponse {
    /// The answer as JSON: strict parse, else the first JSON value found in it (code fences,
    /// prose around it, trailing commas tolerated).
    pub fn json(&self) -> Option<Value> {
        crate::parse_loose_json(&self.content)
    }
}

/// A piece of the answer as it streams.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamDelta {
    /// Text of the answer.
    Text(String),
    /// Reasoning text some servers stream separately (`reasoning_content`).
    Thinking(String),
    /// A tool call was started (its id and name are known).
    ToolCallStarted {
        index: usize,
        id: String,
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("the model server refused the request: HTTP {status}: {message}")]
    Refused { status: u16, message: String },
    /// The prompt is longer than the model can take; asking again as is will not help.
    #[error("the conversation exceeds the model's context: {message}")]
    ContextExceeded { message: String },
    #[error("the model server is unavailable after {attempts} attempts: {last}")]
    Unavailable { attempts: u32, last: String },
    #[error("the model sent nothing for {after:?} and was abandoned")]
    Stalled { after: std::time::Duration },
    #[error("the model did not finish within {limit:?}")]
    Timeout { limit: std::time::Duration },
    #[error("unreadable answer from the model server: {0}")]
    Protocol(String),
    #[error("model configuration: {0}")]
    Config(String),
}

/// A chat model. `on_delta` sees the answer as it streams; the returned response is whole.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name, for events and logs.
    fn name(&self) -> &str;
    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &(dyn Fn(StreamDelta) + Send + Sync),
    ) -> Result<ChatResponse, LlmError>;
}
