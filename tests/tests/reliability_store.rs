//! A store that misbehaves on the network, through the real endpoint: DynamoDB on moto_server
//! behind the fault proxy (black-holed, slow, reset), the store's client configured as
//! production configures it ([`StoreTimeouts`], with shorter values so the suite stays quick).
//!
//! Each test asserts that the turn ends (a 503 before the stream, `completed` during it) with a
//! retryable `store_unavailable`, and that nothing already written is lost once the store is
//! back. The outer bound ([`BOUND`]) only turns a hang into a failure; it claims no speed.

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::EpisodeKey;
use baton_aws::dynamodb::StoreTimeouts;
use baton_tests::stores::{Fault, Moto, StoreHarness, test_clock};
use baton_tests::{
    Endpoint, ORCH, open_stream_as, scripted_config, start_endpoint_with, text_of, wait_until,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Far above the store's operation timeout: reaching it means the turn hung.
const BOUND: Duration = Duration::from_secs(30);

/// Production's shape with shorter values: a faulty store costs a test seconds, not minutes.
fn quick_timeouts() -> StoreTimeouts {
    StoreTimeouts {
        connect: Duration::from_secs(1),
        attempt: Duration::from_secs(1),
        operation: Duration::from_secs(3),
        max_attempts: 3,
        initial_backoff: Duration::from_millis(20),
    }
}

struct Setup {
    moto: Moto,
    server: ScriptedServer,
    endpoint: Endpoint,
}

impl Setup {
    async fn start() -> Setup {
        let moto = Moto::start_behind_proxy_with(test_clock(), quick_timeouts()).await;
        let server = ScriptedServer::start().await.unwrap();
        let endpoint = start_endpoint_with(&scripted_config(&server), moto.store()).await;
        Setup { moto, server, endpoint }
    }

    fn fault(&self, fault: Fault) {
        self.moto.proxy().set(fault);
    }

    async fn chat(&self, body: Value) -> Vec<Event> {
        let events = async {
            open_stream_as(&self.endpoint.url, "local", body).await.map(|r| r.event).collect::<Vec<_>>().await
        };
        tokio::time::timeout(BOUND, events).await.expect("the turn ends")
    }

    async fn post_status(&self, body: Value) -> (u16, Value) {
        let request = reqwest::Client::new()
            .post(&self.endpoint.url)
            .header(baton::http::USER_HEADER, "local")
            .json(&body);
        let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    async fn stored(&self) -> Vec<String> {
        let key = EpisodeKey::new("local", "e1").unwrap();
        let store = self.moto.store();
        let read = store.recent_messages(&key, 100);
        let messages = tokio::time::timeout(BOUND, read).await.expect("history reads in time").unwrap();
        messages.into_iter().map(|m| m.content).collect()
    }

    /// One good turn: the history the faults must not lose.
    async fn first_turn(&self) {
        self.server.push(ORCH, Reply::text("Hello!"));
        let events = self.chat(json!({"message": "hi", "episode_id": "e1"})).await;
        assert_eq!(completed(&events), Status::Ok, "{events:?}");
    }
}

fn completed(events: &[Event]) -> Status {
    match events.last() {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event must be completed, got {other:?}"),
    }
}

fn store_unavailable_event(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Error { code, retryable: true, .. } if code == "store_unavailable"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_store_before_the_turn_is_a_retryable_503_and_loses_nothing() {
    let s = Setup::start().await;
    s.first_turn().await;

    s.fault(Fault::BlackHole);
    let started = std::time::Instant::now();
    let (status, body) = s.post_status(json!({"message": "again", "episode_id": "e1"})).await;
    eprintln!("black-holed store: HTTP {status} after {:?}", started.elapsed());
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert_eq!(s.server.requests_for(ORCH).len(), 1, "no model call without a recorded message");

    s.fault(Fault::Pass);
    assert_eq!(s.stored().await, ["hi", "Hello!"]);
    s.server.push(ORCH, Reply::text("Hello again!"));
    let events = s.chat(json!({"message": "hi", "episode_id": "e1"})).await;
    assert_eq!(completed(&events), Status::Ok, "the store serves again once it answers: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_black_holed_during_the_turn_still_reaches_completed_and_loses_nothing() {
    let s = Setup::start().await;
    s.first_turn().await;
    let gate = Arc::new(Semaphore::new(0));
    s.server.push(ORCH, Reply::text("You will not see this saved.").gated(gate.clone()));
    let stream =
        open_stream_as(&s.endpoint.url, "local", json!({"message": "hi again", "episode_id": "e1"})).await;
    wait_until("the model is asked", || async { s.server.requests_for(ORCH).len() == 2 }).await;

    s.fault(Fault::BlackHole);
    gate.add_permits(1);
    let started = std::time::Instant::now();
    let events: Vec<Event> =
        tokio::time::timeout(BOUND, stream.map(|r| r.event).collect()).await.expect("completed is reached");
    eprintln!("store black-holed during the turn: completed after {:?}", started.elapsed());
    assert!(store_unavailable_event(&events), "{events:?}");
    assert_eq!(completed(&events), Status::Error);
    assert_eq!(text_of(&events, "orchestrator"), "You will not see this saved.", "the answer still streams");

    s.fault(Fault::Pass);
    assert_eq!(s.stored().await, ["hi", "Hello!", "hi again"], "what was written before the fault is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_records_the_whole_turn() {
    let s = Setup::start().await;
    s.fault(Fault::Slow(Duration::from_millis(30)));
    s.first_turn().await;
    s.fault(Fault::Pass);
    assert_eq!(s.stored().await, ["hi", "Hello!"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_resets_connections_is_a_retryable_503_and_loses_nothing() {
    let s = Setup::start().await;
    s.first_turn().await;

    s.fault(Fault::Reset);
    let before = s.moto.proxy().connections_accepted();
    let (status, body) = s.post_status(json!({"message": "again", "episode_id": "e1"})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert!(s.moto.proxy().connections_accepted() > before + 1, "the SDK retried on new connections");

    s.fault(Fault::Pass);
    assert_eq!(s.stored().await, ["hi", "Hello!"]);
}
