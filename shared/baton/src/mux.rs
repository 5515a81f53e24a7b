//! The live-slot merge of concurrent sub-agent streams (DESIGN.md §4 step 6).
//!
//! All sources run concurrently. The first source to produce slot content (user-visible text, or
//! the support boundary after it) takes the live slot and streams through; other sources' content
//! is buffered. When the live source ends, the source whose buffered content started earliest
//! flushes its buffer, paced so the reader sees it arrive rather than jump, with the whole flush
//! bounded by [`MuxConfig::flush_budget`], and then continues live. Progress events (agent and tool
//! start/end, usage, reasoning, errors) pass through at once from any source.
//!
//! The result: the client sees each agent's text contiguous, the fastest agent first, and no dead
//! silence while the others work.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::time::{Instant, Sleep};

use crate::event::Event;
use crate::event::EventStream;

/// Pacing of buffered content when it is flushed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MuxConfig {
    /// Longest pause between two flushed events.
    pub flush_interval: Duration,
    /// Upper bound on the time a whole flush takes; the interval shrinks to fit. Zero flushes at
    /// once.
    pub flush_budget: Duration,
}

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig { flush_interval: Duration::from_millis(12), flush_budget: Duration::from_millis(300) }
    }
}

struct Source {
    stream: Option<EventStream>,
    buffer: VecDeque<Event>,
    /// Arrival order of this source's first buffered event, to pick who flushes next.
    buffered_since: Option<u64>,
}

/// Merges sub-agent event streams, giving one source at a time the live slot.
pub struct LiveSlotMux {
    sources: Vec<Source>,
    live: Option<usize>,
    ready: VecDeque<Event>,
    pace: Option<Pin<Box<Sleep>>>,
    pace_interval: Duration,
    next_poll: usize,
    arrivals: u64,
    config: MuxConfig,
}

impl LiveSlotMux {
    /// A mux over `sources`, polled fairly.
    pub fn new(sources: Vec<EventStream>, config: MuxConfig) -> LiveSlotMux {
        LiveSlotMux {
            sources: sources
                .into_iter()
                .map(|s| Source { stream: Some(s), buffer: VecDeque::new(), buffered_since: None })
                .collect(),
            live: None,
            ready: VecDeque::new(),
            pace: None,
            pace_interval: Duration::ZERO,
            next_poll: 0,
            arrivals: 0,
            config,
        }
    }

    fn route(&mut self, i: usize, event: Event) {
        self.arrivals += 1;
        if !event.is_slot_content() {
            self.ready.push_back(event);
            return;
        }
        if self.live.is_none() {
            self.live = Some(i);
        }
        let source = &mut self.sources[i];
        if self.live == Some(i) && source.buffer.is_empty() {
            self.ready.push_back(event);
        } else {
            source.buffered_since.get_or_insert(self.arrivals);
            source.buffer.push_back(event);
        }
    }

    /// The live source ended: hand the slot to the earliest buffered source, if any.
    fn hand_over(&mut self) {
        self.live = self
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.buffer.is_empty())
            .min_by_key(|(_, s)| s.buffered_since)
            .map(|(i, _)| i);
        self.pace = None;
        if let Some(next) = self.live {
            let len = self.sources[next].buffer.len() as u32;
            self.pace_interval = self.config.flush_interval.min(self.config.flush_budget / len.max(1));
        }
    }

    /// One buffered event of the live source, if its flush pacing allows one now.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Option<Event> {
        let live = self.live?;
        if self.sources[live].buffer.is_empty() {
            return None;
        }
        if !self.pace_interval.is_zero() {
            if let Some(sleep) = self.pace.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return None;
                }
                sleep.as_mut().reset(Instant::now() + self.pace_interval);
            } else {
                // The first flushed event goes at once; the pause comes between events.
                self.pace = Some(Box::pin(tokio::time::sleep(self.pace_interval)));
            }
        }
        let source = &mut self.sources[live];
        let event = source.buffer.pop_front();
        if source.buffer.is_empty() {
            source.buffered_since = None;
            self.pace = None;
            if source.stream.is_none() {
                self.hand_over();
            }
        }
        event
    }
}

