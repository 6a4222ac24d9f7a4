//! [`Body`]: a response body as a stream of chunks, capped on the bytes actually read (after
//! any inflation), optionally inflated from gzip, holding the request's concurrency permits
//! until it is dropped (so the limits count transfers, not just requests).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::io::{ReaderStream, StreamReader};
use url::Url;

use crate::Error;

type ChunkStream = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>;

/// The concurrency permits of one request (overall and per host, and per host for the
/// whole fleet when fetchers share [`crate::HostLimits`]).
#[derive(Debug)]
pub(crate) struct Permits {
    pub(crate) _host: OwnedSemaphorePermit,
    pub(crate) _shared: Option<OwnedSemaphorePermit>,
    pub(crate) _global: OwnedSemaphorePermit,
}

/// A body's deadline and minimum rate, counted on the time spent waiting for the upstream
/// (from the moment a read finds nothing ready until data comes): a reader that stops
/// reading for a while (backpressure) is not charged for it, an upstream that drips is.
pub(crate) struct Clock {
    /// Most time waited in all (headers included).
    limit: Duration,
    /// Bytes per second at least, on average over the time waited (0: none)...
    min_rate: u64,
    /// ... once more than this was waited.
    grace: Duration,
    /// Waited so far.
    waited: Duration,
    /// Since when the current wait runs.
    since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl Clock {
    /// A clock with `waited` already spent (the wait for the headers).
    pub(crate) fn new(limit: Duration, min_rate: u64, grace: Duration, waited: Duration) -> Clock {
        Clock {
            limit,
            min_rate,
            grace,
            waited,
            since: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// How long the reader may wait in all, having read `read` bytes: the deadline, or less
    /// when the average rate would fall below the minimum.
    fn allowed(&self, read: u64) -> (Duration, bool) {
        if self.min_rate == 0 {
            return (self.limit, false);
        }
        // The average stays at or above `min_rate` while waited <= read / min_rate.
        let by_rate = self
            .grace
            .max(Duration::from_secs_f64(read as f64 / self.min_rate as f64));
        if by_rate < self.limit {
            (by_rate, true)
        } else {
            (self.limit, false)
        }
    }

    /// Data came: the wait ends.
    fn ready(&mut self) {
        if let Some(s) = self.since.take() {
            self.waited += s.elapsed();
        }
    }

    /// Nothing ready: `Err(reason)` when the wait is over its bound, else the timer is armed.
    fn pending(&mut self, cx: &mut Context<'_>, read: u64) -> Result<(), String> {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let (allowed, by_rate) = self.allowed(read);
        let left = allowed.saturating_sub(self.waited);
        let at = since + left;
        if now >= at || {
            self.timer.as_mut().reset(at);
            self.timer.as_mut().poll(cx).is_ready()
        } {
            let waited = self.waited + now.saturating_duration_since(since);
            return Err(if by_rate {
                format!(
                    "transfer slower than the minimum rate of {} bytes/s ({read} bytes in {:.1}s of waiting)",
                    self.min_rate,
                    waited.as_secs_f64()
                )
            } else {
                format!(
                    "not read within its deadline of {} ({read} bytes read)",
                    humanize(self.limit)
                )
            });
        }
        Ok(())
    }
}

/// `90s` → `1m 30s`.
pub(crate) fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, _) if d.subsec_millis() > 0 => format!("{}ms", d.as_millis()),
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// A response body: `Stream<Item = Result<Bytes, Error>>`, or an `AsyncRead` through
/// [`Body::into_async_read`]. Fails with [`Error::TooLarge`] as soon as more than the cap has
/// been read, with [`Error::Deadline`] past its deadline or below its minimum rate; ends
/// after the first error.
pub struct Body {
    inner: Option<ChunkStream>,
    url: Url,
    read: u64,
    limit: u64,
    clock: Option<Clock>,
    _permits: Option<Permits>,
    /// The fetcher's byte counter, added to when the body is dropped.
    counted: Option<Arc<AtomicU64>>,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("url", &self.url.as_str())
            .field("read", &self.read)
            .field("limit", &self.limit)
            .field("done", &self.inner.is_none())
            .finish()
    }
}

/// Counts and caps the bytes of a chunk stream.
struct Capped<S> {
    inner: S,
    url: Url,
    read: u64,
    limit: u64,
    done: bool,
}

impl<S: Stream<Item = Result<Bytes, Error>> + Unpin> Stream for Capped<S> {
    type Item = Result<Bytes, Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.read += b.len() as u64;
                if self.read > self.limit {
                    self.done = true;
                    return Poll::Ready(Some(Err(Error::TooLarge {
                        url: self.url.clone(),
                        limit: self.limit,
                    })));
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Body {
    /// An empty body (a 304, or the rest of a body already read whole).
    pub(crate) fn empty(url: Url) -> Body {
        Body {
            inner: None,
            url,
            read: 0,
            limit: 0,
            clock: None,
            _permits: None,
            counted: None,
        }
    }

    /// Wraps the body of a response. With `inflate_gzip`, waits for the first two bytes and,
    /// if they are the gzip magic number, inflates; the cap then applies to both the
    /// compressed bytes and the inflated bytes.
    pub(crate) async fn new(
        url: Url,
        raw: ChunkStream,
        limit: u64,
        inflate_gzip: bool,
        permits: Option<Permits>,
        clock: Option<Clock>,
    ) -> Result<Body, Error> {
        let mut raw = raw;
        let stream: ChunkStream = if inflate_gzip {
            // Read just enough to see the magic number; chunks read are put back in front.
            let mut head: Vec<Bytes> = Vec::new();
            let mut have = 0usize;
            let mut ended = false;
            while have < 2 {
                match raw.next().await {
                    Some(Ok(b)) => {
                        have += b.len();
                        head.push(b);
                    }
                    Some(Err(e)) => return Err(e),
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
            let mut first = head.iter().flat_map(|b| b.iter().copied());
            let gzip = first.next() == Some(0x1f) && first.next() == Some(0x8b);
            let replay = futures::stream::iter(head.into_iter().map(Ok));
            let whole: ChunkStream = if ended {
                Box::pin(replay)
            } else {
                Box::pin(replay.chain(raw))
            };
            if gzip {
                let compressed = Capped {
                    inner: whole,
                    url: url.clone(),
                    read: 0,
                    limit,
                    done: false,
                };
                let reader = StreamReader::new(compressed.map_err(io::Error::other));
                let mut dec = async_compression::tokio::bufread::GzipDecoder::new(reader);
                dec.multiple_members(true);
                let u = url.clone();
                Box::pin(ReaderStream::new(dec).map_err(move |e| Error::from_io(&u, e)))
            } else {
                whole
            }
        } else {
            raw
        };
        Ok(Body {
            inner: Some(stream),
            url,
            read: 0,
            limit,
            clock,
            _permits: permits,
            counted: None,
        })
    }

    /// Adds the bytes this body hands out to `total` (when it is dropped).
    pub(crate) fn counting(mut self, total: Arc<AtomicU64>) -> Body {
        self.counted = Some(total);
        self
    }

    /// Bytes handed out so far (after inflation).
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// The URL the body comes from.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Reads the whole body into memory. Meant for small documents: the cap given to the
    /// request bounds the memory used.
    pub async fn bytes(mut self) -> Result<Bytes, Error> {
        let mut buf = BytesMut::new();
        while let Some(chunk) = self.next().await {
            buf.extend_from_slice(&chunk?);
        }
        Ok(buf.freeze())
    }

    /// The body as `AsyncRead` (for `rsagg_sitemap::DocumentReader`). Errors come out as
    /// `io::Error`s carrying the crate [`Error`] (recover it with [`Error::from_io`]).
    pub fn into_async_read(self) -> impl AsyncRead + Send + Unpin + 'static {
        StreamReader::new(self.map_err(io::Error::other))
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(total) = &self.counted {
            total.fetch_add(self.read, Ordering::Relaxed);
        }
    }
}

impl Stream for Body {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = inner.as_mut().poll_next(cx);
        let read = self.read;
        if let Some(clock) = self.clock.as_mut() {
            if polled.is_pending() {
                if let Err(reason) = clock.pending(cx, read) {
                    self.inner = None;
                    self._permits = None;
                    return Poll::Ready(Some(Err(Error::Deadline {
                        url: self.url.clone(),
                        reason,
                    })));
                }
            } else {
                clock.ready();
            }
        }
        match polled {
            Poll::Ready(Some(Ok(b))) => {
                self.read += b.len() as u64;
                if self.read > self.limit {
                    self.inner = None;
                    self._permits = None;
                    return Poll::Ready(Some(Err(Error::TooLarge {
                        url: self.url.clone(),
                        limit: self.limit,
                    })));
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.inner = None;
                self._permits = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                // Finished: release the permits now rather than when the caller drops us.
                self.inner = None;
                self._permits = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
