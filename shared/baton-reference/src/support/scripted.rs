//! A Forethought Solve test server: real HTTP on `127.0.0.1:0`, speaking the API of Forethought's
//! "Solve API Developer Reference" (`POST /solve/api/v1/conversation`, `PUT
//! /solve/api/v1/conversation/{id}`, `POST /solve/api/v1/conversation/{id}/csat`, bearer token,
//! JSON bodies), answering from a queue of scripted [`FtReply`]s.
//!
//! By default it answers as documented: one JSON object with `widget_components` (HTML
//! messages, `button` components with `buttons` and an `output_variable`, forms), `is_solved`
//! and `should_escalate` ([`FtReply::json`], [`FtReply::widgets`], [`FtReply::body`]). It also
//! keeps the reference's rules: one request per conversation at a time (a second one on a
//! conversation that is busy is refused with 409), and a conversation ends after an hour without
//! activity (then 404), on an injectable [`Clock`]. The older `response` shape stays as a mode:
//! [`FtReply::response_json`], and chunked answers (NDJSON or SSE) with delays, gates, cuts and
//! stalls. It can also answer with HTTP errors (one that echoes the `Authorization` header it
//! was sent), or not at all. Every request is recorded ([`ForethoughtServer::requests`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use baton::model::scripted::{LoopbackServer, Pacing, paced_body, wait_until};
use baton::store::{Clock, SystemClock};

/// How long a conversation lives without activity, per the reference.
pub const CONVERSATION_LIFETIME: Duration = Duration::from_secs(3600);

/// How a chunked answer is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `application/x-ndjson`: one JSON object per line.
    Ndjson,
    /// `text/event-stream`: one JSON object per `data:`.
    Sse,
}

/// A scripted chunked answer; build it with [`FtReply::chunks`] or [`FtReply::text`].
#[derive(Debug, Clone)]
pub struct FtStream {
    /// The answer's fragments, in order.
    pub chunks: Vec<String>,
    /// The conversation id to report (default: `conv-<n>` for the n-th start, the path id for a
    /// continue).
    pub conversation_id: Option<String>,
    /// Framing.
    pub framing: Framing,
    /// Delay before the response headers.
    pub first_byte_delay: Duration,
    /// Delay before each chunk after the first.
    pub chunk_delay: Duration,
    /// Abort the connection before chunk `n`.
    pub cut_after: Option<usize>,
    /// Go silent before chunk `n`, keeping the connection open.
    pub stall_after: Option<usize>,
    /// Hold chunk `n` until the semaphore has a permit.
    pub gate: Option<(usize, Arc<Semaphore>)>,
}

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum FtReply {
    /// A chunked answer.
    Stream(FtStream),
    /// One documented `application/json` answer: this object, with `conversation_id` added
    /// when it names none.
    Body {
        /// The answer object.
        body: Value,
        /// Delay before the answer.
        delay: Duration,
    },
    /// One `application/json` answer in the older `response` shape: `{conversation_id,
    /// response, is_solved, should_escalate}`.
    Json {
        /// The answer.
        response: String,
        /// The conversation id (defaults as for streams).
        conversation_id: Option<String>,
    },
    /// An HTTP error with body `{"error": message}`.
    Status {
        /// The status.
        status: u16,
        /// The message.
        message: String,
    },
    /// Accept the request and never answer.
    Hang,
    /// An HTTP error whose body echoes the request's `Authorization` header.
    EchoAuthorization {
        /// The status.
        status: u16,
    },
}

impl FtReply {
    /// A chunked answer of these fragments.
    pub fn chunks<S: Into<String>>(chunks: impl IntoIterator<Item = S>) -> FtStream {
        FtStream {
            chunks: chunks.into_iter().map(Into::into).collect(),
            conversation_id: None,
            framing: Framing::Ndjson,
            first_byte_delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            cut_after: None,
            stall_after: None,
            gate: None,
        }
    }

    /// A chunked answer of `text`, one sentence per chunk.
    pub fn text(text: &str) -> FtStream {
        FtReply::chunks(text.split_inclusive(". "))
    }

    /// A documented answer of one `text` component whose message is `text` as an HTML
    /// paragraph (escaped).
    pub fn json(text: &str) -> FtReply {
        let html = format!("<p>{}</p>", escape_html(text));
        FtReply::widgets(json!([{"type": "text", "message": html}]))
    }

    /// A documented answer with these `widget_components`, `is_solved` and `should_escalate`
    /// false.
    pub fn widgets(components: Value) -> FtReply {
        FtReply::body(json!({"widget_components": components, "is_solved": false, "should_escalate": false}))
    }

    /// A documented answer: this object as is (`conversation_id` added when absent).
    pub fn body(body: Value) -> FtReply {
        FtReply::Body { body, delay: Duration::ZERO }
    }

