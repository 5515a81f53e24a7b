//! How a turn's numbered events reach its client: Baton's own SSE ([`BatonSse`]), or a protocol
//! translated from the same events ([`Translated`]: AG-UI in `agui`, the AI SDK's UI message
//! stream in `ai_sdk`, an A2A task's stream in `a2a`). One engine, one event stream, one
//! response head ([`sse_response`]) and one heartbeat; a protocol is an implementation of
//! [`Translate`], never a second turn loop.
//!
//! A translation reads each client-visible event once, in order, and writes the JSON objects
//! that stand for it; each goes out as one SSE `data:` line. Silences get Baton's heartbeat
//! comment, which both protocols' clients skip. A stream that ends without `completed` (a
//! rejoined turn cut by its deadline) asks the translation to close what it opened.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, BytesMut};
use serde_json::Value;

use super::request::ChatBody;
use super::sse::{BatonFrames, Frames};
use super::{ApiError, Caller, ChatService};
use crate::event::Event;
use crate::store::LoggedEvent;

/// A turn's numbered events, as the producer or a resume hands them over.
pub(crate) use crate::turn::TurnEvents;

/// How a turn's events go on the wire.
pub(crate) trait Wire: Send {
    /// The 200 response of turn `turn_id` in `episode_id`, carrying `events`, with a heartbeat
    /// after each `heartbeat` of silence.
    fn response(
        self: Box<Self>,
        episode_id: &str,
        turn_id: String,
        events: TurnEvents,
        heartbeat: Duration,
    ) -> Response;
}

/// Baton's own SSE protocol (docs/architecture.md, "The event protocol"): the 200 SSE response
/// of the turn's numbered events, with the ids in headers.
pub(crate) struct BatonSse;

impl Wire for BatonSse {
    fn response(
        self: Box<Self>,
        episode_id: &str,
        turn_id: String,
        events: TurnEvents,
        heartbeat: Duration,
    ) -> Response {
        let body = super::sse_body(BatonFrames::new(turn_id.clone()), events, heartbeat);
        sse_response(episode_id, &turn_id, &[], Body::from_stream(body))
    }
}

/// The 200 SSE response of turn `turn_id` in `episode_id` with `body`: the SSE type, no caching
/// or proxy buffering, the protocol's `extra` headers, and the ids in Baton's headers.
pub(crate) fn sse_response(
    episode_id: &str,
    turn_id: &str,
    extra: &[(&'static str, &'static str)],
    body: Body,
) -> Response {
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    for (name, value) in extra {
        h.insert(*name, HeaderValue::from_static(value));
    }
    // The ids are checked (a safe alphabet) before a turn starts or is found.
    if let (Ok(episode), Ok(turn)) = (HeaderValue::from_str(episode_id), HeaderValue::from_str(turn_id)) {
        h.insert(super::EPISODE_HEADER, episode);
        h.insert(super::TURN_HEADER, turn);
    }
    response
}

/// One protocol: the objects that stand for each Baton event of a turn.
pub(crate) trait Translate: Send + 'static {
    /// The response headers the protocol adds (beyond the SSE type and Baton's id headers).
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// The objects sent before the turn's first event, appended to `out`.
    fn start(&mut self, _out: &mut Vec<Value>) {}
    /// Whether the protocol's stream has ended before the turn's (an A2A task that paused).
    fn ended(&self) -> bool {
        false
    }
    /// The objects for one client-visible `event`, appended to `out`.
    fn event(&mut self, event: &Event, out: &mut Vec<Value>);
    /// The objects that end a stream cut before `completed`, appended to `out`.
    fn cut(&mut self, out: &mut Vec<Value>);
    /// A line sent after the last object, if the protocol has one.
    fn done(&self) -> Option<&'static [u8]>;
}

/// A front-end protocol's request: the chat request (the JSON `POST /chat` takes) its body
/// stands for, which then passes the chat endpoint's checks and starts the same turn, and the
/// translation the turn's events go out through.
pub(crate) trait Protocol {
    /// The translation of the turn's events.
    type Translation: Translate;
    /// The chat request `body` stands for and the translation of its turn, or why it is refused
    /// (before anything runs or is written).
    fn request(body: &[u8]) -> Result<(ChatBody, Self::Translation), ApiError>;
}

