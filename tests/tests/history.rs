//! What a chat turn leaves in the store, through the real endpoint (SSE over loopback, the
//! OpenAI client, the scripted model server), against both stores: the embedded one and DynamoDB
//! on moto_server. Store outages are staged with a proxy in front of moto, so moto keeps what was
//! written while the endpoint cannot reach it.

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::item::{Attr, Item};
use baton::store::{EpisodeKey, Role, Store, StoredMessage};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::stores::{Moto, StoreHarness, test_clock};
use baton_tests::{ASK_SHOPPING, ASK_SUPPORT};
use baton_tests::{
    Endpoint, ORCH, SHOP, open_stream_as, scripted_config_with_forethought, start_endpoint_with, text_of,
    wait_until, wait_until_both_stream,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

macro_rules! history_tests {
    ($h:ty; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name::<$h>().await;
            }
        )+
    };
}

macro_rules! for_both_stores {
    ($($name:ident),+ $(,)?) => {
        mod embedded {
            history_tests!(baton_tests::stores::Embedded; $($name),+);
        }
        mod dynamodb {
            history_tests!(baton_tests::stores::Moto; $($name),+);
        }
    };
}

for_both_stores!(
    the_user_message_is_stored_before_the_model_is_called,
    a_mixed_turn_stores_support_and_shopping_as_separate_messages_with_usage,
    the_next_turn_sees_the_stored_history,
    a_client_that_hangs_up_leaves_a_partial_reply,
    two_concurrent_turns_on_one_episode_both_persist_in_order,
    a_user_cannot_read_or_write_another_users_episode,
    a_retried_request_id_is_recorded_once_and_answered_again,
    a_corrupt_stored_item_is_a_500_that_names_its_key,
    the_next_turn_continues_the_stored_forethought_conversation,
    a_short_reply_to_a_stored_support_question_goes_to_support,
);

const SUPPORT_TEXT: &str = "Receipts scan best in good light.";
const SHOP_TEXT: &str = "Here are three coffee deals.";

struct Setup<H> {
    harness: H,
    server: ScriptedServer,
    ft: ForethoughtServer,
    endpoint: Endpoint,
}

impl<H: StoreHarness> Setup<H> {
    async fn start() -> Setup<H> {
        Setup::with(H::start(test_clock()).await).await
    }

    async fn with(harness: H) -> Setup<H> {
        let server = ScriptedServer::start().await.unwrap();
        let ft = ForethoughtServer::start().await.unwrap();
        let config = scripted_config_with_forethought(&server, &ft);
        let endpoint = start_endpoint_with(&config, harness.store()).await;
        Setup { harness, server, ft, endpoint }
    }

    fn store(&self) -> Arc<dyn Store> {
        self.harness.store()
    }

    async fn stored(&self, user: &str, episode: &str) -> Vec<StoredMessage> {
        let key = EpisodeKey::new(user, episode).unwrap();
        self.store().recent_messages(&key, 100).await.expect("history reads")
    }

    async fn chat(&self, user: &str, body: Value) -> Vec<Event> {
        open_stream_as(&self.endpoint.url, user, body).await.map(|r| r.event).collect().await
    }

    /// The messages (role, content) the orchestrator model was sent in its `n`th call.
    fn orchestrator_saw(&self, n: usize) -> Vec<(String, String)> {
        self.server.requests_for(ORCH)[n].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or("").to_owned()))
            .collect()
    }
}

fn completed(events: &[Event]) -> (Status, String) {
    match events.last() {
        Some(Event::Completed { status, turn_id, .. }) => (*status, turn_id.clone()),
        other => panic!("the last event must be completed, got {other:?}"),
    }
}

fn summary(messages: &[StoredMessage]) -> Vec<(Role, &str, &str, Status)> {
    messages.iter().map(|m| (m.role, m.agent.as_str(), m.content.as_str(), m.status)).collect()
}

fn mixed_orchestrator_reply() -> Reply {
    Reply::text("Let me check both.")
        .tool_call(ASK_SUPPORT, json!({"query": "my receipt didn't scan", "intent_count": 2}))
        .tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 2}))
        .into()
}

