//! The runtime settings shared by Baton's functions: the model server and models, timeouts,
//! flushing, auth, the conversation store, and the secrets given by reference. A deployment's
//! own settings (its agents' defaults, its vendors) are its own argument group, flattened beside
//! this one.
//!
//! [`Settings`] is one clap argument group. Every field is a flag and an environment variable, so
//! the same names work on the command line (the orchestrator flattens it into its CLI) and in
//! Lambda, where a function has no arguments and [`Settings::from_env`] reads the environment
//! alone. The settings parse and describe; [`Settings::config`] applies them over a deployment's
//! [`Config`], and the store, the remote transport and the auth mode are opened from them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton::config::Config;
use baton::config::agents::RemoteSpec;
use baton::history::{DEFAULT_HISTORY_MESSAGES, History};
use baton::remote::AgentTransport;
use baton::store::embedded::EmbeddedStore;
use baton::store::{DEFAULT_RETENTION, DEFAULT_TURN_LOG_TTL, Store, SystemClock};
use clap::{Args, FromArgMatches};

/// The settings every Baton function reads. Each one is a flag (global, so it may follow a
/// subcommand) and the environment variable it names. Not `Debug`: it holds secrets.
#[derive(Clone, Args)]
pub struct Settings {
    /// A team's YAML configuration file: the agents (entry, max_depth, agents: its own agents and
    /// which call which as tools), tools, routing, prices. It runs what it declares, over the
    /// runtime's defaults; `extends: <deployment>` applies it over a deployment the binary ships
    /// instead. Without one, the binary's own deployment runs. See examples/team.yaml.
    #[arg(long, env = "BATON_CONFIG", global = true)]
    config: Option<PathBuf>,

    /// A model script (YAML) that answers every agent instead of a model server, for a team's
    /// tests (docs/testing.md); it overrides the file's `model: {script}` and the model server.
    #[arg(long, env = "BATON_MODEL_SCRIPT", global = true)]
    model_script: Option<PathBuf>,

    /// Base URL of an OpenAI-compatible server (up to and including /v1).
    #[arg(long, env = "OPENAI_BASE_URL", global = true)]
    openai_base_url: Option<String>,

    /// Speak HTTP/2 without an upgrade (h2c, prior knowledge) to a cleartext `http://` model
    /// server that accepts it, so concurrent model calls share one connection. Over https,
    /// HTTP/2 is negotiated whenever the server offers it.
    #[arg(long, env = "BATON_MODEL_HTTP2", global = true, value_parser = clap::builder::BoolishValueParser::new())]
    model_http2: bool,

    /// API key for the model server (sent as a bearer token).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true, global = true)]
    openai_api_key: Option<String>,

    /// Model of the orchestrator, and of every configured agent that names none.
    #[arg(long, env = "BATON_ORCHESTRATOR_MODEL", default_value = "gpt-4.1-mini", global = true)]
    orchestrator_model: String,

    /// Longest pause between two flushed events when a buffered agent's text is released, and the
    /// shortest between two releases (faster catch-up goes in batches).
    #[arg(long, env = "BATON_FLUSH_INTERVAL_MS", default_value_t = 12, global = true)]
    flush_interval_ms: u64,

    /// Upper bound on the time one flush of buffered text takes (0 = at once).
    #[arg(long, env = "BATON_FLUSH_BUDGET_MS", default_value_t = 300, global = true)]
    flush_budget_ms: u64,

    /// Model connect timeout.
    #[arg(long, env = "BATON_CONNECT_TIMEOUT_MS", default_value_t = 5_000, global = true)]
    connect_timeout_ms: u64,

    /// Model first-byte timeout (request sent → response headers).
    #[arg(long, env = "BATON_FIRST_BYTE_TIMEOUT_MS", default_value_t = 30_000, global = true)]
    first_byte_timeout_ms: u64,

    /// Model idle timeout (between two stream chunks).
    #[arg(long, env = "BATON_IDLE_TIMEOUT_MS", default_value_t = 30_000, global = true)]
    idle_timeout_ms: u64,

    /// How callers are identified: `local` (the x-baton-user header, unauthenticated; the default
    /// for `serve`), `iam` (the signed IAM principal; the default in Lambda), or `jwt` (a bearer
    /// token verified with --jwt-public-key or --jwt-hs256-secret).
    #[arg(long, env = "BATON_AUTH", global = true)]
    auth: Option<String>,

