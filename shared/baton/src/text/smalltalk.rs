//! Whether a message is smalltalk, by type: the check behind the fastpath allowlist.
//!
//! A message is smalltalk when it is nothing but greetings, thanks, acknowledgements, goodbyes,
//! simple chitchat and compliments, in any order and any of the configured languages. The check
//! composes small word classes ([`SmalltalkLists`], `data/routing/smalltalk.yaml`) instead of
//! matching whole messages:
//!
//! - **Every word is in a class.** A word outside them ("points", "deals", "app", "please",
//!   "yes") makes the message a request, so precision rests on the vocabulary being closed:
//!   nothing a request needs is in it. Words are compared without case, accents, apostrophes or
//!   repeated letters ("thaaanks", "como estas"); a word of five letters or more that misses a
//!   head word of six or more by one typo (a letter dropped, added, changed or two swapped:
//!   "thnaks", "gracais") counts as that word, and laughter ("hahaha", "jajaja", "rsrs") as an
//!   interjection.
//! - **At least one head.** Greetings, thanks, acknowledgements, goodbyes, chitchat phrases,
//!   praise ("awesome", "the best") and compliments ("saved my day") are heads; intensifiers,
//!   forms of address, interjections and fillers only go with one ("there", "so much", "lol").
//! - **Composition rules.** "You" and "that's" (and an article) need praise, a compliment or
//!   thanks in the message ("you're the best", "that's great", "fine thanks, you?"; "you?" alone
//!   is not smalltalk). A time of day after "good" in any language is a greeting ("good morning",
//!   "buenas noches", "schönen Abend noch"): the phrases are made from the two classes.
//! - **Emoji by type.** Emoji are read as grapheme clusters (skin tones and ZWJ sequences stay one
//!   emoji) and looked up in the Unicode emoji data: faces, hands, people and hearts (the
//!   "Smileys & Emotion" and "People & Body" groups) and a few signs of celebration (🎉 ✨ ⭐ 🔥
//!   ✅) go with smalltalk, less those that point at or want something (👉 ☝️ 🤑 😋); any other
//!   emoji — food, objects, flags, symbols such as ❓ — makes the message a request ("🧾?", "☕🍩").
//!   Emoji alone are an acknowledgement. A symbol that is neither punctuation nor an allowed emoji
//!   ("$", "%", "+") makes it a request too.
//!
//! At most 20 words. The kinds rank chitchat over an acknowledgement over a greeting ("hi, how
//! are you?" is chitchat).
//!
//! **A second, learned reading** takes a message the classes refuse when its words nobody listed
//! read as smalltalk and nothing in it asks for anything (`learned`): the classes' phrases may
//! leave out function words ("I am great"), a phrase written as one word ("goodmorning"), a word of
//! strong positive sentiment ("super stoked"), and a word whose character n-grams read as
//! smalltalk's (a typo, an elongation, an inflection), learned from labelled data on first use.
//! It also finds heads the classes do not list: a negation that labelled smalltalk says with its
//! word ("nicht schlecht") and a question about the assistant in words of the vocabulary ("come
//! sei stato"). A request word, a sensitive or negative word, a negation labelled smalltalk does
//! not say, a digit or more than 12 words veto it (`data/smalltalk/signals.yaml`,
//! `data/smalltalk/sentiment.yaml`, and a configured language's own lists).
//! [`Lexicon::classify_by_classes`] is the first reading alone.
//!
//! # Layout
//! - this file: the word classes, the lexicon and both readings' grammar.
//! - `emoji`: which emoji go with smalltalk.
//! - `learned`: the n-gram model, its training data and the vetoes of the second reading.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, LazyLock, OnceLock};

use serde::Deserialize;

mod emoji;
mod learned;

use super::{fold, is_clause_break, words};
use emoji::without_emoji;
use learned::Learned;

/// The kinds of message the fastpath may answer directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Smalltalk {
    /// "hi", "good morning", "hola".
    Greeting,
    /// "thanks", "ok got it", "you're the best", "bye", or emoji only ("👍", "🙏🏽").
    Acknowledgement,
    /// "how are you", "who are you", "¿qué tal?".
    Chitchat,
}

