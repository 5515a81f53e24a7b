//! A turn's event log and its record (docs/storage.md, "Turn logs"): the types of the
//! [`Store`](super::Store) calls that keep them, their items, and the checks both stores make.
//!
//! A turn's client-facing events are appended in batches, numbered from 1 with no gap. The
//! turn's record says how far the log goes (`last_seq`), which numbers could not be written
//! (`gaps`, so a reader is told they are missing rather than skipping them), whether the turn
//! still runs, whether someone asked to stop it, and its deadline: a turn still `running` after
//! its deadline reads as `ABANDONED` (its producer died).
//!
//! Items, in the episode's partition:
//!
//! | item | `sk` | attributes |
//! |---|---|---|
//! | record | `TURN#<turn>` | `status` (`running` or how it ended), `cancel_requested`, `last_seq`, `gaps` (a list of `{from, to}`), `deadline_ms`, `updated_at`, `ttl` |
//! | events | `TURN#<turn>#LOG#<last seq, 20 digits>` | `first`, `last`, `log` (the events, one string: see below), `ttl` |
//!
//! An events item's `log` holds its events in seq order from `first`, each as
//! `<name> <bytes of its JSON> <its JSON>\n` (for example `text 13 {"text":"hi"}`): one string
//! attribute, not a map of three attributes per event, so the item is smaller (about a fifth
//! on DynamoDB, two fifths in the embedded store's DynamoDB JSON). The length makes the form hold
//! any JSON text; a name holds no space (`check_batch` refuses one that does). Items written
//! before this form keep their events in `events`, a list of `{seq, event, data}` maps, and
//! read as they did.
//!
//! An events item is keyed by the *last* seq it holds, zero-padded so text order is number
//! order: the events after seq `n` start in the first item whose key is at or past `n + 1`,
//! found by one range read. A batch too big for one item (DynamoDB's limit is 400 KB) is
//! split into several, all written in the append's one write.

use std::sync::Arc;
use std::time::Duration;

use super::item::{Attr, Item, Reader, item_name};
use super::{EpisodeKey, StoreError};
use crate::event::Event;

/// How long a turn log's items live after their write, unless configured otherwise.
pub const DEFAULT_TURN_LOG_TTL: Duration = Duration::from_secs(24 * 3600);

/// The status a turn that is still `running` after its deadline reads as.
pub(crate) const ABANDONED: &str = "abandoned";

/// The stored status of a turn that has not ended.
const RUNNING: &str = "running";

/// Every turn-log sort key starts with this.
pub const TURN_PREFIX: &str = "TURN#";

/// The most bytes of events (names and JSON, with a margin per event for the attribute names
/// and numbers) one item holds: DynamoDB's limit is 400 KB per item, keys and names included.
pub(crate) const MAX_ITEM_EVENT_BYTES: usize = 350_000;

/// The most items one append writes: one DynamoDB transaction takes at most 100 actions and
/// 4 MB, so an append stays well inside both (about 3.5 MB of events).
pub(crate) const MAX_APPEND_ITEMS: usize = 10;

/// What an event costs in an item beyond its name and data, with a margin: its length and
/// separators in `log` (an item of the older form spent about 50 bytes more on each).
const EVENT_OVERHEAD: usize = 64;

/// One client-facing event of a turn, as the log keeps it: its number, name and JSON, and, when
/// this process produced it, the event itself, so a translation (AG-UI, the AI SDK, A2A, MCP)
/// reads it without parsing its JSON back. Two are equal when their number, name and JSON are.
#[derive(Debug, Clone)]
pub struct LoggedEvent {
    /// Its number in the turn, from 1, with no gap.
    pub seq: u64,
    /// The SSE event name (`text`, `completed`, …).
    pub event: String,
    /// Its JSON, as sent.
    pub data: String,
    /// The event itself; `None` for one read back from the store.
    typed: Option<Arc<Event>>,
}

impl PartialEq for LoggedEvent {
    fn eq(&self, other: &LoggedEvent) -> bool {
        (self.seq, &self.event, &self.data) == (other.seq, &other.event, &other.data)
    }
}

impl Eq for LoggedEvent {}

