//! The one re-ask routing may make: the failsafe's, for calls the model counted but did not
//! make, or a refused direct answer's, for the calls it should have made.

use super::RoutingSettings;
use super::guard::{GuardAction, PlannedCall};
use super::routing_tool_name;
use crate::agent::ModelReply;
use crate::model::{ChatRequest, Message, ToolCall, ToolChoice};

/// Why routing asks the model once more.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reask {
    /// A call reported this many intents, more than the distinct calls made.
    Failsafe(usize),
    /// A direct answer was refused: the model must call a tool.
    DirectAnswer,
}

impl Reask {
    /// The re-ask `planned` needs, if any.
    pub(super) fn of(
        settings: &RoutingSettings,
        planned: &[PlannedCall],
        refused_direct: bool,
    ) -> Option<Reask> {
        match missing_intents(planned).filter(|_| settings.guards.failsafe) {
            Some(intents) => Some(Reask::Failsafe(intents)),
            None if refused_direct => Some(Reask::DirectAnswer),
            None => None,
        }
    }

    /// Its request: the first one, the model's first answer, and why it is asked again.
    pub(super) fn request(
        self,
        settings: &RoutingSettings,
        request: ChatRequest,
        first: &ModelReply,
        planned: &[PlannedCall],
    ) -> ChatRequest {
        match self {
            Reask::Failsafe(intents) => {
                failsafe_request(settings, request, &first.text, &first.calls, intents, planned)
            }
            Reask::DirectAnswer => direct_answer_request(request, &first.text),
        }
    }

    /// Takes the re-ask's calls in: the failsafe adds those not made yet, a refused direct
    /// answer takes them all. Returns the repair.
    pub(super) fn merge(self, planned: &mut Vec<PlannedCall>, new_calls: Vec<PlannedCall>) -> GuardAction {
        match self {
            Reask::Failsafe(intents) => {
                let distinct = distinct_count(planned);
                let mut added = 0;
                for call in new_calls {
                    if !planned.iter().any(|c| c.key() == call.key()) {
                        planned.push(call);
                        added += 1;
                    }
                }
                tracing::info!(intents, calls = distinct, added, "routing failsafe re-asked the model");
                GuardAction::FailsafeReasked { intents, calls: distinct, added }
            }
            Reask::DirectAnswer => {
                tracing::info!(
                    calls = new_calls.len(),
                    "routing re-asked the model after a refused direct answer"
                );
                let action = GuardAction::FastpathReasked { calls: new_calls.len() };
                *planned = new_calls;
                action
            }
        }
    }
}

/// How many distinct calls `calls` makes (by [`PlannedCall::key`]).
fn distinct_count(calls: &[PlannedCall]) -> usize {
    let mut seen = Vec::new();
    for c in calls {
        let key = c.key();
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    seen.len()
}

/// The reported intent count when it exceeds the distinct calls made.
fn missing_intents(calls: &[PlannedCall]) -> Option<usize> {
    let intents = calls.iter().filter_map(PlannedCall::intent_count).max()?;
    (intents > distinct_count(calls)).then_some(intents)
}

/// The failsafe's second request: the first answer, its calls acknowledged, and an instruction
/// naming what was made and what is missing.
fn failsafe_request(
    settings: &RoutingSettings,
    mut request: ChatRequest,
    text: &str,
    calls: &[ToolCall],
    intents: usize,
    planned: &[PlannedCall],
) -> ChatRequest {
    request.messages.push(Message::Assistant {
        content: (!text.is_empty()).then(|| text.to_owned()),
        tool_calls: calls.to_vec(),
    });
    for call in calls {
        request.messages.push(Message::Tool { call_id: call.id.clone(), content: "dispatched".into() });
    }
    let made: Vec<String> = planned.iter().map(|c| format!("{}(\"{}\")", c.tool, c.query)).collect();
    // With two routed agents and one of them called, the missing part is the other's.
    let unused: Vec<String> = settings
        .agents
        .iter()
        .map(|a| routing_tool_name(&a.agent))
        .filter(|t| !planned.iter().any(|c| &c.tool == t))
        .collect();
    let hint = match unused.as_slice() {
        [only] if settings.agents.len() == 2 => format!(" The uncovered part is most likely for {only}."),
        _ => String::new(),
    };
    request.messages.push(Message::system(format!(
        "<failsafe>You reported {intents} separate requests in the user's message but made only {} \
         call(s): {}. \
         Call a tool now for each request that is not covered yet, with that part of the user's own words \
         as the query. Do not repeat the calls above.{hint}</failsafe>",
        made.len(),
        made.join(", "),
    )));
    request.tool_choice = Some(ToolChoice::Required);
    request
}

/// The re-ask after a refused direct answer: the answer, and an instruction saying why it was
/// refused; a tool call is required.
fn direct_answer_request(mut request: ChatRequest, text: &str) -> ChatRequest {
    request.messages.push(Message::Assistant {
        content: (!text.is_empty()).then(|| text.to_owned()),
        tool_calls: Vec::new(),
    });
    request.messages.push(Message::system(
        "<fastpath>You answered the user directly, but their message is not only a greeting, thanks or \
         chitchat: it asks for something, and only a tool can answer it. Call the tool for each request \
         in the message now, with the user's own words as the query. Do not answer it yourself.</fastpath>"
            .to_owned(),
    ));
    request.tool_choice = Some(ToolChoice::Required);
    request
}