/// Smalltalk word classes, as the default vocabulary (`data/routing/smalltalk.yaml`, one entry
/// per language) and the configuration's `routing.smalltalk` give them. Each entry is a word or
/// a phrase of whole words. The first four are the classes of the earlier phrase lists, so a
/// configuration written for them still means what it said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmalltalkLists {
    /// Greetings ("hi", "salut").
    #[serde(default)]
    pub greetings: Vec<String>,
    /// Acknowledgements ("ok", "got it", "d'accord").
    #[serde(default)]
    pub acknowledgements: Vec<String>,
    /// Chitchat phrases ("how are you", "wie geht's").
    #[serde(default)]
    pub chitchat: Vec<String>,
    /// Words that go with smalltalk but are never smalltalk alone ("today", "for the help").
    #[serde(default)]
    pub fillers: Vec<String>,
    /// Thanks ("thanks", "merci beaucoup").
    #[serde(default)]
    pub thanks: Vec<String>,
    /// Goodbyes ("bye", "hasta luego").
    #[serde(default)]
    pub goodbyes: Vec<String>,
    /// Praise, an acknowledgement alone and a compliment after "you" ("awesome", "the best").
    #[serde(default)]
    pub praise: Vec<String>,
    /// Compliments as verb phrases after "you" ("saved my day", "rock").
    #[serde(default)]
    pub compliments: Vec<String>,
    /// The second person ("you're", "eres"): needs praise, a compliment or thanks.
    #[serde(default)]
    pub you: Vec<String>,
    /// "That's", "c'est": needs praise, a compliment or thanks.
    #[serde(default)]
    pub this_is: Vec<String>,
    /// Articles ("the", "un"): need praise, a compliment or thanks.
    #[serde(default)]
    pub articles: Vec<String>,
    /// Adjectives that make a greeting of a time of day ("good", "buenos").
    #[serde(default)]
    pub good: Vec<String>,
    /// Times of day ("morning", "noches"): only after one of `good`.
    #[serde(default)]
    pub times: Vec<String>,
    /// Intensifiers ("so much", "vraiment").
    #[serde(default)]
    pub intensifiers: Vec<String>,
    /// Forms of address ("there", "friend", "bot").
    #[serde(default)]
    pub address: Vec<String>,
    /// Interjections ("wow", "lol").
    #[serde(default)]
    pub interjections: Vec<String>,
    /// Whole languages added to the default ones, by code ("nl", "pl"), each with these classes:
    /// a deployment supports the default languages and these (adding one is data, not code).
    #[serde(default)]
    pub languages: BTreeMap<String, SmalltalkLists>,
    /// Words that make any message a request for the learned reading ("receipt", "where"; an
    /// entry of four letters or more also stands for the words it starts).
    #[serde(default)]
    pub request_words: Vec<String>,
    /// Words of distress, health or money worries: never a direct answer ("sad", "doctor").
    #[serde(default)]
    pub sensitive_words: Vec<String>,
    /// Negations ("not", "pas"): a negated remark may be a complaint.
    #[serde(default)]
    pub negations: Vec<String>,
    /// Closed-class words the learned reading tolerates but never counts as evidence ("the", "is").
    #[serde(default)]
    pub function_words: Vec<String>,
    /// Question words ("what", "wie"): the learned reading takes one only inside a phrase of the
    /// classes ("what's up", "wie geht's") or in a question about the assistant.
    #[serde(default)]
    pub question_words: Vec<String>,
    /// The second person ("you", "du"): a question with one is about the assistant.
    #[serde(default)]
    pub second_person: Vec<String>,
    /// Words of negative sentiment (whole words): the learned reading never takes a message with
    /// one ("awful", "fatal").
    #[serde(default)]
    pub negative_words: Vec<String>,
    /// Words of strong positive sentiment (whole words) that head a message for the learned reading
    /// when it asks nothing ("stoked", "génial").
    #[serde(default)]
    pub positive_words: Vec<String>,
}

impl SmalltalkLists {
    /// These lists and those of every language they add, depth first.
    fn with_languages(&self) -> Vec<&SmalltalkLists> {
        let mut all = vec![self];
        for language in self.languages.values() {
            all.extend(language.with_languages());
        }
        all
    }
}

/// The default smalltalk vocabulary, per language.
pub(crate) const DEFAULT_SMALLTALK: &str = include_str!("../../../../data/routing/smalltalk.yaml");

/// The longest message judged smalltalk, in words.
const SMALLTALK_MAX_WORDS: usize = 20;

/// What a word or phrase is in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Greeting,
    Thanks,
    Acknowledgement,
    Goodbye,
    Chitchat,
    Praise,
    Compliment,
    You,
    ThisIs,
    Article,
    Intensifier,
    Address,
    Interjection,
    Filler,
}

impl Part {
    /// The kind of smalltalk a head makes; `None` for the parts that only go with one.
    fn talk(self) -> Option<Smalltalk> {
        match self {
            Part::Greeting => Some(Smalltalk::Greeting),
            Part::Thanks | Part::Acknowledgement | Part::Goodbye | Part::Praise | Part::Compliment => {
                Some(Smalltalk::Acknowledgement)
            }
            Part::Chitchat => Some(Smalltalk::Chitchat),
            _ => None,
        }
    }

    /// Whether it needs praise, a compliment or thanks in the message.
    fn needs_praise(self) -> bool {
        matches!(self, Part::You | Part::ThisIs | Part::Article)
    }

    fn is_praise(self) -> bool {
        matches!(self, Part::Praise | Part::Compliment | Part::Thanks)
    }

    /// Whether a typo of it still counts (single head words).
    fn takes_typos(self) -> bool {
        matches!(self, Part::Greeting | Part::Thanks | Part::Acknowledgement | Part::Goodbye | Part::Praise)
    }
}

