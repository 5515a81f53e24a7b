//! The embedded store: one redb file, no server. The default for local runs.
//!
//! It keeps the same items under the same keys as the DynamoDB store (one table keyed by
//! `(pk, sk)`, values are the items' DynamoDB JSON), and gets the same guarantees from redb's
//! serializable write transactions: each trait call is one transaction, so optimistic locking and
//! request-id idempotency are checks inside it. Write transactions block (on redb's one writer
//! lock and on `fdatasync`), so they run on the blocking pool; reads run where they are called.
//!
//! Durability: a turn costs one `fdatasync`. The user message is committed without a flush
//! (`Durability::None`) and reaches the disk with the turn's reply, which is committed durably
//! before `completed` is sent; so does an episode update (the support agent's vendor
//! conversation). Every other write is durable on its own (docs/storage.md).
//!
//! The file is locked while open (redb takes an exclusive `flock`), so one process uses it at a
//! time. A second process waits for it up to [`LOCK_WAIT`], saying so on the log, which lets two
//! `chat` commands run one after the other; a `serve` holds the file for its whole life, so a
//! `chat` beside it fails after the wait with a clear error. Sharing the file between processes
//! would mean opening it per operation (an open costs more than the operation) or a store
//! server; the local default keeps redb and this bounded wait, and DynamoDB serves many processes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, Durability, ReadableTable, TableDefinition};

use super::item::{self, Item};
use super::{
    Clock, DEFAULT_RETENTION, Episode, EpisodeKey, META_SK, MSG_PREFIX, Recorded, Store, StoreError,
    StoredMessage, is_expired, message_sk, request_sk, ttl_after,
};

/// Store calls that run on the blocking pool at once. redb runs one write transaction at a time,
/// so more threads only wait on its lock: after a burst of 500 dropped streams (each saving its
/// partial reply) the pool had grown to ~400 threads, each keeping its stack and malloc arena.
pub const MAX_CONCURRENT_CALLS: usize = 4;

/// redb's page cache. Its default (1 GiB) lets a long-running `serve` grow with the store file;
/// a turn reads a few recent messages of one episode, pages written moments before and still
/// in the cache, so a small one serves it. Writes fill it: at 16 MiB, a burst of 1,000 turns
/// kept 16 MB more resident for good (docs/benchmarks.md, step 9).
pub const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// How long [`EmbeddedStore::open`] waits for a store file another process holds.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The one table: `(pk, sk)` → the item's DynamoDB JSON.
pub const ITEMS: TableDefinition<'static, (&str, &str), &[u8]> = TableDefinition::new("items");

/// A file-backed [`Store`].
pub struct EmbeddedStore {
    db: Arc<Database>,
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
        let give_up = std::time::Instant::now() + wait;
        let mut said = false;
        let db = loop {
            match Database::builder().set_cache_size(CACHE_BYTES).create(&path) {
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
        let txn = db.begin_write().map_err(|e| failed("begin", e))?;
        txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
        txn.commit().map_err(|e| failed("commit", e))?;
        Ok(EmbeddedStore {
            db: Arc::new(db),
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

    /// Writes one item as is, bypassing every check. For repair tools and for tests that need an
    /// item of unknown shape.
    pub async fn put_raw(&self, pk: &str, sk: &str, item: &Item) -> Result<(), StoreError> {
        let (pk, sk, bytes) = (pk.to_owned(), sk.to_owned(), to_bytes(item));
        self.write(move |t| {
            t.insert((pk.as_str(), sk.as_str()), bytes.as_slice()).map_err(|e| failed("insert", e))?;
            Ok(())
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        let permit = self.calls.clone().acquire_owned().await.expect("the semaphore is never closed");
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&db)
        })
        .await
        .map_err(|e| failed("store task", e))?
    }

    /// Runs `f` in one read transaction on the calling thread. redb's reads take no lock a
    /// writer holds across its `fdatasync` (readers see the last commit), and a turn's read
    /// touches a few cached pages (tens of µs), so a hop to the blocking pool and back (two
    /// thread wake-ups) would cost more than the read.
    fn read<T>(
        &self,
        f: impl FnOnce(&redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let txn = self.db.begin_read().map_err(|e| failed("begin", e))?;
        let table = txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
        f(&table)
    }

    /// Runs `f` in one write transaction and commits it durably (one `fdatasync`) if it succeeds.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut redb::Table<(&str, &str), &[u8]>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.write_with(Durability::Immediate, f).await
    }

    /// Runs `f` in one write transaction and commits it with `durability` if it succeeds. A
    /// [`Durability::None`] commit is visible to every later transaction at once but reaches the
    /// disk with the next durable commit (of any call): a crash in between loses it.
    async fn write_with<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut redb::Table<(&str, &str), &[u8]>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.blocking(move |db| {
            let mut txn = db.begin_write().map_err(|e| failed("begin", e))?;
            txn.set_durability(durability);
            let out = {
                let mut table = txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
                f(&mut table)?
            };
            txn.commit().map_err(|e| failed("commit", e))?;
            Ok(out)
        })
        .await
    }

    fn ttl(&self, now_ms: u64) -> u64 {
        ttl_after(now_ms, self.retention)
    }
}

fn to_bytes(item: &Item) -> Vec<u8> {
    serde_json::to_vec(item).expect("attribute maps serialize")
}

/// Reads the item at `pk` / `sk`, treating an expired one as absent.
fn get(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    pk: &str,
    sk: &str,
    now_ms: u64,
) -> Result<Option<Item>, StoreError> {
    let Some(value) = table.get((pk, sk)).map_err(|e| failed("read", e))? else { return Ok(None) };
    let item = parse(pk, sk, value.value())?;
    match item::ttl_of(pk, sk, &item)? {
        Some(ttl) if is_expired(ttl, now_ms) => Ok(None),
        _ => Ok(Some(item)),
    }
}

fn parse(pk: &str, sk: &str, bytes: &[u8]) -> Result<Item, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        key: item::item_name(pk, sk),
        reason: format!("not an attribute map: {e}"),
    })
}

