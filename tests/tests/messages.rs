//! `GET /chat/{episode_id}/messages` through the real endpoint (`serve`'s code on a loopback
//! socket, turns answered by the scripted model server), against both stores: the conversation
//! read back a page at a time, the caller's own only, bad input refused with a JSON error.

use std::sync::Arc;

use baton::event::Status;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{EpisodeKey, Role, Store, StoredMessage, new_turn_id};
use baton_tests::stores::{StoreHarness, test_clock};
use baton_tests::{Endpoint, ORCH, SHOP, open_stream_as, scripted_config, start_endpoint_with};
use futures::StreamExt;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    a_conversation_reads_back_newest_page_first_each_page_oldest_first,
    a_message_carries_its_choices_and_meta,
    another_users_episode_and_an_unknown_one_are_the_same_404,
    bad_limits_cursors_and_parameters_are_400s_with_a_json_error,
    a_store_that_cannot_be_read_is_a_json_5xx,
);

struct Setup<H> {
    harness: H,
    _server: ScriptedServer,
    endpoint: Endpoint,
}

impl<H: StoreHarness> Setup<H> {
    async fn start() -> Setup<H> {
        let harness = H::start(test_clock()).await;
        let server = ScriptedServer::start().await.unwrap();
        // Questions answered directly are re-dispatched to shopping: every turn has two answers.
        server.set_default(ORCH, Reply::text("Looking."));
        server.set_default(SHOP, Reply::text("Three coffee deals."));
        let endpoint = start_endpoint_with(&scripted_config(&server), harness.store()).await;
        Setup { harness, _server: server, endpoint }
    }

    fn store(&self) -> Arc<dyn Store> {
        self.harness.store()
    }

    async fn chat(&self, user: &str, episode: &str, message: &str) {
        let body = json!({"message": message, "episode_id": episode});
        let events: Vec<_> = open_stream_as(&self.endpoint.url, user, body).await.collect().await;
        assert!(events.len() > 2, "the turn streamed");
    }

    /// `GET /chat/{episode}/messages{query}` as `user`: the status and the JSON body.
    async fn get(&self, user: &str, episode: &str, query: &str) -> (u16, Value) {
        let url = format!("{}/chat/{episode}/messages{query}", self.endpoint.url);
        let response =
            reqwest::Client::new().get(url).header(baton::http::USER_HEADER, user).send().await.unwrap();
        let status = response.status().as_u16();
        assert_eq!(response.headers()["content-type"], "application/json", "{status}");
        if status == 200 {
            assert_eq!(response.headers()["cache-control"], "private, no-store");
        }
        (status, response.json().await.unwrap())
    }
}

/// The stored messages as the endpoint sends them.
fn as_sent(messages: &[StoredMessage]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            let mut v = json!({
                "turn_id": m.turn_id, "seq": m.seq, "role": m.role.as_str(), "agent": m.agent,
                "content": m.content, "status": m.status, "created_at": m.created_at,
            });
            if !m.usage.is_empty() {
                v["usage"] = serde_json::to_value(&m.usage).unwrap();
            }
            if let Some(meta) = &m.meta {
                v["meta"] = Value::Object(meta.clone());
            }
            v
        })
        .collect()
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_else(|| panic!("a JSON error: {body}"))
}

async fn a_conversation_reads_back_newest_page_first_each_page_oldest_first<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    for question in ["any coffee deals?", "and tea?", "what about milk?"] {
        s.chat("alice", "e1", question).await;
    }
    let stored = s.store().recent_messages(&EpisodeKey::new("alice", "e1").unwrap(), 100).await.unwrap();
    assert_eq!(stored.len(), 9, "three turns of a question and two answers");

    let (mut pages, mut query) = (Vec::new(), "?limit=4".to_owned());
    loop {
        let (status, page) = s.get("alice", "e1", &query).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["episode_id"], "e1");
        let messages = page["messages"].as_array().unwrap().clone();
        assert!(messages.len() <= 4);
        pages.push(messages);
        match page.get("next") {
            Some(next) => query = format!("?limit=4&before={}", next.as_str().unwrap()),
            None => break,
        }
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 1]);
    let read_back: Vec<Value> = pages.into_iter().rev().flatten().collect();
    assert_eq!(read_back, as_sent(&stored), "every page, newest first, is the whole conversation");
    assert_eq!(read_back[0]["role"], "user");
    assert_eq!(read_back[0]["content"], "any coffee deals?");
    assert_eq!(read_back[8]["content"], "Three coffee deals.");

    let (status, all) = s.get("alice", "e1", "").await;
    assert_eq!(status, 200);
    assert_eq!(all["messages"].as_array().unwrap().len(), 9, "the default page holds all nine");
    assert!(all.get("next").is_none(), "and says there is nothing older");
}

async fn a_message_carries_its_choices_and_meta<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let (store, turn) = (s.store(), new_turn_id());
    let now = store.clock().now_ms();
    store.record_user_message(&key, &StoredMessage::user(&turn, "my receipt", now), None).await.unwrap();
    let meta = json!({
        "feedback_ref": "fb-1",
        "choices": {"prompt": "Which store?", "options": [{"label": "Aldi", "value": "aldi"}]},
    });
    let reply = StoredMessage {
        seq: 1,
        role: Role::Assistant,
        agent: "helper[1]".into(),
        content: "Which store was it?".into(),
        status: Status::Partial,
        meta: meta.as_object().cloned(),
        ..StoredMessage::user(&turn, "", now)
    };
    store.save_reply(&key, &turn, std::slice::from_ref(&reply)).await.unwrap();
    let (status, page) = s.get("alice", "e1", "").await;
    assert_eq!(status, 200, "{page}");
    let sent = &page["messages"][1];
    assert_eq!(sent["meta"], meta);
    assert_eq!(
        (&sent["status"], &sent["agent"], &sent["seq"]),
        (&json!("partial"), &json!("helper[1]"), &json!(1))
    );
    assert_eq!(sent["turn_id"], turn.as_str());
    assert!(page["messages"][0].get("meta").is_none(), "absent where a message has none");
}

