//! Email through an SMTP relay (lettre, over tokio; TLS by rustls with the platform's roots).
//!
//! The relay is a URL, as lettre reads it: `smtp://user:pass@host:port` (plain, no TLS: a relay
//! on the same machine or network), `smtp://...?tls=required` (STARTTLS, port 587 by
//! default) or `smtps://...` (TLS from the start, port 465). The user name and password, when
//! given, are sent with AUTH PLAIN or LOGIN, whichever the relay offers.

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::DeliverError;

/// Recipients one message is sent to, at most.
pub const MAX_RECIPIENTS: usize = 20;

/// One message: an HTML body (with a plain-text alternative) and an attachment.
#[derive(Debug, Clone)]
pub struct Email {
    pub to: Vec<String>,
    pub subject: String,
    pub text: String,
    pub html: String,
    /// File name, media type, bytes.
    pub attachment: Option<(String, String, Vec<u8>)>,
    /// The `Message-ID` (with its angle brackets): the same on every attempt, so a mail
    /// client that receives a message twice can tell it is one message.
    pub message_id: String,
}

/// An SMTP relay and the sender's address.
pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    timeout: Duration,
}

impl std::fmt::Debug for Smtp {
    // The transport holds the relay's credentials: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Smtp")
            .field("from", &self.from.to_string())
            .finish()
    }
}

/// Checks one recipient address (`name@domain`).
pub fn check_address(address: &str) -> Result<(), DeliverError> {
    address
        .trim()
        .parse::<lettre::Address>()
        .map(|_| ())
        .map_err(|e| DeliverError::Invalid(format!("'{address}' is not an email address: {e}")))
}

impl Smtp {
    /// The relay at `url` sending as `from`; each SMTP command, and the whole exchange, is
    /// bounded by `timeout`. Nothing is connected yet.
    pub fn new(url: &str, from: &str, timeout: Duration) -> Result<Smtp, DeliverError> {
        // lettre's own messages about a URL quote it, password and all: ours do not.
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.trim())
            .map_err(|_| {
                DeliverError::Invalid(
                    "the SMTP relay URL is not usable: give smtp://user:pass@host:port, smtp://host:port?tls=required or smtps://user:pass@host:port".into(),
                )
            })?
            .timeout(Some(timeout))
            .build();
        let from = from.trim().parse::<Mailbox>().map_err(|e| {
            DeliverError::Invalid(format!("the sender address '{from}' is not usable: {e}"))
        })?;
        Ok(Smtp {
            transport,
            from,
            timeout,
        })
    }

    /// The sender's domain (for `Message-ID`s).
    pub fn from_domain(&self) -> String {
        self.from.email.domain().to_string()
    }

    /// Sends `email`: one attempt, within the timeout. Ok when the relay accepted it for
    /// every recipient (250 after DATA).
    pub async fn send(&self, email: &Email) -> Result<(), DeliverError> {
        if email.to.is_empty() || email.to.len() > MAX_RECIPIENTS {
            return Err(DeliverError::Invalid(format!(
                "an email goes to 1 to {MAX_RECIPIENTS} recipients, not {}",
                email.to.len()
            )));
        }
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(email.subject.clone())
            .message_id(Some(email.message_id.clone()))
            .user_agent(format!("fathom/{}", env!("CARGO_PKG_VERSION")));
        for to in &email.to {
            let mailbox = to.trim().parse::<Mailbox>().map_err(|e| {
                DeliverError::Invalid(format!("'{to}' is not an email address: {e}"))
            })?;
            builder = builder.to(mailbox);
        }
        let body = MultiPart::alternative_plain_html(email.text.clone(), email.html.clone());
        let mut mixed = MultiPart::mixed().multipart(body);
        if let Some((name, media, bytes)) = &email.attachment {
            let media = ContentType::parse(media)
                .map_err(|e| DeliverError::Invalid(format!("attachment type '{media}': {e}")))?;
            mixed = mixed.singlepart(Attachment::new(name.clone()).body(bytes.clone(), media));
        }
        let message = builder
            .multipart(mixed)
            .map_err(|e| DeliverError::Invalid(format!("cannot build the message: {e}")))?;
        let secs = self.timeout.as_secs().max(1);
        // lettre bounds each command; this bounds the exchange (a relay that answers slowly
        // to every command would otherwise take many timeouts).
        match tokio::time::timeout(self.timeout * 4, self.transport.send(message)).await {
            Err(_) => Err(DeliverError::Timeout {
                what: "the SMTP relay".into(),
                secs: secs * 4,
            }),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.is_timeout() => Err(DeliverError::Timeout {
                what: "the SMTP relay".into(),
                secs,
            }),
            Ok(Err(e)) => Err(DeliverError::Smtp {
                permanent: e.is_permanent(),
                reason: smtp_reason(&e),
            }),
        }
    }
}

/// What went wrong, in the relay's words when it gave some ("535 5.7.8 authentication
/// failed"), else the innermost cause ("Connection refused").
fn smtp_reason(e: &lettre::transport::smtp::Error) -> String {
    let mut text = e.to_string();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    // Error chains are short; the bound only guards against a cycle.
    for _ in 0..16 {
        let Some(s) = source else { break };
        text = format!("{text}: {s}");
        source = s.source();
    }
    if let Some(code) = e.status() {
        let code = code.to_string();
        if !text.contains(&code) {
            text = format!("{code} {text}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_urls_and_addresses_are_checked_without_echoing_secrets() {
        let t = Duration::from_secs(1);
        assert!(
            Smtp::new(
                "smtp://u:p@127.0.0.1:2525",
                "Fathom <fathom@example.org>",
                t
            )
            .is_ok()
        );
        let e = Smtp::new("mailto://u:hunter2@x", "fathom@example.org", t).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = Smtp::new("smtp://127.0.0.1:2525", "not an address", t).unwrap_err();
        assert!(e.to_string().contains("sender address"), "{e}");
        assert!(check_address("a@example.org").is_ok());
        assert!(check_address("nobody").is_err());
    }
}
