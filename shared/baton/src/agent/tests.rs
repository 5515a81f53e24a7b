use super::instance::instrument_for;
use super::step::DEFAULT_MAX_CALLS_PER_STEP;
use super::*;
use crate::event::Usage;
use crate::event::{Event, Status};
use crate::model::scripted::{Part, Reply, ScriptedModel};
use crate::model::{ChatRequest, Message, ToolChoice};
use crate::tool::testing::FnTool;
use crate::tool::{Tool, ToolError};
use crate::tool::{ToolContext, ToolRegistry};
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// Sleeps `ms` (paused time in tests), then answers with its arguments.
pub(crate) fn wait() -> Arc<dyn Tool> {
    let parameters = json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}},
                            "required": ["ms"], "additionalProperties": false});
    FnTool::new("wait", "Waits, then echoes.", parameters, |arguments, context| async move {
        tokio::time::sleep(Duration::from_millis(arguments["ms"].as_u64().unwrap_or(0))).await;
        Ok(json!({"waited": arguments["ms"], "user": context.user_id}))
    })
}

fn llm_agent(model: Arc<ScriptedModel>, max_steps: usize) -> LlmAgent {
    let tools = Arc::new(ToolRegistry::new(vec![wait()]).unwrap());
    let limits = LoopLimits { max_steps, tool_timeout: Duration::from_millis(500), ..LoopLimits::default() };
    LlmAgent::new("shopping", "use tools", model, tools, limits)
}

async fn run_llm(agent: &LlmAgent, history: Vec<Message>) -> Vec<Event> {
    let request = AgentRequest {
        user_id: "u1".into(),
        episode_id: "e1".into(),
        query: "go".into(),
        history,
        ..Default::default()
    };
    agent.run(request, "shopping[1]".into()).collect().await
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::kind).collect()
}

