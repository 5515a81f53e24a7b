//! The Forethought Solve API client, built from Forethought's "Solve API Developer Reference".
//!
//! - Start: `POST {base}/solve/api/v1/conversation`.
//! - Continue: `PUT {base}/solve/api/v1/conversation/{conversation_id}`.
//! - Rate: `POST {base}/solve/api/v1/conversation/{conversation_id}/csat` ([`ForethoughtClient::csat`]).
//!
//! Start and continue send a bearer token and the JSON body `{query, user_id, channel,
//! context_variables}`. The documented answer is one JSON object `{conversation_id,
//! widget_components: [{type, message (HTML), buttons?, output_variable?}], is_solved?,
//! should_escalate?, intent?, workflow_id?}`: each component becomes one [`SolveChunk`] of plain
//! text (`super::widget`), in order. An object with a `response` string instead (an older,
//! undocumented shape) is read too, and so is a stream of such objects (`application/x-ndjson`,
//! one per line, or `text/event-stream`, one per `data:`), whose pieces are handed on as they
//! arrive. An object of neither shape is [`VendorError::Decode`] (`support_invalid_response`).
//! Connect, first-byte and idle timeouts bound every call, so a vendor that stalls becomes an
//! error, never a hang; a line or body past [`MAX_ANSWER_BYTES`] is an error too, never unbounded
//! memory.
//!
//! A [`VendorError`]'s text is Baton's own; what Forethought said (which may echo the token) is
//! kept as a redacted excerpt for the log ([`baton::redact`]), never shown to a client.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};

use super::widget::{Outcome, Prompt, read_component};
use baton::bounded::IdleTimer;
use baton::event::LineSplitter;
use baton::model::openai::{MAX_ERROR_BODY_BYTES, Timeouts, read_capped};

/// The longest answer piece (an NDJSON line, an SSE event, a JSON body) read from Forethought.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The Forethought production host.
pub(crate) const FORETHOUGHT_DEFAULT_BASE_URL: &str = "https://app.forethought.ai";

/// How the orchestrator's `prior_context` reaches Forethought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorContextMode {
    /// In front of the query: `Context from earlier: …\n\n<query>`.
    Prefix,
    /// As the context variable of this name; the query stays the user's words.
    ContextVariable(String),
}

impl std::str::FromStr for PriorContextMode {
    type Err = String;

    /// `prefix`, or `variable:<name>`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "prefix" => Ok(PriorContextMode::Prefix),
            other => match other.strip_prefix("variable:").map(str::trim) {
                Some(name) if !name.is_empty() => Ok(PriorContextMode::ContextVariable(name.to_owned())),
                _ => Err(format!("`{s}` is neither `prefix` nor `variable:<name>`")),
            },
        }
    }
}

/// Settings of the Forethought client and agent.
#[derive(Debug, Clone)]
pub struct ForethoughtConfig {
    /// Base URL (scheme and host), e.g. `https://app.forethought.ai`.
    pub base_url: String,
    /// Solve API token, sent as a bearer token.
    pub token: String,
    /// The `channel` field.
    pub channel: String,
    /// Where `prior_context` goes.
    pub prior_context: PriorContextMode,
    /// Context variables sent with every request.
    pub context_variables: Map<String, Value>,
    /// Connect, first-byte and idle timeouts.
    pub timeouts: Timeouts,
    /// A stored conversation younger than this is continued; an older one is replaced.
    pub continue_window: Duration,
    /// How many earlier support turns prefix the first query of a replacement conversation.
    pub prefix_turns: usize,
    /// Longest a call waits for another call on the same episode's conversation to finish
    /// (Forethought takes one request per conversation at a time); then `support_busy`.
    pub busy_wait: Duration,
    /// How long a call holds the episode's conversation at most (the lease's expiry, should the
    /// holder die without releasing it).
    pub busy_hold: Duration,
}

