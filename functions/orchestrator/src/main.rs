//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses.

mod cli;
mod render;

use std::sync::Arc;

use baton::config::Backends;
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
    let args = cli::Args::parse();
    // The store first: agents keep their per-episode state in it.
    let (history, store) = match args.history().await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let backends = Backends::over_store(history.store().clone());
    let (config, orchestrator) = match args.config().and_then(|c| c.build_with(backends).map(|o| (c, o))) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!("{}\n{}\n{store}", config.describe_models(), config.describe_support());
    match args.command {
        cli::Command::Chat(chat) => {
            let mut turn = chat.turn();
            let key = match history.begin(&mut turn, None).await {
                Ok(key) => key,
                Err(e) => {
                    eprintln!("error: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let turn_id = turn.turn_id.clone();
            let mut events = history.record(key, turn_id, orchestrator.run_turn(turn));
            let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
            while let Some(event) = events.next().await {
                if let Err(e) = out.event(&event) {
                    eprintln!("error: cannot write output: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
            out.exit_code()
        }
        cli::Command::RoutingEval(eval) => routing_eval(&config, &orchestrator, &eval).await,
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
            let service = Arc::new(ChatService::new(orchestrator, history, config.limits, config.heartbeat));
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

async fn routing_eval(
    config: &baton::config::Config,
    orchestrator: &baton::orchestrator::Orchestrator,
    args: &cli::RoutingEvalArgs,
) -> std::process::ExitCode {
    use baton::eval;
    let (yaml, origin) = match &args.suite {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(y) => (y, path.display().to_string()),
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", path.display());
                return std::process::ExitCode::from(2);
            }
        },
        None => (eval::REFERENCE_SUITE.to_owned(), "data/routing/scenarios.yaml".to_owned()),
    };
    let suite = match eval::load_suite(&yaml, &origin) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let model = orchestrator.router().model();
    print!("{}", eval::run_suite(model, &config.turn, &suite, args.concurrency).await);
    if args.faults {
        println!();
        print!("{}", eval::format_faults(&eval::run_faults(&config.turn, &suite).await));
    }
    std::process::ExitCode::SUCCESS
}
