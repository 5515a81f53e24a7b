//! `chat`: one turn in-process, started as the endpoint starts one (its span, recorded in the
//! store), printed as it streams.

use baton::history::History;
use baton::orchestrator::{Orchestrator, TurnOptions};
use futures::StreamExt;

use crate::cli;
use crate::render;

pub(crate) async fn run(
    orchestrator: &std::sync::Arc<Orchestrator>,
    history: &History,
    chat: &cli::ChatArgs,
) -> std::process::ExitCode {
    let options = TurnOptions { history: Some((history, None)), deadline: None, cancel: None };
    let mut events = match orchestrator.start(chat.turn(), options).await {
        Ok(started) => started.events,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
    while let Some(event) = events.next().await {
        if let Err(e) = out.event(&event) {
            eprintln!("error: cannot write output: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    out.exit_code()
}