    /// RS256 public key (PEM) of the JWT issuer, for --auth jwt.
    #[arg(long, env = "BATON_JWT_PUBLIC_KEY", global = true)]
    jwt_public_key: Option<String>,

    /// Secrets Manager secret (name or ARN) holding the JWT issuer's RS256 public key (PEM); read
    /// at start when no key is given directly (how the SAM template passes it).
    #[arg(long, env = "BATON_JWT_PUBLIC_KEY_SECRET_ARN", global = true)]
    jwt_public_key_secret_arn: Option<String>,

    /// HS256 shared secret (at least 32 bytes), for --auth jwt in tests and local setups.
    #[arg(long, env = "BATON_JWT_HS256_SECRET", hide_env_values = true, global = true)]
    jwt_hs256_secret: Option<String>,

    /// Required `iss` of JWTs.
    #[arg(long, env = "BATON_JWT_ISSUER", global = true)]
    jwt_issuer: Option<String>,

    /// Required `aud` of JWTs.
    #[arg(long, env = "BATON_JWT_AUDIENCE", global = true)]
    jwt_audience: Option<String>,

    /// Secrets Manager secret (name or ARN) holding the model API key; read at start when no
    /// key is given directly (how the SAM template passes it).
    #[arg(long, env = "OPENAI_API_KEY_SECRET_ARN", global = true)]
    openai_api_key_secret_arn: Option<String>,

    /// Retries of a model call that fails before its first delta (connect errors, 429, 5xx).
    #[arg(long, env = "BATON_MAX_RETRIES", default_value_t = 2, global = true)]
    max_retries: u32,

    /// File of the embedded conversation store [default: $XDG_DATA_HOME/baton/store.redb, or
    /// ~/.local/share/baton/store.redb].
    #[arg(long, env = "BATON_STORE_PATH", global = true)]
    store_path: Option<PathBuf>,

    /// Keep conversations in this DynamoDB table instead of the embedded store (region and
    /// credentials from the AWS environment; AWS_ENDPOINT_URL_DYNAMODB for a local server).
    #[arg(long, env = "BATON_TABLE", global = true, conflicts_with = "store_path")]
    table: Option<String>,

    /// How many stored messages of the episode each turn sees.
    #[arg(long, env = "BATON_HISTORY_MESSAGES", default_value_t = DEFAULT_HISTORY_MESSAGES, global = true)]
    history_messages: usize,

    /// Days a conversation is kept after its last message (then it expires: DynamoDB's TTL, or
    /// the embedded store's own expiry).
    #[arg(long, env = "BATON_HISTORY_TTL_DAYS", default_value_t = DEFAULT_RETENTION.as_secs() / 86_400, global = true)]
    history_ttl_days: u64,

    /// Hours a turn's event log is kept after its last write (for a client to rejoin the turn;
    /// then it expires like the conversation).
    #[arg(long, env = "BATON_TURN_LOG_TTL_HOURS", default_value_t = DEFAULT_TURN_LOG_TTL.as_secs() / 3600, global = true)]
    turn_log_ttl_hours: u64,
}

/// The embedded store's file when no path is given: the user's data directory.
fn default_store_path() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("baton").join("store.redb")
}

