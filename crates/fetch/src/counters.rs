//! [`FetchCounts`]: what the [`crate::Fetcher`] sent and received since it was built —
//! requests by outcome (each attempt counts, retries included), retries, body bytes read and
//! the time each attempt took to the response head, in fixed histogram buckets.
//!
//! The counters are atomics in the fetcher (an attempt costs a few relaxed additions);
//! [`crate::Fetcher::counts`] takes a snapshot, and [`FetchCounts::since`] the difference
//! between two, so a long-lived process (`run --follow`) reports each pass on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the buckets of [`FetchCounts::duration_buckets`]; one more
/// bucket counts what is slower than the last bound.
pub const DURATION_BOUNDS: [f64; 10] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// How one attempt ended, as the `outcome` of its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// 2xx.
    Ok,
    /// 304 Not Modified (conditional GET).
    NotModified,
    /// Another 3xx (the redirect is followed as a new request).
    Redirect,
    /// 4xx.
    ClientError,
    /// 5xx.
    ServerError,
    /// No response: connection refused or reset, timeout, TLS or DNS failure.
    Transport,
}

/// Snapshot of a fetcher's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FetchCounts {
    /// Attempts answered 2xx.
    pub ok: u64,
    /// Attempts answered 304.
    pub not_modified: u64,
    /// Attempts answered with another 3xx.
    pub redirect: u64,
    /// Attempts answered 4xx.
    pub client_error: u64,
    /// Attempts answered 5xx.
    pub server_error: u64,
    /// Attempts without a response (transport errors and timeouts).
    pub transport_error: u64,
    /// Attempts that were retries of an earlier one.
    pub retries: u64,
    /// Response body bytes read (after inflation), counted when a body is dropped.
    pub bytes: u64,
    /// Attempts by time to the response head, per bucket of [`DURATION_BOUNDS`] (not
    /// cumulative; the last bucket: slower than the last bound).
    pub duration_buckets: [u64; DURATION_BOUNDS.len() + 1],
    /// Sum of those times, in seconds.
    pub duration_sum: f64,
}

impl FetchCounts {
    /// Attempts in all.
    pub fn requests(&self) -> u64 {
        self.ok
            + self.not_modified
            + self.redirect
            + self.client_error
            + self.server_error
            + self.transport_error
    }

    /// The requests by outcome, in a fixed order (metric label values).
    pub fn outcomes(&self) -> [(&'static str, u64); 6] {
        [
            ("ok", self.ok),
            ("not_modified", self.not_modified),
            ("redirect", self.redirect),
            ("client_error", self.client_error),
            ("server_error", self.server_error),
            ("transport_error", self.transport_error),
        ]
    }

    /// What happened between `earlier` and `self` (snapshots of the same fetcher).
    pub fn since(&self, earlier: &FetchCounts) -> FetchCounts {
        let mut buckets = self.duration_buckets;
        for (b, e) in buckets.iter_mut().zip(earlier.duration_buckets) {
            *b = b.saturating_sub(e);
        }
        FetchCounts {
            ok: self.ok.saturating_sub(earlier.ok),
            not_modified: self.not_modified.saturating_sub(earlier.not_modified),
            redirect: self.redirect.saturating_sub(earlier.redirect),
            client_error: self.client_error.saturating_sub(earlier.client_error),
            server_error: self.server_error.saturating_sub(earlier.server_error),
            transport_error: self.transport_error.saturating_sub(earlier.transport_error),
            retries: self.retries.saturating_sub(earlier.retries),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            duration_buckets: buckets,
            duration_sum: (self.duration_sum - earlier.duration_sum).max(0.0),
        }
    }
}

/// The live counters of a fetcher.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    outcomes: [AtomicU64; 6],
    retries: AtomicU64,
    /// Shared with the bodies in flight (added to when one is dropped).
    pub(crate) bytes: Arc<AtomicU64>,
    buckets: [AtomicU64; DURATION_BOUNDS.len() + 1],
    /// Microseconds.
    sum: AtomicU64,
}

impl Counters {
    /// Counts one attempt that ended with `outcome` after `took`; `attempt` is 1 for the
    /// first try of a request.
    pub(crate) fn attempt(&self, outcome: Outcome, took: Duration, attempt: u32) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
        if attempt > 1 {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        let secs = took.as_secs_f64();
        let i = DURATION_BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(DURATION_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn snapshot(&self) -> FetchCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let o = |x: Outcome| l(&self.outcomes[x as usize]);
        FetchCounts {
            ok: o(Outcome::Ok),
            not_modified: o(Outcome::NotModified),
            redirect: o(Outcome::Redirect),
            client_error: o(Outcome::ClientError),
            server_error: o(Outcome::ServerError),
            transport_error: o(Outcome::Transport),
            retries: l(&self.retries),
            bytes: l(&self.bytes),
            duration_buckets: std::array::from_fn(|i| l(&self.buckets[i])),
            duration_sum: l(&self.sum) as f64 / 1e6,
        }
    }
}

impl Outcome {
    /// The outcome of a response with `status`.
    pub(crate) fn of(status: u16) -> Outcome {
        match status {
            304 => Outcome::NotModified,
            300..=399 => Outcome::Redirect,
            400..=499 => Outcome::ClientError,
            500..=599 => Outcome::ServerError,
            _ => Outcome::Ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_counted_by_outcome_bucket_and_retry() {
        let c = Counters::default();
        c.attempt(Outcome::of(200), Duration::from_millis(3), 1);
        c.attempt(Outcome::of(503), Duration::from_millis(300), 1);
        c.attempt(Outcome::of(304), Duration::from_secs(40), 2);
        c.attempt(Outcome::Transport, Duration::from_millis(50), 3);
        c.bytes.fetch_add(10, Ordering::Relaxed);
        let s = c.snapshot();
        assert_eq!(
            (s.ok, s.server_error, s.not_modified, s.transport_error),
            (1, 1, 1, 1)
        );
        assert_eq!((s.requests(), s.retries, s.bytes), (4, 2, 10));
        // 3 ms ≤ 0.01; 50 ms ≤ 0.05 (bounds are inclusive); 300 ms ≤ 0.5; 40 s beyond 30.
        assert_eq!(s.duration_buckets[0], 1);
        assert_eq!(s.duration_buckets[1], 1);
        assert_eq!(s.duration_buckets[4], 1);
        assert_eq!(s.duration_buckets[DURATION_BOUNDS.len()], 1);
        assert!((s.duration_sum - 40.353).abs() < 1e-6, "{}", s.duration_sum);
        c.attempt(Outcome::of(404), Duration::from_millis(1), 1);
        let d = c.snapshot().since(&s);
        assert_eq!((d.client_error, d.requests(), d.retries), (1, 1, 0));
        assert_eq!(d.duration_buckets.iter().sum::<u64>(), 1);
    }
}
