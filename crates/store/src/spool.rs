//! [`Spool`]: the bodies a run stored in an object store, kept on local disk (bounded) so that
//! the Resource Dump built after a baseline reads none of them back from the store.
//!
//! [`crate::RecentBlobs`] keeps bodies in memory, 64 MiB by default: some 50,000 small ones.
//! A baseline of 10^6 resources on S3 outgrew it, and its first Resource Dump read ~714,000
//! bodies back, one GET each (at 10^8: 10^8 GETs, ~$40, per baseline). A `file://` store
//! is no exception: at 10^7 small bodies its blob files (a 4 KiB block each, 40 GB) outgrew
//! the page cache and the first dump read them back at ~2,700 files a second, an hour; the
//! spool's buckets are read sequentially, 16 MiB at a time. The spool keeps what
//! memory cannot: each body a harvest stores (up to 8 MiB, the bodies it holds in memory
//! anyway) is appended to a file of its own directory on local disk, up to
//! `[store] spool_bytes`.
//!
//! The dump reads the collection in slot order ([`crate::slot_of`]), so the spool is cut
//! along slots too: a body goes to the bucket of its resource's slot (a range of slots, sized
//! so that a bucket holds about [`BUCKET_BYTES`] when the spool is full), and the dump loads
//! one bucket at a time, whole, when its listing enters that bucket's slots ([`SpoolReader`]).
//! Nothing in memory grows with the collection: a bucket's bytes and index while it is read,
//! and the appends not yet written ([`PENDING_BYTES`] in all).
//!
//! Never trusted: every record is hashed when its bucket is loaded and kept only when its
//! bytes are the SHA-256 its header names, and the dump takes a body only when its length is
//! the record's; anything else (a full spool, a damaged file, a body spooled under another
//! slot) is read from the store as before. The spool lives in a directory of its own,
//! created at opening and removed when the last handle is dropped; a process that crashed
//! leaves its directory behind, and the next one to open a spool in the same place removes
//! it (a directory is in use while its `lock` file is locked). A crash loses the spool, never
//! the collection: the dump of the next run reads what it lacks from the store.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sha2::Digest;
use tokio::sync::{mpsc, oneshot};

/// Bytes a bucket holds when the spool is full, about: what the dump loads at once.
///
/// Each bucket is a file, created on its first append and removed after the dump, and every
/// append opens it: with buckets of 1 MiB a 1 GiB spool had 1,024 files, and a run of 10,000
/// bodies of 1 KB created and removed ~1,000 files and opened them ~2,500 times, which on an
/// ext4 `/tmp` where many files had just been deleted cost 1.3 s of CPU (the harvest
/// benchmark's run took 3.8 s of CPU against 2.4 s without a spool). 16 MiB buckets make it
/// 64 files and appends of 64 KiB, for 16 MiB more memory while the dump reads a bucket.
pub const BUCKET_BYTES: u64 = 16 << 20;
/// Bucket files at most (1 to 4,096, a power of two): beyond 64 GiB of spool, buckets grow.
const MAX_BUCKETS: u64 = 4096;
/// Appends held in memory before they are handed to the writer thread, over all buckets.
pub const PENDING_BYTES: usize = 4 << 20;
/// Appends handed to the writer thread and not yet written, at most.
const QUEUE: usize = 16;
/// A record's header: the body's SHA-256 (32 bytes) and its length (u32, little-endian).
const HEADER: usize = 36;
/// Prefix of a spool's directory name.
const DIR_PREFIX: &str = "rsagg-spool-";

/// What the writer thread is asked to do, in order.
enum Job {
    /// Append these records to bucket file `usize`.
    Append(usize, Vec<u8>),
    /// Every job sent before was done.
    Barrier(oneshot::Sender<()>),
    /// Remove every bucket file.
    Clear(oneshot::Sender<()>),
}

