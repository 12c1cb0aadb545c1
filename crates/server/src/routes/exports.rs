//! A finished research session's report as a file: a standalone HTML page, a PDF or a DOCX.
//! Each is made once per report and kept as an artifact recorded in the session's `exports`;
//! asking again returns the stored file.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use fathom_export::{Format, SessionExports};

use super::State as AppRef;
use crate::error::{ApiError, ApiResult};
use crate::extract::{PathParam, QueryParams};

/// The report of a completed session as `format`, downloaded as a file.
#[utoipa::path(get, path = "/sessions/{research_id}/export", tag = "sessions",
    params(("research_id" = String, Path, description = "the research session's id"),
           ("format" = String, Query, description = "html, pdf or docx")),
    responses((status = 200, description = "the file (text/html, application/pdf or the DOCX \
                  type), with a file name in Content-Disposition and its artifact's file_id in \
                  X-Fathom-File-Id"),
              (status = 400, description = "no format, or one not offered", body = crate::ErrorBody),
              (status = 404, description = "no such session", body = crate::ErrorBody),
              (status = 409, description = "the session has not completed", body = crate::ErrorBody)))]
pub async fn export_session(
    State(state): State<AppRef>,
    PathParam(research_id): PathParam,
    query: QueryParams,
) -> ApiResult<Response> {
    let format = match query.get("format") {
        Some(f) => Format::parse(f)?,
        None => {
            return Err(ApiError::bad_request(format!(
                "the query parameter 'format' is required: one of {}",
                Format::names()
            )));
        }
    };
    let exports = SessionExports::new(
        Arc::clone(&state.collections),
        Arc::clone(&state.artifacts),
        state.config.sessions.clone(),
    );
    let export = exports.export(&research_id, format).await?;
    let disposition = format!("attachment; filename=\"{}\"", export.file_name);
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        ),
        (
            header::CONTENT_DISPOSITION,
            HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment")),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        // The page's own inline styles may apply; nothing else loads or runs.
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("sandbox; default-src 'none'; style-src 'unsafe-inline'"),
        ),
        // The same address gives a new file once the report changes.
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        ),
        (
            header::ETAG,
            HeaderValue::from_str(&format!("\"{}\"", export.file_id))
                .unwrap_or(HeaderValue::from_static("\"\"")),
        ),
        (
            HeaderName::from_static("x-fathom-file-id"),
            HeaderValue::from_str(&export.file_id).unwrap_or(HeaderValue::from_static("")),
        ),
    ];
    Ok((headers, export.bytes).into_response())
}
