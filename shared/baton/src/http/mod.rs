//! The HTTP chat endpoint: request validation and the SSE response, shared by `serve` (axum on a
//! local socket) and the Lambda function.
//!
//! Bad input is answered before the response starts, with a 4xx JSON body
//! `{"error":{"code":..,"message":..}}`, and starts no model call and writes nothing. Then the
//! turn starts ([`Orchestrator::start`]: the user message recorded, the history loaded); a store
//! that fails here gets a 5xx JSON error (503 `store_unavailable` when it cannot be reached). Once
//! the stream starts, errors are in-band `error` events and the stream always ends with
//! `completed`.
//!
//! Every wait has a bound ([`EndpointLimits`]): a turn ends by its deadline (`completed` with
//! status `partial`), a body must arrive within its read timeout, and `serve` closes a connection
//! that sends no complete request head in time (which also ends idle keep-alive connections) and
//! serves at most a fixed number of connections at once. Accepted sockets set `TCP_NODELAY`.
//!
//! Browser pages on other origins may call it only from the origins given to
//! [`ChatService::with_cors_origins`] (none by default): `tower-http`'s CORS layer answers their
//! preflight and adds the response headers, the episode and turn ids among those a page may read.
//!
//! This room: the service, its router ([`api`], and `app` with the chat page) and `serve`
//! here; `platform` (what the platform in front says about a request: the IAM principal, the
//! deadline, the stage; and the extractors handlers take it with), `request` (the JSON error,
//! the caller, the body read within its limits, the checks a body and its ids pass), `sse` (the
//! SSE body of a turn) and `messages` (a conversation read back a page at a time) beside it;
//! `wire` (how a turn's events go out: Baton's SSE, or a protocol's translation of them), `agui`
//! (AG-UI 1.0, `POST /agui`), `ai_sdk` (the AI SDK's UI message stream, `POST /ai-sdk`) and
//! `a2a` (the A2A card and JSON-RPC endpoint), each protocol a request mapped onto the chat
//! request and a translation of the same turn. Handlers are free functions over the
//! [`ChatService`] state, in their protocol's file.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::cors::{AllowOrigin, CorsLayer};

mod a2a;
mod agui;
mod ai_sdk;
mod messages;
mod platform;
mod request;
mod sse;
mod turns;
mod wire;

pub use platform::Platform;
pub use request::Caller;
pub(crate) use request::{ApiError, ValidRequest};
pub use sse::encode_frame_into;
pub(crate) use sse::sse_body;
pub(crate) use turns::LAST_EVENT_ID;

use platform::Deadline;
use request::{ChatBody, body_too_large, checked_id, require_json};

use crate::approval::{ApprovalStore, ResumeError};
use crate::auth::AuthMode;
use crate::config::RequestLimits;
use crate::history::History;
use crate::orchestrator::{Orchestrator, TurnRequest};
use crate::store::new_turn_id;
use crate::turn::{
    BusyRefusal, DisconnectPolicy, LiveTurns, OnApproval, OnBusy, TurnError, TurnLogSettings, TurnStart,
    Turns,
};

/// Header with the caller's user id in the unauthenticated local mode.
pub const USER_HEADER: &str = "x-baton-user";
/// Response header with the episode id (minted when the request has none).
pub(crate) const EPISODE_HEADER: &str = "x-baton-episode-id";
/// Response header with the turn id.
pub(crate) const TURN_HEADER: &str = "x-baton-turn-id";

/// The time and connection limits of the endpoint. The turn deadline and the body-read timeout
/// apply wherever [`ChatService`] answers; the request-head timeout and the connection cap are
/// `serve`'s (in Lambda the platform owns the connections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointLimits {
    /// Longest a turn runs, from its request: then it ends with `completed` (status `partial`),
    /// keeping what was produced. In Lambda the invocation deadline cuts it earlier if nearer.
    pub turn_deadline: Duration,
    /// Longest the request body may take to arrive (a body trickle is cut with 408).
    pub body_read_timeout: Duration,
    /// Longest a connection may wait for a complete request head: on a new connection the time
    /// to send the headers, on a kept-alive one the idle time plus that (hyper's header-read
    /// timer starts when the connection waits for a request). Then the connection is closed.
    pub request_head_timeout: Duration,
    /// Connections served at once; further ones wait in the listen backlog until one closes.
    pub max_connections: usize,
}

