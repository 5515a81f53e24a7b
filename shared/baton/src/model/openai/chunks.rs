//! Chat Completions chunks (the `data:` payloads of the SSE answer) into deltas.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::shorten;
use super::transport::StreamParser;
use crate::event::Usage;
use crate::model::{FinishReason, ModelDelta, ModelError, ToolCallAssembler};

/// One Chat Completions chunk. Its strings borrow from the `data:` payload where they can (no
/// escapes to decode): a chunk's id and finish reason are read and dropped, so they cost no
/// allocation, and only text that goes on is copied.
///
/// Each is a [`Str`]: serde borrows a `Cow<str>` only as a field's own type, not inside an
/// `Option`.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<Str<'a>>,
    #[serde(borrow)]
    reasoning_content: Option<Str<'a>>,
    #[serde(borrow)]
    reasoning: Option<Str<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    index: Option<usize>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(borrow)]
    arguments: Option<Str<'a>>,
}

/// A string of a chunk, borrowed from the payload unless it has escapes.
#[derive(Deserialize)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

impl std::ops::Deref for Str<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// `cached_tokens`: OpenAI, and llama.cpp's server (see the captures in tests/fixtures).
    #[serde(default)]
    prompt_tokens_details: Option<TokenDetails>,
    /// `reasoning_tokens`: OpenAI's reasoning models.
    #[serde(default)]
    completion_tokens_details: Option<TokenDetails>,
}

/// The breakdown both OpenAI APIs give of input and output tokens (fields absent → 0; a
/// server that sends `null` for the whole object is read as no breakdown).
#[derive(Deserialize, Default)]
pub(crate) struct TokenDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) reasoning_tokens: Option<u64>,
}

impl TokenDetails {
    pub(crate) fn cached(details: &Option<TokenDetails>) -> u64 {
        details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0)
    }

    pub(crate) fn reasoning(details: &Option<TokenDetails>) -> u64 {
        details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0)
    }
}

/// Turns Chat Completions chunks (the `data:` payloads) into deltas.
#[derive(Default)]
pub struct ChunkParser {
    response_id_sent: bool,
    tools: ToolCallAssembler,
    finished: bool,
    done: bool,
}

impl ChunkParser {
    /// Parses one `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<Vec<ModelDelta>, ModelError> {
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| ModelError::Decode(format!("{e} in chunk {}", shorten(data))))?;
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(ModelError::Stream(message));
        }
        let mut out = Vec::new();
        if let (false, Some(id)) = (self.response_id_sent, chunk.id.filter(|s| !s.is_empty())) {
            self.response_id_sent = true;
            out.push(ModelDelta::ResponseId(id.0.into_owned()));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content.or(delta.reasoning).filter(|s| !s.is_empty()) {
                    out.push(ModelDelta::Reasoning(r.0.into_owned()));
                }
                if let Some(text) = delta.content.filter(|s| !s.is_empty()) {
                    out.push(ModelDelta::Text(text.0.into_owned()));
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let (name, args) = match &call.function {
                        Some(f) => (f.name.as_deref(), f.arguments.as_deref()),
                        None => (None, None),
                    };
                    out.extend(self.tools.push(call.index, call.id.as_deref(), name, args));
                }
            }
            if let Some(reason) = choice.finish_reason {
                out.extend(self.tools.finish().into_iter().map(ModelDelta::ToolCall));
                out.push(ModelDelta::Finish(FinishReason::parse(&reason)));
                self.finished = true;
            }
        }
        if let Some(u) = chunk.usage {
            out.push(ModelDelta::Usage(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                cached_input_tokens: TokenDetails::cached(&u.prompt_tokens_details),
                reasoning_tokens: TokenDetails::reasoning(&u.completion_tokens_details),
                cost_usd: None,
            }));
        }
        Ok(out)
    }

    /// The stream ended: flushes tool calls a server never closed with a finish reason, or fails
    /// when the stream stopped before the model finished.
    pub fn finish(&mut self) -> Result<Vec<ModelDelta>, ModelError> {
        if self.finished {
            return Ok(Vec::new());
        }
        if self.done && !self.tools.is_empty() {
            let mut out: Vec<_> = self.tools.finish().into_iter().map(ModelDelta::ToolCall).collect();
            out.push(ModelDelta::Finish(FinishReason::ToolCalls));
            return Ok(out);
        }
        if self.done {
            return Ok(vec![ModelDelta::Finish(FinishReason::Stop)]);
        }
        Err(ModelError::Truncated("the stream closed before a finish reason or [DONE]".into()))
    }
}

impl StreamParser for ChunkParser {
    fn event(&mut self, event: &eventsource_stream::Event) -> Result<Vec<ModelDelta>, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        self.feed(data)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn end(&mut self) -> Result<Vec<ModelDelta>, ModelError> {
        self.finish()
    }

    fn tool_chars(&self) -> usize {
        self.tools.chars()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_and_reasoning_tokens_are_read_from_the_usage_details() {
        // OpenAI's shape for a reasoning model; a `null` breakdown is no breakdown.
        let mut p = ChunkParser::default();
        let deltas = p
            .feed(
                r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":40,
                "prompt_tokens_details":{"cached_tokens":64,"audio_tokens":0},
                "completion_tokens_details":{"reasoning_tokens":32,"accepted_prediction_tokens":0}}}"#,
            )
            .unwrap();
        let want = Usage { cached_input_tokens: 64, reasoning_tokens: 32, ..Usage::tokens(100, 40) };
        assert_eq!(deltas, [ModelDelta::Usage(want)]);
        let deltas = p
            .feed(r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":null}}"#)
            .unwrap();
        assert_eq!(deltas, [ModelDelta::Usage(Usage::tokens(1, 2))]);
    }

    #[test]
    fn a_chunks_strings_borrow_from_the_payload_unless_escaped() {
        let data = r#"{"id":"chatcmpl-1","choices":[{"delta":{"content":"a \"quoted\" word"},"finish_reason":"stop"}]}"#;
        let chunk: Chunk = serde_json::from_str(data).unwrap();
        assert!(matches!(chunk.id, Some(Str(Cow::Borrowed("chatcmpl-1")))));
        let choice = &chunk.choices[0];
        assert!(matches!(choice.finish_reason, Some(Str(Cow::Borrowed("stop")))));
        // Escapes are decoded into an owned string.
        let content = choice.delta.as_ref().and_then(|d| d.content.as_ref()).unwrap();
        assert!(matches!(&content.0, Cow::Owned(s) if s == "a \"quoted\" word"));
        let mut p = ChunkParser::default();
        assert_eq!(
            p.feed(data).unwrap(),
            [
                ModelDelta::ResponseId("chatcmpl-1".into()),
                ModelDelta::Text("a \"quoted\" word".into()),
                ModelDelta::Finish(FinishReason::Stop)
            ]
        );
    }

    #[test]
    fn mid_stream_error_payload_is_a_typed_error() {
        let mut p = ChunkParser::default();
        let err = p.feed(r#"{"error":{"message":"context overflow"}}"#).unwrap_err();
        assert_eq!(err, ModelError::Stream("context overflow".into()));
    }

    #[test]
    fn stream_without_finish_or_done_is_truncated() {
        let mut p = ChunkParser::default();
        p.feed(r#"{"id":"x","choices":[{"delta":{"content":"hi"}}]}"#).unwrap();
        assert!(matches!(p.finish(), Err(ModelError::Truncated(_))));
    }
}
