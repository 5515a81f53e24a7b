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
//! - **Smalltalk** is judged per clause: a message is smalltalk when every clause is made only of
//!   greetings, acknowledgements, chitchat phrases and their fillers ([`Lexicon`]), or only of emoji
//!   (by their Unicode `Emoji` property) and punctuation. One clause with other words ("hi, where
//!   are my points?") makes the whole message a real request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, OnceLock};

use rust_stemmers::{Algorithm, Stemmer};
use serde::Deserialize;
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;
use unicode_properties::{GeneralCategoryGroup, UnicodeEmoji, UnicodeGeneralCategory};

/// The kinds of message the fastpath may answer directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Smalltalk {
    /// "hi", "good morning", "hola".
    Greeting,
    /// "thanks", "ok got it", "merci", or emoji and punctuation only ("👍", "🙏").
    Acknowledgement,
    /// "how are you", "who are you", "¿qué tal?".
    Chitchat,
}

/// Smalltalk phrases by class, as the default lists (`data/routing/smalltalk.yaml`, one entry
/// per language) and the configuration's `routing.smalltalk` give them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmalltalkLists {
    /// Greetings ("hi", "buenos días").
    #[serde(default)]
    pub greetings: Vec<String>,
    /// Thanks and acknowledgements ("thanks", "d'accord").
    #[serde(default)]
    pub acknowledgements: Vec<String>,
    /// Chitchat ("how are you", "wie geht's").
    #[serde(default)]
    pub chitchat: Vec<String>,
    /// Words that go with smalltalk but are never smalltalk alone ("there", "so much").
    #[serde(default)]
    pub fillers: Vec<String>,
}

/// The default smalltalk lists, per language.
pub const DEFAULT_SMALLTALK: &str = include_str!("../../../data/routing/smalltalk.yaml");

/// The longest message judged smalltalk, in words.
const SMALLTALK_MAX_WORDS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Talk(Smalltalk),
    Filler,
}

/// The smalltalk phrases a message is checked against, by their first word. The default is the
/// default lists ([`Lexicon::reference`]); with a configuration's own lists
/// ([`Lexicon::with_defaults`]), those folded into the defaults. Either is built on first use
/// rather than when a router is built, so start-up does not pay for folding every language's
/// phrases.
#[derive(Debug, Clone, Default)]
pub struct Lexicon {
    phrases: LexiconPhrases,
}

#[derive(Debug, Clone, Default)]
enum LexiconPhrases {
    /// The reference lists.
    #[default]
    Reference,
    /// Phrases known when the lexicon is made.
    Built(Phrases),
    /// The default lists and these, folded on first use.
    WithDefaults(Arc<(SmalltalkLists, OnceLock<Phrases>)>),
}

type Phrases = HashMap<String, Vec<(Vec<String>, Kind)>>;

static REFERENCE_LEXICON: LazyLock<Lexicon> =
    LazyLock::new(|| Lexicon::new(default_lists().values()).expect("data/routing/smalltalk.yaml is valid"));

/// The default lists by language.
fn default_lists() -> std::collections::BTreeMap<String, SmalltalkLists> {
    serde_yaml_ng::from_str(DEFAULT_SMALLTALK).expect("data/routing/smalltalk.yaml is valid")
}

/// The phrases of `lists` by their first word, longest first; `Err` names a phrase without a word.
fn index_phrases<'a>(lists: impl IntoIterator<Item = &'a SmalltalkLists>) -> Result<Phrases, String> {
    let mut phrases = Phrases::new();
    for l in lists {
        let classes = [
            (&l.greetings, Kind::Talk(Smalltalk::Greeting)),
            (&l.acknowledgements, Kind::Talk(Smalltalk::Acknowledgement)),
            (&l.chitchat, Kind::Talk(Smalltalk::Chitchat)),
            (&l.fillers, Kind::Filler),
        ];
        for (class, kind) in classes {
            for phrase in class {
                let key: Vec<String> = words(phrase).iter().map(|w| match_key(w)).collect();
                let Some(first) = key.first().cloned() else {
                    return Err(format!("smalltalk phrase {phrase:?} has no word"));
                };
                let entry = phrases.entry(first).or_default();
                if !entry.iter().any(|(p, k)| *p == key && *k == kind) {
                    entry.push((key, kind));
                }
            }
        }
    }
    // Longest first: "good morning" is one greeting, not an acknowledgement and a word.
    for entry in phrases.values_mut() {
        entry.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    }
    Ok(phrases)
}