async fn the_user_message_is_stored_before_the_model_is_called<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let gate = Arc::new(Semaphore::new(0));
    s.server.push(ORCH, Reply::text("Hello there!").usage(12, 3).gated(gate.clone()));
    let mut stream =
        open_stream_as(&s.endpoint.url, "alice", json!({"message": "hi", "episode_id": "e1"})).await;
    assert!(matches!(stream.next().await.unwrap().event, Event::Thinking { .. }));
    wait_until("the model is asked", || async { s.server.requests_for(ORCH).len() == 1 }).await;
    assert!(s.server.requests_for(ORCH)[0].first_byte_at.is_none(), "the model has not answered");
    let stored = s.stored("alice", "e1").await;
    assert_eq!(summary(&stored), [(Role::User, "user", "hi", Status::Ok)]);

    gate.add_permits(1);
    let events: Vec<Event> = stream.map(|r| r.event).collect().await;
    let (status, turn_id) = completed(&events);
    assert_eq!(status, Status::Ok);
    let stored = s.stored("alice", "e1").await;
    assert_eq!(
        summary(&stored),
        [
            (Role::User, "user", "hi", Status::Ok),
            (Role::Assistant, "orchestrator", "Hello there!", Status::Ok)
        ]
    );
    assert!(stored.iter().all(|m| m.turn_id == turn_id));
    assert_eq!(stored[1].usage.len(), 1);
    assert_eq!((stored[1].usage[0].model.as_str(), stored[1].usage[0].usage.input_tokens), (ORCH, 12));
}

async fn a_mixed_turn_stores_support_and_shopping_as_separate_messages_with_usage<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, mixed_orchestrator_reply());
    s.ft.push(FtReply::text(SUPPORT_TEXT));
    s.server.push(SHOP, Reply::text(SHOP_TEXT).first_byte_delay(Duration::from_millis(200)).usage(40, 9));
    let body = json!({"message": "my receipt didn't scan and find me coffee deals", "episode_id": "e1"});
    let events = s.chat("alice", body).await;
    assert_eq!(completed(&events).0, Status::Ok);
    let stored = s.stored("alice", "e1").await;
    assert_eq!(
        summary(&stored),
        [
            (Role::User, "user", "my receipt didn't scan and find me coffee deals", Status::Ok),
            (Role::Assistant, "orchestrator", "Let me check both.", Status::Ok),
            (Role::Assistant, "support[1]", SUPPORT_TEXT, Status::Ok),
            (Role::Assistant, "shopping[1]", SHOP_TEXT, Status::Ok),
        ]
    );
    let usage: Vec<(&str, &str, u64, u64)> = stored
        .iter()
        .flat_map(|m| &m.usage)
        .map(|u| (u.agent.as_str(), u.model.as_str(), u.usage.input_tokens, u.usage.output_tokens))
        .collect();
    // Forethought reports no tokens; the model agents' usage is kept per message.
    assert_eq!(usage, [("orchestrator", ORCH, 10, 5), ("shopping", SHOP, 40, 9)], "rolled up per agent name");
    assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
}

async fn the_next_turn_sees_the_stored_history<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, Reply::text("Hello!"));
    s.server.push(
        ORCH,
        Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "coffee deals", "intent_count": 1})),
    );
    s.server.push(SHOP, Reply::text(SHOP_TEXT));
    s.chat("alice", json!({"message": "hi", "episode_id": "e1"})).await;
    let events = s.chat("alice", json!({"message": "coffee deals", "episode_id": "e1"})).await;
    assert_eq!(completed(&events).0, Status::Ok);
    let saw: Vec<(String, String)> = s.orchestrator_saw(1).into_iter().skip(1).collect();
    let pair = |r: &str, c: &str| (r.to_owned(), c.to_owned());
    assert_eq!(saw, [pair("user", "hi"), pair("assistant", "Hello!"), pair("user", "coffee deals")]);
    let shop = &s.server.requests_for(SHOP)[0].body["messages"];
    assert_eq!(shop[1]["content"], "hi", "the LLM sub-agent gets the cross-turn history: {shop}");
    assert_eq!(shop[2]["content"], "Hello!");
}

