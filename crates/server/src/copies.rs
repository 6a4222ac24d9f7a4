//! Resource copies, found through the published Resource List.
//!
//! A copy is served only when the Resource List that was published last lists it, with the
//! bytes that list describes: the server shows exactly what was published, and a resource
//! deleted upstream (no longer listed) answers 404, never stale bytes, even though its blob
//! stays in the store for a while. The state database is never read (a reader must not
//! fence the writer, and the published documents are the contract with Destinations).
//!
//! The list is cut into parts by hash slot (`rsagg-publish`'s `resourcelist`), so the part
//! listing a resource follows from its upstream and URI alone: one part is read and parsed,
//! never the whole list. Parts are immutable (named by generation), so a parsed part is kept
//! in a small cache as long as it is used; the publisher's metadata naming the current parts
//! is re-read at most once a second, so a new publish shows within a second.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use rsagg_layout::meta::ResourceListMeta as Published;
use rsagg_layout::paths::{RESOURCE_LIST_META as META, part_of, part_path, pending_path};
use rsagg_layout::uris::{own_uri, parse_own_path};
use rsagg_model::{HashAlgorithm, Mode, W3cDateTime};
use rsagg_store::{Blobs, slot_of};
use tokio::sync::OnceCell;

use crate::Error;
use crate::collection::Collection;
use crate::http::{
    Ranged, Validators, accept_ranges, partial, range_not_satisfiable, store_failed, system_time,
    text,
};

/// Parsed parts kept. A part lists up to ~40,000 resources (a few MB parsed), and requests
/// for copies cluster on few parts only when clients walk a list in order; eight bounds
/// memory while serving such walks from memory.
pub(crate) const PARTS_CACHED: usize = 8;
/// The version of the metadata object a cached copy was read at (entity tag, modification
/// time, size), or `None` when there was none.
pub(crate) type MetaVersion = Option<(Option<String>, chrono::DateTime<chrono::Utc>, u64)>;

/// What the published Resource List says of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyInfo {
    /// SHA-256 (lowercase hex): the blob's address and the copy's entity tag.
    pub sha256: String,
    /// `rs:md length`.
    pub length: Option<u64>,
    /// `rs:md type`.
    pub mime_type: Option<String>,
    /// `rs:md encoding`: the content coding the stored bytes are in (a copy kept as its
    /// upstream served and described it), sent as `Content-Encoding` (spec 7).
    pub encoding: Option<String>,
    /// `lastmod`: when rsagg's copy last changed.
    pub lastmod: Option<W3cDateTime>,
}

/// One parsed part: `<loc>` → what it lists (`None`: a pending part's deletion).
type PartIndex = HashMap<String, Option<CopyInfo>>;
/// A cached part: parsed once, by the first request that needs it (later ones wait for it).
type CachedPart = Arc<OnceCell<Arc<PartIndex>>>;

/// Finding copies of one collection.
#[derive(Debug)]
pub(crate) struct Copies {
    objects: Arc<dyn ObjectStore>,
    base_url: String,
    meta: tokio::sync::Mutex<Option<(MetaVersion, Arc<Published>)>>,
    /// Least recently used first.
    parts: Mutex<VecDeque<(String, CachedPart)>>,
}

impl Copies {
    /// Copies of `c`.
    pub fn new(c: &Collection) -> Copies {
        Copies {
            objects: c.objects().clone(),
            base_url: c.base_url().to_owned(),
            meta: tokio::sync::Mutex::new(None),
            parts: Mutex::new(VecDeque::new()),
        }
    }

    /// What the published Resource List says of the copy at `rest` (the request path after
    /// the base path, `r/{upstream}/{scheme}/…`); `None` when the path is not one of rsagg's
    /// URIs for a copy or the list does not name it.
    pub async fn lookup(&self, rest: &str) -> Result<Option<CopyInfo>, Error> {
        let Some((upstream, uri)) = parse_own_path(rest) else {
            return Ok(None);
        };
        // The `<loc>` as the publisher wrote it (`own_uri` is a function of upstream and
        // URI), whatever escaping case the client used.
        let Some(loc) = own_uri(&self.base_url, &upstream, &uri) else {
            return Ok(None);
        };
        let meta = self.meta().await?;
        self.find(&meta, &upstream, &uri, &loc).await
    }

