//! How far a run is: resources done, resources known to be listed, bytes received, and
//! whether some list is still being read (so the total may still grow). The harvest counts;
//! whoever displays progress (`rsagg run`'s progress line and heartbeat) reads a
//! [`Snapshot`] whenever it likes. Relaxed atomics: the figures are for people, not for
//! decisions.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every upstream of a run (or of a follower's whole life).
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    listed: AtomicU64,
    bytes: AtomicU64,
    reading: AtomicU64,
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Resources processed (stored, unchanged, deleted, quarantined, gone, failed).
    pub done: u64,
    /// Resources to process as far as known: entries read from Resource Lists and changes to
    /// apply from Change Lists and notifications (never below `done`).
    pub total: u64,
    /// No list is being read at the moment, so `total` is what is known of the work in
    /// hand; `false` while a Resource List (or its index's parts) is still streaming in.
    pub total_final: bool,
    /// Bytes of resource bodies received.
    pub bytes: u64,
}

impl Progress {
    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let done = self.done.load(Ordering::Relaxed);
        Snapshot {
            done,
            total: self.listed.load(Ordering::Relaxed).max(done),
            total_final: self.reading.load(Ordering::Relaxed) == 0,
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// One resource processed.
    pub(crate) fn done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more resources to process.
    pub(crate) fn listed(&self, n: u64) {
        self.listed.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes of a resource body received.
    pub(crate) fn bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// A list is being read until the guard is dropped (whichever way its reading ends).
    pub(crate) fn reading(&self) -> Reading<'_> {
        self.reading.fetch_add(1, Ordering::Relaxed);
        Reading(self)
    }
}

/// See [`Progress::reading`].
pub(crate) struct Reading<'a>(&'a Progress);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_is_final_only_when_no_list_is_read_and_never_below_done() {
        let p = Progress::default();
        let r = p.reading();
        p.listed(3);
        p.done();
        p.bytes(10);
        assert_eq!(
            p.snapshot(),
            Snapshot {
                done: 1,
                total: 3,
                total_final: false,
                bytes: 10
            }
        );
        drop(r);
        assert!(p.snapshot().total_final);
        // Deletions found by a re-sync are done without having been listed.
        for _ in 0..4 {
            p.done();
        }
        assert_eq!(p.snapshot().total, 5);
    }
}
