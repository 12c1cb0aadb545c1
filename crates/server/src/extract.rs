//! Request extractors whose rejections are [`ApiError`]s: a JSON body with a clear message
//! for a wrong content type, an oversized body or bad JSON; a path segment; and query
//! strings with repeated keys (`?status=running&status=failed`).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body decoded as `T`.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let essence = content_type.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "expected Content-Type: application/json, got {}",
                    if essence.is_empty() { "none" } else { essence }
                ),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body is larger than the server accepts",
                )
            } else {
                ApiError::bad_request(format!("cannot read request body: {e}"))
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "request body is empty; expected JSON",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// The one parameter of a route's path (an id or a name), percent-decoded.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(value) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())))?;
        // Nothing Fathom stores is named with a NUL character (the databases cannot hold one
        // in a name), so such a name names nothing.
        if value.contains('\0') {
            return Err(ApiError::not_found(
                "Not Found: no resource is named with a NUL character (%00)",
            ));
        }
        Ok(PathParam(value))
    }
}

/// Query parameters in order, repeated keys kept.
pub struct QueryParams(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(raw)
            .map(QueryParams)
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))
    }
}

impl QueryParams {
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn bool(&self, name: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(name).map(|v| v.to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) => match v.as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                _ => Err(ApiError::bad_request(format!(
                    "query parameter '{name}' must be true or false, not '{v}'"
                ))),
            },
        }
    }
}