    /// The copy at `loc` in the part of `meta` that holds (upstream, URI).
    async fn find(
        &self,
        meta: &Published,
        upstream: &str,
        uri: &str,
        loc: &str,
    ) -> Result<Option<CopyInfo>, Error> {
        let slot = slot_of(upstream, uri);
        // On the interval, what changed since the snapshot is in a pending part, read
        // first: a copy a Change List names is served as that list describes it.
        let m = meta.pending.len();
        if m > 0
            && let Some((name, _)) = meta
                .pending
                .get(part_of(slot, m))
                .filter(|(name, _)| !name.is_empty())
            && let Some(found) = self.part(name).await?.get(loc)
        {
            return Ok(found.clone());
        }
        let n = meta.parts.len();
        if n == 0 {
            return Ok(None);
        }
        let k = part_of(slot, n);
        let Some((name, _)) = meta.parts.get(k).filter(|(name, _)| !name.is_empty()) else {
            return Ok(None);
        };
        Ok(self.part(name).await?.get(loc).cloned().flatten())
    }

    /// The publisher's metadata as it is now. Every lookup asks the store for the metadata
    /// object's version (a HEAD) and reads it again only when it changed: the publisher
    /// writes it after the parts and before the Change Lists, so a Destination that read a
    /// Change List naming a new version of a copy always gets that version (a time-based
    /// cache would serve the previous bytes for a while). Before the first publish there is
    /// no metadata: no parts, no copies.
    async fn meta(&self) -> Result<Arc<Published>, Error> {
        let path = Path::from(META);
        let store_err = |source| Error::ObjectStore {
            path: path.to_string(),
            source,
        };
        let version: MetaVersion = match self.objects.head(&path).await {
            Ok(m) => Some((m.e_tag, m.last_modified, m.size)),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(source) => return Err(store_err(source)),
        };
        let mut cached = self.meta.lock().await;
        if let Some((v, meta)) = cached.as_ref()
            && *v == version
        {
            return Ok(meta.clone());
        }
        let meta = match (&version, self.objects.get(&path).await) {
            (None, _) | (_, Err(object_store::Error::NotFound { .. })) => Published::default(),
            (_, Ok(r)) => {
                let bytes = r.bytes().await.map_err(store_err)?;
                serde_json::from_slice::<Published>(&bytes).map_err(|source| Error::Metadata {
                    path: path.to_string(),
                    source,
                })?
            }
            (_, Err(source)) => return Err(store_err(source)),
        };
        // Read after the HEAD, so possibly newer than `version`: the next lookup then sees
        // another version and reads it again; never older.
        let meta = Arc::new(meta);
        *cached = Some((version, meta.clone()));
        Ok(meta)
    }

    /// The parsed part `name` (under `resourcelist/`), from the cache or the store.
    async fn part(&self, name: &str) -> Result<Arc<PartIndex>, Error> {
        let cell = {
            let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
            let cell = match parts.iter().position(|(n, _)| n == name) {
                Some(i) => parts.remove(i).map(|(_, c)| c).unwrap_or_default(),
                None => CachedPart::default(),
            };
            parts.push_back((name.to_owned(), cell.clone()));
            while parts.len() > PARTS_CACHED {
                parts.pop_front();
            }
            cell
        };
        // A failed read leaves the cell empty: the next request tries again.
        let index = cell.get_or_try_init(|| self.read_part(name)).await?;
        Ok(index.clone())
    }