/// A phrase's words (as match keys) and the classes it is in.
type Phrase = (Vec<String>, Vec<Part>);

/// The vocabulary, ready to match: phrases by their first word (longest first), and the head
/// words a typo may stand for, by their first letter.
#[derive(Debug, Clone, Default, PartialEq)]
struct Phrases {
    by_first: HashMap<String, Vec<Phrase>>,
    /// Every word of every phrase: a word outside it ends the check at once.
    known: HashSet<String>,
    typo_heads: HashMap<char, Vec<String>>,
    /// Phrases of several words written as one ("goodmorning"), with their words.
    joined: HashMap<String, Vec<String>>,
    /// The second reading, for messages with a word outside the classes.
    learned: Learned,
}

/// The smalltalk vocabulary a message is checked against. The default is the default
/// vocabulary ([`Lexicon::reference`]); with a configuration's own words
/// ([`Lexicon::with_defaults`]), those added to it. Either is built on first use rather than
/// when a router is built, so start-up does not pay for it.
#[derive(Debug, Clone, Default)]
pub struct Lexicon {
    phrases: LexiconPhrases,
}

#[derive(Debug, Clone, Default)]
enum LexiconPhrases {
    /// The default vocabulary.
    #[default]
    Reference,
    /// Words known when the lexicon is made.
    Built(Arc<Phrases>),
    /// The default vocabulary and these, folded on first use.
    WithDefaults(Arc<(SmalltalkLists, OnceLock<Phrases>)>),
}

static REFERENCE_LEXICON: LazyLock<Lexicon> =
    LazyLock::new(|| Lexicon::new(&defaults()).expect("data/routing/smalltalk.yaml is valid"));

/// The default vocabulary by language.
fn default_lists() -> BTreeMap<String, SmalltalkLists> {
    serde_yaml_ng::from_str(DEFAULT_SMALLTALK).expect("data/routing/smalltalk.yaml is valid")
}

/// The default vocabulary and the learned reading's default signals and sentiment words, every
/// language.
fn defaults() -> Vec<SmalltalkLists> {
    let by_language = |yaml: &str, origin: &str| -> BTreeMap<String, SmalltalkLists> {
        serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("{origin} is valid: {e}"))
    };
    let signals = by_language(learned::DEFAULT_SIGNALS, "data/smalltalk/signals.yaml");
    let sentiment = by_language(learned::DEFAULT_SENTIMENT, "data/smalltalk/sentiment.yaml");
    default_lists().into_values().chain(signals.into_values()).chain(sentiment.into_values()).collect()
}

/// A word as compared with the vocabulary: lowercase, without accents, apostrophes or repeated
/// letters ("Thaaanks" is "thanks", "cool" is "col").
fn match_key(word: &str) -> String {
    let mut key = String::with_capacity(word.len());
    for c in fold(word).chars().filter(|c| *c != '\'') {
        if !key.ends_with(c) {
            key.push(c);
        }
    }
    key
}

fn keys(phrase: &str) -> Vec<String> {
    words(phrase).iter().map(|w| match_key(w)).collect()
}

/// The vocabulary of `lists`; `Err` names an entry without a word.
fn index_phrases<'a>(lists: impl IntoIterator<Item = &'a SmalltalkLists>) -> Result<Phrases, String> {
    let lists: Vec<&SmalltalkLists> = lists.into_iter().flat_map(SmalltalkLists::with_languages).collect();
    let mut phrases = Phrases::default();
    let add = |key: Vec<String>, part: Part, phrases: &mut Phrases| {
        let Some(first) = key.first().cloned() else { return };
        if key.len() == 1 && part.takes_typos() && first.chars().count() >= 6 {
            let heads = phrases.typo_heads.entry(first.chars().next().unwrap_or(' ')).or_default();
            if !heads.contains(&first) {
                heads.push(first.clone());
            }
        }
        phrases.known.extend(key.iter().cloned());
        let entry = phrases.by_first.entry(first).or_default();
        match entry.iter_mut().find(|(p, _)| *p == key) {
            Some((_, parts)) if !parts.contains(&part) => parts.push(part),
            Some(_) => {}
            None => entry.push((key, vec![part])),
        }
    };
    for l in lists.iter().copied() {
        let classes = [
            (&l.greetings, Part::Greeting),
            (&l.thanks, Part::Thanks),
            (&l.acknowledgements, Part::Acknowledgement),
            (&l.goodbyes, Part::Goodbye),
            (&l.chitchat, Part::Chitchat),
            (&l.praise, Part::Praise),
            (&l.compliments, Part::Compliment),
            (&l.you, Part::You),
            (&l.this_is, Part::ThisIs),
            (&l.articles, Part::Article),
            (&l.intensifiers, Part::Intensifier),
            (&l.address, Part::Address),
            (&l.interjections, Part::Interjection),
            (&l.fillers, Part::Filler),
        ];
        for (class, part) in classes {
            for phrase in class {
                let key = keys(phrase);
                if key.is_empty() {
                    return Err(format!("smalltalk phrase {phrase:?} has no word"));
                }
                add(key, part, &mut phrases);
            }
        }
        // "good" + a time of day is a greeting (or a goodbye: both answer the same way).
        for good in &l.good {
            for time in &l.times {
                let (good, time) = (keys(good), keys(time));
                if good.is_empty() || time.is_empty() {
                    return Err(format!(
                        "smalltalk phrase {:?} has no word",
                        if good.is_empty() { "good" } else { "times" }
                    ));
                }
                add(good.into_iter().chain(time).collect(), Part::Greeting, &mut phrases);
            }
        }
    }
    // Longest first: "good morning" is one greeting, not praise and a stray word.
    for entry in phrases.by_first.values_mut() {
        entry.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    }
    // For the learned reading: every phrase of several words written as one ("goodmorning").
    let joined: HashMap<String, Vec<String>> = phrases
        .by_first
        .values()
        .flatten()
        .filter(|(key, _)| key.len() > 1)
        .map(|(key, _)| (match_key(&key.concat()), key.clone()))
        .collect();
    phrases.joined = joined;
    phrases.learned = Learned::new(lists, &phrases.known);
    Ok(phrases)
}