struct Inner {
    dir: tempfile::TempDir,
    /// Held (locked) while the spool is in use; see [`remove_stale`].
    _lock: File,
    capacity: u64,
    /// `slot >> shift` is a slot's bucket.
    shift: u32,
    /// Records appended (not necessarily written yet), in bytes.
    used: AtomicU64,
    /// Set once a body did not fit (warned once).
    full: AtomicBool,
    /// Set when the writer thread failed: nothing more is spooled.
    broken: Arc<AtomicBool>,
    /// Each bucket's records not yet handed to the writer thread.
    pending: Vec<Mutex<Vec<u8>>>,
    /// Bytes after which a bucket's pending records go to the writer thread.
    threshold: usize,
    tx: mpsc::Sender<Job>,
}

impl Inner {
    /// The bucket of slot `slot`.
    fn bucket(&self, slot: u16) -> usize {
        (u32::from(slot) >> self.shift) as usize
    }
}

/// The spool of one store location: cheap to clone (clones share it). [`Spool::none`] keeps
/// nothing.
#[derive(Clone, Default)]
pub struct Spool(Option<Arc<Inner>>);

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Spool(none)"),
            Some(i) => f
                .debug_struct("Spool")
                .field("dir", &i.dir.path())
                .field("used", &i.used.load(Ordering::Relaxed))
                .field("capacity", &i.capacity)
                .finish(),
        }
    }
}

impl Spool {
    /// What `[store] spool_bytes` is unless set: 1 GiB of local disk (a baseline of some
    /// 10^6 bodies of 1 KB, or 7·10^6 of 100 bytes, reads nothing back).
    pub const DEFAULT_CAPACITY: u64 = 1 << 30;

    /// Keeps nothing.
    pub fn none() -> Self {
        Spool(None)
    }

    /// A spool of up to `capacity` bytes in a new directory under `parent` (created when
    /// missing), removing the directories crashed processes left there; [`Spool::none`]
    /// when `capacity` is 0.
    pub fn open(parent: &Path, capacity: u64) -> io::Result<Spool> {
        if capacity == 0 {
            return Ok(Spool::none());
        }
        std::fs::create_dir_all(parent)?;
        remove_stale(parent);
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(parent)?;
        let lock = File::create(dir.path().join("lock"))?;
        lock.try_lock().map_err(io::Error::other)?;
        let buckets = (capacity / BUCKET_BYTES)
            .clamp(1, MAX_BUCKETS)
            .next_power_of_two();
        let buckets = buckets.min(MAX_BUCKETS);
        let shift = 16 - buckets.trailing_zeros();
        let threshold = (PENDING_BYTES / buckets as usize).max(1024);
        let broken = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(QUEUE);
        let root = dir.path().to_owned();
        let failed = broken.clone();
        std::thread::Builder::new()
            .name("rsagg-spool-writer".into())
            .spawn(move || write_jobs(&root, rx, &failed))?;
        Ok(Spool(Some(Arc::new(Inner {
            dir,
            _lock: lock,
            capacity,
            shift,
            used: AtomicU64::new(0),
            full: AtomicBool::new(false),
            broken,
            pending: (0..buckets).map(|_| Mutex::new(Vec::new())).collect(),
            threshold,
            tx,
        }))))
    }

    /// True when it keeps nothing.
    pub fn is_off(&self) -> bool {
        self.0.is_none()
    }

    /// The spool's directory (`None` when off).
    pub fn dir(&self) -> Option<&Path> {
        self.0.as_ref().map(|i| i.dir.path())
    }

