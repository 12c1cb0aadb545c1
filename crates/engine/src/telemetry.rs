//! What the engine tells an operator: counters and step timings through the `metrics` facade
//! (a no-op until the process installs a recorder), and spans through `tracing`, which a
//! [`RunTracer`] hangs in one trace per run.

use std::time::Duration;

/// Places a run's spans in one trace, whichever process drives which step, and closes it.
/// Set by the process ([`crate::EngineConfig::tracer`]); the engine knows no exporter.
pub trait RunTracer: Send + Sync + std::fmt::Debug {
    /// Makes `span`, a step of run `run_id` not yet entered, a child of the run's trace.
    fn adopt(&self, span: &tracing::Span, run_id: &str);
    /// Run `run_id` of `workflow`, created at `created_at_ms`, ended here with `status`.
    fn ended(&self, run_id: &str, workflow: &str, created_at_ms: i64, status: &str);
}

pub(crate) fn run_started(workflow: &str) {
    metrics::counter!("fathom_runs_started_total", "workflow" => workflow.to_string()).increment(1);
}

/// A run ended: `status` is completed, failed, timed_out or cancelled.
pub(crate) fn run_ended(workflow: &str, status: &'static str) {
    let name = match status {
        "completed" => "fathom_runs_completed_total",
        "cancelled" => "fathom_runs_cancelled_total",
        _ => "fathom_runs_failed_total",
    };
    metrics::counter!(name, "workflow" => workflow.to_string(), "reason" => status).increment(1);
}

/// A step ran to `outcome`: committed, parked, retried or failed.
pub(crate) fn step_ran(workflow: &str, step: &'static str, outcome: &'static str, took: Duration) {
    metrics::histogram!("fathom_step_duration_seconds",
        "workflow" => workflow.to_string(), "step" => step, "outcome" => outcome)
    .record(took.as_secs_f64());
    if outcome == "retried" {
        metrics::counter!("fathom_step_retries_total",
            "workflow" => workflow.to_string(), "step" => step)
        .increment(1);
    }
}

/// A journaled call returned: `made` (run and stored) or `replayed` (its stored result).
pub(crate) fn journaled_call(step: &'static str, outcome: &'static str) {
    metrics::counter!("fathom_journaled_calls_total", "step" => step, "outcome" => outcome)
        .increment(1);
}
