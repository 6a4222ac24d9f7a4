//! OAI-PMH 2.0 upstreams (`kind = "oai-pmh"`): a repository's records harvested by
//! `ListRecords` and kept as resources, so that everything after the harvest (the store,
//! republishing with `via`, notifications, audit) treats them as any other resource.
//!
//! The mapping (`docs/contract.md`, "OAI-PMH upstreams"):
//! - a record (identifier × metadata prefix) is a resource whose URI is its `GetRecord` URL
//!   (OAI-PMH 2.0 section 4.1; dereferenceable, so the republished `via` link points at the
//!   provider), whose bytes are the content of its `<metadata>` as the provider sent it (with
//!   the namespace declarations it inherits), whose upstream `lastmod` is the record's
//!   datestamp and whose hashes rsagg computes;
//! - a header with `status="deleted"` is a deletion (section 2.5.1);
//! - each selective harvest (the whole repository, or one per configured `setSpec`) is one
//!   set of resources of the upstream, named by its `ListRecords` URL without `from` and
//!   `until`, which keys its checkpoint.
//!
//! A pass asks `Identify` first (granularity, `deletedRecord`, and the provider's clock,
//! whose `responseDate` bounds the pass as `until`). The first pass lists everything; later
//! passes ask from the previous pass's `until` minus one unit of the repository's
//! granularity (datestamps are not unique, section 3.3.1, and a record changed in the second
//! the previous pass asked may be missing from it). Records are compared with the copy held
//! by the SHA-256 of their bytes, so the overlap, and providers that ignore `from`, store
//! nothing again (and bytes changed under an unchanged datestamp are not missed). The
//! checkpoint moves only at the end of a complete pass; a pass cut short (deadline, error,
//! failed record) is asked again from the same `from`. A repository that does not keep
//! deletions (`deletedRecord` `no` or `transient`) is re-listed whole every `relist_every`:
//! what the re-list does not name is deleted, found in bounded memory as in a ResourceSync
//! re-sync (`Seen`). `badResumptionToken` (an expired token, section 3.5) restarts the list
//! from its first request; what was stored before is recognised as unchanged.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rsagg_config::{OaiStrategy, UpstreamConfig};
use rsagg_fetch::{Access, CapabilitySet, Fetcher};
use rsagg_layout::report::UpstreamReport;
use rsagg_model::{HashAlgorithm, HashValue, Hashes, Md, UrlEntry, W3cDateTime};
use rsagg_oai::{Datestamp, DeletedRecord, Granularity, Identify, Page, Request, Response};
use rsagg_store::StoreFailure as _;
use rsagg_store::{Checkpoint, OaiPass, QuarantineRecord, WindowStatus};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use url::Url;

use crate::Error;
use crate::commit::{Committer, Outcome};
use crate::context::Harvest;
use crate::seen::{Seen, key};
use crate::windows;

/// How many times one list is restarted after `badResumptionToken` before the pass fails.
const MAX_RESTARTS: usize = 3;

/// Pages fetched ahead of the records being stored (see `oai_pages`: one more is asked only
/// once the storing side took this one).
const PAGES_AHEAD: usize = 1;

/// Pages in a row with no record (and no record left out) after which a list that still
/// hands out tokens is taken to be stuck (a provider paging over a window of deleted or
/// filtered rows sends a few; one that never ends sends them forever).
pub(crate) const MAX_EMPTY_PAGES: u32 = 100;

/// The media type of a stored record: the metadata is an XML document of its own.
const RECORD_TYPE: &str = "application/xml";

/// The report of an upstream whose sets are harvested side by side: held while one page
/// is stored and committed, which puts the pages of all sets in one order.
pub(crate) type ReportLock<'a> = tokio::sync::Mutex<&'a mut UpstreamReport>;

/// What the listing side of a pass hands the storing side.
enum Listing {
    /// The records of the next page (of request `url`), and the problems of those it left out.
    Records {
        url: Url,
        records: Vec<rsagg_oai::Record>,
        problems: Vec<rsagg_oai::RecordProblem>,
        /// The token of the page after it, when the provider gave one that can be followed.
        next: Option<String>,
        /// `completeListSize` of its token.
        size: Option<u64>,
        /// The page ends the list (no token, or an empty one).
        end: bool,
        /// The blob of the page's bytes, when it is not well-formed XML.
        kept: Option<String>,
    },
    /// `badResumptionToken`: the list starts again from its first request.
    Restart,
    /// The list cannot go on.
    Failed(Error),
}

/// The sets of resources of an OAI-PMH upstream: one selective harvest each, the whole
/// repository or one per `sets` entry, named by its `ListRecords` URL without `from` and
/// `until` (stable across passes: the key of its checkpoint).
pub(crate) fn oai_sets(up: &UpstreamConfig) -> Vec<CapabilitySet> {
    let specs: Vec<Option<String>> = match &up.sets {
        Some(sets) => sets.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    specs
        .into_iter()
        .map(|set| CapabilitySet {
            // `ListRecords` whatever the strategy: the set's name outlives a change of it.
            url: Request::ListRecords {
                identifiers: false,
                prefix: up.metadata_prefix().to_owned(),
                from: None,
                until: None,
                set,
                granularity: Granularity::Second,
            }
            .url(&up.url),
            entries: Vec::new(),
            hub: None,
            topic: None,
        })
        .collect()
}

fn list_request(
    up: &UpstreamConfig,
    set: Option<String>,
    from: Option<Datestamp>,
    until: Option<Datestamp>,
    granularity: Granularity,
) -> Request {
    Request::ListRecords {
        identifiers: up.strategy == OaiStrategy::Identifiers,
        prefix: up.metadata_prefix().to_owned(),
        from,
        until,
        set,
        granularity,
    }
}

/// The `setSpec` a set of resources of [`oai_sets`] harvests.
fn set_spec(set: &CapabilitySet) -> Option<String> {
    set.url
        .query_pairs()
        .find(|(k, _)| k == "set")
        .map(|(_, v)| v.into_owned())
}

/// The URI of the resource a record becomes: its `GetRecord` URL (section 4.1).
pub(crate) fn record_uri(up: &UpstreamConfig, identifier: &str) -> Url {
    Request::GetRecord {
        identifier: identifier.to_owned(),
        prefix: up.metadata_prefix().to_owned(),
    }
    .url(&up.url)
}

/// What one pass asks: everything, or the records changed from `from` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole list: the first pass, `run --baseline`, or a re-list of a repository
    /// without persistent deletions.
    Full,
    /// From the previous pass's `until` minus one unit.
    From(Datestamp),
}

impl Scope {
    /// The `from` of the pass's first request.
    pub(crate) fn from(self) -> Option<Datestamp> {
        match self {
            Scope::Full => None,
            Scope::From(f) => Some(f),
        }
    }
}

