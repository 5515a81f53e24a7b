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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::BytesMut;
use futures::{FutureExt, Stream, StreamExt};
use serde::Deserialize;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::auth::AuthMode;
use crate::config::RequestLimits;
use crate::event::EventStream;
use crate::event::{SSE_HEARTBEAT, encode_sse_into};
use crate::history::History;
use crate::orchestrator::{Orchestrator, StartedTurn, TurnOptions, TurnRequest};
use crate::store::{StoreError, new_turn_id};

/// Header with the caller's user id in the unauthenticated local mode.
pub const USER_HEADER: &str = "x-baton-user";
/// Response header with the episode id (minted when the request has none).
pub const EPISODE_HEADER: &str = "x-baton-episode-id";
/// Response header with the turn id.
pub const TURN_HEADER: &str = "x-baton-turn-id";

/// A request refused before the stream started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (4xx for bad input, 5xx for a failing store).
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let status = match &e {
            StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            StoreError::InvalidKey(_) => StatusCode::BAD_REQUEST,
            StoreError::Conflict { .. } => StatusCode::CONFLICT,
            StoreError::Corrupt { .. } | StoreError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

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

/// The JSON body of a chat request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatBody {
    message: Option<serde_json::Value>,
    episode_id: Option<String>,
    request_id: Option<String>,
    image: Option<serde_json::Value>,
}

/// Who a request is from, established before its body is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Verified by the platform (IAM) or a token (JWT): the turn's user is this id, whatever the
    /// request says.
    Verified(String),
    /// Local, unauthenticated mode: the `x-baton-user` header names the user (default `local`).
    Local,
}

impl Caller {
    /// A verified caller from a platform or token identity. Ids become storage keys, so any
    /// character outside the safe alphabet is percent-encoded (injective: `%` is never kept as
    /// is, so two identities never map to one user).
    pub fn verified(identity: &str) -> Result<Caller, ApiError> {
        let mut id = String::with_capacity(identity.len());
        for b in identity.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@') {
                id.push(b as char);
            } else {
                id.push_str(&format!("%{b:02X}"));
            }
        }
        if id.is_empty() || id.len() > 256 {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the verified identity is empty or too long",
            ));
        }
        Ok(Caller::Verified(id))
    }
}

/// A request that passed validation.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// The turn to run.
    pub turn: TurnRequest,
    /// The client's id for this request, for idempotent retries.
    pub request_id: Option<String>,
}

