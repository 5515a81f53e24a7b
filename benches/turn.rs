//! Baton's runtime benchmarks (docs/benchmarks.md: targets and latest figures). Run with `make bench`.
//!
//! 1. Orchestration overhead per turn against zero-latency in-process scripted models: the whole
//!    turn (thinking, orchestrator stream, two sub-agents, mux, SSE encoding of every event), on a
//!    current-thread runtime with no I/O, so wall time is CPU time. p50/p99 per turn, and the mean
//!    CPU per turn from the process's own CPU clock as a cross-check.
//! 2. A configured team's turn (an entry agent calling two agent tools at once, then answering),
//!    against the routed turn in the same run: p50/p99 and the ratio.
//! 3. Events per second through the live-slot mux.
//! 4. The orchestrator as a Lambda function: exec → first `GET /runtime/invocation/next` (ready
//!    for an invocation), against a minimal runtime API on loopback; release binary sizes.
//! 5. The `serve` binary: start → ready, RSS idle, and peak RSS with 1,000 concurrent SSE streams
//!    against a scripted model server on loopback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::agent::{Agent, LlmAgent, LoopLimits};
use baton::agent_tool::{AgentTool, AgentToolOptions, OutputMode};
use baton::event::{Event, encode_sse};
use baton::item::{Item, ItemStream};
use baton::model::scripted::{Reply, ScriptedModel, ScriptedServer};
use baton::model::{ChatModel, ChatRequest};
use baton::mux::{LiveSlotMux, MuxConfig};
use baton::orchestrator::{Orchestrator, TurnRequest};
use baton::routing::{RoutedAgent, RoutingPolicy, RoutingSettings, routing_tool};
use baton::tool::{Tool, ToolRegistry};
use baton_tests::process::ServeProcess;
use baton_tests::process::process_cpu;
use futures::StreamExt;
use serde_json::json;

/// `cargo bench -- NAME…` runs only the named sections (`turn`, `agents`, `mux`, `lambda`, `serve`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, every turn's spans are exported (the cost of traces
    // on); without it no subscriber is installed, as in production with traces off.
    let _traces = rt.block_on(async {
        let traces = baton::telemetry::trace::Traces::from_env("baton-bench").expect("OTLP exporter")?;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry().with(traces.layer()).init();
        println!(
            "traces on: OTLP/HTTP to {}",
            std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_default()
        );
        Some(traces)
    });
    if wanted("turn") {
        rt.block_on(turn_overhead(if quick { 2_000 } else { 20_000 }));
    }
    if wanted("agents") {
        rt.block_on(team_overhead(if quick { 2_000 } else { 20_000 }));
    }
    if wanted("mux") {
        rt.block_on(mux_throughput(if quick { 100_000 } else { 1_000_000 }));
    }
    if wanted("lambda") {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(lambda_cold_start(if quick { 5 } else { 20 }));
    }
    if wanted("serve") {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(serve_memory(quick));
    }
}

/// An agent that answers with one model call and no tools.
fn plain(name: &str, model: Arc<dyn ChatModel>) -> Arc<dyn Agent> {
    let tools = Arc::new(ToolRegistry::new(Vec::new()).unwrap());
    Arc::new(LlmAgent::new(name, "answer", model, tools, LoopLimits::default()).with_mux(NO_PACING))
}

/// No flush pacing: pacing is deliberate waiting, not overhead.
const NO_PACING: MuxConfig = MuxConfig { flush_interval: Duration::ZERO, flush_budget: Duration::ZERO };

