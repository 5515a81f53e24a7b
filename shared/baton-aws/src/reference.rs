//! The reference deployment's settings: the defaults of its agent named `shopping` (model,
//! Responses API, steps, tool timeout, where it runs remotely) and its Forethought connection.
//! One clap group, flattened into the functions' settings, so its flags and variables
//! (`BATON_SHOPPING_*`, `FORETHOUGHT_*`) work as before; it moves with the reference deployment.

use std::time::Duration;

use baton::config::agents::RemoteSpec;
use baton::config::{AgentDefaults, Config};
use baton::support::forethought::{FORETHOUGHT_DEFAULT_BASE_URL, ForethoughtConfig, PriorContextMode};
use clap::Args;

/// The reference deployment's settings. Not `Debug`: it holds a secret.
#[derive(Clone, Args)]
pub struct ReferenceSettings {
    /// Model of the agent named `shopping` when its configuration names none.
    #[arg(long, env = "BATON_SHOPPING_MODEL", default_value = "gpt-4.1-mini", global = true)]
    shopping_model: String,

    /// The shopping agent uses the OpenAI Responses API (server-side context through
    /// previous_response_id) instead of Chat Completions.
    #[arg(long, env = "BATON_SHOPPING_RESPONSES_API", global = true, value_parser = clap::builder::BoolishValueParser::new())]
    shopping_responses_api: bool,

    /// Model calls per shopping answer (the last one may not call tools).
    #[arg(long, env = "BATON_SHOPPING_MAX_STEPS", default_value_t = 5, global = true)]
    shopping_max_steps: usize,

    /// Longest one shopping tool call may take.
    #[arg(long, env = "BATON_TOOL_TIMEOUT_MS", default_value_t = 10_000, global = true)]
    tool_timeout_ms: u64,

    /// Forethought Solve API token; support uses Forethought when it is set, the offline help
    /// center otherwise.
    #[arg(long, env = "FORETHOUGHT_API_TOKEN", hide_env_values = true, global = true)]
    forethought_token: Option<String>,

    /// Forethought base URL.
    #[arg(long, env = "FORETHOUGHT_BASE_URL", default_value = FORETHOUGHT_DEFAULT_BASE_URL, global = true)]
    forethought_base_url: String,

    /// The `channel` sent to Forethought.
    #[arg(long, env = "FORETHOUGHT_CHANNEL", default_value = "headless", global = true)]
    forethought_channel: String,

    /// Where the orchestrator's prior_context goes: `prefix` (before the query) or
    /// `variable:<name>` (a context variable).
    #[arg(long, env = "FORETHOUGHT_PRIOR_CONTEXT", default_value = "prefix", global = true)]
    forethought_prior_context: PriorContextMode,

    /// Forethought first-byte and idle timeout.
    #[arg(long, env = "FORETHOUGHT_TIMEOUT_MS", default_value_t = 20_000, global = true)]
    forethought_timeout_ms: u64,

    /// Secrets Manager secret (name or ARN) holding the Forethought token; read at start when no
    /// token is given directly.
    #[arg(long, env = "FORETHOUGHT_TOKEN_SECRET_ARN", global = true)]
    forethought_token_secret_arn: Option<String>,

    /// Run the shopping agent remotely at this URL (NDJSON over HTTP): locally, its Function URL
    /// path under `cargo lambda watch`, e.g. http://127.0.0.1:9000/lambda-url/shopping/.
    #[arg(long, env = "BATON_SHOPPING_URL", global = true)]
    shopping_url: Option<String>,

    /// Run the shopping agent remotely in this Lambda function (InvokeWithResponseStream).
    #[arg(long, env = "BATON_SHOPPING_FUNCTION", global = true, conflicts_with = "shopping_url")]
    shopping_function: Option<String>,
}

impl ReferenceSettings {
    /// The Secrets Manager reference of the Forethought token, when no token is given directly.
    pub(crate) fn secret_reference(&self) -> Option<String> {
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        nonempty(&self.forethought_token_secret_arn).filter(|_| nonempty(&self.forethought_token).is_none())
    }

    /// The Forethought token, read from its secret.
    pub(crate) fn set_secret(&mut self, token: String) {
        self.forethought_token = Some(token);
    }

    /// Applies these settings to `c`.
    pub(crate) fn apply(&self, c: &mut Config) {
        // The shopping flags and variables are the `shopping` agent's settings where its entry
        // sets none.
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let remote = match (nonempty(&self.shopping_url), nonempty(&self.shopping_function)) {
            (Some(url), _) => Some(RemoteSpec { url: Some(url), function: None }),
            (None, Some(function)) => Some(RemoteSpec { url: None, function: Some(function) }),
            (None, None) => None,
        };
        c.apply_agent_defaults(
            "shopping",
            AgentDefaults {
                model: Some(self.shopping_model.clone()),
                responses_api: self.shopping_responses_api,
                max_steps: Some(self.shopping_max_steps),
                tool_timeout: Some(Duration::from_millis(self.tool_timeout_ms)),
                remote,
            },
        );
        if let Some(token) = self.forethought_token.clone().filter(|t| !t.is_empty()) {
            let mut ft = ForethoughtConfig::new(self.forethought_base_url.clone(), token);
            ft.channel = self.forethought_channel.clone();
            ft.prior_context = self.forethought_prior_context.clone();
            ft.timeouts.first_byte = Duration::from_millis(self.forethought_timeout_ms);
            ft.timeouts.idle = Duration::from_millis(self.forethought_timeout_ms);
            c.forethought = Some(ft);
        }
    }
}
