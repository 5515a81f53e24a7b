//! A step's calls: started together, at most [`MAX_CONCURRENT_CALLS`] running at once (the rest
//! wait for a place, in call order), merged live, and what each ended with.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::LlmAgent;
use super::step::StepCall;
use crate::approval::{CallState, Mode};
use crate::event::{Event, Interrupt};
use crate::item::{Item, ItemStream};
use crate::model::ToolCall;
use crate::mux::LiveSlotMux;
use crate::tool::{
    CallOptions, CallRef, DirectAnswer, ToolContext, ToolError, ToolFinish, ToolOutcome, ToolRun,
};

/// The end of a run whose last calls answered the user: the answers the client has not seen
/// yet, and an `agent_failed` error for each call of a policy's last step that failed.
pub(super) fn final_answer(
    instance: &str,
    calls: &[ToolCall],
    done: Vec<CallDone>,
    last: bool,
) -> Vec<Event> {
    let mut events = Vec::new();
    if last {
        for (call, done) in calls.iter().zip(&done) {
            if done.outcome.is_error {
                events.push(Event::error(
                    instance,
                    "agent_failed",
                    format!("`{}` did not answer; its part of the answer is missing", call.name),
                    true,
                ));
            }
        }
    }
    let unsent: Vec<String> = done
        .into_iter()
        .filter_map(|d| d.answer)
        .filter(|a| !a.streamed && !a.text.trim().is_empty())
        .map(|a| a.text)
        .collect();
    if !unsent.is_empty() {
        events.push(Event::text(instance, unsent.join("\n\n")));
    }
    events
}

/// What one tool call of a batch ended with.
pub(super) struct CallDone {
    pub(super) outcome: ToolOutcome,
    /// Set for a call whose result is the user's answer as is.
    pub(super) answer: Option<DirectAnswer>,
    /// Set for a call that did not end: it waits for a person, or its child instance does.
    pub(super) pending: Option<CallState>,
}

impl CallDone {
    /// A call that waits (`outcome` is a placeholder the model never reads).
    pub(super) fn pending(state: CallState) -> CallDone {
        CallDone {
            outcome: ToolOutcome { arguments: Value::Null, result: Value::Null, is_error: false },
            answer: None,
            pending: Some(state),
        }
    }
}

/// Calls of one step that run at once, whatever their kind; the others wait for a place. (A
/// turn's child agent instances are bounded once more across the turn, by
/// [`crate::tool::MAX_CONCURRENT_INSTANCES`].)
pub(crate) const MAX_CONCURRENT_CALLS: usize = 8;

/// The calls of one step, started: their merged events, then what each ended with
/// ([`LiveSlotMux::into_results`], in call order).
pub(super) type Batch = LiveSlotMux<CallDone>;