/// The chat endpoint: an orchestrator, the history it records into, limits, heartbeat pacing,
/// and how callers are identified.
pub struct ChatService {
    orchestrator: Arc<Orchestrator>,
    history: History,
    limits: RequestLimits,
    heartbeat: Duration,
    auth: AuthMode,
    endpoint: EndpointLimits,
    ratings: crate::rating::RatingSinks,
    cors_origins: Vec<HeaderValue>,
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
            orchestrator,
            history,
            limits,
            heartbeat,
            auth: AuthMode::LocalHeader,
            endpoint: EndpointLimits::default(),
            ratings: Default::default(),
            cors_origins: Vec::new(),
        }
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
    /// `POST` with the headers the web client sends (credentials, the JSON type, the trace
    /// context, the local user header) are answered, and pages may read the episode and turn ids.
    /// A request from any other origin gets no CORS header, so the browser refuses it.
    pub fn cors(&self) -> Option<CorsLayer> {
        if self.cors_origins.is_empty() {
            return None;
        }
        let headers = [header::AUTHORIZATION, header::CONTENT_TYPE];
        let ours = ["traceparent", USER_HEADER].map(header::HeaderName::from_static);
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(self.cors_origins.clone()))
                .allow_methods([axum::http::Method::POST])
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

    /// The caller of a request that carries its credentials in headers (JWT or local mode). IAM
    /// identities come from the platform's request context instead: see the Lambda glue.
    pub fn caller_from_headers(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
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
            AuthMode::Iam => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this endpoint requires an IAM-signed request",
            )),
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
        let parsed: ChatBody = serde_json::from_str(text).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("the body is not a valid chat request: {e}"),
            )
        })?;
        let message = match parsed.message {
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
            None => uuid::Uuid::new_v4().to_string(),
        };
        let request_id = parsed.request_id.map(|id| checked_id("request_id", id)).transpose()?;
        let image = parsed
            .image
            .map(|value| crate::image::Image::from_request(value, self.limits.max_message_chars))
            .transpose()
            .map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "invalid_image", reason))?;
        let user_id = match (caller, headers.get(USER_HEADER)) {
            (Caller::Verified(id), _) => id.clone(),
            (Caller::Local, None) => "local".to_owned(),
            (Caller::Local, Some(v)) => {
                let v = v.to_str().map_err(|_| bad_id(USER_HEADER))?;
                checked_id(USER_HEADER, v.to_owned())?
            }
        };
        let mut turn = TurnRequest::new(episode_id, new_turn_id(), user_id, message);
        turn.traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
        turn.image = image;
        Ok(ValidRequest { turn, request_id })
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
        let turn_deadline = tokio::time::Instant::now() + self.endpoint.turn_deadline;
        let deadline = deadline.map_or(turn_deadline, |d| d.min(turn_deadline));
        let ValidRequest { turn, request_id } = match self.validate(caller, headers, body) {
            Ok(valid) => valid,
            Err(e) => return e.into_response(),
        };
        let options =
            TurnOptions { history: Some((&self.history, request_id.as_deref())), deadline: Some(deadline) };
        let StartedTurn { episode_id, turn_id, events } = match self.orchestrator.start(turn, options).await {
            Ok(started) => started,
            Err(e) => return ApiError::from(e).into_response(),
        };
        let episode = HeaderValue::from_str(&episode_id).expect("checked id is a valid header");
        let turn_id = HeaderValue::from_str(&turn_id).expect("uuid is a valid header");
        let mut response = Response::new(Body::from_stream(sse_body(events, self.heartbeat)));
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        h.insert(EPISODE_HEADER, episode);
        h.insert(TURN_HEADER, turn_id);
        response
    }
}

fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

/// Chat requests are JSON: anything else is refused before the body is read. Besides saying what
/// the endpoint speaks, this makes a cross-site browser POST a CORS-preflighted request, so a web
/// page cannot start turns on a local unauthenticated `serve` with a plain form or `text/plain`.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the request as JSON with `content-type: application/json`",
        ))
    }
}

fn bad_id(field: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_id",
        format!("`{field}` must be 1 to 128 characters of letters, digits, '-', '_', '.', ':' or '@'"),
    )
}

/// Ids end up in storage keys: keep them to a safe alphabet.
fn checked_id(field: &str, id: String) -> Result<String, ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@'));
    if ok { Ok(id) } else { Err(bad_id(field)) }
}

/// How many bytes of SSE events [`sse_body`] gathers into one chunk at most.
pub const SSE_CHUNK_BYTES: usize = 16 * 1024;

/// The capacity a chunk's buffer starts with: an event or two (a text delta is ~100 bytes).
const SSE_CHUNK_START_BYTES: usize = 512;

