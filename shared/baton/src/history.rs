//! Recording a turn (docs/architecture.md, "A turn, step by step"; docs/storage.md): the user
//! message before the model call, the assistant messages after the turn, whatever happens to the
//! client.
//!
//! [`History::begin`] records the user message (idempotent on the client's request id) and reads
//! the recent history the turn sees. [`History::reply`] is the turn's [`PendingReply`]: the turn
//! (the orchestrator's turn) shows it each event on its way to the client, in the client's own
//! stream (no task or channel per turn in between), and [`PendingReply::finish`] saves the reply
//! before the turn builds `completed`, so a failed save is the turn's status everywhere. When the
//! client goes away (the stream is dropped) the turn is dropped with it, which cancels every model
//! call, and what was produced is saved with status `partial`. A dropped stream cannot `.await` in
//! `Drop`, so each save runs in a task of its own: the one at the end is awaited before
//! `completed`, and a client that leaves while it runs does not cut it short; the one for a
//! client that left is spawned by the drop.
//!
//! The reply is split into messages by speaker: the orchestrator's own text (preamble or
//! fastpath answer), then each sub-agent instance's text, a new message starting whenever the
//! speaking agent changes or at `content_end` (where the routing policy's follow-up agent's
//! content ends in a mixed turn). Each message carries its agent's usage and status.

use std::sync::Arc;

use crate::conversation::{PreviousTurn, PriorReply};
use crate::event::{Event, Status, UsageRollup, agent_name};
use crate::model::Message;
use crate::store::{EpisodeKey, Recorded, Role, Store, StoreError, StoredMessage, model_history};

/// How many stored messages a turn sees by default.
pub const DEFAULT_HISTORY_MESSAGES: usize = 40;

/// Records turns into a [`Store`].
#[derive(Clone)]
pub struct History {
    store: Arc<dyn Store>,
    max_messages: usize,
}

impl History {
    /// Records into `store`; turns see the last `max_messages` stored messages.
    pub fn new(store: Arc<dyn Store>, max_messages: usize) -> History {
        History { store, max_messages }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Records the user message `message` of turn `turn_id` in `user`'s episode `episode` and
    /// loads the episode's recent history. History is read first, so a store that cannot be read
    /// records nothing. A repeated `request_id` records nothing and names the request's first turn
    /// id, so the turn is answered again (without its own earlier messages in its history) and
    /// its new reply replaces the old one.
    pub async fn begin(
        &self,
        user: &str,
        episode: &str,
        turn_id: &str,
        message: &str,
        request_id: Option<&str>,
    ) -> Result<Begun, StoreError> {
        let key = EpisodeKey::new(user, episode)?;
        let mut stored =
            traced("recent_messages", self.store.recent_messages(&key, self.max_messages + 1)).await?;
        let user_message = StoredMessage::user(turn_id, message, self.store.clock().now_ms());
        let recorded = self.store.record_user_message(&key, &user_message, request_id);
        let turn_id = match traced("record_user_message", recorded).await? {
            Recorded::Duplicate { turn_id } => turn_id,
            Recorded::New => turn_id.to_owned(),
        };
        stored.retain(|m| m.turn_id != turn_id);
        let skip = stored.len().saturating_sub(self.max_messages);
        let history = model_history(&stored[skip..]);
        let previous = previous_turn(&stored);
        let interrupted = stored.last().is_some_and(|m| m.status == Status::Interrupted);
        Ok(Begun { key, turn_id, history, previous, interrupted })
    }

    /// The reply of turn `turn_id` of `key`, whose entry agent is `entry`, to be saved once: by
    /// [`PendingReply::finish`] when the turn ends, or as `partial` when it is dropped before (the
    /// client left). Its saves run in `span` (the turn's).
    pub fn reply(&self, key: EpisodeKey, turn_id: String, entry: &str, span: tracing::Span) -> PendingReply {
        let recorder = ReplyRecorder { entry: Some(entry.to_owned()), ..ReplyRecorder::default() };
        PendingReply { store: self.store.clone(), key, turn_id, recorder, span, open: true }
    }
}

/// What [`History::begin`] recorded and read.
#[derive(Debug)]
pub struct Begun {
    /// The episode.
    pub key: EpisodeKey,
    /// The turn's id: the one given, or the first turn of a repeated request id.
    pub turn_id: String,
    /// The recent messages, oldest first, as the model reads them.
    pub history: Vec<Message>,
    /// The previous turn's message and replies by agent, for the routing guards.
    pub previous: Option<PreviousTurn>,
    /// Whether the episode's last turn paused for approvals.
    pub interrupted: bool,
}

/// The reply of a turn in progress, saved once: at the turn's end ([`PendingReply::finish`]), or
/// when it is dropped before (the client left: what was produced is saved as `partial`). A dropped
/// reply cannot `.await` in `Drop`, so each save runs in a task of its own.
pub struct PendingReply {
    store: Arc<dyn Store>,
    key: EpisodeKey,
    turn_id: String,
    recorder: ReplyRecorder,
    span: tracing::Span,
    /// Not saved yet.
    open: bool,
}

impl PendingReply {
    /// Takes one of the turn's events into account.
    pub fn observe(&mut self, event: &Event) {
        self.recorder.observe(event);
    }

