//! One typed configuration, with defaults that run offline, and the runtime built from it.
//!
//! With no `OPENAI_API_KEY` and no `OPENAI_BASE_URL`, the orchestrator and the shopping agent use
//! the offline model (it says so at start-up and in `completed`). Setting either switches both to
//! an OpenAI-compatible server; each role's model name can be set on its own, and the shopping
//! agent can use the Responses API instead of Chat Completions.
//!
//! Support is the Forethought Solve API when a token is configured, and the offline help-center
//! agent otherwise.
//!
//! The agents (which one answers the user, and which call which as tools) come from the
//! `agents:` list of the same file: see [`crate::team`]. The reference file routes between a
//! support and a shopping agent; a team's own file declares its own agents.
//!
//! Per-episode vendor state (the Forethought conversation, the shopping agent's last response id)
//! and purchase history come from [`Backends`]: in-memory until a store is plugged in through
//! [`Config::build_with`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use crate::agent::{Agent, LlmAgent, LoopLimits, MemoryResponseChains, ResponseChains};
use crate::agent_tool::AgentTool;
use crate::model::ChatModel;
use crate::model::offline::OfflineModel;
use crate::model::openai::{OpenAiChatModel, OpenAiConfig, RetryPolicy, Timeouts};
use crate::model::responses::ResponsesModel;
use crate::mux::MuxConfig;
use crate::orchestrator::{ChildOptions, Orchestrator, TurnConfig};
use crate::remote::{AgentTransport, RemoteAgent};
use crate::shopping::catalog::{PurchaseHistory, SamplePurchases};
use crate::support::agent::ForethoughtAgent;
use crate::support::forethought::{ForethoughtClient, ForethoughtConfig};
use crate::support::help_center::HelpCenterAgent;
use crate::support::sessions::{Clock, MemorySupportSessions, SupportSessions, SystemClock};
use crate::team::{AgentKind, AgentSpec, AgentsConfig, ModelApi, ToolCatalog, named};
use crate::tool::{Tool, ToolRegistry};

/// The OpenAI base URL used when only an API key is given.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Where the models come from.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Base URL of an OpenAI-compatible server.
    pub base_url: Option<String>,
    /// API key.
    pub api_key: Option<String>,
    /// The default model: the orchestrator's, and every configured agent's that names none.
    pub orchestrator: String,
    /// Model of the agent named `shopping` when its configuration names none.
    pub shopping: String,
    /// Whether the agent named `shopping` uses the Responses API (with `previous_response_id`)
    /// whatever its configuration says.
    pub shopping_responses_api: bool,
    /// Timeouts of every model call.
    pub timeouts: Timeouts,
    /// Retries of every model call.
    pub retry: RetryPolicy,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: None,
            api_key: None,
            orchestrator: "gpt-4.1-mini".into(),
            shopping: "gpt-4.1-mini".into(),
            shopping_responses_api: false,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }
}

impl ModelConfig {
    /// Whether no model server is configured, so the offline model runs.
    pub fn is_offline(&self) -> bool {
        self.base_url.is_none() && self.api_key.is_none()
    }
}

/// Limits on what a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest message, in characters.
    pub max_message_chars: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits { max_body_bytes: 64 * 1024, max_message_chars: 4_000 }
    }
}

/// Everything Baton reads at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Models.
    pub models: ModelConfig,
    /// Turn settings (prompt, categories, merge pacing).
    pub turn: TurnConfig,
    /// Request limits.
    pub limits: RequestLimits,
    /// SSE heartbeat interval while nothing else is sent.
    pub heartbeat: Duration,
    /// Words that route a clause to support in the offline model.
    pub support_keywords: Vec<String>,
    /// Forethought settings; `None` runs the offline help-center agent as support.
    pub forethought: Option<ForethoughtConfig>,
    /// Bounds of the `shopping` agent's tool loop where its configuration sets none.
    pub shopping_limits: LoopLimits,
    /// The agents: which one answers the user, and which call which.
    pub agents: AgentsConfig,
}

