//! Delivery (WebSub 7, CN 1.0.1 4.3): one worker task per subscriber with messages waiting,
//! sending them one at a time in queue order, so a later message never overtakes an earlier
//! one; a failure (anything but 2xx, WebSub 7) is retried after an exponential, jittered,
//! capped delay, and the messages behind it wait. A redirect is a failure too (the client
//! follows none), and every POST goes through the address guard.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use object_store::ObjectStoreExt;
use object_store::path::Path;
use reqwest::header::{CONTENT_TYPE, LINK};
use url::Url;

use crate::link;
use crate::records::{SubscriptionRecord, payload_path, queue_path};
use crate::shared::{
    Inner, Queued, State, delete_quietly, release_payload, remove_subscription, unix_now,
};
use crate::signature::{Algorithm, sign};

/// Starts the worker of subscriber `id` unless one runs or its queue is empty. Called with
/// the state locked, so a worker that finds its queue empty (and stops, under the same lock)
/// cannot miss a message queued meanwhile.
pub(crate) fn ensure_worker(inner: &Arc<Inner>, st: &mut State, id: &str) {
    if let Some(sub) = st.subs.get_mut(id)
        && !sub.worker
        && !sub.queue.is_empty()
    {
        sub.worker = true;
        tokio::spawn(worker(inner.clone(), id.to_owned()));
    }
}

/// The delay before retry number `failures` (1 = after the first failure): `min · 2^(n−1)`,
/// capped at `max`, times a random factor in [0.5, 1] (so subscribers that failed together
/// do not retry together), never below `min`.
pub(crate) fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    let base = min.saturating_mul(1u32 << exp).min(max);
    base.mul_f64(0.5 + 0.5 * fastrand::f64()).clamp(min, max)
}

enum Next {
    Expired,
    Send(Queued, SubscriptionRecord),
}

enum Outcome {
    Delivered,
    /// The body is gone from the store: nothing can ever be sent.
    Lost,
    Failed(String),
}

async fn worker(inner: Arc<Inner>, id: String) {
    let mut failures: u32 = 0;
    loop {
        if inner.cancel.is_cancelled() {
            return;
        }
        let now = unix_now();
        let next = {
            let mut st = inner.lock();
            let Some(sub) = st.subs.get_mut(&id) else {
                return;
            };
            if sub.record.expires_at <= now {
                Next::Expired
            } else if let Some(q) = sub.queue.front() {
                sub.in_flight = Some(q.seq);
                Next::Send(q.clone(), sub.record.clone())
            } else {
                sub.worker = false;
                sub.in_flight = None;
                return;
            }
        };
        let (item, record) = match next {
            Next::Expired => {
                remove_subscription(&inner, &id, "lease expired").await;
                return;
            }
            Next::Send(item, record) => (item, record),
        };
        let outcome = tokio::select! {
            () = inner.cancel.cancelled() => return,
            o = attempt(&inner, &record, &item) => o,
        };
        match outcome {
            Outcome::Delivered => {
                failures = 0;
                inner.delivered.fetch_add(1, Ordering::Relaxed);
                complete(&inner, &id, &item).await;
            }
            Outcome::Lost => {
                inner.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::error!(subscriber = %id, seq = item.seq, "message body missing from the store; dropped");
                complete(&inner, &id, &item).await;
            }
            Outcome::Failed(why) => {
                failures = failures.saturating_add(1);
                inner.failed_attempts.fetch_add(1, Ordering::Relaxed);
                let delay = backoff(failures, inner.config.retry_min, inner.config.retry_max);
                tracing::warn!(
                    callback = %record.callback, seq = item.seq, failures, error = %why,
                    retry_in = ?delay, "delivery failed"
                );
                tokio::select! {
                    () = inner.cancel.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// One POST of `item` to the callback with `Content-Type`, `Link` rel `self`/`hub` and,
/// when the subscriber gave a secret, `X-Hub-Signature: sha256=…` (WebSub 7.1).
///
/// Through the address guard, like the verification before it: the callback was judged
/// then, but a name may resolve elsewhere now (DNS rebinding), and a subscription stored
/// while private callbacks were allowed may be restored by a hub that refuses them. A
/// refused delivery is a failed attempt (nothing is sent; retried with the backoff until
/// the lease ends, the queue bounded as ever).
async fn attempt(inner: &Inner, record: &SubscriptionRecord, item: &Queued) -> Outcome {
    let callback = match Url::parse(&record.callback) {
        Ok(u) => u,
        Err(e) => return Outcome::Failed(format!("callback `{}`: {e}", record.callback)),
    };
    if let Err(e) = crate::check_target(&callback, inner.config.allow_private_callbacks) {
        return Outcome::Failed(inner.count_refused(e).to_string());
    }
    let path = Path::from(payload_path(&item.payload));
    let body = match inner.objects.get(&path).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => b,
            Err(e) => return Outcome::Failed(format!("reading the payload: {e}")),
        },
        Err(object_store::Error::NotFound { .. }) => return Outcome::Lost,
        Err(e) => return Outcome::Failed(format!("reading the payload: {e}")),
    };
    let mut request = inner
        .client
        .post(callback)
        .header(CONTENT_TYPE, &item.content_type)
        .header(
            LINK,
            link::format(&item.topic, inner.config.public_url.as_str()),
        );
    if let Some(secret) = &record.secret {
        request = request.header(
            "X-Hub-Signature",
            sign(Algorithm::Sha256, secret.as_bytes(), &body),
        );
    }
    let Ok(_permit) = inner.outbound.acquire().await else {
        return Outcome::Failed("hub shutting down".into());
    };
    match request.body(body).send().await {
        Ok(r) if r.status().is_success() => Outcome::Delivered,
        Ok(r) => Outcome::Failed(format!("HTTP {}", r.status())),
        Err(e) => Outcome::Failed(
            inner
                .count_refused(crate::request_error(&record.callback, &e))
                .to_string(),
        ),
    }
}

/// `item` is done: take it off the queue (unless the subscription went meanwhile, which
/// already cleaned up), delete its record, release its payload.
async fn complete(inner: &Arc<Inner>, id: &str, item: &Queued) {
    let popped = {
        let mut st = inner.lock();
        match st.subs.get_mut(id) {
            Some(sub) if sub.queue.front().map(|q| q.seq) == Some(item.seq) => {
                sub.queue.pop_front();
                sub.in_flight = None;
                true
            }
            _ => false,
        }
    };
    if popped {
        delete_quietly(inner, &queue_path(id, item.seq)).await;
        release_payload(inner, &item.payload).await;
    }
}

/// Removes expired subscriptions every [`crate::HubConfig::sweep_interval`] (or the lease
/// minimum when shorter), so an expired subscriber with nothing queued is dropped too.
pub(crate) async fn sweeper(inner: Arc<Inner>) {
    let every = inner
        .config
        .sweep_interval
        .min(inner.config.lease_min)
        .max(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = inner.cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let now = unix_now();
        let expired: Vec<String> = inner
            .lock()
            .subs
            .iter()
            .filter(|(_, s)| s.record.expires_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            remove_subscription(&inner, &id, "lease expired").await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_within_bounds() {
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(600));
        for _ in 0..200 {
            let d1 = backoff(1, min, max);
            assert_eq!(
                d1, min,
                "first retry: the minimum (jitter never goes below it)"
            );
            let d3 = backoff(3, min, max);
            assert!(
                (Duration::from_secs(2)..=Duration::from_secs(4)).contains(&d3),
                "{d3:?}"
            );
            let big = backoff(40, min, max);
            assert!((Duration::from_secs(300)..=max).contains(&big), "{big:?}");
        }
    }
}