fn tool_messages(request: &ChatRequest) -> Vec<Value> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(serde_json::from_str(content).unwrap()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn tool_results_go_back_to_the_model_which_then_answers() {
    let model = Arc::new(ScriptedModel::new("m", None));
    model.push(Reply::text("Checking.").tool_call("wait", json!({"ms": 1})));
    model.push(Reply::text("Done."));
    let events = run_llm(&llm_agent(model.clone(), 4), vec![]).await;
    let k = kinds(&events);
    let start = k.iter().position(|k| *k == "tool_call_start").unwrap();
    let result = k.iter().position(|k| *k == "tool_result").unwrap();
    let end = k.iter().position(|k| *k == "tool_call_end").unwrap();
    assert!(start < result && result < end, "{k:?}");
    assert!(matches!(&events[result], Event::ToolResult { is_error: false, result, .. }
        if **result == json!({"waited": 1, "user": "u1"})));
    assert!(matches!(events.last(), Some(Event::Usage { .. })), "{k:?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(tool_messages(&requests[1]), [json!({"waited": 1, "user": "u1"})]);
    assert!(
        matches!(&requests[1].messages[2], Message::Assistant { tool_calls, .. } if tool_calls.len() == 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_steps_tool_calls_run_concurrently_and_results_keep_call_order() {
    let model = Arc::new(ScriptedModel::new("m", None));
    model.push(Reply::text("").tool_call("wait", json!({"ms": 300})).tool_call("wait", json!({"ms": 100})));
    model.push(Reply::text("Done."));
    let started = Instant::now();
    let events = run_llm(&llm_agent(model.clone(), 4), vec![]).await;
    assert_eq!(started.elapsed(), Duration::from_millis(300), "the max, not the sum");
    let finished: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallEnd { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(finished, ["call_1", "call_0"], "reported as they finish");
    let waited: Vec<Value> =
        tool_messages(&model.requests()[1]).iter().map(|r| r["waited"].clone()).collect();
    assert_eq!(waited, [json!(300), json!(100)], "given back in call order");
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_become_error_results_the_model_sees() {
    let model = Arc::new(ScriptedModel::new("m", None));
    model.push(
        Reply::text("").tool_call("wait", json!({"ms": "soon"})).tool_call("teleport", json!({"to": "moon"})),
    );
    model.push(Reply::text("Sorry, I could not do that."));
    let events = run_llm(&llm_agent(model.clone(), 4), vec![]).await;
    let errors: Vec<&Value> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { result, is_error: true, .. } => Some(&**result),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2);
    let seen = tool_messages(&model.requests()[1]);
    assert_eq!(seen[0]["error"]["code"], "invalid_arguments");
    assert_eq!(seen[1]["error"]["code"], "unknown_tool");
    assert!(!events.iter().any(|e| matches!(e, Event::Error { .. })), "the run itself did not fail");
}

#[tokio::test(start_paused = true)]
async fn calls_past_the_per_step_cap_get_an_error_result_and_the_rest_run() {
    let model = Arc::new(ScriptedModel::new("m", None));
    let mut fifty = Reply::text("");
    for _ in 0..50 {
        fifty = fifty.tool_call("wait", json!({"ms": 10}));
    }
    model.push(fifty);
    model.push(Reply::text("Done."));
    let events = run_llm(&llm_agent(model.clone(), 4), vec![]).await;
    let results = tool_messages(&model.requests()[1]);
    assert_eq!(results.len(), 50, "every call gets a result, in call order");
    let ran = results.iter().filter(|r| r.get("waited").is_some()).count();
    let refused: Vec<&Value> = results.iter().filter(|r| r["error"]["code"] == "too_many_calls").collect();
    assert_eq!((ran, refused.len()), (DEFAULT_MAX_CALLS_PER_STEP, 50 - DEFAULT_MAX_CALLS_PER_STEP));
    assert!(results[..DEFAULT_MAX_CALLS_PER_STEP].iter().all(|r| r.get("waited").is_some()));
    assert!(refused[0]["error"]["message"].as_str().unwrap().contains("at most 16"), "{}", refused[0]);
    assert_eq!(events.iter().filter(|e| matches!(e, Event::ToolCallEnd { .. })).count(), 50);
}

/// An agent that waits 100 ms, counting how many of its instances run at once.
struct Counting {
    running: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

impl Agent for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn run(&self, _: AgentRequest, instance: String) -> EventStream {
        use std::sync::atomic::Ordering::SeqCst;
        let (running, most) = (self.running.clone(), self.most.clone());
        Box::pin(async_stream::stream! {
            let now = running.fetch_add(1, SeqCst) + 1;
            most.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            running.fetch_sub(1, SeqCst);
            yield Event::text(instance, "done");
        })
    }
}

/// A child instance of `agent` for `parent`, with the default options.
fn start_counting(agent: &Counting, parent: &ToolContext) -> EventStream {
    let started =
        start_child(agent, "agent__counting", parent, ChildInput::default(), &InstanceOptions::default());
    started.expect("within the depth limit").1
}

#[tokio::test(start_paused = true)]
async fn a_turn_runs_at_most_eight_child_instances_at_once_and_the_rest_wait() {
    use std::sync::atomic::Ordering::SeqCst;
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let agent = Counting { running: Arc::default(), most: most.clone() };
    let parent = ToolContext::default();
    let started = Instant::now();
    let runs: Vec<EventStream> = (0..20).map(|_| start_counting(&agent, &parent)).collect();
    let events: Vec<Event> = futures::stream::select_all(runs).collect().await;
    assert_eq!(most.load(SeqCst), crate::tool::MAX_CONCURRENT_INSTANCES);
    assert_eq!(events.iter().filter(|e| matches!(e, Event::Text { .. })).count(), 20, "all ran");
    assert_eq!(started.elapsed(), Duration::from_millis(300), "three waves of at most eight");
}

#[tokio::test(start_paused = true)]
async fn an_instance_gives_its_place_back_when_its_events_end_not_when_they_are_dropped() {
    let agent = Counting { running: Arc::default(), most: Arc::default() };
    let parent = ToolContext::default();
    let mut first: Vec<EventStream> =
        (0..crate::tool::MAX_CONCURRENT_INSTANCES).map(|_| start_counting(&agent, &parent)).collect();
    let last = start_counting(&agent, &parent);
    // The first eight run to their end and are kept, as a merge may keep a finished source.
    let mut ends = futures::stream::FuturesUnordered::new();
    for events in &mut first {
        ends.push(async move { while events.next().await.is_some() {} });
    }
    while ends.next().await.is_some() {}
    drop(ends);
    let ninth = tokio::time::timeout(Duration::from_secs(1), last.collect::<Vec<Event>>()).await;
    assert!(ninth.is_ok(), "the ninth instance got a place while the first eight were still held");
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_timeout_is_an_error_result() {
    let model = Arc::new(ScriptedModel::new("m", None));
    model.push(Reply::text("").tool_call("wait", json!({"ms": 60_000})));
    model.push(Reply::text("It took too long."));
    run_llm(&llm_agent(model.clone(), 4), vec![]).await;
    assert_eq!(tool_messages(&model.requests()[1])[0]["error"]["code"], "tool_timeout");
}

#[tokio::test]
async fn the_last_step_offers_no_tools_and_a_model_that_insists_is_stopped() {
    let model = Arc::new(ScriptedModel::new("m", Some(Reply::text("").tool_call("wait", json!({"ms": 0})))));
    let events = run_llm(&llm_agent(model.clone(), 3), vec![]).await;
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].tool_choice, Some(ToolChoice::Auto));
    assert_eq!(requests[2].tool_choice, Some(ToolChoice::None));
    assert!(events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "max_steps_exceeded")));
    assert!(matches!(events.last(), Some(Event::Text { text, .. }) if text == APOLOGY));
}

#[tokio::test]
async fn cross_turn_history_reaches_a_model_without_server_side_state() {
    let model = Arc::new(ScriptedModel::new("m", Some(Reply::text("ok"))));
    let history = vec![Message::user("earlier question"), Message::assistant("earlier answer")];
    run_llm(&llm_agent(model.clone(), 2), history.clone()).await;
    let sent = &model.requests()[0].messages;
    assert_eq!(&sent[1..3], &history[..]);
    assert_eq!(sent[3], Message::user("go"));
}

#[tokio::test]
async fn model_agent_streams_text_and_usage_under_its_instance_name() {
    let model = Arc::new(ScriptedModel::new("m", Some(Reply::text("two words").usage(7, 2))));
    let agent = crate::routing::testing::plain("support", model.clone());
    let events: Vec<Event> = instrument_for(
        "support[1]".into(),
        "q".into(),
        agent.run(AgentRequest { query: "q".into(), ..Default::default() }, "support[1]".into()),
        None,
    )
    .collect()
    .await;
    assert!(matches!(&events[0], Event::AgentStarted { agent, .. } if agent == "support[1]"));
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "two words");
    assert!(events.iter().all(|e| e.agent().is_none_or(|a| a == "support[1]")));
    match events.last().unwrap() {
        Event::AgentFinished { status, usage, .. } => {
            assert_eq!(*status, Status::Ok);
            assert_eq!(*usage, Usage::tokens(7, 2));
        }
        other => panic!("last event {other:?}"),
    }
    assert_eq!(model.requests()[0].system_text(), "You are support.");
}

#[tokio::test]
async fn model_failure_becomes_error_event_and_apology() {
    let model = Arc::new(ScriptedModel::new("m", Some(Reply::parts(vec![Part::Error("boom".into())]))));
    let agent = crate::routing::testing::plain("shopping", model);
    let events: Vec<Event> = instrument_for(
        "shopping[1]".into(),
        "q".into(),
        agent.run(AgentRequest::default(), "shopping[1]".into()),
        None,
    )
    .collect()
    .await;
    assert!(events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "model_stream_error")));
    assert!(events.iter().any(|e| matches!(e, Event::Text { text, .. } if text.contains("Sorry"))));
    assert!(matches!(events.last(), Some(Event::AgentFinished { status: Status::Error, .. })));
}

