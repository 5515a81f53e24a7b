//! The A2A v1.0 objects Baton reads and writes, in their JSON form (ProtoJSON of
//! `specification/a2a.proto`: camelCase fields, enums by their proto names), and the JSON-RPC
//! 2.0 envelope of the JSON-RPC binding.
//!
//! Only the fields Baton uses are typed; unknown fields are ignored when read (the spec asks
//! for that), and nothing Baton writes carries a field the proto does not define, so the
//! official SDKs' strict ProtoJSON parsers accept it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version Baton speaks (`A2A-Version`, `protocolVersion`).
pub(crate) const PROTOCOL_VERSION: &str = "1.0";
/// The header a client names its protocol version in.
pub(crate) const VERSION_HEADER: &str = "a2a-version";
/// Where an agent's card is served, relative to its host.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The binding Baton serves and calls.
pub(crate) const JSONRPC_BINDING: &str = "JSONRPC";

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
    /// Not set (or a value this version does not know).
    #[serde(rename = "ROLE_UNSPECIFIED", other)]
    Unspecified,
}

/// One piece of a message or an artifact: text, structured data, or a file by URL or bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// A file by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file's bytes (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The part's media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Extra facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Part {
    /// A text part.
    pub(crate) fn text(text: impl Into<String>) -> Part {
        Part { text: Some(text.into()), ..Part::default() }
    }

    /// A structured part.
    pub(crate) fn data(data: Value) -> Part {
        Part { data: Some(data), ..Part::default() }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Message {
    /// Its id, chosen by its writer.
    #[serde(default)]
    pub message_id: String,
    /// The conversation (Baton: the episode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Extra facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Message {
    /// Its text parts, joined.
    pub(crate) fn text(&self) -> String {
        self.parts.iter().filter_map(|p| p.text.as_deref()).collect()
    }
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum TaskState {
    /// Received, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Done.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Failed.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Stopped by a cancel.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waiting for the client's input.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused by the agent.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waiting for credentials.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
    /// Not set (or a value this version does not know).
    #[serde(rename = "TASK_STATE_UNSPECIFIED", other)]
    Unspecified,
}

impl TaskState {
    /// Whether the task can change no more.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
    }

    /// Whether the task waits for its client (a stream ends there too).
    pub(crate) fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// A task's state, with an optional message from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says about it (a question, a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When it was set (ISO 8601, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Artifact {
    /// Its id in the task.
    #[serde(default)]
    pub artifact_id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Extra facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A unit of work and what it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Task {
    /// Its id (server-chosen).
    pub id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// Its state.
    pub status: TaskStatus,
    /// What it produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// Extra facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A task's state changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The new status.
    pub status: TaskStatus,
    /// Extra facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A chunk of a task's artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The chunk, under the artifact's id.
    pub artifact: Artifact,
    /// Whether the parts add to the artifact's earlier ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Whether this is the artifact's last chunk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
}

/// One item of a stream (`SendStreamingMessage`, `SubscribeToTask`), also the result of
/// `SendMessage` (a task or a message): exactly one member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum StreamResponse {
    /// A task (first in a task's stream).
    Task(Task),
    /// A direct answer, without a task.
    Message(Message),
    /// A state change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact chunk.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// How `SendMessage` should answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendMessageConfiguration {
    /// Answer at once with the working task instead of waiting for its end.
    #[serde(default)]
    pub return_immediately: bool,
}

/// The params of `SendMessage` and `SendStreamingMessage`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendMessageRequest {
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
    /// The request's metadata: Baton reads `on_busy` there (or in the message's).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// The params of `GetTask`, `CancelTask` and `SubscribeToTask`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskIdParams {
    /// The task.
    pub id: String,
}

/// One way to reach an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentInterface {
    /// Its URL.
    pub url: String,
    /// `JSONRPC`, `GRPC`, `HTTP+JSON`.
    pub protocol_binding: String,
    /// `1.0`.
    #[serde(default)]
    pub protocol_version: String,
}

/// What an agent can do beyond the basics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentCapabilities {
    /// `SendStreamingMessage` and `SubscribeToTask`.
    #[serde(default)]
    pub streaming: bool,
    /// Push notifications.
    #[serde(default)]
    pub push_notifications: bool,
}

