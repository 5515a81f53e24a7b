//! Agents in another process (a separately deployed Lambda function for a heavy path).
//!
//! The caller sends one JSON `RemoteRequest`; the callee answers with the agent's events as
//! NDJSON, the same objects as the client-facing protocol. `RemoteAgent` is an [`Agent`] over
//! any [`AgentTransport`], so the orchestrator cannot tell it from an in-process agent:
//! - [`HttpTransport`] POSTs to the callee's HTTP endpoint (locally, its Function URL path under
//!   `cargo lambda watch`);
//! - the Lambda `InvokeWithResponseStream` transport lives in `baton-aws`.
//!
//! The request (JSON):
//!
//! | field | |
//! |---|---|
//! | `agent` | the agent to run (a callee may host several) |
//! | `instance` | the instance name its events carry (`search[1]`) |
//! | `request` | what it is asked ([`AgentRequest`]) |
//! | `traceparent` | optional: the caller's W3C trace context (`00-<trace id>-<span id>-<flags>`), the span of the instance that calls it |
//!
//! The callee runs the agent in an `invoke_agent <name>` span (kind server) whose parent is
//! `traceparent`, so its spans continue the caller's trace, and its own model requests carry it
//! on. The field is in the payload because Lambda `Invoke` carries no HTTP header; the HTTP
//! transport sends the header too. A request without it (an older caller, traces off) is served
//! as before, its spans under the invocation's own trace (X-Ray in Lambda) if any.
//!
//! Failures of the callee or the transport become an `error` event and a short apology, never a
//! hang: each chunk must arrive within the idle timeout, and an event line past
//! `MAX_EVENT_BYTES` is an error, never unbounded memory. What a failing callee said reaches
//! the event only as a redacted, bounded excerpt ([`crate::redact`]).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::agent::{Agent, AgentRequest};
use crate::event::{Event, EventStream, LineSplitter, decode_ndjson, encode_ndjson};

/// The longest event line a remote agent may send.
pub(crate) const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// The payload a remote agent receives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RemoteRequest {
    /// The agent's name (a callee may host several).
    pub agent: String,
    /// The instance name its events must carry.
    pub instance: String,
    /// What it is asked.
    pub request: AgentRequest,
    /// The caller's W3C `traceparent` (the calling instance's span), when it traces: the
    /// callee's spans continue that trace. Optional both ways (older callers and callees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A remote call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransportError {
    /// The callee could not be reached.
    #[error("cannot reach the remote agent: {0}")]
    Unreachable(String),
    /// The callee (or its platform) reported a failure.
    #[error("the remote agent failed ({code}): {message}")]
    Remote {
        /// A code such as an HTTP status or a Lambda error type.
        code: String,
        /// The callee's message.
        message: String,
    },
    /// The stream broke midway.
    #[error("the remote agent's stream broke: {0}")]
    Broken(String),
}

/// The bytes of a remote agent's NDJSON answer.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, TransportError>> + Send>>;

/// How a remote agent is reached.
#[async_trait::async_trait]
pub trait AgentTransport: Send + Sync {
    /// Sends `payload` (a JSON `RemoteRequest`) and returns the answer's bytes.
    async fn invoke(&self, payload: Bytes) -> Result<ByteStream, TransportError>;
}

/// How long an error body may take to arrive.
const ERROR_BODY_WAIT: Duration = Duration::from_secs(5);

/// Calls a remote agent over HTTP: `POST url` with the JSON request, NDJSON back.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    url: String,
}

impl HttpTransport {
    /// A transport to `url` on a shared client.
    pub fn new(client: reqwest::Client, url: impl Into<String>) -> HttpTransport {
        HttpTransport { client, url: url.into() }
    }
}