impl LlmAgent {
    /// Starts every call of a step (each announced before with `tool_call_start`), at most
    /// [`MAX_CONCURRENT_CALLS`] running at once: each
    /// streams its own events (an agent tool its child's), then its `tool_result` and `tool_call_end`;
    /// they are merged as the turn merges sub-agents (one agent's text at a time).
    pub(super) fn start_batch(&self, calls: &[StepCall], context: &ToolContext, instance: &str) -> Batch {
        let cap = self.limits.max_calls_per_step;
        if calls.len() > cap {
            let calls = calls.len();
            tracing::warn!(%instance, calls, cap, "a model step called more tools than allowed");
        }
        let places = Arc::new(Semaphore::new(MAX_CONCURRENT_CALLS));
        let sources: Vec<ItemStream<CallDone>> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let over = (i >= cap)
                    .then_some(ToolError::TooManyCalls { tool: call.call.name.clone(), limit: cap });
                let call = self.start_call(call, context, instance, over, false);
                Box::pin(Gated::new(call, places.clone())) as ItemStream<CallDone>
            })
            .collect();
        LiveSlotMux::new(sources, self.mux)
    }

    /// Starts one call (or, when `refused` says why it may not run, its error result): the
    /// registry checks it, the tool starts it. The stream carries the call's own events, then
    /// its `tool_result` and `tool_call_end`, then what it ended with. A call an approval rule
    /// holds back (unless `approved`) is not started: it waits for a person
    /// ([`Mode::Pause`]), is asked about while it waits ([`Mode::Ask`]), or is refused with an
    /// `approval_required` error result.
    pub(super) fn start_call(
        &self,
        call: &StepCall,
        context: &ToolContext,
        instance: &str,
        refused: Option<ToolError>,
        approved: bool,
    ) -> ItemStream<CallDone> {
        let started = Instant::now();
        let (agent, call_id, name) = (instance.to_owned(), call.call.id.clone(), call.call.name.clone());
        let options =
            CallOptions { timeout: self.limits.tool_timeout, mark_content_end: call.mark_content_end };
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            gen_ai.tool.call.id = %call_id,
            error.type = tracing::field::Empty,
        );
        // Inside the span, so an agent tool's child instance is the call's child.
        let started_run = span.in_scope(|| match (refused, self.tools.check(&call.call)) {
            (Some(error), _) => {
                let arguments =
                    call.call.parse_arguments().unwrap_or_else(|_| call.call.arguments.clone().into());
                Ok((arguments, ToolRun::failed(error)))
            }
            (None, Err(refused)) => Ok((refused.arguments, ToolRun::failed(refused.error))),
            (None, Ok((tool, arguments))) => {
                match self.approvals().rule(&name, &arguments).filter(|_| !approved) {
                    Some(rule) if context.child.approvals.mode() == Mode::Pause => {
                        Err(Box::new(self.interrupt(context, instance, &call.call, &arguments, rule)))
                    }
                    Some(rule) if context.child.approvals.mode() == Mode::Ask => {
                        let interrupt = self.interrupt(context, instance, &call.call, &arguments, rule);
                        let call = CallRef { agent: agent.clone(), call_id: call_id.clone() };
                        let run =
                            self.asked_call(interrupt, ToolContext { call, ..context.clone() }, options);
                        Ok((arguments, run))
                    }
                    Some(rule) => {
                        let error =
                            ToolError::ApprovalRequired { tool: name.clone(), reason: rule.reason.clone() };
                        Ok((arguments, ToolRun::failed(error)))
                    }
                    None => {
                        let call = CallRef { agent: agent.clone(), call_id: call_id.clone() };
                        Ok((
                            arguments.clone(),
                            tool.start(arguments, ToolContext { call, ..context.clone() }, options),
                        ))
                    }
                }
            }
        });
        let (arguments, run) = match started_run {
            Ok(started) => started,
            Err(interrupt) => return pending_call(*interrupt),
        };
        let end = CallEnd { agent, call_id, name, arguments, started };
        let items =
            CallItems { run: Some(run.items), finish: None, end: Some(end), tail: Vec::new().into_iter() };
        crate::telemetry::trace::traced(span, Box::pin(items))
    }
}

/// A call that waits for a person: its `approval_required` event, then its pending state.
pub(super) fn pending_call(interrupt: Interrupt) -> ItemStream<CallDone> {
    let done = CallDone::pending(CallState::Pending { interrupt: interrupt.clone() });
    Box::pin(futures::stream::iter([
        Item::Event(Event::ApprovalRequired(Box::new(interrupt))),
        Item::Done(done),
    ]))
}

/// What a call's end events need to know.
struct CallEnd {
    agent: String,
    call_id: String,
    name: String,
    arguments: Value,
    started: Instant,
}

