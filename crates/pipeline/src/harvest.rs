//! One upstream: discovery, baseline (or re-sync) from the Resource List, incremental from
//! Change Lists, verification, and commits.
//!
//! Guarantees (spec 12.1, Destination side):
//! - Changes are processed in upstream order (`datetime`, else `lastmod`, else document
//!   order) and the checkpoint (last instant + the changes seen at that instant) only moves
//!   past a change once its copy is stored and committed; a failed change stops the list
//!   there, so a rerun resumes exactly at it, and replays are recognised and dropped.
//! - When the Change List no longer reaches back to the checkpoint (its `from`, or its oldest
//!   change, is later), or there is no Change List, the upstream is re-synced from its
//!   Resource List (creates, updates, deletes) and the report says so.
//! - A baseline or re-sync only records its checkpoint when every listed resource was
//!   stored, so a resource that failed is retried rather than silently missing.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use rsagg_fetch::{Access, Auth, CapabilitySet, Fetcher, Request};
use rsagg_model::{Capability, Change, HashAlgorithm, Root, UrlEntry, W3cDateTime};
use rsagg_store::{
    Applied, BlobInfo, Blobs, Checkpoint, Commit, QuarantineRecord, ResourceRecord, ResourceStatus,
    SeenKey, State, UpstreamMeta,
};
use sha2::Digest;
use tokio::sync::mpsc;
use url::Url;

use crate::Error;
use crate::config::{BaselineSource, FetchSection, UpstreamConfig};
use crate::dumps;
use crate::lists::Docs;

/// Commits carry at most this many resource changes.
const COMMIT_BATCH: usize = 256;
/// Entries of one Change List held for ordering (the spec allows 50,000 per list).
const MAX_CHANGES_PER_LIST: usize = 1_000_000;

/// How an upstream's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Everything was harvested and committed.
    Ok,
    /// Something failed; what was done before is committed and the rest is retried next run.
    Failed,
}

/// What happened to one upstream in a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpstreamReport {
    /// Upstream name.
    pub name: String,
    /// Ok or failed.
    pub verdict: Verdict,
    /// How the Capability Lists were found.
    pub route: Option<String>,
    /// Sets of resources (Capability Lists) harvested.
    pub sets: usize,
    /// Resources created in rsagg's copy.
    pub created: u64,
    /// Resources updated.
    pub updated: u64,
    /// Resources deleted (marked; history kept).
    pub deleted: u64,
    /// Resources found unchanged (skipped or identical bytes).
    pub unchanged: u64,
    /// Upstream changes already processed (replays, overlaps) that were dropped.
    pub replayed: u64,
    /// Resources quarantined (persistent, unexplained mismatch).
    pub quarantined: u64,
    /// Listed resources the upstream no longer has (404/410), skipped.
    pub gone: u64,
    /// Changes superseded by a later change of the same resource in the same list.
    pub superseded: u64,
    /// Resources that could not be fetched.
    pub failed: u64,
    /// Why the upstream was re-synced from its Resource List, if it was.
    pub resyncs: Vec<String>,
    /// Warnings (upstream quirks, accepted mismatches).
    pub warnings: Vec<String>,
    /// The first error, when the verdict is failed.
    pub error: Option<String>,
    /// The upstream's checkpoint after the run: the last upstream instant processed (the
    /// oldest among its sets; `None` while some set has none yet). `serve` derives the
    /// upstream's lag from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<W3cDateTime>,
    /// Another writer of the same state fenced this run out (exit code 3).
    #[serde(skip)]
    pub fenced: bool,
}

impl UpstreamReport {
    pub(crate) fn new(name: &str) -> Self {
        UpstreamReport {
            name: name.to_owned(),
            verdict: Verdict::Ok,
            route: None,
            sets: 0,
            created: 0,
            updated: 0,
            deleted: 0,
            unchanged: 0,
            replayed: 0,
            quarantined: 0,
            gone: 0,
            superseded: 0,
            failed: 0,
            resyncs: Vec::new(),
            warnings: Vec::new(),
            error: None,
            checkpoint: None,
            fenced: false,
        }
    }

    pub(crate) fn warn(&mut self, message: String) {
        tracing::warn!(upstream = %self.name, "{message}");
        if self.warnings.len() < 100 {
            self.warnings.push(message);
        }
    }

    pub(crate) fn fail(&mut self, message: String) {
        tracing::error!(upstream = %self.name, "{message}");
        self.verdict = Verdict::Failed;
        if self.error.is_none() {
            self.error = Some(message);
        }
    }
}

/// Shared by every upstream of a run.
pub(crate) struct Ctx {
    pub fetcher: Fetcher,
    pub blobs: Blobs,
    pub state: Arc<State>,
    pub fetch: FetchSection,
    /// Resources processed so far (for progress display).
    pub progress: Arc<AtomicU64>,
}

/// Access settings of an upstream, credentials read from the environment.
pub(crate) fn access_of(up: &UpstreamConfig) -> Result<Access, String> {
    let auth = match (&up.bearer_token_env, &up.basic_auth_env) {
        (Some(var), _) => Some(Auth::Bearer(std::env::var(var).map_err(|_| {
            format!("environment variable `{var}` (bearer_token_env) is not set")
        })?)),
        (None, Some(var)) => {
            let v = std::env::var(var)
                .map_err(|_| format!("environment variable `{var}` (basic_auth_env) is not set"))?;
            let (user, password) = v
                .split_once(':')
                .ok_or_else(|| format!("`{var}` must hold user:password"))?;
            Some(Auth::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            })
        }
        (None, None) => None,
    };
    let auth_hosts = match &up.auth_hosts {
        Some(h) => h.clone(),
        None => Url::parse(&up.url)
            .ok()
            .and_then(|u| {
                u.host_str().map(|h| match u.port() {
                    Some(p) => format!("{h}:{p}"),
                    None => h.to_owned(),
                })
            })
            .into_iter()
            .collect(),
    };
    Ok(Access {
        allow_private: up.allow_private,
        auth,
        auth_hosts,
    })
}

/// Harvests one upstream; never panics or returns early without a report.
pub(crate) async fn harvest(ctx: Arc<Ctx>, up_arc: Arc<UpstreamConfig>) -> UpstreamReport {
    harvest_upstream(ctx, up_arc).await.0
}

/// What a poll of one upstream leaves for the follower: the sets of resources discovered
/// (with their change-notification channels) and the prepared harvest, for push passes.
pub(crate) struct Polled {
    pub sets: Vec<CapabilitySet>,
    pub harvest: Option<Harvest>,
}

/// [`harvest`], also returning the sets and the prepared harvest (`run --follow`).
pub(crate) async fn harvest_upstream(
    ctx: Arc<Ctx>,
    up_arc: Arc<UpstreamConfig>,
) -> (UpstreamReport, Polled) {
    let mut polled = Polled {
        sets: Vec::new(),
        harvest: None,
    };
    let report = harvest_into(ctx, up_arc, &mut polled).await;
    (report, polled)
}

