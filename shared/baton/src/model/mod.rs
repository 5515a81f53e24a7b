//! Chat models: the [`ChatModel`] trait, its request and delta types, and the implementations.
//!
//! A model call is a stream of [`ModelDelta`]s. Tool-call fragments are reassembled by index inside
//! the clients, so callers see [`ModelDelta::ToolCallStart`] early (id and name) and one complete
//! [`ModelDelta::ToolCall`] per call once the model has finished.
//!
//! - [`openai`]: OpenAI Chat Completions over HTTP (any compatible server).
//! - [`responses`]: the OpenAI Responses API over HTTP, with `previous_response_id`.
//! - [`offline`]: the deterministic rule-based model used when no model is configured.
//! - [`script`]: a model script (YAML), the backend a team's tests answer each agent from, step
//!   by step; leaving the script fails the turn.
//! - [`scripted`]: scripted answers and an in-process scripted model (the routing suite's fault
//!   injection uses it); with the crate's test-server feature, a scripted OpenAI-compatible HTTP
//!   server.

pub mod offline;
pub mod openai;
pub mod responses;
pub mod script;
pub mod scripted;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::event::Usage;

/// One message of a conversation sent to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions.
    System {
        /// The instructions.
        content: String,
    },
    /// What the user said.
    User {
        /// The text.
        content: String,
        /// Images sent with it (`https` or base64 `data:` URLs), as image content parts.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<String>,
    },
    /// What the model said, and the tools it called.
    Assistant {
        /// Text, if any.
        content: Option<String>,
        /// Tool calls, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result for one call.
    Tool {
        /// The call this answers.
        call_id: String,
        /// The result, as text (usually JSON).
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::System { content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User { content: content.into(), images: Vec::new() }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::Assistant { content: Some(content.into()), tool_calls: Vec::new() }
    }
}

/// A complete tool call from a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the raw JSON text the model produced (it may be invalid).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments parsed as JSON.
    pub fn parse_arguments(&self) -> Result<serde_json::Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        serde_json::from_str(&self.arguments)
    }
}

/// A tool as offered to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// Whether the model may, must, or must not call tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call a tool.
    Required,
    /// The model must not call a tool.
    None,
}

impl ToolChoice {
    /// Its spelling in both OpenAI APIs' `tool_choice`.
    pub(crate) fn wire_name(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// One model call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered, shared: an agent's tool registry builds them once for all its calls.
    pub tools: Arc<[ToolSpec]>,
    /// Tool choice; the server default when `None`.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools at once; the server default when `None`.
    pub parallel_tool_calls: Option<bool>,
    /// Output token cap.
    pub max_tokens: Option<u32>,
    /// A JSON Schema the answer's text must follow (structured output), where the server
    /// offers it; callers validate the answer themselves in any case.
    pub response_format: Option<ResponseFormat>,
}

/// A JSON Schema for a model's answer (OpenAI structured output, `strict`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseFormat {
    /// The schema's name (letters, digits, `_`, `-`).
    pub name: String,
    /// The schema: an object whose properties are all required and that allows no others.
    pub schema: serde_json::Value,
}

impl ChatRequest {
    /// The text of the last user message, or `""`.
    pub fn last_user_text(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }

    /// The last system message, or `""` (instructions added after the prompt).
    pub fn system_text_last(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }

    /// The system prompt, or `""`.
    pub fn system_text(&self) -> &str {
        self.messages
            .iter()
            .find_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }
}

/// Why a model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// It called tools.
    ToolCalls,
    /// Hit the token cap.
    Length,
    /// Filtered.
    ContentFilter,
    /// Anything else a server reports.
    Other(String),
}

impl FinishReason {
    /// Parses a wire `finish_reason`.
    pub fn parse(s: &str) -> FinishReason {
        match s {
            "stop" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// One streamed piece of a model's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelDelta {
    /// The vendor's id for this response.
    ResponseId(String),
    /// A user-visible text delta.
    Text(String),
    /// A reasoning delta (for servers that send one).
    Reasoning(String),
    /// A tool call began: its id and name are known, arguments follow.
    ToolCallStart {
        /// Position of the call in the model's answer.
        index: usize,
        /// The call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A complete tool call, reassembled from its fragments. Sent in index order once the model
    /// has finished.
    ToolCall(ToolCall),
    /// Token usage of the call.
    Usage(Usage),
    /// The model finished.
    Finish(FinishReason),
}

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// Establishing the connection.
    Connect,
    /// Waiting for the response to start.
    FirstByte,
    /// Waiting for the next chunk of a started stream.
    Idle,
}

impl std::fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutKind::Connect => "connect",
            TimeoutKind::FirstByte => "first byte",
            TimeoutKind::Idle => "idle",
        })
    }
}

