//! The entry agent served as an A2A v1.0 agent (docs/a2a.md), shared by `serve` and the Lambda:
//! its card at `GET /.well-known/agent-card.json` and the JSON-RPC binding at `POST /a2a`; each
//! agent of `a2a: {agents: [...]}` (and the entry agent by its name too) at `POST /a2a/{name}`,
//! its card at `GET /a2a/{name}/.well-known/agent-card.json`.
//!
//! A message starts a turn exactly as `POST /chat` does ([`ChatService::validate`], then
//! [`ChatService::start_turn`]: same identity, limits, history and turn log), with
//! `on_disconnect: continue`, so a task runs on after its caller leaves and `GetTask` and
//! `SubscribeToTask` find it. The task id is `<episode_id>/<turn_id>` and the `contextId` is
//! the episode: a `contextId` must be one the caller has turns in (another user's is unknown to
//! them, as for every read of a conversation). `GetTask` reads the turn log; `CancelTask` is the
//! durable-turn cancel; `SubscribeToTask` replays the task from its first event, then follows it
//! live. Every refusal is a JSON-RPC error (HTTP 200, except 401 for a caller not identified).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::platform::{BasePath, Deadline};
use super::request::{ChatBody, checked_id, user_of};
use super::wire::{Translate, Translated, Wire};
use super::{ApiError, Caller, ChatService};
use crate::a2a::task::{parse_task_id, task_id};
use crate::a2a::types::{
    PROTOCOL_VERSION, RpcRequest, SendMessageRequest, TaskIdParams, VERSION_HEADER, codes, rpc_error,
    rpc_result,
};
use crate::a2a::{CardSource, Security, TaskView, agent_path};
use crate::auth::AuthMode;
use crate::event::Event;
use crate::orchestrator::Orchestrator;
use crate::store::{CancelOutcome, EpisodeKey, LoggedEvent, TurnStatus};
use crate::turn::{Begun, Cursor, DisconnectPolicy, OnApproval, TurnStart};
use crate::wiring::Served;

/// Longest `CancelTask` waits for a cancelled task to reach its end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// A JSON-RPC refusal: its code and message.
type Refusal = (i64, String);

fn refusal(code: i64, message: impl Into<String>) -> Refusal {
    (code, message.into())
}

/// A request refused before the turn: its JSON-RPC code, keeping its message.
fn from_api(e: ApiError) -> Refusal {
    let code = match e.status.as_u16() {
        404 => codes::TASK_NOT_FOUND,
        400..=499 => codes::INVALID_PARAMS,
        _ => codes::INTERNAL,
    };
    (code, e.message)
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `GET /.well-known/agent-card.json`: the entry agent's card.
pub(super) async fn card_route(
    State(service): State<Arc<ChatService>>,
    BasePath(base): BasePath,
    headers: HeaderMap,
) -> Response {
    service.a2a_card(&headers, &base, None)
}

/// `GET /a2a/{agent}/.well-known/agent-card.json`: a served agent's card.
pub(super) async fn agent_card_route(
    State(service): State<Arc<ChatService>>,
    Path(agent): Path<String>,
    BasePath(base): BasePath,
    headers: HeaderMap,
) -> Response {
    service.a2a_card(&headers, &base, Some(&agent))
}

/// `POST /a2a`: the entry agent's JSON-RPC endpoint.
pub(super) async fn rpc_route(
    State(service): State<Arc<ChatService>>,
    caller: Result<Caller, ApiError>,
    Deadline(deadline): Deadline,
    headers: HeaderMap,
    body: Body,
) -> Response {
    agent_rpc(service, None, caller, deadline, headers, body).await
}

/// `POST /a2a/{agent}`: a served agent's JSON-RPC endpoint.
pub(super) async fn agent_rpc_route(
    State(service): State<Arc<ChatService>>,
    Path(agent): Path<String>,
    caller: Result<Caller, ApiError>,
    Deadline(deadline): Deadline,
    headers: HeaderMap,
    body: Body,
) -> Response {
    agent_rpc(service, Some(agent), caller, deadline, headers, body).await
}

/// A JSON-RPC request to `agent`'s endpoint, its body read within the limits; a caller not
/// identified or a body not read is a JSON-RPC error with the HTTP status of the refusal.
async fn agent_rpc(
    service: Arc<ChatService>,
    agent: Option<String>,
    caller: Result<Caller, ApiError>,
    deadline: Option<tokio::time::Instant>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => return answer(e.status, rpc_error(&Value::Null, codes::INVALID_REQUEST, e.message)),
    };
    match super::request::read_body(&service, &headers, body).await {
        Ok(bytes) => service.a2a(&caller, agent.as_deref(), &headers, &bytes, deadline).await,
        Err(e) => answer(e.status, rpc_error(&Value::Null, codes::INVALID_REQUEST, e.message)),
    }
}

