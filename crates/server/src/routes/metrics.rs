//! `GET /metrics`: the process's counters and timings in the Prometheus text format, with
//! the runs running and waiting read from the store at scrape time (what every process on the
//! database sees alike), and how many event streams this process is serving.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use fathom_engine::store::RunStatus;

use super::State as AppRef;
use crate::error::ApiError;

pub async fn metrics(State(state): State<AppRef>) -> Response {
    let Some(export) = &state.config.metrics else {
        return ApiError::not_found("metrics are not enabled in this process").into_response();
    };
    let counted = tokio::time::timeout(
        Duration::from_secs(2),
        state.engine.store().count_active_runs(),
    )
    .await;
    let up = match counted {
        Ok(Ok(rows)) => {
            // Every workflow and status is set, so a count that fell to zero shows zero.
            for wf in state.engine.workflow_names() {
                for status in [RunStatus::Running, RunStatus::Waiting] {
                    let n = rows
                        .iter()
                        .find(|(w, s, _)| w == wf && *s == status)
                        .map_or(0, |r| r.2);
                    metrics::gauge!("fathom_runs", "workflow" => wf.clone(), "status" => status.as_str())
                        .set(n as f64);
                }
            }
            1.0
        }
        _ => 0.0,
    };
    metrics::gauge!("fathom_store_up").set(up);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        (export.0)(),
    )
        .into_response()
}

/// Event streams open in this process.
static STREAMS: AtomicI64 = AtomicI64::new(0);

/// Held by each open event stream: counted while it lives.
pub(crate) struct StreamClient;

impl StreamClient {
    pub(crate) fn connected(format: &'static str) -> StreamClient {
        let n = STREAMS.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::gauge!("fathom_stream_clients").set(n as f64);
        metrics::counter!("fathom_stream_connections_total", "format" => format).increment(1);
        StreamClient
    }
}

impl Drop for StreamClient {
    fn drop(&mut self) {
        let n = STREAMS.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("fathom_stream_clients").set(n as f64);
    }
}
