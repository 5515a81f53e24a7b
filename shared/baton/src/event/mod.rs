//! The wire protocol: every event of a chat turn, and its SSE and NDJSON encodings.
//!
//! One turn is a stream of [`Event`]s. Clients read them as Server-Sent Events (`event:` is the
//! type, `id:` the sequence number in the turn, `data:` one JSON object); Lambda-to-Lambda
//! transports carry the same JSON objects as NDJSON, one per line. The JSON object always carries
//! its own `type`, so `data:` alone is enough to decode an event.
//!
//! Text that contains newlines stays one event: `serde_json` escapes control characters, so a
//! `data:` line can never be split by the payload.
//!
//! Rooms: `usage` (tokens, dollars, statuses and their per-agent roll-up) and `wire` (the SSE
//! and NDJSON encodings and the line splitter). Their items are re-exported here, so
//! `baton::event::Usage` and `baton::event::encode_sse` keep their paths.

mod usage;
mod wire;

use serde::{Deserialize, Serialize};

pub use usage::{AgentUsage, Status, Usage, Usd, agent_name};
pub(crate) use usage::{BadDecimal, turn_cost};
pub(crate) use usage::{UsageRollup, parse_scaled_decimal};
pub use wire::{
    DecodeError, LineSplitter, LineTooLong, decode_ndjson, decode_sse, encode_ndjson, encode_sse,
};
pub(crate) use wire::{SSE_HEARTBEAT, encode_sse_into};

/// The events of one agent run, tool call or turn. Errors are in-band `error` events; the stream
/// always ends.
pub type EventStream = std::pin::Pin<Box<dyn futures::Stream<Item = Event> + Send>>;