    /// Saves the reply of a turn that ended with `status`, and waits for it. A caller that goes
    /// away while it runs does not cut it short.
    pub async fn finish(mut self, status: Status) -> Result<(), StoreError> {
        self.recorder.completed = Some(status);
        match self.save(false) {
            Some(save) => {
                save.await.unwrap_or_else(|e| Err(StoreError::Failed(format!("the save task failed: {e}"))))
            }
            None => Err(StoreError::Failed("no runtime to save the reply on".into())),
        }
    }

    /// Drops the reply without saving it: the turn lost its right to answer (a resume whose
    /// claim lapsed and another request took over: that request's answer is the one kept).
    pub fn discard(mut self) {
        self.open = false;
    }

    /// Saves the reply so far in a task of its own (`hung_up`: the client left, so what had not
    /// finished is `partial`); `None` outside a Tokio runtime.
    fn save(&mut self, hung_up: bool) -> Option<tokio::task::JoinHandle<Result<(), StoreError>>> {
        self.open = false;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let messages = self.recorder.messages(&self.turn_id, hung_up, self.store.clock().now_ms());
        let (store, key, turn_id) = (self.store.clone(), self.key.clone(), self.turn_id.clone());
        let save = async move {
            let saved = traced("save_reply", store.save_reply(&key, &turn_id, &messages)).await;
            if hung_up {
                match &saved {
                    Ok(()) => {
                        tracing::info!(episode = %key, turn = %turn_id, "client left; partial reply saved")
                    }
                    Err(e) => {
                        tracing::error!(episode = %key, turn = %turn_id, error = %e, "client left; partial reply lost")
                    }
                }
            }
            saved
        };
        Some(runtime.spawn(tracing::Instrument::instrument(save, self.span.clone())))
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        if self.open && self.save(true).is_none() {
            tracing::error!(episode = %self.key, turn = %self.turn_id, "client left outside a runtime; partial reply lost");
        }
    }
}

/// A run of text by one agent.
struct Segment {
    agent: String,
    content: String,
    /// Closed by `content_end`: more text from the same agent starts a new message.
    closed: bool,
    /// What the agent reported about this answer (`answer_meta`, `choices`, `handoff`).
    meta: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Turns a turn's events into the assistant messages to store.
#[derive(Default)]
pub(crate) struct ReplyRecorder {
    segments: Vec<Segment>,
    usage: UsageRollup,
    finished: Vec<(String, Status)>,
    /// The entry agent: the first instance to start.
    entry: Option<String>,
    completed: Option<Status>,
}

impl ReplyRecorder {
    /// Takes one event into account.
    pub(crate) fn observe(&mut self, event: &Event) {
        match event {
            Event::Text { agent, text } => match self.segments.last_mut() {
                Some(last) if !last.closed && last.agent == *agent => last.content.push_str(text),
                _ => self.segments.push(Segment {
                    agent: agent.clone(),
                    content: text.clone(),
                    closed: false,
                    meta: None,
                }),
            },
            Event::Choices { agent, choices } => {
                let value = serde_json::to_value(choices.as_ref()).unwrap_or_default();
                self.meta_of(agent).insert("choices".into(), value);
            }
            Event::Handoff { agent, reason } => {
                let mut handoff = serde_json::Map::new();
                if let Some(reason) = reason {
                    handoff.insert("reason".into(), reason.clone().into());
                }
                self.meta_of(agent).insert("handoff".into(), handoff.into());
            }
            Event::AnswerMeta { agent, meta } => {
                let into = self.meta_of(agent);
                into.extend(meta.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Event::ContentEnd { agent } => {
                if let Some(last) = self.segments.iter_mut().rev().find(|s| s.agent == *agent) {
                    last.closed = true;
                }
            }
            Event::Usage { agent, model, usage, .. } => {
                self.usage.add(agent, model, *usage);
            }
            Event::AgentStarted { agent, .. } if self.entry.is_none() => self.entry = Some(agent.clone()),
            Event::AgentFinished { agent, status, .. } => self.finished.push((agent.clone(), *status)),
            Event::Completed { status, .. } => self.completed = Some(*status),
            _ => {}
        }
    }

    /// The metadata of `agent`'s latest message (one with no text yet if it has none).
    fn meta_of(&mut self, agent: &str) -> &mut serde_json::Map<String, serde_json::Value> {
        let at = match self.segments.iter().rposition(|s| s.agent == agent) {
            Some(at) => at,
            None => {
                let segment =
                    Segment { agent: agent.to_owned(), content: String::new(), closed: false, meta: None };
                self.segments.push(segment);
                self.segments.len() - 1
            }
        };
        self.segments[at].meta.get_or_insert_with(Default::default)
    }

    /// The reply so far as messages of `turn_id` (seq from 1), stamped `now_ms`. `hung_up`: the
    /// client left, so whatever had not finished is `partial`; so is it when the turn did not
    /// complete `ok` (cut at its deadline).
    ///
    /// Usage, rolled up per agent name and model, goes with the first message of the agent that
    /// spent it; usage of an agent with no text (an orchestrator that only called tools, an agent
    /// tool whose text the client does not see) goes with the last message. A turn with no
    /// text at all is still one (empty) message, so its status and usage are kept.
    pub(crate) fn messages(&self, turn_id: &str, hung_up: bool, now_ms: u64) -> Vec<StoredMessage> {
        let unfinished = match self.completed {
            _ if hung_up => Status::Partial,
            Some(Status::Cancelled) => Status::Cancelled,
            Some(Status::Interrupted) => Status::Interrupted,
            Some(status) if status != Status::Ok => Status::Partial,
            _ => Status::Ok,
        };
        let status_of =
            |agent: &str| self.finished.iter().find(|(a, _)| a == agent).map_or(unfinished, |(_, s)| *s);
        let mut messages: Vec<StoredMessage> = self
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| StoredMessage {
                turn_id: turn_id.to_owned(),
                seq: i as u32 + 1,
                role: Role::Assistant,
                agent: s.agent.clone(),
                content: s.content.clone(),
                usage: Vec::new(),
                status: status_of(&s.agent),
                created_at: now_ms,
                meta: s.meta.clone(),
            })
            .collect();
        if messages.is_empty() {
            messages.push(StoredMessage {
                turn_id: turn_id.to_owned(),
                seq: 1,
                role: Role::Assistant,
                agent: self.entry.clone().unwrap_or_default(),
                content: String::new(),
                usage: Vec::new(),
                status: if hung_up { Status::Partial } else { self.completed.unwrap_or(Status::Partial) },
                created_at: now_ms,
                meta: None,
            });
        }
        for u in &self.usage.totals {
            let at =
                messages.iter().position(|m| agent_name(&m.agent) == u.agent).unwrap_or(messages.len() - 1);
            messages[at].usage.push(u.clone());
        }
        messages
    }
}

/// The last stored turn, as the routing guards see it: the user's message and each agent's reply
/// (instance numbers dropped: `helper[1]` → `helper`).
fn previous_turn(stored: &[StoredMessage]) -> Option<PreviousTurn> {
    let last_turn = &stored.last()?.turn_id;
    let turn: Vec<&StoredMessage> = stored.iter().filter(|m| &m.turn_id == last_turn).collect();
    let user_message = turn.iter().find(|m| m.role == Role::User)?.content.clone();
    let replies = turn
        .iter()
        .filter(|m| m.role == Role::Assistant && !m.content.trim().is_empty())
        .map(|m| PriorReply {
            agent: agent_name(&m.agent).to_owned(),
            text: m.content.clone(),
            options: offered_options(m),
        })
        .collect();
    Some(PreviousTurn { user_message, replies })
}

/// The labels of the options a stored reply offered (its `choices`, kept in its metadata).
fn offered_options(message: &StoredMessage) -> Vec<String> {
    let options = message.meta.as_ref().and_then(|m| m.get("choices")).and_then(|c| c.get("options"));
    options
        .and_then(serde_json::Value::as_array)
        .map(|options| options.iter().filter_map(|o| o["label"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// `op` on the store, in a span of its own (`store <op>`, a child of the turn's).
async fn traced<T>(op: &'static str, call: impl std::future::Future<Output = T>) -> T {
    let span = tracing::info_span!("store", otel.name = %format_args!("store {op}"), db.operation.name = op);
    tracing::Instrument::instrument(call, span).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Usage;
    use crate::orchestrator::ORCHESTRATOR;

    fn usage(agent: &str, n: u64) -> Event {
        Event::usage(agent, "m", Usage::tokens(n, 1))
    }

    fn finished(agent: &str, status: Status) -> Event {
        Event::AgentFinished { agent: agent.into(), status, duration_ms: 1, usage: Usage::default() }
    }

    fn completed(status: Status) -> Event {
        Event::Completed {
            episode_id: "e".into(),
            turn_id: "t".into(),
            status,
            model: "m".into(),
            duration_ms: 1,
            cost_usd: None,
            usage: vec![],
            interrupts: Box::default(),
        }
    }

    fn record(events: &[Event], hung_up: bool) -> Vec<StoredMessage> {
        let mut r = ReplyRecorder::default();
        events.iter().for_each(|e| r.observe(e));
        r.messages("t", hung_up, 7)
    }

    #[test]
    fn a_mixed_turn_is_one_message_per_speaker_split_at_content_end() {
        let messages = record(
            &[
                Event::thinking(),
                Event::text(ORCHESTRATOR, "On it."),
                usage(ORCHESTRATOR, 10),
                Event::text("support[1]", "Receipts "),
                Event::text("support[1]", "scan."),
                usage("support[1]", 20),
                finished("support[1]", Status::Ok),
                Event::ContentEnd { agent: "support[1]".into() },
                Event::text("shopping[1]", "Deals."),
                usage("shopping[1]", 30),
                finished("shopping[1]", Status::Error),
                finished(ORCHESTRATOR, Status::Ok),
                completed(Status::Error),
            ],
            false,
        );
        let got: Vec<(u32, &str, &str, Status, u64)> = messages
            .iter()
            .map(|m| (m.seq, m.agent.as_str(), m.content.as_str(), m.status, m.usage[0].usage.input_tokens))
            .collect();
        assert_eq!(
            got,
            [
                (1, "orchestrator", "On it.", Status::Ok, 10),
                (2, "support[1]", "Receipts scan.", Status::Ok, 20),
                (3, "shopping[1]", "Deals.", Status::Error, 30),
            ]
        );
        assert!(
            messages.iter().all(|m| m.role == Role::Assistant && m.created_at == 7 && m.usage.len() == 1)
        );
    }

    #[test]
    fn content_end_closes_the_message_even_if_its_agent_speaks_again() {
        let messages = record(
            &[
                Event::text("support[1]", "a"),
                Event::ContentEnd { agent: "support[1]".into() },
                Event::text("support[1]", "b"),
            ],
            false,
        );
        assert_eq!(messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn a_hang_up_marks_unfinished_agents_partial() {
        let messages = record(
            &[
                Event::text(ORCHESTRATOR, "On it."),
                Event::text("support[1]", "done"),
                finished("support[1]", Status::Ok),
                Event::text("shopping[1]", "half"),
            ],
            true,
        );
        let statuses: Vec<Status> = messages.iter().map(|m| m.status).collect();
        assert_eq!(statuses, [Status::Partial, Status::Ok, Status::Partial]);
    }

    #[test]
    fn a_turn_cut_at_its_deadline_marks_unfinished_agents_partial() {
        let completed = Event::Completed {
            episode_id: "e".into(),
            turn_id: "t".into(),
            status: Status::Partial,
            model: "m".into(),
            duration_ms: 1,
            cost_usd: None,
            usage: Vec::new(),
            interrupts: Box::default(),
        };
        let messages = record(
            &[
                Event::text("support[1]", "done"),
                finished("support[1]", Status::Ok),
                Event::text("shopping[1]", "half"),
                completed,
            ],
            false,
        );
        let statuses: Vec<Status> = messages.iter().map(|m| m.status).collect();
        assert_eq!(statuses, [Status::Ok, Status::Partial]);
    }

    #[test]
    fn usage_without_text_goes_to_the_last_message_and_no_text_is_one_empty_message() {
        let messages = record(&[usage(ORCHESTRATOR, 5), Event::text("shopping[1]", "x")], false);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].usage[0].agent, ORCHESTRATOR);
        let messages = record(&[usage(ORCHESTRATOR, 5), completed(Status::Error)], false);
        assert_eq!(messages.len(), 1);
        assert_eq!((messages[0].content.as_str(), messages[0].status), ("", Status::Error));
        assert_eq!(messages[0].usage.len(), 1);
    }

    #[test]
    fn choices_handoff_and_answer_meta_are_kept_with_the_agents_message() {
        use crate::event::{ChoiceOption, Choices};
        let choices = Choices {
            prompt: "Pick".into(),
            options: vec![ChoiceOption { label: "A".into(), value: "a".into() }],
            fields: Vec::new(),
        };
        let meta = serde_json::json!({"is_solved": false, "feedback_ref": "c1"}).as_object().unwrap().clone();
        let messages = record(
            &[
                Event::text(ORCHESTRATOR, "On it."),
                Event::text("support[1]", "Pick\n1. A"),
                Event::Choices { agent: "support[1]".into(), choices: Box::new(choices) },
                Event::Handoff { agent: "support[1]".into(), reason: Some("should_escalate".into()) },
                Event::AnswerMeta { agent: "support[1]".into(), meta: Box::new(meta) },
                Event::text("shopping[1]", "Deals."),
            ],
            false,
        );
        assert_eq!(messages[0].meta, None);
        assert_eq!(messages[2].meta, None);
        assert_eq!(
            serde_json::Value::Object(messages[1].meta.clone().unwrap()),
            serde_json::json!({
                "choices": {"prompt": "Pick", "options": [{"label": "A", "value": "a"}]},
                "handoff": {"reason": "should_escalate"},
                "is_solved": false,
                "feedback_ref": "c1"
            })
        );
    }

    #[test]
    fn usage_is_stored_rolled_up_per_agent_name() {
        let messages = record(
            &[
                usage("lead", 3),
                usage("helper[1]", 10),
                usage("helper[2]", 5),
                Event::text("lead", "answer"),
                usage("lead", 4),
                completed(Status::Ok),
            ],
            false,
        );
        assert_eq!(messages.len(), 1);
        let stored: Vec<(&str, u64, u64)> = messages[0]
            .usage
            .iter()
            .map(|u| (u.agent.as_str(), u.usage.input_tokens, u.usage.output_tokens))
            .collect();
        assert_eq!(stored, [("lead", 7, 2), ("helper", 15, 2)]);
    }
}