impl ChatService {
    /// Answers a request of protocol `P` as `POST /chat` answers a chat request (the same checks,
    /// limits, turn and log), its events translated; or a 4xx/5xx JSON error before anything runs.
    pub(super) async fn respond_protocol<P: Protocol>(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        body: &[u8],
        deadline: Option<tokio::time::Instant>,
    ) -> Response {
        if let Err(e) = super::request::require_json(headers) {
            return e.into_response();
        }
        if body.len() > self.limits.max_body_bytes {
            return super::request::body_too_large(self.limits.max_body_bytes).into_response();
        }
        let (request, translation) = match P::request(body) {
            Ok(parsed) => parsed,
            Err(e) => return e.into_response(),
        };
        let wire = Box::new(Translated::new(translation));
        self.respond_with(caller, headers, request, deadline, wire).await
    }
}

/// The `POST` route of protocol `P` in `serve` ([`ChatService::respond_protocol`]).
pub(super) async fn protocol_route<P: Protocol>(
    State(service): State<Arc<ChatService>>,
    caller: Caller,
    super::platform::Deadline(deadline): super::platform::Deadline,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match super::request::read_body(&service, &headers, body).await {
        Ok(bytes) => service.respond_protocol::<P>(&caller, &headers, &bytes, deadline).await,
        Err(e) => e.into_response(),
    }
}

/// A [`Translate`] as a [`Wire`].
pub(crate) struct Translated<T> {
    translate: T,
    /// Whether `completed` went out (otherwise the translation closes what it opened).
    completed: bool,
    /// The objects of the event being written, kept between events.
    objects: Vec<Value>,
}

impl<T: Translate> Translated<T> {
    /// `translate` as a wire.
    pub(crate) fn new(translate: T) -> Translated<T> {
        Translated { translate, completed: false, objects: Vec::new() }
    }
}

impl<T: Translate> Wire for Translated<T> {
    fn response(
        self: Box<Self>,
        episode_id: &str,
        turn_id: String,
        events: TurnEvents,
        heartbeat: Duration,
    ) -> Response {
        let extra = self.translate.headers();
        let body = super::sse_body(*self, events, heartbeat);
        sse_response(episode_id, &turn_id, extra, Body::from_stream(body))
    }
}

/// Writes `objects` as SSE messages of one `data:` line each.
pub(crate) fn encode_objects(out: &mut BytesMut, objects: &[Value]) {
    for object in objects {
        out.put_slice(b"data: ");
        // Serialising a `Value` into a buffer cannot fail; control characters are escaped, so
        // the line is never split by the payload.
        let _ = serde_json::to_writer((&mut *out).writer(), object);
        out.put_slice(b"\n\n");
    }
}

/// A translation's frames: each client-visible event read once, in its typed form, and the
/// objects the translation writes for it; a stream that ends without `completed` asks the
/// translation to close what it opened.
impl<T: Translate> Frames for Translated<T> {
    fn start(&mut self, out: &mut BytesMut) {
        self.translate.start(&mut self.objects);
        encode_objects(out, &self.objects);
    }

    fn event(&mut self, logged: &LoggedEvent, out: &mut BytesMut) {
        // Typed as produced; read from its JSON only when replayed from the store.
        let Some(event) = logged.typed() else {
            // A newer producer's event kind is left out rather than ending the stream.
            tracing::warn!(event = %logged.event, "an event the translation cannot read");
            return;
        };
        if !event.is_client_visible() {
            return;
        }
        self.completed |= matches!(*event, Event::Completed { .. });
        self.objects.clear();
        self.translate.event(&event, &mut self.objects);
        encode_objects(out, &self.objects);
    }

    fn ended(&self) -> bool {
        self.translate.ended()
    }

