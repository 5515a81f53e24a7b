//! The functions as Lambda runs them, under `cargo lambda watch` (the local Lambda runtime
//! emulator), with DynamoDB on moto and models on the scripted server:
//! - every sample event in `events/` is invoked with `cargo lambda invoke` and succeeds;
//! - a browser-style client POSTs to the orchestrator's Function URL path with a JWT and reads the
//!   SSE stream incrementally: `thinking` arrives before the model's first byte, the shopping
//!   agent runs remotely (its own function, over the local HTTP transport), the turn is stored;
//! - with traces on, both functions export to a real OTLP/HTTP receiver in this process: the turn
//!   joins the invocation's X-Ray trace, the shopping function continues the caller's trace from
//!   the request's `traceparent` field, and every span has arrived when the response ends;
//! - the chat function reads its endpoint settings (here the message limit) from its environment;
//! - a turn's stream is rejoined, and a turn stopped, through another instance of the function;
//! - an A2A task streams through the Function URL and is read back.
//!
//! Needs what `make test` provides: `BATON_TEST_VENV` (with `cargo-lambda`) and
//! `AWS_ENDPOINT_URL_DYNAMODB` (moto_server); `make test` runs it outside `cargo test` (see the
//! test's attribute).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::event::{Event, Status};
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{EpisodeKey, Store, SystemClock};
use baton_aws::DynamoDbStore;
use baton_tests::ASK_SHOPPING;
use baton_tests::{ORCH, SHOP, open_stream_with, text_of};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;

const SECRET: &str = "a-test-secret-that-is-long-enough-for-hs256";

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the Lambda tests through `make test`, which installs cargo-lambda and starts moto_server")
    })
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// `cargo lambda watch` in its own process group, stopped (with the functions it started) on drop.
struct Watch {
    child: Child,
    port: u16,
}

