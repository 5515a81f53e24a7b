//! Routing evaluation: a scenario suite run through the [`Router`], scored per category, and a
//! fault-injecting scripted model that measures what the failsafe and guards recover. The same
//! suites, scoring and report also play any configuration's scenarios as full turns ([`turns`]).
//!
//! A scenario is a user message (with an optional previous turn and image) and the calls it should
//! produce. Scoring compares the routed calls after the failsafe and guards:
//! - the tools must match as a multiset (a direct answer expects none);
//! - each query must match its expected query: equal once normalised, or containing all its topic
//!   words, invented none (every topic word is the user's), and none of another intent's;
//! - a `support_category` the call carries must be the expected one (a call without one passes,
//!   the field being optional, but only loosely);
//! - `prior_context: true` requires the support call to carry prior context about the previous
//!   turn (sharing a topic word with it); an expected call's own `prior_context` is text its
//!   prior context must contain;
//! - an expected call's `arguments` must be held by the call's (a call may carry more), and in a
//!   full turn its `agent` must be the one that made it; an empty `query` is not checked.
//!
//! Under fault injection a query that fell back to the user's whole message also counts as
//! recovered (the verbatim rule's safe fallback), and is reported apart as "recovered loosely".
//! [`correct_script`] is the scripted model that routes every scenario right: the rules must let
//! it pass the whole suite.
//!
//! This crate is linked by `routing-eval` and the scheduled eval function only, never by the chat
//! functions.
//!
//! # Layout
//! Top to bottom; a module uses modules below it (and this file's suite types), never above.
//! - this file: the suite ([`load_suite`], [`REFERENCE_SUITE`]), scoring ([`Scenario::score`]) and
//!   its text report.
//! - [`turns`]: a suite run as full turns of any configuration (a team's own, under a model
//!   script), scored by the same rules plus who made each call and what the answer says.
//! - [`report`]: the run as a self-contained HTML report (charts, failures, trend) and the JSON
//!   summary a run is stored as.
//! - `faults`: the fault-injecting model ([`run_faults`]) and what the rules recover.
//! - `smalltalk_corpus`: the smalltalk check scored on its labelled corpus.
//! - [`smalltalk_sources`]: the smalltalk check per source and language, sources not tuned on included.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use baton::agent::AgentRequest;
use baton::conversation::{PreviousTurn, PriorReply};
use baton::guard::{GuardAction, PlannedCall};
use baton::model::Message;
use baton::model::scripted::{Reply, ScriptedModel, StreamReply};
use baton::text as guard;
/// The reference routing tools the scenario suite names.
const ASK_SUPPORT: &str = "ask_support";
const ASK_SHOPPING: &str = "ask_shopping";
use baton::agent::Item;
use baton::routing::Router;

mod faults;
pub mod report;
pub(crate) mod smalltalk_corpus;
pub mod smalltalk_sources;
pub mod turns;

pub use faults::{Fault, FaultOutcome, format_faults, run_correct, run_faults};

pub use smalltalk_corpus::{
    CorpusScore, SMALLTALK_CORPUS, corpus_json, format_corpus, score_smalltalk_corpus,
};

/// The reference routing suite, embedded.
pub const REFERENCE_SUITE: &str = include_str!("../../../data/routing/scenarios.yaml");

/// One routing scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique id.
    pub id: String,
    /// Category, for accuracy per category (`turn` when not given).
    #[serde(default = "default_category")]
    pub category: String,
    /// What the user says.
    pub message: String,
    /// The previous turn, if any.
    #[serde(default)]
    pub previous: Option<ScenarioTurn>,
    /// A description of an attached image.
    #[serde(default)]
    pub image: Option<String>,
    /// The calls expected, in any order; empty for a direct (fastpath) answer.
    pub expect: Vec<ExpectedCall>,
    /// Whether the support call must carry `prior_context`.
    #[serde(default)]
    pub prior_context: bool,
    /// Text the turn's answer must contain, each (case aside); full turns only ([`turns`]).
    #[serde(default)]
    pub answer_contains: Vec<String>,
}

