//! Replay proven at every event: one mixed turn (two sub-agents at once, a tool, an approval)
//! and its resume, each cut after every event k in turn on instance A and rejoined on instance B
//! with `Last-Event-ID`; the joined stream must be the turn's whole stream, event for event, and
//! the same (up to ids and timings) as an uninterrupted run of the same turn. A rejoin at the
//! final event is a `204` (an `EventSource` stops there instead of reconnecting forever).
//!
//! "Two instances" are two chat services over one store: what two Lambda instances share.

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status};
use baton::http::EndpointLimits;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::Store;
use baton::wiring::Backends;
use baton_tests::stores::{StoreHarness, test_clock};
use baton_tests::tools::CountingTools;
use baton_tests::{Endpoint, Received, scripted_runtime_config, start_endpoint_over};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    a_turn_cut_after_any_event_and_rejoined_elsewhere_is_whole,
    a_resume_cut_after_any_event_and_rejoined_elsewhere_is_whole,
);

/// The lead hands one request to two agents at once; `deals` looks and clips (the clip needs
/// approval), `help` answers in words.
const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Hand requests to your agents.
    agents: [deals, help]
  - name: deals
    model: deals
    description: Finds and clips offers.
    instruction: Clip what the user asks for.
    tools: [look, clip]
    output: text_and_events
    needs_approval:
      clip:
        reason: Clipping changes the user's card.
  - name: help
    model: help
    description: Answers questions about points.
    instruction: Answer.
    output: text_and_events
";

const HELP: &str = "Points post within a day of the scan.";

/// The pause between two words of a paced answer.
const PACE: Duration = Duration::from_millis(25);

/// Far above any turn here: reaching it means something hung.
const BOUND: Duration = Duration::from_secs(30);

struct Setup<H> {
    _harness: H,
    server: ScriptedServer,
    tools: CountingTools,
    a: Endpoint,
    b: Endpoint,
}

impl<H: StoreHarness> Setup<H> {
    async fn start() -> Setup<H> {
        let harness = H::start(test_clock()).await;
        let server = ScriptedServer::start().await.unwrap();
        let tools = CountingTools::new(&["look", "clip"]);
        let a = endpoint(&server, harness.store(), &tools).await;
        let b = endpoint(&server, harness.store(), &tools).await;
        Setup { _harness: harness, server, tools, a, b }
    }

    /// The models' answers for the first turn: the lead calls both agents, deals looks and
    /// clips (held for approval), help answers.
    fn script_turn(&self) {
        self.server.push(
            "lead",
            Reply::text("")
                .tool_call("agent__deals", json!({"text": "clip o-1"}))
                .tool_call("agent__help", json!({"text": "when do points post?"})),
        );
        self.server.push(
            "deals",
            Reply::text("")
                .tool_call("look", json!({"offer_id": "o-1"}))
                .tool_call("clip", json!({"offer_id": "o-1"})),
        );
        // Paced, so that a cut early in the turn is rejoined while it still runs on A (B follows
        // it from the store) and a late one after it ended (B replays the log).
        self.server.push("help", Reply::text(HELP).chunk_delay(PACE));
    }

    /// The models' answers for the resumed turn.
    fn script_resume(&self) {
        self.server.push("deals", Reply::text("Clipped o-1."));
        self.server.push(
            "lead",
            Reply::text("Your offer is clipped, and points post within a day.").chunk_delay(PACE),
        );
    }

    /// The first turn of `episode`, uninterrupted, on `endpoint`.
    async fn whole_turn(&self, endpoint: &Endpoint, episode: &str) -> Vec<Received> {
        self.script_turn();
        let response =
            post(endpoint, json!({"message": "clip o-1; when do points post?", "episode_id": episode})).await;
        collect(sse(response)).await
    }
}

async fn endpoint(server: &ScriptedServer, store: Arc<dyn Store>, tools: &CountingTools) -> Endpoint {
    let config = scripted_runtime_config(server).with_yaml(TEAM, "team.yaml").unwrap();
    let backends = Backends::over_store(store.clone()).with_extension(Arc::new(tools.clone()));
    start_endpoint_over(&config, store, backends, EndpointLimits::default()).await
}

async fn post(endpoint: &Endpoint, body: Value) -> reqwest::Response {
    let request =
        reqwest::Client::new().post(&endpoint.url).header(baton::http::USER_HEADER, "alice").json(&body);
    let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
    assert_eq!(response.status(), 200);
    response
}

fn sse(response: reqwest::Response) -> impl futures::Stream<Item = Received> + Send + Unpin {
    Box::pin(response.bytes_stream().eventsource().map(|e| {
        let e = e.expect("valid SSE framing");
        let event = baton::event::decode_sse(&e.event, &e.data).expect("valid event");
        Received { at: std::time::Instant::now(), id: e.id, event }
    }))
}

async fn collect(events: impl futures::Stream<Item = Received>) -> Vec<Received> {
    tokio::time::timeout(BOUND, events.collect::<Vec<_>>()).await.expect("the stream ends")
}

/// `GET` the events of `episode`'s turn `turn` on `endpoint` after `last` (`turn:seq`): the
/// status and the events.
async fn rejoin(endpoint: &Endpoint, episode: &str, turn: &str, last: Option<&str>) -> (u16, Vec<Received>) {
    let url = format!("{}/chat/{episode}/turns/{turn}/events", endpoint.url);
    let mut request = reqwest::Client::new().get(url).header(baton::http::USER_HEADER, "alice");
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    (status, collect(sse(response)).await)
}

fn turn_of(events: &[Received]) -> String {
    match &events[0].event {
        Event::Thinking { turn_id, .. } => turn_id.clone(),
        other => panic!("the first event is {other:?}"),
    }
}

