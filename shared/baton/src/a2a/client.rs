//! A remote A2A agent as a Baton agent (`remote: {a2a: "https://…"}` on an agent).
//!
//! Each run: the card (fetched within [`A2aLimits::card_timeout`], at most
//! [`A2aLimits::max_card_bytes`], kept for [`A2aLimits::card_ttl`]) names the JSON-RPC 1.0
//! endpoint; the query goes there as `SendStreamingMessage` (or `SendMessage` when the card does
//! not declare streaming), with `A2A-Version: 1.0` and the bearer token or the signature
//! ([`super::auth`]) when one is configured;
//! each SSE `data:` line is one JSON-RPC answer, read into Baton events:
//!
//! | A2A | Baton |
//! |---|---|
//! | `artifactUpdate` text parts | `text`, live |
//! | `message` (a direct answer), a status message of `INPUT_REQUIRED` / `AUTH_REQUIRED` | `text`, then the end |
//! | `statusUpdate` `COMPLETED` | the end |
//! | `statusUpdate` `FAILED`, `REJECTED`, `CANCELED` | `error` `a2a_remote_failed` with the remote's message |
//! | `metadata.usage` `{inputTokens, outputTokens}` of a task or update | `usage` |
//! | a JSON-RPC error | `error` `a2a_remote_error` with its code and message |
//!
//! Every failure is an in-band `error` event and a short apology, so the caller's tool result is
//! an error like any failing child's: a card missing, malformed, too large or slow
//! (`a2a_card_unavailable`); no JSON-RPC 1.0 interface (`a2a_card_unusable`); an HTTP error, a
//! broken or silent stream (`a2a_remote_failed`, `a2a_remote_timeout`: each chunk within
//! [`A2aLimits::idle_timeout`]); an unknown stream item or a line past
//! [`A2aLimits::max_event_bytes`] (`a2a_remote_invalid`); a stream that ends before the task
//! does (`a2a_remote_truncated`). A stream that never ends is cut by the agent's own timeout,
//! like any child. What a remote said reaches a log or an event only redacted and bounded.
//!
//! A call that ends before the remote's task does (its caller gave up, a timeout, a broken
//! stream) sends `CancelTask` for the task, in the background, within [`CANCEL_TIMEOUT`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::auth::{BearerToken, RemoteAuth, RequestSigner, SigningScope};
use super::types::{
    AgentCard, Message, PROTOCOL_VERSION, Part, Role, StreamResponse, TaskState, TaskStatus, VERSION_HEADER,
};
use crate::agent::{Agent, AgentRequest};
use crate::event::{Event, EventStream, LineSplitter, Usage};

/// The bounds of a remote A2A agent's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct A2aLimits {
    /// Longest the card may take, in all.
    pub card_timeout: Duration,
    /// The largest card read.
    pub max_card_bytes: usize,
    /// How long a fetched card is used before it is fetched again.
    pub card_ttl: Duration,
    /// Longest wait for the answer's head and for each chunk of its stream.
    pub idle_timeout: Duration,
    /// The longest SSE line read.
    pub max_event_bytes: usize,
    /// Longest a whole call may take (the caller's agent timeout usually cuts it first).
    pub call_timeout: Duration,
}

impl Default for A2aLimits {
    fn default() -> A2aLimits {
        A2aLimits {
            card_timeout: Duration::from_secs(10),
            max_card_bytes: 256 * 1024,
            card_ttl: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(60),
            max_event_bytes: 1024 * 1024,
            call_timeout: Duration::from_secs(300),
        }
    }
}

/// The card last fetched, and when: shared by the agent's runs.
type CachedCard = Arc<Mutex<Option<(Instant, Arc<AgentCard>)>>>;

/// The remote's `contextId` per Baton conversation (`user`, `episode`), so a follow-up goes to the
/// same remote conversation: in this process only, at most [`MAX_CONTEXTS`].
type Contexts = Arc<Mutex<std::collections::HashMap<(String, String), String>>>;

