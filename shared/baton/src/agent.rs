//! Agents: anything that turns a request into a stream of [`Event`]s.
//!
//! An in-process agent is an async stream; a remote one (a separately deployed Lambda) is a byte
//! stream decoded into the same events. Whoever runs an agent does not know the difference.
//!
//! - [`Agent`]: the trait; [`AgentRequest`]: what an instance is asked.
//! - [`LlmAgent`]: a tool loop (max steps, per-tool timeout, a step's calls run concurrently and
//!   stream through the live-slot merge), continuing the vendor's server-side conversation
//!   through [`ResponseChains`] where the model supports it. A [`StepPolicy`] may shape its first
//!   model step: the routing policy (module `routing`) does, for an entry agent that routes.
//! - [`start_child`]: the one place a child instance starts (its name, depth, session,
//!   conversation, timeout); [`run_instance`] runs an instance between `agent_started` and
//!   `agent_finished`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::Instant;

use crate::conversation::{Conversation, PreviousTurn};
use crate::event::{Event, EventStream, Status, Usage};
use crate::model::{ChatModel, ChatRequest, Message, ModelDelta, ModelError, ToolCall, ToolChoice};
use crate::mux::{LiveSlotMux, MuxConfig};
use crate::tool::{
    CallOptions, CallRef, DirectAnswer, Instances, SessionState, Slot, ToolContext, ToolError, ToolOutcome,
    ToolRegistry, ToolRun,
};

/// What an agent says when its answer broke off.
pub const APOLOGY: &str = "\n\nSorry, I couldn't finish that answer. Please try again.";

/// A boxed error from a pluggable backend (a store), logged and survived.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What an agent is asked to do (serializable: remote agents receive it as JSON).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AgentRequest {
    /// The authenticated user.
    pub user_id: String,
    /// The conversation (agents keep vendor state per episode).
    pub episode_id: String,
    /// The query: the user's words for the entry agent, its caller's for a child.
    pub query: String,
    /// Context from earlier turns, filled when the user switches intent.
    pub prior_context: Option<String>,
    /// The image the user attached, if any (the entry agent's only).
    pub image: Option<crate::image::Image>,
    /// Cross-turn conversation history (for LLM agents that see the conversation).
    pub history: Vec<Message>,
    /// The previous turn, for a routing policy's guards.
    pub previous: Option<PreviousTurn>,
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

/// The query with the orchestrator's `prior_context` in front, when there is one.
pub fn with_prior_context(query: String, prior_context: Option<String>) -> String {
    match prior_context {
        Some(ctx) if !ctx.trim().is_empty() => format!("Context from earlier: {}\n\n{query}", ctx.trim()),
        _ => query,
    }
}

/// The user message an LLM agent's model reads: the query, with the caller's `prior_context`
/// before it and the attached image's note after it; the image itself, when sent, as an image
/// content part.
pub fn user_message(request: &AgentRequest) -> Message {
    let mut content = with_prior_context(request.query.clone(), request.prior_context.clone());
    let Some(image) = &request.image else { return Message::user(content) };
    if let Some(note) = image.note() {
        content.push_str(&format!("\n{note}"));
    }
    Message::User { content, images: image.url.iter().cloned().collect() }
}