impl ChatService {
    /// The same service describing its entry agent with `source` on its A2A card.
    pub fn with_a2a_card(mut self, source: CardSource) -> ChatService {
        self.a2a_card = source;
        self
    }

    /// The same service serving `agents` as A2A agents too, each at `/a2a/{name}`.
    pub fn with_a2a_agents(mut self, agents: Vec<Served>) -> ChatService {
        self.a2a_served = agents;
        self
    }

    /// The orchestrator and card of the A2A agent `agent` (the entry agent's for `None` or its
    /// name), or a 404 naming the agents served.
    fn a2a_agent(
        &self,
        agent: Option<&str>,
    ) -> Result<(&Arc<Orchestrator>, CardSource), (StatusCode, String)> {
        let entry = self.orchestrator.entry().name();
        if agent.is_none_or(|name| name == entry) {
            let mut source = self.a2a_card.clone();
            if source.name.is_empty() {
                source.name = entry.to_owned();
            }
            return Ok((&self.orchestrator, source));
        }
        let name = agent.unwrap_or_default();
        match self.a2a_served.iter().find(|s| s.card.name == name) {
            Some(served) => Ok((&served.orchestrator, served.card.clone())),
            None => {
                let served: Vec<&str> = std::iter::once(entry)
                    .chain(self.a2a_served.iter().map(|s| s.card.name.as_str()))
                    .collect();
                let name = crate::redact::excerpt(name, &[]);
                let message = format!("no A2A agent {name:?} here; served: {}", served.join(", "));
                Err((StatusCode::NOT_FOUND, message))
            }
        }
    }

    /// Answers `GET [/a2a/{agent}]/.well-known/agent-card.json`: the card of `agent` (the entry
    /// agent's for `None`), its JSON-RPC URL on the host the request names (`X-Forwarded-Proto`
    /// or `http`) under `base_path` (a stage, or empty).
    pub(crate) fn a2a_card(&self, headers: &HeaderMap, base_path: &str, agent: Option<&str>) -> Response {
        let source = match self.a2a_agent(agent) {
            Ok((_, source)) => source,
            Err((status, message)) => return ApiError::new(status, "not_found", message).into_response(),
        };
        let header = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
        let host = header(header::HOST.as_str()).unwrap_or("localhost");
        let scheme = header("x-forwarded-proto").unwrap_or("http");
        let security = match &self.auth {
            AuthMode::LocalHeader => Security::None,
            AuthMode::Jwt(_) => Security::BearerJwt,
            AuthMode::Iam => Security::SigV4,
        };
        let url = format!("{scheme}://{host}{base_path}{}", agent_path(agent));
        let card = crate::a2a::card::card(&source, &url, security);
        let mut response = axum::Json(card).into_response();
        let h = response.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
        // The card's URL comes from these headers: a shared cache keys on them too.
        h.insert(header::VARY, HeaderValue::from_static("host, x-forwarded-proto"));
        response
    }

    /// Answers one JSON-RPC request of `caller` on the A2A endpoint of `agent` (the entry
    /// agent's for `None`; `deadline`: a Lambda invocation's, if any).
    pub(crate) async fn a2a(
        &self,
        caller: &Caller,
        agent: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
        deadline: Option<tokio::time::Instant>,
    ) -> Response {
        let orchestrator = match self.a2a_agent(agent) {
            Ok((orchestrator, _)) => orchestrator,
            Err((status, message)) => {
                return answer(status, rpc_error(&Value::Null, codes::INVALID_REQUEST, message));
            }
        };
        let request: RpcRequest = match serde_json::from_slice::<Value>(body) {
            Err(e) => {
                return answer(
                    StatusCode::OK,
                    rpc_error(&Value::Null, codes::PARSE_ERROR, format!("invalid JSON: {e}")),
                );
            }
            Ok(value) => match serde_json::from_value(value) {
                Ok(request) => request,
                Err(e) => {
                    let e = format!("not a JSON-RPC 2.0 request: {e}");
                    return answer(StatusCode::OK, rpc_error(&Value::Null, codes::INVALID_REQUEST, e));
                }
            },
        };
        let id = request.id.clone();
        match self.a2a_call(orchestrator, caller, headers, request, deadline).await {
            Ok(response) => response,
            Err((code, message)) => answer(StatusCode::OK, rpc_error(&id, code, message)),
        }
    }

