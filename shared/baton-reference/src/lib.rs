//! Baton's reference deployment: a receipt-rewards assistant on the generic runtime. Its
//! orchestrator routes between a support agent (the Forethought Solve API, or the offline help
//! center) and a shopping agent (a model with offer-catalog and purchase-history tools), as
//! `config/baton.yaml` declares them.
//!
//! The runtime (`baton`) names none of this: everything here comes in through
//! [`baton::wiring::Extension`] ([`Reference`]) and a configuration file ([`REFERENCE_CONFIG`]).
//!
//! # Layout
//! Top to bottom; a module uses modules below it, never above.
//! - [`settings`]: [`settings::ReferenceSettings`], the flags and environment variables of the
//!   reference's own parts (the shopping agent's model and where it runs, Forethought).
//! - `deployment`: [`Deployment`]: the reference configuration with its Forethought settings,
//!   checked, and the backends and extension it builds over memory or a store.
//! - `extension`: [`Reference`], the extension: the `support` agent kind, the built-in tools,
//!   the rating sink of support answers, the offline model's skill.
//! - `offline`: what the offline model knows of these tools (offers as a list, articles with
//!   their citation; it searches offers with the user's words).
//! - [`support`]: the support agent: Forethought (with continuity, widgets, leases) or the
//!   offline help center; its per-episode state in memory or in the store.
//! - `shopping`: the shopping tools over the offer catalog and purchase history.

pub(crate) mod deployment;
pub(crate) mod extension;
pub(crate) mod offline;
pub mod settings;
pub(crate) mod shopping;
pub mod support;

pub use deployment::{Deployment, REFERENCE, REFERENCE_CONFIG, reference_config};
pub use extension::{Reference, SUPPORT_KIND};
pub use settings::ReferenceSettings;
