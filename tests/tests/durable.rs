//! Durable turns through the real endpoint (`serve`'s code on loopback sockets, the scripted model
//! server over HTTP), against both stores: ids `<turn_id>:<seq>`, a stream rejoined after any id
//! on the same instance (from memory) or another one (from the store's log), a turn that runs on
//! after its client leaves, a stop from any instance, and the bad ids and faults around them.
//!
//! "Two instances" are two chat services over one store, each with its own turns in memory:
//! what two Lambda instances share is the store alone.

use std::time::Duration;

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{EpisodeKey, Store, TurnStatus};
use baton_tests::stores::{StoreHarness, test_clock};
use baton_tests::{
    Endpoint, Received, SOLO, TwoInstances, scripted_runtime_config, start_endpoint_with, wait_until,
};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    ids_name_the_turn_and_count_from_one_without_gaps,
    a_finished_turn_replays_after_any_id_exactly_once,
    a_client_that_leaves_rejoins_the_running_turn_on_the_same_instance,
    another_instance_follows_the_running_turn_from_the_store,
    a_stop_on_either_instance_ends_the_turn_cancelled_and_keeps_the_partial_reply,
    on_disconnect_cancel_stops_the_turn_and_a_replay_ends_partial,
    bad_last_event_ids_are_400s_and_other_users_turns_404s,
    an_event_too_big_for_the_log_is_replayed_as_missing,
    a_streaming_turn_is_logged_in_batches_not_per_event,
    a_retried_request_joins_its_running_turn_instead_of_running_it_twice,
    a_request_retried_on_another_instance_joins_its_running_turn,
);

async fn a_streaming_turn_is_logged_in_batches_not_per_event<H: StoreHarness>() {
    let harness = H::start(test_clock()).await;
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_runtime_config(&server).with_yaml(SOLO, "solo.yaml").unwrap();
    let store = baton_tests::counting::CountingStore::new(harness.store());
    let endpoint = start_endpoint_with(&config.into(), store.clone()).await;
    server.push("solo", slow_answer());
    let started = std::time::Instant::now();
    let request = reqwest::Client::new()
        .post(&endpoint.url)
        .json(&json!({"message": "when do my points post?", "episode_id": "e1"}));
    let events: Vec<Received> = sse(request.send().await.unwrap()).collect().await;
    let took = started.elapsed();
    // Appends while it streams, and the final write (the last events and the end at once).
    let appends = store.calls_of("append_turn_events") + store.calls_of("finish_turn_log");
    // At most one append per 250 ms of streaming, plus the final one (and one for a first event
    // that arrives before the first 250 ms pass).
    let most = (took.as_millis() / 250) as u64 + 2;
    assert!(appends <= most, "{appends} appends in {took:?}: {:?}", store.calls());
    assert!(
        appends >= 2 && appends < events.len() as u64 / 2,
        "batched: {appends} appends for {} events",
        events.len()
    );
    assert_eq!(store.calls_of("start_turn_log"), 1);
    assert_eq!(store.calls_of("finish_turn_log"), 1, "one final write");
    assert_eq!(store.calls_of("end_turn_log"), 0, "the end is in the final write");
    assert_eq!(store.calls_of("record_turn_gap"), 0);
    let logged: usize = store.appends().iter().map(|a| a.events).sum();
    assert_eq!(logged, events.len(), "every event logged once");
}