fn default_category() -> String {
    "turn".into()
}

/// A previous turn in a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioTurn {
    /// What the user said.
    pub user: String,
    /// Replies by agent (`support`, `shopping`, `orchestrator`).
    pub replies: Vec<ScenarioReply>,
}

/// One reply of a previous turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReply {
    /// Agent name.
    pub agent: String,
    /// Its text.
    pub text: String,
    /// The labels of the options it offered (a `choices` event), in order.
    #[serde(default)]
    pub options: Vec<String>,
}

/// An expected call.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The tool: a routing tool (`ask_support`), or in a full turn any tool or agent tool.
    pub tool: String,
    /// The query it should get; not checked when empty (a full turn's tools take what they take).
    #[serde(default)]
    pub query: String,
    /// Arguments it must carry, each equal (a map within them need only hold the listed keys).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// The agent that must make the call (its name, not the instance); full turns only.
    #[serde(default)]
    pub agent: Option<String>,
    /// The `support_category` it should carry, if any.
    #[serde(default)]
    pub support_category: Option<String>,
    /// Text its `prior_context` must contain (case aside).
    #[serde(default)]
    pub prior_context: Option<String>,
}

/// A suite could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The YAML is invalid; the message names the line and field.
    #[error("routing suite {origin}: {message}")]
    Invalid {
        /// The file.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

/// Parses a routing suite and checks its scenarios: each call a reference routing tool with a
/// query, nothing only a full turn can check.
pub fn load_suite(yaml: &str, origin: &str) -> Result<Vec<Scenario>, SuiteError> {
    let invalid = |message: String| SuiteError::Invalid { origin: origin.to_owned(), message };
    let scenarios = parse_suite(yaml, origin)?;
    for s in &scenarios {
        if let Some(c) = s.expect.iter().find(|c| c.tool != ASK_SUPPORT && c.tool != ASK_SHOPPING) {
            return Err(invalid(format!("scenario `{}` expects unknown tool `{}`", s.id, c.tool)));
        }
        if let Some(c) = s.expect.iter().find(|c| c.query.is_empty()) {
            return Err(invalid(format!("scenario `{}`: the `{}` call needs a `query`", s.id, c.tool)));
        }
        if !s.answer_contains.is_empty() || s.expect.iter().any(|c| c.agent.is_some()) {
            return Err(invalid(format!(
                "scenario `{}`: `answer_contains` and a call's `agent` need full turns (`--turns`)",
                s.id
            )));
        }
    }
    Ok(scenarios)
}

/// Parses a suite of any configuration's scenarios (run as full turns, [`turns`]): unique ids,
/// each expected call naming its tool.
pub fn parse_suite(yaml: &str, origin: &str) -> Result<Vec<Scenario>, SuiteError> {
    let invalid = |message: String| SuiteError::Invalid { origin: origin.to_owned(), message };
    let scenarios: Vec<Scenario> = serde_yaml_ng::from_str(yaml).map_err(|e| invalid(e.to_string()))?;
    let mut ids = std::collections::HashSet::new();
    for s in &scenarios {
        if !ids.insert(s.id.as_str()) {
            return Err(invalid(format!("scenario id `{}` is used twice", s.id)));
        }
        if let Some(c) = s.expect.iter().find(|c| c.tool.trim().is_empty()) {
            return Err(invalid(format!("scenario `{}` expects a call with no tool: {c:?}", s.id)));
        }
    }
    Ok(scenarios)
}

impl Scenario {
    /// What the routing agent is asked in this scenario.
    pub fn request(&self) -> AgentRequest {
        let mut turn = AgentRequest {
            user_id: "eval".into(),
            episode_id: "eval".into(),
            query: self.message.clone(),
            image: self.image.clone().map(baton::image::Image::described),
            ..Default::default()
        };
        if let Some(prev) = &self.previous {
            turn.history.push(Message::user(prev.user.clone()));
            let said: Vec<&str> = prev.replies.iter().map(|r| r.text.as_str()).collect();
            turn.history.push(Message::assistant(said.join("\n\n")));
            turn.previous = Some(PreviousTurn {
                user_message: prev.user.clone(),
                replies: prev
                    .replies
                    .iter()
                    .map(|r| PriorReply {
                        agent: r.agent.clone(),
                        text: r.text.clone(),
                        options: r.options.clone(),
                    })
                    .collect(),
            });
        }
        turn
    }

    /// Checks routed calls against the expectation; `Err` says what differs.
    pub fn score(&self, calls: &[PlannedCall], loose: bool) -> Result<Strictness, String> {
        self.score_calls(calls, None, loose)
    }

    /// [`Scenario::score`] with the agent that made each call (`agents[i]` made `calls[i]`),
    /// for expectations that name one.
    pub fn score_calls(
        &self,
        calls: &[PlannedCall],
        agents: Option<&[String]>,
        loose: bool,
    ) -> Result<Strictness, String> {
        let by = |k: usize, expected: &ExpectedCall| match (&expected.agent, agents) {
            (Some(want), Some(agents)) => agents.get(k) == Some(want),
            (Some(_), None) => false,
            (None, _) => true,
        };
        let mut want: Vec<&str> = self.expect.iter().map(|c| c.tool.as_str()).collect();
        let mut got: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            return Err(format!("tools {got:?}, expected {want:?}"));
        }
        let mut strictness = Strictness::Exact;
        let mut used = vec![false; calls.len()];
        for (i, expected) in self.expect.iter().enumerate() {
            let others: Vec<&str> = self
                .expect
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, c)| c.query.as_str())
                .collect();
            let found = calls.iter().enumerate().find(|(k, c)| {
                !used[*k]
                    && c.tool == expected.tool
                    && by(*k, expected)
                    && expected.arguments_match(&c.arguments)
                    && (expected.query.is_empty()
                        || query_matches(&expected.query, &c.query, &self.message, &others))
            });
            let found = match found {
                Some(f) => Some(f),
                None if loose => {
                    strictness = Strictness::Loose;
                    calls.iter().enumerate().find(|(k, c)| {
                        !used[*k]
                            && c.tool == expected.tool
                            && by(*k, expected)
                            && expected.arguments_match(&c.arguments)
                            && guard::normalize(&c.query) == guard::normalize(&self.message)
                    })
                }
                None => None,
            };
            let Some((k, call)) = found else {
                return Err(expected.missing(calls, agents));
            };
            used[k] = true;
            match (&expected.support_category, call.arguments.get("support_category")) {
                (_, None) => {}
                (Some(want), Some(got)) if got == want.as_str() => {}
                (want, Some(got)) => {
                    return Err(format!("{} support_category {got}, expected {want:?}", call.tool));
                }
            }
            if expected.support_category.is_some() && call.arguments.get("support_category").is_none() {
                strictness = Strictness::Loose;
            }
            let context = call.arguments.get("prior_context").and_then(|c| c.as_str()).unwrap_or("");
            if let Some(want) = &expected.prior_context {
                if !context.to_lowercase().contains(&want.to_lowercase()) {
                    return Err(format!(
                        "{} prior_context {context:?}, expected it to say {want:?}",
                        call.tool
                    ));
                }
            }
            if self.prior_context && call.tool == ASK_SUPPORT && !self.about_previous_turn(context) {
                return Err(format!(
                    "{} prior_context {context:?} says nothing of the previous turn",
                    call.tool
                ));
            }
        }
        Ok(strictness)
    }

    /// Whether `context` shares a topic word with the previous turn.
    fn about_previous_turn(&self, context: &str) -> bool {
        let Some(previous) = &self.previous else { return !context.is_empty() };
        std::iter::once(previous.user.as_str())
            .chain(previous.replies.iter().map(|r| r.text.as_str()))
            .any(|said| guard::overlaps(context, said))
    }
}

