//! The smalltalk check's second reading: smalltalk in words nobody listed.
//!
//! The word classes refuse a message with a single word outside them. This reading (its grammar is
//! `Phrases::read` in the parent module) takes such a message when the classes' phrases still
//! cover it once some words are left out, a head is found, and nothing in it asks for anything:
//!
//! - **Words it may leave out**: function words (pronouns, articles, auxiliaries: tolerated, never
//!   evidence), the vocabulary's other words (less question words, which only a phrase or a
//!   question about the assistant — a clause with a second-person word — places), a
//!   phrase written as one word, a word of strong positive sentiment in a message that asks
//!   nothing (it heads the message), and a word whose **character n-grams** read as smalltalk's.
//! - **Heads it finds beyond the classes' phrases**: a word that reads strongly as smalltalk's, a
//!   negation that labelled smalltalk says with the word after it and no labelled request does
//!   ("not bad", "nicht schlecht", "no problem": [`Learned::negated_smalltalk`]), two words in a
//!   row (function words left out) that labelled smalltalk says and no request does ("doing well"), and a question
//!   about the assistant (a question word and a second-person word) in words of the vocabulary.
//! - **The n-gram model** is learned from labelled data when the lexicon is first used
//!   ([`TRAINING`]: the project's smalltalk corpus, the routing scenarios, the Rasa starter data,
//!   the OpenVoiceOS skills' intents and replies, and every word of the vocabulary, the configured
//!   languages' included). A word is scored by the
//!   mean log-odds of its n-grams (3 to 5 characters, with word boundaries, and the word itself)
//!   between the words of smalltalk and the words that made a message a request, so a typo
//!   ("helo"), an elongation or an inflection of a smalltalk word scores as one. It must score at
//!   least [`WORD_FLOOR`] (even odds) to be left out, the mean of the message's words (a word of
//!   the vocabulary counting as at least [`WORD_THRESHOLD`]) at least [`WORD_THRESHOLD`], and a
//!   word at least [`HEAD_THRESHOLD`] to head a message.
//! - **Vetoes that keep precision** ([`Learned::vetoes`]; `data/smalltalk/signals.yaml`,
//!   `data/smalltalk/sentiment.yaml` and a configured language's own lists): a request word (a
//!   request verb, the product's nouns — points, receipts, offers, the app, an image — prices,
//!   products, imperatives such as "do it", and the questions that are never about the
//!   assistant's wellbeing: "where", "when", "why"), a sensitive word (distress, health, money
//!   worries), a word of negative sentiment, a negation ("not good"), a digit or a mention, or more
//!   than [`MAX_WORDS`] words; and a question without a second-person word ("is this one ok?"
//!   asks about something the user has, not about the assistant; an auxiliary that opens the
//!   message makes it a question: "is it going to rain this weekend"): the model answers.
//!
//! Naive Bayes over n-grams was chosen over a larger model because the labelled data is small (a
//! few thousand messages), it is learned in milliseconds from data kept in the repository, read in
//! microseconds per message, and each decision can be explained word by word. An n-gram model alone
//! was tried and rejected: it took sensitive remarks ("I feel awful") for smalltalk, and over a few
//! thousand messages it learns the sources' topics (weather, the time) more than what makes a
//! message a request. The vetoes are
//! lists, but of what a request or a worry is made of, not of smalltalk phrasings; the sentiment
//! words are published lexicons (AFINN, Pattern), not written for this check.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;

use super::{SmalltalkLists, match_key};
use crate::text::{is_clause_break, words};

/// Labelled data the model is learned from: the project's corpus (`smalltalk` and `requests`
/// parts), the Rasa starter data and the OpenVoiceOS skills' intents (the same shape) and the
/// routing scenarios (a scenario that expects no call is smalltalk).
pub(crate) const TRAINING: [(&str, &str); 4] = [
    ("data/routing/smalltalk-corpus.yaml", include_str!("../../../../../data/routing/smalltalk-corpus.yaml")),
    ("data/smalltalk/rasa.yaml", include_str!("../../../../../data/smalltalk/rasa.yaml")),
    ("data/smalltalk/ovos.yaml", include_str!("../../../../../data/smalltalk/ovos.yaml")),
    ("data/routing/scenarios.yaml", include_str!("../../../../../data/routing/scenarios.yaml")),
];

