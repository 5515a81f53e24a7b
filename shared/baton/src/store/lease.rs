//! A short lease on a name within an episode: calls that a vendor takes one at a time (a vendor
//! conversation API that answers one request per conversation and refuses the others) wait
//! for each other, in one process and across processes and Lambda instances.
//!
//! A lease is one store item (`LEASE#<name>`) written conditionally ([`Leases::take_lease`]): it
//! is granted when free, expired, or already the caller's. [`acquire`] asks again while another
//! holder has it, pausing with backoff (never past the holder's expiry or the caller's bound),
//! and gives up after `wait` with [`LeaseError::Busy`]: a waiting call is bounded, never a
//! hang. An expired lease is taken over (a holder that crashed or hung costs its `ttl`, not
//! forever). The holder releases it when done ([`Lease::release`]); dropping a [`Lease`]
//! without releasing it (a cancelled turn) releases it on the runtime in the background.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{EpisodeKey, LeaseGrant, Leases, StoreError};

/// The first pause before asking again for a held lease; it doubles up to [`MAX_PAUSE`].
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause between two asks: a lease released early is noticed within this.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(400);

/// Waiting for a lease failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Another call held the lease for the whole wait.
    #[error("`{name}` was busy with another call for {} ms", waited.as_millis())]
    Busy {
        /// The lease.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A held lease. [`Lease::release`] gives it up; dropping it does the same in the background.
#[must_use = "a lease is released when dropped"]
pub struct Lease {
    release: Option<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("held", &self.release.is_some()).finish()
    }
}

impl Lease {
    /// A lease that `release` gives up (for holders other than the store: an in-process lock).
    pub fn new(release: impl Future<Output = ()> + Send + 'static) -> Lease {
        Lease { release: Some(Box::pin(release)) }
    }

    /// Gives the lease up, and returns once it is free for the next caller.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            release.await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            // Without a runtime (a process shutting down) the lease simply expires.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(release);
            }
        }
    }
}

/// Takes the lease `name` of `key`'s episode for `ttl` (how long the caller may hold it at most:
/// the bound of the call it protects), waiting up to `wait` while another holder has it.
pub async fn acquire(
    store: Arc<dyn Leases>,
    key: EpisodeKey,
    name: &str,
    ttl: Duration,
    wait: Duration,
) -> Result<Lease, LeaseError> {
    acquire_as(store, key, name, uuid::Uuid::new_v4().to_string(), ttl, wait).await
}

/// [`acquire`] for a holder the caller names (a turn's id, so that whoever finds the lease held
/// learns which turn holds it).
pub(crate) async fn acquire_as(
    store: Arc<dyn Leases>,
    key: EpisodeKey,
    name: &str,
    holder: String,
    ttl: Duration,
    wait: Duration,
) -> Result<Lease, LeaseError> {
    let started = Instant::now();
    let deadline = crate::bounded::after(started, wait);
    let mut pause = MIN_PAUSE;
    loop {
        match store.take_lease(&key, name, &holder, ttl).await? {
            LeaseGrant::Granted => {
                let name = name.to_owned();
                return Ok(Lease::new(async move {
                    if let Err(e) = store.release_lease(&key, &name, &holder).await {
                        // It expires by itself after `ttl`.
                        tracing::warn!(lease = %name, error = %e, "cannot release a lease; it will expire");
                    }
                }));
            }
            LeaseGrant::Held { until, .. } => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(LeaseError::Busy { name: name.to_owned(), waited: now - started });
                }
                let expires_in = Duration::from_millis(until.saturating_sub(store.clock().now_ms()));
                // Jitter keeps waiters of several processes from asking in step.
                let jittered = pause.mul_f64(0.75 + fastrand::f64() / 2.0);
                let sleep = jittered.min(expires_in.max(Duration::from_millis(1))).min(deadline - now);
                tokio::time::sleep(sleep).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{ManualClock, SystemClock};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::SystemTime;

    fn store() -> (tempfile::TempDir, Arc<dyn Leases>) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap();
        (dir, Arc::new(store))
    }

    fn key() -> EpisodeKey {
        EpisodeKey::new("u1", "ep1").unwrap()
    }

    #[tokio::test]
    async fn calls_holding_one_lease_never_overlap_and_all_run() {
        let (_dir, store) = store();
        let inside = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..4 {
            let (store, inside) = (store.clone(), inside.clone());
            calls.push(tokio::spawn(async move {
                let lease =
                    acquire(store, key(), "vendor:support", Duration::from_secs(30), Duration::from_secs(10))
                        .await
                        .unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await;
            }));
        }
        for call in calls {
            call.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_lease_held_past_the_wait_is_busy_within_the_bound() {
        let (_dir, store) = store();
        let _held =
            acquire(store.clone(), key(), "n", Duration::from_secs(60), Duration::ZERO).await.unwrap();
        let started = std::time::Instant::now();
        let err = acquire(store, key(), "n", Duration::from_secs(60), Duration::from_millis(150))
            .await
            .unwrap_err();
        assert!(matches!(err, LeaseError::Busy { ref name, .. } if name == "n"), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "the wait overran its bound");
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_its_late_release_frees_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemTime::now()));
        let store: Arc<dyn Leases> =
            Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), clock.clone()).unwrap());
        let crashed =
            acquire(store.clone(), key(), "n", Duration::from_secs(5), Duration::ZERO).await.unwrap();
        clock.advance(Duration::from_secs(6));
        let next = acquire(store.clone(), key(), "n", Duration::from_secs(5), Duration::ZERO).await.unwrap();
        // The first holder's release comes late: the lease is the second's and stays held.
        crashed.release().await;
        let third = acquire(store.clone(), key(), "n", Duration::from_secs(5), Duration::ZERO).await;
        assert!(matches!(third, Err(LeaseError::Busy { .. })), "{third:?}");
        next.release().await;
        acquire(store, key(), "n", Duration::from_secs(5), Duration::ZERO).await.unwrap().release().await;
    }

    #[tokio::test]
    async fn dropping_a_lease_releases_it() {
        let (_dir, store) = store();
        drop(acquire(store.clone(), key(), "n", Duration::from_secs(60), Duration::ZERO).await.unwrap());
        let next = acquire(store, key(), "n", Duration::from_secs(60), Duration::from_secs(5)).await;
        assert!(next.is_ok(), "{next:?}");
    }

    #[tokio::test]
    async fn leases_are_per_name_and_per_episode() {
        let (_dir, store) = store();
        let ttl = Duration::from_secs(60);
        let _a = acquire(store.clone(), key(), "a", ttl, Duration::ZERO).await.unwrap();
        let _b = acquire(store.clone(), key(), "b", ttl, Duration::ZERO).await.unwrap();
        let other = EpisodeKey::new("u1", "ep2").unwrap();
        let _c = acquire(store, other, "a", ttl, Duration::ZERO).await.unwrap();
    }
}
