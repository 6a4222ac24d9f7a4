//! `rsagg audit`: the store compared with what each upstream lists now, read-only (the
//! state is opened with `State::open_read_only`, no blob or record is written).
//!
//! For every listed resource: is there a present record and its blob (`missing`), does
//! the list announce other bytes than the copy's (a hash or length the copy does not have,
//! or without either a different `lastmod`: `changed`); with `read_data` the blob is read
//! back and re-hashed (`corrupt` when its bytes are not what its address and the record
//! say; the upstream's announced hashes are checked against the re-hashed bytes); with
//! `fetch` the upstream resource is fetched and hashed too, which is the only way to see an
//! upstream that changed bytes without changing its list (`changed`). Then every present
//! record no list names is `extra` (also the records of upstreams no longer in the
//! pipeline).
//!
//! Bounded memory: the lists are streamed; which (upstream, URI) were listed goes to a
//! [`Seen`] (memory up to `[store] listed_memory_bytes`, the rest in sorted runs on local
//! disk, 16 bytes per listed resource), whose keys begin with the resource's hash slot
//! (`rsagg_store::slot_of`): `extra` is found in one pass over the state's slot index of
//! present resources (`State::present_in_slots`) beside the sorted keys, one slot's keys
//! (1/65,536 of the listed resources) held at a time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use md5::Digest as _;
use rsagg_config::UpstreamConfig;
use rsagg_fetch::{Access, CapabilitySet, Request};
use rsagg_layout::report::UpstreamReport;
use rsagg_model::{Capability, UrlEntry};
use rsagg_store::StoreFailure as _;
use rsagg_store::{BlobInfo, ResourceRecord, ResourceStatus, State};
use serde::Serialize;
use url::Url;

use crate::Error;
use crate::compare::{announces_other_bytes, verify};
use crate::context::{Ctx, Harvest};
use crate::later::{Later, is_deletion};
use crate::seen::{Seen, SeenLimits, key};
use crate::upstream::discover_sets;

/// What `audit` checks beyond the lists.
#[derive(Debug, Clone, Copy)]
pub struct AuditOptions {
    /// Read every stored blob back and re-hash it (`restic check --read-data`).
    pub read_data: bool,
    /// Fetch every listed resource from its upstream and compare its bytes with the copy.
    pub fetch: bool,
    /// Discrepancies listed at most (all are counted).
    pub max_items: usize,
}

/// A kind of discrepancy between the store and an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Discrepancy {
    /// Listed upstream, but no present copy (no record, a deleted one, or its blob is gone).
    Missing,
    /// A present copy no upstream list names.
    Extra,
    /// The upstream has (or announces) other bytes than the copy.
    Changed,
    /// The stored bytes are not what their address and record say (`read_data`).
    Corrupt,
}

/// One discrepancy.
#[derive(Debug, Clone, Serialize)]
pub struct AuditItem {
    /// The upstream.
    pub upstream: String,
    /// What kind.
    pub kind: Discrepancy,
    /// The resource's upstream URI.
    pub uri: String,
    /// What was found, for people.
    pub detail: String,
}

/// One upstream's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpstreamAudit {
    /// The upstream.
    pub name: String,
    /// Sets of resources (Capability Lists) audited.
    pub sets: usize,
    /// Entries its Resource Lists have.
    pub listed: u64,
    /// Counts per kind.
    pub missing: u64,
    /// See [`Discrepancy::Extra`].
    pub extra: u64,
    /// See [`Discrepancy::Changed`].
    pub changed: u64,
    /// See [`Discrepancy::Corrupt`].
    pub corrupt: u64,
    /// Whether `extra` was looked for (only when every list was read completely).
    pub extra_checked: bool,
    /// What prevented a complete audit (the upstream then is not in sync).
    pub errors: Vec<String>,
}

/// What `audit` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditReport {
    /// The collection (set by the caller).
    pub collection: String,
    /// True when nothing is missing, extra, changed or corrupt and every upstream could be
    /// audited.
    pub in_sync: bool,
    /// What was checked beyond the lists: `"lists"`, plus `"read-data"`, `"fetch"`.
    pub checks: Vec<&'static str>,
    /// Per upstream.
    pub upstreams: Vec<UpstreamAudit>,
    /// The discrepancies, at most `max_items`.
    pub items: Vec<AuditItem>,
    /// True when there were more than `items` holds.
    pub items_truncated: bool,
}

