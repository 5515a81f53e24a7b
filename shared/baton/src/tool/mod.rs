//! Tools an LLM agent can call: the [`Tool`] trait, a [`ToolRegistry`] that offers them to a model,
//! and argument validation against each tool's JSON Schema.
//!
//! Nothing a model sends can crash a call: unreadable JSON, arguments that break the schema, an
//! unknown tool name, a tool that fails or one that runs past its timeout all become a
//! [`ToolOutcome`] with `is_error` set, whose message the model reads on its next step.
//!
//! # Layout
//! - this file: what a call is made for ([`ToolContext`], [`SessionState`], [`Instances`]), the
//!   [`Tool`] trait and what a call streams and ends with ([`ToolRun`], [`ToolOutcome`]);
//! - `registry`: [`ToolRegistry`], the tools of one agent as offered to its model, and the checks a
//!   call passes before it runs;
//! - `schema`: [`JsonSchema`], a compiled schema and its violations in words;
//! - [`openapi`]: HTTP tools, one per operation of an OpenAPI document (`docs/tools.md`).
//! - `testing` (tests only): `FnTool`, the unit tests' one way to make a tool: a name, a schema
//!   and an async function.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::conversation::Conversation;
use crate::item::{Item, ItemStream};

/// Who a tool call is made for, and the session it runs in: what every tool sees (the ids,
/// which tools that read per-user data use; the calling instance's session; the call), and the
/// calling instance's place in the turn ([`ChildScope`]), which only a tool that starts a child
/// instance (an agent tool, a mini-agent) reads.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    /// The authenticated user.
    pub user_id: String,
    /// The conversation.
    pub episode_id: String,
    /// The session state of the calling agent instance.
    pub state: SessionState,
    /// The call this context is for: set by the tool loop for each call, so that a tool
    /// streaming its own events (progress) names the caller and call id they belong to.
    pub call: CallRef,
    /// The calling instance's place in the turn, for a child it starts.
    pub child: ChildScope,
}

/// The calling instance's place in the turn: what a tool that starts a child instance (an agent
/// tool, a mini-agent) hands it, and where the tool loop keeps the turn's approvals.
#[derive(Debug, Clone, Default)]
pub struct ChildScope {
    /// How deep the calling instance runs below the turn (the entry agent is 0).
    pub depth: u32,
    /// Instance numbering shared by the whole turn.
    pub instances: Instances,
    /// The conversation the calling instance sees (empty for an isolated one); children that
    /// see the conversation get it.
    pub conversation: Arc<Conversation>,
    /// The turn's approvals: where paused instances leave their state (docs/approvals.md).
    pub approvals: crate::approval::TurnApprovals,
    /// Set by a resumed turn for the call of an agent tool whose child paused: the child
    /// instance to start again, under its own name, from its paused state.
    pub resumes: Option<String>,
}

/// The tool call a [`ToolContext`] is for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallRef {
    /// The calling agent instance (`Name[i]`).
    pub agent: String,
    /// The model's call id.
    pub call_id: String,
}

impl ToolContext {
    /// A context for `user_id` in `episode_id`, with an empty session at depth 0.
    pub fn new(user_id: impl Into<String>, episode_id: impl Into<String>) -> ToolContext {
        ToolContext { user_id: user_id.into(), episode_id: episode_id.into(), ..Default::default() }
    }
}

/// State keys that start with this prefix are internal to the instance that set them: they are
/// never copied into a child agent's session.
pub(crate) const INTERNAL_STATE_PREFIX: &str = "_";

/// Whether a state key is internal (see [`INTERNAL_STATE_PREFIX`]).
pub(crate) fn is_internal_key(key: &str) -> bool {
    key.starts_with(INTERNAL_STATE_PREFIX)
}

/// The session state of one agent instance: a JSON object its tools read and write while the
/// instance runs. A child agent started through an agent tool gets a copy of it, without the
/// internal keys; what the child writes stays in the child's own session.
#[derive(Debug, Clone, Default)]
pub struct SessionState(Arc<Mutex<serde_json::Map<String, Value>>>);

impl SessionState {
    /// A session holding `values`.
    pub fn new(values: serde_json::Map<String, Value>) -> SessionState {
        SessionState(Arc::new(Mutex::new(values)))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.0.lock().expect("state lock").get(key).cloned()
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: impl Into<String>, value: Value) {
        self.0.lock().expect("state lock").insert(key.into(), value);
    }

    /// Everything, as it is now.
    pub fn snapshot(&self) -> serde_json::Map<String, Value> {
        self.0.lock().expect("state lock").clone()
    }

