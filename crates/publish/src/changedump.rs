//! rsagg's Change Dump (spec 13.1, 13.2): a ZIP package of the bitstreams of every closed
//! Change List.
//!
//! A closed Change List (spec 12.1: it has `until`) never changes again, so its package is
//! made once and never rewritten: every change the list records, in the same forward
//! chronological order (13.2), with the bitstream of exactly that version (the log entry's
//! copy, not the resource's current one) under `/changes/{seq}/{copy path}`, so a resource
//! that changed several times has one bitstream per change at distinct paths. Deletions are
//! listed without `path` and without a bitstream (13.2). A list whose bitstreams exceed the
//! package bounds is cut into consecutive packages: the first starts at the list's `from`,
//! each next one at its first change's `datetime` (which is the previous one's `until`), the
//! last ends at the list's `until` — rsagg's change datetimes are strictly increasing, so a
//! cut never falls inside a run of equal instants.
//!
//! Manifest entries describe rsagg's copies as its Change Lists do (spec 14.8): `<loc>` is
//! rsagg's URI, `datetime` and `lastmod` are rsagg's, `hash`/`length`/`type` are those of the
//! copy in the package, and the `via` link names the upstream resource — with the upstream's
//! metadata (and the inherited links the policy lets through) only while the resource's
//! record is still at that change, since older upstream metadata is not kept.
//!
//! A collection's baseline is not packaged twice: when Change Dumps begin (the first publish
//! with `publish.change_dumps`), the closed lists whose changes a Resource Dump built in the
//! same publish holds get no package (unless `publish.change_dump_baseline`). A Destination
//! starting from scratch takes that Resource Dump (spec 11), then the Change Dumps from its
//! `at`; the Change Lists still list every change. Rebuilding the Resource Dump later leaves
//! nothing out: packages, once begun, follow every closed list.
//!
//! `changedump.xml` lists the packages of the Change Lists still retained (the closed lists
//! of `published/changelist.json`, written by the Change List publisher), oldest first;
//! packages of lists dropped by retention leave the document and are deleted after
//! `publish.grace`. `published/changedump.json` records what is out there; it is written
//! before `changedump.xml`, which can be rewritten from it alone.
//!
//! With more packages than one document may name (spec 7: 50,000; the publish option
//! `document_entries`), `changedump.xml` is a Change Dump Index (spec 13.1: "it must group
//! them in a Change Dump Index"): a `<sitemapindex>` with `capability="changedump"` and the
//! `from` of its first package, naming parts `changedump/dumps-g{gen}-{k}.xml` in forward
//! chronological order, each with its `from` and (all but the last) `until`. A part is a
//! Change Dump of consecutive packages (`rs:ln rel="up"` to the Capability List,
//! `rel="index"` to the index), with the `from` of its first package and, unless it is the
//! last, the `until` of its last one; the last part has none, as packages are added after
//! it. A part is immutable: packages added, or dropped by retention, make new parts of what
//! changed (the last part, the first), written under a new name, and the parts they
//! replace are retired, so a publish rewrites the index and at most a few parts.

use std::collections::HashSet;

use object_store::ObjectStore;
use object_store::path::Path;
use rsagg_model::{Capability, Change, Header, Md, Root, W3cDateTime};
use rsagg_store::documents::{get_json, put_json, sweep_retired};
use rsagg_store::{LogEntry, State, StoreLocation};
use tokio::sync::oneshot;

use crate::Error;
use crate::entry::{MAX_DOCUMENT_ENTRIES, change_entry};
use crate::links::LinkPolicy;
use crate::package::{self, Body, Item};
use rsagg_config::PublishConfig;
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::report::*;
use rsagg_layout::uris::own_uri;

