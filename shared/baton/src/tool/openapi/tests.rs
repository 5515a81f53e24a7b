//! Calls against a real HTTP server on loopback: what is sent, and each failure as a tool error
//! naming the tool.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use serde_json::json;

use super::*;
use crate::tool::openapi::spec::{ApiKeySpec, AuthSpec};

const DOC: &str = r#"
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /items/{id}:
    get:
      operationId: getItem
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: tag, in: query, schema: {type: array, items: {type: string}}}
      responses: {"200": {description: ok}}
  /big: {get: {operationId: big, responses: {"200": {description: ok}}}}
  /slow: {get: {operationId: slow, responses: {"200": {description: ok}}}}
  /fail: {get: {operationId: fail, responses: {"200": {description: ok}}}}
"#;

async fn server() -> String {
    let app = Router::new()
        .route(
            "/items/{id}",
            get(
                |axum::extract::Path(id): axum::extract::Path<String>,
                 headers: HeaderMap,
                 uri: axum::http::Uri| async move {
                    let key =
                        headers.get("x-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                    axum::Json(json!({"id": id, "query": uri.query(), "key_sent": !key.is_empty()}))
                },
            ),
        )
        .route("/big", get(|| async { "x".repeat(5000) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/fail",
            get(|headers: HeaderMap| async move {
                let key = headers.get("x-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                (axum::http::StatusCode::BAD_REQUEST, format!("bad request, you sent {key}"))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn tools(base_url: String) -> Vec<Arc<dyn Tool>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.yaml");
    std::fs::write(&path, DOC).unwrap();
    let spec = |env: &str| OpenApiSource {
        document: path.display().to_string(),
        base_url: Some(base_url.clone()),
        operations: None,
        auth: Some(AuthSpec {
            api_key: Some(ApiKeySpec { header: "x-key".into(), env: Some(env.into()), secret_arn: None }),
            ..Default::default()
        }),
        timeout_seconds: Some(0.5),
        max_result_bytes: Some(1000),
    };
    let hooks = AuthHooks::default();
    let err = load("items", &spec("BATON_OPENAPI_TEST_UNSET"), &hooks).await.err().unwrap();
    assert!(
        err.contains("OpenAPI source `items`: its auth cannot be used") && err.contains("UNSET"),
        "{err}"
    );
    // A variable every process has stands for the key (the crate forbids `set_var`'s unsafe).
    load("items", &spec("PATH"), &hooks).await.unwrap()
}

fn tool<'t>(tools: &'t [Arc<dyn Tool>], name: &str) -> &'t Arc<dyn Tool> {
    tools.iter().find(|t| t.name() == name).unwrap()
}

#[tokio::test]
async fn arguments_become_the_path_query_and_auth_header_and_failures_name_the_tool() {
    let tools = tools(server().await).await;
    assert_eq!(tool(&tools, "getItem").kind(), "openapi");
    let context = ToolContext::default();
    let found =
        tool(&tools, "getItem").call(json!({"id": "a b", "tag": ["x", "y"]}), &context).await.unwrap();
    assert_eq!(found, json!({"id": "a b", "query": "tag=x&tag=y", "key_sent": true}));

    let big = tool(&tools, "big").call(json!({}), &context).await.unwrap_err();
    assert_eq!(big, ToolError::TooLarge { tool: "big".into(), limit: 1000 });

    let slow = tool(&tools, "slow").call(json!({}), &context).await.err().unwrap();
    assert_eq!(slow.code(), "tool_timeout");
    assert!(slow.to_string().contains("`slow`"), "{slow}");

    let fail = tool(&tools, "fail").call(json!({}), &context).await.unwrap_err().to_string();
    assert!(fail.starts_with("`fail` failed: the server answered HTTP 400"), "{fail}");
    let key = std::env::var("PATH").unwrap();
    assert!(!fail.contains(key.trim()) && fail.contains("[REDACTED]"), "the key is masked: {fail}");
}

#[tokio::test]
async fn an_unreachable_or_malformed_document_is_a_start_up_error_naming_the_source() {
    let spec = |document: String| OpenApiSource {
        document,
        base_url: None,
        operations: None,
        auth: None,
        timeout_seconds: None,
        max_result_bytes: None,
    };
    let hooks = AuthHooks::default();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let err = load("hotels", &spec(format!("http://{closed}/openapi.json")), &hooks).await.err().unwrap();
    assert!(err.starts_with("OpenAPI source `hotels` (http://") && err.contains("cannot reach it"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "openapi: 3.0.0\npaths: 7\n").unwrap();
    let err = load("hotels", &spec(path.display().to_string()), &hooks).await.err().unwrap();
    assert!(err.contains("not a valid OpenAPI document"), "{err}");
    std::fs::write(&path, DOC).unwrap();
    let err = load("hotels", &spec(path.display().to_string()), &hooks).await.err().unwrap();
    assert!(err.contains("set `base_url`"), "{err}");
}

/// Never twice: a server that reads the request and drops the connection without answering may
/// have acted, so the call is not sent again and the model reads `outcome_unknown`; a server that
/// cannot be reached got nothing, and the model reads `tool_failed`.
#[tokio::test]
async fn a_request_whose_answer_is_lost_is_sent_once_and_its_outcome_is_unknown() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                // It acts, then dies before it answers.
                counter.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            });
        }
    });
    let tools = tools(format!("http://{addr}")).await;
    let context = ToolContext::default();
    let lost = tool(&tools, "getItem").call(json!({"id": "a"}), &context).await.unwrap_err();
    assert_eq!(lost.code(), "outcome_unknown", "{lost}");
    assert!(lost.to_string().contains("not sent again"), "{lost}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received.load(Ordering::SeqCst), 1, "sent once");
    let key = std::env::var("PATH").unwrap();
    assert!(!lost.to_string().contains(key.trim()), "no credential in it: {lost}");

    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let tools = self::tools(format!("http://{refused}")).await;
    let err = tool(&tools, "getItem").call(json!({"id": "a"}), &context).await.unwrap_err();
    assert_eq!(err.code(), "tool_failed", "{err}");
    assert!(err.to_string().contains("so the call was not made"), "{err}");
}
