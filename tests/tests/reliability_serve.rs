//! `serve` under slow and hostile clients, over real sockets: idle connections, header and body
//! trickles and connections over the cap are cut or held back within bounded time; a turn whose
//! model streams forever ends at the turn deadline with what it produced stored; error answers
//! keep the JSON shape.
//!
//! The limits under test are set short (one or two seconds); each wait of the test itself has a
//! generous outer bound, so a regression fails instead of hanging, and no assertion is on speed.

use std::sync::Arc;
use std::time::Duration;

use baton::event::{Event, Status};
use baton::http::EndpointLimits;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::embedded::EmbeddedStore;
use baton::store::{EpisodeKey, Role, Store, SystemClock};
use baton_tests::{Endpoint, ORCH, SHOP, open_stream, scripted_config, start_endpoint_limited, wait_until};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Outer bound on any wait of these tests: far above every limit configured here.
const GUARD: Duration = Duration::from_secs(20);

struct Setup {
    server: ScriptedServer,
    endpoint: Endpoint,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

async fn start(limits: EndpointLimits) -> Setup {
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::text("Hello there."));
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
    let endpoint = start_endpoint_limited(&scripted_config(&server), store.clone(), limits).await;
    Setup { server, endpoint, store, _dir: dir }
}

fn short_limits() -> EndpointLimits {
    EndpointLimits {
        turn_deadline: Duration::from_secs(30),
        body_read_timeout: Duration::from_secs(1),
        request_head_timeout: Duration::from_secs(1),
        max_connections: 64,
    }
}

