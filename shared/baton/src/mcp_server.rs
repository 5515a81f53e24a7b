//! Baton's agents served as MCP tools, over stdio ([`serve_stdio`]) or streamable HTTP
//! ([`serve_http`], at `/mcp`), so that an MCP client (an IDE, another agent framework) can call
//! them.
//!
//! Each agent is one tool named after the agent, taking `{"text": "..."}`. A call is a turn of
//! that agent, started as every turn is ([`Turns::start`]: recorded, logged, its span, its cost),
//! in a fresh episode of the user `mcp`; the text it streams is the result, and its progress
//! events (agent and tool starts and ends, errors) are sent as `notifications/progress` when the
//! client asked for progress. A client's `notifications/cancelled` stops the turn
//! (`on_disconnect: cancel`). A call that needs a person's approval is asked through
//! elicitation when the client can answer one, else refused.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::event::Event;
use crate::mcp::McpError;
use crate::orchestrator::{Orchestrator, TurnRequest};
use crate::turn::{DisconnectPolicy, OnApproval, TurnStart, Turns};

/// The user whose episodes MCP calls are.
pub(crate) const MCP_USER: &str = "mcp";

/// Longest an MCP call's turn runs: then it ends with what was produced.
pub(crate) const MCP_CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// One agent offered as an MCP tool: the turns of the agent and what the tool says it does.
#[derive(Clone)]
pub struct McpAgent {
    orchestrator: Arc<Orchestrator>,
    description: String,
}

impl McpAgent {
    /// The agent whose turns `orchestrator` runs, described as `description` to the client's model.
    pub fn new(orchestrator: Arc<Orchestrator>, description: impl Into<String>) -> McpAgent {
        McpAgent { orchestrator, description: description.into() }
    }

    fn name(&self) -> &str {
        self.orchestrator.entry().name()
    }
}

/// The MCP server handler over a set of agents (one tool each), their calls started by `turns`.
#[derive(Clone)]
pub(crate) struct AgentsServer {
    agents: Arc<Vec<McpAgent>>,
    turns: Turns,
}

impl std::fmt::Debug for AgentsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.agents.iter().map(McpAgent::name)).finish()
    }
}

