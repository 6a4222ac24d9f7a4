//! rsagg's Resource Dump (spec 11.1, 11.2): the whole collection as ZIP packages, rebuilt at
//! most every `publish.resource_dump_interval`.
//!
//! The dump is a snapshot: every present copy, each package holding at most
//! `dump_package_entries` resources and `dump_package_bytes` bitstream bytes (a single larger
//! resource gets a package of its own). Its manifest entries are the Resource List entries
//! (spec 14.8: rsagg's own URI, its own `lastmod` and hashes, the `via` link) plus the `path`
//! of the bitstream in the ZIP, which is the copy's URI path below `collection.base_url`
//! (`/r/{upstream}/{scheme}/{host}{path}`, unique by construction, see `uris.rs`), or
//! `/sha256/{hex}` when that is not a safe name in a ZIP.
//!
//! A rebuild is a new generation: its packages go under `resourcedump/g{gen}/` first, then
//! `resourcedump.xml` is replaced, so a reader never sees a dump naming packages that are not
//! there yet, nor a mix of generations. The previous generation stays fetchable for
//! `publish.grace` (a Destination may be half-way through it) and is deleted by a later
//! publish. `published/resourcedump.json` keeps what is out there; `resourcedump.xml` can be
//! rewritten from it alone, which is how a publish interrupted between the two recovers.
//!
//! A dump of more packages than one document may name (spec 7: 50,000;
//! [`DumpOptions::document_entries`]) is published as a Resource Dump Index (spec 11.1:
//! "it must group them using a Resource Dump Index"): `resourcedump.xml` is then a
//! `<sitemapindex>` with `capability="resourcedump"`, naming the generation's parts
//! `resourcedump/g{gen}/resourcedump-00001.xml`, … , each a Resource Dump of consecutive
//! packages with `rs:ln rel="up"` to the Capability List and `rel="index"` to the index.
//! The parts go up before the index, with the packages' generation, and are retired with it.
//!
//! Times (spec 11.1, Appendix A), all from the state's clock: the dump's (or index's) `at`
//! is when the rebuild began, before its listing of the collection started; a package's
//! `at` is when its first item was planned and its `completed` when its last bitstream had
//! been read; a part's `at` and `completed` are those of its first and last package (which
//! its index entry repeats); the dump's `completed` is taken once every package and part
//! was stored. So every package's and part's interval lies within the dump's.

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use rsagg_model::{Capability, Header, Md, Root, W3cDateTime};
use rsagg_store::documents::{get_json, put_json, sweep_retired};
use rsagg_store::{State, StoreLocation};

use tokio::sync::{mpsc, oneshot};

use crate::Error;
use crate::entry::{MAX_DOCUMENT_ENTRIES, resource_entry};
use crate::links::LinkPolicy;
use crate::package::{self, Body, Item};
use crate::previous::Previous;
use rsagg_config::PublishConfig;
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::report::*;

/// How [`publish`] goes about a dump.
#[derive(Debug, Clone, Copy)]
pub struct DumpOptions {
    /// Rebuild it whatever `publish.resource_dump_interval` says.
    pub force: bool,
    /// Most packages one document names (clamped to 1..=50,000, spec 7); a dump with more is
    /// published as a Resource Dump Index of parts of at most this many packages.
    pub document_entries: u64,
}

impl DumpOptions {
    /// The spec's bound, rebuilt when `force` or due.
    pub fn new(force: bool) -> Self {
        DumpOptions {
            force,
            document_entries: MAX_DOCUMENT_ENTRIES,
        }
    }

    fn per_document(&self) -> usize {
        self.document_entries.clamp(1, MAX_DOCUMENT_ENTRIES) as usize
    }
}

fn generation_prefix(generation: u64) -> String {
    format!("resourcedump/g{generation}/")
}

/// The object path of part `k` (from 1) of generation `generation`'s Resource Dump Index.
fn part_path(generation: u64, k: usize) -> String {
    format!("{}resourcedump-{k:05}.xml", generation_prefix(generation))
}

/// Publishes the Resource Dump of the collection at `base_url` from `state` into `objects`
/// when it is due: `None` when `cfg.resource_dump` is off or (unless `opts.force`) the last
/// dump is younger than `cfg.resource_dump_interval` (by the state's clock). Retired generations past `cfg.grace` are
/// deleted either way. Blobs are read as `crate::package` reads them from `store`: kept ones
/// from memory, a `file://` store's as files. What it tells the publish steps beside it
/// (when it stops reading the state, which changes it holds) goes through `signals`.
pub async fn publish(
    state: &State,
    location: &StoreLocation,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
    opts: DumpOptions,
    signals: Signals,
) -> Result<Option<ResourceDumpReport>, Error> {
    let Signals { listed, holds } = signals;
    if !cfg.resource_dump {
        return Ok(None);
    }
    let per_document = opts.per_document();
    let store = location.objects.as_ref();
    let mut meta: ResourceDumpMeta = get_json(store, RESOURCE_DUMP_META)
        .await?
        .unwrap_or_default();
    let clock = state.clock();
    let start = clock.now();
    let mut dirty = false;
    if meta.doc_pending {
        write_parts(store, base_url, &meta, per_document).await?;
        write_top(store, base_url, &meta, per_document).await?;
        meta.doc_pending = false;
        dirty = true;
    }
    let due = opts.force
        || meta.current.is_none()
        || meta.at.is_none_or(|at| {
            start.unix_nanos() - at.unix_nanos() >= cfg.resource_dump_interval.as_nanos() as i128
        });
    if !due {
        let swept = sweep_retired(
            store,
            &mut meta.retired,
            package::unix_secs(&start),
            cfg.grace,
        )
        .await?;
        if dirty || swept > 0 {
            put_json(store, RESOURCE_DUMP_META, &meta).await?;
        }
        return Ok(None);
    }

    // A new generation. Its number is recorded before anything is written under it, and
    // generations an interrupted publish left behind are retired.
    let generation = meta.generation + 1;
    meta.generation = generation;
    let now = package::unix_secs(&start);
    for g in meta.clean_upto + 1..generation {
        let prefix = generation_prefix(g);
        if meta.current != Some(g) && !meta.retired.iter().any(|(p, _)| *p == prefix) {
            meta.retired.push((prefix, now));
        }
    }
    put_json(store, RESOURCE_DUMP_META, &meta).await?;
    // Read before the listing starts: every change up to it is applied, so the listing sees
    // it (or a later version). Nobody waiting is not an error.
    let _ = holds.send(state.last_seq().await);

    let (packages, report) = build(state, location, base_url, policy, cfg, &meta, listed).await?;
    // An index names at most 50,000 parts (spec 7) of `per_document` packages each.
    let most = per_document.saturating_mul(MAX_DOCUMENT_ENTRIES as usize);
    if packages.len() > most {
        return Err(Error::Dump(rsagg_dump::Error::Invalid {
            package: RESOURCE_DUMP.into(),
            section: "11.1",
            message: format!(
                "the collection needs more than {most} packages (a Resource Dump Index of \
                 {MAX_DOCUMENT_ENTRIES} full parts); raise publish.dump_package_bytes or \
                 publish.dump_package_entries"
            ),
        }));
    }
    // The spool served this dump; the next one is a day away (`resource_dump_interval`),
    // and the spool is bounded: it keeps what is stored from now on instead.
    location.spool.clear().await;
    let old = meta.current.replace(generation);
    meta.clean_upto = generation - 1;
    meta.at = Some(start);
    meta.packages = packages;
    // An index's parts, under the new generation (which no document names yet); then the
    // dump's making has ended.
    write_parts(store, base_url, &meta, per_document).await?;
    let done = clock.now();
    if let Some(old) = old {
        meta.retired
            .push((generation_prefix(old), package::unix_secs(&done)));
    }
    meta.completed = Some(if done.cmp_instant(&start).is_lt() {
        start
    } else {
        done
    });
    meta.doc_pending = true;
    put_json(store, RESOURCE_DUMP_META, &meta).await?;
    write_top(store, base_url, &meta, per_document).await?;
    meta.doc_pending = false;
    sweep_retired(
        store,
        &mut meta.retired,
        package::unix_secs(&done),
        cfg.grace,
    )
    .await?;
    put_json(store, RESOURCE_DUMP_META, &meta).await?;
    Ok(Some(report))
}

