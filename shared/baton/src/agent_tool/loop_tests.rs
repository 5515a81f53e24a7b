//! Agent tools inside a tool loop, on in-process scripted models: instances, sessions, batches,
//! failures, skip-summarization, schemas, nesting, timeouts, output modes and the usage roll-up.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::agent::tests::wait;
use crate::agent::{AgentRequest, LlmAgent, LoopLimits, instrument_for};
use crate::event::{Status, Usage};
use crate::model::scripted::{Part, Reply, ScriptedModel};
use crate::model::{ChatRequest, Message};
use crate::orchestrator::{Orchestrator, TurnRequest};
use crate::tool::testing::FnTool;
use crate::tool::{Instances, SessionState, ToolRegistry};

/// Returns the session state as it was, then sets `note` to `set` when given.
fn state_tool() -> Arc<dyn Tool> {
    let parameters = json!({"type": "object", "properties": {"set": {"type": "string"}}});
    FnTool::new(
        "state",
        "Reads the session state; sets `note`.",
        parameters,
        |arguments, context| async move {
            let before = Value::Object(context.state.snapshot());
            if let Some(note) = arguments["set"].as_str() {
                context.state.set("note", json!(note));
            }
            Ok(before)
        },
    )
}

fn model(name: &str) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(name, None))
}

fn answering(name: &str, text: &str) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(name, Some(Reply::text(text).usage(10, 2))))
}

fn agent(name: &str, model: Arc<ScriptedModel>, tools: Vec<Arc<dyn Tool>>) -> Arc<dyn Agent> {
    let limits = LoopLimits { max_steps: 4, tool_timeout: Duration::from_secs(5), ..LoopLimits::default() };
    Arc::new(LlmAgent::new(
        name,
        format!("you are {name}"),
        model,
        Arc::new(ToolRegistry::new(tools).unwrap()),
        limits,
    ))
}

fn tool(child: Arc<dyn Agent>, options: AgentToolOptions) -> Arc<dyn Tool> {
    Arc::new(AgentTool::new(child, options).unwrap())
}

fn opts() -> AgentToolOptions {
    AgentToolOptions::default()
}

async fn run(agent: &Arc<dyn Agent>, state: Value) -> Vec<Event> {
    let request = AgentRequest {
        user_id: "u1".into(),
        episode_id: "e1".into(),
        query: "go".into(),
        state: state.as_object().cloned().unwrap_or_default(),
        instances: Instances::default(),
        ..Default::default()
    };
    let name = agent.name().to_owned();
    instrument_for(name.clone(), "go".into(), agent.run(request, name), None).collect().await
}

/// The tool results the model saw in its request, in order.
fn results(request: &ChatRequest) -> Vec<Value> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(serde_json::from_str(content).unwrap()),
            _ => None,
        })
        .collect()
}

fn texts(events: &[Event]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in events {
        if let Event::Text { agent, text } = e {
            match out.last_mut() {
                Some((a, t)) if a == agent => t.push_str(text),
                _ => out.push((agent.clone(), text.clone())),
            }
        }
    }
    out
}

fn agents_seen(events: &[Event]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in events {
        if let Some(a) = e.agent() {
            if !seen.iter().any(|s| s == a) {
                seen.push(a.to_owned());
            }
        }
    }
    seen
}

