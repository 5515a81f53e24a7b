//! Helpers shared by the end-to-end tests and benchmarks: a chat endpoint on a real loopback
//! socket wired to a scripted model server (and a scripted Forethought server), an incremental SSE client, the stores under test and
//! the store contract suite.
//!
//! - [`stores`]: the embedded store in a temporary directory; DynamoDB on moto_server, directly
//!   or behind the fault proxy.
//! - [`logs`]: this process's log lines captured in memory.
//! - [`fault_proxy`]: a loopback TCP proxy that passes, black-holes, slows or resets traffic.
//! - [`contract`]: the one contract suite every store passes.
//! - [`counting`]: a store that counts the calls made to another, by method.
//! - [`otlp`]: a real OTLP/HTTP trace receiver on loopback.
//! - [`process`]: `orchestrator serve` as a child process, for the benchmarks.
//! - [`protocols`]: the AG-UI and AI SDK official clients, run by node against a Baton URL.
//! - [`tools`]: tools with a side effect that count their runs, and a deployment offering them.
//!
//! Two binaries: `relay` (`src/bin/relay.rs`), the floor the latency benchmark holds `serve`'s
//! CPU against; and `python-lambda` (`src/bin/python-lambda.rs`), a team's Python function run
//! under `cargo lambda watch` by `tests/lambda/python_runtime.py`, for the Lambda-tool test.

pub mod contract;
pub mod counting;
pub mod fault_proxy;
pub mod logs;
pub mod otlp;
pub mod process;
pub mod protocols;
pub mod stores;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use baton::config::{AgentDefaults, Config};
use baton::event::{Event, decode_sse};
use baton::history::History;
use baton::http::{ChatService, EndpointLimits};
use baton::model::scripted::ScriptedServer;
use baton::store::embedded::EmbeddedStore;
use baton::store::{Store, SystemClock};
use baton::wiring::Backends;
pub use baton_reference::Deployment;
use baton_reference::support::forethought::ForethoughtConfig;
use baton_reference::support::scripted::ForethoughtServer;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use std::time::Instant;

/// Model names the scripted server keys its replies by.
pub const ORCH: &str = "orch";
/// The reference configuration's routing tool for support.
pub const ASK_SUPPORT: &str = "ask_support";
/// The reference configuration's routing tool for shopping.
pub const ASK_SHOPPING: &str = "ask_shopping";

/// The shopping agent's model name.
pub const SHOP: &str = "shop";
/// The Forethought token the tests configure.
pub const FT_TOKEN: &str = "ft-test-token";

/// The reference deployment with its two models on `server`, short timeouts and quick retries.
/// Support is the offline help center.
pub fn scripted_config(server: &ScriptedServer) -> Deployment {
    Deployment::from(scripted_runtime_config(server))
}

/// [`scripted_config`]'s runtime configuration.
pub fn scripted_runtime_config(server: &ScriptedServer) -> Config {
    let mut c = baton_reference::reference_config();
    c.models.base_url = Some(server.base_url());
    c.models.orchestrator = ORCH.into();
    c.apply_agent_defaults("shopping", AgentDefaults { model: Some(SHOP.into()), ..Default::default() });
    c.models.timeouts.first_byte = Duration::from_secs(5);
    c.models.timeouts.idle = Duration::from_millis(500);
    c.models.retry.base_delay = Duration::from_millis(10);
    c.models.retry.max_delay = Duration::from_millis(50);
    c.mux.flush_interval = Duration::from_millis(1);
    c.mux.flush_budget = Duration::from_millis(20);
    c
}

/// [`scripted_config`] with support on the Forethought test server `ft`.
pub fn scripted_config_with_forethought(server: &ScriptedServer, ft: &ForethoughtServer) -> Deployment {
    let mut d = scripted_config(server);
    d.forethought = Some(forethought_config(ft));
    d
}

/// Forethought settings for the test server `ft`: its URL, [`FT_TOKEN`], short timeouts.
pub fn forethought_config(ft: &ForethoughtServer) -> ForethoughtConfig {
    let mut config = ForethoughtConfig::new(ft.base_url(), FT_TOKEN);
    config.timeouts.first_byte = Duration::from_secs(5);
    config.timeouts.idle = Duration::from_millis(500);
    config
}

/// A running chat endpoint; stops when dropped.
pub struct Endpoint {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `config`'s chat endpoint on `127.0.0.1:0` with the same code as `orchestrator serve`,
/// recording into a fresh embedded store.
pub async fn start_endpoint(config: &Deployment) -> Endpoint {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store =
        EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).expect("store opens");
    let mut endpoint = start_endpoint_with(config, Arc::new(store)).await;
    endpoint._dir = Some(dir);
    endpoint
}

/// Serves `config`'s chat endpoint on `127.0.0.1:0`, recording into `store`.
pub async fn start_endpoint_with(config: &Deployment, store: Arc<dyn Store>) -> Endpoint {
    start_endpoint_limited(config, store, EndpointLimits::default()).await
}

/// One agent, `solo` (its model `solo` on the scripted server), with no tools.
pub const SOLO: &str = "\
entry: solo
agents:
  - name: solo
    model: solo
    instruction: Answer.
";

/// [`SOLO`] behind two chat endpoints over one store, as two instances of the function share
/// one table: A and B have separate memory and meet only in the store.
pub struct TwoInstances<H> {
    /// The store's harness.
    pub harness: H,
    /// The model server of both.
    pub server: ScriptedServer,
    /// Instance A.
    pub a: Endpoint,
    /// Instance B.
    pub b: Endpoint,
}