/// The most conversations whose remote `contextId` is kept; past it the map starts again.
pub(crate) const MAX_CONTEXTS: usize = 10_000;

/// An agent reached over A2A.
#[derive(Clone)]
pub struct A2aAgent {
    name: String,
    base_url: String,
    client: reqwest::Client,
    auth: RemoteAuth,
    limits: A2aLimits,
    card: CachedCard,
    contexts: Contexts,
}

impl A2aAgent {
    /// The agent `name` whose card is at `base_url` + `/.well-known/agent-card.json` (or at
    /// `base_url` itself when it ends in `.json`).
    pub fn new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        client: reqwest::Client,
        token: Option<BearerToken>,
        limits: A2aLimits,
    ) -> A2aAgent {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        let (card, contexts) = Default::default();
        let auth = token.map_or(RemoteAuth::None, RemoteAuth::Bearer);
        A2aAgent { name: name.into(), base_url, client, auth, limits, card, contexts }
    }

    /// The same agent with each request (the card's too) signed by `signer` for `scope`, instead
    /// of a bearer token.
    pub fn with_signer(mut self, signer: Arc<dyn RequestSigner>, scope: SigningScope) -> A2aAgent {
        self.auth = RemoteAuth::Signed(signer, scope);
        self
    }

    fn card_url(&self) -> String {
        if self.base_url.ends_with(".json") {
            self.base_url.clone()
        } else {
            format!("{}{}", self.base_url, super::types::CARD_PATH)
        }
    }
}