impl PartialEq for Lexicon {
    fn eq(&self, other: &Lexicon) -> bool {
        self.phrases() == other.phrases()
    }
}

impl Lexicon {
    /// The default lists (every language of `data/routing/smalltalk.yaml`).
    pub fn reference() -> &'static Lexicon {
        &REFERENCE_LEXICON
    }

    fn phrases(&self) -> &Phrases {
        match &self.phrases {
            LexiconPhrases::Built(phrases) => phrases,
            LexiconPhrases::Reference => REFERENCE_LEXICON.phrases(),
            LexiconPhrases::WithDefaults(lazy) => {
                let (extra, phrases) = &**lazy;
                phrases.get_or_init(|| {
                    index_phrases(default_lists().values().chain([extra]))
                        .expect("the lists were checked when the lexicon was made")
                })
            }
        }
    }

    /// The default lists and `extra`, folded on first use; `Err` says what is wrong with `extra`
    /// now (the default lists are checked by this module's tests).
    pub fn with_defaults(extra: &SmalltalkLists) -> Result<Lexicon, String> {
        index_phrases([extra])?;
        Ok(Lexicon { phrases: LexiconPhrases::WithDefaults(Arc::new((extra.clone(), OnceLock::new()))) })
    }

    /// Only the phrases of `lists`; `Err` names a phrase without a word.
    pub fn new<'a>(lists: impl IntoIterator<Item = &'a SmalltalkLists>) -> Result<Lexicon, String> {
        Ok(Lexicon { phrases: LexiconPhrases::Built(index_phrases(lists)?) })
    }

    /// Whether `text` is smalltalk, and which: every clause greetings, acknowledgements, chitchat
    /// and fillers (at least one of them not a filler), or emoji and punctuation only. Chitchat
    /// outranks an acknowledgement, which outranks a greeting ("hi, how are you?" is chitchat).
    pub fn classify(&self, text: &str) -> Option<Smalltalk> {
        if !text.chars().any(char::is_alphanumeric) {
            return is_emoji_or_punctuation(text).then_some(Smalltalk::Acknowledgement);
        }
        let mut found: Option<Smalltalk> = None;
        let mut count = 0;
        for clause in text.split(is_clause_break) {
            let keys: Vec<String> = words(clause).iter().map(|w| match_key(w)).collect();
            count += keys.len();
            if keys.is_empty() {
                if clause.trim().is_empty() {
                    continue;
                }
                if !is_emoji_or_punctuation(clause) {
                    return None;
                }
                found = found.max(Some(Smalltalk::Acknowledgement));
                continue;
            }
            for kind in self.cover(&keys)? {
                if let Kind::Talk(talk) = kind {
                    found = found.max(Some(talk));
                }
            }
        }
        if count > SMALLTALK_MAX_WORDS {
            return None;
        }
        found
    }

    /// The phrases that make up `keys` exactly, if they do.
    fn cover(&self, keys: &[String]) -> Option<Vec<Kind>> {
        let mut reach: Vec<Option<Vec<Kind>>> = vec![None; keys.len() + 1];
        reach[0] = Some(Vec::new());
        for i in 0..keys.len() {
            let Some(path) = reach[i].clone() else { continue };
            for (phrase, kind) in self.phrases().get(&keys[i]).into_iter().flatten() {
                let end = i + phrase.len();
                if end <= keys.len() && reach[end].is_none() && keys[i..end] == phrase[..] {
                    let mut next = path.clone();
                    next.push(*kind);
                    reach[end] = Some(next);
                }
            }
        }
        reach.pop().flatten()
    }
}

/// Whether `text` is smalltalk by the default lists ([`Lexicon::reference`]).
pub fn classify_smalltalk(text: &str) -> Option<Smalltalk> {
    Lexicon::reference().classify(text)
}

