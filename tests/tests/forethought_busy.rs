//! One request per Forethought conversation: calls on one episode hold its conversation (a
//! store lease across processes, a lock in memory), so they queue on the same conversation in
//! order; a wait past `busy_wait` is `support_busy`; a vendor refusal as busy is retried once.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use baton::agent::{Agent, AgentRequest};
use baton::event::Event;
use baton::store::embedded::EmbeddedStore;
use baton::store::{ManualClock, Store};
use baton_reference::support::agent::ForethoughtAgent;
use baton_reference::support::forethought::ForethoughtClient;
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_reference::support::sessions::StoreSessions;
use baton_reference::support::sessions::{MemorySupportSessions, SupportSessions};
use baton_tests::{forethought_config, text_of};
use futures::StreamExt;

fn request(query: &str) -> AgentRequest {
    AgentRequest { user_id: "u1".into(), episode_id: "ep1".into(), query: query.into(), ..Default::default() }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)))
}

fn agent(
    ft: &ForethoughtServer,
    sessions: Arc<dyn SupportSessions>,
    busy_wait: Duration,
) -> ForethoughtAgent {
    let mut config = forethought_config(ft);
    config.busy_wait = busy_wait;
    ForethoughtAgent::new(ForethoughtClient::new(config).unwrap(), sessions, clock())
}

fn error_code(events: &[Event]) -> Option<&str> {
    events.iter().find_map(|e| match e {
        Event::Error { code, .. } => Some(code.as_str()),
        _ => None,
    })
}

/// Two support calls on one episode at once: the second waits for the first and continues the
/// conversation the first started, so the vendor never sees two requests on one conversation.
async fn two_calls_queue_on_one_conversation(
    first: &ForethoughtAgent,
    second: &ForethoughtAgent,
    ft: &ForethoughtServer,
) {
    ft.push(FtReply::json("first answer").delayed(Duration::from_millis(300)));
    ft.push(FtReply::json("second answer"));
    let (a, b) = tokio::join!(
        first.run(request("where are my points"), "support[1]".into()).collect::<Vec<_>>(),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            second.run(request("and my receipt?"), "support[2]".into()).collect::<Vec<_>>().await
        }
    );
    assert_eq!(
        (text_of(&a, "support[1]"), text_of(&b, "support[2]")),
        ("first answer".into(), "second answer".into())
    );
    let requests = ft.requests();
    let seen: Vec<(&str, Option<&str>, Option<u16>)> =
        requests.iter().map(|q| (q.method.as_str(), q.conversation_id.as_deref(), q.refused)).collect();
    assert_eq!(seen, [("POST", None, None), ("PUT", Some("conv-1"), None)]);
    assert!(requests[1].received_at >= requests[0].received_at + Duration::from_millis(250), "it waited");
}

#[tokio::test]
async fn two_intents_in_one_process_queue_on_one_conversation() {
    let ft = ForethoughtServer::start().await.unwrap();
    let agent = agent(&ft, Arc::new(MemorySupportSessions::default()), Duration::from_secs(5));
    two_calls_queue_on_one_conversation(&agent, &agent, &ft).await;
}

#[tokio::test]
async fn two_processes_over_one_store_queue_on_one_conversation() {
    let ft = ForethoughtServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(baton::store::SystemClock)).unwrap(),
    );
    // Two agents with their own sessions over one store, as two instances would have.
    let one = agent(&ft, Arc::new(StoreSessions::new(store.clone())), Duration::from_secs(5));
    let two = agent(&ft, Arc::new(StoreSessions::new(store)), Duration::from_secs(5));
    two_calls_queue_on_one_conversation(&one, &two, &ft).await;
}

#[tokio::test]
async fn a_wait_past_busy_wait_is_support_busy_and_calls_nothing() {
    let ft = ForethoughtServer::start().await.unwrap();
    let sessions = Arc::new(MemorySupportSessions::default());
    let held = sessions
        .hold_conversation("u1", "ep1", "support", Duration::from_secs(60), Duration::from_secs(1))
        .await
        .unwrap();
    let agent = agent(&ft, sessions.clone(), Duration::from_millis(200));
    let started = tokio::time::Instant::now();
    let events: Vec<Event> = agent.run(request("hello"), "support[1]".into()).collect().await;
    assert!(started.elapsed() < Duration::from_secs(2), "bounded: {:?}", started.elapsed());
    assert_eq!(error_code(&events), Some("support_busy"));
    assert!(matches!(&events[0], Event::Error { retryable: true, .. }), "{events:?}");
    assert!(ft.requests().is_empty(), "nothing was sent while another call held the conversation");
    held.release().await;
    ft.push(FtReply::json("now"));
    let events: Vec<Event> = agent.run(request("hello"), "support[1]".into()).collect().await;
    assert_eq!(text_of(&events, "support[1]"), "now");
}

#[tokio::test]
async fn a_vendor_busy_refusal_is_retried_once() {
    let ft = ForethoughtServer::start().await.unwrap();
    let agent = agent(&ft, Arc::new(MemorySupportSessions::default()), Duration::from_secs(5));
    ft.push(FtReply::status(409, "conversation busy")).push(FtReply::json("after the retry"));
    let events: Vec<Event> = agent.run(request("q"), "support[1]".into()).collect().await;
    assert_eq!(text_of(&events, "support[1]"), "after the retry");
    assert_eq!(error_code(&events), None);
    assert_eq!(ft.requests().len(), 2);

    ft.push(FtReply::status(409, "busy")).push(FtReply::status(409, "still busy"));
    let events: Vec<Event> = agent.run(request("q2"), "support[1]".into()).collect().await;
    assert_eq!(error_code(&events), Some("support_conversation_busy"), "only once: {events:?}");
    assert_eq!(ft.requests().len(), 4);
}
