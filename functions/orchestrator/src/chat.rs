//! `chat`: one turn in-process, started as the endpoint starts one (its span, recorded in the
//! store), printed as it streams. A turn that pauses for approvals asks on the terminal (one
//! line per call from standard input: `y`, `n` with an optional reason after it, or nothing
//! to leave it waiting) and goes on with the answers, as a resume request would.

use std::io::BufRead;

use baton::approval::{ApprovalStore, Decision};
use baton::event::{Event, Interrupt, Status};
use baton::history::History;
use baton::orchestrator::{Orchestrator, TurnOptions, TurnRequest};
use baton::store::{EpisodeKey, new_turn_id};
use futures::StreamExt;

use crate::cli;
use crate::render;

pub(crate) async fn run(
    orchestrator: &std::sync::Arc<Orchestrator>,
    history: &History,
    approvals: &ApprovalStore,
    chat: &cli::ChatArgs,
) -> std::process::ExitCode {
    let mut turn = chat.turn();
    turn.approvals = approvals.pausing();
    let mut out = render::Renderer::new(std::io::stdout().lock(), chat.raw);
    loop {
        let (episode, user) = (turn.episode_id.clone(), turn.user_id.clone());
        let options = TurnOptions {
            history: Some((history, None)),
            deadline: None,
            cancel: None,
            approvals: Some(approvals),
        };
        let mut events = match orchestrator.start(turn, options).await {
            Ok(started) => started.events,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut waiting = Vec::new();
        while let Some(event) = events.next().await {
            if let Event::Completed { status: Status::Interrupted, interrupts, .. } = &event {
                waiting = interrupts.to_vec();
            }
            if let Err(e) = out.event(&event) {
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
        let key = match EpisodeKey::new(user.as_str(), episode.as_str()) {
            Ok(key) => key,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut next = TurnRequest::new(episode, new_turn_id(), user, baton::approval::summary(&answers));
        let entry = orchestrator.entry().clone();
        let check = |paused: &_, decisions: &_| entry.check_resume(paused, decisions);
        next.approvals = match approvals.resume(&key, answers, &next.turn_id, u64::MAX, check).await {
            Ok(approvals) => approvals,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        turn = next;
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