fn completed(events: &[Received]) -> (Status, Vec<String>) {
    match events.last().map(|r| &r.event) {
        Some(Event::Completed { status, interrupts, .. }) => {
            (*status, interrupts.iter().map(|i| i.interrupt_id.clone()).collect())
        }
        other => panic!("the last event is {other:?}"),
    }
}

/// What a run of the same turn has in common with another: each event with its ids, timings and
/// usage left out, in the order of the stream (the mux may order two agents' events otherwise
/// from run to run, so both sides are sorted).
fn shape(events: &[Received]) -> Vec<String> {
    let mut shapes: Vec<String> = events
        .iter()
        .map(|r| {
            let mut value = serde_json::to_value(&r.event).unwrap();
            strip(&mut value);
            value.to_string()
        })
        .collect();
    shapes.sort();
    shapes
}

/// Removes what differs between two runs of one turn: ids (also inside a resume's words),
/// times, durations, usage, costs and the tools' run counters.
fn strip(value: &mut Value) {
    match value {
        Value::String(text) if text.contains("int_") => {
            let words: Vec<&str> =
                text.split(' ').map(|w| if w.starts_with("int_") { "int_…" } else { w }).collect();
            *text = words.join(" ");
        }
        Value::Object(map) => {
            map.retain(|k, _| {
                !(k.ends_with("_id")
                    || k.ends_with("_ms")
                    || k.ends_with("_at")
                    || k == "usage"
                    || k == "agent_total"
                    || k.starts_with("cost")
                    || k == "interrupts"
                    || k == "run")
            });
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Cuts `episode`'s running turn on A after `k` events of `first` (the stream A started with)
/// and rejoins it on B: the joined stream.
async fn cut_and_rejoin(
    b: &Endpoint,
    episode: &str,
    mut stream: impl futures::Stream<Item = Received> + Unpin,
    k: usize,
) -> Vec<Received> {
    let mut seen = Vec::new();
    while seen.len() < k {
        seen.push(tokio::time::timeout(BOUND, stream.next()).await.unwrap().expect("an event"));
    }
    drop(stream); // the client's connection is cut; the turn runs on (on_disconnect: continue)
    let turn = turn_of(&seen);
    let last = seen.last().unwrap().id.clone();
    let (status, rest) = rejoin(b, episode, &turn, Some(&last)).await;
    if status == 204 {
        return seen;
    }
    assert_eq!(status, 200, "rejoin after {last}");
    seen.extend(rest);
    seen
}

/// The joined stream is the turn's whole stream: ids `turn:1..n` with no gap or repeat, the
/// same events as a replay of the whole turn from the log, and the shape of an uninterrupted run.
async fn assert_whole(b: &Endpoint, episode: &str, joined: &[Received], reference: &[Received], k: usize) {
    let turn = turn_of(joined);
    let ids: Vec<String> = joined.iter().map(|r| r.id.clone()).collect();
    let expected: Vec<String> = (1..=joined.len()).map(|n| format!("{turn}:{n}")).collect();
    assert_eq!(ids, expected, "cut after {k}: ids in order, none missing or twice");
    let (status, logged) = rejoin(b, episode, &turn, None).await;
    assert_eq!(status, 200);
    let events = |rs: &[Received]| rs.iter().map(|r| r.event.clone()).collect::<Vec<_>>();
    assert_eq!(events(joined), events(&logged), "cut after {k}: the joined stream is the logged turn");
    assert_eq!(shape(joined), shape(reference), "cut after {k}: the same turn as an uninterrupted run");
    // At the final event there is nothing more to send, and the answer says so.
    let (status, rest) = rejoin(b, episode, &turn, Some(&joined.last().unwrap().id)).await;
    assert_eq!((status, rest.len()), (204, 0), "cut after {k}: a rejoin at the final event");
}

async fn a_turn_cut_after_any_event_and_rejoined_elsewhere_is_whole<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let reference = s.whole_turn(&s.a, "reference").await;
    assert_eq!(completed(&reference).0, Status::Interrupted, "{reference:#?}");
    assert!(reference.len() >= 15, "a turn with many events: {}", reference.len());
    for k in 1..=reference.len() {
        let episode = format!("e{k}");
        s.script_turn();
        let response =
            post(&s.a, json!({"message": "clip o-1; when do points post?", "episode_id": episode})).await;
        let joined = cut_and_rejoin(&s.b, &episode, sse(response), k).await;
        assert_eq!(completed(&joined).0, Status::Interrupted);
        assert_whole(&s.b, &episode, &joined, &reference, k).await;
    }
    assert_eq!(s.tools.runs("clip"), 0, "no clip ran without approval");
    assert_eq!(s.tools.runs("look"), reference.len() + 1, "one look per turn");
}

async fn a_resume_cut_after_any_event_and_rejoined_elsewhere_is_whole<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let paused = s.whole_turn(&s.a, "reference").await;
    s.script_resume();
    let approve = |episode: &str, id: &str| json!({"episode_id": episode, "resume": [{"interrupt_id": id, "decision": "approve"}]});
    let reference = collect(sse(post(&s.b, approve("reference", &completed(&paused).1[0])).await)).await;
    assert_eq!(completed(&reference).0, Status::Ok, "{reference:#?}");
    for k in 1..=reference.len() {
        let episode = format!("e{k}");
        let paused = s.whole_turn(&s.b, &episode).await;
        s.script_resume();
        let response = post(&s.a, approve(&episode, &completed(&paused).1[0])).await;
        let joined = cut_and_rejoin(&s.b, &episode, sse(response), k).await;
        assert_eq!(completed(&joined).0, Status::Ok);
        assert_whole(&s.b, &episode, &joined, &reference, k).await;
    }
    assert_eq!(s.tools.runs("clip"), reference.len() + 1, "each approved clip ran once");
}
