//! [`LlmAgent`]: the tool loop, step by step, and what a run carries from step to step.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use super::approval::suspended_calls;
use super::batch::{Batch, CallDone, final_answer};
use super::chains::ResponseChains;
use super::step::{ForkInput, ModelReply, StepCall, StepDecision, StepInput, model_events};
use super::{APOLOGY, Agent, AgentRequest, Item, ItemStream, LlmAgent, user_message};
use crate::approval::Suspension;
use crate::conversation::{Conversation, PreviousTurn};
use crate::event::{Event, EventStream};
use crate::model::{ChatModel, ChatRequest, Message, ModelError, ToolCall, ToolChoice, ToolSpec};
use crate::tool::{CallRef, ChildScope, SessionState, ToolContext};

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

/// What a run carries from step to step.
struct Run {
    /// The instance it runs as: the name its events carry.
    instance: String,
    context: ToolContext,
    transcript: Transcript,
    /// The user's words (the instance's query).
    message: String,
    previous_turn: Option<PreviousTurn>,
    /// What the attached image shows, when the client said.
    image: Option<crate::image::ImageKind>,
    /// The step about to be decided or run (0 on a fresh run).
    step: usize,
    /// The first step the run may not reach: past `max_steps` only for a paused run resumed
    /// after the limit was lowered (its paused step still runs).
    end: usize,
    /// Where the run's last response id is kept for the next turn (a model with server-side
    /// state, in a turn allowed to continue it).
    chains: Option<Arc<dyn ResponseChains>>,
}

impl LlmAgent {
    /// The run's tool context and transcript: the stored response to continue, if `continued`
    /// has one, else the history.
    async fn open(
        &self,
        request: AgentRequest,
        instance: String,
        chains: Option<Arc<dyn ResponseChains>>,
        continued: Option<&dyn ResponseChains>,
    ) -> Run {
        let previous_id = match continued {
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
            call: CallRef::default(),
            child: ChildScope {
                depth: request.depth,
                instances: request.instances,
                conversation: Arc::new(Conversation {
                    history: request.history.clone(),
                    previous: request.previous,
                }),
                approvals: request.approvals,
                resumes: None,
            },
        };
        let transcript = Transcript::new(request.history, user_message, previous_id);
        let end = self.max_steps();
        Run { instance, context, transcript, message, previous_turn, image, step: 0, end, chains }
    }

    /// Model steps per run (at least one).
    fn max_steps(&self) -> usize {
        self.limits.max_steps.max(1)
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

/// What a [`StepPolicy`](super::StepPolicy) gets for the first step of `instance`'s run of an agent with
/// `instruction` and `tools` answering `request` afresh (no stored response to continue, more than
/// one step allowed): the
/// request the loop builds, and the turn's words, previous turn and image. The routing
/// evaluation routes with it what the entry agent would.
pub(crate) fn first_step_input(
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

    /// Drives the run's states: each step streams its events, then the state that follows; a
    /// step that ends without one ends the run.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let mut state = Some(State::Begin(Box::new(request), instance));
            while let Some(current) = state.take() {
                let mut items = this.advance(current);
                while let Some(item) = items.next().await {
                    match item {
                        Item::Event(event) => yield event,
                        Item::Done(next) => state = Some(next),
                    }
                }
            }
        })
    }
}

/// Where a run stands: the tool loop is decide → run the batch → settle (pause, results for
/// the next step, or the answer), each state's step a function of [`LlmAgent`].
enum State {
    /// The run begins ([`LlmAgent::begin`]).
    Begin(Box<AgentRequest>, String),
    /// The model, or the step policy, decides the next step ([`LlmAgent::decide`]).
    Decide(Box<Run>),
    /// A step was decided: its calls start, or it is the answer ([`LlmAgent::take`]).
    Decided(Box<Run>, StepDecision),
    /// A step's calls run, then settle ([`LlmAgent::run_batch`], [`LlmAgent::settle`]).
    Calls(Box<Run>, Calls),
    /// The run ends with these events.
    End(Vec<Event>),
}

/// A step's calls, started.
struct Calls {
    calls: Vec<ToolCall>,
    batch: Batch,
    /// No model step follows them (a policy's last step, or a resumed one).
    last: bool,
}

/// One state's step: its events, then the next state (none when the run ends).
type Steps<'a> = Pin<Box<dyn Stream<Item = Item<State>> + Send + 'a>>;

