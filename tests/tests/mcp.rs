//! MCP, both ways, against implementations nobody on the project wrote.
//!
//! - Client: the reference server `@modelcontextprotocol/server-everything` (npm), over stdio and
//!   over streamable HTTP: listing, a call with arguments, a structured result, an error result,
//!   progress, a slow call cancelled at its timeout, a server killed mid-call.
//! - Server: Baton's agents driven by the official Python client (PyPI `mcp`).
//! - Both: the official conformance suite `@modelcontextprotocol/conformance` (npm), the
//!   scenarios that apply (docs/mcp.md lists the skipped ones and why).
//!
//! scripts/test.sh installs the npm packages into tests/mcp/node_modules and `mcp` into .venv.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::event::{Event, Status};
use baton::http::EndpointLimits;
use baton::mcp::{McpCallItem, McpError, McpServers, McpTools, connect_all};
use baton::mcp_server::{McpAgent, serve_http};
use baton::model::ToolCall;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::tool::{ToolContext, ToolRegistry};
use baton::wiring::orchestrator_of;
use baton_tests::stores::{Embedded, StoreHarness, test_clock};
use baton_tests::{open_stream_as, scripted_config, start_endpoint_over, text_of};
use futures::StreamExt;
use serde_json::{Value, json};

fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp")
}

fn everything_js() -> String {
    let js = mcp_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(js.exists(), "{} is missing: run scripts/test.sh (npm install in tests/mcp)", js.display());
    js.display().to_string()
}

fn servers(config: Value) -> McpServers {
    serde_json::from_value(config).unwrap()
}

/// `server` with the fields of `extra` added.
fn with(mut server: Value, extra: &Value) -> Value {
    if let (Some(server), Some(extra)) = (server.as_object_mut(), extra.as_object()) {
        server.extend(extra.clone());
    }
    server
}

fn stdio_config(extra: Value) -> McpServers {
    servers(
        json!({"everything": with(json!({"command": "node", "args": [everything_js(), "stdio"]}), &extra)}),
    )
}

/// The reference server's streamable HTTP transport on a free loopback port, killed on drop.
struct HttpEverything {
    _child: tokio::process::Child,
    url: String,
}

