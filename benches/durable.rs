//! Durable turns' costs (docs/benchmarks.md, "Durable turns"). Run with `make bench ONLY=durable`
//! (or `cargo bench -p baton-tests --bench durable -- log resume dynamodb`).
//!
//! 1. `log`: CPU per turn with the turn log on against the same turn with it off, in one run,
//!    through the chat endpoint's own code (`ChatService::respond`, the SSE body read to its end)
//!    over the embedded store, zero-latency in-process models: what logging adds to a turn. Turns
//!    alternate between the two services in batches, so drift on the host hits both alike; each
//!    batch's measurement ends a little over a second after its last turn, so the store's flush
//!    of the batch's log (within a second, on its own task) is counted in it. Also the store
//!    calls per turn (counted).
//!    `paced` runs the same comparison on turns that stream a word every 20 ms (also part of `log`).
//! 2. `resume`: time from a resume request to its first replayed event over loopback HTTP, on the
//!    code `serve` runs with the embedded store: a finished turn (read from the store) and a
//!    running one (from memory). p50 and p99.
//! 3. `dynamodb`: the same turn on DynamoDB (moto_server, when `AWS_ENDPOINT_URL_DYNAMODB` is set):
//!    the store calls per turn, and the write and read units they cost by DynamoDB's rules
//!    (moto's own `ConsumedCapacity` is not DynamoDB's: it reports no units for a transaction).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use baton::agent::{LlmAgent, LoopLimits};
use baton::history::History;
use baton::http::{Caller, ChatService};
use baton::model::scripted::{Reply, ScriptedModel};
use baton::mux::MuxConfig;
use baton::orchestrator::Orchestrator;
use baton::store::embedded::EmbeddedStore;
use baton::store::{Store, SystemClock};
use baton::tool::ToolRegistry;
use baton::turn::TurnLogSettings;
use baton_tests::counting::CountingStore;
use baton_tests::process::process_cpu;
use futures::StreamExt;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    if wanted("log") {
        rt.block_on(log_overhead(if quick { 200 } else { 2_000 }));
    }
    if wanted("log") || wanted("paced") {
        rt.block_on(paced_log_overhead(if quick { 100 } else { 600 }));
    }
    if wanted("resume") {
        rt.block_on(resume_latency(if quick { 50 } else { 500 }));
    }
    if wanted("dynamodb") {
        rt.block_on(dynamodb_units(if quick { 5 } else { 20 }));
    }
}

/// How long a measured group of turns waits after its last turn, inside its measurement: the
/// embedded store flushes a turn log's writes within a second of them, on a task of its own, so
/// without the wait that flush's CPU would fall in the next group's measurement, another
/// service's.
const SETTLE: Duration = Duration::from_millis(1_200);

/// Words the answer streams: one `text` event each.
const WORDS: usize = 60;

/// One agent streaming `WORDS` words, a word every `pace` (zero: at once, the turn is all CPU).
fn orchestrator(pace: Duration) -> Arc<Orchestrator> {
    let answer = (0..WORDS).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    let model = Arc::new(ScriptedModel::new("solo", Some(Reply::text(answer).chunk_delay(pace))));
    let agent = LlmAgent::new(
        "solo",
        "answer",
        model,
        Arc::new(ToolRegistry::new(Vec::new()).unwrap()),
        LoopLimits::default(),
    )
    .with_mux(MuxConfig { flush_interval: Duration::ZERO, flush_budget: Duration::ZERO });
    Arc::new(Orchestrator::new(Arc::new(agent), "solo"))
}

fn service(store: Arc<dyn Store>, log: bool) -> ChatService {
    paced_service(store, log, Duration::ZERO)
}

fn paced_service(store: Arc<dyn Store>, log: bool, pace: Duration) -> ChatService {
    let limits = baton::config::RequestLimits::default();
    ChatService::new(orchestrator(pace), History::new(store, 20), limits, Duration::from_secs(10))
        .with_turn_log(TurnLogSettings { enabled: log, ..TurnLogSettings::default() })
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers
}

