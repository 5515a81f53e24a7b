//! The embedded store: one redb file, no server. The default for local runs.
//!
//! It keeps the same items under the same keys as the DynamoDB store (one table keyed by
//! `(pk, sk)`, values are the items' DynamoDB JSON), with the same guarantees: each trait call
//! is atomic and sees every call before it, so optimistic locking and request-id idempotency are
//! checks inside it.
//!
//! # Writes: checked at once, flushed together
//!
//! A call's checks and writes run where it is called, under one lock, against a view of the
//! file's last commit overlaid with the writes not yet in the file (`Pending`); its writes join
//! those, and every later call sees them. Only a call that must be durable when it returns
//! ([`Store::save_reply`], [`EmbeddedStore::put_raw`]) waits for the file: it hops to the blocking
//! pool, where one redb write transaction takes every pending write to disk with one
//! `fdatasync`. Concurrent turns share that commit (group commit): a reply that arrives while
//! another is being flushed is taken by the next flush, with all the others waiting by then.
//!
//! So a turn costs one write transaction and one `fdatasync`: its user message, request marker
//! and episode touch (and the support agent's vendor conversation, saved mid-turn) reach the disk
//! with its reply, committed before `completed` is sent. Until then they live in memory, which is
//! what redb's non-durable commits gave before, at three transactions and three thread hops per
//! turn: a crash in between loses them either way (docs/storage.md, "Durability"). Closing the
//! store (dropping it) flushes what is pending. If a flush fails (the disk refused a write),
//! the durable call gets the error; its writes stay pending, and reads still see them. redb takes
//! no further commit on that handle, so the next flush drops it and opens the file again (redb
//! recovers it at its last commit) before it commits everything still pending: once the disk
//! takes writes again, nothing that waited is lost and no restart is needed. If the disk still
//! refuses, that open fails too: the flush is an error, and every call tries the open again
//! first, answering [`StoreError::Unavailable`] until it succeeds. While flushes fail, at most
//! [`MAX_WAITING_WRITES`] writes wait, and further writes are refused with
//! [`StoreError::Unavailable`].
//!
//! The file is locked while open (redb takes an exclusive `flock`), so one process uses it at a
//! time. A second process waits for it up to [`LOCK_WAIT`], saying so on the log, which lets two
//! `chat` commands run one after the other; a `serve` holds the file for its whole life, so a
//! `chat` beside it fails after the wait with a clear error. Sharing the file between processes
//! would mean opening it per operation (an open costs more than the operation) or a store
//! server; the local default keeps redb and this bounded wait, and DynamoDB serves many processes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redb::{Database, Durability, TableDefinition};

use super::item::{self, Item};
use super::{
    Clock, DEFAULT_RETENTION, Episode, EpisodeKey, LeaseGrant, META_SK, MSG_PREFIX, Recorded, Store,
    StoreError, StoredMessage, is_expired, lease_expiry, lease_sk, message_sk, request_sk, ttl_after,
};

/// Flushes that run on the blocking pool at once. They take one lock in turn (redb runs one
/// write transaction at a time, and a flush takes every pending write), so more threads would
/// only wait: after a burst of 500 dropped streams (each saving its partial reply) the pool
/// had grown to ~400 threads, each keeping its stack and malloc arena.
pub const MAX_CONCURRENT_CALLS: usize = 4;

/// While flushes fail, how many writes may wait for the file before further writes are refused.
pub const MAX_WAITING_WRITES: usize = 10_000;

/// redb's page cache. Its default (1 GiB) lets a long-running `serve` grow with the store file;
/// a turn reads a few recent messages of one episode, pages written moments before and still
/// in the cache, so a small one serves it. Writes fill it: at 16 MiB, a burst of 1,000 turns
/// kept 16 MB more resident for good (docs/benchmarks.md, "Memory per stream").
pub const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// How long [`EmbeddedStore::open`] waits for a store file another process holds.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The one table: `(pk, sk)` → the item's DynamoDB JSON.
pub const ITEMS: TableDefinition<'static, (&str, &str), &[u8]> = TableDefinition::new("items");

/// An item's bytes, or `None` where it was removed.
type Value = Option<Arc<[u8]>>;

/// Writes by partition and sort key, each with the number of the call that made it.
type Layer = BTreeMap<String, BTreeMap<String, (u64, Value)>>;

/// The writes the file does not hold yet, newest per key, and the open file.
#[derive(Default)]
struct Pending {
    /// The open file. Views borrow it under this lock; a flush takes a clone to commit without
    /// holding the lock. `None` only while a reopen after a failed flush has not succeeded.
    db: Option<Arc<Database>>,
    writes: Layer,
    /// How many keys `writes` holds.
    len: usize,
    /// The number of the last call that wrote.
    last: u64,
    /// Whether the last flush failed: redb takes no further commit on that handle, so the next
    /// flush reopens the file first.
    failing: bool,
}