async fn a_client_that_hangs_up_leaves_a_partial_reply<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, mixed_orchestrator_reply());
    let slow = "word ".repeat(300);
    s.ft.push(FtReply::chunks(vec!["word "; 300]).chunk_delay(Duration::from_millis(20)));
    s.server.push(SHOP, Reply::text(slow.clone()).chunk_delay(Duration::from_millis(20)));
    // A turn that asks to be cancelled when its client leaves (by default it runs on).
    let body = json!({"message": "receipt and coffee", "episode_id": "e1", "on_disconnect": "cancel"});
    let mut stream = open_stream_as(&s.endpoint.url, "alice", body).await;
    while let Some(r) = stream.next().await {
        if matches!(&r.event, Event::Text { agent, .. } if agent != "orchestrator") {
            break;
        }
    }
    wait_until_both_stream(&s.server, SHOP, &s.ft).await;
    drop(stream);
    wait_until("the partial reply is saved", || async { s.stored("alice", "e1").await.len() > 1 }).await;
    let stored = s.stored("alice", "e1").await;
    assert_eq!(
        summary(&stored[..2]),
        [
            (Role::User, "user", "receipt and coffee", Status::Ok),
            (Role::Assistant, "orchestrator", "Let me check both.", Status::Partial),
        ]
    );
    let answers = &stored[2..];
    assert!(!answers.is_empty(), "what the sub-agents had said is kept: {stored:?}");
    for m in answers {
        assert_eq!(m.status, Status::Partial, "{m:?}");
        assert!(!m.content.is_empty() && slow.starts_with(&m.content), "{m:?}");
        assert!(m.content.len() < slow.len(), "cut short: {m:?}");
    }
    wait_until("the model and vendor calls are cancelled", || async {
        s.server.requests_for(SHOP)[0].completed.is_some() && s.ft.requests()[0].completed.is_some()
    })
    .await;
    assert_eq!(
        s.server.requests_for(SHOP)[0].completed,
        Some(false),
        "the shopping model call was cancelled"
    );
    assert_eq!(s.ft.requests()[0].completed, Some(false), "the Forethought call was cancelled");
}

async fn two_concurrent_turns_on_one_episode_both_persist_in_order<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let (first_gate, second_gate) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    s.server.push(ORCH, Reply::text("First answer.").gated(first_gate.clone()));
    s.server.push(ORCH, Reply::text("Second answer.").gated(second_gate.clone()));
    let url = s.endpoint.url.clone();
    // Smalltalk, so the model's direct answers pass the fastpath allowlist.
    let first = open_stream_as(&url, "alice", json!({"message": "hello", "episode_id": "e1"})).await;
    wait_until("the first turn reaches the model", || async { s.server.requests_for(ORCH).len() == 1 }).await;
    // Beside the running one (the default, enqueue, would run it after).
    let body = json!({"message": "thanks", "episode_id": "e1", "on_busy": "parallel"});
    let second = open_stream_as(&url, "alice", body).await;
    wait_until("the second turn reaches the model", || async { s.server.requests_for(ORCH).len() == 2 })
        .await;

    // Both turns are in flight; the second finishes first.
    second_gate.add_permits(1);
    let second: Vec<Event> = second.map(|r| r.event).collect().await;
    first_gate.add_permits(1);
    let first: Vec<Event> = first.map(|r| r.event).collect().await;
    let (first_turn, second_turn) = (completed(&first).1, completed(&second).1);
    assert!(first_turn < second_turn, "turn ids sort in arrival order");

    let stored = s.stored("alice", "e1").await;
    let got: Vec<(&str, &str)> = stored.iter().map(|m| (m.turn_id.as_str(), m.content.as_str())).collect();
    assert_eq!(
        got,
        [
            (first_turn.as_str(), "hello"),
            (first_turn.as_str(), "First answer."),
            (second_turn.as_str(), "thanks"),
            (second_turn.as_str(), "Second answer."),
        ]
    );
    let episode = s.store().episode(&EpisodeKey::new("alice", "e1").unwrap()).await.unwrap().unwrap();
    assert_eq!(episode.version, 2, "both turns touched the episode");
}