impl Default for EndpointLimits {
    fn default() -> EndpointLimits {
        EndpointLimits {
            turn_deadline: Duration::from_secs(120),
            body_read_timeout: Duration::from_secs(15),
            request_head_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

/// The chat endpoint's state: an orchestrator, the [`Turns`] that start and record its turns,
/// limits, heartbeat pacing, and how callers are identified.
pub struct ChatService {
    orchestrator: Arc<Orchestrator>,
    turns: Turns,
    limits: RequestLimits,
    heartbeat: Duration,
    auth: AuthMode,
    endpoint: EndpointLimits,
    ratings: crate::rating::RatingSinks,
    cors_origins: Vec<HeaderValue>,
    a2a_card: crate::a2a::CardSource,
    a2a_served: Vec<crate::wiring::Served>,
}

impl ChatService {
    /// A service over `orchestrator`, recording into `history`.
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        history: History,
        limits: RequestLimits,
        heartbeat: Duration,
    ) -> ChatService {
        ChatService {
            turns: Turns::new(history),
            orchestrator,
            limits,
            heartbeat,
            auth: AuthMode::LocalHeader,
            endpoint: EndpointLimits::default(),
            ratings: Default::default(),
            cors_origins: Vec::new(),
            a2a_card: Default::default(),
            a2a_served: Vec::new(),
        }
    }

    /// The same service with interrupts that wait `ttl` for their answer (docs/approvals.md).
    pub fn with_approval_ttl(mut self, ttl: Duration) -> ChatService {
        self.turns = self.turns.with_approval_ttl(ttl);
        self
    }

    /// Where approvals are kept.
    pub fn approvals(&self) -> &ApprovalStore {
        self.turns.approvals()
    }

    /// The same service logging turns (or not) with these settings.
    pub fn with_turn_log(mut self, settings: TurnLogSettings) -> ChatService {
        self.turns = self.turns.with_log(settings);
        self
    }

    /// The same service doing `policy` with a turn whose client leaves, unless the request says.
    pub fn with_disconnect_policy(mut self, policy: DisconnectPolicy) -> ChatService {
        self.turns = self.turns.with_disconnect_policy(policy);
        self
    }

    /// The same service doing `policy` with a message whose episode's turn runs, unless the
    /// request says, with at most `queue` messages waiting per episode.
    pub fn with_busy_policy(mut self, policy: OnBusy, queue: usize) -> ChatService {
        self.turns = self.turns.with_busy_policy(policy, queue);
        self
    }

    /// The turns this process runs now.
    pub fn live_turns(&self) -> &Arc<LiveTurns> {
        self.turns.live()
    }

    /// What starts and records the turns.
    pub fn turns(&self) -> &Turns {
        &self.turns
    }

    /// The same service sending ratings of answers (`POST /chat/{episode_id}/csat`) to `ratings`.
    pub fn with_ratings(mut self, ratings: crate::rating::RatingSinks) -> ChatService {
        self.ratings = ratings;
        self
    }

    /// The same service callable from browser pages on these origins (`https://host[:port]`).
    pub fn with_cors_origins(mut self, origins: Vec<HeaderValue>) -> ChatService {
        self.cors_origins = origins;
        self
    }

    /// The CORS policy of the allowed origins, or `None` when there are none: preflights of
    /// `POST` and `GET` (a conversation read back) with the headers the web client sends (credentials, the JSON type, the trace
    /// context, the local user header) are answered, and pages may read the episode and turn ids.
    /// A request from any other origin gets no CORS header, so the browser refuses it.
    pub fn cors(&self) -> Option<CorsLayer> {
        if self.cors_origins.is_empty() {
            return None;
        }
        let headers = [header::AUTHORIZATION, header::CONTENT_TYPE];
        let ours = ["traceparent", USER_HEADER, LAST_EVENT_ID].map(header::HeaderName::from_static);
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(self.cors_origins.clone()))
                .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
                .allow_headers(headers.into_iter().chain(ours).collect::<Vec<_>>())
                .expose_headers([EPISODE_HEADER, TURN_HEADER].map(header::HeaderName::from_static))
                .max_age(Duration::from_secs(600)),
        )
    }

