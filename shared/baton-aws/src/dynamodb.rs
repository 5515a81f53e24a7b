//! The DynamoDB store: the production [`Store`] (each of its concerns), one table keyed as
//! docs/storage.md ("DynamoDB (production)") says (see [`baton::store`] for the items).
//!
//! - Expiry: every item carries `ttl`; DynamoDB deletes lazily, so reads drop expired items
//!   themselves (after decoding, so a malformed `ttl` is reported rather than hidden), and a new
//!   message in an episode whose item has expired but is still there deletes it first, so the
//!   episode starts afresh (version 1, no vendor state) as it does in the embedded store.
//! - Reads that may span pages are one `Query` read through the SDK's paginator, at most
//!   `DEFAULT_QUERY_PAGE_CAP` pages ([`DynamoDbStore::with_query_page_cap`]) of `Limit` = the
//!   page size (or fewer when fewer items are wanted), stopping as soon as enough are in hand.
//! - Reads are strongly consistent: a turn must see the message the previous turn just wrote.
//! - Every call is bounded by the SDK's own timeout and retry configuration ([`StoreTimeouts`]:
//!   connect, per attempt, per operation including its retries), so a table that accepts
//!   connections and never answers is a retryable [`StoreError::Unavailable`] within the
//!   operation timeout, never a hung turn. Retried `TransactWriteItems` are idempotent: the SDK
//!   fills their `ClientRequestToken`.
//!
//! # Layout
//! - this file: [`DynamoDbStore`], its client settings and shared calls (get, versioned put,
//!   transactions and their errors), its clock and its [`ApprovalRecords`];
//! - `conversations`: [`Conversations`] (episode, messages, request ids);
//! - `leases`: [`Leases`];
//! - `turn_log`: [`TurnLog`], a turn's event log and record (docs/storage.md, "Turn logs");
//! - `query`: `query_pages`, the one way a query reads several pages, bounded;
//! - `attrs`: items between Baton's attributes and DynamoDB's, keys included.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem};
use baton::store::item::{self, Item};
use baton::store::{
    APPROVALS_SK, ApprovalRecords, Clock, Clocked, DEFAULT_RETENTION, DEFAULT_TURN_LOG_TTL, EpisodeKey,
    StoreError, is_expired, ttl_after,
};
#[cfg(doc)]
use baton::store::{Conversations, Leases, Store, TurnLog};

use crate::error::sdk_error;

mod attrs;
mod conversations;
mod leases;
mod query;
mod turn_log;

pub(crate) use query::DEFAULT_QUERY_PAGE_CAP;

use attrs::{from_dynamo, key, string_of, to_attribute, to_dynamo};

/// DynamoDB allows at most this many actions in one transaction.
const MAX_TRANSACTION_ITEMS: usize = 100;

/// How long DynamoDB calls may take and how often they are tried, applied through the SDK's
/// [`TimeoutConfig`] and [`RetryConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTimeouts {
    /// Establishing a connection.
    pub connect: Duration,
    /// One attempt: request sent to response read.
    pub attempt: Duration,
    /// One operation, every attempt and backoff included: the most a store call can take.
    pub operation: Duration,
    /// Attempts per operation (the first included); throttling, 5xx, connection failures and
    /// attempt timeouts are retried, with the SDK's jittered exponential backoff.
    pub max_attempts: u32,
    /// The backoff before the first retry.
    pub initial_backoff: Duration,
}

impl Default for StoreTimeouts {
    /// DynamoDB answers in milliseconds; a turn must not wait long for one that does not: 2 s to
    /// connect, 3 s per attempt, 3 attempts, 8 s in all.
    fn default() -> StoreTimeouts {
        StoreTimeouts {
            connect: Duration::from_secs(2),
            attempt: Duration::from_secs(3),
            operation: Duration::from_secs(8),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
        }
    }
}

impl StoreTimeouts {
    /// The SDK's timeout configuration for these values.
    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }

    /// The SDK's retry configuration for these values.
    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig::standard()
            .with_max_attempts(self.max_attempts.max(1))
            .with_initial_backoff(self.initial_backoff)
    }

    /// `builder` with these timeouts and retries.
    pub fn apply(&self, builder: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
        builder.timeout_config(self.timeout_config()).retry_config(self.retry_config())
    }

    /// A client from the shared AWS configuration (region, credentials, endpoint) with these
    /// timeouts and retries.
    pub fn client(&self, shared: &aws_config::SdkConfig) -> Client {
        Client::from_conf(self.apply(aws_sdk_dynamodb::config::Builder::from(shared)).build())
    }
}

