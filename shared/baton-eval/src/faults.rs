//! Fault injection: a scripted model that makes one routing mistake ([`Fault`]) on every scenario
//! it applies to, and what the failsafe and the guards recover from it.

use super::*;

/// A routing mistake the fault-injecting model makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Drops the last call of a mixed turn, reporting the true `intent_count`.
    DropCall,
    /// Drops the last call of a mixed turn and under-reports `intent_count` to match.
    DropCallUndercount,
    /// Rewrites the first call's query into words the user never said.
    RewriteQuery,
    /// Paraphrases the first call's query in a mixed turn, keeping one word of the user's.
    ParaphraseSplit,
    /// Sends the first call twice.
    DuplicateCall,
    /// Sends the support call three times in an echo follow-up.
    DuplicateEcho,
    /// Gives the support call a `support_category` outside the configured list.
    UnknownCategory,
    /// Answers a real question directly, with no call; asked again, routes it right.
    DirectAnswer,
    /// Answers a real question directly, and again when asked again.
    DirectAnswerTwice,
    /// After an intent switch to shopping, answers directly, and again when asked again.
    DirectAnswerAfterSwitch,
}

/// A category no configuration offers.
const UNKNOWN_CATEGORY: &str = "billing_dispute";

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 10] = [
        Fault::DropCall,
        Fault::DropCallUndercount,
        Fault::RewriteQuery,
        Fault::ParaphraseSplit,
        Fault::DuplicateCall,
        Fault::DuplicateEcho,
        Fault::UnknownCategory,
        Fault::DirectAnswer,
        Fault::DirectAnswerTwice,
        Fault::DirectAnswerAfterSwitch,
    ];

    /// The fault's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::DropCall => "drop_call",
            Fault::DropCallUndercount => "drop_call_undercount",
            Fault::RewriteQuery => "rewrite_query",
            Fault::ParaphraseSplit => "paraphrase_split",
            Fault::DuplicateCall => "duplicate_call",
            Fault::DuplicateEcho => "duplicate_echo",
            Fault::UnknownCategory => "unknown_category",
            Fault::DirectAnswer => "direct_answer",
            Fault::DirectAnswerTwice => "direct_answer_twice",
            Fault::DirectAnswerAfterSwitch => "direct_answer_after_switch",
        }
    }

    /// Whether the fault can be injected into `scenario`.
    pub fn applies_to(self, scenario: &Scenario) -> bool {
        let support = scenario.expect.iter().any(|c| c.tool == ASK_SUPPORT);
        match self {
            Fault::DropCall | Fault::DropCallUndercount => scenario.expect.len() >= 2,
            Fault::ParaphraseSplit => {
                scenario.expect.len() >= 2
                    && guard::words(&scenario.message).len() > 4
                    && incidental_word(&scenario.expect[0].query).is_some()
            }
            Fault::RewriteQuery | Fault::DuplicateCall | Fault::DirectAnswer | Fault::DirectAnswerTwice => {
                !scenario.expect.is_empty()
            }
            Fault::DuplicateEcho => scenario.echoes_support_question() && support,
            Fault::UnknownCategory => support,
            Fault::DirectAnswerAfterSwitch => scenario.switches_to(ASK_SHOPPING, "shopping"),
        }
    }

    /// Why the guards cannot recover this fault in `scenario`, if they cannot by design.
    pub fn unrecoverable(self, scenario: &Scenario) -> Option<&'static str> {
        match self {
            Fault::DropCallUndercount => Some(
                "with intent_count matching the calls made, nothing shows that an intent is missing; \
                 the failsafe only sees counts",
            ),
            Fault::DirectAnswerTwice => {
                let shopping_only = scenario.expect.len() == 1 && scenario.expect[0].tool == ASK_SHOPPING;
                let echo = scenario.echoes_support_question() && scenario.expect.len() == 1;
                (!echo && !shopping_only).then_some(
                    "a real question the model answers directly even when asked again goes to the \
                     fallback agent (shopping); a support or mixed question cannot be routed in code",
                )
            }
            _ => None,
        }
    }

    /// What a recovery must show in `scenario`: the scenario, with the prior context a switch
    /// needs for the fault that tests it.
    pub fn expectation(self, scenario: &Scenario) -> Scenario {
        let mut expected = scenario.clone();
        if self == Fault::DirectAnswerAfterSwitch {
            if let (Some(previous), Some(call)) = (&scenario.previous, expected.expect.first_mut()) {
                call.prior_context = Some(previous.user.clone());
            }
        }
        expected
    }

    /// The scripted model's two answers for `scenario`: the faulty first answer, and what it says
    /// when it is asked again (the failsafe's calls it dropped, or its calls after a refused
    /// direct answer).
    pub fn script(self, scenario: &Scenario) -> (StreamReply, StreamReply) {
        let n = scenario.expect.len();
        let call = |reply: StreamReply, c: &ExpectedCall, query: &str, count: usize| {
            reply.tool_call(&c.tool, correct_arguments(scenario, c, query, count))
        };
        let direct = || Reply::text("Good question. Most stores give a full refund within 30 days.");
        let mut first = Reply::text("Let me check.");
        let mut reask = Reply::text("");
        match self {
            Fault::DropCall | Fault::DropCallUndercount => {
                let count = if self == Fault::DropCall { n } else { n - 1 };
                for c in &scenario.expect[..n - 1] {
                    first = call(first, c, &c.query, count);
                }
                let last = &scenario.expect[n - 1];
                reask = call(reask, last, &last.query, n);
            }
            Fault::RewriteQuery | Fault::ParaphraseSplit => {
                for (i, c) in scenario.expect.iter().enumerate() {
                    let query = match (i, self) {
                        (0, Fault::RewriteQuery) => "assist this person with their request".to_owned(),
                        (0, _) => format!(
                            "customer reports {} trouble and wants it resolved",
                            incidental_word(&c.query).unwrap_or_default()
                        ),
                        _ => c.query.clone(),
                    };
                    first = call(first, c, &query, n);
                }
            }
            Fault::DuplicateCall => {
                for c in scenario.expect.iter().chain(scenario.expect.first()) {
                    first = call(first, c, &c.query, n);
                }
            }
            Fault::DuplicateEcho => {
                for _ in 0..3 {
                    first = call(first, &scenario.expect[0], &scenario.expect[0].query, n);
                }
            }
            Fault::UnknownCategory => {
                for c in &scenario.expect {
                    let mut args = correct_arguments(scenario, c, &c.query, n);
                    if c.tool == ASK_SUPPORT {
                        args["support_category"] = json!(UNKNOWN_CATEGORY);
                    }
                    first = first.tool_call(&c.tool, args);
                }
            }
            Fault::DirectAnswer => {
                first = direct();
                reask = correct_script(scenario);
            }
            Fault::DirectAnswerTwice | Fault::DirectAnswerAfterSwitch => {
                first = direct();
                reask = direct();
            }
        }
        (first, reask)
    }
}

