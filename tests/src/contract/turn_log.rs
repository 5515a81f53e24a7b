//! The turn log's part of the store contract: a turn's events appended in batches and read back
//! from any cursor, its record (gaps, end, deadline, cancel flag), the episode's latest turn.

use std::time::Duration;

use baton::store::{
    CancelOutcome, DEFAULT_TURN_LOG_TTL, EpisodeKey, LoggedEvent, Store, StoreError, TurnStatus, new_turn_id,
};

use crate::stores::{StoreHarness, test_clock};

fn key(user: &str, episode: &str) -> EpisodeKey {
    EpisodeKey::new(user, episode).expect("valid key")
}

/// Events `from..=to`, each's data naming its seq and `tag`.
fn events(from: u64, to: u64, tag: &str) -> Vec<LoggedEvent> {
    (from..=to)
        .map(|seq| LoggedEvent::new(seq, "text", format!(r#"{{"seq":{seq},"tag":"{tag}"}}"#)))
        .collect()
}

fn seqs(events: &[LoggedEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

/// A turn started an hour before its deadline, with events 1 to 12 in three batches.
async fn twelve(store: &dyn Store, k: &EpisodeKey) -> String {
    let turn = new_turn_id();
    let deadline = store.clock().now_ms() + 3_600_000;
    store.start_turn_log(k, &turn, deadline).await.expect("started");
    for (from, to) in [(1, 3), (4, 9), (10, 12)] {
        store.append_turn_events(k, &turn, &events(from, to, "a")).await.expect("appended");
    }
    turn
}

fn is_conflict_saying(result: &Result<(), StoreError>, words: &str) -> bool {
    matches!(result, Err(StoreError::Conflict { reason, .. }) if reason.contains(words))
}

/// Events come back in seq order, each once, from the start or after any seq (10 after 9: seqs
/// are compared as numbers), at most `limit` at a time; paging through with the last seq seen
/// gives every event exactly once.
pub async fn turn_events_read_back_in_order_from_any_cursor<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = twelve(&*store, &k).await;
    let all = store.turn_events(&k, &turn, 0, 100).await.unwrap();
    assert_eq!(all, events(1, 12, "a"), "every field kept, in order");
    assert_eq!(seqs(&store.turn_events(&k, &turn, 5, 100).await.unwrap()), (6..=12).collect::<Vec<_>>());
    assert_eq!(seqs(&store.turn_events(&k, &turn, 9, 100).await.unwrap()), [10, 11, 12], "10 follows 9");
    assert_eq!(seqs(&store.turn_events(&k, &turn, 1, 3).await.unwrap()), [2, 3, 4], "at most `limit`");
    assert!(store.turn_events(&k, &turn, 12, 100).await.unwrap().is_empty(), "nothing past the end");
    assert!(store.turn_events(&k, &turn, 0, 0).await.unwrap().is_empty());
    let mut replayed = Vec::new();
    let mut cursor = 0;
    loop {
        let page = store.turn_events(&k, &turn, cursor, 5).await.unwrap();
        let Some(last) = page.last() else { break };
        cursor = last.seq;
        replayed.extend(page);
    }
    assert_eq!(replayed, all, "pages give every event once");
    let record = store.turn_record(&k, &turn).await.unwrap().expect("a record");
    assert_eq!((record.last_seq, record.status, record.gaps), (12, TurnStatus::Running, vec![]));
}

/// A turn whose first events were written in the older form of the events item (a list of
/// `{seq, event, data}` maps, before the compact `log` string) reads back whole, and goes on
/// in the new form after them.
pub async fn events_items_of_the_older_form_read_back_with_the_new<H: StoreHarness>() {
    use baton::store::item::{Attr, Item};
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    store.start_turn_log(&k, &turn, store.clock().now_ms() + 3_600_000).await.unwrap();
    let old = events(1, 3, "old");
    // Appended, then its item written over in the older form: the record is as that append
    // left it.
    store.append_turn_events(&k, &turn, &old).await.unwrap();
    let list = old
        .iter()
        .map(|e| {
            Attr::M(
                [
                    ("seq".to_owned(), Attr::n(e.seq)),
                    ("event".to_owned(), Attr::s(&e.event)),
                    ("data".to_owned(), Attr::s(&e.data)),
                ]
                .into(),
            )
        })
        .collect();
    let item = Item::from([
        ("first".to_owned(), Attr::n(1)),
        ("last".to_owned(), Attr::n(3)),
        ("events".to_owned(), Attr::L(list)),
        ("ttl".to_owned(), Attr::n(4_000_000_000)),
    ]);
    h.put_raw(&k.pk(), &format!("TURN#{turn}#LOG#{:020}", 3), &item).await;
    let new = events(4, 6, "new");
    store.append_turn_events(&k, &turn, &new).await.unwrap();
    let all = store.turn_events(&k, &turn, 0, 100).await.unwrap();
    assert_eq!(all, [old.clone(), new.clone()].concat(), "both forms, in order");
    assert_eq!(store.turn_events(&k, &turn, 2, 2).await.unwrap(), [old[2].clone(), new[0].clone()]);
    let record = store.turn_record(&k, &turn).await.unwrap().expect("a record");
    assert_eq!((record.last_seq, record.gaps), (6, vec![]));
}

/// The same batch written again (a retried write) changes nothing; a batch that would leave a
/// gap, overlap logged events, or rewrite them differently is refused and says which.
pub async fn a_batch_written_again_is_a_retry_and_a_gap_or_overlap_is_refused<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = twelve(&*store, &k).await;
    store.append_turn_events(&k, &turn, &events(4, 9, "a")).await.expect("a retry is fine");
    store.append_turn_events(&k, &turn, &events(10, 12, "a")).await.expect("so is the last one's");
    let gap = store.append_turn_events(&k, &turn, &events(14, 15, "a")).await;
    assert!(is_conflict_saying(&gap, "a gap"), "{gap:?}");
    let overlap = store.append_turn_events(&k, &turn, &events(12, 13, "b")).await;
    assert!(is_conflict_saying(&overlap, "an overlap"), "{overlap:?}");
    let rewrite = store.append_turn_events(&k, &turn, &events(4, 9, "b")).await;
    assert!(is_conflict_saying(&rewrite, "logged already"), "{rewrite:?}");
    let mut shuffled = events(13, 15, "a");
    shuffled.swap(1, 2);
    let shuffled = store.append_turn_events(&k, &turn, &shuffled).await;
    assert!(matches!(&shuffled, Err(e) if e.to_string().contains("consecutive")), "{shuffled:?}");
    assert_eq!(store.turn_events(&k, &turn, 0, 100).await.unwrap(), events(1, 12, "a"), "nothing changed");
    store.append_turn_events(&k, &turn, &events(13, 13, "a")).await.expect("the next seq is taken");
    store.append_turn_events(&k, &turn, &[]).await.expect("an empty batch writes nothing");
    let unknown = store.append_turn_events(&k, &new_turn_id(), &events(1, 1, "a")).await;
    assert!(is_conflict_saying(&unknown, "never started"), "{unknown:?}");
}

/// Events that could not be written are recorded as a gap: a reader is told they are missing,
/// and the log goes on after them. Seqs that were logged after all are no gap.
pub async fn a_recorded_gap_is_reported_and_the_log_goes_on_after_it<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    store.start_turn_log(&k, &turn, store.clock().now_ms() + 60_000).await.unwrap();
    store.append_turn_events(&k, &turn, &events(1, 3, "a")).await.unwrap();
    store.record_turn_gap(&k, &turn, 4, 6).await.unwrap();
    store.record_turn_gap(&k, &turn, 2, 3).await.expect("a logged range is no gap");
    store.append_turn_events(&k, &turn, &events(7, 8, "a")).await.unwrap();
    store.record_turn_gap(&k, &turn, 9, 9).await.unwrap();
    let record = store.turn_record(&k, &turn).await.unwrap().unwrap();
    assert_eq!((record.gaps.clone(), record.last_seq), (vec![(4, 6), (9, 9)], 9));
    assert_eq!(record.gaps_after(3), vec![(4, 6), (9, 9)]);
    assert_eq!(seqs(&store.turn_events(&k, &turn, 0, 100).await.unwrap()), [1, 2, 3, 7, 8]);
    let hole = store.record_turn_gap(&k, &turn, 11, 12).await;
    assert!(is_conflict_saying(&hole, "unaccounted"), "seq 10 would be unaccounted for: {hole:?}");
}

/// A turn ends once, with its status; ending it again the same way is a retry; another end, or
/// a new batch after the end, is refused. Starting a log again is a retry only before its events.
pub async fn a_turn_log_ends_once_with_its_status<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = twelve(&*store, &k).await;
    let again = store.start_turn_log(&k, &turn, 1).await;
    assert!(is_conflict_saying(&again, "started already"), "{again:?}");
    store.end_turn_log(&k, &turn, "ok").await.unwrap();
    store.end_turn_log(&k, &turn, "ok").await.expect("a retry is fine");
    let other = store.end_turn_log(&k, &turn, "cancelled").await;
    assert!(is_conflict_saying(&other, "ended already"), "{other:?}");
    let late = store.append_turn_events(&k, &turn, &events(13, 13, "a")).await;
    assert!(is_conflict_saying(&late, "has ended"), "{late:?}");
    store.append_turn_events(&k, &turn, &events(10, 12, "a")).await.expect("a retry after the end is fine");
    let record = store.turn_record(&k, &turn).await.unwrap().unwrap();
    assert_eq!((record.status, record.last_seq), (TurnStatus::Ended("ok".into()), 12));
    let unknown = store.end_turn_log(&k, &new_turn_id(), "ok").await;
    assert!(is_conflict_saying(&unknown, "never started"), "{unknown:?}");

    let fresh = new_turn_id();
    store.start_turn_log(&k, &fresh, 5).await.unwrap();
    store.start_turn_log(&k, &fresh, 5).await.expect("the same start again is a retry");
}

/// A turn still `running` after its deadline (its producer died) reads as `abandoned`, and
/// cannot be cancelled any more.
pub async fn a_running_turn_past_its_deadline_reads_as_abandoned<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    store.start_turn_log(&k, &turn, store.clock().now_ms() + 10_000).await.unwrap();
    store.append_turn_events(&k, &turn, &events(1, 2, "a")).await.unwrap();
    let record = store.turn_record(&k, &turn).await.unwrap().unwrap();
    assert_eq!(record.effective_status(store.clock().now_ms()), TurnStatus::Running);
    clock.advance(Duration::from_secs(11));
    let record = store.turn_record(&k, &turn).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Running, "as stored");
    assert_eq!(record.effective_status(store.clock().now_ms()), TurnStatus::Ended("abandoned".into()));
    assert_eq!(
        store.request_cancel(&k, &turn).await.unwrap(),
        CancelOutcome::AlreadyEnded("abandoned".into())
    );
    assert_eq!(seqs(&store.turn_events(&k, &turn, 0, 10).await.unwrap()), [1, 2], "its log still reads");
}

