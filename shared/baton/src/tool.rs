//! Tools an LLM agent can call: the [`Tool`] trait, a [`ToolRegistry`] that offers them to a model,
//! and argument validation against each tool's JSON Schema.
//!
//! Nothing a model sends can crash a call: unreadable JSON, arguments that break the schema, an
//! unknown tool name, a tool that fails or one that runs past its timeout all become a
//! [`ToolOutcome`] with `is_error` set, whose message the model reads on its next step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::conversation::Conversation;
use crate::item::{Item, ItemStream};
use crate::model::{ToolCall, ToolSpec};

/// Who a tool call is made for, and the session it runs in: tools that read per-user data
/// (purchase history) use the ids; agent tools use the rest
/// to start their child instance.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    /// The authenticated user.
    pub user_id: String,
    /// The conversation.
    pub episode_id: String,
    /// The session state of the calling agent instance.
    pub state: SessionState,
    /// How deep the calling instance runs below the turn (the entry agent is 0).
    pub depth: u32,
    /// Instance numbering shared by the whole turn.
    pub instances: Instances,
    /// The conversation the calling instance sees (empty for an isolated one); children that
    /// see the conversation get it.
    pub conversation: Arc<Conversation>,
    /// The call this context is for: set by the tool loop for each call, so that a tool
    /// streaming its own events (progress) names the caller and call id they belong to.
    pub call: CallRef,
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
pub const INTERNAL_STATE_PREFIX: &str = "_";

/// Whether a state key is internal (see [`INTERNAL_STATE_PREFIX`]).
pub fn is_internal_key(key: &str) -> bool {
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
/// ([`MAX_CONCURRENT_INSTANCES`]). Clones share both.
#[derive(Debug, Clone)]
pub struct Instances {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    running: Arc<tokio::sync::Semaphore>,
}

/// Child agent instances one turn runs at once; more wait for a place.
pub const MAX_CONCURRENT_INSTANCES: usize = 8;

impl Default for Instances {
    fn default() -> Self {
        Instances {
            counts: Arc::default(),
            running: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_INSTANCES)),
        }
    }
}

impl Instances {
    /// The turn's places for running child instances.
    pub fn permits(&self) -> Arc<tokio::sync::Semaphore> {
        self.running.clone()
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
}

impl ToolError {
    /// A stable code for `tool_result` error payloads.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments { .. } => "invalid_arguments",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::Timeout { .. } => "tool_timeout",
            ToolError::Failed { .. } => "tool_failed",
            ToolError::DepthExceeded { .. } => "agent_depth_exceeded",
            ToolError::TooManyCalls { .. } => "too_many_calls",
            ToolError::InvalidOutput { .. } => "invalid_agent_output",
            ToolError::InvalidSchema { .. } => "invalid_schema",
            ToolError::DuplicateName(_) => "duplicate_tool",
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
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments (an object schema).
    fn parameters(&self) -> Value;

    /// Runs the tool.
    fn call<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;

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
            Item::Done(ToolFinish { outcome, answer: None })
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
        let finish = ToolFinish { outcome: Err(error), answer: None };
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

/// A call the registry refused before it ran: the arguments as parsed (the raw text as a JSON
/// string when they were not JSON), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The arguments.
    pub arguments: Value,
    /// Why the call cannot run.
    pub error: ToolError,
}

#[derive(Clone)]
struct Registered {
    tool: Arc<dyn Tool>,
    /// The tool's parameters schema, compiled by its first call (shared with the registries
    /// [`ToolRegistry::only`] makes).
    schema: Arc<OnceLock<Result<JsonSchema, String>>>,
}

impl Registered {
    fn new(tool: Arc<dyn Tool>) -> Registered {
        Registered { tool, schema: Arc::default() }
    }

    fn schema(&self) -> Result<&JsonSchema, &str> {
        self.schema
            .get_or_init(|| JsonSchema::compile(&self.tool.parameters()))
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The tools of one agent. Each tool's schema is compiled by its first call, not when the
/// registry is built: the first schema a process compiles loads the JSON Schema meta-schemas
/// (a few milliseconds), which a Lambda function's start-up need not pay, and a mini-agent's
/// registry ([`ToolRegistry::only`]) compiles only what its calls use.
pub struct ToolRegistry {
    tools: Vec<Registered>,
    by_name: HashMap<String, usize>,
    /// The tools as offered to a model, built by the first model call and shared by every later
    /// one: a tool's schema does not change while its registry lives.
    specs: OnceLock<Arc<[ToolSpec]>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.iter().map(|r| r.tool.name())).finish()
    }
}

impl ToolRegistry {
    /// A registry of `tools`; fails if two names clash. A tool whose schema does not compile is
    /// refused when called ([`ToolError::InvalidSchema`]).
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<ToolRegistry, ToolError> {
        let mut registered = Vec::with_capacity(tools.len());
        let mut by_name = HashMap::new();
        for tool in tools {
            let name = tool.name().to_owned();
            if by_name.insert(name.clone(), registered.len()).is_some() {
                return Err(ToolError::DuplicateName(name));
            }
            registered.push(Registered::new(tool));
        }
        Ok(ToolRegistry { tools: registered, by_name, specs: OnceLock::new() })
    }