/// A failure of one call, as its `error` event's code and message.
type Failure = (&'static str, String);

const APOLOGY: &str = "\n\nSorry, I couldn't finish that answer. Please try again.";

fn redacted(text: &str) -> String {
    crate::redact::excerpt(text, &[])
}

/// Fetches and checks a card within the limits (signed when `auth` signs).
async fn fetch_card(
    client: &reqwest::Client,
    url: &str,
    auth: &RemoteAuth,
    limits: A2aLimits,
) -> Result<AgentCard, Failure> {
    let fetch = async {
        let mut request = client.get(url).header("accept", "application/json").build().map_err(|e| {
            (
                "a2a_card_unavailable",
                format!("no request for the agent card at {url}: {}", redacted(&e.to_string())),
            )
        })?;
        auth.apply(&mut request, false).await.map_err(|e| {
            ("a2a_auth_unavailable", format!("the request for the agent card was not signed: {e}"))
        })?;
        let response = client.execute(request).await.map_err(|e| {
            (
                "a2a_card_unavailable",
                format!("the agent card at {url} could not be fetched: {}", redacted(&e.to_string())),
            )
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err((
                "a2a_card_unavailable",
                format!("the agent card at {url} answered HTTP {}", status.as_u16()),
            ));
        }
        let cap = limits.max_card_bytes;
        let body =
            crate::model::openai::read_capped(response.bytes_stream(), limits.card_timeout, cap + 1).await;
        if body.len() > cap {
            return Err((
                "a2a_card_unavailable",
                format!("the agent card at {url} is larger than {cap} bytes"),
            ));
        }
        serde_json::from_slice::<AgentCard>(&body).map_err(|e| {
            ("a2a_card_unavailable", format!("the agent card at {url} is not a valid card: {e}"))
        })
    };
    match tokio::time::timeout(limits.card_timeout, fetch).await {
        Ok(card) => card,
        Err(_) => Err((
            "a2a_card_unavailable",
            format!("the agent card at {url} did not arrive within {} ms", limits.card_timeout.as_millis()),
        )),
    }
}

impl A2aAgent {
    async fn card(&self) -> Result<Arc<AgentCard>, Failure> {
        if let Some((at, card)) = self.card.lock().expect("not poisoned").as_ref() {
            if at.elapsed() < self.limits.card_ttl {
                return Ok(card.clone());
            }
        }
        let card = Arc::new(fetch_card(&self.client, &self.card_url(), &self.auth, self.limits).await?);
        *self.card.lock().expect("not poisoned") = Some((Instant::now(), card.clone()));
        Ok(card)
    }
}

/// What one item of the remote's answer means for the call.
#[derive(Debug, PartialEq)]
enum Step {
    /// Events; the call goes on.
    More(Vec<Event>),
    /// Events, then the call is over.
    Done(Vec<Event>),
    /// The call failed.
    Failed(Failure),
}

fn texts(parts: &[Part], instance: &str) -> Vec<Event> {
    parts
        .iter()
        .filter_map(|p| p.text.as_ref())
        .filter(|t| !t.is_empty())
        .map(|t| Event::text(instance, t.as_str()))
        .collect()
}

fn usage_of(metadata: Option<&serde_json::Map<String, Value>>, instance: &str, model: &str) -> Option<Event> {
    let usage = metadata?.get("usage")?;
    // ProtoJSON carries a `Struct`'s numbers as doubles (`12.0`).
    let tokens = |k: &str| usage.get(k).and_then(Value::as_f64).filter(|n| *n >= 0.0).map(|n| n as u64);
    let (input, output) = (tokens("inputTokens")?, tokens("outputTokens")?);
    Some(Event::Usage {
        agent: instance.to_owned(),
        model: model.to_owned(),
        usage: Usage { input_tokens: input, output_tokens: output, ..Usage::default() },
        agent_total: None,
    })
}

fn status_step(status: &TaskStatus, instance: &str, mut events: Vec<Event>) -> Step {
    let said = status.message.as_ref().map(Message::text).unwrap_or_default();
    match status.state {
        TaskState::Completed => Step::Done(events),
        TaskState::InputRequired | TaskState::AuthRequired => {
            if let Some(message) = &status.message {
                events.extend(texts(&message.parts, instance));
            }
            Step::Done(events)
        }
        TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
            let state = serde_json::to_value(status.state).ok().and_then(|v| v.as_str().map(str::to_owned));
            let state = state.unwrap_or_default();
            let why = if said.is_empty() { String::new() } else { format!(": {}", redacted(&said)) };
            Step::Failed(("a2a_remote_failed", format!("the remote agent's task ended {state}{why}")))
        }
        TaskState::Submitted | TaskState::Working | TaskState::Unspecified => Step::More(events),
    }
}

/// What the remote named in its answers so far: its `contextId`, and the task the call runs.
#[derive(Debug, Default)]
struct Seen {
    context: Option<String>,
    task: Option<String>,
}

/// Reads one JSON-RPC answer (an SSE `data:` line, or a whole JSON body); notes the remote's
/// `contextId` and task id in `seen`.
fn read_answer(data: &[u8], instance: &str, model: &str, seen: &mut Seen) -> Step {
    let value: Value = match serde_json::from_slice(data) {
        Ok(value) => value,
        Err(_) => {
            return Step::Failed((
                "a2a_remote_invalid",
                "the remote agent sent an answer that is not JSON".into(),
            ));
        }
    };
    if let Some(error) = value.get("error").filter(|e| e.is_object()) {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or_default();
        let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
        return Step::Failed((
            "a2a_remote_error",
            format!("the remote agent answered error {code}: {}", redacted(message)),
        ));
    }
    let Some(result) = value.get("result") else {
        return Step::Failed((
            "a2a_remote_invalid",
            "the remote agent sent a JSON-RPC answer without a result".into(),
        ));
    };
    let item: StreamResponse = match serde_json::from_value(result.clone()) {
        Ok(item) => item,
        Err(_) => {
            let kinds: Vec<&str> =
                result.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
            let kinds = redacted(&kinds.join(", "));
            return Step::Failed((
                "a2a_remote_invalid",
                format!("the remote agent sent an item of an unknown kind ({kinds})"),
            ));
        }
    };
    let (said, task) = match &item {
        StreamResponse::Message(m) => {
            (m.context_id.as_deref().unwrap_or_default(), m.task_id.as_deref().unwrap_or_default())
        }
        StreamResponse::Task(t) => (t.context_id.as_str(), t.id.as_str()),
        StreamResponse::StatusUpdate(u) => (u.context_id.as_str(), u.task_id.as_str()),
        StreamResponse::ArtifactUpdate(u) => (u.context_id.as_str(), u.task_id.as_str()),
    };
    if !said.is_empty() {
        seen.context = Some(said.to_owned());
    }
    if !task.is_empty() {
        seen.task = Some(task.to_owned());
    }
    match item {
        StreamResponse::Message(message) => {
            let mut events = texts(&message.parts, instance);
            events.extend(usage_of(message.metadata.as_ref(), instance, model));
            Step::Done(events)
        }
        StreamResponse::Task(task) => {
            let mut events: Vec<Event> =
                usage_of(task.metadata.as_ref(), instance, model).into_iter().collect();
            if task.status.state.is_terminal() || task.status.state.is_interrupted() {
                // A whole task (SendMessage's answer, or a stream that starts at the end).
                events.splice(0..0, task.artifacts.iter().flat_map(|a| texts(&a.parts, instance)));
            }
            status_step(&task.status, instance, events)
        }
        StreamResponse::ArtifactUpdate(update) => Step::More(texts(&update.artifact.parts, instance)),
        StreamResponse::StatusUpdate(update) => {
            let events = usage_of(update.metadata.as_ref(), instance, model).into_iter().collect();
            status_step(&update.status, instance, events)
        }
    }
}

impl Agent for A2aAgent {
    fn name(&self) -> &str {
        &self.name
    }

    /// Sends the query, then reads the answer: a whole JSON body, or an SSE stream whose
    /// answers stream as they come.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let this = self.clone();
        Box::pin(async_stream::stream! {
            let mut call = Exchange::new(&this, &request, instance);
            let response = match this.send(&request, &mut call).await {
                Ok(response) => response,
                Err(failure) => { for ev in call.fail(failure) { yield ev; } return; }
            };
            if !is_stream(&response) {
                // An error status, or a whole JSON answer (`SendMessage`, or an error before the stream).
                let status = response.status();
                let body = crate::model::openai::read_capped(response.bytes_stream(), this.limits.idle_timeout, this.limits.max_event_bytes).await;
                for ev in call.whole(status, &body) { yield ev; }
                return;
            }
            let mut chunks = Chunks::new(response, this.limits);
            let mut lines = LineSplitter::new(this.limits.max_event_bytes);
            loop {
                let complete = match chunks.next().await.and_then(|chunk| chunk.map(|c| read_lines(&mut lines, &c)).transpose()) {
                    Ok(Some(complete)) => complete,
                    Ok(None) => break,
                    Err(failure) => { for ev in call.fail(failure) { yield ev; } return; }
                };
                for line in complete {
                    let (events, ended) = call.line(&line);
                    for ev in events { yield ev; }
                    if ended { return; }
                }
            }
            for ev in call.fail(("a2a_remote_truncated", "the remote agent's stream ended before its task did".into())) { yield ev; }
        }.boxed())
    }
}

