//! The words of a message: tokenizing, topic (content) words, clauses, comparison, and whether a
//! message is smalltalk. The routing policy, its guards, the offline model and the routing
//! evaluation read messages through these functions; this module depends on nothing else in the
//! crate.
//!
//! - **Content words** are a message's words less the stopwords of the languages the app's users
//!   write in (the NLTK lists of English, Spanish, French, Portuguese, German and Italian, from the
//!   `stop-words` crate) and a few request words ("find", "show", "please"), each reduced to its
//!   Snowball stem, so "scanned" meets "scan" and "points" meets "point". (An English word that is a
//!   stopword in another of the languages, such as "hat" or "son", does not count as a topic word.)
//! - **Smalltalk** ([`Lexicon`], in `text/smalltalk.rs`) is recognised by type: a message is smalltalk when it is made
//!   only of greetings, thanks, acknowledgements, goodbyes, chitchat and compliments, composed
//!   from small word classes, and of emoji that are faces, hands or hearts. Any other word ("hi,
//!   where are my points?") makes the whole message a real request, unless a second, learned
//!   reading finds it reads as smalltalk and nothing in the message asks for anything ("heyy bot,
//!   I am great"; `text/smalltalk/learned.rs`).

mod smalltalk;

use std::collections::HashSet;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

pub use smalltalk::{Lexicon, SmalltalkLists};
pub(crate) use smalltalk::{Smalltalk, classify_smalltalk};

fn is_clause_break(c: char) -> bool {
    matches!(c, '.' | ',' | '!' | '?' | ';' | ':' | '\n' | '¿' | '¡' | '…')
}

/// Lowercase, accents removed, typographic apostrophes made plain.
fn fold(word: &str) -> String {
    word.to_lowercase().replace('’', "'").nfd().filter(|c| !is_combining_mark(*c)).collect()
}

/// Lowercased words of `text`, punctuation trimmed (apostrophes kept).
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '-' || c == '/')
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’').to_lowercase())
        .map(|w| w.trim_matches(['\'', '’']).to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The languages whose stopwords never count as topic words.
const STOPWORD_LANGUAGES: [&str; 6] = ["en", "es", "fr", "pt", "de", "it"];

/// Words that say that the user asks, not what about.
const REQUEST_WORDS: &[&str] = &[
    "also", "can't", "could", "would", "please", "get", "got", "find", "show", "tell", "want", "need",
    "help", "yes", "hi", "hello", "hey", "thanks", "still", "yet", "us", "let", "let's", "anything",
];

static STOPWORDS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    STOPWORD_LANGUAGES
        .iter()
        .flat_map(|l| stop_words::get(l).iter())
        .chain(REQUEST_WORDS)
        .map(|w| fold(w))
        .collect()
});

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// The topic words of `text`: stopwords removed, each word reduced to its stem.
pub fn content_words(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .map(|w| fold(&w))
        .filter(|w| !STOPWORDS.contains(w))
        .map(|w| {
            let w = w.strip_suffix("'s").unwrap_or(&w);
            STEMMER.stem(w).into_owned()
        })
        .collect()
}

/// Whether two texts share a topic word.
pub fn overlaps(a: &str, b: &str) -> bool {
    shared_words(a, b) > 0
}

/// How many of `a`'s topic words `b` has too.
pub(crate) fn shared_words(a: &str, b: &str) -> usize {
    TopicWords::of(a).shared_with(&TopicWords::of(b))
}

/// A text's topic words ([`content_words`]), computed once to compare with several others: the
/// routing guards hold the user's message's and each clause's, where stemming them again for
/// every comparison was most of the guards' time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TopicWords(Vec<String>);

impl TopicWords {
    /// The topic words of `text`.
    pub(crate) fn of(text: &str) -> TopicWords {
        TopicWords(content_words(text))
    }

    /// How many of these words `other` has too (a repeated word counts each time).
    pub(crate) fn shared_with(&self, other: &TopicWords) -> usize {
        self.0.iter().filter(|w| other.0.contains(w)).count()
    }

    /// Whether the two share a word.
    pub(crate) fn overlaps(&self, other: &TopicWords) -> bool {
        self.0.iter().any(|w| other.0.contains(w))
    }

    /// Whether there are words and `other` has every one of them.
    pub(crate) fn all_in(&self, other: &TopicWords) -> bool {
        !self.0.is_empty() && self.0.iter().all(|w| other.0.contains(w))
    }
}

/// Words that join two requests in one message, in the languages of the stopword lists.
const CONJUNCTIONS: &[&str] =
    &["and", "also", "plus", "y", "tambien", "ademas", "et", "aussi", "e", "und", "auch", "ed", "anche"];

