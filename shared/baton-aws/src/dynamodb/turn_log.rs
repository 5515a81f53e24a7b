//! The turn logs' calls on DynamoDB (`baton::store::turn_log` holds their items and checks).
//!
//! - An append is one `TransactWriteItems`: the record's update, conditional on the turn running
//!   and its `last_seq` being the one before the batch, with the batch's items (several where
//!   one would pass 400 KB). The usual append reads nothing first; only a failed condition reads
//!   the record, to tell a retry (the same events logged already: done) from a gap, an overlap,
//!   an ended or an unknown turn.
//! - The record's other writes are `UpdateItem`s of the attributes they change, so a cancel
//!   flag set meanwhile is never written back as unset. DynamoDB rejects such an update while an
//!   append's transaction on the record is in progress (`TransactionConflictException`, which the
//!   SDK does not retry): it is tried again shortly, up to three times.
//! - Replays are `Query`s from the first item whose key (its last seq) is past the cursor, a page
//!   at a time ([`query_pages`]), until `limit` events are in hand; reads are strongly consistent.

use std::ops::ControlFlow;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use baton::store::item;
use baton::store::turn_log::{
    self, AppendPlan, CancelOutcome, LoggedEvent, TURN_PREFIX, TurnRecord, turn_log_end, turn_log_sk, turn_sk,
};
use baton::store::{EpisodeKey, StoreError, TurnLog, is_expired, ttl_after};

use super::query::query_pages;
use super::{
    DynamoDbStore, build, condition_failed_at, from_dynamo, key, string_of, to_dynamo, transaction_error,
};
use crate::error::sdk_error;
use crate::table::SORT_KEY;

/// The stored status of a turn that has not ended (`baton::store::turn_log`'s spelling).
const RUNNING: &str = "running";

/// How often a write whose condition failed because the record changed in between is tried again.
const RACES: usize = 3;

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn conditional_failed<E>(e: &aws_sdk_dynamodb::error::SdkError<E>) -> bool
where
    E: ProvideErrorMetadata,
{
    e.as_service_error().and_then(|s| s.code()) == Some("ConditionalCheckFailedException")
}

type UpdateRecord = aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
type UpdateResult = Result<
    aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>,
>;

/// Sends `update`, trying again shortly while DynamoDB rejects it for a transaction in progress
/// on the record (an append's): `TransactionConflictException`, which the SDK does not retry.
async fn send_update(update: UpdateRecord) -> UpdateResult {
    let mut tries = 0;
    loop {
        match update.clone().send().await {
            Err(e)
                if tries < RACES
                    && e.as_service_error().and_then(|s| s.code())
                        == Some("TransactionConflictException") =>
            {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20 * tries as u64)).await;
            }
            done => return done,
        }
    }
}

fn raced(key: &EpisodeKey, turn_id: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the record `{}` kept changing while it was written; retry",
        item::item_name(&key.pk(), &turn_sk(turn_id))
    ))
}

impl DynamoDbStore {
    fn log_ttl(&self, now_ms: u64) -> u64 {
        ttl_after(now_ms, self.turn_log_ttl)
    }