/// A model call failed.
///
/// The `Display` text is what clients see. It never repeats an error body or a transport's
/// words (a 401 body may echo the credentials Baton sent): those are kept, redacted and bounded
/// ([`crate::redact::excerpt`]), in the variant's field for logs ([`ModelError::detail`]). The
/// one vendor text shown is a mid-stream error payload ([`ModelError::Stream`]), redacted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The server could not be reached.
    #[error("cannot reach the model server")]
    Connect(String),
    /// A timeout fired.
    #[error("the model server timed out ({0} timeout)")]
    Timeout(TimeoutKind),
    /// The server answered with an HTTP error.
    #[error("{}", http_summary(*status))]
    Http {
        /// HTTP status.
        status: u16,
        /// The error message from the body (or the body), redacted and bounded: for logs.
        message: String,
        /// The server's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// The stream carried an error payload. Its message comes from a stream that had already
    /// been authenticated, and the clients pass it through [`crate::redact::excerpt`] (key
    /// masked, bounded) before it is shown, so it is the one vendor text an error may carry.
    #[error("the model stream reported an error: {0}")]
    Stream(String),
    /// The stream broke or ended before the model finished.
    #[error("the model stream ended early")]
    Truncated(String),
    /// The server sent something that is not a valid response.
    #[error("the model server sent an answer Baton cannot read")]
    Decode(String),
    /// The answer passed the configured cap ([`openai::OpenAiConfig::max_answer_chars`]); what
    /// came before the cap was delivered.
    #[error("the model's answer passed the limit of {limit} characters and was cut")]
    AnswerTooLong {
        /// The cap, in characters.
        limit: usize,
    },
    /// The client was misconfigured.
    #[error("model client configuration: {0}")]
    Config(String),
    /// The conversation left the model script ([`script`]): the message names the turn, the
    /// agent and the step.
    #[error("the conversation left the model script: {0}")]
    Script(String),
}

/// Baton's words for an HTTP error status of a model server.
fn http_summary(status: u16) -> String {
    match status {
        401 | 403 => format!("the model server refused Baton's credentials (HTTP {status})"),
        429 => format!("the model server is rate limiting requests (HTTP {status})"),
        500.. => format!("the model server failed (HTTP {status})"),
        _ => format!("the model server rejected the request (HTTP {status})"),
    }
}

impl ModelError {
    /// Whether the same request may succeed if retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Connect(_) | ModelError::Timeout(_) | ModelError::Truncated(_) => true,
            ModelError::Http { status, .. } => *status == 429 || *status >= 500,
            ModelError::Stream(_)
            | ModelError::Decode(_)
            | ModelError::AnswerTooLong { .. }
            | ModelError::Config(_)
            | ModelError::Script(_) => false,
        }
    }

    /// A stable code for `error` events.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Connect(_) => "model_unreachable",
            ModelError::Timeout(_) => "model_timeout",
            ModelError::Http { status: 429, .. } => "model_rate_limited",
            ModelError::Http { status, .. } if *status >= 500 => "model_server_error",
            ModelError::Http { .. } => "model_rejected_request",
            ModelError::Stream(_) => "model_stream_error",
            ModelError::Truncated(_) => "model_stream_truncated",
            ModelError::Decode(_) => "model_invalid_response",
            ModelError::AnswerTooLong { .. } => "answer_too_long",
            ModelError::Config(_) => "model_config",
            ModelError::Script(_) => "model_script",
        }
    }

    /// What the server or the transport said, redacted and bounded, for a log line; never for
    /// a client.
    pub fn detail(&self) -> Option<&str> {
        match self {
            ModelError::Connect(d)
            | ModelError::Http { message: d, .. }
            | ModelError::Stream(d)
            | ModelError::Truncated(d)
            | ModelError::Decode(d) => Some(d),
            ModelError::Timeout(_)
            | ModelError::AnswerTooLong { .. }
            | ModelError::Config(_)
            | ModelError::Script(_) => None,
        }
    }

    /// The same error with its detail passed through [`crate::redact::excerpt`], masking
    /// `secrets` too.
    pub(crate) fn redacted(self, secrets: &[&str]) -> ModelError {
        let scrub = |d: String| crate::redact::excerpt(&d, secrets);
        match self {
            ModelError::Connect(d) => ModelError::Connect(scrub(d)),
            ModelError::Http { status, message, retry_after } => {
                ModelError::Http { status, message: scrub(message), retry_after }
            }
            ModelError::Stream(d) => ModelError::Stream(scrub(d)),
            ModelError::Truncated(d) => ModelError::Truncated(scrub(d)),
            ModelError::Decode(d) => ModelError::Decode(scrub(d)),
            other => other,
        }
    }
}