async fn harvest_into(
    ctx: Arc<Ctx>,
    up_arc: Arc<UpstreamConfig>,
    polled: &mut Polled,
) -> UpstreamReport {
    let up = &*up_arc;
    let mut report = UpstreamReport::new(&up.name);
    let access = match access_of(up) {
        Ok(a) => a,
        Err(e) => {
            report.fail(e);
            return report;
        }
    };
    let entry = match Url::parse(&up.url) {
        Ok(u) => u,
        Err(e) => {
            report.fail(format!("{}: {e}", up.url));
            return report;
        }
    };
    let discovery = match rsagg_fetch::discover(&ctx.fetcher, &entry, &access).await {
        Ok(d) => d,
        Err(e) => {
            report.fail(format!("discovery from {entry} failed: {e}"));
            return report;
        }
    };
    report.route = Some(format!("{:?}", discovery.route));
    tracing::info!(
        upstream = %up.name,
        route = ?discovery.route,
        sets = discovery.capability_lists.len(),
        "discovered"
    );
    for w in discovery.warnings {
        report.warn(w);
    }
    let sets: Vec<CapabilitySet> = discovery
        .capability_lists
        .into_iter()
        .filter(|s| match &up.capability_lists {
            None => true,
            Some(wanted) => wanted.iter().any(|w| w == s.url.as_str()),
        })
        .collect();
    if sets.is_empty() {
        report.fail(format!(
            "no Capability List found from {entry}{} (spec 8, 9)",
            if up.capability_lists.is_some() {
                " matching capability_lists"
            } else {
                ""
            }
        ));
        return report;
    }
    report.sets = sets.len();
    let mut quarantined = HashSet::new();
    match ctx.state.quarantine().await {
        Ok(mut q) => loop {
            match q.next().await {
                Ok(Some(r)) if r.upstream == up.name => {
                    quarantined.insert(r.uri);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    report.fail(e.to_string());
                    return report;
                }
            }
        },
        Err(e) => {
            report.fail(e.to_string());
            return report;
        }
    }
    let h = Harvest {
        ctx: ctx.clone(),
        up: up_arc,
        access,
        quarantined: Arc::new(quarantined),
    };
    for set in &sets {
        if let Err(e) = h.harvest_set(set, &mut report).await {
            if e.is_fenced() {
                report.fenced = true;
                report.fail(e.to_string());
                return report;
            }
            report.fail(format!("set {}: {e}", set.url));
        }
    }
    report.checkpoint = oldest_checkpoint(&ctx.state, &h.up.name, &sets).await;
    polled.sets = sets;
    polled.harvest = Some(h);
    report
}

/// The oldest checkpoint instant among `sets` of `upstream`; `None` when some set has none
/// (never synchronised) or the state cannot tell.
async fn oldest_checkpoint(
    state: &State,
    upstream: &str,
    sets: &[CapabilitySet],
) -> Option<W3cDateTime> {
    let mut oldest: Option<W3cDateTime> = None;
    for set in sets {
        let t = state
            .checkpoint(upstream, set.url.as_str())
            .await
            .ok()
            .flatten()?
            .instant?;
        if oldest.as_ref().is_none_or(|o| t.cmp_instant(o).is_lt()) {
            oldest = Some(t);
        }
    }
    oldest
}

/// One upstream's harvest; cheap to clone, so each resource's work can run as its own task
/// (on either core) rather than all inside the one task that drives the list.
#[derive(Clone)]
pub(crate) struct Harvest {
    ctx: Arc<Ctx>,
    up: Arc<UpstreamConfig>,
    access: Access,
    /// URIs of this upstream in quarantine when the run started (few): a verified copy
    /// releases them.
    quarantined: Arc<HashSet<String>>,
}

/// What became of one resource.
enum Outcome {
    Stored {
        change: Change,
        record: ResourceRecord,
        /// Lift the resource's quarantine.
        release: bool,
    },
    /// Same bytes as the copy held; the record may carry new upstream metadata.
    Unchanged(Option<ResourceRecord>),
    Deleted(ResourceRecord),
    /// Nothing to do (deletion of an unknown resource).
    Skipped,
    /// Listed, but the upstream answers 404/410 (deleted since the list was made).
    Gone(String),
    /// A later change of the same resource in the same list supersedes this one.
    Superseded,
    Quarantined(QuarantineRecord),
    Failed(String),
}

/// Accumulates outcomes into bounded, atomic commits.
struct Committer<'a> {
    state: &'a State,
    progress: &'a AtomicU64,
    commit: Commit,
    pending: usize,
}

impl<'a> Committer<'a> {
    fn new(ctx: &'a Ctx, upstream: &str, set: &str) -> Self {
        Committer {
            state: &ctx.state,
            progress: &ctx.progress,
            commit: Commit {
                upstream: upstream.to_owned(),
                set: set.to_owned(),
                ..Commit::default()
            },
            pending: 0,
        }
    }

    async fn add(&mut self, outcome: Outcome, report: &mut UpstreamReport) -> Result<bool, Error> {
        let ok = match outcome {
            Outcome::Stored {
                change,
                record,
                release,
            } => {
                match change {
                    Change::Created => report.created += 1,
                    _ => report.updated += 1,
                }
                if release {
                    self.commit.release.push(record.uri.clone());
                }
                self.commit.changes.push(Applied { change, record });
                true
            }
            Outcome::Unchanged(touched) => {
                report.unchanged += 1;
                if let Some(r) = touched {
                    self.commit.touched.push(r);
                }
                true
            }
            Outcome::Deleted(record) => {
                report.deleted += 1;
                self.commit.changes.push(Applied {
                    change: Change::Deleted,
                    record,
                });
                true
            }
            Outcome::Skipped => true,
            Outcome::Superseded => {
                report.superseded += 1;
                true
            }
            Outcome::Gone(message) => {
                report.gone += 1;
                report.warn(message);
                true
            }
            Outcome::Quarantined(q) => {
                report.quarantined += 1;
                report.warn(format!(
                    "quarantined {}: {} (expected {}, got {})",
                    q.uri, q.reason, q.expected, q.got
                ));
                self.commit.quarantine.push(q);
                true
            }
            Outcome::Failed(message) => {
                report.failed += 1;
                report.fail(message);
                false
            }
        };
        self.pending += 1;
        self.progress.fetch_add(1, Ordering::Relaxed);
        if self.pending >= COMMIT_BATCH {
            self.flush().await?;
        }
        Ok(ok)
    }

    fn checkpoint(&mut self, cp: Checkpoint) {
        self.commit.checkpoint = Some(cp);
    }