/// What a Resource Dump tells the publish steps running beside it.
#[derive(Debug)]
pub struct Signals {
    /// Dropped once the dump no longer reads the state (its listing ended, or no dump is
    /// due), so that the caller can flush the state while the last package is finished.
    pub listed: oneshot::Sender<()>,
    /// Sent, when a dump is built, the last change-log sequence number it holds (every change
    /// up to it is visible to its listing), before the listing starts; dropped otherwise.
    /// The Change Dumps leave a baseline to that dump (`crate::changedump`).
    pub holds: oneshot::Sender<u64>,
}

impl Signals {
    /// Signals nobody waits for.
    pub fn unheard() -> Self {
        Signals {
            listed: oneshot::channel().0,
            holds: oneshot::channel().0,
        }
    }
}

/// Builds and uploads the packages of `meta.generation`: every present copy, in slot order,
/// cut at the configured bounds, the bitstreams of the dump out there (`meta.current`'s
/// packages) copied from it.
///
/// Listing the copies (a state lookup and a Resource List entry each) and building the
/// packages overlap: [`plan`] sends each package's items as it finds them and
/// [`Packages::make`] builds from them as they come, so the listing takes no time of its own
/// beside the build.
async fn build(
    state: &State,
    location: &StoreLocation,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
    meta: &ResourceDumpMeta,
    listed: oneshot::Sender<()>,
) -> Result<(Vec<DumpPackage>, ResourceDumpReport), Error> {
    let previous = Previous::new(location.objects.clone(), &meta.packages);
    let clock = state.clock();
    let mut out = Packages {
        location,
        clock,
        // What the harvest before spooled.
        spool: location.spool.reader().await,
        previous: previous.map(tokio::sync::Mutex::new),
        base_url,
        generation: meta.generation,
        packages: Vec::new(),
        report: ResourceDumpReport::default(),
    };
    let (tx, rx) = mpsc::channel(PLAN_QUEUE);
    let listing = async {
        let planned = plan(state, base_url, policy, cfg, clock, tx).await;
        drop(listed);
        planned
    };
    let (planned, made) = tokio::join!(listing, out.make(rx));
    // The plan's error first: a package it stopped feeding fails for that reason.
    planned?;
    made?;
    if let Some(previous) = out.previous.take().map(tokio::sync::Mutex::into_inner) {
        out.report.copied = previous.copied;
        out.report.unusable = previous.unusable;
    }
    Ok((out.packages, out.report))
}

/// The error of a package whose items stopped coming: the listing failed, and its own error
/// is what gets reported.
fn abandoned() -> Error {
    Error::Io {
        what: "building the resource dump".into(),
        source: std::io::Error::other("the listing of the collection stopped"),
    }
}

/// Items planned ahead of the package builder.
const PLAN_QUEUE: usize = 256;

/// What [`plan`] tells the package builder, in order.
enum Planned {
    /// A new package starts, its resources collected from this time on (`rs:md at`).
    Package(W3cDateTime),
    /// The next item of the current package.
    Item(Box<Item>),
    /// Every package was planned. Without it (the plan failed) the last package is given up.
    Done,
}

/// Lists every present copy, in slot order, as the items of packages cut at the configured
/// bounds, into `tx`.
async fn plan(
    state: &State,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
    clock: &rsagg_model::Clock,
    tx: mpsc::Sender<Planned>,
) -> Result<(), Error> {
    let mut count = 0u64;
    let mut bytes = 0u64;
    // Looked up LOOKUPS_AHEAD at a time, in slot order.
    let mut records = std::pin::pin!(
        state
            .present_records_with_slots(0..=u16::MAX, crate::resourcelist::LOOKUPS_AHEAD)
            .await?
    );
    while let Some((slot, upstream, record)) = records.try_next().await? {
        let targets = crate::entry::held_targets(
            state,
            base_url,
            &upstream,
            &record.upstream_meta.links,
            policy,
        )
        .await?;
        let held = |u: &str| targets.get(u).cloned();
        let (Some(entry), Some(copy)) = (
            resource_entry(base_url, &record, policy, held),
            record.copy.as_ref(),
        ) else {
            continue;
        };
        let full = count >= cfg.dump_package_entries.max(1)
            || bytes.saturating_add(copy.length) > cfg.dump_package_bytes;
        if count == 0 || full {
            if tx.send(Planned::Package(clock.now())).await.is_err() {
                // The builder failed; its error is reported.
                return Ok(());
            }
            (count, bytes) = (0, 0);
        }
        // `own_uri` builds every `<loc>` on `base_url`, so the rest is the copy's path.
        let own_path = entry.loc.strip_prefix(base_url).unwrap_or(&entry.loc);
        let item = Item {
            body: Some(Body {
                sha256: copy.sha256.clone(),
                length: copy.length,
                path: format!("/{own_path}"),
                fallback: format!("/sha256/{}", copy.sha256),
                slot: Some(slot),
            }),
            entry,
        };
        if tx.send(Planned::Item(Box::new(item))).await.is_err() {
            return Ok(());
        }
        count += 1;
        bytes = bytes.saturating_add(copy.length);
    }
    // A builder gone has its own error.
    let _ = tx.send(Planned::Done).await;
    Ok(())
}

/// The items of one package as [`Packages::make`] reads them from the plan: up to the next
/// package or the end of the plan (which is left in `next`), or an error when the plan stops
/// without saying it is done. A hand-written stream rather than `unfold` over borrowed
/// state, whose future is not `Send` for every lifetime, which a publish step run as a task
/// of its own needs (see `publisher.rs`).
struct PackageItems<'a> {
    rx: &'a mut mpsc::Receiver<Planned>,
    next: &'a mut Option<Planned>,
    /// The slots of the first and the last item so far, for the next rebuild
    /// ([`DumpPackage::slots`]).
    slots: &'a mut Option<[u16; 2]>,
    ended: bool,
}

