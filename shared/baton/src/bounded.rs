//! Bounded waits for a stream's items, with one timer for the whole stream: each wait bounded
//! ([`IdleTimer`]), or all of them by one instant (`Deadline`).
//!
//! `tokio::time::timeout(limit, stream.next())` in a loop makes a timer per item: each wait
//! that finds no item ready registers its timer with the runtime's timer wheel, and the item's
//! arrival takes it out again. A streamed answer waits that way for most of its frames, so a
//! turn paid for a few hundred registrations. [`IdleTimer`] keeps one timer: each wait notes its
//! own deadline, and the timer is moved only when it fires before the current wait's deadline
//! (items came in between), about once per `limit` instead of once per item
//! (docs/benchmarks-log.md, "Less work per event, each cut too small to see on its own"). What
//! a caller sees is the same as with `timeout` per item.
//! `Deadline` is `timeout_at` per item the same way: one timer, set once.

use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

/// What a limit too large to add to an `Instant` waits: 30 years, Tokio's own "far future".
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `start + limit`, or 30 years from `start` (Tokio's own "far future") when the sum does not fit
/// in an `Instant`: a limit that large waits without end, as `tokio::time::timeout` does, where
/// `start + limit` would panic. Every deadline computed from a configured limit goes through it.
pub(crate) fn after(start: Instant, limit: Duration) -> Instant {
    start.checked_add(limit).unwrap_or_else(|| start + FAR_FUTURE)
}

/// No item came within the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no item within the idle limit")
    }
}

impl std::error::Error for Elapsed {}

/// Waits for a stream's items, each wait bounded by `limit`.
#[derive(Debug)]
pub struct IdleTimer {
    limit: Duration,
    timer: Pin<Box<Sleep>>,
}

impl IdleTimer {
    /// A timer for waits of at most `limit` each. Call it from within a Tokio runtime.
    pub fn new(limit: Duration) -> IdleTimer {
        IdleTimer { limit, timer: Box::pin(tokio::time::sleep(limit)) }
    }

    /// The next item of `stream` (`None` at its end), or [`Elapsed`] when `limit` passes from
    /// this call without one. After [`Elapsed`] the stream may be waited on again.
    pub async fn next<S: Stream + Unpin + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<Option<S::Item>, Elapsed> {
        let deadline = after(Instant::now(), self.limit);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(item) = stream.poll_next_unpin(cx) {
                return Poll::Ready(Ok(item));
            }
            // The timer is never later than this wait's deadline (each wait's is later than the
            // one before); fired early, it is moved to it and polled again to wake us then.
            while self.timer.as_mut().poll(cx).is_ready() {
                if self.timer.deadline() >= deadline {
                    return Poll::Ready(Err(Elapsed));
                }
                self.timer.as_mut().reset(deadline);
            }
            Poll::Pending
        })
        .await
    }
}

/// Waits for a stream's items until one instant.
#[derive(Debug)]
pub(crate) struct Deadline {
    timer: Pin<Box<Sleep>>,
}

impl Deadline {
    /// Waits that end at `deadline`. Call it from within a Tokio runtime.
    pub(crate) fn at(deadline: Instant) -> Deadline {
        Deadline { timer: Box::pin(tokio::time::sleep_until(deadline)) }
    }

    /// Waits that end `limit` after `start` ([`after`]: a limit too large for an `Instant`
    /// waits without end). Call it from within a Tokio runtime.
    pub(crate) fn after(start: Instant, limit: Duration) -> Deadline {
        Deadline::at(after(start, limit))
    }

    /// The next item of `stream` (`None` at its end), or [`Elapsed`] once the deadline has
    /// passed with no item ready.
    pub(crate) async fn next<S: Stream + Unpin + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<Option<S::Item>, Elapsed> {
        std::future::poll_fn(|cx| {
            if let Poll::Ready(item) = stream.poll_next_unpin(cx) {
                return Poll::Ready(Ok(item));
            }
            self.timer.as_mut().poll(cx).map(|()| Err(Elapsed))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `items`, each after its delay.
    fn delayed(items: Vec<(u64, u32)>) -> Pin<Box<dyn Stream<Item = u32> + Send>> {
        Box::pin(futures::stream::iter(items).then(|(ms, item)| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            item
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn each_wait_has_the_whole_limit_however_long_the_stream_runs() {
        // Three items 80 ms apart under a 100 ms limit: 240 ms in all, more than twice the
        // limit, and no wait passes it.
        let mut items = delayed(vec![(80, 1), (80, 2), (80, 3)]);
        let mut idle = IdleTimer::new(Duration::from_millis(100));
        let started = Instant::now();
        for want in 1..=3 {
            assert_eq!(idle.next(&mut items).await, Ok(Some(want)));
        }
        assert_eq!(idle.next(&mut items).await, Ok(None));
        assert_eq!(started.elapsed(), Duration::from_millis(240));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silence_past_the_limit_is_elapsed_at_the_limit_and_the_stream_goes_on() {
        let mut items = delayed(vec![(10, 1), (250, 2)]);
        let mut idle = IdleTimer::new(Duration::from_millis(100));
        assert_eq!(idle.next(&mut items).await, Ok(Some(1)));
        let waited = Instant::now();
        assert_eq!(idle.next(&mut items).await, Err(Elapsed));
        assert_eq!(waited.elapsed(), Duration::from_millis(100), "elapsed a limit after the wait began");
        assert_eq!(idle.next(&mut items).await, Err(Elapsed));
        assert_eq!(waited.elapsed(), Duration::from_millis(200), "each wait has its own limit");
        assert_eq!(idle.next(&mut items).await, Ok(Some(2)));
        assert_eq!(waited.elapsed(), Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_runs_from_the_wait_not_from_the_last_item() {
        // Items sent at 0 and 200 ms; the caller comes back 150 ms after the first, and the
        // second comes 50 ms into that wait, within its limit though 200 ms after the first.
        let (tx, mut items) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            tx.unbounded_send(1).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.unbounded_send(2).unwrap();
        });
        let mut idle = IdleTimer::new(Duration::from_millis(100));
        assert_eq!(idle.next(&mut items).await, Ok(Some(1)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(idle.next(&mut items).await, Ok(Some(2)));
        assert_eq!(idle.next(&mut items).await, Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_too_large_for_an_instant_waits_without_end() {
        let mut items = delayed(vec![(3_600_000, 1)]);
        let mut idle = IdleTimer::new(Duration::MAX);
        assert_eq!(idle.next(&mut items).await, Ok(Some(1)));
        assert_eq!(idle.next(&mut items).await, Ok(None));
    }

    #[test]
    fn a_limit_too_large_to_add_is_the_far_future_not_a_panic() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::from_millis(5)), now + Duration::from_millis(5));
        assert_eq!(after(now, Duration::MAX), now + FAR_FUTURE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_bounds_all_the_waits_together() {
        let mut items = delayed(vec![(40, 1), (40, 2), (40, 3)]);
        let started = Instant::now();
        let mut deadline = Deadline::at(started + Duration::from_millis(100));
        assert_eq!(deadline.next(&mut items).await, Ok(Some(1)));
        assert_eq!(deadline.next(&mut items).await, Ok(Some(2)));
        assert_eq!(deadline.next(&mut items).await, Err(Elapsed));
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        // Past the deadline an item already there still comes; a wait ends at once.
        let mut ready = futures::stream::iter([7]);
        assert_eq!(deadline.next(&mut ready).await, Ok(Some(7)));
        assert_eq!(deadline.next(&mut items).await, Err(Elapsed));
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }
}