impl LoggedEvent {
    /// An event as the log keeps it: number `seq`, SSE name `event`, JSON `data` (read back from
    /// the store: its typed form is read from `data` when asked for).
    pub fn new(seq: u64, event: impl Into<String>, data: impl Into<String>) -> LoggedEvent {
        LoggedEvent { seq, event: event.into(), data: data.into(), typed: None }
    }

    /// `event` as the log keeps it, numbered `seq`: its SSE name and its JSON, and the event.
    pub fn of(seq: u64, event: Event) -> LoggedEvent {
        // Serializing a plain enum of strings, numbers and JSON values cannot fail.
        let data = serde_json::to_string(&event).expect("event serializes");
        LoggedEvent { seq, event: event.kind().to_owned(), data, typed: Some(Arc::new(event)) }
    }

    /// The event: as produced when this process produced it, else read from its JSON (`None`
    /// when that is no event this version knows).
    pub fn typed(&self) -> Option<std::borrow::Cow<'_, Event>> {
        match &self.typed {
            Some(event) => Some(std::borrow::Cow::Borrowed(event.as_ref())),
            None => serde_json::from_str(&self.data).ok().map(std::borrow::Cow::Owned),
        }
    }

    fn size(&self) -> usize {
        self.event.len() + self.data.len() + EVENT_OVERHEAD
    }
}

/// Whether a turn runs or how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnStatus {
    /// Its producer has not ended it (yet).
    Running,
    /// It ended with this `completed` status (`ok`, `partial`, `cancelled`, …).
    Ended(String),
}

/// A turn's record: how far its log goes and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    /// The turn.
    pub turn_id: String,
    /// As stored: see [`TurnRecord::effective_status`] for what a reader should make of it.
    pub status: TurnStatus,
    /// Whether someone asked to stop it ([`TurnLog::request_cancel`](super::TurnLog::request_cancel)).
    pub cancel_requested: bool,
    /// The last seq logged or given up on (0 before the first event).
    pub last_seq: u64,
    /// Seqs that could not be written, as inclusive ranges in order, adjacent ones merged.
    pub gaps: Vec<(u64, u64)>,
    /// When (ms since the epoch) the turn must have ended.
    pub deadline_ms: u64,
    /// When the record was last written (ms).
    pub updated_at: u64,
}

impl TurnRecord {
    /// The status a reader should see at `now_ms`: a turn still running after its deadline
    /// has lost its producer and reads as `ABANDONED`.
    pub fn effective_status(&self, now_ms: u64) -> TurnStatus {
        match &self.status {
            TurnStatus::Running if now_ms > self.deadline_ms => TurnStatus::Ended(ABANDONED.into()),
            status => status.clone(),
        }
    }

    /// The gaps a reader who has every event up to `after_seq` has yet to be told of, clipped
    /// to start after it.
    pub fn gaps_after(&self, after_seq: u64) -> Vec<(u64, u64)> {
        self.gaps
            .iter()
            .filter(|(_, to)| *to > after_seq)
            .map(|&(from, to)| (from.max(after_seq + 1), to))
            .collect()
    }
}

/// What asking to stop a turn found ([`TurnLog::request_cancel`](super::TurnLog::request_cancel)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The turn runs and is now asked to stop (also when it had been asked before).
    Requested,
    /// The turn had ended already, with this status (`ABANDONED` for one past its deadline).
    AlreadyEnded(String),
    /// No such turn in this episode (or its log has expired).
    Unknown,
}

/// A turn id must be usable in a sort key: 1 to 256 characters, no `#`, no control character.
pub fn check_turn_id(turn_id: &str) -> Result<(), StoreError> {
    if turn_id.is_empty() || turn_id.len() > 256 || turn_id.chars().any(|c| c == '#' || c.is_control()) {
        return Err(StoreError::InvalidKey(format!(
            "turn id {turn_id:?} must be 1 to 256 characters without '#' or control characters"
        )));
    }
    Ok(())
}

/// The sort key of the turn's record, `TURN#<turn>`.
pub fn turn_sk(turn_id: &str) -> String {
    format!("{TURN_PREFIX}{turn_id}")
}

