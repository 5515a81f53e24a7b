//! [`Turns`]: the one owner of a turn's life, from the request that asks for it to the last
//! write of its log. `serve`, the Lambda function (through `http`: the chat endpoint, AG-UI, the
//! AI SDK and A2A) and `chat` start every turn here.
//!
//! In order, [`Turns::start`]: a repeated request id joins its turn (running here, or logged
//! anywhere) instead of running it again; the episode's busy gate admits the message
//! (`on_busy`); a resume claims its approvals; [`Orchestrator::start`] records the user message
//! and starts the run; the turn is registered live, its log writer made, and its events
//! recorded under the disconnect policy. Each refusal is a [`TurnError`] before anything runs;
//! the edge maps it to its status code.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use super::{
    Admission, BusyGate, BusyRefusal, Cursor, DisconnectPolicy, LiveTurn, LiveTurns, OnBusy, TurnLogSettings,
};
use crate::approval::{ApprovalStore, Approver, DEFAULT_APPROVAL_TTL, Decision, ResumeError, TurnApprovals};
use crate::history::History;
use crate::orchestrator::{Orchestrator, StartedTurn, TurnOptions, TurnRequest};
use crate::store::{EpisodeKey, LoggedEvent, StoreError};

/// Time a turn's log record allows past the turn's deadline for its last write: a turn still
/// `running` after both reads as abandoned.
pub(crate) const LOG_END_GRACE: Duration = Duration::from_secs(10);

/// The longest a message waits for its episode's running turn (`on_busy: enqueue` or
/// `interrupt`).
const BUSY_WAIT: Duration = Duration::from_secs(60);

/// A turn's numbered events, as its client and its log get them.
pub(crate) type TurnEvents = std::pin::Pin<Box<dyn Stream<Item = Arc<LoggedEvent>> + Send>>;

/// The turns of one process: where they are recorded, the approvals, the turns it runs now, how
/// they are logged, and the default policies for a client that leaves and an episode that is busy.
#[derive(Clone)]
pub struct Turns {
    history: History,
    approvals: ApprovalStore,
    live: Arc<LiveTurns>,
    log: TurnLogSettings,
    on_disconnect: DisconnectPolicy,
    on_busy: OnBusy,
    busy_queue: usize,
}

/// What a request asks of a turn.
#[derive(Debug)]
pub struct TurnStart {
    /// The turn: its message and ids (its approvals are set here, from `resume`).
    pub turn: TurnRequest,
    /// The client's id for the request: a retry with it joins the same turn.
    pub request_id: Option<String>,
    /// What happens when the client leaves (`None`: the default).
    pub on_disconnect: Option<DisconnectPolicy>,
    /// What happens if another turn of the episode runs (`None`: the default).
    pub on_busy: Option<OnBusy>,
    /// What a call that needs a person's approval does, or the answers that resume a paused turn.
    pub approvals: OnApproval,
    /// When the turn must end.
    pub deadline: Instant,
}

/// How a turn treats a call that needs a person's approval (docs/approvals.md): the one
/// approvals input of a turn.
#[derive(Default)]
pub enum OnApproval {
    /// The turn pauses: it ends `interrupted`, and the interrupts wait in the store for a resume.
    #[default]
    Pause,
    /// The person's answers to the episode's waiting approvals: the turn resumes the paused one,
    /// once its claim is made.
    Resume(Vec<(String, Decision)>),
    /// Each call is asked of this approver while the turn runs (an MCP client's elicitation).
    Ask(Arc<dyn Approver>),
    /// Each call is refused with `approval_required` (a caller that can neither pause nor ask).
    Refuse,
}

impl std::fmt::Debug for OnApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnApproval::Pause => f.write_str("Pause"),
            OnApproval::Resume(answers) => f.debug_tuple("Resume").field(answers).finish(),
            OnApproval::Ask(_) => f.write_str("Ask"),
            OnApproval::Refuse => f.write_str("Refuse"),
        }
    }
}

/// A turn under way: its episode, its id (the first run's, for a repeated request id) and its
/// numbered events, `thinking` first and `completed` last.
pub struct Begun {
    /// The conversation.
    pub episode_id: String,
    /// The turn: the receipt of the request.
    pub turn_id: String,
    /// Its events from the first.
    pub events: TurnEvents,
}

