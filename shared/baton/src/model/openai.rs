//! OpenAI Chat Completions over HTTP, for OpenAI and any compatible server (vLLM, llama.cpp,
//! Ollama), by base URL.
//!
//! Retries (connect errors, timeouts, 429 and 5xx, with exponential backoff and jitter, honouring
//! `retry-after-ms` / `Retry-After` seconds) happen only while no delta has reached the caller:
//! once text is out, a retry would repeat it, so a later failure is an error instead.
//!
//! Every answer is capped ([`OpenAiConfig::max_answer_chars`]): a server that streams forever
//! ends in [`ModelError::AnswerTooLong`] after what came before the cap. Error bodies are read
//! up to [`MAX_ERROR_BODY_BYTES`] and kept only as a redacted excerpt for logs
//! ([`crate::redact`]); the client sees Baton's own message.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    ChatModel, ChatRequest, DeltaStream, FinishReason, Message, ModelDelta, ModelError, TimeoutKind,
    ToolCallAssembler, ToolChoice,
};
use crate::bounded::IdleTimer;
use crate::event::Usage;

/// Connect, first-byte and idle timeouts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// Establishing the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the response headers.
    pub first_byte: Duration,
    /// Between two chunks of a started stream.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(30),
            idle: Duration::from_secs(30),
        }
    }
}

/// Retry policy for failures before the first delta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles each time.
    pub base_delay: Duration,
    /// Backoff cap.
    pub max_delay: Duration,
    /// A server's `Retry-After` longer than this is not waited for: the error is returned.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
            max_retry_after: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// How long to wait before retry number `attempt` (0-based) after `error`, or `None` when the
    /// error should be returned instead.
    pub fn delay(&self, attempt: u32, error: &ModelError) -> Option<Duration> {
        if attempt >= self.max_retries || !error.is_retryable() {
            return None;
        }
        if let ModelError::Http { retry_after: Some(after), .. } = error {
            return (*after <= self.max_retry_after).then_some(*after);
        }
        let exp = self.base_delay.saturating_mul(1 << attempt.min(16)).min(self.max_delay);
        // "Equal jitter": half fixed, half random, so retries from many clients spread out.
        Some(exp / 2 + exp.mul_f64(fastrand::f64() / 2.0))
    }
}

/// The default cap on one model answer: text, reasoning and tool-call names and arguments.
pub const DEFAULT_MAX_ANSWER_CHARS: usize = 32_000;
/// A response body may carry this many bytes per answer character (JSON framing, ids, usage)
/// before it is cut: the cap on memory for a stream whose events carry no answer at all.
const BODY_BYTES_PER_ANSWER_CHAR: usize = 256;
/// How much of an error body is read.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Settings of one Chat Completions model.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; none for servers that need none.
    pub api_key: Option<String>,
    /// Model name sent in the request.
    pub model: String,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Retries.
    pub retry: RetryPolicy,
    /// The longest answer, in characters of text, reasoning and tool calls; past it the stream
    /// ends with [`ModelError::AnswerTooLong`].
    pub max_answer_chars: usize,
}

impl OpenAiConfig {
    /// A config with default timeouts and retries.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            max_answer_chars: DEFAULT_MAX_ANSWER_CHARS,
        }
    }
}

/// A Chat Completions model. Cheap to clone; build it once and share it.
#[derive(Debug, Clone)]
pub struct OpenAiChatModel {
    inner: Arc<Endpoint>,
}

/// One OpenAI-style streaming endpoint (Chat Completions or Responses): where to POST, how, and
/// with which retries. Shared by both clients.
#[derive(Debug)]
pub(crate) struct Endpoint {
    http: crate::outbound::Client,
    /// The URL, parsed once (parsing it per call showed in the turn's profile); the text when it
    /// does not parse, for each call to fail with reqwest's own error.
    url: Result<reqwest::Url, String>,
    pub(crate) config: OpenAiConfig,
}

impl Endpoint {
    /// An endpoint at `{base_url}/{path}`.
    pub(crate) fn new(http: crate::outbound::Client, config: OpenAiConfig, path: &str) -> Endpoint {
        let url = format!("{}/{path}", config.base_url.trim_end_matches('/'));
        let url = reqwest::Url::parse(&url).map_err(|_| url);
        Endpoint { http, url, config }
    }
}