fn put(
    table: &mut redb::Table<(&str, &str), &[u8]>,
    pk: &str,
    sk: &str,
    item: &Item,
) -> Result<(), StoreError> {
    table.insert((pk, sk), to_bytes(item).as_slice()).map_err(|e| failed("insert", e))?;
    Ok(())
}

#[async_trait::async_trait]
impl Store for EmbeddedStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        let now = self.clock.now_ms();
        self.read(|table| {
            get(table, &key.pk(), META_SK, now)?.map(|item| item::decode_episode(key, &item)).transpose()
        })
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.ttl(now);
        let mut next = episode.clone();
        // Within a turn (the support agent keeps its vendor conversation here) the reply's durable
        // commit takes this to disk too; a crash before it loses the conversation id, and the next
        // turn starts a new vendor conversation (docs/storage.md, "Durability").
        self.write_with(Durability::None, move |table| {
            let pk = next.key.pk();
            let stored =
                get(table, &pk, META_SK, now)?.map(|i| item::decode_episode(&next.key, &i)).transpose()?;
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
            put(table, &pk, META_SK, &item::encode_episode(&next, ttl))?;
            Ok(next)
        })
        .await
    }

    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.ttl(now);
        let (key, message, request_id) = (key.clone(), message.clone(), request_id.map(str::to_owned));
        // Not flushed on its own: the turn's reply (`save_reply`) is the durable commit that takes
        // it to disk, one `fdatasync` per turn instead of two (docs/storage.md, "Durability").
        self.write_with(Durability::None, move |table| {
            let pk = key.pk();
            if let Some(id) = &request_id {
                let sk = request_sk(id);
                if let Some(seen) = get(table, &pk, &sk, now)? {
                    return Ok(Recorded::Duplicate { turn_id: item::decode_request(&pk, &sk, &seen)? });
                }
                put(table, &pk, &sk, &item::encode_request(&message.turn_id, ttl))?;
            }
            put(table, &pk, &message.sk(), &item::encode_message(&message, ttl))?;
            let mut episode = match get(table, &pk, META_SK, now)? {
                Some(item) => item::decode_episode(&key, &item)?,
                None => Episode { created_at: now, ..Episode::new(key.clone()) },
            };
            episode.version += 1;
            episode.updated_at = now;
            put(table, &pk, META_SK, &item::encode_episode(&episode, ttl))?;
            Ok(Recorded::New)
        })
        .await
    }

    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        let ttl = self.ttl(self.clock.now_ms());
        let (pk, turn_id, messages) = (key.pk(), turn_id.to_owned(), messages.to_vec());
        self.write(move |table| {
            // Drop an earlier reply of this turn (seq 1 and up), then write this one.
            let from = message_sk(&turn_id, 1);
            let to = format!("{MSG_PREFIX}{turn_id}$");
            let old: Vec<String> = table
                .range((pk.as_str(), from.as_str())..(pk.as_str(), to.as_str()))
                .map_err(|e| failed("read", e))?
                .map(|entry| entry.map(|(k, _)| k.value().1.to_owned()).map_err(|e| failed("read", e)))
                .collect::<Result<_, _>>()?;
            for sk in old {
                table.remove((pk.as_str(), sk.as_str())).map_err(|e| failed("remove", e))?;
            }
            for m in &messages {
                put(table, &pk, &m.sk(), &item::encode_message(m, ttl))?;
            }
            Ok(())
        })
        .await
    }

    async fn recent_messages(
        &self,
        key: &EpisodeKey,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let (pk, now) = (key.pk(), self.clock.now_ms());
        self.read(|table| {
            // '$' follows '#': every `MSG#...` sort key of the partition lies in this range.
            let (from, to) = (MSG_PREFIX.to_owned(), "MSG$".to_owned());
            let mut out = Vec::new();
            for entry in table
                .range((pk.as_str(), from.as_str())..(pk.as_str(), to.as_str()))
                .map_err(|e| failed("read", e))?
                .rev()
            {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = entry.map_err(|e| failed("read", e))?;
                let sk = k.value().1;
                let item = parse(&pk, sk, v.value())?;
                if item::ttl_of(&pk, sk, &item)?.is_some_and(|ttl| is_expired(ttl, now)) {
                    continue;
                }
                out.push(item::decode_message(&pk, sk, &item)?);
            }
            out.reverse();
            Ok(out)
        })
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
        // In this process the second user message is there, committed but not flushed.
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

    /// Concurrent writers run one transaction at a time; callers that stop waiting (here: aborted
    /// tasks, some while queued for a permit, some mid-commit) leave the store consistent and
    /// the permits free for the rest.
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
