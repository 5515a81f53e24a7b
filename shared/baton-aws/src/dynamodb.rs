//! The DynamoDB store: the production [`Store`], one table keyed as docs/storage.md ("DynamoDB
//! (production)") says (see [`baton::store`] for the items).
//!
//! - Idempotency: the user message, its request-id marker and the episode touch are one
//!   `TransactWriteItems`; the marker's put is conditional on the marker being absent (or
//!   expired), so a repeated request id cancels the whole write.
//! - Optimistic locking: [`Store::save_episode`] is a put conditional on the stored `version`.
//! - Expiry: every item carries `ttl`; DynamoDB deletes lazily, so reads drop expired items
//!   themselves (after decoding, so a malformed `ttl` is reported rather than hidden), and a new
//!   message in an episode whose item has expired but is still there deletes it first, so the
//!   episode starts afresh (version 1, no vendor state) as it does in the embedded store.
//! - Long histories are read newest first a page at a time (`Limit` = the page size, or fewer
//!   when fewer messages are still wanted; then `ExclusiveStartKey`) until enough are in hand.
//! - Reads are strongly consistent: a turn must see the message the previous turn just wrote.
//! - Every call is bounded by the SDK's own timeout and retry configuration ([`StoreTimeouts`]:
//!   connect, per attempt, per operation including its retries), so a table that accepts
//!   connections and never answers is a retryable [`StoreError::Unavailable`] within the
//!   operation timeout, never a hung turn. Retried `TransactWriteItems` are idempotent: the SDK
//!   fills their `ClientRequestToken`.
//!
//! # Layout
//! - this file: [`DynamoDbStore`] and its [`Store`] calls;
//! - `attrs`: items between Baton's attributes and DynamoDB's, keys included;
//! - `turn_log`: a turn's event log and record (docs/storage.md, "Turn logs").

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, Delete, Put, TransactWriteItem, Update};
use baton::store::item::{self, Item};
use baton::store::{
    APPROVALS_SK, CancelOutcome, Clock, DEFAULT_RETENTION, DEFAULT_TURN_LOG_TTL, Episode, EpisodeKey,
    LeaseGrant, LoggedEvent, META_SK, MSG_PREFIX, MessageCursor, Recorded, Store, StoreError, StoredMessage,
    TurnRecord, is_expired, lease_expiry, lease_sk, request_sk, ttl_after,
};

use crate::error::sdk_error;
use crate::table::SORT_KEY;

mod attrs;
mod turn_log;

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
}

impl DynamoDbStore {
    /// The newest `count` unexpired messages of the episode, newest first, below the message
    /// whose sort key is `below` (every message when `None`): what `recent_messages` and
    /// `messages_page` both read, a page of the table at a time, strongly consistent.
    async fn newest_messages(
        &self,
        key: &EpisodeKey,
        below: Option<String>,
        count: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let (now, pk) = (self.clock.now_ms(), key.pk());
        // BETWEEN is inclusive: the message `below` names is read and skipped. "MSG$" sorts
        // after every `MSG#…` key, so without it the range is every message.
        let high = below.clone().unwrap_or_else(|| "MSG$".to_owned());
        let mut out = Vec::new();
        let mut start = None;
        while out.len() < count {
            let wanted = count - out.len() + usize::from(below.is_some() && start.is_none());
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
                .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
                .expression_attribute_values(":low", AttributeValue::S(MSG_PREFIX.into()))
                .expression_attribute_values(":high", AttributeValue::S(high.clone()))
                .scan_index_forward(false)
                .limit(self.page_size.min(i32::try_from(wanted).unwrap_or(i32::MAX)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk_error("read history", e))?;
            for raw in page.items() {
                let sk = string_of(raw, SORT_KEY).ok_or_else(|| StoreError::Corrupt {
                    key: item::item_name(&pk, "?"),
                    reason: "a message item has no string sort key".into(),
                })?;
                let item = from_dynamo(&pk, &sk, raw)?;
                let expired = item::ttl_of(&pk, &sk, &item)?.is_some_and(|ttl| is_expired(ttl, now));
                if !expired && Some(&sk) != below.as_ref() && out.len() < count {
                    out.push(item::decode_message(&pk, &sk, &item)?);
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(out)
    }

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

    /// The transaction that records a user message: the request-id marker (if any, conditional
    /// on being new), the message, and the episode touch (conditional on the episode item being
    /// absent or live).
    fn user_message_actions(
        &self,
        pk: &str,
        message: &StoredMessage,
        marker_sk: Option<&str>,
        now_ms: u64,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let ttl = self.ttl(now_ms);
        let now_s = AttributeValue::N((now_ms / 1000).to_string());
        let mut actions = Vec::new();
        if let Some(sk) = marker_sk {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(to_dynamo(pk, sk, &item::encode_request(&message.turn_id, ttl))))
                .condition_expression("attribute_not_exists(pk) OR #ttl <= :now_s")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now_s", now_s.clone())
                .build()
                .map_err(build)?;
            actions.push(TransactWriteItem::builder().put(put).build());
        }
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(pk, &message.sk(), &item::encode_message(message, ttl))))
            .build()
            .map_err(build)?;
        actions.push(TransactWriteItem::builder().put(put).build());
        let touch = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk, META_SK)))
            .condition_expression("attribute_not_exists(pk) OR #ttl > :now_s")
            .update_expression(
                "SET created_at = if_not_exists(created_at, :now), updated_at = :now, \
                 #version = if_not_exists(#version, :zero) + :one, #ttl = :ttl",
            )
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":now_s", now_s)
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
            .build()
            .map_err(build)?;
        actions.push(TransactWriteItem::builder().update(touch).build());
        Ok(actions)
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

