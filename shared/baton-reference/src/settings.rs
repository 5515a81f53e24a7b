//! The reference deployment's own settings: the shopping agent's model and where it runs, and
//! Forethought. One clap argument group a function flattens beside the runtime's settings; every
//! field is a flag (global, so it may follow a subcommand) and an environment variable, so the
//! same names work on the command line and in Lambda (which reads the environment alone).

use std::time::Duration;

use baton::config::agents::RemoteSpec;
use baton::config::{AgentDefaults, Config};
use clap::Args;

use crate::deployment::Deployment;
use crate::support::forethought::{FORETHOUGHT_DEFAULT_BASE_URL, ForethoughtConfig, PriorContextMode};

/// The agent the shopping flags fill (where its entry sets nothing).
pub const SHOPPING_AGENT: &str = "shopping";

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

    /// Run the shopping agent remotely at this URL (NDJSON over HTTP): locally, its Function URL
    /// path under `cargo lambda watch`, e.g. http://127.0.0.1:9000/lambda-url/shopping/.
    #[arg(long, env = "BATON_SHOPPING_URL", global = true)]
    shopping_url: Option<String>,

    /// Run the shopping agent remotely in this Lambda function (InvokeWithResponseStream).
    #[arg(long, env = "BATON_SHOPPING_FUNCTION", global = true, conflicts_with = "shopping_url")]
    shopping_function: Option<String>,

    /// Forethought Solve API token; support uses Forethought when it is set, the offline help
    /// center otherwise.
    #[arg(long, env = "FORETHOUGHT_API_TOKEN", hide_env_values = true, global = true)]
    forethought_token: Option<String>,

    /// Secrets Manager secret (name or ARN) holding the Forethought token; read at start when no
    /// token is given directly.
    #[arg(long, env = "FORETHOUGHT_TOKEN_SECRET_ARN", global = true)]
    forethought_token_secret_arn: Option<String>,

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
}

fn nonempty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|s| !s.trim().is_empty())
}

impl ReferenceSettings {
    /// The secret to read (a Secrets Manager name or ARN) for the Forethought token, when it is
    /// given by reference and not directly.
    pub fn forethought_token_secret(&self) -> Option<String> {
        nonempty(&self.forethought_token_secret_arn).filter(|_| nonempty(&self.forethought_token).is_none())
    }

    /// Sets the Forethought token (read from its secret).
    pub fn set_forethought_token(&mut self, token: String) {
        self.forethought_token = Some(token);
    }

    /// The deployment these settings describe over `config`: the shopping flags fill the
    /// `shopping` agent's entry where it sets nothing (nothing else treats an agent's name
    /// specially); a Forethought token turns support to Forethought. A configuration that is not
    /// the reference's ([`Deployment::is_reference`]) is left as it is: these settings are not its.
    pub fn deployment(&self, mut config: Config) -> Deployment {
        if config.deployment.as_deref() != Some(crate::REFERENCE) {
            return Deployment::from(config);
        }
        let remote = match (nonempty(&self.shopping_url), nonempty(&self.shopping_function)) {
            (Some(url), _) => Some(RemoteSpec { url: Some(url), ..RemoteSpec::default() }),
            (None, Some(function)) => Some(RemoteSpec { function: Some(function), ..RemoteSpec::default() }),
            (None, None) => None,
        };
        config.apply_agent_defaults(
            SHOPPING_AGENT,
            AgentDefaults {
                model: Some(self.shopping_model.clone()),
                responses_api: self.shopping_responses_api,
                max_steps: Some(self.shopping_max_steps),
                tool_timeout: Some(Duration::from_millis(self.tool_timeout_ms)),
                remote,
            },
        );
        let forethought = nonempty(&self.forethought_token).map(|token| {
            let mut ft = ForethoughtConfig::new(self.forethought_base_url.clone(), token);
            ft.channel = self.forethought_channel.clone();
            ft.prior_context = self.forethought_prior_context.clone();
            ft.timeouts.first_byte = Duration::from_millis(self.forethought_timeout_ms);
            ft.timeouts.idle = Duration::from_millis(self.forethought_timeout_ms);
            ft
        });
        Deployment { config, forethought }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: ReferenceSettings,
    }

    #[test]
    fn the_shopping_flags_fill_the_shopping_agent_and_a_token_turns_support_to_forethought() {
        let cli = Cli::parse_from(["x", "--shopping-model", "m1", "--shopping-responses-api"]);
        let deployment = cli.settings.deployment(crate::reference_config());
        let shopping = deployment.config.agents.get(SHOPPING_AGENT).unwrap();
        assert_eq!(shopping.model.as_deref(), Some("m1"));
        assert_eq!(shopping.api, Some(baton::config::agents::ModelApi::Responses));
        assert!(deployment.forethought.is_none(), "no token: the help center");
        let cli = Cli::parse_from([
            "x",
            "--forethought-token",
            "t",
            "--forethought-timeout-ms",
            "1500",
            "--shopping-url",
            "http://127.0.0.1:9/shopping",
        ]);
        let deployment = cli.settings.deployment(crate::reference_config());
        let ft = deployment.forethought.unwrap();
        assert_eq!((ft.token.as_str(), ft.timeouts.idle), ("t", Duration::from_millis(1500)));
        let shopping = deployment.config.agents.get(SHOPPING_AGENT).unwrap();
        assert_eq!(
            shopping.remote.as_ref().and_then(|r| r.url.as_deref()),
            Some("http://127.0.0.1:9/shopping")
        );
        // A team's configuration (one that does not extend the reference) is not theirs.
        let mut team = baton::config::Config::default();
        team.agents.agents[0].name = SHOPPING_AGENT.into();
        let deployment = cli.settings.deployment(team);
        assert!(deployment.forethought.is_none() && deployment.config.agents.agents[0].remote.is_none());
        let by_reference = Cli::parse_from(["x", "--forethought-token-secret-arn", "arn:x"]);
        assert_eq!(by_reference.settings.forethought_token_secret().as_deref(), Some("arn:x"));
        let both =
            Cli::parse_from(["x", "--forethought-token-secret-arn", "arn:x", "--forethought-token", "t"]);
        assert_eq!(both.settings.forethought_token_secret(), None, "a token given directly wins");
    }
}
