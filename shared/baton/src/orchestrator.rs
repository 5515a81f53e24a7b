//! One chat turn (docs/architecture.md, "A turn, step by step"), started in one place,
//! [`Orchestrator::start`], for `serve`, the Lambda function and `chat`: the turn's span, the user
//! message recorded ([`crate::history`]), `thinking`, the entry agent's run, the reply recorded,
//! and `completed` last, always. This module builds `completed` (status, duration, usage per
//! agent name) and nothing else does.
//!
//! The entry agent is any [`Agent`]: in the reference configuration an [`crate::agent::LlmAgent`]
//! named `orchestrator` whose routing policy ([`crate::routing`]) dispatches to its agents; in a
//! team's configuration the team's own entry agent. The turn does not know which.
//!
//! Usage: every `usage` event gets its per-name roll-up (`agent_total`) on the way out and
//! `completed` carries usage per agent name and model. Each `usage` event keeps its instance's
//! own figures, and the roll-up is added beside them (docs/architecture.md, "The event
//! protocol").
//!
//! Cost: every `usage` event is priced here (`crate::telemetry::cost::Pricer`) before it is
//! rolled up, so `agent_total`, `completed` and the stored history carry the same exact
//! `cost_usd`. A [`TurnReporter`] (the CloudWatch EMF line in Lambda) gets the turn's figures
//! once `completed` is built.
//!
//! Status, one for the client, the span and the reporter: the entry agent's own
//! (`agent_finished`): `error` when it reported an error of its own (a failed model call, or a
//! sub-agent whose answer was part of its answer and failed), `partial` when the turn was cut at
//! its deadline; then `error` if the reply could not be saved. A turn whose client left is
//! `partial` to the span and the reporter (the client sees nothing more).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::{Agent, AgentRequest, run_instance};
use crate::approval::TurnApprovals;
use crate::conversation::PreviousTurn;
use crate::event::{AgentUsage, Event, EventStream, Status, UsageRollup};
use crate::history::{History, PendingReply};
use crate::model::Message;
use crate::store::{EpisodeKey, StoreError};
use crate::telemetry::cost::{Pricer, Prices};
use crate::telemetry::{TurnReport, TurnReporter};
use crate::tool::Instances;