/// One turn through `service`, its SSE body read to the end: its bytes.
async fn one_turn(service: &ChatService, episode: usize) -> usize {
    let body = format!(r#"{{"message":"tell me","episode_id":"bench-{episode}"}}"#);
    let response = service.respond(&Caller::Local, &json_headers(), body.as_bytes(), None).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body().into_data_stream();
    let mut bytes = 0;
    while let Some(chunk) = body.next().await {
        bytes += chunk.unwrap().len();
    }
    bytes
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn log_overhead(turns: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap());
    let counting = CountingStore::new(store.clone());
    let on = service(counting.clone(), true);
    let off = service(store.clone(), false);
    let discarded = service(CountingStore::discarding_turn_log(store), true);
    for i in 0..turns / 10 {
        one_turn(&on, i).await;
        one_turn(&off, i).await;
        one_turn(&discarded, i).await;
    }
    counting.reset();
    let (mut cpu_on, mut cpu_off, mut cpu_discarded) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // Few, large groups: each pays a `SETTLE`.
    let batch = 200.min(turns);
    let mut episode = turns;
    for _ in 0..turns / batch {
        for (service, cpu) in [(&on, &mut cpu_on), (&off, &mut cpu_off), (&discarded, &mut cpu_discarded)] {
            let before = process_cpu();
            for _ in 0..batch {
                episode += 1;
                one_turn(service, episode).await;
            }
            tokio::time::sleep(SETTLE).await;
            *cpu += process_cpu() - before;
        }
    }
    let n = (turns / batch * batch) as u32;
    let (on_us, off_us, discarded_us) = (us(cpu_on / n), us(cpu_off / n), us(cpu_discarded / n));
    println!(
        "== the turn log: CPU per turn, log on vs off (one agent streaming {WORDS} words, zero latency, embedded store, {n} turns each, same run)"
    );
    println!("   log on  {on_us:>8.1} µs CPU per turn");
    println!("   log off {off_us:>8.1} µs CPU per turn");
    println!(
        "   log on, its writes dropped before the store {discarded_us:>8.1} µs CPU per turn (the process's share)"
    );
    println!("   on / off: {:.2}×  (target ≤ 1.15×)", on_us / off_us);
    let calls = counting.calls();
    let per_turn = |name: &str| *calls.get(name).unwrap_or(&0) as f64 / f64::from(n);
    println!(
        "   store calls per turn with the log: start {:.2}, appends {:.2}, final (last events and the end) {:.2}, gaps {:.2} (history: record {:.2}, reply {:.2}, recent {:.2})",
        per_turn("start_turn_log"),
        per_turn("append_turn_events"),
        per_turn("finish_turn_log"),
        per_turn("record_turn_gap"),
        per_turn("record_user_message"),
        per_turn("save_reply"),
        per_turn("recent_messages"),
    );
}

/// The same comparison on turns that stream as a model does, a word every 20 ms (1.2 s a turn),
/// 20 at once: the log's writes are paced (one per 250 ms), and a turn's own CPU includes its
/// waits and wake-ups, as in production. The three services take turns group by group; the
/// figures move by a fifth from run to run on this host, so the ratio is also given per round
/// of 100 turns, as its median and range.
async fn paced_log_overhead(turns: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("store.redb"), Arc::new(SystemClock)).unwrap());
    let counting = CountingStore::new(store.clone());
    let pace = Duration::from_millis(20);
    let services = [
        paced_service(counting.clone(), true, pace),
        paced_service(store.clone(), false, pace),
        paced_service(CountingStore::discarding_turn_log(store), true, pace),
    ];
    let (at_once, per_round) = (20, 100);
    let mut cpu = [Duration::ZERO; 3];
    let mut ratios = Vec::new();
    let mut episode = 1_000_000;
    for _ in 0..(turns / per_round).max(1) {
        let mut round = [Duration::ZERO; 3];
        for _ in 0..per_round / at_once {
            for (i, service) in services.iter().enumerate() {
                let before = process_cpu();
                let group: Vec<_> = (0..at_once)
                    .map(|_| {
                        episode += 1;
                        one_turn(service, episode)
                    })
                    .collect();
                futures::future::join_all(group).await;
                tokio::time::sleep(SETTLE).await;
                round[i] += process_cpu() - before;
            }
        }
        ratios.push(round[0].as_secs_f64() / round[1].as_secs_f64());
        cpu.iter_mut().zip(round).for_each(|(total, r)| *total += r);
    }
    let n = ((turns / per_round).max(1) * per_round) as u32;
    let [on_us, off_us, discarded_us] = cpu.map(|c| us(c / n));
    ratios.sort_by(f64::total_cmp);
    println!(
        "== the turn log on paced turns (a word every 20 ms, {WORDS} words, 20 turns at once, {n} turns each, same run)"
    );
    println!("   log on  {on_us:>8.1} µs CPU per turn");
    println!("   log off {off_us:>8.1} µs CPU per turn");
    println!(
        "   log on, its writes dropped before the store {discarded_us:>8.1} µs CPU per turn (the process's share)"
    );
    println!(
        "   on / off: {:.2}× overall; per round of {per_round}: median {:.2}×, {:.2}× to {:.2}×  (target ≤ 1.15×)",
        on_us / off_us,
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
    let per_turn = |name: &str| counting.calls_of(name) as f64 / f64::from(n);
    println!(
        "   store calls per turn with the log: start {:.2}, appends {:.2}, final {:.2}",
        per_turn("start_turn_log"),
        per_turn("append_turn_events"),
        per_turn("finish_turn_log")
    );
}

