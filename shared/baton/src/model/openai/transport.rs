//! One OpenAI-style streaming endpoint on the wire: the POST, the retries before the first delta
//! (connect errors, timeouts, 429 and 5xx, with backoff and `Retry-After`), the body and answer
//! caps, and the error of a non-2xx answer. Shared by the Chat Completions and Responses clients.

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::Deserialize;

use super::config::{BODY_BYTES_PER_ANSWER_CHAR, MAX_ERROR_BODY_BYTES, OpenAiConfig};
use crate::bounded::IdleTimer;
use crate::model::{DeltaStream, ModelDelta, ModelError, TimeoutKind};

/// One OpenAI-style streaming endpoint (Chat Completions or Responses): where to POST, how, and
/// with which retries. Shared by both clients.
#[derive(Debug)]
pub struct Endpoint {
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
pub trait StreamParser: Default + Send {
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

/// POSTs `body` (the request's JSON text) to `endpoint` and streams the parsed deltas, retrying
/// failures that happen before the first delta reached the caller.
///
/// A call in flight keeps its few kilobytes of JSON text for a retry, not a `Value` tree (several
/// times larger, and re-serialised by every attempt), and only until its first delta: no retry
/// follows that, and an answer can stream for a long time.
pub fn retrying_stream<P: StreamParser + 'static>(
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

fn transport_error(e: &crate::outbound::Error) -> ModelError {
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
async fn http_error(response: crate::outbound::Response, idle: Duration) -> ModelError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn error_bodies_yield_their_message() {
        assert_eq!(error_message(r#"{"error":{"message":"Rate limit","type":"x"}}"#), "Rate limit");
        assert_eq!(error_message(r#"{"error":"bad model"}"#), "bad model");
        assert_eq!(error_message("upstream exploded"), "upstream exploded");
        assert_eq!(error_message(""), "(empty body)");
    }
}
