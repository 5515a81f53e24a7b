//! The live-slot merge of concurrent sub-agent streams (docs/architecture.md, "A turn, step by
//! step").
//!
//! All sources run concurrently, and the merge keeps three promises:
//!
//! - **Each source's text is contiguous.** The first source to produce slot content
//!   (user-visible text, or the `content_end` boundary after it) takes the live slot and streams
//!   through. Another source's content waits in that source's queue until the slot is free; then
//!   the source whose queued content started earliest takes the slot, releases its backlog and
//!   goes on live.
//! - **Each source's events stay in its own order.** Progress (agent and tool start/end, usage,
//!   reasoning, errors) of a source with nothing queued passes through at once, whatever else is
//!   live. Once a source has content queued, everything it sends after it (its `tool_result`,
//!   `tool_call_end`, `agent_finished`…) queues behind, so no client sees an agent finish before
//!   its last text.
//! - **The release costs at most the flush budget.** A backlog whose source is still streaming
//!   is paced, so the reader sees it arrive rather than jump: one event per
//!   [`MuxConfig::flush_interval`], and faster as needed to catch up with live by
//!   [`MuxConfig::flush_budget`] after the source took the slot. Faster goes in releases at
//!   least an interval apart, each taking the events due by then: each release costs a wake-up
//!   and a write, and a reader cannot follow a finer pace anyway (docs/benchmarks-log.md, "A
//!   paced backlog goes in releases at least `flush_interval` apart").
//!   So no event waits more than the budget beyond the later of its own arrival and its source
//!   taking the slot (the last release is at the budget's end at the latest), and a source
//!   that keeps streaming is live again within the budget. A backlog whose source has ended is
//!   complete: it goes out at once, as pacing it would only delay whatever follows. When every
//!   source has ended nothing is paced, so the merge ends with its last source and a tool loop
//!   reading it starts its next model call at once.
//!
//! The result: the client sees each agent's text contiguous, the fastest agent first, no dead
//! silence while the others work, and the last text when the last agent ends.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::time::{Instant, Sleep};

use crate::event::Event;
use crate::gate::Gated;
use crate::item::{Item, ItemStream};

/// Pacing of queued content when its source takes the live slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MuxConfig {
    /// Longest pause between two released events (the pace a reader sees while a backlog
    /// catches up), and the shortest between two releases: a backlog released faster than one
    /// event per interval goes in batches, one per interval.
    pub flush_interval: Duration,
    /// Upper bound on the delay pacing adds: a source that took the slot is live again within
    /// this time. Zero releases every backlog at once.
    pub flush_budget: Duration,
}

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig { flush_interval: Duration::from_millis(12), flush_budget: Duration::from_millis(300) }
    }
}

impl MuxConfig {
    fn paces(&self) -> bool {
        !self.flush_interval.is_zero() && !self.flush_budget.is_zero()
    }
}

struct Source<T> {
    /// Polled only once it woke (or just yielded): a wake-up of one source costs no poll of the
    /// others (`gate`).
    stream: Option<Gated<ItemStream<T>>>,
    /// Events held until this source has the slot: its first queued content and everything it
    /// sent after it.
    queue: VecDeque<Event>,
    /// Arrival order of this source's first queued event, to pick who takes the slot next.
    queued_since: Option<u64>,
}

/// The release of the live source's backlog.
struct Flush {
    /// When the backlog must be out (the source took the slot plus the budget).
    deadline: Instant,
    /// When the next paced event is due.
    next_at: Instant,
    /// When the last release went: what is due by then goes with it, and the next release
    /// waits an interval.
    released: Option<Instant>,
}

/// Merges sub-agent event streams, giving one source at a time the live slot. A source may end
/// with a result ([`Item::Done`]): the merge keeps it for `LiveSlotMux::into_results`.
pub struct LiveSlotMux<T = ()> {
    sources: Vec<Source<T>>,
    results: Vec<Option<T>>,
    live: Option<usize>,
    ready: VecDeque<Event>,
    flush: Option<Flush>,
    /// The timer of the paced release, allocated on first use.
    pace: Option<Pin<Box<Sleep>>>,
    next_poll: usize,
    arrivals: u64,
    config: MuxConfig,
}

