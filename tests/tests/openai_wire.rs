//! The Chat Completions client against real HTTP: captured streams from a real server, and the
//! scripted server's failures.

use std::sync::Arc;
use std::time::Duration;

use baton::model::openai::{OpenAiChatModel, OpenAiConfig};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::model::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelDelta, ModelError, TimeoutKind, collect,
};
use futures::StreamExt;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/openai-wire/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn model(server: &ScriptedServer, name: &str) -> OpenAiChatModel {
    let mut c = OpenAiConfig::new(server.base_url(), name);
    c.timeouts.idle = Duration::from_millis(300);
    c.retry.base_delay = Duration::from_millis(5);
    OpenAiChatModel::new(c).unwrap()
}

async fn replay(capture: &str) -> ChatResponse {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::Raw(fixture(capture).into()));
    collect(
        model(&server, "m").stream(ChatRequest { messages: vec![Message::user("x")], ..Default::default() }),
    )
    .await
    .unwrap()
}

fn assert_query_objects(r: &ChatResponse) {
    for call in &r.tool_calls {
        let args =
            call.parse_arguments().unwrap_or_else(|e| panic!("{} args {:?}: {e}", call.name, call.arguments));
        assert!(args.is_object() && args.get("query").is_some(), "{args}");
        assert!(!call.id.is_empty());
    }
}

#[tokio::test]
async fn capture_plain_text_stream() {
    let r = replay("llama-stream-text.txt").await;
    assert_eq!(r.text.chars().count(), 461);
    assert_eq!(r.finish, Some(FinishReason::Stop));
    assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((31, 118)));
    assert!(r.tool_calls.is_empty());
    assert!(r.response_id.unwrap().starts_with("chatcmpl-"));
}

#[tokio::test]
async fn capture_three_fragmented_tool_calls() {
    let r = replay("llama-stream-tools.txt").await;
    let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ask_support", "ask_shopping", "ask_shopping"]);
    assert_query_objects(&r);
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.usage.map(|u| (u.input_tokens, u.output_tokens, u.cached_input_tokens)),
        Some((448, 191, 447))
    );
}

#[tokio::test]
async fn capture_single_tool_call() {
    let r = replay("llama-stream-tools-single.txt").await;
    let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ask_support"]);
    assert_query_objects(&r);
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.usage.map(|u| (u.input_tokens, u.output_tokens, u.cached_input_tokens)),
        Some((448, 57, 447))
    );
}

#[tokio::test]
async fn capture_prefilled_tool_call_in_one_delta() {
    let r = replay("llama-stream-tools-scripted.txt").await;
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "ask_shopping");
    assert_eq!(r.tool_calls[0].parse_arguments().unwrap(), serde_json::json!({"query": "coffee deals"}));
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.usage.map(|u| (u.input_tokens, u.output_tokens, u.cached_input_tokens)),
        Some((482, 2, 463))
    );
}

#[tokio::test]
async fn scripted_fragments_reassemble_and_start_events_come_first() {
    let server = ScriptedServer::start().await.unwrap();
    let args = serde_json::json!({"query": "a long query with ünïcode", "intent_count": 2});
    server.push("m", Reply::text("ok").tool_call("ask_shopping", args.clone()).fragments(9));
    let deltas: Vec<ModelDelta> =
        model(&server, "m").stream(ChatRequest::default()).map(|d| d.unwrap()).collect().await;
    let start = deltas.iter().position(|d| matches!(d, ModelDelta::ToolCallStart { .. })).unwrap();
    let call = deltas.iter().position(|d| matches!(d, ModelDelta::ToolCall(_))).unwrap();
    assert!(start < call);
    let ModelDelta::ToolCall(c) = &deltas[call] else { unreachable!() };
    assert_eq!(c.parse_arguments().unwrap(), args);
}

#[tokio::test]
async fn rate_limit_is_retried_after_retry_after() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::rate_limited(1)).push("m", Reply::text("fine"));
    let r = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap();
    assert_eq!(r.text, "fine");
    let reqs = server.requests_for("m");
    assert_eq!(reqs.len(), 2);
    let waited = reqs[1].received_at - reqs[0].received_at;
    assert!(waited >= Duration::from_secs(1), "honours Retry-After: waited {waited:?}");
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_with_their_message() {
    let server = ScriptedServer::start().await.unwrap();
    for _ in 0..3 {
        server.push("m", Reply::status(503, "overloaded"));
    }
    let err = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err, ModelError::Http { status: 503, message: "overloaded".into(), retry_after: None });
    assert_eq!(server.requests_for("m").len(), 3, "first try and two retries");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::status(401, "bad key"));
    let err = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err.code(), "model_rejected_request");
    assert_eq!(server.requests_for("m").len(), 1);
}