/// A [`Store`] on one DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
    clock: Arc<dyn Clock>,
    retention: Duration,
    turn_log_ttl: Duration,
    page_size: i32,
    query_page_cap: usize,
}

impl DynamoDbStore {
    /// A store on `table` through `client`; items live for [`DEFAULT_RETENTION`] after their
    /// last write, and history is read 100 items a page.
    pub fn new(client: Client, table: impl Into<String>, clock: Arc<dyn Clock>) -> DynamoDbStore {
        DynamoDbStore {
            client,
            table: table.into(),
            clock,
            retention: DEFAULT_RETENTION,
            turn_log_ttl: DEFAULT_TURN_LOG_TTL,
            page_size: 100,
            query_page_cap: DEFAULT_QUERY_PAGE_CAP,
        }
    }

    /// A store on `table` with the standard AWS configuration from the environment (region,
    /// credentials, and `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL` for a local server) and
    /// the default [`StoreTimeouts`].
    pub async fn from_env(table: impl Into<String>, clock: Arc<dyn Clock>) -> DynamoDbStore {
        DynamoDbStore::from_env_with(table, clock, StoreTimeouts::default()).await
    }

    /// [`DynamoDbStore::from_env`] with these timeouts and retries.
    pub async fn from_env_with(
        table: impl Into<String>,
        clock: Arc<dyn Clock>,
        timeouts: StoreTimeouts,
    ) -> DynamoDbStore {
        let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        DynamoDbStore::new(timeouts.client(&shared), table, clock)
    }

    /// Items live for `retention` after their last write.
    pub fn with_retention(mut self, retention: Duration) -> DynamoDbStore {
        self.retention = retention;
        self
    }

    /// A turn log's items live for `ttl` after their write.
    pub fn with_turn_log_ttl(mut self, ttl: Duration) -> DynamoDbStore {
        self.turn_log_ttl = ttl;
        self
    }

    /// Reads history and turn logs `page_size` items per request (at least 1).
    pub fn with_page_size(mut self, page_size: usize) -> DynamoDbStore {
        self.page_size = page_size.clamp(1, i32::MAX as usize) as i32;
        self
    }

    /// Reads at most `pages` pages (at least 1) in one query: a read that would need more fails
    /// as [`StoreError::Failed`] (`DEFAULT_QUERY_PAGE_CAP` unless told otherwise).
    pub fn with_query_page_cap(mut self, pages: usize) -> DynamoDbStore {
        self.query_page_cap = pages.max(1);
        self
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn ttl(&self, now_ms: u64) -> u64 {
        ttl_after(now_ms, self.retention)
    }

    /// Writes one item as is, bypassing every check. For repair tools and for tests that need an
    /// item of unknown shape.
    pub async fn put_raw(&self, pk: &str, sk: &str, item: &Item) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(pk, sk, item)))
            .send()
            .await
            .map_err(|e| sdk_error("put item", e))?;
        Ok(())
    }

    /// Puts `item` at `pk`/`sk` if the stored item's `version` is still `expected` (0: absent, or
    /// past its `ttl` and not yet deleted): an optimistic write of a versioned item (the episode,
    /// the approvals record). Otherwise [`StoreError::Conflict`].
    async fn put_versioned(
        &self,
        pk: &str,
        sk: &str,
        item: &Item,
        expected: u64,
        what: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(pk, sk, item)))
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now", AttributeValue::N((now / 1000).to_string()));
        let request = if expected == 0 {
            // Absent, or expired and not yet deleted.
            request.condition_expression("attribute_not_exists(pk) OR #ttl <= :now")
        } else {
            request
                .condition_expression("#version = :expected AND #ttl > :now")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()))
        };
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Err(StoreError::Conflict {
                    key: item::item_name(pk, sk),
                    reason: format!("version {expected} is no longer the stored version"),
                })
            }
            Err(e) => Err(sdk_error(what, e)),
        }
    }

    async fn get(&self, pk: &str, sk: &str, now_ms: u64) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("get item", e))?;
        let Some(raw) = out.item() else { return Ok(None) };
        let item = from_dynamo(pk, sk, raw)?;
        match item::ttl_of(pk, sk, &item)? {
            Some(ttl) if is_expired(ttl, now_ms) => Ok(None),
            _ => Ok(Some(item)),
        }
    }

    async fn transact(
        &self,
        actions: Vec<TransactWriteItem>,
    ) -> Result<(), SdkError<TransactWriteItemsError>> {
        self.client.transact_write_items().set_transact_items(Some(actions)).send().await?;
        Ok(())
    }
}

fn build(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Failed(format!("invalid request: {e}"))
}