/// Whether `text` has something and only emoji (Unicode `Emoji` and `Emoji_Component`
/// characters, joiners and variation selectors), punctuation and spaces; digits, which are
/// emoji components too, do not count.
pub fn is_emoji_or_punctuation(text: &str) -> bool {
    let mut any = false;
    for c in text.chars() {
        if c.is_whitespace() {
            continue;
        }
        let emoji = !c.is_alphanumeric() && (c.is_emoji_char_or_emoji_component() || c == '\u{200D}');
        let punctuation = c.general_category_group() == GeneralCategoryGroup::Punctuation;
        if !emoji && !punctuation {
            return false;
        }
        any = true;
    }
    any
}

fn is_clause_break(c: char) -> bool {
    matches!(c, '.' | ',' | '!' | '?' | ';' | ':' | '\n' | '¿' | '¡' | '…')
}

/// A word as compared with the smalltalk lists: lowercase, without accents or apostrophes.
fn match_key(word: &str) -> String {
    fold(word).replace('\'', "")
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

/// Whether `word` (lowercase) carries no topic.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&fold(word))
}

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
pub fn shared_words(a: &str, b: &str) -> usize {
    TopicWords::of(a).shared_with(&TopicWords::of(b))
}

/// Whether `part` has topic words and every one of them is `message`'s (allowing inflection):
/// whether `part` says what the user said rather than a paraphrase of it.
pub fn is_users_words(part: &str, message: &str) -> bool {
    TopicWords::of(part).all_in(&TopicWords::of(message))
}

/// A text's topic words ([`content_words`]), computed once to compare with several others: the
/// routing guards hold the user's message's and each clause's, where stemming them again for
/// every comparison was most of the guards' time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicWords(Vec<String>);

impl TopicWords {
    /// The topic words of `text`.
    pub fn of(text: &str) -> TopicWords {
        TopicWords(content_words(text))
    }

    /// How many of these words `other` has too (a repeated word counts each time).
    pub fn shared_with(&self, other: &TopicWords) -> usize {
        self.0.iter().filter(|w| other.0.contains(w)).count()
    }

    /// Whether the two share a word.
    pub fn overlaps(&self, other: &TopicWords) -> bool {
        self.0.iter().any(|w| other.0.contains(w))
    }

    /// Whether there are words and `other` has every one of them.
    pub fn all_in(&self, other: &TopicWords) -> bool {
        !self.0.is_empty() && self.0.iter().all(|w| other.0.contains(w))
    }
}

/// Words that join two requests in one message, in the languages of the stopword lists.
const CONJUNCTIONS: &[&str] =
    &["and", "also", "plus", "y", "tambien", "ademas", "et", "aussi", "e", "und", "auch", "ed", "anche"];

