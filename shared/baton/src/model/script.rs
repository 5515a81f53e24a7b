//! A model script: the model backend a team's tests use. Each agent's model call is answered from
//! a YAML file, turn by turn and step by step, and a call the file does not foresee fails the
//! turn loudly instead of being answered by a guess (docs/testing.md, "A team's flows under a
//! model script").
//!
//! ```yaml
//! turns:
//!   - user: "book a hotel in Lisbon for 3 nights"   # or user_matches: a regex; or neither
//!     agents:
//!       concierge:
//!         - tool_calls: [{name: agent__hotels, arguments: {request: "Lisbon, 3 nights"}}]
//!         - text: "Booked: Hotel Lisboa."
//!       hotels:
//!         - tool_calls: [{name: mcp__hotels__book_hotel, arguments: {city: Lisbon, nights: 3}}]
//!         - text: "Hotel Lisboa, 3 nights, confirmation H-123."
//! ```
//!
//! How a call finds its answer:
//! - **The agent** is the one the model was built for: [`ModelScript::model_for`] binds one model
//!   per agent (the composition root does, in the one place agents get their models).
//! - **The turn**: the script's turns are played in order, once each, by the process. A turn
//!   opens when the top agent (the entry agent, or the agent a function serves) makes the first
//!   model call of a run; its `user` (exact, spaces aside) or `user_matches` (a regex) must match
//!   the message it was given.
//! - **The step** is the run's model call count: the number of the model's own answers after the
//!   run's user message. Each run of an agent in a turn replays that agent's steps from the
//!   first, so parallel instances get the same answers whatever order they ask in.
//!
//! Leaving the script is a [`ModelError::Script`] naming the turn, its line, the agent and the
//! step: a turn beyond the script, a user message that does not match, an agent the turn does not
//! list, a step beyond the agent's list. [`ModelScript::unplayed`] says what a turn foresaw that
//! never ran (the scenario suite fails such a scenario). One script plays one conversation at a
//! time: concurrent conversations share its turns.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;

use super::{ChatModel, ChatRequest, DeltaStream, FinishReason, Message, ModelDelta, ModelError, ToolCall};

/// The name script models report in `usage` and `completed` events.
pub(crate) const SCRIPT_MODEL_NAME: &str = "script";

/// A loaded model script and where its play has reached. Shared by the models
/// [`ModelScript::model_for`] binds; cloning a configuration shares it.
#[derive(Debug)]
pub struct ModelScript {
    origin: String,
    turns: Vec<ScriptTurn>,
    play: Mutex<Play>,
}

/// One turn of the script.
#[derive(Debug, Clone)]
struct ScriptTurn {
    /// 1-based line of the turn in the file, when found.
    line: Option<usize>,
    user: UserMatch,
    agents: BTreeMap<String, Vec<ScriptStep>>,
}

/// What the user must have said for a turn to open.
#[derive(Debug, Clone)]
enum UserMatch {
    Any,
    Exact(String),
    Pattern(regex::Regex),
}

impl UserMatch {
    fn matches(&self, said: &str) -> bool {
        match self {
            UserMatch::Any => true,
            UserMatch::Exact(want) => normalize_spaces(want) == normalize_spaces(said),
            UserMatch::Pattern(re) => re.is_match(said),
        }
    }
}

impl std::fmt::Display for UserMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserMatch::Any => f.write_str("any message"),
            UserMatch::Exact(want) => write!(f, "{want:?}"),
            UserMatch::Pattern(re) => write!(f, "a message matching /{}/", re.as_str()),
        }
    }
}

fn normalize_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One model answer: text, tool calls, or both.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "StepFile")]
struct ScriptStep {
    text: Option<String>,
    tool_calls: Vec<ScriptCall>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptCall>,
}

impl TryFrom<StepFile> for ScriptStep {
    type Error = String;

