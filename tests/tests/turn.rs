//! Whole chat turns over real HTTP: an SSE client → the chat endpoint → the OpenAI client → the
//! scripted model server, and the Forethought client → the Forethought test server.

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::{ASK_SHOPPING, ASK_SUPPORT};
use baton_tests::{
    ORCH, SHOP, chat, open_stream, scripted_config, scripted_config_with_forethought, speakers,
    start_endpoint, text_of,
};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;

const SUPPORT_TEXT: &str = "Receipts scan best in good light. I have re-queued yours for review.";
const SHOP_TEXT: &str = "Here are three coffee deals: 2x points on Brand A, $1 off Brand B, and more.";

fn mixed_orchestrator_reply() -> Reply {
    Reply::text("Let me check both.")
        .tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 2}))
        .tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 2}))
        .fragments(4)
        .into()
}

fn completed(events: &[Event]) -> (Status, &Event) {
    match events.last() {
        Some(e @ Event::Completed { status, .. }) => (*status, e),
        other => panic!("the last event must be completed, got {other:?}"),
    }
}

#[tokio::test]
async fn thinking_reaches_the_client_before_the_model_sends_its_first_byte() {
    let server = ScriptedServer::start().await.unwrap();
    let gate = Arc::new(Semaphore::new(0));
    server.push(ORCH, Reply::text("Hello! How can I help?").gated(gate.clone()));
    let endpoint = start_endpoint(&scripted_config(&server)).await;

    let mut stream = open_stream(&endpoint.url, json!({"message": "hi"})).await;
    let first = stream.next().await.unwrap();
    let Event::Thinking { turn_id, .. } = &first.event else { panic!("{first:?}") };
    assert_eq!(first.id, format!("{turn_id}:1"), "the first event names the turn and is seq 1");
    assert!(
        server.requests_for(ORCH).iter().all(|r| r.first_byte_at.is_none()),
        "the model had not answered yet when thinking arrived"
    );
    gate.add_permits(1);
    let rest: Vec<_> = stream.collect().await;
    let model_first_byte = server.requests_for(ORCH)[0].first_byte_at.unwrap();
    assert!(first.at < model_first_byte);
    let events: Vec<Event> = rest.into_iter().map(|r| r.event).collect();
    assert_eq!(text_of(&events, "orchestrator"), "Hello! How can I help?");
    assert_eq!(completed(&events).0, Status::Ok);
}

async fn mixed_turn(support_delay: Duration, shop_delay: Duration) -> Vec<Event> {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(ORCH, mixed_orchestrator_reply());
    ft.push(
        FtReply::text(SUPPORT_TEXT).first_byte_delay(support_delay).chunk_delay(Duration::from_millis(5)),
    );
    server.push(
        SHOP,
        Reply::text(SHOP_TEXT).first_byte_delay(shop_delay).chunk_delay(Duration::from_millis(5)),
    );
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let events = chat(&endpoint.url, "my receipt didn't scan and find me coffee deals").await;
    // Context rule: each sub-agent got only its own query.
    assert_eq!(ft.requests()[0].body["query"], "my receipt didn't scan");
    assert_eq!(server.requests_for(SHOP)[0].body["messages"][1]["content"], "find me coffee deals");
    events
}

fn assert_whole_and_contiguous(events: &[Event], first: &str, second: &str) {
    assert_eq!(speakers(events), ["orchestrator", first, second], "each agent's text is contiguous");
    assert_eq!(text_of(events, "support[1]"), SUPPORT_TEXT, "nothing lost or doubled");
    assert_eq!(text_of(events, "shopping[1]"), SHOP_TEXT, "nothing lost or doubled");
    assert_eq!(completed(events).0, Status::Ok);
    assert!(!events.iter().any(|e| matches!(e, Event::ContentEnd { .. })), "internal event leaked");
}

#[tokio::test]
async fn mixed_turn_fast_shopping_streams_live_and_support_follows() {
    let events = mixed_turn(Duration::from_millis(400), Duration::ZERO).await;
    assert_whole_and_contiguous(&events, "shopping[1]", "support[1]");
}

