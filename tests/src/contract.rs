//! The store contract: one suite that every [`Store`] implementation must pass.
//!
//! Each check is a generic async function over a [`StoreHarness`]; [`store_contract_tests!`]
//! turns the list into one `#[tokio::test]` per check for a given harness, so
//! `tests/tests/store_contract.rs` runs the same suite against the embedded store and against
//! DynamoDB (moto).
//!
//! [`store_contract_tests!`]: crate::store_contract_tests

use std::sync::Arc;
use std::time::Duration;

use baton::event::{AgentUsage, Status, Usage};
use baton::store::item::{Attr, Item};
use baton::store::{
    DEFAULT_RETENTION, Episode, EpisodeKey, LeaseGrant, MessageCursor, Recorded, Role, Store, StoreError,
    StoredMessage, VendorConversation, new_turn_id, update_episode,
};

use crate::stores::{StoreHarness, test_clock};

pub mod turn_log;
pub use turn_log::*;

/// Expands to one `#[tokio::test]` per contract check, run against harness `$h`.
#[macro_export]
macro_rules! store_contract_tests {
    ($h:ty) => {
        $crate::store_contract_tests!(@each $h;
            a_new_episode_is_absent,
            recording_a_user_message_creates_the_episode,
            a_repeated_request_id_records_nothing_and_names_the_first_turn,
            request_ids_are_scoped_to_their_episode,
            messages_read_back_in_turn_then_seq_order,
            saving_a_reply_again_replaces_the_earlier_reply,
            recent_messages_are_the_newest_oldest_first,
            a_long_history_is_read_across_pages,
            saving_a_stale_episode_is_a_conflict,
            concurrent_episode_updates_lose_nothing,
            vendor_state_round_trips,
            message_metadata_round_trips_and_old_items_read_without_it,
            expired_items_are_absent,
            one_users_items_are_invisible_to_another,
            an_item_of_unknown_shape_is_an_error_naming_its_key,
            data_survives_reopening_the_store,
            a_lease_goes_to_one_holder_at_a_time,
            an_expired_lease_is_taken_over_and_a_stale_release_frees_nothing,
            a_lease_is_released_for_the_next_holder,
            concurrent_callers_are_granted_a_free_lease_once,
            an_episode_item_of_the_single_response_id_era_still_reads,
            an_episode_item_of_the_single_conversation_era_still_reads,
            turn_events_read_back_in_order_from_any_cursor,
            events_items_of_the_older_form_read_back_with_the_new,
            a_batch_written_again_is_a_retry_and_a_gap_or_overlap_is_refused,
            a_recorded_gap_is_reported_and_the_log_goes_on_after_it,
            a_turn_log_ends_once_with_its_status,
            a_final_write_appends_and_ends_at_once_and_a_retry_changes_nothing,
            a_running_turn_past_its_deadline_reads_as_abandoned,
            cancel_is_requested_once_and_says_when_a_turn_ended_or_is_unknown,
            another_users_key_sees_no_turn_log,
            the_latest_turn_is_the_one_started_last,
            turn_log_items_expire_after_the_turn_log_ttl,
            a_batch_too_big_for_one_item_is_split_and_reads_back_whole,
            a_turn_id_that_cannot_be_a_key_is_refused,
            a_turn_log_survives_reopening_the_store,
            racing_appends_log_each_seq_once,
        );
        // The approvals record (`ApprovalRecords::approvals`, `save_approvals`).
        $crate::store_contract_tests!(@each $h;
            an_approvals_record_is_written_once_per_version,
            an_approvals_record_kept_past_its_time_is_absent_and_written_anew,
            racing_approvals_writes_succeed_once,
        );
        // Reading a conversation back a page at a time (`Conversations::messages_page`).
        $crate::store_contract_tests!(@each $h;
            message_pages_read_backwards_to_the_first_message,
            a_message_page_names_no_older_page_when_it_holds_the_first_message,
            message_pages_skip_expired_messages_and_other_users,
            a_malformed_message_cursor_is_an_invalid_key,
            a_message_cursor_stays_valid_when_its_turn_is_answered_again,
        );
    };
    (@each $h:ty; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::contract::$name::<$h>().await;
            }
        )+
    };
}

fn key(user: &str, episode: &str) -> EpisodeKey {
    EpisodeKey::new(user, episode).expect("valid key")
}

