//! OpenTelemetry traces: `tracing` spans named and attributed after the GenAI semantic
//! conventions, exported over OTLP (HTTP/protobuf) only when an endpoint is configured.
//!
//! The spans of a turn: `turn` (episode, turn, status, tokens, cost) → one `invoke_agent` per
//! agent instance (`gen_ai.agent.name`, `baton.agent.instance`, depth; its parent is the span of
//! the instance that called it) → `chat <model>` per model call (`gen_ai.operation.name`,
//! `gen_ai.request.model`, `gen_ai.usage.*`, a `gen_ai.first_token` event with the time to first
//! token) and `execute_tool <name>` per tool call; `store <operation>` for the history's writes.
//! The routing repairs and the failsafe re-ask are `info` log events inside the agent's span,
//! which the exporter turns into span events.
//!
//! Off (no `OTEL_EXPORTER_OTLP_ENDPOINT`): no exporter, no layer, and the spans are disabled at
//! their call sites (their level is below the log filter), so a span costs one relaxed atomic
//! load. A W3C `traceparent` of an incoming request becomes the turn's parent; outgoing model,
//! vendor and remote-agent requests carry the current span's `traceparent` (a remote agent
//! invoked through Lambda, which has no headers, in its payload: see the `remote` module).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A stream polled inside `span` (so spans it opens are children of `span`), which closes
/// `span` when it is dropped.
struct InSpan<S: ?Sized> {
    span: Span,
    inner: Pin<Box<S>>,
}

impl<S: Stream + ?Sized> Stream for InSpan<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        this.inner.as_mut().poll_next(cx)
    }
}

/// `stream` polled inside `span`, boxed; `stream` itself when `span` is disabled (traces and
/// logs off for it), so a turn without traces pays no wrapper per stream and per poll.
pub(crate) fn traced<T: 'static>(
    span: Span,
    stream: Pin<Box<dyn Stream<Item = T> + Send>>,
) -> Pin<Box<dyn Stream<Item = T> + Send>> {
    if span.is_disabled() { stream } else { Box::pin(InSpan { span, inner: stream }) }
}

/// Makes the W3C `traceparent` (and `tracestate`) the parent of `span`; no effect
/// when there is none, it is malformed, or traces are off.
pub(crate) fn set_remote_parent(span: &Span, traceparent: &str, tracestate: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(parent);
}

/// The current span's W3C `traceparent` (and `tracestate`) headers, for an outgoing request;
/// none when traces are off.
pub(crate) fn outgoing_headers() -> Vec<(String, String)> {
    let span = Span::current();
    if span.is_disabled() {
        return Vec::new();
    }
    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.into_iter().collect()
}

/// The current span's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), for a request that
/// has no headers (a remote agent invoked through Lambda carries it in its payload); `None` when
/// traces are off.
pub(crate) fn current_traceparent() -> Option<String> {
    outgoing_headers().into_iter().find(|(name, _)| name == "traceparent").map(|(_, value)| value)
}

/// `request` with the current span's `traceparent` (model, vendor and remote-agent
/// requests); unchanged when traces are off.
pub fn with_trace_headers(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    outgoing_headers().into_iter().fold(request, |request, (name, value)| request.header(name, value))
}

/// The `_X_AMZN_TRACE_ID` of a Lambda invocation (`Root=1-5759e988-bd862e3fe1be46a994272793;
/// Parent=53995c3f42cd8ad8;Sampled=1`) as a W3C `traceparent`, so an invocation's spans join the
/// X-Ray trace Lambda started.
pub fn xray_to_traceparent(header: &str) -> Option<String> {
    let (mut root, mut parent, mut sampled) = (None, None, "00");
    for part in header.split(';') {
        match part.trim().split_once('=') {
            Some(("Root", v)) => root = Some(v),
            Some(("Parent", v)) => parent = Some(v),
            Some(("Sampled", "1")) => sampled = "01",
            _ => {}
        }
    }
    let mut fields = root?.splitn(3, '-');
    let (Some("1"), Some(time), Some(unique)) = (fields.next(), fields.next(), fields.next()) else {
        return None;
    };
    let trace_id = format!("{time}{unique}").to_ascii_lowercase();
    let parent = parent?.to_ascii_lowercase();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(&trace_id, 32) && hex(&parent, 16)).then(|| format!("00-{trace_id}-{parent}-{sampled}"))
}

