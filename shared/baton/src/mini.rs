//! Mini-agents: an agent's opt-in fan-out of a multi-part request into parallel focused tool
//! loops (docs/mini-agents.md).
//!
//! An agent with `mini_agent` enabled carries `MiniAgents`, a `ForkPolicy` its tool loop
//! asks before it starts:
//!
//! 1. **Decompose.** One structured-output call (a JSON Schema response format; the answer is
//!    validated here in any case) returns `{should_fork, sub_tasks: [{id, description,
//!    allowed_tools}]}`. Not forking, a single sub-task, more sub-tasks than `max_minis`, or a
//!    decomposer that fails or answers something invalid: the agent runs its loop as usual (a
//!    failure is logged as a warning). The decomposer's usage is the parent's, like any call.
//! 2. **Allowlists** ([`AllowlistMode`]). In `strict` (and `inferred` with a non-empty list) a
//!    sub-task that names no tool or a tool the parent lacks is a decomposition error: no mini
//!    runs and the run ends with an error answer.
//! 3. **Minis.** Each sub-task runs as a child instance of the parent's own agent, narrowed to
//!    its tools ([`LlmAgent::focused`]), started by `start_child` like every child, all at
//!    once, each with its own tool loop and bounded by the timeout (which runs from its
//!    dispatch, its wait for a place among the turn's running instances included). A mini's
//!    text never reaches the client; its usage does (a mini is an instance of its parent's
//!    agent, so its usage rolls up under the parent's name). Outcomes: `ok` (its answer),
//!    `failed` (its model failed, or a tool server's transport error after the client's retry,
//!    which stops it at once) or `timeout`.
//! 4. **Aggregate.** One synthesis call over the outcomes, in sub-task order, whose text streams
//!    as the parent's answer; when every mini failed, a deterministic error answer and no call.
//!
//! Minis cannot fork (their agent has no fork policy), and the configuration refuses
//! `mini_agent` on any agent a forking agent can reach, so nothing below a mini forks either.
//! Only the synthesised answer is the parent's text, so only it reaches the conversation history.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::agent::{
    Answered, ChildContext, ChildInput, ForkInput, ForkPolicy, ForkStream, InstanceOptions, Item, ItemStream,
    LlmAgent, model_call, start_child,
};
use crate::event::{Event, EventStream, MiniOutcomeStatus, MiniStatus, MiniSubTask};
use crate::model::{ChatModel, ChatRequest, Message, ResponseFormat, ToolChoice};
use crate::tool::{JsonSchema, ToolContext};

/// Sub-tasks one fork may run unless configured otherwise.
pub(crate) const DEFAULT_MAX_MINIS: usize = 3;

/// The hard cap on `max_minis`: a turn's running child instances
/// ([`crate::tool::MAX_CONCURRENT_INSTANCES`]).
pub(crate) const MAX_MINIS: usize = crate::tool::MAX_CONCURRENT_INSTANCES;

/// How long one mini may run unless configured otherwise.
pub(crate) const DEFAULT_MINI_TIMEOUT: Duration = Duration::from_secs(30);

/// The name of the decomposer's response format.
pub(crate) const DECOMPOSITION_FORMAT: &str = "mini_agent_decomposition";

/// What a mini's start is reported as (in an `agent_depth_exceeded` error).
const MINI_TOOL: &str = "mini_agent";

/// Which tools each mini gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllowlistMode {
    /// Every tool a sub-task names must be among the parent's, and it must name at least one.
    #[default]
    Strict,
    /// Every mini gets the parent's whole inventory; the lists are ignored.
    ParentFull,
    /// An empty list falls back to the whole inventory (with a warning); otherwise as `strict`.
    Inferred,
}

/// How an agent's minis run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniAgentSettings {
    /// Most sub-tasks one fork may run (at most `MAX_MINIS`).
    pub max_minis: usize,
    /// Longest one mini may run, from its dispatch.
    pub timeout: Duration,
    /// Which tools each mini gets.
    pub allowlist: AllowlistMode,
    /// How deep instances may start (the team's `max_depth`): a parent at that depth runs as
    /// usual, since its minis could not start.
    pub max_depth: u32,
}

impl Default for MiniAgentSettings {
    fn default() -> Self {
        MiniAgentSettings {
            max_minis: DEFAULT_MAX_MINIS,
            timeout: DEFAULT_MINI_TIMEOUT,
            allowlist: AllowlistMode::Strict,
            max_depth: crate::agent::DEFAULT_MAX_DEPTH,
        }
    }
}

