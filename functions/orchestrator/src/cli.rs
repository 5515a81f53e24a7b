//! Command-line options: the subcommands and their options, over the [`Settings`] shared with the
//! other functions. Every option can also be set by the environment variable it names.

use std::time::Duration;

use axum::http::HeaderValue;
use baton::config::{Config, RequestLimits};
use baton::http::EndpointLimits;
use baton::orchestrator::TurnRequest;
use baton::store::{new_episode_id, new_turn_id};
use baton::turn::{DisconnectPolicy, OnBusy, TurnLogSettings};
use baton_aws::settings::Settings;
use baton_reference::ReferenceSettings;
use clap::{Args as _, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Baton's orchestrator: an agents-as-tools chat endpoint.
///
/// With no OPENAI_API_KEY and no OPENAI_BASE_URL it runs on the offline model: deterministic
/// rules, no network, for demos and tests. Set either to use OpenAI or any compatible server.
/// A configuration file (--config) runs the agents and tools it declares; without one, the
/// reference deployment runs (docs/configuration.md).
#[derive(Parser)]
#[command(version, about, long_about)]
pub(crate) struct Args {
    #[command(subcommand)]
    /// What to run.
    pub(crate) command: Command,

    /// The runtime settings shared with the other functions.
    #[command(flatten)]
    pub(crate) settings: Settings,
}

/// The command line, and the reference deployment's own settings (the shopping agent,
/// Forethought) when the configuration is the reference's: with no file, or a file that says
/// `extends: reference`. A team's own file gets none of their flags, in `--help` or anywhere.
pub(crate) fn parse() -> (Args, Option<ReferenceSettings>) {
    let reference = reference_in_use(std::env::args_os().skip(1), std::env::var_os("BATON_CONFIG"));
    let mut command = Args::command();
    if reference {
        command = ReferenceSettings::augment_args(command);
    }
    let matches = command.get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let reference =
        reference.then(|| ReferenceSettings::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()));
    (args, reference)
}

/// Whether the configuration the arguments (`--config F`, `--config=F`) or `BATON_CONFIG` name is
/// the reference's: none, or one whose file says `extends: reference`. A file that cannot be read
/// is not (start-up then says why).
fn reference_in_use(args: impl Iterator<Item = std::ffi::OsString>, env: Option<std::ffi::OsString>) -> bool {
    let args: Vec<std::ffi::OsString> = args.collect();
    let mut file = env.filter(|f| !f.is_empty());
    for (i, arg) in args.iter().enumerate() {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            break;
        } else if arg == "--config" {
            file = args.get(i + 1).cloned();
        } else if let Some(path) = arg.strip_prefix("--config=") {
            file = Some(path.into());
        }
    }
    let Some(file) = file else { return true };
    std::fs::read_to_string(file)
        .is_ok_and(|yaml| baton::config::extends_of(&yaml).as_deref() == Some(baton_reference::REFERENCE))
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one chat turn in-process and print the stream as it arrives.
    Chat(ChatArgs),
    /// Serve the chat endpoint (POST / or /chat, Server-Sent Events) on a local address.
    Serve(ServeArgs),
    /// Serve every configured agent as an MCP tool: over stdio, or over
    /// streamable HTTP at /mcp with --http.
    Mcp(McpArgs),
    /// Check the configuration as start-up does and print its agents, their tools and models;
    /// with --connect, also reach what start-up reaches (MCP servers and the other tool
    /// sources). Exits non-zero with the file, line and field, or what could not be reached.
    Check(CheckArgs),
}

/// Options of `check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Also build what start-up builds that reaches out (MCP servers start and list their tools),
    /// so the tree lists every tool.
    #[arg(long)]
    pub(crate) connect: bool,
}

/// Options of `mcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
}

/// Options of `chat`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    /// What the user says.
    message: String,

    /// Continue this episode (a new one is minted otherwise).
    #[arg(long)]
    pub(crate) episode_id: Option<String>,

    /// The user the conversation belongs to.
    #[arg(long, default_value = "local")]
    user: String,

    /// Print the raw SSE stream instead of readable text.
    #[arg(long)]
    pub(crate) raw: bool,

    /// Longest a turn runs: then it ends with `completed` (status `partial`), keeping what was
    /// produced.
    #[arg(long, env = "BATON_TURN_DEADLINE_SECS", default_value_t = EndpointLimits::default().turn_deadline.as_secs())]
    turn_deadline_secs: u64,
}

