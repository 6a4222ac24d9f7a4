//! The previous Resource Dump as a source of bitstreams for the next one.
//!
//! A rebuild (every `publish.resource_dump_interval`) packages every present copy again. Read
//! blob by blob, that is one GET per resource on S3: $40 per rebuild of 10^8 resources, and
//! every body deflated again. Yet most resources have not changed since the previous dump,
//! whose packages hold their bitstreams already compressed. Both dumps are cut in slot order
//! (the `p/` scan of the state), so the previous packages a new package needs are the few
//! whose slot range ([`DumpPackage::slots`]) covers the items being planned: this module
//! downloads them one after the other as the items reach their slots (a GET per package, into
//! memory, or a temporary file when large; the next one is fetched while the current one is
//! copied from, so that on S3 the copying does not wait a round trip and a package's
//! transfer at each package boundary), and finds each item's bitstream there by its
//! SHA-256 (bitstreams are
//! content-addressed, so equal digests are equal bytes). The package writer then copies the
//! entry as it is ([`rsagg_dump::PackageWriter::copy_entry`]): no blob read, no deflating.
//!
//! Trust: a previous package is used only when its bytes hash to the SHA-256 published for
//! it, and its manifest reads back ([`rsagg_dump::CopySource::digests`]); otherwise it is counted
//! as unusable, logged, and its resources are read from the blobs as before. A package of
//! an older rsagg, without recorded slots, is never copied from.
//!
//! Bounded: at most the packages whose ranges overlap the current slot are held (usually one
//! or two), plus the next one being fetched, each with a map of its entries' digests (at most
//! `publish.dump_package_entries`): in memory when it is at most [`IN_MEMORY`] bytes and
//! those in memory (the one being fetched included) stay within twice that, else in a
//! temporary file (at most `publish.dump_package_bytes`); a package is dropped, bytes and
//! map, once the items have passed its last slot.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use rsagg_dump::CopySource;
use rsagg_layout::meta::DumpPackage;
use rsagg_store::Verified;
use tokio_util::task::AbortOnDropHandle;

/// Previous packages up to this size are held in memory while they are copied from, larger
/// ones in a temporary file: a copy seeks to each entry, and reading a file anew at each
/// seek cost more system time than the deflating the copy saves. The packages the window
/// holds in memory at once take at most twice this: one whose items are being copied and
/// the next (which may share its first slot, or is being fetched ahead); more (many small
/// packages sharing a slot) go to temporary files.
const IN_MEMORY: u64 = 16 << 20;

#[cfg(test)]
thread_local! {
    /// [`IN_MEMORY`] for the tests of this thread, so that they reach the file path too.
    pub(crate) static TEST_IN_MEMORY: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// [`IN_MEMORY`], or what a test set.
fn in_memory() -> u64 {
    #[cfg(test)]
    if let Some(n) = TEST_IN_MEMORY.with(std::cell::Cell::get) {
        return n;
    }
    IN_MEMORY
}

/// One previous package, downloaded and checked.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The ZIP: in memory, or a file (a temporary one, or a local store's own), read from
    /// its start.
    data: Verified,
    /// Its object path, for messages.
    pub name: String,
    /// SHA-256 (lowercase hex) of each bitstream → the ZIP entry holding it.
    by_digest: HashMap<String, String>,
    /// The slot of its last item: once the items pass it, the package is dropped.
    last_slot: u16,
}

/// A previous package to copy from, with the ranges that say when it is needed.
#[derive(Debug, Clone)]
struct Listed {
    zip: String,
    sha256: String,
    length: u64,
    slots: [u16; 2],
}

/// The previous dump's packages, as a window that follows the slots of the items planned.
pub(crate) struct Previous {
    objects: Arc<dyn ObjectStore>,
    packages: Vec<Listed>,
    /// The next of `packages` not yet considered.
    next: usize,
    /// Packages downloaded whose last slot the items have not passed.
    open: VecDeque<Arc<Opened>>,
    /// The download of `packages[next]`, started once the package before it was opened, and
    /// the bytes it may hold in memory; dropping it aborts it.
    ahead: Option<Ahead>,
    /// Bitstreams found in them ([`Previous::find`] answered).
    pub copied: u64,
    /// Packages that could not be used.
    pub unusable: u64,
}

