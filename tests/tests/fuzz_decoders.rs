//! Property tests for every decoder of untrusted bytes: the SSE and NDJSON event decoders and
//! the NDJSON line splitter, the Chat Completions and Responses stream parsers, the Forethought
//! answer decoder, and the Lambda response-prelude stripper.
//!
//! Inputs are arbitrary bytes, and valid inputs cut at any point or with bytes spliced in. Each
//! decoder must return (a value or an error) without panicking, and what it holds must stay
//! within its cap. Case counts are modest so the file runs in seconds.

use baton::event::{Event, LineSplitter, decode_ndjson, decode_sse, encode_ndjson, encode_sse};
use baton::model::openai::ChunkParser;
use baton::model::responses::EventParser;
use baton::model::scripted::{Part, Reply};
use baton::remote::TransportError;
use baton_aws::lambda_transport::{MAX_PRELUDE_BYTES, StreamEvent, response_body};
use baton_reference::support::forethought::decode_answer;
use bytes::Bytes;
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::json;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, ..ProptestConfig::default() }
}

/// Valid payloads of each decoder, to be cut and spliced.
fn chat_chunks() -> Vec<String> {
    let reply = Reply::parts(vec![Part::Reasoning("think first".into()), Part::Text("Hello there".into())])
        .tool_call("ask_shopping", json!({"query": "coffee deals", "intent_count": 1}));
    reply.chunks("m").iter().map(|c| c.to_string()).collect()
}

fn responses_events() -> Vec<String> {
    let reply = Reply::parts(vec![Part::Text("Hello there".into())])
        .tool_call("search_offers", json!({"query": "coffee"}));
    reply.response_events("m", "resp_1").iter().map(|e| e.to_string()).collect()
}

/// A valid input mangled: cut at `cut` (a fraction of its length), with `splice` inserted at
/// `at`.
fn mangle(valid: &[u8], cut: f64, at: f64, splice: &[u8]) -> Vec<u8> {
    let mut bytes = valid[..(valid.len() as f64 * cut) as usize].to_vec();
    let at = (bytes.len() as f64 * at) as usize;
    bytes.splice(at..at, splice.iter().copied());
    bytes
}

