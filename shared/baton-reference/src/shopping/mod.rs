//! The shopping sub-agent's parts: an [`baton::agent::LlmAgent`] (configured in
//! `config/baton.yaml`) with offer search, offer details and purchase history
//! over the generated catalog (`data/catalog.json`).
//!
//! - [`catalog`]: offers, their BM25 index, and the [`catalog::PurchaseHistory`] trait.
//! - [`tools`]: `search_offers`, `get_offer`, `purchase_history`.

pub(crate) mod catalog;
pub(crate) mod tools;
