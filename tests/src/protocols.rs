//! The front-end protocols' official clients (`tests/protocols/*_client.mjs`: `@ag-ui/client`'s
//! `HttpAgent`, the `ai` package's transport and reader) run by node against a Baton URL.
//! scripts/test.sh installs the pinned npm packages into tests/protocols/node_modules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("protocols")
}

/// Runs `script` with `plan` against the Baton at `url` (no trailing slash) and returns the JSON
/// it printed: what the client saw. Panics when node fails or the packages are missing.
pub async fn run_client(script: &str, url: &str, plan: Value) -> Value {
    let dir = clients_dir();
    let installed = dir.join("node_modules/@ag-ui/client");
    assert!(
        installed.exists(),
        "{} is missing: run scripts/test.sh (npm ci in tests/protocols)",
        installed.display()
    );
    let run = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .arg(url)
        .arg(plan.to_string())
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the client ends")
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stderr}"))
}

/// The AG-UI runs of `plan` (`{"threadId", "runs": [..], "headers"?}`), as the client saw them.
pub async fn agui(url: &str, plan: Value) -> Vec<Value> {
    let out = run_client("agui_client.mjs", url, plan).await;
    out["runs"].as_array().expect("runs").clone()
}

/// The AI SDK requests of `plan` (`{"chatId", "requests": [..], "headers"?}`), as the transport
/// and reader saw them.
pub async fn ai_sdk(url: &str, plan: Value) -> Vec<Value> {
    let out = run_client("ai_sdk_client.mjs", url, plan).await;
    out["requests"].as_array().expect("requests").clone()
}

/// The assistant messages the AG-UI client assembled, as (name, content).
pub fn agui_answers(run: &Value) -> Vec<(String, String)> {
    run["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant" && m["content"].as_str().is_some_and(|c| !c.is_empty()))
        .map(|m| {
            (m["name"].as_str().unwrap_or("").to_owned(), m["content"].as_str().unwrap_or("").to_owned())
        })
        .collect()
}

/// The text parts of the UI message the AI SDK reader assembled, as (agent, text).
pub fn ai_sdk_answers(request: &Value) -> Vec<(String, String)> {
    request["message"]["parts"]
        .as_array()
        .expect("a message with parts")
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| {
            let agent = p["providerMetadata"]["baton"]["agent"].as_str().unwrap_or("").to_owned();
            (agent, p["text"].as_str().unwrap_or("").to_owned())
        })
        .collect()
}