    async fn flush(&mut self) -> Result<(), Error> {
        let c = &mut self.commit;
        if c.changes.is_empty()
            && c.touched.is_empty()
            && c.quarantine.is_empty()
            && c.release.is_empty()
            && c.checkpoint.is_none()
        {
            return Ok(());
        }
        let next = Commit {
            upstream: c.upstream.clone(),
            set: c.set.clone(),
            ..Commit::default()
        };
        let commit = std::mem::replace(c, next);
        self.pending = 0;
        // Only a commit that moves the checkpoint waits for durability (which covers every
        // earlier batch too); the others do not stall the harvest.
        let durable = commit.checkpoint.is_some();
        self.state.commit_with(commit, durable).await?;
        Ok(())
    }
}

/// The ordering instant of a change: `datetime`, else `lastmod`.
fn change_instant(e: &UrlEntry) -> Option<W3cDateTime> {
    e.md.as_ref().and_then(|m| m.datetime).or(e.lastmod)
}

fn change_of(e: &UrlEntry) -> Change {
    e.md.as_ref()
        .and_then(|m| m.change.clone())
        .unwrap_or(Change::Updated)
}

fn seen_key(e: &UrlEntry) -> SeenKey {
    let tag =
        e.md.as_ref()
            .and_then(|m| m.hash.as_ref())
            .map(|h| h.to_string())
            .or_else(|| e.lastmod.map(|t| t.to_string()))
            .unwrap_or_default();
    SeenKey {
        uri: e.loc.trim().to_owned(),
        change: change_of(e),
        tag,
    }
}

/// Whether the upstream entry describes the copy already held (so it need not be fetched).
fn unchanged(e: &UrlEntry, prior: &ResourceRecord) -> bool {
    let Some(copy) = (prior.status == ResourceStatus::Present)
        .then_some(prior.copy.as_ref())
        .flatten()
    else {
        return false;
    };
    let md = e.md.as_ref();
    if let Some(len) = md.and_then(|m| m.length)
        && len != copy.length
    {
        return false;
    }
    if let Some(hashes) = md.and_then(|m| m.hash.as_ref()) {
        let mut compared = false;
        for h in &hashes.0 {
            let ours = match h.algorithm {
                HashAlgorithm::Md5 => Some(copy.md5.as_str()),
                HashAlgorithm::Sha256 => Some(copy.sha256.as_str()),
                HashAlgorithm::Sha1 => copy.sha1.as_deref(),
                HashAlgorithm::Other(_) => None,
            };
            if let Some(ours) = ours {
                if !ours.eq_ignore_ascii_case(&h.digest) {
                    return false;
                }
                compared = true;
            }
        }
        if compared {
            return true;
        }
    }
    match (e.lastmod, prior.upstream_meta.lastmod) {
        (Some(a), Some(b)) => a.cmp_instant(&b).is_eq(),
        _ => false,
    }
}

/// Compares the stored bytes with what the entry announced; `Err((expected, got))`.
fn verify(e: &UrlEntry, info: &BlobInfo) -> Result<(), (String, String)> {
    let md = e.md.as_ref();
    if let Some(len) = md.and_then(|m| m.length)
        && len != info.length
    {
        return Err((format!("length {len}"), format!("length {}", info.length)));
    }
    for h in md
        .and_then(|m| m.hash.as_ref())
        .map(|h| h.0.as_slice())
        .unwrap_or_default()
    {
        let (name, ours) = match h.algorithm {
            HashAlgorithm::Md5 => ("md5", Some(info.md5.as_str())),
            HashAlgorithm::Sha256 => ("sha-256", Some(info.sha256.as_str())),
            HashAlgorithm::Sha1 => ("sha-1", info.sha1.as_deref()),
            HashAlgorithm::Other(_) => continue,
        };
        if !h.is_well_formed() {
            // Lenient: a malformed digest (a known upstream quirk) cannot be checked.
            continue;
        }
        if let Some(ours) = ours
            && !ours.eq_ignore_ascii_case(&h.digest)
        {
            return Err((format!("{name}:{}", h.digest), format!("{name}:{ours}")));
        }
    }
    Ok(())
}

/// A `Last-Modified` value as an instant: HTTP-date, or ISO 8601 as some servers send.
fn http_time(v: &str) -> Option<W3cDateTime> {
    if let Ok(t) = httpdate::parse_http_date(v) {
        let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
        return Some(W3cDateTime::from_unix(i64::try_from(secs).ok()?, 0));
    }
    W3cDateTime::parse(v.trim()).ok().map(|p| p.value)
}

