//! The wire protocol: every event of a chat turn, and its SSE and NDJSON encodings.
//!
//! One turn is a stream of [`Event`]s. Clients read them as Server-Sent Events (`event:` is the
//! type, `id:` the sequence number in the turn, `data:` one JSON object); Lambda-to-Lambda
//! transports carry the same JSON objects as NDJSON, one per line. The JSON object always carries
//! its own `type`, so `data:` alone is enough to decode an event.
//!
//! Text that contains newlines stays one event: `serde_json` escapes control characters, so a
//! `data:` line can never be split by the payload.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// The events of one agent run, tool call or turn. Errors are in-band `error` events; the stream
/// always ends.
pub type EventStream = std::pin::Pin<Box<dyn futures::Stream<Item = Event> + Send>>;

/// An amount of US dollars, exact: a whole number of picodollars (10⁻¹² USD).
///
/// A price per million tokens with up to six decimals is a whole number of picodollars per
/// token, so a cost is tokens × price in integers and sums never drift. It serializes as a
/// decimal string (`"0.0000012"`), which a float would not keep exact; [`Usd::as_f64`] is for
/// metrics only. Sums saturate at about 18 million dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd {
    picos: u64,
}

/// Decimal places of [`Usd`].
const USD_SCALE: u32 = 12;

impl Usd {
    /// Zero dollars.
    pub const ZERO: Usd = Usd { picos: 0 };

    /// `picos` picodollars.
    pub const fn from_picos(picos: u64) -> Usd {
        Usd { picos }
    }

    /// The amount in picodollars.
    pub const fn picos(self) -> u64 {
        self.picos
    }

    /// The sum, saturating.
    pub fn saturating_add(self, other: Usd) -> Usd {
        Usd { picos: self.picos.saturating_add(other.picos) }
    }

    /// The amount as a float, for metrics (never for sums).
    pub fn as_f64(self) -> f64 {
        self.picos as f64 / 1e12
    }
}

impl std::fmt::Display for Usd {
    /// The decimal without trailing zeros: `0.0000012`, `3`, `0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = 10u64.pow(USD_SCALE);
        let (whole, frac) = (self.picos / unit, self.picos % unit);
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:012}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// A decimal that is not a valid amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a plain decimal with at most {scale} decimals (e.g. 0.40)")]
pub struct BadDecimal {
    text: String,
    scale: u32,
}

/// Parses a plain, non-negative decimal (`12`, `0.40`, `.5`) into an integer scaled by
/// `10^scale`, exactly: more than `scale` decimals, a sign, an exponent or an overflow are errors.
pub fn parse_scaled_decimal(text: &str, scale: u32) -> Result<u64, BadDecimal> {
    let bad = || BadDecimal { text: text.to_owned(), scale };
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !all_digits(whole) || !all_digits(frac) {
        return Err(bad());
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let frac_scaled: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(scale - frac.len() as u32)
    };
    whole.checked_mul(10u64.pow(scale)).and_then(|w| w.checked_add(frac_scaled)).ok_or_else(bad)
}

impl std::str::FromStr for Usd {
    type Err = BadDecimal;

    fn from_str(s: &str) -> Result<Usd, BadDecimal> {
        parse_scaled_decimal(s, USD_SCALE).map(Usd::from_picos)
    }
}

impl Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Usd, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Token usage reported by a model for one call (or summed over several), and what it cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub input_tokens: u64,
    /// Completion (output) tokens, reasoning ones included.
    pub output_tokens: u64,
    /// Of the input tokens, those the server read from its prompt cache (billed at the cached
    /// rate).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model spent reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// What these tokens cost at the configured prices; absent when the model has no price
    /// in the `prices:` table. Set by the turn, never by a model client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

impl Usage {
    /// `input_tokens` in and `output_tokens` out, nothing cached, no reasoning, no cost.
    pub fn tokens(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage { input_tokens, output_tokens, ..Usage::default() }
    }

    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Whether no token was counted.
    pub fn is_empty(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0
    }

