//! Vendors that misbehave, over real HTTP: a model server and a Forethought server that answer
//! 401 with a body echoing the `Authorization` header (the key must reach no SSE byte and no log
//! line, while the log keeps a redacted excerpt), and a model server that streams forever (the
//! answer cap ends it, `completed` is reached, and what was produced is stored).

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status, decode_sse};
use baton::model::openai::{OpenAiChatModel, OpenAiConfig};
use baton::model::responses::ResponsesModel;
use baton::model::scripted::{ENDLESS_WORD, Reply, ScriptedServer};
use baton::model::{ChatModel, ChatRequest, Message, ModelDelta, ModelError};
use baton::store::embedded::EmbeddedStore;
use baton::store::{Conversations, EpisodeKey, SystemClock};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::ASK_SUPPORT;
use baton_tests::{
    FT_TOKEN, ORCH, SHOP, scripted_config, scripted_config_with_forethought, start_endpoint_with, text_of,
};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::json;

/// The model API key the tests configure: it must never come back out.
const KEY: &str = "sk-proj-Zq9secretvalue0123456789";
/// A part of [`KEY`] that no redaction marker contains.
const KEY_TELL: &str = "Zq9secret";
/// A hang fails the test after this; no speed is claimed.
const BOUND: Duration = Duration::from_secs(30);

/// POSTs a chat turn and returns the raw SSE body and its decoded events.
async fn raw_turn(url: &str, message: &str) -> (String, Vec<Event>) {
    let response = reqwest::Client::new()
        .post(url)
        .header(baton::http::USER_HEADER, "local")
        .json(&json!({"message": message, "episode_id": "e1"}))
        .send();
    let body = async { response.await.unwrap().text().await.unwrap() };
    let body = tokio::time::timeout(BOUND, body).await.expect("the turn ends");
    let events = futures::stream::iter([Ok::<_, std::io::Error>(body.clone().into_bytes())])
        .eventsource()
        .map(|e| {
            let e = e.unwrap();
            decode_sse(&e.event, &e.data).unwrap()
        })
        .collect()
        .await;
    (body, events)
}

fn error_codes(events: &[Event]) -> Vec<(&str, &str)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Error { code, message, .. } => Some((code.as_str(), message.as_str())),
            _ => None,
        })
        .collect()
}

fn completed(events: &[Event]) -> Status {
    match events.last() {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event must be completed, got {other:?}"),
    }
}