    fn try_from(step: StepFile) -> Result<ScriptStep, String> {
        if step.text.is_none() && step.tool_calls.is_empty() {
            return Err("a step needs `text`, `tool_calls` or both".into());
        }
        if let Some(call) = step.tool_calls.iter().find(|c| !c.arguments.is_object()) {
            return Err(format!("the arguments of `{}` must be a map", call.name));
        }
        Ok(ScriptStep { text: step.text, tool_calls: step.tool_calls })
    }
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptCall {
    name: String,
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    turns: Vec<TurnFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnFile {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    user_matches: Option<String>,
    agents: BTreeMap<String, Vec<ScriptStep>>,
}

/// Where the play has reached.
#[derive(Debug, Default)]
struct Play {
    /// The open turn (an index into the turns).
    turn: Option<usize>,
    /// Per agent, the most steps one of its runs has asked for in the open turn.
    reached: HashMap<String, usize>,
}

impl ModelScript {
    /// Reads and checks the script at `path`.
    pub fn load(path: &std::path::Path) -> Result<ModelScript, String> {
        let origin = path.display().to_string();
        let yaml = std::fs::read_to_string(path).map_err(|e| format!("{origin}: cannot read it: {e}"))?;
        ModelScript::parse(&yaml, &origin)
    }

    /// Parses a script; errors name `origin` and the line.
    pub fn parse(yaml: &str, origin: &str) -> Result<ModelScript, String> {
        let invalid = |line: Option<usize>, message: String| match line {
            Some(line) => format!("{origin}: line {line}: {message}"),
            None => format!("{origin}: {message}"),
        };
        let file: ScriptFile = serde_yaml_ng::from_str(yaml).map_err(|e| invalid(None, e.to_string()))?;
        if file.turns.is_empty() {
            return Err(invalid(None, "`turns` is empty: a script plays at least one turn".into()));
        }
        let lines = list_item_lines(yaml, "turns");
        let mut turns = Vec::with_capacity(file.turns.len());
        for (i, turn) in file.turns.into_iter().enumerate() {
            let line = lines.get(i).copied();
            let user = match (turn.user, turn.user_matches) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        line,
                        format!("turn {}: give `user` or `user_matches`, not both", i + 1),
                    ));
                }
                (Some(text), None) => UserMatch::Exact(text),
                (None, Some(pattern)) => UserMatch::Pattern(regex::Regex::new(&pattern).map_err(|e| {
                    invalid(line, format!("turn {}: `user_matches` is not a valid regex: {e}", i + 1))
                })?),
                (None, None) => UserMatch::Any,
            };
            if let Some((agent, _)) = turn.agents.iter().find(|(_, steps)| steps.is_empty()) {
                return Err(invalid(line, format!("turn {}: agent `{agent}` has no steps", i + 1)));
            }
            turns.push(ScriptTurn { line, user, agents: turn.agents });
        }
        Ok(ModelScript { origin: origin.to_owned(), turns, play: Mutex::new(Play::default()) })
    }

    /// The file the script was read from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How many turns it plays.
    pub fn turns(&self) -> usize {
        self.turns.len()
    }

    /// Whether every agent the script answers is `configured` (a mini-agent's decomposer and
    /// aggregator are scripted as `<agent>@<model>`); the error names the first that is not, with
    /// the line of the first turn that names it, and the `defined` agents.
    pub fn check_agents(&self, configured: impl Fn(&str) -> bool, defined: &str) -> Result<(), String> {
        for (agent, line) in self.agents() {
            if !configured(agent.split('@').next().unwrap_or(agent)) {
                let at = line.map(|l| format!(": line {l}")).unwrap_or_default();
                return Err(format!(
                    "{}{at}: agent `{agent}` is not configured; defined: {defined}",
                    self.origin
                ));
            }
        }
        Ok(())
    }

    /// Every agent the script answers, each with the line of the first turn that names it.
    fn agents(&self) -> BTreeMap<&str, Option<usize>> {
        let mut out = BTreeMap::new();
        for turn in &self.turns {
            for agent in turn.agents.keys() {
                out.entry(agent.as_str()).or_insert(turn.line);
            }
        }
        out
    }

    /// The model of agent `agent`; `top` when it is the agent turns start at (its first model
    /// call of a run opens the next turn).
    pub fn model_for(self: &Arc<Self>, agent: &str, top: bool) -> Arc<dyn ChatModel> {
        Arc::new(ScriptedAgent { script: self.clone(), agent: agent.to_owned(), top })
    }

    /// What the open turn foresaw that no run asked for, one line each (`turn 2 (line 9): agent
    /// `hotels` asked for 1 of its 2 steps`); empty when it played whole or none is open.
    pub fn unplayed(&self) -> Vec<String> {
        let play = self.play.lock().expect("play lock");
        let Some(index) = play.turn else { return Vec::new() };
        let turn = &self.turns[index];
        turn.agents
            .iter()
            .filter_map(|(agent, steps)| {
                let reached = play.reached.get(agent).copied().unwrap_or(0);
                (reached < steps.len()).then(|| {
                    format!(
                        "{}: agent `{agent}` asked for {reached} of its {} steps",
                        self.turn_name(index),
                        steps.len()
                    )
                })
            })
            .collect()
    }

    /// The turns the play has not opened yet.
    pub fn turns_left(&self) -> usize {
        let play = self.play.lock().expect("play lock");
        self.turns.len() - play.turn.map_or(0, |t| t + 1)
    }

    /// `turn 2 (line 9)`.
    fn turn_name(&self, index: usize) -> String {
        match self.turns[index].line {
            Some(line) => format!("turn {} ({}, line {line})", index + 1, self.origin),
            None => format!("turn {} ({})", index + 1, self.origin),
        }
    }

    /// The step that answers `request` from `agent`, opening the next turn when `top` asks first.
    fn answer(
        &self,
        agent: &str,
        top: bool,
        request: &ChatRequest,
    ) -> Result<(usize, usize, ScriptStep), String> {
        let step = steps_taken(request);
        let said = request.last_user_text();
        let mut play = self.play.lock().expect("play lock");
        if top && step == 0 {
            let next = play.turn.map_or(0, |t| t + 1);
            let Some(turn) = self.turns.get(next) else {
                return Err(format!(
                    "the user said {said:?} in turn {}, but {} has only {} turn(s)",
                    next + 1,
                    self.origin,
                    self.turns.len()
                ));
            };
            play.turn = Some(next);
            play.reached.clear();
            if !turn.user.matches(said) {
                return Err(format!(
                    "{}: the user said {said:?}, the script expects {}",
                    self.turn_name(next),
                    turn.user
                ));
            }
        }
        let Some(index) = play.turn else {
            return Err(format!("agent `{agent}` asked the model before any turn of {} opened", self.origin));
        };
        let turn = &self.turns[index];
        let Some(steps) = turn.agents.get(agent) else {
            let listed: Vec<&str> = turn.agents.keys().map(String::as_str).collect();
            return Err(format!(
                "{}: agent `{agent}` asked the model, but the turn scripts only {}",
                self.turn_name(index),
                listed.join(", ")
            ));
        };
        let Some(answer) = steps.get(step) else {
            return Err(format!(
                "{}: agent `{agent}` asked for step {}, but the script gives it {} step(s){}",
                self.turn_name(index),
                step + 1,
                steps.len(),
                last_tool_result(request)
                    .map(|r| format!("; the last tool result was {r}"))
                    .unwrap_or_default()
            ));
        };
        let reached = play.reached.entry(agent.to_owned()).or_default();
        *reached = (*reached).max(step + 1);
        Ok((index, step, answer.clone()))
    }
}

