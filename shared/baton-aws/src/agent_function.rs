//! A remote agent's Lambda function: a `lambda_http` streaming handler that reads one
//! [`baton::remote::RemoteRequest`] and answers with the agent's events as NDJSON.
//!
//! The same handler serves a direct `InvokeWithResponseStream` (the request wrapped in a Function
//! URL event by [`crate::lambda_transport`]) and, locally, the function's URL under
//! `cargo lambda watch`. A request that does not decode gets a 400 JSON error before any event.

use std::convert::Infallible;
use std::sync::Arc;

use baton::agent::Agent;
use baton::remote::serve_ndjson;
use bytes::Bytes;
use futures::StreamExt;
use lambda_http::{Body, Request, Response, service_fn};

/// The response of one request: NDJSON events, or a 400 JSON error.
pub fn respond(agents: &[Arc<dyn Agent>], body: &[u8]) -> Response<axum::body::Body> {
    match serve_ndjson(agents, body) {
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
/// see [`crate::runtime`]).
pub async fn run(agents: Vec<Arc<dyn Agent>>) -> Result<(), lambda_http::Error> {
    let agents = Arc::new(agents);
    crate::runtime::keep_running(|| {
        let agents = agents.clone();
        lambda_http::run_with_streaming_response(service_fn(move |request: Request| {
            let agents = agents.clone();
            async move {
                let body: &Body = request.body();
                Ok::<_, Infallible>(respond(&agents, body.as_ref()))
            }
        }))
    })
    .await
}
