//! Which resources a baseline or re-sync has seen listed, in memory bounded by a setting
//! whatever the size of the collection.
//!
//! A baseline stores a URI listed twice once (two concurrent stores of one resource would
//! both see it as new), and a re-sync deletes, after the list, the records it did not list
//! (spec 10.1, 12.1). Both need the set of URIs listed so far. Held as a set in memory, it
//! grew by 32–48 bytes per resource (about 400 MiB at 10^7 resources); here it is:
//!
//! - a buffer in memory of at most `[store] listed_memory_bytes` (about 40 bytes a URI: the
//!   set and, while it is written out, its sorted copy);
//! - sorted runs of 16-byte keys on local disk (the system's temporary directory, `TMPDIR`)
//!   written each time the buffer is full, merged into one when there are more than
//!   [`MAX_RUNS`] (one sequential read and write of what was listed so far);
//! - a Bloom filter of `[store] listed_filter_bytes` over the keys on disk: a URI not seen
//!   before is answered from memory, except for the filter's false positives (under 1% up
//!   to about 5·10^6 URIs with the default 8 MiB, 5% at 10^7; 3 probes), which cost a
//!   binary search of each run (`pread`s of 16 bytes, from the page cache).
//!
//! The key of a resource ([`key`]) begins with its hash slot (`rsagg_store::slot_of`), so the
//! keys come out of [`Seen::into_sorted`] in the order of the state's slot index
//! (`State::present_in_slots`): [`Seen::unlisted`] finds the present records that were not
//! listed in one pass over both, holding one slot's keys (1/65,536 of those listed) at a
//! time. Exact: the remaining 112 bits are the URI's SHA-256 (a collision of two URIs of one
//! upstream within one slot is not a practical concern).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use rsagg_config::StoreConfig;
use rsagg_store::{ResourceRecord, State, slot_of};

use crate::Error;

/// Sorted runs on disk at most before they are merged into one.
pub(crate) const MAX_RUNS: usize = 8;

/// Bytes of memory one buffered key takes, counted for `listed_memory_bytes`: the set's
/// entry with its share of empty buckets and control bytes (~20) and the sorted copy made
/// when the buffer is written out (16).
const BYTES_PER_KEY: u64 = 40;

/// Probes of the Bloom filter per key.
const PROBES: u64 = 3;

/// The memory bounds of a [`Seen`] (the pipeline's `[store] listed_memory_bytes` and
/// `listed_filter_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenLimits {
    /// Bytes for the keys buffered in memory.
    pub memory_bytes: u64,
    /// Bytes for the Bloom filter over the keys on disk.
    pub filter_bytes: u64,
}

impl Default for SeenLimits {
    /// Those of a `[store]` that sets none of its memory bounds.
    fn default() -> Self {
        let b = StoreConfig::default_budgets();
        SeenLimits {
            memory_bytes: b.listed_memory_bytes,
            filter_bytes: b.listed_filter_bytes,
        }
    }
}

impl SeenLimits {
    /// The bounds a pipeline's `[store]` sets.
    pub fn of(store: &StoreConfig) -> SeenLimits {
        let b = store.budgets();
        SeenLimits {
            memory_bytes: b.listed_memory_bytes,
            filter_bytes: b.listed_filter_bytes,
        }
    }

    /// Keys buffered in memory before a run is written (at least 1,024).
    fn buffered(&self) -> usize {
        usize::try_from(self.memory_bytes / BYTES_PER_KEY)
            .unwrap_or(usize::MAX)
            .max(1024)
    }
}

