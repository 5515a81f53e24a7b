//! The orchestrator as a Lambda function with response streaming, behind a Function URL
//! (`RESPONSE_STREAM`) or an API Gateway REST API (`ResponseTransferMode: RESPONSE_STREAM`).
//!
//! The request handler is [`ChatService::respond`], the same code `serve` runs. What this adds:
//! the caller's IAM principal from the request context, and the invocation deadline, so the turn
//! ends with `completed` before Lambda cuts it off. Errors after the response started are in-band
//! SSE events; the body stream itself never fails.
//!
//! CORS: a Function URL with allowed origins answers the preflight and adds the CORS headers to
//! the function's answers itself, so those get none from here (no header twice). The REST API
//! answers the preflight in API Gateway (a mock integration) and passes the function's headers
//! through, so its requests go through the service's CORS layer.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton::auth::AuthMode;
use baton::http::{ApiError, Caller, ChatService, EndpointLimits};
use baton::telemetry::emf::EmfReporter;
use baton::telemetry::trace::Traces;
use baton_aws::settings::Settings;
use baton_aws::startup::exit;
use baton_reference::ReferenceSettings;
use lambda_http::request::RequestContext;
use lambda_http::tower::{Layer, ServiceExt};
use lambda_http::{Request, RequestExt, service_fn};
use tower_http::cors::CorsLayer;

use crate::cli::EndpointSettings;

/// Time kept back from the Lambda deadline to send `completed` and flush the stream.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// The chat function: starts as every function does, from the environment alone (the
/// settings, the reference deployment's, and the endpoint's own: [`EndpointSettings`]),
/// reports each turn as one CloudWatch EMF line on stdout (docs/observability.md), and serves
/// until the runtime stops it.
pub(crate) async fn main() -> ExitCode {
    let started = async {
        let settings = Settings::from_env().map_err(|e| e.to_string())?;
        let reference: ReferenceSettings = baton_aws::settings::from_env().map_err(|e| e.to_string())?;
        let endpoint: EndpointSettings = baton_aws::settings::from_env().map_err(|e| e.to_string())?;
        let (function, deployment) = crate::start(settings, reference, Some(&endpoint)).await?;
        let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "orchestrator".into());
        let reporter = Arc::new(EmfReporter::stdout(name));
        let (orchestrator, backends) = crate::build(&function, &deployment, Some(reporter)).await?;
        let auth = function.settings.auth(true)?;
        let iam = is_iam(&auth);
        // The platform owns the connections: `serve`'s connection limits do not apply.
        let defaults = EndpointLimits::default();
        let limits = endpoint.endpoint_limits(defaults.request_head_timeout, defaults.max_connections)?;
        let service =
            crate::service(&function, &deployment.config, orchestrator, &backends, auth, limits, &endpoint)?;
        Ok::<_, String>((service, iam, function.traces))
    };
    let (service, iam, traces) = match started.await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    exit(run(service, iam, traces).await.map_err(|e| e.to_string()), 1)
}

/// Runs the Lambda event loop until the runtime stops it. With `traces`, each invocation's spans
/// are flushed before its response ends (Lambda may freeze the process right after).
async fn run(
    service: Arc<ChatService>,
    auth_is_iam: bool,
    traces: Option<Arc<Traces>>,
) -> Result<(), lambda_http::Error> {
    let cors = service.cors();
    baton_aws::runtime::keep_running(|| {
        let (service, traces, cors) = (service.clone(), traces.clone(), cors.clone());
        lambda_http::run_with_streaming_response(service_fn(move |request: Request| {
            let (service, traces, cors) = (service.clone(), traces.clone(), cors.clone());
            async move {
                let response = answer(&service, cors.as_ref(), auth_is_iam, request).await;
                Ok::<_, Infallible>(baton_aws::lambda_trace::flushed_at_end(response, traces.as_ref()))
            }
        }))
    })
    .await
}

/// One invocation's response. Requests through the REST API go through the `cors` layer; those
/// through the Function URL do not, since Lambda adds the Function URL's CORS headers itself.
async fn answer(
    service: &ChatService,
    cors: Option<&CorsLayer>,
    auth_is_iam: bool,
    request: Request,
) -> axum::response::Response {
    let handler = service_fn(|request| async { Ok(handle(service, auth_is_iam, request).await) });
    let response: Result<_, Infallible> = match cors.filter(|_| via_rest_api(&request)) {
        Some(cors) => cors.layer(handler).oneshot(request).await,
        None => handler.oneshot(request).await,
    };
    let Ok(response) = response;
    response
}

