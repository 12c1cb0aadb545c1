//! Storage traits. The engine talks to its database only through these; `fathom-store`
//! implements them on Postgres and SQLite, and one conformance suite holds both to them.

mod runs;

pub use runs::{
    CLAIM_INBOX_PAGE, CancelOutcome, ChainedStep, Claimed, Claims, Committed, DeliverOutcome,
    Lease, MailboxView, NewMessage, NewRun, PendingEvent, RunFilter, RunHead, RunRecord, RunStatus,
    RunStore, RunUpgrade, StepCommit, StepOutcome, StoredEvent, SuspendOutcome,
};

/// The one error type of the run store and the data stores (see [`fathom_store_error`]).
pub use fathom_store_error::{StoreError, StoreResult};

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
