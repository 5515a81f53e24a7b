//! The shopping sub-agent: an [`LlmAgent`] with offer search, offer details and purchase history
//! over the generated catalog (`data/catalog.json`).
//!
//! - [`catalog`]: offers, their BM25 index, and the [`catalog::PurchaseHistory`] trait.
//! - [`tools`]: `search_offers`, `get_offer`, `purchase_history`.

pub mod catalog;
pub mod tools;

use std::sync::Arc;

use crate::agent::{LlmAgent, LoopLimits, ResponseChains};
use crate::model::ChatModel;
use crate::tool::{ToolError, ToolRegistry};
use catalog::{Catalog, PurchaseHistory};

/// The shopping agent's instructions.
pub const SHOPPING_PROMPT: &str = "\
<role>You are the shopping agent of a receipt-rewards app: you help the user find offers (buy a \
product, scan the receipt, earn points) and look at what they bought.</role>
<rules>
<rule>Only mention offers that a tool returned, with their points and id; never invent offers.</rule>
<rule>Search with the user's own words first; narrow by category when the user names one.</rule>
<rule>Use purchase_history when the user asks what they bought or for offers like their usual items.</rule>
<rule>Account, receipt and points problems are not yours: say that support handles them, in one sentence.</rule>
<rule>Be brief: at most five offers, one line each.</rule>
</rules>";

/// The shopping agent over `model`, with the three tools.
pub fn shopping_agent(
    model: Arc<dyn ChatModel>,
    catalog: Arc<Catalog>,
    purchases: Arc<dyn PurchaseHistory>,
    limits: LoopLimits,
    chains: Option<Arc<dyn ResponseChains>>,
) -> Result<LlmAgent, ToolError> {
    let tools = ToolRegistry::new(vec![
        Arc::new(tools::SearchOffers::new(catalog.clone())),
        Arc::new(tools::GetOffer::new(catalog)),
        Arc::new(tools::PurchaseHistoryTool::new(purchases)),
    ])?;
    let agent = LlmAgent::new("shopping", SHOPPING_PROMPT, model, Arc::new(tools), limits);
    Ok(match chains {
        Some(chains) => agent.with_response_chains(chains),
        None => agent,
    })
}
