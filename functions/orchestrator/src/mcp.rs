//! `orchestrator mcp`: the agents the configuration serves over MCP (`mcp: {agents: [...]}`, by
//! default the entry agent alone), each an MCP tool, over stdio or streamable HTTP; each call a
//! turn started by `turns`, as the endpoint's are.

use baton::config::Config;
use baton::mcp_server::{McpAgent, serve_http, serve_stdio};
use baton::turn::Turns;
use baton::wiring::{Backends, orchestrator_of};

use crate::cli::McpArgs;

/// Builds the agents and serves them until the client leaves (stdio) or Ctrl-C (HTTP).
pub(crate) async fn run(
    config: &Config,
    backends: &Backends,
    turns: Turns,
    args: &McpArgs,
) -> std::process::ExitCode {
    let mut agents = Vec::new();
    for name in config.agents.mcp_served() {
        let spec = config.agents.get(name).expect("validated");
        match orchestrator_of(config, &spec.name, backends) {
            Ok(agent) => {
                let description = if spec.description.trim().is_empty() {
                    format!("Ask the {} agent.", spec.name)
                } else {
                    spec.description.clone()
                };
                agents.push(McpAgent::new(agent, description));
            }
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let served = match &args.http {
        None => serve_stdio(agents, turns).await,
        Some(addr) => {
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("error: cannot listen on {addr}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| addr.clone());
            // Tests wait for this line.
            println!("MCP endpoint on http://{bound}/mcp");
            serve_http(listener, agents, turns, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        }
    };
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
