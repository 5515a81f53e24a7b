//! Agents from configuration (DESIGN.md §5): the `entry`, `max_depth` and `agents` keys of the
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
//!     tools: [search_offers]
//!     output: text_and_events             # text_and_events | events (default) | none
//!     skip_summarization: true            # its answer goes to the user as is
//!     timeout_seconds: 20
//! ```
//!
//! Kinds: `llm` (the default: a tool loop over `instruction`, `model`, `tools` and `agents`),
//! `support` (the reference support agent: Forethought when a token is configured, the offline
//! help center otherwise) and `router` (the reference routed turn of DESIGN.md §4, whose two
//! agents must be `support` and `shopping`; only the entry agent may be one).
//!
//! Models: `model` names a model on the configured server; an agent that names none uses the
//! default model (`--orchestrator-model`), except the agent named `shopping`, which uses
//! `--shopping-model`. `api: responses` uses the Responses API.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use crate::agent::{Agent, AgentRequest, EventStream};
use crate::agent_tool::{AGENT_TOOL_PREFIX, AgentToolOptions, OutputMode};
use crate::config::ConfigError;
use crate::shopping::catalog::Catalog;
use crate::shopping::tools::{
    GET_OFFER, GetOffer, PURCHASE_HISTORY, PurchaseHistoryTool, SEARCH_OFFERS, SearchOffers,
};
use crate::support::help_center::{HelpCenter, SEARCH_HELP_CENTER, SearchHelpCenter};
use crate::tool::{JsonSchema, Tool};

/// What an agent is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// A model with tools and agents (a tool loop).
    #[default]
    Llm,
    /// The reference support agent (Forethought, or the offline help center).
    Support,
    /// The reference routed turn (DESIGN.md §4).
    Router,
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

