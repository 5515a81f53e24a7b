//! CORS on the chat endpoint, through a real socket: the preflight of an allowed origin is
//! answered with what the web client needs, its answers carry the origin and expose the episode
//! and turn ids, and any other origin (or an endpoint with no origins) gets no CORS header at all.

use std::sync::Arc;

use axum::http::HeaderValue;
use baton::history::History;
use baton::http::ChatService;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::SystemClock;
use baton::store::embedded::EmbeddedStore;
use baton_tests::{ORCH, scripted_config};

const ALLOWED: &str = "http://127.0.0.1:8000";

struct Endpoint {
    url: String,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
    _model: ScriptedServer,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn endpoint(origins: &[&str]) -> Endpoint {
    let model = ScriptedServer::start().await.unwrap();
    model.set_default(ORCH, Reply::text("Hi!"));
    let config = scripted_config(&model);
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap();
    let history = History::new(Arc::new(store), 10);
    let orchestrator = baton::wiring::build(&config.config, config.backends(None).unwrap()).unwrap();
    let origins = origins.iter().map(|o| HeaderValue::from_str(o).unwrap()).collect();
    let service = ChatService::new(orchestrator, history, config.config.limits, config.config.heartbeat)
        .with_cors_origins(origins);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/chat", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = baton::http::serve(listener, Arc::new(service), std::future::pending()).await;
    });
    Endpoint { url, task, _dir: dir, _model: model }
}

/// The preflight a browser sends before the web client's POST (it sends these headers).
async fn preflight(url: &str, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, url)
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type,x-baton-user")
        .send()
        .await
        .unwrap()
}

async fn post(url: &str, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("origin", origin)
        .json(&serde_json::json!({"message": "hi"}))
        .send()
        .await
        .unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

fn cors_headers(r: &reqwest::Response) -> Vec<String> {
    r.headers().keys().map(|k| k.as_str().to_owned()).filter(|k| k.starts_with("access-control-")).collect()
}

#[tokio::test]
async fn an_allowed_origin_gets_its_preflight_answered() {
    let endpoint = endpoint(&[ALLOWED, "https://chat.example.com"]).await;
    let r = preflight(&endpoint.url, ALLOWED).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(ALLOWED));
    assert_eq!(header(&r, "access-control-allow-methods"), Some("GET,POST"), "turns, and reading one back");
    let allowed = header(&r, "access-control-allow-headers").unwrap();
    for h in ["authorization", "content-type", "x-baton-user", "traceparent"] {
        assert!(allowed.split(',').any(|a| a.trim() == h), "{h} in {allowed}");
    }
    assert_eq!(header(&r, "access-control-max-age"), Some("600"));
    assert!(header(&r, "vary").is_some_and(|v| v.contains("origin")), "{:?}", r.headers());
}

#[tokio::test]
async fn an_allowed_origin_reads_the_answer_and_its_episode_id_once() {
    let endpoint = endpoint(&[ALLOWED]).await;
    let r = post(&endpoint.url, ALLOWED).await;
    assert_eq!(r.status(), 200);
    let allow: Vec<_> = r.headers().get_all("access-control-allow-origin").iter().collect();
    assert_eq!(allow, [ALLOWED], "one Access-Control-Allow-Origin, the caller's");
    let exposed = header(&r, "access-control-expose-headers").unwrap();
    assert!(exposed.contains("x-baton-episode-id") && exposed.contains("x-baton-turn-id"), "{exposed}");
    assert!(r.text().await.unwrap().contains("event: completed"));
}

#[tokio::test]
async fn another_origin_gets_no_cors_header() {
    let endpoint = endpoint(&[ALLOWED]).await;
    for origin in ["http://127.0.0.1:8001", "https://evil.example", "http://127.0.0.1:8000.evil.example"] {
        let r = preflight(&endpoint.url, origin).await;
        assert_eq!(header(&r, "access-control-allow-origin"), None, "{origin}");
        let r = post(&endpoint.url, origin).await;
        assert_eq!(header(&r, "access-control-allow-origin"), None, "{origin}");
    }
}

#[tokio::test]
async fn without_origins_there_is_no_cors_and_no_preflight() {
    let endpoint = endpoint(&[]).await;
    let r = preflight(&endpoint.url, ALLOWED).await;
    assert_eq!(r.status(), 405, "OPTIONS is not served");
    assert!(cors_headers(&r).is_empty(), "{:?}", r.headers());
    let r = post(&endpoint.url, ALLOWED).await;
    assert_eq!(r.status(), 200);
    assert!(cors_headers(&r).is_empty(), "{:?}", r.headers());
}