    /// The tools as offered to a model, shared: built by the first call, not per model call.
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.specs
            .get_or_init(|| {
                self.tools
                    .iter()
                    .map(|r| ToolSpec {
                        name: r.tool.name().to_owned(),
                        description: r.tool.description().to_owned(),
                        parameters: r.tool.parameters(),
                    })
                    .collect()
            })
            .clone()
    }

    /// The names of the registered tools, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|r| r.tool.name()).collect()
    }

    /// A registry of only the tools named in `names` (names it does not hold are ignored), in
    /// this registry's order: a call of any other tool is an `unknown_tool` error result.
    pub fn only(&self, names: &[String]) -> ToolRegistry {
        let tools: Vec<Registered> =
            self.tools.iter().filter(|r| names.iter().any(|n| n == r.tool.name())).cloned().collect();
        let by_name = tools.iter().enumerate().map(|(i, r)| (r.tool.name().to_owned(), i)).collect();
        ToolRegistry { tools, by_name, specs: OnceLock::new() }
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Parses and validates a model's call, without running it.
    pub fn check(&self, call: &ToolCall) -> Result<(Arc<dyn Tool>, Value), Box<Refused>> {
        let refused = |arguments, error| Box::new(Refused { arguments, error });
        let raw = || Value::String(call.arguments.clone());
        let Some(&index) = self.by_name.get(&call.name) else {
            let available = self.names().join(", ");
            return Err(refused(raw(), ToolError::UnknownTool { name: call.name.clone(), available }));
        };
        let registered = &self.tools[index];
        let arguments = call.parse_arguments().map_err(|e| {
            let reason = format!("the arguments are not valid JSON ({e}); send one JSON object");
            refused(raw(), ToolError::InvalidArguments { tool: call.name.clone(), reason })
        })?;
        let schema = registered.schema().map_err(|reason| {
            refused(
                arguments.clone(),
                ToolError::InvalidSchema { tool: call.name.clone(), reason: reason.into() },
            )
        })?;
        if let Err(reason) = schema.validate(&arguments) {
            return Err(refused(
                arguments.clone(),
                ToolError::InvalidArguments { tool: call.name.clone(), reason },
            ));
        }
        Ok((registered.tool.clone(), arguments))
    }

    /// Runs one call: validation, then the tool under `timeout`. Never fails: every problem is an
    /// error outcome.
    pub async fn call(&self, call: &ToolCall, context: &ToolContext, timeout: Duration) -> ToolOutcome {
        match self.check(call) {
            Ok((tool, arguments)) => run_checked(tool, arguments, context, timeout).await,
            Err(refused) => ToolOutcome::error(refused.arguments, refused.error),
        }
    }
}

/// Runs a call [`ToolRegistry::check`] accepted to its end, its events dropped. Never fails: a
/// tool error or a timeout is an error outcome.
pub async fn run_checked(
    tool: Arc<dyn Tool>,
    arguments: Value,
    context: &ToolContext,
    timeout: Duration,
) -> ToolOutcome {
    let name = tool.name().to_owned();
    let run = tool.start(arguments.clone(), context.clone(), CallOptions::new(timeout));
    let outcome = Item::result(run.items).await.map_or_else(
        || Err(ToolError::Failed { tool: name.clone(), reason: "the call ended without a result".into() }),
        |finish| finish.outcome,
    );
    ToolOutcome::from_result(&name, arguments, outcome)
}

/// A JSON Schema compiled once (draft 2020-12 by default; no remote `$ref`s), to validate
/// values against it.
pub struct JsonSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonSchema")
    }
}

impl JsonSchema {
    /// Compiles `schema`; the error is the compiler's message.
    pub fn compile(schema: &Value) -> Result<JsonSchema, String> {
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(boon::SchemeUrlLoader::new()));
        compiler.set_default_draft(boon::Draft::V2020_12);
        let mut schemas = boon::Schemas::new();
        let url = "urn:baton:schema";
        compiler.add_resource(url, schema.clone()).map_err(|e| format!("{e:#}"))?;
        let index = compiler.compile(url, &mut schemas).map_err(|e| format!("{e:#}"))?;
        Ok(JsonSchema { schemas, index })
    }

    /// Checks `value`; the error names each violation and where it is.
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        self.schemas.validate(value, self.index).map_err(|e| schema_violations(&e))
    }
}

