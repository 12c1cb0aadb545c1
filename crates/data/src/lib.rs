//! # fathom-data: Agent Data collections and artifacts
//!
//! What a research run keeps for people besides its own run record: JSON items in named
//! collections, searched with the Agent Data filter grammar (`llama-compat.md` §9), and
//! content-addressed artifacts (fetched documents, parsed text, reports). Traits and the
//! query grammar only; `fathom-store` implements them on Postgres and SQLite. The engine does
//! not use them. [`CollectionStore::replace_where`] replaces the items matching a filter in
//! one write (a lone match in place): session snapshots are idempotent.

mod artifacts;
mod collections;

pub use artifacts::{Artifact, ArtifactMeta, ArtifactStore};
pub use collections::{
    AggregateGroup, AggregatePage, AggregateQuery, CollectionScope, CollectionStore, Condition,
    Field, Filter, FilterError, Item, MAX_EXACT_INTEGER, NewItem, Op, OrderBy, SearchPage,
    SearchQuery, TopLevelField, format_timestamp_ms, parse_timestamp_ms,
};

/// Errors of the data stores. Messages are safe to show, except `Backend`'s, which is for logs.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The database cannot be reached now: worth trying again shortly. For logs only.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database failed; the detail is for logs, not for clients.
    #[error("storage failure: {0}")]
    Backend(String),
}

pub type DataResult<T> = Result<T, DataError>;
