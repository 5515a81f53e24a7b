//! The turns this process runs: each one's events in memory as they stream (for a resume that
//! lands here, and for the log writer), its end, and the token that stops it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::event::{Event, Status};
use crate::store::{EpisodeKey, LoggedEvent};

/// The most bytes of events a live turn keeps in memory; older ones are read from the store.
pub(crate) const LIVE_BYTES: usize = 8 * 1024 * 1024;

/// One turn this process runs.
#[derive(Debug)]
pub struct LiveTurn {
    key: EpisodeKey,
    turn_id: String,
    /// The client's id of the request that started it, if it gave one.
    request_id: Option<String>,
    state: Mutex<State>,
    /// Bumped on every change (an event, the end), so followers wake.
    changed: watch::Sender<u64>,
    /// Set once the turn ends: what the log writer waits for between its writes, so that the
    /// events themselves do not wake it.
    ended_signal: watch::Sender<bool>,
    cancel: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    /// The newest events, in seq order, at most [`LIVE_BYTES`] of them.
    events: VecDeque<Arc<LoggedEvent>>,
    bytes: usize,
    /// The seq of the last event pushed (0 before the first).
    last_seq: u64,
    /// How the turn ended; `None` while it runs.
    ended: Option<Status>,
}

/// What a follower of a live turn gets: the events after its cursor that memory still holds,
/// and whether the turn has ended.
#[derive(Debug)]
pub struct Since {
    /// Events after the cursor, in order (none if memory no longer reaches back to it).
    pub events: Vec<Arc<LoggedEvent>>,
    /// Memory no longer holds the event right after the cursor: read it from the store.
    pub evicted: bool,
    /// The turn's end, once it has ended and every event is in `events` or before the cursor.
    pub ended: Option<Status>,
}

impl LiveTurn {
    /// The turn's episode.
    pub fn key(&self) -> &EpisodeKey {
        &self.key
    }

    /// The turn.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The token that stops the turn.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Asks the turn to stop (idempotent).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Appends `event` as the next one (its seq is the next one) and returns it numbered.
    pub fn push(&self, event: Event) -> Arc<LoggedEvent> {
        let mut state = self.state.lock().expect("live turn lock");
        state.last_seq += 1;
        let logged = Arc::new(LoggedEvent::of(state.last_seq, event));
        state.bytes += logged.event.len() + logged.data.len();
        state.events.push_back(logged.clone());
        while state.bytes > LIVE_BYTES && state.events.len() > 1 {
            let old = state.events.pop_front().expect("not empty");
            state.bytes -= old.event.len() + old.data.len();
        }
        let seq = state.last_seq;
        drop(state);
        self.changed.send_replace(seq);
        logged
    }

    /// Marks the turn ended with `status` (the first end wins).
    pub fn end(&self, status: Status) {
        let mut state = self.state.lock().expect("live turn lock");
        if state.ended.is_none() {
            state.ended = Some(status);
            drop(state);
            // No new seq: marking the value changed wakes the followers.
            self.changed.send_modify(|_| ());
            self.ended_signal.send_replace(true);
        }
    }

    /// How the turn ended, if it has.
    pub fn ended(&self) -> Option<Status> {
        self.state.lock().expect("live turn lock").ended
    }

    /// The seq of the last event so far.
    pub fn last_seq(&self) -> u64 {
        self.state.lock().expect("live turn lock").last_seq
    }

    /// The seq of the oldest event memory holds (the next one's when it holds none).
    pub fn first_in_memory(&self) -> u64 {
        let state = self.state.lock().expect("live turn lock");
        state.events.front().map_or(state.last_seq + 1, |e| e.seq)
    }

    /// The events after `after_seq`, at most `limit` of them.
    pub fn since(&self, after_seq: u64, limit: usize) -> Since {
        let state = self.state.lock().expect("live turn lock");
        let first = state.events.front().map_or(state.last_seq + 1, |e| e.seq);
        if after_seq + 1 < first {
            return Since { events: Vec::new(), evicted: true, ended: None };
        }
        let skip = (after_seq + 1 - first) as usize;
        let events: Vec<_> = state.events.iter().skip(skip).take(limit).cloned().collect();
        let reached_end = events.last().map_or(after_seq, |e| e.seq) >= state.last_seq;
        Since { events, evicted: false, ended: state.ended.filter(|_| reached_end) }
    }

    /// A receiver that changes with every event and the end.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A receiver that changes once, when the turn ends.
    pub fn subscribe_end(&self) -> watch::Receiver<bool> {
        self.ended_signal.subscribe()
    }
}

/// The turns this process runs, by episode and turn.
#[derive(Debug, Default)]
pub struct LiveTurns {
    turns: Mutex<HashMap<(EpisodeKey, String), Arc<LiveTurn>>>,
}

impl LiveTurns {
    /// An empty registry.
    pub fn new() -> Arc<LiveTurns> {
        Arc::new(LiveTurns::default())
    }

    /// Registers a turn starting now, started by the client's request `request_id`; it stays
    /// until the returned guard is dropped. A turn registered already (a repeated request id
    /// answered again once its first run had ended) gets a new entry.
    pub fn register(
        self: &Arc<Self>,
        key: EpisodeKey,
        turn_id: String,
        request_id: Option<String>,
        cancel: CancellationToken,
    ) -> Registered {
        let (changed, _) = watch::channel(0);
        let (ended_signal, _) = watch::channel(false);
        let turn = Arc::new(LiveTurn {
            key: key.clone(),
            turn_id: turn_id.clone(),
            request_id,
            state: Mutex::default(),
            changed,
            ended_signal,
            cancel,
        });
        self.turns.lock().expect("live turns lock").insert((key, turn_id), turn.clone());
        Registered { turns: self.clone(), turn }
    }

