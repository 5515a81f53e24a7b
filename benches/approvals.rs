//! Approvals' costs (docs/benchmarks.md, "Approvals"). Run with `make bench ONLY=approvals`
//! (or `cargo bench -p baton-tests --bench approvals`).
//!
//! The same nested turn (lead → agent__deals → clip, four model calls, zero-latency in-process
//! models) through the chat endpoint's own code (`ChatService::respond`, the SSE body read to its
//! end) over the embedded store, in one run, turns alternating in batches:
//! - `plain`: `clip` needs no approval: one request;
//! - `approved`: `clip` needs approval: the request that pauses, then the resume request that
//!   approves it.
//!
//! Printed: CPU per request and the ratio of a paused-and-resumed turn (both requests) to the plain
//! one; store calls per request (counted); the size of the stored approvals record and the
//! DynamoDB write units a write of it costs (1 KB per unit, rounded up). With
//! `AWS_ENDPOINT_URL_DYNAMODB` set (moto_server), also wall time per request on DynamoDB.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use baton::agent::{ApprovalPolicy, ApprovalRule, LlmAgent, LoopLimits};
use baton::agent_tool::{AgentTool, AgentToolOptions};
use baton::history::History;
use baton::http::{Caller, ChatService};
use baton::model::scripted::{Reply, ScriptedModel};
use baton::mux::MuxConfig;
use baton::orchestrator::Orchestrator;
use baton::store::embedded::EmbeddedStore;
use baton::store::{EpisodeKey, Store, SystemClock};
use baton::tool::{Tool, ToolContext, ToolError, ToolRegistry};
use baton_tests::counting::CountingStore;
use baton_tests::process::process_cpu;
use baton_tests::stores::StoreHarness;
use futures::StreamExt;
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if !(args.is_empty() || args.iter().any(|a| a == "approvals")) {
        return;
    }
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(embedded(if quick { 100 } else { 1_000 }));
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some() {
        rt.block_on(dynamodb(if quick { 10 } else { 50 }));
    }
}

struct Clip(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Clip {
    fn name(&self) -> &str {
        "clip"
    }
    fn description(&self) -> &str {
        "Clips an offer."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"offer_id": {"type": "string"}}, "required": ["offer_id"]})
    }
    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(json!({"clipped": arguments["offer_id"]}))
    }
}

/// The team's models and its clip count.
struct Team {
    service: ChatService,
    lead: Arc<ScriptedModel>,
    deals: Arc<ScriptedModel>,
    clips: Arc<AtomicUsize>,
}

impl Team {
    fn new(store: Arc<dyn Store>, approval: bool) -> Team {
        let (lead, deals) =
            (Arc::new(ScriptedModel::new("lead", None)), Arc::new(ScriptedModel::new("deals", None)));
        let clips = Arc::new(AtomicUsize::new(0));
        let mux = MuxConfig { flush_interval: Duration::ZERO, flush_budget: Duration::ZERO };
        let rules = match approval {
            true => [("clip".to_owned(), ApprovalRule { when: None, reason: "r".into(), editable: vec![] })]
                .into(),
            false => Default::default(),
        };
        let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Clip(clips.clone()))];
        let child = LlmAgent::new(
            "deals",
            "d",
            deals.clone(),
            Arc::new(ToolRegistry::new(tools).unwrap()),
            LoopLimits::default(),
        )
        .with_mux(mux)
        .with_approvals(Arc::new(ApprovalPolicy::new(rules)));
        let tool: Arc<dyn Tool> =
            Arc::new(AgentTool::new(Arc::new(child), AgentToolOptions::default()).unwrap());
        let entry = LlmAgent::new(
            "lead",
            "l",
            lead.clone(),
            Arc::new(ToolRegistry::new(vec![tool]).unwrap()),
            LoopLimits::default(),
        )
        .with_mux(mux);
        let orchestrator = Arc::new(Orchestrator::new(Arc::new(entry), "lead"));
        let limits = baton::config::RequestLimits::default();
        let service =
            ChatService::new(orchestrator, History::new(store, 20), limits, Duration::from_secs(10));
        Team { service, lead, deals, clips }
    }

    /// The model replies of one nested turn up to the call of `clip`, queued.
    fn script_calls(&self) {
        self.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip o-1"})));
        self.deals.push(Reply::text("").tool_call("clip", json!({"offer_id": "o-1"})));
    }

    /// The model replies after `clip`'s result, queued.
    fn script_answers(&self) {
        self.deals.push(Reply::text("Clipped o-1."));
        self.lead.push(Reply::text("Your offer is clipped."));
    }
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers
}

/// One request through `service`, its SSE body read to the end: its text.
async fn request(service: &ChatService, body: Value) -> String {
    let response = service.respond(&Caller::Local, &json_headers(), body.to_string().as_bytes(), None).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body().into_data_stream();
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    String::from_utf8(text).unwrap()
}

/// The interrupt id in an SSE body that paused.
fn interrupt_id(sse: &str) -> String {
    let at = sse.find("\"interrupt_id\":\"").expect("the turn paused") + "\"interrupt_id\":\"".len();
    sse[at..].split('"').next().unwrap().to_owned()
}