/// The model's own answers after the last user message: how many steps the run has taken.
fn steps_taken(request: &ChatRequest) -> usize {
    request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::User { .. }))
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count()
}

/// The last tool result the run saw, cut to 200 characters, for an error message.
fn last_tool_result(request: &ChatRequest) -> Option<String> {
    request.messages.iter().rev().find_map(|m| match m {
        Message::Tool { content, .. } => Some(format!("{:?}", content.chars().take(200).collect::<String>())),
        _ => None,
    })
}

/// The 1-based lines of the items of the block list under top-level key `key`.
fn list_item_lines(yaml: &str, key: &str) -> Vec<usize> {
    let mut lines = yaml.lines().enumerate();
    if !lines.any(|(_, l)| l.starts_with(&format!("{key}:"))) {
        return Vec::new();
    }
    let mut indent = None;
    let mut out = Vec::new();
    for (n, line) in lines {
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let at = line.len() - body.len();
        if at == 0 && !body.starts_with('-') {
            break;
        }
        if body.starts_with("- ") || body == "-" {
            match indent {
                None => {
                    indent = Some(at);
                    out.push(n + 1);
                }
                Some(i) if i == at => out.push(n + 1),
                _ => {}
            }
        }
    }
    out
}

/// A [`ModelScript`]'s model for one agent.
struct ScriptedAgent {
    script: Arc<ModelScript>,
    agent: String,
    top: bool,
}

