//! The client side: one [`McpConnection`] per configured server (a child process over stdio, or
//! a streamable HTTP endpoint) and one [`McpTool`] per tool it offers.
//!
//! The retry rule lives here, in [`McpTool::call_items`]: **a `tools/call` is never sent twice.**
//! A call that could not be sent (the server would not start again, the session was gone, the
//! connection was refused) reconnects (restarting a stdio server) and is sent once more. A call
//! that was sent and whose connection broke before the answer is not sent again: the server
//! may have acted, so it is an error result saying the outcome is unknown. (rmcp's streamable
//! HTTP client re-sends a POST only when the server answered 404 for an expired session, which
//! the server sends before it acts; it resumes a broken SSE stream with `Last-Event-ID`, which
//! replays the answer and does not run the call again.) A call past its timeout is cancelled
//! with `notifications/cancelled` and is an error result; a server's own error (`isError`, or a
//! JSON-RPC error) is never retried.
//!
//! Errors are sentences ([`super::errors`]): a start-up error names the server, its address and
//! the likely fix; a call's error names the server, never its address.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    ProgressNotificationParam, ProtocolVersion, RequestId, ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::McpError;
use super::config::{McpServerConfig, expand_env};
use super::errors::{self, Where};
use crate::event::Event;
use crate::item::Item;
use crate::tool::{CallOptions, CallRef, Tool, ToolContext, ToolError, ToolFinish, ToolRun};

/// How long a finished call waits for progress notifications still on their way, while the
/// reported total is not reached (see [`McpTool::call_items`]).
const PROGRESS_GRACE: Duration = Duration::from_millis(100);

/// What `McpTool::call_items` yields: progress while the call runs, then its outcome, last.
#[derive(Debug, Clone, PartialEq)]
pub enum McpCallItem {
    /// A `notifications/progress` from the server for this call.
    Progress(McpProgress),
    /// The outcome: the result the model reads, or the error it reads instead.
    Done(Result<Value, ToolError>),
}

/// One progress notification of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct McpProgress {
    /// Progress so far (increases with every notification).
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// The server's description of the step.
    pub message: Option<String>,
}

/// Longest a server may take to start (a child process, or a connection and its handshake) and
/// to list its tools: `npx` fetching a package is slow, a call's own timeout may be short.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How a server is reached, with `${NAME}` references already read from the environment.
#[derive(Clone)]
enum Endpoint {
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String> },
    Http { url: String, headers: http::HeaderMap },
}

impl Endpoint {
    /// Where it is, as a start-up error names it.
    fn at(&self) -> Where<'_> {
        match self {
            Endpoint::Stdio { command, .. } => Where::Command(command),
            Endpoint::Http { url, .. } => Where::Url(url),
        }
    }
}

/// The client's side of one running session; dropped, it ends the session (and kills a stdio
/// child).
struct Session {
    peer: Peer<RoleClient>,
    progress: rmcp::handler::client::progress::ProgressDispatcher,
    _service: RunningService<RoleClient, ProgressRouter>,
}

/// Routes each `notifications/progress` to the call whose progress token it carries.
#[derive(Clone, Default)]
struct ProgressRouter {
    dispatcher: rmcp::handler::client::progress::ProgressDispatcher,
}

impl ClientHandler for ProgressRouter {
    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        self.dispatcher.handle_notification(params).await;
    }

    fn get_info(&self) -> ClientConfig {
        // The newest version with the `initialize` handshake: what deployed servers (and the
        // conformance suite) speak; a server on an older version answers with its own.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("baton", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// One configured MCP server: its session, started at [`McpConnection::connect`] and again on
/// the next use after it broke.
pub(crate) struct McpConnection {
    name: String,
    endpoint: Endpoint,
    timeout: Duration,
    http: reqwest::Client,
    session: Mutex<Option<Arc<Session>>>,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers and environment may hold secrets: only the name.
        f.debug_struct("McpConnection").field("name", &self.name).finish_non_exhaustive()
    }
}