    /// The running turn `turn_id` of `key`, if this process runs it.
    pub fn get(&self, key: &EpisodeKey, turn_id: &str) -> Option<Arc<LiveTurn>> {
        self.turns.lock().expect("live turns lock").get(&(key.clone(), turn_id.to_owned())).cloned()
    }

    /// The turn of `key` that the client's request `request_id` started, while it still runs in
    /// this process: a retry of that request joins it rather than running it twice.
    pub fn running_request(&self, key: &EpisodeKey, request_id: &str) -> Option<Arc<LiveTurn>> {
        let turns = self.turns.lock().expect("live turns lock");
        turns
            .iter()
            .filter(|((k, _), turn)| k == key && turn.request_id.as_deref() == Some(request_id))
            .map(|(_, turn)| turn)
            .find(|turn| turn.ended().is_none())
            .cloned()
    }

    /// The newest turn of `key` this process runs (turn ids sort by creation time).
    pub fn latest(&self, key: &EpisodeKey) -> Option<String> {
        let turns = self.turns.lock().expect("live turns lock");
        turns.keys().filter(|(k, _)| k == key).map(|(_, turn)| turn).max().cloned()
    }

    /// How many turns this process runs.
    pub fn len(&self) -> usize {
        self.turns.lock().expect("live turns lock").len()
    }

    /// Whether it runs none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A turn's place in [`LiveTurns`], given up when dropped (once its log is written).
#[derive(Debug)]
pub struct Registered {
    turns: Arc<LiveTurns>,
    turn: Arc<LiveTurn>,
}

impl Registered {
    /// The turn.
    pub fn turn(&self) -> &Arc<LiveTurn> {
        &self.turn
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut turns = self.turns.turns.lock().expect("live turns lock");
        let id = (self.turn.key.clone(), self.turn.turn_id.clone());
        // Only this entry: a later turn registered under the same id keeps its own.
        if turns.get(&id).is_some_and(|t| Arc::ptr_eq(t, &self.turn)) {
            turns.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> EpisodeKey {
        EpisodeKey::new("u", "e").unwrap()
    }

    fn text(text: String) -> Event {
        Event::Text { agent: "a".into(), text }
    }

    #[test]
    fn events_are_numbered_from_one_and_read_after_a_cursor() {
        let turns = LiveTurns::new();
        let registered = turns.register(key(), "t".into(), None, CancellationToken::new());
        let turn = registered.turn();
        for i in 0..12 {
            assert_eq!(turn.push(text(format!("{i}"))).seq, i + 1);
        }
        let since = turn.since(9, 100);
        assert_eq!(since.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [10, 11, 12]);
        assert_eq!(since.ended, None);
        assert_eq!(turn.since(2, 3).events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        turn.end(Status::Ok);
        assert_eq!(turn.since(12, 10).ended, Some(Status::Ok));
        assert_eq!(turn.since(3, 2).ended, None, "not at the end yet");
        turn.end(Status::Error);
        assert_eq!(turn.ended(), Some(Status::Ok), "the first end wins");
    }

    #[test]
    fn memory_is_bounded_and_says_when_it_no_longer_reaches_back() {
        let turns = LiveTurns::new();
        let registered = turns.register(key(), "t".into(), None, CancellationToken::new());
        let turn = registered.turn();
        let big = "x".repeat(LIVE_BYTES / 4);
        for _ in 0..6 {
            turn.push(text(big.clone()));
        }
        let since = turn.since(0, 10);
        assert!(since.evicted && since.events.is_empty());
        let kept = turn.since(4, 10);
        assert!(!kept.evicted);
        assert_eq!(kept.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [5, 6]);
    }

    #[test]
    fn a_running_turn_is_found_by_its_request_id_until_it_ends() {
        let turns = LiveTurns::new();
        let registered = turns.register(key(), "t".into(), Some("r1".into()), CancellationToken::new());
        assert!(turns.running_request(&key(), "r1").is_some());
        assert!(turns.running_request(&key(), "r2").is_none());
        assert!(
            turns.running_request(&EpisodeKey::new("other", "e").unwrap(), "r1").is_none(),
            "keyed by user"
        );
        registered.turn().end(Status::Ok);
        assert!(turns.running_request(&key(), "r1").is_none(), "an ended turn is answered again");
    }

    #[test]
    fn a_turn_is_found_while_registered_and_only_its_own_entry_is_removed() {
        let turns = LiveTurns::new();
        let first = turns.register(key(), "t".into(), None, CancellationToken::new());
        assert!(turns.get(&key(), "t").is_some());
        assert!(turns.get(&EpisodeKey::new("other", "e").unwrap(), "t").is_none(), "keyed by user too");
        let second = turns.register(key(), "t".into(), None, CancellationToken::new());
        drop(first);
        assert!(Arc::ptr_eq(&turns.get(&key(), "t").unwrap(), second.turn()));
        drop(second);
        assert!(turns.is_empty());
    }
}
