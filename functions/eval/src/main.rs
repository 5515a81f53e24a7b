//! The scheduled evaluation (an EventBridge `ScheduleV2` target). The event names a suite
//! (`{"suite": "routing"}`); the function runs it against the orchestrator's configured model,
//! adds the fault-injection report, stores the summary as a message of the episode
//! `USER#eval#EP#<suite>` (one turn per run) and the HTML report (charts, failing scenarios, the
//! trend over the stored runs) as a message of `USER#eval#EP#<suite>-report`, and returns the
//! summary.

mod summary;

use std::sync::Arc;

use baton_aws::settings::{self, Settings};
use lambda_http::{LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let traces = settings::init_logging("baton-eval");
    let mut args = Settings::from_env()?;
    args.resolve_secrets(&[]).await?;
    let (history, _) = args.history().await?;
    let config = args.config(baton_reference::reference_config())?;
    let store = history.store().clone();
    let router = baton::wiring::build_router(&config, &baton::wiring::Backends::in_memory())?.map(Arc::new);
    let state = Arc::new((config, router, store));
    baton_aws::runtime::keep_running(|| {
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
    .await
}