    /// Adds `other` into `self`. The sum has a cost only when every part that spent tokens had
    /// one: an unpriced part makes it unknown, never understated.
    pub fn add(&mut self, other: Usage) {
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, b) if self.is_empty() => b,
            (a, None) if other.is_empty() => a,
            _ => None,
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// How a turn, or one sub-agent instance, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything finished.
    Ok,
    /// Cut short (client disconnect, deadline); what was produced is kept.
    Partial,
    /// Failed; an `error` event says why.
    Error,
}

impl Status {
    /// The worse of two statuses (`error` > `partial` > `ok`).
    pub fn worst(self, other: Status) -> Status {
        fn rank(s: Status) -> u8 {
            match s {
                Status::Ok => 0,
                Status::Partial => 1,
                Status::Error => 2,
            }
        }
        if rank(other) > rank(self) { other } else { self }
    }
}

/// Usage of one agent (instance or rolled-up name) in a turn summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUsage {
    /// Agent instance or name.
    pub agent: String,
    /// Model that spent the tokens.
    pub model: String,
    /// Tokens spent.
    #[serde(flatten)]
    pub usage: Usage,
}

/// The agent name of an instance: `support[2]` → `support`.
pub fn agent_name(instance: &str) -> &str {
    instance.split_once('[').map_or(instance, |(name, _)| name)
}

/// Usage rolled up per agent name and model over a turn's instances (`researcher[1]` and
/// `researcher[2]` are one `researcher` entry), in order of first use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageRollup {
    /// The totals so far.
    pub totals: Vec<AgentUsage>,
}

impl UsageRollup {
    /// Adds `usage` of `instance` with `model`; returns that agent name's total with that model.
    pub fn add(&mut self, instance: &str, model: &str, usage: Usage) -> Usage {
        let name = agent_name(instance);
        let at = match self.totals.iter().position(|t| t.agent == name && t.model == model) {
            Some(at) => at,
            None => {
                let zero = Usage::default();
                self.totals.push(AgentUsage { agent: name.to_owned(), model: model.to_owned(), usage: zero });
                self.totals.len() - 1
            }
        };
        self.totals[at].usage.add(usage);
        self.totals[at].usage
    }

    /// Adds a `usage` event into the totals and sets its `agent_total`; other events pass.
    pub fn observe(&mut self, event: &mut Event) {
        if let Event::Usage { agent, model, usage, agent_total } = event {
            *agent_total = Some(Box::new(self.add(agent, model, *usage)));
        }
    }
}

/// One event of a chat turn. See docs/architecture.md, "The event protocol", for the meaning of
/// each.
///
/// `agent` names the source instance (`"shopping[1]"`), or `"orchestrator"` for the orchestrator's
/// own output (preamble and fastpath text, its usage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Emitted before any model call, so the client sees a first byte at once.
    Thinking {},
    /// A vendor response id (`resp_*`), or a synthetic `ft_*` id for support.
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
        /// Tokens it spent, summed over its model calls.
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
        /// Wall time of the turn.
        duration_ms: u64,
        /// Usage per agent name and model, rolled up over the instances.
        usage: Vec<AgentUsage>,
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
            Event::Thinking {} => "thinking",
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
        }
    }

    /// The source instance, where the event has one.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Event::Thinking {} | Event::Completed { .. } => None,
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
            | Event::AnswerMeta { agent, .. } => Some(agent),
            Event::MiniAgentDecomposed { parent, .. }
            | Event::MiniAgentStarted { parent, .. }
            | Event::MiniAgentFinished { parent, .. }
            | Event::MiniAgentAggregated { parent, .. } => Some(parent),
        }
    }

    /// Whether the event is ordered content for the live slot (user-visible text and the support
    /// boundary that follows it), as opposed to progress that passes through at once.
    pub fn is_slot_content(&self) -> bool {
        matches!(self, Event::Text { .. } | Event::ContentEnd { .. })
    }

    /// Whether clients may see this event (`content_end` and `repaired` are internal).
    pub fn is_client_visible(&self) -> bool {
        !matches!(self, Event::ContentEnd { .. } | Event::Repaired { .. })
    }

    /// A `usage` event (not yet rolled up).
    pub fn usage(agent: impl Into<String>, model: impl Into<String>, usage: Usage) -> Event {
        Event::Usage { agent: agent.into(), model: model.into(), usage, agent_total: None }
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

/// An event could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The JSON did not describe a known event.
    #[error("invalid event JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An SSE `event:` name disagrees with the JSON `type`.
    #[error("SSE event name `{sse}` does not match JSON type `{json}`")]
    KindMismatch {
        /// The `event:` field.
        sse: String,
        /// The JSON `type`.
        json: &'static str,
    },
}