/// 128 bits of SHA-256 of a URI: the listed set of a re-sync in bounded memory (16 bytes
/// per resource; a collision needs ~2^64 resources).
fn uri_digest(uri: &str) -> u128 {
    let d = sha2::Sha256::digest(uri.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    u128::from_le_bytes(b)
}

impl Harvest {
    fn docs(&self) -> Docs<'_> {
        Docs {
            fetcher: &self.ctx.fetcher,
            access: &self.access,
            max_bytes: self.ctx.fetch.max_document_bytes,
        }
    }

    async fn harvest_set(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<(), Error> {
        let state = &self.ctx.state;
        let set_url = set.url.as_str();
        let cp = state.checkpoint(&self.up.name, set_url).await?;
        let mut just_synced = false;
        let mut cp = match cp {
            Some(cp) if cp.baseline_at.is_some() => cp,
            _ => {
                tracing::info!(upstream = %self.up.name, set = %set.url, "baseline");
                just_synced = true;
                match self.baseline(set, report).await? {
                    Some(cp) => cp,
                    None => return Ok(()),
                }
            }
        };
        let source = match (
            set.get(Capability::ChangeList),
            set.get(Capability::ChangeDump),
        ) {
            (Some(cl), _) => Some((cl.clone(), false)),
            (None, Some(cd)) => Some((cd.clone(), true)),
            (None, None) => None,
        };
        let Some((changes, is_dump)) = source else {
            if !just_synced {
                // Without a Change List the only way to see changes is to compare the
                // Resource List again.
                report.resyncs.push(format!(
                    "{set_url}: no Change List or Change Dump; re-synced from the Resource List"
                ));
                tracing::info!(upstream = %self.up.name, set = %set.url, "no Change List: re-sync");
                self.resync(set, true, report).await?;
            }
            return Ok(());
        };
        let mut resynced = false;
        loop {
            let step = if is_dump {
                self.incremental_dump(set, &changes, &mut cp, !resynced, report)
                    .await?
            } else {
                // Where the last run left off (spec 12.1: a Destination follows the list it
                // polls, and from a closed one its successor), else the Capability List's.
                let followed = cp
                    .changelist
                    .as_deref()
                    .and_then(|u| Url::parse(u).ok())
                    .filter(|u| u != &changes);
                match followed {
                    Some(from) => match self
                        .incremental(set, &from, &mut cp, !resynced, report)
                        .await
                    {
                        Err(Error::Fetch(e)) if matches!(e.status(), Some(404 | 410)) => {
                            report.warn(format!(
                                "{from}: the Change List followed last time is gone ({e}); starting from {changes}"
                            ));
                            self.incremental(set, &changes, &mut cp, !resynced, report)
                                .await?
                        }
                        other => other?,
                    },
                    None => {
                        self.incremental(set, &changes, &mut cp, !resynced, report)
                            .await?
                    }
                }
            };
            match step {
                Incremental::Done | Incremental::Next(_) => return Ok(()),
                Incremental::Gap(reason) => {
                    let why = format!("{set_url}: {reason}; re-synced from the Resource List");
                    tracing::warn!(upstream = %self.up.name, "{why}");
                    report.resyncs.push(why);
                    resynced = true;
                    match self.resync(set, true, report).await? {
                        Some(new) => cp = new,
                        None => return Ok(()),
                    }
                }
            }
        }
    }

    /// The first synchronisation of a set: from the Resource Dump when the pipeline prefers
    /// it (falling back to the list when the dump is missing or broken), else the list.
    async fn baseline(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        if self.up.baseline == BaselineSource::Dump {
            match self.baseline_dump(set, report).await {
                Ok(cp) => return Ok(cp),
                Err(e) if e.is_fenced() => return Err(e),
                Err(e) => report.warn(format!(
                    "{}: Resource Dump unusable ({e}); falling back to the Resource List",
                    set.url
                )),
            }
        }
        self.resync(set, false, report).await
    }

    /// Brings the copies in line with the Resource List (baseline when the state is empty).
    /// Returns the new checkpoint, committed, or `None` when some resource failed (nothing
    /// is lost: the next run does it again, skipping what is already stored).
    async fn resync(
        &self,
        set: &CapabilitySet,
        counted: bool,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        let Some(list_url) = set.get(Capability::ResourceList).cloned() else {
            report.fail(format!(
                "{}: no Resource List to baseline from (spec 10)",
                set.url
            ));
            return Ok(None);
        };
        let started = W3cDateTime::now();
        let shared_set = Arc::new(set.clone());
        let (tx, rx) = mpsc::channel::<(Url, UrlEntry)>(1024);
        let docs = self.docs();
        let producer = docs.stream_entries(&list_url, tx);
        let mut listed: HashSet<u128> = HashSet::new();
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        let mut all_ok = true;
        // A first baseline (no record of this upstream yet, the common case for a large
        // harvest) needs no per-resource state lookup, nor a scan for deletions at the end.
        // Sets and passes of one upstream run one after the other, so nothing adds records
        // of it meanwhile but this baseline (a URI listed twice is stored once, below).
        let fresh = self
            .ctx
            .state
            .resources(&self.up.name)
            .await?
            .next()
            .await?
            .is_none();
        let consumer =
            async {
                let entries = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|x| (x, rx))
                });
                let mut results = std::pin::pin!(
                    entries
                        .map(|(_, e)| {
                            // A URI listed twice is stored once (two concurrent stores of
                            // the same resource would both see it as new).
                            let first = listed.insert(uri_digest(e.loc.trim()));
                            let (h, set) = (self.clone(), shared_set.clone());
                            async move {
                                if first {
                                    spawned(Box::pin(async move {
                                        if fresh {
                                            h.store_with_prior(&set, e, true, None).await
                                        } else {
                                            h.store_entry(&set, e, true).await
                                        }
                                    }))
                                    .await
                                } else {
                                    Outcome::Skipped
                                }
                            }
                        })
                        .buffer_unordered(self.ctx.fetch.concurrency.max(1))
                );
                while let Some(outcome) = results.next().await {
                    all_ok &= committer.add(outcome, report).await?;
                }
                Ok::<_, Error>(())
            };
        let (header, consumed) = futures::join!(producer, consumer);
        consumed?;
        let header = header?;
        let at = header.md.as_ref().and_then(|m| m.at);
        self.finish_sync(
            set, &list_url, listed, committer, all_ok, at, started, counted, fresh, report,
        )
        .await
    }

    /// The end of a baseline or re-sync: deletions of what is no longer listed, then the
    /// checkpoint (only when every listed resource was stored).
    #[allow(clippy::too_many_arguments)]
    async fn finish_sync(
        &self,
        set: &CapabilitySet,
        list_url: &Url,
        listed: HashSet<u128>,
        mut committer: Committer<'_>,
        all_ok: bool,
        at: Option<W3cDateTime>,
        started: W3cDateTime,
        counted: bool,
        fresh: bool,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        let previous = self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?
            .map_or(0, |c| c.resyncs);
        // Deletions: resources of this set the list no longer has, streamed from the state
        // (the scan reads a snapshot, so committing meanwhile is safe). After a `fresh`
        // baseline every record is one the list had.
        let mut records = self.ctx.state.resources(&self.up.name).await?;
        while !fresh && let Some(mut r) = records.next().await? {
            if r.status == ResourceStatus::Present
                && r.set == set.url.as_str()
                && !listed.contains(&uri_digest(&r.uri))
            {
                r.status = ResourceStatus::Deleted;
                committer.add(Outcome::Deleted(r), report).await?;
            }
        }
        if !all_ok {
            committer.flush().await?;
            report.warn(format!(
                "{}: some resources failed; the baseline is finished on the next run",
                set.url
            ));
            return Ok(None);
        }
        let at = at.unwrap_or_else(|| {
            report.warn(format!(
                "{list_url}: no `at` (spec 10.1, 11.1); using the time the harvest started"
            ));
            started
        });
        let cp = Checkpoint {
            instant: Some(at),
            seen: Vec::new(),
            changelist: set.get(Capability::ChangeList).map(|u| u.to_string()),
            baseline_at: Some(at),
            resyncs: previous + u64::from(counted),
        };
        committer.checkpoint(cp.clone());
        committer.flush().await?;
        Ok(Some(cp))
    }

    /// Reads every package entry of a dump document (or index) at `url`: packages are few
    /// (each holds many resources), so their entries are kept.
    async fn dump_packages(
        &self,
        url: &Url,
    ) -> Result<(rsagg_model::Header, Vec<(Url, UrlEntry)>), Error> {
        let (tx, mut rx) = mpsc::channel::<(Url, UrlEntry)>(64);
        let docs = self.docs();
        let (header, packages) = futures::join!(docs.stream_entries(url, tx), async {
            let mut v = Vec::new();
            while let Some(p) = rx.recv().await {
                v.push(p);
            }
            v
        });
        Ok((header?, packages))
    }

    /// Downloads, checks and opens one package of a dump.
    async fn open_package(
        &self,
        base: &Url,
        entry: &UrlEntry,
    ) -> Result<dumps::PackageItems, Error> {
        dumps::open_package(
            &self.ctx.fetcher,
            &self.access,
            base,
            entry,
            self.ctx.fetch.max_body_bytes,
        )
        .await
    }

    /// Baseline from the Resource Dump (spec 11): every package downloaded, checked and
    /// unpacked. `Err` when the dump is missing or broken (the caller falls back to the list).
    async fn baseline_dump(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        let Some(dump_url) = set.get(Capability::ResourceDump).cloned() else {
            return Err(Error::Upstream {
                url: set.url.to_string(),
                section: "11.1",
                message: "no Resource Dump advertised".into(),
            });
        };
        let started = W3cDateTime::now();
        let (header, packages) = self.dump_packages(&dump_url).await?;
        let mut listed = HashSet::new();
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        let mut all_ok = true;
        for (base, entry) in &packages {
            let mut pkg = self.open_package(base, entry).await?;
            let mut seen = 0usize;
            while let Some(next) = pkg.next().await {
                let (item, body) = next?;
                seen += 1;
                listed.insert(uri_digest(item.entry.loc.trim()));
                let outcome = match body {
                    Some(body) => self.store_from_package(set, item.entry, body).await,
                    None => Outcome::Skipped,
                };
                all_ok &= committer.add(outcome, report).await?;
            }
            if seen != pkg.items.len() {
                return Err(Error::Upstream {
                    url: pkg.url.to_string(),
                    section: "11.2",
                    message: format!("package ended after {seen} of {} items", pkg.items.len()),
                });
            }
        }
        let at = header.md.as_ref().and_then(|m| m.at);
        self.finish_sync(
            set, &dump_url, listed, committer, all_ok, at, started, false, false, report,
        )
        .await
    }

    /// Incremental from the Change Dump (spec 13) when there is no Change List: packages
    /// after the checkpoint, their changes in order, checkpoint moved per change.
    async fn incremental_dump(
        &self,
        set: &CapabilitySet,
        cd: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        let (header, mut packages) = self.dump_packages(cd).await?;
        let key = |e: &UrlEntry| e.md.as_ref().and_then(|m| m.from);
        packages.sort_by(|a, b| match (key(&a.1), key(&b.1)) {
            (Some(x), Some(y)) => x.cmp_instant(&y),
            _ => std::cmp::Ordering::Equal,
        });
        if check_gap {
            let oldest = header
                .md
                .as_ref()
                .and_then(|m| m.from)
                .or_else(|| packages.first().and_then(|p| key(&p.1)));
            if let (Some(oldest), Some(done)) = (oldest, cp.instant)
                && oldest.cmp_instant(&done).is_gt()
            {
                return Ok(Incremental::Gap(format!(
                    "the Change Dump starts at {oldest}, after the checkpoint {done}: changes in between are no longer offered"
                )));
            }
        }
        for (base, entry) in &packages {
            let until = entry.md.as_ref().and_then(|m| m.until);
            if let (Some(u), Some(c)) = (until, cp.instant)
                && u.cmp_instant(&c).is_lt()
            {
                continue;
            }
            let mut pkg = self.open_package(base, entry).await?;
            let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
            let mut seen = 0usize;
            while let Some(next) = pkg.next().await {
                let (item, body) = next?;
                seen += 1;
                let e = item.entry;
                let t = change_instant(&e);
                let k = seen_key(&e);
                if cp.covers(t.as_ref(), &k) {
                    report.replayed += 1;
                    if let Some(mut b) = body {
                        while b.next().await.is_some() {}
                    }
                    continue;
                }
                let outcome = match (change_of(&e), body) {
                    (Change::Deleted, _) | (_, None) => self.delete_entry(&e).await,
                    (_, Some(body)) => self.store_from_package(set, e, body).await,
                };
                if !committer.add(outcome, report).await? {
                    committer.flush().await?;
                    return Ok(Incremental::Done);
                }
                cp.advance(t.as_ref(), k);
                cp.changelist = Some(cd.to_string());
                committer.checkpoint(cp.clone());
            }
            committer.flush().await?;
            if seen != pkg.items.len() {
                return Err(Error::Upstream {
                    url: pkg.url.to_string(),
                    section: "13.2",
                    message: format!("package ended after {seen} of {} items", pkg.items.len()),
                });
            }
        }
        Ok(Incremental::Done)
    }

    /// Stores one item of a package, verified against its manifest entry; an item whose bytes
    /// do not match is fetched by HTTP instead (verified, refetched, quarantined as usual).
    async fn store_from_package(
        &self,
        set: &CapabilitySet,
        e: UrlEntry,
        mut body: dumps::ItemBody,
    ) -> Outcome {
        let uri = e.loc.trim().to_owned();
        let prior = match self.ctx.state.resource(&self.up.name, &uri).await {
            Ok(p) => p,
            Err(err) => return Outcome::Failed(format!("{uri}: reading state: {err}")),
        };
        if let Some(p) = prior.as_ref().filter(|p| unchanged(&e, p)) {
            // Drained so the package reader goes on to the next item.
            while body.next().await.is_some() {}
            let meta = upstream_meta(
                &e,
                p.upstream_meta.etag.clone(),
                p.upstream_meta.http_last_modified.clone(),
            );
            return Outcome::Unchanged(Some(ResourceRecord {
                upstream_meta: meta,
                set: set.url.to_string(),
                ..p.clone()
            }));
        }
        let want_sha1 =
            e.md.as_ref()
                .and_then(|m| m.hash.as_ref())
                .is_some_and(|h| h.get(&HashAlgorithm::Sha1).is_some());
        let info = match self.ctx.blobs.put_stream(&uri, &mut body, want_sha1).await {
            Ok(i) => i,
            Err(err) => {
                while body.next().await.is_some() {}
                return Outcome::Failed(format!("{uri}: {err}"));
            }
        };
        if let Err((expected, got)) = verify(&e, &info) {
            tracing::warn!(%uri, %expected, %got, "dump item differs from its manifest: fetching it instead");
            return self.store_entry(set, e, false).await;
        }
        self.stored(set, &e, prior.as_ref(), info, None, None, None)
    }

    /// The outcome of a verified copy: unchanged when the bytes are those already held,
    /// else created or updated.
    #[allow(clippy::too_many_arguments)]
    fn stored(
        &self,
        set: &CapabilitySet,
        e: &UrlEntry,
        prior: Option<&ResourceRecord>,
        info: BlobInfo,
        etag: Option<String>,
        last_modified: Option<String>,
        content_type: Option<String>,
    ) -> Outcome {
        let meta = upstream_meta(e, etag, last_modified);
        let mime_type = content_type.or_else(|| e.md.as_ref().and_then(|m| m.mime_type.clone()));
        if let Some(p) = prior.filter(|p| p.status == ResourceStatus::Present)
            && p.copy.as_ref().is_some_and(|c| c.sha256 == info.sha256)
        {
            return Outcome::Unchanged(Some(ResourceRecord {
                upstream_meta: meta,
                set: set.url.to_string(),
                mime_type,
                ..p.clone()
            }));
        }
        let change = match prior {
            Some(p) if p.status == ResourceStatus::Present => Change::Updated,
            Some(_) => Change::Created,
            None => Change::Created,
        };
        Outcome::Stored {
            change,
            release: self.quarantined.contains(e.loc.trim()),
            record: ResourceRecord {
                upstream: self.up.name.clone(),
                uri: e.loc.trim().to_owned(),
                status: ResourceStatus::Present,
                copy: Some(info),
                mime_type,
                set: set.url.to_string(),
                lastmod: W3cDateTime::now(),
                seq: 0,
                upstream_meta: meta,
            },
        }
    }

    /// Fetches, verifies and stores one listed resource (or decides it is unchanged).
    /// `gone_ok`: a 404/410 is not a failure (a baseline from a Resource List older than the
    /// resource's deletion).
    async fn store_entry(&self, set: &CapabilitySet, e: UrlEntry, gone_ok: bool) -> Outcome {
        let prior = match self.ctx.state.resource(&self.up.name, e.loc.trim()).await {
            Ok(p) => p,
            Err(err) => {
                return Outcome::Failed(format!("{}: reading state: {err}", e.loc.trim()));
            }
        };
        self.store_with_prior(set, e, gone_ok, prior).await
    }

    /// [`Self::store_entry`] with the resource's record already known (`None`: no record).
    async fn store_with_prior(
        &self,
        set: &CapabilitySet,
        e: UrlEntry,
        gone_ok: bool,
        prior: Option<ResourceRecord>,
    ) -> Outcome {
        let uri = e.loc.trim().to_owned();
        if let Some(p) = &prior
            && unchanged(&e, p)
        {
            let meta = upstream_meta(
                &e,
                p.upstream_meta.etag.clone(),
                p.upstream_meta.http_last_modified.clone(),
            );
            return Outcome::Unchanged(
                (meta != p.upstream_meta || p.set != set.url.as_str()).then(|| ResourceRecord {
                    upstream_meta: meta,
                    set: set.url.to_string(),
                    ..p.clone()
                }),
            );
        }
        let url = match Url::parse(&uri) {
            Ok(u) => u,
            Err(err) => return Outcome::Failed(format!("`{uri}` is not a URL: {err}")),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let present = prior
                .as_ref()
                .filter(|p| p.status == ResourceStatus::Present && p.copy.is_some());
            let req = Request {
                max_bytes: self.ctx.fetch.max_body_bytes,
                if_none_match: present.and_then(|p| p.upstream_meta.etag.clone()),
                if_modified_since: present.and_then(|p| p.upstream_meta.http_last_modified.clone()),
                inflate_gzip: false,
            };
            let fetched = match self.ctx.fetcher.get(&url, &self.access, &req).await {
                Ok(f) => f,
                Err(err) if gone_ok && matches!(err.status(), Some(404 | 410)) => {
                    return Outcome::Gone(format!(
                        "{uri}: listed but gone ({err}); a later change is expected to delete it"
                    ));
                }
                Err(err) => return Outcome::Failed(err.to_string()),
            };
            if fetched.not_modified
                && let Some(p) = present
            {
                return Outcome::Unchanged(Some(ResourceRecord {
                    upstream_meta: upstream_meta(
                        &e,
                        p.upstream_meta.etag.clone(),
                        p.upstream_meta.http_last_modified.clone(),
                    ),
                    set: set.url.to_string(),
                    ..p.clone()
                }));
            }
            let (etag, last_modified, content_type) = (
                fetched.etag.clone(),
                fetched.last_modified.clone(),
                fetched.content_type.clone(),
            );
            let want_sha1 =
                e.md.as_ref()
                    .and_then(|m| m.hash.as_ref())
                    .is_some_and(|h| h.get(&HashAlgorithm::Sha1).is_some());
            let info = match self
                .ctx
                .blobs
                .put_stream(&uri, fetched.body, want_sha1)
                .await
            {
                Ok(i) => i,
                Err(err) => return Outcome::Failed(format!("{uri}: {err}")),
            };
            if let Err((expected, got)) = verify(&e, &info) {
                let newer_version = last_modified
                    .as_deref()
                    .and_then(http_time)
                    .zip(change_instant(&e))
                    .is_some_and(|(served, listed)| served.cmp_instant(&listed).is_gt());
                if newer_version {
                    tracing::warn!(%uri, %expected, %got, "bytes differ from the list, but a newer version exists: stored");
                } else if attempt == 1 {
                    tracing::warn!(%uri, %expected, %got, "bytes differ from the list: fetching once more");
                    continue;
                } else {
                    return Outcome::Quarantined(QuarantineRecord {
                        upstream: self.up.name.clone(),
                        uri,
                        reason: "bytes differ from what the upstream announced, twice".into(),
                        expected,
                        got,
                        at: W3cDateTime::now(),
                        blob: Some(info.sha256),
                    });
                }
            }
            return self.stored(
                set,
                &e,
                prior.as_ref(),
                info,
                etag,
                last_modified,
                content_type,
            );
        }
    }

    async fn delete_entry(&self, e: &UrlEntry) -> Outcome {
        let uri = e.loc.trim();
        match self.ctx.state.resource(&self.up.name, uri).await {
            Ok(Some(mut r)) if r.status == ResourceStatus::Present => {
                r.status = ResourceStatus::Deleted;
                if let Some(t) = e.lastmod {
                    r.upstream_meta.lastmod = Some(t);
                }
                Outcome::Deleted(r)
            }
            Ok(_) => Outcome::Skipped,
            Err(err) => Outcome::Failed(format!("{uri}: reading state: {err}")),
        }
    }

    /// Processes the Change List (or index) at `cl` from the checkpoint on.
    async fn incremental(
        &self,
        set: &CapabilitySet,
        cl: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        // After a closed list, its successor (spec 12.1): followed until a list is open, or
        // one comes round again.
        let mut url = cl.clone();
        let mut visited = HashSet::new();
        let mut check = check_gap;
        loop {
            visited.insert(url.clone());
            match self.incremental_one(set, &url, cp, check, report).await? {
                Incremental::Next(next) if !visited.contains(&next) => {
                    tracing::info!(upstream = %self.up.name, from = %url, to = %next, "closed Change List: on to its successor");
                    url = next;
                    check = false;
                }
                Incremental::Next(_) => return Ok(Incremental::Done),
                step => return Ok(step),
            }
        }
    }

    /// The successor of the closed Change List `list` (spec 12.1): the next part of the index
    /// its `index` link names, else what the Capability List its `up` link names now points
    /// at. `None` when that is the list itself.
    async fn successor(
        &self,
        list: &Url,
        header: &rsagg_model::Header,
    ) -> Result<Option<Url>, Error> {
        let docs = self.docs();
        if let Some(index) = header.link("index").and_then(|l| list.join(&l.href).ok())
            && &index != list
        {
            return Ok(Some(index));
        }
        let Some(up) = header.link("up").and_then(|l| list.join(&l.href).ok()) else {
            return Ok(None);
        };
        let mut cap = docs.open(&up).await?;
        let base = cap.url.clone();
        while let Some(e) = cap.next().await? {
            let is_cl =
                e.md.as_ref()
                    .and_then(|m| m.capability.as_ref())
                    .is_some_and(|c| *c == Capability::ChangeList);
            if is_cl {
                let next = base.join(e.loc.trim()).ok();
                return Ok(next.filter(|n| n != list));
            }
        }
        Ok(None)
    }

    /// Processes the Change List (or index) at `cl` from the checkpoint on.
    async fn incremental_one(
        &self,
        set: &CapabilitySet,
        cl: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        let docs = self.docs();
        let mut doc = match docs.open(cl).await {
            Ok(d) => d,
            Err(Error::Fetch(err)) if err.status().is_some_and(|s| s >= 500) => {
                // resync-simulator answers 500 until its first change. Nothing is lost by
                // waiting: the checkpoint stays, and a gap is detected if one opens.
                report.warn(format!(
                    "{cl}: Change List unavailable ({err}); checkpoint kept, retried next run"
                ));
                return Ok(Incremental::Done);
            }
            Err(e) => return Err(e),
        };
        // The lists to read, oldest first.
        let mut lists: Vec<Url> = Vec::new();
        let mut first_doc = None;
        match doc.header().root {
            Root::Sitemapindex => {
                let index_url = doc.url.clone();
                let mut parts = Vec::new();
                while let Some(p) = doc.next().await? {
                    let url = index_url.join(p.loc.trim()).map_err(|e| Error::Upstream {
                        url: index_url.to_string(),
                        section: "12.2",
                        message: format!("part `{}` is not a URL: {e}", p.loc),
                    })?;
                    let from = p.md.as_ref().and_then(|m| m.from);
                    let until = p.md.as_ref().and_then(|m| m.until);
                    parts.push((from, until, url));
                }
                parts.sort_by(|a, b| match (a.0, b.0) {
                    (Some(x), Some(y)) => x.cmp_instant(&y),
                    _ => std::cmp::Ordering::Equal,
                });
                // Closed parts that end before the checkpoint hold nothing new.
                for (_, until, url) in parts {
                    let done = match (until, cp.instant) {
                        (Some(u), Some(c)) => u.cmp_instant(&c).is_lt(),
                        _ => false,
                    };
                    if !done {
                        lists.push(url);
                    }
                }
            }
            Root::Urlset => {
                lists.push(doc.url.clone());
                first_doc = Some(doc);
            }
        }
        let mut gap_checked = !check_gap;
        for list in lists {
            let mut d = match first_doc.take() {
                Some(d) => d,
                None => docs.open(&list).await?,
            };
            let header = d.header().clone();
            let mut entries = Vec::new();
            while let Some(e) = d.next().await? {
                if entries.len() >= MAX_CHANGES_PER_LIST {
                    return Err(Error::Upstream {
                        url: list.to_string(),
                        section: "12.1",
                        message: format!("more than {MAX_CHANGES_PER_LIST} changes in one list"),
                    });
                }
                entries.push(e);
            }
            let ordered = in_order(entries);
            let from = header.md.as_ref().and_then(|m| m.from);
            if from.is_none() {
                report.warn(format!("{list}: Change List without `from` (spec 12.1 requires it); using its oldest change"));
            }
            if !gap_checked {
                gap_checked = true;
                let oldest = from.or_else(|| ordered.first().and_then(|k| k.0));
                if let (Some(oldest), Some(done)) = (oldest, cp.instant)
                    && oldest.cmp_instant(&done).is_gt()
                {
                    return Ok(Incremental::Gap(format!(
                        "the Change List starts at {oldest}, after the checkpoint {done}: changes in between are no longer offered"
                    )));
                }
            }
            if !self
                .apply_changes(set, &list, Some(cl), ordered, cp, report)
                .await?
            {
                report.warn(format!(
                    "{list}: stopped at the first failed change; the next run resumes there"
                ));
                return Ok(Incremental::Done);
            }
            let closed = header.md.as_ref().and_then(|m| m.until).is_some();
            if closed && header.root == Root::Urlset && cl == &list {
                match self.successor(&list, &header).await? {
                    Some(next) => return Ok(Incremental::Next(next)),
                    // resync-simulator's rolling list carries `until` yet keeps changing:
                    // its successor is itself.
                    None => report.warn(format!(
                        "{list}: closed Change List (has `until`) whose successor is itself; re-polled next run"
                    )),
                }
            }
        }
        Ok(Incremental::Done)
    }
}

