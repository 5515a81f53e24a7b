//! The routing policy (`docs/routing.md`): how an entry agent whose agents are its
//! intents decides which of them a turn calls. It hooks the agent's first model step
//! ([`crate::agent::StepPolicy`]); the agent's tool loop then dispatches the calls it leaves, all
//! at once, and the sub-agents' answers are the turn's answer (no further model call).
//!
//! 1. The model is called with the routing tools `ask_<agent>` (query, prior_context,
//!    intent_count; the follow-up agent's tool also takes the category and summary arguments its
//!    `routing:` config declares, `support_category` and `support_summary` in the reference). Its
//!    text streams to the client at once (the preamble). For a message that
//!    is not smalltalk, text after the first sentence is held until the model has finished: if it
//!    turns out to be a direct answer the fastpath allowlist refuses, the held part is dropped.
//! 2. **Failsafe**: if a call's `intent_count` exceeds the number of distinct calls, the model is
//!    asked once more, with an instruction naming the calls it made and the count it reported; new
//!    calls are merged without duplicates. One retry at most.
//! 3. **Refused direct answer**: a direct answer to a message that is not smalltalk (or has an
//!    image, or answers support's question) is not guessed at: the model is asked once more, by the same mechanism (`tool_choice: required`
//!    and the reason), and its calls go through the guards; only if the re-ask makes no call does
//!    the fastpath guard send the message to the fallback agent.
//! 4. The [`crate::guard`]s repair what code can check.
//! 5. The calls' arguments are made valid for their tools: the guards' query and prior context,
//!    an `intent_count` of at least 1, a category from the configured list (another is
//!    dropped, and the repair logged).
//!
//! Which agents are intents, which one follow-ups and switches concern, where a refused direct
//! answer goes and which guards run are [`RoutingSettings`], configured per agent.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::agent::{
    Agent, AgentRequest, ChildContext, Item, ItemStream, ModelReply, StepCall, StepDecision, StepInput,
    StepPolicy, StepStream, first_step_input, model_call,
};
use crate::agent_tool::{AgentTool, AgentToolOptions, InputMapping};
use crate::conversation::PreviousTurn;
use crate::event::{Event, agent_name};
use crate::guard::{self, GuardAction, Guards, PlannedCall, Roles, RoutingInput};
use crate::image::ImageKind;
use crate::model::{ChatModel, ChatRequest, Message, ToolCall, ToolChoice, ToolSpec};
use crate::text::Lexicon;
use crate::tool::ToolError;

/// The prefix of a routing tool's name: `ask_<agent>`.
pub const ROUTING_TOOL_PREFIX: &str = "ask_";

/// The routing tool of agent `agent`.
pub fn routing_tool_name(agent: &str) -> String {
    format!("{ROUTING_TOOL_PREFIX}{agent}")
}

/// One agent the policy routes to.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutedAgent {
    /// The agent's name.
    pub agent: String,
    /// What it does, for the model.
    pub description: String,
}

/// How an agent routes (the `routing:` key of its configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingSettings {
    /// The agents that are intents, each offered as `ask_<agent>`, in configured order.
    pub agents: Vec<RoutedAgent>,
    /// The agent a short reply echoing its question goes back to, whose calls get the previous
    /// turn as prior context on an intent switch, and whose content ends with the
    /// `content_end` boundary in a mixed turn (the reference `support`), with its tool's extra
    /// arguments.
    pub followup: Option<Followup>,
    /// Where a direct answer the fastpath allowlist refuses is sent (the reference `shopping`).
    pub fallback: String,
    /// The values of the follow-up agent's category argument.
    pub categories: Vec<String>,
    /// Which guards run.
    pub guards: Guards,
    /// What counts as smalltalk (the fastpath allowlist and the preamble gate).
    pub smalltalk: Arc<Lexicon>,
    /// Where a direct answer goes when the user attached an image of a known kind (the
    /// reference: a receipt to `support`, a product to `shopping`).
    pub images: Vec<(ImageKind, String)>,
}

/// The follow-up agent and the extra arguments its routing tool takes, as the `routing:` config
/// declares them (`category_argument`, `summary_argument`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followup {
    /// The agent.
    pub agent: String,
    /// The argument naming the category of the request (one of the configured categories).
    pub category_argument: String,
    /// The argument carrying a one-line summary of the request (capped by the guards).
    pub summary_argument: String,
}