/// Where agents keep per-episode state and read per-user data. [`Backends::in_memory`] until the
/// store implements these traits.
#[derive(Clone)]
pub struct Backends {
    /// The Forethought conversation and support turns per episode.
    pub support_sessions: Arc<dyn SupportSessions>,
    /// The shopping agent's last response id per episode.
    pub response_chains: Arc<dyn ResponseChains>,
    /// Purchase history for the shopping tools.
    pub purchases: Arc<dyn PurchaseHistory>,
    /// Time, for the Forethought continuity window.
    pub clock: Arc<dyn Clock>,
    /// Where the shopping agent runs when it is remote (a separately deployed function); `None`
    /// runs it in-process.
    pub remote_shopping: Option<Arc<dyn AgentTransport>>,
    /// A team's own tools, which configured agents list by name beside the built-in ones.
    pub tools: Vec<Arc<dyn Tool>>,
}

impl Backends {
    /// Process-memory state, the sample purchase history and the system clock.
    pub fn in_memory() -> Backends {
        Backends {
            support_sessions: Arc::new(MemorySupportSessions::default()),
            response_chains: Arc::new(MemoryResponseChains::default()),
            purchases: Arc::new(SamplePurchases::embedded()),
            clock: Arc::new(SystemClock),
            remote_shopping: None,
            tools: Vec::new(),
        }
    }

    /// State kept in `store`: vendor conversations and response ids on the episode, support
    /// turns from its history; the store's clock; the sample purchase history.
    pub fn over_store(store: Arc<dyn crate::store::Store>) -> Backends {
        let state = Arc::new(crate::store::backends::StoreBackends::new(store.clone()));
        Backends {
            support_sessions: state.clone(),
            response_chains: state,
            purchases: Arc::new(SamplePurchases::embedded()),
            clock: Arc::new(StoreClock(store)),
            remote_shopping: None,
            tools: Vec::new(),
        }
    }
}

/// The clock of a store, shared as an `Arc<dyn Clock>`.
#[derive(Clone)]
struct StoreClock(Arc<dyn crate::store::Store>);

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

impl Clock for StoreClock {
    fn now(&self) -> std::time::SystemTime {
        self.0.clock().now()
    }
}

/// The reference configuration, embedded: the defaults live in `config/baton.yaml` only.
pub const REFERENCE_CONFIG: &str = include_str!("../../../config/baton.yaml");

/// The parts of [`Config`] a YAML file sets. Every key is optional; a missing one keeps its
/// default, an unknown one is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    routing: Option<RoutingFile>,
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    max_depth: Option<u32>,
    #[serde(default)]
    agents: Option<Vec<AgentSpec>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutingFile {
    support_categories: Option<Vec<String>>,
    support_keywords: Option<Vec<String>>,
    orchestrator_prompt: Option<String>,
}

impl Default for Config {
    /// The reference configuration (`config/baton.yaml`), offline models.
    fn default() -> Self {
        static REFERENCE: OnceLock<Config> = OnceLock::new();
        REFERENCE
            .get_or_init(|| {
                let base = Config {
                    models: ModelConfig::default(),
                    turn: TurnConfig {
                        system_prompt: String::new(),
                        support_categories: Vec::new(),
                        mux: MuxConfig::default(),
                    },
                    limits: RequestLimits::default(),
                    heartbeat: Duration::from_secs(10),
                    support_keywords: Vec::new(),
                    forethought: None,
                    shopping_limits: LoopLimits::default(),
                    agents: AgentsConfig {
                        entry: String::new(),
                        max_depth: crate::agent_tool::DEFAULT_MAX_DEPTH,
                        agents: Vec::new(),
                        source: None,
                    },
                };
                base.with_yaml(REFERENCE_CONFIG, "config/baton.yaml")
                    .expect("the embedded reference config is valid")
            })
            .clone()
    }
}