/// The SSE body of a turn: client-visible events numbered from 0, and a heartbeat comment after
/// each `heartbeat` of silence. Events already waiting when one arrives go out with it as one
/// chunk (up to [`SSE_CHUNK_BYTES`]), encoded into one buffer: fewer allocations and writes.
pub fn sse_body(
    events: EventStream,
    heartbeat: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    async_stream::stream! {
        // Gated: when the turn had nothing to send, the poll hyper makes next does not go down the
        // whole turn again to learn so (`gate`).
        let mut events =
            crate::gate::Gated::new(events.filter(|e| std::future::ready(e.is_client_visible())));
        let mut silence = crate::bounded::IdleTimer::new(heartbeat);
        let mut seq = 0u64;
        let mut ended = false;
        while !ended {
            match silence.next(&mut events).await {
                Err(_) => yield Ok(Bytes::from_static(SSE_HEARTBEAT)),
                Ok(None) => break,
                Ok(Some(event)) => {
                    // A buffer per chunk, handed over whole: between chunks an open stream keeps
                    // no buffer. (A buffer kept to split chunks off grew to 4 KiB per stream with
                    // the first large event, and kept it: docs/benchmarks-log.md, "Cleartext
                    // HTTP/1.1 without hyper's client connection".)
                    let mut out = BytesMut::with_capacity(SSE_CHUNK_START_BYTES);
                    encode_sse_into(&mut out, seq, &event);
                    seq += 1;
                    while out.len() < SSE_CHUNK_BYTES {
                        match events.next().now_or_never() {
                            Some(Some(event)) => {
                                encode_sse_into(&mut out, seq, &event);
                                seq += 1;
                            }
                            Some(None) => {
                                ended = true;
                                break;
                            }
                            None => break,
                        }
                    }
                    yield Ok(out.freeze());
                }
            }
        }
    }
}

async fn chat(State(service): State<Arc<ChatService>>, headers: HeaderMap, body: Body) -> Response {
    let caller = match service.caller_from_headers(&headers) {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    let limit = service.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return body_too_large(limit).into_response();
    }
    if let Err(e) = require_json(&headers) {
        return e.into_response();
    }
    // A total bound on the body, not an idle one: a client trickling a byte now and then would
    // reset any per-read timer forever. hyper closes the connection after this answer, since
    // the rest of the body was not read.
    let timeout = service.endpoint.body_read_timeout;
    let read = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(read) => read,
        Err(_) => {
            tracing::info!(timeout_ms = timeout.as_millis() as u64, "request body too slow");
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!("the request body did not arrive within {} ms", timeout.as_millis()),
            )
            .into_response();
        }
    };
    match read {
        Ok(bytes) => service.respond(&caller, &headers, &bytes, None).await,
        Err(e) => {
            let too_large = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                .any(|e| e.is::<http_body_util::LengthLimitError>());
            if too_large {
                body_too_large(limit).into_response()
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "unreadable_body",
                    format!("could not read the body: {e}"),
                )
                .into_response()
            }
        }
    }
}

/// `POST /chat/{episode_id}/csat`: the caller's rating of an answer in their episode
/// ([`ChatService::rate`]).
async fn csat(
    State(service): State<Arc<ChatService>>,
    axum::extract::Path(episode_id): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match service.caller_from_headers(&headers) {
        Ok(caller) => service.rate(&caller, episode_id, &headers, &body).await,
        Err(e) => e.into_response(),
    }
}