fn reply(turn: &str, seq: u32, agent: &str, content: &str, at: u64) -> StoredMessage {
    StoredMessage {
        turn_id: turn.into(),
        seq,
        role: Role::Assistant,
        agent: agent.into(),
        content: content.into(),
        usage: vec![AgentUsage {
            agent: agent.into(),
            model: "m".into(),
            usage: Usage::tokens(seq as u64 * 10, 3),
        }],
        status: Status::Ok,
        created_at: at,
        meta: None,
    }
}

/// A response-id map with one agent's id.
fn ids(agent: &str, id: &str) -> std::collections::BTreeMap<String, String> {
    [(agent.to_owned(), id.to_owned())].into()
}

fn contents(messages: &[StoredMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.content.as_str()).collect()
}

/// Records a whole turn (user message and a one-message reply) and returns its id.
async fn turn(store: &dyn Store, key: &EpisodeKey, said: &str, answered: &str) -> String {
    let id = new_turn_id();
    let now = store.clock().now_ms();
    store.record_user_message(key, &StoredMessage::user(&id, said, now), None).await.expect("user message");
    store.save_reply(key, &id, &[reply(&id, 1, "shopping[1]", answered, now)]).await.expect("reply");
    id
}

/// No item, no episode, no messages.
pub async fn a_new_episode_is_absent<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    assert_eq!(store.episode(&key("u", "e")).await.unwrap(), None);
    assert!(store.recent_messages(&key("u", "e"), 10).await.unwrap().is_empty());
}

/// The user message is stored as given and the episode item appears with version 1.
pub async fn recording_a_user_message_creates_the_episode<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let now = store.clock().now_ms();
    let message = StoredMessage::user(new_turn_id(), "where are my points?", now);
    assert_eq!(store.record_user_message(&k, &message, Some("req-1")).await.unwrap(), Recorded::New);
    let episode = store.episode(&k).await.unwrap().expect("episode exists");
    assert_eq!((episode.version, episode.created_at, episode.updated_at), (1, now, now));
    assert_eq!(store.recent_messages(&k, 10).await.unwrap(), vec![message.clone()]);

    clock.advance(Duration::from_secs(5));
    let second = StoredMessage::user(new_turn_id(), "and now?", store.clock().now_ms());
    store.record_user_message(&k, &second, None).await.unwrap();
    let episode = store.episode(&k).await.unwrap().unwrap();
    assert_eq!((episode.version, episode.created_at, episode.updated_at), (2, now, now + 5000));
}

/// A retried request writes nothing and gets the first turn's id back.
pub async fn a_repeated_request_id_records_nothing_and_names_the_first_turn<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let (first, retry) = (new_turn_id(), new_turn_id());
    let now = store.clock().now_ms();
    store.record_user_message(&k, &StoredMessage::user(&first, "hi", now), Some("r1")).await.unwrap();
    let again =
        store.record_user_message(&k, &StoredMessage::user(&retry, "hi", now), Some("r1")).await.unwrap();
    assert_eq!(again, Recorded::Duplicate { turn_id: first.clone() });
    let messages = store.recent_messages(&k, 10).await.unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].turn_id, first);
    assert_eq!(store.episode(&k).await.unwrap().unwrap().version, 1, "a duplicate touches nothing");
    // The request's turn, read back for a retry on another instance; another id has none.
    assert_eq!(store.request_turn(&k, "r1").await.unwrap(), Some(first));
    assert_eq!(store.request_turn(&k, "r2").await.unwrap(), None);
    assert_eq!(store.request_turn(&key("bob", "e1"), "r1").await.unwrap(), None, "another user's");
}

/// The same request id in another episode, or for another user, is a new request.
pub async fn request_ids_are_scoped_to_their_episode<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let now = store.clock().now_ms();
    for k in [key("alice", "e1"), key("alice", "e2"), key("bob", "e1")] {
        let m = StoredMessage::user(new_turn_id(), "hi", now);
        assert_eq!(store.record_user_message(&k, &m, Some("r1")).await.unwrap(), Recorded::New, "{k}");
    }
}

