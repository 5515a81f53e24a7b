//! Routing guards that catch orchestrator-model mistakes in code (DESIGN.md §4 steps 4–5).
//!
//! Pure functions over the model's planned calls, applied in this order by [`apply_guards`]:
//! 1. **Echo follow-up**: a short reply that echoes the previous support question goes to support.
//! 2. **Fastpath allowlist**: a direct answer (no call) is kept only for greetings,
//!    acknowledgements and chitchat ([`classify_smalltalk`]); anything else goes to shopping.
//! 3. **Duplicates**: the same tool with the same query counts once.
//! 4. **Overlap** (mixed turns): a call whose query shares no content word with the user's message
//!    is dropped when the model made more calls than the intents it reported (a hallucinated
//!    extra call). A call within the reported count is kept and its query repaired by the verbatim
//!    rule instead: dropping it would lose an intent whose query the model merely rewrote. Nothing
//!    is dropped when no call overlaps at all.
//! 5. **Verbatim**: one call gets the user's exact text; in a mixed turn a message of at most four
//!    words goes verbatim to every call, and a longer one keeps the model's split where it overlaps.
//! 6. **Prior context**: a support call after a turn that support did not answer (an intent switch)
//!    gets the previous turn as `prior_context` when the model gave none.
//! 7. `support_summary` is capped at 300 characters.
//!
//! Each repair is reported as a [`GuardAction`], so routing mistakes are visible in tracing and in
//! the routing evaluation.

use serde_json::Value;

use crate::conversation::PreviousTurn;
use crate::text::{Smalltalk, classify_smalltalk, normalize, overlaps, words};

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

    /// The call's `intent_count`, if the model gave a sensible one.
    pub fn intent_count(&self) -> Option<usize> {
        self.arguments.get("intent_count").and_then(Value::as_u64).map(|n| n as usize).filter(|n| *n >= 1)
    }
}

/// A repair a guard made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardAction {
    /// A short reply to a support question was sent to support.
    EchoFollowup,
    /// A direct answer to a real question was replaced by a shopping call.
    FastpathRejected,
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
    /// `support_summary` was cut to 300 characters.
    SummaryCapped,
    /// A `support_category` outside the configured list (or on a tool that takes none) was
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

/// The longest `support_summary` kept.
pub const SUPPORT_SUMMARY_MAX_CHARS: usize = 300;

/// Which routing tools the guards treat specially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    /// The follow-up agent's tool (`ask_support`): echo follow-ups go to it, prior context is
    /// filled on a switch to it, its summary is capped.
    pub followup_tool: Option<String>,
    /// The follow-up agent's name, as the previous turn's replies name it (`support`).
    pub followup_agent: Option<String>,
    /// Where a refused direct answer goes (`ask_shopping`).
    pub fallback_tool: String,
    /// The routing agent's own name, as the previous turn's replies name it (`orchestrator`).
    pub own_agent: String,
}