/// Turns the SSE events of one streamed answer into deltas.
pub(crate) trait StreamParser: Default + Send {
    /// Parses one SSE event.
    fn event(&mut self, event: &eventsource_stream::Event) -> Result<Vec<ModelDelta>, ModelError>;

    /// Whether the answer is over (later bytes are not read).
    fn is_done(&self) -> bool;

    /// The body ended: what is left to emit, or why the answer is incomplete.
    fn end(&mut self) -> Result<Vec<ModelDelta>, ModelError>;

    /// Characters of tool-call names and arguments received so far (they reach the caller only
    /// when the answer is over, so the cap counts them here).
    fn tool_chars(&self) -> usize;
}

impl OpenAiChatModel {
    /// Builds the model with its own HTTP client.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiChatModel, ModelError> {
        let http = OpenAiChatModel::http_client(&config.timeouts, false)?;
        Ok(OpenAiChatModel::with_client(http, config))
    }

    /// An HTTP client suited to model calls (connect timeout, no Nagle delay, a bounded idle
    /// pool), to share between models. Over `https` it speaks HTTP/2 when the server offers it
    /// (ALPN), so concurrent calls share one connection; `http2_prior_knowledge` speaks HTTP/2
    /// to a cleartext server too (one that accepts h2c without an upgrade).
    pub fn http_client(
        timeouts: &Timeouts,
        http2_prior_knowledge: bool,
    ) -> Result<crate::outbound::Client, ModelError> {
        crate::outbound::Client::new(timeouts.connect, http2_prior_knowledge)
            .map_err(|e| ModelError::Config(e.to_string()))
    }

    /// Builds the model on a shared HTTP client (its connect timeout applies).
    pub fn with_client(http: crate::outbound::Client, config: OpenAiConfig) -> OpenAiChatModel {
        OpenAiChatModel { inner: Arc::new(Endpoint::new(http, config, "chat/completions")) }
    }
}

impl ChatModel for OpenAiChatModel {
    fn model_name(&self) -> &str {
        &self.inner.config.model
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        let body = serde_json::to_vec(&WireRequest::new(&self.inner.config.model, &request))
            .expect("a request always serialises");
        retrying_stream::<ChunkParser>(self.inner.clone(), body.into())
    }
}

