//! The latency a user sees, measured the way the peer comparison measures it (docs/benchmarks.md):
//! the release `orchestrator serve` binary as a child process, its models on a scripted
//! OpenAI-compatible server and support on a scripted Forethought server (both real HTTP on
//! loopback), and a real SSE client. Run with `make bench ONLY=latency`.
//!
//! 1. A mixed turn: the orchestrator streams a preamble and calls both sub-agents at once;
//!    shopping's first token comes 100 ms after its request, then 50 tokens 20 ms apart; support
//!    answers as Forethought documents it, one JSON body of 50 `text` widget components (HTML),
//!    sent whole when its 300 ms + 49 × 20 ms script would have ended. For fresh and kept-alive connections it prints the
//!    measured time minus the ideal (what a perfect merge on this script would show) for the
//!    first event, the first text, the first sub-agent text, content done, and the longest
//!    silence between two texts, plus whether each agent's end came after its last text. The
//!    scripted servers keep the script's time to a fraction of a millisecond and record when
//!    each frame left them, so content done is also split into how late the test servers
//!    themselves were (their timers, their handling of a request) and what is left: Baton's
//!    share. It also prints the `serve` process's CPU per mixed turn
//!    (over the measured turns, to the nanosecond: see [`Cpu`]): models that stream at a human
//!    pace wake the process once per frame, which zero-latency turns do not show.
//! 2. Zero-latency models: wall time per turn (median, p90) on a kept-alive connection, and the
//!    `serve` process's CPU and wake-ups per turn over N turns, and that CPU less the floor's
//!    cost of as many wake-ups (what is left once the host's price of being woken is paid).
//!    The variants run side by side and take turns in rounds, so their ratios hold on a host
//!    whose load drifts during the run.
//!
//! 3. `store`: what a turn's durable writes cost in the embedded store (read the recent
//!    messages, record the user message, save a two-message reply), wall and CPU per turn.
//!
//! 4. `cleartext`: Baton's own HTTP/1.1 client (`outbound/cleartext.rs`) against reqwest on the
//!    same cleartext loopback path, in one run: two `serve` processes of the same binary, the
//!    second handing its cleartext calls to reqwest (a proxy is set, so `outbound::Client` leaves
//!    them to reqwest, and `NO_PROXY` sends them straight to the servers: the proxy's port takes
//!    no connection). The mixed turn at its script's pace and with zero-latency models, the two
//!    processes taking turns in rounds; `serve`'s CPU and wake-ups per turn, wall p50, and
//!    reqwest's CPU over Baton's client's (issue 47's rule: the hand-written client stays only if
//!    reqwest costs more than 1.1× its CPU per turn here).
//!
//! 5. `log`: the turn log's CPU from outside, through HTTP: two `serve` processes of the same
//!    binary on their own embedded store files, `BATON_TURN_LOG=true` and `false`, the mixed turn
//!    with zero-latency models, the processes taking turns in rounds; `serve`'s CPU per turn and
//!    its ratio (issue 48's target: log on ≤ 1.15× log off). With `BATON_BENCH_BASELINE`, each
//!    older binary's pair too, in the same rounds.
//!
//! Each figure of 1 and 2 is printed for the default flush, for `BATON_FLUSH_BUDGET_MS=0` (no pacing),
//! for the model server over TLS (reqwest, h2 by ALPN: the path production takes to a vendor, where
//! the others take Baton's own cleartext HTTP/1.1 connection; support stays cleartext), and, when
//! `BATON_BENCH_BASELINE` names other `orchestrator` binaries (older builds, separated by `:`), for
//! those binaries too, with the ratios, all from one run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton::model::scripted::{Reply, ScriptedServer, StreamReply};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::process::ServeProcess;
use baton_tests::{ASK_SHOPPING, ASK_SUPPORT};
use futures::StreamExt;
use serde_json::{Value, json};

/// `cargo bench -- latency` (or no name) runs this benchmark.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if wanted("latency") {
        rt.block_on(latency(if quick { 3 } else { 7 }, if quick { 100 } else { 400 }));
    }
    if wanted("store") {
        rt.block_on(store_writes(if quick { 100 } else { 500 }));
    }
    if wanted("cleartext") {
        rt.block_on(cleartext(if quick { 8 } else { 24 }, if quick { 200 } else { 800 }));
    }
    if wanted("log") {
        rt.block_on(log_over_http(if quick { 200 } else { 1_000 }));
    }
}

/// The release build's directory (`CARGO_TARGET_DIR`'s when set, as `cargo bench` resolves it).
fn release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"), PathBuf::from);
    target.join("release")
}

