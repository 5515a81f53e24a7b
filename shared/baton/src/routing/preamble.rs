//! What of the routing model's text the client sees while routing is undecided.

/// Streams text at once up to the end of its first sentence; for messages that are not smalltalk
/// holds the rest until routing is decided.
pub(super) struct PreambleGate {
    open: bool,
    first_sentence_done: bool,
    held: String,
}

impl PreambleGate {
    pub(super) fn new(smalltalk: bool) -> PreambleGate {
        PreambleGate { open: smalltalk, first_sentence_done: false, held: String::new() }
    }

    /// The part of `text` to show now.
    pub(super) fn push(&mut self, text: String) -> Option<String> {
        if self.open {
            return Some(text);
        }
        if self.first_sentence_done {
            self.held.push_str(&text);
            return None;
        }
        match text.find(['.', '!', '?', '\n']) {
            Some(end) => {
                self.first_sentence_done = true;
                let (shown, rest) = text.split_at(end + 1);
                self.held.push_str(rest);
                Some(shown.to_owned())
            }
            None => Some(text),
        }
    }

    pub(super) fn release(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}