async fn a_retried_request_joins_its_running_turn_instead_of_running_it_twice<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", slow_answer());
    let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({"request_id": "r1"})).await;
    let mut seen = vec![first];
    while text(&seen).is_empty() {
        seen.push(rest.next().await.unwrap());
    }
    drop(rest); // the client lost the stream, and sends its request again
    let (again, first, rest) = s.start_turn(&s.a, "alice", json!({"request_id": "r1"})).await;
    assert_eq!(again, turn, "the same turn");
    let mut replay = vec![first];
    replay.extend(tokio::time::timeout(BOUND, rest.collect::<Vec<_>>()).await.unwrap());
    assert_eq!(text(&replay), ANSWER, "the whole answer once, from the first event");
    assert_eq!(completed(&replay), Status::Ok);
    assert_eq!(s.server.requests_for("solo").len(), 1, "one run: the model was asked once");
    wait_until("the reply is recorded", || async {
        s.reply_status("alice", &turn).await == Some(Status::Ok)
    })
    .await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let stored = s.store().recent_messages(&key, 100).await.unwrap();
    let users = stored.iter().filter(|m| m.role == baton::store::Role::User).count();
    assert_eq!(users, 1, "the user message once");
    // Once the turn has ended, the same request id still gets that turn, from its log: the
    // receipt of a request is its turn, on whichever instance the retry lands.
    for endpoint in [&s.a, &s.b] {
        let (again, first, rest) = s.start_turn(endpoint, "alice", json!({"request_id": "r1"})).await;
        let mut replay = vec![first];
        replay.extend(tokio::time::timeout(BOUND, rest.collect::<Vec<_>>()).await.unwrap());
        assert_eq!(again, turn);
        assert_eq!(text(&replay), ANSWER);
    }
    assert_eq!(s.server.requests_for("solo").len(), 1, "still one run");
}

async fn a_request_retried_on_another_instance_joins_its_running_turn<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", slow_answer());
    let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({"request_id": "r1"})).await;
    let mut seen = vec![first];
    while text(&seen).is_empty() {
        seen.push(rest.next().await.unwrap());
    }
    drop(rest); // the client lost the stream; its retry lands on instance B
    let (again, first, rest) = s.start_turn(&s.b, "alice", json!({"request_id": "r1"})).await;
    assert_eq!(again, turn, "the same turn, as its receipt");
    let mut joined = vec![first];
    joined.extend(tokio::time::timeout(BOUND, rest.collect::<Vec<_>>()).await.unwrap());
    assert_eq!(text(&joined), ANSWER, "the whole answer once, from the first event");
    assert_eq!(completed(&joined), Status::Ok);
    assert_eq!(s.server.requests_for("solo").len(), 1, "one run: the model was asked once");
}

/// The store black-holed mid-turn, behind the fault proxy (DynamoDB on moto; the store's client on
/// production's timeouts, shortened): the client's stream is whole, and a replay afterwards has
/// every event it streamed or says which are missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_while_logging_leaves_the_stream_whole() {
    use baton_tests::fault_proxy::Fault;
    use baton_tests::stores::Moto;
    let timeouts = baton_aws::dynamodb::StoreTimeouts {
        connect: Duration::from_millis(300),
        attempt: Duration::from_millis(300),
        operation: Duration::from_millis(700),
        max_attempts: 2,
        initial_backoff: Duration::from_millis(20),
    };
    let moto = Moto::start_behind_proxy_with(test_clock(), timeouts).await;
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_runtime_config(&server).with_yaml(SOLO, "solo.yaml").unwrap();
    let a = start_endpoint_with(&config.clone().into(), moto.store()).await;
    let b = start_endpoint_with(&config.into(), moto.store()).await;
    server.push("solo", slow_answer());
    let request = reqwest::Client::new()
        .post(&a.url)
        .header(baton::http::USER_HEADER, "alice")
        .json(&json!({"message": "when do my points post?", "episode_id": "e1"}));
    let mut stream: Events = Box::pin(sse(request.send().await.unwrap()));
    let mut live = Vec::new();
    while live.len() < 5 {
        live.push(stream.next().await.unwrap());
    }
    moto.proxy().set(Fault::BlackHole);
    let until = tokio::time::Instant::now() + Duration::from_millis(1200);
    while tokio::time::Instant::now() < until {
        match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(event)) => live.push(event),
            Ok(None) => break,
            Err(_) => {}
        }
    }
    moto.proxy().set(Fault::Pass);
    live.extend(tokio::time::timeout(BOUND, stream.collect::<Vec<_>>()).await.expect("the stream ends"));
    assert_eq!(text(&live), ANSWER, "the client has every word");
    let ids: Vec<u64> = live.iter().map(|r| seq(&r.id)).collect();
    assert_eq!(ids, (1..=live.len() as u64).collect::<Vec<_>>());
    assert!(matches!(live.last().unwrap().event, Event::Completed { .. }));

    let Event::Thinking { turn_id, .. } = &live[0].event else { panic!() };
    let (_, replay) = get(&b, "alice", &format!("/chat/e1/turns/{turn_id}/events"), None).await;
    let replay = replay.unwrap();
    let mut next = 1u64;
    for r in &replay {
        match &r.event {
            Event::Error { code, .. } if code == "events_missing" => next = seq(&r.id) + 1,
            event => {
                assert_eq!(seq(&r.id), next, "in order, nothing skipped unsaid: {replay:?}");
                assert_eq!(event, &live[next as usize - 1].event);
                next += 1;
            }
        }
    }
    assert_eq!(next, live.len() as u64 + 1, "the replay reaches the end: {replay:?}");
}

