//! What can go wrong when research is started, decided or read: each kind kept, with its
//! cause, for the HTTP edge and the CLI to render once.

use fathom_engine::EngineError;
use fathom_engine::store::StoreError;

use crate::settings::SettingsError;

/// Why a research request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ResearchError {
    #[error("the question is empty")]
    EmptyQuestion,
    #[error("the question is {length} characters long; the limit is {limit}")]
    QuestionTooLong { length: usize, limit: usize },
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("no research session '{0}'")]
    UnknownSession(String),
    #[error("no research session '{0}' to follow up")]
    UnknownParent(String),
    #[error(
        "research session '{id}' is not finished (status: {status}); a follow-up can be asked once it has completed"
    )]
    ParentNotFinished { id: String, status: String },
    /// The run asks for a delivery this server is not set up for.
    #[error("{0}")]
    Delivery(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The run store or the sessions' collection failed (one error type serves both).
    #[error(transparent)]
    Store(#[from] StoreError),
}
