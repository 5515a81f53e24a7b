//! The SSE body of a turn, the one loop every wire's body runs: its events written by the wire's
//! [`Frames`] (Baton's own: ids `<turn_id>:<seq>`), heartbeats in silences, and events already
//! waiting gathered into one chunk.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use bytes::BytesMut;
use futures::{FutureExt, Stream, StreamExt};

use crate::event::SSE_HEARTBEAT;
use crate::store::LoggedEvent;

/// How many bytes of SSE events [`sse_body`] gathers into one chunk at most.
pub(crate) const SSE_CHUNK_BYTES: usize = 16 * 1024;

/// The capacity a chunk's buffer starts with: an event or two (a text delta is ~100 bytes).
const SSE_CHUNK_START_BYTES: usize = 512;

/// Writes one numbered event of turn `turn_id` as an SSE message: `id: <turn_id>:<seq>`, or no
/// id for seq 0 (an event made up on replay, which moves no cursor).
pub fn encode_frame_into(out: &mut BytesMut, turn_id: &str, event: &LoggedEvent) {
    let id = (event.seq > 0).then_some((turn_id, event.seq));
    crate::event::encode_sse_into(out, &event.event, id, &event.data);
}

/// How one wire writes a turn's events as SSE bytes: Baton's own frames ([`BatonFrames`]), or a
/// protocol's translation (`wire::Translated`). [`sse_body`] is the one loop that drives it.
pub(crate) trait Frames: Send + 'static {
    /// What goes out before the first event (a protocol's opening message).
    fn start(&mut self, _out: &mut BytesMut) {}

    /// Writes one numbered event (possibly nothing: an event the wire does not show).
    fn event(&mut self, event: &LoggedEvent, out: &mut BytesMut);

    /// Whether the wire has said its last message (the stream ends there).
    fn ended(&self) -> bool {
        false
    }

    /// What goes out after the last event (a protocol's closing of what it opened).
    fn finish(&mut self, _out: &mut BytesMut) {}
}

/// Baton's own SSE: each numbered event as one message with id `<turn_id>:<seq>`.
pub(crate) struct BatonFrames {
    turn_id: String,
}

impl BatonFrames {
    /// The frames of turn `turn_id`.
    pub(crate) fn new(turn_id: String) -> BatonFrames {
        BatonFrames { turn_id }
    }
}

impl Frames for BatonFrames {
    fn event(&mut self, event: &LoggedEvent, out: &mut BytesMut) {
        encode_frame_into(out, &self.turn_id, event);
    }
}