/// Far above any turn here: reaching it means something hung.
const BOUND: Duration = Duration::from_secs(30);

/// The answer of a turn: a text event per word. A slow turn streams one every 100 ms (~2 s).
const ANSWER: &str = "Points post within a day of the receipt scan, and late receipts take up to a week to be reviewed by a person.";

fn slow_answer() -> baton::model::scripted::StreamReply {
    Reply::text(ANSWER).chunk_delay(Duration::from_millis(100))
}

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

    fn store(&self) -> std::sync::Arc<dyn Store> {
        self.harness.store()
    }

    /// Starts a turn as `user` in episode `e1` on `endpoint`: its turn id (from the first
    /// event) and the rest of its stream.
    async fn start_turn(&self, endpoint: &Endpoint, user: &str, extra: Value) -> (String, Received, Events) {
        let mut body = json!({"message": "when do my points post?", "episode_id": "e1"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let request =
            reqwest::Client::new().post(&endpoint.url).header(baton::http::USER_HEADER, user).json(&body);
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let mut stream: Events = Box::pin(sse(response));
        let first = tokio::time::timeout(BOUND, stream.next()).await.unwrap().expect("a first event");
        let Event::Thinking { episode_id, turn_id } = &first.event else { panic!("{first:?}") };
        assert_eq!(episode_id, "e1");
        assert_eq!(first.id, format!("{turn_id}:1"), "the first event names the turn and is seq 1");
        (turn_id.clone(), first, stream)
    }

    async fn reply_status(&self, user: &str, turn_id: &str) -> Option<Status> {
        let key = EpisodeKey::new(user, "e1").unwrap();
        let stored = self.store().recent_messages(&key, 100).await.unwrap();
        stored
            .iter()
            .rev()
            .find(|m| m.turn_id == turn_id && m.role == baton::store::Role::Assistant)
            .map(|m| m.status)
    }
}

/// `GET {path}` on `endpoint` as `user` with an optional `Last-Event-ID` header: the status, and
/// the events (or the JSON error).
async fn get(
    endpoint: &Endpoint,
    user: &str,
    path: &str,
    last_id: Option<&str>,
) -> (u16, Result<Vec<Received>, Value>) {
    let mut request =
        reqwest::Client::new().get(format!("{}{path}", endpoint.url)).header(baton::http::USER_HEADER, user);
    if let Some(id) = last_id {
        request = request.header("last-event-id", id);
    }
    let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        assert_eq!(response.headers()["content-type"], "application/json");
        return (status, Err(response.json().await.unwrap()));
    }
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events =
        tokio::time::timeout(BOUND, sse(response).collect::<Vec<_>>()).await.expect("the replay ends");
    (status, Ok(events))
}