/// POSTs `body` (the request's JSON text) to `endpoint` and streams the parsed deltas, retrying
/// failures that happen before the first delta reached the caller.
///
/// A call in flight keeps its few kilobytes of JSON text for a retry, not a `Value` tree (several
/// times larger, and re-serialised by every attempt), and only until its first delta: no retry
/// follows that, and an answer can stream for a long time.
pub(crate) fn retrying_stream<P: StreamParser + 'static>(
    endpoint: Arc<Endpoint>,
    body: bytes::Bytes,
) -> DeltaStream {
    let span = tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {}", endpoint.config.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.system = "openai",
        gen_ai.request.model = %endpoint.config.model,
        gen_ai.response.id = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        baton.ttft_ms = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    let started = tokio::time::Instant::now();
    let deltas = Box::pin(async_stream::stream! {
        let mut attempt = 0;
        let mut first_token = true;
        let mut body = Some(body);
        loop {
            let mut delivered = false;
            let mut failure = None;
            {
                // Retries happen before the first delta, when the body is still kept.
                let Some(sent) = body.clone() else { return };
                let attempt_stream = endpoint.attempt::<P>(sent);
                futures::pin_mut!(attempt_stream);
                while let Some(item) = attempt_stream.next().await {
                    match item {
                        Ok(delta) => {
                            delivered = true;
                            body = None;
                            if first_token && !matches!(delta, ModelDelta::ResponseId(_)) {
                                first_token = false;
                                crate::telemetry::trace::first_token(started.elapsed());
                            }
                            record_in_span(&delta);
                            yield Ok(delta);
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            let Some(error) = failure else { return };
            let model = &endpoint.config.model;
            let (code, detail) = (error.code(), error.detail().unwrap_or(""));
            match endpoint.config.retry.delay(attempt, &error).filter(|_| !delivered) {
                Some(wait) => {
                    tracing::warn!(%model, attempt, ?wait, code, %error, detail, "retrying model call");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                None => {
                    tracing::warn!(%model, code, %error, detail, "model call failed");
                    tracing::Span::current().record("error.type", code);
                    yield Err(error);
                    return;
                }
            }
        }
    });
    crate::telemetry::trace::traced(span, deltas)
}

/// Records what a model-call span keeps of `delta`: its response id and usage.
fn record_in_span(delta: &ModelDelta) {
    let span = match delta {
        ModelDelta::Usage(_) | ModelDelta::ResponseId(_) => tracing::Span::current(),
        _ => return,
    };
    if span.is_disabled() {
        return;
    }
    match delta {
        ModelDelta::Usage(u) => {
            span.record("gen_ai.usage.input_tokens", u.input_tokens);
            span.record("gen_ai.usage.output_tokens", u.output_tokens);
        }
        ModelDelta::ResponseId(id) => {
            span.record("gen_ai.response.id", id.as_str());
        }
        _ => {}
    }
}

impl Endpoint {
    /// One HTTP attempt: the deltas it produced, ending with an error if it failed (its detail
    /// redacted of the API key).
    fn attempt<'a, P: StreamParser + 'a>(
        &'a self,
        body: bytes::Bytes,
    ) -> impl futures::Stream<Item = Result<ModelDelta, ModelError>> + Send + 'a {
        let secrets: Vec<&str> = self.config.api_key.as_deref().into_iter().collect();
        self.attempt_raw::<P>(body).map(move |item| item.map_err(|e| e.redacted(&secrets)))
    }

    fn attempt_raw<'a, P: StreamParser + 'a>(
        &'a self,
        body: bytes::Bytes,
    ) -> impl futures::Stream<Item = Result<ModelDelta, ModelError>> + Send + 'a {
        async_stream::stream! {
            let req = match &self.url {
                Ok(url) => self.http.post(url.clone()),
                Err(text) => self.http.post(text),
            };
            let mut req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
            if let Some(key) = &self.config.api_key {
                req = req.bearer_auth(key);
            }
            req = crate::telemetry::trace::with_trace_headers(req);
            let timeouts = self.config.timeouts;
            let response = match tokio::time::timeout(timeouts.first_byte, self.http.send(req)).await {
                Err(_) => { yield Err(ModelError::Timeout(TimeoutKind::FirstByte)); return; }
                Ok(Err(e)) => { yield Err(transport_error(&e)); return; }
                Ok(Ok(r)) => r,
            };
            if !response.status().is_success() {
                // Boxed: the error path's state would otherwise sit in every answer's stream.
                yield Err(Box::pin(http_error(response, timeouts.idle)).await);
                return;
            }
            let limit = self.config.max_answer_chars;
            let events = capped_body(response, limit.saturating_mul(BODY_BYTES_PER_ANSWER_CHAR))
                .eventsource();
            futures::pin_mut!(events);
            let mut idle = IdleTimer::new(timeouts.idle);
            let mut parser = P::default();
            let mut answer_chars = 0usize;
            while !parser.is_done() {
                let event = match idle.next(&mut events).await {
                    Err(_) => { yield Err(ModelError::Timeout(TimeoutKind::Idle)); return; }
                    Ok(None) => break,
                    Ok(Some(Err(e))) => {
                        yield Err(stream_error(e, limit));
                        return;
                    }
                    Ok(Some(Ok(event))) => event,
                };
                match parser.event(&event) {
                    Ok(deltas) => for d in deltas {
                        if let ModelDelta::Text(t) | ModelDelta::Reasoning(t) = &d {
                            answer_chars += t.chars().count();
                        }
                        yield Ok(d);
                    },
                    Err(e) => { yield Err(e); return; }
                }
                if answer_chars + parser.tool_chars() > limit {
                    yield Err(ModelError::AnswerTooLong { limit });
                    return;
                }
            }
            match parser.end() {
                Ok(deltas) => for d in deltas { yield Ok(d); },
                Err(e) => yield Err(e),
            }
        }
    }
}

pub(crate) fn transport_error(e: &crate::outbound::Error) -> ModelError {
    if e.is_timeout() {
        ModelError::Timeout(TimeoutKind::Connect)
    } else if e.is_connect() {
        ModelError::Connect(e.to_string())
    } else {
        ModelError::Truncated(e.to_string())
    }
}

/// Why a response body stopped.
#[derive(Debug)]
enum BodyError {
    /// The transport failed.
    Transport(String),
    /// The body passed its byte cap.
    TooLarge,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Transport(e) => f.write_str(e),
            BodyError::TooLarge => f.write_str("the body passed its size cap"),
        }
    }
}

impl std::error::Error for BodyError {}

/// The body's bytes, ending in [`BodyError::TooLarge`] once more than `max_bytes` came.
fn capped_body(
    response: crate::outbound::Response,
    max_bytes: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, BodyError>> + Send {
    let mut seen = 0usize;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| BodyError::Transport(e.to_string()))?;
        seen = seen.saturating_add(chunk.len());
        if seen > max_bytes { Err(BodyError::TooLarge) } else { Ok(chunk) }
    })
}

