//! The orchestrator binary as a newcomer runs it: offline, with no key, on the embedded store
//! (each test gives it a store file in a temporary directory).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::EpisodeKey;
use baton_tests::stores::{Moto, StoreHarness, TEST_TABLE, test_clock};
use futures::StreamExt;
use serde_json::json;

fn orchestrator(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    for var in
        ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "FORETHOUGHT_BASE_URL", "BATON_TABLE"]
    {
        c.env_remove(var);
    }
    c.env("BATON_STORE_PATH", store.join("store.redb"));
    c
}

/// A `serve` process, killed when dropped.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    fn start(mut command: Command) -> Serve {
        let mut child = command
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr =
            line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();
        Serve { child, addr }
    }

    async fn chat(&self, body: serde_json::Value) -> Vec<baton::event::Event> {
        let url = format!("http://{}/chat", self.addr);
        baton_tests::open_stream_as(&url, "local", body).await.map(|r| r.event).collect().await
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn offline_chat_routes_a_mixed_message_to_both_agents() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrator(dir.path())
        .args(["chat", "my receipt didn't scan and find me coffee deals"])
        .output()
        .unwrap();
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
    use baton_reference::support::scripted::{ForethoughtServer, FtReply};
    let ft = ForethoughtServer::start().await.unwrap();
    ft.push(FtReply::text("Forethought says: retake the photo. "));
    let url = ft.base_url();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        orchestrator(&store)
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
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrator(dir.path())
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
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrator(dir.path()).args(["chat", "--raw", "hello"]).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let first = stdout.split("\n\n").next().unwrap();
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines[0], "event: thinking", "{stdout}");
    let turn = lines[1].strip_prefix("id: ").and_then(|id| id.strip_suffix(":1")).expect("id <turn_id>:1");
    assert!(lines[2].contains(&format!("\"turn_id\":\"{turn}\"")), "{stdout}");
    assert!(stdout.contains("event: completed\n"), "{stdout}");
    assert!(stdout.contains("\"model\":\"offline\""), "{stdout}");
}

#[test]
fn help_explains_every_option() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrator(dir.path()).args(["serve", "--help"]).output().unwrap();
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
        "--store-path",
        "--table",
        "--history-messages",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
    assert!(help.contains("[env: OPENAI_BASE_URL"), "{help}");
    assert!(help.contains("[env: FORETHOUGHT_API_TOKEN"), "{help}");
    assert!(help.contains("[env: BATON_STORE_PATH") && help.contains("[env: BATON_TABLE"), "{help}");
}

#[test]
fn switches_in_the_environment_take_1_yes_and_on_as_well_as_true() {
    let dir = tempfile::tempdir().unwrap();
    for on in ["1", "yes", "on", "true"] {
        let out = orchestrator(dir.path())
            .args(["chat", "hi"])
            .env("BATON_MODEL_HTTP2", on)
            .env("BATON_SHOPPING_RESPONSES_API", on)
            .output()
            .unwrap();
        assert!(out.status.success(), "{on}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out =
        orchestrator(dir.path()).args(["chat", "hi"]).env("BATON_MODEL_HTTP2", "maybe").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model-http2"));
}

#[test]
fn a_bad_base_url_fails_at_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        orchestrator(dir.path()).args(["chat", "hi"]).env("OPENAI_BASE_URL", "localhost:1").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("OPENAI_BASE_URL") && stderr.contains("http://"), "{stderr}");
}

#[test]
fn serve_answers_sse_on_the_printed_address() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(orchestrator(dir.path()));
    let body = r#"{"message":"hello"}"#;
    let mut conn = std::net::TcpStream::connect(&serve.addr).unwrap();
    write!(conn, "POST /chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    drop(serve);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("content-type: text/event-stream"), "{response}");
    assert!(response.contains("event: thinking") && response.contains("event: completed"), "{response}");
}

#[test]
fn a_config_file_with_a_typo_is_refused_naming_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("team.yaml");
    std::fs::write(&path, "offline_model:\n  keywordz: {support: [billing]}\n").unwrap();
    let out = orchestrator(dir.path()).args(["chat", "hi", "--config"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("keywordz") && stderr.contains("line 2"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_the_conversation_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start().await.unwrap();
    server.push("orch", Reply::text("Hello!")).push("orch", Reply::text("Welcome back."));
    let command = || {
        let mut c = orchestrator(dir.path());
        c.env("OPENAI_BASE_URL", server.base_url()).env("BATON_ORCHESTRATOR_MODEL", "orch");
        c
    };
    let serve = Serve::start(command());
    serve.chat(json!({"message": "hi", "episode_id": "e1"})).await;
    drop(serve);

    let serve = Serve::start(command());
    serve.chat(json!({"message": "remember me?", "episode_id": "e1"})).await;
    let sent = &server.requests_for("orch")[1].body["messages"];
    let contents: Vec<&str> =
        sent.as_array().unwrap().iter().skip(1).map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["hi", "Hello!", "remember me?"], "the restarted server read the first turn back");
}

/// `chat` starts its turn as the endpoint does: the turn is logged, so `serve` on the same store
/// replays it from its first event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_is_logged_and_served_back_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrator(dir.path()).args(["chat", "hello", "--episode-id", "e1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let serve = Serve::start(orchestrator(dir.path()));
    let url = format!("http://{}/chat/e1/events", serve.addr);
    let response = reqwest::Client::new().get(&url).header("x-baton-user", "local").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let names: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.first(), Some(&"thinking"), "{body}");
    assert_eq!(names.last(), Some(&"completed"), "{body}");
    assert!(names.contains(&"text"), "the reply's text is in the log: {body}");
}

