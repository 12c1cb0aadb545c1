//! The one error type of the HTTP edge, rendered as `{"detail": "..."}`. Client errors say
//! what was wrong; server errors are logged in full and described to the client only as an
//! internal error, so no SQL or internal detail leaks.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fathom_data::FilterError;
use fathom_engine::store::StoreError;
use fathom_engine::{EngineError, ErrorChain};
use fathom_export::ExportError;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
    /// Seconds a client should wait before trying again (`Retry-After`), for a 503.
    pub retry_after: Option<u64>,
}

/// The body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub detail: String,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// What `Retry-After` says while the database is away.
const RETRY_AFTER_SECS: u64 = 2;

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: detail.into(),
            retry_after: None,
        }
    }
    /// The database is away for now: 503 with `Retry-After`, the reason logged, not shown.
    pub fn unavailable(why: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %why, "database unavailable; request refused with 503");
        ApiError {
            retry_after: Some(RETRY_AFTER_SECS),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the database is unavailable right now; try again shortly",
            )
        }
    }
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, detail)
    }
    pub fn handler_not_found() -> Self {
        Self::not_found("Handler not found")
    }
    pub fn workflow_not_found() -> Self {
        Self::not_found("Workflow not found")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A 503 with Retry-After says only that the database is away (`unavailable`).
        let detail = if self.status.is_server_error() && self.retry_after.is_none() {
            tracing::error!(status = %self.status, detail = %self.detail, "request failed");
            "Internal server error; the server log has the details".to_string()
        } else {
            self.detail
        };
        let mut resp = (self.status, Json(ErrorBody { detail })).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::not_found(format!("{what} not found")),
            StoreError::Conflict(why) => ApiError::conflict(why),
            StoreError::Invalid(why) => ApiError::bad_request(why),
            StoreError::LeaseLost(_) => ApiError::conflict("the run changed hands; try again"),
            // The database's own error goes to the log, never to the client.
            e @ StoreError::Unavailable(_) => ApiError::unavailable(ErrorChain(&e)),
            e @ StoreError::Backend { .. } => ApiError::internal(ErrorChain(&e).to_string()),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::UnknownWorkflow(_) => ApiError::workflow_not_found(),
            EngineError::UnknownRun(_) => ApiError::handler_not_found(),
            EngineError::InvalidStart { reason, .. } => {
                ApiError::bad_request(format!("Validation error for 'start_event': {reason}"))
            }
            EngineError::StartConflict { reason, .. } => ApiError::conflict(reason),
            EngineError::UnknownEventType { given, expected } => ApiError::bad_request(format!(
                "Invalid event type: {given}. Expected one of {expected}"
            )),
            EngineError::InvalidEvent { event_type, reason } => {
                ApiError::bad_request(format!("Validation error for '{event_type}': {reason}"))
            }
            EngineError::RunExists(id) => {
                ApiError::conflict(format!("Handler {id} already exists"))
            }
            EngineError::RunTerminal(status) => {
                ApiError::conflict(format!("Workflow already {status}"))
            }
            e @ EngineError::NewerFormat { .. } => ApiError::conflict(e.to_string()),
            EngineError::Store(e) => e.into(),
        }
    }
}

impl From<ExportError> for ApiError {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::UnknownFormat(_) => ApiError::bad_request(e.to_string()),
            ExportError::UnknownSession(_) => ApiError::not_found(e.to_string()),
            ExportError::NotFinished { .. } | ExportError::NoReport(_) => {
                ApiError::conflict(e.to_string())
            }
            ExportError::TooLarge { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            e @ ExportError::Write { .. } => ApiError::internal(ErrorChain(&e).to_string()),
            ExportError::Storage(e) => e.into(),
        }
    }
}

impl From<FilterError> for ApiError {
    fn from(e: FilterError) -> Self {
        ApiError::bad_request(e.0)
    }
}
