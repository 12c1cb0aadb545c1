//! Signed webhooks.
//!
//! ## The signature scheme
//!
//! Each POST carries:
//! - `Content-Type: application/json`, the body being the delivery's JSON;
//! - `X-Fathom-Timestamp: T`, the time of this attempt in Unix seconds;
//! - `X-Fathom-Signature: sha256=HEX`, where HEX is the lower-case hex of
//!   `HMAC-SHA256(secret, T + "." + body)`: the timestamp's decimal digits, one full stop,
//!   then the body's exact bytes;
//! - `X-Fathom-Delivery: ID` (also sent as `Idempotency-Key`), the same on every attempt of one
//!   delivery, so a receiver that has seen ID already can answer 2xx and do nothing;
//! - `X-Fathom-Attempt: N`, 1 for the first attempt.
//!
//! A receiver recomputes the HMAC over the timestamp header and the raw body, compares in
//! constant time, and refuses a timestamp too far from its clock (five minutes is usual):
//! the timestamp is signed, so an old request replayed later fails that check. [`verify`] does
//! all of that.
//!
//! Any 2xx answer acknowledges the delivery. 3xx is not followed (a redirected POST is not
//! what the sender asked for) and counts as refused, as does any 4xx but 408 and 429; those
//! two, 5xx, timeouts and connection failures are worth another attempt.

use std::net::SocketAddr;
use std::time::Duration;

use fathom_fetch::{FetchConfig, FetchError, SafeFetcher};
use hmac::{Hmac, KeyInit, Mac};
use sha2_next::Sha256;
use url::Url;

use crate::DeliverError;

pub const TIMESTAMP_HEADER: &str = "X-Fathom-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Fathom-Signature";
pub const DELIVERY_HEADER: &str = "X-Fathom-Delivery";
pub const ATTEMPT_HEADER: &str = "X-Fathom-Attempt";

/// Longest webhook URL taken.
pub const MAX_URL_CHARS: usize = 2048;

/// `sha256=` and the hex HMAC-SHA256 of `timestamp + "." + body` under `secret`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
    )
}

fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Why a received webhook is refused by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the timestamp header is not a number of seconds")]
    BadTimestamp,
    #[error("the timestamp is {0} s away from now; replays are refused")]
    Stale(u64),
    #[error("the signature header is not sha256=<hex>")]
    BadSignature,
    #[error("the signature does not match the body")]
    Mismatch,
}

/// A receiver's check: the signature header matches `timestamp + "." + body` under `secret`
/// (compared in constant time), and the timestamp is within `tolerance_secs` of `now`.
pub fn verify(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
    signature: &str,
    now: u64,
    tolerance_secs: u64,
) -> Result<(), VerifyError> {
    let ts: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    let skew = ts.abs_diff(now);
    if skew > tolerance_secs {
        return Err(VerifyError::Stale(skew));
    }
    let given = signature
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or(VerifyError::BadSignature)?;
    mac(secret, ts, body)
        .verify_slice(&given)
        .map_err(|_| VerifyError::Mismatch)
}

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// The shared secret signatures are made with.
    pub secret: String,
    /// Hosts (`name` or `name:port`, IP literals too) a webhook may be sent to even though they
    /// resolve to loopback or private addresses.
    pub allow: Vec<String>,
    /// Bound on one attempt: resolving, connecting, sending and the answer.
    pub timeout: Duration,
    pub user_agent: String,
}

/// The body and what identifies one delivery.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    pub url: &'a str,
    /// Stable across attempts (and restarts): what a receiver de-duplicates on.
    pub id: &'a str,
    /// 1-based.
    pub attempt: u32,
    pub body: &'a [u8],
}

/// Sends signed webhooks.
pub struct Webhook {
    config: WebhookConfig,
}

impl Webhook {
    pub fn new(config: WebhookConfig) -> Webhook {
        fathom_fetch::install_tls();
        Webhook { config }
    }

