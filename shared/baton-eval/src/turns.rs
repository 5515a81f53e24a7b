//! A suite run as full turns of any configuration: a team's own agents and tools, answered by a
//! model script in its CI (`routing-eval --config F --suite S`, docs/testing.md).
//!
//! Each scenario is one turn of the configured orchestrator (built once), played in suite order:
//! its message, and its `previous` turn as the conversation so far. What the turn did is read
//! from its events: every `tool_call_start` (the tool, its arguments and the agent that made
//! it), the answer's text, `error` events and the `completed` status. It is scored by the
//! routing suite's rules ([`Scenario::score_calls`]: the tools as a multiset, each expected call's
//! query, arguments and agent), and besides:
//! - the turn must complete without an `error` event, and every tool call without an error
//!   result;
//! - the answer must contain each `answer_contains` (case aside);
//! - under a model script, the turn must have played every step the script foresaw for it
//!   ([`ModelScript::unplayed`]), and the suite every turn of the script.
//!
//! Scenarios run one at a time: a model script's turns are the suite's, in order.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::report::SuiteRun;
use crate::{Outcome, Report, Scenario, Strictness};
use baton::config::{Config, ConfigError};
use baton::event::{Event, Status};
use baton::guard::PlannedCall;
use baton::model::script::ModelScript;
use baton::orchestrator::{Orchestrator, TurnRequest};
use baton::wiring::Backends;

/// Longest one scenario's turn may take.
pub(crate) const TURN_TIMEOUT: Duration = Duration::from_secs(120);

/// What one turn did, as its events say.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TurnTrace {
    /// Every tool call started, in order, with all its arguments.
    pub calls: Vec<PlannedCall>,
    /// The agent (its name, not the instance) that made each of `calls`.
    pub agents: Vec<String>,
    /// The text the user was shown.
    pub answer: String,
    /// The `error` events, each as `agent: code: message`.
    pub errors: Vec<String>,
    /// The tool results that are errors, each as `agent: tool: result`.
    pub tool_errors: Vec<String>,
    /// How the turn ended (`None` when it never said).
    pub status: Option<Status>,
}

impl TurnTrace {
    /// Folds one event in.
    pub(crate) fn apply(&mut self, event: &Event) {
        match event {
            Event::ToolCallStart { agent, name, arguments, .. } => {
                self.calls.push(PlannedCall::from_arguments(name, (**arguments).clone(), ""));
                self.agents.push(agent_of(agent).to_owned());
            }
            Event::Text { text, .. } => self.answer.push_str(text),
            Event::ToolResult { agent, name, result, is_error: true, .. } => {
                self.tool_errors.push(format!("{agent}: {name}: {result}"));
            }
            Event::Error { agent, code, message, .. } => {
                self.errors.push(format!("{agent}: {code}: {message}"))
            }
            Event::Completed { status, .. } => self.status = Some(*status),
            _ => {}
        }
    }
}

/// The agent of an instance name (`hotels[1]` → `hotels`).
fn agent_of(instance: &str) -> &str {
    instance.split('[').next().unwrap_or(instance)
}

/// Plays `scenario` as one turn of `orchestrator`, within [`TURN_TIMEOUT`].
pub(crate) async fn play(orchestrator: &Arc<Orchestrator>, scenario: &Scenario) -> Result<TurnTrace, String> {
    let request = scenario.request();
    let mut turn = TurnRequest::new(format!("eval-{}", scenario.id), "t1", "eval", scenario.message.clone());
    turn.history = request.history;
    turn.previous = request.previous;
    turn.image = request.image;
    let mut trace = TurnTrace::default();
    let mut events = orchestrator.run_turn(turn);
    let played = tokio::time::timeout(TURN_TIMEOUT, async {
        while let Some(event) = events.next().await {
            trace.apply(&event);
        }
    })
    .await;
    match played {
        Ok(()) => Ok(trace),
        Err(_) => Err(format!("the turn did not finish within {} s", TURN_TIMEOUT.as_secs())),
    }
}

