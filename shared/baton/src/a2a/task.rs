//! A Baton turn seen as an A2A task: `TaskView` follows a turn's events (live, or read back
//! from the turn log) and says what an A2A client sees of each, and what the task is so far.
//!
//! | Baton | A2A |
//! |---|---|
//! | the episode, the turn | `contextId`; the task id `<episode_id>/<turn_id>` |
//! | `thinking` | the task, `TASK_STATE_WORKING` (the stream's first item) |
//! | `text` of an instance | an `artifactUpdate` of the artifact named after the instance (`orchestrator`, `deals[1]`): the sub-agent attribution; `append` after its first chunk |
//! | `agent_started`, `agent_finished`, `tool_call_start`, `tool_call_end`, `error`, `choices`, `handoff` | a `statusUpdate` (`TASK_STATE_WORKING`) whose `metadata.baton` is the event |
//! | `approval_required` | kept; the end is `TASK_STATE_INPUT_REQUIRED` with the interrupts as a data part |
//! | `completed` | the last `statusUpdate`: `ok` → `COMPLETED`, `cancelled` → `CANCELED`, `interrupted` → `INPUT_REQUIRED`, others → `FAILED` (with the last error's message); `metadata.baton`: status, model, usage |
//! | `reasoning`, `usage`, `tool_result`, `response_id`, the rest | not sent (usage comes with the end) |

use serde_json::{Map, Value, json};

use super::types::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use crate::event::{Event, Status};

/// The task id of `turn_id` in `episode_id`.
pub(crate) fn task_id(episode_id: &str, turn_id: &str) -> String {
    format!("{episode_id}/{turn_id}")
}

/// The episode and turn a task id names, or `None` when it is not one of ours.
pub(crate) fn parse_task_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/').filter(|(e, t)| !e.is_empty() && !t.is_empty() && !t.contains('/'))
}

/// A turn as a task, built from its events in order.
#[derive(Debug, Clone)]
pub(crate) struct TaskView {
    task_id: String,
    context_id: String,
    state: TaskState,
    artifacts: Vec<Artifact>,
    last_error: Option<String>,
    interrupts: Vec<Value>,
    end: Option<Map<String, Value>>,
}

fn baton_meta(value: Value) -> Option<Map<String, Value>> {
    let mut map = Map::new();
    map.insert("baton".into(), value);
    Some(map)
}

impl TaskView {
    /// The task of `turn_id` in `episode_id`, before any event.
    pub(crate) fn new(episode_id: &str, turn_id: &str) -> TaskView {
        TaskView {
            task_id: task_id(episode_id, turn_id),
            context_id: episode_id.to_owned(),
            state: TaskState::Working,
            artifacts: Vec::new(),
            last_error: None,
            interrupts: Vec::new(),
            end: None,
        }
    }

    /// Whether the turn has ended (its `completed` was seen).
    pub(crate) fn ended(&self) -> bool {
        self.end.is_some()
    }

    /// The state so far.
    pub(crate) fn state(&self) -> TaskState {
        self.state
    }

    /// The task as it stands: its state and every artifact in full.
    pub(crate) fn task(&self) -> Task {
        Task {
            id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
            artifacts: self.artifacts.clone(),
            metadata: self.end.clone(),
        }
    }

    /// The task as a stream's first item: working, nothing produced yet.
    pub(crate) fn first(&self) -> StreamResponse {
        let status = TaskStatus { state: TaskState::Working, message: None, timestamp: None };
        StreamResponse::Task(Task {
            id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status,
            artifacts: Vec::new(),
            metadata: None,
        })
    }

    fn status(&self) -> TaskStatus {
        let message = |parts: Vec<Part>| Message {
            message_id: format!("{}/status", self.task_id),
            context_id: Some(self.context_id.clone()),
            task_id: Some(self.task_id.clone()),
            role: Role::Agent,
            parts,
            metadata: None,
        };
        let message = match self.state {
            TaskState::InputRequired => Some(message(vec![
                Part::text("A tool call waits for a person's approval."),
                Part::data(json!({"interrupts": self.interrupts})),
            ])),
            TaskState::Failed => self.last_error.clone().map(|e| message(vec![Part::text(e)])),
            _ => None,
        };
        TaskStatus { state: self.state, message, timestamp: None }
    }

