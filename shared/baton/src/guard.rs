//! Routing guards that catch orchestrator-model mistakes in code (`docs/routing.md`).
//!
//! Pure functions over the model's planned calls, applied in this order by [`apply_guards`]:
//! 1. **Duplicates**: the same tool with the same query counts once. This runs first, so a rule
//!    that rewrites a call below finds the model's call once, with every field it gave.
//! 2. **Echo follow-up**: a short reply that answers the follow-up agent's previous question (a
//!    pick of the options it offered, a yes or no, the question's words, the thing it asked for;
//!    never a reply that asks something new) goes back to it. The model's own call to it is kept
//!    (its category, summary, prior context); only what the rule needs changes.
//! 3. **Fastpath allowlist**: a direct answer (no call) is kept only for smalltalk, recognised by
//!    type ([`Lexicon::classify`]), with no image attached; anything else goes to the fallback
//!    agent. (The routing policy first re-asks the model, echo replies included, see
//!    [`refuses_direct_answer`]; this is the last resort.)
//! 4. **Overlap** (mixed turns): a call whose query shares no content word with the user's message
//!    is dropped when the model made more calls than the intents it reported (a hallucinated
//!    extra call). A call within the reported count is kept and its query repaired by the verbatim
//!    rule instead: dropping it would lose an intent whose query the model merely rewrote. Nothing
//!    is dropped when no call overlaps at all.
//! 5. **Verbatim**: one call gets the user's exact text; in a mixed turn a message of at most four
//!    words goes verbatim to every call. A longer one keeps the model's split only if it is the
//!    user's words (every content word of it is the message's, allowing inflection), else takes
//!    the user's own clause that overlaps the call most ([`text::clauses`]), and only then the
//!    whole message.
//! 6. **Prior context**: a support call after a turn that support did not answer (an intent switch)
//!    gets the previous turn as `prior_context` when the model gave none; so does a call code
//!    made for a refused direct answer after a switch.
//! 7. The follow-up tool's summary argument is capped at 300 characters.
//!
//! A rule that rewrites a call changes only the fields it must: every other argument the model
//! gave reaches the agent. Each repair is reported as a [`GuardAction`], so routing mistakes are
//! visible in tracing and in the routing evaluation.

use serde_json::Value;

use crate::conversation::PreviousTurn;
use crate::image::ImageKind;
use crate::text::{self, Lexicon, Smalltalk, TopicWords, normalize, words};

/// A sub-agent call the orchestrator will make.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// `ask_support` or `ask_shopping`.
    pub tool: String,
    /// The query the sub-agent gets.
    pub query: String,
    /// Context from earlier turns, if any.
    pub prior_context: Option<String>,
    /// All arguments (after repairs).
    pub arguments: Value,
}

impl PlannedCall {
    /// A call from a tool name and its arguments; a missing query falls back to `message`.
    pub fn from_arguments(tool: &str, arguments: Value, message: &str) -> PlannedCall {
        let text =
            |key: &str| arguments.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        PlannedCall {
            tool: tool.to_owned(),
            query: text("query").unwrap_or(message).to_owned(),
            prior_context: text("prior_context").map(str::to_owned),
            arguments: if arguments.is_object() { arguments } else { Value::Object(Default::default()) },
        }
    }

    /// Sets the query, in the arguments too.
    pub fn set_query(&mut self, query: &str) {
        self.query = query.to_owned();
        self.set_argument("query", query);
    }

    /// Sets the prior context, in the arguments too.
    pub fn set_prior_context(&mut self, context: String) {
        self.set_argument("prior_context", &context);
        self.prior_context = Some(context);
    }

    fn set_argument(&mut self, key: &str, value: &str) {
        if let Some(obj) = self.arguments.as_object_mut() {
            obj.insert(key.into(), Value::String(value.to_owned()));
        }
    }

    /// What makes two calls the same call: the tool, and the query up to case, accents and
    /// punctuation. The one key duplicates are removed by and the failsafe merges by.
    pub fn key(&self) -> (&str, String) {
        (self.tool.as_str(), normalize(&self.query))
    }

    /// The call's `intent_count`, if the model gave a sensible one.
    pub fn intent_count(&self) -> Option<usize> {
        self.arguments.get("intent_count").and_then(Value::as_u64).map(|n| n as usize).filter(|n| *n >= 1)
    }
}