impl HttpEverything {
    async fn start() -> HttpEverything {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = tokio::process::Command::new("node")
            .args([everything_js().as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        baton_tests::wait_until("the everything server listens", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        HttpEverything { _child: child, url: format!("http://127.0.0.1:{port}/mcp") }
    }

    fn config(&self, extra: Value) -> McpServers {
        servers(json!({"everything": with(json!({"url": self.url}), &extra)}))
    }
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Stdio,
    Http,
}

/// Connects to the reference server over `transport`; the HTTP server lives as long as the
/// returned guard.
async fn connect(transport: Transport, extra: Value) -> (McpTools, Option<HttpEverything>) {
    match transport {
        Transport::Stdio => (connect_all(&stdio_config(extra)).await.unwrap(), None),
        Transport::Http => {
            let server = HttpEverything::start().await;
            (connect_all(&server.config(extra)).await.unwrap(), Some(server))
        }
    }
}

async fn call(tools: &McpTools, name: &str, arguments: Value) -> baton::tool::ToolOutcome {
    let registry = ToolRegistry::new(tools.select("mcp__everything__*").unwrap()).unwrap();
    let call = ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.to_string() };
    registry.call(&call, &ToolContext::new("u", "e"), Duration::from_secs(30)).await
}

async fn lists_tools_with_their_schemas(transport: Transport) {
    let (tools, _server) = connect(transport, json!({})).await;
    let registry = ToolRegistry::new(tools.select("mcp__everything__*").unwrap()).unwrap();
    let specs = registry.specs();
    let sum = specs.iter().find(|s| s.name == "mcp__everything__get-sum").expect("get-sum is offered");
    assert_eq!(sum.parameters["properties"]["a"]["type"], "number", "{:?}", sum.parameters);
    assert!(specs.iter().all(|s| s.name.starts_with("mcp__everything__")));
    assert_eq!(tools.select("mcp__everything__echo").unwrap().len(), 1);
}

async fn calls_with_validated_arguments(transport: Transport) {
    let (tools, _server) = connect(transport, json!({})).await;
    let outcome = call(&tools, "mcp__everything__get-sum", json!({"a": 2, "b": 40})).await;
    assert!(!outcome.is_error, "{outcome:?}");
    assert!(outcome.result.as_str().unwrap().contains("42"), "{outcome:?}");
    let refused = call(&tools, "mcp__everything__get-sum", json!({"a": "two", "b": 40})).await;
    assert_eq!(refused.result["error"]["code"], "invalid_arguments", "checked against the server's schema");
}

async fn a_structured_result_is_the_tool_result(transport: Transport) {
    let (tools, _server) = connect(transport, json!({})).await;
    let outcome =
        call(&tools, "mcp__everything__get-structured-content", json!({"location": "Chicago"})).await;
    assert_eq!(
        outcome.result,
        json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
    );
}

async fn an_is_error_result_is_an_error_the_model_reads(transport: Transport) {
    let (tools, _server) = connect(transport, json!({})).await;
    let outcome =
        call(&tools, "mcp__everything__gzip-file-as-resource", json!({"data": "ftp://127.0.0.1/x"})).await;
    assert!(outcome.is_error);
    assert_eq!(outcome.result["error"]["code"], "tool_failed");
    let message = outcome.result["error"]["message"].as_str().unwrap();
    assert!(message.contains("Unsupported URL protocol"), "{message}");
}

async fn progress_notifications_come_before_the_result(transport: Transport) {
    let (tools, _server) = connect(transport, json!({})).await;
    let tool = tools.tool("mcp__everything__trigger-long-running-operation").unwrap();
    let items: Vec<McpCallItem> = tool.call_items(json!({"duration": 0.3, "steps": 3})).collect().await;
    let progress: Vec<f64> = items
        .iter()
        .filter_map(|i| match i {
            McpCallItem::Progress(p) => Some(p.progress),
            McpCallItem::Done(_) => None,
        })
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0], "{items:?}");
    let Some(McpCallItem::Done(Ok(result))) = items.last() else { panic!("the outcome is last: {items:?}") };
    assert!(result.as_str().unwrap().contains("completed"), "{result}");
}

async fn a_slow_call_is_cancelled_at_its_timeout(transport: Transport) {
    let (tools, _server) = connect(transport, json!({"timeout_seconds": 1})).await;
    let slow =
        call(&tools, "mcp__everything__trigger-long-running-operation", json!({"duration": 30, "steps": 30}))
            .await;
    assert_eq!(slow.result["error"]["code"], "tool_timeout", "{slow:?}");
    // The session survived the cancellation: the next call is answered.
    let next = call(&tools, "mcp__everything__echo", json!({"message": "still here"})).await;
    assert!(next.result.as_str().unwrap().contains("still here"), "{next:?}");
}

macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        mod stdio {
            $(#[tokio::test] async fn $name() { super::$name(super::Transport::Stdio).await })*
        }
        mod streamable_http {
            $(#[tokio::test] async fn $name() { super::$name(super::Transport::Http).await })*
        }
    };
}

both_transports!(
    lists_tools_with_their_schemas,
    calls_with_validated_arguments,
    a_structured_result_is_the_tool_result,
    an_is_error_result_is_an_error_the_model_reads,
    progress_notifications_come_before_the_result,
    a_slow_call_is_cancelled_at_its_timeout,
);

fn pids(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file).unwrap_or_default().lines().map(str::to_owned).collect()
}