/// Messages come back ordered by turn id (creation time), then by seq, whatever the write order.
pub async fn messages_read_back_in_turn_then_seq_order<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let (early, late) = (new_turn_id(), new_turn_id());
    let now = store.clock().now_ms();
    store.record_user_message(&k, &StoredMessage::user(&late, "second question", now), None).await.unwrap();
    let late_reply = [reply(&late, 1, "support[1]", "second answer", now)];
    store.save_reply(&k, &late, &late_reply).await.unwrap();
    store.record_user_message(&k, &StoredMessage::user(&early, "first question", now), None).await.unwrap();
    let early_reply: Vec<StoredMessage> =
        (1..=11).map(|seq| reply(&early, seq, "shopping[1]", &format!("part {seq}"), now)).collect();
    store.save_reply(&k, &early, &early_reply).await.unwrap();

    let messages = store.recent_messages(&k, 100).await.unwrap();
    let mut expected = vec!["first question".to_owned()];
    expected.extend((1..=11).map(|seq| format!("part {seq}")));
    expected.extend(["second question".to_owned(), "second answer".to_owned()]);
    assert_eq!(contents(&messages), expected);
    assert_eq!(messages[1], early_reply[0], "every field is kept, usage included");
    assert_eq!(messages[0].role, Role::User);
}

/// A reply saved again for the same turn (a retried request) replaces the earlier one entirely.
pub async fn saving_a_reply_again_replaces_the_earlier_reply<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let id = new_turn_id();
    let now = store.clock().now_ms();
    store.record_user_message(&k, &StoredMessage::user(&id, "q", now), None).await.unwrap();
    let long: Vec<StoredMessage> = (1..=3).map(|s| reply(&id, s, "a", &format!("old {s}"), now)).collect();
    store.save_reply(&k, &id, &long).await.unwrap();
    store.save_reply(&k, &id, &[reply(&id, 1, "a", "new", now)]).await.unwrap();
    assert_eq!(contents(&store.recent_messages(&k, 10).await.unwrap()), ["q", "new"]);
}

/// `recent_messages(n)` is the newest `n`, oldest first.
pub async fn recent_messages_are_the_newest_oldest_first<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    for i in 0..6 {
        turn(&*store, &k, &format!("q{i}"), &format!("a{i}")).await;
    }
    assert_eq!(contents(&store.recent_messages(&k, 5).await.unwrap()), ["a3", "q4", "a4", "q5", "a5"]);
    assert_eq!(store.recent_messages(&k, 0).await.unwrap(), vec![]);
}

/// A history longer than one page (3 items for DynamoDB in these tests) is read whole, in order.
pub async fn a_long_history_is_read_across_pages<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let mut expected = Vec::new();
    for i in 0..20 {
        turn(&*store, &k, &format!("q{i}"), &format!("a{i}")).await;
        expected.extend([format!("q{i}"), format!("a{i}")]);
    }
    let messages = store.recent_messages(&k, 1000).await.unwrap();
    assert_eq!(contents(&messages), expected);
}

/// Optimistic locking: a write based on an old version is refused, and nothing changes.
pub async fn saving_a_stale_episode_is_a_conflict<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let v1 = store.save_episode(&Episode::new(k.clone())).await.unwrap();
    assert_eq!(v1.version, 1);
    let again = store.save_episode(&Episode::new(k.clone())).await;
    assert!(matches!(&again, Err(StoreError::Conflict { key, .. }) if key.ends_with("/ META")), "{again:?}");

    let v2 = store.save_episode(&Episode { response_ids: ids("a", "resp_2"), ..v1.clone() }).await.unwrap();
    assert_eq!(v2.version, 2);
    let stale = store.save_episode(&Episode { response_ids: ids("a", "resp_stale"), ..v1 }).await;
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
    assert_eq!(store.episode(&k).await.unwrap().unwrap(), v2);

    // Recording a message bumps the version too, so a save based on the version before it loses.
    let m = StoredMessage::user(new_turn_id(), "hi", store.clock().now_ms());
    store.record_user_message(&k, &m, None).await.unwrap();
    assert!(matches!(store.save_episode(&v2).await, Err(StoreError::Conflict { .. })));
}

/// Concurrent read-modify-write updates retry on conflict and none is lost.
pub async fn concurrent_episode_updates_lose_nothing<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let (store, k) = (store.clone(), k.clone());
            tokio::spawn(async move {
                update_episode(&*store, &k, |e| {
                    let seen = e.response_ids.remove("a").unwrap_or_default();
                    e.response_ids.insert("a".into(), format!("{seen}[{i}]"));
                })
                .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().expect("every update lands");
    }
    let episode = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(episode.version, 4);
    let ids = episode.response_ids["a"].clone();
    for i in 0..4 {
        assert!(ids.contains(&format!("[{i}]")), "update {i} lost: {ids}");
    }
}

