//! One chat turn (DESIGN.md §4): `thinking`, the orchestrator model call with the sub-agent tools,
//! the preamble streamed as it arrives, every tool call dispatched at once, the live-slot merge,
//! `support_content` at the support boundary, usage per agent, and `completed` last, always.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::agent::{Agent, AgentRequest, EventStream, instrument};
use crate::event::{AgentUsage, Event, Status};
use crate::model::{ChatModel, ChatRequest, Message, ModelDelta, ToolCall, ToolChoice, ToolSpec};
use crate::mux::{LiveSlotMux, MuxConfig};

/// Tool name of the support sub-agent.
pub const ASK_SUPPORT: &str = "ask_support";
/// Tool name of the shopping sub-agent.
pub const ASK_SHOPPING: &str = "ask_shopping";
/// The `agent` of the orchestrator's own events.
pub const ORCHESTRATOR: &str = "orchestrator";

/// The default orchestrator prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str = "\
<role>You are the orchestrator of a receipt-rewards app assistant. You do not answer account or \
shopping questions yourself: you route them to sub-agents by calling tools.</role>
<tools>
<tool name=\"ask_support\">Account and app help: receipts that did not scan, missing or rejected \
points, e-receipts, rewards, card, point pass, referrals, profile.</tool>
<tool name=\"ask_shopping\">Finding offers, products and deals; purchase history.</tool>
</tools>
<rules>
<rule>Before calling tools, write one short sentence telling the user what you are about to do.</rule>
<rule>A message with several intents gets one call per intent, all in the same answer. Set \
intent_count on every call to the number of intents in the message.</rule>
<rule>Pass the user's own words as the query.</rule>
<rule>Answer greetings, thanks and chitchat directly in one sentence, with no tool call.</rule>
</rules>";

/// Support categories offered to the orchestrator model.
pub const DEFAULT_SUPPORT_CATEGORIES: &[&str] = &[
    "missing_points",
    "e_receipts",
    "rejected_receipts",
    "rewards",
    "shop",
    "play",
    "card",
    "point_pass",
    "referrals",
    "profile",
    "general",
];

/// The two sub-agent tools offered to the orchestrator model.
pub fn tool_specs(support_categories: &[String]) -> Vec<ToolSpec> {
    let intent_count = json!({"type": "integer", "minimum": 1,
        "description": "How many separate intents the user's message has (one call per intent)."});
    let prior_context = json!({"type": "string",
        "description": "Context from earlier turns the sub-agent needs, when the user switches topic."});
    vec![
        ToolSpec {
            name: ASK_SUPPORT.into(),
            description:
                "Ask the support agent about the user's account, receipts, points, rewards or app problems."
                    .into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "The user's support question, in their words."},
                "support_category": {"type": "string", "enum": support_categories},
                "support_summary": {"type": "string", "maxLength": 300,
                    "description": "One-line summary of the support issue."},
                "prior_context": prior_context,
                "intent_count": intent_count,
            }, "required": ["query", "intent_count"]}),
        },
        ToolSpec {
            name: ASK_SHOPPING.into(),
            description:
                "Ask the shopping agent to find offers, products and deals, or look at purchase history."
                    .into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "The user's shopping request, in their words."},
                "prior_context": prior_context,
                "intent_count": intent_count,
            }, "required": ["query", "intent_count"]}),
        },
    ]
}

/// Settings of a turn.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// The orchestrator prompt.
    pub system_prompt: String,
    /// Support categories for `ask_support`.
    pub support_categories: Vec<String>,
    /// Merge pacing.
    pub mux: MuxConfig,
}

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            support_categories: DEFAULT_SUPPORT_CATEGORIES.iter().map(|s| s.to_string()).collect(),
            mux: MuxConfig::default(),
        }
    }
}

/// One user message to answer.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// The conversation.
    pub episode_id: String,
    /// This turn.
    pub turn_id: String,
    /// The authenticated user.
    pub user_id: String,
    /// What the user said.
    pub message: String,
    /// Earlier turns, oldest first.
    pub history: Vec<Message>,
}

