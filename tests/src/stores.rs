//! The stores under test: a fresh embedded store in a temporary directory, and a DynamoDB store on
//! a real `moto_server` (reset and given a fresh table for each test), optionally reached through
//! a [`FaultProxy`] that stages an outage (refused, black-holed, slow or reset connections).
//!
//! The DynamoDB endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB`, which `scripts/test.sh` exports
//! after starting `moto_server` on a free loopback port. Without it a DynamoDB test fails and
//! says so: it never passes silently.
//!
//! moto's reset is global to the server, so DynamoDB tests in one test binary take turns: each
//! [`Moto`] holds a process-wide lock until it is dropped. Test binaries run one at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use baton::store::embedded::EmbeddedStore;
use baton::store::item::Item;
use baton::store::{ManualClock, Store};
use baton_aws::DynamoDbStore;
use baton_aws::dynamodb::StoreTimeouts;

pub use crate::fault_proxy::{Fault, FaultProxy};

/// The environment variable naming the DynamoDB endpoint the tests use.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_DYNAMODB";
/// The table every DynamoDB test creates after resetting moto.
pub const TEST_TABLE: &str = "baton-test";
/// The history page size the DynamoDB tests use, small so that every read spans pages.
pub const TEST_PAGE_SIZE: usize = 3;

/// The moto endpoint, or a panic that says how to get one.
pub fn moto_endpoint() -> String {
    match std::env::var(ENDPOINT_VAR) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{ENDPOINT_VAR} is not set: the DynamoDB tests need a running moto_server. Run `make test` \
             (scripts/test.sh installs moto[server] into .venv, starts it and exports the variable), \
             or start `.venv/bin/moto_server -p 5005` and export {ENDPOINT_VAR}=http://127.0.0.1:5005"
        ),
    }
}

/// A store under test: how to make one, and what the contract suite needs beyond the trait.
#[async_trait::async_trait]
pub trait StoreHarness: Sized + Send + Sync + 'static {
    /// Starts an empty store on `clock`.
    async fn start(clock: Arc<ManualClock>) -> Self;
    /// The store.
    fn store(&self) -> Arc<dyn Store>;
    /// Writes an item as is (to plant an item of unknown shape).
    async fn put_raw(&self, pk: &str, sk: &str, item: &Item);
    /// Closes the store and opens it again on the same data.
    async fn reopen(self) -> Self;
}

/// A clock at a fixed, recent instant.
pub fn test_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)))
}

/// A fresh embedded store in a temporary directory.
pub struct Embedded {
    store: Option<Arc<EmbeddedStore>>,
    clock: Arc<ManualClock>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl StoreHarness for Embedded {
    async fn start(clock: Arc<ManualClock>) -> Embedded {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("data").join("store.redb");
        let store = EmbeddedStore::open(&path, clock.clone()).expect("embedded store opens");
        Embedded { store: Some(Arc::new(store)), clock, path, _dir: dir }
    }

    fn store(&self) -> Arc<dyn Store> {
        self.store.clone().expect("open")
    }

    async fn put_raw(&self, pk: &str, sk: &str, item: &Item) {
        self.store.as_ref().expect("open").put_raw(pk, sk, item).await.expect("raw put");
    }

    async fn reopen(mut self) -> Embedded {
        let store = self.store.take().expect("open");
        assert_eq!(Arc::strong_count(&store), 1, "the test still holds the store");
        drop(store);
        self.store = Some(Arc::new(EmbeddedStore::open(&self.path, self.clock.clone()).expect("reopens")));
        self
    }
}

static MOTO_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A DynamoDB store on a freshly reset moto_server with a new test table.
pub struct Moto {
    store: Arc<DynamoDbStore>,
    clock: Arc<ManualClock>,
    endpoint: String,
    proxy: Option<FaultProxy>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// The timeouts of the tests' DynamoDB clients: the production defaults with a quicker first
/// retry (moto on a busy machine can be slow, so no attempt timeout is shorter than production's).
pub fn test_timeouts() -> StoreTimeouts {
    StoreTimeouts { initial_backoff: Duration::from_millis(20), ..StoreTimeouts::default() }
}

/// A DynamoDB client for `endpoint` with test credentials and [`test_timeouts`].
pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    dynamodb_client_with(endpoint, test_timeouts())
}

/// A DynamoDB client for `endpoint` with test credentials and these timeouts, configured as
/// the production store configures its client ([`StoreTimeouts::apply`]).
pub fn dynamodb_client_with(endpoint: &str, timeouts: StoreTimeouts) -> aws_sdk_dynamodb::Client {
    let builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "baton-tests"));
    aws_sdk_dynamodb::Client::from_conf(timeouts.apply(builder).build())
}