/// The key of `uri` of `upstream`: its hash slot in the top 16 bits, then 112 bits of the
/// SHA-256 of the upstream and the URI (as listed, trimmed: one record per distinct URI, as
/// the state keys them; the upstream in it, so that an audit of several upstreams tells
/// their URIs apart).
pub(crate) fn key(upstream: &str, uri: &str) -> u128 {
    use sha2::Digest as _;
    let uri = uri.trim();
    let mut h = sha2::Sha256::new();
    h.update(upstream.as_bytes());
    h.update(b"\n");
    h.update(uri.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    (u128::from(slot_of(upstream, uri)) << 112) | (u128::from_le_bytes(b) & ((1u128 << 112) - 1))
}

pub(crate) fn slot_of_key(k: u128) -> u16 {
    u16::try_from(k >> 112).unwrap_or(u16::MAX)
}

/// A sorted run of keys on disk (16 bytes each, big-endian).
struct Run {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Run {
    /// Whether the run holds `k` (binary search, one 16-byte read per step).
    fn contains(&self, k: u128) -> Result<bool, Error> {
        let (mut lo, mut hi) = (0u64, self.len);
        let mut b = [0u8; 16];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.file
                .read_exact_at(&mut b, mid * 16)
                .map_err(io("reading a run of listed URIs"))?;
            match u128::from_be_bytes(b).cmp(&k) {
                std::cmp::Ordering::Equal => return Ok(true),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        Ok(false)
    }

    fn reader(&self) -> Result<RunReader, Error> {
        let f = File::open(&self.path).map_err(io("opening a run of listed URIs"))?;
        Ok(RunReader {
            r: BufReader::with_capacity(64 * 1024, f),
            left: self.len,
        })
    }
}

/// Reads a run in order.
struct RunReader {
    r: BufReader<File>,
    left: u64,
}

impl RunReader {
    fn next(&mut self) -> Result<Option<u128>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut b = [0u8; 16];
        self.r
            .read_exact(&mut b)
            .map_err(io("reading a run of listed URIs"))?;
        self.left -= 1;
        Ok(Some(u128::from_be_bytes(b)))
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

/// A Bloom filter of a fixed size over 128-bit keys that are already hashes.
struct Filter {
    bits: Vec<u64>,
}

impl Filter {
    fn new(bytes: u64) -> Filter {
        let words = usize::try_from(bytes / 8).unwrap_or(usize::MAX).max(1);
        Filter {
            bits: vec![0; words],
        }
    }

    fn positions(&self, k: u128) -> impl Iterator<Item = (usize, u64)> + '_ {
        let m = self.bits.len() as u64 * 64;
        // The slot bits are left out: the two halves of the 112 bits of the URI's hash.
        let h1 = k as u64;
        let h2 = ((k >> 64) as u64 & 0xffff_ffff_ffff) | 1;
        (0..PROBES).map(move |i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) % m;
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    fn insert(&mut self, k: u128) {
        let ps: Vec<_> = self.positions(k).collect();
        for (w, b) in ps {
            self.bits[w] |= b;
        }
    }

    fn may_contain(&self, k: u128) -> bool {
        self.positions(k).all(|(w, b)| self.bits[w] & b != 0)
    }
}

/// The set of keys seen (see the module documentation).
pub(crate) struct Seen {
    limits: SeenLimits,
    buffer: HashSet<u128>,
    /// Created at the first run written.
    dir: Option<tempfile::TempDir>,
    runs: Vec<Run>,
    /// Created at the first run written too (a small baseline never allocates it).
    filter: Option<Filter>,
    next_run: u64,
    /// Distinct keys inserted.
    len: u64,
}

impl Seen {
    pub(crate) fn new(limits: SeenLimits) -> Seen {
        Seen {
            limits,
            buffer: HashSet::new(),
            dir: None,
            runs: Vec::new(),
            filter: None,
            next_run: 0,
            len: 0,
        }
    }

    /// Distinct keys inserted.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Sorted runs on disk now (for tests).
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Adds `k`; true when it was not there yet.
    pub(crate) fn insert(&mut self, k: u128) -> Result<bool, Error> {
        if self.contains(k)? {
            return Ok(false);
        }
        self.buffer.insert(k);
        self.len += 1;
        if self.buffer.len() >= self.limits.buffered() {
            self.spill()?;
        }
        Ok(true)
    }

    /// Whether `k` was inserted.
    pub(crate) fn contains(&self, k: u128) -> Result<bool, Error> {
        if self.buffer.contains(&k) {
            return Ok(true);
        }
        if self.filter.as_ref().is_some_and(|f| f.may_contain(k)) {
            for r in &self.runs {
                if r.contains(k)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn new_run_path(&mut self) -> Result<PathBuf, Error> {
        if self.dir.is_none() {
            self.dir = Some(
                tempfile::Builder::new()
                    .prefix("rsagg-listed-")
                    .tempdir()
                    .map_err(io("creating a temporary directory"))?,
            );
        }
        self.next_run += 1;
        let dir = self.dir.as_ref().map(|d| d.path().to_owned());
        Ok(dir
            .unwrap_or_default()
            .join(format!("{:06}", self.next_run)))
    }

    /// Writes `keys` (sorted) as a run.
    fn write_run(&mut self, keys: impl Iterator<Item = Result<u128, Error>>) -> Result<(), Error> {
        let path = self.new_run_path()?;
        // Read back too (`Run::contains`): opened for both.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io("creating a run of listed URIs"))?;
        let mut w = BufWriter::with_capacity(64 * 1024, f);
        let mut len = 0u64;
        for k in keys {
            w.write_all(&k?.to_be_bytes())
                .map_err(io("writing a run of listed URIs"))?;
            len += 1;
        }
        let file = w.into_inner().map_err(|e| Error::Io {
            what: "writing a run of listed URIs".into(),
            source: e.into_error(),
        })?;
        self.runs.push(Run { path, file, len });
        Ok(())
    }

    /// The buffer written out as a sorted run (and into the filter); runs merged when
    /// there are too many.
    fn spill(&mut self) -> Result<(), Error> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let filter = self
            .filter
            .get_or_insert_with(|| Filter::new(self.limits.filter_bytes));
        let mut keys: Vec<u128> = self.buffer.drain().collect();
        for &k in &keys {
            filter.insert(k);
        }
        keys.sort_unstable();
        self.write_run(keys.into_iter().map(Ok))?;
        if self.runs.len() > MAX_RUNS {
            let runs = std::mem::take(&mut self.runs);
            let merged = Merge::new(&runs, Vec::new())?;
            self.write_run(merged)?;
            for r in runs {
                std::fs::remove_file(&r.path).ok();
            }
        }
        Ok(())
    }

    /// Every key, in ascending order (slot first), read from the runs and what is still
    /// buffered (sorted in memory).
    pub(crate) fn into_sorted(mut self) -> Result<Sorted, Error> {
        let mut rest: Vec<u128> = self.buffer.drain().collect();
        rest.sort_unstable();
        let merge = Merge::new(&self.runs, rest)?;
        Ok(Sorted {
            merge,
            peeked: None,
            _dir: self.dir.take(),
        })
    }

    /// The record of every present resource of `upstream` in the state whose key was not
    /// inserted, one by one ([`Unlisted::next`]): one pass over the state's slot index
    /// beside the sorted keys, one slot's keys held at a time.
    pub(crate) async fn unlisted<'a>(
        self,
        state: &'a State,
        upstream: &str,
    ) -> Result<Unlisted<'a>, Error> {
        Ok(Unlisted {
            sorted: self.into_sorted()?,
            members: state.present_in_slots(0..=u16::MAX).await?,
            state,
            upstream: upstream.to_owned(),
            slot: None,
            keys: Vec::new(),
        })
    }
}

/// The present records a [`Seen`] did not list (see [`Seen::unlisted`]).
pub(crate) struct Unlisted<'a> {
    sorted: Sorted,
    members: rsagg_store::SlotMembers,
    state: &'a State,
    upstream: String,
    slot: Option<u16>,
    keys: Vec<u128>,
}

impl Unlisted<'_> {
    /// The next unlisted record: the one the slot index holds, else looked up (keys written
    /// before the index held records).
    pub(crate) async fn next(&mut self) -> Result<Option<ResourceRecord>, Error> {
        while let Some((s, up, uri, held)) = self.members.next_with_record().await? {
            if up != self.upstream {
                continue;
            }
            if self.slot != Some(s) {
                self.keys.clear();
                self.sorted.slot(s, &mut self.keys)?;
                self.slot = Some(s);
            }
            if self.keys.binary_search(&key(&up, &uri)).is_ok() {
                continue;
            }
            let record = match held {
                Some(r) => Some(r),
                None => self.state.resource(&up, &uri).await?,
            };
            if let Some(r) = record {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

/// A k-way merge of sorted runs and a sorted vector.
struct Merge {
    readers: Vec<RunReader>,
    heads: Vec<Option<u128>>,
    rest: std::vec::IntoIter<u128>,
    rest_head: Option<u128>,
}

impl Merge {
    fn new(runs: &[Run], rest: Vec<u128>) -> Result<Merge, Error> {
        let mut readers = Vec::with_capacity(runs.len());
        let mut heads = Vec::with_capacity(runs.len());
        for r in runs {
            let mut reader = r.reader()?;
            heads.push(reader.next()?);
            readers.push(reader);
        }
        let mut rest = rest.into_iter();
        let rest_head = rest.next();
        Ok(Merge {
            readers,
            heads,
            rest,
            rest_head,
        })
    }

    /// The smallest head (at most [`MAX_RUNS`] + 1 runs: a linear pick is enough).
    fn pop(&mut self) -> Result<Option<u128>, Error> {
        let mut best: Option<(usize, u128)> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if let Some(k) = *h
                && best.is_none_or(|(_, b)| k < b)
            {
                best = Some((i, k));
            }
        }
        match (best, self.rest_head) {
            (Some((_, k)), Some(r)) if r < k => {
                self.rest_head = self.rest.next();
                Ok(Some(r))
            }
            (Some((i, k)), _) => {
                self.heads[i] = self.readers[i].next()?;
                Ok(Some(k))
            }
            (None, Some(r)) => {
                self.rest_head = self.rest.next();
                Ok(Some(r))
            }
            (None, None) => Ok(None),
        }
    }
}

impl Iterator for Merge {
    type Item = Result<u128, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.pop().transpose()
    }
}

/// The keys of a [`Seen`] in order, slot by slot.
pub(crate) struct Sorted {
    merge: Merge,
    peeked: Option<u128>,
    /// The runs' directory, removed when the pass is over.
    _dir: Option<tempfile::TempDir>,
}

impl Sorted {
    fn peek(&mut self) -> Result<Option<u128>, Error> {
        if self.peeked.is_none() {
            self.peeked = self.merge.pop()?;
        }
        Ok(self.peeked)
    }

    /// The keys of slot `s` into `out`, skipping those of earlier slots (slots are asked
    /// for in ascending order).
    pub(crate) fn slot(&mut self, s: u16, out: &mut Vec<u128>) -> Result<(), Error> {
        while let Some(k) = self.peek()? {
            match slot_of_key(k).cmp(&s) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => out.push(k),
                std::cmp::Ordering::Greater => break,
            }
            self.peeked = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SeenLimits {
        // 1,024 keys buffered (the least), a 4 KiB filter.
        SeenLimits {
            memory_bytes: 0,
            filter_bytes: 4096,
        }
    }

    #[test]
    fn a_large_listing_spills_to_disk_and_stays_exact() {
        let mut seen = Seen::new(small());
        let n = 20_000u64;
        for i in 0..n {
            let k = key("up", &format!("http://e.org/{i}"));
            assert!(seen.insert(k).unwrap(), "{i} is new");
        }
        // Memory: never more than the buffer's keys; the rest went to disk, in runs merged
        // before they pass MAX_RUNS.
        assert!(seen.buffer.len() < 1024);
        assert!((1..=MAX_RUNS).contains(&seen.runs()), "{}", seen.runs());
        // Every URI listed again (from the runs on disk and from the buffer) is a
        // duplicate; a URI never listed is not.
        for i in (0..n).step_by(7) {
            let k = key("up", &format!(" http://e.org/{i} "));
            assert!(!seen.insert(k).unwrap(), "{i} listed twice");
        }
        for i in n..n + 2_000 {
            assert!(
                !seen
                    .contains(key("up", &format!("http://e.org/{i}")))
                    .unwrap()
            );
        }
        assert_eq!(seen.len(), n);
        // Sorted, slot first, every key once.
        let mut sorted = seen.into_sorted().unwrap();
        let mut all = Vec::new();
        for s in 0..=u16::MAX {
            let before = all.len();
            sorted.slot(s, &mut all).unwrap();
            assert!(all[before..].iter().all(|k| slot_of_key(*k) == s));
        }
        assert_eq!(all.len() as u64, n);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_buffer_follows_the_memory_setting() {
        let limits = SeenLimits {
            memory_bytes: 1024 * 1024,
            filter_bytes: 1024,
        };
        let mut seen = Seen::new(limits);
        for i in 0..100_000u64 {
            seen.insert(key("up", &format!("http://e.org/{i}")))
                .unwrap();
            assert!(seen.buffer.len() as u64 * BYTES_PER_KEY <= 1024 * 1024);
        }
        assert!(seen.runs() >= 1);
    }

    #[test]
    fn the_key_begins_with_the_slot() {
        let k = key("up", "http://e.org/a");
        assert_eq!(slot_of_key(k), slot_of("up", "http://e.org/a"));
        assert_eq!(k, key("up", " http://e.org/a"));
        assert_ne!(k, key("up", "http://e.org/b"));
        assert_ne!(k, key("other", "http://e.org/a"));
    }
}
