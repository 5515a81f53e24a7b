//! The words of a message: tokenizing, topic (content) words, comparison, and whether a message
//! is smalltalk. The routing policy, its guards, the offline model and the routing evaluation
//! read messages through these functions; this module depends on nothing else in the crate.

/// The kinds of message the fastpath may answer directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Smalltalk {
    /// "hi", "good morning".
    Greeting,
    /// "thanks", "ok got it".
    Acknowledgement,
    /// "how are you", "who are you".
    Chitchat,
}

const GREETING: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "hiya",
    "howdy",
    "yo",
    "greetings",
    "good",
    "morning",
    "afternoon",
    "evening",
    "there",
    "again",
];
const ACK: &[&str] = &[
    "thanks", "thank", "you", "ty", "thx", "ok", "okay", "k", "great", "cool", "got", "it", "perfect",
    "awesome", "nice", "sounds", "good", "alright", "sure", "bye", "goodbye", "cheers", "so", "much", "that",
    "helps", "helped", "makes", "sense", "will", "do", "see", "ya", "later",
];
const CHITCHAT: &[&[&str]] = &[
    &["how", "are", "you"],
    &["how", "are", "you", "doing"],
    &["how's", "it", "going"],
    &["hows", "it", "going"],
    &["what's", "up"],
    &["whats", "up"],
    &["who", "are", "you"],
    &["what", "are", "you"],
    &["what", "can", "you", "do"],
    &["are", "you", "a", "bot"],
    &["are", "you", "human"],
];

/// Lowercased words of `text`, punctuation trimmed (apostrophes kept).
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '-' || c == '/')
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether `text` is a greeting, an acknowledgement or chitchat, and nothing else.
pub fn classify_smalltalk(text: &str) -> Option<Smalltalk> {
    let words = words(text);
    if words.is_empty() || words.len() > 8 {
        return None;
    }
    let all_in = |set: &[&str]| words.iter().all(|w| set.contains(&w.as_str()));
    if all_in(GREETING) && words.iter().any(|w| w != "good" && w != "there" && w != "again") {
        return Some(Smalltalk::Greeting);
    }
    if all_in(ACK) {
        return Some(Smalltalk::Acknowledgement);
    }
    // A greeting may lead into chitchat: "hi, how are you?"
    let rest: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| GREETING.contains(w))
        .filter(|w| *w != "today" && *w != "there")
        .collect();
    if CHITCHAT.contains(&rest.as_slice()) {
        return Some(Smalltalk::Chitchat);
    }
    None
}

/// Words that carry no topic: they never count as overlap.
const STOPWORDS: &[&str] = &[
    "a", "about", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "didn't", "do", "does", "doesn't", "don't", "for", "from", "get", "got", "had", "has",
    "have", "how", "i", "i'm", "i've", "if", "in", "is", "isn't", "it", "it's", "its", "just", "me", "my",
    "no", "not", "of", "on", "or", "our", "please", "so", "some", "that", "the", "their", "them", "then",
    "there", "these", "this", "to", "too", "up", "us", "was", "wasn't", "we", "what", "when", "where",
    "which", "who", "why", "will", "with", "would", "you", "your", "yes", "hi", "hello", "hey", "thanks",
    "find", "show", "tell", "want", "need", "help", "any", "all", "out", "still", "yet",
];

/// The topic words of `text`: lowercased, stopwords removed, a plural `s` trimmed.
pub fn content_words(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| {
            let w = w.trim_end_matches("'s").to_owned();
            if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w[..w.len() - 1].to_owned()
            } else {
                w
            }
        })
        .collect()
}

/// Whether two texts share a topic word.
pub fn overlaps(a: &str, b: &str) -> bool {
    let b = content_words(b);
    content_words(a).iter().any(|w| b.contains(w))
}

/// Lowercase, single-spaced, without surrounding punctuation: for comparing queries.
pub fn normalize(text: &str) -> String {
    words(text).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smalltalk_is_recognised() {
        assert_eq!(classify_smalltalk("Hi!"), Some(Smalltalk::Greeting));
        assert_eq!(classify_smalltalk("good morning"), Some(Smalltalk::Greeting));
        assert_eq!(classify_smalltalk("thanks so much"), Some(Smalltalk::Acknowledgement));
        assert_eq!(classify_smalltalk("ok got it"), Some(Smalltalk::Acknowledgement));
        assert_eq!(classify_smalltalk("hey, how are you today?"), Some(Smalltalk::Chitchat));
    }

    #[test]
    fn real_questions_are_not_smalltalk() {
        assert_eq!(classify_smalltalk("hi, my receipt didn't scan"), None);
        assert_eq!(classify_smalltalk("good coffee deals?"), None);
        assert_eq!(classify_smalltalk("thanks, where are my points"), None);
        assert_eq!(classify_smalltalk(""), None);
        assert_eq!(classify_smalltalk("points"), None);
        assert_eq!(classify_smalltalk("hello, find me deals"), None);
    }

    #[test]
    fn content_words_drop_stopwords_and_plurals() {
        assert_eq!(content_words("Where are my Points?"), ["point"]);
        assert!(overlaps("coffee deals", "find me coffee deals and check my receipt"));
        assert!(!overlaps("help me", "where are my points"));
    }
}