/// `items`' events, then the state `next` makes of its result.
fn then<'a, T: 'static>(items: ItemStream<T>, next: impl FnOnce(T) -> State + Send + 'a) -> Steps<'a> {
    let mut next = Some(next);
    Box::pin(items.filter_map(move |item| {
        futures::future::ready(match item {
            Item::Event(event) => Some(Item::Event(event)),
            Item::Done(done) => next.take().map(|next| Item::Done(next(done))),
        })
    }))
}

/// The end of a run that gave up: an error for the client, and an apology in the answer.
fn gave_up(instance: &str, message: String) -> State {
    let error = Event::error(instance, "max_steps_exceeded", message, false);
    State::End(vec![error, Event::text(instance, APOLOGY)])
}

impl LlmAgent {
    /// The step of `state`.
    fn advance(&self, state: State) -> Steps<'_> {
        match state {
            State::Begin(request, instance) => self.begin(*request, instance),
            State::Decide(run) => self.decide(run),
            State::Decided(run, decision) => self.take(run, decision),
            State::Calls(run, calls) => self.run_batch(run, calls),
            State::End(events) => Box::pin(futures::stream::iter(events.into_iter().map(Item::Event))),
        }
    }

    /// The run begins: a resumed turn starts a paused instance's calls again from where it
    /// paused; otherwise a fork may answer the run, or the model decides its first step.
    fn begin(&self, request: AgentRequest, instance: String) -> Steps<'_> {
        Box::pin(async_stream::stream! {
            let resumed = request.approvals.resume_of(&instance).cloned();
            let server_side = self.model.keeps_conversations();
            let chains = self.chains.clone().filter(|_| server_side && request.instances.chains_allowed());
            let history = self.fork.as_ref().filter(|_| resumed.is_none()).map(|_| request.history.clone());
            let continued = chains.clone().filter(|_| resumed.is_none());
            let mut run = Box::new(Box::pin(self.open(request, instance, chains, continued.as_deref())).await);
            if let Some(paused) = resumed {
                run.context.state = SessionState::new(paused.state.clone());
                run.transcript = Transcript::restored(paused.messages.clone());
                run.step = paused.step;
                run.end = self.max_steps().max(paused.step + 1);
                let calls = paused.calls.iter().map(|c| c.call.clone()).collect();
                let batch = self.resume_batch(&paused, &run.context, &run.instance);
                yield Item::Done(State::Calls(run, Calls { calls, batch, last: paused.last }));
                return;
            }
            if let (Some(fork), Some(history)) = (&self.fork, history) {
                let input = ForkInput {
                    instance: run.instance.clone(),
                    message: run.transcript.user_message.clone(),
                    history,
                    context: run.context.clone(),
                };
                let mut items = fork.fork(self, input);
                while let Some(item) = items.next().await {
                    match item {
                        Item::Event(event) => yield Item::Event(event),
                        Item::Done(super::Answered) => return,
                    }
                }
            }
            yield Item::Done(State::Decide(run));
        })
    }

    /// The model's step (the step policy's, for the first step when there is one): its text and
    /// progress stream, then its decision. A model that fails ends the run with an error and an
    /// apology; one that no longer has the stored response is asked again with the history, as
    /// the next step.
    fn decide(&self, run: Box<Run>) -> Steps<'_> {
        if run.step >= run.end {
            // Only a resend on the last step gets here.
            return self.advance(gave_up(
                &run.instance,
                format!("no answer within {} steps", self.limits.max_steps),
            ));
        }
        let chat = self.chat_request(&run.transcript, run.step + 1 >= self.max_steps());
        match (&self.policy, run.step) {
            (Some(policy), 0) => {
                let input = StepInput {
                    instance: run.instance.clone(),
                    request: chat,
                    message: run.message.clone(),
                    previous: run.previous_turn.clone(),
                    image: run.image,
                };
                then(policy.first_step(self.model.clone(), input), |decision| match decision {
                    Some(decision) => State::Decided(run, decision),
                    // The policy has sent its `error` event.
                    None => State::End(Vec::new()),
                })
            }
            _ => {
                let deltas = match run.transcript.previous.clone() {
                    Some(id) => self.model.stream_continuing(chat, id),
                    None => self.model.stream(chat),
                };
                let model_name = self.model.model_name().to_owned();
                then(model_events(deltas, run.instance.clone(), model_name), |reply| replied(run, reply))
            }
        }
    }

    /// A decided step: the model's answer joins the transcript. Without calls it is the run's
    /// answer (its response id kept for the next turn); calls past the last step end the run;
    /// otherwise each call is announced with `tool_call_start`, then they start.
    fn take(&self, mut run: Box<Run>, decision: StepDecision) -> Steps<'_> {
        let calls = run.transcript.record(&decision, self.model.keeps_conversations());
        if calls.is_empty() {
            return Box::pin(futures::stream::once(self.keep_response_id(run, decision.response_id)));
        }
        if run.step + 1 >= self.max_steps() && !decision.last {
            let message = format!("the model still called tools after {} steps", self.limits.max_steps);
            return self.advance(gave_up(&run.instance, message));
        }
        Box::pin(async_stream::stream! {
            for call in &decision.calls {
                let parsed = call.call.parse_arguments();
                let arguments = Box::new(parsed.unwrap_or_else(|_| call.call.arguments.clone().into()));
                yield Item::Event(Event::ToolCallStart {
                    agent: run.instance.clone(),
                    call_id: call.call.id.clone(),
                    name: call.call.name.clone(),
                    arguments,
                });
            }
            // Started once the client has their announcements.
            let batch = self.start_batch(&decision.calls, &run.context, &run.instance);
            yield Item::Done(State::Calls(run, Calls { calls, batch, last: decision.last }));
        })
    }

    /// Keeps the response id a run answered with, for the next turn to continue; the run ends.
    async fn keep_response_id(&self, run: Box<Run>, id: Option<String>) -> Item<State> {
        if let (Some(chains), Some(id)) = (&run.chains, id) {
            let (user, episode) = (&run.context.user_id, &run.context.episode_id);
            if let Err(e) = chains.set_last_response_id(user, episode, &self.name, id).await {
                tracing::warn!(error = %e, "cannot store the last response id");
            }
        }
        Item::Done(State::End(Vec::new()))
    }

    /// A step's calls running: their merged events, then the step settled.
    fn run_batch(&self, run: Box<Run>, calls: Calls) -> Steps<'_> {
        Box::pin(Running { agent: self, step: Some((run, calls)), tail: Vec::new().into_iter() })
    }

    /// A step whose calls have all ended or wait: the run pauses if any waits for a person (the
    /// finished ones' results are kept, and a resumed turn starts it again here); otherwise the
    /// results join the transcript in call order, and the run answers (a last step, or calls
    /// that all answered the user as is) or goes on to its next step.
    fn settle(&self, mut run: Box<Run>, calls: Calls) -> Vec<Item<State>> {
        let Calls { calls, batch, last } = calls;
        // The merge ends only when every call's stream has, and each ends with its result.
        let done: Vec<CallDone> = batch
            .into_results()
            .into_iter()
            .map(|d| d.expect("every call's stream ends with its result"))
            .collect();
        if done.iter().any(|d| d.pending.is_some()) {
            self.pause(&run, &calls, &done, last);
            return vec![Item::Event(Event::Suspended { agent: run.instance.clone() })];
        }
        // Results go back in call order, whatever order they finished in.
        for (call, done) in calls.iter().zip(&done) {
            let content = done.outcome.content();
            run.transcript.messages.push(Message::Tool { call_id: call.id.clone(), content });
        }
        if last || done.iter().all(|d| d.answer.is_some()) {
            return final_answer(&run.instance, &calls, done, last).into_iter().map(Item::Event).collect();
        }
        run.step += 1;
        vec![Item::Done(State::Decide(run))]
    }

    /// Leaves the run's state with the turn's approvals, to start again on a resumed turn.
    fn pause(&self, run: &Run, calls: &[ToolCall], done: &[CallDone], last: bool) {
        let specs = self.tools.specs();
        let schema_of = |name: &str| {
            specs.iter().find(|s| s.name == name).map_or(serde_json::Value::Null, |s| s.parameters.clone())
        };
        run.context.child.approvals.pause(Suspension {
            agent: self.name.clone(),
            instance: run.instance.clone(),
            depth: run.context.child.depth,
            query: run.message.clone(),
            state: run.context.state.snapshot(),
            messages: run.transcript.messages.clone(),
            step: run.step,
            last,
            calls: suspended_calls(calls, done, &schema_of),
        });
    }
}