impl futures::Stream for PackageItems<'_> {
    type Item = Result<Item, Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return std::task::Poll::Ready(None);
        }
        std::task::Poll::Ready(match std::task::ready!(this.rx.poll_recv(cx)) {
            Some(Planned::Item(item)) => {
                if let Some(slot) = item.body.as_ref().and_then(|b| b.slot) {
                    let first = this.slots.map_or(slot, |[first, _]| first);
                    *this.slots = Some([first, slot]);
                }
                Some(Ok(*item))
            }
            Some(end @ (Planned::Package(_) | Planned::Done)) => {
                *this.next = Some(end);
                this.ended = true;
                None
            }
            None => {
                this.ended = true;
                Some(Err(abandoned()))
            }
        })
    }
}

/// The packages of one generation as they are made.
struct Packages<'a> {
    location: &'a StoreLocation,
    /// The state's clock, which the packages' times are read from.
    clock: &'a rsagg_model::Clock,
    /// The bodies the run spooled, read in slot order.
    spool: Option<rsagg_store::SpoolReader>,
    /// The previous dump's packages, copied from where they hold a bitstream.
    previous: Option<tokio::sync::Mutex<Previous>>,
    base_url: &'a str,
    generation: u64,
    packages: Vec<DumpPackage>,
    report: ResourceDumpReport,
}

impl Packages<'_> {
    /// Builds the packages `rx` plans, one after the other.
    async fn make(&mut self, mut rx: mpsc::Receiver<Planned>) -> Result<(), Error> {
        let mut next = rx.recv().await;
        loop {
            let at = match next.take() {
                Some(Planned::Package(at)) => at,
                // Nothing to dump, or every package made.
                Some(Planned::Done) => return Ok(()),
                // The plan failed (its error is reported), or went wrong.
                None | Some(Planned::Item(_)) => return Err(abandoned()),
            };
            // The package's items: up to the next package or the end, which is kept in
            // `next`; an error when the plan stops without saying it is done.
            let mut slots = None;
            let items = PackageItems {
                rx: &mut rx,
                next: &mut next,
                slots: &mut slots,
                ended: false,
            };
            let mut made = self.flush(items, at).await?;
            made.slots = slots;
            self.packages.push(made);
        }
    }

    /// Builds and uploads the next package from `items`; the caller adds it to `packages`.
    async fn flush(
        &mut self,
        items: impl futures::Stream<Item = Result<Item, Error>> + Send,
        at: W3cDateTime,
    ) -> Result<DumpPackage, Error> {
        let k = self.packages.len() + 1;
        let mut header = Header::new(Root::Urlset, Capability::ResourceDumpManifest);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(at);
        }
        header.links.push(up_link(self.base_url));
        let prefix = generation_prefix(self.generation);
        let zip = Path::from(format!("{prefix}part-{k:05}.zip"));
        let manifest = Path::from(format!("{prefix}part-{k:05}-manifest.xml"));
        let started = std::time::Instant::now();
        let built = package::build(
            self.location,
            self.spool.as_ref(),
            self.previous.as_ref(),
            package::ManifestHeader {
                header,
                clock: self.clock.clone(),
            },
            items,
            &zip,
            &manifest,
        )
        .await?;
        self.report.packages += 1;
        self.report.resources += built.info.entries;
        self.report.bytes += built.info.length;
        self.report.skipped += built.info.skipped;
        tracing::debug!(
            package = %zip,
            entries = built.info.entries,
            bytes = built.info.length,
            seconds = started.elapsed().as_secs_f64(),
            "resource dump package written"
        );
        Ok(DumpPackage {
            info: built.info,
            at,
            completed: built.completed,
            // Set by `make`, whose item stream sees the items go by.
            slots: None,
        })
    }
}

fn md(at: Option<W3cDateTime>, completed: Option<W3cDateTime>) -> Md {
    Md {
        at,
        completed,
        ..Md::default()
    }
}

/// The packages of `meta` cut into the parts of a Resource Dump Index, with each part's
/// `at` (its first package's) and `completed` (its last package's); empty when one document
/// holds them all.
fn parts_of(meta: &ResourceDumpMeta, per_document: usize) -> Vec<(&[DumpPackage], Md)> {
    if meta.packages.len() <= per_document {
        return Vec::new();
    }
    meta.packages
        .chunks(per_document)
        .map(|c| {
            let (first, last) = (&c[0], &c[c.len() - 1]);
            (c, md(Some(first.at), Some(last.completed)))
        })
        .collect()
}

/// When `meta`'s packages are more than one document may name, the parts of its Resource
/// Dump Index (spec 11.1), under its generation's folder: each a Resource Dump of
/// consecutive packages, with `up` and `index` links; nothing otherwise.
async fn write_parts(
    store: &dyn ObjectStore,
    base_url: &str,
    meta: &ResourceDumpMeta,
    per_document: usize,
) -> Result<(), Error> {
    let Some(generation) = meta.current else {
        return Ok(());
    };
    for (k, (packages, times)) in parts_of(meta, per_document).into_iter().enumerate() {
        package::write_dump_document(
            store,
            base_url,
            &part_path(generation, k + 1),
            Capability::ResourceDump,
            times,
            Some(RESOURCE_DUMP),
            packages
                .iter()
                .map(|p| (&p.info, md(Some(p.at), Some(p.completed)))),
        )
        .await?;
    }
    Ok(())
}