    async fn read_part(&self, name: &str) -> Result<Arc<PartIndex>, Error> {
        // Pending parts (the interval's changes since its snapshot) are kept apart.
        let path = Path::from(match name.starts_with("pending-") {
            true => pending_path(name),
            false => part_path(name),
        });
        let os_err = |source| Error::ObjectStore {
            path: path.to_string(),
            source,
        };
        let bytes = self
            .objects
            .get(&path)
            .await
            .map_err(os_err)?
            .bytes()
            .await
            .map_err(os_err)?;
        let source = path.to_string();
        // Parsing tens of thousands of entries is CPU work: off the async workers.
        let parsed = tokio::task::spawn_blocking(move || index_part(&bytes, &source)).await;
        match parsed {
            Ok(index) => Ok(Arc::new(index?)),
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(source) => Err(Error::Task {
                    what: format!("parsing {path}"),
                    source,
                }),
            },
        }
    }

    /// Parts cached, least recently used first (for tests).
    #[cfg(test)]
    fn cached(&self) -> Vec<String> {
        let parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        parts.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// Indexes a Resource List part by `<loc>`. Entries without a well-formed SHA-256 cannot be
/// served (the hash is the blob's address) and are left out. Read leniently: the document
/// is rsagg's own, checked strictly when written; here only the entries matter.
fn index_part(xml: &[u8], source: &str) -> Result<PartIndex, Error> {
    let err = |e| Error::Document {
        path: source.to_owned(),
        source: e,
    };
    let opts = rsagg_sitemap::ReadOptions::new(Mode::Lenient, source);
    let mut reader = rsagg_sitemap::SyncReader::open(xml, opts).map_err(err)?;
    let mut index = PartIndex::new();
    while let Some(e) = reader.next_entry().map_err(err)? {
        let Some(md) = e.md else { continue };
        if md.change == Some(rsagg_model::Change::Deleted) {
            index.insert(e.loc, None);
            continue;
        }
        let Some(sha256) = md
            .hash
            .as_ref()
            .and_then(|h| h.get(&HashAlgorithm::Sha256))
            .filter(|h| h.is_well_formed())
            .map(|h| h.digest.to_ascii_lowercase())
        else {
            continue;
        };
        index.insert(
            e.loc,
            Some(CopyInfo {
                sha256,
                length: md.length,
                mime_type: md.mime_type,
                encoding: md.encoding,
                lastmod: e.lastmod,
            }),
        );
    }
    Ok(index)
}

/// Answers GET or HEAD (`head`) of a copy described by `info`: the blob's bytes with the
/// listed type, `ETag` = its SHA-256 (the content address: equal tags, equal bytes), the
/// listed `lastmod` as `Last-Modified`, and `link` (rel="resourcesync" to the collection's
/// Capability List, spec 6.3.3) so a client holding only the copy finds the collection.
/// A copy the list describes in an `encoding` is sent with it as `Content-Encoding`: the
/// blob holds the encoded bytes, which the list's hash and length are of (spec 7).
/// A single `Range` is answered `206` with only those bytes (`416` outside the blob).
pub(crate) async fn serve_copy(
    objects: &Arc<dyn ObjectStore>,
    info: &CopyInfo,
    link: &HeaderValue,
    head: bool,
    request: &HeaderMap,
) -> Response {
    let v = Validators {
        etag: format!("\"{}\"", info.sha256),
        last_modified: info.lastmod.as_ref().and_then(system_time),
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::LINK, link.clone());
    if v.not_modified(request) {
        return v.not_modified_response(headers);
    }
    let path = Blobs::path(&info.sha256);
    let content_type = info
        .mime_type
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    if let Some(coding) = info
        .encoding
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        headers.insert(header::CONTENT_ENCODING, coding);
    }
    v.apply(&mut headers);
    // A range is resolved against the blob's size (a HEAD), then read as a ranged GET. The
    // blob is content-addressed: its bytes cannot change between the two.
    let ranged = !head && request.contains_key(header::RANGE);
    let (size, body) = if head || ranged {
        let size = match objects.head(&path).await {
            Ok(meta) => meta.size,
            Err(e) => return blob_failed(&path, e),
        };
        match v.range(request, size) {
            _ if head => (size, Body::empty()),
            Ranged::Full => match objects.get(&path).await {
                Ok(r) => (r.meta.size, Body::from_stream(r.into_stream())),
                Err(e) => return blob_failed(&path, e),
            },
            Ranged::Unsatisfiable => return range_not_satisfiable(size),
            Ranged::Part(range) => {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range.clone())),
                    ..GetOptions::default()
                };
                return match objects.get_opts(&path, options).await {
                    Ok(r) => partial(headers, &range, size, Body::from_stream(r.into_stream())),
                    Err(e) => blob_failed(&path, e),
                };
            }
        }
    } else {
        match objects.get(&path).await {
            Ok(r) => (r.meta.size, Body::from_stream(r.into_stream())),
            Err(e) => return blob_failed(&path, e),
        }
    };
    if info.length.is_some_and(|l| l != size) {
        tracing::warn!(%path, listed = ?info.length, stored = size, "blob length differs from the list");
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    accept_ranges(&mut headers);
    let mut r = Response::new(body);
    *r.headers_mut() = headers;
    r
}