    /// Checks a webhook URL's form (http or https, a host, no user name or password), as a
    /// run is started: a URL refused here is refused before anything is stored.
    pub fn check_url(url: &str) -> Result<Url, DeliverError> {
        if url.chars().count() > MAX_URL_CHARS {
            return Err(DeliverError::Invalid(format!(
                "the webhook URL is longer than {MAX_URL_CHARS} characters"
            )));
        }
        SafeFetcher::check_url(url).map_err(|e| match e {
            FetchError::Scheme(s) => {
                DeliverError::Invalid(format!("webhooks are http or https URLs, not {s}:"))
            }
            FetchError::Userinfo => DeliverError::Invalid(
                "a webhook URL may not carry a user name or password; the body is signed instead"
                    .into(),
            ),
            _ => DeliverError::Invalid(format!("'{url}' is not a valid webhook URL")),
        })
    }

    fn allowed(&self, url: &Url) -> bool {
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let port = url.port_or_known_default().unwrap_or(80);
        self.config.allow.iter().any(|a| {
            let a = a.trim();
            match a.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()) {
                // `name:port` (an IPv6 literal in brackets, `[::1]:8080`, too).
                Some((h, p)) if !h.ends_with(':') => {
                    h.trim_matches(['[', ']']).eq_ignore_ascii_case(host) && p == port.to_string()
                }
                _ => a.trim_matches(['[', ']']).eq_ignore_ascii_case(host),
            }
        })
    }

    /// The addresses to connect to: resolved and checked as fetching checks them (every one
    /// public), unless the host is allow-listed.
    async fn resolve(&self, url: &Url) -> Result<Vec<SocketAddr>, DeliverError> {
        let fetcher = SafeFetcher::new(FetchConfig {
            allow_private_networks: self.allowed(url),
            connect_timeout: self.config.timeout,
            ..FetchConfig::default()
        });
        fetcher.resolve(url).await.map_err(|e| match e {
            FetchError::Forbidden { host, addr, why } => {
                DeliverError::Forbidden { host, addr, why }
            }
            FetchError::Dns(host, reason) => DeliverError::Dns { host, reason },
            other => DeliverError::Invalid(other.to_string()),
        })
    }

    /// One attempt: POSTs the body, signed, to the checked addresses of the URL's host (no
    /// proxy, no redirects), within the configured timeout. Ok with the HTTP status when the
    /// receiver acknowledged it (2xx).
    pub async fn send(&self, d: &Delivery<'_>) -> Result<u16, DeliverError> {
        let url = Self::check_url(d.url)?;
        let secs = self.config.timeout.as_secs().max(1);
        let timeout = || DeliverError::Timeout {
            what: format!("the webhook {}", url.host_str().unwrap_or_default()),
            secs,
        };
        let addrs = tokio::time::timeout(self.config.timeout, self.resolve(&url))
            .await
            .map_err(|_| timeout())??;
        let host = url.host_str().unwrap_or_default().to_string();
        let client = fathom_fetch::client_builder()
            .resolve_to_addrs(&host, &addrs)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.config.timeout)
            .timeout(self.config.timeout)
            .user_agent(&self.config.user_agent)
            .build()
            .map_err(|e| DeliverError::Invalid(format!("cannot make an HTTP client: {e}")))?;
        let ts = crate::unix_now();
        let resp = client
            .post(url.as_str())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, ts.to_string())
            .header(
                SIGNATURE_HEADER,
                signature(self.config.secret.as_bytes(), ts, d.body),
            )
            .header(DELIVERY_HEADER, d.id)
            .header("Idempotency-Key", d.id)
            .header(ATTEMPT_HEADER, d.attempt.to_string())
            .body(d.body.to_vec())
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    timeout()
                } else {
                    DeliverError::Connect {
                        what: format!("the webhook {host}"),
                        reason: root_cause(&e),
                    }
                }
            })?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => Ok(status),
            408 | 425 | 429 | 500..=599 => Err(DeliverError::Status {
                status,
                retryable: true,
            }),
            _ => Err(DeliverError::Status {
                status,
                retryable: false,
            }),
        }
    }
}