/// The input schema of every agent tool.
fn input_schema() -> Arc<serde_json::Map<String, Value>> {
    let schema = json!({
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to ask the agent."}},
        "required": ["text"],
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("a literal object"),
    }
}

/// The progress line a client sees for an agent event; `None` for content (text, usage), which
/// is the result, not progress.
pub(crate) fn progress_message(event: &Event) -> Option<String> {
    Some(match event {
        Event::AgentStarted { agent, .. } => format!("{agent} started"),
        Event::AgentFinished { agent, status, duration_ms, .. } => {
            format!("{agent} finished ({}, {duration_ms} ms)", serde_json::to_value(status).ok()?.as_str()?)
        }
        Event::ToolCallStart { agent, name, .. } => format!("{agent} calls {name}"),
        Event::ToolCallProgress { agent, name, progress, total, message, .. } => {
            let of = total.map(|t| format!("{progress}/{t}")).unwrap_or_else(|| progress.to_string());
            let note = message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
            format!("{agent}: {name} {of}{note}")
        }
        Event::ToolCallEnd { agent, name, duration_ms, .. } => {
            format!("{agent}: {name} done ({duration_ms} ms)")
        }
        Event::Error { agent, code, message, .. } => format!("{agent} error {code}: {message}"),
        Event::MiniAgentStarted { parent, mini_id, description } => {
            format!("{parent} mini {mini_id} started: {description}")
        }
        Event::MiniAgentFinished { parent, mini_id, status, .. } => {
            format!("{parent} mini {mini_id} finished ({})", serde_json::to_value(status).ok()?.as_str()?)
        }
        _ => return None,
    })
}

impl AgentsServer {
    /// A server offering `agents`, whose calls `turns` starts.
    pub(crate) fn new(agents: Vec<McpAgent>, turns: Turns) -> AgentsServer {
        AgentsServer { agents: Arc::new(agents), turns }
    }

    async fn run(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(served) = self.agents.iter().find(|a| a.name() == params.name.as_ref()) else {
            return Err(ErrorData::invalid_params(format!("unknown tool `{}`", params.name), None));
        };
        let arguments = Value::Object(params.arguments.clone().unwrap_or_default());
        let Some(text) = arguments.get("text").and_then(Value::as_str).filter(|t| !t.trim().is_empty())
        else {
            return Ok(CallToolResult::error(vec![ContentBlock::text("`text` must be a non-empty string")]));
        };
        let episode = crate::store::new_episode_id();
        let start = TurnStart {
            turn: TurnRequest::new(episode, crate::store::new_turn_id(), MCP_USER, text),
            request_id: None,
            on_disconnect: Some(DisconnectPolicy::Cancel),
            on_busy: None,
            approvals: approvals_for(&context),
            deadline: tokio::time::Instant::now() + MCP_CALL_DEADLINE,
        };
        let mut events = match self.turns.start(&served.orchestrator, start).await {
            Ok(begun) => begun.events,
            Err(e) => {
                tracing::error!(agent = served.name(), error = %e, "an MCP call's turn did not start");
                let message = format!("the {} agent could not start: {}", served.name(), e);
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
            }
        };
        // The turn's entry instance is named after the agent.
        let instance = served.name();
        let token = context.meta.get_progress_token();
        let (mut answer, mut errors, mut step) = (Answer::default(), Vec::new(), 0.0);
        loop {
            let event = tokio::select! {
                biased;
                _ = context.ct.cancelled() => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text("cancelled by the client")]));
                }
                event = events.next() => event,
            };
            let Some(logged) = event else { break };
            let Some(event) = logged.typed() else { continue };
            match &*event {
                Event::Text { agent, text } => answer.push(agent, text),
                Event::Error { agent, message, .. } if *agent == instance => errors.push(message.clone()),
                _ => {}
            }
            if let (Some(token), Some(message)) = (&token, progress_message(&event)) {
                step += 1.0;
                let progress = ProgressNotificationParam::new(token.clone(), step).with_message(message);
                // A client that went away ends the call below; a lost progress line is not an error.
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        let answer = answer.text;
        if answer.trim().is_empty() && !errors.is_empty() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(errors.join("\n"))]));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(answer)]))
    }
}

/// A call's answer: the text of every speaker, each speaker's a paragraph of its own (a sub-agent
/// that streams to the user, then the agent's own words), not run together.
#[derive(Default)]
struct Answer {
    text: String,
    speaker: Option<String>,
}

impl Answer {
    fn push(&mut self, agent: &str, text: &str) {
        if self.speaker.as_deref().is_some_and(|last| last != agent) && !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        if self.speaker.as_deref() != Some(agent) {
            self.speaker = Some(agent.to_owned());
        }
        self.text.push_str(text);
    }
}

/// How long the person behind an MCP client has to answer an approval.
pub(crate) const ELICITATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// A call's approvals: asked through elicitation when the client declared it can answer one
/// (in form mode), else refused with an `approval_required` error result (docs/approvals.md).
fn approvals_for(context: &RequestContext<RoleServer>) -> OnApproval {
    let can_ask = context.peer.peer_info().is_some_and(|info| {
        // An empty `elicitation: {}` means form mode (the specification's default).
        info.capabilities.elicitation.as_ref().is_some_and(|e| e.form.is_some() || e.url.is_none())
    });
    match can_ask {
        true => OnApproval::Ask(Arc::new(Elicitation {
            peer: context.peer.clone(),
            timeout: ELICITATION_TIMEOUT,
        })),
        false => OnApproval::Refuse,
    }
}

/// Asks an MCP client's user to approve a call, with an elicitation form: `approve` (yes or no)
/// and an optional `reason`.
struct Elicitation {
    peer: rmcp::Peer<RoleServer>,
    timeout: std::time::Duration,
}

