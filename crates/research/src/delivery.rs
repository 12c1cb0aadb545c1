//! Delivering a finished report: what the server is set up to deliver with (the webhook
//! secret and allow-list, the SMTP relay; all from its environment and config, never from a
//! run), and what the session records of each delivery. The `deliver_report` step does the
//! sending (`workflow/deliver.rs`).

use std::sync::Arc;
use std::time::Duration;

use fathom_deliver::{Smtp, Webhook};
use fathom_engine::RetryPolicy;
use serde::{Deserialize, Serialize};

use crate::settings::Settings;

/// How this server delivers reports. A channel that is not set up says why, and a run asking
/// for it is refused at start with that reason.
#[derive(Clone)]
pub struct Delivery {
    pub webhook: Result<Arc<Webhook>, String>,
    pub email: Result<Arc<Smtp>, String>,
    /// Attempts per channel (the first included) and the backoff between them.
    pub retry: RetryPolicy,
    /// The bound on one attempt.
    pub timeout: Duration,
}

impl std::fmt::Debug for Delivery {
    // Says which channels are set up, never with what (the secret, the relay's password).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("webhook", &self.webhook.as_ref().map(|_| "set up"))
            .field("email", &self.email.as_ref().map(|_| "set up"))
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for Delivery {
    /// Nothing set up: runs asking for delivery are refused.
    fn default() -> Self {
        Delivery {
            webhook: Err(
                "webhook delivery is not set up on this server: set FATHOM_WEBHOOK_SECRET".into(),
            ),
            email: Err(
                "email delivery is not set up on this server: set FATHOM_SMTP_URL and FATHOM_SMTP_FROM"
                    .into(),
            ),
            retry: RetryPolicy {
                max_attempts: 5,
                initial_backoff: Duration::from_secs(2),
                max_backoff: Duration::from_secs(60),
            },
            timeout: Duration::from_secs(15),
        }
    }
}

impl Delivery {
    /// Whether this server can make the deliveries `settings` ask for; the reason if not.
    pub fn check(&self, settings: &Settings) -> Result<(), String> {
        if settings.webhook().is_some()
            && let Err(why) = &self.webhook
        {
            return Err(format!("deliver_webhook: {why}"));
        }
        if !settings.email_to().is_empty()
            && let Err(why) = &self.email
        {
            return Err(format!("deliver_email: {why}"));
        }
        Ok(())
    }

    /// How long the `deliver_report` step may take: every attempt of both channels at their
    /// longest, the backoffs between them, and a margin for saving the session.
    pub fn step_timeout(&self) -> Duration {
        let per_attempt = self.timeout * 4 + self.retry.max_backoff;
        per_attempt * self.retry.max_attempts.max(1) * 2 + Duration::from_secs(60)
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Asked for; not yet acknowledged or given up on.
    Pending,
    /// Acknowledged (a 2xx from the webhook, 250 from the relay), and journaled as such: it is
    /// not sent again.
    Delivered,
    /// Given up on after its attempts, or refused for good; `reason` says why. The research
    /// is not failed by it.
    Failed,
}

/// One channel's delivery, as the session records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelRecord {
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempts: u32,
    /// The webhook's URL, or the recipients.
    pub to: Vec<String>,
    /// What a receiver de-duplicates on: the webhook's `X-Fathom-Delivery`, the email's
    /// `Message-ID`. The same on every attempt.
    pub delivery_id: String,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The webhook's answer to the acknowledged attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at_ms: Option<i64>,
}

impl ChannelRecord {
    pub(crate) fn pending(to: Vec<String>, delivery_id: String) -> ChannelRecord {
        ChannelRecord {
            status: DeliveryStatus::Pending,
            attempts: 0,
            to,
            delivery_id,
            reason: None,
            http_status: None,
            delivered_at_ms: None,
        }
    }
}

/// The deliveries of one run, in the session as `delivery`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<ChannelRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<ChannelRecord>,
}
