//! Approvals (docs/approvals.md): a tool call that needs a person's approval pauses the turn,
//! and the next request on the episode, on any instance, answers it and goes on.
//!
//! A call that needs approval is not made. Its agent instance finishes the step's other calls,
//! then pauses: its [`Suspension`] (its transcript, the step's finished results, the pending
//! call) goes to the turn's [`TurnApprovals`]; its caller's call of it is then pending too, and
//! so on up to the entry agent. The turn stores the tree (`PendingApprovals`, one record per
//! episode, with a TTL) and ends `interrupted`. A resume request answers interrupts by id: the
//! tree is restored bottom-up, each approved call is sent never twice (its start and outcome are recorded in
//! the record before the loop goes on; a retried resume finds it), a rejected call's result
//! tells the model the person said no, and each suspended loop continues to one answer.
//!
//! # Layout
//! - this file: the paused state ([`Suspension`]), a person's [`Decision`], and the turn's handle
//!   ([`TurnApprovals`]) that agents pause into and read decisions and recorded outcomes from;
//! - `record`: the stored record, its checks for a resume request, and its writes (claim,
//!   outcomes, close), each a conditional write in the store.

mod record;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use record::ClaimedResume;
pub use record::{ApprovalStore, ResumeError, summary};

use crate::event::Interrupt;
use crate::model::{Message, ToolCall};
use crate::store::Store;

/// How long an interrupt waits for its answer unless configured otherwise.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(24 * 3600);

/// One agent instance paused for approvals: everything its loop needs to go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspension {
    /// The agent's name (which configured agent rebuilds it).
    pub agent: String,
    /// The instance (`Name[i]`, or the entry agent's name); a resumed instance keeps it.
    pub instance: String,
    /// Its depth below the turn.
    pub depth: u32,
    /// What it was asked.
    pub query: String,
    /// Its session state.
    pub state: serde_json::Map<String, Value>,
    /// Its transcript after the system prompt, up to the model's message whose calls paused.
    pub messages: Vec<Message>,
    /// The step that paused (0 is the first).
    pub step: usize,
    /// Whether that step's results are the run's answer, with no further model call (a step
    /// policy marked it last).
    #[serde(default)]
    pub last: bool,
    /// That step's calls, in the model's order.
    pub calls: Vec<SuspendedCall>,
}

/// One call of a paused step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspendedCall {
    /// The call as the model made it.
    pub call: ToolCall,
    /// The tool's argument schema when it paused (a resume whose tool changed is refused).
    #[serde(default)]
    pub schema: Value,
    /// Where it stands.
    pub state: CallState,
}

/// Where one call of a paused step stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallState {
    /// It finished: the result its model reads.
    Done {
        /// The result's text.
        content: String,
        /// Whether it is an error.
        is_error: bool,
        /// The user's answer as is (a `skip_summarization` agent), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// Whether the client has already seen that answer.
        #[serde(default)]
        streamed: bool,
    },
    /// It waits for a person.
    Pending {
        /// What the person is asked.
        interrupt: Interrupt,
    },
    /// It started a child instance (an agent tool) that paused.
    Child {
        /// The child's state.
        suspension: Box<Suspension>,
    },
}

impl Suspension {
    /// Every interrupt still waiting in this tree, depth first in call order.
    pub fn interrupts(&self) -> Vec<Interrupt> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<Interrupt>) {
        for call in &self.calls {
            match &call.state {
                CallState::Pending { interrupt } => out.push(interrupt.clone()),
                CallState::Child { suspension } => suspension.collect(out),
                CallState::Done { .. } => {}
            }
        }
    }

    /// Every instance name in the tree, for the resumed turn's numbering.
    pub fn instances(&self) -> Vec<String> {
        let mut out = vec![self.instance.clone()];
        for call in &self.calls {
            if let CallState::Child { suspension } = &call.state {
                out.extend(suspension.instances());
            }
        }
        out
    }
}

