//! What the Forethought agent remembers per episode, behind a small trait the store implements:
//! the vendor's conversation id with its last-used time and the prompt its last answer left
//! open, and the recent support turns.
//!
//! The continuity rule (docs/agents.md, "Support: Forethought, or the offline help center") lives
//! in the agent, not here: an implementation only stores and returns values. Time comes from an
//! injected [`Clock`], so tests move it by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use super::widget::Prompt;
use crate::agent::BoxError;
use crate::store::lease::{Lease, LeaseError};

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
pub trait SupportSessions: Send + Sync {
    /// `agent`'s Forethought conversation in the episode, if one was stored (`agent` is the
    /// agent's name, so two agents of this kind keep separate conversations).
    fn conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<SupportConversation>, BoxError>>;

    /// Stores `agent`'s Forethought conversation in the episode (replacing its earlier one).
    fn save_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        conversation: SupportConversation,
    ) -> BoxFuture<'a, Result<(), BoxError>>;

    /// The last `limit` support turns of the episode, oldest first.
    fn recent_turns<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SupportTurn>, BoxError>>;

    /// Called by the agent after each answered turn. An implementation whose turns come from
    /// persisted history (the store) may do nothing here.
    fn record_turn<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        turn: SupportTurn,
    ) -> BoxFuture<'a, Result<(), BoxError>>;

    /// Holds the episode's conversation with `agent`'s vendor for one call, for at most `hold`:
    /// the vendor takes one request per conversation at a time, so calls on one episode wait
    /// for each other here, up to `wait` ([`LeaseError::Busy`] after that). Over the store this
    /// is a lease every process sees; in memory, a lock of this process.
    fn hold_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        hold: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>>;
}

#[derive(Debug, Default)]
struct Episode {
    /// By agent name.
    conversations: HashMap<String, SupportConversation>,
    turns: Vec<SupportTurn>,
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

impl SupportSessions for MemorySupportSessions {
    fn conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<SupportConversation>, BoxError>> {
        let found = self.with(user_id, episode_id, |e| e.conversations.get(agent).cloned());
        Box::pin(async move { Ok(found) })
    }

    fn save_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        conversation: SupportConversation,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        self.with(user_id, episode_id, |e| e.conversations.insert(agent.to_owned(), conversation));
        Box::pin(async { Ok(()) })
    }

    fn recent_turns<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SupportTurn>, BoxError>> {
        let turns =
            self.with(user_id, episode_id, |e| e.turns[e.turns.len().saturating_sub(limit)..].to_vec());
        Box::pin(async move { Ok(turns) })
    }

    fn record_turn<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        turn: SupportTurn,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        self.with(user_id, episode_id, |e| {
            e.turns.push(turn);
            let excess = e.turns.len().saturating_sub(50);
            e.turns.drain(..excess);
        });
        Box::pin(async { Ok(()) })
    }

    fn hold_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        _hold: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        let lock = {
            let mut held = self.held.lock().expect("sessions lock");
            let key = (user_id.to_owned(), episode_id.to_owned(), agent.to_owned());
            held.entry(key).or_default().clone()
        };
        Box::pin(async move {
            match tokio::time::timeout(wait, lock.lock_owned()).await {
                Ok(guard) => Ok(Lease::new(async move { drop(guard) })),
                Err(_) => Err(LeaseError::Busy { name: format!("vendor:{agent}"), waited: wait }),
            }
        })
    }
}

/// Time comes from the store's clock, so one injected clock drives expiry and continuity.
pub use crate::store::{Clock, ManualClock, SystemClock};
