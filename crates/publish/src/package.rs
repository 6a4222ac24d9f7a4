//! Building one of rsagg's own dump packages (spec 11.2, 13.2) from stored blobs, and the
//! entry of a package in a dump document, which the Resource Dump and the Change Dumps share.
//!
//! A package is written to a local temporary file by [`rsagg_dump::PackageWriter`] on a
//! blocking thread while blobs are fetched on the async side and handed over through a
//! bounded channel, so fetching and compressing overlap and memory stays bounded. A Resource
//! Dump rebuild copies the bitstreams its previous generation holds from its packages, still
//! compressed (`crate::previous`). Blobs the
//! run has just stored are taken from memory ([`rsagg_store::RecentBlobs`]); the others are
//! read [`READ_AHEAD`] at a time (in manifest order), since one read costs a round trip to
//! the store (a GET on S3) and the typical dump is many small resources; a local store's
//! blobs are read as files in batches, several batches at once by blocking tasks
//! ([`feed_local`]), and handed to the writer a batch at a time. Each blob is read whole
//! (into memory up to [`IN_MEMORY`] bytes, else into a temporary file of its own, or left in
//! place when local) and its
//! SHA-256 checked against its address before the writer sees a byte of it: a corrupt or
//! missing blob is left out (with a warning, counted) rather than ending up in the ZIP, where a half-written entry would spoil the whole
//! package. The finished ZIP is uploaded in parts (multipart upload, so packages far
//! larger than memory work on S3), hashed (md5, sha-256) as it is read, and the manifest is
//! uploaded a second time as an object of its own, the byte-identical copy a dump's
//! `rs:ln rel="contents"` points to (spec 11.1, 13.1: it must match the one in the package).

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek};
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use md5::Digest;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use rsagg_dump::{Compression, CopySource, PackageWriter};
use rsagg_layout::capability::up_link;
use rsagg_model::{
    Capability, Clock, HashAlgorithm, HashValue, Header, Link, Md, Root, UrlEntry, W3cDateTime,
};
use rsagg_sitemap::writer::document;
use rsagg_store::documents::put;
use rsagg_store::{Blobs, RecentBlobs, SpoolReader, StoreLocation, Verified};

use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::Error;
use crate::entry::hashes;
use crate::previous::{Opened, Previous};
use rsagg_layout::meta::*;

/// Part size of multipart uploads (S3 wants at least 5 MiB per part but the last); files up
/// to this size go up with one `PUT`.
pub(crate) const PART: usize = 8 << 20;
/// Parts uploading at once: with [`PART`], the memory an upload holds.
const PARTS_IN_FLIGHT: usize = 2;
/// Bytes read from a local file at a time.
const READ_CHUNK: usize = 1 << 20;
/// Batches of items waiting for the writer.
const QUEUE: usize = 2;
/// Items a local store's readers hand to the writer at once, so that the threads wake each
/// other once per batch rather than once per item (see [`feed_local`]).
pub(crate) const BATCH: usize = 64;
/// Bitstream bytes after which a batch of a local store's items is cut early (a large blob
/// counts as [`IN_MEMORY`] bytes: it is handed over as an open file). With [`QUEUE`] and
/// [`LOCAL_READERS`] this bounds what the local readers hold: (2 + 4 + 1) × (1 MiB +
/// 256 KiB), about 9 MiB.
const BATCH_BYTES: u64 = 1 << 20;
/// Batches of a local store's blobs read at once, each by a blocking task of its own.
const LOCAL_READERS: usize = 4;
/// Blobs read at once ahead of the writer. With [`IN_MEMORY`], [`QUEUE`] and [`BATCH_BYTES`]
/// this bounds the memory a build holds: 16 × 256 KiB read ahead and (2 + 1) batches of at
/// most 1 MiB + 256 KiB, under 8 MiB (blobs taken from [`RecentBlobs`] are shared with it,
/// not copied).
const READ_AHEAD: usize = 16;
/// Bitstreams up to this size are held in memory between the read and the writer; larger
/// ones go through a file (the store's [`Verified`]).
pub(crate) const IN_MEMORY: u64 = rsagg_store::VERIFIED_IN_MEMORY;
/// The name the spec reserves for the manifest (spec 11.2, 13.2).
const MANIFEST: &str = "manifest.xml";

/// One manifest entry of a package to build.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The manifest entry; the builder sets its `rs:md path` to where the bitstream went.
    pub entry: UrlEntry,
    /// The bitstream, or `None` for a Change Dump deletion (spec 13.2: no bitstream, no
    /// `path`).
    pub body: Option<Body>,
}

/// Where an item's bitstream comes from and where it should go in the ZIP.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    /// SHA-256 of the blob (its address), checked against the bytes read.
    pub sha256: String,
    /// Its length, checked too.
    pub length: u64,
    /// Preferred `path` (leading `/`, spec 11.2).
    pub path: String,
    /// `path` used when the preferred one is not a safe name or clashes with another file
    /// of the package; the item is left out when this one fails too.
    pub fallback: String,
    /// The slot of the resource ([`rsagg_store::slot_of`]), where a run's spool keeps the
    /// body it stored (`None`: not looked for there).
    pub slot: Option<u16>,
}