fn addr(endpoint: &Endpoint) -> String {
    endpoint.url.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection; returns what it sent. Panics after [`GUARD`].
async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(GUARD, async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server kept the connection open; it sent {:?}", String::from_utf8_lossy(&got));
    String::from_utf8_lossy(&got).into_owned()
}

/// Writes `bytes` one byte at a time, `gap` apart, until the server closes the connection
/// (or everything is sent); returns how many bytes went out and what the server answered.
async fn trickle(conn: TcpStream, bytes: &[u8], gap: Duration) -> (usize, String) {
    let (mut rx, mut tx) = conn.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match rx.read(&mut buf).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    let mut sent = 0;
    let outcome = tokio::time::timeout(GUARD, async {
        for b in bytes {
            if reader.is_finished() || tx.write_all(&[*b]).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(gap).await;
        }
        reader.await.unwrap()
    })
    .await;
    let answer = outcome.expect("the server kept a trickling connection open");
    (sent, answer)
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_request_head_timeout() {
    let s = start(short_limits()).await;
    let mut conn = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    assert_eq!(read_until_closed(&mut conn).await, "", "closed without an answer");
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_once_idle() {
    let s = start(short_limits()).await;
    let mut conn = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    conn.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "answered, then closed when idle: {answer}");
}

#[tokio::test]
async fn a_header_trickle_is_cut() {
    let s = start(short_limits()).await;
    let conn = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    let head = format!("POST /chat HTTP/1.1\r\nhost: x\r\nx-padding: {}\r\n\r\n", "a".repeat(200));
    // A byte every 100 ms keeps any idle timer from firing: only a bound on the whole head cuts it.
    let (sent, answer) = trickle(conn, head.as_bytes(), Duration::from_millis(100)).await;
    assert!(sent < head.len(), "cut before the head was complete ({sent} bytes sent)");
    assert!(sent > 2, "the connection outlived several gaps between bytes ({sent} bytes sent)");
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[tokio::test]
async fn a_body_trickle_is_cut_with_408() {
    let s = start(short_limits()).await;
    let body = br#"{"message": "a message trickled one byte at a time, slower than anyone types it"}"#;
    let mut conn = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    let head = format!(
        "POST /chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let (sent, answer) = trickle(conn, body, Duration::from_millis(200)).await;
    assert!(sent < body.len(), "cut before the body was complete ({sent} bytes sent)");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"body_timeout""#), "JSON error shape: {answer}");
    assert!(s.server.requests().is_empty(), "no model call was started");
}

#[tokio::test]
async fn connections_over_the_cap_wait_until_one_closes() {
    let s =
        start(EndpointLimits { max_connections: 2, request_head_timeout: GUARD * 3, ..short_limits() }).await;
    let first = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    let _second = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    let mut third = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    third.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(early.is_err(), "the third connection is not served while two are open: {early:?}");
    drop(first);
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "served once a slot freed: {answer}");
}

/// Reads one chunked HTTP response to its end (the `0\r\n\r\n` terminator).
async fn read_response(conn: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(GUARD, async {
        while !got.ends_with(b"\r\n0\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed mid-response: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the response ends");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_kept_alive_connection_serves_a_second_turn_from_thinking() {
    let s = start(short_limits()).await;
    let mut conn = TcpStream::connect(addr(&s.endpoint)).await.unwrap();
    let body = r#"{"message": "hi"}"#;
    let request = format!(
        "POST /chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    for turn in 0..2 {
        conn.write_all(request.as_bytes()).await.unwrap();
        let response = read_response(&mut conn).await;
        assert!(response.starts_with("HTTP/1.1 200"), "turn {turn}: {response}");
        let first_event = response.split("\r\n\r\n").nth(1).unwrap_or("");
        let turn_id =
            response.split("x-baton-turn-id: ").nth(1).and_then(|r| r.split("\r\n").next()).unwrap();
        let first = format!("event: thinking\nid: {turn_id}:1\n");
        assert!(first_event.contains(&first), "turn {turn}: {response}");
        assert!(response.contains("event: completed"), "turn {turn}: {response}");
    }
}

#[tokio::test]
async fn a_model_that_streams_forever_is_cut_at_the_turn_deadline_and_kept() {
    let s = start(EndpointLimits { turn_deadline: Duration::from_secs(1), ..short_limits() }).await;
    // Shopping streams a word every 20 ms for 40 s: the model idle timeout never fires.
    let endless = "word ".repeat(2_000);
    let route =
        Reply::text("Let me look.").tool_call("ask_shopping", serde_json::json!({"query": "coffee deals"}));
    s.server.push(ORCH, route);
    s.server.set_default(SHOP, Reply::text(endless.clone()).chunk_delay(Duration::from_millis(20)));
    let body = serde_json::json!({"message": "find me coffee deals", "episode_id": "e-forever"});
    let events: Vec<Event> =
        tokio::time::timeout(GUARD, open_stream(&s.endpoint.url, body).await.map(|r| r.event).collect())
            .await
            .expect("the turn ends");
    let shopping: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Text { agent, text } if agent.starts_with("shopping") => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!shopping.is_empty() && shopping.len() < endless.len(), "some of it streamed: {events:?}");
    assert!(
        events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "deadline_exceeded")),
        "{events:?}"
    );
    match events.last() {
        Some(Event::Completed { status, .. }) => assert_eq!(*status, Status::Partial),
        other => panic!("the last event is completed, not {other:?}"),
    }
    let key = EpisodeKey::new("local", "e-forever").unwrap();
    let shopping_reply = || async {
        let stored = s.store.recent_messages(&key, 10).await.unwrap();
        stored.into_iter().find(|m| m.role == Role::Assistant && m.agent.starts_with("shopping"))
    };
    wait_until("the partial reply is saved", || async { shopping_reply().await.is_some() }).await;
    let reply = shopping_reply().await.unwrap();
    assert_eq!(reply.status, Status::Partial);
    assert!(!reply.content.is_empty() && endless.starts_with(&reply.content), "{reply:?}");
}

#[tokio::test]
async fn a_retry_after_beyond_the_limit_fails_fast_with_a_clear_error() {
    let s = start(short_limits()).await;
    s.server.push(ORCH, Reply::rate_limited(3600));
    let events: Vec<Event> = tokio::time::timeout(
        GUARD,
        open_stream(&s.endpoint.url, serde_json::json!({"message": "hi"})).await.map(|r| r.event).collect(),
    )
    .await
    .expect("the turn ends");
    let error = events.iter().find_map(|e| match e {
        Event::Error { code, message, retryable, .. } => Some((code.as_str(), message.as_str(), *retryable)),
        _ => None,
    });
    let (code, message, retryable) = error.expect("an error event");
    assert_eq!(code, "model_rate_limited", "{message}");
    assert!(retryable, "the client may retry later");
    assert!(!events.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "deadline_exceeded")));
    assert!(matches!(events.last(), Some(Event::Completed { .. })), "{events:?}");
    assert_eq!(s.server.requests_for(ORCH).len(), 1, "not retried: the server asked for an hour");
}

async fn json_error(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    assert_eq!(response.headers()["content-type"], "application/json");
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn unknown_paths_and_methods_get_the_json_error_shape() {
    let s = start(short_limits()).await;
    let client = reqwest::Client::new();
    let (status, json) =
        json_error(client.get(format!("{}/nope", s.endpoint.url)).send().await.unwrap()).await;
    assert_eq!((status, json["error"]["code"].as_str()), (404, Some("not_found")), "{json}");
    let response = client.delete(format!("{}/chat", s.endpoint.url)).send().await.unwrap();
    assert_eq!(response.headers()["allow"], "POST");
    let (status, json) = json_error(response).await;
    assert_eq!((status, json["error"]["code"].as_str()), (405, Some("method_not_allowed")), "{json}");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused_with_415() {
    let s = start(short_limits()).await;
    for content_type in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let mut request =
            reqwest::Client::new().post(format!("{}/chat", s.endpoint.url)).body(r#"{"message":"hi"}"#);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        let (status, json) = json_error(request.send().await.unwrap()).await;
        assert_eq!((status, json["error"]["code"].as_str()), (415, Some("unsupported_media_type")), "{json}");
    }
    assert!(s.server.requests().is_empty(), "no model call was started");
}
