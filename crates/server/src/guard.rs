//! What keeps other web pages and oversized requests out, before any route runs: the
//! origin and host rules (the server's own origin and the configured ones; on loopback, only
//! requests addressed to a loopback name, against DNS rebinding), CORS for the origins
//! allowed, and bodies refused by their declared length.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::AppState;
use crate::error::ApiError;

/// Whether a browser request from `origin` may reach the API: the server's own origin (the
/// scheme and the host and port the request is addressed to, i.e. the bundled UI) or one the
/// operator configured. Any other web page a person has open must not drive their server.
fn origin_allowed(
    origin: &HeaderValue,
    headers: &HeaderMap,
    uri: &Uri,
    configured: &[String],
) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.trim().trim_end_matches('/');
    if configured
        .iter()
        .map(|c| c.trim().trim_end_matches('/'))
        .any(|c| c == "*" || c.eq_ignore_ascii_case(origin))
    {
        return true;
    }
    let Some(authority) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let addressed = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()));
    addressed.is_some_and(|host| host.trim().eq_ignore_ascii_case(authority))
}

/// Whether the host a request is addressed to (`Host`, or the URI's authority) is a loopback
/// name or address; a request naming none is taken as loopback (HTTP/1.0 clients).
fn addressed_to_loopback(headers: &HeaderMap, uri: &Uri) -> bool {
    let Some(addressed) = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
    else {
        return true;
    };
    let addressed = addressed.trim();
    let host = match addressed.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => addressed.rsplit_once(':').map_or(addressed, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses, before anything else runs, what a web page other than the server's own may send:
/// a request from a foreign origin (403, and no CORS allowance), and, on a server listening
/// on loopback, a request addressed to another host name (DNS rebinding). Requests without
/// `Origin` (other programs, the UI's own page loads) pass.
pub(crate) async fn refuse_foreign_web_requests(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if state.config.loopback_only && !addressed_to_loopback(req.headers(), req.uri()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "this server listens on loopback and answers only requests addressed to localhost \
             or a loopback address",
        )
        .into_response();
    }
    if let Some(origin) = req.headers().get(header::ORIGIN)
        && !origin_allowed(origin, req.headers(), req.uri(), &state.config.cors_origins)
    {
        let shown = String::from_utf8_lossy(origin.as_bytes())
            .chars()
            .take(200)
            .collect::<String>();
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "requests from the web origin '{shown}' are not allowed; the server allows its \
                 own origin and those given with --cors-origin"
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// A body whose declared length is over the limit is refused without being kept (a client
/// that sent `Expect: 100-continue` is told not to send it). Bodies that do not declare their
/// length are cut off at the limit as they are read.
///
/// A refused body up to [`DRAIN_MAX`] is read and dropped before the answer goes out (for at
/// most [`DRAIN_TIME`]): a connection closed with bytes of the request still unread is reset,
/// and the reset can reach the client before it has read the 413, which it then never sees.
pub(crate) async fn refuse_declared_oversize(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let Some(declared) = declared.filter(|n| *n > state.config.body_limit as u64) else {
        return next.run(req).await;
    };
    let waits_for_go_ahead = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waits_for_go_ahead && declared <= DRAIN_MAX {
        let mut body = req.into_body().into_data_stream();
        // Bounded by DRAIN_MAX bytes (the declared length) and by DRAIN_TIME.
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            use futures_util::StreamExt as _;
            while let Some(Ok(_)) = body.next().await {}
        })
        .await;
    }
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request body is larger than the server accepts",
    )
    .into_response()
}

/// The largest refused body read through before answering (see [`refuse_declared_oversize`]).
const DRAIN_MAX: u64 = 8 * 1024 * 1024;
/// How long a refused body is read at most before answering.
const DRAIN_TIME: Duration = Duration::from_secs(5);

pub(crate) fn cors(configured: Vec<String>) -> CorsLayer {
    // The allowed origin is echoed: `*` is not allowed with credentials, and the UI's
    // EventSource sends them.
    let allow_origin = AllowOrigin::predicate(move |origin, parts| {
        origin_allowed(origin, &parts.headers, &parts.uri, &configured)
    });
    CorsLayer::new()
        .allow_origin(allow_origin)
        .allow_credentials(true)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            header::CONTENT_TYPE,
            header::CONTENT_DISPOSITION,
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("x-fathom-file-id"),
        ])
        .max_age(Duration::from_secs(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn loopback_names_and_addresses_only() {
        let uri = Uri::from_static("/handlers");
        for ok in [
            "localhost:4501",
            "127.0.0.1:4501",
            "127.1.2.3",
            "[::1]:4501",
            "LOCALHOST",
        ] {
            assert!(addressed_to_loopback(&host(ok), &uri), "{ok}");
        }
        for refused in [
            "evil.example:4501",
            "10.0.0.1:4501",
            "[::2]:80",
            "localhost.evil.example",
        ] {
            assert!(!addressed_to_loopback(&host(refused), &uri), "{refused}");
        }
    }

    #[test]
    fn own_origin_is_the_addressed_host_and_port() {
        let uri = Uri::from_static("/handlers");
        let origin = |o: &str| HeaderValue::from_str(o).unwrap();
        let headers = host("127.0.0.1:4501");
        assert!(origin_allowed(
            &origin("http://127.0.0.1:4501"),
            &headers,
            &uri,
            &[]
        ));
        assert!(!origin_allowed(
            &origin("http://127.0.0.1:4502"),
            &headers,
            &uri,
            &[]
        ));
        assert!(!origin_allowed(
            &origin("https://evil.example"),
            &headers,
            &uri,
            &[]
        ));
        assert!(!origin_allowed(&origin("null"), &headers, &uri, &[]));
        let configured = ["http://localhost:5173/".to_string()];
        assert!(origin_allowed(
            &origin("http://localhost:5173"),
            &headers,
            &uri,
            &configured
        ));
        assert!(origin_allowed(
            &origin("https://x.example"),
            &headers,
            &uri,
            &["*".into()]
        ));
    }
}