/// The clauses of `text`, in order: the message cut at sentence punctuation, commas, semicolons
/// and colons, and at conjunctions ("and", "also", "y", "et", "und"…), each trimmed; a clause is
/// a slice of `text`, so it keeps the user's exact words.
pub(crate) fn clauses(text: &str) -> Vec<&str> {
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut word_start: Option<usize> = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        let boundary = c.is_whitespace() || is_clause_break(c);
        if boundary {
            if let Some(start) = word_start.take() {
                if CONJUNCTIONS.contains(&fold(&text[start..i]).as_str()) {
                    cuts.push((start, i));
                }
            }
            if is_clause_break(c) {
                cuts.push((i, i + c.len_utf8()));
            }
        } else if word_start.is_none() {
            word_start = Some(i);
        }
    }
    let mut out = Vec::new();
    let mut from = 0;
    for (start, end) in cuts.into_iter().chain([(text.len(), text.len())]) {
        let clause = text[from..start].trim();
        if !clause.is_empty() {
            out.push(clause);
        }
        from = end;
    }
    out
}

/// Lowercase, single-spaced, without surrounding punctuation: for comparing queries.
pub fn normalize(text: &str) -> String {
    words(text).join(" ")
}

/// Which of the offered options (`labels`, in order) `reply` picks: its number from 1 (`2`, `2.`,
/// `2)`) or its label, any case, trimmed. `None` when it picks none: then it is an ordinary
/// message.
pub fn picked_option<'a>(labels: impl IntoIterator<Item = &'a str>, reply: &str) -> Option<usize> {
    let reply = reply.trim();
    let number = reply.trim_end_matches(['.', ')']).trim().parse::<usize>().ok();
    let mut by_label = None;
    let mut count = 0;
    for (i, label) in labels.into_iter().enumerate() {
        count = i + 1;
        if by_label.is_none() && !reply.is_empty() && label.trim().to_lowercase() == reply.to_lowercase() {
            by_label = Some(i);
        }
    }
    match number {
        Some(n) if (1..=count).contains(&n) => Some(n - 1),
        _ => by_label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_is_picked_by_number_or_label_and_nothing_else_picks() {
        let labels = ["Visa", "Store card"];
        assert_eq!(picked_option(labels, "2"), Some(1));
        assert_eq!(picked_option(labels, " 1. "), Some(0));
        assert_eq!(picked_option(labels, "2)"), Some(1));
        assert_eq!(picked_option(labels, "STORE CARD"), Some(1));
        assert_eq!(picked_option(labels, "3"), None, "past the last option");
        assert_eq!(picked_option(labels, "0"), None);
        assert_eq!(picked_option(labels, "store"), None, "part of a label is no pick");
        assert_eq!(picked_option(labels, ""), None);
        assert_eq!(picked_option([], "1"), None);
    }

    /// Whether `part` has topic words and every one of them is `message`'s (allowing inflection).
    fn is_users_words(part: &str, message: &str) -> bool {
        TopicWords::of(part).all_in(&TopicWords::of(message))
    }

    #[test]
    fn topic_words_compare_as_the_text_functions_do() {
        let said = TopicWords::of("my receipts didn't scan and find coffee deals");
        let part = TopicWords::of("the receipt was not scanned");
        assert!(part.all_in(&said) && part.overlaps(&said));
        assert_eq!(part.shared_with(&said), 2);
        assert!(!TopicWords::of("where are my points").all_in(&said));
        assert!(!TopicWords::of("hello there").all_in(&said), "no topic words is not the user's words");
        assert_eq!(shared_words("coffee deals", "find me coffee deals"), 2);
        assert!(is_users_words("coffee deal", "find me coffee deals"));
        assert!(!overlaps("points", "coffee deals"));
    }

    #[test]
    fn content_words_drop_stopwords_and_inflection() {
        assert_eq!(content_words("Where are my Points?"), ["point"]);
        assert_eq!(content_words("my receipt didn't scan"), ["receipt", "scan"]);
        assert_eq!(content_words("the receipts were scanned"), ["receipt", "scan"]);
        assert!(content_words("dónde están mis puntos").contains(&"punto".to_owned()));
        assert!(overlaps("coffee deals", "find me coffee deals and check my receipt"));
        assert!(!overlaps("help me", "where are my points"));
        assert!(!overlaps("they were never there", "where were my points"), "stopwords only");
    }

    #[test]
    fn users_words_allow_inflection_but_no_new_word() {
        let msg = "my receipts never scanned and find me coffee deals";
        assert!(is_users_words("receipt didn't scan", msg));
        assert!(is_users_words("coffee deal", msg));
        assert!(!is_users_words("points were never credited", msg));
        assert!(!is_users_words("the", msg), "no topic word at all");
    }

    #[test]
    fn clauses_split_on_punctuation_and_conjunctions() {
        assert_eq!(
            clauses("My e-receipt is missing. Also, any offers on yogurt?"),
            ["My e-receipt is missing", "any offers on yogurt"]
        );
        assert_eq!(
            clauses("my receipt didn't scan and find me coffee deals"),
            ["my receipt didn't scan", "find me coffee deals"]
        );
        assert_eq!(clauses("mis puntos y ofertas de café"), ["mis puntos", "ofertas de café"]);
        assert_eq!(clauses("Brandy and Andes mints"), ["Brandy", "Andes mints"]);
        assert!(clauses(" , and .").is_empty());
    }
}