impl PartialEq for Lexicon {
    fn eq(&self, other: &Lexicon) -> bool {
        self.phrases() == other.phrases()
    }
}

impl Lexicon {
    /// The default vocabulary (every language of `data/routing/smalltalk.yaml`).
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
                    index_phrases(defaults().iter().chain([extra]))
                        .expect("the lists were checked when the lexicon was made")
                })
            }
        }
    }

    /// The default vocabulary and `extra`, folded on first use; `Err` says what is wrong with
    /// `extra` now (the default vocabulary is checked by this module's tests).
    pub fn with_defaults(extra: &SmalltalkLists) -> Result<Lexicon, String> {
        index_phrases([extra])?;
        Ok(Lexicon { phrases: LexiconPhrases::WithDefaults(Arc::new((extra.clone(), OnceLock::new()))) })
    }

    /// Only the words of `lists`; `Err` names an entry without a word.
    pub fn new<'a>(lists: impl IntoIterator<Item = &'a SmalltalkLists>) -> Result<Lexicon, String> {
        Ok(Lexicon { phrases: LexiconPhrases::Built(Arc::new(index_phrases(lists)?)) })
    }

    /// The learned reading of this lexicon.
    #[cfg(test)]
    fn learned(&self) -> &Learned {
        &self.phrases().learned
    }

    /// Whether `text` is smalltalk, and which (see the module docs): by the word classes, or else
    /// by the learned reading (which says chitchat).
    pub fn classify(&self, text: &str) -> Option<Smalltalk> {
        self.read(text, true)
    }

    /// Whether `text` is smalltalk by the word classes alone (the first reading).
    pub fn classify_by_classes(&self, text: &str) -> Option<Smalltalk> {
        self.read(text, false)
    }

    fn read(&self, text: &str, learned: bool) -> Option<Smalltalk> {
        let (rest, emoji) = without_emoji(text)?;
        if !rest.chars().any(char::is_alphanumeric) {
            let punctuation = rest.chars().any(|c| !c.is_whitespace());
            return (emoji || punctuation).then_some(Smalltalk::Acknowledgement);
        }
        let phrases = self.phrases();
        let tolerant =
            || phrases.learned.vetoes(&rest).is_ok().then(|| phrases.read(&rest, emoji, true)).flatten();
        phrases.read(&rest, emoji, false).or_else(|| learned.then(tolerant).flatten())
    }
}

