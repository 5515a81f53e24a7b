//! The support sub-agent, in two forms behind the same [`Agent`](baton::agent::Agent) trait:
//!
//! - [`agent::ForethoughtAgent`]: the Forethought Solve API ([`forethought`]), with per-episode
//!   conversation continuity ([`sessions`]).
//! - `help_center::HelpCenterAgent`: offline retrieval over the shipped help-center articles,
//!   used when no Forethought token is configured.
//! - `widget`: Forethought's documented answer (`widget_components`, HTML) read into plain text
//!   and prompts the user can answer.
//! - `scripted` (feature `test-servers`): a Forethought test server on loopback speaking the
//!   documented API.

pub mod agent;
pub mod forethought;
pub(crate) mod help_center;
#[cfg(any(test, feature = "test-servers"))]
pub mod scripted;
pub mod sessions;
pub(crate) mod widget;

/// What support says when the vendor's answer had nothing to show; an `error` event
/// (`support_empty_answer`) precedes it.
pub const SUPPORT_EMPTY: &str =
    "Sorry, our support assistant sent an answer I can't show. Please try rephrasing your question.";

/// What support says when the vendor failed; an `error` event precedes it.
pub const SUPPORT_APOLOGY: &str =
    "\n\nSorry, I can't reach our support assistant right now. Please try again in a moment.";
