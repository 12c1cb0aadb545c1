use crate::store::StoreError;

/// A cause kept under a failure, of any error type; [`ErrorChain`] tells a failure with its
/// causes, for a log line.
pub use fathom_store_error::{BoxError, ErrorChain};

/// How a step ends other than by success.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The step failed for a passing reason (a timeout, a service down); the run retries it
    /// under the step's retry policy.
    #[error("{message}")]
    Failed {
        message: String,
        /// What failed underneath (the model server's HTTP status, an I/O error), when known.
        #[source]
        source: Option<BoxError>,
    },
    /// The step failed for a reason no retry will change (a refused API key, an unknown
    /// model, invalid settings, a bug): the run fails at once.
    #[error("{message}")]
    Permanent {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// The step waits for an external event that has not arrived. Not a failure: the run is
    /// parked, and the step runs again when the event arrives.
    #[error("waiting for {event_type}")]
    Suspend {
        event_type: String,
        mailbox_seq: i64,
    },
    /// The run's lease was lost; this process must stop driving it.
    #[error("lease lost")]
    LeaseLost,
    /// The step ran ahead of the commit of the event it handles and reached something keyed
    /// by that event (a journaled call): not a failure; the event is committed and the step
    /// runs again on it. Steps pass it on with `?` like any other error.
    #[error("ran ahead of its event's commit")]
    RanAhead,
    /// Storage failed while the step ran; the attempt is retried.
    #[error("storage: {0}")]
    Store(#[source] StoreError),
}

impl StepError {
    /// A failure worth retrying.
    pub fn failed(msg: impl std::fmt::Display) -> Self {
        StepError::Failed {
            message: msg.to_string(),
            source: None,
        }
    }

    /// A failure no retry will change.
    pub fn permanent(msg: impl std::fmt::Display) -> Self {
        StepError::Permanent {
            message: msg.to_string(),
            source: None,
        }
    }

    /// A failure worth retrying: `what` failed because of `cause`, which is kept.
    pub fn failed_because(what: impl std::fmt::Display, cause: impl Into<BoxError>) -> Self {
        StepError::Failed {
            message: what.to_string(),
            source: Some(cause.into()),
        }
    }

    /// A failure no retry will change: `what` failed because of `cause`, which is kept.
    pub fn permanent_because(what: impl std::fmt::Display, cause: impl Into<BoxError>) -> Self {
        StepError::Permanent {
            message: what.to_string(),
            source: Some(cause.into()),
        }
    }

    /// The same failure, its message prefixed with what failed (a journaled call's key).
    pub fn about(self, what: &str) -> Self {
        match self {
            StepError::Failed { message, source } => StepError::Failed {
                message: format!("{what}: {message}"),
                source,
            },
            StepError::Permanent { message, source } => StepError::Permanent {
                message: format!("{what}: {message}"),
                source,
            },
            other => other,
        }
    }

    /// Whether running the step again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StepError::Failed { .. } | StepError::Store(_))
    }

    /// The failure and every cause under it, outermost first, joined by ": " (what a log line
    /// and a failed run's error say).
    pub fn chain(&self) -> String {
        ErrorChain(self).to_string()
    }
}

impl From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LeaseLost(_) => StepError::LeaseLost,
            other => StepError::Store(other),
        }
    }
}

/// A journaled call that fails with a message: worth retrying.
impl From<String> for StepError {
    fn from(msg: String) -> Self {
        StepError::failed(msg)
    }
}

impl From<std::convert::Infallible> for StepError {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

/// A value that does not (de)serialize is a bug in the workflow, not a passing failure.
impl From<serde_json::Error> for StepError {
    fn from(e: serde_json::Error) -> Self {
        StepError::permanent_because("serialization", e)
    }
}

/// Errors of engine operations called from outside a run (start, send, cancel).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("workflow '{0}' not found")]
    UnknownWorkflow(String),
    #[error("run '{0}' not found")]
    UnknownRun(String),
    #[error("invalid start event for '{workflow}': {reason}")]
    InvalidStart { workflow: String, reason: String },
    /// The start event names something not in a state to start from (a session still running).
    #[error("cannot start '{workflow}': {reason}")]
    StartConflict { workflow: String, reason: String },
    #[error("invalid event type: {given}. Expected one of {expected}")]
    UnknownEventType { given: String, expected: String },
    #[error("invalid {event_type}: {reason}")]
    InvalidEvent { event_type: String, reason: String },
    #[error("run '{0}' already exists")]
    RunExists(String),
    #[error("run already {0}")]
    RunTerminal(&'static str),
    /// The run's rows are in a stored format newer than this binary reads: a newer version
    /// of Fathom must drive it.
    #[error(
        "run '{run}' was stored by a newer version of Fathom (format {format}; this one reads up to {supported})"
    )]
    NewerFormat {
        run: String,
        format: u32,
        supported: u32,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl EngineError {
    /// Whether the caller's input was at fault (unknown names, bad events), not the system.
    pub fn is_client_error(&self) -> bool {
        !matches!(
            self,
            EngineError::Store(StoreError::Backend { .. } | StoreError::Unavailable(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_failure_keeps_its_cause_and_says_the_whole_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = StepError::failed_because("calling the search API", io).about("web_search#1");
        assert!(e.is_retryable());
        assert_eq!(e.to_string(), "web_search#1: calling the search API");
        let cause = std::error::Error::source(&e).expect("the cause is kept");
        assert_eq!(cause.to_string(), "connection refused");
        assert_eq!(
            e.chain(),
            "web_search#1: calling the search API: connection refused"
        );
        // A failure without a cause is said once.
        assert_eq!(StepError::permanent("bad plan").chain(), "bad plan");
        assert!(!StepError::permanent("bad plan").is_retryable());
    }
}