/// The innermost cause of a reqwest error ("Connection refused"), which is what a person
/// can act on.
fn root_cause(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    // Error chains are short; the bound only guards against a cycle.
    for _ in 0..16 {
        match source.source() {
            Some(s) => source = s,
            None => break,
        }
    }
    source.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2: the HMAC-SHA256 the signature is built on.
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn signatures_cover_the_timestamp_and_the_body() {
        let sig = signature(b"s3cret", 1_700_000_000, b"{\"a\":1}");
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(b"s3cret").unwrap();
        m.update(b"1700000000.{\"a\":1}");
        assert_eq!(
            sig,
            format!("sha256={}", hex::encode(m.finalize().into_bytes()))
        );
        let now = 1_700_000_010;
        assert_eq!(
            verify(b"s3cret", "1700000000", b"{\"a\":1}", &sig, now, 300),
            Ok(())
        );
        // Another body, another timestamp (a replay re-dated), another key: refused.
        for (secret, ts, body) in [
            (&b"s3cret"[..], "1700000000", &b"{\"a\":2}"[..]),
            (b"s3cret", "1700000001", b"{\"a\":1}"),
            (b"other", "1700000000", b"{\"a\":1}"),
        ] {
            assert_eq!(
                verify(secret, ts, body, &sig, now, 300),
                Err(VerifyError::Mismatch)
            );
        }
        assert_eq!(
            verify(b"s3cret", "1700000000", b"{\"a\":1}", &sig, now + 3600, 300),
            Err(VerifyError::Stale(3610))
        );
        assert_eq!(
            verify(b"s3cret", "soon", b"", &sig, now, 300),
            Err(VerifyError::BadTimestamp)
        );
        assert_eq!(
            verify(b"s3cret", "1700000000", b"", "md5=00", now, 300),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn urls_are_checked_for_form() {
        assert!(Webhook::check_url("https://hooks.example.com/fathom").is_ok());
        for (url, says) in [
            ("ftp://x.example/", "http or https"),
            ("https://u:p@x.example/", "user name"),
            ("not a url", "not a valid"),
        ] {
            let e = Webhook::check_url(url).unwrap_err();
            assert!(e.to_string().contains(says), "{url}: {e}");
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn allow_list_entries_name_a_host_or_a_host_and_port() {
        let w = Webhook::new(WebhookConfig {
            secret: "s".into(),
            allow: vec![
                "127.0.0.1".into(),
                "hooks.internal:8443".into(),
                "[::1]:9000".into(),
            ],
            timeout: Duration::from_secs(1),
            user_agent: "t".into(),
        });
        let ok = |u: &str| w.allowed(&Url::parse(u).unwrap());
        assert!(ok("http://127.0.0.1:4000/x"));
        assert!(ok("https://hooks.internal:8443/"));
        assert!(!ok("https://hooks.internal/"));
        assert!(ok("http://[::1]:9000/"));
        assert!(!ok("http://[::1]:9001/"));
        assert!(!ok("http://10.0.0.1/"));
    }

    #[tokio::test]
    async fn private_targets_are_refused_unless_allow_listed() {
        let w = Webhook::new(WebhookConfig {
            secret: "s".into(),
            allow: Vec::new(),
            timeout: Duration::from_secs(2),
            user_agent: "t".into(),
        });
        let d = Delivery {
            url: "http://127.0.0.1:9/hook",
            id: "d1",
            attempt: 1,
            body: b"{}",
        };
        let e = w.send(&d).await.unwrap_err();
        assert!(matches!(e, DeliverError::Forbidden { .. }), "{e}");
        assert!(e.to_string().contains("loopback"), "{e}");
        assert!(!e.is_retryable());
    }
}