    /// Bytes spooled since opening or the last [`Spool::clear`], headers included.
    pub fn used(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |i| i.used.load(Ordering::Relaxed))
    }

    /// Appends the body `chunks` of blob `sha256` (lowercase hex), stored for a resource of
    /// slot `slot`, when it fits. The caller vouches for nothing: readers verify.
    pub(crate) async fn insert(&self, slot: u16, sha256: &str, chunks: &[Bytes]) {
        let Some(inner) = &self.0 else { return };
        let length: usize = chunks.iter().map(Bytes::len).sum();
        let (Ok(len32), Some(digest)) = (u32::try_from(length), decode_hex(sha256)) else {
            return;
        };
        if inner.broken.load(Ordering::Relaxed) {
            return;
        }
        let size = (HEADER + length) as u64;
        let used = inner.used.fetch_add(size, Ordering::Relaxed);
        if used + size > inner.capacity {
            inner.used.fetch_sub(size, Ordering::Relaxed);
            if !inner.full.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    capacity = inner.capacity,
                    "the spool is full ([store] spool_bytes): the Resource Dump reads the \
                     bodies stored from now on back from the store"
                );
            }
            return;
        }
        let bucket = inner.bucket(slot);
        let full = {
            let Ok(mut pending) = inner.pending[bucket].lock() else {
                return;
            };
            pending.extend_from_slice(&digest);
            pending.extend_from_slice(&len32.to_le_bytes());
            for c in chunks {
                pending.extend_from_slice(c);
            }
            (pending.len() >= inner.threshold).then(|| std::mem::take(&mut *pending))
        };
        if let Some(records) = full {
            // A writer thread gone marked the spool broken: readers fall back to the store.
            let _ = inner.tx.send(Job::Append(bucket, records)).await;
        }
    }

    /// A reader for a dump that lists the collection in slot order, once every body spooled
    /// so far is written; `None` when the spool is off or broken.
    pub async fn reader(&self) -> Option<SpoolReader> {
        let inner = self.0.as_ref()?;
        for (bucket, p) in inner.pending.iter().enumerate() {
            let records = p
                .lock()
                .map(|mut p| std::mem::take(&mut *p))
                .unwrap_or_default();
            if !records.is_empty() {
                inner.tx.send(Job::Append(bucket, records)).await.ok()?;
            }
        }
        let (done, written) = oneshot::channel();
        inner.tx.send(Job::Barrier(done)).await.ok()?;
        written.await.ok()?;
        if inner.broken.load(Ordering::Relaxed) {
            return None;
        }
        Some(SpoolReader {
            spool: self.clone(),
            loaded: Arc::new(tokio::sync::Mutex::new(Loaded::default())),
        })
    }

    /// Forgets everything spooled (after a Resource Dump: what comes next is stored anew).
    pub async fn clear(&self) {
        let Some(inner) = &self.0 else { return };
        for p in &inner.pending {
            if let Ok(mut p) = p.lock() {
                *p = Vec::new();
            }
        }
        let (done, cleared) = oneshot::channel();
        if inner.tx.send(Job::Clear(done)).await.is_ok() {
            let _ = cleared.await;
        }
        inner.used.store(0, Ordering::Relaxed);
        inner.full.store(false, Ordering::Relaxed);
    }
}

/// The bodies of one bucket, verified, by SHA-256.
#[derive(Default)]
struct Loaded {
    bucket: Option<usize>,
    bodies: HashMap<[u8; 32], Bytes>,
}

/// Reads a [`Spool`] for a dump whose items come in slot order: the bucket of the slot asked
/// for is loaded whole (on a blocking thread) and verified, and kept until a slot of another
/// bucket is asked for. Clones share the loaded bucket; lookups are served in the order they
/// ask, so concurrent lookups in item order load each bucket once.
#[derive(Clone)]
pub struct SpoolReader {
    spool: Spool,
    loaded: Arc<tokio::sync::Mutex<Loaded>>,
}

impl std::fmt::Debug for SpoolReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpoolReader")
            .field("spool", &self.spool)
            .finish()
    }
}

impl SpoolReader {
    /// The body of blob `sha256` (`length` bytes) stored for a resource of slot `slot`, when
    /// the spool has it, verified (it hashed to `sha256` when its bucket was loaded).
    pub async fn get(&self, slot: u16, sha256: &str, length: u64) -> Option<Bytes> {
        let inner = self.spool.0.as_ref()?;
        let digest = decode_hex(sha256)?;
        let bucket = inner.bucket(slot);
        let mut loaded = self.loaded.lock().await;
        if loaded.bucket != Some(bucket) {
            let pending = inner.pending[bucket]
                .lock()
                .map(|p| p.clone())
                .unwrap_or_default();
            let file = bucket_path(inner.dir.path(), bucket);
            let bodies = tokio::task::spawn_blocking(move || load(&file, pending))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e)));
            loaded.bodies = bodies.unwrap_or_else(|e| {
                tracing::warn!(bucket, error = %e, "spool bucket unreadable: its bodies are read from the store");
                HashMap::new()
            });
            loaded.bucket = Some(bucket);
        }
        loaded
            .bodies
            .get(&digest)
            .filter(|b| b.len() as u64 == length)
            .cloned()
    }
}

