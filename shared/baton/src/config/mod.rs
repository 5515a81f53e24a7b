//! One typed configuration, with defaults that run offline: parsing and validation of the YAML
//! file, the environment and the flags. It builds nothing: the `wiring` module builds the runtime
//! from it.
//!
//! With no `OPENAI_API_KEY` and no `OPENAI_BASE_URL`, every agent uses the offline model (it says
//! so at start-up and in `completed`). Setting either switches them to an OpenAI-compatible
//! server; each agent's model name and API can be set in its entry.
//!
//! The agents (which one answers the user, and which call which as tools) come from the
//! `agents:` list of the same file: see [`agents`]. With no file, one `assistant` agent answers
//! with no tools (`GENERIC_CONFIG`); a deployment embeds its own file as its defaults and a
//! team's own file declares its own agents. Agent kinds and tools beyond the runtime's come from
//! the deployment's extensions (`wiring::Extension`); their settings are theirs, not here.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use crate::model::openai::{RetryPolicy, Timeouts};
use crate::model::script::ModelScript;
use crate::mux::MuxConfig;
use crate::telemetry::cost::Prices;
pub mod agents;
pub mod tools;

use self::agents::{AgentKind, AgentSpec, AgentsConfig, ModelApi, RemoteSpec};

/// The OpenAI base URL used when only an API key is given.
pub(crate) const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Where the models come from.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Base URL of an OpenAI-compatible server.
    pub base_url: Option<String>,
    /// API key.
    pub api_key: Option<String>,
    /// The default model: every configured agent's that names none.
    pub orchestrator: String,
    /// Timeouts of every model call.
    pub timeouts: Timeouts,
    /// Retries of every model call.
    pub retry: RetryPolicy,
    /// Speak HTTP/2 to a cleartext (`http://`) model server from the first byte (h2c with prior
    /// knowledge), so a turn's concurrent calls share one connection. Over `https` HTTP/2 is
    /// negotiated whenever the server offers it, with or without this.
    pub http2: bool,
    /// A model script that answers every agent instead of a model server (`model: {script: F}`
    /// or `--model-script F`; see [`crate::model::script`]).
    pub script: Option<Arc<ModelScript>>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: None,
            api_key: None,
            orchestrator: "gpt-4.1-mini".into(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            http2: false,
            script: None,
        }
    }
}

impl ModelConfig {
    /// Whether no model server is configured and no script, so the offline model runs.
    pub fn is_offline(&self) -> bool {
        self.base_url.is_none() && self.api_key.is_none() && self.script.is_none()
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
    /// How concurrent agents' text is merged.
    pub mux: MuxConfig,
    /// Request limits.
    pub limits: RequestLimits,
    /// SSE heartbeat interval while nothing else is sent.
    pub heartbeat: Duration,
    /// The offline model's routing: words that send a clause to an agent (lowercase; a phrase
    /// may have spaces), per agent name, in the file's order (see [`crate::model::offline`]).
    pub offline_keywords: KeywordLists,
    /// The agents: which one answers the user, and which call which.
    pub agents: AgentsConfig,
    /// MCP servers whose tools agents list as `server.*` or `server.tool` (see `docs/mcp.md`).
    pub mcp_servers: crate::mcp::config::McpServers,
    /// The file the MCP servers were read from, and its text: errors found once the servers
    /// listed their tools name its line ([`Config::locate`]).
    mcp_source: Option<(String, Arc<str>)>,
    /// Tools declared by source: OpenAPI documents and Lambda functions (`docs/tools.md`).
    pub tool_sources: tools::ToolSources,
    /// Prices per model, for the `cost_usd` of usage (see `docs/observability.md`).
    pub prices: Prices,
    /// The deployment this configuration is, or extends (`extends:`), when it has a name (the
    /// reference deployment's is `reference`): its own parts (tools, agent kinds, settings) are
    /// plugged in only then. `None` for the runtime's defaults and a file that extends nothing.
    pub deployment: Option<String>,
}

/// The runtime's own defaults (`config/defaults.yaml` in this crate): one agent with no tools,
/// and OpenAI's list prices of the default models. Every configuration is applied over them.
pub(crate) const GENERIC_CONFIG: &str = include_str!("defaults.yaml");

/// The parts of [`Config`] a YAML file sets. Every key is optional; a missing one keeps its
/// default, an unknown one is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// The named deployment the file is applied over ([`Config::from_yaml`]).
    #[serde(default)]
    extends: Option<String>,
    #[serde(default)]
    offline_model: Option<OfflineModelFile>,
    #[serde(default)]
    mcp_servers: Option<crate::mcp::config::McpServers>,
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    max_depth: Option<u32>,
    #[serde(default)]
    agents: Option<Vec<AgentSpec>>,
    #[serde(default)]
    prices: Option<Prices>,
    #[serde(default)]
    a2a: Option<A2aFile>,
    #[serde(default)]
    openapi: Option<std::collections::BTreeMap<String, tools::OpenApiSource>>,
    #[serde(default)]
    lambda_tools: Option<std::collections::BTreeMap<String, tools::LambdaToolSpec>>,
    #[serde(default)]
    model: Option<ModelFile>,
    /// `mcp: {agents: [...]}`: the agents `orchestrator mcp` serves (docs/mcp.md).
    #[serde(default)]
    mcp: Option<A2aFile>,
}