/// The default vetoes and function words, per language.
pub(crate) const DEFAULT_SIGNALS: &str = include_str!("../../../../../data/smalltalk/signals.yaml");
/// The default sentiment words, per language (nlp.js's lexicons: AFINN, Pattern).
pub(crate) const DEFAULT_SENTIMENT: &str = include_str!("../../../../../data/smalltalk/sentiment.yaml");

/// The most words this reading takes: a long message needs the word classes.
pub(crate) const MAX_WORDS: usize = 12;
/// The lowest mean score of a message's words (mean log-odds per n-gram, smalltalk over request).
pub(crate) const WORD_THRESHOLD: f64 = 1.0;
/// The lowest score a word nobody listed may have in a message that reads as smalltalk: no lower
/// than even odds, so no word that reads more like a request's is left out.
pub(crate) const WORD_FLOOR: f64 = 0.0;
/// The lowest score of a word outside the vocabulary that heads a message alone ("helo").
pub(crate) const HEAD_THRESHOLD: f64 = 1.0;
/// Additive smoothing of the n-gram counts.
const SMOOTHING: f64 = 0.5;

/// Whether a message's word scores (`evidence`; none: nothing to weigh) read as smalltalk on the
/// mean: at least what one word needed alone, [`WORD_THRESHOLD`].
pub(super) fn reads_as_smalltalk(evidence: &[f64]) -> bool {
    evidence.is_empty() || evidence.iter().sum::<f64>() / evidence.len() as f64 >= WORD_THRESHOLD
}

/// Words (as match keys) or phrases of words: an entry of four letters or more also stands for
/// the words that start with it.
#[derive(Debug, Clone, Default, PartialEq)]
struct WordSet {
    exact: HashSet<String>,
    prefixes: HashSet<String>,
    phrases: Vec<Vec<String>>,
}

impl WordSet {
    fn add(&mut self, entry: &str) {
        let key: Vec<String> = words(entry).iter().map(|w| match_key(w)).collect();
        match key.as_slice() {
            [] => {}
            // The entry's own length: "need" stands for "needs" though its key is "ned".
            [word] if entry.chars().count() >= 4 => {
                self.prefixes.insert(word.clone());
            }
            [word] => {
                self.exact.insert(word.clone());
            }
            _ => self.phrases.push(key),
        }
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty() && self.phrases.is_empty()
    }

    fn has_word(&self, key: &str) -> bool {
        // Every prefix of the word looked up, rather than every entry tried: a few hashes a word.
        self.exact.contains(key)
            || key
                .char_indices()
                .skip(1)
                .map(|(i, _)| &key[..i])
                .chain([key])
                .any(|p| self.prefixes.contains(p))
    }

    /// Whether any word of `keys`, or a phrase of them, is in the set.
    fn hits(&self, keys: &[String]) -> bool {
        keys.iter().any(|k| self.has_word(k))
            || self.phrases.iter().any(|p| keys.windows(p.len()).any(|w| w == &p[..]))
    }
}

/// The labelled shape of the project's corpus and the data under `data/smalltalk/`.
#[derive(Deserialize)]
struct Labelled {
    #[serde(default)]
    smalltalk: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    requests: BTreeMap<String, Vec<String>>,
}

/// A routing scenario, as far as it labels its message.
#[derive(Deserialize)]
struct Scenario {
    message: String,
    expect: Vec<serde_yaml_ng::Value>,
    #[serde(default)]
    image: Option<serde_yaml_ng::Value>,
}

/// The labelled messages of a training file: (smalltalk, requests).
fn labelled(origin: &str, yaml: &str) -> (Vec<String>, Vec<String>) {
    let (mut smalltalk, mut requests) = (Vec::new(), Vec::new());
    if origin.ends_with("scenarios.yaml") {
        let scenarios: Vec<Scenario> =
            serde_yaml_ng::from_str(yaml).expect("the routing scenarios are valid");
        for s in scenarios.into_iter().filter(|s| s.image.is_none()) {
            if s.expect.is_empty() { &mut smalltalk } else { &mut requests }.push(s.message);
        }
    } else {
        let parts: BTreeMap<String, Labelled> =
            serde_yaml_ng::from_str(yaml).expect("the labelled data is valid");
        for part in parts.into_values() {
            smalltalk.extend(part.smalltalk.into_values().flatten());
            requests.extend(part.requests.into_values().flatten());
        }
    }
    (smalltalk, requests)
}