/// The mini-agents of one agent: its fan-out policy (see the module docs).
pub(crate) struct MiniAgents {
    settings: MiniAgentSettings,
    decomposer: Option<Arc<dyn ChatModel>>,
    aggregator: Option<Arc<dyn ChatModel>>,
    schema: Arc<JsonSchema>,
}

impl MiniAgents {
    /// Mini-agents with `settings` (`max_minis` capped at [`MAX_MINIS`]); the decomposer and the
    /// aggregator use these models, or the parent's model when `None`.
    pub(crate) fn new(
        settings: MiniAgentSettings,
        decomposer: Option<Arc<dyn ChatModel>>,
        aggregator: Option<Arc<dyn ChatModel>>,
    ) -> MiniAgents {
        let schema =
            JsonSchema::compile(&decomposition_schema(None)).expect("the decomposition schema compiles");
        MiniAgents { settings, decomposer, aggregator, schema: Arc::new(schema) }
    }
}

/// What the decomposer answers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Decomposition {
    should_fork: bool,
    sub_tasks: Vec<SubTask>,
}

/// One sub-task of a decomposition.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct SubTask {
    id: String,
    description: String,
    allowed_tools: Vec<String>,
}

/// The JSON Schema of a decomposition; with `tools`, the tool names a sub-task may list.
fn decomposition_schema(tools: Option<&[&str]>) -> Value {
    let tool = match tools {
        Some(names) if !names.is_empty() => json!({"type": "string", "enum": names}),
        _ => json!({"type": "string"}),
    };
    json!({
        "type": "object",
        "properties": {
            "should_fork": {"type": "boolean"},
            "sub_tasks": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "description": {"type": "string"},
                    "allowed_tools": {"type": "array", "items": tool},
                },
                "required": ["id", "description", "allowed_tools"],
                "additionalProperties": false,
            }},
        },
        "required": ["should_fork", "sub_tasks"],
        "additionalProperties": false,
    })
}

/// The decomposer's instructions.
fn decomposer_prompt(max_minis: usize) -> String {
    format!(
        "You decide whether the user's last message holds several independent requests that are \
         best answered separately, in parallel. Answer with JSON only: {{\"should_fork\": bool, \
         \"sub_tasks\": [{{\"id\": str, \"description\": str, \"allowed_tools\": [str]}}]}}.\n\
         Fork only when the message asks two to {max_minis} things that do not depend on each \
         other. Each description is one complete, self-contained request in the user's words (it \
         is answered without the conversation). allowed_tools names the offered tools that \
         sub-task needs. Otherwise answer {{\"should_fork\": false, \"sub_tasks\": []}}."
    )
}

/// What a mini is told beyond its parent's instruction.
const MINI_NOTE: &str = "You answer one part of a larger request while other parts are answered \
    elsewhere. Answer only this part, completely, and do not mention the other parts.";

/// The aggregator's instructions, after the parent's.
const AGGREGATOR_NOTE: &str = "Parts of the user's message were answered separately; the user \
    message below is JSON with the question and each part's outcome, in order. Write one answer \
    to the user from them, in that order, using the answers as given. For a part whose status is \
    `failed` or `timeout`, say plainly that it could not be answered right now. Do not mention \
    parts, helpers or JSON.";

/// Reads the decomposer's text: JSON (a Markdown code fence around it is accepted) that passes
/// the schema, with unique, non-empty ids and descriptions.
fn parse_decomposition(text: &str, schema: &JsonSchema) -> Result<Decomposition, String> {
    let body = text.trim();
    let body = body
        .strip_prefix("```json")
        .or_else(|| body.strip_prefix("```"))
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or(body);
    let value: Value = serde_json::from_str(body.trim()).map_err(|e| format!("not JSON ({e})"))?;
    schema.validate(&value)?;
    let decomposition: Decomposition = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let mut ids = std::collections::HashSet::new();
    for task in &decomposition.sub_tasks {
        if task.id.trim().is_empty() || task.description.trim().is_empty() {
            return Err("a sub-task has an empty id or description".into());
        }
        if !ids.insert(task.id.trim()) {
            return Err(format!("the sub-task id `{}` is used twice", task.id));
        }
    }
    Ok(decomposition)
}

