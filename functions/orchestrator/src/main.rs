//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses.

mod chat;
mod lambda;
mod mcp;
mod render;
mod routing_eval;

use std::sync::Arc;

use baton::config::Backends;
use baton::http::ChatService;
use clap::Parser;
use orchestrator::cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::init_logging();
    // In Lambda there are no arguments: every option comes from the environment.
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let mut args = if in_lambda { cli::Args::from_env() } else { cli::Args::parse() };
    if let Err(e) = args.resolve_secrets().await {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    // The store first: agents keep their per-episode state in it.
    let (history, store) = match args.history().await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut backends = Backends::over_store(history.store().clone());
    backends.remote_shopping = args.remote_shopping().await;
    let mcp_backends = backends.clone();
    let built = args.config().map_err(|e| e.to_string()).and_then(|c| {
        let orchestrator = c.build_with(backends).map_err(|e| e.to_string())?;
        Ok((c, orchestrator, args.auth(in_lambda)?))
    });
    let (config, orchestrator, auth) = match built {
        Ok(built) => built,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!("{}\n{}\n{store}", config.describe_models(), config.describe_support());
    let iam = lambda::is_iam(&auth);
    let for_service = orchestrator.clone();
    let service = move |history| {
        Arc::new(ChatService::new(for_service, history, config.limits, config.heartbeat).with_auth(auth))
    };
    if in_lambda {
        return match lambda::run(service(history), iam).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match args.command {
        cli::Command::Chat(chat) => chat::run(&orchestrator, &history, &chat).await,
        cli::Command::RoutingEval(eval) => routing_eval::run(&config, &orchestrator, &eval).await,
        cli::Command::Mcp(mcp) => mcp::run(&config, &mcp_backends, &mcp).await,
        cli::Command::Serve(serve) => {
            let listener = match tokio::net::TcpListener::bind(&serve.addr).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("error: cannot listen on {}: {e}", serve.addr);
                    return std::process::ExitCode::FAILURE;
                }
            };
            let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| serve.addr.clone());
            // Tests and benchmarks wait for this line.
            println!("listening on http://{addr}");
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            match baton::http::serve(listener, service(history), shutdown).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: server failed: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
