//! A message sent while its episode's turn runs (`on_busy`), through the real endpoint, the
//! running turn on instance A and the new message on instance B (one store, as two Lambda
//! instances share it), against both stores: `reject` names the running turn, `enqueue` runs
//! after it and sees it, a full queue is a 429, `interrupt` stops it and keeps its partial,
//! `parallel` runs beside it, and bad values are 400s.

use std::time::Duration;

use baton::event::{Event, Status};
use baton::model::scripted::Reply;
use baton::store::{EpisodeKey, Role};
use baton_tests::stores::StoreHarness;
use baton_tests::{Endpoint, Received, TwoInstances};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    a_rejected_message_names_the_running_turn_to_rejoin,
    an_enqueued_message_runs_after_the_running_turn_and_sees_it,
    a_full_queue_is_a_429_with_retry_after,
    an_interrupting_message_stops_the_running_turn_and_keeps_its_partial_once,
    a_parallel_message_runs_beside_the_running_turn,
    another_users_conversation_is_never_busy_with_this_one,
    each_protocol_carries_its_on_busy,
);

const BOUND: Duration = Duration::from_secs(30);

/// A slow first answer: a word every 100 ms (~1.5 s).
const SLOW: &str = "Coffee deals this week are at the corner store and at the market downtown.";

/// Instance A and instance B: one store, separate processes' memory.
struct Setup<H>(TwoInstances<H>);

impl<H> std::ops::Deref for Setup<H> {
    type Target = TwoInstances<H>;
    fn deref(&self) -> &TwoInstances<H> {
        &self.0
    }
}

impl<H: StoreHarness> Setup<H> {
    async fn start() -> Setup<H> {
        Setup(TwoInstances::start().await)
    }

    /// Starts the slow turn on A as `alice` in `e1`: its id and its stream, the first event read.
    async fn start_slow(&self) -> (String, Events) {
        self.server.push("solo", Reply::text(SLOW).chunk_delay(Duration::from_millis(100)));
        let response = send(&self.a, "alice", json!({"message": "coffee deals", "episode_id": "e1"})).await;
        assert_eq!(response.status(), 200);
        let mut stream = sse(response);
        let first = tokio::time::timeout(BOUND, stream.next()).await.unwrap().unwrap();
        let Event::Thinking { turn_id, .. } = first.event else { panic!("{first:?}") };
        // The turn has started streaming its answer.
        loop {
            let next = tokio::time::timeout(BOUND, stream.next()).await.unwrap().unwrap();
            if matches!(next.event, Event::Text { .. }) {
                break;
            }
        }
        (turn_id, stream)
    }
}

type Events = std::pin::Pin<Box<dyn futures::Stream<Item = Received> + Send>>;

async fn send(endpoint: &Endpoint, user: &str, body: Value) -> reqwest::Response {
    let request =
        reqwest::Client::new().post(&endpoint.url).header(baton::http::USER_HEADER, user).json(&body);
    tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap()
}

fn sse(response: reqwest::Response) -> Events {
    Box::pin(response.bytes_stream().eventsource().map(|e| {
        let e = e.expect("valid SSE framing");
        let event = baton::event::decode_sse(&e.event, &e.data).expect("valid event");
        Received { at: std::time::Instant::now(), id: e.id, event }
    }))
}

async fn rest(stream: Events) -> Vec<Received> {
    tokio::time::timeout(BOUND, stream.collect::<Vec<_>>()).await.expect("the stream ends")
}

fn status(events: &[Received]) -> Status {
    match events.last().map(|r| &r.event) {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event is {other:?}"),
    }
}