impl Phrases {
    /// The word classes' reading of `rest` (text less its emoji). `tolerant` is the learned
    /// reading (see `learned`), which takes a question only with a second-person word (about the
    /// assistant): the message's phrases of the classes may leave words out — function
    /// words, the vocabulary's other words (less question words, "what", "wie", unless the clause
    /// has a second-person word: a question about the assistant), a phrase written as
    /// one word, a word of strong positive sentiment in a message that asks nothing, and a word that
    /// reads as smalltalk by its n-grams (the message's words reading as smalltalk on the mean) —
    /// and a head must be found: a phrase that heads, such a positive or strongly smalltalk-like
    /// word, a negation labelled smalltalk says with its word ("nicht schlecht"), or a question
    /// about the assistant in words of the vocabulary. Any other word refuses the message.
    fn read(&self, rest: &str, emoji: bool, tolerant: bool) -> Option<Smalltalk> {
        let mut found: Option<Smalltalk> = None;
        let (mut count, mut learned_head) = (0, false);
        // A question about the assistant in words of the vocabulary alone ("what is your name",
        // "wie war dein Tag"): a question word, a second-person word, and no word nobody listed.
        let (mut asks_you, mut unlisted) = (false, false);
        let (mut needs, mut praised) = (false, false);
        let asks = self.asks(rest, tolerant)?;
        // The learned reading's evidence: the scores of the words that are not function words.
        let mut evidence: Vec<f64> = Vec::new();
        for clause in rest.split(is_clause_break) {
            let (mut keys, mut skippable) = (Vec::new(), Vec::new());
            let words = if tolerant {
                learned::message_keys(clause)
            } else {
                words(clause).iter().map(|w| match_key(w)).collect()
            };
            count += words.len();
            // A question about the assistant ("how have you been?") may place its question word.
            let about_you = tolerant && words.iter().any(|k| self.learned.is_second_person(k));
            // Two words in a row that labelled smalltalk says head ("doing well").
            learned_head |= tolerant && self.learned.has_smalltalk_pair(&words);
            // A negation labelled smalltalk says with the word after it heads ("not bad").
            let said =
                if tolerant { self.learned.negated_smalltalk(&words) } else { vec![false; words.len()] };
            for (key, said) in words.into_iter().zip(said) {
                if said {
                    learned_head = true;
                    continue;
                }
                let key = self.normalize(key);
                if self.known.contains(&key) {
                    let placed = !self.learned.is_question(&key) || about_you;
                    asks_you |=
                        about_you && self.learned.is_question(&key) && !self.learned.is_function(&key);
                    let skip = tolerant && (self.learned.is_function(&key) || placed);
                    // A word of the vocabulary is smalltalk's by construction: it reads as one at least.
                    if tolerant && !self.learned.is_function(&key) && !self.learned.is_second_person(&key) {
                        evidence.push(self.learned.word_score(&key).max(learned::WORD_THRESHOLD));
                    }
                    keys.push(key);
                    skippable.push(skip);
                } else if !tolerant {
                    return None;
                } else if self.learned.is_function(&key) || self.learned.is_second_person(&key) {
                } else if let Some(phrase) = self.joined.get(&key) {
                    unlisted = true;
                    skippable.extend(phrase.iter().map(|_| false));
                    keys.extend(phrase.iter().cloned());
                } else if self.learned.is_positive(&key) && !asks {
                    (learned_head, unlisted) = (true, true);
                } else {
                    unlisted = true;
                    // A word nobody listed may read only a little like smalltalk's if the
                    // message as a whole does (below); none may read like a request's.
                    let score = self.learned.word_score(&key);
                    if score < learned::WORD_FLOOR {
                        return None;
                    }
                    evidence.push(score);
                    learned_head |= score >= learned::HEAD_THRESHOLD;
                }
            }
            if count > SMALLTALK_MAX_WORDS {
                return None;
            }
            let phrases = self.cover(&keys, &skippable)?;
            // A phrase in several classes plays whichever role the rules need ("super" is
            // praise after "du bist", an acknowledgement alone).
            needs |= self.needs_praise(&phrases, tolerant);
            praised |= phrases.iter().any(|(_, parts)| parts.iter().any(|p| p.is_praise()));
            // Its kind is the plainest of its classes ("ciao" greets before it says goodbye).
            for (_, parts) in phrases {
                found = found.max(parts.iter().filter_map(|p| p.talk()).min());
            }
        }
        // "You" needs praise, but not in a question about the assistant ("quem és tu?").
        let about_the_assistant = tolerant && asks_you && !unlisted;
        if needs && !praised && !about_the_assistant {
            return None;
        }
        if tolerant {
            if !learned::reads_as_smalltalk(&evidence) {
                return None;
            }
            return found.or((learned_head || about_the_assistant).then_some(Smalltalk::Chitchat));
        }
        found.or(emoji.then_some(Smalltalk::Acknowledgement))
    }

    /// Whether `rest` is a question: a "?", or for the learned reading (`tolerant`) an auxiliary
    /// that opens it ("is it going to be nice this weekend"). `None`: the learned reading refuses
    /// it, a question without a second-person word ("is this one ok?" asks about something the
    /// user has, not about the assistant).
    fn asks(&self, rest: &str, tolerant: bool) -> Option<bool> {
        if !tolerant {
            return Some(rest.contains('?'));
        }
        let keys = learned::message_keys(rest);
        let asks = rest.contains('?') || keys.first().is_some_and(|k| self.learned.opens_question(k));
        (!asks || keys.iter().any(|k| self.learned.is_second_person(k))).then_some(asks)
    }

    /// Whether a phrase of `phrases` needs praise ("you", "that's", an article). For the learned
    /// reading (`tolerant`) a function word that is "that's" in some language ("es") is only
    /// tolerated ("mir geht es gut"); an article or "you" still needs praise ("say a joke").
    fn needs_praise(&self, phrases: &[(&[String], &[Part])], tolerant: bool) -> bool {
        let tolerated = |phrase: &[String], parts: &[Part]| {
            tolerant
                && matches!(phrase, [w] if self.learned.is_function(w))
                && parts.iter().all(|p| *p == Part::ThisIs)
        };
        phrases
            .iter()
            .any(|(phrase, parts)| !tolerated(phrase, parts) && parts.iter().all(|p| p.needs_praise()))
    }