/// A failure of the event stream: the byte cap is the answer cap; a transport failure or
/// malformed framing is a truncation (the parser's message would repeat the body: dropped).
fn stream_error(e: eventsource_stream::EventStreamError<BodyError>, limit: usize) -> ModelError {
    use eventsource_stream::EventStreamError;
    match e {
        EventStreamError::Transport(BodyError::TooLarge) => ModelError::AnswerTooLong { limit },
        EventStreamError::Transport(BodyError::Transport(e)) => ModelError::Truncated(e),
        EventStreamError::Utf8(e) => ModelError::Truncated(format!("the stream is not UTF-8: {e}")),
        EventStreamError::Parser(_) => ModelError::Truncated("the event stream is malformed".into()),
    }
}

/// Reads at most `max_bytes` of a body, each chunk within `idle`; what came before a failure
/// or the cap is kept.
pub async fn read_capped<E>(
    bytes: impl futures::Stream<Item = Result<bytes::Bytes, E>>,
    idle: Duration,
    max_bytes: usize,
) -> Vec<u8> {
    let mut bytes = std::pin::pin!(bytes);
    let mut idle = IdleTimer::new(idle);
    let mut body = Vec::new();
    while body.len() < max_bytes {
        match idle.next(&mut bytes).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk[..chunk.len().min(max_bytes - body.len())]),
            _ => break,
        }
    }
    body
}

/// The error of a non-2xx answer: its status, `Retry-After`, and the body's message for logs
/// (read up to [`MAX_ERROR_BODY_BYTES`]; redacted by the caller).
pub(crate) async fn http_error(response: crate::outbound::Response, idle: Duration) -> ModelError {
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers());
    let body = read_capped(response.bytes_stream(), idle, MAX_ERROR_BODY_BYTES).await;
    ModelError::Http { status, message: error_message(&String::from_utf8_lossy(&body)), retry_after }
}

/// OpenAI sends `retry-after-ms`; the HTTP standard header is seconds (an HTTP date is ignored and
/// normal backoff applies).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let valid = |v: f64| v.is_finite() && v >= 0.0;
    if let Some(ms) = get("retry-after-ms").filter(|v| valid(*v)) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    get("retry-after").filter(|v| valid(*v)).map(Duration::from_secs_f64)
}

/// The `error.message` of an OpenAI error body, or the body itself (shortened).
fn error_message(body: &str) -> String {
    #[derive(Deserialize)]
    struct Envelope {
        error: ErrorBody,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ErrorBody {
        Object { message: String },
        Text(String),
    }
    match serde_json::from_str::<Envelope>(body) {
        Ok(Envelope { error: ErrorBody::Object { message } | ErrorBody::Text(message) }) => message,
        Err(_) => {
            let body = body.trim();
            match body.char_indices().nth(300) {
                Some((cut, _)) => format!("{}…", &body[..cut]),
                None if body.is_empty() => "(empty body)".to_owned(),
                None => body.to_owned(),
            }
        }
    }
}

/// The JSON body of a streaming Chat Completions request.
pub fn request_body(model: &str, request: &ChatRequest) -> Value {
    serde_json::to_value(WireRequest::new(model, request)).expect("a request always serialises")
}

/// A Chat Completions request as it goes on the wire, borrowing every string and schema from the
/// [`ChatRequest`]: serialised straight to bytes, with no `Value` tree in between.
#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<WireTool<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireFormat<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct WireFormat<'a> {
    r#type: &'static str,
    json_schema: WireSchema<'a>,
}

