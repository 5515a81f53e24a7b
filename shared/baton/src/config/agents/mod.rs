//! Agents from configuration (docs/agents.md): the `entry`, `max_depth` and `agents` keys of the
//! YAML file, checked at start with errors that name the line and the field, and the graph of
//! agents built from them.
//!
//! ```yaml
//! entry: concierge          # the agent that answers the user (default: the first one)
//! max_depth: 3              # how deep agents may nest below the entry agent
//! agents:
//!   - name: concierge
//!     instruction: You answer the user; ask your agents for what you do not know.
//!     agents: [deals, help_desk]          # offered as tools agent__deals, agent__help_desk
//!   - name: deals
//!     description: Finds offers.          # what the parent's model reads about the tool
//!     instruction: Find offers with your tools.
//!     tools: [lookup]
//!     output: text_and_events             # text_and_events | events (default) | none
//!     skip_summarization: true            # its answer goes to the user as is
//!     timeout_seconds: 20
//! ```
//!
//! Kinds: `llm` (the default: a tool loop over `instruction`, `model`, `tools` and `agents`), or
//! the name of an agent a deployment's extension builds (`wiring::Extension::agent_kinds`): such
//! an agent is built in and takes no instruction, model, tools or agents.
//!
//! Routing: an `llm` agent with `routing:` offers its agents as routing tools `ask_<name>` and
//! routes with the routing policy of [`crate::routing`] (docs/routing.md): its agents see the
//! conversation, their answers are its answer.
//!
//! ```yaml
//!   - name: orchestrator
//!     instruction: You route the user's requests to your agents.
//!     agents: [help_desk, deals]
//!     routing:
//!       followup: help_desk      # echo follow-ups, prior context on a switch, category and summary
//!       fallback: deals          # where a refused direct answer goes
//!       categories: [missing_points, rewards]
//!       category_argument: help_desk_category   # default <followup>_category
//!       summary_argument: help_desk_summary     # default <followup>_summary
//!       guards: [failsafe, echo_followup, fastpath, duplicates, overlap, verbatim, prior_context, summary_cap]
//! ```
//!
//! Models: `model` names a model on the configured server; an agent that names none uses the
//! default model (`--orchestrator-model`). `api: responses` uses the Responses API. `remote:
//! {url: ...}` or `{function: ...}` runs the agent in another process (a separately deployed
//! function); `remote: {a2a: "https://…", token_env?: NAME}` calls a remote A2A agent. The settings of the command line and the environment may fill these for an agent
//! ([`crate::config::Config::apply_agent_defaults`]).
//!
//! # Layout
//! - this file: the entries' types, the errors that name their line, and what a parent's tool
//!   of an agent takes from its entry;
//! - `validate`: the checks at start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
use crate::agent_tool::{AGENT_TOOL_PREFIX, AgentToolOptions, OutputMode};
use crate::mini::{AllowlistMode, DEFAULT_MAX_MINIS, DEFAULT_MINI_TIMEOUT, MAX_MINIS, MiniAgentSettings};
use crate::tool::JsonSchema;

/// What an agent is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AgentKind {
    /// A model with tools and agents (a tool loop).
    #[default]
    Llm,
    /// An agent an extension builds (`kind: <name>`): it takes no instruction, model, tools or
    /// agents.
    Builtin(String),
}

impl AgentKind {
    /// The name written in `kind:`.
    pub fn as_str(&self) -> &str {
        match self {
            AgentKind::Llm => "llm",
            AgentKind::Builtin(name) => name,
        }
    }
}

impl<'de> Deserialize<'de> for AgentKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        let valid =
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        match name.as_str() {
            "llm" => Ok(AgentKind::Llm),
            _ if valid => Ok(AgentKind::Builtin(name)),
            _ => Err(serde::de::Error::custom(format!(
                "`{name}` is not a kind: `llm` or an extension's agent kind (letters, digits, `_`, `-`)"
            ))),
        }
    }
}

/// How an agent routes (see the module docs).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSpec {
    /// Where a direct answer the fastpath refuses goes: one of the agent's agents.
    pub fallback: String,
    /// The agent follow-ups and switches concern, whose tool also takes a category and a summary.
    #[serde(default)]
    pub followup: Option<String>,
    /// The follow-up agent's categories (snake_case).
    #[serde(default)]
    pub categories: Vec<String>,
    /// The name of the follow-up tool's category argument (default `<followup>_category`).
    #[serde(default)]
    pub category_argument: Option<String>,
    /// The name of the follow-up tool's one-line summary argument (default `<followup>_summary`).
    #[serde(default)]
    pub summary_argument: Option<String>,
    /// Which guards run; all when not given.
    #[serde(default)]
    pub guards: Option<Vec<String>>,
    /// Smalltalk phrases added to the default lists (`data/routing/smalltalk.yaml`).
    #[serde(default)]
    pub smalltalk: Option<crate::text::SmalltalkLists>,
    /// Where a direct answer goes when the user attached an image of a known kind (`receipt`,
    /// `product`, `other`): one of the agent's agents per kind.
    #[serde(default)]
    pub images: std::collections::BTreeMap<crate::image::ImageKind, String>,
}

