//! Calls against a real HTTP server on loopback: what is sent, and each failure as a tool error
//! naming the tool.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use serde_json::json;

use super::*;
use crate::config::tools::{ApiKeySpec, AuthSpec};

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
