//! The routing policy (`docs/routing.md`): how an entry agent whose agents are its
//! intents decides which of them a turn calls. It hooks the agent's first model step
//! (`crate::agent::StepPolicy`); the agent's tool loop then dispatches the calls it leaves, all
//! at once, and the sub-agents' answers are the turn's answer (no further model call).
//!
//! 1. The model is called with the routing tools `ask_<agent>` (query, prior_context,
//!    intent_count; the follow-up agent's tool also takes the category and summary arguments its
//!    `routing:` config declares, `<agent>_category` and `<agent>_summary` by default). Its
//!    text streams to the client at once (the preamble). For a message that
//!    is not smalltalk, text after the first sentence is held until the model has finished: if it
//!    turns out to be a direct answer the fastpath allowlist refuses, the held part is dropped.
//! 2. **Failsafe**: if a call's `intent_count` exceeds the number of distinct calls, the model is
//!    asked once more, with an instruction naming the calls it made and the count it reported; new
//!    calls are merged without duplicates. One retry at most.
//! 3. **Refused direct answer**: a direct answer to a message that is not smalltalk (or has an
//!    image, or answers the follow-up agent's question) is not guessed at: the model is asked once
//!    more, by the same mechanism (`tool_choice: required` and the reason), and its calls go
//!    through the guards; only if the re-ask makes no call does the fastpath guard send the
//!    message to the fallback agent.
//! 4. The [`crate::guard`]s repair what code can check.
//! 5. The calls' arguments are made valid for their tools: the guards' query and prior context,
//!    an `intent_count` of at least 1, a category from the configured list (another is
//!    dropped, and the repair logged).
//!
//! Which agents are intents, which one follow-ups and switches concern, where a refused direct
//! answer goes and which guards run are [`RoutingSettings`], configured per agent.

pub mod guard;
mod plan;
mod policy;
mod preamble;
mod reask;

use std::sync::Arc;

use serde_json::{Value, json};

pub use policy::{Router, RoutingPolicy};

use crate::agent::{Agent, ChildContext};
use crate::agent_tool::{AgentTool, AgentToolOptions, InputMapping};
use crate::event::agent_name;
use crate::image::ImageKind;
use crate::model::ToolSpec;
use crate::text::Lexicon;
use crate::tool::ToolError;
use guard::{Guards, Roles};

/// The prefix of a routing tool's name: `ask_<agent>`.
pub(crate) const ROUTING_TOOL_PREFIX: &str = "ask_";

/// The routing tool of agent `agent`.
pub(crate) fn routing_tool_name(agent: &str) -> String {
    format!("{ROUTING_TOOL_PREFIX}{agent}")
}

/// One agent the policy routes to.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutedAgent {
    /// The agent's name.
    pub agent: String,
    /// What it does, for the model.
    pub description: String,
}

/// How an agent routes (the `routing:` key of its configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingSettings {
    /// The agents that are intents, each offered as `ask_<agent>`, in configured order.
    pub agents: Vec<RoutedAgent>,
    /// The agent a short reply echoing its question goes back to, whose calls get the previous
    /// turn as prior context on an intent switch, and whose content ends with the
    /// `content_end` boundary in a mixed turn; with its tool's extra arguments.
    pub followup: Option<Followup>,
    /// Where a direct answer the fastpath allowlist refuses is sent.
    pub fallback: String,
    /// The values of the follow-up agent's category argument.
    pub categories: Vec<String>,
    /// Which guards run.
    pub guards: Guards,
    /// What counts as smalltalk (the fastpath allowlist and the preamble gate).
    pub smalltalk: Arc<Lexicon>,
    /// Where a direct answer goes when the user attached an image of a known kind (the
    /// reference deployment sends a receipt to one agent and a product to another).
    pub images: Vec<(ImageKind, String)>,
}

