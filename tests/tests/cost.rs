//! Cost per agent through the real endpoint: SSE over loopback, the Chat Completions and
//! Responses clients against the scripted model server (which reports cached and reasoning
//! tokens as OpenAI does), prices from the YAML file, and the turn stored in both stores
//! (embedded, and DynamoDB on moto_server).

use baton::event::{Event, Usd};
use baton::model::scripted::Reply;
use baton::store::{Role, StoredMessage};
use baton_tests::stores::{StoreHarness, Team};
use serde_json::json;

baton_tests::for_both_stores!(
    a_two_agent_turn_costs_exactly_its_tokens_at_list_price,
    an_agent_whose_model_has_no_price_gets_no_cost_anywhere
);

/// A lead on Chat Completions and a helper on the Responses API, each with its own price; the
/// `mystery` agent's model has none.
const TEAM: &str = "\
prices:
  as_of: \"2026-06-21\"
  models:
    lead-model: {input: 0.40, cached_input: 0.10, output: 1.60}
    helper-model: {input: 2, output: 8, reasoning: 10}
entry: lead
agents:
  - name: lead
    model: lead-model
    instruction: Lead.
    agents: [helper, mystery]
  - name: helper
    model: helper-model
    api: responses
    instruction: Help.
    output: text_and_events
  - name: mystery
    model: mystery-model
    instruction: Unpriced.
    output: text_and_events
";

fn usd(text: &str) -> Option<Usd> {
    Some(text.parse().unwrap())
}

/// `(agent, own cost, agent_total cost)` of every `usage` event, in order.
fn usage_costs(events: &[Event]) -> Vec<(String, Option<Usd>, Option<Usd>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Usage { agent, usage, agent_total, .. } => {
                Some((agent.clone(), usage.cost_usd, agent_total.as_ref().and_then(|t| t.cost_usd)))
            }
            _ => None,
        })
        .collect()
}

/// `(agent, cost)` of `completed`'s usage.
fn completed_costs(events: &[Event]) -> Vec<(String, Option<Usd>)> {
    match events.last() {
        Some(Event::Completed { usage, .. }) => {
            usage.iter().map(|u| (u.agent.clone(), u.usage.cost_usd)).collect()
        }
        other => panic!("the last event is {other:?}"),
    }
}

/// `(agent name, cost)` of the usage stored with the assistant messages.
fn stored_costs(stored: &[StoredMessage]) -> Vec<(String, Option<Usd>)> {
    stored
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.usage.iter().map(|u| (u.agent.clone(), u.usage.cost_usd)))
        .collect()
}

async fn a_two_agent_turn_costs_exactly_its_tokens_at_list_price<H: StoreHarness>() {
    let t = Team::<H>::start(TEAM).await;
    // lead, first call: 600 × 0.40 + 400 × 0.10 + 50 × 1.60 = 360 µ$.
    t.server.push(
        "lead-model",
        Reply::text("")
            .tool_call("agent__helper", json!({"text": "first"}))
            .tool_call("agent__helper", json!({"text": "second"}))
            .usage(1_000, 50)
            .cached_and_reasoning(400, 0),
    );
    // helper[1]: 300 × 2 + 40 × 8 + 60 × 10 = 1 520 µ$; helper[2]: 200 × 2 + 10 × 8 = 480 µ$.
    // The Responses API carries cached and reasoning tokens in its own fields.
    t.server.push("helper-model", Reply::text("One.").usage(300, 100).cached_and_reasoning(0, 60));
    t.server.push("helper-model", Reply::text("Two.").usage(200, 10));
    // lead, second call: 501 × 0.40 + 1 000 × 0.10 + 20 × 1.60 = 332.4 µ$ (a tenth of a µ$ kept).
    t.server.push("lead-model", Reply::text("Done.").usage(1_501, 20).cached_and_reasoning(1_000, 0));
    let events = t.chat("help twice").await;

    let usage = usage_costs(&events);
    let lead: Vec<_> =
        usage.iter().filter(|(a, ..)| a == "lead").map(|(_, own, total)| (*own, *total)).collect();
    assert_eq!(
        lead,
        [(usd("0.00036"), usd("0.00036")), (usd("0.0003324"), usd("0.0006924"))],
        "each lead call and its running total"
    );
    let mut helper: Vec<_> =
        usage.iter().filter(|(a, ..)| a.starts_with("helper[")).map(|(_, own, _)| *own).collect();
    helper.sort();
    assert_eq!(helper, [usd("0.00048"), usd("0.00152")], "each helper call");
    let last_helper_total = usage.iter().rev().find(|(a, ..)| a.starts_with("helper[")).unwrap().2;
    assert_eq!(last_helper_total, usd("0.002"), "the helpers' roll-up");

    let expected = [("lead".to_owned(), usd("0.0006924")), ("helper".to_owned(), usd("0.002"))];
    let mut completed = completed_costs(&events);
    completed.sort();
    let mut want = expected.to_vec();
    want.sort();
    assert_eq!(completed, want, "completed carries the roll-up");
    let mut stored = stored_costs(&t.stored().await);
    stored.sort();
    assert_eq!(stored, want, "the stored messages carry the same costs");

    // On the wire the cost is a decimal string, never a float.
    let wire = serde_json::to_value(events.last().unwrap()).unwrap();
    let lead_wire = wire["usage"].as_array().unwrap().iter().find(|u| u["agent"] == "lead").unwrap();
    assert_eq!(lead_wire["cost_usd"], "0.0006924");
    assert_eq!(lead_wire["cached_input_tokens"], 1_400);
}

async fn an_agent_whose_model_has_no_price_gets_no_cost_anywhere<H: StoreHarness>() {
    let t = Team::<H>::start(TEAM).await;
    // lead: 2 × (10 × 0.40 + 1 × 1.60) = 11.2 µ$.
    t.server
        .push("lead-model", Reply::text("").tool_call("agent__mystery", json!({"text": "q"})).usage(10, 1));
    t.server.push("mystery-model", Reply::text("Unknown.").usage(7, 3));
    t.server.push("lead-model", Reply::text("Done.").usage(10, 1));
    let events = t.chat("ask the mystery agent").await;

    let mystery: Vec<_> =
        usage_costs(&events).into_iter().filter(|(a, ..)| a.starts_with("mystery[")).collect();
    assert_eq!(mystery, [("mystery[1]".to_owned(), None, None)]);
    let completed = completed_costs(&events);
    assert!(completed.contains(&("mystery".to_owned(), None)), "{completed:?}");
    assert!(completed.contains(&("lead".to_owned(), usd("0.0000112"))), "{completed:?}");
    assert!(stored_costs(&t.stored().await).contains(&("mystery".to_owned(), None)));
    let wire = serde_json::to_string(events.last().unwrap()).unwrap();
    assert_eq!(wire.matches("cost_usd").count(), 1, "only lead's entry has a cost: {wire}");
}
