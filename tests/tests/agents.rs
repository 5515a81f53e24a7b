//! A team's own agents from a YAML file, through the real endpoint: SSE over loopback, the OpenAI
//! client against the scripted model server, and the turn recorded in both stores (embedded, and
//! DynamoDB on moto_server).

use baton::event::{Event, Status, Usage};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{Role, StoredMessage};
use baton_tests::stores::{StoreHarness, Team};
use baton_tests::text_of;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    a_team_turn_streams_its_instances_and_stores_usage_per_agent_name,
    two_routed_responses_api_agents_keep_separate_server_side_conversations,
);

/// Each agent has its own model on the scripted server, keyed by its name.
const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Lead the team.
    tools: [search_help_center]
    agents: [researcher, writer]
  - name: researcher
    model: researcher
    description: Finds facts.
    instruction: Research.
    output: text_and_events
  - name: writer
    model: writer
    instruction: Write.
    input_schema:
      type: object
      properties: {topic: {type: string}}
      required: [topic]
";

/// The tool results `model` was sent in its `n`th request, in order, parsed.
fn tool_results<H>(t: &Team<H>, model: &str, n: usize) -> Vec<Value> {
    t.server.requests_for(model)[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

fn completed(events: &[Event]) -> (Status, Vec<(String, Usage)>) {
    match events.last() {
        Some(Event::Completed { status, usage, .. }) => {
            (*status, usage.iter().map(|u| (u.agent.clone(), u.usage)).collect())
        }
        other => panic!("the last event is {other:?}"),
    }
}

async fn a_team_turn_streams_its_instances_and_stores_usage_per_agent_name<H: StoreHarness>() {
    let t = Team::<H>::start(TEAM).await;
    // One model turn: two researchers, an ordinary tool, a call that breaks the writer's input
    // schema, and an agent that does not exist.
    t.server.push(
        "lead",
        Reply::text("Asking around.")
            .tool_call("agent__researcher", json!({"text": "missing points"}))
            .tool_call("search_help_center", json!({"query": "missing points"}))
            .tool_call("agent__researcher", json!({"text": "late receipts"}))
            .tool_call("agent__writer", json!({"subject": "points"}))
            .tool_call("agent__editor", json!({"text": "proofread"}))
            .usage(10, 3),
    );
    t.server.push("researcher", Reply::text("Points take a day.").usage(4, 1));
    t.server.push("researcher", Reply::text("Receipts take a week.").usage(5, 2));
    t.server.push("lead", Reply::text("In short: wait a day.").usage(20, 5));
    let events = t.chat("why are my points missing?").await;

    let (status, usage) = completed(&events);
    assert_eq!(status, Status::Ok);
    assert_eq!(
        usage,
        [("lead".to_owned(), Usage::tokens(30, 8)), ("researcher".to_owned(), Usage::tokens(9, 3)),],
        "rolled up per agent name"
    );
    // Every event names its instance; the researchers' text streamed (text_and_events).
    let researchers = text_of(&events, "researcher[1]") + "|" + &text_of(&events, "researcher[2]");
    assert!(
        researchers == "Points take a day.|Receipts take a week."
            || researchers == "Receipts take a week.|Points take a day.",
        "{researchers}"
    );
    assert!(
        !events.iter().any(|e| e.agent().is_some_and(|a| a.starts_with("writer"))),
        "the writer never ran"
    );
    assert_eq!(text_of(&events, "lead"), "Asking around.In short: wait a day.");

    // The lead's model got every result back in call order, errors included.
    let results = tool_results(&t, "lead", 1);
    assert_eq!(results.len(), 5);
    let answers = [results[0]["answer"].as_str().unwrap(), results[2]["answer"].as_str().unwrap()];
    assert!(answers.contains(&"Points take a day.") && answers.contains(&"Receipts take a week."));
    assert_eq!(results[0]["shown_to_user"], true);
    assert_eq!(results[1]["articles"][0]["citation"], "help/missing-points");
    assert_eq!(results[3]["error"]["code"], "invalid_arguments");
    assert_eq!(results[4]["error"]["code"], "unknown_tool");
    // A researcher's session holds its input only, not the user's conversation.
    let sent = &t.server.requests_for("researcher")[0].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 2, "{sent}");

    // The store keeps each speaker's text and the usage rolled up per agent name.
    let stored = t.stored().await;
    let assistant: Vec<&StoredMessage> = stored.iter().filter(|m| m.role == Role::Assistant).collect();
    let speakers: Vec<&str> = assistant.iter().map(|m| m.agent.as_str()).collect();
    assert_eq!(speakers.first(), Some(&"lead"));
    assert_eq!(speakers.last(), Some(&"lead"));
    assert!(speakers.contains(&"researcher[1]") && speakers.contains(&"researcher[2]"), "{speakers:?}");
    let usage: Vec<(&str, &str, u64, u64)> = assistant
        .iter()
        .flat_map(|m| &m.usage)
        .map(|u| (u.agent.as_str(), u.model.as_str(), u.usage.input_tokens, u.usage.output_tokens))
        .collect();
    assert_eq!(usage, [("lead", "lead", 30, 8), ("researcher", "researcher", 9, 3)]);
}

/// Four agents, each calling the next.
fn chain(max_depth: u32) -> String {
    let mut yaml = format!("entry: level0\nmax_depth: {max_depth}\nagents:\n");
    for level in 0..4 {
        yaml.push_str(&format!(
            "  - name: level{level}\n    model: level{level}\n    instruction: Level {level}.\n"
        ));
        if level < 3 {
            yaml.push_str(&format!("    agents: [level{}]\n", level + 1));
        }
    }
    yaml
}

fn script_chain(server: &ScriptedServer) {
    for level in 0..3 {
        server.push(
            &format!("level{level}"),
            Reply::text("").tool_call(&format!("agent__level{}", level + 1), json!({"text": "go deeper"})),
        );
        server.push(&format!("level{level}"), Reply::text(format!("level {level} done")));
    }
    server.push("level3", Reply::text("the bottom"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_nest_three_levels_below_the_entry_agent() {
    let t = Team::<baton_tests::stores::Embedded>::start(&chain(3)).await;
    script_chain(&t.server);
    let events = t.chat("dig").await;
    assert_eq!(completed(&events).0, Status::Ok);
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::AgentStarted { agent, .. } => Some(agent.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["level0", "level1[1]", "level2[1]", "level3[1]"]);
    assert_eq!(tool_results(&t, "level2", 1), [json!({"answer": "the bottom"})]);
    assert_eq!(text_of(&events, "level0"), "level 0 done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_deeper_than_max_depth_is_refused_and_the_turn_still_answers() {
    let t = Team::<baton_tests::stores::Embedded>::start(&chain(2)).await;
    script_chain(&t.server);
    let events = t.chat("dig").await;
    assert_eq!(completed(&events).0, Status::Ok);
    let refused = events.iter().find_map(|e| match e {
        Event::ToolResult { agent, result, is_error: true, .. } if agent == "level2[1]" => {
            Some(result.clone())
        }
        _ => None,
    });
    let refused = refused.expect("level 2's call was refused");
    assert_eq!(refused["error"]["code"], "agent_depth_exceeded");
    assert!(refused["error"]["message"].as_str().unwrap().contains("at most 2 levels"), "{refused}");
    assert!(t.server.requests_for("level3").is_empty(), "level 3 never ran");
    assert_eq!(text_of(&events, "level0"), "level 0 done");
}

/// A team's own entry agent with the routing policy on: `desk` routes to `billing` (follow-ups,
/// categories) and `catalog` (the fallback).
const ROUTING_TEAM: &str = "\
entry: desk
agents:
  - name: desk
    model: desk
    instruction: Route the customer's requests.
    agents: [billing, catalog]
    routing:
      followup: billing
      fallback: catalog
      categories: [invoices, refunds]
  - name: billing
    model: billing
    description: Invoices and refunds.
    instruction: Answer billing questions.
    output: text_and_events
  - name: catalog
    model: catalog
    description: Products and prices.
    instruction: Answer product questions.
    output: text_and_events
";

/// The last user message a sub-agent's model was sent.
fn asked(t: &Team<baton_tests::stores::Embedded>, model: &str) -> String {
    let requests = t.server.requests_for(model);
    let request = requests.last().expect("the agent was called");
    let messages = request.body["messages"].as_array().unwrap();
    let user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    user["content"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_entry_agent_refuses_a_direct_answer_to_a_real_question_and_dispatches_it() {
    let t = Team::<baton_tests::stores::Embedded>::start(ROUTING_TEAM).await;
    // The model answers directly, and again when the routing asks it once more for a tool call.
    let direct = "Our lamps cost 40 dollars. The blue one is on sale.";
    t.server.push("desk", Reply::text(direct)).push("desk", Reply::text(direct));
    t.server.push("catalog", Reply::text("The blue lamp is 32 dollars this week."));
    let events = t.chat("how much is the blue lamp").await;
    assert_eq!(completed(&events).0, Status::Ok);
    // The refused answer shows its first sentence only; the fallback agent answers the question
    // in the user's own words.
    assert_eq!(text_of(&events, "desk"), "Our lamps cost 40 dollars.");
    assert_eq!(asked(&t, "catalog"), "how much is the blue lamp");
    assert_eq!(text_of(&events, "catalog[1]"), "The blue lamp is 32 dollars this week.");
    assert!(t.server.requests_for("billing").is_empty());
    assert_eq!(t.server.requests_for("desk").len(), 2, "one re-ask, then no further model call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_entry_agent_recovers_a_dropped_call_its_intent_count_reveals() {
    let t = Team::<baton_tests::stores::Embedded>::start(ROUTING_TEAM).await;
    let message = "where is my refund and how much is the blue lamp";
    t.server.push(
        "desk",
        Reply::text("Checking both.").tool_call(
            "ask_billing",
            json!({"query": "where is my refund", "intent_count": 2,
                                              "billing_category": "refunds"}),
        ),
    );
    t.server.push(
        "desk",
        Reply::text("")
            .tool_call("ask_catalog", json!({"query": "how much is the blue lamp", "intent_count": 2})),
    );
    t.server.push("billing", Reply::text("Your refund left yesterday."));
    t.server.push("catalog", Reply::text("The blue lamp is 32 dollars."));
    let events = t.chat(message).await;
    assert_eq!(completed(&events).0, Status::Ok);
    let reask = &t.server.requests_for("desk")[1].body;
    assert_eq!(reask["tool_choice"], "required", "the failsafe re-asks for the missing call");
    assert_eq!(asked(&t, "billing"), "where is my refund");
    assert_eq!(asked(&t, "catalog"), "how much is the blue lamp");
    assert_eq!(text_of(&events, "billing[1]"), "Your refund left yesterday.");
    assert_eq!(text_of(&events, "catalog[1]"), "The blue lamp is 32 dollars.");
    // The routing tools carry the policy's schema: billing's takes the configured categories,
    // under its own argument names (`<followup>_category`, `<followup>_summary` by default).
    let tools = t.server.requests_for("desk")[0].body["tools"].clone();
    let billing = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == "ask_billing").unwrap();
    let properties = &billing["function"]["parameters"]["properties"];
    assert_eq!(properties["billing_category"]["enum"], json!(["invoices", "refunds"]));
    assert!(properties["billing_summary"].is_object(), "{properties}");
    let catalog = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == "ask_catalog").unwrap();
    let keys: Vec<&str> = catalog["function"]["parameters"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["query", "prior_context", "intent_count"], "only the follow-up tool takes them");
}

/// A team names its follow-up tool's extra arguments in `routing:`; the model sees those names,
/// the guards check the category and cap the summary under them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_entry_agent_uses_the_argument_names_its_config_declares() {
    let team = ROUTING_TEAM.replace(
        "      categories: [invoices, refunds]\n",
        "      categories: [invoices, refunds]\n      category_argument: topic\n      summary_argument: gist\n",
    );
    let t = Team::<baton_tests::stores::Embedded>::start(&team).await;
    t.server.push(
        "desk",
        Reply::text("").tool_call(
            "ask_billing",
            json!({"query": "my invoice", "intent_count": 1, "topic": "invoices", "gist": "x".repeat(400)}),
        ),
    );
    t.server.push("billing", Reply::text("Here is your invoice."));
    let events = t.chat("my invoice").await;
    assert_eq!(completed(&events).0, Status::Ok);
    let tools = t.server.requests_for("desk")[0].body["tools"].clone();
    let billing = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == "ask_billing").unwrap();
    let properties = &billing["function"]["parameters"]["properties"];
    assert_eq!(properties["topic"]["enum"], json!(["invoices", "refunds"]));
    assert!(properties.get("billing_category").is_none(), "{properties}");
    let sent = events
        .iter()
        .find_map(|e| match e {
            Event::ToolCallStart { name, arguments, .. } if name == "ask_billing" => Some(arguments.clone()),
            _ => None,
        })
        .expect("billing was called");
    assert_eq!(sent["topic"], "invoices");
    assert_eq!(sent["gist"].as_str().unwrap().chars().count(), 300, "the declared summary is capped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_entry_agent_drops_a_category_outside_its_list() {
    let t = Team::<baton_tests::stores::Embedded>::start(ROUTING_TEAM).await;
    t.server.push(
        "desk",
        Reply::text("").tool_call(
            "ask_billing",
            json!({"query": "my invoice", "intent_count": 1, "billing_category": "shipping"}),
        ),
    );
    t.server.push("billing", Reply::text("Here is your invoice."));
    let events = t.chat("my invoice").await;
    assert_eq!(completed(&events).0, Status::Ok, "the call ran, without the invented category");
    let sent = events.iter().find_map(|e| match e {
        Event::ToolCallStart { name, arguments, .. } if name == "ask_billing" => Some(arguments.clone()),
        _ => None,
    });
    let sent = sent.expect("billing was called");
    assert!(sent.get("billing_category").is_none(), "{sent}");
    assert_eq!(text_of(&events, "billing[1]"), "Here is your invoice.");
}

/// [`ROUTING_TEAM`] with both routed agents on the Responses API.
fn responses_team() -> String {
    ROUTING_TEAM
        .replace("    model: billing\n", "    model: billing\n    api: responses\n")
        .replace("    model: catalog\n", "    model: catalog\n    api: responses\n")
}

/// The routing tool call `desk` makes for `query`.
fn routed(tool: &str, query: &str) -> Reply {
    Reply::text("").tool_call(tool, json!({"query": query, "intent_count": 1})).into()
}

/// Each routed agent continues its own last response in the episode: billing's next turn names
/// billing's response, never catalog's, though catalog answered in between.
async fn two_routed_responses_api_agents_keep_separate_server_side_conversations<H: StoreHarness>() {
    let t = Team::<H>::start(&responses_team()).await;
    let previous = |model: &str, n: usize| -> Option<String> {
        let requests = t.server.requests_for(model);
        requests[n].body.get("previous_response_id").and_then(Value::as_str).map(str::to_owned)
    };
    t.server.push("desk", routed("ask_billing", "my last invoice"));
    t.server.push("billing", Reply::text("Your invoice is paid."));
    t.chat("my last invoice").await;
    let billing_first = t.server.requests().iter().position(|r| r.model == "billing").unwrap();

    t.server.push("desk", routed("ask_catalog", "blue lamp price"));
    t.server.push("catalog", Reply::text("32 dollars."));
    t.chat("blue lamp price").await;
    assert_eq!(previous("catalog", 0), None, "catalog starts its own conversation, not billing's");
    let catalog_first = t.server.requests().iter().position(|r| r.model == "catalog").unwrap();

    t.server.push("desk", routed("ask_billing", "and the one before"));
    t.server.push("billing", Reply::text("Also paid."));
    t.chat("and the one before").await;
    assert_eq!(previous("billing", 1), Some(format!("resp_{billing_first}")));

    t.server.push("desk", routed("ask_catalog", "a red one"));
    t.server.push("catalog", Reply::text("30 dollars."));
    t.chat("a red one").await;
    assert_eq!(previous("catalog", 1), Some(format!("resp_{catalog_first}")));
}