impl A2aAgent {
    /// Sends the query to the JSON-RPC interface the card names: its answer's head, within the
    /// idle timeout.
    async fn send(&self, request: &AgentRequest, call: &mut Exchange) -> Result<reqwest::Response, Failure> {
        let card = self.card().await?;
        let Some(interface) = card.jsonrpc_v1() else {
            let offers = format!("the agent card of {} offers no JSON-RPC interface of A2A 1.0", self.name);
            return Err(("a2a_card_unusable", offers));
        };
        call.cancel.url = interface.url.clone();
        let streaming = card.capabilities.streaming;
        let message = Message {
            message_id: uuid::Uuid::new_v4().to_string(),
            context_id: call.sent_context(),
            task_id: None,
            role: Role::User,
            parts: vec![Part::text(request.query.clone())],
            metadata: None,
        };
        let method = if streaming { "SendStreamingMessage" } else { "SendMessage" };
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}});
        let mut post = (self.client.post(&interface.url))
            .header(VERSION_HEADER, PROTOCOL_VERSION)
            .header("accept", if streaming { "text/event-stream" } else { "application/json" })
            .json(&body)
            .build()
            .map_err(|e| {
                let why = format!("no request for the remote agent: {}", redacted(&e.to_string()));
                ("a2a_remote_failed", why)
            })?;
        self.auth.apply(&mut post, true).await.map_err(|e| {
            ("a2a_auth_unavailable", format!("the call to the remote agent was not authenticated: {e}"))
        })?;
        match tokio::time::timeout(self.limits.idle_timeout, self.client.execute(post)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err((
                "a2a_remote_failed",
                format!("cannot reach the remote agent: {}", redacted(&e.to_string())),
            )),
            Err(_) => Err(("a2a_remote_timeout", "the remote agent did not answer in time".into())),
        }
    }
}