/// The clauses of `text`, in order: the message cut at sentence punctuation, commas, semicolons
/// and colons, and at conjunctions ("and", "also", "y", "et", "und"…), each trimmed; a clause is
/// a slice of `text`, so it keeps the user's exact words.
pub fn clauses(text: &str) -> Vec<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn talk(text: &str) -> Option<Smalltalk> {
        classify_smalltalk(text)
    }

    #[test]
    fn greetings_are_smalltalk_in_every_language() {
        for greeting in [
            "Hi!",
            "good morning",
            "hello there",
            "¡Hola!",
            "buenos días",
            "buenas tardes",
            "Bonjour !",
            "salut",
            "Olá",
            "bom dia",
            "Hallo",
            "guten Morgen",
            "Ciao!",
            "buongiorno",
        ] {
            assert_eq!(talk(greeting), Some(Smalltalk::Greeting), "{greeting}");
        }
    }

    #[test]
    fn acknowledgements_are_smalltalk_in_every_language() {
        for ack in [
            "thanks so much",
            "ok got it",
            "perfect, thanks",
            "muchas gracias",
            "vale, gracias",
            "merci beaucoup",
            "d’accord",
            "obrigado!",
            "valeu",
            "danke schön",
            "alles klar",
            "grazie mille",
            "va bene",
            "no thanks, that's all",
            "no gracias",
            "non merci, c'est tout",
            "não obrigado",
            "nein danke",
            "no grazie, è tutto",
        ] {
            assert_eq!(talk(ack), Some(Smalltalk::Acknowledgement), "{ack}");
        }
    }

    #[test]
    fn chitchat_is_smalltalk_in_every_language_and_several_phrases_at_once() {
        for chitchat in [
            "how are you?",
            "hey, how are you today?",
            "what's up, how are you?",
            "whats up how are you",
            "hi! who are you? what can you do?",
            "¿Qué tal?",
            "hola, ¿cómo estás?",
            "como estas",
            "ça va ?",
            "salut, comment ça va",
            "oi, tudo bem?",
            "wie geht's?",
            "ciao, come stai?",
        ] {
            assert_eq!(talk(chitchat), Some(Smalltalk::Chitchat), "{chitchat}");
        }
    }

    #[test]
    fn emoji_and_punctuation_only_are_acknowledgements() {
        for emoji in ["👍", "🙏", "❤️", "👌", "👍🏽", "🙏🙏!", "😂😂", "👨‍👩‍👧", "?", "...", "🇫🇷"]
        {
            assert_eq!(talk(emoji), Some(Smalltalk::Acknowledgement), "{emoji:?}");
        }
        assert_eq!(talk("thanks 👍"), Some(Smalltalk::Acknowledgement));
        assert_eq!(talk("hi 👋"), Some(Smalltalk::Greeting));
        // Digits are emoji components, not emoji.
        assert_eq!(talk("42"), None);
        assert_eq!(talk("#1"), None);
        assert_eq!(talk("$"), None);
    }

    #[test]
    fn a_question_wrapped_in_smalltalk_is_not_smalltalk() {
        for question in [
            "hi, where are my points?",
            "hi, my receipt didn't scan",
            "thanks, where are my points",
            "hello, find me deals",
            "good coffee deals?",
            "what's up with my points?",
            "how are you at finding deals",
            "what can you do about my missing points",
            "who are you going to send my receipt to",
            "👍 where are my points",
            "hola, ¿dónde están mis puntos?",
            "gracias, pero mi recibo fue rechazado",
            "bonjour, mes points ont disparu",
            "merci, où sont mes points ?",
            "oi, cadê meus pontos?",
            "tudo bem com meus pontos?",
            "hallo, wo sind meine Punkte?",
            "danke, aber mein Beleg wurde abgelehnt",
            "ciao, dove sono i miei punti?",
            "come stai? ho un problema con lo scontrino",
            "points",
            "no, my points are still missing",
            "",
        ] {
            assert_eq!(talk(question), None, "{question}");
        }
    }

    #[test]
    fn a_bare_yes_or_no_is_left_to_the_echo_rule() {
        // It may answer support's question; as smalltalk it would never reach support.
        for answer in ["yes", "no", "nope", "yeah"] {
            assert_eq!(talk(answer), None, "{answer}");
        }
    }

    #[test]
    fn fillers_alone_are_not_smalltalk() {
        assert_eq!(talk("there"), None);
        assert_eq!(talk("so much"), None);
        assert_eq!(talk("thanks and bye"), Some(Smalltalk::Acknowledgement));
    }

    #[test]
    fn configured_phrases_extend_the_defaults() {
        let lexicon = Lexicon::with_defaults(&SmalltalkLists {
            greetings: vec!["hey fetch".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(lexicon.classify("hey Fetch!"), Some(Smalltalk::Greeting));
        assert_eq!(lexicon.classify("hola"), Some(Smalltalk::Greeting));
        assert_eq!(classify_smalltalk("hey fetch"), None, "not in the defaults");
        let only = Lexicon::new([&SmalltalkLists { chitchat: vec!["yo yo".into()], ..Default::default() }]);
        assert_eq!(only.unwrap().classify("hello"), None);
        let bad = Lexicon::new([&SmalltalkLists { fillers: vec!["…".into()], ..Default::default() }]);
        assert!(bad.unwrap_err().contains("no word"));
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