/// Each agent's vendor conversation and response id are kept, by agent name.
pub async fn vendor_state_round_trips<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let used = store.clock().now_ms();
    let saved = update_episode(&*store, &k, |e| {
        let conversation = VendorConversation {
            conversation_id: "ft-123".into(),
            last_used_at: used,
            pending: Some(serde_json::json!({"text": "Pick one", "options": [{"label": "A", "value": "a"}]})),
        };
        e.conversations.insert("helpdesk".into(), conversation);
        let other =
            VendorConversation { conversation_id: "ft-456".into(), last_used_at: used, pending: None };
        e.conversations.insert("billing".into(), other);
        e.response_ids = ids("catalog", "resp_abc");
        e.response_ids.insert("travel".into(), "resp_xyz".into());
    })
    .await
    .unwrap();
    clock.advance(Duration::from_secs(60));
    let read = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(read, saved);
    let helpdesk = &read.conversations["helpdesk"];
    assert_eq!(helpdesk.conversation_id, "ft-123");
    assert_eq!(helpdesk.pending.as_ref().unwrap()["options"][0]["value"], "a", "the open prompt is kept");
    let billing = &read.conversations["billing"];
    assert_eq!((billing.conversation_id.as_str(), &billing.pending), ("ft-456", &None), "one per agent");
    assert_eq!(read.response_ids["catalog"], "resp_abc");
    assert_eq!(read.response_ids["travel"], "resp_xyz", "one id per agent");
}

/// A message's metadata (what its agent reported: outcome flags, offered choices, a handoff)
/// reads back as written; a message item written before metadata existed reads with none.
pub async fn message_metadata_round_trips_and_old_items_read_without_it<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let turn = new_turn_id();
    let now = store.clock().now_ms();
    store.record_user_message(&k, &StoredMessage::user(&turn, "2", now), None).await.unwrap();
    let meta = serde_json::json!({
        "is_solved": false, "should_escalate": true, "intent": "points", "workflow_id": "wf-1",
        "feedback_ref": "ft-1", "handoff": {"reason": "should_escalate"},
        "choices": {"prompt": "Pick", "options": [{"label": "A", "value": "a"}]}
    });
    let mut with_meta = reply(&turn, 1, "support[1]", "Pick\n1. A", now);
    with_meta.meta = Some(meta.as_object().unwrap().clone());
    let without = reply(&turn, 2, "shopping[1]", "Deals", now);
    store.save_reply(&k, &turn, &[with_meta.clone(), without.clone()]).await.unwrap();
    let read = store.recent_messages(&k, 10).await.unwrap();
    assert_eq!(read[1..], [with_meta, without]);
    // An item as this store wrote messages before `meta` existed.
    let old_turn = new_turn_id();
    let old = Item::from([
        ("role".to_owned(), Attr::s("assistant")),
        ("agent".to_owned(), Attr::s("support[1]")),
        ("content".to_owned(), Attr::s("old answer")),
        ("usage".to_owned(), Attr::L(Vec::new())),
        ("status".to_owned(), Attr::s("ok")),
        ("created_at".to_owned(), Attr::n(now)),
        ("ttl".to_owned(), Attr::n(4_000_000_000)),
    ]);
    h.put_raw(&k.pk(), &baton::store::message_sk(&old_turn, 1), &old).await;
    let read = store.recent_messages(&k, 10).await.unwrap();
    let old = read.iter().find(|m| m.turn_id == old_turn).expect("the old item reads");
    assert_eq!((old.content.as_str(), &old.meta), ("old answer", &None));
}

/// Items past their `ttl` are absent from every read, and their request ids can be used again.
pub async fn expired_items_are_absent<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let first = new_turn_id();
    let now = store.clock().now_ms();
    store.record_user_message(&k, &StoredMessage::user(&first, "old", now), Some("r1")).await.unwrap();
    clock.advance(DEFAULT_RETENTION - Duration::from_secs(1));
    assert_eq!(store.recent_messages(&k, 10).await.unwrap().len(), 1, "not expired yet");
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.episode(&k).await.unwrap(), None);
    assert!(store.recent_messages(&k, 10).await.unwrap().is_empty());
    let now = store.clock().now_ms();
    let m = StoredMessage::user(new_turn_id(), "new", now);
    assert_eq!(store.record_user_message(&k, &m, Some("r1")).await.unwrap(), Recorded::New);
    assert_eq!(contents(&store.recent_messages(&k, 10).await.unwrap()), ["new"]);
    let episode = store.episode(&k).await.unwrap().expect("a fresh episode");
    assert_eq!((episode.version, episode.created_at), (1, now), "the expired episode is not revived");
}

