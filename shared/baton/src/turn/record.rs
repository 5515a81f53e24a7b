//! The producer of a turn's stream: numbers the turn's client-visible events, keeps them in
//! memory for the log writer and for resumes ([`LiveTurn`]), hands them to the client, and
//! drives the log's writer with them. When the client leaves, the disconnect policy decides:
//! the turn runs on in a task of its own, or stops.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::Once;
use futures::{Stream, StreamExt};

use super::DisconnectPolicy;
use super::live::{LiveTurn, Registered};
use super::writer::LogWriter;
use crate::event::{Event, EventStream, Status};
use crate::gate::Gated;
use crate::store::LoggedEvent;

/// A turn's numbered client-visible events, `thinking` (seq 1) to `completed`, and its log's
/// writer, polled with them: a turn's log costs no task of its own, and a turn that ends within
/// its writer's first pace is written with no thread hop (its end and its last write happen in
/// the same poll). Dropped before its end (the client left), it either keeps the turn running
/// to `completed` in a task of its own ([`DisconnectPolicy::Continue`]) or drops it, which
/// cancels every model call and sub-agent and saves what was produced as `partial`
/// ([`DisconnectPolicy::Cancel`]); the writer then runs on alone, to end the log.
pub(crate) struct RecordedTurn {
    /// The events, until their end.
    events: Option<Pin<Box<dyn Stream<Item = Arc<LoggedEvent>> + Send>>>,
    /// The log's writer (when the store keeps a log), until it has ended the log. Gated: the
    /// turn's every event polls this stream, and only the writer's own wake-ups go down to it.
    writer: Option<Gated<Once<LogWriter>>>,
    /// After the events end: how long the writer's last write may still take.
    end_wait: Option<Pin<Box<tokio::time::Sleep>>>,
    end_timeout: Duration,
    /// Keeps the turn in the registry until this stream ends.
    registered: Option<Registered>,
    policy: DisconnectPolicy,
    turn: Arc<LiveTurn>,
}

/// Records `events`, the turn `registered` names: each client-visible event is numbered and
/// pushed to memory, where the log `writer` finds it. After `completed` the stream waits up to
/// `end_timeout` for the writer's last write before it ends (in Lambda the process may be
/// frozen once the response ends; a write that takes longer goes on in a task), and only then
/// leaves the registry, so a resume in between still finds the turn here.
pub(crate) fn record(
    events: EventStream,
    registered: Registered,
    writer: Option<LogWriter>,
    policy: DisconnectPolicy,
    end_timeout: Duration,
) -> RecordedTurn {
    let turn = registered.turn().clone();
    let live = turn.clone();
    let events = async_stream::stream! {
        // Ends the turn in memory however this stream ends, so followers and the writer finish.
        let _end = EndOnDrop(live.clone());
        // Gated: when the turn had nothing to send, the poll that comes next does not go down
        // the whole turn again to learn so (`gate`).
        let mut events =
            Gated::new(events.filter(|e| std::future::ready(e.is_client_visible())));
        let mut status = Status::Partial;
        while let Some(event) = events.next().await {
            if let Event::Completed { status: ended, .. } = &event {
                status = *ended;
            }
            yield live.push(event);
        }
        live.end(status);
    };
    RecordedTurn {
        events: Some(Box::pin(events)),
        writer: writer.map(|writer| Gated::new(futures::stream::once(writer))),
        end_wait: None,
        end_timeout,
        registered: Some(registered),
        policy,
        turn,
    }
}

impl RecordedTurn {
    /// Lets the writer go on; forgets it once it has finished (it says itself how it ended).
    fn poll_writer(&mut self, cx: &mut Context<'_>) {
        if self.writer.as_mut().is_some_and(|writer| writer.poll_next_unpin(cx).is_ready()) {
            self.writer = None;
        }
    }
}