impl ExpectedCall {
    /// Whether `arguments` hold every argument this call expects.
    fn arguments_match(&self, arguments: &serde_json::Value) -> bool {
        let Some(want) = &self.arguments else { return true };
        contains(arguments, &serde_json::Value::Object(want.clone()))
    }

    /// What the calls of this tool were, when none matched.
    fn missing(&self, calls: &[PlannedCall], agents: Option<&[String]>) -> String {
        let of_tool = calls.iter().enumerate().filter(|(_, c)| c.tool == self.tool);
        if self.arguments.is_none() && self.agent.is_none() {
            let got: Vec<&str> = of_tool.map(|(_, c)| c.query.as_str()).collect();
            return format!("{} query {got:?}, expected {:?}", self.tool, self.query);
        }
        let got: Vec<String> = of_tool
            .map(|(k, c)| {
                let agent = agents.and_then(|a| a.get(k)).map(|a| format!("by {a} ")).unwrap_or_default();
                format!("{agent}with {}", c.arguments)
            })
            .collect();
        let mut want = String::new();
        if let Some(agent) = &self.agent {
            want.push_str(&format!(" by {agent}"));
        }
        if let Some(arguments) = &self.arguments {
            want.push_str(&format!(" with {}", serde_json::Value::Object(arguments.clone())));
        }
        if !self.query.is_empty() {
            want.push_str(&format!(" query {:?}", self.query));
        }
        format!("{} called {got:?}, expected{want}", self.tool)
    }
}

