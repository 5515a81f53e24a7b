//! The stored approvals of an episode: one record (the store's `APPROVALS` item) holding the
//! paused tree of the episode's interrupted turn, the interrupts answered already, the recorded
//! outcome of each approved call, and the claim of the request resuming it now. Every write is
//! conditional on the version read, so of two requests resuming at once exactly one claims it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Decision, Outcome, Suspension};
use crate::event::Interrupt;
use crate::store::{EpisodeKey, Store, StoreError};

/// An episode's approvals record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingApprovals {
    /// The turn that paused last.
    pub turn_id: String,
    /// The paused tree; `None` once nothing waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<Suspension>,
    /// When its interrupts expire (Unix seconds).
    pub expires_at: u64,
    /// Interrupts answered already, and how (`approve`, `reject`, `dismissed`).
    #[serde(default)]
    pub answered: BTreeMap<String, String>,
    /// What became of each approved call, by interrupt id.
    #[serde(default)]
    pub outcomes: BTreeMap<String, Outcome>,
    /// The request resuming it now, and until when (ms) its claim holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<(String, u64)>,
    /// The stored version this was read at (0: not stored).
    #[serde(skip)]
    pub version: u64,
}

impl PendingApprovals {
    /// The interrupts still waiting, unless they have expired at `now_s`.
    pub fn pending(&self, now_s: u64) -> Vec<Interrupt> {
        match &self.root {
            Some(root) if now_s < self.expires_at => root.interrupts(),
            _ => Vec::new(),
        }
    }
}

/// Why a resume request was refused (before anything ran).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// No such interrupt in the caller's episode (unknown, or another user's).
    #[error("no interrupt `{0}` waits in this conversation")]
    NotFound(String),
    /// It expired before it was answered.
    #[error("interrupt `{0}` expired before it was answered; nothing was run")]
    Expired(String),
    /// It was answered already (or dismissed by a newer message).
    #[error("interrupt `{0}` was answered already ({1})")]
    Answered(String, String),
    /// Another request is resuming this turn now.
    #[error("another request is resuming this conversation's approvals now; try again in a moment")]
    InProgress,
    /// An edited argument the configuration does not allow, or one that breaks the tool's schema.
    #[error("{0}")]
    InvalidArguments(String),
    /// The configuration changed since the pause.
    #[error("the configuration changed since the turn paused: {0}; nothing was run")]
    ConfigChanged(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where approvals are kept, and for how long an interrupt waits.
#[derive(Clone)]
pub struct ApprovalStore {
    store: Arc<dyn Store>,
    ttl: Duration,
}

impl std::fmt::Debug for ApprovalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalStore").field("ttl", &self.ttl).finish()
    }
}

/// How many answered interrupt ids a record remembers (the newest).
const MAX_ANSWERED_KEPT: usize = 256;

/// The record's item outlives its interrupts by this much, so an interrupt answered late is
/// told it expired rather than that it never existed.
const KEPT_AFTER_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

impl ApprovalStore {
    /// Approvals in `store`, whose interrupts wait `ttl`.
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> ApprovalStore {
        ApprovalStore { store, ttl }
    }

    /// How long an interrupt waits.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new turn's approvals: it pauses for them, kept here.
    pub fn pausing(&self) -> super::TurnApprovals {
        super::TurnApprovals::pausing(self.ttl, self.store.clone())
    }

    fn now_ms(&self) -> u64 {
        self.store.clock().now_ms()
    }

    /// The episode's record, if any.
    pub async fn load(&self, key: &EpisodeKey) -> Result<Option<PendingApprovals>, StoreError> {
        let Some((version, body)) = self.store.approvals(key).await? else { return Ok(None) };
        let mut record: PendingApprovals = serde_json::from_str(&body).map_err(|e| StoreError::Corrupt {
            key: format!("{}/APPROVALS", key.pk()),
            reason: format!("the approvals record is not readable: {e}"),
        })?;
        record.version = version;
        Ok(Some(record))
    }

    /// The interrupts waiting in the episode now.
    pub async fn pending(&self, key: &EpisodeKey) -> Result<Vec<Interrupt>, StoreError> {
        let now_s = self.now_ms() / 1000;
        Ok(self.load(key).await?.map(|r| r.pending(now_s)).unwrap_or_default())
    }

    async fn save(&self, key: &EpisodeKey, record: &mut PendingApprovals) -> Result<(), StoreError> {
        // The newest answered ids are kept (ids sort by time): the record stays within an item
        // however long the conversation.
        while record.answered.len() > MAX_ANSWERED_KEPT {
            record.answered.pop_first();
        }
        let body = serde_json::to_string(record).map_err(|e| StoreError::Corrupt {
            key: format!("{}/APPROVALS", key.pk()),
            reason: format!("the approvals record cannot be written: {e}"),
        })?;
        let keep_until_s = record.expires_at.saturating_add(KEPT_AFTER_EXPIRY.as_secs());
        record.version = self.store.save_approvals(key, &body, record.version, keep_until_s).await?;
        Ok(())
    }

