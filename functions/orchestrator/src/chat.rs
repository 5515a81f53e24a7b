//! `chat`: one turn in-process, recorded in the store, printed as it streams.

use baton::history::History;
use baton::orchestrator::Orchestrator;
use futures::StreamExt;

use crate::cli;
use crate::render;

pub(crate) async fn run(
    orchestrator: &std::sync::Arc<Orchestrator>,
    history: &History,
    chat: &cli::ChatArgs,
) -> std::process::ExitCode {
    let mut turn = chat.turn();
    let key = match history.begin(&mut turn, None).await {
        Ok(key) => key,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let turn_id = turn.turn_id.clone();
    let mut events = history.record(key, turn_id, orchestrator.run_turn(turn));
    let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
    while let Some(event) = events.next().await {
        if let Err(e) = out.event(&event) {
            eprintln!("error: cannot write output: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    out.exit_code()
}