impl AuditReport {
    fn add(&mut self, max: usize, item: AuditItem) {
        if !self.upstreams.iter().any(|u| u.name == item.upstream) {
            // Records of an upstream no longer in the pipeline.
            self.upstreams.push(UpstreamAudit {
                name: item.upstream.clone(),
                extra_checked: true,
                ..UpstreamAudit::default()
            });
        }
        let up = self.upstreams.iter_mut().find(|u| u.name == item.upstream);
        if let Some(u) = up {
            match item.kind {
                Discrepancy::Missing => u.missing += 1,
                Discrepancy::Extra => u.extra += 1,
                Discrepancy::Changed => u.changed += 1,
                Discrepancy::Corrupt => u.corrupt += 1,
            }
        }
        if self.items.len() < max {
            self.items.push(item);
        } else {
            self.items_truncated = true;
        }
    }

    /// The human summary: one line per discrepancy listed, then one per upstream.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for i in &self.items {
            let kind = match i.kind {
                Discrepancy::Missing => "missing",
                Discrepancy::Extra => "extra",
                Discrepancy::Changed => "changed",
                Discrepancy::Corrupt => "corrupt",
            };
            s.push_str(&format!(
                "{kind:<8} {} {} ({})\n",
                i.upstream, i.uri, i.detail
            ));
        }
        if self.items_truncated {
            s.push_str("… more discrepancies than listed (see the counts)\n");
        }
        for u in &self.upstreams {
            s.push_str(&format!(
                "{}: {} listed, {} missing, {} extra{}, {} changed, {} corrupt{}\n",
                u.name,
                u.listed,
                u.missing,
                u.extra,
                if u.extra_checked {
                    ""
                } else {
                    " (not checked)"
                },
                u.changed,
                u.corrupt,
                if u.errors.is_empty() {
                    String::new()
                } else {
                    format!("; not audited completely: {}", u.errors.join("; "))
                }
            ));
        }
        s.push_str(if self.in_sync {
            "IN SYNC\n"
        } else {
            "NOT IN SYNC\n"
        });
        s
    }
}

/// The (upstream, URI) pairs the lists named (see the module documentation).
pub(crate) struct Listed {
    seen: Seen,
}

impl Listed {
    pub(crate) fn new(limits: SeenLimits) -> Listed {
        Listed {
            seen: Seen::new(limits),
        }
    }

    /// Notes that `uri` of `upstream` was listed; true the first time.
    pub(crate) fn insert(&mut self, upstream: &str, uri: &str) -> Result<bool, Error> {
        self.seen.insert(key(upstream, uri))
    }