impl McpConnection {
    /// Reads `config`'s environment references and starts the server; fails with an error
    /// naming the server when it does not start within its timeout.
    pub(crate) async fn connect(
        name: &str,
        config: &McpServerConfig,
    ) -> Result<Arc<McpConnection>, McpError> {
        let connection = Arc::new(McpConnection::new(name, config, |v| std::env::var(v).ok())?);
        connection.session().await?;
        Ok(connection)
    }

    /// A connection that has not started yet, reading the environment through `lookup`.
    fn new(
        name: &str,
        config: &McpServerConfig,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<McpConnection, McpError> {
        let field_error = |field: String, reason: String| {
            McpError::Config(super::McpConfigError { path: format!("mcp_servers.{name}.{field}"), reason })
        };
        let endpoint = match (&config.command, &config.url) {
            (Some(command), None) => {
                let mut env = BTreeMap::new();
                for (key, value) in &config.env {
                    let value =
                        expand_env(value, &lookup).map_err(|e| field_error(format!("env.{key}"), e))?;
                    env.insert(key.clone(), value);
                }
                Endpoint::Stdio { command: command.clone(), args: config.args.clone(), env }
            }
            (None, Some(url)) => {
                let mut headers = http::HeaderMap::new();
                for (key, value) in &config.headers {
                    let at = format!("headers.{key}");
                    let value = expand_env(value, &lookup).map_err(|e| field_error(at.clone(), e))?;
                    let name = http::HeaderName::from_bytes(key.as_bytes())
                        .map_err(|_| field_error(at.clone(), "not a valid HTTP header name".into()))?;
                    let mut value = http::HeaderValue::from_str(&value)
                        .map_err(|_| field_error(at, "is not a valid header value once expanded".into()))?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                Endpoint::Http { url: url.clone(), headers }
            }
            _ => return Err(field_error("command".into(), "give `command` or `url`, not both".into())),
        };
        Ok(McpConnection {
            name: name.to_owned(),
            endpoint,
            timeout: config.timeout(),
            http: reqwest::Client::new(),
            session: Mutex::new(None),
        })
    }

    /// The server's name in the configuration.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The live session, started (again) when there is none or the last one broke.
    async fn session(&self) -> Result<Arc<Session>, McpError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref()
            && !session.peer.is_transport_closed()
        {
            return Ok(session.clone());
        }
        *slot = None;
        let started = tokio::time::timeout(START_TIMEOUT, self.start()).await.unwrap_or_else(|_| {
            Err(format!("did not finish its start-up handshake within {} s", START_TIMEOUT.as_secs()))
        });
        let session = Arc::new(started.map_err(|cause| McpError::Start {
            server: self.name.clone(),
            reason: errors::not_started(&self.name, self.endpoint.at(), &cause),
        })?);
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Forgets `broken`, so the next call starts a new session (unless another call already
    /// replaced it).
    async fn discard(&self, broken: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, broken)) {
            *slot = None;
        }
    }

    async fn start(&self) -> Result<Session, String> {
        let router = ProgressRouter::default();
        let progress = router.dispatcher.clone();
        let service = match &self.endpoint {
            Endpoint::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                let transport = TokioChildProcess::new(cmd).map_err(|e| errors::root_cause(&e))?;
                router.serve(transport).await.map_err(|e| match errors::root_cause(&e) {
                    // The child's stdout closed: it exited before the handshake.
                    cause if cause.contains("closed") => format!("it exited during the handshake ({cause})"),
                    cause => cause,
                })?
            }
            Endpoint::Http { url, headers } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
                router.serve(transport).await.map_err(|e| errors::root_cause(&e))?
            }
        };
        Ok(Session { peer: service.peer().clone(), progress, _service: service })
    }

    /// Every tool the server offers (all pages), under the start-up bound.
    pub(crate) async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let session = self.session().await?;
        let listed = tokio::time::timeout(START_TIMEOUT, session.peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(McpError::Start {
                server: self.name.clone(),
                reason: errors::not_started(
                    &self.name,
                    self.endpoint.at(),
                    &format!("tools/list failed: {}", errors::root_cause(&e)),
                ),
            }),
            Err(_) => Err(McpError::Start {
                server: self.name.clone(),
                reason: errors::not_started(
                    &self.name,
                    self.endpoint.at(),
                    &format!("tools/list did not answer within {} s", START_TIMEOUT.as_secs()),
                ),
            }),
        }
    }
}

