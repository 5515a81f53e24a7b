//! `chat`: one turn in-process, started as the endpoint starts one ([`Turns::start`]: admitted
//! by the episode's busy gate, recorded and logged in the store, its span), printed as it
//! streams. A turn that pauses for approvals asks on the terminal (one
//! line per call from standard input: `y`, `n` with an optional reason after it, or nothing
//! to leave it waiting) and goes on with the answers, as a resume request would.

use std::io::BufRead;
use std::sync::Arc;

use baton::approval::Decision;
use baton::event::{Event, Interrupt, Status};
use baton::orchestrator::{Orchestrator, TurnRequest};
use baton::store::new_turn_id;
use baton::turn::{OnApproval, TurnStart, Turns};
use futures::StreamExt;

use crate::cli;
use crate::render;

/// Runs `chat`'s turn on `orchestrator` through `turns` (recorded, logged and admitted as the
/// endpoint's are), then each resume the person answers on the terminal.
pub(crate) async fn run(
    orchestrator: &Arc<Orchestrator>,
    turns: &Turns,
    chat: &cli::ChatArgs,
) -> std::process::ExitCode {
    let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
    let mut start = TurnStart {
        turn: chat.turn(),
        request_id: None,
        on_disconnect: None,
        on_busy: None,
        approvals: OnApproval::Pause,
        deadline: chat.deadline(),
    };
    loop {
        let (episode, user) = (start.turn.episode_id.clone(), start.turn.user_id.clone());
        let mut events = match turns.start(orchestrator, start).await {
            Ok(begun) => begun.events,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut waiting = Vec::new();
        while let Some(logged) = events.next().await {
            let Some(event) = logged.typed() else {
                eprintln!("error: an event of the turn cannot be read: {}", logged.data);
                return std::process::ExitCode::FAILURE;
            };
            if let Event::Completed { status: Status::Interrupted, interrupts, .. } = &*event {
                waiting = interrupts.to_vec();
            }
            if let Err(e) = out.event(&logged, &event) {
                eprintln!("error: cannot write output: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
        if waiting.is_empty() || chat.raw {
            return out.exit_code();
        }
        let answers = match tokio::task::spawn_blocking(move || ask(&waiting)).await {
            Ok(answers) if !answers.is_empty() => answers,
            _ => {
                eprintln!("the approvals still wait: answer them with a resume request on episode {episode}");
                return out.exit_code();
            }
        };
        let turn = TurnRequest::new(episode, new_turn_id(), user, baton::approval::summary(&answers));
        let deadline = chat.deadline();
        start = TurnStart {
            turn,
            request_id: None,
            on_disconnect: None,
            on_busy: None,
            approvals: OnApproval::Resume(answers),
            deadline,
        };
    }
}

/// Asks about each interrupt on standard error and reads the answers from standard input:
/// `y` approves, `n [reason]` rejects, an empty line or the end of input leaves it waiting.
fn ask(waiting: &[Interrupt]) -> Vec<(String, Decision)> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut answers = Vec::new();
    for interrupt in waiting {
        eprint!(
            "Approve {} by {} with {}? {} [y/n reason]: ",
            interrupt.tool, interrupt.agent, interrupt.arguments, interrupt.reason
        );
        let Some(Ok(line)) = lines.next() else { break };
        let line = line.trim();
        let decision = match line.split_once(char::is_whitespace).unwrap_or((line, "")) {
            ("y" | "yes", _) => Decision::Approve { arguments: None },
            ("n" | "no", reason) => {
                Decision::Reject { message: Some(reason.trim().to_owned()).filter(|r| !r.is_empty()) }
            }
            _ => continue,
        };
        answers.push((interrupt.interrupt_id.clone(), decision));
    }
    answers
}
