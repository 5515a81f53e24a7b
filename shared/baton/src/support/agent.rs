//! The Forethought support agent: conversation continuity per episode, `prior_context`, and the
//! answer streamed as `text` events.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value};

use super::SUPPORT_APOLOGY;
use super::forethought::{ForethoughtClient, PriorContextMode, SolveRequest, SolveStream, VendorError};
use super::sessions::{Clock, SupportConversation, SupportSessions, SupportTurn};
use crate::agent::{Agent, AgentRequest, with_prior_context};
use crate::event::Event;
use crate::event::EventStream;

/// Support through the Forethought Solve API.
///
/// Continuity (DESIGN.md §7): the episode's stored conversation is continued (`PUT`) while it is
/// younger than the configured window (55 minutes); an older one, or one Forethought no longer
/// knows (404), is replaced by a new conversation (`POST`) whose query is prefixed with the
/// episode's last support turns (6), and the new id is stored. The answer's conversation id is
/// reported as a `response_id` event `ft_<conversation_id>`.
pub struct ForethoughtAgent {
    client: ForethoughtClient,
    sessions: Arc<dyn SupportSessions>,
    clock: Arc<dyn Clock>,
}

impl ForethoughtAgent {
    /// The agent over `client`, remembering conversations in `sessions`, with time from `clock`.
    pub fn new(
        client: ForethoughtClient,
        sessions: Arc<dyn SupportSessions>,
        clock: Arc<dyn Clock>,
    ) -> ForethoughtAgent {
        ForethoughtAgent { client, sessions, clock }
    }
}

/// The first query of a replacement conversation: the earlier turns, then the question.
pub fn prefixed_query(turns: &[SupportTurn], query: &str) -> String {
    if turns.is_empty() {
        return query.to_owned();
    }
    let mut text = String::from("Earlier in this conversation:\n");
    for turn in turns {
        text.push_str(&format!("User: {}\nSupport: {}\n", turn.query.trim(), turn.answer.trim()));
    }
    text.push_str(&format!("\nCurrent question: {query}"));
    text
}

impl Agent for ForethoughtAgent {
    fn name(&self) -> &str {
        "support"
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let client = self.client.clone();
        let sessions = self.sessions.clone();
        let clock = self.clock.clone();
        Box::pin(async_stream::stream! {
            let config = client.config().clone();
            let (user, episode) = (request.user_id.clone(), request.episode_id.clone());
            let stored = sessions.conversation(&user, &episode).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the support conversation; starting a new one");
                None
            });
            let now = clock.now();
            let young = |c: &SupportConversation| {
                now.duration_since(c.last_used_at).unwrap_or(Duration::ZERO) < config.continue_window
            };
            // An expired conversation asks for the history prefix; a first conversation does not.
            let expired = stored.as_ref().is_some_and(|c| !young(c));
            let fresh = stored.filter(young);
            let prefix_turns = config.prefix_turns;

            let mut variables = Map::new();
            let query = match (&config.prior_context, request.prior_context.clone()) {
                (PriorContextMode::ContextVariable(name), Some(ctx)) if !ctx.trim().is_empty() => {
                    variables.insert(name.clone(), Value::String(ctx));
                    request.query.clone()
                }
                (_, ctx) => with_prior_context(request.query.clone(), ctx),
            };
            let solve = |query: String| SolveRequest {
                query, user_id: user.clone(), context_variables: variables.clone(),
            };
            let history_prefixed = |query: &str| {
                let sessions = sessions.clone();
                let (user, episode, query) = (user.clone(), episode.clone(), query.to_owned());
                async move {
                    let turns = sessions.recent_turns(&user, &episode, prefix_turns).await.unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "cannot read earlier support turns");
                        Vec::new()
                    });
                    prefixed_query(&turns, &query)
                }
            };

            let mut conversation_id = fresh.as_ref().map(|c| c.conversation_id.clone());
            let mut pieces: SolveStream = match &conversation_id {
                Some(id) => client.continue_conversation(id, &solve(query.clone())),
                None if expired => client.start(&solve(history_prefixed(&query).await)),
                None => client.start(&solve(query.clone())),
            };
            let mut answer = String::new();
            let mut reported_id = false;
            let mut retried_start = false;
            while let Some(piece) = pieces.next().await {
                match piece {
                    Ok(piece) => {
                        if let Some(id) = piece.conversation_id {
                            conversation_id = Some(id);
                        }
                        if !reported_id {
                            if let Some(id) = &conversation_id {
                                reported_id = true;
                                yield Event::ResponseId { agent: instance.clone(), id: format!("ft_{id}") };
                            }
                        }
                        if !piece.text.is_empty() {
                            answer.push_str(&piece.text);
                            yield Event::text(instance.clone(), piece.text);
                        }
                    }
                    Err(e) if e.is_conversation_gone() && fresh.is_some() && answer.is_empty() && !retried_start => {
                        tracing::info!("the Forethought conversation is gone; starting a new one");
                        retried_start = true;
                        conversation_id = None;
                        pieces = client.start(&solve(history_prefixed(&query).await));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Forethought call failed");
                        yield vendor_error(&instance, &e);
                        yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                        return;
                    }
                }
            }
            let Some(id) = conversation_id else {
                yield vendor_error(&instance, &VendorError::Decode("the answer named no conversation_id".into()));
                yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                return;
            };
            let saved = SupportConversation { conversation_id: id, last_used_at: clock.now() };
            if let Err(e) = sessions.save_conversation(&user, &episode, saved).await {
                tracing::warn!(error = %e, "cannot store the support conversation");
            }
            let turn = SupportTurn { query: request.query, answer };
            if let Err(e) = sessions.record_turn(&user, &episode, turn).await {
                tracing::warn!(error = %e, "cannot record the support turn");
            }
        })
    }
}

fn vendor_error(instance: &str, e: &VendorError) -> Event {
    Event::error(instance, e.code(), e.to_string(), e.is_retryable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_lists_turns_oldest_first_then_the_question() {
        let turns = vec![
            SupportTurn { query: "q1".into(), answer: "a1".into() },
            SupportTurn { query: "q2".into(), answer: "a2".into() },
        ];
        assert_eq!(
            prefixed_query(&turns, "now?"),
            "Earlier in this conversation:\nUser: q1\nSupport: a1\nUser: q2\nSupport: a2\n\nCurrent question: now?"
        );
        assert_eq!(prefixed_query(&[], "now?"), "now?");
    }
}