/// Publishes the Change Dump of the collection at `base_url`: a package for every closed
/// Change List that has none yet, `changedump.xml`, and the retention of packages whose
/// list was dropped. With `cfg.change_dumps` off nothing is made or changed.
///
/// `resource_dump` gives the last change-log sequence number a Resource Dump built in the
/// same publish holds (its sender is dropped when none is built). It is awaited only the
/// first time Change Dumps are published: unless `cfg.change_dump_baseline`, the closed
/// lists that dump holds whole are left to it (see [`ChangeDumpMeta::left_to_resource_dump`]).
///
/// A `file://` store's blobs are read as files on one thread (see `package::build`).
///
/// `document_entries` is the most packages one document names (clamped to 1..=50,000);
/// beyond, `changedump.xml` is a Change Dump Index of parts of at most that many.
pub async fn publish(
    state: &State,
    location: &StoreLocation,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
    document_entries: u64,
    resource_dump: oneshot::Receiver<u64>,
) -> Result<ChangeDumpReport, Error> {
    let objects = &location.objects;
    let store = objects.as_ref();
    let per_document = document_entries.clamp(1, MAX_DOCUMENT_ENTRIES) as usize;
    // An index names at most 50,000 parts (spec 7).
    let most = per_document.saturating_mul(MAX_DOCUMENT_ENTRIES as usize);
    let clock = state.clock();
    let stored: Option<ChangeDumpMeta> = get_json(store, CHANGE_DUMP_META).await?;
    let beginning = stored.is_none();
    // The very first publish writes the document even when there is nothing to list yet.
    let mut dirty = beginning;
    let mut meta = stored.unwrap_or_default();
    // An interrupted publish may not have written every part its metadata names.
    let recovering = meta.doc_pending;
    let mut report = ChangeDumpReport::default();
    if !cfg.change_dumps {
        report.packages_total = count(&meta);
        return Ok(report);
    }
    if beginning && !cfg.change_dump_baseline {
        // Change Dumps begin. Whatever a Resource Dump of this publish holds (the baseline)
        // a Destination gets from it; packaging it again would read every body back once
        // more. Decided once (recorded before any package), so a later dump never leaves out
        // changes that follow packages already published. No dump built: the sender is gone.
        meta.left_to_resource_dump = resource_dump.await.unwrap_or(0);
        meta.doc_pending = true;
        put_json(store, CHANGE_DUMP_META, &meta).await?;
    }
    dirty |= meta.doc_pending;
    let lists: ChangeListsMeta = get_json(store, CHANGE_LISTS_META)
        .await?
        .unwrap_or_default();

    // Retention: the Change List publisher dropped these lists; their packages follow.
    let retained: HashSet<&str> = lists.closed.iter().map(|c| c.name.as_str()).collect();
    let now = package::unix_secs(&clock.now());
    let mut kept = Vec::with_capacity(meta.lists.len());
    for l in std::mem::take(&mut meta.lists) {
        if retained.contains(l.name.as_str()) {
            kept.push(l);
            continue;
        }
        for p in &l.packages {
            meta.retired.push((p.info.zip.clone(), now));
            meta.retired.push((p.info.manifest.clone(), now));
        }
        report.dropped += l.packages.len() as u64;
        dirty = true;
    }
    meta.lists = kept;

    for list in &lists.closed {
        if left_to_resource_dump(&meta, list) {
            report.left_to_resource_dump += u64::from(beginning);
            continue;
        }
        if meta.lists.iter().any(|l| l.name == list.name) {
            continue;
        }
        if count(&meta) as usize >= most {
            return Err(too_many(most));
        }
        let (packages, skipped) = build_list(state, location, base_url, policy, cfg, list).await?;
        report.packages_now += packages.len() as u64;
        report.skipped += skipped;
        meta.lists.push(DumpedList {
            name: list.name.clone(),
            first_seq: list.first_seq,
            last_seq: list.last_seq,
            packages,
        });
        // Lists come oldest first, but one closed while dumps were off may be older than
        // lists already dumped.
        meta.lists.sort_by_key(|l| l.first_seq);
        // Recorded at once: packages are never made twice, even if a later list fails.
        meta.doc_pending = true;
        dirty = true;
        put_json(store, CHANGE_DUMP_META, &meta).await?;
    }
    if count(&meta) as usize > most {
        return Err(too_many(most));
    }

    if dirty {
        // The parts an index needs now, replacing those whose packages changed; recorded
        // before any of them is written, so a publish interrupted on the way writes them
        // again.
        let now = package::unix_secs(&clock.now());
        let write = plan_parts(&mut meta, per_document, now, recovering);
        meta.doc_pending = true;
        put_json(store, CHANGE_DUMP_META, &meta).await?;
        write_document(store, base_url, &meta, &lists, &write).await?;
        meta.doc_pending = false;
    }
    let now = package::unix_secs(&clock.now());
    let swept = sweep_retired(store, &mut meta.retired, now, cfg.grace).await?;
    if dirty || swept > 0 {
        put_json(store, CHANGE_DUMP_META, &meta).await?;
    }
    report.packages_total = count(&meta);
    Ok(report)
}

/// Whether closed list `list` gets no package: the Resource Dump built when Change Dumps
/// began holds all of its changes.
fn left_to_resource_dump(meta: &ChangeDumpMeta, list: &ClosedList) -> bool {
    list.last_seq <= meta.left_to_resource_dump
}

fn count(meta: &ChangeDumpMeta) -> u64 {
    meta.lists.iter().map(|l| l.packages.len() as u64).sum()
}

fn too_many(most: usize) -> Error {
    Error::Dump(rsagg_dump::Error::Invalid {
        package: CHANGE_DUMP.into(),
        section: "13.1",
        message: format!(
            "more than {most} Change Dump packages (a Change Dump Index of \
             {MAX_DOCUMENT_ENTRIES} full parts); retain fewer closed Change Lists \
             (publish.changelist_retain)"
        ),
    })
}

/// Brings `meta.parts` in line with `meta.lists`: none while one document holds every
/// package, else the parts of a Change Dump Index of at most `per_document` packages each.
/// A part published before is kept when it still names the same consecutive packages and
/// is still the last part, or still not (what its document says: with or without
/// `until`); the packages between kept parts are cut into new parts, named with a new
/// generation. Parts no longer kept are retired at `now`. Returns the indexes in
/// `meta.parts` of the parts to write (every part when `all`: an interrupted publish may
/// not have written those its metadata names).
fn plan_parts(meta: &mut ChangeDumpMeta, per_document: usize, now: i64, all: bool) -> Vec<usize> {
    let zips: Vec<&str> = meta
        .lists
        .iter()
        .flat_map(|l| l.packages.iter().map(|p| p.info.zip.as_str()))
        .collect();
    let total = zips.len();
    let old = std::mem::take(&mut meta.parts);
    if total <= per_document {
        meta.retired.extend(old.into_iter().map(|p| (p.name, now)));
        return Vec::new();
    }
    let at: std::collections::HashMap<&str, usize> =
        zips.iter().enumerate().map(|(i, z)| (*z, i)).collect();
    // The parts kept, each with the position of its first package.
    let mut kept = Vec::new();
    let mut cursor = 0usize;
    let mut retired = Vec::new();
    for part in old {
        let start = at.get(part.first.as_str()).copied();
        let end = start.map(|s| s + part.packages as usize);
        let keep = match (start, end) {
            (Some(start), Some(end)) => {
                part.packages > 0
                    && part.packages as usize <= per_document
                    && start >= cursor
                    && end <= total
                    && zips[end - 1] == part.last
                    && part.open == (end == total)
            }
            _ => false,
        };
        match (keep, start, end) {
            (true, Some(start), Some(end)) => {
                kept.push((start, part));
                cursor = end;
            }
            _ => retired.push(part),
        }
    }
    meta.retired
        .extend(retired.into_iter().map(|p| (p.name, now)));
    // New parts for the runs of packages between kept parts.
    let generation = meta.generation + 1;
    let mut fresh = 0usize;
    let mut parts = Vec::new();
    let mut write = Vec::new();
    let mut next = 0usize;
    let mut cut =
        |from: usize, to: usize, parts: &mut Vec<ChangeDumpPart>, write: &mut Vec<usize>| {
            let mut a = from;
            while a < to {
                let b = (a + per_document).min(to);
                fresh += 1;
                write.push(parts.len());
                parts.push(ChangeDumpPart {
                    name: format!("{CHANGE_DUMP_DIR}/dumps-g{generation:06}-{fresh:05}.xml"),
                    first: zips[a].to_owned(),
                    last: zips[b - 1].to_owned(),
                    packages: (b - a) as u64,
                    open: b == total,
                });
                a = b;
            }
        };
    for (start, part) in kept {
        cut(next, start, &mut parts, &mut write);
        next = start + part.packages as usize;
        if all {
            write.push(parts.len());
        }
        parts.push(part);
    }
    cut(next, total, &mut parts, &mut write);
    if fresh > 0 {
        meta.generation = generation;
    }
    write.sort_unstable();
    meta.parts = parts;
    write
}

