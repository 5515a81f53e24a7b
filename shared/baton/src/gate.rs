//! Polling a stream again only once it has woken: `Gated`.
//!
//! A turn is one task: every stream of it (the model streams, the agents above them, the merge
//! of the sub-agents, the SSE body) is polled from the connection's task, and a wake-up of any
//! socket or timer in it makes the runtime poll that task from the top. A plain merge then polls
//! every source down to its sockets, though only one of them woke; and the SSE body, asked again
//! right after it found nothing to send, goes down the whole tree once more to find nothing
//! again. Streamed answers arrive a frame at a time, so a turn paid that on every frame. (Its
//! share of a frame's cost proved too small to measure on the development host: a wake-up there
//! costs about 70 µs of user time whatever is polled; docs/benchmarks-log.md, "CPU per mixed
//! turn, measured, and a wake-up of one stream no longer polls the others".)
//!
//! `Gated` gives the stream it wraps a waker of its own, which notes the wake-up before passing
//! it on. It polls the stream only when that waker has fired since the stream last said
//! `Pending`, or when the stream's last answer was an item (more may be ready). `FuturesUnordered`
//! does the same for its futures; a gate does it for one stream, so the merge and the SSE body
//! keep their own order and pacing.
//!
//! A gate registers the waker it is polled with on every poll, even one it answers `Pending`
//! without polling the stream, so the last poll before a task sleeps decides whom a wake-up
//! reaches. A wake-up that reaches a waker already replaced or used (a poll through
//! `now_or_never` registers a no-op one) is still noted, and the next poll goes down.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::Stream;
use futures::task::AtomicWaker;

/// A gate's own waker: it notes the wake-up, then wakes whoever polled the gate last.
#[derive(Debug)]
struct Flag {
    woken: AtomicBool,
    parent: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.parent.wake();
    }
}

/// A stream polled only when it has woken since it last said `Pending` (see the module docs).
#[derive(Debug)]
pub(crate) struct Gated<S> {
    inner: S,
    flag: Arc<Flag>,
    waker: Waker,
}

impl<S> Gated<S> {
    /// Wraps `inner`; the first poll goes down to it.
    pub(crate) fn new(inner: S) -> Gated<S> {
        let flag = Arc::new(Flag { woken: AtomicBool::new(true), parent: AtomicWaker::new() });
        Gated { inner, waker: Waker::from(flag.clone()), flag }
    }
}

impl<S: Stream + Unpin> Stream for Gated<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        // Register first: a wake-up after the check below reaches this poller.
        this.flag.parent.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let polled = Pin::new(&mut this.inner).poll_next(&mut Context::from_waker(&this.waker));
        if polled.is_ready() {
            // An item, or the end: the next poll goes down again without a wake-up.
            this.flag.woken.store(true, Ordering::Release);
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::atomic::AtomicUsize;

    /// A stream that counts its polls and answers from `items`: `None` is `Pending` (waking no
    /// one), `Some(x)` is the item `x`.
    struct Script {
        items: Vec<Option<u32>>,
        polls: Arc<AtomicUsize>,
        waker: Option<Waker>,
    }

    impl Stream for Script {
        type Item = u32;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.waker = Some(cx.waker().clone());
            if self.items.is_empty() {
                return Poll::Ready(None);
            }
            match self.items.remove(0) {
                Some(x) => Poll::Ready(Some(x)),
                None => Poll::Pending,
            }
        }
    }

    fn script(items: Vec<Option<u32>>) -> (Gated<Script>, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        (Gated::new(Script { items, polls: polls.clone(), waker: None }), polls)
    }

    /// A waker counting its wake-ups.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_stream_that_said_pending_is_not_polled_again_until_it_wakes() {
        let (mut gated, polls) = script(vec![None, Some(7)]);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Pending);
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        for _ in 0..5 {
            assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Pending);
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "no wake-up, no poll");
        // The stream wakes the waker it was given: the task is woken, and the next poll goes down.
        gated.inner.waker.take().unwrap().wake();
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "the wake-up reached the task");
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Ready(Some(7)));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn after_an_item_the_next_poll_goes_down_without_a_wake_up() {
        let (mut gated, polls) = script(vec![Some(1), Some(2), None]);
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Ready(Some(1)));
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Ready(Some(2)));
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Pending);
        assert_eq!(gated.poll_next_unpin(&mut cx), Poll::Pending);
        assert_eq!(polls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_wake_up_while_a_no_op_waker_was_registered_is_not_lost() {
        let (mut gated, polls) = script(vec![None, Some(9)]);
        // Polled through a no-op waker (as `now_or_never` does), then woken.
        assert_eq!(gated.poll_next_unpin(&mut Context::from_waker(Waker::noop())), Poll::Pending);
        gated.inner.waker.take().unwrap().wake();
        // The task's own poll comes later: it goes down and finds the item.
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        assert_eq!(gated.poll_next_unpin(&mut Context::from_waker(&task)), Poll::Ready(Some(9)));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_gated_stream_yields_what_the_stream_yields() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let reader = tokio::spawn(Gated::new(rx).collect::<Vec<u32>>());
        for i in 0..100 {
            tx.unbounded_send(i).unwrap();
            if i % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        assert_eq!(reader.await.unwrap(), (0..100).collect::<Vec<_>>());
    }
}
