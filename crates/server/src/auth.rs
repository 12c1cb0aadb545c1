//! Optional bearer-token auth. Health routes and CORS preflights are always open; everything
//! else needs `Authorization: Bearer <key>`, or `?api_key=<key>` for a browser EventSource,
//! which cannot send headers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

fn is_open(path: &str) -> bool {
    let tail = match path.strip_prefix("/deployments/") {
        Some(rest) => rest.find('/').map_or("", |i| &rest[i..]),
        None => path,
    };
    matches!(tail, "/health" | "/healthz" | "/livez" | "/readyz")
}

/// Compares digests so the time taken does not depend on how much of the key matched.
fn same_key(given: &str, expected: &str) -> bool {
    let (a, b) = (Sha256::digest(given), Sha256::digest(expected));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn presented_key(req: &Request) -> Option<String> {
    if let Some(v) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let (scheme, token) = v.trim().split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string());
    }
    let query = req.uri().query()?;
    serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == "api_key")
        .map(|(_, v)| v)
}

pub async fn require_api_key(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(expected) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    if req.method() == Method::OPTIONS || is_open(req.uri().path()) {
        return next.run(req).await;
    }
    match presented_key(&req) {
        Some(k) if same_key(&k, expected) => next.run(req).await,
        given => {
            let detail = if given.is_some() {
                "invalid API key"
            } else {
                "missing API key: send Authorization: Bearer <key>"
            };
            let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, detail).into_response();
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_open_everywhere_else_is_not() {
        assert!(is_open("/health"));
        assert!(is_open("/readyz"));
        assert!(is_open("/deployments/deep-research/health"));
        assert!(!is_open("/deployments/deep-research/handlers"));
        assert!(!is_open("/workflows"));
        assert!(!is_open("/api/v1/beta/agent-data/:search"));
    }

    #[test]
    fn keys_compare_whole() {
        assert!(same_key("secret", "secret"));
        assert!(!same_key("secre", "secret"));
        assert!(!same_key("", "secret"));
    }
}
