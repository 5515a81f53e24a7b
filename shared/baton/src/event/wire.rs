//! The encodings of an [`Event`]: one SSE message (`event:`, `id:`, `data:`) or one NDJSON line,
//! their decoders, and the [`LineSplitter`] that cuts a byte stream into bounded NDJSON lines.
//!
//! Text that contains newlines stays one event: `serde_json` escapes control characters, so a
//! `data:` line can never be split by the payload.

use bytes::{BufMut, Bytes, BytesMut};

use super::Event;

/// An event could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The JSON did not describe a known event.
    #[error("invalid event JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An SSE `event:` name disagrees with the JSON `type`.
    #[error("SSE event name `{sse}` does not match JSON type `{json}`")]
    KindMismatch {
        /// The `event:` field.
        sse: String,
        /// The JSON `type`.
        json: &'static str,
    },
}

/// Writes one SSE message: `event: <name>`, `id: <turn>:<seq>` (`id: <seq>` for an empty turn;
/// no `id:` line for `None`), `data: <data>` (JSON, which escapes control characters, so it
/// stays one line). The one SSE encoder: a turn's stream (`http::encode_frame_into`) and
/// [`encode_sse`] both write with it.
pub(crate) fn encode_sse_into(out: &mut BytesMut, name: &str, id: Option<(&str, u64)>, data: &str) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    if let Some((turn, seq)) = id {
        out.put_slice(b"\nid: ");
        if !turn.is_empty() {
            out.put_slice(turn.as_bytes());
            out.put_slice(b":");
        }
        // Writing a number into a `BytesMut` cannot fail.
        let _ = std::fmt::Write::write_fmt(out, format_args!("{seq}"));
    }
    out.put_slice(b"\ndata: ");
    out.put_slice(data.as_bytes());
    out.put_slice(b"\n\n");
}

/// Encodes `event` as one SSE message with sequence number `id`, as a turn's stream does: its
/// JSON as the log keeps it, then `encode_sse_into`.
pub fn encode_sse(id: u64, event: &Event) -> Bytes {
    // Serializing a plain enum of strings, numbers and JSON values cannot fail.
    let data = serde_json::to_string(event).expect("event serializes");
    let mut out = BytesMut::with_capacity(data.len() + 32);
    encode_sse_into(&mut out, event.kind(), Some(("", id)), &data);
    out.freeze()
}

/// An SSE comment line, used as a heartbeat: clients ignore it, proxies see traffic.
pub(crate) const SSE_HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// Decodes one SSE message from its `event:` name and `data:` payload, checking they agree.
pub fn decode_sse(event_name: &str, data: &str) -> Result<Event, DecodeError> {
    let event: Event = serde_json::from_str(data)?;
    if !event_name.is_empty() && event_name != "message" && event_name != event.kind() {
        return Err(DecodeError::KindMismatch { sse: event_name.to_owned(), json: event.kind() });
    }
    Ok(event)
}

/// Encodes `event` as one NDJSON line.
pub fn encode_ndjson(event: &Event) -> Bytes {
    let mut out = serde_json::to_vec(event).expect("event serializes");
    out.push(b'\n');
    Bytes::from(out)
}

/// Decodes one NDJSON line (a trailing newline is allowed).
pub fn decode_ndjson(line: &[u8]) -> Result<Event, DecodeError> {
    Ok(serde_json::from_slice(line.trim_ascii_end())?)
}

/// Splits a byte stream into NDJSON lines as chunks arrive, holding at most `max_line` bytes
/// of a line that has not ended: a peer that never sends a newline gets an error, not all of
/// this process's memory. Each byte is scanned once.
#[derive(Debug)]
pub struct LineSplitter {
    buffer: BytesMut,
    scanned: usize,
    max_line: usize,
}

/// A line passed the [`LineSplitter`]'s cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a line passed {max} bytes without ending")]
pub struct LineTooLong {
    /// The cap.
    pub max: usize,
}

impl LineSplitter {
    /// A splitter whose lines may be at most `max_line` bytes (newline excluded).
    pub fn new(max_line: usize) -> LineSplitter {
        LineSplitter { buffer: BytesMut::new(), scanned: 0, max_line }
    }

