//! The scripted OpenAI-compatible HTTP server (the crate's test-server feature): [`ScriptedServer`],
//! the requests it records and the streams it answers with. The loopback plumbing it shares with
//! other vendor test servers is in `loopback`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::loopback::{LoopbackServer, Pacing, TestCertificate, paced_body, wait_until};
use super::{Part, Reply, StreamReply, words};

/// The scripts as wire payloads, for the server.
impl StreamReply {
    /// The Chat Completions chunks (`data:` payloads) of this answer, `[DONE]` excluded.
    pub fn chunks(&self, model: &str) -> Vec<Value> {
        let id = "chatcmpl-scripted";
        let chunk = |delta: Value, finish: Value| {
            json!({"id": id, "object": "chat.completion.chunk", "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let mut out = vec![chunk(json!({"role": "assistant", "content": null}), Value::Null)];
        let mut call_index = 0;
        for part in &self.parts {
            match part {
                Part::Text(t) => out.extend(words(t).map(|w| chunk(json!({"content": w}), Value::Null))),
                Part::Reasoning(t) => {
                    out.extend(words(t).map(|w| chunk(json!({"reasoning_content": w}), Value::Null)))
                }
                Part::ToolCall { name, arguments } => {
                    let args = arguments.to_string();
                    let pieces = split_even(&args, self.fragments);
                    for (i, piece) in pieces.iter().enumerate() {
                        let call = if i == 0 {
                            json!({"index": call_index, "id": format!("call_{call_index}"),
                                   "type": "function",
                                   "function": {"name": name, "arguments": piece}})
                        } else {
                            json!({"index": call_index, "function": {"arguments": piece}})
                        };
                        out.push(chunk(json!({"tool_calls": [call]}), Value::Null));
                    }
                    call_index += 1;
                }
                Part::Error(message) => {
                    out.push(json!({"error": {"message": message, "type": "server_error"}}))
                }
            }
        }
        let finish = if call_index > 0 { "tool_calls" } else { "stop" };
        out.push(chunk(json!({}), json!(finish)));
        out.push(json!({"id": id, "object": "chat.completion.chunk", "model": model,
            "choices": [], "usage": {"prompt_tokens": self.usage.input_tokens,
            "completion_tokens": self.usage.output_tokens,
            "total_tokens": self.usage.total(),
            "prompt_tokens_details": {"cached_tokens": self.usage.cached_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.usage.reasoning_tokens}}}));
        out
    }

    /// The Responses API stream events of this answer, as `response_id`.
    pub fn response_events(&self, model: &str, response_id: &str) -> Vec<Value> {
        let response = |status: &str, output: &[Value]| {
            json!({"id": response_id, "object": "response", "status": status, "model": model,
                   "output": output})
        };
        let mut out = vec![json!({"type": "response.created", "response": response("in_progress", &[])})];
        let mut output: Vec<Value> = Vec::new();
        let mut calls = 0;
        for part in &self.parts {
            let index = output.len();
            match part {
                Part::Text(t) => {
                    let id = format!("msg_{index}");
                    let item = |status: &str, text: &str| {
                        json!({"type": "message", "id": id, "role": "assistant", "status": status,
                               "content": [{"type": "output_text", "text": text, "annotations": []}]})
                    };
                    out.push(json!({"type": "response.output_item.added", "output_index": index,
                                    "item": item("in_progress", "")}));
                    out.extend(words(t).map(|w| {
                        json!({"type": "response.output_text.delta", "item_id": id, "output_index": index,
                               "content_index": 0, "delta": w})
                    }));
                    out.push(
                        json!({"type": "response.output_text.done", "item_id": id, "output_index": index,
                                    "content_index": 0, "text": t}),
                    );
                    out.push(json!({"type": "response.output_item.done", "output_index": index,
                                    "item": item("completed", t)}));
                    output.push(item("completed", t));
                }
                Part::Reasoning(t) => {
                    let id = format!("rs_{index}");
                    let item = json!({"type": "reasoning", "id": id, "summary": []});
                    out.push(
                        json!({"type": "response.output_item.added", "output_index": index, "item": item}),
                    );
                    out.extend(words(t).map(|w| {
                        json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                               "output_index": index, "summary_index": 0, "delta": w})
                    }));
                    let done = json!({"type": "reasoning", "id": id,
                                      "summary": [{"type": "summary_text", "text": t}]});
                    out.push(
                        json!({"type": "response.output_item.done", "output_index": index, "item": done}),
                    );
                    output.push(done);
                }
                Part::ToolCall { name, arguments } => {
                    let (id, call_id) = (format!("fc_{index}"), format!("call_{calls}"));
                    calls += 1;
                    let args = arguments.to_string();
                    let item = |status: &str, args: &str| {
                        json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
                               "arguments": args, "status": status})
                    };
                    out.push(json!({"type": "response.output_item.added", "output_index": index,
                                    "item": item("in_progress", "")}));
                    out.extend(split_even(&args, self.fragments).into_iter().map(|piece| {
                        json!({"type": "response.function_call_arguments.delta", "item_id": id,
                               "output_index": index, "delta": piece})
                    }));
                    out.push(json!({"type": "response.function_call_arguments.done", "item_id": id,
                                    "output_index": index, "arguments": args}));
                    out.push(json!({"type": "response.output_item.done", "output_index": index,
                                    "item": item("completed", &args)}));
                    output.push(item("completed", &args));
                }
                Part::Error(message) => out.push(
                    json!({"type": "error", "code": "server_error", "message": message, "param": null}),
                ),
            }
        }
        let mut completed = response("completed", &output);
        completed["usage"] = json!({"input_tokens": self.usage.input_tokens,
            "input_tokens_details": {"cached_tokens": self.usage.cached_input_tokens},
            "output_tokens": self.usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.usage.reasoning_tokens},
            "total_tokens": self.usage.total()});
        out.push(json!({"type": "response.completed", "response": completed}));
        for (n, event) in out.iter_mut().enumerate() {
            event["sequence_number"] = json!(n);
        }
        out
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Which API it called.
    pub api: Api,
    /// The `model` field.
    pub model: String,
    /// The whole JSON body.
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The W3C `traceparent` header, if any.
    pub traceparent: Option<String>,
    /// The HTTP version it came over.
    pub version: axum::http::Version,
    /// When it arrived.
    pub received_at: Instant,
    /// When the server sent the first byte of its answer, once it has.
    pub first_byte_at: Option<Instant>,
    /// For streamed answers: when the latest frame went out (the last one, once the stream is
    /// over). Against the script, it says how late the server itself was.
    pub last_frame_at: Option<Instant>,
    /// For streamed answers: `Some(true)` once the whole stream was sent, `Some(false)` if it was
    /// dropped before its end (the client went away), `None` while it is still going.
    pub completed: Option<bool>,
}

