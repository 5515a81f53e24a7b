//! The turn logs' calls on the embedded store (`store::turn_log` holds their items and checks).
//! Each call's checks and writes run in one [`View`](super::view::View), so a call is atomic
//! as a DynamoDB transaction is; its writes reach the disk within
//! [`TURN_LOG_FLUSH_WITHIN`](super::TURN_LOG_FLUSH_WITHIN).

use super::EmbeddedStore;
use super::view::{View, parse};
use crate::store::turn_log::{
    self, AppendPlan, CancelOutcome, LoggedEvent, TURN_PREFIX, TurnRecord, TurnStatus, turn_log_end,
    turn_log_sk, turn_sk,
};
use crate::store::{EpisodeKey, StoreError, is_expired, item, ttl_after};

/// The record of `turn_id` in `view`, if any (and not expired).
fn record(view: &View<'_>, pk: &str, turn_id: &str, now: u64) -> Result<Option<TurnRecord>, StoreError> {
    let sk = turn_sk(turn_id);
    view.get(pk, &sk, now)?.map(|item| turn_log::decode_record(pk, &sk, &item)).transpose()
}

/// At most `limit` events of `turn_id` after `after_seq`, in order, from `view`.
fn events(
    view: &View<'_>,
    pk: &str,
    turn_id: &str,
    after_seq: u64,
    limit: usize,
    now: u64,
) -> Result<Vec<LoggedEvent>, StoreError> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    // Items are keyed by their last seq: the first one at or past `after_seq + 1` holds it.
    let from = turn_log_sk(turn_id, after_seq.saturating_add(1));
    view.each(pk, &from, &turn_log_end(turn_id), |sk, bytes| {
        let item = parse(pk, sk, bytes)?;
        if item::ttl_of(pk, sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
            return Ok(true);
        }
        for event in turn_log::decode_events(pk, sk, &item)? {
            if event.seq > after_seq && out.len() < limit {
                out.push(event);
            }
        }
        Ok(out.len() < limit)
    })?;
    Ok(out)
}

impl EmbeddedStore {
    fn log_ttl(&self, now_ms: u64) -> u64 {
        ttl_after(now_ms, self.turn_log_ttl)
    }

    /// Writes the record of `turn_id` back as `record`, now.
    fn put_record(&self, view: &mut View<'_>, pk: &str, mut record: TurnRecord, now: u64) {
        record.updated_at = now;
        view.put(pk, &turn_sk(&record.turn_id), &turn_log::encode_record(&record, self.log_ttl(now)));
    }

