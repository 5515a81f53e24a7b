//! The OpenAI Responses API (`POST /v1/responses`, streamed), with `previous_response_id` so the
//! server keeps the conversation and a caller sends only what is new.
//!
//! Stream events read: `response.created` (id), `response.output_text.delta`,
//! `response.reasoning_summary_text.delta` and `response.reasoning_text.delta`,
//! `response.output_item.added` (a function call's id and name),
//! `response.function_call_arguments.delta` / `.done`, `response.output_item.done`,
//! `response.completed` and `response.incomplete` (id, usage), `response.failed` and `error`.
//! The stream has no `[DONE]`: it is over at `response.completed`.
//!
//! Retries, timeouts and error bodies are those of the Chat Completions client
//! ([`super::openai`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::openai::{
    Endpoint, OpenAiConfig, StreamParser, TokenDetails, retrying_stream, shorten, tool_options,
};
use super::{ChatModel, ChatRequest, DeltaStream, FinishReason, Message, ModelDelta, ModelError, ToolCall};
use crate::event::Usage;

/// A model behind the Responses API. Cheap to clone; build it once and share it.
#[derive(Debug, Clone)]
pub struct ResponsesModel {
    inner: Arc<Endpoint>,
}

impl ResponsesModel {
    /// Builds the model on a shared HTTP client (see
    /// [`OpenAiChatModel::http_client`](super::openai::OpenAiChatModel::http_client)).
    pub(crate) fn with_client(http: crate::outbound::Client, config: OpenAiConfig) -> ResponsesModel {
        ResponsesModel { inner: Arc::new(Endpoint::new(http, config, "responses")) }
    }

    /// Builds the model with its own HTTP client.
    pub fn new(config: OpenAiConfig) -> Result<ResponsesModel, ModelError> {
        let http = super::openai::OpenAiChatModel::http_client(&config.timeouts, false)?;
        Ok(ResponsesModel::with_client(http, config))
    }
}

impl ChatModel for ResponsesModel {
    fn model_name(&self) -> &str {
        &self.inner.config.model
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        retrying_stream::<EventParser>(
            self.inner.clone(),
            as_bytes(&request_body(&self.inner.config.model, &request, None)),
        )
    }

    fn keeps_conversations(&self) -> bool {
        true
    }

    fn stream_continuing(&self, request: ChatRequest, previous_response_id: String) -> DeltaStream {
        let body = request_body(&self.inner.config.model, &request, Some(&previous_response_id));
        retrying_stream::<EventParser>(self.inner.clone(), as_bytes(&body))
    }
}

/// `body`'s JSON text.
fn as_bytes(body: &Value) -> bytes::Bytes {
    serde_json::to_vec(body).expect("a JSON value always serialises").into()
}

/// The JSON body of a streaming Responses request. System messages become `instructions` (they
/// are not carried over by `previous_response_id`, so every request sends them).
pub(crate) fn request_body(model: &str, request: &ChatRequest, previous_response_id: Option<&str>) -> Value {
    let mut instructions: Vec<&str> = Vec::new();
    let mut input: Vec<Value> = Vec::new();
    for message in &request.messages {
        match message {
            Message::System { content } => instructions.push(content),
            Message::User { content, images } if images.is_empty() => {
                input.push(json!({"role": "user", "content": content}))
            }
            Message::User { content, images } => {
                let mut parts = vec![json!({"type": "input_text", "text": content})];
                parts.extend(images.iter().map(|url| json!({"type": "input_image", "image_url": url})));
                input.push(json!({"role": "user", "content": parts}))
            }
            Message::Assistant { content, tool_calls } => {
                if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for call in tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id, "name": call.name,
                                      "arguments": call.arguments}));
                }
            }
            Message::Tool { call_id, content } => {
                input.push(json!({"type": "function_call_output", "call_id": call_id, "output": content}));
            }
        }
    }
    let mut body = json!({"model": model, "input": input, "stream": true, "store": true});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if let Some(id) = previous_response_id {
        body["previous_response_id"] = json!(id);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters})
            })
            .collect();
        tool_options(&mut body, request);
    }
    if let Some(max) = request.max_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(format) = &request.response_format {
        body["text"] = json!({"format": {
            "type": "json_schema", "name": format.name, "schema": format.schema, "strict": true,
        }});
    }
    body
}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    output_index: Option<usize>,
    #[serde(default)]
    item: Option<WireItem>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    response: Option<WireResponse>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct WireItem {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    output_tokens_details: Option<TokenDetails>,
}

