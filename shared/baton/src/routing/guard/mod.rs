//! Routing guards that catch orchestrator-model mistakes in code (`docs/routing.md`).
//!
//! Pure functions over the model's planned calls, applied in this order by `apply_guards`:
//! 1. **Duplicates**: the same tool with the same query counts once. This runs first, so a rule
//!    that rewrites a call below finds the model's call once, with every field it gave.
//! 2. **Echo follow-up**: a short reply that answers the follow-up agent's previous question (a
//!    pick of the options it offered, a yes or no, the question's words, the thing it asked for;
//!    never a reply that asks something new) goes back to it. The model's own call to it is kept
//!    (its category, summary, prior context); only what the rule needs changes.
//! 3. **Fastpath allowlist**: a direct answer (no call) is kept only for smalltalk, recognised by
//!    type ([`Lexicon::classify`]), with no image attached; anything else goes to the fallback
//!    agent. (The routing policy first re-asks the model, echo replies included, see
//!    `refuses_direct_answer`; this is the last resort.)
//! 4. **Overlap** (mixed turns): a call whose query shares no content word with the user's message
//!    is dropped when the model made more calls than the intents it reported (a hallucinated
//!    extra call). A call within the reported count is kept and its query repaired by the verbatim
//!    rule instead: dropping it would lose an intent whose query the model merely rewrote. Nothing
//!    is dropped when no call overlaps at all.
//! 5. **Verbatim**: one call gets the user's exact text; in a mixed turn a message of at most four
//!    words goes verbatim to every call. A longer one keeps the model's split only if it is the
//!    user's words (every content word of it is the message's, allowing inflection), else takes
//!    the user's own clause that overlaps the call most (`text::clauses`), and only then the
//!    whole message.
//! 6. **Prior context**: a call of the follow-up agent after a turn it did not answer (an intent switch)
//!    gets the previous turn as `prior_context` when the model gave none; so does a call code
//!    made for a refused direct answer after a switch.
//! 7. The follow-up tool's summary argument is capped at 300 characters.
//!
//! A rule that rewrites a call changes only the fields it must: every other argument the model
//! gave reaches the agent. Each repair is reported as a [`GuardAction`], so routing mistakes are
//! visible in tracing and in the routing evaluation.

mod echo;

use serde_json::Value;

use crate::conversation::PreviousTurn;
use crate::image::ImageKind;
use crate::text::{self, Lexicon, TopicWords, normalize, words};

/// A sub-agent call the orchestrator will make.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// The routing tool (`ask_<agent>`).
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
    pub(crate) fn set_query(&mut self, query: &str) {
        self.query = query.to_owned();
        self.set_argument("query", query);
    }

    /// Sets the prior context, in the arguments too.
    pub(crate) fn set_prior_context(&mut self, context: String) {
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
    pub(crate) fn key(&self) -> (&str, String) {
        (self.tool.as_str(), normalize(&self.query))
    }

    /// The call's `intent_count`, if the model gave a sensible one.
    pub(crate) fn intent_count(&self) -> Option<usize> {
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
    pub(crate) fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v["repair"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// The longest summary argument kept.
pub(crate) const SUMMARY_MAX_CHARS: usize = 300;

/// Which routing tools the guards treat specially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Roles {
    /// The follow-up agent's tool (`ask_<agent>`): echo follow-ups go to it, prior context is
    /// filled on a switch to it, its summary is capped.
    pub followup_tool: Option<String>,
    /// The follow-up agent's name, as the previous turn's replies name it.
    pub followup_agent: Option<String>,
    /// The follow-up tool's summary argument (`<agent>_summary` by default), which the guards cap.
    pub summary_argument: Option<String>,
    /// Where a refused direct answer goes (`ask_<agent>`).
    pub fallback_tool: String,
    /// The fallback agent's name, as the previous turn's replies name it.
    pub fallback_agent: String,
    /// The routing agent's own name, as the previous turn's replies name it (`orchestrator`).
    pub own_agent: String,
    /// Where a direct answer goes when the user attached an image of a known kind: the kind,
    /// the tool, the agent (`receipt` → `ask_billing`, `billing`).
    pub images: Vec<(ImageKind, String, String)>,
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
    pub(crate) const NAMES: &'static [&'static str] = &[
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
    pub(crate) fn only(names: &[String]) -> Result<Guards, String> {
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
pub(crate) struct RoutingInput<'a> {
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

/// Whether a direct answer (no call) to `input.message` would be refused: the fastpath guard
/// runs and the message is not smalltalk, or has an image. An echo follow-up is re-asked like
/// any other message, so the model's call carries what it knows (the follow-up agent's category); the
/// guards route it only if the re-ask makes no call. The routing policy re-asks the model
/// before [`apply_guards`] falls back.
pub(crate) fn refuses_direct_answer(input: &RoutingInput<'_>) -> bool {
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
pub(crate) fn apply_guards(
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

    let echo = input.guards.echo_followup.then(|| echo::echoes_followup_question(input)).flatten();
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
mod tests;
