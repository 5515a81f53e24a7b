//! A store that counts the calls made to the store it wraps, by method, and the bytes of events
//! appended: how many writes and reads a turn costs, for the tests and the benchmarks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton::store::item::{Attr, Item};
use baton::store::{
    ApprovalRecords, CancelOutcome, Clock, Clocked, Conversations, Episode, EpisodeKey, LeaseGrant, Leases,
    LoggedEvent, Recorded, Store, StoreError, StoredMessage, TurnLog, TurnRecord,
};

/// `inner`, with every call counted.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// Each append (and final write with events).
    appends: Mutex<Vec<Append>>,
    /// Turn-log writes are counted and dropped, not passed on (what the log costs in the
    /// process, without the store's share).
    discard_turn_log: bool,
    /// Whether each append's events item is encoded to measure it (`Append::item_bytes`): work
    /// production does not do, so only a store made by [`CountingStore::sizing_items`] does it.
    size_items: bool,
    /// Run once before the next `save_approvals` reaches `inner` (another writer landing between a
    /// request's read and its conditional write).
    before_save_approvals: Mutex<Option<BeforeWrite>>,
}

/// One append of a turn's events (or a final write that carries some).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Append {
    /// How many events.
    pub events: usize,
    /// Their bytes: names and JSON.
    pub bytes: usize,
    /// The size of their events item on DynamoDB, by its rules ([`dynamodb_item_size`]),
    /// keys included: what its write units are counted on (`None` unless the store was made
    /// by [`CountingStore::sizing_items`]).
    pub item_bytes: Option<usize>,
}

impl Append {
    fn of(key: &EpisodeKey, turn_id: &str, events: &[LoggedEvent], size_item: bool) -> Append {
        let item_bytes = size_item.then(|| {
            use baton::store::turn_log::{encode_events, turn_log_sk};
            let mut item = encode_events(events, u64::from(u32::MAX));
            item.insert("pk".into(), Attr::s(key.pk()));
            item.insert("sk".into(), Attr::s(turn_log_sk(turn_id, events.last().map_or(0, |e| e.seq))));
            dynamodb_item_size(&item)
        });
        Append {
            events: events.len(),
            bytes: events.iter().map(|e| e.event.len() + e.data.len()).sum(),
            item_bytes,
        }
    }
}

/// The size of `item` by DynamoDB's rules (its developer guide, "Item sizes and formats"): per
/// attribute its name's UTF-8 bytes plus its value's: a string its UTF-8 bytes, a number one
/// byte per two significant digits plus one, a boolean or null one byte, a list or map 3 bytes
/// plus one per element plus its elements (a map's with their names).
pub fn dynamodb_item_size(item: &Item) -> usize {
    fn value(attr: &Attr) -> usize {
        match attr {
            Attr::S(s) => s.len(),
            Attr::N(n) => {
                let digits = n.trim_start_matches(['-', '0']).replace('.', "");
                digits.trim_end_matches('0').len().max(1).div_ceil(2) + 1
            }
            Attr::Bool(_) | Attr::Null(_) => 1,
            Attr::L(list) => 3 + list.iter().map(|a| 1 + value(a)).sum::<usize>(),
            Attr::M(map) => 3 + map.iter().map(|(k, a)| 1 + k.len() + value(a)).sum::<usize>(),
        }
    }
    item.iter().map(|(name, attr)| name.len() + value(attr)).sum()
}

/// What [`CountingStore::before_next_save_approvals`] runs.
type BeforeWrite = Box<dyn FnOnce() -> futures::future::BoxFuture<'static, ()> + Send>;

impl CountingStore {
    /// Counts the calls made to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Arc<CountingStore> {
        CountingStore::counting(inner, false, false)
    }

    /// Counts the calls made to `inner`, and measures each append's events item
    /// ([`Append::item_bytes`]).
    pub fn sizing_items(inner: Arc<dyn Store>) -> Arc<CountingStore> {
        CountingStore::counting(inner, false, true)
    }

    /// Counts the calls made to `inner`, and drops the turn log's writes (start, appends, gaps,
    /// end) instead of passing them on.
    pub fn discarding_turn_log(inner: Arc<dyn Store>) -> Arc<CountingStore> {
        CountingStore::counting(inner, true, false)
    }

    fn counting(inner: Arc<dyn Store>, discard_turn_log: bool, size_items: bool) -> Arc<CountingStore> {
        Arc::new(CountingStore {
            inner,
            calls: Mutex::default(),
            appends: Mutex::default(),
            discard_turn_log,
            size_items,
            before_save_approvals: Mutex::default(),
        })
    }

    fn count(&self, call: &'static str) {
        *self.calls.lock().unwrap().entry(call).or_default() += 1;
    }

    /// The calls so far, by method.
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls of `method` so far.
    pub fn calls_of(&self, method: &str) -> u64 {
        self.calls.lock().unwrap().get(method).copied().unwrap_or(0)
    }

    /// Each append so far.
    pub fn appends(&self) -> Vec<Append> {
        self.appends.lock().unwrap().clone()
    }

    /// Runs `write` once, before the next `save_approvals` call reaches the wrapped store: a
    /// race lost at a chosen moment (a dismissal, another resume) without timing.
    pub fn before_next_save_approvals(
        &self,
        write: impl FnOnce() -> futures::future::BoxFuture<'static, ()> + Send + 'static,
    ) {
        *self.before_save_approvals.lock().unwrap() = Some(Box::new(write));
    }

    /// Forgets what was counted.
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
        self.appends.lock().unwrap().clear();
    }
}