impl Harvest {
    /// Applies `ordered` changes (forward chronological, see [`in_order`]) of `set` from
    /// the checkpoint `cp` on: the one path by which Change List entries (polling) and
    /// change-notification entries (push) reach the state. Changes the checkpoint covers are
    /// replays (a poll and a push carrying the same change, a payload delivered twice) and
    /// are dropped; the others are fetched, verified and stored (a later change of the same
    /// URI in the batch supersedes earlier ones) and committed in order, the checkpoint
    /// moving past each. `followed`: the Change List the next poll starts from (`None` for
    /// push, which must not move it). Returns false when it stopped at a failed change (the
    /// checkpoint stays before it, so the next pass retries it).
    async fn apply_changes(
        &self,
        set: &CapabilitySet,
        source: &Url,
        followed: Option<&Url>,
        ordered: Vec<(Option<W3cDateTime>, UrlEntry)>,
        cp: &mut Checkpoint,
        report: &mut UpstreamReport,
    ) -> Result<bool, Error> {
        // The last change of each URI in this batch: earlier ones are superseded by it.
        let mut last_index: HashMap<String, usize> = HashMap::new();
        for (pos, (_, e)) in ordered.iter().enumerate() {
            last_index.insert(e.loc.trim().to_owned(), pos);
        }
        let todo: Vec<(usize, Option<W3cDateTime>, UrlEntry)> = ordered
            .into_iter()
            .enumerate()
            .filter_map(|(pos, (t, e))| {
                if cp.covers(t.as_ref(), &seen_key(&e)) {
                    report.replayed += 1;
                    None
                } else {
                    Some((pos, t, e))
                }
            })
            .collect();
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        tracing::info!(
            upstream = %self.up.name,
            list = %source,
            changes = todo.len(),
            "incremental: changes after the checkpoint"
        );
        let concurrency = self.ctx.fetch.concurrency.max(1);
        let shared_set = Arc::new(set.clone());
        let mut results = futures::stream::iter(todo)
            .map(|(pos, t, e)| {
                let newer_pending = last_index.get(e.loc.trim()).is_some_and(|&l| l > pos);
                let (h, set) = (self.clone(), shared_set.clone());
                async move {
                    let key = seen_key(&e);
                    let outcome = match change_of(&e) {
                        // A later change of the same URI in this batch brings the final
                        // state; processing both concurrently could record one change
                        // twice. The checkpoint still moves past this one in order.
                        _ if newer_pending => Outcome::Superseded,
                        Change::Deleted => h.delete_entry(&e).await,
                        _ => {
                            spawned(Box::pin(async move { h.store_entry(&set, e, false).await }))
                                .await
                        }
                    };
                    (t, key, outcome)
                }
            })
            // In order: the checkpoint only ever moves past committed changes.
            .buffered(concurrency);
        let mut completed = true;
        while let Some((t, key, outcome)) = results.next().await {
            if !committer.add(outcome, report).await? {
                completed = false;
                break;
            }
            cp.advance(t.as_ref(), key);
            if let Some(f) = followed {
                cp.changelist = Some(f.to_string());
            }
            committer.checkpoint(cp.clone());
        }
        drop(results);
        committer.flush().await?;
        Ok(completed)
    }
}

