//! Which of an agent's calls need a person's approval ([`ApprovalPolicy`]), and how a paused
//! step's calls start again on a resumed turn ([`LlmAgent::resume_batch`]): approved calls run
//! never twice (an unknown outcome is reported), rejected ones tell the model, unanswered ones stay pending, paused children
//! resume (docs/approvals.md).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};

use super::LlmAgent;
use super::batch::{Batch, CallDone, pending_call};
use super::step::StepCall;
use crate::approval::{
    CallState, Decision, Decisions, Outcome, ResumeError, SuspendedCall, Suspension, approved_arguments,
    rejected_result,
};
use crate::event::{Event, Interrupt};
use crate::item::{Item, ItemStream};
use crate::model::ToolCall;
use crate::mux::LiveSlotMux;
use crate::tool::{CallOptions, JsonSchema, ToolContext, ToolError, ToolOutcome, ToolRun};

/// When one tool's calls need approval.
#[derive(Debug, Clone)]
pub struct ApprovalRule {
    /// Calls need approval only when their arguments match this schema; every call when `None`.
    pub when: Option<Arc<JsonSchema>>,
    /// Why, for the person.
    pub reason: String,
    /// The argument fields the person may change before approving.
    pub editable: Vec<String>,
}

/// The approval rules of one agent's tools, by tool name as its model calls them (`clip_offer`,
/// `agent__payments`, `ask_billing`, an MCP tool's name).
#[derive(Debug, Clone, Default)]
pub struct ApprovalPolicy {
    rules: HashMap<String, ApprovalRule>,
}

impl ApprovalPolicy {
    /// A policy of `rules`, by tool name.
    pub fn new(rules: HashMap<String, ApprovalRule>) -> ApprovalPolicy {
        ApprovalPolicy { rules }
    }

    /// Whether no call ever needs approval.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether some calls of `tool` may need approval.
    pub fn covers(&self, tool: &str) -> bool {
        self.rules.contains_key(tool)
    }

    /// The rule a call of `tool` with `arguments` falls under, if it needs approval.
    pub fn rule(&self, tool: &str, arguments: &Value) -> Option<&ApprovalRule> {
        let rule = self.rules.get(tool)?;
        match &rule.when {
            Some(schema) if schema.validate(arguments).is_err() => None,
            _ => Some(rule),
        }
    }
}

