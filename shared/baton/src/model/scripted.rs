//! Scripted models for tests, benchmarks and the routing suite's fault injection.
//!
//! - [`Reply`] / [`StreamReply`]: a scripted answer (text, reasoning, tool calls, errors, delays).
//! - [`ScriptedModel`]: the scripts as an in-process [`ChatModel`], with no HTTP, for unit
//!   tests, overhead benchmarks and the routing evaluation's fault injection (so it is always compiled).
//! - `ScriptedServer` (with the crate's test-server feature, and in this crate's tests): a real
//!   OpenAI-compatible HTTP server on `127.0.0.1:0` that replays [`Reply`] scripts as Chat
//!   Completions streams (`/v1/chat/completions`) or Responses API streams (`/v1/responses`):
//!   per-chunk delays, argument fragmentation, HTTP errors with `Retry-After`, streams cut off or
//!   stalled midway, raw captured bytes. Replies are queued per model name, so concurrent agents
//!   that use different model names get deterministic answers whatever order their requests
//!   arrive in. Its error bodies can echo the `Authorization` header they were sent, and a stream
//!   can go on forever. It lives in `scripted/server.rs`, out of the runtime a deployment compiles.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::{ChatModel, ChatRequest, DeltaStream, FinishReason, ModelDelta, ModelError, ToolCall};
use crate::event::Usage;

#[cfg(any(test, feature = "test-servers"))]
mod loopback;
#[cfg(any(test, feature = "test-servers"))]
mod server;
#[cfg(any(test, feature = "test-servers"))]
pub use loopback::TestCertificate;
#[cfg(any(test, feature = "test-servers"))]
pub use loopback::{LoopbackServer, Pacing, paced_body, wait_until};
#[cfg(any(test, feature = "test-servers"))]
pub use server::{Api, RecordedRequest, ScriptedServer};

/// One piece of a scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text, streamed one word (with its leading space) per chunk.
    Text(String),
    /// Reasoning, streamed one word per chunk as `reasoning_content`.
    Reasoning(String),
    /// A tool call; its JSON arguments are split into `fragments` chunks.
    ToolCall {
        /// Tool name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// A mid-stream error payload (`data: {"error": ...}`).
    Error(String),
}

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A streamed answer.
    Stream(StreamReply),
    /// An HTTP error status with an OpenAI-style error body.
    Status {
        /// The status.
        status: u16,
        /// `Retry-After` in seconds, if any.
        retry_after: Option<u64>,
        /// The error message.
        message: String,
    },
    /// Raw bytes served as `text/event-stream` (for captured streams).
    Raw(Bytes),
    /// Accept the request and never answer.
    Hang,
    /// An HTTP error whose OpenAI-style body echoes the request's `Authorization` header, as
    /// some servers do on a bad key.
    EchoAuthorization {
        /// The status.
        status: u16,
    },
    /// A text answer that never ends: one word every `every`, forever.
    Endless {
        /// The pause between words.
        every: Duration,
    },
}

/// The word a [`Reply::Endless`] stream repeats.
pub const ENDLESS_WORD: &str = " more";

/// A scripted streamed answer. Build one with [`Reply::text`] or [`Reply::parts`] and the
/// builder methods.
#[derive(Debug, Clone)]
pub struct StreamReply {
    /// The pieces, in order.
    pub parts: Vec<Part>,
    /// Delay before the response headers.
    pub first_byte_delay: Duration,
    /// Delay before each chunk after the first.
    pub chunk_delay: Duration,
    /// How many chunks each tool call's arguments are split into (at least 1).
    pub fragments: usize,
    /// Usage reported at the end.
    pub usage: Usage,
    /// Abort the connection after this many chunks.
    pub cut_after: Option<usize>,
    /// Stop sending (keeping the connection open) after this many chunks.
    pub stall_after: Option<usize>,
    /// Hold the response until a permit of this gate is available.
    pub gate: Option<Arc<Semaphore>>,
}

impl Reply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> StreamReply {
        StreamReply::new(vec![Part::Text(text.into())])
    }

    /// An answer with the given parts.
    pub fn parts(parts: Vec<Part>) -> StreamReply {
        StreamReply::new(parts)
    }

    /// An HTTP error.
    pub fn status(status: u16, message: impl Into<String>) -> Reply {
        Reply::Status { status, retry_after: None, message: message.into() }
    }

    /// An HTTP error whose body echoes the `Authorization` header.
    pub fn echo_authorization(status: u16) -> Reply {
        Reply::EchoAuthorization { status }
    }

    /// A text answer of [`ENDLESS_WORD`] every `every`, forever.
    pub fn endless(every: Duration) -> Reply {
        Reply::Endless { every }
    }

    /// A 429 with `Retry-After`.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::Status {
            status: 429,
            retry_after: Some(retry_after_secs),
            message: "Rate limit reached".into(),
        }
    }
}

impl From<StreamReply> for Reply {
    fn from(s: StreamReply) -> Reply {
        Reply::Stream(s)
    }
}

impl StreamReply {
    fn new(parts: Vec<Part>) -> StreamReply {
        StreamReply {
            parts,
            first_byte_delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            fragments: 3,
            usage: Usage::tokens(10, 5),
            cut_after: None,
            stall_after: None,
            gate: None,
        }
    }