async fn post(endpoint: &Endpoint, user: &str, path: &str) -> (u16, Value) {
    let request =
        reqwest::Client::new().post(format!("{}{path}", endpoint.url)).header(baton::http::USER_HEADER, user);
    let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// A stream of events as a client receives them.
type Events = std::pin::Pin<Box<dyn futures::Stream<Item = Received> + Send>>;

fn sse(response: reqwest::Response) -> impl futures::Stream<Item = Received> + Send {
    response.bytes_stream().eventsource().map(|e| {
        let e = e.expect("valid SSE framing");
        let event = baton::event::decode_sse(&e.event, &e.data).expect("valid event");
        Received { at: std::time::Instant::now(), id: e.id, event }
    })
}

fn seq(id: &str) -> u64 {
    id.rsplit_once(':').unwrap().1.parse().unwrap()
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

fn completed(events: &[Received]) -> Status {
    match events.last().map(|r| &r.event) {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event is {other:?}"),
    }
}

async fn ids_name_the_turn_and_count_from_one_without_gaps<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", Reply::text(ANSWER));
    let (turn, first, rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let mut events = vec![first];
    events.extend(rest.collect::<Vec<_>>().await);
    let ids: Vec<String> = events.iter().map(|r| r.id.clone()).collect();
    let expected: Vec<String> = (1..=events.len()).map(|n| format!("{turn}:{n}")).collect();
    assert_eq!(ids, expected);
    assert!(events.len() > 12, "a text event per word: {}", events.len());
    assert_eq!(completed(&events), Status::Ok);
}

async fn a_finished_turn_replays_after_any_id_exactly_once<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", Reply::text(ANSWER));
    let (turn, first, rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let mut live = vec![first];
    live.extend(rest.collect::<Vec<_>>().await);
    let n = live.len() as u64;
    let path = format!("/chat/e1/turns/{turn}/events");
    // Either instance: the turn has ended, so both read the store's log.
    for (endpoint, after) in [(&s.a, 0), (&s.b, 0), (&s.b, 1), (&s.a, 9), (&s.b, 10), (&s.a, n - 1)] {
        let last = (after > 0).then(|| format!("{turn}:{after}"));
        let (status, replay) = get(endpoint, "alice", &path, last.as_deref()).await;
        assert_eq!(status, 200);
        let replay = replay.unwrap();
        let ids: Vec<u64> = replay.iter().map(|r| seq(&r.id)).collect();
        assert_eq!(ids, ((after + 1)..=n).collect::<Vec<_>>(), "after {after}");
        let events: Vec<&Event> = replay.iter().map(|r| &r.event).collect();
        let originals: Vec<&Event> = live[after as usize..].iter().map(|r| &r.event).collect();
        assert_eq!(events, originals, "the same events, none twice, after {after}");
    }
    // After the final event there is nothing to send: `204`, on either instance, so an
    // `EventSource` stops instead of reconnecting forever.
    for endpoint in [&s.a, &s.b] {
        let request = reqwest::Client::new()
            .get(format!("{}{path}", endpoint.url))
            .header(baton::http::USER_HEADER, "alice")
            .header("last-event-id", format!("{turn}:{n}"));
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 204);
        assert!(response.bytes().await.unwrap().is_empty());
    }
    // The query parameter (EventSource's first connection), and the episode's latest turn.
    let (_, replay) = get(&s.b, "alice", &format!("{path}?last_event_id={turn}%3A{}", n - 2), None).await;
    assert_eq!(replay.unwrap().len(), 2);
    let (_, replay) = get(&s.b, "alice", "/chat/e1/events", None).await;
    assert_eq!(text(&replay.unwrap()), ANSWER, "the latest turn, from the start");
    let (_, replay) = get(&s.a, "alice", "/chat/e1/events", Some(&format!("{turn}:3"))).await;
    assert_eq!(seq(&replay.unwrap()[0].id), 4, "the turn the id names");
}

async fn a_client_that_leaves_rejoins_the_running_turn_on_the_same_instance<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", slow_answer());
    let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let mut seen = vec![first];
    while seen.len() < 5 {
        seen.push(rest.next().await.unwrap());
    }
    drop(rest); // the connection drops mid-turn
    let last = seen.last().unwrap().id.clone();
    let (status, replay) = get(&s.a, "alice", &format!("/chat/e1/turns/{turn}/events"), Some(&last)).await;
    assert_eq!(status, 200);
    let replay = replay.unwrap();
    assert_eq!(seq(&replay[0].id), seq(&last) + 1, "no event twice, none skipped");
    seen.extend(replay);
    assert_eq!(text(&seen), ANSWER, "the whole answer once");
    assert_eq!(completed(&seen), Status::Ok, "the turn ran on: on_disconnect continue is the default");
    wait_until("the reply is recorded ok", || async {
        s.reply_status("alice", &turn).await == Some(Status::Ok)
    })
    .await;
}

