//! One chat turn (DESIGN.md §4): `thinking`, routing (the orchestrator model call with the
//! sub-agent tools, the preamble streamed as it arrives, failsafe and guards: see
//! [`crate::routing`]), every call dispatched at once, the live-slot merge, `support_content` at
//! the support boundary, usage per agent, and `completed` last, always.
//!
//! A configured entry agent (DESIGN.md §5, [`crate::team`]) answers a turn instead of the router
//! when the configuration names one: `thinking`, the entry agent's tool loop (its agent tools
//! stream their instances' events through it), and `completed`. Either way every `usage` event
//! gets its per-name roll-up (`agent_total`) on the way out and `completed` carries usage per
//! agent name and model. (DESIGN.md §3 speaks of usage "per agent instance"; the instance figures
//! are still each `usage` event's own, and the roll-up is added beside them.)

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use crate::agent::{Agent, AgentRequest, EventStream, instrument, instrument_for};
use crate::agent_tool::Slot;
use crate::event::{Event, Status, UsageRollup};
use crate::guard::PlannedCall;
pub use crate::guard::{PreviousTurn, PriorReply};
use crate::model::{ChatModel, Message, ToolSpec};
use crate::mux::{LiveSlotMux, MuxConfig};
use crate::routing::{RouteStep, Router};
use crate::tool::Instances;

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

/// How a sub-agent of the routed turn runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildOptions {
    /// Longest one instance may run; past it the instance is stopped with an `agent_timeout`
    /// error and the turn goes on.
    pub timeout: Option<std::time::Duration>,
}

/// Who answers a turn.
enum Entry {
    /// The reference routed turn (DESIGN.md §4): the orchestrator model behind its [`Router`],
    /// and the support and shopping sub-agents.
    Router {
        router: Arc<Router>,
        support: Arc<dyn Agent>,
        shopping: Arc<dyn Agent>,
        options: [ChildOptions; 2],
    },
    /// A configured agent (DESIGN.md §5): its tool loop, with its agent tools, answers.
    Agent { agent: Arc<dyn Agent>, model: String },
}

/// Runs chat turns: either the routed turn (one orchestrator model behind its [`Router`], and its
/// two sub-agents), or one configured entry agent with its own agents as tools.
pub struct Orchestrator {
    entry: Entry,
    config: TurnConfig,
}

impl Orchestrator {
    /// The routed turn over `model` with the two sub-agents.
    pub fn new(
        model: Arc<dyn ChatModel>,
        support: Arc<dyn Agent>,
        shopping: Arc<dyn Agent>,
        config: TurnConfig,
    ) -> Orchestrator {
        let router = Arc::new(Router::new(model, &config));
        Orchestrator {
            entry: Entry::Router { router, support, shopping, options: Default::default() },
            config,
        }
    }

    /// Turns answered by `agent` (the entry agent, instance name = its name), whose model is
    /// `model_name` (reported in `completed`).
    pub fn for_agent(agent: Arc<dyn Agent>, model_name: impl Into<String>) -> Orchestrator {
        let config = TurnConfig {
            system_prompt: String::new(),
            support_categories: Vec::new(),
            mux: MuxConfig::default(),
        };
        Orchestrator { entry: Entry::Agent { agent, model: model_name.into() }, config }
    }

    /// Sets how the routed turn's support and shopping sub-agents run (no effect on an entry
    /// agent, whose agent tools carry their own options).
    pub fn with_child_options(mut self, support: ChildOptions, shopping: ChildOptions) -> Orchestrator {
        if let Entry::Router { options, .. } = &mut self.entry {
            *options = [support, shopping];
        }
        self
    }

    /// The model of the turn: the orchestrator model, or the entry agent's.
    pub fn model_name(&self) -> &str {
        match &self.entry {
            Entry::Router { router, .. } => router.model_name(),
            Entry::Agent { model, .. } => model,
        }
    }

    /// The router, for evaluating routing on its own; `None` when an entry agent answers turns.
    pub fn router(&self) -> Option<&Arc<Router>> {
        match &self.entry {
            Entry::Router { router, .. } => Some(router),
            Entry::Agent { .. } => None,
        }
    }