#[tokio::test]
async fn every_call_is_a_numbered_instance_and_every_event_names_it() {
    let child = agent("helper", answering("h", "done"), vec![]);
    let parent_model = model("p");
    parent_model.push(
        Reply::text("")
            .tool_call("agent__helper", json!({"text": "one"}))
            .tool_call("agent__helper", json!({"text": "two"})),
    );
    parent_model.push(Reply::text("").tool_call("agent__helper", json!({"text": "three"})));
    parent_model.push(Reply::text("All done."));
    let parent = agent("lead", parent_model.clone(), vec![tool(child, opts())]);
    let events = run(&parent, json!({})).await;
    assert_eq!(agents_seen(&events), ["lead", "helper[1]", "helper[2]", "helper[3]"]);
    let started: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::AgentStarted { agent, query } => Some((agent.as_str(), query.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(started, [("lead", "go"), ("helper[1]", "one"), ("helper[2]", "two"), ("helper[3]", "three")]);
    // Output `events` (the default): the children's text stays off the client; the parent read it.
    assert_eq!(texts(&events), [("lead".to_owned(), "All done.".to_owned())]);
    assert_eq!(results(&parent_model.requests()[1]), [json!({"answer": "done"}), json!({"answer": "done"})]);
}

#[tokio::test]
async fn a_child_session_copies_the_callers_state_without_internal_keys_and_keeps_its_writes() {
    let writer_model = model("w");
    writer_model.push(Reply::text("").tool_call("state", json!({"set": "mine"})));
    writer_model.push(Reply::text("").tool_call("state", json!({})));
    writer_model.push(Reply::text("written"));
    let writer = agent("writer", writer_model.clone(), vec![state_tool()]);
    let reader_model = model("r");
    reader_model.push(Reply::text("").tool_call("state", json!({})));
    reader_model.push(Reply::text("read"));
    let reader = agent("reader", reader_model.clone(), vec![state_tool()]);
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__writer", json!({"text": "write"})));
    parent_model.push(Reply::text("").tool_call("agent__reader", json!({"text": "read"})));
    parent_model.push(Reply::text("").tool_call("state", json!({})));
    parent_model.push(Reply::text("ok"));
    let parent =
        agent("lead", parent_model.clone(), vec![tool(writer, opts()), tool(reader, opts()), state_tool()]);
    run(&parent, json!({"tier": "gold", "_scratch": 1})).await;
    let writer_seen = results(&writer_model.requests()[2]);
    assert_eq!(writer_seen[0], json!({"tier": "gold"}), "copied without the internal key");
    assert_eq!(
        writer_seen[1],
        json!({"tier": "gold", "note": "mine"}),
        "its own writes persist in its session"
    );
    assert_eq!(results(&reader_model.requests()[1])[0], json!({"tier": "gold"}), "a sibling never sees them");
    let parent_seen = results(&parent_model.requests()[3]);
    assert_eq!(parent_seen[2], json!({"tier": "gold", "_scratch": 1}), "nor does the caller");
    // Isolated sessions: a child gets no conversation, only its input.
    let first = &writer_model.requests()[0].messages;
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(first[1], Message::user("write"));
}

#[tokio::test(start_paused = true)]
async fn agent_and_ordinary_tools_in_one_batch_run_at_once_and_return_in_call_order() {
    let slow = agent(
        "slow",
        Arc::new(ScriptedModel::new(
            "s",
            Some(Reply::text("a b c d").chunk_delay(Duration::from_millis(100))),
        )),
        vec![],
    );
    let parent_model = model("p");
    parent_model.push(
        Reply::text("")
            .tool_call("agent__slow", json!({"text": "take your time"}))
            .tool_call("wait", json!({"ms": 200})),
    );
    parent_model.push(Reply::text("Both back."));
    let parent = agent("lead", parent_model.clone(), vec![tool(slow, opts()), wait()]);
    let started = Instant::now();
    let events = run(&parent, json!({})).await;
    // The child streams 7 deltas 100 ms apart (600 ms); the tool takes 200 ms: the max, not the sum.
    assert_eq!(started.elapsed(), Duration::from_millis(600));
    let ended: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallEnd { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ended, ["wait", "agent__slow"], "reported as they finish");
    let seen = results(&parent_model.requests()[1]);
    assert_eq!(
        seen,
        [json!({"answer": "a b c d"}), json!({"waited": 200, "user": "u1"})],
        "given back in call order"
    );
}

#[tokio::test]
async fn unknown_tools_and_failing_children_are_error_results_and_siblings_finish() {
    let broken = agent(
        "broken",
        Arc::new(ScriptedModel::new("b", Some(Reply::parts(vec![Part::Error("boom".into())])))),
        vec![],
    );
    let fine = agent("fine", answering("f", "fine answer"), vec![]);
    let parent_model = model("p");
    parent_model.push(
        Reply::text("")
            .tool_call("agent__broken", json!({"text": "x"}))
            .tool_call("agent__nobody", json!({"text": "y"}))
            .tool_call("agent__fine", json!({"text": "z"})),
    );
    parent_model.push(Reply::text("Partly answered."));
    let parent = agent("lead", parent_model.clone(), vec![tool(broken, opts()), tool(fine, opts())]);
    let events = run(&parent, json!({})).await;
    let seen = results(&parent_model.requests()[1]);
    assert_eq!(seen[0]["error"]["code"], "tool_failed");
    assert!(seen[0]["error"]["message"].as_str().unwrap().contains("boom"), "{seen:?}");
    assert_eq!(seen[1]["error"]["code"], "unknown_tool");
    assert!(seen[1]["error"]["message"].as_str().unwrap().contains("agent__fine"), "lists the real tools");
    assert_eq!(seen[2], json!({"answer": "fine answer"}));
    assert!(events.iter().any(
        |e| matches!(e, Event::AgentFinished { agent, status: Status::Error, .. } if agent == "broken[1]")
    ));
    assert!(
        matches!(events.last(), Some(Event::AgentFinished { agent, status: Status::Ok, .. }) if agent == "lead")
    );
    assert_eq!(texts(&events).last().unwrap().1, "Partly answered.");
}

#[tokio::test]
async fn skip_summarization_gives_the_childs_answer_as_is_with_no_further_parent_call() {
    for output in [OutputMode::TextAndEvents, OutputMode::Events] {
        let child = agent("deals", answering("d", "Three coffee offers."), vec![]);
        let parent_model = model("p");
        parent_model.push(Reply::text("").tool_call("agent__deals", json!({"text": "coffee"})));
        let options = AgentToolOptions { skip_summarization: true, output, ..opts() };
        let parent = agent("lead", parent_model.clone(), vec![tool(child, options)]);
        let events = run(&parent, json!({})).await;
        assert_eq!(parent_model.requests().len(), 1, "no summarizing call ({output:?})");
        let expected = match output {
            // The user read it as it streamed; the parent adds nothing.
            OutputMode::TextAndEvents => ("deals[1]", "Three coffee offers."),
            // The parent hands it on, word for word.
            _ => ("lead", "Three coffee offers."),
        };
        assert_eq!(texts(&events), [(expected.0.to_owned(), expected.1.to_owned())], "{output:?}");
        assert!(matches!(events.last(), Some(Event::AgentFinished { status: Status::Ok, .. })));
    }
}

#[tokio::test]
async fn a_failed_skip_summarization_child_goes_back_to_the_parent_model() {
    let child = agent(
        "deals",
        Arc::new(ScriptedModel::new("d", Some(Reply::parts(vec![Part::Error("down".into())])))),
        vec![],
    );
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__deals", json!({"text": "coffee"})));
    parent_model.push(Reply::text("Deals are unavailable right now."));
    let options = AgentToolOptions { skip_summarization: true, ..opts() };
    let parent = agent("lead", parent_model.clone(), vec![tool(child, options)]);
    let events = run(&parent, json!({})).await;
    assert_eq!(parent_model.requests().len(), 2);
    assert_eq!(texts(&events).last().unwrap().1, "Deals are unavailable right now.");
}

#[tokio::test]
async fn input_schemas_are_checked_before_the_child_runs() {
    let child_model = answering("c", "sunny");
    let child = agent("weather", child_model.clone(), vec![]);
    let options = AgentToolOptions {
        input_schema: Some(json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false})),
        ..opts()
    };
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__weather", json!({"town": "Oslo"})));
    parent_model.push(Reply::text("").tool_call("agent__weather", json!({"city": "Oslo"})));
    parent_model.push(Reply::text("Sunny in Oslo."));
    let parent = agent("lead", parent_model.clone(), vec![tool(child, options)]);
    let events = run(&parent, json!({})).await;
    let first = results(&parent_model.requests()[1]);
    assert_eq!(first[0]["error"]["code"], "invalid_arguments");
    let message = first[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("city") && message.contains("town"), "{message}");
    assert_eq!(child_model.requests().len(), 1, "the bad call never reached the child");
    assert_eq!(child_model.requests()[0].last_user_text(), r#"{"city":"Oslo"}"#);
    assert_eq!(agents_seen(&events), ["lead", "weather[1]"], "only the valid call is an instance");
}

#[tokio::test]
async fn output_schemas_are_checked_and_the_json_is_the_result() {
    let schema =
        json!({"type": "object", "required": ["score"], "properties": {"score": {"type": "integer"}}});
    let child_model = model("c");
    child_model.push(Reply::text("```json\n{\"score\": 4}\n```"));
    child_model.push(Reply::text("I'd say four."));
    let child = agent("judge", child_model, vec![]);
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__judge", json!({"text": "rate it"})));
    parent_model.push(Reply::text("").tool_call("agent__judge", json!({"text": "again"})));
    parent_model.push(Reply::text("Scored."));
    let options = AgentToolOptions { output_schema: Some(schema), ..opts() };
    let parent = agent("lead", parent_model.clone(), vec![tool(child, options)]);
    run(&parent, json!({})).await;
    assert_eq!(results(&parent_model.requests()[1]), [json!({"score": 4})]);
    let second = results(&parent_model.requests()[2]);
    assert_eq!(second[1]["error"]["code"], "invalid_agent_output");
    assert!(second[1]["error"]["message"].as_str().unwrap().contains("not JSON"), "{second:?}");
}

/// `levels` agents, each calling the next, the last answering `deepest`; every level with
/// `max_depth`.
fn chain(max_depth: u32) -> (Arc<dyn Agent>, Vec<Arc<ScriptedModel>>) {
    let deepest = answering("l3", "from level three");
    let mut models = vec![deepest.clone()];
    let mut below = agent("level3", deepest, vec![]);
    for level in [2, 1, 0] {
        let m = model(&format!("l{level}"));
        let child = format!("agent__level{}", level + 1);
        m.push(Reply::text("").tool_call(&child, json!({"text": format!("ask level {}", level + 1)})));
        // Summarizes whatever came back: the answer, or the error.
        m.push(Reply::text(format!("level {level} relayed")));
        let options = AgentToolOptions { max_depth, ..opts() };
        below = agent(&format!("level{level}"), m.clone(), vec![tool(below, options)]);
        models.push(m);
    }
    models.reverse();
    (below, models)
}

#[tokio::test]
async fn agents_nest_three_levels_deep() {
    let (top, models) = chain(3);
    let events = run(&top, json!({})).await;
    assert_eq!(agents_seen(&events), ["level0", "level1[1]", "level2[1]", "level3[1]"]);
    let depth_of_three = results(&models[2].requests()[1]);
    assert_eq!(depth_of_three, [json!({"answer": "from level three"})]);
    assert_eq!(results(&models[0].requests()[1]), [json!({"answer": "level 1 relayed"})]);
    assert!(matches!(events.last(), Some(Event::AgentFinished { status: Status::Ok, .. })));
}

#[tokio::test]
async fn a_call_past_the_depth_limit_is_refused_with_a_clear_error() {
    let (top, models) = chain(2);
    let events = run(&top, json!({})).await;
    assert!(!agents_seen(&events).iter().any(|a| a == "level3[1]"), "level 3 never started");
    let refused = results(&models[2].requests()[1]);
    assert_eq!(refused[0]["error"]["code"], "agent_depth_exceeded");
    assert!(refused[0]["error"]["message"].as_str().unwrap().contains("at most 2 levels"), "{refused:?}");
    assert!(models[3].requests().is_empty());
    assert!(
        matches!(events.last(), Some(Event::AgentFinished { status: Status::Ok, .. })),
        "the turn goes on"
    );
}

#[tokio::test(start_paused = true)]
async fn a_child_past_its_timeout_is_stopped_and_becomes_an_error_result() {
    let slow = agent(
        "slow",
        Arc::new(ScriptedModel::new(
            "s",
            Some(Reply::text("never ends").first_byte_delay(Duration::from_secs(60))),
        )),
        vec![],
    );
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__slow", json!({"text": "x"})));
    parent_model.push(Reply::text("It took too long."));
    let options = AgentToolOptions {
        timeout: Some(Duration::from_secs(2)),
        output: OutputMode::TextAndEvents,
        ..opts()
    };
    let parent = agent("lead", parent_model.clone(), vec![tool(slow, options)]);
    let started = Instant::now();
    let events = run(&parent, json!({})).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(results(&parent_model.requests()[1])[0]["error"]["code"], "tool_timeout");
    assert!(events.iter().any(
        |e| matches!(e, Event::Error { agent, code, .. } if agent == "slow[1]" && code == "agent_timeout")
    ));
}

#[tokio::test]
async fn output_none_lets_only_usage_through() {
    let child = agent("quiet", answering("q", "hidden"), vec![]);
    let parent_model = model("p");
    parent_model.push(Reply::text("").tool_call("agent__quiet", json!({"text": "x"})));
    parent_model.push(Reply::text("ok"));
    let options = AgentToolOptions { output: OutputMode::None, ..opts() };
    let parent = agent("lead", parent_model.clone(), vec![tool(child, options)]);
    let events = run(&parent, json!({})).await;
    let from_child: Vec<&str> =
        events.iter().filter(|e| e.agent() == Some("quiet[1]")).map(Event::kind).collect();
    assert_eq!(from_child, ["usage"]);
    assert_eq!(results(&parent_model.requests()[1]), [json!({"answer": "hidden"})]);
}

#[tokio::test]
async fn a_turn_rolls_usage_up_per_agent_name() {
    let child = agent("helper", answering("h", "done"), vec![]);
    let parent_model = model("p");
    parent_model.push(
        Reply::text("")
            .tool_call("agent__helper", json!({"text": "one"}))
            .tool_call("agent__helper", json!({"text": "two"}))
            .usage(5, 1),
    );
    parent_model.push(Reply::text("ok").usage(7, 1));
    let parent = agent("lead", parent_model, vec![tool(child, opts())]);
    let orchestrator = Arc::new(Orchestrator::new(parent, "p"));
    let events: Vec<Event> = orchestrator.run_turn(TurnRequest::new("e1", "t1", "u1", "hi")).collect().await;
    let Some(Event::Completed { usage, status, model, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!((*status, model.as_str()), (Status::Ok, "p"));
    let by_name: Vec<(&str, Usage)> = usage.iter().map(|u| (u.agent.as_str(), u.usage)).collect();
    assert_eq!(by_name, [("lead", Usage::tokens(12, 2)), ("helper", Usage::tokens(20, 4))]);
    let helper_totals: Vec<Usage> = events
        .iter()
        .filter_map(|e| match e {
            Event::Usage { agent, agent_total, .. } if agent.starts_with("helper[") => {
                agent_total.as_deref().copied()
            }
            _ => None,
        })
        .collect();
    assert_eq!(helper_totals.last(), Some(&Usage::tokens(20, 4)), "{helper_totals:?}");
}

#[test]
fn session_state_copies_for_children_leave_internal_keys_out() {
    let state = SessionState::new(json!({"a": 1, "_b": 2}).as_object().unwrap().clone());
    assert_eq!(Value::Object(state.for_child()), json!({"a": 1}));
}