/// The two OpenAI APIs the scripted server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/responses`; response ids are `resp_<n>` with `n` the request's arrival index.
    Responses,
}

/// A queued reply: for any request, or only for one whose body contains the needle.
type Queued = (Option<String>, Reply);

#[derive(Default)]
struct ServerState {
    /// Per model: replies in order.
    queues: Mutex<HashMap<String, VecDeque<Queued>>>,
    defaults: Mutex<HashMap<String, Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Delays kept to a fraction of a millisecond ([`ScriptedServer::keep_exact_time`]).
    exact: std::sync::atomic::AtomicBool,
}

/// A scripted OpenAI-compatible server on loopback. Stops when dropped.
pub struct ScriptedServer {
    server: LoopbackServer,
    state: Arc<ServerState>,
}

impl ScriptedServer {
    /// Starts the server on `127.0.0.1:0`, over cleartext HTTP.
    pub async fn start() -> std::io::Result<ScriptedServer> {
        let state = Arc::new(ServerState::default());
        Ok(ScriptedServer { server: LoopbackServer::start(ScriptedServer::app(&state)).await?, state })
    }

    /// Starts the server on `127.0.0.1:0` over TLS, with a new self-signed certificate for
    /// `localhost` ([`ScriptedServer::certificate`]): the path production takes to a model
    /// vendor (TLS, and HTTP/2 by ALPN, through reqwest).
    pub async fn start_tls() -> std::io::Result<ScriptedServer> {
        let state = Arc::new(ServerState::default());
        Ok(ScriptedServer { server: LoopbackServer::start_tls(ScriptedServer::app(&state)).await?, state })
    }

    fn app(state: &Arc<ServerState>) -> axum::Router {
        axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/chat/completions", post(completions))
            .route("/v1/responses", post(responses))
            .route("/responses", post(responses))
            .with_state(state.clone())
    }

