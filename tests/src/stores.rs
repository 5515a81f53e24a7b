//! The stores under test: a fresh embedded store in a temporary directory, and a DynamoDB store on
//! a real `moto_server` (reset and given a fresh table for each test), optionally reached through
//! a TCP proxy that can be switched off to stage an outage.
//!
//! The DynamoDB endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB`, which `scripts/test.sh` exports
//! after starting `moto_server` on a free loopback port. Without it a DynamoDB test fails and
//! says so: it never passes silently.
//!
//! moto's reset is global to the server, so DynamoDB tests in one test binary take turns: each
//! [`Moto`] holds a process-wide lock until it is dropped. Test binaries run one at a time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use baton::store::embedded::EmbeddedStore;
use baton::store::item::Item;
use baton::store::{ManualClock, Store};
use baton_aws::DynamoDbStore;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

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
    proxy: Option<TcpProxy>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// A DynamoDB client for `endpoint` with test credentials and quick, bounded retries.
pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "baton-tests"))
        .retry_config(
            RetryConfig::standard().with_max_attempts(2).with_initial_backoff(Duration::from_millis(20)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
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
    /// Like [`StoreHarness::start`], with the store reaching moto through a [`TcpProxy`].
    pub async fn start_behind_proxy(clock: Arc<ManualClock>) -> Moto {
        let mut moto = Moto::start(clock).await;
        let target = moto.endpoint.strip_prefix("http://").expect("an http:// endpoint").to_owned();
        let proxy = TcpProxy::start(&target).await;
        let client = dynamodb_client(&format!("http://{}", proxy.addr()));
        moto.store = Arc::new(
            DynamoDbStore::new(client, TEST_TABLE, moto.clock.clone()).with_page_size(TEST_PAGE_SIZE),
        );
        moto.proxy = Some(proxy);
        moto
    }

    /// The proxy in front of moto (with [`Moto::start_behind_proxy`]).
    pub fn proxy(&self) -> &TcpProxy {
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

/// A TCP forwarder on loopback that can be taken down and brought back, to stage an outage of the
/// server behind it without losing that server's data.
pub struct TcpProxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Forwards `127.0.0.1:<free port>` to `target` (`host:port`).
    pub async fn start(target: &str) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let target = target.to_owned();
        let task = {
            let (up, connections) = (up.clone(), connections.clone());
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        // Down: the connection is closed at once, as a dead server's would be.
                        drop(inbound);
                        continue;
                    }
                    let target = target.clone();
                    let forward = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(&target).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    connections.lock().expect("lock").push(forward.abort_handle());
                }
            })
        };
        TcpProxy { addr, up, connections, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes the proxy down (cutting every open connection) or brings it back.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for connection in self.connections.lock().expect("lock").drain(..) {
                connection.abort();
            }
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.set_up(false);
        self.task.abort();
    }
}