#[async_trait::async_trait]
impl crate::approval::Approver for Elicitation {
    async fn decide(&self, interrupt: &crate::event::Interrupt) -> Option<crate::approval::Decision> {
        use crate::approval::Decision;
        use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};

        let schema =
            ElicitationSchema::builder().required_bool("approve").optional_string("reason").build().ok()?;
        let message = format!(
            "{} wants to call {} with {}. {} Approve?",
            interrupt.agent, interrupt.tool, interrupt.arguments, interrupt.reason
        );
        let params =
            ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema };
        let answer = match self.peer.create_elicitation_with_timeout(params, Some(self.timeout)).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::info!(tool = %interrupt.tool, error = %e, "the approval could not be asked; refused");
                return None;
            }
        };
        let content = answer.content.unwrap_or_default();
        let reason = content.get("reason").and_then(Value::as_str).map(str::to_owned);
        Some(match answer.action {
            ElicitationAction::Accept if content.get("approve") == Some(&Value::Bool(true)) => {
                Decision::Approve { arguments: None }
            }
            ElicitationAction::Accept | ElicitationAction::Decline => Decision::Reject { message: reason },
            // Cancelled, or an action this version does not know: not approved.
            _ => Decision::Reject { message: Some("the person cancelled the request".into()) },
        })
    }
}

impl ServerHandler for AgentsServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool is a Baton agent: pass what you want in `text`; the answer is its reply.",
            )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = input_schema();
        let tools = self
            .agents
            .iter()
            .map(|a| rmcp::model::Tool::new(a.name().to_owned(), a.description.clone(), schema.clone()))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.run(params, context).await.map(CallToolResponse::from)
    }
}

/// Serves `agents` over this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(agents: Vec<McpAgent>, turns: Turns) -> Result<(), McpError> {
    let running = AgentsServer::new(agents, turns)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Serve(e.to_string()))?;
    running.waiting().await.map_err(|e| McpError::Serve(e.to_string()))?;
    Ok(())
}

/// The streamable HTTP endpoint of `agents` at `/mcp`, and the switch that ends its open
/// sessions (call it on shutdown, or open event streams keep the server alive).
pub(crate) fn http_router(
    agents: Vec<McpAgent>,
    turns: Turns,
) -> (axum::Router, impl FnOnce() + Send + 'static) {
    let server = AgentsServer::new(agents, turns);
    let config = StreamableHttpServerConfig::default();
    let stop = config.cancellation_token.clone();
    let service =
        StreamableHttpService::new(move || Ok(server.clone()), LocalSessionManager::default().into(), config);
    (axum::Router::new().nest_service("/mcp", service), move || stop.cancel())
}

/// Serves `agents` over streamable HTTP at `/mcp` on `listener` until `shutdown` completes.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    agents: Vec<McpAgent>,
    turns: Turns,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), McpError> {
    let (router, stop) = http_router(agents, turns);
    // `TCP_NODELAY`, as for the chat endpoint: progress notifications are small frames.
    let listener = axum::serve::ListenerExt::tap_io(listener, |s| {
        let _ = s.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop();
        })
        .await
        .map_err(|e| McpError::Serve(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::Answer;

    #[test]
    fn each_speakers_text_is_a_paragraph_of_its_own() {
        let mut answer = Answer::default();
        for (agent, text) in [
            ("shopping[1]", "Here are "),
            ("shopping[1]", "3 offers."),
            ("orchestrator", "Your points "),
            ("orchestrator", "are back."),
            ("support[1]", "See help/missing-points."),
        ] {
            answer.push(agent, text);
        }
        assert_eq!(answer.text, "Here are 3 offers.\n\nYour points are back.\n\nSee help/missing-points.");
        let mut one = Answer::default();
        one.push("orchestrator", "Hi");
        one.push("orchestrator", " there");
        assert_eq!(one.text, "Hi there", "one speaker's deltas run together");
    }
}
