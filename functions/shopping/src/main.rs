//! The shopping agent as a Lambda function (the heavy path): one remote request in, its events out
//! as NDJSON. It starts as every function does ([`baton_aws::startup`]), from the same environment
//! variables as the orchestrator. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, its spans continue the
//! caller's trace (the request's `traceparent`) and are flushed before each response ends.

use baton::wiring::Backends;
use baton_aws::startup::{Function, exit};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let started = async {
        let function = Function::start_from_env("baton-shopping").await?;
        let backends = Backends::over_store(function.history.store().clone());
        let agent = baton::wiring::build_agent(&function.config, "shopping", &backends);
        Ok((agent.map_err(|e| e.to_string())?, function.traces))
    };
    let (agent, traces) = match started.await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    exit(baton_aws::agent_function::run(vec![agent], traces).await.map_err(|e| e.to_string()), 1)
}