impl Previous {
    /// The packages of the previous dump (`packages`, in order), when every one of them
    /// records its slots; `None` otherwise (an older dump, or none).
    pub(crate) fn new(objects: Arc<dyn ObjectStore>, packages: &[DumpPackage]) -> Option<Previous> {
        let packages = packages
            .iter()
            .map(|p| {
                Some(Listed {
                    zip: p.info.zip.clone(),
                    sha256: p.info.sha256.clone(),
                    length: p.info.length,
                    slots: p.slots?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        if packages.is_empty() {
            return None;
        }
        Some(Previous {
            objects,
            packages,
            next: 0,
            open: VecDeque::new(),
            ahead: None,
            copied: 0,
            unusable: 0,
        })
    }

    /// The package and entry holding the bitstream of SHA-256 `sha256`, for an item in slot
    /// `slot`; `None` when no previous package of that slot holds it. Items must come in
    /// slot order: packages before `slot` are dropped, those reaching it downloaded.
    pub(crate) async fn find(&mut self, slot: u16, sha256: &str) -> Option<(Arc<Opened>, String)> {
        while self.open.front().is_some_and(|p| p.last_slot < slot) {
            self.open.pop_front();
        }
        while let Some(listed) = self.packages.get(self.next) {
            if listed.slots[0] > slot {
                break;
            }
            let i = self.next;
            self.next += 1;
            // A download started ahead for this package, taken (or dropped, and so aborted,
            // when the package is passed).
            let ahead = self.ahead.take().filter(|a| a.index == i);
            if listed.slots[1] < slot {
                // Passed without an item of ours in its range.
                continue;
            }
            let download = ahead.unwrap_or_else(|| self.start(i));
            let downloaded = download
                .task
                .await
                .unwrap_or_else(|e| Err(format!("downloading it: {e}")));
            match downloaded {
                Ok(opened) => self.open.push_back(Arc::new(opened)),
                Err(why) => {
                    self.unusable += 1;
                    tracing::warn!(
                        package = %self.packages[i].zip,
                        "previous Resource Dump package not copied from (its resources are read from the blobs): {why}"
                    );
                }
            }
        }
        if self.ahead.is_none() && !self.open.is_empty() && self.next < self.packages.len() {
            // The next package, fetched while this one is copied from.
            self.ahead = Some(self.start(self.next));
        }
        let found = self.open.iter().find_map(|p| {
            p.by_digest
                .get(sha256)
                .map(|entry| (p.clone(), entry.clone()))
        });
        self.copied += u64::from(found.is_some());
        found
    }

    /// The position of the package being fetched ahead, if any.
    #[cfg(test)]
    pub(crate) fn fetching_ahead(&self) -> Option<usize> {
        self.ahead.as_ref().map(|a| a.index)
    }

    /// Starts downloading `packages[i]` (see [`fetch`]) with the memory the window leaves.
    fn start(&self, i: usize) -> Ahead {
        let listed = self.packages[i].clone();
        let in_memory = self.memory_for(listed.length);
        Ahead {
            index: i,
            in_memory: if in_memory > 0 { listed.length } else { 0 },
            task: AbortOnDropHandle::new(tokio::spawn(fetch(
                self.objects.clone(),
                listed,
                in_memory,
            ))),
        }
    }

    /// The memory bound to read a package of `length` bytes with: [`IN_MEMORY`] when it fits
    /// beside the packages held in memory and the one being fetched ahead (at most twice
    /// [`IN_MEMORY`] in all), else 0 (a temporary file).
    fn memory_for(&self, length: u64) -> u64 {
        let held: u64 = self
            .open
            .iter()
            .map(|p| match &p.data {
                Verified::Memory(bytes) => bytes.len() as u64,
                Verified::File { .. } => 0,
            })
            .sum::<u64>()
            + self.ahead.as_ref().map_or(0, |a| a.in_memory);
        match in_memory() {
            n if held + length <= 2 * n => n,
            _ => 0,
        }
    }
}

/// A previous package being downloaded: ahead of the items (kept in [`Previous::ahead`]), or
/// when the items reach it without one (awaited at once).
struct Ahead {
    /// Its position in [`Previous::packages`].
    index: usize,
    /// Bytes it may hold in memory (its length, or 0 when it goes to a temporary file).
    in_memory: u64,
    task: AbortOnDropHandle<Result<Opened, String>>,
}

/// Downloads `listed` into memory (up to `in_memory` bytes) or a temporary file, checks its
/// SHA-256 and length against the published ones and reads its manifest; the reason as text
/// when it cannot be used.
async fn fetch(
    objects: Arc<dyn ObjectStore>,
    listed: Listed,
    in_memory: u64,
) -> Result<Opened, String> {
    let path = Path::from(listed.zip.as_str());
    let data = rsagg_store::read_verified(
        objects.as_ref(),
        &path,
        &listed.sha256,
        listed.length,
        in_memory,
    )
    .await
    .map_err(|e| format!("reading it: {e}"))?
    .ok_or_else(|| {
        format!(
            "missing, or not the {} bytes of sha-256 {} published for it (spec 11.1 `hash`)",
            listed.length, listed.sha256
        )
    })?;
    let name = listed.zip;
    let last_slot = listed.slots[1];
    tokio::task::spawn_blocking(move || index(data, name, last_slot))
        .await
        .map_err(|e| format!("reading its manifest: {e}"))?
}

impl Opened {
    /// The package to copy from, read from memory or through a buffer.
    pub(crate) fn source(&self) -> Result<CopySource, rsagg_dump::Error> {
        match &self.data {
            Verified::Memory(bytes) => {
                CopySource::open(std::io::Cursor::new(bytes.clone()), &self.name)
            }
            Verified::File { file, start } => {
                let io = |source| rsagg_dump::Error::Io {
                    package: self.name.clone(),
                    context: "reading it again to copy from it".into(),
                    source,
                };
                // A whole object is read, so it starts at the file's start: ZIP offsets
                // count from there.
                if *start != 0 {
                    return Err(io(std::io::Error::other(
                        "the package does not start its file",
                    )));
                }
                let file = file.try_clone().map_err(io)?;
                CopySource::open(std::io::BufReader::new(file), &self.name)
            }
        }
    }
}

/// Reads the manifest of the package in `data`: each bitstream's SHA-256 and ZIP entry name.
fn index(data: Verified, name: String, last_slot: u16) -> Result<Opened, String> {
    let mut opened = Opened {
        data,
        name,
        by_digest: HashMap::new(),
        last_slot,
    };
    let digests = opened
        .source()
        .and_then(|mut source| source.digests())
        .map_err(|e| format!("reading its manifest: {e}"))?;
    opened.by_digest = digests.into_iter().map(|(path, sha)| (sha, path)).collect();
    Ok(opened)
}