/// A streamed model answer.
pub type DeltaStream = Pin<Box<dyn Stream<Item = Result<ModelDelta, ModelError>> + Send>>;

/// A chat model with streaming and tools.
///
/// `stream` returns at once; the call starts when the stream is first polled, and dropping the
/// stream cancels it.
pub trait ChatModel: Send + Sync {
    /// The model's name, as reported in `usage` and `completed` events.
    fn model_name(&self) -> &str;

    /// Starts one call.
    fn stream(&self, request: ChatRequest) -> DeltaStream;

    /// Whether the server keeps conversations, so that [`ChatModel::stream_continuing`] works
    /// (the OpenAI Responses API).
    fn keeps_conversations(&self) -> bool {
        false
    }

    /// Starts one call that continues the server-side conversation ending in
    /// `previous_response_id`: `request` holds the system prompt and only the items that are new
    /// since that response. Models without server-side state answer with
    /// [`ModelError::Config`].
    fn stream_continuing(&self, request: ChatRequest, previous_response_id: String) -> DeltaStream {
        let _ = (request, previous_response_id);
        let error = ModelError::Config(format!(
            "model `{}` keeps no server-side conversation to continue",
            self.model_name()
        ));
        Box::pin(futures::stream::iter([Err(error)]))
    }
}

impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        (**self).stream(request)
    }

    fn keeps_conversations(&self) -> bool {
        (**self).keeps_conversations()
    }

    fn stream_continuing(&self, request: ChatRequest, previous_response_id: String) -> DeltaStream {
        (**self).stream_continuing(request, previous_response_id)
    }
}

/// A model answer gathered from its stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// The vendor's response id.
    pub response_id: Option<String>,
    /// All text.
    pub text: String,
    /// All reasoning.
    pub reasoning: String,
    /// Complete tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Usage, if reported.
    pub usage: Option<Usage>,
    /// Why it stopped.
    pub finish: Option<FinishReason>,
}

impl ChatResponse {
    /// Folds one delta in.
    pub(crate) fn apply(&mut self, delta: ModelDelta) {
        match delta {
            ModelDelta::ResponseId(id) => self.response_id = Some(id),
            ModelDelta::Text(t) => self.text.push_str(&t),
            ModelDelta::Reasoning(t) => self.reasoning.push_str(&t),
            ModelDelta::ToolCallStart { .. } => {}
            ModelDelta::ToolCall(call) => self.tool_calls.push(call),
            ModelDelta::Usage(u) => self.usage = Some(u),
            ModelDelta::Finish(f) => self.finish = Some(f),
        }
    }
}

/// Drains a model stream into one [`ChatResponse`].
pub async fn collect(mut stream: DeltaStream) -> Result<ChatResponse, ModelError> {
    let mut response = ChatResponse::default();
    while let Some(delta) = stream.next().await {
        response.apply(delta?);
    }
    Ok(response)
}

/// Reassembles streamed tool-call fragments by index.
///
/// Servers send the id and name in a call's first fragment and argument text in later ones. A
/// fragment without an index continues the latest call, unless it carries a new id (some servers
/// omit indexes and start each call with its id).
#[derive(Debug, Default)]
pub(crate) struct ToolCallAssembler {
    calls: BTreeMap<usize, ToolCall>,
    last_index: Option<usize>,
    chars: usize,
}