impl ForethoughtConfig {
    /// Defaults (55-minute window, 6 turns, 20 s first byte and idle, 25 s wait for a busy
    /// conversation, 60 s hold) for `base_url` and `token`.
    pub fn new(base_url: impl Into<String>, token: impl Into<String>) -> ForethoughtConfig {
        ForethoughtConfig {
            base_url: base_url.into(),
            token: token.into(),
            channel: "headless".into(),
            prior_context: PriorContextMode::Prefix,
            context_variables: Map::new(),
            timeouts: Timeouts {
                connect: Duration::from_secs(5),
                first_byte: Duration::from_secs(20),
                idle: Duration::from_secs(20),
            },
            continue_window: Duration::from_secs(55 * 60),
            prefix_turns: 6,
            busy_wait: Duration::from_secs(25),
            busy_hold: Duration::from_secs(60),
        }
    }
}

/// One Solve request.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveRequest {
    /// The query as sent.
    pub query: String,
    /// The end user.
    pub user_id: String,
    /// Context variables (merged over the configured ones).
    pub context_variables: Map<String, Value>,
}

/// One piece of an answer: a widget component, or a fragment of a `response` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SolveChunk {
    /// The conversation, when the piece names it.
    pub conversation_id: Option<String>,
    /// Plain text: a component's text, or a fragment of the answer.
    pub text: String,
    /// A component: a block of its own, set apart from the text before it by a blank line
    /// (`response` fragments join as they are).
    pub block: bool,
    /// What the component asks the user to answer (`button`, `form`).
    pub prompt: Option<Prompt>,
    /// The answer's outcome fields, on its last piece.
    pub outcome: Option<Outcome>,
}

/// A Forethought call failed. The text is Baton's; the fields keep what the vendor or the
/// transport said, redacted, for logs ([`VendorError::detail`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VendorError {
    /// Forethought could not be reached.
    #[error("cannot reach Forethought")]
    Connect(String),
    /// A timeout fired.
    #[error("Forethought timed out ({0})")]
    Timeout(&'static str),
    /// Forethought answered with an HTTP error.
    #[error("{}", http_summary(*status))]
    Http {
        /// The status.
        status: u16,
        /// The body's message (or the body), redacted and bounded: for logs.
        message: String,
    },
    /// The answer broke off.
    #[error("the Forethought answer broke off")]
    Truncated(String),
    /// The answer was not what the API documents.
    #[error("Forethought sent an answer Baton cannot read")]
    Decode(String),
}

/// Baton's words for an HTTP error status of Forethought.
fn http_summary(status: u16) -> String {
    match status {
        401 | 403 => format!("Forethought refused Baton's credentials (HTTP {status})"),
        429 => format!("Forethought is rate limiting requests (HTTP {status})"),
        404 | 410 => format!("Forethought no longer knows the conversation (HTTP {status})"),
        409 => format!("Forethought is busy with another request on this conversation (HTTP {status})"),
        500.. => format!("Forethought failed (HTTP {status})"),
        _ => format!("Forethought rejected the request (HTTP {status})"),
    }
}

impl VendorError {
    /// A stable code for `error` events.
    pub fn code(&self) -> &'static str {
        match self {
            VendorError::Connect(_) => "support_unreachable",
            VendorError::Timeout(_) => "support_timeout",
            VendorError::Http { status: 429, .. } => "support_rate_limited",
            VendorError::Http { status: 409, .. } => "support_conversation_busy",
            VendorError::Http { status, .. } if *status >= 500 => "support_server_error",
            VendorError::Http { .. } => "support_rejected_request",
            VendorError::Truncated(_) => "support_stream_truncated",
            VendorError::Decode(_) => "support_invalid_response",
        }
    }

    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            VendorError::Connect(_) | VendorError::Timeout(_) | VendorError::Truncated(_) => true,
            VendorError::Http { status, .. } => *status == 409 || *status == 429 || *status >= 500,
            VendorError::Decode(_) => false,
        }
    }

    /// Whether Forethought refused the call because another request on the same conversation
    /// was in progress. The reference says such requests "receive error messages" without
    /// naming a status; Baton takes 409 Conflict to be that refusal.
    pub fn is_conversation_busy(&self) -> bool {
        matches!(self, VendorError::Http { status: 409, .. })
    }

    /// Whether a continued conversation no longer exists on Forethought's side.
    pub fn is_conversation_gone(&self) -> bool {
        matches!(self, VendorError::Http { status: 404 | 410, .. })
    }

    /// What Forethought or the transport said, redacted and bounded, for a log line; never for
    /// a client.
    pub fn detail(&self) -> Option<&str> {
        match self {
            VendorError::Connect(d)
            | VendorError::Http { message: d, .. }
            | VendorError::Truncated(d)
            | VendorError::Decode(d) => Some(d),
            VendorError::Timeout(_) => None,
        }
    }

    /// The same error with its detail passed through [`baton::redact::excerpt`].
    fn redacted(self, secrets: &[&str]) -> VendorError {
        let scrub = |d: String| baton::redact::excerpt(&d, secrets);
        match self {
            VendorError::Connect(d) => VendorError::Connect(scrub(d)),
            VendorError::Http { status, message } => VendorError::Http { status, message: scrub(message) },
            VendorError::Truncated(d) => VendorError::Truncated(scrub(d)),
            VendorError::Decode(d) => VendorError::Decode(scrub(d)),
            timeout @ VendorError::Timeout(_) => timeout,
        }
    }
}