/// Why each action of a cancelled transaction failed (empty for any other error).
fn cancellation_reasons(e: &SdkError<TransactWriteItemsError>) -> &[CancellationReason] {
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(c)) => c.cancellation_reasons(),
        _ => &[],
    }
}

/// Whether a cancelled transaction's `index`th action failed its condition.
fn condition_failed_at(e: &SdkError<TransactWriteItemsError>, index: usize) -> bool {
    cancellation_reasons(e).get(index).and_then(|r| r.code()) == Some("ConditionalCheckFailed")
}

/// Whether a transaction was cancelled for a passing reason: another transaction on the same item
/// at the same moment (two turns of one episode), or throttling. Trying again may succeed.
fn cancelled_transiently(reasons: &[CancellationReason]) -> bool {
    reasons.iter().any(|r| {
        matches!(
            r.code(),
            Some(
                "TransactionConflict"
                    | "ThrottlingError"
                    | "ProvisionedThroughputExceeded"
                    | "RequestLimitExceeded"
            )
        )
    })
}

/// Maps a failed transaction: a transient cancellation is `Unavailable`, the rest as
/// [`sdk_error`] says.
fn transaction_error(what: &str, e: SdkError<TransactWriteItemsError>) -> StoreError {
    if cancelled_transiently(cancellation_reasons(&e)) {
        let codes: Vec<&str> = cancellation_reasons(&e).iter().filter_map(|r| r.code()).collect();
        StoreError::Unavailable(format!("{what}: transaction cancelled ({})", codes.join(", ")))
    } else {
        sdk_error(what, e)
    }
}

impl Clocked for DynamoDbStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }
}

#[async_trait::async_trait]
impl ApprovalRecords for DynamoDbStore {
    async fn approvals(&self, key: &EpisodeKey) -> Result<Option<(u64, String)>, StoreError> {
        let pk = key.pk();
        let item = self.get(&pk, APPROVALS_SK, self.clock.now_ms()).await?;
        item.map(|i| item::decode_approvals(&pk, APPROVALS_SK, &i)).transpose()
    }

    async fn save_approvals(
        &self,
        key: &EpisodeKey,
        body: &str,
        expected: u64,
        keep_until_s: u64,
    ) -> Result<u64, StoreError> {
        let item = item::encode_approvals(body, expected + 1, keep_until_s);
        self.put_versioned(&key.pk(), APPROVALS_SK, &item, expected, "save approvals").await?;
        Ok(expected + 1)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use baton::store::StoredMessage;

    use super::*;

    #[test]
    fn clients_built_from_shared_config_have_bounded_calls() {
        // The path of `DynamoDbStore::from_env`, without reading this machine's environment.
        let shared =
            aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        let client = StoreTimeouts::default().client(&shared);
        let config = client.config();
        let timeouts = config.timeout_config().expect("a timeout configuration");
        let wanted = StoreTimeouts::default();
        assert_eq!(timeouts.connect_timeout(), Some(wanted.connect));
        assert_eq!(timeouts.operation_attempt_timeout(), Some(wanted.attempt));
        assert_eq!(timeouts.operation_timeout(), Some(wanted.operation));
        let retry = config.retry_config().expect("a retry configuration");
        assert_eq!(retry.max_attempts(), wanted.max_attempts);
    }

    #[test]
    fn attributes_round_trip() {
        let item = item::encode_message(&StoredMessage::user("t1", "hi", 5), 9);
        let raw = to_dynamo("P", "MSG#t1#0000", &item);
        assert_eq!(raw["pk"], AttributeValue::S("P".into()));
        assert_eq!(from_dynamo("P", "MSG#t1#0000", &raw).unwrap(), item);
    }

    #[test]
    fn conflicting_or_throttled_transactions_are_transient_and_failed_conditions_are_not() {
        let reasons = |codes: &[&str]| -> Vec<CancellationReason> {
            codes.iter().map(|c| CancellationReason::builder().code(*c).build()).collect()
        };
        assert!(cancelled_transiently(&reasons(&["None", "TransactionConflict", "None"])));
        assert!(cancelled_transiently(&reasons(&["ThrottlingError"])));
        assert!(!cancelled_transiently(&reasons(&["ConditionalCheckFailed", "None"])));
        assert!(!cancelled_transiently(&[]));
    }

    #[test]
    fn an_unsupported_attribute_type_is_corrupt_and_named() {
        let raw = HashMap::from([("content".to_owned(), AttributeValue::Ss(vec!["a".into()]))]);
        let err = from_dynamo("USER#u#EP#e", "MSG#t#0001", &raw).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { key, reason } if key == "USER#u#EP#e / MSG#t#0001" && reason.starts_with("`content`")),
            "{err}"
        );
    }
}