/// Configuration problems found at start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is out of range or malformed.
    #[error("invalid configuration `{field}`: {reason}")]
    Invalid {
        /// Which setting.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A configuration file could not be read or parsed; the message names the line and field.
    #[error("configuration file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong, where.
        message: String,
    },
    /// A model client could not be built.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// An agent's tools could not be registered.
    #[error(transparent)]
    Tool(#[from] crate::tool::ToolError),
    /// The Forethought client could not be built.
    #[error(transparent)]
    Vendor(#[from] crate::support::forethought::VendorError),
}

impl Config {
    /// This configuration with the settings of a YAML document applied over it. `origin` names
    /// the document in errors.
    ///
    /// An `agents:` list replaces the agents as a whole (and `entry`, when not given, becomes the
    /// first of them); `entry` and `max_depth` alone change only themselves.
    pub fn with_yaml(mut self, yaml: &str, origin: &str) -> Result<Config, ConfigError> {
        let file_error = |message: String| ConfigError::File { path: origin.to_owned(), message };
        let file: ConfigFile = if yaml.trim().is_empty() {
            ConfigFile::default()
        } else {
            serde_yaml_ng::from_str(yaml).map_err(|e| file_error(e.to_string()))?
        };
        if let Some(routing) = file.routing {
            if let Some(categories) = routing.support_categories {
                self.turn.support_categories = categories;
            }
            if let Some(keywords) = routing.support_keywords {
                self.support_keywords = keywords.into_iter().map(|k| k.trim().to_lowercase()).collect();
            }
            if let Some(prompt) = routing.orchestrator_prompt {
                self.turn.system_prompt = prompt;
            }
        }
        self.validate_routing().map_err(|e| file_error(e.to_string()))?;
        if let Some(agents) = file.agents {
            self.agents.entry = agents.first().map(|a| a.name.clone()).unwrap_or_default();
            self.agents.agents = agents;
            self.agents.source = Some((origin.to_owned(), Arc::from(yaml)));
        }
        if let Some(entry) = file.entry {
            self.agents.entry = entry;
        }
        if let Some(depth) = file.max_depth {
            self.agents.max_depth = depth;
        }
        self.agents.validate()?;
        Ok(self)
    }

    /// The defaults with the YAML file at `path` applied.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let yaml = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.display().to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::default().with_yaml(&yaml, &path.display().to_string())
    }

    fn validate_routing(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: String| Err(ConfigError::Invalid { field, reason });
        if self.turn.support_categories.is_empty() {
            return invalid("routing.support_categories", "must list at least one category".into());
        }
        if let Some(bad) = self.turn.support_categories.iter().find(|c| {
            c.is_empty() || !c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        }) {
            return invalid("routing.support_categories", format!("`{bad}` must be snake_case"));
        }
        if self.support_keywords.is_empty() || self.support_keywords.iter().any(String::is_empty) {
            return invalid("routing.support_keywords", "must list non-empty keywords".into());
        }
        if self.turn.system_prompt.trim().is_empty() {
            return invalid("routing.orchestrator_prompt", "must not be empty".into());
        }
        Ok(())
    }

    /// Checks values that would only fail later.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| Err(ConfigError::Invalid { field, reason: reason.to_owned() });
        if let Some(url) = &self.models.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return invalid("OPENAI_BASE_URL", "must start with http:// or https://");
            }
        }
        if self.limits.max_body_bytes == 0 || self.limits.max_message_chars == 0 {
            return invalid("limits", "request limits must be above zero");
        }
        if self.heartbeat.is_zero() {
            return invalid("heartbeat", "must be above zero");
        }
        if let Some(ft) = &self.forethought {
            if !(ft.base_url.starts_with("http://") || ft.base_url.starts_with("https://")) {
                return invalid("FORETHOUGHT_BASE_URL", "must start with http:// or https://");
            }
            if ft.token.trim().is_empty() {
                return invalid("FORETHOUGHT_API_TOKEN", "is empty");
            }
        }
        if self.shopping_limits.max_steps == 0 || self.shopping_limits.tool_timeout.is_zero() {
            return invalid("shopping limits", "max steps and tool timeout must be above zero");
        }
        self.validate_routing()?;
        self.agents.validate()
    }

    /// Builds the orchestrator and its sub-agents on in-memory [`Backends`].
    pub fn build(&self) -> Result<Arc<Orchestrator>, ConfigError> {
        self.build_with(Backends::in_memory())
    }

    /// Builds the entry agent and every agent below it, into the orchestrator that runs turns:
    /// clients are made once, here.
    pub fn build_with(&self, backends: Backends) -> Result<Arc<Orchestrator>, ConfigError> {
        self.validate()?;
        let models = ModelFactory::new(self)?;
        let mut graph = Graph::new(self, &models, &backends)?;
        let entry = self.agents.get(&self.agents.entry).expect("validated");
        let orchestrator = if entry.kind == AgentKind::Router {
            let mut child = |name: &str| -> Result<(Arc<dyn Agent>, ChildOptions), ConfigError> {
                let spec = self.agents.get(name).expect("validated");
                Ok((
                    graph.build(name)?,
                    ChildOptions { timeout: spec.timeout_seconds.map(Duration::from_secs_f64) },
                ))
            };
            let (support, support_options) = child("support")?;
            let (shopping, shopping_options) = child("shopping")?;
            let model = entry.model.as_deref().unwrap_or(&self.models.orchestrator);
            Orchestrator::new(models.chat(model), support, shopping, self.turn.clone())
                .with_child_options(support_options, shopping_options)
        } else {
            let agent = graph.build(&entry.name)?;
            Orchestrator::for_agent(agent, models.for_agent(entry).model_name().to_owned())
        };
        Ok(Arc::new(orchestrator))
    }

    /// The in-process shopping agent: what the orchestrator runs unless shopping is remote, and
    /// what the shopping function serves.
    pub fn build_shopping(&self, backends: &Backends) -> Result<Arc<dyn Agent>, ConfigError> {
        let mut local = backends.clone();
        local.remote_shopping = None;
        self.build_agent("shopping", &local)
    }

    /// The configured agent `name`, with every agent below it (to serve it on its own).
    pub fn build_agent(&self, name: &str, backends: &Backends) -> Result<Arc<dyn Agent>, ConfigError> {
        self.validate()?;
        if self.agents.get(name).is_none_or(|a| a.kind == AgentKind::Router) {
            return Err(ConfigError::Invalid {
                field: "agents",
                reason: format!("no agent named `{name}` can be served on its own"),
            });
        }
        let models = ModelFactory::new(self)?;
        Graph::new(self, &models, backends)?.build(name)
    }

    /// A one-line description of the models in use, for start-up logs.
    pub fn describe_models(&self) -> String {
        if self.models.is_offline() {
            "model: offline (deterministic rules; set OPENAI_API_KEY or OPENAI_BASE_URL for a real model)"
                .to_owned()
                + &self.describe_agents()
        } else {
            format!(
                "model: {} at {} (orchestrator {}, shopping {} via {})",
                if self.models.api_key.is_some() {
                    "OpenAI-compatible, with key"
                } else {
                    "OpenAI-compatible, no key"
                },
                self.models.base_url.as_deref().unwrap_or(OPENAI_DEFAULT_BASE_URL),
                self.models.orchestrator,
                self.models.shopping,
                if self.models.shopping_responses_api { "the Responses API" } else { "Chat Completions" },
            ) + &self.describe_agents()
        }
    }

    /// The configured agents in one line: `; agents: lead → [a, b]`, empty for the reference
    /// routed turn.
    fn describe_agents(&self) -> String {
        let Some(entry) = self.agents.get(&self.agents.entry) else { return String::new() };
        if entry.kind == AgentKind::Router {
            return String::new();
        }
        let described: Vec<String> = self
            .agents
            .agents
            .iter()
            .map(|a| {
                if a.agents.is_empty() {
                    a.name.clone()
                } else {
                    format!("{} → [{}]", a.name, a.agents.join(", "))
                }
            })
            .collect();
        format!("; agents: {} (entry {})", described.join("; "), entry.name)
    }

    /// A one-line description of the support agent, for start-up logs.
    pub fn describe_support(&self) -> String {
        match &self.forethought {
            Some(ft) => format!("support: Forethought Solve API at {} (channel {})", ft.base_url, ft.channel),
            None => {
                "support: offline help center (shipped articles; set FORETHOUGHT_API_TOKEN for Forethought)"
                    .into()
            }
        }
    }
}