/// The tools of each sub-task under `mode`, or the decomposition error that stops the fork.
fn allowlists(
    mode: AllowlistMode,
    inventory: &[&str],
    tasks: &[SubTask],
) -> Result<Vec<Vec<String>>, String> {
    let all = || inventory.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    tasks
        .iter()
        .map(|task| match mode {
            AllowlistMode::ParentFull => Ok(all()),
            AllowlistMode::Inferred if task.allowed_tools.is_empty() => {
                let sub_task = &task.id;
                let note = "mini-agents: a sub-task names no tool; it gets every tool of its parent";
                tracing::warn!(%sub_task, "{note}");
                Ok(all())
            }
            AllowlistMode::Strict | AllowlistMode::Inferred => {
                if task.allowed_tools.is_empty() {
                    return Err(format!("sub-task `{}` names no tool", task.id));
                }
                if let Some(unknown) = task.allowed_tools.iter().find(|t| !inventory.contains(&t.as_str())) {
                    return Err(format!(
                        "sub-task `{}` names `{unknown}`, which is not among the agent's tools ({})",
                        task.id,
                        inventory.join(", ")
                    ));
                }
                let mut tools = task.allowed_tools.clone();
                tools.sort();
                tools.dedup();
                Ok(tools)
            }
        })
        .collect()
}

/// How one mini ended.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    status: MiniStatus,
    /// Its answer (`ok`).
    answer: String,
    /// Why it failed or timed out.
    error: Option<String>,
}

impl ForkPolicy for MiniAgents {
    fn fork(&self, agent: &LlmAgent, input: ForkInput) -> ForkStream {
        let settings = self.settings;
        let decomposer = self.decomposer.clone().unwrap_or_else(|| agent.model().clone());
        let aggregator = self.aggregator.clone().unwrap_or_else(|| agent.model().clone());
        let schema = self.schema.clone();
        let parent = agent.clone();
        Box::pin(async_stream::stream! {
            let instance = input.instance.clone();
            if input.context.child.depth + 1 > settings.max_depth {
                return;
            }
            // 1. Decompose.
            let request = decomposer_request(&parent, &input, settings.max_minis);
            let (usage, decomposition) = decompose(decomposer.as_ref(), request, &schema, &instance).await;
            for event in usage {
                yield Item::Event(event);
            }
            let Some(tasks) = sub_tasks_to_run(decomposition, settings.max_minis, &instance) else { return };
            // 2. Allowlists.
            let tools = match allowlists(settings.allowlist, &parent.tools().names(), &tasks) {
                Ok(tools) => tools,
                Err(reason) => {
                    tracing::warn!(%instance, %reason, "mini-agents: invalid decomposition; no mini runs");
                    yield Item::Event(Event::error(instance.clone(), "mini_agent_invalid_decomposition",
                        format!("the request could not be split into parts: {reason}"), false));
                    yield Item::Event(Event::text(instance.clone(), INVALID_DECOMPOSITION_ANSWER));
                    yield Item::Done(Answered);
                    return;
                }
            };
            // A part whose tools may need a person's approval is not fanned out: the agent's
            // own loop runs the request, and pauses there (docs/approvals.md).
            if let Some(tool) = tools.iter().flatten().find(|t| parent.approvals().covers(t)) {
                tracing::info!(%instance, %tool, "mini-agents: a part may need approval; no fan-out");
                return;
            }
            // 3. Minis, all at once.
            yield Item::Event(Event::MiniAgentDecomposed {
                parent: instance.clone(),
                count: tasks.len(),
                sub_tasks: tasks
                    .iter()
                    .map(|t| MiniSubTask { id: t.id.clone(), description: t.description.clone() })
                    .collect(),
            });
            let instruction = format!("{}\n\n{MINI_NOTE}", parent.instruction());
            let runs: Vec<_> = tasks
                .iter()
                .zip(tools)
                .enumerate()
                .map(|(index, (task, tools))| {
                    let mini = parent.focused(instruction.clone(), Arc::new(parent.tools().only(&tools)));
                    run_mini(index, &instance, task, &mini, &input.context, settings)
                })
                .collect();
            let mut outcomes: Vec<Option<Outcome>> = vec![None; tasks.len()];
            let mut merged = futures::stream::select_all(runs);
            while let Some(item) = merged.next().await {
                match item {
                    Item::Event(event) => yield Item::Event(event),
                    Item::Done((index, outcome)) => outcomes[index] = Some(outcome),
                }
            }
            drop(merged);
            let outcomes: Vec<Outcome> =
                outcomes.into_iter().map(|o| o.expect("every mini reports its end")).collect();
            // 4. Aggregate.
            yield Item::Event(Event::MiniAgentAggregated {
                parent: instance.clone(),
                outcomes: tasks
                    .iter()
                    .zip(&outcomes)
                    .map(|(t, o)| MiniOutcomeStatus { mini_id: t.id.clone(), status: o.status })
                    .collect(),
            });
            if outcomes.iter().all(|o| o.status != MiniStatus::Ok) {
                yield Item::Event(Event::error(instance.clone(), "mini_agents_failed",
                    "every part of the request failed or timed out", true));
                yield Item::Event(Event::text(instance.clone(), plain_answer(&tasks, &outcomes)));
                yield Item::Done(Answered);
                return;
            }
            let request = aggregator_request(&parent, &input, &tasks, &outcomes);
            let mut answer = synthesis(aggregator, request, instance, plain_answer(&tasks, &outcomes));
            while let Some(event) = answer.next().await {
                yield Item::Event(event);
            }
            yield Item::Done(Answered);
        })
    }
}

