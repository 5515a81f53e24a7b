//! A function's composition root, the orchestrator binary's and a team's own: the endpoint's
//! settings ([`EndpointSettings`], [`ServeSettings`]), the agents built from a started
//! [`Function`] and its [`Backends`] ([`connect`]), the chat endpoint over them ([`service`]),
//! and [`main`], which serves a team's assistant on a local address or as the Lambda function
//! with the same wiring.
//!
//! A team adds Rust tools of its own to the [`Backends`] ([`Backends::with_tool`]); its
//! configuration file (`BATON_CONFIG`) names them in an agent's `tools:`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use baton::auth::AuthMode;
use baton::config::{Config, RequestLimits};
use baton::http::{ChatService, EndpointLimits};
use baton::orchestrator::Orchestrator;
use baton::telemetry::TurnReporter;
use baton::turn::{DisconnectPolicy, OnBusy, TurnLogSettings};
use baton::wiring::Backends;

use crate::settings::Settings;
use crate::startup::{Function, exit};

/// The chat endpoint's settings, `serve`'s and the Lambda function's alike: request limits,
/// heartbeat pacing, the turn and body-read time limits, and the origins allowed from browsers.
/// `serve` takes them as flags or variables; the Lambda function reads the variables alone
/// ([`crate::settings::from_env`]).
#[derive(Debug, Clone, clap::Args)]
pub struct EndpointSettings {
    /// Largest request body, in bytes.
    #[arg(long, env = "BATON_MAX_BODY_BYTES", default_value_t = RequestLimits::default().max_body_bytes)]
    max_body_bytes: usize,

    /// Longest message, in characters.
    #[arg(long, env = "BATON_MAX_MESSAGE_CHARS", default_value_t = RequestLimits::default().max_message_chars)]
    max_message_chars: usize,

    /// Seconds of silence before an SSE heartbeat comment is sent.
    #[arg(long, env = "BATON_HEARTBEAT_SECS", default_value_t = 10)]
    heartbeat_secs: u64,

    /// Longest a turn runs; then it ends with `completed` (status partial), keeping its output.
    /// In Lambda the invocation's deadline cuts it earlier if nearer.
    #[arg(long, env = "BATON_TURN_DEADLINE_SECS", default_value_t = EndpointLimits::default().turn_deadline.as_secs())]
    turn_deadline_secs: u64,

    /// Longest the request body may take to arrive (then 408).
    #[arg(long, env = "BATON_BODY_READ_TIMEOUT_SECS", default_value_t = EndpointLimits::default().body_read_timeout.as_secs())]
    body_read_timeout_secs: u64,

    /// Web origins whose pages may call the endpoint from a browser (CORS), as a browser sends
    /// them: `scheme://host[:port]`, comma-separated or the flag repeated. None by default. In
    /// Lambda they apply to REST API answers; the Function URL adds its own CORS headers.
    #[arg(long = "cors-origin", env = "BATON_CORS_ORIGINS", value_delimiter = ',', value_name = "ORIGIN")]
    cors_origins: Vec<String>,

    /// What happens to a turn whose client leaves before `completed`, unless its request says
    /// (`on_disconnect`): `continue` runs it to the end (its reply recorded, its events logged for
    /// the client to rejoin), `cancel` stops it and keeps what it produced as `partial`.
    #[arg(long, env = "BATON_ON_DISCONNECT", default_value = "continue", value_parser = parse_disconnect_policy)]
    on_disconnect: DisconnectPolicy,

    /// What a message does when its conversation's turn still runs, unless its request says
    /// (`on_busy`): `enqueue` runs it after that turn, which it then sees; `reject` refuses it
    /// with a 409 naming the running turn; `interrupt` stops that turn (keeping its partial) and
    /// runs it; `parallel` runs it beside that turn.
    #[arg(long, env = "BATON_ON_BUSY", default_value = "enqueue", value_parser = parse_busy_policy)]
    on_busy: OnBusy,

    /// How many messages may wait for one conversation's running turn (`on_busy: enqueue`); the
    /// next is refused with a 429.
    #[arg(long, env = "BATON_BUSY_QUEUE", default_value_t = baton::turn::DEFAULT_QUEUE_LIMIT)]
    busy_queue: usize,

    /// Whether each turn's events are logged in the store as they stream, so a client can rejoin
    /// the turn on any instance and a stop works across instances (`false`: only in this process).
    #[arg(long, env = "BATON_TURN_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    turn_log: bool,

    /// How long a tool call held for a person's approval waits for its answer, in hours; answered
    /// later, it is refused as expired (docs/approvals.md).
    #[arg(long, env = "BATON_APPROVAL_TTL_HOURS", default_value_t = 24.0, value_parser = parse_ttl_hours)]
    approval_ttl_hours: f64,
}