/// Where a remote agent runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// Its endpoint (NDJSON over HTTP; locally a function URL path).
    #[serde(default)]
    pub url: Option<String>,
    /// The Lambda function it is deployed as (InvokeWithResponseStream).
    #[serde(default)]
    pub function: Option<String>,
    /// An A2A v1.0 agent: its base URL (its card at `/.well-known/agent-card.json` under it), or
    /// its card's URL (ending in `.json`) (docs/a2a.md).
    #[serde(default)]
    pub a2a: Option<String>,
    /// With `a2a`: the environment variable holding the bearer token sent to it (never logged).
    #[serde(default)]
    pub token_env: Option<String>,
    /// With `a2a`: `sigv4` signs each request with the deployment's AWS credentials.
    #[serde(default)]
    pub auth: Option<RemoteAuthKind>,
    /// With `auth: sigv4`: the service signed for (default `execute-api`).
    #[serde(default)]
    pub service: Option<String>,
    /// With `auth: sigv4`: the region signed for (default: the deployment's, `AWS_REGION`).
    #[serde(default)]
    pub region: Option<String>,
}

/// How calls to a remote A2A agent are signed (`remote: {auth: …}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteAuthKind {
    /// AWS Signature Version 4.
    Sigv4,
}

/// Which OpenAI API an agent's model is called through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// Chat Completions.
    #[default]
    Chat,
    /// The Responses API.
    Responses,
}

/// An agent's mini-agents (see [`crate::mini`]): the fan-out of a multi-part request into
/// parallel focused tool loops.
///
/// ```yaml
///     mini_agent:
///       enabled: true                   # the default once the block is written
///       max_minis: 3                    # sub-tasks one fork may run (2 to 8)
///       timeout_seconds: 30             # per mini, from its dispatch
///       tool_allowlist_mode: strict     # strict | parent_full | inferred
///       decomposer_model: gpt-4.1-nano  # default: the agent's model
///       aggregator_model: gpt-4.1-mini  # default: the agent's model
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiniAgentSpec {
    /// Whether the agent forks.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Most sub-tasks one fork may run (default 3, at most `MAX_MINIS`).
    #[serde(default)]
    pub max_minis: Option<usize>,
    /// Longest one mini may run (default 30 s).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Which tools each mini gets.
    #[serde(default)]
    pub tool_allowlist_mode: AllowlistMode,
    /// The decomposer's model; the agent's when not given.
    #[serde(default)]
    pub decomposer_model: Option<String>,
    /// The aggregator's model; the agent's when not given.
    #[serde(default)]
    pub aggregator_model: Option<String>,
}

fn enabled_by_default() -> bool {
    true
}

impl MiniAgentSpec {
    /// The settings a `crate::mini::MiniAgents` runs with, under a team's `max_depth`.
    pub fn settings(&self, max_depth: u32) -> MiniAgentSettings {
        MiniAgentSettings {
            max_minis: self.max_minis.unwrap_or(DEFAULT_MAX_MINIS),
            timeout: self.timeout_seconds.map_or(DEFAULT_MINI_TIMEOUT, Duration::from_secs_f64),
            allowlist: self.tool_allowlist_mode,
            max_depth,
        }
    }
}

