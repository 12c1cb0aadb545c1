//! # fathom-research: deep research behind an approval gate
//!
//! The `deep-research` workflow plans, waits at the gate for an [`ApproveEvent`], then
//! searches, reads and writes a cited report, streaming its tool calls and report changes as
//! llama-compatible agent events. Offline it plans with rules and writes extractively over a
//! local corpus; with a model, an agent plans, researches and writes. `research-metadata`
//! tells a frontend the settings schema and where sessions are saved.
//!
//! - [`workflow`]: the steps and how they connect; [`state`]: the run state and session record.
//! - [`tools`]: `web_search`, `fetch_url`, `parse_content` and how a step calls them (journaled).
//! - [`agent`]: the planner, researchers, reflection and writer with a model.
//! - [`rules`]: what is decided without a model: the route a question takes (simple, web or
//!   deep, by the kind of answer it asks for) and the offline plan; [`route_eval`]: routing
//!   measured against a labelled set. The report and its citations, the extractive writer
//!   and the report's measures are fathom-report's.
//! - [`service`]: what the CLI and the server do with runs; [`checks`]: what is refused
//!   before anything is stored; [`error`]: what goes wrong; [`sessions`]: saved sessions.
//! - [`parsed`]: a document read and stored, as the run's events and state name it.
//! - [`follow_up`]: a question on a saved session, answered from its sources first;
//!   [`delivery`]: the report sent to a webhook or by email when done (`deliver_report`).
//! - [`config`]: the sections of the config file research runs with (`research`,
//!   `agent_data`, `delivery`; the agent's models over fathom-llm's `llm`).

pub mod agent;
pub mod checks;
pub mod config;
pub mod delivery;
pub mod error;
pub mod events;
pub mod follow_up;
pub mod parsed;
pub mod route_eval;
pub mod rules;
pub mod service;
pub mod sessions;
pub mod settings;
pub mod state;
pub mod tools;
pub mod workflow;

pub use checks::{check_decision, check_sources, check_start};
pub use config::{AgentDataSection, DeliverySection, ResearchSection};
pub use delivery::Delivery;
pub use error::ResearchError;
pub use events::{ApproveEvent, ResearchResult, ResearchStart};
pub use rules::plan::Plan;
pub use service::Research;
pub use sessions::Sessions;
pub use settings::{ResearchConfig, Settings, SettingsError, SourceKind};
pub use state::{ResearchState, SessionStatus};
pub use workflow::{
    DEEP_RESEARCH, RESEARCH_METADATA, ResearchDeps, deep_research, research_metadata,
};
