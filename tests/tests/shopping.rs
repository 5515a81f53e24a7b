//! The shopping agent in whole turns over real HTTP: its tool loop on Chat Completions and on the
//! Responses API (with `previous_response_id` within a run and across turns), bad tool calls from
//! the model, and the context rules of a mixed turn (docs/agents.md, "Shopping: a tool loop").

use std::sync::Arc;

use baton::config::AgentDefaults;
use baton::event::{Event, Status};
use baton::model::Message;
use baton::model::scripted::{Api, Part, Reply, ScriptedServer};
use baton::orchestrator::TurnRequest;
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::{ASK_SHOPPING, ASK_SUPPORT};
use baton_tests::{
    ORCH, SHOP, chat, scripted_config, scripted_config_with_forethought, start_endpoint, text_of,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

fn shopping_call(query: &str) -> Reply {
    Reply::text("Let me look.").tool_call(ASK_SHOPPING, json!({"query": query, "intent_count": 1})).into()
}

fn kinds_of(events: &[Event], agent: &str) -> Vec<&'static str> {
    events.iter().filter(|e| e.agent() == Some(agent)).map(Event::kind).collect()
}

fn tool_result(events: &[Event]) -> (&Value, bool) {
    events
        .iter()
        .find_map(|e| match e {
            Event::ToolResult { result, is_error, .. } => Some((&**result, *is_error)),
            _ => None,
        })
        .expect("a tool_result event")
}

#[tokio::test]
async fn the_shopping_tool_loop_streams_its_activity_to_the_client() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, shopping_call("coffee deals"));
    server.push(
        SHOP,
        Reply::parts(vec![Part::Reasoning("search first".into())])
            .tool_call("search_offers", json!({"query": "coffee", "max_results": 3})),
    );
    server.push(SHOP, Reply::text("Three coffee offers: off-0117, off-0215, off-0159."));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "coffee deals").await;

    let kinds = kinds_of(&events, "shopping[1]");
    for kind in
        ["reasoning", "tool_call_start", "tool_result", "tool_call_end", "text", "usage", "response_id"]
    {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(at("tool_call_start") < at("tool_result") && at("tool_result") < at("tool_call_end"));
    assert!(at("tool_call_end") < at("text"), "the answer follows the tool results");
    let (result, is_error) = tool_result(&events);
    assert!(!is_error);
    assert_eq!(result["offers"].as_array().unwrap().len(), 3);
    assert_eq!(text_of(&events, "shopping[1]"), "Three coffee offers: off-0117, off-0215, off-0159.");

    let requests = server.requests_for(SHOP);
    assert_eq!(requests.len(), 2);
    let names: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search_offers", "get_offer", "purchase_history"]);
    let tool_message = &requests[1].body["messages"][3];
    assert_eq!(tool_message["role"], "tool");
    let seen: Value = serde_json::from_str(tool_message["content"].as_str().unwrap()).unwrap();
    assert_eq!(&seen, result, "the model sees exactly what the client saw");
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })));
}

#[tokio::test]
async fn invalid_arguments_and_an_unknown_tool_are_results_the_model_sees() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, shopping_call("offer details"));
    server.push(
        SHOP,
        Reply::text("")
            .tool_call("get_offer", json!({"offer_id": 42}))
            .tool_call("buy_now", json!({"id": "x"})),
    );
    server.push(SHOP, Reply::text("I could not open that offer."));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let events = chat(&endpoint.url, "offer details").await;
    let errors: Vec<&Value> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { result, is_error: true, .. } => Some(&**result),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2);
    let second = &server.requests_for(SHOP)[1].body["messages"];
    let contents: Vec<Value> =
        (3..=4).map(|i| serde_json::from_str(second[i]["content"].as_str().unwrap()).unwrap()).collect();
    assert_eq!(contents[0]["error"]["code"], "invalid_arguments");
    assert!(contents[0]["error"]["message"].as_str().unwrap().contains("/offer_id"), "{contents:?}");
    assert_eq!(contents[1]["error"]["code"], "unknown_tool");
    assert_eq!(text_of(&events, "shopping[1]"), "I could not open that offer.");
    assert!(
        matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })),
        "no crash, no error status"
    );
}

