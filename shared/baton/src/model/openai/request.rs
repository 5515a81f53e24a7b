//! The JSON body of a streaming Chat Completions request, serialised from borrowed wire types.

use serde::Serialize;
use serde_json::{Value, json};

use crate::model::{ChatRequest, Message, ToolChoice};

/// The JSON body of a streaming Chat Completions request.
#[cfg(test)]
pub(crate) fn request_body(model: &str, request: &ChatRequest) -> Value {
    serde_json::to_value(WireRequest::new(model, request)).expect("a request always serialises")
}

/// A Chat Completions request as it goes on the wire, borrowing every string and schema from the
/// [`ChatRequest`]: serialised straight to bytes, with no `Value` tree in between.
#[derive(Serialize)]
pub(super) struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<WireTool<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireFormat<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct WireFormat<'a> {
    r#type: &'static str,
    json_schema: WireSchema<'a>,
}

#[derive(Serialize)]
struct WireSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

impl<'a> WireRequest<'a> {
    pub(super) fn new(model: &'a str, request: &'a ChatRequest) -> WireRequest<'a> {
        let with_tools = !request.tools.is_empty();
        WireRequest {
            model,
            messages: request.messages.iter().map(WireMessage::new).collect(),
            stream: true,
            stream_options: StreamOptions { include_usage: true },
            tools: request
                .tools
                .iter()
                .map(|t| WireTool {
                    r#type: "function",
                    function: WireFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.parameters,
                    },
                })
                .collect(),
            tool_choice: request.tool_choice.filter(|_| with_tools).map(ToolChoice::wire_name),
            parallel_tool_calls: request.parallel_tool_calls.filter(|_| with_tools),
            max_tokens: request.max_tokens,
            response_format: request.response_format.as_ref().map(|f| WireFormat {
                r#type: "json_schema",
                json_schema: WireSchema { name: &f.name, schema: &f.schema, strict: true },
            }),
        }
    }
}

/// One message on the wire (`role` and its fields).
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: WireContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: its text, or text and images as parts.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireUrl<'a> },
}

#[derive(Serialize)]
struct WireUrl<'a> {
    url: &'a str,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl<'a> WireMessage<'a> {
    fn new(message: &'a Message) -> WireMessage<'a> {
        match message {
            Message::System { content } => WireMessage::System { content },
            Message::User { content, images } if images.is_empty() => {
                WireMessage::User { content: WireContent::Text(content) }
            }
            Message::User { content, images } => {
                let mut parts = vec![WirePart::Text { text: content }];
                parts.extend(images.iter().map(|url| WirePart::ImageUrl { image_url: WireUrl { url } }));
                WireMessage::User { content: WireContent::Parts(parts) }
            }
            Message::Assistant { content, tool_calls } => WireMessage::Assistant {
                content: content.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireCall {
                        id: &c.id,
                        r#type: "function",
                        function: WireCallFunction { name: &c.name, arguments: &c.arguments },
                    })
                    .collect(),
            },
            Message::Tool { call_id, content } => WireMessage::Tool { tool_call_id: call_id, content },
        }
    }
}

/// `tool_choice` and `parallel_tool_calls`, spelled the same in both OpenAI APIs.
pub(crate) fn tool_options(body: &mut Value, request: &ChatRequest) {
    if let Some(choice) = request.tool_choice {
        body["tool_choice"] = json!(choice.wire_name());
    }
    if let Some(parallel) = request.parallel_tool_calls {
        body["parallel_tool_calls"] = json!(parallel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_carries_tools_and_tool_results() {
        let req = ChatRequest {
            messages: vec![
                Message::system("s"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![crate::model::ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool { call_id: "c".into(), content: "ok".into() },
            ],
            tools: vec![crate::model::ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            tool_choice: Some(ToolChoice::Required),
            parallel_tool_calls: Some(true),
            max_tokens: None,
            response_format: None,
        };
        let body = request_body("m", &req);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(body["messages"][2]["tool_call_id"], "c");
    }

    #[test]
    fn the_wire_request_is_the_documented_json_field_for_field() {
        let req = ChatRequest {
            messages: vec![
                Message::system("s"),
                Message::User { content: "look".into(), images: vec!["data:image/png;base64,AA".into()] },
                Message::Assistant { content: None, tool_calls: Vec::new() },
                Message::user("plain"),
            ],
            tools: Default::default(),
            // Without tools, neither option is sent.
            tool_choice: Some(ToolChoice::Auto),
            parallel_tool_calls: Some(true),
            max_tokens: Some(50),
            response_format: Some(crate::model::ResponseFormat {
                name: "plan".into(),
                schema: json!({"type": "object"}),
            }),
        };
        let expected = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ]},
                {"role": "assistant", "content": null},
                {"role": "user", "content": "plain"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 50,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "plan", "schema": {"type": "object"}, "strict": true}},
        });
        assert_eq!(request_body("m", &req), expected);
    }
}