/// Whether the request came through the REST API (whose answers carry the function's CORS
/// headers) rather than the Function URL (which adds its own).
fn via_rest_api(request: &Request) -> bool {
    matches!(request.request_context_ref(), Some(RequestContext::ApiGatewayV1(_)))
}

async fn handle(service: &ChatService, auth_is_iam: bool, request: Request) -> axum::response::Response {
    use axum::response::IntoResponse;
    let caller =
        if auth_is_iam { iam_caller(&request) } else { service.caller_from_headers(request.headers()) };
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    let deadline = request.lambda_context_ref().map(|c| deadline_instant(c.deadline, now_ms()));
    // The invocation's X-Ray trace is a turn's parent unless the caller sent its own.
    let xray = baton_aws::lambda_trace::invocation_traceparent(&request);
    let path = request.uri().path().to_owned();
    let (mut parts, body) = request.into_parts();
    if let Some(traceparent) = xray.filter(|_| !parts.headers.contains_key("traceparent")) {
        if let Ok(value) = traceparent.parse() {
            parts.headers.insert("traceparent", value);
        }
    }
    // The conversation's routes (a rating, the messages, a turn rejoined or stopped) and the
    // front-end protocols' (AG-UI, the AI SDK); every other request is a chat turn.
    if let Some(route) = Route::of(&path) {
        if parts.method != route.method() {
            let message = format!("this path serves {} only", route.method());
            return ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
                .into_response();
        }
        let (headers, uri) = (&parts.headers, &parts.uri);
        return match route {
            Route::Csat(episode) => service.rate(&caller, episode, headers, body.as_ref()).await,
            Route::Messages(episode) => service.messages(&caller, episode, headers, uri).await,
            Route::Events(episode, turn) => {
                service.turn_events(&caller, episode, turn, headers, uri, deadline).await
            }
            Route::Cancel(episode, turn) => service.cancel_turn(&caller, episode, turn, headers).await,
            Route::Agui => service.respond_agui(&caller, headers, body.as_ref(), deadline).await,
            Route::AiSdk => service.respond_ai_sdk(&caller, headers, body.as_ref(), deadline).await,
            Route::AiSdkStream(chat) => service.ai_sdk_stream(&caller, chat, headers, deadline).await,
            Route::A2aCard(base, agent) => service.a2a_card(headers, &base, agent.as_deref()),
            Route::A2a(agent) => {
                service.a2a(&caller, agent.as_deref(), headers, body.as_ref(), deadline).await
            }
        };
    }
    service.respond(&caller, &parts.headers, body.as_ref(), deadline).await
}

/// `path` split as `{stage}/a2a/{agent}` (a served agent's A2A path), unless it is a
/// conversation's route with an id `a2a` (`…/chat/a2a/csat`, `…/chat/{episode}/turns/a2a/cancel`).
fn a2a_agent(path: &str) -> Option<(&str, &str)> {
    let (before, agent) = path.rsplit_once('/')?;
    let stage = before.strip_suffix(baton::a2a::RPC_PATH)?;
    let is_chat = stage.rsplit('/').take(3).any(|s| s == "chat");
    (!agent.is_empty() && !is_chat).then_some((stage, agent))
}

/// A request to one of the conversation's routes (any stage prefix before `chat/`) or of the
/// front-end protocols (`agui`, `ai-sdk`), rather than a chat turn.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `POST …/chat/{episode_id}/csat`: a rating of an answer.
    Csat(String),
    /// `GET …/chat/{episode_id}/messages`: the conversation read back.
    Messages(String),
    /// `GET …/chat/{episode_id}/events` (the latest turn) and
    /// `GET …/chat/{episode_id}/turns/{turn_id}/events`: a turn's stream rejoined.
    Events(String, Option<String>),
    /// `POST …/chat/{episode_id}/turns/{turn_id}/cancel`: a running turn stopped.
    Cancel(String, String),
    /// `POST …/agui`: an AG-UI run.
    Agui,
    /// `POST …/ai-sdk`: a `useChat` request.
    AiSdk,
    /// `GET …/ai-sdk/{chat_id}/stream`: the chat's running turn rejoined.
    AiSdkStream(String),
    /// `GET …[/a2a/{agent}]/.well-known/agent-card.json`: the A2A card of the entry agent (or of
    /// `agent`); the path before it (a stage) is its base.
    A2aCard(String, Option<String>),
    /// `POST …/a2a[/{agent}]`: the A2A JSON-RPC endpoint of the entry agent or of `agent`
    /// (docs/a2a.md).
    A2a(Option<String>),
}

