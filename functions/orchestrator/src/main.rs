//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses.

mod chat;
mod cli;
mod lambda;
mod mcp;
mod render;

use std::sync::Arc;

use baton::http::ChatService;
use clap::Parser;

fn main() -> std::process::ExitCode {
    runtime().block_on(run())
}

/// One worker thread unless `TOKIO_WORKER_THREADS` says otherwise. A turn is a handful of tasks
/// (the connection, the turn, its model streams) that wake each other dozens of times; on one
/// worker those wake-ups stay on one thread instead of bouncing between two through futexes,
/// which cut `serve`'s CPU per turn by about a fifth (docs/benchmarks.md, "Where a turn's CPU
/// goes"). The embedded store's flushes (one per turn, with its `fdatasync`) run on the blocking pool.
fn runtime() -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder.enable_all().build().expect("the runtime starts")
}

async fn run() -> std::process::ExitCode {
    let traces = baton_aws::settings::init_logging("baton-orchestrator");
    // In Lambda there are no arguments: every option comes from the environment.
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let mut args =
        if in_lambda { cli::Args::from_env().unwrap_or_else(|e| e.exit()) } else { cli::Args::parse() };
    match args.settings.resolve_secrets(&[args.reference.forethought_token_secret()]).await {
        Ok(resolved) => {
            if let Some(token) = resolved.into_iter().next().flatten() {
                args.reference.set_forethought_token(token);
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    // The store first: agents keep their per-episode state in it.
    let (history, store) = match args.settings.history().await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let deployment = match args.deployment() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut backends = match deployment.backends(Some(history.store().clone())) {
        Ok(backends) => backends,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if in_lambda {
        // One CloudWatch EMF line per turn on stdout (docs/observability.md).
        let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "orchestrator".into());
        backends.reporter = Some(Arc::new(baton::telemetry::emf::EmfReporter::stdout(function)));
    }
    let config = deployment.config.clone();
    backends.remote = baton_aws::settings::remote_agents(&config).await;
    // MCP servers (shared and agents' own) start and list their tools once, here (in Lambda:
    // during init), before any agent is built: `mcp` serves agents that use them too.
    backends.mcp = match baton::mcp::connect_all(&config.all_mcp_servers()).await {
        Ok(tools) => tools,
        Err(baton::mcp::McpError::Config(e)) => {
            eprintln!("error: invalid MCP configuration: {}: {}", config.locate(&e.path), e.reason);
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mcp_backends = backends.clone();
    let ratings = baton::wiring::rating_sinks(&config, &backends);
    let built = baton::wiring::build(&config, backends).map_err(|e| e.to_string()).and_then(|orchestrator| {
        let endpoint = (args.endpoint_limits()?, args.cors_origins()?);
        Ok((orchestrator, args.settings.auth(in_lambda)?, endpoint))
    });
    let (orchestrator, auth, (endpoint, cors)) = match built {
        Ok(built) => built,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!("{}\n{}\n{store}", config.describe_models(), deployment.describe_support());
    let iam = lambda::is_iam(&auth);
    let for_service = orchestrator.clone();
    let service = move |history| {
        let service = ChatService::new(for_service, history, config.limits, config.heartbeat);
        Arc::new(
            service
                .with_auth(auth)
                .with_endpoint_limits(endpoint)
                .with_cors_origins(cors)
                .with_ratings(ratings),
        )
    };
    if in_lambda {
        return match lambda::run(service(history), iam, traces).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match args.command {
        cli::Command::Chat(chat) => chat::run(&orchestrator, &history, &chat).await,
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