/// The SSE body of a turn's numbered `events` (a turn as it is recorded, or a resume) written by
/// `frames`, and a heartbeat comment after each `heartbeat` of silence. Events already waiting
/// when one arrives go out with it as one chunk (up to [`SSE_CHUNK_BYTES`]), encoded into one
/// buffer: fewer allocations and writes.
pub(crate) fn sse_body<F: Frames>(
    mut frames: F,
    events: impl Stream<Item = Arc<LoggedEvent>> + Send + 'static,
    heartbeat: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    async_stream::stream! {
        let mut events = std::pin::pin!(events);
        let mut silence = crate::bounded::IdleTimer::new(heartbeat);
        let mut out = BytesMut::new();
        frames.start(&mut out);
        if !out.is_empty() {
            yield Ok(out.freeze());
        }
        let mut ended = false;
        while !ended && !frames.ended() {
            match silence.next(&mut events).await {
                Err(_) => yield Ok(Bytes::from_static(SSE_HEARTBEAT)),
                Ok(None) => break,
                Ok(Some(event)) => {
                    // A buffer per chunk, handed over whole: between chunks an open stream keeps
                    // no buffer. (A buffer kept to split chunks off grew to 4 KiB per stream with
                    // the first large event, and kept it: docs/benchmarks-log.md, "Cleartext
                    // HTTP/1.1 without hyper's client connection".)
                    let mut out = BytesMut::with_capacity(SSE_CHUNK_START_BYTES);
                    frames.event(&event, &mut out);
                    while out.len() < SSE_CHUNK_BYTES && !frames.ended() {
                        match events.next().now_or_never() {
                            Some(Some(event)) => frames.event(&event, &mut out),
                            Some(None) => {
                                ended = true;
                                break;
                            }
                            None => break,
                        }
                    }
                    if !out.is_empty() {
                        yield Ok(out.freeze());
                    }
                }
            }
        }
        let mut out = BytesMut::new();
        frames.finish(&mut out);
        if !out.is_empty() {
            yield Ok(out.freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    fn logged(seq: u64, event: &Event) -> Arc<LoggedEvent> {
        Arc::new(LoggedEvent::of(seq, event.clone()))
    }

    async fn body(events: impl Stream<Item = Arc<LoggedEvent>> + Send + 'static) -> Vec<String> {
        let chunks: Vec<Bytes> = sse_body(BatonFrames::new("T1".into()), events, Duration::from_secs(1))
            .map(|c| c.unwrap())
            .collect()
            .await;
        chunks.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect()
    }

    #[test]
    fn a_frame_is_exact_and_seq_zero_has_no_id() {
        let mut out = BytesMut::new();
        encode_frame_into(&mut out, "T1", &logged(12, &Event::text("a[1]", "hi")));
        assert_eq!(
            &out[..],
            b"event: text\nid: T1:12\ndata: {\"type\":\"text\",\"agent\":\"a[1]\",\"text\":\"hi\"}\n\n"
        );
        let mut out = BytesMut::new();
        encode_frame_into(&mut out, "T1", &logged(0, &Event::thinking()));
        assert_eq!(&out[..], b"event: thinking\ndata: {\"type\":\"thinking\"}\n\n");
    }

    /// The browser client's parser is tested on these files (tests/browser/sse_parser.test.mjs).
    const SSE_FIXTURES: [&str; 3] = [
        include_str!("../../../../tests/browser/fixtures/mixed-turn.sse"),
        include_str!("../../../../tests/browser/fixtures/heartbeat-turn.sse"),
        include_str!("../../../../tests/browser/fixtures/error-turn.sse"),
    ];

    #[test]
    fn sse_fixtures_are_what_the_encoder_writes() {
        use crate::event::decode_sse;
        for fixture in SSE_FIXTURES {
            let mut seq = 0;
            let mut turn = None;
            for block in fixture.split_inclusive("\n\n") {
                if block.as_bytes() == SSE_HEARTBEAT {
                    continue;
                }
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or_else(|| panic!("{name} in {block:?}"))
                };
                let event = decode_sse(field("event: "), field("data: ")).unwrap();
                if let Event::Thinking { turn_id, .. } = &event {
                    turn = Some(turn_id.clone());
                }
                let turn = turn.as_deref().expect("the first event names the turn");
                seq += 1;
                let mut out = BytesMut::new();
                encode_frame_into(&mut out, turn, &LoggedEvent::of(seq, event));
                assert_eq!(&out[..], block.as_bytes(), "ids are <turn_id>:<seq>, seq from 1");
            }
            assert!(fixture.ends_with("\n\n") && seq > 2);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silence_gets_heartbeats() {
        let events = async_stream::stream! {
            yield logged(1, &Event::thinking());
            tokio::time::sleep(Duration::from_millis(2500)).await;
            yield logged(2, &Event::text("a[1]", "x"));
        };
        let text = body(events).await;
        assert!(text[0].starts_with("event: thinking\nid: T1:1\n"));
        assert_eq!(&text[1..3], [": heartbeat\n\n", ": heartbeat\n\n"]);
        assert!(text[3].starts_with("event: text\nid: T1:2\n"), "{text:?}");
        assert_eq!(text.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn events_already_waiting_go_out_as_one_chunk_in_order() {
        let events = async_stream::stream! {
            yield logged(1, &Event::thinking());
            yield logged(2, &Event::text("a[1]", "a"));
            yield logged(3, &Event::text("a[1]", "b"));
            tokio::time::sleep(Duration::from_millis(10)).await;
            yield logged(4, &Event::text("a[1]", "c"));
        };
        let text = body(events).await;
        assert_eq!(text.len(), 2, "{text:?}");
        assert_eq!(text[0].matches("\nid: T1:").count(), 3);
        assert!(text[0].find("T1:1").unwrap() < text[0].find("T1:2").unwrap());
        assert!(text[1].starts_with("event: text\nid: T1:4\n"));
    }

    #[tokio::test]
    async fn a_burst_is_cut_into_chunks_of_bounded_size() {
        let big = "x".repeat(1000);
        let events =
            futures::stream::iter((1..=100).map(move |seq| logged(seq, &Event::text("a[1]", big.clone()))));
        let text = body(events).await;
        assert!(text.len() > 1, "one chunk of {} bytes", text[0].len());
        assert!(text.iter().all(|c| c.len() < SSE_CHUNK_BYTES + 2048));
        let all = text.concat();
        assert_eq!(all.matches("event: text\n").count(), 100);
        assert!(all.contains("\nid: T1:100\n"));
    }
}