/// Asking a running turn to stop sets its flag (twice is the same), which later writes of the
/// producer keep; an ended turn says how it ended; an unknown turn is unknown.
pub async fn cancel_is_requested_once_and_says_when_a_turn_ended_or_is_unknown<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    assert_eq!(store.request_cancel(&k, &new_turn_id()).await.unwrap(), CancelOutcome::Unknown);
    let turn = twelve(&*store, &k).await;
    assert_eq!(store.request_cancel(&k, &turn).await.unwrap(), CancelOutcome::Requested);
    assert_eq!(store.request_cancel(&k, &turn).await.unwrap(), CancelOutcome::Requested, "idempotent");
    store.append_turn_events(&k, &turn, &events(13, 14, "a")).await.expect("the producer writes on");
    store.record_turn_gap(&k, &turn, 15, 15).await.unwrap();
    let record = store.turn_record(&k, &turn).await.unwrap().unwrap();
    assert!(record.cancel_requested, "the producer's writes keep the flag: {record:?}");
    store.end_turn_log(&k, &turn, "cancelled").await.unwrap();
    let outcome = store.request_cancel(&k, &turn).await.unwrap();
    assert_eq!(outcome, CancelOutcome::AlreadyEnded("cancelled".into()));
}

/// Another user naming the same episode and turn finds no record, no events, no latest turn,
/// cannot cancel or write it, and changes nothing of it.
pub async fn another_users_key_sees_no_turn_log<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let (alice, bob) = (key("alice", "e1"), key("bob", "e1"));
    let turn = twelve(&*store, &alice).await;
    assert_eq!(store.turn_record(&bob, &turn).await.unwrap(), None);
    assert!(store.turn_events(&bob, &turn, 0, 100).await.unwrap().is_empty());
    assert_eq!(store.latest_turn(&bob).await.unwrap(), None);
    assert_eq!(store.request_cancel(&bob, &turn).await.unwrap(), CancelOutcome::Unknown);
    assert!(store.append_turn_events(&bob, &turn, &events(13, 13, "b")).await.is_err());
    assert!(store.end_turn_log(&bob, &turn, "ok").await.is_err());
    let record = store.turn_record(&alice, &turn).await.unwrap().unwrap();
    assert_eq!((record.cancel_requested, record.last_seq, record.status), (false, 12, TurnStatus::Running));
    assert_eq!(store.latest_turn(&alice).await.unwrap(), Some(turn));
}

