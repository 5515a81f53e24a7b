//! The shopping agent's tools: `search_offers`, `get_offer`, `purchase_history`, and
//! `clip_offer`, the one with a side effect (examples/approvals.yaml holds it for approval).

use std::sync::Arc;

use serde_json::{Value, json};

use super::catalog::{Catalog, Offer, PurchaseHistory};
use baton::tool::{Tool, ToolContext, ToolError};

/// Tool name: search the catalog.
pub(crate) const SEARCH_OFFERS: &str = "search_offers";
/// Tool name: one offer's details.
pub(crate) const GET_OFFER: &str = "get_offer";
/// Tool name: the user's recent purchases.
pub(crate) const PURCHASE_HISTORY: &str = "purchase_history";

/// What a search result shows of an offer (the details come from `get_offer`).
fn summary(offer: &Offer) -> Value {
    json!({"id": offer.id, "title": offer.title, "points": offer.points, "requirement": offer.requirement,
           "retailer": offer.retailer, "expires": offer.expires})
}

/// `search_offers {query, category?, max_results?}`: ranked offers.
pub(crate) struct SearchOffers {
    catalog: Arc<Catalog>,
}

impl SearchOffers {
    /// The tool over `catalog`.
    pub(crate) fn new(catalog: Arc<Catalog>) -> SearchOffers {
        SearchOffers { catalog }
    }
}

#[async_trait::async_trait]
impl Tool for SearchOffers {
    fn name(&self) -> &str {
        SEARCH_OFFERS
    }

    fn description(&self) -> &str {
        "Search the offer catalog by product, brand or need. Returns the best matching offers, best first."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 200,
                      "description": "What the user is looking for, e.g. \"coffee pods\"."},
            "category": {"type": "string", "enum": self.catalog.categories(),
                         "description": "Only offers in this category."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
        }, "required": ["query"], "additionalProperties": false})
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        let query = arguments["query"].as_str().unwrap_or_default();
        let limit = arguments["max_results"].as_u64().unwrap_or(5) as usize;
        let found = self.catalog.search(query, arguments["category"].as_str(), limit);
        Ok(json!({"query": query, "offers": found.into_iter().map(summary).collect::<Vec<_>>()}))
    }
}

/// `get_offer {offer_id}`: every detail of one offer.
pub(crate) struct GetOffer {
    catalog: Arc<Catalog>,
}

impl GetOffer {
    /// The tool over `catalog`.
    pub(crate) fn new(catalog: Arc<Catalog>) -> GetOffer {
        GetOffer { catalog }
    }
}

#[async_trait::async_trait]
impl Tool for GetOffer {
    fn name(&self) -> &str {
        GET_OFFER
    }

    fn description(&self) -> &str {
        "Get every detail of one offer by its id (from search_offers)."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "offer_id": {"type": "string", "pattern": "^[Oo][Ff][Ff]-[0-9]{4}$", "description": "e.g. off-0042"},
        }, "required": ["offer_id"], "additionalProperties": false})
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        let id = arguments["offer_id"].as_str().unwrap_or_default();
        match self.catalog.get(id) {
            Some(offer) => Ok(json!(offer)),
            None => Err(ToolError::InvalidArguments {
                tool: GET_OFFER.into(),
                reason: format!("no offer has the id `{id}`; use an id from search_offers"),
            }),
        }
    }
}

/// Tool name: clip an offer to the user's card.
pub(crate) const CLIP_OFFER: &str = "clip_offer";

/// `clip_offer {offer}`: clips an offer (an id, or the words of one: the best match) to the
/// user's card, in this process's memory, and lists the card.
pub(crate) struct ClipOffer {
    catalog: Arc<Catalog>,
    cards: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>>,
}

impl ClipOffer {
    /// The tool over `catalog`, clipping to `cards` (by user).
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        cards: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>>,
    ) -> ClipOffer {
        ClipOffer { catalog, cards }
    }
}

#[async_trait::async_trait]
impl Tool for ClipOffer {
    fn name(&self) -> &str {
        CLIP_OFFER
    }

