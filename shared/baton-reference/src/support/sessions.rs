//! What the Forethought agent remembers per episode, behind a small trait the store implements:
//! the vendor's conversation id with its last-used time and the prompt its last answer left
//! open, and the recent support turns.
//!
//! The continuity rule (docs/agents.md, "Support: Forethought, or the offline help center") lives
//! in the agent, not here: an implementation only stores and returns values. Time comes from an
//! injected [`Clock`], so tests move it by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton::agent::BoxError;
use baton::store::lease::{Lease, LeaseError};
use baton::store::{EpisodeKey, Role, Store, epoch_ms, update_episode};

use super::widget::Prompt;

/// The Forethought conversation of one episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportConversation {
    /// Forethought's `conversation_id`.
    pub conversation_id: String,
    /// When it was last used (start or continue).
    pub last_used_at: SystemTime,
    /// What the last answer asked the user to answer (a `button` or `form` component), kept so
    /// the next message can answer it on this conversation; `None` when nothing is open.
    pub pending: Option<Prompt>,
}

/// One answered support turn: what support was asked and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportTurn {
    /// The query support got.
    pub query: String,
    /// Support's answer.
    pub answer: String,
}

/// Per-episode support state. Keys are the authenticated user and the episode, and for the
/// conversation the agent's name too; an implementation over the store keeps the conversation on
/// the episode record (under the agent's name) and reads turns from the episode's support
/// messages.
#[async_trait::async_trait]
pub trait SupportSessions: Send + Sync {
    /// `agent`'s Forethought conversation in the episode, if one was stored (`agent` is the
    /// agent's name, so two agents of this kind keep separate conversations).
    async fn conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<SupportConversation>, BoxError>;

    /// Stores `agent`'s Forethought conversation in the episode (replacing its earlier one).
    async fn save_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        conversation: SupportConversation,
    ) -> Result<(), BoxError>;

    /// The last `limit` turns `agent` answered in the episode, oldest first.
    async fn recent_turns(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        limit: usize,
    ) -> Result<Vec<SupportTurn>, BoxError>;

    /// Called by the agent after each answered turn. An implementation whose turns come from
    /// persisted history (the store) may do nothing here.
    async fn record_turn(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        turn: SupportTurn,
    ) -> Result<(), BoxError>;

    /// Holds the episode's conversation with `agent`'s vendor for one call, for at most `hold`:
    /// the vendor takes one request per conversation at a time, so calls on one episode wait
    /// for each other here, up to `wait` ([`LeaseError::Busy`] after that). Over the store this
    /// is a lease every process sees; in memory, a lock of this process.
    async fn hold_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        hold: Duration,
        wait: Duration,
    ) -> Result<Lease, LeaseError>;
}

#[derive(Debug, Default)]
struct Episode {
    /// By agent name.
    conversations: HashMap<String, SupportConversation>,
    /// By agent name.
    turns: HashMap<String, Vec<SupportTurn>>,
}

/// A conversation held in memory: user, episode, agent.
type HeldKey = (String, String, String);

/// [`SupportSessions`] in process memory: for tests, and until a store is configured. Keeps the
/// last 50 turns of each episode.
#[derive(Debug, Default)]
pub struct MemorySupportSessions {
    episodes: Mutex<HashMap<(String, String), Episode>>,
    /// One lock per (user, episode, agent), for [`SupportSessions::hold_conversation`].
    held: Mutex<HashMap<HeldKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl MemorySupportSessions {
    fn with<T>(&self, user_id: &str, episode_id: &str, f: impl FnOnce(&mut Episode) -> T) -> T {
        let mut episodes = self.episodes.lock().expect("sessions lock");
        f(episodes.entry((user_id.to_owned(), episode_id.to_owned())).or_default())
    }
}

#[async_trait::async_trait]
impl SupportSessions for MemorySupportSessions {
    async fn conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<SupportConversation>, BoxError> {
        let found = self.with(user_id, episode_id, |e| e.conversations.get(agent).cloned());
        Ok(found)
    }

    async fn save_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        conversation: SupportConversation,
    ) -> Result<(), BoxError> {
        self.with(user_id, episode_id, |e| e.conversations.insert(agent.to_owned(), conversation));
        Ok(())
    }

    async fn recent_turns(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        limit: usize,
    ) -> Result<Vec<SupportTurn>, BoxError> {
        let turns = self.with(user_id, episode_id, |e| {
            let turns = e.turns.get(agent).map_or(&[][..], Vec::as_slice);
            turns[turns.len().saturating_sub(limit)..].to_vec()
        });
        Ok(turns)
    }

    async fn record_turn(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        turn: SupportTurn,
    ) -> Result<(), BoxError> {
        self.with(user_id, episode_id, |e| {
            let turns = e.turns.entry(agent.to_owned()).or_default();
            turns.push(turn);
            let excess = turns.len().saturating_sub(50);
            turns.drain(..excess);
        });
        Ok(())
    }