/// The episode's latest turn is the one started last (turn ids sort by creation time), whatever
/// the other turns write later; another episode's turns are not its.
pub async fn the_latest_turn_is_the_one_started_last<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    assert_eq!(store.latest_turn(&k).await.unwrap(), None);
    let deadline = store.clock().now_ms() + 60_000;
    let (first, second) = (new_turn_id(), new_turn_id());
    store.start_turn_log(&k, &first, deadline).await.unwrap();
    assert_eq!(store.latest_turn(&k).await.unwrap().as_deref(), Some(first.as_str()));
    store.start_turn_log(&k, &second, deadline).await.unwrap();
    store.append_turn_events(&k, &first, &events(1, 4, "a")).await.unwrap();
    store.end_turn_log(&k, &first, "ok").await.unwrap();
    assert_eq!(store.latest_turn(&k).await.unwrap(), Some(second.clone()));
    store.append_turn_events(&k, &second, &events(1, 1, "a")).await.unwrap();
    assert_eq!(store.latest_turn(&k).await.unwrap(), Some(second));
    assert_eq!(store.latest_turn(&key("alice", "e2")).await.unwrap(), None);
}

/// A turn log's items expire [`DEFAULT_TURN_LOG_TTL`] after their last write: then the turn is
/// unknown, its events gone, and it is no episode's latest turn.
pub async fn turn_log_items_expire_after_the_turn_log_ttl<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = twelve(&*store, &k).await;
    clock.advance(DEFAULT_TURN_LOG_TTL - Duration::from_secs(60));
    assert_eq!(store.turn_events(&k, &turn, 0, 100).await.unwrap().len(), 12, "not yet");
    clock.advance(Duration::from_secs(120));
    assert_eq!(store.turn_record(&k, &turn).await.unwrap(), None);
    assert!(store.turn_events(&k, &turn, 0, 100).await.unwrap().is_empty());
    assert_eq!(store.latest_turn(&k).await.unwrap(), None);
    assert_eq!(store.request_cancel(&k, &turn).await.unwrap(), CancelOutcome::Unknown);
}