/// The conversations endpoint under `base_url`.
fn conversations_url(base_url: &str) -> String {
    format!("{}/solve/api/v1/conversation", base_url.trim_end_matches('/'))
}

/// A Solve request's JSON body, serialised from the request and the settings as they are.
#[derive(serde::Serialize)]
struct SolveBody<'a> {
    query: &'a str,
    user_id: &'a str,
    channel: &'a str,
    context_variables: ContextVariables<'a>,
}

/// The configured context variables with the request's over them (a request's value wins).
struct ContextVariables<'a> {
    configured: &'a Map<String, Value>,
    request: &'a Map<String, Value>,
}

impl serde::Serialize for ContextVariables<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // In the order a merged map would have: the configured keys (with the request's value
        // where it has one), then the request's own.
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.configured {
            map.serialize_entry(k, self.request.get(k).unwrap_or(v))?;
        }
        for (k, v) in self.request.iter().filter(|(k, _)| !self.configured.contains_key(*k)) {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The pieces of one answer, ending with an error if the call failed.
pub(crate) type SolveStream = std::pin::Pin<Box<dyn Stream<Item = Result<SolveChunk, VendorError>> + Send>>;

/// A Forethought Solve client. Cheap to clone; build it once.
#[derive(Debug, Clone)]
pub struct ForethoughtClient {
    http: baton::outbound::Client,
    config: std::sync::Arc<ForethoughtConfig>,
    /// `<base_url>/solve/api/v1/conversation`, parsed once. `None` if it does not parse as a URL
    /// with a path: each call then fails on the URL, as it would have.
    conversations: Option<reqwest::Url>,
}

impl ForethoughtClient {
    /// A client on a shared HTTP client (its connect timeout applies).
    pub(crate) fn with_client(http: baton::outbound::Client, config: ForethoughtConfig) -> ForethoughtClient {
        let conversations = reqwest::Url::parse(&conversations_url(&config.base_url))
            .ok()
            .filter(|url| !url.cannot_be_a_base());
        ForethoughtClient { http, config: std::sync::Arc::new(config), conversations }
    }

    /// A client with its own HTTP client.
    pub fn new(config: ForethoughtConfig) -> Result<ForethoughtClient, VendorError> {
        let http = baton::outbound::Client::new(config.timeouts.connect, false)
            .map_err(|e| VendorError::Connect(e.to_string()))?;
        Ok(ForethoughtClient::with_client(http, config))
    }

    /// The settings.
    pub(crate) fn config(&self) -> &ForethoughtConfig {
        &self.config
    }

    /// Starts a conversation.
    pub fn start(&self, request: &SolveRequest) -> SolveStream {
        let builder = match self.url(None) {
            Ok(url) => self.http.post(url),
            Err(unparsed) => self.http.post(unparsed),
        };
        self.call(builder, request)
    }

    /// Continues `conversation_id`.
    pub fn continue_conversation(&self, conversation_id: &str, request: &SolveRequest) -> SolveStream {
        let builder = match self.url(Some(conversation_id)) {
            Ok(url) => self.http.put(url),
            Err(unparsed) => self.http.put(unparsed),
        };
        self.call(builder, request)
    }

    /// Rates `conversation_id` (customer satisfaction): `POST
    /// {base}/solve/api/v1/conversation/{conversation_id}/csat` with the bearer token and the body
    /// `{"rating": rating}`. The reference names the endpoint; the body's field is Baton's
    /// reading (see `docs/agents.md`). Bounded by the first-byte and idle timeouts.
    pub async fn csat(&self, conversation_id: &str, rating: u8) -> Result<(), VendorError> {
        let url = match self.url(Some(conversation_id)) {
            Ok(mut url) => {
                url.path_segments_mut().expect("checked when the client was built").push("csat");
                url.to_string()
            }
            Err(unparsed) => format!("{unparsed}/csat"),
        };
        let builder = self
            .http
            .post(url)
            .bearer_auth(&self.config.token)
            .json(&serde_json::json!({ "rating": rating }));
        let timeouts = self.config.timeouts;
        let token = self.config.token.clone();
        let result = async {
            let response = match tokio::time::timeout(timeouts.first_byte, self.http.send(builder)).await {
                Err(_) => return Err(VendorError::Timeout("first byte")),
                Ok(Err(e)) if e.is_timeout() => return Err(VendorError::Timeout("connect")),
                Ok(Err(e)) if e.is_connect() => return Err(VendorError::Connect(e.to_string())),
                Ok(Err(e)) => return Err(VendorError::Truncated(e.to_string())),
                Ok(Ok(r)) => r,
            };
            let status = response.status();
            let body =
                Box::pin(read_capped(response.bytes_stream(), timeouts.idle, MAX_ERROR_BODY_BYTES)).await;
            if status.is_success() {
                Ok(())
            } else {
                let message = error_message(&String::from_utf8_lossy(&body));
                Err(VendorError::Http { status: status.as_u16(), message })
            }
        }
        .await;
        result.map_err(|e| {
            let e = e.redacted(&[&token]);
            tracing::warn!(code = e.code(), error = %e, detail = e.detail().unwrap_or(""), "Forethought CSAT failed");
            e
        })
    }

    /// The conversations endpoint, or conversation `id`'s under it; its text if the base URL
    /// does not parse.
    fn url(&self, id: Option<&str>) -> Result<reqwest::Url, String> {
        // Ids are opaque: keep one from breaking out of its path segment.
        let id = id.map(|id| id.replace(['/', '?', '#'], "_"));
        match (&self.conversations, id) {
            (Some(url), None) => Ok(url.clone()),
            (Some(url), Some(id)) => {
                let mut url = url.clone();
                url.path_segments_mut().expect("checked when the client was built").push(&id);
                Ok(url)
            }
            (None, None) => Err(conversations_url(&self.config.base_url)),
            (None, Some(id)) => Err(format!("{}/{id}", conversations_url(&self.config.base_url))),
        }
    }

    fn call(&self, builder: reqwest::RequestBuilder, request: &SolveRequest) -> SolveStream {
        let body = SolveBody {
            query: &request.query,
            user_id: &request.user_id,
            channel: &self.config.channel,
            context_variables: ContextVariables {
                configured: &self.config.context_variables,
                request: &request.context_variables,
            },
        };
        let builder =
            baton::telemetry::trace::with_trace_headers(builder.bearer_auth(&self.config.token).json(&body));
        let token = self.config.token.clone();
        Box::pin(self.call_raw(builder).map(move |piece| {
            piece.map_err(|e| {
                let e = e.redacted(&[&token]);
                tracing::warn!(code = e.code(), error = %e, detail = e.detail().unwrap_or(""), "Forethought call failed");
                e
            })
        }))
    }

    fn call_raw(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> impl Stream<Item = Result<SolveChunk, VendorError>> + Send + 'static {
        let timeouts = self.config.timeouts;
        let http = self.http.clone();
        async_stream::stream! {
            let response = match tokio::time::timeout(timeouts.first_byte, http.send(builder)).await {
                Err(_) => { yield Err(VendorError::Timeout("first byte")); return; }
                Ok(Err(e)) if e.is_timeout() => { yield Err(VendorError::Timeout("connect")); return; }
                Ok(Err(e)) if e.is_connect() => { yield Err(VendorError::Connect(e.to_string())); return; }
                Ok(Err(e)) => { yield Err(VendorError::Truncated(e.to_string())); return; }
                Ok(Ok(r)) => r,
            };
            let status = response.status();
            if !status.is_success() {
                let body = Box::pin(read_capped(response.bytes_stream(), timeouts.idle, MAX_ERROR_BODY_BYTES)).await;
                let message = error_message(&String::from_utf8_lossy(&body));
                yield Err(VendorError::Http { status: status.as_u16(), message });
                return;
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_ascii_lowercase();
            if content_type.starts_with("text/event-stream") {
                let mut events = capped_body(response).eventsource();
                let mut idle = IdleTimer::new(timeouts.idle);
                loop {
                    match idle.next(&mut events).await {
                        Err(_) => { yield Err(VendorError::Timeout("idle")); return; }
                        Ok(None) => return,
                        Ok(Some(Err(e))) => { yield Err(stream_error(e)); return; }
                        Ok(Some(Ok(event))) if event.data.trim().is_empty() => {}
                        Ok(Some(Ok(event))) => for piece in pieces(parse_answer(&event.data)) { yield piece; },
                    }
                }
            } else if content_type.contains("ndjson") || content_type.contains("jsonl") {
                let mut bytes = std::pin::pin!(response.bytes_stream());
                let mut lines = LineSplitter::new(MAX_ANSWER_BYTES);
                let mut idle = IdleTimer::new(timeouts.idle);
                loop {
                    match idle.next(&mut bytes).await {
                        Err(_) => { yield Err(VendorError::Timeout("idle")); return; }
                        Ok(Some(Err(e))) => { yield Err(VendorError::Truncated(e.to_string())); return; }
                        Ok(Some(Ok(chunk))) => match lines.push(&chunk) {
                            Ok(complete) => for line in complete { for piece in pieces(decode_answer(&line)) { yield piece; } },
                            Err(e) => { yield Err(VendorError::Decode(e.to_string())); return; }
                        },
                        Ok(None) => {
                            if let Some(rest) = lines.finish() {
                                for piece in pieces(decode_answer(&rest)) { yield piece; }
                            }
                            return;
                        }
                    }
                }
            } else {
                match read_all(response, timeouts.idle).await {
                    Ok(body) => for piece in pieces(decode_answer(&body)) { yield piece; },
                    Err(e) => yield Err(e),
                }
            }
        }
    }
}

/// Ratings go to the rated conversation's CSAT endpoint: up is 5, down is 1.
#[async_trait::async_trait]
impl baton::rating::RatingSink for ForethoughtClient {
    async fn rate(
        &self,
        conversation_id: &str,
        rating: baton::rating::Rating,
    ) -> Result<(), baton::agent::BoxError> {
        let score = match rating {
            baton::rating::Rating::Up => 5,
            baton::rating::Rating::Down => 1,
        };
        Ok(self.csat(conversation_id, score).await?)
    }
}

/// The body's bytes, ending in an error once more than [`MAX_ANSWER_BYTES`] came.
fn capped_body(
    response: baton::outbound::Response,
) -> impl Stream<Item = Result<bytes::Bytes, VendorError>> + Send {
    let mut seen = 0usize;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| VendorError::Truncated(e.to_string()))?;
        seen = seen.saturating_add(chunk.len());
        if seen > MAX_ANSWER_BYTES { Err(too_long()) } else { Ok(chunk) }
    })
}

