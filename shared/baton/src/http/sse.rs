//! The SSE body of a turn: client-visible events numbered from 0, heartbeats in silences, and
//! events already waiting gathered into one chunk.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use bytes::BytesMut;
use futures::{FutureExt, Stream, StreamExt};

use crate::event::{EventStream, SSE_HEARTBEAT, encode_sse_into};

/// How many bytes of SSE events [`sse_body`] gathers into one chunk at most.
pub const SSE_CHUNK_BYTES: usize = 16 * 1024;

/// The capacity a chunk's buffer starts with: an event or two (a text delta is ~100 bytes).
const SSE_CHUNK_START_BYTES: usize = 512;

/// The SSE body of a turn: client-visible events numbered from 0, and a heartbeat comment after
/// each `heartbeat` of silence. Events already waiting when one arrives go out with it as one
/// chunk (up to [`SSE_CHUNK_BYTES`]), encoded into one buffer: fewer allocations and writes.
pub fn sse_body(
    events: EventStream,
    heartbeat: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    async_stream::stream! {
        // Gated: when the turn had nothing to send, the poll hyper makes next does not go down the
        // whole turn again to learn so (`gate`).
        let mut events =
            crate::gate::Gated::new(events.filter(|e| std::future::ready(e.is_client_visible())));
        let mut silence = crate::bounded::IdleTimer::new(heartbeat);
        let mut seq = 0u64;
        let mut ended = false;
        while !ended {
            match silence.next(&mut events).await {
                Err(_) => yield Ok(Bytes::from_static(SSE_HEARTBEAT)),
                Ok(None) => break,
                Ok(Some(event)) => {
                    // A buffer per chunk, handed over whole: between chunks an open stream keeps
                    // no buffer. (A buffer kept to split chunks off grew to 4 KiB per stream with
                    // the first large event, and kept it: docs/benchmarks-log.md, "Cleartext
                    // HTTP/1.1 without hyper's client connection".)
                    let mut out = BytesMut::with_capacity(SSE_CHUNK_START_BYTES);
                    encode_sse_into(&mut out, seq, &event);
                    seq += 1;
                    while out.len() < SSE_CHUNK_BYTES {
                        match events.next().now_or_never() {
                            Some(Some(event)) => {
                                encode_sse_into(&mut out, seq, &event);
                                seq += 1;
                            }
                            Some(None) => {
                                ended = true;
                                break;
                            }
                            None => break,
                        }
                    }
                    yield Ok(out.freeze());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_gets_heartbeats_and_content_end_is_never_sent() {
        use crate::event::Event;
        let events: EventStream = Box::pin(async_stream::stream! {
            yield Event::Thinking {};
            tokio::time::sleep(Duration::from_millis(2500)).await;
            yield Event::ContentEnd { agent: "support[1]".into() };
            yield Event::text("support[1]", "x");
        });
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        let text: Vec<String> = chunks.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        assert!(text[0].starts_with("event: thinking\nid: 0\n"));
        assert_eq!(&text[1..3], [": heartbeat\n\n", ": heartbeat\n\n"]);
        assert!(text[3].starts_with("event: text\nid: 1\n"), "{text:?}");
        assert_eq!(text.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn events_already_waiting_go_out_as_one_chunk_numbered_in_order() {
        use crate::event::{Event, encode_sse};
        let events: EventStream = Box::pin(async_stream::stream! {
            yield Event::Thinking {};
            yield Event::text("shopping[1]", "a");
            yield Event::text("shopping[1]", "b");
            tokio::time::sleep(Duration::from_millis(10)).await;
            yield Event::text("shopping[1]", "c");
        });
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        let first = [
            encode_sse(0, &Event::Thinking {}),
            encode_sse(1, &Event::text("shopping[1]", "a")),
            encode_sse(2, &Event::text("shopping[1]", "b")),
        ]
        .concat();
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(&chunks[0][..], &first[..]);
        assert_eq!(chunks[1], encode_sse(3, &Event::text("shopping[1]", "c")));
    }

    #[tokio::test]
    async fn a_burst_is_cut_into_chunks_of_bounded_size() {
        use crate::event::Event;
        let big = "x".repeat(1000);
        let events: EventStream =
            Box::pin(futures::stream::iter((0..100).map(move |_| Event::text("shopping[1]", big.clone()))));
        let chunks: Vec<Bytes> = sse_body(events, Duration::from_secs(1)).map(|c| c.unwrap()).collect().await;
        assert!(chunks.len() > 1, "one chunk of {} bytes", chunks[0].len());
        assert!(
            chunks.iter().all(|c| c.len() < SSE_CHUNK_BYTES + 2048),
            "{:?}",
            chunks.iter().map(Bytes::len).collect::<Vec<_>>()
        );
        let all = chunks.concat();
        assert_eq!(String::from_utf8_lossy(&all).matches("event: text\n").count(), 100);
        assert!(String::from_utf8_lossy(&all).contains("\nid: 99\n"));
    }
}
