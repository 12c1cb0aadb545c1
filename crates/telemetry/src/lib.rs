//! # fathom-telemetry: what a Fathom process tells its operator
//!
//! - **Logs** on stderr, as text or as one JSON object per line (with the fields of the spans
//!   an event happened in: a step's run id, workflow, step and attempt), filtered by
//!   `RUST_LOG`.
//! - **Metrics** in the Prometheus text format ([`Telemetry::metrics`], served at `/metrics`):
//!   whatever the crates count through the `metrics` facade.
//! - **Traces** over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: spans per step, per journaled call and per
//!   model call (with token counts), in one trace per run ([`traces`]).
//!
//! Nothing is exported unless asked for: offline, a process logs errors on stderr and that is
//! all.

mod traces;

use std::sync::Arc;
use std::time::Duration;

use fathom_engine::RunTracer;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, fmt};

pub use traces::run_trace_id;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot start the trace exporter: {0}")]
    Traces(String),
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error("logging was already set up in this process")]
    AlreadySet,
}

/// How log lines look on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line: time, level, message, fields, and the spans it is in.
    Json,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub log_format: LogFormat,
    /// Log filter when `RUST_LOG` is not set.
    pub default_filter: String,
    /// Collect metrics (a process that serves them: `serve`, `worker`).
    pub metrics: bool,
    /// `service.name` of exported spans, unless `OTEL_SERVICE_NAME` says otherwise.
    pub service_name: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            log_format: LogFormat::Text,
            default_filter: "error".into(),
            metrics: false,
            service_name: "fathom".into(),
        }
    }
}

/// The process's telemetry, set up once at start; [`Telemetry::shutdown`] sends the spans
/// still buffered.
pub struct Telemetry {
    metrics: Option<PrometheusHandle>,
    traces: Option<traces::Traces>,
}

/// Step durations, in seconds: from a parked step's few milliseconds to a long model call.
const STEP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

impl Telemetry {
    /// Sets up logging, and metrics and traces as asked; call once, early.
    pub fn init(options: &Options) -> Result<Telemetry, TelemetryError> {
        let traces = traces::Traces::from_env(&options.service_name)?;
        let filter = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(&options.default_filter));
        let logs = match options.log_format {
            LogFormat::Text => fmt::layer().with_writer(std::io::stderr).boxed(),
            LogFormat::Json => fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .boxed(),
        }
        .with_filter(filter);
        // Spans go to the exporter whatever the log filter says: Fathom's own, at info.
        let spans = traces.as_ref().map(|t| {
            t.layer().with_filter(
                Targets::new()
                    .with_target("fathom", LevelFilter::INFO)
                    .with_default(LevelFilter::OFF),
            )
        });
        tracing_subscriber::registry()
            .with(logs)
            .with(spans)
            .try_init()
            .map_err(|_| TelemetryError::AlreadySet)?;
        let metrics = if options.metrics {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("fathom_step_duration_seconds".into()),
                    STEP_BUCKETS,
                )
                .map_err(|e| TelemetryError::Metrics(e.to_string()))?
                .install_recorder()
                .map_err(|e| TelemetryError::Metrics(e.to_string()))?;
            describe();
            // Histogram samples pile up between scrapes until upkeep folds them in.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let h = handle.clone();
                rt.spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        h.run_upkeep();
                    }
                });
            }
            Some(handle)
        } else {
            None
        };
        Ok(Telemetry { metrics, traces })
    }

    /// Renders the metrics collected so far (Prometheus text format), if collected.
    pub fn metrics(&self) -> Option<Arc<dyn Fn() -> String + Send + Sync>> {
        let handle = self.metrics.clone()?;
        Some(Arc::new(move || handle.render()))
    }

    /// Hangs runs' spans in one trace each, when traces are exported.
    pub fn run_tracer(&self) -> Option<Arc<dyn RunTracer>> {
        self.traces.as_ref().map(|t| t.run_tracer())
    }

    /// Sends the spans still buffered (waiting at most a few seconds for the collector).
    pub async fn shutdown(self) {
        if let Some(traces) = self.traces {
            let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        }
    }
}

/// Help lines for what the crates count (the names are theirs).
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("fathom_runs_started_total", "Runs started, by workflow.");
    describe_counter!(
        "fathom_runs_completed_total",
        "Runs completed, by workflow."
    );
    describe_counter!(
        "fathom_runs_failed_total",
        "Runs failed, by workflow and reason (failed, timed_out)."
    );
    describe_counter!(
        "fathom_runs_cancelled_total",
        "Runs cancelled, by workflow."
    );
    describe_gauge!(
        "fathom_runs",
        "Runs running and waiting, by workflow, as the store has them."
    );
    describe_gauge!(
        "fathom_store_up",
        "Whether the store answered the last scrape."
    );
    describe_histogram!(
        "fathom_step_duration_seconds",
        metrics::Unit::Seconds,
        "Steps run in this process, by workflow, step and outcome (committed, parked, retried, failed)."
    );
    describe_counter!(
        "fathom_step_retries_total",
        "Steps that failed and were retried."
    );
    describe_counter!(
        "fathom_journaled_calls_total",
        "Journaled calls by step and outcome: made, or replayed from the journal."
    );
    describe_counter!(
        "fathom_lease_takeovers_total",
        "Runs taken over after their holder's lease ran out."
    );
    describe_counter!(
        "fathom_llm_calls_total",
        "Model calls by model and outcome."
    );
    describe_counter!(
        "fathom_llm_tokens_total",
        "Model tokens by model and kind (input, output)."
    );
    describe_counter!("fathom_llm_retries_total", "Model calls asked again.");
    describe_counter!(
        "fathom_search_total",
        "Searches by provider and outcome (ok, empty, error)."
    );
    describe_counter!(
        "fathom_fetch_total",
        "Web fetches by outcome (ok, or why not: robots, timeout, too_large, ...)."
    );
    describe_gauge!(
        "fathom_stream_clients",
        "Event streams open in this process."
    );
    describe_counter!(
        "fathom_stream_connections_total",
        "Event streams opened, by format (sse, ndjson)."
    );
}
