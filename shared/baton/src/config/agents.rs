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
//! function). The settings of the command line and the environment may fill these for an agent
//! ([`crate::config::Config::apply_agent_defaults`]).

use std::collections::{HashMap, HashSet};
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// Its endpoint (NDJSON over HTTP; locally a function URL path).
    #[serde(default)]
    pub url: Option<String>,
    /// The Lambda function it is deployed as (InvokeWithResponseStream).
    #[serde(default)]
    pub function: Option<String>,
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
    /// Most sub-tasks one fork may run (default 3, at most [`MAX_MINIS`]).
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
    /// The settings a [`crate::mini::MiniAgents`] runs with, under a team's `max_depth`.
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
}

/// Largest `max_depth`.
pub const MAX_DEPTH_LIMIT: u32 = 16;

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

    /// Checks everything that does not depend on the tools available at build time: names,
    /// references, kinds, cycles, schemas and numbers.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.agents.is_empty() {
            return Err(self.error(None, "agents", "must list at least one agent"));
        }
        if self.max_depth == 0 || self.max_depth > MAX_DEPTH_LIMIT {
            return Err(self.error(None, "max_depth", format!("must be between 1 and {MAX_DEPTH_LIMIT}")));
        }
        // Names first: every other check refers to agents by name.
        let mut seen = HashSet::new();
        for (i, a) in self.agents.iter().enumerate() {
            let valid_name = !a.name.is_empty()
                && a.name.len() <= 64 - AGENT_TOOL_PREFIX.len()
                && a.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                return Err(self.error(
                    Some(i),
                    "name",
                    format!(
                        "`{}` must be 1 to {} letters, digits, `_` or `-` (its tool name is `agent__<name>`)",
                        a.name,
                        64 - AGENT_TOOL_PREFIX.len()
                    ),
                ));
            }
            if !seen.insert(a.name.as_str()) {
                return Err(self.error(Some(i), "name", format!("`{}` is defined twice", a.name)));
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            self.validate_agent(i, a)?;
        }
        let Some(entry) = self.index_of(&self.entry) else {
            return Err(self.error(
                None,
                "entry",
                format!("unknown agent `{}`; defined: {}", self.entry, self.names()),
            ));
        };
        if self.agents[entry].kind != AgentKind::Llm {
            return Err(self.error(None, "entry", "the entry agent must be of kind `llm`"));
        }
        self.check_cycles()
    }

    /// Checks agent `i` on its own: numbers, schemas, what its kind takes, its routing, its
    /// remote, and the agents and tools it lists.
    fn validate_agent(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.error(Some(i), field, reason));
        for (field, secs) in
            [("timeout_seconds", a.timeout_seconds), ("tool_timeout_seconds", a.tool_timeout_seconds)]
        {
            if let Some(s) = secs {
                if !(s.is_finite() && s > 0.0 && s <= 900.0) {
                    return err(field, format!("{s} must be above 0 and at most 900"));
                }
            }
        }
        if a.max_steps.is_some_and(|n| n == 0 || n > 50) {
            return err("max_steps", "must be between 1 and 50".into());
        }
        if let Some(schema) = &a.input_schema {
            JsonSchema::compile(schema).map_err(|e| self.error(Some(i), "input_schema", e))?;
            if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                return err("input_schema", "must be `type: object` (tool arguments are an object)".into());
            }
        }
        if let Some(schema) = &a.output_schema {
            JsonSchema::compile(schema).map_err(|e| self.error(Some(i), "output_schema", e))?;
        }
        match &a.kind {
            AgentKind::Llm => {
                if a.instruction.trim().is_empty() {
                    return err("instruction", "an `llm` agent needs an instruction".into());
                }
            }
            AgentKind::Builtin(kind) => {
                for (field, set) in [
                    ("instruction", !a.instruction.is_empty()),
                    ("tools", !a.tools.is_empty()),
                    ("agents", !a.agents.is_empty()),
                    ("model", a.model.is_some()),
                ] {
                    if set {
                        return err(
                            field,
                            format!(
                                "a `{kind}` agent is built in: it takes no instruction, model, tools or agents"
                            ),
                        );
                    }
                }
            }
        }
        if let Some(routing) = &a.routing {
            self.validate_routing(i, a, routing)?;
        }
        if let Some(minis) = a.minis() {
            self.validate_minis(i, a, minis)?;
        }
        if let Some(remote) = &a.remote {
            if remote.url.is_some() == remote.function.is_some() {
                return err("remote", "give exactly one of `url` and `function`".into());
            }
        }
        let mut listed = HashSet::new();
        for child in &a.agents {
            if self.index_of(child).is_none() {
                return err("agents", format!("unknown agent `{child}`; defined: {}", self.names()));
            }
            if !listed.insert(child) {
                return err("agents", format!("`{child}` is listed twice"));
            }
        }
        let mut tools = HashSet::new();
        for tool in &a.tools {
            if !tools.insert(tool) {
                return err("tools", format!("`{tool}` is listed twice"));
            }
        }
        Ok(())
    }

    /// Checks agent `i`'s mini-agents: numbers, what the agent is, and no nesting (no agent a
    /// forking agent can reach, its minis' children included, may fork itself).
    fn validate_minis(&self, i: usize, a: &AgentSpec, minis: &MiniAgentSpec) -> Result<(), ConfigError> {
        let err =
            |field: &str, reason: String| Err(self.error(Some(i), &format!("mini_agent.{field}"), reason));
        if let Some(n) = minis.max_minis {
            if !(2..=MAX_MINIS).contains(&n) {
                return err("max_minis", format!("{n} must be between 2 and {MAX_MINIS} (the hard cap)"));
            }
        }
        if let Some(s) = minis.timeout_seconds {
            if !(s.is_finite() && s > 0.0 && s <= 900.0) {
                return err("timeout_seconds", format!("{s} must be above 0 and at most 900"));
            }
        }
        if a.kind != AgentKind::Llm {
            return err("enabled", "only an `llm` agent has mini-agents".into());
        }
        if a.routing.is_some() {
            return err("enabled", "a routing agent already splits a message between its agents".into());
        }
        if minis.tool_allowlist_mode != AllowlistMode::ParentFull && a.tools.is_empty() && a.agents.is_empty()
        {
            return err(
                "tool_allowlist_mode",
                "minis of an agent without tools or agents get no tool; use `parent_full`".into(),
            );
        }
        // No nesting: a forking agent must not be reachable from another forking agent.
        for (j, other) in self.agents.iter().enumerate() {
            if j != i && other.minis().is_some() && self.reaches(j, &a.name) {
                return err(
                    "enabled",
                    format!(
                        "`{}` forks into minis and can reach `{}` (its minis could start it), and minis do not nest",
                        other.name, a.name
                    ),
                );
            }
        }
        Ok(())
    }

    /// Whether agent `from` calls `name`, directly or through other agents.
    fn reaches(&self, from: usize, name: &str) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            for child in &self.agents[at].agents {
                if child == name {
                    return true;
                }
                if let Some(c) = self.index_of(child) {
                    if seen.insert(c) {
                        stack.push(c);
                    }
                }
            }
        }
        false
    }

    /// Checks agent `i`'s routing policy.
    fn validate_routing(&self, i: usize, a: &AgentSpec, routing: &RoutingSpec) -> Result<(), ConfigError> {
        let err = |reason: String| Err(self.error(Some(i), "routing", reason));
        if a.kind != AgentKind::Llm {
            return err("only an `llm` agent routes".into());
        }
        if !a.tools.is_empty() {
            return err("a routing agent dispatches to its agents only: it takes no `tools`".into());
        }
        for (what, name) in [("fallback", Some(&routing.fallback)), ("followup", routing.followup.as_ref())] {
            if let Some(name) = name {
                if !a.agents.contains(name) {
                    return err(format!(
                        "{what} `{name}` is not one of its agents ({})",
                        a.agents.join(", ")
                    ));
                }
            }
        }
        for (kind, name) in &routing.images {
            if !a.agents.contains(name) {
                return err(format!(
                    "images: `{}` goes to `{name}`, which is not one of its agents ({})",
                    kind.as_str(),
                    a.agents.join(", ")
                ));
            }
        }
        if routing.followup.is_some() && routing.categories.is_empty() {
            return err("categories: a follow-up agent needs at least one category".into());
        }
        if let Some(bad) = routing.categories.iter().find(|c| {
            c.is_empty() || !c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        }) {
            return err(format!("categories: `{bad}` must be snake_case"));
        }
        let declared = [
            ("category_argument", &routing.category_argument),
            ("summary_argument", &routing.summary_argument),
        ];
        for (field, name) in declared.iter().filter_map(|(f, n)| n.as_ref().map(|n| (f, n))) {
            if routing.followup.is_none() {
                return err(format!("{field}: only a routing with a `followup` agent has one"));
            }
            let snake = !name.is_empty()
                && name.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
            if !snake || ["query", "prior_context", "intent_count"].contains(&name.as_str()) {
                return err(format!(
                    "{field}: `{name}` must be a snake_case name other than query, prior_context and intent_count"
                ));
            }
        }
        if routing.category_argument.is_some() && routing.category_argument == routing.summary_argument {
            return err("summary_argument: it must differ from category_argument".into());
        }
        if let Some(guards) = &routing.guards {
            crate::guard::Guards::only(guards)
                .map_err(|e| self.error(Some(i), "routing", format!("guards: {e}")))?;
        }
        if let Some(smalltalk) = &routing.smalltalk {
            crate::text::Lexicon::with_defaults(smalltalk)
                .map_err(|e| self.error(Some(i), "routing", format!("smalltalk: {e}")))?;
        }
        for child in &a.agents {
            if let Some(spec) = self.get(child) {
                if spec.output != OutputMode::TextAndEvents {
                    return err(format!(
                        "its agents' answers are its answer: set `output: text_and_events` on `{child}`"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the agents' own MCP servers (their fields; a name no other server has) and that
    /// the MCP tools an agent lists (`server.*`, `server.tool`) name a shared server or one of its
    /// own, never another agent's.
    pub fn validate_mcp_tools(&self, shared: &crate::mcp::config::McpServers) -> Result<(), ConfigError> {
        let mut owners: HashMap<&str, &str> = HashMap::new();
        for (i, a) in self.agents.iter().enumerate() {
            for (name, server) in &a.mcp_servers {
                let field = "mcp_servers";
                crate::mcp::config::validate_server(name, server)
                    .map_err(|e| self.error(Some(i), field, format!("{}: {}", e.path, e.reason)))?;
                let taken = match (shared.contains_key(name), owners.get(name.as_str())) {
                    (true, _) => Some("the top-level `mcp_servers`".to_owned()),
                    (false, Some(owner)) => Some(format!("agent `{owner}`")),
                    (false, None) => None,
                };
                if let Some(by) = taken {
                    let reason = format!("an MCP server named `{name}` is already declared by {by}");
                    return Err(self.error(Some(i), field, reason));
                }
                owners.insert(name, &a.name);
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            let mut visible = shared.clone();
            visible.extend(a.mcp_servers.iter().map(|(k, v)| (k.clone(), v.clone())));
            for tool in a.tools.iter().filter(|t| crate::mcp::is_mcp_pattern(t)) {
                let server = tool.split_once('.').map_or(tool.as_str(), |(s, _)| s);
                if let Some(owner) = owners.get(server).filter(|o| **o != a.name) {
                    let reason = format!("`{tool}`: `{server}` is agent `{owner}`'s own MCP server");
                    return Err(self.error(Some(i), "tools", reason));
                }
                crate::mcp::validate_pattern(tool, &visible)
                    .map_err(|e| self.error(Some(i), "tools", e.reason))?;
            }
        }
        Ok(())
    }

    /// Every MCP server to start: the shared ones and every agent's own.
    pub fn all_mcp_servers(&self, shared: &crate::mcp::config::McpServers) -> crate::mcp::config::McpServers {
        let mut all = shared.clone();
        for a in &self.agents {
            all.extend(a.mcp_servers.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        all
    }

    /// Checks that every listed tool (but MCP tools, checked by
    /// [`AgentsConfig::validate_mcp_tools`]) exists among `available`.
    pub fn validate_tools(&self, available: &[&str]) -> Result<(), ConfigError> {
        for (i, a) in self.agents.iter().enumerate() {
            let unknown =
                a.tools.iter().find(|t| !crate::mcp::is_mcp_pattern(t) && !available.contains(&t.as_str()));
            if let Some(unknown) = unknown {
                return Err(self.error(
                    Some(i),
                    "tools",
                    format!("unknown tool `{unknown}`; available: {}", available.join(", ")),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn names(&self) -> String {
        self.agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Agents that call each other in a circle would never end: each must be a tree below it.
    fn check_cycles(&self) -> Result<(), ConfigError> {
        fn visit<'a>(
            config: &'a AgentsConfig,
            at: usize,
            path: &mut Vec<&'a str>,
            done: &mut HashSet<usize>,
        ) -> Result<(), ConfigError> {
            let name = config.agents[at].name.as_str();
            if let Some(start) = path.iter().position(|p| *p == name) {
                let mut cycle = path[start..].to_vec();
                cycle.push(name);
                let from = config.index_of(path[path.len() - 1]);
                return Err(config.error(
                    from,
                    "agents",
                    format!("agents call each other in a circle: {}", cycle.join(" → ")),
                ));
            }
            if done.contains(&at) {
                return Ok(());
            }
            path.push(name);
            for child in &config.agents[at].agents {
                if let Some(c) = config.index_of(child) {
                    visit(config, c, path, done)?;
                }
            }
            path.pop();
            done.insert(at);
            Ok(())
        }
        let mut done = HashSet::new();
        for i in 0..self.agents.len() {
            visit(self, i, &mut Vec::new(), &mut done)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    instruction: Lead.
    agents: [worker]
  - name: worker
    instruction: Work.
    tools: [lookup]
    timeout_seconds: 5
";

    #[test]
    fn fields_are_located_in_block_yaml() {
        assert_eq!(locate_agent_field(TEAM, 0, "agents"), Some(5));
        assert_eq!(locate_agent_field(TEAM, 1, "name"), Some(6));
        assert_eq!(locate_agent_field(TEAM, 1, "tools"), Some(8));
        assert_eq!(locate_agent_field(TEAM, 1, "timeout_seconds"), Some(9));
        assert_eq!(locate_agent_field(TEAM, 1, "output"), Some(6), "an unwritten field points at its agent");
        assert_eq!(locate_top_level(TEAM, "entry"), Some(1));
    }

    fn minis_team(lead_minis: &str, worker_minis: &str) -> String {
        format!(
            "entry: lead\nagents:\n  - name: lead\n    instruction: Lead.\n    tools: [lookup]\n    agents: [worker]\n{lead_minis}  - name: worker\n    instruction: Work.\n    tools: [lookup]\n{worker_minis}"
        )
    }

    fn load(yaml: &str) -> Result<crate::config::Config, String> {
        crate::config::Config::default().with_yaml(yaml, "team.yaml").map_err(|e| e.to_string())
    }

    #[test]
    fn mini_agents_default_to_three_minis_strict_allowlists_and_the_agents_model() {
        let config = load(&minis_team("    mini_agent: {}\n", "")).unwrap();
        let minis = config.agents.get("lead").unwrap().minis().expect("enabled once the block is written");
        let settings = minis.settings(3);
        assert_eq!(settings.max_minis, DEFAULT_MAX_MINIS);
        assert_eq!(DEFAULT_MAX_MINIS, 3);
        assert_eq!(settings.allowlist, AllowlistMode::Strict);
        assert_eq!(settings.timeout, DEFAULT_MINI_TIMEOUT);
        assert_eq!((minis.decomposer_model.as_ref(), minis.aggregator_model.as_ref()), (None, None));
        let off = load(&minis_team("    mini_agent: {enabled: false}\n", "")).unwrap();
        assert!(off.agents.get("lead").unwrap().minis().is_none());
    }

    #[test]
    fn max_minis_past_the_hard_cap_of_eight_is_refused_at_its_line() {
        assert!(load(&minis_team("    mini_agent:\n      max_minis: 8\n", "")).is_ok());
        let err =
            load(&minis_team("    mini_agent:\n      enabled: true\n      max_minis: 9\n", "")).unwrap_err();
        assert_eq!(
            err,
            "configuration file team.yaml: line 9: agents[0] (`lead`).mini_agent.max_minis: 9 must be between 2 and 8 (the hard cap)"
        );
        let err = load(&minis_team("    mini_agent: {max_minis: 1}\n", "")).unwrap_err();
        assert!(
            err.contains("line 7: agents[0] (`lead`).mini_agent.max_minis: 1 must be between 2"),
            "{err}"
        );
    }

    #[test]
    fn an_agent_a_forking_agent_can_reach_may_not_fork_itself() {
        let err = load(&minis_team("    mini_agent: {}\n", "    mini_agent: {enabled: true}\n")).unwrap_err();
        assert!(err.contains("line 11: agents[1] (`worker`).mini_agent.enabled:"), "{err}");
        assert!(err.contains("`lead` forks into minis and can reach `worker`"), "{err}");
        assert!(err.contains("minis do not nest"), "{err}");
        // Either one alone is fine.
        assert!(load(&minis_team("", "    mini_agent: {enabled: true}\n")).is_ok());
        assert!(load(&minis_team("    mini_agent: {}\n", "    mini_agent: {enabled: false}\n")).is_ok());
    }

    #[test]
    fn strict_or_inferred_minis_need_an_agent_with_tools() {
        let yaml = "agents:\n  - name: solo\n    instruction: Talk.\n    mini_agent: {}\n";
        let err = load(yaml).unwrap_err();
        assert!(err.contains("mini_agent.tool_allowlist_mode: minis of an agent without tools"), "{err}");
        assert!(load(&yaml.replace("{}", "{tool_allowlist_mode: parent_full}")).is_ok());
        let err = load(&yaml.replace("{}", "{tool_allowlist_mode: everything}")).unwrap_err();
        assert!(err.contains("unknown variant `everything`"), "{err}");
    }
}
