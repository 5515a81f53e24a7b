//! Test helpers: the reference routing over in-process agents.

use super::*;
use crate::agent::{LlmAgent, LoopLimits};
use crate::agent_tool::OutputMode;
use crate::model::ChatModel;
use crate::tool::ToolRegistry;

/// The reference routing: `support` follows up, `shopping` is the fallback.
pub(crate) fn settings() -> RoutingSettings {
    RoutingSettings {
        agents: ["support", "shopping"]
            .map(|a| RoutedAgent { agent: a.into(), description: format!("Ask {a}.") })
            .into(),
        followup: Some(Followup::named("support")),
        fallback: "shopping".into(),
        categories: vec!["missing_points".into(), "general".into()],
        guards: Guards::default(),
        smalltalk: Default::default(),
        images: vec![(ImageKind::Receipt, "support".into()), (ImageKind::Product, "shopping".into())],
    }
}

/// An agent that answers with one call of `model` and no tools.
pub(crate) fn plain(name: &str, model: Arc<dyn ChatModel>) -> Arc<dyn Agent> {
    let tools = Arc::new(ToolRegistry::new(Vec::new()).expect("no tools"));
    Arc::new(LlmAgent::new(name, format!("You are {name}."), model, tools, LoopLimits::default()))
}

/// The reference routing agent `orchestrator` over `support` and `shopping` (each with
/// `output: text_and_events`; `timeouts` per child).
pub(crate) fn routed(
    model: Arc<dyn ChatModel>,
    support: Arc<dyn Agent>,
    shopping: Arc<dyn Agent>,
    timeouts: [Option<std::time::Duration>; 2],
) -> Arc<dyn Agent> {
    let settings = settings();
    let children = [support, shopping];
    let tools: Vec<Arc<dyn crate::tool::Tool>> = children
        .iter()
        .zip(timeouts)
        .map(|(agent, timeout)| {
            let description = format!("Ask {}.", agent.name());
            let output = OutputMode::TextAndEvents;
            let options = AgentToolOptions { description, output, timeout, ..Default::default() };
            Arc::new(routing_tool(agent.clone(), &settings, options).expect("valid"))
                as Arc<dyn crate::tool::Tool>
        })
        .collect();
    let registry = Arc::new(ToolRegistry::new(tools).expect("valid tools"));
    let mut agent = LlmAgent::new("orchestrator", "Route.", model, registry, LoopLimits::default())
        .with_policy(Arc::new(RoutingPolicy::new(settings)));
    for child in children {
        agent = agent.with_child(routing_tool_name(child.name()), child);
    }
    Arc::new(agent)
}