async fn another_users_episode_and_an_unknown_one_are_the_same_404<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.chat("alice", "shared", "my card ends in 4242").await;
    assert_eq!(s.get("alice", "shared", "").await.0, 200);
    let (status, bobs) = s.get("bob", "shared", "").await;
    assert_eq!(status, 404);
    assert_eq!(error_code(&bobs), "episode_not_found");
    assert!(!bobs.to_string().contains("4242"));
    let (status, unknown) = s.get("bob", "never-used", "").await;
    assert_eq!(status, 404);
    let unknown = unknown.to_string().replace("never-used", "shared");
    assert_eq!(bobs.to_string(), unknown, "nothing tells an existing episode from an unknown one");
    // Bob's own turn in an episode of that id shows him his messages only.
    s.chat("bob", "shared", "hello from bob").await;
    let (_, page) = s.get("bob", "shared", "").await;
    assert_eq!(page["messages"][0]["content"], "hello from bob");
    assert!(!page.to_string().contains("4242"));
}

async fn bad_limits_cursors_and_parameters_are_400s_with_a_json_error<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.chat("alice", "e1", "any coffee deals?").await;
    for (query, code) in [
        ("?limit=0", "invalid_limit"),
        ("?limit=201", "invalid_limit"),
        ("?limit=ten", "invalid_limit"),
        ("?limit=-3", "invalid_limit"),
        ("?before=nonsense", "invalid_cursor"),
        ("?before=t.99999", "invalid_cursor"),
        ("?before=a%23META.1", "invalid_cursor"),
        ("?limt=5", "invalid_query"),
        ("?limit=5&limit=6", "invalid_query"),
    ] {
        let (status, body) = s.get("alice", "e1", query).await;
        assert_eq!((status, error_code(&body)), (400, code), "{query}: {body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    }
    let (status, body) = s.get("alice", "a:b.c", "").await;
    assert_eq!(status, 404, "a valid id nobody used: {body}");
    let (status, body) = s.get("alice%23x", "e1", "").await;
    assert_eq!((status, error_code(&body)), (400, "invalid_id"), "a user header that cannot be a key");
    let post =
        reqwest::Client::new().post(format!("{}/chat/e1/messages", s.endpoint.url)).send().await.unwrap();
    assert_eq!(post.status(), 405, "reading only");
}

async fn a_store_that_cannot_be_read_is_a_json_5xx<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    s.chat("alice", "e1", "any coffee deals?").await;
    // An item of unknown shape among the messages: the page names it instead of skipping it.
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let mut odd = baton::store::item::Item::new();
    odd.insert("role".into(), baton::store::item::Attr::s("wizard"));
    s.harness.put_raw(&key.pk(), "MSG#zzzz#0000", &odd).await;
    let (status, body) = s.get("alice", "e1", "").await;
    assert_eq!((status, error_code(&body)), (500, "store_corrupt_item"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("MSG#zzzz#0000"), "{body}");
}

/// With JWT auth the caller is the token's subject, exactly as for `POST /chat`: no token is a
/// 401, and the local user header names no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_jwt_auth_the_page_is_the_token_subjects() {
    use baton::auth::{AuthMode, JwtVerifier};
    use baton::history::History;
    use baton::http::ChatService;

    const SECRET: &str = "a-test-secret-of-at-least-32-bytes!!";
    let token = |sub: &str| {
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &json!({"sub": sub, "exp": exp}), &key)
            .unwrap()
    };
    let harness = baton_tests::stores::Embedded::start(test_clock()).await;
    let store = harness.store();
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let now = store.clock().now_ms();
    store.record_user_message(&key, &StoredMessage::user(new_turn_id(), "alice's", now), None).await.unwrap();
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_config(&server);
    let orchestrator =
        baton::wiring::build(&config.config, config.backends(Some(store.clone())).unwrap()).unwrap();
    let verifier = JwtVerifier::hs256(SECRET.as_bytes(), None, None).unwrap();
    let service = ChatService::new(
        orchestrator,
        History::new(store, 10),
        config.config.limits,
        config.config.heartbeat,
    )
    .with_auth(AuthMode::Jwt(Box::new(verifier)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/chat/e1/messages", listener.local_addr().unwrap());
    let serving = tokio::spawn(baton::http::serve(listener, Arc::new(service), std::future::pending()));
    let client = reqwest::Client::new();

    let anonymous = client.get(&url).header(baton::http::USER_HEADER, "alice").send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "the local header is no identity under JWT");
    let alice = client.get(&url).bearer_auth(token("alice")).send().await.unwrap();
    assert_eq!(alice.status(), 200);
    assert_eq!(alice.json::<Value>().await.unwrap()["messages"][0]["content"], "alice's");
    let bob =
        client.get(&url).bearer_auth(token("bob")).header(baton::http::USER_HEADER, "alice").send().await;
    assert_eq!(bob.unwrap().status(), 404, "bob's token reads bob's episodes, whatever the header says");
    serving.abort();
}
