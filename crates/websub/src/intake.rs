//! What a WebSub callback hands a delivery to (CN 1.0.1 4.2, 4.3; WebSub 5.3, 7).
//!
//! The HTTP side (`rsagg-server`'s callbacks) knows nothing of the harvest, and the harvest
//! (`rsagg-harvest`'s push inbox) knows nothing of HTTP: both meet at [`PushIntake`], which
//! the inbox implements and the callback router calls.

use crate::subscriber::{Answer, Delivery};

/// Largest payload accepted at a callback, in bytes (a change notification is a Change
/// List fragment: 50,000 entries fit well under it).
pub const MAX_PAYLOAD_BYTES: usize = 10 << 20;

/// What the callback answers a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Intake {
    /// Queued for the follower (2xx).
    Queued,
    /// Dropped (2xx all the same, WebSub 7.1): why.
    Dropped(String),
    /// The queue is full (503: the hub retries).
    Busy,
    /// No such callback (404).
    NoCallback,
}

/// What a callback needs from whoever follows the upstreams.
pub trait PushIntake: Send + Sync + 'static {
    /// Whether `upstream` has a callback.
    fn has_callback(&self, upstream: &str) -> bool;
    /// Answers a verification of intent (`query`: the raw query string); `None` when it is
    /// not one or there is no such callback.
    fn verify(&self, upstream: &str, query: &str) -> Option<Answer>;
    /// Takes a delivery (authenticates and queues it, never waits for the harvest).
    fn deliver(&self, upstream: &str, delivery: Delivery) -> Intake;
}
