use crate::store::StoreError;

/// How a step ends other than by success.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The step failed; the run retries it under the step's retry policy.
    #[error("{0}")]
    Failed(String),
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
    /// Storage failed while the step ran; the attempt is retried.
    #[error("storage: {0}")]
    Store(String),
}

impl StepError {
    pub fn failed(msg: impl std::fmt::Display) -> Self {
        StepError::Failed(msg.to_string())
    }
}

impl From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LeaseLost(_) => StepError::LeaseLost,
            other => StepError::Store(other.to_string()),
        }
    }
}

impl From<serde_json::Error> for StepError {
    fn from(e: serde_json::Error) -> Self {
        StepError::Failed(format!("serialization: {e}"))
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
    #[error("invalid event type: {given}. Expected one of {expected}")]
    UnknownEventType { given: String, expected: String },
    #[error("invalid {event_type}: {reason}")]
    InvalidEvent { event_type: String, reason: String },
    #[error("run '{0}' already exists")]
    RunExists(String),
    #[error("run already {0}")]
    RunTerminal(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
}