/// The header of a package's manifest, and the clock its `completed` is read from (when it
/// has `at`: a Resource Dump Manifest, spec 11.2).
#[derive(Debug, Clone)]
pub(crate) struct ManifestHeader {
    pub header: Header,
    pub clock: Clock,
}

/// A finished, uploaded package.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    /// What was published.
    pub info: PackageInfo,
    /// When the last bitstream had been read (the manifest's `completed`, spec 11.2).
    pub completed: W3cDateTime,
}

/// What the writer thread is given, in manifest order.
enum Msg {
    /// The next items with their bitstreams (`None` for a deletion).
    Items(Batch),
    /// Every item was sent: write the manifest and finish. Without it (the feeding side
    /// failed) the writer gives up instead of finishing a package nobody will publish.
    Finish,
}

/// Manifest entries in order, each with its verified bitstream (`None` for a deletion).
type Batch = Vec<(UrlEntry, Option<Ready>)>;

/// A verified bitstream.
struct Ready {
    data: Data,
    body: Body,
}

/// Where a bitstream waits for the writer.
enum Data {
    /// Read and verified by the store (in memory, or in a file).
    Read(Verified),
    /// An entry of a previous package (checked as a whole), copied as it is
    /// ([`Previous`]).
    Copy(Arc<Opened>, String),
}

/// What the writer thread produced.
struct Written {
    zip: File,
    manifest: File,
    entries: u64,
    bytes: u64,
    skipped: u64,
    completed: W3cDateTime,
}

/// Builds the package of `items` (in manifest order) with manifest header `header`, uploads
/// it to `zip` and the copy of its manifest to `manifest`.
///
/// Bitstreams come first from `previous` (a Resource Dump rebuild: the previous dump's
/// packages, copied from as they are), then from memory for those [`StoreLocation::recent`]
/// keeps (a dump built right after a harvest reads nothing back), then from what `spool`
/// has (items in slot order: the Resource Dump; each body verified against its address when
/// its bucket is loaded), the rest from the store; for a `file://` store
/// ([`StoreLocation::local_root`]) the others as files, a batch at a time by blocking tasks
/// ([`feed_local`]) instead of one `objects.get` each (a blocking-thread hand-off per blob,
/// and a task wake-up per blob on each side of the writer's queue), while the writer thread
/// compresses what it was given.
///
/// When the header has `at` (a Resource Dump Manifest, spec 11.2), its `completed` is set to
/// when the last bitstream had been read, by the header's clock. Items whose blob is
/// missing or does not hash to its address, or for which neither `path` is usable, are left out with a warning and
/// counted in [`PackageInfo::skipped`]; anything else that fails (the store, local I/O, a
/// manifest entry the writer's strict validation refuses) fails the package.
pub(crate) async fn build(
    store: &StoreLocation,
    spool: Option<&SpoolReader>,
    previous: Option<&tokio::sync::Mutex<Previous>>,
    header: ManifestHeader,
    items: impl Stream<Item = Result<Item, Error>> + Send,
    zip: &Path,
    manifest: &Path,
) -> Result<Built, Error> {
    let zip_file = temp_file(zip)?;
    let copy_file = temp_file(manifest)?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let name = zip.to_string();
    let ManifestHeader { header, clock } = header;
    let writer = tokio::task::spawn_blocking(move || {
        write_package(zip_file, copy_file, &name, header, rx, &clock)
    });
    let objects = &store.objects;
    // Where each item's bitstream is found first, one item after the other (in slot order,
    // as `Previous` needs them): a previous package, memory, the spool.
    let skipped = match store.local_root.as_deref() {
        Some(root) => {
            let held = held(items, &store.recent, spool, previous);
            feed_local(root, held, &tx, zip).await?
        }
        _ => feed(objects, held(items, &store.recent, spool, previous), &tx).await?,
    };
    // A failed send means the writer is gone; its own error says why.
    let _ = tx.send(Msg::Finish).await;
    drop(tx);
    let written = writer.await.map_err(|e| Error::Io {
        what: format!("writing package {zip}"),
        source: io::Error::other(e),
    })??;
    // Both at once; only the ZIP's digests are published (`rs:md hash` of the package).
    let (up, _) = futures::try_join!(
        upload(objects, zip, written.zip, true),
        upload(objects, manifest, written.manifest, false)
    )?;
    Ok(Built {
        info: PackageInfo {
            zip: zip.to_string(),
            manifest: manifest.to_string(),
            length: up.length,
            md5: up.md5,
            sha256: up.sha256,
            entries: written.entries,
            bytes: written.bytes,
            skipped: skipped + written.skipped,
        },
        completed: written.completed,
    })
}