    /// The same service identifying callers with `auth`.
    pub fn with_auth(mut self, auth: AuthMode) -> ChatService {
        self.auth = auth;
        self
    }

    /// The same service with these time and connection limits.
    pub fn with_endpoint_limits(mut self, endpoint: EndpointLimits) -> ChatService {
        self.endpoint = endpoint;
        self
    }

    /// The time and connection limits.
    pub fn endpoint_limits(&self) -> EndpointLimits {
        self.endpoint
    }

    /// The caller of a request: the `principal` the platform verified under IAM (see
    /// [`Platform`]), else from the credentials in its headers (JWT or local mode).
    pub(crate) fn caller(&self, headers: &HeaderMap, principal: Option<&str>) -> Result<Caller, ApiError> {
        match &self.auth {
            AuthMode::LocalHeader => Ok(Caller::Local),
            AuthMode::Jwt(verifier) => {
                let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
                let sub = verifier.verify(header).map_err(|e| {
                    tracing::info!(error = %e, "refused a request");
                    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string())
                })?;
                Caller::verified(&sub)
            }
            AuthMode::Iam => match principal.filter(|p| !p.is_empty()) {
                Some(principal) => Caller::verified(principal),
                None => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "no IAM identity in the request context: sign the request (SigV4)",
                )),
            },
        }
    }

    /// The request limits.
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// Checks a request and turns it into a turn, or says why not.
    pub fn validate(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<ValidRequest, ApiError> {
        self.validate_body(caller, headers, self.parse(headers, body)?)
    }

    /// A chat request's body in typed form, or why it is refused: not JSON, too large, not
    /// UTF-8, not a chat request.
    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ChatBody, ApiError> {
        require_json(headers)?;
        if body.len() > self.limits.max_body_bytes {
            return Err(body_too_large(self.limits.max_body_bytes));
        }
        let text = std::str::from_utf8(body).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_utf8",
                format!("the body is not valid UTF-8: {e}"),
            )
        })?;
        serde_json::from_str(text).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("the body is not a valid chat request: {e}"),
            )
        })
    }

    /// Checks a chat request in typed form (the chat endpoint's, or what a protocol's request
    /// stands for) and turns it into a turn, or says why not.
    fn validate_body(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        parsed: ChatBody,
    ) -> Result<ValidRequest, ApiError> {
        let resume = match (parsed.resume, &parsed.message) {
            (None | Some(serde_json::Value::Null), _) => None,
            (Some(_), Some(m)) if !m.is_null() => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_resume",
                    "send either a `message` or a `resume`, not both",
                ));
            }
            (Some(_), _) if parsed.episode_id.is_none() => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_resume",
                    "a `resume` names the conversation it answers: `episode_id` is required",
                ));
            }
            (Some(value), _) => Some(request::parse_resume(value, self.limits.max_message_chars)?),
        };
        let message = match (parsed.message, &resume) {
            (_, Some(answers)) => serde_json::Value::String(crate::approval::summary(answers)),
            (message, None) => match message {
                None | Some(serde_json::Value::Null) => serde_json::Value::Null,
                Some(message) => message,
            },
        };
        let message = match Some(message) {
            None | Some(serde_json::Value::Null) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "missing_message",
                    "the field `message` is required",
                ));
            }
            Some(serde_json::Value::String(s)) => s,
            Some(_) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_message",
                    "the field `message` must be a string",
                ));
            }
        };
        if message.trim().is_empty() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "empty_message",
                "the field `message` is empty",
            ));
        }
        let chars = message.chars().count();
        if chars > self.limits.max_message_chars {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "message_too_long",
                format!("the message has {chars} characters; the limit is {}", self.limits.max_message_chars),
            ));
        }
        let episode_id = match parsed.episode_id {
            Some(id) => checked_id("episode_id", id)?,
            None => crate::store::new_episode_id(),
        };
        let request_id = parsed.request_id.map(|id| checked_id("request_id", id)).transpose()?;
        let image = parsed
            .image
            .map(|value| crate::image::Image::from_request(value, self.limits.max_message_chars))
            .transpose()
            .map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "invalid_image", reason))?;
        let on_disconnect = match parsed.on_disconnect {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.parse().map_err(|e: String| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_on_disconnect",
                    format!("`on_disconnect`: {e}"),
                )
            })?),
            Some(_) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_on_disconnect",
                    "`on_disconnect` must be \"continue\" or \"cancel\"",
                ));
            }
        };
        let on_busy = parsed.on_busy.map(parse_on_busy).transpose()?;
        let user_id = request::user_of(caller, headers)?;
        let mut turn = TurnRequest::new(episode_id, new_turn_id(), user_id, message);
        turn.traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
        turn.image = image;
        Ok(ValidRequest { turn, request_id, on_disconnect, on_busy, resume })
    }

    /// Answers one request: a 4xx JSON error, a 5xx JSON error if the store fails before the
    /// turn starts, or a 200 SSE stream of the recorded turn. The turn ends with `completed` by
    /// the turn deadline, or by `deadline` (a Lambda invocation's) if that is nearer, whatever
    /// is still running.
    pub async fn respond(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        body: &[u8],
        deadline: Option<tokio::time::Instant>,
    ) -> Response {
        match self.parse(headers, body) {
            Ok(request) => {
                self.respond_with(caller, headers, request, deadline, Box::new(wire::BatonSse)).await
            }
            Err(e) => e.into_response(),
        }
    }

    /// [`ChatService::respond`], the turn's events going out through `wire`.
    async fn respond_with(
        &self,
        caller: &Caller,
        headers: &HeaderMap,
        request: ChatBody,
        deadline: Option<tokio::time::Instant>,
        wire: Box<dyn wire::Wire>,
    ) -> Response {
        let turn_deadline = tokio::time::Instant::now() + self.endpoint.turn_deadline;
        let deadline = deadline.map_or(turn_deadline, |d| d.min(turn_deadline));
        let ValidRequest { turn, request_id, on_disconnect, on_busy, resume } =
            match self.validate_body(caller, headers, request) {
                Ok(valid) => valid,
                Err(e) => return e.into_response(),
            };
        let approvals = resume.map_or(OnApproval::Pause, OnApproval::Resume);
        let start = TurnStart { turn, request_id, on_disconnect, on_busy, approvals, deadline };
        match self.turns.start(&self.orchestrator, start).await {
            Ok(begun) => wire.response(&begun.episode_id, begun.turn_id, begun.events, self.heartbeat),
            Err(e) => turn_refusal(e).into_response(),
        }
    }
}

