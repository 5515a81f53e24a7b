//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses.

mod cli;
mod lambda;
mod render;
mod routing_eval;

use std::sync::Arc;

use baton::http::ChatService;
use clap::Parser;
use futures::StreamExt;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // In Lambda there are no arguments: every option comes from the environment.
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let args = if in_lambda { cli::Args::parse_from(["orchestrator", "serve"]) } else { cli::Args::parse() };
    let built = args.config().map_err(|e| e.to_string()).and_then(|c| {
        let orchestrator = c.build().map_err(|e| e.to_string())?;
        Ok((c, orchestrator, args.auth(in_lambda)?))
    });
    let (config, orchestrator, auth) = match built {
        Ok(built) => built,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!("{}", config.describe_models());
    eprintln!("{}", config.describe_support());
    if in_lambda {
        let iam = lambda::is_iam(&auth);
        let service =
            Arc::new(ChatService::new(orchestrator, config.limits, config.heartbeat).with_auth(auth));
        return match lambda::run(service, iam).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match args.command {
        cli::Command::Chat(chat) => {
            let turn = chat.turn();
            let mut events = orchestrator.run_turn(turn);
            let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
            while let Some(event) = events.next().await {
                if let Err(e) = out.event(&event) {
                    eprintln!("error: cannot write output: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
            out.exit_code()
        }
        cli::Command::RoutingEval(eval) => routing_eval::run(&config, &orchestrator, &eval).await,
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
            let service =
                Arc::new(ChatService::new(orchestrator, config.limits, config.heartbeat).with_auth(auth));
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            match baton::http::serve(listener, service, shutdown).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: server failed: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
