//! Conversation storage (docs/storage.md): the [`Store`] trait, its types, and the embedded store.
//!
//! One logical table of items with two string keys, the same in every implementation:
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | episode | `USER#<user>#EP#<episode>` | `META` | `created_at`, `updated_at`, `version`, `conversations` (agent name → its vendor conversation: `conversation_id`, `last_used_at`, `pending` as JSON text), `response_ids` (agent name → id), `ttl` |
//! | message | same | `MSG#<turn>#<seq>` | `role`, `agent`, `content`, `usage`, `status`, `created_at`, `meta` (JSON text, optional), `ttl` |
//! | request | same | `REQ#<request id>` | `turn_id`, `ttl` (makes the user message idempotent) |
//! | lease | same | `LEASE#<name>` | `holder`, `expires_at` (ms), `ttl` (serialises calls a vendor takes one at a time, [`lease`]) |
//! | turn record | same | `TURN#<turn>` | `status`, `cancel_requested`, `last_seq`, `gaps`, `deadline_ms`, `updated_at`, `ttl` ([`turn_log`]) |
//! | turn events | same | `TURN#<turn>#LOG#<last seq>` | `first`, `last`, `events`, `ttl` ([`turn_log`]) |
//!
//! Every key starts with the user, so a store call can only reach the episodes of the user it
//! names; the HTTP layer names the authenticated user. Turn ids are UUIDv7 ([`new_turn_id`]):
//! their text sorts by creation time, so messages read back in the order their turns began, and
//! `<seq>` is zero-padded so a turn's messages sort in order too (the user message is seq 0).
//!
//! Times are milliseconds since the Unix epoch, except `ttl`, which is in seconds as DynamoDB's
//! TTL wants. Expired items are treated as absent by every read, because deletion is lazy.
//!
//! - [`item`]: the attribute-map form of each item and its strict decoding.
//! - [`embedded`]: a file-backed store (redb), the default for local runs.
//! - [`lease`]: a short lease on a name within an episode, waited for with a bound, released
//!   when the holder is done or dropped.
//! - [`turn_log`]: a turn's event log and record (`TURN#<turn>`, `TURN#<turn>#LOG#<last seq>`):
//!   their types, items and the checks both stores make.

pub mod backends;
pub mod embedded;
pub mod item;
pub mod lease;
pub mod turn_log;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::event::{AgentUsage, Status};
use crate::model::Message;

pub use turn_log::{CancelOutcome, DEFAULT_TURN_LOG_TTL, LoggedEvent, TurnRecord, TurnStatus};

/// How long items live after their last write, unless configured otherwise.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A user or episode id cannot be part of a key.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// Someone else changed the item first (optimistic locking); read it again and retry.
    #[error("conflict on `{key}`: {reason}")]
    Conflict {
        /// The item (`pk / sk`).
        key: String,
        /// What differed.
        reason: String,
    },
    /// An item has a shape this code does not understand.
    #[error("corrupt item `{key}`: {reason}")]
    Corrupt {
        /// The item (`pk / sk`).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store cannot be reached or refused for a transient reason; retrying may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Any other failure (missing table, denied access, a local file problem).
    #[error("store failure: {0}")]
    Failed(String),
}

impl StoreError {
    /// A stable, machine-readable code for `error` events and HTTP error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::InvalidKey(_) => "store_invalid_key",
            StoreError::Conflict { .. } => "store_conflict",
            StoreError::Corrupt { .. } => "store_corrupt_item",
            StoreError::Unavailable(_) => "store_unavailable",
            StoreError::Failed(_) => "store_failed",
        }
    }

    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Conflict { .. })
    }
}