/// How often a transaction cancelled by a conflicting one is tried again.
const CONFLICT_RETRIES: u32 = 3;

#[async_trait::async_trait]
impl Store for DynamoDbStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        let now = self.clock.now_ms();
        self.get(&key.pk(), META_SK, now).await?.map(|i| item::decode_episode(key, &i)).transpose()
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        let now = self.clock.now_ms();
        let pk = episode.key.pk();
        let next = Episode {
            version: episode.version + 1,
            updated_at: now,
            created_at: if episode.version == 0 { now } else { episode.created_at },
            ..episode.clone()
        };
        let item = item::encode_episode(&next, self.ttl(now));
        self.put_versioned(&pk, META_SK, &item, episode.version, "save episode").await?;
        Ok(next)
    }

    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        let now = self.clock.now_ms();
        let pk = key.pk();
        let marker_sk = request_id.map(request_sk);
        let touch_index = usize::from(marker_sk.is_some()) + 1;
        let mut cleared_expired = false;
        let mut conflicts = 0;
        loop {
            let actions = self.user_message_actions(&pk, message, marker_sk.as_deref(), now)?;
            let e = match self.transact(actions).await {
                Ok(()) => return Ok(Recorded::New),
                Err(e) => e,
            };
            if cancelled_transiently(cancellation_reasons(&e)) && conflicts < CONFLICT_RETRIES {
                // Two turns of one episode touched its item at once: back off a little, jittered.
                conflicts += 1;
                let pause = 10u64 << conflicts;
                tokio::time::sleep(Duration::from_millis(pause + fastrand::u64(0..pause))).await;
                continue;
            }
            if let Some(sk) = marker_sk.as_deref().filter(|_| condition_failed_at(&e, 0)) {
                return match self.get(&pk, sk, now).await? {
                    Some(seen) => Ok(Recorded::Duplicate { turn_id: item::decode_request(&pk, sk, &seen)? }),
                    None => Err(StoreError::Conflict {
                        key: item::item_name(&pk, sk),
                        reason: "the request id was being recorded concurrently; retry".into(),
                    }),
                };
            }
            if cleared_expired || !condition_failed_at(&e, touch_index) {
                return Err(transaction_error("record user message", e));
            }
            // The episode item has expired but DynamoDB has not deleted it yet: delete it, so the
            // episode starts afresh as reads already see it, and record again.
            let cleared = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(self::key(&pk, META_SK)))
                .condition_expression("#ttl <= :now")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now", AttributeValue::N((now / 1000).to_string()))
                .send()
                .await;
            match cleared {
                Ok(_) => {}
                // Someone else cleared or renewed it first: just as good.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                }
                Err(e) => return Err(sdk_error("delete expired episode", e)),
            }
            cleared_expired = true;
        }
    }

    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        let ttl = self.ttl(self.clock.now_ms());
        let pk = key.pk();
        // The turn's earlier reply, if any (a retried request answers again).
        let prefix = format!("{MSG_PREFIX}{turn_id}#");
        let mut old = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
                .expression_attribute_values(":prefix", AttributeValue::S(prefix.clone()))
                .projection_expression("sk")
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk_error("read reply", e))?;
            old.extend(page.items().iter().filter_map(|i| string_of(i, SORT_KEY)));
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        let new: Vec<String> = messages.iter().map(StoredMessage::sk).collect();
        let mut actions = Vec::new();
        for sk in old.iter().filter(|sk| !new.contains(sk)) {
            if item::parse_message_sk(sk).is_some_and(|(_, seq)| seq >= 1) {
                let delete = Delete::builder()
                    .table_name(&self.table)
                    .set_key(Some(self::key(&pk, sk)))
                    .build()
                    .map_err(build)?;
                actions.push(TransactWriteItem::builder().delete(delete).build());
            }
        }
        for m in messages {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(to_dynamo(&pk, &m.sk(), &item::encode_message(m, ttl))))
                .build()
                .map_err(build)?;
            actions.push(TransactWriteItem::builder().put(put).build());
        }
        // One transaction for any real reply; a reply of more than 100 messages is written in
        // several.
        while !actions.is_empty() {
            let rest = actions.split_off(actions.len().min(MAX_TRANSACTION_ITEMS));
            self.transact(actions).await.map_err(|e| transaction_error("save reply", e))?;
            actions = rest;
        }
        Ok(())
    }

    async fn recent_messages(
        &self,
        key: &EpisodeKey,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut out = self.newest_messages(key, None, limit).await?;
        out.reverse();
        Ok(out)
    }

    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError> {
        let cursor = before.map(MessageCursor::parse).transpose()?.map(|c| c.sk());
        if limit == 0 {
            return Ok((Vec::new(), None));
        }
        // One more than the page: whether it exists says whether there is an older page.
        Ok(MessageCursor::page(self.newest_messages(key, cursor, limit + 1).await?, limit))
    }

    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError> {
        let (pk, sk) = (key.pk(), request_sk(request_id));
        let item = self.get(&pk, &sk, self.clock.now_ms()).await?;
        item.map(|i| item::decode_request(&pk, &sk, &i)).transpose()
    }

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

    async fn take_lease(
        &self,
        key: &EpisodeKey,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        let now = self.clock.now_ms();
        let expires_at = lease_expiry(now, ttl);
        let (pk, sk) = (key.pk(), lease_sk(name));
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(&pk, &sk, &item::encode_lease(holder, expires_at))))
            .condition_expression("attribute_not_exists(pk) OR #holder = :holder OR #expires_at <= :now")
            .expression_attribute_names("#holder", "holder")
            .expression_attribute_names("#expires_at", "expires_at")
            .expression_attribute_values(":holder", AttributeValue::S(holder.to_owned()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match put {
            Ok(_) => Ok(LeaseGrant::Granted),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                // Held by another: until when? Released in between, it is free now.
                let held =
                    self.get(&pk, &sk, now).await?.map(|i| item::decode_lease(&pk, &sk, &i)).transpose()?;
                let (holder, until) = held.unwrap_or((String::new(), now));
                Ok(LeaseGrant::Held { holder, until })
            }
            Err(e) => Err(sdk_error("take lease", e)),
        }
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self::key(&key.pk(), &lease_sk(name))))
            .condition_expression("#holder = :holder")
            .expression_attribute_names("#holder", "holder")
            .expression_attribute_values(":holder", AttributeValue::S(holder.to_owned()))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            // Expired and taken by another holder, or gone: nothing of ours to release.
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Ok(())
            }
            Err(e) => Err(sdk_error("release lease", e)),
        }
    }

    async fn start_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        self.start_log(key, turn_id, deadline_ms).await
    }

    async fn append_turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
    ) -> Result<(), StoreError> {
        self.append(key, turn_id, events).await
    }

    async fn record_turn_gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<(), StoreError> {
        self.gap(key, turn_id, from_seq, to_seq).await
    }

    async fn end_turn_log(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        self.end(key, turn_id, status).await
    }

    async fn finish_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        self.finish(key, turn_id, events, status).await
    }

    async fn turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError> {
        self.read_events(key, turn_id, after_seq, limit).await
    }

    async fn turn_record(&self, key: &EpisodeKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.read_record(key, turn_id).await
    }

    async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        self.latest(key).await
    }

    async fn request_cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError> {
        self.cancel(key, turn_id).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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
