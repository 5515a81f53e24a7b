//! A2A v1.0 both ways, over real HTTP, against implementations nobody on the project wrote: the
//! official Python SDK (PyPI `a2a-sdk`, which scripts/test.sh installs into .venv).
//!
//! - Server: Baton's `serve` (its code on a loopback socket, the scripted model server behind it)
//!   driven by the SDK's client (`tests/a2a/baton_client.py`): the card, a streamed task, a task
//!   sent and read back, a cancel, a failing turn, and the refusals (another user's context, an
//!   unsupported method), plus the bad requests the SDK never sends, as raw JSON-RPC.
//! - Client: Baton's `A2aAgent` calling a sample agent built on the SDK's server
//!   (`tests/a2a/sample_agent.py`): text and usage streamed, a failed task, a question, a bearer
//!   token, a slow agent; a team whose entry agent calls it as a tool; and a misbehaving remote
//!   (a small axum server here) for every bad input of a card and a stream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::a2a::{A2aAgent, A2aLimits, BearerToken};
use baton::agent::{Agent, AgentRequest};
use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton_tests::{Endpoint, scripted_runtime_config, start_endpoint, text_of, wait_until};
use futures::StreamExt;
use serde_json::{Value, json};

fn a2a_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a")
}

/// The test command's virtual environment (or the one `BATON_TEST_VENV` names).
fn python() -> PathBuf {
    let venv = std::env::var_os("BATON_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv"));
    let python = venv.join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/test.sh (it installs a2a-sdk)", python.display());
    python
}

// ---- Baton served, the SDK's client calling it ----

const SOLO: &str = "\
entry: solo
agents:
  - name: solo
    model: solo
    description: Answers questions about points.
    instruction: Answer.
";

const ANSWER: &str = "Points post within a day of the receipt scan.";

async fn baton(server: &ScriptedServer) -> Endpoint {
    let config = scripted_runtime_config(server).with_yaml(SOLO, "solo.yaml").unwrap();
    start_endpoint(&config.into()).await
}

/// Runs the SDK client script against `url` as `user`; its JSON output.
async fn sdk(url: &str, user: &str, args: &[&str]) -> Value {
    let run = tokio::process::Command::new(python())
        .arg(a2a_dir().join("baton_client.py"))
        .args([url, user])
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the client ends").unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn kinds(items: &Value) -> Vec<String> {
    items.as_array().unwrap().iter().map(|i| i.as_object().unwrap().keys().next().unwrap().clone()).collect()
}

fn artifact_text(items: &Value) -> String {
    items
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect()
}