#[test]
fn a_store_file_in_use_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let _serve = Serve::start(orchestrator(dir.path()));
    let out = orchestrator(dir.path()).args(["chat", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("in use by another process"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_records_into_the_dynamodb_table_it_is_given() {
    let moto = Moto::start(test_clock()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut command = orchestrator(dir.path());
    command
        .env_remove("BATON_STORE_PATH")
        .env("BATON_TABLE", TEST_TABLE)
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    let serve = Serve::start(command);
    let events = serve.chat(json!({"message": "hello", "episode_id": "e1"})).await;
    assert!(matches!(events.last(), Some(baton::event::Event::Completed { .. })), "{events:?}");
    let stored = moto.store().recent_messages(&EpisodeKey::new("local", "e1").unwrap(), 10).await.unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[0].content, "hello");
    assert!(!dir.path().join("store.redb").exists(), "no embedded store was made");
}

/// The example of docs/agents.md: a team's own three agents, offline.
#[test]
fn a_teams_own_agents_run_offline_from_their_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let team = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/team.yaml");
    let out = orchestrator(dir.path())
        .args(["--config", team, "chat", "my points are missing and find me coffee deals"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("agents: concierge → [deal_finder, help_desk]"), "{stderr}");
    // The concierge hands each part to its specialist, both at once.
    assert!(stdout.contains("concierge calls agent__help_desk"), "{stdout}");
    assert!(stdout.contains("concierge calls agent__deal_finder"), "{stdout}");
    assert!(stdout.contains("help_desk[1] started: my points are missing"), "{stdout}");
    assert!(stdout.contains("deal_finder[1] started: find me coffee deals"), "{stdout}");
    assert!(stdout.contains("deal_finder[1] calls search_offers"), "{stdout}");
    // deal_finder streams its offers itself (text_and_events); help_desk's answer reaches the user
    // through the concierge (events), citing its article.
    assert!(
        stdout.contains("[deal_finder[1]]") && stdout.contains("offers for \"find me coffee deals\""),
        "{stdout}"
    );
    assert!(!stdout.contains("[help_desk[1]]"), "help_desk's own text stays off the client: {stdout}");
    assert!(stdout.contains("[concierge]") && stdout.contains("help/missing-points"), "{stdout}");
    assert!(stdout.contains("✓ completed: Ok"), "{stdout}");
}

#[test]
fn a_team_config_with_a_mistake_is_refused_naming_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let team =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/team.yaml")).unwrap();
    let path = dir.path().join("team.yaml");
    std::fs::write(&path, team.replace("tools: [search_help_center]", "tools: [search_helpcenter]")).unwrap();
    let out =
        orchestrator(dir.path()).args(["--config", path.to_str().unwrap(), "chat", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = team.lines().position(|l| l.contains("tools: [search_help_center]")).unwrap() + 1;
    assert!(
        stderr.contains(&format!(
            "line {line}: agents[2] (`help_desk`).tools: unknown tool `search_helpcenter`"
        )),
        "{stderr}"
    );
}

#[test]
fn mcp_serves_an_agent_that_uses_its_own_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    let everything = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    );
    assert!(
        Path::new(everything).exists(),
        "{everything} is missing: run scripts/test.sh (npm ci in tests/mcp)"
    );
    let team = format!(
        "agents:\n  - name: helper\n    instruction: Help.\n    mcp_servers:\n      everything:\n        \
         command: node\n        args: [{}, stdio]\n",
        serde_json::to_string(everything).unwrap()
    );
    let path = dir.path().join("team.yaml");
    std::fs::write(&path, team).unwrap();
    // The servers connect before the agents are built: the agent's MCP tools exist when `mcp`
    // builds it.
    let mut child = orchestrator(dir.path())
        .args(["--config", path.to_str().unwrap(), "mcp", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let _ = child.wait();
    assert!(line.starts_with("MCP endpoint on http://127.0.0.1:"), "{line:?}\n{stderr}");
}

#[test]
fn an_mcp_allowlist_naming_a_tool_the_server_lacks_is_refused_with_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let everything = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    );
    let team = format!(
        "mcp_servers:\n  everything:\n    command: node\n    args: [{}, stdio]\n    tools:\n      - echo\n      - no-such-tool\n",
        serde_json::to_string(everything).unwrap()
    );
    let path = dir.path().join("tools.yaml");
    std::fs::write(&path, team).unwrap();
    let out =
        orchestrator(dir.path()).args(["--config", path.to_str().unwrap(), "chat", "hi"]).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tools.yaml: line 5: mcp_servers.everything.tools[1]")
            && stderr.contains("`everything` has no tool `no-such-tool`"),
        "{stderr}"
    );
}

/// The path production takes to a model vendor: `https`, through reqwest's TLS (HTTP/2 by ALPN),
/// trusting what the system trusts; `SSL_CERT_FILE` adds a private CA (here the test server's
/// self-signed certificate). Without it the certificate is refused: a clear in-band error, and
/// the turn still ends with `completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reaches_a_model_server_over_tls_it_trusts_and_refuses_one_it_does_not() {
    use baton::event::{Event, Status};
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start_tls().await.unwrap();
    assert!(server.base_url().starts_with("https://localhost:"), "{}", server.base_url());
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, server.certificate().unwrap().pem()).unwrap();
    server.push("orch", Reply::text("Hello over TLS!"));
    let command = |trust: bool| {
        let mut c = orchestrator(dir.path());
        c.env("OPENAI_BASE_URL", server.base_url())
            .env("OPENAI_API_KEY", "sk-tls-secret-4242")
            .env("BATON_ORCHESTRATOR_MODEL", "orch")
            .env_remove("SSL_CERT_DIR");
        if trust {
            c.env("SSL_CERT_FILE", &ca);
        } else {
            c.env_remove("SSL_CERT_FILE");
        }
        c
    };
    let serve = Serve::start(command(true));
    let events = serve.chat(json!({"message": "hi", "episode_id": "e1"})).await;
    assert_eq!(baton_tests::text_of(&events, "orchestrator"), "Hello over TLS!");
    assert_eq!(server.requests_for("orch").len(), 1);
    drop(serve);

    let serve = Serve::start(command(false));
    let events = serve.chat(json!({"message": "hi again", "episode_id": "e2"})).await;
    let error = events.iter().find_map(|e| match e {
        Event::Error { code, message, .. } => Some((code.clone(), message.clone())),
        _ => None,
    });
    let (code, message) = error.expect("an in-band error for the untrusted certificate");
    assert!(code.starts_with("model_"), "{code}: {message}");
    assert!(!message.contains("sk-tls-secret"), "{message}");
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Error | Status::Partial, .. })));
    assert_eq!(server.requests_for("orch").len(), 1, "nothing reached the untrusted server's handler");
}