/// What became of a change notification's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushApplied {
    /// Applied (possibly all replays); false when it stopped at a failed change.
    Done(bool),
    /// The set has no baseline yet: polling makes it, and its Change List then brings
    /// what this payload announced.
    NoBaseline,
}

impl Harvest {
    /// Applies the entries of a change notification for `set` (CN 1.0.1 3) exactly like
    /// Change List entries ([`Harvest::apply_changes`]), from the committed checkpoint;
    /// the Change List the next poll follows is left as it is.
    pub(crate) async fn apply_notification(
        &self,
        set: &CapabilitySet,
        source: &Url,
        entries: Vec<UrlEntry>,
        report: &mut UpstreamReport,
    ) -> Result<PushApplied, Error> {
        let cp = self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?;
        let Some(mut cp) = cp.filter(|c| c.baseline_at.is_some()) else {
            return Ok(PushApplied::NoBaseline);
        };
        let done = self
            .apply_changes(set, source, None, in_order(entries), &mut cp, report)
            .await?;
        Ok(PushApplied::Done(done))
    }

    /// Brings `set` up to date from its Change List (or Resource List) exactly as a poll
    /// does: what a missing or reordered notification would have brought.
    pub(crate) async fn catch_up(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<(), Error> {
        self.harvest_set(set, report).await
    }

    /// The committed checkpoint instant of `set`.
    pub(crate) async fn checkpoint_instant(
        &self,
        set: &CapabilitySet,
    ) -> Result<Option<W3cDateTime>, Error> {
        Ok(self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?
            .and_then(|c| c.instant))
    }
}

/// Forward chronological order of a batch of changes (spec 12.1, CN 1.0.1 3): by
/// `datetime`, else `lastmod`; an entry without a time keeps its place after the previous
/// one. Stable, so changes at one instant keep document order.
pub(crate) fn in_order(entries: Vec<UrlEntry>) -> Vec<(Option<W3cDateTime>, UrlEntry)> {
    let mut last = None;
    let mut keyed: Vec<(Option<W3cDateTime>, usize, UrlEntry)> = entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let t = change_instant(&e).or(last);
            last = t;
            (t, i, e)
        })
        .collect();
    keyed.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp_instant(&y).then(a.1.cmp(&b.1)),
        _ => a.1.cmp(&b.1),
    });
    keyed.into_iter().map(|(t, _, e)| (t, e)).collect()
}

