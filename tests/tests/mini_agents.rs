//! Mini-agents through the real endpoint: SSE over loopback, the OpenAI client against the
//! scripted model server (decomposer, minis and aggregator each a real HTTP request), the turn
//! recorded in the embedded store.
//!
//! The lead's model is `lead`; its decomposer is `split` and its aggregator `join`, so each
//! role's requests are counted on their own. The minis use the lead's model; their concurrent
//! requests get their replies by what they ask (`ScriptedServer::push_when`).

use std::time::Duration;

use baton::event::{Event, MiniStatus, Status};
use baton::mini::INVALID_DECOMPOSITION_ANSWER;
use baton::model::scripted::{Part, Reply, ScriptedServer};
use baton::store::embedded::EmbeddedStore;
use baton::store::{EpisodeKey, Role, Store, SystemClock};
use baton_tests::{Endpoint, open_stream_as, scripted_config, start_endpoint_with, text_of};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;

/// A lead with two tools and mini-agents configured by `minis` (YAML flow mapping), or none.
fn team(minis: Option<&str>) -> String {
    let mut yaml = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Help the user.
    tools: [search_help_center, search_offers]
"
    .to_owned();
    if let Some(minis) = minis {
        yaml.push_str(&format!(
            "    mini_agent: {{decomposer_model: split, aggregator_model: join, {minis}}}\n"
        ));
    }
    yaml
}

struct Harness {
    server: ScriptedServer,
    endpoint: Endpoint,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Harness {
    async fn start(yaml: &str) -> Harness {
        let server = ScriptedServer::start().await.unwrap();
        let config = scripted_config(&server).with_yaml(yaml, "team.yaml").expect("the team is valid");
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap());
        let endpoint = start_endpoint_with(&config, store.clone()).await;
        Harness { server, endpoint, store, _dir: dir }
    }

    async fn chat(&self, message: &str) -> Vec<Event> {
        let body = json!({"message": message, "episode_id": "e1"});
        open_stream_as(&self.endpoint.url, "alice", body).await.map(|r| r.event).collect().await
    }

    /// The decomposer answers with these sub-tasks (`(id, description, allowed_tools)`).
    fn decompose(&self, tasks: &[(&str, &str, &[&str])]) {
        let sub_tasks: Vec<Value> = tasks
            .iter()
            .map(|(id, description, tools)| json!({"id": id, "description": description, "allowed_tools": tools}))
            .collect();
        let answer = json!({"should_fork": true, "sub_tasks": sub_tasks}).to_string();
        self.server.push("split", Reply::text(answer).usage(30, 20));
    }

    /// The parts the aggregator was sent in its `n`th request.
    fn aggregated_parts(&self, n: usize) -> Vec<Value> {
        let request = &self.server.requests_for("join")[n];
        let user =
            request.body["messages"].as_array().unwrap().iter().rfind(|m| m["role"] == "user").unwrap();
        let sent: Value = serde_json::from_str(user["content"].as_str().unwrap()).unwrap();
        sent["parts"].as_array().unwrap().clone()
    }

    /// The mini request (model `lead`) that asked `needle`, the `n`th such.
    fn mini_request(&self, needle: &str, n: usize) -> Value {
        self.server
            .requests_for("lead")
            .into_iter()
            .filter(|r| r.body.to_string().contains(needle))
            .nth(n)
            .unwrap_or_else(|| panic!("no request {n} asked {needle:?}"))
            .body
    }
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn status(events: &[Event]) -> Status {
    match events.last() {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event is {other:?}"),
    }
}

fn mini_events(events: &[Event]) -> Vec<&Event> {
    events.iter().filter(|e| e.kind().starts_with("mini_agent.")).collect()
}

fn finished(events: &[Event]) -> Vec<(String, MiniStatus, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::MiniAgentFinished { mini_id, status, error, .. } => {
                Some((mini_id.clone(), *status, error.clone()))
            }
            _ => None,
        })
        .collect()
}

