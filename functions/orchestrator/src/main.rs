//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses. In Lambda (no arguments)
//! it is the chat function, with its endpoint settings read from its environment
//! ([`lambda::main`]).

mod chat;
mod cli;
mod lambda;
mod mcp;
mod render;
mod routing_eval;

use std::process::ExitCode;
use std::sync::Arc;

use baton::auth::AuthMode;
use baton::http::{ChatService, EndpointLimits};
use baton::orchestrator::Orchestrator;
use baton::telemetry::TurnReporter;
use baton::wiring::Backends;
use baton_aws::startup::{Function, exit};
use clap::Parser;

fn main() -> ExitCode {
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

/// The name of the orchestrator's logs and traces.
const SERVICE: &str = "baton-orchestrator";

async fn run() -> ExitCode {
    // In Lambda there are no arguments: every option comes from the environment.
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        return lambda::main().await;
    }
    let args = cli::Args::parse();
    let mut function = match Function::start(SERVICE, args.settings).await {
        Ok(function) => function,
        Err(e) => return exit(Err(e), 2),
    };
    if let cli::Command::Serve(serve) = &args.command {
        serve.endpoint.apply(&mut function.config);
    }
    let (orchestrator, backends) = match build(&function, None).await {
        Ok(built) => built,
        Err(e) => return exit(Err(e), 2),
    };
    match args.command {
        cli::Command::Chat(chat) => chat::run(&orchestrator, &function.history, &chat).await,
        cli::Command::RoutingEval(eval) => routing_eval::run(&function.config, &eval).await,
        cli::Command::Mcp(mcp) => mcp::run(&function.config, &backends, &mcp).await,
        cli::Command::Serve(serve) => {
            let service = serve.endpoint_limits().and_then(|limits| {
                let auth = function.settings.auth(false)?;
                service(&function, orchestrator, auth, limits, serve.endpoint.cors_origins()?)
            });
            let service = match service {
                Ok(service) => service,
                Err(e) => return exit(Err(e), 2),
            };
            let listener = match tokio::net::TcpListener::bind(&serve.addr).await {
                Ok(l) => l,
                Err(e) => return exit(Err(format!("cannot listen on {}: {e}", serve.addr)), 1),
            };
            let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| serve.addr.clone());
            // Tests and benchmarks wait for this line.
            println!("listening on http://{addr}");
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let served = baton::http::serve(listener, service, shutdown).await;
            exit(served.map_err(|e| format!("server failed: {e}")), 1)
        }
    }
}

/// The entry agent of `function`'s configuration, over its store, with its MCP servers
/// connected and its remote agents reached; `reporter` gets each turn's figures. The backends
/// are returned too (`mcp` serves agents that use them).
async fn build(
    function: &Function,
    reporter: Option<Arc<dyn TurnReporter>>,
) -> Result<(Arc<Orchestrator>, Backends), String> {
    let config = &function.config;
    // The store first: agents keep their per-episode state in it.
    let mut backends = Backends::over_store(function.history.store().clone());
    backends.reporter = reporter;
    backends.remote = baton_aws::settings::remote_agents(config).await;
    // MCP servers (shared and agents' own) start and list their tools once, here (in Lambda:
    // during init), before any agent is built.
    backends.mcp = baton::mcp::connect_all(&config.all_mcp_servers()).await.map_err(|e| match e {
        baton::mcp::McpError::Config(e) => {
            format!("invalid MCP configuration: {}: {}", config.locate(&e.path), e.reason)
        }
        e => e.to_string(),
    })?;
    let orchestrator = baton::wiring::build(config, backends.clone()).map_err(|e| e.to_string())?;
    eprintln!("{}\n{}\n{}", config.describe_models(), config.describe_support(), function.store);
    Ok((orchestrator, backends))
}

/// The chat endpoint over `orchestrator`, recording into `function`'s history, with these
/// callers, limits and allowed origins.
fn service(
    function: &Function,
    orchestrator: Arc<Orchestrator>,
    auth: AuthMode,
    limits: EndpointLimits,
    cors: Vec<axum::http::HeaderValue>,
) -> Result<Arc<ChatService>, String> {
    let config = &function.config;
    let ratings = baton::wiring::rating_sinks(config).map_err(|e| e.to_string())?;
    let service = ChatService::new(orchestrator, function.history.clone(), config.limits, config.heartbeat);
    Ok(Arc::new(
        service.with_auth(auth).with_endpoint_limits(limits).with_cors_origins(cors).with_ratings(ratings),
    ))
}
