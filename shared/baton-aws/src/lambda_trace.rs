//! The traces of a Lambda invocation, for every function: the invocation's X-Ray trace as a W3C
//! `traceparent` (the parent of its spans when the request brings none of its own), and a
//! response whose body ends only after the spans are flushed, since Lambda may freeze the
//! process as soon as the response is sent.

use std::sync::Arc;

use baton::telemetry::trace::{Traces, xray_to_traceparent};
use futures::StreamExt;
use lambda_http::{Request, RequestExt};

/// The invocation's X-Ray trace (`Lambda-Runtime-Trace-Id`, `Root=1-…;Parent=…;Sampled=…`) as a
/// `traceparent`; `None` outside Lambda or when it is absent or malformed.
pub(crate) fn invocation_traceparent(request: &Request) -> Option<String> {
    request.lambda_context_ref().and_then(|c| c.xray_trace_id.as_deref()).and_then(xray_to_traceparent)
}

/// `response` whose body, once everything else is sent, waits for `traces` to be flushed; the
/// response itself when traces are off.
pub(crate) fn flushed_at_end(
    response: axum::response::Response,
    traces: Option<&Arc<Traces>>,
) -> axum::response::Response {
    let Some(traces) = traces.cloned() else { return response };
    let (parts, body) = response.into_parts();
    let flush = futures::stream::once(async move { traces.flush().await })
        .filter_map(|()| async { None::<Result<bytes::Bytes, axum::Error>> });
    let body = axum::body::Body::from_stream(body.into_data_stream().chain(flush));
    axum::response::Response::from_parts(parts, body)
}