/// A repair a guard made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "repair", rename_all = "snake_case")]
pub enum GuardAction {
    /// A short reply to the follow-up agent's question was sent back to it.
    EchoFollowup,
    /// A direct answer to a message with an image of a known kind was replaced by a call of the
    /// agent that kind goes to.
    ImageRouted {
        /// What the image shows.
        image: ImageKind,
        /// The tool called.
        tool: String,
    },
    /// A direct answer to a real question was replaced by a call of the fallback agent.
    FastpathRejected,
    /// A direct answer to a real question was refused and the model asked again to call a tool.
    FastpathReasked {
        /// Calls the re-ask made.
        calls: usize,
    },
    /// A repeated call was removed.
    DuplicateRemoved {
        /// Its tool.
        tool: String,
    },
    /// A call unrelated to the message was removed.
    NoOverlapDropped {
        /// Its tool.
        tool: String,
        /// Its query.
        query: String,
    },
    /// A query was replaced by the user's exact text.
    QueryVerbatim {
        /// The tool.
        tool: String,
        /// The model's query.
        was: String,
    },
    /// `prior_context` was filled on an intent switch.
    PriorContextFilled {
        /// The tool.
        tool: String,
    },
    /// The follow-up tool's summary argument was cut to 300 characters.
    SummaryCapped,
    /// A category outside the configured list (or on a tool that takes none) was
    /// dropped.
    CategoryDropped {
        /// The tool.
        tool: String,
        /// The category the model gave, as JSON.
        category: String,
    },
    /// The failsafe re-asked the model for missing calls.
    FailsafeReasked {
        /// Intents the model reported.
        intents: usize,
        /// Calls before the re-ask.
        calls: usize,
        /// Calls added by the re-ask.
        added: usize,
    },
}

impl GuardAction {
    /// The repair's name, as `repaired` events and the evaluation report it (`echo_followup`).
    pub fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v["repair"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// The longest summary argument kept.
pub const SUMMARY_MAX_CHARS: usize = 300;

/// Which routing tools the guards treat specially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    /// The follow-up agent's tool (`ask_support`): echo follow-ups go to it, prior context is
    /// filled on a switch to it, its summary is capped.
    pub followup_tool: Option<String>,
    /// The follow-up agent's name, as the previous turn's replies name it (`support`).
    pub followup_agent: Option<String>,
    /// The follow-up tool's summary argument (`support_summary`), which the guards cap.
    pub summary_argument: Option<String>,
    /// Where a refused direct answer goes (`ask_shopping`).
    pub fallback_tool: String,
    /// The fallback agent's name, as the previous turn's replies name it (`shopping`).
    pub fallback_agent: String,
    /// The routing agent's own name, as the previous turn's replies name it (`orchestrator`).
    pub own_agent: String,
    /// Where a direct answer goes when the user attached an image of a known kind: the kind,
    /// the tool, the agent (`receipt` → `ask_support`, `support`).
    pub images: Vec<(ImageKind, String, String)>,
}

impl Roles {
    /// The reference roles: `ask_support` (agent `support`) for follow-ups, `ask_shopping` as
    /// the fallback, `orchestrator` routing.
    pub fn reference() -> Roles {
        Roles {
            followup_tool: Some("ask_support".into()),
            followup_agent: Some("support".into()),
            summary_argument: Some("support_summary".into()),
            fallback_tool: "ask_shopping".into(),
            fallback_agent: "shopping".into(),
            own_agent: "orchestrator".into(),
            images: vec![
                (ImageKind::Receipt, "ask_support".into(), "support".into()),
                (ImageKind::Product, "ask_shopping".into(), "shopping".into()),
            ],
        }
    }
}

/// Which guards run (all by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guards {
    /// The failsafe re-ask when a call reports more intents than calls were made.
    pub failsafe: bool,
    /// A short reply echoing the follow-up agent's question goes back to it.
    pub echo_followup: bool,
    /// A direct answer is kept only for smalltalk.
    pub fastpath: bool,
    /// The same tool with the same query counts once.
    pub duplicates: bool,
    /// A call beyond the reported intents that shares no word with the message is dropped.
    pub overlap: bool,
    /// Queries are the user's own words.
    pub verbatim: bool,
    /// The follow-up agent gets the previous turn on a switch.
    pub prior_context: bool,
    /// The follow-up tool's summary argument is capped.
    pub summary_cap: bool,
}

impl Default for Guards {
    fn default() -> Self {
        Guards {
            failsafe: true,
            echo_followup: true,
            fastpath: true,
            duplicates: true,
            overlap: true,
            verbatim: true,
            prior_context: true,
            summary_cap: true,
        }
    }
}