/// The time source of a store: the system clock, or a [`ManualClock`] in tests.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now.
    fn now(&self) -> SystemTime;

    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        epoch_ms(self.now())
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to, for tests of expiry and last-used times.
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    /// A clock at `start`.
    pub fn new(start: SystemTime) -> ManualClock {
        ManualClock(Mutex::new(start))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        *self.0.lock().expect("clock lock") += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().expect("clock lock")
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A new turn id: a UUIDv7, whose text sorts by creation time (milliseconds, then a counter that
/// keeps ids minted by one process in order).
pub fn new_turn_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A new episode id, for a conversation whose first request names none: minted the same way as
/// turn ids (a UUIDv7), by every entry (the endpoint, `chat`, an MCP call).
pub fn new_episode_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// One user's episode: the partition every item of a conversation lives in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EpisodeKey {
    user_id: String,
    episode_id: String,
}

impl EpisodeKey {
    /// The key of `user_id`'s episode `episode_id`. Ids must be non-empty and free of `#` and
    /// control characters, so one user's key can never be spelled to reach another's.
    pub fn new(user_id: impl Into<String>, episode_id: impl Into<String>) -> Result<EpisodeKey, StoreError> {
        let (user_id, episode_id) = (user_id.into(), episode_id.into());
        for (what, id) in [("user id", &user_id), ("episode id", &episode_id)] {
            if id.is_empty() || id.len() > 256 || id.chars().any(|c| c == '#' || c.is_control()) {
                return Err(StoreError::InvalidKey(format!(
                    "{what} {id:?} must be 1 to 256 characters without '#' or control characters"
                )));
            }
        }
        Ok(EpisodeKey { user_id, episode_id })
    }

    /// The user.
    pub fn user_id(&self) -> &str {
        &self.user_id
    }

    /// The episode.
    pub fn episode_id(&self) -> &str {
        &self.episode_id
    }

    /// The partition key, `USER#<user>#EP#<episode>`.
    pub fn pk(&self) -> String {
        format!("USER#{}#EP#{}", self.user_id, self.episode_id)
    }
}

impl fmt::Display for EpisodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pk())
    }
}

/// An agent's conversation with its vendor in one episode: the vendor's id for it, when it was
/// last used and the prompt its last answer left open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorConversation {
    /// The vendor's id of the conversation.
    pub conversation_id: String,
    /// When it was last used (ms); the agent decides how old a conversation may be and still be
    /// continued.
    pub last_used_at: u64,
    /// The prompt its last answer left open (the agent's own JSON), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<serde_json::Value>,
}

/// An episode's metadata item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    /// Whose and which.
    pub key: EpisodeKey,
    /// When it was created (ms).
    pub created_at: u64,
    /// When it was last written (ms).
    pub updated_at: u64,
    /// Optimistic-locking version: 0 for an episode not stored yet; every write adds one.
    pub version: u64,
    /// Each agent's vendor conversation, by agent name: two agents of one kind keep separate
    /// conversations.
    pub conversations: BTreeMap<String, VendorConversation>,
    /// Each agent's last Responses API id (`previous_response_id` of its next call), by agent
    /// name: two agents on the Responses API keep separate server-side conversations.
    pub response_ids: BTreeMap<String, String>,
}

impl Episode {
    /// A new, not yet stored episode.
    pub fn new(key: EpisodeKey) -> Episode {
        Episode {
            key,
            created_at: 0,
            updated_at: 0,
            version: 0,
            conversations: BTreeMap::new(),
            response_ids: BTreeMap::new(),
        }
    }
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user.
    User,
    /// An agent (the orchestrator or a sub-agent instance).
    Assistant,
}

impl Role {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One stored message of a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// The turn (a [`new_turn_id`]).
    pub turn_id: String,
    /// Position in the turn: 0 is the user message, replies count from 1.
    pub seq: u32,
    /// Who said it.
    pub role: Role,
    /// `user`, `orchestrator`, or the sub-agent instance (`researcher[1]`).
    pub agent: String,
    /// The text.
    pub content: String,
    /// Tokens spent producing it, per agent instance and model.
    pub usage: Vec<AgentUsage>,
    /// How it ended: `partial` when the turn was cut short.
    pub status: Status,
    /// When it was written (ms).
    pub created_at: u64,
    /// Facts the agent reported about this answer (`answer_meta`, `choices`, `handoff`), as
    /// one JSON object; `None` for messages without any (and for items written before).
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
}

impl StoredMessage {
    /// The user message (seq 0) of a turn.
    pub fn user(turn_id: impl Into<String>, content: impl Into<String>, created_at: u64) -> StoredMessage {
        StoredMessage {
            turn_id: turn_id.into(),
            seq: 0,
            role: Role::User,
            agent: "user".into(),
            content: content.into(),
            usage: Vec::new(),
            status: Status::Ok,
            created_at,
            meta: None,
        }
    }

    /// The sort key, `MSG#<turn>#<seq>`.
    pub fn sk(&self) -> String {
        message_sk(&self.turn_id, self.seq)
    }
}

/// The sort key of message `seq` of `turn_id`.
pub fn message_sk(turn_id: &str, seq: u32) -> String {
    format!("{MSG_PREFIX}{turn_id}#{seq:04}")
}

/// The sort key of the marker that request `request_id` was recorded.
pub fn request_sk(request_id: &str) -> String {
    format!("{REQ_PREFIX}{request_id}")
}

