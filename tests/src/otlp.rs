//! A real OTLP/HTTP trace receiver on loopback: `POST /v1/traces` with a protobuf body, decoded
//! with the official `opentelemetry-proto` definitions. It keeps every span with the
//! `service.name` of the process that sent it, so a test can follow one trace across processes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A span as it was received, with the service that exported it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The exporting process's `service.name` resource attribute.
    pub service: String,
    /// The span.
    pub span: Span,
}

/// The receiver; it serves until the test's runtime ends.
pub struct Receiver {
    address: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    pub async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
                let kept = kept.clone();
                async move {
                    assert_eq!(headers["content-type"], "application/x-protobuf");
                    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                    for resource in request.resource_spans {
                        let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
                        let service = string_value(&attributes, "service.name").unwrap_or_default();
                        for scope in resource.scope_spans {
                            let mut kept = kept.lock().unwrap();
                            kept.extend(
                                scope
                                    .spans
                                    .into_iter()
                                    .map(|span| Received { service: service.clone(), span }),
                            );
                        }
                    }
                    let response = ExportTraceServiceResponse::default().encode_to_vec();
                    ([("content-type", "application/x-protobuf")], response)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { address, spans }
    }

    /// The value of `OTEL_EXPORTER_OTLP_ENDPOINT` for a process exporting here.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The traces URL (`…/v1/traces`), for [`baton::telemetry::trace::Traces::to_endpoint`].
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.base_url())
    }

    /// Every span received so far.
    pub fn received(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Every span received so far, without their services.
    pub fn spans(&self) -> Vec<Span> {
        self.received().into_iter().map(|r| r.span).collect()
    }

    /// The spans once `done` holds for them, or when `within` has passed (the batch exporter
    /// posts on its own task).
    pub async fn spans_when(&self, within: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Bytes (a trace or span id) as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span attribute as a string (strings, integers, doubles, booleans).
pub fn attr(span: &Span, key: &str) -> Option<String> {
    string_value(&span.attributes, key)
}

fn string_value(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|a| a.key == key).and_then(|a| match a.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::DoubleValue(d) => Some(d.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        _ => None,
    })
}