    /// Runs one turn. The stream always ends with `completed` unless it is dropped first; dropping
    /// it cancels the model call and every sub-agent.
    ///
    /// Every `usage` event gets its roll-up (`agent_total`), and `completed` carries the usage
    /// per agent name and model.
    pub fn run_turn(self: &Arc<Self>, turn: TurnRequest) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let started = Instant::now();
            yield Event::Thinking {};
            let (episode_id, turn_id) = (turn.episode_id.clone(), turn.turn_id.clone());
            let status = Slot::default();
            let mut body = match &this.entry {
                Entry::Router { .. } => this.routed(turn, status.clone()),
                Entry::Agent { agent, .. } => agent_turn(agent.clone(), turn, status.clone()),
            };
            let mut rollup = UsageRollup::default();
            while let Some(mut event) = body.next().await {
                rollup.observe(&mut event);
                yield event;
            }
            drop(body);
            yield Event::Completed {
                episode_id,
                turn_id,
                status: status.take().unwrap_or(Status::Error),
                model: this.model_name().to_owned(),
                duration_ms: started.elapsed().as_millis() as u64,
                usage: rollup.totals,
            };
        })
    }

    /// The routed turn, from the orchestrator model call to the last sub-agent event; leaves the
    /// turn's status in `status`.
    fn routed(self: &Arc<Self>, turn: TurnRequest, status_out: Slot<Status>) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let Entry::Router { router, .. } = &this.entry else { return };
            let mut status = Status::Ok;
            let mut decided = None;
            {
                let routing = router.route(&turn);
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
                if route.calls.is_empty() && !route.answered {
                    yield Event::error(ORCHESTRATOR, "empty_model_answer",
                        "the orchestrator model answered with neither text nor a tool call", true);
                    status = Status::Error;
                }
                let (streams, instances) = this.dispatch(&turn, route.calls);
                if !streams.is_empty() {
                    let mut merged = LiveSlotMux::new(streams, this.config.mux);
                    while let Some(event) = merged.next().await {
                        match &event {
                            Event::AgentFinished { agent, status: s, .. } if instances.contains(agent) => {
                                status = status.worst(*s);
                            }
                            _ => {}
                        }
                        yield event;
                    }
                }
            }
            status_out.set(status);
        })
    }

    /// Runs one turn that must end by `deadline` (a Lambda function's): when it comes, whatever is
    /// still running is dropped (cancelling its model calls) and the turn ends with an `error`
    /// (`deadline_exceeded`) and `completed` with status `partial`, the usage seen so far and the
    /// turn's ids.
    pub fn run_turn_until(self: &Arc<Self>, turn: TurnRequest, deadline: Instant) -> EventStream {
        let (episode_id, turn_id) = (turn.episode_id.clone(), turn.turn_id.clone());
        let model = self.model_name().to_owned();
        let inner = self.run_turn(turn);
        Box::pin(async_stream::stream! {
            let started = Instant::now();
            let mut inner = inner;
            let mut rollup = UsageRollup::default();
            let expired = tokio::time::sleep_until(deadline);
            tokio::pin!(expired);
            loop {
                tokio::select! {
                    biased;
                    event = inner.next() => match event {
                        Some(mut event) => {
                            rollup.observe(&mut event);
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
                usage: rollup.totals,
            };
        })
    }

    /// Starts one instrumented stream per call (their instance names come back with them); in a
    /// mixed turn the support stream ends with the `support_content` boundary.
    fn dispatch(&self, turn: &TurnRequest, calls: Vec<PlannedCall>) -> (Vec<EventStream>, Vec<String>) {
        let Entry::Router { support, shopping, options, .. } = &self.entry else { return Default::default() };
        let mixed =
            calls.iter().any(|c| c.tool == ASK_SUPPORT) && calls.iter().any(|c| c.tool != ASK_SUPPORT);
        let instances = Instances::default();
        let mut names = Vec::with_capacity(calls.len());
        let streams = calls
            .into_iter()
            .map(|call| {
                let is_support = call.tool == ASK_SUPPORT;
                let (agent, options) =
                    if is_support { (support.clone(), options[0]) } else { (shopping.clone(), options[1]) };
                let instance = instances.next(agent.name());
                names.push(instance.clone());
                let request = AgentRequest {
                    user_id: turn.user_id.clone(),
                    episode_id: turn.episode_id.clone(),
                    query: call.query.clone(),
                    prior_context: call.prior_context,
                    history: turn.history.clone(),
                    arguments: call.arguments,
                    state: serde_json::Map::new(),
                    depth: 1,
                    instances: instances.clone(),
                };
                let mut events = agent.run(request, instance.clone());
                if mixed && is_support {
                    let boundary = Event::SupportContent { agent: instance.clone() };
                    events = Box::pin(events.chain(futures::stream::once(async move { boundary })));
                }
                instrument_for(instance, call.query, events, options.timeout)
            })
            .collect();
        (streams, names)
    }
}

/// A turn answered by an entry agent: its instance is its name, at depth 0, with the
/// conversation's history; leaves its status in `status_out`.
fn agent_turn(agent: Arc<dyn Agent>, turn: TurnRequest, status_out: Slot<Status>) -> EventStream {
    Box::pin(async_stream::stream! {
        let instance = agent.name().to_owned();
        let mut query = turn.message.clone();
        if let Some(image) = turn.image_description.as_deref().filter(|d| !d.trim().is_empty()) {
            query.push_str(&format!("\n[The user attached an image: {}]", image.trim()));
        }
        let request = AgentRequest {
            user_id: turn.user_id,
            episode_id: turn.episode_id,
            query: query.clone(),
            prior_context: None,
            history: turn.history,
            arguments: json!({"text": turn.message}),
            state: serde_json::Map::new(),
            depth: 0,
            instances: Instances::default(),
        };
        let mut status = Status::Error;
        let mut events = instrument(instance.clone(), query, agent.run(request, instance.clone()));
        while let Some(event) = events.next().await {
            if let Event::AgentFinished { agent, status: s, .. } = &event {
                if *agent == instance {
                    status = *s;
                }
            }
            yield event;
        }
        status_out.set(status);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ModelAgent;
    use crate::event::Usage;
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
            agents.contains(&"orchestrator") && agents.contains(&"support") && agents.contains(&"shopping"),
            "rolled up per agent name: {agents:?}"
        );
        let shopping = usage.iter().find(|u| u.agent == "shopping").unwrap();
        assert_eq!(shopping.usage, Usage { input_tokens: 5, output_tokens: 2 });
        let totals: Vec<Option<Usage>> = events
            .iter()
            .filter_map(|e| match e {
                Event::Usage { agent, agent_total, .. } if agent == "support[1]" => Some(*agent_total),
                _ => None,
            })
            .collect();
        assert_eq!(totals, [Some(Usage { input_tokens: 3, output_tokens: 1 })]);
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

    #[tokio::test(start_paused = true)]
    async fn a_sub_agent_past_its_own_timeout_is_stopped_and_the_rest_of_the_turn_goes_on() {
        let o = setup(
            mixed_calls(),
            Reply::text("slow support").first_byte_delay(Duration::from_secs(30)).into(),
            Reply::text("fast deals").into(),
        );
        let o = Arc::new(Arc::into_inner(o).unwrap().with_child_options(
            ChildOptions { timeout: Some(Duration::from_secs(5)) },
            ChildOptions::default(),
        ));
        let started = Instant::now();
        let events: Vec<Event> = o.run_turn(turn("my receipt and coffee")).collect().await;
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(events.iter().any(
            |e| matches!(e, Event::Error { agent, code, .. } if agent == "support[1]" && code == "agent_timeout")
        ));
        assert!(events.iter().any(|e| matches!(e, Event::Text { agent, .. } if agent == "shopping[1]")));
        assert!(matches!(events.last(), Some(Event::Completed { status: Status::Error, .. })));
    }
}