/// The `agent` of the events the turn itself emits (the deadline, a failed save), and the
/// name of the reference entry agent.
pub(crate) const ORCHESTRATOR: &str = "orchestrator";

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
    /// What a call that needs approval does in this turn, and on a resumed turn the paused
    /// state and the person's decisions (docs/approvals.md).
    pub approvals: TurnApprovals,
    /// The turn of the episode this one runs beside (`on_busy: parallel`): its agents then
    /// continue no vendor response chain, which that turn may be continuing.
    pub beside: Option<String>,
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
            approvals: TurnApprovals::default(),
            beside: None,
        }
    }

    /// What the entry agent is asked: the user's words, at depth 0, with the conversation.
    fn entry_request(self) -> AgentRequest {
        let instances = Instances::default();
        let instances = if self.beside.is_some() { instances.without_chains() } else { instances };
        if let Some(claimed) = self.approvals.claimed() {
            // Paused instances keep their names; new ones are numbered after them.
            claimed.root().instances().iter().for_each(|i| instances.reserve(i));
        }
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
            instances,
            approvals: self.approvals,
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

    /// Starts one turn: the one way a turn starts (`serve` and the Lambda function through the
    /// chat endpoint, and `chat`). In order: the turn's span (`turn <entry>`, a child of the
    /// request's `traceparent`); with a history, the user message recorded and the recent history
    /// read, in that span; the entry agent's run; its reply saved; and `completed` last. The
    /// status `completed` carries is the one the span and the [`TurnReporter`] get, decided once
    /// the reply is saved: a reply that could not be saved is an `error` event and an `error`
    /// turn for the client, the metrics and the trace alike.
    ///
    /// The stream always ends with `completed` unless it is dropped first (the client left):
    /// dropping it cancels the model calls and every sub-agent, saves what was produced as
    /// `partial`, and records and reports the turn `partial`. With a deadline, whatever still
    /// runs when it comes is dropped and the turn ends with an `error` (`deadline_exceeded`) and
    /// `completed` with status `partial`, the usage seen so far and the turn's ids.
    ///
    /// A store that fails before the run is the `Err`: nothing ran, and the span and the reporter
    /// see an `error` turn.
    pub async fn start(
        self: &Arc<Self>,
        mut turn: TurnRequest,
        options: TurnOptions<'_>,
    ) -> Result<StartedTurn, StoreError> {
        let span = self.turn_span(&turn);
        let reply = match options.history {
            None => None,
            Some((history, request_id)) => {
                let begun = history
                    .begin(&turn.user_id, &turn.episode_id, &turn.turn_id, &turn.message, request_id)
                    .instrument(span.clone())
                    .await;
                let begun = match begun {
                    Ok(begun) => begun,
                    Err(e) => {
                        tracing::error!(parent: &span, episode = %turn.episode_id, user = %turn.user_id,
                            error = %e, "user message not recorded");
                        let mut tally = Tally::new(self.clone(), &turn, span);
                        tally.first_byte = turn.received.elapsed();
                        tally.errors = 1;
                        tally.close(Status::Error, Vec::new());
                        return Err(e);
                    }
                };
                // A repeated request id gives the turn its first id back.
                span.record("baton.turn_id", begun.turn_id.as_str());
                turn.turn_id = begun.turn_id;
                turn.history = begun.history;
                turn.previous = begun.previous;
                if begun.interrupted && turn.approvals.claimed().is_none() {
                    // A new message while approvals wait: they are answered as rejected.
                    if let Some(approvals) = turn.approvals.record() {
                        match approvals.dismiss(&begun.key).instrument(span.clone()).await {
                            Ok(0) => {}
                            Ok(n) => {
                                tracing::info!(parent: &span, dismissed = n, "pending approvals dismissed by a new message")
                            }
                            Err(e) => {
                                tracing::warn!(parent: &span, error = %e, "pending approvals not dismissed")
                            }
                        }
                    }
                }
                Some(history.reply(begun.key, turn.turn_id.clone(), self.entry.name(), span.clone()))
            }
        };
        tracing::info!(parent: &span, episode = %turn.episode_id, turn = %turn.turn_id,
            user = %turn.user_id, "chat turn");
        let (episode_id, turn_id) = (turn.episode_id.clone(), turn.turn_id.clone());
        let events = self.run(turn, options.deadline, options.cancel.cloned(), reply, span);
        Ok(StartedTurn { episode_id, turn_id, events })
    }

    /// [`Orchestrator::start`] with no history and no deadline, which needs no `.await`: for
    /// tests and benchmarks of the turn alone.
    pub fn run_turn(self: &Arc<Self>, turn: TurnRequest) -> EventStream {
        let span = self.turn_span(&turn);
        self.run(turn, None, None, None, span)
    }

    /// The span of `turn` (`turn <entry>`), a child of its `traceparent` when it has one.
    fn turn_span(&self, turn: &TurnRequest) -> tracing::Span {
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

    /// The turn's events in `span`: `thinking`, the entry agent's run (cut at `deadline`, or
    /// stopped by `cancel`), the reply saved, `completed`.
    fn run(
        self: &Arc<Self>,
        turn: TurnRequest,
        deadline: Option<Instant>,
        cancel: Option<CancellationToken>,
        reply: Option<PendingReply>,
        span: tracing::Span,
    ) -> EventStream {
        let this = self.clone();
        let approvals = turn.approvals.clone();
        let store = approvals.record();
        let key = EpisodeKey::new(&turn.user_id, &turn.episode_id);
        let mut tally = Tally::new(self.clone(), &turn, span.clone());
        let events = Box::pin(async_stream::stream! {
            let mut reply = reply;
            // A resumed turn dropped before its end (the client left, `on_disconnect: cancel`)
            // releases its claim, so the answers can be sent again at once.
            let mut claim = ClaimGuard(approvals.claimed().cloned());
            tally.started = Instant::now();
            yield Event::Thinking { episode_id: tally.episode_id.clone(), turn_id: tally.turn_id.clone() };
            tally.first_byte = tally.received.elapsed();
            let mut body = run_instance(&*this.entry, tally.entry.clone(), turn.entry_request(), None);
            let expired = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(expired);
            let cancelled = async move {
                match cancel {
                    Some(cancel) => cancel.cancelled_owned().await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(cancelled);
            loop {
                tokio::select! {
                    biased;
                    // First: a turn streaming without a pause still sees its stop at once.
                    () = &mut cancelled => {
                        drop(body);
                        let (episode, turn) = (&tally.episode_id, &tally.turn_id);
                        tracing::info!(%episode, %turn, "turn cancelled");
                        tally.status = Status::Cancelled;
                        break;
                    }
                    event = body.next() => match event {
                        Some(mut event) => {
                            tally.observe(&mut event);
                            if let Some(reply) = reply.as_mut() {
                                reply.observe(&event);
                            }
                            yield event;
                        }
                        None => break,
                    },
                    () = &mut expired => {
                        drop(body);
                        let (episode, turn) = (&tally.episode_id, &tally.turn_id);
                        tracing::warn!(%episode, %turn, "turn cut at its deadline");
                        tally.errors += 1;
                        tally.status = Status::Partial;
                        yield Event::error(ORCHESTRATOR, "deadline_exceeded",
                            "the turn reached its time limit; what was produced so far is kept", true);
                        break;
                    }

                }
            }
            claim.0 = None;
            let settled = settle_approvals(&approvals, store.as_ref(), key.as_ref().ok(), &mut tally, &mut reply).await;
            let (mut status, interrupts, failed) = settled;
            if let Some(failed) = failed {
                yield failed;
            }
            if let Some(failed) = save_reply(reply.take(), &mut status, &mut tally).await {
                yield failed;
            }
            yield tally.close(status, interrupts);
        });
        crate::telemetry::trace::traced(span, events)
    }
}

/// What the end of a turn does with its approvals: a paused turn's state saved (with
/// `store`, under `key`) and its interrupts for `completed`; a resumed turn's claim finished (or
/// released, when the turn was cut or cancelled). Returns the turn's status, its interrupts and
/// the `error` event of a save that failed (`tally` counts it). A resume whose claim lapsed and
/// was taken over stores nothing, and its reply is discarded.
async fn settle_approvals(
    approvals: &TurnApprovals,
    store: Option<&crate::approval::ApprovalStore>,
    key: Option<&EpisodeKey>,
    tally: &mut Tally,
    reply: &mut Option<PendingReply>,
) -> (Status, Vec<crate::event::Interrupt>, Option<Event>) {
    let mut status = tally.status;
    let mut interrupts = Vec::new();
    let (paused, claimed) = (approvals.take_paused(&tally.entry), approvals.claimed());
    let (Some(store), Some(key)) = (store, key) else {
        if paused.is_none() {
            return (status, interrupts, None);
        }
        // Nowhere to keep the paused state (a turn run without a store): nothing waiting can
        // be answered, so the turn says so.
        tally.errors += 1;
        let failed = Event::error(
            ORCHESTRATOR,
            "approvals_not_saved",
            "a tool call needs a person's approval, and this turn cannot keep it; nothing was run",
            false,
        );
        return (Status::Error, interrupts, Some(failed));
    };
    if paused.is_none() && claimed.is_none() {
        return (status, interrupts, None);
    }
    if let Some(paused) = &paused {
        interrupts = paused.interrupts();
    }
    let resumed = claimed.is_some();
    let saved = match (claimed, paused) {
        (Some(claimed), paused) if status != Status::Cancelled && status != Status::Partial => {
            claimed.finish(&tally.turn_id, paused).await
        }
        (Some(claimed), _) => claimed.release().await,
        (None, Some(paused)) => store.pause(key, &tally.turn_id, paused, None).await,
        (None, None) => Ok(()),
    };
    let (episode, turn) = (&tally.episode_id, &tally.turn_id);
    let failed = match saved {
        Ok(()) => return (status, interrupts, None),
        Err(StoreError::Conflict { .. }) if resumed => {
            // The claim lapsed and another request resumed (or a message dismissed) the record
            // since: that request's answer is the conversation's, and this one stores nothing.
            tracing::warn!(%episode, %turn, "resume superseded: its claim lapsed; nothing stored");
            if let Some(reply) = reply.take() {
                reply.discard();
            }
            Event::error(
                ORCHESTRATOR,
                "resume_superseded",
                "another request took this resume over after its claim lapsed; this answer is not kept",
                false,
            )
        }
        Err(e) => {
            tracing::error!(%episode, %turn, error = %e, "approvals not saved");
            Event::error(
                ORCHESTRATOR,
                "approvals_not_saved",
                format!(
                    "the approvals this turn waits for could not be saved ({}); nothing was run",
                    e.code()
                ),
                e.is_retryable(),
            )
        }
    };
    tally.errors += 1;
    status = Status::Error;
    interrupts.clear();
    (status, interrupts, Some(failed))
}

/// Saves the turn's `reply` with `status`: a save that fails makes the turn an `error` (`tally`
/// counts it) and returns its `error` event.
async fn save_reply(reply: Option<PendingReply>, status: &mut Status, tally: &mut Tally) -> Option<Event> {
    let e = reply?.finish(*status).await.err()?;
    let (episode, turn) = (&tally.episode_id, &tally.turn_id);
    tracing::error!(%episode, %turn, error = %e, "reply not saved");
    tally.errors += 1;
    *status = Status::Error;
    Some(Event::error(
        ORCHESTRATOR,
        e.code(),
        format!("the answer could not be saved: {e}"),
        e.is_retryable(),
    ))
}

/// A resumed turn's claim, released in the background if the turn is dropped before its end.
struct ClaimGuard(Option<crate::approval::ClaimedResume>);

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let (Some(claimed), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = claimed.release().await {
                tracing::warn!(error = %e, "a dropped resume's claim was not released; it lapses");
            }
        });
    }
}