/// The pass's scope from the checkpoint: `relist` when deletions are found only by a full
/// re-list (`deletedRecord` `no` or `transient`), `relist_every` apart.
pub(crate) fn scope(
    cp: Option<&Checkpoint>,
    baseline: bool,
    identify: &Identify,
    now: Datestamp,
    relist_every: Duration,
) -> Scope {
    let Some(cp) = cp.filter(|_| !baseline) else {
        return Scope::Full;
    };
    let (Some(done), Some(listed)) = (
        cp.instant.as_ref().map(windows::datestamp_of),
        cp.baseline_at.as_ref().map(windows::datestamp_of),
    ) else {
        return Scope::Full;
    };
    let relist = identify.deleted != DeletedRecord::Persistent
        && now.unix() - listed.unix() >= i64::try_from(relist_every.as_secs()).unwrap_or(i64::MAX);
    if relist {
        Scope::Full
    } else {
        Scope::From(done.minus_unit(identify.granularity))
    }
}

/// The requests of a pass: what an OAI-PMH upstream is asked with (its access settings,
/// pages bounded by `[fetch] max_document_bytes`), shared by discovery and the harvest.
pub(crate) struct OaiClient<'a> {
    pub fetcher: &'a Fetcher,
    pub access: &'a Access,
    pub up: &'a UpstreamConfig,
    pub max_bytes: u64,
}

