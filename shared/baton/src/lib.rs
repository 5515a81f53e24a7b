//! Baton: a serverless agents-as-tools chat orchestrator.
//!
//! # A team's assistant with a Rust tool of its own
//! A team's crate, outside Baton's workspace (`examples/own-tool`): one [`tool::Tool`] added to
//! the backends, served by `serve` on a local address or as the Lambda chat function with
//! Baton's own wiring (`baton_aws::app::main`). Its configuration file names the tool in an
//! agent's `tools:`; `docs/build-your-own.md` goes from there to a deployment.
//!
//! ```rust,ignore
#![doc = include_str!("../../../examples/own-tool/src/main.rs")]
//! ```
//!
//! One orchestrator model turn decides which sub-agents to call, as ordinary tool calls; the
//! sub-agents run concurrently and the client sees one coherent stream of [`event::Event`]s.
//! This crate is the runtime and has no AWS dependency.
//!
//! # Layout
//! In the order a chat turn's data flows, top to bottom: a module uses modules below it, never
//! above (one adapter reaches up, a leaf: `store::backends` keeps the agents' response ids in
//! the store). `python3 scripts/import_circles.py shared/baton/src` finds no circle and no module
//! that uses one listed above it. A room (a folder) holds one file per job, none over 700 lines
//! of code; its files are named after each entry.
//!
//! The runtime names no agent of a deployment (`python3 scripts/check_wall.py shared/baton/src`
//! finds none outside the tests): a deployment's own tools and agent kinds come in through
//! [`wiring::Extension`] (the reference deployment is the `baton-reference` crate).
//! - [`http`]: the chat endpoint, shared by `serve` and the Lambda (room: `request`, the checks
//!   and JSON errors; `sse`, the SSE body; `messages`, a conversation read back a page at a time;
//!   `wire`, how a turn's events go out; `agui` and `ai_sdk`, the AG-UI and AI SDK endpoints, each
//!   a translation of the same events; `a2a`, the entry agent as an A2A agent: its card and the
//!   JSON-RPC endpoint).
//! - [`mcp_server`]: Baton's agents served as MCP tools (stdio and streamable HTTP), each call a
//!   turn started by [`turn::Turns`]: an edge, as `http` is.
//! - [`turn`]: a turn's whole life, and durable turns: [`turn::Turns::start`], the one place
//!   every turn starts (a repeated request joined, the busy gate, the resume claim, the run,
//!   the live registration, the log writer, the record); a turn's events numbered, kept in
//!   memory and logged in the store as they stream, a turn that runs on when its client leaves,
//!   resume and stop from any instance (room: `start`; `busy`, `on_busy`'s gate; `live`, the
//!   turns this process runs; `writer`, the log writer; `record`, the producer; `resume`,
//!   replay and follow).
//! - `web`: the browser chat page (`web/`), embedded and served at `GET /`.
//! - [`auth`]: who is calling: IAM principal, verified JWT, or the local header.
//! - [`wiring`]: the composition root: builds models, agents, tools, the routing policy and
//!   remote agents from a [`config::Config`], once, at start, with a deployment's
//!   [`wiring::Extension`]s (room: `extension`).
//! - [`orchestrator`]: one chat turn's run, started by [`turn::Turns`]: its span, the user message recorded, `thinking`, the entry agent's run, the reply recorded,
//!   `completed` (built here only, with the one status the client, metrics and trace see).
//! - [`history`]: records a turn: the user message before the model call, the reply before
//!   `completed`, `partial` when the client leaves.
//! - [`config`]: one typed configuration (the runtime's defaults, a deployment's file over them),
//!   parsed and validated with line-numbered errors (room: `agents`, the `agents:` list). It
//!   builds nothing.
//! - [`routing`]: the routing policy an entry agent's first model step can carry, read top to
//!   bottom (room: `policy`: model pass, plan, failsafe, guards, release; `plan`; `reask`;
//!   `preamble`; `guard`, the routing guards as pure functions returning their repairs, also
//!   re-exported as [`guard`]); the routing tools `ask_<agent>`.
//! - [`agent_tool`]: any agent as a tool of another (`agent__<Name>`, or a routing tool), with
//!   schemas, output modes and answers the user reads as is (room: its loop tests).
//! - [`remote`]: agents in another process: NDJSON over a transport, and the serving side.
//! - [`a2a`]: A2A v1.0 both ways: the protocol's objects, the card, a turn as a task, and a
//!   remote A2A agent as an agent (room: `types`, `card`, `task`, `client`).
//! - [`mcp`]: Model Context Protocol: MCP servers' tools for agents.
//! - [`mini`]: mini-agents: an agent's opt-in fan-out of a multi-part request into parallel
//!   focused tool loops (decomposer, minis, aggregator), a `agent::ForkPolicy`.
//! - [`rating`]: a user's thumbs up or down on a stored answer, sent to where the answer came from.
//! - [`agent`]: the [`agent::Agent`] trait (room: `llm`, the tool loop [`agent::LlmAgent`] with
//!   its `agent::StepPolicy` and `agent::ForkPolicy` hooks; `step`, a step's decision and
//!   `agent::model_events`, the one adapter from a model's deltas to events; `batch`, a step's
//!   calls at once; `instance`, `agent::start_child`, the one place a child instance starts;
//!   `chains`, response ids per agent).
//! - [`tool`]: the [`tool::Tool`] trait (`call`, and `start` for tools whose events stream)
//!   (room: `registry`, the tools of one agent and a call's checks; `schema`, JSON Schema).
//! - [`approval`]: a person's approval of a tool call (docs/approvals.md): a turn pauses at any
//!   depth, its paused tree is stored, and the next request resumes it on any instance (room:
//!   `record`, the stored record, its checks and claim, each write conditional).
//! - [`conversation`]: what an instance knows of the conversation: history, the previous turn.
//! - [`store`]: the store's traits by concern ([`store::Conversations`]: episodes, messages,
//!   vendor state; [`store::Leases`]; [`store::TurnLog`]; [`store::ApprovalRecords`]) and
//!   [`store::Store`], all four (room: `traits`; `embedded`, the file-backed store; `item`, the
//!   item layout both stores share; `lease`; `turn_log`, a turn's event log and record;
//!   `backends`).
//! - [`model`]: the [`model::ChatModel`] trait (room: `openai`, Chat Completions: config,
//!   request, chunks, transport; `responses`; `offline`, the offline model; `script`, a team's
//!   model script; `scripted`, the scripted model, its HTTP server only with the `test-servers`
//!   feature).
//! - [`retrieval`]: BM25 full-text ranking over small corpora (articles, product lists).
//! - [`telemetry`]: cost per agent from a price table, and the CloudWatch EMF line of a turn.
//! - [`mux`]: the live-slot merge of concurrent agents' event streams.
//! - [`text`]: words, content words and smalltalk: how the rules read a message.
//! - [`image`]: an image attached to a message: its kind, description and URL, checked.
//! - [`item`]: "events, then a result": the one item type of streams that end with a value.
//! - [`event`]: the wire protocol: the event enum (room: `usage`, tokens, dollars and statuses;
//!   `wire`, SSE and NDJSON encoding and decoding).
//! - [`outbound`]: the outgoing HTTP client of streamed answers (model servers, vendor APIs):
//!   reqwest for `https` and HTTP/2, and cleartext HTTP/1.1 driven inside the body's own poll
//!   (room: `cleartext`; `sign`, a request signed before it is sent: [`outbound::RequestSigner`]).
//! - [`redact`]: vendor text made safe for a log line: an excerpt with secrets and tokens masked.
//! - [`bounded`]: bounded waits for a stream's items (idle, or a deadline), one timer per stream;
//!   `bounded::after` (and `bounded::Deadline::after`), the one way a deadline is computed
//!   from a limit.
//! - [`gate`]: a stream polled again only once it has woken, so a wake-up of one part of a turn
//!   costs no poll of the rest.
//!
//! # Public API
//! A deployment's own crate needs only the root's re-exports ([`Tool`], [`Backends`],
//! [`Config`], [`Turns`], …; the example above uses nothing else). Beyond them an item is `pub`
//! only if another crate of the workspace names it (the AWS adapters, the reference deployment,
//! the evaluation and the integration tests); everything else is `pub(crate)`, and
//! `unreachable_pub` (a workspace lint, warnings are errors in CI) keeps it so: an item no other
//! crate can reach may not say `pub`.
//!
//! # Errors
//! Errors a caller branches on are hand-written enums ([`model::ModelError`],
//! `http::ApiError`, [`config::ConfigError`], [`store::StoreError`]). Inside a turn, nothing is an `Err`: failures are
//! in-band `error` events and the turn still ends with `completed`.

// What a deployment's own crate uses, at the root (`examples/own-tool` uses nothing else).
pub use agent::{Agent, AgentRequest, LlmAgent};
pub use async_trait::async_trait;
pub use config::Config;
pub use event::Event;
pub use history::History;
pub use http::ChatService;
pub use orchestrator::Orchestrator;
pub use tool::{Tool, ToolContext, ToolError};
pub use turn::Turns;
pub use wiring::{Backends, Extension};

pub mod a2a;
pub mod agent;
pub mod agent_tool;
pub mod approval;
pub mod auth;
pub mod bounded;
pub mod config;
pub mod conversation;
pub mod event;
pub mod gate;
pub use routing::guard;
pub mod history;
pub mod http;
pub mod image;
pub mod item;
pub mod mcp;
pub mod mcp_server;
pub mod mini;
pub mod model;
pub mod mux;
pub mod orchestrator;
pub mod outbound;
pub mod rating;
pub mod redact;
pub mod remote;
pub mod retrieval;
pub mod routing;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tool;
pub mod turn;
pub(crate) mod web;
pub mod wiring;