/// A turn that did not start, as the client is answered: 409, 429 or 503 for a busy episode, the
/// resume's own 4xx, a store's 5xx.
pub(crate) fn turn_refusal(e: TurnError) -> ApiError {
    match e {
        TurnError::Busy(refusal) => busy_refusal(refusal),
        TurnError::Resume(e) => resume_refusal(e),
        TurnError::Store(e) => ApiError::from(e),
    }
}

/// A resume refused: its status and stable code (docs/approvals.md).
fn resume_refusal(e: ResumeError) -> ApiError {
    let (status, code) = match &e {
        ResumeError::NotFound(_) => (StatusCode::NOT_FOUND, "interrupt_not_found"),
        ResumeError::Expired(_) => (StatusCode::GONE, "interrupt_expired"),
        ResumeError::Answered(..) => (StatusCode::CONFLICT, "interrupt_answered"),
        ResumeError::InProgress => (StatusCode::CONFLICT, "resume_in_progress"),
        ResumeError::InvalidArguments(_) => (StatusCode::BAD_REQUEST, "invalid_arguments"),
        ResumeError::ConfigChanged(_) => (StatusCode::CONFLICT, "config_changed"),
        ResumeError::Store(e) if e.is_retryable() => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
        ResumeError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store_error"),
    };
    if status.is_server_error() {
        tracing::error!(error = %e, "resume not claimed");
    }
    ApiError::new(status, code, e.to_string())
}