impl Watch {
    /// Starts the emulator on a free port; `env(port)` is the functions' environment.
    fn start(env: impl FnOnce(u16) -> Vec<(&'static str, String)>) -> Watch {
        Watch::start_with(&[], Stdio::null(), env)
    }

    /// [`Watch::start`] with more `watch` arguments, and the emulator's (and the functions')
    /// stdout to `stdout`.
    fn start_with(
        args: &[&str],
        stdout: Stdio,
        env: impl FnOnce(u16) -> Vec<(&'static str, String)>,
    ) -> Watch {
        use std::os::unix::process::CommandExt;
        let port = free_port();
        let venv = PathBuf::from(required_env("BATON_TEST_VENV"));
        let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let mut command = Command::new("cargo");
        command
            .args(["lambda", "watch", "--invoke-port", &port.to_string()])
            .args(args)
            .current_dir(workspace())
            .env("PATH", path)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("BATON_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null())
            .process_group(0);
        for var in [
            "OPENAI_API_KEY",
            "FORETHOUGHT_API_TOKEN",
            "BATON_STORE_PATH",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            command.env_remove(var);
        }
        for (k, v) in env(port) {
            command.env(k, v);
        }
        Watch { child: command.spawn().expect("cargo lambda watch starts"), port }
    }

    fn url(&self, function: &str) -> String {
        format!("http://127.0.0.1:{}/lambda-url/{function}/", self.port)
    }

    /// `cargo lambda invoke FUNCTION --data-file FILE`: its stdout, or a panic with its stderr.
    fn invoke(&self, function: &str, file: &Path) -> String {
        let venv = PathBuf::from(required_env("BATON_TEST_VENV"));
        let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let out = Command::new("cargo")
            .args(["lambda", "invoke", function, "--invoke-port", &self.port.to_string(), "--data-file"])
            .arg(file)
            .current_dir(workspace())
            .env("PATH", path)
            .output()
            .expect("cargo lambda invoke runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "invoking {function} with {} failed:\n{stdout}\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Waits until the emulator answers (the first start compiles the functions).
    async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        let client = reqwest::Client::new();
        loop {
            if client.get(format!("http://127.0.0.1:{}/", self.port)).send().await.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "cargo lambda watch did not start");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn jwt(sub: &str) -> String {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    encode(&Header::default(), &json!({"sub": sub, "exp": exp}), &EncodingKey::from_secret(SECRET.as_bytes()))
        .unwrap()
}

/// An RS256 key pair made with `openssl` for this run: (private key PEM, public key PEM).
fn rs256_key_pair(dir: &Path) -> (String, String) {
    let (private, public) = (dir.join("issuer.pem"), dir.join("issuer-public.pem"));
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        private.to_str().unwrap(),
    ]);
    run(&["pkey", "-in", private.to_str().unwrap(), "-pubout", "-out", public.to_str().unwrap()]);
    (std::fs::read_to_string(private).unwrap(), std::fs::read_to_string(public).unwrap())
}

/// A token for `sub` signed RS256 with `private_pem`, as an identity provider issues it.
fn rs256_jwt(sub: &str, private_pem: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    let key = EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap();
    encode(&Header::new(Algorithm::RS256), &json!({"sub": sub, "exp": exp}), &key).unwrap()
}

/// A Secrets Manager secret on moto holding `value`: its ARN.
async fn secret(name: &str, value: &str) -> String {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(required_env("AWS_ENDPOINT_URL_DYNAMODB"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
        .load()
        .await;
    let client = aws_sdk_secretsmanager::Client::new(&config);
    let name = format!("baton/{name}-{}", std::process::id());
    let created = client.create_secret().name(name).secret_string(value).send().await.unwrap();
    created.arn().unwrap().to_owned()
}

/// The `ttl` of every item of partition `pk`, read raw from the table.
/// The `ttl` of every item in partition `pk`, with each item's sort key.
async fn item_ttls(table: &str, pk: &str) -> Vec<(String, u64)> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(required_env("AWS_ENDPOINT_URL_DYNAMODB"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
        .load()
        .await;
    let items = aws_sdk_dynamodb::Client::new(&config)
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk.into()))
        .send()
        .await
        .unwrap();
    items
        .items()
        .iter()
        .map(|i| (i["sk"].as_s().unwrap().clone(), i["ttl"].as_n().unwrap().parse().unwrap()))
        .collect()
}

/// A fresh table, `baton-lambda-<pid>-<name>`.
async fn table(name: &str) -> (String, Arc<dyn Store>) {
    let endpoint = required_env("AWS_ENDPOINT_URL_DYNAMODB");
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let name = format!("baton-lambda-{}-{name}", std::process::id());
    baton_aws::table::create_table(&client, &name).await.expect("table created");
    let store: Arc<dyn Store> = Arc::new(DynamoDbStore::new(client, &name, Arc::new(SystemClock)));
    (name, store)
}

fn models(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", server.base_url()),
        ("BATON_ORCHESTRATOR_MODEL", ORCH.into()),
        ("BATON_SHOPPING_MODEL", SHOP.into()),
        ("BATON_MAX_RETRIES", "0".into()),
    ]
}

/// The emulator with the functions over the table `table_name` on moto, their models on
/// `server`, callers identified by a JWT signed with [`SECRET`].
fn jwt_watch(server: &ScriptedServer, table_name: &str) -> Watch {
    Watch::start(|_| {
        let mut env = models(server);
        env.push(("BATON_TABLE", table_name.to_owned()));
        env.push(("AWS_ENDPOINT_URL_DYNAMODB", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env.push(("BATON_AUTH", "jwt".into()));
        env.push(("BATON_JWT_HS256_SECRET", SECRET.into()));
        env
    })
}

// Ignored by `cargo test`: Cargo holds its build lock while tests run, and `cargo lambda watch`
// needs it to build the functions. `scripts/test.sh` runs this test's binary directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn the_functions_run_under_the_lambda_emulator() {
    let (table_name, store) = table("functions").await;
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::text("Hi there!"));
    server.set_default(SHOP, Reply::text("Two coffee offers."));
    let common = |extra: Vec<(&'static str, String)>| {
        let mut env = models(&server);
        env.push(("BATON_TABLE", table_name.clone()));
        env.push(("AWS_ENDPOINT_URL_DYNAMODB", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env.extend(extra);
        env
    };

    // Phase A: production auth (IAM); every sample event succeeds.
    {
        let watch = Watch::start(|_| {
            common(vec![
                ("BATON_AUTH", "iam".into()),
                ("BATON_HISTORY_TTL_DAYS", "2".into()),
                ("BATON_TURN_LOG_TTL_HOURS", "3".into()),
            ])
        });
        watch.ready().await;
        let events = workspace().join("events");
        for (file, function, expect) in [
            ("function-url.json", "orchestrator", "event: completed"),
            ("rest-api.json", "orchestrator", "event: completed"),
            ("shopping-invoke.json", "shopping", "\"type\":\"usage\""),
            ("schedule.json", "eval", "\"suite\":\"routing\""),
        ] {
            let out = watch.invoke(function, &events.join(file));
            assert!(out.contains(expect), "{file}: {out}");
            assert!(!out.contains("\"status\":\"error\""), "{file}: {out}");
        }
        // The Function URL event's IAM principal owns the turn, whatever its headers say.
        let key = EpisodeKey::new("AIDACKCEVSQ6C2EXAMPLE", "ep-function-url").unwrap();
        assert!(
            !store.recent_messages(&key, 10).await.unwrap().is_empty(),
            "the IAM principal's turn was recorded"
        );
        let key = EpisodeKey::new("mallory-the-header-is-ignored-under-iam", "ep-function-url").unwrap();
        assert!(store.recent_messages(&key, 10).await.unwrap().is_empty(), "never the header's user");
        // The REST API event's SigV4 signer (`requestContext.identity.caller`, which API Gateway
        // sets for IAM-authorised methods) owns its turn, not its headers.
        let key = EpisodeKey::new("AROAEXAMPLEROLEID:web-backend", "ep-rest-api").unwrap();
        assert!(!store.recent_messages(&key, 10).await.unwrap().is_empty(), "the REST signer's turn");
        let key = EpisodeKey::new("mallory-the-header-is-ignored-under-iam", "ep-rest-api").unwrap();
        assert!(store.recent_messages(&key, 10).await.unwrap().is_empty(), "never the header's user");
        // Its items expire BATON_HISTORY_TTL_DAYS (the template's HistoryTtlDays) after the write,
        // and the turn's event log BATON_TURN_LOG_TTL_HOURS (TurnLogTtlHours) after it.
        let ttls = item_ttls(&table_name, "USER#AROAEXAMPLEROLEID:web-backend#EP#ep-rest-api").await;
        let now = jsonwebtoken::get_current_timestamp();
        let (log, conversation): (Vec<_>, Vec<_>) = ttls.iter().partition(|(sk, _)| sk.starts_with("TURN#"));
        assert!(!conversation.is_empty() && !log.is_empty(), "{ttls:?}");
        let in_two_days = now + 2 * 86_400;
        assert!(conversation.iter().all(|(_, t)| t.abs_diff(in_two_days) < 600), "{ttls:?} vs {in_two_days}");
        let in_three_hours = now + 3 * 3_600;
        assert!(log.iter().all(|(_, t)| t.abs_diff(in_three_hours) < 600), "{ttls:?} vs {in_three_hours}");
        let eval = store.recent_messages(&EpisodeKey::new("eval", "routing").unwrap(), 10).await.unwrap();
        assert!(eval.iter().any(|m| m.content.contains("\"by_category\"")), "the eval summary was stored");
    }

    // Phase B: JWT auth as deployed (the issuer's RS256 public key read from Secrets Manager at
    // start, by ARN); a client streams a turn whose shopping agent runs in its own function.
    let keys = tempfile::tempdir().unwrap();
    let (private_pem, public_pem) = rs256_key_pair(keys.path());
    let key_arn = secret("jwt-public-key", &public_pem).await;
    let jwt = |sub: &str| rs256_jwt(sub, &private_pem);
    let gate = Arc::new(Semaphore::new(0));
    server.push(
        ORCH,
        Reply::text("Let me look.")
            .tool_call(ASK_SHOPPING, json!({"query": "find me coffee deals", "intent_count": 1}))
            .gated(gate.clone()),
    );
    let watch = Watch::start(|port| {
        common(vec![
            ("BATON_AUTH", "jwt".into()),
            ("BATON_JWT_PUBLIC_KEY_SECRET_ARN", key_arn.clone()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", required_env("AWS_ENDPOINT_URL_DYNAMODB")),
            ("BATON_SHOPPING_URL", format!("http://127.0.0.1:{port}/lambda-url/shopping/")),
            // The chat function's own endpoint settings, from its environment.
            ("BATON_MAX_MESSAGE_CHARS", "40".into()),
        ])
    });
    watch.ready().await;
    let requests_before = server.requests_for(ORCH).len();
    let shop_before = server.requests_for(SHOP).len();
    // A forged body field is refused; the user is the token's subject.
    // The first request builds and starts the function. A function whose start fails (a setting
    // it cannot use) is restarted by the emulator forever while the request waits: bounded here.
    let forged = reqwest::Client::new()
        .post(watch.url("orchestrator"))
        .bearer_auth(jwt("alice"))
        .json(&json!({"message": "hi", "user_id": "bob"}))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .expect("the orchestrator answers in jwt mode (did it start with its key from Secrets Manager?)");
    assert_eq!(forged.status(), 400);
    let no_token =
        reqwest::Client::new().post(watch.url("orchestrator")).json(&json!({"message": "hi"})).send();
    assert_eq!(no_token.await.unwrap().status(), 401);
    let other_key = rs256_jwt("alice", &rs256_key_pair(keys.path()).0);
    let other_signer = reqwest::Client::new()
        .post(watch.url("orchestrator"))
        .bearer_auth(other_key)
        .json(&json!({"message": "hi"}));
    assert_eq!(other_signer.send().await.unwrap().status(), 401, "a token of another key is refused");
    let long = reqwest::Client::new()
        .post(watch.url("orchestrator"))
        .bearer_auth(jwt("alice"))
        .json(&json!({"message": "x".repeat(41)}))
        .send()
        .await
        .unwrap();
    assert_eq!(long.status(), 413, "BATON_MAX_MESSAGE_CHARS is the Lambda endpoint's own setting");
    let body: serde_json::Value = long.json().await.unwrap();
    assert_eq!(body["error"]["code"], "message_too_long", "{body}");

    let body = json!({"message": "find me coffee deals", "episode_id": "e-lambda"});
    let mut stream = open_stream_with(&watch.url("orchestrator"), Some(&jwt("alice")), body).await;
    let first = stream.next().await.expect("a first event");
    let Event::Thinking { turn_id, .. } = &first.event else { panic!("{first:?}") };
    assert_eq!(first.id, format!("{turn_id}:1"), "the first event names the turn");
    let orch = server.requests_for(ORCH);
    assert!(
        orch[requests_before..].iter().all(|r| r.first_byte_at.is_none()),
        "thinking came before the model's first byte"
    );
    gate.add_permits(1);
    let events: Vec<Event> = stream.map(|r| r.event).collect().await;
    assert_eq!(text_of(&events, "shopping[1]"), "Two coffee offers.", "{events:?}");
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })), "{events:?}");
    assert_eq!(
        server.requests_for(SHOP).len() - shop_before,
        1,
        "the shopping function called its model once"
    );
    let stored = store.recent_messages(&EpisodeKey::new("alice", "e-lambda").unwrap(), 10).await.unwrap();
    let agents: Vec<&str> = stored.iter().map(|m| m.agent.as_str()).collect();
    assert_eq!(agents, ["user", "orchestrator", "shopping[1]"], "stored under the token's subject");
}

/// A turn's stream rejoined and a turn stopped through the Function URL, on another instance of
/// the function than the one that runs the turn (`--concurrency 2`: two processes, which share
/// the DynamoDB table alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn a_turn_is_rejoined_and_stopped_from_another_instance() {
    let (table_name, store) = table("durable").await;
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(SHOP, Reply::text("Two coffee offers."));
    let keys = tempfile::tempdir().unwrap();
    let (private_pem, public_pem) = rs256_key_pair(keys.path());
    let key_arn = secret("jwt-public-key-durable", &public_pem).await;
    let jwt = |sub: &str| rs256_jwt(sub, &private_pem);
    let watch = Watch::start_with(&["--concurrency", "2"], Stdio::null(), |_| {
        let mut env = models(&server);
        env.push(("BATON_TABLE", table_name.clone()));
        env.push(("AWS_ENDPOINT_URL_DYNAMODB", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env.push(("BATON_AUTH", "jwt".into()));
        env.push(("BATON_JWT_PUBLIC_KEY_SECRET_ARN", key_arn.clone()));
        env.push(("AWS_ENDPOINT_URL_SECRETS_MANAGER", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env
    });
    watch.ready().await;
    let url = watch.url("orchestrator");
    let get = |path: String, last: String| {
        reqwest::Client::new()
            .get(format!("{url}{path}"))
            .bearer_auth(jwt("alice"))
            .header("last-event-id", last)
            .timeout(Duration::from_secs(600))
            .send()
    };

    // Rejoin: the client leaves after `thinking`; the turn waits at its model's first byte.
    let gate = Arc::new(Semaphore::new(0));
    server.push(ORCH, Reply::text("Points post within a day.").gated(gate.clone()));
    let body = json!({"message": "when do my points post?", "episode_id": "e-durable"});
    let mut stream = open_stream_with(&url, Some(&jwt("alice")), body.clone()).await;
    let first = stream.next().await.expect("a first event");
    let Event::Thinking { turn_id, .. } = first.event.clone() else { panic!("{first:?}") };
    drop(stream);
    let path = format!("chat/e-durable/turns/{turn_id}/events");
    let other = reqwest::Client::new().get(format!("{url}{path}")).bearer_auth(jwt("mallory")).send();
    assert_eq!(other.await.unwrap().status(), 404, "another user's turn does not exist");
    let resumed = get(path.clone(), first.id.clone()).await.unwrap();
    assert_eq!(resumed.status(), 200);
    gate.add_permits(1);
    let events: Vec<_> = resumed.bytes_stream().eventsource().map(|e| e.unwrap()).collect::<Vec<_>>().await;
    let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
    let expected: Vec<String> = (2..2 + ids.len()).map(|n| format!("{turn_id}:{n}")).collect();
    assert_eq!(ids, expected, "every event after the last id, once, in order");
    let events: Vec<Event> =
        events.iter().map(|e| baton::event::decode_sse(&e.event, &e.data).unwrap()).collect();
    let said: String = events
        .iter()
        .filter_map(|e| if let Event::Text { text, .. } = e { Some(text.as_str()) } else { None })
        .collect();
    assert!(said.contains("Points post within a day."), "{events:?}");
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })), "{events:?}");

    // Stop: the turn waits at its model's first byte; the stop lands on the other instance and
    // reaches the turn through the store.
    let gate = Arc::new(Semaphore::new(0));
    server.push(ORCH, Reply::text("Never said.").gated(gate.clone()));
    let mut stream = open_stream_with(&url, Some(&jwt("alice")), body).await;
    let first = stream.next().await.expect("a first event");
    let Event::Thinking { turn_id, .. } = first.event.clone() else { panic!("{first:?}") };
    let cancel = reqwest::Client::new()
        .post(format!("{url}chat/e-durable/turns/{turn_id}/cancel"))
        .bearer_auth(jwt("alice"))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let rest: Vec<Event> =
        tokio::time::timeout(Duration::from_secs(30), stream.map(|r| r.event).collect::<Vec<_>>())
            .await
            .expect("the stop reaches the turn within seconds");
    gate.add_permits(1);
    assert!(matches!(rest.last(), Some(Event::Completed { status: Status::Cancelled, .. })), "{rest:?}");
    let key = EpisodeKey::new("alice", "e-durable").unwrap();
    let record = store.turn_record(&key, &turn_id).await.unwrap().expect("the turn's record");
    assert_eq!(record.status, baton::store::TurnStatus::Ended("cancelled".into()));
    assert!(record.cancel_requested);
}

/// Approvals on Lambda: the turn pauses on one instance (the call is not made), and the next
/// request, on any instance, answers it; the answered interrupt cannot be answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn a_paused_turn_is_resumed_by_the_next_request() {
    let (table_name, store) = table("approvals").await;
    let server = ScriptedServer::start().await.unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (private_pem, public_pem) = rs256_key_pair(keys.path());
    let key_arn = secret("jwt-public-key-approvals", &public_pem).await;
    let jwt = |sub: &str| rs256_jwt(sub, &private_pem);
    let config = workspace().join("examples/approvals.yaml");
    let watch = Watch::start_with(&["--concurrency", "2"], Stdio::null(), |_| {
        let mut env = models(&server);
        env.push(("BATON_CONFIG", config.display().to_string()));
        env.push(("BATON_TABLE", table_name.clone()));
        env.push(("AWS_ENDPOINT_URL_DYNAMODB", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env.push(("BATON_AUTH", "jwt".into()));
        env.push(("BATON_JWT_PUBLIC_KEY_SECRET_ARN", key_arn.clone()));
        env.push(("AWS_ENDPOINT_URL_SECRETS_MANAGER", required_env("AWS_ENDPOINT_URL_DYNAMODB")));
        env
    });
    watch.ready().await;
    let url = watch.url("orchestrator");
    // concierge → card_keeper → clip_offer (needs approval); both agents on the default model.
    server.push(
        ORCH,
        Reply::text("").tool_call("agent__card_keeper", json!({"text": "clip the coffee offer"})),
    );
    server.push(ORCH, Reply::text("").tool_call("clip_offer", json!({"offer": "coffee"})));
    let body = json!({"message": "clip the coffee offer", "episode_id": "e-approvals"});
    let events: Vec<Event> =
        open_stream_with(&url, Some(&jwt("alice")), body).await.map(|r| r.event).collect().await;
    let Some(Event::Completed { status: Status::Interrupted, interrupts, .. }) = events.last() else {
        panic!("{events:#?}")
    };
    let interrupt = interrupts[0].clone();
    assert_eq!(
        (interrupt.tool.as_str(), interrupt.path.clone()),
        ("clip_offer", vec!["concierge".into(), "card_keeper[1]".into()])
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::ToolResult { name, .. } if name == "clip_offer")),
        "not run"
    );
    let key = EpisodeKey::new("alice", "e-approvals").unwrap();
    assert!(store.approvals(&key).await.unwrap().is_some(), "the paused state is in the table");

    server.push(ORCH, Reply::text("Clipped the coffee offer to your card."));
    let answer = json!({"episode_id": "e-approvals", "resume": [{"interrupt_id": interrupt.interrupt_id, "decision": "approve"}]});
    let events: Vec<Event> =
        open_stream_with(&url, Some(&jwt("alice")), answer.clone()).await.map(|r| r.event).collect().await;
    assert!(matches!(events.last(), Some(Event::Completed { status: Status::Ok, .. })), "{events:#?}");
    let clipped = events.iter().find_map(|e| match e {
        Event::ToolResult { name, result, is_error: false, .. } if name == "clip_offer" => {
            Some(result.clone())
        }
        _ => None,
    });
    assert!(clipped.expect("the approved call ran")["card"].as_array().is_some_and(|c| c.len() == 1));
    let again = reqwest::Client::new()
        .post(&url)
        .bearer_auth(jwt("alice"))
        .json(&answer)
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    let error: serde_json::Value = again.json().await.unwrap();
    assert_eq!(error["error"]["code"], "interrupt_answered");
}

/// The front-end protocols through the Function URL: AG-UI's `HttpAgent` and the AI SDK's
/// transport and reader (tests/protocols) read a turn from `POST /agui` and `POST /ai-sdk`, and
/// the AI SDK's resume URL answers 204 once no turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn the_protocol_endpoints_serve_their_official_clients() {
    use baton_tests::protocols::{agui, agui_answers, ai_sdk, ai_sdk_answers};
    let (table_name, _store) = table("protocols").await;
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::text("Hello from Lambda."));
    let watch = jwt_watch(&server, &table_name);
    watch.ready().await;
    let url = watch.url("orchestrator");
    let base = url.trim_end_matches('/');
    let headers = json!({"authorization": format!("Bearer {}", jwt("alice"))});
    let answer = vec![("orchestrator".to_owned(), "Hello from Lambda.".to_owned())];

    let runs =
        agui(base, json!({"threadId": "th-lambda", "headers": headers, "runs": [{"message": "hi"}]})).await;
    assert!(runs[0]["error"].is_null(), "{}", runs[0]["error"]);
    assert_eq!(runs[0]["outcome"], "success");
    assert_eq!(agui_answers(&runs[0]), answer);

    let plan = json!({"chatId": "chat-lambda", "headers": headers, "requests": [{"message": "hi"}, {"reconnect": true}]});
    let requests = ai_sdk(base, plan).await;
    assert!(requests[0]["error"].is_null() && requests[0]["streamError"].is_null(), "{}", requests[0]);
    assert_eq!(ai_sdk_answers(&requests[0]), answer);
    assert_eq!(requests[0]["message"]["metadata"]["status"], "ok");
    assert!(requests[1]["empty"].as_bool().unwrap(), "no turn runs: 204 {}", requests[1]);

    let refused = reqwest::Client::new()
        .post(format!("{url}agui"))
        .bearer_auth(jwt("alice"))
        .json(&json!({"threadId": "th-lambda", "runId": "r", "messages": []}))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "missing_user_message", "the AG-UI checks answered: {body}");
}