#[async_trait::async_trait]
impl AgentTransport for HttpTransport {
    async fn invoke(&self, payload: Bytes) -> Result<ByteStream, TransportError> {
        let request = self.client.post(&self.url).header("content-type", "application/json").body(payload);
        let request = crate::telemetry::trace::with_trace_headers(request);
        let response = request.send().await.map_err(|e| TransportError::Unreachable(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            let body =
                crate::model::openai::read_capped(response.bytes_stream(), ERROR_BODY_WAIT, 16 * 1024).await;
            let message = crate::redact::excerpt(&String::from_utf8_lossy(&body), &[]);
            return Err(TransportError::Remote { code: status.as_u16().to_string(), message });
        }
        let bytes = response.bytes_stream().map(|c| c.map_err(|e| TransportError::Broken(e.to_string())));
        Ok(Box::pin(bytes) as ByteStream)
    }
}

/// An agent that runs elsewhere.
pub(crate) struct RemoteAgent {
    name: String,
    transport: Arc<dyn AgentTransport>,
    idle_timeout: Duration,
}

impl RemoteAgent {
    /// A remote agent named `name`; each chunk of its answer must come within `idle_timeout`.
    pub(crate) fn new(
        name: impl Into<String>,
        transport: Arc<dyn AgentTransport>,
        idle_timeout: Duration,
    ) -> RemoteAgent {
        RemoteAgent { name: name.into(), transport, idle_timeout }
    }
}

const APOLOGY: &str = "\n\nSorry, I couldn't finish that answer. Please try again.";

impl Agent for RemoteAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        // Called in the instance's span (see `agent::run_instance`): the callee continues it.
        let traceparent = crate::telemetry::trace::current_traceparent();
        let payload =
            RemoteRequest { agent: self.name.clone(), instance: instance.clone(), request, traceparent };
        let payload = Bytes::from(serde_json::to_vec(&payload).expect("a request serializes"));
        let transport = self.transport.clone();
        let idle = self.idle_timeout;
        Box::pin(async_stream::stream! {
            let fail = |code: &str, e: String, retryable: bool| {
                [Event::error(instance.clone(), code, e, retryable), Event::text(instance.clone(), APOLOGY)]
            };
            let mut bytes = match tokio::time::timeout(idle, transport.invoke(payload)).await {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(e)) => {
                    for ev in fail("remote_agent_failed", e.to_string(), true) { yield ev; }
                    return;
                }
                Err(_) => {
                    for ev in fail("remote_agent_timeout", "the remote agent did not answer in time".into(), true) { yield ev; }
                    return;
                }
            };
            let mut lines = LineSplitter::new(MAX_EVENT_BYTES);
            let mut silence = crate::bounded::IdleTimer::new(idle);
            loop {
                let chunk = match silence.next(&mut bytes).await {
                    Err(_) => {
                        for ev in fail("remote_agent_timeout", "the remote agent went silent".into(), true) { yield ev; }
                        return;
                    }
                    Ok(None) => break,
                    Ok(Some(Err(e))) => {
                        for ev in fail("remote_agent_failed", e.to_string(), true) { yield ev; }
                        return;
                    }
                    Ok(Some(Ok(chunk))) => chunk,
                };
                let complete = match lines.push(&chunk) {
                    Ok(complete) => complete,
                    Err(e) => {
                        for ev in fail("remote_agent_invalid", e.to_string(), false) { yield ev; }
                        return;
                    }
                };
                for line in complete {
                    match decode_ndjson(&line) {
                        Ok(event) => yield event,
                        Err(_) => {
                            // serde's message can quote the line: it goes to the log, redacted.
                            let detail = crate::redact::excerpt(&String::from_utf8_lossy(&line), &[]);
                            tracing::warn!(agent = %instance, %detail, "invalid event from a remote agent");
                            let e = "the remote agent sent an invalid event".to_owned();
                            for ev in fail("remote_agent_invalid", e, false) { yield ev; }
                            return;
                        }
                    }
                }
            }
            if lines.finish().is_some() {
                let e = "the stream ended inside an event".to_owned();
                for ev in fail("remote_agent_truncated", e, true) { yield ev; }
            }
        })
    }
}

/// Why a remote request was refused before any event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadRemoteRequest {
    /// What is wrong.
    pub message: String,
}