    /// Adds `chunk`; returns the lines it completed (newline included), blank ones skipped.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Bytes>, LineTooLong> {
        self.buffer.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(at) = self.buffer[self.scanned..].iter().position(|b| *b == b'\n') {
            let line = self.buffer.split_to(self.scanned + at + 1).freeze();
            self.scanned = 0;
            if line.len() - 1 > self.max_line {
                return Err(LineTooLong { max: self.max_line });
            }
            if !line.trim_ascii().is_empty() {
                lines.push(line);
            }
        }
        self.scanned = self.buffer.len();
        if self.buffer.len() > self.max_line {
            return Err(LineTooLong { max: self.max_line });
        }
        Ok(lines)
    }

    /// The stream ended: the last line if it had no newline (and is not blank).
    pub fn finish(&mut self) -> Option<Bytes> {
        self.scanned = 0;
        let rest = std::mem::take(&mut self.buffer).freeze();
        (!rest.trim_ascii().is_empty()).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::*;

    #[test]
    fn sse_encoding_is_exact() {
        let ev = Event::text("shopping[1]", "hi");
        assert_eq!(
            &encode_sse(7, &ev)[..],
            b"event: text\nid: 7\ndata: {\"type\":\"text\",\"agent\":\"shopping[1]\",\"text\":\"hi\"}\n\n"
        );
        assert_eq!(
            &encode_sse(0, &Event::thinking())[..],
            b"event: thinking\nid: 0\ndata: {\"type\":\"thinking\"}\n\n"
        );
    }

    #[test]
    fn text_with_newlines_stays_one_sse_event() {
        let ev = Event::text("support[1]", "line one\nline two\r\n\ndata: fake");
        let bytes = encode_sse(3, &ev);
        let s = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(s.matches("\n\n").count(), 1, "exactly one event terminator: {s:?}");
        assert!(s.ends_with("\n\n"));
        assert_eq!(s.lines().filter(|l| l.starts_with("data: ")).count(), 1);
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        assert_eq!(decode_sse("text", data).unwrap(), ev);
    }

    #[test]
    fn ndjson_encoding_is_exact_and_round_trips() {
        let ev = Event::usage("shopping[1]", "gpt", Usage::tokens(3, 4));
        let line = encode_ndjson(&ev);
        assert_eq!(
            &line[..],
            b"{\"type\":\"usage\",\"agent\":\"shopping[1]\",\"model\":\"gpt\",\"input_tokens\":3,\"output_tokens\":4}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
    }

    #[test]
    fn a_priced_usage_event_carries_its_cost_as_an_exact_decimal() {
        let usage = Usage {
            input_tokens: 3,
            output_tokens: 4,
            cached_input_tokens: 1,
            reasoning_tokens: 2,
            cost_usd: Some(Usd::from_picos(1_200_000)),
        };
        let ev = Event::Usage {
            agent: "a[1]".into(),
            model: "m".into(),
            usage,
            agent_total: Some(Box::new(usage)),
        };
        let line = encode_ndjson(&ev);
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"type\":\"usage\",\"agent\":\"a[1]\",\"model\":\"m\",\"input_tokens\":3,\"output_tokens\":4,\
             \"cached_input_tokens\":1,\"reasoning_tokens\":2,\"cost_usd\":\"0.0000012\",\"agent_total\":\
             {\"input_tokens\":3,\"output_tokens\":4,\"cached_input_tokens\":1,\"reasoning_tokens\":2,\
             \"cost_usd\":\"0.0000012\"}}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
    }

    #[test]
    fn mini_agent_events_use_dotted_names_and_the_design_payloads() {
        let ev = Event::MiniAgentFinished {
            parent: "shopping[1]".into(),
            mini_id: "2".into(),
            status: MiniStatus::Timeout,
            duration_ms: 7,
            error: Some("slow".into()),
        };
        assert_eq!(ev.kind(), "mini_agent.finished");
        let line = encode_ndjson(&ev);
        assert_eq!(
            &line[..],
            b"{\"type\":\"mini_agent.finished\",\"parent\":\"shopping[1]\",\"mini_id\":\"2\",\"status\":\"timeout\",\"duration_ms\":7,\"error\":\"slow\"}\n"
        );
        assert_eq!(decode_ndjson(&line).unwrap(), ev);
        let ok = Event::MiniAgentFinished {
            parent: "p".into(),
            mini_id: "1".into(),
            status: MiniStatus::Ok,
            duration_ms: 1,
            error: None,
        };
        assert!(!String::from_utf8(encode_ndjson(&ok).to_vec()).unwrap().contains("error"));
    }

    #[test]
    fn choices_handoff_and_answer_meta_encode_exactly_and_round_trip() {
        let choices = Event::Choices {
            agent: "support[1]".into(),
            choices: Box::new(Choices {
                prompt: "Pick one".into(),
                options: vec![
                    ChoiceOption { label: "branch 1".into(), value: "v1".into() },
                    ChoiceOption { label: "branch 2".into(), value: "v2".into() },
                ],
                fields: Vec::new(),
            }),
        };
        let handoff = Event::Handoff { agent: "support[1]".into(), reason: Some("should_escalate".into()) };
        let meta = Event::AnswerMeta {
            agent: "support[1]".into(),
            meta: Box::new(serde_json::json!({"is_solved": false}).as_object().unwrap().clone()),
        };
        let form = Event::Choices {
            agent: "a".into(),
            choices: Box::new(Choices {
                prompt: "Email?".into(),
                options: Vec::new(),
                fields: vec![ChoiceField { name: "cv_email".into(), label: "Email".into() }],
            }),
        };
        let cases: [(&Event, &[u8], &[u8]); 4] = [
            (
                &choices,
                b"event: choices\nid: 4\ndata: {\"type\":\"choices\",\"agent\":\"support[1]\",\"prompt\":\"Pick one\",\"options\":[{\"label\":\"branch 1\",\"value\":\"v1\"},{\"label\":\"branch 2\",\"value\":\"v2\"}]}\n\n",
                b"{\"type\":\"choices\",\"agent\":\"support[1]\",\"prompt\":\"Pick one\",\"options\":[{\"label\":\"branch 1\",\"value\":\"v1\"},{\"label\":\"branch 2\",\"value\":\"v2\"}]}\n",
            ),
            (
                &form,
                b"event: choices\nid: 4\ndata: {\"type\":\"choices\",\"agent\":\"a\",\"prompt\":\"Email?\",\"fields\":[{\"name\":\"cv_email\",\"label\":\"Email\"}]}\n\n",
                b"{\"type\":\"choices\",\"agent\":\"a\",\"prompt\":\"Email?\",\"fields\":[{\"name\":\"cv_email\",\"label\":\"Email\"}]}\n",
            ),
            (
                &handoff,
                b"event: handoff\nid: 4\ndata: {\"type\":\"handoff\",\"agent\":\"support[1]\",\"reason\":\"should_escalate\"}\n\n",
                b"{\"type\":\"handoff\",\"agent\":\"support[1]\",\"reason\":\"should_escalate\"}\n",
            ),
            (
                &meta,
                b"event: answer_meta\nid: 4\ndata: {\"type\":\"answer_meta\",\"agent\":\"support[1]\",\"meta\":{\"is_solved\":false}}\n\n",
                b"{\"type\":\"answer_meta\",\"agent\":\"support[1]\",\"meta\":{\"is_solved\":false}}\n",
            ),
        ];
        for (event, sse, ndjson) in cases {
            assert_eq!(
                std::str::from_utf8(&encode_sse(4, event)).unwrap(),
                std::str::from_utf8(sse).unwrap()
            );
            assert_eq!(&encode_ndjson(event)[..], ndjson);
            assert_eq!(&decode_ndjson(ndjson).unwrap(), event);
            let data =
                std::str::from_utf8(sse).unwrap().lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            assert_eq!(&decode_sse(event.kind(), data).unwrap(), event);
        }
        let bare = decode_ndjson(br#"{"type":"handoff","agent":"x"}"#).unwrap();
        assert_eq!(bare, Event::Handoff { agent: "x".into(), reason: None });
    }

    #[test]
    fn every_event_round_trips_through_both_encodings() {
        for ev in sample_events() {
            let nd = encode_ndjson(&ev);
            assert_eq!(decode_ndjson(&nd).unwrap(), ev);
            let sse = encode_sse(1, &ev);
            let s = std::str::from_utf8(&sse).unwrap();
            let name = s.lines().next().unwrap().strip_prefix("event: ").unwrap();
            assert_eq!(name, ev.kind());
            let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            assert_eq!(decode_sse(name, data).unwrap(), ev);
        }
    }

    #[test]
    fn sse_name_must_match_json_type() {
        let err = decode_sse("text", r#"{"type":"thinking"}"#).unwrap_err();
        assert!(matches!(err, DecodeError::KindMismatch { .. }), "{err}");
    }

    #[test]
    fn unknown_event_type_is_an_error() {
        assert!(decode_ndjson(br#"{"type":"nope"}"#).is_err());
    }

    fn sample_events() -> Vec<Event> {
        let a = || "support[1]".to_owned();
        vec![
            Event::thinking(),
            Event::ResponseId { agent: a(), id: "ft_1".into() },
            Event::text(a(), "x"),
            Event::Reasoning { agent: a(), text: "r".into() },
            Event::ToolCallStart {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                arguments: Box::new(serde_json::json!({"q": 1})),
            },
            Event::ToolCallProgress {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                progress: 1.0,
                total: Some(3.0),
                message: Some("step 1".into()),
            },
            Event::ToolResult {
                agent: a(),
                call_id: "c".into(),
                name: "n".into(),
                result: Box::new(serde_json::json!([1])),
                is_error: false,
            },
            Event::ToolCallEnd { agent: a(), call_id: "c".into(), name: "n".into(), duration_ms: 2 },
            Event::AgentStarted { agent: a(), query: "q".into() },
            Event::AgentFinished {
                agent: a(),
                status: Status::Partial,
                duration_ms: 5,
                usage: Usage::tokens(1, 2),
            },
            Event::ContentEnd { agent: a() },
            Event::Repaired { agent: a(), repair: "fastpath_rejected".into() },
            Event::usage(a(), "m", Usage::default()),
            Event::error(a(), "vendor_timeout", "slow", true),
            Event::Completed {
                episode_id: "e".into(),
                turn_id: "t".into(),
                status: Status::Ok,
                model: "offline".into(),
                duration_ms: 9,
                cost_usd: None,
                usage: vec![AgentUsage { agent: a(), model: "m".into(), usage: Usage::default() }],
                interrupts: Box::new([crate::event::Interrupt {
                    agent: a(),
                    interrupt_id: "int_1".into(),
                    path: vec!["entry".into(), a()],
                    call_id: "c1".into(),
                    tool: "clip".into(),
                    arguments: serde_json::json!({"offer_id": "o-1"}),
                    reason: "acts for the user".into(),
                    editable: vec!["offer_id".into()],
                    expires_at: 1_800_000_000,
                }]),
            },
            Event::ApprovalRequired(Box::new(crate::event::Interrupt {
                agent: a(),
                interrupt_id: "int_2".into(),
                path: vec![a()],
                call_id: "c2".into(),
                tool: "clip".into(),
                arguments: serde_json::json!({}),
                reason: "r".into(),
                editable: vec![],
                expires_at: 1,
            })),
            Event::MiniAgentDecomposed {
                parent: a(),
                count: 1,
                sub_tasks: vec![MiniSubTask { id: "1".into(), description: "a".into() }],
            },
            Event::MiniAgentStarted { parent: a(), mini_id: "1".into(), description: "a".into() },
            Event::Choices {
                agent: a(),
                choices: Box::new(Choices {
                    prompt: "p".into(),
                    options: vec![ChoiceOption { label: "l".into(), value: "v".into() }],
                    fields: vec![ChoiceField { name: "n".into(), label: "l".into() }],
                }),
            },
            Event::Handoff { agent: a(), reason: None },
            Event::AnswerMeta { agent: a(), meta: Box::default() },
            Event::MiniAgentFinished {
                parent: a(),
                mini_id: "1".into(),
                status: MiniStatus::Failed,
                duration_ms: 1,
                error: Some("boom".into()),
            },
            Event::MiniAgentAggregated {
                parent: a(),
                outcomes: vec![MiniOutcomeStatus { mini_id: "1".into(), status: MiniStatus::Ok }],
            },
        ]
    }

    #[test]
    fn lines_split_across_chunks_come_out_whole_and_long_ones_are_refused() {
        let mut lines = LineSplitter::new(8);
        assert_eq!(lines.push(b"ab").unwrap(), Vec::<Bytes>::new());
        assert_eq!(lines.push(b"c\n\nde\nf").unwrap(), [Bytes::from("abc\n"), Bytes::from("de\n")]);
        assert_eq!(lines.finish(), Some(Bytes::from("f")));
        assert_eq!(lines.finish(), None);
        assert_eq!(lines.push(b"123456789").unwrap_err(), LineTooLong { max: 8 });
        let mut lines = LineSplitter::new(8);
        assert_eq!(lines.push(b"12345678\n").unwrap(), [Bytes::from("12345678\n")]);
        assert!(lines.push(b"123456789\n").is_err());
    }
}
