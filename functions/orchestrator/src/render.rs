//! Prints a turn's events for a person reading a terminal: text as it streams, a header when the
//! speaking agent changes, and progress on lines of its own. Progress of other agents that arrives
//! while one agent is in the middle of a line waits for that line to end, so concurrent agents do
//! not chop each other's sentences.

use std::io::Write;

use baton::event::{Event, MiniStatus, Status};
use baton::store::LoggedEvent;

/// How a mini's end reads.
fn mini_status(status: MiniStatus) -> &'static str {
    match status {
        MiniStatus::Ok => "answered",
        MiniStatus::Failed => "failed",
        MiniStatus::Timeout => "timed out",
    }
}

pub(crate) struct Renderer<W: Write> {
    out: W,
    raw: bool,
    /// The turn, for raw output's ids (`<turn_id>:<seq>`, as the endpoint sends them).
    turn: String,
    speaker: Option<String>,
    at_line_start: bool,
    status: Option<Status>,
    /// Progress lines held while the speaker is mid-line.
    held: Vec<String>,
}

impl<W: Write> Renderer<W> {
    pub(crate) fn new(out: W, raw: bool) -> Renderer<W> {
        Renderer {
            out,
            raw,
            turn: String::new(),
            speaker: None,
            at_line_start: true,
            status: None,
            held: Vec::new(),
        }
    }

    /// Prints `event`, the turn's event `logged` (in raw output, its SSE frame as numbered).
    pub(crate) fn event(&mut self, logged: &LoggedEvent, event: &Event) -> std::io::Result<()> {
        if let Event::Completed { status, .. } = event {
            self.status = Some(*status);
        }
        if self.raw {
            if let Event::Thinking { turn_id, .. } = event {
                self.turn.clone_from(turn_id);
            }
            let mut frame = bytes::BytesMut::new();
            baton::http::encode_frame_into(&mut frame, &self.turn, logged);
            self.out.write_all(&frame)?;
            return self.out.flush();
        }
        match event {
            Event::Text { agent, text } => {
                if self.speaker.as_deref() != Some(agent) {
                    self.release()?;
                    write!(self.out, "\n[{agent}] ")?;
                    self.speaker = Some(agent.clone());
                }
                write!(self.out, "{text}")?;
                self.at_line_start = text.ends_with('\n');
                if self.at_line_start && !self.held.is_empty() {
                    self.release()?;
                }
            }
            Event::Thinking { .. } => self.note("… thinking")?,
            Event::AgentStarted { agent, query } => self.note(&format!("· {agent} started: {query}"))?,
            Event::AgentFinished { agent, status, duration_ms, usage } => self.note(&format!(
                "· {agent} finished: {status:?} in {duration_ms} ms, {} tokens",
                usage.total()
            ))?,
            Event::ToolCallStart { agent, name, .. } => self.note(&format!("· {agent} calls {name}"))?,
            Event::ToolCallEnd { agent, name, duration_ms, .. } => {
                self.note(&format!("· {agent} {name} done in {duration_ms} ms"))?
            }
            Event::Error { agent, code, message, .. } => {
                self.note(&format!("! {agent} error {code}: {message}"))?
            }
            Event::ApprovalRequired(i) => self.note(&format!(
                "? {} wants to call {} with {}: {} (interrupt {})",
                i.agent, i.tool, i.arguments, i.reason, i.interrupt_id
            ))?,
            Event::Completed { status, model, duration_ms, usage, episode_id, .. } => {
                let tokens: u64 = usage.iter().map(|u| u.usage.total()).sum();
                self.note(&format!(
                    "✓ completed: {status:?}, model {model}, {duration_ms} ms, {tokens} tokens, episode {episode_id}"
                ))?;
            }
            Event::MiniAgentDecomposed { parent, count, .. } => {
                self.note(&format!("· {parent} splits the request into {count} parts"))?
            }
            Event::MiniAgentStarted { parent, mini_id, description } => {
                self.note(&format!("· {parent} part {mini_id} started: {description}"))?
            }
            Event::MiniAgentFinished { parent, mini_id, status, duration_ms, error } => {
                let why = error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                self.note(&format!(
                    "· {parent} part {mini_id} {} in {duration_ms} ms{why}",
                    mini_status(*status)
                ))?
            }
            Event::MiniAgentAggregated { parent, outcomes } => {
                let ok = outcomes.iter().filter(|o| o.status == MiniStatus::Ok).count();
                self.note(&format!("· {parent} combines the parts ({ok} of {} answered)", outcomes.len()))?
            }
            // Usage, ids, reasoning and internal boundaries are summarised elsewhere.
            _ => {}
        }
        self.out.flush()
    }

    fn line_break(&mut self) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
            self.at_line_start = true;
        }
        Ok(())
    }

    fn note(&mut self, line: &str) -> std::io::Result<()> {
        let mid_line = self.speaker.is_some() && !self.at_line_start;
        let own = self.speaker.as_deref().is_some_and(|s| line.starts_with(&format!("· {s} ")));
        if mid_line && !own && !line.starts_with('✓') {
            self.held.push(line.to_owned());
            return Ok(());
        }
        self.release()?;
        writeln!(self.out, "{line}")?;
        Ok(())
    }

    /// Ends the current line and prints the held progress lines.
    fn release(&mut self) -> std::io::Result<()> {
        self.line_break()?;
        for line in std::mem::take(&mut self.held) {
            writeln!(self.out, "{line}")?;
        }
        self.speaker = None;
        Ok(())
    }

    pub(crate) fn exit_code(&self) -> std::process::ExitCode {
        match self.status {
            Some(Status::Ok) => std::process::ExitCode::SUCCESS,
            _ => std::process::ExitCode::FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton::event::{MiniOutcomeStatus, MiniSubTask};

    #[test]
    fn mini_agent_events_read_as_progress_lines() {
        let mut out = Vec::new();
        let mut renderer = Renderer::new(&mut out, false);
        let parent = || "concierge".to_owned();
        for (i, event) in [
            Event::MiniAgentDecomposed {
                parent: parent(),
                count: 2,
                sub_tasks: vec![MiniSubTask { id: "1".into(), description: "points".into() }],
            },
            Event::MiniAgentStarted { parent: parent(), mini_id: "1".into(), description: "points".into() },
            Event::MiniAgentFinished {
                parent: parent(),
                mini_id: "2".into(),
                status: MiniStatus::Timeout,
                duration_ms: 500,
                error: Some("did not finish within 500 ms".into()),
            },
            Event::MiniAgentAggregated {
                parent: parent(),
                outcomes: vec![
                    MiniOutcomeStatus { mini_id: "1".into(), status: MiniStatus::Ok },
                    MiniOutcomeStatus { mini_id: "2".into(), status: MiniStatus::Timeout },
                ],
            },
        ]
        .into_iter()
        .enumerate()
        {
            renderer.event(&LoggedEvent::of(i as u64 + 1, event.clone()), &event).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "· concierge splits the request into 2 parts\n\
             · concierge part 1 started: points\n\
             · concierge part 2 timed out in 500 ms: did not finish within 500 ms\n\
             · concierge combines the parts (1 of 2 answered)\n"
        );
    }
}