/// The serving side: decodes a `RemoteRequest`, runs `agent` in an `invoke_agent` span whose
/// parent is the request's `traceparent` (else `invocation_trace`, the invocation's own trace
/// such as Lambda's X-Ray header as a `traceparent`), and returns its events as NDJSON.
pub fn serve_ndjson(
    agents: &[Arc<dyn Agent>],
    body: &[u8],
    invocation_trace: Option<&str>,
) -> Result<impl Stream<Item = Bytes> + Send + 'static, BadRemoteRequest> {
    let remote: RemoteRequest = serde_json::from_slice(body)
        .map_err(|e| BadRemoteRequest { message: format!("invalid remote agent request: {e}") })?;
    let agent = agents
        .iter()
        .find(|a| a.name() == remote.agent)
        .ok_or_else(|| BadRemoteRequest { message: format!("no agent `{}` here", remote.agent) })?;
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", agent.name()),
        otel.kind = "server",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent.name(),
        baton.agent.instance = %remote.instance,
    );
    if let Some(parent) = remote.traceparent.as_deref().or(invocation_trace) {
        crate::telemetry::trace::set_remote_parent(&span, parent, None);
    }
    let events = span.in_scope(|| agent.run(remote.request, remote.instance));
    Ok(crate::telemetry::trace::traced(span, events).map(|event| encode_ndjson(&event)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::scripted::{Reply, ScriptedModel};
    use crate::routing::testing::plain;

    /// A transport that calls [`serve_ndjson`] in-process and chops its bytes at odd places.
    struct Loopback {
        agents: Vec<Arc<dyn Agent>>,
        chunk: usize,
        cut_at: Option<usize>,
    }

    #[async_trait::async_trait]
    impl AgentTransport for Loopback {
        async fn invoke(&self, payload: Bytes) -> Result<ByteStream, TransportError> {
            let served = serve_ndjson(&self.agents, &payload, None);
            let (chunk, cut_at) = (self.chunk, self.cut_at);
            let served =
                served.map_err(|e| TransportError::Remote { code: "400".into(), message: e.message })?;
            let all: Vec<u8> = served.collect::<Vec<Bytes>>().await.concat();
            let end = cut_at.unwrap_or(all.len()).min(all.len());
            let pieces: Vec<Result<Bytes, TransportError>> =
                all[..end].chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            Ok(Box::pin(futures::stream::iter(pieces)) as ByteStream)
        }
    }

    fn shopping() -> Arc<dyn Agent> {
        plain("shopping", Arc::new(ScriptedModel::new("m", Some(Reply::text("two deals for you")))))
    }

    #[tokio::test]
    async fn events_survive_the_round_trip_whatever_the_chunking() {
        let local: Vec<Event> = shopping().run(AgentRequest::default(), "shopping[1]".into()).collect().await;
        for chunk in [1, 7, 4096] {
            let transport = Arc::new(Loopback { agents: vec![shopping()], chunk, cut_at: None });
            let remote = RemoteAgent::new("shopping", transport, Duration::from_secs(1));
            let got: Vec<Event> = remote.run(AgentRequest::default(), "shopping[1]".into()).collect().await;
            let id = |e: &Event| if let Event::ResponseId { .. } = e { None } else { Some(e.clone()) };
            assert_eq!(
                got.iter().filter_map(id).collect::<Vec<_>>(),
                local.iter().filter_map(id).collect::<Vec<_>>()
            );
        }
    }

    #[tokio::test]
    async fn a_stream_cut_inside_an_event_is_reported() {
        let transport = Arc::new(Loopback { agents: vec![shopping()], chunk: 5, cut_at: Some(60) });
        let remote = RemoteAgent::new("shopping", transport, Duration::from_secs(1));
        let got: Vec<Event> = remote.run(AgentRequest::default(), "shopping[1]".into()).collect().await;
        assert!(
            got.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "remote_agent_truncated")),
            "{got:?}"
        );
    }

    #[tokio::test]
    async fn an_unknown_agent_is_refused_and_reported() {
        let transport = Arc::new(Loopback { agents: vec![shopping()], chunk: 5, cut_at: None });
        let remote = RemoteAgent::new("support", transport, Duration::from_secs(1));
        let got: Vec<Event> = remote.run(AgentRequest::default(), "support[1]".into()).collect().await;
        let Event::Error { code, message, .. } = &got[0] else { panic!("{got:?}") };
        assert_eq!(code, "remote_agent_failed");
        assert!(message.contains("no agent `support`"), "{message}");
        assert!(matches!(&got[1], Event::Text { text, .. } if text.contains("Sorry")));
    }

    #[test]
    fn the_traceparent_field_is_optional_both_ways() {
        let request = RemoteRequest {
            agent: "shopping".into(),
            instance: "shopping[1]".into(),
            request: AgentRequest::default(),
            traceparent: None,
        };
        let json = serde_json::to_value(&request).unwrap();
        assert!(json.get("traceparent").is_none(), "no field when the caller does not trace: {json}");
        let older: RemoteRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(older.traceparent, None, "a request without the field is read");
        let mut json = json;
        json["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
        let traced: RemoteRequest = serde_json::from_value(json).unwrap();
        assert_eq!(
            traced.traceparent.as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        let body = serde_json::to_vec(&traced).unwrap();
        assert!(serve_ndjson(&[shopping()], &body, None).is_ok(), "a traced request is served");
    }

    #[test]
    fn a_malformed_request_is_refused() {
        assert!(serve_ndjson(&[shopping()], b"{not json", None).is_err());
    }
}