impl CallEnd {
    /// The call's `tool_result` and `tool_call_end`, and what it ended with (a tool whose items
    /// ended without a result failed).
    fn items(self, finish: Option<ToolFinish>) -> Vec<Item<CallDone>> {
        let CallEnd { agent, call_id, name, arguments, started } = self;
        if let Some(paused) = finish.as_ref().and_then(|f| f.paused.clone()) {
            // Its child waits for approvals: the call has not ended.
            return vec![Item::Done(CallDone::pending(CallState::Child { suspension: paused }))];
        }
        let (outcome, answer) = match finish {
            Some(finish) => (finish.outcome, finish.answer),
            None => (
                Err(ToolError::Failed {
                    tool: name.clone(),
                    reason: "the call ended without a result".into(),
                }),
                None,
            ),
        };
        let outcome = ToolOutcome::from_result(&name, arguments, outcome);
        let (result, is_error) = (Box::new(outcome.result.clone()), outcome.is_error);
        if is_error {
            tracing::Span::current().record("error.type", "tool_error");
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        vec![
            Item::Event(Event::ToolResult {
                agent: agent.clone(),
                call_id: call_id.clone(),
                name: name.clone(),
                result,
                is_error,
            }),
            Item::Event(Event::ToolCallEnd { agent, call_id, name, duration_ms }),
            Item::Done(CallDone { answer: answer.filter(|_| !is_error), outcome, pending: None }),
        ]
    }
}

/// One call's items: the tool's own events pass through as they come, by hand rather than
/// through a generator on every event's way (docs/benchmarks-log.md, "Less work per event, each
/// cut too small to see on its own"); once the tool's items have ended and been dropped, its end
/// ([`CallEnd::items`]).
struct CallItems {
    run: Option<ItemStream<ToolFinish>>,
    finish: Option<ToolFinish>,
    end: Option<CallEnd>,
    tail: std::vec::IntoIter<Item<CallDone>>,
}

impl Stream for CallItems {
    type Item = Item<CallDone>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item<CallDone>>> {
        let this = &mut *self;
        while let Some(run) = &mut this.run {
            match std::task::ready!(run.as_mut().poll_next(cx)) {
                Some(Item::Event(event)) => return Poll::Ready(Some(Item::Event(event))),
                Some(Item::Done(finish)) => this.finish = Some(finish),
                None => {
                    this.run = None;
                    if let Some(end) = this.end.take() {
                        this.tail = end.items(this.finish.take()).into_iter();
                    }
                }
            }
        }
        Poll::Ready(this.tail.next())
    }
}

/// A call that starts once it has a place among the step's running calls, and gives it back as
/// soon as its items end (not when the batch is dropped).
struct Gated {
    wait: Option<BoxFuture<'static, Option<OwnedSemaphorePermit>>>,
    place: Option<OwnedSemaphorePermit>,
    call: ItemStream<CallDone>,
}

impl Gated {
    fn new(call: ItemStream<CallDone>, places: Arc<Semaphore>) -> Gated {
        // Semaphores are fair: calls get their places in call order.
        let wait = Box::pin(async move { places.acquire_owned().await.ok() });
        Gated { wait: Some(wait), place: None, call }
    }
}

impl Stream for Gated {
    type Item = Item<CallDone>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item<CallDone>>> {
        let this = &mut *self;
        if let Some(wait) = &mut this.wait {
            this.place = std::task::ready!(wait.as_mut().poll(cx));
            this.wait = None;
        }
        let item = std::task::ready!(this.call.as_mut().poll_next(cx));
        if item.is_none() {
            this.place = None;
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use serde_json::json;
    use tokio::time::Instant;

    use super::MAX_CONCURRENT_CALLS;
    use crate::agent::tests::wait;
    use crate::agent::{Agent, AgentRequest, LlmAgent, LoopLimits};
    use crate::event::Event;
    use crate::model::scripted::{Reply, ScriptedModel};
    use crate::tool::ToolRegistry;

    #[tokio::test(start_paused = true)]
    async fn a_step_runs_at_most_eight_plain_calls_at_once_and_the_rest_wait_their_turn() {
        let model = Arc::new(ScriptedModel::new("m", None));
        let mut sixteen = Reply::text("");
        for _ in 0..16 {
            sixteen = sixteen.tool_call("wait", json!({"ms": 100}));
        }
        model.push(sixteen);
        model.push(Reply::text("Done."));
        let tools = Arc::new(ToolRegistry::new(vec![wait()]).unwrap());
        let limits = LoopLimits { tool_timeout: Duration::from_secs(5), ..LoopLimits::default() };
        let agent = LlmAgent::new("a", "use tools", model, tools, limits);
        let started = Instant::now();
        let request = AgentRequest { query: "go".into(), ..Default::default() };
        let events: Vec<Event> = agent.run(request, "a[1]".into()).collect().await;
        assert_eq!(MAX_CONCURRENT_CALLS, 8);
        assert_eq!(started.elapsed(), Duration::from_millis(200), "two waves of eight, not one of sixteen");
        let ok = events.iter().filter(|e| matches!(e, Event::ToolResult { is_error: false, .. })).count();
        assert_eq!(ok, 16, "every call ran");
    }
}