/// The leaf violations of a validation error, one per line part: `at '/limit': must be >= 1`.
fn schema_violations(error: &boon::ValidationError<'_, '_>) -> String {
    fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
        if e.causes.is_empty() {
            let at = e.instance_location.to_string();
            let at = if at.is_empty() { "the arguments".to_owned() } else { format!("'{at}'") };
            out.push(format!("at {at}: {}", e.kind));
        }
        for cause in &e.causes {
            leaves(cause, out);
        }
    }
    let mut out = Vec::new();
    leaves(error, &mut out);
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> &str {
            "Echoes its text."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {
                "text": {"type": "string", "minLength": 1},
                "times": {"type": "integer", "minimum": 1, "maximum": 3},
            }, "required": ["text"], "additionalProperties": false})
        }
        fn call<'a>(
            &'a self,
            arguments: Value,
            context: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            Box::pin(async move {
                if arguments["text"] == "fail" {
                    return Err(ToolError::Failed { tool: "echo".into(), reason: "asked to".into() });
                }
                if arguments["text"] == "slow" {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok(json!({"echo": arguments["text"], "user": context.user_id}))
            })
        }
    }

    fn registry() -> ToolRegistry {
        ToolRegistry::new(vec![Arc::new(Echo)]).unwrap()
    }

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.into() }
    }

    async fn run(name: &str, arguments: &str) -> ToolOutcome {
        let context = ToolContext::new("u1", "e");
        registry().call(&call(name, arguments), &context, Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn valid_arguments_reach_the_tool_with_the_context() {
        let outcome = run("echo", r#"{"text":"hi"}"#).await;
        assert!(!outcome.is_error);
        assert_eq!(outcome.result, json!({"echo": "hi", "user": "u1"}));
        assert_eq!(outcome.arguments, json!({"text": "hi"}));
    }

    #[tokio::test]
    async fn schema_violations_are_named_for_the_model() {
        let outcome = run("echo", r#"{"text":"hi","times":9,"extra":true}"#).await;
        assert!(outcome.is_error);
        assert_eq!(outcome.result["error"]["code"], "invalid_arguments");
        let message = outcome.result["error"]["message"].as_str().unwrap();
        assert!(message.contains("'/times'") && message.contains("extra"), "{message}");
        assert_eq!(outcome.arguments["times"], 9, "the parsed arguments are kept for the event");
    }

    #[tokio::test]
    async fn missing_required_argument_is_an_error_result() {
        let outcome = run("echo", "{}").await;
        assert!(outcome.is_error);
        assert!(outcome.result["error"]["message"].as_str().unwrap().contains("text"), "{outcome:?}");
    }

    #[tokio::test]
    async fn unreadable_json_is_an_error_result_with_the_raw_text() {
        let outcome = run("echo", r#"{"text": "hi""#).await;
        assert!(outcome.is_error);
        assert_eq!(outcome.result["error"]["code"], "invalid_arguments");
        assert_eq!(outcome.arguments, json!(r#"{"text": "hi""#));
    }

    #[tokio::test]
    async fn unknown_tool_lists_the_real_ones() {
        let outcome = run("shout", "{}").await;
        assert_eq!(outcome.result["error"]["code"], "unknown_tool");
        assert!(outcome.result["error"]["message"].as_str().unwrap().contains("echo"));
    }

    #[tokio::test]
    async fn tool_failure_is_an_error_result() {
        let outcome = run("echo", r#"{"text":"fail"}"#).await;
        assert_eq!(outcome.result["error"]["code"], "tool_failed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_tool_times_out() {
        let outcome = run("echo", r#"{"text":"slow"}"#).await;
        assert_eq!(outcome.result["error"]["code"], "tool_timeout");
    }

    #[tokio::test]
    async fn a_bad_schema_refuses_its_calls_and_a_duplicate_name_fails_at_construction() {
        struct Bad;
        impl Tool for Bad {
            fn name(&self) -> &str {
                "bad"
            }
            fn description(&self) -> &str {
                ""
            }
            fn parameters(&self) -> Value {
                json!({"type": "nonsense"})
            }
            fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
                Box::pin(async { Ok(Value::Null) })
            }
        }
        let registry = ToolRegistry::new(vec![Arc::new(Bad), Arc::new(Echo)]).unwrap();
        let context = ToolContext::new("u1", "e");
        for _ in 0..2 {
            let outcome = registry.call(&call("bad", "{}"), &context, Duration::from_secs(1)).await;
            assert_eq!(outcome.result["error"]["code"], "invalid_schema", "{outcome:?}");
            assert!(outcome.result["error"]["message"].as_str().unwrap().contains("`bad`"), "{outcome:?}");
        }
        let fine = registry.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
        assert!(!fine.is_error, "the registry's other tools still work: {fine:?}");
        let dup = ToolRegistry::new(vec![Arc::new(Echo), Arc::new(Echo)]);
        assert!(matches!(dup, Err(ToolError::DuplicateName(n)) if n == "echo"));
    }

    #[tokio::test]
    async fn a_subset_registry_shares_the_compiled_schemas_and_refuses_the_rest() {
        let full = ToolRegistry::new(vec![Arc::new(Echo)]).unwrap();
        let context = ToolContext::new("u1", "e");
        let subset = full.only(&["echo".to_owned()]);
        let outcome = subset.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
        assert!(!outcome.is_error, "{outcome:?}");
        assert!(full.tools[0].schema.get().is_some(), "compiled once, for both registries");
        let none = full.only(&[]);
        let outcome = none.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
        assert_eq!(outcome.result["error"]["code"], "unknown_tool");
    }
}
