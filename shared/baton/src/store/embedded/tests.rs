//! The embedded store's tests: durability across a crash, group commit, recovery after a failed
//! flush, and the lock wait.

use super::*;
use crate::store::item;
use crate::store::{
    Clocked, Conversations, Episode, EpisodeKey, Leases, Recorded, StoreError, StoredMessage, SystemClock,
    TurnLog, message_sk,
};

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
            store.record_user_message(&key, &StoredMessage::user(&turn, "q", i.into()), Some(&turn)).await?;
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
    assert_eq!(contents(&store.recent_messages(&key, 10).await.unwrap()), ["early", "q1", "a", "c", "q2"]);
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
    let again =
        tokio::time::timeout(Duration::from_secs(5), store.save_reply(&key, "t2", &[answer("t2", 2, "b1")]))
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
    let err =
        EmbeddedStore::open_waiting(&path, Arc::new(SystemClock), Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("in use by another process") && message.contains("--store-path"), "{message}");
}

fn logged(from: u64, to: u64) -> Vec<crate::store::LoggedEvent> {
    (from..=to).map(|seq| crate::store::LoggedEvent::new(seq, "text", format!("{seq}"))).collect()
}

/// The child process of [`a_killed_producer_leaves_its_log_up_to_a_second_before`]: starts a
/// turn log and appends two batches, waits past [`TURN_LOG_FLUSH_WITHIN`], appends a third, and
/// exits at once without closing the store, as a killed process would.
#[tokio::test]
#[ignore = "run as a child process by a_killed_producer_leaves_its_log_up_to_a_second_before"]
async fn killed_producer_child() {
    let Some(path) = std::env::var_os("BATON_KILLED_STORE") else { return };
    let store = EmbeddedStore::open(path, Arc::new(SystemClock)).unwrap();
    let key = EpisodeKey::new("u", "e").unwrap();
    store.start_turn_log(&key, "t1", 1).await.unwrap();
    store.append_turn_events(&key, "t1", &logged(1, 3)).await.unwrap();
    store.append_turn_events(&key, "t1", &logged(4, 5)).await.unwrap();
    tokio::time::sleep(TURN_LOG_FLUSH_WITHIN + Duration::from_millis(500)).await;
    store.append_turn_events(&key, "t1", &logged(6, 6)).await.unwrap();
    std::process::exit(0);
}

/// A producer that dies mid-turn leaves its log on disk up to the batches written
/// [`TURN_LOG_FLUSH_WITHIN`] before, and its turn `running` (abandoned once past its deadline).
#[tokio::test]
async fn a_killed_producer_leaves_its_log_up_to_a_second_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "store::embedded::tests::killed_producer_child", "--test-threads=1"])
        .env("BATON_KILLED_STORE", &path)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    let store = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
    let key = EpisodeKey::new("u", "e").unwrap();
    let events = store.turn_events(&key, "t1", 0, 10).await.unwrap();
    assert_eq!(events, logged(1, 5), "the batches of more than a second before, not the last");
    let record = store.turn_record(&key, "t1").await.unwrap().expect("its record");
    assert_eq!(record.last_seq, 5);
    let now = store.clock().now_ms();
    assert_eq!(record.effective_status(now), crate::store::TurnStatus::Ended("abandoned".into()));
}

/// A turn's many small batches share one flush, within [`TURN_LOG_FLUSH_WITHIN`], with no
/// other write to take them.
#[tokio::test]
async fn a_turn_logs_batches_share_one_flush_within_the_bound() {
    let (_dir, _path, store, key) = fresh();
    store.start_turn_log(&key, "t1", u64::MAX).await.unwrap();
    for seq in 1..=20 {
        store.append_turn_events(&key, "t1", &logged(seq, seq)).await.unwrap();
    }
    store.end_turn_log(&key, "t1", "ok").await.unwrap();
    assert_eq!(store.durable_commits(), 0, "not flushed call by call");
    tokio::time::sleep(TURN_LOG_FLUSH_WITHIN + Duration::from_millis(500)).await;
    assert_eq!(store.durable_commits(), 1, "one flush for the whole turn");
}

/// A lease the file keeps from a process that held it before (stopped before it freed it) is
/// free to the next process at once, whatever its expiry: one process holds the file at a time.
#[tokio::test]
async fn a_lease_left_by_an_earlier_process_is_free_to_the_next() {
    let (_dir, path, store, key) = fresh();
    let hour = Duration::from_secs(3600);
    assert_eq!(store.take_lease(&key, "turn", "t1", hour).await.unwrap(), crate::store::LeaseGrant::Granted);
    assert!(matches!(
        store.take_lease(&key, "turn", "t2", hour).await.unwrap(),
        crate::store::LeaseGrant::Held { holder, .. } if holder == "t1"
    ));
    store.record_user_message(&key, &StoredMessage::user("t1", "hi", 0), None).await.unwrap();
    store.save_reply(&key, "t1", &[answer("t1", 1, "hello")]).await.unwrap();
    drop(store);
    let next = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
    assert_eq!(next.take_lease(&key, "turn", "t2", hour).await.unwrap(), crate::store::LeaseGrant::Granted);
}
