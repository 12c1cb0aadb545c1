//! Traces over OTLP/HTTP, one per run.
//!
//! A run lives longer than any process may: it parks at the gate for days, and its steps run
//! wherever a worker claims them. So its trace id and the id of its root span are derived from
//! the run id ([`run_trace_id`]), every step span is made a child of that root wherever it
//! runs, and the root span itself (named `run <workflow>`, from the run's creation to its
//! end) is sent by the process that ends the run.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fathom_engine::RunTracer;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracerProvider, SpanData, SpanEvents, SpanExporter as _, SpanLinks,
    SpanProcessor, Tracer,
};
use sha2::{Digest, Sha256};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::TelemetryError;

const SCOPE: &str = "fathom";

pub(crate) struct Traces {
    provider: SdkTracerProvider,
    processor: Arc<BatchSpanProcessor>,
    tracer: Tracer,
}

impl Traces {
    /// An exporter to the endpoint the standard OTLP variables name; none when unset.
    pub(crate) fn from_env(service_name: &str) -> Result<Option<Traces>, TelemetryError> {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return Ok(None);
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| TelemetryError::Traces(e.to_string()))?;
        let mut resource = Resource::builder();
        if !set("OTEL_SERVICE_NAME") {
            resource = resource.with_service_name(service_name.to_string());
        }
        let resource = resource.build();
        // Given to the exporter here: the processor is shared (see `Shared`), so the provider
        // cannot hand it on.
        exporter.set_resource(&resource);
        let processor = Arc::new(BatchSpanProcessor::builder(exporter).build());
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_span_processor(Shared(processor.clone()))
            .build();
        let tracer = provider.tracer(SCOPE);
        Ok(Some(Traces {
            provider,
            processor,
            tracer,
        }))
    }

    pub(crate) fn layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_error_records_to_exceptions(true)
    }

    pub(crate) fn run_tracer(&self) -> Arc<dyn RunTracer> {
        Arc::new(RunTraces {
            processor: self.processor.clone(),
            scope: InstrumentationScope::builder(SCOPE).build(),
        })
    }

    /// Sends what is buffered and stops; blocks (call it off the async runtime).
    pub(crate) fn shutdown(self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
    }
}

/// The batch processor, shared between the provider (the spans of `tracing`) and
/// [`RunTraces`] (the runs' root spans, which carry ids of their own).
#[derive(Debug)]
struct Shared(Arc<BatchSpanProcessor>);

impl SpanProcessor for Shared {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.0.on_start(span, cx);
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// Run `run_id`'s trace id and the span id of its root span.
pub fn run_trace_id(run_id: &str) -> (TraceId, SpanId) {
    let h = Sha256::digest(run_id.as_bytes());
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    trace.copy_from_slice(&h[..16]);
    span.copy_from_slice(&h[16..24]);
    (TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

fn run_root(run_id: &str) -> SpanContext {
    let (trace, span) = run_trace_id(run_id);
    SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    )
}

#[derive(Debug)]
struct RunTraces {
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
}

impl RunTracer for RunTraces {
    fn adopt(&self, span: &tracing::Span, run_id: &str) {
        let _ = span.set_parent(Context::new().with_remote_span_context(run_root(run_id)));
    }

    fn ended(&self, run_id: &str, workflow: &str, created_at_ms: i64, status: &str) {
        let (trace, span) = run_trace_id(run_id);
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(created_at_ms.max(0) as u64);
        self.processor.on_end(SpanData {
            span_context: SpanContext::new(
                trace,
                span,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(format!("run {workflow}")),
            start_time: start,
            end_time: SystemTime::now().max(start),
            attributes: vec![
                KeyValue::new("run_id", run_id.to_string()),
                KeyValue::new("workflow", workflow.to_string()),
                KeyValue::new("status", status.to_string()),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match status {
                "completed" => Status::Ok,
                other => Status::error(other.to_string()),
            },
            instrumentation_scope: self.scope.clone(),
        });
    }
}