/// Runs the decomposer: its usage events (its text is read, not shown), and its decomposition
/// or why there is none.
async fn decompose(
    model: &dyn ChatModel,
    request: ChatRequest,
    schema: &JsonSchema,
    instance: &str,
) -> (Vec<Event>, Result<Decomposition, String>) {
    let mut items = model_call(model, request, instance.to_owned());
    let mut usage = Vec::new();
    let mut reply = None;
    while let Some(item) = items.next().await {
        match item {
            Item::Event(event @ Event::Usage { .. }) => usage.push(event),
            Item::Event(_) => {}
            Item::Done(done) => reply = Some(done),
        }
    }
    let reply = reply.unwrap_or_default();
    let decomposition = match reply.error {
        Some(e) => Err(format!("{}: {e}", e.code())),
        None => parse_decomposition(&reply.text, schema),
    };
    (usage, decomposition)
}

/// The sub-tasks to fork into, or `None` when the agent runs as usual: no fork, a single
/// sub-task, more than `max_minis` (logged), or no valid decomposition (logged).
fn sub_tasks_to_run(
    decomposition: Result<Decomposition, String>,
    max_minis: usize,
    instance: &str,
) -> Option<Vec<SubTask>> {
    match decomposition {
        Err(reason) => {
            tracing::warn!(%instance, %reason, "mini-agents: the decomposer failed; the agent runs as usual");
            None
        }
        Ok(d) if !d.should_fork || d.sub_tasks.len() < 2 => None,
        Ok(d) if d.sub_tasks.len() > max_minis => {
            tracing::warn!(%instance, sub_tasks = d.sub_tasks.len(), max_minis,
                "mini-agents: more sub-tasks than max_minis; the agent runs as usual");
            None
        }
        Ok(d) => Some(d.sub_tasks),
    }
}

/// The aggregator's answer as `instance`'s text (and reasoning, and usage). If the call fails,
/// an `error` event, then `fallback` when nothing was written yet (what the minis found is not
/// lost with the synthesis), else the apology.
fn synthesis(
    model: Arc<dyn ChatModel>,
    request: ChatRequest,
    instance: String,
    fallback: String,
) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut items = model_call(model.as_ref(), request, instance.clone());
        let mut wrote = false;
        while let Some(item) = items.next().await {
            match item {
                Item::Event(event @ Event::Text { .. }) => {
                    wrote = true;
                    yield event;
                }
                Item::Event(event @ (Event::Reasoning { .. } | Event::Usage { .. })) => yield event,
                Item::Event(_) => {}
                Item::Done(reply) => {
                    if let Some(e) = reply.error {
                        yield Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable());
                        let text = if wrote { crate::agent::APOLOGY.to_owned() } else { fallback.clone() };
                        yield Event::text(instance.clone(), text);
                    }
                }
            }
        }
    })
}

/// The answer when a sub-task's tools break the allowlist rules.
pub const INVALID_DECOMPOSITION_ANSWER: &str =
    "Sorry, I couldn't split your request into parts I can work on. Please try again.";