/// The records of bucket file `file` followed by `pending`, each kept when its body hashes to
/// its header's SHA-256 (a record cut short, or with other bytes, ends or is skipped).
fn load(file: &Path, pending: Vec<u8>) -> io::Result<HashMap<[u8; 32], Bytes>> {
    let mut all = Vec::new();
    match File::open(file) {
        Ok(mut f) => {
            f.read_to_end(&mut all)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    all.extend_from_slice(&pending);
    let all = Bytes::from(all);
    let mut bodies = HashMap::new();
    let mut at = 0usize;
    let mut bad = 0u64;
    while at + HEADER <= all.len() {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&all[at..at + 32]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&all[at + 32..at + HEADER]);
        let len = u32::from_le_bytes(len) as usize;
        let start = at + HEADER;
        let Some(end) = start.checked_add(len).filter(|e| *e <= all.len()) else {
            bad += 1;
            break;
        };
        let body = all.slice(start..end);
        if sha2::Sha256::digest(&body)[..] == digest {
            bodies.insert(digest, body);
        } else {
            bad += 1;
        }
        at = end;
    }
    if bad > 0 {
        tracing::warn!(file = %file.display(), records = bad, "spooled bodies that do not match their address: read from the store instead");
    }
    Ok(bodies)
}

/// The writer thread: appends records to bucket files, in the order they were handed over.
fn write_jobs(root: &Path, mut rx: mpsc::Receiver<Job>, broken: &AtomicBool) {
    while let Some(job) = rx.blocking_recv() {
        match job {
            Job::Append(bucket, records) => {
                if broken.load(Ordering::Relaxed) {
                    continue;
                }
                let file = bucket_path(root, bucket);
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)
                    .and_then(|mut f| f.write_all(&records));
                if let Err(e) = written {
                    tracing::warn!(file = %file.display(), error = %e, "the spool cannot be written: the Resource Dump reads bodies back from the store");
                    broken.store(true, Ordering::Relaxed);
                }
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
            Job::Clear(done) => {
                if let Ok(entries) = std::fs::read_dir(root) {
                    for e in entries.flatten() {
                        if e.file_name() != "lock" {
                            let _ = std::fs::remove_file(e.path());
                        }
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

fn bucket_path(root: &Path, bucket: usize) -> PathBuf {
    root.join(format!("{bucket:04x}"))
}

/// Removes the spool directories under `parent` that no process holds (their `lock` file
/// can be locked): left behind by a process that crashed.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = e.path();
        let free = File::open(path.join("lock")).is_ok_and(|l| l.try_lock().is_ok());
        if free {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "removed a spool a crashed process left behind")
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot remove a stale spool")
                }
            }
        }
    }
}

/// 64 lowercase hex digits as 32 bytes.
fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    let b = hex.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(b[2 * i])? << 4) | digit(b[2 * i + 1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(body: &[u8]) -> String {
        sha2::Sha256::digest(body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn body(i: usize) -> Vec<u8> {
        format!("body {i} ").repeat(20).into_bytes()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_spooled_reads_back_by_slot_verified() {
        let parent = tempfile::tempdir().unwrap();
        // Small: few buckets (4), so several files hold many records and some stay pending.
        let spool = Spool::open(parent.path(), 64 << 20).unwrap();
        let n = 3000;
        // ~3.6 KB each: 2.7 MB a bucket, past the 1 MiB after which pending records are written.
        let body = |i: usize| format!("body {i} ").repeat(400).into_bytes();
        for i in 0..n {
            let b = body(i);
            spool
                .insert((i * 37 % 65536) as u16, &sha(&b), &[Bytes::from(b)])
                .await;
        }
        let reader = spool.reader().await.unwrap();
        let written = std::fs::read_dir(spool.dir().unwrap()).unwrap().count() - 1;
        assert_eq!(written, 4, "every bucket has a file beside the lock");
        // In slot order, as a dump asks.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|i| i * 37 % 65536);
        for i in order {
            let b = body(i);
            let got = reader
                .get((i * 37 % 65536) as u16, &sha(&b), b.len() as u64)
                .await;
            assert_eq!(got.as_deref(), Some(&b[..]), "{i}");
        }
        // Another length, another slot's bucket, an unknown body: not there.
        let b = body(1);
        assert_eq!(reader.get(37, &sha(&b), 3).await, None);
        assert_eq!(reader.get(37 + 32768, &sha(&b), b.len() as u64).await, None);
        assert_eq!(reader.get(37, &sha(b"other"), 5).await, None);
        drop(reader);
        spool.clear().await;
        assert_eq!(spool.used(), 0);
        let reader = spool.reader().await.unwrap();
        assert_eq!(reader.get(37, &sha(&b), b.len() as u64).await, None);
        let dir = spool.dir().unwrap().to_owned();
        drop((spool, reader));
        assert!(!dir.exists(), "removed with the last handle");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn damaged_records_are_not_handed_out() {
        let parent = tempfile::tempdir().unwrap();
        // One bucket; the reader writes out what is pending.
        let spool = Spool::open(parent.path(), BUCKET_BYTES).unwrap();
        let bodies: Vec<Vec<u8>> = (0..40).map(body).collect();
        for b in &bodies {
            spool.insert(7, &sha(b), &[Bytes::from(b.clone())]).await;
        }
        spool.reader().await.unwrap();
        // Flip one byte of the first body in the file.
        let file = bucket_path(spool.dir().unwrap(), 0);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[HEADER] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        let reader = spool.reader().await.unwrap();
        assert_eq!(
            reader
                .get(7, &sha(&bodies[0]), bodies[0].len() as u64)
                .await,
            None
        );
        for b in &bodies[1..] {
            assert_eq!(
                reader.get(7, &sha(b), b.len() as u64).await.as_deref(),
                Some(&b[..])
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_spool_keeps_what_fits_and_no_more() {
        let parent = tempfile::tempdir().unwrap();
        let capacity = 10 * (HEADER as u64 + 180);
        let spool = Spool::open(parent.path(), capacity).unwrap();
        let bodies: Vec<Vec<u8>> = (0..20).map(body).collect();
        for b in &bodies {
            spool.insert(1, &sha(b), &[Bytes::from(b.clone())]).await;
        }
        assert!(spool.used() <= capacity, "{} > {capacity}", spool.used());
        let reader = spool.reader().await.unwrap();
        let mut kept = 0;
        for b in &bodies {
            kept += usize::from(reader.get(1, &sha(b), b.len() as u64).await.is_some());
        }
        assert!((1..20).contains(&kept), "{kept} of 20 kept");
    }

    #[test]
    fn a_spool_a_crashed_process_left_is_removed_and_one_in_use_is_not() {
        let parent = tempfile::tempdir().unwrap();
        let stale = parent.path().join(format!("{DIR_PREFIX}stale"));
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("lock"), b"").unwrap();
        std::fs::write(stale.join("0000"), b"records").unwrap();
        let a = Spool::open(parent.path(), 1 << 20).unwrap();
        assert!(!stale.exists());
        let b = Spool::open(parent.path(), 1 << 20).unwrap();
        assert!(a.dir().unwrap().exists(), "in use: kept");
        assert_ne!(a.dir(), b.dir());
    }

    #[test]
    fn hex_decodes_only_addresses() {
        let h = sha(b"x");
        assert_eq!(decode_hex(&h).unwrap()[..], sha2::Sha256::digest(b"x")[..]);
        assert_eq!(decode_hex(&h.to_uppercase()), None);
        assert_eq!(decode_hex("abcd"), None);
    }
}
