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
//!
//! One job per file: `config` (settings, timeouts, the retry policy), `request` (the JSON
//! request on the wire), `chunks` (the streamed chunks into deltas) and `transport` (the POST,
//! its retries, caps and error bodies, shared with the Responses API client).

use std::sync::Arc;

use super::{ChatModel, ChatRequest, DeltaStream, ModelError};

mod chunks;
mod config;
mod request;
mod transport;

pub use chunks::ChunkParser;
pub(crate) use chunks::TokenDetails;
pub(crate) use config::RetryPolicy;
pub use config::{MAX_ERROR_BODY_BYTES, OpenAiConfig, Timeouts};
pub(crate) use request::tool_options;
pub use transport::read_capped;
pub use transport::{Endpoint, StreamParser, retrying_stream};

/// A Chat Completions model. Cheap to clone; build it once and share it.
#[derive(Debug, Clone)]
pub struct OpenAiChatModel {
    inner: Arc<Endpoint>,
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
        let body = serde_json::to_vec(&request::WireRequest::new(&self.inner.config.model, &request))
            .expect("a request always serialises");
        retrying_stream::<ChunkParser>(self.inner.clone(), body.into())
    }
}

/// The first 120 characters of `s`, for an error message that quotes a payload.
pub(crate) fn shorten(s: &str) -> &str {
    match s.char_indices().nth(120) {
        Some((cut, _)) => &s[..cut],
        None => s,
    }
}
