//! `POST /ai-sdk`: the AI SDK's UI message stream (docs/ai-sdk.md), what `useChat`'s default
//! transport reads. Its request body (`id`, `messages`, `trigger`, `messageId`) becomes the chat
//! request `POST /chat` takes (`id` the episode, the last user message and its id as the request
//! id, or the approvals answered in the last assistant message as a `resume`), which then passes
//! the same checks and starts the same turn; its events go out as UI message stream parts
//! ([`AiSdkTurn`]) with the header `x-vercel-ai-ui-message-stream: v1`.
//!
//! A separate path, not content negotiation on `/chat`: both bodies are JSON and both answers
//! are SSE, so no header would tell them apart reliably, and the transport's resume URL is
//! `{api}/{id}/stream`: `GET /ai-sdk/{id}/stream` replays the chat's running turn from its first
//! event (what the transport expects by default) and follows it, or answers 204 when no turn
//! runs.
//!
//! Refused before anything runs (400): a body that is not a `useChat` body, a `trigger` other
//! than `submit-message` (Baton does not regenerate an answer), a `system` message (the stored
//! conversation is the history: earlier messages are not read), a last message that is neither
//! the user's (text parts only) nor an assistant message with answered approvals.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::request::{ChatBody, checked_id, user_of};
use super::wire::{
    Closed, OpenParts, Protocol, Translate, Translated, bad_request, result_text, text_of_parts,
};
use super::{ApiError, Caller, ChatService};
use crate::event::{Event, Status};

