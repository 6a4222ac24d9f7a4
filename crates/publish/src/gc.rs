//! Blob garbage collection: deleting the stored bodies nothing refers to any more.
//!
//! Blobs are content-addressed and written before the records that point at them (see
//! `rsagg_store`), so an update or a deletion leaves the previous body behind, and a crash
//! between a blob and its commit leaves an unreferenced one. Collection runs at most every
//! `gc_interval` (it lists the whole blob area and scans every record: O(collection), unlike
//! the O(changes) work of a run) and keeps:
//!
//! - the copy of every present resource (the Resource List and Dump name it);
//! - the last copy of a deleted resource while a retained Change List still lists that
//!   deletion (record `seq` at or after [`first_listed_seq`]): a Destination working through
//!   those Change Lists may still look at it;
//! - the body kept with every quarantine record, for inspection;
//! - with Change Dumps on, the copy every creation and update made that a retained Change
//!   List lists but no Change Dump package holds yet (the changes after the last packaged
//!   one): a closed list's package (spec 13) holds the bitstream of exactly that version, made
//!   when the list closes, possibly long after a later version replaced it in the record.
//!   Bounded by the open list's changes when packaging keeps up;
//! - any blob younger than `grace`: one a harvest has just stored (a store renews the
//!   last-modified time even when the address existed) but not yet committed a record for,
//!   and one a Destination that read the previous documents may still fetch.
//!
//! Leftovers of abandoned multipart uploads under `blobs/tmp/` are deleted once older than
//! `grace` too (younger ones may be uploads in progress).
//!
//! Memory does not grow with the collection: the references found in the records are written
//! to local disk by the blob's fan-out directory (`blobs/sha256/{ab}/`, 16 bytes each), and the
//! directories are swept one after the other, each against its own references only
//! (`References`): 1/256 of them in memory at a time.
//!
//! The blob area belongs to one collection: every pipeline has a store URL of its own, so
//! the records of this state are all that can refer to a blob in it.
//!
//! The first collection is due one `gc_interval` after the first publish, not at it: a
//! first publish follows a baseline, whose blobs are all younger than `grace` and referenced
//! anyway, so a full listing and record scan then would find nothing to delete (at most the
//! leftovers of an earlier run that failed before publishing, which can wait one interval).
//! `--force` still collects at once.
//!
//! [`GC_META`] keeps the last report, which is also when collection last ran, or before the
//! first collection when it is due; a status page reads it with [`read_meta`] (or
//! [`last_report`]).

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use rsagg_model::{Change, W3cDateTime};
use rsagg_store::documents::{get_json, put_json};
use rsagg_store::{ResourceStatus, State};

use crate::Error;
use crate::changelist::first_listed_seq;
use rsagg_config::PublishConfig;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::report::*;

/// Deletions in flight at once.
const CONCURRENCY: usize = 16;

/// [`GC_META`], `None` when no publish has written it yet.
pub async fn read_meta(objects: &Arc<dyn ObjectStore>) -> Result<Option<GcMeta>, Error> {
    Ok(get_json(objects.as_ref(), GC_META).await?)
}

/// The report of the last collection, if any ran.
pub async fn last_report(objects: &Arc<dyn ObjectStore>) -> Result<Option<GcReport>, Error> {
    Ok(read_meta(objects).await?.and_then(|m| m.last))
}