/// Opens the store's file again (after a failed flush).
type Reopen = dyn Fn() -> Result<Database, redb::DatabaseError> + Send + Sync;

/// What flushes share: the number of the last call whose writes are on disk.
#[derive(Default)]
struct Flushed {
    upto: u64,
}

/// A file-backed [`Store`].
pub struct EmbeddedStore {
    pending: Arc<Mutex<Pending>>,
    reopen: Arc<Reopen>,
    flushed: Arc<Mutex<Flushed>>,
    commits: Arc<AtomicU64>,
    calls: Arc<tokio::sync::Semaphore>,
    path: PathBuf,
    clock: Arc<dyn Clock>,
    retention: Duration,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").field("path", &self.path).finish()
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(format!("{what}: {e}"))
}

/// Locks `m`. Nothing is left half-written under these locks (a call's writes join the pending
/// ones only once it has succeeded), so a panic elsewhere does not spoil what they guard.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EmbeddedStore {
    /// Opens (or creates) the store file at `path`, creating its directory; items live for
    /// [`DEFAULT_RETENTION`] after their last write. If another process holds the file, waits
    /// for it up to [`LOCK_WAIT`] (blocking the calling thread: open stores at start-up).
    pub fn open(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_waiting(path, clock, LOCK_WAIT)
    }

    /// [`EmbeddedStore::open`], waiting up to `wait` for a file another process holds.
    pub fn open_waiting(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        wait: Duration,
    ) -> Result<EmbeddedStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| failed(&format!("cannot create the store directory {}", dir.display()), e))?;
        }
        // The one way the file is opened: here, and again after a failed flush.
        let file = path.clone();
        let reopen = move || Database::builder().set_cache_size(CACHE_BYTES).create(&file);
        let give_up = std::time::Instant::now() + wait;
        let mut said = false;
        let db = loop {
            match reopen() {
                Ok(db) => break db,
                Err(redb::DatabaseError::DatabaseAlreadyOpen) if std::time::Instant::now() < give_up => {
                    if !said {
                        tracing::warn!(
                            path = %path.display(),
                            "the store file is in use by another process; waiting up to {} ms for it",
                            wait.as_millis()
                        );
                        said = true;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                    return Err(StoreError::Unavailable(format!(
                        "the store file {} is in use by another process (waited {} ms; a `serve` holds \
                         it while it runs: stop it, chat through it, or pass another --store-path)",
                        path.display(),
                        wait.as_millis()
                    )));
                }
                Err(e) => return Err(failed(&format!("cannot open the store file {}", path.display()), e)),
            }
        };
        EmbeddedStore::on(db, path, Arc::new(reopen), clock)
    }

    /// A store on `db`, whose file (or other backend) is `path` and which `reopen` opens again.
    fn on(
        db: Database,
        path: PathBuf,
        reopen: Arc<Reopen>,
        clock: Arc<dyn Clock>,
    ) -> Result<EmbeddedStore, StoreError> {
        let txn = db.begin_write().map_err(|e| failed("begin", e))?;
        txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
        txn.commit().map_err(|e| failed("commit", e))?;
        Ok(EmbeddedStore {
            pending: Arc::new(Mutex::new(Pending { db: Some(Arc::new(db)), ..Pending::default() })),
            reopen,
            flushed: Arc::default(),
            commits: Arc::default(),
            calls: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_CALLS)),
            path,
            clock,
            retention: DEFAULT_RETENTION,
        })
    }

    /// Items live for `retention` after their last write.
    pub fn with_retention(mut self, retention: Duration) -> EmbeddedStore {
        self.retention = retention;
        self
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many write transactions have been committed to the file since it was opened (each
    /// with one `fdatasync`): one per flush that had writes to take. For tests and benchmarks.
    pub fn durable_commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Writes one item as is, bypassing every check, durably. For repair tools and for tests that
    /// need an item of unknown shape.
    pub async fn put_raw(&self, pk: &str, sk: &str, item: &Item) -> Result<(), StoreError> {
        let ((), upto) = self.change(|view| {
            view.put(pk, sk, item);
            Ok(())
        })?;
        self.flush(upto).await
    }

    /// Runs `f` on a view of the store as every call before this one left it, and adds what it
    /// wrote to the pending writes if it succeeds (all of it, or nothing if it fails). Returns
    /// `f`'s answer and the number of this call, which [`EmbeddedStore::flush`] takes.
    fn change<T>(
        &self,
        f: impl FnOnce(&mut View<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, u64), StoreError> {
        let mut pending = lock(&self.pending);
        if pending.failing && pending.len >= MAX_WAITING_WRITES {
            return Err(StoreError::Unavailable(format!(
                "the store file {} cannot be written: {} writes are waiting for it",
                self.path.display(),
                pending.len
            )));
        }
        let (out, staged) = {
            self.open_again_if_closed(&mut pending)?;
            let mut view = View::of(&pending)?;
            let out = f(&mut view)?;
            (out, view.staged)
        };
        if staged.is_empty() {
            return Ok((out, pending.last));
        }
        pending.last += 1;
        let call = pending.last;
        for (pk, items) in staged {
            let partition = pending.writes.entry(pk).or_default();
            let mut added = 0;
            for (sk, (_, value)) in items {
                if partition.insert(sk, (call, value)).is_none() {
                    added += 1;
                }
            }
            pending.len += added;
        }
        Ok((out, call))
    }

    /// Runs `f` on a view of the store as every call before this one left it.
    fn read<T>(&self, f: impl FnOnce(&View<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut pending = lock(&self.pending);
        self.open_again_if_closed(&mut pending)?;
        f(&View::of(&pending)?)
    }

    /// If a flush closed the file and could not open it again (the disk still refused), tries
    /// again, here: nothing else would. This blocks the calling thread for an open, but only
    /// after a failed write, and only until an open succeeds.
    fn open_again_if_closed(&self, pending: &mut Pending) -> Result<(), StoreError> {
        if pending.db.is_some() {
            return Ok(());
        }
        match (self.reopen)() {
            Ok(db) => {
                pending.db = Some(Arc::new(db));
                Ok(())
            }
            Err(e) => Err(StoreError::Unavailable(format!(
                "the store file {} is closed: it could not be opened again after a failed write: {e}",
                self.path.display()
            ))),
        }
    }

    /// Returns once the writes of call `upto` and every call before it are on disk: at once if a
    /// flush took them already, else after the flush that does (on the blocking pool; one at a
    /// time, each taking every pending write, so concurrent callers share commits). A caller that
    /// stops waiting does not stop the flush.
    async fn flush(&self, upto: u64) -> Result<(), StoreError> {
        let (pending, flushed, commits, reopen) =
            (self.pending.clone(), self.flushed.clone(), self.commits.clone(), self.reopen.clone());
        let permit = self.calls.clone().acquire_owned().await.expect("the semaphore is never closed");
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut flushed = lock(&flushed);
            if flushed.upto >= upto {
                return Ok(());
            }
            flush_pending(&pending, &mut flushed, &commits, &*reopen)
        })
        .await
        .map_err(|e| failed("store task", e))?
    }

    fn ttl(&self, now_ms: u64) -> u64 {
        ttl_after(now_ms, self.retention)
    }
}

/// Commits every pending write in one durable transaction and forgets those not written again
/// meanwhile. The caller holds `flushed`, so flushes run one at a time, each after the last.
///
/// After a failed flush it first reopens the file (`reopen`): redb takes no further commit on a
/// handle whose commit failed, and a new handle recovers the file at its last commit, so the
/// writes still pending reach the disk once it takes them again, with no restart.
fn flush_pending(
    pending: &Mutex<Pending>,
    flushed: &mut Flushed,
    commits: &AtomicU64,
    reopen: &Reopen,
) -> Result<(), StoreError> {
    let (db, batch, upto) = {
        let mut guard = lock(pending);
        if guard.failing || guard.db.is_none() {
            // The file's lock is held until the old handle is gone. Views borrow it only under
            // this lock and flushes run one at a time, so this is its last reference. The open
            // runs under this lock too, as every open does (`open_again_if_closed`), so two never
            // race for the file; calls wait for it, and only after a failed write.
            drop(guard.db.take());
            let db = reopen().map_err(|e| failed("reopen the store file after a failed write", e))?;
            guard.db = Some(Arc::new(db));
        }
        let db = guard.db.clone().expect("the file is open");
        (db, guard.writes.clone(), guard.last)
    };
    if batch.is_empty() {
        flushed.upto = upto;
        return Ok(());
    }
    let committed = (|| {
        let mut txn = db.begin_write().map_err(|e| failed("begin", e))?;
        txn.set_durability(Durability::Immediate);
        {
            let mut table = txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
            for (pk, items) in &batch {
                for (sk, (_, value)) in items {
                    match value {
                        Some(bytes) => table.insert((pk.as_str(), sk.as_str()), &**bytes).map(drop),
                        None => table.remove((pk.as_str(), sk.as_str())).map(drop),
                    }
                    .map_err(|e| failed("write", e))?;
                }
            }
        }
        txn.commit().map_err(|e| failed("commit", e))
    })();
    let mut pending = lock(pending);
    if let Err(e) = committed {
        pending.failing = true;
        return Err(e);
    }
    commits.fetch_add(1, Ordering::Relaxed);
    pending.failing = false;
    let mut forgotten = 0;
    for (pk, items) in &batch {
        let Some(partition) = pending.writes.get_mut(pk) else { continue };
        for (sk, (call, _)) in items {
            if partition.get(sk).is_some_and(|(now, _)| now == call) {
                partition.remove(sk);
                forgotten += 1;
            }
        }
        if partition.is_empty() {
            pending.writes.remove(pk);
        }
    }
    pending.len -= forgotten;
    flushed.upto = upto;
    Ok(())
}

impl Drop for EmbeddedStore {
    /// Closing the store flushes what is pending (after any flush still running).
    fn drop(&mut self) {
        let mut flushed = lock(&self.flushed);
        if let Err(e) = flush_pending(&self.pending, &mut flushed, &self.commits, &*self.reopen) {
            let waiting = lock(&self.pending).len;
            tracing::error!(path = %self.path.display(), error = %e, waiting, "the store was closed with writes not saved");
        }
    }
}

/// One call's view: its own writes, over the pending ones, over the file's last commit.
struct View<'a> {
    table: redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
    pending: &'a Layer,
    staged: Layer,
}