/// Whether an answer is a successful SSE stream.
fn is_stream(response: &reqwest::Response) -> bool {
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok());
    response.status().is_success() && content_type.is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The complete lines `chunk` ends, or why the stream is unreadable.
fn read_lines(lines: &mut LineSplitter, chunk: &[u8]) -> Result<Vec<bytes::Bytes>, Failure> {
    lines.push(chunk).map_err(|e| ("a2a_remote_invalid", format!("the remote agent's stream: {e}")))
}

/// One call in flight: the conversation it continues, what the remote has named so far, and
/// the remote task to cancel should the call end before it.
struct Exchange {
    instance: String,
    agent: String,
    /// The Baton conversation (`user`, `episode`) the call belongs to, if any.
    conversation: Option<(String, String)>,
    contexts: Contexts,
    seen: Seen,
    /// Armed once the remote names its task; disarmed when the task ends. Dropped armed (the
    /// caller cancelled or timed out, a stream broke), it cancels the remote task.
    cancel: CancelOnDrop,
}

impl Exchange {
    fn new(agent: &A2aAgent, request: &AgentRequest, instance: String) -> Exchange {
        let cancel = CancelOnDrop {
            client: agent.client.clone(),
            url: String::new(),
            auth: agent.auth.clone(),
            task: None,
        };
        let conversation =
            (!request.episode_id.is_empty()).then(|| (request.user_id.clone(), request.episode_id.clone()));
        let (agent, contexts) = (agent.name.clone(), agent.contexts.clone());
        Exchange { instance, agent, conversation, contexts, seen: Seen::default(), cancel }
    }

    /// The remote's `contextId` of the conversation's last call.
    fn sent_context(&self) -> Option<String> {
        let conversation = self.conversation.as_ref()?;
        self.contexts.lock().expect("not poisoned").get(conversation).cloned()
    }

    /// After the call: keeps the context the remote named for the conversation's next call, or
    /// forgets it when the call failed (an expired context fails every call after it).
    fn remember(&self, context: Option<String>) {
        let Some(conversation) = self.conversation.clone() else { return };
        let mut contexts = self.contexts.lock().expect("not poisoned");
        match context {
            Some(context) => {
                if contexts.len() >= MAX_CONTEXTS && !contexts.contains_key(&conversation) {
                    contexts.clear();
                }
                contexts.insert(conversation, context);
            }
            None => {
                contexts.remove(&conversation);
            }
        }
    }