#[derive(Serialize)]
struct WireSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

impl<'a> WireRequest<'a> {
    fn new(model: &'a str, request: &'a ChatRequest) -> WireRequest<'a> {
        let with_tools = !request.tools.is_empty();
        WireRequest {
            model,
            messages: request.messages.iter().map(WireMessage::new).collect(),
            stream: true,
            stream_options: StreamOptions { include_usage: true },
            tools: request
                .tools
                .iter()
                .map(|t| WireTool {
                    r#type: "function",
                    function: WireFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.parameters,
                    },
                })
                .collect(),
            tool_choice: request.tool_choice.filter(|_| with_tools).map(ToolChoice::wire_name),
            parallel_tool_calls: request.parallel_tool_calls.filter(|_| with_tools),
            max_tokens: request.max_tokens,
            response_format: request.response_format.as_ref().map(|f| WireFormat {
                r#type: "json_schema",
                json_schema: WireSchema { name: &f.name, schema: &f.schema, strict: true },
            }),
        }
    }
}

/// One message on the wire (`role` and its fields).
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: WireContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: its text, or text and images as parts.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireUrl<'a> },
}

#[derive(Serialize)]
struct WireUrl<'a> {
    url: &'a str,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl<'a> WireMessage<'a> {
    fn new(message: &'a Message) -> WireMessage<'a> {
        match message {
            Message::System { content } => WireMessage::System { content },
            Message::User { content, images } if images.is_empty() => {
                WireMessage::User { content: WireContent::Text(content) }
            }
            Message::User { content, images } => {
                let mut parts = vec![WirePart::Text { text: content }];
                parts.extend(images.iter().map(|url| WirePart::ImageUrl { image_url: WireUrl { url } }));
                WireMessage::User { content: WireContent::Parts(parts) }
            }
            Message::Assistant { content, tool_calls } => WireMessage::Assistant {
                content: content.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireCall {
                        id: &c.id,
                        r#type: "function",
                        function: WireCallFunction { name: &c.name, arguments: &c.arguments },
                    })
                    .collect(),
            },
            Message::Tool { call_id, content } => WireMessage::Tool { tool_call_id: call_id, content },
        }
    }
}

/// `tool_choice` and `parallel_tool_calls`, spelled the same in both OpenAI APIs.
pub(crate) fn tool_options(body: &mut Value, request: &ChatRequest) {
    if let Some(choice) = request.tool_choice {
        body["tool_choice"] = json!(choice.wire_name());
    }
    if let Some(parallel) = request.parallel_tool_calls {
        body["parallel_tool_calls"] = json!(parallel);
    }
}

/// One Chat Completions chunk. Its strings borrow from the `data:` payload where they can (no
/// escapes to decode): a chunk's id and finish reason are read and dropped, so they cost no
/// allocation, and only text that goes on is copied.
///
/// Each is a [`Str`]: serde borrows a `Cow<str>` only as a field's own type, not inside an
/// `Option`.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<Str<'a>>,
    #[serde(borrow)]
    reasoning_content: Option<Str<'a>>,
    #[serde(borrow)]
    reasoning: Option<Str<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    index: Option<usize>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(borrow)]
    arguments: Option<Str<'a>>,
}

/// A string of a chunk, borrowed from the payload unless it has escapes.
#[derive(Deserialize)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

impl std::ops::Deref for Str<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// `cached_tokens`: OpenAI, and llama.cpp's server (see the captures in tests/fixtures).
    #[serde(default)]
    prompt_tokens_details: Option<TokenDetails>,
    /// `reasoning_tokens`: OpenAI's reasoning models.
    #[serde(default)]
    completion_tokens_details: Option<TokenDetails>,
}

/// The breakdown both OpenAI APIs give of input and output tokens (fields absent → 0; a
/// server that sends `null` for the whole object is read as no breakdown).
#[derive(Deserialize, Default)]
pub(crate) struct TokenDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) reasoning_tokens: Option<u64>,
}

impl TokenDetails {
    pub(crate) fn cached(details: &Option<TokenDetails>) -> u64 {
        details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0)
    }

    pub(crate) fn reasoning(details: &Option<TokenDetails>) -> u64 {
        details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0)
    }
}