/// The deterministic answer from the outcomes alone: the answers of the parts that have one,
/// then a line for each part that failed or timed out (all of them, when every part failed).
fn plain_answer(tasks: &[SubTask], outcomes: &[Outcome]) -> String {
    let answers: Vec<&str> =
        outcomes.iter().filter(|o| o.status == MiniStatus::Ok).map(|o| o.answer.trim()).collect();
    let mut text = if answers.is_empty() {
        "Sorry, I couldn't answer any part of your request right now. Please try again.".to_owned()
    } else {
        answers.join("\n\n")
    };
    for (task, outcome) in tasks.iter().zip(outcomes) {
        let why = match outcome.status {
            MiniStatus::Ok => continue,
            MiniStatus::Failed => "it failed",
            MiniStatus::Timeout => "it took too long",
        };
        text.push_str(&format!("\n- Not answered: \"{}\" ({why}).", task.description.trim()));
    }
    text
}

/// The decomposer's request: its instructions, the conversation, the user's message, the
/// parent's tools (for their names and descriptions; none may be called) and the schema.
fn decomposer_request(parent: &LlmAgent, input: &ForkInput, max_minis: usize) -> ChatRequest {
    let mut messages = vec![Message::system(decomposer_prompt(max_minis))];
    messages.extend(input.history.iter().cloned());
    messages.push(input.message.clone());
    let tools = parent.tools().specs();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let schema = decomposition_schema(Some(&names));
    let offered = !tools.is_empty();
    ChatRequest {
        messages,
        tools,
        tool_choice: offered.then_some(ToolChoice::None),
        parallel_tool_calls: None,
        max_tokens: None,
        response_format: Some(ResponseFormat { name: DECOMPOSITION_FORMAT.into(), schema }),
    }
}

/// The aggregator's request: the parent's instruction with the aggregator's, and one user
/// message holding the question and every part's outcome as JSON.
fn aggregator_request(
    parent: &LlmAgent,
    input: &ForkInput,
    tasks: &[SubTask],
    outcomes: &[Outcome],
) -> ChatRequest {
    let question = match &input.message {
        Message::User { content, .. } => content.clone(),
        _ => String::new(),
    };
    let parts: Vec<Value> = tasks
        .iter()
        .zip(outcomes)
        .map(|(task, outcome)| {
            let mut part = json!({"id": task.id, "description": task.description, "status": outcome.status});
            match &outcome.error {
                Some(error) => part["error"] = json!(error),
                None => part["answer"] = json!(outcome.answer.trim()),
            }
            part
        })
        .collect();
    ChatRequest {
        messages: vec![
            Message::system(format!("{}\n\n{AGGREGATOR_NOTE}", parent.instruction())),
            Message::user(json!({"question": question, "parts": parts}).to_string()),
        ],
        ..ChatRequest::default()
    }
}

/// Runs sub-task `index` as a child instance of `mini` (started by [`start_child`]): its
/// `mini_agent.started`, its usage events, its `mini_agent.finished`, then its outcome.
fn run_mini(
    index: usize,
    parent: &str,
    task: &SubTask,
    mini: &LlmAgent,
    context: &ToolContext,
    settings: MiniAgentSettings,
) -> ItemStream<(usize, Outcome)> {
    let input = ChildInput {
        query: task.description.clone(),
        prior_context: None,
        arguments: json!({"sub_task": task.id, "description": task.description}),
    };
    // The deadline below covers the wait for a place as well, so the instance gets none of its own.
    let options =
        InstanceOptions { timeout: None, max_depth: settings.max_depth, context: ChildContext::Isolated };
    let child = start_child(mini, MINI_TOOL, context, input, &options);
    let (parent, id, description) = (parent.to_owned(), task.id.clone(), task.description.clone());
    let timeout = settings.timeout;
    Box::pin(async_stream::stream! {
        let started = Instant::now();
        let (mini_id, parent_name) = (id.clone(), parent.clone());
        yield Item::Event(Event::MiniAgentStarted { parent: parent_name, mini_id, description });
        let outcome = match child {
            Err(e) => {
                Outcome { status: MiniStatus::Failed, answer: String::new(), error: Some(e.to_string()) }
            }
            Ok((instance, events)) => {
                let mut watch = MiniWatch::new(instance);
                let mut events: EventStream = events;
                let mut deadline = crate::bounded::Deadline::after(started, timeout);
                loop {
                    let Ok(next) = deadline.next(&mut events).await else {
                        watch.timed_out(timeout);
                        break;
                    };
                    let Some(event) = next else { break };
                    if let Event::Usage { .. } = event {
                        yield Item::Event(event);
                    } else if watch.observe(&event) {
                        break;
                    }
                }
                watch.outcome()
            }
        };
        yield Item::Event(Event::MiniAgentFinished {
            parent,
            mini_id: id,
            status: outcome.status,
            duration_ms: started.elapsed().as_millis() as u64,
            error: outcome.error.clone(),
        });
        yield Item::Done((index, outcome));
    })
}