/// The release `orchestrator` binary, or `None` when it is not built (section `section` then
/// says it is skipped).
fn release_orchestrator(section: &str) -> Option<PathBuf> {
    let binary = release_dir().join("orchestrator");
    if !binary.exists() {
        println!("== {section}: skipped, {} is not built (run `make bench`)", binary.display());
        return None;
    }
    Some(binary)
}

/// The older binaries `BATON_BENCH_BASELINE` names (one, or several separated as in `PATH`),
/// each named `baseline <its file name>`.
fn baselines() -> Vec<(String, PathBuf)> {
    let baselines = std::env::var_os("BATON_BENCH_BASELINE").unwrap_or_default();
    std::env::split_paths(&baselines)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|base| {
            let file = base.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            (format!("baseline {file}"), base)
        })
        .collect()
}

/// A process's CPU time so far (user plus system), read two ways: per live thread to the
/// nanosecond (`/proc/<pid>/task/<tid>/schedstat`), and for the whole process in 10 ms ticks
/// (`/proc/<pid>/stat`), which also keeps the time of threads that have exited.
///
/// `schedstat` also counts the times each thread was put on a CPU: its wake-ups, including
/// its returns after another thread preempted it.
#[derive(Default)]
struct Cpu {
    /// Per thread id: nanoseconds on a CPU, times put on one.
    threads: std::collections::HashMap<String, (u64, u64)>,
    ticks: Duration,
}

impl Cpu {
    fn of(pid: &str) -> Cpu {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split_whitespace().collect();
        let ticks: u64 =
            fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
        let mut threads = std::collections::HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let path = task.path().join("schedstat");
            let Ok(line) = std::fs::read_to_string(path) else { continue };
            let fields: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            if let [ns, _, runs] = fields[..] {
                threads.insert(task.file_name().to_string_lossy().into_owned(), (ns, runs));
            }
        }
        Cpu { threads, ticks: Duration::from_millis(ticks * 10) } // USER_HZ is 100 on Linux
    }

    /// The CPU used since `before`: to the nanosecond while every thread of `before` is still
    /// there; from the ticks when one has exited, since its last moments are counted nowhere else.
    fn since(&self, before: &Cpu) -> Duration {
        if before.threads.keys().all(|tid| self.threads.contains_key(tid)) {
            let ns = self.threads.iter().map(|(tid, (ns, _))| ns.saturating_sub(before.of_thread(tid).0));
            Duration::from_nanos(ns.sum())
        } else {
            self.ticks.saturating_sub(before.ticks)
        }
    }

    /// How many times the process's threads were put on a CPU since `before` (those still
    /// there): one per wake-up.
    fn wakeups_since(&self, before: &Cpu) -> u64 {
        self.threads.iter().map(|(tid, (_, runs))| runs.saturating_sub(before.of_thread(tid).1)).sum()
    }

    /// Thread `tid`'s reading, zero if it had not started.
    fn of_thread(&self, tid: &str) -> (u64, u64) {
        self.threads.get(tid).copied().unwrap_or_default()
    }
}

/// A turn's writes to the embedded store, as `History` does them: the recent messages, the user
/// message (kept in memory), the reply (flushed with the user message: one write transaction).
async fn store_writes(turns: usize) {
    use baton::store::embedded::EmbeddedStore;
    use baton::store::{Conversations, EpisodeKey, Role, StoredMessage, SystemClock};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap();
    let reply = |turn: &str, seq: u32, agent: &str| StoredMessage {
        seq,
        role: Role::Assistant,
        agent: agent.into(),
        content: "word ".repeat(50),
        ..StoredMessage::user(turn, "", 0)
    };
    let one = |i: usize| {
        let store = &store;
        async move {
            let key = EpisodeKey::new("bench", format!("episode-{i}")).unwrap();
            let turn = format!("turn-{i}");
            store.recent_messages(&key, 20).await.unwrap();
            let user = StoredMessage::user(&turn, "my receipt didn't scan and find me coffee deals", 0);
            store.record_user_message(&key, &user, None).await.unwrap();
            let messages = [reply(&turn, 1, "support[1]"), reply(&turn, 2, "shopping[1]")];
            store.save_reply(&key, &turn, &messages).await.unwrap();
        }
    };
    for i in 0..turns / 10 {
        one(i).await;
    }
    let cpu = Cpu::of("self");
    let commits = store.durable_commits();
    let started = Instant::now();
    for i in turns..2 * turns {
        one(i).await;
    }
    let wall = started.elapsed() / turns as u32;
    let cpu = Cpu::of("self").since(&cpu) / turns as u32;
    let commits = (store.durable_commits() - commits) as f64 / turns as f64;
    println!(
        "== a turn's durable writes, embedded store (read recent, record user message, save a 2-message reply)"
    );
    println!(
        "   {turns} turns: wall {:.3} ms, CPU {:.3} ms per turn, {commits:.2} write transactions (each with one fdatasync) per turn",
        ms(wall),
        ms(cpu)
    );
}