/// Runs one resource's work as a task of its own, so the runtime spreads the work of many
/// resources over every core; a task that panics is a failed resource, not a crash.
///
/// The work comes boxed: a resource's future (fetch, hashing, store, retries) is several
/// kilobytes, and unboxed it was copied whole each time it moved (into the concurrency
/// buffer inside the future that spawns it, into the task), which a profile of a
/// 10,000-resource baseline showed as the largest `memmove` of the run.
async fn spawned(work: Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>) -> Outcome {
    tokio::spawn(work)
        .await
        .unwrap_or_else(|e| Outcome::Failed(format!("resource task failed: {e}")))
}

enum Incremental {
    /// Go on with this Change List (the successor of a closed one).
    Next(Url),
    Done,
    Gap(String),
}

fn upstream_meta(
    e: &UrlEntry,
    etag: Option<String>,
    http_last_modified: Option<String>,
) -> UpstreamMeta {
    let md = e.md.as_ref();
    UpstreamMeta {
        lastmod: e.lastmod,
        hash: md.and_then(|m| m.hash.clone()),
        length: md.and_then(|m| m.length),
        mime_type: md.and_then(|m| m.mime_type.clone()),
        links: e.links.clone(),
        etag,
        http_last_modified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Hashes, Md};

    fn entry(uri: &str, md5: Option<&str>, len: Option<u64>, lastmod: Option<&str>) -> UrlEntry {
        UrlEntry {
            loc: uri.into(),
            lastmod: lastmod.map(|t| W3cDateTime::parse(t).unwrap().value),
            md: Some(Md {
                hash: md5.map(|h| Hashes::parse(&format!("md5:{h}"), |_| {})),
                length: len,
                ..Md::default()
            }),
            ..UrlEntry::default()
        }
    }

    fn info(md5: &str, length: u64) -> BlobInfo {
        BlobInfo {
            sha256: "0".repeat(64),
            md5: md5.into(),
            sha1: None,
            length,
        }
    }

    #[test]
    fn verification_compares_length_and_hashes() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        assert!(verify(&entry("u", Some(h), Some(11), None), &info(h, 11)).is_ok());
        let (exp, got) = verify(&entry("u", Some(h), Some(12), None), &info(h, 11)).unwrap_err();
        assert_eq!((exp.as_str(), got.as_str()), ("length 12", "length 11"));
        let other = "00000000000000000000000000000000";
        let (exp, _) = verify(&entry("u", Some(other), None, None), &info(h, 11)).unwrap_err();
        assert_eq!(exp, format!("md5:{other}"));
        // Upper-case hex from an upstream is the same digest.
        assert!(
            verify(
                &entry("u", Some(&h.to_uppercase()), None, None),
                &info(h, 11)
            )
            .is_ok()
        );
        // A malformed digest (lenient quirk) cannot be checked and is not a mismatch.
        assert!(verify(&entry("u", Some("xyz"), None, None), &info(h, 11)).is_ok());
    }

    #[test]
    fn http_times_in_both_forms() {
        let a = http_time("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let b = http_time("1994-11-06T08:49:37Z").unwrap();
        assert!(a.cmp_instant(&b).is_eq());
        assert!(http_time("yesterday").is_none());
    }

    #[test]
    fn unchanged_by_hash_else_lastmod() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        let mut prior = ResourceRecord {
            upstream: "u".into(),
            uri: "u".into(),
            status: ResourceStatus::Present,
            copy: Some(info(h, 11)),
            mime_type: None,
            set: String::new(),
            lastmod: W3cDateTime::now(),
            seq: 1,
            upstream_meta: UpstreamMeta {
                lastmod: Some(W3cDateTime::parse("2020-01-01").unwrap().value),
                ..UpstreamMeta::default()
            },
        };
        assert!(unchanged(&entry("u", Some(h), Some(11), None), &prior));
        assert!(!unchanged(
            &entry("u", Some("00000000000000000000000000000000"), None, None),
            &prior
        ));
        assert!(unchanged(
            &entry("u", None, None, Some("2020-01-01T00:00:00Z")),
            &prior
        ));
        assert!(!unchanged(
            &entry("u", None, None, Some("2020-01-02")),
            &prior
        ));
        prior.status = ResourceStatus::Deleted;
        assert!(!unchanged(&entry("u", Some(h), Some(11), None), &prior));
    }
}
