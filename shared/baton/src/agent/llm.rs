//! [`LlmAgent`]: the tool loop, step by step, and what a run carries from step to step.

use std::sync::Arc;

use futures::StreamExt;

use super::approval::{ApprovalPolicy, suspended_calls};
use super::batch::{CallDone, final_answer};
use super::chains::ResponseChains;
use super::step::{
    ForkInput, ForkPolicy, LoopLimits, ModelReply, StepCall, StepDecision, StepInput, StepPolicy,
    model_events,
};
use super::{APOLOGY, Agent, AgentRequest, Item, user_message};
use crate::approval::Suspension;
use crate::conversation::{Conversation, PreviousTurn};
use crate::event::{Event, EventStream};
use crate::model::{ChatModel, ChatRequest, Message, ModelError, ToolCall, ToolChoice, ToolSpec};
use crate::mux::MuxConfig;
use crate::tool::{CallRef, SessionState, ToolContext, ToolRegistry};

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
    pub(super) name: String,
    pub(super) instruction: String,
    pub(super) model: Arc<dyn ChatModel>,
    pub(super) tools: Arc<ToolRegistry>,
    pub(super) limits: LoopLimits,
    chains: Option<Arc<dyn ResponseChains>>,
    pub(super) mux: MuxConfig,
    policy: Option<Arc<dyn StepPolicy>>,
    fork: Option<Arc<dyn ForkPolicy>>,
    approvals: Arc<ApprovalPolicy>,
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
            approvals: Arc::default(),
        }
    }

    /// Holds back the calls `approvals` says need a person's approval (docs/approvals.md).
    pub fn with_approvals(mut self, approvals: Arc<ApprovalPolicy>) -> LlmAgent {
        self.approvals = approvals;
        self
    }

    /// Which of its calls need a person's approval.
    pub fn approvals(&self) -> &Arc<ApprovalPolicy> {
        &self.approvals
    }

    /// Paces the text of concurrent agent tools as configured.
    pub fn with_mux(mut self, mux: MuxConfig) -> LlmAgent {
        self.mux = mux;
        self
    }

    /// Keeps the vendor's response id per episode in `chains` (used when the model can continue a
    /// stored response).
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

    /// This agent narrowed to one part of a request: the same name, model, limits, pacing and
    /// approval rules, with `instruction` and `tools`, and nothing that shapes or forks its runs
    /// or continues a stored response (no step policy, no fork policy, no response chains).
    pub fn focused(&self, instruction: String, tools: Arc<ToolRegistry>) -> LlmAgent {
        LlmAgent::new(self.name.clone(), instruction, self.model.clone(), tools, self.limits)
            .with_mux(self.mux)
            .with_approvals(self.approvals.clone())
    }
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

    /// A paused run's transcript, resent whole (a stored response is not continued).
    fn restored(messages: Vec<Message>) -> Transcript {
        let user_message = messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::User { .. }))
            .cloned()
            .unwrap_or_else(|| Message::user(String::new()));
        let sent = messages.len();
        Transcript { messages, sent, previous: None, fallback: None, user_message }
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
            approvals: request.approvals,
            resumes: None,
        };
        let transcript = Transcript::new(request.history, user_message, previous_id);
        Run { context, transcript, message, previous_turn, image }
    }

    /// The request of one step (see [`step_request`]).
    fn chat_request(&self, transcript: &Transcript, last_step: bool) -> ChatRequest {
        step_request(&self.instruction, transcript, self.tools.specs(), last_step)
    }
}