/// Turns Chat Completions chunks (the `data:` payloads) into deltas.
#[derive(Default)]
pub struct ChunkParser {
    response_id_sent: bool,
    tools: ToolCallAssembler,
    finished: bool,
    done: bool,
}

impl ChunkParser {
    /// Parses one `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<Vec<ModelDelta>, ModelError> {
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| ModelError::Decode(format!("{e} in chunk {}", shorten(data))))?;
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(ModelError::Stream(message));
        }
        let mut out = Vec::new();
        if let (false, Some(id)) = (self.response_id_sent, chunk.id.filter(|s| !s.is_empty())) {
            self.response_id_sent = true;
            out.push(ModelDelta::ResponseId(id.0.into_owned()));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content.or(delta.reasoning).filter(|s| !s.is_empty()) {
                    out.push(ModelDelta::Reasoning(r.0.into_owned()));
                }
                if let Some(text) = delta.content.filter(|s| !s.is_empty()) {
                    out.push(ModelDelta::Text(text.0.into_owned()));
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let (name, args) = match &call.function {
                        Some(f) => (f.name.as_deref(), f.arguments.as_deref()),
                        None => (None, None),
                    };
                    out.extend(self.tools.push(call.index, call.id.as_deref(), name, args));
                }
            }
            if let Some(reason) = choice.finish_reason {
                out.extend(self.tools.finish().into_iter().map(ModelDelta::ToolCall));
                out.push(ModelDelta::Finish(FinishReason::parse(&reason)));
                self.finished = true;
            }
        }
        if let Some(u) = chunk.usage {
            out.push(ModelDelta::Usage(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                cached_input_tokens: TokenDetails::cached(&u.prompt_tokens_details),
                reasoning_tokens: TokenDetails::reasoning(&u.completion_tokens_details),
                cost_usd: None,
            }));
        }
        Ok(out)
    }

    /// The stream ended: flushes tool calls a server never closed with a finish reason, or fails
    /// when the stream stopped before the model finished.
    pub fn finish(&mut self) -> Result<Vec<ModelDelta>, ModelError> {
        if self.finished {
            return Ok(Vec::new());
        }
        if self.done && !self.tools.is_empty() {
            let mut out: Vec<_> = self.tools.finish().into_iter().map(ModelDelta::ToolCall).collect();
            out.push(ModelDelta::Finish(FinishReason::ToolCalls));
            return Ok(out);
        }
        if self.done {
            return Ok(vec![ModelDelta::Finish(FinishReason::Stop)]);
        }
        Err(ModelError::Truncated("the stream closed before a finish reason or [DONE]".into()))
    }
}

impl StreamParser for ChunkParser {
    fn event(&mut self, event: &eventsource_stream::Event) -> Result<Vec<ModelDelta>, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        self.feed(data)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn end(&mut self) -> Result<Vec<ModelDelta>, ModelError> {
        self.finish()
    }

    fn tool_chars(&self) -> usize {
        self.tools.chars()
    }
}