/// Every events item of the turn has a sort key starting with this.
pub(crate) fn turn_log_prefix(turn_id: &str) -> String {
    format!("{TURN_PREFIX}{turn_id}#LOG#")
}

/// Past every events item's sort key of the turn (`$` follows `#`), for range reads.
pub fn turn_log_end(turn_id: &str) -> String {
    format!("{TURN_PREFIX}{turn_id}#LOG$")
}

/// The sort key of the events item whose last event is `last_seq`.
pub fn turn_log_sk(turn_id: &str, last_seq: u64) -> String {
    format!("{}{last_seq:020}", turn_log_prefix(turn_id))
}

/// The turn a turn-log sort key (record or events) belongs to.
pub fn turn_of_sk(sk: &str) -> Option<&str> {
    let rest = sk.strip_prefix(TURN_PREFIX)?;
    let turn = rest.split('#').next()?;
    (!turn.is_empty()).then_some(turn)
}

fn conflict(key: &EpisodeKey, turn_id: &str, reason: String) -> StoreError {
    StoreError::Conflict { key: item_name(&key.pk(), &turn_sk(turn_id)), reason }
}

/// The record of a turn just started.
pub fn new_record(turn_id: &str, deadline_ms: u64, now_ms: u64) -> TurnRecord {
    TurnRecord {
        turn_id: turn_id.to_owned(),
        status: TurnStatus::Running,
        cancel_requested: false,
        last_seq: 0,
        gaps: Vec::new(),
        deadline_ms,
        updated_at: now_ms,
    }
}

/// Whether starting the log where `stored` is found writes it: not if it is the same start
/// again (a retry); a [`StoreError::Conflict`] if the turn's log exists otherwise.
pub fn check_start(
    key: &EpisodeKey,
    turn_id: &str,
    deadline_ms: u64,
    stored: Option<&TurnRecord>,
) -> Result<bool, StoreError> {
    match stored {
        None => Ok(true),
        Some(r) if r.status == TurnStatus::Running && r.last_seq == 0 && r.deadline_ms == deadline_ms => {
            Ok(false)
        }
        Some(r) => Err(conflict(
            key,
            turn_id,
            format!("the turn's log was started already (up to seq {})", r.last_seq),
        )),
    }
}

/// What an append of `events` must do, given the record as stored.
#[derive(Debug, PartialEq, Eq)]
pub enum AppendPlan {
    /// Nothing to write (no events).
    Nothing,
    /// Write these items (each a run of the events), and move `last_seq` to the last event.
    Write(Vec<std::ops::Range<usize>>),
    /// Every event is at or below `last_seq`: a retry if the logged events are the same ones
    /// ([`check_retry`]).
    MaybeRetry,
}

/// Checks `events` (consecutive seqs, each fitting an item, not too many for one append) and
/// plans the append against `stored`: gaps, overlaps, an ended or unknown turn are a
/// [`StoreError::Conflict`] that says which.
pub fn plan_append(
    key: &EpisodeKey,
    turn_id: &str,
    stored: Option<&TurnRecord>,
    events: &[LoggedEvent],
) -> Result<AppendPlan, StoreError> {
    let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(AppendPlan::Nothing) };
    let runs = check_batch(events)?;
    let Some(record) = stored else {
        return Err(conflict(key, turn_id, "the turn's log was never started (or has expired)".into()));
    };
    if last.seq <= record.last_seq {
        return Ok(AppendPlan::MaybeRetry);
    }
    if let TurnStatus::Ended(status) = &record.status {
        return Err(conflict(key, turn_id, format!("the turn's log has ended (status {status})")));
    }
    if first.seq != record.last_seq + 1 {
        let what = if first.seq > record.last_seq + 1 { "a gap" } else { "an overlap" };
        return Err(conflict(
            key,
            turn_id,
            format!(
                "the log ends at seq {}; a batch starting at seq {} would leave {what}",
                record.last_seq, first.seq
            ),
        ));
    }
    Ok(AppendPlan::Write(runs))
}

