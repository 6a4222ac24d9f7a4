//! Storing one resource: fetch (conditional when a copy is held), verify, write the blob,
//! and say what changed; deleting one.
//!
//! Mirrors (spec 14.2): when the upstream's URI is unavailable ([`mirror_may_serve`]: it
//! cannot be reached, times out, or answers 5xx/408/429 after the retries) and the entry
//! announces a hash to check against ([`announces_fixity`]), its `rs:ln rel="duplicate"`
//! links are tried in `pri` order ([`mirrors`]), through the same fetcher (its address
//! guard, its limits; credentials only to their hosts). The first whose bytes verify
//! against the entry exactly (no newer-version leniency: a mirror's bytes are the
//! resource's or nothing) gives the copy, stored under the upstream's URI and counted
//! `mirrored`; one serving other bytes is passed over. A 404/410 of the upstream is its
//! word that the resource is gone, and no mirror overrides it.
//!
//! Encoded resources (spec 7 `encoding`: the content coding of the representation that
//! `hash` and `length` describe, as its `Content-Encoding`): an entry announcing one (other
//! than `identity`) is asked for in it and its body kept as sent, not decoded
//! ([`rsagg_fetch::Request::encoded`]), so its bytes are verified as the Source describes
//! them and stored so; a response in another coding (or none) does not match, as other
//! bytes would not. The copy is then the encoded representation, and rsagg's own entry says
//! so (`encoding`, hash and length of the encoded bytes) and `serve` sends it with that
//! `Content-Encoding`.

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
                encoded: announced_coding(&e),
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
                Err(err) if mirror_may_serve(&err) => {
                    let from =
                        self.copy_from_mirrors(set, &e, prior.as_ref(), "fetching failed", &err);
                    return Box::pin(from).await;
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
            let coding = coding_mismatch(&e, fetched.content_encoding.as_deref());
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
                // The upstream's body failed in transit (reset, cut short, too slow).
                Err(err @ rsagg_store::Error::Body { .. }) => {
                    let from =
                        self.copy_from_mirrors(set, &e, prior.as_ref(), "storing failed", &err);
                    return Box::pin(from).await;
                }
                Err(err) => return Outcome::failed(&uri, "storing failed", &err),
            };
            self.ctx.progress.bytes(info.length);
            let checked = match &coding {
                Some(m) => Err(m.clone()),
                None => verify(&e, &info),
            };
            if let Err((expected, got)) = checked {
                // Bytes in another coding than announced are never "a newer version": the
                // copy's coding is what the entry says (see the module's documentation).
                let newer_version = coding.is_none()
                    && last_modified
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

    /// The copy of `e` from its mirrors, its upstream URI having failed at `what` with
    /// `primary` (see the module's documentation): [`Outcome::Mirrored`] around what the
    /// first mirror serving the announced bytes came to, else the failure (naming what each
    /// mirror did), as without mirrors when there are none or no hash to check them by.
    async fn copy_from_mirrors(
        &self,
        set: &CapabilitySet,
        e: &UrlEntry,
        prior: Option<&ResourceRecord>,
        what: &'static str,
        primary: &(dyn std::error::Error + Send + Sync),
    ) -> Outcome {
        let uri = e.loc.trim();
        let candidates = mirrors(e);
        if candidates.is_empty() || !announces_fixity(e) {
            return Outcome::failed(uri, what, primary);
        }
        let primary = rsagg_model::ErrorChain(primary).to_string();
        let want_sha1 =
            e.md.as_ref()
                .and_then(|m| m.hash.as_ref())
                .is_some_and(|h| h.get(&HashAlgorithm::Sha1).is_some());
        // Unconditional: the validators held are the upstream's, not a mirror's.
        let req = Request {
            max_bytes: self.ctx.fetch.max_body_bytes,
            encoded: announced_coding(e),
            ..Request::default()
        };
        let mut failures = Vec::new();
        for mirror in candidates {
            tracing::info!(
                upstream = %self.up.name,
                uri = %rsagg_model::bounded(uri),
                mirror = %rsagg_model::bounded(mirror.as_str()),
                "the upstream's URI failed: trying a mirror (rs:ln rel=\"duplicate\")"
            );
            let fetching = self.ctx.fetcher.get(&mirror, &self.access, &req);
            let got = tokio::select! {
                biased;
                () = self.deadline_passed() => return self.cut(uri),
                r = fetching => r,
            };
            let fetched = match got {
                Ok(f) => f,
                Err(err) => {
                    // Fetch errors begin with their URL: the mirror's.
                    failures.push(rsagg_model::ErrorChain(&err).to_string());
                    continue;
                }
            };
            let content_type = fetched.content_type.clone();
            let coding = coding_mismatch(e, fetched.content_encoding.as_deref());
            let info = match self
                .ctx
                .blobs
                .put_resource(
                    &self.up.name,
                    uri,
                    self.cut_at_deadline(fetched.body),
                    want_sha1,
                )
                .await
            {
                Ok(i) => i,
                Err(err) if self.past_deadline() => {
                    return Outcome::failed(uri, CUT_AT_DEADLINE, &err);
                }
                Err(err @ rsagg_store::Error::Body { .. }) => {
                    let why = rsagg_model::ErrorChain(&err).to_string();
                    failures.push(format!("{mirror}: {why}"));
                    continue;
                }
                // The store failed, not the mirror.
                Err(err) => return Outcome::failed(uri, "storing failed", &err),
            };
            self.ctx.progress.bytes(info.length);
            let checked = match coding {
                Some(m) => Err(m),
                None => verify(e, &info),
            };
            if let Err((expected, got)) = checked {
                tracing::warn!(upstream = %self.up.name, %uri, %mirror, %expected, %got, "a mirror's bytes differ from what the upstream announced: not stored from it");
                failures.push(format!(
                    "{mirror}: bytes differ from what the upstream announced (expected {expected}, got {got})"
                ));
                continue;
            }
            // The same bytes as held: the upstream's validators still describe them.
            let (etag, last_modified) = prior
                .filter(|p| p.status == ResourceStatus::Present)
                .filter(|p| p.copy.as_ref().is_some_and(|c| c.sha256 == info.sha256))
                .map(|p| {
                    (
                        p.upstream_meta.etag.clone(),
                        p.upstream_meta.http_last_modified.clone(),
                    )
                })
                .unwrap_or_default();
            let mime_type =
                e.md.as_ref()
                    .and_then(|m| m.mime_type.clone())
                    .or(content_type);
            let outcome = self.stored(set, e, prior, info, etag, last_modified, mime_type);
            return Outcome::Mirrored {
                uri: uri.to_owned(),
                mirror: mirror.to_string(),
                primary,
                outcome: Box::new(outcome),
            };
        }
        Outcome::Failed {
            uri: Some(uri.to_owned()),
            what,
            error: format!(
                "{primary}; no mirror (rs:ln rel=\"duplicate\") served the announced bytes: {}",
                failures.join("; ")
            ),
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

/// The content coding `e` describes its resource in ([`rsagg_model::Md::content_coding`]).
pub(crate) fn announced_coding(e: &UrlEntry) -> Option<String> {
    e.md.as_ref().and_then(rsagg_model::Md::content_coding)
}

/// `Some((expected, got))` when the response's `Content-Encoding` (`served`, given only for
/// a body handed over undecoded) is not the coding `e` announces: its bytes are then not
/// the representation `hash` and `length` describe (spec 7: `encoding` should equal the
/// response's `Content-Encoding`).
fn coding_mismatch(e: &UrlEntry, served: Option<&str>) -> Option<(String, String)> {
    let announced = announced_coding(e)?;
    let served = served
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity");
    (served.as_deref() != Some(announced.as_str())).then(|| {
        (
            format!("Content-Encoding {announced} (encoding, spec 7)"),
            format!(
                "Content-Encoding {}",
                served.as_deref().unwrap_or("none (identity)")
            ),
        )
    })
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use rsagg_fetch::{Access, FetchConfig, Fetcher};
    use rsagg_layout::report::UpstreamReport;
    use rsagg_model::{Hashes, Link, Md};
    use rsagg_store::{Blobs, State};

    use super::*;
    use crate::commit::Committer;
    use crate::context::Ctx;

    const RIGHT: &[u8] = b"the resource, as the upstream announced it";
    const WRONG: &[u8] = b"something else, served by a broken mirror";
    /// RIGHT, gzip'd (served `Content-Encoding: gzip` at `/gz`).
    const GZIPPED: &[u8] = &[
        31, 139, 8, 0, 0, 0, 0, 0, 2, 255, 43, 201, 72, 85, 40, 74, 45, 206, 47, 45, 74, 78, 213,
        81, 72, 44, 86, 40, 1, 10, 148, 22, 20, 151, 20, 165, 38, 230, 42, 36, 230, 229, 229, 151,
        230, 37, 167, 166, 40, 100, 150, 0, 0, 115, 126, 159, 30, 42, 0, 0, 0,
    ];

    /// Requests by path, as the fixture servers saw them.
    type Hits = Arc<Mutex<HashMap<String, usize>>>;

    /// An upstream and its mirrors on 127.0.0.1:0: `/primary` answers 503, `/gone` 404,
    /// `/right*` the announced bytes, `/wrong*` other bytes, `/gz` GZIPPED with
    /// `Content-Encoding: gzip`.
    async fn fixture() -> (String, Hits) {
        let hits: Hits = Arc::default();
        let seen = hits.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let seen = seen.clone();
            async move {
                let path = uri.path().to_owned();
                *seen.lock().unwrap().entry(path.clone()).or_default() += 1;
                use axum::http::StatusCode;
                use axum::response::IntoResponse;
                if path == "/gz" {
                    return (
                        [(axum::http::header::CONTENT_ENCODING, "gzip")],
                        GZIPPED.to_vec(),
                    )
                        .into_response();
                }
                if path.starts_with("/right") {
                    (StatusCode::OK, RIGHT.to_vec())
                } else if path.starts_with("/wrong") {
                    (StatusCode::OK, WRONG.to_vec())
                } else if path == "/gone" {
                    (StatusCode::NOT_FOUND, Vec::new())
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, Vec::new())
                }
                .into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, hits)
    }

    fn hits(h: &Hits, path: &str) -> usize {
        h.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// A port nothing listens on (bound, then closed): connections to it are refused.
    async fn refusing() -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        format!("http://{addr}")
    }

    async fn harvest(allow_private: bool) -> Harvest {
        let loc = rsagg_store::open_object_store("memory://mirrors").unwrap();
        let state = Arc::new(State::open(loc.objects.clone(), "test").await.unwrap());
        let fetcher = Fetcher::new(FetchConfig {
            retries: 1,
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(10),
            connect_timeout: Duration::from_secs(5),
            ..FetchConfig::default()
        })
        .unwrap();
        let ctx = Arc::new(Ctx {
            fetcher,
            blobs: Blobs::for_location(&loc),
            state,
            fetch: rsagg_config::FetchSection::default(),
            progress: Arc::default(),
            baseline: false,
            deadlines: rsagg_config::DeadlinesConfig::default(),
            run_deadline: None,
            listed: crate::SeenLimits::default(),
            identified: crate::IdentifyCache::default(),
        });
        let up: rsagg_config::UpstreamConfig = toml::from_str(&format!(
            "name = \"up\"\nurl = \"http://up.example/\"\nallow_private = {allow_private}\n"
        ))
        .unwrap();
        let access = Access {
            allow_private,
            upstream: Some("up".into()),
            ..Access::default()
        };
        Harvest::unbounded(ctx, Arc::new(up), access)
    }

    fn set() -> CapabilitySet {
        CapabilitySet {
            url: Url::parse("http://up.example/capabilitylist.xml").unwrap(),
            entries: Vec::new(),
            hub: None,
            topic: None,
        }
    }

    async fn info_of(bytes: &'static [u8]) -> BlobInfo {
        let chunks =
            futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(bytes))]);
        crate::audit::hash_stream(chunks).await.unwrap()
    }

    /// An entry for `loc` announcing RIGHT's md5 and length (`hashed`), with `mirrors` as
    /// `rs:ln rel="duplicate"` (href, pri) in document order.
    async fn entry(loc: &str, hashed: bool, mirrors: &[(&str, Option<u32>)]) -> UrlEntry {
        let right = info_of(RIGHT).await;
        UrlEntry {
            loc: loc.to_owned(),
            md: Some(Md {
                hash: hashed.then(|| Hashes::parse(&format!("md5:{}", right.md5), |_| {})),
                length: Some(right.length),
                ..Md::default()
            }),
            links: mirrors
                .iter()
                .map(|(href, pri)| Link {
                    pri: *pri,
                    ..Link::new("duplicate", *href)
                })
                .collect(),
            ..UrlEntry::default()
        }
    }

    /// Stores `e` as a baseline would and commits the outcome; the report and the record.
    async fn run(h: &Harvest, e: UrlEntry) -> (UpstreamReport, Option<ResourceRecord>) {
        let uri = e.loc.clone();
        let set = set();
        let outcome = h.store_entry(&set, e, true).await;
        let mut report = UpstreamReport::new("up");
        let mut committer = Committer::new(&h.ctx, "up", set.url.as_str());
        committer.add(outcome, &mut report).await.unwrap();
        committer.flush().await.unwrap();
        let record = h.ctx.state.resource("up", &uri).await.unwrap();
        (report, record)
    }

    /// The upstream answers 503: its mirrors are tried in `pri` order, one serving other
    /// bytes is passed over, and the first serving the announced bytes gives the copy,
    /// stored under the upstream's URI and counted `mirrored`.
    #[tokio::test]
    async fn an_unavailable_upstream_is_copied_from_its_first_good_mirror_in_pri_order() {
        let (base, seen) = fixture().await;
        let h = harvest(true).await;
        let primary = format!("{base}/primary");
        let e = entry(
            &primary,
            true,
            &[
                (&format!("{base}/right-unranked"), None),
                (&format!("{base}/right-2"), Some(2)),
                (&format!("{base}/wrong-1"), Some(1)),
                (&format!("{base}/right-3"), Some(3)),
            ],
        )
        .await;
        let (report, record) = run(&h, e).await;
        assert_eq!((report.created, report.failed), (1, 0), "{report:?}");
        assert_eq!(report.mirrored, 1, "{report:?}");
        assert!(report.ok());
        assert!(hits(&seen, "/primary") >= 1);
        assert_eq!(hits(&seen, "/wrong-1"), 1, "pri=1 first");
        assert_eq!(hits(&seen, "/right-2"), 1, "then pri=2");
        assert_eq!(
            hits(&seen, "/right-3"),
            0,
            "the first good mirror is enough"
        );
        assert_eq!(hits(&seen, "/right-unranked"), 0);
        let record = record.expect("stored");
        assert_eq!(record.uri, primary, "under the upstream's URI");
        assert_eq!(record.status, ResourceStatus::Present);
        assert_eq!(record.copy.unwrap().sha256, info_of(RIGHT).await.sha256);
        assert!(
            report.warnings.iter().any(|w| w.contains("/right-2")),
            "{:?}",
            report.warnings
        );
    }

    /// An upstream refusing connections, with only a mirror serving other bytes: nothing is
    /// stored from it, and the resource fails as it did without mirrors (the next run tries
    /// again), the error naming both.
    #[tokio::test]
    async fn a_mirror_serving_other_bytes_is_never_stored() {
        let (base, seen) = fixture().await;
        let h = harvest(true).await;
        let primary = format!("{}/r", refusing().await);
        let e = entry(&primary, true, &[(&format!("{base}/wrong"), Some(1))]).await;
        let (report, record) = run(&h, e).await;
        assert_eq!((report.created, report.mirrored), (0, 0), "{report:?}");
        assert_eq!(report.failed, 1);
        assert!(record.is_none(), "{record:?}");
        assert_eq!(hits(&seen, "/wrong"), 1);
        let error = report.error.unwrap();
        assert!(error.contains("connection refused"), "{error}");
        assert!(
            error.contains("/wrong") && error.contains("bytes differ"),
            "{error}"
        );
    }

    /// A 404 of the upstream means gone (spec: the upstream is the authority): no mirror is
    /// asked. Nor is one for an entry without a hash to check a mirror's bytes against.
    #[tokio::test]
    async fn a_gone_resource_or_one_without_a_hash_is_never_taken_from_a_mirror() {
        let (base, seen) = fixture().await;
        let h = harvest(true).await;
        let mirror = format!("{base}/right");
        let e = entry(&format!("{base}/gone"), true, &[(&mirror, Some(1))]).await;
        let (report, record) = run(&h, e).await;
        assert_eq!((report.gone, report.mirrored), (1, 0), "{report:?}");
        assert!(record.is_none());
        let e = entry(&format!("{base}/primary"), false, &[(&mirror, Some(1))]).await;
        let (report, record) = run(&h, e).await;
        assert_eq!((report.failed, report.mirrored), (1, 0), "{report:?}");
        assert!(record.is_none());
        assert_eq!(hits(&seen, "/right"), 0);
    }

    /// An entry described in an encoding (spec 7) is verified against the bytes as served,
    /// still encoded, and stored so; a response without that `Content-Encoding` is not what
    /// the entry describes (fetched once more, then quarantined), whatever its bytes.
    #[tokio::test]
    async fn an_encoded_entry_is_verified_and_kept_as_the_encoded_bytes() {
        let (base, seen) = fixture().await;
        let h = harvest(true).await;
        let gz = info_of(GZIPPED).await;
        let described = |loc: String, hash: &str, length| UrlEntry {
            loc,
            md: Some(Md {
                hash: Some(Hashes::parse(&format!("md5:{hash}"), |_| {})),
                length: Some(length),
                encoding: Some("GZIP".into()),
                ..Md::default()
            }),
            ..UrlEntry::default()
        };
        let (report, record) = run(&h, described(format!("{base}/gz"), &gz.md5, gz.length)).await;
        assert_eq!((report.created, report.quarantined), (1, 0), "{report:?}");
        let record = record.expect("stored");
        assert_eq!(record.copy.unwrap().sha256, gz.sha256, "the encoded bytes");
        assert_eq!(record.upstream_meta.encoding.as_deref(), Some("GZIP"));
        // Served identity although described gzip'd: not the described representation,
        // even with the right bytes.
        let (report, record) =
            run(&h, described(format!("{base}/right"), &gz.md5, gz.length)).await;
        assert_eq!((report.created, report.quarantined), (0, 1), "{report:?}");
        assert!(record.is_none());
        assert_eq!(
            hits(&seen, "/right"),
            2,
            "fetched once more before the quarantine"
        );
    }

    /// Mirrors go through the same fetcher and its address guard: an upstream without
    /// `allow_private` never reaches a mirror on a loopback address.
    #[tokio::test]
    async fn the_address_guard_holds_for_mirrors() {
        let (base, seen) = fixture().await;
        let h = harvest(false).await;
        let e = entry(
            "http://primary.invalid/r",
            true,
            &[(&format!("{base}/right"), Some(1))],
        )
        .await;
        let (report, record) = run(&h, e).await;
        assert_eq!((report.failed, report.mirrored), (1, 0), "{report:?}");
        assert!(record.is_none());
        assert_eq!(hits(&seen, "/right"), 0);
        let error = report.error.unwrap();
        assert!(error.contains("address guard"), "{error}");
    }
}