/// How deep agents may nest below the turn unless configured otherwise: the entry agent's
/// children are level 1.
pub const DEFAULT_MAX_DEPTH: u32 = 3;

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
pub struct InstanceOptions {
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
pub struct ChildInput {
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
pub fn start_child(
    agent: &dyn Agent,
    tool: &str,
    parent: &ToolContext,
    input: ChildInput,
    options: &InstanceOptions,
) -> Result<(String, EventStream), ToolError> {
    let depth = parent.depth + 1;
    if depth > options.max_depth {
        return Err(ToolError::DepthExceeded { tool: tool.to_owned(), max_depth: options.max_depth });
    }
    let instance = parent.instances.next(agent.name());
    let (history, previous) = match options.context {
        ChildContext::Isolated => (Vec::new(), None),
        ChildContext::Conversation => {
            (parent.conversation.history.clone(), parent.conversation.previous.clone())
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
        instances: parent.instances.clone(),
    };
    let events = run_instance(agent, instance.clone(), request, options.timeout);
    // At most `MAX_CONCURRENT_INSTANCES` child instances of one turn run at once; the others
    // wait for a place (their timeout runs from their start).
    let place = Box::pin(parent.instances.permits().acquire_owned());
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
pub fn run_instance(
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

/// Where an agent keeps the vendor's last response id per episode, so its next turn continues the
/// server-side conversation (OpenAI Responses `previous_response_id`) instead of resending it.
///
/// The production implementation lives on the episode record of the store (docs/storage.md); a
/// failing read or write is logged and the turn goes on without server-side context.
pub trait ResponseChains: Send + Sync {
    /// The last response id of agent `agent` (its name, not an instance) in `episode`, if any.
    fn last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>>;

    /// Records `response_id` as agent `agent`'s last response in `episode`.
    fn set_last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        response_id: String,
    ) -> BoxFuture<'a, Result<(), BoxError>>;
}

/// [`ResponseChains`] in process memory: for tests, and until a store is configured.
#[derive(Debug, Default)]
pub struct MemoryResponseChains {
    /// By user, episode and agent name.
    ids: Mutex<HashMap<(String, String, String), String>>,
}

impl ResponseChains for MemoryResponseChains {
    fn last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>> {
        let key = (user_id.to_owned(), episode_id.to_owned(), agent.to_owned());
        let id = self.ids.lock().expect("chains lock").get(&key).cloned();
        Box::pin(async move { Ok(id) })
    }

    fn set_last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        response_id: String,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        self.ids
            .lock()
            .expect("chains lock")
            .insert((user_id.to_owned(), episode_id.to_owned(), agent.to_owned()), response_id);
        Box::pin(async { Ok(()) })
    }
}

/// Bounds of a tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopLimits {
    /// Model calls per run; the last one is offered no tools, so the model must answer.
    pub max_steps: usize,
    /// Longest a single ordinary tool call may take; past it the model gets a timeout error
    /// result. Agent tools run under their agent's own timeout.
    pub tool_timeout: Duration,
    /// Tool calls one model step may start; the calls past it get a `too_many_calls` error
    /// result the model reads (and a warning in the log), never a silent drop.
    pub max_calls_per_step: usize,
}

/// Tool calls one model step may start unless configured otherwise.
pub const DEFAULT_MAX_CALLS_PER_STEP: usize = 16;

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits {
            max_steps: 5,
            tool_timeout: Duration::from_secs(10),
            max_calls_per_step: DEFAULT_MAX_CALLS_PER_STEP,
        }
    }
}

/// What a [`StepPolicy`] gets for one model step.
#[derive(Debug, Clone)]
pub struct StepInput {
    /// The instance whose step it is: the name its events carry.
    pub instance: String,
    /// The request the loop would send to the model.
    pub request: ChatRequest,
    /// The user's words: the instance's query, without context or image notes.
    pub message: String,
    /// The previous turn, when the instance sees the conversation.
    pub previous: Option<PreviousTurn>,
    /// What the user's attached image shows, when the client said.
    pub image: Option<crate::image::ImageKind>,
}

/// One item of a model step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepItem {
    /// An event for the client now (text, reasoning, usage, response id, errors).
    Event(Event),
    /// The step is decided.
    Decided(StepDecision),
    /// The model failed and an `error` event was already sent: the run ends.
    Failed,
}

/// What a model step decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepDecision {
    /// The model's text, for the transcript.
    pub text: String,
    /// The calls to run.
    pub calls: Vec<StepCall>,
    /// The model's response id, if it sent one.
    pub response_id: Option<String>,
    /// No model step follows these calls: their answers are the agent's answer (a routing
    /// policy dispatches, and its sub-agents answer the user).
    pub last: bool,
}

/// One call a model step decided.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCall {
    /// The call, with the arguments the tool gets.
    pub call: ToolCall,
    /// Its user-visible content ends with a `content_end` boundary.
    pub mark_content_end: bool,
}

impl From<ToolCall> for StepCall {
    fn from(call: ToolCall) -> StepCall {
        StepCall { call, mark_content_end: false }
    }
}

/// The items of one model step.
pub type StepStream = Pin<Box<dyn Stream<Item = StepItem> + Send>>;

/// A policy hooked into an agent's model step: it calls the model itself, and decides which
/// text the client sees and which calls run. The routing policy (module `routing`) is one:
/// preamble gate, failsafe re-ask, guards and the fastpath allowlist.
pub trait StepPolicy: Send + Sync {
    /// Runs the first model step of a run: `input.request` is what the loop would send.
    fn first_step(&self, model: Arc<dyn ChatModel>, input: StepInput) -> StepStream;
}

