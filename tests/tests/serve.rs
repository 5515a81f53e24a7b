//! Bad requests to the chat endpoint get a 4xx JSON error and start no model call.

use baton::model::scripted::{Reply, ScriptedServer};
use baton_tests::{ORCH, scripted_config, start_endpoint};

async fn post(url: &str, body: Vec<u8>) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(r.headers()["content-type"], "application/json");
    (status, r.json().await.unwrap())
}

async fn assert_refused(body: Vec<u8>, status: u16, code: &str) {
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::text("should not be asked"));
    let mut config = scripted_config(&server);
    config.config.limits.max_body_bytes = 4096;
    config.config.limits.max_message_chars = 500;
    let endpoint = start_endpoint(&config).await;
    let (got, json) = post(&format!("{}/chat", endpoint.url), body).await;
    assert_eq!(got, status, "{json}");
    assert_eq!(json["error"]["code"], code, "{json}");
    assert!(json["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(server.requests().is_empty(), "no model call was started");
}

#[tokio::test]
async fn malformed_json_is_refused() {
    assert_refused(b"{\"message\": \"hi\"".to_vec(), 400, "invalid_json").await;
}

#[tokio::test]
async fn a_missing_message_is_refused() {
    assert_refused(br#"{"episode_id": "e1"}"#.to_vec(), 400, "missing_message").await;
}

#[tokio::test]
async fn an_oversized_message_is_refused() {
    let body = serde_json::to_vec(&serde_json::json!({"message": "a".repeat(501)})).unwrap();
    assert_refused(body, 413, "message_too_long").await;
}

#[tokio::test]
async fn an_oversized_body_is_refused() {
    let body = serde_json::to_vec(&serde_json::json!({"message": "a".repeat(5000)})).unwrap();
    assert_refused(body, 413, "body_too_large").await;
}

#[tokio::test]
async fn non_utf8_bytes_are_refused() {
    assert_refused(b"{\"message\": \"caf\xe9\"}".to_vec(), 400, "invalid_utf8").await;
}

#[tokio::test]
async fn a_bad_episode_id_is_refused() {
    assert_refused(br#"{"message": "hi", "episode_id": "../etc"}"#.to_vec(), 400, "invalid_id").await;
}

#[tokio::test]
async fn a_good_request_returns_the_episode_id_header() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(ORCH, Reply::text("Hi!"));
    let endpoint = start_endpoint(&scripted_config(&server)).await;
    let r = reqwest::Client::new()
        .post(&endpoint.url)
        .json(&serde_json::json!({"message": "hi", "episode_id": "ep-42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-baton-episode-id"], "ep-42");
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let turn = r.headers()["x-baton-turn-id"].to_str().unwrap().to_owned();
    let body = r.text().await.unwrap();
    assert!(body.starts_with(&format!("event: thinking\nid: {turn}:1\n")), "{body}");
    assert!(body.contains("\"episode_id\":\"ep-42\""), "completed carries the episode");
}
