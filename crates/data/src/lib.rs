//! # fathom-data: Agent Data collections and artifacts
//!
//! What a research run keeps for people besides its own run record: JSON items in named
//! collections, searched with the Agent Data filter grammar (`llama-compat.md` §9), and
//! content-addressed artifacts (fetched documents, parsed text, reports). Traits and the
//! query grammar only; `fathom-store` implements them on Postgres and SQLite. The engine does
//! not use them. [`CollectionStore::replace_where`] replaces the items matching a filter in
//! one write (a lone match in place): session snapshots are idempotent.
//! [`CollectionStore::set_field`] sets one field of an item in one write, so that writers of
//! different fields of one item do not undo each other.

mod artifacts;
mod collections;

pub use artifacts::{Artifact, ArtifactMeta, ArtifactStore};
pub use collections::{
    AggregateGroup, AggregatePage, AggregateQuery, CollectionScope, CollectionStore, Condition,
    Field, Filter, FilterError, Item, MAX_EXACT_INTEGER, NewItem, Op, OrderBy, SearchPage,
    SearchQuery, TopLevelField, field_path, format_timestamp_ms, parse_timestamp_ms,
};

/// The data stores fail as the engine's run store does: one error type for both, kept in a leaf
/// crate below this one and the engine (see [`fathom_store_error`] for why), so that this crate
/// does not depend on the engine, which does not use it.
pub use fathom_store_error::{StoreError, StoreResult};
