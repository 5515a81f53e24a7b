//! The shopping agent as a Lambda function (the heavy path): one remote request in, its events out
//! as NDJSON. It starts as every function does ([`baton_aws::startup`]), from the same environment
//! variables as the orchestrator. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, its spans continue the
//! caller's trace (the request's `traceparent`) and are flushed before each response ends.

use baton_aws::settings::{self, Settings};
use baton_aws::startup::{Function, exit};
use baton_reference::ReferenceSettings;
use baton_reference::settings::SHOPPING_AGENT;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let started = async {
        let settings = Settings::from_env().map_err(|e| e.to_string())?;
        let reference: ReferenceSettings = settings::from_env().map_err(|e| e.to_string())?;
        let base = baton_reference::reference_config();
        let function = Function::start("baton-shopping", settings, base, &[]).await?;
        let deployment = reference.deployment(function.config.clone());
        let backends =
            deployment.backends(Some(function.history.store().clone())).map_err(|e| e.to_string())?;
        let agent = baton::wiring::build_agent(&deployment.config, SHOPPING_AGENT, &backends);
        Ok((agent.map_err(|e| e.to_string())?, function.traces))
    };
    let (agent, traces) = match started.await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    exit(baton_aws::agent_function::run(vec![agent], traces).await.map_err(|e| e.to_string()), 1)
}