async fn a_user_cannot_read_or_write_another_users_episode<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    // Real questions answered directly, also when the model is asked again, are re-dispatched to
    // shopping (the fastpath allowlist): each turn asks the model twice.
    for answer in ["Noted, Alice.", "Hello, Bob.", "Still here, Alice."] {
        s.server.push(ORCH, Reply::text(answer)).push(ORCH, Reply::text(answer));
    }
    s.server.set_default(SHOP, Reply::text("No offers."));
    s.chat("alice", json!({"message": "my card ends in 4242", "episode_id": "shared"})).await;
    // Bob names Alice's episode id: he gets an episode of his own, empty.
    s.chat("bob", json!({"message": "what did alice say?", "episode_id": "shared"})).await;
    assert!(
        !s.orchestrator_saw(2).iter().any(|(_, c)| c.contains("4242")),
        "bob's turn saw alice's history: {:?}",
        s.orchestrator_saw(2)
    );
    s.chat("alice", json!({"message": "anything new?", "episode_id": "shared"})).await;
    assert!(!s.orchestrator_saw(4).iter().any(|(_, c)| c.contains("alice say")), "alice saw bob's message");

    let alice = s.stored("alice", "shared").await;
    assert_eq!(
        alice.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        [
            "my card ends in 4242",
            "Noted, Alice.",
            "No offers.",
            "anything new?",
            "Still here, Alice.",
            "No offers."
        ]
    );
    let bob = s.stored("bob", "shared").await;
    assert_eq!(
        bob.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["what did alice say?", "Hello, Bob.", "No offers."]
    );
}

async fn a_retried_request_id_is_recorded_once_and_answered_again<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, Reply::text("First answer."));
    let body = json!({"message": "hi", "episode_id": "e1", "request_id": "req-7"});
    let first = s.chat("alice", body.clone()).await;
    // The retry gets the same turn from its log (its receipt), and the model is not asked again.
    let again = s.chat("alice", body).await;
    assert_eq!(completed(&first).1, completed(&again).1, "the retry is the same turn");
    assert_eq!(s.server.requests_for(ORCH).len(), 1, "one run");
    let stored = s.stored("alice", "e1").await;
    assert_eq!(
        summary(&stored),
        [
            (Role::User, "user", "hi", Status::Ok),
            (Role::Assistant, "orchestrator", "First answer.", Status::Ok)
        ]
    );
}

