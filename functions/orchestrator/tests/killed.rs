//! A producer killed mid-turn (SIGKILL, no chance to clean up): `orchestrator serve` on an
//! embedded store file streams a slow turn and is killed; the file, opened again by another
//! server, holds the turn's log up to its last batch, and once the turn's deadline has passed the
//! turn reads as `abandoned`, not as running forever.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::embedded::EmbeddedStore;
use baton::store::{EpisodeKey, ManualClock, Store, TurnStatus};
use baton_tests::{ORCH, SHOP, start_endpoint_with};
use futures::StreamExt;
use tokio::io::AsyncBufReadExt;

const WORDS: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_producer_leaves_a_log_that_replays_and_ends_abandoned() {
    let server = ScriptedServer::start().await.unwrap();
    let answer: String = (0..WORDS).map(|i| format!("word{i} ")).collect();
    server.push(ORCH, Reply::text(answer.trim_end()).chunk_delay(Duration::from_millis(50)));
    server.set_default(SHOP, Reply::text("unused"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    for var in ["OPENAI_API_KEY", "FORETHOUGHT_API_TOKEN", "FORETHOUGHT_BASE_URL", "BATON_TABLE"] {
        command.env_remove(var);
    }
    command
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("BATON_STORE_PATH", &path)
        .env("OPENAI_BASE_URL", server.base_url())
        .env("BATON_ORCHESTRATOR_MODEL", ORCH)
        .env("BATON_SHOPPING_MODEL", SHOP)
        .env("BATON_MAX_RETRIES", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).await.unwrap();
    let url = line.trim().strip_prefix("listening on ").expect("serve prints its address").to_owned();

    let response = reqwest::Client::new()
        .post(format!("{url}/chat"))
        .json(&serde_json::json!({"message": "tell me a long story", "episode_id": "e1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = Box::pin(eventsource_stream::Eventsource::eventsource(response.bytes_stream()));
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let e = stream.next().await.unwrap().unwrap();
        seen.push((e.id, e.event, e.data));
    }
    let turn_id = seen[0].0.rsplit_once(':').unwrap().0.to_owned();
    // Long enough for these events' batch to be written and flushed, far from the turn's end.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();
    drop(stream);

    // Another server on the same file, an hour later: past the turn's deadline.
    let clock = Arc::new(ManualClock::new(SystemTime::now() + Duration::from_secs(3600)));
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path, clock).unwrap());
    let key = EpisodeKey::new("local", "e1").unwrap();
    let record = store.turn_record(&key, &turn_id).await.unwrap().expect("the turn's record survived");
    assert_eq!(record.status, TurnStatus::Running, "nobody ended it");
    assert_eq!(record.effective_status(store.clock().now_ms()), TurnStatus::Ended("abandoned".into()));
    assert!(
        record.last_seq >= 10,
        "the log reaches at least what the client had 1.5 s before: {}",
        record.last_seq
    );
    assert!(record.last_seq < (WORDS + 3) as u64, "the turn was killed before its end");

    let deployment = baton_tests::scripted_config(&server);
    let endpoint = start_endpoint_with(&deployment, store.clone()).await;
    let replay = reqwest::Client::new()
        .get(format!("{}/chat/e1/turns/{turn_id}/events", endpoint.url))
        .header(baton::http::USER_HEADER, "local")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    let replay: Vec<_> = tokio::time::timeout(
        Duration::from_secs(30),
        eventsource_stream::Eventsource::eventsource(replay.bytes_stream())
            .map(|e| e.unwrap())
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the replay of an abandoned turn ends");
    let (last, logged) = replay.split_last().unwrap();
    assert_eq!(logged.len() as u64, record.last_seq, "every logged event, once");
    for (i, (got, sent)) in logged.iter().zip(&seen).enumerate() {
        assert_eq!((&got.id, &got.event, &got.data), (&sent.0, &sent.1, &sent.2), "event {}", i + 1);
    }
    let end = baton::event::decode_sse(&last.event, &last.data).unwrap();
    assert!(matches!(end, Event::Completed { status: Status::Abandoned, .. }), "{end:?}");
    // It cannot be stopped any more.
    let cancel = reqwest::Client::new()
        .post(format!("{}/chat/e1/turns/{turn_id}/cancel", endpoint.url))
        .header(baton::http::USER_HEADER, "local")
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 409);
}