/// Marks the current model-call span's first token, `ttft` after the request started: an
/// attribute and a `gen_ai.first_token` event.
pub(crate) fn first_token(ttft: std::time::Duration) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    let ms = ttft.as_secs_f64() * 1000.0;
    span.record("baton.ttft_ms", ms);
    tracing::info!(ttft_ms = ms, "gen_ai.first_token");
}

/// The OTLP exporter of a process, when traces are on.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Traces to the OTLP/HTTP endpoint of `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), as `service`; `None` when neither is set. Must run
    /// inside a Tokio runtime (the batch exporter is a task of it).
    pub fn from_env(service: &str) -> Result<Option<Traces>, String> {
        let set = |name| std::env::var(name).is_ok_and(|v: String| !v.trim().is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return Ok(None);
        }
        Traces::build(service, None).map(Some)
    }

    /// Traces to `endpoint` (the full URL, e.g. `http://127.0.0.1:4318/v1/traces`), as `service`.
    pub fn to_endpoint(service: &str, endpoint: &str) -> Result<Traces, String> {
        Traces::build(service, Some(endpoint))
    }

    fn build(service: &str, endpoint: Option<&str>) -> Result<Traces, String> {
        use opentelemetry_otlp::{Protocol, WithExportConfig};
        let mut exporter =
            opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
        if let Some(endpoint) = endpoint {
            exporter = exporter.with_endpoint(endpoint);
        }
        let exporter = exporter.build().map_err(|e| format!("OTLP exporter: {e}"))?;
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        let resource = opentelemetry_sdk::Resource::builder().with_service_name(service.to_owned()).build();
        let provider =
            SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
        Ok(Traces { provider })
    }

    /// The `tracing` layer that turns Baton's spans (level `info` and above) into OpenTelemetry
    /// spans. The Lambda runtime's own `Lambda runtime invoke` span is left out: it has no
    /// parent, so it would be a one-span trace per invocation beside the turn's (which joins the
    /// invocation's X-Ray trace instead).
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
    {
        use tracing_subscriber::Layer;
        use tracing_subscriber::filter::{LevelFilter, Targets};
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("baton")).with_filter(
            Targets::new().with_default(LevelFilter::INFO).with_target("lambda_runtime", LevelFilter::OFF),
        )
    }

    /// Sends every finished span now (a Lambda invocation calls it before its response ends,
    /// since the process may be frozen right after).
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        match tokio::task::spawn_blocking(move || provider.force_flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces not flushed"),
            Err(e) => tracing::warn!(error = %e, "traces not flushed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn numbers() -> Pin<Box<dyn Stream<Item = u32> + Send>> {
        Box::pin(futures::stream::iter([1, 2, 3]))
    }

    fn address(stream: &Pin<Box<dyn Stream<Item = u32> + Send>>) -> *const () {
        let stream: &(dyn Stream<Item = u32> + Send) = &**stream;
        std::ptr::from_ref(stream).cast()
    }

    #[tokio::test]
    async fn a_disabled_span_adds_no_wrapper_and_an_enabled_one_does() {
        // No subscriber: the span is disabled, and the stream comes back as it was.
        let stream = numbers();
        let before = address(&stream);
        let traced_off = traced(tracing::info_span!("off"), stream);
        assert_eq!(address(&traced_off), before, "no wrapper when the span is disabled");
        assert_eq!(traced_off.collect::<Vec<_>>().await, [1, 2, 3]);

        let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry());
        let stream = numbers();
        let before = address(&stream);
        let traced_on = traced(tracing::info_span!("on"), stream);
        assert_ne!(address(&traced_on), before, "an enabled span wraps the stream");
        assert_eq!(traced_on.collect::<Vec<_>>().await, [1, 2, 3]);
    }

    #[test]
    fn an_xray_trace_header_becomes_a_traceparent() {
        assert_eq!(
            xray_to_traceparent("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
                .as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        assert_eq!(
            xray_to_traceparent("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0")
                .as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
        );
        assert_eq!(xray_to_traceparent("Root=1-5759e988-bd862e3fe1be46a994272793"), None, "no parent");
        assert_eq!(xray_to_traceparent("Root=2-x-y;Parent=53995c3f42cd8ad8"), None);
    }

    #[test]
    fn with_traces_off_nothing_is_propagated() {
        assert!(outgoing_headers().is_empty());
    }
}