/// Collects the blobs of `state`'s collection in `objects` that nothing refers to. Returns
/// `None` without doing anything when, and `force` is false, the last collection is less
/// than `cfg.gc_interval` ago, or none ran yet and the first is not due: the first publish
/// (no [`GC_META`] yet) only records that it is due one `cfg.gc_interval` later (see the
/// module documentation), unless that interval is zero.
pub async fn collect(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    cfg: &PublishConfig,
    force: bool,
) -> Result<Option<GcReport>, Error> {
    let at = W3cDateTime::now();
    let now = at.unix_nanos();
    if !force {
        let due = match read_meta(objects).await? {
            Some(GcMeta {
                last: Some(last), ..
            }) => elapsed(&last.at, now, cfg.gc_interval),
            Some(GcMeta {
                last: None,
                first_due: Some(first),
            }) => now >= first.unix_nanos(),
            // The first publish: nothing to collect yet.
            Some(GcMeta {
                last: None,
                first_due: None,
            })
            | None => {
                if cfg.gc_interval.is_zero() {
                    true
                } else {
                    let first = after(&at, cfg.gc_interval);
                    let meta = GcMeta {
                        last: None,
                        first_due: Some(first),
                    };
                    put_json(objects.as_ref(), GC_META, &meta).await?;
                    tracing::debug!(first_due = %first, "first blob garbage collection scheduled");
                    false
                }
            }
        };
        if !due {
            return Ok(None);
        }
    }
    let mut referenced = referenced(state, objects, cfg.change_dumps).await?;
    let mut report = GcReport {
        scanned: 0,
        kept: 0,
        deleted: 0,
        bytes_freed: 0,
        at,
    };
    // One fan-out directory at a time, with only the references into it in memory.
    let top = objects
        .list_with_delimiter(Some(&Path::from(BLOBS)))
        .await
        .map_err(|e| Error::from(rsagg_store::Error::object_store(BLOBS, e)))?;
    // Objects beside the directories are no blob rsagg wrote: listed and kept.
    report.scanned += top.objects.len() as u64;
    report.kept += top.objects.len() as u64;
    for dir in top.common_prefixes {
        let Some(fan) = dir.filename().and_then(fan_of) else {
            // Not a fan-out directory: whatever it holds is kept.
            sweep(objects, dir.as_ref(), |_| false, cfg.grace, &mut report).await?;
            continue;
        };
        let into = referenced.fan(fan)?;
        // An address in the wrong directory is not where rsagg puts a blob: kept.
        let unreferenced =
            |m: &ObjectMeta| address(m).is_some_and(|a| a[0] == fan && !into.contains(&a));
        sweep(objects, dir.as_ref(), unreferenced, cfg.grace, &mut report).await?;
    }
    sweep(objects, BLOBS_TMP, |_| true, cfg.grace, &mut report).await?;
    let meta = GcMeta {
        last: Some(report.clone()),
        first_due: None,
    };
    put_json(objects.as_ref(), GC_META, &meta).await?;
    tracing::info!(
        scanned = report.scanned,
        deleted = report.deleted,
        bytes_freed = report.bytes_freed,
        "garbage collection"
    );
    Ok(Some(report))
}

/// Lists the objects under `prefix` and deletes those `garbage` selects that are older than
/// `grace` (as of `report.at`), counting into `report`.
async fn sweep(
    objects: &Arc<dyn ObjectStore>,
    prefix: &str,
    garbage: impl Fn(&ObjectMeta) -> bool,
    grace: std::time::Duration,
    report: &mut GcReport,
) -> Result<(), Error> {
    let now = report.at.unix_nanos();
    let freed = objects
        .list(Some(&Path::from(prefix)))
        .map_err(|e| Error::from(rsagg_store::Error::object_store(prefix, e)))
        .map_ok(|m| {
            let candidate = garbage(&m) && old(&m, now, grace);
            async move {
                if candidate {
                    delete_if_still_old(objects, m, now, grace).await
                } else {
                    Ok(None)
                }
            }
        })
        .try_buffer_unordered(CONCURRENCY);
    let mut freed = std::pin::pin!(freed);
    while let Some(f) = freed.try_next().await? {
        report.scanned += 1;
        match f {
            Some(bytes) => {
                report.deleted += 1;
                report.bytes_freed += bytes;
            }
            None => report.kept += 1,
        }
    }
    Ok(())
}