impl<'a> View<'a> {
    fn of(pending: &'a Pending) -> Result<View<'a>, StoreError> {
        let db = pending
            .db
            .as_deref()
            .ok_or_else(|| StoreError::Unavailable("the store file is closed".into()))?;
        let txn = db.begin_read().map_err(|e| failed("begin", e))?;
        let table = txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
        Ok(View { table, pending: &pending.writes, staged: Layer::new() })
    }

    /// The newest write of `pk` / `sk` not in the file yet, if any.
    fn written(&self, pk: &str, sk: &str) -> Option<&Value> {
        [&self.staged, self.pending]
            .into_iter()
            .find_map(|layer| layer.get(pk).and_then(|p| p.get(sk)))
            .map(|(_, value)| value)
    }

    /// Reads the item at `pk` / `sk`, treating an expired one as absent.
    fn get(&self, pk: &str, sk: &str, now_ms: u64) -> Result<Option<Item>, StoreError> {
        let item = match self.written(pk, sk) {
            Some(None) => return Ok(None),
            Some(Some(bytes)) => parse(pk, sk, bytes)?,
            None => {
                let Some(value) = self.table.get((pk, sk)).map_err(|e| failed("read", e))? else {
                    return Ok(None);
                };
                parse(pk, sk, value.value())?
            }
        };
        match item::ttl_of(pk, sk, &item)? {
            Some(ttl) if is_expired(ttl, now_ms) => Ok(None),
            _ => Ok(Some(item)),
        }
    }

    /// Calls `f` with each item of `pk` whose sort key is in `from..to`, newest sort key first,
    /// until it returns `false`.
    fn each_rev(
        &self,
        pk: &str,
        from: &str,
        to: &str,
        mut f: impl FnMut(&str, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        // The writes not in the file (this call's own over the pending ones), newest sort key first.
        let mut written: BTreeMap<&str, &Value> = BTreeMap::new();
        for layer in [self.pending, &self.staged] {
            if let Some(partition) = layer.get(pk) {
                for (sk, (_, value)) in
                    partition.range::<str, _>((Bound::Included(from), Bound::Excluded(to)))
                {
                    written.insert(sk, value);
                }
            }
        }
        let mut written = written.into_iter().rev().peekable();
        let mut file = self.table.range((pk, from)..(pk, to)).map_err(|e| failed("read", e))?.rev();
        let mut next_file = file.next().transpose().map_err(|e| failed("read", e))?;
        loop {
            let file_sk = next_file.as_ref().map(|(k, _)| k.value().1);
            let take_written = match (written.peek(), file_sk) {
                (None, None) => return Ok(()),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((w, _)), Some(f)) => *w >= f,
            };
            let go_on = if take_written {
                let (sk, value) = written.next().expect("peeked");
                if file_sk == Some(sk) {
                    next_file = file.next().transpose().map_err(|e| failed("read", e))?;
                }
                match value {
                    Some(bytes) => f(sk, bytes)?,
                    None => true,
                }
            } else {
                let (k, v) = next_file.take().expect("compared");
                let go_on = f(k.value().1, v.value())?;
                next_file = file.next().transpose().map_err(|e| failed("read", e))?;
                go_on
            };
            if !go_on {
                return Ok(());
            }
        }
    }

    fn stage(&mut self, pk: &str, sk: &str, value: Value) {
        self.staged.entry(pk.to_owned()).or_default().insert(sk.to_owned(), (0, value));
    }

    fn put(&mut self, pk: &str, sk: &str, item: &Item) {
        self.stage(pk, sk, Some(to_bytes(item).into()));
    }

    fn remove(&mut self, pk: &str, sk: &str) {
        self.stage(pk, sk, None);
    }
}

fn to_bytes(item: &Item) -> Vec<u8> {
    serde_json::to_vec(item).expect("attribute maps serialize")
}

fn parse(pk: &str, sk: &str, bytes: &[u8]) -> Result<Item, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        key: item::item_name(pk, sk),
        reason: format!("not an attribute map: {e}"),
    })
}