    /// What a child session starts from: a copy of every key but the internal ones.
    pub fn for_child(&self) -> serde_json::Map<String, Value> {
        let values = self.0.lock().expect("state lock");
        values.iter().filter(|(k, _)| !is_internal_key(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Numbers agent instances across one turn, so that every instance name (`Name[i]`) is unique in
/// it however deep the agents nest, and bounds how many child instances of the turn run at once
/// (`MAX_CONCURRENT_INSTANCES`). Clones share both.
#[derive(Debug, Clone)]
pub struct Instances {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    running: Arc<tokio::sync::Semaphore>,
    /// Whether the turn's agents may continue a vendor's server-side conversation (off for a
    /// turn run beside another of its episode: one response chain is never continued by two
    /// turns at once).
    chains: bool,
}

/// Child agent instances one turn runs at once; more wait for a place.
pub(crate) const MAX_CONCURRENT_INSTANCES: usize = 8;

impl Default for Instances {
    fn default() -> Self {
        Instances {
            counts: Arc::default(),
            running: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_INSTANCES)),
            chains: true,
        }
    }
}

impl Instances {
    /// The same numbering, for a turn whose agents continue no vendor response chain (it runs
    /// beside another turn of its episode, `on_busy: parallel`).
    pub fn without_chains(mut self) -> Instances {
        self.chains = false;
        self
    }

    /// Whether the turn's agents may continue a vendor's server-side conversation.
    pub fn chains_allowed(&self) -> bool {
        self.chains
    }

    /// The turn's places for running child instances.
    pub fn permits(&self) -> Arc<tokio::sync::Semaphore> {
        self.running.clone()
    }

    /// Counts `instance` (`name[i]`) as taken, so the turn numbers its own instances of `name`
    /// after it (a resumed turn keeps its paused instances' names).
    pub fn reserve(&self, instance: &str) {
        let Some((name, rest)) = instance.rsplit_once('[') else { return };
        let Some(n) = rest.strip_suffix(']').and_then(|n| n.parse::<usize>().ok()) else { return };
        let mut counts = self.counts.lock().expect("instances lock");
        let count = counts.entry(name.to_owned()).or_default();
        *count = (*count).max(n);
    }

    /// The next instance name of agent `name`: `name[1]`, then `name[2]`, ...
    pub fn next(&self, name: &str) -> String {
        let mut counts = self.counts.lock().expect("instances lock");
        let n = counts.entry(name.to_owned()).or_default();
        *n += 1;
        format!("{name}[{n}]")
    }
}

/// A tool failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments were not what the tool accepts (bad JSON, schema violation, bad value).
    #[error("invalid arguments for `{tool}`: {reason}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, for the model to fix.
        reason: String,
    },
    /// The model named a tool that does not exist.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The tools that exist, comma-separated.
        available: String,
    },
    /// The tool ran past its timeout.
    #[error("`{tool}` did not answer within {} ms", timeout.as_millis())]
    Timeout {
        /// The tool.
        tool: String,
        /// The limit.
        timeout: Duration,
    },
    /// The tool itself failed.
    #[error("`{tool}` failed: {reason}")]
    Failed {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The call was sent and its transport broke before the answer: the tool may have acted, so
    /// it is not sent again (never twice), and the model and the person read that the outcome
    /// is unknown.
    #[error("`{tool}`: {reason}")]
    OutcomeUnknown {
        /// The tool.
        tool: String,
        /// What broke, naming the server (never its address).
        reason: String,
    },
    /// The tool's result is larger than its source allows (`max_result_bytes`).
    #[error("`{tool}` answered more than {limit} bytes, over its `max_result_bytes`; ask for less")]
    TooLarge {
        /// The tool.
        tool: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A model step called more tools than one step may start.
    #[error(
        "`{tool}` was not started: one step may call at most {limit} tools; call the rest in the next step"
    )]
    TooManyCalls {
        /// The tool.
        tool: String,
        /// The limit.
        limit: usize,
    },
    /// An agent tool's call would nest agents deeper than the configured limit.
    #[error("`{tool}` was not started: agents may nest at most {max_depth} levels deep")]
    DepthExceeded {
        /// The agent tool.
        tool: String,
        /// The limit.
        max_depth: u32,
    },
    /// An agent tool's child agent answered with output that breaks its output schema.
    #[error("`{tool}` answered with output that breaks its output schema: {reason}")]
    InvalidOutput {
        /// The agent tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool's own schema does not compile: a programming error, or a tool server's bad schema.
    /// Found by the tool's first call (a registry compiles each schema on first use), which is
    /// refused with this error; the registry's other tools still work.
    #[error("the JSON schema of `{tool}` is invalid: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// The compiler's message.
        reason: String,
    },
    /// Two tools share a name.
    #[error("two tools are named `{0}`")]
    DuplicateName(String),
    /// The call needs a person's approval, and no one can give it here (docs/approvals.md).
    #[error("`{tool}` was not run: it needs a person's approval ({reason}), which cannot be asked for here")]
    ApprovalRequired {
        /// The tool.
        tool: String,
        /// Why it needs approval.
        reason: String,
    },
}