    fn finish(&mut self, out: &mut BytesMut) {
        self.objects.clear();
        if !self.completed {
            self.translate.cut(&mut self.objects);
        }
        encode_objects(out, &self.objects);
        if let Some(done) = self.translate.done() {
            out.put_slice(done);
        }
    }
}

/// What a translation has open per agent instance (a text or reasoning part), and the
/// protocol-side ids of tool calls. Both protocols stream an agent's text as one part from its
/// first delta to its next tool call, its end, or the turn's; ids are unique in the turn (a
/// model's call ids are not: the offline model numbers each step's calls from 0).
#[derive(Debug)]
pub(crate) struct OpenParts {
    prefix: String,
    minted: u64,
    text: Vec<(String, String)>,
    reasoning: Vec<(String, String)>,
    calls: HashMap<(String, String), String>,
}

/// A part that was open and is now closed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// A text part, by its id.
    Text(String),
    /// A reasoning part, by its id.
    Reasoning(String),
}

impl OpenParts {
    /// Nothing open; new ids start with `prefix` (unique per turn: the turn id).
    pub(crate) fn new(prefix: &str) -> OpenParts {
        OpenParts {
            prefix: prefix.to_owned(),
            minted: 0,
            text: Vec::new(),
            reasoning: Vec::new(),
            calls: HashMap::new(),
        }
    }

    /// A new id, unique in the turn.
    pub(crate) fn mint(&mut self, kind: &str) -> String {
        self.minted += 1;
        format!("{}-{kind}-{}", self.prefix, self.minted)
    }

    /// The id of `agent`'s open text part, and whether it opens now.
    pub(crate) fn text(&mut self, agent: &str) -> (String, bool) {
        open(&mut self.text, agent, || {
            self.minted += 1;
            format!("{}-msg-{}", self.prefix, self.minted)
        })
    }

    /// The id of `agent`'s open reasoning part, and whether it opens now.
    pub(crate) fn reasoning(&mut self, agent: &str) -> (String, bool) {
        open(&mut self.reasoning, agent, || {
            self.minted += 1;
            format!("{}-reasoning-{}", self.prefix, self.minted)
        })
    }

    /// Closes `agent`'s open text part, if any.
    pub(crate) fn close_text(&mut self, agent: &str) -> Option<Closed> {
        take(&mut self.text, agent).map(Closed::Text)
    }

    /// Closes `agent`'s open reasoning part, if any.
    pub(crate) fn close_reasoning(&mut self, agent: &str) -> Option<Closed> {
        take(&mut self.reasoning, agent).map(Closed::Reasoning)
    }

    /// Closes everything `agent` has open.
    pub(crate) fn close(&mut self, agent: &str) -> Vec<Closed> {
        self.close_reasoning(agent).into_iter().chain(self.close_text(agent)).collect()
    }

    /// Closes everything open, in the order it opened (reasoning first).
    pub(crate) fn close_all(&mut self) -> Vec<Closed> {
        let reasoning = self.reasoning.drain(..).map(|(_, id)| Closed::Reasoning(id));
        let text = self.text.drain(..).map(|(_, id)| Closed::Text(id));
        reasoning.chain(text).collect()
    }

    /// A new protocol id for `agent`'s tool call `call_id`, which its result then names.
    pub(crate) fn start_call(&mut self, agent: &str, call_id: &str) -> String {
        let id = self.mint("call");
        self.calls.insert((agent.to_owned(), call_id.to_owned()), id.clone());
        id
    }

    /// The protocol id of `agent`'s tool call `call_id`, if it started in this turn.
    pub(crate) fn started_call(&self, agent: &str, call_id: &str) -> Option<String> {
        self.calls.get(&(agent.to_owned(), call_id.to_owned())).cloned()
    }

    /// The protocol id of `agent`'s tool call `call_id` (minted now if it never started).
    pub(crate) fn call(&mut self, agent: &str, call_id: &str) -> String {
        match self.calls.get(&(agent.to_owned(), call_id.to_owned())) {
            Some(id) => id.clone(),
            None => self.start_call(agent, call_id),
        }
    }
}