/// What a [`ForkPolicy`] gets: the run about to start.
#[derive(Debug, Clone)]
pub struct ForkInput {
    /// The instance whose run it is: the name its events carry.
    pub instance: String,
    /// The user message the loop's model would read (with prior context and image notes).
    pub message: Message,
    /// The cross-turn history the instance sees.
    pub history: Vec<Message>,
    /// The run's tool context: children start from it.
    pub context: ToolContext,
}

/// One item of a [`ForkPolicy`]'s work.
#[derive(Debug, Clone, PartialEq)]
pub enum ForkItem {
    /// An event of the run (the fork's progress, its usage, its answer).
    Event(Event),
    /// The fork answered: the run ends without its tool loop.
    Answered,
}

/// The items of a fork.
pub type ForkStream = Pin<Box<dyn Stream<Item = ForkItem> + Send>>;

/// A policy that may answer a whole run before the tool loop starts (the mini-agents' fan-out,
/// module `mini`). If its stream ends without [`ForkItem::Answered`], the loop runs as usual.
pub trait ForkPolicy: Send + Sync {
    /// Decides whether to fork the run of `agent`, and if so answers it.
    fn fork(&self, agent: &LlmAgent, input: ForkInput) -> ForkStream;
}

/// An agent with tools: the model calls tools, sees their results, and answers.
///
/// Each step streams the model's text, reasoning, response id and usage at once; a step's tool
/// calls run concurrently, each reported as `tool_call_start`, then `tool_result` and
/// `tool_call_end` as it finishes. Bad arguments, unknown tools, tool failures and timeouts are
/// error results the model reads on its next step. Every tool is started the same way
/// ([`crate::tool::Tool::start`]): an agent tool streams its child's events through the
/// live-slot merge while it runs.
///
/// A step whose calls all answered the user as is (`skip_summarization` agent tools), or that a
/// [`StepPolicy`] marked last, ends the run without another model call; a call of a last step
/// that failed is reported as an `agent_failed` error of this instance (its part of the answer
/// is missing).
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
    policy: Option<Arc<dyn StepPolicy>>,
    fork: Option<Arc<dyn ForkPolicy>>,
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
            policy: None,
            fork: None,
        }
    }

    /// Paces the text of concurrent agent tools as configured.
    pub fn with_mux(mut self, mux: MuxConfig) -> LlmAgent {
        self.mux = mux;
        self
    }

    /// Keeps the vendor's response id per episode in `chains` (used when the model supports it).
    pub fn with_response_chains(mut self, chains: Arc<dyn ResponseChains>) -> LlmAgent {
        self.chains = Some(chains);
        self
    }

    /// Shapes the first model step of every run with `policy`.
    pub fn with_policy(mut self, policy: Arc<dyn StepPolicy>) -> LlmAgent {
        self.policy = Some(policy);
        self
    }

    /// Lets `fork` answer a run before the tool loop (see [`ForkPolicy`]).
    pub fn with_fork(mut self, fork: Arc<dyn ForkPolicy>) -> LlmAgent {
        self.fork = Some(fork);
        self
    }

    /// The agent's model.
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        &self.model
    }

    /// The agent's instruction (system prompt).
    pub fn instruction(&self) -> &str {
        &self.instruction
    }

    /// The agent's tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// This agent narrowed to one part of a request: the same name, model, limits and pacing,
    /// with `instruction` and `tools`, and nothing that shapes or forks its runs or continues a
    /// stored response (no step policy, no fork policy, no response chains).
    pub fn focused(&self, instruction: String, tools: Arc<ToolRegistry>) -> LlmAgent {
        LlmAgent::new(self.name.clone(), instruction, self.model.clone(), tools, self.limits)
            .with_mux(self.mux)
    }
}

/// One step's items, as the loop reads them.
enum Step {
    Item(StepItem),
    /// The stored response is gone: resend the history.
    Resend,
}

/// What a run carries from step to step.
struct Transcript {
    /// Messages after the system prompt.
    messages: Vec<Message>,
    /// How many of them the server already has (when continuing a stored response).
    sent: usize,
    /// The stored response this run continues, if any.
    previous: Option<String>,
    /// The history, kept aside while continuing a stored response in case the server no longer
    /// has it.
    fallback: Option<Vec<Message>>,
    user_message: Message,
}