/// One word of `query` that is the user's and carries a topic: the last one.
fn incidental_word(query: &str) -> Option<String> {
    guard::words(query).into_iter().rev().find(|w| !guard::content_words(w).is_empty())
}

impl Scenario {
    /// Whether the previous turn ended with a question of support's, and one support call is
    /// expected: an echo follow-up.
    fn echoes_support_question(&self) -> bool {
        self.previous
            .as_ref()
            .is_some_and(|p| p.replies.iter().any(|r| r.agent == "support" && r.text.trim().ends_with('?')))
            && self.expect.len() == 1
            && self.expect[0].tool == ASK_SUPPORT
    }

    /// Whether the user switches to `agent` (its one expected call is `tool`, and `agent` did
    /// not answer the previous turn).
    fn switches_to(&self, tool: &str, agent: &str) -> bool {
        self.expect.len() == 1
            && self.expect[0].tool == tool
            && self
                .previous
                .as_ref()
                .is_some_and(|p| !p.replies.is_empty() && p.replies.iter().all(|r| r.agent != agent))
    }
}

/// Recoveries of one fault over a suite.
#[derive(Debug, Clone)]
pub struct FaultOutcome {
    /// The fault.
    pub fault: Fault,
    /// Scenarios it was injected into.
    pub applicable: usize,
    /// Recovered with every query as expected.
    pub exact: usize,
    /// Recovered with some query falling back to the whole message.
    pub loose: usize,
    /// Not recovered although the guards should have: a bug.
    pub missed: Vec<(String, String)>,
    /// Not recoverable by design, with the reason.
    pub by_design: Vec<(String, &'static str)>,
}

/// Injects every fault into every scenario it applies to and scores the recovery.
pub async fn run_faults(router: &Router, scenarios: &[Scenario]) -> Vec<FaultOutcome> {
    let mut out = Vec::new();
    for fault in Fault::ALL {
        let mut o = FaultOutcome {
            fault,
            applicable: 0,
            exact: 0,
            loose: 0,
            missed: Vec::new(),
            by_design: Vec::new(),
        };
        for s in scenarios.iter().filter(|s| fault.applies_to(s)) {
            o.applicable += 1;
            let (first, reask) = fault.script(s);
            let model = Arc::new(ScriptedModel::new("faulty", None));
            model.push(first);
            model.push(reask);
            let router = router.with_model(model);
            let expected = fault.expectation(s);
            let result =
                route_scenario(&router, s).await.and_then(|route| expected.score(&route.calls, true));
            match (result, fault.unrecoverable(s)) {
                (Ok(Strictness::Exact), _) => o.exact += 1,
                (Ok(Strictness::Loose), _) => o.loose += 1,
                (Err(_), Some(reason)) => o.by_design.push((s.id.clone(), reason)),
                (Err(e), None) => o.missed.push((s.id.clone(), e)),
            }
        }
        out.push(o);
    }
    out
}

/// Routes every scenario with a scripted model that routes it right ([`correct_script`]), one
/// scenario at a time: the rules must pass all of them.
pub async fn run_correct(router: &Router, scenarios: &[Scenario]) -> Report {
    let mut outcomes = Vec::with_capacity(scenarios.len());
    for s in scenarios {
        let model = Arc::new(ScriptedModel::new("correct", None));
        model.push(correct_script(s));
        let (result, actions) = match route_scenario(&router.with_model(model), s).await {
            Ok(route) => (s.score(&route.calls, false), route.actions),
            Err(e) => (Err(e), Vec::new()),
        };
        outcomes.push(Outcome { id: s.id.clone(), category: s.category.clone(), result, actions });
    }
    Report { model: "correct (scripted)".into(), outcomes }
}

/// Prints fault outcomes as a table with the reasons for what cannot be recovered.
pub fn format_faults(outcomes: &[FaultOutcome]) -> String {
    let mut s = String::from("fault injection: scripted true routing plus one fault per turn\n");
    s.push_str(&format!(
        "{:<27} {:>10} {:>9} {:>7} {:>7} {:>10}\n",
        "fault", "applicable", "recovered", "exact", "loose", "by design"
    ));
    for o in outcomes {
        s.push_str(&format!(
            "{:<27} {:>10} {:>9} {:>7} {:>7} {:>10}\n",
            o.fault.name(),
            o.applicable,
            o.exact + o.loose,
            o.exact,
            o.loose,
            o.by_design.len()
        ));
    }
    for o in outcomes {
        if let Some((_, reason)) = o.by_design.first() {
            s.push_str(&format!(
                "{} not recoverable in {} scenario(s): {reason}\n",
                o.fault.name(),
                o.by_design.len()
            ));
        }
        for (id, why) in &o.missed {
            s.push_str(&format!("MISSED {} in {id}: {why}\n", o.fault.name()));
        }
    }
    s
}
