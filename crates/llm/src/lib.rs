//! Chat models for the research agent: one [`ChatModel`] trait, implemented for every
//! OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, llama.cpp).
//!
//! Our own client on reqwest rather than an SDK: servers differ in small ways (an empty
//! `finish_reason`, usage only on request, tool-call ids only in the first delta), so every
//! chunk is read field by field and nothing unknown is fatal. Retries, timeouts and the
//! stall detector are ours, and a scripted loopback server can test all of them.

mod calls;
mod config;
mod json;
mod openai;
mod repetition;
mod types;

pub use calls::calls_in_text;
pub use config::{LlmSection, RoleSection};
pub use json::{parse_loose_json, strict_schema};
pub use openai::{ModelConfig, OpenAiChat};
pub use types::{
    ChatModel, ChatRequest, ChatResponse, FINISH_REPETITION, LlmError, Message, ResponseFormat,
    Role, StreamDelta, ToolCallRequest, ToolSpec, Usage,
};
