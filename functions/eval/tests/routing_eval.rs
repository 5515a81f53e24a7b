//! `routing-eval`, the command: the suite's text report, its JSON, and a configuration it cannot
//! evaluate.

use std::path::Path;
use std::process::Command;

/// `routing-eval` with no model server configured (the offline model) and its store in `store`.
fn routing_eval(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_routing-eval"));
    for var in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "BATON_TABLE", "BATON_CONFIG"] {
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
}

#[test]
fn routing_eval_refuses_a_team_whose_entry_does_not_route() {
    let dir = tempfile::tempdir().unwrap();
    let team = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/team.yaml");
    let out = routing_eval(dir.path()).args(["--config", team]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("`concierge` does not route"));
}
