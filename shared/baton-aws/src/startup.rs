//! One start-up for Baton's functions (the orchestrator, the remote agent function and the
//! scheduled evaluation): logs and traces, the settings with their secrets resolved, the
//! conversation store and the configuration, in that order. What a function builds from them
//! is its own; a start-up that fails is one `error:` line on stderr and exit code 2.

use std::process::ExitCode;
use std::sync::Arc;

use baton::config::Config;
use baton::history::History;
use baton::telemetry::trace::Traces;

use crate::settings::{Settings, init_logging};

/// A started function.
pub struct Function {
    /// The trace exporter, when traces are on: flush it before an invocation's response ends
    /// (Lambda may freeze the process right after).
    pub traces: Option<Arc<Traces>>,
    /// Its settings, secrets resolved.
    pub settings: Settings,
    /// The conversation store the settings name, and the history that records into it.
    pub history: History,
    /// Which store it is, for the start-up message.
    pub store: String,
    /// The deployment's configuration with the settings applied over it.
    pub config: Config,
    /// The deployment's own secrets given to [`Function::start`] by reference, resolved, in order.
    pub secrets: Vec<Option<String>>,
}

impl Function {
    /// Starts the function `service` (its name in logs and traces) with `settings` (from the
    /// command line, or in Lambda from the environment alone: [`Settings::from_env`]) over the
    /// deployment's configuration `base`; `secrets` are the deployment's own Secrets Manager
    /// references, resolved with the settings' own. Call it inside the Tokio runtime.
    pub async fn start(
        service: &str,
        mut settings: Settings,
        base: Config,
        secrets: &[Option<String>],
    ) -> Result<Function, String> {
        let traces = init_logging(service);
        let secrets = settings.resolve_secrets(secrets).await?;
        let (history, store) = settings.history().await?;
        let config = settings.config(base).map_err(|e| e.to_string())?;
        Ok(Function { traces, settings, history, store, config, secrets })
    }
}

/// The exit code of a function's `main`: success, or the error on stderr and `code`.
pub fn exit(result: Result<(), String>, code: u8) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(code)
        }
    }
}