    fn description(&self) -> &str {
        "Clip an offer to the user's card so it applies at checkout (changes the user's card)."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "offer": {"type": "string", "minLength": 1, "maxLength": 200,
                      "description": "The offer's id (off-0042) or what it is for, e.g. \"coffee pods\"."},
        }, "required": ["offer"], "additionalProperties": false})
    }

    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let wanted = arguments["offer"].as_str().unwrap_or_default();
        let offer =
            self.catalog.get(wanted).or_else(|| self.catalog.search(wanted, None, 1).into_iter().next());
        let Some(offer) = offer else {
            return Err(ToolError::InvalidArguments {
                tool: CLIP_OFFER.into(),
                reason: format!("no offer matches `{wanted}`; use an id from search_offers"),
            });
        };
        let mut cards = self.cards.lock().expect("cards lock");
        let card = cards.entry(context.user_id.clone()).or_default();
        if !card.contains(&offer.id) {
            card.push(offer.id.clone());
        }
        Ok(json!({"clipped": summary(offer), "card": card.clone()}))
    }
}

/// `purchase_history {limit?, category?}`: the user's recent purchases.
pub(crate) struct PurchaseHistoryTool {
    history: Arc<dyn PurchaseHistory>,
}

impl PurchaseHistoryTool {
    /// The tool over `history`.
    pub(crate) fn new(history: Arc<dyn PurchaseHistory>) -> PurchaseHistoryTool {
        PurchaseHistoryTool { history }
    }
}

#[async_trait::async_trait]
impl Tool for PurchaseHistoryTool {
    fn name(&self) -> &str {
        PURCHASE_HISTORY
    }

    fn description(&self) -> &str {
        "The user's recent purchases from scanned receipts, newest first."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "category": {"type": "string", "description": "Only purchases in this category."},
        }, "additionalProperties": false})
    }

    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let limit = arguments["limit"].as_u64().unwrap_or(10) as usize;
        let category = arguments["category"].as_str();
        // Filter before the limit: read enough to fill it.
        let read = if category.is_some() { 500 } else { limit };
        let purchases = self.history.purchases(&context.user_id, read).await.map_err(|e| {
            ToolError::Failed { tool: PURCHASE_HISTORY.into(), reason: format!("history unavailable: {e}") }
        })?;
        let purchases: Vec<_> = purchases
            .into_iter()
            .filter(|p| category.is_none_or(|c| p.category.eq_ignore_ascii_case(c)))
            .take(limit)
            .collect();
        Ok(json!({"purchases": purchases}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shopping::catalog::SamplePurchases;
    use baton::model::ToolCall;
    use baton::tool::ToolRegistry;
    use std::time::Duration;

    fn registry() -> ToolRegistry {
        let catalog = Arc::new(Catalog::embedded());
        ToolRegistry::new(vec![
            Arc::new(SearchOffers::new(catalog.clone())),
            Arc::new(GetOffer::new(catalog)),
            Arc::new(PurchaseHistoryTool::new(Arc::new(SamplePurchases::embedded()))),
        ])
        .unwrap()
    }

    async fn call(name: &str, args: Value) -> (Value, bool) {
        let call = ToolCall { id: "c".into(), name: name.into(), arguments: args.to_string() };
        let ctx = ToolContext::new("local", "e");
        let out = registry().call(&call, &ctx, Duration::from_secs(1)).await;
        (out.result, out.is_error)
    }

    #[tokio::test]
    async fn search_then_get_gives_the_details() {
        let (found, err) = call(SEARCH_OFFERS, json!({"query": "cold brew", "max_results": 2})).await;
        assert!(!err);
        let offers = found["offers"].as_array().unwrap();
        assert_eq!(offers.len(), 2);
        let (offer, err) = call(GET_OFFER, json!({"offer_id": offers[0]["id"]})).await;
        assert!(!err);
        assert_eq!(offer["id"], offers[0]["id"]);
        assert!(offer["description"].as_str().unwrap().contains("scan your receipt"));
    }

    #[tokio::test]
    async fn unknown_ids_and_categories_are_errors_the_model_can_fix() {
        let (r, err) = call(GET_OFFER, json!({"offer_id": "off-9999"})).await;
        assert!(err && r["error"]["message"].as_str().unwrap().contains("search_offers"), "{r}");
        let (r, err) = call(GET_OFFER, json!({"offer_id": "coffee"})).await;
        assert!(err && r["error"]["code"] == "invalid_arguments", "{r}");
        let (r, err) = call(SEARCH_OFFERS, json!({"query": "x", "category": "cars"})).await;
        assert!(err && r["error"]["message"].as_str().unwrap().contains("category"), "{r}");
    }

    #[tokio::test]
    async fn purchase_history_is_the_callers_own() {
        let (r, err) = call(PURCHASE_HISTORY, json!({"limit": 3})).await;
        assert!(!err);
        assert_eq!(r["purchases"].as_array().unwrap().len(), 3);
    }
}