/// Runs chat turns: one orchestrator model and its sub-agents.
pub struct Orchestrator {
    model: Arc<dyn ChatModel>,
    support: Arc<dyn Agent>,
    shopping: Arc<dyn Agent>,
    config: TurnConfig,
    tools: Vec<ToolSpec>,
}

/// A sub-agent call decided by the orchestrator model.
struct Dispatch {
    agent: Arc<dyn Agent>,
    instance: String,
    request: AgentRequest,
    is_support: bool,
}

impl Orchestrator {
    /// An orchestrator over `model` with the two sub-agents.
    pub fn new(
        model: Arc<dyn ChatModel>,
        support: Arc<dyn Agent>,
        shopping: Arc<dyn Agent>,
        config: TurnConfig,
    ) -> Orchestrator {
        let tools = tool_specs(&config.support_categories);
        Orchestrator { model, support, shopping, config, tools }
    }

    /// The orchestrator model's name.
    pub fn model_name(&self) -> &str {
        self.model.model_name()
    }

    /// Runs one turn. The stream always ends with `completed` unless it is dropped first; dropping
    /// it cancels the model call and every sub-agent.
    pub fn run_turn(self: &Arc<Self>, turn: TurnRequest) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let started = Instant::now();
            yield Event::Thinking {};
            let model_name = this.model.model_name().to_owned();
            let mut usage: Vec<AgentUsage> = Vec::new();
            let mut status = Status::Ok;