fn too_long() -> VendorError {
    VendorError::Decode(format!("the answer passed {MAX_ANSWER_BYTES} bytes"))
}

/// A failure of an SSE answer (the parser's own message would repeat the body: dropped).
fn stream_error(e: eventsource_stream::EventStreamError<VendorError>) -> VendorError {
    use eventsource_stream::EventStreamError;
    match e {
        EventStreamError::Transport(e) => e,
        EventStreamError::Utf8(e) => VendorError::Truncated(format!("the stream is not UTF-8: {e}")),
        EventStreamError::Parser(_) => VendorError::Truncated("the event stream is malformed".into()),
    }
}

/// Reads a whole body of at most [`MAX_ANSWER_BYTES`], each chunk within `idle`.
async fn read_all(response: baton::outbound::Response, idle: Duration) -> Result<Vec<u8>, VendorError> {
    let mut bytes = std::pin::pin!(response.bytes_stream());
    let mut idle = IdleTimer::new(idle);
    let mut body = Vec::new();
    loop {
        match idle.next(&mut bytes).await {
            Err(_) => return Err(VendorError::Timeout("idle")),
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(VendorError::Truncated(e.to_string())),
            Ok(Some(Ok(chunk))) if body.len() + chunk.len() > MAX_ANSWER_BYTES => return Err(too_long()),
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
        }
    }
}