impl Stream for LiveSlotMux {
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
                match stream.as_mut().poll_next(cx) {
                    Poll::Ready(Some(event)) => {
                        this.route(i, event);
                        // Start after this source next time, so a chatty source cannot starve
                        // the others.
                        this.next_poll = (i + 1) % n;
                        progressed = true;
                        break;
                    }
                    Poll::Ready(None) => {
                        this.sources[i].stream = None;
                        if this.live == Some(i) && this.sources[i].buffer.is_empty() {
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
            let all_done = this.sources.iter().all(|s| s.stream.is_none() && s.buffer.is_empty());
            return if all_done { Poll::Ready(None) } else { Poll::Pending };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn texts(agent: &str, words: &[&str], delay_ms: u64) -> EventStream {
        let agent = agent.to_owned();
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        Box::pin(async_stream::stream! {
            for w in words {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                yield Event::text(agent.clone(), w);
            }
        })
    }

    fn sequence(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Text { agent, text } => format!("{agent}:{text}"),
                other => other.kind().to_owned(),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn first_content_takes_the_slot_and_the_other_follows_contiguously() {
        // support's first word (15 ms) arrives while shopping (10, 20 ms) holds the slot.
        let slow = texts("support[1]", &["s1", "s2", "s3"], 15);
        let fast = texts("shopping[1]", &["p1", "p2"], 10);
        let out: Vec<Event> = LiveSlotMux::new(vec![slow, fast], MuxConfig::default()).collect().await;
        assert_eq!(
            sequence(&out),
            ["shopping[1]:p1", "shopping[1]:p2", "support[1]:s1", "support[1]:s2", "support[1]:s3"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn progress_passes_through_while_content_waits() {
        let slow = texts("support[1]", &["s1"], 50);
        let fast: EventStream = Box::pin(async_stream::stream! {
            yield Event::text("shopping[1]", "p1");
            tokio::time::sleep(Duration::from_millis(100)).await;
            yield Event::text("shopping[1]", "p2");
        });
        let progress: EventStream = Box::pin(async_stream::stream! {
            tokio::time::sleep(Duration::from_millis(60)).await;
            yield Event::Reasoning { agent: "support[1]".into(), text: "r".into() };
        });
        let started = Instant::now();
        let mut mux = LiveSlotMux::new(vec![slow, fast, progress], MuxConfig::default());
        let mut seen = Vec::new();
        while let Some(e) = mux.next().await {
            seen.push((e, started.elapsed().as_millis()));
        }
        let order: Vec<String> =
            seen.iter().map(|(e, _)| sequence(std::slice::from_ref(e))[0].clone()).collect();
        assert_eq!(order, ["shopping[1]:p1", "reasoning", "shopping[1]:p2", "support[1]:s1"]);
        // The reasoning came at its own time (60 ms), not after the live text ended (100 ms).
        assert_eq!(seen[1].1, 60);
    }

    #[tokio::test(start_paused = true)]
    async fn flush_is_paced_and_bounded_by_the_budget() {
        let live: EventStream = Box::pin(async_stream::stream! {
            yield Event::text("a[1]", "x");
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        let buffered: EventStream = Box::pin(async_stream::stream! {
            tokio::time::sleep(Duration::from_millis(1)).await;
            for i in 0..100 {
                yield Event::text("b[1]", format!("w{i}"));
            }
        });
        let config =
            MuxConfig { flush_interval: Duration::from_millis(20), flush_budget: Duration::from_millis(200) };
        let started = Instant::now();
        let mut mux = LiveSlotMux::new(vec![live, buffered], config);
        let mut b_times = Vec::new();
        while let Some(e) = mux.next().await {
            if e.agent() == Some("b[1]") {
                b_times.push(started.elapsed());
            }
        }
        assert_eq!(b_times.len(), 100);
        // The flush starts when the live source ends, and its 100 events go 2 ms apart: the
        // budget (200 ms) wins over the 20 ms interval.
        assert_eq!(b_times[0], Duration::from_millis(50));
        let flush = b_times[99] - b_times[0];
        assert!(flush <= Duration::from_millis(200) && flush >= Duration::from_millis(190), "{flush:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_flush_the_next_source_continues_live() {
        let a = texts("a[1]", &["a1"], 7);
        let b = texts("b[1]", &["b1", "b2", "b3", "b4"], 6);
        let c = texts("c[1]", &["c1", "c2", "c3"], 5);
        let out: Vec<Event> = LiveSlotMux::new(vec![a, b, c], MuxConfig::default()).collect().await;
        // c is live from 5 ms to 15 ms; b buffered first (6 ms), so it flushes next and goes on
        // live until it ends; a (buffered at 7 ms) comes last.
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
        let out: Vec<Event> = LiveSlotMux::new(vec![a, b], config).collect().await;
        let mut seq = sequence(&out);
        seq.sort();
        assert_eq!(seq, ["a[1]:1", "a[1]:2", "a[1]:3", "b[1]:4", "b[1]:5", "b[1]:6"]);
    }

    #[tokio::test]
    async fn empty_mux_ends() {
        let out: Vec<Event> = LiveSlotMux::new(vec![], MuxConfig::default()).collect().await;
        assert!(out.is_empty());
    }
}