/// `items` with their bitstreams where [`kept`] finds them, one item after the other (in
/// slot order, as [`Previous`] needs them).
fn held<'a>(
    items: impl Stream<Item = Result<Item, Error>> + 'a,
    recent: &'a RecentBlobs,
    spool: Option<&'a SpoolReader>,
    previous: Option<&'a tokio::sync::Mutex<Previous>>,
) -> impl Stream<Item = Result<Held, Error>> + 'a {
    items.then(move |item| async move {
        let item = item?;
        let held = match &item.body {
            Some(body) => kept(recent, spool, previous, body).await,
            None => None,
        };
        Ok::<_, Error>((item, held))
    })
}

/// Feeds the writer `items` with their bitstreams: those found already (`held`), the others
/// read through `objects`, [`READ_AHEAD`] at a time; returns the items left out (blob
/// missing or not matching its address). What is ready at once goes over in one batch (up
/// to [`BATCH`] items or [`BATCH_BYTES`]), so that blobs kept in memory do not cost a writer
/// wake-up each.
async fn feed(
    objects: &Arc<dyn ObjectStore>,
    items: impl Stream<Item = Result<Held, Error>>,
    tx: &mpsc::Sender<Msg>,
) -> Result<u64, Error> {
    let mut skipped = 0u64;
    // Each item's blob read and verified, READ_AHEAD at once, in manifest order; `None` for
    // an item left out.
    let mut fetched = std::pin::pin!(
        items
            .map(|held| async move {
                let (item, held) = held?;
                let Some(body) = item.body else {
                    return Ok::<_, Error>(Some((item.entry, None)));
                };
                let data = match held {
                    Some(data) => data,
                    None => {
                        match Blobs::read_verified(objects.as_ref(), &body.sha256, body.length)
                            .await?
                        {
                            Some(data) => Data::Read(data),
                            None => return Ok(None),
                        }
                    }
                };
                let ready = Some(Ready { data, body });
                Ok(Some((item.entry, ready)))
            })
            .buffered(READ_AHEAD)
    );
    while let Some(first) = fetched.next().await {
        let mut batch = Vec::new();
        let mut held = 0u64;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item? {
                Some((entry, ready)) => {
                    held += ready.as_ref().map_or(0, |r| r.body.length.min(IN_MEMORY));
                    batch.push((entry, ready));
                }
                None => skipped += 1,
            }
            if batch.len() < BATCH && held < BATCH_BYTES {
                // The next one only when it is ready now (`None`: not yet, or the end).
                next = fetched.next().now_or_never().flatten();
            }
        }
        if !batch.is_empty() && tx.send(Msg::Items(batch)).await.is_err() {
            // The writer stopped early; its error is reported by `build`.
            break;
        }
    }
    Ok(skipped)
}

/// The bitstream of `body` when a package of the previous dump holds it (copied as it is,
/// nothing to deflate again), else when `recent` keeps it, else when `spool` has it (looked
/// up by slot, verified).
async fn kept(
    recent: &RecentBlobs,
    spool: Option<&SpoolReader>,
    previous: Option<&tokio::sync::Mutex<Previous>>,
    body: &Body,
) -> Option<Data> {
    if let (Some(previous), Some(slot)) = (previous, body.slot)
        && let Some((package, entry)) = previous.lock().await.find(slot, &body.sha256).await
    {
        return Some(Data::Copy(package, entry));
    }
    if let Some(bytes) = recent.get(&body.sha256) {
        return Some(Data::Read(Verified::Memory(bytes)));
    }
    let bytes = spool?.get(body.slot?, &body.sha256, body.length).await?;
    Some(Data::Read(Verified::Memory(bytes)))
}

/// Feeds the writer `items` with their blobs taken from `recent`, else from `spool`, else
/// read as files from the directory `root` of a local store; returns the items left out.
///
/// The items go in batches of up to [`BATCH`] items or [`BATCH_BYTES`] (counting what each
/// will hold: its length, up to [`IN_MEMORY`]), each batch read by a blocking task of its own
/// ([`read_local`]), [`LOCAL_READERS`] batches at once, handed to the writer in order. One
/// reader was not enough: at 10^7 resources the blob files outgrow the page cache, and one
/// thread opening them one after the other read 2,700 a second at 25% I/O wait (the disk
/// served one request at a time), an hour for the first Resource Dump. A baseline's dump
/// takes its bodies from the spool instead, and reads files only for what did not fit it.
async fn feed_local(
    root: &std::path::Path,
    held: impl Stream<Item = Result<Held, Error>>,
    tx: &mpsc::Sender<Msg>,
    zip: &Path,
) -> Result<u64, Error> {
    let mut read = std::pin::pin!(
        batches(held)
            .map(|batch| async move {
                let batch = batch?;
                let root = root.to_owned();
                tokio::task::spawn_blocking(move || read_local(&root, batch))
                    .await
                    .map_err(|e| Error::Io {
                        what: format!("reading the blobs for package {zip}"),
                        source: io::Error::other(e),
                    })?
            })
            .buffered(LOCAL_READERS)
    );
    let mut skipped = 0u64;
    while let Some(read) = read.next().await {
        let (batch, left_out) = read?;
        skipped += left_out;
        if !batch.is_empty() && tx.send(Msg::Items(batch)).await.is_err() {
            // The writer stopped early; its error is reported by `build`.
            break;
        }
    }
    Ok(skipped)
}