/// The follow-up agent and the extra arguments its routing tool takes, as the `routing:` config
/// declares them (`category_argument`, `summary_argument`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followup {
    /// The agent.
    pub agent: String,
    /// The argument naming the category of the request (one of the configured categories).
    pub category_argument: String,
    /// The argument carrying a one-line summary of the request (capped by the guards).
    pub summary_argument: String,
}

impl Followup {
    /// `agent`, with the default argument names `<agent>_category` and `<agent>_summary`.
    pub fn named(agent: &str) -> Followup {
        Followup {
            agent: agent.to_owned(),
            category_argument: format!("{agent}_category"),
            summary_argument: format!("{agent}_summary"),
        }
    }
}

impl RoutingSettings {
    pub(crate) fn followup_agent(&self) -> Option<&str> {
        self.followup.as_ref().map(|f| f.agent.as_str())
    }

    pub(crate) fn roles(&self, own_agent: &str) -> Roles {
        Roles {
            followup_tool: self.followup_agent().map(routing_tool_name),
            followup_agent: self.followup_agent().map(str::to_owned),
            summary_argument: self.followup.as_ref().map(|f| f.summary_argument.clone()),
            fallback_tool: routing_tool_name(&self.fallback),
            fallback_agent: self.fallback.clone(),
            own_agent: agent_name(own_agent).to_owned(),
            images: self
                .images
                .iter()
                .map(|(kind, agent)| (*kind, routing_tool_name(agent), agent.clone()))
                .collect(),
        }
    }

    /// The JSON Schema of `agent`'s routing tool.
    pub(crate) fn tool_schema(&self, agent: &str) -> Value {
        let intent_count = json!({"type": "integer", "minimum": 1,
            "description": "How many separate intents the user's message has (one call per intent)."});
        let prior_context = json!({"type": "string",
            "description": "Context from earlier turns the sub-agent needs, when the user switches topic."});
        let mut properties = serde_json::Map::new();
        properties.insert(
            "query".into(),
            json!({"type": "string", "description": format!("The user's {agent} request, in their words.")}),
        );
        if let Some(followup) = self.followup.as_ref().filter(|f| f.agent == agent) {
            properties.insert(
                followup.category_argument.clone(),
                json!({"type": "string", "enum": self.categories}),
            );
            properties.insert(
                followup.summary_argument.clone(),
                json!({"type": "string", "maxLength": guard::SUMMARY_MAX_CHARS,
                       "description": format!("One-line summary of the {agent} issue.")}),
            );
        }
        properties.insert("prior_context".into(), prior_context);
        properties.insert("intent_count".into(), intent_count);
        json!({"type": "object", "properties": properties, "required": ["query", "intent_count"]})
    }

    /// The routing tools, as offered to the model.
    pub(crate) fn tool_specs(&self) -> Vec<ToolSpec> {
        self.agents
            .iter()
            .map(|a| ToolSpec {
                name: routing_tool_name(&a.agent),
                description: a.description.clone(),
                parameters: self.tool_schema(&a.agent),
            })
            .collect()
    }

    pub(crate) fn is_tool(&self, name: &str) -> bool {
        self.agents.iter().any(|a| routing_tool_name(&a.agent) == name)
    }
}

/// Agent `agent` as the routing tool `ask_<name>` of an agent routing with `settings`: the
/// routing schema, the `query` and `prior_context` arguments as its input, the conversation in
/// view, its answer the user's (`options` gives the rest: output mode, timeout, depth).
pub fn routing_tool(
    agent: Arc<dyn Agent>,
    settings: &RoutingSettings,
    mut options: AgentToolOptions,
) -> Result<AgentTool, ToolError> {
    options.tool_name = Some(routing_tool_name(agent.name()));
    options.input_schema = Some(settings.tool_schema(agent.name()));
    options.input = InputMapping::Query;
    options.context = ChildContext::Conversation;
    options.skip_summarization = true;
    AgentTool::new(agent, options)
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