/// The fields of a `useChat` request Baton reads; others (a transport's extra `body`) are
/// allowed and not read, except `on_busy`.
#[derive(Debug, Deserialize)]
struct UseChatBody {
    id: String,
    messages: Vec<UiMessage>,
    #[serde(default)]
    trigger: Option<String>,
    /// What to do when the chat's turn still runs (as `POST /chat`'s), sent in the transport's
    /// extra `body`.
    #[serde(default)]
    on_busy: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct UiMessage {
    id: String,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

/// The chat request a `useChat` body stands for, or why it is refused.
fn chat_request(body: &[u8]) -> Result<ChatBody, ApiError> {
    let body: UseChatBody = serde_json::from_slice(body)
        .map_err(|e| bad_request("invalid_json", format!("the body is not a valid useChat request: {e}")))?;
    let chat_id = checked_id("id", body.id)?;
    match body.trigger.as_deref() {
        None | Some("submit-message") => {}
        Some(other) => {
            return Err(bad_request(
                "unsupported_trigger",
                format!(
                    "trigger {other:?} is not supported: only \"submit-message\" (Baton does not regenerate answers)"
                ),
            ));
        }
    }
    if body.messages.iter().any(|m| m.role == "system") {
        return Err(bad_request(
            "unsupported_history",
            "a `system` message cannot be sent: the agents have their own instructions, and the conversation stored for this chat is its history",
        ));
    }
    let Some(last) = body.messages.last() else {
        return Err(bad_request("missing_user_message", "`messages` is empty: the last must be the user's"));
    };
    match last.role.as_str() {
        "user" => {
            let text = text_of_parts(&last.parts)?;
            let request_id = checked_id("messages[].id", last.id.clone())?;
            Ok(ChatBody {
                episode_id: Some(chat_id),
                request_id: Some(request_id),
                message: Some(Value::String(text)),
                on_busy: body.on_busy.clone(),
                ..ChatBody::default()
            })
        }
        "assistant" => {
            let answers: Vec<Value> = last.parts.iter().filter_map(approval_answer).collect();
            if answers.is_empty() {
                return Err(bad_request(
                    "missing_user_message",
                    "the last message must be the user's, or an assistant message with answered approvals",
                ));
            }
            Ok(ChatBody {
                episode_id: Some(chat_id),
                resume: Some(Value::Array(answers)),
                ..ChatBody::default()
            })
        }
        other => Err(bad_request(
            "missing_user_message",
            format!("the last message is a {other:?} message, not the user's"),
        )),
    }
}

/// A tool part whose approval the user answered (`addToolApprovalResponse`), as a Baton resume
/// answer.
fn approval_answer(part: &Value) -> Option<Value> {
    if part.get("state").and_then(Value::as_str) != Some("approval-responded") {
        return None;
    }
    let approval = part.get("approval")?;
    let id = approval.get("id")?.as_str()?;
    let approved = approval.get("approved")?.as_bool()?;
    let mut answer = json!({"interrupt_id": id, "decision": if approved { "approve" } else { "reject" }});
    if let Some(reason) = approval.get("reason").and_then(Value::as_str).filter(|_| !approved) {
        answer["message"] = json!(reason);
    }
    Some(answer)
}

/// The AI SDK's UI message stream as a [`Protocol`].
pub(crate) struct AiSdk;

impl Protocol for AiSdk {
    type Translation = AiSdkTurn;

    fn request(body: &[u8]) -> Result<(ChatBody, AiSdkTurn), ApiError> {
        Ok((chat_request(body)?, AiSdkTurn::new()))
    }
}

impl ChatService {
    /// Answers `GET /ai-sdk/{chat_id}/stream` of `caller`: the chat's running turn as a UI
    /// message stream from its first event, followed to its end; 204 when no turn runs; or a
    /// 4xx/5xx JSON error.
    pub(crate) async fn ai_sdk_stream(
        &self,
        caller: &Caller,
        chat_id: String,
        headers: &HeaderMap,
        deadline: Option<tokio::time::Instant>,
    ) -> Response {
        let key = match user_of(caller, headers)
            .and_then(|user| Ok(crate::store::EpisodeKey::new(user, checked_id("id", chat_id)?)?))
        {
            Ok(key) => key,
            Err(e) => return e.into_response(),
        };
        let Some(turn_id) = self.running_turn(&key).await else {
            return StatusCode::NO_CONTENT.into_response();
        };
        let live = self.turns.live().get(&key, &turn_id);
        let wire = Box::new(Translated::new(AiSdkTurn::new()));
        self.follow_response(key, live, turn_id, crate::turn::Cursor { after: 0 }, deadline, wire)
    }
}

/// `GET /ai-sdk/{chat_id}/stream` ([`ChatService::ai_sdk_stream`]).
pub(super) async fn stream_route(
    axum::extract::State(service): axum::extract::State<std::sync::Arc<ChatService>>,
    axum::extract::Path(chat_id): axum::extract::Path<String>,
    caller: Caller,
    super::platform::Deadline(deadline): super::platform::Deadline,
    headers: HeaderMap,
) -> Response {
    service.ai_sdk_stream(&caller, chat_id, &headers, deadline).await
}

/// One turn's translation of Baton events into UI message stream parts (docs/ai-sdk.md has the
/// table). The turn is one assistant message, its id the turn id.
pub(crate) struct AiSdkTurn {
    parts: OpenParts,
    started: bool,
    last_error: Option<String>,
}

impl AiSdkTurn {
    fn new() -> AiSdkTurn {
        AiSdkTurn { parts: OpenParts::new("baton"), started: false, last_error: None }
    }

    fn close(closed: Vec<Closed>, out: &mut Vec<Value>) {
        for part in closed {
            out.push(match part {
                Closed::Text(id) => json!({"type": "text-end", "id": id}),
                Closed::Reasoning(id) => json!({"type": "reasoning-end", "id": id}),
            });
        }
    }

    fn tool_input(&mut self, agent: &str, call_id: &str, name: &str, input: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        Self::close(self.parts.close(agent), &mut out);
        let id = self.parts.start_call(agent, call_id);
        let meta = json!({"baton": {"agent": agent}});
        out.push(json!({"type": "tool-input-start", "toolCallId": id, "toolName": name, "dynamic": true,
                         "providerExecuted": true, "providerMetadata": meta}));
        out.push(json!({"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": input.to_string()}));
        out.push(json!({"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": input,
                         "dynamic": true, "providerExecuted": true, "providerMetadata": meta}));
        out
    }
}

/// Baton's own event as a `data-baton-<type>` part (the event names its instance).
fn data_part(event: &Event) -> Value {
    let transient = matches!(event, Event::ToolCallProgress { .. });
    let mut part = json!({"type": format!("data-baton-{}", event.kind()), "data": event});
    if transient {
        part["transient"] = json!(true);
    }
    part
}

impl Translate for AiSdkTurn {
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("x-vercel-ai-ui-message-stream", "v1")]
    }