/// A skill on a card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// An agent's self-description at [`CARD_PATH`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentCard {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// How to reach it, preferred first.
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// Its capabilities.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// Security schemes by name (ProtoJSON `SecurityScheme` objects).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub security_schemes: Map<String, Value>,
    /// Which schemes a request must satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<Value>,
    /// Media types it reads.
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    /// Media types it writes.
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    /// Its skills.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
}

impl AgentCard {
    /// The first JSON-RPC interface of protocol version 1.x, the one Baton calls.
    pub(crate) fn jsonrpc_v1(&self) -> Option<&AgentInterface> {
        self.supported_interfaces.iter().find(|i| {
            i.protocol_binding.eq_ignore_ascii_case(JSONRPC_BINDING)
                && (i.protocol_version == "1" || i.protocol_version.starts_with("1."))
        })
    }
}

/// A JSON-RPC 2.0 request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct RpcRequest {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// Its id (string or number), echoed in the answer.
    #[serde(default)]
    pub id: Value,
    /// The method.
    pub method: String,
    /// The params.
    #[serde(default)]
    pub params: Value,
}

/// A JSON-RPC 2.0 error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RpcError {
    /// The code (A2A's from -32001, JSON-RPC's own from -32700).
    pub code: i64,
    /// What went wrong.
    pub message: String,
}

/// JSON-RPC and A2A error codes (spec §5.4 and §9.5).
pub(crate) mod codes {
    /// The body is not JSON.
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// Not a JSON-RPC 2.0 request.
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are wrong.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// The server failed.
    pub(crate) const INTERNAL: i64 = -32603;
    /// No such task (or not the caller's).
    pub(crate) const TASK_NOT_FOUND: i64 = -32001;
    /// The task cannot be cancelled (it has ended).
    pub(crate) const TASK_NOT_CANCELABLE: i64 = -32002;
    /// Push notifications are not supported.
    pub(crate) const PUSH_NOT_SUPPORTED: i64 = -32003;
    /// The operation is not supported.
    pub(crate) const UNSUPPORTED_OPERATION: i64 = -32004;
    /// A part's media type is not supported.
    pub(crate) const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    /// The protocol version is not supported.
    pub(crate) const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// A JSON-RPC success answer.
pub(crate) fn rpc_result(id: &Value, result: impl Serialize) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error answer.
pub(crate) fn rpc_error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": RpcError { code, message: message.into() }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stream_item_is_one_camel_case_member_with_proto_enum_names() {
        let item = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus { state: TaskState::InputRequired, message: None, timestamp: None },
            metadata: None,
        });
        assert_eq!(
            serde_json::to_value(&item).unwrap(),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})
        );
        let chunk = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "a".into(),
                name: None,
                parts: vec![Part::text("hi")],
                metadata: None,
            },
            append: true,
            last_chunk: false,
        });
        assert_eq!(
            serde_json::to_value(&chunk).unwrap(),
            json!({"artifactUpdate": {"taskId": "t", "contextId": "c", "append": true,
                   "artifact": {"artifactId": "a", "parts": [{"text": "hi"}]}}})
        );
    }

    #[test]
    fn unknown_enum_values_and_fields_are_read_and_unknown_kinds_are_not() {
        let message: Message = serde_json::from_value(
            json!({"messageId": "m", "role": "ROLE_ROBOT", "parts": [{"text": "a", "x": 1}]}),
        )
        .unwrap();
        assert_eq!(message.role, Role::Unspecified);
        assert_eq!(message.text(), "a");
        let status: TaskStatus = serde_json::from_value(json!({"state": "TASK_STATE_PAUSED"})).unwrap();
        assert_eq!(status.state, TaskState::Unspecified);
        assert!(serde_json::from_value::<StreamResponse>(json!({"progressUpdate": {}})).is_err());
    }

    #[test]
    fn the_card_names_its_v1_json_rpc_interface() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "n", "supportedInterfaces": [
                {"url": "g:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "http://new", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}))
        .unwrap();
        assert_eq!(card.jsonrpc_v1().unwrap().url, "http://new");
    }
}
