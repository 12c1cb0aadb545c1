//! `deliver_report`: after `persist_session`, the report goes where the run asked (a webhook,
//! email), then the run ends with its result. Each attempt is a journaled call, on the stream
//! as a `deliver_webhook` or `deliver_email` tool call: an acknowledged attempt is stored
//! with its acknowledgement and never sent again, also after a crash; a failed one is stored
//! too, so the attempts made count after a restart. Between attempts the step backs off; a
//! channel that keeps failing is recorded as failed with its reason, and the run still ends
//! with its report.
//!
//! What holds across a crash: a delivery whose acknowledgement was journaled is sent exactly
//! once. One cut off between the receiver's acknowledgement and the journal write is sent
//! again on resume (at least once), with the same delivery id (webhook) or `Message-ID`
//! (email), so a receiver can tell it is the same delivery.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fathom_deliver::webhook::Delivery as WebhookDelivery;
use fathom_deliver::{DeliverError, Email};
use fathom_engine::store::now_ms;
use fathom_engine::{Envelope, ErrorChain, StepError, Stop};
use fathom_export::Format;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ResearchDeps;
use crate::delivery::{ChannelRecord, DeliveryRecord, DeliveryStatus};
use crate::events::*;
use crate::settings::Settings;
use crate::state::{RunCtx, next_tool_id};

/// The deliveries `settings` ask for, pending, each with the id it keeps on every attempt.
/// Made in `persist_session` and committed with it, so the ids are fixed before any attempt.
pub(super) fn pending(
    ctx: &RunCtx,
    deps: &ResearchDeps,
    settings: &Settings,
) -> Result<DeliveryRecord, StepError> {
    let webhook_key = ctx.idempotency_key("deliver_webhook")?;
    let email_key = ctx.idempotency_key("deliver_email")?;
    let webhook = settings
        .webhook()
        .map(|url| ChannelRecord::pending(vec![url.to_string()], webhook_key));
    let to = settings.email_to();
    let email = (!to.is_empty()).then(|| {
        // A Message-ID is `<left@right>`, the left part without ':'.
        let left = email_key.replace(':', ".");
        let domain = deps
            .delivery
            .email
            .as_ref()
            .map_or_else(|_| "fathom.invalid".to_string(), |s| s.from_domain());
        ChannelRecord::pending(to, format!("<{left}@{domain}>"))
    });
    Ok(DeliveryRecord { webhook, email })
}

pub(super) async fn deliver_report(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: DeliverReport,
) -> Result<Stop<ResearchResult>, StepError> {
    let record = ctx.read_state(|s| s.delivery.clone()).unwrap_or_default();
    let result = ev.result;
    if let Some(hook) = record
        .webhook
        .filter(|c| c.status == DeliveryStatus::Pending)
    {
        let done = webhook(&ctx, &deps, hook, &result).await?;
        ctx.edit_state(|s| s.delivery.get_or_insert_default().webhook = Some(done));
    }
    if let Some(mail) = record.email.filter(|c| c.status == DeliveryStatus::Pending) {
        let done = email(&ctx, &deps, mail, &result).await?;
        ctx.edit_state(|s| s.delivery.get_or_insert_default().email = Some(done));
    }
    deps.save_step(&ctx).await?;
    Ok(Stop(result))
}

/// The JSON a webhook receives: what happened, the delivery id (also in a header), and the
/// run's result (as `GET /results/{id}` gives it).
fn webhook_body(result: &ResearchResult, delivery_id: &str) -> Result<Vec<u8>, StepError> {
    Ok(serde_json::to_vec(&json!({
        "type": "research.completed",
        "delivery_id": delivery_id,
        "research_id": result.research_id,
        "parent_id": result.parent_id,
        "result": result,
    }))?)
}

async fn webhook(
    ctx: &RunCtx,
    deps: &ResearchDeps,
    record: ChannelRecord,
    result: &ResearchResult,
) -> Result<ChannelRecord, StepError> {
    let sender = match &deps.delivery.webhook {
        Ok(w) => w.clone(),
        // Checked at start; a server restarted without its secret records why.
        Err(why) => return Ok(given_up(record, why.clone())),
    };
    let body = Arc::new(webhook_body(result, &record.delivery_id)?);
    let url = record.to.first().cloned().unwrap_or_default();
    let id = record.delivery_id.clone();
    attempts(ctx, deps, "webhook", record, move |attempt| {
        let (sender, body, url, id) = (sender.clone(), body.clone(), url.clone(), id.clone());
        async move {
            let d = WebhookDelivery {
                url: &url,
                id: &id,
                attempt,
                body: &body,
            };
            sender.send(&d).await.map(Some)
        }
    })
    .await
}