/// The pieces of a decoded answer, or its error, one stream item each.
fn pieces(decoded: Result<Vec<SolveChunk>, VendorError>) -> Vec<Result<SolveChunk, VendorError>> {
    match decoded {
        Ok(pieces) => pieces.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(e)],
    }
}

/// Decodes one answer object (a whole answer, or a fragment of a streamed one) from the bytes
/// of an NDJSON line, an SSE `data:` or a JSON body: see `parse_answer`.
pub fn decode_answer(bytes: &[u8]) -> Result<Vec<SolveChunk>, VendorError> {
    parse_answer(&String::from_utf8_lossy(bytes))
}

/// Reads one answer object. The documented shape, `widget_components`, gives one piece per
/// component Baton reads (unknown types are skipped with a warning); the `response` shape gives
/// one piece. The conversation id goes on the first piece, the outcome fields on the last; an
/// answer with no readable component is one empty piece, so the conversation id still arrives.
pub(crate) fn parse_answer(text: &str) -> Result<Vec<SolveChunk>, VendorError> {
    let shown = || text.trim().chars().take(120).collect::<String>();
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|e| VendorError::Decode(format!("{e} in `{}`", shown())))?;
    let Some(object) = value.as_object() else {
        return Err(VendorError::Decode(format!("the answer is not a JSON object: `{}`", shown())));
    };
    let conversation_id =
        object.get("conversation_id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let outcome = Outcome::of(object);
    let mut pieces: Vec<SolveChunk> = match (object.get("widget_components"), object.get("response")) {
        (Some(Value::Array(components)), _) => components
            .iter()
            .filter_map(read_component)
            .map(|c| SolveChunk { text: c.text, block: true, prompt: c.prompt, ..SolveChunk::default() })
            .collect(),
        (Some(other), _) if !other.is_null() => {
            return Err(VendorError::Decode(format!("`widget_components` is not a list in `{}`", shown())));
        }
        (_, Some(Value::String(response))) => {
            vec![SolveChunk { text: response.clone(), ..SolveChunk::default() }]
        }
        _ => {
            return Err(VendorError::Decode(format!(
                "the answer has neither `widget_components` nor a `response` string: `{}`",
                shown()
            )));
        }
    };
    if pieces.is_empty() {
        pieces.push(SolveChunk::default());
    }
    pieces[0].conversation_id = conversation_id;
    let last = pieces.len() - 1;
    pieces[last].outcome = outcome;
    Ok(pieces)
}