fn parse_ttl_hours(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(h) if h.is_finite() && h > 0.0 && h <= 24.0 * 365.0 => Ok(h),
        _ => Err(format!("`{value}` must be a number of hours above 0 and at most 8760")),
    }
}

fn parse_disconnect_policy(value: &str) -> Result<DisconnectPolicy, String> {
    value.parse()
}

fn parse_busy_policy(value: &str) -> Result<OnBusy, String> {
    value.parse()
}

impl EndpointSettings {
    /// How long an interrupt waits for its answer.
    pub(crate) fn approval_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.approval_ttl_hours * 3600.0)
    }

    /// The disconnect policy and how turns are logged.
    pub(crate) fn turns(&self) -> (DisconnectPolicy, TurnLogSettings) {
        (self.on_disconnect, TurnLogSettings { enabled: self.turn_log, ..TurnLogSettings::default() })
    }

    /// What a message does while its conversation's turn runs, and how many may wait.
    pub(crate) fn busy(&self) -> (OnBusy, usize) {
        (self.on_busy, self.busy_queue)
    }

    /// The allowed CORS origins, checked: each must be an origin a browser sends (an empty list
    /// item is skipped, so an empty variable allows none).
    pub fn cors_origins(&self) -> Result<Vec<HeaderValue>, String> {
        let mut origins = Vec::new();
        for origin in self.cors_origins.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            let host = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            let valid = host.is_some_and(|h| {
                !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
            });
            if !valid || origin.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(format!(
                    "BATON_CORS_ORIGINS: `{origin}` is not an origin: write it as a browser sends it, \
                     e.g. https://chat.example.com or http://localhost:8000 (lower case, no path, no *)"
                ));
            }
            origins.push(HeaderValue::from_str(origin).map_err(|e| format!("BATON_CORS_ORIGINS: {e}"))?);
        }
        Ok(origins)
    }

    /// The endpoint's limits: these time limits, and `serve`'s connection limits (defaults where
    /// the platform owns the connections); every one must be above zero.
    pub fn endpoint_limits(
        &self,
        request_head_timeout: Duration,
        max_connections: usize,
    ) -> Result<EndpointLimits, String> {
        let limits = EndpointLimits {
            turn_deadline: Duration::from_secs(self.turn_deadline_secs),
            body_read_timeout: Duration::from_secs(self.body_read_timeout_secs),
            request_head_timeout,
            max_connections,
        };
        let zero = [
            ("BATON_TURN_DEADLINE_SECS", limits.turn_deadline.is_zero()),
            ("BATON_BODY_READ_TIMEOUT_SECS", limits.body_read_timeout.is_zero()),
            ("BATON_REQUEST_HEAD_TIMEOUT_SECS", limits.request_head_timeout.is_zero()),
            ("BATON_MAX_CONNECTIONS", limits.max_connections == 0),
        ];
        match zero.iter().find(|(_, is_zero)| *is_zero) {
            Some((name, _)) => Err(format!("{name} must be above zero")),
            None => Ok(limits),
        }
    }

    /// Sets `config`'s request limits and heartbeat to these.
    pub fn apply(&self, config: &mut Config) {
        config.limits =
            RequestLimits { max_body_bytes: self.max_body_bytes, max_message_chars: self.max_message_chars };
        config.heartbeat = Duration::from_secs(self.heartbeat_secs);
    }
}

/// `serve`'s settings: the address, the endpoint's settings, and the connection limits.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeSettings {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "BATON_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: String,

    /// The endpoint's settings.
    #[command(flatten)]
    pub endpoint: EndpointSettings,

    /// Longest a connection may wait for a complete request head, idle keep-alive time included
    /// (then it is closed).
    #[arg(long, env = "BATON_REQUEST_HEAD_TIMEOUT_SECS", default_value_t = EndpointLimits::default().request_head_timeout.as_secs())]
    request_head_timeout_secs: u64,

    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "BATON_MAX_CONNECTIONS", default_value_t = EndpointLimits::default().max_connections)]
    max_connections: usize,
}

impl ServeSettings {
    /// The time and connection limits these options set; every one must be above zero.
    pub fn endpoint_limits(&self) -> Result<EndpointLimits, String> {
        let head_timeout = Duration::from_secs(self.request_head_timeout_secs);
        self.endpoint.endpoint_limits(head_timeout, self.max_connections)
    }

    /// The limits in Lambda, where the platform owns the connections: these time limits, and
    /// the defaults for the connection limits (which do not apply).
    pub(crate) fn lambda_limits(&self) -> Result<EndpointLimits, String> {
        let defaults = EndpointLimits::default();
        self.endpoint.endpoint_limits(defaults.request_head_timeout, defaults.max_connections)
    }
}

