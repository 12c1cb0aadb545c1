//! The web UI: plain HTML, CSS and native ES modules from `crates/server/ui/`, embedded in the
//! binary (no build step, nothing fetched at run time). Served at `/` and at
//! `/deployments/{name}/ui/`, where `llamactl` serves a deployment's UI; `/deployments/{name}`
//! redirects there. The UI only talks to the public API, as any other frontend would.
//!
//! These routes sit outside the API key check: a browser must load the page before it can ask
//! a person for the key. Everything the page then asks of the API is checked as usual.

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// One embedded file of the UI.
struct Asset {
    /// Path under `ui/`.
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! assets {
    ($($name:literal => $content_type:expr),* $(,)?) => {
        &[$(Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of `ui/` (a test checks none is left out).
static ASSETS: &[Asset] = assets![
    "index.html" => "text/html; charset=utf-8",
    "assets/app.css" => "text/css; charset=utf-8",
    "assets/favicon.svg" => "image/svg+xml",
    "assets/app.js" => JS,
    "assets/api.js" => JS,
    "assets/dom.js" => JS,
    "assets/settings-form.js" => JS,
    "assets/home.js" => JS,
    "assets/run-state.js" => JS,
    "assets/run-view.js" => JS,
    "assets/plan-review.js" => JS,
    "assets/report.js" => JS,
];

/// Each asset's entity tag: a digest of its bytes, so a browser revalidates cheaply and never
/// keeps a stale copy after an upgrade.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| format!("\"{}\"", &hex::encode(Sha256::digest(a.body))[..20]))
        .collect()
});

/// What the page may do: load its own scripts, styles and images, and talk to this origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return ApiError::not_found("Not Found").into_response();
    };
    let asset = &ASSETS[i];
    let etag = &ETAGS[i];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let h = resp.headers_mut();
    // Names are not versioned: revalidate every time (a 304 when unchanged).
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if asset.name == "index.html" {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    resp
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve(&format!("assets/{file}"), &headers)
}

/// The UI's routes for a deployment named `name`.
pub fn router(name: &str) -> Router<Arc<AppState>> {
    let ui = format!("/deployments/{name}/ui/");
    let to_ui = {
        let ui = ui.clone();
        move || async move { Redirect::permanent(&ui) }
    };
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
        .route(&ui, get(index))
        .route(&format!("{ui}assets/{{file}}"), get(asset))
        .route(ui.trim_end_matches('/'), get(to_ui.clone()))
        .route(&format!("/deployments/{name}"), get(to_ui.clone()))
        .route(&format!("/deployments/{name}/"), get(to_ui))
        .method_not_allowed_fallback(crate::routes::method_not_allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `ui/` is embedded, and every embedded file exists.
    #[test]
    fn every_ui_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(&root).unwrap().to_string_lossy();
                    found.push(rel.replace('\\', "/"));
                }
            }
        }
        found.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.name.to_string()).collect();
        embedded.sort();
        assert_eq!(found, embedded);
    }

    #[test]
    fn etags_differ_by_content_and_type_is_set() {
        assert_eq!(ETAGS.len(), ASSETS.len());
        let html = serve("index.html", &HeaderMap::new());
        assert_eq!(html.status(), StatusCode::OK);
        assert!(
            html.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, ETAGS[0].parse().unwrap());
        assert_eq!(serve(ASSETS[0].name, &h).status(), StatusCode::NOT_MODIFIED);
        assert_eq!(serve("assets/nope.js", &h).status(), StatusCode::NOT_FOUND);
    }
}