impl ChatArgs {
    /// The turn this command describes.
    pub(crate) fn turn(&self) -> TurnRequest {
        let episode = self.episode_id.clone().unwrap_or_else(new_episode_id);
        TurnRequest::new(episode, new_turn_id(), self.user.clone(), self.message.clone())
    }

    /// When a turn started now must end.
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(self.turn_deadline_secs.max(1))
    }
}

/// The chat endpoint's settings, `serve`'s and the Lambda function's alike: request limits,
/// heartbeat pacing, the turn and body-read time limits, and the origins allowed from browsers.
/// `serve` takes them as flags or variables; the Lambda function reads the variables alone
/// ([`baton_aws::settings::from_env`]).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EndpointSettings {
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
    pub(crate) fn cors_origins(&self) -> Result<Vec<HeaderValue>, String> {
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
    pub(crate) fn endpoint_limits(
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
    pub(crate) fn apply(&self, config: &mut Config) {
        config.limits =
            RequestLimits { max_body_bytes: self.max_body_bytes, max_message_chars: self.max_message_chars };
        config.heartbeat = Duration::from_secs(self.heartbeat_secs);
    }
}

/// Options of `serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "BATON_ADDR", default_value = "127.0.0.1:3000")]
    pub(crate) addr: String,

    /// The endpoint's settings.
    #[command(flatten)]
    pub(crate) endpoint: EndpointSettings,

    /// Longest a connection may wait for a complete request head, idle keep-alive time included
    /// (then it is closed).
    #[arg(long, env = "BATON_REQUEST_HEAD_TIMEOUT_SECS", default_value_t = EndpointLimits::default().request_head_timeout.as_secs())]
    request_head_timeout_secs: u64,

    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "BATON_MAX_CONNECTIONS", default_value_t = EndpointLimits::default().max_connections)]
    max_connections: usize,
}

impl ServeArgs {
    /// The time and connection limits these options set; every one must be above zero.
    pub(crate) fn endpoint_limits(&self) -> Result<EndpointLimits, String> {
        let head_timeout = Duration::from_secs(self.request_head_timeout_secs);
        self.endpoint.endpoint_limits(head_timeout, self.max_connections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_no_file_or_a_file_that_extends_the_reference_brings_the_reference_settings() {
        let dir = tempfile::tempdir().unwrap();
        let team = dir.path().join("team.yaml");
        std::fs::write(&team, "entry: a\nagents:\n  - {name: a, instruction: x}\n").unwrap();
        let extends = dir.path().join("extends.yaml");
        std::fs::write(&extends, "extends: reference\n").unwrap();
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>().into_iter();
        assert!(reference_in_use(args(&["chat", "hi"]), None), "no file: the reference demo");
        let team_arg = format!("--config={}", team.display());
        assert!(!reference_in_use(args(&["chat", &team_arg]), None));
        assert!(!reference_in_use(args(&["chat", "hi"]), Some(team.clone().into())));
        let path = extends.to_str().unwrap();
        assert!(
            reference_in_use(args(&["--config", path, "chat", "hi"]), Some(team.into())),
            "the flag wins"
        );
        assert!(!reference_in_use(args(&["--config", "/nonexistent.yaml"]), None));
    }

    fn origins(value: &str) -> Result<Vec<HeaderValue>, String> {
        #[derive(Parser)]
        struct Serve {
            #[command(flatten)]
            serve: ServeArgs,
        }
        Serve::try_parse_from(["serve", "--cors-origin", value]).unwrap().serve.endpoint.cors_origins()
    }

    #[test]
    fn cors_origins_are_origins_as_browsers_send_them() {
        let ok = origins("https://chat.example.com, http://localhost:8000,http://[::1]:8000").unwrap();
        assert_eq!(ok, ["https://chat.example.com", "http://localhost:8000", "http://[::1]:8000"]);
        assert_eq!(origins("").unwrap(), Vec::<HeaderValue>::new(), "an empty variable allows none");
        for bad in [
            "*",
            "chat.example.com",
            "https://chat.example.com/",
            "https://Chat.example.com",
            "ftp://a",
            "https://",
        ] {
            let err = origins(bad).unwrap_err();
            assert!(err.contains("BATON_CORS_ORIGINS") && err.contains(bad), "{bad}: {err}");
        }
    }
}
