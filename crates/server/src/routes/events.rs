//! A run's event stream (SSE or NDJSON, replayable from any sequence number) and sending
//! events into a run (the approval gate).

use std::convert::Infallible;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use fathom_data::format_timestamp_ms;
use fathom_engine::ErrorChain;
use fathom_engine::store::{StoreError, StoredEvent, now_ms};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::State as AppRef;
use super::handlers::load_run;
use crate::auth::CallerOf;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, PathParam, QueryParams};

/// Where a stream starts: the last sequence number the client already has.
fn start_after(
    query: &QueryParams,
    headers: &HeaderMap,
    sse: bool,
    next_seq: i64,
) -> ApiResult<i64> {
    if sse
        && let Some(id) = headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    {
        return Ok(id.max(-1));
    }
    match query.get("after_sequence").map(str::trim) {
        // Fathom replays from the start by default; `now` is the Python server's default.
        None => Ok(-1),
        Some("now") => Ok(next_seq - 1),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= -1 => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "after_sequence must be an integer >= -1 or 'now', not '{v}'"
            ))),
        },
    }
}

/// Streams a run's events after a position: SSE (`id:` lines, heartbeats) or NDJSON.
/// Ends after the stop event; 204 when the run has ended and everything was read.
#[utoipa::path(get, path = "/events/{handler_id}", tag = "events",
    params(("handler_id" = String, Path),
           ("sse" = Option<bool>, Query, description = "default true; false gives NDJSON"),
           ("after_sequence" = Option<String>, Query, description = "an integer (-1: from the start) or `now`; default: from the start. The `Last-Event-ID` header wins in SSE mode"),
           ("include_internal" = Option<bool>, Query, description = "accepted for compatibility; Fathom streams no internal events"),
           ("include_qualified_name" = Option<bool>, Query, description = "default true")),
    responses((status = 200, description = "`text/event-stream` or `application/x-ndjson`"),
              (status = 204, description = "the run ended and every event was read"),
              (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub async fn stream_events(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
    headers: HeaderMap,
    query: QueryParams,
) -> ApiResult<Response> {
    let sse = query.bool("sse", true)?;
    let with_qualified_name = query.bool("include_qualified_name", true)?;
    query.bool("include_internal", false)?;
    let run = load_run(&state, &id).await?;
    let after = start_after(&query, &headers, sse, run.next_seq)?;
    if run.status.is_terminal() && after >= run.next_seq - 1 {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    // Small: a reader that falls behind is fed from the stored stream as it reads, not
    // buffered here (a report update can be tens of kB). Boxed: the channel allocates its
    // slots 32 at a time whatever its bound, and every open stream holds them.
    let (tx, rx) = mpsc::channel::<Box<StoredEvent>>(8);
    let client = super::metrics::StreamClient::connected(if sse { "sse" } else { "ndjson" });
    tokio::spawn(follow(state.clone(), id, after, tx, client));
    let events = ReceiverStream::new(rx).map(move |mut ev| {
        if !with_qualified_name {
            ev.envelope.qualified_name = None;
        }
        ev
    });
    if sse {
        let frames = events.map(|ev| {
            let data = serde_json::to_string(&ev.envelope).unwrap_or_else(|_| "{}".into());
            Ok::<_, Infallible>(SseEvent::default().id(ev.seq.to_string()).data(data))
        });
        let keep_alive = KeepAlive::new()
            .interval(state.config.heartbeat)
            .text("heartbeat");
        let mut resp = Sse::new(frames).keep_alive(keep_alive).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        resp.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        resp.headers_mut()
            .insert("x-accel-buffering", header::HeaderValue::from_static("no"));
        Ok(resp)
    } else {
        let lines = events.map(|ev| {
            let mut line = serde_json::to_vec(&ev.envelope).unwrap_or_else(|_| b"{}".to_vec());
            line.push(b'\n');
            Ok::<_, Infallible>(Bytes::from(line))
        });
        Ok((
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            Body::from_stream(lines),
        )
            .into_response())
    }
}

/// How long a reader may take nothing before its stream is closed.
const STALLED_READER_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long an open event stream waits for the database to come back before it ends.
const STREAM_OUTAGE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Sends run `id`'s events after `after` into `tx` until the stop event, the run's end, the
/// client going away, or the server shutting down.
async fn follow(
    state: AppRef,
    id: String,
    after: i64,
    tx: mpsc::Sender<Box<StoredEvent>>,
    _client: super::metrics::StreamClient,
) {
    let mut follower = state.engine.follow(&id, after);
    let mut closing = state.closing();
    // While the database is away the stream stays open (heartbeats go on) and reads again
    // with backoff, for up to this long in a row; then it ends and the client reconnects.
    let mut away_since: Option<std::time::Instant> = None;
    let mut wait = std::time::Duration::from_millis(100);
    // Bounded by the run's stream; each pass hands one event on (or waits out the database).
    loop {
        let next = tokio::select! {
            next = follower.next() => next,
            _ = tx.closed() => return,
            _ = closing.wait_for(|c| *c) => return,
        };
        match next {
            Ok(Some(ev)) => {
                // A reader that takes nothing for this long is let go (it reconnects with
                // Last-Event-ID when it wakes): no task or buffer is held for it meanwhile.
                match tokio::time::timeout(STALLED_READER_LIMIT, tx.send(Box::new(ev))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => {
                        tracing::info!(run = %id, "event stream reader stalled; stream closed");
                        return;
                    }
                }
            }
            Ok(None) => return,
            Err(e @ StoreError::Unavailable(_))
                if away_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    < STREAM_OUTAGE_LIMIT =>
            {
                tracing::debug!(run = %id, error = %ErrorChain(&e), "database away; stream waits");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = tx.closed() => return,
                    _ = closing.wait_for(|c| *c) => return,
                }
                wait = (wait * 2).min(std::time::Duration::from_secs(2));
                continue;
            }
            Err(e) => {
                tracing::warn!(run = %id, error = %ErrorChain(&e), "event stream read failed");
                return;
            }
        }
        away_since = None;
        wait = std::time::Duration::from_millis(100);
    }
}

/// The body of `POST /events/{id}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SendEventRequest {
    /// `{"type": "ApproveEvent", "value": {...}}` (or legacy `data`), or that envelope as a
    /// JSON string.
    #[schema(value_type = Object)]
    pub event: Option<Value>,
    /// Target step; omitted means broadcast.
    pub step: Option<String>,
}

/// The event type and payload of a sent envelope; `type` is resolved by name, falling back to
/// the last part of `qualified_name`.
fn parse_envelope(event: Option<Value>) -> ApiResult<(String, Value)> {
    let event = match event {
        None | Some(Value::Null) => return Err(ApiError::bad_request("Event data is required")),
        Some(Value::String(s)) => serde_json::from_str::<Value>(&s)
            .map_err(|e| ApiError::bad_request(format!("'event' is a string but not JSON: {e}")))?,
        Some(v) => v,
    };
    let Value::Object(obj) = event else {
        return Err(ApiError::bad_request(
            "'event' must be an object {\"type\": ..., \"value\": {...}}",
        ));
    };
    let event_type = obj
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .or_else(|| {
            obj.get("qualified_name")
                .and_then(Value::as_str)
                .and_then(|q| q.rsplit('.').next())
        })
        .ok_or_else(|| ApiError::bad_request("'event' needs a 'type', e.g. \"ApproveEvent\""))?
        .to_string();
    let value = obj
        .get("value")
        .or_else(|| obj.get("data"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    Ok((event_type, value))
}

/// Sends an event (an `ApproveEvent`) into a run through its durable mailbox. An event that
/// arrives before the run waits for it is kept; the same event sent twice while the run is at
/// the same point, or with the same `Idempotency-Key`, is delivered once.
#[utoipa::path(post, path = "/events/{handler_id}", tag = "events",
    params(("handler_id" = String, Path),
           ("Idempotency-Key" = Option<String>, Header, description = "deliveries with the same key apply once")),
    request_body = SendEventRequest,
    responses((status = 200, description = "`{\"status\":\"sent\"}`"),
              (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody),
              (status = 409, body = crate::ErrorBody, description = "the run has ended")))]
pub async fn send_event(
    State(state): State<AppRef>,
    CallerOf(caller): CallerOf,
    PathParam(id): PathParam,
    headers: HeaderMap,
    ApiJson(req): ApiJson<SendEventRequest>,
) -> ApiResult<Json<Value>> {
    // Its head only: its state may be tens of kB, and none of it is needed here.
    let run = state
        .engine
        .store()
        .run_head(&id)
        .await?
        .ok_or_else(ApiError::handler_not_found)?;
    let chosen_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| format!("header:{k}"));
    if run.status.is_terminal() {
        // A run that ended takes nothing more, and answers before the body is read: a retry
        // of a delivery it took (the key its sender chose) as that one was, anything else 409.
        state
            .engine
            .send_to_ended(&run, chosen_key.as_deref())
            .await?;
        return Ok(Json(json!({"status": "sent"})));
    }
    let (event_type, mut value) = parse_envelope(req.event)?;
    if let Some(step) = req.step.as_deref().filter(|s| !s.is_empty()) {
        let known = state
            .engine
            .workflow(&run.workflow)
            .is_some_and(|wf| wf.step_names().iter().any(|(s, _)| *s == step));
        if !known {
            return Err(ApiError::bad_request(format!("no step named '{step}'")));
        }
    }
    let key = match chosen_key {
        Some(k) => k,
        // The same event at the same point of the run is a retry, not a second decision.
        _ => {
            let mut h = Sha256::new();
            h.update(event_type.as_bytes());
            h.update(serde_json::to_vec(&value).unwrap_or_default());
            h.update(run.next_seq.to_le_bytes());
            format!("auto:{}", hex::encode(h.finalize()))
        }
    };
    // A decision says who took it and when: the key's name (null without keys) and the
    // time, set here whatever the sender wrote there (after the retry key above, so a retry
    // is still the same delivery).
    let is_decision = state
        .engine
        .workflow(&run.workflow)
        .is_some_and(|wf| wf.is_decision(&event_type));
    if is_decision && let Some(fields) = value.as_object_mut() {
        fields.insert(
            "by".into(),
            caller.name.clone().map_or(Value::Null, Value::String),
        );
        fields.insert("at".into(), Value::String(format_timestamp_ms(now_ms())));
    }
    state
        .engine
        .send_to(&run, &event_type, value, Some(key))
        .await?;
    Ok(Json(json!({"status": "sent"})))
}
