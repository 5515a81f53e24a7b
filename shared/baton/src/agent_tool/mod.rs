//! Any agent as a tool of another (docs/agents.md, "Your own agents (agents as tools)").
//!
//! An [`AgentTool`] offers a child agent to a parent's model as the tool `agent__<Name>`. Every
//! call starts one instance `Name[i]` of the child, numbered across the turn, in a session of its
//! own: no conversation history, the caller's session state copied without its internal keys
//! (`crate::tool::INTERNAL_STATE_PREFIX`), and one level deeper than the caller. A call that
//! would nest deeper than [`AgentToolOptions::max_depth`] is refused with an error result.
//!
//! # Input
//! Without an input schema the tool takes the permissive `{text, json}`: the child's query is
//! `text` as is, then `json` (a string as is, any other value serialized), then any other arguments serialized as one object, in
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
//! # State and names
//! - State flows one way: a child starts from a copy of its caller's state, and nothing it writes
//!   comes back (merging a child's writes into a caller that runs several children at once
//!   would make their order matter).
//! - Instance numbers are shared by the whole turn, so `helper[2]` is unique even when two
//!   different parents call `helper`. The entry agent, which no one calls, is named without a
//!   number, as the routed turn's own events are named `orchestrator`.
//!
//! # What the client sees
//! [`OutputMode`] filters the child's events (and those of the instances below it):
//! text and progress events, progress events only (the default: the parent answers), or nothing
//! but `usage` (cost is always accounted for).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::agent::{Agent, ChildContext, ChildInput, DEFAULT_MAX_DEPTH, InstanceOptions, start_child};
use crate::event::Event;
use crate::item::Item;
use crate::tool::{CallOptions, DirectAnswer, JsonSchema, Tool, ToolContext, ToolError, ToolFinish, ToolRun};

/// The prefix of an agent tool's name: `agent__<Name>`.
pub(crate) const AGENT_TOOL_PREFIX: &str = "agent__";

/// The tool name of agent `name`.
pub(crate) fn agent_tool_name(name: &str) -> String {
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
            // A call waiting for a person is shown whatever the mode: someone must answer it.
            OutputMode::None => matches!(event, Event::Usage { .. } | Event::ApprovalRequired(_)),
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
    /// The tool's name; `agent__<Name>` when `None`.
    pub tool_name: Option<String>,
    /// How the arguments become the child's query.
    pub input: InputMapping,
    /// What the child sees of the conversation.
    pub context: ChildContext,
}

/// How an agent tool's arguments become its child's input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InputMapping {
    /// The permissive `{text, json}` (see the module docs); with an input schema, the
    /// arguments as compact JSON.
    #[default]
    TextOrJson,
    /// The `query` argument is the query and `prior_context` its context (the routing tools
    /// `ask_<agent>` of docs/routing.md); the other arguments reach the child as its arguments.
    Query,
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
            tool_name: None,
            input: InputMapping::default(),
            context: ChildContext::default(),
        }
    }
}

