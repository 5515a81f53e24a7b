//! Any agent as a tool of another (DESIGN.md §5).
//!
//! An [`AgentTool`] offers a child agent to a parent's model as the tool `agent__<Name>`. Every
//! call starts one instance `Name[i]` of the child, numbered across the turn, in a session of its
//! own: no conversation history, the caller's session state copied without its internal keys
//! ([`crate::tool::INTERNAL_STATE_PREFIX`]), and one level deeper than the caller. A call that
//! would nest deeper than [`AgentToolOptions::max_depth`] is refused with an error result.
//!
//! # Input
//! Without an input schema the tool takes the permissive `{text, json}`: the child's query is
//! `text` as is, then `json` serialized, then any other arguments serialized as one object, in
//! that order, separated by blank lines. With an input schema the arguments are validated
//! against it before the child runs (a violation is an error result the parent model reads and
//! can fix) and the child's query is the arguments as compact JSON.
//!
//! # Output
//! The child's answer is its own text; when it has none (it handed a skip-summarization child's
//! answer through), the text of the instances below it. Without an output schema the result the
//! parent model reads is `{"answer": "..."}`, with `"shown_to_user": true` when the client has
//! already seen that text (so the parent does not repeat it); with one, the answer must be JSON (a Markdown code
//! fence around it is accepted) that passes the schema, and the result is that JSON. A child that
//! fails (an `error` event of its own), times out or breaks its output schema gives an error
//! result; the parent goes on.
//!
//! # Where this departs from, or fills in, DESIGN.md §5
//! - State flows one way: a child starts from a copy of its caller's state, and nothing it writes
//!   comes back (the design says "copied"; merging a child's writes into a caller that runs several
//!   children at once would make their order matter).
//! - Instance numbers are shared by the whole turn, so `helper[2]` is unique even when two
//!   different parents call `helper`. The entry agent, which no one calls, is named without a
//!   number, as the routed turn's own events are named `orchestrator`.
//!
//! # What the client sees
//! [`OutputMode`] filters the child's events (and those of the instances below it):
//! text and progress events, progress events only (the default: the parent answers), or nothing
//! but `usage` (cost is always accounted for).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::agent::{Agent, AgentRequest, EventStream, instrument_for};
use crate::event::Event;
use crate::tool::{JsonSchema, Tool, ToolContext, ToolError};

/// The prefix of an agent tool's name: `agent__<Name>`.
pub const AGENT_TOOL_PREFIX: &str = "agent__";

/// How deep agents may nest below the turn unless configured otherwise: the entry agent's
/// children are level 1.
pub const DEFAULT_MAX_DEPTH: u32 = 3;

/// The tool name of agent `name`.
pub fn agent_tool_name(name: &str) -> String {
    format!("{AGENT_TOOL_PREFIX}{name}")
}

/// What of a child agent's output reaches the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Its text and its progress events (agent and tool start/end, reasoning, errors, usage).
    TextAndEvents,
    /// Its progress events, not its text: the parent's answer is what the user reads.
    #[default]
    Events,
    /// Nothing but its `usage` events.
    None,
}

impl OutputMode {
    /// Whether `event`, from the child or below it, goes on towards the client.
    pub fn passes(self, event: &Event) -> bool {
        match self {
            OutputMode::TextAndEvents => true,
            OutputMode::Events => !event.is_slot_content(),
            OutputMode::None => matches!(event, Event::Usage { .. }),
        }
    }
}

/// How an agent behaves as a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentToolOptions {
    /// What the agent does, for the parent's model.
    pub description: String,
    /// JSON Schema of the arguments; `None` takes the permissive `{text, json}`.
    pub input_schema: Option<Value>,
    /// JSON Schema the child's answer must satisfy, as JSON.
    pub output_schema: Option<Value>,
    /// The child's answer goes to the user as is: a parent whose model turn called only such
    /// agents (and all succeeded) answers with their answers, with no further model call.
    pub skip_summarization: bool,
    /// Longest one instance may run; past it the instance is cancelled.
    pub timeout: Option<Duration>,
    /// What of the child's output reaches the client.
    pub output: OutputMode,
    /// Deepest level an instance may start at (the turn's entry agent is level 0).
    pub max_depth: u32,
}

