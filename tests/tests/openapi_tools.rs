//! HTTP tools from a published OpenAPI document nobody here wrote (the Swagger Petstore, OpenAPI
//! 3.0, Apache-2.0, kept in `tests/fixtures/openapi/`), declared in a configuration as a team
//! declares them, and called against Stoplight Prism (`tests/openapi`, npm) serving that same
//! document with `--errors`: Prism validates every request (path, query, header and body
//! parameters, and the security scheme) and answers a violation with a 4xx, which the tool would
//! return as `tool_failed`. Every operation of the document is called with arguments its schema
//! allows; each must pass Prism's validation.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use baton::config::Config;
use baton::model::ToolCall;
use baton::tool::{Tool, ToolContext, ToolOutcome, ToolRegistry};
use baton::wiring::{Backends, declared_tools};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn document() -> PathBuf {
    root().join("tests/fixtures/openapi/petstore.yaml")
}

/// Prism serving the Petstore document on a free loopback port, until dropped.
struct Prism {
    url: String,
    _child: tokio::process::Child,
}

async fn prism() -> Prism {
    let bin = root().join("tests/openapi/node_modules/.bin/prism");
    assert!(bin.exists(), "{} is missing: run scripts/test.sh (npm ci in tests/openapi)", bin.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(bin)
        .args(["mock", "-h", "127.0.0.1", "-p", &port.to_string(), "--errors"])
        .arg(document())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prism starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("Prism is listening") {
                return;
            }
        }
        panic!("prism ended before it listened");
    };
    tokio::time::timeout(Duration::from_secs(60), listening).await.expect("prism listens within 60 s");
    // Keep reading its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Prism { url: format!("http://127.0.0.1:{port}"), _child: child }
}

/// The team's configuration: the pet operations (OAuth2 in the document: a bearer token) and
/// the store and user operations (an `api_key` header) as two sources of one document. `HOME`
/// stands for the secret (the crate forbids `set_var`'s unsafe).
fn config(url: &str, auth: &str) -> Config {
    let doc = document().display().to_string();
    let yaml = format!(
        "openapi:
  pets:
    document: {doc}
    base_url: {url}
    operations: [addPet, updatePet, findPetsByStatus, findPetsByTags, updatePetWithForm, deletePet]
    auth: {{bearer_env: HOME}}
  store:
    document: {doc}
    base_url: {url}
    operations: [getPetById, getInventory, placeOrder, getOrderById, deleteOrder, createUser,
                 createUsersWithListInput, loginUser, logoutUser, getUserByName, updateUser, deleteUser]
    {auth}
agents:
  - name: clerk
    instruction: Use the store.
    tools: [getPetById, getInventory]
"
    );
    Config::default().with_yaml(&yaml, "petstore.yaml").unwrap()
}

async fn tools_of(config: &Config) -> ToolRegistry {
    let mut backends = Backends::in_memory();
    declared_tools(config, &mut backends, Vec::new()).await.unwrap();
    let tools: Vec<Arc<dyn Tool>> = backends.tools.clone();
    ToolRegistry::new(tools).unwrap()
}

async fn call(registry: &ToolRegistry, name: &str, arguments: Value) -> ToolOutcome {
    let call = ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.to_string() };
    registry.call(&call, &ToolContext::new("u", "e"), Duration::from_secs(30)).await
}

fn pet() -> Value {
    json!({"id": 10, "name": "doggie", "category": {"id": 1, "name": "Dogs"}, "photoUrls": ["https://x/p.png"],
           "tags": [{"id": 1, "name": "friendly"}], "status": "available"})
}

fn user(name: &str) -> Value {
    json!({"id": 10, "username": name, "firstName": "Ada", "lastName": "Lovelace", "email": "ada@example.com",
           "password": "p", "phone": "12345", "userStatus": 1})
}

#[tokio::test]
async fn every_petstore_operation_is_a_tool_whose_requests_prism_finds_valid() {
    let prism = prism().await;
    let registry = tools_of(&config(&prism.url, "auth: {api_key: {header: api_key, env: HOME}}")).await;
    let names: Vec<String> = registry.specs().iter().map(|s| s.name.clone()).collect();
    assert_eq!(names.len(), 18, "each listed operation, by its operationId: {names:?}");
    let specs = registry.specs();
    let add = specs.iter().find(|s| s.name == "addPet").unwrap();
    assert_eq!(
        add.parameters["required"],
        json!(["body"]),
        "the body is the `body` argument: {}",
        add.parameters
    );

    let order = json!({"id": 10, "petId": 198772, "quantity": 7, "shipDate": "2026-11-28T10:00:00Z",
                       "status": "approved", "complete": true});
    let calls = [
        ("addPet", json!({"body": pet()})),
        ("updatePet", json!({"body": pet()})),
        ("findPetsByStatus", json!({"status": "sold"})),
        ("findPetsByTags", json!({"tags": ["friendly", "small"]})),
        ("updatePetWithForm", json!({"petId": 10, "name": "rex", "status": "sold"})),
        ("deletePet", json!({"petId": 10, "api_key": "k"})),
        ("getPetById", json!({"petId": 10})),
        ("getInventory", json!({})),
        ("placeOrder", json!({"body": order})),
        ("getOrderById", json!({"orderId": 10})),
        ("deleteOrder", json!({"orderId": 10})),
        ("createUser", json!({"body": user("ada")})),
        ("createUsersWithListInput", json!({"body": [user("ada"), user("bob")]})),
        ("loginUser", json!({"username": "ada", "password": "p"})),
        ("logoutUser", json!({})),
        ("getUserByName", json!({"username": "ada"})),
        ("updateUser", json!({"username": "ada", "body": user("ada")})),
        ("deleteUser", json!({"username": "ada"})),
    ];
    for (name, arguments) in calls {
        let outcome = call(&registry, name, arguments.clone()).await;
        assert!(!outcome.is_error, "{name} {arguments} → {}", outcome.result);
    }
    let found = call(&registry, "getPetById", json!({"petId": 10})).await.result;
    assert_eq!(found["name"], "doggie", "the document's example, as JSON: {found}");
    let pets = call(&registry, "findPetsByStatus", json!({"status": "available"})).await.result;
    assert!(pets.is_array(), "{pets}");
}

#[tokio::test]
async fn arguments_the_document_refuses_never_reach_the_server_and_prism_refuses_a_missing_key() {
    let prism = prism().await;
    let registry = tools_of(&config(&prism.url, "auth: {api_key: {header: api_key, env: HOME}}")).await;
    for (name, arguments) in [
        ("findPetsByStatus", json!({"status": "lost"})),
        ("getPetById", json!({"petId": "ten"})),
        ("getPetById", json!({})),
        ("addPet", json!({"body": {"name": "no photos"}})),
    ] {
        let outcome = call(&registry, name, arguments.clone()).await;
        assert_eq!(
            outcome.result["error"]["code"], "invalid_arguments",
            "{name} {arguments} → {}",
            outcome.result
        );
    }
    // The same operations without their security scheme: Prism refuses, and the model reads why.
    let bare = tools_of(&config(&prism.url, "")).await;
    let refused = call(&bare, "getInventory", json!({})).await;
    assert_eq!(refused.result["error"]["code"], "tool_failed", "{}", refused.result);
    let said = refused.result["error"]["message"].as_str().unwrap();
    assert!(said.contains("HTTP 401"), "{said}");
}
