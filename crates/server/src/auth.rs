//! Optional API keys, each with a name and a role. Health routes and CORS preflights are
//! always open; everything else needs `Authorization: Bearer <key>`, or `?api_key=<key>` for
//! a browser EventSource, which cannot send headers. A key the server does not know is a 401;
//! a known key whose role is below what the route needs is a 403 saying both roles.
//!
//! Keys are held as SHA-256 digests only; a presented key is hashed and compared with every
//! digest, each comparison in constant time and none cut short, so neither the time taken nor
//! the order of the keys tells how much of a key matched or which one did.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// What a key may do. Ordered: each role includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every read: workflows, handlers, results, event streams, sessions, Agent Data reads.
    Read,
    /// `read`, and start runs and cancel the runs this key started.
    Run,
    /// `run`, and send decisions (`ApproveEvent`: approve, reject with feedback) to runs.
    Approve,
    /// Everything: cancel any run, purge, Agent Data writes and deletes, the MCP endpoint.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Run => "run",
            Role::Approve => "approve",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" => Some(Role::Read),
            "run" => Some(Role::Run),
            "approve" => Some(Role::Approve),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key: its name (shown in decisions and errors, never secret), its role, and the
/// SHA-256 of the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub name: String,
    pub role: Role,
    pub sha256: [u8; 32],
}

/// One entry of a keys file, as written there.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub name: String,
    pub role: Role,
    /// SHA-256 of the key, 64 hexadecimal digits.
    pub sha256: String,
}

impl ApiKey {
    /// A key given in clear (`FATHOM_API_KEY`): only its digest is kept.
    pub fn from_secret(name: &str, role: Role, secret: &str) -> ApiKey {
        ApiKey {
            name: name.to_string(),
            role,
            sha256: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    /// The keys-file line for `secret`: `{"name": ..., "role": ..., "sha256": ...}`.
    pub fn entry_for(name: &str, role: Role, secret: &str) -> KeyEntry {
        KeyEntry {
            name: name.to_string(),
            role,
            sha256: hex::encode(Sha256::digest(secret.as_bytes())),
        }
    }
}

/// Reads a keys file: a JSON array of `{"name", "role", "sha256"}`, or an object with such an
/// array under `"keys"`. Names must be unique and non-empty, digests 64 hex digits, roles one
/// of `read`, `run`, `approve`, `admin`; each mistake is reported with the entry it is in.
pub fn parse_keys_file(text: &str) -> Result<Vec<ApiKey>, String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum File {
        List(Vec<serde_json::Value>),
        Object { keys: Vec<serde_json::Value> },
    }
    let file: File = serde_json::from_str(text).map_err(|e| {
        format!("not a JSON list of {{\"name\", \"role\", \"sha256\"}} entries: {e}")
    })?;
    let (File::List(entries) | File::Object { keys: entries }) = file;
    let mut keys: Vec<ApiKey> = Vec::with_capacity(entries.len());
    for (i, raw) in entries.into_iter().enumerate() {
        let entry: KeyEntry = serde_json::from_value(raw).map_err(|e| {
            format!(
                "entry {}: {e} (expected {{\"name\", \"role\": read|run|approve|admin, \"sha256\"}})",
                i + 1
            )
        })?;
        let name = entry.name.trim().to_string();
        if name.is_empty() {
            return Err(format!("entry {}: the name is empty", i + 1));
        }
        if keys.iter().any(|k| k.name == name) {
            return Err(format!("entry {}: the name '{name}' is used twice", i + 1));
        }
        let digest = hex::decode(entry.sha256.trim())
            .ok()
            .and_then(|d| <[u8; 32]>::try_from(d).ok())
            .ok_or_else(|| {
                format!(
                    "entry {} ('{name}'): sha256 must be 64 hexadecimal digits (make it with \
                     `fathom keys hash`)",
                    i + 1
                )
            })?;
        keys.push(ApiKey {
            name,
            role: entry.role,
            sha256: digest,
        });
    }
    Ok(keys)
}

/// Who sent a request, as the handlers see it (a request extension). Without keys configured
/// every request is an anonymous admin: the API behaves as it did before keys existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's name; None when the server has no keys.
    pub name: Option<String>,
    pub role: Role,
}

impl Caller {
    pub(crate) fn anonymous() -> Caller {
        Caller {
            name: None,
            role: Role::Admin,
        }
    }

    /// A 403 naming this key, its role and what `action` needs.
    pub(crate) fn refused(&self, action: &str, needs: Role) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this key ({}) has role {}; {action} needs role {needs}",
                self.name.as_deref().unwrap_or("anonymous"),
                self.role
            ),
        )
    }
}

/// The request's [`Caller`], as the auth layer found it. Absent (which that layer never
/// leaves it on a route with a handler) it is a nameless `read` key: nothing more is allowed.
pub(crate) struct CallerOf(pub Caller);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for CallerOf {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(CallerOf(
            parts.extensions.get::<Caller>().cloned().unwrap_or(Caller {
                name: None,
                role: Role::Read,
            }),
        ))
    }
}

fn strip_deployment(path: &str) -> &str {
    match path.strip_prefix("/deployments/") {
        Some(rest) => rest.find('/').map_or("", |i| &rest[i..]),
        None => path,
    }
}

fn is_open(path: &str) -> bool {
    matches!(
        strip_deployment(path),
        "/health" | "/healthz" | "/livez" | "/readyz"
    )
}