/// Why a turn did not start. Nothing ran.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// Another turn of the episode runs, and the policy refuses or could not wait for it.
    #[error(transparent)]
    Busy(BusyRefusal),
    /// The resume's answers do not fit the paused turn, or another request resumes it.
    #[error(transparent)]
    Resume(ResumeError),
    /// The store failed, or the ids do not make a key.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Turns {
    /// The turns recorded into `history`, with approvals kept in its store too (waiting
    /// [`DEFAULT_APPROVAL_TTL`] for their answer), the log on and the default policies.
    pub fn new(history: History) -> Turns {
        Turns {
            approvals: ApprovalStore::new(history.store().clone(), DEFAULT_APPROVAL_TTL),
            history,
            live: LiveTurns::new(),
            log: TurnLogSettings::default(),
            on_disconnect: DisconnectPolicy::default(),
            on_busy: OnBusy::default(),
            busy_queue: super::DEFAULT_QUEUE_LIMIT,
        }
    }

    /// The same, logging turns (or not) with `settings`.
    pub fn with_log(mut self, settings: TurnLogSettings) -> Turns {
        self.log = settings;
        self
    }

    /// The same, doing `policy` with a turn whose client leaves, unless the request says.
    pub fn with_disconnect_policy(mut self, policy: DisconnectPolicy) -> Turns {
        self.on_disconnect = policy;
        self
    }

    /// The same, doing `policy` with a message whose episode's turn runs, unless the request
    /// says, with at most `queue` messages waiting per episode.
    pub fn with_busy_policy(mut self, policy: OnBusy, queue: usize) -> Turns {
        self.on_busy = policy;
        self.busy_queue = queue;
        self
    }

    /// The same, with interrupts that wait `ttl` for their answer (docs/approvals.md).
    pub fn with_approval_ttl(mut self, ttl: Duration) -> Turns {
        self.approvals = ApprovalStore::new(self.history.store().clone(), ttl);
        self
    }

    /// Where turns are recorded.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Where approvals are kept.
    pub fn approvals(&self) -> &ApprovalStore {
        &self.approvals
    }

    /// The turns this process runs now.
    pub fn live(&self) -> &Arc<LiveTurns> {
        &self.live
    }

    /// How turns are logged and followed.
    pub fn log(&self) -> TurnLogSettings {
        self.log
    }

    /// Starts the turn `start` asks for on `orchestrator` (the entry agent's, or another agent's
    /// served over A2A), or joins the turn an earlier request with its request id started, and
    /// returns its events. A refusal is the `Err`, before anything runs.
    pub async fn start(
        &self,
        orchestrator: &Arc<Orchestrator>,
        start: TurnStart,
    ) -> Result<Begun, TurnError> {
        let key = EpisodeKey::new(start.turn.user_id.as_str(), start.turn.episode_id.as_str())?;
        if let Some(joined) = self.join(&key, start.request_id.as_deref(), start.deadline).await {
            return Ok(joined);
        }
        let TurnStart { mut turn, request_id, on_disconnect, on_busy, approvals, deadline } = start;
        let admission = self.admit(&key, &turn.turn_id, on_busy.unwrap_or(self.on_busy), deadline).await?;
        turn.beside = admission.beside.clone();
        turn.approvals = match approvals {
            OnApproval::Pause => self.approvals.pausing(),
            OnApproval::Resume(answers) => {
                self.claim(orchestrator, &key, &turn.turn_id, answers, deadline).await?
            }
            OnApproval::Ask(approver) => TurnApprovals::asking(approver),
            OnApproval::Refuse => TurnApprovals::default(),
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let options = TurnOptions {
            history: Some((&self.history, request_id.as_deref())),
            deadline: Some(deadline),
            cancel: Some(&cancel),
        };
        let StartedTurn { episode_id, turn_id, events } = orchestrator.start(turn, options).await?;
        let registered = self.live.register(key, turn_id.clone(), request_id, cancel);
        hold_until_end(admission, registered.turn());
        let writer = self.log.enabled.then(|| {
            // The record's deadline: the turn's, plus time for its last write. A turn still
            // `running` after it reads as abandoned.
            let left = deadline.saturating_duration_since(Instant::now()) + LOG_END_GRACE;
            let deadline_ms = self.history.store().clock().now_ms() + left.as_millis() as u64;
            super::log_writer(self.history.store().clone(), registered.turn().clone(), deadline_ms, self.log)
        });
        let policy = on_disconnect.unwrap_or(self.on_disconnect);
        let recorded = super::record(events, registered, writer, policy, self.log.end_timeout);
        Ok(Begun { episode_id, turn_id, events: Box::pin(recorded) })
    }

    /// `key`'s turn `turn_id` after `cursor`, from memory when this process runs it (`live`)
    /// or from the log, followed until its `completed` or `until`: what a rejoin, a resume and
    /// a retried request get.
    pub fn follow(
        &self,
        key: EpisodeKey,
        live: Option<Arc<LiveTurn>>,
        turn_id: String,
        cursor: Cursor,
        until: Instant,
    ) -> TurnEvents {
        let store = self.history.store().clone();
        Box::pin(super::follow(store, live, key, turn_id, cursor, self.log.resume, until))
    }

    /// The turn a repeated `request_id` of `key`'s episode started, from its first event: one
    /// run, and its turn id as the receipt. `None` for a new request id, with the log off for
    /// a turn not running here, or when the store cannot say (the request then runs as a new
    /// turn would, and the store's own check keeps its message from being recorded twice).
    async fn join(&self, key: &EpisodeKey, request_id: Option<&str>, until: Instant) -> Option<Begun> {
        let request_id = request_id?;
        let first = Cursor { after: 0 };
        // Its client left, and the turn ran on here.
        if let Some(live) = self.live.running_request(key, request_id) {
            tracing::info!(episode = %key, turn = %live.turn_id(), "a repeated request id joins its running turn");
            let turn_id = live.turn_id().to_owned();
            let events = self.follow(key.clone(), Some(live), turn_id.clone(), first, until);
            return Some(Begun { episode_id: key.episode_id().to_owned(), turn_id, events });
        }
        // Running on another instance, or ended.
        if !self.log.enabled {
            return None;
        }
        let store = self.history.store();
        let turn_id = store.request_turn(key, request_id).await.ok().flatten()?;
        store.turn_record(key, &turn_id).await.ok().flatten()?;
        tracing::info!(episode = %key, turn = %turn_id, "a repeated request id joins its logged turn");
        let events = self.follow(key.clone(), None, turn_id.clone(), first, until);
        Some(Begun { episode_id: key.episode_id().to_owned(), turn_id, events })
    }

    /// Lets turn `turn_id` into `key`'s episode under `policy` (docs/durable-turns.md#busy-episodes):
    /// at once when no turn of the episode runs, else as the policy says. A queued message
    /// waits at most [`BUSY_WAIT`], and never past half of what is left of its deadline.
    async fn admit(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        policy: OnBusy,
        deadline: Instant,
    ) -> Result<Admission, TurnError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let (hold, wait) = (left + LOG_END_GRACE, (left / 2).min(BUSY_WAIT));
        let live = self.live.clone();
        let stop_here = |running: &str| {
            if let Some(turn) = live.get(key, running) {
                turn.cancel();
            }
        };
        let gate = BusyGate::new(self.history.store().clone(), self.busy_queue);
        gate.admit(key, turn_id, policy, hold, wait, stop_here).await.map_err(TurnError::Busy)
    }

    /// Checks a resume's answers against the episode's paused turn and `orchestrator`'s
    /// configuration, and claims the record for turn `turn_id` until `deadline`
    /// (docs/approvals.md). The claim lapses at the turn's deadline: a turn still finishing
    /// after it, and taken over meanwhile, stores nothing (its writes are conditional).
    async fn claim(
        &self,
        orchestrator: &Orchestrator,
        key: &EpisodeKey,
        turn_id: &str,
        answers: Vec<(String, Decision)>,
        deadline: Instant,
    ) -> Result<TurnApprovals, TurnError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let until_ms = self.history.store().clock().now_ms() + left.as_millis() as u64;
        let entry = orchestrator.entry().clone();
        let check = |paused: &_, decisions: &_| entry.check_resume(paused, decisions);
        self.approvals.resume(key, answers, turn_id, until_ms, check).await.map_err(TurnError::Resume)
    }
}

/// Keeps the episode's turn lease until `turn` ends (its reply saved, `completed` sent), or
/// until the process forgets the turn; then frees it for the next message.
fn hold_until_end(admission: Admission, turn: &Arc<LiveTurn>) {
    let mut ended = turn.subscribe_end();
    tokio::spawn(async move {
        // An error means the turn is gone from memory: it has ended either way.
        let _ = ended.wait_for(|ended| *ended).await;
        admission.release().await;
    });
}
