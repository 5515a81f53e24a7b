//! A2A v1.0 (the Agent2Agent protocol), both ways, over its JSON-RPC binding (docs/a2a.md):
//! Baton's entry agent served as an A2A agent (the routes are `http`'s: its card at
//! `/.well-known/agent-card.json`, JSON-RPC at `/a2a`; each agent of `a2a: {agents: [...]}` at
//! `/a2a/{name}`, its card at `/a2a/{name}/.well-known/agent-card.json`), and a remote A2A agent as a Baton agent
//! ([`A2aAgent`], `remote: {a2a: "https://…"}` in the configuration).
//!
//! Why a small typed module on `serde` and not the official Rust SDK (`a2aproject/a2a-rs`, the
//! `a2a-lf`, `a2a-client-lf` and `a2a-server-lf` crates): those crates are pre-1.0 (0.2–0.4) and
//! release often; they bring gRPC and protobuf code generation (`tonic`, `prost`, `pbjson`),
//! `chrono` and a second `reqwest` major; and their server keeps tasks in its own task store,
//! while Baton's tasks are its turns, already numbered, logged and cancellable in its own store.
//! The JSON-RPC binding is a handful of small JSON objects: typed here ([`types`]), checked
//! against the official Python SDK (`a2a-sdk`) as a client of `serve` and as a server behind
//! [`A2aAgent`] (`tests/tests/a2a.rs`).
//!
//! # Layout
//! - [`types`]: the protocol's objects in their JSON form, and the JSON-RPC envelope;
//! - `card`: the agent card Baton serves;
//! - [`task`]: a turn's events as an A2A task (`TaskView`): the mapping of events and ids;
//! - `client`: a remote A2A agent as an [`crate::agent::Agent`];
//! - `auth`: how its calls are authenticated (a bearer token, or a [`RequestSigner`]).

pub(crate) mod auth;
pub(crate) mod card;
pub(crate) mod client;
pub mod task;
pub mod types;

pub use auth::{BearerToken, RemoteAuth, RequestSigner, SigningScope};
pub use card::{CardSource, RPC_PATH, Security, agent_path};
pub use client::{A2aAgent, A2aLimits};
pub(crate) use task::TaskView;