#[tokio::test]
async fn mixed_turn_fast_support_streams_live_and_shopping_follows() {
    let events = mixed_turn(Duration::ZERO, Duration::from_millis(400)).await;
    assert_whole_and_contiguous(&events, "support[1]", "shopping[1]");
}

#[tokio::test]
async fn progress_and_usage_are_reported_per_agent() {
    let events = mixed_turn(Duration::ZERO, Duration::from_millis(100)).await;
    for agent in ["support[1]", "shopping[1]"] {
        assert!(events.iter().any(|e| matches!(e, Event::AgentStarted { agent: a, .. } if a == agent)));
        assert!(
            events.iter().any(
                |e| matches!(e, Event::AgentFinished { agent: a, status: Status::Ok, .. } if a == agent)
            )
        );
    }
    assert!(events.iter().any(|e| matches!(e, Event::Usage { agent, .. } if agent == "shopping[1]")));
    assert!(
        events.iter().any(
            |e| matches!(e, Event::ResponseId { agent, id } if agent == "support[1]" && id == "ft_conv-1")
        ),
        "support reports Forethought's conversation"
    );
    let (_, Event::Completed { usage, model, .. }) = completed(&events) else { unreachable!() };
    assert_eq!(model, ORCH);
    // Forethought reports no tokens: the orchestrator's and the shopping model's usage.
    assert_eq!(usage.len(), 2, "{usage:?}");
}

#[tokio::test]
async fn the_preamble_streams_before_the_tool_calls_complete() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(
        ORCH,
        Reply::text("Let me check that for you right away.")
            .tool_call(ASK_SHOPPING, json!({"query": "coffee", "intent_count": 1}))
            .fragments(10)
            .chunk_delay(Duration::from_millis(30)),
    );
    server.push(SHOP, Reply::text("deals"));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let received: Vec<_> = open_stream(&endpoint.url, json!({"message": "coffee"})).await.collect().await;
    let first_text = received
        .iter()
        .find(|r| matches!(&r.event, Event::Text { agent, .. } if agent == "orchestrator"))
        .unwrap();
    let started = received
        .iter()
        .find(|r| matches!(&r.event, Event::AgentStarted { agent, .. } if agent == "shopping[1]"))
        .unwrap();
    // 7 more words and 10 argument fragments, 30 ms apart, separate the first word from dispatch.
    assert!(started.at - first_text.at >= Duration::from_millis(300), "{:?}", started.at - first_text.at);
}

#[tokio::test]
async fn a_rate_limited_orchestrator_call_is_retried() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, Reply::rate_limited(1)).push(ORCH, Reply::text("Hi there!"));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "hello").await;
    assert_eq!(server.requests_for(ORCH).len(), 2);
    assert_eq!(text_of(&events, "orchestrator"), "Hi there!");
    assert_eq!(completed(&events).0, Status::Ok);
    assert!(!events.iter().any(|e| matches!(e, Event::Error { .. })));
}

fn assert_failed_with(events: &[Event], agent: &str, code: &str) {
    assert!(
        events.iter().any(|e| matches!(e, Event::Error { agent: a, code: c, .. } if a == agent && c == code)),
        "expected {agent} error {code} in {events:?}"
    );
    assert_eq!(completed(events).0, Status::Error);
}

#[tokio::test]
async fn an_orchestrator_500_ends_the_turn_with_an_error() {
    let server = ScriptedServer::start().await.unwrap();
    for _ in 0..3 {
        server.push(ORCH, Reply::status(500, "boom"));
    }
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "hello").await;
    assert_failed_with(&events, "orchestrator", "model_server_error");
    assert_eq!(server.requests_for(ORCH).len(), 3, "one try and two retries");
}