    fn event(&mut self, event: &Event, out: &mut Vec<Value>) {
        if !self.started {
            self.started = true;
            let mut start = json!({"type": "start"});
            if let Event::Thinking { episode_id, turn_id } = event {
                if !turn_id.is_empty() {
                    start["messageId"] = json!(turn_id);
                    start["messageMetadata"] = json!({"episodeId": episode_id, "turnId": turn_id});
                }
            }
            out.push(start);
        }
        match event {
            Event::Thinking { .. } => {}
            Event::Text { agent, text } | Event::Reasoning { agent, text } => {
                let reasoning = matches!(event, Event::Reasoning { .. });
                let other =
                    if reasoning { self.parts.close_text(agent) } else { self.parts.close_reasoning(agent) };
                Self::close(other.into_iter().collect(), out);
                if text.is_empty() {
                    return;
                }
                let (kind, (id, opened)) = if reasoning {
                    ("reasoning", self.parts.reasoning(agent))
                } else {
                    ("text", self.parts.text(agent))
                };
                if opened {
                    out.push(json!({"type": format!("{kind}-start"), "id": id, "providerMetadata": {"baton": {"agent": agent}}}));
                }
                out.push(json!({"type": format!("{kind}-delta"), "id": id, "delta": text}));
            }
            Event::ToolCallStart { agent, call_id, name, arguments } => {
                out.extend(self.tool_input(agent, call_id, name, arguments));
            }
            Event::ToolResult { agent, call_id, result, is_error, .. } => {
                let id = self.parts.call(agent, call_id);
                out.push(if *is_error {
                    json!({"type": "tool-output-error", "toolCallId": id, "errorText": result_text(result),
                           "dynamic": true, "providerExecuted": true})
                } else {
                    json!({"type": "tool-output-available", "toolCallId": id, "output": result,
                           "dynamic": true, "providerExecuted": true})
                });
            }
            Event::AgentFinished { agent, .. } => {
                Self::close(self.parts.close(agent), out);
                out.push(data_part(event));
            }
            Event::ApprovalRequired(interrupt) => {
                let (agent, call_id) = (&interrupt.agent, &interrupt.call_id);
                // The held call has started (`tool_call_start`) unless a producer skipped it.
                if self.parts.started_call(agent, call_id).is_none() {
                    out.extend(self.tool_input(agent, call_id, &interrupt.tool, &interrupt.arguments));
                }
                let id = self.parts.call(agent, call_id);
                out.push(json!({"type": "tool-approval-request", "approvalId": interrupt.interrupt_id,
                                "toolCallId": id, "reason": interrupt.reason}));
                out.push(data_part(event));
            }
            Event::Error { message, .. } => {
                self.last_error = Some(message.clone());
                out.push(data_part(event));
            }
            Event::Completed { status, episode_id, turn_id, model, duration_ms, usage, cost_usd, .. } => {
                Self::close(self.parts.close_all(), out);
                out.push(data_part(event));
                let reason = match status {
                    Status::Ok => "stop",
                    Status::Interrupted => "tool-calls",
                    Status::Error | Status::Abandoned => {
                        let text = match status {
                            Status::Abandoned => {
                                "the turn's producer stopped before the turn ended".to_owned()
                            }
                            _ => self.last_error.clone().unwrap_or_else(|| "the turn failed".to_owned()),
                        };
                        out.push(json!({"type": "error", "errorText": text}));
                        "error"
                    }
                    Status::Partial | Status::Cancelled => "other",
                };
                let mut metadata = json!({
                    "episodeId": episode_id, "turnId": turn_id, "status": status.as_str(), "model": model,
                    "durationMs": duration_ms, "usage": usage
                });
                if let Some(cost) = cost_usd {
                    metadata["costUsd"] = json!(cost);
                }
                out.push(json!({"type": "finish", "finishReason": reason, "messageMetadata": metadata}));
            }
            _ => out.push(data_part(event)),
        }
    }

    fn cut(&mut self, out: &mut Vec<Value>) {
        if !self.started {
            self.started = true;
            out.push(json!({"type": "start"}));
        }
        Self::close(self.parts.close_all(), out);
        out.push(json!({"type": "error", "errorText": "the stream ended before the turn did; its answer is kept in the conversation"}));
        out.push(json!({"type": "finish", "finishReason": "other"}));
    }

    fn done(&self) -> Option<&'static [u8]> {
        Some(b"data: [DONE]\n\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Usage;

    fn code(body: &str) -> &'static str {
        chat_request(body.as_bytes()).unwrap_err().code
    }