/// One event of a chat turn. See docs/architecture.md, "The event protocol", for the meaning of
/// each.
///
/// `agent` names the source instance (`"researcher[1]"`), or `"orchestrator"` for the orchestrator's
/// own output (preamble and fastpath text, its usage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Emitted before any model call, so the client sees a first byte at once. It names the
    /// turn, so a client that loses the stream can rejoin it (`GET
    /// /chat/{episode_id}/turns/{turn_id}/events`); empty ids are left out.
    Thinking {
        /// The conversation.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        episode_id: String,
        /// The turn.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        turn_id: String,
    },
    /// A vendor response id (`resp_*`), or a synthetic id (`ft_*`) for a vendor API
    /// that has none.
    ResponseId {
        /// Source instance.
        agent: String,
        /// The id.
        id: String,
    },
    /// A user-visible text delta.
    Text {
        /// Source instance.
        agent: String,
        /// The delta.
        text: String,
    },
    /// A reasoning delta from a sub-agent.
    Reasoning {
        /// Source instance.
        agent: String,
        /// The delta.
        text: String,
    },
    /// A sub-agent began a tool call.
    ToolCallStart {
        /// Source instance.
        agent: String,
        /// The model's call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Arguments as the model sent them. Boxed, as are `tool_result`'s `result` and
        /// `usage`'s `agent_total`: they keep every event within 128 bytes, which the compiler
        /// moves inline, and an event is moved at each stream adapter it passes.
        arguments: Box<serde_json::Value>,
    },
    /// Progress a running tool reported (an MCP server's progress notification), between its
    /// `tool_call_start` and its `tool_result`.
    ToolCallProgress {
        /// Source instance (the caller).
        agent: String,
        /// The model's call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Progress so far; it grows with every report.
        progress: f64,
        /// The total, when the tool knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What the tool says it is doing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A tool call's result.
    ToolResult {
        /// Source instance.
        agent: String,
        /// The model's call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// What the tool returned (or the error it reported).
        result: Box<serde_json::Value>,
        /// Whether `result` is an error.
        is_error: bool,
    },
    /// A sub-agent's tool call ended.
    ToolCallEnd {
        /// Source instance.
        agent: String,
        /// The model's call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Wall time of the call.
        duration_ms: u64,
    },
    /// A sub-agent instance began.
    AgentStarted {
        /// The instance, `Name[i]`.
        agent: String,
        /// The query it was given.
        query: String,
    },
    /// A sub-agent instance ended.
    AgentFinished {
        /// The instance.
        agent: String,
        /// How it ended.
        status: Status,
        /// Wall time from start to end.
        duration_ms: u64,
        /// Tokens it spent, summed over its own model calls (not its sub-agents'), with their
        /// `cost_usd` set by the turn: absent when one of those calls has no price, or none was made.
        usage: Usage,
    },
    /// Internal: an agent's content ends here in a mixed turn (its call asked for the boundary
    /// with `mark_content_end`). History splits the assistant reply at this point; it is never
    /// sent to clients.
    ContentEnd {
        /// The instance whose content just ended.
        agent: String,
    },
    /// Internal: a routing rule repaired the model's routing (counted in the turn's metrics);
    /// it is never sent to clients.
    Repaired {
        /// The routing instance.
        agent: String,
        /// The repair, as `routing-eval --json` names it (`fastpath_rejected`, ...).
        repair: String,
    },
    /// Token usage of one model call by one agent instance.
    Usage {
        /// Source instance.
        agent: String,
        /// Model name.
        model: String,
        /// Tokens.
        #[serde(flatten)]
        usage: Usage,
        /// The roll-up: tokens spent so far in this turn by every instance of this agent name
        /// with this model, this call included. Set by the turn on the way to the client, so the
        /// last `usage` event of an agent name carries its total.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_total: Option<Box<Usage>>,
    },
    /// An in-band error. The stream goes on (or ends with `completed`); it is never an `Err` in the
    /// body stream.
    Error {
        /// Source instance, or `"orchestrator"`.
        agent: String,
        /// A stable, machine-readable code.
        code: String,
        /// A human-readable message.
        message: String,
        /// Whether retrying the same request may succeed.
        retryable: bool,
    },
    /// The last event of every turn.
    Completed {
        /// The conversation.
        episode_id: String,
        /// This turn.
        turn_id: String,
        /// How the turn ended.
        status: Status,
        /// The orchestrator model (`"offline"` for the offline model).
        model: String,
        /// Wall time of the turn (a `u32`, 49 days, to keep every event within 128 bytes).
        duration_ms: u32,
        /// Usage per agent name and model, rolled up over the instances.
        usage: Vec<AgentUsage>,
        /// What the whole turn cost: the sum of `usage`'s costs; absent when some agent's
        /// model has no price, or no model was called (`turn_cost`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<Usd>,
        /// The approvals the turn waits for (status `interrupted`); absent otherwise. A boxed
        /// slice, not a `Vec`, to keep every event within 128 bytes.
        #[serde(default, skip_serializing_if = "no_interrupts")]
        interrupts: Box<[Interrupt]>,
    },
    /// A tool call that needs a person's approval was not made: the turn ends `interrupted`, and
    /// the next request on the episode answers it (`resume`, docs/approvals.md).
    ApprovalRequired(Box<Interrupt>),
    /// Internal: this instance paused for approvals (its state is with the turn's approvals,
    /// docs/approvals.md); it is never sent to clients.
    Suspended {
        /// The instance that paused.
        agent: String,
    },
    /// Options an agent offers the user to answer (a vendor's buttons or form). The user answers
    /// with an ordinary message: an option's number or label, or one line per field.
    Choices {
        /// Source instance.
        agent: String,
        /// The question and what may be answered.
        #[serde(flatten)]
        choices: Box<Choices>,
    },
    /// An agent advises handing the conversation to a person.
    Handoff {
        /// Source instance.
        agent: String,
        /// Why, when the agent says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Facts an agent reports about its answer (a vendor's outcome flags, the ids a rating
    /// needs): stored with the agent's message.
    AnswerMeta {
        /// Source instance.
        agent: String,
        /// The facts, as a JSON object.
        meta: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// Mini-agent fan-out: the decomposer split the parent's task into sub-tasks, whose minis
    /// start next.
    #[serde(rename = "mini_agent.decomposed")]
    MiniAgentDecomposed {
        /// The parent instance.
        parent: String,
        /// How many minis run.
        count: usize,
        /// The sub-tasks, in the decomposer's order.
        sub_tasks: Vec<MiniSubTask>,
    },
    /// Mini-agent fan-out: one mini started.
    #[serde(rename = "mini_agent.started")]
    MiniAgentStarted {
        /// The parent instance.
        parent: String,
        /// The mini's sub-task id.
        mini_id: String,
        /// Its sub-task.
        description: String,
    },
    /// Mini-agent fan-out: one mini ended.
    #[serde(rename = "mini_agent.finished")]
    MiniAgentFinished {
        /// The parent instance.
        parent: String,
        /// The mini's sub-task id.
        mini_id: String,
        /// How it ended.
        status: MiniStatus,
        /// Wall time from its dispatch.
        duration_ms: u64,
        /// Why it failed or timed out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Mini-agent fan-out: the minis' outcomes go to the aggregator (or, when all failed, to
    /// the deterministic error answer).
    #[serde(rename = "mini_agent.aggregated")]
    MiniAgentAggregated {
        /// The parent instance.
        parent: String,
        /// Every mini's outcome, in sub-task order.
        outcomes: Vec<MiniOutcomeStatus>,
    },
}

fn no_interrupts(interrupts: &[Interrupt]) -> bool {
    interrupts.is_empty()
}

/// A tool call waiting for a person's approval: the body of `approval_required`, and one entry
/// of an interrupted turn's `completed.interrupts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// The instance that called the tool (the last of `path`).
    pub agent: String,
    /// Names this pause; the resume request answers it by this id.
    pub interrupt_id: String,
    /// The instances from the turn's entry agent down to `agent`.
    pub path: Vec<String>,
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments the model gave.
    pub arguments: serde_json::Value,
    /// Why it needs approval, for the person.
    pub reason: String,
    /// The argument fields the person may change before approving (none: as they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub editable: Vec<String>,
    /// When the interrupt expires (Unix seconds); answered later, it is refused.
    pub expires_at: u64,
}

/// What a `choices` event offers: pick one of `options`, or fill `fields`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choices {
    /// The question, as plain text.
    pub prompt: String,
    /// Options to pick one of, in order (the user may answer with the number, from 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ChoiceOption>,
    /// Fields to fill, in order (the user answers with one line per field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<ChoiceField>,
}

/// One option of a `choices` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceOption {
    /// What the user sees and may send back.
    pub label: String,
    /// What the agent passes on when it is picked.
    pub value: String,
}