fn text(events: &[Received]) -> String {
    events
        .iter()
        .filter_map(|r| match &r.event {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

async fn error(response: reqwest::Response) -> (u16, Option<String>, Value) {
    let code = response.status().as_u16();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (code, retry, response.json().await.unwrap())
}

async fn a_rejected_message_names_the_running_turn_to_rejoin<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (running, first) = s.start_slow().await;
    let body = json!({"message": "actually, tea instead", "episode_id": "e1", "on_busy": "reject"});
    let (code, _, error) = error(send(&s.b, "alice", body).await).await;
    assert_eq!((code, error["error"]["code"].as_str()), (409, Some("turn_in_progress")), "{error}");
    assert_eq!(error["error"]["turn_id"], running.as_str(), "the running turn, to rejoin");
    // The client rejoins it on B from the start, and reads the whole answer.
    let url = format!("{}/chat/e1/turns/{running}/events", s.b.url);
    let request = reqwest::Client::new().get(url).header(baton::http::USER_HEADER, "alice");
    let rejoined = rest(sse(request.send().await.unwrap())).await;
    assert_eq!(text(&rejoined), SLOW);
    drop(first);
    assert_eq!(s.server.requests_for("solo").len(), 1, "the rejected message was never run");
}

async fn an_enqueued_message_runs_after_the_running_turn_and_sees_it<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (running, first) = s.start_slow().await;
    s.server.push("solo", Reply::text("Tea deals, then."));
    // No `on_busy`: the default, enqueue. Its answer starts once the first turn has ended.
    let second = send(&s.b, "alice", json!({"message": "actually, tea instead", "episode_id": "e1"})).await;
    assert_eq!(second.status(), 200);
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let record = s.harness.store().turn_record(&key, &running).await.unwrap().unwrap();
    let now = s.harness.store().clock().now_ms();
    assert!(
        matches!(record.effective_status(now), baton::store::TurnStatus::Ended(_)),
        "the second turn started after the first ended"
    );
    let (first, second) = futures::join!(rest(first), rest(sse(second)));
    assert_eq!((status(&first), status(&second)), (Status::Ok, Status::Ok));
    assert_eq!(text(&second), "Tea deals, then.");
    let asked = s.server.requests_for("solo");
    assert_eq!(asked.len(), 2);
    let seen = asked[1].body["messages"].to_string();
    assert!(seen.contains("coffee deals") && seen.contains("Coffee deals this week"), "{seen}");
}

async fn a_full_queue_is_a_429_with_retry_after<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (_, first) = s.start_slow().await;
    let queued: Vec<_> = (0..baton::turn::DEFAULT_QUEUE_LIMIT)
        .map(|i| {
            s.server.push("solo", Reply::text("Later."));
            let (url, body) = (s.b.url.clone(), json!({"message": format!("and {i}"), "episode_id": "e1"}));
            tokio::spawn(async move {
                let request =
                    reqwest::Client::new().post(url).header(baton::http::USER_HEADER, "alice").json(&body);
                request.send().await.unwrap().status().as_u16()
            })
        })
        .collect();
    baton_tests::wait_until("the queue fills", || async {
        let key = EpisodeKey::new("alice", "e1").unwrap();
        let store = s.harness.store();
        let mut taken = 0;
        for slot in 0..baton::turn::DEFAULT_QUEUE_LIMIT {
            let name = format!("{}-queue-{slot}", baton::turn::BUSY_LEASE);
            // Asking for a held place is refused, and changes nothing.
            if let baton::store::LeaseGrant::Held { .. } =
                store.take_lease(&key, &name, "probe", Duration::from_millis(1)).await.unwrap()
            {
                taken += 1;
            } else {
                store.release_lease(&key, &name, "probe").await.unwrap();
            }
        }
        taken == baton::turn::DEFAULT_QUEUE_LIMIT
    })
    .await;
    let (code, retry, error) =
        error(send(&s.a, "alice", json!({"message": "one more", "episode_id": "e1"})).await).await;
    assert_eq!((code, error["error"]["code"].as_str()), (429, Some("queue_full")), "{error}");
    assert!(retry.is_some_and(|r| r.parse::<u64>().unwrap() >= 1), "Retry-After in seconds");
    assert_eq!(status(&rest(first).await), Status::Ok);
    for queued in queued {
        assert_eq!(queued.await.unwrap(), 200, "each queued message ran");
    }
}

async fn an_interrupting_message_stops_the_running_turn_and_keeps_its_partial_once<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (running, first) = s.start_slow().await;
    s.server.push("solo", Reply::text("Tea deals, then."));
    let body = json!({"message": "actually, tea instead", "episode_id": "e1", "on_busy": "interrupt"});
    let second = send(&s.b, "alice", body).await;
    assert_eq!(second.status(), 200);
    let (first, second) = futures::join!(rest(first), rest(sse(second)));
    assert_eq!(status(&first), Status::Cancelled, "the running turn was stopped");
    assert!(text(&first).len() < SLOW.len(), "stopped before its end");
    assert_eq!(status(&second), Status::Ok);
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let stored = s.harness.store().recent_messages(&key, 100).await.unwrap();
    let partials: Vec<_> =
        stored.iter().filter(|m| m.turn_id == running && m.role == Role::Assistant).collect();
    assert_eq!(partials.len(), 1, "the partial is stored once: {stored:#?}");
    assert_eq!(partials[0].status, Status::Cancelled);
    let seen = s.server.requests_for("solo")[1].body["messages"].to_string();
    assert!(seen.contains("coffee deals"), "the new message's model sees the stopped turn: {seen}");
}