/// The reference routed turn: `orchestrator` routing to `support` and `shopping`.
fn orchestrator() -> Arc<Orchestrator> {
    let words = |n: usize| (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    let orch = Reply::text("Let me check both of those.")
        .tool_call("ask_support", json!({"query": "my receipt didn't scan", "intent_count": 2}))
        .tool_call("ask_shopping", json!({"query": "find me coffee deals", "intent_count": 2}));
    let model = |name: &str, reply| Arc::new(ScriptedModel::new(name, Some(reply)));
    let settings = RoutingSettings {
        agents: ["support", "shopping"]
            .map(|a| RoutedAgent { agent: a.into(), description: a.into() })
            .into(),
        followup: Some(baton::routing::Followup::named("support")),
        fallback: "shopping".into(),
        categories: vec!["general".into()],
        guards: Default::default(),
        smalltalk: Default::default(),
        images: Vec::new(),
    };
    let options = AgentToolOptions { output: OutputMode::TextAndEvents, ..AgentToolOptions::default() };
    let tools: Vec<Arc<dyn Tool>> = [
        plain("support", model("sup", Reply::text(words(40)))),
        plain("shopping", model("shop", Reply::text(words(40)))),
    ]
    .into_iter()
    .map(|agent| Arc::new(routing_tool(agent, &settings, options.clone()).unwrap()) as Arc<dyn Tool>)
    .collect();
    let entry = LlmAgent::new(
        "orchestrator",
        "route",
        model("orch", orch),
        Arc::new(ToolRegistry::new(tools).unwrap()),
        LoopLimits::default(),
    )
    .with_mux(NO_PACING)
    .with_policy(Arc::new(RoutingPolicy::new(settings)));
    Arc::new(Orchestrator::new(Arc::new(entry), "orch"))
}

fn turn(i: usize) -> TurnRequest {
    TurnRequest::new("bench", format!("t{i}"), "u", "my receipt didn't scan and find me coffee deals")
}

/// A team: `lead` calls `researcher` twice at once (each streaming 40 words), then answers.
fn team() -> Arc<Orchestrator> {
    let words = |n: usize| (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    // The lead's two steps, repeated for every turn: calls, then the answer.
    let calls = Reply::text("Asking.")
        .tool_call("agent__researcher", json!({"text": "my receipt didn't scan"}))
        .tool_call("agent__researcher", json!({"text": "find me coffee deals"}));
    let researcher =
        plain("researcher", Arc::new(ScriptedModel::new("researcher", Some(Reply::text(words(40))))));
    let options = AgentToolOptions { output: OutputMode::TextAndEvents, ..AgentToolOptions::default() };
    let tool: Arc<dyn Tool> = Arc::new(AgentTool::new(researcher, options).unwrap());
    let limits = LoopLimits { max_steps: 3, tool_timeout: Duration::from_secs(5), ..LoopLimits::default() };
    let agent = LlmAgent::new(
        "lead",
        "l",
        Alternating::new("lead", calls, Reply::text("Done.")),
        Arc::new(ToolRegistry::new(vec![tool]).unwrap()),
        limits,
    )
    .with_mux(NO_PACING);
    Arc::new(Orchestrator::new(Arc::new(agent), "lead"))
}

/// A scripted model answering `first` and `second` in turn, forever.
struct Alternating {
    name: &'static str,
    replies: [baton::model::scripted::StreamReply; 2],
    next: std::sync::atomic::AtomicUsize,
}

impl Alternating {
    fn new(
        name: &'static str,
        first: baton::model::scripted::StreamReply,
        second: baton::model::scripted::StreamReply,
    ) -> Arc<Alternating> {
        Arc::new(Alternating { name, replies: [first, second], next: Default::default() })
    }
}

impl ChatModel for Alternating {
    fn model_name(&self) -> &str {
        self.name
    }

    fn stream(&self, _: ChatRequest) -> baton::model::DeltaStream {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2;
        Box::pin(futures::stream::iter(self.replies[i].deltas()))
    }
}

/// Runs `turns` turns of `o` after a warm-up: per-turn wall times (sorted), events per turn, SSE
/// bytes, wall and process CPU in all.
async fn sample_turns(
    o: &Arc<Orchestrator>,
    turns: usize,
) -> (Vec<Duration>, u64, usize, Duration, Duration) {
    let mut bytes = 0usize;
    let mut events_per_turn = 0;
    for i in 0..turns / 10 {
        let mut s = o.run_turn(turn(i));
        while let Some(e) = s.next().await {
            bytes += encode_sse(0, &e).len();
        }
    }
    let mut samples = Vec::with_capacity(turns);
    let cpu_before = process_cpu();
    let wall = Instant::now();
    for i in 0..turns {
        let started = Instant::now();
        let mut s = o.run_turn(turn(i));
        let mut n = 0;
        while let Some(e) = s.next().await {
            bytes += encode_sse(n, &e).len();
            n += 1;
        }
        samples.push(started.elapsed());
        events_per_turn = n;
    }
    let wall = wall.elapsed();
    let cpu = process_cpu() - cpu_before;
    samples.sort();
    (samples, events_per_turn, bytes, wall, cpu)
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

async fn team_overhead(turns: usize) {
    let (routed, routed_events, ..) = sample_turns(&orchestrator(), turns).await;
    let (team, team_events, ..) = sample_turns(&team(), turns).await;
    println!(
        "== a team's turn: entry agent + two agent-tool instances + its answer ({turns} turns, {team_events} events each), against the routed turn ({routed_events} events)"
    );
    let (t50, r50) = (percentile(&team, 0.5), percentile(&routed, 0.5));
    println!(
        "   team   p50 {:>8.1} µs, p99 {:>8.1} µs",
        t50.as_secs_f64() * 1e6,
        percentile(&team, 0.99).as_secs_f64() * 1e6
    );
    println!(
        "   routed p50 {:>8.1} µs, p99 {:>8.1} µs",
        r50.as_secs_f64() * 1e6,
        percentile(&routed, 0.99).as_secs_f64() * 1e6
    );
    println!("   team / routed at p50: {:.2}×", t50.as_secs_f64() / r50.as_secs_f64());
}

async fn turn_overhead(turns: usize) {
    let o = orchestrator();
    let (samples, events_per_turn, bytes, wall, cpu) = sample_turns(&o, turns).await;
    let pct = |p: f64| percentile(&samples, p);
    println!(
        "== orchestration overhead per turn (zero-latency scripted models, {turns} turns, {events_per_turn} events each)"
    );
    println!("   p50 {:>8.1} µs", pct(0.50).as_secs_f64() * 1e6);
    println!("   p99 {:>8.1} µs", pct(0.99).as_secs_f64() * 1e6);
    println!(
        "   mean wall {:>5.1} µs, mean CPU {:>5.1} µs (process clock)",
        wall.as_secs_f64() * 1e6 / turns as f64,
        cpu.as_secs_f64() * 1e6 / turns as f64
    );
    println!(
        "   target p50 ≤ 1000 µs: {}  ({} bytes of SSE encoded)",
        if pct(0.5) <= Duration::from_millis(1) { "met" } else { "MISSED" },
        bytes
    );
}

async fn mux_throughput(events: usize) {
    let text_source = |agent: &'static str, n: usize| -> ItemStream<()> {
        Box::pin(futures::stream::iter((0..n).map(move |_| Item::Event(Event::text(agent, "token ")))))
    };
    let config = MuxConfig { flush_interval: Duration::ZERO, flush_budget: Duration::ZERO };
    println!("== live-slot mux throughput ({events} text events, one core)");
    for sources in [1usize, 2, 4] {
        const AGENTS: [&str; 4] = ["a[1]", "b[1]", "c[1]", "d[1]"];
        let streams = (0..sources).map(|i| text_source(AGENTS[i], events / sources)).collect();
        let started = Instant::now();
        let n = LiveSlotMux::new(streams, config).count().await;
        let took = started.elapsed();
        assert_eq!(n, events / sources * sources);
        println!("   {sources} source(s): {:>12.0} events/s", n as f64 / took.as_secs_f64());
    }
    println!("   target ≥ 100,000 events/s");
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The release `orchestrator` binary, if `make bench` built it.
fn release_binary() -> Option<std::path::PathBuf> {
    let binary = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/orchestrator");
    binary.exists().then_some(binary)
}

/// Exec → "listening" of `serve` on embedded defaults (offline model, fresh store), `runs`
/// times; then the memory sections.
async fn serve_memory(quick: bool) {
    let Some(binary) = release_binary() else {
        println!("== serve: skipped, target/release/orchestrator is not built (run `make bench`)");
        return;
    };
    println!("== serve binary (release)");
    let mut starts = Vec::new();
    for _ in 0..if quick { 5 } else { 21 } {
        let mut serve = ServeProcess::start(&binary, &[]).await;
        starts.push(serve.ready);
        let _ = serve.child.kill().await;
    }
    starts.sort();
    println!(
        "   start → listening (offline defaults, fresh store): median {:.1} ms, min {:.1} ms over {} starts   (target < 15 ms)",
        percentile(&starts, 0.5).as_secs_f64() * 1e3,
        starts[0].as_secs_f64() * 1e3,
        starts.len()
    );
    let sizes: &[usize] = if quick { &[100] } else { &[1_000, 10_000] };
    for &streams in sizes {
        for transport in [ModelTransport::Http1, ModelTransport::H2c, ModelTransport::Tls] {
            // Over HTTP/1.1 each open stream holds its client connection and one connection per
            // model call in flight: 10,000 streams need more descriptors than the process may open.
            if transport == ModelTransport::Http1 && streams > 5_000 {
                println!(
                    "   {streams} streams over HTTP/1.1 to the model server: skipped (~3 sockets per stream, over `ulimit -n`)"
                );
                continue;
            }
            serve_streams(&binary, streams, transport).await;
        }
    }
}

/// How `serve` reaches the scripted model server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelTransport {
    /// Cleartext HTTP/1.1: Baton's own connection, driven inside the body's poll.
    Http1,
    /// Cleartext HTTP/2 with prior knowledge (`BATON_MODEL_HTTP2`), through reqwest.
    H2c,
    /// TLS through reqwest, HTTP/2 by ALPN: the path production takes to a model vendor.
    Tls,
}

impl ModelTransport {
    fn label(self) -> &'static str {
        match self {
            ModelTransport::Http1 => "HTTP/1.1 (cleartext, Baton's connection)",
            ModelTransport::H2c => "HTTP/2 (h2c, reqwest)",
            ModelTransport::Tls => "TLS (reqwest, h2 by ALPN; the production path)",
        }
    }

    /// A scripted model server for this transport, and the environment that points `serve` at
    /// it (with the certificate to trust, over TLS, in `dir`).
    async fn server(self, dir: &std::path::Path) -> (ScriptedServer, Vec<(&'static str, String)>) {
        let server = match self {
            ModelTransport::Tls => ScriptedServer::start_tls().await.unwrap(),
            _ => ScriptedServer::start().await.unwrap(),
        };
        let mut env = vec![("OPENAI_BASE_URL", server.base_url())];
        match self {
            ModelTransport::Http1 => {}
            ModelTransport::H2c => env.push(("BATON_MODEL_HTTP2", "true".to_owned())),
            ModelTransport::Tls => {
                let ca = dir.join("model-server-ca.pem");
                std::fs::write(&ca, server.certificate().expect("a TLS server").pem()).unwrap();
                env.push(("SSL_CERT_FILE", ca.display().to_string()));
            }
        }
        (server, env)
    }
}

/// RSS of `serve` with `streams` concurrent mixed turns, each sub-agent streaming for 2 s, with the
/// model server reached over `transport`; then after the burst has ended.
async fn serve_streams(binary: &std::path::Path, streams: usize, transport: ModelTransport) {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut env) = transport.server(dir.path()).await;
    server.set_default(
        "orch",
        Reply::text("Checking both.")
            .tool_call("ask_support", json!({"query": "receipt", "intent_count": 2}))
            .tool_call("ask_shopping", json!({"query": "coffee", "intent_count": 2})),
    );
    // Each sub-agent streams 20 words over 2 s, so all streams are open at once.
    let slow = Reply::text("lorem ipsum ".repeat(10)).chunk_delay(Duration::from_millis(100));
    server.set_default("sup", slow.clone());
    server.set_default("shop", slow);
    env.extend([
        ("BATON_ORCHESTRATOR_MODEL", "orch".to_owned()),
        ("BATON_SUPPORT_MODEL", "sup".to_owned()),
        ("BATON_SHOPPING_MODEL", "shop".to_owned()),
        // Every stream is served at once (the default cap is 512 connections).
        ("BATON_MAX_CONNECTIONS", (streams + 64).to_string()),
    ]);
    let mut serve = ServeProcess::start(binary, &env).await;
    let pid = serve.pid;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = rss_kib(pid, "VmRSS:");
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let run = |client: reqwest::Client, url: String| async move {
        let r = client.post(&url).json(&json!({"message": "receipt and coffee"})).send().await?;
        let body = r.bytes().await?;
        Ok::<bool, reqwest::Error>(String::from_utf8_lossy(&body).contains("event: completed\n"))
    };
    // One warm-up turn so lazily initialised state (pools, indexes) is in the baseline.
    run(client.clone(), serve.url.clone()).await.unwrap();
    let warm = rss_kib(pid, "VmRSS:");
    let connections_before = server.connections();

    let burst = || async {
        let wall = Instant::now();
        let tasks: Vec<_> =
            (0..streams).map(|_| tokio::spawn(run(client.clone(), serve.url.clone()))).collect();
        let mut completed = 0;
        for t in tasks {
            if matches!(t.await, Ok(Ok(true))) {
                completed += 1;
            }
        }
        (completed, wall.elapsed())
    };
    let (completed, took) = burst().await;
    let peak = rss_kib(pid, "VmHWM:");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid, "VmRSS:");
    // The same burst again: memory kept from the first is reused, not added to.
    let (again, _) = burst().await;
    let second_peak = rss_kib(pid, "VmHWM:");
    let per_stream = (peak.saturating_sub(warm)) as f64 * 1024.0 / streams as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "   {streams} concurrent mixed-turn streams, model server over {}: {completed} completed in {:.2} s, {} model connections",
        transport.label(),
        took.as_secs_f64(),
        server.connections() - connections_before
    );
    println!(
        "      RSS idle {:.1} MiB, after one turn {:.1} MiB, peak {:.1} MiB → {:.1} KB per stream (target < 50 KB)",
        mib(idle),
        mib(warm),
        mib(peak),
        per_stream / 1000.0,
    );
    println!(
        "      2 s after the burst {:.1} MiB; the same burst again ({again} completed): peak {:.1} MiB",
        mib(after),
        mib(second_peak)
    );
    let _ = serve.child.kill().await;
}