impl ToolCallAssembler {
    /// Adds one fragment; returns a [`ModelDelta::ToolCallStart`] when this fragment starts a call.
    pub(crate) fn push(
        &mut self,
        index: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> Option<ModelDelta> {
        let index = match index {
            Some(i) => i,
            None => match (self.last_index, id) {
                (Some(last), Some(id)) if self.calls[&last].id != id => last + 1,
                (Some(last), _) => last,
                (None, _) => 0,
            },
        };
        self.last_index = Some(index);
        let is_new = !self.calls.contains_key(&index);
        let call = self.calls.entry(index).or_insert_with(|| ToolCall {
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        });
        let had_name = !call.name.is_empty();
        // A new call counts one character, so a stream of empty calls cannot grow unbounded.
        self.chars += usize::from(is_new);
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.id = id.to_owned();
        }
        if let Some(name) = name {
            self.chars += name.chars().count();
            call.name.push_str(name);
        }
        if let Some(args) = arguments {
            self.chars += args.chars().count();
            call.arguments.push_str(args);
        }
        if (is_new || !had_name) && !call.name.is_empty() {
            return Some(ModelDelta::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() });
        }
        None
    }

    /// Characters of tool names and arguments received so far (never decreases), for the
    /// answer cap.
    pub(crate) fn chars(&self) -> usize {
        self.chars
    }

    /// Whether any fragment was seen.
    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The complete calls in index order; calls without an id get a synthetic one.
    pub(crate) fn finish(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(index, mut call)| {
                if call.id.is_empty() {
                    call.id = format!("call_{index}");
                }
                call
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembler_joins_fragments_by_index() {
        let mut a = ToolCallAssembler::default();
        let start = a.push(Some(0), Some("c0"), Some("ask_support"), Some("{"));
        assert_eq!(
            start,
            Some(ModelDelta::ToolCallStart { index: 0, id: "c0".into(), name: "ask_support".into() })
        );
        assert!(a.push(Some(1), Some("c1"), Some("ask_shopping"), Some("{\"query\":")).is_some());
        assert!(a.push(Some(0), None, None, Some("\"query\":\"a\"}")).is_none());
        assert!(a.push(Some(1), None, None, Some("\"b\"}")).is_none());
        let calls = a.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "ask_support");
        assert_eq!(calls[0].parse_arguments().unwrap()["query"], "a");
        assert_eq!(calls[1].parse_arguments().unwrap()["query"], "b");
    }

    #[test]
    fn assembler_without_indexes_splits_on_new_id() {
        let mut a = ToolCallAssembler::default();
        a.push(None, Some("x"), Some("f"), Some("{}"));
        a.push(None, Some("y"), Some("g"), Some("{"));
        a.push(None, None, None, Some("}"));
        let calls = a.finish();
        assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["f", "g"]);
        assert_eq!(calls[1].arguments, "{}");
    }

    #[test]
    fn empty_arguments_parse_as_empty_object() {
        let call = ToolCall { id: "1".into(), name: "f".into(), arguments: " ".into() };
        assert_eq!(call.parse_arguments().unwrap(), serde_json::json!({}));
    }

    #[test]
    fn retryable_errors_are_the_transient_ones() {
        let http = |status| ModelError::Http { status, message: String::new(), retry_after: None };
        assert!(http(429).is_retryable());
        assert!(http(503).is_retryable());
        assert!(!http(400).is_retryable());
        assert!(!http(401).is_retryable());
        assert!(ModelError::Timeout(TimeoutKind::Idle).is_retryable());
        assert!(!ModelError::Stream("x".into()).is_retryable());
        assert!(!ModelError::AnswerTooLong { limit: 10 }.is_retryable());
        assert_eq!(http(429).code(), "model_rate_limited");
        assert_eq!(ModelError::AnswerTooLong { limit: 10 }.code(), "answer_too_long");
    }

    #[test]
    fn client_facing_text_never_carries_the_vendor_body() {
        let echoed = "Incorrect API key provided: Bearer sk-live-0123456789";
        for e in [
            ModelError::Http { status: 401, message: echoed.into(), retry_after: None },
            ModelError::Decode(echoed.into()),
            ModelError::Truncated(echoed.into()),
            ModelError::Connect(echoed.into()),
        ] {
            assert!(!e.to_string().contains("sk-live"), "{e}");
            let redacted = e.redacted(&[]);
            assert!(!redacted.detail().unwrap().contains("sk-live"), "{redacted:?}");
        }
        let stream = ModelError::Stream(echoed.into()).redacted(&[]);
        assert!(!stream.to_string().contains("sk-live"), "{stream}");
    }
}