    pub(super) fn start_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.change(|view| {
            let stored = record(view, &pk, turn_id, now)?;
            if turn_log::check_start(key, turn_id, deadline_ms, stored.as_ref())? {
                self.put_record(view, &pk, turn_log::new_record(turn_id, deadline_ms, now), now);
            }
            Ok(())
        })?;
        self.flush_soon();
        Ok(())
    }

    pub(super) fn append(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
    ) -> Result<(), StoreError> {
        self.append_and_end(key, turn_id, batch, None)
    }

    pub(super) fn finish(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        self.append_and_end(key, turn_id, batch, Some(status))
    }

    /// Appends `batch` and, with `end`, ends the log with that status: one atomic change.
    fn append_and_end(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        batch: &[LoggedEvent],
        end: Option<&str>,
    ) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.change(|view| {
            let stored = record(view, &pk, turn_id, now)?;
            let (mut record, wrote) = match turn_log::plan_append(key, turn_id, stored.as_ref(), batch)? {
                AppendPlan::Nothing => (stored, false),
                AppendPlan::MaybeRetry => {
                    let first = batch[0].seq;
                    let logged = events(view, &pk, turn_id, first - 1, batch.len(), now)?;
                    turn_log::check_retry(key, turn_id, batch, &logged)?;
                    (stored, false)
                }
                AppendPlan::Write(runs) => {
                    let ttl = self.log_ttl(now);
                    for run in runs {
                        let run = &batch[run];
                        let sk = turn_log_sk(turn_id, run[run.len() - 1].seq);
                        view.put(&pk, &sk, &turn_log::encode_events(run, ttl));
                    }
                    let mut record = stored.expect("planned against a record");
                    record.last_seq = batch[batch.len() - 1].seq;
                    (Some(record), true)
                }
            };
            let ends = match end {
                Some(status) => turn_log::check_end(key, turn_id, status, record.as_ref())?,
                None => false,
            };
            if let (true, Some(record), Some(status)) = (ends, record.as_mut(), end) {
                record.status = TurnStatus::Ended(status.to_owned());
            }
            if wrote || ends {
                self.put_record(view, &pk, record.expect("checked against a record"), now);
            }
            Ok(())
        })?;
        self.flush_soon();
        Ok(())
    }

    pub(super) fn gap(&self, key: &EpisodeKey, turn_id: &str, from: u64, to: u64) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.change(|view| {
            let Some(mut record) = record(view, &pk, turn_id, now)? else {
                return Err(StoreError::Conflict {
                    key: item::item_name(&pk, &turn_sk(turn_id)),
                    reason: "the turn's log was never started (or has expired)".into(),
                });
            };
            if turn_log::apply_gap(key, turn_id, &mut record, from, to)? {
                self.put_record(view, &pk, record, now);
            }
            Ok(())
        })?;
        self.flush_soon();
        Ok(())
    }

    pub(super) fn end(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.change(|view| {
            let stored = record(view, &pk, turn_id, now)?;
            if turn_log::check_end(key, turn_id, status, stored.as_ref())? {
                let record =
                    TurnRecord { status: TurnStatus::Ended(status.to_owned()), ..stored.expect("checked") };
                self.put_record(view, &pk, record, now);
            }
            Ok(())
        })?;
        self.flush_soon();
        Ok(())
    }

    pub(super) fn read_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.read(|view| events(view, &pk, turn_id, after_seq, limit, now))
    }

    pub(super) fn read_record(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
    ) -> Result<Option<TurnRecord>, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.read(|view| record(view, &pk, turn_id, now))
    }

    pub(super) fn latest(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.read(|view| {
            let mut latest = None;
            // Newest sort key first: the newest turn's items (its record or its last events).
            view.each_rev(&pk, TURN_PREFIX, "TURN$", |sk, bytes| {
                let item = parse(&pk, sk, bytes)?;
                if item::ttl_of(&pk, sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    return Ok(true);
                }
                latest = turn_log::turn_of_sk(sk).map(str::to_owned);
                Ok(latest.is_none())
            })?;
            Ok(latest)
        })
    }

    pub(super) fn cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError> {
        turn_log::check_turn_id(turn_id)?;
        let (pk, now) = (key.pk(), self.clock.now_ms());
        // Not flushed: the producer reads the flag from this process's pending writes at once.
        let (outcome, _) = self.change(|view| {
            let stored = record(view, &pk, turn_id, now)?;
            let (outcome, write) = turn_log::cancel_outcome(stored.as_ref(), now);
            if write {
                let record = TurnRecord { cancel_requested: true, ..stored.expect("a running turn") };
                self.put_record(view, &pk, record, now);
            }
            Ok(outcome)
        })?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::view::to_bytes;

    /// Events of any JSON text round-trip through the bytes the store keeps, in either form of
    /// the events item.
    #[test]
    fn events_items_of_both_forms_round_trip_through_the_stored_bytes() {
        let awkward = [
            r#"{"type":"text","text":"a \"quoted\" word\n"}"#,
            "{\"text\":\"tab\\t, back\\\\slash, \u{1} and ünïcødé 🎉\"}",
            "",
            "a raw\nnewline 12 text {} and a space",
            "\u{7f}\u{2028}</script>",
        ];
        let events: Vec<LoggedEvent> = awkward
            .iter()
            .enumerate()
            .map(|(i, data)| {
                LoggedEvent::new(i as u64 + 7, if i == 2 { "com\"pl\neted" } else { "text" }, *data)
            })
            .collect();
        for run in [&events[..], &events[..1], &[]] {
            let bytes = to_bytes(&turn_log::encode_events(run, 1_234_567));
            let item = parse("P", "S", &bytes).unwrap();
            assert_eq!(turn_log::decode_events("P", "S", &item).unwrap(), run);
        }
        // An item of the older form: a list of `{seq, event, data}` maps.
        let old = br#"{"events":{"L":[{"M":{"data":{"S":"{\"a\":1}"},"event":{"S":"text"},"seq":{"N":"4"}}},{"M":{"data":{"S":"{}"},"event":{"S":"completed"},"seq":{"N":"5"}}}]},"first":{"N":"4"},"last":{"N":"5"},"ttl":{"N":"9"}}"#;
        let item = parse("P", "S", old).unwrap();
        let read = turn_log::decode_events("P", "S", &item).unwrap();
        assert_eq!(read, [LoggedEvent::new(4, "text", r#"{"a":1}"#), LoggedEvent::new(5, "completed", "{}")]);
    }

    /// The compact form is about a third smaller than the older one for a turn's usual events.
    #[test]
    fn the_compact_events_item_is_smaller_than_the_list_of_maps() {
        let events: Vec<LoggedEvent> = (1..=40)
            .map(|seq| {
                LoggedEvent::new(
                    seq,
                    "text",
                    format!(r#"{{"type":"text","agent":"shopping","delta":"word {seq} "}}"#),
                )
            })
            .collect();
        let compact = to_bytes(&turn_log::encode_events(&events, 1)).len();
        let list: Vec<_> = events
            .iter()
            .map(|e| {
                item::Attr::M(
                    [
                        ("seq".to_owned(), item::Attr::n(e.seq)),
                        ("event".to_owned(), item::Attr::s(&e.event)),
                        ("data".to_owned(), item::Attr::s(&e.data)),
                    ]
                    .into(),
                )
            })
            .collect();
        let old = to_bytes(&item::Item::from([("events".to_owned(), item::Attr::L(list))])).len();
        assert!(compact * 3 < old * 2, "compact {compact} bytes, the list of maps {old}");
    }
}