#[async_trait::async_trait]
impl Store for EmbeddedStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        let now = self.clock.now_ms();
        self.read(|view| {
            view.get(&key.pk(), META_SK, now)?.map(|item| item::decode_episode(key, &item)).transpose()
        })
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.ttl(now);
        // Within a turn (the support agent keeps its vendor conversation here) the reply's flush
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
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.read(|view| {
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            // '$' follows '#': every `MSG#...` sort key of the partition lies in this range.
            view.each_rev(&pk, MSG_PREFIX, "MSG$", |sk, bytes| {
                let item = parse(&pk, sk, bytes)?;
                if !item::ttl_of(&pk, sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    out.push(item::decode_message(&pk, sk, &item)?);
                }
                Ok(out.len() < limit)
            })?;
            out.reverse();
            Ok(out)
        })
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
        // Not flushed: a lease lives as long as this process holds the file (one process at a
        // time), and one the file keeps after a crash has expired when it is read again.
        let (grant, _) = self.change(|view| {
            if let Some(item) = view.get(&pk, &sk, now)? {
                let (current, until) = item::decode_lease(&pk, &sk, &item)?;
                if current != holder && until > now {
                    return Ok(LeaseGrant::HeldUntil(until));
                }
            }
            view.put(&pk, &sk, &item::encode_lease(holder, expires_at));
            Ok(LeaseGrant::Granted)
        })?;
        Ok(grant)
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let (pk, sk) = (key.pk(), lease_sk(name));
        self.change(|view| {
            if let Some(item) = view.get(&pk, &sk, now)? {
                if item::decode_lease(&pk, &sk, &item)?.0 == holder {
                    view.remove(&pk, &sk);
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SystemClock;

    /// The child process of [`a_crash_keeps_every_reply_saved_before_it`]: writes two turns
    /// into the store file named by `BATON_CRASH_STORE` (the first with its reply, the second
    /// only its user message), then exits without closing the store, as a crash would.
    #[tokio::test]
    #[ignore = "run as a child process by a_crash_keeps_every_reply_saved_before_it"]
    async fn crash_child() {
        let Some(path) = std::env::var_os("BATON_CRASH_STORE") else { return };
        let store = EmbeddedStore::open(path, Arc::new(SystemClock)).unwrap();
        let key = EpisodeKey::new("u", "e").unwrap();
        store.record_user_message(&key, &StoredMessage::user("t1", "first", 1), Some("r1")).await.unwrap();
        let reply = StoredMessage {
            seq: 1,
            role: crate::store::Role::Assistant,
            ..StoredMessage::user("t1", "answer", 2)
        };
        store.save_reply(&key, "t1", &[reply]).await.unwrap();
        store.record_user_message(&key, &StoredMessage::user("t2", "second", 3), Some("r2")).await.unwrap();
        // In this process the second user message is there, written but not flushed.
        assert_eq!(store.recent_messages(&key, 10).await.unwrap().len(), 3);
        std::process::exit(0);
    }

    #[tokio::test]
    async fn a_crash_keeps_every_reply_saved_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "store::embedded::tests::crash_child", "--test-threads=1"])
            .env("BATON_CRASH_STORE", &path)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        let key = EpisodeKey::new("u", "e").unwrap();
        let stored = store.recent_messages(&key, 10).await.unwrap();
        let first: Vec<_> = stored.iter().filter(|m| m.turn_id == "t1").map(|m| m.content.as_str()).collect();
        // The reply's durable commit took the turn's user message (committed without a flush)
        // to disk with it.
        assert_eq!(first, ["first", "answer"], "{stored:?}");
        // So did it the request marker: a retry of the first request is a duplicate.
        let again = store.record_user_message(&key, &StoredMessage::user("t9", "first", 9), Some("r1")).await;
        assert!(matches!(again, Ok(Recorded::Duplicate { ref turn_id }) if turn_id == "t1"), "{again:?}");
    }

    /// Concurrent writers; callers that stop waiting (here: aborted tasks, some while queued for
    /// a permit, some mid-flush) leave the store consistent and the permits free for the rest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_and_abandoned_writes_keep_every_finished_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let key = EpisodeKey::new("u", "e").unwrap();
        let mut tasks = Vec::new();
        for i in 0..60u32 {
            let (store, key) = (store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let turn = format!("t{i:02}");
                store
                    .record_user_message(&key, &StoredMessage::user(&turn, "q", i.into()), Some(&turn))
                    .await?;
                let reply = StoredMessage {
                    seq: 1,
                    role: crate::store::Role::Assistant,
                    ..StoredMessage::user(&turn, "a", 0)
                };
                store.save_reply(&key, &turn, &[reply]).await?;
                Ok::<u32, StoreError>(i)
            }));
        }
        for task in tasks.iter().skip(1).step_by(3) {
            task.abort();
        }
        let mut finished = Vec::new();
        for task in tasks {
            match tokio::time::timeout(Duration::from_secs(30), task).await.expect("no write waits forever") {
                Ok(done) => finished.push(done.unwrap()),
                Err(e) => assert!(e.is_cancelled(), "{e}"),
            }
        }
        assert!(finished.len() >= 40, "only the aborted ones may be missing: {}", finished.len());
        let stored = store.recent_messages(&key, 1000).await.unwrap();
        for i in &finished {
            let turn = format!("t{i:02}");
            let of_turn: Vec<_> =
                stored.iter().filter(|m| m.turn_id == turn).map(|m| m.content.as_str()).collect();
            assert_eq!(of_turn, ["q", "a"], "turn {turn}: {stored:?}");
        }
        // Every recorded user message bumped the episode once: no update was lost.
        let users = stored.iter().filter(|m| m.role == crate::store::Role::User).count() as u64;
        assert_eq!(store.episode(&key).await.unwrap().unwrap().version, users);
        // The permits are free: a write after all of this goes through at once.
        let late = StoredMessage::user("late", "q", 99);
        tokio::time::timeout(Duration::from_secs(5), store.record_user_message(&key, &late, None))
            .await
            .expect("the permits were released")
            .unwrap();
    }

    fn answer(turn: &str, seq: u32, content: &str) -> StoredMessage {
        StoredMessage { seq, role: crate::store::Role::Assistant, ..StoredMessage::user(turn, content, 0) }
    }

    /// A new store file in a temporary directory (kept while the first value lives), and a key.
    fn fresh() -> (tempfile::TempDir, PathBuf, EmbeddedStore, EpisodeKey) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        (dir, path, store, EpisodeKey::new("u", "e").unwrap())
    }

    fn contents(messages: &[StoredMessage]) -> Vec<&str> {
        messages.iter().map(|m| m.content.as_str()).collect()
    }

    /// A turn's writes (user message, episode update, reply) reach the file in one commit, the
    /// reply's; until then they are read back from memory, and closing the store saves them.
    #[tokio::test]
    async fn a_turn_is_one_durable_commit_and_closing_saves_what_is_pending() {
        let (_dir, path, store, key) = fresh();
        store.record_user_message(&key, &StoredMessage::user("t1", "q1", 1), Some("r1")).await.unwrap();
        let mut episode = store.episode(&key).await.unwrap().expect("recorded");
        episode.response_ids.insert("a".into(), "resp_1".into());
        store.save_episode(&episode).await.unwrap();
        assert_eq!(store.durable_commits(), 0, "nothing flushed before the reply");
        store.save_reply(&key, "t1", &[answer("t1", 1, "a1")]).await.unwrap();
        assert_eq!(store.durable_commits(), 1);
        // The next turn's writes wait in memory; a clean close takes them to the file.
        store.record_user_message(&key, &StoredMessage::user("t2", "q2", 2), None).await.unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["q1", "a1", "q2"]);
        drop(store);
        let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["q1", "a1", "q2"]);
        let episode = store.episode(&key).await.unwrap().unwrap();
        assert_eq!((episode.version, episode.response_ids.get("a").map(String::as_str)), (3, Some("resp_1")));
    }

    /// A store file on disk is opened again in the same process once its handle is dropped (its
    /// lock goes with the handle): after a failed flush, the next one reopens it and commits.
    #[tokio::test]
    async fn a_file_is_opened_again_after_a_failed_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let opens = Arc::new(AtomicU64::new(0));
        let (file, counted) = (path.clone(), opens.clone());
        let reopen = move || {
            counted.fetch_add(1, Ordering::Relaxed);
            Database::builder().create(&file)
        };
        let db = Database::builder().create(&path).unwrap();
        let store = EmbeddedStore::on(db, path.clone(), Arc::new(reopen), Arc::new(SystemClock)).unwrap();
        let key = EpisodeKey::new("u", "e").unwrap();
        store.record_user_message(&key, &StoredMessage::user("t1", "q1", 1), None).await.unwrap();
        store.save_reply(&key, "t1", &[answer("t1", 1, "a1")]).await.unwrap();
        assert_eq!(opens.load(Ordering::Relaxed), 0);
        // What a refused commit leaves: the flag, and the writes waiting.
        lock(&store.pending).failing = true;
        store.record_user_message(&key, &StoredMessage::user("t2", "q2", 2), None).await.unwrap();
        store.save_reply(&key, "t2", &[answer("t2", 2, "a2")]).await.unwrap();
        assert_eq!(opens.load(Ordering::Relaxed), 1, "the flush opened the file again");
        assert!(!lock(&store.pending).failing);
        drop(store);
        let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["q1", "a1", "q2", "a2"]);
    }

    /// Reads see the writes not yet in the file over the file's items, removals included, in
    /// sort-key order and within the limit; a reply saved again replaces what that view holds.
    #[tokio::test]
    async fn reads_merge_pending_writes_over_the_file() {
        let (_dir, path, store, key) = fresh();
        let pk = key.pk();
        store.record_user_message(&key, &StoredMessage::user("t1", "q1", 1), None).await.unwrap();
        store
            .save_reply(&key, "t1", &[answer("t1", 1, "a"), answer("t1", 2, "b"), answer("t1", 3, "c")])
            .await
            .unwrap();
        // Pending, not flushed: one of the file's messages removed, one added before it in
        // sort-key order, and a new turn after them.
        let ttl = store.ttl(store.clock.now_ms());
        store
            .change(|view| {
                view.remove(&pk, &message_sk("t1", 2));
                view.put(&pk, &message_sk("t0", 1), &item::encode_message(&answer("t0", 1, "early"), ttl));
                view.put(
                    &pk,
                    &message_sk("t2", 0),
                    &item::encode_message(&StoredMessage::user("t2", "q2", 2), ttl),
                );
                Ok(())
            })
            .unwrap();
        assert_eq!(store.durable_commits(), 1);
        assert_eq!(
            contents(&store.recent_messages(&key, 10).await.unwrap()),
            ["early", "q1", "a", "c", "q2"]
        );
        assert_eq!(contents(&store.recent_messages(&key, 2).await.unwrap()), ["c", "q2"]);
        assert!(store.recent_messages(&key, 0).await.unwrap().is_empty());
        // Saving t1's reply again removes every earlier part of it, in the file or pending.
        store.save_reply(&key, "t1", &[answer("t1", 1, "again")]).await.unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["early", "q1", "again", "q2"]);
        drop(store);
        let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["early", "q1", "again", "q2"]);
    }

    /// A call that fails after writing part of its change leaves nothing of it behind.
    #[tokio::test]
    async fn a_failed_call_writes_nothing() {
        let (_dir, _, store, key) = fresh();
        let ttl = store.ttl(store.clock.now_ms());
        let failed = store.change(|view| {
            view.put(
                &key.pk(),
                &message_sk("t1", 0),
                &item::encode_message(&StoredMessage::user("t1", "q", 1), ttl),
            );
            Err::<(), _>(StoreError::Failed("half-way".into()))
        });
        assert!(matches!(failed, Err(StoreError::Failed(_))), "{failed:?}");
        assert!(store.recent_messages(&key, 10).await.unwrap().is_empty());
        assert_eq!(lock(&store.pending).len, 0);
        // A stale episode write is refused whole, too.
        store.record_user_message(&key, &StoredMessage::user("t1", "q", 1), None).await.unwrap();
        let stale = Episode { response_ids: [("a".into(), "x".into())].into(), ..Episode::new(key.clone()) };
        assert!(matches!(store.save_episode(&stale).await, Err(StoreError::Conflict { .. })));
        assert!(store.episode(&key).await.unwrap().unwrap().response_ids.is_empty());
    }

    /// Replies saved at the same time share commits (group commit), and each is on disk when
    /// its call returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_replies_share_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = Arc::new(EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap());
        let turns = 40u32;
        let all_recorded = Arc::new(tokio::sync::Barrier::new(turns as usize));
        let mut tasks = Vec::new();
        for i in 0..turns {
            let (store, all_recorded) = (store.clone(), all_recorded.clone());
            tasks.push(tokio::spawn(async move {
                let key = EpisodeKey::new("u", format!("e{i}")).unwrap();
                store.record_user_message(&key, &StoredMessage::user("t", "q", 1), None).await.unwrap();
                all_recorded.wait().await;
                store.save_reply(&key, "t", &[answer("t", 1, "a")]).await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let commits = store.durable_commits();
        assert!((1..=turns as u64 / 2).contains(&commits), "{commits} commits for {turns} replies");
        // Nothing was left for the close to save: every reply was flushed before it returned.
        assert_eq!(lock(&store.pending).len, 0);
    }

    /// A disk that fails its writes once asked to: redb's in-memory backend, with a switch. Its
    /// clones are the same disk, as two opens of one file are.
    #[derive(Debug, Clone)]
    struct FailingDisk {
        inner: Arc<redb::backends::InMemoryBackend>,
        failing: Arc<std::sync::atomic::AtomicBool>,
    }

    impl FailingDisk {
        fn new() -> FailingDisk {
            FailingDisk { inner: Arc::new(redb::backends::InMemoryBackend::new()), failing: Arc::default() }
        }

        fn fail(&self, failing: bool) {
            self.failing.store(failing, Ordering::Relaxed);
        }

        fn open(&self) -> Result<Database, redb::DatabaseError> {
            Database::builder().create_with_backend(self.clone())
        }

        /// A store on this disk, reopening it on this disk.
        fn store(&self) -> EmbeddedStore {
            let disk = self.clone();
            let reopen = move || disk.open();
            EmbeddedStore::on(
                self.open().unwrap(),
                "<failing disk>".into(),
                Arc::new(reopen),
                Arc::new(SystemClock),
            )
            .unwrap()
        }

        fn check(&self) -> std::io::Result<()> {
            if self.failing.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("no space left on device"));
            }
            Ok(())
        }
    }

    impl redb::StorageBackend for FailingDisk {
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
            self.inner.read(offset, len)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.check()?;
            self.inner.set_len(len)
        }
        fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
            self.check()?;
            self.inner.sync_data(eventual)
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write(offset, data)
        }
    }

    /// A flush the disk refuses is an error for the reply that asked for it, with what the disk
    /// said; later calls neither hang nor panic; once the disk takes writes again, the next flush
    /// reopens the file and saves what waited, with no restart; and what waits in memory stays
    /// bounded.
    #[tokio::test]
    async fn a_failing_disk_is_a_clear_error_recovers_and_keeps_memory_bounded() {
        let disk = FailingDisk::new();
        let store = disk.store();
        let key = EpisodeKey::new("u", "e").unwrap();
        store.record_user_message(&key, &StoredMessage::user("t1", "q1", 1), None).await.unwrap();
        store.save_reply(&key, "t1", &[answer("t1", 1, "a1")]).await.unwrap();
        disk.fail(true);
        let refused = store.save_reply(&key, "t1", &[answer("t1", 1, "a2")]).await;
        assert!(
            matches!(&refused, Err(StoreError::Failed(m)) if m.contains("no space left on device")),
            "{refused:?}"
        );
        // Reads go on, and so do writes, into memory: the refused reply is still seen.
        let read = store.recent_messages(&key, 10).await.unwrap();
        assert_eq!(contents(&read), ["q1", "a2"]);
        store.record_user_message(&key, &StoredMessage::user("t2", "q2", 2), None).await.unwrap();
        // While the disk still refuses, the next flush cannot reopen the file either: an error,
        // and reads say the file is closed rather than answer from half of it.
        let again = tokio::time::timeout(
            Duration::from_secs(5),
            store.save_reply(&key, "t2", &[answer("t2", 2, "b1")]),
        )
        .await
        .expect("no call waits on a failed store");
        assert!(matches!(&again, Err(StoreError::Failed(m)) if m.contains("reopen")), "{again:?}");
        let closed = store.recent_messages(&key, 10).await;
        assert!(matches!(&closed, Err(StoreError::Unavailable(m)) if m.contains("closed")), "{closed:?}");
        // The disk is back: the next reply reopens the file and saves everything that waited.
        disk.fail(false);
        store.save_reply(&key, "t2", &[answer("t2", 2, "b2")]).await.unwrap();
        assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["q1", "a2", "q2", "b2"]);
        assert_eq!(lock(&store.pending).len, 0);
        drop(store);
        let restarted = disk.store();
        assert_eq!(contents(&restarted.recent_messages(&key, 10).await.unwrap()), ["q1", "a2", "q2", "b2"]);
        // The disk fails again. While flushes fail, writes wait in memory up to the bound, then
        // are refused, saying why.
        let store = restarted;
        disk.fail(true);
        assert!(store.save_reply(&key, "t2", &[answer("t2", 2, "b3")]).await.is_err());
        let mut refused = None;
        for i in 0..=MAX_WAITING_WRITES {
            let turn = format!("w{i:05}");
            if let Err(e) = store.record_user_message(&key, &StoredMessage::user(&turn, "q", 3), None).await {
                refused = Some((i, e));
                break;
            }
        }
        let (at, e) = refused.expect("writes are refused once the bound is reached");
        assert!(at < MAX_WAITING_WRITES, "refused after {at} writes");
        assert!(matches!(&e, StoreError::Unavailable(m) if m.contains("writes are waiting")), "{e:?}");
        assert_eq!(lock(&store.pending).len, MAX_WAITING_WRITES);
    }

    #[test]
    fn a_second_open_waits_for_the_file_to_be_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let first = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        let (released_tx, released_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
            released_tx.send(()).unwrap();
        });
        let second = EmbeddedStore::open_waiting(&path, Arc::new(SystemClock), Duration::from_secs(30));
        assert!(second.is_ok(), "{second:?}");
        assert!(released_rx.try_recv().is_ok(), "opened only once the first one let go");
        holder.join().unwrap();
    }

    #[test]
    fn a_file_held_past_the_wait_is_a_clear_unavailable_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let _first = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
        let err = EmbeddedStore::open_waiting(&path, Arc::new(SystemClock), Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("in use by another process") && message.contains("--store-path"),
            "{message}"
        );
    }
}