/// `resourcedump.xml` from `meta` (spec 11.1): `at`/`completed` of the snapshot, then one
/// entry per package with its `at`, `completed`, `length`, `type`, `hash` and the link to its
/// manifest copy; or, with more packages than one document may name, the Resource Dump
/// Index naming the parts [`write_parts`] wrote, each with its `at` and `completed`.
async fn write_top(
    store: &dyn ObjectStore,
    base_url: &str,
    meta: &ResourceDumpMeta,
    per_document: usize,
) -> Result<(), Error> {
    let parts = parts_of(meta, per_document);
    match meta.current {
        Some(generation) if !parts.is_empty() => {
            package::write_dump_index(
                store,
                base_url,
                RESOURCE_DUMP,
                Capability::ResourceDump,
                md(meta.at, meta.completed),
                parts
                    .into_iter()
                    .enumerate()
                    .map(|(k, (_, times))| (part_path(generation, k + 1), times)),
            )
            .await
        }
        _ => {
            package::write_dump_document(
                store,
                base_url,
                RESOURCE_DUMP,
                Capability::ResourceDump,
                md(meta.at, meta.completed),
                None,
                meta.packages
                    .iter()
                    .map(|p| (&p.info, md(Some(p.at), Some(p.completed)))),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use rsagg_model::{Change, UrlEntry};

    use super::*;
    use crate::package::testing::*;

    fn cfg(entries: u64, bytes: u64) -> PublishConfig {
        PublishConfig {
            dump_package_entries: entries,
            dump_package_bytes: bytes,
            ..PublishConfig::default()
        }
    }

    async fn run(
        objects: &Arc<dyn ObjectStore>,
        state: &State,
        cfg: &PublishConfig,
        force: bool,
    ) -> Option<ResourceDumpReport> {
        let (listed, mut listing) = oneshot::channel();
        let (holds, mut held) = oneshot::channel();
        let report = publish(
            state,
            &StoreLocation::new("memory://", objects.clone()),
            BASE,
            &LinkPolicy::default(),
            cfg,
            DumpOptions::new(force),
            Signals { listed, holds },
        )
        .await
        .unwrap();
        // The end of the listing is signalled (by dropping the sender) whether a dump was
        // due or not: a caller waiting on it to flush the state must not wait forever.
        assert_eq!(
            listing.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
        // A dump built says which changes it holds (all of them here: nothing changes
        // while it is built); none built, nobody is kept waiting.
        match &report {
            Some(_) => assert_eq!(held.try_recv(), Ok(state.last_seq().await)),
            None => assert_eq!(held.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
        }
        report
    }

    /// A forced rebuild on a local store, its blobs read as files under `root` when given.
    async fn run_local(
        objects: &Arc<dyn ObjectStore>,
        root: Option<&std::path::Path>,
        state: &State,
        cfg: &PublishConfig,
    ) -> ResourceDumpReport {
        let location = StoreLocation {
            local_root: root.map(ToOwned::to_owned),
            ..StoreLocation::new("file://", objects.clone())
        };
        publish(
            state,
            &location,
            BASE,
            &LinkPolicy::default(),
            cfg,
            DumpOptions::new(true),
            Signals::unheard(),
        )
        .await
        .unwrap()
        .unwrap()
    }

    /// `resourcedump.xml`, strictly valid, with every package read back and checked.
    /// Returns the packages' names and, per package, its manifest entries with their bytes.
    /// Removes the blobs of `shas` from the store (so that a dump can only take them from
    /// memory or the spool).
    async fn forget_blobs(objects: &Arc<dyn ObjectStore>, shas: &[String]) {
        for sha in shas {
            objects.delete(&Blobs::path(sha)).await.unwrap();
        }
    }

    /// Removes the packages of the dump out there (so that a rebuild cannot copy from them);
    /// returns how many.
    async fn forget_dump(objects: &Arc<dyn ObjectStore>) -> u64 {
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap_or_default();
        for p in &meta.packages {
            objects
                .delete(&Path::from(p.info.zip.as_str()))
                .await
                .unwrap();
        }
        meta.packages.len() as u64
    }

    /// A forced Resource Dump of `state` at `location`, packages of `entries`.
    async fn dump_at(state: &State, location: &StoreLocation, entries: u64) -> ResourceDumpReport {
        publish(
            state,
            location,
            BASE,
            &LinkPolicy::default(),
            &cfg(entries, 1 << 30),
            DumpOptions::new(true),
            Signals::unheard(),
        )
        .await
        .unwrap()
        .unwrap()
    }

    /// The published dump holds exactly `bodies` (any order). The blobs are put back first,
    /// so that `dump` can check every item against its blob.
    async fn assert_dump_holds(objects: &Arc<dyn ObjectStore>, mut want: Vec<Vec<u8>>) {
        for b in &want {
            blob(objects, b).await;
        }
        let (_, packages) = dump(objects).await;
        let mut got: Vec<Vec<u8>> = packages.into_iter().flatten().map(|(_, b)| b).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    async fn dump(objects: &Arc<dyn ObjectStore>) -> (Vec<String>, Vec<Vec<(UrlEntry, Vec<u8>)>>) {
        let (header, entries) = strict(&get(objects, RESOURCE_DUMP).await);
        assert_eq!(header.capability(), Some(&Capability::ResourceDump));
        let md = header.md.as_ref().unwrap();
        let (at, completed) = (md.at.unwrap(), md.completed.unwrap());
        assert!(completed.cmp_instant(&at).is_ge());
        assert_eq!(
            header.link("up").unwrap().href,
            format!("{BASE}capabilitylist.xml")
        );
        let mut names = Vec::new();
        let mut packages = Vec::new();
        for e in &entries {
            names.push(e.loc.strip_prefix(BASE).unwrap().to_owned());
            let back = read_package(objects, e).await;
            assert_eq!(
                back.header.capability(),
                Some(&Capability::ResourceDumpManifest)
            );
            let pmd = back.header.md.as_ref().unwrap();
            assert_eq!(Some(pmd.at.unwrap()), e.md.as_ref().unwrap().at);
            assert!(pmd.completed.is_some());
            packages.push(
                back.entries
                    .into_iter()
                    .zip(back.bodies)
                    .map(|(e, b)| (e, b.expect("a resource dump has a bitstream per entry")))
                    .collect(),
            );
        }
        (names, packages)
    }

    fn body(i: usize, len: usize) -> Vec<u8> {
        let mut b = format!("resource {i} ").into_bytes();
        b.resize(len.max(b.len()), b'0' + (i % 10) as u8);
        b
    }

    fn times(md: Option<&Md>) -> (W3cDateTime, W3cDateTime) {
        let md = md.expect("an rs:md");
        (md.at.expect("at"), md.completed.expect("completed"))
    }

    /// `a` lies within `b` (both `(at, completed)`), and each is `at` to a later `completed`.
    fn within(a: (W3cDateTime, W3cDateTime), b: (W3cDateTime, W3cDateTime), what: &str) {
        assert!(a.1.cmp_instant(&a.0).is_ge(), "{what}: {a:?}");
        assert!(b.1.cmp_instant(&b.0).is_ge(), "{what}: {b:?}");
        assert!(
            a.0.cmp_instant(&b.0).is_ge() && a.1.cmp_instant(&b.1).is_le(),
            "{what}: {a:?} not within {b:?}"
        );
    }

    /// Spec 11.1: a dump of more packages than one document may name is a Resource Dump
    /// Index (`<sitemapindex>`, `capability="resourcedump"`) of Resource Dumps of consecutive
    /// packages, each with `up` to the Capability List and `index` to the index, strictly
    /// valid; every package is read back whole. Times: the index's `at` is when the rebuild
    /// began, its `completed` after every package and part was stored (every write takes a
    /// second of the state's clock, so it is later); each index entry says what its part
    /// says, and each package's interval lies within its part's, each part's within the
    /// index's. A rebuild that fits one document is a plain Resource Dump again.
    #[tokio::test]
    async fn more_packages_than_one_document_names_make_a_resource_dump_index() {
        let (inner, mut state) = store().await;
        let clock = rsagg_model::Clock::manual(W3cDateTime::now());
        state.set_clock(clock.clone());
        let objects: Arc<dyn ObjectStore> = Arc::new(Ticking {
            inner: inner.clone(),
            clock: clock.clone(),
            step: Duration::from_secs(1),
        });
        let mut bodies = Vec::new();
        for i in 0..7 {
            change(
                &inner,
                &state,
                &i.to_string(),
                Change::Created,
                &body(i, 20),
            )
            .await;
            bodies.push(body(i, 20));
        }
        let location = StoreLocation::new("memory://", objects.clone());
        let opts = DumpOptions {
            force: true,
            document_entries: 3,
        };
        let started = clock.now();
        let report = publish(
            &state,
            &location,
            BASE,
            &LinkPolicy::default(),
            &cfg(1, 1 << 20),
            opts,
            Signals::unheard(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!((report.packages, report.resources), (7, 7));

        let (header, parts) = strict(&get(&objects, RESOURCE_DUMP).await);
        assert_eq!(header.root, Root::Sitemapindex);
        assert_eq!(header.capability(), Some(&Capability::ResourceDump));
        assert_eq!(
            header.link("up").unwrap().href,
            format!("{BASE}capabilitylist.xml")
        );
        let index = times(header.md.as_ref());
        assert_eq!(index.0, started, "`at`: when the rebuild began");
        assert!(
            index.1.cmp_instant(&index.0).is_gt(),
            "{index:?}: it took time"
        );
        let names: Vec<&str> = parts
            .iter()
            .map(|e| e.loc.strip_prefix(BASE).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "resourcedump/g1/resourcedump-00001.xml",
                "resourcedump/g1/resourcedump-00002.xml",
                "resourcedump/g1/resourcedump-00003.xml"
            ]
        );
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        for (e, name) in parts.iter().zip(&names) {
            let (part, packages) = strict(&get(&objects, name).await);
            assert_eq!(part.root, Root::Urlset);
            assert_eq!(part.capability(), Some(&Capability::ResourceDump));
            assert_eq!(
                part.link("up").unwrap().href,
                format!("{BASE}capabilitylist.xml")
            );
            assert_eq!(
                part.link("index").unwrap().href,
                format!("{BASE}{RESOURCE_DUMP}")
            );
            let part_times = times(part.md.as_ref());
            assert_eq!(times(e.md.as_ref()), part_times, "{name}: as the part says");
            within(part_times, index, name);
            sizes.push(packages.len());
            for p in &packages {
                let back = read_package(&objects, p).await;
                let package_times = times(back.header.md.as_ref());
                assert_eq!(times(p.md.as_ref()), package_times, "{}", p.loc);
                within(package_times, part_times, &p.loc);
                got.extend(back.bodies.into_iter().map(Option::unwrap));
            }
        }
        assert_eq!(sizes, [3, 3, 1]);
        got.sort();
        bodies.sort();
        assert_eq!(got, bodies, "every resource once");

        // Rebuilt within one document's bound: a Resource Dump again, its parts' generation
        // retired with the packages.
        let report = publish(
            &state,
            &location,
            BASE,
            &LinkPolicy::default(),
            &cfg(10, 1 << 20),
            opts,
            Signals::unheard(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(report.packages, 1);
        let (names, _) = dump(&objects).await;
        assert_eq!(names, ["resourcedump/g2/part-00001.zip"]);
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.retired[0].0, "resourcedump/g1/");
        state.close().await.unwrap();
    }

    #[tokio::test]
    async fn packages_are_cut_by_entries_and_every_item_is_the_resource_list_entry_plus_path() {
        let (objects, state) = store().await;
        for i in 0..7 {
            change(
                &objects,
                &state,
                &i.to_string(),
                Change::Created,
                &body(i, 20),
            )
            .await;
        }
        let report = run(&objects, &state, &cfg(3, 1 << 20), false)
            .await
            .unwrap();
        assert_eq!(
            (report.packages, report.resources, report.skipped),
            (3, 7, 0)
        );
        let (names, packages) = dump(&objects).await;
        assert_eq!(
            names,
            [
                "resourcedump/g1/part-00001.zip",
                "resourcedump/g1/part-00002.zip",
                "resourcedump/g1/part-00003.zip"
            ]
        );
        let sizes: Vec<usize> = packages.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let zip_bytes: u64 = {
            let mut n = 0;
            for name in &names {
                n += get(&objects, name).await.len() as u64;
            }
            n
        };
        assert_eq!(report.bytes, zip_bytes);
        // Every present resource once, described as in the Resource List, at its own path.
        let mut seen = BTreeMap::new();
        for (entry, bytes) in packages.into_iter().flatten() {
            let record = state
                .resource(UPSTREAM, &uri(entry.loc.rsplit('/').next().unwrap()))
                .await
                .unwrap()
                .unwrap();
            // Its `.meta` is not held: the link keeps the upstream's href.
            let mut expected =
                resource_entry(BASE, &record, &LinkPolicy::default(), |_| None).unwrap();
            let own_path = expected.loc.strip_prefix(BASE).unwrap().to_owned();
            expected.md.as_mut().unwrap().path = Some(format!("/{own_path}"));
            assert_eq!(entry, expected);
            let name = entry.loc.rsplit('/').next().unwrap();
            assert_eq!(own_path, format!("r/up/http/up.example.org/res/{name}"));
            assert!(seen.insert(entry.loc, bytes).is_none(), "listed twice");
        }
        assert_eq!(seen.len(), 7);
    }

    #[tokio::test]
    async fn packages_are_cut_by_bytes_and_an_oversized_resource_gets_one_of_its_own() {
        let (objects, state) = store().await;
        // Slot order decides the order in the dump; sizes by name.
        let sizes = [("a", 30), ("b", 30), ("big", 500), ("c", 30), ("d", 30)];
        for (i, (name, len)) in sizes.iter().enumerate() {
            change(&objects, &state, name, Change::Created, &body(i, *len)).await;
        }
        let report = run(&objects, &state, &cfg(100, 70), true).await.unwrap();
        assert_eq!(report.resources, 5);
        let (_, packages) = dump(&objects).await;
        let mut big_alone = false;
        for p in &packages {
            let total: usize = p.iter().map(|(_, b)| b.len()).sum();
            if p.iter().any(|(e, _)| e.loc.ends_with("/big")) {
                assert_eq!(p.len(), 1, "the oversized resource shares its package");
                big_alone = true;
            } else {
                assert!(total <= 70, "{total} bytes in a package bounded at 70");
            }
        }
        assert!(big_alone);
        // 4 × 30 bytes never fit two in 70 with the big one between: 2 + 1 + 2 at best.
        assert!(packages.len() >= 3, "{} packages", packages.len());
        assert_eq!(packages.iter().map(Vec::len).sum::<usize>(), 5);
    }

    #[tokio::test]
    async fn the_dump_waits_for_its_interval_unless_forced_and_is_off_when_disabled() {
        let (objects, state) = store().await;
        change(&objects, &state, "1", Change::Created, b"one").await;
        let c = PublishConfig {
            resource_dump_interval: Duration::from_secs(3600),
            ..cfg(10, 1 << 20)
        };
        assert!(
            run(&objects, &state, &c, false).await.is_some(),
            "the first is due"
        );
        let first = get(&objects, RESOURCE_DUMP).await;
        change(&objects, &state, "2", Change::Created, b"two").await;
        assert_eq!(run(&objects, &state, &c, false).await, None, "not due yet");
        assert_eq!(get(&objects, RESOURCE_DUMP).await, first, "left alone");
        let forced = run(&objects, &state, &c, true).await.unwrap();
        assert_eq!(forced.resources, 2);
        let (names, _) = dump(&objects).await;
        assert_eq!(names, ["resourcedump/g2/part-00001.zip"]);
        // An interval of zero is always due.
        let always = PublishConfig {
            resource_dump_interval: Duration::ZERO,
            ..c.clone()
        };
        assert!(run(&objects, &state, &always, false).await.is_some());
        let off = PublishConfig {
            resource_dump: false,
            ..c
        };
        assert_eq!(run(&objects, &state, &off, true).await, None);
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.current, Some(3), "disabled leaves the dump as it was");
    }

    #[tokio::test]
    async fn a_new_generation_replaces_the_old_one_which_goes_after_the_grace_period() {
        let (objects, state) = store().await;
        change(&objects, &state, "1", Change::Created, b"one").await;
        let long = PublishConfig {
            grace: Duration::from_secs(3600),
            ..cfg(10, 1 << 20)
        };
        run(&objects, &state, &long, true).await.unwrap();
        run(&objects, &state, &long, true).await.unwrap();
        let (names, _) = dump(&objects).await;
        assert_eq!(names, ["resourcedump/g2/part-00001.zip"]);
        // Within the grace period the previous generation is still there.
        assert!(exists(&objects, "resourcedump/g1/part-00001.zip").await);
        assert!(exists(&objects, "resourcedump/g1/part-00001-manifest.xml").await);
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.retired.len(), 1);
        assert_eq!(meta.retired[0].0, "resourcedump/g1/");

        let none = PublishConfig {
            grace: Duration::ZERO,
            ..long
        };
        run(&objects, &state, &none, true).await.unwrap();
        let (names, _) = dump(&objects).await;
        assert_eq!(names, ["resourcedump/g3/part-00001.zip"]);
        for gone in [
            "g1/part-00001.zip",
            "g1/part-00001-manifest.xml",
            "g2/part-00001.zip",
        ] {
            assert!(
                !exists(&objects, &format!("resourcedump/{gone}")).await,
                "{gone}"
            );
        }
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert!(meta.retired.is_empty(), "{:?}", meta.retired);
        assert!(!meta.doc_pending);
    }

    #[tokio::test]
    async fn a_generation_an_interrupted_publish_left_behind_is_retired() {
        let (objects, state) = store().await;
        change(&objects, &state, "1", Change::Created, b"one").await;
        let c = PublishConfig {
            grace: Duration::ZERO,
            ..cfg(10, 1 << 20)
        };
        run(&objects, &state, &c, true).await.unwrap();
        // A publish that reserved generation 2, wrote a package and died.
        let mut meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        meta.generation = 2;
        put_json(objects.as_ref(), RESOURCE_DUMP_META, &meta)
            .await
            .unwrap();
        let orphan = Path::from("resourcedump/g2/part-00001.zip");
        objects
            .put(&orphan, b"partial".to_vec().into())
            .await
            .unwrap();
        run(&objects, &state, &c, true).await.unwrap();
        let (names, _) = dump(&objects).await;
        assert_eq!(names, ["resourcedump/g3/part-00001.zip"]);
        assert!(!exists(&objects, orphan.as_ref()).await);
        assert!(!exists(&objects, "resourcedump/g1/part-00001.zip").await);
    }

    #[tokio::test]
    async fn deleted_resources_are_not_in_the_dump() {
        let (objects, state) = store().await;
        for name in ["1", "2", "3"] {
            change(&objects, &state, name, Change::Created, name.as_bytes()).await;
        }
        change(&objects, &state, "2", Change::Deleted, b"2").await;
        let report = run(&objects, &state, &cfg(10, 1 << 20), true)
            .await
            .unwrap();
        assert_eq!(report.resources, 2);
        let (_, packages) = dump(&objects).await;
        let mut locs: Vec<String> = packages.into_iter().flatten().map(|(e, _)| e.loc).collect();
        locs.sort();
        assert_eq!(
            locs,
            [
                format!("{BASE}r/up/http/up.example.org/res/1"),
                format!("{BASE}r/up/http/up.example.org/res/3")
            ]
        );
    }

    #[tokio::test]
    async fn corrupt_and_missing_blobs_are_left_out_and_counted() {
        let (objects, state) = store().await;
        let mut sha = BTreeMap::new();
        for (name, body) in [
            ("1", "shared"),
            ("2", "two"),
            ("3", "three"),
            ("4", "shared"),
        ] {
            let e = change(&objects, &state, name, Change::Created, body.as_bytes()).await;
            sha.insert(name, e.copy.unwrap().sha256);
        }
        // Same length, other bytes.
        let bad = sha["2"].clone();
        let mut corrupted = get(&objects, Blobs::path(&bad).as_ref()).await;
        corrupted[0] ^= 1;
        objects
            .put(&Blobs::path(&bad), corrupted.into())
            .await
            .unwrap();
        objects.delete(&Blobs::path(&sha["3"])).await.unwrap();
        // Names 1 and 4 have the same body: one blob, both in the dump.
        let report = run(&objects, &state, &cfg(10, 1 << 20), true)
            .await
            .unwrap();
        assert_eq!((report.resources, report.skipped), (2, 2));
        let (_, packages) = dump(&objects).await;
        let mut locs: Vec<String> = packages
            .into_iter()
            .flatten()
            .map(|(e, _)| e.loc.rsplit('/').next().unwrap().to_owned())
            .collect();
        locs.sort();
        assert_eq!(locs, ["1", "4"]);
    }

    #[tokio::test]
    async fn corrupt_and_missing_blobs_of_a_local_store_are_left_out_too() {
        // A local store's blobs are read as files by one reader thread when its root is
        // known (`read_local`), else through `objects.get` and verified by the writer thread
        // (`Spool::Local`), not through the stream the other stores use: both are checked.
        let (_dir, loc, state) = local_store().await;
        let objects = loc.objects.clone();
        let mut sha = BTreeMap::new();
        // Larger than what is read into memory, and incompressible (the safe reader refuses
        // a high compression ratio).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let long: Vec<u8> = (0..package::IN_MEMORY + 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for (name, body) in [
            ("1", b"one".as_slice()),
            ("2", b"two"),
            ("3", b"three"),
            ("4", &long),
            ("5", b"five, longer than its record says"),
        ] {
            let e = change(&objects, &state, name, Change::Created, body).await;
            sha.insert(name, e.copy.unwrap().sha256);
        }
        let bad = sha["2"].clone();
        let mut corrupted = get(&objects, Blobs::path(&bad).as_ref()).await;
        corrupted[0] ^= 1;
        objects
            .put(&Blobs::path(&bad), corrupted.into())
            .await
            .unwrap();
        objects.delete(&Blobs::path(&sha["3"])).await.unwrap();
        // Longer than its address says: the bytes are the record's plus more.
        let five = Blobs::path(&sha["5"]);
        let mut longer = get(&objects, five.as_ref()).await;
        longer.extend_from_slice(b" and more");
        objects.put(&five, longer.into()).await.unwrap();
        for root in [None, loc.local_root.as_deref()] {
            let report = run_local(&objects, root, &state, &cfg(10, 1 << 30)).await;
            assert_eq!((report.resources, report.skipped), (2, 3), "{root:?}");
            let (_, packages) = dump(&objects).await;
            let mut got: Vec<(String, usize)> = packages
                .into_iter()
                .flatten()
                .map(|(e, b)| (e.loc.rsplit('/').next().unwrap().to_owned(), b.len()))
                .collect();
            got.sort();
            assert_eq!(got, [("1".to_owned(), 3), ("4".to_owned(), long.len())]);
        }
        state.close().await.unwrap();
    }

    /// A rebuild takes every unchanged bitstream from the previous dump's packages (copied
    /// as it is) and reads only the changed ones: with the blobs of every unchanged resource
    /// gone from the store, the rebuilt dump is still whole. The next previous package is
    /// fetched while the items are in the one before. A previous package whose bytes are
    /// not those published, whether fetched ahead or not, is not copied from: its resources
    /// are read from the blobs. A remote store and a `file://` one alike (two read paths).
    #[tokio::test]
    async fn a_rebuild_copies_unchanged_bitstreams_from_the_previous_dump() {
        let (objects, state) = store().await;
        let location = StoreLocation::new("memory://", objects.clone());
        rebuild_copies(objects, state, location).await;
        let (_dir, location, state) = local_store().await;
        rebuild_copies(location.objects.clone(), state, location).await;
        // Previous packages too large to be held in memory are copied from a file.
        crate::previous::TEST_IN_MEMORY.with(|n| n.set(Some(0)));
        let (_dir, location, state) = local_store().await;
        rebuild_copies(location.objects.clone(), state, location).await;
        crate::previous::TEST_IN_MEMORY.with(|n| n.set(None));
    }

    async fn rebuild_copies(objects: Arc<dyn ObjectStore>, state: State, location: StoreLocation) {
        use sha2::Digest;
        let mut bodies = BTreeMap::new();
        for i in 0..12 {
            let b = body(i, 300);
            change(&objects, &state, &i.to_string(), Change::Created, &b).await;
            bodies.insert(i.to_string(), b);
        }
        let first = dump_at(&state, &location, 4).await;
        assert_eq!((first.packages, first.resources, first.copied), (3, 12, 0));
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        let slots: Vec<[u16; 2]> = meta.packages.iter().map(|p| p.slots.unwrap()).collect();
        assert!(
            slots.windows(2).all(|w| w[0][1] <= w[1][0]) && slots.iter().all(|[a, b]| a <= b),
            "packages cut in slot order (neighbours may share a slot): {slots:?}"
        );

        // 3 updated, 5 deleted, "new" created; the other nine unchanged, their blobs gone.
        let updated = body(103, 300);
        change(&objects, &state, "3", Change::Updated, &updated).await;
        change(&objects, &state, "5", Change::Deleted, &bodies["5"]).await;
        let created = body(200, 300);
        change(&objects, &state, "new", Change::Created, &created).await;
        bodies.insert("3".into(), updated);
        bodies.remove("5");
        bodies.insert("new".into(), created);
        let unchanged: Vec<String> = (0..12)
            .filter(|i| ![3, 5].contains(i))
            .map(|i| {
                let digest = sha2::Sha256::digest(body(i as usize, 300));
                package::hex(rsagg_model::HashAlgorithm::Sha256, &digest)
            })
            .collect();
        forget_blobs(&objects, &unchanged).await;
        let second = dump_at(&state, &location, 4).await;
        assert_eq!(
            (
                second.resources,
                second.copied,
                second.skipped,
                second.unusable
            ),
            (12, 10, 0, 0),
            "{second:?}"
        );
        assert_dump_holds(&objects, bodies.values().cloned().collect()).await;

        // The next previous package is fetched while the items are in the one before.
        let meta: ResourceDumpMeta = get_json(objects.as_ref(), RESOURCE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.packages.len(), 3);
        let mut previous = crate::previous::Previous::new(objects.clone(), &meta.packages)
            .expect("every package records its slots");
        assert_eq!(previous.fetching_ahead(), None);
        let first = meta.packages[0].slots.unwrap()[0];
        assert!(previous.find(first, "not a digest").await.is_none());
        assert_eq!(previous.fetching_ahead(), Some(1));
        let second = meta.packages[1].slots.unwrap()[0];
        assert!(previous.find(second, "not a digest").await.is_none());
        assert_eq!((previous.fetching_ahead(), previous.unusable), (Some(2), 0));
        drop(previous);

        // Previous packages altered after they were published, the first (fetched when
        // the items reach it) and the last (fetched ahead): not copied from.
        let altered = [&meta.packages[0], &meta.packages[2]];
        for p in altered {
            let mut zip = get(&objects, &p.info.zip).await;
            let last = zip.len() - 1;
            zip[last] ^= 1;
            objects
                .put(&Path::from(p.info.zip.as_str()), zip.into())
                .await
                .unwrap();
        }
        let third = dump_at(&state, &location, 4).await;
        assert_eq!(
            (third.resources, third.skipped, third.unusable),
            (12, 0, 2),
            "{third:?}"
        );
        assert_eq!(
            third.copied,
            12 - altered[0].info.entries - altered[1].info.entries,
            "{third:?}"
        );
        assert_dump_holds(&objects, bodies.into_values().collect()).await;
        state.close().await.unwrap();
    }

    /// What a run stored is kept in memory ([`StoreLocation::recent`]) and the dump takes it
    /// from there, on both read paths: with every blob gone from the store, the dump is still
    /// whole, and without the kept bodies the same dump leaves them all out.
    #[tokio::test]
    async fn blobs_kept_from_the_harvest_are_not_read_back() {
        let (_dir, loc, state) = local_store().await;
        let objects = loc.objects.clone();
        let mut kept = loc.clone();
        kept.recent = rsagg_store::RecentBlobs::with_capacity(1 << 20);
        let blobs = Blobs::for_location(&kept);
        let mut shas = Vec::new();
        for i in 0..5 {
            let b = body(i, 300);
            change(&objects, &state, &i.to_string(), Change::Created, &b).await;
            let chunks =
                futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(b))]);
            shas.push(
                blobs
                    .put_stream("test", chunks, false)
                    .await
                    .unwrap()
                    .sha256,
            );
        }
        assert_eq!(kept.recent.len(), 5);
        let remote = StoreLocation {
            local_root: None,
            ..kept.clone()
        };
        for location in [&kept, &remote] {
            forget_blobs(&objects, &shas).await;
            let report = dump_at(&state, location, 100).await;
            assert_eq!((report.resources, report.skipped), (5, 0));
            assert_dump_holds(&objects, (0..5).map(|i| body(i, 300)).collect()).await;
        }
        forget_blobs(&objects, &shas).await;
        forget_dump(&objects).await;
        let report = run_local(
            &objects,
            loc.local_root.as_deref(),
            &state,
            &cfg(100, 1 << 30),
        )
        .await;
        assert_eq!((report.resources, report.skipped), (0, 5));
        state.close().await.unwrap();
    }

    /// What a harvest stored is spooled on local disk by slot and the dump takes it from
    /// there (issue 24: a baseline reads nothing back): with every blob gone from the store
    /// and nothing kept in memory, the dump is still whole, and clears the spool after it;
    /// without the spool the same dump leaves them all out. A remote store and a `file://`
    /// one alike: at 10^7 resources a local store's blob files outgrow the page cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_spooled_by_the_harvest_are_not_read_back() {
        let (objects, state) = store().await;
        let location = StoreLocation::new("memory://", objects.clone());
        spooled_bodies_are_not_read_back(objects, state, location).await;
        let (_dir, location, state) = local_store().await;
        assert!(location.local_root.is_some());
        spooled_bodies_are_not_read_back(location.objects.clone(), state, location).await;
    }

    async fn spooled_bodies_are_not_read_back(
        objects: Arc<dyn ObjectStore>,
        state: State,
        location: StoreLocation,
    ) {
        let parent = tempfile::tempdir().unwrap();
        let location =
            location.with_spool(rsagg_store::Spool::open(parent.path(), 1 << 20).unwrap());
        let blobs = Blobs::for_location(&location);
        let n = 300;
        let mut shas = Vec::new();
        for i in 0..n {
            let b = body(i, 200);
            change(&objects, &state, &i.to_string(), Change::Created, &b).await;
            let chunks =
                futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(b))]);
            let stored = blobs
                .put_resource(UPSTREAM, &uri(&i.to_string()), chunks, false)
                .await
                .unwrap();
            shas.push(stored.sha256);
        }
        forget_blobs(&objects, &shas).await;
        let report = dump_at(&state, &location, 64).await;
        assert_eq!((report.resources, report.skipped), (n as u64, 0));
        assert_eq!(location.spool.used(), 0, "cleared after the dump");
        assert_dump_holds(&objects, (0..n).map(|i| body(i, 200)).collect()).await;
        // Nothing spooled any more, nothing in the store, no previous dump to copy from:
        // all left out.
        forget_blobs(&objects, &shas).await;
        let packages = forget_dump(&objects).await;
        let report = dump_at(&state, &location, 64).await;
        assert_eq!(
            (report.resources, report.skipped, report.unusable),
            (0, n as u64, packages)
        );
        state.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_local_stores_blobs_read_as_files_come_in_manifest_order_across_batches() {
        // More items than one batch of the local reader holds, with a missing blob and a
        // deleted resource among them.
        let (_dir, loc, state) = local_store().await;
        let objects = loc.objects.clone();
        let n = package::BATCH * 2 + 7;
        let mut missing = None;
        for i in 0..n {
            let e = change(
                &objects,
                &state,
                &i.to_string(),
                Change::Created,
                &body(i, 100),
            )
            .await;
            if i == package::BATCH {
                missing = Some(e.copy.unwrap().sha256);
            }
        }
        change(&objects, &state, "3", Change::Deleted, &body(3, 100)).await;
        objects
            .delete(&Blobs::path(&missing.unwrap()))
            .await
            .unwrap();
        let report = run_local(
            &objects,
            loc.local_root.as_deref(),
            &state,
            &cfg(1000, 1 << 30),
        )
        .await;
        assert_eq!(
            (report.packages, report.resources, report.skipped),
            (1, n as u64 - 2, 1)
        );
        // `dump` checks every item's bytes against the manifest and the blob.
        let (_, packages) = dump(&objects).await;
        let mut names: Vec<usize> = packages[0]
            .iter()
            .map(|(e, b)| {
                let i: usize = e.loc.rsplit('/').next().unwrap().parse().unwrap();
                assert_eq!(*b, body(i, 100));
                i
            })
            .collect();
        names.sort_unstable();
        let expected: Vec<usize> = (0..n).filter(|&i| i != 3 && i != package::BATCH).collect();
        assert_eq!(names, expected);
        state.close().await.unwrap();
    }

    #[tokio::test]
    async fn names_that_cannot_be_files_fall_back_to_the_sha256_path() {
        let (objects, state) = store().await;
        // A trailing slash gives an empty last component; `dir` and `dir/x` cannot both be
        // files. Slot order decides which of those two comes first.
        change(&objects, &state, "dir/", Change::Created, b"index").await;
        change(&objects, &state, "dir", Change::Created, b"a file").await;
        change(&objects, &state, "dir/x", Change::Created, b"below").await;
        let report = run(&objects, &state, &cfg(10, 1 << 20), true)
            .await
            .unwrap();
        assert_eq!((report.resources, report.skipped), (3, 0));
        let (_, packages) = dump(&objects).await;
        let paths: BTreeMap<String, String> = packages
            .into_iter()
            .flatten()
            .map(|(e, bytes)| {
                let path = e.md.unwrap().path.unwrap();
                (String::from_utf8(bytes).unwrap(), path)
            })
            .collect();
        let sha_path = |body: &[u8]| {
            format!(
                "/sha256/{}",
                hex(
                    HashAlgorithm::Sha256,
                    &<sha2::Sha256 as md5::Digest>::digest(body)
                )
            )
        };
        assert_eq!(paths["index"], sha_path(b"index"));
        let own = |name: &str| format!("/r/up/http/up.example.org/res/{name}");
        let (file, below) = (&paths["a file"], &paths["below"]);
        assert!(
            (*file == own("dir") && *below == sha_path(b"below"))
                || (*file == sha_path(b"a file") && *below == own("dir/x")),
            "{paths:?}"
        );
    }

    #[tokio::test]
    async fn a_package_larger_than_an_upload_part_goes_up_in_parts_on_a_local_store() {
        let (_dir, loc, state) = local_store().await;
        let objects = loc.objects.clone();
        // Incompressible, so the ZIP is larger than one part.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let big: Vec<u8> = (0..(package::PART + (1 << 20)))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        change(&objects, &state, "big", Change::Created, &big).await;
        change(&objects, &state, "small", Change::Created, b"small").await;
        // The large blob goes to the writer as an open file (not held in memory).
        let report = run_local(
            &objects,
            loc.local_root.as_deref(),
            &state,
            &cfg(10, 1 << 30),
        )
        .await;
        assert_eq!((report.packages, report.resources), (1, 2));
        assert!(
            report.bytes > package::PART as u64,
            "{} bytes",
            report.bytes
        );
        let (_, packages) = dump(&objects).await;
        let bodies: Vec<usize> = packages[0].iter().map(|(_, b)| b.len()).collect();
        assert!(bodies.contains(&big.len()), "{bodies:?}");
        state.close().await.unwrap();
    }
}
