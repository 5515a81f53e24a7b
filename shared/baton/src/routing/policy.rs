//! The routing policy, top to bottom: model pass → plan → failsafe → guards → release; and the
//! evaluation's [`Router`], which routes what the entry agent's loop would send.

use std::sync::Arc;

use futures::StreamExt;

use super::guard::{self, GuardAction, PlannedCall, Roles, RoutingInput};
use super::plan::{plan, repair};
use super::preamble::PreambleGate;
use super::reask::Reask;
use super::{RoutingSettings, routing_tool_name};
use crate::agent::{
    AgentRequest, Item, ItemStream, ModelReply, StepCall, StepDecision, StepInput, StepPolicy, StepStream,
    first_step_input, model_call,
};
use crate::conversation::PreviousTurn;
use crate::event::Event;
use crate::image::ImageKind;
use crate::model::{ChatModel, ChatRequest, Message, ToolCall};

/// The routing decision of a turn: what the loop runs, and what the failsafe and the guards
/// repaired on the way (each also sent as a `repaired` event before it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routed {
    /// The loop's decision: the calls to dispatch (none for a direct answer), marked last.
    pub decision: StepDecision,
    /// What the failsafe and the guards repaired.
    pub repairs: Vec<GuardAction>,
}

/// The routing policy of one agent.
#[derive(Debug, Clone)]
pub struct RoutingPolicy {
    settings: Arc<RoutingSettings>,
}

/// What routing one message reads: the step's input and what the guards see of it.
struct Turn {
    instance: String,
    request: ChatRequest,
    message: String,
    previous: Option<PreviousTurn>,
    image: Option<ImageKind>,
    /// The message came with an image (of a known kind or not): never a smalltalk answer.
    attached: bool,
    roles: Roles,
}

impl Turn {
    fn new(settings: &RoutingSettings, input: StepInput) -> Turn {
        let StepInput { instance, request, message, previous, image } = input;
        let attached = image.is_some() || has_image(&request, &message);
        let roles = settings.roles(&instance);
        Turn { instance, request, message, previous, image, attached, roles }
    }

    fn guard_input<'a>(&'a self, settings: &'a RoutingSettings) -> RoutingInput<'a> {
        RoutingInput {
            message: &self.message,
            previous: self.previous.as_ref(),
            roles: &self.roles,
            guards: &settings.guards,
            smalltalk: &settings.smalltalk,
            image: self.image,
            attached: self.attached,
        }
    }
}

impl RoutingPolicy {
    /// A policy with `settings`.
    pub fn new(settings: RoutingSettings) -> RoutingPolicy {
        RoutingPolicy { settings: Arc::new(settings) }
    }

    /// Its settings.
    pub(crate) fn settings(&self) -> &RoutingSettings {
        &self.settings
    }

    /// Routes one step: model pass → plan → failsafe → guards → release. Its events, then the
    /// decision, or `None` when the model call failed (an `error` event was sent). Dropping the
    /// stream cancels the model call.
    pub(crate) fn route(&self, model: Arc<dyn ChatModel>, input: StepInput) -> ItemStream<Option<Routed>> {
        let settings = self.settings.clone();
        Box::pin(async_stream::stream! {
            let turn = Turn::new(&settings, input);
            let instance = turn.instance.clone();
            // 1. Model pass: its text streams through the preamble gate.
            let smalltalk = settings.smalltalk.classify(&turn.message).is_some();
            let mut gate = PreambleGate::new(smalltalk && !turn.attached);
            let mut reply = ModelReply::default();
            let mut items = model_call(model.as_ref(), turn.request.clone(), instance.clone());
            while let Some(item) = items.next().await {
                match item {
                    Item::Event(Event::Text { text, .. }) => {
                        if let Some(shown) = gate.push(text) {
                            yield Item::Event(Event::text(instance.clone(), shown));
                        }
                    }
                    Item::Event(event) => yield Item::Event(event),
                    Item::Done(done) => reply = done,
                }
            }
            drop(items);
            if let Some(e) = reply.error.take() {
                tracing::warn!(error = %e, "routing model call failed");
                yield Item::Event(Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable()));
                yield Item::Done(None);
                return;
            }
            // 2. Plan: the model's calls of known routing tools.
            let (mut planned, unknown) = plan(&settings, &turn.message, &reply.calls);
            for event in unknown_tools(&instance, unknown) {
                yield Item::Event(event);
            }
            // 3. Failsafe: one re-ask at most, for the calls the failsafe misses or for the calls a
            // refused direct answer should have made.
            let mut repairs = Vec::new();
            let reask_direct =
                planned.is_empty() && guard::refuses_direct_answer(&turn.guard_input(&settings));
            if let Some(reask) = Reask::of(&settings, &planned, reask_direct) {
                let request = reask.request(&settings, turn.request.clone(), &reply, &planned);
                let mut items = model_call(model.as_ref(), request, instance.clone());
                let mut again = ModelReply::default();
                while let Some(item) = items.next().await {
                    match item {
                        Item::Event(event @ Event::Usage { .. }) => yield Item::Event(event),
                        Item::Event(_) => {}
                        Item::Done(done) => again = done,
                    }
                }
                if let Some(e) = &again.error {
                    // Best effort: the first answer still stands.
                    tracing::warn!(error = %e, "failsafe re-ask failed");
                }
                let new_calls = plan(&settings, &turn.message, &again.calls).0;
                repairs.push(reask.merge(&mut planned, new_calls));
            }
            // 4. Guards, and arguments valid for their tools.
            let (calls, rejected) = repair(&settings, &turn.guard_input(&settings), planned, &mut repairs);
            // 5. Release: the held text, unless a direct answer was refused; the repairs; the calls.
            let held = gate.release();
            if rejected || reask_direct {
                if !held.trim().is_empty() {
                    let chars = held.len();
                    tracing::info!(chars, "withheld a direct answer the fastpath allowlist refused");
                }
            } else if !held.is_empty() {
                yield Item::Event(Event::text(instance.clone(), held));
            }
            for repair in &repairs {
                yield Item::Event(Event::Repaired { agent: instance.clone(), repair: repair.name() });
            }
            let decision = release(&settings, reply.text, reply.response_id, &calls);
            yield Item::Done(Some(Routed { decision, repairs }));
        })
    }
}