/// A plain turn (one request) in episode `e`.
async fn plain_turn(team: &Team, e: usize) {
    team.script_calls();
    team.script_answers();
    let sse = request(&team.service, json!({"message": "clip o-1", "episode_id": format!("p-{e}")})).await;
    assert!(sse.contains("\"status\":\"ok\""), "{sse}");
}

/// The pausing request in episode `e`: its interrupt id.
async fn pause(team: &Team, e: usize) -> String {
    team.script_calls();
    let sse = request(&team.service, json!({"message": "clip o-1", "episode_id": format!("a-{e}")})).await;
    assert!(sse.contains("\"status\":\"interrupted\""), "{sse}");
    interrupt_id(&sse)
}

/// The resume request approving `id` in episode `e`.
async fn resume(team: &Team, e: usize, id: &str) {
    team.script_answers();
    let body =
        json!({"episode_id": format!("a-{e}"), "resume": [{"interrupt_id": id, "decision": "approve"}]});
    let sse = request(&team.service, body).await;
    assert!(sse.contains("\"status\":\"ok\""), "{sse}");
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn embedded(turns: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap());
    let counting = CountingStore::new(store.clone());
    let plain = Team::new(counting.clone(), false);
    let approved = Team::new(counting.clone(), true);
    for e in 0..turns / 10 {
        plain_turn(&plain, e).await;
        let id = pause(&approved, e).await;
        resume(&approved, e, &id).await;
    }
    let batch = 50;
    let (mut cpu_plain, mut cpu_pause, mut cpu_resume) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut calls_plain, mut calls_pause, mut calls_resume) = (0, 0, 0);
    let mut e = turns;
    for _ in 0..turns / batch {
        counting.reset();
        let before = process_cpu();
        for i in 0..batch {
            plain_turn(&plain, e + i).await;
        }
        cpu_plain += process_cpu() - before;
        calls_plain += counting.calls().values().sum::<u64>();
        counting.reset();
        let before = process_cpu();
        let mut ids = Vec::with_capacity(batch);
        for i in 0..batch {
            ids.push(pause(&approved, e + i).await);
        }
        cpu_pause += process_cpu() - before;
        calls_pause += counting.calls().values().sum::<u64>();
        counting.reset();
        let before = process_cpu();
        for (i, id) in ids.iter().enumerate() {
            resume(&approved, e + i, id).await;
        }
        cpu_resume += process_cpu() - before;
        calls_resume += counting.calls().values().sum::<u64>();
        e += batch;
    }
    let n = (turns / batch * batch) as u32;
    let (plain_us, pause_us, resume_us) = (us(cpu_plain / n), us(cpu_pause / n), us(cpu_resume / n));
    assert_eq!(
        approved.clips.load(Ordering::Relaxed),
        plain.clips.load(Ordering::Relaxed),
        "one clip a turn"
    );
    let key = EpisodeKey::new("local", format!("a-{}", e - 1)).unwrap();
    let record = store.approvals(&key).await.unwrap().map_or(0, |(_, body)| body.len());
    pause(&approved, usize::MAX).await;
    let paused =
        store.approvals(&EpisodeKey::new("local", format!("a-{}", usize::MAX)).unwrap()).await.unwrap();
    let paused = paused.map_or(0, |(_, body)| body.len());
    println!("approvals (embedded store, {n} turns each, zero-latency models, CPU per request):");
    println!(
        "  plain turn                 {plain_us:8.0} µs  {:5.1} store calls",
        calls_plain as f64 / n as f64
    );
    println!(
        "  pausing request            {pause_us:8.0} µs  {:5.1} store calls",
        calls_pause as f64 / n as f64
    );
    println!(
        "  resume request (approve)   {resume_us:8.0} µs  {:5.1} store calls",
        calls_resume as f64 / n as f64
    );
    println!(
        "  paused + resumed vs plain  {:8.2}×  (both requests of one approved turn / one plain turn)",
        (pause_us + resume_us) / plain_us
    );
    println!(
        "  approvals record: {paused} bytes paused ({} DynamoDB WCU a write), {record} bytes closed ({} WCU)",
        paused.div_ceil(1024).max(1),
        record.div_ceil(1024).max(1)
    );
}

async fn dynamodb(turns: usize) {
    let harness = baton_tests::stores::Moto::start(baton_tests::stores::test_clock()).await;
    let store = harness.store();
    let plain = Team::new(store.clone(), false);
    let approved = Team::new(store.clone(), true);
    plain_turn(&plain, 0).await;
    let id = pause(&approved, 0).await;
    resume(&approved, 0, &id).await;
    let (mut t_plain, mut t_pause, mut t_resume) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for e in 1..=turns {
        let started = Instant::now();
        plain_turn(&plain, e).await;
        t_plain += started.elapsed();
        let started = Instant::now();
        let id = pause(&approved, e).await;
        t_pause += started.elapsed();
        let started = Instant::now();
        resume(&approved, e, &id).await;
        t_resume += started.elapsed();
    }
    let n = turns as u32;
    println!("approvals (DynamoDB on moto_server, {n} turns each, wall time per request):");
    println!("  plain turn                 {:8.1} ms", t_plain.as_secs_f64() * 1e3 / n as f64);
    println!("  pausing request            {:8.1} ms", t_pause.as_secs_f64() * 1e3 / n as f64);
    println!("  resume request (approve)   {:8.1} ms", t_resume.as_secs_f64() * 1e3 / n as f64);
}
