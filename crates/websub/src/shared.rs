//! The hub's state, shared by the request side (`hub.rs`) and the per-subscriber delivery
//! workers (`delivery.rs`): subscriptions with their in-memory queues, payload reference
//! counts, bounds, counters, and the removals both sides make.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::HubConfig;
use crate::records::{SubscriptionRecord, payload_path, queue_path, subscription_path};

/// A message in a subscriber's queue (its persisted [`crate::records::QueueRecord`]).
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub seq: u64,
    pub topic: String,
    pub content_type: String,
    pub payload: String,
}

pub(crate) struct Sub {
    pub record: SubscriptionRecord,
    pub queue: VecDeque<Queued>,
    pub next_seq: u64,
    /// A worker task is running for this subscriber (at most one: ordering).
    pub worker: bool,
    /// The message the worker is sending (never dropped while in flight).
    pub in_flight: Option<u64>,
}

impl Sub {
    pub fn new(record: SubscriptionRecord) -> Sub {
        Sub {
            record,
            queue: VecDeque::new(),
            next_seq: 0,
            worker: false,
            in_flight: None,
        }
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub subs: HashMap<String, Sub>,
    /// Queue entries referring to each payload; the payload goes with the last one.
    pub refs: HashMap<String, usize>,
}

pub(crate) struct Inner {
    pub objects: Arc<dyn ObjectStore>,
    pub config: HubConfig,
    pub client: reqwest::Client,
    pub state: Mutex<State>,
    /// Publications are queued one at a time, so two publications reach every subscriber in
    /// the same order.
    pub publish_lock: tokio::sync::Mutex<()>,
    /// Outgoing requests in flight.
    pub outbound: Semaphore,
    /// Verifications and topic fetches waiting or running.
    pub pending: Arc<Semaphore>,
    pub cancel: CancellationToken,
    pub delivered: AtomicU64,
    pub failed_attempts: AtomicU64,
    pub dropped: AtomicU64,
    /// Requests the address guard refused.
    pub refused: AtomicU64,
    /// Subscription and unsubscription requests whose outcome is settled.
    pub settled: AtomicU64,
}

impl Inner {
    /// Counts `e` when it is a refusal of the address guard, and hands it back.
    pub fn count_refused(&self, e: Error) -> Error {
        if matches!(e, Error::Refused { .. }) {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        e
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Deletes an object; what is already gone is fine, other failures are logged (a leftover
/// is cleaned at the next start).
pub(crate) async fn delete_quietly(inner: &Inner, path: &str) {
    match inner.objects.delete(&Path::from(path)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => tracing::warn!(object = %path, error = %e, "could not delete"),
    }
}

/// One queue entry referring to `payload` is gone; the payload goes with the last.
pub(crate) async fn release_payload(inner: &Inner, payload: &str) {
    let last = {
        let mut st = inner.lock();
        match st.refs.get_mut(payload) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                st.refs.remove(payload);
                true
            }
            None => false,
        }
    };
    if last {
        delete_quietly(inner, &payload_path(payload)).await;
    }
}

/// Removes a subscription with its queue (unsubscribed or expired: WebSub 5.3 and the
/// lease, nothing more is delivered).
pub(crate) async fn remove_subscription(inner: &Arc<Inner>, id: &str, why: &str) {
    let removed = inner.lock().subs.remove(id);
    delete_quietly(inner, &subscription_path(id)).await;
    if let Some(sub) = removed {
        tracing::info!(callback = %sub.record.callback, topic = %sub.record.topic, why, "subscription removed");
        for q in sub.queue {
            delete_quietly(inner, &queue_path(id, q.seq)).await;
            release_payload(inner, &q.payload).await;
        }
    }
}