    /// A single JSON answer in the older `response` shape.
    pub fn response_json(response: &str) -> FtReply {
        FtReply::Json { response: response.to_owned(), conversation_id: None }
    }

    /// The same documented answer after `delay` (holding its conversation busy meanwhile).
    pub fn delayed(self, delay: Duration) -> FtReply {
        match self {
            FtReply::Body { body, .. } => FtReply::Body { body, delay },
            other => other,
        }
    }

    /// An HTTP error.
    pub fn status(status: u16, message: &str) -> FtReply {
        FtReply::Status { status, message: message.to_owned() }
    }
}

impl From<FtStream> for FtReply {
    fn from(s: FtStream) -> FtReply {
        FtReply::Stream(s)
    }
}

impl FtStream {
    /// Frame as SSE instead of NDJSON.
    pub fn sse(mut self) -> FtStream {
        self.framing = Framing::Sse;
        self
    }

    /// Report this conversation id.
    pub fn conversation_id(mut self, id: &str) -> FtStream {
        self.conversation_id = Some(id.to_owned());
        self
    }

    /// Delay before each chunk after the first.
    pub fn chunk_delay(mut self, d: Duration) -> FtStream {
        self.chunk_delay = d;
        self
    }

    /// Delay before the headers.
    pub fn first_byte_delay(mut self, d: Duration) -> FtStream {
        self.first_byte_delay = d;
        self
    }

    /// Abort the connection before chunk `n`, after waiting the chunk delay (at least 10 ms) so
    /// the earlier chunks are flushed first.
    pub fn cut_after(mut self, n: usize) -> FtStream {
        self.cut_after = Some(n);
        self
    }

    /// Go silent before chunk `n`.
    pub fn stall_after(mut self, n: usize) -> FtStream {
        self.stall_after = Some(n);
        self
    }

    /// Hold chunk `n` until `gate` has a permit.
    pub fn gate_before(mut self, n: usize, gate: Arc<Semaphore>) -> FtStream {
        self.gate = Some((n, gate));
        self
    }
}

/// HTML-escapes `text` for a scripted message.
pub fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct FtRequest {
    /// `POST` (start, or CSAT) or `PUT` (continue).
    pub method: String,
    /// The request path.
    pub path: String,
    /// The HTTP status the server answered with before any scripted reply, when it refused
    /// the request itself (409 busy, 404 ended, 400, 401); `None` when a reply was used.
    pub refused: Option<u16>,
    /// The conversation id of a continue (from the path).
    pub conversation_id: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: Value,
    /// When it arrived.
    pub received_at: Instant,
    /// How many chunks of a streamed answer were sent so far.
    pub chunks_sent: usize,
    /// When the latest chunk went out (the last one, once the stream is over).
    pub last_chunk_at: Option<Instant>,
    /// For streamed answers: `Some(true)` once all chunks were sent, `Some(false)` if the body
    /// was dropped before (the client went away), `None` while it is going.
    pub completed: Option<bool>,
}

struct ServerState {
    replies: Mutex<VecDeque<FtReply>>,
    requests: Mutex<Vec<FtRequest>>,
    starts: Mutex<usize>,
    /// Delays kept to a fraction of a millisecond ([`ForethoughtServer::keep_exact_time`]).
    exact: std::sync::atomic::AtomicBool,
    clock: Arc<dyn Clock>,
    /// Conversations with a request in progress.
    busy: Mutex<HashSet<String>>,
    /// The last activity of every conversation the server started or continued.
    last_activity: Mutex<HashMap<String, SystemTime>>,
}

impl ServerState {
    fn touch(&self, id: &str) {
        self.last_activity.lock().expect("activity lock").insert(id.to_owned(), self.clock.now());
    }

    /// Whether `id` was used and then left alone for [`CONVERSATION_LIFETIME`] or longer.
    fn ended(&self, id: &str) -> bool {
        let last = self.last_activity.lock().expect("activity lock").get(id).copied();
        last.is_some_and(|at| {
            self.clock.now().duration_since(at).unwrap_or_default() >= CONVERSATION_LIFETIME
        })
    }
}

/// Marks a conversation busy until dropped.
struct Busy {
    state: Arc<ServerState>,
    id: String,
}

impl Busy {
    /// Takes `id`, or `None` if a request on it is in progress.
    fn take(state: &Arc<ServerState>, id: &str) -> Option<Busy> {
        let taken = state.busy.lock().expect("busy lock").insert(id.to_owned());
        taken.then(|| Busy { state: state.clone(), id: id.to_owned() })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state.touch(&self.id);
        if let Ok(mut busy) = self.state.busy.lock() {
            busy.remove(&self.id);
        }
    }
}

/// A scripted Forethought server on loopback. Stops when dropped.
pub struct ForethoughtServer {
    server: LoopbackServer,
    state: Arc<ServerState>,
}

