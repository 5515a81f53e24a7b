//! A turn's events after a client's cursor: replayed, then followed until `completed`. From
//! memory when this process runs the turn ([`LiveTurn`]), else from the store's log, polled
//! while the turn runs elsewhere. Events the log could not keep come as one `error` event
//! (`events_missing`) in their place, so a client is told rather than skipped past them.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use super::live::LiveTurn;
use crate::event::{Event, Status};
use crate::orchestrator::ORCHESTRATOR;
use crate::store::{EpisodeKey, LoggedEvent, Store, TurnStatus};

/// The code of the `error` event that stands for events the log lacks.
pub(crate) const EVENTS_MISSING: &str = "events_missing";

/// Where a client is in a turn: it has every event up to `after` (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last seq the client has.
    pub after: u64,
}

/// The bounds of one resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeLimits {
    /// How often the store is read while the turn runs elsewhere and has nothing new.
    pub poll_every: Duration,
    /// Events read from the store at a time.
    pub page: usize,
}

impl Default for ResumeLimits {
    fn default() -> ResumeLimits {
        ResumeLimits { poll_every: Duration::from_millis(250), page: 500 }
    }
}

/// The events of `key`'s turn `turn_id` after `cursor`, in order, none twice, until the turn's
/// `completed` or `until`, whichever is first (a stream cut at `until` ends with no
/// `completed`: the client resumes again from its last id). `live`: the turn, when this process
/// runs it. A turn that ended with no `completed` in its log (its client left with
/// `on_disconnect: cancel`, or its producer died: `abandoned`) gets one made up, with seq 0
/// (sent with no id).
pub(crate) fn follow(
    store: Arc<dyn Store>,
    live: Option<Arc<LiveTurn>>,
    key: EpisodeKey,
    turn_id: String,
    cursor: Cursor,
    limits: ResumeLimits,
    until: Instant,
) -> impl Stream<Item = Arc<LoggedEvent>> + Send {
    let mut follower = Follower {
        store,
        live,
        key,
        turn_id,
        limits,
        until,
        after: cursor.after,
        last_sent: None,
        record_next: false,
    };
    async_stream::stream! {
        while Instant::now() < until {
            let round = follower.round().await;
            for event in round.events {
                yield event;
            }
            match round.then {
                Then::Again => {}
                Then::Stop => break,
                Then::Wait(wait) => follower.wait(wait).await,
            }
        }
    }
}

/// One resume in progress: where the client is, and where its events come from.
struct Follower {
    store: Arc<dyn Store>,
    /// The turn, while this process runs it and still has the events after the cursor.
    live: Option<Arc<LiveTurn>>,
    key: EpisodeKey,
    turn_id: String,
    limits: ResumeLimits,
    until: Instant,
    /// The last seq sent.
    after: u64,
    /// The name of the last event the client has (unknown until one is sent or read).
    last_sent: Option<String>,
    /// The log's page has been read: its record (gaps, status) comes next.
    record_next: bool,
}

/// What one round read: events to send, then what follows.
struct Round {
    events: Vec<Arc<LoggedEvent>>,
    then: Then,
}

enum Then {
    /// Read again at once.
    Again,
    /// The resume is over.
    Stop,
    /// Wait for something new, then read again.
    Wait(Wait),
}

enum Wait {
    /// Until the live turn changes (unless it already has past the cursor), or `until`.
    Live(Arc<LiveTurn>, tokio::sync::watch::Receiver<u64>),
    /// One poll period, or until `until`.
    Poll,
    /// One poll period after a failed read.
    Retry,
}

impl Round {
    fn then(then: Then) -> Round {
        Round { events: Vec::new(), then }
    }
}

impl Follower {
    async fn round(&mut self) -> Round {
        match self.live.clone() {
            Some(turn) => self.read_live(turn),
            None if self.record_next => {
                self.record_next = false;
                self.read_record().await
            }
            None => self.read_log().await,
        }
    }

    /// Notes `event` as sent.
    fn sent(&mut self, event: &LoggedEvent) {
        self.after = event.seq;
        self.last_sent = Some(event.event.clone());
    }

    fn completed_sent(&self) -> bool {
        self.last_sent.as_deref() == Some("completed")
    }

    /// The live turn's events after the cursor; when it has evicted them, the log is read
    /// instead. A turn that ended without a `completed` gets one made up.
    fn read_live(&mut self, turn: Arc<LiveTurn>) -> Round {
        let mut changes = turn.subscribe();
        changes.borrow_and_update();
        let since = turn.since(self.after, self.limits.page);
        if since.evicted {
            self.live = None;
            return Round::then(Then::Again);
        }
        for event in &since.events {
            self.sent(event);
        }
        let mut events = since.events;
        if self.completed_sent() {
            return Round { events, then: Then::Stop };
        }
        if let Some(status) = since.ended {
            let after = self.after;
            let at_cursor = turn.since(after.saturating_sub(1), 1).events;
            let has_completed =
                after > 0 && at_cursor.first().is_some_and(|e| e.seq == after && e.event == "completed");
            if !has_completed {
                events.push(made_up_completed(&self.key, &self.turn_id, status));
            }
            return Round { events, then: Then::Stop };
        }
        Round { events, then: Then::Wait(Wait::Live(turn, changes)) }
    }

