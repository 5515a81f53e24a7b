//! The model's calls as the guards' planned calls, the guards applied, and the arguments made
//! valid for their tools.

use serde_json::{Value, json};

use super::guard::{self, GuardAction, PlannedCall, RoutingInput};
use super::{RoutingSettings, routing_tool_name};
use crate::model::ToolCall;

/// The model's calls as planned calls; names of unknown tools are returned apart.
pub(super) fn plan(
    settings: &RoutingSettings,
    message: &str,
    calls: &[ToolCall],
) -> (Vec<PlannedCall>, Vec<String>) {
    let mut planned = Vec::new();
    let mut unknown = Vec::new();
    for call in calls {
        if !settings.is_tool(&call.name) {
            unknown.push(call.name.clone());
            continue;
        }
        let arguments = call.parse_arguments().unwrap_or_else(|e| {
            tracing::warn!(tool = %call.name, error = %e, "invalid tool arguments; using the user's words");
            Value::Object(Default::default())
        });
        planned.push(PlannedCall::from_arguments(&call.name, arguments, message));
    }
    (planned, unknown)
}

/// Makes each call's arguments valid for its routing tool: at least one intent, a category from
/// the configured list (another is dropped). Returns the repairs.
fn valid_arguments(settings: &RoutingSettings, calls: &mut [PlannedCall]) -> Vec<GuardAction> {
    let mut actions = Vec::new();
    for call in calls {
        let Some(args) = call.arguments.as_object_mut() else { continue };
        if args.get("intent_count").and_then(Value::as_u64).is_none_or(|n| n < 1) {
            args.insert("intent_count".into(), json!(1));
        }
        let Some(followup) = &settings.followup else { continue };
        let is_followup = routing_tool_name(&followup.agent) == call.tool;
        if let Some(category) = args.get(&followup.category_argument).cloned() {
            let known = category.as_str().is_some_and(|c| settings.categories.iter().any(|k| k == c));
            if !known || !is_followup {
                args.remove(&followup.category_argument);
                actions.push(GuardAction::CategoryDropped {
                    tool: call.tool.clone(),
                    category: category.to_string(),
                });
            }
        }
        if !is_followup {
            args.remove(&followup.summary_argument);
        }
    }
    actions
}

/// Applies the guards and makes the calls' arguments valid; the repairs go into `repairs` and
/// the log. Returns the calls, and whether a direct answer was refused.
pub(super) fn repair(
    settings: &RoutingSettings,
    input: &RoutingInput<'_>,
    planned: Vec<PlannedCall>,
    repairs: &mut Vec<GuardAction>,
) -> (Vec<PlannedCall>, bool) {
    let (mut calls, actions) = guard::apply_guards(input, planned);
    let rejected =
        actions.iter().any(|a| matches!(a, GuardAction::FastpathRejected | GuardAction::ImageRouted { .. }));
    repairs.extend(actions);
    repairs.extend(valid_arguments(settings, &mut calls));
    for action in repairs.iter() {
        tracing::info!(?action, "routing repaired the model's routing");
    }
    (calls, rejected)
}