impl StepPolicy for RoutingPolicy {
    fn first_step(&self, model: Arc<dyn ChatModel>, input: StepInput) -> StepStream {
        Box::pin(self.route(model, input).map(|item| match item {
            Item::Event(event) => Item::Event(event),
            Item::Done(routed) => Item::Done(routed.map(|r| r.decision)),
        }))
    }
}

/// An `unknown_tool` error for each call of a tool that is not a routing tool.
fn unknown_tools(instance: &str, unknown: Vec<String>) -> Vec<Event> {
    unknown
        .into_iter()
        .map(|name| {
            tracing::warn!(tool = %name, "the routing model called an unknown tool");
            Event::error(
                instance,
                "unknown_tool",
                format!("the orchestrator model called an unknown tool `{name}`; the call was skipped"),
                false,
            )
        })
        .collect()
}

/// The routing decision as the loop's: each call with the arguments its tool gets, the follow-up
/// agent's content marked to end with a boundary in a mixed turn, and no model step after them.
fn release(
    settings: &RoutingSettings,
    text: String,
    response_id: Option<String>,
    calls: &[PlannedCall],
) -> StepDecision {
    let followup = settings.followup_agent().map(routing_tool_name);
    let is_followup = |c: &PlannedCall| Some(&c.tool) == followup.as_ref();
    let mixed = calls.iter().any(|c| !is_followup(c)) && calls.iter().any(is_followup);
    let calls = calls
        .iter()
        .enumerate()
        .map(|(i, c)| StepCall {
            call: ToolCall {
                id: format!("route_{i}"),
                name: c.tool.clone(),
                arguments: c.arguments.to_string(),
            },
            mark_content_end: mixed && is_followup(c),
        })
        .collect();
    StepDecision { text, calls, response_id, last: true }
}

/// A routing model, its policy and its agent's instruction: routing one message on its own, as
/// the routing evaluation does, with the request the agent builds for its first step.
pub struct Router {
    model: Arc<dyn ChatModel>,
    policy: RoutingPolicy,
    instruction: String,
}

impl Router {
    /// Routes with `model` under `policy`, the agent's system prompt being `instruction`.
    pub(crate) fn new(
        model: Arc<dyn ChatModel>,
        policy: RoutingPolicy,
        instruction: impl Into<String>,
    ) -> Router {
        Router { model, policy, instruction: instruction.into() }
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        self.model.model_name()
    }

    /// The routing settings it routes with.
    pub fn settings(&self) -> &RoutingSettings {
        self.policy.settings()
    }

    /// The same routing with another model.
    pub fn with_model(&self, model: Arc<dyn ChatModel>) -> Router {
        Router { model, policy: self.policy.clone(), instruction: self.instruction.clone() }
    }

    /// Routes `request` as the agent's first model step does, from the request the agent's loop
    /// builds for it (`first_step_input`).
    pub fn route(&self, request: &AgentRequest) -> ItemStream<Option<Routed>> {
        let specs = self.settings().tool_specs().into();
        let input = first_step_input("orchestrator".into(), &self.instruction, specs, request);
        self.policy.route(self.model.clone(), input)
    }
}

/// Whether the user's message came with an image: sent as a content part, or described by the
/// note Baton puts after the user's words ("[The user attached an image: …]").
fn has_image(request: &ChatRequest, message: &str) -> bool {
    let Some(Message::User { content, images }) = request.messages.last() else { return false };
    !images.is_empty() || (content.trim_end().ends_with(']') && !message.trim_end().ends_with(']'))
}