fn open(parts: &mut Vec<(String, String)>, agent: &str, mint: impl FnOnce() -> String) -> (String, bool) {
    if let Some((_, id)) = parts.iter().find(|(a, _)| a == agent) {
        return (id.clone(), false);
    }
    let id = mint();
    parts.push((agent.to_owned(), id.clone()));
    (id, true)
}

fn take(parts: &mut Vec<(String, String)>, agent: &str) -> Option<String> {
    let at = parts.iter().position(|(a, _)| a == agent)?;
    Some(parts.remove(at).1)
}

/// A protocol request refused with 400 and `code`.
pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(axum::http::StatusCode::BAD_REQUEST, code, message)
}

/// A user message's text parts (`{"type": "text", "text"}`, both protocols' shape) joined by
/// newlines; any other part is refused (`unsupported_content`).
pub(crate) fn text_of_parts(parts: &[Value]) -> Result<String, ApiError> {
    let texts = parts
        .iter()
        .map(|part| match (part.get("type").and_then(Value::as_str), part.get("text")) {
            (Some("text"), Some(Value::String(text))) => Ok(text.as_str()),
            _ => Err(bad_request("unsupported_content", "the user message may hold only text parts")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(texts.join("\n"))
}

/// A tool result as text: a string as it is, anything else as its JSON.
pub(crate) fn result_text(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Unix seconds as an RFC 3339 UTC timestamp (`2026-11-26T20:00:00Z`).
pub(crate) fn rfc3339(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    // Howard Hinnant's civil-from-days, for the proleptic Gregorian calendar.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// A tool call of `a[1]` (`search`, call `c0`, arguments `{"q": "x"}`) and its `result`: test
/// input for the translations.
#[cfg(test)]
pub(crate) fn search_call(result: Value) -> [Event; 2] {
    let (agent, call_id, name) = ("a[1]".to_owned(), "c0".to_owned(), "search".to_owned());
    [
        Event::ToolCallStart {
            agent: agent.clone(),
            call_id: call_id.clone(),
            name: name.clone(),
            arguments: Box::new(serde_json::json!({"q": "x"})),
        },
        Event::ToolResult { agent, call_id, name, result: Box::new(result), is_error: false },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_one_data_line_each() {
        let mut out = BytesMut::new();
        encode_objects(&mut out, &[serde_json::json!({"a": "x\ny"}), serde_json::json!({"b": 1})]);
        assert_eq!(&out[..], b"data: {\"a\":\"x\\ny\"}\n\ndata: {\"b\":1}\n\n");
    }

    #[test]
    fn parts_open_once_per_agent_and_close_in_order() {
        let mut parts = OpenParts::new("T");
        assert_eq!(parts.text("a[1]"), ("T-msg-1".to_owned(), true));
        assert_eq!(parts.text("a[1]"), ("T-msg-1".to_owned(), false));
        assert_eq!(parts.reasoning("b[1]"), ("T-reasoning-2".to_owned(), true));
        assert_eq!(parts.text("b[1]"), ("T-msg-3".to_owned(), true));
        assert_eq!(parts.close("a[1]"), vec![Closed::Text("T-msg-1".into())]);
        assert_eq!(parts.text("a[1]"), ("T-msg-4".to_owned(), true), "a closed part is never reopened");
        assert_eq!(
            parts.close_all(),
            vec![
                Closed::Reasoning("T-reasoning-2".into()),
                Closed::Text("T-msg-3".into()),
                Closed::Text("T-msg-4".into())
            ]
        );
        assert!(parts.close_all().is_empty());
    }

    #[test]
    fn a_reused_model_call_id_gets_a_new_protocol_id() {
        let mut parts = OpenParts::new("T");
        let first = parts.start_call("a[1]", "call_0");
        assert_eq!(parts.call("a[1]", "call_0"), first);
        let second = parts.start_call("a[1]", "call_0");
        assert_ne!(first, second);
        assert_eq!(parts.call("a[1]", "call_0"), second);
        assert_ne!(parts.call("b[1]", "call_0"), second, "another agent's call of the same id");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
