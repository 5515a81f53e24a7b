//! What an agent instance knows of the conversation it answers in: the earlier turns as model
//! messages, and the previous turn's message and replies by agent (what the routing guards read).
//! History ([`crate::history`]) fills it from the store; a turn hands it down to the instances
//! that see the conversation.

use crate::model::Message;

/// What the previous turn said, for routing.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreviousTurn {
    /// The user's message.
    pub user_message: String,
    /// The replies, by agent name (`support`, `shopping`, `orchestrator`).
    pub replies: Vec<PriorReply>,
}

/// One reply of the previous turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriorReply {
    /// Agent name without instance (`support`).
    pub agent: String,
    /// What it said.
    pub text: String,
}

impl PreviousTurn {
    /// What agent `agent` answered in the previous turn.
    pub fn reply_of(&self, agent: &str) -> Option<&str> {
        self.replies.iter().find(|r| r.agent == agent).map(|r| r.text.as_str())
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