impl Guards {
    /// The guards' configuration names, in the order they run.
    pub const NAMES: &'static [&'static str] = &[
        "failsafe",
        "echo_followup",
        "fastpath",
        "duplicates",
        "overlap",
        "verbatim",
        "prior_context",
        "summary_cap",
    ];

    /// Only the guards named in `names` (names from [`Guards::NAMES`]); `Err` names an unknown one.
    pub fn only(names: &[String]) -> Result<Guards, String> {
        let mut g = Guards {
            failsafe: false,
            echo_followup: false,
            fastpath: false,
            duplicates: false,
            overlap: false,
            verbatim: false,
            prior_context: false,
            summary_cap: false,
        };
        for name in names {
            let flag = match name.as_str() {
                "failsafe" => &mut g.failsafe,
                "echo_followup" => &mut g.echo_followup,
                "fastpath" => &mut g.fastpath,
                "duplicates" => &mut g.duplicates,
                "overlap" => &mut g.overlap,
                "verbatim" => &mut g.verbatim,
                "prior_context" => &mut g.prior_context,
                "summary_cap" => &mut g.summary_cap,
                other => {
                    return Err(format!("unknown guard `{other}`; guards: {}", Guards::NAMES.join(", ")));
                }
            };
            *flag = true;
        }
        Ok(g)
    }
}

/// The guards' view of the turn.
#[derive(Debug, Clone, Copy)]
pub struct RoutingInput<'a> {
    /// What the user typed, exactly.
    pub message: &'a str,
    /// The previous turn, if any.
    pub previous: Option<&'a PreviousTurn>,
    /// Which tools are special.
    pub roles: &'a Roles,
    /// Which guards run.
    pub guards: &'a Guards,
    /// What counts as smalltalk.
    pub smalltalk: &'a Lexicon,
    /// What the user's attached image shows, when the client said.
    pub image: Option<ImageKind>,
    /// Whether the user attached an image at all (of a known kind or not).
    pub attached: bool,
}

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

