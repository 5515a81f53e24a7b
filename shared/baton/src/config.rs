//! One typed configuration, with defaults that run offline, and the runtime built from it.
//!
//! With no `OPENAI_API_KEY` and no `OPENAI_BASE_URL`, every role uses the offline model (it says
//! so at start-up and in `completed`). Setting either switches all roles to an OpenAI-compatible
//! server; each role's model name can be set on its own.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::ModelAgent;
use crate::model::ChatModel;
use crate::model::offline::OfflineModel;
use crate::model::openai::{OpenAiChatModel, OpenAiConfig, RetryPolicy, Timeouts};
use crate::mux::MuxConfig;
use crate::orchestrator::{Orchestrator, TurnConfig};

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
    /// Model of the support agent.
    pub support: String,
    /// Model of the shopping agent.
    pub shopping: String,
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
            support: "gpt-4.1-mini".into(),
            shopping: "gpt-4.1-mini".into(),
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
        Ok(())
    }

    /// Builds the orchestrator and its sub-agents: clients are made once, here.
    pub fn build(&self) -> Result<Arc<Orchestrator>, ConfigError> {
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
        let support = ModelAgent::new(
            "support",
            "You are the support agent of a receipt-rewards app. Answer the user's account, receipt, \
             points and rewards question briefly and concretely.",
            model(&models.support)?,
        );
        let shopping = ModelAgent::new(
            "shopping",
            "You are the shopping agent of a receipt-rewards app. Help the user find offers and \
             products; be brief and concrete.",
            model(&models.shopping)?,
        );
        Ok(Arc::new(Orchestrator::new(
            model(&models.orchestrator)?,
            Arc::new(support),
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
                "model: {} at {} (orchestrator {}, support {}, shopping {})",
                if self.models.api_key.is_some() {
                    "OpenAI-compatible, with key"
                } else {
                    "OpenAI-compatible, no key"
                },
                self.models.base_url.as_deref().unwrap_or(OPENAI_DEFAULT_BASE_URL),
                self.models.orchestrator,
                self.models.support,
                self.models.shopping,
            )
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
