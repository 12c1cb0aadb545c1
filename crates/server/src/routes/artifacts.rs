//! Artifacts: the raw bytes a run fetched, the text it extracted, the report it wrote, by
//! content address. What was fetched came from anywhere, so it is served inert: sandboxed,
//! never sniffed, and HTML only as a download.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::State as AppRef;
use crate::error::{ApiError, ApiResult};
use crate::extract::PathParam;

/// The stored bytes of an artifact.
#[utoipa::path(get, path = "/artifacts/{file_id}", tag = "artifacts",
    params(("file_id" = String, Path, description = "lower-case hex sha256 of the content")),
    responses((status = 200, description = "the bytes, with their content type"),
              (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub async fn get_artifact(
    State(state): State<AppRef>,
    PathParam(file_id): PathParam,
) -> ApiResult<Response> {
    if file_id.len() != 64 || !file_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request(
            "file_id is the 64-character hex sha256 of an artifact",
        ));
    }
    let artifact = state
        .artifacts
        .get_artifact(&file_id.to_ascii_lowercase())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Artifact {file_id} not found")))?;
    let content_type = HeaderValue::from_str(&artifact.meta.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let html = artifact.meta.content_type.contains("html");
    let mut resp = (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
        ],
        artifact.bytes,
    )
        .into_response();
    if html {
        resp.headers_mut().insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment"),
        );
    }
    Ok(resp)
}