pub(crate) fn shorten(s: &str) -> &str {
    match s.char_indices().nth(120) {
        Some((cut, _)) => &s[..cut],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_and_reasoning_tokens_are_read_from_the_usage_details() {
        // OpenAI's shape for a reasoning model; a `null` breakdown is no breakdown.
        let mut p = ChunkParser::default();
        let deltas = p
            .feed(
                r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":40,
                "prompt_tokens_details":{"cached_tokens":64,"audio_tokens":0},
                "completion_tokens_details":{"reasoning_tokens":32,"accepted_prediction_tokens":0}}}"#,
            )
            .unwrap();
        let want = Usage { cached_input_tokens: 64, reasoning_tokens: 32, ..Usage::tokens(100, 40) };
        assert_eq!(deltas, [ModelDelta::Usage(want)]);
        let deltas = p
            .feed(r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":null}}"#)
            .unwrap();
        assert_eq!(deltas, [ModelDelta::Usage(Usage::tokens(1, 2))]);
    }

    #[test]
    fn a_chunks_strings_borrow_from_the_payload_unless_escaped() {
        let data = r#"{"id":"chatcmpl-1","choices":[{"delta":{"content":"a \"quoted\" word"},"finish_reason":"stop"}]}"#;
        let chunk: Chunk = serde_json::from_str(data).unwrap();
        assert!(matches!(chunk.id, Some(Str(Cow::Borrowed("chatcmpl-1")))));
        let choice = &chunk.choices[0];
        assert!(matches!(choice.finish_reason, Some(Str(Cow::Borrowed("stop")))));
        // Escapes are decoded into an owned string.
        let content = choice.delta.as_ref().and_then(|d| d.content.as_ref()).unwrap();
        assert!(matches!(&content.0, Cow::Owned(s) if s == "a \"quoted\" word"));
        let mut p = ChunkParser::default();
        assert_eq!(
            p.feed(data).unwrap(),
            [
                ModelDelta::ResponseId("chatcmpl-1".into()),
                ModelDelta::Text("a \"quoted\" word".into()),
                ModelDelta::Finish(FinishReason::Stop)
            ]
        );
    }

    #[test]
    fn retry_after_ms_wins_over_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut date = reqwest::header::HeaderMap::new();
        date.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&date), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_stops_at_max_retries() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(1),
        };
        let err = ModelError::Connect("refused".into());
        for _ in 0..50 {
            let d0 = p.delay(0, &err).unwrap();
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100), "{d0:?}");
            let d2 = p.delay(2, &err).unwrap();
            assert!(d2 >= Duration::from_millis(150) && d2 <= Duration::from_millis(300), "{d2:?}");
        }
        assert_eq!(p.delay(3, &err), None);
        let too_long = ModelError::Http {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_secs(5)),
        };
        assert_eq!(p.delay(0, &too_long), None);
        let bad = ModelError::Http { status: 400, message: String::new(), retry_after: None };
        assert_eq!(p.delay(0, &bad), None);
    }

    #[test]
    fn error_bodies_yield_their_message() {
        assert_eq!(error_message(r#"{"error":{"message":"Rate limit","type":"x"}}"#), "Rate limit");
        assert_eq!(error_message(r#"{"error":"bad model"}"#), "bad model");
        assert_eq!(error_message("upstream exploded"), "upstream exploded");
        assert_eq!(error_message(""), "(empty body)");
    }

    #[test]
    fn mid_stream_error_payload_is_a_typed_error() {
        let mut p = ChunkParser::default();
        let err = p.feed(r#"{"error":{"message":"context overflow"}}"#).unwrap_err();
        assert_eq!(err, ModelError::Stream("context overflow".into()));
    }

    #[test]
    fn stream_without_finish_or_done_is_truncated() {
        let mut p = ChunkParser::default();
        p.feed(r#"{"id":"x","choices":[{"delta":{"content":"hi"}}]}"#).unwrap();
        assert!(matches!(p.finish(), Err(ModelError::Truncated(_))));
    }

    #[test]
    fn request_body_carries_tools_and_tool_results() {
        let req = ChatRequest {
            messages: vec![
                Message::system("s"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![super::super::ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool { call_id: "c".into(), content: "ok".into() },
            ],
            tools: vec![super::super::ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            tool_choice: Some(ToolChoice::Required),
            parallel_tool_calls: Some(true),
            max_tokens: None,
            response_format: None,
        };
        let body = request_body("m", &req);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(body["messages"][2]["tool_call_id"], "c");
    }

    #[test]
    fn the_wire_request_is_the_documented_json_field_for_field() {
        let req = ChatRequest {
            messages: vec![
                Message::system("s"),
                Message::User { content: "look".into(), images: vec!["data:image/png;base64,AA".into()] },
                Message::Assistant { content: None, tool_calls: Vec::new() },
                Message::user("plain"),
            ],
            tools: Default::default(),
            // Without tools, neither option is sent.
            tool_choice: Some(ToolChoice::Auto),
            parallel_tool_calls: Some(true),
            max_tokens: Some(50),
            response_format: Some(super::super::ResponseFormat {
                name: "plan".into(),
                schema: json!({"type": "object"}),
            }),
        };
        let expected = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ]},
                {"role": "assistant", "content": null},
                {"role": "user", "content": "plain"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 50,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "plan", "schema": {"type": "object"}, "strict": true}},
        });
        assert_eq!(request_body("m", &req), expected);
    }
}
