//! Deciding which sub-agents a turn calls (DESIGN.md §4 steps 2–5).
//!
//! [`Router::route`] streams the orchestrator model's answer and ends with a [`Route`]:
//! 1. The model is called with the sub-agent tools. Its text streams to the client at once (the
//!    preamble). For a message that is not smalltalk, text after the first sentence is held until
//!    the model has finished: if it turns out to be a direct answer the fastpath allowlist refuses,
//!    the held part is dropped instead of shown.
//! 2. **Failsafe**: if a call's `intent_count` exceeds the number of distinct calls, the model is
//!    asked once more, with an instruction naming the calls it made and the count it reported; new
//!    calls are merged without duplicates. One retry at most.
//! 3. The [`crate::guard`]s repair what code can check.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::event::{AgentUsage, Event};
use crate::guard::{self, GuardAction, PlannedCall, RoutingInput};
use crate::model::{ChatModel, ChatRequest, Message, ModelDelta, ToolCall, ToolChoice, ToolSpec};
use crate::orchestrator::{ASK_SHOPPING, ASK_SUPPORT, ORCHESTRATOR, TurnConfig, TurnRequest, tool_specs};

/// One step of routing.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteStep {
    /// An event for the client now (preamble text, usage, response id, errors).
    Event(Event),
    /// Routing is decided.
    Decided(Route),
    /// The model failed; an `error` event was already sent.
    Failed,
}

/// The routing decision of a turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Route {
    /// The calls to dispatch; empty for a direct (fastpath) answer.
    pub calls: Vec<PlannedCall>,
    /// What the failsafe and the guards repaired.
    pub actions: Vec<GuardAction>,
    /// Whether the model wrote any text that was shown.
    pub answered: bool,
    /// Token usage of the orchestrator's model calls.
    pub usage: Vec<AgentUsage>,
}

/// The orchestrator's routing: its model, tools and prompt.
pub struct Router {
    model: Arc<dyn ChatModel>,
    tools: Vec<ToolSpec>,
    system_prompt: String,
}

impl Router {
    /// A router over `model` with the turn configuration's prompt and categories.
    pub fn new(model: Arc<dyn ChatModel>, config: &TurnConfig) -> Router {
        Router {
            model,
            tools: tool_specs(&config.support_categories),
            system_prompt: config.system_prompt.clone(),
        }
    }

    /// The orchestrator model.
    pub fn model(&self) -> Arc<dyn ChatModel> {
        self.model.clone()
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        self.model.model_name()
    }

    /// The conversation the orchestrator model sees for `turn`.
    fn request(&self, turn: &TurnRequest) -> ChatRequest {
        let mut messages = vec![Message::system(self.system_prompt.clone())];
        messages.extend(turn.history.iter().cloned());
        let mut content = turn.message.clone();
        if let Some(image) = turn.image_description.as_deref().filter(|d| !d.trim().is_empty()) {
            content.push_str(&format!("\n[The user attached an image: {}]", image.trim()));
        }
        messages.push(Message::user(content));
        ChatRequest {
            messages,
            tools: self.tools.clone(),
            tool_choice: Some(ToolChoice::Auto),
            parallel_tool_calls: Some(true),
            max_tokens: None,
        }
    }

