//! The log writer of a running turn: a future, polled with the turn's stream
//! ([`RecordedTurn`](super::record::RecordedTurn)), that copies the turn's events from
//! memory ([`LiveTurn`]) to the store in batches, at most one write per
//! [`TurnLogSettings::flush_every`] while the turn streams plus the final one, which also ends
//! the log with the turn's status ([`TurnLog::finish_turn_log`](crate::store::TurnLog::finish_turn_log)), and looks for a cancel asked on
//! another instance.
//!
//! The stream the client reads never waits for the store: a write that fails is retried with
//! the next batch, and when it fails again its events are recorded as a gap, so the client
//! keeps every event and a later resume is told which ones the log lacks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::TurnLogSettings;
use super::live::LiveTurn;
use crate::event::Status;
use crate::store::turn_log::MAX_ITEM_EVENT_BYTES;
use crate::store::{LoggedEvent, Store, StoreError};

/// The most bytes of events one append carries (one append is one store write, which holds at
/// most [`crate::store::turn_log::MAX_APPEND_ITEMS`] items).
const MAX_APPEND_BYTES: usize = 3_000_000;

/// Failed appends in a row before their events are given up as a gap.
const TRIES_BEFORE_GAP: u32 = 2;

/// What a turn's writer did, for the tests and the benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WriterReport {
    /// Store writes made (start, appends, gaps, end), failed ones included.
    pub writes: u32,
    /// Store reads made (cancel checks, resyncs).
    pub reads: u32,
    /// Seqs recorded as missing.
    pub gaps: Vec<(u64, u64)>,
    /// Whether the log was ended with the turn's status.
    pub ended: bool,
}

/// A turn's log writer: it starts the log when first polled and ends when the log does.
pub(crate) type LogWriter = Pin<Box<dyn Future<Output = WriterReport> + Send>>;

/// The writer of `turn`'s log in `store`, ending by `deadline_ms` (ms since the epoch).
pub(crate) fn writer(
    store: Arc<dyn Store>,
    turn: Arc<LiveTurn>,
    deadline_ms: u64,
    settings: TurnLogSettings,
) -> LogWriter {
    Box::pin(Writer { store, turn, settings, report: WriterReport::default() }.run(deadline_ms))
}

/// What one write did: the last seq now logged or given up, and whether the log has ended.
struct Written {
    through: u64,
    ended: bool,
}

struct Writer {
    store: Arc<dyn Store>,
    turn: Arc<LiveTurn>,
    settings: TurnLogSettings,
    report: WriterReport,
}