/// How [`Orchestrator::start`] runs a turn.
#[derive(Clone, Copy, Default)]
pub struct TurnOptions<'a> {
    /// Where the turn is recorded, with the client's id for this request (idempotent retries):
    /// the user message before the run, the reply before `completed`. None: not recorded.
    pub history: Option<(&'a History, Option<&'a str>)>,
    /// When the turn must end (a Lambda invocation's, or the endpoint's turn limit).
    pub deadline: Option<Instant>,
    /// Stops the turn when cancelled (the cancel endpoint): whatever still runs is dropped, what
    /// was produced is saved, and the turn ends with `completed` status `cancelled`.
    pub cancel: Option<&'a CancellationToken>,
}

/// A turn that has started: its ids (the turn's may be an earlier turn's, for a repeated request
/// id) and its events.
pub struct StartedTurn {
    /// The conversation.
    pub episode_id: String,
    /// The turn.
    pub turn_id: String,
    /// `thinking` first, `completed` last.
    pub events: EventStream,
}

/// A turn's figures as it runs, and its one final status: [`Tally::close`] builds `completed`
/// and gives the span and the reporter the same status; a turn dropped before that (the client
/// left) is recorded and reported `partial` when its tally is dropped.
struct Tally {
    orchestrator: Arc<Orchestrator>,
    span: tracing::Span,
    /// The entry agent's instance.
    entry: String,
    episode_id: String,
    turn_id: String,
    received: Instant,
    started: Instant,
    first_byte: Duration,
    first_text: Option<Duration>,
    rollup: UsageRollup,
    /// The entry agent's status (`agent_finished`), `partial` once cut at the deadline.
    status: Status,
    errors: u32,
    repairs: u32,
    closed: bool,
}