    /// Calls `extra` for every present resource of the state that was not listed, among the
    /// upstreams `complete` says were read completely, or of an upstream not `configured`;
    /// with `set`, only for resources whose record is of that set (looked up for the
    /// unlisted ones only).
    pub(crate) async fn unlisted(
        self,
        state: &State,
        configured: &HashSet<String>,
        complete: &HashSet<String>,
        set: Option<&str>,
        deadline: Option<Duration>,
        mut extra: impl FnMut(String, String, &'static str),
    ) -> Result<(), Error> {
        let mut sorted = self.seen.into_sorted()?;
        let scan = || "scanning the slot index of the state".to_owned();
        let mut members =
            store_request(deadline, scan, state.present_in_slots(0..=u16::MAX)).await?;
        let mut slot = None;
        let mut keys = Vec::new();
        while let Some((s, upstream, uri)) = store_request(deadline, scan, members.next()).await? {
            if !configured.contains(&upstream) {
                extra(upstream, uri, "its upstream is no longer in the pipeline");
                continue;
            }
            if !complete.contains(&upstream) {
                continue;
            }
            if slot != Some(s) {
                keys.clear();
                sorted.slot(s, &mut keys)?;
                slot = Some(s);
            }
            if keys.binary_search(&key(&upstream, &uri)).is_ok() {
                continue;
            }
            if let Some(set) = set {
                let record = store_request(
                    deadline,
                    || format!("reading the record of {uri}"),
                    state.resource(&upstream, &uri),
                )
                .await?;
                if record.is_none_or(|r| r.set != set) {
                    continue;
                }
            }
            extra(
                upstream,
                uri,
                "not in the upstream's state (no Resource List names it, or a change after the list deleted it)",
            );
        }
        Ok(())
    }
}

/// SHA-256, MD5 and length of a stream of bytes.
pub(crate) async fn hash_stream<S, E>(mut s: S) -> Result<BlobInfo, E>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
{
    let mut sha = sha2::Sha256::new();
    let mut md5 = md5::Md5::new();
    let mut length = 0u64;
    while let Some(chunk) = s.next().await {
        let chunk = chunk?;
        sha.update(&chunk);
        md5.update(&chunk);
        length += chunk.len() as u64;
    }
    Ok(BlobInfo {
        sha256: hex(&sha.finalize()),
        md5: hex(&md5.finalize()),
        sha1: None,
        length,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the list says of the bytes, for messages.
fn announced(e: &UrlEntry) -> String {
    let md = e.md.as_ref();
    let mut parts = Vec::new();
    if let Some(h) = md.and_then(|m| m.hash.as_ref()) {
        parts.push(h.to_string());
    }
    if let Some(l) = md.and_then(|m| m.length) {
        parts.push(format!("length {l}"));
    }
    parts.join(", ")
}

/// A store request of the audit, bounded by `deadline`: one that fails, or does not answer
/// in time, is a store error (the audit stops, exit 2), never a discrepancy: a request that
/// failed says nothing of what the store holds.
pub(crate) async fn store_request<T>(
    deadline: Option<Duration>,
    what: impl FnOnce() -> String,
    request: impl Future<Output = Result<T, rsagg_store::Error>>,
) -> Result<T, Error> {
    let Some(deadline) = deadline else {
        return request.await.map_err(Error::Store);
    };
    match tokio::time::timeout(deadline, request).await {
        Ok(r) => r.map_err(Error::Store),
        Err(_) => Err(Error::StoreDeadline {
            what: what(),
            deadline: humantime::format_duration(deadline).to_string(),
        }),
    }
}

/// Checks one entry of the upstream's state against the state (and the blob, and the
/// upstream); `Err` when the store failed (see [`store_request`]).
async fn check_entry(
    ctx: &Ctx,
    access: &Access,
    upstream: &str,
    e: UrlEntry,
    opts: AuditOptions,
    deadline: Duration,
) -> Result<Vec<(Discrepancy, String, String)>, Error> {
    let deadline = Some(deadline);
    let uri = e.loc.trim().to_owned();
    let mut out = Vec::new();
    let mut found = |kind, detail: String| out.push((kind, uri.clone(), detail));
    let record = store_request(
        deadline,
        || format!("reading the record of {uri}"),
        ctx.state.resource(upstream, &uri),
    )
    .await?;
    let (r, copy) = match &record {
        None => {
            found(Discrepancy::Missing, "not in the store".into());
            return Ok(out);
        }
        Some(r) if r.status == ResourceStatus::Deleted => {
            found(
                Discrepancy::Missing,
                "deleted in the store, listed upstream".into(),
            );
            return Ok(out);
        }
        Some(ResourceRecord { copy: None, .. }) => {
            found(Discrepancy::Missing, "a record without a copy".into());
            return Ok(out);
        }
        Some(r @ ResourceRecord { copy: Some(c), .. }) => (r, c),
    };
    let mut changed = false;
    if announces_other_bytes(&e, r) {
        changed = true;
        found(
            Discrepancy::Changed,
            format!(
                "the list announces {}; the copy has md5:{}, length {}",
                announced(&e),
                copy.md5,
                copy.length
            ),
        );
    } else if e
        .md
        .as_ref()
        .is_none_or(|m| m.hash.is_none() && m.length.is_none())
        && let (Some(listed), Some(held)) = (e.lastmod, r.upstream_meta.lastmod)
        && !listed.cmp_instant(&held).is_eq()
    {
        changed = true;
        found(
            Discrepancy::Changed,
            format!("the list's lastmod is {listed}, the copy's {held}"),
        );
    }
    let blob = || format!("blob {}", copy.sha256);
    if opts.read_data {
        let read = async {
            let stream = ctx.blobs.get(&copy.sha256).await?;
            hash_stream(stream)
                .await
                .map_err(|e| rsagg_store::Error::object_store(blob(), e))
        };
        match store_request(deadline, || format!("reading {}", blob()), read).await {
            Ok(info) if info.sha256 != copy.sha256 || info.length != copy.length => found(
                Discrepancy::Corrupt,
                format!(
                    "the stored bytes are sha-256:{} ({} bytes), their address and record say sha-256:{} ({} bytes)",
                    info.sha256, info.length, copy.sha256, copy.length
                ),
            ),
            Ok(info) => {
                if !changed && let Err((expected, got)) = verify(&e, &info) {
                    changed = true;
                    found(
                        Discrepancy::Changed,
                        format!("the list announces {expected}, the stored bytes are {got}"),
                    );
                }
            }
            // Not readable: gone (the store says so when asked), else the store failed.
            Err(err) => {
                let exists = store_request(
                    deadline,
                    || format!("looking up {}", blob()),
                    ctx.blobs.exists(&copy.sha256),
                )
                .await?;
                if exists {
                    return Err(err);
                }
                found(
                    Discrepancy::Missing,
                    format!("its {} is gone from the store", blob()),
                );
            }
        }
    } else {
        let exists = store_request(
            deadline,
            || format!("looking up {}", blob()),
            ctx.blobs.exists(&copy.sha256),
        )
        .await?;
        if !exists {
            found(
                Discrepancy::Missing,
                format!("its {} is gone from the store", blob()),
            );
        }
    }
    if opts.fetch && !changed {
        let fetched = match Url::parse(&uri) {
            Ok(url) => {
                // An entry described encoded (`encoding`, spec 7) is compared as served,
                // undecoded: its copy holds those bytes.
                let req = Request {
                    max_bytes: ctx.fetch.max_body_bytes,
                    encoded: crate::resource::announced_coding(&e),
                    ..Request::default()
                };
                match ctx.fetcher.get(&url, access, &req).await {
                    Ok(f) => hash_stream(f.body).await.map_err(|e| e.to_string()),
                    Err(err) => Err(err.to_string()),
                }
            }
            Err(err) => Err(format!("not a URL: {err}")),
        };
        match fetched {
            Ok(info) if info.sha256 != copy.sha256 => found(
                Discrepancy::Changed,
                format!(
                    "the upstream now serves other bytes (sha-256:{}, {} bytes) than the copy (sha-256:{}, {} bytes); its list does not say so",
                    info.sha256, info.length, copy.sha256, copy.length
                ),
            ),
            Ok(_) => {}
            Err(err) => found(
                Discrepancy::Changed,
                format!("cannot be fetched to compare: {err}"),
            ),
        }
    }
    Ok(out)
}

/// Audits `upstreams` against `ctx`'s state (opened read-only by the caller). Every store
/// request is given up after `store_deadline`; a store error (a failed request, or one past
/// its deadline) ends the audit with `Err` ([`Error::is_store`]): nothing can be judged then.
pub async fn audit(
    ctx: Arc<Ctx>,
    upstreams: &[UpstreamConfig],
    opts: AuditOptions,
    store_deadline: Duration,
) -> Result<AuditReport, Error> {
    let mut report = AuditReport {
        checks: std::iter::once("lists")
            .chain(opts.read_data.then_some("read-data"))
            .chain(opts.fetch.then_some("fetch"))
            .collect(),
        ..AuditReport::default()
    };
    let mut listed = Listed::new(ctx.listed);
    let mut complete = HashSet::new();
    for up in upstreams {
        report.upstreams.push(UpstreamAudit {
            name: up.name.clone(),
            ..UpstreamAudit::default()
        });
        let mut discovered = UpstreamReport::new(&up.name);
        let Some((access, sets)) = discover_sets(&ctx, up, &mut discovered, None).await else {
            let errors = discovered.error.into_iter().collect();
            if let Some(u) = report.upstreams.last_mut() {
                u.errors = errors;
            }
            continue;
        };
        let h = Harvest::unbounded(ctx.clone(), Arc::new(up.clone()), access);
        let mut all_read = true;
        for set in &sets {
            if let Err(e) = audit_set(&h, set, opts, store_deadline, &mut listed, &mut report).await
            {
                if e.is_fenced() || e.is_store() {
                    return Err(e);
                }
                all_read = false;
                if let Some(u) = report.upstreams.last_mut() {
                    u.errors.push(format!("set {}: {e}", set.url));
                }
            }
        }
        if let Some(u) = report.upstreams.last_mut() {
            u.sets = sets.len();
            u.extra_checked = all_read;
        }
        if all_read {
            complete.insert(up.name.clone());
        }
    }
    let configured: HashSet<String> = upstreams.iter().map(|u| u.name.clone()).collect();
    let max = opts.max_items;
    listed
        .unlisted(
            &ctx.state,
            &configured,
            &complete,
            None,
            Some(store_deadline),
            |upstream, uri, why| {
                report.add(
                    max,
                    AuditItem {
                        upstream,
                        kind: Discrepancy::Extra,
                        uri,
                        detail: why.into(),
                    },
                );
            },
        )
        .await?;
    report.in_sync = report
        .upstreams
        .iter()
        .all(|u| u.errors.is_empty() && u.missing + u.extra + u.changed + u.corrupt == 0);
    Ok(report)
}

/// One set: the upstream's state (its Resource List, and the changes after the list's `at`,
/// `later.rs`) streamed and every entry checked.
async fn audit_set(
    h: &Harvest,
    set: &CapabilitySet,
    opts: AuditOptions,
    deadline: Duration,
    listed: &mut Listed,
    report: &mut AuditReport,
) -> Result<(), Error> {
    if h.up.is_oai() {
        return audit_oai_set(h, set, opts, deadline, listed, report).await;
    }
    let Some(list_url) = set.get(Capability::ResourceList).cloned() else {
        return Err(Error::Upstream {
            url: set.url.to_string(),
            section: "10",
            message: "no Resource List to compare the store with".into(),
        });
    };
    // The changes after the list's `at`: a resource they concern is judged by its last
    // change, not by its stale list entry.
    let (later_at, later) = match h.later_changes(set, &list_url, true).await? {
        Some((at, later)) => (Some(at), later),
        None => (None, Later::none()),
    };
    let docs = h.docs();
    let (producer, entries) = docs.read_entries(&list_url);
    let later_ref = &later;
    let consumer = async {
        let entries = entries.filter(|(_, e)| std::future::ready(!later_ref.contains(&e.loc)));
        check_all(
            h,
            entries.map(|(_, e)| e),
            opts,
            deadline,
            &mut *listed,
            &mut *report,
        )
        .await
    };
    let (header, consumed) = futures::join!(producer, consumer);
    consumed?;
    let header = header?;
    let at = header.md.as_ref().and_then(|m| m.at);
    if let (Some(before), Some(now)) = (later_at, at)
        && !before.cmp_instant(&now).is_eq()
    {
        return Err(Error::Upstream {
            url: list_url.to_string(),
            section: "10.1",
            message: format!(
                "the Resource List changed while it was audited (at {before}, then {now}); audit again"
            ),
        });
    }
    // Then the resources changed after the list, by their last change; a deleted one is not
    // in the upstream's state (a present copy of it is found `extra` below).
    let changed = later.into_entries().into_iter().filter(|e| !is_deletion(e));
    check_all(
        h,
        futures::stream::iter(changed),
        opts,
        deadline,
        listed,
        report,
    )
    .await?;
    Ok(())
}

/// One set of an OAI-PMH upstream: its whole list is its state ([`Harvest::oai_state`]).
/// The listing carries each record's bytes, so they are always compared (what `--fetch`
/// does for a ResourceSync upstream) and `--fetch` fetches nothing more: a `GetRecord`
/// answer is the record in its envelope, not the bytes the copy holds.
async fn audit_oai_set(
    h: &Harvest,
    set: &CapabilitySet,
    opts: AuditOptions,
    deadline: Duration,
    listed: &mut Listed,
    report: &mut AuditReport,
) -> Result<(), Error> {
    let first = h.oai_whole_list(set).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(crate::lists::ENTRIES_AHEAD);
    // Deleted records are not in the upstream's state: a present copy of one is `extra`.
    let entries =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .filter_map(|(e, deleted): (UrlEntry, bool)| {
                std::future::ready((!deleted).then_some(e))
            });
    let opts = AuditOptions {
        fetch: false,
        ..opts
    };
    let (state, checked) = futures::join!(
        h.oai_entries(set, first, tx),
        check_all(h, entries, opts, deadline, listed, report)
    );
    checked?;
    state
}

/// Checks each entry of the upstream's state (at `[fetch] concurrency`), notes it as listed
/// and adds what it found to the report.
async fn check_all(
    h: &Harvest,
    entries: impl futures::Stream<Item = UrlEntry>,
    opts: AuditOptions,
    deadline: Duration,
    listed: &mut Listed,
    report: &mut AuditReport,
) -> Result<(), Error> {
    let upstream = h.up.name.as_str();
    let mut checked = std::pin::pin!(
        entries
            .map(|e| {
                let (ctx, access) = (&h.ctx, &h.access);
                let uri = e.loc.trim().to_owned();
                async move {
                    (
                        uri,
                        check_entry(ctx, access, upstream, e, opts, deadline).await,
                    )
                }
            })
            .buffer_unordered(h.ctx.fetch.concurrency.max(1))
    );
    while let Some((uri, found)) = checked.next().await {
        let found = found?;
        listed.insert(upstream, &uri)?;
        if let Some(u) = report.upstreams.last_mut() {
            u.listed += 1;
        }
        for (kind, uri, detail) in found {
            report.add(
                opts.max_items,
                AuditItem {
                    upstream: upstream.to_owned(),
                    kind,
                    uri,
                    detail,
                },
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_store::{Applied, Commit, UpstreamMeta};

    fn present(upstream: &str, uri: &str) -> Applied {
        Applied {
            change: rsagg_model::Change::Created,
            record: ResourceRecord {
                upstream: upstream.into(),
                uri: uri.into(),
                status: ResourceStatus::Present,
                copy: Some(BlobInfo {
                    sha256: "00".repeat(32),
                    md5: "11".repeat(16),
                    sha1: None,
                    length: 1,
                }),
                mime_type: None,
                set: String::new(),
                lastmod: rsagg_model::W3cDateTime::now(),
                seq: 0,
                upstream_meta: UpstreamMeta::default(),
            },
        }
    }

    #[tokio::test]
    async fn unlisted_present_resources_are_found_from_runs_on_disk() {
        let loc = rsagg_store::open_object_store("memory://audit").unwrap();
        let state = State::open(loc.objects, "test").await.unwrap();
        let uris: Vec<String> = (0..3000).map(|i| format!("http://e.org/{i}")).collect();
        let mut changes: Vec<Applied> = uris.iter().map(|u| present("a", u)).collect();
        changes.push(present("b", "http://e.org/kept"));
        changes.push(present("gone", "http://e.org/orphan"));
        state
            .commit(Commit {
                upstream: "a".into(),
                changes,
                ..Commit::default()
            })
            .await
            .unwrap();
        // 1,024 keys in memory at most: the rest goes to disk.
        let mut listed = Listed::new(SeenLimits {
            memory_bytes: 0,
            filter_bytes: 1024,
        });
        // Every URI of `a` listed but two; `b` was not read completely.
        for u in uris
            .iter()
            .filter(|u| !u.ends_with("/7") && !u.ends_with("/250"))
        {
            listed.insert("a", u).unwrap();
        }
        let configured: HashSet<String> = ["a", "b"].map(String::from).into();
        let complete: HashSet<String> = ["a"].map(String::from).into();
        let mut extra = Vec::new();
        listed
            .unlisted(&state, &configured, &complete, None, None, |up, uri, _| {
                extra.push(format!("{up} {uri}"))
            })
            .await
            .unwrap();
        extra.sort();
        assert_eq!(
            extra,
            [
                "a http://e.org/250",
                "a http://e.org/7",
                "gone http://e.org/orphan"
            ]
        );
        state.close().await.unwrap();
    }

    #[tokio::test]
    async fn hashes_of_a_stream() {
        let chunks = futures::stream::iter(vec![
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"hello ")),
            Ok(bytes::Bytes::from_static(b"world")),
        ]);
        let info = hash_stream(chunks).await.unwrap();
        assert_eq!(info.md5, "5eb63bbbe01eeed093cb22bb8f5acdc3");
        assert_eq!(
            info.sha256,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert_eq!(info.length, 11);
    }
}