impl Default for AgentToolOptions {
    fn default() -> Self {
        AgentToolOptions {
            description: String::new(),
            input_schema: None,
            output_schema: None,
            skip_summarization: false,
            timeout: None,
            output: OutputMode::default(),
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// The permissive input of an agent tool with no input schema.
pub fn permissive_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "What to ask the agent, in words."},
            "json": {"description": "Structured input for the agent (any JSON value)."},
        },
        "additionalProperties": true,
    })
}

/// A child agent offered as the tool `agent__<Name>`.
pub struct AgentTool {
    agent: Arc<dyn Agent>,
    name: String,
    options: AgentToolOptions,
    parameters: Value,
    output_schema: Option<Arc<JsonSchema>>,
}

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTool").field("name", &self.name).field("options", &self.options).finish()
    }
}

/// What one call of an agent tool ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCallResult {
    /// The result the parent model reads, or why there is none.
    pub outcome: Result<Value, ToolError>,
    /// The child's answer as text.
    pub answer: String,
    /// Whether that text already reached the client (output mode `text_and_events`).
    pub streamed: bool,
}

/// A value filled once, read after: where a stream leaves its result.
#[derive(Debug)]
pub struct Slot<T>(Arc<Mutex<Option<T>>>);

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot(self.0.clone())
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Arc::new(Mutex::new(None)))
    }
}

impl<T> Slot<T> {
    /// Fills the slot.
    pub fn set(&self, value: T) {
        *self.0.lock().expect("slot lock") = Some(value);
    }

    /// Empties the slot.
    pub fn take(&self) -> Option<T> {
        self.0.lock().expect("slot lock").take()
    }
}

/// One running call of an agent tool.
pub struct AgentCall {
    /// The events for the client (filtered by the output mode); the call runs while it is
    /// polled and is cancelled when it is dropped.
    pub events: EventStream,
    /// Filled when `events` ends.
    pub result: Slot<AgentCallResult>,
}

impl AgentCall {
    fn failed(error: ToolError) -> AgentCall {
        let result = Slot::default();
        result.set(AgentCallResult { outcome: Err(error), answer: String::new(), streamed: false });
        AgentCall { events: Box::pin(futures::stream::empty()), result }
    }
}

