//! Forethought's documented answers through the whole chat endpoint over real HTTP: choices
//! reach the client and are stored with the turn, a pick in the next message continues the same
//! conversation, and `POST /chat/{episode_id}/csat` rates a support answer (or says why not).

use std::sync::Arc;

use baton::event::Event;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::embedded::EmbeddedStore;
use baton::store::{EpisodeKey, Role, Store, SystemClock};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_tests::{
    ASK_SHOPPING, ASK_SUPPORT, ORCH, open_stream, scripted_config_with_forethought, start_endpoint_with,
    text_of,
};
use futures::StreamExt;
use serde_json::{Value, json};

struct Rig {
    server: ScriptedServer,
    ft: ForethoughtServer,
    store: Arc<dyn Store>,
    endpoint: baton_tests::Endpoint,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let server = ScriptedServer::start().await.unwrap();
    let ft = ForethoughtServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
    let endpoint = start_endpoint_with(&scripted_config_with_forethought(&server, &ft), store.clone()).await;
    Rig { server, ft, store, endpoint, _dir: dir }
}

impl Rig {
    /// One turn routed to support with `message` as its query; its events, episode and turn.
    async fn support_turn(&self, message: &str, episode: Option<&str>) -> (Vec<Event>, String, String) {
        self.server
            .push(ORCH, Reply::text("").tool_call(ASK_SUPPORT, json!({"query": message, "intent_count": 1})));
        let mut body = json!({"message": message});
        if let Some(episode) = episode {
            body["episode_id"] = json!(episode);
        }
        let events: Vec<Event> = open_stream(&self.endpoint.url, body).await.map(|r| r.event).collect().await;
        let Some(Event::Completed { episode_id, turn_id, .. }) = events.last() else { panic!("{events:?}") };
        let (episode, turn) = (episode_id.clone(), turn_id.clone());
        (events, episode, turn)
    }

    async fn csat(&self, user: &str, episode: &str, body: Value) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/chat/{episode}/csat", self.endpoint.url))
            .header(baton::http::USER_HEADER, user)
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }
}

fn button_answer() -> FtReply {
    FtReply::widgets(json!([{
        "type": "button",
        "message": "<p>Which card is it on?</p>",
        "buttons": [{"display_name": "Visa", "value": "card_visa"}, {"display_name": "Store card", "value": "card_store"}],
        "output_variable": "cv_card"
    }]))
}

#[tokio::test]
async fn choices_reach_the_client_are_stored_and_a_pick_continues_the_conversation() {
    let r = rig().await;
    r.ft.push(button_answer()).push(FtReply::json("Thanks, the store card it is."));
    let (events, episode, _) = r.support_turn("my cashback is missing", None).await;
    assert_eq!(text_of(&events, "support[1]"), "Which card is it on?\n1. Visa\n2. Store card");
    let choices: Vec<Value> = events
        .iter()
        .filter(|e| matches!(e, Event::Choices { .. }))
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(
        choices,
        [json!({"type": "choices", "agent": "support[1]", "prompt": "Which card is it on?",
                "options": [{"label": "Visa", "value": "card_visa"}, {"label": "Store card", "value": "card_store"}]})]
    );
    let stored = r.store.recent_messages(&EpisodeKey::new("local", &episode).unwrap(), 10).await.unwrap();
    let support = stored.iter().find(|m| m.role == Role::Assistant && m.agent == "support[1]").unwrap();
    let meta = support.meta.clone().expect("the support message keeps its metadata");
    assert_eq!(meta["choices"]["options"][1]["value"], "card_store");
    assert_eq!(meta["feedback_ref"], "conv-1");

    let (events, _, _) = r.support_turn("2", Some(&episode)).await;
    let pick = &r.ft.requests()[1];
    assert_eq!((pick.method.as_str(), pick.conversation_id.as_deref()), ("PUT", Some("conv-1")));
    assert_eq!(pick.body["query"], "Store card");
    assert_eq!(pick.body["context_variables"], json!({"cv_card": "card_store"}));
    assert_eq!(text_of(&events, "support[1]"), "Thanks, the store card it is.");
}

/// A pick reaches support even when the orchestrator model sends it elsewhere: support offered
/// the options, so "2" answers support (the echo rule reads the options stored with its reply).
#[tokio::test]
async fn a_pick_the_model_sends_to_shopping_still_continues_the_support_conversation() {
    let r = rig().await;
    r.ft.push(button_answer()).push(FtReply::json("Thanks, the store card it is."));
    let (_, episode, _) = r.support_turn("my cashback is missing", None).await;
    // The model takes "2" for a shopping request.
    r.server.push(ORCH, Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "2", "intent_count": 1})));
    let events: Vec<Event> = open_stream(&r.endpoint.url, json!({"message": "2", "episode_id": episode}))
        .await
        .map(|e| e.event)
        .collect()
        .await;
    assert!(r.server.requests_for(baton_tests::SHOP).is_empty(), "shopping was not asked");
    let pick = &r.ft.requests()[1];
    assert_eq!((pick.method.as_str(), pick.conversation_id.as_deref()), ("PUT", Some("conv-1")));
    assert_eq!(pick.body["context_variables"], json!({"cv_card": "card_store"}));
    assert_eq!(text_of(&events, "support[1]"), "Thanks, the store card it is.");
}

#[tokio::test]
async fn a_support_answer_can_be_rated_and_a_turn_without_one_cannot() {
    let r = rig().await;
    r.ft.push(FtReply::json("Points post within a day."));
    let (_, episode, rated_turn) = r.support_turn("where are my points", None).await;
    let (status, body) = r.csat("local", &episode, json!({"turn_id": rated_turn, "rating": "up"})).await;
    assert_eq!(
        (status, &body["status"], &body["agent"]),
        (200, &json!("sent"), &json!("support[1]")),
        "{body}"
    );
    let sent = r.ft.requests().pop().unwrap();
    assert_eq!(sent.path, "/solve/api/v1/conversation/conv-1/csat");
    assert_eq!(sent.body, json!({"rating": 5}));
    // Without a turn id, the latest rateable answer.
    let (status, _) = r.csat("local", &episode, json!({"rating": "down"})).await;
    assert_eq!(status, 200);
    assert_eq!(r.ft.requests().pop().unwrap().body, json!({"rating": 1}));

    // A turn the orchestrator answered alone has no support answer.
    r.server.push(ORCH, Reply::text("Hello! How can I help?"));
    let events: Vec<Event> = open_stream(&r.endpoint.url, json!({"message": "hi", "episode_id": episode}))
        .await
        .map(|e| e.event)
        .collect()
        .await;
    let Some(Event::Completed { turn_id: greeting, .. }) = events.last() else { panic!("{events:?}") };
    let (status, body) = r.csat("local", &episode, json!({"turn_id": greeting, "rating": "up"})).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("no_rateable_answer")), "{body}");
    let (status, body) = r.csat("local", &episode, json!({"rating": "meh"})).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_rating")), "{body}");
    let (status, body) = r.csat("mallory", &episode, json!({"rating": "up"})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("no_rateable_answer")),
        "another user's episode"
    );
    assert_eq!(
        r.ft.requests().iter().filter(|q| q.path.ends_with("/csat")).count(),
        2,
        "only the two ratings"
    );
}
