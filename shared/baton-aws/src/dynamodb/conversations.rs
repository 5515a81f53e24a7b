//! The conversations on DynamoDB: the episode item, its messages and the request-id markers.
//!
//! - Idempotency: the user message, its request-id marker and the episode touch are one
//!   `TransactWriteItems`; the marker's put is conditional on the marker being absent (or
//!   expired), so a repeated request id cancels the whole write.
//! - Optimistic locking: [`Conversations::save_episode`] is a put conditional on the stored
//!   `version`.
//! - Long histories are read newest first a page at a time ([`query_pages`]) until enough are in
//!   hand.

use std::ops::ControlFlow;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use baton::store::item;
use baton::store::{
    Conversations, Episode, EpisodeKey, META_SK, MSG_PREFIX, MessageCursor, Recorded, StoreError,
    StoredMessage, is_expired, request_sk,
};

use super::query::query_pages;
use super::{
    DynamoDbStore, MAX_TRANSACTION_ITEMS, build, cancellation_reasons, cancelled_transiently,
    condition_failed_at, from_dynamo, key, string_of, to_dynamo, transaction_error,
};
use crate::error::sdk_error;
use crate::table::SORT_KEY;

/// How often a transaction cancelled by a conflicting one is tried again.
const CONFLICT_RETRIES: u32 = 3;

impl DynamoDbStore {
    /// The newest `count` unexpired messages of the episode, newest first, below the message
    /// whose sort key is `below` (every message when `None`): what `recent_messages` and
    /// `messages_page` both read, a page of the table at a time (`Limit` the page size, or
    /// fewer when fewer messages are wanted), strongly consistent.
    async fn newest_messages(
        &self,
        key: &EpisodeKey,
        below: Option<String>,
        count: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let (now, pk) = (self.clock.now_ms(), key.pk());
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        // BETWEEN is inclusive: the message `below` names is read and skipped. "MSG$" sorts
        // after every `MSG#…` key, so without it the range is every message.
        let high = below.clone().unwrap_or_else(|| "MSG$".to_owned());
        let wanted = count.saturating_add(usize::from(below.is_some()));
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
            .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
            .expression_attribute_values(":low", AttributeValue::S(MSG_PREFIX.into()))
            .expression_attribute_values(":high", AttributeValue::S(high))
            .scan_index_forward(false)
            .limit(self.page_size.min(i32::try_from(wanted).unwrap_or(i32::MAX)))
            .consistent_read(true);
        query_pages(query, "read history", self.query_page_cap, |items| {
            for raw in items {
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
            Ok(if out.len() < count { ControlFlow::Continue(()) } else { ControlFlow::Break(()) })
        })
        .await?;
        Ok(out)
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
}

#[async_trait::async_trait]
impl Conversations for DynamoDbStore {
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
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
            .expression_attribute_values(":prefix", AttributeValue::S(prefix))
            .projection_expression("sk")
            .consistent_read(true);
        let mut old = Vec::new();
        query_pages(query, "read reply", self.query_page_cap, |items| {
            old.extend(items.iter().filter_map(|i| string_of(i, SORT_KEY)));
            Ok(ControlFlow::Continue(()))
        })
        .await?;
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
}
