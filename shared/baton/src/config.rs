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
//! Per-episode vendor state (the Forethought conversation, the shopping agent's last response id)
//! and purchase history come from [`Backends`]: in-memory until a store is plugged in through
//! [`Config::build_with`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use crate::agent::{Agent, LoopLimits, MemoryResponseChains, ResponseChains};
use crate::model::ChatModel;
use crate::model::offline::OfflineModel;
use crate::model::openai::{OpenAiChatModel, OpenAiConfig, RetryPolicy, Timeouts};
use crate::model::responses::ResponsesModel;
use crate::mux::MuxConfig;
use crate::orchestrator::{Orchestrator, TurnConfig};
use crate::remote::{AgentTransport, RemoteAgent};
use crate::shopping::catalog::{Catalog, PurchaseHistory, SamplePurchases};
use crate::shopping::shopping_agent;
use crate::support::agent::ForethoughtAgent;
use crate::support::forethought::{ForethoughtClient, ForethoughtConfig};
use crate::support::help_center::{HelpCenter, HelpCenterAgent};
use crate::support::sessions::{Clock, MemorySupportSessions, SupportSessions, SystemClock};

/// The OpenAI base URL used when only an API key is given.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Where the models come from.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Base URL of an OpenAI-compatible server.
    pub base_url: Option<String>,
    /// API key.
    pub api_key: Option<String>,
    /// Model of the orchestrator.
    pub orchestrator: String,
    /// Model of the shopping agent.
    pub shopping: String,
    /// Whether the shopping agent uses the Responses API (with `previous_response_id`) instead
    /// of Chat Completions.
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
    /// Bounds of the shopping agent's tool loop.
    pub shopping_limits: LoopLimits,
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
        self.validate_routing()
    }

    /// Builds the orchestrator and its sub-agents on in-memory [`Backends`].
    pub fn build(&self) -> Result<Arc<Orchestrator>, ConfigError> {
        self.build_with(Backends::in_memory())
    }

    /// Builds the orchestrator and its sub-agents: clients are made once, here.
    pub fn build_with(&self, backends: Backends) -> Result<Arc<Orchestrator>, ConfigError> {
        self.validate()?;
        let models = ModelFactory::new(self)?;
        let support: Arc<dyn Agent> = match &self.forethought {
            Some(ft) => Arc::new(ForethoughtAgent::new(
                ForethoughtClient::new(ft.clone())?,
                backends.support_sessions.clone(),
                backends.clock.clone(),
            )),
            None => Arc::new(HelpCenterAgent::new(Arc::new(HelpCenter::embedded()))),
        };
        let shopping: Arc<dyn Agent> = match &backends.remote_shopping {
            Some(transport) => Arc::new(RemoteAgent::new("shopping", transport.clone(), REMOTE_IDLE_TIMEOUT)),
            None => self.shopping_with(&models, &backends)?,
        };
        Ok(Arc::new(Orchestrator::new(
            models.chat(&self.models.orchestrator),
            support,
            shopping,
            self.turn.clone(),
        )))
    }

    /// The in-process shopping agent: what the orchestrator runs unless shopping is remote, and
    /// what the shopping function serves.
    pub fn build_shopping(&self, backends: &Backends) -> Result<Arc<dyn Agent>, ConfigError> {
        self.validate()?;
        self.shopping_with(&ModelFactory::new(self)?, backends)
    }

    fn shopping_with(
        &self,
        models: &ModelFactory<'_>,
        backends: &Backends,
    ) -> Result<Arc<dyn Agent>, ConfigError> {
        let agent = shopping_agent(
            models.shopping(),
            Arc::new(Catalog::embedded()),
            backends.purchases.clone(),
            self.shopping_limits,
            Some(backends.response_chains.clone()),
        )?;
        Ok(Arc::new(agent))
    }

    /// A one-line description of the models in use, for start-up logs.
    pub fn describe_models(&self) -> String {
        if self.models.is_offline() {
            "model: offline (deterministic rules; set OPENAI_API_KEY or OPENAI_BASE_URL for a real model)"
                .into()
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
            )
        }
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

    /// The shopping model: the Responses API when configured, Chat Completions otherwise.
    fn shopping(&self) -> Arc<dyn ChatModel> {
        let name = &self.config.models.shopping;
        match (&self.http, self.config.models.shopping_responses_api) {
            (Some(http), true) => {
                Arc::new(ResponsesModel::with_client(http.clone(), self.openai_config(name)))
            }
            _ => self.chat(name),
        }
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
}