    /// An update of the turn's record: `set` (with `updated_at` and `ttl` renewed), if
    /// `condition` holds of a live record.
    fn record_update(&self, pk: &str, turn_id: &str, set: &str, condition: &str, now: u64) -> UpdateRecord {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, &turn_sk(turn_id))))
            .update_expression(format!("SET {set}, updated_at = :now, #ttl = :ttl"))
            .condition_expression(format!("#ttl > :now_s AND ({condition})"))
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":now_s", n(now / 1000))
            .expression_attribute_values(":ttl", n(self.log_ttl(now)))
    }

    pub(super) async fn start_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let record =
            turn_log::encode_record(&turn_log::new_record(turn_id, deadline_ms, now), self.log_ttl(now));
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(&pk, &turn_sk(turn_id), &record)))
            .condition_expression("attribute_not_exists(pk) OR #ttl <= :now_s")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now_s", n(now / 1000))
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(e) if conditional_failed(&e) => {
                let stored = self.read_record(key, turn_id).await?;
                match turn_log::check_start(key, turn_id, deadline_ms, stored.as_ref())? {
                    false => Ok(()),
                    true => Err(raced(key, turn_id)),
                }
            }
            Err(e) => Err(sdk_error("start turn log", e)),
        }
    }

    pub(super) async fn append(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
    ) -> Result<(), StoreError> {
        self.append_and_end(key, turn_id, batch, None).await
    }

    /// Appends the last `batch` and ends the log with `status`: one transaction (with no event,
    /// an end alone).
    pub(super) async fn finish(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        if batch.is_empty() {
            return self.end(key, turn_id, status).await;
        }
        turn_log::check_end(key, turn_id, status, Some(&turn_log::new_record(turn_id, 0, 0)))?;
        self.append_and_end(key, turn_id, batch, Some(status)).await
    }

    /// Appends `batch` and, with `end`, ends the log with that status, in one transaction: the
    /// record's update (conditional on the turn running and the log ending right before the
    /// batch) and the batch's items.
    async fn append_and_end(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
        end: Option<&str>,
    ) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(()) };
        let runs = turn_log::check_batch(batch)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let ttl = self.log_ttl(now);
        let set = match end {
            Some(_) => "SET last_seq = :last, updated_at = :now, #ttl = :ttl, #status = :end",
            None => "SET last_seq = :last, updated_at = :now, #ttl = :ttl",
        };
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(&pk, turn_id)))
            .update_expression(set)
            .condition_expression("#ttl > :now_s AND #status = :running AND last_seq = :prev")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":last", n(last.seq))
            .expression_attribute_values(":prev", n(first.seq - 1))
            .expression_attribute_values(":running", AttributeValue::S(RUNNING.into()))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":now_s", n(now / 1000))
            .expression_attribute_values(":ttl", n(ttl));
        let update = match end {
            Some(status) => update.expression_attribute_values(":end", AttributeValue::S(status.to_owned())),
            None => update,
        };
        let update = update.build().map_err(build)?;
        let mut actions = vec![TransactWriteItem::builder().update(update).build()];
        for run in runs {
            let run = &batch[run];
            let sk = turn_log_sk(turn_id, run[run.len() - 1].seq);
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(to_dynamo(&pk, &sk, &turn_log::encode_events(run, ttl))))
                .build()
                .map_err(build)?;
            actions.push(TransactWriteItem::builder().put(put).build());
        }
        for _ in 0..RACES {
            let e = match self.transact(actions.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if !condition_failed_at(&e, 0) {
                return Err(transaction_error("append turn events", e));
            }
            let stored = self.read_record(key, turn_id).await?;
            match turn_log::plan_append(key, turn_id, stored.as_ref(), batch)? {
                AppendPlan::Nothing => return Ok(()),
                AppendPlan::MaybeRetry => {
                    let logged = self.read_events(key, turn_id, first.seq - 1, batch.len()).await?;
                    turn_log::check_retry(key, turn_id, batch, &logged)?;
                    // The events were logged (an earlier try landed): the end may still be due.
                    return match end {
                        Some(status) => self.end(key, turn_id, status).await,
                        None => Ok(()),
                    };
                }
                // The record is where the batch follows after all: it changed in between.
                AppendPlan::Write(_) => continue,
            }
        }
        Err(raced(key, turn_id))
    }

    pub(super) async fn gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let pk = key.pk();
        for _ in 0..RACES {
            let Some(mut record) = self.read_record(key, turn_id).await? else {
                return Err(StoreError::Conflict {
                    key: item::item_name(&pk, &turn_sk(turn_id)),
                    reason: "the turn's log was never started (or has expired)".into(),
                });
            };
            let seen = record.last_seq;
            if !turn_log::apply_gap(key, turn_id, &mut record, from, to)? {
                return Ok(());
            }
            let gaps = turn_log::encode_record(&record, 0).remove("gaps").expect("a record has gaps");
            let now = self.clock.now_ms();
            let updated = send_update(
                self.record_update(
                    &pk,
                    turn_id,
                    "last_seq = :to, gaps = :gaps",
                    "#status = :running AND last_seq = :seen",
                    now,
                )
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":to", n(record.last_seq))
                .expression_attribute_values(":gaps", super::to_attribute(&gaps))
                .expression_attribute_values(":running", AttributeValue::S(RUNNING.into()))
                .expression_attribute_values(":seen", n(seen)),
            )
            .await;
            match updated {
                Ok(_) => return Ok(()),
                Err(e) if conditional_failed(&e) => continue,
                Err(e) => return Err(sdk_error("record turn gap", e)),
            }
        }
        Err(raced(key, turn_id))
    }

    pub(super) async fn end(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        turn_log::check_end(key, turn_id, status, Some(&turn_log::new_record(turn_id, 0, 0)))?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let updated = send_update(
            self.record_update(&pk, turn_id, "#status = :status", "#status = :running", now)
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":status", AttributeValue::S(status.to_owned()))
                .expression_attribute_values(":running", AttributeValue::S(RUNNING.into())),
        )
        .await;
        match updated {
            Ok(_) => Ok(()),
            Err(e) if conditional_failed(&e) => {
                let stored = self.read_record(key, turn_id).await?;
                match turn_log::check_end(key, turn_id, status, stored.as_ref())? {
                    false => Ok(()),
                    true => Err(raced(key, turn_id)),
                }
            }
            Err(e) => Err(sdk_error("end turn log", e)),
        }
    }

    pub(super) async fn read_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        // Items are keyed by their last seq: the first one at or past `after_seq + 1` holds it.
        let from = turn_log_sk(turn_id, after_seq.saturating_add(1));
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
            .expression_attribute_values(":from", AttributeValue::S(from))
            .expression_attribute_values(":to", AttributeValue::S(turn_log_end(turn_id)))
            .limit(self.page_size)
            .consistent_read(true);
        query_pages(query, "read turn events", self.query_page_cap, |items| {
            for raw in items {
                let sk = sort_key(&pk, raw)?;
                let item = from_dynamo(&pk, &sk, raw)?;
                if item::ttl_of(&pk, &sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    continue;
                }
                for event in turn_log::decode_events(&pk, &sk, &item)? {
                    if event.seq > after_seq && out.len() < limit {
                        out.push(event);
                    }
                }
            }
            Ok(if out.len() < limit { ControlFlow::Continue(()) } else { ControlFlow::Break(()) })
        })
        .await?;
        Ok(out)
    }

    pub(super) async fn read_record(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
    ) -> Result<Option<TurnRecord>, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, sk, now) = (key.pk(), turn_sk(turn_id), self.clock.now_ms());
        self.get(&pk, &sk, now).await?.map(|item| turn_log::decode_record(&pk, &sk, &item)).transpose()
    }

    pub(super) async fn latest(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        let (pk, now) = (key.pk(), self.clock.now_ms());
        // Newest sort key first: the newest turn's items (its record or its last events); only
        // the key and expiry are needed.
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :turn)")
            .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
            .expression_attribute_values(":turn", AttributeValue::S(TURN_PREFIX.into()))
            .projection_expression("sk, #ttl")
            .expression_attribute_names("#ttl", "ttl")
            .scan_index_forward(false)
            .limit(self.page_size)
            .consistent_read(true);
        let mut latest = None;
        query_pages(query, "read latest turn", self.query_page_cap, |items| {
            for raw in items {
                let sk = sort_key(&pk, raw)?;
                let item = from_dynamo(&pk, &sk, raw)?;
                if item::ttl_of(&pk, &sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    continue;
                }
                if let Some(turn) = turn_log::turn_of_sk(&sk) {
                    latest = Some(turn.to_owned());
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })
        .await?;
        Ok(latest)
    }

    pub(super) async fn cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let updated = send_update(
            self.record_update(
                &pk,
                turn_id,
                "cancel_requested = :yes",
                "#status = :running AND deadline_ms >= :now",
                now,
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":running", AttributeValue::S(RUNNING.into())),
        )
        .await;
        match updated {
            Ok(_) => Ok(CancelOutcome::Requested),
            Err(e) if conditional_failed(&e) => {
                // Absent, expired, ended or past its deadline: the record says which.
                let stored = self.read_record(key, turn_id).await?;
                match turn_log::cancel_outcome(stored.as_ref(), now) {
                    (CancelOutcome::Requested, _) => Err(raced(key, turn_id)),
                    (outcome, _) => Ok(outcome),
                }
            }
            Err(e) => Err(sdk_error("request cancel", e)),
        }
    }
}

fn key_of(pk: &str, turn_id: &str) -> std::collections::HashMap<String, AttributeValue> {
    key(pk, &turn_sk(turn_id))
}

fn sort_key(pk: &str, raw: &std::collections::HashMap<String, AttributeValue>) -> Result<String, StoreError> {
    string_of(raw, SORT_KEY).ok_or_else(|| StoreError::Corrupt {
        key: item::item_name(pk, "?"),
        reason: "a turn-log item has no string sort key".into(),
    })
}

#[async_trait::async_trait]
impl TurnLog for DynamoDbStore {
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
