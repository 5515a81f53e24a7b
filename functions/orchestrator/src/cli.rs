//! Command-line options: the subcommands and their options, over the [`Settings`] shared with the
//! other functions. Every option can also be set by the environment variable it names.

use std::time::Duration;

use baton::http::EndpointLimits;
use baton::orchestrator::TurnRequest;
use baton::store::{new_episode_id, new_turn_id};
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

pub(crate) use baton_aws::app::{EndpointSettings, ServeSettings as ServeArgs};

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

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
