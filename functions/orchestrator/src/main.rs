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
        cli::Command::Chat(chat) => {
            chat::run(&orchestrator, &Turns::new(function.history.clone()), &chat).await
        }
        cli::Command::Mcp(mcp) => {
            mcp::run(config, &backends, Turns::new(function.history.clone()), &mcp).await
        }
        cli::Command::Check(_) => unreachable!("checked above"),
        cli::Command::Serve(serve) => {
            let service = serve.endpoint_limits().and_then(|limits| {
                let auth = function.settings.auth(false)?;
                baton_aws::app::service(
                    &function,
                    config,
                    orchestrator,
                    &backends,
                    auth,
                    limits,
                    &serve.endpoint,
                )
            });
            let service = match service {
                Ok(service) => service,
                Err(e) => return exit(Err(e), 2),
            };
            exit(baton_aws::app::serve(service, &serve.addr).await, 1)
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
/// its remote agents reached ([`baton_aws::app::connect`], a team's function's wiring too);
/// `reporter` gets each turn's figures. The backends come back too (`mcp` serves agents over
/// them; `serve` builds its other A2A agents and ratings from them).
async fn build(
    function: &Function,
    deployment: &Deployment,
    reporter: Option<Arc<dyn TurnReporter>>,
) -> Result<(Arc<Orchestrator>, Backends), String> {
    let config = &deployment.config;
    // The store first: agents keep their per-episode state in it.
    let backends = deployment.backends(Some(function.history.store().clone())).map_err(|e| e.to_string())?;
    let built = baton_aws::app::connect(config, backends, reporter).await?;
    let support = deployment.describe_support().map(|line| line + "\n").unwrap_or_default();
    eprintln!("{}\n{support}{}", config.describe_models(), function.store);
    Ok(built)
}
