//! A Forethought Solve test server: real HTTP on `127.0.0.1:0`, speaking the documented API
//! (`POST /solve/api/v1/conversation`, `PUT /solve/api/v1/conversation/{id}`, bearer token, JSON
//! body), answering from a queue of scripted [`FtReply`]s: chunked answers (NDJSON or SSE) with
//! delays, gates, cuts and stalls; a single JSON answer; HTTP errors (one that echoes the
//! `Authorization` header it was sent); or no answer at all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::model::scripted::{LoopbackServer, Pacing, paced_body, wait_until};

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
    /// One `application/json` answer `{conversation_id, response, is_solved, should_escalate}`.
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

    /// A single JSON answer.
    pub fn json(response: &str) -> FtReply {
        FtReply::Json { response: response.to_owned(), conversation_id: None }
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

    /// Abort the connection before chunk `n` (give the reply a chunk delay so earlier chunks are
    /// flushed first).
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

/// A request the server received.
#[derive(Debug, Clone)]
pub struct FtRequest {
    /// `POST` (start) or `PUT` (continue).
    pub method: String,
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

#[derive(Default)]
struct ServerState {
    replies: Mutex<VecDeque<FtReply>>,
    requests: Mutex<Vec<FtRequest>>,
    starts: Mutex<usize>,
    /// Delays kept to a fraction of a millisecond ([`ForethoughtServer::keep_exact_time`]).
    exact: std::sync::atomic::AtomicBool,
}

/// A scripted Forethought server on loopback. Stops when dropped.
pub struct ForethoughtServer {
    server: LoopbackServer,
    state: Arc<ServerState>,
}

impl ForethoughtServer {
    /// Starts the server on `127.0.0.1:0`.
    pub async fn start() -> std::io::Result<ForethoughtServer> {
        let state = Arc::new(ServerState::default());
        let app = axum::Router::new()
            .route("/solve/api/v1/conversation", post(start))
            .route("/solve/api/v1/conversation/{conversation_id}", put(continue_conversation))
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
    /// [`ScriptedServer::keep_exact_time`]: crate::model::scripted::ScriptedServer::keep_exact_time
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
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "the body is not JSON");
    };
    let index = {
        let mut requests = state.requests.lock().expect("requests lock");
        requests.push(FtRequest {
            method: method.to_owned(),
            conversation_id: path_id,
            authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned),
            body: body.clone(),
            received_at: Instant::now(),
            chunks_sent: 0,
            last_chunk_at: None,
            completed: None,
        });
        requests.len() - 1
    };
    if !headers.get("authorization").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("Bearer ")) {
        return error(401, "missing bearer token");
    }
    if !body["query"].is_string() {
        return error(400, "`query` is required");
    }
    let reply = state.replies.lock().expect("replies lock").pop_front();
    match reply {
        None => error(500, "scripted Forethought server: no reply left"),
        Some(FtReply::Status { status, message }) => error(status, &message),
        Some(FtReply::Hang) => std::future::pending().await,
        Some(FtReply::EchoAuthorization { status }) => {
            let sent = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("(none)");
            error(status, &format!("invalid credentials: {sent}"))
        }
        Some(FtReply::Json { response, conversation_id }) => axum::Json(json!({
            "conversation_id": conversation_id.unwrap_or(default_id), "response": response,
            "is_solved": false, "should_escalate": false,
        }))
        .into_response(),
        Some(FtReply::Stream(script)) => {
            let exact = state.exact.load(std::sync::atomic::Ordering::Relaxed);
            wait_until(tokio::time::Instant::now() + script.first_byte_delay, exact).await;
            let id = script.conversation_id.clone().unwrap_or(default_id);
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
                if let Ok(mut requests) = state.requests.lock() {
                    requests[index].completed = Some(completed);
                }
            };
            let body = paced_body(frames, None, pacing, on_frame, on_end);
            let mut response = Response::new(Body::from_stream(body));
            response.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
            response
        }
    }
}

fn error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({"error": message}))).into_response()
}
