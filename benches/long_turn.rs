//! The cost of durability over a long turn (docs/benchmarks.md, "A long turn"). Run with
//! `make bench ONLY=long_turn` (or `cargo bench -p baton-tests --bench long_turn`).
//!
//! One agent runs a tool loop of 300 steps (a sentence and a tool call each, then an answer):
//! some 2,400 events in one turn, the model paced at 5 ms a step (so the log's group commit
//! writes as it does in production, on a timer), on three paths: the chat endpoint's own code in
//! process over the embedded store; the same over loopback HTTP (`http::serve`, a reqwest
//! client); and over HTTP on DynamoDB (moto_server, when `AWS_ENDPOINT_URL_DYNAMODB` is set: the
//! CPU is this process's, moto's own is not counted). Measured at step boundaries from the
//! client's side, in windows of 30 steps:
//! - the store's log writes and the bytes written per event (the log on), early and late;
//! - the process's CPU per event with the log on and with it off, in the same run (turns
//!   alternate), early and late, and their ratio.
//!
//! Flat means the window at step 271–300 costs what the one at step 1–30 does.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, header};
use baton::agent::{LlmAgent, LoopLimits};
use baton::event::Event;
use baton::history::History;
use baton::http::{Caller, ChatService};
use baton::model::scripted::{Reply, ScriptedModel};
use baton::orchestrator::Orchestrator;
use baton::store::embedded::EmbeddedStore;
use baton::store::{Store, SystemClock};
use baton::tool::{Tool, ToolContext, ToolError, ToolRegistry};
use baton::turn::TurnLogSettings;
use baton_tests::counting::CountingStore;
use baton_tests::process::process_cpu;
use eventsource_stream::Eventsource;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// Steps of the tool loop.
const STEPS: usize = 300;
/// Steps per measured window.
const WINDOW: usize = 30;

/// A tool that answers at once.
struct Step;

#[async_trait::async_trait]
impl Tool for Step {
    fn name(&self) -> &str {
        "step"
    }
    fn description(&self) -> &str {
        "Takes one step."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    }
    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        Ok(json!({"done": arguments["n"]}))
    }
}

fn service(store: Arc<dyn Store>, log: bool) -> (ChatService, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new("looper", None));
    let tools = Arc::new(ToolRegistry::new(vec![Arc::new(Step) as Arc<dyn Tool>]).unwrap());
    let limits =
        LoopLimits { max_steps: STEPS + 10, tool_timeout: Duration::from_secs(5), ..LoopLimits::default() };
    let agent = LlmAgent::new("looper", "work through the steps", model.clone(), tools, limits);
    let orchestrator = Arc::new(Orchestrator::new(Arc::new(agent), "looper"));
    let request_limits = baton::config::RequestLimits::default();
    let service =
        ChatService::new(orchestrator, History::new(store, 20), request_limits, Duration::from_secs(10))
            .with_turn_log(TurnLogSettings { enabled: log, ..TurnLogSettings::default() });
    (service, model)
}

fn script(model: &ScriptedModel, pace: Duration) {
    for n in 0..STEPS {
        model.push(
            Reply::text(format!("Step {n} of the plan."))
                .tool_call("step", json!({"n": n}))
                .first_byte_delay(pace),
        );
    }
    model.push(Reply::text("All steps are done.").first_byte_delay(pace));
}

/// What the client had seen, and the process and store had spent, at one step boundary.
#[derive(Clone, Copy, Default)]
struct Mark {
    events: usize,
    cpu: Duration,
    writes: usize,
    bytes: usize,
}

/// How the client reaches the service.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `ChatService::respond` in process, its body read as the HTTP layer would.
    InProcess,
    /// Loopback HTTP: `http::serve` on `127.0.0.1`, a reqwest client.
    Http,
}

/// A service as the client reaches it.
struct Served {
    service: Arc<ChatService>,
    model: Arc<ScriptedModel>,
    /// The loopback URL when served over HTTP.
    url: Option<String>,
}

impl Served {
    async fn start(store: Arc<dyn Store>, log: bool, path: Path) -> Served {
        let (service, model) = service(store, log);
        let service = Arc::new(service);
        let url = match path {
            Path::InProcess => None,
            Path::Http => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}/chat", listener.local_addr().unwrap());
                let serving = service.clone();
                tokio::spawn(
                    async move { baton::http::serve(listener, serving, std::future::pending()).await },
                );
                Some(url)
            }
        };
        Served { service, model, url }
    }

    /// The SSE body of one turn of `body`.
    async fn body(&self, body: String) -> BoxStream<'static, Result<Bytes, String>> {
        match &self.url {
            None => {
                let mut headers = HeaderMap::new();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                let response = self.service.respond(&Caller::Local, &headers, body.as_bytes(), None).await;
                assert_eq!(response.status(), 200);
                response.into_body().into_data_stream().map_err(|e| e.to_string()).boxed()
            }
            Some(url) => {
                let response = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                response.bytes_stream().map_err(|e| e.to_string()).boxed()
            }
        }
    }
}

