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
pub const EVENTS_MISSING: &str = "events_missing";

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
pub fn follow(
    store: Arc<dyn Store>,
    live: Option<Arc<LiveTurn>>,
    key: EpisodeKey,
    turn_id: String,
    cursor: Cursor,
    limits: ResumeLimits,
    until: Instant,
) -> impl Stream<Item = Arc<LoggedEvent>> + Send {
    async_stream::stream! {
        let mut after = cursor.after;
        let mut live = live;
        // The name of the last event the client has (unknown until one is sent or read).
        let mut last_sent: Option<String> = None;
        loop {
            if Instant::now() >= until {
                break;
            }
            if let Some(turn) = live.clone() {
                let mut changes = turn.subscribe();
                changes.borrow_and_update();
                let since = turn.since(after, limits.page);
                if since.evicted {
                    live = None;
                    continue;
                }
                for event in since.events {
                    after = event.seq;
                    last_sent = Some(event.event.clone());
                    yield event;
                }
                if last_sent.as_deref() == Some("completed") {
                    break;
                }
                if let Some(status) = since.ended {
                    let at_cursor = turn.since(after.saturating_sub(1), 1).events;
                    let has_completed = after > 0 && at_cursor.first().is_some_and(|e| e.seq == after && e.event == "completed");
                    if !has_completed {
                        yield made_up_completed(&key, &turn_id, status);
                    }
                    break;
                }
                if turn.last_seq() > after {
                    continue;
                }
                tokio::select! {
                    _ = changes.changed() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            let page = match store.turn_events(&key, &turn_id, after, limits.page).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(episode = %key, turn = %turn_id, error = %e, "turn log read failed; trying again");
                    tokio::time::sleep(limits.poll_every).await;
                    continue;
                }
            };
            if !page.is_empty() {
                let full = page.len() >= limits.page;
                for event in page {
                    // Seqs the log skips are a gap it recorded: said, not skipped.
                    if event.seq > after + 1 {
                        yield missing(after + 1, event.seq - 1);
                    }
                    after = event.seq;
                    last_sent = Some(event.event.clone());
                    yield Arc::new(event);
                }
                if last_sent.as_deref() == Some("completed") {
                    break;
                }
                if full {
                    continue;
                }
            }
            let record = match store.turn_record(&key, &turn_id).await {
                Ok(Some(record)) => record,
                Ok(None) => {
                    // The log expired while it was read.
                    break;
                }
                Err(e) => {
                    tracing::warn!(episode = %key, turn = %turn_id, error = %e, "turn record read failed; trying again");
                    tokio::time::sleep(limits.poll_every).await;
                    continue;
                }
            };
            if let Some(&(from, to)) = record.gaps_after(after).first() {
                if from == after + 1 {
                    yield missing(from, to);
                    after = to;
                    last_sent = None;
                    continue;
                }
            }
            if record.last_seq > after {
                continue;
            }
            let now = store.clock().now_ms();
            if let TurnStatus::Ended(status) = record.effective_status(now) {
                if last_sent.as_deref() != Some("completed") && !ends_completed(&*store, &key, &turn_id, after).await {
                    let status = Status::from_name(&status).unwrap_or(Status::Partial);
                    yield made_up_completed(&key, &turn_id, status);
                }
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(limits.poll_every) => {}
                () = tokio::time::sleep_until(until) => {}
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