/// The least role a request needs, and what it is doing (for the 403).
pub(crate) fn needed_role(
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> (Role, &'static str) {
    let tail = strip_deployment(path);
    if tail == "/mcp" || tail.starts_with("/mcp/") {
        // Its tools start runs and decide on plans, with no key of their own to record.
        return (Role::Admin, "the MCP endpoint");
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return (Role::Read, "reading");
    }
    if *method == Method::POST {
        if tail == "/reports/render"
            || tail == "/api/v1/beta/agent-data/:search"
            || tail == "/api/v1/beta/agent-data/:aggregate"
        {
            return (Role::Read, "reading");
        }
        let segments: Vec<&str> = tail.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            ["workflows", _, "run" | "run-nowait"] => return (Role::Run, "starting a run"),
            ["handlers", _, "cancel"] => {
                let purge = query
                    .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
                    .is_some_and(|pairs| {
                        pairs
                            .iter()
                            .any(|(k, v)| k == "purge" && v.eq_ignore_ascii_case("true"))
                    });
                return if purge {
                    (Role::Admin, "purging a run")
                } else {
                    (Role::Run, "cancelling a run")
                };
            }
            ["events", _] => return (Role::Approve, "sending an event (a decision) to a run"),
            _ => {}
        }
    }
    if tail.starts_with("/api/v1/beta/agent-data") {
        return (Role::Admin, "writing Agent Data");
    }
    (Role::Admin, "this request")
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

/// The key whose digest is the presented key's: every key is compared, each in constant time.
fn identify<'k>(keys: &'k [ApiKey], presented: &str) -> Option<&'k ApiKey> {
    let given: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    let mut found = None;
    for key in keys {
        let diff = key
            .sha256
            .iter()
            .zip(given.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y));
        if diff == 0 && found.is_none() {
            found = Some(key);
        }
    }
    found
}

fn unauthorized(detail: &str) -> Response {
    let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, detail).into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    resp
}

pub async fn require_api_key(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let keys = &state.keys;
    if keys.is_empty() {
        req.extensions_mut().insert(Caller::anonymous());
        return next.run(req).await;
    }
    if req.method() == Method::OPTIONS || is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let Some(given) = presented_key(&req) else {
        return unauthorized("missing API key: send Authorization: Bearer <key>");
    };
    let Some(key) = identify(keys, &given) else {
        return unauthorized("invalid API key");
    };
    let caller = Caller {
        name: Some(key.name.clone()),
        role: key.role,
    };
    let (needs, action) = needed_role(req.method(), req.uri().path(), req.uri().query());
    if caller.role < needs {
        return caller.refused(action, needs).into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
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
        let keys = vec![
            ApiKey::from_secret("a", Role::Read, "secret"),
            ApiKey::from_secret("b", Role::Admin, "other"),
        ];
        assert_eq!(
            identify(&keys, "secret").map(|k| k.name.as_str()),
            Some("a")
        );
        assert_eq!(identify(&keys, "other").map(|k| k.name.as_str()), Some("b"));
        assert!(identify(&keys, "secre").is_none());
        assert!(identify(&keys, "").is_none());
    }

    #[test]
    fn roles_are_ordered_and_routes_mapped() {
        assert!(Role::Read < Role::Run && Role::Run < Role::Approve && Role::Approve < Role::Admin);
        let post = Method::POST;
        let role = |m: &Method, p: &str, q: Option<&str>| needed_role(m, p, q).0;
        assert_eq!(role(&Method::GET, "/handlers", None), Role::Read);
        assert_eq!(
            role(&post, "/deployments/d/workflows/w/run-nowait", None),
            Role::Run
        );
        assert_eq!(role(&post, "/handlers/x/cancel", None), Role::Run);
        assert_eq!(
            role(&post, "/handlers/x/cancel", Some("purge=true")),
            Role::Admin
        );
        assert_eq!(role(&post, "/events/x", None), Role::Approve);
        assert_eq!(
            role(&post, "/api/v1/beta/agent-data/:search", None),
            Role::Read
        );
        assert_eq!(
            role(&post, "/api/v1/beta/agent-data/:delete", None),
            Role::Admin
        );
        assert_eq!(
            role(&Method::PUT, "/api/v1/beta/agent-data/x", None),
            Role::Admin
        );
        assert_eq!(role(&post, "/reports/render", None), Role::Read);
        assert_eq!(role(&post, "/mcp", None), Role::Admin);
    }

    #[test]
    fn keys_file_is_checked() {
        let entry = ApiKey::entry_for("ci", Role::Run, "k1");
        let text = serde_json::to_string(&vec![entry]).unwrap();
        let keys = parse_keys_file(&text).unwrap();
        assert_eq!(keys[0], ApiKey::from_secret("ci", Role::Run, "k1"));
        let wrapped = format!("{{\"keys\": {text}}}");
        assert_eq!(parse_keys_file(&wrapped).unwrap().len(), 1);
        let bad_role = r#"[{"name":"x","role":"root","sha256":"00"}]"#;
        assert!(parse_keys_file(bad_role).unwrap_err().contains("entry 1"));
        let bad_hash = r#"[{"name":"x","role":"read","sha256":"00"}]"#;
        assert!(
            parse_keys_file(bad_hash)
                .unwrap_err()
                .contains("64 hexadecimal")
        );
        let twice = format!(
            "[{e},{e}]",
            e = serde_json::to_string(&ApiKey::entry_for("a", Role::Read, "k")).unwrap()
        );
        assert!(parse_keys_file(&twice).unwrap_err().contains("twice"));
    }
}