/// What one mini's events say about its outcome: its own text (or, when it wrote none, the text
/// of the agents it called, as for an agent tool), its first error, a timeout.
struct MiniWatch {
    instance: String,
    own: String,
    below: String,
    error: Option<String>,
    timeout: bool,
}

impl MiniWatch {
    fn new(instance: String) -> MiniWatch {
        MiniWatch { instance, own: String::new(), below: String::new(), error: None, timeout: false }
    }

    /// Takes one event in; true when the mini has failed and should stop now (a tool server's
    /// transport error, after the client's own retry).
    fn observe(&mut self, event: &Event) -> bool {
        match event {
            Event::Text { agent, text } if *agent == self.instance => self.own.push_str(text),
            Event::Text { text, .. } => self.below.push_str(text),
            Event::Error { agent, code, message, .. } if *agent == self.instance && self.error.is_none() => {
                self.error = Some(format!("{code}: {message}"));
            }
            Event::ToolResult { agent, result, is_error: true, .. }
                if *agent == self.instance && result["error"]["code"] == "tool_failed" =>
            {
                self.error =
                    Some(format!("tool_failed: {}", result["error"]["message"].as_str().unwrap_or("")));
                return true;
            }
            _ => {}
        }
        false
    }

    fn timed_out(&mut self, timeout: Duration) {
        self.timeout = true;
        self.error = Some(format!("did not finish within {} ms and was stopped", timeout.as_millis()));
    }