impl Clocked for CountingStore {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }
}

#[async_trait::async_trait]
impl Conversations for CountingStore {
    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        self.count("episode");
        self.inner.episode(key).await
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        self.count("save_episode");
        self.inner.save_episode(episode).await
    }

    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        self.count("record_user_message");
        self.inner.record_user_message(key, message, request_id).await
    }

    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        self.count("save_reply");
        self.inner.save_reply(key, turn_id, messages).await
    }

    async fn recent_messages(
        &self,
        key: &EpisodeKey,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.count("recent_messages");
        self.inner.recent_messages(key, limit).await
    }

    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError> {
        self.count("messages_page");
        self.inner.messages_page(key, before, limit).await
    }

    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError> {
        self.count("request_turn");
        self.inner.request_turn(key, request_id).await
    }
}

#[async_trait::async_trait]
impl Leases for CountingStore {
    async fn take_lease(
        &self,
        key: &EpisodeKey,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        self.count("take_lease");
        self.inner.take_lease(key, name, holder, ttl).await
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        self.count("release_lease");
        self.inner.release_lease(key, name, holder).await
    }
}

#[async_trait::async_trait]
impl TurnLog for CountingStore {
    async fn start_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        self.count("start_turn_log");
        if self.discard_turn_log {
            return Ok(());
        }
        self.inner.start_turn_log(key, turn_id, deadline_ms).await
    }

    async fn append_turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
    ) -> Result<(), StoreError> {
        self.count("append_turn_events");
        self.appends.lock().unwrap().push(Append::of(key, turn_id, events, self.size_items));
        if self.discard_turn_log {
            return Ok(());
        }
        self.inner.append_turn_events(key, turn_id, events).await
    }

    async fn record_turn_gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<(), StoreError> {
        self.count("record_turn_gap");
        if self.discard_turn_log {
            return Ok(());
        }
        self.inner.record_turn_gap(key, turn_id, from_seq, to_seq).await
    }

    async fn end_turn_log(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        self.count("end_turn_log");
        if self.discard_turn_log {
            return Ok(());
        }
        self.inner.end_turn_log(key, turn_id, status).await
    }

    async fn finish_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[LoggedEvent],
        status: &str,
    ) -> Result<(), StoreError> {
        self.count("finish_turn_log");
        if !events.is_empty() {
            self.appends.lock().unwrap().push(Append::of(key, turn_id, events, self.size_items));
        }
        if self.discard_turn_log {
            return Ok(());
        }
        self.inner.finish_turn_log(key, turn_id, events, status).await
    }

    async fn turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedEvent>, StoreError> {
        self.count("turn_events");
        self.inner.turn_events(key, turn_id, after_seq, limit).await
    }

    async fn turn_record(&self, key: &EpisodeKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.count("turn_record");
        self.inner.turn_record(key, turn_id).await
    }

    async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        self.count("latest_turn");
        self.inner.latest_turn(key).await
    }

    async fn request_cancel(&self, key: &EpisodeKey, turn_id: &str) -> Result<CancelOutcome, StoreError> {
        self.count("request_cancel");
        self.inner.request_cancel(key, turn_id).await
    }
}

#[async_trait::async_trait]
impl ApprovalRecords for CountingStore {
    async fn approvals(&self, key: &EpisodeKey) -> Result<Option<(u64, String)>, StoreError> {
        self.count("approvals");
        self.inner.approvals(key).await
    }

    async fn save_approvals(
        &self,
        key: &EpisodeKey,
        body: &str,
        expected: u64,
        keep_until_s: u64,
    ) -> Result<u64, StoreError> {
        self.count("save_approvals");
        let before = self.before_save_approvals.lock().unwrap().take();
        if let Some(write) = before {
            write().await;
        }
        self.inner.save_approvals(key, body, expected, keep_until_s).await
    }
}