/// Exec → the first poll of the Lambda runtime API, for the release orchestrator in Lambda mode
/// (offline model, embedded store in a temporary directory, IAM auth), `runs` times.
///
/// Two stores: the embedded one (a fresh file, as a function without `BATON_TABLE` would have),
/// and DynamoDB as deployed (`BATON_TABLE`, the credentials Lambda puts in the environment, an
/// endpoint nobody listens on: start-up must not call it).
async fn lambda_cold_start(runs: usize) {
    let release = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release");
    let binary = release.join("orchestrator");
    if !binary.exists() {
        println!("== lambda cold start: skipped, {} is not built (run `make bench`)", binary.display());
        return;
    }
    println!("== orchestrator as a Lambda function (release, host architecture)");
    for dynamodb in [false, true] {
        let mut samples = lambda_starts(&binary, runs, dynamodb).await;
        samples.sort();
        println!(
            "   exec → first /runtime/invocation/next, {}: median {:.1} ms, max {:.1} ms over {runs} starts   (target < 15 ms)",
            if dynamodb { "DynamoDB store (as deployed)" } else { "embedded store (fresh file)" },
            samples[runs / 2].as_secs_f64() * 1e3,
            samples[runs - 1].as_secs_f64() * 1e3
        );
    }
    for name in ["orchestrator", "shopping", "eval"] {
        if let Ok(meta) = std::fs::metadata(release.join(name)) {
            println!("   binary {name}: {:.1} MiB", meta.len() as f64 / (1024.0 * 1024.0));
        }
    }
}