    async fn hold_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        _hold: Duration,
        wait: Duration,
    ) -> Result<Lease, LeaseError> {
        let lock = {
            let mut held = self.held.lock().expect("sessions lock");
            let key = (user_id.to_owned(), episode_id.to_owned(), agent.to_owned());
            held.entry(key).or_default().clone()
        };
        match tokio::time::timeout(wait, lock.lock_owned()).await {
            Ok(guard) => Ok(Lease::new(async move { drop(guard) })),
            Err(_) => Err(LeaseError::Busy { name: format!("vendor:{agent}"), waited: wait }),
        }
    }
}

/// Where an episode item written before conversations were kept per agent has the Forethought
/// conversation (its `ft_*` attributes, read by the store under their prefix).
pub(crate) const LEGACY_CONVERSATION: &str = "ft";

/// [`SupportSessions`] over a [`Store`]: each agent's conversation (with the prompt its last
/// answer left open) on the episode item under the agent's name; its recent turns read back from
/// the episode's stored messages (history already persists them, so recording a turn writes
/// nothing); the conversation held with a store lease every process sees.
#[derive(Clone)]
pub struct StoreSessions {
    store: Arc<dyn Store>,
}

impl StoreSessions {
    /// State in `store`.
    pub fn new(store: Arc<dyn Store>) -> StoreSessions {
        StoreSessions { store }
    }
}

fn key(user_id: &str, episode_id: &str) -> Result<EpisodeKey, BoxError> {
    Ok(EpisodeKey::new(user_id, episode_id)?)
}

#[async_trait::async_trait]
impl SupportSessions for StoreSessions {
    async fn conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<SupportConversation>, BoxError> {
        let episode = self.store.episode(&key(user_id, episode_id)?).await?;
        // An item written before conversations were kept per agent holds the one Forethought
        // agent's conversation under the vendor's prefix: an agent with none of its own takes it.
        let own = |mut e: baton::store::Episode| {
            e.conversations.remove(agent).or_else(|| e.conversations.remove(LEGACY_CONVERSATION))
        };
        Ok(episode.and_then(own).map(|c| SupportConversation {
            conversation_id: c.conversation_id,
            last_used_at: UNIX_EPOCH + Duration::from_millis(c.last_used_at),
            // A prompt this version cannot read is no prompt: the next message is an
            // ordinary query.
            pending: c.pending.and_then(|p| {
                serde_json::from_value(p)
                    .map_err(|e| tracing::warn!(error = %e, "ignored an unreadable pending support prompt"))
                    .ok()
            }),
        }))
    }

    async fn save_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        conversation: SupportConversation,
    ) -> Result<(), BoxError> {
        let pending = match &conversation.pending {
            Some(prompt) => Some(serde_json::to_value(prompt)?),
            None => None,
        };
        let saved = baton::store::VendorConversation {
            conversation_id: conversation.conversation_id,
            last_used_at: epoch_ms(conversation.last_used_at),
            pending,
        };
        update_episode(self.store.as_ref(), &key(user_id, episode_id)?, |e| {
            e.conversations.remove(LEGACY_CONVERSATION);
            e.conversations.insert(agent.to_owned(), saved.clone());
        })
        .await?;
        Ok(())
    }

    async fn recent_turns(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        limit: usize,
    ) -> Result<Vec<SupportTurn>, BoxError> {
        // A turn holds the user message and up to a few replies; read enough to find `limit`
        // of this agent's answers in mixed histories.
        let instance_prefix = format!("{agent}[");
        let messages =
            self.store.recent_messages(&key(user_id, episode_id)?, limit.saturating_mul(6)).await?;
        let mut turns = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if m.role != Role::Assistant
                || !m.agent.starts_with(&instance_prefix)
                || m.content.trim().is_empty()
            {
                continue;
            }
            let query = messages[..i]
                .iter()
                .rev()
                .find(|u| u.role == Role::User && u.turn_id == m.turn_id)
                .map(|u| u.content.clone())
                .unwrap_or_default();
            turns.push(SupportTurn { query, answer: m.content.clone() });
        }
        let excess = turns.len().saturating_sub(limit);
        turns.drain(..excess);
        Ok(turns)
    }

    async fn record_turn(
        &self,
        _user_id: &str,
        _episode_id: &str,
        _agent: &str,
        _turn: SupportTurn,
    ) -> Result<(), BoxError> {
        // History stores the support answer with the rest of the turn.
        Ok(())
    }

    async fn hold_conversation(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        hold: Duration,
        wait: Duration,
    ) -> Result<Lease, LeaseError> {
        let key = EpisodeKey::new(user_id, episode_id)?;
        baton::store::lease::acquire(self.store.clone(), key, &format!("vendor:{agent}"), hold, wait).await
    }
}