impl Settings {
    /// Opens the conversation store these options name, and the history that records into it.
    pub(crate) async fn history(&self) -> Result<(History, String), String> {
        if self.history_ttl_days == 0 {
            return Err("BATON_HISTORY_TTL_DAYS must be at least 1".into());
        }
        let retention = Duration::from_secs(self.history_ttl_days.saturating_mul(86_400));
        if self.turn_log_ttl_hours == 0 {
            return Err("BATON_TURN_LOG_TTL_HOURS must be at least 1".into());
        }
        let turn_log_ttl = Duration::from_secs(self.turn_log_ttl_hours.saturating_mul(3600));
        let store: Arc<dyn Store> = match &self.table {
            Some(table) => Arc::new(
                crate::DynamoDbStore::from_env(table.clone(), Arc::new(SystemClock))
                    .await
                    .with_retention(retention)
                    .with_turn_log_ttl(turn_log_ttl),
            ),
            None => {
                let path = self.store_path.clone().unwrap_or_else(default_store_path);
                let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).map_err(|e| e.to_string())?;
                Arc::new(store.with_retention(retention).with_turn_log_ttl(turn_log_ttl))
            }
        };
        let described = match (&self.table, &self.store_path) {
            (Some(table), _) => format!("store: DynamoDB table {table}"),
            (None, path) => {
                format!("store: {}", path.clone().unwrap_or_else(default_store_path).display())
            }
        };
        Ok((History::new(store, self.history_messages), described))
    }

    /// The configuration these settings give, with their options applied: the file's
    /// ([`Config::from_file`]: over the runtime's defaults, or over `base` when it says
    /// `extends: <base's name>`), or `base` (the function's own deployment) with no file.
    pub fn config(&self, base: Config) -> Result<Config, baton::config::ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path, &[&base])?,
            None => base,
        };
        if let Some(path) = &self.model_script {
            c = c.with_model_script(path)?;
        }
        c.models.base_url = self.openai_base_url.clone().filter(|s| !s.is_empty());
        c.models.api_key = self.openai_api_key.clone().filter(|s| !s.is_empty());
        c.models.orchestrator = self.orchestrator_model.clone();
        c.models.http2 = self.model_http2;
        c.models.timeouts.connect = Duration::from_millis(self.connect_timeout_ms);
        c.models.timeouts.first_byte = Duration::from_millis(self.first_byte_timeout_ms);
        c.models.timeouts.idle = Duration::from_millis(self.idle_timeout_ms);
        c.models.retry.max_retries = self.max_retries;
        c.mux.flush_interval = Duration::from_millis(self.flush_interval_ms);
        c.mux.flush_budget = Duration::from_millis(self.flush_budget_ms);
        Ok(c)
    }
}

/// The transports of the agents `config` runs remotely (their `remote:`), by agent name: a URL
/// over HTTP (NDJSON), a function name through Lambda's InvokeWithResponseStream.
pub async fn remote_agents(config: &Config) -> HashMap<String, Arc<dyn AgentTransport>> {
    let mut transports = HashMap::new();
    for spec in &config.agents.agents {
        let transport: Arc<dyn AgentTransport> = match &spec.remote {
            Some(RemoteSpec { url: Some(url), .. }) => {
                Arc::new(baton::remote::HttpTransport::new(reqwest::Client::new(), url.clone()))
            }
            Some(RemoteSpec { function: Some(function), .. }) => {
                Arc::new(crate::lambda_transport::LambdaTransport::from_env(function.clone()).await)
            }
            _ => continue,
        };
        transports.insert(spec.name.clone(), transport);
    }
    transports
}

/// Logs to stderr, filtered by `BATON_LOG` (default `warn`), coloured only on a terminal; in Lambda, without timestamps
/// (CloudWatch adds its own). With `OTEL_EXPORTER_OTLP_ENDPOINT` set, also exports traces over
/// OTLP/HTTP as `service` and returns the exporter (to flush); otherwise there is no trace
/// layer at all. Call it inside the Tokio runtime.
pub fn init_logging(service: &str) -> Option<std::sync::Arc<baton::telemetry::trace::Traces>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| "warn".into());
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    // Colours only for a person at a terminal: a file or CloudWatch gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr);
    let logs = if in_lambda { logs.without_time().boxed() } else { logs.boxed() };
    let (traces, error) = match baton::telemetry::trace::Traces::from_env(service) {
        Ok(traces) => (traces.map(std::sync::Arc::new), None),
        Err(e) => (None, Some(e)),
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces.as_ref().map(|t| t.layer()))
        .init();
    if let Some(e) = error {
        tracing::error!(error = %e, "traces are off");
    }
    traces
}