/// A person's answer to one interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Run the call, with the edited arguments merged over the model's where given.
    Approve {
        /// Fields the person changed (only those the configuration lets them edit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Map<String, Value>>,
    },
    /// Do not run it; the model reads that the person said no, and why.
    Reject {
        /// What the person said, if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// A resume request's decisions, by interrupt id.
pub(crate) type Decisions = HashMap<String, Decision>;

/// What became of an approved call, recorded under its interrupt id before the loop goes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// It was started and nothing more was recorded: the process may have stopped during the
    /// call. It is never started again.
    Started,
    /// It ended: the result its model read.
    Done {
        /// The result's text.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
}

/// Someone who can answer an approval while the call waits, in the same request (an MCP client,
/// through elicitation).
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The person's answer to `interrupt`, or `None` when they could not be asked (the call is
    /// then refused). Bounded by the approver's own timeout.
    async fn decide(&self, interrupt: &Interrupt) -> Option<Decision>;
}

/// What a turn does with a call that needs approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// The call is refused with an `approval_required` error result: no one can approve it here
    /// (the evaluation, an MCP client, a remote caller). The default: a call that needs approval
    /// never runs unapproved.
    #[default]
    Refuse,
    /// The turn pauses and stores what a resume needs (the chat endpoint, `chat`).
    Pause,
    /// The call waits while an [`Approver`] asks the person, then runs or is rejected (agents
    /// served over MCP to a client that supports elicitation).
    Ask,
}

/// A turn's approvals: where paused instances leave their state, and, on a resumed turn, the
/// person's decisions and the record of approved calls. Clones share it; the default refuses
/// every call that needs approval.
#[derive(Clone, Default)]
pub struct TurnApprovals {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    mode: Mode,
    ttl: Duration,
    /// Whose clock interrupts expire by.
    store: Option<Arc<dyn Store>>,
    /// Who answers in [`Mode::Ask`].
    approver: Option<Arc<dyn Approver>>,
    paused: Mutex<HashMap<String, Suspension>>,
    /// Each child instance's caller, for the path an interrupt names.
    parents: Mutex<HashMap<String, String>>,
    /// The suspension each resumed instance starts from, by instance.
    resume: HashMap<String, Suspension>,
    decisions: HashMap<String, Decision>,
    outcomes: Option<ClaimedResume>,
}

impl std::fmt::Debug for TurnApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnApprovals").field("mode", &self.mode()).finish()
    }
}

impl TurnApprovals {
    /// A turn that pauses for approvals kept in `store`, whose interrupts expire after `ttl`
    /// by the store's clock ([`ApprovalStore::pausing`]).
    pub(crate) fn pausing(ttl: Duration, store: Arc<dyn Store>) -> TurnApprovals {
        TurnApprovals::with(Mode::Pause, ttl, Some(store), None, HashMap::new())
    }

    /// A turn that resumes `claimed` with `decisions` ([`ApprovalStore::resume`]).
    pub(crate) fn resuming(
        ttl: Duration,
        store: Arc<dyn Store>,
        claimed: ClaimedResume,
        decisions: Decisions,
    ) -> TurnApprovals {
        TurnApprovals::with(Mode::Pause, ttl, Some(store), Some(claimed), decisions)
    }

    fn with(
        mode: Mode,
        ttl: Duration,
        store: Option<Arc<dyn Store>>,
        outcomes: Option<ClaimedResume>,
        decisions: HashMap<String, Decision>,
    ) -> TurnApprovals {
        let mut resume = HashMap::new();
        if let Some(claimed) = &outcomes {
            let mut stack = vec![claimed.root().clone()];
            while let Some(s) = stack.pop() {
                for call in &s.calls {
                    if let CallState::Child { suspension } = &call.state {
                        stack.push((**suspension).clone());
                    }
                }
                resume.insert(s.instance.clone(), s);
            }
        }
        let mut parents = HashMap::new();
        for s in resume.values() {
            for call in &s.calls {
                if let CallState::Child { suspension } = &call.state {
                    parents.insert(suspension.instance.clone(), s.instance.clone());
                }
            }
        }
        TurnApprovals {
            inner: Some(Arc::new(Inner {
                mode,
                ttl,
                store,
                approver: None,
                paused: Mutex::default(),
                parents: Mutex::new(parents),
                resume,
                decisions,
                outcomes,
            })),
        }
    }

    /// A turn whose calls that need approval wait for `approver`'s answer.
    pub fn asking(approver: Arc<dyn Approver>) -> TurnApprovals {
        let mut approvals = TurnApprovals::with(Mode::Ask, DEFAULT_APPROVAL_TTL, None, None, HashMap::new());
        if let Some(inner) = approvals.inner.as_mut().and_then(Arc::get_mut) {
            inner.approver = Some(approver);
        }
        approvals
    }