impl Stream for RecordedTurn {
    type Item = Arc<LoggedEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        this.poll_writer(cx);
        if let Some(events) = this.events.as_mut() {
            match events.poll_next_unpin(cx) {
                Poll::Ready(None) => {
                    // The turn has ended in memory: the writer's last write, at once.
                    this.events = None;
                    this.poll_writer(cx);
                }
                next => return next,
            }
        }
        if this.writer.is_some() {
            let timeout = this.end_timeout;
            let wait = this.end_wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            tracing::warn!(episode = %this.turn.key(), turn = %this.turn.turn_id(),
                timeout_ms = timeout.as_millis() as u64, "the turn's log was still being written");
            tokio::spawn(finish(this.writer.take().expect("checked")));
        }
        this.registered = None;
        Poll::Ready(None)
    }
}

impl Drop for RecordedTurn {
    fn drop(&mut self) {
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let Some(events) = self.events.take() {
            let (episode, turn) = (self.turn.key(), self.turn.turn_id());
            if let (DisconnectPolicy::Continue, Some(runtime)) = (self.policy, &runtime) {
                tracing::info!(%episode, %turn, "the client left; the turn runs on (on_disconnect: continue)");
                let rest = RecordedTurn {
                    events: Some(events),
                    writer: self.writer.take(),
                    end_wait: None,
                    end_timeout: self.end_timeout,
                    registered: self.registered.take(),
                    // Dropped in turn (the runtime shutting down), the rest stops there.
                    policy: DisconnectPolicy::Cancel,
                    turn: self.turn.clone(),
                };
                runtime.spawn(rest.for_each(|_| std::future::ready(())));
                return;
            }
            tracing::info!(%episode, %turn, "the client left; the turn is cancelled (on_disconnect: cancel)");
            // Ends the turn in memory (`partial`), which the writer reads below.
            drop(events);
        }
        // The writer ends the log on its own (it bounds its own tries).
        match (self.writer.take(), runtime) {
            (Some(writer), Some(runtime)) => drop(runtime.spawn(finish(writer))),
            (Some(_), None) => tracing::warn!(episode = %self.turn.key(), turn = %self.turn.turn_id(),
                "the turn's log was not ended: no runtime to end it on"),
            (None, _) => {}
        }
    }
}

/// Runs a log writer to its end.
async fn finish(mut writer: Gated<Once<LogWriter>>) {
    writer.next().await;
}

/// Ends a live turn as `partial` when dropped, unless it has ended already.
struct EndOnDrop(Arc<LiveTurn>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end(Status::Partial);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EpisodeKey;
    use crate::turn::live::LiveTurns;
    use tokio_util::sync::CancellationToken;

    /// A turn whose client left, its events still to come, with a log writer that never ends.
    fn left_running(turns: &Arc<LiveTurns>, policy: DisconnectPolicy) -> (RecordedTurn, Arc<LiveTurn>) {
        let key = EpisodeKey::new("u", "e").unwrap();
        let registered = turns.register(key, "t".into(), None, CancellationToken::new());
        let turn = registered.turn().clone();
        let writer: LogWriter = Box::pin(std::future::pending());
        let events: EventStream = Box::pin(futures::stream::pending());
        (record(events, registered, Some(writer), policy, Duration::from_secs(1)), turn)
    }

    #[test]
    fn a_turn_left_running_stops_once_when_its_runtime_shuts_down() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let turns = LiveTurns::new();
        let (mut recorded, turn) = left_running(&turns, DisconnectPolicy::Continue);
        runtime.block_on(async {
            assert!(futures::poll!(recorded.next()).is_pending());
            // The client leaves: the turn runs on in a task of its own.
            drop(recorded);
            tokio::task::yield_now().await;
            assert_eq!(turn.ended(), None);
        });
        // Shutting down drops that task: the turn ends there (before, the rest spawned itself
        // again from its own drop, until the stack overflowed).
        drop(runtime);
        assert_eq!(turn.ended(), Some(Status::Partial));
    }

    #[test]
    fn a_cancelled_turn_ends_at_once_and_its_writer_runs_on_alone() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let turns = LiveTurns::new();
        let (mut recorded, turn) = left_running(&turns, DisconnectPolicy::Cancel);
        runtime.block_on(async {
            assert!(futures::poll!(recorded.next()).is_pending());
            drop(recorded);
            assert_eq!(turn.ended(), Some(Status::Partial));
            // The writer is a task now: the runtime has one task alive.
            assert_eq!(tokio::runtime::Handle::current().metrics().num_alive_tasks(), 1);
        });
    }
}