/// `runs` cold starts of `binary` in Lambda mode: exec → its first `/runtime/invocation/next`.
async fn lambda_starts(binary: &std::path::Path, runs: usize, dynamodb: bool) -> Vec<Duration> {
    use tokio::io::AsyncReadExt;
    let mut samples = Vec::new();
    for _ in 0..runs {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = listener.local_addr().unwrap().to_string();
        let dir = std::env::temp_dir().join(format!("baton-cold-{}", fastrand::u64(..)));
        let started = Instant::now();
        let mut command = tokio::process::Command::new(binary);
        command
            .env("AWS_LAMBDA_RUNTIME_API", &api)
            .env("AWS_LAMBDA_FUNCTION_NAME", "orchestrator")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("BATON_TABLE")
            .env_remove("BATON_STORE_PATH")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        if dynamodb {
            // What Lambda sets, and an endpoint on a port that was free a moment ago.
            let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            command
                .env("BATON_TABLE", "baton-bench")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "AKIDBENCH")
                .env("AWS_SECRET_ACCESS_KEY", "bench-secret")
                .env("AWS_SESSION_TOKEN", "bench-token")
                .env("AWS_ENDPOINT_URL_DYNAMODB", format!("http://{unused}"));
        } else {
            command.env("BATON_STORE_PATH", dir.join("store.redb"));
        }
        let mut child = command.spawn().unwrap();
        let (mut conn, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the function polls the runtime API within 10 s (it exited or hung at start)")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = conn.read(&mut buf).await.unwrap();
        let ready = started.elapsed();
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("/runtime/invocation/next"),
            "the function polled for work"
        );
        samples.push(ready);
        let _ = child.kill().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
    samples
}