/// Two users with the same episode id have separate episodes.
pub async fn one_users_items_are_invisible_to_another<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    turn(&*store, &key("alice", "shared"), "alice's secret", "noted").await;
    assert!(store.recent_messages(&key("bob", "shared"), 10).await.unwrap().is_empty());
    assert_eq!(store.episode(&key("bob", "shared")).await.unwrap(), None);
    turn(&*store, &key("bob", "shared"), "bob here", "hi bob").await;
    assert_eq!(
        contents(&store.recent_messages(&key("alice", "shared"), 10).await.unwrap()),
        ["alice's secret", "noted"]
    );
    assert_eq!(store.episode(&key("alice", "shared")).await.unwrap().unwrap().version, 1);
}

/// An item of unknown shape is a `Corrupt` error that names its key; nothing panics.
pub async fn an_item_of_unknown_shape_is_an_error_naming_its_key<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let id = turn(&*store, &k, "q", "a").await;
    let ttl = Attr::n(4_000_000_000);
    let bad_message = Item::from([
        ("role".to_owned(), Attr::s("wizard")),
        ("agent".to_owned(), Attr::s("x")),
        ("content".to_owned(), Attr::s("?")),
        ("status".to_owned(), Attr::s("ok")),
        ("created_at".to_owned(), Attr::n(1)),
        ("ttl".to_owned(), ttl.clone()),
    ]);
    let sk = format!("MSG#{id}#0002");
    h.put_raw(&k.pk(), &sk, &bad_message).await;
    match store.recent_messages(&k, 10).await {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, format!("USER#alice#EP#e1 / {sk}"));
            assert!(reason.contains("`role`"), "{reason}");
        }
        other => panic!("expected a corrupt-item error, got {other:?}"),
    }
    let bad_episode = Item::from([("version".to_owned(), Attr::s("seven")), ("ttl".to_owned(), ttl)]);
    h.put_raw(&k.pk(), "META", &bad_episode).await;
    match store.episode(&k).await {
        Err(e @ StoreError::Corrupt { .. }) => {
            let text = e.to_string();
            assert!(text.contains("USER#alice#EP#e1 / META"), "{text}");
            assert_eq!(e.code(), "store_corrupt_item");
        }
        other => panic!("expected a corrupt-item error, got {other:?}"),
    }
}

/// What was written is there after the store is closed and opened again.
pub async fn data_survives_reopening_the_store<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let k = key("alice", "e1");
    let store = h.store();
    turn(&*store, &k, "remember me", "I will").await;
    drop(store);
    let h = h.reopen().await;
    let store: Arc<dyn Store> = h.store();
    assert_eq!(contents(&store.recent_messages(&k, 10).await.unwrap()), ["remember me", "I will"]);
    assert_eq!(store.episode(&k).await.unwrap().unwrap().version, 1);
}

/// A held lease is refused to another holder (who learns until when), granted again to its own
/// holder (renewed), and kept apart per name, episode and user.
pub async fn a_lease_goes_to_one_holder_at_a_time<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let (k, ttl) = (key("alice", "e1"), Duration::from_secs(30));
    let now = store.clock().now_ms();
    assert_eq!(store.take_lease(&k, "vendor:support", "a", ttl).await.unwrap(), LeaseGrant::Granted);
    assert_eq!(
        store.take_lease(&k, "vendor:support", "b", ttl).await.unwrap(),
        LeaseGrant::Held { holder: "a".into(), until: now + 30_000 }
    );
    assert_eq!(
        store.take_lease(&k, "vendor:support", "a", ttl).await.unwrap(),
        LeaseGrant::Granted,
        "renewed"
    );
    assert_eq!(store.take_lease(&k, "vendor:other", "b", ttl).await.unwrap(), LeaseGrant::Granted);
    assert_eq!(
        store.take_lease(&key("alice", "e2"), "vendor:support", "b", ttl).await.unwrap(),
        LeaseGrant::Granted
    );
    assert_eq!(
        store.take_lease(&key("bob", "e1"), "vendor:support", "b", ttl).await.unwrap(),
        LeaseGrant::Granted
    );
    // A lease is no message: history does not see it.
    assert!(store.recent_messages(&k, 10).await.unwrap().is_empty());
}