/// Whether `got` holds `want`: equal, or for maps every key of `want` held by `got`'s.
fn contains(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    match (got, want) {
        (serde_json::Value::Object(got), serde_json::Value::Object(want)) => {
            want.iter().all(|(k, w)| got.get(k).is_some_and(|g| contains(g, w)))
        }
        _ => got == want,
    }
}

/// The scripted answer of a model that routes `scenario` right: its expected calls, each with its
/// expected category and prior context (for a scenario that expects prior context, the previous
/// turn), or a one-sentence direct answer.
pub fn correct_script(scenario: &Scenario) -> StreamReply {
    if scenario.expect.is_empty() {
        return Reply::text("Hi! How can I help?");
    }
    let mut reply = Reply::text("Let me check.");
    for c in &scenario.expect {
        reply = reply.tool_call(&c.tool, correct_arguments(scenario, c, &c.query, scenario.expect.len()));
    }
    reply
}

/// The arguments a correct model gives `expected` (with `query` and `intent_count` as given).
fn correct_arguments(
    scenario: &Scenario,
    expected: &ExpectedCall,
    query: &str,
    count: usize,
) -> serde_json::Value {
    let mut args = json!({"query": query, "intent_count": count});
    if let Some(category) = &expected.support_category {
        args["support_category"] = json!(category);
    }
    let switch = scenario.prior_context && expected.tool == ASK_SUPPORT;
    let context = match (&expected.prior_context, &scenario.previous) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(previous)) if switch => {
            let replies: Vec<&str> = previous.replies.iter().map(|r| r.text.as_str()).collect();
            Some(format!(
                "Earlier the user said \"{}\" and was told \"{}\".",
                previous.user,
                replies.join(" ")
            ))
        }
        _ => None,
    };
    if let Some(context) = context {
        args["prior_context"] = json!(context);
    }
    args
}

/// How closely a routing matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Every query matched its expectation.
    Exact,
    /// Some query fell back to the whole message.
    Loose,
}

fn query_matches(expected: &str, got: &str, message: &str, others: &[&str]) -> bool {
    if guard::normalize(expected) == guard::normalize(got) {
        return true;
    }
    let want = guard::content_words(expected);
    let have = guard::content_words(got);
    let said = guard::content_words(message);
    let foreign: Vec<String> =
        others.iter().flat_map(|o| guard::content_words(o)).filter(|w| !want.contains(w)).collect();
    want.iter().all(|w| have.contains(w))
        && have.iter().all(|w| said.contains(w))
        && !have.iter().any(|w| foreign.contains(w))
}

