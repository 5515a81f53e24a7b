//! `routing-eval`, the command: the suite's text report, its JSON, a configuration it cannot
//! evaluate, and a team's own suite played as full turns under a model script (the travel example,
//! whose tools are a Python MCP server).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `routing-eval` with no model server configured (the offline model) and its store in `store`.
fn routing_eval(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_routing-eval"));
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "FORETHOUGHT_API_TOKEN",
        "BATON_TABLE",
        "BATON_CONFIG",
        "BATON_MODEL_SCRIPT",
    ] {
        c.env_remove(var);
    }
    c.env("BATON_STORE_PATH", store.join("store.redb"));
    c
}

#[test]
fn routing_eval_prints_accuracy_per_category_and_fault_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let out = routing_eval(dir.path()).args(["--faults"]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("routing suite: 126 scenarios, model offline"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("echo_followup")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("overall")), "{stdout}");
    assert!(stdout.contains("drop_call "), "{stdout}");
    assert!(stdout.contains("smalltalk type check on the labelled corpus"), "{stdout}");
    assert!(!stdout.contains("REQUEST TAKEN FOR SMALLTALK"), "{stdout}");
    assert!(!stdout.contains("MISSED"), "every recoverable fault is recovered:\n{stdout}");
}

#[test]
fn routing_eval_json_gives_every_scenarios_calls_repairs_and_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let out = routing_eval(dir.path()).args(["--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let scenarios = json["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len() as u64, json["summary"]["total"].as_u64().unwrap());
    let echo = scenarios.iter().find(|s| s["id"] == "echo-followup-01").unwrap();
    assert_eq!(echo["calls"][0]["tool"], "ask_support");
    let arguments = &echo["calls"][0]["arguments"];
    assert_eq!(arguments["query"], "the paper one");
    assert!(arguments["prior_context"].as_str().unwrap().contains("paper receipt"), "{arguments}");
    assert!(echo["repairs"].as_array().unwrap().iter().any(|r| r["repair"] == "echo_followup"), "{echo}");
    assert!(["pass", "pass_loose", "fail"].contains(&echo["verdict"].as_str().unwrap()));
    let corpus = json["smalltalk_corpus"].as_array().unwrap();
    assert!(
        corpus.iter().all(|part| part["precision"] == 100.0 && part["passed"].as_array().unwrap().is_empty())
    );
    // The table across sources: every language of every source at 100 % precision, the sources
    // the check was not tuned on marked, and the reference deployment's Dutch and Polish in it.
    let sources = json["smalltalk_sources"].as_array().unwrap();
    assert!(sources.iter().all(|row| row["precision"] == 100.0), "{sources:#?}");
    assert!(sources.iter().any(|row| row["source"] == "chatterbot-corpus" && row["tuned"] == false));
    assert!(sources.iter().any(|row| row["source"] == "rasa" && row["language"] == "en"));
}

#[test]
fn routing_eval_asks_a_team_whose_entry_does_not_route_for_its_own_suite() {
    let dir = tempfile::tempdir().unwrap();
    let team = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/team.yaml");
    let out = routing_eval(dir.path()).args(["--config", team]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("`concierge` is run as full turns: give its own suite with --suite"), "{stderr}");
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `routing-eval` on the travel example (`examples/travel`) under `script`, from the repository's
/// root (the MCP server's path is relative to it), with the test venv's `python3` (it has `mcp`)
/// first on the path.
fn travel(store: &Path, script: &Path) -> std::process::Output {
    travel_with(store, |c| c.arg("--model-script").arg(script))
}

/// [`travel`] with the model script given by `script`.
fn travel_with(store: &Path, script: impl FnOnce(&mut Command) -> &mut Command) -> std::process::Output {
    let venv = std::env::var_os("BATON_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| root().join(".venv"));
    let path = std::env::join_paths(
        std::iter::once(venv.join("bin"))
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut command = routing_eval(store);
    command.current_dir(root()).env("PATH", path).args([
        "--config",
        "examples/travel/travel.yaml",
        "--suite",
        "examples/travel/travel.suite.yaml",
    ]);
    script(&mut command).output().unwrap()
}

#[test]
fn a_teams_scripted_flows_pass_as_full_turns_through_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = travel(dir.path(), Path::new("examples/travel/travel.script.yaml"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("3 scenarios, model script"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("overall") && l.contains("100.0%")), "{stdout}");
    assert!(stderr.contains("model: script examples/travel/travel.script.yaml (3 turns"), "{stderr}");
    // The JSON shows every call of the turn, at any depth, with its arguments.
    let script = Path::new("examples/travel/travel.script.yaml");
    let out = travel_with(dir.path(), |c| c.arg("--model-script").arg(script).arg("--json"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let book = &json["scenarios"][0];
    assert_eq!(book["verdict"], "pass", "{book}");
    let calls: Vec<&str> =
        book["calls"].as_array().unwrap().iter().filter_map(|c| c["tool"].as_str()).collect();
    assert_eq!(calls, ["agent__hotels", "mcp__hotels__search_hotels", "mcp__hotels__book_hotel"], "{book}");
    assert_eq!(book["calls"][2]["arguments"], serde_json::json!({"hotel_id": "LIS-2", "nights": 3}));
    assert_eq!(book["expected"][2]["agent"], "hotels", "{book}");
    assert_eq!(json["script"], serde_json::json!([]), "{json}");
}

#[test]
fn a_flow_that_leaves_the_script_or_fails_a_tool_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let script = std::fs::read_to_string(root().join("examples/travel/travel.script.yaml")).unwrap();
    // The hotels agent books a hotel the team's server does not know: the tool's error result
    // fails the scenario, and the run.
    let unknown = dir.path().join("unknown.script.yaml");
    std::fs::write(&unknown, script.replace("hotel_id: LIS-2", "hotel_id: LIS-9")).unwrap();
    let out = travel(dir.path(), &unknown);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("book-lisbon [booking]: a tool answered with an error"), "{stdout}");
    assert!(stdout.contains("unknown hotel LIS-9"), "{stdout}");
    // The script forgets the hotels agent's last step: the turn fails loudly, naming the turn,
    // its line, the agent and the step, and the next scenarios still run.
    let short = dir.path().join("short.script.yaml");
    std::fs::write(
        &short,
        script.replace("        - text: Casa Alfama, 3 nights, 285 EUR, confirmation LIS-2-3N.\n", ""),
    )
    .unwrap();
    let out = travel(dir.path(), &short);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let failure = stdout.lines().find(|l| l.contains("book-lisbon")).unwrap_or_default();
    for part in ["model_script", "turn 1 (", "line 5)", "agent `hotels` asked for step 3", "2 step(s)"] {
        assert!(failure.contains(part), "{part}: {failure}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("search ") && l.contains("100.0%")), "{stdout}");
}

#[test]
fn a_script_the_configuration_cannot_play_is_refused_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.script.yaml");
    std::fs::write(&bad, "turns:\n  - agents:\n      concierge:\n        - {}\n").unwrap();
    let out = travel_with(dir.path(), |c| c.env("BATON_MODEL_SCRIPT", &bad));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("bad.script.yaml") && stderr.contains("line 4"), "{stderr}");
    assert!(stderr.contains("a step needs `text`, `tool_calls` or both"), "{stderr}");
}
