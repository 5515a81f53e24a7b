//! Whether a short reply answers the follow-up agent's last question (the echo follow-up rule),
//! and the words, in the six languages, that tell an answer from a new request.

use super::RoutingInput;
use crate::text::{self, Smalltalk, TopicWords, words};

/// Words that answer a yes/no question, in the six languages.
const ANSWER_WORDS: &[&str] = &[
    "yes", "no", "yeah", "yep", "nope", "correct", "right", "both", "neither", "si", "sí", "sì", "oui",
    "non", "sim", "não", "nao", "ja", "nein", "doch", "nee",
];

/// Words that open a question or a request of the user's own, in the six languages: a clause that
/// starts with one asks something new ("what deals at FreshMart?") rather than answering.
const NEW_QUESTION_WORDS: &[&str] = &[
    "what",
    "what's",
    "whats",
    "where",
    "when",
    "why",
    "how",
    "which",
    "who",
    "can",
    "could",
    "would",
    "do",
    "does",
    "is",
    "are",
    "any",
    "find",
    "show",
    "get",
    "give",
    "tell",
    "search",
    "look",
    "qué",
    "que",
    "dónde",
    "donde",
    "cuándo",
    "cuando",
    "cómo",
    "como",
    "cuál",
    "cual",
    "quién",
    "quien",
    "hay",
    "tienes",
    "tienen",
    "puedes",
    "busca",
    "muéstrame",
    "quoi",
    "où",
    "quand",
    "comment",
    "quel",
    "quelle",
    "quels",
    "quelles",
    "qui",
    "est-ce",
    "as-tu",
    "peux-tu",
    "y'a",
    "trouve",
    "montre",
    "montre-moi",
    "onde",
    "quando",
    "qual",
    "quais",
    "quem",
    "tem",
    "pode",
    "mostra",
    "cadê",
    "was",
    "wo",
    "wann",
    "wie",
    "welche",
    "welcher",
    "welches",
    "wer",
    "gibt",
    "hast",
    "kannst",
    "zeig",
    "such",
    "cosa",
    "che",
    "dove",
    "quale",
    "quali",
    "chi",
    "ci",
    "hai",
    "puoi",
    "mostrami",
    "trova",
    "cerca",
    "got",
    "have",
    "need",
    "want",
    "looking",
    "recommend",
    "suggest",
    "list",
    "compare",
    "buy",
    "help",
    "please",
    "pls",
    "gimme",
    "lemme",
    "quiero",
    "necesito",
    "busco",
    "quero",
    "preciso",
    "voglio",
    "vorrei",
    "cerco",
    "möchte",
    "brauche",
    "suche",
];

/// Two-word openers of a request ("I want", "je cherche"), in the six languages.
const NEW_REQUEST_OPENERS: &[&str] = &[
    "i want",
    "i need",
    "i'd like",
    "id like",
    "i'm looking",
    "im looking",
    "let me",
    "give me",
    "je veux",
    "je cherche",
    "j'aimerais",
    "je voudrais",
    "eu quero",
    "eu preciso",
    "ich will",
    "ich möchte",
    "ich suche",
    "ich brauche",
    "me gustaría",
    "me das",
    "dame",
    "muéstrame",
];

/// Whether `message` opens a question or a request of its own in some clause.
fn asks_something_new(message: &str) -> bool {
    text::clauses(message).iter().any(|clause| {
        let said = words(clause);
        let opener = said.iter().take(2).map(String::as_str).collect::<Vec<_>>().join(" ");
        said.first().is_some_and(|w| NEW_QUESTION_WORDS.contains(&w.as_str()))
            || NEW_REQUEST_OPENERS.contains(&opener.as_str())
    })
}

/// Whether `message` is a short reply answering the follow-up agent's question of the previous
/// turn: a pick of an option it offered (by number or label), a yes or no, one of the options the
/// question named or words of its own (every topic word of a question-marked reply is the
/// question's), or the thing it asked for (a reply that shares a
/// word with it: "from the Target store" to "which store?"). A reply that asks something new
/// ("what deals at FreshMart?") is not an answer, whatever word it shares.
pub(super) fn echoes_followup_question(input: &RoutingInput<'_>) -> Option<String> {
    let previous = input.previous?;
    let agent = input.roles.followup_agent.as_deref()?;
    let question = previous.reply_of(agent)?.trim();
    // A pick of an option it offered answers it, by number or label, whatever it ended with.
    if text::picked_option(previous.options_of(agent).iter().map(String::as_str), input.message).is_some() {
        return Some(question.to_owned());
    }
    if !question.ends_with('?') || words(input.message).len() > 6 {
        return None;
    }
    if input.smalltalk.classify(input.message) == Some(Smalltalk::Acknowledgement) {
        return None;
    }
    if asks_something_new(input.message) {
        return None;
    }
    // The question's last sentence is what the user answers.
    let last = question.trim_end_matches('?').rsplit(['.', '!', '?', '\n']).next().unwrap_or(question);
    let said = words(input.message);
    let yes_no = said.iter().any(|w| ANSWER_WORDS.contains(&w.as_str()));
    let (reply, asked) = (TopicWords::of(input.message), TopicWords::of(last));
    // A reply with a question mark answers only in the question's words ("the paper one?").
    let answers =
        if input.message.contains(['?', '¿']) { reply.all_in(&asked) } else { reply.overlaps(&asked) };
    (yes_no || answers).then(|| question.to_owned())
}
