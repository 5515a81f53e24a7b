//! Traces of one mixed turn, through the real endpoint (SSE over loopback, the OpenAI client
//! against the scripted model server, the embedded store), exported over OTLP/HTTP to a real
//! receiver on loopback that decodes the protobuf with the official `opentelemetry-proto`
//! definitions: the span tree (turn → agent instances → model and tool calls), the GenAI
//! attributes, and the trace id of the request's `traceparent`, which the model requests carry on;
//! then a turn whose routing the rules repair, each repair an event of the orchestrator's span.
//!
//! One test in this binary: it installs the process's global `tracing` subscriber.

use std::collections::HashMap;
use std::time::Duration;

use baton::model::scripted::{Reply, ScriptedServer};
use baton::telemetry::trace::Traces;
use baton_tests::otlp::{Receiver, attr, hex};
use baton_tests::stores::{Embedded, StoreHarness, test_clock};
use baton_tests::{ASK_SHOPPING, ASK_SUPPORT, ORCH, SHOP, scripted_config, start_endpoint_with};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// Alice's chat request `body`, sent as a child of the caller's span `PARENT_ID` in `trace_id`;
/// the SSE body it got back.
async fn chat_in_trace(url: &str, trace_id: &str, body: serde_json::Value) -> String {
    let response = reqwest::Client::new()
        .post(url)
        .header(baton::http::USER_HEADER, "alice")
        .header("traceparent", format!("00-{trace_id}-{PARENT_ID}-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_turn_exports_its_span_tree_under_the_callers_trace() {
    let receiver = Receiver::start().await;
    let traces = Traces::to_endpoint("baton-test", &receiver.traces_url()).unwrap();
    tracing_subscriber::registry().with(traces.layer()).init();

    let harness = Embedded::start(test_clock()).await;
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = start_endpoint_with(&scripted_config(&server), harness.store()).await;
    server.push(
        ORCH,
        Reply::text("Let me check both.")
            .tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 2}))
            .tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 2}))
            .usage(120, 30),
    );
    server.push(SHOP, Reply::text("Coffee deals.").usage(40, 8));
    let body = chat_in_trace(
        &endpoint.url,
        TRACE_ID,
        json!({"message": "my receipt didn't scan, and find me coffee deals", "episode_id": "e1"}),
    )
    .await;
    assert!(body.contains("event: completed"), "{body}");
    traces.flush().await;

    // The batch exporter posts on its own task; wait (bounded) until the turn's span is in.
    let spans = receiver
        .spans_when(Duration::from_secs(10), |spans| spans.iter().any(|s| s.name.starts_with("turn ")))
        .await;
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let one = |name: &str| -> &Span {
        let found = named(name);
        assert_eq!(
            found.len(),
            1,
            "one `{name}` span in {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0]
    };
    let parent = |span: &Span| -> &Span { by_id[&span.parent_span_id] };

    // Every span is in the caller's trace; the turn's parent is the caller's span.
    assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE_ID), "one trace");
    let turn = one("turn orchestrator");
    assert_eq!(hex(&turn.parent_span_id), PARENT_ID);
    // The turn's store operations, in the turn: history read, user message, reply.
    for op in ["store recent_messages", "store record_user_message", "store save_reply"] {
        let span = one(op);
        assert_eq!(span.parent_span_id, turn.span_id, "{op} is a child of the turn");
    }
    assert_eq!(attr(turn, "baton.episode_id").as_deref(), Some("e1"));
    assert_eq!(attr(turn, "baton.status").as_deref(), Some("ok"));

    // turn → orchestrator instance → its model call and its two routing tool calls → each
    // sub-agent instance → shopping's model call.
    let orchestrator = one("invoke_agent orchestrator");
    assert_eq!(orchestrator.parent_span_id, turn.span_id);
    assert_eq!(attr(orchestrator, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    assert_eq!(attr(orchestrator, "baton.agent.instance").as_deref(), Some("orchestrator"));
    let routing_call = one(&format!("chat {ORCH}"));
    assert_eq!(routing_call.parent_span_id, orchestrator.span_id);
    assert_eq!(attr(routing_call, "gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(attr(routing_call, "gen_ai.request.model").as_deref(), Some(ORCH));
    assert_eq!(attr(routing_call, "gen_ai.usage.input_tokens").as_deref(), Some("120"));
    assert_eq!(attr(routing_call, "gen_ai.usage.output_tokens").as_deref(), Some("30"));
    assert!(attr(routing_call, "baton.ttft_ms").is_some(), "time to first token");
    assert!(routing_call.events.iter().any(|e| e.name == "gen_ai.first_token"));
    for (tool, agent, instance) in
        [(ASK_SUPPORT, "support", "support[1]"), (ASK_SHOPPING, "shopping", "shopping[1]")]
    {
        let call = one(&format!("execute_tool {tool}"));
        assert_eq!(call.parent_span_id, orchestrator.span_id, "{tool}");
        assert_eq!(attr(call, "gen_ai.tool.name").as_deref(), Some(tool));
        let child = one(&format!("invoke_agent {agent}"));
        assert_eq!(attr(child, "baton.agent.instance").as_deref(), Some(instance));
        assert_eq!(parent(child).span_id, call.span_id, "{instance} runs inside its call");
    }
    let shopping_call = one(&format!("chat {SHOP}"));
    assert_eq!(parent(shopping_call).name, "invoke_agent shopping");
    assert_eq!(attr(shopping_call, "gen_ai.usage.output_tokens").as_deref(), Some("8"));

    // The model requests carried the trace on, each naming its own model-call span.
    let sent = server.requests_for(SHOP)[0].traceparent.clone().expect("traceparent on the model request");
    assert_eq!(sent, format!("00-{TRACE_ID}-{}-01", hex(&shopping_call.span_id)));

    // A second turn, in a trace of its own, whose routing the rules repair: a real question
    // answered directly is re-asked, then sent to shopping. Each repair is an event of the
    // orchestrator instance's span.
    const REPAIRED_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
    let direct = "Milk is cheaper in bulk. Costco sells two gallons for five dollars.";
    server.push(ORCH, Reply::text(direct)).push(ORCH, Reply::text(direct));
    server.push(SHOP, Reply::text("Here are milk offers."));
    let body = chat_in_trace(
        &endpoint.url,
        REPAIRED_TRACE,
        json!({"message": "is it cheaper to buy milk in bulk", "episode_id": "e2"}),
    )
    .await;
    assert!(body.contains("event: completed"));
    traces.flush().await;
    let in_trace = |spans: &[Span]| -> Vec<Span> {
        spans.iter().filter(|s| hex(&s.trace_id) == REPAIRED_TRACE).cloned().collect()
    };
    let spans = in_trace(
        &receiver
            .spans_when(Duration::from_secs(10), |spans| {
                in_trace(spans).iter().any(|s| s.name == "turn orchestrator")
            })
            .await,
    );
    let orchestrator: Vec<&Span> = spans.iter().filter(|s| s.name == "invoke_agent orchestrator").collect();
    assert_eq!(orchestrator.len(), 1, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let events: Vec<&str> = orchestrator[0].events.iter().map(|e| e.name.as_str()).collect();
    assert!(events.iter().any(|e| e.contains("re-asked the model")), "the re-ask: {events:?}");
    let repair = orchestrator[0]
        .events
        .iter()
        .find(|e| e.name == "routing repaired the model's routing")
        .unwrap_or_else(|| panic!("the fallback repair: {events:?}"));
    assert!(repair.attributes.iter().any(|a| a.key == "action"), "{repair:?}");
}