#[tokio::test]
async fn on_the_responses_api_steps_and_turns_continue_by_previous_response_id() {
    let server = ScriptedServer::start().await.unwrap();
    let mut config = scripted_config(&server);
    config
        .config
        .apply_agent_defaults("shopping", AgentDefaults { responses_api: true, ..Default::default() });
    let endpoint = start_endpoint(&config).await;

    // Turn 1: a tool step, then the answer.
    server.push(ORCH, shopping_call("tea"));
    server.push(SHOP, Reply::text("").tool_call("search_offers", json!({"query": "tea"})));
    server.push(SHOP, Reply::text("Tea offers."));
    let body = json!({"message": "tea", "episode_id": "ep-7"});
    let events: Vec<Event> =
        baton_tests::open_stream(&endpoint.url, body).await.map(|r| r.event).collect().await;
    assert_eq!(text_of(&events, "shopping[1]"), "Tea offers.");
    // Turn 2, same episode.
    server.push(ORCH, shopping_call("cheaper ones?"));
    server.push(SHOP, Reply::text("Cheaper tea."));
    let body = json!({"message": "cheaper ones?", "episode_id": "ep-7"});
    let _: Vec<_> = baton_tests::open_stream(&endpoint.url, body).await.collect().await;

    let requests = server.requests();
    let shop: Vec<_> = requests.iter().enumerate().filter(|(_, r)| r.model == SHOP).collect();
    assert!(shop.iter().all(|(_, r)| r.api == Api::Responses));
    let (first_index, first) = shop[0];
    assert!(first.body.get("previous_response_id").is_none());
    assert_eq!(first.body["input"], json!([{"role": "user", "content": "tea"}]));
    // Step 2 continues step 1 and sends only the tool output.
    let (second_index, second) = shop[1];
    assert_eq!(second.body["previous_response_id"], format!("resp_{first_index}"));
    let input = second.body["input"].as_array().unwrap();
    assert_eq!(input.len(), 1);
    assert_eq!(input[0]["type"], "function_call_output");
    // The next turn continues the last answer of the episode with only the new message.
    let (_, third) = shop[2];
    assert_eq!(third.body["previous_response_id"], format!("resp_{second_index}"));
    assert_eq!(third.body["input"], json!([{"role": "user", "content": "cheaper ones?"}]));
    assert!(events.iter().any(
        |e| matches!(e, Event::ResponseId { agent, id } if agent == "shopping[1]" && id.starts_with("resp_"))
    ));
}

#[tokio::test]
async fn a_stored_response_the_server_lost_is_replaced_by_resending_the_turn() {
    let server = ScriptedServer::start().await.unwrap();
    let mut config = scripted_config(&server);
    config
        .config
        .apply_agent_defaults("shopping", AgentDefaults { responses_api: true, ..Default::default() });
    let endpoint = start_endpoint(&config).await;
    server.push(ORCH, shopping_call("tea")).push(SHOP, Reply::text("Tea."));
    let body = json!({"message": "tea", "episode_id": "ep-9"});
    let _: Vec<_> = baton_tests::open_stream(&endpoint.url, body.clone()).await.collect().await;
    server.push(ORCH, shopping_call("tea"));
    server.push(SHOP, Reply::status(400, "Previous response with id 'resp_1' not found."));
    server.push(SHOP, Reply::text("Tea again."));
    let events: Vec<Event> =
        baton_tests::open_stream(&endpoint.url, body).await.map(|r| r.event).collect().await;
    let shop = server.requests_for(SHOP);
    assert!(shop[1].body.get("previous_response_id").is_some());
    assert!(shop[2].body.get("previous_response_id").is_none(), "resent without it");
    // Resent with the stored history of the episode instead of the lost server-side context.
    assert_eq!(
        shop[2].body["input"],
        json!([
            {"role": "user", "content": "tea"},
            {"role": "assistant", "content": "Let me look."},
            {"role": "assistant", "content": "Tea."},
            {"role": "user", "content": "tea"},
        ])
    );
    assert_eq!(text_of(&events, "shopping[1]"), "Tea again.");
    assert!(!events.iter().any(|e| matches!(e, Event::Error { .. })), "{events:?}");
}

#[tokio::test]
async fn another_episode_starts_without_a_previous_response() {
    let server = ScriptedServer::start().await.unwrap();
    let mut config = scripted_config(&server);
    config
        .config
        .apply_agent_defaults("shopping", AgentDefaults { responses_api: true, ..Default::default() });
    let endpoint = start_endpoint(&config).await;
    for episode in ["ep-a", "ep-b"] {
        server.push(ORCH, shopping_call("tea"));
        server.push(SHOP, Reply::text("Tea."));
        let body = json!({"message": "tea", "episode_id": episode});
        let _: Vec<_> = baton_tests::open_stream(&endpoint.url, body).await.collect().await;
    }
    assert!(server.requests_for(SHOP).iter().all(|r| r.body.get("previous_response_id").is_none()));
}

