//! Where an agent keeps the vendor's server-side conversation per episode and agent name.

use std::collections::HashMap;
use std::sync::Mutex;

use super::BoxError;

/// Where an agent keeps the vendor's last response id per episode, so its next turn continues the
/// server-side conversation (OpenAI Responses `previous_response_id`) instead of resending it.
///
/// The production implementation lives on the episode record of the store (docs/storage.md); a
/// failing read or write is logged and the turn goes on without server-side context.
#[async_trait::async_trait]
pub trait ResponseChains: Send + Sync {
    /// The last response id of agent `agent` (its name, not an instance) in `episode`, if any.
    async fn last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<String>, BoxError>;

    /// Records `response_id` as agent `agent`'s last response in `episode`.
    async fn set_last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        response_id: String,
    ) -> Result<(), BoxError>;
}

/// [`ResponseChains`] in process memory: for tests, and until a store is configured.
#[derive(Debug, Default)]
pub(crate) struct MemoryResponseChains {
    /// By user, episode and agent name.
    ids: Mutex<HashMap<(String, String, String), String>>,
}

#[async_trait::async_trait]
impl ResponseChains for MemoryResponseChains {
    async fn last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
    ) -> Result<Option<String>, BoxError> {
        let key = (user_id.to_owned(), episode_id.to_owned(), agent.to_owned());
        let id = self.ids.lock().expect("chains lock").get(&key).cloned();
        Ok(id)
    }

    async fn set_last_response_id(
        &self,
        user_id: &str,
        episode_id: &str,
        agent: &str,
        response_id: String,
    ) -> Result<(), BoxError> {
        self.ids
            .lock()
            .expect("chains lock")
            .insert((user_id.to_owned(), episode_id.to_owned(), agent.to_owned()), response_id);
        Ok(())
    }
}
