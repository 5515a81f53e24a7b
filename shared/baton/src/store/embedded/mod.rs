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
//! ([`Conversations::save_reply`](super::Conversations::save_reply), [`EmbeddedStore::put_raw`]) waits for the
//! file: it hops to the blocking pool, where one redb write transaction takes every pending write
//! to disk with one `fdatasync`. Concurrent turns share that commit (group commit): a reply that arrives while
//! another is being flushed is taken by the next flush, with all the others waiting by then.
//!
//! So a turn costs one write transaction and one `fdatasync`: its user message, request marker
//! and episode touch (and any vendor conversation an agent saves mid-turn) reach the disk
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
//! `MAX_WAITING_WRITES` writes wait, and further writes are refused with
//! [`StoreError::Unavailable`].
//!
//! The file is locked while open (redb takes an exclusive `flock`), so one process uses it at a
//! time. A second process waits for it up to `LOCK_WAIT`, saying so on the log, which lets two
//! `chat` commands run one after the other; a `serve` holds the file for its whole life, so a
//! `chat` beside it fails after the wait with a clear error. Sharing the file between processes
//! would mean opening it per operation (an open costs more than the operation) or a store
//! server; the local default keeps redb and this bounded wait, and DynamoDB serves many processes.
//!
//! A turn log's writes (`turn_log`) are not flushed by their own call: each asks for a flush
//! within `TURN_LOG_FLUSH_WITHIN`, which one task does for every write waiting by then (and a
//! reply's flush takes them sooner). So a producer killed mid-turn leaves its log on disk up to
//! the batches written a second before, and a turn's many small batches, and every turn's,
//! share flushes instead of paying one each.
//!
//! Rooms: this file holds the file, its pending writes and the flush; `view` reads through them;
//! `calls` implements each concern of [`Store`](super::Store) on top; `turn_log` the turn logs' calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redb::{Database, Durability, TableDefinition};

mod calls;
#[cfg(test)]
mod tests;
mod turn_log;
mod view;

use view::View;

use super::item::Item;
use super::{Clock, DEFAULT_RETENTION, DEFAULT_TURN_LOG_TTL, StoreError, ttl_after};

/// Flushes that run on the blocking pool at once. They take one lock in turn (redb runs one
/// write transaction at a time, and a flush takes every pending write), so more threads would
/// only wait: after a burst of 500 dropped streams (each saving its partial reply) the pool
/// had grown to ~400 threads, each keeping its stack and malloc arena.
pub(crate) const MAX_CONCURRENT_CALLS: usize = 4;

/// While flushes fail, how many writes may wait for the file before further writes are refused.
pub(crate) const MAX_WAITING_WRITES: usize = 10_000;

/// redb's page cache. Its default (1 GiB) lets a long-running `serve` grow with the store file;
/// a turn reads a few recent messages of one episode, pages written moments before and still
/// in the cache, so a small one serves it. Writes fill it: at 16 MiB, a burst of 1,000 turns
/// kept 16 MB more resident for good (docs/benchmarks.md, "Memory per stream").
pub(crate) const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// How soon a turn log's write reaches the disk when no other flush takes it first.
pub(crate) const TURN_LOG_FLUSH_WITHIN: Duration = Duration::from_secs(1);

/// How long [`EmbeddedStore::open`] waits for a store file another process holds.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The one table: `(pk, sk)` → the item's DynamoDB JSON.
pub(crate) const ITEMS: TableDefinition<'static, (&str, &str), &[u8]> = TableDefinition::new("items");

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

/// A file-backed [`Store`](super::Store).
pub struct EmbeddedStore {
    pending: Arc<Mutex<Pending>>,
    reopen: Arc<Reopen>,
    flushed: Arc<Mutex<Flushed>>,
    commits: Arc<AtomicU64>,
    calls: Arc<tokio::sync::Semaphore>,
    path: PathBuf,
    clock: Arc<dyn Clock>,
    retention: Duration,
    turn_log_ttl: Duration,
    /// Whether a flush within [`TURN_LOG_FLUSH_WITHIN`] is on its way.
    flush_scheduled: Arc<AtomicBool>,
    /// This opening of the file: leases are written under it, and a lease written under another
    /// (a process that held the file before, and died or stopped) is free.
    pub(super) epoch: Arc<str>,
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
    /// for it up to `LOCK_WAIT` (blocking the calling thread: open stores at start-up).
    pub fn open(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_waiting(path, clock, LOCK_WAIT)
    }

    /// [`EmbeddedStore::open`], waiting up to `wait` for a file another process holds.
    pub(crate) fn open_waiting(
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
            turn_log_ttl: DEFAULT_TURN_LOG_TTL,
            flush_scheduled: Arc::default(),
            epoch: uuid::Uuid::new_v4().simple().to_string().into(),
        })
    }

    /// Items live for `retention` after their last write.
    pub fn with_retention(mut self, retention: Duration) -> EmbeddedStore {
        self.retention = retention;
        self
    }

    /// A turn log's items live for `ttl` after their write.
    pub fn with_turn_log_ttl(mut self, ttl: Duration) -> EmbeddedStore {
        self.turn_log_ttl = ttl;
        self
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

    /// Has every write made so far flushed within [`TURN_LOG_FLUSH_WITHIN`], by one task for
    /// all the writes asking meanwhile. The task holds the store weakly: a store closed first
    /// flushed on its close. A failed flush leaves the writes pending for the next one.
    fn flush_soon(&self) {
        // Outside a Tokio runtime (another executor) no task can wait: the next flush, or the
        // close, takes the writes.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if self.flush_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pending, flushed) = (Arc::downgrade(&self.pending), Arc::downgrade(&self.flushed));
        let (commits, reopen, calls, scheduled) =
            (self.commits.clone(), self.reopen.clone(), self.calls.clone(), self.flush_scheduled.clone());
        let path = self.path.clone();
        runtime.spawn(async move {
            tokio::time::sleep(TURN_LOG_FLUSH_WITHIN).await;
            scheduled.store(false, Ordering::Release);
            let Ok(permit) = calls.acquire_owned().await else { return };
            let done = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let (Some(pending), Some(flushed)) = (pending.upgrade(), flushed.upgrade()) else {
                    return Ok(());
                };
                let mut flushed = lock(&flushed);
                flush_pending(&pending, &mut flushed, &commits, &*reopen)
            })
            .await;
            if let Ok(Err(e)) = done {
                tracing::warn!(path = %path.display(), error = %e, "turn-log writes could not be flushed; the next flush tries again");
            }
        });
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
