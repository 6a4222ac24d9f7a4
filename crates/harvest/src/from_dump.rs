//! Baseline and incremental from the upstream's dumps (spec 11, 13): packages are
//! downloaded, checked and their bitstreams stored as if fetched one by one.

use futures::StreamExt;
use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, Change, HashAlgorithm, UrlEntry, W3cDateTime};
use rsagg_store::{Checkpoint, ResourceRecord};
use tokio::sync::mpsc;
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
    /// Reads every package entry of a dump document (or index) at `url`: packages are few
    /// (each holds many resources), so their entries are kept.
    pub(crate) async fn dump_packages(
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
        let (header, packages) = self.bounded(self.dump_packages(&dump_url)).await?;
        let mut listed = Seen::new(self.ctx.listed);
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        let mut all_ok = true;
        for (base, entry) in &packages {
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
        let at = header.md.as_ref().and_then(|m| m.at);
        self.finish_sync(
            set, &dump_url, listed, committer, all_ok, at, started, false, false, report,
        )
        .await
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
        let (header, mut packages) = self.bounded(self.dump_packages(cd)).await?;
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