    /// `key` as the vocabulary knows it: itself, laughter, or the head word it is a typo of.
    fn normalize(&self, key: String) -> String {
        if self.known.contains(&key) {
            return key;
        }
        if is_laughter(&key) {
            return "haha".into();
        }
        let len = key.chars().count();
        if len >= 5 {
            let first = key.chars().next().unwrap_or(' ');
            let typo_of = self.typo_heads.get(&first).into_iter().flatten().find(|head| one_typo(&key, head));
            if let Some(head) = typo_of {
                return head.clone();
            }
        }
        key
    }

    /// The phrases (each as its classes) that make up `keys`, leaving out only words marked
    /// `skippable` (as few as can be; longest phrases first), if they do.
    fn cover(&self, keys: &[String], skippable: &[bool]) -> Option<Vec<(&[String], &[Part])>> {
        /// The words left out so far, and the phrases with their classes.
        type Reach<'p> = Option<(usize, Vec<(&'p [String], &'p [Part])>)>;
        let mut reach: Vec<Reach> = vec![None; keys.len() + 1];
        reach[0] = Some((0, Vec::new()));
        let better = |slot: &Reach, skipped: usize| slot.as_ref().is_none_or(|(s, _)| skipped < *s);
        for i in 0..keys.len() {
            let Some((skipped, path)) = reach[i].clone() else { continue };
            for (phrase, parts) in self.by_first.get(&keys[i]).into_iter().flatten() {
                let end = i + phrase.len();
                if end <= keys.len() && better(&reach[end], skipped) && keys[i..end] == phrase[..] {
                    let mut next = path.clone();
                    next.push((phrase.as_slice(), parts.as_slice()));
                    reach[end] = Some((skipped, next));
                }
            }
            if skippable[i] && better(&reach[i + 1], skipped + 1) {
                reach[i + 1] = Some((skipped + 1, path));
            }
        }
        reach.pop().flatten().map(|(_, path)| path)
    }
}

/// Whether `a` is `b` with one letter dropped, added or changed, or two neighbours swapped.
fn one_typo(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (short, long) = if a.len() <= b.len() { (&a, &b) } else { (&b, &a) };
    match long.len() - short.len() {
        0 => {
            let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            match diff.as_slice() {
                [_] => true,
                [i, j] => *j == i + 1 && a[*i] == b[*j] && a[*j] == b[*i],
                _ => false,
            }
        }
        1 => {
            let skip = (0..short.len()).find(|&i| short[i] != long[i]).unwrap_or(short.len());
            short[skip..] == long[skip + 1..]
        }
        _ => false,
    }
}

/// Laughter: "haha", "jajaja", "hehe", "ahah", "rsrs" (repeated letters already squeezed).
fn is_laughter(key: &str) -> bool {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 4 {
        return false;
    }
    let (a, b) = (chars[0], chars[1]);
    let pair =
        |x: char, y: char| (matches!(x, 'h' | 'j') && matches!(y, 'a' | 'e' | 'i')) || (x == 'r' && y == 's');
    (pair(a, b) || pair(b, a)) && chars.iter().enumerate().all(|(i, c)| *c == if i % 2 == 0 { a } else { b })
}