/// Makes the packages of closed list `list`: its log entries in order, cut at the package
/// bounds into consecutive sub-intervals. Returns them with the number of changes left out.
async fn build_list(
    state: &State,
    location: &StoreLocation,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
    list: &ClosedList,
) -> Result<(Vec<ChangePackage>, u64), Error> {
    let stem = package_stem(list);
    let mut packages = Vec::new();
    let mut skipped = 0u64;
    let mut batch: Vec<Item> = Vec::new();
    let mut batch_bytes = 0u64;
    let mut from = list.from;
    let mut log = state.log(list.first_seq).await?;
    while let Some(change) = log.next().await? {
        if change.seq > list.last_seq {
            break;
        }
        let bytes = match (&change.change, &change.copy) {
            (Change::Deleted, _) | (_, None) => 0,
            (_, Some(copy)) => copy.length,
        };
        let full = batch.len() as u64 >= cfg.dump_package_entries.max(1)
            || batch_bytes.saturating_add(bytes) > cfg.dump_package_bytes;
        if !batch.is_empty() && full {
            // The next package starts with this change: its datetime is the cut.
            let until = latest(from, change.at);
            let items = std::mem::take(&mut batch);
            make(location, base_url, &stem, &mut packages, items, from, until).await?;
            batch_bytes = 0;
            from = until;
        }
        match change_item(state, base_url, policy, &change).await? {
            Some(item) => {
                batch.push(item);
                batch_bytes = batch_bytes.saturating_add(bytes);
            }
            None => skipped += 1,
        }
    }
    // The last (or only) package ends where the list ends; a list without changes still gets
    // its (empty) package, so the packages' intervals stay contiguous.
    let until = latest(from, list.until);
    make(location, base_url, &stem, &mut packages, batch, from, until).await?;
    skipped += packages.iter().map(|p| p.info.skipped).sum::<u64>();
    Ok((packages, skipped))
}

fn latest(a: W3cDateTime, b: W3cDateTime) -> W3cDateTime {
    if b.cmp_instant(&a).is_lt() { a } else { b }
}

/// The object name stem of a list's packages: from its log range, which closed lists never
/// share, in characters safe in any URL and object store.
fn package_stem(list: &ClosedList) -> String {
    format!(
        "changedump/changes-{:012}-{:012}",
        list.first_seq, list.last_seq
    )
}

/// Makes the next package of a list (named from `stem`) of `items`, covering `from` to
/// `until`, and appends it to `packages`.
async fn make(
    location: &StoreLocation,
    base_url: &str,
    stem: &str,
    packages: &mut Vec<ChangePackage>,
    items: Vec<Item>,
    from: W3cDateTime,
    until: W3cDateTime,
) -> Result<(), Error> {
    let k = packages.len() + 1;
    let mut header = Header::new(Root::Urlset, Capability::ChangeDumpManifest);
    if let Some(md) = header.md.as_mut() {
        md.from = Some(from);
        md.until = Some(until);
    }
    header.links.push(up_link(base_url));
    let zip = Path::from(format!("{stem}-{k:03}.zip"));
    let manifest = Path::from(format!("{stem}-{k:03}-manifest.xml"));
    // Not from the spool: a Change Dump's items come in log order, not slot order.
    let built = package::build(
        location,
        None,
        None,
        package::ManifestHeader {
            header,
            // Read for a manifest's `completed` only, which a Change Dump Manifest
            // (from/until) has not.
            clock: rsagg_model::Clock::system(),
        },
        futures::stream::iter(items.into_iter().map(Ok)),
        &zip,
        &manifest,
    )
    .await?;
    tracing::debug!(
        package = %zip,
        entries = built.info.entries,
        bytes = built.info.length,
        "change dump package written"
    );
    packages.push(ChangePackage {
        info: built.info,
        from,
        until,
    });
    Ok(())
}

/// The Change Dump Manifest entry of one logged change (spec 13.2): the change's entry as
/// the Change Lists have it ([`change_entry`]), with its bitstream for a creation or update;
/// `None` (warned) when it cannot be described.
async fn change_item(
    state: &State,
    base_url: &str,
    policy: &LinkPolicy,
    change: &LogEntry,
) -> Result<Option<Item>, Error> {
    let Some(loc) = own_uri(base_url, &change.upstream, &change.uri) else {
        tracing::warn!(upstream = %change.upstream, uri = %change.uri, seq = change.seq,
            "no URI of rsagg's own for this change; left out of the change dump");
        return Ok(None);
    };
    // Entries logged by an older rsagg need the record (see `change_entry`).
    let record = match change.upstream_meta {
        Some(_) => None,
        None => state.resource(&change.upstream, &change.uri).await?,
    };
    let body = match (&change.change, &change.copy) {
        (Change::Deleted, _) => None,
        (_, None) => {
            tracing::warn!(upstream = %change.upstream, uri = %change.uri, seq = change.seq,
                "a logged creation or update without a copy; left out of the change dump");
            return Ok(None);
        }
        (_, Some(copy)) => {
            let own_path = loc.strip_prefix(base_url).unwrap_or(&loc);
            Some(Body {
                sha256: copy.sha256.clone(),
                length: copy.length,
                path: format!("/changes/{}/{own_path}", change.seq),
                fallback: format!("/changes/{}/sha256/{}", change.seq, copy.sha256),
                slot: None,
            })
        }
    };
    let links = crate::entry::change_links(change, record.as_ref());
    let held = crate::entry::held_targets(state, base_url, &change.upstream, links, policy).await?;
    Ok(
        change_entry(base_url, change, record.as_ref(), policy, &held)
            .map(|entry| Item { entry, body }),
    )
}