async fn kill_when_started(pidfile: &Path, nth: usize) {
    let started = || async move { pids(pidfile).len() > nth };
    baton_tests::wait_until("the server (re)started", started).await;
    // Give the call time to reach the server before it dies.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pid = pids(pidfile)[nth].clone();
    assert!(std::process::Command::new("kill").args(["-9", &pid]).status().unwrap().success());
}

/// Never twice: a server killed after the call reached it and before it answered may have acted,
/// so the call is not sent again (no restart for it); the model reads `outcome_unknown`, and the
/// next call restarts the server.
#[tokio::test]
async fn a_server_killed_mid_call_is_not_sent_the_call_again_and_the_outcome_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let script = format!("echo $$ >> '{}'; exec node '{}' stdio", pidfile.display(), everything_js());
    let config = servers(json!({"everything": {"command": "sh", "args": ["-c", script]}}));
    let tools = connect_all(&config).await.unwrap();
    let long =
        call(&tools, "mcp__everything__trigger-long-running-operation", json!({"duration": 20, "steps": 20}));
    let (outcome, ()) = tokio::join!(long, kill_when_started(&pidfile, 0));
    assert!(outcome.is_error, "{outcome:?}");
    assert_eq!(outcome.result["error"]["code"], "outcome_unknown", "{outcome:?}");
    let message = outcome.result["error"]["message"].as_str().unwrap();
    assert!(message.contains("`everything`") && message.contains("not sent again"), "{message}");
    assert!(!message.contains(&everything_js()), "no command line in what the model reads: {message}");
    // Nothing sends it again later either.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pids(&pidfile).len(), 1, "the call was not sent to a restarted server");
    // The next use restarts the server.
    let next = call(&tools, "mcp__everything__echo", json!({"message": "back"})).await;
    assert!(!next.is_error, "{next:?}");
    assert_eq!(pids(&pidfile).len(), 2);
}

#[tokio::test]
async fn a_server_that_will_not_start_is_named_unless_optional() {
    let missing = servers(json!({"ghost": {"command": "/nonexistent/mcp-server"}}));
    match connect_all(&missing).await {
        Err(McpError::Start { server, .. }) => assert_eq!(server, "ghost"),
        other => panic!("expected a start error: {other:?}"),
    }
    let optional = servers(json!({"ghost": {"command": "/nonexistent/mcp-server", "optional": true}}));
    let tools = connect_all(&optional).await.unwrap();
    assert!(tools.all().is_empty());
    assert!(tools.select("mcp__ghost__*").unwrap().is_empty(), "an absent optional server offers nothing");
}

#[tokio::test]
async fn an_allowlisted_tool_the_server_lacks_is_refused_naming_the_field() {
    let error = connect_all(&stdio_config(json!({"tools": ["echo", "no-such-tool"]}))).await.unwrap_err();
    let McpError::Config(e) = error else { panic!("{error:?}") };
    assert_eq!(e.path, "mcp_servers.everything.tools[1]");
    assert!(e.reason.contains("no-such-tool") && e.reason.contains("get-sum"), "{e}");
    let tools = connect_all(&stdio_config(json!({"tools": ["echo"]}))).await.unwrap();
    assert_eq!(tools.all().len(), 1, "the allowlist leaves out the rest");
    assert!(tools.select("mcp__everything__get-sum").is_err());
}

// ---- An agent's turn with MCP tools, through the chat endpoint ----

/// A chat endpoint whose entry agent `helper` (model `helper` on `model`) has the reference
/// server as its own MCP server (stdio); `extra` is added to the agent's YAML.
async fn helper_with_everything(model: &ScriptedServer, extra: &str) -> (Embedded, baton_tests::Endpoint) {
    let team = format!(
        "entry: helper\nagents:\n  - name: helper\n    model: helper\n    instruction: Help.\n    \
         tools: [mcp__everything__trigger-long-running-operation, mcp__everything__get-sum, mcp__everything__echo]\n    \
         mcp_servers:\n      everything:\n        command: node\n        args: [{js}, stdio]\n{extra}",
        js = serde_json::to_string(&everything_js()).unwrap()
    );
    let config = scripted_config(model).with_yaml(&team, "team.yaml").unwrap();
    assert!(config.config.mcp_servers.is_empty(), "the server is the agent's own");
    let harness = Embedded::start(test_clock()).await;
    let mut backends = config.backends(Some(harness.store())).unwrap();
    backends.mcp = connect_all(&config.config.all_mcp_servers()).await.unwrap();
    let endpoint =
        start_endpoint_over(&config.config, harness.store(), backends, EndpointLimits::default()).await;
    (harness, endpoint)
}