fn text_speakers(events: &[Event]) -> Vec<&str> {
    let mut speakers: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Text { agent, .. } => Some(agent.as_str()),
            _ => None,
        })
        .collect();
    speakers.dedup();
    speakers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fork_the_decomposer_is_the_one_extra_call_and_the_loop_runs_as_usual() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: strict"))).await;
    h.server.push("split", Reply::text(r#"{"should_fork": false, "sub_tasks": []}"#));
    h.server.push("lead", Reply::text("").tool_call("search_help_center", json!({"query": "points"})));
    h.server.push("lead", Reply::text("Points take a day."));
    let events = h.chat("where are my points?").await;

    assert_eq!(h.server.requests_for("split").len(), 1, "one decomposer call");
    assert_eq!(h.server.requests_for("lead").len(), 2, "then the usual two steps");
    assert_eq!(h.server.requests().len(), 3, "and nothing else");
    let decomposer = &h.server.requests_for("split")[0].body;
    assert_eq!(decomposer["response_format"]["type"], "json_schema");
    assert_eq!(decomposer["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        decomposer["response_format"]["json_schema"]["schema"]["properties"]["sub_tasks"]["items"]["properties"]
            ["allowed_tools"]["items"]["enum"],
        json!(["search_help_center", "search_offers"])
    );
    assert_eq!(decomposer["tool_choice"], "none", "the decomposer reads the tools but calls none");
    assert!(mini_events(&events).is_empty());
    assert_eq!(text_of(&events, "lead"), "Points take a day.");
    assert_eq!(status(&events), Status::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_mini_agent_makes_no_extra_call() {
    let h = Harness::start(&team(None)).await;
    h.server.push("lead", Reply::text("").tool_call("search_help_center", json!({"query": "points"})));
    h.server.push("lead", Reply::text("Points take a day."));
    let events = h.chat("where are my points? and find me coffee deals").await;
    assert_eq!(h.server.requests().len(), 2, "exactly the loop's own calls");
    assert!(h.server.requests().iter().all(|r| r.body.get("response_format").is_none()));
    assert_eq!(text_of(&events, "lead"), "Points take a day.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decomposer_that_answers_invalid_json_leaves_the_agent_to_run_as_usual() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: strict"))).await;
    h.server.push("split", Reply::text("Sure! I would split this into two parts."));
    h.server.push("lead", Reply::text("Here you go."));
    let events = h.chat("where are my points? and find me coffee deals").await;
    assert_eq!(h.server.requests_for("lead").len(), 1);
    assert!(mini_events(&events).is_empty());
    assert_eq!(text_of(&events, "lead"), "Here you go.");
    assert_eq!(status(&events), Status::Ok, "a fan-out is an optimisation, never a reason to fail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_sub_tasks_than_max_minis_leaves_the_agent_to_run_as_usual() {
    let h = Harness::start(&team(Some("max_minis: 2, tool_allowlist_mode: parent_full"))).await;
    h.decompose(&[("1", "alpha", &[]), ("2", "beta", &[]), ("3", "gamma", &[])]);
    h.server.push("lead", Reply::text("All at once."));
    let events = h.chat("alpha, beta and gamma").await;
    assert!(mini_events(&events).is_empty(), "no mini ran");
    assert_eq!(h.server.requests_for("lead").len(), 1);
    assert_eq!(text_of(&events, "lead"), "All at once.");
}

/// Three minis answer after 300, 200 and 100 ms; the aggregator writes the answer.
async fn three_minis() -> (Harness, Vec<Event>) {
    let h = Harness::start(&team(Some("tool_allowlist_mode: parent_full"))).await;
    h.decompose(&[("a", "alpha part", &[]), ("b", "beta part", &[]), ("c", "gamma part", &[])]);
    for (needle, answer, ms) in [
        ("alpha part", "Alpha answer.", 300),
        ("beta part", "Beta answer.", 200),
        ("gamma part", "Gamma answer.", 100),
    ] {
        h.server.push_when("lead", needle, Reply::text(answer).first_byte_delay(Duration::from_millis(ms)));
    }
    h.server.push("join", Reply::text("Alpha, beta and gamma, answered.").usage(50, 9));
    let events = h.chat("alpha part, beta part and gamma part please").await;
    (h, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minis_run_at_once_and_reach_the_aggregator_in_sub_task_order() {
    let (h, events) = three_minis().await;
    // All three asked before any was answered: they ran at once, not one after another.
    let minis = h.server.requests_for("lead");
    assert_eq!(minis.len(), 3);
    let last_asked = minis.iter().map(|r| r.received_at).max().unwrap();
    let first_answered = minis.iter().filter_map(|r| r.first_byte_at).min().unwrap();
    assert!(last_asked < first_answered, "the minis overlapped");
    // Outcomes in sub-task order, whatever order they finished in (gamma first).
    let order: Vec<String> = finished(&events).into_iter().map(|(id, ..)| id).collect();
    assert_eq!(order, ["c", "b", "a"], "reported as they finish");
    let parts = h.aggregated_parts(0);
    let sent: Vec<(&str, &str, &str)> = parts
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["status"].as_str().unwrap(), p["answer"].as_str().unwrap()))
        .collect();
    assert_eq!(
        sent,
        [("a", "ok", "Alpha answer."), ("b", "ok", "Beta answer."), ("c", "ok", "Gamma answer.")]
    );
    // The synthesis is the lead's answer; no mini's tokens reached the client.
    assert_eq!(text_of(&events, "lead"), "Alpha, beta and gamma, answered.");
    assert_eq!(text_speakers(&events), ["lead"]);
    assert_eq!(status(&events), Status::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fan_out_reports_its_four_events_and_rolls_the_minis_usage_up_under_the_parent() {
    let (_h, events) = three_minis().await;
    let kinds: Vec<&str> = mini_events(&events).iter().map(|e| e.kind()).collect();
    assert_eq!(kinds[0], "mini_agent.decomposed");
    assert_eq!(kinds.iter().filter(|k| **k == "mini_agent.started").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "mini_agent.finished").count(), 3);
    assert_eq!(kinds.last(), Some(&"mini_agent.aggregated"));
    match mini_events(&events)[0] {
        Event::MiniAgentDecomposed { parent, count, sub_tasks } => {
            assert_eq!((parent.as_str(), *count), ("lead", 3));
            let ids: Vec<(&str, &str)> =
                sub_tasks.iter().map(|t| (t.id.as_str(), t.description.as_str())).collect();
            assert_eq!(ids, [("a", "alpha part"), ("b", "beta part"), ("c", "gamma part")]);
        }
        other => panic!("{other:?}"),
    }
    assert!(finished(&events).iter().all(|(_, s, e)| *s == MiniStatus::Ok && e.is_none()));
    let Some(Event::Completed { usage, .. }) = events.last() else { panic!() };
    let per: Vec<(&str, &str, u64, u64)> = usage
        .iter()
        .map(|u| (u.agent.as_str(), u.model.as_str(), u.usage.input_tokens, u.usage.output_tokens))
        .collect();
    assert_eq!(
        per,
        [("lead", "split", 30, 20), ("lead", "lead", 30, 15), ("lead", "join", 50, 9)],
        "decomposer, three minis (10 + 5 tokens each) and aggregator, all under the lead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_holds_the_synthesised_answer_only() {
    let (h, _events) = three_minis().await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let stored = h.store.recent_messages(&key, 100).await.unwrap();
    let assistant: Vec<(&str, &str)> = stored
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| (m.agent.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(assistant, [("lead", "Alpha, beta and gamma, answered.")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_refuses_a_tool_the_parent_lacks_and_runs_no_mini() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: strict"))).await;
    h.decompose(&[("1", "alpha", &["search_offers"]), ("2", "beta", &["teleport"])]);
    let events = h.chat("alpha and beta").await;
    assert!(h.server.requests_for("lead").is_empty(), "no mini was dispatched");
    assert!(h.server.requests_for("join").is_empty());
    assert!(mini_events(&events).is_empty());
    assert!(events.iter().any(|e| matches!(e, Event::Error { code, message, .. }
        if code == "mini_agent_invalid_decomposition" && message.contains("`teleport`"))));
    assert_eq!(text_of(&events, "lead"), INVALID_DECOMPOSITION_ANSWER);
    assert_eq!(status(&events), Status::Error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_refuses_a_sub_task_that_names_no_tool() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: strict"))).await;
    h.decompose(&[("1", "alpha", &["search_offers"]), ("2", "beta", &[])]);
    let events = h.chat("alpha and beta").await;
    assert!(h.server.requests_for("lead").is_empty(), "no mini was dispatched");
    assert!(events.iter().any(|e| matches!(e, Event::Error { code, message, .. }
        if code == "mini_agent_invalid_decomposition" && message.contains("`2` names no tool"))));
    assert_eq!(text_of(&events, "lead"), INVALID_DECOMPOSITION_ANSWER);
}

/// Two minis that answer at once; returns the tools each was offered.
async fn offered_tools(minis: &str, tasks: &[(&str, &str, &[&str])]) -> Vec<Vec<String>> {
    let h = Harness::start(&team(Some(minis))).await;
    h.decompose(tasks);
    for (_, description, _) in tasks {
        h.server.push_when("lead", description, Reply::text("Done."));
    }
    h.server.push("join", Reply::text("Both done."));
    let events = h.chat("alpha part and beta part").await;
    assert_eq!(text_of(&events, "lead"), "Both done.");
    tasks.iter().map(|(_, description, _)| tool_names(&h.mini_request(description, 0))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_minis_get_exactly_their_listed_tools() {
    let tools = offered_tools(
        "tool_allowlist_mode: strict",
        &[("1", "alpha part", &["search_offers"]), ("2", "beta part", &["search_help_center"])],
    )
    .await;
    assert_eq!(tools, [vec!["search_offers"], vec!["search_help_center"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_full_minis_get_the_whole_inventory_whatever_they_list() {
    let tools = offered_tools(
        "tool_allowlist_mode: parent_full",
        &[("1", "alpha part", &["search_offers"]), ("2", "beta part", &[])],
    )
    .await;
    let all = vec!["search_help_center", "search_offers"];
    assert_eq!(tools, [all.clone(), all]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inferred_gives_an_empty_list_the_whole_inventory_and_keeps_a_named_one() {
    let tools = offered_tools(
        "tool_allowlist_mode: inferred",
        &[("1", "alpha part", &["search_offers"]), ("2", "beta part", &[])],
    )
    .await;
    assert_eq!(tools, [vec!["search_offers"], vec!["search_help_center", "search_offers"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inferred_still_refuses_a_tool_the_parent_lacks() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: inferred"))).await;
    h.decompose(&[("1", "alpha", &[]), ("2", "beta", &["teleport"])]);
    let events = h.chat("alpha and beta").await;
    assert!(h.server.requests_for("lead").is_empty());
    assert_eq!(text_of(&events, "lead"), INVALID_DECOMPOSITION_ANSWER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mini_calling_a_tool_outside_its_list_gets_an_error_result() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: strict"))).await;
    h.decompose(&[("1", "alpha part", &["search_help_center"]), ("2", "beta part", &["search_offers"])]);
    h.server.push_when(
        "lead",
        "alpha part",
        Reply::text("").tool_call("search_offers", json!({"query": "x"})),
    );
    h.server.push_when("lead", "alpha part", Reply::text("I could not search offers."));
    h.server.push_when("lead", "beta part", Reply::text("Beta done."));
    h.server.push("join", Reply::text("Done."));
    h.chat("alpha part and beta part").await;
    let second = h.mini_request("alpha part", 1);
    let result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    let result: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["error"]["code"], "unknown_tool", "{result}");
    assert!(result["error"]["message"].as_str().unwrap().contains("available tools: search_help_center"));
    let parts = h.aggregated_parts(0);
    assert_eq!(parts[0]["answer"], "I could not search offers.", "the mini read the error and answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_and_a_failed_mini_are_reported_and_the_aggregator_says_so() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: parent_full, timeout_seconds: 0.5"))).await;
    h.decompose(&[("slow", "slow part", &[]), ("broken", "broken part", &[]), ("fine", "fine part", &[])]);
    h.server.push_when("lead", "slow part", Reply::Hang);
    h.server.push_when("lead", "broken part", Reply::parts(vec![Part::Error("the model fell over".into())]));
    h.server.push_when("lead", "fine part", Reply::text("Fine answer."));
    h.server.push("join", Reply::text("One part answered; two could not be."));
    let events = h.chat("slow part, broken part and fine part").await;

    let mut ends = finished(&events);
    ends.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(ends[0].0, "broken");
    assert_eq!(ends[0].1, MiniStatus::Failed);
    assert!(ends[0].2.as_deref().unwrap().contains("model_stream_error"), "{:?}", ends[0]);
    assert_eq!((ends[1].0.as_str(), ends[1].1, ends[1].2.is_none()), ("fine", MiniStatus::Ok, true));
    assert_eq!(ends[2].0, "slow");
    assert_eq!(ends[2].1, MiniStatus::Timeout);
    assert!(ends[2].2.as_deref().unwrap().contains("500 ms"), "{:?}", ends[2]);

    assert_eq!(h.server.requests_for("join").len(), 1, "the aggregator was called");
    let parts = h.aggregated_parts(0);
    let statuses: Vec<(&str, &str)> =
        parts.iter().map(|p| (p["id"].as_str().unwrap(), p["status"].as_str().unwrap())).collect();
    assert_eq!(statuses, [("slow", "timeout"), ("broken", "failed"), ("fine", "ok")]);
    assert_eq!(text_of(&events, "lead"), "One part answered; two could not be.");
    assert_eq!(status(&events), Status::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_mini_fails_the_answer_is_deterministic_and_no_synthesis_is_requested() {
    let h = Harness::start(&team(Some("tool_allowlist_mode: parent_full"))).await;
    h.decompose(&[("1", "alpha part", &[]), ("2", "beta part", &[])]);
    for needle in ["alpha part", "beta part"] {
        h.server.push_when("lead", needle, Reply::parts(vec![Part::Error("down".into())]));
    }
    let events = h.chat("alpha part and beta part").await;
    assert!(h.server.requests_for("join").is_empty(), "no synthesis request reached the server");
    assert_eq!(
        text_of(&events, "lead"),
        "Sorry, I couldn't answer any part of your request right now. Please try again.\n\
         - Not answered: \"alpha part\" (it failed).\n\
         - Not answered: \"beta part\" (it failed)."
    );
    assert!(events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "mini_agents_failed")));
    assert!(matches!(mini_events(&events).last(), Some(Event::MiniAgentAggregated { outcomes, .. })
        if outcomes.iter().all(|o| o.status == MiniStatus::Failed)));
    assert_eq!(status(&events), Status::Error);
}