/// The top-level `model:` key: a model script, its path relative to the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    script: std::path::PathBuf,
}

/// The top-level `a2a:` key: the agents served as A2A agents besides the entry agent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct A2aFile {
    #[serde(default)]
    agents: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OfflineModelFile {
    #[serde(default, deserialize_with = "ordered_lists")]
    keywords: Option<KeywordLists>,
}

/// Word lists by agent name, in the file's order.
pub(crate) type KeywordLists = Vec<(String, Vec<String>)>;

/// A map of lists (`agent: [words]`) in the file's order.
fn ordered_lists<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<KeywordLists>, D::Error> {
    struct Lists;
    impl<'de> serde::de::Visitor<'de> for Lists {
        type Value = KeywordLists;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of agent names to lists of words")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut lists = Vec::new();
            while let Some(entry) = map.next_entry()? {
                lists.push(entry);
            }
            Ok(lists)
        }
    }
    deserializer.deserialize_map(Lists).map(Some)
}

/// `message`, with the line of `path` in `yaml` before it when it is found.
fn at_line(yaml: &str, path: &str, message: String) -> String {
    match locate_path(yaml, path) {
        Some(line) => format!("line {line}: {message}"),
        None => message,
    }
}

/// The 1-based line of a dotted path of block-style YAML keys (`mcp_servers.github.url`): each
/// key searched for below the previous one; the deepest key found.
fn locate_path(yaml: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = yaml.lines().collect();
    let (mut from, mut found) = (0, None);
    for key in path.split('.') {
        let key = key.split('[').next().unwrap_or(key);
        let at = lines.iter().enumerate().skip(from).find(|(_, l)| {
            let body = l.trim_start().trim_start_matches("- ");
            body.starts_with(&format!("{key}:"))
        });
        match at {
            Some((n, _)) => {
                found = Some(n + 1);
                from = n + 1;
            }
            None => break,
        }
    }
    found
}

/// Settings the command line or the environment give one agent where its entry sets none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentDefaults {
    /// Its model's name.
    pub model: Option<String>,
    /// Use the Responses API whatever the entry says.
    pub responses_api: bool,
    /// Model calls per answer.
    pub max_steps: Option<usize>,
    /// Longest one tool call may take.
    pub tool_timeout: Option<Duration>,
    /// Where it runs remotely.
    pub remote: Option<RemoteSpec>,
}