/// An item with its bitstream when a previous package, memory or the spool holds it.
type Held = (Item, Option<Data>);

/// `items` cut into batches of up to [`BATCH`] items or about [`BATCH_BYTES`] (an item counts
/// its length, up to [`IN_MEMORY`]: what it holds once read). An error ends the stream: the
/// package it was for is not finished.
fn batches(
    items: impl Stream<Item = Result<Held, Error>>,
) -> impl Stream<Item = Result<Vec<Held>, Error>> {
    futures::stream::unfold(Some(Box::pin(items)), |items| async move {
        let mut items = items?;
        let (mut batch, mut bytes) = (Vec::with_capacity(BATCH), 0u64);
        while batch.len() < BATCH && bytes < BATCH_BYTES {
            match items.next().await {
                Some(Ok(held)) => {
                    bytes += held.0.body.as_ref().map_or(0, |b| b.length.min(IN_MEMORY));
                    batch.push(held);
                }
                Some(Err(e)) => return Some((Err(e), None)),
                None if batch.is_empty() => return None,
                None => return Some((Ok(batch), None)),
            }
        }
        Some((Ok(batch), Some(items)))
    })
}

/// Reads the blobs of `batch` that memory and the spool did not hold, from the directory
/// `root` of a local store, on the calling (blocking) thread; returns the batch ready for the
/// writer and the items left out. Each blob is read and verified (SHA-256 and length) before
/// it is handed over, as on the other path: a corrupt or missing blob is left out, counted
/// and warned about. What memory or the spool held was verified already: the bytes hashed to
/// their address when stored, or when the spool's bucket was loaded.
fn read_local(root: &std::path::Path, batch: Vec<Held>) -> Result<(Batch, u64), Error> {
    let mut skipped = 0u64;
    let mut ready = Vec::with_capacity(batch.len());
    for (item, held) in batch {
        let Some(body) = item.body else {
            ready.push((item.entry, None));
            continue;
        };
        let data = match held {
            Some(data) => data,
            None => match Blobs::read_local_verified(root, &body.sha256, body.length)? {
                Some(data) => Data::Read(data),
                None => {
                    skipped += 1;
                    continue;
                }
            },
        };
        ready.push((item.entry, Some(Ready { data, body })));
    }
    Ok((ready, skipped))
}

fn temp_file(for_object: &Path) -> Result<File, Error> {
    tempfile::tempfile().map_err(|source| Error::Io {
        what: format!("creating a temporary file for {for_object}"),
        source,
    })
}

/// The writer thread: adds the items as they come, then writes the manifest (and its copy).
fn write_package(
    zip: File,
    copy: File,
    name: &str,
    mut header: Header,
    mut rx: mpsc::Receiver<Msg>,
    clock: &Clock,
) -> Result<Written, Error> {
    let mut writer = PackageWriter::with_name(zip, name);
    let mut names = Names::default();
    // The previous package copied from last, opened once for all its entries.
    let mut sources = None;
    let mut entries = Vec::new();
    let (mut bytes, mut skipped) = (0u64, 0u64);
    loop {
        match rx.blocking_recv() {
            None => {
                return Err(Error::Io {
                    what: format!("writing package {name}"),
                    source: io::Error::other("abandoned: the items stopped coming"),
                });
            }
            Some(Msg::Finish) => break,
            Some(Msg::Items(items)) => {
                for (mut entry, ready) in items {
                    if let Some(mut ready) = ready {
                        match add(&mut writer, &mut names, &mut sources, &mut ready, name)? {
                            Some(path) => {
                                entry.md.get_or_insert_with(Md::default).path = Some(path);
                                bytes += ready.body.length;
                            }
                            None => {
                                tracing::warn!(
                                    package = name,
                                    uri = %entry.loc,
                                    path = %ready.body.path,
                                    fallback = %ready.body.fallback,
                                    "no usable name in the package; item left out"
                                );
                                skipped += 1;
                                continue;
                            }
                        }
                    }
                    entries.push(entry);
                }
            }
        }
    }
    let mut completed = clock.now();
    if let Some(md) = header.md.as_mut()
        && let Some(at) = md.at
    {
        // A clock stepping back must not give `completed` before `at` (spec 11.2).
        if completed.cmp_instant(&at).is_lt() {
            completed = at;
        }
        md.completed = Some(completed);
    }
    let count = entries.len() as u64;
    let mut copy = BufWriter::new(copy);
    let zip = writer.finish_with_copy(&header, &mut entries.into_iter(), &mut copy)?;
    let manifest = copy.into_inner().map_err(|e| Error::Io {
        what: format!("writing the manifest copy of {name}"),
        source: e.into_error(),
    })?;
    Ok(Written {
        zip,
        manifest,
        entries: count,
        bytes,
        skipped,
        completed,
    })
}