    /// Routes one turn. Dropping the stream cancels the model call.
    pub fn route(self: &Arc<Self>, turn: &TurnRequest) -> impl Stream<Item = RouteStep> + Send + 'static {
        let this = self.clone();
        let turn = turn.clone();
        async_stream::stream! {
            let model_name = this.model.model_name().to_owned();
            let smalltalk = guard::classify_smalltalk(&turn.message).is_some();
            let request = this.request(&turn);
            let mut route = Route::default();
            let mut gate = PreambleGate::new(smalltalk);
            let mut raw_calls: Vec<ToolCall> = Vec::new();
            let mut text = String::new();
            let mut deltas = this.model.stream(request.clone());
            while let Some(delta) = deltas.next().await {
                match delta {
                    Ok(ModelDelta::Text(t)) => {
                        text.push_str(&t);
                        if let Some(shown) = gate.push(t) {
                            route.answered |= !shown.trim().is_empty();
                            yield RouteStep::Event(Event::text(ORCHESTRATOR, shown));
                        }
                    }
                    Ok(ModelDelta::Reasoning(t)) => {
                        yield RouteStep::Event(Event::Reasoning { agent: ORCHESTRATOR.into(), text: t });
                    }
                    Ok(ModelDelta::ResponseId(id)) => {
                        yield RouteStep::Event(Event::ResponseId { agent: ORCHESTRATOR.into(), id });
                    }
                    Ok(ModelDelta::ToolCall(call)) => raw_calls.push(call),
                    Ok(ModelDelta::Usage(usage)) => {
                        route.usage.push(AgentUsage { agent: ORCHESTRATOR.into(), model: model_name.clone(), usage });
                        yield RouteStep::Event(Event::usage(ORCHESTRATOR, model_name.clone(), usage));
                    }
                    Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::Finish(_)) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "orchestrator model call failed");
                        yield RouteStep::Event(Event::error(ORCHESTRATOR, e.code(), e.to_string(), e.is_retryable()));
                        yield RouteStep::Failed;
                        return;
                    }
                }
            }
            drop(deltas);

            let (mut planned, unknown) = plan(&turn.message, &raw_calls);
            for name in unknown {
                tracing::warn!(tool = %name, "orchestrator model called an unknown tool");
                yield RouteStep::Event(Event::error(
                    ORCHESTRATOR,
                    "unknown_tool",
                    format!("the orchestrator model called an unknown tool `{name}`; the call was skipped"),
                    false,
                ));
            }

            if let Some(intents) = missing_intents(&planned) {
                let distinct = distinct_count(&planned);
                let reask = failsafe_request(request, &text, &raw_calls, intents, &planned);
                let mut added = 0;
                let mut deltas = this.model.stream(reask);
                let mut new_calls = Vec::new();
                while let Some(delta) = deltas.next().await {
                    match delta {
                        Ok(ModelDelta::ToolCall(call)) => new_calls.push(call),
                        Ok(ModelDelta::Usage(usage)) => {
                            route.usage.push(AgentUsage { agent: ORCHESTRATOR.into(), model: model_name.clone(), usage });
                            yield RouteStep::Event(Event::usage(ORCHESTRATOR, model_name.clone(), usage));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            // The first answer still stands; the failsafe is best effort.
                            tracing::warn!(error = %e, "failsafe re-ask failed");
                            break;
                        }
                    }
                }
                for call in plan(&turn.message, &new_calls).0 {
                    let dup = planned.iter().any(|c| c.tool == call.tool && guard::normalize(&c.query) == guard::normalize(&call.query));
                    if !dup {
                        planned.push(call);
                        added += 1;
                    }
                }
                tracing::info!(intents, calls = distinct, added, "routing failsafe re-asked the orchestrator model");
                route.actions.push(GuardAction::FailsafeReasked { intents, calls: distinct, added });
            }

            let input = RoutingInput { message: &turn.message, previous: turn.previous.as_ref() };
            let (calls, actions) = guard::apply_guards(&input, planned);
            for action in &actions {
                tracing::info!(?action, "routing guard repaired the model's routing");
            }
            let rejected = actions.contains(&GuardAction::FastpathRejected);
            route.actions.extend(actions);
            route.calls = calls;
            let held = gate.release();
            if rejected {
                if !held.trim().is_empty() {
                    tracing::info!(chars = held.len(), "withheld a direct answer the fastpath allowlist refused");
                }
            } else if !held.is_empty() {
                route.answered |= !held.trim().is_empty();
                yield RouteStep::Event(Event::text(ORCHESTRATOR, held));
            }
            yield RouteStep::Decided(route);
        }
    }
}