/// A request's `on_busy`, checked.
fn parse_on_busy(value: serde_json::Value) -> Result<OnBusy, ApiError> {
    let invalid = |reason: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_on_busy", reason);
    match value {
        serde_json::Value::String(s) => s.parse().map_err(|e: String| invalid(format!("`on_busy`: {e}"))),
        _ => Err(invalid(format!("`on_busy` must be {}", crate::turn::ON_BUSY_VALUES))),
    }
}

/// A message refused because its episode's turn runs.
fn busy_refusal(refusal: BusyRefusal) -> ApiError {
    let message = refusal.to_string();
    match refusal {
        BusyRefusal::InProgress { turn_id } => {
            ApiError::new(StatusCode::CONFLICT, "turn_in_progress", message).with_turn_id(turn_id)
        }
        BusyRefusal::QueueFull { retry_after, .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", message).with_retry_after(retry_after)
        }
        BusyRefusal::TimedOut { turn_id, .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "turn_wait_timeout", message)
                .with_turn_id(turn_id)
                .with_retry_after(Duration::from_secs(5))
        }
        BusyRefusal::Store(e) => ApiError::from(e),
    }
}

/// `POST /` and `POST /chat`: a chat turn ([`ChatService::respond`]).
async fn chat(
    State(service): State<Arc<ChatService>>,
    caller: Caller,
    Deadline(deadline): Deadline,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match request::read_body(&service, &headers, body).await {
        Ok(bytes) => service.respond(&caller, &headers, &bytes, deadline).await,
        Err(e) => e.into_response(),
    }
}

/// `POST /chat/{episode_id}/csat`: the caller's rating of an answer in their episode
/// ([`ChatService::rate`]).
async fn csat(
    State(service): State<Arc<ChatService>>,
    axum::extract::Path(episode_id): axum::extract::Path<String>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    service.rate(&caller, episode_id, &headers, &body).await
}

impl ChatService {
    /// Answers `POST /chat/{episode_id}/csat` of `caller`: a rating of an answer in their
    /// episode `episode_id` ([`crate::rating`]), as JSON, or a 4xx/5xx JSON error.
    pub(crate) async fn rate(
        &self,
        caller: &Caller,
        episode_id: String,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Response {
        let rated = async {
            let user = request::user_of(caller, headers)?;
            let episode = checked_id("episode_id", episode_id)?;
            require_json(headers)?;
            let key = crate::store::EpisodeKey::new(user, episode)?;
            let request: crate::rating::RatingRequest = serde_json::from_slice(body).map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_rating",
                    format!("the body must be {{\"turn_id\"?: string, \"rating\": \"up\" | \"down\"}}: {e}"),
                )
            })?;
            crate::rating::rate(self.turns.history().store().as_ref(), &self.ratings, &key, request)
                .await
                .map_err(|e| match e {
                    crate::rating::RatingError::NoRateableAnswer(_) => {
                        ApiError::new(StatusCode::NOT_FOUND, "no_rateable_answer", e.to_string())
                    }
                    crate::rating::RatingError::NotSent(_) => {
                        ApiError::new(StatusCode::BAD_GATEWAY, "rating_not_sent", e.to_string())
                    }
                    crate::rating::RatingError::Store(e) => e.into(),
                })
        };
        match rated.await {
            Ok(rated) => axum::Json(rated).into_response(),
            Err(e) => e.into_response(),
        }
    }
}