/// `items` with the one at `which` (modulo their count) mangled.
fn mangled_one(items: &[String], which: usize, cut: f64, at: f64, splice: &[u8]) -> Vec<String> {
    let which = which % items.len();
    items
        .iter()
        .enumerate()
        .map(
            |(i, item)| {
                if i == which { lossy(&mangle(item.as_bytes(), cut, at, splice)) } else { item.clone() }
            },
        )
        .collect()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sse_events_decode_or_fail_cleanly(name in "[a-z_.]{0,20}", data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_sse(&name, &lossy(&data));
    }

    #[test]
    fn mangled_sse_and_ndjson_events_decode_or_fail_cleanly(
        cut in 0.0..=1.0f64, at in 0.0..=1.0f64, splice in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let event = Event::error("shopping[1]", "model_timeout", "the model timed out", true);
        let sse = encode_sse(3, &event);
        let data = std::str::from_utf8(&sse).unwrap().split("data: ").nth(1).unwrap().trim_end();
        let mangled = mangle(data.as_bytes(), cut, at, &splice);
        if let Ok(decoded) = decode_sse("error", &lossy(&mangled)) {
            prop_assert_eq!(decoded.kind(), "error");
        }
        let _ = decode_ndjson(&mangle(&encode_ndjson(&event), cut, at, &splice));
    }

    #[test]
    fn ndjson_lines_come_out_whole_and_never_past_the_cap(
        chunks in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b'\n'), any::<u8>()], 0..64), 0..16),
        max_line in 1usize..48,
    ) {
        let mut lines = LineSplitter::new(max_line);
        let mut out = Vec::new();
        let mut refused = false;
        for chunk in &chunks {
            match lines.push(chunk) {
                Ok(complete) => out.extend(complete),
                Err(_) => { refused = true; break; }
            }
        }
        for line in &out {
            prop_assert!(line.len() <= max_line + 1, "a line past the cap: {}", line.len());
            prop_assert_eq!(line.last(), Some(&b'\n'));
        }
        if !refused {
            out.extend(lines.finish());
            let joined: Vec<u8> = chunks.concat();
            let kept: Vec<u8> = out.concat();
            let non_blank = |b: &[u8]| -> Vec<u8> {
                b.split_inclusive(|c| *c == b'\n').filter(|l| !l.trim_ascii().is_empty()).flatten().copied().collect()
            };
            prop_assert_eq!(non_blank(&joined), kept);
        }
    }

    #[test]
    fn chat_completions_chunks_parse_or_fail_cleanly(
        cut in 0.0..=1.0f64, at in 0.0..=1.0f64, splice in proptest::collection::vec(any::<u8>(), 0..16),
        which in 0usize..64, garbage in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut parser = ChunkParser::default();
        for data in mangled_one(&chat_chunks(), which, cut, at, &splice) {
            if parser.feed(&data).is_err() {
                break;
            }
        }
        let _ = parser.feed(&lossy(&garbage));
        let _ = parser.finish();
    }

    #[test]
    fn responses_events_parse_or_fail_cleanly(
        cut in 0.0..=1.0f64, at in 0.0..=1.0f64, splice in proptest::collection::vec(any::<u8>(), 0..16),
        which in 0usize..64, garbage in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut parser = EventParser::default();
        for data in mangled_one(&responses_events(), which, cut, at, &splice) {
            if parser.feed(&data).is_err() {
                break;
            }
        }
        let _ = parser.feed(&lossy(&garbage));
    }

    #[test]
    fn forethought_pieces_decode_or_fail_cleanly(
        cut in 0.0..=1.0f64, at in 0.0..=1.0f64, splice in proptest::collection::vec(any::<u8>(), 0..16),
        garbage in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let valid = br#"{"conversation_id":"c1","response":"Try again in good light.","is_solved":false}"#;
        if let Ok(pieces) = decode_answer(&mangle(valid, cut, at, &splice)) {
            prop_assert!(pieces.iter().map(|p| p.text.len()).sum::<usize>() <= valid.len() + splice.len());
        }
        let documented = br#"{"conversation_id":"c1","widget_components":[{"type":"button","message":"<p>Pick &amp; go</p>","buttons":[{"display_name":"A","value":"a"}],"output_variable":"v"}]}"#;
        if let Ok(pieces) = decode_answer(&mangle(documented, cut, at, &splice)) {
            prop_assert!(pieces.iter().all(|p| !p.text.contains("<p")), "no markup survives: {pieces:?}");
        }
        let _ = decode_answer(&garbage);
    }

    #[test]
    fn the_lambda_prelude_stripper_passes_on_no_more_than_it_got(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        splits in proptest::collection::vec(0.0..=1.0f64, 0..6),
        with_separator in any::<bool>(), complete in any::<bool>(),
    ) {
        let mut all = br#"{"statusCode":200}"#.to_vec();
        if with_separator {
            all.extend_from_slice(&[0u8; 8]);
        }
        all.extend_from_slice(&body);
        let mut cuts: Vec<usize> = splits.iter().map(|f| (all.len() as f64 * f) as usize).collect();
        cuts.sort_unstable();
        let mut events: Vec<Result<StreamEvent, TransportError>> = Vec::new();
        let mut from = 0;
        for cut in cuts.into_iter().chain([all.len()]) {
            events.push(Ok(StreamEvent::Chunk(Bytes::copy_from_slice(&all[from..cut]))));
            from = cut;
        }
        if complete {
            events.push(Ok(StreamEvent::Complete { error_code: None, error_details: None }));
        }
        let out: Vec<Result<Bytes, TransportError>> =
            futures::executor::block_on(response_body(futures::stream::iter(events)).collect());
        let passed: usize = out.iter().filter_map(|r| r.as_ref().ok()).map(Bytes::len).sum();
        prop_assert!(passed <= body.len());
        prop_assert!(out.iter().filter(|r| r.is_err()).count() <= 1, "at most one error, at the end");
    }
}

#[test]
fn a_prelude_without_its_separator_is_refused_once_past_the_cap() {
    let chunks =
        (0..(MAX_PRELUDE_BYTES / 1024 + 2)).map(|_| Ok(StreamEvent::Chunk(Bytes::from(vec![b'{'; 1024]))));
    let out: Vec<_> = futures::executor::block_on(response_body(futures::stream::iter(chunks)).collect());
    assert!(matches!(out.as_slice(), [Err(TransportError::Broken(_))]), "{out:?}");
}
