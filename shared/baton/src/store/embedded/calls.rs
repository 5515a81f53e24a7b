//! The store's concerns ([`Conversations`], [`Leases`], [`TurnLog`], [`ApprovalRecords`]) on the
//! embedded store: each call's checks and writes, on a [`View`].

use std::time::Duration;

use super::EmbeddedStore;
use super::view::parse;
use crate::store::item;
use crate::store::{
    APPROVALS_SK, ApprovalRecords, CancelOutcome, Clock, Clocked, Conversations, Episode, EpisodeKey,
    LeaseGrant, Leases, LoggedEvent, META_SK, MSG_PREFIX, MessageCursor, Recorded, StoreError, StoredMessage,
    TurnLog, TurnRecord, is_expired, lease_expiry, lease_sk, message_sk, request_sk,
};

impl Clocked for EmbeddedStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }
}

#[async_trait::async_trait]
impl Conversations for EmbeddedStore {
    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        let now = self.clock.now_ms();
        self.read(|view| {
            view.get(&key.pk(), META_SK, now)?.map(|item| item::decode_episode(key, &item)).transpose()
        })
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.ttl(now);
        // Within a turn (an agent may keep its vendor conversation here) the reply's flush
        // takes this to disk too; a crash before it loses the conversation id, and the next turn
        // starts a new vendor conversation (docs/storage.md, "Durability").
        let (saved, _) = self.change(|view| {
            let mut next = episode.clone();
            let pk = next.key.pk();
            let stored =
                view.get(&pk, META_SK, now)?.map(|i| item::decode_episode(&next.key, &i)).transpose()?;
            let stored_version = stored.as_ref().map_or(0, |e| e.version);
            if stored_version != next.version {
                return Err(StoreError::Conflict {
                    key: item::item_name(&pk, META_SK),
                    reason: format!("expected version {}, found {stored_version}", next.version),
                });
            }
            next.version += 1;
            next.updated_at = now;
            next.created_at = stored.map_or(now, |e| e.created_at);
            view.put(&pk, META_SK, &item::encode_episode(&next, ttl));
            Ok(next)
        })?;
        Ok(saved)
    }

    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.ttl(now);
        // Not flushed on its own: the turn's reply (`save_reply`) takes it to disk, one
        // `fdatasync` per turn (docs/storage.md, "Durability").
        let (recorded, _) = self.change(|view| {
            let pk = key.pk();
            if let Some(id) = request_id {
                let sk = request_sk(id);
                if let Some(seen) = view.get(&pk, &sk, now)? {
                    return Ok(Recorded::Duplicate { turn_id: item::decode_request(&pk, &sk, &seen)? });
                }
                view.put(&pk, &sk, &item::encode_request(&message.turn_id, ttl));
            }
            view.put(&pk, &message.sk(), &item::encode_message(message, ttl));
            let mut episode = match view.get(&pk, META_SK, now)? {
                Some(item) => item::decode_episode(key, &item)?,
                None => Episode { created_at: now, ..Episode::new(key.clone()) },
            };
            episode.version += 1;
            episode.updated_at = now;
            view.put(&pk, META_SK, &item::encode_episode(&episode, ttl));
            Ok(Recorded::New)
        })?;
        Ok(recorded)
    }

    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        let ttl = self.ttl(self.clock.now_ms());
        let pk = key.pk();
        let ((), upto) = self.change(|view| {
            // Drop an earlier reply of this turn (seq 1 and up), then write this one.
            let (from, to) = (message_sk(turn_id, 1), format!("{MSG_PREFIX}{turn_id}$"));
            let mut old = Vec::new();
            view.each_rev(&pk, &from, &to, |sk, _| {
                old.push(sk.to_owned());
                Ok(true)
            })?;
            for sk in old {
                view.remove(&pk, &sk);
            }
            for m in messages {
                view.put(&pk, &m.sk(), &item::encode_message(m, ttl));
            }
            Ok(())
        })?;
        self.flush(upto).await
    }

    async fn recent_messages(
        &self,
        key: &EpisodeKey,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut out = self.newest_messages(key, MESSAGES_END, limit)?;
        out.reverse();
        Ok(out)
    }

    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError> {
        let below = match before {
            Some(cursor) => MessageCursor::parse(cursor)?.sk(),
            None => MESSAGES_END.to_owned(),
        };
        if limit == 0 {
            return Ok((Vec::new(), None));
        }
        // One more than the page: whether it exists says whether there is an older page.
        Ok(MessageCursor::page(self.newest_messages(key, &below, limit + 1)?, limit))
    }

    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError> {
        let (now, pk, sk) = (self.clock.now_ms(), key.pk(), request_sk(request_id));
        self.read(|view| view.get(&pk, &sk, now)?.map(|i| item::decode_request(&pk, &sk, &i)).transpose())
    }
}