/// The request of one step: the instruction, what the model has not seen yet, and the tools
/// (none may be called on the last step).
fn step_request(
    instruction: &str,
    transcript: &Transcript,
    specs: Arc<[ToolSpec]>,
    last_step: bool,
) -> ChatRequest {
    let mut messages = vec![Message::system(instruction.to_owned())];
    messages.extend(transcript.to_send().iter().cloned());
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

/// What a [`StepPolicy`] gets for the first step of `instance`'s run of an agent with
/// `instruction` and `tools` answering `request` afresh (no stored response to continue, more than
/// one step allowed): the
/// request the loop builds, and the turn's words, previous turn and image. The routing
/// evaluation routes with it what the entry agent would.
pub fn first_step_input(
    instance: String,
    instruction: &str,
    tools: Arc<[ToolSpec]>,
    request: &AgentRequest,
) -> StepInput {
    let transcript = Transcript::new(request.history.clone(), user_message(request), None);
    StepInput {
        instance,
        request: step_request(instruction, &transcript, tools, false),
        message: request.query.clone(),
        previous: request.previous.clone(),
        image: request.image.as_ref().and_then(|i| i.kind),
    }
}

impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn check_resume(
        &self,
        paused: &Suspension,
        decisions: &crate::approval::Decisions,
    ) -> Result<(), crate::approval::ResumeError> {
        self.check_paused(paused, decisions)
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            // A resumed turn starts a paused instance from where it paused.
            let mut resumed = request.approvals.resume_of(&instance).cloned();
            let server_side = this.model.keeps_conversations();
            let chains = this.chains.clone().filter(|_| server_side && request.instances.chains_allowed());
            let history = this.fork.as_ref().filter(|_| resumed.is_none()).map(|_| request.history.clone());
            let begin_chains = chains.as_deref().filter(|_| resumed.is_none());
            let run = Box::pin(this.begin(request, begin_chains)).await;
            let Run { mut context, mut transcript, message, previous_turn, image } = run;
            let first_step = match &resumed {
                Some(paused) => {
                    context.state = SessionState::new(paused.state.clone());
                    transcript = Transcript::restored(paused.messages.clone());
                    paused.step
                }
                None => 0,
            };
            if let (Some(fork), Some(history)) = (&this.fork, history) {
                let input = ForkInput {
                    instance: instance.clone(),
                    message: transcript.user_message.clone(),
                    history,
                    context: context.clone(),
                };
                let mut items = fork.fork(&this, input);
                while let Some(item) = items.next().await {
                    match item {
                        Item::Event(event) => yield event,
                        Item::Done(super::Answered) => return,
                    }
                }
            }
            let max_steps = this.limits.max_steps.max(1);
            for step in first_step..max_steps.max(first_step + 1) {
                let last_step = step + 1 >= max_steps;
                let (calls, mut batch, last) = if let Some(paused) = resumed.take() {
                    let calls: Vec<ToolCall> = paused.calls.iter().map(|c| c.call.clone()).collect();
                    (calls, this.resume_batch(&paused, &context, &instance), paused.last)
                } else {
                let chat = this.chat_request(&transcript, last_step);
                let decision = match (&this.policy, step) {
                    (Some(policy), 0) => {
                        let input = StepInput {
                            instance: instance.clone(),
                            request: chat,
                            message: message.clone(),
                            previous: previous_turn.clone(),
                            image,
                        };
                        let mut items = policy.first_step(this.model.clone(), input);
                        let mut decision = None;
                        while let Some(item) = items.next().await {
                            match item {
                                Item::Event(event) => yield event,
                                Item::Done(done) => decision = done,
                            }
                        }
                        decision
                    }
                    _ => {
                        let deltas = match transcript.previous.clone() {
                            Some(id) => this.model.stream_continuing(chat, id),
                            None => this.model.stream(chat),
                        };
                        let model_name = this.model.model_name().to_owned();
                        let mut items = model_events(deltas, instance.clone(), model_name);
                        let mut reply = ModelReply::default();
                        while let Some(item) = items.next().await {
                            match item {
                                Item::Event(event) => yield event,
                                Item::Done(done) => reply = done,
                            }
                        }
                        match reply.error {
                            None => Some(StepDecision {
                                text: reply.text,
                                calls: reply.calls.into_iter().map(StepCall::from).collect(),
                                response_id: reply.response_id,
                                last: false,
                            }),
                            Some(ModelError::Http { status: 400 | 404, .. })
                                if transcript.fallback.is_some()
                                    && reply.text.is_empty()
                                    && reply.response_id.is_none() =>
                            {
                                // The stored response expired or was deleted: resend the history.
                                tracing::warn!("cannot continue the stored response; resending the history");
                                transcript.resend_history();
                                continue;
                            }
                            Some(e) => {
                                let (code, retryable) = (e.code(), e.is_retryable());
                                yield Event::error(instance.clone(), code, e.to_string(), retryable);
                                yield Event::text(instance.clone(), APOLOGY);
                                None
                            }
                        }
                    }
                };
                let Some(decision) = decision else { return };
                let calls = transcript.record(&decision, server_side);
                if calls.is_empty() {
                    if let (Some(chains), Some(id)) = (&chains, decision.response_id) {
                        let (user, episode) = (&context.user_id, &context.episode_id);
                        if let Err(e) = chains.set_last_response_id(user, episode, &this.name, id).await {
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
                    let parsed = call.call.parse_arguments();
                    let arguments = Box::new(parsed.unwrap_or_else(|_| call.call.arguments.clone().into()));
                    yield Event::ToolCallStart {
                        agent: instance.clone(),
                        call_id: call.call.id.clone(),
                        name: call.call.name.clone(),
                        arguments,
                    };
                }
                (calls, this.start_batch(&decision.calls, &context, &instance), decision.last)
                };
                while let Some(event) = batch.next().await {
                    yield event;
                }
                // The merge ends only when every call's stream has, and each ends with its result.
                let done: Vec<CallDone> = batch
                    .into_results()
                    .into_iter()
                    .map(|d| d.expect("every call's stream ends with its result"))
                    .collect();
                if done.iter().any(|d| d.pending.is_some()) {
                    // Some calls wait for a person: the finished ones' results are kept, and the
                    // run pauses here until a resumed turn starts it again.
                    let specs = this.tools.specs();
                    let schema_of = |name: &str| {
                        specs.iter().find(|s| s.name == name).map_or(serde_json::Value::Null, |s| s.parameters.clone())
                    };
                    context.approvals.pause(Suspension {
                        agent: this.name.clone(),
                        instance: instance.clone(),
                        depth: context.depth,
                        query: message.clone(),
                        state: context.state.snapshot(),
                        messages: transcript.messages.clone(),
                        step,
                        last,
                        calls: suspended_calls(&calls, &done, &schema_of),
                    });
                    yield Event::Suspended { agent: instance.clone() };
                    return;
                }
                // Results go back in call order, whatever order they finished in.
                for (call, done) in calls.iter().zip(&done) {
                    let content = done.outcome.content();
                    transcript.messages.push(Message::Tool { call_id: call.id.clone(), content });
                }
                if last || done.iter().all(|d| d.answer.is_some()) {
                    for event in final_answer(&instance, &calls, done, last) {
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
