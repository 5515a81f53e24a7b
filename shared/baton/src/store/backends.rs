//! Agent state kept in the store's [`Conversations`]: each routed agent's last Responses API id lives on the
//! episode item, by agent name. (A vendor's conversation per agent lives there too, in
//! [`super::Episode::conversations`]; the extension that talks to the vendor reads and writes it.)

use std::sync::Arc;

use super::{Conversations, EpisodeKey, update_episode};
use crate::agent::{BoxError, ResponseChains};

/// [`ResponseChains`] over a store's [`Conversations`].
#[derive(Clone)]
pub(crate) struct StoreBackends {
    store: Arc<dyn Conversations>,
}

impl StoreBackends {
    /// State in `store`.
    pub(crate) fn new(store: Arc<dyn Conversations>) -> StoreBackends {
        StoreBackends { store }
    }
}

fn key(user_id: &str, episode_id: &str) -> Result<EpisodeKey, BoxError> {
    Ok(EpisodeKey::new(user_id, episode_id)?)
}

#[async_trait::async_trait]
impl ResponseChains for StoreBackends {
    async fn last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<String>, BoxError> {
        let episode = self.store.episode(&key(user_id, episode_id)?).await?;
        Ok(episode.and_then(|mut e| e.response_ids.remove(agent)))
    }

    async fn set_last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        response_id: String,
    ) -> Result<(), BoxError> {
        let key = key(user_id, episode_id)?;
        update_episode(self.store.as_ref(), &key, |e| {
            e.response_ids.insert(agent.to_owned(), response_id.clone());
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ManualClock;
    use crate::store::embedded::EmbeddedStore;
    use std::time::{Duration, SystemTime};

    async fn store() -> (tempfile::TempDir, Arc<dyn Conversations>) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
        let store = EmbeddedStore::open(dir.path().join("s.redb"), clock).unwrap();
        (dir, Arc::new(store))
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
}
