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
//! - [`agent`]: the [`agent::Agent`] trait (request → event stream) and a model-backed agent.
//! - [`orchestrator`]: one chat turn, from `thinking` to `completed`.
//! - [`mux`]: the live-slot merge of concurrent sub-agent streams.
//! - [`guard`]: routing guards (the smalltalk classifier of the fastpath allowlist).
//! - [`config`]: one typed configuration and the runtime built from it.
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
pub mod config;
pub mod event;
pub mod guard;
pub mod history;
pub mod http;
pub mod model;
pub mod mux;
pub mod orchestrator;
pub mod store;