/// One long turn through `served`, read to its end: a mark at every step boundary.
async fn long_turn(
    served: &Served,
    counting: Option<&CountingStore>,
    episode: usize,
    pace: Duration,
) -> Vec<Mark> {
    script(&served.model, pace);
    let body = format!(r#"{{"message":"work through it","episode_id":"long-{episode}"}}"#);
    let mut events = served.body(body).await.eventsource();
    let mark = |events: usize| {
        let (writes, bytes) = counting.map_or((0, 0), |c| {
            let appends = c.appends();
            (appends.len(), appends.iter().map(|a| a.bytes).sum())
        });
        Mark { events, cpu: process_cpu(), writes, bytes }
    };
    let mut marks = vec![mark(0)];
    let mut seen = 0;
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        seen += 1;
        let decoded = baton::event::decode_sse(&event.event, &event.data).unwrap();
        if matches!(decoded, Event::ToolCallEnd { .. }) {
            marks.push(mark(seen));
        }
    }
    assert_eq!(marks.len(), STEPS + 1, "every step ran");
    marks
}

fn main() {
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rounds = if quick { 2 } else { 8 };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap());
        run("embedded store, in process", store.clone(), Path::InProcess, rounds, 0).await;
        run("embedded store, over loopback HTTP", store, Path::Http, rounds, 1_000).await;
        if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok_and(|v| !v.is_empty()) {
            use baton_tests::stores::{StoreHarness, test_clock};
            let moto = baton_tests::stores::Moto::start(test_clock()).await;
            let rounds = rounds.min(4);
            run("DynamoDB (moto_server), over loopback HTTP", moto.store(), Path::Http, rounds, 2_000).await;
        } else {
            println!("== DynamoDB: skipped (set AWS_ENDPOINT_URL_DYNAMODB to a moto_server)");
        }
    });
}

async fn run(label: &str, store: Arc<dyn Store>, path: Path, rounds: usize, episodes: usize) {
    let counting = CountingStore::new(store.clone());
    let pace = Duration::from_millis(5);
    let on = Served::start(counting.clone(), true, path).await;
    let off = Served::start(store.clone(), false, path).await;
    let windows = [0, STEPS - WINDOW];
    // [log on, log off] × [early, late]: CPU; and the log's writes, bytes and events per window.
    let mut cpu = [[Duration::ZERO; 2]; 2];
    let mut events = [[0usize; 2]; 2];
    let (mut writes, mut bytes) = ([0usize; 2], [0usize; 2]);
    let mut total_events = 0;
    for round in 0..rounds {
        for (i, served) in [&on, &off].into_iter().enumerate() {
            let marks =
                long_turn(served, (i == 0).then_some(&*counting), episodes + round * 2 + i, pace).await;
            for (w, &start) in windows.iter().enumerate() {
                let (a, b) = (marks[start], marks[start + WINDOW]);
                cpu[i][w] += b.cpu - a.cpu;
                events[i][w] += b.events - a.events;
                if i == 0 {
                    writes[w] += b.writes - a.writes;
                    bytes[w] += b.bytes - a.bytes;
                }
            }
            if i == 0 {
                total_events += marks.last().unwrap().events;
            }
        }
    }
    let per_event = |c: Duration, n: usize| c.as_secs_f64() * 1e6 / n.max(1) as f64;
    println!(
        "== a long turn: {STEPS} tool steps, ~{} events, the model paced at {} ms a step; {label}; {rounds} turns each with the log on and off (same run)",
        total_events / rounds,
        pace.as_millis()
    );
    println!("   window        log writes/event  bytes/event  CPU/event on  CPU/event off  on/off");
    for (w, name) in ["steps 1-30", "steps 271-300"].iter().enumerate() {
        let (on_us, off_us) = (per_event(cpu[0][w], events[0][w]), per_event(cpu[1][w], events[1][w]));
        println!(
            "   {name:<13} {:>16.4}  {:>11.1}  {:>9.1} µs  {:>10.1} µs  {:>5.2}×",
            writes[w] as f64 / events[0][w].max(1) as f64,
            bytes[w] as f64 / events[0][w].max(1) as f64,
            on_us,
            off_us,
            on_us / off_us
        );
    }
}