async fn post_status(url: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header(baton::http::USER_HEADER, "alice")
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn a_corrupt_stored_item_is_a_500_that_names_its_key<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, Reply::text("Hello!"));
    s.chat("alice", json!({"message": "hi", "episode_id": "e1"})).await;
    let pk = EpisodeKey::new("alice", "e1").unwrap().pk();
    let sk = format!("MSG#{}#0001", baton::store::new_turn_id());
    let item = Item::from([("role".to_owned(), Attr::s("wizard")), ("content".to_owned(), Attr::n(3))]);
    s.harness.put_raw(&pk, &sk, &item).await;

    let (status, body) = post_status(&s.endpoint.url, json!({"message": "again", "episode_id": "e1"})).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "store_corrupt_item", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("{pk} / {sk}")), "the error names the item: {message}");
    assert_eq!(s.server.requests_for(ORCH).len(), 1, "no model call on unreadable history");
    let episode = s.store().episode(&EpisodeKey::new("alice", "e1").unwrap()).await.unwrap().unwrap();
    assert_eq!(episode.version, 1, "nothing was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_before_the_turn_is_a_503_and_loses_nothing() {
    let s = Setup::with(Moto::start_behind_proxy(test_clock()).await).await;
    s.server.push(ORCH, Reply::text("Hello!"));
    s.chat("alice", json!({"message": "hi", "episode_id": "e1"})).await;

    s.harness.proxy().set_up(false);
    let (status, body) = post_status(&s.endpoint.url, json!({"message": "again", "episode_id": "e1"})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert_eq!(s.server.requests_for(ORCH).len(), 1, "no model call without a recorded message");

    s.harness.proxy().set_up(true);
    let stored = s.stored("alice", "e1").await;
    assert_eq!(stored.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["hi", "Hello!"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_during_the_turn_is_an_error_event_and_loses_nothing() {
    let s = Setup::with(Moto::start_behind_proxy(test_clock()).await).await;
    s.server.push(ORCH, Reply::text("Hello!"));
    s.chat("local", json!({"message": "hi", "episode_id": "e1"})).await;
    let gate = Arc::new(Semaphore::new(0));
    s.server.push(ORCH, Reply::text("You will not see this saved.").gated(gate.clone()));
    let stream =
        open_stream_as(&s.endpoint.url, "local", json!({"message": "hi again", "episode_id": "e1"})).await;
    wait_until("the model is asked", || async { s.server.requests_for(ORCH).len() == 2 }).await;

    s.harness.proxy().set_up(false);
    gate.add_permits(1);
    let events: Vec<Event> = stream.map(|r| r.event).collect().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error { code, retryable: true, .. } if code == "store_unavailable")),
        "{events:?}"
    );
    assert_eq!(completed(&events).0, Status::Error);
    assert_eq!(text_of(&events, "orchestrator"), "You will not see this saved.", "the answer still streams");

    s.harness.proxy().set_up(true);
    let stored = s.stored("local", "e1").await;
    assert_eq!(stored.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["hi", "Hello!", "hi again"]);
}

fn support_call(query: &str) -> Reply {
    Reply::text("").tool_call(ASK_SUPPORT, json!({"query": query, "intent_count": 1})).into()
}

async fn the_next_turn_continues_the_stored_forethought_conversation<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, support_call("my receipt didn't scan"));
    s.server.push(ORCH, support_call("it was a Target receipt"));
    s.ft.push(FtReply::text("Try again in good light.").conversation_id("conv-42"));
    s.ft.push(FtReply::text("Thanks, I re-queued it."));
    s.chat("alice", json!({"message": "my receipt didn't scan", "episode_id": "e1"})).await;
    let episode = s.store().episode(&EpisodeKey::new("alice", "e1").unwrap()).await.unwrap().unwrap();
    let conversation = episode.conversations.get("support").map(|c| c.conversation_id.as_str());
    assert_eq!(conversation, Some("conv-42"), "kept on the episode, under the agent's name");
    s.chat("alice", json!({"message": "it was a Target receipt", "episode_id": "e1"})).await;
    let second = &s.ft.requests()[1];
    assert_eq!(second.method, "PUT", "continued, not started anew");
    assert_eq!(second.conversation_id.as_deref(), Some("conv-42"));
}

async fn a_short_reply_to_a_stored_support_question_goes_to_support<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.server.push(ORCH, support_call("my receipt didn't scan"));
    s.ft.push(
        FtReply::text("Sorry about that! Was it a paper receipt or an e-receipt?").conversation_id("c1"),
    );
    // The model sends the follow-up to shopping; the echo guard reads the stored question.
    s.server.push(
        ORCH,
        Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "paper deals", "intent_count": 1})),
    );
    s.ft.push(FtReply::text("Paper receipts need good light."));
    s.chat("alice", json!({"message": "my receipt didn't scan", "episode_id": "e1"})).await;
    let events = s.chat("alice", json!({"message": "the paper one", "episode_id": "e1"})).await;
    assert_eq!(text_of(&events, "support[1]"), "Paper receipts need good light.");
    assert!(s.server.requests_for(SHOP).is_empty(), "shopping was not called");
    assert_eq!(s.ft.requests()[1].body["query"].as_str().map(|q| q.contains("the paper one")), Some(true));
}
