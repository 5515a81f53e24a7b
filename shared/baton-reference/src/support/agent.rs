//! The Forethought support agent: conversation continuity per episode, `prior_context`, the
//! answer streamed as `text` events (one per widget component), prompts offered as `choices` and
//! answered on the same conversation, the outcome kept as `answer_meta` and `handoff`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value};

use super::forethought::{ForethoughtClient, PriorContextMode, SolveRequest, SolveStream, VendorError};
use super::sessions::{Clock, SupportConversation, SupportSessions, SupportTurn};
use super::widget::{Outcome, Prompt, answer_prompt};
use super::{SUPPORT_APOLOGY, SUPPORT_EMPTY};
use baton::agent::{Agent, AgentRequest, with_prior_context};
use baton::event::EventStream;
use baton::event::{ChoiceField, ChoiceOption, Choices, Event, agent_name};
use baton::rating::FEEDBACK_REF;
use baton::store::lease::LeaseError;

/// The pause before the one retry of a call Forethought refused as busy.
const BUSY_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Support through the Forethought Solve API.
///
/// Continuity (docs/agents.md, "Support: Forethought, or the offline help center"): the episode's
/// stored conversation is continued (`PUT`) while it is younger than the configured window (55
/// minutes); an older one, or one Forethought no longer knows (404), is replaced by a new
/// conversation (`POST`) whose query is prefixed with the episode's last support turns (6), and
/// the new id is stored. The answer's conversation id is reported as a `response_id` event
/// `ft_<conversation_id>`.
///
/// Prompts: a `button` or `form` component is shown as text (numbered options, listed fields)
/// and sent as a `choices` event; the prompt is stored with the conversation. When the next
/// query answers it ([`answer_prompt`]), the same conversation is continued with the answer in
/// `context_variables` under the component's `output_variable`; any other query is an ordinary
/// one. Every answer ends with `answer_meta` (`is_solved`, `should_escalate`, `intent`,
/// `workflow_id` where Forethought sent them, and the conversation id as the [`FEEDBACK_REF`]
/// a rating goes to), and
/// `should_escalate: true` adds a `handoff` event. An answer with no text and no prompt is the
/// in-band error `support_empty_answer`, never silence.
///
/// One request per conversation: each call holds the episode's conversation
/// ([`SupportSessions::hold_conversation`], a store lease across processes) from reading the
/// stored conversation to saving it, so two calls on one episode (two support intents in one
/// message, two tabs, two Lambda instances) queue on the same conversation, each seeing what the
/// one before stored. A call that waits longer than `busy_wait` ends in the in-band error
/// `support_busy`; one that Forethought still refuses as busy is retried once.
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
            let agent = agent_name(&instance).to_owned();
            let held = sessions.hold_conversation(&user, &episode, &agent, config.busy_hold, config.busy_wait).await;
            let lease = match held {
                Ok(lease) => Some(lease),
                Err(e @ LeaseError::Busy { .. }) => {
                    tracing::warn!(error = %e, "the support conversation stayed busy");
                    yield Event::error(
                        instance.clone(),
                        "support_busy",
                        format!("another request on this conversation did not finish within {} s", config.busy_wait.as_secs()),
                        true,
                    );
                    yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot hold the support conversation; calling without");
                    None
                }
            };
            let stored = sessions.conversation(&user, &episode, &agent).await.unwrap_or_else(|e| {
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

            // A reply to the prompt the conversation's last answer left open answers it there.
            let picked = fresh.as_ref().and_then(|c| c.pending.as_ref()).and_then(|p| answer_prompt(p, &request.query));
            let mut variables = Map::new();
            let query = match (picked, &config.prior_context, request.prior_context.clone()) {
                (Some((answer, query)), _, _) => {
                    variables.extend(answer);
                    query
                }
                (None, PriorContextMode::ContextVariable(name), Some(ctx)) if !ctx.trim().is_empty() => {
                    variables.insert(name.clone(), Value::String(ctx));
                    request.query.clone()
                }
                (None, _, ctx) => with_prior_context(request.query.clone(), ctx),
            };
            let solve = |query: String| SolveRequest {
                query, user_id: user.clone(), context_variables: variables.clone(),
            };
            let history_prefixed = |query: &str| {
                let sessions = sessions.clone();
                let (user, episode, agent, query) = (user.clone(), episode.clone(), agent.clone(), query.to_owned());
                async move {
                    let turns = sessions.recent_turns(&user, &episode, &agent, prefix_turns).await.unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "cannot read earlier support turns");
                        Vec::new()
                    });
                    prefixed_query(&turns, &query)
                }
            };

            let mut conversation_id = fresh.as_ref().map(|c| c.conversation_id.clone());
            let mut sent = match &conversation_id {
                None if expired => history_prefixed(&query).await,
                _ => query.clone(),
            };
            let mut pieces: SolveStream = match &conversation_id {
                Some(id) => client.continue_conversation(id, &solve(sent.clone())),
                None => client.start(&solve(sent.clone())),
            };
            let mut answer = String::new();
            let mut prompt: Option<Prompt> = None;
            let mut outcome: Option<Outcome> = None;
            let mut reported_id = false;
            let mut retried_start = false;
            let mut retried_busy = false;
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
                        if piece.outcome.is_some() {
                            outcome = piece.outcome;
                        }
                        if !piece.text.is_empty() {
                            let text = if piece.block && !answer.is_empty() {
                                format!("\n\n{}", piece.text)
                            } else {
                                piece.text
                            };
                            answer.push_str(&text);
                            yield Event::text(instance.clone(), text);
                        }
                        if let Some(p) = piece.prompt {
                            yield choices_event(&instance, &p);
                            prompt = Some(p);
                        }
                    }
                    Err(e) if e.is_conversation_gone() && fresh.is_some() && answer.is_empty() && !retried_start => {
                        tracing::info!("the Forethought conversation is gone; starting a new one");
                        retried_start = true;
                        conversation_id = None;
                        sent = history_prefixed(&query).await;
                        pieces = client.start(&solve(sent.clone()));
                    }
                    Err(e) if e.is_conversation_busy() && answer.is_empty() && !retried_busy => {
                        tracing::info!("Forethought refused the call as busy; retrying once");
                        retried_busy = true;
                        tokio::time::sleep(BUSY_RETRY_PAUSE).await;
                        pieces = match &conversation_id {
                            Some(id) => client.continue_conversation(id, &solve(sent.clone())),
                            None => client.start(&solve(sent.clone())),
                        };
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
            if answer.trim().is_empty() && prompt.is_none() {
                tracing::warn!("Forethought's answer had no text Baton can show");
                yield Event::error(
                    instance.clone(),
                    "support_empty_answer",
                    "the support vendor's answer had no text or options to show",
                    false,
                );
                yield Event::text(instance.clone(), SUPPORT_EMPTY);
            }
            let outcome = outcome.unwrap_or_default();
            if outcome.should_escalate == Some(true) {
                yield Event::Handoff { agent: instance.clone(), reason: Some("should_escalate".into()) };
            }
            let mut meta = outcome.to_map();
            meta.insert(FEEDBACK_REF.into(), Value::String(id.clone()));
            yield Event::AnswerMeta { agent: instance.clone(), meta: Box::new(meta) };
            let saved = SupportConversation { conversation_id: id, last_used_at: clock.now(), pending: prompt };
            if let Err(e) = sessions.save_conversation(&user, &episode, &agent, saved).await {
                tracing::warn!(error = %e, "cannot store the support conversation");
            }
            if let Some(lease) = lease {
                lease.release().await;
            }
            let turn = SupportTurn { query: request.query, answer };
            if let Err(e) = sessions.record_turn(&user, &episode, &agent, turn).await {
                tracing::warn!(error = %e, "cannot record the support turn");
            }
        })
    }
}

/// The `choices` event of a prompt.
fn choices_event(instance: &str, prompt: &Prompt) -> Event {
    Event::Choices {
        agent: instance.to_owned(),
        choices: Box::new(Choices {
            prompt: prompt.text.clone(),
            options: prompt
                .options
                .iter()
                .map(|o| ChoiceOption { label: o.label.clone(), value: o.value.clone() })
                .collect(),
            fields: prompt
                .fields
                .iter()
                .map(|f| ChoiceField { name: f.output_variable.clone(), label: f.label.clone() })
                .collect(),
        }),
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