impl Tally {
    fn new(orchestrator: Arc<Orchestrator>, turn: &TurnRequest, span: tracing::Span) -> Tally {
        Tally {
            entry: orchestrator.entry.name().to_owned(),
            orchestrator,
            span,
            episode_id: turn.episode_id.clone(),
            turn_id: turn.turn_id.clone(),
            received: turn.received,
            started: Instant::now(),
            first_byte: Duration::ZERO,
            first_text: None,
            rollup: UsageRollup::default(),
            status: Status::Error,
            errors: 0,
            repairs: 0,
            closed: false,
        }
    }

    /// Prices and rolls up `event`, and counts it.
    fn observe(&mut self, event: &mut Event) {
        self.orchestrator.pricer.price(event);
        self.rollup.observe(event);
        match &*event {
            Event::AgentFinished { agent, status, .. } if *agent == self.entry => self.status = *status,
            Event::Text { .. } if self.first_text.is_none() => {
                self.first_text = Some(self.received.elapsed())
            }
            Event::Error { .. } => self.errors += 1,
            Event::Repaired { .. } => self.repairs += 1,
            _ => {}
        }
    }

    /// Ends the turn with `status`: on the span, to the reporter, and as `completed` (with the
    /// `interrupts` it waits for).
    fn close(&mut self, status: Status, interrupts: Vec<crate::event::Interrupt>) -> Event {
        self.closed = true;
        let usage = std::mem::take(&mut self.rollup.totals);
        self.publish(status, &usage);
        Event::Completed {
            episode_id: self.episode_id.clone(),
            turn_id: self.turn_id.clone(),
            status,
            model: self.orchestrator.model.clone(),
            duration_ms: u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX),
            cost_usd: crate::event::turn_cost(&usage),
            usage,
            interrupts: interrupts.into_boxed_slice(),
        }
    }

    /// Records the turn's outcome on its span and hands its figures to the reporter.
    fn publish(&self, status: Status, usage: &[AgentUsage]) {
        record_turn(&self.span, status, usage);
        if let Some(reporter) = &self.orchestrator.reporter {
            reporter.report(&TurnReport {
                episode_id: &self.episode_id,
                turn_id: &self.turn_id,
                status,
                duration: self.received.elapsed(),
                first_byte: self.first_byte,
                first_text: self.first_text,
                errors: self.errors,
                repairs: self.repairs,
                usage,
            });
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if !self.closed {
            tracing::info!(parent: &self.span, episode = %self.episode_id, turn = %self.turn_id,
                "the turn was dropped before it completed (the client left)");
            self.publish(Status::Partial, &self.rollup.totals);
        }
    }
}