impl Followup {
    /// `agent`, with the default argument names `<agent>_category` and `<agent>_summary`.
    pub fn named(agent: &str) -> Followup {
        Followup {
            agent: agent.to_owned(),
            category_argument: format!("{agent}_category"),
            summary_argument: format!("{agent}_summary"),
        }
    }
}

impl RoutingSettings {
    fn followup_agent(&self) -> Option<&str> {
        self.followup.as_ref().map(|f| f.agent.as_str())
    }

    fn roles(&self, own_agent: &str) -> Roles {
        Roles {
            followup_tool: self.followup_agent().map(routing_tool_name),
            followup_agent: self.followup_agent().map(str::to_owned),
            summary_argument: self.followup.as_ref().map(|f| f.summary_argument.clone()),
            fallback_tool: routing_tool_name(&self.fallback),
            fallback_agent: self.fallback.clone(),
            own_agent: agent_name(own_agent).to_owned(),
            images: self
                .images
                .iter()
                .map(|(kind, agent)| (*kind, routing_tool_name(agent), agent.clone()))
                .collect(),
        }
    }

    /// The JSON Schema of `agent`'s routing tool.
    pub fn tool_schema(&self, agent: &str) -> Value {
        let intent_count = json!({"type": "integer", "minimum": 1,
            "description": "How many separate intents the user's message has (one call per intent)."});
        let prior_context = json!({"type": "string",
            "description": "Context from earlier turns the sub-agent needs, when the user switches topic."});
        let mut properties = serde_json::Map::new();
        properties.insert(
            "query".into(),
            json!({"type": "string", "description": format!("The user's {agent} request, in their words.")}),
        );
        if let Some(followup) = self.followup.as_ref().filter(|f| f.agent == agent) {
            properties.insert(
                followup.category_argument.clone(),
                json!({"type": "string", "enum": self.categories}),
            );
            properties.insert(
                followup.summary_argument.clone(),
                json!({"type": "string", "maxLength": guard::SUMMARY_MAX_CHARS,
                       "description": format!("One-line summary of the {agent} issue.")}),
            );
        }
        properties.insert("prior_context".into(), prior_context);
        properties.insert("intent_count".into(), intent_count);
        json!({"type": "object", "properties": properties, "required": ["query", "intent_count"]})
    }

    /// The routing tools, as offered to the model.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.agents
            .iter()
            .map(|a| ToolSpec {
                name: routing_tool_name(&a.agent),
                description: a.description.clone(),
                parameters: self.tool_schema(&a.agent),
            })
            .collect()
    }

    fn is_tool(&self, name: &str) -> bool {
        self.agents.iter().any(|a| routing_tool_name(&a.agent) == name)
    }
}