impl Route {
    /// The route `path` names, if any.
    fn of(path: &str) -> Option<Route> {
        if let Some(base) = path.strip_suffix(baton::a2a::types::CARD_PATH) {
            let base = base.trim_end_matches('/');
            return Some(match a2a_agent(base) {
                Some((stage, agent)) => Route::A2aCard(stage.to_owned(), Some(agent.to_owned())),
                None => Route::A2aCard(base.to_owned(), None),
            });
        }
        if path.trim_end_matches('/').ends_with(baton::a2a::RPC_PATH) {
            return Some(Route::A2a(None));
        }
        if let Some((_, agent)) = a2a_agent(path.trim_end_matches('/')) {
            return Some(Route::A2a(Some(agent.to_owned())));
        }
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        match segments.as_slice() {
            [.., "agui"] => return Some(Route::Agui),
            [.., "ai-sdk"] => return Some(Route::AiSdk),
            [.., "ai-sdk", chat, "stream"] => return Some(Route::AiSdkStream((*chat).to_owned())),
            _ => {}
        }
        let tail = |n: usize| -> Option<&[&str]> {
            let at = segments.len().checked_sub(n + 1)?;
            (segments[at] == "chat").then(|| &segments[at + 1..])
        };
        if let Some(&[episode, "turns", turn, action]) = tail(4) {
            let (episode, turn) = (episode.to_owned(), turn.to_owned());
            return match action {
                "events" => Some(Route::Events(episode, Some(turn))),
                "cancel" => Some(Route::Cancel(episode, turn)),
                _ => None,
            };
        }
        match *tail(2)? {
            [episode, "csat"] => Some(Route::Csat(episode.to_owned())),
            [episode, "messages"] => Some(Route::Messages(episode.to_owned())),
            [episode, "events"] => Some(Route::Events(episode.to_owned(), None)),
            _ => None,
        }
    }