/// Checks that `events` have consecutive seqs, from 1 or later, and names without a space,
/// and splits them into the runs that each fit one item (`split_batch`).
pub fn check_batch(events: &[LoggedEvent]) -> Result<Vec<std::ops::Range<usize>>, StoreError> {
    if events.first().is_some_and(|e| e.seq == 0) {
        return Err(StoreError::Failed("a turn's events are numbered from 1; seq 0 cannot be logged".into()));
    }
    if let Some(e) = events.iter().find(|e| e.event.contains(' ')) {
        return Err(StoreError::Failed(format!(
            "event seq {} is named {:?}: an event's name holds no space",
            e.seq, e.event
        )));
    }
    for pair in events.windows(2) {
        if pair[1].seq != pair[0].seq.wrapping_add(1) {
            return Err(StoreError::Failed(format!(
                "the batch's seqs must be consecutive: {} follows {}",
                pair[1].seq, pair[0].seq
            )));
        }
    }
    split_batch(events)
}

/// The runs of `events` that each fit one item, in order.
pub(crate) fn split_batch(events: &[LoggedEvent]) -> Result<Vec<std::ops::Range<usize>>, StoreError> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, e) in events.iter().enumerate() {
        if e.size() > MAX_ITEM_EVENT_BYTES {
            return Err(StoreError::Failed(format!(
                "event seq {} ({} bytes) is larger than a log item holds ({MAX_ITEM_EVENT_BYTES} bytes): \
                 record it as a gap",
                e.seq,
                e.size()
            )));
        }
        if bytes + e.size() > MAX_ITEM_EVENT_BYTES {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += e.size();
    }
    runs.push(start..events.len());
    if runs.len() > MAX_APPEND_ITEMS {
        return Err(StoreError::Failed(format!(
            "a batch of {} events needs {} log items, more than one append writes ({MAX_APPEND_ITEMS}): \
             append it in smaller batches",
            events.len(),
            runs.len()
        )));
    }
    Ok(runs)
}

/// A batch whose seqs are all logged already is a retry if the log holds exactly these events;
/// otherwise it overlaps what is logged.
pub fn check_retry(
    key: &EpisodeKey,
    turn_id: &str,
    events: &[LoggedEvent],
    logged: &[LoggedEvent],
) -> Result<(), StoreError> {
    if events == logged {
        return Ok(());
    }
    let (first, last) = (events[0].seq, events[events.len() - 1].seq);
    Err(conflict(
        key,
        turn_id,
        format!(
            "seqs {first} to {last} are logged already, not as these events (an overlap, or a gap there)"
        ),
    ))
}

/// Records that seqs `from..=to` could not be written, on `record`: the part past `last_seq`
/// becomes a gap (merged with an adjacent one) and `last_seq` moves to `to`. Returns whether
/// the record changed; a part already logged is no gap (the failed write did land).
pub fn apply_gap(
    key: &EpisodeKey,
    turn_id: &str,
    record: &mut TurnRecord,
    from: u64,
    to: u64,
) -> Result<bool, StoreError> {
    if from == 0 || to < from {
        return Err(StoreError::Failed(format!(
            "a gap runs from seq 1 or later to a seq at or after it, not {from} to {to}"
        )));
    }
    if from > record.last_seq + 1 {
        return Err(conflict(
            key,
            turn_id,
            format!(
                "the log ends at seq {}; a gap from seq {from} would leave seqs unaccounted for",
                record.last_seq
            ),
        ));
    }
    if to <= record.last_seq {
        return Ok(false);
    }
    if let TurnStatus::Ended(status) = &record.status {
        return Err(conflict(key, turn_id, format!("the turn's log has ended (status {status})")));
    }
    let from = from.max(record.last_seq + 1);
    match record.gaps.last_mut() {
        Some(last) if last.1 + 1 == from => last.1 = to,
        _ => record.gaps.push((from, to)),
    }
    record.last_seq = to;
    Ok(true)
}

