//! `orchestrator check [--connect]`: the configuration checked by start-up's own code, then its
//! tree printed (agents → tools with their kind and approval rule → model and price).
//!
//! Without `--connect` it runs start-up up to what reaches out: the settings and the file
//! ([`crate::start`]), the deployment's backends and the composition root's checks
//! ([`baton::wiring::check`]). With `--connect` it runs start-up's whole build ([`crate::build`]):
//! MCP servers start and list their tools, every tool source the composition root builds is
//! built, so the tree lists every tool, each Lambda tool's function is reached with a `DryRun`
//! invoke (it exists and this role may invoke it; nothing runs), and each remote agent is
//! reached ([`baton_aws::reach`]: an A2A agent's card fetched, an NDJSON endpoint, a function's
//! `DryRun`). A failure is the same one-line error start-up prints.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use baton::config::Config;
use baton::config::agents::{AgentKind, AgentSpec, ApprovalSpec, RemoteSpec};
use baton::tool::Tool;
use baton::wiring::Backends;
use baton_aws::startup::{Function, exit};
use baton_reference::Deployment;

use crate::cli::CheckArgs;

/// Checks `deployment` (started as `function`) and prints its tree; exit code 1 when the
/// composition root refuses it or something cannot be reached.
pub(crate) async fn run(function: &Function, deployment: &Deployment, args: &CheckArgs) -> ExitCode {
    let checked = if args.connect {
        match crate::build(function, deployment, None).await {
            // Built; the Lambda tools are reached too, without running them.
            Ok((_, backends)) => {
                let config = &deployment.config;
                match baton_aws::lambda_tool::reach_all(config).await {
                    Ok(()) => baton_aws::reach::reach_remote_agents(config, baton_aws::reach::REACH_TIMEOUT)
                        .await
                        .map(|()| backends),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    } else {
        deployment.backends(Some(function.history.store().clone())).map_err(|e| e.to_string()).and_then(
            |mut backends| {
                baton::wiring::check(&deployment.config, &mut backends).map_err(|e| e.to_string())?;
                Ok(backends)
            },
        )
    };
    match checked {
        Ok(backends) => {
            print!("{}", tree(&deployment.config, &backends, args.connect));
            ExitCode::SUCCESS
        }
        Err(e) => exit(Err(e), 1),
    }
}

/// The agents of `config` in its order, each with what it runs on and its tools.
pub(crate) fn tree(config: &Config, backends: &Backends, connected: bool) -> String {
    let mut out = String::new();
    for spec in &config.agents.agents {
        let entry = if spec.name == config.agents.entry { " (entry)" } else { "" };
        let _ = writeln!(out, "{}{entry}: {}", spec.name, runs_on(config, spec));
        for (name, kind) in tools(spec, backends, connected) {
            let _ = writeln!(out, "  {name}: {kind}{}", approval(spec, &name));
        }
    }
    out
}

/// What an agent runs on: its kind, where it runs, its model and that model's price.
fn runs_on(config: &Config, spec: &AgentSpec) -> String {
    match (&spec.remote, &spec.kind) {
        (Some(RemoteSpec { a2a: Some(url), .. }), _) => {
            // Its usage events name the agent as their model (docs/observability.md).
            format!("remote A2A agent at {url}, usage {}", priced(config, &spec.name))
        }
        (Some(RemoteSpec { url: Some(url), .. }), _) => {
            format!("remote at {url}, usage priced by its models")
        }
        (Some(RemoteSpec { function: Some(f), .. }), _) => {
            format!("remote Lambda function {f}, usage priced by its models")
        }
        (_, AgentKind::Builtin(kind)) => format!("{kind} (built by the deployment)"),
        _ => {
            let model = if config.models.is_offline() {
                "offline"
            } else {
                spec.model.as_deref().unwrap_or(&config.models.orchestrator)
            };
            format!("llm, model {model} {}", priced(config, model))
        }
    }
}

/// The price `model` has in the table, or that it has none.
fn priced(config: &Config, model: &str) -> String {
    match config.prices.models.get(model) {
        Some(price) => format!("at {price}"),
        None => format!("with no price for `{model}` (its cost is not counted)"),
    }
}

/// An agent's tools as its model sees them, with their kind: its `tools:` (an MCP pattern's
/// tools once connected), its own MCP servers' tools, and its agents as tools.
fn tools(spec: &AgentSpec, backends: &Backends, connected: bool) -> Vec<(String, String)> {
    let listed = |tools: Vec<Arc<dyn Tool>>| -> Vec<(String, String)> {
        tools.iter().map(|t| (t.name().to_owned(), t.kind().to_owned())).collect()
    };
    let mut out = Vec::new();
    let mut patterns: Vec<String> = Vec::new();
    for tool in &spec.tools {
        if baton::mcp::is_mcp_pattern(tool) {
            patterns.push(tool.clone());
        } else if let Some(found) = find(backends, tool) {
            out.extend(listed(vec![found]));
        }
    }
    for server in spec.mcp_servers.keys() {
        if !spec.tools.iter().any(|t| baton::mcp::pattern_server(t) == Some(server.as_str())) {
            patterns.push(format!("mcp__{server}__*"));
        }
    }
    for pattern in patterns {
        match backends.mcp.select(&pattern) {
            Ok(tools) if connected => out.extend(listed(tools)),
            _ => out.push((pattern, "mcp (its tools are listed with --connect)".into())),
        }
    }
    let prefix = if spec.routing.is_some() { "ask_" } else { "agent__" };
    out.extend(spec.agents.iter().map(|a| (format!("{prefix}{a}"), "agent".to_owned())));
    out
}

/// The tool named `name` among the team's own and the deployment's extensions'.
fn find(backends: &Backends, name: &str) -> Option<Arc<dyn Tool>> {
    if let Some(tool) = backends.tools.iter().find(|t| t.name() == name) {
        return Some(tool.clone());
    }
    backends.extensions.iter().find(|e| e.tool_names().contains(&name)).and_then(|e| e.tool(name))
}

/// `, needs approval …` when `spec` lists `tool` in `needs_approval`.
fn approval(spec: &AgentSpec, tool: &str) -> String {
    match spec.needs_approval.get(tool) {
        Some(ApprovalSpec::Always(true)) => ", needs approval".into(),
        Some(ApprovalSpec::Rule(rule)) => {
            let when = if rule.when.is_some() { " when its arguments match the rule" } else { "" };
            let why = rule.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            format!(", needs approval{when}{why}")
        }
        _ => String::new(),
    }
}
