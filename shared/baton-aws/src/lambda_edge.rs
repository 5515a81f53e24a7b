//! The chat endpoint as a Lambda function with response streaming, behind a Function URL
//! (`RESPONSE_STREAM`) or an API Gateway REST API (`ResponseTransferMode: RESPONSE_STREAM`):
//! the same router as `serve` ([`baton::http::api`]) through `lambda_http`, for the orchestrator
//! binary and a team's own function alike ([`crate::app::main`]).
//!
//! What this adds is `platform`, which puts the Lambda request context into each request's
//! extensions as a [`Platform`] (the caller's IAM principal, the invocation deadline, so the turn
//! ends with `completed` before Lambda cuts it off, and the REST API's stage, taken off the
//! path) and the invocation's X-Ray trace as the `traceparent` when the caller sent none. Errors
//! after the response started are in-band SSE events; the body stream itself never fails.
//!
//! CORS: a Function URL with allowed origins answers the preflight and adds the CORS headers to
//! the function's answers itself, so those get none from here (no header twice). The REST API
//! answers the preflight in API Gateway (a mock integration) and passes the function's headers
//! through, so its requests go through the service's CORS layer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use baton::http::{ChatService, Platform};
use baton::telemetry::trace::Traces;
use lambda_http::request::RequestContext;
use lambda_http::tower::{Service, ServiceBuilder, ServiceExt};
use lambda_http::{Request, RequestExt, service_fn};

/// Time kept back from the Lambda deadline to send `completed` and flush the stream.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// Runs the Lambda event loop until the runtime stops it. With `traces`, each invocation's spans
/// are flushed before its response ends (Lambda may freeze the process right after).
pub async fn run(service: Arc<ChatService>, traces: Option<Arc<Traces>>) -> Result<(), lambda_http::Error> {
    let app = app(service);
    crate::runtime::keep_running(|| {
        let (app, traces) = (app.clone(), traces.clone());
        let flushed = service_fn(move |request: Request| {
            let (app, traces) = (app.clone(), traces.clone());
            async move {
                let Ok(response) = app.oneshot(request).await;
                Ok::<_, Infallible>(crate::lambda_trace::flushed_at_end(response, traces.as_ref()))
            }
        });
        lambda_http::run_with_streaming_response(flushed)
    })
    .await
}

/// The function's service: [`baton::http::api`] behind `platform`, through the service's
/// CORS layer for requests that came through the REST API and without it for those through the
/// Function URL (Lambda adds the Function URL's CORS headers itself).
pub fn app(
    service: Arc<ChatService>,
) -> impl Service<Request, Response = axum::response::Response, Error = Infallible, Future: Send> + Clone {
    let cors = service.cors();
    let api = baton::http::api(service);
    let rest: Router = match cors {
        Some(cors) => api.clone().layer(cors),
        None => api.clone(),
    };
    let routed = service_fn(move |request: Request| {
        let router = if via_rest_api(&request) { rest.clone() } else { api.clone() };
        router.oneshot(request)
    });
    ServiceBuilder::new().map_request(platform).service(routed)
}

/// Whether the request came through the REST API (whose answers carry the function's CORS
/// headers) rather than the Function URL (which adds its own).
fn via_rest_api(request: &Request) -> bool {
    matches!(request.request_context_ref(), Some(RequestContext::ApiGatewayV1(_)))
}

/// The layer of the Lambda request context: `request` with a [`Platform`] in its extensions
/// (the IAM principal, the invocation deadline, the REST API's stage taken off its path) and
/// the invocation's X-Ray trace as its `traceparent` unless the caller sent its own (a turn's
/// parent).
fn platform(mut request: Request) -> Request {
    let deadline = request.lambda_context_ref().map(|c| deadline_instant(c.deadline, now_ms()));
    let xray = crate::lambda_trace::invocation_traceparent(&request);
    if let Some(traceparent) = xray.filter(|_| !request.headers().contains_key("traceparent")) {
        if let Ok(value) = traceparent.parse() {
            request.headers_mut().insert("traceparent", value);
        }
    }
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.stage.clone().filter(|s| s != "$default"),
        _ => None,
    };
    let base_path = stage.and_then(|stage| without_stage(&mut request, &stage)).unwrap_or_default();
    let principal = iam_principal(&request);
    request.extensions_mut().insert(Platform { principal, deadline, base_path });
    request
}

/// Takes `/{stage}` off the front of `request`'s path (lambda_http puts the REST API's stage
/// there) and returns it; `None` when the path does not start with it.
fn without_stage(request: &mut Request, stage: &str) -> Option<String> {
    let prefix = format!("/{stage}");
    let uri = request.uri();
    let rest = uri.path().strip_prefix(&prefix).filter(|r| r.is_empty() || r.starts_with('/'))?;
    let rest = if rest.is_empty() { "/" } else { rest };
    let path_and_query = match uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    *request.uri_mut() = axum::http::Uri::from_parts(parts).ok()?;
    Some(prefix)
}

/// The IAM principal that signed the request, as the platform verified it.
fn iam_principal(request: &Request) -> Option<String> {
    match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx
            .authorizer
            .as_ref()
            .and_then(|a| a.iam.as_ref())
            .and_then(|iam| iam.caller_id.clone().or(iam.user_id.clone())),
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.identity.caller.clone().or(ctx.identity.user.clone()),
        _ => None,
    }
}

/// A Lambda deadline as a tokio instant, less the margin. Lambda sends Unix-epoch milliseconds;
/// the `cargo lambda watch` emulator sends the timeout itself (e.g. 600000), so a value too small
/// to be a recent timestamp is taken as milliseconds from now.
fn deadline_instant(deadline_ms: u64, now_ms: u64) -> tokio::time::Instant {
    const YEAR_2001_MS: u64 = 978_307_200_000;
    let left_ms = if deadline_ms < YEAR_2001_MS { deadline_ms } else { deadline_ms.saturating_sub(now_ms) };
    tokio::time::Instant::now() + Duration::from_millis(left_ms).saturating_sub(DEADLINE_MARGIN)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadlines_are_read_as_epoch_or_emulator_relative_milliseconds() {
        let now = 1_795_341_525_465;
        let start = tokio::time::Instant::now();
        assert_eq!(deadline_instant(now + 30_000, now) - start, Duration::from_millis(28_500), "epoch ms");
        assert_eq!(
            deadline_instant(600_000, now) - start,
            Duration::from_millis(598_500),
            "relative (emulator)"
        );
        assert_eq!(deadline_instant(now - 5, now), start, "already past: cut at once");
    }
}
