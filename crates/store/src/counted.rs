//! Object-store requests counted by kind, with the bytes they moved.
//!
//! In the cloud requests are money (a GET, a PUT, a LIST page each cost), so a run reports
//! what it asked of its store: [`CountedStore`] wraps the store a location opens, and every
//! reader and writer of that location (blobs, documents, the state database, the outbox)
//! goes through it. The counts are per request as a store bills them: a multipart upload is
//! its create, each part and its completion; a listing is one request per page of
//! [`LIST_PAGE`] entries (as S3 pages); a batch delete counts its objects.
//!
//! Every GET and PUT is also a `trace` event of target `rsagg_store::requests` (path and
//! bytes), so `RSAGG_LOG=rsagg_store::requests=trace` (see `rsagg --help`) shows which objects a run's reads and
//! writes went to when the counts say it asked for more than expected.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
    UploadPart,
};
use serde::{Deserialize, Serialize};

use crate::health::StoreHealth;

/// Entries one LIST request returns at most (S3's page size).
pub const LIST_PAGE: u64 = 1000;

/// Requests by kind and bytes moved, since the store was opened.
#[derive(Debug, Default)]
pub struct StoreCounters {
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    head: AtomicU64,
    copy: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// A snapshot of [`StoreCounters`] (in the run report and on `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreRequests {
    /// GET requests (whole objects and ranges).
    pub get: u64,
    /// PUT requests (single puts, multipart create, parts and completion).
    pub put: u64,
    /// LIST requests (one per page of [`LIST_PAGE`] entries).
    pub list: u64,
    /// Objects deleted (or asked to be).
    pub delete: u64,
    /// HEAD requests.
    pub head: u64,
    /// COPY and rename requests.
    pub copy: u64,
    /// Bytes read by GETs.
    pub bytes_read: u64,
    /// Bytes written by PUTs.
    pub bytes_written: u64,
}

impl StoreRequests {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.get + self.put + self.list + self.delete + self.head + self.copy
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &StoreRequests) -> StoreRequests {
        StoreRequests {
            get: self.get - earlier.get,
            put: self.put - earlier.put,
            list: self.list - earlier.list,
            delete: self.delete - earlier.delete,
            head: self.head - earlier.head,
            copy: self.copy - earlier.copy,
            bytes_read: self.bytes_read - earlier.bytes_read,
            bytes_written: self.bytes_written - earlier.bytes_written,
        }
    }
}

impl StoreCounters {
    /// The counts now.
    pub fn snapshot(&self) -> StoreRequests {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreRequests {
            get: l(&self.get),
            put: l(&self.put),
            list: l(&self.list),
            delete: l(&self.delete),
            head: l(&self.head),
            copy: l(&self.copy),
            bytes_read: l(&self.bytes_read),
            bytes_written: l(&self.bytes_written),
        }
    }

    fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

/// `inner`, counting every request made through it into `counters`, and reporting each
/// outcome to the store's [`StoreHealth`] (which refuses every request once it tripped).
#[derive(Debug)]
pub struct CountedStore {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<StoreCounters>,
    health: Arc<StoreHealth>,
}

impl CountedStore {
    /// Wraps `inner`, without a breaker (one that never trips).
    pub fn new(inner: Arc<dyn ObjectStore>, counters: Arc<StoreCounters>) -> Self {
        let health = StoreHealth::new(inner.to_string(), 0);
        CountedStore::with_health(inner, counters, health)
    }

    /// Wraps `inner`, reporting to `health`.
    pub fn with_health(
        inner: Arc<dyn ObjectStore>,
        counters: Arc<StoreCounters>,
        health: Arc<StoreHealth>,
    ) -> Self {
        CountedStore {
            inner,
            counters,
            health,
        }
    }

    /// `r`, observed by the breaker.
    fn seen<T>(&self, r: Result<T>) -> Result<T> {
        self.health.observe(&r);
        r
    }

    /// A stream whose errors the breaker observes (and which fails at once when it tripped).
    fn watched<T: Send + 'static>(
        &self,
        s: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        if let Err(e) = self.health.check() {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        let health = self.health.clone();
        let mut first = true;
        s.inspect(move |r| {
            // An item is an answer; only its errors and the first item say something about
            // the store's health (a long listing is not a run of successes).
            if first || r.is_err() {
                health.observe(r);
            }
            first = false;
        })
        .boxed()
    }

