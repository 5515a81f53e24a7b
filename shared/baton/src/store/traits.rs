//! The store's ports, one trait per concern, and [`Store`], all of them at once.
//!
//! | trait | what | its callers |
//! |---|---|---|
//! | [`Conversations`] | the episode item, its messages and the request-id markers | `history`, a deployment's own sessions, ratings, the messages endpoint |
//! | [`Leases`] | short leases on a name within an episode | [`super::lease`], the busy gate |
//! | [`TurnLog`] | a turn's record and event log, and cancel | the turn's log writer, resume, replay, the turns endpoints |
//! | [`ApprovalRecords`] | the episode's approvals record | `approval` |
//!
//! Each extends [`Clocked`] (the store's clock: message times and expiry come from it). A store
//! implements the four; [`Store`] is implemented for anything that does, so a caller that needs
//! several concerns holds one `Arc<dyn Store>`, and one that needs one asks for that trait
//! (`&dyn Leases`; an `Arc<dyn Store>` coerces to it). Implementations pass the contract suite in
//! `tests/src/contract.rs`. Every method takes the [`EpisodeKey`] (user and episode) it acts on;
//! expired items are absent.

use std::time::Duration;

use super::{
    CancelOutcome, Clock, Episode, EpisodeKey, LeaseGrant, LoggedEvent, Recorded, StoreError, StoredMessage,
    TurnRecord,
};

/// What every concern of a store shares: its clock.
pub trait Clocked: Send + Sync {
    /// The store's clock: message times and expiry come from it.
    fn clock(&self) -> &dyn Clock;
}

/// The episode item, the messages of its turns, and the request-id markers that make a user
/// message idempotent.
#[async_trait::async_trait]
pub trait Conversations: Clocked {
    /// The episode's metadata, or `None` if it was never written or has expired.
    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError>;

    /// Writes `episode` if the stored version is still `episode.version` (absent for 0), and
    /// returns what was stored: version plus one, `updated_at` now. Otherwise
    /// [`StoreError::Conflict`]: someone wrote in between; read again and retry
    /// ([`update_episode`] does).
    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError>;

    /// Records a turn's user message (seq 0) and creates or touches the episode item, in one
    /// atomic write. With a `request_id`, at most once per id: a repeat writes nothing and
    /// returns [`Recorded::Duplicate`] with the first turn's id.
    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError>;

    /// Makes `messages` (seq 1 and up) the reply of `turn_id`, replacing any reply recorded for
    /// that turn before (a retried request answers again). The user message stays.
    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError>;

    /// The most recent `limit` messages of the episode, oldest first.
    async fn recent_messages(&self, key: &EpisodeKey, limit: usize)
    -> Result<Vec<StoredMessage>, StoreError>;

    /// One page of the episode's messages, read backwards from the newest: the newest `limit`
    /// messages older than the message `before` names (all of them when `None`), oldest first,
    /// and the cursor of the next, older page (`None` when this page reaches the first message).
    /// A cursor is what a previous page returned ([`MessageCursor`](super::MessageCursor)); a
    /// malformed one is [`StoreError::InvalidKey`]. A `limit` of 0 is an empty page with no
    /// cursor.
    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError>;

    /// The turn `request_id` was first recorded under in the episode
    /// ([`Conversations::record_user_message`]), if any: a retried request, on any instance,
    /// joins that turn.
    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError>;
}

/// Short leases on a name within an episode ([`super::lease`] waits for one with a bound).
#[async_trait::async_trait]
pub trait Leases: Clocked {
    /// Takes the episode's lease `name` for `holder` until `ttl` from now, if it is free, expired,
    /// or `holder`'s already (then it is renewed). One conditional write: of callers racing for
    /// a free lease, exactly one is [`LeaseGrant::Granted`]; the others learn until when it is
    /// held. Not durable on its own: a lease lost in a crash has expired by the time it matters.
    async fn take_lease(
        &self,
        key: &EpisodeKey,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError>;

    /// Gives up the episode's lease `name` if `holder` still has it; does nothing if it expired
    /// or another holder has taken it since.
    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError>;
}

/// A turn's record and event log (`TURN#<turn>`, `TURN#<turn>#LOG#<last seq>`,
/// [`super::turn_log`]), and asking a running turn to stop.
#[async_trait::async_trait]
pub trait TurnLog: Clocked {
    /// Starts the log of `turn_id`: its record, `running`, no event yet, ending by `deadline_ms`
    /// (after it, a turn still running reads as abandoned). Starting the same log again before
    /// any event is a retry and writes nothing; a turn whose log exists otherwise is a
    /// [`StoreError::Conflict`].
    async fn start_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError>;

