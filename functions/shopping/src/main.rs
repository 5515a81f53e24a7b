//! The shopping agent as a Lambda function (the heavy path): one remote request in, its events out
//! as NDJSON. Settings come from the same environment variables as the orchestrator's. With
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set, its spans continue the caller's trace (the request's
//! `traceparent`) and are flushed before each response ends.

use baton_aws::settings::{self, Settings};
use baton_reference::ReferenceSettings;
use baton_reference::settings::SHOPPING_AGENT;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let traces = settings::init_logging("baton-shopping");
    let agent = async {
        let mut args = Settings::from_env().map_err(|e| e.to_string())?;
        let reference: ReferenceSettings = settings::from_env().map_err(|e| e.to_string())?;
        args.resolve_secrets(&[]).await?;
        let (history, _) = args.history().await?;
        let config = args.config(baton_reference::reference_config()).map_err(|e| e.to_string())?;
        let deployment = reference.deployment(config);
        let backends = deployment.backends(Some(history.store().clone())).map_err(|e| e.to_string())?;
        baton::wiring::build_agent(&deployment.config, SHOPPING_AGENT, &backends).map_err(|e| e.to_string())
    };
    let agent = match agent.await {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match baton_aws::agent_function::run(vec![agent], traces).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
