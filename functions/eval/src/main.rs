//! The scheduled evaluation (an EventBridge `ScheduleV2` target). The event names a suite
//! (`{"suite": "routing"}`); the function runs it against the orchestrator's configured model,
//! adds the fault-injection report, stores the summary as a message of the episode
//! `USER#eval#EP#<suite>` (one turn per run) and the HTML report (charts, failing scenarios, the
//! trend over the stored runs) as a message of `USER#eval#EP#<suite>-report`, and returns the
//! summary. It starts as every function does ([`baton_aws::startup`]).

mod summary;

use std::sync::Arc;

use baton_aws::settings::Settings;
use baton_aws::startup::{Function, exit};
use lambda_http::{LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let started = async {
        let settings = Settings::from_env().map_err(|e| e.to_string())?;
        let base = baton_reference::reference_config();
        let function = Function::start("baton-eval", settings, base, &[]).await?;
        let router = baton::wiring::build_router(&function.config, &baton::wiring::Backends::in_memory())
            .map_err(|e| e.to_string())?
            .map(Arc::new);
        let store = function.history.store().clone();
        Ok((Arc::new((function.config, router, store)), function.traces))
    };
    let (state, traces) = match started.await {
        Ok(started) => started,
        Err(e) => return exit(Err(e), 2),
    };
    let served = baton_aws::runtime::keep_running(|| {
        let (state, traces) = (state.clone(), traces.clone());
        lambda_http::lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
            let (state, traces) = (state.clone(), traces.clone());
            async move {
                let (config, router, store) = &*state;
                let summary = summary::run(&event.payload, router, config, store.as_ref()).await;
                // Before the invocation returns: Lambda may freeze the process right after.
                if let Some(traces) = traces {
                    traces.flush().await;
                }
                summary
            }
        }))
    })
    .await;
    exit(served.map_err(|e| e.to_string()), 1)
}