/// The message of an error body (`{"error": "…"}`, `{"error": {"message": …}}`, `{"detail": …}`,
/// `{"message": …}`), or the body shortened.
fn error_message(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let candidates = [&value["error"]["message"], &value["error"], &value["detail"], &value["message"]];
    if let Some(message) = candidates.iter().find_map(|v| v.as_str()) {
        return message.to_owned();
    }
    let body = body.trim();
    if body.is_empty() { "(empty body)".into() } else { body.chars().take(300).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_merges_context_variables_in_order_with_the_requests_winning() {
        let map = |v: Value| v.as_object().unwrap().clone();
        let configured = map(serde_json::json!({"a": 1, "b": 2, "c": 3}));
        let request = map(serde_json::json!({"d": 4, "b": "request"}));
        let body = SolveBody {
            query: "q",
            user_id: "u",
            channel: "headless",
            context_variables: ContextVariables { configured: &configured, request: &request },
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"query":"q","user_id":"u","channel":"headless","context_variables":{"a":1,"b":"request","c":3,"d":4}}"#
        );
    }

    #[test]
    fn a_conversation_id_stays_in_its_path_segment() {
        let client = ForethoughtClient::new(ForethoughtConfig::new("http://127.0.0.1:9/base/", "t")).unwrap();
        assert_eq!(
            client.url(Some("a/b?c#d e")).unwrap().as_str(),
            "http://127.0.0.1:9/base/solve/api/v1/conversation/a_b_c_d%20e"
        );
        let unparsed = ForethoughtClient::new(ForethoughtConfig::new("not a url", "t")).unwrap();
        assert_eq!(unparsed.url(Some("c1")).unwrap_err(), "not a url/solve/api/v1/conversation/c1");
        // A URL with no path to add to is taken as text too (reqwest refuses it at the call).
        let pathless = ForethoughtClient::new(ForethoughtConfig::new("mailto:support", "t")).unwrap();
        assert_eq!(pathless.url(Some("c1")).unwrap_err(), "mailto:support/solve/api/v1/conversation/c1");
    }

    #[test]
    fn prior_context_mode_parses() {
        assert_eq!("prefix".parse(), Ok(PriorContextMode::Prefix));
        assert_eq!("variable:ftcv_prior".parse(), Ok(PriorContextMode::ContextVariable("ftcv_prior".into())));
        assert!("variable:".parse::<PriorContextMode>().is_err());
        assert!("header".parse::<PriorContextMode>().is_err());
    }

    #[test]
    fn pieces_and_error_bodies_parse() {
        assert_eq!(
            parse_answer(r#"{"conversation_id":"c1","response":"Hi","is_solved":false}"#).unwrap(),
            [SolveChunk {
                conversation_id: Some("c1".into()),
                text: "Hi".into(),
                outcome: Some(Outcome { is_solved: Some(false), ..Outcome::default() }),
                ..SolveChunk::default()
            }]
        );
        assert!(matches!(parse_answer("<html>"), Err(VendorError::Decode(_))));
        assert!(matches!(parse_answer(r#"{"conversation_id":"c1"}"#), Err(VendorError::Decode(_))));
        assert!(matches!(parse_answer(r#"{"widget_components":{}}"#), Err(VendorError::Decode(_))));
        assert!(matches!(parse_answer("[1]"), Err(VendorError::Decode(_))));
        assert_eq!(error_message(r#"{"error":"invalid token"}"#), "invalid token");
        assert_eq!(error_message(r#"{"detail":"Not found."}"#), "Not found.");
        assert_eq!(error_message(""), "(empty body)");
    }

    #[test]
    fn widget_components_become_one_piece_each_with_the_id_first_and_the_outcome_last() {
        let pieces = parse_answer(
            r#"{"conversation_id":"c9","widget_components":[
                {"type":"text","message":"<p>Hello <b>there</b></p>"},
                {"type":"video","message":"<p>skipped</p>"},
                {"type":"button","message":"<p>Pick</p>","buttons":[{"display_name":"A","value":"a"}],"output_variable":"v"}
            ],"is_solved":false,"should_escalate":true,"intent":"points","workflow_id":"wf1"}"#,
        )
        .unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(
            (pieces[0].text.as_str(), pieces[0].conversation_id.as_deref()),
            ("Hello there", Some("c9"))
        );
        assert_eq!(pieces[1].text, "Pick\n1. A");
        assert!(pieces.iter().all(|p| p.block));
        assert_eq!(pieces[1].prompt.as_ref().unwrap().options[0].value, "a");
        let outcome = pieces[1].outcome.clone().unwrap();
        assert_eq!(
            (
                outcome.is_solved,
                outcome.should_escalate,
                outcome.intent.as_deref(),
                outcome.workflow_id.as_deref()
            ),
            (Some(false), Some(true), Some("points"), Some("wf1"))
        );
        assert_eq!(pieces[0].outcome, None);
        let empty = parse_answer(r#"{"conversation_id":"c9","widget_components":[]}"#).unwrap();
        assert_eq!(
            empty,
            [SolveChunk { conversation_id: Some("c9".into()), block: false, ..SolveChunk::default() }]
        );
    }

    #[test]
    fn error_codes_and_retryability() {
        let http = |status| VendorError::Http { status, message: String::new() };
        let echoed = VendorError::Http { status: 401, message: "bad token Bearer ft-secret-1234".into() };
        assert!(!echoed.to_string().contains("ft-secret"), "{echoed}");
        assert!(!echoed.redacted(&[]).detail().unwrap().contains("ft-secret"));
        assert_eq!(http(401).code(), "support_rejected_request");
        assert_eq!(http(503).code(), "support_server_error");
        assert!(http(503).is_retryable() && !http(400).is_retryable());
        assert!(http(404).is_conversation_gone());
        assert_eq!(VendorError::Timeout("idle").code(), "support_timeout");
    }
}