async fn endpoint_store() -> (Arc<EmbeddedStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap();
    (Arc::new(store), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_echoing_the_key_leaks_it_to_no_event_and_no_log_line() {
    let logs = baton_tests::logs::capture();
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, Reply::echo_authorization(401));
    let mut config = scripted_config(&server);
    config.config.models.api_key = Some(KEY.into());
    let (store, _dir) = endpoint_store().await;
    let endpoint = start_endpoint_with(&config, store).await;

    let (body, events) = raw_turn(&endpoint.url, "hello there").await;

    let sent = server.requests_for(ORCH)[0].authorization.clone();
    assert_eq!(sent.as_deref(), Some(format!("Bearer {KEY}").as_str()), "the server had the key to echo");
    assert_eq!(error_codes(&events)[0].0, "model_rejected_request", "{events:?}");
    assert!(!body.contains(KEY_TELL), "the key reached the SSE body: {body}");
    let log = logs.contents();
    assert!(!log.contains(KEY_TELL), "the key reached a log line: {log}");
    let excerpt = logs.lines_with("Incorrect API key provided: Bearer [REDACTED]");
    assert!(!excerpt.is_empty(), "the log keeps a redacted excerpt of the vendor's body: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forethought_echoing_the_token_leaks_it_to_no_event_and_no_log_line() {
    let logs = baton_tests::logs::capture();
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    let call =
        Reply::text("").tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 1}));
    server.push(ORCH, call);
    ft.push(FtReply::EchoAuthorization { status: 401 });
    let config = scripted_config_with_forethought(&server, &ft);
    let (store, _dir) = endpoint_store().await;
    let endpoint = start_endpoint_with(&config, store).await;

    let (body, events) = raw_turn(&endpoint.url, "my receipt didn't scan").await;

    assert_eq!(ft.requests()[0].authorization.as_deref(), Some(format!("Bearer {FT_TOKEN}").as_str()));
    assert!(error_codes(&events).iter().any(|(code, _)| *code == "support_rejected_request"), "{events:?}");
    assert!(!body.contains(FT_TOKEN), "the token reached the SSE body: {body}");
    let log = logs.contents();
    assert!(!log.contains(FT_TOKEN), "the token reached a log line: {log}");
    assert!(!logs.lines_with("invalid credentials: Bearer [REDACTED]").is_empty(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_server_echoing_the_key_gives_an_error_without_it() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(SHOP, Reply::echo_authorization(400));
    let mut config = OpenAiConfig::new(server.base_url(), SHOP);
    config.api_key = Some(KEY.into());
    let model = ResponsesModel::new(config).unwrap();

    let err = baton::model::collect(model.stream(ChatRequest::default())).await.unwrap_err();

    assert_eq!(err.code(), "model_rejected_request");
    assert!(!err.to_string().contains(KEY_TELL), "{err}");
    let detail = err.detail().unwrap();
    assert!(!detail.contains(KEY_TELL) && detail.contains("[REDACTED]"), "{detail}");
}

/// Drains a model stream: the text it delivered and the error it ended with.
async fn drain(model: &dyn ChatModel) -> (String, Option<ModelError>) {
    let request = ChatRequest { messages: vec![Message::user("tell me everything")], ..Default::default() };
    let mut stream = model.stream(request);
    let mut text = String::new();
    let run = async {
        while let Some(delta) = stream.next().await {
            match delta {
                Ok(ModelDelta::Text(t)) => text.push_str(&t),
                Ok(_) => {}
                Err(e) => return Some(e),
            }
        }
        None
    };
    let error = tokio::time::timeout(BOUND, run).await.expect("the cap ends the stream");
    (text, error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_answer_is_cut_at_the_cap_in_both_apis() {
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::endless(Duration::from_millis(1)));
    let mut config = OpenAiConfig::new(server.base_url(), ORCH);
    config.max_answer_chars = 500;
    let chat = OpenAiChatModel::new(config.clone()).unwrap();
    let responses = ResponsesModel::new(config).unwrap();

    for model in [&chat as &dyn ChatModel, &responses] {
        let (text, error) = drain(model).await;
        assert_eq!(error, Some(ModelError::AnswerTooLong { limit: 500 }));
        assert!(text.chars().count() > 500 - ENDLESS_WORD.len(), "what came before the cap: {}", text.len());
        assert!(text.chars().count() <= 500 + ENDLESS_WORD.len(), "{}", text.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_answer_ends_the_turn_with_completed_and_stores_what_was_produced() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, Reply::endless(Duration::ZERO));
    let config = scripted_config(&server);
    let (store, _dir) = endpoint_store().await;
    let endpoint = start_endpoint_with(&config, store.clone()).await;

    let (_, events) = raw_turn(&endpoint.url, "tell me everything").await;

    assert!(
        error_codes(&events).iter().any(|(code, _)| *code == "answer_too_long"),
        "{:?}",
        error_codes(&events)
    );
    assert_ne!(completed(&events), Status::Ok);
    let streamed = text_of(&events, "orchestrator");
    assert!(streamed.starts_with(&ENDLESS_WORD.repeat(100)), "the answer streamed up to the cap");
    let key = EpisodeKey::new("local", "e1").unwrap();
    let stored = store.recent_messages(&key, 10).await.unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored[1].content.starts_with(&ENDLESS_WORD.repeat(100)), "what was produced is stored");
}