#[tokio::test]
async fn a_cut_after_the_first_delta_ends_the_turn_with_an_error_and_no_retry() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(
        ORCH,
        Reply::text("Let me look that up for you.").chunk_delay(Duration::from_millis(20)).cut_after(3),
    );
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "hello").await;
    assert_eq!(text_of(&events, "orchestrator"), "Let me", "what arrived before the cut is kept");
    assert_failed_with(&events, "orchestrator", "model_stream_truncated");
    assert_eq!(server.requests_for(ORCH).len(), 1);
}

#[tokio::test]
async fn a_sub_agent_cut_is_reported_and_the_other_agent_still_answers() {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(ORCH, mixed_orchestrator_reply());
    ft.push(FtReply::text(SUPPORT_TEXT).chunk_delay(Duration::from_millis(20)).cut_after(1));
    server.push(SHOP, Reply::text(SHOP_TEXT));
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let events = chat(&endpoint.url, "my receipt didn't scan and find me coffee deals").await;
    assert_failed_with(&events, "support[1]", "support_stream_truncated");
    assert!(text_of(&events, "support[1]").starts_with("Receipts scan best in good light. "), "kept");
    assert!(text_of(&events, "support[1]").contains("Sorry"), "the user is told");
    assert_eq!(text_of(&events, "shopping[1]"), SHOP_TEXT);
}

#[tokio::test]
async fn an_idle_upstream_times_out_into_an_error() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, Reply::text("Let me look").stall_after(2));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "hello").await;
    assert_failed_with(&events, "orchestrator", "model_timeout");
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_the_sub_agents_upstream_calls() {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(ORCH, mixed_orchestrator_reply());
    ft.push(FtReply::chunks(vec!["word "; 300]).chunk_delay(Duration::from_millis(20)));
    server.push(SHOP, Reply::text("word ".repeat(300)).chunk_delay(Duration::from_millis(20)));
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let body = json!({"message": "receipt and coffee", "on_disconnect": "cancel"});
    let mut stream = open_stream(&endpoint.url, body).await;
    while let Some(r) = stream.next().await {
        if matches!(&r.event, Event::Text { agent, .. } if agent != "orchestrator") {
            break;
        }
    }
    baton_tests::wait_until_both_stream(&server, SHOP, &ft).await;
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let ended = || server.requests_for(SHOP)[0].completed.is_some() && ft.requests()[0].completed.is_some();
    while !ended() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.requests_for(SHOP)[0].completed, Some(false), "the shopping model call was cancelled");
    assert_eq!(ft.requests()[0].completed, Some(false), "the Forethought call was cancelled");
}

#[tokio::test]
async fn sse_ids_name_the_turn_and_count_up_from_one_without_gaps() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, mixed_orchestrator_reply());
    server.push(SHOP, Reply::text(SHOP_TEXT));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let received: Vec<_> = open_stream(&endpoint.url, json!({"message": "x"})).await.collect().await;
    let Event::Thinking { turn_id, .. } = &received[0].event else { panic!("{received:?}") };
    let ids: Vec<String> = received.iter().map(|r| r.id.clone()).collect();
    let expected: Vec<String> = (1..=ids.len()).map(|n| format!("{turn_id}:{n}")).collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn a_dropped_call_is_recovered_by_the_failsafe_and_both_agents_answer() {
    let server = ScriptedServer::start().await.unwrap();
    // The model reports two intents but calls only support; asked again, it adds shopping.
    server.push(
        ORCH,
        Reply::text("Let me check.")
            .tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 2})),
    );
    server.push(
        ORCH,
        Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 2})),
    );
    let ft = ForethoughtServer::start().await.unwrap();
    ft.push(FtReply::text(SUPPORT_TEXT));
    server.push(SHOP, Reply::text(SHOP_TEXT));
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let events = chat(&endpoint.url, "my receipt didn't scan and find me coffee deals").await;
    let reask = &server.requests_for(ORCH)[1].body;
    assert_eq!(reask["tool_choice"], "required");
    let instruction = reask["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap();
    assert!(instruction.contains("2 separate requests"), "{instruction}");
    assert_eq!(text_of(&events, "support[1]"), SUPPORT_TEXT);
    assert_eq!(text_of(&events, "shopping[1]"), SHOP_TEXT);
    assert_eq!(completed(&events).0, Status::Ok);
}