    fn status_update(&self, metadata: Option<Map<String, Value>>) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
            metadata,
        })
    }

    /// Takes in the next event; returns what a streaming client sees of it (nothing, or one item).
    pub(crate) fn apply(&mut self, event: &Event) -> Option<StreamResponse> {
        match event {
            Event::Text { agent, text } => {
                let append = match self.artifacts.iter_mut().find(|a| a.artifact_id == *agent) {
                    Some(artifact) => {
                        match artifact.parts.first_mut().and_then(|p| p.text.as_mut()) {
                            Some(all) => all.push_str(text),
                            None => artifact.parts.push(Part::text(text.clone())),
                        }
                        true
                    }
                    None => {
                        self.artifacts.push(Artifact {
                            artifact_id: agent.clone(),
                            name: Some(agent.clone()),
                            parts: vec![Part::text(text.clone())],
                            metadata: baton_meta(json!({"agent": agent})),
                        });
                        false
                    }
                };
                Some(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                    task_id: self.task_id.clone(),
                    context_id: self.context_id.clone(),
                    artifact: Artifact {
                        artifact_id: agent.clone(),
                        name: Some(agent.clone()),
                        parts: vec![Part::text(text.clone())],
                        metadata: baton_meta(json!({"agent": agent})),
                    },
                    append,
                    last_chunk: false,
                }))
            }
            Event::Error { message, .. } => {
                self.last_error = Some(message.clone());
                Some(self.status_update(baton_meta(serde_json::to_value(event).ok()?)))
            }
            Event::ApprovalRequired(interrupt) => {
                self.interrupts.push(serde_json::to_value(interrupt).ok()?);
                Some(self.status_update(baton_meta(serde_json::to_value(event).ok()?)))
            }
            Event::AgentStarted { .. }
            | Event::AgentFinished { .. }
            | Event::ToolCallStart { .. }
            | Event::ToolCallEnd { .. }
            | Event::Choices { .. }
            | Event::Handoff { .. } => {
                Some(self.status_update(baton_meta(serde_json::to_value(event).ok()?)))
            }
            Event::Completed { status, model, usage, interrupts, cost_usd, .. } => {
                self.state = state_of(*status);
                if !interrupts.is_empty() {
                    self.interrupts =
                        interrupts.iter().filter_map(|i| serde_json::to_value(i).ok()).collect();
                }
                if self.state == TaskState::Failed && self.last_error.is_none() {
                    self.last_error = Some(format!("the turn ended with status {}", status.as_str()));
                }
                let mut end = json!({"status": status.as_str(), "model": model, "usage": usage});
                if let Some(cost) = cost_usd {
                    end["cost_usd"] = json!(cost);
                }
                self.end = baton_meta(end);
                Some(self.status_update(self.end.clone()))
            }
            _ => None,
        }
    }

    /// The end of a turn that will not say more (its producer died, or its log ended without
    /// `completed`): failed.
    pub(crate) fn abandon(&mut self) {
        if !self.ended() {
            self.state = TaskState::Failed;
            self.last_error = Some("the turn ended without finishing".into());
            self.end = baton_meta(json!({"status": Status::Abandoned.as_str()}));
        }
    }
}

/// The task state of a turn that ended with `status`.
pub(crate) fn state_of(status: Status) -> TaskState {
    match status {
        Status::Ok => TaskState::Completed,
        Status::Cancelled => TaskState::Canceled,
        Status::Interrupted => TaskState::InputRequired,
        Status::Partial | Status::Error | Status::Abandoned => TaskState::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(status: Status) -> Event {
        Event::Completed {
            episode_id: "e".into(),
            turn_id: "t".into(),
            status,
            model: "offline".into(),
            duration_ms: 1,
            cost_usd: None,
            usage: Vec::new(),
            interrupts: Box::new([]),
        }
    }

    #[test]
    fn text_becomes_one_artifact_per_instance_appended_after_its_first_chunk() {
        let mut view = TaskView::new("e", "t");
        let items: Vec<Value> = [
            Event::text("orchestrator", "Looking. "),
            Event::text("deals[1]", "Two deals"),
            Event::text("deals[1]", " today."),
            completed(Status::Ok),
        ]
        .iter()
        .filter_map(|e| view.apply(e))
        .map(|i| serde_json::to_value(i).unwrap())
        .collect();
        assert_eq!(items[1]["artifactUpdate"]["artifact"]["artifactId"], "deals[1]");
        assert_eq!(items[1]["artifactUpdate"].get("append"), None, "a new artifact");
        assert_eq!(items[2]["artifactUpdate"]["append"], true);
        assert_eq!(items[2]["artifactUpdate"]["artifact"]["metadata"]["baton"]["agent"], "deals[1]");
        assert_eq!(items[3]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
        let task = view.task();
        assert_eq!(task.id, "e/t");
        assert_eq!(task.artifacts[1].parts[0].text.as_deref(), Some("Two deals today."));
    }

    #[test]
    fn each_end_status_has_its_state_and_a_failure_says_why() {
        for (status, state) in [
            (Status::Ok, TaskState::Completed),
            (Status::Cancelled, TaskState::Canceled),
            (Status::Interrupted, TaskState::InputRequired),
            (Status::Partial, TaskState::Failed),
            (Status::Error, TaskState::Failed),
        ] {
            let mut view = TaskView::new("e", "t");
            view.apply(&Event::error("orchestrator", "model_failed", "the model failed", true));
            view.apply(&completed(status));
            assert_eq!(view.task().status.state, state, "{status:?}");
        }
        let mut view = TaskView::new("e", "t");
        view.apply(&Event::error("orchestrator", "model_failed", "the model failed", true));
        view.apply(&completed(Status::Error));
        let message = view.task().status.message.unwrap();
        assert_eq!(message.text(), "the model failed");
    }

    #[test]
    fn task_ids_name_the_episode_and_the_turn() {
        assert_eq!(parse_task_id(&task_id("ep-1", "0193")), Some(("ep-1", "0193")));
        for bad in ["", "ep", "/t", "e/", "e/t/x"] {
            assert_eq!(parse_task_id(bad), None, "{bad:?}");
        }
    }
}
