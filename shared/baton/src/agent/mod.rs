//! Agents: anything that turns a request into a stream of [`Event`](crate::event::Event)s.
//!
//! An in-process agent is an async stream; a remote one (a separately deployed Lambda) is a byte
//! stream decoded into the same events. Whoever runs an agent does not know the difference.
//!
//! - [`Agent`]: the trait; [`AgentRequest`]: what an instance is asked.
//! - [`LlmAgent`]: a tool loop (max steps, per-tool timeout, a step's calls run concurrently and
//!   stream through the live-slot merge), continuing the vendor's server-side conversation
//!   through `ResponseChains` where the model can continue one. A `StepPolicy` may shape its first
//!   model step: the routing policy (module `routing`) does, for an entry agent that routes.
//! - `start_child`: the one place a child instance starts (its name, depth, session,
//!   conversation, timeout); `run_instance` runs an instance between `agent_started` and
//!   `agent_finished`.

mod approval;
mod batch;
mod chains;
mod instance;
mod llm;
mod step;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::item::Item;
pub(crate) use crate::item::ItemStream;
pub use approval::{ApprovalPolicy, ApprovalRule};
pub(crate) use chains::{MemoryResponseChains, ResponseChains};
#[cfg(test)]
pub(crate) use instance::instrument_for;
pub(crate) use instance::{
    ChildContext, ChildInput, DEFAULT_MAX_DEPTH, InstanceOptions, run_instance, start_child,
};
pub(crate) use llm::first_step_input;
pub use step::LoopLimits;
pub(crate) use step::{
    Answered, ForkInput, ForkPolicy, ForkStream, ModelReply, StepCall, StepDecision, StepInput, StepPolicy,
    StepStream, model_call,
};

use crate::conversation::PreviousTurn;
use crate::event::EventStream;
use crate::model::{ChatModel, Message};
use crate::mux::MuxConfig;
use crate::tool::{Instances, ToolRegistry};

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
/// `StepPolicy` marked last, ends the run without another model call; a call of a last step
/// that failed is reported as an `agent_failed` error of this instance (its part of the answer
/// is missing).
///
/// Context: a model with server-side state (the Responses API) continues the episode's last
/// response when `ResponseChains` has one, and then sends only the new turn; otherwise the
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
    approvals: Arc<ApprovalPolicy>,
    children: BTreeMap<String, Arc<dyn Agent>>,
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
            children: BTreeMap::new(),
        }
    }

    /// Names `agent` as the child its tool `tool` starts (an agent tool): a paused instance of
    /// that tool's call resumes only if `agent` can resume it. A paused child under a tool named
    /// here for no agent cannot resume.
    pub fn with_child(mut self, tool: impl Into<String>, agent: Arc<dyn Agent>) -> LlmAgent {
        self.children.insert(tool.into(), agent);
        self
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

    /// Lets `fork` answer a run before the tool loop (see `ForkPolicy`).
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

/// What an agent says when its answer broke off.
pub(crate) const APOLOGY: &str = "\n\nSorry, I couldn't finish that answer. Please try again.";

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
    /// The turn's approvals (not sent to remote agents: a call that needs approval in another
    /// process is refused there).
    #[serde(skip)]
    pub approvals: crate::approval::TurnApprovals,
}

/// An agent. `run` returns at once; the work starts when the stream is polled and stops when it
/// is dropped.
pub trait Agent: Send + Sync {
    /// The agent's name (`billing`, `search`); instances are `name[i]`.
    fn name(&self) -> &str;

    /// Runs one instance. Every event it emits names `instance` as its source.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream;

    /// Whether its instance paused as `paused` can start again as the configuration now stands,
    /// with `decisions` (edited arguments are checked against the tools' schemas). Only tool
    /// loops pause; any other agent cannot.
    fn check_resume(
        &self,
        paused: &crate::approval::Suspension,
        decisions: &crate::approval::Decisions,
    ) -> Result<(), crate::approval::ResumeError> {
        let _ = decisions;
        Err(crate::approval::ResumeError::ConfigChanged(format!(
            "the agent `{}` ({}) cannot resume a paused run",
            self.name(),
            paused.instance
        )))
    }
}

impl<A: Agent + ?Sized> Agent for Arc<A> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        (**self).run(request, instance)
    }

    fn check_resume(
        &self,
        paused: &crate::approval::Suspension,
        decisions: &crate::approval::Decisions,
    ) -> Result<(), crate::approval::ResumeError> {
        (**self).check_resume(paused, decisions)
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
pub(crate) fn user_message(request: &AgentRequest) -> Message {
    let mut content = with_prior_context(request.query.clone(), request.prior_context.clone());
    let Some(image) = &request.image else { return Message::user(content) };
    if let Some(note) = image.note() {
        content.push_str(&format!("\n{note}"));
    }
    Message::User { content, images: image.url.iter().cloned().collect() }
}

#[cfg(test)]
pub(crate) mod tests;
