//! The OpenAI-compatible chat-completions client.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::repetition::{CHECK_EVERY, loop_cut};
use crate::types::{
    ChatModel, ChatRequest, ChatResponse, FINISH_REPETITION, LlmError, Message, Role, StreamDelta,
    ToolCallRequest, Usage,
};

/// Where a model is served and how patiently it is called.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The API root, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// One attempt's limit, from request to last chunk.
    pub timeout: Duration,
    /// Longest silence between two chunks before the answer is abandoned as stalled.
    pub idle_timeout: Duration,
    /// Attempts on 429, 5xx, timeouts and dropped connections, in all.
    pub max_attempts: u32,
    /// Longest wait between two attempts (a larger `Retry-After` is cut to this).
    pub max_backoff: Duration,
}

impl ModelConfig {
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> ModelConfig {
        ModelConfig {
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.is_empty()),
            model: model.to_string(),
            timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(60),
            max_attempts: 4,
            max_backoff: Duration::from_secs(30),
        }
    }

    /// `OPENAI_MODEL` with `OPENAI_BASE_URL` (default `https://api.openai.com/v1`) and
    /// `OPENAI_API_KEY`; None when no model is named.
    pub fn from_env() -> Option<ModelConfig> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let model = var("OPENAI_MODEL")?;
        let base = var("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into());
        Some(ModelConfig::new(&base, &model, var("OPENAI_API_KEY")))
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions`.
pub struct OpenAiChat {
    config: ModelConfig,
    http: reqwest::Client,
}

/// Bounds on what one answer may hold.
const MAX_ANSWER_CHARS: usize = 4 * 1024 * 1024;
const MAX_TOOL_CALLS: usize = 128;
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Parts of a request some compatible servers refuse, each dropped once when refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optional {
    /// `response_format: json_schema` (answers are parsed tolerantly without it).
    Schema,
    /// `stream_options: {include_usage}` (usage is then missing, not wrong).
    StreamOptions,
}

/// The optional parts a request is sent with.
#[derive(Debug, Clone, Copy)]
struct Sending {
    schema: bool,
    stream_options: bool,
}

/// How one attempt failed.
enum Failure {
    /// Worth another attempt (after `retry_after`, if the server said).
    Retry {
        why: String,
        retry_after: Option<Duration>,
        stalled: bool,
    },
    /// The server refused an optional part of the request: ask again without it.
    Unsupported(Optional),
    Fatal(LlmError),
}

impl OpenAiChat {
    pub fn new(config: ModelConfig) -> Result<OpenAiChat, LlmError> {
        if config.model.trim().is_empty() {
            return Err(LlmError::Config("no model named".into()));
        }
        let url = reqwest::Url::parse(&config.base_url)
            .map_err(|e| LlmError::Config(format!("base URL '{}': {e}", config.base_url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(LlmError::Config(format!(
                "base URL '{}' is not http(s)",
                config.base_url
            )));
        }
        let http = fathom_fetch::client_builder()
            .connect_timeout(Duration::from_secs(10).min(config.timeout))
            .build()
            .map_err(|e| LlmError::Config(e.to_string()))?;
        Ok(OpenAiChat { config, http })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn body(&self, request: &ChatRequest, sending: Sending) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": true,
        });
        if sending.stream_options {
            body["stream_options"] = json!({"include_usage": true});
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body["tool_choice"] = json!("auto");
        }
        if let Some(f) = request.response_format.as_ref().filter(|_| sending.schema) {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": f.name, "schema": crate::strict_schema(&f.schema), "strict": true}});
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = request.max_tokens {
            body["max_tokens"] = json!(m);
        }
        body
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
        sending: Sending,
        on_delta: &(dyn Fn(StreamDelta) + Send + Sync),
        emitted: &mut bool,
    ) -> Result<ChatResponse, Failure> {
        let deadline = Instant::now() + self.config.timeout;
        let mut req = self
            .http
            .post(format!("{}/chat/completions", self.config.base_url))
            .timeout(self.config.timeout)
            .json(&self.body(request, sending));
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = match tokio::time::timeout(self.config.idle_timeout, req.send()).await {
            Err(_) => return Err(stalled(self.config.idle_timeout)),
            Ok(Err(e)) => {
                return Err(Failure::Retry {
                    why: root_cause(&e),
                    retry_after: None,
                    stalled: false,
                });
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let sent = Sending {
                schema: sending.schema && request.response_format.is_some(),
                ..sending
            };
            return Err(http_failure(resp, sent).await);
        }
        let is_json = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
        let mut answer = Answer::default();
        if is_json {
            // A server that ignored `stream: true` answers with one whole completion.
            let body = resp.bytes().await.map_err(|e| Failure::Retry {
                why: root_cause(&e),
                retry_after: None,
                stalled: false,
            })?;
            let v: Value = serde_json::from_slice(&body).map_err(|e| {
                Failure::Fatal(LlmError::Protocol(format!("completion is not JSON: {e}")))
            })?;
            answer.absorb_whole(&v, on_delta);
            return answer.finish(&self.config.model).map_err(Failure::Fatal);
        }
        let mut events = resp.bytes_stream().eventsource();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Failure::Fatal(LlmError::Timeout {
                    limit: self.config.timeout,
                }));
            }
            let next =
                tokio::time::timeout(self.config.idle_timeout.min(left), events.next()).await;
            let event = match next {
                Err(_) if left <= self.config.idle_timeout => {
                    return Err(Failure::Fatal(LlmError::Timeout {
                        limit: self.config.timeout,
                    }));
                }
                Err(_) => return Err(stalled(self.config.idle_timeout)),
                // The stream ended without [DONE]: fine if the answer finished.
                Ok(None) if !answer.finish_reason.is_empty() => break,
                Ok(None) => {
                    return Err(Failure::Retry {
                        why: "the stream ended before the answer finished".into(),
                        retry_after: None,
                        stalled: false,
                    });
                }
                Ok(Some(Err(e))) => {
                    return Err(Failure::Retry {
                        why: format!("the stream broke: {e}"),
                        retry_after: None,
                        stalled: false,
                    });
                }
                Ok(Some(Ok(ev))) => ev,
            };
            let data = event.data.trim();
            if data == "[DONE]" {
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(data).map_err(|e| {
                let shown: String = data.chars().take(200).collect();
                Failure::Retry {
                    why: format!("malformed chunk ({e}): {shown}"),
                    retry_after: None,
                    stalled: false,
                }
            })?;
            if let Some(err) = chunk.get("error") {
                let message = error_message(err);
                if exceeds_context(&message, err) {
                    return Err(Failure::Fatal(LlmError::ContextExceeded { message }));
                }
                return Err(Failure::Retry {
                    why: format!("error in the stream: {message}"),
                    retry_after: None,
                    stalled: false,
                });
            }
            *emitted |= answer.absorb_chunk(&chunk, on_delta)?;
            if answer.looped {
                // Leaving drops the stream, which closes the connection: the server stops
                // generating and the rest of the loop is neither read nor paid for.
                tracing::info!(model = %self.config.model, kept = answer.content.len(), "the answer repeats itself; cut at its first copy");
                break;
            }
        }
        answer.finish(&self.config.model).map_err(Failure::Fatal)
    }

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = Duration::from_millis(250u64.saturating_mul(1 << attempt.min(10)));
        retry_after.unwrap_or(exp).min(self.config.max_backoff)
    }
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn name(&self) -> &str {
        &self.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &(dyn Fn(StreamDelta) + Send + Sync),
    ) -> Result<ChatResponse, LlmError> {
        use tracing::field::Empty;
        let model = self.config.model.as_str();
        // Named as OpenTelemetry's GenAI conventions name them.
        let span = tracing::info_span!(
            "model call",
            gen_ai.request.model = model,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            attempts = Empty,
            error = Empty
        );
        let result = self
            .chat_with_retries(request, on_delta)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(r) => {
                // Recorded as i64: the OpenTelemetry layer would send a u64 as a string.
                span.record("attempts", i64::from(r.attempts));
                if let Some(u) = &r.usage {
                    let n = |t: u64| i64::try_from(t).unwrap_or(i64::MAX);
                    span.record("gen_ai.usage.input_tokens", n(u.prompt_tokens));
                    span.record("gen_ai.usage.output_tokens", n(u.completion_tokens));
                    let tokens = |kind: &'static str, n: u64| {
                        metrics::counter!("fathom_llm_tokens_total",
                            "model" => model.to_string(), "kind" => kind)
                        .increment(n)
                    };
                    tokens("input", u.prompt_tokens);
                    tokens("output", u.completion_tokens);
                }
                "ok"
            }
            Err(e) => {
                span.record("error", tracing::field::display(e));
                "error"
            }
        };
        metrics::counter!("fathom_llm_calls_total", "model" => model.to_string(), "outcome" => outcome)
            .increment(1);
        result
    }
}

impl OpenAiChat {
    /// One chat call, asked again on a failure worth retrying.
    async fn chat_with_retries(
        &self,
        request: &ChatRequest,
        on_delta: &(dyn Fn(StreamDelta) + Send + Sync),
    ) -> Result<ChatResponse, LlmError> {
        let mut sending = Sending {
            schema: true,
            stream_options: true,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Once text has reached the reader, a second attempt would show it twice.
            let mut emitted = false;
            let outcome = self.attempt(request, sending, on_delta, &mut emitted).await;
            match outcome {
                Ok(mut r) => {
                    r.attempts = attempts;
                    // Small local models often write the call as JSON text in the answer.
                    if !request.tools.is_empty() && r.tool_calls.is_empty() {
                        r.tool_calls = crate::calls_in_text(&r.content, &request.tools);
                    }
                    return Ok(r);
                }
                // Each optional part is dropped at most once (http_failure only reports a
                // part that was sent), so this does not loop.
                Err(Failure::Unsupported(part)) => {
                    tracing::info!(model = %self.config.model, ?part, "server refused an optional request part; asking without it");
                    match part {
                        Optional::Schema => sending.schema = false,
                        Optional::StreamOptions => sending.stream_options = false,
                    }
                    attempts -= 1;
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry {
                    why,
                    retry_after,
                    stalled,
                }) => {
                    if emitted || attempts >= self.config.max_attempts {
                        return Err(if stalled {
                            LlmError::Stalled {
                                after: self.config.idle_timeout,
                            }
                        } else {
                            LlmError::Unavailable {
                                attempts,
                                last: why,
                            }
                        });
                    }
                    let wait = self.backoff(attempts, retry_after);
                    tracing::warn!(model = %self.config.model, attempt = attempts, wait_ms = wait.as_millis() as u64, %why, "model call failed; retrying");
                    metrics::counter!("fathom_llm_retries_total", "model" => self.config.model.clone())
                        .increment(1);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

fn stalled(idle: Duration) -> Failure {
    Failure::Retry {
        why: format!("nothing received for {idle:?}"),
        retry_after: None,
        stalled: true,
    }
}

/// A message as the chat-completions API takes it.
fn wire_message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut v = json!({"role": role, "content": m.content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        if m.content.is_empty() {
            v["content"] = Value::Null;
        }
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

async fn http_failure(resp: reqwest::Response, sent: Sending) -> Failure {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(3600.0)));
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
    let error = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|mut v| v.get_mut("error").map(Value::take))
        .unwrap_or(Value::Null);
    let message = match &error {
        Value::Null => text.trim().chars().take(500).collect(),
        err => error_message(err),
    };
    match status {
        408 | 409 | 429 | 500..=599 => Failure::Retry {
            why: format!("HTTP {status}: {message}"),
            retry_after,
            stalled: false,
        },
        // Checked before the optional parts: dropping one would not make the prompt fit.
        400 | 413 | 422 if exceeds_context(&message, &error) => {
            Failure::Fatal(LlmError::ContextExceeded { message })
        }
        400 | 422 if sent.schema && mentions(&message, &["response_format", "json_schema"]) => {
            Failure::Unsupported(Optional::Schema)
        }
        400 | 422 if sent.stream_options && mentions(&message, &["stream_options"]) => {
            Failure::Unsupported(Optional::StreamOptions)
        }
        _ => Failure::Fatal(LlmError::Refused { status, message }),
    }
}

/// Whether an error says the prompt does not fit the model's context, in the words of
/// llama.cpp (`exceed_context_size_error`), OpenAI (`context_length_exceeded`), vLLM and
/// others, in its message, type or code.
fn exceeds_context(message: &str, error: &Value) -> bool {
    let field = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or_default();
    let said = format!("{message} {} {}", field("type"), field("code"));
    mentions(
        &said,
        &[
            "exceed_context_size",
            "context_length",
            "context length",
            "context size",
            "context window",
            "too many tokens",
            "prompt is too long",
        ],
    )
}

fn mentions(message: &str, words: &[&str]) -> bool {
    let m = message.to_ascii_lowercase();
    words.iter().any(|w| m.contains(w))
}

fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        v => v
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string()),
    }
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        format!("timed out ({cause})")
    } else {
        cause.to_string()
    }
}

/// The answer being put together from chunks.
#[derive(Default)]
struct Answer {
    content: String,
    /// Tool calls by their `index`: id, name, argument text.
    calls: BTreeMap<usize, (String, String, String)>,
    finish_reason: String,
    usage: Option<Usage>,
    model: Option<String>,
    /// Content length when it was last looked at for a loop.
    checked: usize,
    /// Cut short because it repeated itself.
    looped: bool,
}

impl Answer {
    /// Folds one streamed chunk in; true if it showed the reader anything.
    fn absorb_chunk(
        &mut self,
        chunk: &Value,
        on_delta: &(dyn Fn(StreamDelta) + Send + Sync),
    ) -> Result<bool, Failure> {
        let mut shown = false;
        if let Some(m) = chunk.get("model").and_then(Value::as_str) {
            self.model.get_or_insert_with(|| m.to_string());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(read_usage(u));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(false);
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            if self.content.len() + text.len() > MAX_ANSWER_CHARS {
                return Err(Failure::Fatal(LlmError::Protocol(format!(
                    "answer longer than {MAX_ANSWER_CHARS} bytes"
                ))));
            }
            self.content.push_str(text);
            on_delta(StreamDelta::Text(text.to_string()));
            shown = true;
        }
        let thinking = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        if let Some(t) = thinking {
            on_delta(StreamDelta::Thinking(t.to_string()));
            shown = true;
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, call) in calls.iter().enumerate() {
                // Servers that send whole calls sometimes leave `index` out.
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(self.calls.len().max(pos), |i| i as usize);
                if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(Failure::Fatal(LlmError::Protocol(format!(
                        "more than {MAX_TOOL_CALLS} tool calls in one answer"
                    ))));
                }
                let entry = self.calls.entry(index).or_default();
                let was_named = !entry.1.is_empty();
                if let Some(id) = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    entry.0 = id.to_string();
                }
                let f = call.get("function").unwrap_or(&Value::Null);
                if let Some(name) = f.get("name").and_then(Value::as_str) {
                    entry.1.push_str(name);
                }
                match f.get("arguments") {
                    Some(Value::String(a)) => entry.2.push_str(a),
                    // Some servers send the arguments as an object, not as JSON text.
                    Some(v @ Value::Object(_)) => entry.2.push_str(&v.to_string()),
                    _ => {}
                }
                if entry.2.len() > MAX_ANSWER_CHARS {
                    return Err(Failure::Fatal(LlmError::Protocol(
                        "tool call arguments too long".into(),
                    )));
                }
                if !was_named && !entry.1.is_empty() {
                    on_delta(StreamDelta::ToolCallStarted {
                        index,
                        id: entry.0.clone(),
                        name: entry.1.clone(),
                    });
                    shown = true;
                }
            }
        }
        if let Some(r) = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            self.finish_reason = r.to_string();
        }
        if self.content.len() >= self.checked + CHECK_EVERY {
            self.cut_loop();
        }
        Ok(shown)
    }

    /// Cuts an answer that ends in a loop back to the loop's first copy.
    fn cut_loop(&mut self) {
        self.checked = self.content.len();
        if self.looped {
            return;
        }
        if let Some(keep) = loop_cut(&self.content) {
            self.content.truncate(keep);
            self.finish_reason = FINISH_REPETITION.into();
            self.looped = true;
        }
    }

    /// Takes a whole (non-streamed) completion.
    fn absorb_whole(&mut self, v: &Value, on_delta: &(dyn Fn(StreamDelta) + Send + Sync)) {
        let choice = v
            .get("choices")
            .and_then(|c| c.get(0))
            .unwrap_or(&Value::Null);
        let message = choice.get("message").cloned().unwrap_or(Value::Null);
        let as_chunk = json!({
            "model": v.get("model"),
            "usage": v.get("usage"),
            "choices": [{"delta": message, "finish_reason": choice.get("finish_reason")}],
        });
        let _ = self.absorb_chunk(&as_chunk, on_delta);
        if self.finish_reason.is_empty() {
            self.finish_reason = "stop".into();
        }
    }

    fn finish(mut self, requested_model: &str) -> Result<ChatResponse, LlmError> {
        // What came after the last look, or a whole answer, may end in a loop too.
        if self.content.len() > self.checked {
            self.cut_loop();
        }
        let tool_calls: Vec<ToolCallRequest> = self
            .calls
            .into_iter()
            .map(|(index, (id, name, arguments))| ToolCallRequest {
                id: if id.is_empty() {
                    format!("call_{index}")
                } else {
                    id
                },
                name,
                arguments,
            })
            .collect();
        if let Some(bad) = tool_calls.iter().find(|c| c.name.is_empty()) {
            return Err(LlmError::Protocol(format!(
                "tool call {} has no name",
                bad.id
            )));
        }
        Ok(ChatResponse {
            content: self.content,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model.unwrap_or_else(|| requested_model.to_string()),
            attempts: 1,
        })
    }
}

fn read_usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (prompt, completion) = (n("prompt_tokens"), n("completion_tokens"));
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: u
            .get("total_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(prompt + completion),
    }
}