/// A batch too big for one item (DynamoDB's limit is 400 KB) is split and reads back whole; an
/// event too big for any item is refused, and the caller can record it as a gap.
pub async fn a_batch_too_big_for_one_item_is_split_and_reads_back_whole<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    store.start_turn_log(&k, &turn, store.clock().now_ms() + 60_000).await.unwrap();
    let big: Vec<LoggedEvent> = (1..=4)
        .map(|seq| LoggedEvent::new(seq, "tool_result", format!("\"{}\"", "é".repeat(75_000))))
        .collect();
    store.append_turn_events(&k, &turn, &big).await.expect("600 KB in one append");
    assert_eq!(store.turn_events(&k, &turn, 0, 10).await.unwrap(), big);
    assert_eq!(store.turn_events(&k, &turn, 2, 1).await.unwrap(), big[2..3]);
    let huge = [LoggedEvent::new(5, "tool_result", "x".repeat(400_000))];
    let refused = store.append_turn_events(&k, &turn, &huge).await;
    assert!(matches!(&refused, Err(e) if e.to_string().contains("record it as a gap")), "{refused:?}");
    store.record_turn_gap(&k, &turn, 5, 5).await.unwrap();
    store.append_turn_events(&k, &turn, &events(6, 6, "a")).await.unwrap();
    assert_eq!(store.turn_record(&k, &turn).await.unwrap().unwrap().gaps, vec![(5, 5)]);
}

/// A turn id that cannot be part of a key is refused before anything is read or written.
pub async fn a_turn_id_that_cannot_be_a_key_is_refused<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    for bad in ["", "t#LOG#1", "t\n"] {
        let started = store.start_turn_log(&k, bad, 1).await;
        assert!(matches!(started, Err(StoreError::InvalidKey(_))), "{bad:?}: {started:?}");
        assert!(matches!(store.turn_record(&k, bad).await, Err(StoreError::InvalidKey(_))), "{bad:?}");
    }
}

/// What was logged is there after the store is closed and opened again.
pub async fn a_turn_log_survives_reopening_the_store<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let k = key("alice", "e1");
    let turn = twelve(&*h.store(), &k).await;
    h.store().end_turn_log(&k, &turn, "ok").await.unwrap();
    let h = h.reopen().await;
    let store = h.store();
    assert_eq!(store.turn_events(&k, &turn, 0, 100).await.unwrap(), events(1, 12, "a"));
    assert_eq!(store.turn_record(&k, &turn).await.unwrap().unwrap().status, TurnStatus::Ended("ok".into()));
    assert_eq!(store.latest_turn(&k).await.unwrap(), Some(turn));
}