impl Default for Config {
    /// The runtime's own defaults (`GENERIC_CONFIG`), offline models.
    fn default() -> Self {
        static GENERIC: OnceLock<Config> = OnceLock::new();
        GENERIC
            .get_or_init(|| {
                let base = Config {
                    models: ModelConfig::default(),
                    mux: MuxConfig::default(),
                    limits: RequestLimits::default(),
                    heartbeat: Duration::from_secs(10),
                    offline_keywords: Vec::new(),
                    mcp_servers: Default::default(),
                    mcp_source: None,
                    tool_sources: Default::default(),
                    prices: Prices::default(),
                    deployment: None,
                    agents: AgentsConfig {
                        entry: String::new(),
                        max_depth: crate::agent::DEFAULT_MAX_DEPTH,
                        agents: Vec::new(),
                        source: None,
                        a2a_served: Vec::new(),
                        mcp_served: None,
                    },
                };
                base.with_yaml(GENERIC_CONFIG, "the runtime's defaults")
                    .expect("the runtime's defaults are valid")
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
    /// An extension could not build what an agent entry asks of it (a vendor client).
    #[error("{what}: {reason}")]
    Extension {
        /// What was being built.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

/// The `extends:` of a YAML document, read on its own (the rest is checked when it is applied):
/// the named deployment it is applied over, if any.
pub fn extends_of(yaml: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Extends {
        #[serde(default)]
        extends: Option<String>,
    }
    serde_yaml_ng::from_str::<Extends>(yaml).ok().and_then(|e| e.extends)
}

impl Config {
    /// This configuration under the name of the deployment it is (`extends: <name>` in a file
    /// applies the file over it).
    pub fn named(mut self, deployment: &str) -> Config {
        self.deployment = Some(deployment.to_owned());
        self
    }

    /// The configuration of a team's YAML document: applied over the runtime's defaults, or over
    /// the one of `deployments` it names with `extends: <name>` (an unknown name is an error
    /// naming the line and the known ones). `origin` names the document in errors.
    pub fn from_yaml(yaml: &str, origin: &str, deployments: &[&Config]) -> Result<Config, ConfigError> {
        let Some(name) = extends_of(yaml) else { return Config::default().with_yaml(yaml, origin) };
        match deployments.iter().find(|d| d.deployment.as_deref() == Some(name.as_str())) {
            Some(base) => (*base).clone().with_yaml(yaml, origin),
            None => {
                let known: Vec<&str> = deployments.iter().filter_map(|d| d.deployment.as_deref()).collect();
                let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                let line = locate_path(yaml, "extends").map(|l| format!("line {l}: ")).unwrap_or_default();
                Err(ConfigError::File {
                    path: origin.to_owned(),
                    message: format!("{line}extends: unknown deployment `{name}`; known: {known}"),
                })
            }
        }
    }

    /// [`Config::from_yaml`] of the file at `path`.
    pub fn from_file(path: &std::path::Path, deployments: &[&Config]) -> Result<Config, ConfigError> {
        let yaml = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.display().to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::from_yaml(&yaml, &path.display().to_string(), deployments)
    }

    /// This configuration with the settings of a YAML document applied over it. `origin` names
    /// the document in errors. A document's `extends:` must name this configuration's deployment
    /// (choosing the base by it is [`Config::from_yaml`]'s).
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
        if let Some(name) = &file.extends {
            if self.deployment.as_ref() != Some(name) {
                let line = locate_path(yaml, "extends").map(|l| format!("line {l}: ")).unwrap_or_default();
                let under = self
                    .deployment
                    .as_deref()
                    .map_or("the runtime's defaults".to_owned(), |d| format!("`{d}`"));
                return Err(file_error(format!("{line}extends: `{name}`, but it is applied over {under}")));
            }
        }
        let keywords = file.offline_model.and_then(|o| o.keywords);
        if file.mcp_servers.is_some()
            || file.agents.as_ref().is_some_and(|a| a.iter().any(|a| !a.mcp_servers.is_empty()))
        {
            self.mcp_source = Some((origin.to_owned(), Arc::from(yaml)));
        }
        if let Some(agents) = file.agents {
            self.agents.entry = agents.first().map(|a| a.name.clone()).unwrap_or_default();
            self.agents.agents = agents;
            self.agents.source = Some((origin.to_owned(), Arc::from(yaml)));
            // The agents served over A2A and MCP were the replaced list's: the new list serves
            // its entry agent unless this file says otherwise.
            self.agents.a2a_served.clear();
            self.agents.mcp_served = None;
        }
        if let Some(entry) = file.entry {
            self.agents.entry = entry;
        }
        if let Some(a2a) = file.a2a {
            self.agents.a2a_served = a2a.agents;
        }
        if let Some(mcp) = file.mcp {
            self.agents.mcp_served = Some(mcp.agents);
        }
        self.apply_keywords(keywords);
        if let Some(servers) = file.mcp_servers {
            crate::mcp::config::validate(&servers)
                .map_err(|e| file_error(at_line(yaml, &e.path, e.to_string())))?;
            self.mcp_servers = servers;
        }
        if file.openapi.is_some() || file.lambda_tools.is_some() {
            let sources = tools::ToolSources {
                openapi: file.openapi.unwrap_or_else(|| std::mem::take(&mut self.tool_sources.openapi)),
                lambda: file.lambda_tools.unwrap_or_else(|| std::mem::take(&mut self.tool_sources.lambda)),
            };
            let folder = std::path::Path::new(origin).parent().filter(|p| p.is_dir());
            self.tool_sources =
                sources.checked(folder).map_err(|e| file_error(at_line(yaml, &e.path, e.to_string())))?;
        }
        if let Some(prices) = file.prices {
            prices.validate().map_err(|message| file_error(at_line(yaml, "prices.as_of", message)))?;
            self.prices = std::mem::take(&mut self.prices).merged(prices);
        }
        if let Some(depth) = file.max_depth {
            self.agents.max_depth = depth;
        }
        if let Some(model) = file.model {
            let dir = std::path::Path::new(origin).parent().unwrap_or(std::path::Path::new(""));
            self = self.with_model_script(&dir.join(model.script)).map_err(|e| match e {
                ConfigError::Invalid { reason, .. } => {
                    file_error(at_line(yaml, "model.script", format!("model.script: {reason}")))
                }
                e => e,
            })?;
        }
        self.agents.validate()?;
        self.agents.validate_mcp_tools(&self.mcp_servers)?;
        self.validate_keywords()
            .map_err(|e| file_error(at_line(yaml, "offline_model.keywords", e.to_string())))?;
        Ok(self)
    }

    /// The offline model's keyword lists a document gives; without any, a new `agents:` list
    /// keeps the earlier lists only for agents it still defines.
    fn apply_keywords(&mut self, keywords: Option<KeywordLists>) {
        match keywords {
            Some(lists) => {
                self.offline_keywords = lists
                    .into_iter()
                    .map(|(agent, words)| {
                        (agent, words.into_iter().map(|k| k.trim().to_lowercase()).collect())
                    })
                    .collect();
            }
            None => {
                let agents = &self.agents;
                self.offline_keywords.retain(|(agent, _)| agents.get(agent).is_some());
            }
        }
    }

    /// This configuration with the YAML file at `path` applied over it.
    pub fn with_file(self, path: &std::path::Path) -> Result<Config, ConfigError> {
        let yaml = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.display().to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        self.with_yaml(&yaml, &path.display().to_string())
    }

    /// This configuration with every agent answered by the model script at `path`.
    pub fn with_model_script(mut self, path: &std::path::Path) -> Result<Config, ConfigError> {
        let script = ModelScript::load(path)
            .map_err(|reason| ConfigError::Invalid { field: "model.script", reason })?;
        self.models.script = Some(Arc::new(script));
        Ok(self)
    }

    /// Every keyword list names an agent and lists non-empty words.
    fn validate_keywords(&self) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid { field: "offline_model.keywords", reason };
        for (agent, words) in &self.offline_keywords {
            if self.agents.get(agent).is_none() {
                return Err(invalid(format!("unknown agent `{agent}`; defined: {}", self.agents.names())));
            }
            if words.is_empty() || words.iter().any(String::is_empty) {
                return Err(invalid(format!("`{agent}` must list non-empty keywords")));
            }
        }
        Ok(())
    }

    /// Gives agent `name` the settings of `defaults` that its entry does not set itself; no
    /// effect when there is no such agent.
    pub fn apply_agent_defaults(&mut self, name: &str, defaults: AgentDefaults) {
        let Some(spec) = self.agents.agents.iter_mut().find(|a| a.name == name) else { return };
        if spec.model.is_none() {
            spec.model = defaults.model;
        }
        if defaults.responses_api {
            spec.api = Some(ModelApi::Responses);
        }
        if spec.max_steps.is_none() {
            spec.max_steps = defaults.max_steps;
        }
        if spec.tool_timeout_seconds.is_none() {
            spec.tool_timeout_seconds = defaults.tool_timeout.map(|t| t.as_secs_f64());
        }
        if spec.remote.is_none() {
            spec.remote = defaults.remote;
        }
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
        self.agents.validate()?;
        if let Some(script) = &self.models.script {
            script
                .check_agents(|agent| self.agents.get(agent).is_some(), &self.agents.names())
                .map_err(|reason| ConfigError::Invalid { field: "model.script", reason })?;
        }
        self.validate_keywords()
    }

    /// A dotted field path of the MCP settings (`mcp_servers.fs.tools[1]`) with the file and the
    /// line it is written at, for errors found after start-up validation (a tool the server
    /// does not offer).
    pub fn locate(&self, path: &str) -> String {
        match &self.mcp_source {
            Some((file, yaml)) => match locate_path(yaml, path) {
                Some(line) => format!("{file}: line {line}: {path}"),
                None => format!("{file}: {path}"),
            },
            None => path.to_owned(),
        }
    }

    /// Every MCP server to start: the shared `mcp_servers` and the agents' own.
    pub fn all_mcp_servers(&self) -> crate::mcp::config::McpServers {
        self.agents.all_mcp_servers(&self.mcp_servers)
    }

    /// A one-line description of the models in use, for start-up logs.
    pub fn describe_models(&self) -> String {
        if let Some(script) = &self.models.script {
            format!("model: script {} ({} turns; no model server)", script.origin(), script.turns())
                + &self.describe_agents()
        } else if self.models.is_offline() {
            "model: offline (deterministic rules; set OPENAI_API_KEY or OPENAI_BASE_URL for a real model)"
                .to_owned()
                + &self.describe_agents()
        } else {
            let models: Vec<String> = self
                .agents
                .agents
                .iter()
                .filter(|a| a.kind == AgentKind::Llm)
                .map(|a| {
                    let api = if a.api == Some(ModelApi::Responses) { " via the Responses API" } else { "" };
                    format!("{} {}{api}", a.name, a.model.as_deref().unwrap_or(&self.models.orchestrator))
                })
                .collect();
            format!(
                "model: {} at {} ({})",
                if self.models.api_key.is_some() {
                    "OpenAI-compatible, with key"
                } else {
                    "OpenAI-compatible, no key"
                },
                self.models.base_url.as_deref().unwrap_or(OPENAI_DEFAULT_BASE_URL),
                models.join(", "),
            ) + &self.describe_agents()
        }
    }

    /// The configured agents in one line: `; agents: lead → [a, b]`, empty for the reference
    /// routed turn.
    fn describe_agents(&self) -> String {
        let Some(entry) = self.agents.get(&self.agents.entry) else { return String::new() };
        if entry.routing.is_some() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wiring::{build, build_router, testing};

    fn built(c: &Config) -> Result<std::sync::Arc<crate::orchestrator::Orchestrator>, ConfigError> {
        build(c, testing::backends())
    }

    #[test]
    fn defaults_are_offline_and_valid() {
        let c = Config::default();
        assert!(c.models.is_offline());
        c.validate().unwrap();
        assert_eq!(built(&c).unwrap().model_name(), "offline");
        assert!(c.describe_models().contains("offline"));
    }

    #[test]
    fn a_bad_price_or_date_names_the_file_and_line() {
        let err = Config::default()
            .with_yaml("prices:\n  models:\n    m: {input: 0.12345678, output: 1}\n", "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("team.yaml") && err.contains("line 3") && err.contains("at most 6 decimals"),
            "{err}"
        );
        let err = Config::default()
            .with_yaml("prices:\n  as_of: yesterday\n", "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("team.yaml") && err.contains("line 2") && err.contains("YYYY-MM-DD"), "{err}");
        let err = Config::default()
            .with_yaml("prices:\n  models:\n    m: {input: 1, outptu: 1}\n", "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("outptu"), "{err}");
    }

    #[test]
    fn a_file_runs_over_the_runtimes_defaults_unless_it_extends_a_named_deployment() {
        let deployment = Config::default()
            .with_yaml("offline_model:\n  keywords:\n    assistant: [bill]\nmax_depth: 5\n", "d.yaml")
            .unwrap()
            .named("house");
        let own = Config::from_yaml(TEAM, "team.yaml", &[&deployment]).unwrap();
        assert_eq!((own.deployment.as_deref(), own.agents.max_depth), (None, 2));
        assert!(own.prices.models.contains_key("gpt-4.1-mini"), "the runtime's prices are under every file");
        let over = Config::from_yaml("extends: house\nentry: assistant\n", "t.yaml", &[&deployment]).unwrap();
        assert_eq!((over.deployment.as_deref(), over.agents.max_depth), (Some("house"), 5));
        assert_eq!(over.offline_keywords.len(), 1, "the deployment's settings come with it");
        let err = Config::from_yaml("# x\nextends: mansion\n", "t.yaml", &[&deployment]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration file t.yaml: line 2: extends: unknown deployment `mansion`; known: house"
        );
        let err = Config::default().with_yaml("extends: house\n", "t.yaml").unwrap_err().to_string();
        assert!(
            err.contains("line 1: extends: `house`, but it is applied over the runtime's defaults"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_base_url_is_named_in_the_error() {
        let mut c = Config::default();
        c.models.base_url = Some("localhost:8080".into());
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("OPENAI_BASE_URL"), "{err}");
    }

    #[test]
    fn a_file_overrides_only_what_it_names() {
        let c = Config::default()
            .with_yaml("offline_model:\n  keywords:\n    assistant: [Billing, invoice]\n", "team.yaml")
            .unwrap();
        assert_eq!(
            c.offline_keywords,
            [("assistant".to_owned(), vec!["billing".to_owned(), "invoice".to_owned()])]
        );
        assert_eq!(c.agents, Config::default().agents);
        // A new agents list keeps only the keyword lists of agents it still defines.
        let c = c.with_yaml(TEAM, "team.yaml").unwrap();
        assert!(c.offline_keywords.is_empty());
    }

    #[test]
    fn keyword_lists_keep_the_files_order_and_name_defined_agents() {
        let team = format!(
            "{TEAM}offline_model:\n  keywords:\n    writer: [essay]\n    researcher: [fact, source]\n"
        );
        let c = Config::default().with_yaml(&team, "team.yaml").unwrap();
        let agents: Vec<&str> = c.offline_keywords.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(agents, ["writer", "researcher"]);
        let err = Config::default()
            .with_yaml(&format!("{TEAM}offline_model:\n  keywords:\n    editor: [x]\n"), "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("team.yaml") && err.contains("unknown agent `editor`"), "{err}");
        let err = Config::default()
            .with_yaml(&format!("{TEAM}offline_model:\n  keywords:\n    writer: []\n"), "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 23") && err.contains("non-empty"), "{err}");
    }

    #[test]
    fn file_errors_name_the_file_line_and_field() {
        let err = Config::default().with_yaml("offline_model:\n  kewords: {}\n", "team.yaml").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("team.yaml") && msg.contains("kewords") && msg.contains("line 2"), "{msg}");
        let err = Config::default().with_yaml("offline_model:\n  keywords: 3\n", "t.yaml").unwrap_err();
        assert!(err.to_string().contains("keywords"), "{err}");
        let routed = TEAM.replace(
            "    agents: [researcher, writer]\n",
            "    agents: [researcher, writer]\n    routing: {fallback: researcher, categories: [Missing Points]}\n",
        );
        let err = Config::default().with_yaml(&routed, "t.yaml").unwrap_err();
        assert!(err.to_string().contains("snake_case") && err.to_string().contains("routing"), "{err}");
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
    tools: [lookup]
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
            Ok(c) => built(&c).err().map(|e| e.to_string()).expect("the team should be refused"),
        }
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
        assert!(build_router(&c, &testing::backends()).unwrap().is_none());
        assert_eq!(built(&c).unwrap().model_name(), "offline");
        assert!(c.describe_models().contains("lead → [researcher, writer]"), "{}", c.describe_models());
    }

    #[test]
    fn the_agents_served_over_mcp_are_listed_checked_and_go_with_their_agents_list() {
        let base = "entry: lead\nagents:\n  - {name: lead, instruction: a, agents: [helper]}\n  \
                    - {name: helper, instruction: b}\nmcp: {agents: [lead, helper]}\n";
        let c = Config::default().with_yaml(base, "base.yaml").unwrap();
        c.validate().unwrap();
        assert_eq!(c.agents.mcp_served(), ["lead", "helper"]);
        let team = "agents:\n  - {name: desk, instruction: c}\n";
        let c = c.with_yaml(team, "team.yaml").unwrap();
        c.validate().unwrap();
        assert_eq!(c.agents.mcp_served(), ["desk"], "a new agents list serves its entry agent alone");
        let unknown = Config::default().with_yaml(&base.replace("[lead, helper]", "[lead, ghost]"), "b.yaml");
        let err = unknown.and_then(|c| c.validate().map(|()| c)).unwrap_err().to_string();
        assert!(err.contains("mcp") && err.contains("unknown agent `ghost`"), "{err}");
    }

    #[test]
    fn mcp_servers_are_checked_at_start_with_file_line_and_field() {
        let team = "mcp_servers:\n  files:\n    command: npx\n    url: http://127.0.0.1:1/mcp\n";
        let err = Config::default().with_yaml(team, "mcp.yaml").unwrap_err().to_string();
        assert!(
            err.contains("mcp.yaml")
                && err.contains("line 4: mcp_servers.files.url")
                && err.contains("not both"),
            "{err}"
        );
        let unknown = "mcp_servers:\n  files:\n    command: npx\n".to_owned()
            + TEAM.replace("[lookup]", "[lookup, mcp__github__*]").as_str();
        let err = Config::default().with_yaml(&unknown, "mcp.yaml").unwrap_err().to_string();
        assert!(
            err.contains("agents[1] (`researcher`).tools") && err.contains("no MCP server named `github`"),
            "{err}"
        );
        let known = "mcp_servers:\n  files:\n    command: npx\n".to_owned()
            + TEAM.replace("[lookup]", "[lookup, mcp__files__*]").as_str();
        let c = Config::default().with_yaml(&known, "mcp.yaml").unwrap();
        assert_eq!(c.mcp_servers.len(), 1);
    }

    #[test]
    fn an_agents_own_mcp_servers_are_its_own_and_checked_with_the_line() {
        let own = "    mcp_servers:\n      files:\n        command: npx\n";
        let researcher = "    tools: [lookup]\n";
        // Declared under the researcher: started with the rest, named by it only.
        let team = TEAM.replace(researcher, &format!("{researcher}{own}"));
        let c = Config::default().with_yaml(&team, "team.yaml").unwrap();
        assert!(c.mcp_servers.is_empty(), "not a shared server");
        assert_eq!(c.all_mcp_servers().keys().collect::<Vec<_>>(), ["files"]);
        let named = team.replace("[lookup]", "[lookup, mcp__files__read]");
        Config::default().with_yaml(&named, "team.yaml").unwrap();

        // Another agent may not use it.
        let foreign = team
            .replace("    instruction: Write.\n", "    instruction: Write.\n    tools: [mcp__files__*]\n");
        let err = Config::default().with_yaml(&foreign, "team.yaml").unwrap_err().to_string();
        assert!(
            err.contains("agents[2] (`writer`).tools") && err.contains("agent `researcher`'s own MCP server"),
            "{err}"
        );
        // Its fields are checked like a shared server's, at its line.
        let broken =
            team.replace("        command: npx\n", "        command: npx\n        url: http://x/mcp\n");
        let err = Config::default().with_yaml(&broken, "team.yaml").unwrap_err().to_string();
        assert!(
            err.contains("line 11: agents[1] (`researcher`).mcp_servers: mcp_servers.files.url"),
            "{err}"
        );
        // A name is one server: not shared and an agent's, nor two agents'.
        let shared = format!("mcp_servers:\n  files:\n    command: npx\n{team}");
        let err = Config::default().with_yaml(&shared, "team.yaml").unwrap_err().to_string();
        assert!(err.contains("already declared by the top-level `mcp_servers`"), "{err}");
        let twice = team.replace("    instruction: Write.\n", &format!("    instruction: Write.\n{own}"));
        let err = Config::default().with_yaml(&twice, "team.yaml").unwrap_err().to_string();
        assert!(
            err.contains("agents[2] (`writer`).mcp_servers")
                && err.contains("`files` is already declared by agent `researcher`"),
            "{err}"
        );
    }

    #[test]
    fn team_errors_name_the_line_and_the_field() {
        let cases = [
            (
                TEAM.replace("[lookup]", "[lokup]"),
                "line 10: agents[1] (`researcher`).tools: unknown tool `lokup`",
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
                TEAM.replace("    agents: [researcher, writer]", "    agents: [researcher, writer]\n    routing: {fallback: editor}"),
                "line 7: agents[0] (`lead`).routing: fallback `editor` is not one of its agents",
            ),
            (
                TEAM.replace("    agents: [researcher, writer]", "    agents: [researcher, writer]\n    routing: {fallback: researcher, guards: [verbose]}"),
                "unknown guard `verbose`",
            ),
            (
                TEAM.replace("    agents: [researcher, writer]", "    agents: [researcher, writer]\n    routing: {fallback: researcher}"),
                "set `output: text_and_events` on `writer`",
            ),
            (
                TEAM.replace("instruction: Lead the team.", "kind: router"),
                "agents[0] (`lead`).agents: a `router` agent is built in: it takes no instruction",
            ),
            (
                TEAM.replace("    instruction: Write.\n", "    kind: router\n"),
                "agents[2] (`writer`).kind: unknown agent kind `router`; known: llm",
            ),
            (TEAM.replace("    instruction: Write.\n", "    kind: \"a b\"\n"), "is not a kind"),
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