/// `changedump.xml` from `meta` (spec 13.1): open (no `until`, packages are added as lists
/// close), `from` the first package's `from` — or, before there is a package, where the
/// first one will start (the first closed list not left to the Resource Dump, else the open
/// Change List's `from`), else now.
async fn write_document(
    store: &dyn ObjectStore,
    base_url: &str,
    meta: &ChangeDumpMeta,
    lists: &ChangeListsMeta,
    write: &[usize],
) -> Result<(), Error> {
    let packages = || meta.lists.iter().flat_map(|l| l.packages.iter());
    let from = packages()
        .next()
        .map(|p| p.from)
        .or(lists
            .closed
            .iter()
            .find(|c| !left_to_resource_dump(meta, c))
            .map(|c| c.from))
        .or(lists.open.as_ref().map(|o| o.from))
        .unwrap_or_else(W3cDateTime::now);
    let md = |from, until| Md {
        from: Some(from),
        until,
        ..Md::default()
    };
    if meta.parts.is_empty() {
        return package::write_dump_document(
            store,
            base_url,
            CHANGE_DUMP,
            Capability::ChangeDump,
            md(from, None),
            None,
            packages().map(|p| (&p.info, md(p.from, Some(p.until)))),
        )
        .await;
    }
    // A Change Dump Index: its parts first (those `write` names), each with its packages.
    let all: Vec<&ChangePackage> = packages().collect();
    let mut intervals = Vec::with_capacity(meta.parts.len());
    let mut start = 0usize;
    for (k, part) in meta.parts.iter().enumerate() {
        let end = start + part.packages as usize;
        let run = &all[start..end];
        let (first, last) = (run[0], run[run.len() - 1]);
        let interval = md(first.from, (!part.open).then_some(last.until));
        if write.binary_search(&k).is_ok() {
            package::write_dump_document(
                store,
                base_url,
                &part.name,
                Capability::ChangeDump,
                interval.clone(),
                Some(CHANGE_DUMP),
                run.iter().map(|p| (&p.info, md(p.from, Some(p.until)))),
            )
            .await?;
        }
        intervals.push((part.name.clone(), interval));
        start = end;
    }
    package::write_dump_index(
        store,
        base_url,
        CHANGE_DUMP,
        Capability::ChangeDump,
        md(from, None),
        intervals.into_iter(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rsagg_model::UrlEntry;

    use super::*;
    use crate::package::testing::*;

    fn cfg(entries: u64, bytes: u64, grace: u64) -> PublishConfig {
        PublishConfig {
            dump_package_entries: entries,
            dump_package_bytes: bytes,
            grace: Duration::from_secs(grace),
            ..PublishConfig::default()
        }
    }

    /// What the Change List publisher would record for a list closed over `changes`.
    fn closed(
        name: &str,
        changes: &[LogEntry],
        from: W3cDateTime,
        until: W3cDateTime,
    ) -> ClosedList {
        ClosedList {
            name: name.into(),
            first_seq: changes.first().unwrap().seq,
            last_seq: changes.last().unwrap().seq,
            from,
            until,
            entries: changes.len() as u64,
        }
    }

    async fn set_closed(objects: &Arc<dyn ObjectStore>, closed: Vec<ClosedList>) {
        let meta = ChangeListsMeta {
            closed,
            ..ChangeListsMeta::default()
        };
        put_json(objects.as_ref(), CHANGE_LISTS_META, &meta)
            .await
            .unwrap();
    }

    async fn run(
        objects: &Arc<dyn ObjectStore>,
        state: &State,
        cfg: &PublishConfig,
    ) -> ChangeDumpReport {
        let location = StoreLocation::new("memory://", objects.clone());
        run_at(&location, state, cfg).await
    }

    async fn run_at(
        location: &StoreLocation,
        state: &State,
        cfg: &PublishConfig,
    ) -> ChangeDumpReport {
        // No Resource Dump built alongside: its sender is gone (dropped with this statement;
        // as a temporary of the call below it would live across the await).
        let resource_dump = oneshot::channel().1;
        run_with(location, state, cfg, resource_dump).await
    }

    /// A publish beside a Resource Dump that holds every change up to `holds`.
    async fn run_beside_dump(
        objects: &Arc<dyn ObjectStore>,
        state: &State,
        cfg: &PublishConfig,
        holds: u64,
    ) -> ChangeDumpReport {
        let (tx, resource_dump) = oneshot::channel();
        tx.send(holds).unwrap();
        let location = StoreLocation::new("memory://", objects.clone());
        run_with(&location, state, cfg, resource_dump).await
    }

    async fn run_with(
        location: &StoreLocation,
        state: &State,
        cfg: &PublishConfig,
        resource_dump: oneshot::Receiver<u64>,
    ) -> ChangeDumpReport {
        run_bounded(location, state, cfg, MAX_DOCUMENT_ENTRIES, resource_dump).await
    }

    /// A publish naming at most `per_document` packages in one document.
    async fn run_bounded(
        location: &StoreLocation,
        state: &State,
        cfg: &PublishConfig,
        per_document: u64,
        resource_dump: oneshot::Receiver<u64>,
    ) -> ChangeDumpReport {
        let policy = LinkPolicy::default();
        publish(
            state,
            location,
            BASE,
            &policy,
            cfg,
            per_document,
            resource_dump,
        )
        .await
        .unwrap()
    }

    /// A package of the Change Dump as read back: its interval and its manifest entries
    /// with their bytes.
    struct Read {
        zip: String,
        from: W3cDateTime,
        until: W3cDateTime,
        entries: Vec<(UrlEntry, Option<Vec<u8>>)>,
    }

    /// `changedump.xml`, strictly valid, with every package read back and checked; returns
    /// the document's `from` and the packages.
    async fn dump(objects: &Arc<dyn ObjectStore>) -> (W3cDateTime, Vec<Read>) {
        let (header, entries) = strict(&get(objects, CHANGE_DUMP).await);
        assert_eq!(header.capability(), Some(&Capability::ChangeDump));
        let md = header.md.as_ref().unwrap();
        assert!(md.until.is_none(), "the Change Dump stays open");
        assert_eq!(
            header.link("up").unwrap().href,
            format!("{BASE}capabilitylist.xml")
        );
        let mut out = Vec::new();
        for e in &entries {
            let back = read_package(objects, e).await;
            assert_eq!(
                back.header.capability(),
                Some(&Capability::ChangeDumpManifest)
            );
            let (pmd, emd) = (back.header.md.as_ref().unwrap(), e.md.as_ref().unwrap());
            let (from, until) = (pmd.from.unwrap(), pmd.until.unwrap());
            assert_eq!((emd.from, emd.until), (Some(from), Some(until)));
            for (entry, _) in back.entries.iter().zip(&back.bodies) {
                let dt = entry.md.as_ref().unwrap().datetime.unwrap();
                assert!(dt.cmp_instant(&from).is_ge() && dt.cmp_instant(&until).is_le());
            }
            out.push(Read {
                zip: e.loc.strip_prefix(BASE).unwrap().to_owned(),
                from,
                until,
                entries: back.entries.into_iter().zip(back.bodies).collect(),
            });
        }
        (md.from.unwrap(), out)
    }

    /// One manifest entry in short: change, `<loc>`, `path`, bitstream.
    type Row<'a> = (Change, String, Option<String>, Option<&'a [u8]>);

    fn change_of(e: &UrlEntry) -> Change {
        e.md.as_ref().unwrap().change.clone().unwrap()
    }

    #[tokio::test]
    async fn a_closed_list_becomes_one_package_with_every_version_and_deletions_without_path() {
        let (objects, state) = store().await;
        let from = W3cDateTime::now();
        let changes = vec![
            change(&objects, &state, "a", Change::Created, b"a, first version").await,
            change(&objects, &state, "b", Change::Created, b"b").await,
            change(&objects, &state, "a", Change::Updated, b"a, second version").await,
            change(&objects, &state, "b", Change::Deleted, b"b").await,
        ];
        let until = W3cDateTime::now();
        set_closed(
            &objects,
            vec![closed("changelist-1.xml", &changes, from, until)],
        )
        .await;
        let report = run(&objects, &state, &cfg(100, 1 << 20, 3600)).await;
        assert_eq!(
            report,
            ChangeDumpReport {
                packages_now: 1,
                packages_total: 1,
                dropped: 0,
                skipped: 0,
                left_to_resource_dump: 0,
            }
        );
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!(doc_from, from);
        let [p] = packages.as_slice() else {
            panic!("{} packages", packages.len())
        };
        assert_eq!((p.from, p.until), (from, until));
        let got: Vec<Row> = p
            .entries
            .iter()
            .map(|(e, b)| {
                (
                    change_of(e),
                    e.loc.clone(),
                    e.md.as_ref().unwrap().path.clone(),
                    b.as_deref(),
                )
            })
            .collect();
        let loc = |n: &str| format!("{BASE}r/up/http/up.example.org/res/{n}");
        let path =
            |seq: u64, n: &str| Some(format!("/changes/{seq}/r/up/http/up.example.org/res/{n}"));
        assert_eq!(
            got,
            [
                (
                    Change::Created,
                    loc("a"),
                    path(changes[0].seq, "a"),
                    Some(&b"a, first version"[..])
                ),
                (
                    Change::Created,
                    loc("b"),
                    path(changes[1].seq, "b"),
                    Some(&b"b"[..])
                ),
                (
                    Change::Updated,
                    loc("a"),
                    path(changes[2].seq, "a"),
                    Some(&b"a, second version"[..])
                ),
                (Change::Deleted, loc("b"), None, None),
            ]
        );
        for ((e, _), logged) in p.entries.iter().zip(&changes) {
            let md = e.md.as_ref().unwrap();
            assert_eq!(md.datetime, Some(logged.at));
            let via = e.link("via").unwrap();
            assert_eq!(via.href, logged.uri);
            // Every version carries its own upstream metadata, as the log kept it.
            assert!(via.modified.is_some(), "{}", logged.seq);
            // rsagg holds no copy of the `.meta` it names: the link keeps the upstream's
            // href (rewritten, it would answer 404 at rsagg).
            assert_eq!(
                e.link("describedby").unwrap().href,
                format!("{}.meta", logged.uri)
            );
            if logged.change == Change::Deleted {
                assert!(md.hash.is_none() && md.length.is_none() && e.lastmod.is_none());
            } else {
                assert_eq!(md.mime_type.as_deref(), Some("text/plain"));
                assert_eq!(e.lastmod, Some(logged.at));
            }
        }

        // Made once: a publish with nothing new rewrites nothing.
        let zip = get(&objects, &p.zip).await;
        let doc = get(&objects, CHANGE_DUMP).await;
        let report = run(&objects, &state, &cfg(100, 1 << 20, 3600)).await;
        assert_eq!((report.packages_now, report.packages_total), (0, 1));
        assert_eq!(get(&objects, &p.zip).await, zip);
        assert_eq!(get(&objects, CHANGE_DUMP).await, doc);

        // The next closed list is appended, in forward chronological order.
        let more = vec![change(&objects, &state, "c", Change::Created, b"c").await];
        let later = W3cDateTime::now();
        set_closed(
            &objects,
            vec![
                closed("changelist-1.xml", &changes, from, until),
                closed("changelist-2.xml", &more, until, later),
            ],
        )
        .await;
        let report = run(&objects, &state, &cfg(100, 1 << 20, 3600)).await;
        assert_eq!((report.packages_now, report.packages_total), (1, 2));
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!(doc_from, from);
        assert_eq!(packages[0].zip, p.zip);
        assert_eq!((packages[1].from, packages[1].until), (until, later));
        assert_eq!(get(&objects, &p.zip).await, zip, "never rewritten");
    }

    #[tokio::test]
    async fn a_list_beyond_the_bounds_is_split_into_consecutive_sub_intervals() {
        // By entries: 2 per package.
        split_into_three(&cfg(2, 1 << 20, 0)).await;
        // By bytes: 25 bytes hold two 10-byte bitstreams; the deletion weighs nothing.
        split_into_three(&cfg(100, 25, 0)).await;
    }

    /// On a fresh store, one closed list of five 10-byte creations and a deletion, which
    /// `cfg` must cut into three packages of two changes each.
    async fn split_into_three(cfg: &PublishConfig) {
        let (objects, state) = store().await;
        let from = W3cDateTime::now();
        let mut changes = Vec::new();
        for i in 0..5 {
            changes.push(
                change(
                    &objects,
                    &state,
                    &i.to_string(),
                    Change::Created,
                    b"0123456789",
                )
                .await,
            );
        }
        changes.push(change(&objects, &state, "0", Change::Deleted, b"0123456789").await);
        let until = W3cDateTime::now();
        set_closed(
            &objects,
            vec![closed("changelist-1.xml", &changes, from, until)],
        )
        .await;
        let report = run(&objects, &state, cfg).await;
        assert_eq!(report.packages_now, 3);
        let (_, packages) = dump(&objects).await;
        check_split(&packages, &changes, from, until, &[2, 2, 2]);
    }

    fn check_split(
        packages: &[Read],
        changes: &[LogEntry],
        from: W3cDateTime,
        until: W3cDateTime,
        sizes: &[usize],
    ) {
        let got: Vec<usize> = packages.iter().map(|p| p.entries.len()).collect();
        assert_eq!(got, sizes);
        assert_eq!(
            packages[0].from, from,
            "the first starts where the list starts"
        );
        assert_eq!(
            packages.last().unwrap().until,
            until,
            "the last ends where it ends"
        );
        let mut k = 0;
        for (i, p) in packages.iter().enumerate() {
            if i > 0 {
                assert_eq!(p.from, packages[i - 1].until, "consecutive");
                // A package starts at its first change.
                assert_eq!(p.from, changes[k].at);
            }
            for (e, _) in &p.entries {
                assert_eq!(e.md.as_ref().unwrap().datetime, Some(changes[k].at));
                k += 1;
            }
        }
        assert_eq!(k, changes.len());
    }

    #[tokio::test]
    async fn packages_of_lists_dropped_by_retention_leave_and_go_after_the_grace_period() {
        let (objects, state) = store().await;
        let t0 = W3cDateTime::now();
        let first = vec![change(&objects, &state, "a", Change::Created, b"a").await];
        let t1 = W3cDateTime::now();
        let second = vec![change(&objects, &state, "b", Change::Created, b"b").await];
        let t2 = W3cDateTime::now();
        let one = closed("changelist-1.xml", &first, t0, t1);
        let two = closed("changelist-2.xml", &second, t1, t2);
        set_closed(&objects, vec![one, two.clone()]).await;
        run(&objects, &state, &cfg(100, 1 << 20, 3600)).await;
        let (_, packages) = dump(&objects).await;
        let old = packages[0].zip.clone();
        let old_manifest = old.replace(".zip", "-manifest.xml");
        assert!(exists(&objects, &old_manifest).await);

        // Retention dropped the first list: its package leaves the document at once, and
        // its objects stay for the grace period.
        set_closed(&objects, vec![two]).await;
        let report = run(&objects, &state, &cfg(100, 1 << 20, 3600)).await;
        assert_eq!(
            (report.packages_now, report.packages_total, report.dropped),
            (0, 1, 1)
        );
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!(doc_from, t1, "the document starts at its first package");
        assert_eq!(packages.len(), 1);
        assert_ne!(packages[0].zip, old);
        assert!(exists(&objects, &old).await && exists(&objects, &old_manifest).await);

        let report = run(&objects, &state, &cfg(100, 1 << 20, 0)).await;
        assert_eq!(report.dropped, 0);
        assert!(!exists(&objects, &old).await && !exists(&objects, &old_manifest).await);
        assert!(exists(&objects, &packages[0].zip).await);
        let meta: ChangeDumpMeta = get_json(objects.as_ref(), CHANGE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert!(meta.retired.is_empty() && !meta.doc_pending);
    }

    #[tokio::test]
    async fn a_corrupt_blob_is_left_out_and_counted() {
        let (objects, state) = store().await;
        let location = StoreLocation::new("memory://", objects);
        corrupt_blob_left_out(&location, &state).await;
    }

    /// The same on a `file://` store, whose blobs are read as files.
    #[tokio::test]
    async fn a_corrupt_local_blob_is_left_out_and_counted() {
        let (_dir, location, state) = local_store().await;
        corrupt_blob_left_out(&location, &state).await;
        state.close().await.unwrap();
    }

    async fn corrupt_blob_left_out(location: &StoreLocation, state: &State) {
        let objects = &location.objects;
        let from = W3cDateTime::now();
        let changes = vec![
            change(objects, state, "a", Change::Created, b"good").await,
            change(objects, state, "b", Change::Created, b"will rot").await,
        ];
        let until = W3cDateTime::now();
        let rotten = Blobs::path(&changes[1].copy.as_ref().unwrap().sha256);
        objects
            .put(&rotten, b"has rot".to_vec().into())
            .await
            .unwrap();
        set_closed(
            objects,
            vec![closed("changelist-1.xml", &changes, from, until)],
        )
        .await;
        let report = run_at(location, state, &cfg(100, 1 << 20, 0)).await;
        assert_eq!((report.packages_now, report.skipped), (1, 1));
        let (_, packages) = dump(objects).await;
        let locs: Vec<&str> = packages[0]
            .entries
            .iter()
            .map(|(e, _)| e.loc.as_str())
            .collect();
        assert_eq!(locs, [format!("{BASE}r/up/http/up.example.org/res/a")]);
        assert_eq!(packages[0].entries[0].1.as_deref(), Some(&b"good"[..]));
    }

    #[tokio::test]
    async fn a_baseline_a_resource_dump_holds_is_left_to_it_and_later_lists_are_packaged() {
        let (objects, state) = store().await;
        let t0 = W3cDateTime::now();
        let baseline = vec![
            change(&objects, &state, "a", Change::Created, b"a").await,
            change(&objects, &state, "b", Change::Created, b"b").await,
        ];
        let t1 = W3cDateTime::now();
        let straddling = vec![
            change(&objects, &state, "c", Change::Created, b"c").await,
            change(&objects, &state, "a", Change::Updated, b"a, second").await,
        ];
        let t2 = W3cDateTime::now();
        let first = closed("changelist-1.xml", &baseline, t0, t1);
        let second = closed("changelist-2.xml", &straddling, t1, t2);
        set_closed(&objects, vec![first.clone(), second.clone()]).await;
        // The dump built alongside holds the first list whole and the second only in part.
        let cfg = cfg(100, 1 << 20, 0);
        let report = run_beside_dump(&objects, &state, &cfg, baseline[1].seq + 1).await;
        assert_eq!(
            (report.packages_now, report.left_to_resource_dump),
            (1, 1),
            "{report:?}"
        );
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!(doc_from, t1, "the Change Dump starts where its packages do");
        let [p] = packages.as_slice() else {
            panic!("{} packages", packages.len())
        };
        assert_eq!((p.from, p.until), (t1, t2));
        assert_eq!(p.entries.len(), 2, "the straddling list is packaged whole");

        // A later rebuild of the Resource Dump leaves nothing out: packages, once begun,
        // follow every closed list.
        let later = vec![change(&objects, &state, "b", Change::Updated, b"b, second").await];
        let t3 = W3cDateTime::now();
        let third = closed("changelist-3.xml", &later, t2, t3);
        set_closed(&objects, vec![first, second, third]).await;
        let report = run_beside_dump(&objects, &state, &cfg, later[0].seq).await;
        assert_eq!(
            (report.packages_now, report.left_to_resource_dump),
            (1, 0),
            "{report:?}"
        );
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!(doc_from, t1);
        assert_eq!(packages.len(), 2);
    }

    #[tokio::test]
    async fn with_change_dump_baseline_the_baseline_is_packaged_too() {
        let (objects, state) = store().await;
        let t0 = W3cDateTime::now();
        let baseline = vec![change(&objects, &state, "a", Change::Created, b"a").await];
        let t1 = W3cDateTime::now();
        set_closed(
            &objects,
            vec![closed("changelist-1.xml", &baseline, t0, t1)],
        )
        .await;
        let cfg = PublishConfig {
            change_dump_baseline: true,
            ..cfg(100, 1 << 20, 0)
        };
        let report = run_beside_dump(&objects, &state, &cfg, baseline[0].seq).await;
        assert_eq!((report.packages_now, report.left_to_resource_dump), (1, 0));
        let (doc_from, packages) = dump(&objects).await;
        assert_eq!((doc_from, packages.len()), (t0, 1));
    }

    /// `changedump.xml` as a Change Dump Index, strictly valid, with every part checked
    /// (strictly valid Change Dumps with `up` and `index` links, the `from` of their first
    /// package and, all but the last, the `until` of their last, as their index entries
    /// say) and every package read back: the parts' names and package counts, and the
    /// packages' names in order.
    async fn index(objects: &Arc<dyn ObjectStore>) -> (Vec<(String, usize)>, Vec<String>) {
        let (header, entries) = strict(&get(objects, CHANGE_DUMP).await);
        assert_eq!(header.root, Root::Sitemapindex);
        assert_eq!(header.capability(), Some(&Capability::ChangeDump));
        let md = header.md.as_ref().unwrap();
        assert!(md.until.is_none(), "the Change Dump Index stays open");
        assert_eq!(
            header.link("up").unwrap().href,
            format!("{BASE}capabilitylist.xml")
        );
        let (mut parts, mut zips) = (Vec::new(), Vec::new());
        for (k, e) in entries.iter().enumerate() {
            let name = e.loc.strip_prefix(BASE).unwrap().to_owned();
            let (part, packages) = strict(&get(objects, &name).await);
            assert_eq!(part.root, Root::Urlset);
            assert_eq!(part.capability(), Some(&Capability::ChangeDump));
            assert_eq!(
                part.link("index").unwrap().href,
                format!("{BASE}{CHANGE_DUMP}")
            );
            assert!(part.link("up").is_some());
            let (pmd, emd) = (part.md.as_ref().unwrap(), e.md.as_ref().unwrap());
            assert_eq!((emd.from, emd.until), (pmd.from, pmd.until), "{name}");
            let first = packages[0].md.as_ref().unwrap();
            let last = packages[packages.len() - 1].md.as_ref().unwrap();
            assert_eq!(pmd.from, first.from, "{name}");
            if k == 0 {
                assert_eq!(md.from, first.from, "the index starts at its first package");
            }
            if k + 1 == entries.len() {
                assert_eq!(pmd.until, None, "{name}: the last part stays open");
            } else {
                assert_eq!(pmd.until, last.until, "{name}");
            }
            for p in &packages {
                let back = read_package(objects, p).await;
                let bmd = back.header.md.as_ref().unwrap();
                assert_eq!(
                    (bmd.from, bmd.until),
                    (p.md.as_ref().unwrap().from, p.md.as_ref().unwrap().until)
                );
                zips.push(p.loc.strip_prefix(BASE).unwrap().to_owned());
            }
            parts.push((name, packages.len()));
        }
        (parts, zips)
    }

    /// The packages `changedump.json` records, in order.
    async fn recorded(objects: &Arc<dyn ObjectStore>) -> Vec<String> {
        let meta: ChangeDumpMeta = get_json(objects.as_ref(), CHANGE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        meta.lists
            .iter()
            .flat_map(|l| l.packages.iter().map(|p| p.info.zip.clone()))
            .collect()
    }

    /// Spec 13.1: more packages than one document may name make a Change Dump Index of
    /// Change Dumps of consecutive packages, in forward chronological order, the last one
    /// open. A publish keeps the parts whose packages are unchanged (not rewritten) and
    /// writes new ones for what changed (a package added joins a new last part; retention
    /// dropping packages of the first part re-cuts it); replaced parts stay for the grace
    /// period. Within one document's bound again, `changedump.xml` is a Change Dump.
    #[tokio::test]
    async fn more_packages_than_one_document_names_make_a_change_dump_index() {
        let (objects, state) = store().await;
        let location = StoreLocation::new("memory://", objects.clone());
        // One package per change; at most four packages a document.
        let c = cfg(1, 1 << 20, 3600);
        let publish = |lists: Vec<ClosedList>| {
            let (objects, state, location, c) = (&objects, &state, &location, &c);
            async move {
                set_closed(objects, lists).await;
                // No Resource Dump beside it (its sender dropped here, not held across).
                let resource_dump = oneshot::channel().1;
                run_bounded(location, state, c, 4, resource_dump).await
            }
        };
        let mut lists = Vec::new();
        let mut t = W3cDateTime::now();
        for n in 0..3 {
            let changes = vec![
                change(&objects, &state, &format!("{n}a"), Change::Created, b"a").await,
                change(&objects, &state, &format!("{n}b"), Change::Created, b"b").await,
            ];
            let until = W3cDateTime::now();
            lists.push(closed(&format!("changelist-{n}.xml"), &changes, t, until));
            t = until;
        }
        let report = publish(lists.clone()).await;
        assert_eq!((report.packages_now, report.packages_total), (6, 6));
        let (parts, zips) = index(&objects).await;
        assert_eq!(
            zips,
            recorded(&objects).await,
            "every package once, in order"
        );
        let sizes: Vec<usize> = parts.iter().map(|p| p.1).collect();
        assert_eq!(sizes, [4, 2]);
        let first_part = get(&objects, &parts[0].0).await;

        // Two more packages: the first part is kept as it is, the open one is replaced by
        // a new last part holding its packages and the new ones.
        let changes = vec![
            change(&objects, &state, "3a", Change::Created, b"a").await,
            change(&objects, &state, "3b", Change::Created, b"b").await,
        ];
        let until = W3cDateTime::now();
        lists.push(closed("changelist-3.xml", &changes, t, until));
        let report = publish(lists.clone()).await;
        assert_eq!((report.packages_now, report.packages_total), (2, 8));
        let (grown, zips) = index(&objects).await;
        assert_eq!(zips, recorded(&objects).await);
        assert_eq!(grown[0], parts[0], "kept");
        assert_eq!(
            get(&objects, &grown[0].0).await,
            first_part,
            "not rewritten"
        );
        assert_eq!(grown[1].1, 4);
        assert_ne!(grown[1].0, parts[1].0, "a new name");
        assert!(
            exists(&objects, &parts[1].0).await,
            "the replaced part stays a while"
        );

        // Retention drops the first list: the first part is cut again from what is left of
        // it, the last is kept.
        let report = publish(lists[1..].to_vec()).await;
        assert_eq!((report.dropped, report.packages_total), (2, 6));
        let (trimmed, zips) = index(&objects).await;
        assert_eq!(zips, recorded(&objects).await);
        let sizes: Vec<usize> = trimmed.iter().map(|p| p.1).collect();
        assert_eq!(sizes, [2, 4]);
        assert_ne!(trimmed[0].0, grown[0].0);
        assert_eq!(trimmed[1], grown[1], "kept");

        // Four packages fit one document: a Change Dump again, the parts retired.
        publish(lists[2..].to_vec()).await;
        let (_, packages) = dump(&objects).await;
        assert_eq!(packages.len(), 4);
        let meta: ChangeDumpMeta = get_json(objects.as_ref(), CHANGE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        assert!(meta.parts.is_empty() && !meta.doc_pending);
        for (name, _) in &trimmed {
            assert!(
                meta.retired.iter().any(|(r, _)| r == name),
                "{name} retired"
            );
        }
    }

    /// A publish interrupted after it recorded the parts of its index but before it wrote
    /// them: the next publish writes them (and the index) although nothing else changed.
    #[tokio::test]
    async fn parts_an_interrupted_publish_did_not_write_are_written_by_the_next() {
        let (objects, state) = store().await;
        let location = StoreLocation::new("memory://", objects.clone());
        let c = cfg(1, 1 << 20, 3600);
        let from = W3cDateTime::now();
        let mut changes = Vec::new();
        for i in 0..3 {
            changes.push(change(&objects, &state, &i.to_string(), Change::Created, b"x").await);
        }
        let until = W3cDateTime::now();
        set_closed(
            &objects,
            vec![closed("changelist-1.xml", &changes, from, until)],
        )
        .await;
        let resource_dump = oneshot::channel().1;
        run_bounded(&location, &state, &c, 2, resource_dump).await;
        let (parts, _) = index(&objects).await;
        let mut meta: ChangeDumpMeta = get_json(objects.as_ref(), CHANGE_DUMP_META)
            .await
            .unwrap()
            .unwrap();
        // As left by a publish that died after recording its metadata.
        meta.doc_pending = true;
        put_json(objects.as_ref(), CHANGE_DUMP_META, &meta)
            .await
            .unwrap();
        for (name, _) in &parts {
            objects.delete(&Path::from(name.as_str())).await.unwrap();
        }
        let resource_dump = oneshot::channel().1;
        run_bounded(&location, &state, &c, 2, resource_dump).await;
        assert_eq!(index(&objects).await.0, parts);
    }

    #[tokio::test]
    async fn before_any_list_closes_the_document_is_empty_and_valid() {
        let (objects, state) = store().await;
        change(&objects, &state, "a", Change::Created, b"a").await;
        let report = run(&objects, &state, &cfg(100, 1 << 20, 0)).await;
        assert_eq!(report, ChangeDumpReport::default());
        let (_, packages) = dump(&objects).await;
        assert!(packages.is_empty());
        let off = PublishConfig {
            change_dumps: false,
            ..cfg(100, 1 << 20, 0)
        };
        assert_eq!(
            run(&objects, &state, &off).await,
            ChangeDumpReport::default()
        );
    }
}