impl ToolError {
    /// A stable code for `tool_result` error payloads.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments { .. } => "invalid_arguments",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::Timeout { .. } => "tool_timeout",
            ToolError::Failed { .. } => "tool_failed",
            ToolError::OutcomeUnknown { .. } => "outcome_unknown",
            ToolError::DepthExceeded { .. } => "agent_depth_exceeded",
            ToolError::TooManyCalls { .. } => "too_many_calls",
            ToolError::TooLarge { .. } => "result_too_large",
            ToolError::InvalidOutput { .. } => "invalid_agent_output",
            ToolError::InvalidSchema { .. } => "invalid_schema",
            ToolError::DuplicateName(_) => "duplicate_tool",
            ToolError::ApprovalRequired { .. } => "approval_required",
        }
    }

    /// The error as the JSON a model sees in place of a result.
    pub fn to_result(&self) -> Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

/// A tool: a name, a description and a JSON Schema for the model, and an async call.
///
/// `call` gets arguments that already passed the schema; it may still refuse values the schema
/// cannot express, with [`ToolError::InvalidArguments`].
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments (an object schema).
    fn parameters(&self) -> Value;

    /// What kind of tool this is, for people reading a configuration's tree (`orchestrator
    /// check`) and its errors: `"native"` (a Rust tool), `"agent"`, `"mcp"`, `"openapi"`,
    /// `"lambda"`. The tool loop never reads it.
    fn kind(&self) -> &'static str {
        "native"
    }

    /// Runs the tool.
    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError>;

    /// Starts one call whose events stream while it runs (an agent tool streams its child
    /// instance's events); the tool loop never asks what kind of tool it runs.
    ///
    /// The default runs [`Tool::call`] under `options.timeout` and streams nothing.
    fn start(self: Arc<Self>, arguments: Value, context: ToolContext, options: CallOptions) -> ToolRun {
        let run = async move {
            let outcome = match tokio::time::timeout(options.timeout, self.call(arguments, &context)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(ToolError::Timeout { tool: self.name().to_owned(), timeout: options.timeout }),
            };
            Item::Done(ToolFinish::of(outcome))
        };
        ToolRun { items: Box::pin(futures::stream::once(run)) }
    }
}

/// How the tool loop runs one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOptions {
    /// Longest an ordinary tool call may take (an agent tool runs its instance under the
    /// agent's own timeout instead).
    pub timeout: Duration,
    /// The call's user-visible content must end with a `content_end` boundary (set by the
    /// routing policy for the follow-up agent of a mixed turn; tools without text ignore it).
    pub mark_content_end: bool,
}

impl CallOptions {
    /// A call bounded by `timeout`.
    pub fn new(timeout: Duration) -> CallOptions {
        CallOptions { timeout, mark_content_end: false }
    }
}

/// One started tool call: the events it streams for the client while it runs, then what it
/// ended with as its last item. It runs while polled and is cancelled when dropped.
pub struct ToolRun {
    /// The call's events, then its [`ToolFinish`].
    pub items: ItemStream<ToolFinish>,
}

impl ToolRun {
    /// A call that ended before it started.
    pub fn failed(error: ToolError) -> ToolRun {
        let finish = ToolFinish::of(Err(error));
        ToolRun { items: Box::pin(futures::stream::iter([Item::Done(finish)])) }
    }
}

/// What one tool call ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFinish {
    /// The result the model reads, or why there is none.
    pub outcome: Result<Value, ToolError>,
    /// Set when the result is also the user's answer as is (an agent tool with
    /// `skip_summarization` whose child answered).
    pub answer: Option<DirectAnswer>,
    /// Set when the call paused instead (an agent tool whose child waits for approvals): its
    /// child's state; `outcome` is then not read.
    pub paused: Option<Box<crate::approval::Suspension>>,
}

impl ToolFinish {
    /// A call that ended with `outcome`.
    pub fn of(outcome: Result<Value, ToolError>) -> ToolFinish {
        ToolFinish { outcome, answer: None, paused: None }
    }
}

/// A tool result that is the user's answer as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectAnswer {
    /// The answer.
    pub text: String,
    /// Whether the client has already seen it (streamed while the call ran).
    pub streamed: bool,
}

/// What one tool call produced: a result, or an error the model reads as its result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The arguments as parsed (the raw text as a JSON string when they were not JSON).
    pub arguments: Value,
    /// The result, or an error object `{"error": {"code", "message"}}`.
    pub result: Value,
    /// Whether `result` is an error.
    pub is_error: bool,
}

impl ToolOutcome {
    /// An error outcome for a call with `arguments`.
    pub fn error(arguments: Value, error: ToolError) -> ToolOutcome {
        ToolOutcome { arguments, result: error.to_result(), is_error: true }
    }

    /// The outcome of a call of `tool` with `arguments` that ended with `result`; a failure is
    /// logged.
    pub fn from_result(tool: &str, arguments: Value, result: Result<Value, ToolError>) -> ToolOutcome {
        match result {
            Ok(result) => ToolOutcome { arguments, result, is_error: false },
            Err(error) => {
                tracing::warn!(%tool, %error, "tool call failed");
                ToolOutcome::error(arguments, error)
            }
        }
    }

    /// The text a model gets back for this call.
    pub fn content(&self) -> String {
        self.result.to_string()
    }
}

pub mod openapi;
mod registry;
mod schema;

pub use registry::ToolRegistry;
pub use schema::JsonSchema;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