/// The words of `text` as match keys, elisions split ("l'app" is "l" and "app").
pub(super) fn message_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for clause in text.split(is_clause_break) {
        for word in words(clause) {
            let word = word.replace('’', "'");
            match word.split_once('\'') {
                Some((elided, rest)) if is_elision(elided) && !rest.is_empty() => {
                    keys.push(match_key(elided));
                    keys.push(match_key(rest));
                }
                _ => keys.push(match_key(&word)),
            }
        }
    }
    keys.retain(|k| !k.is_empty());
    keys
}

/// French and Italian elided articles, pronouns and prepositions.
fn is_elision(prefix: &str) -> bool {
    matches!(
        prefix,
        "l" | "d" | "j" | "t" | "c" | "m" | "s" | "n" | "qu" | "dell" | "all" | "nell" | "sull" | "un"
    )
}

/// The n-grams a word is read by: its 3- to 5-letter pieces with boundaries, and itself.
fn grams(key: &str) -> Vec<String> {
    let chars: Vec<char> = format!("<{key}>").chars().collect();
    let mut grams = vec![format!("={key}")];
    for n in 3..=5 {
        grams.extend(chars.windows(n).map(|w| w.iter().collect::<String>()));
    }
    grams
}

/// The learned model and the vetoes of one lexicon.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Learned {
    /// Per n-gram: in how many smalltalk words, in how many request words.
    counts: HashMap<String, [u32; 2]>,
    totals: [f64; 2],
    requests: WordSet,
    sensitive: WordSet,
    negations: WordSet,
    function: HashSet<String>,
    negative: HashSet<String>,
    positive: HashSet<String>,
    questions: HashSet<String>,
    second_person: HashSet<String>,
    /// A negation and the word after it that labelled smalltalk says ("not bad", "pas mal", "no
    /// problem") and no labelled request does: not a veto.
    negated_smalltalk: HashSet<(String, String)>,
    /// Two words in a row once function words are left out that labelled smalltalk says ("doing
    /// well") and no labelled request does: they head a message.
    smalltalk_pairs: HashSet<(String, String)>,
    /// Whether the lists gave vetoes: without them this reading takes nothing.
    vetoed: bool,
}

/// Why the second reading refused a message (for the tests and the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Too long, a digit, or a mention ("@someone").
    Shape,
    /// A request word.
    Request,
    /// A sensitive word.
    Sensitive,
    /// A negation.
    Negation,
    /// The lexicon has no vetoes (a lexicon of only some words): this reading is off.
    Off,
}