/// The events and end of a call that did not run but has a result: its start, result and end.
fn settled_call(agent: &str, call: &ToolCall, result: Value, is_error: bool) -> ItemStream<CallDone> {
    let arguments = call.parse_arguments().unwrap_or_else(|_| call.arguments.clone().into());
    let events = [
        Event::ToolCallStart {
            agent: agent.to_owned(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: Box::new(arguments.clone()),
        },
        Event::ToolResult {
            agent: agent.to_owned(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            result: Box::new(result.clone()),
            is_error,
        },
        Event::ToolCallEnd {
            agent: agent.to_owned(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            duration_ms: 0,
        },
    ];
    let done = CallDone { outcome: ToolOutcome { arguments, result, is_error }, answer: None, pending: None };
    Box::pin(futures::stream::iter(events.into_iter().map(Item::Event).chain([Item::Done(done)])))
}

impl LlmAgent {
    /// The interrupt for a call of `tool` by `instance` that `rule` holds back.
    pub(super) fn interrupt(
        &self,
        context: &ToolContext,
        instance: &str,
        call: &ToolCall,
        arguments: &Value,
        rule: &ApprovalRule,
    ) -> Interrupt {
        Interrupt {
            agent: instance.to_owned(),
            interrupt_id: format!("int_{}", crate::store::new_turn_id()),
            path: context.child.approvals.path(instance),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: arguments.clone(),
            reason: rule.reason.clone(),
            editable: rule.editable.clone(),
            expires_at: context.child.approvals.expires_at(),
        }
    }

    /// The paused step's calls, started again on a resumed turn, merged as any step's are.
    pub(super) fn resume_batch(&self, paused: &Suspension, context: &ToolContext, instance: &str) -> Batch {
        let sources: Vec<ItemStream<CallDone>> =
            paused.calls.iter().map(|call| self.resume_call(call, context, instance)).collect();
        LiveSlotMux::new(sources, self.mux)
    }

    fn resume_call(
        &self,
        paused: &SuspendedCall,
        context: &ToolContext,
        instance: &str,
    ) -> ItemStream<CallDone> {
        let call = &paused.call;
        match &paused.state {
            CallState::Done { content, is_error, answer, streamed } => {
                let arguments = call.parse_arguments().unwrap_or_else(|_| call.arguments.clone().into());
                let result = serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.clone()));
                let answer =
                    answer.clone().map(|text| crate::tool::DirectAnswer { text, streamed: *streamed });
                let done = CallDone {
                    outcome: ToolOutcome { arguments, result, is_error: *is_error },
                    answer,
                    pending: None,
                };
                Box::pin(futures::stream::iter([Item::Done(done)]))
            }
            CallState::Child { suspension } => {
                let start = start_event(instance, call);
                let mut context = context.clone();
                context.child.resumes = Some(suspension.instance.clone());
                let run = self.start_call(&StepCall::from(call.clone()), &context, instance, None, true);
                Box::pin(futures::stream::iter([Item::Event(start)]).chain(run))
            }
            CallState::Pending { interrupt } => {
                match context.child.approvals.decision(&interrupt.interrupt_id).cloned() {
                    None => pending_call(interrupt.clone()),
                    Some(decision @ Decision::Reject { .. }) => self.rejected_call(instance, call, decision),
                    Some(decision @ Decision::Approve { .. }) => {
                        self.approved_call(context, instance, call, interrupt, decision)
                    }
                }
            }
        }
    }

    fn rejected_call(&self, instance: &str, call: &ToolCall, decision: Decision) -> ItemStream<CallDone> {
        let Decision::Reject { message } = decision else { unreachable!("a rejection") };
        // Nothing runs: it is recorded as answered when the turn finishes.
        settled_call(instance, call, rejected_result(&call.name, message.as_deref()), true)
    }

    /// An approved call: run once. Its start is recorded before it runs and its result before
    /// the loop goes on; a call an earlier attempt recorded is not run again.
    fn approved_call(
        &self,
        context: &ToolContext,
        instance: &str,
        call: &ToolCall,
        interrupt: &Interrupt,
        decision: Decision,
    ) -> ItemStream<CallDone> {
        let arguments = approved_arguments(&interrupt.arguments, &decision);
        let edited = ToolCall { arguments: arguments.to_string(), ..call.clone() };
        let this = self.clone();
        let (context, instance, id) = (context.clone(), instance.to_owned(), interrupt.interrupt_id.clone());
        Box::pin(async_stream::stream! {
            use futures::StreamExt;
            let Some(claimed) = context.child.approvals.claimed().cloned() else {
                // Not a resumed turn: nothing can record the call, so it does not run.
                let error = json!({"error": {"code": "approval_not_recorded",
                    "message": format!("`{}` was not run: its approval cannot be recorded here", edited.name)}});
                let mut settled = settled_call(&instance, &edited, error, true);
                while let Some(item) = settled.next().await { yield item; }
                return;
            };
            let earlier = claimed.outcome(&id).await;
            let settled = match earlier {
                Some(Outcome::Done { content, is_error }) => {
                    let result = serde_json::from_str(&content).unwrap_or(Value::String(content));
                    Some((result, is_error))
                }
                Some(Outcome::Started) => Some((json!({"error": {"code": "outcome_unknown",
                    "message": format!("`{}` was approved and started by an earlier attempt that stopped before \
                        recording its result; it is not run again", edited.name)}}), true)),
                None => match claimed.record(&id, Outcome::Started).await {
                    Ok(()) => None,
                    Err(e) => {
                        tracing::warn!(interrupt = %id, error = %e, "the approved call's start was not recorded");
                        Some((json!({"error": {"code": "approval_not_recorded",
                            "message": format!("`{}` was not run: its approval could not be recorded ({})",
                                edited.name, e.code())}}), true))
                    }
                },
            };
            if let Some((result, is_error)) = settled {
                let mut settled = settled_call(&instance, &edited, result, is_error);
                while let Some(item) = settled.next().await { yield item; }
                return;
            }
            yield Item::Event(start_event(&instance, &edited));
            let mut run = this.start_call(&StepCall::from(edited.clone()), &context, &instance, None, true);
            while let Some(item) = run.next().await {
                match item {
                    Item::Event(event) => yield Item::Event(event),
                    Item::Done(done) => {
                        let outcome = Outcome::Done { content: done.outcome.content(), is_error: done.outcome.is_error };
                        if let Err(e) = claimed.record(&id, outcome).await {
                            // Its start is recorded: a retry will not run it again.
                            tracing::warn!(interrupt = %id, error = %e, "the approved call's result was not recorded");
                        }
                        yield Item::Done(done);
                    }
                }
            }
        })
    }
}

fn start_event(agent: &str, call: &ToolCall) -> Event {
    Event::ToolCallStart {
        agent: agent.to_owned(),
        call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: Box::new(call.parse_arguments().unwrap_or_else(|_| call.arguments.clone().into())),
    }
}

impl LlmAgent {
    /// A call that waits while the turn's approver asks the person (in the same request): its
    /// `approval_required`, then the tool run with the (possibly edited) arguments, a rejection,
    /// or, when no one could be asked, an `approval_required` error result.
    pub(super) fn asked_call(
        &self,
        interrupt: Interrupt,
        context: ToolContext,
        options: CallOptions,
    ) -> ToolRun {
        let tools = self.tools.clone();
        let items = Box::pin(async_stream::stream! {
            yield Item::Event(Event::ApprovalRequired(Box::new(interrupt.clone())));
            let decision = match context.child.approvals.approver() {
                Some(approver) => approver.decide(&interrupt).await,
                None => None,
            };
            let call = ToolCall {
                id: interrupt.call_id.clone(),
                name: interrupt.tool.clone(),
                arguments: interrupt.arguments.to_string(),
            };
            let run = match decision {
                None => ToolRun::failed(ToolError::ApprovalRequired {
                    tool: interrupt.tool.clone(),
                    reason: interrupt.reason.clone(),
                }),
                Some(Decision::Reject { message }) => {
                    let result = rejected_result(&interrupt.tool, message.as_deref());
                    let message = result["error"]["message"].as_str().unwrap_or_default().to_owned();
                    ToolRun::failed(ToolError::Failed { tool: interrupt.tool.clone(), reason: message })
                }
                Some(decision @ Decision::Approve { .. }) => {
                    let arguments = approved_arguments(&interrupt.arguments, &decision);
                    let edited = ToolCall { arguments: arguments.to_string(), ..call };
                    match tools.check(&edited) {
                        Ok((tool, arguments)) => tool.start(arguments, context, options),
                        Err(refused) => ToolRun::failed(refused.error),
                    }
                }
            };
            let mut items = run.items;
            while let Some(item) = items.next().await {
                yield item;
            }
        });
        ToolRun { items }
    }
}

impl LlmAgent {
    /// Whether the child paused under the call of `tool` can resume: `tool` still starts the
    /// agent that paused, and that agent can resume it.
    fn check_child(&self, tool: &str, paused: &Suspension, decisions: &Decisions) -> Result<(), ResumeError> {
        let changed = |what: String| Err(ResumeError::ConfigChanged(what));
        match self.children.get(tool) {
            None => changed(format!("`{tool}` no longer starts the agent `{}`", paused.agent)),
            Some(child) if child.name() != paused.agent => {
                changed(format!("`{tool}` now starts the agent `{}`, not `{}`", child.name(), paused.agent))
            }
            Some(child) => child.check_resume(paused, decisions),
        }
    }

    /// See [`crate::agent::Agent::check_resume`]: every paused call's tool is still here with the
    /// schema it had, edited arguments pass it, and paused children can resume too.
    pub(super) fn check_paused(&self, paused: &Suspension, decisions: &Decisions) -> Result<(), ResumeError> {
        let changed = |what: String| Err(ResumeError::ConfigChanged(what));
        if paused.agent != self.name {
            return changed(format!("`{}` is now the agent `{}`", paused.instance, self.name));
        }
        for call in &paused.calls {
            let name = &call.call.name;
            let Some(tool) = self.tools.get(name) else {
                return changed(format!("the tool `{name}` of `{}` is gone", self.name));
            };
            match &call.state {
                CallState::Done { .. } => {}
                CallState::Child { suspension } => self.check_child(name, suspension, decisions)?,
                CallState::Pending { interrupt } => {
                    if tool.parameters() != call.schema {
                        return changed(format!("the arguments of `{name}` (agent `{}`) changed", self.name));
                    }
                    if let Some(decision @ Decision::Approve { arguments: Some(_) }) =
                        decisions.get(&interrupt.interrupt_id)
                    {
                        let arguments = approved_arguments(&interrupt.arguments, decision);
                        let edited = ToolCall { arguments: arguments.to_string(), ..call.call.clone() };
                        if let Err(refused) = self.tools.check(&edited) {
                            return Err(ResumeError::InvalidArguments(format!(
                                "interrupt `{}`: {}",
                                interrupt.interrupt_id, refused.error
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The suspended form of a step's calls and how each ended.
pub(super) fn suspended_calls(
    calls: &[ToolCall],
    done: &[CallDone],
    schemas: &dyn Fn(&str) -> Value,
) -> Vec<SuspendedCall> {
    calls
        .iter()
        .zip(done)
        .map(|(call, done)| SuspendedCall {
            call: call.clone(),
            schema: schemas(&call.name),
            state: match &done.pending {
                Some(state) => state.clone(),
                None => CallState::Done {
                    content: done.outcome.content(),
                    is_error: done.outcome.is_error,
                    answer: done.answer.as_ref().map(|a| a.text.clone()),
                    streamed: done.answer.as_ref().is_some_and(|a| a.streamed),
                },
            },
        })
        .collect()
}