pub use baton::store::ManualClock;
/// Time comes from the store's clock, so one injected clock drives expiry and continuity.
pub(crate) use baton::store::{Clock, SystemClock};

#[cfg(test)]
mod tests {
    use super::*;
    use baton::store::embedded::EmbeddedStore;
    use baton::store::{ManualClock, StoredMessage};

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
        let store = EmbeddedStore::open(dir.path().join("s.redb"), clock).unwrap();
        (dir, Arc::new(store))
    }

    #[tokio::test]
    async fn vendor_state_round_trips_through_the_episode() {
        let (_dir, store) = store().await;
        let b = StoreSessions::new(store);
        assert_eq!(b.conversation("u", "e", "helpdesk").await.unwrap(), None);
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let prompt = super::super::widget::Prompt {
            text: "pick".into(),
            output_variable: "cv".into(),
            options: vec![super::super::widget::PromptOption { label: "A".into(), value: "a".into() }],
            fields: Vec::new(),
        };
        let saved =
            SupportConversation { conversation_id: "c1".into(), last_used_at: at, pending: Some(prompt) };
        b.save_conversation("u", "e", "helpdesk", saved.clone()).await.unwrap();
        let got = b.conversation("u", "e", "helpdesk").await.unwrap().unwrap();
        assert_eq!(got, saved, "the id, its time and the open prompt come back");
        assert_eq!(b.conversation("other", "e", "helpdesk").await.unwrap(), None, "scoped to the user");
    }

    #[tokio::test]
    async fn two_agents_of_one_kind_keep_separate_conversations() {
        let (_dir, store) = store().await;
        let b = StoreSessions::new(store);
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
        let conversation =
            |id: &str| SupportConversation { conversation_id: id.into(), last_used_at: at, pending: None };
        b.save_conversation("u", "e", "billing", conversation("c_b1")).await.unwrap();
        b.save_conversation("u", "e", "travel", conversation("c_t1")).await.unwrap();
        b.save_conversation("u", "e", "billing", conversation("c_b2")).await.unwrap();
        let id = |c: Option<SupportConversation>| c.map(|c| c.conversation_id);
        assert_eq!(id(b.conversation("u", "e", "billing").await.unwrap()).as_deref(), Some("c_b2"));
        assert_eq!(id(b.conversation("u", "e", "travel").await.unwrap()).as_deref(), Some("c_t1"));
        assert_eq!(b.conversation("u", "e", "other").await.unwrap(), None);
    }

    #[tokio::test]
    async fn recent_support_turns_come_from_stored_history() {
        let (_dir, store) = store().await;
        let key = EpisodeKey::new("u", "e").unwrap();
        for (turn, question, answer) in [("t1", "q1", "a1"), ("t2", "q2", "a2"), ("t3", "q3", "a3")] {
            store.record_user_message(&key, &StoredMessage::user(turn, question, 1), None).await.unwrap();
            let mut reply = StoredMessage::user(turn, answer, 2);
            reply.role = Role::Assistant;
            reply.agent = "support[1]".into();
            reply.seq = 1;
            let mut other = reply.clone();
            other.agent = "shopping[1]".into();
            other.content = "offers".into();
            other.seq = 2;
            store.save_reply(&key, turn, &[reply, other]).await.unwrap();
        }
        let turns = StoreSessions::new(store).recent_turns("u", "e", "support", 2).await.unwrap();
        assert_eq!(
            turns,
            [
                SupportTurn { query: "q2".into(), answer: "a2".into() },
                SupportTurn { query: "q3".into(), answer: "a3".into() }
            ]
        );
    }

    #[tokio::test]
    async fn a_conversation_stored_before_agents_had_their_own_is_the_support_agents_until_it_saves() {
        let (_dir, store) = store().await;
        let key = EpisodeKey::new("u", "e").unwrap();
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
        update_episode(store.as_ref(), &key, |e| {
            let legacy = baton::store::VendorConversation {
                conversation_id: "c_old".into(),
                last_used_at: epoch_ms(at),
                pending: None,
            };
            e.conversations.insert(LEGACY_CONVERSATION.into(), legacy);
        })
        .await
        .unwrap();
        let b = StoreSessions::new(store.clone());
        let got = b.conversation("u", "e", "support").await.unwrap().unwrap();
        assert_eq!(got.conversation_id, "c_old");
        let new = SupportConversation { conversation_id: "c_new".into(), last_used_at: at, pending: None };
        b.save_conversation("u", "e", "support", new).await.unwrap();
        let episode = store.episode(&key).await.unwrap().unwrap();
        assert_eq!(episode.conversations.keys().collect::<Vec<_>>(), ["support"], "the legacy entry is gone");
    }
}