/// Appends `batch`, sending it again while the store says it was busy (as a producer does).
async fn append_retrying(
    store: &dyn Store,
    k: &EpisodeKey,
    turn: &str,
    batch: &[LoggedEvent],
) -> Result<(), StoreError> {
    for _ in 0..20 {
        match store.append_turn_events(k, turn, batch).await {
            Err(StoreError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
            done => return done,
        }
    }
    panic!("the store stayed busy")
}

/// Eight writers racing: the same batch sent at once by all is logged once and every one is
/// told it is written; different batches for the same seqs, one wins and the others are refused.
pub async fn racing_appends_log_each_seq_once<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    store.start_turn_log(&k, &turn, store.clock().now_ms() + 60_000).await.unwrap();
    let same: Vec<_> = (0..8)
        .map(|_| {
            let (store, k, turn) = (store.clone(), k.clone(), turn.clone());
            tokio::spawn(async move { append_retrying(&*store, &k, &turn, &events(1, 5, "same")).await })
        })
        .collect();
    for task in same {
        task.await.unwrap().expect("the same batch is fine every time");
    }
    let different: Vec<_> = (0..8)
        .map(|i| {
            let (store, k, turn) = (store.clone(), k.clone(), turn.clone());
            tokio::spawn(
                async move { append_retrying(&*store, &k, &turn, &events(6, 7, &format!("w{i}"))).await },
            )
        })
        .collect();
    let mut won = 0;
    for task in different {
        match task.await.unwrap() {
            Ok(()) => won += 1,
            Err(e) => assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}"),
        }
    }
    assert_eq!(won, 1, "exactly one writer's 6 and 7 are logged");
    let logged = store.turn_events(&k, &turn, 0, 100).await.unwrap();
    assert_eq!(seqs(&logged), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(logged[..5], events(1, 5, "same"));
    assert_eq!(store.turn_record(&k, &turn).await.unwrap().unwrap().last_seq, 7);
}

/// A turn's final write (`finish_turn_log`) appends its last events and ends the log at once;
/// sent again it changes nothing; other events, more events or another end are refused.
pub async fn a_final_write_appends_and_ends_at_once_and_a_retry_changes_nothing<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("u1", "e1");
    let turn = twelve(&*store, &k).await;
    store.finish_turn_log(&k, &turn, &events(13, 15, "a"), "ok").await.expect("finished");
    let record = store.turn_record(&k, &turn).await.unwrap().expect("a record");
    assert_eq!((record.last_seq, record.status.clone()), (15, TurnStatus::Ended("ok".into())));
    assert_eq!(seqs(&store.turn_events(&k, &turn, 0, 100).await.unwrap()), (1..=15).collect::<Vec<_>>());
    // Sent again (its answer was lost): nothing changes.
    store.finish_turn_log(&k, &turn, &events(13, 15, "a"), "ok").await.expect("a retry");
    assert_eq!(store.turn_record(&k, &turn).await.unwrap().unwrap(), record);
    // Other events in those seqs, more events, or another end: refused, and nothing changes.
    let other = store.finish_turn_log(&k, &turn, &events(13, 15, "b"), "ok").await;
    assert!(matches!(other, Err(StoreError::Conflict { .. })), "{other:?}");
    let more = store.finish_turn_log(&k, &turn, &events(16, 16, "a"), "ok").await;
    assert!(is_conflict_saying(&more, "ended"), "{more:?}");
    let again = store.finish_turn_log(&k, &turn, &[], "partial").await;
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");
    assert_eq!(store.turn_record(&k, &turn).await.unwrap().unwrap().status, TurnStatus::Ended("ok".into()));
    assert_eq!(store.turn_events(&k, &turn, 0, 100).await.unwrap().len(), 15);
    // A gap before the final events is refused like an append's; with no events it is an end.
    let other_turn = twelve(&*store, &k).await;
    let gap = store.finish_turn_log(&k, &other_turn, &events(14, 15, "a"), "ok").await;
    assert!(is_conflict_saying(&gap, "gap"), "{gap:?}");
    store.finish_turn_log(&k, &other_turn, &[], "cancelled").await.expect("an end alone");
    let record = store.turn_record(&k, &other_turn).await.unwrap().unwrap();
    assert_eq!((record.last_seq, record.status), (12, TurnStatus::Ended("cancelled".into())));
}