/// The SHA-256 of every blob something refers to (see the module documentation), written
/// out by fan-out directory ([`References`]); the records themselves are streamed.
async fn referenced(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    change_dumps: bool,
) -> Result<References, Error> {
    let lists: Option<ChangeListsMeta> = get_json(objects.as_ref(), CHANGE_LISTS_META).await?;
    // Before the first Change List publish every change is still to be listed.
    let listed_from = lists.as_ref().and_then(first_listed_seq).unwrap_or(1);
    let mut set = References::new()?;
    let mut add = |hex: &str| match decode(hex) {
        Some(a) => set.add(&a),
        // Such a name matches no blob address, so nothing is deleted because of it.
        None => {
            tracing::warn!(sha256 = hex, "a record names a malformed blob address");
            Ok(())
        }
    };
    let mut records = state.all_resources().await?;
    while let Some(r) = records.next().await? {
        let keep = match r.status {
            ResourceStatus::Present => true,
            ResourceStatus::Deleted => r.seq >= listed_from,
        };
        if let Some(copy) = r.copy.as_ref().filter(|_| keep) {
            add(&copy.sha256)?;
        }
    }
    let mut quarantine = state.quarantine().await?;
    while let Some(q) = quarantine.next().await? {
        if let Some(blob) = &q.blob {
            add(blob)?;
        }
    }
    if change_dumps {
        // Packages are made in log order, oldest list first: what follows the last packaged
        // change and is still listed will be packaged.
        let dumps: Option<ChangeDumpMeta> = get_json(objects.as_ref(), CHANGE_DUMP_META).await?;
        let packaged = dumps.and_then(|d| d.lists.last().map(|l| l.last_seq));
        let from = packaged.map_or(listed_from, |seq| listed_from.max(seq + 1));
        let mut log = state.log(from).await?;
        while let Some(e) = log.next().await? {
            if let Some(copy) = e.copy.as_ref().filter(|_| e.change != Change::Deleted) {
                add(&copy.sha256)?;
            }
        }
    }
    Ok(set)
}

/// The addresses of the blobs something refers to, by fan-out directory (the first byte of
/// the address: `blobs/sha256/{ab}/`, [`rsagg_store::Blobs::path`]), so that the sweep holds
/// one directory's references in memory at a time rather than a set of the whole collection
/// (32 bytes and the set's overhead per resource: ~80 MB a million measured, ~800 MB at
/// 10^7, ~8 GB at 10^8, once a day).
///
/// While the records are read, each address goes to the file of its directory, in a
/// temporary directory on local disk (`TMPDIR`, as the baseline's seen URIs): 16 bytes each,
/// the 128 bits after the first byte. Memory: a write buffer per directory written to (256 ×
/// 8 KiB), then one directory's references (sorted, 1/256 of them: under 7 MB at 10^8) and its
/// file's bytes while they are read. Local disk: 16 bytes per reference (160 MB at 10^7).
/// Keeping 128 bits of the 248 that are not the directory's can only err one way: a blob
/// nothing refers to whose bits match a referenced one's (odds of 2^-128 per pair) is kept,
/// never the reverse.
struct References {
    dir: tempfile::TempDir,
    files: Vec<Option<std::io::BufWriter<std::fs::File>>>,
}

impl References {
    fn new() -> Result<References, Error> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-gc-")
            .tempdir()
            .map_err(|source| Error::Io {
                what: "creating a temporary directory for the blob references".into(),
                source,
            })?;
        Ok(References {
            dir,
            files: (0..256).map(|_| None).collect(),
        })
    }

    /// Notes a reference to the blob at `address`.
    fn add(&mut self, address: &[u8; 32]) -> Result<(), Error> {
        use std::io::Write;
        let (dir, fan) = (self.dir.path(), address[0]);
        let file = match &mut self.files[usize::from(fan)] {
            Some(file) => file,
            slot @ None => {
                let file = std::fs::File::create_new(fan_file(dir, fan))
                    .map_err(|source| io_error(dir, fan, source))?;
                slot.insert(std::io::BufWriter::new(file))
            }
        };
        let written = file.write_all(&key(address).to_be_bytes());
        written.map_err(|source| io_error(dir, fan, source))
    }

    /// The references into directory `fan`, for [`Fan::contains`].
    fn fan(&mut self, fan: u8) -> Result<Fan, Error> {
        use std::io::Write;
        let dir = self.dir.path();
        let Some(file) = &mut self.files[usize::from(fan)] else {
            return Ok(Fan(Vec::new()));
        };
        let flushed = file.flush();
        flushed.map_err(|source| io_error(dir, fan, source))?;
        let bytes =
            std::fs::read(fan_file(dir, fan)).map_err(|source| io_error(dir, fan, source))?;
        let mut keys: Vec<u128> = bytes
            .chunks_exact(16)
            .map(|k| u128::from_be_bytes(k.try_into().expect("16 bytes")))
            .collect();
        drop(bytes);
        keys.sort_unstable();
        keys.dedup();
        Ok(Fan(keys))
    }
}