impl AgentTool {
    /// `agent` as a tool; fails if the output schema does not compile or the input schema does
    /// not describe an object (a [`crate::tool::ToolRegistry`] compiles the input schema).
    pub fn new(agent: Arc<dyn Agent>, options: AgentToolOptions) -> Result<AgentTool, ToolError> {
        let name = agent_tool_name(agent.name());
        let invalid = |reason: String| ToolError::InvalidSchema { tool: name.clone(), reason };
        let parameters = match &options.input_schema {
            // The registry it joins compiles it, and says so if it does not compile.
            Some(schema) => {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(invalid(
                        "input schema: must be `type: object` (tool arguments are an object)".into(),
                    ));
                }
                schema.clone()
            }
            None => permissive_input_schema(),
        };
        let output_schema = match &options.output_schema {
            Some(schema) => Some(Arc::new(
                JsonSchema::compile(schema).map_err(|e| invalid(format!("output schema: {e}")))?,
            )),
            None => None,
        };
        Ok(AgentTool { agent, name, options, parameters, output_schema })
    }

    /// The child agent.
    pub fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// How it behaves as a tool.
    pub fn options(&self) -> &AgentToolOptions {
        &self.options
    }

    /// The child's query for validated `arguments` (see the module docs for the rules).
    pub fn input_text(&self, arguments: &Value) -> Result<String, ToolError> {
        if self.options.input_schema.is_some() {
            return Ok(arguments.to_string());
        }
        let mut parts = Vec::new();
        let mut others = serde_json::Map::new();
        if let Some(map) = arguments.as_object() {
            if let Some(text) = map.get("text").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
                parts.push(text.to_owned());
            }
            if let Some(value) = map.get("json").filter(|v| !v.is_null()) {
                parts.push(value.to_string());
            }
            others.extend(
                map.iter().filter(|(k, _)| *k != "text" && *k != "json").map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        if !others.is_empty() {
            parts.push(Value::Object(others).to_string());
        }
        if parts.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name.clone(),
                reason: "nothing to ask: give the agent `text` (words) or `json` (structured input)".into(),
            });
        }
        Ok(parts.join("\n\n"))
    }

    /// Starts one instance of the child for `arguments` (already validated against the input
    /// schema) on behalf of the caller in `context`.
    pub fn start(&self, arguments: Value, context: &ToolContext) -> AgentCall {
        let depth = context.depth + 1;
        if depth > self.options.max_depth {
            return AgentCall::failed(ToolError::DepthExceeded {
                tool: self.name.clone(),
                max_depth: self.options.max_depth,
            });
        }
        let query = match self.input_text(&arguments) {
            Ok(query) => query,
            Err(e) => return AgentCall::failed(e),
        };
        let instance = context.instances.next(self.agent.name());
        let request = AgentRequest {
            user_id: context.user_id.clone(),
            episode_id: context.episode_id.clone(),
            query: query.clone(),
            prior_context: None,
            history: Vec::new(),
            arguments,
            state: context.state.for_child(),
            depth,
            instances: context.instances.clone(),
        };
        let inner = instrument_for(
            instance.clone(),
            query,
            self.agent.run(request, instance.clone()),
            self.options.timeout,
        );
        let result = Slot::default();
        let slot = result.clone();
        let (name, output, schema, timeout) =
            (self.name.clone(), self.options.output, self.output_schema.clone(), self.options.timeout);
        let events = Box::pin(async_stream::stream! {
            let mut inner = inner;
            let (mut own, mut below) = (String::new(), String::new());
            let mut failure: Option<ToolError> = None;
            while let Some(event) = inner.next().await {
                match &event {
                    Event::Text { agent, text } if *agent == instance => own.push_str(text),
                    Event::Text { text, .. } => below.push_str(text),
                    Event::Error { agent, code, message, .. } if *agent == instance && failure.is_none() => {
                        failure = Some(match (code.as_str(), timeout) {
                            ("agent_timeout", Some(timeout)) => ToolError::Timeout { tool: name.clone(), timeout },
                            _ => ToolError::Failed { tool: name.clone(), reason: format!("{code}: {message}") },
                        });
                    }
                    _ => {}
                }
                if output.passes(&event) {
                    yield event;
                }
            }
            let answer = if own.trim().is_empty() { below } else { own };
            let outcome = match failure {
                Some(e) => Err(e),
                None => parse_output(&name, &answer, schema.as_deref()),
            };
            let streamed = output == OutputMode::TextAndEvents && !answer.is_empty();
            // The parent's model should not repeat what the user has already read.
            let outcome = outcome.map(|mut value| {
                if streamed && schema.is_none() {
                    value["shown_to_user"] = Value::Bool(true);
                }
                value
            });
            slot.set(AgentCallResult { outcome, answer, streamed });
        });
        AgentCall { events, result }
    }
}

/// The result a parent model reads for a child's `answer`.
fn parse_output(tool: &str, answer: &str, schema: Option<&JsonSchema>) -> Result<Value, ToolError> {
    let Some(schema) = schema else {
        return Ok(json!({"answer": answer}));
    };
    let invalid = |reason: String| ToolError::InvalidOutput { tool: tool.to_owned(), reason };
    let body = strip_code_fence(answer);
    let value: Value = serde_json::from_str(body)
        .map_err(|e| invalid(format!("the answer is not JSON ({e}): {answer:?}")))?;
    schema.validate(&value).map_err(invalid)?;
    Ok(value)
}