/// A remote agent's answer may pause this long between chunks (a slow tool call) before the call
/// is given up.
pub const REMOTE_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Builds model clients on one shared HTTP client, or the offline model when none is configured.
struct ModelFactory<'a> {
    config: &'a Config,
    http: Option<reqwest::Client>,
}

impl<'a> ModelFactory<'a> {
    fn new(config: &'a Config) -> Result<ModelFactory<'a>, ConfigError> {
        let models = &config.models;
        // One HTTP client (one connection pool, one TLS setup) for every model.
        let http =
            if models.is_offline() { None } else { Some(OpenAiChatModel::http_client(&models.timeouts)?) };
        Ok(ModelFactory { config, http })
    }

    fn openai_config(&self, name: &str) -> OpenAiConfig {
        let models = &self.config.models;
        let base_url = models.base_url.clone().unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.into());
        let mut config = OpenAiConfig::new(base_url, name);
        config.api_key = models.api_key.clone();
        config.timeouts = models.timeouts;
        config.retry = models.retry;
        config
    }

    /// A Chat Completions model (or the offline model).
    fn chat(&self, name: &str) -> Arc<dyn ChatModel> {
        match &self.http {
            None => Arc::new(OfflineModel::new(self.config.support_keywords.clone())),
            Some(http) => Arc::new(OpenAiChatModel::with_client(http.clone(), self.openai_config(name))),
        }
    }