async fn another_instance_follows_the_running_turn_from_the_store<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", slow_answer());
    let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let mut seen = vec![first];
    while seen.len() < 4 {
        seen.push(rest.next().await.unwrap());
    }
    drop(rest);
    // The reconnect lands on instance B, which does not run the turn: it replays the log, then
    // polls it until `completed`.
    let last = seen.last().unwrap().id.clone();
    let (status, replay) = get(&s.b, "alice", "/chat/e1/events", Some(&last)).await;
    assert_eq!(status, 200);
    let replay = replay.unwrap();
    let ids: Vec<u64> = replay.iter().map(|r| seq(&r.id)).collect();
    assert_eq!(
        ids,
        ((seq(&last) + 1)..=(seq(&last) + ids.len() as u64)).collect::<Vec<_>>(),
        "in order, no gap"
    );
    seen.extend(replay);
    assert_eq!(text(&seen), ANSWER);
    assert_eq!(completed(&seen), Status::Ok);
    let record =
        s.store().turn_record(&EpisodeKey::new("alice", "e1").unwrap(), &turn).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Ended("ok".into()));
    assert_eq!(record.last_seq, seen.len() as u64);
    assert!(record.gaps.is_empty());
}

async fn a_stop_on_either_instance_ends_the_turn_cancelled_and_keeps_the_partial_reply<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    for (stopper, name) in [(&s.a, "the same instance"), (&s.b, "another instance")] {
        s.server.push("solo", slow_answer());
        let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({})).await;
        let mut seen = vec![first];
        while text(&seen).is_empty() {
            seen.push(rest.next().await.unwrap());
        }
        let cancel = format!("/chat/e1/turns/{turn}/cancel");
        assert_eq!(post(stopper, "mallory", &cancel).await.0, 404, "{name}: not mallory's turn");
        let (status, body) = post(stopper, "alice", &cancel).await;
        assert_eq!(status, 202, "{name}: {body}");
        assert_eq!(body["cancel"], "requested");
        seen.extend(tokio::time::timeout(BOUND, rest.collect::<Vec<_>>()).await.unwrap());
        let (status, body) = post(stopper, "alice", &cancel).await;
        assert_eq!((status, &body["cancel"]), (202, &json!("done")), "{name}: asking again is no error");
        assert_eq!(completed(&seen), Status::Cancelled, "{name}");
        assert!(text(&seen).len() < ANSWER.len(), "{name}: stopped before the end");
        wait_until("the partial reply is recorded", || async {
            s.reply_status("alice", &turn).await == Some(Status::Cancelled)
        })
        .await;
        let (_, replay) = get(&s.b, "alice", &format!("/chat/e1/turns/{turn}/events"), None).await;
        assert_eq!(completed(&replay.unwrap()), Status::Cancelled, "{name}: the log ends as the stream did");
    }
    assert_eq!(post(&s.a, "alice", "/chat/e1/turns/no-such-turn/cancel").await.0, 404);
    // A turn that ended otherwise cannot be stopped.
    s.server.push("solo", Reply::text(ANSWER));
    let (turn, _, rest) = s.start_turn(&s.a, "alice", json!({})).await;
    rest.collect::<Vec<_>>().await;
    for endpoint in [&s.a, &s.b] {
        let (status, body) = post(endpoint, "alice", &format!("/chat/e1/turns/{turn}/cancel")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("turn_ended")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("status ok"), "{body}");
    }
}