/// The sort key of the episode item.
pub const META_SK: &str = "META";
/// The sort key of the episode's approvals record (docs/approvals.md).
pub const APPROVALS_SK: &str = "APPROVALS";
/// Every message sort key starts with this.
pub const MSG_PREFIX: &str = "MSG#";
/// Every request-id marker sort key starts with this.
pub(crate) const REQ_PREFIX: &str = "REQ#";
/// Every lease sort key starts with this.
pub(crate) const LEASE_PREFIX: &str = "LEASE#";

/// The sort key of the lease `name`.
pub fn lease_sk(name: &str) -> String {
    format!("{LEASE_PREFIX}{name}")
}

/// What asking for a lease found ([`Store::take_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The caller holds the lease until the expiry it asked for.
    Granted,
    /// Another holder has it until `until` (ms since the epoch), unless it releases it sooner.
    Held {
        /// Who holds it (empty when it was released between the refused write and the read
        /// that asked who held it: free now).
        holder: String,
        /// Its expiry.
        until: u64,
    },
}

/// What recording a user message did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// It was written.
    New,
    /// The request id was seen before: nothing was written; the original turn is named.
    Duplicate {
        /// The turn the request id was first recorded under.
        turn_id: String,
    },
}

/// The position of one message in its episode, as a page cursor of [`Store::messages_page`]:
/// `<turn_id>.<seq>`, the message's turn and seq. Clients treat it as opaque; it holds no user
/// and no episode, so it can only name a position within the episode it is used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageCursor {
    /// The message's turn.
    pub turn_id: String,
    /// Its seq in the turn.
    pub seq: u32,
}

impl MessageCursor {
    /// The cursor of `message`.
    pub fn of(message: &StoredMessage) -> MessageCursor {
        MessageCursor { turn_id: message.turn_id.clone(), seq: message.seq }
    }

    /// Reads a cursor: a turn id (1 to 128 characters, no `#`, `.` or control character), a
    /// `.`, and a seq of 1 to 4 digits, as [`message_sk`] writes it.
    pub fn parse(text: &str) -> Result<MessageCursor, StoreError> {
        let bad = || {
            StoreError::InvalidKey(format!(
                "the cursor {:?} is not one this endpoint returned (`<turn_id>.<seq>`)",
                text.chars().take(64).collect::<String>()
            ))
        };
        let (turn_id, seq) = text.split_once('.').ok_or_else(bad)?;
        let turn_ok = !turn_id.is_empty()
            && turn_id.len() <= 128
            && !turn_id.chars().any(|c| c == '#' || c == '.' || c.is_control());
        let seq_ok = (1..=4).contains(&seq.len()) && seq.bytes().all(|b| b.is_ascii_digit());
        if !(turn_ok && seq_ok) {
            return Err(bad());
        }
        Ok(MessageCursor { turn_id: turn_id.to_owned(), seq: seq.parse().map_err(|_| bad())? })
    }

    /// The sort key of the message it names.
    pub fn sk(&self) -> String {
        message_sk(&self.turn_id, self.seq)
    }

    /// A page from the messages a store read newest first, up to one more than `limit`: the
    /// newest `limit` of them, oldest first, and the cursor of the older page when there was one
    /// more (so a store needs no second read to know whether an older page exists).
    pub fn page(mut newest_first: Vec<StoredMessage>, limit: usize) -> (Vec<StoredMessage>, Option<String>) {
        let more = newest_first.len() > limit;
        newest_first.truncate(limit);
        newest_first.reverse();
        let next = more.then(|| newest_first.first().map(|m| MessageCursor::of(m).to_string())).flatten();
        (newest_first, next)
    }
}

impl fmt::Display for MessageCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.turn_id, self.seq)
    }
}

/// Conversation storage. Implementations pass the contract suite in `tests/src/contract.rs`.
///
/// Every method takes the [`EpisodeKey`] (user and episode) it acts on; expired items are absent.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// The store's clock: message times and expiry come from it.
    fn clock(&self) -> &dyn Clock;

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
    /// A cursor is what a previous page returned ([`MessageCursor`]); a malformed one is
    /// [`StoreError::InvalidKey`]. A `limit` of 0 is an empty page with no cursor.
    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError>;

    /// The turn `request_id` was first recorded under in the episode ([`Store::record_user_message`]),
    /// if any: a retried request, on any instance, joins that turn.
    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError>;

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
    /// [`Store::append_turn_events`]'s and then [`Store::end_turn_log`]'s: finishing again the
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

    /// Asks a running turn to stop: its producer sees `cancel_requested` in the record.
    /// Idempotent; says whether the turn had ended (a running turn past its deadline reads as
    /// abandoned) or is unknown.
    async fn request_cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError>;
}