    /// The model of a configured agent: its own name and API, or the defaults (see
    /// [`crate::team`]).
    fn for_agent(&self, spec: &AgentSpec) -> Arc<dyn ChatModel> {
        let models = &self.config.models;
        let is_shopping = spec.name == "shopping";
        let default = if is_shopping { &models.shopping } else { &models.orchestrator };
        let name = spec.model.as_deref().unwrap_or(default);
        let api = if is_shopping && models.shopping_responses_api {
            ModelApi::Responses
        } else {
            spec.api.unwrap_or_default()
        };
        match (&self.http, api) {
            (Some(http), ModelApi::Responses) => {
                Arc::new(ResponsesModel::with_client(http.clone(), self.openai_config(name)))
            }
            _ => self.chat(name),
        }
    }
}

/// Builds configured agents by name, each once, children first.
struct Graph<'a> {
    config: &'a Config,
    models: &'a ModelFactory<'a>,
    backends: &'a Backends,
    tools: ToolCatalog,
    /// The children of a router entry: they see the conversation and keep the vendor's
    /// server-side context per episode.
    routed: HashSet<String>,
    built: HashMap<String, Arc<dyn Agent>>,
}

impl<'a> Graph<'a> {
    fn new(
        config: &'a Config,
        models: &'a ModelFactory<'a>,
        backends: &'a Backends,
    ) -> Result<Graph<'a>, ConfigError> {
        let tools = ToolCatalog::new(backends.tools.clone(), backends.purchases.clone());
        tools.check()?;
        config.agents.validate_tools(&tools.names())?;
        let routed = match config.agents.get(&config.agents.entry) {
            Some(entry) if entry.kind == AgentKind::Router => entry.agents.iter().cloned().collect(),
            _ => HashSet::new(),
        };
        Ok(Graph { config, models, backends, tools, routed, built: HashMap::new() })
    }

    /// The agent named `name`, with every agent below it.
    fn build(&mut self, name: &str) -> Result<Arc<dyn Agent>, ConfigError> {
        if let Some(agent) = self.built.get(name) {
            return Ok(agent.clone());
        }
        let agents = &self.config.agents;
        let index = agents.index_of(name).expect("validated");
        let spec = &agents.agents[index];
        let agent: Arc<dyn Agent> = match spec.kind {
            AgentKind::Support => named(
                &spec.name,
                match &self.config.forethought {
                    Some(ft) => Arc::new(ForethoughtAgent::new(
                        ForethoughtClient::new(ft.clone())?,
                        self.backends.support_sessions.clone(),
                        self.backends.clock.clone(),
                    )),
                    None => Arc::new(HelpCenterAgent::new(self.tools.help_center())),
                },
            ),
            AgentKind::Router => unreachable!("a router is never built as an agent (validated)"),
            AgentKind::Llm => match (&self.backends.remote_shopping, spec.name.as_str()) {
                (Some(transport), "shopping") => {
                    Arc::new(RemoteAgent::new("shopping", transport.clone(), REMOTE_IDLE_TIMEOUT))
                }
                _ => {
                    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
                    for tool in &spec.tools {
                        tools.push(self.tools.tool(tool).expect("validated"));
                    }
                    for child in &spec.agents {
                        let child_agent = self.build(child)?;
                        let options = agents.tool_options(agents.get(child).expect("validated"));
                        let tool = AgentTool::new(child_agent, options)
                            .map_err(|e| agents.error(Some(index), "agents", e))?;
                        tools.push(Arc::new(tool));
                    }
                    let registry =
                        ToolRegistry::new(tools).map_err(|e| agents.error(Some(index), "tools", e))?;
                    let fallback = if spec.name == "shopping" {
                        self.config.shopping_limits
                    } else {
                        LoopLimits::default()
                    };
                    let limits = LoopLimits {
                        max_steps: spec.max_steps.unwrap_or(fallback.max_steps),
                        tool_timeout: spec
                            .tool_timeout_seconds
                            .map_or(fallback.tool_timeout, Duration::from_secs_f64),
                    };
                    let agent = LlmAgent::new(
                        spec.name.clone(),
                        spec.instruction.clone(),
                        self.models.for_agent(spec),
                        Arc::new(registry),
                        limits,
                    )
                    .with_mux(self.config.turn.mux);
                    if self.routed.contains(&spec.name) {
                        Arc::new(agent.with_response_chains(self.backends.response_chains.clone()))
                    } else {
                        Arc::new(agent)
                    }
                }
            },
        };
        self.built.insert(name.to_owned(), agent.clone());
        Ok(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_offline_and_valid() {
        let c = Config::default();
        assert!(c.models.is_offline());
        c.validate().unwrap();
        assert_eq!(c.build().unwrap().model_name(), "offline");
        assert!(c.describe_models().contains("offline"));
    }

    #[test]
    fn a_bad_base_url_is_named_in_the_error() {
        let mut c = Config::default();
        c.models.base_url = Some("localhost:8080".into());
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("OPENAI_BASE_URL"), "{err}");
    }

    #[test]
    fn the_reference_file_sets_the_taxonomy() {
        let c = Config::default();
        assert!(c.turn.support_categories.contains(&"point_pass".to_owned()));
        assert!(c.support_keywords.contains(&"receipt".to_owned()));
        assert!(c.turn.system_prompt.starts_with("<role>"));
    }

    #[test]
    fn a_file_overrides_only_what_it_names() {
        let c = Config::default()
            .with_yaml("routing:\n  support_categories: [billing, general]\n", "team.yaml")
            .unwrap();
        assert_eq!(c.turn.support_categories, ["billing", "general"]);
        assert_eq!(c.support_keywords, Config::default().support_keywords);
    }

    #[test]
    fn file_errors_name_the_file_line_and_field() {
        let err = Config::default().with_yaml("routing:\n  support_kewords: [a]\n", "team.yaml").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("team.yaml") && msg.contains("support_kewords") && msg.contains("line 2"),
            "{msg}"
        );
        let err = Config::default().with_yaml("routing:\n  support_categories: 3\n", "t.yaml").unwrap_err();
        assert!(err.to_string().contains("support_categories"), "{err}");
        let err = Config::default()
            .with_yaml("routing:\n  support_categories: [Missing Points]\n", "t.yaml")
            .unwrap_err();
        assert!(err.to_string().contains("snake_case"), "{err}");
    }

    const TEAM: &str = "\
entry: lead
max_depth: 2
agents:
  - name: lead
    instruction: Lead the team.
    agents: [researcher, writer]
  - name: researcher
    description: Finds facts.
    instruction: Research.
    tools: [search_help_center]
    output: text_and_events
    skip_summarization: true
    timeout_seconds: 20
  - name: writer
    instruction: Write.
    input_schema:
      type: object
      properties:
        topic: {type: string}
      required: [topic]
    output_schema: {type: object}
