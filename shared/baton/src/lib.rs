//! Baton: a serverless agents-as-tools chat orchestrator.
//!
//! One orchestrator model turn decides which sub-agents to call, as ordinary tool calls; the
//! sub-agents run concurrently and the client sees one coherent stream of [`event::Event`]s.
//! This crate is the runtime and has no AWS dependency.
//!
//! # Layout
//! - [`event`]: the wire protocol: the event enum, SSE and NDJSON encoding and decoding.
//! - [`model`]: the [`model::ChatModel`] trait; OpenAI Chat Completions, the offline model, and
//!   scripted models for tests.
//! - [`auth`]: who is calling: IAM principal, verified JWT, or the local header.
//! - [`tool`]: the [`tool::Tool`] trait, a registry, and JSON Schema validation of arguments.
//! - [`retrieval`]: BM25 full-text ranking over small corpora (help articles, offers).
//! - [`agent`]: the [`agent::Agent`] trait (request → event stream), a model-backed agent and
//!   the tool loop.
//! - [`agent_tool`]: any agent as a tool of another (`agent__<Name>`), with instances, schemas,
//!   output modes and a nesting limit.
//! - [`support`]: the support sub-agent: Forethought (with continuity) or the offline help center.
//! - [`shopping`]: the shopping sub-agent: catalog, tools, tool loop.
//! - [`orchestrator`]: one chat turn, from `thinking` to `completed`.
//! - [`routing`]: which sub-agents a turn calls: model pass, failsafe re-ask, guards.
//! - [`mux`]: the live-slot merge of concurrent sub-agent streams.
//! - [`guard`]: routing guards: echo follow-up, fastpath allowlist, duplicates, overlap,
//!   verbatim queries, prior context.
//! - [`team`]: agents from configuration: validation with line numbers, the agent graph.
//! - [`config`]: one typed configuration (`config/baton.yaml` embedded as defaults) and the
//!   runtime built from it.
//! - [`eval`]: the routing scenario suite, its scoring, and fault injection.
//! - [`remote`]: agents in another process: NDJSON over a transport, and the serving side.
//! - [`mcp`]: Model Context Protocol: MCP servers' tools for agents, and agents served over MCP.
//! - [`http`]: the chat endpoint (validation, SSE body), shared by `serve` and the Lambda.
//! - [`store`]: the [`store::Store`] trait (episodes, messages, vendor state) and the embedded,
//!   file-backed store.
//! - [`history`]: records a turn: the user message before the model call, the reply after it,
//!   `partial` when the client leaves.
//!
//! # Errors
//! Errors a caller branches on are hand-written enums ([`model::ModelError`],
//! [`http::ApiError`], [`config::ConfigError`], [`store::StoreError`]). Inside a turn, nothing is an `Err`: failures are
//! in-band `error` events and the turn still ends with `completed`.

pub mod agent;
pub mod agent_tool;
pub mod auth;
pub mod config;
pub mod eval;
pub mod event;
pub mod guard;
pub mod history;
pub mod http;
pub mod mcp;
pub mod model;
pub mod mux;
pub mod orchestrator;
pub mod remote;
pub mod retrieval;
pub mod routing;
pub mod shopping;
pub mod store;
pub mod support;
pub mod team;
pub mod tool;
