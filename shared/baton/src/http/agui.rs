//! `POST /agui`: the AG-UI 1.0 protocol (docs/agui.md). A `RunAgentInput` comes in and becomes
//! the chat request `POST /chat` takes (`threadId` the episode, `runId` the request id, the last
//! user message, `resume` the approvals' answers), which then passes the same checks and starts
//! the same turn; its events go out translated into AG-UI events ([`AguiRun`]).
//!
//! Refused before anything runs (400, the chat endpoint's JSON error): a body that is not a
//! `RunAgentInput`, no user message last, a `system` or `developer` message (Baton's agents have
//! their own instructions, and the stored conversation is the history: earlier messages are not
//! read), non-text content, client tools (`tools` not empty: Baton runs only its own), ids out
//! of Baton's alphabet. `state` and `context` are not read; of `forwardedProps`, only `on_busy`
//! (what to do when the thread's turn still runs, as `POST /chat`'s).

use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::request::{ChatBody, checked_id};
use super::wire::{Closed, OpenParts, Protocol, Translate, bad_request, rfc3339, text_of_parts};
use crate::event::{Event, Interrupt, Status};

/// The fields of a `RunAgentInput` Baton reads; the others are allowed and not read.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunAgentInput {
    thread_id: String,
    run_id: String,
    messages: Vec<InputMessage>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    resume: Option<Vec<ResumeEntry>>,
    /// Properties the client forwards to the agent: Baton reads `on_busy` there.
    #[serde(default)]
    forwarded_props: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct InputMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// The chat request a `RunAgentInput` stands for, and the run's ids, or why it is refused.
fn chat_request(body: &[u8]) -> Result<(ChatBody, String, String), ApiError> {
    let input: RunAgentInput = serde_json::from_slice(body).map_err(|e| {
        bad_request("invalid_json", format!("the body is not a valid AG-UI RunAgentInput: {e}"))
    })?;
    let thread_id = checked_id("threadId", input.thread_id)?;
    let run_id = checked_id("runId", input.run_id)?;
    if input.tools.as_ref().is_some_and(|tools| !tools.is_empty()) {
        return Err(bad_request(
            "client_tools_unsupported",
            "`tools` must be empty: Baton's agents run only their own tools, not tools defined by the client",
        ));
    }
    if let Some(message) = input.messages.iter().find(|m| m.role == "system" || m.role == "developer") {
        return Err(bad_request(
            "unsupported_history",
            format!(
                "a `{}` message cannot be sent: the agents have their own instructions, and the conversation stored for this thread is its history",
                message.role
            ),
        ));
    }
    let mut request = ChatBody {
        episode_id: Some(thread_id.clone()),
        request_id: Some(run_id.clone()),
        on_busy: input.forwarded_props.as_ref().and_then(|p| p.get("on_busy")).cloned(),
        ..ChatBody::default()
    };
    match input.resume.filter(|entries| !entries.is_empty()) {
        // A run that answers interrupts continues the paused turn; its messages are not read.
        Some(entries) => {
            request.resume = Some(entries.into_iter().map(resume_answer).collect::<Result<_, _>>()?)
        }
        None => request.message = Some(Value::String(last_user_text(&input.messages)?)),
    }
    Ok((request, thread_id, run_id))
}

/// The text of the last message, which must be the user's.
fn last_user_text(messages: &[InputMessage]) -> Result<String, ApiError> {
    let Some(last) = messages.last().filter(|m| m.role == "user") else {
        return Err(bad_request("missing_user_message", "the last of `messages` must be a `user` message"));
    };
    match &last.content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => text_of_parts(parts),
        _ => Err(bad_request("missing_user_message", "the user message has no `content`")),
    }
}

/// One AG-UI resume entry as a Baton resume answer: `cancelled` rejects; `resolved` carries
/// the decision in its payload (`{"decision": "approve" | "reject", "message"?, "arguments"?}`),
/// approving when it has none.
fn resume_answer(entry: ResumeEntry) -> Result<Value, ApiError> {
    let mut answer = match entry.payload {
        None => json!({}),
        Some(Value::Object(payload)) => Value::Object(payload),
        Some(_) => {
            return Err(bad_request(
                "invalid_resume",
                "a resume entry's `payload` must be an object: {\"decision\", \"message\"?, \"arguments\"?}",
            ));
        }
    };
    let decision = match entry.status.as_str() {
        "cancelled" => "reject",
        "resolved" => answer.get("decision").and_then(Value::as_str).unwrap_or("approve"),
        other => {
            return Err(bad_request(
                "invalid_resume",
                format!("resume status {other:?}: \"resolved\" or \"cancelled\""),
            ));
        }
    }
    .to_owned();
    answer["decision"] = Value::String(decision);
    answer["interrupt_id"] = Value::String(entry.interrupt_id);
    Ok(answer)
}