    /// The call failed: an error event and an apology (logged).
    fn fail(&self, (code, message): Failure) -> [Event; 2] {
        let instance = &self.instance;
        tracing::warn!(agent = %instance, code, %message, "a remote A2A agent failed");
        [Event::error(instance.clone(), code, message, true), Event::text(instance.clone(), APOLOGY)]
    }

    /// The remote said the call failed: a JSON-RPC error may be the context itself (expired,
    /// unknown), which is forgotten; another failure keeps a context the remote named.
    fn refused(&self, failure: Failure, context: Option<String>) -> [Event; 2] {
        if failure.0 == "a2a_remote_error" {
            self.remember(None)
        } else if context.is_some() {
            self.remember(context)
        }
        self.fail(failure)
    }

    /// The events of a whole answer with `status`.
    fn whole(&mut self, status: reqwest::StatusCode, body: &[u8]) -> Vec<Event> {
        let step = if status.is_success() {
            read_answer(body, &self.instance, &self.agent, &mut self.seen)
        } else {
            let said = redacted(&String::from_utf8_lossy(body));
            match read_answer(body, &self.instance, &self.agent, &mut self.seen) {
                Step::Failed(f) if f.0 == "a2a_remote_error" => Step::Failed(f),
                _ => Step::Failed((
                    "a2a_remote_failed",
                    format!("the remote agent answered HTTP {}: {said}", status.as_u16()),
                )),
            }
        };
        let context = self.seen.context.clone();
        match step {
            Step::Done(events) => {
                self.remember(context);
                events
            }
            Step::More(mut events) => {
                self.remember(None);
                let early = "the remote agent's task had not ended when its answer did";
                events.extend(self.fail(("a2a_remote_truncated", early.into())));
                events
            }
            Step::Failed(failure) => self.refused(failure, context).into(),
        }
    }

    /// The events of one line of the stream, and whether the call has ended.
    fn line(&mut self, line: &[u8]) -> (Vec<Event>, bool) {
        let line = line.trim_ascii_end();
        let Some(data) = line.strip_prefix(b"data:") else { return (Vec::new(), false) };
        let step = read_answer(data.trim_ascii_start(), &self.instance, &self.agent, &mut self.seen);
        if self.cancel.task.is_none() {
            self.cancel.task = self.seen.task.clone();
        }
        let context = self.seen.context.clone();
        match step {
            Step::More(events) => (events, false),
            Step::Done(events) => {
                self.cancel.task = None;
                self.remember(context);
                (events, true)
            }
            Step::Failed(failure) => {
                // The remote's task ended, or the remote refused the call.
                self.cancel.task = None;
                (self.refused(failure, context).into(), true)
            }
        }
    }
}