/// Whether ending the log with `status` writes the record: not if it ended with that status
/// already (a retry); a [`StoreError::Conflict`] for an unknown turn or another end.
pub fn check_end(
    key: &EpisodeKey,
    turn_id: &str,
    status: &str,
    stored: Option<&TurnRecord>,
) -> Result<bool, StoreError> {
    if status.is_empty() || status == RUNNING {
        return Err(StoreError::Failed(format!("{status:?} is not a status a turn ends with")));
    }
    match stored.map(|r| &r.status) {
        None => Err(conflict(key, turn_id, "the turn's log was never started (or has expired)".into())),
        Some(TurnStatus::Running) => Ok(true),
        Some(TurnStatus::Ended(s)) if s == status => Ok(false),
        Some(TurnStatus::Ended(s)) => {
            Err(conflict(key, turn_id, format!("the turn ended already, with status {s}")))
        }
    }
}

/// What asking to stop the turn recorded as `stored` finds at `now_ms`, and whether the flag
/// must be written (a running turn not yet asked).
pub fn cancel_outcome(stored: Option<&TurnRecord>, now_ms: u64) -> (CancelOutcome, bool) {
    match stored {
        None => (CancelOutcome::Unknown, false),
        Some(r) => match r.effective_status(now_ms) {
            TurnStatus::Ended(status) => (CancelOutcome::AlreadyEnded(status), false),
            TurnStatus::Running => (CancelOutcome::Requested, !r.cancel_requested),
        },
    }
}

/// The record's item, expiring at `ttl`.
pub fn encode_record(record: &TurnRecord, ttl: u64) -> Item {
    let status = match &record.status {
        TurnStatus::Running => RUNNING.to_owned(),
        TurnStatus::Ended(s) => s.clone(),
    };
    let gaps = record
        .gaps
        .iter()
        .map(|&(from, to)| {
            Attr::M([("from".to_owned(), Attr::n(from)), ("to".to_owned(), Attr::n(to))].into())
        })
        .collect();
    Item::from([
        ("status".to_owned(), Attr::S(status)),
        ("cancel_requested".to_owned(), Attr::Bool(record.cancel_requested)),
        ("last_seq".to_owned(), Attr::n(record.last_seq)),
        ("gaps".to_owned(), Attr::L(gaps)),
        ("deadline_ms".to_owned(), Attr::n(record.deadline_ms)),
        ("updated_at".to_owned(), Attr::n(record.updated_at)),
        ("ttl".to_owned(), Attr::n(ttl)),
    ])
}

