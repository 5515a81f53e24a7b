//! The orchestrator as the Lambda chat function: the reference deployment's start-up, then
//! [`baton_aws::lambda_edge`] (the same router as `serve`, with the Lambda request context as
//! extensions). The tests run the sample events of both front doors through it.

use std::process::ExitCode;
use std::sync::Arc;

use baton::telemetry::emf::EmfReporter;
use baton_aws::app::EndpointSettings;
use baton_aws::settings::Settings;
use baton_aws::startup::exit;
use baton_reference::ReferenceSettings;

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
        // The platform owns the connections: `serve`'s connection limits do not apply.
        let defaults = baton::http::EndpointLimits::default();
        let limits = endpoint.endpoint_limits(defaults.request_head_timeout, defaults.max_connections)?;
        let service = baton_aws::app::service(
            &function,
            &deployment.config,
            orchestrator,
            &backends,
            auth,
            limits,
            &endpoint,
        )?;
        Ok::<_, String>((service, function.traces))
    };
    let (service, traces) = match started.await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    exit(baton_aws::lambda_edge::run(service, traces).await.map_err(|e| e.to_string()), 1)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton::auth::AuthMode;
    use baton::history::History;
    use baton::http::ChatService;
    use baton::store::SystemClock;
    use baton::store::embedded::EmbeddedStore;
    use baton_aws::lambda_edge::app;
    use lambda_http::Request;
    use lambda_http::tower::ServiceExt;

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

    /// The function's answer to `request`.
    async fn answer(service: &Arc<ChatService>, request: Request) -> axum::response::Response {
        let Ok(response) = app(service.clone()).oneshot(request).await;
        response
    }

    fn service(dir: &std::path::Path) -> Arc<ChatService> {
        let deployment = baton_reference::Deployment::default();
        let store = EmbeddedStore::open(dir.join("s.redb"), Arc::new(SystemClock)).unwrap();
        let mut config = deployment.config.clone();
        config.agents.a2a_served = vec!["shopping".into()];
        let backends = deployment.backends(None).unwrap();
        let served = baton::wiring::a2a_served(&config, &backends).unwrap();
        let orchestrator = baton::wiring::build(&config, backends).unwrap();
        let service = ChatService::new(
            orchestrator,
            History::new(Arc::new(store), 10),
            config.limits,
            config.heartbeat,
        )
        .with_auth(AuthMode::Iam)
        .with_cors_origins(vec![ORIGIN.parse().unwrap()])
        .with_a2a_agents(served);
        Arc::new(service)
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
        let card = json(answer(&service, card_at("/.well-known/agent-card.json")).await).await;
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
            let answered = json(answer(&service, request).await).await;
            assert_eq!(
                answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{name}: {answered}"
            );
        }
        let card = card_at("/a2a/shopping/.well-known/agent-card.json");
        let card = json(answer(&service, card).await).await;
        assert_eq!(card["name"], "shopping");
        let url = card["supportedInterfaces"][0]["url"].as_str().unwrap().to_owned();
        assert_eq!(url, "https://abcdefghij.execute-api.us-east-1.amazonaws.com/v1/a2a/shopping");
        let answered = json(answer(&service, rpc_event("function-url.json", "/a2a/shopping")).await).await;
        let task = &answered["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
        assert_eq!(task["artifacts"][0]["name"], "shopping", "the served agent answered: {answered}");
        let response = answer(&service, rpc_event("function-url.json", "/a2a/nobody")).await;
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
        let rest = answer(&service, event("rest-api.json")).await;
        assert_eq!(rest.status(), 200);
        assert_eq!(rest.headers()["access-control-allow-origin"], ORIGIN);
        let exposed = rest.headers()["access-control-expose-headers"].to_str().unwrap();
        assert!(exposed.contains("x-baton-episode-id"), "{exposed}");
        let url = answer(&service, event("function-url.json")).await;
        assert_eq!(url.status(), 200);
        let cors_headers: Vec<_> =
            url.headers().keys().filter(|k| k.as_str().starts_with("access-control-")).collect();
        assert!(cors_headers.is_empty(), "the Function URL adds its own: {cors_headers:?}");
    }

    /// `GET …/chat/{episode_id}/messages` through both front doors reads the signer's own
    /// conversation, a page at a time; another principal's episode is a 404.
    #[tokio::test]
    async fn both_front_doors_read_the_signers_conversation_back() {
        use baton::store::{Conversations, EpisodeKey, StoredMessage};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let deployment = baton_reference::Deployment::default();
        let config = &deployment.config;
        let orchestrator = baton::wiring::build(config, deployment.backends(None).unwrap()).unwrap();
        let history = History::new(store.clone(), 10);
        let service = Arc::new(
            ChatService::new(orchestrator, history, config.limits, config.heartbeat).with_auth(AuthMode::Iam),
        );
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
            let response = answer(&service, request).await;
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
            assert_eq!(answer(&service, request).await.status(), 404);
        }
    }

    /// A conversation's routes whose id is `a2a` stay the conversation's (not a served A2A
    /// agent's), a served agent's path is the A2A endpoint, and an unknown path is a 404,
    /// through both front doors (the REST API under its stage).
    #[tokio::test]
    async fn both_front_doors_route_a_conversations_paths_and_the_a2a_paths_apart() {
        let dir = tempfile::tempdir().unwrap();
        let service = service(dir.path());
        let request = |name: &str, method: &'static str, path: &'static str, body: Option<&'static str>| {
            event_with(name, move |e| {
                if e.get("rawPath").is_some() {
                    e["rawPath"] = path.into();
                    e["requestContext"]["http"]["path"] = path.into();
                    e["requestContext"]["http"]["method"] = method.into();
                } else {
                    e["path"] = path.into();
                    e["httpMethod"] = method.into();
                    e["requestContext"]["httpMethod"] = method.into();
                }
                e["body"] = body.map_or(serde_json::Value::Null, Into::into);
            })
        };
        let rpc = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"e/t"}}"#;
        // (method, path, body, the status and what the answer says)
        let cases = [
            ("POST", "/chat/a2a/csat", Some(r#"{"rating":"up"}"#), 404, "no_rateable_answer"),
            ("GET", "/chat/a2a/messages", None, 404, "episode_not_found"),
            ("POST", "/chat/ep/turns/a2a/cancel", None, 404, "no such turn"),
            ("GET", "/chat/ep/turns/a2a/events", None, 404, "no such turn"),
            ("POST", "/a2a/nobody", Some(rpc), 404, "served: orchestrator, shopping"),
            ("GET", "/chat/ep/turns/t/other", None, 404, "no such endpoint"),
            ("GET", "/a2a/shopping", None, 405, "method_not_allowed"),
        ];
        for name in ["rest-api.json", "function-url.json"] {
            for (method, path, body, status, says) in cases {
                let response = answer(&service, request(name, method, path, body)).await;
                assert_eq!(response.status(), status, "{name}: {method} {path}");
                let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
                let text = String::from_utf8_lossy(&bytes);
                assert!(text.contains(says), "{name}: {method} {path}: {text}");
            }
        }
    }
}