impl Settings {
    /// Reads the secrets given by reference (Secrets Manager) into the options they stand for
    /// (a value given directly wins), and the deployment's `extra` ones, whose values it returns
    /// in order (`None` stays `None`): one client for all.
    /// A configuration given as `s3://` or `ssm:` is fetched first, with the files beside it, and
    /// read from its local copy (crate::config_source).
    pub async fn resolve_secrets(&mut self, extra: &[Option<String>]) -> Result<Vec<Option<String>>, String> {
        if let Some(local) = crate::config_source::localize(self.config.as_deref()).await? {
            self.config = Some(local);
        }
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let mut wanted = vec![
            nonempty(&self.openai_api_key_secret_arn).filter(|_| nonempty(&self.openai_api_key).is_none()),
            nonempty(&self.jwt_public_key_secret_arn).filter(|_| nonempty(&self.jwt_public_key).is_none()),
        ];
        wanted.extend_from_slice(extra);
        let mut resolved = crate::secrets::resolve(&wanted).await?;
        let extra = resolved.split_off(2);
        if let Some(key) = resolved[0].clone() {
            self.openai_api_key = Some(key);
        }
        if let Some(pem) = resolved[1].clone() {
            self.jwt_public_key = Some(pem);
        }
        Ok(extra)
    }

    /// The settings of a function running in Lambda, read from the environment alone (see
    /// [`from_env`]).
    pub fn from_env() -> Result<Settings, clap::Error> {
        from_env()
    }

    /// The auth mode these options describe; `in_lambda` picks the default (IAM there, the local
    /// header elsewhere).
    pub fn auth(&self, in_lambda: bool) -> Result<baton::auth::AuthMode, String> {
        use baton::auth::{AuthMode, JwtVerifier};
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let mode = nonempty(&self.auth).unwrap_or_else(|| if in_lambda { "iam" } else { "local" }.into());
        let (iss, aud) = (nonempty(&self.jwt_issuer), nonempty(&self.jwt_audience));
        match mode.as_str() {
            "local" if in_lambda => Err("BATON_AUTH=local is refused in Lambda: use iam or jwt".into()),
            "local" => Ok(AuthMode::LocalHeader),
            "iam" if !in_lambda => Err("BATON_AUTH=iam needs the Lambda platform to sign requests".into()),
            "iam" => Ok(AuthMode::Iam),
            "jwt" => {
                let verifier = match (nonempty(&self.jwt_public_key), nonempty(&self.jwt_hs256_secret)) {
                    (Some(pem), _) => JwtVerifier::rs256_pem(pem.as_bytes(), iss.as_deref(), aud.as_deref()),
                    (None, Some(secret)) => {
                        JwtVerifier::hs256(secret.as_bytes(), iss.as_deref(), aud.as_deref())
                    }
                    (None, None) => {
                        return Err("--auth jwt needs --jwt-public-key or --jwt-hs256-secret".into());
                    }
                };
                verifier.map(|v| AuthMode::Jwt(Box::new(v))).map_err(|e| e.to_string())
            }
            other => Err(format!("BATON_AUTH must be local, iam or jwt, not `{other}`")),
        }
    }
}

/// Reads an argument group from the environment alone: a command with no binary name and no
/// arguments, so clap still applies each field's `env` variable and default (and reports a value
/// it cannot parse). How a Lambda function, which gets no arguments, reads its settings.
pub fn from_env<T: Args + FromArgMatches>() -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("baton").no_binary_name(true));
    let matches = command.try_get_matches_from(std::iter::empty::<String>())?;
    T::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings read from variables every process has (`PATH`, `HOME`) and one nobody sets.
    #[derive(Debug, Args)]
    struct Probe {
        #[arg(long, env = "PATH")]
        path: String,
        #[arg(long, env = "BATON_SETTINGS_TEST_UNSET_VARIABLE", default_value_t = 7)]
        unset: u32,
    }

    #[derive(Debug, Args)]
    struct NotANumber {
        #[arg(long, env = "HOME")]
        home: u64,
    }

    #[test]
    fn the_environment_alone_sets_values_and_defaults_fill_the_rest() {
        // The test binary's own arguments (filters, --nocapture) are not read.
        let probe: Probe = from_env().expect("settings from the environment");
        assert_eq!(Some(probe.path.as_str()), std::env::var("PATH").ok().as_deref());
        assert_eq!(probe.unset, 7);
    }

    #[test]
    fn a_variable_that_does_not_parse_is_an_error_naming_it() {
        let err = from_env::<NotANumber>().expect_err("HOME is not a number");
        assert!(err.to_string().contains("--home"), "{err}");
    }

    #[test]
    fn settings_parse_from_an_empty_environment_list() {
        // Whatever the environment holds, every setting has a default or is optional.
        Settings::from_env().expect("the settings need no argument");
    }
}