/// Records the turn's outcome on `span`.
fn record_turn(span: &tracing::Span, status: Status, usage: &[AgentUsage]) {
    if span.is_disabled() {
        return;
    }
    let mut total = crate::event::Usage::default();
    usage.iter().for_each(|u| total.add(u.usage));
    span.record("baton.status", status.as_str());
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

    async fn until(o: &Arc<Orchestrator>, turn: TurnRequest, deadline: Instant) -> Vec<Event> {
        let options = TurnOptions { history: None, deadline: Some(deadline), cancel: None };
        o.start(turn, options).await.unwrap().events.collect().await
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

    /// The `cost_usd` of each instance's `agent_finished`, by instance.
    fn finished_costs(events: &[Event]) -> Vec<(String, Option<crate::event::Usd>)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::AgentFinished { agent, usage, .. } => Some((agent.clone(), usage.cost_usd)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn completed_carries_the_turns_cost_and_agent_finished_its_instances_own() {
        let turn_with = |prices: &str| {
            let o = setup(
                mixed_calls(),
                Reply::text("help").usage(3, 1).into(),
                Reply::text("deals").usage(5, 2).into(),
            );
            let prices: Prices = serde_yaml_ng::from_str(prices).unwrap();
            let o = Arc::new(Arc::into_inner(o).unwrap().with_prices(prices));
            async move { o.run_turn(turn("my receipt and coffee")).collect::<Vec<Event>>().await }
        };
        let all = "models:\n  orch: {input: 1, output: 2}\n  sup: {input: 10, output: 20}\n  shop: {input: 100, output: 200}\n";
        let events = turn_with(all).await;
        let Some(Event::Completed { usage, cost_usd, .. }) = events.last() else { panic!("{events:?}") };
        let sum = usage
            .iter()
            .map(|u| u.usage.cost_usd.unwrap())
            .fold(crate::event::Usd::ZERO, |a, b| a.saturating_add(b));
        assert!(sum > crate::event::Usd::ZERO);
        assert_eq!(*cost_usd, Some(sum), "the turn's cost is the sum of its agents'");
        let json = serde_json::to_value(events.last().unwrap()).unwrap();
        assert_eq!(json["cost_usd"], json!(sum.to_string()), "a decimal string, as usage's");
        let costs = finished_costs(&events);
        // 5 × $100/M + 2 × $200/M and 3 × $10/M + 1 × $20/M: each instance its own calls only.
        assert!(costs.contains(&("shopping[1]".into(), Some("0.0009".parse().unwrap()))), "{costs:?}");
        assert!(costs.contains(&("support[1]".into(), Some("0.00005".parse().unwrap()))), "{costs:?}");
        let entry = costs.iter().find(|(a, _)| a == "orchestrator").unwrap();
        assert_eq!(entry.1, usage.iter().find(|u| u.agent == "orchestrator").unwrap().usage.cost_usd);

        // The orchestrator's model unpriced: the turn's cost is unknown, never understated; the
        // priced instances keep theirs.
        let events =
            turn_with("models:\n  sup: {input: 10, output: 20}\n  shop: {input: 100, output: 200}\n").await;
        let Some(Event::Completed { cost_usd, .. }) = events.last() else { panic!("{events:?}") };
        assert_eq!(*cost_usd, None);
        let json = serde_json::to_value(events.last().unwrap()).unwrap();
        assert!(json.get("cost_usd").is_none(), "absent, as usage's: {json}");
        let costs = finished_costs(&events);
        assert!(costs.contains(&("orchestrator".into(), None)), "{costs:?}");
        assert!(costs.contains(&("shopping[1]".into(), Some("0.0009".parse().unwrap()))), "{costs:?}");
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
        let request = turn("my receipt and coffee");
        let (episode_id, turn_id) = (request.episode_id.clone(), request.turn_id.clone());
        let events: Vec<Event> = o.run_turn(request).collect().await;
        assert_eq!(events.first(), Some(&Event::Thinking { episode_id, turn_id }), "it names the turn");
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
        let events: Vec<Event> = until(&o, turn("my receipt and coffee"), deadline).await;
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
        let events: Vec<Event> = until(&o, turn("x"), deadline).await;
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

    /// The turns' figures as the reporter got them: (turn id, status).
    #[derive(Default)]
    struct Reports(std::sync::Mutex<Vec<(String, Status)>>);

    impl TurnReporter for Reports {
        fn report(&self, turn: &TurnReport<'_>) {
            self.0.lock().unwrap().push((turn.turn_id.to_owned(), turn.status));
        }
    }

    #[tokio::test]
    async fn a_recorded_turn_saves_its_reply_before_completed_and_a_retry_answers_its_first_turn() {
        use crate::history::History;
        use crate::store::{Conversations, EpisodeKey, Role, SystemClock, embedded::EmbeddedStore};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let history = History::new(store.clone(), 10);
        let reports = Arc::new(Reports::default());
        let model = Arc::new(ScriptedModel::new("orch", Some(Reply::text("Hello!"))));
        let o = Arc::new(Orchestrator::new(plain("lead", model), "orch").with_reporter(reports.clone()));
        let key = EpisodeKey::new("u", "ep").unwrap();

        let options = TurnOptions { history: Some((&history, Some("r1"))), deadline: None, cancel: None };
        let started = o.start(TurnRequest::new("ep", "t1", "u", "hi"), options).await.unwrap();
        assert_eq!((started.episode_id.as_str(), started.turn_id.as_str()), ("ep", "t1"));
        let mut events = started.events;
        let mut completed = None;
        while let Some(event) = events.next().await {
            if matches!(event, Event::Completed { .. }) {
                // Released only once the reply is stored.
                let stored = store.recent_messages(&key, 10).await.unwrap();
                let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
                assert_eq!(roles, [Role::User, Role::Assistant], "{stored:?}");
                completed = Some(event);
            }
        }
        let Some(Event::Completed { status, .. }) = completed else { panic!("no completed") };
        assert_eq!(status, Status::Ok);
        assert_eq!(*reports.0.lock().unwrap(), [("t1".to_owned(), Status::Ok)], "the reporter's status");

        // The same request again: its first turn, answered again, nothing recorded twice.
        let again = o.start(TurnRequest::new("ep", "t2", "u", "hi"), options).await.unwrap();
        assert_eq!(again.turn_id, "t1");
        let events: Vec<Event> = again.events.collect().await;
        let last = events.last();
        assert!(
            matches!(last, Some(Event::Completed { turn_id, status: Status::Ok, .. }) if turn_id == "t1")
        );
        assert_eq!(store.recent_messages(&key, 10).await.unwrap().len(), 2);
    }
}