/// Turns Responses stream events into deltas.
#[derive(Default)]
pub struct EventParser {
    response_id_sent: bool,
    calls: BTreeMap<usize, ToolCall>,
    finished: bool,
    /// Characters of tool names and arguments received (never decreases), for the answer cap.
    tool_chars: usize,
}

impl EventParser {
    /// Parses one event's `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<Vec<ModelDelta>, ModelError> {
        let event: WireEvent = serde_json::from_str(data)
            .map_err(|e| ModelError::Decode(format!("{e} in event {}", shorten(data))))?;
        let mut out = Vec::new();
        match event.kind.as_str() {
            "response.created" | "response.in_progress" => {
                if let Some(id) = event.response.and_then(|r| r.id) {
                    self.response_id(id, &mut out);
                }
            }
            "response.output_text.delta" => {
                out.extend(event.delta.filter(|d| !d.is_empty()).map(ModelDelta::Text));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.extend(event.delta.filter(|d| !d.is_empty()).map(ModelDelta::Reasoning));
            }
            "response.output_item.added" | "response.output_item.done" => {
                let done = event.kind == "response.output_item.done";
                if let (Some(index), Some(item)) = (event.output_index, event.item) {
                    self.output_item(index, item, done, &mut out);
                }
            }
            "response.function_call_arguments.delta" => {
                if let (Some(index), Some(delta)) = (event.output_index, event.delta) {
                    if let Some(call) = self.calls.get_mut(&index) {
                        self.tool_chars += delta.chars().count();
                        call.arguments.push_str(&delta);
                    }
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(index), Some(arguments)) = (event.output_index, event.arguments) {
                    if let Some(call) = self.calls.get_mut(&index) {
                        self.tool_chars += grown_by(&call.arguments, &arguments);
                        call.arguments = arguments;
                    }
                }
            }
            "response.completed" | "response.incomplete" => self.completed(event.response, &mut out),
            "response.failed" => {
                let error = event.response.and_then(|r| r.error);
                let message = error
                    .as_ref()
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| "the response failed".into());
                return Err(ModelError::Stream(message));
            }
            "error" => {
                return Err(ModelError::Stream(event.message.unwrap_or_else(|| shorten(data).to_owned())));
            }
            _ => {}
        }
        Ok(out)
    }

    /// A function call's item: a new call is announced; a done one brings its arguments whole.
    fn output_item(&mut self, index: usize, item: WireItem, done: bool, out: &mut Vec<ModelDelta>) {
        if item.kind != "function_call" {
            return;
        }
        let is_new = !self.calls.contains_key(&index);
        let call = self.calls.entry(index).or_insert_with(|| ToolCall {
            id: item.call_id.clone().unwrap_or_else(|| format!("call_{index}")),
            name: item.name.clone().unwrap_or_default(),
            arguments: String::new(),
        });
        if is_new {
            self.tool_chars += 1 + call.name.chars().count();
        }
        if done {
            if let Some(arguments) = item.arguments {
                self.tool_chars += grown_by(&call.arguments, &arguments);
                call.arguments = arguments;
            }
        }
        if is_new {
            out.push(ModelDelta::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() });
        }
    }

    /// The response's end: its id, its calls, its usage and why it finished.
    fn completed(&mut self, response: Option<WireResponse>, out: &mut Vec<ModelDelta>) {
        let response =
            response.unwrap_or(WireResponse { id: None, usage: None, error: None, incomplete_details: None });
        if let Some(id) = response.id {
            self.response_id(id, out);
        }
        let calls = std::mem::take(&mut self.calls);
        let had_calls = !calls.is_empty();
        out.extend(calls.into_values().map(ModelDelta::ToolCall));
        if let Some(u) = response.usage {
            out.push(ModelDelta::Usage(Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cached_input_tokens: TokenDetails::cached(&u.input_tokens_details),
                reasoning_tokens: TokenDetails::reasoning(&u.output_tokens_details),
                cost_usd: None,
            }));
        }
        let finish = match (&response.incomplete_details, had_calls) {
            (Some(details), _) => match details.get("reason").and_then(Value::as_str) {
                Some("max_output_tokens") => FinishReason::Length,
                Some("content_filter") => FinishReason::ContentFilter,
                Some(other) => FinishReason::Other(other.to_owned()),
                None => FinishReason::Other("incomplete".into()),
            },
            (None, true) => FinishReason::ToolCalls,
            (None, false) => FinishReason::Stop,
        };
        out.push(ModelDelta::Finish(finish));
        self.finished = true;
    }

    fn response_id(&mut self, id: String, out: &mut Vec<ModelDelta>) {
        if !self.response_id_sent && !id.is_empty() {
            self.response_id_sent = true;
            out.push(ModelDelta::ResponseId(id));
        }
    }
}