/// Decodes the record item at `pk` / `sk`.
pub fn decode_record(pk: &str, sk: &str, item: &Item) -> Result<TurnRecord, StoreError> {
    let r = Reader::new(item_name(pk, sk), item);
    let turn_id = turn_of_sk(sk)
        .filter(|t| sk == turn_sk(t))
        .ok_or_else(|| r.corrupt("the sort key is not `TURN#<turn>`"))?;
    let status = match r.s("status")? {
        RUNNING => TurnStatus::Running,
        ended => TurnStatus::Ended(ended.to_owned()),
    };
    let cancel_requested = match item.get("cancel_requested") {
        None => false,
        Some(Attr::Bool(b)) => *b,
        Some(_) => return Err(r.corrupt("`cancel_requested` is not a boolean")),
    };
    let gaps = match item.get("gaps") {
        None => Vec::new(),
        Some(Attr::L(list)) => list
            .iter()
            .map(|g| match g {
                Attr::M(m) => {
                    let g = Reader::new(r.name().to_owned(), m);
                    Ok((g.n("from")?, g.n("to")?))
                }
                _ => Err(r.corrupt("a `gaps` entry is not a map")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(r.corrupt("`gaps` is not a list")),
    };
    Ok(TurnRecord {
        turn_id: turn_id.to_owned(),
        status,
        cancel_requested,
        last_seq: r.n("last_seq")?,
        gaps,
        deadline_ms: r.n("deadline_ms")?,
        updated_at: r.n("updated_at")?,
    })
}

/// The events item holding `events` (a run of consecutive seqs), expiring at `ttl`.
pub fn encode_events(events: &[LoggedEvent], ttl: u64) -> Item {
    use std::fmt::Write;
    let size: usize = events.iter().map(|e| e.event.len() + e.data.len() + 8).sum();
    let mut log = String::with_capacity(size);
    for e in events {
        // Writing to a `String` cannot fail.
        writeln!(log, "{} {} {}", e.event, e.data.len(), e.data).expect("writes to a String");
    }
    Item::from([
        ("first".to_owned(), Attr::n(events.first().map_or(0, |e| e.seq))),
        ("last".to_owned(), Attr::n(events.last().map_or(0, |e| e.seq))),
        ("log".to_owned(), Attr::S(log)),
        ("ttl".to_owned(), Attr::n(ttl)),
    ])
}

/// Decodes the events item at `pk` / `sk`, of either form (the module's docs).
pub fn decode_events(pk: &str, sk: &str, item: &Item) -> Result<Vec<LoggedEvent>, StoreError> {
    let r = Reader::new(item_name(pk, sk), item);
    match (item.get("log"), item.get("events")) {
        (Some(Attr::S(log)), _) => {
            let (first, last) = (r.n("first")?, r.n("last")?);
            let events = decode_log(&r, first, log)?;
            // An empty item (never written, but encodable) says `first` and `last` 0.
            let ends = events.last().map_or(first.saturating_sub(1), |e| e.seq);
            if ends != last && !(events.is_empty() && first == 0 && last == 0) {
                return Err(r.corrupt(format!(
                    "`log` holds {} events from seq {first}, but the item says it ends at seq {last}",
                    events.len()
                )));
            }
            Ok(events)
        }
        (None, Some(Attr::L(list))) => list
            .iter()
            .map(|e| match e {
                Attr::M(m) => {
                    let e = Reader::new(r.name().to_owned(), m);
                    Ok(LoggedEvent::new(e.n("seq")?, e.s("event")?, e.s("data")?))
                }
                _ => Err(r.corrupt("an `events` entry is not a map")),
            })
            .collect(),
        _ => Err(r.corrupt("neither `log` (a string) nor `events` (a list) holds its events")),
    }
}

/// The events in `log`, numbered from `first`.
fn decode_log(r: &Reader<'_>, first: u64, mut log: &str) -> Result<Vec<LoggedEvent>, StoreError> {
    let mut events = Vec::new();
    while !log.is_empty() {
        let seq = first + events.len() as u64;
        let bad = |what: &str| r.corrupt(format!("`log` is cut or malformed at seq {seq}: {what}"));
        let (name, rest) = log.split_once(' ').ok_or_else(|| bad("no name"))?;
        let (len, rest) = rest.split_once(' ').ok_or_else(|| bad("no length"))?;
        let len: usize = len.parse().map_err(|_| bad("the length is not a number"))?;
        let data =
            rest.get(..len).ok_or_else(|| bad("shorter than its length, or it ends inside a character"))?;
        log = rest[len..].strip_prefix('\n').ok_or_else(|| bad("no newline after the JSON"))?;
        events.push(LoggedEvent::new(seq, name, data));
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, data: &str) -> LoggedEvent {
        LoggedEvent::new(seq, "text", data)
    }

    #[test]
    fn events_item_keys_sort_by_seq_as_numbers() {
        assert!(turn_log_sk("t", 9) < turn_log_sk("t", 10));
        assert!(turn_log_sk("t", u64::MAX) < turn_log_end("t"));
        assert!(turn_sk("t") < turn_log_sk("t", 0));
        assert_eq!(turn_of_sk(&turn_log_sk("t1", 3)), Some("t1"));
        assert_eq!(turn_of_sk(&turn_sk("t1")), Some("t1"));
    }

    #[test]
    fn a_batch_too_big_for_one_item_is_split_and_one_too_big_event_is_refused() {
        let big = "x".repeat(MAX_ITEM_EVENT_BYTES / 3);
        let events: Vec<LoggedEvent> = (1..=7).map(|s| ev(s, &big)).collect();
        assert_eq!(split_batch(&events).unwrap(), vec![0..2, 2..4, 4..6, 6..7]);
        let huge = ev(1, &"x".repeat(MAX_ITEM_EVENT_BYTES));
        let err = split_batch(&[huge]).unwrap_err();
        assert!(err.to_string().contains("larger than a log item holds"), "{err}");
        let many: Vec<LoggedEvent> = (1..=25).map(|s| ev(s, &big)).collect();
        assert!(split_batch(&many).unwrap_err().to_string().contains("smaller batches"));
    }

    #[test]
    fn a_running_turn_past_its_deadline_reads_as_abandoned() {
        let record = new_record("t", 1_000, 0);
        assert_eq!(record.effective_status(1_000), TurnStatus::Running);
        assert_eq!(record.effective_status(1_001), TurnStatus::Ended(ABANDONED.into()));
        let ended = TurnRecord { status: TurnStatus::Ended("ok".into()), ..record };
        assert_eq!(ended.effective_status(5_000), TurnStatus::Ended("ok".into()));
    }

    #[test]
    fn adjacent_gaps_merge_and_a_logged_part_is_no_gap() {
        let key = EpisodeKey::new("u", "e").unwrap();
        let mut record = new_record("t", 1_000, 0);
        record.last_seq = 4;
        assert!(apply_gap(&key, "t", &mut record, 5, 6).unwrap());
        assert!(apply_gap(&key, "t", &mut record, 7, 9).unwrap());
        assert!(!apply_gap(&key, "t", &mut record, 3, 9).unwrap());
        assert!(apply_gap(&key, "t", &mut record, 8, 10).unwrap());
        assert_eq!((record.gaps.clone(), record.last_seq), (vec![(5, 10)], 10));
        assert!(apply_gap(&key, "t", &mut record, 12, 13).is_err(), "seq 11 would be unaccounted for");
        assert_eq!(record.gaps_after(7), vec![(8, 10)]);
        assert_eq!(record.gaps_after(10), vec![]);
    }

    #[test]
    fn a_malformed_log_is_reported_as_corrupt_and_a_name_with_a_space_is_refused() {
        let item = |log: &str, last: u64| {
            Item::from([
                ("first".to_owned(), Attr::n(3)),
                ("last".to_owned(), Attr::n(last)),
                ("log".to_owned(), Attr::s(log)),
            ])
        };
        let good = "text 2 {}\ncompleted 7 {\"a\":1}\n";
        let read = decode_events("P", "S", &item(good, 4)).unwrap();
        for last in [3, 5] {
            let err = decode_events("P", "S", &item(good, last)).unwrap_err();
            assert!(err.to_string().contains("holds 2 events from seq 3"), "{err}");
        }
        assert_eq!(read, [LoggedEvent::new(3, "text", "{}"), LoggedEvent::new(4, "completed", r#"{"a":1}"#)]);
        for (bad, why) in [
            ("text 2 {}", "no newline"),
            ("text 9 {}\n", "shorter than its length"),
            ("text x {}\n", "not a number"),
            ("text", "no name"),
            ("text 2 {}\ntext", "at seq 4: no name"),
            ("text 2 aü\n", "shorter than its length"),
            ("text 2 {}}\n", "no newline"),
        ] {
            let err = decode_events("P", "S", &item(bad, 4)).unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt { .. }) && err.to_string().contains(why),
                "{bad:?}: {err}"
            );
        }
        let no_events = Item::from([("first".to_owned(), Attr::n(3))]);
        assert!(decode_events("P", "S", &no_events).unwrap_err().to_string().contains("neither `log`"));
        let err = check_batch(&[LoggedEvent::new(1, "two words", "{}")]).unwrap_err();
        assert!(err.to_string().contains("holds no space"), "{err}");
    }

    #[test]
    fn a_record_and_an_events_item_round_trip() {
        let mut record = new_record("t1", 9, 3);
        record.gaps = vec![(2, 3)];
        record.cancel_requested = true;
        record.status = TurnStatus::Ended("cancelled".into());
        assert_eq!(decode_record("P", &turn_sk("t1"), &encode_record(&record, 5)).unwrap(), record);
        let events = vec![ev(9, "{\"a\":1}"), ev(10, "{}")];
        assert_eq!(decode_events("P", &turn_log_sk("t1", 10), &encode_events(&events, 5)).unwrap(), events);
        let err = decode_record("P", &turn_log_sk("t1", 10), &encode_record(&record, 5)).unwrap_err();
        assert!(err.to_string().contains("TURN#<turn>"), "{err}");
    }
}