/// Sends `notifications/cancelled` for a request that is abandoned before its answer (the
/// caller dropped the call, e.g. at its own timeout).
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the caller stopped waiting".to_owned()),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.send_notification(notification.into()).await;
            });
        }
    }
}

/// One tool of an MCP server, offered to the model as `mcp__<server>__<tool>` with the server's
/// JSON Schema; the registry validates arguments against that schema before the call.
pub struct McpTool {
    connection: Arc<McpConnection>,
    /// The tool's name on the server.
    remote_name: String,
    /// The name the model calls it by.
    name: String,
    description: String,
    parameters: Value,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool").field("name", &self.name).finish_non_exhaustive()
    }
}

/// How one send ended, for the retry rule.
enum Attempt {
    Finished(Result<Value, ToolError>),
    /// The call never reached the server (the connection was refused): worth one more send.
    NotSent(String),
    /// The connection broke after the call was sent: the server may have acted.
    Unknown(String),
}

impl McpTool {
    pub(crate) fn new(connection: Arc<McpConnection>, tool: &rmcp::model::Tool) -> McpTool {
        let remote_name = tool.name.to_string();
        let mut parameters = Value::Object((*tool.input_schema).clone());
        // An empty schema object means "no arguments" to many servers; the registry needs an
        // object schema to offer to the model.
        if parameters.get("type").is_none() {
            parameters["type"] = json!("object");
        }
        McpTool {
            name: super::tool_name(connection.name(), &remote_name),
            remote_name,
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters,
            connection,
        }
    }

    /// The server this tool belongs to.
    pub fn server(&self) -> &str {
        self.connection.name()
    }

