//! Conversation storage (docs/storage.md): the store's traits, one per concern ([`Conversations`],
//! [`Leases`], [`TurnLog`], [`ApprovalRecords`], and [`Store`] for all four), its types, and the
//! embedded store.
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
//! - `traits`: the ports by concern and [`Store`], re-exported here; [`update_episode`].
//! - [`item`]: the attribute-map form of each item and its strict decoding.
//! - [`embedded`]: a file-backed store (redb), the default for local runs.
//! - [`lease`]: a short lease on a name within an episode, waited for with a bound, released
//!   when the holder is done or dropped.
//! - [`turn_log`]: a turn's event log and record (`TURN#<turn>`, `TURN#<turn>#LOG#<last seq>`):
//!   their types, items and the checks both stores make.
//! - [`backends`]: routed agents' response ids kept on the episode item.

pub mod backends;
pub mod embedded;
pub mod item;
pub mod lease;
mod traits;
pub mod turn_log;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::event::{AgentUsage, Status};
use crate::model::Message;

pub use traits::{ApprovalRecords, Clocked, Conversations, Leases, Store, TurnLog, update_episode};
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

/// What asking for a lease found ([`Leases::take_lease`]).
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

/// The position of one message in its episode, as a page cursor of [`Conversations::messages_page`]:
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