/// Agent `agent` as the routing tool `ask_<name>` of an agent routing with `settings`: the
/// routing schema, the `query` and `prior_context` arguments as its input, the conversation in
/// view, its answer the user's (`options` gives the rest: output mode, timeout, depth).
pub fn routing_tool(
    agent: Arc<dyn Agent>,
    settings: &RoutingSettings,
    mut options: AgentToolOptions,
) -> Result<AgentTool, ToolError> {
    options.tool_name = Some(routing_tool_name(agent.name()));
    options.input_schema = Some(settings.tool_schema(agent.name()));
    options.input = InputMapping::Query;
    options.context = ChildContext::Conversation;
    options.skip_summarization = true;
    AgentTool::new(agent, options)
}

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
    pub fn settings(&self) -> &RoutingSettings {
        &self.settings
    }

    /// Routes one step: model pass → plan → failsafe → guards → release. Its events, then the
    /// decision, or `None` when the model call failed (an `error` event was sent). Dropping the
    /// stream cancels the model call.
    pub fn route(&self, model: Arc<dyn ChatModel>, input: StepInput) -> ItemStream<Option<Routed>> {
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
            let reask_direct = planned.is_empty() && guard::refuses_direct_answer(&turn.guard_input(&settings));
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
                    tracing::info!(chars = held.len(), "withheld a direct answer the fastpath allowlist refused");
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
    pub fn new(model: Arc<dyn ChatModel>, policy: RoutingPolicy, instruction: impl Into<String>) -> Router {
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
    /// builds for it ([`first_step_input`]).
    pub fn route(&self, request: &AgentRequest) -> ItemStream<Option<Routed>> {
        let specs = self.settings().tool_specs().into();
        let input = first_step_input("orchestrator".into(), &self.instruction, specs, request);
        self.policy.route(self.model.clone(), input)
    }
}

/// Applies the guards and makes the calls' arguments valid; the repairs go into `repairs` and
/// the log. Returns the calls, and whether a direct answer was refused.
fn repair(
    settings: &RoutingSettings,
    input: &RoutingInput<'_>,
    planned: Vec<PlannedCall>,
    repairs: &mut Vec<GuardAction>,
) -> (Vec<PlannedCall>, bool) {
    let (mut calls, actions) = guard::apply_guards(input, planned);
    let rejected =
        actions.iter().any(|a| matches!(a, GuardAction::FastpathRejected | GuardAction::ImageRouted { .. }));
    repairs.extend(actions);
    repairs.extend(valid_arguments(settings, &mut calls));
    for action in repairs.iter() {
        tracing::info!(?action, "routing repaired the model's routing");
    }
    (calls, rejected)
}

/// Whether the user's message came with an image: sent as a content part, or described by the
/// note Baton puts after the user's words ("[The user attached an image: …]").
fn has_image(request: &ChatRequest, message: &str) -> bool {
    let Some(Message::User { content, images }) = request.messages.last() else { return false };
    !images.is_empty() || (content.trim_end().ends_with(']') && !message.trim_end().ends_with(']'))
}

/// Why routing asks the model once more.
#[derive(Debug, Clone, Copy)]
enum Reask {
    /// A call reported this many intents, more than the distinct calls made.
    Failsafe(usize),
    /// A direct answer was refused: the model must call a tool.
    DirectAnswer,
}

impl Reask {
    /// The re-ask `planned` needs, if any.
    fn of(settings: &RoutingSettings, planned: &[PlannedCall], refused_direct: bool) -> Option<Reask> {
        match missing_intents(planned).filter(|_| settings.guards.failsafe) {
            Some(intents) => Some(Reask::Failsafe(intents)),
            None if refused_direct => Some(Reask::DirectAnswer),
            None => None,
        }
    }

    /// Its request: the first one, the model's first answer, and why it is asked again.
    fn request(
        self,
        settings: &RoutingSettings,
        request: ChatRequest,
        first: &ModelReply,
        planned: &[PlannedCall],
    ) -> ChatRequest {
        match self {
            Reask::Failsafe(intents) => {
                failsafe_request(settings, request, &first.text, &first.calls, intents, planned)
            }
            Reask::DirectAnswer => direct_answer_request(request, &first.text),
        }
    }

    /// Takes the re-ask's calls in: the failsafe adds those not made yet, a refused direct
    /// answer takes them all. Returns the repair.
    fn merge(self, planned: &mut Vec<PlannedCall>, new_calls: Vec<PlannedCall>) -> GuardAction {
        match self {
            Reask::Failsafe(intents) => {
                let distinct = distinct_count(planned);
                let mut added = 0;
                for call in new_calls {
                    if !planned.iter().any(|c| c.key() == call.key()) {
                        planned.push(call);
                        added += 1;
                    }
                }
                tracing::info!(intents, calls = distinct, added, "routing failsafe re-asked the model");
                GuardAction::FailsafeReasked { intents, calls: distinct, added }
            }
            Reask::DirectAnswer => {
                tracing::info!(
                    calls = new_calls.len(),
                    "routing re-asked the model after a refused direct answer"
                );
                let action = GuardAction::FastpathReasked { calls: new_calls.len() };
                *planned = new_calls;
                action
            }
        }
    }
}

/// The model's calls as planned calls; names of unknown tools are returned apart.
fn plan(settings: &RoutingSettings, message: &str, calls: &[ToolCall]) -> (Vec<PlannedCall>, Vec<String>) {
    let mut planned = Vec::new();
    let mut unknown = Vec::new();
    for call in calls {
        if !settings.is_tool(&call.name) {
            unknown.push(call.name.clone());
            continue;
        }
        let arguments = call.parse_arguments().unwrap_or_else(|e| {
            tracing::warn!(tool = %call.name, error = %e, "invalid tool arguments; using the user's words");
            Value::Object(Default::default())
        });
        planned.push(PlannedCall::from_arguments(&call.name, arguments, message));
    }
    (planned, unknown)
}

/// Makes each call's arguments valid for its routing tool: at least one intent, a category from
/// the configured list (another is dropped). Returns the repairs.
fn valid_arguments(settings: &RoutingSettings, calls: &mut [PlannedCall]) -> Vec<GuardAction> {
    let mut actions = Vec::new();
    for call in calls {
        let Some(args) = call.arguments.as_object_mut() else { continue };
        if args.get("intent_count").and_then(Value::as_u64).is_none_or(|n| n < 1) {
            args.insert("intent_count".into(), json!(1));
        }
        let Some(followup) = &settings.followup else { continue };
        let is_followup = routing_tool_name(&followup.agent) == call.tool;
        if let Some(category) = args.get(&followup.category_argument).cloned() {
            let known = category.as_str().is_some_and(|c| settings.categories.iter().any(|k| k == c));
            if !known || !is_followup {
                args.remove(&followup.category_argument);
                actions.push(GuardAction::CategoryDropped {
                    tool: call.tool.clone(),
                    category: category.to_string(),
                });
            }
        }
        if !is_followup {
            args.remove(&followup.summary_argument);
        }
    }
    actions
}

/// How many distinct calls `calls` makes (by [`PlannedCall::key`]).
fn distinct_count(calls: &[PlannedCall]) -> usize {
    let mut seen = Vec::new();
    for c in calls {
        let key = c.key();
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    seen.len()
}

/// The reported intent count when it exceeds the distinct calls made.
fn missing_intents(calls: &[PlannedCall]) -> Option<usize> {
    let intents = calls.iter().filter_map(PlannedCall::intent_count).max()?;
    (intents > distinct_count(calls)).then_some(intents)
}

/// The failsafe's second request: the first answer, its calls acknowledged, and an instruction
/// naming what was made and what is missing.
fn failsafe_request(
    settings: &RoutingSettings,
    mut request: ChatRequest,
    text: &str,
    calls: &[ToolCall],
    intents: usize,
    planned: &[PlannedCall],
) -> ChatRequest {
    request.messages.push(Message::Assistant {
        content: (!text.is_empty()).then(|| text.to_owned()),
        tool_calls: calls.to_vec(),
    });
    for call in calls {
        request.messages.push(Message::Tool { call_id: call.id.clone(), content: "dispatched".into() });
    }
    let made: Vec<String> = planned.iter().map(|c| format!("{}(\"{}\")", c.tool, c.query)).collect();
    // With two routed agents and one of them called, the missing part is the other's.
    let unused: Vec<String> = settings
        .agents
        .iter()
        .map(|a| routing_tool_name(&a.agent))
        .filter(|t| !planned.iter().any(|c| &c.tool == t))
        .collect();
    let hint = match unused.as_slice() {
        [only] if settings.agents.len() == 2 => format!(" The uncovered part is most likely for {only}."),
        _ => String::new(),
    };
    request.messages.push(Message::system(format!(
        "<failsafe>You reported {intents} separate requests in the user's message but made only {} call(s): {}. \
         Call a tool now for each request that is not covered yet, with that part of the user's own words \
         as the query. Do not repeat the calls above.{hint}</failsafe>",
        made.len(),
        made.join(", "),
    )));
    request.tool_choice = Some(ToolChoice::Required);
    request
}

/// The re-ask after a refused direct answer: the answer, and an instruction saying why it was
/// refused; a tool call is required.
fn direct_answer_request(mut request: ChatRequest, text: &str) -> ChatRequest {
    request.messages.push(Message::Assistant {
        content: (!text.is_empty()).then(|| text.to_owned()),
        tool_calls: Vec::new(),
    });
    request.messages.push(Message::system(
        "<fastpath>You answered the user directly, but their message is not only a greeting, thanks or \
         chitchat: it asks for something, and only a tool can answer it. Call the tool for each request \
         in the message now, with the user's own words as the query. Do not answer it yourself.</fastpath>"
            .to_owned(),
    ));
    request.tool_choice = Some(ToolChoice::Required);
    request
}

/// Streams text at once up to the end of its first sentence; for messages that are not smalltalk
/// holds the rest until routing is decided.
struct PreambleGate {
    open: bool,
    first_sentence_done: bool,
    held: String,
}

impl PreambleGate {
    fn new(smalltalk: bool) -> PreambleGate {
        PreambleGate { open: smalltalk, first_sentence_done: false, held: String::new() }
    }

    /// The part of `text` to show now.
    fn push(&mut self, text: String) -> Option<String> {
        if self.open {
            return Some(text);
        }
        if self.first_sentence_done {
            self.held.push_str(&text);
            return None;
        }
        match text.find(['.', '!', '?', '\n']) {
            Some(end) => {
                self.first_sentence_done = true;
                let (shown, rest) = text.split_at(end + 1);
                self.held.push_str(rest);
                Some(shown.to_owned())
            }
            None => Some(text),
        }
    }

    fn release(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Test helpers: the reference routing over in-process agents.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::agent::{LlmAgent, LoopLimits};
    use crate::agent_tool::OutputMode;
    use crate::tool::ToolRegistry;

    /// The reference routing: `support` follows up, `shopping` is the fallback.
    pub(crate) fn settings() -> RoutingSettings {
        RoutingSettings {
            agents: ["support", "shopping"]
                .map(|a| RoutedAgent { agent: a.into(), description: format!("Ask {a}.") })
                .into(),
            followup: Some(Followup::named("support")),
            fallback: "shopping".into(),
            categories: vec!["missing_points".into(), "general".into()],
            guards: Guards::default(),
            smalltalk: Default::default(),
            images: vec![(ImageKind::Receipt, "support".into()), (ImageKind::Product, "shopping".into())],
        }
    }

    /// An agent that answers with one call of `model` and no tools.
    pub(crate) fn plain(name: &str, model: Arc<dyn ChatModel>) -> Arc<dyn Agent> {
        let tools = Arc::new(ToolRegistry::new(Vec::new()).expect("no tools"));
        Arc::new(LlmAgent::new(name, format!("You are {name}."), model, tools, LoopLimits::default()))
    }

    /// The reference routing agent `orchestrator` over `support` and `shopping` (each with
    /// `output: text_and_events`; `timeouts` per child).
    pub(crate) fn routed(
        model: Arc<dyn ChatModel>,
        support: Arc<dyn Agent>,
        shopping: Arc<dyn Agent>,
        timeouts: [Option<std::time::Duration>; 2],
    ) -> Arc<dyn Agent> {
        let settings = settings();
        let tools: Vec<Arc<dyn crate::tool::Tool>> = [support, shopping]
            .into_iter()
            .zip(timeouts)
            .map(|(agent, timeout)| {
                let options =
                    AgentToolOptions { output: OutputMode::TextAndEvents, timeout, ..Default::default() };
                Arc::new(routing_tool(agent, &settings, options).expect("valid"))
                    as Arc<dyn crate::tool::Tool>
            })
            .collect();
        let registry = Arc::new(ToolRegistry::new(tools).expect("valid tools"));
        let agent = LlmAgent::new("orchestrator", "Route.", model, registry, LoopLimits::default())
            .with_policy(Arc::new(RoutingPolicy::new(settings)));
        Arc::new(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::scripted::{Reply, ScriptedModel};
    use serde_json::json;

    const ASK_SUPPORT: &str = "ask_support";
    const ASK_SHOPPING: &str = "ask_shopping";

    fn turn(message: &str) -> AgentRequest {
        AgentRequest { query: message.into(), ..Default::default() }
    }

    type Step = Item<Option<Routed>>;

    /// A routing decision as the tests read it: the calls as the guards left them.
    struct Route {
        calls: Vec<PlannedCall>,
        actions: Vec<GuardAction>,
    }

    fn decided(steps: &[Step]) -> Route {
        let Some(Item::Done(Some(routed))) = steps.last() else { panic!("{steps:?}") };
        let calls = routed
            .decision
            .calls
            .iter()
            .map(|c| PlannedCall::from_arguments(&c.call.name, c.call.parse_arguments().unwrap(), ""))
            .collect();
        Route { calls, actions: routed.repairs.clone() }
    }

    async fn route_of(model: Arc<ScriptedModel>, message: &str) -> (Vec<Step>, Route) {
        let router = Router::new(model, RoutingPolicy::new(testing::settings()), "Route.");
        let steps: Vec<Step> = router.route(&turn(message)).collect().await;
        let route = decided(&steps);
        (steps, route)
    }

    fn shown_text(steps: &[Step]) -> String {
        steps
            .iter()
            .filter_map(|s| match s {
                Item::Event(Event::Text { text, .. }) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn failsafe_reasks_once_and_merges_the_missing_call() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        model.push(
            Reply::text("On it.")
                .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2})),
        );
        model.push(
            Reply::text("")
                .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2}))
                .tool_call(ASK_SHOPPING, json!({"query": "coffee deals", "intent_count": 2})),
        );
        let (_, route) = route_of(model.clone(), "my receipt didn't scan and find me coffee deals").await;
        let calls: Vec<(&str, &str)> =
            route.calls.iter().map(|c| (c.tool.as_str(), c.query.as_str())).collect();
        assert_eq!(calls, [(ASK_SUPPORT, "receipt didn't scan"), (ASK_SHOPPING, "coffee deals")]);
        assert_eq!(route.actions[0], GuardAction::FailsafeReasked { intents: 2, calls: 1, added: 1 });
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "one re-ask, no more");
        let instruction = requests[1].system_text_last();
        assert!(
            instruction.contains("2 separate requests")
                && instruction.contains("ask_support(\"receipt didn't scan\")")
        );
        assert!(instruction.contains("most likely for ask_shopping"), "{instruction}");
        assert_eq!(requests[1].tool_choice, Some(ToolChoice::Required));
    }

    #[tokio::test]
    async fn failsafe_is_bounded_to_one_retry() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(Reply::text("").tool_call(ASK_SUPPORT, json!({"query": "points", "intent_count": 3}))),
        ));
        let (_, route) = route_of(model.clone(), "points").await;
        assert_eq!(model.requests().len(), 2);
        assert_eq!(route.calls.len(), 1);
    }

    #[tokio::test]
    async fn a_refused_direct_answer_shows_only_its_first_sentence() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(Reply::text("Returns are easy. You have 90 days and a full refund.")),
        ));
        let (steps, route) = route_of(model, "what is the return policy on shoes").await;
        assert_eq!(shown_text(&steps), "Returns are easy.");
        assert_eq!(route.calls[0].tool, ASK_SHOPPING);
        assert!(route.actions.contains(&GuardAction::FastpathRejected));
    }

    #[tokio::test]
    async fn a_preamble_longer_than_a_sentence_is_shown_whole_once_calls_follow() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(
                Reply::text("Sure. Let me look.")
                    .tool_call(ASK_SHOPPING, json!({"query": "shoes", "intent_count": 1})),
            ),
        ));
        let (steps, route) = route_of(model, "find me shoes").await;
        assert_eq!(shown_text(&steps), "Sure. Let me look.");
        assert!(!route.calls.is_empty(), "the preamble is shown and the calls follow");
    }

    #[tokio::test]
    async fn smalltalk_streams_its_whole_answer_live() {
        let model =
            Arc::new(ScriptedModel::new("orch", Some(Reply::text("Hi! Good to see you. How can I help?"))));
        let (steps, route) = route_of(model, "hello").await;
        let texts = steps.iter().filter(|s| matches!(s, Item::Event(Event::Text { .. }))).count();
        assert!(texts > 3, "word by word, not held");
        assert!(route.calls.is_empty());
    }

    #[tokio::test]
    async fn a_refused_direct_answer_is_reasked_and_the_new_calls_are_guarded() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        model.push(Reply::text("Points usually post in a day. Check back tomorrow."));
        model.push(Reply::text("").tool_call(
            ASK_SUPPORT,
            json!({"query": "points missing", "intent_count": 1,
                                               "support_category": "missing_points"}),
        ));
        let (steps, route) = route_of(model.clone(), "hi, where are my points?").await;
        assert_eq!(shown_text(&steps), "Points usually post in a day.", "the refused rest is withheld");
        assert_eq!(route.calls.len(), 1);
        assert_eq!(route.calls[0].tool, ASK_SUPPORT);
        assert_eq!(route.calls[0].arguments["query"], "hi, where are my points?", "through the guards");
        assert_eq!(route.calls[0].arguments["support_category"], "missing_points");
        assert!(route.actions.contains(&GuardAction::FastpathReasked { calls: 1 }));
        assert!(!route.actions.contains(&GuardAction::FastpathRejected));
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].tool_choice, Some(ToolChoice::Required));
        assert!(requests[1].system_text_last().contains("not only a greeting"));
    }

    #[tokio::test]
    async fn a_direct_answer_to_an_echo_reply_is_reasked_and_keeps_the_models_category() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        model.push(Reply::text("Paper receipts post in 48 hours."));
        model.push(Reply::text("").tool_call(
            ASK_SUPPORT,
            json!({"query": "the paper one", "intent_count": 1, "support_category": "missing_points"}),
        ));
        let router = Router::new(model.clone(), RoutingPolicy::new(testing::settings()), "Route.");
        let request = AgentRequest {
            query: "the paper one".into(),
            previous: Some(crate::conversation::PreviousTurn {
                user_message: "my points are missing".into(),
                replies: vec![crate::conversation::PriorReply {
                    agent: "support".into(),
                    text: "Was it a paper receipt or an e-receipt?".into(),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        };
        let steps: Vec<Step> = router.route(&request).collect().await;
        let route = decided(&steps);
        assert_eq!(model.requests().len(), 2, "re-asked");
        assert_eq!(route.calls.len(), 1);
        assert_eq!(route.calls[0].tool, ASK_SUPPORT);
        assert_eq!(route.calls[0].arguments["support_category"], "missing_points");
        assert!(route.calls[0].prior_context.as_deref().unwrap().contains("paper receipt"));
        assert!(route.actions.contains(&GuardAction::FastpathReasked { calls: 1 }));
    }

    #[tokio::test]
    async fn smalltalk_with_an_image_is_reasked() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        model.push(Reply::text("You're welcome!"));
        model.push(Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "thanks!", "intent_count": 1})));
        let router = Router::new(model.clone(), RoutingPolicy::new(testing::settings()), "Route.");
        let request = AgentRequest {
            query: "thanks!".into(),
            image: Some(crate::image::Image::described("a cat on a sofa")),
            ..Default::default()
        };
        let steps: Vec<Step> = router.route(&request).collect().await;
        let route = decided(&steps);
        assert_eq!(model.requests().len(), 2, "the image's note makes it more than smalltalk");
        assert_eq!(route.calls[0].tool, ASK_SHOPPING);
        assert_eq!(route.calls[0].query, "thanks!", "the user's words, not the note");
    }

    #[tokio::test]
    async fn smalltalk_in_another_language_is_answered_without_a_reask() {
        let model = Arc::new(ScriptedModel::new("orch", Some(Reply::text("¡Hola! ¿En qué te ayudo?"))));
        let (_, route) = route_of(model.clone(), "hola, ¿qué tal?").await;
        assert!(route.calls.is_empty());
        assert_eq!(model.requests().len(), 1);
    }

    #[tokio::test]
    async fn the_models_prior_context_reaches_either_agent() {
        let orchestrator = Arc::new(ScriptedModel::new(
            "orch",
            Some(Reply::text("").tool_call(
                ASK_SHOPPING,
                json!({"query": "then show me offers from that brand", "intent_count": 1,
                       "prior_context": "Their Tide receipt was rejected as a duplicate."}),
            )),
        ));
        let support = Arc::new(ScriptedModel::new("sup", Some(Reply::text("Support."))));
        let shopping = Arc::new(ScriptedModel::new("shop", Some(Reply::text("Tide: 500 points."))));
        let agent = testing::routed(
            orchestrator,
            testing::plain("support", support.clone()),
            testing::plain("shopping", shopping.clone()),
            [None, None],
        );
        let o = Arc::new(crate::orchestrator::Orchestrator::new(agent, "orch"));
        let turn =
            crate::orchestrator::TurnRequest::new("ep", "t1", "u", "then show me offers from that brand");
        let _: Vec<Event> = o.run_turn(turn).collect().await;
        let asked = shopping.requests()[0].last_user_text().to_owned();
        assert!(
            asked.contains("Tide receipt was rejected") && asked.contains("offers from that brand"),
            "{asked}"
        );
        assert!(support.requests().is_empty());
    }
}
