//! A message that arrives while its episode's turn runs ("double texting"): the request's
//! `on_busy` policy, or the configured default, decides (docs/durable-turns.md#busy-episodes).
//!
//! The running turn is one store lease per episode (`LEASE#turn`, [`BUSY_LEASE`]) held by the
//! turn's id until it ends, with the turn's deadline as its expiry: a conditional write, so it
//! holds across processes and Lambda instances, and a turn whose process died frees the
//! episode when its deadline passes. What the next message does when the lease is held:
//! - `reject`: refused with the running turn's id ([`BusyRefusal::InProgress`]), to rejoin it;
//! - `enqueue`: waits for the lease (bounded) and runs after, seeing that turn in its history;
//!   at most [`BusyGate::queue_limit`] messages wait per episode, each in a slot lease of its
//!   own (`LEASE#turn-queue-<i>`), and the next is refused ([`BusyRefusal::QueueFull`]);
//! - `interrupt`: asks the running turn to stop (the store's cancel flag, read by its producer
//!   on any instance, and this process's own stop), waits for it to end (its partial is saved as
//!   `cancelled`), then runs with it in history;
//! - `parallel`: runs at once beside it; it reads no vendor response chain (so no chain is ever
//!   continued by two turns at once) and takes the lease only when the episode is free.
//!
//! The gate holds no state of its own: the store is the only place two instances share.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::store::lease::{Lease, LeaseError, acquire_as};
use crate::store::{EpisodeKey, LeaseGrant, Store, StoreError};

/// The lease a running turn holds on its episode.
pub const BUSY_LEASE: &str = "turn";

/// Messages that may wait for one episode's running turn, by default.
pub const DEFAULT_QUEUE_LIMIT: usize = 4;

/// What a message sent while the episode's turn runs does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBusy {
    /// Refused with `409 turn_in_progress`, naming the running turn.
    Reject,
    /// Runs after the running turn, seeing it in history; bounded queue, then `429`. The
    /// default: no message is lost or refused in a chat where people type while an answer
    /// streams, each answer reads the one before it, and no two turns of a conversation ever run
    /// at once.
    #[default]
    Enqueue,
    /// The running turn is stopped (its partial kept as `cancelled`), and this one runs after it.
    Interrupt,
    /// Runs at once, beside the running turn, with no vendor response chain.
    Parallel,
}

/// The names [`OnBusy`] is written with.
pub(crate) const ON_BUSY_VALUES: &str = "\"reject\", \"enqueue\", \"interrupt\" or \"parallel\"";

impl std::str::FromStr for OnBusy {
    type Err = String;

    fn from_str(s: &str) -> Result<OnBusy, String> {
        match s {
            "reject" => Ok(OnBusy::Reject),
            "enqueue" => Ok(OnBusy::Enqueue),
            "interrupt" => Ok(OnBusy::Interrupt),
            "parallel" => Ok(OnBusy::Parallel),
            other => Err(format!("{other:?} is not an on_busy policy: {ON_BUSY_VALUES}")),
        }
    }
}

impl OnBusy {
    /// Its name in a request and in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            OnBusy::Reject => "reject",
            OnBusy::Enqueue => "enqueue",
            OnBusy::Interrupt => "interrupt",
            OnBusy::Parallel => "parallel",
        }
    }
}