    fn outcome(self) -> Outcome {
        let status = match (self.timeout, &self.error) {
            (true, _) => MiniStatus::Timeout,
            (false, Some(_)) => MiniStatus::Failed,
            (false, None) => MiniStatus::Ok,
        };
        let answer = if status != MiniStatus::Ok {
            String::new()
        } else if self.own.trim().is_empty() {
            self.below
        } else {
            self.own
        };
        Outcome { status, answer, error: self.error }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tests::wait;
    use crate::agent::{Agent, AgentRequest, LoopLimits};
    use crate::model::scripted::{Reply, ScriptedModel};
    use crate::tool::testing::FnTool;
    use crate::tool::{Tool, ToolError, ToolRegistry};

    /// A tool whose server is unreachable (after its client's retry).
    fn unreachable() -> Arc<dyn Tool> {
        FnTool::new("unreachable", "Always fails.", json!({"type": "object"}), |_, _| async {
            Err(ToolError::Failed {
                tool: "unreachable".into(),
                reason: "MCP transport error (after retry)".into(),
            })
        })
    }

    fn decomposition(n: usize) -> String {
        let tasks: Vec<Value> = (1..=n)
            .map(|i| json!({"id": i.to_string(), "description": format!("part {i}"), "allowed_tools": []}))
            .collect();
        json!({"should_fork": true, "sub_tasks": tasks}).to_string()
    }

    /// A lead over `model` with the `wait` and `unreachable` tools and parent_full minis.
    fn lead(model: Arc<ScriptedModel>, split: Arc<ScriptedModel>, join: Arc<ScriptedModel>) -> LlmAgent {
        let tools: Vec<Arc<dyn Tool>> = vec![wait(), unreachable()];
        let settings =
            MiniAgentSettings { allowlist: AllowlistMode::ParentFull, ..MiniAgentSettings::default() };
        LlmAgent::new(
            "lead",
            "Lead.",
            model,
            Arc::new(ToolRegistry::new(tools).unwrap()),
            LoopLimits::default(),
        )
        .with_fork(Arc::new(MiniAgents::new(settings, Some(split), Some(join))))
    }

    async fn run(agent: &LlmAgent) -> Vec<Event> {
        let request = AgentRequest { query: "part 1, part 2 and part 3".into(), ..Default::default() };
        agent.run(request, "lead".into()).collect().await
    }

    #[tokio::test(start_paused = true)]
    async fn three_minis_take_the_longest_ones_time_not_the_sum() {
        let model = Arc::new(ScriptedModel::new(
            "lead",
            Some(Reply::text("A part's answer.").first_byte_delay(Duration::from_millis(100))),
        ));
        let split = Arc::new(ScriptedModel::new("split", Some(Reply::text(decomposition(3)))));
        let join = Arc::new(ScriptedModel::new("join", Some(Reply::text("All of it."))));
        let started = Instant::now();
        let events = run(&lead(model.clone(), split, join.clone())).await;
        assert_eq!(started.elapsed(), Duration::from_millis(100), "three 100 ms minis at once");
        assert_eq!(model.requests().len(), 3);
        assert_eq!(join.requests().len(), 1);
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Event::Text { agent, text } if agent == "lead" => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "All of it.");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_whose_parts_may_need_approval_is_not_fanned_out() {
        let model = Arc::new(ScriptedModel::new("lead", Some(Reply::text("One answer."))));
        let split = Arc::new(ScriptedModel::new("split", Some(Reply::text(decomposition(3)))));
        let join = Arc::new(ScriptedModel::new("join", Some(Reply::text("unused"))));
        let rule = crate::agent::ApprovalRule { when: None, reason: "r".into(), editable: vec![] };
        let approvals = crate::agent::ApprovalPolicy::new([("wait".to_owned(), rule)].into());
        let lead = lead(model.clone(), split.clone(), join.clone()).with_approvals(Arc::new(approvals));
        let events = run(&lead).await;
        assert_eq!(split.requests().len(), 1, "the decomposer was asked");
        assert!(!events.iter().any(|e| matches!(e, Event::MiniAgentDecomposed { .. })), "{events:?}");
        assert!(join.requests().is_empty());
        assert_eq!(model.requests().len(), 1, "the lead's own loop answered");
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Event::Text { agent, text } if agent == "lead" => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "One answer.");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_servers_transport_error_fails_the_mini_at_once() {
        let model =
            Arc::new(ScriptedModel::new("lead", Some(Reply::text("").tool_call("unreachable", json!({})))));
        let split = Arc::new(ScriptedModel::new("split", Some(Reply::text(decomposition(2)))));
        let join = Arc::new(ScriptedModel::new("join", Some(Reply::text("unused"))));
        let events = run(&lead(model.clone(), split, join.clone())).await;
        assert_eq!(model.requests().len(), 2, "each mini stopped after its failed call, with no second step");
        assert!(join.requests().is_empty(), "every mini failed: no synthesis");
        let errors: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::MiniAgentFinished { status: MiniStatus::Failed, error: Some(error), .. } => {
                    Some(error.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(errors.len(), 2);
        assert!(errors.iter().all(|e| e.contains("tool_failed") && e.contains("after retry")), "{errors:?}");
    }

    #[test]
    fn a_decomposition_in_a_code_fence_is_read_and_duplicate_ids_are_refused() {
        let schema = JsonSchema::compile(&decomposition_schema(None)).unwrap();
        let fenced = format!("```json\n{}\n```", decomposition(2));
        assert_eq!(parse_decomposition(&fenced, &schema).unwrap().sub_tasks.len(), 2);
        let twice = decomposition(2).replace("\"2\"", "\"1\"");
        assert!(parse_decomposition(&twice, &schema).unwrap_err().contains("used twice"));
        let missing = r#"{"should_fork": true}"#;
        assert!(parse_decomposition(missing, &schema).unwrap_err().contains("sub_tasks"));
    }

    #[test]
    fn the_plain_answer_keeps_the_answers_and_names_the_missing_parts() {
        let task =
            |id: &str| SubTask { id: id.into(), description: format!("part {id}"), allowed_tools: vec![] };
        let ok = Outcome { status: MiniStatus::Ok, answer: "One.".into(), error: None };
        let slow = Outcome { status: MiniStatus::Timeout, answer: String::new(), error: Some("slow".into()) };
        assert_eq!(
            plain_answer(&[task("1"), task("2")], &[ok, slow]),
            "One.\n- Not answered: \"part 2\" (it took too long)."
        );
    }
}
