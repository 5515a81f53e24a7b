//! AWS adapters for Baton.
//!
//! # Layout
//! Top to bottom: a module uses modules below it, never above
//! (`python3 scripts/import_circles.py shared/baton-aws/src` checks it).
//! - [`app`]: a function's composition root, the orchestrator binary's and a team's own: the
//!   endpoint's settings, the agents built over a deployment's backends ([`app::connect`]), the
//!   chat endpoint ([`app::service`]), and [`app::main`], a team's assistant served locally or
//!   as the Lambda function with the same wiring.
//! - [`lambda_edge`]: the chat endpoint as a Lambda function with response streaming: the same
//!   router as `serve`, the Lambda request context put into each request's extensions.
//! - [`startup`]: [`startup::Function`], the one start-up of the three functions: logs and
//!   traces, settings with their secrets, the store, the configuration.
//! - [`settings`]: [`settings::Settings`], the flags and environment variables every function
//!   reads (the orchestrator's CLI flattens them; Lambda reads them from the environment alone).
//! - [`agent_function`]: the Lambda handler of a remote agent (NDJSON out).
//! - `lambda_trace`: an invocation's X-Ray parent, and its spans flushed before its response
//!   ends.
//! - [`runtime`]: keeps a function's event loop alive across a failed Runtime API call.
//! - [`dynamodb`]: [`dynamodb::DynamoDbStore`], the production [`baton::store::Store`], one file
//!   per concern, and the one bounded way a query reads several pages.
//! - [`table`]: the DynamoDB table's definition (keys, billing, TTL), the one place it is written
//!   down in code, and [`table::create_table`], which tests and local setups use.
//! - `tool_sources`: the configuration's declared tools (docs/tools.md) with the AWS hooks
//!   they need; `tool_sources::SecretsManager`.
//! - [`reach`]: remote agents reached without running them (`check --connect`).
//! - [`lambda_tool`]: [`lambda_tool::LambdaTool`], a team's Lambda function as a tool.
//! - [`lambda_transport`]: remote agents over Lambda `InvokeWithResponseStream`.
//! - [`sigv4`]: [`sigv4::SigV4Signer`], SigV4 signing of the calls to remote A2A agents.
//! - [`secrets`]: Secrets Manager references resolved at init.
//! - `config_source`: a configuration named `s3://` or `ssm:` fetched at init, with the files
//!   beside it.
//! - `error`: how the AWS SDK's failures read as store errors.
//!
//! # Errors
//! Store calls return [`baton::store::StoreError`]: connection failures, timeouts, throttling and
//! 5xx answers are `Unavailable` (retryable); a lost optimistic lock is `Conflict`; an item of
//! unknown shape is `Corrupt` and names its key; anything else is `Failed`.

pub mod agent_function;
pub mod app;
pub(crate) mod config_source;
pub mod dynamodb;
mod error;
pub mod lambda_edge;
pub mod lambda_tool;
pub(crate) mod lambda_trace;
pub mod lambda_transport;
pub mod reach;
pub mod runtime;
pub mod secrets;
pub mod settings;
pub mod sigv4;
pub mod startup;
pub mod table;
pub(crate) mod tool_sources;

pub use dynamodb::DynamoDbStore;