#[tokio::test]
async fn a_direct_answer_to_a_real_question_is_sent_to_shopping() {
    let server = ScriptedServer::start().await.unwrap();
    // Answered directly, and again when the routing asks once more for a tool call.
    let direct = "Milk is cheaper in bulk. Costco sells two gallons for five dollars.";
    server.push(ORCH, Reply::text(direct)).push(ORCH, Reply::text(direct));
    server.push(SHOP, Reply::text(SHOP_TEXT));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "is it cheaper to buy milk in bulk").await;
    assert_eq!(
        text_of(&events, "orchestrator"),
        "Milk is cheaper in bulk.",
        "only the first sentence was shown"
    );
    assert_eq!(server.requests_for(ORCH)[1].body["tool_choice"], "required", "the re-ask wants a call");
    assert_eq!(
        server.requests_for(SHOP)[0].body["messages"][1]["content"],
        "is it cheaper to buy milk in bulk"
    );
    assert_eq!(text_of(&events, "shopping[1]"), SHOP_TEXT);
}

/// An image the client classified as a receipt reaches the orchestrator model as an image part
/// after the note; answered directly (to smalltalk words), it goes to support all the same.
#[tokio::test]
async fn a_receipt_image_reaches_the_model_as_an_image_part_and_goes_to_support() {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(ORCH, Reply::text("Thanks for the picture! It looks like a grocery receipt."));
    ft.push(FtReply::chunks(vec!["I see the receipt from Kroger."]));
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let url = "data:image/png;base64,iVBORw0KGgo=";
    let image = json!({"type": "receipt", "description": "a Kroger receipt", "url": url});
    let body = json!({"message": "thanks!", "image": image});
    let events: Vec<Event> = open_stream(&endpoint.url, body).await.map(|r| r.event).collect().await;

    let sent = &server.requests_for(ORCH)[0].body["messages"];
    let user = sent.as_array().unwrap().last().unwrap();
    assert_eq!(user["content"][0]["type"], "text", "{user}");
    let note = user["content"][0]["text"].as_str().unwrap();
    assert!(
        note.starts_with("thanks!") && note.contains("an image of a receipt: a Kroger receipt"),
        "{note}"
    );
    assert_eq!(user["content"][1], json!({"type": "image_url", "image_url": {"url": url}}));
    assert_eq!(text_of(&events, "orchestrator"), "Thanks for the picture!", "the rest is withheld");
    assert_eq!(text_of(&events, "support[1]"), "I see the receipt from Kroger.");
    assert_eq!(ft.requests()[0].body["query"], "thanks!");
    assert!(server.requests_for(SHOP).is_empty());
    assert_eq!(completed(&events).0, Status::Ok);
}

#[tokio::test]
async fn a_refused_direct_answer_is_asked_again_and_routed_where_the_model_says() {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(ORCH, Reply::text("Points post within a day. Check again tomorrow."));
    server.push(
        ORCH,
        Reply::text("").tool_call(
            "ask_support",
            json!({"query": "where are my points", "intent_count": 1, "support_category": "missing_points"}),
        ),
    );
    ft.push(FtReply::chunks(vec!["Let me look into your points."]));
    let endpoint = start_endpoint(&scripted_config_with_forethought(&server, &ft)).await;
    let events = chat(&endpoint.url, "hi, where are my points?").await;
    assert_eq!(text_of(&events, "orchestrator"), "Points post within a day.", "the refused rest is withheld");
    assert!(text_of(&events, "support[1]").contains("your points"));
    assert!(server.requests_for(SHOP).is_empty(), "no guess at shopping");
    assert_eq!(ft.requests()[0].body["query"], "hi, where are my points?");
    assert_eq!(completed(&events).0, Status::Ok);
}