impl<T> LiveSlotMux<T> {
    /// A mux over `sources`, polled fairly.
    pub fn new(sources: Vec<ItemStream<T>>, config: MuxConfig) -> LiveSlotMux<T> {
        LiveSlotMux {
            results: sources.iter().map(|_| None).collect(),
            sources: sources
                .into_iter()
                .map(|s| Source { stream: Some(Gated::new(s)), queue: VecDeque::new(), queued_since: None })
                .collect(),
            live: None,
            ready: VecDeque::new(),
            flush: None,
            pace: None,
            next_poll: 0,
            arrivals: 0,
            config,
        }
    }

    /// What each source ended with, in source order (`None` for one that ended without a
    /// result): complete once the merge has ended.
    pub(crate) fn into_results(self) -> Vec<Option<T>> {
        self.results
    }

    fn route(&mut self, i: usize, event: Event) {
        self.arrivals += 1;
        let source = &mut self.sources[i];
        if !source.queue.is_empty() {
            // Behind its own backlog, whatever it is: the source's order is kept.
            source.queue.push_back(event);
            return;
        }
        if !event.is_slot_content() {
            self.ready.push_back(event);
            return;
        }
        let live = *self.live.get_or_insert(i);
        if live == i {
            self.ready.push_back(event);
        } else {
            source.queued_since = Some(self.arrivals);
            source.queue.push_back(event);
        }
    }

    /// The live source is done with the slot: the source whose backlog started earliest takes
    /// it, and its release begins.
    fn hand_over(&mut self) {
        self.live = self
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.queue.is_empty())
            .min_by_key(|(_, s)| s.queued_since)
            .map(|(i, _)| i);
        let now = Instant::now();
        self.flush = self.live.map(|_| Flush {
            deadline: crate::bounded::after(now, self.config.flush_budget),
            next_at: now,
            released: None,
        });
    }

    /// The live source's next queued event, if the pacing lets one go now.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Option<Event> {
        let live = self.live?;
        let source = &self.sources[live];
        let front = source.queue.front()?;
        // Only the content of a source still streaming is paced; its progress, and a finished
        // source's whole backlog, go at once.
        let paced = self.config.paces() && source.stream.is_some() && front.is_slot_content();
        if let (true, Some(flush)) = (paced, self.flush.as_mut()) {
            let release_at = match flush.released {
                // Due by the last release: it goes with it.
                Some(released) if flush.next_at <= released => None,
                // A new release: when the event is due and an interval after the last one, but
                // never after the deadline.
                Some(released) => Some(
                    flush
                        .next_at
                        .max(crate::bounded::after(released, self.config.flush_interval))
                        .min(flush.deadline),
                ),
                None => Some(flush.next_at),
            };
            if let Some(release_at) = release_at {
                if Instant::now() < release_at {
                    let pace =
                        self.pace.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(release_at)));
                    pace.as_mut().reset(release_at);
                    if pace.as_mut().poll(cx).is_pending() {
                        return None;
                    }
                }
                flush.released = Some(Instant::now());
            }
        }
        let source = &mut self.sources[live];
        let event = source.queue.pop_front();
        let left = source.queue.len() as u32;
        if left == 0 {
            source.queued_since = None;
            self.flush = None;
            if source.stream.is_none() {
                self.hand_over();
            }
        } else if paced {
            if let Some(flush) = self.flush.as_mut() {
                // Spread what is left over the time left, never slower than the interval. The
                // schedule is cumulative, so events due within one timer tick go together.
                let step = self
                    .config
                    .flush_interval
                    .min(flush.deadline.saturating_duration_since(flush.next_at) / left);
                flush.next_at += step;
            }
        }
        event
    }
}

// The results are only moved, never pinned.
impl<T> Unpin for LiveSlotMux<T> {}