/// The tool results the `n`th request of `helper` carried, in call order.
fn tool_results(model: &ScriptedServer, n: usize) -> Vec<String> {
    let sent = &model.requests_for("helper")[n].body["messages"];
    sent.as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

async fn chat(endpoint: &baton_tests::Endpoint, message: &str) -> Vec<Event> {
    let body = json!({"message": message, "episode_id": "e1"});
    open_stream_as(&endpoint.url, "alice", body).await.map(|r| r.event).collect().await
}

/// An LLM agent with an MCP server of its own, its model on the scripted server, behind the real
/// SSE endpoint: the client sees the tool's progress as `tool_call_progress` events of the call,
/// between its start and its result, and the model reads both results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_turn_calls_its_own_mcp_server_and_streams_the_tools_progress() {
    let model = ScriptedServer::start().await.unwrap();
    let (_store, endpoint) = helper_with_everything(&model, "").await;
    let long = "mcp__everything__trigger-long-running-operation";
    model.push(
        "helper",
        Reply::text("Let me check.")
            .tool_call(long, json!({"duration": 0.3, "steps": 3}))
            .tool_call("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
    );
    model.push("helper", Reply::text("All done: 42."));
    let events = chat(&endpoint, "run the job, and add 2 and 40").await;

    let Some(Event::Completed { status, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*status, Status::Ok, "{events:?}");
    assert_eq!(text_of(&events, "helper"), "Let me check.All done: 42.");
    let position =
        |wanted: &dyn Fn(&Event) -> bool| events.iter().position(wanted).expect("the event is there");
    let start = position(&|e| matches!(e, Event::ToolCallStart { name, .. } if name == long));
    let Event::ToolCallStart { call_id: long_id, .. } = &events[start] else { unreachable!() };
    let result = position(&|e| matches!(e, Event::ToolResult { call_id, .. } if call_id == long_id));
    let progress: Vec<(usize, f64, Option<f64>)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::ToolCallProgress { agent, call_id, name, progress, total, .. } => {
                assert_eq!((agent.as_str(), call_id, name.as_str()), ("helper", long_id, long));
                Some((i, *progress, *total))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        progress.iter().map(|p| (p.1, p.2)).collect::<Vec<_>>(),
        [(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))]
    );
    assert!(progress.iter().all(|(i, ..)| start < *i && *i < result), "between start and result: {events:?}");

    // The model's second request holds both results, in call order.
    let results = tool_results(&model, 1);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("completed"), "{results:?}");
    assert!(results[1].contains("42"), "{results:?}");
}

/// The agent's own tool timeout (shorter than the server's) ends a slow MCP call: an error
/// result the model reads, the call cancelled on the server, which answers the next call; the
/// turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_past_the_agents_tool_timeout_is_an_error_result_and_the_turn_goes_on() {
    let model = ScriptedServer::start().await.unwrap();
    let (_store, endpoint) = helper_with_everything(&model, "    tool_timeout_seconds: 1\n").await;
    let long = "mcp__everything__trigger-long-running-operation";
    model.push("helper", Reply::text("Trying.").tool_call(long, json!({"duration": 30, "steps": 30})));
    model
        .push("helper", Reply::text("").tool_call("mcp__everything__echo", json!({"message": "still here"})));
    model.push("helper", Reply::text("It took too long."));
    let events = chat(&endpoint, "run the long job").await;

    let Some(Event::Completed { status, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*status, Status::Ok, "{events:?}");
    let timed_out = events.iter().any(|e| {
        matches!(e, Event::ToolResult { name, is_error: true, result, .. }
            if name == long && result["error"]["code"] == "tool_timeout")
    });
    assert!(timed_out, "{events:?}");
    assert!(tool_results(&model, 1)[0].contains("tool_timeout"));
    assert!(tool_results(&model, 2)[1].contains("still here"), "the server answers after the cancel");
    assert_eq!(text_of(&events, "helper"), "Trying.It took too long.");
}