/// Encodes `event` as one SSE message with sequence number `id`, appending to `out`.
pub fn encode_sse_into(out: &mut BytesMut, id: u64, event: &Event) {
    out.put_slice(b"event: ");
    out.put_slice(event.kind().as_bytes());
    out.put_slice(b"\nid: ");
    // Writing a number into a `BytesMut` cannot fail.
    let _ = std::fmt::Write::write_fmt(out, format_args!("{id}"));
    out.put_slice(b"\ndata: ");
    // Serializing a plain enum of strings, numbers and JSON values cannot fail.
    serde_json::to_writer((&mut *out).writer(), event).expect("event serializes");
    out.put_slice(b"\n\n");
}

/// Encodes `event` as one SSE message with sequence number `id`.
pub fn encode_sse(id: u64, event: &Event) -> Bytes {
    let mut out = BytesMut::with_capacity(128);
    encode_sse_into(&mut out, id, event);
    out.freeze()
}

/// An SSE comment line, used as a heartbeat: clients ignore it, proxies see traffic.
pub const SSE_HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// Decodes one SSE message from its `event:` name and `data:` payload, checking they agree.
pub fn decode_sse(event_name: &str, data: &str) -> Result<Event, DecodeError> {
    let event: Event = serde_json::from_str(data)?;
    if !event_name.is_empty() && event_name != "message" && event_name != event.kind() {
        return Err(DecodeError::KindMismatch { sse: event_name.to_owned(), json: event.kind() });
    }
    Ok(event)
}

/// Encodes `event` as one NDJSON line.
pub fn encode_ndjson(event: &Event) -> Bytes {
    let mut out = serde_json::to_vec(event).expect("event serializes");
    out.push(b'\n');
    Bytes::from(out)
}

/// Decodes one NDJSON line (a trailing newline is allowed).
pub fn decode_ndjson(line: &[u8]) -> Result<Event, DecodeError> {
    Ok(serde_json::from_slice(line.trim_ascii_end())?)
}

/// Splits a byte stream into NDJSON lines as chunks arrive, holding at most `max_line` bytes
/// of a line that has not ended: a peer that never sends a newline gets an error, not all of
/// this process's memory. Each byte is scanned once.
#[derive(Debug)]
pub struct LineSplitter {
    buffer: BytesMut,
    scanned: usize,
    max_line: usize,
}

/// A line passed the [`LineSplitter`]'s cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a line passed {max} bytes without ending")]
pub struct LineTooLong {
    /// The cap.
    pub max: usize,
}

impl LineSplitter {
    /// A splitter whose lines may be at most `max_line` bytes (newline excluded).
    pub fn new(max_line: usize) -> LineSplitter {
        LineSplitter { buffer: BytesMut::new(), scanned: 0, max_line }
    }