/// `chat` with `examples/approvals.yaml`, offline: the call that needs approval waits, the command
/// asks on the terminal and reads the answer from standard input, and the turn goes on.
fn chat_with_answers(answers: &str) -> (std::process::ExitStatus, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/approvals.yaml");
    let mut child = orchestrator(dir.path())
        .arg("--config")
        .arg(example)
        .args(["chat", "clip the coffee offer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(answers.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn chat_asks_for_approval_on_the_terminal_and_goes_on_with_a_yes() {
    let (status, stdout, stderr) = chat_with_answers("y\n");
    assert!(stderr.contains("Approve clip_offer by card_keeper[1]"), "{stderr}");
    assert!(stdout.contains("? card_keeper[1] wants to call clip_offer"), "{stdout}");
    assert!(stdout.contains("completed: Interrupted") && stdout.contains("completed: Ok"), "{stdout}");
    assert!(
        stdout.contains(
            "Clipped 400 points on Roastworks Ground Coffee [off-0117] to your card; it now holds 1 offer."
        ),
        "{stdout}"
    );
    assert!(status.success(), "{stdout}\n{stderr}");
}

#[test]
fn chat_tells_the_model_a_no_and_leaves_the_call_unmade() {
    let (status, stdout, _) = chat_with_answers("n not today\n");
    assert!(stdout.contains("completed: Ok"), "{stdout}");
    assert!(!stdout.contains("Clipped"), "nothing clipped: {stdout}");
    assert!(stdout.contains("not today"), "the model read the reason: {stdout}");
    assert!(status.success());
}

#[test]
fn chat_without_an_answer_leaves_the_approval_waiting() {
    let (status, stdout, stderr) = chat_with_answers("");
    assert!(stdout.contains("completed: Interrupted"), "{stdout}");
    assert!(stderr.contains("the approvals still wait"), "{stderr}");
    assert!(!status.success(), "an unanswered turn is not a success");
}