/// Reads the episode (a new one if absent), applies `change`, and saves it, reading again and
/// reapplying on a [`StoreError::Conflict`] (up to 10 tries).
pub async fn update_episode(
    store: &dyn Store,
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

/// The model-facing history of stored messages: user and non-empty assistant messages in order,
/// starting at a user message (a window cut mid-turn drops the cut turn's replies).
pub(crate) fn model_history(messages: &[StoredMessage]) -> Vec<Message> {
    messages
        .iter()
        .skip_while(|m| m.role != Role::User)
        .filter(|m| !m.content.trim().is_empty())
        .map(|m| match m.role {
            Role::User => Message::user(m.content.clone()),
            Role::Assistant => Message::assistant(m.content.clone()),
        })
        .collect()
}

/// The `ttl` (seconds since the epoch) of an item written at `now_ms` and kept for `retention`.
pub fn ttl_after(now_ms: u64, retention: Duration) -> u64 {
    now_ms / 1000 + retention.as_secs()
}

/// When (ms since the epoch) a lease taken at `now_ms` for `ttl` expires; the far future for a
/// `ttl` too long to add.
pub fn lease_expiry(now_ms: u64, ttl: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

/// Whether an item with `ttl` has expired at `now_ms`.
pub fn is_expired(ttl: u64, now_ms: u64) -> bool {
    ttl <= now_ms / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_smuggle_another_user() {
        assert!(EpisodeKey::new("alice#EP#x", "e").is_err());
        assert!(EpisodeKey::new("alice", "e#MSG").is_err());
        assert!(EpisodeKey::new("", "e").is_err());
        assert!(EpisodeKey::new("a\n", "e").is_err());
        assert_eq!(EpisodeKey::new("alice", "e1").unwrap().pk(), "USER#alice#EP#e1");
    }

    #[test]
    fn turn_ids_sort_in_creation_order() {
        let ids: Vec<String> = (0..200).map(|_| new_turn_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn message_sort_keys_sort_by_seq() {
        assert_eq!(message_sk("t", 7), "MSG#t#0007");
        assert!(message_sk("t", 9) < message_sk("t", 10));
    }

    #[test]
    fn model_history_starts_at_a_user_message_and_skips_empty_replies() {
        let m = |seq, role, content: &str| {
            StoredMessage {
                role,
                agent: "a".into(),
                content: content.into(),
                ..StoredMessage::user("t", "", 0)
            }
            .with_seq(seq)
        };
        let history = model_history(&[
            m(2, Role::Assistant, "cut-off reply"),
            m(0, Role::User, "hi"),
            m(1, Role::Assistant, ""),
            m(2, Role::Assistant, "hello"),
        ]);
        assert_eq!(history, vec![Message::user("hi"), Message::assistant("hello")]);
    }

    #[test]
    fn a_message_cursor_reads_back_what_it_writes_and_names_the_sort_key() {
        let cursor = MessageCursor { turn_id: "0193a1b2-7c3f".into(), seq: 12 };
        assert_eq!(cursor.to_string(), "0193a1b2-7c3f.12");
        assert_eq!(MessageCursor::parse("0193a1b2-7c3f.12").unwrap(), cursor);
        assert_eq!(cursor.sk(), "MSG#0193a1b2-7c3f#0012");
        for bad in ["", "t", ".1", "t.", "t.00001", "t.1.2", "a#b.1", "t.+1", "t\n.1"] {
            assert!(matches!(MessageCursor::parse(bad), Err(StoreError::InvalidKey(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_page_is_the_newest_oldest_first_with_a_cursor_only_when_more_were_read() {
        let m = |seq| StoredMessage::user("t", format!("m{seq}"), 0).with_seq(seq);
        let (page, next) = MessageCursor::page(vec![m(3), m(2), m(1)], 2);
        assert_eq!(page, vec![m(2), m(3)]);
        assert_eq!(next.as_deref(), Some("t.2"));
        assert_eq!(MessageCursor::page(vec![m(2), m(1)], 2), (vec![m(1), m(2)], None));
        assert_eq!(MessageCursor::page(vec![], 2), (vec![], None));
    }

    impl StoredMessage {
        fn with_seq(mut self, seq: u32) -> StoredMessage {
            self.seq = seq;
            self
        }
    }
}