/// A lease past its expiry goes to the next caller; the first holder's late release leaves the
/// new holder's lease alone.
pub async fn an_expired_lease_is_taken_over_and_a_stale_release_frees_nothing<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let (k, ttl) = (key("alice", "e1"), Duration::from_secs(5));
    assert_eq!(store.take_lease(&k, "n", "crashed", ttl).await.unwrap(), LeaseGrant::Granted);
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        store.take_lease(&k, "n", "next", ttl).await.unwrap(),
        LeaseGrant::Granted,
        "expired: taken over"
    );
    store.release_lease(&k, "n", "crashed").await.unwrap();
    assert!(
        matches!(store.take_lease(&k, "n", "third", ttl).await.unwrap(), LeaseGrant::Held { .. }),
        "a stale release must not free another holder's lease"
    );
}

/// Released, a lease is free at once; releasing a lease one does not hold is no error.
pub async fn a_lease_is_released_for_the_next_holder<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let (k, ttl) = (key("alice", "e1"), Duration::from_secs(60));
    store.release_lease(&k, "n", "nobody").await.unwrap();
    assert_eq!(store.take_lease(&k, "n", "a", ttl).await.unwrap(), LeaseGrant::Granted);
    store.release_lease(&k, "n", "a").await.unwrap();
    assert_eq!(store.take_lease(&k, "n", "b", ttl).await.unwrap(), LeaseGrant::Granted);
}

/// Of many callers racing for one free lease, exactly one is granted.
pub async fn concurrent_callers_are_granted_a_free_lease_once<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let calls = (0..8).map(|i| {
        let (store, k) = (store.clone(), k.clone());
        tokio::spawn(async move {
            store.take_lease(&k, "n", &format!("holder-{i}"), Duration::from_secs(60)).await
        })
    });
    let mut granted = 0;
    for call in calls.collect::<Vec<_>>() {
        if call.await.unwrap().unwrap() == LeaseGrant::Granted {
            granted += 1;
        }
    }
    assert_eq!(granted, 1);
}

/// An episode item as an older version wrote it: created and updated at `now`, at `version`, with
/// `attributes` beside them.
fn old_episode_item<const N: usize>(now: u64, version: u64, attributes: [(&str, Attr); N]) -> Item {
    let mut item = Item::from([
        ("created_at".to_owned(), Attr::n(now)),
        ("updated_at".to_owned(), Attr::n(now)),
        ("version".to_owned(), Attr::n(version)),
        ("ttl".to_owned(), Attr::n(4_000_000_000)),
    ]);
    item.extend(attributes.map(|(name, value)| (name.to_owned(), value)));
    item
}

/// An episode item written before response ids were kept per agent (one `shopping_response_id`)
/// reads with that id under the agent it belonged to, and the next write keeps it.
pub async fn an_episode_item_of_the_single_response_id_era_still_reads<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let now = store.clock().now_ms();
    let old = old_episode_item(
        now,
        3,
        [
            ("ft_conversation_id", Attr::s("ft-1")),
            ("ft_last_used_at", Attr::n(now)),
            ("shopping_response_id", Attr::s("resp_old")),
        ],
    );
    h.put_raw(&k.pk(), "META", &old).await;
    let episode = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(episode.version, 3);
    assert_eq!(episode.response_ids, ids("shopping", "resp_old"), "`<agent>_response_id` is the agent's");
    assert_eq!(
        episode.conversations["ft"].conversation_id, "ft-1",
        "`<vendor>_conversation_id` the vendor's"
    );
    let saved = update_episode(&*store, &k, |e| {
        e.response_ids.insert("travel".into(), "resp_new".into());
    })
    .await
    .unwrap();
    let read = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(read, saved);
    assert_eq!(read.response_ids.len(), 2, "{:?}", read.response_ids);
}

