//! What the hub keeps in the object store, and where.
//!
//! Subscriptions are keyed by topic and callback together (WebSub 5.1: a subscription is the
//! pair, a new request for the same pair renews it). Queue entries carry a zero-padded
//! sequence number so a listing in key order is delivery order.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::signature::hex;

pub(crate) const SUBSCRIPTIONS: &str = "hub/subscriptions/";
pub(crate) const QUEUE: &str = "hub/queue/";
pub(crate) const PAYLOADS: &str = "hub/payloads/";

/// The id of the subscription of `callback` to `topic`: lower-case hex sha256 of
/// `topic`, a newline and `callback` (the name of its objects in the store).
pub fn subscription_id(topic: &str, callback: &str) -> String {
    let mut h = Sha256::new();
    h.update(topic.as_bytes());
    h.update(b"\n");
    h.update(callback.as_bytes());
    hex(&h.finalize())
}

/// A verified subscription (`hub/subscriptions/<id>.json`).
///
/// The secret is kept because every delivery is signed with it (WebSub 7.1); whoever can read
/// the store can read the secrets, so the store must be as private as the hub.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SubscriptionRecord {
    pub topic: String,
    pub callback: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub lease_seconds: u64,
    /// Unix seconds after which nothing more is delivered.
    pub expires_at: i64,
    /// Unix seconds of the last successful verification of intent.
    pub verified_at: i64,
}

/// A message waiting for one subscriber (`hub/queue/<id>/<seq:020>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct QueueRecord {
    pub seq: u64,
    pub topic: String,
    pub content_type: String,
    /// Name of the body under `hub/payloads/`.
    pub payload: String,
    /// Unix seconds when it was queued.
    pub queued_at: i64,
}

pub(crate) fn subscription_path(id: &str) -> String {
    format!("{SUBSCRIPTIONS}{id}.json")
}

pub(crate) fn queue_path(id: &str, seq: u64) -> String {
    format!("{QUEUE}{id}/{seq:020}.json")
}

pub(crate) fn payload_path(message: &str) -> String {
    format!("{PAYLOADS}{message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths_are_stable_and_ordered() {
        let a = subscription_id("http://t/", "http://c/");
        assert_eq!(a.len(), 64);
        assert_eq!(a, subscription_id("http://t/", "http://c/"));
        assert_ne!(a, subscription_id("http://t/\nhttp://c/", ""));
        assert_ne!(a, subscription_id("http://c/", "http://t/"));
        assert!(queue_path(&a, 9) < queue_path(&a, 10));
        assert!(queue_path("x", 0).ends_with("/00000000000000000000.json"));
    }
}