/// Adds `ready` under its preferred path, else its fallback; `None` when neither is usable
/// (refused by the writer's name checks, or clashing with a file already in the package).
fn add(
    writer: &mut PackageWriter,
    names: &mut Names,
    sources: &mut Option<(Arc<Opened>, CopySource)>,
    ready: &mut Ready,
    package: &str,
) -> Result<Option<String>, Error> {
    for path in [&ready.body.path, &ready.body.fallback] {
        if !names.fits(path) {
            continue;
        }
        let added = match &mut ready.data {
            Data::Copy(package, entry) => {
                let from = match sources.take() {
                    Some((open, from)) if Arc::ptr_eq(&open, package) => from,
                    _ => package.source()?,
                };
                let (_, from) = sources.insert((package.clone(), from));
                writer.copy_entry(path, from, entry)
            }
            Data::Read(Verified::Memory(bytes)) => writer.add_bytes(path, bytes),
            Data::Read(Verified::File { file, start }) => {
                let local = |source| Error::Io {
                    what: format!("reading the bitstream for {path} of {package}"),
                    source,
                };
                // Its first bytes say whether deflating it can pay.
                let mut head = Vec::with_capacity(16);
                file.seek(io::SeekFrom::Start(*start)).map_err(local)?;
                Read::by_ref(file)
                    .take(16)
                    .read_to_end(&mut head)
                    .map_err(local)?;
                file.seek(io::SeekFrom::Start(*start)).map_err(local)?;
                let compression = Compression::for_body(&head, ready.body.length);
                let mut bitstream = Read::by_ref(file).take(ready.body.length);
                writer.add_with(path, &mut bitstream, compression)
            }
        };
        match added {
            Ok(_) => {
                names.insert(path);
                return Ok(Some(path.clone()));
            }
            // Refused before a byte was read: the writer is still usable.
            Err(rsagg_dump::Error::UnsafeName { .. } | rsagg_dump::Error::Duplicate { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// The names in a package so far, so that no file is also a directory of another
/// (`a` and `a/b`): the ZIP would hold both, but no file system unpacking it could (spec
/// 11.2: `path` is where the bitstream would reside if the package were unpacked).
#[derive(Default)]
struct Names {
    files: HashSet<String>,
    dirs: HashSet<String>,
}

impl Names {
    fn fits(&self, path: &str) -> bool {
        let name = path.strip_prefix('/').unwrap_or(path);
        name != MANIFEST
            && !self.files.contains(name)
            && !self.dirs.contains(name)
            && !name
                .match_indices('/')
                .any(|(i, _)| self.files.contains(&name[..i]))
    }

    fn insert(&mut self, path: &str) {
        let name = path.strip_prefix('/').unwrap_or(path);
        for (i, _) in name.match_indices('/') {
            self.dirs.insert(name[..i].to_owned());
        }
        self.files.insert(name.to_owned());
    }
}

/// Length and digests of an uploaded file.
struct Uploaded {
    length: u64,
    md5: String,
    sha256: String,
}

/// Uploads the local `file` to `path`, hashing what it reads when `hash` is set (else the
/// digests are empty): one `PUT` up to [`PART`] bytes, a multipart upload of [`PART`]-sized
/// parts beyond (aborted on failure).
async fn upload(
    objects: &Arc<dyn ObjectStore>,
    path: &Path,
    file: File,
    hash: bool,
) -> Result<Uploaded, Error> {
    let local = |source| Error::Io {
        what: format!("reading the local file for {path}"),
        source,
    };
    let size = file.metadata().map_err(local)?.len();
    let mut file = tokio::fs::File::from_std(file);
    file.rewind().await.map_err(local)?;
    let remote = |e| rsagg_store::Error::object_store(path, e);
    let mut hashers = hash.then(|| (md5::Md5::new(), sha2::Sha256::new()));
    let mut update = |bytes: &[u8]| {
        if let Some((md5, sha256)) = &mut hashers {
            md5.update(bytes);
            sha256.update(bytes);
        }
    };
    let mut length = 0u64;
    if size <= PART as u64 {
        let mut all = Vec::with_capacity(size as usize);
        file.read_to_end(&mut all).await.map_err(local)?;
        update(&all);
        length = all.len() as u64;
        objects.put(path, all.into()).await.map_err(remote)?;
    } else {
        let mp = objects.put_multipart(path).await.map_err(remote)?;
        let mut w = WriteMultipart::new_with_chunk_size(mp, PART);
        let mut buf = vec![0u8; READ_CHUNK];
        let sent: Result<(), Error> = async {
            loop {
                let n = file.read(&mut buf).await.map_err(local)?;
                if n == 0 {
                    return Ok(());
                }
                update(&buf[..n]);
                length += n as u64;
                w.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(remote)?;
                w.write(&buf[..n]);
            }
        }
        .await;
        if let Err(e) = sent {
            if let Err(abort) = w.abort().await {
                tracing::warn!(%path, error = %abort, "could not abort a multipart upload");
            }
            return Err(e);
        }
        w.finish().await.map_err(remote)?;
    }
    if length != size {
        return Err(local(io::Error::other(format!(
            "read {length} bytes of a {size}-byte file"
        ))));
    }
    let (md5, sha256) = match hashers {
        Some((md5, sha256)) => (
            hex(HashAlgorithm::Md5, &md5.finalize()),
            hex(HashAlgorithm::Sha256, &sha256.finalize()),
        ),
        None => Default::default(),
    };
    Ok(Uploaded {
        length,
        md5,
        sha256,
    })
}

/// Lowercase hex, as `rs:md hash` values are written.
pub(crate) fn hex(algorithm: HashAlgorithm, digest: &[u8]) -> String {
    HashValue::from_bytes(algorithm, digest).digest
}

/// The entry of a dump document (Resource Dump 11.1, Change Dump 13.1) for package `p`:
/// `<loc>` the ZIP, `rs:md` `type`, `length` and `hash` of it besides the times in `md`,
/// and `rs:ln rel="contents"` to the copy of its manifest.
pub(crate) fn dump_entry(base_url: &str, p: &PackageInfo, md: Md) -> UrlEntry {
    UrlEntry {
        loc: format!("{base_url}{}", p.zip),
        md: Some(Md {
            hash: Some(hashes(&p.md5, &p.sha256)),
            length: Some(p.length),
            mime_type: Some("application/zip".into()),
            ..md
        }),
        links: vec![Link {
            mime_type: Some("application/xml".into()),
            ..Link::new("contents", format!("{base_url}{}", p.manifest))
        }],
        ..UrlEntry::default()
    }
}

/// The header of a dump document (`root` `<urlset>`) or of a dump index (`<sitemapindex>`):
/// `capability` with the document's times in `md` and the `up` link to the Capability
/// List, and for a part of an index (`index`: the index's path) the `index` link to it
/// (spec 11.1, 13.1).
fn dump_header(
    base_url: &str,
    root: Root,
    capability: Capability,
    md: Md,
    index: Option<&str>,
) -> Header {
    let mut header = Header::new(root, capability);
    if let Some(h) = header.md.as_mut() {
        h.at = md.at;
        h.completed = md.completed;
        h.from = md.from;
        h.until = md.until;
    }
    header.links.push(up_link(base_url));
    if let Some(index) = index {
        header
            .links
            .push(Link::new("index", format!("{base_url}{index}")));
    }
    header
}

/// Writes the dump document at `path` (`resourcedump.xml`, spec 11.1, or `changedump.xml`,
/// 13.1, or a part of their index, which `index` then names): a `capability` header with
/// the document's times in `md` and the `up` link to the Capability List (and the `index`
/// link), then one [`dump_entry`] per package with that package's times.
pub(crate) async fn write_dump_document<'a>(
    store: &dyn ObjectStore,
    base_url: &str,
    path: &str,
    capability: Capability,
    md: Md,
    index: Option<&str>,
    packages: impl Iterator<Item = (&'a PackageInfo, Md)>,
) -> Result<(), Error> {
    let header = dump_header(base_url, Root::Urlset, capability, md, index);
    let entries = packages.map(|(p, md)| dump_entry(base_url, p, md));
    put(store, path, document(&header, entries)).await?;
    Ok(())
}

/// Writes the dump index at `path` (a Resource Dump Index, spec 11.1, or a Change Dump
/// Index, 13.1): a `<sitemapindex>` with `capability`, the index's times in `md` and the
/// `up` link, then one `<sitemap>` per part (its object path) with that part's times.
pub(crate) async fn write_dump_index(
    store: &dyn ObjectStore,
    base_url: &str,
    path: &str,
    capability: Capability,
    md: Md,
    parts: impl Iterator<Item = (String, Md)>,
) -> Result<(), Error> {
    let header = dump_header(base_url, Root::Sitemapindex, capability, md, None);
    let entries = parts.map(|(part, md)| UrlEntry {
        loc: format!("{base_url}{part}"),
        md: Some(md),
        ..UrlEntry::default()
    });
    put(store, path, document(&header, entries)).await?;
    Ok(())
}

/// Unix seconds of `t`, the unit of the retired lists.
pub(crate) fn unix_secs(t: &W3cDateTime) -> i64 {
    t.instant().0
}

/// What the tests of the dumps share: a real store and state, real blobs, and readers that
/// check everything rsagg wrote (strict validation of every document, the safe package
/// reader, every item's bytes against its blob and the manifest's hashes).
#[cfg(test)]
pub(crate) mod testing {
    use std::io::{Read, Write};

    use bytes::Bytes;
    use futures::future::BoxFuture;
    use futures::stream::BoxStream;
    use rsagg_dump::{Limits, Package};
    use rsagg_model::Change;
    use rsagg_store::{
        Applied, BlobInfo, Commit, LogEntry, ResourceRecord, ResourceStatus, State, UpstreamMeta,
    };

    pub(crate) use super::hex;
    use super::*;
    pub use object_store::ObjectStoreExt;
    pub(crate) use rsagg_layout::testing::strict;
    pub use rsagg_model::HashAlgorithm;
    pub use rsagg_store::Blobs;

    pub const BASE: &str = "https://agg.example.org/c/";
    pub const UPSTREAM: &str = "up";
    const SET: &str = "http://up.example.org/capabilitylist.xml";

    /// A fresh in-memory store with a state opened on it.
    pub async fn store() -> (Arc<dyn ObjectStore>, State) {
        let objects = rsagg_store::open_object_store("memory://").unwrap().objects;
        let state = State::open(objects.clone(), "memory").await.unwrap();
        (objects, state)
    }

    /// A `file://` store in a new temporary directory (kept while the `TempDir` lives),
    /// with a state opened on it.
    pub async fn local_store() -> (tempfile::TempDir, rsagg_store::StoreLocation, State) {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let loc = rsagg_store::open_object_store(url.as_str()).unwrap();
        assert!(loc.local_root.is_some());
        let state = State::open(loc.objects.clone(), url.as_str())
            .await
            .unwrap();
        (dir, loc, state)
    }

    pub fn uri(name: &str) -> String {
        format!("http://up.example.org/res/{name}")
    }

    /// Stores `body` as a blob.
    pub async fn blob(objects: &Arc<dyn ObjectStore>, body: &[u8]) -> BlobInfo {
        let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(
            Bytes::copy_from_slice(body),
        )]);
        Blobs::new(objects.clone())
            .put_stream("test", chunks, false)
            .await
            .unwrap()
    }

    pub fn record(name: &str, copy: BlobInfo, status: ResourceStatus) -> ResourceRecord {
        ResourceRecord {
            upstream: UPSTREAM.into(),
            uri: uri(name),
            status,
            copy: Some(copy),
            mime_type: Some("text/plain".into()),
            set: SET.into(),
            lastmod: W3cDateTime::now(),
            seq: 0,
            // As real producers write them: a zone-less microsecond lastmod (read as UTC)
            // and a mixed-case relation; every document and manifest built from such a
            // record must still pass strict validation (checked by `read_package`).
            upstream_meta: UpstreamMeta {
                lastmod: Some(
                    W3cDateTime::parse("2018-11-06T17:41:16.901455")
                        .unwrap()
                        .value,
                ),
                links: vec![Link::new("describedBy", format!("{}.meta", uri(name)))],
                ..UpstreamMeta::default()
            },
        }
    }

    /// Stores `body` and commits the change of resource `name` to it.
    pub async fn change(
        objects: &Arc<dyn ObjectStore>,
        state: &State,
        name: &str,
        change: Change,
        body: &[u8],
    ) -> LogEntry {
        let status = if change == Change::Deleted {
            ResourceStatus::Deleted
        } else {
            ResourceStatus::Present
        };
        let copy = blob(objects, body).await;
        let record = record(name, copy, status);
        let mut written = state
            .commit(Commit {
                upstream: UPSTREAM.into(),
                set: SET.into(),
                changes: vec![Applied { change, record }],
                ..Commit::default()
            })
            .await
            .unwrap();
        written.pop().unwrap()
    }

    pub async fn get(objects: &Arc<dyn ObjectStore>, path: &str) -> Vec<u8> {
        objects
            .get(&Path::from(path))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .bytes()
            .await
            .unwrap()
            .to_vec()
    }

    pub async fn exists(objects: &Arc<dyn ObjectStore>, path: &str) -> bool {
        match objects.head(&Path::from(path)).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("{path}: {e}"),
        }
    }

    /// A real store (`inner`) on which every write takes `step` of a manual `clock`: the
    /// clock is moved on before each PUT (and each multipart upload) goes to `inner`, so a
    /// publish that writes several objects takes measurable time on the clock its times are
    /// read from, whatever the speed of the machine.
    #[derive(Debug)]
    pub struct Ticking {
        pub inner: Arc<dyn ObjectStore>,
        pub clock: rsagg_model::Clock,
        pub step: std::time::Duration,
    }

    impl std::fmt::Display for Ticking {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Ticking({})", self.inner)
        }
    }

    impl Ticking {
        fn tick(&self) {
            assert!(self.clock.advance(self.step), "a manual clock");
        }
    }

    // The trait's methods as `async_trait` declares them (this crate does not depend on it).
    impl ObjectStore for Ticking {
        fn put_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> BoxFuture<'async_trait, object_store::Result<object_store::PutResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move {
                self.tick();
                self.inner.put_opts(location, payload, opts).await
            })
        }

        fn put_multipart_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 Path,
            opts: object_store::PutMultipartOptions,
        ) -> BoxFuture<'async_trait, object_store::Result<Box<dyn object_store::MultipartUpload>>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move {
                self.tick();
                self.inner.put_multipart_opts(location, opts).await
            })
        }

        fn get_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 Path,
            options: object_store::GetOptions,
        ) -> BoxFuture<'async_trait, object_store::Result<object_store::GetResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.get_opts(location, options)
        }

        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
            self.inner.list(prefix)
        }

        fn list_with_delimiter<'life0, 'life1, 'async_trait>(
            &'life0 self,
            prefix: Option<&'life1 Path>,
        ) -> BoxFuture<'async_trait, object_store::Result<object_store::ListResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.list_with_delimiter(prefix)
        }

        fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            from: &'life1 Path,
            to: &'life2 Path,
            options: object_store::CopyOptions,
        ) -> BoxFuture<'async_trait, object_store::Result<()>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            'life2: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move {
                self.tick();
                self.inner.copy_opts(from, to, options).await
            })
        }
    }

    /// A package as read back, with the bytes of every item that has a bitstream.
    pub struct ReadBack {
        pub header: Header,
        pub entries: Vec<UrlEntry>,
        /// Per entry: the bytes in the ZIP (`None` for a deletion).
        pub bodies: Vec<Option<Vec<u8>>>,
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        hex(HashAlgorithm::Sha256, &sha2::Sha256::digest(bytes))
    }

    fn md5_hex(bytes: &[u8]) -> String {
        hex(HashAlgorithm::Md5, &md5::Md5::digest(bytes))
    }

    /// Reads the package `entry` of a dump document names (`<loc>` under [`BASE`]) back
    /// with the safe reader and checks it all: `length` and `hash` of the document's entry
    /// against the ZIP, no problems, every item's bytes against the manifest's `length` and
    /// `hash` and against the blob they claim to be, and the manifest copy the `contents`
    /// link names against the manifest in the package.
    pub async fn read_package(objects: &Arc<dyn ObjectStore>, entry: &UrlEntry) -> ReadBack {
        let zip_name = entry.loc.strip_prefix(BASE).unwrap();
        let zip = get(objects, zip_name).await;
        let md = entry.md.as_ref().unwrap();
        assert_eq!(md.length, Some(zip.len() as u64), "{zip_name}");
        assert_eq!(md.mime_type.as_deref(), Some("application/zip"));
        assert_eq!(
            md.hash.as_ref().unwrap(),
            &hashes(&md5_hex(&zip), &sha256_hex(&zip)),
            "{zip_name}"
        );
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&zip).unwrap();
        file.rewind().unwrap();
        let mut package = Package::open(file, zip_name, Limits::default()).unwrap();
        assert!(package.problems().is_empty(), "{:#?}", package.problems());
        let header = package.header().clone();
        let entries: Vec<UrlEntry> = package.entries().iter().map(|i| i.entry.clone()).collect();
        let mut bodies = Vec::new();
        for (i, item) in package.entries().to_vec().iter().enumerate() {
            if item.is_deletion() {
                assert!(item.path.is_none(), "a deletion has no path (spec 13.2)");
                bodies.push(None);
                continue;
            }
            let mut bytes = Vec::new();
            package
                .open_item(i)
                .unwrap()
                .read_to_end(&mut bytes)
                .unwrap();
            let md = item.entry.md.as_ref().unwrap();
            assert_eq!(md.length, Some(bytes.len() as u64));
            let sha = sha256_hex(&bytes);
            assert_eq!(md.hash.as_ref().unwrap(), &hashes(&md5_hex(&bytes), &sha));
            assert_eq!(
                get(objects, Blobs::path(&sha).as_ref()).await,
                bytes,
                "the blob"
            );
            bodies.push(Some(bytes));
        }
        // The manifest copy says the same as the manifest in the package (spec 11.1, 13.1).
        let contents = entry.link("contents").unwrap();
        assert_eq!(contents.mime_type.as_deref(), Some("application/xml"));
        let (copy_header, copy_entries) =
            strict(&get(objects, contents.href.strip_prefix(BASE).unwrap()).await);
        assert_eq!(copy_header, header);
        assert_eq!(copy_entries, entries);
        ReadBack {
            header,
            entries,
            bodies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_is_also_a_directory_of_another() {
        let mut n = Names::default();
        assert!(n.fits("/r/a/b"));
        n.insert("/r/a/b");
        assert!(!n.fits("/r/a/b"), "twice");
        assert!(!n.fits("/r/a"), "a directory of a file already in");
        assert!(!n.fits("/r"), "a directory of a file already in");
        assert!(!n.fits("/r/a/b/c"), "below a file already in");
        assert!(n.fits("/r/a/c"));
        assert!(n.fits("/r/ab"));
        assert!(!n.fits("/manifest.xml"), "reserved");
    }
}