/// Scores one played turn; `unplayed` is what the model script foresaw for it that never ran.
pub(crate) fn score(
    scenario: &Scenario,
    trace: &TurnTrace,
    unplayed: &[String],
) -> Result<Strictness, String> {
    if let Some(error) = trace.errors.first() {
        return Err(format!("error event from {error}"));
    }
    if let Some(error) = trace.tool_errors.first() {
        return Err(format!("a tool answered with an error: {error}"));
    }
    match trace.status {
        Some(Status::Ok) => {}
        Some(status) => return Err(format!("the turn ended {}", serde_json::json!(status))),
        None => return Err("the turn ended without `completed`".into()),
    }
    let strictness = scenario.score_calls(&trace.calls, Some(&trace.agents), false)?;
    let answer = trace.answer.to_lowercase();
    if let Some(want) = scenario.answer_contains.iter().find(|w| !answer.contains(&w.to_lowercase())) {
        return Err(format!("the answer {:?} does not contain {want:?}", trace.answer));
    }
    if !unplayed.is_empty() {
        return Err(format!("the model script foresaw more: {}", unplayed.join("; ")));
    }
    Ok(strictness)
}

/// A suite run as full turns, and what is wrong with the model script as a whole.
#[derive(Debug)]
pub struct TurnsRun {
    /// The scores, and each scenario's calls.
    pub run: SuiteRun,
    /// Problems of the script beyond a scenario's: turns it holds that the suite never played.
    pub script: Vec<String>,
}

impl TurnsRun {
    /// Whether every scenario passed and the script played whole.
    pub fn passed(&self) -> bool {
        self.script.is_empty() && self.run.report.passed() == self.run.report.outcomes.len()
    }
}

