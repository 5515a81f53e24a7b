//! One chat turn (docs/architecture.md, "A turn, step by step"): `thinking`, the entry agent's
//! run, and `completed` last, always. This module builds `completed` (status, duration, usage per
//! agent name) and nothing else does.
//!
//! The entry agent is any [`Agent`]: in the reference configuration an [`crate::agent::LlmAgent`]
//! named `orchestrator` whose routing policy ([`crate::routing`]) dispatches to its agents
//! `ask_support` and `ask_shopping`; in a team's configuration the team's own entry agent. The
//! turn does not know which.
//!
//! Usage: every `usage` event gets its per-name roll-up (`agent_total`) on the way out and
//! `completed` carries usage per agent name and model. Each `usage` event keeps its instance's
//! own figures, and the roll-up is added beside them (docs/architecture.md, "The event
//! protocol").
//!
//! Cost: every `usage` event is priced here ([`crate::telemetry::cost::Pricer`]) before it is
//! rolled up, so `agent_total`, `completed` and the stored history carry the same exact
//! `cost_usd`. A [`TurnReporter`] (the CloudWatch EMF line in Lambda) gets the turn's figures
//! once `completed` is built.
//!
//! Status: the entry agent's own (`agent_finished`): `error` when it reported an error of its
//! own (a failed model call, or a sub-agent whose answer was part of its answer and failed),
//! `partial` when the turn was cut at its deadline.

use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;

use crate::agent::{Agent, AgentRequest, run_instance};
use crate::conversation::PreviousTurn;
use crate::event::{Event, EventStream, Status, UsageRollup};
use crate::model::Message;
use crate::telemetry::cost::{Pricer, Prices};
use crate::telemetry::{TurnReport, TurnReporter};
use crate::tool::Instances;

/// The `agent` of the events the turn itself emits (the deadline, a failed save), and the
/// name of the reference entry agent.
pub const ORCHESTRATOR: &str = "orchestrator";

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
    /// The attached image, if any.
    pub image: Option<crate::image::Image>,
    /// When the request arrived (the turn's first byte and first text are timed from here).
    pub received: Instant,
    /// The W3C `traceparent` of the request, if any: the parent of the turn's span.
    pub traceparent: Option<String>,
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
            image: None,
            received: Instant::now(),
            traceparent: None,
        }
    }

    /// What the entry agent is asked: the user's words, at depth 0, with the conversation.
    fn entry_request(self) -> AgentRequest {
        AgentRequest {
            user_id: self.user_id,
            episode_id: self.episode_id,
            arguments: serde_json::json!({"text": self.message}),
            query: self.message,
            prior_context: None,
            image: self.image,
            history: self.history,
            previous: self.previous,
            state: serde_json::Map::new(),
            depth: 0,
            instances: Instances::default(),
        }
    }
}

/// Runs chat turns with one entry agent.
pub struct Orchestrator {
    entry: Arc<dyn Agent>,
    model: String,
    pricer: Pricer,
    reporter: Option<Arc<dyn TurnReporter>>,
}

impl Orchestrator {
    /// Turns answered by `entry` (its instance is its own name), whose model is `model_name`
    /// (reported in `completed`).
    pub fn new(entry: Arc<dyn Agent>, model_name: impl Into<String>) -> Orchestrator {
        Orchestrator { entry, model: model_name.into(), pricer: Pricer::default(), reporter: None }
    }

    /// Prices every `usage` event with `prices` (with none, no event carries a cost).
    pub fn with_prices(mut self, prices: Prices) -> Orchestrator {
        self.pricer = Pricer::new(prices);
        self
    }

    /// Hands each turn's figures to `reporter` once `completed` is built.
    pub fn with_reporter(mut self, reporter: Arc<dyn TurnReporter>) -> Orchestrator {
        self.reporter = Some(reporter);
        self
    }

    /// The entry agent's model.
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// The entry agent.
    pub fn entry(&self) -> &Arc<dyn Agent> {
        &self.entry
    }

    /// Runs one turn. The stream always ends with `completed` unless it is dropped first; dropping
    /// it cancels the model calls and every sub-agent.
    pub fn run_turn(self: &Arc<Self>, turn: TurnRequest) -> EventStream {
        self.run_turn_until(turn, None)
    }