async fn a_parallel_message_runs_beside_the_running_turn<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (_, first) = s.start_slow().await;
    s.server.push("solo", Reply::text("Tea deals, then."));
    let body = json!({"message": "and tea?", "episode_id": "e1", "on_busy": "parallel"});
    let second = rest(sse(send(&s.b, "alice", body).await)).await;
    let first = rest(first).await;
    assert_eq!((status(&first), status(&second)), (Status::Ok, Status::Ok));
    assert!(second.last().unwrap().at < first.last().unwrap().at, "the second ended while the first ran");
}

async fn another_users_conversation_is_never_busy_with_this_one<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (_, first) = s.start_slow().await;
    s.server.push("solo", Reply::text("Hello."));
    let body = json!({"message": "hi", "episode_id": "e1", "on_busy": "reject"});
    let other = send(&s.b, "bob", body).await;
    assert_eq!(other.status(), 200, "bob's e1 is his own conversation");
    assert_eq!(status(&rest(sse(other)).await), Status::Ok);
    // And a bad policy is a 400 that names the allowed ones, before anything runs.
    let bad = json!({"message": "hi", "episode_id": "e2", "on_busy": "later"});
    let (code, _, error) = error(send(&s.b, "alice", bad).await).await;
    assert_eq!((code, error["error"]["code"].as_str()), (400, Some("invalid_on_busy")), "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(["reject", "enqueue", "interrupt", "parallel"].iter().all(|p| message.contains(p)), "{message}");
    drop(first);
}

/// AG-UI (`forwardedProps.on_busy`), the AI SDK (`on_busy` in the transport's extra body) and
/// A2A (`on_busy` in the message's or the request's metadata) map onto the same policy.
async fn each_protocol_carries_its_on_busy<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (running, first) = s.start_slow().await;
    let post = |path: &str, body: Value| {
        let request = reqwest::Client::new()
            .post(format!("{}{path}", s.b.url.trim_end_matches('/')))
            .header(baton::http::USER_HEADER, "alice")
            .header("A2A-Version", "1.0")
            .json(&body);
        async move { tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap() }
    };
    let agui = json!({
        "threadId": "e1", "runId": "r2", "state": {}, "context": [], "tools": [],
        "messages": [{"id": "m2", "role": "user", "content": "actually, tea instead"}],
        "forwardedProps": {"on_busy": "reject"}
    });
    let (code, _, answer) = error(post("/agui", agui).await).await;
    assert_eq!((code, answer["error"]["code"].as_str()), (409, Some("turn_in_progress")), "{answer}");
    assert_eq!(answer["error"]["turn_id"], running.as_str(), "AG-UI: {answer}");

    let ai_sdk = json!({
        "id": "e1", "trigger": "submit-message", "on_busy": "reject",
        "messages": [{"id": "m3", "role": "user", "parts": [{"type": "text", "text": "actually, tea instead"}]}]
    });
    let (code, _, answer) = error(post("/ai-sdk", ai_sdk).await).await;
    assert_eq!((code, answer["error"]["code"].as_str()), (409, Some("turn_in_progress")), "{answer}");
    assert_eq!(answer["error"]["turn_id"], running.as_str(), "AI SDK: {answer}");

    for metadata in
        [json!({"message": {"metadata": {"on_busy": "reject"}}}), json!({"metadata": {"on_busy": "reject"}})]
    {
        let mut message = json!({"messageId": "m4", "role": "ROLE_USER", "contextId": "e1",
                                 "parts": [{"text": "actually, tea instead"}]});
        let mut params = json!({});
        if let Some(m) = metadata.get("message") {
            message["metadata"] = m["metadata"].clone();
        } else {
            params["metadata"] = metadata["metadata"].clone();
        }
        params["message"] = message;
        let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
        let answer: Value = post("/a2a", rpc).await.json().await.unwrap();
        let said = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains(&running) && said.contains("running"), "A2A ({metadata}): {answer}");
    }
    // A bad value is refused as `POST /chat` refuses it.
    let bad = json!({
        "id": "e1", "on_busy": "later",
        "messages": [{"id": "m5", "role": "user", "parts": [{"type": "text", "text": "tea"}]}]
    });
    let (code, _, answer) = error(post("/ai-sdk", bad).await).await;
    assert_eq!((code, answer["error"]["code"].as_str()), (400, Some("invalid_on_busy")), "{answer}");
    drop(first);
    assert_eq!(s.server.requests_for("solo").len(), 1, "no refused message was run");
}