/// Builds the configuration's agents over `backends` (a deployment's extensions and a team's
/// own tools in them, the store in them), with its remote agents reached, its MCP servers
/// connected and its declared tools read; `reporter` gets each turn's figures. The backends
/// come back too, as built (`mcp` serves agents over them, `serve` its other A2A agents).
pub async fn connect(
    config: &Config,
    mut backends: Backends,
    reporter: Option<Arc<dyn TurnReporter>>,
) -> Result<(Arc<Orchestrator>, Backends), String> {
    backends.reporter = reporter;
    backends.remote = crate::settings::remote_agents(config).await;
    backends.signer = crate::sigv4::a2a_signer(config).await;
    // MCP servers (shared and agents' own) start and list their tools once, here (in Lambda:
    // during init), before any agent is built.
    backends.mcp = baton::mcp::connect_all(&config.all_mcp_servers()).await.map_err(|e| match e {
        baton::mcp::McpError::Config(e) => {
            format!("invalid MCP configuration: {}: {}", config.locate(&e.path), e.reason)
        }
        e => e.to_string(),
    })?;
    // Declared tools (OpenAPI documents read, Lambda tools, their secrets) before the agents.
    crate::tool_sources::declared_tools(config, &mut backends).await?;
    let orchestrator = baton::wiring::build(config, backends.clone()).map_err(|e| e.to_string())?;
    Ok((orchestrator, backends))
}

/// The chat endpoint over `orchestrator` (configured by `config`), recording into `function`'s
/// history, with the ratings and other A2A agents (`a2a: {agents}`) of `backends`, these callers
/// and limits, and the endpoint's settings (allowed origins, disconnect and busy policies, turn
/// log, approval expiry).
pub fn service(
    function: &Function,
    config: &Config,
    orchestrator: Arc<Orchestrator>,
    backends: &Backends,
    auth: AuthMode,
    limits: EndpointLimits,
    endpoint: &EndpointSettings,
) -> Result<Arc<ChatService>, String> {
    let cors = endpoint.cors_origins()?;
    let (on_disconnect, turn_log) = endpoint.turns();
    let ratings = baton::wiring::rating_sinks(config, backends);
    let served = baton::wiring::a2a_served(config, backends).map_err(|e| e.to_string())?;
    let service = ChatService::new(orchestrator, function.history.clone(), config.limits, config.heartbeat);
    Ok(Arc::new(
        service
            .with_auth(auth)
            .with_endpoint_limits(limits)
            .with_cors_origins(cors)
            .with_ratings(ratings)
            .with_disconnect_policy(on_disconnect)
            .with_busy_policy(endpoint.busy().0, endpoint.busy().1)
            .with_turn_log(turn_log)
            .with_approval_ttl(endpoint.approval_ttl())
            .with_a2a_card(baton::wiring::a2a_card(config))
            .with_a2a_agents(served),
    ))
}

/// Serves `service` on `addr` until Ctrl-C, printing `listening on http://ADDR` first (tests and
/// benchmarks wait for that line).
pub async fn serve(service: Arc<ChatService>, addr: &str) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| addr.to_owned());
    println!("listening on http://{bound}");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    baton::http::serve(listener, service, shutdown).await.map_err(|e| format!("server failed: {e}"))
}

/// A team's assistant, `name` in logs and traces: the runtime's defaults under the team's
/// configuration file (`BATON_CONFIG`), its Rust tools added to the backends by `tools`, served as
/// the Lambda function when the Lambda runtime started it, else on `BATON_ADDR`
/// (`127.0.0.1:3000`) by `serve`, every setting from the environment, as the orchestrator
/// binary's. Exit code 2 for a start-up that failed, 1 for a server that did.
pub async fn main(name: &str, tools: impl FnOnce(Backends) -> Backends) -> ExitCode {
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let built = async {
        let settings = Settings::from_env().map_err(|e| e.to_string())?;
        let serve: ServeSettings = crate::settings::from_env().map_err(|e| e.to_string())?;
        let mut function = Function::start(name, settings, Config::default(), &[]).await?;
        serve.endpoint.apply(&mut function.config);
        let config = function.config.clone();
        let backends = tools(Backends::over_store(function.history.store().clone()));
        let reporter: Option<Arc<dyn TurnReporter>> =
            in_lambda.then(|| Arc::new(baton::telemetry::emf::EmfReporter::stdout(name)) as _);
        let (orchestrator, backends) = connect(&config, backends, reporter).await?;
        let (auth, limits) = match in_lambda {
            true => (function.settings.auth(true)?, serve.lambda_limits()?),
            false => (function.settings.auth(false)?, serve.endpoint_limits()?),
        };
        let service = service(&function, &config, orchestrator, &backends, auth, limits, &serve.endpoint)?;
        Ok::<_, String>((service, function.traces, serve.addr))
    };
    let (service, traces, addr) = match built.await {
        Ok(built) => built,
        Err(e) => return exit(Err(e), 2),
    };
    let served = match in_lambda {
        true => crate::lambda_edge::run(service, traces).await.map_err(|e| e.to_string()),
        false => serve(service, &addr).await,
    };
    exit(served, 1)
}
