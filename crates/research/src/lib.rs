//! # fathom-research: deep research behind an approval gate
//!
//! The `deep-research` workflow plans (offline, deterministic), waits at the gate for an
//! [`ApproveEvent`], then searches, reads and writes a cited report, streaming its tool calls
//! and report changes as llama-compatible agent events. Offline it runs over a local
//! [`Corpus`]; the tools are traits so web search and fetching plug in the same way.
//! `research-metadata` tells a frontend the settings schema and where sessions are saved.

pub mod agent;
pub mod corpus;
pub mod docx;
pub mod eval;
pub mod events;
pub mod parse;
pub mod pdf;
pub mod planner;
pub mod report;
mod service;
pub mod settings;
pub mod testing;
pub mod text;
pub mod tools;
pub mod web;
pub mod workflow;
pub mod writer;

pub use corpus::{Corpus, CorpusError, RefreshReport, SearchHit};
pub use events::{ApproveEvent, ResearchResult, ResearchStart};
pub use planner::Plan;
pub use service::{Research, ResearchError, Sessions, check_decision, check_start};
pub use settings::{ResearchConfig, Settings, SettingsError};
pub use workflow::{
    DEEP_RESEARCH, RESEARCH_METADATA, ResearchDeps, ResearchState, SessionStatus, deep_research,
    research_metadata,
};