/// The model's calls as planned calls; names of unknown tools are returned apart.
fn plan(message: &str, calls: &[ToolCall]) -> (Vec<PlannedCall>, Vec<String>) {
    let mut planned = Vec::new();
    let mut unknown = Vec::new();
    for call in calls {
        if call.name != ASK_SUPPORT && call.name != ASK_SHOPPING {
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

fn distinct_count(calls: &[PlannedCall]) -> usize {
    let mut seen: Vec<(&str, String)> = Vec::new();
    for c in calls {
        let key = (c.tool.as_str(), guard::normalize(&c.query));
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
    let tools_used: Vec<&str> = planned.iter().map(|c| c.tool.as_str()).collect();
    let hint = match (tools_used.contains(&ASK_SUPPORT), tools_used.contains(&ASK_SHOPPING)) {
        (true, false) => format!(" The uncovered part is most likely for {ASK_SHOPPING}."),
        (false, true) => format!(" The uncovered part is most likely for {ASK_SUPPORT}."),
        _ => String::new(),
    };
    request.messages.push(Message::system(format!(
        "<failsafe>You reported {intents} separate requests in the user's message but made only {} call(s): {}. \
         Call a tool now for each request that is not covered yet, with that part of the user's own words \
         as the query. Do not repeat the calls above.{hint}</failsafe>",
        made.len(),
        made.join(", "),
    )));
    request.tool_choice = Some(ToolChoice::Required);
    request
}

/// Streams text at once up to the end of its first sentence; for messages that are not smalltalk
/// holds the rest until routing is decided.
struct PreambleGate {
    open: bool,
    first_sentence_done: bool,
    held: String,
}

impl PreambleGate {
    fn new(smalltalk: bool) -> PreambleGate {
        PreambleGate { open: smalltalk, first_sentence_done: false, held: String::new() }
    }

    /// The part of `text` to show now.
    fn push(&mut self, text: String) -> Option<String> {
        if self.open {
            return Some(text);
        }
        if self.first_sentence_done {
            self.held.push_str(&text);
            return None;
        }
        match text.find(['.', '!', '?', '\n']) {
            Some(end) => {
                self.first_sentence_done = true;
                let (shown, rest) = text.split_at(end + 1);
                self.held.push_str(rest);
                Some(shown.to_owned())
            }
            None => Some(text),
        }
    }

    fn release(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::scripted::{Reply, ScriptedModel};
    use serde_json::json;

    fn turn(message: &str) -> TurnRequest {
        TurnRequest::new("ep", "t", "u", message)
    }

    async fn route_of(model: Arc<ScriptedModel>, message: &str) -> (Vec<RouteStep>, Route) {
        let router = Arc::new(Router::new(model, &TurnConfig::default()));
        let steps: Vec<RouteStep> = router.route(&turn(message)).collect().await;
        let Some(RouteStep::Decided(route)) = steps.last().cloned() else { panic!("{steps:?}") };
        (steps, route)
    }

    fn shown_text(steps: &[RouteStep]) -> String {
        steps
            .iter()
            .filter_map(|s| match s {
                RouteStep::Event(Event::Text { text, .. }) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn failsafe_reasks_once_and_merges_the_missing_call() {
        let model = Arc::new(ScriptedModel::new("orch", None));
        model.push(
            Reply::text("On it.")
                .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2})),
        );
        model.push(
            Reply::text("")
                .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2}))
                .tool_call(ASK_SHOPPING, json!({"query": "coffee deals", "intent_count": 2})),
        );
        let (_, route) = route_of(model.clone(), "my receipt didn't scan and find me coffee deals").await;
        let calls: Vec<(&str, &str)> =
            route.calls.iter().map(|c| (c.tool.as_str(), c.query.as_str())).collect();
        assert_eq!(calls, [(ASK_SUPPORT, "receipt didn't scan"), (ASK_SHOPPING, "coffee deals")]);
        assert_eq!(route.actions[0], GuardAction::FailsafeReasked { intents: 2, calls: 1, added: 1 });
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "one re-ask, no more");
        let instruction = requests[1].system_text_last();
        assert!(
            instruction.contains("2 separate requests")
                && instruction.contains("ask_support(\"receipt didn't scan\")")
        );
        assert!(instruction.contains("most likely for ask_shopping"), "{instruction}");
        assert_eq!(requests[1].tool_choice, Some(ToolChoice::Required));
    }

    #[tokio::test]
    async fn failsafe_is_bounded_to_one_retry() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(Reply::text("").tool_call(ASK_SUPPORT, json!({"query": "points", "intent_count": 3}))),
        ));
        let (_, route) = route_of(model.clone(), "points").await;
        assert_eq!(model.requests().len(), 2);
        assert_eq!(route.calls.len(), 1);
    }

    #[tokio::test]
    async fn a_refused_direct_answer_shows_only_its_first_sentence() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(Reply::text("Returns are easy. You have 90 days and a full refund.")),
        ));
        let (steps, route) = route_of(model, "what is the return policy on shoes").await;
        assert_eq!(shown_text(&steps), "Returns are easy.");
        assert_eq!(route.calls[0].tool, ASK_SHOPPING);
        assert!(route.actions.contains(&GuardAction::FastpathRejected));
    }

    #[tokio::test]
    async fn a_preamble_longer_than_a_sentence_is_shown_whole_once_calls_follow() {
        let model = Arc::new(ScriptedModel::new(
            "orch",
            Some(
                Reply::text("Sure. Let me look.")
                    .tool_call(ASK_SHOPPING, json!({"query": "shoes", "intent_count": 1})),
            ),
        ));
        let (steps, route) = route_of(model, "find me shoes").await;
        assert_eq!(shown_text(&steps), "Sure. Let me look.");
        assert!(route.answered);
    }

    #[tokio::test]
    async fn smalltalk_streams_its_whole_answer_live() {
        let model =
            Arc::new(ScriptedModel::new("orch", Some(Reply::text("Hi! Good to see you. How can I help?"))));
        let (steps, route) = route_of(model, "hello").await;
        let texts = steps.iter().filter(|s| matches!(s, RouteStep::Event(Event::Text { .. }))).count();
        assert!(texts > 3, "word by word, not held");
        assert!(route.calls.is_empty());
    }
}