/// The chunks of a streamed answer, each within the idle timeout, all within the call timeout
/// (a stream that keeps sending and never ends its task is cut).
struct Chunks {
    bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    silence: crate::bounded::IdleTimer,
    call_end: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Chunks {
    fn new(response: reqwest::Response, limits: A2aLimits) -> Chunks {
        Chunks {
            bytes: response.bytes_stream().boxed(),
            silence: crate::bounded::IdleTimer::new(limits.idle_timeout),
            call_end: Box::pin(tokio::time::sleep(limits.call_timeout)),
        }
    }

    /// The next chunk (`None` at the end), or why there is none.
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, Failure> {
        let next = tokio::select! {
            biased;
            () = &mut self.call_end => None,
            next = self.silence.next(&mut self.bytes) => Some(next),
        };
        match next {
            None => Err(("a2a_remote_timeout", "the remote agent's task did not end in time".into())),
            Some(Err(_)) => Err(("a2a_remote_timeout", "the remote agent's stream went silent".into())),
            Some(Ok(None)) => Ok(None),
            Some(Ok(Some(Err(e)))) => Err((
                "a2a_remote_failed",
                format!("the remote agent's stream broke: {}", redacted(&e.to_string())),
            )),
            Some(Ok(Some(Ok(chunk)))) => Ok(Some(chunk)),
        }
    }
}

/// Longest the `CancelTask` of a dropped call may take.
pub(crate) const CANCEL_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends `CancelTask` for the remote `task` when dropped with one (a call given up before its
/// task ended): best effort, in the background, within [`CANCEL_TIMEOUT`].
struct CancelOnDrop {
    client: reqwest::Client,
    url: String,
    auth: RemoteAuth,
    task: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (client, url, auth) = (self.client.clone(), std::mem::take(&mut self.url), self.auth.clone());
        runtime.spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task}});
            let send = async {
                let mut request = client
                    .post(&url)
                    .header(VERSION_HEADER, PROTOCOL_VERSION)
                    .json(&body)
                    .build()
                    .map_err(|e| redacted(&e.to_string()))?;
                auth.apply(&mut request, true).await?;
                let response = client.execute(request).await.map_err(|e| redacted(&e.to_string()))?;
                Ok::<_, String>(response.status())
            };
            match tokio::time::timeout(CANCEL_TIMEOUT, send).await {
                Ok(Ok(status)) => tracing::info!(task = %redacted(&task), status = status.as_u16(), "a dropped A2A call's remote task cancelled"),
                Ok(Err(e)) => tracing::warn!(task = %redacted(&task), error = %e, "a dropped A2A call's remote task could not be cancelled"),
                Err(_) => tracing::warn!(task = %redacted(&task), "a dropped A2A call's CancelTask did not answer in time"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: Value) -> Step {
        read_answer(value.to_string().as_bytes(), "far[1]", "far", &mut Seen::default())
    }

    #[test]
    fn artifact_text_streams_and_the_completed_status_ends_the_call() {
        let chunk = read(json!({"jsonrpc": "2.0", "id": 1, "result": {"artifactUpdate": {
            "taskId": "t", "contextId": "c", "artifact": {"artifactId": "a", "parts": [{"text": "Hi"}, {"data": {}}]}}}}));
        assert_eq!(chunk, Step::More(vec![Event::text("far[1]", "Hi")]));
        let end = read(json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "metadata": {"usage": {"inputTokens": 3.0, "outputTokens": 5}}}}}));
        let Step::Done(events) = end else { panic!("{end:?}") };
        assert!(
            matches!(&events[0], Event::Usage { usage, .. } if usage.input_tokens == 3 && usage.output_tokens == 5)
        );
    }

    #[test]
    fn failures_errors_and_unknown_kinds_are_failures_that_say_why() {
        let failed = read(json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {
            "taskId": "t", "status": {"state": "TASK_STATE_FAILED", "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "no stock"}]}}}}}));
        assert_eq!(
            failed,
            Step::Failed((
                "a2a_remote_failed",
                "the remote agent's task ended TASK_STATE_FAILED: no stock".into()
            ))
        );
        let error =
            read(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}));
        assert_eq!(
            error,
            Step::Failed((
                "a2a_remote_error",
                "the remote agent answered error -32001: Task not found".into()
            ))
        );
        let unknown = read(json!({"jsonrpc": "2.0", "id": 1, "result": {"progressUpdate": {}}}));
        assert_eq!(
            unknown,
            Step::Failed((
                "a2a_remote_invalid",
                "the remote agent sent an item of an unknown kind (progressUpdate)".into()
            ))
        );
        assert!(matches!(
            read_answer(b"{oops", "far[1]", "far", &mut Seen::default()),
            Step::Failed(("a2a_remote_invalid", _))
        ));
    }

    #[test]
    fn a_question_of_the_remote_is_its_answer() {
        let asked = read(json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {
            "taskId": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]}}}}}));
        assert_eq!(asked, Step::Done(vec![Event::text("far[1]", "Which city?")]));
    }

    #[test]
    fn the_token_never_shows_in_debug() {
        assert_eq!(format!("{:?}", BearerToken::new("s3cret")), "BearerToken(***)");
    }
}
