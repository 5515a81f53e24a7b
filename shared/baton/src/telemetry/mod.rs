//! What Baton tells its operators about each turn, beyond the events a client sees.
//!
//! - `cost`: the price table and the cost of each `usage` event, exact in picodollars.
//! - [`emf`]: one CloudWatch Embedded Metric Format line per turn (duration, first byte and
//!   first text, tokens and cost per agent, status, errors).
//! - [`trace`]: OpenTelemetry spans (GenAI conventions) exported over OTLP/HTTP when an endpoint
//!   is configured; W3C `traceparent` in and out; the X-Ray trace of a Lambda invocation.
//!
//! It sits just above [`crate::event`]: it reads events and knows nothing of agents or models
//! (the spans are opened where the work is: the turn, an agent instance, a tool call, a model
//! call).

pub(crate) mod cost;
pub mod emf;
pub mod trace;

use std::time::Duration;

use crate::event::{AgentUsage, Status};

/// The figures of one finished turn, as the orchestrator saw them.
#[derive(Debug, Clone, Copy)]
pub struct TurnReport<'a> {
    /// The conversation.
    pub episode_id: &'a str,
    /// The turn.
    pub turn_id: &'a str,
    /// How it ended.
    pub status: Status,
    /// Request received → `completed`.
    pub duration: Duration,
    /// Request received → `thinking` handed to the client.
    pub first_byte: Duration,
    /// Request received → the first user-visible text, if there was any.
    pub first_text: Option<Duration>,
    /// In-band `error` events.
    pub errors: u32,
    /// Repairs the routing rules made to the model's routing (guards, failsafe re-ask).
    pub repairs: u32,
    /// Tokens and cost per agent name and model (`completed`'s `usage`).
    pub usage: &'a [AgentUsage],
}

/// Receives each turn's figures once `completed` is built (the EMF line in Lambda).
pub trait TurnReporter: Send + Sync {
    /// Takes one turn's figures. Called on the turn's task: keep it short and never block on
    /// the network.
    fn report(&self, turn: &TurnReport<'_>);
}