    /// The base URL to give a client: `http://127.0.0.1:PORT/v1`, or `https://localhost:PORT/v1`
    /// over TLS.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.origin())
    }

    /// The certificate a client must trust, when the server speaks TLS.
    pub fn certificate(&self) -> Option<&TestCertificate> {
        self.server.certificate()
    }

    /// Queues `reply` for the next request for `model`.
    pub fn push(&self, model: &str, reply: impl Into<Reply>) -> &Self {
        let mut queues = self.state.queues.lock().expect("queues lock");
        queues.entry(model.to_owned()).or_default().push_back((None, reply.into()));
        self
    }

    /// Queues `reply` for the next request for `model` whose JSON body contains `needle`
    /// (concurrent requests to one model, told apart by what they ask). A request takes the
    /// first queued reply it matches.
    pub fn push_when(&self, model: &str, needle: &str, reply: impl Into<Reply>) -> &Self {
        let mut queues = self.state.queues.lock().expect("queues lock");
        queues.entry(model.to_owned()).or_default().push_back((Some(needle.to_owned()), reply.into()));
        self
    }

    /// Answers every request for `model` with `reply` once its queue is empty.
    pub fn set_default(&self, model: &str, reply: impl Into<Reply>) -> &Self {
        self.state.defaults.lock().expect("defaults lock").insert(model.to_owned(), reply.into());
        self
    }

    /// Keeps every delay of a script to within about a tenth of a millisecond instead of
    /// tokio's whole milliseconds: the server sleeps with tokio to two milliseconds before a
    /// frame is due and sleeps the rest on an OS thread, and a zero delay does not wait at all.
    /// For the latency benchmark, whose ideal is the script's schedule; each waiting frame then
    /// holds a blocking-pool thread for its last two milliseconds, so a test with thousands of
    /// paced streams leaves it off.
    pub fn keep_exact_time(&self) -> &Self {
        self.state.exact.store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The requests received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// The TCP connections the server has accepted so far.
    pub fn connections(&self) -> usize {
        self.server.connections()
    }

    /// The requests received for `model`.
    pub fn requests_for(&self, model: &str) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.model == model).collect()
    }
}

async fn completions(
    State(state): State<Arc<ServerState>>,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, version, headers, body, Api::ChatCompletions).await
}

async fn responses(
    State(state): State<Arc<ServerState>>,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, version, headers, body, Api::Responses).await
}

async fn answer(
    state: Arc<ServerState>,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    body: Bytes,
    api: Api,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_response(400, None, &format!("invalid JSON body: {e}")),
    };
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let text = body.to_string();
    let index = record(&state, api, body, &headers, version);
    let reply = next_reply(&state, &model, &text);
    let mark_first_byte = {
        let state = state.clone();
        move || {
            state.requests.lock().expect("requests lock")[index].first_byte_at = Some(Instant::now());
        }
    };
    match reply {
        None => {
            mark_first_byte();
            error_response(500, None, &format!("scripted server: no reply left for model `{model}`"))
        }
        Some(Reply::Status { status, retry_after, message }) => {
            mark_first_byte();
            error_response(status, retry_after, &message)
        }
        Some(Reply::Hang) => std::future::pending().await,
        Some(Reply::EchoAuthorization { status }) => {
            mark_first_byte();
            let sent = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("(none)");
            error_response(
                status,
                None,
                &format!("Incorrect API key provided: {sent}. Check the header `Authorization: {sent}`."),
            )
        }
        Some(Reply::Endless { every }) => {
            mark_first_byte();
            sse_response(Body::from_stream(endless_body(api, model, format!("resp_{index}"), every)))
        }
        Some(Reply::Raw(bytes)) => {
            mark_first_byte();
            sse_response(Body::from(bytes))
        }
        Some(Reply::Stream(script)) => {
            if let Some(gate) = &script.gate {
                // Closing the gate's semaphore releases everyone; a closed gate is not an error.
                drop(gate.acquire().await);
            }
            let exact = state.exact.load(std::sync::atomic::Ordering::Relaxed);
            wait_until(tokio::time::Instant::now() + script.first_byte_delay, exact).await;
            mark_first_byte();
            stream_reply(state, index, api, &model, &script, exact)
        }
    }
}

/// Records a request; its index among the requests.
fn record(
    state: &ServerState,
    api: Api,
    body: Value,
    headers: &axum::http::HeaderMap,
    version: axum::http::Version,
) -> usize {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut requests = state.requests.lock().expect("requests lock");
    requests.push(RecordedRequest {
        api,
        model: body["model"].as_str().unwrap_or_default().to_owned(),
        body,
        authorization: header("authorization"),
        traceparent: header("traceparent"),
        version,
        received_at: Instant::now(),
        first_byte_at: None,
        last_frame_at: None,
        completed: None,
    });
    requests.len() - 1
}