/// A tool whose items stream one progress event and end without a result (a broken tool).
struct NoResult;

#[async_trait::async_trait]
impl Tool for NoResult {
    fn name(&self) -> &str {
        "no_result"
    }
    fn description(&self) -> &str {
        "Streams, then stops."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<Value, ToolError> {
        Ok(json!({}))
    }
    fn start(
        self: Arc<Self>,
        _: Value,
        context: ToolContext,
        _: crate::tool::CallOptions,
    ) -> crate::tool::ToolRun {
        let progress = Event::ToolCallProgress {
            agent: context.call.agent,
            call_id: context.call.call_id,
            name: "no_result".into(),
            progress: 1.0,
            total: None,
            message: None,
        };
        crate::tool::ToolRun { items: Box::pin(futures::stream::iter([crate::agent::Item::Event(progress)])) }
    }
}

#[tokio::test]
async fn a_call_whose_items_end_without_a_result_is_a_failed_result_after_its_events() {
    let model = Arc::new(ScriptedModel::new("m", None));
    model.push(Reply::text("").tool_call("no_result", json!({})));
    model.push(Reply::text("It broke."));
    let tools = Arc::new(ToolRegistry::new(vec![Arc::new(NoResult)]).unwrap());
    let agent = LlmAgent::new("shopping", "use tools", model.clone(), tools, LoopLimits::default());
    let events = run_llm(&agent, vec![]).await;
    let k = kinds(&events);
    let progress = k.iter().position(|k| *k == "tool_call_progress").unwrap();
    let result = k.iter().position(|k| *k == "tool_result").unwrap();
    let end = k.iter().position(|k| *k == "tool_call_end").unwrap();
    assert!(progress < result && result < end, "{k:?}");
    let sent = &tool_messages(&model.requests()[1])[0];
    assert_eq!(sent["error"]["code"], "tool_failed", "{sent}");
    assert!(sent["error"]["message"].as_str().unwrap().contains("ended without a result"), "{sent}");
}