impl<T> Stream for LiveSlotMux<T> {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(event));
            }
            if let Some(event) = this.poll_flush(cx) {
                return Poll::Ready(Some(event));
            }
            let n = this.sources.len();
            let mut progressed = false;
            for k in 0..n {
                let i = (this.next_poll + k) % n;
                let Some(stream) = this.sources[i].stream.as_mut() else { continue };
                match Pin::new(stream).poll_next(cx) {
                    Poll::Ready(Some(item)) => {
                        match item {
                            Item::Event(event) => this.route(i, event),
                            Item::Done(result) => this.results[i] = Some(result),
                        }
                        // Start after this source next time, so a chatty source cannot starve
                        // the others.
                        this.next_poll = (i + 1) % n;
                        progressed = true;
                        break;
                    }
                    Poll::Ready(None) => {
                        this.sources[i].stream = None;
                        if this.live == Some(i) && this.sources[i].queue.is_empty() {
                            this.hand_over();
                        }
                        progressed = true;
                        break;
                    }
                    Poll::Pending => {}
                }
            }
            if progressed {
                continue;
            }
            let all_done = this.sources.iter().all(|s| s.stream.is_none() && s.queue.is_empty());
            return if all_done { Poll::Ready(None) } else { Poll::Pending };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventStream;
    use crate::event::{Status, Usage};
    use futures::StreamExt;

    /// The merge of event streams with no result.
    fn merge(sources: Vec<EventStream>, config: MuxConfig) -> LiveSlotMux {
        let sources = sources.into_iter().map(|s| Box::pin(s.map(Item::Event)) as ItemStream<()>).collect();
        LiveSlotMux::new(sources, config)
    }

    const MS: Duration = Duration::from_millis(1);

    /// A source sending `events` at the given times (ms after the start), then ending at `end_ms`.
    fn timed(events: Vec<(u64, Event)>, end_ms: u64) -> EventStream {
        Box::pin(async_stream::stream! {
            let start = Instant::now();
            for (at, event) in events {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                yield event;
            }
            tokio::time::sleep_until(start + Duration::from_millis(end_ms)).await;
        })
    }

    /// `n` words of `agent`, the first at `first_ms`, then one every `gap_ms`; each word is the
    /// time it was sent, so a test can tell how long it waited.
    fn words(agent: &str, n: u64, first_ms: u64, gap_ms: u64) -> Vec<(u64, Event)> {
        (0..n).map(|k| first_ms + k * gap_ms).map(|at| (at, Event::text(agent, at.to_string()))).collect()
    }

    /// `a[1]` holds the slot until 50 ms while `b[1]` sends `n` words at 1 ms, then streams on:
    /// one more word (its text the time) at `end_ms`, when it ends.
    fn backlog_behind_live(n: u64, end_ms: u64) -> Vec<EventStream> {
        let live = timed(vec![(0, Event::text("a[1]", "x"))], 50);
        let mut backlog = words("b[1]", n, 1, 0);
        backlog.push((end_ms, Event::text("b[1]", end_ms.to_string())));
        vec![live, timed(backlog, end_ms)]
    }

    fn texts(agent: &str, words: &[&str], delay_ms: u64) -> EventStream {
        let events =
            words.iter().enumerate().map(|(k, w)| ((k as u64 + 1) * delay_ms, Event::text(agent, *w)));
        let end = words.len() as u64 * delay_ms;
        timed(events.collect(), end)
    }

    fn label(e: &Event) -> String {
        match e {
            Event::Text { agent, text } => format!("{agent}:{text}"),
            other => format!("{}:{}", other.agent().unwrap_or("-"), other.kind()),
        }
    }

    fn sequence(events: &[Event]) -> Vec<String> {
        events.iter().map(label).collect()
    }

    /// Every event with the time (ms since the start) it left the mux, and when the mux ended.
    async fn run(sources: Vec<EventStream>, config: MuxConfig) -> (Vec<(Event, u64)>, u64) {
        let start = Instant::now();
        let ms = || (Instant::now() - start).as_millis() as u64;
        let mut mux = merge(sources, config);
        let mut out = Vec::new();
        while let Some(e) = mux.next().await {
            out.push((e, ms()));
        }
        (out, ms())
    }

    /// The (sent, released) times of `agent`'s words.
    fn word_times(out: &[(Event, u64)], agent: &str) -> Vec<(u64, u64)> {
        out.iter()
            .filter_map(|(e, at)| match e {
                Event::Text { agent: a, text } if a == agent => Some((text.parse().unwrap(), *at)),
                _ => None,
            })
            .collect()
    }

    fn finished(agent: &str) -> Event {
        Event::AgentFinished {
            agent: agent.into(),
            status: Status::Ok,
            duration_ms: 1,
            usage: Usage::default(),
        }
    }

    fn tool_end(agent: &str) -> Event {
        Event::ToolCallEnd { agent: agent.into(), call_id: "c".into(), name: "n".into(), duration_ms: 1 }
    }

    fn tool_result(agent: &str) -> Event {
        Event::ToolResult {
            agent: agent.into(),
            call_id: "c".into(),
            name: "n".into(),
            result: Box::new(serde_json::json!("r")),
            is_error: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn first_content_takes_the_slot_and_the_other_follows_contiguously() {
        // support's first word (15 ms) arrives while shopping (10, 20 ms) holds the slot.
        let slow = texts("support[1]", &["s1", "s2", "s3"], 15);
        let fast = texts("shopping[1]", &["p1", "p2"], 10);
        let out: Vec<Event> = merge(vec![slow, fast], MuxConfig::default()).collect().await;
        assert_eq!(
            sequence(&out),
            ["shopping[1]:p1", "shopping[1]:p2", "support[1]:s1", "support[1]:s2", "support[1]:s3"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn progress_of_a_source_with_nothing_queued_passes_through_at_once() {
        let slow = texts("support[1]", &["s1"], 50);
        let fast =
            timed(vec![(0, Event::text("shopping[1]", "p1")), (100, Event::text("shopping[1]", "p2"))], 100);
        let reasoning = Event::Reasoning { agent: "other[1]".into(), text: "r".into() };
        let progress = timed(vec![(60, reasoning)], 60);
        let (out, _) = run(vec![slow, fast, progress], MuxConfig::default()).await;
        let order: Vec<String> = out.iter().map(|(e, _)| label(e)).collect();
        assert_eq!(order, ["shopping[1]:p1", "other[1]:reasoning", "shopping[1]:p2", "support[1]:s1"]);
        // The reasoning came at its own time (60 ms), not after the live text ended (100 ms).
        assert_eq!(out[1].1, 60);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_source_finishes_after_its_last_text_while_other_progress_passes() {
        // support's text is queued behind shopping's; its tool and agent end events come at
        // 30 ms, long before its text can go out (100 ms). Another source's tool end at 40 ms
        // passes at once.
        let support = timed(
            vec![
                (10, Event::text("support[1]", "s1")),
                (20, Event::text("support[1]", "s2")),
                (30, tool_result("support[1]")),
                (30, tool_end("support[1]")),
                (30, finished("support[1]")),
            ],
            30,
        );
        let shopping =
            timed(vec![(0, Event::text("shopping[1]", "p1")), (100, Event::text("shopping[1]", "p2"))], 100);
        let other = timed(vec![(40, tool_end("other[1]"))], 40);
        let (out, end) = run(vec![support, shopping, other], MuxConfig::default()).await;
        let order: Vec<String> = out.iter().map(|(e, _)| label(e)).collect();
        assert_eq!(
            order,
            [
                "shopping[1]:p1",
                "other[1]:tool_call_end",
                "shopping[1]:p2",
                "support[1]:s1",
                "support[1]:s2",
                "support[1]:tool_result",
                "support[1]:tool_call_end",
                "support[1]:agent_finished",
            ]
        );
        assert_eq!(out[1].1, 40);
        // support had ended: its backlog went at once when shopping ended.
        assert!(out[3..].iter().all(|(_, at)| *at == 100), "{out:?}");
        assert_eq!(end, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_still_streaming_catches_up_with_live_within_the_budget() {
        // shopping is live until 500 ms; support sends a word every 20 ms from 10 ms to 1990 ms,
        // so 25 words wait when it takes the slot.
        let shopping = timed(vec![(0, Event::text("shopping[1]", "p"))], 500);
        let support = timed(words("support[1]", 100, 10, 20), 1990);
        let config = MuxConfig { flush_interval: 12 * MS, flush_budget: 300 * MS };
        let (out, end) = run(vec![shopping, support], config).await;
        let times = word_times(&out, "support[1]");
        assert_eq!(times.len(), 100);
        for &(sent, released) in &times {
            // The added delay is bounded by the budget …
            assert!(released <= sent.max(500) + 300, "word sent at {sent} released at {released}");
        }
        // … and the release is paced (the first waiting words do not jump out together) …
        assert!(times[1].1 > times[0].1 && times[0].1 == 500, "{times:?}");
        // … and from the budget's end on, the source is live: its words leave when sent.
        let later: Vec<_> = times.iter().filter(|&&(sent, _)| sent >= 800).collect();
        assert!(!later.is_empty() && later.iter().all(|&&(sent, released)| sent == released), "{times:?}");
        assert_eq!(end, 1990);
    }

    #[tokio::test(start_paused = true)]
    async fn a_small_backlog_goes_at_the_configured_pace() {
        // 5 words wait; at 12 ms each they fit the budget, so the interval sets the pace.
        let shopping = timed(vec![(0, Event::text("shopping[1]", "p"))], 100);
        let support = timed(words("support[1]", 5, 10, 1), 1000);
        let config = MuxConfig { flush_interval: 12 * MS, flush_budget: 300 * MS };
        let (out, _) = run(vec![shopping, support], config).await;
        let released: Vec<u64> = word_times(&out, "support[1]").iter().map(|&(_, r)| r).collect();
        assert_eq!(released, [100, 112, 124, 136, 148]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_is_a_hard_bound_even_below_a_timer_tick_per_event() {
        // 1,000 words wait and the source keeps streaming: 0.3 ms apart, less than the timer's
        // millisecond, so several go per tick; all are out by the budget.
        let config = MuxConfig { flush_interval: 20 * MS, flush_budget: 200 * MS };
        let (out, _) = run(backlog_behind_live(1000, 5000), config).await;
        let times = word_times(&out, "b[1]");
        assert_eq!(times.len(), 1001);
        assert_eq!(times[0].1, 50);
        assert!(times[999].1 <= 250, "last waiting word at {}", times[999].1);
        assert!(times[500].1 > 50 && times[500].1 < 250, "paced: {}", times[500].1);
        assert_eq!(times[1000].1, 5000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_released_faster_than_the_interval_goes_in_releases_an_interval_apart() {
        // 100 words wait until 50 ms and must be out by 250 ms: one every 2 ms, faster than the
        // 20 ms interval, so they go in batches, one release per interval.
        let config = MuxConfig { flush_interval: 20 * MS, flush_budget: 200 * MS };
        let (out, _) = run(backlog_behind_live(100, 1000), config).await;
        let times = word_times(&out, "b[1]");
        assert_eq!(times.len(), 101);
        let mut releases: Vec<u64> = times[..100].iter().map(|&(_, released)| released).collect();
        assert!(releases.windows(2).all(|w| w[0] <= w[1]), "in order: {releases:?}");
        releases.dedup();
        assert_eq!(releases, (50..=250).step_by(20).collect::<Vec<_>>());
        assert_eq!(times[100].1, 1000, "live again after the backlog");
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_and_interval_too_large_for_an_instant_pace_without_a_panic() {
        // A `MuxConfig` built with `Duration::MAX` (past what an `Instant` can add): the backlog
        // waits behind the live source, its first word goes when the slot frees, and the rest
        // when its source ends.
        let live = timed(vec![(0, Event::text("a[1]", "x"))], 50);
        let backlog = timed(words("b[1]", 3, 1, 1), 100);
        let huge = Duration::MAX;
        let (out, end) =
            run(vec![live, backlog], MuxConfig { flush_interval: huge, flush_budget: huge }).await;
        let released: Vec<u64> = word_times(&out, "b[1]").iter().map(|&(_, r)| r).collect();
        assert_eq!(released, [50, 100, 100]);
        assert_eq!(end, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_sources_backlog_goes_at_once_even_with_a_silent_source_open() {
        // support sent all its words by 50 ms and ended; when shopping ends at 100 ms they go
        // out together, though a third source (no content yet) is still open until 400 ms.
        let shopping = timed(vec![(0, Event::text("shopping[1]", "p"))], 100);
        let support = timed(words("support[1]", 40, 10, 1), 50);
        let silent = timed(vec![(300, tool_end("other[1]"))], 400);
        let (out, end) = run(vec![shopping, support, silent], MuxConfig::default()).await;
        let times = word_times(&out, "support[1]");
        assert_eq!(times.len(), 40);
        assert!(times.iter().all(|&(_, r)| r == 100), "{times:?}");
        assert_eq!(end, 400);
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_source_has_ended_nothing_is_paced() {
        // Zero-latency models: every source sends everything at once and ends. The merge ends
        // at once too, so a tool loop reading it starts its next call without waiting.
        let a = timed(words("a[1]", 50, 0, 0), 0);
        let b = timed(words("b[1]", 50, 0, 0), 0);
        let c = timed(words("c[1]", 50, 0, 0), 0);
        let (out, end) = run(vec![a, b, c], MuxConfig::default()).await;
        assert_eq!(out.len(), 150);
        assert_eq!(end, 0);
        // Still contiguous per source.
        let agents: Vec<&str> = out.iter().filter_map(|(e, _)| e.agent()).collect();
        let switches = agents.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(switches, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_merge_ends_when_its_last_source_ends() {
        // support ends at 1280 ms with words still waiting behind shopping's (ended at 1080 ms):
        // they go when support ends, not a paced flush later.
        let shopping = timed(words("shopping[1]", 50, 100, 20), 1080);
        let support = timed(words("support[1]", 50, 300, 20), 1280);
        let (out, end) = run(vec![shopping, support], MuxConfig::default()).await;
        assert_eq!(end, 1280);
        let times = word_times(&out, "support[1]");
        assert_eq!(times.last().unwrap().1, 1280);
        assert!(times.iter().all(|&(s, r)| r <= s.max(1080) + 300));
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_flush_the_next_source_continues_live() {
        let a = texts("a[1]", &["a1"], 7);
        let b = texts("b[1]", &["b1", "b2", "b3", "b4"], 6);
        let c = texts("c[1]", &["c1", "c2", "c3"], 5);
        let out: Vec<Event> = merge(vec![a, b, c], MuxConfig::default()).collect().await;
        // c is live from 5 ms to 15 ms; b queued first (6 ms), so it takes the slot next and goes
        // on live until it ends; a (queued at 7 ms) comes last.
        assert_eq!(
            sequence(&out),
            ["c[1]:c1", "c[1]:c2", "c[1]:c3", "b[1]:b1", "b[1]:b2", "b[1]:b3", "b[1]:b4", "a[1]:a1"]
        );
    }

    #[tokio::test]
    async fn nothing_is_lost_or_doubled_with_zero_budget() {
        let a = texts("a[1]", &["1", "2", "3"], 0);
        let b = texts("b[1]", &["4", "5", "6"], 0);
        let config = MuxConfig { flush_interval: Duration::ZERO, flush_budget: Duration::ZERO };
        let out: Vec<Event> = merge(vec![a, b], config).collect().await;
        let mut seq = sequence(&out);
        seq.sort();
        assert_eq!(seq, ["a[1]:1", "a[1]:2", "a[1]:3", "b[1]:4", "b[1]:5", "b[1]:6"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_did_not_wake_is_not_polled_for_the_others_events() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        // A source with nothing to say, counting its polls, beside one sending 20 words 10 ms
        // apart: each word is a wake-up of the task, and none of them is the silent source's.
        let polls = Arc::new(AtomicUsize::new(0));
        let counter = polls.clone();
        let silent: EventStream = Box::pin(futures::stream::poll_fn(move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            Poll::<Option<Event>>::Pending
        }));
        let chatty = timed(words("shopping[1]", 20, 10, 10), 300);
        let out: Vec<Event> = merge(vec![silent, chatty], MuxConfig::default()).take(20).collect().await;
        assert_eq!(sequence(&out).len(), 20);
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, when the merge began");
    }

    #[tokio::test]
    async fn empty_mux_ends() {
        let out: Vec<Event> = merge(vec![], MuxConfig::default()).collect().await;
        assert!(out.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn each_sources_result_is_kept_in_source_order_and_no_event_is_lost() {
        // The first source ends last; the third ends without a result.
        let with_result = |agent: &'static str, delay_ms: u64, result: u32| -> ItemStream<u32> {
            let events = texts(agent, &["a", "b"], delay_ms).map(Item::Event);
            Box::pin(events.chain(futures::stream::iter([Item::Done(result)])))
        };
        let silent: ItemStream<u32> = Box::pin(texts("c[1]", &["c"], 5).map(Item::Event));
        let sources = vec![with_result("a[1]", 30, 7), with_result("b[1]", 10, 8), silent];
        let mut mux = LiveSlotMux::new(sources, MuxConfig::default());
        let out: Vec<Event> = (&mut mux).collect().await;
        assert_eq!(out.iter().filter(|e| matches!(e, Event::Text { .. })).count(), 5);
        assert_eq!(mux.into_results(), [Some(7), Some(8), None]);
    }
}
