//! A remote agent's Lambda function: a `lambda_http` streaming handler that reads one
//! `baton::remote::RemoteRequest` and answers with the agent's events as NDJSON.
//!
//! The same handler serves a direct `InvokeWithResponseStream` (the request wrapped in a Function
//! URL event by [`crate::lambda_transport`]) and, locally, the function's URL under
//! `cargo lambda watch`. A request that does not decode gets a 400 JSON error before any event.
//!
//! Its spans continue the caller's trace (the request's `traceparent` field, else the
//! invocation's X-Ray trace) and are flushed before the response ends (see
//! `crate::lambda_trace`).

use std::convert::Infallible;
use std::sync::Arc;

use baton::agent::Agent;
use baton::remote::serve_ndjson;
use baton::telemetry::trace::Traces;
use bytes::Bytes;
use futures::StreamExt;
use lambda_http::{Body, Request, Response, service_fn};

/// The response of one request: NDJSON events, or a 400 JSON error. `invocation_trace` is the
/// parent of the agent's span when the request carries no `traceparent`.
pub(crate) fn respond(
    agents: &[Arc<dyn Agent>],
    body: &[u8],
    invocation_trace: Option<&str>,
) -> Response<axum::body::Body> {
    match serve_ndjson(agents, body, invocation_trace) {
        Ok(events) => Response::builder()
            .status(200)
            .header("content-type", "application/x-ndjson")
            .body(axum::body::Body::from_stream(events.map(Ok::<Bytes, Infallible>)))
            .expect("a valid response"),
        Err(e) => {
            let error =
                serde_json::json!({"error": {"code": "invalid_remote_request", "message": e.message}});
            Response::builder()
                .status(400)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(error.to_string()))
                .expect("a valid response")
        }
    }
}

/// Runs the Lambda event loop serving `agents` (entered again after a failed Runtime API call:
/// see [`crate::runtime`]). With `traces`, each invocation's spans are flushed before its
/// response ends.
pub async fn run(agents: Vec<Arc<dyn Agent>>, traces: Option<Arc<Traces>>) -> Result<(), lambda_http::Error> {
    let agents = Arc::new(agents);
    crate::runtime::keep_running(|| {
        let (agents, traces) = (agents.clone(), traces.clone());
        lambda_http::run_with_streaming_response(service_fn(move |request: Request| {
            let (agents, traces) = (agents.clone(), traces.clone());
            async move {
                let invocation_trace = crate::lambda_trace::invocation_traceparent(&request);
                let body: &Body = request.body();
                let response = respond(&agents, body.as_ref(), invocation_trace.as_deref());
                Ok::<_, Infallible>(crate::lambda_trace::flushed_at_end(response, traces.as_ref()))
            }
        }))
    })
    .await
}
