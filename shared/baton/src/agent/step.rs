//! One model step: its bounds, what a policy gets and decides, the generic "events, then a
//! result" item every step, fork and call stream carries, and the one adapter from a model's
//! delta stream to the loop's events.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::LlmAgent;
use crate::conversation::PreviousTurn;
use crate::event::Event;
use crate::item::{Item, ItemStream};
use crate::model::{ChatModel, ChatRequest, DeltaStream, Message, ModelDelta, ModelError, ToolCall};
use crate::tool::ToolContext;

/// What one model call produced, once its stream ended.
#[derive(Debug, Default)]
pub(crate) struct ModelReply {
    /// Its text.
    pub text: String,
    /// Its tool calls, in order.
    pub calls: Vec<ToolCall>,
    /// Its response id, if it sent one.
    pub response_id: Option<String>,
    /// The error that ended it early (what came before it is kept above).
    pub error: Option<ModelError>,
}

/// The one adapter from a model's delta stream to the loop's events: text, reasoning, the
/// response id and usage stream at once as `instance`'s events (usage under `model_name`); the
/// tool calls are collected; the reply comes last. An error ends the stream: the reply carries
/// it, and the caller decides what it means (the loop resends or apologises, routing's re-ask
/// keeps its first answer).
pub(crate) fn model_events(
    deltas: DeltaStream,
    instance: String,
    model_name: String,
) -> ItemStream<ModelReply> {
    Box::pin(async_stream::stream! {
        let mut deltas = deltas;
        let mut reply = ModelReply::default();
        while let Some(delta) = deltas.next().await {
            match delta {
                Ok(ModelDelta::Text(text)) => {
                    reply.text.push_str(&text);
                    yield Item::Event(Event::Text { agent: instance.clone(), text });
                }
                Ok(ModelDelta::Reasoning(text)) => {
                    yield Item::Event(Event::Reasoning { agent: instance.clone(), text });
                }
                Ok(ModelDelta::ResponseId(id)) => {
                    reply.response_id = Some(id.clone());
                    yield Item::Event(Event::ResponseId { agent: instance.clone(), id });
                }
                Ok(ModelDelta::Usage(usage)) => {
                    yield Item::Event(Event::usage(instance.clone(), model_name.clone(), usage));
                }
                Ok(ModelDelta::ToolCall(call)) => reply.calls.push(call),
                Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::Finish(_)) => {}
                Err(e) => {
                    reply.error = Some(e);
                    break;
                }
            }
        }
        yield Item::Done(reply);
    })
}

/// [`model_events`] of one call of `model`.
pub(crate) fn model_call(
    model: &dyn ChatModel,
    request: ChatRequest,
    instance: String,
) -> ItemStream<ModelReply> {
    model_events(model.stream(request), instance, model.model_name().to_owned())
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
pub(crate) const DEFAULT_MAX_CALLS_PER_STEP: usize = 16;

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

/// The items of one model step: its events, then the decision, or `None` when the model failed
/// and an `error` event was already sent (the run ends).
pub(crate) type StepStream = ItemStream<Option<StepDecision>>;

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

/// What a fork that answered a run ends with: the run ends without its tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered;

/// The items of a fork: its events (its progress, its usage, its answer), then [`Answered`] if
/// it answered the run.
pub(crate) type ForkStream = ItemStream<Answered>;

/// A policy that may answer a whole run before the tool loop starts (the mini-agents' fan-out,
/// module `mini`). If its stream ends without [`Answered`], the loop runs as usual.
pub trait ForkPolicy: Send + Sync {
    /// Decides whether to fork the run of `agent`, and if so answers it.
    fn fork(&self, agent: &LlmAgent, input: ForkInput) -> ForkStream;
}