const PREAMBLE: &str = "Let me check both of those for you.";
const ORCH_GAP: Duration = Duration::from_millis(10);
const TOKEN_GAP: Duration = Duration::from_millis(20);
const TOKENS: usize = 50;
const SHOPPING_FIRST: Duration = Duration::from_millis(100);
const SUPPORT_FIRST: Duration = Duration::from_millis(300);
/// Frames the floor relay passes (a mixed turn receives about 120 and is woken about 150–190 times).
const FLOOR_FRAMES: u32 = 280;

/// The orchestrator model's answer: the preamble, then both calls.
fn orchestrator_reply() -> StreamReply {
    Reply::text(PREAMBLE)
        .tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 2}))
        .tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 2}))
}

fn tokens(prefix: &str) -> Vec<String> {
    (0..TOKENS).map(|i| format!(" {prefix}{i}")).collect()
}

/// The timeline a perfect merge would show a client for the mixed turn, from the scripts: when
/// the orchestrator's stream ends the sub-agents start; each text leaves when it is produced.
struct Ideal {
    first_text: Duration,
    first_sub_agent_text: Duration,
    content_done: Duration,
    longest_silence: Duration,
    /// Each model stream's last frame, from its request's arrival at its server.
    orch_end: Duration,
    shopping_end: Duration,
    support_end: Duration,
}

fn ideal() -> Ideal {
    let orch = orchestrator_reply().chunk_delay(ORCH_GAP);
    // Chunk 0 is the role; chunk k goes out k gaps after the headers.
    let orch_end = ORCH_GAP * (orch.chunks("orch").len() as u32 - 1);
    let preamble_end = ORCH_GAP * PREAMBLE.split_whitespace().count() as u32;
    // Shopping's model stream ends with its finish and usage chunks, one gap each after its last
    // token; support's (Forethought) answers whole, one JSON body, at the end of its script.
    let shopping_end = SHOPPING_FIRST + TOKEN_GAP * (TOKENS as u32 + 1);
    let support_end = SUPPORT_FIRST + TOKEN_GAP * (TOKENS as u32 - 1);
    Ideal {
        first_text: ORCH_GAP,
        first_sub_agent_text: orch_end + SHOPPING_FIRST,
        content_done: orch_end + shopping_end.max(support_end),
        longest_silence: (orch_end + SHOPPING_FIRST - preamble_end).max(TOKEN_GAP),
        orch_end,
        shopping_end,
        support_end,
    }
}

/// The scripted servers for the mixed turn (`zero`: every delay zero).
struct Servers {
    models: ScriptedServer,
    support: ForethoughtServer,
    zero: bool,
    /// The model server's certificate, for `SSL_CERT_FILE`, when it speaks TLS.
    ca: Option<tempfile::NamedTempFile>,
}