/// Whether `message` is a short reply answering the previous turn's support question: a pick of
/// an option it offered (by number or label), a yes or no, one of the options the question named
/// or words of its own (every topic word of a
/// question-marked reply is the question's), or the thing it asked for (a reply that shares a
/// word with it: "from the Target store" to "which store?"). A reply that asks something new
/// ("what deals at FreshMart?") is not an answer, whatever word it shares.
fn echoes_support_question(input: &RoutingInput<'_>) -> Option<String> {
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

/// Whether a direct answer (no call) to `input.message` would be refused: the fastpath guard
/// runs and the message is not smalltalk, or has an image. An echo follow-up is re-asked like
/// any other message, so the model's call carries what it knows (the support category); the
/// guards route it only if the re-ask makes no call. The routing policy re-asks the model
/// before [`apply_guards`] falls back.
pub fn refuses_direct_answer(input: &RoutingInput<'_>) -> bool {
    input.guards.fastpath && (input.attached || input.smalltalk.classify(input.message).is_none())
}

/// Whether `query` is `message` followed only by bracketed notes, as Baton hands a message to the
/// model ("thanks!\n[The user attached an image: …]"): then it is the user's exact text.
fn is_message_with_notes(query: &str, message: &str) -> bool {
    let mut rest = query.trim();
    let mut noted = false;
    while let Some(open) = rest.strip_suffix(']').and_then(|r| r.rfind('[')) {
        rest = rest[..open].trim_end();
        noted = true;
    }
    noted && normalize(rest) == normalize(message)
}

/// Applies the guards to the model's calls. An empty result means a direct answer is kept.
pub fn apply_guards(
    input: &RoutingInput<'_>,
    calls: Vec<PlannedCall>,
) -> (Vec<PlannedCall>, Vec<GuardAction>) {
    let mut actions = Vec::new();
    let message = input.message.trim();

    let mut unique: Vec<PlannedCall> = Vec::with_capacity(calls.len());
    for call in calls {
        let dup = input.guards.duplicates && unique.iter().any(|c| c.key() == call.key());
        if dup {
            actions.push(GuardAction::DuplicateRemoved { tool: call.tool });
        } else {
            unique.push(call);
        }
    }

    let echo = input.guards.echo_followup.then(|| echoes_support_question(input)).flatten();
    if let (Some(question), Some(followup)) = (echo, input.roles.followup_tool.as_deref()) {
        // The model's own follow-up call, if it made one, keeps everything it gave.
        let own = unique.iter().position(|c| c.tool == followup);
        let already = unique.len() == 1 && own.is_some();
        let mut call = match own {
            Some(i) => unique.swap_remove(i),
            None => PlannedCall::from_arguments(followup, serde_json::json!({"intent_count": 1}), message),
        };
        if !already {
            actions.push(GuardAction::EchoFollowup);
            if let Some(obj) = call.arguments.as_object_mut() {
                obj.insert("intent_count".into(), 1.into());
            }
        }
        if call.prior_context.is_none() {
            let agent = input.roles.followup_agent.as_deref().unwrap_or("follow-up");
            call.set_prior_context(format!("The {agent} agent had asked: {question}"));
        }
        return finish(input, vec![call], actions, None);
    }

    if unique.is_empty() {
        // An image of a kind that has an agent goes to it, smalltalk or not ("here you go" with
        // a receipt is a receipt question).
        let by_image = input.image.and_then(|kind| input.roles.images.iter().find(|(k, ..)| *k == kind));
        if let Some((kind, tool, agent)) = by_image {
            actions.push(GuardAction::ImageRouted { image: *kind, tool: tool.clone() });
            let call = PlannedCall::from_arguments(tool, serde_json::json!({"intent_count": 1}), message);
            return finish(input, vec![call], actions, Some(agent.as_str()));
        }
        if !input.guards.fastpath || (!input.attached && input.smalltalk.classify(message).is_some()) {
            return (unique, actions);
        }
        actions.push(GuardAction::FastpathRejected);
        let fallback = input.roles.fallback_tool.as_str();
        let call = PlannedCall::from_arguments(fallback, serde_json::json!({"intent_count": 1}), message);
        let agent = input.roles.fallback_agent.clone();
        return finish(input, vec![call], actions, Some(agent.as_str()));
    }

    // A call the model itself counted as an intent is kept even without overlap (its query may
    // have been rewritten; the verbatim rule repairs it): only calls beyond the reported intent
    // count are candidates for dropping.
    let reported = unique.iter().filter_map(PlannedCall::intent_count).max().unwrap_or(1);
    if input.guards.overlap && unique.len() > 1 && reported < unique.len() {
        let said = TopicWords::of(message);
        let overlapping: Vec<bool> =
            unique.iter().map(|c| TopicWords::of(&c.query).overlaps(&said)).collect();
        if overlapping.contains(&true) {
            // `retain` visits the calls once each, in order: one flag per call.
            let mut overlapping = overlapping.into_iter();
            unique.retain(|c| {
                let keep = overlapping.next() == Some(true);
                if !keep {
                    actions
                        .push(GuardAction::NoOverlapDropped { tool: c.tool.clone(), query: c.query.clone() });
                }
                keep
            });
        }
    }
    finish(input, unique, actions, None)
}

/// Verbatim rules, prior context and the summary cap. `made_for`: the agent a call code made
/// instead of a direct answer is for (it gets the previous turn on a switch, as the follow-up
/// agent's calls do).
fn finish(
    input: &RoutingInput<'_>,
    mut calls: Vec<PlannedCall>,
    mut actions: Vec<GuardAction>,
    made_for: Option<&str>,
) -> (Vec<PlannedCall>, Vec<GuardAction>) {
    let message = input.message.trim();
    let short = words(message).len() <= 4;
    let single = calls.len() == 1;
    // The message's and its clauses' topic words, each computed once for all the calls, and
    // only when a call's query may be the user's own words or one of its clauses.
    let (said, clauses) = if input.guards.verbatim && !(single || short) {
        let clauses: Vec<(&str, TopicWords)> =
            text::clauses(message).into_iter().map(|c| (c, TopicWords::of(c))).collect();
        (TopicWords::of(message), clauses)
    } else {
        (TopicWords::default(), Vec::new())
    };
    for call in &mut calls {
        if input.guards.verbatim {
            let query = if single || short || is_message_with_notes(&call.query, message) {
                message
            } else {
                let asked = TopicWords::of(&call.query);
                if asked.all_in(&said) {
                    call.query.as_str()
                } else {
                    users_clause(&asked, &clauses).unwrap_or(message)
                }
            };
            if call.query != query {
                actions.push(GuardAction::QueryVerbatim { tool: call.tool.clone(), was: call.query.clone() });
                let query = query.to_owned();
                call.set_query(&query);
            }
        }
        call.set_argument("query", &call.query.clone());
        let followup = input.roles.followup_tool.as_deref() == Some(call.tool.as_str());
        let switch_agent = if followup { input.roles.followup_agent.as_deref() } else { made_for };
        if input.guards.prior_context {
            if let Some(agent) = switch_agent {
                fill_prior_context(input, agent, call, &mut actions);
            }
        }
        if followup && input.guards.summary_cap {
            if let Some(argument) = input.roles.summary_argument.as_deref() {
                cap_summary(call, argument, &mut actions);
            }
        }
    }
    (calls, actions)
}

/// The user's clause that shares the most topic words with `query` (the first of equals), if any
/// shares one.
fn users_clause<'m>(query: &TopicWords, clauses: &[(&'m str, TopicWords)]) -> Option<&'m str> {
    let mut best: Option<(usize, &str)> = None;
    for (clause, words) in clauses {
        let shared = words.shared_with(query);
        if shared > 0 && best.is_none_or(|(most, _)| shared > most) {
            best = Some((shared, clause));
        }
    }
    best.map(|(_, clause)| clause)
}

