//! The producer of a turn's stream: numbers the turn's client-visible events, keeps them in
//! memory for the log writer and for resumes ([`LiveTurn`]), and hands them to the client. When
//! the client leaves, the disconnect policy decides: the turn runs on in a task of its own, or
//! stops.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::DisconnectPolicy;
use super::live::{LiveTurn, Registered};
use super::writer::WriterReport;
use crate::event::{Event, EventStream, Status};
use crate::store::LoggedEvent;

/// A turn's numbered client-visible events, `thinking` (seq 1) to `completed`. Dropped before
/// its end (the client left), it either keeps the turn running to `completed` in a task of its
/// own ([`DisconnectPolicy::Continue`]) or drops it, which cancels every model call and
/// sub-agent and saves what was produced as `partial` ([`DisconnectPolicy::Cancel`]).
pub(crate) struct RecordedTurn {
    inner: Option<Pin<Box<dyn Stream<Item = Arc<LoggedEvent>> + Send>>>,
    policy: DisconnectPolicy,
    turn: Arc<LiveTurn>,
}

/// Records `events`, the turn `registered` names: each client-visible event is numbered and
/// pushed to memory, where the log `writer` (when the store keeps a log) finds it. After
/// `completed` the stream waits up to `end_timeout` for the writer's last write before it ends
/// (in Lambda the process may be frozen once the response ends), and only then leaves the
/// registry, so a resume in between still finds the turn here.
pub(crate) fn record(
    events: EventStream,
    registered: Registered,
    writer: Option<tokio::task::JoinHandle<WriterReport>>,
    policy: DisconnectPolicy,
    end_timeout: Duration,
) -> RecordedTurn {
    let turn = registered.turn().clone();
    let live = turn.clone();
    let inner = async_stream::stream! {
        // Ends the turn in memory however this stream ends, so followers and the writer finish.
        let _end = EndOnDrop(live.clone());
        // Gated: when the turn had nothing to send, the poll that comes next does not go down
        // the whole turn again to learn so (`gate`).
        let mut events =
            crate::gate::Gated::new(events.filter(|e| std::future::ready(e.is_client_visible())));
        let mut status = Status::Partial;
        while let Some(event) = events.next().await {
            if let Event::Completed { status: ended, .. } = &event {
                status = *ended;
            }
            yield live.push(event);
        }
        live.end(status);
        if let Some(writer) = writer {
            match tokio::time::timeout(end_timeout, writer).await {
                Ok(Ok(report)) if !report.ended => {
                    tracing::warn!(episode = %live.key(), turn = %live.turn_id(), "the turn's log was not ended")
                }
                Ok(_) => {}
                Err(_) => tracing::warn!(episode = %live.key(), turn = %live.turn_id(),
                    timeout_ms = end_timeout.as_millis() as u64, "the turn's log was still being written"),
            }
        }
        drop(registered);
    };
    RecordedTurn { inner: Some(Box::pin(inner)), policy, turn }
}

impl Stream for RecordedTurn {
    type Item = Arc<LoggedEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        let next = inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = next {
            self.inner = None;
        }
        next
    }
}

impl Drop for RecordedTurn {
    fn drop(&mut self) {
        let Some(rest) = self.inner.take() else { return };
        let (episode, turn) = (self.turn.key(), self.turn.turn_id());
        if self.policy == DisconnectPolicy::Continue {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                tracing::info!(%episode, %turn, "the client left; the turn runs on (on_disconnect: continue)");
                runtime.spawn(rest.for_each(|_| std::future::ready(())));
                return;
            }
        }
        tracing::info!(%episode, %turn, "the client left; the turn is cancelled (on_disconnect: cancel)");
        drop(rest);
    }
}

/// Ends a live turn as `partial` when dropped, unless it has ended already.
struct EndOnDrop(Arc<LiveTurn>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end(Status::Partial);
    }
}
