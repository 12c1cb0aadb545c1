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

/// A cause kept under an error, of any error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors every store reports. Messages are safe to show a client: they never carry SQL
/// text. A database's own error, which can quote a statement, a constraint or the schema, is
/// kept as the [`source`](std::error::Error::source) of `Unavailable` and `Backend`, for logs
/// ([`ErrorChain`] tells it), and is never part of the message.
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
    /// again shortly. Its source says why, for logs.
    #[error("database unavailable")]
    Unavailable(#[source] BoxError),
    /// The database failed, or what it holds could not be read. `what` says what failed in
    /// our own words, when there is more to say than the source does; the source, when
    /// there is one, is the failure underneath (the database's error), for logs.
    #[error("storage failure{}", about(.what))]
    Backend {
        what: Option<String>,
        #[source]
        source: Option<BoxError>,
    },
}

impl StoreError {
    /// The database is away for now, as `cause` says.
    pub fn unavailable(cause: impl Into<BoxError>) -> Self {
        StoreError::Unavailable(cause.into())
    }

    /// A storage failure described in our own words, with no cause underneath (a stored
    /// value this version cannot read, a row that vanished).
    pub fn backend(what: impl std::fmt::Display) -> Self {
        StoreError::Backend {
            what: Some(what.to_string()),
            source: None,
        }
    }

    /// A storage failure that is `cause` (the database's error), which is kept.
    pub fn backend_cause(cause: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            what: None,
            source: Some(cause.into()),
        }
    }

    /// A storage failure: `what` failed because of `cause`, which is kept.
    pub fn backend_because(what: impl std::fmt::Display, cause: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            what: Some(what.to_string()),
            source: Some(cause.into()),
        }
    }
}

/// ": what", or nothing: the tail of a `Backend` message.
fn about(what: &Option<String>) -> String {
    what.as_deref()
        .map(|w| format!(": {w}"))
        .unwrap_or_default()
}

/// What a store's operations return.
pub type StoreResult<T> = Result<T, StoreError>;

/// An error and every cause under it, outermost first, joined by ": ": what a log line says
/// (`tracing::warn!(error = %ErrorChain(&e), ...)`), where the error's own message says only what a
/// client may see. A cause whose text the chain already ends with is said once.
///
/// ```
/// use fathom_store_error::{ErrorChain, StoreError};
///
/// let io = std::io::Error::other("connection refused");
/// let e = StoreError::backend_because("migrations failed", io);
/// assert_eq!(e.to_string(), "storage failure: migrations failed");
/// assert_eq!(
///     ErrorChain(&e).to_string(),
///     "storage failure: migrations failed: connection refused"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = self.0.to_string();
        let mut cause = self.0.source();
        // A cause chain is finite in practice; the bound keeps a cyclic one from hanging.
        for _ in 0..16 {
            let Some(c) = cause else { break };
            let text = c.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            cause = c.source();
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_failure_keeps_its_cause_out_of_the_message() {
        let db = std::io::Error::other("syntax error at or near \"SELEC\"");
        let e = StoreError::backend_cause(db);
        assert_eq!(e.to_string(), "storage failure");
        let cause = std::error::Error::source(&e).expect("the cause is kept");
        assert!(cause.to_string().contains("SELEC"));
        assert_eq!(
            ErrorChain(&e).to_string(),
            "storage failure: syntax error at or near \"SELEC\""
        );

        let away = StoreError::unavailable(std::io::Error::other("connection refused"));
        assert_eq!(away.to_string(), "database unavailable");
        assert_eq!(
            ErrorChain(&away).to_string(),
            "database unavailable: connection refused"
        );

        // Our own words, with nothing underneath, are said once.
        let ours = StoreError::backend("unknown run status 'x'");
        assert_eq!(ours.to_string(), "storage failure: unknown run status 'x'");
        assert_eq!(ErrorChain(&ours).to_string(), ours.to_string());
    }
}