/// How many characters longer `new` is than `old` (a `.done` event repeats the arguments the
/// deltas already brought: only what is new counts).
fn grown_by(old: &str, new: &str) -> usize {
    new.chars().count().saturating_sub(old.chars().count())
}

impl StreamParser for EventParser {
    fn event(&mut self, event: &eventsource_stream::Event) -> Result<Vec<ModelDelta>, ModelError> {
        if event.data.trim().is_empty() {
            return Ok(Vec::new());
        }
        self.feed(&event.data)
    }

    fn is_done(&self) -> bool {
        self.finished
    }

    fn end(&mut self) -> Result<Vec<ModelDelta>, ModelError> {
        if self.finished {
            Ok(Vec::new())
        } else {
            Err(ModelError::Truncated("the stream closed before response.completed".into()))
        }
    }

    fn tool_chars(&self) -> usize {
        self.tool_chars
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolChoice, ToolSpec};

    #[test]
    fn an_image_is_an_input_image_part_after_the_text() {
        let url = "https://cdn.example.com/r.jpg";
        let request = ChatRequest {
            messages: vec![Message::User { content: "this one".into(), images: vec![url.into()] }],
            tools: Arc::default(),
            tool_choice: None,
            parallel_tool_calls: None,
            max_tokens: None,
            response_format: None,
        };
        let body = request_body("m", &request, None);
        assert_eq!(
            body["input"][0]["content"],
            serde_json::json!([{"type": "input_text", "text": "this one"}, {"type": "input_image", "image_url": url}])
        );
    }

    #[test]
    fn request_body_maps_messages_to_items_and_instructions() {
        let request = ChatRequest {
            messages: vec![
                Message::system("be brief"),
                Message::user("coffee?"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall { id: "c1".into(), name: "f".into(), arguments: "{}".into() }],
                },
                Message::Tool { call_id: "c1".into(), content: "[]".into() },
            ],
            tools: vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({}) }].into(),
            tool_choice: Some(ToolChoice::Auto),
            parallel_tool_calls: Some(true),
            max_tokens: Some(99),
            response_format: None,
        };
        let body = request_body("m", &request, Some("resp_1"));
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(body["previous_response_id"], "resp_1");
        assert_eq!(body["input"][0], json!({"role": "user", "content": "coffee?"}));
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call_output", "call_id": "c1", "output": "[]"})
        );
        assert_eq!(body["tools"][0]["name"], "f");
        assert_eq!(body["max_output_tokens"], 99);
        assert!(request_body("m", &request, None).get("previous_response_id").is_none());
    }

    #[test]
    fn failed_and_error_events_are_typed_errors() {
        let mut p = EventParser::default();
        let failed =
            r#"{"type":"response.failed","response":{"id":"r","error":{"code":"x","message":"overloaded"}}}"#;
        assert_eq!(p.feed(failed).unwrap_err(), ModelError::Stream("overloaded".into()));
        let error = r#"{"type":"error","code":"bad","message":"nope"}"#;
        assert_eq!(EventParser::default().feed(error).unwrap_err(), ModelError::Stream("nope".into()));
    }

    #[test]
    fn incomplete_response_finishes_with_its_reason() {
        let mut p = EventParser::default();
        let out = p
            .feed(r#"{"type":"response.incomplete","response":{"id":"r","incomplete_details":{"reason":"max_output_tokens"}}}"#)
            .unwrap();
        assert_eq!(out.last(), Some(&ModelDelta::Finish(FinishReason::Length)));
        assert!(p.is_done());
    }

    #[test]
    fn a_stream_without_completed_is_truncated() {
        let mut p = EventParser::default();
        p.feed(r#"{"type":"response.output_text.delta","delta":"hi"}"#).unwrap();
        assert!(matches!(StreamParser::end(&mut p), Err(ModelError::Truncated(_))));
    }
}