    /// Adds `chunk`; returns the lines it completed (newline included), blank ones skipped.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Bytes>, LineTooLong> {
        self.buffer.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(at) = self.buffer[self.scanned..].iter().position(|b| *b == b'\n') {
            let line = self.buffer.split_to(self.scanned + at + 1).freeze();
            self.scanned = 0;
            if line.len() - 1 > self.max_line {
                return Err(LineTooLong { max: self.max_line });
            }
            if !line.trim_ascii().is_empty() {
                lines.push(line);
            }
        }
        self.scanned = self.buffer.len();
        if self.buffer.len() > self.max_line {
            return Err(LineTooLong { max: self.max_line });
        }
        Ok(lines)
    }

    /// The stream ended: the last line if it had no newline (and is not blank).
    pub fn finish(&mut self) -> Option<Bytes> {
        self.scanned = 0;
        let rest = std::mem::take(&mut self.buffer).freeze();
        (!rest.trim_ascii().is_empty()).then_some(rest)
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

    #[test]
    fn sse_encoding_is_exact() {
        let ev = Event::text("shopping[1]", "hi");
        assert_eq!(
            &encode_sse(7, &ev)[..],
            b"event: text\nid: 7\ndata: {\"type\":\"text\",\"agent\":\"shopping[1]\",\"text\":\"hi\"}\n\n"
        );
        assert_eq!(
            &encode_sse(0, &Event::Thinking {})[..],
            b"event: thinking\nid: 0\ndata: {\"type\":\"thinking\"}\n\n"
        );
    }

    #[test]
    fn text_with_newlines_stays_one_sse_event() {
        let ev = Event::text("support[1]", "line one\nline two\r\n\ndata: fake");
        let bytes = encode_sse(3, &ev);
        let s = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(s.matches("\n\n").count(), 1, "exactly one event terminator: {s:?}");
        assert!(s.ends_with("\n\n"));
        assert_eq!(s.lines().filter(|l| l.starts_with("data: ")).count(), 1);
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        assert_eq!(decode_sse("text", data).unwrap(), ev);
    }

    #[test]
    fn ndjson_encoding_is_exact_and_round_trips() {
        let ev = Event::usage("shopping[1]", "gpt", Usage::tokens(3, 4));
        let line = encode_ndjson(&ev);
        assert_eq!(
            &line[..],
            b"{\"type\":\"usage\",\"agent\":\"shopping[1]\",\"model\":\"gpt\",\"input_tokens\":3,\"output_tokens\":4}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
    }

    #[test]
    fn a_priced_usage_event_carries_its_cost_as_an_exact_decimal() {
        let usage = Usage {
            input_tokens: 3,
            output_tokens: 4,
            cached_input_tokens: 1,
            reasoning_tokens: 2,
            cost_usd: Some(Usd::from_picos(1_200_000)),
        };
        let ev = Event::Usage {
            agent: "a[1]".into(),
            model: "m".into(),
            usage,
            agent_total: Some(Box::new(usage)),
        };
        let line = encode_ndjson(&ev);
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"type\":\"usage\",\"agent\":\"a[1]\",\"model\":\"m\",\"input_tokens\":3,\"output_tokens\":4,\
             \"cached_input_tokens\":1,\"reasoning_tokens\":2,\"cost_usd\":\"0.0000012\",\"agent_total\":\
             {\"input_tokens\":3,\"output_tokens\":4,\"cached_input_tokens\":1,\"reasoning_tokens\":2,\
             \"cost_usd\":\"0.0000012\"}}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
    }

    #[test]
    fn dollars_print_and_parse_exactly() {
        for (picos, text) in
            [(0, "0"), (1, "0.000000000001"), (1_200_000, "0.0000012"), (3_500_000_000_000, "3.5")]
        {
            assert_eq!(Usd::from_picos(picos).to_string(), text);
            assert_eq!(text.parse::<Usd>().unwrap(), Usd::from_picos(picos));
        }
        for bad in ["", ".", "-1", "1e-6", "0.0000000000001", "1,5", "99999999999"] {
            assert!(bad.parse::<Usd>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_sum_with_an_unpriced_part_has_no_cost() {
        let priced = Usage { cost_usd: Some(Usd::from_picos(5)), ..Usage::tokens(1, 1) };
        let mut sum = Usage::default();
        sum.add(priced);
        sum.add(priced);
        assert_eq!(sum.cost_usd, Some(Usd::from_picos(10)));
        sum.add(Usage::tokens(1, 0));
        assert_eq!(sum.cost_usd, None, "never understated");
        sum.add(priced);
        assert_eq!(sum.cost_usd, None);
    }

    #[test]
    fn mini_agent_events_use_dotted_names_and_the_design_payloads() {
        let ev = Event::MiniAgentFinished {
            parent: "shopping[1]".into(),
            mini_id: "2".into(),
            status: MiniStatus::Timeout,
            duration_ms: 7,
            error: Some("slow".into()),
        };
        assert_eq!(ev.kind(), "mini_agent.finished");
        let line = encode_ndjson(&ev);
        assert_eq!(
            &line[..],
            b"{\"type\":\"mini_agent.finished\",\"parent\":\"shopping[1]\",\"mini_id\":\"2\",\"status\":\"timeout\",\"duration_ms\":7,\"error\":\"slow\"}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
        let ok = Event::MiniAgentFinished {
            parent: "p".into(),
            mini_id: "1".into(),
            status: MiniStatus::Ok,
            duration_ms: 1,
            error: None,
        };
        assert!(!String::from_utf8(encode_ndjson(&ok).to_vec()).unwrap().contains("error"));
    }

    #[test]
    fn choices_handoff_and_answer_meta_encode_exactly_and_round_trip() {
        let choices = Event::Choices {
            agent: "support[1]".into(),
            choices: Box::new(Choices {
                prompt: "Pick one".into(),
                options: vec![
                    ChoiceOption { label: "branch 1".into(), value: "v1".into() },
                    ChoiceOption { label: "branch 2".into(), value: "v2".into() },
                ],
                fields: Vec::new(),
            }),
        };
        let handoff = Event::Handoff { agent: "support[1]".into(), reason: Some("should_escalate".into()) };
        let meta = Event::AnswerMeta {
            agent: "support[1]".into(),
            meta: Box::new(serde_json::json!({"is_solved": false}).as_object().unwrap().clone()),
        };
        let form = Event::Choices {
            agent: "a".into(),
            choices: Box::new(Choices {
                prompt: "Email?".into(),
                options: Vec::new(),
                fields: vec![ChoiceField { name: "cv_email".into(), label: "Email".into() }],
            }),
        };
        let cases: [(&Event, &[u8], &[u8]); 4] = [
            (
                &choices,
                b"event: choices\nid: 4\ndata: {\"type\":\"choices\",\"agent\":\"support[1]\",\"prompt\":\"Pick one\",\"options\":[{\"label\":\"branch 1\",\"value\":\"v1\"},{\"label\":\"branch 2\",\"value\":\"v2\"}]}\n\n",
                b"{\"type\":\"choices\",\"agent\":\"support[1]\",\"prompt\":\"Pick one\",\"options\":[{\"label\":\"branch 1\",\"value\":\"v1\"},{\"label\":\"branch 2\",\"value\":\"v2\"}]}\n",
            ),
            (
                &form,
                b"event: choices\nid: 4\ndata: {\"type\":\"choices\",\"agent\":\"a\",\"prompt\":\"Email?\",\"fields\":[{\"name\":\"cv_email\",\"label\":\"Email\"}]}\n\n",
                b"{\"type\":\"choices\",\"agent\":\"a\",\"prompt\":\"Email?\",\"fields\":[{\"name\":\"cv_email\",\"label\":\"Email\"}]}\n",
            ),
            (
                &handoff,
                b"event: handoff\nid: 4\ndata: {\"type\":\"handoff\",\"agent\":\"support[1]\",\"reason\":\"should_escalate\"}\n\n",
                b"{\"type\":\"handoff\",\"agent\":\"support[1]\",\"reason\":\"should_escalate\"}\n",
            ),
            (
                &meta,
                b"event: answer_meta\nid: 4\ndata: {\"type\":\"answer_meta\",\"agent\":\"support[1]\",\"meta\":{\"is_solved\":false}}\n\n",
                b"{\"type\":\"answer_meta\",\"agent\":\"support[1]\",\"meta\":{\"is_solved\":false}}\n",
            ),
        ];
        for (event, sse, ndjson) in cases {
            assert_eq!(
                std::str::from_utf8(&encode_sse(4, event)).unwrap(),
                std::str::from_utf8(sse).unwrap()
            );
            assert_eq!(&encode_ndjson(event)[..], ndjson);
            assert_eq!(&decode_ndjson(ndjson).unwrap(), event);
            let data =
                std::str::from_utf8(sse).unwrap().lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            assert_eq!(&decode_sse(event.kind(), data).unwrap(), event);
        }
        let bare = decode_ndjson(br#"{"type":"handoff","agent":"x"}"#).unwrap();
        assert_eq!(bare, Event::Handoff { agent: "x".into(), reason: None });
    }

    #[test]
    fn every_event_round_trips_through_both_encodings() {
        for ev in sample_events() {
            let nd = encode_ndjson(&ev);
            assert_eq!(decode_ndjson(&nd).unwrap(), ev);
            let sse = encode_sse(1, &ev);
            let s = std::str::from_utf8(&sse).unwrap();
            let name = s.lines().next().unwrap().strip_prefix("event: ").unwrap();
            assert_eq!(name, ev.kind());
            let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            assert_eq!(decode_sse(name, data).unwrap(), ev);
        }
    }

    #[test]
    fn sse_name_must_match_json_type() {
        let err = decode_sse("text", r#"{"type":"thinking"}"#).unwrap_err();
        assert!(matches!(err, DecodeError::KindMismatch { .. }), "{err}");
    }

    #[test]
    fn unknown_event_type_is_an_error() {
        assert!(decode_ndjson(br#"{"type":"nope"}"#).is_err());
    }

    fn sample_events() -> Vec<Event> {
        let a = || "support[1]".to_owned();
        vec![
            Event::Thinking {},
            Event::ResponseId { agent: a(), id: "ft_1".into() },
            Event::text(a(), "x"),
            Event::Reasoning { agent: a(), text: "r".into() },
            Event::ToolCallStart {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                arguments: Box::new(serde_json::json!({"q": 1})),
            },
            Event::ToolCallProgress {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                progress: 1.0,
                total: Some(3.0),
                message: Some("step 1".into()),
            },
            Event::ToolResult {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                result: Box::new(serde_json::json!([1])),
                is_error: false,
            },
            Event::ToolCallEnd { agent: a(), call_id: "c".into(), name: "n".into(), duration_ms: 2 },
            Event::AgentStarted { agent: a(), query: "q".into() },
            Event::AgentFinished {
                agent: a(),
                status: Status::Partial,
                duration_ms: 5,
                usage: Usage::tokens(1, 2),
            },
            Event::ContentEnd { agent: a() },
            Event::Repaired { agent: a(), repair: "fastpath_rejected".into() },
            Event::usage(a(), "m", Usage::default()),
            Event::error(a(), "vendor_timeout", "slow", true),
            Event::Completed {
                episode_id: "e".into(),
                turn_id: "t".into(),
                status: Status::Ok,
                model: "offline".into(),
                duration_ms: 9,
                usage: vec![AgentUsage { agent: a(), model: "m".into(), usage: Usage::default() }],
            },
            Event::MiniAgentDecomposed {
                parent: a(),
                count: 1,
                sub_tasks: vec![MiniSubTask { id: "1".into(), description: "a".into() }],
            },
            Event::MiniAgentStarted { parent: a(), mini_id: "1".into(), description: "a".into() },
            Event::Choices {
                agent: a(),
                choices: Box::new(Choices {
                    prompt: "p".into(),
                    options: vec![ChoiceOption { label: "l".into(), value: "v".into() }],
                    fields: vec![ChoiceField { name: "n".into(), label: "l".into() }],
                }),
            },
            Event::Handoff { agent: a(), reason: None },
            Event::AnswerMeta { agent: a(), meta: Box::default() },
            Event::MiniAgentFinished {
                parent: a(),
                mini_id: "1".into(),
                status: MiniStatus::Failed,
                duration_ms: 1,
                error: Some("boom".into()),
            },
            Event::MiniAgentAggregated {
                parent: a(),
                outcomes: vec![MiniOutcomeStatus { mini_id: "1".into(), status: MiniStatus::Ok }],
            },
        ]
    }

    #[test]
    fn lines_split_across_chunks_come_out_whole_and_long_ones_are_refused() {
        let mut lines = LineSplitter::new(8);
        assert_eq!(lines.push(b"ab").unwrap(), Vec::<Bytes>::new());
        assert_eq!(lines.push(b"c\n\nde\nf").unwrap(), [Bytes::from("abc\n"), Bytes::from("de\n")]);
        assert_eq!(lines.finish(), Some(Bytes::from("f")));
        assert_eq!(lines.finish(), None);
        assert_eq!(lines.push(b"123456789").unwrap_err(), LineTooLong { max: 8 });
        let mut lines = LineSplitter::new(8);
        assert_eq!(lines.push(b"12345678\n").unwrap(), [Bytes::from("12345678\n")]);
        assert!(lines.push(b"123456789\n").is_err());
    }
}