    /// Where this turn keeps its approvals: the record a pause is saved in and a new message
    /// dismisses; `None` for a turn that keeps none (it cannot pause).
    pub fn record(&self) -> Option<ApprovalStore> {
        let inner = self.inner.as_ref()?;
        Some(ApprovalStore::new(inner.store.clone()?, inner.ttl))
    }

    /// Who answers in [`Mode::Ask`].
    pub fn approver(&self) -> Option<&Arc<dyn Approver>> {
        self.inner.as_ref()?.approver.as_ref()
    }

    /// What a call that needs approval does in this turn.
    pub fn mode(&self) -> Mode {
        self.inner.as_ref().map_or(Mode::Refuse, |i| i.mode)
    }

    /// When an interrupt raised now expires (Unix seconds, by the store's clock).
    pub fn expires_at(&self) -> u64 {
        let ttl = self.inner.as_ref().map_or(DEFAULT_APPROVAL_TTL, |i| i.ttl);
        let now_ms = match self.inner.as_ref().and_then(|i| i.store.as_ref()) {
            Some(store) => store.clock().now_ms(),
            None => crate::store::epoch_ms(std::time::SystemTime::now()),
        };
        (now_ms / 1000).saturating_add(ttl.as_secs())
    }

    /// Instance `child` was started by `parent`.
    pub fn started(&self, parent: &str, child: &str) {
        if let Some(inner) = &self.inner {
            inner.parents.lock().expect("approvals lock").insert(child.to_owned(), parent.to_owned());
        }
    }

    /// The instances from the turn's entry agent down to `instance`.
    pub fn path(&self, instance: &str) -> Vec<String> {
        let mut path = vec![instance.to_owned()];
        if let Some(inner) = &self.inner {
            let parents = inner.parents.lock().expect("approvals lock");
            while let Some(parent) = parents.get(path.last().expect("never empty")) {
                if path.contains(parent) || path.len() > 64 {
                    break;
                }
                path.push(parent.clone());
            }
        }
        path.reverse();
        path
    }

    /// `instance` paused: its state waits here for its caller (or the turn) to take it.
    pub fn pause(&self, suspension: Suspension) {
        if let Some(inner) = &self.inner {
            inner.paused.lock().expect("approvals lock").insert(suspension.instance.clone(), suspension);
        }
    }

    /// The state `instance` paused with, if it did.
    pub fn take_paused(&self, instance: &str) -> Option<Suspension> {
        self.inner.as_ref()?.paused.lock().expect("approvals lock").remove(instance)
    }

    /// The state instance `instance` of this resumed turn starts from.
    pub fn resume_of(&self, instance: &str) -> Option<&Suspension> {
        self.inner.as_ref()?.resume.get(instance)
    }

    /// The person's answer to `interrupt_id` in this request, if any.
    pub fn decision(&self, interrupt_id: &str) -> Option<&Decision> {
        self.inner.as_ref()?.decisions.get(interrupt_id)
    }

    /// The record of approved calls this resumed turn writes to.
    pub fn claimed(&self) -> Option<&ClaimedResume> {
        self.inner.as_ref()?.outcomes.as_ref()
    }
}

/// The arguments `decision` runs a call with: the model's, with the edited fields over them.
pub(crate) fn approved_arguments(model: &Value, decision: &Decision) -> Value {
    let mut arguments = model.clone();
    if let (Decision::Approve { arguments: Some(edits) }, Some(map)) = (decision, arguments.as_object_mut()) {
        for (k, v) in edits {
            map.insert(k.clone(), v.clone());
        }
    }
    arguments
}

/// The result a model reads for a call the person rejected.
pub(crate) fn rejected_result(tool: &str, message: Option<&str>) -> Value {
    let said = message.map(str::trim).filter(|m| !m.is_empty());
    let text = match said {
        Some(m) => format!("A person did not approve this call of `{tool}`; they said: {m}"),
        None => format!("A person did not approve this call of `{tool}`."),
    };
    serde_json::json!({"error": {"code": "rejected_by_user", "message": text}})
}

#[cfg(test)]
mod tests;