/// Why a message was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum BusyRefusal {
    /// Another turn runs (`reject`).
    #[error("turn `{turn_id}` is running in this conversation; rejoin it, or send again with on_busy")]
    InProgress {
        /// The running turn.
        turn_id: String,
    },
    /// Every waiting place of the episode is taken (`enqueue`).
    #[error("{limit} messages already wait for this conversation's running turn; try again later")]
    QueueFull {
        /// The episode's queue limit.
        limit: usize,
        /// When to try again.
        retry_after: Duration,
    },
    /// The running turn did not end within the wait (`enqueue`, `interrupt`).
    #[error("turn `{turn_id}` still ran after {} s; this message was not run", waited.as_secs())]
    TimedOut {
        /// The turn that was waited for.
        turn_id: String,
        /// How long.
        waited: Duration,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A turn let in: hold it while the turn runs; dropping it frees the episode (in the
/// background), [`Admission::release`] frees it and waits.
#[derive(Debug)]
pub(crate) struct Admission {
    lease: Option<Lease>,
    /// The turn that was running when this one was let in beside it (`parallel`): this turn
    /// must not read or continue a vendor response chain.
    pub beside: Option<String>,
    /// The turn this one waited for or stopped (`enqueue`, `interrupt`); the tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub after: Option<String>,
}

impl Admission {
    /// Frees the episode for the next message, and returns once it is free.
    pub(crate) async fn release(mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release().await;
        }
    }
}

/// The door of an episode's turns.
#[derive(Clone)]
pub(crate) struct BusyGate {
    store: Arc<dyn Store>,
    /// Messages that may wait per episode.
    pub queue_limit: usize,
}

impl std::fmt::Debug for BusyGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusyGate").field("queue_limit", &self.queue_limit).finish()
    }
}

/// How long a refused `enqueue` is told to wait before it tries again.
const QUEUE_RETRY_AFTER: Duration = Duration::from_secs(5);

impl BusyGate {
    /// A gate over `store`, letting `queue_limit` messages wait per episode.
    pub(crate) fn new(store: Arc<dyn Store>, queue_limit: usize) -> BusyGate {
        BusyGate { store, queue_limit }
    }

    /// Lets turn `turn_id` of `key` in under `policy`. `hold` bounds how long it may keep the
    /// episode (its deadline, after which another message takes it over); `wait`, how long a
    /// queued or interrupting message waits for the running turn; `stop_here` stops a turn
    /// this process runs (the store's cancel flag reaches the others).
    pub(crate) async fn admit(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        policy: OnBusy,
        hold: Duration,
        wait: Duration,
        stop_here: impl FnOnce(&str),
    ) -> Result<Admission, BusyRefusal> {
        let running = match self.try_take(key, turn_id, hold).await? {
            None => return Ok(Admission { lease: Some(self.held(key, turn_id)), beside: None, after: None }),
            Some(running) => running,
        };
        match policy {
            OnBusy::Reject => Err(BusyRefusal::InProgress { turn_id: running }),
            OnBusy::Parallel => Ok(Admission { lease: None, beside: Some(running), after: None }),
            OnBusy::Enqueue => {
                let Some(slot) = self.queue_slot(key, turn_id, wait).await? else {
                    return Err(BusyRefusal::QueueFull {
                        limit: self.queue_limit,
                        retry_after: QUEUE_RETRY_AFTER,
                    });
                };
                let admitted = self.wait_for(key, turn_id, &running, hold, wait).await;
                slot.release().await;
                admitted
            }
            OnBusy::Interrupt => {
                stop_here(&running);
                self.store.request_cancel(key, &running).await?;
                self.wait_for(key, turn_id, &running, hold, wait).await
            }
        }
    }

    /// Takes the episode for `turn_id` if it is free: `None` when taken, else the running turn.
    async fn try_take(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        hold: Duration,
    ) -> Result<Option<String>, StoreError> {
        // A lease released between the refused write and the read of its holder is free: ask again.
        for _ in 0..3 {
            match self.store.take_lease(key, BUSY_LEASE, turn_id, hold).await? {
                LeaseGrant::Granted => return Ok(None),
                LeaseGrant::Held { holder, .. } if !holder.is_empty() => return Ok(Some(holder)),
                LeaseGrant::Held { .. } => continue,
            }
        }
        Ok(Some(String::new()))
    }

    /// A waiting place of the episode, held while this message waits; `None` when all are taken.
    async fn queue_slot(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        wait: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        for slot in 0..self.queue_limit {
            let name = format!("{BUSY_LEASE}-queue-{slot}");
            if self.store.take_lease(key, &name, turn_id, wait).await? == LeaseGrant::Granted {
                let (store, key, holder) = (self.store.clone(), key.clone(), turn_id.to_owned());
                return Ok(Some(Lease::new(async move {
                    if let Err(e) = store.release_lease(&key, &name, &holder).await {
                        tracing::warn!(lease = %name, error = %e, "cannot release a queue place; it will expire");
                    }
                })));
            }
        }
        Ok(None)
    }