    /// Appends `events` to the turn's log in one store write whatever their number (split into
    /// several items where one would be too big). Their seqs must be consecutive and start right
    /// after the record's `last_seq`. Writing a batch that is logged already is a retry and does
    /// nothing; a batch that would leave a gap or overlap other logged events, or that follows
    /// the end of the log, is a [`StoreError::Conflict`] saying which.
    async fn append_turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
    ) -> Result<(), StoreError>;

    /// Records that events `from_seq..=to_seq` could not be written: a later reader is told
    /// they are missing (`TurnRecord::gaps`), and the next append starts after `to_seq`. Seqs
    /// that were logged after all are no gap. A gap that would leave seqs between the log's
    /// end and `from_seq` unaccounted for is a [`StoreError::Conflict`].
    async fn record_turn_gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<(), StoreError>;

    /// Ends the turn's log with its `completed` status. Ending it again with the same status
    /// does nothing; with another, or for an unknown turn, is a [`StoreError::Conflict`].
    async fn end_turn_log(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError>;

    /// Appends the turn's last `events` (possibly none) and ends its log with `status`, in one
    /// store write where the store can: a turn's final write. The checks are
    /// [`TurnLog::append_turn_events`]'s and then [`TurnLog::end_turn_log`]'s: finishing again the
    /// same way (a retry) does nothing. By default it is those two calls.
    async fn finish_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        self.append_turn_events(key, turn_id, events).await?;
        self.end_turn_log(key, turn_id, status).await
    }

    /// At most `limit` logged events of the turn after seq `after_seq`, in seq order (none
    /// for an unknown turn or another user's). A replay reads these a page at a time.
    async fn turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError>;

    /// The turn's record, or `None` for an unknown turn (another user's key finds none).
    async fn turn_record(&self, key: &EpisodeKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError>;

    /// The episode's most recent logged turn (turn ids sort by creation time).
    async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError>;

    /// Asks a running turn to stop: its producer sees `cancel_requested` in the record.
    /// Idempotent; says whether the turn had ended (a running turn past its deadline reads as
    /// abandoned) or is unknown.
    async fn request_cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError>;
}

/// The episode's approvals record (docs/approvals.md).
#[async_trait::async_trait]
pub trait ApprovalRecords: Clocked {
    /// The episode's approvals record (as JSON; docs/approvals.md) and its
    /// version, or `None` (never written, or kept past its `keep_until`).
    async fn approvals(&self, key: &EpisodeKey) -> Result<Option<(u64, String)>, StoreError>;

    /// Writes the episode's approvals record if the stored version is still `expected` (0:
    /// absent), keeping it until `keep_until_s` (Unix seconds), and returns the new version.
    /// Otherwise [`StoreError::Conflict`]: another request wrote it in between (of two requests
    /// claiming one record, exactly one succeeds).
    async fn save_approvals(
        &self,
        key: &EpisodeKey,
        body: &str,
        expected: u64,
        keep_until_s: u64,
    ) -> Result<u64, StoreError>;
}

/// Conversation storage, every concern: what a caller needing several of them holds
/// (`Arc<dyn Store>`). Implemented for every type that implements the four concerns.
pub trait Store: Conversations + Leases + TurnLog + ApprovalRecords {}

impl<T: Conversations + Leases + TurnLog + ApprovalRecords + ?Sized> Store for T {}

/// Reads the episode (a new one if absent), applies `change`, and saves it, reading again and
/// reapplying on a [`StoreError::Conflict`] (up to 10 tries).
pub async fn update_episode(
    store: &dyn Conversations,
    key: &EpisodeKey,
    mut change: impl FnMut(&mut Episode) + Send,
) -> Result<Episode, StoreError> {
    let mut last = None;
    for _ in 0..10 {
        let mut episode = store.episode(key).await?.unwrap_or_else(|| Episode::new(key.clone()));
        change(&mut episode);
        match store.save_episode(&episode).await {
            Err(e @ StoreError::Conflict { .. }) => last = Some(e),
            other => return other,
        }
    }
    Err(last.expect("every try ended in a conflict"))
}