impl Servers {
    /// `tls`: the model server speaks TLS (reqwest's path in `serve`, as to a vendor); else
    /// cleartext HTTP/1.1 (Baton's own connection).
    async fn start(zero: bool, tls: bool) -> Servers {
        let models = if tls {
            ScriptedServer::start_tls().await.unwrap()
        } else {
            ScriptedServer::start().await.unwrap()
        };
        let ca = models.certificate().map(|c| {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), c.pem()).unwrap();
            file
        });
        let support = ForethoughtServer::start().await.unwrap();
        // The ideal is the script's schedule: the servers keep it to a fraction of a millisecond.
        models.keep_exact_time();
        support.keep_exact_time();
        let gap = |d: Duration| if zero { Duration::ZERO } else { d };
        models.set_default("orch", orchestrator_reply().chunk_delay(gap(ORCH_GAP)));
        // The first chunk (the role) goes with the headers, the first token one gap later.
        let shopping = Reply::text(tokens("deal").concat())
            .first_byte_delay(gap(SHOPPING_FIRST - TOKEN_GAP))
            .chunk_delay(gap(TOKEN_GAP));
        models.set_default("shop", shopping);
        Servers { models, support, zero, ca }
    }

    /// How late the test servers themselves were on the last turn's content-done path, in ms:
    /// the orchestrator model's stream and the stream of the agent that spoke last (`last`),
    /// each from its request's arrival to its last frame, against its script. They keep exact
    /// time (`keep_exact_time`), but a timer still wakes a little late and they take a moment to
    /// answer a request; none of that is Baton's, and a perfect merge would be as late.
    fn lateness(&self, ideal: &Ideal, last: &str) -> f64 {
        let late = |took: Option<Duration>, script: Duration| took.map_or(0.0, |t| ms(t) - ms(script));
        let orch = self.models.requests_for("orch").pop().expect("the orchestrator model was called");
        let orch = late(orch.last_frame_at.map(|t| t - orch.received_at), ideal.orch_end);
        let sub = if baton::event::agent_name(last) == "support" {
            let support = self.support.requests().pop().expect("support was called");
            late(support.last_chunk_at.map(|t| t - support.received_at), ideal.support_end)
        } else {
            let shopping = self.models.requests_for("shop").pop().expect("shopping was called");
            late(shopping.last_frame_at.map(|t| t - shopping.received_at), ideal.shopping_end)
        };
        orch + sub
    }

    /// Queues support's answer for one turn (the Forethought server answers from a queue).
    fn queue_support(&self) {
        let gap = |d: Duration| if self.zero { Duration::ZERO } else { d };
        // Forethought's documented answer: one JSON body of widget components (HTML messages),
        // answered whole when the script's last chunk would have been.
        let components: Vec<serde_json::Value> = tokens("help")
            .iter()
            .map(|t| json!({"type": "text", "message": format!("<p>{}</p>", t.trim())}))
            .collect();
        self.support.push(FtReply::widgets(json!(components)).delayed(gap(ideal().support_end)));
    }
}

/// A running `orchestrator serve`.
struct Serve {
    /// Killed when the `Serve` is dropped.
    _process: ServeProcess,
    url: String,
    pid: u32,
}

impl Serve {
    async fn start(binary: &Path, servers: &Servers, env: &[(&str, &str)]) -> Serve {
        let mut all = vec![
            ("OPENAI_BASE_URL", servers.models.base_url()),
            ("BATON_ORCHESTRATOR_MODEL", "orch".to_owned()),
            ("BATON_SHOPPING_MODEL", "shop".to_owned()),
            ("FORETHOUGHT_API_TOKEN", "bench-token".to_owned()),
            ("FORETHOUGHT_BASE_URL", servers.support.base_url()),
        ];
        if let Some(ca) = &servers.ca {
            all.push(("SSL_CERT_FILE", ca.path().display().to_string()));
        }
        all.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let process = ServeProcess::start(binary, &all).await;
        Serve { url: process.url.clone(), pid: process.pid, _process: process }
    }

    /// User plus system CPU time of the process so far.
    fn cpu(&self) -> Cpu {
        Cpu::of(&self.pid.to_string())
    }
}

/// One SSE event as the client saw it.
struct Seen {
    at: Duration,
    kind: String,
    data: Value,
}

/// Sends one turn and reads its SSE body as it arrives, timing every event from the request.
async fn turn(client: &reqwest::Client, url: &str) -> Vec<Seen> {
    let started = Instant::now();
    let response = client
        .post(url)
        .json(&json!({"message": "my receipt didn't scan and find me coffee deals"}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "status {}", response.status());
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut seen = Vec::new();
    while let Some(chunk) = body.next().await {
        let at = started.elapsed();
        buffer.extend_from_slice(&chunk.unwrap());
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let block = String::from_utf8_lossy(&block);
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(str::to_owned);
            let Some(kind) = field("event: ") else { continue }; // a heartbeat
            let data = field("data: ").and_then(|d| serde_json::from_str(&d).ok()).unwrap_or(Value::Null);
            seen.push(Seen { at, kind, data });
        }
    }
    assert_eq!(seen.last().map(|s| s.kind.as_str()), Some("completed"), "the turn completed");
    seen
}