impl ForethoughtServer {
    /// Starts the server on `127.0.0.1:0`, on the system clock.
    pub async fn start() -> std::io::Result<ForethoughtServer> {
        ForethoughtServer::start_with_clock(Arc::new(SystemClock)).await
    }

    /// Starts the server on `127.0.0.1:0`; conversations end an hour after their last activity
    /// on `clock`.
    pub async fn start_with_clock(clock: Arc<dyn Clock>) -> std::io::Result<ForethoughtServer> {
        let state = Arc::new(ServerState {
            replies: Mutex::default(),
            requests: Mutex::default(),
            starts: Mutex::default(),
            exact: Default::default(),
            clock,
            busy: Mutex::default(),
            last_activity: Mutex::default(),
        });
        let app = axum::Router::new()
            .route("/solve/api/v1/conversation", post(start))
            .route("/solve/api/v1/conversation/{conversation_id}", put(continue_conversation))
            .route("/solve/api/v1/conversation/{conversation_id}/csat", post(csat))
            .with_state(state.clone());
        Ok(ForethoughtServer { server: LoopbackServer::start(app).await?, state })
    }

    /// The base URL to configure (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Queues `reply` for the next request (start or continue).
    pub fn push(&self, reply: impl Into<FtReply>) -> &Self {
        self.state.replies.lock().expect("replies lock").push_back(reply.into());
        self
    }

    /// Keeps every delay of a script to within about a tenth of a millisecond instead of
    /// tokio's whole milliseconds, like [`ScriptedServer::keep_exact_time`].
    ///
    /// [`ScriptedServer::keep_exact_time`]: baton::model::scripted::ScriptedServer::keep_exact_time
    pub fn keep_exact_time(&self) -> &Self {
        self.state.exact.store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The requests received so far, in arrival order.
    pub fn requests(&self) -> Vec<FtRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }
}

async fn start(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let id = {
        let mut starts = state.starts.lock().expect("starts lock");
        *starts += 1;
        format!("conv-{starts}")
    };
    answer(state, "POST", None, id, headers, body).await
}

/// `POST /solve/api/v1/conversation/{id}/csat`: `{"rating": <number>}` on a live conversation
/// that is not busy; answers `{}`.
async fn csat(
    State(state): State<Arc<ServerState>>,
    Path(conversation_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let path = format!("/solve/api/v1/conversation/{conversation_id}/csat");
    let refuse = |status: u16, message: &str| {
        record(&state, "POST", &path, Some(conversation_id.clone()), &headers, body.clone(), Some(status));
        error(status, message)
    };
    if !bearer(&headers) {
        return refuse(401, "missing bearer token");
    }
    if !state.last_activity.lock().expect("activity lock").contains_key(&conversation_id)
        || state.ended(&conversation_id)
    {
        return refuse(404, "conversation not found");
    }
    let Some(_busy) = Busy::take(&state, &conversation_id) else {
        return refuse(409, "a request on this conversation is in progress");
    };
    if !body["rating"].is_number() {
        return refuse(400, "`rating` must be a number");
    }
    record(&state, "POST", &path, Some(conversation_id.clone()), &headers, body, None);
    axum::Json(json!({})).into_response()
}

fn bearer(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("Bearer "))
}

/// Records a request; returns its index.
fn record(
    state: &ServerState,
    method: &str,
    path: &str,
    conversation_id: Option<String>,
    headers: &HeaderMap,
    body: Value,
    refused: Option<u16>,
) -> usize {
    let mut requests = state.requests.lock().expect("requests lock");
    requests.push(FtRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        refused,
        conversation_id,
        authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned),
        body,
        received_at: Instant::now(),
        chunks_sent: 0,
        last_chunk_at: None,
        completed: None,
    });
    requests.len() - 1
}

async fn continue_conversation(
    State(state): State<Arc<ServerState>>,
    Path(conversation_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, "PUT", Some(conversation_id.clone()), conversation_id, headers, body).await
}

async fn answer(
    state: Arc<ServerState>,
    method: &str,
    path_id: Option<String>,
    default_id: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (index, busy) = match admit(&state, method, path_id, &headers, &body) {
        Ok(admitted) => admitted,
        Err((status, message)) => return error(status, message),
    };
    let reply = state.replies.lock().expect("replies lock").pop_front();
    match reply {
        None => error(500, "scripted Forethought server: no reply left"),
        Some(FtReply::Status { status, message }) => error(status, &message),
        Some(FtReply::Hang) => std::future::pending().await,
        Some(FtReply::EchoAuthorization { status }) => {
            let sent = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("(none)");
            error(status, &format!("invalid credentials: {sent}"))
        }
        Some(FtReply::Body { body, delay }) => body_reply(&state, index, busy, default_id, body, delay).await,
        Some(FtReply::Json { response, conversation_id }) => {
            let id = conversation_id.unwrap_or(default_id);
            state.touch(&id);
            drop(busy);
            axum::Json(json!({
                "conversation_id": id, "response": response,
                "is_solved": false, "should_escalate": false,
            }))
            .into_response()
        }
        Some(FtReply::Stream(script)) => stream_reply(state, index, busy, default_id, script).await,
    }
}