fn blob_failed(path: &Path, source: object_store::Error) -> Response {
    let missing = matches!(source, object_store::Error::NotFound { .. });
    let e = Error::ObjectStore {
        path: path.to_string(),
        source,
    };
    if missing {
        // The published list names this blob, and blobs a list names are kept: a missing
        // one is a broken store, not a missing resource (404 would tell Destinations the
        // resource is gone).
        tracing::error!(error = %e, "a listed copy is missing from the store");
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the copy is missing from the store\n",
        )
    } else {
        store_failed("reading a copy", &e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use rsagg_model::{HashValue, Hashes, Md, Root, UrlEntry};

    const BASE: &str = "https://agg.example.org/maps/";

    fn entry(i: usize, sha256: Option<String>) -> UrlEntry {
        UrlEntry {
            loc: own_uri(BASE, "up", &format!("http://up.example/r/{i}")).unwrap(),
            lastmod: Some(W3cDateTime::parse("2025-01-02T03:04:05Z").unwrap().value),
            md: Some(Md {
                hash: sha256.map(|d| {
                    Hashes(vec![HashValue {
                        algorithm: HashAlgorithm::Sha256,
                        digest: d,
                    }])
                }),
                length: Some(i as u64),
                mime_type: Some("text/plain".into()),
                ..Md::default()
            }),
            ..UrlEntry::default()
        }
    }

    fn part(entries: &[UrlEntry]) -> Vec<u8> {
        let header = rsagg_model::Header::new(Root::Urlset, rsagg_model::Capability::ResourceList);
        let mut xml = Vec::new();
        rsagg_sitemap::writer::encode_header(&header, &mut xml);
        for e in entries {
            rsagg_sitemap::writer::encode_entry(Root::Urlset, e, &mut xml);
        }
        xml.extend_from_slice(b"</urlset>\n");
        xml
    }

    #[test]
    fn parts_are_indexed_by_loc_and_need_a_sha256() {
        let xml = part(&[
            entry(1, Some("AB".repeat(32))),
            entry(2, None),
            entry(3, Some("zz".into())),
        ]);
        let index = index_part(&xml, "p").unwrap();
        assert_eq!(index.len(), 1, "{index:?}");
        let info = index[&entry(1, None).loc].as_ref().expect("listed");
        assert_eq!(info.sha256, "ab".repeat(32));
        assert_eq!(
            (info.length, info.mime_type.as_deref()),
            (Some(1), Some("text/plain"))
        );
        assert!(index_part(b"<notxml", "p").is_err());
    }

    /// A store with `parts` one-entry parts, published as the publisher would (metadata
    /// naming them, each entry in the part its slot says), and the copy path listed in
    /// each part, by part.
    async fn published(parts: usize) -> (Arc<dyn ObjectStore>, Vec<String>) {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut by_part: Vec<Vec<UrlEntry>> = vec![Vec::new(); parts];
        let mut rests = vec![String::new(); parts];
        let mut i = 0;
        while by_part.iter().any(Vec::is_empty) {
            let uri = format!("http://up.example/r/{i}");
            let k = part_of(slot_of("up", &uri), parts);
            if by_part[k].is_empty() {
                by_part[k].push(entry(i, Some(format!("{i:064x}"))));
                rests[k] = format!("r/up/http/up.example/r/{i}");
            }
            i += 1;
        }
        let mut meta = Published::default();
        for (k, entries) in by_part.iter().enumerate() {
            let name = format!("part-{k:05}-g1.xml");
            objects
                .put(
                    &Path::from(format!("resourcelist/{name}")),
                    part(entries).into(),
                )
                .await
                .unwrap();
            meta.parts.push((name, 1));
        }
        objects
            .put(&Path::from(META), serde_json::to_vec(&meta).unwrap().into())
            .await
            .unwrap();
        (objects, rests)
    }

    #[tokio::test]
    async fn lookups_read_one_part_and_the_cache_stays_bounded() {
        let (objects, rests) = published(PARTS_CACHED + 4).await;
        let c = Collection::new("maps", BASE, objects).unwrap();
        let copies = Copies::new(&c);
        let first = copies.lookup(&rests[0]).await.unwrap().unwrap();
        assert_eq!(copies.cached().len(), 1, "one part read for one copy");
        assert_eq!(first.lastmod.unwrap().to_string(), "2025-01-02T03:04:05Z");
        for rest in &rests {
            assert!(copies.lookup(rest).await.unwrap().is_some(), "{rest}");
        }
        let cached = copies.cached();
        assert_eq!(cached.len(), PARTS_CACHED);
        // Most recently used last: the last parts asked for are the ones kept.
        assert_eq!(
            cached.last().unwrap(),
            &format!("part-{:05}-g1.xml", rests.len() - 1)
        );
        // A hit moves its part to the back.
        copies
            .lookup(&rests[rests.len() - PARTS_CACHED])
            .await
            .unwrap();
        assert_eq!(
            copies.cached().last().unwrap(),
            &format!("part-{:05}-g1.xml", rests.len() - PARTS_CACHED)
        );
        assert!(
            copies
                .lookup("r/up/http/up.example/r/not-listed")
                .await
                .unwrap()
                .is_none()
        );
        assert!(copies.lookup("r/up").await.unwrap().is_none());
    }

    /// On the interval (`publish.resourcelist = "interval"`) the snapshot's parts say what
    /// was listed at its `at`; a pending part, read first, says what changed since: an
    /// update is served with its new address, a deletion answers no copy, and a resource
    /// no pending part names is found in the snapshot.
    #[tokio::test]
    async fn a_pending_part_is_read_before_the_snapshot() {
        let (objects, rests) = published(2).await;
        let path = |rest: &str| rest.rsplit_once("/r/").unwrap().1.parse::<usize>().unwrap();
        let (updated, deleted) = (path(&rests[0]), path(&rests[1]));
        let mut gone = entry(deleted, None);
        gone.md = Some(Md {
            change: Some(rsagg_model::Change::Deleted),
            ..Md::default()
        });
        let created = 100_000;
        let pending = part(&[
            entry(updated, Some("cd".repeat(32))),
            gone,
            entry(created, Some("ef".repeat(32))),
        ]);
        let name = "pending-00000-g2.xml";
        objects
            .put(&Path::from(pending_path(name)), pending.into())
            .await
            .unwrap();
        let mut meta: Published = serde_json::from_slice(
            &objects
                .get(&Path::from(META))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
        )
        .unwrap();
        let c = Collection::new("maps", BASE, objects.clone()).unwrap();
        let before = Copies::new(&c);
        assert_eq!(
            before.lookup(&rests[0]).await.unwrap().unwrap().sha256,
            format!("{updated:064x}")
        );
        meta.pending = vec![(name.into(), 3)];
        objects
            .put(&Path::from(META), serde_json::to_vec(&meta).unwrap().into())
            .await
            .unwrap();
        let copies = Copies::new(&c);
        let got = copies.lookup(&rests[0]).await.unwrap().unwrap();
        assert_eq!(got.sha256, "cd".repeat(32), "the update since the snapshot");
        assert!(
            copies.lookup(&rests[1]).await.unwrap().is_none(),
            "deleted since"
        );
        let new = format!("r/up/http/up.example/r/{created}");
        assert_eq!(
            copies.lookup(&new).await.unwrap().unwrap().sha256,
            "ef".repeat(32)
        );
    }

    #[tokio::test]
    async fn nothing_published_means_no_copies_and_broken_metadata_is_an_error() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = Collection::new("maps", BASE, objects.clone()).unwrap();
        let copies = Copies::new(&c);
        assert!(
            copies
                .lookup("r/up/http/up.example/r/1")
                .await
                .unwrap()
                .is_none()
        );
        objects
            .put(&Path::from(META), b"{not json".to_vec().into())
            .await
            .unwrap();
        let copies = Copies::new(&c);
        let e = copies.lookup("r/up/http/up.example/r/1").await.unwrap_err();
        assert!(matches!(e, Error::Metadata { .. }), "{e}");
    }
}