impl<H: stores::StoreHarness> TwoInstances<H> {
    /// Starts the store, the model server and both endpoints.
    pub async fn start() -> TwoInstances<H> {
        let harness = H::start(stores::test_clock()).await;
        let server = ScriptedServer::start().await.unwrap();
        let config = scripted_runtime_config(&server).with_yaml(SOLO, "solo.yaml").unwrap();
        let a = start_endpoint_with(&config.clone().into(), harness.store()).await;
        let b = start_endpoint_with(&config.into(), harness.store()).await;
        TwoInstances { harness, server, a, b }
    }
}

/// Serves `config`'s chat endpoint on `127.0.0.1:0` within `limits`, recording into `store`.
pub async fn start_endpoint_limited(
    config: &Deployment,
    store: Arc<dyn Store>,
    limits: EndpointLimits,
) -> Endpoint {
    let backends = config.backends(Some(store.clone())).expect("the deployment builds its backends");
    start_endpoint_over(&config.config, store, backends, limits).await
}

/// Serves `config`'s chat endpoint on `127.0.0.1:0` over `backends` (the deployment's extension,
/// connected MCP servers, remote agents) within `limits`, recording into `store`.
pub async fn start_endpoint_over(
    config: &Config,
    store: Arc<dyn Store>,
    backends: Backends,
    limits: EndpointLimits,
) -> Endpoint {
    let ratings = baton::wiring::rating_sinks(config, &backends);
    let served = baton::wiring::a2a_served(config, &backends).expect("its A2A agents build");
    let orchestrator = baton::wiring::build(config, backends).expect("config builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    let history = History::new(store, baton::history::DEFAULT_HISTORY_MESSAGES);
    let service = ChatService::new(orchestrator, history, config.limits, config.heartbeat);
    let service = service.with_a2a_card(baton::wiring::a2a_card(config)).with_a2a_agents(served);
    let service = Arc::new(service.with_endpoint_limits(limits).with_ratings(ratings));
    let task = tokio::spawn(async move {
        let _ = baton::http::serve(listener, service, std::future::pending()).await;
    });
    Endpoint { url, task, _dir: None }
}

/// An event as a client received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// When it arrived.
    pub at: Instant,
    /// The SSE `id:`.
    pub id: String,
    /// The event.
    pub event: Event,
}

/// POSTs `body` to `url` and returns the decoded SSE events as they arrive.
///
/// Panics if the response is not a 200 SSE stream or an event does not decode: both are failures
/// of the behaviour under test.
pub async fn open_stream(url: &str, body: serde_json::Value) -> impl Stream<Item = Received> + Unpin {
    open_stream_as(url, "local", body).await
}

/// POSTs `body` to `url` as `user` (the `x-baton-user` header of the local mode) and returns the
/// decoded SSE events as they arrive, with the response's turn id.
pub async fn open_stream_as(
    url: &str,
    user: &str,
    body: serde_json::Value,
) -> impl Stream<Item = Received> + Unpin {
    open(reqwest::Client::new().post(url).header(baton::http::USER_HEADER, user).json(&body)).await
}

/// POSTs `body` to `url` with an optional bearer token and returns the decoded SSE events as they
/// arrive.
pub async fn open_stream_with(
    url: &str,
    bearer: Option<&str>,
    body: serde_json::Value,
) -> impl Stream<Item = Received> + Unpin + use<> {
    let mut request = reqwest::Client::new().post(url).json(&body);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    open(request).await
}

async fn open(request: reqwest::RequestBuilder) -> impl Stream<Item = Received> + Unpin {
    let response = request.send().await.expect("POST succeeds");
    assert_eq!(response.status(), 200, "chat request refused: {:?}", response.text().await);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    Box::pin(response.bytes_stream().eventsource().map(|e| {
        let e = e.expect("valid SSE framing");
        let event = decode_sse(&e.event, &e.data).expect("valid event");
        Received { at: Instant::now(), id: e.id, event }
    }))
}

/// POSTs and collects every event of the turn.
pub async fn chat(url: &str, message: &str) -> Vec<Event> {
    open_stream(url, serde_json::json!({"message": message})).await.map(|r| r.event).collect().await
}

/// The concatenated text of one agent instance.
pub fn text_of(events: &[Event], agent: &str) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Text { agent: a, text } if a == agent => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The order in which agents spoke: consecutive text events of one agent count once.
pub fn speakers(events: &[Event]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        if let Event::Text { agent, .. } = e {
            if out.last() != Some(agent) {
                out.push(agent.clone());
            }
        }
    }
    out
}

/// Waits (as [`wait_until`]) until the sub-agents' upstream calls both stream: the Forethought
/// call and the model call of `agent` (the first of each) have sent a frame. A test that hangs
/// up to see those calls cancelled waits for this first: the first sub-agent words may be
/// either agent's while the other is still starting, and a call cut before its server sent a
/// frame is never recorded as ended (the server's handler is dropped before its body exists).
pub async fn wait_until_both_stream(server: &ScriptedServer, agent: &str, ft: &ForethoughtServer) {
    wait_until("the Forethought call streams", || async {
        ft.requests().first().is_some_and(|r| r.chunks_sent > 0)
    })
    .await;
    wait_until("the model call streams", || async {
        server.requests_for(agent).first().is_some_and(|r| r.last_frame_at.is_some())
    })
    .await;
}

/// Polls `done` every 10 ms until it holds, for at most 10 s (then panics naming `what`). For
/// effects that happen after a response ends (a reply saved after the client left); no test
/// asserts on how long this takes.
pub async fn wait_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