fn last_state(items: &Value) -> String {
    let last = items.as_array().unwrap().last().unwrap();
    last["statusUpdate"]["status"]["state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_sdk_streams_a_turn_as_a_task_and_reads_it_back() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    server.push("solo", Reply::text(ANSWER));
    let got = sdk(&endpoint.url, "alice", &["stream", "when do my points post?"]).await;
    assert_eq!(got["card"]["name"], "solo", "{got}");
    assert_eq!(got["card"]["capabilities"]["streaming"], true);
    assert_eq!(got["card"]["supportedInterfaces"][0]["url"], format!("{}/a2a", endpoint.url));
    let card = reqwest::get(format!("{}/.well-known/agent-card.json", endpoint.url)).await.unwrap();
    assert_eq!(card.headers()["cache-control"], "max-age=300");
    assert_eq!(card.headers()["vary"], "host, x-forwarded-proto", "its URL comes from them");
    let items = &got["items"];
    let kinds = kinds(items);
    assert_eq!(kinds[0], "task", "{got}");
    assert_eq!(items[0]["task"]["status"]["state"], "TASK_STATE_WORKING");
    assert!(
        kinds.iter().filter(|k| *k == "artifactUpdate").count() >= 2,
        "text streams in chunks: {kinds:?}"
    );
    assert_eq!(artifact_text(items), ANSWER);
    let chunk = items.as_array().unwrap().iter().find(|i| i.get("artifactUpdate").is_some()).unwrap();
    assert_eq!(chunk["artifactUpdate"]["artifact"]["artifactId"], "solo", "attributed to its instance");
    assert_eq!(chunk["artifactUpdate"]["artifact"]["metadata"]["baton"]["agent"], "solo");
    assert_eq!(last_state(items), "TASK_STATE_COMPLETED");
    let end = items.as_array().unwrap().last().unwrap();
    assert_eq!(end["statusUpdate"]["metadata"]["baton"]["status"], "ok");

    let task_id = items[0]["task"]["id"].as_str().unwrap();
    let context = items[0]["task"]["contextId"].as_str().unwrap();
    assert!(task_id.starts_with(&format!("{context}/")), "the task id names its episode: {task_id}");
    // The turn log has it (written by the end of the turn; the read waits for the last batch).
    let read = sdk(&endpoint.url, "alice", &["get", task_id]).await;
    assert_eq!(read["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{read}");
    assert_eq!(read["task"]["artifacts"][0]["parts"][0]["text"], ANSWER);
    let stranger = sdk(&endpoint.url, "mallory", &["get", task_id]).await;
    assert_eq!(stranger["error"]["type"], "TaskNotFoundError", "another user's task: {stranger}");

    // The context goes on: the next message in it is the episode's next turn.
    server.push("solo", Reply::text("Yes, all of them."));
    let next = sdk(&endpoint.url, "alice", &["stream", "all of them?", context]).await;
    assert_eq!(next["items"][0]["task"]["contextId"], context, "{next}");
    let sent = &server.requests_for("solo")[1].body["messages"];
    assert!(sent.to_string().contains(ANSWER), "the second turn saw the first: {sent}");
    let other = sdk(&endpoint.url, "mallory", &["stream", "hi", context]).await;
    assert_eq!(other["error"]["type"], "InvalidParamsError", "another user's context: {other}");
    assert!(other["error"]["message"].as_str().unwrap().contains("unknown contextId"));
}

const DUO: &str = "\
entry: solo
a2a: {agents: [deals]}
agents:
  - name: solo
    model: solo
    description: Answers questions about points.
    instruction: Answer.
  - name: deals
    model: deals
    description: Finds this week's deals.
    instruction: Find deals.
";

#[tokio::test]
async fn an_agent_listed_in_the_a2a_key_is_served_with_its_own_card_and_endpoint() {
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_runtime_config(&server).with_yaml(DUO, "duo.yaml").unwrap();
    let endpoint = start_endpoint(&config.into()).await;
    server.push("deals", Reply::text("Apples are half price."));
    let base = format!("{}/a2a/deals", endpoint.url);
    let got = sdk(&base, "alice", &["stream", "any deals?"]).await;
    assert_eq!(got["card"]["name"], "deals", "{got}");
    assert_eq!(got["card"]["description"], "Finds this week's deals.");
    assert_eq!(got["card"]["supportedInterfaces"][0]["url"], base, "its own endpoint");
    let items = &got["items"];
    assert_eq!(artifact_text(items), "Apples are half price.", "{got}");
    let chunk = items.as_array().unwrap().iter().find(|i| i.get("artifactUpdate").is_some()).unwrap();
    assert_eq!(chunk["artifactUpdate"]["artifact"]["artifactId"], "deals", "the served agent answered");
    assert_eq!(last_state(items), "TASK_STATE_COMPLETED");
    assert!(server.requests_for("solo").is_empty(), "the entry agent was not asked");
    let task_id = items[0]["task"]["id"].as_str().unwrap();
    let read = sdk(&base, "alice", &["get", task_id]).await;
    assert_eq!(read["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{read}");

    // The entry agent keeps its paths, and answers at its name too.
    server.push("solo", Reply::text(ANSWER));
    let entry = sdk(&endpoint.url, "alice", &["send", "when do my points post?"]).await;
    assert_eq!(entry["card"]["name"], "solo", "{entry}");
    let by_name =
        reqwest::get(format!("{}/a2a/solo/.well-known/agent-card.json", endpoint.url)).await.unwrap();
    assert_eq!(by_name.json::<Value>().await.unwrap()["name"], "solo");
    // An agent not served: a 404 naming those that are, for the card and for JSON-RPC.
    let missing =
        reqwest::get(format!("{}/a2a/nobody/.well-known/agent-card.json", endpoint.url)).await.unwrap();
    assert_eq!(missing.status(), 404);
    let rpc = json!({"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "e/t"}});
    let refused = reqwest::Client::new()
        .post(format!("{}/a2a/nobody", endpoint.url))
        .header("x-baton-user", "alice")
        .json(&rpc)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], -32600);
    assert!(refused["error"]["message"].as_str().unwrap().contains("served: solo, deals"), "{refused}");
}

#[tokio::test]
async fn send_without_streaming_answers_with_the_finished_task() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    server.push("solo", Reply::text(ANSWER));
    let got = sdk(&endpoint.url, "alice", &["send", "when do my points post?"]).await;
    let task = &got["items"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], ANSWER);
}

#[tokio::test]
async fn a_cancel_stops_the_running_turn_and_the_task_ends_canceled() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    let long = "word ".repeat(60);
    server.push("solo", Reply::text(long.clone()).chunk_delay(Duration::from_millis(100)));
    let got = sdk(&endpoint.url, "alice", &["cancel", "tell me everything"]).await;
    assert_eq!(got["cancel"]["status"]["state"], "TASK_STATE_CANCELED", "{got}");
    assert_eq!(got["get"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(last_state(&got["items"]), "TASK_STATE_CANCELED");
    let said = artifact_text(&got["items"]);
    assert!(!said.is_empty() && said.len() < long.len(), "stopped midway: {said:?}");
}

#[tokio::test]
async fn a_subscriber_gets_the_whole_task_from_its_first_event_then_live() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    server.push("solo", Reply::text(ANSWER).chunk_delay(Duration::from_millis(100)));
    let got = sdk(&endpoint.url, "alice", &["subscribe", "when do my points post?"]).await;
    assert_eq!(got["started"]["task"]["status"]["state"], "TASK_STATE_WORKING", "{got}");
    assert_eq!(got["items"][0]["task"]["id"], got["started"]["task"]["id"]);
    assert_eq!(artifact_text(&got["items"]), ANSWER, "nothing missed: {got}");
    assert_eq!(last_state(&got["items"]), "TASK_STATE_COMPLETED");
}

#[tokio::test]
async fn a_failing_turn_ends_the_task_failed_with_its_error() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    server.set_default("solo", Reply::status(400, "model refuses"));
    let got = sdk(&endpoint.url, "alice", &["stream", "hello?"]).await;
    let end = got["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(end["statusUpdate"]["status"]["state"], "TASK_STATE_FAILED", "{got}");
    let why = end["statusUpdate"]["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(!why.is_empty(), "{end}");
}

#[tokio::test]
async fn unsupported_methods_and_bad_requests_are_json_rpc_errors() {
    let server = ScriptedServer::start().await.unwrap();
    let endpoint = baton(&server).await;
    let listed = sdk(&endpoint.url, "alice", &["list"]).await;
    assert_eq!(listed["error"]["type"], "UnsupportedOperationError", "{listed}");

    let rpc = format!("{}/a2a", endpoint.url);
    let call = |body: String, version: Option<&'static str>| {
        let mut request =
            reqwest::Client::new().post(&rpc).header("content-type", "application/json").body(body);
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let message = |parts: Value| json!({"messageId": "m", "role": "ROLE_USER", "parts": parts});
    let request = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
    };
    // No `A2A-Version` is 0.3 (the spec), as the official SDK's servers read it.
    let hi = request("SendMessage", json!({"message": message(json!([{"text": "hi"}]))}));
    let unversioned = call(hi.clone(), None).await;
    assert_eq!(unversioned["error"]["code"], -32009, "{unversioned}");
    let said = unversioned["error"]["message"].as_str().unwrap();
    assert!(said.contains("version 0.3") && said.contains("A2A-Version: 1.0"), "{said}");
    let v = Some("1.0");
    let cases = [
        ("{not json".to_owned(), v, -32700),
        (json!({"id": 1, "method": "SendMessage"}).to_string(), v, -32600),
        (request("message/send", json!({"message": message(json!([{"text": "hi"}]))})), v, -32601),
        (request("Nope", json!({})), v, -32601),
        (hi.clone(), Some("0.3"), -32009),
        (hi.clone(), Some("1.1"), -32009),
        (hi.clone(), Some(""), -32009),
        (request("SendMessage", json!({"nothing": 1})), v, -32602),
        (request("SendMessage", json!({"message": message(json!([{"text": "  "}]))})), Some("1.0.3"), -32602),
        (request("SendMessage", json!({"message": message(json!([{"url": "https://x/a.png"}]))})), v, -32005),
        (request("GetTask", json!({"id": "no-such-task"})), v, -32001),
        (request("CancelTask", json!({"id": "ep/turn"})), v, -32001),
        (request("CreateTaskPushNotificationConfig", json!({})), v, -32003),
        (request("GetExtendedAgentCard", json!({})), v, -32004),
    ];
    for (body, version, code) in cases {
        let answer = call(body.clone(), version).await;
        assert_eq!(answer["error"]["code"], code, "{body} → {answer}");
        assert!(!answer["error"]["message"].as_str().unwrap().is_empty());
    }
    assert!(server.requests_for("solo").is_empty(), "no bad request reached the model");
}

/// examples/approvals.yaml offline: the concierge's card keeper asks before it clips an offer.
#[tokio::test]
async fn a_pending_approval_is_input_required_and_a_data_part_resumes_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/approvals.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let config = baton_reference::reference_config().with_yaml(&yaml, "approvals.yaml").unwrap();
    let endpoint = start_endpoint(&baton_reference::Deployment::from(config)).await;
    let got = sdk(&endpoint.url, "alice", &["stream", "clip the coffee offer"]).await;
    let end = got["items"].as_array().unwrap().last().unwrap().clone();
    let status = &end["statusUpdate"]["status"];
    assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED", "{got}");
    let interrupt = &status["message"]["parts"][1]["data"]["interrupts"][0];
    assert_eq!(interrupt["tool"], "clip_offer", "{end}");
    let asked = got["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["statusUpdate"]["metadata"]["baton"]["type"] == "approval_required");
    assert!(asked, "the approval_required event is shown as it happens");

    let context = end["statusUpdate"]["contextId"].as_str().unwrap();
    let decisions = json!([{"interrupt_id": interrupt["interrupt_id"], "decision": "approve"}]).to_string();
    let resumed = sdk(&endpoint.url, "alice", &["resume", context, &decisions]).await;
    assert_eq!(last_state(&resumed["items"]), "TASK_STATE_COMPLETED", "{resumed}");
    assert!(!artifact_text(&resumed["items"]).is_empty(), "the approved call's answer: {resumed}");
    let again = sdk(&endpoint.url, "alice", &["resume", context, &decisions]).await;
    assert!(again["error"]["message"].as_str().unwrap_or_default().contains("answered"), "{again}");
}

// ---- A remote A2A agent (the SDK's server) behind Baton's client ----

/// `tests/a2a/sample_agent.py` on a free loopback port, killed on drop.
struct SampleAgent {
    _child: tokio::process::Child,
    url: String,
}

impl SampleAgent {
    async fn start(token: Option<&str>) -> SampleAgent {
        match token {
            Some(token) => SampleAgent::start_with(&["--token", token], &[]).await,
            None => SampleAgent::start_with(&[], &[]).await,
        }
    }

    /// The sample agent run with `args`, its environment with `envs` too.
    async fn start_with(args: &[&str], envs: &[(&str, &str)]) -> SampleAgent {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = tokio::process::Command::new(python());
        command.arg(a2a_dir().join("sample_agent.py")).args(["--port", &port.to_string()]).args(args);
        command.envs(envs.iter().copied());
        let child = command.kill_on_drop(true).spawn().unwrap();
        wait_until("the sample agent listens", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        SampleAgent { _child: child, url: format!("http://127.0.0.1:{port}") }
    }
}

fn limits() -> A2aLimits {
    A2aLimits {
        card_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(20),
        ..A2aLimits::default()
    }
}

async fn ask(agent: &A2aAgent, query: &str) -> Vec<Event> {
    let request = AgentRequest { query: query.into(), ..AgentRequest::default() };
    let events = agent.run(request, "weather[1]".into()).collect::<Vec<_>>();
    tokio::time::timeout(Duration::from_secs(30), events).await.expect("the call is bounded")
}

fn agent_at(url: &str, token: Option<&str>, limits: A2aLimits) -> A2aAgent {
    A2aAgent::new("weather", url, reqwest::Client::new(), token.map(BearerToken::new), limits)
}

fn error_code(events: &[Event]) -> Option<(String, String)> {
    events.iter().find_map(|e| match e {
        Event::Error { code, message, .. } => Some((code.clone(), message.clone())),
        _ => None,
    })
}

#[tokio::test]
async fn a_remote_sdk_agent_streams_text_and_usage_and_reports_its_failures() {
    let sample = SampleAgent::start(None).await;
    let agent = agent_at(&sample.url, None, limits());
    let events = ask(&agent, "weather in Lisbon?").await;
    assert_eq!(text_of(&events, "weather[1]"), "Sunny in Lisbon.", "{events:?}");
    assert_eq!(error_code(&events), None);
    let usage = events.iter().find_map(|e| match e {
        Event::Usage { usage, .. } => Some((usage.input_tokens, usage.output_tokens)),
        _ => None,
    });
    assert_eq!(usage, Some((12, 7)), "usage from the final status update's metadata");

    let failed = ask(&agent, "fail please").await;
    let (code, message) = error_code(&failed).expect("an error event");
    assert_eq!(code, "a2a_remote_failed");
    assert!(
        message.contains("TASK_STATE_FAILED") && message.contains("the forecast service is down"),
        "{message}"
    );

    let asked = ask(&agent, "which one?").await;
    assert_eq!(text_of(&asked, "weather[1]"), "Which city do you mean?");
    assert_eq!(error_code(&asked), None);
}

#[tokio::test]
async fn a_conversations_follow_ups_go_to_the_same_remote_context() {
    let sample = SampleAgent::start(None).await;
    let agent = agent_at(&sample.url, None, limits());
    let ask_in = |user: &str, episode: &str| AgentRequest {
        query: "count please".into(),
        user_id: user.into(),
        episode_id: episode.into(),
        ..AgentRequest::default()
    };
    let run = |request: AgentRequest| async {
        let events: Vec<Event> = agent.run(request, "weather[1]".into()).collect().await;
        text_of(&events, "weather[1]")
    };
    assert_eq!(run(ask_in("alice", "ep-1")).await, "Message 1 in this conversation.");
    assert_eq!(run(ask_in("alice", "ep-1")).await, "Message 2 in this conversation.");
    assert_eq!(run(ask_in("alice", "ep-2")).await, "Message 1 in this conversation.", "another episode");
    assert_eq!(run(ask_in("bob", "ep-1")).await, "Message 1 in this conversation.", "another user");
}

#[tokio::test]
async fn the_bearer_token_is_sent_and_without_it_the_call_fails_clearly() {
    let sample = SampleAgent::start(Some("s3cret-token")).await;
    let with = ask(&agent_at(&sample.url, Some("s3cret-token"), limits()), "weather?").await;
    assert_eq!(text_of(&with, "weather[1]"), "Sunny in weather?".replace("weather?", "Lisbon."));
    let without = ask(&agent_at(&sample.url, None, limits()), "weather?").await;
    let (code, message) = error_code(&without).expect("an error event");
    assert_eq!(code, "a2a_remote_failed");
    assert!(message.contains("401"), "{message}");
    assert!(!format!("{without:?}").contains("s3cret"), "the token is never in an event");
}

/// SigV4: the sample agent recomputes each request's signature with botocore's `SigV4Auth` over
/// the request as it received it (`tests/a2a/sample_agent.py --sigv4`).
#[tokio::test]
async fn sigv4_signed_calls_are_verified_by_botocore_and_a_wrong_key_fails_clearly() {
    use aws_credential_types::Credentials;
    use aws_credential_types::provider::SharedCredentialsProvider;
    use baton::a2a::SigningScope;
    use baton_aws::sigv4::SigV4Signer;

    let env = [("A2A_SAMPLE_KEY_ID", "AKIDSAMPLE"), ("A2A_SAMPLE_SECRET", "sample-s3cret")];
    let sample = SampleAgent::start_with(&["--sigv4", "execute-api:eu-west-1"], &env).await;
    let signed_with = |secret: &str| {
        let credentials = Credentials::new("AKIDSAMPLE", secret, None, None, "test");
        let signer = SigV4Signer::new(SharedCredentialsProvider::new(credentials), Some("us-east-1".into()));
        let scope = SigningScope { service: "execute-api".into(), region: Some("eu-west-1".into()) };
        agent_at(&sample.url, None, limits()).with_signer(std::sync::Arc::new(signer), scope)
    };
    let events = ask(&signed_with("sample-s3cret"), "weather in Lisbon?").await;
    assert_eq!(text_of(&events, "weather[1]"), "Sunny in Lisbon.", "{events:?}");
    assert_eq!(error_code(&events), None);

    // A wrong key: the card is refused (403), a clear in-band error that names no secret.
    let wrong = ask(&signed_with("not-the-s3cret"), "weather in Lisbon?").await;
    let (code, message) = error_code(&wrong).expect("an error event");
    assert_eq!(code, "a2a_card_unavailable");
    assert!(message.contains("HTTP 403"), "{message}");
    let unsigned = ask(&agent_at(&sample.url, None, limits()), "weather?").await;
    assert_eq!(error_code(&unsigned).map(|e| e.0), Some("a2a_card_unavailable".into()));
    let all = format!("{events:?}{wrong:?}{unsigned:?}");
    assert!(!all.contains("s3cret"), "no secret in any event");
}

/// The remote's tasks as the SDK's client lists them (`ListTasks`): state by task id.
async fn remote_states(url: &str) -> Vec<String> {
    let listed = sdk(url, "alice", &["list"]).await;
    let tasks = listed["tasks"]["tasks"].as_array().cloned().unwrap_or_default();
    tasks.iter().map(|t| t["status"]["state"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn a_call_dropped_mid_stream_cancels_its_remote_task_and_a_finished_one_does_not() {
    let sample = SampleAgent::start(None).await;
    let agent = agent_at(&sample.url, None, limits());
    let done = ask(&agent, "weather in Lisbon?").await;
    assert_eq!(error_code(&done), None, "{done:?}");
    assert_eq!(remote_states(&sample.url).await, ["TASK_STATE_COMPLETED"], "an ended call cancels nothing");

    // The caller gives up after the first chunk of a slow task (10 s of chunks).
    let request = AgentRequest { query: "slow please".into(), ..AgentRequest::default() };
    let mut events = agent.run(request, "weather[1]".into());
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if matches!(event, Event::Text { .. }) {
                return event;
            }
        }
        panic!("the stream ended without text")
    })
    .await
    .expect("a first chunk");
    assert!(matches!(first, Event::Text { .. }));
    drop(events);
    let url = sample.url.clone();
    wait_until("the remote task ends canceled", || {
        let url = url.clone();
        async move { remote_states(&url).await.contains(&"TASK_STATE_CANCELED".to_owned()) }
    })
    .await;
    let mut states = remote_states(&sample.url).await;
    states.sort();
    // Canceled, not completed: the cancel reached the remote while its 10 s task still ran (a
    // wall-clock bound here failed on a loaded host; the state says the same without one).
    assert_eq!(states, ["TASK_STATE_CANCELED", "TASK_STATE_COMPLETED"]);
}

#[tokio::test]
async fn a_slow_remote_is_cut_by_the_idle_timeout() {
    let sample = SampleAgent::start(None).await;
    let impatient = A2aLimits { idle_timeout: Duration::from_millis(100), ..limits() };
    let events = ask(&agent_at(&sample.url, None, impatient), "slow please").await;
    let (code, _) = error_code(&events).expect("an error event");
    assert_eq!(code, "a2a_remote_timeout", "{events:?}");
    assert!(text_of(&events, "weather[1]").contains("Sorry"), "an apology ends the answer");
}

const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Lead.
    agents: [weather]
  - name: weather
    description: Tells the weather.
    timeout_seconds: 10
    output: text_and_events
    remote: {a2a: URL}
";

#[tokio::test]
async fn a_team_calls_the_remote_agent_as_a_tool_and_sees_its_failure_as_an_error_result() {
    let sample = SampleAgent::start(None).await;
    let server = ScriptedServer::start().await.unwrap();
    let yaml = TEAM.replace("URL", &format!("\"{}\"", sample.url));
    let config = scripted_runtime_config(&server).with_yaml(&yaml, "team.yaml").unwrap();
    let endpoint = start_endpoint(&config.into()).await;
    server.push(
        "lead",
        Reply::text("Checking. ")
            .tool_call("agent__weather", json!({"text": "weather in Lisbon?"}))
            .tool_call("agent__weather", json!({"text": "fail please"})),
    );
    server.push("lead", Reply::text("Done."));
    let events = baton_tests::chat(&endpoint.url, "weather?").await;
    let speakers: Vec<String> = baton_tests::speakers(&events);
    assert!(speakers.contains(&"weather[1]".to_owned()), "{speakers:?}");
    assert_eq!(text_of(&events, "weather[1]"), "Sunny in Lisbon.");
    let Some(Event::Completed { status, usage, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*status, Status::Ok, "a failing child is an error result, not a failed turn");
    assert!(usage.iter().any(|u| u.agent == "weather" && u.usage.input_tokens == 12), "{usage:?}");
    let sent = server.requests_for("lead")[1].body["messages"].to_string();
    assert!(sent.contains("Sunny in Lisbon."), "{sent}");
    assert!(sent.contains("a2a_remote_failed"), "the failure is the second call's result: {sent}");
}

// ---- A misbehaving remote: every bad input of a card and a stream ----

mod bad_remote {
    use axum::Router;
    use axum::extract::{Path, State};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use futures::StreamExt;
    use serde_json::json;
    use std::time::Duration;

    fn sse(frames: Vec<String>, then: Option<Duration>) -> Response {
        let head = futures::stream::iter(frames.into_iter().map(Ok::<_, std::convert::Infallible>));
        // `then`: after the frames, a keep-alive comment at this pace, forever.
        let tail = futures::stream::unfold(then, |pace| async move {
            let pace = pace?;
            tokio::time::sleep(pace).await;
            Some((Ok(": ping\n\n".to_owned()), Some(pace)))
        });
        let body = axum::body::Body::from_stream(head.chain(tail));
        ([("content-type", "text/event-stream")], body).into_response()
    }

    fn frame(result: serde_json::Value) -> String {
        format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": 1, "result": result}))
    }

    async fn card(State(base): State<String>, Path(kind): Path<String>) -> Response {
        match kind.as_str() {
            "malformed" => "{\"name\": \"x\", \"supportedInterfaces\": 7".into_response(),
            "huge" => axum::Json(json!({"name": "x", "description": "d".repeat(300 * 1024)})).into_response(),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                axum::Json(json!({"name": "x"})).into_response()
            }
            "grpc-only" => axum::Json(json!({"name": "x", "supportedInterfaces": [
                {"url": "127.0.0.1:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]}))
            .into_response(),
            "missing" => (axum::http::StatusCode::NOT_FOUND, "no card").into_response(),
            "no-streaming" => axum::Json(json!({"name": kind, "capabilities": {}, "supportedInterfaces": [
                {"url": format!("{base}/{kind}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}))
            .into_response(),
            _ => axum::Json(json!({"name": kind, "capabilities": {"streaming": true}, "supportedInterfaces": [
                {"url": format!("{base}/{kind}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}))
            .into_response(),
        }
    }

    async fn rpc(Path(kind): Path<String>, body: axum::body::Bytes) -> Response {
        let method = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["method"].as_str().map(str::to_owned));
        let task =
            frame(json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}));
        let chunk = frame(json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"text": "partial "}]}}}));
        match kind.as_str() {
            "unknown" => sse(vec![task, frame(json!({"progressUpdate": {"percent": 5}}))], None),
            "broken" => sse(vec![task, chunk], None),
            "broken-once" => {
                if method.as_deref().is_some_and(|m| m.starts_with("Send")) {
                    SENT_TO_BROKEN_ONCE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                sse(vec![task, chunk], None)
            }
            "endless" => sse(vec![task, chunk], Some(Duration::from_millis(50))),
            "silent" => sse(vec![task], Some(Duration::from_secs(60))),
            "long-line" => sse(vec![format!("data: {}", "x".repeat(2 * 1024 * 1024))], None),
            "direct" => sse(
                vec![frame(json!({"message": {"messageId": "m", "contextId": "c", "role": "ROLE_AGENT",
                "parts": [{"text": "A direct answer."}]}}))],
                None,
            ),
            "no-streaming" => axum::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t",
                "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a", "parts": [{"text": "The whole answer."}]}]}}}))
            .into_response(),
            _ => axum::Json(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
                "message": "Internal error: key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 failed"}}))
            .into_response(),
        }
    }

    /// Messages (`Send…`) the `broken-once` agent received (it acts, then its stream ends
    /// mid-answer); its caller may still cancel the task, which is not a message.
    pub(super) static SENT_TO_BROKEN_ONCE: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    /// The server's base URL; it runs until the test ends.
    pub(super) async fn start() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/{kind}/.well-known/agent-card.json", get(card))
            .route("/{kind}/a2a", post(rpc))
            .with_state(base.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }
}

/// Never twice: a remote agent whose stream ends after it started working (it may have acted)
/// is asked once; the caller reads an error, and nothing sends the message again.
#[tokio::test]
async fn a_remote_that_breaks_off_mid_answer_is_asked_once() {
    use std::sync::atomic::Ordering;
    let base = bad_remote::start().await;
    let events = ask(&agent_at(&format!("{base}/broken-once"), None, limits()), "book it").await;
    let (code, _) = error_code(&events).expect("an error the caller reads");
    assert!(code.starts_with("a2a_remote_"), "{code}: {events:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bad_remote::SENT_TO_BROKEN_ONCE.load(Ordering::SeqCst), 1, "sent once");
}

#[tokio::test]
async fn a_direct_message_and_a_card_without_streaming_are_answers_too() {
    let base = bad_remote::start().await;
    let direct = ask(&agent_at(&format!("{base}/direct"), None, limits()), "hello").await;
    assert_eq!(text_of(&direct, "weather[1]"), "A direct answer.");
    assert_eq!(error_code(&direct), None);
    let whole = ask(&agent_at(&format!("{base}/no-streaming"), None, limits()), "hello").await;
    assert_eq!(text_of(&whole, "weather[1]"), "The whole answer.", "SendMessage's task, whole");
    assert_eq!(error_code(&whole), None);
}

#[tokio::test]
async fn every_bad_card_and_stream_is_a_clear_in_band_error_within_its_bound() {
    let base = bad_remote::start().await;
    let tight = A2aLimits {
        card_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_secs(1),
        max_event_bytes: 64 * 1024,
        ..A2aLimits::default()
    };
    let cases = [
        ("missing", "a2a_card_unavailable", "HTTP 404"),
        ("malformed", "a2a_card_unavailable", "not a valid card"),
        ("huge", "a2a_card_unavailable", "larger than"),
        ("slow", "a2a_card_unavailable", "did not arrive within 300 ms"),
        ("grpc-only", "a2a_card_unusable", "no JSON-RPC interface"),
        ("unknown", "a2a_remote_invalid", "unknown kind (progressUpdate)"),
        ("broken", "a2a_remote_truncated", "ended before its task did"),
        ("endless", "a2a_remote_timeout", "did not end in time"),
        ("silent", "a2a_remote_timeout", "went silent"),
        ("long-line", "a2a_remote_invalid", "bytes without ending"),
        ("rpc-error", "a2a_remote_error", "error -32603"),
    ];
    for (kind, code, says) in cases {
        let started = std::time::Instant::now();
        let agent = agent_at(&format!("{base}/{kind}"), None, tight);
        let events = ask(&agent, "hello").await;
        let (got, message) = error_code(&events).unwrap_or_else(|| panic!("{kind}: no error in {events:?}"));
        assert_eq!(got, code, "{kind}: {message}");
        assert!(message.contains(says), "{kind}: {message}");
        assert!(
            !message.contains("sk-proj-abcdefghij"),
            "{kind}: a secret-looking value is masked: {message}"
        );
        assert!(started.elapsed() < Duration::from_secs(3), "{kind}: bounded, took {:?}", started.elapsed());
        assert!(matches!(events.last(), Some(Event::Text { text, .. }) if text.contains("Sorry")), "{kind}");
    }
}