/// Whether `text` is smalltalk by the default vocabulary ([`Lexicon::reference`]).
pub(crate) fn classify_smalltalk(text: &str) -> Option<Smalltalk> {
    Lexicon::reference().classify(text)
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
            "heyyy",
            "schönen Abend noch",
        ] {
            assert_eq!(talk(greeting), Some(Smalltalk::Greeting), "{greeting}");
        }
    }

    #[test]
    fn thanks_acknowledgements_goodbyes_and_compliments_are_acknowledgements() {
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
            "thanks, you saved my day",
            "you're the best",
            "thank you, you're awesome!",
            "eres un crack",
            "t'es le meilleur",
            "você é demais",
            "du bist super",
            "sei il migliore",
            "that's great",
            "thaaanks",
            "thnaks",
            "lol thanks",
            "jajaja gracias",
            "bye!",
        ] {
            assert_eq!(talk(ack), Some(Smalltalk::Acknowledgement), "{ack}");
        }
    }

    #[test]
    fn the_phrases_the_composition_replaced_are_still_smalltalk() {
        // Entries of the earlier phrase lists that the classes now compose.
        for phrase in [
            "good morning",
            "good afternoon",
            "good evening",
            "good day",
            "kk",
            "much appreciated",
            "have a nice day",
            "have a good day",
            "buenos días",
            "buenas tardes",
            "buenas noches",
            "bonne journée",
            "bonne soirée",
            "boa tarde",
            "boa noite",
            "guten Morgen",
            "guten Tag",
            "guten Abend",
            "buon giorno",
            "buona sera",
            "buon pomeriggio",
        ] {
            assert!(talk(phrase).is_some(), "{phrase}");
        }
        // Words left out on purpose: they also accept an offer, ask for a repeat or say "please".
        for word in ["sure", "again", "encore", "nochmal", "bitte", "prego", "dale", "bet", "fechado"] {
            assert_eq!(talk(word), None, "{word}");
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
            "you're the best, now where's my bonus",
            "love the app",
            "thanks for the points",
            "",
        ] {
            assert_eq!(talk(question), None, "{question}");
        }
    }

    #[test]
    fn you_and_thats_need_praise() {
        for text in ["you?", "you", "that's", "c'est", "the"] {
            assert_eq!(talk(text), None, "{text}");
        }
        // The classes' rule; the learned reading takes "ok" with a word it does not weigh.
        assert_eq!(Lexicon::reference().classify_by_classes("ok you"), None);
        assert_eq!(talk("you rock"), Some(Smalltalk::Acknowledgement));
    }

    #[test]
    fn a_bare_yes_or_no_is_left_to_the_echo_rule() {
        // It may answer support's question; as smalltalk it would never reach support.
        for answer in ["yes", "no", "nope", "yeah", "sí", "oui", "sim", "ja"] {
            assert_eq!(talk(answer), None, "{answer}");
        }
    }

    #[test]
    fn modifiers_alone_are_not_smalltalk() {
        for text in ["there", "so much", "lol", "hahaha", "today"] {
            assert_eq!(talk(text), None, "{text}");
        }
        assert_eq!(talk("thanks and bye"), Some(Smalltalk::Acknowledgement));
    }

    #[test]
    fn a_typo_counts_only_for_long_head_words() {
        assert!(one_typo("thnks", "thanks"));
        assert!(one_typo("thansk", "thanks"));
        assert!(one_typo("thnaks", "thanks"));
        assert!(one_typo("thinks", "thanks"));
        assert!(one_typo("tanks", "thanks"));
        assert!(one_typo("thank", "thanks"));
        assert!(one_typo("hanks", "thanks"));
        assert!(!one_typo("thnk", "thanks"));
        assert!(!one_typo("snaths", "thanks"));
        // "hellp" is not "hello": five-letter heads take no typo.
        assert_eq!(talk("hellp"), None);
    }

    #[test]
    fn configured_words_extend_the_defaults() {
        let lexicon = Lexicon::with_defaults(&SmalltalkLists {
            greetings: vec!["hey fetch".into()],
            address: vec!["fetchy".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(lexicon.classify("hey Fetch!"), Some(Smalltalk::Greeting));
        assert_eq!(lexicon.classify("thanks fetchy"), Some(Smalltalk::Acknowledgement));
        assert_eq!(lexicon.classify("hola"), Some(Smalltalk::Greeting));
        assert_eq!(classify_smalltalk("hey fetch"), None, "not in the defaults");
        let only = Lexicon::new([&SmalltalkLists { chitchat: vec!["yo yo".into()], ..Default::default() }]);
        assert_eq!(only.unwrap().classify("hello"), None);
        let bad = Lexicon::new([&SmalltalkLists { fillers: vec!["…".into()], ..Default::default() }]);
        assert!(bad.unwrap_err().contains("no word"));
    }

    #[test]
    fn a_configured_language_is_supported_by_its_words_alone() {
        // Swahili is in no default list: the configuration adds it as data.
        let yaml = "languages:\n  sw:\n    greetings: [jambo, habari]\n    thanks: [asante, asante sana]\n    \
                    address: [rafiki]\n";
        let extra: SmalltalkLists = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(classify_smalltalk("jambo rafiki"), None, "not a default language");
        let lexicon = Lexicon::with_defaults(&extra).unwrap();
        assert_eq!(lexicon.classify("Jambo rafiki!"), Some(Smalltalk::Greeting));
        assert_eq!(lexicon.classify("asante sana"), Some(Smalltalk::Acknowledgement));
        assert_eq!(lexicon.classify("hola"), Some(Smalltalk::Greeting), "the defaults stay");
        assert_eq!(lexicon.classify("asante, pointi zangu ziko wapi?"), None, "a word outside the classes");
        let bad: SmalltalkLists = serde_yaml_ng::from_str("languages: {sw: {greetings: ['…']}}").unwrap();
        assert!(Lexicon::with_defaults(&bad).unwrap_err().contains("no word"));
    }

    #[test]
    fn the_learned_reading_takes_smalltalk_in_words_the_classes_do_not_list() {
        let lexicon = Lexicon::reference();
        for (text, kind) in [
            ("goodmorning", Smalltalk::Greeting),
            ("heyy bot, I am great", Smalltalk::Acknowledgement),
            ("hi buddy, I am fine", Smalltalk::Acknowledgement),
            ("super happy today", Smalltalk::Acknowledgement),
            ("hi, how was your weekend?", Smalltalk::Greeting),
            // A question about the assistant in words of the vocabulary, the pronoun dropped or not.
            ("quem és tu?", Smalltalk::Chitchat),
            ("wie war dein Tag", Smalltalk::Chitchat),
            ("come sei stato", Smalltalk::Chitchat),
            // A negation that labelled smalltalk says with its word (OpenVoiceOS's "not bad" in
            // every language), and a function word that is "that's" elsewhere ("es").
            ("nicht schlecht", Smalltalk::Chitchat),
            ("nada mal", Smalltalk::Chitchat),
            ("mir geht es gut", Smalltalk::Acknowledgement),
            // Two words in a row that labelled smalltalk says and no request does.
            ("I'm doing well", Smalltalk::Chitchat),
        ] {
            assert_eq!(lexicon.classify_by_classes(text), None, "{text}: the classes alone refuse it");
            assert_eq!(lexicon.classify(text), Some(kind), "{text}");
        }
    }

    #[test]
    fn the_learned_reading_never_takes_a_request_or_a_sensitive_remark() {
        for text in [
            "hi, I feel awful",
            "hello, my mom is sick",
            "thanks, I'm worried about money",
            "hola, estoy enfermo",
            "merci, je suis épuisé",
            "hallo, mir geht es schlecht",
            "ciao, sono triste",
            "hey, refund please",
            "hi robot, where is it?",
            "great, now what",
            "ok do it",
            "wonderful deals?",
            "super, 2 more",
            "happy to win?",
            "hey, how have these been?",
            "hey, where have you been?",
            "is this one ok?",
            "ok this one",
            "super, la première",
            "vale, el segundo",
            "ok, on monday",
            "hi, is it good?",
            // A yes-or-no question without "?", a year, a request verb.
            "is it going to be nice this weekend",
            "ano presente",
            "hey fetch",
            // A question about the assistant with a request word.
            "what is your price?",
            // An article still needs praise: a thing is named.
            "say a joke",
            "cómo está el tiempo",
            // A negation labelled smalltalk never says with its word.
            "not good",
            "nicht gut",
        ] {
            assert_eq!(talk(text), None, "{text}");
        }
    }

    #[test]
    fn a_configured_language_brings_its_function_words_and_vetoes_to_the_learned_reading() {
        let swahili = |extra: &str| {
            let yaml = format!("languages:\n  sw:\n    greetings: [jambo]\n    address: [rafiki]\n{extra}");
            Lexicon::with_defaults(&serde_yaml_ng::from_str(&yaml).unwrap()).unwrap()
        };
        let message = "jambo rafiki, mimi pia";
        assert_eq!(swahili("").classify(message), None, "two words no list has");
        let lexicon = swahili("    function_words: [mimi, pia]\n");
        assert_eq!(lexicon.classify_by_classes(message), None);
        assert_eq!(lexicon.classify(message), Some(Smalltalk::Greeting), "function words as data");
        let vetoed = swahili("    function_words: [mimi, pia]\n    sensitive_words: [rafiki]\n");
        assert_eq!(vetoed.classify(message), None, "a configured sensitive word vetoes");
    }

    /// Phrases whose words would be a request alone but not together ("for the help").
    const WHOLE_PHRASES: &[&str] = &[
        "for the help",
        "for your help",
        "for helping",
        "por la ayuda",
        "por tu ayuda",
        "pour l'aide",
        "pour ton aide",
        "pour votre aide",
        "pela ajuda",
        "für die hilfe",
        "für deine hilfe",
        "per l'aiuto",
        "nada más",
        "appreciate your help",
        "appreciate the help",
        "that's all i need",
        "what can you do",
        "que peux-tu faire",
        "qué puedes hacer",
        "cosa puoi fare",
        "o que você pode fazer",
        "à plus",
        "a plus",
        "à plus tard",
        "m'as sauvé",
        "m'as sauvé la vie",
        "m'as sauvé la journée",
        "lo más",
        "mi sei stato di grande aiuto",
        "mi sei stata di grande aiuto",
        "di grande aiuto",
        "4 the help",
        "4 everything",
        "4 that",
    ];

    #[test]
    fn the_default_vocabulary_has_no_request_word() {
        // The words a request needs stay out of every class, in every language.
        let lists = default_lists();
        for (language, l) in &lists {
            let all = [
                &l.greetings,
                &l.thanks,
                &l.acknowledgements,
                &l.goodbyes,
                &l.chitchat,
                &l.praise,
                &l.compliments,
                &l.you,
                &l.this_is,
                &l.articles,
                &l.good,
                &l.times,
                &l.intensifiers,
                &l.address,
                &l.interjections,
                &l.fillers,
            ];
            for phrase in all.into_iter().flatten() {
                for word in keys(phrase) {
                    for banned in [
                        "yes", "si", "oui", "sim", "ja", "please", "plis", "pls", "porfavor", "bite",
                        "favore", "help", "ayuda", "aide", "ajuda", "hilfe", "aiuto", "more", "mas", "plus",
                        "mehr", "point", "points", "puntos", "receipt", "offer", "deal", "deals", "app",
                        "price", "need", "want", "can", "sale",
                    ] {
                        if word == match_key(banned) && !WHOLE_PHRASES.contains(&phrase.as_str()) {
                            panic!("{language}: {phrase:?} has the request word {banned:?}");
                        }
                    }
                }
            }
        }
    }
}