/// The reply to a request for `model` whose body is `text`: the first queued one whose needle
/// it contains (or that has none), else the model's default.
fn next_reply(state: &ServerState, model: &str, text: &str) -> Option<Reply> {
    let queued = state.queues.lock().expect("queues lock").get_mut(model).and_then(|q| {
        let at =
            q.iter().position(|(needle, _)| needle.as_ref().is_none_or(|n| text.contains(n.as_str())))?;
        q.remove(at).map(|(_, reply)| reply)
    });
    queued.or_else(|| state.defaults.lock().expect("defaults lock").get(model).cloned())
}

/// A scripted stream in the framing of `api`, paced as `script` says; each frame and the end
/// are recorded.
fn stream_reply(
    state: Arc<ServerState>,
    index: usize,
    api: Api,
    model: &str,
    script: &StreamReply,
    exact: bool,
) -> Response {
    let (frames, trailer) = match api {
        Api::ChatCompletions => (
            script.chunks(model).iter().map(|c| Bytes::from(format!("data: {c}\n\n"))).collect(),
            Some(Bytes::from_static(b"data: [DONE]\n\n")),
        ),
        Api::Responses => (
            script
                .response_events(model, &format!("resp_{index}"))
                .iter()
                .map(|e| Bytes::from(format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))))
                .collect(),
            None,
        ),
    };
    let pacing = Pacing {
        chunk_delay: script.chunk_delay,
        cut_after: script.cut_after,
        stall_after: script.stall_after,
        gate: None,
        exact,
    };
    let sent = state.clone();
    let on_frame = move |_| {
        if let Ok(mut requests) = sent.requests.lock() {
            requests[index].last_frame_at = Some(Instant::now());
        }
    };
    let on_end = move |completed| {
        if let Ok(mut requests) = state.requests.lock() {
            requests[index].completed = Some(completed);
        }
    };
    sse_response(Body::from_stream(paced_body(frames, trailer, pacing, on_frame, on_end)))
}

/// One word every `every`, forever, in the framing of `api`.
fn endless_body(
    api: Api,
    model: String,
    response_id: String,
    every: Duration,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let frame = |value: Value, name: Option<&str>| {
        Ok::<_, std::io::Error>(Bytes::from(match name {
            Some(name) => format!("event: {name}\ndata: {value}\n\n"),
            None => format!("data: {value}\n\n"),
        }))
    };
    async_stream::stream! {
        if api == Api::Responses {
            let created = json!({"type": "response.created", "response": {"id": response_id, "object": "response",
                                 "status": "in_progress", "model": model, "output": []}});
            yield frame(created, Some("response.created"));
        }
        loop {
            match api {
                Api::ChatCompletions => yield frame(
                    json!({"id": "chatcmpl-endless", "object": "chat.completion.chunk", "model": model,
                           "choices": [{"index": 0, "delta": {"content": super::ENDLESS_WORD}, "finish_reason": null}]}),
                    None,
                ),
                Api::Responses => yield frame(
                    json!({"type": "response.output_text.delta", "item_id": "msg_0", "output_index": 0,
                           "content_index": 0, "delta": super::ENDLESS_WORD}),
                    Some("response.output_text.delta"),
                ),
            }
            tokio::time::sleep(every).await;
        }
    }
}

fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert("content-type", HeaderValue::from_static("text/event-stream"));
    response
}

fn error_response(status: u16, retry_after: Option<u64>, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message, "type": "scripted_error"}});
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after {
        response.headers_mut().insert("retry-after", HeaderValue::from(secs));
    }
    response
}

/// Splits `s` into `n` pieces of about equal length on char boundaries.
fn split_even(s: &str, n: usize) -> Vec<&str> {
    let chars: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let n = n.clamp(1, chars.len().max(1));
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..=n {
        let end = if k == n { s.len() } else { chars[chars.len() * k / n] };
        out.push(&s[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_even_rejoins_to_the_input() {
        let s = r#"{"query":"café deals"}"#;
        for n in 1..30 {
            let parts = split_even(s, n);
            assert_eq!(parts.concat(), s);
            assert!(parts.len() <= n);
        }
    }
}