    /// Waits up to `wait` for the episode, then holds it for `turn_id`.
    async fn wait_for(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        running: &str,
        hold: Duration,
        wait: Duration,
    ) -> Result<Admission, BusyRefusal> {
        let started = Instant::now();
        let store = self.store.clone();
        match acquire_as(store, key.clone(), BUSY_LEASE, turn_id.to_owned(), hold, wait).await {
            Ok(lease) => Ok(Admission { lease: Some(lease), beside: None, after: Some(running.to_owned()) }),
            Err(LeaseError::Busy { .. }) => {
                Err(BusyRefusal::TimedOut { turn_id: running.to_owned(), waited: started.elapsed() })
            }
            Err(LeaseError::Store(e)) => Err(e.into()),
        }
    }

    /// The episode's lease, taken already by `turn_id`, as a [`Lease`] that frees it.
    fn held(&self, key: &EpisodeKey, turn_id: &str) -> Lease {
        let (store, key, holder) = (self.store.clone(), key.clone(), turn_id.to_owned());
        Lease::new(async move {
            if let Err(e) = store.release_lease(&key, BUSY_LEASE, &holder).await {
                tracing::warn!(error = %e, "cannot free the episode's turn lease; it expires at the turn deadline");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{ManualClock, SystemClock};
    use std::time::SystemTime;

    const HOLD: Duration = Duration::from_secs(60);
    const WAIT: Duration = Duration::from_secs(10);

    fn gate(limit: usize) -> (tempfile::TempDir, BusyGate) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap();
        (dir, BusyGate::new(Arc::new(store), limit))
    }

    fn key(user: &str) -> EpisodeKey {
        EpisodeKey::new(user, "e1").unwrap()
    }

    async fn admit(
        gate: &BusyGate,
        user: &str,
        turn: &str,
        policy: OnBusy,
    ) -> Result<Admission, BusyRefusal> {
        gate.admit(&key(user), turn, policy, HOLD, WAIT, |_| {}).await
    }

    #[tokio::test]
    async fn a_rejected_message_names_the_running_turn_and_the_next_one_after_it_runs() {
        let (_dir, gate) = gate(4);
        let first = admit(&gate, "alice", "t1", OnBusy::Reject).await.unwrap();
        let refused = admit(&gate, "alice", "t2", OnBusy::Reject).await;
        assert!(
            matches!(&refused, Err(BusyRefusal::InProgress { turn_id }) if turn_id == "t1"),
            "{refused:?}"
        );
        assert!(admit(&gate, "bob", "t3", OnBusy::Reject).await.is_ok(), "another user's episode is its own");
        first.release().await;
        let next = admit(&gate, "alice", "t2", OnBusy::Reject).await.unwrap();
        assert_eq!((next.beside, next.after), (None, None));
    }

    #[tokio::test]
    async fn an_enqueued_message_runs_when_the_running_turn_ends() {
        let (_dir, gate) = gate(4);
        let first = admit(&gate, "alice", "t1", OnBusy::Enqueue).await.unwrap();
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { admit(&gate, "alice", "t2", OnBusy::Enqueue).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "it waits while t1 runs");
        first.release().await;
        let second = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap().unwrap();
        assert_eq!(second.after.as_deref(), Some("t1"));
        let refused = admit(&gate, "alice", "t3", OnBusy::Reject).await;
        assert!(
            matches!(&refused, Err(BusyRefusal::InProgress { turn_id }) if turn_id == "t2"),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_the_next_message_with_a_time_to_retry() {
        let (_dir, gate) = gate(1);
        let _first = admit(&gate, "alice", "t1", OnBusy::Enqueue).await.unwrap();
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { admit(&gate, "alice", "t2", OnBusy::Enqueue).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = admit(&gate, "alice", "t3", OnBusy::Enqueue).await;
        assert!(
            matches!(&refused, Err(BusyRefusal::QueueFull { limit: 1, retry_after }) if !retry_after.is_zero()),
            "{refused:?}"
        );
        waiting.abort();
    }

    #[tokio::test]
    async fn a_queued_message_that_waits_too_long_is_refused_and_frees_its_place() {
        let (_dir, gate) = gate(1);
        let _first = admit(&gate, "alice", "t1", OnBusy::Enqueue).await.unwrap();
        let late =
            gate.admit(&key("alice"), "t2", OnBusy::Enqueue, HOLD, Duration::from_millis(200), |_| {}).await;
        assert!(matches!(&late, Err(BusyRefusal::TimedOut { turn_id, .. }) if turn_id == "t1"), "{late:?}");
        let again =
            gate.admit(&key("alice"), "t3", OnBusy::Enqueue, HOLD, Duration::from_millis(200), |_| {}).await;
        assert!(matches!(again, Err(BusyRefusal::TimedOut { .. })), "the place was freed: {again:?}");
    }

    #[tokio::test]
    async fn an_interrupting_message_stops_the_running_turn_and_runs_after_it() {
        let (_dir, gate) = gate(4);
        let first = admit(&gate, "alice", "t1", OnBusy::Enqueue).await.unwrap();
        let stopped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let interrupting = tokio::spawn({
            let (gate, stopped) = (gate.clone(), stopped.clone());
            async move {
                let stop = |turn: &str| stopped.lock().unwrap().push(turn.to_owned());
                gate.admit(&key("alice"), "t2", OnBusy::Interrupt, HOLD, WAIT, stop).await
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*stopped.lock().unwrap(), ["t1"], "the running turn was asked to stop");
        first.release().await;
        let second = tokio::time::timeout(WAIT, interrupting).await.unwrap().unwrap().unwrap();
        assert_eq!(second.after.as_deref(), Some("t1"));
    }

    #[tokio::test]
    async fn a_parallel_message_runs_beside_the_running_turn_without_taking_the_episode() {
        let (_dir, gate) = gate(4);
        let _first = admit(&gate, "alice", "t1", OnBusy::Enqueue).await.unwrap();
        let beside = admit(&gate, "alice", "t2", OnBusy::Parallel).await.unwrap();
        assert_eq!(beside.beside.as_deref(), Some("t1"), "it must not continue a response chain");
        let refused = admit(&gate, "alice", "t3", OnBusy::Reject).await;
        assert!(
            matches!(&refused, Err(BusyRefusal::InProgress { turn_id }) if turn_id == "t1"),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_turn_whose_process_died_frees_the_episode_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemTime::now()));
        let store = EmbeddedStore::open(dir.path().join("s.redb"), clock.clone()).unwrap();
        let gate = BusyGate::new(Arc::new(store), 4);
        let dead = admit(&gate, "alice", "t1", OnBusy::Reject).await.unwrap();
        std::mem::forget(dead);
        clock.advance(HOLD - Duration::from_millis(1));
        assert!(admit(&gate, "alice", "t2", OnBusy::Reject).await.is_err(), "held until its deadline");
        clock.advance(Duration::from_millis(1));
        assert!(admit(&gate, "alice", "t2", OnBusy::Reject).await.is_ok(), "free at its deadline");
    }

    #[test]
    fn an_unknown_policy_names_the_allowed_ones() {
        assert_eq!("interrupt".parse::<OnBusy>(), Ok(OnBusy::Interrupt));
        let error = "later".parse::<OnBusy>().unwrap_err();
        assert!(error.contains("\"later\"") && error.contains(ON_BUSY_VALUES), "{error}");
        for policy in [OnBusy::Reject, OnBusy::Enqueue, OnBusy::Interrupt, OnBusy::Parallel] {
            assert_eq!(policy.as_str().parse::<OnBusy>(), Ok(policy));
        }
    }
}