/// An episode item written before vendor conversations were kept per agent (one `ft_*`
/// conversation, with its open prompt) reads with that conversation under the agent it belonged
/// to, and the next write moves it into `conversations` beside the new one.
pub async fn an_episode_item_of_the_single_conversation_era_still_reads<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let now = store.clock().now_ms();
    let old = old_episode_item(
        now,
        2,
        [
            ("ft_conversation_id", Attr::s("ft-old")),
            ("ft_last_used_at", Attr::n(now - 5)),
            ("ft_pending", Attr::s(r#"{"text":"Pick one"}"#)),
        ],
    );
    h.put_raw(&k.pk(), "META", &old).await;
    let legacy = "ft";
    let episode = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(episode.version, 2);
    let expected = VendorConversation {
        conversation_id: "ft-old".into(),
        last_used_at: now - 5,
        pending: Some(serde_json::json!({"text": "Pick one"})),
    };
    assert_eq!(episode.conversations, [(legacy.to_owned(), expected.clone())].into());
    let saved = update_episode(&*store, &k, |e| {
        let new = VendorConversation { conversation_id: "ft-new".into(), last_used_at: now, pending: None };
        e.conversations.insert("billing".into(), new);
    })
    .await
    .unwrap();
    let read = store.episode(&k).await.unwrap().unwrap();
    assert_eq!(read, saved);
    assert_eq!(read.conversations[legacy], expected, "the old conversation moved, prompt and all");
    assert_eq!(read.conversations["billing"].conversation_id, "ft-new");
    assert_eq!(read.version, 3);
}

/// Every page of `key`, newest first, `limit` messages per request, following `next`.
async fn pages(store: &dyn Store, key: &EpisodeKey, limit: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let (page, next) = store.messages_page(key, before.as_deref(), limit).await.expect("a page");
        assert!(page.len() <= limit, "a page holds at most the limit");
        out.push(page.iter().map(|m| m.content.clone()).collect());
        match next {
            Some(next) => {
                assert_eq!(Some(&next), page.first().map(|m| MessageCursor::of(m).to_string()).as_ref());
                before = Some(next);
            }
            None => return out,
        }
        assert!(out.len() < 100, "pages end");
    }
}

/// Pages go backwards from the newest message, each oldest first, and together are the whole
/// conversation once, in order; the messages keep every field.
pub async fn message_pages_read_backwards_to_the_first_message<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    for i in 0..7 {
        turn(&*store, &k, &format!("q{i}"), &format!("a{i}")).await;
    }
    assert_eq!(
        pages(&*store, &k, 4).await,
        [
            vec!["q5", "a5", "q6", "a6"],
            vec!["q3", "a3", "q4", "a4"],
            vec!["q1", "a1", "q2", "a2"],
            vec!["q0", "a0"],
        ]
    );
    let (all, next) = store.messages_page(&k, None, 200).await.unwrap();
    assert_eq!((all.len(), next), (14, None));
    assert_eq!(all, store.recent_messages(&k, 200).await.unwrap(), "the same messages, fields and all");
    assert_eq!(store.messages_page(&k, None, 0).await.unwrap(), (vec![], None));
}

/// A conversation that ends exactly at a page boundary has no empty page after it.
pub async fn a_message_page_names_no_older_page_when_it_holds_the_first_message<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    for i in 0..3 {
        turn(&*store, &k, &format!("q{i}"), &format!("a{i}")).await;
    }
    assert_eq!(pages(&*store, &k, 3).await, [vec!["a1", "q2", "a2"], vec!["q0", "a0", "q1"]]);
    assert_eq!(pages(&*store, &k, 6).await, [vec!["q0", "a0", "q1", "a1", "q2", "a2"]]);
    assert_eq!(pages(&*store, &key("alice", "none"), 5).await, [Vec::<String>::new()]);
}

/// Expired messages are absent from pages (a page still fills from older live ones), and a
/// page of one user's episode never holds another's.
pub async fn message_pages_skip_expired_messages_and_other_users<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "shared");
    for i in 0..4 {
        turn(&*store, &k, &format!("q{i}"), &format!("a{i}")).await;
    }
    turn(&*store, &key("bob", "shared"), "bob's", "his").await;
    // The newest two messages expire in 10 s, the others in 90 days.
    let (last, now) = (new_turn_id(), store.clock().now_ms());
    for (seq, content) in [(1, "gone"), (2, "gone too")] {
        let item = baton::store::item::encode_message(&reply(&last, seq, "a", content, now), now / 1000 + 10);
        h.put_raw(&k.pk(), &baton::store::message_sk(&last, seq), &item).await;
    }
    assert_eq!(pages(&*store, &k, 2).await[0], ["gone", "gone too"], "not expired yet");
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        pages(&*store, &k, 3).await,
        [vec!["a2", "q3", "a3"], vec!["q1", "a1", "q2"], vec!["q0", "a0"]],
        "expired messages are skipped and bob's are not there"
    );
    assert_eq!(pages(&*store, &key("bob", "shared"), 10).await, [vec!["bob's", "his"]]);
}

