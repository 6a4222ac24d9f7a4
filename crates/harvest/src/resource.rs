//! Storing one resource: fetch (conditional when a copy is held), verify, write the blob,
//! and say what changed; deleting one.

use std::pin::Pin;

use rsagg_fetch::{CapabilitySet, Request};
use rsagg_model::{Change, HashAlgorithm, UrlEntry, W3cDateTime};
use rsagg_store::{BlobInfo, QuarantineRecord, ResourceRecord, ResourceStatus};
use url::Url;

use crate::commit::Outcome;
use crate::compare::*;
use crate::context::{CUT_AT_DEADLINE, Harvest};

impl Harvest {
    /// The outcome of a verified copy: unchanged when the bytes are those already held,
    /// else created or updated.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stored(
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
            // Verified bytes, the same as held: a quarantine of the resource is lifted.
            return Outcome::Unchanged {
                touched: Some(ResourceRecord {
                    upstream_meta: meta,
                    set: set.url.to_string(),
                    mime_type,
                    ..p.clone()
                }),
                release: self.release_of(e.loc.trim()),
            };
        }
        let change = match prior {
            Some(p) if p.status == ResourceStatus::Present => Change::Updated,
            Some(_) => Change::Created,
            None => Change::Created,
        };
        Outcome::Stored {
            change,
            // Also a quarantine of this run (a baseline's, released by a later change).
            release: self.take_quarantined(e.loc.trim()),
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
    pub(crate) async fn store_entry(
        &self,
        set: &CapabilitySet,
        e: UrlEntry,
        gone_ok: bool,
    ) -> Outcome {
        let prior = match self.ctx.state.resource(&self.up.name, e.loc.trim()).await {
            Ok(p) => p,
            Err(err) => {
                return Outcome::failed(e.loc.trim(), "reading state", &err);
            }
        };
        self.store_with_prior(set, e, gone_ok, prior).await
    }

    /// [`Self::store_entry`] with the resource's record already known (`None`: no record).
    pub(crate) async fn store_with_prior(
        &self,
        set: &CapabilitySet,
        e: UrlEntry,
        gone_ok: bool,
        prior: Option<ResourceRecord>,
    ) -> Outcome {
        let uri = e.loc.trim().to_owned();
        // `run --baseline` fetches everything again: the held copy may be what is wrong.
        let refetch = self.ctx.baseline;
        if !refetch
            && let Some(p) = &prior
            && unchanged(&e, p)
        {
            let meta = upstream_meta(
                &e,
                p.upstream_meta.etag.clone(),
                p.upstream_meta.http_last_modified.clone(),
            );
            // The entry announces the copy held: a quarantine of the resource is lifted
            // when the copy verifies against it.
            let verified = p.copy.as_ref().is_some_and(|c| verify(&e, c).is_ok());
            return Outcome::Unchanged {
                touched: (meta != p.upstream_meta || p.set != set.url.as_str()).then(|| {
                    ResourceRecord {
                        upstream_meta: meta,
                        set: set.url.to_string(),
                        ..p.clone()
                    }
                }),
                release: verified.then(|| self.release_of(&uri)).flatten(),
            };
        }
        let url = match Url::parse(&uri) {
            Ok(u) => u,
            Err(err) => return Outcome::failed(&uri, "not a URL", &err),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let present = prior
                .as_ref()
                .filter(|p| p.status == ResourceStatus::Present && p.copy.is_some());
            // Conditional only when the list does not say the bytes changed (a coarse
            // validator would answer 304 for a file rewritten within the same second).
            let conditional = present.filter(|p| !refetch && !announces_other_bytes(&e, p));
            let req = Request {
                max_bytes: self.ctx.fetch.max_body_bytes,
                if_none_match: conditional.and_then(|p| p.upstream_meta.etag.clone()),
                if_modified_since: conditional
                    .and_then(|p| p.upstream_meta.http_last_modified.clone()),
                inflate_gzip: false,
                timeout: None,
                error_body: false,
            };
            // A request (its retries and their backoff included) is cut at the pass deadline.
            let fetching = self.ctx.fetcher.get(&url, &self.access, &req);
            let got = tokio::select! {
                biased;
                () = self.deadline_passed() => return self.cut(&uri),
                r = fetching => r,
            };
            let fetched = match got {
                Ok(f) => f,
                Err(err) if gone_ok && matches!(err.status(), Some(404 | 410)) => {
                    return Outcome::Gone {
                        uri,
                        error: rsagg_model::ErrorChain(&err).to_string(),
                    };
                }
                Err(err) => return Outcome::failed(&uri, "fetching failed", &err),
            };
            if fetched.not_modified
                && let Some(p) = present
            {
                let verified = p.copy.as_ref().is_some_and(|c| verify(&e, c).is_ok());
                return Outcome::Unchanged {
                    touched: Some(ResourceRecord {
                        upstream_meta: upstream_meta(
                            &e,
                            p.upstream_meta.etag.clone(),
                            p.upstream_meta.http_last_modified.clone(),
                        ),
                        set: set.url.to_string(),
                        ..p.clone()
                    }),
                    release: verified.then(|| self.release_of(&uri)).flatten(),
                };
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
                .put_resource(
                    &self.up.name,
                    &uri,
                    self.cut_at_deadline(fetched.body),
                    want_sha1,
                )
                .await
            {
                Ok(i) => i,
                Err(err) if self.past_deadline() => {
                    return Outcome::failed(&uri, CUT_AT_DEADLINE, &err);
                }
                Err(err) => return Outcome::failed(&uri, "storing failed", &err),
            };
            self.ctx.progress.bytes(info.length);
            if let Err((expected, got)) = verify(&e, &info) {
                let newer_version = last_modified
                    .as_deref()
                    .and_then(http_time)
                    .zip(change_instant(&e))
                    .is_some_and(|(served, listed)| served.cmp_instant(&listed).is_gt());
                if newer_version {
                    tracing::warn!(upstream = %self.up.name, %uri, %expected, %got, "bytes differ from the list, but a newer version exists: stored");
                } else if attempt == 1 {
                    tracing::warn!(upstream = %self.up.name, %uri, %expected, %got, "bytes differ from the list: fetching once more");
                    continue;
                } else {
                    self.note_quarantined(&uri);
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

    /// `Some(uri)` when `uri` is in quarantine (and no longer in the set): to be released.
    fn release_of(&self, uri: &str) -> Option<String> {
        self.take_quarantined(uri).then(|| uri.to_owned())
    }

    /// The outcome of a resource whose request was not answered by the pass deadline.
    fn cut(&self, uri: &str) -> Outcome {
        Outcome::Failed {
            uri: Some(uri.to_owned()),
            what: CUT_AT_DEADLINE,
            error: self.deadline_error().to_string(),
        }
    }

    pub(crate) async fn delete_entry(&self, e: &UrlEntry) -> Outcome {
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
            Err(err) => Outcome::failed(uri, "reading state", &err),
        }
    }
}

/// Runs one resource's work as a task of its own, so the runtime spreads the work of many
/// resources over every core; a task that panics is a failed resource, not a crash.
///
/// The work comes boxed: a resource's future (fetch, hashing, store, retries) is several
/// kilobytes, and unboxed it was copied whole each time it moved (into the concurrency
/// buffer inside the future that spawns it, into the task), which a profile of a
/// 10,000-resource baseline showed as the largest `memmove` of the run.
pub(crate) async fn spawned(
    work: Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>,
) -> Outcome {
    tokio::spawn(work)
        .await
        .unwrap_or_else(|e| Outcome::Failed {
            uri: None,
            what: "resource task failed",
            error: e.to_string(),
        })
}