#[async_trait::async_trait]
impl ApprovalRecords for EmbeddedStore {
    async fn approvals(&self, key: &EpisodeKey) -> Result<Option<(u64, String)>, StoreError> {
        let now = self.clock.now_ms();
        let pk = key.pk();
        self.read(|view| {
            view.get(&pk, APPROVALS_SK, now)?
                .map(|i| item::decode_approvals(&pk, APPROVALS_SK, &i))
                .transpose()
        })
    }

    async fn save_approvals(
        &self,
        key: &EpisodeKey,
        body: &str,
        expected: u64,
        keep_until_s: u64,
    ) -> Result<u64, StoreError> {
        let now = self.clock.now_ms();
        let pk = key.pk();
        // Flushed: an approved call's recorded start and outcome must survive a crash (never twice).
        let (version, upto) = self.change(|view| {
            let stored = view
                .get(&pk, APPROVALS_SK, now)?
                .map(|i| item::decode_approvals(&pk, APPROVALS_SK, &i))
                .transpose()?
                .map_or(0, |(v, _)| v);
            if stored != expected {
                return Err(StoreError::Conflict {
                    key: item::item_name(&pk, APPROVALS_SK),
                    reason: format!("expected version {expected}, found {stored}"),
                });
            }
            view.put(&pk, APPROVALS_SK, &item::encode_approvals(body, expected + 1, keep_until_s));
            Ok(expected + 1)
        })?;
        self.flush(upto).await?;
        Ok(version)
    }
}

#[async_trait::async_trait]
impl Leases for EmbeddedStore {
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
        // Not flushed: a lease lives as long as this process holds the file (one process at a
        // time). It is written under this opening's epoch, so one the file keeps from an earlier
        // process (stopped or crashed before it freed it) is free now, whatever its expiry.
        let mine = format!("{}/{holder}", self.epoch);
        let (grant, _) = self.change(|view| {
            if let Some(item) = view.get(&pk, &sk, now)? {
                let (current, until) = item::decode_lease(&pk, &sk, &item)?;
                if let Some(other) = current.strip_prefix(&*self.epoch).and_then(|h| h.strip_prefix('/')) {
                    if other != holder && until > now {
                        return Ok(LeaseGrant::Held { holder: other.to_owned(), until });
                    }
                }
            }
            view.put(&pk, &sk, &item::encode_lease(&mine, expires_at));
            Ok(LeaseGrant::Granted)
        })?;
        Ok(grant)
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let (pk, sk) = (key.pk(), lease_sk(name));
        self.change(|view| {
            if let Some(item) = view.get(&pk, &sk, now)? {
                if item::decode_lease(&pk, &sk, &item)?.0 == format!("{}/{holder}", self.epoch) {
                    view.remove(&pk, &sk);
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl TurnLog for EmbeddedStore {
    async fn start_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        self.start_log(key, turn_id, deadline_ms)
    }

    async fn append_turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
    ) -> Result<(), StoreError> {
        self.append(key, turn_id, events)
    }

    async fn record_turn_gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<(), StoreError> {
        self.gap(key, turn_id, from_seq, to_seq)
    }

    async fn end_turn_log(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        self.end(key, turn_id, status)
    }

    async fn finish_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        self.finish(key, turn_id, events, status)
    }

    async fn turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError> {
        self.read_events(key, turn_id, after_seq, limit)
    }

    async fn turn_record(&self, key: &EpisodeKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.read_record(key, turn_id)
    }

    async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        self.latest(key)
    }

    async fn request_cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError> {
        self.cancel(key, turn_id)
    }
}

/// '$' follows '#': every `MSG#...` sort key of a partition lies below it.
const MESSAGES_END: &str = "MSG$";

impl EmbeddedStore {
    /// The newest `count` unexpired messages of the episode whose sort keys lie below `below`,
    /// newest first: what `recent_messages` and `messages_page` both read.
    fn newest_messages(
        &self,
        key: &EpisodeKey,
        below: &str,
        count: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let (pk, now) = (key.pk(), self.clock.now_ms());
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        self.read(|view| {
            view.each_rev(&pk, MSG_PREFIX, below, |sk, bytes| {
                let item = parse(&pk, sk, bytes)?;
                if !item::ttl_of(&pk, sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    out.push(item::decode_message(&pk, sk, &item)?);
                }
                Ok(out.len() < count)
            })
        })?;
        Ok(out)
    }
}