impl Learned {
    /// Learns from [`TRAINING`] and `vocabulary` (every word of the vocabulary, smalltalk by
    /// construction), with the vetoes of `lists`.
    pub(super) fn new<'a>(
        lists: impl IntoIterator<Item = &'a SmalltalkLists>,
        vocabulary: &HashSet<String>,
    ) -> Learned {
        let mut learned = Learned::default();
        for l in lists {
            l.request_words.iter().for_each(|w| learned.requests.add(w));
            l.sensitive_words.iter().for_each(|w| learned.sensitive.add(w));
            l.negations.iter().for_each(|w| learned.negations.add(w));
            learned.function.extend(l.function_words.iter().flat_map(|w| message_keys(w)));
            learned.questions.extend(l.question_words.iter().map(|w| match_key(w)));
            learned.second_person.extend(l.second_person.iter().map(|w| match_key(w)));
            learned.negative.extend(l.negative_words.iter().map(|w| match_key(w)));
            learned.positive.extend(l.positive_words.iter().map(|w| match_key(w)));
        }
        learned.vetoed = !learned.requests.is_empty() && !learned.sensitive.is_empty();
        // A sentiment word of one language may be another's plain word (French "fine", Dutch
        // "bot"): a word the vocabulary or a function-word list uses is not read as sentiment.
        let plain = |k: &String| vocabulary.contains(k) || learned.function.contains(k);
        learned.negative.retain(|k| !plain(k));
        learned.positive.retain(|k| !plain(k));
        let mut smalltalk: HashSet<String> =
            vocabulary.iter().filter(|k| !learned.function.contains(*k)).cloned().collect();
        let mut requests = HashSet::new();
        let mut negated_requests = HashSet::new();
        let mut request_pairs = HashSet::new();
        for (origin, yaml) in TRAINING {
            let (talk, asks) = labelled(origin, yaml);
            let said: Vec<_> = talk.iter().flat_map(|m| learned.negated_pairs(&message_keys(m))).collect();
            learned.negated_smalltalk.extend(said);
            let pairs: Vec<_> = talk.iter().flat_map(|m| learned.content_pairs(&message_keys(m))).collect();
            learned.smalltalk_pairs.extend(pairs);
            request_pairs.extend(asks.iter().flat_map(|m| learned.content_pairs(&message_keys(m))));
            negated_requests.extend(asks.iter().flat_map(|m| learned.negated_pairs(&message_keys(m))));
            smalltalk
                .extend(talk.iter().flat_map(|m| message_keys(m)).filter(|k| !learned.function.contains(k)));
            requests.extend(asks.iter().flat_map(|m| message_keys(m)));
        }
        learned.negated_smalltalk.retain(|p| !negated_requests.contains(p));
        learned.smalltalk_pairs.retain(|p| !request_pairs.contains(p));
        // Likewise a word that labelled smalltalk uses (Spanish "sin" in "cuánto tiempo sin
        // verte" is English "sin"): the published lexicons are not read in another language.
        // The hand-written sensitive words stay absolute.
        learned.negative.retain(|k| !smalltalk.contains(k));
        // A request's words that smalltalk also uses ("thanks, where are my points") are not
        // what made it a request.
        requests.retain(|k| !smalltalk.contains(k) && !learned.function.contains(k));
        for (class, set) in [(0, &smalltalk), (1, &requests)] {
            for key in set {
                for g in grams(key) {
                    learned.counts.entry(g).or_default()[class] += 1;
                    learned.totals[class] += 1.0;
                }
            }
        }
        learned
    }

    /// Which of `keys` are a negation and the word after it that labelled smalltalk says ("not
    /// bad", "pas mal", "no problem") and no labelled request does.
    pub(super) fn negated_smalltalk(&self, keys: &[String]) -> Vec<bool> {
        let mut said = vec![false; keys.len()];
        for i in 0..keys.len().saturating_sub(1) {
            if self.negated_smalltalk.contains(&(keys[i].clone(), keys[i + 1].clone())) {
                (said[i], said[i + 1]) = (true, true);
            }
        }
        said
    }

    /// Each two words in a row of `keys` once its function words are left out.
    fn content_pairs(&self, keys: &[String]) -> Vec<(String, String)> {
        let content: Vec<&String> = keys.iter().filter(|k| !self.function.contains(*k)).collect();
        content.windows(2).map(|w| (w[0].clone(), w[1].clone())).collect()
    }

    /// Whether `keys` has two words in a row (function words left out) that labelled smalltalk
    /// says and no request does.
    pub(super) fn has_smalltalk_pair(&self, keys: &[String]) -> bool {
        self.content_pairs(keys).iter().any(|p| self.smalltalk_pairs.contains(p))
    }

    /// Each negation of `keys` with the word after it.
    fn negated_pairs(&self, keys: &[String]) -> Vec<(String, String)> {
        keys.windows(2)
            .filter(|w| self.negations.has_word(&w[0]))
            .map(|w| (w[0].clone(), w[1].clone()))
            .collect()
    }

    /// How much `key` reads as a word of smalltalk rather than of a request: the mean log-odds of
    /// its n-grams.
    pub(super) fn word_score(&self, key: &str) -> f64 {
        let vocabulary = self.counts.len() as f64;
        let grams = grams(key);
        let sum: f64 = grams
            .iter()
            .map(|g| {
                let [s, r] = self.counts.get(g).copied().unwrap_or_default();
                let p = |count: u32, total: f64| {
                    (f64::from(count) + SMOOTHING) / (total + SMOOTHING * vocabulary)
                };
                (p(s, self.totals[0]) / p(r, self.totals[1])).ln()
            })
            .sum();
        sum / grams.len() as f64
    }

    /// Whether `key` is a function word (tolerated, never evidence).
    pub(super) fn is_function(&self, key: &str) -> bool {
        self.function.contains(key)
    }

    /// Whether `key` is a question word ("what", "wie"): only a phrase of the classes places it.
    pub(super) fn is_question(&self, key: &str) -> bool {
        self.questions.contains(key)
    }

    /// Whether `key` opens a yes-or-no question when it comes first: a question word that is also
    /// a function word, an auxiliary ("is", "ist").
    pub(super) fn opens_question(&self, key: &str) -> bool {
        self.questions.contains(key) && self.function.contains(key)
    }

    /// Whether `key` is a second-person word ("you", "du").
    pub(super) fn is_second_person(&self, key: &str) -> bool {
        self.second_person.contains(key)
    }

    /// Whether `key` is a word of strong positive sentiment.
    pub(super) fn is_positive(&self, key: &str) -> bool {
        self.positive.contains(key)
    }

    /// Whether anything in `text` (emoji already removed) keeps it from this reading: its shape,
    /// a request word, a sensitive word or a negation; `Err` says which.
    pub(crate) fn vetoes(&self, text: &str) -> Result<(), Refusal> {
        if !self.vetoed {
            return Err(Refusal::Off);
        }
        let keys = message_keys(text);
        // A digit is an amount or a date; a mention, a tag or a path names something.
        let names = |c: char| c.is_ascii_digit() || matches!(c, '@' | '#' | '&' | '/' | '\\');
        if keys.len() > MAX_WORDS || text.chars().any(names) {
            return Err(Refusal::Shape);
        }
        // A negation that labelled smalltalk says with the word after it ("not bad") is neither a
        // negation nor that word a sensitive or request word.
        let said = self.negated_smalltalk(&keys);
        let keys: Vec<String> = keys.into_iter().zip(said).filter(|(_, s)| !s).map(|(k, _)| k).collect();
        if self.sensitive.hits(&keys) || keys.iter().any(|k| self.negative.contains(k)) {
            return Err(Refusal::Sensitive);
        }
        if self.requests.hits(&keys) {
            return Err(Refusal::Request);
        }
        if self.negations.hits(&keys) {
            return Err(Refusal::Negation);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::smalltalk::Lexicon;

    fn vetoes(text: &str) -> Result<(), Refusal> {
        Lexicon::reference().learned().vetoes(text)
    }

    #[test]
    fn elisions_are_split_and_words_folded() {
        assert_eq!(message_keys("C'est l’appli, merci!"), ["c", "est", "l", "apli", "merci"]);
        assert_eq!(message_keys("I'm dooone"), ["im", "done"]);
    }

    #[test]
    fn smalltalk_words_score_above_request_words() {
        let learned = Lexicon::reference().learned();
        for talk in ["hello", "helo", "thanks"] {
            assert!(
                learned.word_score(&match_key(talk)) >= WORD_THRESHOLD,
                "{talk}: {}",
                learned.word_score(talk)
            );
        }
        for ask in ["walmart", "recibo", "rejected", "scontrino", "deals"] {
            assert!(
                learned.word_score(&match_key(ask)) < WORD_THRESHOLD,
                "{ask}: {}",
                learned.word_score(ask)
            );
        }
    }

    #[test]
    fn a_request_word_vetoes_whatever_the_rest_reads_like() {
        assert_eq!(vetoes("hellooo there, refund me"), Err(Refusal::Request));
        assert_eq!(vetoes("hola, ¿dónde estás?"), Err(Refusal::Request));
        assert_eq!(vetoes("merci pour l'appli"), Err(Refusal::Request));
    }

    #[test]
    fn a_sensitive_remark_or_a_negation_is_never_smalltalk() {
        for remark in
            ["I feel awful", "I'm so sad", "worried about money", "estoy enfermo", "je suis fatigué"]
        {
            assert_eq!(vetoes(remark), Err(Refusal::Sensitive), "{remark}");
        }
        assert_eq!(vetoes("not good"), Err(Refusal::Negation));
        assert_eq!(vetoes("pas top"), Err(Refusal::Negation));
    }

    #[test]
    fn digits_mentions_or_length_refuse() {
        assert_eq!(vetoes("hi 2"), Err(Refusal::Shape));
        assert_eq!(vetoes("thanks @support"), Err(Refusal::Shape));
        assert_eq!(vetoes(&"hello ".repeat(MAX_WORDS + 1)), Err(Refusal::Shape));
    }
}
