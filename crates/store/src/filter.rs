//! The state's bloom filters hold only the keys rsagg looks up by key.
//!
//! A fresh process (every `run --once`) reads the filter of each table its lookups fall in,
//! and an incremental run's scattered changes fall in all of them, so the filters' size is
//! read by every run, whatever its changes (at 10^6 resources, with the indexes, ~3.5 of the
//! 7.9 MB an incremental run read on SeaweedFS). slatedb's bloom filter takes every key at 10
//! bits each, but two of the three keys a resource has are only ever scanned: its slot index
//! entry (`p/…`) and its change-log entries (`l/…`); only records (`r/…`), checkpoints
//! (`c/…`), quarantine records (`q/…`) and the log head (`m/log`) are looked up by key. Here
//! scanned-only keys stay out of the filter, and a query for one is always answered "may be
//! there" (so a lookup of such a key, were one ever made, reads the table as without a
//! filter; it is never answered wrongly).
//!
//! Tables written before keep slatedb's own filter: a policy's name is stored with its
//! filter and a table whose filter no configured policy names is read without one.

use std::sync::Arc;

use bytes::BufMut;
use slatedb::{
    BloomFilterPolicy, Filter, FilterBuilder, FilterPolicy, FilterQuery, FilterTarget, RowEntry,
};

/// Bits per filtered key (slatedb's default): ~1% false positives.
const BITS_PER_KEY: u32 = 10;

/// Key prefixes that are scanned, never looked up by key.
const SCANNED_ONLY: [&[u8]; 2] = [b"p/", b"l/"];

fn scanned_only(key: &[u8]) -> bool {
    SCANNED_ONLY.iter().any(|p| key.starts_with(p))
}

/// The filter policy of rsagg's state (see the module documentation).
pub(crate) struct LookedUpKeys {
    bloom: BloomFilterPolicy,
}

impl LookedUpKeys {
    pub(crate) fn new() -> Self {
        LookedUpKeys {
            bloom: BloomFilterPolicy::new(BITS_PER_KEY),
        }
    }

    /// The policies to give slatedb (its writer, its compactor and readers alike).
    pub(crate) fn policies() -> Vec<Arc<dyn FilterPolicy>> {
        vec![Arc::new(LookedUpKeys::new())]
    }
}

impl FilterPolicy for LookedUpKeys {
    fn name(&self) -> &str {
        // Stored with each filter: a filter without the scanned-only keys must never be
        // read as a filter of every key.
        "rsagg-looked-up-keys-bloom"
    }

    fn builder(&self) -> Box<dyn FilterBuilder> {
        Box::new(Builder(self.bloom.builder()))
    }

    fn decode(&self, data: &[u8]) -> Arc<dyn Filter> {
        Arc::new(Keys(self.bloom.decode(data)))
    }

    fn estimate_size(&self, num_keys: usize) -> usize {
        self.bloom.estimate_size(num_keys)
    }

    fn supports_prefix_queries(&self) -> bool {
        false
    }
}

struct Builder(Box<dyn FilterBuilder>);

impl FilterBuilder for Builder {
    fn add_entry(&mut self, entry: &RowEntry) {
        if !scanned_only(&entry.key) {
            self.0.add_entry(entry);
        }
    }

    fn build(&mut self) -> Arc<dyn Filter> {
        Arc::new(Keys(self.0.build()))
    }
}

/// A built or decoded filter of the looked-up keys.
struct Keys(Arc<dyn Filter>);

impl Filter for Keys {
    fn might_match(&self, query: &FilterQuery) -> bool {
        match &query.target {
            FilterTarget::Point(key) if !scanned_only(key) => self.0.might_match(query),
            _ => true,
        }
    }

    fn encode(&self, writer: &mut dyn BufMut) {
        self.0.encode(writer)
    }

    fn size(&self) -> usize {
        self.0.size()
    }

    fn clamp_allocated_size(&self) -> Arc<dyn Filter> {
        Arc::new(Keys(self.0.clamp_allocated_size()))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use slatedb::ValueDeletable;

    use super::*;

    fn entry(key: &str) -> RowEntry {
        RowEntry {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: ValueDeletable::Value(Bytes::from_static(b"{}")),
            seq: 1,
            create_ts: None,
            expire_ts: None,
        }
    }

    fn point(key: &str) -> FilterQuery {
        FilterQuery::point(Bytes::copy_from_slice(key.as_bytes()))
    }

    #[test]
    fn looked_up_keys_are_filtered_and_scanned_ones_always_may_be_there() {
        let policy = LookedUpKeys::new();
        let mut b = policy.builder();
        for i in 0..1000 {
            b.add_entry(&entry(&format!("r/up/http://x/{i}")));
            b.add_entry(&entry(&format!("p/00ab/up/http://x/{i}")));
            b.add_entry(&entry(&format!("l/{i:020}")));
        }
        b.add_entry(&entry("m/log"));
        let built = b.build();
        // Encoded and decoded as slatedb stores and reads it back.
        let mut bytes = Vec::new();
        built.encode(&mut bytes);
        let read = policy.decode(&bytes);
        for f in [&built, &read] {
            for i in 0..1000 {
                assert!(f.might_match(&point(&format!("r/up/http://x/{i}"))));
            }
            assert!(f.might_match(&point("m/log")));
            // Keys that were not added are mostly ruled out (10 bits per key: ~1% false
            // positives); scanned-only ones may always be there.
            let absent = (1000..2000)
                .filter(|i| f.might_match(&point(&format!("r/up/http://x/{i}"))))
                .count();
            assert!(absent < 50, "{absent} false positives of 1000");
            assert!(f.might_match(&point("p/ffff/up/http://never/")));
            assert!(f.might_match(&point("l/99999999999999999999")));
            assert!(f.might_match(&FilterQuery::prefix(Bytes::from_static(b"r/"))));
        }
        // Only the looked-up keys went in: a third of the size of a filter of every key.
        let mut all = BloomFilterPolicy::new(BITS_PER_KEY).builder();
        for i in 0..1000 {
            all.add_entry(&entry(&format!("r/up/http://x/{i}")));
            all.add_entry(&entry(&format!("p/00ab/up/http://x/{i}")));
            all.add_entry(&entry(&format!("l/{i:020}")));
        }
        assert!(built.size() * 2 < all.build().size());
    }
}
