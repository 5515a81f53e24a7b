//! The Forethought support agent: conversation continuity per episode, `prior_context`, the
//! answer streamed as `text` events (one per widget component), prompts offered as `choices` and
//! answered on the same conversation, the outcome kept as `answer_meta` and `handoff`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value};

use super::forethought::{
    ForethoughtClient, ForethoughtConfig, PriorContextMode, SolveChunk, SolveRequest, SolveStream,
    VendorError,
};
use super::sessions::{Clock, SupportConversation, SupportSessions, SupportTurn};
use super::widget::{Outcome, Prompt, answer_prompt};
use super::{SUPPORT_APOLOGY, SUPPORT_EMPTY};
use baton::agent::{Agent, AgentRequest, with_prior_context};
use baton::event::EventStream;
use baton::event::{ChoiceField, ChoiceOption, Choices, Event, agent_name};
use baton::rating::FEEDBACK_REF;
use baton::store::lease::{Lease, LeaseError};

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
/// query answers it (`answer_prompt`), the same conversation is continued with the answer in
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
pub(crate) fn prefixed_query(turns: &[SupportTurn], query: &str) -> String {
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

    /// Holds the conversation, sends the query (retrying a conversation that is gone or busy
    /// once), streams the answer, then keeps the conversation and the turn.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let (client, sessions, clock) = (self.client.clone(), self.sessions.clone(), self.clock.clone());
        Box::pin(async_stream::stream! {
            let place = Place {
                user: request.user_id.clone(),
                episode: request.episode_id.clone(),
                agent: agent_name(&instance).to_owned(),
            };
            let lease = match hold(&*sessions, &place, client.config(), &instance).await {
                Ok(lease) => lease,
                Err(events) => { for ev in events { yield ev; } return; }
            };
            let mut call = Call::new(client, sessions.clone(), place.clone(), &*clock, &request).await;
            let mut pieces = call.send().await;
            let mut answer = Answer::default();
            while let Some(piece) = pieces.next().await {
                match piece {
                    Ok(piece) => for ev in answer.take(piece, &mut call.conversation_id, &instance) { yield ev; },
                    Err(e) => match call.retry(&e, !answer.text.is_empty()).await {
                        Some(retried) => pieces = retried,
                        None => {
                            tracing::warn!(error = %e, "Forethought call failed");
                            yield vendor_error(&instance, &e);
                            yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                            return;
                        }
                    },
                }
            }
            let Some(id) = call.conversation_id.take() else {
                yield vendor_error(&instance, &VendorError::Decode("the answer named no conversation_id".into()));
                yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                return;
            };
            for ev in answer.end_events(&instance, &id) { yield ev; }
            let saved = SupportConversation { conversation_id: id, last_used_at: clock.now(), pending: answer.prompt };
            if let Err(e) = sessions.save_conversation(&place.user, &place.episode, &place.agent, saved).await {
                tracing::warn!(error = %e, "cannot store the support conversation");
            }
            if let Some(lease) = lease {
                lease.release().await;
            }
            let turn = SupportTurn { query: request.query, answer: answer.text };
            if let Err(e) = sessions.record_turn(&place.user, &place.episode, &place.agent, turn).await {
                tracing::warn!(error = %e, "cannot record the support turn");
            }
        })
    }
}

/// Whose support conversation a call is on.
#[derive(Debug, Clone)]
struct Place {
    user: String,
    episode: String,
    agent: String,
}

/// Holds the episode's conversation for one call: its lease (none when the store cannot hold
/// it: the call goes on without), or, when it stayed busy past `busy_wait`, the events that end
/// the call.
async fn hold(
    sessions: &dyn SupportSessions,
    place: &Place,
    config: &ForethoughtConfig,
    instance: &str,
) -> Result<Option<Lease>, [Event; 2]> {
    let Place { user, episode, agent } = place;
    match sessions.hold_conversation(user, episode, agent, config.busy_hold, config.busy_wait).await {
        Ok(lease) => Ok(Some(lease)),
        Err(e @ LeaseError::Busy { .. }) => {
            tracing::warn!(error = %e, "the support conversation stayed busy");
            let waited = config.busy_wait.as_secs();
            let message = format!("another request on this conversation did not finish within {waited} s");
            Err([
                Event::error(instance, "support_busy", message, true),
                Event::text(instance, SUPPORT_APOLOGY),
            ])
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot hold the support conversation; calling without");
            Ok(None)
        }
    }
}

/// One call to Forethought: what it sends, on which conversation, and its retries.
struct Call {
    client: ForethoughtClient,
    sessions: Arc<dyn SupportSessions>,
    place: Place,
    /// The query before any history prefix.
    query: String,
    /// The query as sent (with the history prefix on a replacement conversation).
    sent: String,
    variables: Map<String, Value>,
    /// The conversation continued, then the one the answer named.
    conversation_id: Option<String>,
    /// The stored conversation was young enough to continue.
    fresh: bool,
    /// The stored conversation was too old to continue.
    expired: bool,
    retried_start: bool,
    retried_busy: bool,
}