    /// Runs the call: the server's progress notifications as they come, then the outcome
    /// (always last, always present). Dropping the stream before the outcome cancels the call
    /// on the server.
    pub fn call_items(&self, arguments: Value) -> impl Stream<Item = McpCallItem> + Send + 'static {
        let connection = self.connection.clone();
        let tool = self.name.clone();
        let params = match arguments {
            Value::Object(map) => CallToolRequestParams::new(self.remote_name.clone()).with_arguments(map),
            _ => CallToolRequestParams::new(self.remote_name.clone()),
        };
        async_stream::stream! {
            let mut last_error = String::new();
            for attempt in 0..2 {
                if attempt > 0 {
                    tracing::warn!(server = %connection.name(), %tool, error = %last_error, "MCP call not sent; trying once more");
                }
                let session = match connection.session().await {
                    Ok(session) => session,
                    Err(e) => {
                        last_error = e.to_string();
                        continue;
                    }
                };
                let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
                let options = PeerRequestOptions::with_timeout(connection.timeout);
                let handle = match session.peer.send_request_with_option(request, options).await {
                    Ok(handle) => handle,
                    Err(e) => {
                        last_error = e.to_string();
                        connection.discard(&session).await;
                        continue;
                    }
                };
                let mut guard = CancelOnDrop { peer: Some(session.peer.clone()), id: handle.id.clone() };
                let mut progress = session.progress.subscribe(handle.progress_token.clone()).await;
                let response = handle.await_response();
                tokio::pin!(response);
                let mut seen: Option<(f64, Option<f64>)> = None;
                let response = loop {
                    tokio::select! {
                        biased;
                        Some(p) = progress.next() => {
                            seen = Some((p.progress, p.total));
                            yield McpCallItem::Progress(McpProgress { progress: p.progress, total: p.total, message: p.message });
                        }
                        response = &mut response => break response,
                    }
                };
                // Answered or timed out (rmcp sent the cancellation): nothing left to cancel.
                guard.peer = None;
                // Progress sent just before the answer is still delivered, in order. rmcp hands
                // each notification to its handler on a task of its own, so one sent before the
                // answer can land just after it: while the reported total is not reached, wait
                // a little for the rest.
                loop {
                    let incomplete = matches!(seen, Some((done, Some(total))) if done < total);
                    let next = if incomplete {
                        tokio::time::timeout(PROGRESS_GRACE, progress.next()).await.ok().flatten()
                    } else {
                        progress.next().now_or_never().flatten()
                    };
                    let Some(p) = next else { break };
                    seen = Some((p.progress, p.total));
                    yield McpCallItem::Progress(McpProgress { progress: p.progress, total: p.total, message: p.message });
                }
                match classify(&tool, connection.timeout, response) {
                    Attempt::Finished(outcome) => {
                        yield McpCallItem::Done(outcome);
                        return;
                    }
                    Attempt::NotSent(e) => {
                        last_error = e;
                        connection.discard(&session).await;
                    }
                    Attempt::Unknown(e) => {
                        connection.discard(&session).await;
                        tracing::warn!(server = %connection.name(), %tool, error = %e, "MCP connection broke after the call was sent; not sent again");
                        let reason = errors::outcome_unknown(connection.name());
                        yield McpCallItem::Done(Err(ToolError::OutcomeUnknown { tool, reason }));
                        return;
                    }
                }
            }
            tracing::warn!(server = %connection.name(), %tool, error = %last_error, "MCP call not made: the server could not be reached");
            let reason = errors::unreachable(connection.name());
            yield McpCallItem::Done(Err(ToolError::Failed { tool, reason }));
        }
    }
}

use futures::FutureExt;

/// Sorts a response into an outcome, or a transport failure that is worth one retry.
fn classify(tool: &str, timeout: Duration, response: Result<ServerResult, ServiceError>) -> Attempt {
    let failed = |reason: String| Attempt::Finished(Err(ToolError::Failed { tool: tool.to_owned(), reason }));
    match response {
        Ok(ServerResult::CallToolResult(result)) => Attempt::Finished(call_result(tool, result)),
        Ok(_) => failed("the server answered tools/call with another kind of result".into()),
        Err(ServiceError::Timeout { .. }) => {
            Attempt::Finished(Err(ToolError::Timeout { tool: tool.to_owned(), timeout }))
        }
        Err(ServiceError::McpError(e)) => failed(format!("the server refused the call: {}", e.message)),
        Err(ServiceError::TransportSend(e)) if errors::refused(&e) => {
            Attempt::NotSent(errors::root_cause(&e))
        }
        Err(
            e @ (ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. }),
        ) => Attempt::Unknown(errors::root_cause(&e)),
        Err(e) => failed(errors::root_cause(&e)),
    }
}