    /// Runs one turn that must end by `deadline` (a Lambda function's, or `serve`'s turn limit):
    /// when it comes, whatever is still running is dropped (cancelling its model calls) and the
    /// turn ends with an `error` (`deadline_exceeded`) and `completed` with status `partial`, the
    /// usage seen so far and the turn's ids.
    pub fn run_turn_until(self: &Arc<Self>, turn: TurnRequest, deadline: Option<Instant>) -> EventStream {
        let span = self.turn_span(&turn);
        self.run_turn_in(turn, deadline, span)
    }

    /// The span of `turn` (`turn <entry>`), a child of its `traceparent` when it has one. The
    /// endpoint makes it before it reads the history, so that the turn's store operations are
    /// in it too, and hands it to [`Orchestrator::run_turn_in`].
    pub fn turn_span(&self, turn: &TurnRequest) -> tracing::Span {
        let span = tracing::info_span!(
            "turn",
            otel.name = %format_args!("turn {}", self.entry.name()),
            gen_ai.agent.name = self.entry.name(),
            baton.episode_id = %turn.episode_id,
            baton.turn_id = %turn.turn_id,
            baton.status = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            baton.cost_usd = tracing::field::Empty,
        );
        if let Some(traceparent) = &turn.traceparent {
            crate::telemetry::trace::set_remote_parent(&span, traceparent, None);
        }
        span
    }

    /// [`Orchestrator::run_turn_until`] in `span` (from [`Orchestrator::turn_span`]).
    pub fn run_turn_in(
        self: &Arc<Self>,
        turn: TurnRequest,
        deadline: Option<Instant>,
        span: tracing::Span,
    ) -> EventStream {
        let this = self.clone();
        let events = Box::pin(async_stream::stream! {
            let started = Instant::now();
            let received = turn.received;
            yield Event::Thinking {};
            let first_byte = received.elapsed();
            let mut first_text = None;
            let (episode_id, turn_id) = (turn.episode_id.clone(), turn.turn_id.clone());
            let instance = this.entry.name().to_owned();
            let mut body = run_instance(&*this.entry, instance.clone(), turn.entry_request(), None);
            let mut rollup = UsageRollup::default();
            let mut status = Status::Error;
            let mut errors = 0u32;
            let mut repairs = 0u32;
            let expired = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(expired);
            loop {
                tokio::select! {
                    biased;
                    event = body.next() => match event {
                        Some(mut event) => {
                            this.pricer.price(&mut event);
                            rollup.observe(&mut event);
                            match &event {
                                Event::AgentFinished { agent, status: s, .. } if *agent == instance => status = *s,
                                Event::Text { .. } if first_text.is_none() => first_text = Some(received.elapsed()),
                                Event::Error { .. } => errors += 1,
                                Event::Repaired { .. } => repairs += 1,
                                _ => {}
                            }
                            yield event;
                        }
                        None => break,
                    },
                    () = &mut expired => {
                        drop(body);
                        tracing::warn!(episode = %episode_id, turn = %turn_id, "turn cut at its deadline");
                        yield Event::error(ORCHESTRATOR, "deadline_exceeded",
                            "the turn reached its time limit; what was produced so far is kept", true);
                        errors += 1;
                        status = Status::Partial;
                        break;
                    }
                }
            }
            let completed = Event::Completed {
                episode_id,
                turn_id,
                status,
                model: this.model.clone(),
                duration_ms: started.elapsed().as_millis() as u64,
                usage: rollup.totals,
            };
            if let Event::Completed { status, usage, .. } = &completed {
                record_turn(*status, usage);
            }
            if let (Some(reporter), Event::Completed { episode_id, turn_id, status, usage, .. }) =
                (&this.reporter, &completed)
            {
                reporter.report(&TurnReport {
                    episode_id,
                    turn_id,
                    status: *status,
                    duration: received.elapsed(),
                    first_byte,
                    first_text,
                    errors,
                    repairs,
                    usage,
                });
            }
            yield completed;
        });
        crate::telemetry::trace::traced(span, events)
    }
}