const SUPPORT_QUERY: &str = "my receipt didn't scan";
const SUPPORT_ANSWER: &str = "Retake the photo in good light. It will be reviewed.";
const SHOP_QUERY: &str = "find me coffee deals";

fn history() -> Vec<Message> {
    vec![
        Message::user("where are my points from Tuesday?"),
        Message::assistant("Points from Tuesday's FreshMart receipt are under review."),
        Message::user("any tea offers?"),
        Message::assistant("Leaf & Kettle Green Tea: 300 points (off-0007)."),
    ]
}

async fn mixed_turn_requests(responses_api: bool) -> (Value, Value, Vec<Event>) {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    server.push(
        ORCH,
        Reply::text("Both at once.")
            .tool_call(ASK_SUPPORT, json!({"query": SUPPORT_QUERY, "intent_count": 2}))
            .tool_call(ASK_SHOPPING, json!({"query": SHOP_QUERY, "intent_count": 2})),
    );
    ft.push(FtReply::text(SUPPORT_ANSWER));
    // Shopping's first answer is held until support has finished, so its second request is made
    // when the whole support answer already exists in the turn.
    let gate = Arc::new(Semaphore::new(0));
    server.push(
        SHOP,
        Reply::text("").tool_call("search_offers", json!({"query": "coffee"})).gated(gate.clone()),
    );
    server.push(SHOP, Reply::text("Coffee offers."));
    let mut config = scripted_config_with_forethought(&server, &ft);
    config.config.apply_agent_defaults("shopping", AgentDefaults { responses_api, ..Default::default() });
    let orchestrator = baton::wiring::build(&config.config, config.backends(None).unwrap()).unwrap();
    let mut turn = TurnRequest::new("ep", "t2", "u", format!("{SUPPORT_QUERY} and {SHOP_QUERY}"));
    turn.history = history();
    let mut stream = orchestrator.run_turn(turn);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if matches!(&event, Event::AgentFinished { agent, .. } if agent == "support[1]") {
            gate.add_permits(1);
        }
        events.push(event);
    }
    assert_eq!(text_of(&events, "support[1]"), SUPPORT_ANSWER);
    let support_done =
        events.iter().position(|e| matches!(e, Event::AgentFinished { agent, .. } if agent == "support[1]"));
    let shop_text =
        events.iter().position(|e| matches!(e, Event::ToolCallStart { agent, .. } if agent == "shopping[1]"));
    assert!(support_done < shop_text, "shopping worked after support had answered");
    let shop: Vec<Value> = server.requests_for(SHOP).into_iter().map(|r| r.body).collect();
    assert_eq!(shop.len(), 2);
    (json!(shop), ft.requests()[0].body.clone(), events)
}

fn assert_no_support_content(shopping_requests: &Value) {
    let all = shopping_requests.to_string();
    assert!(!all.contains("receipt didn't scan"), "the support query reached shopping: {all}");
    assert!(!all.contains("Retake the photo"), "the support answer reached shopping: {all}");
}

#[tokio::test]
async fn in_a_mixed_turn_shopping_sees_history_and_its_part_but_no_support_content() {
    let (shop, support, _) = mixed_turn_requests(false).await;
    assert_no_support_content(&shop);
    let messages = shop[0]["messages"].as_array().unwrap();
    let texts: Vec<&str> = messages.iter().map(|m| m["content"].as_str().unwrap_or("")).collect();
    assert_eq!(
        &texts[1..],
        [
            "where are my points from Tuesday?",
            "Points from Tuesday's FreshMart receipt are under review.",
            "any tea offers?",
            "Leaf & Kettle Green Tea: 300 points (off-0007).",
            SHOP_QUERY,
        ],
        "cross-turn history, then only shopping's part of this turn"
    );
    // Support gets its query alone: no history, nothing of shopping's part.
    assert_eq!(support["query"], SUPPORT_QUERY);
    assert!(!support.to_string().contains("coffee") && !support.to_string().contains("tea offers"));
}

#[tokio::test]
async fn on_the_responses_api_a_mixed_turn_keeps_support_content_out_of_shopping_too() {
    let (shop, support, events) = mixed_turn_requests(true).await;
    assert_no_support_content(&shop);
    let input = shop[0]["input"].as_array().unwrap();
    assert_eq!(input.len(), 5, "history then shopping's query: {input:?}");
    assert_eq!(input[4], json!({"role": "user", "content": SHOP_QUERY}));
    assert_eq!(support["query"], SUPPORT_QUERY);
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })));
}