/// Records a request and admits it (its index among the requests, and the conversation held
/// while it is answered), or refuses it (a status and a message) as Forethought would: a body that is not JSON, no
/// bearer token, no `query`, a conversation that ended, or one busy with another request.
fn admit(
    state: &Arc<ServerState>,
    method: &str,
    path_id: Option<String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(usize, Option<Busy>), (u16, &'static str)> {
    let path = match &path_id {
        Some(id) => format!("/solve/api/v1/conversation/{id}"),
        None => "/solve/api/v1/conversation".to_owned(),
    };
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        record(state, method, &path, path_id, headers, Value::Null, Some(400));
        return Err((400, "the body is not JSON"));
    };
    let refusal = if !bearer(headers) {
        Some((401, "missing bearer token"))
    } else if !body["query"].is_string() {
        Some((400, "`query` is required"))
    } else if path_id.as_deref().is_some_and(|id| state.ended(id)) {
        Some((404, "conversation not found: it ended after an hour without activity"))
    } else {
        None
    };
    if let Some((status, message)) = refusal {
        record(state, method, &path, path_id, headers, body, Some(status));
        return Err((status, message));
    }
    // One request per conversation at a time: a continue on a busy conversation is refused.
    let busy = match &path_id {
        Some(id) => match Busy::take(state, id) {
            Some(busy) => Some(busy),
            None => {
                record(state, method, &path, path_id, headers, body, Some(409));
                return Err((409, "a request on this conversation is in progress"));
            }
        },
        None => None,
    };
    Ok((record(state, method, &path, path_id, headers, body, None), busy))
}

/// A whole JSON answer after `delay`, with `conversation_id` added when it has none.
async fn body_reply(
    state: &ServerState,
    index: usize,
    busy: Option<Busy>,
    default_id: String,
    mut body: Value,
    delay: Duration,
) -> Response {
    let exact = state.exact.load(std::sync::atomic::Ordering::Relaxed);
    wait_until(tokio::time::Instant::now() + delay, exact).await;
    if body.get("conversation_id").is_none() {
        if let Some(object) = body.as_object_mut() {
            object.insert("conversation_id".into(), Value::String(default_id.clone()));
        }
    }
    let id = body["conversation_id"].as_str().unwrap_or(&default_id).to_owned();
    state.touch(&id);
    if let Ok(mut requests) = state.requests.lock() {
        let request = &mut requests[index];
        (request.chunks_sent, request.last_chunk_at, request.completed) =
            (1, Some(Instant::now()), Some(true));
    }
    drop(busy);
    axum::Json(body).into_response()
}

/// A streamed answer, paced as `script` says; each frame sent and the end are recorded.
async fn stream_reply(
    state: Arc<ServerState>,
    index: usize,
    busy: Option<Busy>,
    default_id: String,
    script: FtStream,
) -> Response {
    let exact = state.exact.load(std::sync::atomic::Ordering::Relaxed);
    wait_until(tokio::time::Instant::now() + script.first_byte_delay, exact).await;
    let id = script.conversation_id.clone().unwrap_or(default_id);
    state.touch(&id);
    let content_type = match script.framing {
        Framing::Ndjson => "application/x-ndjson",
        Framing::Sse => "text/event-stream",
    };
    let frames = script
        .chunks
        .iter()
        .map(|chunk| {
            let piece = json!({"conversation_id": id, "response": chunk});
            Bytes::from(match script.framing {
                Framing::Ndjson => format!("{piece}\n"),
                Framing::Sse => format!("data: {piece}\n\n"),
            })
        })
        .collect();
    let pacing = Pacing {
        chunk_delay: script.chunk_delay,
        cut_after: script.cut_after,
        stall_after: script.stall_after,
        gate: script.gate.clone(),
        exact,
    };
    let sent = state.clone();
    let on_frame = move |i: usize| {
        let mut requests = sent.requests.lock().expect("requests lock");
        requests[index].chunks_sent = i + 1;
        requests[index].last_chunk_at = Some(Instant::now());
    };
    let on_end = move |completed| {
        drop(busy);
        if let Ok(mut requests) = state.requests.lock() {
            requests[index].completed = Some(completed);
        }
    };
    let body = paced_body(frames, None, pacing, on_frame, on_end);
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    response
}

fn error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({"error": message}))).into_response()
}
