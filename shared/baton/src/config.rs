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

use std::sync::Arc;
use std::time::Duration;

use crate::agent::{Agent, LoopLimits, MemoryResponseChains, ResponseChains};
use crate::model::ChatModel;
use crate::model::offline::OfflineModel;
use crate::model::openai::{OpenAiChatModel, OpenAiConfig, RetryPolicy, Timeouts};
use crate::model::responses::ResponsesModel;
use crate::mux::MuxConfig;
use crate::orchestrator::{Orchestrator, TurnConfig};
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
}

impl Backends {
    /// Process-memory state, the sample purchase history and the system clock.
    pub fn in_memory() -> Backends {
        Backends {
            support_sessions: Arc::new(MemorySupportSessions::default()),
            response_chains: Arc::new(MemoryResponseChains::default()),
            purchases: Arc::new(SamplePurchases::embedded()),
            clock: Arc::new(SystemClock),
        }
    }
}

/// The default support keywords of the offline model.
pub const DEFAULT_SUPPORT_KEYWORDS: &[&str] = &[
    "receipt",
    "receipts",
    "e-receipt",
    "e-receipts",
    "ereceipt",
    "scan",
    "scanned",
    "scanning",
    "points",
    "point",
    "missing",
    "rejected",
    "reward",
    "rewards",
    "redeem",
    "redeemed",
    "card",
    "account",
    "profile",
    "login",
    "password",
    "referral",
    "referrals",
    "refer",
    "bonus",
    "pass",
    "support",
    "problem",
    "issue",
    "error",
    "broken",
    "crash",
    "crashes",
    "bug",
    "help",
];

impl Default for Config {
    fn default() -> Self {
        Config {
            models: ModelConfig::default(),
            turn: TurnConfig { mux: MuxConfig::default(), ..TurnConfig::default() },
            limits: RequestLimits::default(),
            heartbeat: Duration::from_secs(10),
            support_keywords: DEFAULT_SUPPORT_KEYWORDS.iter().map(|s| s.to_string()).collect(),
            forethought: None,
            shopping_limits: LoopLimits::default(),
        }
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
        Ok(())
    }

    /// Builds the orchestrator and its sub-agents on in-memory [`Backends`].
    pub fn build(&self) -> Result<Arc<Orchestrator>, ConfigError> {
        self.build_with(Backends::in_memory())
    }

    /// Builds the orchestrator and its sub-agents: clients are made once, here.
    pub fn build_with(&self, backends: Backends) -> Result<Arc<Orchestrator>, ConfigError> {
        self.validate()?;
        let models = &self.models;
        // One HTTP client (one connection pool, one TLS setup) for every model.
        let http =
            if models.is_offline() { None } else { Some(OpenAiChatModel::http_client(&models.timeouts)?) };
        let model = |name: &str| -> Result<Arc<dyn ChatModel>, ConfigError> {
            let Some(http) = &http else {
                return Ok(Arc::new(OfflineModel::new(self.support_keywords.clone())));
            };
            let base_url = models.base_url.clone().unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.into());
            let mut config = OpenAiConfig::new(base_url, name);
            config.api_key = models.api_key.clone();
            config.timeouts = models.timeouts;
            config.retry = models.retry;
            Ok(Arc::new(OpenAiChatModel::with_client(http.clone(), config)))
        };
        let support: Arc<dyn Agent> = match &self.forethought {
            Some(ft) => Arc::new(ForethoughtAgent::new(
                ForethoughtClient::new(ft.clone())?,
                backends.support_sessions,
                backends.clock,
            )),
            None => Arc::new(HelpCenterAgent::new(Arc::new(HelpCenter::embedded()))),
        };
        let shopping_model: Arc<dyn ChatModel> = match (&http, models.shopping_responses_api) {
            (Some(http), true) => {
                let base_url = models.base_url.clone().unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.into());
                let mut config = OpenAiConfig::new(base_url, &models.shopping);
                config.api_key = models.api_key.clone();
                config.timeouts = models.timeouts;
                config.retry = models.retry;
                Arc::new(ResponsesModel::with_client(http.clone(), config))
            }
            _ => model(&models.shopping)?,
        };
        let shopping = shopping_agent(
            shopping_model,
            Arc::new(Catalog::embedded()),
            backends.purchases,
            self.shopping_limits,
            Some(backends.response_chains),
        )?;
        Ok(Arc::new(Orchestrator::new(
            model(&models.orchestrator)?,
            support,
            Arc::new(shopping),
            self.turn.clone(),
        )))
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
}