/// AG-UI as a [`Protocol`].
pub(crate) struct Agui;

impl Protocol for Agui {
    type Translation = AguiRun;

    fn request(body: &[u8]) -> Result<(ChatBody, AguiRun), ApiError> {
        let (request, thread_id, run_id) = chat_request(body)?;
        Ok((request, AguiRun::new(thread_id, run_id)))
    }
}

/// One run's translation of Baton events into AG-UI events (docs/agui.md has the table).
pub(crate) struct AguiRun {
    thread_id: String,
    run_id: String,
    parts: OpenParts,
    started: bool,
    steps: Vec<String>,
    last_error: Option<(String, String)>,
}

impl AguiRun {
    fn new(thread_id: String, run_id: String) -> AguiRun {
        let parts = OpenParts::new(&run_id);
        AguiRun { thread_id, run_id, parts, started: false, steps: Vec::new(), last_error: None }
    }

    fn close(&mut self, closed: Vec<Closed>, out: &mut Vec<Value>) {
        for part in closed {
            match part {
                Closed::Text(id) => out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id})),
                Closed::Reasoning(id) => {
                    out.push(json!({"type": "REASONING_MESSAGE_END", "messageId": id}));
                    out.push(json!({"type": "REASONING_END", "messageId": id}));
                }
            }
        }
    }

    fn step_started(&mut self, name: String, baton: Value, out: &mut Vec<Value>) {
        if !self.steps.contains(&name) {
            out.push(json!({"type": "STEP_STARTED", "stepName": name, "metadata": {"baton": baton}}));
            self.steps.push(name);
        }
    }

    fn step_finished(&mut self, name: &str, baton: Value, out: &mut Vec<Value>) {
        if let Some(at) = self.steps.iter().position(|s| s == name) {
            self.steps.remove(at);
            out.push(json!({"type": "STEP_FINISHED", "stepName": name, "metadata": {"baton": baton}}));
        }
    }

    /// Everything still open closed, so the run may end.
    fn close_everything(&mut self, out: &mut Vec<Value>) {
        let closed = self.parts.close_all();
        self.close(closed, out);
        for name in std::mem::take(&mut self.steps).into_iter().rev() {
            out.push(json!({"type": "STEP_FINISHED", "stepName": name}));
        }
    }

    fn tool_call(&mut self, agent: &str, call_id: &str, name: &str, arguments: &Value, out: &mut Vec<Value>) {
        let closed = self.parts.close(agent);
        self.close(closed, out);
        let id = self.parts.start_call(agent, call_id);
        let meta = json!({"agent": agent});
        out.push(
            json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name, "metadata": meta}),
        );
        out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": arguments.to_string()}));
        out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
    }

    fn interrupt(&mut self, interrupt: &Interrupt) -> Value {
        json!({
            "id": interrupt.interrupt_id,
            "reason": "tool_approval",
            "message": interrupt.reason,
            "toolCallId": self.parts.call(&interrupt.agent, &interrupt.call_id),
            "expiresAt": rfc3339(interrupt.expires_at),
            "responseSchema": {
                "type": "object",
                "properties": {
                    "decision": {"enum": ["approve", "reject"]},
                    "message": {"type": "string"},
                    "arguments": {"type": "object"}
                }
            },
            "metadata": {
                "agent": interrupt.agent,
                "path": interrupt.path,
                "tool": interrupt.tool,
                "arguments": interrupt.arguments,
                "editable": interrupt.editable
            }
        })
    }

    fn finish(&mut self, status: Status, interrupts: &[Interrupt], usage: Value, out: &mut Vec<Value>) {
        let (thread, run) = (&self.thread_id, &self.run_id);
        let run_error =
            |code: &str, message: &str| json!({"type": "RUN_ERROR", "code": code, "message": message});
        let finished = match status {
            Status::Error => {
                let (code, message) =
                    self.last_error.clone().unwrap_or_else(|| ("error".into(), "the turn failed".into()));
                run_error(&code, &message)
            }
            Status::Abandoned => run_error("abandoned", "the turn's producer stopped before the turn ended"),
            Status::Cancelled => {
                json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {"type": "cancelled"}, "usage": usage})
            }
            Status::Interrupted if !interrupts.is_empty() => {
                let interrupts: Vec<Value> = interrupts.iter().map(|i| self.interrupt(i)).collect();
                json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                       "outcome": {"type": "interrupt", "interrupts": interrupts}, "usage": usage})
            }
            Status::Ok | Status::Partial | Status::Interrupted => json!({
                "type": "RUN_FINISHED", "threadId": thread, "runId": run,
                "result": {"status": status.as_str()}, "outcome": {"type": "success"}, "usage": usage
            }),
        };
        out.push(finished);
    }
}