/// One configured agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Its name: letters, digits, `_` and `-`; its tool is `agent__<name>`.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub kind: AgentKind,
    /// What it does, for the model of an agent that calls it.
    #[serde(default)]
    pub description: String,
    /// Its system prompt (`llm` agents).
    #[serde(default)]
    pub instruction: String,
    /// Its model's name; `None` takes the default (see the module docs).
    #[serde(default)]
    pub model: Option<String>,
    /// The API its model is called through.
    #[serde(default)]
    pub api: Option<ModelApi>,
    /// Its tools, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Agents it may call, as tools `agent__<name>`.
    #[serde(default)]
    pub agents: Vec<String>,
    /// JSON Schema of its input as a tool; without one it takes `{text, json}`.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
    /// JSON Schema its answer must satisfy, as JSON, when it is called as a tool.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// Its answer goes to the user as is, with no further call of its parent's model.
    #[serde(default)]
    pub skip_summarization: bool,
    /// Longest one instance may run.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// What of its output reaches the client when another agent calls it.
    #[serde(default)]
    pub output: OutputMode,
    /// Model calls per answer (the last one may not call tools).
    #[serde(default)]
    pub max_steps: Option<usize>,
    /// Longest one of its (ordinary) tool calls may take.
    #[serde(default)]
    pub tool_timeout_seconds: Option<f64>,
    /// Its routing policy, for an agent that routes to its agents.
    #[serde(default)]
    pub routing: Option<RoutingSpec>,
    /// Where it runs when it runs in another process.
    #[serde(default)]
    pub remote: Option<RemoteSpec>,
    /// MCP servers of its own (same fields as the top-level `mcp_servers`): started with the
    /// shared ones, their tools offered to this agent only — all of a server's tools, unless
    /// `tools:` names some of them as `server.tool`.
    #[serde(default)]
    pub mcp_servers: crate::mcp::config::McpServers,
    /// Its mini-agents, when it may fan a multi-part request out.
    #[serde(default)]
    pub mini_agent: Option<MiniAgentSpec>,
    /// Its calls that need a person's approval, by tool name as its model calls them (a tool,
    /// `agent__<name>`, `ask_<name>`, an MCP tool): `true`, or a rule (docs/approvals.md).
    #[serde(default)]
    pub needs_approval: std::collections::BTreeMap<String, ApprovalSpec>,
}

/// When calls of one tool need a person's approval.
///
/// ```yaml
///     needs_approval:
///       clip_offer: true                    # every call
///       send_payment:
///         when: {properties: {amount: {minimum: 100}}, required: [amount]}   # calls whose
///                                           # arguments match this JSON Schema
///         reason: Payments of 100 or more need a person.
///         editable: [amount]                # fields the person may change before approving
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalSpec {
    /// `true`: every call; `false`: none (as if not listed).
    Always(bool),
    /// A rule.
    Rule(ApprovalRuleSpec),
}

/// A rule of [`ApprovalSpec`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRuleSpec {
    /// Only calls whose arguments match this JSON Schema need approval; all when absent.
    #[serde(default)]
    pub when: Option<serde_json::Value>,
    /// Why, shown to the person.
    #[serde(default)]
    pub reason: Option<String>,
    /// The argument fields the person may change before approving.
    #[serde(default)]
    pub editable: Vec<String>,
}

impl<'de> Deserialize<'de> for ApprovalSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match value {
            serde_json::Value::Bool(b) => Ok(ApprovalSpec::Always(b)),
            serde_json::Value::Object(_) => serde_json::from_value(value)
                .map(ApprovalSpec::Rule)
                .map_err(|e| serde::de::Error::custom(format!("an approval rule: {e}"))),
            _ => {
                Err(serde::de::Error::custom("must be `true`, `false` or a rule `{when, reason, editable}`"))
            }
        }
    }
}

impl ApprovalSpec {
    /// The rule it means for tool `tool`, or `None` when calls need no approval; a `when`
    /// schema that does not compile is the error.
    pub fn rule(&self, tool: &str) -> Result<Option<crate::agent::ApprovalRule>, String> {
        let default_reason = || format!("`{tool}` acts on the user's behalf");
        match self {
            ApprovalSpec::Always(false) => Ok(None),
            ApprovalSpec::Always(true) => Ok(Some(crate::agent::ApprovalRule {
                when: None,
                reason: default_reason(),
                editable: Vec::new(),
            })),
            ApprovalSpec::Rule(rule) => {
                let when = match &rule.when {
                    Some(schema) => {
                        Some(Arc::new(JsonSchema::compile(schema).map_err(|e| format!("when: {e}"))?))
                    }
                    None => None,
                };
                let reason =
                    rule.reason.clone().filter(|r| !r.trim().is_empty()).unwrap_or_else(default_reason);
                Ok(Some(crate::agent::ApprovalRule { when, reason, editable: rule.editable.clone() }))
            }
        }
    }
}

impl AgentSpec {
    /// Its mini-agents, when enabled.
    pub fn minis(&self) -> Option<&MiniAgentSpec> {
        self.mini_agent.as_ref().filter(|m| m.enabled)
    }
}

/// The configured agents.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentsConfig {
    /// The agent that answers the user.
    pub entry: String,
    /// How deep agents may nest below the entry agent (its children are level 1).
    pub max_depth: u32,
    /// Every agent.
    pub agents: Vec<AgentSpec>,
    /// Where the agents were read from (file name, text), to point errors at their line.
    pub source: Option<(String, Arc<str>)>,
    /// The agents served as A2A agents at `/a2a/{name}` (the top-level `a2a: {agents: [...]}`),
    /// besides the entry agent at `/a2a` (docs/a2a.md).
    pub a2a_served: Vec<String>,
    /// The agents `orchestrator mcp` serves as MCP tools (the top-level `mcp: {agents: [...]}`);
    /// the entry agent alone when absent (docs/mcp.md).
    pub mcp_served: Option<Vec<String>>,
}

