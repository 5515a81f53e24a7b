//! The orchestrator binary as a newcomer runs it: offline, with no key.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

fn orchestrator() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    for var in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "FORETHOUGHT_BASE_URL"] {
        c.env_remove(var);
    }
    c
}

#[test]
fn offline_chat_routes_a_mixed_message_to_both_agents() {
    let out =
        orchestrator().args(["chat", "my receipt didn't scan and find me coffee deals"]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("model: offline"), "the offline model is announced: {stderr}");
    assert!(stdout.starts_with("… thinking"), "{stdout}");
    assert!(stderr.contains("support: offline help center"), "{stderr}");
    assert!(stdout.contains("support[1] started: my receipt didn't scan"), "{stdout}");
    assert!(stdout.contains("shopping[1] started: find me coffee deals"), "{stdout}");
    // Support answers from the help center and names the article.
    assert!(stdout.contains("If the app could not read your receipt, retake the photo"), "{stdout}");
    assert!(
        stdout
            .contains("(Source: help-center article \"My receipt didn't scan\", help/receipt-did-not-scan)")
    );
    // Shopping searched the catalog with the user's words and listed what it found.
    assert!(stdout.contains("· shopping[1] calls search_offers"), "{stdout}");
    assert!(stdout.contains("Here are 5 offers for \"find me coffee deals\":"), "{stdout}");
    let offers: Vec<&str> = stdout.lines().filter(|l| l.starts_with("- ") && l.contains("[off-")).collect();
    assert_eq!(offers.len(), 5, "{stdout}");
    assert!(offers.iter().all(|l| l.contains("Coffee")), "{offers:?}");
    assert!(stdout.contains("✓ completed: Ok, model offline"), "{stdout}");
}

#[tokio::test]
async fn chat_uses_forethought_when_a_token_is_set() {
    use baton::support::scripted::{ForethoughtServer, FtReply};
    let ft = ForethoughtServer::start().await.unwrap();
    ft.push(FtReply::text("Forethought says: retake the photo. "));
    let url = ft.base_url();
    let out = tokio::task::spawn_blocking(move || {
        orchestrator()
            .args(["chat", "my receipt didn't scan"])
            .env("FORETHOUGHT_API_TOKEN", "t0ken")
            .env("FORETHOUGHT_BASE_URL", url)
            .env("FORETHOUGHT_CHANNEL", "app")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("support: Forethought Solve API at http://127.0.0.1:"), "{stderr}");
    assert!(stdout.contains("[support[1]] Forethought says: retake the photo."), "{stdout}");
    let request = &ft.requests()[0];
    assert_eq!(request.authorization.as_deref(), Some("Bearer t0ken"));
    assert_eq!(request.body["channel"], "app");
    assert_eq!(request.body["user_id"], "local");
}

#[test]
fn a_bad_forethought_url_fails_at_start_with_a_clear_error() {
    let out = orchestrator()
        .args(["chat", "hi"])
        .env("FORETHOUGHT_API_TOKEN", "t")
        .env("FORETHOUGHT_BASE_URL", "app.forethought.ai")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("FORETHOUGHT_BASE_URL"), "{stderr}");
}

#[test]
fn raw_chat_prints_sse() {
    let out = orchestrator().args(["chat", "--raw", "hello"]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("event: thinking\nid: 0\ndata: {\"type\":\"thinking\"}\n\n"), "{stdout}");
    assert!(stdout.contains("event: completed\n"), "{stdout}");
    assert!(stdout.contains("\"model\":\"offline\""), "{stdout}");
}

#[test]
fn help_explains_every_option() {
    let out = orchestrator().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for option in [
        "--addr",
        "--max-body-bytes",
        "--max-message-chars",
        "--heartbeat-secs",
        "--openai-base-url",
        "--openai-api-key",
        "--orchestrator-model",
        "--flush-budget-ms",
        "--idle-timeout-ms",
        "--max-retries",
        "--shopping-responses-api",
        "--shopping-max-steps",
        "--tool-timeout-ms",
        "--forethought-token",
        "--forethought-base-url",
        "--forethought-channel",
        "--forethought-prior-context",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
    assert!(help.contains("[env: OPENAI_BASE_URL"), "{help}");
    assert!(help.contains("[env: FORETHOUGHT_API_TOKEN"), "{help}");
}

#[test]
fn a_bad_base_url_fails_at_start_with_a_clear_error() {
    let out = orchestrator().args(["chat", "hi"]).env("OPENAI_BASE_URL", "localhost:1").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("OPENAI_BASE_URL") && stderr.contains("http://"), "{stderr}");
}

#[test]
fn serve_answers_sse_on_the_printed_address() {
    let mut child = orchestrator()
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr =
        line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line}")).to_owned();
    let body = r#"{"message":"hello"}"#;
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(conn, "POST /chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("content-type: text/event-stream"), "{response}");
    assert!(response.contains("event: thinking") && response.contains("event: completed"), "{response}");
}

#[test]
fn routing_eval_prints_accuracy_per_category_and_fault_recovery() {
    let out = orchestrator().args(["routing-eval", "--faults"]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("routing suite: 66 scenarios, model offline"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("echo_followup")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("overall")), "{stdout}");
    assert!(stdout.contains("drop_call "), "{stdout}");
    assert!(!stdout.contains("MISSED"), "every recoverable fault is recovered:\n{stdout}");
}

#[test]
fn a_config_file_with_a_typo_is_refused_naming_line_and_field() {
    let dir = std::env::temp_dir().join(format!("baton-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("team.yaml");
    std::fs::write(&path, "routing:\n  support_categorys: [billing]\n").unwrap();
    let out = orchestrator().args(["chat", "hi", "--config"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("support_categorys") && stderr.contains("line 2"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