    /// Stores the paused tree of turn `turn_id`: the record a resume reads. `before` is the
    /// record this turn resumed (its answered interrupts and outcomes are kept), if any.
    pub async fn pause(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        root: Suspension,
        before: Option<PendingApprovals>,
    ) -> Result<(), StoreError> {
        let mut record = match before {
            Some(before) => before,
            // Over an old record (answered, dismissed or expired): its version is the one to
            // replace, and what it says was answered stays answered (a late resume of a dismissed
            // interrupt is told so, not that it never existed).
            None => self.load(key).await?.map_or_else(PendingApprovals::default, |old| PendingApprovals {
                version: old.version,
                answered: old.answered,
                ..PendingApprovals::default()
            }),
        };
        let expires = root.interrupts().iter().map(|i| i.expires_at).max();
        record.turn_id = turn_id.to_owned();
        record.expires_at =
            expires.unwrap_or_else(|| (self.now_ms() / 1000).saturating_add(self.ttl.as_secs()));
        record.root = Some(root);
        record.claim = None;
        self.save(key, &mut record).await
    }

    /// A new message arrived while interrupts wait: they are answered as rejected (never run),
    /// unless a resume holds the record now. Returns how many were dismissed.
    pub async fn dismiss(&self, key: &EpisodeKey) -> Result<usize, StoreError> {
        let Some(mut record) = self.load(key).await? else { return Ok(0) };
        let now = self.now_ms();
        if record.claim.as_ref().is_some_and(|(_, until)| *until > now) {
            return Ok(0);
        }
        let Some(root) = record.root.take() else { return Ok(0) };
        let ids: Vec<String> = root.interrupts().into_iter().map(|i| i.interrupt_id).collect();
        for id in &ids {
            record.answered.insert(id.clone(), "dismissed".into());
        }
        match self.save(key, &mut record).await {
            Ok(()) => Ok(ids.len()),
            // A resume claimed it in between: it answers them.
            Err(StoreError::Conflict { .. }) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Checks `decisions` against the episode's record and claims it for `holder` until
    /// `until_ms`: one conditional write, so of racing requests one resumes and the others are
    /// refused ([`ResumeError::InProgress`]). Nothing runs before this succeeds.
    ///
    /// A write that loses to another one (a new message's dismissal, a racing resume) reads the
    /// record again and answers from what it says now: `interrupt_answered` when the interrupts
    /// were dismissed meanwhile, `resume_in_progress` only while another request holds the claim.
    pub async fn claim(
        &self,
        key: &EpisodeKey,
        decisions: &[(String, Decision)],
        holder: &str,
        until_ms: u64,
    ) -> Result<ClaimedResume, ResumeError> {
        for _ in 0..CLAIM_ATTEMPTS {
            let first = decisions.first().map(|(id, _)| id.clone()).unwrap_or_default();
            let Some(mut record) = self.load(key).await? else { return Err(ResumeError::NotFound(first)) };
            check_claim(&record, decisions, holder, self.now_ms())?;
            record.claim = Some((holder.to_owned(), until_ms));
            match self.save(key, &mut record).await {
                Ok(()) => {
                    let root = record.root.clone().expect("a record with pending interrupts has a root");
                    return Ok(ClaimedResume {
                        approvals: self.clone(),
                        key: key.clone(),
                        root,
                        record: Arc::new(tokio::sync::Mutex::new(record)),
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // The record changed under every attempt: others write it now.
        Err(ResumeError::InProgress)
    }
}

/// How often a claim reads the record again after losing a write to another request.
const CLAIM_ATTEMPTS: usize = 4;

/// Whether `record` may be claimed for `holder` at `now` (ms) with `decisions`: each answered
/// interrupt waits and has not expired, only editable fields are edited, and no other request
/// holds a live claim.
fn check_claim(
    record: &PendingApprovals,
    decisions: &[(String, Decision)],
    holder: &str,
    now: u64,
) -> Result<(), ResumeError> {
    let pending: HashMap<String, Interrupt> = record
        .root
        .as_ref()
        .map(|r| r.interrupts().into_iter().map(|i| (i.interrupt_id.clone(), i)).collect())
        .unwrap_or_default();
    for (id, decision) in decisions {
        if let Some(how) = record.answered.get(id) {
            return Err(ResumeError::Answered(id.clone(), how.clone()));
        }
        let Some(interrupt) = pending.get(id) else { return Err(ResumeError::NotFound(id.clone())) };
        if now / 1000 >= interrupt.expires_at {
            return Err(ResumeError::Expired(id.clone()));
        }
        if let Decision::Approve { arguments: Some(edits) } = decision {
            if let Some(field) = edits.keys().find(|f| !interrupt.editable.contains(f)) {
                let allowed = if interrupt.editable.is_empty() {
                    "none may be edited".to_owned()
                } else {
                    format!("editable: {}", interrupt.editable.join(", "))
                };
                return Err(ResumeError::InvalidArguments(format!(
                    "`arguments.{field}` of interrupt `{id}` may not be edited ({allowed})"
                )));
            }
        }
    }
    match &record.claim {
        Some((other, until)) if *until > now && other != holder => Err(ResumeError::InProgress),
        _ => Ok(()),
    }
}

impl ApprovalStore {
    /// A resume request's turn approvals: `answers` checked and the record claimed for
    /// `holder` until `until_ms` ([`ApprovalStore::claim`]), then `check` (the configuration
    /// as it stands: the entry agent's `check_resume`); a refusal releases the claim. The one
    /// way a resumed turn starts, for the endpoint and `chat`.
    pub async fn resume(
        &self,
        key: &EpisodeKey,
        answers: Vec<(String, Decision)>,
        holder: &str,
        until_ms: u64,
        check: impl FnOnce(&Suspension, &super::Decisions) -> Result<(), ResumeError>,
    ) -> Result<super::TurnApprovals, ResumeError> {
        let claimed = self.claim(key, &answers, holder, until_ms).await?;
        let decisions: super::Decisions = answers.into_iter().collect();
        if let Err(e) = check(claimed.root(), &decisions) {
            if let Err(release) = claimed.release().await {
                tracing::warn!(error = %release, "a refused resume's claim was not released; it lapses");
            }
            return Err(e);
        }
        Ok(super::TurnApprovals::resuming(self.ttl, self.store.clone(), claimed, decisions))
    }
}

/// The user message a resume request is recorded as: its answers in words.
pub fn summary(answers: &[(String, Decision)]) -> String {
    let lines: Vec<String> = answers
        .iter()
        .map(|(id, decision)| match decision {
            Decision::Approve { arguments: None } => format!("Approved {id}."),
            Decision::Approve { arguments: Some(edits) } => {
                let fields: Vec<&str> = edits.keys().map(String::as_str).collect();
                format!("Approved {id}, with {} edited.", fields.join(", "))
            }
            Decision::Reject { message: None } => format!("Rejected {id}."),
            Decision::Reject { message: Some(m) } => {
                format!("Rejected {id}: {}", m.chars().take(200).collect::<String>())
            }
        })
        .collect();
    lines.join("\n")
}

/// A record this request has claimed: it writes each approved call's outcome, and at the end
/// the turn's new state.
#[derive(Clone)]
pub struct ClaimedResume {
    approvals: ApprovalStore,
    key: EpisodeKey,
    root: Suspension,
    record: Arc<tokio::sync::Mutex<PendingApprovals>>,
}

impl std::fmt::Debug for ClaimedResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedResume").field("key", &self.key).finish()
    }
}

impl ClaimedResume {
    /// The paused tree this request resumes.
    pub fn root(&self) -> &Suspension {
        &self.root
    }

    /// What an earlier attempt recorded for `interrupt_id`'s call.
    pub async fn outcome(&self, interrupt_id: &str) -> Option<Outcome> {
        self.record.lock().await.outcomes.get(interrupt_id).cloned()
    }

    /// Records `outcome` for the approved call of `interrupt_id`, in the store, before the
    /// caller goes on. The interrupt counts as answered once the turn finishes
    /// ([`ClaimedResume::finish`]): until then a retry of the same answers may resume it, and
    /// finds this outcome.
    pub async fn record(&self, interrupt_id: &str, outcome: Outcome) -> Result<(), StoreError> {
        let mut record = self.record.lock().await;
        let mut next = record.clone();
        next.outcomes.insert(interrupt_id.to_owned(), outcome);
        self.approvals.save(&self.key, &mut next).await?;
        *record = next;
        Ok(())
    }

    /// The turn ended: `paused` is what still waits (the record keeps it, with a new expiry),
    /// or nothing (the record is closed). Every interrupt that no longer waits is answered
    /// (`approve` when its call has an outcome, else `reject`), and the claim is released.
    pub async fn finish(&self, turn_id: &str, paused: Option<Suspension>) -> Result<(), StoreError> {
        let mut record = self.record.lock().await.clone();
        let waiting: Vec<String> = paused
            .as_ref()
            .map(|p| p.interrupts().into_iter().map(|i| i.interrupt_id).collect())
            .unwrap_or_default();
        for interrupt in self.root.interrupts() {
            let id = interrupt.interrupt_id;
            if !waiting.contains(&id) {
                let how = if record.outcomes.contains_key(&id) { "approve" } else { "reject" };
                record.answered.insert(id, how.to_owned());
            }
        }
        match paused {
            Some(root) => self.approvals.pause(&self.key, turn_id, root, Some(record)).await,
            None => {
                let mut record = PendingApprovals { root: None, claim: None, ..record };
                record.turn_id = turn_id.to_owned();
                self.approvals.save(&self.key, &mut record).await
            }
        }
    }

    /// Gives the claim up without a change (the turn could not start).
    pub async fn release(&self) -> Result<(), StoreError> {
        let mut record = self.record.lock().await.clone();
        record.claim = None;
        self.approvals.save(&self.key, &mut record).await
    }
}
