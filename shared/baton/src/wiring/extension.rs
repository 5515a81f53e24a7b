//! What a deployment adds to the generic runtime at its composition root: tools its agents list
//! by name, agent kinds its entries name with `kind:`, where ratings of those agents' answers
//! go, and what the offline model knows of its tools. The runtime names none of them; the
//! reference deployment (`baton-reference`) is one implementation.

use std::sync::Arc;

use crate::agent::Agent;
use crate::config::ConfigError;
use crate::config::agents::AgentSpec;
use crate::model::offline::OfflineSkill;
use crate::rating::RatingSink;
use crate::tool::Tool;

/// A deployment's own tools and agent kinds (see the module docs). Built once at start, with
/// whatever per-episode state and vendor clients its parts need.
pub trait Extension: Send + Sync {
    /// The names of the tools it adds, as agents list them in `tools:`.
    fn tool_names(&self) -> Vec<&str>;

    /// The tool named `name` (one of [`Extension::tool_names`]).
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>>;

    /// The agent kinds it adds, as entries name them in `kind:`.
    fn agent_kinds(&self) -> Vec<&str> {
        Vec::new()
    }

    /// An agent of `kind` (one of [`Extension::agent_kinds`]) for the entry `spec`; the runtime
    /// names it `spec.name`.
    fn agent(&self, kind: &str, spec: &AgentSpec) -> Result<Arc<dyn Agent>, ConfigError> {
        let _ = spec;
        Err(ConfigError::Extension { what: format!("agent kind `{kind}`"), reason: "not built here".into() })
    }

    /// Where ratings of the in-process agent `spec`'s answers go (it is of one of this
    /// extension's kinds); `None` when they cannot be rated.
    fn rating_sink(&self, spec: &AgentSpec) -> Option<Arc<dyn RatingSink>> {
        let _ = spec;
        None
    }

    /// What the offline model knows of its tools' results.
    fn offline_skill(&self) -> Option<Arc<dyn OfflineSkill>> {
        None
    }
}