    /// Appends a tool call.
    pub fn tool_call(mut self, name: &str, arguments: Value) -> StreamReply {
        self.parts.push(Part::ToolCall { name: name.to_owned(), arguments });
        self
    }

    /// Delay before each chunk.
    pub fn chunk_delay(mut self, d: Duration) -> StreamReply {
        self.chunk_delay = d;
        self
    }

    /// Delay before the headers.
    pub fn first_byte_delay(mut self, d: Duration) -> StreamReply {
        self.first_byte_delay = d;
        self
    }

    /// Argument fragments per tool call.
    pub fn fragments(mut self, n: usize) -> StreamReply {
        self.fragments = n.max(1);
        self
    }

    /// Usage to report.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> StreamReply {
        self.usage = Usage { input_tokens, output_tokens, ..self.usage };
        self
    }

    /// Of the usage's tokens, how many input tokens were cached and how many output tokens
    /// were reasoning.
    pub fn cached_and_reasoning(mut self, cached_input_tokens: u64, reasoning_tokens: u64) -> StreamReply {
        self.usage.cached_input_tokens = cached_input_tokens;
        self.usage.reasoning_tokens = reasoning_tokens;
        self
    }

    /// Abort the connection after `n` chunks. The abort waits the chunk delay (at least 10 ms)
    /// first, so the server has flushed the chunks before it: an abort discards data still in
    /// the server's buffers.
    pub fn cut_after(mut self, n: usize) -> StreamReply {
        self.cut_after = Some(n);
        self
    }

    /// Go silent after `n` chunks.
    pub fn stall_after(mut self, n: usize) -> StreamReply {
        self.stall_after = Some(n);
        self
    }

    /// Hold the answer until `gate` has a permit (the permit is taken and returned).
    pub fn gated(mut self, gate: Arc<Semaphore>) -> StreamReply {
        self.gate = Some(gate);
        self
    }

    /// The deltas a client should decode from this answer (used by [`ScriptedModel`]).
    pub fn deltas(&self) -> Vec<Result<ModelDelta, ModelError>> {
        let mut out = vec![Ok(ModelDelta::ResponseId("chatcmpl-scripted".into()))];
        let mut calls = Vec::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.extend(words(t).map(|w| Ok(ModelDelta::Text(w.to_owned())))),
                Part::Reasoning(t) => out.extend(words(t).map(|w| Ok(ModelDelta::Reasoning(w.to_owned())))),
                Part::ToolCall { name, arguments } => {
                    let index = calls.len();
                    let id = format!("call_{index}");
                    out.push(Ok(ModelDelta::ToolCallStart { index, id: id.clone(), name: name.clone() }));
                    calls.push(ToolCall { id, name: name.clone(), arguments: arguments.to_string() });
                }
                Part::Error(message) => {
                    out.push(Err(ModelError::Stream(message.clone())));
                    return out;
                }
            }
        }
        let finish = if calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
        out.extend(calls.into_iter().map(|c| Ok(ModelDelta::ToolCall(c))));
        out.push(Ok(ModelDelta::Finish(finish)));
        out.push(Ok(ModelDelta::Usage(self.usage)));
        out
    }
}

/// Splits text into words, each with its leading whitespace.
fn words(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let start = rest.len() - rest.trim_start().len();
        let end = rest[start..].find(char::is_whitespace).map_or(rest.len(), |i| start + i);
        let (word, tail) = rest.split_at(end);
        rest = tail;
        Some(word)
    })
}

/// An in-process [`ChatModel`] replaying [`StreamReply`] scripts in order, with their chunk
/// delays, and no HTTP. Falls back to its default reply when the queue is empty.
pub struct ScriptedModel {
    name: String,
    queue: Mutex<VecDeque<StreamReply>>,
    default: Option<StreamReply>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    /// A model named `name` that answers `default` whenever its queue is empty.
    pub fn new(name: impl Into<String>, default: Option<StreamReply>) -> ScriptedModel {
        ScriptedModel {
            name: name.into(),
            queue: Mutex::new(VecDeque::new()),
            default,
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Queues a reply.
    pub fn push(&self, reply: StreamReply) {
        self.queue.lock().expect("queue lock").push_back(reply);
    }

    /// The requests received so far.
    #[cfg(test)]
    pub(crate) fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl ChatModel for ScriptedModel {
    fn model_name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        self.requests.lock().expect("requests lock").push(request);
        let reply = self.queue.lock().expect("queue lock").pop_front().or_else(|| self.default.clone());
        let Some(reply) = reply else {
            let err = ModelError::Http {
                status: 500,
                message: format!("scripted model `{}` has no reply left", self.name),
                retry_after: None,
            };
            return Box::pin(futures::stream::iter([Err(err)]));
        };
        let deltas = reply.deltas();
        if reply.chunk_delay.is_zero() && reply.first_byte_delay.is_zero() {
            return Box::pin(futures::stream::iter(deltas));
        }
        Box::pin(async_stream::stream! {
            tokio::time::sleep(reply.first_byte_delay).await;
            for (i, d) in deltas.into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(reply.chunk_delay).await;
                }
                yield d;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_their_leading_space() {
        assert_eq!(words("Hello  big\nworld").collect::<Vec<_>>(), ["Hello", "  big", "\nworld"]);
        assert_eq!(words("").count(), 0);
    }
}
