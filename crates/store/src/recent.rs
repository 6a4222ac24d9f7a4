//! [`RecentBlobs`]: the bodies of small blobs this process stored lately, kept in memory by
//! address so that work right after a harvest does not read them back from the store.
//!
//! A Resource Dump is rebuilt from every copy and a Change Dump from every changed one; right
//! after a baseline or a pass that is mostly what was just harvested. On S3 reading 10,000
//! small blobs back costs about what storing them did (one GET each), so a first run paid for
//! its collection twice. Blobs are content-addressed: a body kept under its SHA-256 can never
//! be stale, so the only policy questions are what to keep and how much, and both are bounded
//! here ([`MAX_BODY`], the capacity in bytes). What is not kept (large bodies, evicted ones) is
//! read from the store as before.

use std::sync::Arc;

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// Bodies larger than this are not kept: a dump streams them from the store anyway, and a few
/// would crowd out thousands of small ones.
pub const MAX_BODY: usize = 256 * 1024;
/// Bytes one entry costs beyond its body (key, bookkeeping), so that the capacity bounds the
/// memory of many tiny bodies too.
const OVERHEAD: u64 = 128;

#[derive(Clone)]
struct ByLength;

impl Weighter<String, Bytes> for ByLength {
    fn weight(&self, _: &String, body: &Bytes) -> u64 {
        body.len() as u64 + OVERHEAD
    }
}

/// Bodies of small blobs this process stored, by SHA-256 (lowercase hex), up to a capacity in
/// bytes. Cloning shares the same memory. [`RecentBlobs::none`] keeps nothing.
///
/// Only [`crate::Blobs::put_stream`] adds to it, after the store accepted the blob, with the
/// bytes it hashed to that address; so whatever [`RecentBlobs::get`] returns is exactly the
/// blob's bitstream, and needs no verification of its own.
#[derive(Clone, Default)]
pub struct RecentBlobs(Option<Arc<Cache<String, Bytes, ByLength>>>);

impl std::fmt::Debug for RecentBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("RecentBlobs(none)"),
            Some(c) => f
                .debug_struct("RecentBlobs")
                .field("entries", &c.len())
                .field("bytes", &c.weight())
                .field("capacity", &c.capacity())
                .finish(),
        }
    }
}

impl RecentBlobs {
    /// The capacity a pipeline gets unless its `[store] recent_blob_bytes` says otherwise:
    /// 24 MiB (its share of the default `[store] memory_bytes`), some 19,000 bodies of 1 KiB.
    pub const DEFAULT_CAPACITY: u64 = 24 * 1024 * 1024;

    /// Keeps nothing.
    pub fn none() -> Self {
        RecentBlobs(None)
    }

    /// Keeps up to `capacity` bytes of bodies (0: nothing).
    pub fn with_capacity(capacity: u64) -> Self {
        if capacity == 0 {
            return Self::none();
        }
        // The estimate sizes the index; 1 KiB is a typical small record or metadata file.
        let items = (capacity / 1024).clamp(16, 1 << 20) as usize;
        RecentBlobs(Some(Arc::new(Cache::with_weighter(
            items, capacity, ByLength,
        ))))
    }

    /// True when it keeps nothing ([`RecentBlobs::none`]).
    pub fn is_off(&self) -> bool {
        self.0.is_none()
    }

    /// Keeps `body` as the blob `sha256`, when it is small enough and the capacity is not 0.
    /// The caller vouches that `body` hashes to `sha256`.
    pub(crate) fn insert(&self, sha256: &str, body: Bytes) {
        if let Some(cache) = &self.0
            && body.len() <= MAX_BODY
        {
            cache.insert(sha256.to_owned(), body);
        }
    }

    /// The body of blob `sha256`, when it is kept.
    pub fn get(&self, sha256: &str) -> Option<Bytes> {
        self.0.as_ref()?.get(sha256)
    }

    /// Bodies kept now.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |c| c.len())
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_small_bodies_within_its_capacity() {
        let recent = RecentBlobs::with_capacity(64 * 1024);
        recent.insert("a", Bytes::from_static(b"alpha"));
        assert_eq!(recent.get("a").as_deref(), Some(&b"alpha"[..]));
        assert_eq!(recent.get("b"), None);
        // Larger than a body may be: not kept.
        recent.insert("big", Bytes::from(vec![0u8; MAX_BODY + 1]));
        assert_eq!(recent.get("big"), None);
        // Far more than the capacity: what is kept stays within it.
        for i in 0..200 {
            recent.insert(&format!("k{i}"), Bytes::from(vec![1u8; 1024]));
        }
        let kept = (0..200)
            .filter(|i| recent.get(&format!("k{i}")).is_some())
            .count();
        assert!(kept > 0 && kept < 64, "{kept} of 200 kept");
    }

    #[test]
    fn none_keeps_nothing() {
        for recent in [RecentBlobs::none(), RecentBlobs::with_capacity(0)] {
            recent.insert("a", Bytes::from_static(b"alpha"));
            assert_eq!(recent.get("a"), None);
            assert!(recent.is_empty());
        }
    }
}
