//! Mini-agents on vs off (`make bench ONLY=minis`): a three-part question whose every part needs
//! two tool rounds, against a scripted model server over real HTTP where every model call
//! answers after a fixed latency. The same chat endpoint code as `serve`, an SSE client, the
//! embedded store.
//!
//! - **off, parts in turn**: one tool loop that works through the parts one after another (six
//!   tool steps, then the answer): the case mini-agents are for.
//! - **off, parts in parallel**: one tool loop whose model calls every part's tool at once (two
//!   tool steps, then the answer): a model that already parallelises.
//! - **on**: the decomposer, three minis (two tool steps and an answer each, all at once), the
//!   aggregator.
//!
//! It prints the median wall time of a turn and the model calls per turn of each, and the ratios,
//! from one run.

use std::time::{Duration, Instant};

use baton::model::scripted::{Reply, ScriptedServer, StreamReply};
use baton_tests::{chat, scripted_config, start_endpoint};
use serde_json::json;

/// `cargo bench -- minis` runs this section (as `make bench ONLY=minis`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if !(args.is_empty() || args.iter().any(|a| a == "minis")) {
        return;
    }
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(minis(if quick { 3 } else { 9 }, Duration::from_millis(100)));
}

const QUESTION: &str =
    "where are my points from Tuesday, and what did I buy last week, and find me coffee deals";

/// The parts, each with the tool of its two rounds.
const PARTS: [(&str, &str); 3] = [
    ("where are my points from Tuesday", "search_help_center"),
    ("what did I buy last week", "purchase_history"),
    ("find me coffee deals", "search_offers"),
];

fn team(minis: bool) -> String {
    let mut yaml = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Help the user.
    tools: [search_help_center, purchase_history, search_offers]
    max_steps: 8
"
    .to_owned();
    if minis {
        yaml.push_str("    mini_agent: {decomposer_model: split, aggregator_model: join, max_minis: 3}\n");
    }
    yaml
}

fn arguments(tool: &str, part: &str) -> serde_json::Value {
    match tool {
        "purchase_history" => json!({"limit": 5}),
        _ => json!({"query": part}),
    }
}

/// One tool round of `part`.
fn round(part: &str, tool: &str, latency: Duration) -> StreamReply {
    Reply::text("").tool_call(tool, arguments(tool, part)).first_byte_delay(latency)
}

/// Scripts one turn of `mode` on `server`.
fn script(server: &ScriptedServer, mode: Mode, latency: Duration) {
    let answer = || Reply::text("Here is everything you asked.").first_byte_delay(latency);
    match mode {
        Mode::InTurn => {
            for (part, tool) in PARTS {
                server.push("lead", round(part, tool, latency));
                server.push("lead", round(part, tool, latency));
            }
            server.push("lead", answer());
        }
        Mode::Parallel => {
            for _ in 0..2 {
                let mut step = Reply::text("");
                for (part, tool) in PARTS {
                    step = step.tool_call(tool, arguments(tool, part));
                }
                server.push("lead", step.first_byte_delay(latency));
            }
            server.push("lead", answer());
        }
        Mode::Minis => {
            let sub_tasks: Vec<_> = PARTS
                .iter()
                .enumerate()
                .map(|(i, (part, tool))| json!({"id": (i + 1).to_string(), "description": part, "allowed_tools": [tool]}))
                .collect();
            let decomposition = json!({"should_fork": true, "sub_tasks": sub_tasks}).to_string();
            server.push("split", Reply::text(decomposition).first_byte_delay(latency));
            for (part, tool) in PARTS {
                server.push_when("lead", part, round(part, tool, latency));
                server.push_when("lead", part, round(part, tool, latency));
                server.push_when("lead", part, Reply::text("This part's answer.").first_byte_delay(latency));
            }
            server.push("join", answer());
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    InTurn,
    Parallel,
    Minis,
}

/// Median wall time of a turn and model calls per turn.
async fn measure(mode: Mode, turns: usize, latency: Duration) -> (f64, usize) {
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_config(&server).with_yaml(&team(mode == Mode::Minis), "bench.yaml").unwrap();
    let endpoint = start_endpoint(&config).await;
    let mut walls = Vec::with_capacity(turns);
    for _ in 0..turns {
        script(&server, mode, latency);
        let started = Instant::now();
        let events = chat(&endpoint.url, QUESTION).await;
        walls.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(
            matches!(
                events.last(),
                Some(baton::event::Event::Completed { status: baton::event::Status::Ok, .. })
            ),
            "{mode:?}: {:?}",
            events.last()
        );
    }
    walls.sort_by(f64::total_cmp);
    (walls[walls.len() / 2], server.requests().len() / turns)
}

async fn minis(turns: usize, latency: Duration) {
    println!(
        "== mini-agents: a three-part question, two tool rounds per part; every model call answers after {} ms \
         (scripted server over HTTP, SSE client); median of {turns} turns",
        latency.as_millis()
    );
    let in_turn = measure(Mode::InTurn, turns, latency).await;
    let parallel = measure(Mode::Parallel, turns, latency).await;
    let on = measure(Mode::Minis, turns, latency).await;
    println!("                                            wall p50 ms   model calls");
    for (name, (wall, calls)) in [
        ("off: one loop, parts in turn", in_turn),
        ("off: one loop, parts' calls in parallel", parallel),
        ("on: decomposer, 3 minis, aggregator", on),
    ] {
        println!("   {name:<40} {wall:>10.1}   {calls:>11}");
    }
    for (name, (wall, calls)) in [("parts in turn", in_turn), ("parts' calls in parallel", parallel)] {
        println!(
            "   on / off ({name}): wall {:.2}×, model calls {:.2}×",
            on.0 / wall,
            on.1 as f64 / calls as f64
        );
    }
}