impl Writer {
    async fn run(mut self, deadline_ms: u64) -> WriterReport {
        let (key, turn_id) = (self.turn.key().clone(), self.turn.turn_id().to_owned());
        self.report.writes += 1;
        if let Err(e) = self.store.start_turn_log(&key, &turn_id, deadline_ms).await {
            // A log that cannot be started cannot take events or gaps either: the turn streams
            // on, and a resume finds no log (404) rather than a wrong one.
            tracing::error!(episode = %key, turn = %turn_id, error = %e, "turn log not started");
            return self.report;
        }
        let mut changes = self.turn.subscribe();
        let mut end = self.turn.subscribe_end();
        // Seqs logged or given up as a gap.
        let mut done = 0u64;
        let mut failures = 0u32;
        // The start was a write: the first batch waits its pace too, so a quick turn's events
        // all go in its final write.
        let mut last_write = Instant::now();
        let mut last_check = Instant::now();
        // Nor do the first events wake this task: a turn that ends within its first pace (most
        // turns with no tool) wakes it once, for its end, and writes it all then.
        tokio::select! {
            () = tokio::time::sleep_until(last_write + self.settings.flush_every.min(self.settings.cancel_check_every)) => {}
            _ = end.wait_for(|ended| *ended) => {}
        }
        loop {
            let ended = self.turn.ended();
            if ended.is_none() && self.turn.last_seq() == done {
                // Nothing to write: wait for an event, the end, or the next cancel check; then
                // look again (an event is written no sooner than its pace allows).
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    () = tokio::time::sleep_until(last_check + self.settings.cancel_check_every) => {
                        last_check = Instant::now();
                        self.check_cancel().await;
                    }
                }
                continue;
            }
            if ended.is_none() {
                // Events to write: at most one write per `flush_every`, unless the turn ends first.
                // Only the end cuts the wait short: events arriving meanwhile do not wake this task.
                tokio::select! {
                    () = tokio::time::sleep_until(last_write + self.settings.flush_every) => {}
                    _ = end.wait_for(|ended| *ended) => {}
                }
                changes.borrow_and_update();
            }
            let ending = self.turn.ended();
            if self.turn.last_seq() > done || ending.is_some() {
                last_write = Instant::now();
                match self.write_batch(done, ending).await {
                    Ok(Written { through, ended }) => {
                        done = through;
                        failures = 0;
                        if ended {
                            self.report.ended = true;
                            break;
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(episode = %key, turn = %turn_id, error = %e, failures,
                            "turn log write failed");
                        done = self.after_failure(done, failures).await;
                        if let Some(status) = self.turn.ended() {
                            // No pacing once the turn has ended: back off, and give up in time,
                            // ending the log if the store takes that much.
                            if failures > 4 {
                                // Ended only with every seq accounted for: otherwise a replay
                                // would stop short without saying so (it reads as abandoned).
                                let last = self.turn.last_seq();
                                if last <= done || self.gap(done + 1, last).await.is_ok() {
                                    self.end(status.as_str()).await;
                                }
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(failures))).await;
                        }
                    }
                }
            }
            if last_check.elapsed() >= self.settings.cancel_check_every && self.turn.ended().is_none() {
                last_check = Instant::now();
                self.check_cancel().await;
            }
        }
        if !self.report.ended {
            tracing::warn!(episode = %key, turn = %turn_id, "the turn's log was not ended");
        }
        self.report
    }

    /// Appends the events after `done` that memory holds (one write); once the turn has
    /// `ended` and the batch holds the rest, the same write ends the log. Says the last seq now
    /// logged or given up, and whether the log has ended.
    async fn write_batch(&mut self, done: u64, ended: Option<Status>) -> Result<Written, StoreError> {
        let since = self.turn.since(done, usize::MAX);
        let not_ended = |through| Written { through, ended: false };
        if since.evicted {
            // Memory moved past events never written (a store down for megabytes of events).
            let to = self.turn.first_in_memory() - 1;
            self.gap(done + 1, to).await?;
            return Ok(not_ended(to));
        }
        let mut batch: Vec<LoggedEvent> = Vec::new();
        let mut bytes = 0;
        for event in &since.events {
            let size = event.event.len() + event.data.len() + 64;
            if size > MAX_ITEM_EVENT_BYTES {
                if batch.is_empty() {
                    // One event too big for the log: the log says it is missing.
                    self.gap(event.seq, event.seq).await?;
                    return Ok(not_ended(event.seq));
                }
                break;
            }
            if bytes + size > MAX_APPEND_BYTES && !batch.is_empty() {
                break;
            }
            bytes += size;
            batch.push(LoggedEvent::clone(event));
        }
        let through = batch.last().map_or(done, |e| e.seq);
        let (key, turn_id) = (self.turn.key(), self.turn.turn_id());
        // The rest of an ended turn: its events and its end, in one write.
        if let Some(status) = ended.filter(|_| through >= self.turn.last_seq()) {
            self.report.writes += 1;
            self.store.finish_turn_log(key, turn_id, &batch, status.as_str()).await?;
            return Ok(Written { through, ended: true });
        }
        if batch.is_empty() {
            return Ok(not_ended(done));
        }
        self.report.writes += 1;
        self.store.append_turn_events(key, turn_id, &batch).await?;
        Ok(not_ended(through))
    }

    /// After a failed append: learns from the record how far the log really goes (a write
    /// reported failed may have landed), and after [`TRIES_BEFORE_GAP`] failures gives the
    /// unwritten events up as a gap. Returns the seqs now accounted for.
    async fn after_failure(&mut self, done: u64, failures: u32) -> u64 {
        let (key, turn_id) = (self.turn.key().clone(), self.turn.turn_id().to_owned());
        self.report.reads += 1;
        let done = match self.store.turn_record(&key, &turn_id).await {
            Ok(Some(record)) => done.max(record.last_seq),
            _ => done,
        };
        let last = self.turn.last_seq();
        if failures < TRIES_BEFORE_GAP || last <= done {
            return done;
        }
        match self.gap(done + 1, last).await {
            Ok(()) => last,
            Err(e) => {
                tracing::warn!(episode = %key, turn = %turn_id, error = %e, "turn log gap not recorded");
                done
            }
        }
    }

    async fn gap(&mut self, from: u64, to: u64) -> Result<(), StoreError> {
        self.report.writes += 1;
        self.store.record_turn_gap(self.turn.key(), self.turn.turn_id(), from, to).await?;
        tracing::warn!(episode = %self.turn.key(), turn = %self.turn.turn_id(), from, to,
            "turn log: events recorded as missing");
        self.report.gaps.push((from, to));
        Ok(())
    }

    /// Ends the log with `status` (after its final write failed), trying three times.
    async fn end(&mut self, status: &str) {
        for attempt in 0..3u32 {
            self.report.writes += 1;
            match self.store.end_turn_log(self.turn.key(), self.turn.turn_id(), status).await {
                Ok(()) => {
                    self.report.ended = true;
                    return;
                }
                Err(e) => {
                    tracing::warn!(episode = %self.turn.key(), turn = %self.turn.turn_id(), error = %e,
                        attempt, "turn log not ended");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
    }

    /// Stops the turn if its record says someone asked to (on another instance).
    async fn check_cancel(&mut self) {
        self.report.reads += 1;
        match self.store.turn_record(self.turn.key(), self.turn.turn_id()).await {
            Ok(Some(record)) if record.cancel_requested => {
                tracing::info!(episode = %self.turn.key(), turn = %self.turn.turn_id(),
                    "cancel requested through the store");
                self.turn.cancel();
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "cancel check failed"),
        }
    }
}
