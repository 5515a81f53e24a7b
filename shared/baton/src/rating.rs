//! Ratings of stored answers: a user's thumbs up or down on an agent's answer, sent to where the
//! answer came from (for an agent that answers through a vendor, the vendor's rating endpoint).
//!
//! An agent whose answers can be rated reports a `feedback_ref` in its `answer_meta` event;
//! history stores it with the agent's message. `POST /chat/{episode_id}/csat` with
//! `{"turn_id"?: str, "rating": "up" | "down"}` finds the rated turn's answer that has one (the
//! latest such answer when no turn is named) and hands the reference to the [`RatingSink`]
//! registered for the answer's agent name. A turn with no such answer is a 404
//! `no_rateable_answer`; a vendor that refuses or fails is a 502 `rating_not_sent`.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::agent::BoxError;
use crate::event::agent_name;
use crate::store::{Conversations, EpisodeKey, Role, StoreError};

/// The `answer_meta` key an agent puts the reference of a rateable answer under.
pub const FEEDBACK_REF: &str = "feedback_ref";

/// How many recent messages are searched for the rated turn.
const SEARCHED_MESSAGES: usize = 200;

/// A user's rating of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    /// Thumbs up.
    Up,
    /// Thumbs down.
    Down,
}

/// Where ratings of one agent's answers go.
#[async_trait::async_trait]
pub trait RatingSink: Send + Sync {
    /// Sends `rating` of the answer whose `answer_meta` carried `feedback_ref`.
    async fn rate(&self, feedback_ref: &str, rating: Rating) -> Result<(), BoxError>;
}

/// The rating sinks of a deployment, by agent name.
#[derive(Clone, Default)]
pub struct RatingSinks {
    sinks: HashMap<String, Arc<dyn RatingSink>>,
}

impl RatingSinks {
    /// Ratings of `agent`'s answers go to `sink`.
    pub fn insert(&mut self, agent: impl Into<String>, sink: Arc<dyn RatingSink>) {
        self.sinks.insert(agent.into(), sink);
    }

    /// Whether no agent's answers can be rated.
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }
}

/// What a rating request asks: `{"turn_id"?: str, "rating": "up" | "down"}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RatingRequest {
    /// The rated turn; the latest rateable answer of the episode when absent.
    pub turn_id: Option<String>,
    /// The rating.
    pub rating: Rating,
}

/// The answer a rating was sent for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Rated {
    /// Always `sent`.
    pub status: &'static str,
    /// Its turn.
    pub turn_id: String,
    /// Its agent instance.
    pub agent: String,
}

/// Why a rating was not sent. The HTTP edge answers 404 `no_rateable_answer`, 502
/// `rating_not_sent`, or the store's error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RatingError {
    /// The turn (or the episode) has no answer that can be rated.
    #[error("{0} has no answer that can be rated")]
    NoRateableAnswer(String),
    /// The agent's vendor refused or failed.
    #[error("the rating was not sent: {0}")]
    NotSent(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Sends `request`'s rating of an answer of `key`'s episode to its agent's sink.
pub(crate) async fn rate(
    store: &dyn Conversations,
    sinks: &RatingSinks,
    key: &EpisodeKey,
    request: RatingRequest,
) -> Result<Rated, RatingError> {
    let messages = store.recent_messages(key, SEARCHED_MESSAGES).await?;
    let rateable = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant && request.turn_id.as_ref().is_none_or(|t| *t == m.turn_id));
    let found = rateable.filter_map(|m| {
        let reference = m.meta.as_ref()?.get(FEEDBACK_REF)?.as_str()?;
        let sink = sinks.sinks.get(agent_name(&m.agent))?;
        Some((m, reference, sink))
    });
    let Some((message, reference, sink)) = found.into_iter().next() else {
        let which = request.turn_id.map_or("this episode".to_owned(), |t| format!("turn `{t}`"));
        return Err(RatingError::NoRateableAnswer(which));
    };
    sink.rate(reference, request.rating).await.map_err(|e| {
        tracing::warn!(agent = %message.agent, error = %e, "a rating was not sent");
        RatingError::NotSent(e.to_string())
    })?;
    Ok(Rated { status: "sent", turn_id: message.turn_id.clone(), agent: message.agent.clone() })
}