/// The built-in tools an agent may list in `tools`.
pub const BUILTIN_TOOLS: &[&str] = &[SEARCH_OFFERS, GET_OFFER, PURCHASE_HISTORY, SEARCH_HELP_CENTER];

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
            Some(i) => locate_agent_field(&t, i, field),
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
                    return err(
                        "input_schema",
                        "must be `type: object` (tool arguments are an object)".into(),
                    );
                }
            }
            if let Some(schema) = &a.output_schema {
                JsonSchema::compile(schema).map_err(|e| self.error(Some(i), "output_schema", e))?;
            }
            match a.kind {
                AgentKind::Llm => {
                    if a.instruction.trim().is_empty() {
                        return err("instruction", "an `llm` agent needs an instruction".into());
                    }
                }
                AgentKind::Support => {
                    for (field, set) in [
                        ("instruction", !a.instruction.is_empty()),
                        ("tools", !a.tools.is_empty()),
                        ("agents", !a.agents.is_empty()),
                        ("model", a.model.is_some()),
                    ] {
                        if set {
                            return err(field, "a `support` agent is built in: it takes no instruction, model, tools or agents".into());
                        }
                    }
                }
                AgentKind::Router => {
                    if a.name != self.entry {
                        return err("kind", "only the entry agent may be a `router`".into());
                    }
                    if !a.instruction.is_empty() || !a.tools.is_empty() {
                        return err(
                            "instruction",
                            "a `router` takes its prompt from routing.orchestrator_prompt and has no tools"
                                .into(),
                        );
                    }
                    let mut children: Vec<&str> = a.agents.iter().map(String::as_str).collect();
                    children.sort_unstable();
                    if children != ["shopping", "support"] {
                        return err("agents", "a `router` routes to exactly [support, shopping]".into());
                    }
                }
            }
            let mut listed = HashSet::new();
            for child in &a.agents {
                let Some(c) = self.index_of(child) else {
                    return err("agents", format!("unknown agent `{child}`; defined: {}", self.names()));
                };
                if !listed.insert(child) {
                    return err("agents", format!("`{child}` is listed twice"));
                }
                let spec = &self.agents[c];
                if spec.kind == AgentKind::Router {
                    return err("agents", format!("`{child}` is a router and cannot be called as a tool"));
                }
                if a.kind == AgentKind::Router {
                    if child == "support" && spec.kind != AgentKind::Support {
                        return Err(self.error(
                            Some(c),
                            "kind",
                            "the router's `support` must be of kind `support`",
                        ));
                    }
                    if child == "shopping" && spec.kind != AgentKind::Llm {
                        return Err(self.error(
                            Some(c),
                            "kind",
                            "the router's `shopping` must be of kind `llm`",
                        ));
                    }
                    if spec.output != OutputMode::TextAndEvents {
                        return Err(self.error(
                            Some(c),
                            "output",
                            "the routed turn streams its sub-agents' answers: set `output: text_and_events`",
                        ));
                    }
                }
            }
            let mut tools = HashSet::new();
            for tool in &a.tools {
                if !tools.insert(tool) {
                    return err("tools", format!("`{tool}` is listed twice"));
                }
            }
        }
        let Some(entry) = self.index_of(&self.entry) else {
            return Err(self.error(
                None,
                "entry",
                format!("unknown agent `{}`; defined: {}", self.entry, self.names()),
            ));
        };
        if self.agents[entry].kind == AgentKind::Support {
            return Err(self.error(None, "entry", "the entry agent must be of kind `llm` or `router`"));
        }
        self.check_cycles()
    }

    /// Checks that every listed tool exists among `available`.
    pub fn validate_tools(&self, available: &[&str]) -> Result<(), ConfigError> {
        for (i, a) in self.agents.iter().enumerate() {
            if let Some(unknown) = a.tools.iter().find(|t| !available.contains(&t.as_str())) {
                return Err(self.error(
                    Some(i),
                    "tools",
                    format!("unknown tool `{unknown}`; available: {}", available.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn names(&self) -> String {
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

/// The 1-based line of top-level key `field`.
fn locate_top_level(yaml: &str, field: &str) -> Option<usize> {
    let key = format!("{field}:");
    yaml.lines().position(|l| l.starts_with(&key)).map(|n| n + 1)
}

/// An agent under another name (the built-in support agents call themselves `support`).
struct Named {
    name: String,
    inner: Arc<dyn Agent>,
}

impl Agent for Named {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        self.inner.run(request, instance)
    }
}

/// Renames `agent` to `name` unless it already has it.
pub(crate) fn named(name: &str, agent: Arc<dyn Agent>) -> Arc<dyn Agent> {
    if agent.name() == name { agent } else { Arc::new(Named { name: name.to_owned(), inner: agent }) }
}

/// The tools agents may list: the built-in ones (made on first use) and the ones given in code.
pub(crate) struct ToolCatalog {
    custom: Vec<Arc<dyn Tool>>,
    purchases: Arc<dyn crate::shopping::catalog::PurchaseHistory>,
    offers: OnceLock<Arc<Catalog>>,
    help: OnceLock<Arc<HelpCenter>>,
}

impl ToolCatalog {
    pub(crate) fn new(
        custom: Vec<Arc<dyn Tool>>,
        purchases: Arc<dyn crate::shopping::catalog::PurchaseHistory>,
    ) -> ToolCatalog {
        ToolCatalog { custom, purchases, offers: OnceLock::new(), help: OnceLock::new() }
    }

    /// Every tool name an agent may list.
    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = BUILTIN_TOOLS.to_vec();
        names.extend(self.custom.iter().map(|t| t.name()));
        names
    }

    /// The help center, shared with the offline support agent.
    pub(crate) fn help_center(&self) -> Arc<HelpCenter> {
        self.help.get_or_init(|| Arc::new(HelpCenter::embedded())).clone()
    }

    fn offers(&self) -> Arc<Catalog> {
        self.offers.get_or_init(|| Arc::new(Catalog::embedded())).clone()
    }

    /// The tool named `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.custom.iter().find(|t| t.name() == name) {
            return Some(tool.clone());
        }
        Some(match name {
            SEARCH_OFFERS => Arc::new(SearchOffers::new(self.offers())),
            GET_OFFER => Arc::new(GetOffer::new(self.offers())),
            PURCHASE_HISTORY => Arc::new(PurchaseHistoryTool::new(self.purchases.clone())),
            SEARCH_HELP_CENTER => Arc::new(SearchHelpCenter::new(self.help_center())),
            _ => return None,
        })
    }

    /// Checks that custom tools neither clash with built-in ones nor look like agent tools.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        for tool in &self.custom {
            let name = tool.name();
            if BUILTIN_TOOLS.contains(&name) || name.starts_with(AGENT_TOOL_PREFIX) {
                return Err(ConfigError::Invalid {
                    field: "tools",
                    reason: format!("the custom tool `{name}` clashes with a built-in or agent tool name"),
                });
            }
        }
        Ok(())
    }
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
    tools: [search_offers]
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
}