async fn health() -> &'static str {
    "ok"
}

/// Unknown paths get the JSON error shape too.
async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint: POST /chat to chat")
}

/// A known path with a method it does not serve (axum adds the `Allow` header).
async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not serve that method",
    )
}

/// The API's router, with no CORS policy: `POST /` and `POST /chat` (the chat endpoint),
/// `POST /chat/{episode_id}/csat`, `GET /chat/{episode_id}/messages` (the conversation), a
/// turn's events resumed (`GET /chat/{episode_id}/events`,
/// `GET /chat/{episode_id}/turns/{turn_id}/events`) and its stop
/// (`POST …/turns/{turn_id}/cancel`), the front-end protocols (`POST /agui`, `POST /ai-sdk`,
/// `GET /ai-sdk/{chat_id}/stream`), the A2A cards and endpoints (`/a2a[/{agent}]`), and
/// `GET /health`. The Lambda function serves it as it is (a Function URL adds its own CORS
/// headers) or behind [`ChatService::cors`] (the REST API); `serve` serves `app`.
pub fn api(service: Arc<ChatService>) -> Router {
    Router::new()
        .route("/", post(chat))
        .route("/chat", post(chat))
        .route("/chat/{episode_id}/csat", post(csat))
        .route("/chat/{episode_id}/messages", get(messages::route))
        .route("/chat/{episode_id}/events", get(turns::events_route))
        .route("/chat/{episode_id}/turns/{turn_id}/events", get(turns::turn_events_route))
        .route("/chat/{episode_id}/turns/{turn_id}/cancel", post(turns::cancel_route))
        .route("/agui", post(wire::protocol_route::<agui::Agui>))
        .route("/ai-sdk", post(wire::protocol_route::<ai_sdk::AiSdk>))
        .route("/ai-sdk/{chat_id}/stream", get(ai_sdk::stream_route))
        .route("/health", get(health))
        .route(crate::a2a::types::CARD_PATH, get(a2a::card_route))
        .route(crate::a2a::RPC_PATH, post(a2a::rpc_route))
        .route("/a2a/{agent}", post(a2a::agent_rpc_route))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(a2a::agent_card_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(service)
}

/// `serve`'s router: the [`api`] and the chat page ([`crate::web`]) at `GET /`, behind the
/// service's CORS policy when it allows origins.
pub(crate) fn app(service: Arc<ChatService>) -> Router {
    let cors = service.cors();
    let router = api(service).merge(crate::web::routes());
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, within the service's
/// [`EndpointLimits`]: at most `max_connections` at once (more wait in the listen backlog), each
/// closed when it sends no complete request head within `request_head_timeout`, each with
/// `TCP_NODELAY`. On shutdown it stops accepting, closes idle connections and waits for the
/// turns in progress (each bounded by its deadline).
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<ChatService>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let limits = service.endpoint_limits();
    let service_live = service.live_turns().clone();
    let router = app(service);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.request_head_timeout);
    tokio::pin!(shutdown);
    loop {
        // A free slot first, then accept: connections over the cap stay in the kernel's backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = accept(&listener) => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    // Turns whose clients left run on (`on_disconnect: continue`): let them end, each within
    // its deadline, so their replies and logs are written.
    let live = service_live.clone();
    let waited = tokio::time::timeout(limits.turn_deadline + crate::turn::LOG_END_GRACE, async move {
        while !live.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    if waited.await.is_err() {
        tracing::warn!(turns = service_live.len(), "shutting down with turns still running");
    }
    Ok(())
}

/// Accepts one connection and sets `TCP_NODELAY`: without it, Nagle's algorithm holds a small
/// SSE event (the next turn's `thinking`) on a kept-alive connection until the client's delayed
/// ACK, ~40 ms.
async fn accept(listener: &tokio::net::TcpListener) -> std::io::Result<tokio::net::TcpStream> {
    let (stream, _) = listener.accept().await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::{SystemClock, embedded::EmbeddedStore};

    fn service() -> (ChatService, tempfile::TempDir) {
        let config = Config::default();
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap();
        let service = ChatService::new(
            crate::wiring::build(&config, crate::wiring::Backends::in_memory()).unwrap(),
            History::new(Arc::new(store), 10),
            RequestLimits { max_body_bytes: 200, max_message_chars: 20 },
            Duration::from_secs(1),
        );
        (service, dir)
    }

    fn json_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers
    }

    fn code(body: &[u8]) -> &'static str {
        service().0.validate(&Caller::Local, &json_headers(), body).unwrap_err().code
    }

    #[test]
    fn only_json_bodies_are_accepted() {
        let (service, _dir) = service();
        let with = |content_type: Option<&'static str>| {
            let mut headers = HeaderMap::new();
            if let Some(t) = content_type {
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(t));
            }
            service.validate(&Caller::Local, &headers, br#"{"message":"hi"}"#).map(|_| ()).map_err(|e| e.code)
        };
        assert_eq!(with(Some("application/json")), Ok(()));
        assert_eq!(with(Some("Application/JSON; charset=utf-8")), Ok(()));
        assert_eq!(with(None), Err("unsupported_media_type"));
        assert_eq!(with(Some("text/plain")), Err("unsupported_media_type"));
        assert_eq!(with(Some("application/x-www-form-urlencoded")), Err("unsupported_media_type"));
    }

    #[tokio::test]
    async fn accepted_sockets_set_tcp_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let accepted = accept(&listener).await.unwrap();
        assert!(accepted.nodelay().unwrap(), "the server side of the connection has TCP_NODELAY");
        assert!(!client.nodelay().unwrap(), "not the default: the setting comes from accept");
    }

    #[test]
    fn bad_requests_get_specific_codes() {
        assert_eq!(code(b"{nope"), "invalid_json");
        assert_eq!(code(b"{}"), "missing_message");
        assert_eq!(code(br#"{"message": 3}"#), "invalid_message");
        assert_eq!(code(br#"{"message": "  "}"#), "empty_message");
        assert_eq!(code(br#"{"message": "aaaaaaaaaaaaaaaaaaaaa"}"#), "message_too_long");
        assert_eq!(code(b"{\"message\": \"\xff\"}"), "invalid_utf8");
        assert_eq!(code(br#"{"message": "hi", "episode_id": "a/b"}"#), "invalid_id");
        assert_eq!(code(br#"{"message": "hi", "request_id": "r#1"}"#), "invalid_id");
        assert_eq!(code(br#"{"message": "hi", "surprise": 1}"#), "invalid_json");
        assert_eq!(code(&[b' '; 201]), "body_too_large");
        assert_eq!(code(br#"{"message": "hi", "image": "x"}"#), "invalid_image");
        assert_eq!(code(br#"{"message": "hi", "image": {"type": "cat"}}"#), "invalid_image");
        assert_eq!(code(br#"{"message": "hi", "image": {"url": "http://a/b.png"}}"#), "invalid_image");
    }

    #[test]
    fn a_good_request_mints_ids_and_takes_the_local_user_header() {
        let mut headers = json_headers();
        headers.insert(USER_HEADER, HeaderValue::from_static("alice"));
        let valid =
            service().0.validate(&Caller::Local, &headers, br#"{"message":"hi","request_id":"r1"}"#).unwrap();
        let turn = valid.turn;
        assert_eq!(valid.request_id.as_deref(), Some("r1"));
        assert_eq!(turn.user_id, "alice");
        assert_eq!(turn.message, "hi");
        assert!(!turn.episode_id.is_empty() && turn.episode_id != turn.turn_id);
    }

    #[test]
    fn a_verified_caller_wins_over_the_user_header() {
        let mut headers = json_headers();
        headers.insert(USER_HEADER, HeaderValue::from_static("mallory"));
        let caller = Caller::verified("alice").unwrap();
        let valid = service().0.validate(&caller, &headers, br#"{"message":"hi"}"#).unwrap();
        assert_eq!(valid.turn.user_id, "alice");
    }
}
