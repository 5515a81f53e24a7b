//! Agents: anything that turns an input into a stream of [`Event`]s.
//!
//! An in-process agent is an async stream; a remote one (a separately deployed Lambda) is a byte
//! stream decoded into the same events. The orchestrator does not know the difference.
//!
//! - [`ModelAgent`]: one model call, no tools.
//! - [`LlmAgent`]: a tool loop (max steps, per-tool timeout, a step's calls run concurrently),
//!   continuing the vendor's server-side conversation through [`ResponseChains`] where the model
//!   supports it. Its tools may be agents ([`crate::agent_tool::AgentTool`]): their events stream
//!   through while they run, merged like the turn's sub-agents.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::agent_tool::{AgentCall, Slot};
use crate::event::{Event, Status, Usage};
use crate::model::{ChatModel, ChatRequest, Message, ModelDelta, ModelError, ToolCall, ToolChoice};
use crate::mux::{LiveSlotMux, MuxConfig};
use crate::tool::{Instances, SessionState, ToolContext, ToolError, ToolOutcome, ToolRegistry, run_checked};
use serde_json::Value;

/// What an agent says when its answer broke off.
pub const APOLOGY: &str = "\n\nSorry, I couldn't finish that answer. Please try again.";

/// A boxed error from a pluggable backend (a store), logged and survived.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The events of one agent run. Errors are in-band `error` events; the stream always ends.
pub type EventStream = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// What an agent is asked to do (serializable: remote agents receive it as JSON).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AgentRequest {
    /// The authenticated user.
    pub user_id: String,
    /// The conversation (agents keep vendor state per episode).
    pub episode_id: String,
    /// The query, as the orchestrator (or its guards) phrased it.
    pub query: String,
    /// Context from earlier turns, filled when the user switches intent.
    pub prior_context: Option<String>,
    /// Cross-turn conversation history (for LLM agents).
    pub history: Vec<Message>,
    /// All arguments of the tool call that started the agent.
    pub arguments: serde_json::Value,
    /// The instance's session state: a copy of its caller's, without internal keys (see
    /// [`crate::tool::SessionState`]).
    pub state: serde_json::Map<String, serde_json::Value>,
    /// How deep below the turn this instance runs: the entry agent is 0, its children 1.
    pub depth: u32,
    /// Instance numbering shared by the turn (not sent to remote agents, which number their
    /// own children).
    #[serde(skip)]
    pub instances: Instances,
}

/// An agent. `run` returns at once; the work starts when the stream is polled and stops when it
/// is dropped.
pub trait Agent: Send + Sync {
    /// The agent's name (`support`, `shopping`); instances are `name[i]`.
    fn name(&self) -> &str;

    /// Runs one instance. Every event it emits names `instance` as its source.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream;
}

impl<A: Agent + ?Sized> Agent for Arc<A> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        (**self).run(request, instance)
    }
}

/// An agent that answers with one model call: its instruction, the history, and the query.
pub struct ModelAgent {
    name: String,
    instruction: String,
    model: Arc<dyn ChatModel>,
}

impl ModelAgent {
    /// A new agent.
    pub fn new(
        name: impl Into<String>,
        instruction: impl Into<String>,
        model: Arc<dyn ChatModel>,
    ) -> ModelAgent {
        ModelAgent { name: name.into(), instruction: instruction.into(), model }
    }
}

impl Agent for ModelAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let mut messages = vec![Message::system(self.instruction.clone())];
        messages.extend(request.history);
        messages.push(Message::user(with_prior_context(request.query, request.prior_context)));
        let deltas = self.model.stream(ChatRequest { messages, ..Default::default() });
        model_events(instance, self.model.model_name().to_owned(), deltas)
    }
}

/// The query with the orchestrator's `prior_context` in front, when there is one.
pub fn with_prior_context(query: String, prior_context: Option<String>) -> String {
    match prior_context {
        Some(ctx) if !ctx.trim().is_empty() => format!("Context from earlier: {}\n\n{query}", ctx.trim()),
        _ => query,
    }
}

/// Maps a model's deltas to an agent's events; a model error becomes an `error` event and a short
/// apology the user can read.
pub fn model_events(instance: String, model: String, deltas: crate::model::DeltaStream) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut deltas = deltas;
        while let Some(delta) = deltas.next().await {
            match delta {
                Ok(ModelDelta::Text(text)) => yield Event::Text { agent: instance.clone(), text },
                Ok(ModelDelta::Reasoning(text)) => yield Event::Reasoning { agent: instance.clone(), text },
                Ok(ModelDelta::ResponseId(id)) => yield Event::ResponseId { agent: instance.clone(), id },
                Ok(ModelDelta::Usage(usage)) => {
                    yield Event::usage(instance.clone(), model.clone(), usage)
                }
                Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::ToolCall(_) | ModelDelta::Finish(_)) => {}
                Err(e) => {
                    yield Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable());
                    yield Event::text(instance.clone(), APOLOGY);
                    return;
                }
            }
        }
    })
}