/// Largest `max_depth`.
pub(crate) const MAX_DEPTH_LIMIT: u32 = 16;

impl AgentsConfig {
    /// The agent named `name`.
    pub fn get(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| a.name == name)
    }

    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.agents.iter().position(|a| a.name == name)
    }

    /// An error about agent `index`'s `field` (or the top-level key `field` with no index),
    /// pointing at its line when the source is known.
    pub fn error(&self, index: Option<usize>, field: &str, reason: impl std::fmt::Display) -> ConfigError {
        let (path, text) = match &self.source {
            Some((path, text)) => (path.clone(), Some(text.clone())),
            None => ("configuration".to_owned(), None),
        };
        let line = text.and_then(|t| match index {
            Some(i) => locate_nested_field(&t, i, field),
            None => locate_top_level(&t, field),
        });
        let at = match index {
            Some(i) => {
                format!("agents[{i}] (`{}`).{field}", self.agents.get(i).map_or("?", |a| a.name.as_str()))
            }
            None => field.to_owned(),
        };
        let message = match line {
            Some(line) => format!("line {line}: {at}: {reason}"),
            None => format!("{at}: {reason}"),
        };
        ConfigError::File { path, message }
    }

    /// Every MCP server to start: the shared ones and every agent's own.
    pub fn all_mcp_servers(&self, shared: &crate::mcp::config::McpServers) -> crate::mcp::config::McpServers {
        let mut all = shared.clone();
        for a in &self.agents {
            all.extend(a.mcp_servers.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        all
    }

    /// The agent tool options of `spec` as a child.
    pub fn tool_options(&self, spec: &AgentSpec) -> AgentToolOptions {
        AgentToolOptions {
            description: if spec.description.trim().is_empty() {
                format!("Ask the {} agent.", spec.name)
            } else {
                spec.description.clone()
            },
            input_schema: spec.input_schema.clone(),
            output_schema: spec.output_schema.clone(),
            skip_summarization: spec.skip_summarization,
            timeout: spec.timeout_seconds.map(Duration::from_secs_f64),
            output: spec.output,
            max_depth: self.max_depth,
            ..AgentToolOptions::default()
        }
    }
}

/// The 1-based line of agent `index`'s `field` in a block-style YAML `agents:` list (or of the
/// agent's first line when the field is not written there).
fn locate_agent_field(yaml: &str, index: usize, field: &str) -> Option<usize> {
    let lines: Vec<&str> = yaml.lines().collect();
    let start = lines.iter().position(|l| l.trim_end() == "agents:")?;
    let mut item_indent = None;
    let mut current: Option<usize> = None;
    let mut count = 0;
    let mut item_line = None;
    let key = format!("{field}:");
    for (n, line) in lines.iter().enumerate().skip(start + 1) {
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = line.len() - body.len();
        if indent == 0 && !body.starts_with('-') {
            break;
        }
        let is_item = body.starts_with("- ") && *item_indent.get_or_insert(indent) == indent;
        let key_part = if is_item {
            current = Some(count);
            count += 1;
            if current == Some(index) {
                item_line = Some(n + 1);
            }
            body[2..].trim_start()
        } else if item_indent.is_some_and(|i| indent == i + 2) {
            body
        } else {
            continue;
        };
        match current {
            Some(c) if c == index && key_part.starts_with(&key) => return Some(n + 1),
            Some(c) if c > index => break,
            _ => {}
        }
    }
    item_line
}

/// The 1-based line of agent `index`'s `field`, or of `key` inside it for `field.key` (a
/// nested key not written there points at `field`).
fn locate_nested_field(yaml: &str, index: usize, path: &str) -> Option<usize> {
    let (field, key) = path.split_once('.').map_or((path, None), |(f, k)| (f, Some(k)));
    let at = locate_agent_field(yaml, index, field)?;
    let Some(key) = key else { return Some(at) };
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    // The column of the field's key (after `- ` when it opens the agent's entry).
    let base = lines[at - 1].find(field).unwrap_or_else(|| indent(lines[at - 1]));
    let key = format!("{key}:");
    let inside = lines
        .iter()
        .enumerate()
        .skip(at)
        .take_while(|(_, l)| l.trim().is_empty() || l.trim_start().starts_with('#') || indent(l) > base)
        .find(|(_, l)| l.trim_start().starts_with(&key));
    Some(inside.map_or(at, |(n, _)| n + 1))
}

/// The 1-based line of top-level key `field`.
fn locate_top_level(yaml: &str, field: &str) -> Option<usize> {
    let key = format!("{field}:");
    yaml.lines().position(|l| l.starts_with(&key)).map(|n| n + 1)
}

mod validate;

#[cfg(test)]
mod tests;