/// Records the turn's outcome on its span (the current one).
fn record_turn(status: Status, usage: &[crate::event::AgentUsage]) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let mut total = crate::event::Usage::default();
    usage.iter().for_each(|u| total.add(u.usage));
    let status = match status {
        Status::Ok => "ok",
        Status::Partial => "partial",
        Status::Error => "error",
    };
    span.record("baton.status", status);
    span.record("gen_ai.usage.input_tokens", total.input_tokens);
    span.record("gen_ai.usage.output_tokens", total.output_tokens);
    if let Some(cost) = total.cost_usd {
        span.record("baton.cost_usd", tracing::field::display(cost));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Usage;
    use crate::model::scripted::{Reply, ScriptedModel};
    use crate::routing::testing::{plain, routed};
    use serde_json::json;
    use std::time::Duration;

    const ASK_SUPPORT: &str = "ask_support";
    const ASK_SHOPPING: &str = "ask_shopping";

    fn turn(message: &str) -> TurnRequest {
        TurnRequest::new("ep", "t1", "u", message)
    }

    fn setup(orchestrator: Reply, support: Reply, shopping: Reply) -> Arc<Orchestrator> {
        let as_stream = |r: Reply| match r {
            Reply::Stream(s) => s,
            other => panic!("in-process scripts are streams, got {other:?}"),
        };
        setup_with_timeouts(orchestrator, as_stream(support).into(), as_stream(shopping).into(), [None, None])
    }

    fn setup_with_timeouts(
        orchestrator: Reply,
        support: Reply,
        shopping: Reply,
        timeouts: [Option<Duration>; 2],
    ) -> Arc<Orchestrator> {
        let as_stream = |r: Reply| match r {
            Reply::Stream(s) => s,
            other => panic!("in-process scripts are streams, got {other:?}"),
        };
        let model = Arc::new(ScriptedModel::new("orch", Some(as_stream(orchestrator))));
        let support = plain("support", Arc::new(ScriptedModel::new("sup", Some(as_stream(support)))));
        let shopping = plain("shopping", Arc::new(ScriptedModel::new("shop", Some(as_stream(shopping)))));
        Arc::new(Orchestrator::new(routed(model, support, shopping, timeouts), "orch"))
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
        assert_eq!(shopping.usage, Usage::tokens(5, 2));
        let totals: Vec<Option<Usage>> = events
            .iter()
            .filter_map(|e| match e {
                Event::Usage { agent, agent_total, .. } if agent == "support[1]" => {
                    Some(agent_total.as_deref().copied())
                }
                _ => None,
            })
            .collect();
        assert_eq!(totals, [Some(Usage::tokens(3, 1))]);
    }

    #[tokio::test]
    async fn support_boundary_follows_support_text_in_a_mixed_turn_only() {
        let o = setup(mixed_calls(), Reply::text("help").into(), Reply::text("deals").into());
        let events: Vec<Event> = o.run_turn(turn("x")).collect().await;
        let boundary = events.iter().position(|e| matches!(e, Event::ContentEnd { .. })).unwrap();
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
        assert!(!events.iter().any(|e| matches!(e, Event::ContentEnd { .. })));
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
        let shopping = plain("shopping", shop_model.clone());
        let support = plain("support", Arc::new(ScriptedModel::new("sup", None)));
        let o = Arc::new(Orchestrator::new(routed(model, support, shopping, [None, None]), "orch"));
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
        let events: Vec<Event> =
            o.run_turn_until(turn("my receipt and coffee"), Some(deadline)).collect().await;
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
        let events: Vec<Event> = o.run_turn_until(turn("x"), Some(deadline)).collect().await;
        assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })));
        assert!(!events.iter().any(|e| matches!(e, Event::Error { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sub_agent_past_its_own_timeout_is_stopped_and_the_rest_of_the_turn_goes_on() {
        let o = setup_with_timeouts(
            mixed_calls(),
            Reply::text("slow support").first_byte_delay(Duration::from_secs(30)).into(),
            Reply::text("fast deals").into(),
            [Some(Duration::from_secs(5)), None],
        );
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