/// What one mixed turn showed, against the ideal.
#[derive(Default, Clone, Copy)]
struct Mixed {
    first_event: f64,
    first_text: f64,
    first_sub_agent_text: f64,
    content_done: f64,
    longest_silence: f64,
    out_of_order: usize,
    /// Of `content_done`, how late the test servers were ([`Servers::lateness`]).
    servers_late: f64,
    /// The serve process's CPU per turn (user plus system, ms), over all the turns measured.
    cpu: f64,
    /// The times per turn the serve process was put on a CPU, over all the turns measured.
    wakeups: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn measure(seen: &[Seen], ideal: &Ideal) -> Mixed {
    let agent = |s: &Seen| s.data["agent"].as_str().unwrap_or("").to_owned();
    let texts: Vec<&Seen> = seen.iter().filter(|s| s.kind == "text").collect();
    let first_sub = texts.iter().find(|s| agent(s) != "orchestrator").map_or(Duration::MAX, |s| s.at);
    let silence = texts.windows(2).map(|w| w[1].at - w[0].at).max().unwrap_or_default();
    // An agent's end events (its agent_finished, and the orchestrator's tool_result and
    // tool_call_end for the call that ran it) must come after that agent's last text.
    let mut out_of_order = 0;
    for (i, s) in seen.iter().enumerate() {
        let ended = match s.kind.as_str() {
            "agent_finished" => agent(s),
            "tool_result" | "tool_call_end" => s.data["name"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("ask_")
                .trim_start_matches("agent__")
                .to_owned(),
            _ => continue,
        };
        let name = baton::event::agent_name(&ended).to_owned();
        if !name.is_empty()
            && seen[i..]
                .iter()
                .any(|later| later.kind == "text" && baton::event::agent_name(&agent(later)) == name)
        {
            out_of_order += 1;
        }
    }
    Mixed {
        first_event: ms(seen[0].at),
        first_text: ms(texts[0].at) - ms(ideal.first_text),
        first_sub_agent_text: ms(first_sub) - ms(ideal.first_sub_agent_text),
        content_done: ms(texts.last().unwrap().at) - ms(ideal.content_done),
        longest_silence: ms(silence) - ms(ideal.longest_silence),
        out_of_order,
        servers_late: 0.0,
        cpu: 0.0,
        wakeups: 0.0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// The median of each figure over `turns` mixed turns on a fresh connection each, and on one
/// kept-alive connection.
async fn mixed(serve: &Serve, servers: &Servers, turns: usize) -> [Mixed; 2] {
    let ideal = ideal();
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let kept = reqwest::Client::new();
    let mut out = [Mixed::default(); 2];
    for (slot, client) in out.iter_mut().zip([&fresh, &kept]) {
        // A warm-up turn: the kept-alive client's connection is open after it.
        servers.queue_support();
        turn(client, &serve.url).await;
        let mut runs = Vec::new();
        let cpu = serve.cpu();
        for _ in 0..turns {
            servers.queue_support();
            let seen = turn(client, &serve.url).await;
            let mut run = measure(&seen, &ideal);
            let last = seen.iter().rfind(|s| s.kind == "text").and_then(|s| s.data["agent"].as_str());
            run.servers_late = servers.lateness(&ideal, last.unwrap_or(""));
            runs.push(run);
        }
        let used = serve.cpu();
        let wakeups = used.wakeups_since(&cpu) as f64 / turns as f64;
        let cpu = ms(used.since(&cpu)) / turns as f64;
        let med = |f: fn(&Mixed) -> f64| median(runs.iter().map(f).collect());
        *slot = Mixed {
            first_event: med(|m| m.first_event),
            first_text: med(|m| m.first_text),
            first_sub_agent_text: med(|m| m.first_sub_agent_text),
            content_done: med(|m| m.content_done),
            longest_silence: med(|m| m.longest_silence),
            out_of_order: runs.iter().map(|m| m.out_of_order).max().unwrap_or(0),
            servers_late: med(|m| m.servers_late),
            cpu,
            wakeups,
        };
    }
    out
}

/// The floor of a streamed frame's CPU on this host: the relay (`src/bin/relay.rs`, on the
/// runtime `serve` runs on) passes `frames` SSE-sized frames sent `gap` apart from one loopback
/// connection to another. Its CPU and wake-ups per frame.
async fn floor(frames: u32, gap: Duration) -> (Duration, f64) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut relay = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the relay starts");
    let mut port = String::new();
    let stdout = relay.stdout.take().expect("the relay's stdout");
    tokio::io::BufReader::new(stdout).read_line(&mut port).await.expect("the relay's port");
    let addr = format!("127.0.0.1:{}", port.trim());
    let mut to = tokio::net::TcpStream::connect(&addr).await.expect("the relay accepts");
    tokio::time::sleep(Duration::from_millis(20)).await; // accepted first: the relay's input
    let mut from = tokio::net::TcpStream::connect(&addr).await.expect("the relay accepts");
    to.set_nodelay(true).unwrap();
    let frame = format!("data: {{\"text\":\"{}\"}}\n\n", "x".repeat(100));
    let mut buf = vec![0u8; 4096];
    let mut pass = async |to: &mut tokio::net::TcpStream, from: &mut tokio::net::TcpStream| {
        to.write_all(frame.as_bytes()).await.unwrap();
        let mut got = 0;
        while got < frame.len() {
            got += from.read(&mut buf).await.unwrap();
        }
    };
    for _ in 0..5 {
        pass(&mut to, &mut from).await;
    }
    let pid = relay.id().expect("the relay runs").to_string();
    let before = Cpu::of(&pid);
    let start = tokio::time::Instant::now();
    for i in 1..=frames {
        tokio::time::sleep_until(start + gap * i).await;
        pass(&mut to, &mut from).await;
    }
    let after = Cpu::of(&pid);
    (after.since(&before) / frames, after.wakeups_since(&before) as f64 / f64::from(frames))
}

/// How many rounds the variants take turns in.
const ROUNDS: usize = 8;

/// Turns on a kept-alive connection, for every variant at once (after a warm-up of a tenth as
/// many): each gets `turns` turns in `rounds` rounds, the variants taking turns round by round,
/// so a host that gets busier or quieter during the run weighs on every variant alike. Per
/// variant: wall per turn (ms, sorted), its serve process's CPU and wake-ups per turn.
async fn in_rounds(
    serves: &[(Serve, &Servers)],
    turns: usize,
    rounds: usize,
) -> Vec<(Vec<f64>, Duration, f64)> {
    let client = reqwest::Client::new();
    for (serve, servers) in serves {
        for _ in 0..turns / 10 + 1 {
            servers.queue_support();
            turn(&client, &serve.url).await;
        }
    }
    let mut out: Vec<(Vec<f64>, Duration, f64)> =
        serves.iter().map(|_| (Vec::with_capacity(turns), Duration::ZERO, 0.0)).collect();
    for round in 0..rounds {
        let n = turns / rounds + usize::from(round < turns % rounds);
        for ((serve, servers), (walls, cpu, wakeups)) in serves.iter().zip(&mut out) {
            let before = serve.cpu();
            for _ in 0..n {
                servers.queue_support();
                let started = Instant::now();
                turn(&client, &serve.url).await;
                walls.push(ms(started.elapsed()));
            }
            let after = serve.cpu();
            *cpu += after.since(&before);
            *wakeups += after.wakeups_since(&before) as f64;
        }
    }
    for (walls, cpu, wakeups) in &mut out {
        walls.sort_by(f64::total_cmp);
        *cpu /= turns as u32;
        *wakeups /= turns as f64;
    }
    out
}

struct Variant {
    name: String,
    binary: PathBuf,
    env: Vec<(&'static str, &'static str)>,
    /// The model server over TLS (through reqwest, h2 by ALPN): the path production takes.
    tls: bool,
}

struct Figures {
    mixed: [Mixed; 2],
    wall_p50: f64,
    wall_p90: f64,
    wakeups: f64,
    cpu: Duration,
}

async fn latency(turns: usize, zero_turns: usize) {
    let Some(binary) = release_orchestrator("latency") else { return };
    let mut variants = vec![
        Variant { name: "flush on (default)".into(), binary: binary.clone(), env: vec![], tls: false },
        Variant {
            name: "BATON_FLUSH_BUDGET_MS=0".into(),
            binary: binary.clone(),
            env: vec![("BATON_FLUSH_BUDGET_MS", "0")],
            tls: false,
        },
        Variant { name: "models over TLS (reqwest)".into(), binary: binary.clone(), env: vec![], tls: true },
    ];
    for (name, binary) in baselines() {
        variants.push(Variant { name, binary, env: vec![], tls: false });
    }
    let mixed_servers = Servers::start(false, false).await;
    let zero_servers = Servers::start(true, false).await;
    let mixed_tls = Servers::start(false, true).await;
    let zero_tls = Servers::start(true, true).await;
    let ideal = ideal();
    println!(
        "== latency as a client sees it (release serve, scripted models and Forethought over HTTP, SSE client)"
    );
    println!(
        "   mixed turn: preamble, both sub-agents at once; shopping first token +{} ms, support +{} ms, {TOKENS} tokens {} ms apart",
        SHOPPING_FIRST.as_millis(),
        SUPPORT_FIRST.as_millis(),
        TOKEN_GAP.as_millis()
    );
    println!(
        "   ideal: first text {:.0} ms, first sub-agent text {:.0} ms, content done {:.0} ms, longest silence {:.0} ms; median of {turns} turns",
        ms(ideal.first_text),
        ms(ideal.first_sub_agent_text),
        ms(ideal.content_done),
        ms(ideal.longest_silence)
    );
    let (floor_cpu, floor_wakeups) = floor(FLOOR_FRAMES, TOKEN_GAP).await;
    println!(
        "   floor: a relay on serve's runtime (one wake-up, read and write per frame; tests/src/bin/relay.rs), {FLOOR_FRAMES} frames {} ms apart: {:.1} µs CPU and {:.2} wake-ups per frame, {:.1} µs per wake-up",
        TOKEN_GAP.as_millis(),
        floor_cpu.as_secs_f64() * 1e6,
        floor_wakeups,
        floor_cpu.as_secs_f64() * 1e6 / floor_wakeups.max(1.0)
    );
    // A wake-up of `serve` costs at least what a wake-up of the relay does: the rest is Baton's.
    let floor_per_wakeup = floor_cpu.div_f64(floor_wakeups.max(1.0));
    let mut mixed_figures = Vec::new();
    for v in &variants {
        let servers = if v.tls { &mixed_tls } else { &mixed_servers };
        let serve = Serve::start(&v.binary, servers, &v.env).await;
        mixed_figures.push(mixed(&serve, servers, turns).await);
    }
    let mut serves = Vec::new();
    for v in &variants {
        let servers = if v.tls { &zero_tls } else { &zero_servers };
        serves.push((Serve::start(&v.binary, servers, &v.env).await, servers));
    }
    let zero = in_rounds(&serves, zero_turns, ROUNDS).await;
    drop(serves);
    let all: Vec<Figures> = mixed_figures
        .into_iter()
        .zip(zero)
        .map(|(mixed, (walls, cpu, wakeups))| Figures {
            mixed,
            wall_p50: percentile(&walls, 0.5),
            wall_p90: percentile(&walls, 0.9),
            cpu,
            wakeups,
        })
        .collect();
    for (c, connection) in ["fresh connection", "kept-alive connection"].iter().enumerate() {
        println!("   -- {connection}: measured − ideal, ms");
        println!(
            "   {:<26} {:>11} {:>10} {:>14} {:>12} {:>15} {:>9} {:>13} {:>13} {:>15} {:>13} {:>14}",
            "",
            "first event",
            "first text",
            "first sub text",
            "content done",
            "longest silence",
            "ends late",
            "servers late",
            "Baton's share",
            "serve CPU/turn",
            "wake-ups/turn",
            "over the floor"
        );
        for (v, f) in variants.iter().zip(&all) {
            let m = f.mixed[c];
            println!(
                "   {:<26} {:>11.1} {:>10.1} {:>14.1} {:>12.1} {:>15.1} {:>9} {:>13.1} {:>13.1} {:>12.2} ms {:>13.0} {:>11.2} ms",
                v.name,
                m.first_event,
                m.first_text,
                m.first_sub_agent_text,
                m.content_done,
                m.longest_silence,
                m.out_of_order,
                m.servers_late,
                m.content_done - m.servers_late,
                m.cpu,
                m.wakeups,
                m.cpu - m.wakeups * ms(floor_per_wakeup)
            );
        }
    }
    println!(
        "   -- zero-latency models, {zero_turns} turns on a kept-alive connection (the variants take turns, {ROUNDS} rounds)"
    );
    println!(
        "   {:<26} {:>13} {:>13} {:>16} {:>14} {:>15}",
        "", "wall p50 ms", "wall p90 ms", "serve CPU/turn", "wake-ups/turn", "over the floor"
    );
    for (v, f) in variants.iter().zip(&all) {
        println!(
            "   {:<26} {:>13.2} {:>13.2} {:>13.3} ms {:>14.1} {:>12.3} ms",
            v.name,
            f.wall_p50,
            f.wall_p90,
            ms(f.cpu),
            f.wakeups,
            ms(f.cpu) - f.wakeups * ms(floor_per_wakeup)
        );
    }
    // Ratios against the default variant, from this run.
    let base = &all[0];
    for (v, f) in variants.iter().zip(&all).skip(1) {
        println!(
            "   {} / flush on: content done − ideal (fresh) {:+.1} ms vs {:+.1} ms; zero-latency wall p50 {:.2}×, CPU/turn {:.2}×",
            v.name,
            f.mixed[0].content_done,
            base.mixed[0].content_done,
            f.wall_p50 / base.wall_p50,
            f.cpu.as_secs_f64() / base.cpu.as_secs_f64().max(1e-9)
        );
    }
    println!(
        "   targets: content done − ideal ≤ 5 ms; zero-latency wall ≤ 5 ms; CPU per turn ≤ 1 ms; kept-alive first event ≤ 3 ms"
    );
}

/// Baton's cleartext HTTP/1.1 client against reqwest on the same cleartext loopback path: the
/// mixed turn at its script's pace (`paced_turns`, one turn per round) and with zero-latency
/// models (`zero_turns`, in [`ROUNDS`] rounds), each against two `serve` processes of one
/// binary that take turns; the second's cleartext calls go through reqwest.
async fn cleartext(paced_turns: usize, zero_turns: usize) {
    let Some(binary) = release_orchestrator("cleartext") else { return };
    // A proxy makes `outbound::Client` hand cleartext calls to reqwest (which honours proxies);
    // NO_PROXY sends them straight to the loopback servers. The proxy's port must see nothing.
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    proxy.set_nonblocking(true).unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let through_reqwest = [("HTTP_PROXY", proxy_url.as_str()), ("NO_PROXY", "127.0.0.1,localhost")];
    let names = ["Baton's cleartext client", "reqwest (HTTP/1.1)"];
    println!(
        "== cleartext HTTP/1.1 to the model servers: Baton's client vs reqwest (release serve, same binary, same run)"
    );
    println!(
        "   {:<44} {:<26} {:>11} {:>16} {:>14}",
        "", "", "wall p50 ms", "serve CPU/turn", "wake-ups/turn"
    );
    for (label, zero, turns, rounds) in [
        ("mixed turn, paced", false, paced_turns, paced_turns),
        ("mixed turn, zero-latency models", true, zero_turns, ROUNDS),
    ] {
        let servers = Servers::start(zero, false).await;
        let serves = vec![
            (Serve::start(&binary, &servers, &[]).await, &servers),
            (Serve::start(&binary, &servers, &through_reqwest).await, &servers),
        ];
        let figures = in_rounds(&serves, turns, rounds).await;
        for (name, (walls, cpu, wakeups)) in names.iter().zip(&figures) {
            println!(
                "   {:<44} {name:<26} {:>11.2} {:>13.3} ms {:>14.1}",
                format!("{label}, {turns} turns"),
                percentile(walls, 0.5),
                ms(*cpu),
                wakeups
            );
        }
        let ratio = figures[1].1.as_secs_f64() / figures[0].1.as_secs_f64().max(1e-9);
        println!(
            "   {label}: reqwest / Baton's client, CPU per turn {ratio:.2}× ({}: the hand-written client stays only above 1.10×)",
            if ratio > 1.1 { "above" } else { "within" }
        );
    }
    assert!(
        matches!(proxy.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a call went to the proxy: NO_PROXY did not hold, the figures are not of a direct path"
    );
}

/// The turn log's CPU measured from outside: `serve` with the log on and off, the same mixed
/// turn on zero-latency models through HTTP, in one run (`log`); and so for each binary
/// `BATON_BENCH_BASELINE` names, in the same rounds.
async fn log_over_http(turns: usize) {
    let Some(binary) = release_orchestrator("log") else { return };
    let mut binaries = vec![("this build".to_owned(), binary)];
    binaries.extend(baselines());
    let servers = Servers::start(true, false).await;
    let mut serves = Vec::new();
    for (_, binary) in &binaries {
        for log in ["true", "false"] {
            serves.push((Serve::start(binary, &servers, &[("BATON_TURN_LOG", log)]).await, &servers));
        }
    }
    let figures = in_rounds(&serves, turns, ROUNDS).await;
    println!(
        "== the turn log through HTTP (release serve, embedded store, mixed turn on zero-latency models, {turns} turns each, {ROUNDS} rounds, same run)"
    );
    println!("   {:<40} {:>11} {:>16} {:>14}", "", "wall p50 ms", "serve CPU/turn", "wake-ups/turn");
    for ((name, _), pair) in binaries.iter().zip(figures.chunks(2)) {
        for (log, (walls, cpu, wakeups)) in ["log on", "log off"].iter().zip(pair) {
            let label = format!("{name}, {log}");
            println!(
                "   {label:<40} {:>11.2} {:>13.3} ms {:>14.1}",
                percentile(walls, 0.5),
                ms(*cpu),
                wakeups
            );
        }
        let ratio = pair[0].1.as_secs_f64() / pair[1].1.as_secs_f64().max(1e-9);
        println!("   {name}: on / off {ratio:.2}× CPU per turn  (target ≤ 1.15×)");
    }
}