impl Transcript {
    fn new(history: Vec<Message>, user_message: Message, previous: Option<String>) -> Transcript {
        let (mut messages, fallback) =
            if previous.is_some() { (Vec::new(), Some(history)) } else { (history, None) };
        messages.push(user_message.clone());
        Transcript { messages, sent: 0, previous, fallback, user_message }
    }

    /// Drops the stored response and resends the history.
    fn resend_history(&mut self) {
        self.messages = self.fallback.take().unwrap_or_default();
        self.messages.push(self.user_message.clone());
        self.previous = None;
    }

    /// Records a decided step: the model's answer joins the transcript (the server now has
    /// everything up to it); returns its calls.
    fn record(&mut self, decision: &StepDecision, server_side: bool) -> Vec<ToolCall> {
        self.fallback = None;
        if server_side {
            self.previous = decision.response_id.clone();
        }
        let calls: Vec<ToolCall> = decision.calls.iter().map(|c| c.call.clone()).collect();
        self.messages.push(Message::Assistant {
            content: (!decision.text.is_empty()).then(|| decision.text.clone()),
            tool_calls: calls.clone(),
        });
        self.sent = self.messages.len();
        calls
    }

    /// The messages to send: after the stored response only what follows it.
    fn to_send(&self) -> &[Message] {
        if self.previous.is_some() { &self.messages[self.sent..] } else { &self.messages[..] }
    }
}

/// What a run starts from.
struct Run {
    context: ToolContext,
    transcript: Transcript,
    /// The user's words (the instance's query).
    message: String,
    previous_turn: Option<PreviousTurn>,
    /// What the attached image shows, when the client said.
    image: Option<crate::image::ImageKind>,
}

impl LlmAgent {
    /// The run's tool context and transcript: the stored response to continue, if `chains` has
    /// one, else the history.
    async fn begin(&self, request: AgentRequest, chains: Option<&dyn ResponseChains>) -> Run {
        let previous_id = match chains {
            Some(chains) => chains
                .last_response_id(&request.user_id, &request.episode_id, &self.name)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot read the last response id; starting afresh");
                    None
                }),
            None => None,
        };
        let user_message = user_message(&request);
        let message = request.query.clone();
        let previous_turn = request.previous.clone();
        let image = request.image.as_ref().and_then(|i| i.kind);
        let context = ToolContext {
            user_id: request.user_id,
            episode_id: request.episode_id,
            state: SessionState::new(request.state),
            depth: request.depth,
            instances: request.instances,
            conversation: Arc::new(Conversation {
                history: request.history.clone(),
                previous: request.previous,
            }),
            call: CallRef::default(),
        };
        let transcript = Transcript::new(request.history, user_message, previous_id);
        Run { context, transcript, message, previous_turn, image }
    }

    /// The request of one step: the instruction, what the model has not seen yet, and the tools
    /// (none may be called on the last step).
    fn chat_request(&self, transcript: &Transcript, last_step: bool) -> ChatRequest {
        let mut messages = vec![Message::system(self.instruction.clone())];
        messages.extend(transcript.to_send().iter().cloned());
        let specs = self.tools.specs();
        let offered = !specs.is_empty();
        ChatRequest {
            messages,
            tools: specs,
            tool_choice: offered.then_some(if last_step { ToolChoice::None } else { ToolChoice::Auto }),
            parallel_tool_calls: offered.then_some(true),
            max_tokens: None,
            response_format: None,
        }
    }
}

impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let server_side = this.model.keeps_conversations();
            let chains = this.chains.clone().filter(|_| server_side);
            let history = this.fork.as_ref().map(|_| request.history.clone());
            let Run { context, mut transcript, message, previous_turn, image } = Box::pin(this.begin(request, chains.as_deref())).await;
            if let (Some(fork), Some(history)) = (&this.fork, history) {
                let input = ForkInput {
                    instance: instance.clone(), message: transcript.user_message.clone(), history, context: context.clone(),
                };
                let mut items = fork.fork(&this, input);
                while let Some(item) = items.next().await {
                    match item {
                        ForkItem::Event(event) => yield event,
                        ForkItem::Answered => return,
                    }
                }
            }
            let max_steps = this.limits.max_steps.max(1);
            for step in 0..max_steps {
                let last_step = step + 1 >= max_steps;
                let chat = this.chat_request(&transcript, last_step);
                let mut items = match (&this.policy, step) {
                    (Some(policy), 0) => {
                        let input = StepInput {
                            instance: instance.clone(),
                            request: chat,
                            message: message.clone(),
                            previous: previous_turn.clone(),
                            image,
                        };
                        Box::pin(policy.first_step(this.model.clone(), input).map(Step::Item))
                    }
                    _ => this.model_step(chat, transcript.previous.clone(), transcript.fallback.is_some(), instance.clone()),
                };
                let mut decision = None;
                let mut resend = false;
                while let Some(item) = items.next().await {
                    match item {
                        Step::Item(StepItem::Event(event)) => yield event,
                        Step::Item(StepItem::Decided(d)) => decision = Some(d),
                        Step::Item(StepItem::Failed) => return,
                        Step::Resend => resend = true,
                    }
                }
                drop(items);
                if resend {
                    transcript.resend_history();
                    continue;
                }
                let Some(decision) = decision else { return };
                let calls = transcript.record(&decision, server_side);
                if calls.is_empty() {
                    if let (Some(chains), Some(id)) = (&chains, decision.response_id) {
                        if let Err(e) = chains.set_last_response_id(&context.user_id, &context.episode_id, &this.name, id).await {
                            tracing::warn!(error = %e, "cannot store the last response id");
                        }
                    }
                    return;
                }
                if last_step && !decision.last {
                    yield Event::error(instance.clone(), "max_steps_exceeded",
                        format!("the model still called tools after {} steps", this.limits.max_steps), false);
                    yield Event::text(instance.clone(), APOLOGY);
                    return;
                }
                for call in &decision.calls {
                    let arguments =
                        Box::new(call.call.parse_arguments().unwrap_or_else(|_| call.call.arguments.clone().into()));
                    yield Event::ToolCallStart {
                        agent: instance.clone(), call_id: call.call.id.clone(), name: call.call.name.clone(), arguments,
                    };
                }
                let mut batch = this.start_batch(&decision.calls, &context, &instance);
                while let Some(event) = batch.events.next().await {
                    yield event;
                }
                drop(batch.events);
                // The merge ends only when every call's stream has, and each fills its slot
                // before its last events.
                let done: Vec<CallDone> =
                    batch.slots.iter().map(|s| s.take().expect("every call's stream ran to its end")).collect();
                // Results go back in call order, whatever order they finished in.
                for (call, done) in calls.iter().zip(&done) {
                    transcript.messages.push(Message::Tool { call_id: call.id.clone(), content: done.outcome.content() });
                }
                if decision.last || done.iter().all(|d| d.answer.is_some()) {
                    for event in final_answer(&instance, &calls, done, decision.last) {
                        yield event;
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

/// The end of a run whose last calls answered the user: the answers the client has not seen
/// yet, and an `agent_failed` error for each call of a policy's last step that failed.
fn final_answer(instance: &str, calls: &[ToolCall], done: Vec<CallDone>, last: bool) -> Vec<Event> {
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
struct CallDone {
    outcome: ToolOutcome,
    /// Set for a call whose result is the user's answer as is.
    answer: Option<DirectAnswer>,
}

/// The calls of one step, started: their merged events, and where each leaves its outcome.
struct Batch {
    events: LiveSlotMux,
    slots: Vec<Slot<CallDone>>,
}

impl LlmAgent {
    /// The loop's own model step: text, reasoning, response id and usage stream at once; the
    /// calls are collected. A model error ends the run with an `error` event and an apology.
    fn model_step(
        &self,
        chat: ChatRequest,
        previous: Option<String>,
        may_resend: bool,
        instance: String,
    ) -> Pin<Box<dyn Stream<Item = Step> + Send>> {
        let model = self.model.clone();
        Box::pin(async_stream::stream! {
            let model_name = model.model_name().to_owned();
            let mut deltas = match previous {
                Some(id) => model.stream_continuing(chat, id),
                None => model.stream(chat),
            };
            let mut decision = StepDecision::default();
            while let Some(delta) = deltas.next().await {
                match delta {
                    Ok(ModelDelta::Text(t)) => {
                        decision.text.push_str(&t);
                        yield Step::Item(StepItem::Event(Event::Text { agent: instance.clone(), text: t }));
                    }
                    Ok(ModelDelta::Reasoning(t)) => {
                        yield Step::Item(StepItem::Event(Event::Reasoning { agent: instance.clone(), text: t }));
                    }
                    Ok(ModelDelta::ResponseId(id)) => {
                        decision.response_id = Some(id.clone());
                        yield Step::Item(StepItem::Event(Event::ResponseId { agent: instance.clone(), id }));
                    }
                    Ok(ModelDelta::Usage(usage)) => {
                        yield Step::Item(StepItem::Event(Event::usage(instance.clone(), model_name.clone(), usage)));
                    }
                    Ok(ModelDelta::ToolCall(call)) => decision.calls.push(call.into()),
                    Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::Finish(_)) => {}
                    Err(ModelError::Http { status: 400 | 404, .. })
                        if may_resend && decision.text.is_empty() && decision.response_id.is_none() =>
                    {
                        // The stored response expired or was deleted: resend the history.
                        tracing::warn!("cannot continue the stored response; resending the history");
                        yield Step::Resend;
                        return;
                    }
                    Err(e) => {
                        yield Step::Item(StepItem::Event(Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable())));
                        yield Step::Item(StepItem::Event(Event::text(instance.clone(), APOLOGY)));
                        yield Step::Item(StepItem::Failed);
                        return;
                    }
                }
            }
            yield Step::Item(StepItem::Decided(decision));
        })
    }

    /// Starts every call of a step at once (each announced before with `tool_call_start`): each
    /// streams its own events (an agent tool its child's), then its `tool_result` and `tool_call_end`;
    /// they are merged as the turn merges sub-agents (one agent's text at a time).
    fn start_batch(&self, calls: &[StepCall], context: &ToolContext, instance: &str) -> Batch {
        let cap = self.limits.max_calls_per_step;
        if calls.len() > cap {
            tracing::warn!(%instance, calls = calls.len(), cap, "a model step called more tools than allowed");
        }
        let slots: Vec<Slot<CallDone>> = calls.iter().map(|_| Slot::default()).collect();
        let sources: Vec<EventStream> = calls
            .iter()
            .zip(&slots)
            .enumerate()
            .map(|(i, (call, slot))| {
                let over = (i >= cap)
                    .then_some(ToolError::TooManyCalls { tool: call.call.name.clone(), limit: cap });
                self.start_call(call, context, instance, slot.clone(), over)
            })
            .collect();
        Batch { events: LiveSlotMux::new(sources, self.mux), slots }
    }

    /// Starts one call (or, when `refused` says why it may not run, its error result): the
    /// registry checks it, the tool starts it. The stream carries the call's own events, then
    /// its `tool_result` and `tool_call_end`; the outcome is left in `slot` before those.
    fn start_call(
        &self,
        call: &StepCall,
        context: &ToolContext,
        instance: &str,
        slot: Slot<CallDone>,
        refused: Option<ToolError>,
    ) -> EventStream {
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
        let (arguments, run) = span.in_scope(|| match (refused, self.tools.check(&call.call)) {
            (Some(error), _) => {
                let arguments =
                    call.call.parse_arguments().unwrap_or_else(|_| call.call.arguments.clone().into());
                (arguments, ToolRun::failed(error))
            }
            (None, Err(refused)) => (refused.arguments, ToolRun::failed(refused.error)),
            (None, Ok((tool, arguments))) => {
                let call = CallRef { agent: agent.clone(), call_id: call_id.clone() };
                (arguments.clone(), tool.start(arguments, ToolContext { call, ..context.clone() }, options))
            }
        });
        // The call's own events pass through `chain` (no generator on every event's way), then
        // its result once they have ended and been dropped (docs/benchmarks-log.md, "Less work
        // per event, each cut too small to see on its own").
        let ToolRun { events, finish } = run;
        let end = futures::stream::once(async move {
            let (outcome, answer) = match finish.take() {
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
            slot.set(CallDone { answer: answer.filter(|_| !is_error), outcome });
            if is_error {
                tracing::Span::current().record("error.type", "tool_error");
            }
            let duration_ms = started.elapsed().as_millis() as u64;
            [
                Event::ToolResult {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    name: name.clone(),
                    result,
                    is_error,
                },
                Event::ToolCallEnd { agent, call_id, name, duration_ms },
            ]
        })
        .flat_map(futures::stream::iter);
        crate::telemetry::trace::traced(span, Box::pin(events.chain(end)))
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
        let limits =
            LoopLimits { max_steps, tool_timeout: Duration::from_millis(500), ..LoopLimits::default() };
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
        let refused: Vec<&Value> =
            results.iter().filter(|r| r["error"]["code"] == "too_many_calls").collect();
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
        let agent = crate::routing::testing::plain("support", model.clone());
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