async fn email(
    ctx: &RunCtx,
    deps: &ResearchDeps,
    record: ChannelRecord,
    result: &ResearchResult,
) -> Result<ChannelRecord, StepError> {
    let smtp = match &deps.delivery.email {
        Ok(s) => s.clone(),
        Err(why) => return Ok(given_up(record, why.clone())),
    };
    // The same Markdown gives the same files: every attempt sends the same message.
    let md = result.report_markdown.clone();
    let language = ctx
        .read_state(|s| s.settings.as_ref().map(|x| x.language.clone()))
        .unwrap_or_default();
    let rendered = tokio::task::spawn_blocking(move || {
        let html = fathom_export::render(&md, Format::Html, &language)?;
        let pdf = fathom_export::render(&md, Format::Pdf, &language)?;
        Ok::<_, fathom_export::ExportError>((html, pdf))
    })
    .await
    .map_err(|e| StepError::failed_because("rendering the report crashed", e))?;
    let (html, pdf) = match rendered {
        Ok(files) => files,
        Err(e) => {
            return Ok(given_up(
                record,
                format!("the report could not be rendered: {}", ErrorChain(&e)),
            ));
        }
    };
    let message = Arc::new(Email {
        to: record.to.clone(),
        subject: format!("Research report: {}", shortened(&result.query, 150)),
        text: result.report_markdown.clone(),
        html: String::from_utf8_lossy(&html).into_owned(),
        attachment: Some((
            format!("fathom-report-{}.pdf", result.research_id),
            "application/pdf".into(),
            pdf,
        )),
        message_id: record.delivery_id.clone(),
    });
    attempts(ctx, deps, "email", record, move |_| {
        let (smtp, message) = (smtp.clone(), message.clone());
        async move { smtp.send(&message).await.map(|()| None) }
    })
    .await
}

/// A channel that cannot be tried at all.
fn given_up(mut record: ChannelRecord, reason: String) -> ChannelRecord {
    record.status = DeliveryStatus::Failed;
    record.reason = Some(reason);
    record
}

/// One attempt as journaled: acknowledged or not, and when (for the backoff after a restart).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Attempt {
    delivered: bool,
    http_status: Option<u16>,
    reason: Option<String>,
    retryable: bool,
    at_ms: i64,
}

/// Tries a channel up to the configured attempts, backing off between them; each attempt is
/// a journaled tool call (`deliver_<channel>`). Returns the channel's record, delivered or
/// failed.
async fn attempts<F, Fut>(
    ctx: &RunCtx,
    deps: &ResearchDeps,
    channel: &'static str,
    mut record: ChannelRecord,
    send: F,
) -> Result<ChannelRecord, StepError>
where
    F: Fn(u32) -> Fut,
    Fut: Future<Output = Result<Option<u16>, DeliverError>> + Send + 'static,
{
    let tool: &'static str = if channel == "webhook" {
        "deliver_webhook"
    } else {
        "deliver_email"
    };
    let policy = deps.delivery.retry;
    let max = policy.max_attempts.max(1);
    let mut last_at: Option<i64> = None;
    for attempt in 1..=max {
        // Measured from the last attempt's journaled time: a step run again after a crash
        // does not wait again for attempts made long ago.
        if let Some(at) = last_at {
            let wait = at + policy.backoff(attempt).as_millis() as i64 - now_ms();
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
        }
        let id = next_tool_id(ctx, tool);
        let kwargs =
            json!({"to": record.to, "delivery_id": record.delivery_id, "attempt": attempt});
        let call = Envelope::of(&ToolCall {
            tool_name: tool.into(),
            tool_kwargs: kwargs.clone(),
            tool_id: id.clone(),
        })?;
        let probe = ctx.clone();
        let sending = send(attempt);
        let (result_id, result_kwargs) = (id.clone(), kwargs);
        let outcome: Attempt = ctx
            .run_streamed(
                &id,
                vec![call],
                || async move {
                    let sent = sending.await;
                    let at_ms = now_ms();
                    if sent.is_ok() {
                        // Crash tests stop here: acknowledged by the receiver, not journaled.
                        probe.crash_point(&format!("{channel}-accepted")).await;
                    }
                    Ok::<_, std::convert::Infallible>(match sent {
                        Ok(http_status) => Attempt {
                            delivered: true,
                            http_status,
                            reason: None,
                            retryable: false,
                            at_ms,
                        },
                        Err(e) => Attempt {
                            delivered: false,
                            http_status: None,
                            reason: Some(e.to_string()),
                            retryable: e.is_retryable(),
                            at_ms,
                        },
                    })
                },
                move |a: &Attempt| {
                    let text = match (&a.reason, a.delivered) {
                        (_, true) => match a.http_status {
                            Some(s) => format!("Delivered (HTTP {s})"),
                            None => "Delivered (accepted by the relay)".to_string(),
                        },
                        (reason, false) => {
                            let reason = reason.clone().unwrap_or_default();
                            if a.retryable && attempt < max {
                                format!("Attempt {attempt} of {max} failed: {reason}; trying again")
                            } else {
                                format!("Attempt {attempt} of {max} failed: {reason}; giving up")
                            }
                        }
                    };
                    Ok(vec![Envelope::of(&ToolCallResult {
                        tool_name: tool.into(),
                        tool_kwargs: result_kwargs.clone(),
                        tool_id: result_id,
                        tool_output: ToolOutput {
                            blocks: vec![TextBlock::new(text)],
                            tool_name: tool.into(),
                            raw_input: result_kwargs,
                            raw_output: serde_json::to_value(a).unwrap_or(Value::Null),
                            is_error: !a.delivered,
                        },
                        return_direct: false,
                    })?])
                },
            )
            .await?;
        record.attempts = attempt;
        last_at = Some(outcome.at_ms);
        if outcome.delivered {
            record.status = DeliveryStatus::Delivered;
            record.http_status = outcome.http_status;
            record.delivered_at_ms = Some(outcome.at_ms);
            record.reason = None;
            return Ok(record);
        }
        record.reason = outcome.reason;
        if !outcome.retryable {
            break;
        }
    }
    tracing::warn!(
        channel,
        attempts = record.attempts,
        reason = record.reason.as_deref().unwrap_or(""),
        "delivery given up"
    );
    record.status = DeliveryStatus::Failed;
    Ok(record)
}

/// `text` cut to `max` characters at a word, with an ellipsis.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(a, _)| a);
    format!("{cut}…")
}