    async fn a2a_call(
        &self,
        orchestrator: &Arc<Orchestrator>,
        caller: &Caller,
        headers: &HeaderMap,
        request: RpcRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Response, Refusal> {
        if request.jsonrpc != "2.0" {
            return Err(refusal(codes::INVALID_REQUEST, "`jsonrpc` must be \"2.0\""));
        }
        // No header (or an empty one) is version 0.3, as the spec says; a patch version is
        // ignored (`1.0.1` is 1.0), as the official SDK's servers do.
        let version = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().trim();
        let speaks = version == PROTOCOL_VERSION
            || version.strip_prefix(PROTOCOL_VERSION).is_some_and(|p| p.starts_with('.'));
        if !speaks {
            let asked = if version.is_empty() {
                "no A2A-Version header is version 0.3, which".to_owned()
            } else {
                format!("A2A version {:?}", crate::redact::excerpt(version, &[]))
            };
            return Err(refusal(
                codes::VERSION_NOT_SUPPORTED,
                format!(
                    "{asked} is not supported; this agent speaks {PROTOCOL_VERSION}: send `A2A-Version: {PROTOCOL_VERSION}`"
                ),
            ));
        }
        let turn_deadline = tokio::time::Instant::now() + self.endpoint.turn_deadline;
        let until = deadline.map_or(turn_deadline, |d| d.min(turn_deadline));
        let params = request.params;
        let id = request.id;
        match request.method.as_str() {
            "SendMessage" => self.a2a_send(orchestrator, caller, headers, &id, params, (until, false)).await,
            "SendStreamingMessage" => {
                self.a2a_send(orchestrator, caller, headers, &id, params, (until, true)).await
            }
            "GetTask" => {
                let (key, turn) = self.task_of(caller, headers, params)?;
                let view = self.read_task(&key, &turn).await?;
                Ok(answer(StatusCode::OK, rpc_result(&id, view.task())))
            }
            "CancelTask" => self.a2a_cancel(caller, headers, &id, params).await,
            "SubscribeToTask" => self.a2a_subscribe(caller, headers, &id, params, until).await,
            "ListTasks" | "GetExtendedAgentCard" => Err(refusal(
                codes::UNSUPPORTED_OPERATION,
                format!("{} is not supported by this agent", request.method),
            )),
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => {
                Err(refusal(codes::PUSH_NOT_SUPPORTED, "push notifications are not supported by this agent"))
            }
            other if other.contains('/') => Err(refusal(
                codes::METHOD_NOT_FOUND,
                format!(
                    "method {other:?} is of A2A 0.3; this agent speaks A2A {PROTOCOL_VERSION} (SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask)"
                ),
            )),
            other => Err(refusal(codes::METHOD_NOT_FOUND, format!("no method {other:?}"))),
        }
    }

    /// The caller's task named in `params`: its episode key and turn, or `TaskNotFoundError`.
    fn task_of(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        params: Value,
    ) -> Result<(EpisodeKey, String), Refusal> {
        let params: TaskIdParams = serde_json::from_value(params).map_err(|e| {
            refusal(codes::INVALID_PARAMS, format!("the params must be {{\"id\": string}}: {e}"))
        })?;
        let not_found = || refusal(codes::TASK_NOT_FOUND, format!("no task {:?}", params.id));
        let (episode, turn) = parse_task_id(&params.id).ok_or_else(not_found)?;
        let user = user_of(caller, headers).map_err(from_api)?;
        let key = EpisodeKey::new(user, episode).map_err(|_| not_found())?;
        Ok((key, turn.to_owned()))
    }

    /// The task of `key`'s turn as its log has it so far (a running turn's log may lag its
    /// stream by a batch).
    async fn read_task(&self, key: &EpisodeKey, turn_id: &str) -> Result<TaskView, Refusal> {
        const PAGE: usize = 500;
        let store = self.turns.history().store();
        let not_found =
            || refusal(codes::TASK_NOT_FOUND, format!("no task {:?}", task_id(key.episode_id(), turn_id)));
        let internal = |e: crate::store::StoreError| from_api(e.into());
        let record = store.turn_record(key, turn_id).await.map_err(internal)?.ok_or_else(not_found)?;
        let mut view = TaskView::new(key.episode_id(), turn_id);
        let mut after = 0;
        loop {
            let page = store.turn_events(key, turn_id, after, PAGE).await.map_err(internal)?;
            for logged in &page {
                if let Some(event) = logged.typed() {
                    view.apply(&event);
                }
                after = logged.seq;
            }
            if page.len() < PAGE {
                break;
            }
        }
        if matches!(record.effective_status(store.clock().now_ms()), TurnStatus::Ended(_)) && !view.ended() {
            view.abandon();
        }
        Ok(view)
    }

    /// `SendMessage` (or `SendStreamingMessage`: `streaming`) of a turn run by `orchestrator`
    /// until `until`.
    async fn a2a_send(
        &self,
        orchestrator: &Arc<Orchestrator>,
        caller: &Caller,
        headers: &HeaderMap,
        id: &Value,
        params: Value,
        (until, streaming): (tokio::time::Instant, bool),
    ) -> Result<Response, Refusal> {
        let request: SendMessageRequest = serde_json::from_value(params).map_err(|e| {
            refusal(codes::INVALID_PARAMS, format!("the params are not a SendMessageRequest: {e}"))
        })?;
        let message = request.message;
        // What to do when the context's turn still runs, as `POST /chat`'s `on_busy`.
        let on_busy = [&message.metadata, &request.metadata]
            .into_iter()
            .find_map(|m| m.as_ref()?.get("on_busy").cloned());
        if message.parts.iter().any(|p| p.url.is_some() || p.raw.is_some()) {
            return Err(refusal(
                codes::CONTENT_TYPE_NOT_SUPPORTED,
                "this agent reads text and data parts, not files",
            ));
        }
        // A data part `{"resume": [...]}` answers the context's pending approvals, as `POST
        // /chat`'s `resume` does (docs/approvals.md); other data parts are text as JSON.
        let resume = message.parts.iter().find_map(|p| p.data.as_ref()?.get("resume").cloned());
        let text: Vec<String> = message
            .parts
            .iter()
            .filter(|p| p.data.as_ref().is_none_or(|d| d.get("resume").is_none()))
            .filter_map(|p| p.text.clone().or_else(|| p.data.as_ref().map(Value::to_string)))
            .collect();
        let text = text.join("\n");
        if text.trim().is_empty() && resume.is_none() {
            return Err(refusal(codes::INVALID_PARAMS, "the message has no text"));
        }
        if resume.is_some() && message.context_id.is_none() {
            return Err(refusal(
                codes::INVALID_PARAMS,
                "a resume answers the approvals of a context: `contextId` is required",
            ));
        }
        let user = user_of(caller, headers).map_err(from_api)?;
        self.check_ids(&user, message.task_id.as_deref(), message.context_id.as_deref()).await?;
        let chat = match resume {
            Some(resume) => ChatBody { resume: Some(resume), ..ChatBody::default() },
            None => ChatBody { message: Some(Value::String(text)), ..ChatBody::default() },
        };
        let chat = ChatBody { episode_id: message.context_id, on_busy, ..chat };
        let valid = self.validate_body(caller, headers, chat).map_err(from_api)?;
        let start = TurnStart {
            turn: valid.turn,
            request_id: None,
            on_disconnect: Some(DisconnectPolicy::Continue),
            on_busy: valid.on_busy,
            approvals: valid.resume.map_or(OnApproval::Pause, OnApproval::Resume),
            deadline: until,
        };
        let begun =
            self.turns().start(orchestrator, start).await.map_err(|e| from_api(super::turn_refusal(e)))?;
        let Begun { episode_id, turn_id, events } = begun;
        let mut view = TaskView::new(&episode_id, &turn_id);
        if streaming {
            return Ok(self.task_stream(id, view, events, &episode_id, &turn_id));
        }
        let return_immediately = request.configuration.is_some_and(|c| c.return_immediately);
        if !return_immediately {
            let mut events = std::pin::pin!(events);
            while let Some(logged) = events.next().await {
                if let Some(event) = logged.typed() {
                    view.apply(&event);
                }
            }
        }
        // Dropped early, the turn runs on (`on_disconnect: continue`): `GetTask` follows it.
        Ok(answer(StatusCode::OK, rpc_result(id, json!({"task": view.task()}))))
    }

    /// A new message's ids checked: a `taskId` is refused (a task takes one message), a
    /// `contextId` must name one of `user`'s conversations.
    async fn check_ids(&self, user: &str, task: Option<&str>, context: Option<&str>) -> Result<(), Refusal> {
        if let Some(task) = task {
            // Tasks are turns: one message each; a follow-up is a new message in the context.
            let not_found = || refusal(codes::TASK_NOT_FOUND, format!("no task {task:?}"));
            let (episode, turn) = parse_task_id(task).ok_or_else(not_found)?;
            let key = EpisodeKey::new(user, episode).map_err(|_| not_found())?;
            self.read_task(&key, turn).await?;
            return Err(refusal(
                codes::UNSUPPORTED_OPERATION,
                "a task takes one message; send the next one without `taskId`, in the task's `contextId`",
            ));
        }
        if let Some(context) = context {
            let unknown = || {
                refusal(
                    codes::INVALID_PARAMS,
                    format!(
                        "unknown contextId {context:?}: send without one to start a conversation, then use the contextId of its answer"
                    ),
                )
            };
            let context = checked_id("contextId", context.to_owned()).map_err(|_| unknown())?;
            let key = EpisodeKey::new(user, context).map_err(|_| unknown())?;
            self.latest_turn(&key).await.map_err(from_api)?.ok_or_else(unknown)?;
        }
        Ok(())
    }

    async fn a2a_cancel(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        id: &Value,
        params: Value,
    ) -> Result<Response, Refusal> {
        let (key, turn) = self.task_of(caller, headers, params)?;
        let name = task_id(key.episode_id(), &turn);
        match self.request_cancel(&key, &turn).await.map_err(from_api)? {
            CancelOutcome::Unknown => Err(refusal(codes::TASK_NOT_FOUND, format!("no task {name:?}"))),
            CancelOutcome::AlreadyEnded(status) if status != crate::event::Status::Cancelled.as_str() => Err(
                refusal(codes::TASK_NOT_CANCELABLE, format!("the task has ended already (status {status})")),
            ),
            _ => {
                // The stop takes effect at the producer's next event (or its next look at the
                // store): answer with the task once it has ended, or as it stands after the wait.
                let waited = tokio::time::Instant::now() + CANCEL_WAIT;
                loop {
                    let view = self.read_task(&key, &turn).await?;
                    if view.ended() || tokio::time::Instant::now() >= waited {
                        return Ok(answer(StatusCode::OK, rpc_result(id, view.task())));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn a2a_subscribe(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        id: &Value,
        params: Value,
        until: tokio::time::Instant,
    ) -> Result<Response, Refusal> {
        let (key, turn) = self.task_of(caller, headers, params)?;
        let live = self.turns.live().get(&key, &turn);
        let running = match &live {
            Some(live) => live.ended().is_none(),
            None => {
                let view = self.read_task(&key, &turn).await?;
                !view.ended() && !view.state().is_terminal()
            }
        };
        if !running {
            return Err(refusal(codes::UNSUPPORTED_OPERATION, "the task has ended: GetTask reads it"));
        }
        let events = self.turns.follow(key.clone(), live, turn.clone(), Cursor { after: 0 }, until);
        let view = TaskView::new(key.episode_id(), &turn);
        Ok(self.task_stream(id, view, events, key.episode_id(), &turn))
    }

    /// The SSE answer of a streaming call ([`TaskStream`]), with heartbeat comments while the
    /// turn is quiet.
    fn task_stream(
        &self,
        id: &Value,
        view: TaskView,
        events: impl Stream<Item = Arc<LoggedEvent>> + Send + 'static,
        episode_id: &str,
        turn_id: &str,
    ) -> Response {
        let wire = Box::new(Translated::new(TaskStream { id: id.clone(), view }));
        wire.response(episode_id, turn_id.to_owned(), events.boxed(), self.heartbeat)
    }
}

/// A streaming call's translation of a turn's events: the task first, then an item per event
/// that shows in the task, each a JSON-RPC answer to call `id`, until the task ends.
struct TaskStream {
    id: Value,
    view: TaskView,
}

impl Translate for TaskStream {
    fn start(&mut self, out: &mut Vec<Value>) {
        out.push(rpc_result(&self.id, self.view.first()));
    }

    fn event(&mut self, event: &Event, out: &mut Vec<Value>) {
        if let Some(item) = self.view.apply(event) {
            out.push(rpc_result(&self.id, item));
        }
    }

    fn ended(&self) -> bool {
        self.view.ended()
    }

    fn cut(&mut self, _: &mut Vec<Value>) {}

    fn done(&self) -> Option<&'static [u8]> {
        None
    }
}