    /// The one method it serves.
    fn method(&self) -> axum::http::Method {
        match self {
            Route::Csat(_) | Route::Cancel(..) | Route::Agui | Route::AiSdk | Route::A2a(_) => {
                axum::http::Method::POST
            }
            Route::Messages(_) | Route::Events(..) | Route::AiSdkStream(_) | Route::A2aCard(..) => {
                axum::http::Method::GET
            }
        }
    }
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
fn is_iam(auth: &AuthMode) -> bool {
    matches!(auth, AuthMode::Iam)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton::history::History;
    use baton::store::SystemClock;
    use baton::store::embedded::EmbeddedStore;

    const ORIGIN: &str = "https://chat.example.com";

    /// The sample event `name` (events/), as the platform delivers it, from `ORIGIN`.
    fn event(name: &str) -> Request {
        event_with(name, |_| {})
    }

    /// [`event`] changed by `change` first.
    fn event_with(name: &str, change: impl FnOnce(&mut serde_json::Value)) -> Request {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/").to_owned() + name;
        let mut event: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        change(&mut event);
        event["headers"]["origin"] = ORIGIN.into();
        if event.get("multiValueHeaders").is_some() {
            event["multiValueHeaders"]["origin"] = serde_json::json!([ORIGIN]);
        }
        lambda_http::request::from_str(&event.to_string()).unwrap()
    }

    fn service(dir: &std::path::Path) -> ChatService {
        let deployment = baton_reference::Deployment::default();
        let store = EmbeddedStore::open(dir.join("s.redb"), Arc::new(SystemClock)).unwrap();
        let mut config = deployment.config.clone();
        config.agents.a2a_served = vec!["shopping".into()];
        let backends = deployment.backends(None).unwrap();
        let served = baton::wiring::a2a_served(&config, &backends).unwrap();
        let orchestrator = baton::wiring::build(&config, backends).unwrap();
        ChatService::new(orchestrator, History::new(Arc::new(store), 10), config.limits, config.heartbeat)
            .with_auth(AuthMode::Iam)
            .with_cors_origins(vec![ORIGIN.parse().unwrap()])
            .with_a2a_agents(served)
    }

    /// The A2A card and JSON-RPC endpoint through both front doors: the card names the URL a
    /// caller reaches `/a2a` at, and a message is the signer's task; a served agent other than
    /// the entry agent has its own card and endpoint under `/a2a/{name}`.
    #[tokio::test]
    async fn both_front_doors_serve_the_a2a_card_and_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let service = service(dir.path());
        let json = |response: axum::response::Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        // A card read through API Gateway (behind TLS): its path, under the `v1` stage.
        let card_at = |path: &'static str| {
            event_with("rest-api.json", move |e| {
                e["path"] = path.into();
                e["httpMethod"] = "GET".into();
                e["headers"]["X-Forwarded-Proto"] = "https".into();
                e["body"] = serde_json::Value::Null;
            })
        };
        let card = json(answer(&service, None, true, card_at("/.well-known/agent-card.json")).await).await;
        let url = card["supportedInterfaces"][0]["url"].as_str().unwrap().to_owned();
        assert_eq!(url, "https://abcdefghij.execute-api.us-east-1.amazonaws.com/v1/a2a", "the stage kept");
        assert_eq!(card["securitySchemes"]["sigv4"]["apiKeySecurityScheme"]["name"], "Authorization");
        let rpc = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}});
        // The message POSTed to `path` through the front door of the sample event `name`.
        let rpc_event = |name: &str, path: &'static str| {
            event_with(name, |e| {
                if e.get("rawPath").is_some() {
                    e["rawPath"] = path.into();
                    e["requestContext"]["http"]["path"] = path.into();
                } else {
                    e["path"] = path.into();
                }
                e["body"] = rpc.to_string().into();
                e["headers"]["a2a-version"] = "1.0".into();
                if e.get("multiValueHeaders").is_some() {
                    e["multiValueHeaders"]["a2a-version"] = serde_json::json!(["1.0"]);
                }
            })
        };
        for name in ["rest-api.json", "function-url.json"] {
            let request = rpc_event(name, "/a2a");
            let answered = json(answer(&service, None, true, request).await).await;
            assert_eq!(
                answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{name}: {answered}"
            );
        }
        let card = card_at("/a2a/shopping/.well-known/agent-card.json");
        let card = json(answer(&service, None, true, card).await).await;
        assert_eq!(card["name"], "shopping");
        let url = card["supportedInterfaces"][0]["url"].as_str().unwrap().to_owned();
        assert_eq!(url, "https://abcdefghij.execute-api.us-east-1.amazonaws.com/v1/a2a/shopping");
        let answered =
            json(answer(&service, None, true, rpc_event("function-url.json", "/a2a/shopping")).await).await;
        let task = &answered["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
        assert_eq!(task["artifacts"][0]["name"], "shopping", "the served agent answered: {answered}");
        let response = answer(&service, None, true, rpc_event("function-url.json", "/a2a/nobody")).await;
        assert_eq!(response.status(), 404);
        let refused = json(response).await;
        assert!(
            refused["error"]["message"].as_str().unwrap().contains("served: orchestrator, shopping"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn rest_api_answers_carry_cors_headers_and_function_url_answers_none() {
        let dir = tempfile::tempdir().unwrap();
        let service = service(dir.path());
        let cors = service.cors();
        let rest = answer(&service, cors.as_ref(), true, event("rest-api.json")).await;
        assert_eq!(rest.status(), 200);
        assert_eq!(rest.headers()["access-control-allow-origin"], ORIGIN);
        let exposed = rest.headers()["access-control-expose-headers"].to_str().unwrap();
        assert!(exposed.contains("x-baton-episode-id"), "{exposed}");
        let url = answer(&service, cors.as_ref(), true, event("function-url.json")).await;
        assert_eq!(url.status(), 200);
        let cors_headers: Vec<_> =
            url.headers().keys().filter(|k| k.as_str().starts_with("access-control-")).collect();
        assert!(cors_headers.is_empty(), "the Function URL adds its own: {cors_headers:?}");
    }

    /// `GET …/chat/{episode_id}/messages` through both front doors reads the signer's own
    /// conversation, a page at a time; another principal's episode is a 404.
    #[tokio::test]
    async fn both_front_doors_read_the_signers_conversation_back() {
        use baton::store::{EpisodeKey, Store, StoredMessage};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let deployment = baton_reference::Deployment::default();
        let config = &deployment.config;
        let orchestrator = baton::wiring::build(config, deployment.backends(None).unwrap()).unwrap();
        let history = History::new(store.clone(), 10);
        let service =
            ChatService::new(orchestrator, history, config.limits, config.heartbeat).with_auth(AuthMode::Iam);
        // The principals of the sample events: the Function URL's IAM user, the REST API's role.
        for (user, said) in
            [("AIDACKCEVSQ6C2EXAMPLE", "by url"), ("AROAEXAMPLEROLEID:web-backend", "by rest")]
        {
            let key = EpisodeKey::new(user, "ep-1").unwrap();
            for text in ["first", said] {
                let message = StoredMessage::user(baton::store::new_turn_id(), text, 1);
                store.record_user_message(&key, &message, None).await.unwrap();
            }
        }
        let url = |episode: &'static str| {
            event_with("function-url.json", move |e| {
                e["rawPath"] = format!("/chat/{episode}/messages").into();
                e["rawQueryString"] = "limit=1".into();
                e["requestContext"]["http"]["method"] = "GET".into();
                e["requestContext"]["http"]["path"] = e["rawPath"].clone();
                e["body"] = serde_json::Value::Null;
            })
        };
        let rest = |episode: &'static str| {
            event_with("rest-api.json", move |e| {
                e["path"] = format!("/chat/{episode}/messages").into();
                e["resource"] = "/chat/{episode_id}/messages".into();
                e["httpMethod"] = "GET".into();
                e["requestContext"]["httpMethod"] = "GET".into();
                e["queryStringParameters"] = serde_json::json!({"limit": "1"});
                e["multiValueQueryStringParameters"] = serde_json::json!({"limit": ["1"]});
                e["body"] = serde_json::Value::Null;
            })
        };
        for (request, said) in [(url("ep-1"), "by url"), (rest("ep-1"), "by rest")] {
            let response = answer(&service, None, true, request).await;
            assert_eq!(response.status(), 200);
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                page["messages"].as_array().map(Vec::len),
                Some(1),
                "limit=1 reached the page: {page}"
            );
            assert_eq!(page["messages"][0]["content"], said, "the signer's own episode");
            assert!(page["next"].is_string(), "an older page: {page}");
        }
        for request in [url("ep-2"), rest("ep-2")] {
            assert_eq!(answer(&service, None, true, request).await.status(), 404);
        }
    }

    #[test]
    fn rating_paths_name_their_episode_and_chat_paths_do_not() {
        assert_eq!(Route::of("/prod/chat/ep-1/csat"), Some(Route::Csat("ep-1".into())));
        assert_eq!(Route::of("/chat//csat"), None);
        assert_eq!(Route::of("/other/ep-1/csat"), None);
        assert_eq!(Route::of("/v1/chat/ep-1/messages"), Some(Route::Messages("ep-1".into())));
        assert_eq!(Route::of("/chat/ep-1/csat"), Some(Route::Csat("ep-1".into())));
        assert_eq!(Route::of("chat/ep-1/events"), Some(Route::Events("ep-1".into(), None)));
        assert_eq!(
            Route::of("/prod/chat/e/turns/t/events"),
            Some(Route::Events("e".into(), Some("t".into())))
        );
        assert_eq!(Route::of("/chat/e/turns/t/cancel"), Some(Route::Cancel("e".into(), "t".into())));
        assert_eq!(Route::of("/chat/e/turns/t/other"), None);
        assert_eq!(Route::of("/chat"), None);
        assert_eq!(Route::of("/"), None);
        assert_eq!(Route::of("/chat/csat"), None, "no episode");
        assert_eq!(Route::of("/prod/agui"), Some(Route::Agui));
        assert_eq!(Route::of("/ai-sdk"), Some(Route::AiSdk));
        assert_eq!(Route::of("/prod/ai-sdk/chat-1/stream"), Some(Route::AiSdkStream("chat-1".into())));
        assert_eq!(Route::of("/ai-sdk/chat-1"), None);
        assert_eq!(Route::of("/v1/.well-known/agent-card.json"), Some(Route::A2aCard("/v1".into(), None)));
        assert_eq!(Route::of("/.well-known/agent-card.json"), Some(Route::A2aCard(String::new(), None)));
        assert_eq!(Route::of("/v1/a2a"), Some(Route::A2a(None)));
        assert_eq!(Route::of("/chat/a2a/messages"), Some(Route::Messages("a2a".into())));
        assert_eq!(Route::of("/chat/a2a/csat"), Some(Route::Csat("a2a".into())));
        assert_eq!(Route::of("/v1/chat/ep/turns/a2a/cancel"), Some(Route::Cancel("ep".into(), "a2a".into())));
        assert_eq!(Route::of("/v1/a2a/deal_finder"), Some(Route::A2a(Some("deal_finder".into()))));
        assert_eq!(
            Route::of("/v1/a2a/deal_finder/.well-known/agent-card.json"),
            Some(Route::A2aCard("/v1".into(), Some("deal_finder".into())))
        );
        assert_eq!(
            Route::of("/a2a/deal_finder/.well-known/agent-card.json"),
            Some(Route::A2aCard(String::new(), Some("deal_finder".into())))
        );
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