async fn on_disconnect_cancel_stops_the_turn_and_a_replay_ends_partial<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", slow_answer());
    let (turn, first, mut rest) = s.start_turn(&s.a, "alice", json!({"on_disconnect": "cancel"})).await;
    let mut seen = vec![first];
    while text(&seen).is_empty() {
        seen.push(rest.next().await.unwrap());
    }
    drop(rest);
    wait_until("the partial reply is recorded", || async {
        s.reply_status("alice", &turn).await == Some(Status::Partial)
    })
    .await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let store = s.store();
    wait_until("the log ends", || async {
        store.turn_record(&key, &turn).await.unwrap().unwrap().status == TurnStatus::Ended("partial".into())
    })
    .await;
    let (_, replay) = get(&s.b, "alice", &format!("/chat/e1/turns/{turn}/events"), None).await;
    let replay = replay.unwrap();
    let last = replay.last().unwrap();
    assert_eq!(completed(&replay), Status::Partial, "a made-up end for a log without one");
    // No id line of its own (it is not in the log): by the SSE rules the client's last event id
    // stays the one before.
    assert_eq!(last.id, replay[replay.len() - 2].id);
    assert!(text(&replay).len() < ANSWER.len());
    // The request's field is checked.
    let bad = json!({"message": "hi", "on_disconnect": "later"});
    let response = reqwest::Client::new().post(&s.a.url).json(&bad).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_on_disconnect");
}

async fn bad_last_event_ids_are_400s_and_other_users_turns_404s<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push("solo", Reply::text(ANSWER));
    let (turn, _, rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let n = 1 + rest.collect::<Vec<_>>().await.len();
    let path = format!("/chat/e1/turns/{turn}/events");
    for bad in [
        "3".to_owned(),
        format!("{turn}:x"),
        format!("{turn}:-1"),
        format!("{turn}:0"),
        "other-turn:2".to_owned(),
        format!("{turn}:{}", n + 1),
    ] {
        for endpoint in [&s.a, &s.b] {
            let (status, body) = get(endpoint, "alice", &path, Some(&bad)).await;
            assert_eq!(status, 400, "{bad}");
            assert_eq!(body.unwrap_err()["error"]["code"], "invalid_last_event_id", "{bad}");
        }
    }
    for (user, path) in [
        ("mallory", path.as_str()),
        ("mallory", "/chat/e1/events"),
        ("alice", "/chat/e1/turns/no-such-turn/events"),
        ("alice", "/chat/e2/events"),
    ] {
        let (status, body) = get(&s.b, user, path, None).await;
        assert_eq!(status, 404, "{user} {path}");
        assert_eq!(body.unwrap_err()["error"]["code"], "not_found");
    }
}

async fn an_event_too_big_for_the_log_is_replayed_as_missing<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    // One text event larger than a log item holds (350 KB): the client gets it, the log
    // records a gap, and a replay says so in its place.
    let big = "x".repeat(400_000);
    s.server.push(
        "solo",
        Reply::parts(vec![
            baton::model::scripted::Part::Text(big.clone()),
            baton::model::scripted::Part::Text(" and the rest".into()),
        ]),
    );
    let (turn, first, rest) = s.start_turn(&s.a, "alice", json!({})).await;
    let mut live = vec![first];
    live.extend(rest.collect::<Vec<_>>().await);
    assert!(text(&live).starts_with(&big), "the client has every event");
    let (_, replay) = get(&s.b, "alice", &format!("/chat/e1/turns/{turn}/events"), None).await;
    let replay = replay.unwrap();
    let missing: Vec<&Received> = replay
        .iter()
        .filter(
            |r| matches!(&r.event, Event::Error { code, retryable: false, .. } if code == "events_missing"),
        )
        .collect();
    assert_eq!(missing.len(), 1, "{replay:?}");
    let big_seq =
        live.iter().find(|r| matches!(&r.event, Event::Text { text, .. } if text.len() > 300_000)).unwrap();
    assert_eq!(missing[0].id, big_seq.id, "in its place, with its id");
    assert_eq!(replay.len(), live.len(), "everything else is replayed");
    assert_eq!(completed(&replay), completed(&live));
}