    #[test]
    fn a_use_chat_body_becomes_the_chat_request_of_its_last_user_message() {
        let body = r#"{"id":"chat1","trigger":"submit-message","messageId":null,"extra":1,"messages":[
            {"id":"m0","role":"user","parts":[{"type":"text","text":"old"}]},
            {"id":"m1","role":"assistant","parts":[{"type":"text","text":"x"}]},
            {"id":"m2","role":"user","parts":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#;
        assert_eq!(
            chat_request(body.as_bytes()).unwrap().to_json(),
            json!({"episode_id": "chat1", "request_id": "m2", "message": "a\nb"})
        );
    }

    #[test]
    fn answered_approvals_in_the_last_assistant_message_become_a_resume() {
        let body = r#"{"id":"chat1","trigger":"submit-message","messages":[
            {"id":"m1","role":"assistant","parts":[
              {"type":"dynamic-tool","toolName":"clip","toolCallId":"c","state":"approval-responded","input":{},
               "approval":{"id":"int_1","approved":false,"reason":"not that one"}},
              {"type":"dynamic-tool","toolName":"clip","toolCallId":"d","state":"approval-responded","input":{},
               "approval":{"id":"int_2","approved":true}}]}]}"#;
        assert_eq!(
            chat_request(body.as_bytes()).unwrap().to_json(),
            json!({"episode_id": "chat1", "resume": [
                {"interrupt_id": "int_1", "decision": "reject", "message": "not that one"},
                {"interrupt_id": "int_2", "decision": "approve"}]})
        );
    }

    #[test]
    fn bad_bodies_are_refused_with_specific_codes() {
        let user = r#"[{"id":"m","role":"user","parts":[{"type":"text","text":"hi"}]}]"#;
        assert_eq!(code("[1]"), "invalid_json");
        assert_eq!(code(r#"{"id":"c"}"#), "invalid_json");
        assert_eq!(code(&format!(r#"{{"id":"../x","messages":{user}}}"#)), "invalid_id");
        assert_eq!(
            code(&format!(r#"{{"id":"c","trigger":"regenerate-message","messages":{user}}}"#)),
            "unsupported_trigger"
        );
        assert_eq!(code(r#"{"id":"c","messages":[]}"#), "missing_user_message");
        let assistant =
            r#"{"id":"c","messages":[{"id":"a","role":"assistant","parts":[{"type":"text","text":"x"}]}]}"#;
        assert_eq!(code(assistant), "missing_user_message");
        let system = r#"{"id":"c","messages":[{"id":"s","role":"system","parts":[{"type":"text","text":"obey"}]},{"id":"m","role":"user","parts":[{"type":"text","text":"hi"}]}]}"#;
        assert_eq!(code(system), "unsupported_history");
        let file = r#"{"id":"c","messages":[{"id":"m","role":"user","parts":[{"type":"file","mediaType":"image/png","url":"data:"}]}]}"#;
        assert_eq!(code(file), "unsupported_content");
    }

    fn translate(events: &[Event]) -> Vec<Value> {
        let mut turn = AiSdkTurn::new();
        let mut out = Vec::new();
        for event in events {
            turn.event(event, &mut out);
        }
        out
    }

    fn completed(status: Status) -> Event {
        Event::Completed {
            episode_id: "e".into(),
            turn_id: "T".into(),
            status,
            model: "offline".into(),
            duration_ms: 3,
            cost_usd: None,
            usage: vec![],
            interrupts: Box::new([]),
        }
    }

    #[test]
    fn a_turn_is_one_message_with_a_text_part_per_instance() {
        let out = translate(&[
            Event::Thinking { episode_id: "e".into(), turn_id: "T".into() },
            Event::text("a[1]", "he"),
            Event::text("b[1]", "yo"),
            Event::text("a[1]", "llo"),
            Event::usage("a[1]", "m", Usage::tokens(1, 2)),
            completed(Status::Ok),
        ]);
        let types: Vec<&str> = out.iter().map(|o| o["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "text-start",
                "text-delta",
                "text-start",
                "text-delta",
                "text-delta",
                "data-baton-usage",
                "text-end",
                "text-end",
                "data-baton-completed",
                "finish"
            ]
        );
        assert_eq!(
            out[0],
            json!({"type":"start","messageId":"T","messageMetadata":{"episodeId":"e","turnId":"T"}})
        );
        assert_eq!(out[1]["providerMetadata"], json!({"baton": {"agent": "a[1]"}}));
        assert_eq!(out[5]["id"], out[1]["id"]);
        assert_eq!(out[6]["data"]["agent"], "a[1]", "Baton's own events name their instance");
        assert_eq!(out[10]["finishReason"], "stop");
    }

    #[test]
    fn a_tool_call_is_input_then_output_and_a_failed_turn_ends_with_error() {
        let [call, result] = super::super::wire::search_call(json!({"hits": 1}));
        let out = translate(&[
            call,
            result,
            Event::error("a[1]", "model_unavailable", "down", true),
            completed(Status::Error),
        ]);
        let types: Vec<&str> = out.iter().map(|o| o["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "tool-output-available",
                "data-baton-error",
                "data-baton-completed",
                "error",
                "finish"
            ]
        );
        assert_eq!(out[4]["toolCallId"], out[1]["toolCallId"]);
        assert_eq!(out[4]["output"], json!({"hits": 1}));
        assert_eq!(out[7]["errorText"], "down");
        assert_eq!(out[8]["finishReason"], "error");
    }
}