/// The inside of a Markdown code fence (```json ... ```), or the text itself.
fn strip_code_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else { return trimmed };
    let Some(body) = rest.strip_suffix("```") else { return trimmed };
    // Drop the info string (`json`) on the opening line.
    body.split_once('\n').map_or(body, |(_, inside)| inside).trim()
}

impl Tool for AgentTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.options.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    /// Runs the child to the end without streaming its events (an LLM agent streams them
    /// through [`AgentTool::start`] instead).
    fn call<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let call = self.start(arguments, context);
        Box::pin(async move {
            call.events.for_each(|_| async {}).await;
            match call.result.take() {
                Some(result) => result.outcome,
                None => Err(ToolError::Failed { tool: self.name.clone(), reason: "no answer".into() }),
            }
        })
    }

    fn as_agent_tool(&self) -> Option<&AgentTool> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissive_input_follows_the_mapping_rules() {
        struct Nobody;
        impl Agent for Nobody {
            fn name(&self) -> &str {
                "nobody"
            }
            fn run(&self, _: AgentRequest, _: String) -> EventStream {
                Box::pin(futures::stream::empty())
            }
        }
        let tool = AgentTool::new(Arc::new(Nobody), AgentToolOptions::default()).unwrap();
        assert_eq!(tool.name(), "agent__nobody");
        assert_eq!(tool.input_text(&json!({"text": "find tea"})).unwrap(), "find tea");
        assert_eq!(tool.input_text(&json!({"json": {"sku": 7}})).unwrap(), r#"{"sku":7}"#);
        assert_eq!(tool.input_text(&json!({"json": "raw"})).unwrap(), r#""raw""#);
        assert_eq!(
            tool.input_text(&json!({"text": "compare", "json": [1, 2], "budget": 5, "city": "Oslo"}))
                .unwrap(),
            "compare\n\n[1,2]\n\n{\"budget\":5,\"city\":\"Oslo\"}"
        );
        let err = tool.input_text(&json!({})).unwrap_err();
        assert_eq!(err.code(), "invalid_arguments");
    }

    #[test]
    fn output_is_parsed_from_a_fence_and_checked() {
        let schema = JsonSchema::compile(&json!({"type": "object", "required": ["score"],
            "properties": {"score": {"type": "integer"}}}))
        .unwrap();
        assert_eq!(
            parse_output("t", "```json\n{\"score\": 3}\n```", Some(&schema)).unwrap(),
            json!({"score": 3})
        );
        assert_eq!(parse_output("t", " {\"score\": 4} ", Some(&schema)).unwrap(), json!({"score": 4}));
        let e = parse_output("t", "{\"score\": \"high\"}", Some(&schema)).unwrap_err();
        assert_eq!(e.code(), "invalid_agent_output");
        assert!(e.to_string().contains("/score"), "{e}");
        let e = parse_output("t", "Score: 3", Some(&schema)).unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        assert_eq!(parse_output("t", "plain", None).unwrap(), json!({"answer": "plain"}));
    }

    #[test]
    fn output_modes_filter_text_and_progress() {
        let text = Event::text("a[1]", "hi");
        let started = Event::AgentStarted { agent: "a[1]".into(), query: "q".into() };
        let usage = Event::usage("a[1]", "m", crate::event::Usage::default());
        assert!(OutputMode::TextAndEvents.passes(&text) && OutputMode::TextAndEvents.passes(&started));
        assert!(!OutputMode::Events.passes(&text) && OutputMode::Events.passes(&started));
        assert!(!OutputMode::None.passes(&text) && !OutputMode::None.passes(&started));
        assert!(OutputMode::None.passes(&usage));
    }
}

#[cfg(test)]
#[path = "agent_tool_tests.rs"]
mod loop_tests;
