//! Child instances: where each starts ([`start_child`]), how many run at once, and the
//! `agent_started` … `agent_finished` frame around every instance's events.

use std::pin::Pin;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::Instant;

use super::{Agent, AgentRequest};
use crate::event::{Event, EventStream, Status, Usage};
use crate::tool::{ToolContext, ToolError};

/// How deep agents may nest below the turn unless configured otherwise: the entry agent's
/// children are level 1.
pub(crate) const DEFAULT_MAX_DEPTH: u32 = 3;

/// What a child instance sees of the conversation its caller answers in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChildContext {
    /// Only its input (agents called as tools: docs/agents.md, "Your own agents (agents as
    /// tools)").
    #[default]
    Isolated,
    /// The cross-turn history and the previous turn too (the sub-agents of a routing entry
    /// agent: docs/architecture.md, "A turn, step by step").
    Conversation,
}

/// How a child instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InstanceOptions {
    /// Longest one instance may run; past it the instance is stopped with an `agent_timeout`
    /// error.
    pub timeout: Option<Duration>,
    /// Deepest level an instance may start at (the turn's entry agent is level 0).
    pub max_depth: u32,
    /// What it sees of the conversation.
    pub context: ChildContext,
}

impl Default for InstanceOptions {
    fn default() -> Self {
        InstanceOptions { timeout: None, max_depth: DEFAULT_MAX_DEPTH, context: ChildContext::Isolated }
    }
}

/// What a child instance is asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChildInput {
    /// Its query.
    pub query: String,
    /// Context from earlier turns, if its caller gave any.
    pub prior_context: Option<String>,
    /// The arguments of the call that starts it.
    pub arguments: Value,
}

/// Starts one child instance of `agent` for the caller in `parent` (the call of tool `tool`):
/// the instance is named `Name[i]` from the turn's numbering, runs one level deeper in a session
/// copied from its caller's without internal keys, sees the conversation or not as `options`
/// say, and is stopped past its timeout. Every child instance starts here.
///
/// A call past `options.max_depth` is refused with [`ToolError::DepthExceeded`].
pub(crate) fn start_child(
    agent: &dyn Agent,
    tool: &str,
    parent: &ToolContext,
    input: ChildInput,
    options: &InstanceOptions,
) -> Result<(String, EventStream), ToolError> {
    let depth = parent.child.depth + 1;
    if depth > options.max_depth {
        return Err(ToolError::DepthExceeded { tool: tool.to_owned(), max_depth: options.max_depth });
    }
    // A resumed turn starts a paused child again under its own name.
    let instance = match &parent.child.resumes {
        Some(paused) if parent.child.approvals.resume_of(paused).is_some_and(|s| s.agent == agent.name()) => {
            paused.clone()
        }
        _ => parent.child.instances.next(agent.name()),
    };
    parent.child.approvals.started(&parent.call.agent, &instance);
    let (history, previous) = match options.context {
        ChildContext::Isolated => (Vec::new(), None),
        ChildContext::Conversation => {
            (parent.child.conversation.history.clone(), parent.child.conversation.previous.clone())
        }
    };
    let request = AgentRequest {
        user_id: parent.user_id.clone(),
        episode_id: parent.episode_id.clone(),
        query: input.query,
        prior_context: input.prior_context,
        image: None,
        history,
        previous,
        arguments: input.arguments,
        state: parent.state.for_child(),
        depth,
        instances: parent.child.instances.clone(),
        approvals: parent.child.approvals.clone(),
    };
    let events = run_instance(agent, instance.clone(), request, options.timeout);
    // At most `MAX_CONCURRENT_INSTANCES` child instances of one turn run at once; the others
    // wait for a place (their timeout runs from their start).
    let place = Box::pin(parent.child.instances.permits().acquire_owned());
    Ok((instance, Box::pin(Admitted { place: Some(place), held: None, events })))
}

/// A child instance's events, polled once the instance holds one of its turn's places for
/// running instances, which it keeps until its events end (or are dropped). Written by hand,
/// not as a generator: every event of the instance passes through it, and a generator's poll
/// costs more than this one's (docs/benchmarks-log.md, "Less work per event, each cut too small
/// to see on its own").
struct Admitted {
    place: Option<BoxFuture<'static, Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>>>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
    events: EventStream,
}

impl Stream for Admitted {
    type Item = Event;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        let this = &mut *self;
        if let Some(place) = &mut this.place {
            // The turn never closes its semaphore; were it closed, the instance would just run.
            this.held = std::task::ready!(place.as_mut().poll(cx)).ok();
            this.place = None;
        }
        let next = this.events.as_mut().poll_next(cx);
        if let std::task::Poll::Ready(None) = next {
            // Its events have ended: the place goes to the next instance waiting for one now,
            // not when whoever merges the streams drops this one.
            this.held = None;
        }
        next
    }
}

/// Runs one instance between `agent_started` and `agent_finished`, stopped past `timeout`.
pub(crate) fn run_instance(
    agent: &dyn Agent,
    instance: String,
    request: AgentRequest,
    timeout: Option<Duration>,
) -> EventStream {
    let query = request.query.clone();
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", agent.name()),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent.name(),
        baton.agent.instance = %instance,
        baton.agent.depth = request.depth,
    );
    let events =
        span.in_scope(|| instrument_for(instance.clone(), query, agent.run(request, instance), timeout));
    crate::telemetry::trace::traced(span, events)
}

/// Wraps an instance's events with `agent_started` first and `agent_finished` last (status from
/// its own `error` events, usage summed from its own `usage` events; instances it started report
/// their own); past `timeout` the instance is dropped (cancelling its work) and ends with an
/// `error` event (`agent_timeout`, retryable) and status `error`.
pub(crate) fn instrument_for(
    instance: String,
    query: String,
    inner: EventStream,
    timeout: Option<Duration>,
) -> EventStream {
    Box::pin(async_stream::stream! {
        let started = Instant::now();
        yield Event::AgentStarted { agent: instance.clone(), query };
        let mut usage = Usage::default();
        let mut status = Status::Ok;
        let mut inner = inner;
        let mut deadline = timeout.map(|t| crate::bounded::Deadline::after(started, t));
        let mut timed_out = false;
        loop {
            let next = match &mut deadline {
                Some(deadline) => match deadline.next(&mut inner).await {
                    Ok(next) => next,
                    Err(_) => {
                        timed_out = true;
                        break;
                    }
                },
                None => inner.next().await,
            };
            let Some(event) = next else { break };
            match &event {
                Event::Usage { agent, usage: u, .. } if *agent == instance => usage.add(*u),
                Event::Error { agent, .. } if *agent == instance => status = Status::Error,
                Event::Suspended { agent } if *agent == instance => status = status.worst(Status::Interrupted),
                _ => {}
            }
            yield event;
        }
        if timed_out {
            drop(inner);
            status = Status::Error;
            let limit = timeout.unwrap_or_default().as_millis();
            yield Event::error(instance.clone(), "agent_timeout",
                format!("`{instance}` did not finish within {limit} ms and was stopped"), true);
        }
        yield Event::AgentFinished {
            agent: instance,
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            usage,
        };
    })
}