impl Roles {
    /// The reference roles: `ask_support` (agent `support`) for follow-ups, `ask_shopping` as
    /// the fallback, `orchestrator` routing.
    pub fn reference() -> Roles {
        Roles {
            followup_tool: Some("ask_support".into()),
            followup_agent: Some("support".into()),
            fallback_tool: "ask_shopping".into(),
            own_agent: "orchestrator".into(),
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
    /// `support_summary` is capped.
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
}

/// Whether `message` is a short reply echoing the previous turn's support question.
fn echoes_support_question(input: &RoutingInput<'_>) -> Option<String> {
    let question = input.previous?.reply_of(input.roles.followup_agent.as_deref()?)?.trim();
    if !question.ends_with('?') || words(input.message).len() > 6 {
        return None;
    }
    if classify_smalltalk(input.message) == Some(Smalltalk::Acknowledgement) {
        return None;
    }
    // The question's last sentence is what the user answers.
    let last = question.trim_end_matches('?').rsplit(['.', '!', '?', '\n']).next().unwrap_or(question);
    let answer_words = ["yes", "no", "yeah", "yep", "nope", "correct", "right", "both", "neither"];
    let is_answer = words(input.message).iter().any(|w| answer_words.contains(&w.as_str()));
    (is_answer || overlaps(input.message, last)).then(|| question.to_owned())
}

/// Applies the guards to the model's calls. An empty result means a direct answer is kept.
pub fn apply_guards(
    input: &RoutingInput<'_>,
    calls: Vec<PlannedCall>,
) -> (Vec<PlannedCall>, Vec<GuardAction>) {
    let mut actions = Vec::new();
    let message = input.message.trim();

    let echo = input.guards.echo_followup.then(|| echoes_support_question(input)).flatten();
    if let (Some(question), Some(followup)) = (echo, input.roles.followup_tool.as_deref()) {
        let already = calls.len() == 1 && calls[0].tool == followup;
        if !already {
            actions.push(GuardAction::EchoFollowup);
        }
        let mut call = PlannedCall::from_arguments(followup, serde_json::json!({"intent_count": 1}), message);
        call.prior_context = Some(format!("The support agent had asked: {question}"));
        if already {
            call.arguments = calls[0].arguments.clone();
        }
        return finish(input, vec![call], actions);
    }

    if calls.is_empty() {
        if !input.guards.fastpath || classify_smalltalk(message).is_some() {
            return (calls, actions);
        }
        actions.push(GuardAction::FastpathRejected);
        let fallback = input.roles.fallback_tool.as_str();
        let call = PlannedCall::from_arguments(fallback, serde_json::json!({"intent_count": 1}), message);
        return finish(input, vec![call], actions);
    }

    let mut unique: Vec<PlannedCall> = Vec::with_capacity(calls.len());
    for call in calls {
        let dup = input.guards.duplicates
            && unique.iter().any(|c| c.tool == call.tool && normalize(&c.query) == normalize(&call.query));
        if dup {
            actions.push(GuardAction::DuplicateRemoved { tool: call.tool });
        } else {
            unique.push(call);
        }
    }

    // A call the model itself counted as an intent is kept even without overlap (its query may
    // have been rewritten; the verbatim rule repairs it): only calls beyond the reported intent
    // count are candidates for dropping.
    let reported = unique.iter().filter_map(PlannedCall::intent_count).max().unwrap_or(1);
    if input.guards.overlap
        && unique.len() > 1
        && reported < unique.len()
        && unique.iter().any(|c| overlaps(&c.query, message))
    {
        unique.retain(|c| {
            let keep = overlaps(&c.query, message);
            if !keep {
                actions.push(GuardAction::NoOverlapDropped { tool: c.tool.clone(), query: c.query.clone() });
            }
            keep
        });
    }
    finish(input, unique, actions)
}

/// Verbatim rules, prior context and the summary cap.
fn finish(
    input: &RoutingInput<'_>,
    mut calls: Vec<PlannedCall>,
    mut actions: Vec<GuardAction>,
) -> (Vec<PlannedCall>, Vec<GuardAction>) {
    let message = input.message.trim();
    let short = words(message).len() <= 4;
    let single = calls.len() == 1;
    for call in &mut calls {
        let verbatim = input.guards.verbatim && (single || short || !overlaps(&call.query, message));
        if verbatim && call.query != message {
            actions.push(GuardAction::QueryVerbatim { tool: call.tool.clone(), was: call.query.clone() });
            call.query = message.to_owned();
        }
        if let Some(obj) = call.arguments.as_object_mut() {
            obj.insert("query".into(), Value::String(call.query.clone()));
        }
        if input.roles.followup_tool.as_deref() == Some(call.tool.as_str()) {
            if input.guards.prior_context {
                fill_prior_context(input, call, &mut actions);
            }
            if input.guards.summary_cap {
                cap_summary(call, &mut actions);
            }
        }
    }
    (calls, actions)
}

fn fill_prior_context(input: &RoutingInput<'_>, call: &mut PlannedCall, actions: &mut Vec<GuardAction>) {
    let Some(previous) = input.previous else { return };
    let Some(followup) = input.roles.followup_agent.as_deref() else { return };
    let switched = !previous.replies.is_empty() && previous.reply_of(followup).is_none();
    if !switched || call.prior_context.is_some() {
        return;
    }
    let mut context = format!("Earlier the user said: \"{}\".", previous.user_message.trim());
    // The first reply of an agent the turn called (the entry agent's own preamble is first).
    if let Some(reply) = previous.replies.iter().find(|r| r.agent != input.roles.own_agent) {
        let answer: String = reply.text.chars().take(300).collect();
        context.push_str(&format!(" The {} agent answered: \"{}\".", reply.agent, answer.trim()));
    }
    call.prior_context = Some(context.clone());
    if let Some(obj) = call.arguments.as_object_mut() {
        obj.insert("prior_context".into(), Value::String(context));
    }
    actions.push(GuardAction::PriorContextFilled { tool: call.tool.clone() });
}

fn cap_summary(call: &mut PlannedCall, actions: &mut Vec<GuardAction>) {
    let Some(Value::String(summary)) = call.arguments.get_mut("support_summary") else { return };
    if let Some((cut, _)) = summary.char_indices().nth(SUPPORT_SUMMARY_MAX_CHARS) {
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
            &RoutingInput { message, previous: None, roles: &Roles::reference(), guards: &Guards::default() },
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
            }],
        };
        let input = RoutingInput {
            message: "an e-receipt",
            previous: Some(&previous),
            roles: &Roles::reference(),
            guards: &Guards::default(),
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
            }],
        };
        let input = RoutingInput {
            message: "I bought it but got no points",
            previous: Some(&previous),
            roles: &Roles::reference(),
            guards: &Guards::default(),
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
            },
            vec![c],
        );
        assert_eq!(calls[0].arguments["support_summary"].as_str().unwrap().chars().count(), 300);
        assert!(actions.contains(&GuardAction::SummaryCapped));
    }
}