/// The permissive input of an agent tool with no input schema.
pub(crate) fn permissive_input_schema() -> Value {
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

impl AgentTool {
    /// `agent` as a tool; fails if the output schema does not compile or the input schema does
    /// not describe an object. The [`crate::tool::ToolRegistry`] it joins compiles the input
    /// schema on the first call (a configuration's input schema is compiled when the
    /// configuration is validated).
    pub fn new(agent: Arc<dyn Agent>, options: AgentToolOptions) -> Result<AgentTool, ToolError> {
        let name = options.tool_name.clone().unwrap_or_else(|| agent_tool_name(agent.name()));
        let invalid = |reason: String| ToolError::InvalidSchema { tool: name.clone(), reason };
        let parameters = match &options.input_schema {
            // The registry it joins compiles it, and refuses calls if it does not compile.
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

    /// The child's query for validated `arguments` (see the module docs for the rules).
    pub(crate) fn input_text(&self, arguments: &Value) -> Result<String, ToolError> {
        if self.options.input == InputMapping::Query {
            return arguments
                .get("query")
                .and_then(Value::as_str)
                .filter(|q| !q.trim().is_empty())
                .map(str::to_owned)
                .ok_or_else(|| ToolError::InvalidArguments {
                    tool: self.name.clone(),
                    reason: "`query` must be a non-empty string".into(),
                });
        }
        if self.options.input_schema.is_some() {
            return Ok(arguments.to_string());
        }
        let mut parts = Vec::new();
        let mut others = serde_json::Map::new();
        if let Some(map) = arguments.as_object() {
            if let Some(text) = map.get("text").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
                parts.push(text.to_owned());
            }
            match map.get("json") {
                // A string is the child's words, not a JSON document to quote.
                Some(Value::String(s)) if !s.trim().is_empty() => parts.push(s.clone()),
                Some(Value::Null | Value::String(_)) | None => {}
                Some(value) => parts.push(value.to_string()),
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

    /// The child's input for validated `arguments`.
    fn input(&self, arguments: Value) -> Result<ChildInput, ToolError> {
        let query = self.input_text(&arguments)?;
        let prior_context = match self.options.input {
            InputMapping::Query => arguments
                .get("prior_context")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            InputMapping::TextOrJson => None,
        };
        Ok(ChildInput { query, prior_context, arguments })
    }

    fn instance_options(&self) -> InstanceOptions {
        InstanceOptions {
            timeout: self.options.timeout,
            max_depth: self.options.max_depth,
            context: self.options.context,
        }
    }
}

/// The child's events filtered by its output mode, its answer collected; with
/// `mark_content_end` its content ends with a `content_end` boundary.
fn child_events(
    tool: &AgentTool,
    instance: String,
    inner: crate::event::EventStream,
    mark_content_end: bool,
    approvals: crate::approval::TurnApprovals,
) -> ToolRun {
    let (name, output, schema, timeout, skip) = (
        tool.name.clone(),
        tool.options.output,
        tool.output_schema.clone(),
        tool.options.timeout,
        tool.options.skip_summarization,
    );
    let items = Box::pin(async_stream::stream! {
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
                Event::AgentFinished { agent, .. } if *agent == instance && mark_content_end => {
                    // The boundary closes the child's content, before its end.
                    yield Item::Event(Event::ContentEnd { agent: instance.clone() });
                }
                _ => {}
            }
            if output.passes(&event) {
                yield Item::Event(event);
            }
        }
        if let Some(paused) = approvals.take_paused(&instance) {
            // The child waits for approvals: so does this call.
            yield Item::Done(ToolFinish { outcome: Ok(Value::Null), answer: None, paused: Some(Box::new(paused)) });
            return;
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
        let answer = (skip && outcome.is_ok()).then_some(DirectAnswer { text: answer, streamed });
        yield Item::Done(ToolFinish { outcome, answer, paused: None });
    });
    ToolRun { items }
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

#[async_trait::async_trait]
impl Tool for AgentTool {
    fn kind(&self) -> &'static str {
        "agent"
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.options.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    /// Runs the child to the end; its events are dropped.
    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let run = self.start_run(arguments, context, false);

        match Item::result(run.items).await {
            Some(finish) => finish.outcome,
            None => Err(ToolError::Failed { tool: self.name.clone(), reason: "no answer".into() }),
        }
    }

    /// Starts one instance of the child (through `start_child`) whose events stream while it
    /// runs. The instance runs under the agent's own timeout, not the tool loop's.
    fn start(self: Arc<Self>, arguments: Value, context: ToolContext, options: CallOptions) -> ToolRun {
        self.start_run(arguments, &context, options.mark_content_end)
    }
}

impl AgentTool {
    fn start_run(&self, arguments: Value, context: &ToolContext, mark_content_end: bool) -> ToolRun {
        let started = self.input(arguments).and_then(|input| {
            start_child(&*self.agent, &self.name, context, input, &self.instance_options())
        });
        match started {
            Ok((instance, events)) => {
                child_events(self, instance, events, mark_content_end, context.child.approvals.clone())
            }
            Err(e) => ToolRun::failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentRequest;
    use crate::event::EventStream;

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
        assert_eq!(
            permissive_input_schema()["properties"].as_object().unwrap().keys().next().map(String::as_str),
            Some("text"),
            "`text` is offered first: a model filling the first property asks in words"
        );
        assert_eq!(tool.name(), "agent__nobody");
        assert_eq!(tool.input_text(&json!({"text": "find tea"})).unwrap(), "find tea");
        assert_eq!(tool.input_text(&json!({"json": {"sku": 7}})).unwrap(), r#"{"sku":7}"#);
        assert_eq!(tool.input_text(&json!({"json": "raw"})).unwrap(), "raw", "a string arrives unquoted");
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
mod loop_tests;