/// The time from sending a resume request to the first event's bytes.
async fn time_to_first_event(client: &reqwest::Client, url: &str, last: &str) -> Duration {
    let started = Instant::now();
    let response = client
        .get(url)
        .header(baton::http::USER_HEADER, "local")
        .header("last-event-id", last)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    loop {
        let chunk = body.next().await.expect("an event").unwrap();
        if chunk.windows(6).any(|w| w == b"event:") {
            return started.elapsed();
        }
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

async fn resume_latency(requests: usize) {
    use baton::model::scripted::ScriptedServer;
    let server = ScriptedServer::start().await.unwrap();
    let yaml = "entry: solo\nagents:\n  - name: solo\n    model: solo\n    instruction: Answer.\n";
    let config = baton_tests::scripted_runtime_config(&server).with_yaml(yaml, "solo.yaml").unwrap();
    let endpoint = baton_tests::start_endpoint(&config.into()).await;
    let client = reqwest::Client::new();
    let start = |reply: baton::model::scripted::StreamReply| {
        server.push("solo", reply);
        let client = client.clone();
        let url = endpoint.url.clone();
        async move {
            let response = client
                .post(&url)
                .json(&serde_json::json!({"message": "tell me", "episode_id": "resume-bench"}))
                .send()
                .await
                .unwrap();
            let turn = response.headers()["x-baton-turn-id"].to_str().unwrap().to_owned();
            (turn, response)
        }
    };
    let words = |n: usize| (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    // A finished turn: the log is read from the store.
    let (finished, response) = start(Reply::text(words(WORDS))).await;
    response.bytes().await.unwrap();
    // A running one: events come from memory (a word every 50 ms for the whole measurement).
    let (running, response) = start(Reply::text(words(2_000)).chunk_delay(Duration::from_millis(50))).await;
    let mut live = response.bytes_stream();
    live.next().await;
    println!(
        "== resume: a request with Last-Event-ID to its first replayed event (loopback HTTP, serve's code, embedded store, {requests} requests each)"
    );
    for (what, turn) in [("finished turn (store)", &finished), ("running turn (memory)", &running)] {
        let url = format!("{}/chat/resume-bench/turns/{turn}/events", endpoint.url);
        let last = format!("{turn}:2");
        let mut samples = Vec::with_capacity(requests);
        for _ in 0..requests {
            samples.push(time_to_first_event(&client, &url, &last).await);
        }
        let (p50, p99) = (percentile(&mut samples, 0.5), percentile(&mut samples, 0.99));
        println!(
            "   {what:<22} p50 {:>6.2} ms, p99 {:>6.2} ms  (target ≤ 20 ms: {})",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            if p50 <= Duration::from_millis(20) { "met" } else { "MISSED" }
        );
    }
    drop(live);
}

/// DynamoDB's units for an item of `bytes` written (1 per KB, rounded up; twice in a transaction).
fn write_units(bytes: usize, transactional: bool) -> f64 {
    let units = bytes.div_ceil(1024).max(1) as f64;
    if transactional { 2.0 * units } else { units }
}

async fn dynamodb_units(turns: usize) {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").map_or(true, |v| v.is_empty()) {
        println!("== the turn log on DynamoDB: skipped (set AWS_ENDPOINT_URL_DYNAMODB to a moto_server)");
        return;
    }
    use baton_tests::stores::{StoreHarness, test_clock};
    let moto = baton_tests::stores::Moto::start(test_clock()).await;
    let counting = CountingStore::sizing_items(moto.store());
    let on = service(counting.clone(), true);
    for i in 0..turns {
        one_turn(&on, 100_000 + i).await;
    }
    let calls = counting.calls();
    let n = turns as f64;
    let per_turn = |name: &str| *calls.get(name).unwrap_or(&0) as f64 / n;
    // Item sizes: the record is ~200 bytes (one unit); an events item's size is worked out by
    // DynamoDB's rules from the item as the store encodes it, keys included.
    let appends = counting.appends();
    let append_units: f64 = appends
        .iter()
        .map(|a| write_units(200, true) + write_units(a.item_bytes.expect("a sizing store"), true))
        .sum::<f64>()
        / n;
    let start = per_turn("start_turn_log") * write_units(200, false);
    // A final write without events is an end alone (an `UpdateItem`); with events it is counted
    // with the appends.
    let end = (per_turn("finish_turn_log") - appends.len() as f64 / n + per_turn("append_turn_events"))
        .max(0.0)
        * write_units(200, false);
    let reads = per_turn("turn_record");
    let events: f64 = appends.iter().map(|a| a.events as f64).sum::<f64>() / n;
    let bytes: f64 = appends.iter().map(|a| a.bytes as f64).sum::<f64>() / n;
    let item_bytes: f64 =
        appends.iter().map(|a| a.item_bytes.expect("a sizing store") as f64).sum::<f64>() / n;
    println!(
        "== the turn log on DynamoDB (moto_server): {turns} turns of {events:.0} events, {bytes:.0} bytes of events each, in events items of {item_bytes:.0} bytes by DynamoDB's rules"
    );
    println!(
        "   store calls per turn: start {:.2}, appends {:.2}, final {:.2}, record reads {:.2}",
        per_turn("start_turn_log"),
        per_turn("append_turn_events"),
        per_turn("finish_turn_log"),
        per_turn("turn_record")
    );
    println!(
        "   write units per turn {:.1} (start {start:.1}, appends {append_units:.1}, end {end:.1}); read units per turn {reads:.1}",
        start + append_units + end
    );
    println!(
        "   (units by DynamoDB's rules on the bytes written: 1 per KB per item, twice in a transaction; 1 per strongly consistent read of up to 4 KB)"
    );
}
