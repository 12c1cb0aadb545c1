//! # fathom-deliver: a finished report sent where a run asked
//!
//! Two channels, each one call that either is acknowledged or fails with a [`DeliverError`]
//! saying whether trying again may help ([`DeliverError::is_retryable`]):
//! - [`webhook`]: a JSON body POSTed to a URL, signed with HMAC-SHA256 over
//!   `timestamp + "." + body` with a shared secret, carrying a delivery id that stays the same
//!   across attempts so a receiver can de-duplicate. The target obeys the address rules of
//!   fetching (no loopback, private, link-local... addresses) unless its host is allow-listed.
//! - [`email`]: a message through an SMTP relay (lettre), an HTML body with a plain-text
//!   alternative and one attachment, with a stable `Message-ID`.
//!
//! Every call has a timeout. Retrying, backing off and remembering what was acknowledged is
//! the caller's (the research workflow journals each attempt).

pub mod email;
pub mod webhook;

pub use email::{Email, Smtp};
pub use webhook::{Webhook, WebhookConfig};

/// Why a delivery attempt failed. The messages are for the person who asked for the delivery
/// (they end up in the session); none carries a secret.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeliverError {
    /// The target or an address is not usable as given: no attempt will change that.
    #[error("{0}")]
    Invalid(String),
    /// The webhook's host resolves to an address the rules refuse.
    #[error(
        "{host} is {why} ({addr}); webhooks to private addresses are refused unless allow-listed"
    )]
    Forbidden {
        host: String,
        addr: std::net::IpAddr,
        why: &'static str,
    },
    #[error("cannot resolve {host}: {reason}")]
    Dns { host: String, reason: String },
    #[error("{what} timed out after {secs} s")]
    Timeout { what: String, secs: u64 },
    #[error("cannot connect to {what}: {reason}")]
    Connect { what: String, reason: String },
    /// The receiver answered, and not with a 2xx.
    #[error("the receiver answered HTTP {status}{}", if *.retryable { "" } else { " (not retried: the receiver refuses it)" })]
    Status { status: u16, retryable: bool },
    /// The SMTP relay refused or failed; `permanent` when it said so (a 5xx reply, such as a
    /// refused login or recipient).
    #[error("SMTP: {reason}")]
    Smtp { reason: String, permanent: bool },
    /// Delivery over this channel is not configured (no secret, no relay).
    #[error("{0}")]
    NotConfigured(String),
}

impl DeliverError {
    /// Whether another attempt, later, may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            DeliverError::Invalid(_)
            | DeliverError::Forbidden { .. }
            | DeliverError::NotConfigured(_) => false,
            DeliverError::Dns { .. }
            | DeliverError::Timeout { .. }
            | DeliverError::Connect { .. } => true,
            DeliverError::Status { retryable, .. } => *retryable,
            DeliverError::Smtp { permanent, .. } => !permanent,
        }
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
