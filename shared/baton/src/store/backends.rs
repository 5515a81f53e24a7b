//! Agent state kept in the [`Store`]: each Forethought agent's conversation (with the prompt its
//! last answer left open) and each agent's last Responses API id live on the episode item, by
//! agent name; the recent support turns are read back from the episode's stored messages
//! (history already persists them, so recording a turn writes nothing).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use futures::future::BoxFuture;

use super::lease::{self, Lease, LeaseError};
use super::{EpisodeKey, Role, Store, epoch_ms, update_episode};
use crate::agent::{BoxError, ResponseChains};
use crate::support::sessions::{SupportConversation, SupportSessions, SupportTurn};

/// [`SupportSessions`] and [`ResponseChains`] over a [`Store`].
#[derive(Clone)]
pub struct StoreBackends {
    store: Arc<dyn Store>,
}

impl StoreBackends {
    /// State in `store`.
    pub fn new(store: Arc<dyn Store>) -> StoreBackends {
        StoreBackends { store }
    }
}

fn key(user_id: &str, episode_id: &str) -> Result<EpisodeKey, BoxError> {
    Ok(EpisodeKey::new(user_id, episode_id)?)
}

impl SupportSessions for StoreBackends {
    fn conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<SupportConversation>, BoxError>> {
        Box::pin(async move {
            let episode = self.store.episode(&key(user_id, episode_id)?).await?;
            Ok(episode.and_then(|mut e| e.conversations.remove(agent)).map(|c| SupportConversation {
                conversation_id: c.conversation_id,
                last_used_at: UNIX_EPOCH + Duration::from_millis(c.last_used_at),
                // A prompt this version cannot read is no prompt: the next message is an
                // ordinary query.
                pending: c.pending.and_then(|p| {
                    serde_json::from_value(p)
                        .map_err(
                            |e| tracing::warn!(error = %e, "ignored an unreadable pending support prompt"),
                        )
                        .ok()
                }),
            }))
        })
    }

    fn save_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        conversation: SupportConversation,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move {
            let pending = match &conversation.pending {
                Some(prompt) => Some(serde_json::to_value(prompt)?),
                None => None,
            };
            let saved = super::VendorConversation {
                conversation_id: conversation.conversation_id,
                last_used_at: epoch_ms(conversation.last_used_at),
                pending,
            };
            update_episode(self.store.as_ref(), &key(user_id, episode_id)?, |e| {
                e.conversations.insert(agent.to_owned(), saved.clone());
            })
            .await?;
            Ok(())
        })
    }

    fn recent_turns<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SupportTurn>, BoxError>> {
        Box::pin(async move {
            // A turn holds the user message and up to a few replies; read enough to find `limit`
            // support answers in mixed histories.
            let messages =
                self.store.recent_messages(&key(user_id, episode_id)?, limit.saturating_mul(6)).await?;
            let mut turns = Vec::new();
            for (i, m) in messages.iter().enumerate() {
                if m.role != Role::Assistant
                    || !m.agent.starts_with("support[")
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
        })
    }

    fn record_turn<'a>(
        &'a self,
        _user_id: &'a str,
        _episode_id: &'a str,
        _turn: SupportTurn,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        // History stores the support answer with the rest of the turn.
        Box::pin(async { Ok(()) })
    }

    fn hold_conversation<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        hold: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let key = EpisodeKey::new(user_id, episode_id)?;
            lease::acquire(self.store.clone(), key, &format!("vendor:{agent}"), hold, wait).await
        })
    }
}

impl ResponseChains for StoreBackends {
    fn last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>> {
        Box::pin(async move {
            let episode = self.store.episode(&key(user_id, episode_id)?).await?;
            Ok(episode.and_then(|mut e| e.response_ids.remove(agent)))
        })
    }

    fn set_last_response_id<'a>(
        &'a self,
        user_id: &'a str,
        episode_id: &'a str,
        agent: &'a str,
        response_id: String,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move {
            let key = key(user_id, episode_id)?;
            update_episode(self.store.as_ref(), &key, |e| {
                e.response_ids.insert(agent.to_owned(), response_id.clone());
            })
            .await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{ManualClock, StoredMessage};
    use std::time::SystemTime;

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
        let store = EmbeddedStore::open(dir.path().join("s.redb"), clock).unwrap();
        (dir, Arc::new(store))
    }

    #[tokio::test]
    async fn vendor_state_round_trips_through_the_episode() {
        let (_dir, store) = store().await;
        let b = StoreBackends::new(store);
        assert_eq!(b.conversation("u", "e", "helpdesk").await.unwrap(), None);
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let prompt = crate::support::widget::Prompt {
            text: "pick".into(),
            output_variable: "cv".into(),
            options: vec![crate::support::widget::PromptOption { label: "A".into(), value: "a".into() }],
            fields: Vec::new(),
        };
        let saved =
            SupportConversation { conversation_id: "c1".into(), last_used_at: at, pending: Some(prompt) };
        b.save_conversation("u", "e", "helpdesk", saved.clone()).await.unwrap();
        let got = b.conversation("u", "e", "helpdesk").await.unwrap().unwrap();
        assert_eq!(got, saved, "the id, its time and the open prompt come back");
        b.set_last_response_id("u", "e", "catalog", "resp_9".into()).await.unwrap();
        assert_eq!(b.last_response_id("u", "e", "catalog").await.unwrap().as_deref(), Some("resp_9"));
        assert_eq!(
            b.conversation("u", "e", "helpdesk").await.unwrap().unwrap().conversation_id,
            "c1",
            "both kept"
        );
        assert_eq!(b.last_response_id("other", "e", "catalog").await.unwrap(), None, "scoped to the user");
    }

    #[tokio::test]
    async fn two_agents_keep_separate_response_chains() {
        let (_dir, store) = store().await;
        let b = StoreBackends::new(store);
        b.set_last_response_id("u", "e", "billing", "resp_b1".into()).await.unwrap();
        b.set_last_response_id("u", "e", "travel", "resp_t1".into()).await.unwrap();
        b.set_last_response_id("u", "e", "billing", "resp_b2".into()).await.unwrap();
        assert_eq!(b.last_response_id("u", "e", "billing").await.unwrap().as_deref(), Some("resp_b2"));
        assert_eq!(b.last_response_id("u", "e", "travel").await.unwrap().as_deref(), Some("resp_t1"));
        assert_eq!(b.last_response_id("u", "e", "other").await.unwrap(), None);
    }

    #[tokio::test]
    async fn two_agents_of_one_kind_keep_separate_conversations() {
        let (_dir, store) = store().await;
        let b = StoreBackends::new(store);
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
        let turns = StoreBackends::new(store).recent_turns("u", "e", 2).await.unwrap();
        assert_eq!(
            turns,
            [
                SupportTurn { query: "q2".into(), answer: "a2".into() },
                SupportTurn { query: "q3".into(), answer: "a3".into() }
            ]
        );
    }
}