/// AG-UI's token usage entries of a turn's roll-up.
fn token_usage(usage: &[crate::event::AgentUsage]) -> Value {
    usage
        .iter()
        .map(|u| {
            let mut entry = json!({
                "model": u.model,
                "inputTokens": u.usage.input_tokens,
                "outputTokens": u.usage.output_tokens,
                "totalTokens": u.usage.total(),
            });
            if u.usage.reasoning_tokens > 0 {
                entry["reasoningTokens"] = json!(u.usage.reasoning_tokens);
            }
            if u.usage.cached_input_tokens > 0 {
                entry["cachedInputTokens"] = json!(u.usage.cached_input_tokens);
            }
            entry
        })
        .collect()
}

impl Translate for AguiRun {
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn event(&mut self, event: &Event, out: &mut Vec<Value>) {
        if !self.started {
            self.started = true;
            out.push(json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}));
        }
        let custom = |event: &Event| json!({"type": "CUSTOM", "name": format!("baton.{}", event.kind()), "value": event});
        match event {
            Event::Thinking { turn_id, .. } => {
                out.push(json!({"type": "CUSTOM", "name": "baton.thinking", "value": {"turn_id": turn_id}}));
            }
            Event::Text { agent, text } => {
                let closed = self.parts.close_reasoning(agent);
                self.close(closed.into_iter().collect(), out);
                if text.is_empty() {
                    return;
                }
                let (id, opened) = self.parts.text(agent);
                if opened {
                    out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant", "name": agent}));
                }
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            }
            Event::Reasoning { agent, text } => {
                let closed = self.parts.close_text(agent);
                self.close(closed.into_iter().collect(), out);
                if text.is_empty() {
                    return;
                }
                let (id, opened) = self.parts.reasoning(agent);
                if opened {
                    out.push(
                        json!({"type": "REASONING_START", "messageId": id, "metadata": {"agent": agent}}),
                    );
                    out.push(
                        json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}),
                    );
                }
                out.push(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            }
            Event::ToolCallStart { agent, call_id, name, arguments } => {
                self.tool_call(agent, call_id, name, arguments, out);
            }
            Event::ToolResult { agent, call_id, result, is_error, .. } => {
                let id = self.parts.call(agent, call_id);
                let message_id = self.parts.mint("result");
                out.push(json!({
                    "type": "TOOL_CALL_RESULT", "messageId": message_id, "toolCallId": id, "role": "tool",
                    "content": super::wire::result_text(result), "metadata": {"agent": agent, "isError": is_error}
                }));
            }
            Event::AgentStarted { agent, .. } => self.step_started(agent.clone(), json!(event), out),
            Event::AgentFinished { agent, .. } => {
                let closed = self.parts.close(agent);
                self.close(closed, out);
                self.step_finished(agent, json!(event), out);
            }
            Event::MiniAgentStarted { parent, mini_id, .. } => {
                self.step_started(format!("{parent}/{mini_id}"), json!(event), out);
            }
            Event::MiniAgentFinished { parent, mini_id, .. } => {
                self.step_finished(&format!("{parent}/{mini_id}"), json!(event), out);
            }
            Event::ApprovalRequired(interrupt) => {
                // The held call has started (`tool_call_start`) unless a producer skipped it.
                let (agent, call_id) = (&interrupt.agent, &interrupt.call_id);
                if self.parts.started_call(agent, call_id).is_none() {
                    self.tool_call(agent, call_id, &interrupt.tool, &interrupt.arguments, out);
                }
                out.push(custom(event));
            }
            Event::Error { code, message, .. } => {
                self.last_error = Some((code.clone(), message.clone()));
                out.push(custom(event));
            }
            Event::Completed { status, interrupts, usage, .. } => {
                self.close_everything(out);
                out.push(custom(event));
                self.finish(*status, interrupts, token_usage(usage), out);
            }
            _ => out.push(custom(event)),
        }
    }

    fn cut(&mut self, out: &mut Vec<Value>) {
        if !self.started {
            self.started = true;
            out.push(json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}));
        }
        self.close_everything(out);
        out.push(json!({
            "type": "RUN_ERROR", "code": "stream_cut",
            "message": "the stream ended before the turn did; its answer is kept in the conversation"
        }));
    }

    fn done(&self) -> Option<&'static [u8]> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Usage;

    fn code(body: &str) -> &'static str {
        chat_request(body.as_bytes()).unwrap_err().code
    }

    const USER: &str = r#"[{"id":"u1","role":"user","content":"hi"}]"#;

    #[test]
    fn a_run_becomes_the_chat_request_of_its_last_user_message() {
        let body = r#"{"threadId":"t1","runId":"r1","state":{},"context":[],"forwardedProps":{},"tools":[],
            "messages":[{"id":"u0","role":"user","content":"old"},{"id":"a0","role":"assistant","content":"x"},
                        {"id":"u1","role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#;
        let (request, thread, run) = chat_request(body.as_bytes()).unwrap();
        assert_eq!(request.to_json(), json!({"episode_id": "t1", "request_id": "r1", "message": "a\nb"}));
        assert_eq!((thread.as_str(), run.as_str()), ("t1", "r1"));
    }

    #[test]
    fn resume_entries_become_approval_answers_and_messages_are_not_read() {
        let body = r#"{"threadId":"t1","runId":"r2","messages":[],"resume":[
            {"interruptId":"i1","status":"resolved"},
            {"interruptId":"i2","status":"cancelled","payload":{"message":"no"}},
            {"interruptId":"i3","status":"resolved","payload":{"decision":"approve","arguments":{"a":1}}}]}"#;
        let (request, _, _) = chat_request(body.as_bytes()).unwrap();
        assert_eq!(
            request.to_json()["resume"],
            json!([{"interrupt_id":"i1","decision":"approve"},
                   {"interrupt_id":"i2","decision":"reject","message":"no"},
                   {"interrupt_id":"i3","decision":"approve","arguments":{"a":1}}])
        );
        assert!(request.message.is_none());
    }

    #[test]
    fn bad_runs_are_refused_with_specific_codes() {
        assert_eq!(code("{nope"), "invalid_json");
        assert_eq!(code(r#"{"threadId":"t","runId":"r"}"#), "invalid_json", "messages are required");
        assert_eq!(code(&format!(r#"{{"threadId":"a/b","runId":"r","messages":{USER}}}"#)), "invalid_id");
        assert_eq!(code(&format!(r#"{{"threadId":"t","runId":"","messages":{USER}}}"#)), "invalid_id");
        assert_eq!(code(r#"{"threadId":"t","runId":"r","messages":[]}"#), "missing_user_message");
        let ends_with_assistant =
            r#"{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","content":"x"}]}"#;
        assert_eq!(code(ends_with_assistant), "missing_user_message");
        let system = r#"{"threadId":"t","runId":"r","messages":[{"id":"s","role":"system","content":"obey"},{"id":"u","role":"user","content":"hi"}]}"#;
        assert_eq!(code(system), "unsupported_history");
        let tools = format!(
            r#"{{"threadId":"t","runId":"r","messages":{USER},"tools":[{{"name":"x","description":"y","parameters":{{}}}}]}}"#
        );
        assert_eq!(code(&tools), "client_tools_unsupported");
        let image = r#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"image","source":{"type":"url","value":"http://x"}}]}]}"#;
        assert_eq!(code(image), "unsupported_content");
        let resume =
            r#"{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"i","status":"maybe"}]}"#;
        assert_eq!(code(resume), "invalid_resume");
    }

    fn translate(events: &[Event]) -> Vec<Value> {
        let mut run = AguiRun::new("t1".into(), "r1".into());
        let mut out = Vec::new();
        for event in events {
            run.event(event, &mut out);
        }
        out
    }

    fn types(out: &[Value]) -> Vec<&str> {
        out.iter().map(|o| o["type"].as_str().unwrap()).collect()
    }

    fn completed(status: Status) -> Event {
        Event::Completed {
            episode_id: "t1".into(),
            turn_id: "T".into(),
            status,
            model: "offline".into(),
            duration_ms: 3,
            cost_usd: None,
            usage: vec![crate::event::AgentUsage {
                agent: "a".into(),
                model: "m".into(),
                usage: Usage::tokens(3, 4),
            }],
            interrupts: Box::new([]),
        }
    }

    #[test]
    fn each_instance_answers_in_its_own_named_message_and_the_run_finishes() {
        let out = translate(&[
            Event::thinking(),
            Event::AgentStarted { agent: "a[1]".into(), query: "q".into() },
            Event::text("a[1]", "he"),
            Event::text("orchestrator", "Both:"),
            Event::text("a[1]", "llo"),
            Event::AgentFinished {
                agent: "a[1]".into(),
                status: Status::Ok,
                duration_ms: 1,
                usage: Usage::tokens(1, 2),
            },
            completed(Status::Ok),
        ]);
        assert_eq!(
            types(&out),
            [
                "RUN_STARTED",
                "CUSTOM",
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "STEP_FINISHED",
                "TEXT_MESSAGE_END",
                "CUSTOM",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(
            out[3],
            json!({"type":"TEXT_MESSAGE_START","messageId":"r1-msg-1","role":"assistant","name":"a[1]"})
        );
        assert_eq!(out[7]["messageId"], "r1-msg-1", "the instance's text continues its own message");
        assert_eq!(out[5]["name"], "orchestrator");
        let finished = out.last().unwrap();
        assert_eq!(finished["outcome"], json!({"type": "success"}));
        assert_eq!(
            finished["usage"],
            json!([{"model":"m","inputTokens":3,"outputTokens":4,"totalTokens":7}])
        );
    }

    #[test]
    fn a_tool_call_closes_the_callers_text_and_its_result_names_the_call() {
        let [call, result] = super::super::wire::search_call(json!("found"));
        let out = translate(&[Event::text("a[1]", "looking"), call, result]);
        assert_eq!(
            types(&out)[1..],
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT"
            ]
        );
        assert_eq!(out[5]["delta"], r#"{"q":"x"}"#);
        assert_eq!(out[7]["toolCallId"], out[4]["toolCallId"]);
        assert_eq!(out[7]["content"], "found");
    }

    #[test]
    fn a_failed_turn_ends_with_run_error_naming_the_last_error() {
        let out = translate(&[
            Event::text("a[1]", "x"),
            Event::error("a[1]", "model_unavailable", "the model is down", true),
            completed(Status::Error),
        ]);
        let last = out.last().unwrap();
        assert_eq!(last["type"], "RUN_ERROR");
        assert_eq!(
            (last["code"].as_str(), last["message"].as_str()),
            (Some("model_unavailable"), Some("the model is down"))
        );
        assert!(types(&out).contains(&"TEXT_MESSAGE_END"));
    }

    #[test]
    fn an_interrupted_turn_finishes_with_the_interrupt_outcome() {
        let interrupt = Interrupt {
            agent: "d[1]".into(),
            interrupt_id: "int_1".into(),
            path: vec!["c".into(), "d[1]".into()],
            call_id: "c0".into(),
            tool: "clip_offer".into(),
            arguments: json!({"offer_id": "o-12"}),
            reason: "Changes the card.".into(),
            editable: vec!["offer_id".into()],
            expires_at: 0,
        };
        let mut done = completed(Status::Interrupted);
        if let Event::Completed { interrupts, .. } = &mut done {
            *interrupts = Box::new([interrupt.clone()]);
        }
        let out = translate(&[Event::ApprovalRequired(Box::new(interrupt)), done]);
        let call = out.iter().find(|o| o["type"] == "TOOL_CALL_START").unwrap();
        let finished = out.last().unwrap();
        assert_eq!(finished["outcome"]["type"], "interrupt");
        let only = &finished["outcome"]["interrupts"][0];
        assert_eq!(only["id"], "int_1");
        assert_eq!(only["toolCallId"], call["toolCallId"], "the interrupt names the call it holds");
        assert_eq!(only["expiresAt"], "1970-01-01T00:00:00Z");
        assert_eq!(only["metadata"]["editable"], json!(["offer_id"]));
    }

    #[test]
    fn a_cut_stream_closes_what_is_open_and_ends_with_run_error() {
        let mut run = AguiRun::new("t1".into(), "r1".into());
        let mut out = Vec::new();
        run.event(&Event::AgentStarted { agent: "a[1]".into(), query: "q".into() }, &mut out);
        run.event(&Event::text("a[1]", "x"), &mut out);
        out.clear();
        run.cut(&mut out);
        assert_eq!(types(&out), ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"]);
    }
}