    /// A page of the log after the cursor (a gap in its seqs said, not skipped); a full page is
    /// followed by the next, a short one by the turn's record.
    async fn read_log(&mut self) -> Round {
        let page = match self.store.turn_events(&self.key, &self.turn_id, self.after, self.limits.page).await
        {
            Ok(page) => page,
            Err(e) => {
                let (episode, turn) = (&self.key, &self.turn_id);
                tracing::warn!(%episode, %turn, error = %e, "turn log read failed; trying again");
                return Round::then(Then::Wait(Wait::Retry));
            }
        };
        let full = page.len() >= self.limits.page;
        let mut events = Vec::with_capacity(page.len());
        for event in page {
            // Seqs the log skips are a gap it recorded: said, not skipped.
            if event.seq > self.after + 1 {
                events.push(missing(self.after + 1, event.seq - 1));
            }
            self.sent(&event);
            events.push(Arc::new(event));
        }
        if !events.is_empty() && self.completed_sent() {
            return Round { events, then: Then::Stop };
        }
        self.record_next = events.is_empty() || !full;
        Round { events, then: Then::Again }
    }

    /// The turn's record: a gap at the cursor is said, a turn still running is polled, and one
    /// that ended without a `completed` in its log gets one made up.
    async fn read_record(&mut self) -> Round {
        let record = match self.store.turn_record(&self.key, &self.turn_id).await {
            Ok(Some(record)) => record,
            // The log expired while it was read.
            Ok(None) => return Round::then(Then::Stop),
            Err(e) => {
                let (episode, turn) = (&self.key, &self.turn_id);
                tracing::warn!(%episode, %turn, error = %e, "turn record read failed; trying again");
                return Round::then(Then::Wait(Wait::Retry));
            }
        };
        if let Some(&(from, to)) = record.gaps_after(self.after).first() {
            if from == self.after + 1 {
                self.after = to;
                self.last_sent = None;
                return Round { events: vec![missing(from, to)], then: Then::Again };
            }
        }
        if record.last_seq > self.after {
            return Round::then(Then::Again);
        }
        let now = self.store.clock().now_ms();
        let TurnStatus::Ended(status) = record.effective_status(now) else {
            return Round::then(Then::Wait(Wait::Poll));
        };
        let mut events = Vec::new();
        if !self.completed_sent() && !ends_completed(&*self.store, &self.key, &self.turn_id, self.after).await
        {
            let status = Status::from_name(&status).unwrap_or(Status::Partial);
            events.push(made_up_completed(&self.key, &self.turn_id, status));
        }
        Round { events, then: Then::Stop }
    }

    async fn wait(&mut self, wait: Wait) {
        match wait {
            Wait::Live(turn, mut changes) => {
                if turn.last_seq() > self.after {
                    return;
                }
                tokio::select! {
                    _ = changes.changed() => {}
                    () = tokio::time::sleep_until(self.until) => {}
                }
            }
            Wait::Retry => tokio::time::sleep(self.limits.poll_every).await,
            Wait::Poll => {
                tokio::select! {
                    () = tokio::time::sleep(self.limits.poll_every) => {}
                    () = tokio::time::sleep_until(self.until) => {}
                }
            }
        }
    }
}

/// Whether the event at seq `at` of the log is `completed` (the client's cursor sits on it).
async fn ends_completed(store: &dyn Store, key: &EpisodeKey, turn_id: &str, at: u64) -> bool {
    if at == 0 {
        return false;
    }
    match store.turn_events(key, turn_id, at - 1, 1).await {
        Ok(events) => events.first().is_some_and(|e| e.seq == at && e.event == "completed"),
        Err(_) => false,
    }
}

/// The `error` event that stands for seqs `from..=to` the log lacks; it carries the last of
/// them, so a client that resumes after it is not told again.
fn missing(from: u64, to: u64) -> Arc<LoggedEvent> {
    let what = if from == to { format!("event {from}") } else { format!("events {from} to {to}") };
    let event = Event::error(
        ORCHESTRATOR,
        EVENTS_MISSING,
        format!("{what} of this turn could not be recorded and are missing from this replay"),
        false,
    );
    Arc::new(LoggedEvent::of(to, event))
}

/// The `completed` of a turn that ended without one in its log, numbered 0 (no id).
fn made_up_completed(key: &EpisodeKey, turn_id: &str, status: Status) -> Arc<LoggedEvent> {
    let event = Event::Completed {
        episode_id: key.episode_id().to_owned(),
        turn_id: turn_id.to_owned(),
        status,
        model: String::new(),
        duration_ms: 0,
        cost_usd: None,
        usage: Vec::new(),
        interrupts: Box::default(),
    };
    Arc::new(LoggedEvent::of(0, event))
}