/// Gives `call` (for `agent`) the previous turn as prior context when the user switched to
/// `agent` (it did not answer the previous turn) and the model gave none.
fn fill_prior_context(
    input: &RoutingInput<'_>,
    agent: &str,
    call: &mut PlannedCall,
    actions: &mut Vec<GuardAction>,
) {
    let Some(previous) = input.previous else { return };
    let switched = !previous.replies.is_empty() && previous.reply_of(agent).is_none();
    if !switched || call.prior_context.is_some() {
        return;
    }
    let mut context = format!("Earlier the user said: \"{}\".", previous.user_message.trim());
    // The first reply of an agent the turn called (the entry agent's own preamble is first).
    if let Some(reply) = previous.replies.iter().find(|r| r.agent != input.roles.own_agent) {
        let answer: String = reply.text.chars().take(300).collect();
        context.push_str(&format!(" The {} agent answered: \"{}\".", reply.agent, answer.trim()));
    }
    call.set_prior_context(context);
    actions.push(GuardAction::PriorContextFilled { tool: call.tool.clone() });
}

fn cap_summary(call: &mut PlannedCall, argument: &str, actions: &mut Vec<GuardAction>) {
    let Some(Value::String(summary)) = call.arguments.get_mut(argument) else { return };
    if let Some((cut, _)) = summary.char_indices().nth(SUMMARY_MAX_CHARS) {
        summary.truncate(cut);
        actions.push(GuardAction::SummaryCapped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::PriorReply;

    const ASK_SUPPORT: &str = "ask_support";
    const ASK_SHOPPING: &str = "ask_shopping";

    use serde_json::json;

    fn call(tool: &str, query: &str) -> PlannedCall {
        PlannedCall::from_arguments(tool, json!({"query": query, "intent_count": 2}), "")
    }

    fn route(message: &str, calls: Vec<PlannedCall>) -> (Vec<(String, String)>, Vec<GuardAction>) {
        let (calls, actions) = apply_guards(
            &RoutingInput {
                message,
                previous: None,
                roles: &Roles::reference(),
                guards: &Guards::default(),
                smalltalk: Lexicon::reference(),
                image: None,
                attached: false,
            },
            calls,
        );
        (calls.into_iter().map(|c| (c.tool, c.query)).collect(), actions)
    }

    fn pair(tool: &str, query: &str) -> (String, String) {
        (tool.to_owned(), query.to_owned())
    }

    #[test]
    fn duplicates_from_the_llama_capture_are_removed() {
        let junk = "<name>query</name>\n<type>string</type>";
        let msg = "my receipt didn't scan and find me coffee deals";
        let (calls, actions) =
            route(msg, vec![call(ASK_SUPPORT, junk), call(ASK_SHOPPING, junk), call(ASK_SHOPPING, junk)]);
        assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, msg)]);
        assert!(actions.contains(&GuardAction::DuplicateRemoved { tool: ASK_SHOPPING.into() }));
    }

    #[test]
    fn a_mixed_call_unrelated_to_the_message_is_dropped() {
        // The model invents a second call beyond the one intent it reports; once it is dropped,
        // the single call gets the exact text.
        let msg = "where are my points from the Target receipt";
        let one_intent =
            |tool, query| PlannedCall::from_arguments(tool, json!({"query": query, "intent_count": 1}), "");
        let (calls, actions) = route(
            msg,
            vec![
                one_intent(ASK_SUPPORT, "points from the Target receipt"),
                one_intent(ASK_SHOPPING, "weather forecast"),
            ],
        );
        assert_eq!(calls, [pair(ASK_SUPPORT, msg)]);
        assert!(matches!(actions[0], GuardAction::NoOverlapDropped { .. }));
    }

    #[test]
    fn a_counted_intent_with_a_rewritten_query_is_kept_and_repaired() {
        let msg = "my receipt didn't scan and find me coffee deals";
        let (calls, actions) =
            route(msg, vec![call(ASK_SUPPORT, "assist this person"), call(ASK_SHOPPING, "coffee deals")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, "coffee deals")]);
        assert!(!actions.iter().any(|a| matches!(a, GuardAction::NoOverlapDropped { .. })));
    }

    #[test]
    fn verbatim_rules() {
        // Single intent: the exact text, whatever the model wrote.
        let (calls, _) = route("Where are my points?", vec![call(ASK_SUPPORT, "user asks about points")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, "Where are my points?")]);
        // Mixed, at most four words: exact text for both.
        let (calls, _) =
            route("points and deals", vec![call(ASK_SUPPORT, "points"), call(ASK_SHOPPING, "deals")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, "points and deals"), pair(ASK_SHOPPING, "points and deals")]);
        // Mixed and longer: the model's split where it overlaps.
        let msg = "my receipt didn't scan and find me coffee deals";
        let (calls, _) =
            route(msg, vec![call(ASK_SUPPORT, "receipt didn't scan"), call(ASK_SHOPPING, "coffee deals")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, "receipt didn't scan"), pair(ASK_SHOPPING, "coffee deals")]);
    }

    #[test]
    fn fastpath_is_kept_only_for_smalltalk() {
        assert_eq!(route("thanks!", vec![]), (vec![], vec![]));
        let (calls, actions) = route("what's the return policy for shoes", vec![]);
        assert_eq!(calls, [pair(ASK_SHOPPING, "what's the return policy for shoes")]);
        assert_eq!(actions, [GuardAction::FastpathRejected]);
    }

    #[test]
    fn a_short_echo_of_a_support_question_goes_to_support() {
        let previous = PreviousTurn {
            user_message: "my receipt didn't scan".into(),
            replies: vec![PriorReply {
                agent: "support".into(),
                text: "Sorry! Was it a paper receipt or an e-receipt?".into(),
                ..Default::default()
            }],
        };
        let input = RoutingInput {
            message: "an e-receipt",
            previous: Some(&previous),
            roles: &Roles::reference(),
            guards: &Guards::default(),
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        };
        let (calls, actions) = apply_guards(&input, vec![call(ASK_SHOPPING, "e-receipt deals")]);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (ASK_SUPPORT, "an e-receipt"));
        assert!(calls[0].prior_context.as_deref().unwrap().contains("paper receipt"));
        assert_eq!(actions[0], GuardAction::EchoFollowup);
        // "thanks" after the same question is an acknowledgement, not an echo.
        let ack = RoutingInput {
            message: "thanks",
            previous: Some(&previous),
            roles: &Roles::reference(),
            guards: &Guards::default(),
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        };
        assert_eq!(apply_guards(&ack, vec![]).0, vec![]);
    }

    #[test]
    fn an_intent_switch_to_support_fills_prior_context() {
        let previous = PreviousTurn {
            user_message: "find me coffee deals".into(),
            replies: vec![PriorReply {
                agent: "shopping".into(),
                text: "2x points on Brand A coffee.".into(),
                ..Default::default()
            }],
        };
        let input = RoutingInput {
            message: "I bought it but got no points",
            previous: Some(&previous),
            roles: &Roles::reference(),
            guards: &Guards::default(),
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        };
        let (calls, actions) = apply_guards(&input, vec![call(ASK_SUPPORT, "no points")]);
        let context = calls[0].prior_context.as_deref().unwrap();
        assert!(context.contains("find me coffee deals") && context.contains("Brand A"), "{context}");
        assert_eq!(calls[0].arguments["prior_context"], context);
        assert!(actions.contains(&GuardAction::PriorContextFilled { tool: ASK_SUPPORT.into() }));
    }

    #[test]
    fn support_summary_is_capped() {
        let mut c = call(ASK_SUPPORT, "points");
        c.arguments["support_summary"] = json!("é".repeat(400));
        let (calls, actions) = apply_guards(
            &RoutingInput {
                message: "points",
                previous: None,
                roles: &Roles::reference(),
                guards: &Guards::default(),
                smalltalk: Lexicon::reference(),
                image: None,
                attached: false,
            },
            vec![c],
        );
        assert_eq!(calls[0].arguments["support_summary"].as_str().unwrap().chars().count(), 300);
        assert!(actions.contains(&GuardAction::SummaryCapped));
    }

    #[test]
    fn a_direct_answer_with_a_classified_image_goes_to_the_agent_of_its_kind() {
        for (kind, tool) in [(ImageKind::Receipt, ASK_SUPPORT), (ImageKind::Product, ASK_SHOPPING)] {
            // Smalltalk words too: the image is the question.
            for message in ["thanks!", "what is this worth"] {
                let input = RoutingInput { image: Some(kind), attached: true, ..input(message, None) };
                let (calls, actions) = apply_guards(&input, vec![]);
                assert_eq!(calls.len(), 1, "{kind:?} {message}");
                assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (tool, message));
                assert_eq!(actions, [GuardAction::ImageRouted { image: kind, tool: tool.into() }]);
            }
        }
        // An image of no configured kind is not smalltalk either: it goes to the fallback agent.
        let other = RoutingInput { image: Some(ImageKind::Other), attached: true, ..input("thanks!", None) };
        let (calls, actions) = apply_guards(&other, vec![]);
        assert_eq!(calls[0].tool, ASK_SHOPPING);
        assert_eq!(actions, [GuardAction::FastpathRejected]);
        // The model's own calls stand whatever the image.
        let called = RoutingInput {
            image: Some(ImageKind::Receipt),
            attached: true,
            ..input("find deals on this", None)
        };
        let (calls, _) = apply_guards(&called, vec![call(ASK_SHOPPING, "find deals on this")]);
        assert_eq!(calls[0].tool, ASK_SHOPPING);
    }

    fn input<'a>(message: &'a str, previous: Option<&'a PreviousTurn>) -> RoutingInput<'a> {
        static ROLES: std::sync::LazyLock<Roles> = std::sync::LazyLock::new(Roles::reference);
        static GUARDS: std::sync::LazyLock<Guards> = std::sync::LazyLock::new(Guards::default);
        RoutingInput {
            message,
            previous,
            roles: &ROLES,
            guards: &GUARDS,
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        }
    }

    fn support_asked(question: &str) -> PreviousTurn {
        PreviousTurn {
            user_message: "my receipt didn't scan".into(),
            replies: vec![PriorReply {
                agent: "support".into(),
                text: question.into(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn duplicates_go_first_so_an_echo_keeps_the_models_fields() {
        let previous = support_asked("Was it a paper receipt or an e-receipt?");
        let model = || {
            PlannedCall::from_arguments(
                ASK_SUPPORT,
                json!({"query": "paper receipt", "intent_count": 1, "support_category": "ereceipts",
                       "support_summary": "receipt did not scan"}),
                "",
            )
        };
        let (calls, actions) =
            apply_guards(&input("the paper one", Some(&previous)), vec![model(), model(), model()]);
        assert_eq!(calls.len(), 1);
        let args = &calls[0].arguments;
        assert_eq!(args["support_category"], "ereceipts");
        assert_eq!(args["support_summary"], "receipt did not scan");
        assert_eq!(args["query"], "the paper one");
        assert!(args["prior_context"].as_str().unwrap().contains("paper receipt or an e-receipt"));
        assert!(!actions.contains(&GuardAction::EchoFollowup), "the model did route it: {actions:?}");
        assert_eq!(actions.iter().filter(|a| matches!(a, GuardAction::DuplicateRemoved { .. })).count(), 2);
    }

    #[test]
    fn an_echo_rerouted_from_another_tool_keeps_the_models_support_fields() {
        let previous = support_asked("Was it a paper receipt or an e-receipt?");
        let calls = vec![
            PlannedCall::from_arguments(ASK_SHOPPING, json!({"query": "paper deals", "intent_count": 2}), ""),
            PlannedCall::from_arguments(
                ASK_SUPPORT,
                json!({"query": "paper", "intent_count": 2, "support_category": "ereceipts",
                       "prior_context": "asked paper or e-receipt"}),
                "",
            ),
        ];
        let (calls, actions) = apply_guards(&input("the paper one", Some(&previous)), calls);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments["support_category"], "ereceipts");
        assert_eq!(calls[0].arguments["prior_context"], "asked paper or e-receipt", "the model's own");
        assert_eq!(calls[0].arguments["intent_count"], 1);
        assert_eq!(actions[0], GuardAction::EchoFollowup);
    }

    #[test]
    fn a_paraphrase_sharing_one_word_gets_the_users_own_clause() {
        let msg = "my referral bonus never showed up and find me toothpaste deals";
        let paraphrase = call(ASK_SUPPORT, "user's friend bonus was never credited");
        let (calls, actions) = route(msg, vec![paraphrase, call(ASK_SHOPPING, "toothpaste deals")]);
        assert_eq!(
            calls,
            [pair(ASK_SUPPORT, "my referral bonus never showed up"), pair(ASK_SHOPPING, "toothpaste deals")]
        );
        assert!(matches!(&actions[0], GuardAction::QueryVerbatim { was, .. } if was.contains("credited")));
    }

    #[test]
    fn a_split_in_the_users_words_is_kept_whatever_its_inflection() {
        let msg = "my receipts never scanned and find me coffee deals";
        let (calls, actions) =
            route(msg, vec![call(ASK_SUPPORT, "receipt didn't scan"), call(ASK_SHOPPING, "coffee deal")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, "receipt didn't scan"), pair(ASK_SHOPPING, "coffee deal")]);
        assert!(actions.is_empty(), "{actions:?}");
    }

    #[test]
    fn a_split_with_no_clause_of_its_own_gets_the_whole_message() {
        let msg = "my receipt didn't scan and find me coffee deals";
        let (calls, _) =
            route(msg, vec![call(ASK_SUPPORT, "assist this person"), call(ASK_SHOPPING, "coffee deals")]);
        assert_eq!(calls[0], pair(ASK_SUPPORT, msg));
    }

    #[test]
    fn a_refused_direct_answer_after_a_switch_gets_the_previous_turn() {
        let previous = PreviousTurn {
            user_message: "where are my points".into(),
            replies: vec![PriorReply {
                agent: "support".into(),
                text: "They post within 48 hours.".into(),
                ..Default::default()
            }],
        };
        let (calls, actions) = apply_guards(&input("then find me snack deals", Some(&previous)), vec![]);
        assert_eq!(calls[0].tool, ASK_SHOPPING);
        let context = calls[0].arguments["prior_context"].as_str().unwrap();
        assert!(context.contains("where are my points") && context.contains("48 hours"), "{context}");
        assert!(actions.contains(&GuardAction::PriorContextFilled { tool: ASK_SHOPPING.into() }));
        // Without a switch (shopping answered before), nothing is added.
        let same = PreviousTurn {
            user_message: "coffee deals".into(),
            replies: vec![PriorReply {
                agent: "shopping".into(),
                text: "Brand A.".into(),
                ..Default::default()
            }],
        };
        let (calls, _) = apply_guards(&input("then find me snack deals", Some(&same)), vec![]);
        assert_eq!(calls[0].prior_context, None);
    }

    #[test]
    fn only_a_real_request_or_an_image_answered_directly_is_refused() {
        assert!(refuses_direct_answer(&input("hi, where are my points?", None)));
        assert!(!refuses_direct_answer(&input("hola, ¿qué tal?", None)));
        assert!(!refuses_direct_answer(&input("👍", None)));
        assert!(refuses_direct_answer(&RoutingInput { attached: true, ..input("thanks!", None) }));
    }

    #[test]
    fn a_direct_answer_to_an_echo_reply_is_reasked_like_any_other() {
        // So the model's call carries what it knows (the category); the echo rule is the last resort.
        let previous = support_asked("Was it a paper receipt or an e-receipt?");
        assert!(refuses_direct_answer(&input("the paper one", Some(&previous))));
        let (calls, actions) = apply_guards(&input("the paper one", Some(&previous)), vec![]);
        assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (ASK_SUPPORT, "the paper one"));
        assert_eq!(actions[0], GuardAction::EchoFollowup);
    }

    #[test]
    fn a_reply_that_asks_something_new_keeps_the_models_call() {
        let previous = support_asked("Which store was it, FreshMart?");
        for message in ["what deals at FreshMart?", "deals at FreshMart?", "any FreshMart coupons"] {
            let (calls, actions) =
                apply_guards(&input(message, Some(&previous)), vec![call(ASK_SHOPPING, message)]);
            assert_eq!(calls.len(), 1, "{message}");
            assert_eq!(calls[0].tool, ASK_SHOPPING, "{message}");
            assert!(!actions.contains(&GuardAction::EchoFollowup), "{message}: {actions:?}");
        }
        // The answer it asked for still goes back to support.
        let (calls, _) =
            apply_guards(&input("FreshMart", Some(&previous)), vec![call(ASK_SHOPPING, "FreshMart")]);
        assert_eq!(calls[0].tool, ASK_SUPPORT);
    }

    #[test]
    fn echo_corpus() {
        #[derive(serde::Deserialize)]
        struct Reply {
            question: String,
            reply: String,
            echo: bool,
        }
        let corpus: Vec<Reply> =
            serde_yaml_ng::from_str(include_str!("../../../data/routing/echo-corpus.yaml")).unwrap();
        assert!(
            corpus.iter().filter(|r| r.echo).count() >= 15 && corpus.iter().filter(|r| !r.echo).count() >= 15
        );
        for r in &corpus {
            let previous = support_asked(&r.question);
            let echo = echoes_support_question(&input(&r.reply, Some(&previous))).is_some();
            assert_eq!(echo, r.echo, "{:?} after {:?}", r.reply, r.question);
        }
    }

    #[test]
    fn a_query_that_is_the_message_plus_batons_image_note_is_the_users_exact_text() {
        let msg = "my receipt didn't scan and find me coffee deals";
        let noted = format!("{msg}\n[The user attached an image of a receipt: a Kroger receipt]");
        let (calls, actions) =
            route(msg, vec![call(ASK_SUPPORT, &noted), call(ASK_SHOPPING, "find me coffee deals")]);
        assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, "find me coffee deals")]);
        assert!(matches!(&actions[0], GuardAction::QueryVerbatim { was, .. } if was.contains("[The user")));
        assert!(is_message_with_notes(&format!("{msg} [note one] [note two]"), msg));
        assert!(!is_message_with_notes(msg, msg), "no note: an ordinary query");
        assert!(!is_message_with_notes("coffee deals [The user attached an image.]", msg));
    }
}