/// Resets moto (drops every table and item) and creates the test table.
pub async fn reset_moto(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let reset = reqwest::Client::new()
        .post(format!("{endpoint}/moto-api/reset"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto_server at {endpoint} does not answer: {e}"));
    assert!(reset.status().is_success(), "moto reset failed: {}", reset.status());
    let client = dynamodb_client(endpoint);
    baton_aws::table::create_table(&client, TEST_TABLE).await.expect("test table created");
    client
}

impl Moto {
    /// Like [`StoreHarness::start`], with the store reaching moto through a [`FaultProxy`].
    pub async fn start_behind_proxy(clock: Arc<ManualClock>) -> Moto {
        Moto::start_behind_proxy_with(clock, test_timeouts()).await
    }

    /// [`Moto::start_behind_proxy`] with the store's client on these timeouts.
    pub async fn start_behind_proxy_with(clock: Arc<ManualClock>, timeouts: StoreTimeouts) -> Moto {
        let mut moto = Moto::start(clock).await;
        let target = moto.endpoint.strip_prefix("http://").expect("an http:// endpoint").to_owned();
        let proxy = FaultProxy::start(&target).await;
        let client = dynamodb_client_with(&proxy.url(), timeouts);
        moto.store = Arc::new(
            DynamoDbStore::new(client, TEST_TABLE, moto.clock.clone()).with_page_size(TEST_PAGE_SIZE),
        );
        moto.proxy = Some(proxy);
        moto
    }

    /// The proxy in front of moto (with [`Moto::start_behind_proxy`]).
    pub fn proxy(&self) -> &FaultProxy {
        self.proxy.as_ref().expect("started behind a proxy")
    }

    /// The moto endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

#[async_trait::async_trait]
impl StoreHarness for Moto {
    async fn start(clock: Arc<ManualClock>) -> Moto {
        let endpoint = moto_endpoint();
        let turn = MOTO_TURN.lock().await;
        let client = reset_moto(&endpoint).await;
        let store = DynamoDbStore::new(client, TEST_TABLE, clock.clone()).with_page_size(TEST_PAGE_SIZE);
        Moto { store: Arc::new(store), clock, endpoint, proxy: None, _turn: turn }
    }

    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    async fn put_raw(&self, pk: &str, sk: &str, item: &Item) {
        self.store.put_raw(pk, sk, item).await.expect("raw put");
    }

    async fn reopen(mut self) -> Moto {
        let client = dynamodb_client(&self.endpoint);
        self.store = Arc::new(
            DynamoDbStore::new(client, TEST_TABLE, self.clock.clone()).with_page_size(TEST_PAGE_SIZE),
        );
        self
    }
}

/// Runs each generic test `async fn name<H: StoreHarness>()` of the calling module against both
/// stores: `embedded::name` and `dynamodb::name` (moto_server), on a two-thread runtime.
#[macro_export]
macro_rules! for_both_stores {
    ($($name:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<$crate::stores::Embedded>().await;
                }
            )+
        }
        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<$crate::stores::Moto>().await;
                }
            )+
        }
    };
}

/// A team's YAML served by the real endpoint over store `H`, its models on one scripted server:
/// chat as `alice` in episode `e1` and read what was stored.
pub struct Team<H> {
    /// The store.
    pub harness: H,
    /// The models.
    pub server: baton::model::scripted::ScriptedServer,
    /// The chat endpoint.
    pub endpoint: crate::Endpoint,
}

impl<H: StoreHarness> Team<H> {
    /// Starts a store, a scripted server and the endpoint of `yaml` (panics if it is invalid).
    pub async fn start(yaml: &str) -> Team<H> {
        let harness = H::start(test_clock()).await;
        let server = baton::model::scripted::ScriptedServer::start().await.expect("scripted server");
        let config =
            crate::scripted_runtime_config(&server).with_yaml(yaml, "team.yaml").expect("the team is valid");
        let endpoint = crate::start_endpoint_with(&config.into(), harness.store()).await;
        Team { harness, server, endpoint }
    }

    /// One turn of `message`: every event the client received.
    pub async fn chat(&self, message: &str) -> Vec<baton::event::Event> {
        use futures::StreamExt;
        let body = serde_json::json!({"message": message, "episode_id": "e1"});
        crate::open_stream_as(&self.endpoint.url, "alice", body).await.map(|r| r.event).collect().await
    }

    /// The episode's stored messages, oldest first.
    pub async fn stored(&self) -> Vec<baton::store::StoredMessage> {
        let key = baton::store::EpisodeKey::new("alice", "e1").expect("valid key");
        self.harness.store().recent_messages(&key, 100).await.expect("store reads")
    }
}