/// Where an agent keeps the vendor's last response id per episode, so its next turn continues the
/// server-side conversation (OpenAI Responses `previous_response_id`) instead of resending it.
///
/// The production implementation lives on the episode record of the store (DESIGN.md §7); a
/// failing read or write is logged and the turn goes on without server-side context.
pub trait ResponseChains: Send + Sync {
    /// The last response id of `episode`, if any.
    fn last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>>;

    /// Records `response_id` as the last response of `episode`.
    fn set_last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        response_id: String,
    ) -> BoxFuture<'a, Result<(), BoxError>>;
}

/// [`ResponseChains`] in process memory: for tests, and until a store is configured.
#[derive(Debug, Default)]
pub struct MemoryResponseChains {
    ids: Mutex<HashMap<(String, String), String>>,
}

impl ResponseChains for MemoryResponseChains {
    fn last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>> {
        let key = (user_id.to_owned(), episode_id.to_owned());
        let id = self.ids.lock().expect("chains lock").get(&key).cloned();
        Box::pin(async move { Ok(id) })
    }

    fn set_last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        response_id: String,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        self.ids
            .lock()
            .expect("chains lock")
            .insert((user_id.to_owned(), episode_id.to_owned()), response_id);
        Box::pin(async { Ok(()) })
    }
}

/// Bounds of a tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopLimits {
    /// Model calls per run; the last one is offered no tools, so the model must answer.
    pub max_steps: usize,
    /// Longest a single ordinary tool call may take; past it the model gets a timeout error
    /// result. Agent tools have their own timeout ([`crate::agent_tool::AgentToolOptions`]).
    pub tool_timeout: Duration,
}

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits { max_steps: 5, tool_timeout: Duration::from_secs(10) }
    }
}

/// An agent with tools: the model calls tools, sees their results, and answers.
///
/// Each step streams the model's text, reasoning, response id and usage at once; a step's tool
/// calls run concurrently, each reported as `tool_call_start`, then `tool_result` and
/// `tool_call_end` as it finishes. Bad arguments, unknown tools, tool failures and timeouts are
/// error results the model reads on its next step.
///
/// Context: a model with server-side state (the Responses API) continues the episode's last
/// response when [`ResponseChains`] has one, and then sends only the new turn; otherwise the
/// request carries the cross-turn history. Within a run, such a model is continued step by step.
/// If the server no longer has the stored response (HTTP 400 or 404 before any output), the run
/// resends the history instead, once.
#[derive(Clone)]
pub struct LlmAgent {
    name: String,
    instruction: String,
    model: Arc<dyn ChatModel>,
    tools: Arc<ToolRegistry>,
    limits: LoopLimits,
    chains: Option<Arc<dyn ResponseChains>>,
    mux: MuxConfig,
}

impl LlmAgent {
    /// A new agent.
    pub fn new(
        name: impl Into<String>,
        instruction: impl Into<String>,
        model: Arc<dyn ChatModel>,
        tools: Arc<ToolRegistry>,
        limits: LoopLimits,
    ) -> LlmAgent {
        LlmAgent {
            name: name.into(),
            instruction: instruction.into(),
            model,
            tools,
            limits,
            chains: None,
            mux: MuxConfig::default(),
        }
    }

    /// Paces the text of concurrent agent tools as the turn paces sub-agents.
    pub fn with_mux(mut self, mux: MuxConfig) -> LlmAgent {
        self.mux = mux;
        self
    }

    /// Keeps the vendor's response id per episode in `chains` (used when the model supports it).
    pub fn with_response_chains(mut self, chains: Arc<dyn ResponseChains>) -> LlmAgent {
        self.chains = Some(chains);
        self
    }
}

impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let model_name = this.model.model_name().to_owned();
            let server_side = this.model.supports_previous_response();
            let context = ToolContext {
                user_id: request.user_id.clone(),
                episode_id: request.episode_id.clone(),
                state: SessionState::new(request.state),
                depth: request.depth,
                instances: request.instances.clone(),
            };
            let chains = this.chains.as_ref().filter(|_| server_side);
            let mut previous = match chains {
                Some(chains) => chains.last_response_id(&context.user_id, &context.episode_id).await
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "cannot read the last response id; starting afresh");
                        None
                    }),
                None => None,
            };
            let user_message = Message::user(with_prior_context(request.query, request.prior_context));
            // While continuing a stored response, the history is kept aside in case the server
            // no longer has that response.
            let (mut transcript, mut fallback) = if previous.is_some() {
                (Vec::new(), Some(request.history))
            } else {
                (request.history, None)
            };
            transcript.push(user_message.clone());
            let mut sent = 0;
            let specs = this.tools.specs();
            for step in 0..this.limits.max_steps.max(1) {
                let last_step = step + 1 >= this.limits.max_steps;
                let mut messages = vec![Message::system(this.instruction.clone())];
                let new_items = if previous.is_some() { &transcript[sent..] } else { &transcript[..] };
                messages.extend(new_items.iter().cloned());
                let offered = !specs.is_empty();
                let chat = ChatRequest {
                    messages,
                    tools: specs.clone(),
                    tool_choice: offered.then_some(if last_step { ToolChoice::None } else { ToolChoice::Auto }),
                    parallel_tool_calls: offered.then_some(true),
                    max_tokens: None,
                };
                let mut deltas = match &previous {
                    Some(id) => this.model.stream_continuing(chat, id.clone()),
                    None => this.model.stream(chat),
                };
                let mut text = String::new();
                let mut calls: Vec<ToolCall> = Vec::new();
                let mut response_id = None;
                let mut resend = false;
                while let Some(delta) = deltas.next().await {
                    match delta {
                        Ok(ModelDelta::Text(t)) => {
                            text.push_str(&t);
                            yield Event::Text { agent: instance.clone(), text: t };
                        }
                        Ok(ModelDelta::Reasoning(t)) => yield Event::Reasoning { agent: instance.clone(), text: t },
                        Ok(ModelDelta::ResponseId(id)) => {
                            response_id = Some(id.clone());
                            yield Event::ResponseId { agent: instance.clone(), id };
                        }
                        Ok(ModelDelta::Usage(usage)) => {
                            yield Event::usage(instance.clone(), model_name.clone(), usage);
                        }
                        Ok(ModelDelta::ToolCall(call)) => calls.push(call),
                        Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::Finish(_)) => {}
                        Err(ModelError::Http { status: 400 | 404, .. })
                            if fallback.is_some() && text.is_empty() && response_id.is_none() =>
                        {
                            // The stored response expired or was deleted: resend the history.
                            tracing::warn!("cannot continue the stored response; resending the history");
                            transcript = fallback.take().unwrap_or_default();
                            transcript.push(user_message.clone());
                            previous = None;
                            resend = true;
                            break;
                        }
                        Err(e) => {
                            yield Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable());
                            yield Event::text(instance.clone(), APOLOGY);
                            return;
                        }
                    }
                }
                drop(deltas);
                if resend {
                    continue;
                }
                fallback = None;
                if server_side {
                    previous = response_id.clone();
                }
                transcript.push(Message::Assistant {
                    content: (!text.is_empty()).then_some(text),
                    tool_calls: calls.clone(),
                });
                // The server has everything up to its own answer; continuing sends what follows.
                sent = transcript.len();
                if calls.is_empty() {
                    if let (Some(chains), Some(id)) = (chains, response_id) {
                        if let Err(e) = chains.set_last_response_id(&context.user_id, &context.episode_id, id).await {
                            tracing::warn!(error = %e, "cannot store the last response id");
                        }
                    }
                    return;
                }
                if last_step {
                    yield Event::error(instance.clone(), "max_steps_exceeded",
                        format!("the model still called tools after {} steps", this.limits.max_steps), false);
                    yield Event::text(instance.clone(), APOLOGY);
                    return;
                }
                for call in &calls {
                    let arguments = call.parse_arguments().unwrap_or_else(|_| call.arguments.clone().into());
                    yield Event::ToolCallStart {
                        agent: instance.clone(), call_id: call.id.clone(), name: call.name.clone(), arguments,
                    };
                }
                // Every call is a source of events, all running at once: an agent tool streams
                // its child's events, an ordinary tool only its result. They are merged as the
                // turn merges sub-agents (one agent's text at a time), and each leaves what it
                // ended with in its slot.
                let slots: Vec<Slot<CallDone>> = calls.iter().map(|_| Slot::default()).collect();
                let sources: Vec<EventStream> = calls
                    .iter()
                    .zip(&slots)
                    .map(|(call, slot)| this.start_call(call, &context, &instance, slot.clone()))
                    .collect();
                let mut merged = LiveSlotMux::new(sources, this.mux);
                while let Some(event) = merged.next().await {
                    yield event;
                }
                drop(merged);
                // The merge ends only when every source has, and each fills its slot before its
                // last events.
                let done: Vec<CallDone> =
                    slots.iter().map(|s| s.take().expect("every call's stream ran to its end")).collect();
                // Results go back in call order, whatever order they finished in.
                for (call, done) in calls.iter().zip(&done) {
                    transcript.push(Message::Tool { call_id: call.id.clone(), content: done.outcome.content() });
                }
                // Only skip-summarization agents were called, and all answered: their answers are
                // this agent's answer, with no further model call.
                if done.iter().all(|d| d.skip.is_some()) {
                    let unsent: Vec<String> = done
                        .into_iter()
                        .filter_map(|d| d.skip)
                        .filter(|s| !s.streamed && !s.answer.trim().is_empty())
                        .map(|s| s.answer)
                        .collect();
                    if !unsent.is_empty() {
                        yield Event::text(instance.clone(), unsent.join("\n\n"));
                    }
                    return;
                }
            }
            // Only a resend on the last step gets here.
            yield Event::error(instance.clone(), "max_steps_exceeded",
                format!("no answer within {} steps", this.limits.max_steps), false);
            yield Event::text(instance.clone(), APOLOGY);
        })
    }
}