impl ChatService {
    /// Answers `POST /chat/{episode_id}/csat` of `caller`: a rating of an answer in their
    /// episode `episode_id` ([`crate::rating`]), as JSON, or a 4xx/5xx JSON error.
    pub async fn rate(
        &self,
        caller: &Caller,
        episode_id: String,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Response {
        let rated = async {
            let user = match (caller, headers.get(USER_HEADER)) {
                (Caller::Verified(id), _) => id.clone(),
                (Caller::Local, None) => "local".to_owned(),
                (Caller::Local, Some(v)) => {
                    checked_id(USER_HEADER, v.to_str().map_err(|_| bad_id(USER_HEADER))?.to_owned())?
                }
            };
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
            crate::rating::rate(self.history.store().as_ref(), &self.ratings, &key, request).await.map_err(
                |e| match e {
                    crate::rating::RatingError::NoRateableAnswer(_) => {
                        ApiError::new(StatusCode::NOT_FOUND, "no_rateable_answer", e.to_string())
                    }
                    crate::rating::RatingError::NotSent(_) => {
                        ApiError::new(StatusCode::BAD_GATEWAY, "rating_not_sent", e.to_string())
                    }
                    crate::rating::RatingError::Store(e) => e.into(),
                },
            )
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

/// The router: `POST /` and `POST /chat` (the chat endpoint), `GET /health`, and the chat page
/// ([`crate::web`]) at `GET /`; behind the service's CORS policy when it allows origins.
pub fn app(service: Arc<ChatService>) -> Router {
    let cors = service.cors();
    let router = Router::new()
        .route("/", post(chat))
        .route("/chat", post(chat))
        .route("/chat/{episode_id}/csat", post(csat))
        .route("/health", get(health))
        .merge(crate::web::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(service);
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

    #[tokio::test(start_paused = true)]
    async fn silence_gets_heartbeats_and_content_end_is_never_sent() {
        use crate::event::Event;
        let events: EventStream = Box::pin(async_stream::stream! {
            yield Event::Thinking {};
            tokio::time::sleep(Duration::from_millis(2500)).await;
            yield Event::ContentEnd { agent: "support[1]".into() };
            yield Event::text("support[1]", "x");
        });
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        let text: Vec<String> = chunks.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        assert!(text[0].starts_with("event: thinking\nid: 0\n"));
        assert_eq!(&text[1..3], [": heartbeat\n\n", ": heartbeat\n\n"]);
        assert!(text[3].starts_with("event: text\nid: 1\n"), "{text:?}");
        assert_eq!(text.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn events_already_waiting_go_out_as_one_chunk_numbered_in_order() {
        use crate::event::{Event, encode_sse};
        let events: EventStream = Box::pin(async_stream::stream! {
            yield Event::Thinking {};
            yield Event::text("shopping[1]", "a");
            yield Event::text("shopping[1]", "b");
            tokio::time::sleep(Duration::from_millis(10)).await;
            yield Event::text("shopping[1]", "c");
        });
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        let first = [
            encode_sse(0, &Event::Thinking {}),
            encode_sse(1, &Event::text("shopping[1]", "a")),
            encode_sse(2, &Event::text("shopping[1]", "b")),
        ]
        .concat();
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(&chunks[0][..], &first[..]);
        assert_eq!(chunks[1], encode_sse(3, &Event::text("shopping[1]", "c")));
    }

    #[tokio::test]
    async fn a_burst_is_cut_into_chunks_of_bounded_size() {
        use crate::event::Event;
        let big = "x".repeat(1000);
        let events: EventStream =
            Box::pin(futures::stream::iter((0..100).map(move |_| Event::text("shopping[1]", big.clone()))));
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        assert!(chunks.len() > 1, "one chunk of {} bytes", chunks[0].len());
        assert!(
            chunks.iter().all(|c| c.len() < SSE_CHUNK_BYTES + 2048),
            "{:?}",
            chunks.iter().map(Bytes::len).collect::<Vec<_>>()
        );
        let all = chunks.concat();
        assert_eq!(String::from_utf8_lossy(&all).matches("event: text\n").count(), 100);
        assert!(String::from_utf8_lossy(&all).contains("\nid: 99\n"));
    }

    #[test]
    fn a_verified_caller_wins_over_the_user_header() {
        let mut headers = json_headers();
        headers.insert(USER_HEADER, HeaderValue::from_static("mallory"));
        let caller = Caller::verified("alice").unwrap();
        let valid = service().0.validate(&caller, &headers, br#"{"message":"hi"}"#).unwrap();
        assert_eq!(valid.turn.user_id, "alice");
    }

    #[test]
    fn verified_identities_are_encoded_injectively_into_safe_ids() {
        let id = |s| match Caller::verified(s).unwrap() {
            Caller::Verified(id) => id,
            Caller::Local => unreachable!(),
        };
        assert_eq!(id("auth0|123"), "auth0%7C123");
        assert_eq!(id("a#EP#b"), "a%23EP%23b", "no key injection");
        assert_ne!(id("a%7C"), id("a|"));
        assert!(Caller::verified("").is_err());
    }
}