/// The file of directory `fan`'s references in `dir`.
fn fan_file(dir: &std::path::Path, fan: u8) -> std::path::PathBuf {
    dir.join(format!("{fan:02x}"))
}

fn io_error(dir: &std::path::Path, fan: u8, source: std::io::Error) -> Error {
    Error::Io {
        what: format!(
            "the blob references of directory {fan:02x} in {}",
            fan_file(dir, fan).display()
        ),
        source,
    }
}

/// The references into one fan-out directory, sorted.
struct Fan(Vec<u128>);

impl Fan {
    /// Whether something refers to the blob at `address` (an address of this directory).
    fn contains(&self, address: &[u8; 32]) -> bool {
        self.0.binary_search(&key(address)).is_ok()
    }
}

/// What [`References`] keeps of an address: the 128 bits after its directory's byte.
fn key(address: &[u8; 32]) -> u128 {
    let mut bits = [0u8; 16];
    bits.copy_from_slice(&address[1..17]);
    u128::from_be_bytes(bits)
}

/// The byte a fan-out directory's name stands for (two hex digits), `None` for any other name.
fn fan_of(name: &str) -> Option<u8> {
    match name.as_bytes() {
        [hi, lo] => hex_byte(*hi, *lo),
        _ => None,
    }
}

/// Two hex digits (either case) as a byte.
fn hex_byte(hi: u8, lo: u8) -> Option<u8> {
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    Some(nibble(hi)? << 4 | nibble(lo)?)
}

/// The address of a blob object (its file name: 64 hex digits); `None` for anything else,
/// which is then never deleted.
fn address(m: &ObjectMeta) -> Option<[u8; 32]> {
    decode(m.location.filename()?)
}

/// 64 hex digits (either case) as 32 bytes.
fn decode(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        out[i] = hex_byte(pair[0], pair[1])?;
    }
    Some(out)
}

/// `t` plus `period` (saturating far in the future).
fn after(t: &W3cDateTime, period: std::time::Duration) -> W3cDateTime {
    let period = i128::try_from(period.as_nanos()).unwrap_or(i128::MAX / 2);
    let total = t.unix_nanos().saturating_add(period);
    let secs = i64::try_from(total.div_euclid(1_000_000_000)).unwrap_or(i64::MAX / 2);
    W3cDateTime::from_unix(secs, total.rem_euclid(1_000_000_000) as u32)
}

/// True when at least `period` passed from `since` to `now_nanos`.
fn elapsed(since: &W3cDateTime, now_nanos: i128, period: std::time::Duration) -> bool {
    now_nanos - since.unix_nanos() >= i128::try_from(period.as_nanos()).unwrap_or(i128::MAX)
}

/// True when the object was last written at least `grace` before `now_nanos`.
fn old(m: &ObjectMeta, now_nanos: i128, grace: std::time::Duration) -> bool {
    let written = m.last_modified;
    let written = W3cDateTime::from_unix(written.timestamp(), written.timestamp_subsec_nanos());
    elapsed(&written, now_nanos, grace)
}

