//! Baseline and incremental from the upstream's dumps (spec 11, 13): packages are
//! downloaded, checked and their bitstreams stored as if fetched one by one.
//!
//! A dump may be a Resource Dump Index or a Change Dump Index (spec 11.1, 13.1): its parts
//! are read one after the other ([`crate::lists::DumpDocuments`]), each part's packages
//! taken before the next part is fetched, so a dump of any size is followed holding one
//! part's entries at a time; a Change Dump Index's parts are read in `from` order, and those
//! that end before the checkpoint are not fetched.

use futures::StreamExt;
use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, Change, HashAlgorithm, UrlEntry, W3cDateTime};
use rsagg_store::{Checkpoint, ResourceRecord};
use url::Url;

use crate::Error;
use crate::commit::{Committer, Outcome};
use crate::compare::*;
use crate::context::Harvest;
use crate::incremental::Incremental;
use crate::packages;
use crate::seen::{Seen, key};
use rsagg_layout::report::UpstreamReport;

impl Harvest {
    /// Downloads, checks and opens one package of a dump.
    pub(crate) async fn open_package(
        &self,
        base: &Url,
        entry: &UrlEntry,
    ) -> Result<packages::PackageItems, Error> {
        packages::open_package(
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
    pub(crate) async fn baseline_dump(
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
        let docs = self.docs();
        let mut dump = self.bounded(docs.dump_documents(&dump_url)).await?;
        let mut listed = Seen::new(self.ctx.listed);
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        let mut all_ok = true;
        // The dump's documents one after the other: the next part of an index only once
        // the packages of the one before are stored.
        loop {
            let next = match self.bounded(dump.next(&docs, |_| false)).await {
                Ok(next) => next,
                Err(e) if e.is_deadline() => {
                    committer.flush().await?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let Some((base, packages)) = next else {
                break;
            };
            all_ok &= self
                .baseline_packages(set, &base, &packages, &mut listed, &mut committer, report)
                .await?;
        }
        let at = dump.header.md.as_ref().and_then(|m| m.at);
        self.finish_sync(
            set, &dump_url, listed, committer, all_ok, at, started, false, false, report,
        )
        .await
    }

    /// The packages `packages` of one Resource Dump document (at `base`) into `committer`,
    /// each listed in `listed`; false when some resource failed.
    async fn baseline_packages(
        &self,
        set: &CapabilitySet,
        base: &Url,
        packages: &[UrlEntry],
        listed: &mut Seen,
        committer: &mut Committer<'_>,
        report: &mut UpstreamReport,
    ) -> Result<bool, Error> {
        let mut all_ok = true;
        for entry in packages {
            if self.past_deadline() {
                // What was stored is committed; no deletions, no checkpoint (as for a list
                // not read to its end): the next run takes the dump up again.
                committer.flush().await?;
                return Err(self.deadline_error());
            }
            // A package still downloading at the deadline is cut too.
            let mut pkg = match self.bounded(self.open_package(base, entry)).await {
                Ok(p) => p,
                Err(e) if e.is_deadline() => {
                    committer.flush().await?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let mut seen = 0usize;
            while let Some(next) = pkg.next().await {
                let (item, body) = next?;
                seen += 1;
                listed.insert(key(&self.up.name, &item.entry.loc))?;
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
        Ok(all_ok)
    }

    /// Incremental from the Change Dump (spec 13) when there is no Change List: packages
    /// after the checkpoint, their changes in order, checkpoint moved per change.
    pub(crate) async fn incremental_dump(
        &self,
        set: &CapabilitySet,
        cd: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        let docs = self.docs();
        let mut dump = self.bounded(docs.dump_documents(cd)).await?;
        let key = |e: &UrlEntry| e.md.as_ref().and_then(|m| m.from);
        let by_from = |packages: &mut Vec<UrlEntry>| {
            packages.sort_by(|a, b| match (key(a), key(b)) {
                (Some(x), Some(y)) => x.cmp_instant(&y),
                _ => std::cmp::Ordering::Equal,
            })
        };
        // The first document, when the gap check needs its first package.
        let mut first = None;
        if check_gap {
            let mut oldest = dump.header.md.as_ref().and_then(|m| m.from);
            if oldest.is_none() {
                first = self.bounded(dump.next(&docs, |_| false)).await?;
                if let Some((_, packages)) = first.as_mut() {
                    by_from(packages);
                    oldest = packages.first().and_then(key);
                }
            }
            if let (Some(oldest), Some(done)) = (oldest, cp.instant)
                && oldest.cmp_instant(&done).is_gt()
            {
                return Ok(Incremental::Gap(format!(
                    "the Change Dump starts at {oldest}, after the checkpoint {done}: changes in between are no longer offered"
                )));
            }
        }
        loop {
            // A part of an index that ends before the checkpoint is not fetched.
            let done = cp.instant;
            let before = move |e: &UrlEntry| {
                let until = e.md.as_ref().and_then(|m| m.until);
                matches!((until, done), (Some(u), Some(c)) if u.cmp_instant(&c).is_lt())
            };
            let next = match first.take() {
                Some(first) => Some(first),
                // Every earlier package's changes are committed with the checkpoint.
                None => self.bounded(dump.next(&docs, before)).await?,
            };
            let Some((base, mut packages)) = next else {
                break;
            };
            by_from(&mut packages);
            if let Some(done) = self
                .incremental_packages(set, cd, &base, &packages, cp, report)
                .await?
            {
                return Ok(done);
            }
        }
        Ok(Incremental::Done)
    }

    /// The packages `packages` of one Change Dump document (at `base`) after the checkpoint,
    /// in order, moving `cp` per change; `Some` when the pass ends here.
    async fn incremental_packages(
        &self,
        set: &CapabilitySet,
        cd: &Url,
        base: &Url,
        packages: &[UrlEntry],
        cp: &mut Checkpoint,
        report: &mut UpstreamReport,
    ) -> Result<Option<Incremental>, Error> {
        for entry in packages {
            let until = entry.md.as_ref().and_then(|m| m.until);
            if let (Some(u), Some(c)) = (until, cp.instant)
                && u.cmp_instant(&c).is_lt()
            {
                continue;
            }
            if self.past_deadline() {
                // Every earlier package's changes are committed with the checkpoint.
                return Err(self.deadline_error());
            }
            // Cut at the deadline while it downloads (earlier packages are committed).
            let mut pkg = self.bounded(self.open_package(base, entry)).await?;
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
                    return Ok(Some(Incremental::Done));
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
        Ok(None)
    }

    /// Stores one item of a package, verified against its manifest entry; an item whose bytes
    /// do not match is fetched by HTTP instead (verified, refetched, quarantined as usual).
    pub(crate) async fn store_from_package(
        &self,
        set: &CapabilitySet,
        e: UrlEntry,
        mut body: packages::ItemBody,
    ) -> Outcome {
        let uri = e.loc.trim().to_owned();
        let prior = match self.ctx.state.resource(&self.up.name, &uri).await {
            Ok(p) => p,
            Err(err) => return Outcome::failed(&uri, "reading state", &err),
        };
        if let Some(p) = prior.as_ref().filter(|p| unchanged(&e, p)) {
            // Drained so the package reader goes on to the next item.
            while body.next().await.is_some() {}
            let meta = upstream_meta(
                &e,
                p.upstream_meta.etag.clone(),
                p.upstream_meta.http_last_modified.clone(),
            );
            return Outcome::Unchanged {
                touched: Some(ResourceRecord {
                    upstream_meta: meta,
                    set: set.url.to_string(),
                    ..p.clone()
                }),
                release: None,
            };
        }
        let want_sha1 =
            e.md.as_ref()
                .and_then(|m| m.hash.as_ref())
                .is_some_and(|h| h.get(&HashAlgorithm::Sha1).is_some());
        let stored = self
            .ctx
            .blobs
            .put_resource(&self.up.name, &uri, &mut body, want_sha1);
        let info = match stored.await {
            Ok(i) => i,
            Err(err) => {
                while body.next().await.is_some() {}
                return Outcome::failed(&uri, "storing failed", &err);
            }
        };
        self.ctx.progress.bytes(info.length);
        if let Err((expected, got)) = verify(&e, &info) {
            tracing::warn!(upstream = %self.up.name, %uri, %expected, %got, "dump item differs from its manifest: fetching it instead");
            return self.store_entry(set, e, false).await;
        }
        self.stored(set, &e, prior.as_ref(), info, None, None, None)
    }
}