/// The state after a model's reply (see [`LlmAgent::decide`]).
fn replied(mut run: Box<Run>, reply: ModelReply) -> State {
    match reply.error {
        None => State::Decided(
            run,
            StepDecision {
                text: reply.text,
                calls: reply.calls.into_iter().map(StepCall::from).collect(),
                response_id: reply.response_id,
                last: false,
            },
        ),
        Some(ModelError::Http { status: 400 | 404, .. })
            if run.transcript.fallback.is_some() && reply.text.is_empty() && reply.response_id.is_none() =>
        {
            // The stored response expired or was deleted: resend the history.
            tracing::warn!("cannot continue the stored response; resending the history");
            run.transcript.resend_history();
            run.step += 1;
            State::Decide(run)
        }
        Some(e) => {
            let (code, retryable) = (e.code(), e.is_retryable());
            let error = Event::error(run.instance.clone(), code, e.to_string(), retryable);
            State::End(vec![error, Event::text(run.instance.clone(), APOLOGY)])
        }
    }
}

/// A step's calls running: their merged events pass through as they come, by hand rather than
/// through a generator on every event's way (as `batch`'s calls do); once they have all ended,
/// the step settled ([`LlmAgent::settle`]).
struct Running<'a> {
    agent: &'a LlmAgent,
    step: Option<(Box<Run>, Calls)>,
    tail: std::vec::IntoIter<Item<State>>,
}

impl Stream for Running<'_> {
    type Item = Item<State>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item<State>>> {
        let this = &mut *self;
        if let Some((_, calls)) = &mut this.step {
            match std::task::ready!(calls.batch.poll_next_unpin(cx)) {
                Some(event) => return Poll::Ready(Some(Item::Event(event))),
                None => {
                    let (run, calls) = this.step.take().expect("a step to settle");
                    this.tail = this.agent.settle(run, calls).into_iter();
                }
            }
        }
        Poll::Ready(this.tail.next())
    }
}