/// Deletes a candidate unless it was written again since it was listed (a harvest storing
/// the same bytes anew); returns the bytes freed, `None` when it stays or was already gone.
/// Object stores have no conditional delete, so a store between this check and the deletion
/// is not seen: collection belongs after a run's harvest (as the publish stage runs it), not
/// beside one.
async fn delete_if_still_old(
    objects: &Arc<dyn ObjectStore>,
    listed: ObjectMeta,
    now_nanos: i128,
    grace: std::time::Duration,
) -> Result<Option<u64>, Error> {
    let path = &listed.location;
    let gone = |e: &object_store::Error| matches!(e, object_store::Error::NotFound { .. });
    match objects.head(path).await {
        Ok(m) if old(&m, now_nanos, grace) => {}
        Ok(_) => return Ok(None),
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(rsagg_store::Error::object_store(path, e).into()),
    }
    match objects.delete(path).await {
        Ok(()) => Ok(Some(listed.size)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(rsagg_store::Error::object_store(path, e).into()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use rsagg_model::Change;
    use rsagg_store::{Commit, QuarantineRecord};

    use super::*;
    use crate::changelist::tests::{Fixture, cfg as changelist_cfg, file_fixture, fixture, uri};

    const HOUR: Duration = Duration::from_secs(3600);

    fn gc_cfg(grace: Duration, gc_interval: Duration) -> PublishConfig {
        PublishConfig {
            grace,
            gc_interval,
            ..PublishConfig::default()
        }
    }

    async fn collect_now(f: &Fixture, grace: Duration) -> GcReport {
        collect(&f.state, &f.objects, &gc_cfg(grace, HOUR), true)
            .await
            .unwrap()
            .expect("forced")
    }

    async fn exists(f: &Fixture, sha256: &str) -> bool {
        f.blobs.exists(sha256).await.unwrap()
    }

    async fn put(f: &Fixture, path: &str, body: &'static [u8]) {
        rsagg_store::documents::put(f.objects.as_ref(), path, Bytes::from_static(body))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn unreferenced_old_blobs_go_and_referenced_or_young_ones_stay() {
        unreferenced_and_young(fixture().await).await;
    }

    #[tokio::test]
    async fn unreferenced_old_blobs_go_on_a_local_directory_too() {
        unreferenced_and_young(file_fixture().await).await;
    }

    async fn unreferenced_and_young(f: Fixture) {
        let copy = f.create(&["a"]).await[0].copy.clone().unwrap();
        let orphan = f.blob().await;
        let evidence = f.blob().await;
        f.state
            .commit(Commit {
                upstream: "museum".into(),
                quarantine: vec![QuarantineRecord {
                    upstream: "museum".into(),
                    uri: uri("bad"),
                    reason: "hash mismatch".into(),
                    expected: "md5:00".into(),
                    got: "md5:11".into(),
                    at: W3cDateTime::now(),
                    blob: Some(evidence.sha256.clone()),
                }],
                ..Commit::default()
            })
            .await
            .unwrap();
        // An abandoned upload's leftover, and an object that is no blob address.
        put(&f, "blobs/tmp/abandoned", b"xyz").await;
        put(&f, "blobs/sha256/zz/not-a-blob", b"x").await;

        // Everything is younger than an hour: nothing goes.
        let r = collect_now(&f, HOUR).await;
        assert_eq!((r.scanned, r.kept, r.deleted, r.bytes_freed), (5, 5, 0, 0));
        assert!(exists(&f, &orphan.sha256).await);
        assert!(f.get("blobs/tmp/abandoned").await.is_some());

        // Grace over: the orphan and the leftover go, the rest stays.
        let r = collect_now(&f, Duration::ZERO).await;
        assert_eq!(
            (r.scanned, r.kept, r.deleted, r.bytes_freed),
            (5, 3, 2, orphan.length + 3)
        );
        assert!(!exists(&f, &orphan.sha256).await);
        assert!(f.get("blobs/tmp/abandoned").await.is_none());
        assert!(exists(&f, &copy.sha256).await, "a present resource's copy");
        assert!(
            exists(&f, &evidence.sha256).await,
            "a quarantine record's body"
        );
        assert!(f.get("blobs/sha256/zz/not-a-blob").await.is_some());
        assert_eq!(last_report(&f.objects).await.unwrap(), Some(r));
    }

    /// Blobs in every fan-out directory: each directory is swept with its own references
    /// only, and none is taken for another's (on both kinds of store).
    #[tokio::test]
    async fn every_fan_out_directory_is_swept_against_its_own_references() {
        for f in [fixture().await, file_fixture().await] {
            let names: Vec<String> = (0..600).map(|i| format!("r{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let kept: Vec<String> = f
                .create(&names)
                .await
                .into_iter()
                .map(|e| e.copy.unwrap().sha256)
                .collect();
            let mut orphans = Vec::new();
            for _ in 0..600 {
                orphans.push(f.blob().await.sha256);
            }
            let fans = |shas: &[String]| {
                shas.iter()
                    .map(|s| s[..2].to_owned())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            };
            // 600 addresses leave about one fan-out directory in ten without any.
            assert!(fans(&kept) > 200 && fans(&orphans) > 200);
            // An address filed in another directory than its own is not rsagg's: kept.
            let stray = format!(
                "{}{}",
                if kept[0].starts_with("00") {
                    "01"
                } else {
                    "00"
                },
                &kept[0][2..]
            );
            put(&f, &format!("blobs/sha256/{}/{stray}", &kept[0][..2]), b"x").await;

            let r = collect_now(&f, Duration::ZERO).await;
            assert_eq!((r.scanned, r.kept, r.deleted), (1201, 601, 600));
            for sha in &kept {
                assert!(exists(&f, sha).await, "referenced {sha}");
            }
            for sha in &orphans {
                assert!(!exists(&f, sha).await, "orphan {sha}");
            }
            assert!(
                f.get(&format!("blobs/sha256/{}/{stray}", &kept[0][..2]))
                    .await
                    .is_some()
            );
        }
    }

    #[tokio::test]
    async fn a_deleted_copy_stays_while_a_retained_change_list_lists_the_deletion() {
        let f = fixture().await;
        let lists = changelist_cfg(1, HOUR, Some(1), Duration::ZERO);
        let copy = f.create(&["a"]).await[0].copy.clone().unwrap();
        f.commit(&[("a", Change::Deleted)]).await;
        // Before any Change List is published every deletion is still to be listed.
        collect_now(&f, Duration::ZERO).await;
        assert!(exists(&f, &copy.sha256).await);

        // Closed [1], open [2]: the deletion (2) is listed.
        f.publish(&lists).await;
        collect_now(&f, Duration::ZERO).await;
        assert!(exists(&f, &copy.sha256).await);

        // Closed [4] retained, open [5]: the list naming the deletion was dropped.
        let later = f.create(&["x", "y", "z"]).await;
        let r = f.publish(&lists).await;
        assert_eq!((r.closed_total, r.dropped), (1, 3));
        let r = collect_now(&f, Duration::ZERO).await;
        assert_eq!(r.deleted, 1);
        assert!(!exists(&f, &copy.sha256).await);
        for e in later {
            assert!(exists(&f, &e.copy.unwrap().sha256).await);
        }
    }

    #[tokio::test]
    async fn a_past_version_stays_until_a_change_dump_package_holds_it() {
        let f = fixture().await;
        let v1 = f.create(&["a"]).await[0].copy.clone().unwrap();
        f.commit(&[("a", Change::Updated)]).await;
        f.publish(&changelist_cfg(10, HOUR, None, HOUR)).await;
        // Listed in the open Change List, in no package yet.
        collect_now(&f, Duration::ZERO).await;
        assert!(exists(&f, &v1.sha256).await);
        // Once packaged (as the Change Dump publisher records it), it may go.
        let packaged = ChangeDumpMeta {
            lists: vec![rsagg_layout::meta::DumpedList {
                name: "closed-000000000001-g1.xml".into(),
                first_seq: 1,
                last_seq: 2,
                packages: Vec::new(),
            }],
            ..ChangeDumpMeta::default()
        };
        put_json(f.objects.as_ref(), CHANGE_DUMP_META, &packaged)
            .await
            .unwrap();
        let r = collect_now(&f, Duration::ZERO).await;
        assert_eq!(r.deleted, 1);
        assert!(!exists(&f, &v1.sha256).await);
    }

    #[tokio::test]
    async fn without_change_dumps_a_past_version_goes() {
        let f = fixture().await;
        let v1 = f.create(&["a"]).await[0].copy.clone().unwrap();
        let v2 = f.commit(&[("a", Change::Updated)]).await[0].copy.clone();
        let cfg = PublishConfig {
            change_dumps: false,
            ..gc_cfg(Duration::ZERO, HOUR)
        };
        collect(&f.state, &f.objects, &cfg, true).await.unwrap();
        assert!(!exists(&f, &v1.sha256).await);
        assert!(exists(&f, &v2.unwrap().sha256).await);
    }

    #[tokio::test]
    async fn collection_waits_for_its_interval_unless_forced() {
        let f = fixture().await;
        let cfg = gc_cfg(Duration::ZERO, HOUR);
        assert!(last_report(&f.objects).await.unwrap().is_none());
        // The first publish only schedules the first collection, one interval later.
        let scheduled = collect(&f.state, &f.objects, &cfg, false).await.unwrap();
        assert!(scheduled.is_none(), "the first publish does not collect");
        let meta = read_meta(&f.objects).await.unwrap().unwrap();
        assert!(meta.last.is_none());
        let due = meta.first_due.expect("scheduled");
        let lead = due.unix_nanos() - W3cDateTime::now().unix_nanos();
        assert!(
            lead > 3_590 * 1_000_000_000 && lead <= 3_600 * 1_000_000_000,
            "{lead}"
        );
        assert!(
            collect(&f.state, &f.objects, &cfg, false)
                .await
                .unwrap()
                .is_none(),
            "not due before then"
        );
        assert_eq!(read_meta(&f.objects).await.unwrap(), Some(meta.clone()));
        // Once it is due (as if the interval had passed), it runs.
        let past = GcMeta {
            first_due: Some(W3cDateTime::from_unix(0, 0)),
            ..meta
        };
        put_json(f.objects.as_ref(), GC_META, &past).await.unwrap();
        let first = collect(&f.state, &f.objects, &cfg, false)
            .await
            .unwrap()
            .expect("the first collection is due");
        assert_eq!(
            read_meta(&f.objects).await.unwrap().unwrap().first_due,
            None,
            "the schedule is done with"
        );
        let orphan = f.blob().await;
        assert!(
            collect(&f.state, &f.objects, &cfg, false)
                .await
                .unwrap()
                .is_none(),
            "not due"
        );
        assert!(exists(&f, &orphan.sha256).await);
        assert_eq!(last_report(&f.objects).await.unwrap(), Some(first));
        let forced = collect(&f.state, &f.objects, &cfg, true)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(forced.deleted, 1);
        let every_time = gc_cfg(Duration::ZERO, Duration::ZERO);
        assert!(
            collect(&f.state, &f.objects, &every_time, false)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn the_meta_reads_reports_written_before_the_schedule_existed() {
        let report = GcReport {
            scanned: 3,
            kept: 2,
            deleted: 1,
            bytes_freed: 10,
            at: W3cDateTime::parse("2026-11-21T10:00:00Z").unwrap().value,
        };
        // As `published/gc.json` was written before: the report alone.
        let old = serde_json::to_vec(&report).unwrap();
        let meta: GcMeta = serde_json::from_slice(&old).unwrap();
        assert_eq!(meta.last.as_ref(), Some(&report));
        assert_eq!(meta.first_due, None);
        // A report is written the same way still (one object, the report's fields).
        let now = serde_json::to_value(GcMeta {
            last: Some(report.clone()),
            first_due: None,
        })
        .unwrap();
        assert_eq!(now, serde_json::to_value(&report).unwrap());
        // A schedule alone has no report.
        let due = W3cDateTime::parse("2026-11-22T10:00:00Z").unwrap().value;
        let scheduled = serde_json::to_vec(&GcMeta {
            last: None,
            first_due: Some(due),
        })
        .unwrap();
        let back: GcMeta = serde_json::from_slice(&scheduled).unwrap();
        assert_eq!((back.last, back.first_due), (None, Some(due)));
    }

    #[test]
    fn fan_out_directories_are_two_hex_digits() {
        assert_eq!(fan_of("ab"), Some(0xab));
        assert_eq!(fan_of("0F"), Some(0x0f));
        assert_eq!(
            (fan_of("zz"), fan_of("abc"), fan_of("a")),
            (None, None, None)
        );
    }

    #[test]
    fn addresses_are_64_hex_digits() {
        let a = decode(&"aB".repeat(32)).unwrap();
        assert_eq!(a, [0xab; 32]);
        assert!(decode(&"ab".repeat(31)).is_none());
        assert!(decode(&format!("{}zz", "ab".repeat(31))).is_none());
    }
}