impl OaiClient<'_> {
    /// One OAI-PMH request: the page fetched whole (bounded; `503` with `Retry-After`
    /// waited for by the fetcher) and parsed.
    pub(crate) async fn page(&self, req: &Request) -> Result<(Url, Page), Error> {
        let (url, page, _) = self.page_and_body(req).await?;
        Ok((url, page))
    }

    /// [`OaiClient::page`] with the page's bytes, for keeping a damaged page.
    async fn page_and_body(&self, req: &Request) -> Result<(Url, Page, Bytes), Error> {
        let url = req.url(&self.up.url);
        let (page, body) = self.page_at_with_body(&url).await?;
        Ok((url, page, body))
    }

    /// The page at `url` (a request already written as a URL: a record's URI). An OAI-PMH
    /// error is in the body whatever the HTTP status (section 3.6): a 4xx answer whose body
    /// is an OAI-PMH error response is that response (InvenioRDM answers `noRecordsMatch`
    /// with 422), any other 4xx the HTTP error it is.
    pub(crate) async fn page_at(&self, url: &Url) -> Result<Page, Error> {
        Ok(self.page_at_with_body(url).await?.0)
    }

    async fn page_at_with_body(&self, url: &Url) -> Result<(Page, Bytes), Error> {
        let req = rsagg_fetch::Request {
            max_bytes: self.max_bytes,
            timeout: Some(self.fetcher.config().document_timeout),
            error_body: true,
            ..rsagg_fetch::Request::default()
        };
        let (fetched, body) = self.fetcher.get_whole(url, self.access, &req).await?;
        let page = rsagg_oai::parse(fetched.url.as_str(), &body);
        if !(200..300).contains(&fetched.status) {
            return match page {
                Ok(p) if matches!(p.response, Response::Errors(_)) => {
                    tracing::debug!(upstream = %self.up.name, %url, status = fetched.status, "an OAI-PMH error in a non-2xx answer");
                    Ok((p, body))
                }
                _ => Err(Error::Fetch(rsagg_fetch::Error::Status {
                    url: fetched.url,
                    status: fetched.status,
                    attempts: 1,
                })),
            };
        }
        Ok((page?, body))
    }

    /// `Identify` (section 4.2) with the provider's clock (its `responseDate`, else ours).
    pub(crate) async fn identify(&self) -> Result<(Identify, Datestamp), Error> {
        let (url, page) = self.page(&Request::Identify).await?;
        let now = page
            .response_date
            .unwrap_or_else(|| Datestamp::from_unix(W3cDateTime::now().instant().0));
        match page.response {
            Response::Identify(i) => Ok((i, now)),
            other => Err(oai_refused(&url, "4.2", &other)),
        }
    }

    /// `ListMetadataFormats` (section 4.4): the configured prefix must be offered.
    pub(crate) async fn check_prefix(&self) -> Result<(), Error> {
        let (url, page) = self.page(&Request::ListMetadataFormats).await?;
        let prefix = self.up.metadata_prefix();
        match page.response {
            Response::MetadataFormats(formats) if formats.iter().any(|f| f.prefix == prefix) => {
                Ok(())
            }
            Response::MetadataFormats(formats) => Err(Error::Oai {
                url: url.to_string(),
                section: "4.4",
                message: format!(
                    "metadata_prefix `{prefix}` is not offered (offered: {})",
                    formats
                        .iter()
                        .map(|f| f.prefix.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
            other => Err(oai_refused(&url, "4.4", &other)),
        }
    }
}

/// Discovery of an OAI-PMH upstream: `Identify` answers and the metadata prefix is offered;
/// then its sets of resources ([`oai_sets`]).
pub(crate) async fn discover(
    client: &OaiClient<'_>,
    cache: &crate::context::IdentifyCache,
) -> Result<Vec<CapabilitySet>, Error> {
    let (identify, now) = client.identify().await?;
    cache.put(&client.up.name, identify.clone(), now);
    tracing::info!(upstream = %client.up.name, repository = %identify.repository_name, granularity = ?identify.granularity, deleted = identify.deleted.as_str(), "OAI-PMH repository");
    client.check_prefix().await?;
    if let Some(sets) = &client.up.sets {
        client.check_sets(sets).await?;
    }
    Ok(oai_sets(client.up))
}

/// `ListSets` pages read to find the configured sets, at most (a repository with thousands
/// of sets pages them by tokens; the check stops as soon as every set is found).
const MAX_SET_PAGES: usize = 1_000;

impl OaiClient<'_> {
    /// `ListSets` (section 4.6): every configured `setSpec` must be one the repository
    /// has; `noSetHierarchy` refuses them all. A `ListSets` that fails otherwise (some
    /// providers break on it) is logged and the sets are harvested as configured.
    pub(crate) async fn check_sets(&self, wanted: &[String]) -> Result<(), Error> {
        let mut missing: std::collections::BTreeSet<&str> =
            wanted.iter().map(String::as_str).collect();
        let mut req = Request::ListSets;
        let mut seen_tokens = std::collections::HashSet::new();
        for _ in 0..MAX_SET_PAGES {
            let (url, page) = match self.page(&req).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(upstream = %self.up.name, error = %rsagg_model::ErrorChain(&e), "ListSets failed (OAI-PMH 2.0 section 4.6): the configured sets are harvested unchecked");
                    return Ok(());
                }
            };
            match page.response {
                Response::Sets { specs, token } => {
                    for s in &specs {
                        missing.remove(s.as_str());
                    }
                    if missing.is_empty() {
                        return Ok(());
                    }
                    match token.map(|t| t.value).filter(|t| !t.trim().is_empty()) {
                        Some(t) if seen_tokens.insert(token_digest(&t)) => {
                            req = Request::Resume {
                                verb: "ListSets",
                                token: t,
                            };
                        }
                        _ => {
                            let listed = wanted.len() - missing.len();
                            return Err(Error::Oai {
                                url: url.to_string(),
                                section: "4.6",
                                message: format!(
                                    "the repository has no set {} (sets = [...] of upstream `{}`; {listed} of the {} configured found in ListSets): a setSpec is case-sensitive and hierarchical (`parent:child`)",
                                    missing
                                        .iter()
                                        .map(|m| format!("`{m}`"))
                                        .collect::<Vec<_>>()
                                        .join(", "),
                                    self.up.name,
                                    wanted.len()
                                ),
                            });
                        }
                    }
                }
                Response::Errors(errors) if errors.iter().any(|e| e.code == "noSetHierarchy") => {
                    return Err(Error::Oai {
                        url: url.to_string(),
                        section: "4.6",
                        message: format!(
                            "the repository has no sets (noSetHierarchy), but upstream `{}` names sets = [...]: leave `sets` out to harvest the whole repository",
                            self.up.name
                        ),
                    });
                }
                other => {
                    let e = oai_refused(&url, "4.6", &other);
                    tracing::warn!(upstream = %self.up.name, error = %e, "ListSets failed: the configured sets are harvested unchecked");
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// What one pass over a set asks, decided from `Identify` and the checkpoint (by the run
/// and by its dry run alike).
#[derive(Debug, Clone)]
pub(crate) struct Pass {
    pub identify: Identify,
    /// The provider's clock: the pass's `until`, and its checkpoint once complete.
    pub now: Datestamp,
    pub scope: Scope,
    /// The list's first request.
    pub first: Request,
    pub cp: Option<Checkpoint>,
}

impl Pass {
    /// Why a set that has a checkpoint is listed whole, if it is.
    pub(crate) fn relist_reason(&self, baseline: bool) -> Option<String> {
        match (self.scope, &self.cp) {
            (Scope::Full, Some(_)) if baseline => {
                Some("listed whole, every record compared again (run --baseline)".into())
            }
            (Scope::Full, Some(_)) => Some(format!(
                "re-listed whole to find deletions (deletedRecord `{}`, relist_every)",
                self.identify.deleted.as_str()
            )),
            _ => None,
        }
    }
}

impl Harvest {
    /// The next pass over `set`: `Identify`, the checkpoint, the scope, the first request.
    pub(crate) async fn oai_pass(&self, set: &CapabilitySet) -> Result<Pass, Error> {
        let (identify, now) = self.identified().await?;
        let cp = self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?;
        let scope = scope(
            cp.as_ref(),
            self.ctx.baseline,
            &identify,
            now,
            self.up.relist_every(),
        );
        let first = list_request(
            &self.up,
            set_spec(set),
            scope.from(),
            Some(now),
            identify.granularity,
        );
        Ok(Pass {
            identify,
            now,
            scope,
            first,
            cp,
        })
    }

    /// What `Identify` said at this pass's discovery (asked again only when discovery did
    /// not ask it), with the provider's clock moved on to now.
    pub(crate) async fn identified(&self) -> Result<(Identify, Datestamp), Error> {
        if let Some(known) = self.ctx.identified.get(&self.up.name) {
            return Ok(known);
        }
        let (identify, now) = self.oai().identify().await?;
        self.ctx
            .identified
            .put(&self.up.name, identify.clone(), now);
        Ok((identify, now))
    }

    /// The client of this upstream's OAI-PMH requests.
    pub(crate) fn oai(&self) -> OaiClient<'_> {
        OaiClient {
            fetcher: &self.ctx.fetcher,
            access: &self.access,
            up: &self.up,
            max_bytes: self.ctx.fetch.max_document_bytes,
        }
    }

    /// Every set of an OAI-PMH upstream, harvested side by side (their pages fetched
    /// concurrently, within the per-host limits of the fetcher) while their records are
    /// stored one page at a time: each page is committed before the next is judged, so a
    /// record listed in two sets is stored once and found unchanged by the other.
    pub(crate) async fn harvest_oai_sets(
        &self,
        sets: &[CapabilitySet],
        report: &mut UpstreamReport,
    ) {
        let shared: ReportLock<'_> = tokio::sync::Mutex::new(report);
        let width = self.ctx.fetch.per_host.clamp(1, sets.len().max(1));
        let mut waiting = sets.iter();
        let mut runs = futures::stream::FuturesUnordered::new();
        loop {
            while runs.len() < width {
                let Some(set) = waiting.next() else { break };
                runs.push(self.oai_set_run(set, &shared));
            }
            let Some((set, result)) = runs.next().await else {
                break;
            };
            let Err(e) = result else { continue };
            let mut report = shared.lock().await;
            if let Some(wait) = retry_after_of(&e) {
                let until = park(&self.ctx.state, &self.up, wait).await;
                if report
                    .parked_until
                    .is_none_or(|t| t.cmp_instant(&until).is_lt())
                {
                    report.parked_until = Some(until);
                }
            }
            if e.is_fenced() {
                report.fenced = true;
                report.fail(e.to_string());
                return;
            }
            report.fail_at(
                Some(set.url.as_str()),
                "harvesting the set failed",
                &rsagg_model::ErrorChain(&e).to_string(),
            );
        }
    }

    /// [`Harvest::harvest_oai_set`], with the set it was of.
    async fn oai_set_run<'s>(
        &self,
        set: &'s CapabilitySet,
        shared: &ReportLock<'_>,
    ) -> (&'s CapabilitySet, Result<(), Error>) {
        (set, self.harvest_oai_set(set, shared).await)
    }

    /// One pass over one selective harvest of an OAI-PMH upstream (see the module's
    /// documentation): the pass in progress resumed (extended to the provider's clock), or a
    /// new one cut into date windows; each window listed in turn (those done skipped), its
    /// pages committed one by one with where it stands; the checkpoint moved to the pass's
    /// `until` once every window is done.
    pub(crate) async fn harvest_oai_set(
        &self,
        set: &CapabilitySet,
        shared: &ReportLock<'_>,
    ) -> Result<(), Error> {
        let set_url = set.url.as_str();
        let pass = self.bounded(self.oai_pass(set)).await?;
        let g = pass.identify.granularity;
        let size = self.up.oai_window();
        let mut cp = pass.cp.clone().unwrap_or_default();
        // Asked again: whatever parked it has passed (see `parked`).
        cp.parked_until = None;
        let had_pass = cp.instant.is_some();
        let mut plan = match cp.oai.take() {
            Some(mut p) if !p.complete && !self.ctx.baseline && !p.windows.is_empty() => {
                p.resumed = true;
                windows::extend(&mut p, pass.now, size, g);
                let left = p
                    .windows
                    .iter()
                    .filter(|w| w.status != WindowStatus::Done)
                    .count();
                tracing::info!(upstream = %self.up.name, set = %set.url, left, windows = p.windows.len(), "OAI-PMH pass resumed where the last run stopped");
                if p.full && had_pass {
                    shared.lock().await.warn(format!(
                        "{set_url}: a re-list resumed after an interruption: what it does not name can be told only by a re-list made in one run, so the next run re-lists the set again"
                    ));
                }
                p
            }
            _ => {
                if let Some(why) = pass.relist_reason(self.ctx.baseline) {
                    shared
                        .lock()
                        .await
                        .resyncs
                        .push(format!("{set_url}: {why}"));
                }
                OaiPass {
                    until: Some(pass.now.to_w3c()),
                    full: pass.scope == Scope::Full,
                    resumed: false,
                    windows: windows::plan(
                        pass.scope.from(),
                        pass.now,
                        pass.identify.earliest,
                        size,
                        g,
                    ),
                    complete: false,
                }
            }
        };
        let until = plan.until.as_ref().map_or(pass.now, windows::datestamp_of);
        let mut listed = (plan.full && !plan.resumed).then(|| Seen::new(self.ctx.listed));
        let mut committer = Committer::new(&self.ctx, &self.up.name, set_url);
        for i in 0..plan.windows.len() {
            if plan.windows[i].status == WindowStatus::Done {
                continue;
            }
            let listing = self
                .oai_window(
                    set,
                    g,
                    &mut plan,
                    i,
                    &cp,
                    &mut listed,
                    &mut committer,
                    shared,
                )
                .await;
            match listing {
                Ok(()) => {}
                Err(e @ (Error::Oai { .. } | Error::OaiPage(_))) => {
                    // What the provider sent ends this window, not the pass: the others
                    // are listed, this one again by the next run.
                    let w = &mut plan.windows[i];
                    w.status = WindowStatus::Failed;
                    w.token = None;
                    let error = rsagg_model::ErrorChain(&e).to_string();
                    w.error = Some(rsagg_model::excerpt(&error, 1_000).into_owned());
                    let mut report = shared.lock().await;
                    report.fail_at(
                        Some(set_url),
                        &format!("date window {} failed", windows::describe(w, g)),
                        &error,
                    );
                    committer.checkpoint(with_pass(&cp, &plan));
                    committer.flush().await?;
                }
                Err(e) => {
                    // Cut short (deadline, transport, store): what was stored is committed
                    // with the window's token, so the next run resumes at its page.
                    let _report = shared.lock().await;
                    committer.flush().await?;
                    return Err(e);
                }
            }
        }
        let failed = plan
            .windows
            .iter()
            .filter(|w| w.status != WindowStatus::Done)
            .count();
        if failed > 0 {
            shared.lock().await.warn(format!(
                "{set_url}: {failed} of {} date windows failed; the next run lists them again (rsagg oai windows)",
                plan.windows.len()
            ));
            return Ok(());
        }
        plan.complete = true;
        let until = until.to_w3c();
        let mut guard = shared.lock().await;
        let report: &mut UpstreamReport = &mut guard;
        match listed {
            Some(listed) => {
                let started = W3cDateTime::now();
                let done = self
                    .finish_sync(
                        set,
                        &set.url,
                        listed,
                        committer,
                        true,
                        Some(until),
                        started,
                        had_pass,
                        !had_pass,
                        report,
                    )
                    .await?;
                if let Some(mut done) = done {
                    // The pass, kept for `rsagg oai windows`.
                    done.oai = Some(plan);
                    let mut kept = Committer::new(&self.ctx, &self.up.name, set_url);
                    kept.checkpoint(done);
                    kept.flush().await?;
                }
            }
            None => {
                cp.instant = Some(until);
                cp.seen.clear();
                if plan.full && !had_pass {
                    // The first harvest: nothing was held to be deleted.
                    cp.baseline_at = Some(until);
                }
                cp.oai = Some(plan);
                committer.checkpoint(cp);
                committer.flush().await?;
            }
        }
        Ok(())
    }

    /// One date window of `plan`: listed from its token (where an earlier run stopped) or
    /// its `from`; each page's records stored, then committed with where the window stands
    /// (its next token), so a process killed anywhere resumes within one page.
    #[allow(clippy::too_many_arguments)]
    async fn oai_window(
        &self,
        set: &CapabilitySet,
        g: Granularity,
        plan: &mut OaiPass,
        i: usize,
        cp: &Checkpoint,
        listed: &mut Option<Seen>,
        committer: &mut Committer<'_>,
        shared: &ReportLock<'_>,
    ) -> Result<(), Error> {
        let set_url = set.url.as_str();
        let (from, until) = windows::bounds(&plan.windows[i]);
        let first = list_request(&self.up, set_spec(set), from, until, g);
        let w = &mut plan.windows[i];
        w.error = None;
        let resuming = w.token.is_some();
        let start = match w.token.clone() {
            Some(token) => Request::Resume {
                verb: first.verb(),
                token,
            },
            None => {
                restart(w);
                first.clone()
            }
        };
        tracing::info!(upstream = %self.up.name, set = %set.url, window = %windows::describe(w, g), resuming, "OAI-PMH ListRecords");
        let (tx, mut rx) = mpsc::channel::<Listing>(PAGES_AHEAD);
        let pages = self.oai_pages(start, first, resuming, tx);
        let store = async {
            let mut ok = true;
            // Each way datestamps depart from section 3.3.1, warned about once per list.
            let mut quirks: Vec<&'static str> = Vec::new();
            while let Some(next) = rx.recv().await {
                let (url, records, problems, token, size, end, kept) = match next {
                    Listing::Records {
                        url,
                        records,
                        problems,
                        next,
                        size,
                        end,
                        kept,
                    } => (url, records, problems, next, size, end, kept),
                    Listing::Restart => {
                        // What the list gave so far is committed, so that its records,
                        // listed again, are recognised as unchanged.
                        restart(&mut plan.windows[i]);
                        let _report = shared.lock().await;
                        committer.checkpoint(with_pass(cp, plan));
                        committer.flush().await?;
                        continue;
                    }
                    Listing::Failed(e) => return Err(e),
                };
                let mut guard = shared.lock().await;
                let report: &mut UpstreamReport = &mut guard;
                let count = (records.len() + problems.len()) as u64;
                let mut latest = plan.windows[i].last_datestamp;
                for p in problems {
                    let outcome = self.oai_problem(&url, p, kept.as_deref());
                    ok &= committer.add(outcome, report).await?;
                }
                for r in &records {
                    let stamp = r.header.datestamp.to_w3c();
                    if latest.as_ref().is_none_or(|l| stamp.cmp_instant(l).is_gt()) {
                        latest = Some(stamp);
                    }
                    let quirk = r.datestamp_quirk.or_else(|| {
                        (g == Granularity::Day && r.header.datestamp.unix() % 86_400 != 0).then_some(
                            "with a time of day although Identify's granularity is YYYY-MM-DD (`from` is asked in days)",
                        )
                    });
                    if let Some(q) = quirk.filter(|q| !quirks.contains(q)) {
                        quirks.push(q);
                        report.warn(format!(
                            "{set_url}: datestamps written {q}, e.g. of record {} (OAI-PMH 2.0 section 3.3.1 allows YYYY-MM-DD and YYYY-MM-DDThh:mm:ssZ): read leniently",
                            rsagg_model::excerpt(&r.header.identifier, 200)
                        ));
                    }
                }
                // What the window holds, as far as known: `completeListSize` once the
                // provider sends it (the progress line's total and ETA), else what came.
                let counted = plan.windows[i]
                    .records
                    .max(plan.windows[i].complete_list_size.unwrap_or(0));
                let known = (plan.windows[i].records + count).max(size.unwrap_or(0));
                self.ctx.progress.listed(known.saturating_sub(counted));
                let mut outcomes = futures::stream::iter(records)
                    .map(|r| self.store_record(set, r))
                    .buffered(self.ctx.fetch.concurrency.max(1));
                while let Some((uri, outcome)) = outcomes.next().await {
                    if let Some(l) = listed.as_mut() {
                        l.insert(key(&self.up.name, &uri))?;
                    }
                    ok &= committer.add(outcome, report).await?;
                }
                let w = &mut plan.windows[i];
                w.pages += 1;
                w.records += count;
                w.last_datestamp = latest;
                if size.is_some() {
                    w.complete_list_size = size;
                }
                w.token = token;
                if end {
                    w.status = if ok {
                        WindowStatus::Done
                    } else {
                        w.error = Some("some records failed; the window is listed again".into());
                        WindowStatus::Failed
                    };
                    if let Some(total) = w.complete_list_size.filter(|t| w.records < *t) {
                        report.incomplete_lists += 1;
                        report.warn(format!(
                            "{set_url}: date window {}: the provider announced completeListSize {total} but its list gave {} records (OAI-PMH 2.0 section 3.5): records may be missing from its ListRecords",
                            windows::describe(w, g),
                            w.records
                        ));
                    }
                }
                report.listing = Some(listing(plan));
                committer.checkpoint(with_pass(cp, plan));
                committer.flush().await?;
                drop(guard);
                if self.past_deadline() {
                    // Committed above with the window's token: the next pass resumes there.
                    return Err(self.deadline_error());
                }
            }
            Ok::<(), Error>(())
        };
        let ((), stored) = tokio::join!(pages, store);
        stored
    }

    /// The pages of a list in order into `tx`, from `start` (the list's first request, or a
    /// token an earlier run kept), following `resumptionToken`s (section 3.5) until an empty
    /// or absent one; `noRecordsMatch` ends it empty; `badResumptionToken` restarts it from
    /// `first`, at most [`MAX_RESTARTS`] times (a kept token the provider no longer knows,
    /// `badResumptionToken` or `badArgument`, restarts it without counting); any other
    /// failure is the last message. Stops early when the receiver is gone.
    async fn oai_pages(
        &self,
        start: Request,
        first: Request,
        mut kept_token: bool,
        tx: mpsc::Sender<Listing>,
    ) {
        let verb = first.verb();
        let identifiers = verb == "ListIdentifiers";
        let mut req = start;
        let mut restarts = 0;
        let mut tokens = 0u64;
        // Every token of this list, by digest (16 bytes each: 10^6 records in pages of 100
        // hold 160 KB): a token handed out twice is a loop (section 3.5: a token names the
        // rest of one list; the same token again means the same pages again, forever).
        let mut seen_tokens: std::collections::HashSet<[u8; 16]> = Default::default();
        let mut empty_run = 0u32;
        loop {
            // The next page is asked only once the storing side has taken the one before
            // (a slot reserved first): at most one page is read ahead of what is being
            // stored, so a process killed anywhere asks again at most the page it was
            // storing and the one after.
            let Ok(slot) = tx.reserve().await else {
                return;
            };
            let (url, page, body) = match self.bounded(self.oai().page_and_body(&req)).await {
                Ok(p) => p,
                Err(e) => {
                    slot.send(Listing::Failed(e));
                    return;
                }
            };
            let resumed_from_kept = std::mem::take(&mut kept_token);
            // A damaged page's bytes, kept for the operator (the blob of what it could not
            // give, in the quarantine, and named in the window's error).
            let mut kept = None;
            if let Some(damage) = &page.damage {
                tracing::warn!(upstream = %self.up.name, %url, damage = %damage, "an OAI-PMH page that is not well-formed XML, read record by record");
                let bytes = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
                match self.ctx.blobs.put_stream(url.as_str(), bytes, false).await {
                    Ok(info) => kept = Some(info.sha256),
                    Err(e) => {
                        slot.send(Listing::Failed(e.into()));
                        return;
                    }
                }
            }
            let cut = page.token_unreadable.then(|| {
                format!(
                    "the page is not well-formed XML ({}) and its resumptionToken cannot be read: the list stops here; the records read from it are kept, the page's bytes as blob sha256:{}, the next run asks again",
                    page.damage.as_deref().unwrap_or_default(),
                    kept.as_deref().unwrap_or_default()
                )
            });
            let (records, problems, next, size) = match page.response {
                Response::Records {
                    records,
                    problems,
                    token,
                } => {
                    let size = token.as_ref().and_then(|t| t.complete_list_size);
                    (
                        records,
                        problems,
                        token.map(|t| t.value).filter(|t| !t.trim().is_empty()),
                        size,
                    )
                }
                r if r.is_no_records() => (Vec::new(), Vec::new(), None, None),
                r if resumed_from_kept && (r.is_bad_token() || is_bad_argument(&r)) => {
                    tracing::info!(upstream = %self.up.name, %url, "the resumptionToken kept by the last run is no longer valid (section 3.5): the window is listed again from its start");
                    req = first.clone();
                    slot.send(Listing::Restart);
                    continue;
                }
                r if r.is_bad_token() && restarts < MAX_RESTARTS => {
                    restarts += 1;
                    tracing::warn!(upstream = %self.up.name, %url, restarts, "badResumptionToken (an expired token, OAI-PMH 2.0 section 3.5): the window is listed again from its start");
                    req = first.clone();
                    // A new list: its tokens may well be those of the one that expired.
                    seen_tokens.clear();
                    empty_run = 0;
                    slot.send(Listing::Restart);
                    continue;
                }
                other => {
                    slot.send(Listing::Failed(oai_refused(&url, "3.6", &other)));
                    return;
                }
            };
            let (records, problems) = if identifiers {
                match self.bounded(self.oai_get_records(records, problems)).await {
                    Ok(r) => r,
                    Err(e) => {
                        // The page's records are not stored: its token is where the window
                        // goes on.
                        slot.send(Listing::Failed(e));
                        return;
                    }
                }
            } else {
                (records, problems)
            };
            if records.is_empty() && problems.is_empty() && next.is_some() {
                empty_run += 1;
            } else {
                empty_run = 0;
            }
            let stuck = match &next {
                _ if cut.is_some() => cut,
                Some(token) if !seen_tokens.insert(token_digest(token)) => Some(format!(
                    "resumptionToken `{}` was handed out before in this list (after {tokens} token(s)): the provider loops; the list stops here",
                    rsagg_model::excerpt(token, 200)
                )),
                Some(token) if empty_run >= MAX_EMPTY_PAGES => Some(format!(
                    "{empty_run} pages in a row without a record, the last with resumptionToken `{}`: the list stops here",
                    rsagg_model::excerpt(token, 200)
                )),
                _ => None,
            };
            let end = next.is_none() && stuck.is_none();
            let listing = Listing::Records {
                url: url.clone(),
                records,
                problems,
                kept,
                // A token that loops is not kept: the window is listed again from its start.
                next: if stuck.is_some() { None } else { next.clone() },
                size,
                end,
            };
            slot.send(listing);
            if let Some(message) = stuck {
                let _ = tx
                    .send(Listing::Failed(Error::Oai {
                        url: url.to_string(),
                        section: "3.5",
                        message,
                    }))
                    .await;
                return;
            }
            let Some(token) = next else {
                return;
            };
            tokens += 1;
            tracing::debug!(upstream = %self.up.name, tokens, "resumptionToken");
            req = Request::Resume { verb, token };
        }
    }

    /// `strategy = "identifiers"`: each header of a `ListIdentifiers` page that is not a
    /// deletion asked by `GetRecord` (section 4.1), concurrently within the per-host limits,
    /// in list order. A record the provider cannot give (`idDoesNotExist` for an identifier
    /// it listed, a record it sends broken) is a problem under its identifier; a failed
    /// request fails the page.
    async fn oai_get_records(
        &self,
        headers: Vec<rsagg_oai::Record>,
        mut problems: Vec<rsagg_oai::RecordProblem>,
    ) -> Result<(Vec<rsagg_oai::Record>, Vec<rsagg_oai::RecordProblem>), Error> {
        let mut records = Vec::with_capacity(headers.len());
        let mut got = futures::stream::iter(headers)
            .map(|h| self.oai_get_one(h))
            .buffered(self.ctx.fetch.per_host.max(1));
        while let Some(one) = got.next().await {
            match one? {
                Ok(r) => records.push(r),
                Err(p) => problems.push(p),
            }
        }
        Ok((records, problems))
    }

    /// One header of `ListIdentifiers` as its record (`GetRecord`), or why it cannot be.
    async fn oai_get_one(
        &self,
        header: rsagg_oai::Record,
    ) -> Result<Result<rsagg_oai::Record, rsagg_oai::RecordProblem>, Error> {
        if header.header.deleted {
            return Ok(Ok(header));
        }
        let id = header.header.identifier.clone();
        let problem = |message: String| rsagg_oai::RecordProblem {
            identifier: Some(id.clone()),
            message,
        };
        let url = record_uri(&self.up, &id);
        match self.oai().page_at(&url).await?.response {
            Response::Records {
                mut records,
                mut problems,
                ..
            } => Ok(match (records.pop(), problems.pop()) {
                (Some(r), _) if r.header.identifier == id => Ok(r),
                (_, Some(p)) => Err(p),
                _ => Err(problem(format!(
                    "GetRecord {url} did not answer the record ListIdentifiers listed"
                ))),
            }),
            Response::Errors(errors) => Ok(Err(problem(format!(
                "listed by ListIdentifiers, but GetRecord {url} answers {}",
                errors
                    .iter()
                    .map(|e| e.code.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))),
            other => Err(oai_refused(&url, "4.1", &other)),
        }
    }

    /// Every record of the list that starts with `first`, as the entry it stands for (its
    /// `GetRecord` URL, its datestamp as `lastmod`) with whether it is a deletion, in list
    /// order; a record that is not deleted also carries the length and SHA-256 of its
    /// metadata bytes (what its copy holds), so it can be compared with the copy without
    /// fetching it again. For the operator commands (`audit`, `run --dry-run`): a list
    /// restarted by `badResumptionToken` would name records twice, so it fails instead,
    /// to be run again.
    pub(crate) async fn oai_entries(
        &self,
        set: &CapabilitySet,
        first: Request,
        tx: mpsc::Sender<(UrlEntry, bool)>,
    ) -> Result<(), Error> {
        let (pages_tx, mut pages) = mpsc::channel::<Listing>(PAGES_AHEAD);
        let listing = self.oai_pages(first.clone(), first, false, pages_tx);
        let entries = async {
            while let Some(next) = pages.recv().await {
                let (url, records, problems) = match next {
                    Listing::Records {
                        url,
                        records,
                        problems,
                        ..
                    } => (url, records, problems),
                    Listing::Restart => {
                        return Err(Error::Oai {
                            url: set.url.to_string(),
                            section: "3.5",
                            message: "a resumptionToken expired while the list was read (badResumptionToken); run the command again".into(),
                        });
                    }
                    Listing::Failed(e) => return Err(e),
                };
                for p in problems {
                    tracing::warn!(upstream = %self.up.name, %url, identifier = ?p.identifier, "{}", p.message);
                }
                for r in records {
                    let entry = record_entry(&self.up, &r.header, r.metadata.as_deref());
                    let deleted = r.header.deleted || r.metadata.is_none();
                    if tx.send((entry, deleted)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            Ok(())
        };
        let ((), listed) = tokio::join!(listing, entries);
        listed
    }

    /// The first request of a whole list of `set`, up to the provider's clock: the
    /// upstream's current state of the set (`rsagg audit`).
    pub(crate) async fn oai_whole_list(&self, set: &CapabilitySet) -> Result<Request, Error> {
        let (identify, now) = self.identified().await?;
        Ok(list_request(
            &self.up,
            set_spec(set),
            None,
            Some(now),
            identify.granularity,
        ))
    }

    /// One record asked again at `uri` (a `GetRecord` URL of this upstream, section 4.1), for
    /// `rsagg quarantine retry`: what became of it, or `None` when the provider no longer
    /// has it (`idDoesNotExist`).
    pub(crate) async fn oai_get_record(
        &self,
        set: &CapabilitySet,
        uri: &str,
    ) -> Result<Option<Outcome>, Error> {
        let url = Url::parse(uri).map_err(|e| Error::Oai {
            url: uri.to_owned(),
            section: "4.1",
            message: format!("not a URL: {e}"),
        })?;
        match self.oai().page_at(&url).await?.response {
            Response::Records {
                mut records,
                mut problems,
                ..
            } => {
                if let Some(p) = problems.pop() {
                    return Ok(Some(self.oai_problem(&url, p, None)));
                }
                let Some(r) = records.pop() else {
                    return Err(Error::Oai {
                        url: uri.to_owned(),
                        section: "4.1",
                        message: "GetRecord answered no record".into(),
                    });
                };
                Ok(Some(self.store_record(set, r).await.1))
            }
            Response::Errors(errors) if errors.iter().any(|e| e.code == "idDoesNotExist") => {
                Ok(None)
            }
            other => Err(oai_refused(&url, "4.1", &other)),
        }
    }

    /// One record: stored (unless its copy holds these bytes already) or deleted. Returns
    /// the resource's URI with the outcome.
    async fn store_record(&self, set: &CapabilitySet, r: rsagg_oai::Record) -> (String, Outcome) {
        let entry = record_entry(&self.up, &r.header, r.metadata.as_deref());
        let uri = entry.loc.clone();
        let outcome = match r.metadata {
            Some(bytes) if !r.header.deleted => {
                let body: crate::packages::ItemBody =
                    futures::stream::once(async move { Ok(Bytes::from(bytes)) }).boxed();
                self.store_from_package(set, entry, body).await
            }
            _ => self.delete_entry(&entry).await,
        };
        (uri, outcome)
    }

    /// A record the page could not give (bad characters in its metadata, no datestamp):
    /// quarantined under its URI when its identifier is known, else failed (so the pass
    /// keeps its checkpoint and asks again).
    fn oai_problem(&self, url: &Url, p: rsagg_oai::RecordProblem, page: Option<&str>) -> Outcome {
        tracing::warn!(upstream = %self.up.name, %url, identifier = ?p.identifier, "{}", p.message);
        match p.identifier {
            Some(id) => {
                let uri = record_uri(&self.up, &id).to_string();
                self.note_quarantined(&uri);
                Outcome::Quarantined(QuarantineRecord {
                    upstream: self.up.name.clone(),
                    uri,
                    reason: format!("OAI-PMH record left out: {}", p.message),
                    expected: "a well-formed record (OAI-PMH 2.0 section 2.5)".into(),
                    got: format!("in the page {url}"),
                    at: W3cDateTime::now(),
                    blob: page.map(str::to_owned),
                })
            }
            None => Outcome::Failed {
                uri: None,
                what: "reading an OAI-PMH record",
                error: format!("{url}: {}", p.message),
            },
        }
    }
}

/// How long the provider asked to be left alone, when `e` is a `Retry-After` beyond
/// `[fetch] retry_after_max`.
pub(crate) fn retry_after_of(e: &Error) -> Option<Duration> {
    match e {
        Error::Fetch(rsagg_fetch::Error::RetryAfter { retry_after, .. }) => Some(*retry_after),
        _ => None,
    }
}

/// Parks every set of `up` for `wait` from now (kept in their checkpoints, so the next run
/// asks nothing before then either); returns until when. A set whose checkpoint cannot be
/// written is logged: this run asks it nothing more in any case.
pub(crate) async fn park(
    state: &rsagg_store::State,
    up: &UpstreamConfig,
    wait: Duration,
) -> W3cDateTime {
    let until = parked_for(wait);
    park_until(state, up, until).await;
    until
}

/// Now plus `wait`, at whole seconds.
pub(crate) fn parked_for(wait: Duration) -> W3cDateTime {
    let now = W3cDateTime::now().instant().0;
    let wait = i64::try_from(wait.as_secs()).unwrap_or(i64::MAX / 4);
    W3cDateTime::from_unix(now.saturating_add(wait), 0)
}

/// Parks every set of `up` until `until` (see [`park`]).
pub(crate) async fn park_until(
    state: &rsagg_store::State,
    up: &UpstreamConfig,
    until: W3cDateTime,
) {
    for set in oai_sets(up) {
        let parked = async {
            let mut cp = state
                .checkpoint(&up.name, set.url.as_str())
                .await?
                .unwrap_or_default();
            cp.parked_until = Some(until);
            state
                .commit(rsagg_store::Commit {
                    upstream: up.name.clone(),
                    set: set.url.to_string(),
                    checkpoint: Some(cp),
                    ..rsagg_store::Commit::default()
                })
                .await
        };
        if let Err(e) = parked.await {
            tracing::warn!(upstream = %up.name, set = %set.url, error = %e, "the upstream's parking could not be recorded");
        }
    }
    tracing::warn!(upstream = %up.name, until = %until.to_utc(), "parked: the provider asked for no requests before then (Retry-After)");
}

/// When `up` is parked (a set's `parked_until` still ahead), until when.
pub(crate) async fn parked(state: &rsagg_store::State, up: &UpstreamConfig) -> Option<W3cDateTime> {
    let now = W3cDateTime::now();
    let mut latest: Option<W3cDateTime> = None;
    for set in oai_sets(up) {
        let Ok(Some(cp)) = state.checkpoint(&up.name, set.url.as_str()).await else {
            continue;
        };
        if let Some(t) = cp.parked_until.filter(|t| t.cmp_instant(&now).is_gt())
            && latest.is_none_or(|l| l.cmp_instant(&t).is_lt())
        {
            latest = Some(t);
        }
    }
    latest
}

/// How far `pass` has listed, for the report (`listing`): records of its windows, and the
/// total their `completeListSize`s announce when every window begun has one.
fn listing(pass: &OaiPass) -> rsagg_layout::report::Listing {
    let begun: Vec<_> = pass
        .windows
        .iter()
        .filter(|w| w.pages > 0 || w.status == WindowStatus::Done)
        .collect();
    rsagg_layout::report::Listing {
        done: begun.iter().map(|w| w.records).sum(),
        total: begun
            .iter()
            .map(|w| {
                w.complete_list_size
                    .or((w.status == WindowStatus::Done).then_some(w.records))
            })
            .sum(),
        windows_done: begun
            .iter()
            .filter(|w| w.status == WindowStatus::Done)
            .count() as u64,
        windows: pass.windows.len() as u64,
    }
}

/// The set's checkpoint `cp` with `pass` where it stands now, for committing with a page.
fn with_pass(cp: &Checkpoint, pass: &OaiPass) -> Checkpoint {
    Checkpoint {
        oai: Some(pass.clone()),
        ..cp.clone()
    }
}

/// A window's list started again from its `from`: its counts are of the new listing.
fn restart(w: &mut rsagg_store::OaiWindow) {
    w.token = None;
    w.attempts += 1;
    w.pages = 0;
    w.records = 0;
    w.complete_list_size = None;
}

/// `badArgument` (section 3.6): how some providers refuse a token they no longer know.
fn is_bad_argument(r: &Response) -> bool {
    matches!(r, Response::Errors(e) if e.iter().any(|e| e.code == "badArgument"))
}

/// A token's digest, for telling a token seen before in a list.
fn token_digest(token: &str) -> [u8; 16] {
    let d = Sha256::digest(token.as_bytes());
    let mut out = [0; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// The list entry a record stands for: its `GetRecord` URL, its datestamp as `lastmod`, the
/// media type of its copy and, given its metadata bytes, their length and SHA-256, so that
/// a record is compared with its copy by its bytes (exact, whatever its datestamp says) and
/// a copy is verified against what was listed.
fn record_entry(up: &UpstreamConfig, header: &rsagg_oai::Header, bytes: Option<&[u8]>) -> UrlEntry {
    let loc = record_uri(up, &header.identifier).to_string();
    // The record's `via` (no fixity: its URL answers the envelope) and its sets, marked as
    // rsagg's own (`oai_links`); the fixity above stays on the entry only.
    let links = crate::oai_links::record_links(up, header, &loc);
    UrlEntry {
        loc,
        lastmod: Some(header.datestamp.to_w3c()),
        md: Some(Md {
            mime_type: Some(RECORD_TYPE.to_owned()),
            length: bytes.map(|b| b.len() as u64),
            hash: bytes.map(|b| {
                Hashes(vec![HashValue::from_bytes(
                    HashAlgorithm::Sha256,
                    &Sha256::digest(b),
                )])
            }),
            ..Md::default()
        }),
        links,
        ..UrlEntry::default()
    }
}

/// An OAI-PMH response that is not the answer asked for (its errors, or another verb's).
fn oai_refused(url: &Url, section: &'static str, r: &Response) -> Error {
    let message = match r {
        Response::Errors(errors) => errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; "),
        _ => "an answer to another verb".into(),
    };
    Error::Oai {
        url: url.to_string(),
        section,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identify(deleted: DeletedRecord, granularity: Granularity) -> Identify {
        Identify {
            repository_name: "r".into(),
            base_url: "http://repo.example/oai".into(),
            protocol_version: "2.0".into(),
            earliest: None,
            deleted,
            granularity,
        }
    }

    fn ds(s: &str) -> Datestamp {
        Datestamp::parse(s).unwrap()
    }

    fn cp(instant: &str, listed: &str) -> Checkpoint {
        Checkpoint {
            instant: Some(W3cDateTime::parse(instant).unwrap().value),
            baseline_at: Some(W3cDateTime::parse(listed).unwrap().value),
            ..Checkpoint::default()
        }
    }

    #[test]
    fn the_first_pass_and_a_baseline_list_everything() {
        let i = identify(DeletedRecord::Persistent, Granularity::Second);
        let now = ds("2024-05-01T00:00:00Z");
        let week = Duration::from_secs(7 * 86_400);
        assert_eq!(scope(None, false, &i, now, week), Scope::Full);
        let c = cp("2024-04-30T12:00:00Z", "2024-04-01T00:00:00Z");
        assert_eq!(scope(Some(&c), true, &i, now, week), Scope::Full);
    }

    #[test]
    fn later_passes_overlap_the_previous_one_by_one_unit_of_granularity() {
        let now = ds("2024-05-01T00:00:00Z");
        let week = Duration::from_secs(7 * 86_400);
        let c = cp("2024-04-30T12:00:00Z", "2024-04-01T00:00:00Z");
        let secs = identify(DeletedRecord::Persistent, Granularity::Second);
        assert_eq!(
            scope(Some(&c), false, &secs, now, week),
            Scope::From(ds("2024-04-30T11:59:59Z"))
        );
        let days = identify(DeletedRecord::Persistent, Granularity::Day);
        match scope(Some(&c), false, &days, now, week) {
            Scope::From(f) => assert_eq!(f.format(Granularity::Day), "2024-04-29"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn repositories_without_persistent_deletions_are_relisted_every_relist_every() {
        let week = Duration::from_secs(7 * 86_400);
        let c = cp("2024-04-30T12:00:00Z", "2024-04-25T00:00:00Z");
        for deleted in [DeletedRecord::No, DeletedRecord::Transient] {
            let i = identify(deleted, Granularity::Second);
            assert!(matches!(
                scope(Some(&c), false, &i, ds("2024-05-01T00:00:00Z"), week),
                Scope::From(_)
            ));
            assert_eq!(
                scope(Some(&c), false, &i, ds("2024-05-02T00:00:00Z"), week),
                Scope::Full
            );
        }
        let kept = identify(DeletedRecord::Persistent, Granularity::Second);
        assert!(matches!(
            scope(Some(&c), false, &kept, ds("2025-01-01T00:00:00Z"), week),
            Scope::From(_)
        ));
    }

    #[test]
    fn sets_are_named_by_their_list_request_and_records_by_their_get_record_url() {
        let toml = r#"
name = "repo"
url = "http://repo.example/oai?x=1"
kind = "oai-pmh"
sets = ["a:b", "c"]
"#;
        let up: UpstreamConfig = toml::from_str(toml).unwrap();
        let sets = oai_sets(&up);
        assert_eq!(sets.len(), 2);
        assert_eq!(
            sets[0].url.as_str(),
            "http://repo.example/oai?verb=ListRecords&metadataPrefix=oai_dc&set=a%3Ab"
        );
        assert_eq!(set_spec(&sets[1]).as_deref(), Some("c"));
        assert_eq!(
            record_uri(&up, "oai:repo:1/2").as_str(),
            "http://repo.example/oai?verb=GetRecord&identifier=oai%3Arepo%3A1%2F2&metadataPrefix=oai_dc"
        );
    }
}
