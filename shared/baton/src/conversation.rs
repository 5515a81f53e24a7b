//! What an agent instance knows of the conversation it answers in: the earlier turns as model
//! messages, and the previous turn's message and replies by agent (what the routing guards read).
//! The turn's history (the `history` module) fills it from the store; a turn hands it down to the instances
//! that see the conversation.

use crate::model::Message;

/// What the previous turn said, for routing.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreviousTurn {
    /// The user's message.
    pub user_message: String,
    /// The replies, by agent name (`billing`, `search`, `orchestrator`).
    pub replies: Vec<PriorReply>,
}

/// One reply of the previous turn.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriorReply {
    /// Agent name without instance (`billing`).
    pub agent: String,
    /// What it said.
    pub text: String,
    /// The labels of the options it offered the user to pick from (a `choices` event), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl PreviousTurn {
    /// What agent `agent` answered in the previous turn.
    pub fn reply_of(&self, agent: &str) -> Option<&str> {
        self.replies.iter().find(|r| r.agent == agent).map(|r| r.text.as_str())
    }

    /// The options agent `agent` offered in the previous turn (labels, in order).
    pub fn options_of(&self, agent: &str) -> &[String] {
        self.replies.iter().find(|r| r.agent == agent).map_or(&[], |r| r.options.as_slice())
    }
}

/// The conversation around one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// Earlier turns, oldest first.
    pub history: Vec<Message>,
    /// The previous turn, if any.
    pub previous: Option<PreviousTurn>,
}
