//! The Responses API client against the scripted server over real HTTP: streamed text,
//! reasoning summaries, fragmented function calls, `previous_response_id`, and failures.

use std::time::Duration;

use baton::model::openai::OpenAiConfig;
use baton::model::responses::ResponsesModel;
use baton::model::scripted::{Api, Part, Reply, ScriptedServer};
use baton::model::{
    ChatModel, ChatRequest, FinishReason, Message, ModelDelta, ModelError, TimeoutKind, collect,
};
use futures::StreamExt;
use serde_json::json;

fn model(server: &ScriptedServer) -> ResponsesModel {
    let mut c = OpenAiConfig::new(server.base_url(), "m");
    c.api_key = Some("sk-test".into());
    c.timeouts.idle = Duration::from_millis(300);
    c.retry.base_delay = Duration::from_millis(5);
    ResponsesModel::new(c).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::system("be brief"), Message::user(text)], ..Default::default() }
}

#[tokio::test]
async fn text_reasoning_and_usage_arrive_with_the_response_id() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(
        "m",
        Reply::parts(vec![Part::Reasoning("thinking about coffee".into()), Part::Text("Two deals.".into())])
            .usage(12, 4)
            .cached_and_reasoning(5, 2),
    );
    let r = collect(model(&server).stream(ask("coffee"))).await.unwrap();
    assert_eq!(r.response_id.as_deref(), Some("resp_0"));
    assert_eq!(r.reasoning, "thinking about coffee");
    assert_eq!(r.text, "Two deals.");
    assert_eq!(
        r.usage.map(|u| (u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens)),
        Some((12, 4, 5, 2))
    );
    assert_eq!(r.finish, Some(FinishReason::Stop));
    let req = &server.requests_for("m")[0];
    assert_eq!(req.api, Api::Responses);
    assert_eq!(req.body["instructions"], "be brief");
    assert_eq!(req.body["input"], json!([{"role": "user", "content": "coffee"}]));
    assert_eq!(req.authorization.as_deref(), Some("Bearer sk-test"));
    assert!(req.body.get("previous_response_id").is_none());
}

#[tokio::test]
async fn fragmented_function_calls_reassemble_in_order_after_their_start() {
    let server = ScriptedServer::start().await.unwrap();
    let a = json!({"query": "coffee beans, ünïcode"});
    let b = json!({"offer_id": "off-0007"});
    server.push(
        "m",
        Reply::text("Looking.")
            .tool_call("search_offers", a.clone())
            .tool_call("get_offer", b.clone())
            .fragments(7),
    );
    let deltas: Vec<ModelDelta> = model(&server).stream(ask("x")).map(|d| d.unwrap()).collect().await;
    let starts: Vec<usize> = deltas
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d, ModelDelta::ToolCallStart { .. }))
        .map(|(i, _)| i)
        .collect();
    let calls: Vec<_> = deltas
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            ModelDelta::ToolCall(c) => Some((i, c.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 2);
    assert!(starts.iter().all(|s| *s < calls[0].0));
    assert_eq!((calls[0].1.name.as_str(), calls[0].1.parse_arguments().unwrap()), ("search_offers", a));
    assert_eq!((calls[1].1.name.as_str(), calls[1].1.parse_arguments().unwrap()), ("get_offer", b));
    assert_eq!(calls[0].1.id, "call_0");
    assert_eq!(deltas.last(), Some(&ModelDelta::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn continuing_sends_the_previous_response_id_and_only_new_items() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("ok"));
    let request = ChatRequest {
        messages: vec![
            Message::system("be brief"),
            Message::Tool { call_id: "call_0".into(), content: "{\"offers\":[]}".into() },
        ],
        ..Default::default()
    };
    let m = model(&server);
    assert!(m.keeps_conversations());
    collect(m.stream_continuing(request, "resp_41".into())).await.unwrap();
    let body = &server.requests_for("m")[0].body;
    assert_eq!(body["previous_response_id"], "resp_41");
    assert_eq!(
        body["input"],
        json!([{"type": "function_call_output", "call_id": "call_0", "output": "{\"offers\":[]}"}])
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::status(500, "boom")).push("m", Reply::text("recovered"));
    let r = collect(model(&server).stream(ask("x"))).await.unwrap();
    assert_eq!(r.text, "recovered");
    assert_eq!(server.requests_for("m").len(), 2);

    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::status(400, "unknown parameter: previous_response_id"));
    let err = collect(model(&server).stream(ask("x"))).await.unwrap_err();
    assert_eq!(err.code(), "model_rejected_request");
    assert!(!err.to_string().contains("previous_response_id"), "the vendor's words stay out: {err}");
    assert!(err.detail().unwrap().contains("previous_response_id"), "and reach the log: {err:?}");
}

#[tokio::test]
async fn an_error_event_mid_stream_is_a_typed_error() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::parts(vec![Part::Text("partial".into()), Part::Error("overloaded".into())]));
    let err = collect(model(&server).stream(ask("x"))).await.unwrap_err();
    assert_eq!(err, ModelError::Stream("overloaded".into()));
}

#[tokio::test]
async fn a_stream_cut_before_completed_is_truncated_and_a_stall_times_out() {
    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("one two three").chunk_delay(Duration::from_millis(30)).cut_after(4));
    let err = collect(model(&server).stream(ask("x"))).await.unwrap_err();
    assert!(matches!(err, ModelError::Truncated(_)), "{err:?}");

    let server = ScriptedServer::start().await.unwrap();
    server.push("m", Reply::text("one two three").stall_after(3));
    let err = collect(model(&server).stream(ask("x"))).await.unwrap_err();
    assert_eq!(err, ModelError::Timeout(TimeoutKind::Idle));
}