/// A cursor that is not `<turn>.<seq>` (or would reach outside the messages) is refused.
pub async fn a_malformed_message_cursor_is_an_invalid_key<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    turn(&*store, &k, "q", "a").await;
    for bad in ["", "t", "t.", "t.x", "t.12345", "a#META.1", "t.1.2", ".1"] {
        let got = store.messages_page(&k, Some(bad), 10).await;
        assert!(matches!(got, Err(StoreError::InvalidKey(_))), "{bad:?}: {got:?}");
    }
}

/// A cursor names a position, not an item: after its turn is answered again (the reply it named
/// replaced), the next page is still the messages before that position.
pub async fn a_message_cursor_stays_valid_when_its_turn_is_answered_again<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    turn(&*store, &k, "q0", "a0").await;
    let second = turn(&*store, &k, "q1", "a1").await;
    let (page, next) = store.messages_page(&k, None, 1).await.unwrap();
    assert_eq!(contents(&page), ["a1"]);
    let now = store.clock().now_ms();
    store.save_reply(&k, &second, &[reply(&second, 1, "b", "a1 again", now)]).await.unwrap();
    let (page, _) = store.messages_page(&k, next.as_deref(), 10).await.unwrap();
    assert_eq!(contents(&page), ["q0", "a0", "q1"]);
}

/// The approvals record: created at version 0, then each write names the version it read; a
/// stale version is a conflict; another user's key sees none.
pub async fn an_approvals_record_is_written_once_per_version<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let keep = store.clock().now_ms() / 1000 + 3600;
    assert_eq!(store.approvals(&k).await.unwrap(), None);
    assert_eq!(store.save_approvals(&k, r#"{"v":1}"#, 0, keep).await.unwrap(), 1);
    assert_eq!(store.approvals(&k).await.unwrap(), Some((1, r#"{"v":1}"#.to_owned())));
    let again = store.save_approvals(&k, r#"{"v":"x"}"#, 0, keep).await;
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");
    assert_eq!(store.save_approvals(&k, r#"{"v":2}"#, 1, keep).await.unwrap(), 2);
    let stale = store.save_approvals(&k, r#"{"v":"y"}"#, 1, keep).await;
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
    assert_eq!(store.approvals(&k).await.unwrap(), Some((2, r#"{"v":2}"#.to_owned())));
    assert_eq!(store.approvals(&key("bob", "e1")).await.unwrap(), None, "another user's key");
    let big = "x".repeat(100_000);
    let body = serde_json::json!({"big": big}).to_string();
    assert_eq!(store.save_approvals(&k, &body, 2, keep).await.unwrap(), 3, "a 100 kB record fits");
    assert_eq!(store.approvals(&k).await.unwrap().unwrap().1, body);
}

/// A record kept past its time reads as absent, and is written anew from version 0.
pub async fn an_approvals_record_kept_past_its_time_is_absent_and_written_anew<H: StoreHarness>() {
    let clock = test_clock();
    let h = H::start(clock.clone()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let keep = store.clock().now_ms() / 1000 + 10;
    store.save_approvals(&k, "{}", 0, keep).await.unwrap();
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.approvals(&k).await.unwrap(), None);
    let later = store.clock().now_ms() / 1000 + 10;
    assert_eq!(store.save_approvals(&k, r#"{"new":true}"#, 0, later).await.unwrap(), 1);
}

/// Of many writers racing from one version, exactly one succeeds.
pub async fn racing_approvals_writes_succeed_once<H: StoreHarness>() {
    let h = H::start(test_clock()).await;
    let store = h.store();
    let k = key("alice", "e1");
    let keep = store.clock().now_ms() / 1000 + 3600;
    store.save_approvals(&k, "{}", 0, keep).await.unwrap();
    let writes = (0..8).map(|i| {
        let (store, k) = (store.clone(), k.clone());
        tokio::spawn(async move { store.save_approvals(&k, &format!(r#"{{"by":{i}}}"#), 1, keep).await })
    });
    let mut won = 0;
    for write in writes.collect::<Vec<_>>() {
        match write.await.unwrap() {
            Ok(2) => won += 1,
            Err(StoreError::Conflict { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1);
}