/// A2A through the Function URL: the card declares the bearer JWT and names `…/a2a`; a
/// `SendStreamingMessage` is a task streamed as SSE (the task first, the text as artifact
/// chunks, `COMPLETED` last), and `GetTask` reads it back from the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn an_a2a_task_streams_through_the_function_url() {
    let (table_name, _store) = table("a2a").await;
    let server = ScriptedServer::start().await.unwrap();
    server.set_default(ORCH, Reply::text("Hello over A2A."));
    let watch = jwt_watch(&server, &table_name);
    watch.ready().await;
    let url = watch.url("orchestrator");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(600)).build().unwrap();
    let card = client.get(format!("{url}.well-known/agent-card.json")).bearer_auth(jwt("alice")).send().await;
    let card: serde_json::Value = card.unwrap().json().await.unwrap();
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer", "{card}");
    assert!(card["supportedInterfaces"][0]["url"].as_str().unwrap().ends_with("/a2a"), "{card}");

    let rpc = |method: &str, params: serde_json::Value| {
        client
            .post(format!("{url}a2a"))
            .bearer_auth(jwt("alice"))
            .header("a2a-version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
    };
    let message = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let response = rpc("SendStreamingMessage", message).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut items = Vec::new();
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) =
        tokio::time::timeout(Duration::from_secs(60), events.next()).await.expect("bounded")
    {
        let answer: serde_json::Value = serde_json::from_str(&event.unwrap().data).unwrap();
        items.push(answer["result"].clone());
    }
    assert_eq!(items[0]["task"]["status"]["state"], "TASK_STATE_WORKING", "the task first: {items:?}");
    let text: String =
        items.iter().filter_map(|i| i["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str()).collect();
    assert_eq!(text, "Hello over A2A.", "{items:?}");
    let last = items.last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED", "{items:?}");

    let task_id = items[0]["task"]["id"].clone();
    let read: serde_json::Value = rpc("GetTask", json!({"id": task_id})).await.unwrap().json().await.unwrap();
    assert_eq!(read["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{read}");
    assert_eq!(read["result"]["artifacts"][0]["parts"][0]["text"], "Hello over A2A.");
}

/// The X-Ray trace (`Root`, `Parent`) the emulator gave an invocation, as a trace id and span id:
/// its `invoke request` span, which `--print-traces` writes to stdout.
fn emulator_invocations(stdout: &str) -> Vec<(String, String)> {
    let after = |line: &str, key: &str| -> Option<String> {
        let rest = &line[line.find(key)? + key.len()..];
        let hex: String = rest
            .trim_start_matches(|c: char| !c.is_ascii_hexdigit())
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        Some(hex)
    };
    stdout
        .lines()
        .filter(|line| line.contains("invoke request"))
        .filter_map(|line| Some((after(line, "trace_id")?, after(line, "span_id")?)))
        .collect()
}

/// Traces under the Lambda emulator, exported to a real OTLP/HTTP receiver in this process:
/// - the orchestrator's turn is a child of the invocation's X-Ray trace (`Lambda-Runtime-Trace-Id`,
///   as the emulator made it);
/// - the remote shopping function continues the caller's trace from the request's `traceparent`
///   field (its handler reads the body only; its own invocation has another X-Ray trace), and its
///   model request carries it on;
/// - every span of both functions has arrived when the orchestrator's response has ended: the
///   batch exporters' schedule is set to a minute, so only the flush at the end of each
///   invocation can have sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn traces_cross_the_remote_agent_and_are_flushed_before_the_response_ends() {
    use baton_tests::otlp::{Receiver, hex};
    let receiver = Receiver::start().await;
    let (table_name, _store) = table("traces").await;
    let server = ScriptedServer::start().await.unwrap();
    server.push(
        ORCH,
        Reply::text("Let me look.")
            .tool_call(ASK_SHOPPING, json!({"query": "coffee deals", "intent_count": 1})),
    );
    server.set_default(ORCH, Reply::text("Hi there!"));
    server.set_default(SHOP, Reply::text("Two coffee offers."));
    let stdout_file = tempfile::NamedTempFile::new().unwrap();
    let watch = Watch::start_with(&["--print-traces"], Stdio::from(stdout_file.reopen().unwrap()), |port| {
        let mut env = models(&server);
        env.extend([
            ("BATON_TABLE", table_name.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB", required_env("AWS_ENDPOINT_URL_DYNAMODB")),
            ("BATON_AUTH", "jwt".into()),
            ("BATON_JWT_HS256_SECRET", SECRET.into()),
            ("BATON_SHOPPING_URL", format!("http://127.0.0.1:{port}/lambda-url/shopping/")),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url()),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000".into()),
        ]);
        env
    });
    watch.ready().await;

    let response = reqwest::Client::new()
        .post(watch.url("orchestrator"))
        .bearer_auth(jwt("alice"))
        .json(&json!({"message": "find me coffee deals", "episode_id": "e-traces"}))
        .send()
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    // The response has ended: what the receiver holds now is what was flushed before it did.
    let received = receiver.received();
    assert!(body.contains("event: completed") && body.contains("Two coffee offers."), "{body}");
    let names: Vec<(&str, &str)> =
        received.iter().map(|r| (r.service.as_str(), r.span.name.as_str())).collect();
    let one = |service: &str, name: &str| {
        let found: Vec<_> = received.iter().filter(|r| r.service == service && r.span.name == name).collect();
        assert_eq!(found.len(), 1, "one `{name}` span from {service} in {names:?}");
        found[0].span.clone()
    };
    let turn = one("baton-orchestrator", "turn orchestrator");
    let caller = one("baton-orchestrator", "invoke_agent shopping");
    let callee = one("baton-shopping", "invoke_agent shopping");
    let callee_chat = one("baton-shopping", &format!("chat {SHOP}"));
    let trace = hex(&turn.trace_id);

    // The turn is a child of the emulator's X-Ray trace for the orchestrator's invocation.
    let mut printed = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let invocations = loop {
        printed = std::fs::read_to_string(stdout_file.path()).unwrap_or(printed);
        let invocations = emulator_invocations(&printed);
        if invocations.len() >= 2 || Instant::now() > deadline {
            break invocations;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        invocations.contains(&(trace.clone(), hex(&turn.parent_span_id))),
        "the turn's trace {trace} and parent {} are an X-Ray invocation's: {invocations:?}",
        hex(&turn.parent_span_id)
    );

    // The remote function's spans are in the caller's trace, under the calling instance.
    assert!(received.iter().all(|r| hex(&r.span.trace_id) == trace), "one trace: {names:?}");
    assert_eq!(callee.parent_span_id, caller.span_id, "the callee's agent span is the caller's child");
    assert_eq!(callee_chat.parent_span_id, callee.span_id);
    // The shopping function's own invocation had another X-Ray trace: the request's field won.
    assert_eq!(invocations.len(), 2, "two invocations: {invocations:?}");
    assert_eq!(invocations.iter().filter(|(id, _)| *id == trace).count(), 1, "{invocations:?}");
    // …and its model request carried the trace on, naming the callee's model-call span.
    let sent = server.requests_for(SHOP)[0].traceparent.clone().expect("traceparent on the model request");
    assert_eq!(sent, format!("00-{trace}-{}-01", hex(&callee_chat.span_id)));
}

/// Secrets given by reference are read from Secrets Manager (moto) at start.
#[tokio::test]
async fn secret_references_resolve_through_secrets_manager() {
    let endpoint = required_env("AWS_ENDPOINT_URL_DYNAMODB");
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&endpoint)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
        .load()
        .await;
    let client = aws_sdk_secretsmanager::Client::new(&config);
    let name = format!("baton/openai-{}", std::process::id());
    let created =
        client.create_secret().name(&name).secret_string("sk-from-secrets-manager\n").send().await.unwrap();
    let arn = created.arn().unwrap().to_owned();
    assert_eq!(baton_aws::secrets::secret_string(&client, &arn).await.unwrap(), "sk-from-secrets-manager");
    let err = baton_aws::secrets::secret_string(&client, "baton/missing").await.unwrap_err();
    assert!(err.contains("baton/missing"), "{err}");
}

/// A team's Lambda function in Python as a tool (`lambda_tools:`, docs/tools.md): the model's
/// arguments are its event, its JSON answer the result, its exception an error carrying only its
/// message; invoked through the real AWS SDK client against `cargo lambda watch`'s Invoke API,
/// the function run by a Python runtime speaking the documented Runtime API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh outside cargo's build lock"]
async fn a_python_function_is_a_lambda_tool() {
    use baton::tool::{Tool, ToolContext};
    let venv = PathBuf::from(required_env("BATON_TEST_VENV"));
    let watch = Watch::start(|_| vec![("BATON_TOOL_PYTHON", venv.join("bin/python").display().to_string())]);
    watch.ready().await;
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(format!("http://127.0.0.1:{}", watch.port))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
        .load()
        .await;
    let spec: baton::config::tools::LambdaToolSpec = serde_json::from_value(json!({
        "function": "python-lambda",
        "description": "Books a rental car.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
        // The first invoke builds the shim binary.
        "timeout_seconds": 120
    }))
    .unwrap();
    let tool = baton_aws::lambda_tool::LambdaTool::new(
        "book_car",
        &spec,
        baton_aws::lambda_tool::client_of(&shared),
    );
    let context = ToolContext::default();
    let booked = tool.call(json!({"city": "Lisbon", "days": 3}), &context).await.unwrap();
    assert_eq!(booked, json!({"confirmation": "CAR-LIS-3D", "city": "Lisbon", "days": 3, "price_eur": 117}));
    let refused = tool.call(json!({"city": "Lisbon", "days": 40}), &context).await.unwrap_err();
    assert_eq!(refused.code(), "tool_failed");
    let said = refused.to_string();
    assert!(
        said.contains("`book_car`") && said.contains("days must be a whole number from 1 to 30"),
        "{said}"
    );
    assert!(!said.contains("Traceback") && !said.contains("cars_lambda.py"), "only the message: {said}");
}