";

    fn team_error(yaml: &str) -> String {
        let config = Config::default().with_yaml(yaml, "team.yaml");
        match config {
            Err(e) => e.to_string(),
            Ok(c) => c.build().err().map(|e| e.to_string()).expect("the team should be refused"),
        }
    }

    #[test]
    fn the_reference_agents_are_a_router_over_support_and_shopping() {
        let c = Config::default();
        assert_eq!(c.agents.entry, "orchestrator");
        let router = c.agents.get("orchestrator").unwrap();
        assert_eq!(router.kind, AgentKind::Router);
        assert_eq!(router.agents, ["support", "shopping"]);
        assert_eq!(c.agents.get("support").unwrap().kind, AgentKind::Support);
        let shopping = c.agents.get("shopping").unwrap();
        assert_eq!(shopping.tools, ["search_offers", "get_offer", "purchase_history"]);
        assert!(shopping.instruction.contains("shopping agent"));
        assert!(c.build().unwrap().router().is_some());
    }

    #[test]
    fn a_team_file_replaces_the_agents_and_builds_its_entry_agent() {
        let c = Config::default().with_yaml(TEAM, "team.yaml").unwrap();
        assert_eq!((c.agents.entry.as_str(), c.agents.max_depth, c.agents.agents.len()), ("lead", 2, 3));
        let researcher = c.agents.get("researcher").unwrap();
        let options = c.agents.tool_options(researcher);
        assert!(options.skip_summarization);
        assert_eq!(options.output, crate::agent_tool::OutputMode::TextAndEvents);
        assert_eq!(options.timeout, Some(Duration::from_secs(20)));
        assert_eq!(options.max_depth, 2);
        let writer = c.agents.tool_options(c.agents.get("writer").unwrap());
        assert_eq!(writer.output, crate::agent_tool::OutputMode::Events, "the default");
        assert!(writer.input_schema.is_some() && writer.output_schema.is_some());
        let built = c.build().unwrap();
        assert!(built.router().is_none());
        assert_eq!(built.model_name(), "offline");
        assert!(c.describe_models().contains("lead → [researcher, writer]"), "{}", c.describe_models());
    }

    #[test]
    fn the_readme_team_example_is_valid() {
        let c = Config::default()
            .with_yaml(include_str!("../../../examples/team.yaml"), "examples/team.yaml")
            .unwrap();
        assert_eq!(c.agents.agents.len(), 3);
        c.build().unwrap();
    }

    #[test]
    fn team_errors_name_the_line_and_the_field() {
        let cases = [
            (
                TEAM.replace("[search_help_center]", "[serch_help_center]"),
                "line 10: agents[1] (`researcher`).tools: unknown tool `serch_help_center`",
            ),
            (
                TEAM.replace("[researcher, writer]", "[researcher, editor]"),
                "line 6: agents[0] (`lead`).agents: unknown agent `editor`",
            ),
            (
                TEAM.replace("timeout_seconds: 20", "timeout_seconds: 0"),
                "line 13: agents[1] (`researcher`).timeout_seconds",
            ),
            (TEAM.replace("{type: string}", "{type: strung}"), "line 16: agents[2] (`writer`).input_schema"),
            (
                TEAM.replace(
                    "output_schema: {type: object}",
                    "output_schema: {type: object}\n    agents: [lead]",
                ),
                "agents call each other in a circle: lead → writer → lead",
            ),
            (TEAM.replace("entry: lead", "entry: boss"), "line 1: entry: unknown agent `boss`"),
            (TEAM.replace("max_depth: 2", "max_depth: 0"), "line 2: max_depth"),
            (
                TEAM.replace("    instruction: Write.\n", ""),
                "agents[2] (`writer`).instruction: an `llm` agent needs an instruction",
            ),
            (
                TEAM.replace("  - name: writer", "  - name: researcher"),
                "line 14: agents[2] (`researcher`).name: `researcher` is defined twice",
            ),
            (TEAM.replace("output: text_and_events", "output: loud"), "unknown variant `loud`"),
            (TEAM.replace("skip_summarization", "skip_summary"), "unknown field `skip_summary`"),
            (
                TEAM.replace("instruction: Lead the team.", "kind: router"),
                "a `router` routes to exactly [support, shopping]",
            ),
            (TEAM.replace("name: writer", "name: write me"), "line 14: agents[2] (`write me`).name"),
        ];
        for (yaml, expected) in cases {
            let message = team_error(&yaml);
            assert!(
                message.contains("team.yaml") && message.contains(expected),
                "expected {expected:?} in {message:?}"
            );
        }
        // serde's own errors carry the line too.
        let message = team_error(&TEAM.replace("skip_summarization", "skip_summary"));
        assert!(message.contains("line 12"), "{message}");
    }
}
