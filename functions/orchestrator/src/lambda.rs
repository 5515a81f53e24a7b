//! The orchestrator as a Lambda function with response streaming, behind a Function URL
//! (`RESPONSE_STREAM`) or an API Gateway REST API (`ResponseTransferMode: RESPONSE_STREAM`).
//!
//! The request handler is [`ChatService::respond`], the same code `serve` runs. What this adds:
//! the caller's IAM principal from the request context, and the invocation deadline, so the turn
//! ends with `completed` before Lambda cuts it off. Errors after the response started are in-band
//! SSE events; the body stream itself never fails.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton::auth::AuthMode;
use baton::http::{ApiError, Caller, ChatService};
use baton::telemetry::trace::Traces;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt, service_fn};

/// Time kept back from the Lambda deadline to send `completed` and flush the stream.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// Runs the Lambda event loop until the runtime stops it. With `traces`, each invocation's spans
/// are flushed before its response ends (Lambda may freeze the process right after).
pub(crate) async fn run(
    service: Arc<ChatService>,
    auth_is_iam: bool,
    traces: Option<Arc<Traces>>,
) -> Result<(), lambda_http::Error> {
    baton_aws::runtime::keep_running(|| {
        let (service, traces) = (service.clone(), traces.clone());
        lambda_http::run_with_streaming_response(service_fn(move |request: Request| {
            let (service, traces) = (service.clone(), traces.clone());
            async move {
                let response = handle(&service, auth_is_iam, request).await;
                Ok::<_, Infallible>(baton_aws::lambda_trace::flushed_at_end(response, traces.as_ref()))
            }
        }))
    })
    .await
}

async fn handle(service: &ChatService, auth_is_iam: bool, request: Request) -> axum::response::Response {
    use axum::response::IntoResponse;
    let caller =
        if auth_is_iam { iam_caller(&request) } else { service.caller_from_headers(request.headers()) };
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    // `POST …/chat/{episode_id}/csat` rates an answer; every other request is a chat turn.
    if let Some(episode) = csat_episode(request.uri().path()) {
        let (parts, body) = request.into_parts();
        return service.rate(&caller, episode, &parts.headers, body.as_ref()).await;
    }
    let deadline = request.lambda_context_ref().map(|c| deadline_instant(c.deadline, now_ms()));
    // The invocation's X-Ray trace is the turn's parent unless the caller sent its own.
    let xray = baton_aws::lambda_trace::invocation_traceparent(&request);
    let (mut parts, body) = request.into_parts();
    if let Some(traceparent) = xray.filter(|_| !parts.headers.contains_key("traceparent")) {
        if let Ok(value) = traceparent.parse() {
            parts.headers.insert("traceparent", value);
        }
    }
    service.respond(&caller, &parts.headers, body.as_ref(), deadline).await
}

/// The episode of a rating path, `…/chat/{episode_id}/csat` (any stage prefix before it).
fn csat_episode(path: &str) -> Option<String> {
    let rest = path.strip_suffix("/csat")?;
    let (before, episode) = rest.rsplit_once('/')?;
    (before.ends_with("/chat") || before == "chat").then(|| episode.to_owned()).filter(|e| !e.is_empty())
}

/// The IAM principal that signed the request, as the platform verified it.
fn iam_caller(request: &Request) -> Result<Caller, ApiError> {
    let principal = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx
            .authorizer
            .as_ref()
            .and_then(|a| a.iam.as_ref())
            .and_then(|iam| iam.caller_id.clone().or(iam.user_id.clone())),
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.identity.caller.clone().or(ctx.identity.user.clone()),
        _ => None,
    };
    match principal.filter(|p| !p.is_empty()) {
        Some(p) => Caller::verified(&p),
        None => Err(ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "no IAM identity in the request context: sign the request (SigV4)",
        )),
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

/// Whether the configured auth mode is IAM (identity from the request context).
pub(crate) fn is_iam(auth: &AuthMode) -> bool {
    matches!(auth, AuthMode::Iam)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rating_paths_name_their_episode_and_chat_paths_do_not() {
        assert_eq!(csat_episode("/chat/ep-1/csat").as_deref(), Some("ep-1"));
        assert_eq!(csat_episode("/prod/chat/ep-1/csat").as_deref(), Some("ep-1"));
        assert_eq!(csat_episode("/chat"), None);
        assert_eq!(csat_episode("/chat//csat"), None);
        assert_eq!(csat_episode("/other/ep-1/csat"), None);
    }

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