impl ChatModel for ScriptedAgent {
    fn model_name(&self) -> &str {
        SCRIPT_MODEL_NAME
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        let deltas = match self.script.answer(&self.agent, self.top, &request) {
            Ok((turn, step, answer)) => deltas(&answer, turn, step),
            Err(message) => vec![Err(ModelError::Script(message))],
        };
        Box::pin(futures::stream::iter(deltas))
    }
}

/// The deltas of one scripted answer; call ids are unique in the conversation
/// (`script-t1-s2-0`).
fn deltas(answer: &ScriptStep, turn: usize, step: usize) -> Vec<Result<ModelDelta, ModelError>> {
    let mut out = vec![Ok(ModelDelta::ResponseId(format!("script-t{}-s{}", turn + 1, step + 1)))];
    if let Some(text) = answer.text.as_ref().filter(|t| !t.is_empty()) {
        out.push(Ok(ModelDelta::Text(text.clone())));
    }
    let calls: Vec<ToolCall> = answer
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: format!("script-t{}-s{}-{i}", turn + 1, step + 1),
            name: c.name.clone(),
            arguments: c.arguments.to_string(),
        })
        .collect();
    for (index, call) in calls.iter().enumerate() {
        out.push(Ok(ModelDelta::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() }));
    }
    let finish = if calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
    out.extend(calls.into_iter().map(|c| Ok(ModelDelta::ToolCall(c))));
    // No usage: a script spends no tokens, and has no price to look up.
    out.push(Ok(ModelDelta::Finish(finish)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::collect;

    const SCRIPT: &str = "\
# two turns
turns:
  - user: book a hotel in Lisbon
    agents:
      concierge:
        - tool_calls: [{name: agent__hotels, arguments: {request: Lisbon}}]
        - text: Booked.
      hotels:
        - text: Hotel Lisboa.
  - user_matches: '(?i)^thanks'
    agents:
      concierge:
        - text: You're welcome.
";

    fn script() -> Arc<ModelScript> {
        Arc::new(ModelScript::parse(SCRIPT, "s.yaml").unwrap())
    }

    /// A run's request: the user's words, then `steps` answers each followed by a tool result.
    fn request(user: &str, steps: usize) -> ChatRequest {
        let mut messages = vec![Message::system("be brief"), Message::user(user)];
        for i in 0..steps {
            messages.push(Message::Assistant { content: None, tool_calls: Vec::new() });
            messages.push(Message::Tool { call_id: format!("c{i}"), content: "ok".into() });
        }
        ChatRequest { messages, ..Default::default() }
    }

    async fn ask(
        model: &Arc<dyn ChatModel>,
        user: &str,
        steps: usize,
    ) -> Result<super::super::ChatResponse, ModelError> {
        collect(model.stream(request(user, steps))).await
    }

    #[tokio::test]
    async fn each_agent_gets_its_steps_of_the_open_turn() {
        let script = script();
        let (concierge, hotels) = (script.model_for("concierge", true), script.model_for("hotels", false));
        let first = ask(&concierge, "book a hotel in  Lisbon", 0).await.unwrap();
        assert_eq!(first.tool_calls[0].name, "agent__hotels");
        assert_eq!(first.tool_calls[0].parse_arguments().unwrap(), serde_json::json!({"request": "Lisbon"}));
        assert_eq!(first.tool_calls[0].id, "script-t1-s1-0");
        assert_eq!(first.finish, Some(FinishReason::ToolCalls));
        assert_eq!(ask(&hotels, "Lisbon", 0).await.unwrap().text, "Hotel Lisboa.");
        assert_eq!(script.unplayed().len(), 1, "{:?}", script.unplayed());
        assert_eq!(ask(&concierge, "book a hotel in Lisbon", 1).await.unwrap().text, "Booked.");
        assert!(script.unplayed().is_empty(), "{:?}", script.unplayed());
        assert_eq!(ask(&concierge, "Thanks!", 0).await.unwrap().text, "You're welcome.");
        assert_eq!(script.turns_left(), 0);
    }

    #[tokio::test]
    async fn leaving_the_script_names_the_turn_agent_and_step() {
        let script = script();
        let concierge = script.model_for("concierge", true);
        let err = ask(&concierge, "book a flight", 0).await.unwrap_err();
        assert_eq!(err.code(), "model_script");
        let text = err.to_string();
        assert!(text.contains("turn 1 (s.yaml, line 3)") && text.contains("\"book a flight\""), "{text}");
        assert!(text.contains("book a hotel in Lisbon"), "{text}");

        let script = self::script();
        let (concierge, flights) = (script.model_for("concierge", true), script.model_for("flights", false));
        ask(&concierge, "book a hotel in Lisbon", 0).await.unwrap();
        let err = ask(&flights, "x", 0).await.unwrap_err().to_string();
        assert!(err.contains("agent `flights`") && err.contains("concierge, hotels"), "{err}");
        let err = ask(&concierge, "book a hotel in Lisbon", 2).await.unwrap_err().to_string();
        assert!(err.contains("step 3") && err.contains("2 step(s)") && err.contains("\"ok\""), "{err}");
        ask(&concierge, "thanks", 0).await.unwrap();
        let err = ask(&concierge, "bye", 0).await.unwrap_err().to_string();
        assert!(err.contains("turn 3") && err.contains("only 2 turn(s)"), "{err}");
    }

    #[tokio::test]
    async fn a_child_asking_before_any_turn_is_an_error() {
        let script = script();
        let err = ask(&script.model_for("hotels", false), "x", 0).await.unwrap_err().to_string();
        assert!(err.contains("before any turn"), "{err}");
    }

    #[test]
    fn bad_scripts_are_refused_with_the_line() {
        let bad = |yaml: &str| ModelScript::parse(yaml, "s.yaml").unwrap_err();
        let err = bad("turns:\n  - agents:\n      a:\n        - {}\n");
        assert!(
            err.contains("s.yaml") && err.contains("line 4") && err.contains("`text`, `tool_calls`"),
            "{err}"
        );
        let err = bad("turns:\n  - agents:\n      a:\n        - tool_calls: [{name: f, arguments: [1]}]\n");
        assert!(err.contains("line 4") && err.contains("must be a map"), "{err}");
        let err = bad(
            "turns:\n  - agents: {a: [{text: x}]}\n  - user_matches: '('\n    agents: {a: [{text: y}]}\n",
        );
        assert!(err.contains("line 3") && err.contains("turn 2") && err.contains("regex"), "{err}");
        let err = bad("turns:\n  - agents: {a: [{txt: x}]}\n");
        assert!(err.contains("line 2") && err.contains("txt"), "{err}");
        assert!(bad("turns: []\n").contains("empty"));
        assert!(bad("turns:\n  - agents: {a: []}\n").contains("no steps"));
        let err = bad("turns:\n  - user: a\n    user_matches: b\n    agents: {a: [{text: x}]}\n");
        assert!(err.contains("not both"), "{err}");
    }

    #[test]
    fn a_configuration_names_its_script_relative_to_itself() {
        use crate::config::Config;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        std::fs::write(
            dir.path().join("tests/team.script.yaml"),
            "turns:\n  - agents: {assistant: [{text: hi}]}\n",
        )
        .unwrap();
        let team = dir.path().join("team.yaml");
        std::fs::write(&team, "# a team\nmodel:\n  script: tests/team.script.yaml\n").unwrap();
        let mut config = Config::default().with_file(&team).unwrap();
        // A model server configured besides: the script still answers.
        config.models.api_key = Some("sk-test".into());
        assert!(!config.models.is_offline());
        let built = crate::wiring::build(&config, crate::wiring::Backends::in_memory()).unwrap();
        assert_eq!(built.model_name(), SCRIPT_MODEL_NAME);
        assert!(config.describe_models().starts_with("model: script "), "{}", config.describe_models());

        std::fs::write(&team, "# a team\nmodel:\n  script: tests/missing.yaml\n").unwrap();
        let err = Config::default().with_file(&team).unwrap_err().to_string();
        assert!(
            err.contains("team.yaml: line 3: model.script") && err.contains("missing.yaml: cannot read"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("tests/team.script.yaml"),
            "turns:\n  - agents: {nobody: [{text: hi}]}\n",
        )
        .unwrap();
        std::fs::write(&team, "model:\n  script: tests/team.script.yaml\n").unwrap();
        let err = Config::default().with_file(&team).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("team.script.yaml: line 2: agent `nobody` is not configured"), "{err}");
    }

    #[test]
    fn the_agents_come_with_the_line_that_first_names_them() {
        let script = script();
        assert_eq!(
            script.agents().into_iter().collect::<Vec<_>>(),
            [("concierge", Some(3)), ("hotels", Some(3))]
        );
    }
}