    /// Counts a listing's pages as its entries go by.
    fn counted_list(
        &self,
        s: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let counters = self.counters.clone();
        StoreCounters::add(&counters.list, 1);
        let mut seen = 0u64;
        s.inspect_ok(move |_| {
            seen += 1;
            // The first page is counted up front; every further page when it begins.
            if seen > 1 && (seen - 1).is_multiple_of(LIST_PAGE) {
                StoreCounters::add(&counters.list, 1);
            }
        })
        .boxed()
    }
}

impl fmt::Display for CountedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counted({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for CountedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.health.check_write()?;
        let bytes = payload.content_length();
        let r = self.inner.put_opts(location, payload, opts).await;
        // A backend that cannot take the options answers at once, without a request
        // (`LocalFileSystem` and attributes: slatedb then retries without them); such an
        // attempt is not a request and is not counted (it was counted twice).
        if !matches!(
            r,
            Err(object_store::Error::NotSupported { .. }
                | object_store::Error::NotImplemented { .. })
        ) {
            StoreCounters::add(&self.counters.put, 1);
            StoreCounters::add(&self.counters.bytes_written, bytes as u64);
            tracing::trace!(target: "rsagg_store::requests", kind = "PUT", path = %location, bytes);
        }
        self.seen(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        StoreCounters::add(&self.counters.put, 1);
        self.health.check_write()?;
        let upload = self.seen(self.inner.put_multipart_opts(location, opts).await)?;
        Ok(Box::new(CountedUpload {
            upload,
            counters: self.counters.clone(),
            health: self.health.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            StoreCounters::add(&self.counters.head, 1);
            self.health.check()?;
            return self.seen(self.inner.get_opts(location, options).await);
        }
        StoreCounters::add(&self.counters.get, 1);
        self.health.check()?;
        let r = self.seen(self.inner.get_opts(location, options).await)?;
        tracing::trace!(target: "rsagg_store::requests", kind = "GET", path = %location, bytes = r.range.end - r.range.start);
        let payload = match r.payload {
            GetResultPayload::File(file, path) => {
                // Read as a file by the caller: counted as the range it will read.
                StoreCounters::add(&self.counters.bytes_read, r.range.end - r.range.start);
                GetResultPayload::File(file, path)
            }
            GetResultPayload::Stream(s) => {
                let counters = self.counters.clone();
                let health = self.health.clone();
                GetResultPayload::Stream(
                    s.inspect(move |r| match r {
                        Ok(b) => StoreCounters::add(&counters.bytes_read, b.len() as u64),
                        Err(_) => health.observe(r),
                    })
                    .boxed(),
                )
            }
        };
        Ok(GetResult { payload, ..r })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        StoreCounters::add(&self.counters.get, ranges.len() as u64);
        self.health.check()?;
        let out = self.seen(self.inner.get_ranges(location, ranges).await)?;
        let n: usize = out.iter().map(Bytes::len).sum();
        tracing::trace!(target: "rsagg_store::requests", kind = "GET", path = %location, ranges = ranges.len(), bytes = n);
        StoreCounters::add(&self.counters.bytes_read, n as u64);
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = self.counters.clone();
        // Each deletion is a write: refused one by one once the writer is fenced out (a
        // collection started before goes no further).
        let health = self.health.clone();
        let counted = locations
            .map(move |r| r.and_then(|p| health.check_write().map(|()| p)))
            .inspect_ok(move |_| StoreCounters::add(&counters.delete, 1))
            .boxed();
        self.watched(self.inner.delete_stream(counted))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.watched(self.counted_list(self.inner.list(prefix)))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.watched(self.counted_list(self.inner.list_with_offset(prefix, offset)))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.health.check()?;
        let r = self.seen(self.inner.list_with_delimiter(prefix).await)?;
        let entries = (r.objects.len() + r.common_prefixes.len()) as u64;
        StoreCounters::add(&self.counters.list, entries.div_ceil(LIST_PAGE).max(1));
        Ok(r)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        StoreCounters::add(&self.counters.copy, 1);
        self.health.check_write()?;
        self.seen(self.inner.copy_opts(from, to, options).await)
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        StoreCounters::add(&self.counters.copy, 1);
        self.health.check_write()?;
        self.seen(self.inner.rename_opts(from, to, options).await)
    }
}

/// A multipart upload whose parts and completion are counted.
#[derive(Debug)]
struct CountedUpload {
    upload: Box<dyn MultipartUpload>,
    counters: Arc<StoreCounters>,
    health: Arc<StoreHealth>,
}

#[async_trait]
impl MultipartUpload for CountedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        StoreCounters::add(&self.counters.put, 1);
        StoreCounters::add(&self.counters.bytes_written, data.content_length() as u64);
        if let Err(e) = self.health.check_write() {
            return Box::pin(async move { Err(e) });
        }
        let part = self.upload.put_part(data);
        let health = self.health.clone();
        Box::pin(async move {
            let r = part.await;
            health.observe(&r);
            r
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        StoreCounters::add(&self.counters.put, 1);
        self.health.check_write()?;
        let r = self.upload.complete().await;
        self.health.observe(&r);
        r
    }

    async fn abort(&mut self) -> Result<()> {
        StoreCounters::add(&self.counters.delete, 1);
        // An abort is cleanup: it goes out even after a trip (it may well fail then).
        self.upload.abort().await
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, WriteMultipart};

    use super::*;

    #[tokio::test]
    async fn every_kind_of_request_is_counted_with_its_bytes() {
        let counters = Arc::new(StoreCounters::default());
        let store = CountedStore::new(Arc::new(InMemory::new()), counters.clone());
        for i in 0..1500 {
            store
                .put(&Path::from(format!("d/{i:04}")), b"abcd".to_vec().into())
                .await
                .unwrap();
        }
        let got = store.get(&Path::from("d/0001")).await.unwrap();
        assert_eq!(got.bytes().await.unwrap().len(), 4);
        store.head(&Path::from("d/0002")).await.unwrap();
        let listed: Vec<_> = store
            .list(Some(&Path::from("d")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1500);
        store.delete(&Path::from("d/0003")).await.unwrap();
        store
            .copy(&Path::from("d/0004"), &Path::from("e/0004"))
            .await
            .unwrap();
        let mut w = WriteMultipart::new(store.put_multipart(&Path::from("big")).await.unwrap());
        w.write(&[1u8; 100]);
        w.finish().await.unwrap();
        let s = counters.snapshot();
        assert_eq!(
            (s.get, s.head, s.list, s.delete, s.copy),
            (1, 1, 2, 1, 1),
            "{s:?}"
        );
        // 1500 puts, then the multipart: create, one part, completion.
        assert_eq!(s.put, 1500 + 3, "{s:?}");
        assert_eq!(s.bytes_written, 1500 * 4 + 100);
        assert_eq!(s.bytes_read, 4);
        assert_eq!(s.total(), 1 + 1 + 2 + 1 + 1 + 1503);
        let later = counters.snapshot();
        assert_eq!(later.since(&s), StoreRequests::default());
    }

    #[tokio::test]
    async fn a_put_the_backend_refuses_without_a_request_is_not_counted() {
        // `LocalFileSystem` takes no attributes: slatedb's conditional PUTs carry one, are
        // refused at once and sent again without it. One request, counted once.
        let dir = tempfile::tempdir().unwrap();
        let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let counters = Arc::new(StoreCounters::default());
        let store = CountedStore::new(Arc::new(local), counters.clone());
        let path = Path::from("m/1");
        let with_attributes = PutOptions {
            mode: object_store::PutMode::Create,
            attributes: object_store::Attributes::from_iter([(
                object_store::Attribute::Metadata("id".into()),
                "x",
            )]),
            ..PutOptions::default()
        };
        let refused = store
            .put_opts(&path, b"abc".to_vec().into(), with_attributes)
            .await;
        assert!(
            matches!(
                refused,
                Err(object_store::Error::NotImplemented { .. })
                    | Err(object_store::Error::NotSupported { .. })
            ),
            "{refused:?}"
        );
        store
            .put_opts(
                &path,
                b"abc".to_vec().into(),
                object_store::PutMode::Create.into(),
            )
            .await
            .unwrap();
        let s = counters.snapshot();
        assert_eq!((s.put, s.bytes_written), (1, 3), "{s:?}");
    }
}
