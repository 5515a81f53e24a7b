//! Agents: anything that turns an input into a stream of [`Event`]s.
//!
//! An in-process agent is an async stream; a remote one (a separately deployed Lambda) is a byte
//! stream decoded into the same events. The orchestrator does not know the difference.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::event::{Event, Status, Usage};
use crate::model::{ChatModel, ChatRequest, Message, ModelDelta};

/// The events of one agent run. Errors are in-band `error` events; the stream always ends.
pub type EventStream = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// What an agent is asked to do (serializable: remote agents receive it as JSON).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AgentRequest {
    /// The query, as the orchestrator (or its guards) phrased it.
    pub query: String,
    /// Context from earlier turns, filled when the user switches intent.
    pub prior_context: Option<String>,
    /// Cross-turn conversation history (for LLM agents).
    pub history: Vec<Message>,
    /// All arguments of the tool call that started the agent.
    pub arguments: serde_json::Value,
}

/// An agent. `run` returns at once; the work starts when the stream is polled and stops when it
/// is dropped.
pub trait Agent: Send + Sync {
    /// The agent's name (`support`, `shopping`); instances are `name[i]`.
    fn name(&self) -> &str;

    /// Runs one instance. Every event it emits names `instance` as its source.
    fn run(&self, request: AgentRequest, instance: String) -> EventStream;
}

impl<A: Agent + ?Sized> Agent for Arc<A> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        (**self).run(request, instance)
    }
}

/// An agent that answers with one model call: its instruction, the history, and the query.
pub struct ModelAgent {
    name: String,
    instruction: String,
    model: Arc<dyn ChatModel>,
}

impl ModelAgent {
    /// A new agent.
    pub fn new(
        name: impl Into<String>,
        instruction: impl Into<String>,
        model: Arc<dyn ChatModel>,
    ) -> ModelAgent {
        ModelAgent { name: name.into(), instruction: instruction.into(), model }
    }
}

impl Agent for ModelAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let mut messages = vec![Message::system(self.instruction.clone())];
        messages.extend(request.history);
        let query = match request.prior_context {
            Some(ctx) if !ctx.trim().is_empty() => {
                format!("Context from earlier: {ctx}\n\n{}", request.query)
            }
            _ => request.query,
        };
        messages.push(Message::user(query));
        let deltas = self.model.stream(ChatRequest { messages, ..Default::default() });
        model_events(instance, self.model.model_name().to_owned(), deltas)
    }
}

/// Maps a model's deltas to an agent's events; a model error becomes an `error` event and a short
/// apology the user can read.
pub fn model_events(instance: String, model: String, deltas: crate::model::DeltaStream) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut deltas = deltas;
        while let Some(delta) = deltas.next().await {
            match delta {
                Ok(ModelDelta::Text(text)) => yield Event::Text { agent: instance.clone(), text },
                Ok(ModelDelta::Reasoning(text)) => yield Event::Reasoning { agent: instance.clone(), text },
                Ok(ModelDelta::ResponseId(id)) => yield Event::ResponseId { agent: instance.clone(), id },
                Ok(ModelDelta::Usage(usage)) => {
                    yield Event::Usage { agent: instance.clone(), model: model.clone(), usage }
                }
                Ok(ModelDelta::ToolCallStart { .. } | ModelDelta::ToolCall(_) | ModelDelta::Finish(_)) => {}
                Err(e) => {
                    yield Event::error(instance.clone(), e.code(), e.to_string(), e.is_retryable());
                    yield Event::text(instance.clone(), "\n\nSorry, I couldn't finish that answer. Please try again.");
                    return;
                }
            }
        }
    })
}

/// Wraps an instance's events with `agent_started` first and `agent_finished` last (status from
/// its `error` events, usage summed from its `usage` events).
pub fn instrument(instance: String, query: String, inner: EventStream) -> EventStream {
    Box::pin(async_stream::stream! {
        let started = Instant::now();
        yield Event::AgentStarted { agent: instance.clone(), query };
        let mut usage = Usage::default();
        let mut status = Status::Ok;
        let mut inner = inner;
        while let Some(event) = inner.next().await {
            match &event {
                Event::Usage { usage: u, .. } => usage.add(*u),
                Event::Error { .. } => status = Status::Error,
                _ => {}
            }
            yield event;
        }
        yield Event::AgentFinished {
            agent: instance,
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            usage,
        };
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::scripted::{Part, Reply, ScriptedModel};

    #[tokio::test]
    async fn model_agent_streams_text_and_usage_under_its_instance_name() {
        let model = Arc::new(ScriptedModel::new("m", Some(Reply::text("two words").usage(7, 2))));
        let agent = ModelAgent::new("support", "be helpful", model.clone());
        let events: Vec<Event> = instrument(
            "support[1]".into(),
            "q".into(),
            agent.run(AgentRequest { query: "q".into(), ..Default::default() }, "support[1]".into()),
        )
        .collect()
        .await;
        assert!(matches!(&events[0], Event::AgentStarted { agent, .. } if agent == "support[1]"));
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Event::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "two words");
        assert!(events.iter().all(|e| e.agent().is_none_or(|a| a == "support[1]")));
        match events.last().unwrap() {
            Event::AgentFinished { status, usage, .. } => {
                assert_eq!(*status, Status::Ok);
                assert_eq!(*usage, Usage { input_tokens: 7, output_tokens: 2 });
            }
            other => panic!("last event {other:?}"),
        }
        assert_eq!(model.requests()[0].system_text(), "be helpful");
    }

    #[tokio::test]
    async fn model_failure_becomes_error_event_and_apology() {
        let model = Arc::new(ScriptedModel::new("m", Some(Reply::parts(vec![Part::Error("boom".into())]))));
        let agent = ModelAgent::new("shopping", "x", model);
        let events: Vec<Event> = instrument(
            "shopping[1]".into(),
            "q".into(),
            agent.run(AgentRequest::default(), "shopping[1]".into()),
        )
        .collect()
        .await;
        assert!(
            events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "model_stream_error"))
        );
        assert!(events.iter().any(|e| matches!(e, Event::Text { text, .. } if text.contains("Sorry"))));
        assert!(matches!(events.last(), Some(Event::AgentFinished { status: Status::Error, .. })));
    }
}
