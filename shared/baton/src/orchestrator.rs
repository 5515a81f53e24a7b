//! One chat turn (DESIGN.md §4): `thinking`, routing (the orchestrator model call with the
//! sub-agent tools, the preamble streamed as it arrives, failsafe and guards: see
//! [`crate::routing`]), every call dispatched at once, the live-slot merge, `support_content` at
//! the support boundary, usage per agent, and `completed` last, always.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use crate::agent::{Agent, AgentRequest, EventStream, instrument};
use crate::event::{AgentUsage, Event, Status};
use crate::guard::PlannedCall;
pub use crate::guard::{PreviousTurn, PriorReply};
use crate::model::{ChatModel, Message, ToolSpec};
use crate::mux::{LiveSlotMux, MuxConfig};
use crate::routing::{RouteStep, Router};

/// Tool name of the support sub-agent.
pub const ASK_SUPPORT: &str = "ask_support";
/// Tool name of the shopping sub-agent.
pub const ASK_SHOPPING: &str = "ask_shopping";
/// The `agent` of the orchestrator's own events.
pub const ORCHESTRATOR: &str = "orchestrator";

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
    /// The reference configuration's turn settings (`config/baton.yaml`).
    fn default() -> Self {
        crate::config::Config::default().turn
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
    /// The previous turn's message and replies by agent, for the routing guards.
    pub previous: Option<PreviousTurn>,
    /// A description of an attached image, if any.
    pub image_description: Option<String>,
}

impl TurnRequest {
    /// A turn with no history.
    pub fn new(
        episode_id: impl Into<String>,
        turn_id: impl Into<String>,
        user_id: impl Into<String>,
        message: impl Into<String>,
    ) -> TurnRequest {
        TurnRequest {
            episode_id: episode_id.into(),
            turn_id: turn_id.into(),
            user_id: user_id.into(),
            message: message.into(),
            history: Vec::new(),
            previous: None,
            image_description: None,
        }
    }
}

/// Runs chat turns: one orchestrator model (behind its [`Router`]) and its sub-agents.
pub struct Orchestrator {
    router: Arc<Router>,
    support: Arc<dyn Agent>,
    shopping: Arc<dyn Agent>,
    config: TurnConfig,
}

impl Orchestrator {
    /// An orchestrator over `model` with the two sub-agents.
    pub fn new(
        model: Arc<dyn ChatModel>,
        support: Arc<dyn Agent>,
        shopping: Arc<dyn Agent>,
        config: TurnConfig,
    ) -> Orchestrator {
        Orchestrator { router: Arc::new(Router::new(model, &config)), support, shopping, config }
    }

    /// The orchestrator model's name.
    pub fn model_name(&self) -> &str {
        self.router.model_name()
    }