            let mut messages = vec![Message::system(this.config.system_prompt.clone())];
            messages.extend(turn.history.iter().cloned());
            messages.push(Message::user(turn.message.clone()));
            let request = ChatRequest {
                messages,
                tools: this.tools.clone(),
                tool_choice: Some(ToolChoice::Auto),
                parallel_tool_calls: Some(true),
                max_tokens: None,
            };
            let mut deltas = this.model.stream(request);
            let mut calls: Vec<ToolCall> = Vec::new();
            let mut answered = false;
            while let Some(delta) = deltas.next().await {
                match delta {
                    Ok(ModelDelta::Text(text)) => {
                        answered |= !text.trim().is_empty();
                        yield Event::text(ORCHESTRATOR, text);
                    }
                    Ok(ModelDelta::Reasoning(text)) => yield Event::Reasoning { agent: ORCHESTRATOR.into(), text },
                    Ok(ModelDelta::ResponseId(id)) => yield Event::ResponseId { agent: ORCHESTRATOR.into(), id },
                    Ok(ModelDelta::ToolCall(call)) => calls.push(call),
                    Ok(ModelDelta::Usage(u)) => {
                        usage.push(AgentUsage { agent: ORCHESTRATOR.into(), model: model_name.clone(), usage: u });
                        yield Event::Usage { agent: ORCHESTRATOR.into(), model: model_name.clone(), usage: u };
                    }
                    Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::Finish(_)) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "orchestrator model call failed");
                        yield Event::error(ORCHESTRATOR, e.code(), e.to_string(), e.is_retryable());
                        status = Status::Error;
                        break;
                    }
                }
            }
            drop(deltas);

            if status == Status::Ok && calls.is_empty() && !answered {
                yield Event::error(ORCHESTRATOR, "empty_model_answer",
                    "the orchestrator model answered with neither text nor a tool call", true);
                status = Status::Error;
            }
            if status == Status::Ok && !calls.is_empty() {
                let (dispatches, problems) = this.plan(&turn, calls);
                for problem in problems {
                    yield problem;
                }
                let mixed = dispatches.iter().any(|d| d.is_support) && dispatches.iter().any(|d| !d.is_support);
                let streams: Vec<EventStream> = dispatches
                    .into_iter()
                    .map(|d| {
                        let query = d.request.query.clone();
                        let mut events = d.agent.run(d.request, d.instance.clone());
                        if mixed && d.is_support {
                            let boundary = Event::SupportContent { agent: d.instance.clone() };
                            events = Box::pin(events.chain(futures::stream::once(async move { boundary })));
                        }
                        instrument(d.instance, query, events)
                    })
                    .collect();
                let mut merged = LiveSlotMux::new(streams, this.config.mux);
                while let Some(event) = merged.next().await {
                    match &event {
                        Event::Usage { agent, model, usage: u } => {
                            usage.push(AgentUsage { agent: agent.clone(), model: model.clone(), usage: *u });
                        }
                        Event::AgentFinished { status: s, .. } => status = status.worst(*s),
                        _ => {}
                    }
                    yield event;
                }
            }
            yield Event::Completed {
                episode_id: turn.episode_id,
                turn_id: turn.turn_id,
                status,
                model: model_name,
                duration_ms: started.elapsed().as_millis() as u64,
                usage,
            };
        })
    }

    /// Turns the model's tool calls into sub-agent dispatches. Unknown tools become `error`
    /// events; unreadable arguments fall back to the user's own words.
    fn plan(&self, turn: &TurnRequest, calls: Vec<ToolCall>) -> (Vec<Dispatch>, Vec<Event>) {
        let mut counts: HashMap<&'static str, usize> = HashMap::new();
        let mut dispatches = Vec::new();
        let mut problems = Vec::new();
        for call in calls {
            let (agent, is_support, kind) = match call.name.as_str() {
                ASK_SUPPORT => (self.support.clone(), true, "support"),
                ASK_SHOPPING => (self.shopping.clone(), false, "shopping"),
                other => {
                    tracing::warn!(tool = other, "orchestrator model called an unknown tool");
                    problems.push(Event::error(
                        ORCHESTRATOR,
                        "unknown_tool",
                        format!(
                            "the orchestrator model called an unknown tool `{other}`; the call was skipped"
                        ),
                        false,
                    ));
                    continue;
                }
            };
            let arguments = call.parse_arguments().unwrap_or_else(|e| {
                tracing::warn!(tool = %call.name, error = %e, "invalid tool arguments; using the user's words");
                Value::Object(Default::default())
            });
            let query = arguments
                .get("query")
                .and_then(Value::as_str)
                .filter(|q| !q.trim().is_empty())
                .unwrap_or(&turn.message)
                .to_owned();
            let prior_context = arguments.get("prior_context").and_then(Value::as_str).map(str::to_owned);
            let n = counts.entry(kind).or_default();
            *n += 1;
            dispatches.push(Dispatch {
                instance: format!("{}[{n}]", agent.name()),
                agent,
                is_support,
                request: AgentRequest {
                    user_id: turn.user_id.clone(),
                    episode_id: turn.episode_id.clone(),
                    query,
                    prior_context,
                    history: turn.history.clone(),
                    arguments,
                },
            });
        }
        (dispatches, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ModelAgent;
    use crate::model::scripted::{Reply, ScriptedModel};
    use std::time::Duration;

    fn turn(message: &str) -> TurnRequest {
        TurnRequest {
            episode_id: "ep".into(),
            turn_id: "t1".into(),
            user_id: "u".into(),
            message: message.into(),
            history: vec![],
        }
    }

    fn setup(orchestrator: Reply, support: Reply, shopping: Reply) -> Arc<Orchestrator> {
        let as_stream = |r: Reply| match r {
            Reply::Stream(s) => s,
            other => panic!("in-process scripts are streams, got {other:?}"),
        };
        let model = Arc::new(ScriptedModel::new("orch", Some(as_stream(orchestrator))));
        let support = Arc::new(ModelAgent::new(
            "support",
            "s",
            Arc::new(ScriptedModel::new("sup", Some(as_stream(support)))),
        ));
        let shopping = Arc::new(ModelAgent::new(
            "shopping",
            "p",
            Arc::new(ScriptedModel::new("shop", Some(as_stream(shopping)))),
        ));
        Arc::new(Orchestrator::new(model, support, shopping, TurnConfig::default()))
    }

    fn mixed_calls() -> Reply {
        Reply::text("On it.")
            .tool_call(ASK_SUPPORT, json!({"query": "receipt", "intent_count": 2}))
            .tool_call(ASK_SHOPPING, json!({"query": "coffee", "intent_count": 2}))
            .into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_mixed_turn_takes_the_max_not_the_sum_of_its_sub_agents() {
        // Each sub-agent's model sends 13 deltas (id, 10 words, finish, usage) 100 ms apart:
        // 1.2 s each.
        let words = "a b c d e f g h i j";
        let o = setup(
            mixed_calls(),
            Reply::text(words).chunk_delay(Duration::from_millis(100)).into(),
            Reply::text(words).chunk_delay(Duration::from_millis(100)).into(),
        );
        let started = Instant::now();
        let events: Vec<Event> = o.run_turn(turn("my receipt and coffee")).collect().await;
        let took = started.elapsed();
        assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })));
        // The sum would be 2.4 s; the max is 1.2 s, plus at most the 300 ms flush budget.
        assert!(took >= Duration::from_millis(1_200), "{took:?}");
        assert!(took <= Duration::from_millis(1_500), "{took:?}");
    }

    #[tokio::test]
    async fn thinking_comes_first_and_completed_last_with_usage_per_agent() {
        let o = setup(
            mixed_calls(),
            Reply::text("help").usage(3, 1).into(),
            Reply::text("deals").usage(5, 2).into(),
        );
        let events: Vec<Event> = o.run_turn(turn("my receipt and coffee")).collect().await;
        assert_eq!(events.first(), Some(&Event::Thinking {}));
        let Some(Event::Completed { status, usage, model, .. }) = events.last() else { panic!("{events:?}") };
        assert_eq!(*status, Status::Ok);
        assert_eq!(model, "orch");
        let agents: Vec<&str> = usage.iter().map(|u| u.agent.as_str()).collect();
        assert!(
            agents.contains(&"orchestrator")
                && agents.contains(&"support[1]")
                && agents.contains(&"shopping[1]")
        );
    }

    #[tokio::test]
    async fn support_boundary_follows_support_text_in_a_mixed_turn_only() {
        let o = setup(mixed_calls(), Reply::text("help").into(), Reply::text("deals").into());
        let events: Vec<Event> = o.run_turn(turn("x")).collect().await;
        let boundary = events.iter().position(|e| matches!(e, Event::SupportContent { .. })).unwrap();
        let last_support_text = events
            .iter()
            .rposition(|e| matches!(e, Event::Text { agent, .. } if agent == "support[1]"))
            .unwrap();
        assert!(boundary > last_support_text);

        let single = setup(
            Reply::text("").tool_call(ASK_SUPPORT, json!({"query": "q", "intent_count": 1})).into(),
            Reply::text("help").into(),
            Reply::text("unused").into(),
        );
        let events: Vec<Event> = single.run_turn(turn("x")).collect().await;
        assert!(!events.iter().any(|e| matches!(e, Event::SupportContent { .. })));
    }

    #[tokio::test]
    async fn unknown_tool_is_reported_and_the_rest_still_runs() {
        let o = setup(
            Reply::text("")
                .tool_call("ask_weather", json!({"query": "rain"}))
                .tool_call(ASK_SHOPPING, json!({"query": "coffee", "intent_count": 1}))
                .into(),
            Reply::text("unused").into(),
            Reply::text("deals").into(),
        );
        let events: Vec<Event> = o.run_turn(turn("x")).collect().await;
        assert!(events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "unknown_tool")));
        assert!(events.iter().any(|e| matches!(e, Event::Text { agent, .. } if agent == "shopping[1]")));
    }

    #[tokio::test]
    async fn invalid_arguments_fall_back_to_the_user_message() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        let mut script = Reply::text("");
        script.parts.push(crate::model::scripted::Part::ToolCall {
            name: ASK_SHOPPING.into(),
            arguments: json!(null),
        });
        model.push(script);
        let shop_model = Arc::new(ScriptedModel::new("shop", Some(Reply::text("ok"))));
        let shopping = Arc::new(ModelAgent::new("shopping", "p", shop_model.clone()));
        let support = Arc::new(ModelAgent::new("support", "s", Arc::new(ScriptedModel::new("sup", None))));
        let o = Arc::new(Orchestrator::new(model, support, shopping, TurnConfig::default()));
        let _: Vec<Event> = o.run_turn(turn("find me tea")).collect().await;
        assert_eq!(shop_model.requests()[0].last_user_text(), "find me tea");
    }
}
