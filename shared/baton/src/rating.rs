//! Ratings of stored answers: a user's thumbs up or down on an agent's answer, sent to where the
//! answer came from (for the reference support agent, Forethought's CSAT endpoint).
//!
//! An agent whose answers can be rated reports a `feedback_ref` in its `answer_meta` event;
//! history stores it with the agent's message. `POST /chat/{episode_id}/csat` with
//! `{"turn_id"?: str, "rating": "up" | "down"}` finds the rated turn's answer that has one (the
//! latest such answer when no turn is named) and hands the reference to the [`RatingSink`]
//! registered for the answer's agent name. A turn with no such answer is a 404
//! `no_rateable_answer`; a vendor that refuses or fails is a 502 `rating_not_sent`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use futures::future::BoxFuture;
use serde::Deserialize;

use crate::agent::BoxError;
use crate::event::agent_name;
use crate::http::ApiError;
use crate::store::{EpisodeKey, Role, Store};

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
pub trait RatingSink: Send + Sync {
    /// Sends `rating` of the answer whose `answer_meta` carried `feedback_ref`.
    fn rate<'a>(&'a self, feedback_ref: &'a str, rating: Rating) -> BoxFuture<'a, Result<(), BoxError>>;
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RatingBody {
    turn_id: Option<String>,
    rating: Rating,
}

/// Rates an answer of `key`'s episode as `body` asks; the JSON answer, or the error to send.
pub async fn rate(
    store: &dyn Store,
    sinks: &RatingSinks,
    key: &EpisodeKey,
    body: &[u8],
) -> Result<serde_json::Value, ApiError> {
    let body: RatingBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_rating",
            format!("the body must be {{\"turn_id\"?: string, \"rating\": \"up\" | \"down\"}}: {e}"),
        )
    })?;
    let messages = store.recent_messages(key, SEARCHED_MESSAGES).await?;
    let rateable = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant && body.turn_id.as_ref().is_none_or(|t| *t == m.turn_id));
    let found = rateable.filter_map(|m| {
        let reference = m.meta.as_ref()?.get(FEEDBACK_REF)?.as_str()?;
        let sink = sinks.sinks.get(agent_name(&m.agent))?;
        Some((m, reference, sink))
    });
    let Some((message, reference, sink)) = found.into_iter().next() else {
        let which = body.turn_id.map_or("this episode".to_owned(), |t| format!("turn `{t}`"));
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_rateable_answer",
            format!("{which} has no answer that can be rated"),
        ));
    };
    sink.rate(reference, body.rating).await.map_err(|e| {
        tracing::warn!(agent = %message.agent, error = %e, "a rating was not sent");
        ApiError::new(StatusCode::BAD_GATEWAY, "rating_not_sent", format!("the rating was not sent: {e}"))
    })?;
    Ok(serde_json::json!({"status": "sent", "turn_id": message.turn_id, "agent": message.agent}))
}