// ---- Baton as an MCP server ----

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("BATON_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv"));
    venv.join("bin/python")
}

/// Baton's agents (the offline model's shopping and support agents) over streamable HTTP.
async fn serve_agents() -> (String, tokio::task::JoinHandle<()>, tokio::sync::oneshot::Sender<()>) {
    serve_agents_of(baton_reference::Deployment::default(), &["shopping", "support"]).await
}

/// `names` of `deployment`'s agents (offline) over streamable HTTP.
async fn serve_agents_of(
    deployment: baton_reference::Deployment,
    names: &[&str],
) -> (String, tokio::task::JoinHandle<()>, tokio::sync::oneshot::Sender<()>) {
    let (config, backends) = (&deployment.config, deployment.backends(None).unwrap());
    let agents = names
        .iter()
        .map(|name| {
            McpAgent::new(orchestrator_of(config, name, &backends).unwrap(), format!("The {name} agent."))
        })
        .collect();
    let harness = Embedded::start(test_clock()).await;
    let store = harness.store();
    let turns = baton::turn::Turns::new(baton::history::History::new(store, 10));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        // The store lives as long as the server.
        let _harness = harness;
        serve_http(listener, agents, turns, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (url, server, stop)
}

#[tokio::test]
async fn the_python_mcp_client_lists_and_calls_a_baton_agent_and_sees_progress() {
    let (url, server, stop) = serve_agents().await;
    let script = mcp_dir().join("baton_client.py");
    let out = tokio::process::Command::new(venv_python())
        .arg(&script)
        .args(["http", &url, "shopping", "find me a deal on coffee"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        got["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shopping", "support"]);
    assert_eq!(got["tools"][0]["input_schema"]["required"], json!(["text"]));
    assert_eq!(got["is_error"], false, "{got}");
    assert!(!got["answer"].as_str().unwrap().trim().is_empty(), "{got}");
    let progress = got["progress"].as_array().unwrap();
    assert!(
        progress.iter().any(|p| p["message"].as_str().is_some_and(|m| m.contains("calls"))),
        "the agent's tool calls arrive as progress: {got}"
    );
    let _ = stop.send(());
    server.await.unwrap();
}

/// The agent of `examples/approvals.yaml` whose `clip_offer` needs approval, called by the Python
/// client answering elicitation requests with `elicit` (or declaring none): the answer it gets.
async fn call_with_approvals(elicit: Option<&str>) -> Value {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/approvals.yaml");
    let yaml = std::fs::read_to_string(example).unwrap();
    let config = baton_reference::reference_config().with_yaml(&yaml, "approvals.yaml").unwrap();
    let (url, server, stop) = serve_agents_of(config.into(), &["card_keeper"]).await;
    let mut command = tokio::process::Command::new(venv_python());
    command.arg(mcp_dir().join("baton_client.py")).args([
        "http",
        &url,
        "card_keeper",
        "clip the coffee offer",
    ]);
    match elicit {
        Some(answer) => command.env("BATON_ELICIT", answer),
        None => command.env_remove("BATON_ELICIT"),
    };
    let out = command.output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = stop.send(());
    server.await.unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn a_call_that_needs_approval_is_asked_through_elicitation_and_runs_when_approved() {
    let got = call_with_approvals(Some("approve")).await;
    let asked = got["elicited"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{got}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("clip_offer") && message.contains("changes the user's card"), "{message}");
    assert_eq!(asked[0]["schema"]["properties"]["approve"]["type"], "boolean");
    assert!(got["answer"].as_str().unwrap().contains("Clipped"), "{got}");
}

#[tokio::test]
async fn a_call_rejected_through_elicitation_is_not_made() {
    let got = call_with_approvals(Some("reject:not today")).await;
    assert_eq!(got["elicited"].as_array().unwrap().len(), 1, "{got}");
    let answer = got["answer"].as_str().unwrap();
    assert!(!answer.contains("Clipped") && answer.contains("not today"), "{got}");
}

#[tokio::test]
async fn a_client_without_elicitation_gets_a_clear_refusal_and_nothing_runs() {
    let got = call_with_approvals(None).await;
    assert!(got["elicited"].as_array().unwrap().is_empty());
    let answer = got["answer"].as_str().unwrap();
    assert!(!answer.contains("Clipped") && answer.contains("approval_required"), "{got}");
}

// ---- The official conformance suite ----

/// Runs the conformance suite with `args` (its results written to a temporary directory);
/// fails with its report unless every check passed.
async fn run_conformance(args: &[&str]) {
    let results = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(mcp_dir().join("node_modules/.bin/conformance"))
        .args(args)
        .current_dir(results.path())
        .output()
        .await
        .unwrap();
    let report =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{args:?}: {report}");
}

/// Server scenarios that apply to a server offering agents as tools (docs/mcp.md lists the
/// others and why they are skipped).
const SERVER_SCENARIOS: &[&str] = &["server-initialize", "ping", "tools-list", "dns-rebinding-protection"];

#[tokio::test]
async fn batons_server_passes_the_conformance_scenarios_that_apply() {
    let (url, server, stop) = serve_agents().await;
    for scenario in SERVER_SCENARIOS {
        run_conformance(&["server", "--url", &url, "--scenario", scenario]).await;
    }
    let _ = stop.send(());
    server.await.unwrap();
}

/// Client scenarios that apply to a client that lists and calls tools.
const CLIENT_SCENARIOS: &[&str] = &["initialize", "tools_call"];

/// The client under test when the conformance suite runs this test binary as its client command
/// (`MCP_CONFORMANCE_SCENARIO` set, the server URL as the last argument): Baton's client lists
/// the server's tools and calls each with arguments its schema asks for.
#[tokio::test]
#[ignore = "the client the conformance suite runs, not a test on its own"]
async fn conformance_client_entry() {
    assert!(std::env::var_os("MCP_CONFORMANCE_SCENARIO").is_some(), "run by the conformance suite only");
    let url = std::env::args().next_back().unwrap();
    let tools = connect_all(&servers(json!({"suite": {"url": url}}))).await.unwrap();
    for tool in tools.all() {
        let schema = tool.parameters();
        let arguments: serde_json::Map<String, Value> = schema["properties"]
            .as_object()
            .map(|p| p.keys().map(|k| (k.clone(), json!(1))).collect())
            .unwrap_or_default();
        let registry = ToolRegistry::new(vec![tool.clone()]).unwrap();
        let call = ToolCall {
            id: "c".into(),
            name: tool.name().into(),
            arguments: Value::Object(arguments).to_string(),
        };
        let outcome = registry.call(&call, &ToolContext::new("u", "e"), Duration::from_secs(10)).await;
        eprintln!("{}: {:?}", tool.name(), outcome.result);
    }
}

#[tokio::test]
async fn batons_client_passes_the_conformance_scenarios_that_apply() {
    let me = std::env::current_exe().unwrap();
    let command = format!("{} --exact conformance_client_entry --ignored --nocapture", me.display());
    for scenario in CLIENT_SCENARIOS {
        run_conformance(&["client", "--command", &command, "--scenario", scenario]).await;
    }
}