/// What the model reads for a `tools/call` result: the structured content when there is some;
/// else the text (one string) when every block is text; else the content blocks as JSON. An
/// `isError` result is an error the model reads, with the server's text.
fn call_result(tool: &str, result: CallToolResult) -> Result<Value, ToolError> {
    let texts: Option<Vec<&str>> =
        result.content.iter().map(|c| c.as_text().map(|t| t.text.as_str())).collect();
    let content = || match &texts {
        Some(texts) => Value::String(texts.join("\n")),
        None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    if result.is_error == Some(true) {
        let reason = match content() {
            Value::String(s) => s,
            other => other.to_string(),
        };
        return Err(ToolError::Failed { tool: tool.to_owned(), reason });
    }
    Ok(result.structured_content.clone().unwrap_or_else(content))
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn kind(&self) -> &'static str {
        "mcp"
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        let items = self.call_items(arguments);
        tokio::pin!(items);
        while let Some(item) = items.next().await {
            if let McpCallItem::Done(outcome) = item {
                return outcome;
            }
        }
        Err(ToolError::Failed { tool: self.name.clone(), reason: "the call ended without an outcome".into() })
    }

    /// Streams the server's progress notifications as `tool_call_progress` events of the
    /// calling instance while the call runs; past `options.timeout` the call is dropped, which
    /// cancels it on the server.
    fn start(self: Arc<Self>, arguments: Value, context: ToolContext, options: CallOptions) -> ToolRun {
        let items = async_stream::stream! {
            let CallRef { agent, call_id } = context.call;
            let deadline = tokio::time::Instant::now() + options.timeout;
            let items = self.call_items(arguments);
            tokio::pin!(items);
            let outcome = loop {
                match tokio::time::timeout_at(deadline, items.next()).await {
                    Ok(Some(McpCallItem::Progress(p))) => {
                        yield Item::Event(Event::ToolCallProgress {
                            agent: agent.clone(),
                            call_id: call_id.clone(),
                            name: self.name.clone(),
                            progress: p.progress,
                            total: p.total,
                            message: p.message,
                        });
                    }
                    Ok(Some(McpCallItem::Done(outcome))) => break outcome,
                    Ok(None) => {
                        break Err(ToolError::Failed {
                            tool: self.name.clone(),
                            reason: "the call ended without an outcome".into(),
                        });
                    }
                    Err(_) => break Err(ToolError::Timeout { tool: self.name.clone(), timeout: options.timeout }),
                }
            };
            yield Item::Done(ToolFinish::of(outcome));
        };
        ToolRun { items: Box::pin(items) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    #[test]
    fn structured_content_wins_over_text() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("{\"t\":1}")]);
        result.structured_content = Some(json!({"t": 1}));
        assert_eq!(call_result("x", result).unwrap(), json!({"t": 1}));
    }

    #[test]
    fn text_blocks_are_one_string() {
        let result = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(call_result("x", result).unwrap(), json!("a\nb"));
    }

    #[test]
    fn an_is_error_result_is_a_tool_error_with_the_servers_text() {
        let result = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        let e = call_result("mcp__fs__read", result).unwrap_err();
        assert_eq!(e, ToolError::Failed { tool: "mcp__fs__read".into(), reason: "no such file".into() });
    }

    #[test]
    fn a_broken_connection_after_the_send_is_an_unknown_outcome_and_server_errors_are_final() {
        assert!(matches!(
            classify("x", Duration::ZERO, Err(ServiceError::TransportClosed)),
            Attempt::Unknown(_)
        ));
        let refused = Err(ServiceError::McpError(rmcp::ErrorData::invalid_params("bad", None)));
        assert!(matches!(
            classify("x", Duration::ZERO, refused),
            Attempt::Finished(Err(ToolError::Failed { .. }))
        ));
        let timeout = Err(ServiceError::Timeout { timeout: Duration::from_secs(1) });
        assert!(matches!(
            classify("x", Duration::ZERO, timeout),
            Attempt::Finished(Err(ToolError::Timeout { .. }))
        ));
    }

    #[test]
    fn a_missing_header_variable_is_named_without_the_value() {
        let config = McpServerConfig {
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: [("Authorization".to_owned(), "Bearer ${MCP_TEST_TOKEN}".to_owned())].into(),
            ..Default::default()
        };
        let e = McpConnection::new("gh", &config, |_| None).unwrap_err().to_string();
        assert!(e.contains("mcp_servers.gh.headers.Authorization") && e.contains("MCP_TEST_TOKEN"), "{e}");
        let ok = McpConnection::new("gh", &config, |_| Some("s3cret".into())).unwrap();
        assert!(!format!("{ok:?}").contains("s3cret"));
    }
}
