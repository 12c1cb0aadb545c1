//! Storage traits. The engine talks to its database only through these; `fathom-store`
//! implements them on Postgres and SQLite, and one conformance suite holds both to them.

mod runs;

pub use runs::{
    CLAIM_INBOX_PAGE, CancelOutcome, ChainedStep, Claimed, Claims, Committed, DeliverOutcome,
    Lease, MailboxView, NewMessage, NewRun, PendingEvent, RunFilter, RunHead, RunRecord, RunStatus,
    RunStore, RunUpgrade, StepCommit, StepOutcome, StoredEvent, SuspendOutcome,
};

/// Errors every store reports. Messages are safe to show: they never carry SQL text.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The caller's lease on the run is gone (expired and taken, cancelled, or finished): the
    /// write was refused and nothing of it was applied.
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

pub type StoreResult<T> = Result<T, StoreError>;

/// Runs `op` again while it finds the database away ([`StoreError::Unavailable`]), waiting
/// 50 ms, then twice as long each time up to 1 s, until `deadline`; its last result. For
/// work that must still be done once the database is back (a lease let go, how a run
/// stopped).
pub async fn again_while_away<T, F, Fut>(deadline: std::time::Instant, mut op: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut wait = std::time::Duration::from_millis(50);
    // Bounded by the deadline.
    loop {
        match op().await {
            Err(StoreError::Unavailable(_)) if std::time::Instant::now() + wait < deadline => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
            done => return done,
        }
    }
}

/// Milliseconds since the Unix epoch; every timestamp in storage uses it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
