//! `orchestrator mcp` over stdio, driven by the official Python MCP client (PyPI `mcp`, in the
//! test venv): the agents the configuration serves are listed (a team's file without `mcp:`: its
//! entry agent alone), one answers, its progress arrives. (The same
//! client over streamable HTTP, and the conformance suite, are in tests/tests/mcp.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn venv_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os("BATON_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv"))
        .join("bin/python")
}

/// The official Python client's run of `orchestrator mcp ARGS` over stdio (the store in `dir`):
/// asks `agent` with `text`, and prints the tools, the answer and its progress as JSON.
fn client_run(dir: &Path, agent: &str, text: &str, orchestrator_args: &[&std::ffi::OsStr]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/baton_client.py");
    let mut python = Command::new(venv_python());
    for var in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "BATON_TABLE", "BATON_CONFIG"] {
        python.env_remove(var);
    }
    let out = python
        .env("BATON_STORE_PATH", dir.join("store.redb"))
        .arg(&script)
        .args(["stdio", agent, text, "--", env!("CARGO_BIN_EXE_orchestrator")])
        .args(orchestrator_args)
        .arg("mcp")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tool_names(got: &Value) -> Vec<&str> {
    got["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect()
}

#[test]
fn the_python_mcp_client_calls_an_agent_over_stdio() {
    let store = tempfile::tempdir().unwrap();
    let got = client_run(store.path(), "shopping", "find me a deal on coffee", &[]);
    assert_eq!(
        tool_names(&got),
        ["orchestrator", "support", "shopping"],
        "the agents the reference's `mcp:` lists: {got}"
    );
    assert_eq!(got["is_error"], false, "{got}");
    assert!(!got["answer"].as_str().unwrap().trim().is_empty(), "{got}");
    assert!(!got["progress"].as_array().unwrap().is_empty(), "progress arrives: {got}");
}

#[test]
fn a_teams_file_without_an_mcp_key_serves_its_entry_agent_alone() {
    let dir = tempfile::tempdir().unwrap();
    let team = dir.path().join("team.yaml");
    std::fs::write(
        &team,
        "entry: lead\nagents:\n  - {name: lead, instruction: Lead., agents: [helper]}\n  \
         - {name: helper, description: Helps., instruction: Help.}\n",
    )
    .unwrap();
    let got = client_run(dir.path(), "lead", "hello", &["--config".as_ref(), team.as_os_str()]);
    assert_eq!(tool_names(&got), ["lead"], "not the agent only `lead` calls: {got}");
    assert_eq!(got["is_error"], false, "{got}");
}