/// What one tool call of a batch ended with.
struct CallDone {
    outcome: ToolOutcome,
    /// Set for a skip-summarization agent tool that answered.
    skip: Option<SkipAnswer>,
}

struct SkipAnswer {
    answer: String,
    streamed: bool,
}

/// One call of a batch, started.
enum Started {
    /// Refused before it ran (unknown tool, bad arguments).
    Refused(ToolOutcome),
    /// An ordinary tool, running under the tool timeout.
    Tool(BoxFuture<'static, ToolOutcome>),
    /// An agent tool's child instance.
    Agent { call: AgentCall, arguments: Value, skip_summarization: bool },
}

impl LlmAgent {
    /// Starts one call of a batch. The stream carries an agent tool's child events, then the
    /// call's `tool_result` and `tool_call_end`; the outcome is left in `slot` before those.
    fn start_call(
        &self,
        call: &ToolCall,
        context: &ToolContext,
        instance: &str,
        slot: Slot<CallDone>,
    ) -> EventStream {
        let started = Instant::now();
        let (agent, call_id, name) = (instance.to_owned(), call.id.clone(), call.name.clone());
        let running = match self.tools.check(call) {
            Err((arguments, error)) => Started::Refused(ToolOutcome::error(arguments, error)),
            Ok((tool, arguments)) => match tool.as_agent_tool() {
                Some(agent_tool) => Started::Agent {
                    call: agent_tool.start(arguments.clone(), context),
                    arguments,
                    skip_summarization: agent_tool.options().skip_summarization,
                },
                None => {
                    let (context, timeout) = (context.clone(), self.limits.tool_timeout);
                    Started::Tool(Box::pin(
                        async move { run_checked(tool, arguments, &context, timeout).await },
                    ))
                }
            },
        };
        Box::pin(async_stream::stream! {
            let done = match running {
                Started::Refused(outcome) => CallDone { outcome, skip: None },
                Started::Tool(outcome) => CallDone { outcome: outcome.await, skip: None },
                Started::Agent { call: AgentCall { mut events, result }, arguments, skip_summarization } => {
                    while let Some(event) = events.next().await {
                        yield event;
                    }
                    let outcome = result.take().map_or_else(
                        || Err(ToolError::Failed { tool: name.clone(), reason: "the call ended without a result".into() }),
                        |r| r.outcome.map(|value| (value, r.answer, r.streamed)),
                    );
                    match outcome {
                        Ok((value, answer, streamed)) => CallDone {
                            outcome: ToolOutcome { arguments, result: value, is_error: false },
                            skip: skip_summarization.then_some(SkipAnswer { answer, streamed }),
                        },
                        Err(error) => {
                            tracing::warn!(tool = %name, %error, "agent tool call failed");
                            CallDone { outcome: ToolOutcome::error(arguments, error), skip: None }
                        }
                    }
                }
            };
            let (result, is_error) = (done.outcome.result.clone(), done.outcome.is_error);
            slot.set(done);
            yield Event::ToolResult { agent: agent.clone(), call_id: call_id.clone(), name: name.clone(), result, is_error };
            yield Event::ToolCallEnd { agent, call_id, name, duration_ms: started.elapsed().as_millis() as u64 };
        })
    }
}

/// Wraps an instance's events with `agent_started` first and `agent_finished` last (status from
/// its own `error` events, usage summed from its own `usage` events; instances it started report
/// their own).
pub fn instrument(instance: String, query: String, inner: EventStream) -> EventStream {
    instrument_for(instance, query, inner, None)
}

/// [`instrument`], and past `timeout` the instance is dropped (cancelling its work) and ends with
/// an `error` event (`agent_timeout`, retryable) and status `error`.
pub fn instrument_for(
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
        let deadline = timeout.map(|t| started + t);
        let mut timed_out = false;
        loop {
            let next = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, inner.next()).await {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::scripted::{Part, Reply, ScriptedModel};
    use crate::tool::{Tool, ToolError};
    use serde_json::{Value, json};

    /// Sleeps `ms` (paused time in tests), then answers with its arguments.
    pub(crate) struct Wait;

    impl Tool for Wait {
        fn name(&self) -> &str {
            "wait"
        }
        fn description(&self) -> &str {
            "Waits, then echoes."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}},
                   "required": ["ms"], "additionalProperties": false})
        }
        fn call<'a>(
            &'a self,
            arguments: Value,
            context: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(arguments["ms"].as_u64().unwrap_or(0))).await;
                Ok(json!({"waited": arguments["ms"], "user": context.user_id}))
            })
        }
    }

    fn llm_agent(model: Arc<ScriptedModel>, max_steps: usize) -> LlmAgent {
        let tools = Arc::new(ToolRegistry::new(vec![Arc::new(Wait)]).unwrap());
        let limits = LoopLimits { max_steps, tool_timeout: Duration::from_millis(500) };
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
            if result == &json!({"waited": 1, "user": "u1"})));
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
        model.push(
            Reply::text("").tool_call("wait", json!({"ms": 300})).tool_call("wait", json!({"ms": 100})),
        );
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
            Reply::text("")
                .tool_call("wait", json!({"ms": "soon"}))
                .tool_call("teleport", json!({"to": "moon"})),
        );
        model.push(Reply::text("Sorry, I could not do that."));
        let events = run_llm(&llm_agent(model.clone(), 4), vec![]).await;
        let errors: Vec<&Value> = events
            .iter()
            .filter_map(|e| match e {
                Event::ToolResult { result, is_error: true, .. } => Some(result),
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
    async fn a_tool_past_its_timeout_is_an_error_result() {
        let model = Arc::new(ScriptedModel::new("m", None));
        model.push(Reply::text("").tool_call("wait", json!({"ms": 60_000})));
        model.push(Reply::text("It took too long."));
        run_llm(&llm_agent(model.clone(), 4), vec![]).await;
        assert_eq!(tool_messages(&model.requests()[1])[0]["error"]["code"], "tool_timeout");
    }

    #[tokio::test]
    async fn the_last_step_offers_no_tools_and_a_model_that_insists_is_stopped() {
        let model =
            Arc::new(ScriptedModel::new("m", Some(Reply::text("").tool_call("wait", json!({"ms": 0})))));
        let events = run_llm(&llm_agent(model.clone(), 3), vec![]).await;
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0].tool_choice, Some(ToolChoice::Auto));
        assert_eq!(requests[2].tool_choice, Some(ToolChoice::None));
        assert!(
            events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "max_steps_exceeded"))
        );
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
        let agent = ModelAgent::new("support", "be helpful", model.clone());
        let events: Vec<Event> = instrument(
            "support[1]".into(),
            "q".into(),
            agent.run(AgentRequest { query: "q".into(), ..Default::default() }, "support[1]".into()),
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
                assert_eq!(*usage, Usage { input_tokens: 7, output_tokens: 2 });
            }
            other => panic!("last event {other:?}"),
        }
        assert_eq!(model.requests()[0].system_text(), "be helpful");
    }

    #[tokio::test]
    async fn model_failure_becomes_error_event_and_apology() {
        let model = Arc::new(ScriptedModel::new("m", Some(Reply::parts(vec![Part::Error("boom".into())]))));
        let agent = ModelAgent::new("shopping", "x", model);
        let events: Vec<Event> = instrument(
            "shopping[1]".into(),
            "q".into(),
            agent.run(AgentRequest::default(), "shopping[1]".into()),
        )
        .collect()
        .await;
        assert!(
            events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "model_stream_error"))
        );
        assert!(events.iter().any(|e| matches!(e, Event::Text { text, .. } if text.contains("Sorry"))));
        assert!(matches!(events.last(), Some(Event::AgentFinished { status: Status::Error, .. })));
    }
}