#[tokio::test]
async fn a_cut_before_the_first_delta_is_retried_but_after_it_is_an_error() {
    let server = ScriptedServer::start().await.unwrap();
    // Chunks 0 (role and response id) and 1 ("hello") reach the caller before the cut.
    let delayed = Reply::text("hello there").chunk_delay(Duration::from_millis(50));
    server.push("m", delayed.clone().cut_after(2)).push("m", delayed);
    let r = collect(model(&server, "m").stream(ChatRequest::default())).await;
    assert!(matches!(r, Err(ModelError::Truncated(_))), "{r:?}");
    assert_eq!(server.requests_for("m").len(), 1, "no retry once a delta was delivered");

    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("hello there").cut_after(0)).push("m", Reply::text("hello there"));
    let r = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap();
    assert_eq!(r.text, "hello there");
    assert_eq!(server.requests_for("m").len(), 2);
}

#[tokio::test]
async fn a_mid_stream_error_payload_is_a_typed_error() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(
        "m",
        Reply::parts(vec![
            baton::model::scripted::Part::Text("partial".into()),
            baton::model::scripted::Part::Error("context length exceeded".into()),
        ]),
    );
    let err = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err, ModelError::Stream("context length exceeded".into()));
}

#[tokio::test]
async fn an_idle_stream_times_out() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("one two three").stall_after(2));
    let err = collect(model(&server, "m").stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err, ModelError::Timeout(TimeoutKind::Idle));
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_first_byte_timeout() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::Hang);
    let mut c = OpenAiConfig::new(server.base_url(), "m");
    c.timeouts.first_byte = Duration::from_millis(200);
    c.retry.max_retries = 0;
    let err = collect(OpenAiChatModel::new(c).unwrap().stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err, ModelError::Timeout(TimeoutKind::FirstByte));
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    c.retry.max_retries = 1;
    c.retry.base_delay = Duration::from_millis(1);
    let err = collect(OpenAiChatModel::new(c).unwrap().stream(ChatRequest::default())).await.unwrap_err();
    assert_eq!(err.code(), "model_unreachable", "{err}");
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_request() {
    let server = ScriptedServer::start().await.unwrap();
    let long = "word ".repeat(200);
    server.push("m", Reply::text(long).chunk_delay(Duration::from_millis(20)));
    let model = Arc::new(model(&server, "m"));
    let mut stream = model.stream(ChatRequest::default());
    while let Some(d) = stream.next().await {
        if matches!(d.unwrap(), ModelDelta::Text(_)) {
            break;
        }
    }
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.requests_for("m")[0].completed.is_none() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.requests_for("m")[0].completed, Some(false), "the server saw the client leave");
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token_and_the_body_asks_for_usage() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("x"));
    let mut c = OpenAiConfig::new(server.base_url(), "m");
    c.api_key = Some("sk-test".into());
    collect(OpenAiChatModel::new(c).unwrap().stream(ChatRequest::default())).await.unwrap();
    let req = &server.requests_for("m")[0];
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.authorization.as_deref(), Some("Bearer sk-test"));
}

/// `concurrent` streamed calls at once on one shared client (`http2`: h2c with prior knowledge),
/// each answered over 60 ms so they overlap; the requests as the server saw them.
async fn concurrent_calls(http2: bool, concurrent: usize) -> (ScriptedServer, Vec<ChatResponse>) {
    let server = ScriptedServer::start().await.unwrap();
    server.set_default("m", Reply::text("one two three").chunk_delay(Duration::from_millis(20)));
    let http = OpenAiChatModel::http_client(&Default::default(), http2).unwrap();
    let model = OpenAiChatModel::with_client(http, OpenAiConfig::new(server.base_url(), "m"));
    let calls = (0..concurrent).map(|_| {
        collect(model.stream(ChatRequest { messages: vec![Message::user("x")], ..Default::default() }))
    });
    let answers = futures::future::join_all(calls).await.into_iter().map(Result::unwrap).collect();
    (server, answers)
}

#[tokio::test]
async fn http2_prior_knowledge_puts_concurrent_calls_on_one_connection() {
    let (server, answers) = concurrent_calls(true, 4).await;
    assert!(answers.iter().all(|a| a.text == "one two three"), "{answers:?}");
    let versions: Vec<_> = server.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [axum::http::Version::HTTP_2; 4]);
    assert_eq!(server.connections(), 1, "four concurrent calls, one HTTP/2 connection");
}

#[tokio::test]
async fn calls_one_after_the_other_reuse_one_http1_connection() {
    // The client stops reading at `[DONE]`; the body's last chunk is read all the same, so the
    // connection goes back to the pool.
    let server = ScriptedServer::start().await.unwrap();
    server.set_default("m", Reply::text("one two three"));
    let model = model(&server, "m");
    for _ in 0..4 {
        let answer =
            collect(model.stream(ChatRequest { messages: vec![Message::user("x")], ..Default::default() }))
                .await;
        assert_eq!(answer.unwrap().text, "one two three");
    }
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn without_it_a_cleartext_server_gets_http1_and_a_connection_per_concurrent_call() {
    let (server, answers) = concurrent_calls(false, 4).await;
    assert!(answers.iter().all(|a| a.text == "one two three"), "{answers:?}");
    assert!(server.requests().iter().all(|r| r.version == axum::http::Version::HTTP_11));
    assert_eq!(server.connections(), 4);
}