    /// The router, for evaluating routing on its own.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Runs one turn. The stream always ends with `completed` unless it is dropped first; dropping
    /// it cancels the model call and every sub-agent.
    pub fn run_turn(self: &Arc<Self>, turn: TurnRequest) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let started = Instant::now();
            yield Event::Thinking {};
            let mut usage: Vec<AgentUsage> = Vec::new();
            let mut status = Status::Ok;
            let mut decided = None;
            {
                let routing = this.router.route(&turn);
                futures::pin_mut!(routing);
                while let Some(step) = routing.next().await {
                    match step {
                        RouteStep::Event(event) => yield event,
                        RouteStep::Decided(route) => decided = Some(route),
                        RouteStep::Failed => status = Status::Error,
                    }
                }
            }
            if let Some(route) = decided {
                usage.extend(route.usage);
                if route.calls.is_empty() && !route.answered {
                    yield Event::error(ORCHESTRATOR, "empty_model_answer",
                        "the orchestrator model answered with neither text nor a tool call", true);
                    status = Status::Error;
                }
                let streams = this.dispatch(&turn, route.calls);
                if !streams.is_empty() {
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
            }
            yield Event::Completed {
                episode_id: turn.episode_id,
                turn_id: turn.turn_id,
                status,
                model: this.router.model_name().to_owned(),
                duration_ms: started.elapsed().as_millis() as u64,
                usage,
            };
        })
    }

    /// Runs one turn that must end by `deadline` (a Lambda function's): when it comes, whatever is
    /// still running is dropped (cancelling its model calls) and the turn ends with an `error`
    /// (`deadline_exceeded`) and `completed` with status `partial`, the usage seen so far and the
    /// turn's ids.
    pub fn run_turn_until(self: &Arc<Self>, turn: TurnRequest, deadline: Instant) -> EventStream {
        let (episode_id, turn_id) = (turn.episode_id.clone(), turn.turn_id.clone());
        let model = self.router.model_name().to_owned();
        let inner = self.run_turn(turn);
        Box::pin(async_stream::stream! {
            let started = Instant::now();
            let mut inner = inner;
            let mut usage: Vec<AgentUsage> = Vec::new();
            let expired = tokio::time::sleep_until(deadline);
            tokio::pin!(expired);
            loop {
                tokio::select! {
                    biased;
                    event = inner.next() => match event {
                        Some(event) => {
                            if let Event::Usage { agent, model, usage: u } = &event {
                                usage.push(AgentUsage { agent: agent.clone(), model: model.clone(), usage: *u });
                            }
                            yield event;
                        }
                        None => return,
                    },
                    () = &mut expired => break,
                }
            }
            drop(inner);
            tracing::warn!(episode = %episode_id, turn = %turn_id, "turn cut at its deadline");
            yield Event::error(ORCHESTRATOR, "deadline_exceeded",
                "the turn reached its time limit; what was produced so far is kept", true);
            yield Event::Completed {
                episode_id,
                turn_id,
                status: Status::Partial,
                model,
                duration_ms: started.elapsed().as_millis() as u64,
                usage,
            };
        })
    }

    /// Starts one instrumented stream per call; in a mixed turn the support stream ends with the
    /// `support_content` boundary.
    fn dispatch(&self, turn: &TurnRequest, calls: Vec<PlannedCall>) -> Vec<EventStream> {
        let mixed =
            calls.iter().any(|c| c.tool == ASK_SUPPORT) && calls.iter().any(|c| c.tool != ASK_SUPPORT);
        let mut counts: HashMap<String, usize> = HashMap::new();
        calls
            .into_iter()
            .map(|call| {
                let is_support = call.tool == ASK_SUPPORT;
                let agent = if is_support { self.support.clone() } else { self.shopping.clone() };
                let n = counts.entry(agent.name().to_owned()).or_default();
                *n += 1;
                let instance = format!("{}[{n}]", agent.name());
                let request = AgentRequest {
                    user_id: turn.user_id.clone(),
                    episode_id: turn.episode_id.clone(),
                    query: call.query.clone(),
                    prior_context: call.prior_context,
                    history: turn.history.clone(),
                    arguments: call.arguments,
                };
                let mut events = agent.run(request, instance.clone());
                if mixed && is_support {
                    let boundary = Event::SupportContent { agent: instance.clone() };
                    events = Box::pin(events.chain(futures::stream::once(async move { boundary })));
                }
                instrument(instance, call.query, events)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ModelAgent;
    use crate::model::scripted::{Reply, ScriptedModel};
    use std::time::Duration;

    fn turn(message: &str) -> TurnRequest {
        TurnRequest::new("ep", "t1", "u", message)
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

    #[tokio::test(start_paused = true)]
    async fn a_turn_past_its_deadline_ends_partial_with_completed() {
        let o = setup(
            mixed_calls(),
            Reply::text("slow support answer").chunk_delay(Duration::from_secs(5)).into(),
            Reply::text("fast deals").into(),
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        let events: Vec<Event> = o.run_turn_until(turn("my receipt and coffee"), deadline).collect().await;
        assert!(events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "deadline_exceeded")));
        let Some(Event::Completed { status, usage, turn_id, .. }) = events.last() else {
            panic!("{events:?}")
        };
        assert_eq!(*status, Status::Partial);
        assert_eq!(turn_id, "t1");
        assert!(usage.iter().any(|u| u.agent == "orchestrator"), "usage seen so far is kept");
        assert_eq!(Instant::now(), deadline, "cut exactly at the deadline");
        assert_eq!(events.iter().filter(|e| matches!(e, Event::Completed { .. })).count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_within_its_deadline_is_untouched() {
        let o = setup(mixed_calls(), Reply::text("help").into(), Reply::text("deals").into());
        let deadline = Instant::now() + Duration::from_secs(3);
        let events: Vec<Event> = o.run_turn_until(turn("x"), deadline).collect().await;
        assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })));
        assert!(!events.iter().any(|e| matches!(e, Event::Error { .. })));
    }
}