impl Call {
    /// The call for `request`: the stored conversation when it is young enough, and the query,
    /// answering the prompt that conversation left open when it does, or with the caller's
    /// prior context.
    async fn new(
        client: ForethoughtClient,
        sessions: Arc<dyn SupportSessions>,
        place: Place,
        clock: &dyn Clock,
        request: &AgentRequest,
    ) -> Call {
        let stored =
            sessions.conversation(&place.user, &place.episode, &place.agent).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the support conversation; starting a new one");
                None
            });
        let config = client.config().clone();
        let now = clock.now();
        let young = |c: &SupportConversation| {
            now.duration_since(c.last_used_at).unwrap_or(Duration::ZERO) < config.continue_window
        };
        // An expired conversation asks for the history prefix; a first conversation does not.
        let expired = stored.as_ref().is_some_and(|c| !young(c));
        let fresh = stored.filter(young);
        // A reply to the prompt the conversation's last answer left open answers it there.
        let picked =
            fresh.as_ref().and_then(|c| c.pending.as_ref()).and_then(|p| answer_prompt(p, &request.query));
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
        Call {
            client,
            sessions,
            place,
            sent: query.clone(),
            query,
            variables,
            conversation_id: fresh.as_ref().map(|c| c.conversation_id.clone()),
            fresh: fresh.is_some(),
            expired,
            retried_start: false,
            retried_busy: false,
        }
    }

    /// Sends the query: on the stored conversation, or on a new one (whose query carries the
    /// earlier turns when the stored one expired).
    async fn send(&mut self) -> SolveStream {
        if self.conversation_id.is_none() && self.expired {
            self.sent = self.history_prefixed().await;
        }
        self.solve()
    }

    /// The query as sent, on the call's conversation.
    fn solve(&self) -> SolveStream {
        let request = SolveRequest {
            query: self.sent.clone(),
            user_id: self.place.user.clone(),
            context_variables: self.variables.clone(),
        };
        match &self.conversation_id {
            Some(id) => self.client.continue_conversation(id, &request),
            None => self.client.start(&request),
        }
    }

    /// The query with the episode's last support turns before it.
    async fn history_prefixed(&self) -> String {
        let Place { user, episode, agent } = &self.place;
        let turns = self.client.config().prefix_turns;
        let turns = self.sessions.recent_turns(user, episode, agent, turns).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read earlier support turns");
            Vec::new()
        });
        prefixed_query(&turns, &self.query)
    }

    /// What to read instead after `e`, before any answer: a new conversation for a stored one
    /// Forethought no longer knows, or the same call once more after a pause when it refused it
    /// as busy; each at most once. `None`: the call failed.
    async fn retry(&mut self, e: &VendorError, answered: bool) -> Option<SolveStream> {
        if e.is_conversation_gone() && self.fresh && !answered && !self.retried_start {
            tracing::info!("the Forethought conversation is gone; starting a new one");
            self.retried_start = true;
            self.conversation_id = None;
            self.sent = self.history_prefixed().await;
            return Some(self.solve());
        }
        if e.is_conversation_busy() && !answered && !self.retried_busy {
            tracing::info!("Forethought refused the call as busy; retrying once");
            self.retried_busy = true;
            tokio::time::sleep(BUSY_RETRY_PAUSE).await;
            return Some(self.solve());
        }
        None
    }
}

/// The answer as it streams.
#[derive(Default)]
struct Answer {
    text: String,
    prompt: Option<Prompt>,
    outcome: Option<Outcome>,
    /// The conversation's `response_id` event was sent.
    reported_id: bool,
}

impl Answer {
    /// The events of one piece; the conversation it names is noted in `conversation_id`.
    fn take(
        &mut self,
        piece: SolveChunk,
        conversation_id: &mut Option<String>,
        instance: &str,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        if let Some(id) = piece.conversation_id {
            *conversation_id = Some(id);
        }
        if let (false, Some(id)) = (self.reported_id, &conversation_id) {
            self.reported_id = true;
            events.push(Event::ResponseId { agent: instance.to_owned(), id: format!("ft_{id}") });
        }
        if piece.outcome.is_some() {
            self.outcome = piece.outcome;
        }
        if !piece.text.is_empty() {
            let text =
                if piece.block && !self.text.is_empty() { format!("\n\n{}", piece.text) } else { piece.text };
            self.text.push_str(&text);
            events.push(Event::text(instance, text));
        }
        if let Some(p) = piece.prompt {
            events.push(choices_event(instance, &p));
            self.prompt = Some(p);
        }
        events
    }

    /// The events after the answer on conversation `id`: an error when it had nothing to show,
    /// a `handoff` when Forethought escalates, and its `answer_meta`.
    fn end_events(&mut self, instance: &str, id: &str) -> Vec<Event> {
        let mut events = Vec::new();
        if self.text.trim().is_empty() && self.prompt.is_none() {
            tracing::warn!("Forethought's answer had no text Baton can show");
            let message = "the support vendor's answer had no text or options to show";
            events.push(Event::error(instance, "support_empty_answer", message, false));
            events.push(Event::text(instance, SUPPORT_EMPTY));
        }
        let outcome = self.outcome.take().unwrap_or_default();
        if outcome.should_escalate == Some(true) {
            events
                .push(Event::Handoff { agent: instance.to_owned(), reason: Some("should_escalate".into()) });
        }
        let mut meta = outcome.to_map();
        meta.insert(FEEDBACK_REF.into(), Value::String(id.to_owned()));
        events.push(Event::AnswerMeta { agent: instance.to_owned(), meta: Box::new(meta) });
        events
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