/// The result of one scenario.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario.
    pub id: String,
    /// Its category.
    pub category: String,
    /// `Ok` with how closely, or what was wrong.
    pub result: Result<Strictness, String>,
    /// What the guards and failsafe did.
    pub actions: Vec<GuardAction>,
}

/// What routing one scenario decided, as the scoring reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRoute {
    /// The calls the agent would dispatch (none for a direct answer), with their arguments.
    pub calls: Vec<PlannedCall>,
    /// What the failsafe and the guards repaired.
    pub actions: Vec<GuardAction>,
}

/// Routes one scenario with `router`.
pub async fn route_scenario(router: &Router, scenario: &Scenario) -> Result<ScenarioRoute, String> {
    match Item::result(router.route(&scenario.request())).await {
        Some(Some(routed)) => Ok(ScenarioRoute {
            calls: routed
                .decision
                .calls
                .iter()
                .map(|c| {
                    let arguments = c.call.parse_arguments().unwrap_or_default();
                    PlannedCall::from_arguments(&c.call.name, arguments, "")
                })
                .collect(),
            actions: routed.repairs,
        }),
        Some(None) => Err("the model call failed".into()),
        None => Err("routing ended without a decision".into()),
    }
}

/// Runs the suite against `model`, `concurrency` scenarios at a time.
pub async fn run_suite(router: Arc<Router>, scenarios: &[Scenario], concurrency: usize) -> Report {
    let outcomes = futures::stream::iter(scenarios)
        .map(|s| {
            let router = router.clone();
            async move {
                let (result, actions) = match route_scenario(&router, s).await {
                    Ok(route) => (s.score(&route.calls, false), route.actions),
                    Err(e) => (Err(e), Vec::new()),
                };
                Outcome { id: s.id.clone(), category: s.category.clone(), result, actions }
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await;
    Report { model: router.model_name().to_owned(), outcomes }
}

/// Accuracy of a suite run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The model evaluated.
    pub model: String,
    /// One per scenario, in suite order.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// Passed and total per category.
    pub fn by_category(&self) -> BTreeMap<&str, (usize, usize)> {
        let mut out: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for o in &self.outcomes {
            let e = out.entry(o.category.as_str()).or_default();
            e.0 += usize::from(o.result.is_ok());
            e.1 += 1;
        }
        out
    }

    /// Passed scenarios.
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.result.is_ok()).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "routing suite: {} scenarios, model {}", self.outcomes.len(), self.model)?;
        writeln!(f, "{:<24} {:>6} {:>6} {:>9}", "category", "passed", "total", "accuracy")?;
        for (category, (passed, total)) in self.by_category() {
            writeln!(f, "{category:<24} {passed:>6} {total:>6} {:>8.1}%", percent(passed, total))?;
        }
        let (passed, total) = (self.passed(), self.outcomes.len());
        writeln!(f, "{:<24} {passed:>6} {total:>6} {:>8.1}%", "overall", percent(passed, total))?;
        let failures: Vec<&Outcome> = self.outcomes.iter().filter(|o| o.result.is_err()).collect();
        if !failures.is_empty() {
            writeln!(f, "failures:")?;
            for o in failures {
                writeln!(
                    f,
                    "  {} [{}]: {}",
                    o.id,
                    o.category,
                    o.result.as_ref().err().map_or("", String::as_str)
                )?;
            }
        }
        Ok(())
    }
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(message: &str, expect: &[(&str, &str)]) -> Scenario {
        Scenario {
            id: "s".into(),
            category: "c".into(),
            message: message.into(),
            previous: None,
            image: None,
            expect: expect
                .iter()
                .map(|(t, q)| ExpectedCall {
                    tool: t.to_string(),
                    query: q.to_string(),
                    ..Default::default()
                })
                .collect(),
            prior_context: false,
            answer_contains: Vec::new(),
        }
    }

    fn calls(list: &[(&str, &str)]) -> Vec<PlannedCall> {
        list.iter().map(|(t, q)| PlannedCall::from_arguments(t, json!({"query": q}), "")).collect()
    }

    #[test]
    fn scoring_accepts_a_faithful_split_and_rejects_wrong_routing() {
        let s = scenario(
            "my receipt didn't scan and find me coffee deals",
            &[(ASK_SUPPORT, "my receipt didn't scan"), (ASK_SHOPPING, "find me coffee deals")],
        );
        assert!(
            s.score(&calls(&[(ASK_SHOPPING, "coffee deals"), (ASK_SUPPORT, "receipt didn't scan")]), false)
                .is_ok()
        );
        assert!(
            s.score(&calls(&[(ASK_SUPPORT, "my receipt didn't scan")]), false).is_err(),
            "a call missing"
        );
        let swapped = calls(&[(ASK_SUPPORT, "coffee deals"), (ASK_SHOPPING, "receipt didn't scan")]);
        assert!(s.score(&swapped, false).is_err(), "parts swapped");
        let invented =
            calls(&[(ASK_SUPPORT, "receipt didn't scan at Walmart"), (ASK_SHOPPING, "coffee deals")]);
        assert!(s.score(&invented, false).is_err(), "invented words");
        let whole = calls(&[(ASK_SUPPORT, &s.message), (ASK_SHOPPING, "coffee deals")]);
        assert!(s.score(&whole, false).is_err());
        assert_eq!(s.score(&whole, true), Ok(Strictness::Loose));
    }

    #[test]
    fn the_reference_suite_loads_and_covers_every_category() {
        let suite = load_suite(REFERENCE_SUITE, "reference").unwrap();
        assert!(suite.len() >= 60, "{} scenarios", suite.len());
        let categories: std::collections::BTreeSet<&str> =
            suite.iter().map(|s| s.category.as_str()).collect();
        for c in [
            "single_support",
            "single_shopping",
            "mixed_support_first",
            "mixed_shopping_first",
            "greeting",
            "acknowledgement",
            "chitchat",
            "not_fastpath",
            "echo_followup",
            "intent_switch",
            "short_mixed",
            "image_receipt",
            "image_product",
            "image_other",
            "emoji",
        ] {
            assert!(categories.contains(c), "category {c} missing");
        }
    }

    #[test]
    fn suite_errors_name_the_problem() {
        let err = load_suite(
            "- id: a\n  category: c\n  message: m\n  expect: [{tool: ask_weather, query: q}]\n",
            "x",
        )
        .unwrap_err();
        assert!(err.to_string().contains("ask_weather"), "{err}");
        let err = load_suite("- id: a\n  categry: c\n", "x").unwrap_err();
        assert!(err.to_string().contains("categry"), "{err}");
    }

    /// The reference configuration's routing (offline model).
    fn reference_router() -> Router {
        baton::wiring::build_router(
            &baton_reference::reference_config(),
            &baton::wiring::Backends::in_memory(),
        )
        .unwrap()
        .unwrap()
    }

    #[tokio::test]
    async fn every_recoverable_fault_is_recovered() {
        let suite = load_suite(REFERENCE_SUITE, "reference").unwrap();
        let outcomes = run_faults(&reference_router(), &suite).await;
        let report = format_faults(&outcomes);
        let of = |fault| outcomes.iter().find(|o| o.fault == fault).unwrap();
        for o in &outcomes {
            assert!(o.applicable > 0, "{} was never injected\n{report}", o.fault.name());
            assert!(o.missed.is_empty(), "{report}");
        }
        // Every fault the rules exist for is recovered.
        for fault in Fault::ALL {
            if matches!(fault, Fault::DropCallUndercount | Fault::DirectAnswerTwice) {
                continue;
            }
            let o = of(fault);
            assert_eq!(o.exact + o.loose, o.applicable, "{}\n{report}", fault.name());
        }
        // Exactly: the user's own clause, the model's category kept, the previous turn as prior
        // context of a call code made.
        for fault in [
            Fault::ParaphraseSplit,
            Fault::DuplicateCall,
            Fault::DuplicateEcho,
            Fault::DirectAnswerAfterSwitch,
        ] {
            assert_eq!(of(fault).exact, of(fault).applicable, "{}\n{report}", fault.name());
        }
        // An unknown category is dropped, never passed on: the call stands without one.
        assert_eq!(of(Fault::UnknownCategory).loose, of(Fault::UnknownCategory).applicable, "{report}");
        // Undercounting is invisible to the failsafe, and says so.
        let under = of(Fault::DropCallUndercount);
        assert_eq!(under.by_design.len(), under.applicable);
        // A question answered directly twice reaches support only when it echoes support.
        let twice = of(Fault::DirectAnswerTwice);
        assert!(twice.exact + twice.loose > 0 && !twice.by_design.is_empty(), "{report}");
    }

    #[tokio::test]
    async fn a_correct_model_passes_every_scenario_through_the_rules() {
        let suite = load_suite(REFERENCE_SUITE, "reference").unwrap();
        let report = run_correct(&reference_router(), &suite).await;
        assert_eq!(report.passed(), suite.len(), "{report}");
        for o in &report.outcomes {
            assert_eq!(o.result, Ok(Strictness::Exact), "{}: {:?}", o.id, o.actions);
        }
    }

    #[test]
    fn every_expected_category_is_one_the_reference_configuration_offers() {
        let config = baton_reference::reference_config();
        let entry = config.agents.get(&config.agents.entry).unwrap();
        let categories = &entry.routing.as_ref().unwrap().categories;
        for s in load_suite(REFERENCE_SUITE, "reference").unwrap() {
            for c in s.expect.iter().filter(|c| c.tool == ASK_SUPPORT) {
                let category = c.support_category.as_ref().unwrap_or_else(|| panic!("{}: no category", s.id));
                assert!(categories.contains(category), "{}: {category}", s.id);
            }
        }
    }

    #[test]
    fn scoring_checks_the_category_and_the_prior_context() {
        let mut s = scenario("where are my points", &[(ASK_SUPPORT, "where are my points")]);
        s.expect[0].support_category = Some("missing_points".into());
        let with = |category: &str| {
            vec![PlannedCall::from_arguments(
                ASK_SUPPORT,
                json!({"query": "where are my points", "support_category": category}),
                "",
            )]
        };
        assert_eq!(s.score(&with("missing_points"), false), Ok(Strictness::Exact));
        assert!(s.score(&with("billing_dispute"), false).unwrap_err().contains("billing_dispute"));
        assert_eq!(s.score(&calls(&[(ASK_SUPPORT, "where are my points")]), false), Ok(Strictness::Loose));
        s.prior_context = true;
        s.previous = Some(ScenarioTurn {
            user: "find me coffee deals".into(),
            replies: vec![ScenarioReply {
                agent: "shopping".into(),
                text: "Brand A has 2x points.".into(),
                options: vec![],
            }],
        });
        let context = |text: &str| {
            vec![PlannedCall::from_arguments(
                ASK_SUPPORT,
                json!({"query": "where are my points", "support_category": "missing_points", "prior_context": text}),
                "",
            )]
        };
        assert_eq!(s.score(&context("The user asked for coffee deals."), false), Ok(Strictness::Exact));
        assert!(s.score(&context("The user is nice."), false).is_err(), "nothing of the previous turn");
        assert!(s.score(&with("missing_points"), false).is_err(), "no prior context");
    }

    #[tokio::test]
    async fn a_model_that_always_calls_shopping_fails_support_scenarios() {
        let suite = load_suite(REFERENCE_SUITE, "reference").unwrap();
        let model = Arc::new(ScriptedModel::new(
            "always-shopping",
            Some(Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "x", "intent_count": 1}))),
        ));
        let report = run_suite(Arc::new(reference_router().with_model(model)), &suite, 4).await;
        let by = report.by_category();
        assert_eq!(by["single_support"].0, 0, "{report}");
        assert_eq!(by["single_shopping"].0, by["single_shopping"].1, "{report}");
    }
}
