//! [`Reference`]: what the reference deployment adds to the runtime, as one
//! [`Extension`]: the `support` agent kind (Forethought when configured, the offline help center
//! otherwise), the built-in tools (`search_offers`, `get_offer`, `purchase_history`,
//! `search_help_center`), Forethought as the rating sink of support answers, and the offline
//! model's skill with these tools.

use std::sync::{Arc, OnceLock};

use baton::agent::Agent;
use baton::config::ConfigError;
use baton::config::agents::AgentSpec;
use baton::model::offline::OfflineSkill;
use baton::rating::RatingSink;
use baton::store::Store;
use baton::tool::Tool;
use baton::wiring::Extension;

use crate::offline::ReferenceSkill;
use crate::shopping::catalog::{Catalog, PurchaseHistory, SamplePurchases};
use crate::shopping::tools::{
    CLIP_OFFER, ClipOffer, GET_OFFER, GetOffer, PURCHASE_HISTORY, PurchaseHistoryTool, SEARCH_OFFERS,
    SearchOffers,
};
use crate::support::agent::ForethoughtAgent;
use crate::support::forethought::{ForethoughtClient, ForethoughtConfig, VendorError};
use crate::support::help_center::{HelpCenter, HelpCenterAgent, SEARCH_HELP_CENTER, SearchHelpCenter};
use crate::support::sessions::{Clock, MemorySupportSessions, StoreSessions, SupportSessions, SystemClock};

/// The agent kind of the reference support agent (`kind: support`).
pub const SUPPORT_KIND: &str = "support";

/// The tools this deployment adds.
const TOOLS: [&str; 5] = [SEARCH_OFFERS, GET_OFFER, PURCHASE_HISTORY, SEARCH_HELP_CENTER, CLIP_OFFER];

/// The reference deployment's extension (see the module docs).
pub struct Reference {
    forethought: Option<ForethoughtClient>,
    sessions: Arc<dyn SupportSessions>,
    clock: Arc<dyn Clock>,
    purchases: Arc<dyn PurchaseHistory>,
    offers: OnceLock<Arc<Catalog>>,
    help: OnceLock<Arc<HelpCenter>>,
    /// The offers each user clipped (`clip_offer`), in this process's memory.
    cards: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>>,
}

impl Reference {
    /// Support on Forethought when `forethought` is given (the help center otherwise), its
    /// conversations in `sessions`, time from `clock`, purchases from `purchases`.
    pub fn new(
        forethought: Option<ForethoughtConfig>,
        sessions: Arc<dyn SupportSessions>,
        clock: Arc<dyn Clock>,
        purchases: Arc<dyn PurchaseHistory>,
    ) -> Result<Reference, VendorError> {
        let forethought = forethought.map(ForethoughtClient::new).transpose()?;
        Ok(Reference {
            forethought,
            sessions,
            clock,
            purchases,
            offers: OnceLock::new(),
            help: OnceLock::new(),
            cards: Arc::default(),
        })
    }

    /// Support state in process memory, the system clock, the sample purchase history.
    pub fn in_memory(forethought: Option<ForethoughtConfig>) -> Result<Reference, VendorError> {
        let sessions = Arc::new(MemorySupportSessions::default());
        Reference::new(forethought, sessions, Arc::new(SystemClock), Arc::new(SamplePurchases::embedded()))
    }

    /// Support state in `store` (conversations on the episode, turns from its history, leases),
    /// the store's clock, the sample purchase history.
    pub fn over_store(
        forethought: Option<ForethoughtConfig>,
        store: Arc<dyn Store>,
    ) -> Result<Reference, VendorError> {
        let sessions = Arc::new(StoreSessions::new(store.clone()));
        let purchases = Arc::new(SamplePurchases::embedded());
        Reference::new(forethought, sessions, Arc::new(StoreClock(store)), purchases)
    }

    /// The help center, shared by the offline support agent and `search_help_center`.
    fn help_center(&self) -> Arc<HelpCenter> {
        self.help.get_or_init(|| Arc::new(HelpCenter::embedded())).clone()
    }

    fn offers(&self) -> Arc<Catalog> {
        self.offers.get_or_init(|| Arc::new(Catalog::embedded())).clone()
    }
}

impl Extension for Reference {
    fn tool_names(&self) -> Vec<&str> {
        TOOLS.to_vec()
    }

    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        Some(match name {
            SEARCH_OFFERS => Arc::new(SearchOffers::new(self.offers())),
            GET_OFFER => Arc::new(GetOffer::new(self.offers())),
            PURCHASE_HISTORY => Arc::new(PurchaseHistoryTool::new(self.purchases.clone())),
            SEARCH_HELP_CENTER => Arc::new(SearchHelpCenter::new(self.help_center())),
            CLIP_OFFER => Arc::new(ClipOffer::new(self.offers(), self.cards.clone())),
            _ => return None,
        })
    }

    fn agent_kinds(&self) -> Vec<&str> {
        vec![SUPPORT_KIND]
    }

    fn agent(&self, kind: &str, spec: &AgentSpec) -> Result<Arc<dyn Agent>, ConfigError> {
        if kind != SUPPORT_KIND {
            return Err(ConfigError::Extension {
                what: format!("agent `{}`", spec.name),
                reason: format!("the reference deployment builds no `{kind}` agent"),
            });
        }
        Ok(match &self.forethought {
            Some(client) => {
                Arc::new(ForethoughtAgent::new(client.clone(), self.sessions.clone(), self.clock.clone()))
            }
            None => Arc::new(HelpCenterAgent::new(self.help_center())),
        })
    }

    /// Forethought's CSAT endpoint, when support is on Forethought (the offline help center's
    /// answers cannot be rated).
    fn rating_sink(&self, _spec: &AgentSpec) -> Option<Arc<dyn RatingSink>> {
        self.forethought.clone().map(|client| Arc::new(client) as Arc<dyn RatingSink>)
    }

    fn offline_skill(&self) -> Option<Arc<dyn OfflineSkill>> {
        Some(Arc::new(ReferenceSkill))
    }
}

/// The clock of a store, shared as an `Arc<dyn Clock>`.
#[derive(Clone)]
struct StoreClock(Arc<dyn Store>);

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

impl Clock for StoreClock {
    fn now(&self) -> std::time::SystemTime {
        self.0.clock().now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry compiles a tool's schema on its first call, so a broken built-in schema would
    /// only show then: every built-in schema is compiled here.
    #[test]
    fn every_built_in_tool_schema_compiles() {
        let reference = Reference::in_memory(None).unwrap();
        for name in reference.tool_names() {
            let tool = reference.tool(name).expect("a built-in tool");
            baton::tool::JsonSchema::compile(&tool.parameters()).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(reference.tool("nope").is_none());
    }
}
