//! # fathom-store-error: what a store reports when it fails
//!
//! One error type, [`StoreError`], for every store of Fathom: the engine's run store
//! (`fathom_engine::store::RunStore`) and the Agent Data stores
//! (`fathom_data::CollectionStore`, `fathom_data::ArtifactStore`). `fathom-store` implements
//! both on one database with one set of helpers, and the HTTP edge renders a failure of either
//! the same way, so the kinds are one enum rather than two copies kept in step.
//!
//! ```
//! use fathom_store_error::{StoreError, StoreResult};
//!
//! fn find(id: &str) -> StoreResult<()> {
//!     Err(StoreError::NotFound(format!("item {id}")))
//! }
//! assert_eq!(find("a").unwrap_err().to_string(), "item a not found");
//! ```
//!
//! Why a crate of its own: the engine and `fathom-data` both name the type, and neither should
//! depend on the other. The engine does not use Agent Data, and `fathom-data` (traits and a
//! filter grammar, which the exporter uses too) should not pull in a workflow engine for one
//! enum. This crate is a leaf below both; like them it knows no SQL and no HTTP. The engine
//! re-exports the type as `fathom_engine::store::StoreError` and `fathom-data` as
//! `fathom_data::StoreError`: one type under either name.

/// Errors every store reports. Messages are safe to show: they never carry SQL text.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The caller's lease on the run is gone (expired and taken, cancelled, or finished): the
    /// write was refused and nothing of it was applied. Only the run store reports it.
    #[error("lease on run {0} lost; write refused")]
    LeaseLost(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The database cannot be reached now (down, restarting, refusing writes): worth trying
    /// again shortly. The detail is for logs, not for clients.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database failed; the detail is for logs, not for clients.
    #[error("storage failure: {0}")]
    Backend(String),
}

/// What a store's operations return.
pub type StoreResult<T> = Result<T, StoreError>;