/// Runs `scenarios` as turns of the orchestrator `config` describes over `backends`, one at a
/// time, calling `progress(done, total, outcome)` after each.
pub async fn run_turns(
    config: &Config,
    backends: Backends,
    scenarios: &[Scenario],
    mut progress: impl FnMut(usize, usize, &Outcome),
) -> Result<TurnsRun, ConfigError> {
    let orchestrator = baton::wiring::build(config, backends)?;
    let script: Option<&Arc<ModelScript>> = config.models.script.as_ref();
    let mut routed = std::collections::HashMap::new();
    let mut outcomes = Vec::with_capacity(scenarios.len());
    for s in scenarios {
        let result = match play(&orchestrator, s).await {
            Ok(trace) => {
                let unplayed = script.map(|s| s.unplayed()).unwrap_or_default();
                let scored = score(s, &trace, &unplayed);
                routed.insert(s.id.clone(), trace.calls);
                scored
            }
            Err(e) => Err(e),
        };
        let outcome = Outcome { id: s.id.clone(), category: s.category.clone(), result, actions: Vec::new() };
        progress(outcomes.len() + 1, scenarios.len(), &outcome);
        outcomes.push(outcome);
    }
    let left = script.map_or(0, |s| s.turns_left());
    let script_problems = match script {
        Some(s) if left > 0 => vec![format!(
            "{}: {left} of its {} turns were never played (the suite has {} scenarios)",
            s.origin(),
            s.turns(),
            scenarios.len()
        )],
        _ => Vec::new(),
    };
    let report = Report { model: orchestrator.model_name().to_owned(), outcomes };
    Ok(TurnsRun { run: SuiteRun { report, routed }, script: script_problems })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_suite;

    /// A two-agent team: the concierge hands bookings to hotels, which has no tools of its own.
    const TEAM: &str = "
entry: concierge
agents:
  - name: concierge
    instruction: Hand bookings to hotels.
    agents: [hotels]
  - name: hotels
    description: Books hotels.
    instruction: Book it.
";

    const SCRIPT: &str = "
turns:
  - user: book Lisbon
    agents:
      concierge:
        - tool_calls: [{name: agent__hotels, arguments: {request: Lisbon for 3 nights}}]
        - text: Booked, confirmation H-123.
      hotels:
        - text: Hotel Lisboa, H-123.
  - user_matches: '(?i)thanks'
    agents:
      concierge:
        - text: You're welcome.
";

    fn config(script: &str) -> (Config, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("team.script.yaml");
        std::fs::write(&path, script).unwrap();
        let config =
            Config::default().with_yaml(TEAM, "team.yaml").unwrap().with_model_script(&path).unwrap();
        (config, dir)
    }

    async fn play_suite(script: &str, suite: &str) -> TurnsRun {
        let (config, _dir) = config(script);
        let suite = parse_suite(suite, "suite.yaml").unwrap();
        run_turns(&config, Backends::in_memory(), &suite, |_, _, _| {}).await.unwrap()
    }

    const SUITE: &str = "
- id: book
  message: book Lisbon
  expect:
    - {tool: agent__hotels, agent: concierge, arguments: {request: Lisbon for 3 nights}}
  answer_contains: [h-123]
- id: thanks
  message: Thanks a lot
  expect: []
  answer_contains: [welcome]
";

    #[tokio::test]
    async fn a_scripted_team_passes_its_suite() {
        let run = play_suite(SCRIPT, SUITE).await;
        assert!(run.passed(), "{}\n{:?}", run.run.report, run.script);
        assert_eq!(run.run.report.model, "script");
        let calls = &run.run.routed["book"];
        assert_eq!(calls[0].arguments["request"], "Lisbon for 3 nights");
    }

    #[tokio::test]
    async fn wrong_arguments_agent_or_answer_fail_their_scenario() {
        for (expectation, says) in [
            ("{tool: agent__hotels, arguments: {request: Porto}}", "expected with {\"request\":\"Porto\"}"),
            ("{tool: agent__hotels, agent: hotels}", "by concierge"),
            ("{tool: agent__flights}", "tools"),
        ] {
            let suite = SUITE.replace(
                "{tool: agent__hotels, agent: concierge, arguments: {request: Lisbon for 3 nights}}",
                expectation,
            );
            let run = play_suite(SCRIPT, &suite).await;
            let why = run.run.report.outcomes[0].result.clone().unwrap_err();
            assert!(why.contains(says), "{expectation}: {why}");
            assert!(run.run.report.outcomes[1].result.is_ok());
        }
        let run = play_suite(SCRIPT, &SUITE.replace("[h-123]", "[H-999]")).await;
        let why = run.run.report.outcomes[0].result.clone().unwrap_err();
        assert!(why.contains("does not contain \"H-999\""), "{why}");
    }

    #[tokio::test]
    async fn leaving_the_script_fails_the_turn_with_an_error_event() {
        // The user says something the script's first turn does not expect.
        let run = play_suite(SCRIPT, &SUITE.replace("message: book Lisbon", "message: book Porto")).await;
        let why = run.run.report.outcomes[0].result.clone().unwrap_err();
        assert!(
            why.contains("model_script") && why.contains("\"book Porto\"") && why.contains("line 3"),
            "{why}"
        );
        // hotels answers in one step where the script gave it none to spare: concierge asked
        // for a third step.
        let short = SCRIPT.replace("        - text: Booked, confirmation H-123.\n", "");
        let run = play_suite(&short, SUITE).await;
        let why = run.run.report.outcomes[0].result.clone().unwrap_err();
        assert!(why.contains("agent `concierge` asked for step 2") && why.contains("1 step(s)"), "{why}");
    }

    #[tokio::test]
    async fn steps_and_turns_the_suite_never_reached_are_failures() {
        let extra = SCRIPT.replace(
            "        - text: Hotel Lisboa, H-123.\n",
            "        - text: Hotel Lisboa, H-123.\n        - text: never asked\n",
        );
        let run = play_suite(&extra, SUITE).await;
        let why = run.run.report.outcomes[0].result.clone().unwrap_err();
        assert!(why.contains("agent `hotels` asked for 1 of its 2 steps"), "{why}");
        let one = "- id: book\n  message: book Lisbon\n  expect: [{tool: agent__hotels}]\n";
        let run = play_suite(SCRIPT, one).await;
        assert!(run.run.report.outcomes[0].result.is_ok(), "{}", run.run.report);
        assert!(!run.passed());
        assert!(run.script[0].contains("1 of its 2 turns were never played"), "{:?}", run.script);
    }

    #[test]
    fn a_script_naming_an_agent_the_configuration_lacks_is_refused_at_start() {
        let (config, _dir) = config(&SCRIPT.replace("      hotels:\n", "      hotel:\n"));
        let err = baton::wiring::build(&config, Backends::in_memory()).err().unwrap().to_string();
        assert!(err.contains("agent `hotel` is not configured") && err.contains("line 3"), "{err}");
    }
}