/// One field of a `choices` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceField {
    /// The field's name at the agent.
    pub name: String,
    /// What it asks for.
    pub label: String,
}

/// One sub-task of a `mini_agent.decomposed` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MiniSubTask {
    /// The sub-task id (the mini's `mini_id`).
    pub id: String,
    /// What the mini is asked.
    pub description: String,
}

/// How one mini ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MiniStatus {
    /// It answered.
    Ok,
    /// It failed (a model error, a tool server's transport error, ...).
    Failed,
    /// It ran past its timeout and was stopped.
    Timeout,
}

/// One mini's outcome in a `mini_agent.aggregated` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MiniOutcomeStatus {
    /// The mini's sub-task id.
    pub mini_id: String,
    /// How it ended.
    pub status: MiniStatus,
}

impl Event {
    /// The SSE `event:` name, equal to the JSON `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Thinking { .. } => "thinking",
            Event::ResponseId { .. } => "response_id",
            Event::Text { .. } => "text",
            Event::Reasoning { .. } => "reasoning",
            Event::ToolCallStart { .. } => "tool_call_start",
            Event::ToolCallProgress { .. } => "tool_call_progress",
            Event::ToolResult { .. } => "tool_result",
            Event::ToolCallEnd { .. } => "tool_call_end",
            Event::AgentStarted { .. } => "agent_started",
            Event::AgentFinished { .. } => "agent_finished",
            Event::ContentEnd { .. } => "content_end",
            Event::Repaired { .. } => "repaired",
            Event::Usage { .. } => "usage",
            Event::Error { .. } => "error",
            Event::Completed { .. } => "completed",
            Event::Choices { .. } => "choices",
            Event::Handoff { .. } => "handoff",
            Event::AnswerMeta { .. } => "answer_meta",
            Event::MiniAgentDecomposed { .. } => "mini_agent.decomposed",
            Event::MiniAgentStarted { .. } => "mini_agent.started",
            Event::MiniAgentFinished { .. } => "mini_agent.finished",
            Event::MiniAgentAggregated { .. } => "mini_agent.aggregated",
            Event::ApprovalRequired(_) => "approval_required",
            Event::Suspended { .. } => "suspended",
        }
    }

    /// The source instance, where the event has one.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Event::Thinking { .. } | Event::Completed { .. } => None,
            Event::ResponseId { agent, .. }
            | Event::Text { agent, .. }
            | Event::Reasoning { agent, .. }
            | Event::ToolCallStart { agent, .. }
            | Event::ToolCallProgress { agent, .. }
            | Event::ToolResult { agent, .. }
            | Event::ToolCallEnd { agent, .. }
            | Event::AgentStarted { agent, .. }
            | Event::AgentFinished { agent, .. }
            | Event::ContentEnd { agent }
            | Event::Repaired { agent, .. }
            | Event::Usage { agent, .. }
            | Event::Error { agent, .. }
            | Event::Choices { agent, .. }
            | Event::Handoff { agent, .. }
            | Event::AnswerMeta { agent, .. }
            | Event::Suspended { agent } => Some(agent),
            Event::ApprovalRequired(interrupt) => Some(&interrupt.agent),
            Event::MiniAgentDecomposed { parent, .. }
            | Event::MiniAgentStarted { parent, .. }
            | Event::MiniAgentFinished { parent, .. }
            | Event::MiniAgentAggregated { parent, .. } => Some(parent),
        }
    }

    /// Whether the event is ordered content for the live slot (user-visible text and the content
    /// boundary that follows it), as opposed to progress that passes through at once.
    pub(crate) fn is_slot_content(&self) -> bool {
        matches!(self, Event::Text { .. } | Event::ContentEnd { .. })
    }

    /// Whether clients may see this event (`content_end`, `repaired` and `suspended` are
    /// internal).
    pub fn is_client_visible(&self) -> bool {
        !matches!(self, Event::ContentEnd { .. } | Event::Repaired { .. } | Event::Suspended { .. })
    }

    /// A `usage` event (not yet rolled up).
    pub fn usage(agent: impl Into<String>, model: impl Into<String>, usage: Usage) -> Event {
        Event::Usage { agent: agent.into(), model: model.into(), usage, agent_total: None }
    }

    /// A `thinking` event naming no turn.
    pub fn thinking() -> Event {
        Event::Thinking { episode_id: String::new(), turn_id: String::new() }
    }

    /// A `text` event.
    pub fn text(agent: impl Into<String>, text: impl Into<String>) -> Event {
        Event::Text { agent: agent.into(), text: text.into() }
    }

    /// An `error` event.
    pub fn error(
        agent: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
        retryable: bool,
    ) -> Event {
        Event::Error { agent: agent.into(), code: code.into(), message: message.into(), retryable }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event is moved at every stream adapter it passes on its way to the client (about ten
    /// per sub-agent token). Up to 128 bytes the compiler moves it inline; past that, each move is
    /// a `memcpy` call, which was 4.5 % of `serve`'s CPU per turn at 152 bytes
    /// (docs/benchmarks-log.md, "Every event within 128 bytes"). A variant with a large field boxes it.
    #[test]
    fn an_event_stays_within_128_bytes() {
        assert!(std::mem::size_of::<Event>() <= 128, "{} bytes", std::mem::size_of::<Event>());
    }
}
