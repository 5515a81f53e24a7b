//! The orchestrator binary: `chat` runs one turn in-process and prints it; `serve` serves the SSE
//! chat endpoint on localhost through the same handler the Lambda uses. In Lambda (no arguments)
//! it is the chat function, with its endpoint settings read from its environment
//! ([`lambda::main`]). `check` checks a configuration as start-up does and prints its tree.

mod chat;
mod check;
mod cli;
mod lambda;
mod mcp;
mod render;

use std::process::ExitCode;
use std::sync::Arc;

use baton::approval::{ApprovalStore, DEFAULT_APPROVAL_TTL};
use baton::auth::AuthMode;
use baton::config::Config;
use baton::http::{ChatService, EndpointLimits};
use baton::orchestrator::Orchestrator;
use baton::telemetry::TurnReporter;
use baton::turn::Turns;
use baton::wiring::Backends;
use baton_aws::settings::Settings;
use baton_aws::startup::{Function, exit};
use baton_reference::{Deployment, ReferenceSettings};

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
    let (cli::Args { command, settings }, reference) = cli::parse();
    let endpoint = match &command {
        cli::Command::Serve(serve) => Some(&serve.endpoint),
        _ => None,
    };
    let (function, deployment) = match start(settings, reference, endpoint).await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    if let cli::Command::Check(check) = &command {
        return check::run(&function, &deployment, check).await;
    }
    let (orchestrator, backends) = match build(&function, &deployment, None).await {
        Ok(built) => built,
        Err(e) => return exit(Err(e), 2),
    };
    let config = &deployment.config;
    match command {
        cli::Command::Chat(chat) => chat::run(&orchestrator, &turns(&function), &chat).await,
        cli::Command::Mcp(mcp) => mcp::run(config, &backends, turns(&function), &mcp).await,
        cli::Command::Check(_) => unreachable!("checked above"),
        cli::Command::Serve(serve) => {
            let service = serve.endpoint_limits().and_then(|limits| {
                let auth = function.settings.auth(false)?;
                service(&function, config, orchestrator, &backends, auth, limits, &serve.endpoint)
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

/// Starts the orchestrator function with `settings`: the configuration they name (a team's file,
/// or the reference deployment's with none or with `extends: reference`) with the settings (and
/// the chat `endpoint`'s, for `serve` and Lambda) applied, as a deployment. The reference
/// deployment's own `reference` settings apply only to the reference's configuration (`None`:
/// the command line has none, for a team's file).
async fn start(
    settings: Settings,
    reference: impl Into<Option<ReferenceSettings>>,
    endpoint: Option<&cli::EndpointSettings>,
) -> Result<(Function, Deployment), String> {
    let mut reference = reference.into();
    let secrets = [reference.as_ref().and_then(ReferenceSettings::forethought_token_secret)];
    let mut function =
        Function::start(SERVICE, settings, baton_reference::reference_config(), &secrets).await?;
    if let (Some(reference), Some(token)) = (&mut reference, function.secrets.first().cloned().flatten()) {
        reference.set_forethought_token(token);
    }
    if let Some(endpoint) = endpoint {
        endpoint.apply(&mut function.config);
    }
    let deployment = match reference {
        Some(reference) => reference.deployment(function.config.clone()),
        None => Deployment::from(function.config.clone()),
    };
    Ok((function, deployment))
}

/// The entry agent of `deployment`, over `function`'s store, with its MCP servers connected and
/// its remote agents reached; `reporter` gets each turn's figures. The backends come back too
/// (`mcp` serves agents over them; `serve` builds its other A2A agents and ratings from them).
async fn build(
    function: &Function,
    deployment: &Deployment,
    reporter: Option<Arc<dyn TurnReporter>>,
) -> Result<(Arc<Orchestrator>, Backends), String> {
    let config = &deployment.config;
    // The store first: agents keep their per-episode state in it.
    let mut backends =
        deployment.backends(Some(function.history.store().clone())).map_err(|e| e.to_string())?;
    backends.reporter = reporter;
    backends.remote = baton_aws::settings::remote_agents(config).await;
    backends.signer = baton_aws::sigv4::a2a_signer(config).await;
    // MCP servers (shared and agents' own) start and list their tools once, here (in Lambda:
    // during init), before any agent is built.
    backends.mcp = baton::mcp::connect_all(&config.all_mcp_servers()).await.map_err(|e| match e {
        baton::mcp::McpError::Config(e) => {
            format!("invalid MCP configuration: {}: {}", config.locate(&e.path), e.reason)
        }
        e => e.to_string(),
    })?;
    // Declared tools (OpenAPI documents read, Lambda tools, their secrets) before the agents.
    baton_aws::tool_sources::declared_tools(config, &mut backends).await?;
    let orchestrator = baton::wiring::build(config, backends.clone()).map_err(|e| e.to_string())?;
    let support = deployment.describe_support().map(|line| line + "\n").unwrap_or_default();
    eprintln!("{}\n{support}{}", config.describe_models(), function.store);
    Ok((orchestrator, backends))
}

/// The turns of `chat` and `mcp`: recorded into `function`'s history, approvals kept beside it,
/// the default policies.
fn turns(function: &Function) -> Turns {
    let approvals = ApprovalStore::new(function.history.store().clone(), DEFAULT_APPROVAL_TTL);
    Turns::new(function.history.clone(), approvals)
}

/// The chat endpoint over `orchestrator` (configured by `config`), recording into `function`'s
/// history, with the ratings and other A2A agents (`a2a: {agents}`) of `backends`, these callers
/// and limits, and the endpoint's settings (allowed origins, disconnect policy, turn log).
fn service(
    function: &Function,
    config: &Config,
    orchestrator: Arc<Orchestrator>,
    backends: &Backends,
    auth: AuthMode,
    limits: EndpointLimits,
    endpoint: &cli::EndpointSettings,
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
