//! The total bound on request body bytes a listener holds at once
//! (`--max-inflight-body-bytes`, [`Limits::max_inflight_body_bytes`]).
//!
//! Every route that reads a body caps it (the hub at 50 MiB, the WebSub callbacks at
//! 10 MiB), but a cap per request is no bound on the process: 1,024 connections each
//! sending a body just under the hub's cap could make it hold 50 GiB. So every listener
//! keeps one budget of bytes (a semaphore whose permits are bytes) that every request
//! body draws from *as it is read*:
//!
//! - A body with a declared `Content-Length` (within the budget) takes all its bytes when
//!   it is first read, before any of them is buffered, so bodies are admitted whole and
//!   two half-read bodies never wait for each other.
//! - A body without one (chunked) takes each chunk's bytes as the chunk is read.
//! - Taking waits at most [`Limits::body_wait`] (backpressure: the body is not read
//!   meanwhile, so TCP flow control holds the client back); beyond it the request is
//!   answered `503 Service Unavailable` with `Retry-After` (RFC 9110 15.6.4, 10.2.3),
//!   whatever the route would have said about a body it could not read.
//! - The bytes taken go back when the route has answered (the answer is made; its body may
//!   still be sending), which is when the route's buffered copy is gone: every route that
//!   reads a body reads it whole, acts on it and drops it before answering (the hub hands
//!   publications to its store before it answers; the callbacks' queue has a bound of its
//!   own).
//!
//! Bodies no route reads (a GET with a body, which `serve` ignores) take nothing: the
//! budget is drawn only when a body is read.
//!
//! A body that sends nothing for [`Limits::header_timeout`] while it is read is cut and the
//! request answered `408 Request Timeout` (RFC 9110 15.5.9): otherwise a few connections
//! declaring large bodies and sending nothing would hold the whole budget, and every other
//! request would be refused, for as long as they stay open (hyper has no body timeout). A
//! client trickling its body still holds its bytes as long as it trickles; the connection
//! cap bounds how many can.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `Retry-After` of a request refused for lack of budget: bodies in flight are read in
/// seconds on any link that could send them, so a retry soon is likely to be admitted.
pub(crate) const RETRY_AFTER_SECONDS: u64 = 2;

/// The budget of one listener: permits are bytes.
#[derive(Clone)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
    /// The most one body may take at once (the whole budget, within what one acquisition
    /// can ask for).
    total: u64,
    wait: std::time::Duration,
    /// The longest a body being read may send nothing.
    stall: std::time::Duration,
}

impl Budget {
    /// The budget of a listener: `total` bytes held at once
    /// (`Limits::max_inflight_body_bytes`), a body waiting at most `wait` for its bytes
    /// (`Limits::body_wait`) and cut after sending nothing for `stall`
    /// (`Limits::header_timeout`). Plain values rather than the listener's `Limits`, so that
    /// the budget does not import the listener that runs it.
    pub(crate) fn new(
        total: usize,
        wait: std::time::Duration,
        stall: std::time::Duration,
    ) -> Budget {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total: total as u64,
            wait,
            stall,
        }
    }

    /// Takes `n` bytes of the budget, waiting at most the listener's body wait; `None` when
    /// they could not be had (more than the whole budget, or not freed in time).
    async fn take(&self, n: u64) -> Option<OwnedSemaphorePermit> {
        if n > self.total {
            return None;
        }
        let n = u32::try_from(n).ok()?;
        if let Ok(p) = self.bytes.clone().try_acquire_many_owned(n) {
            return Some(p);
        }
        tokio::time::timeout(self.wait, self.bytes.clone().acquire_many_owned(n))
            .await
            .ok()?
            .ok()
    }
}

/// What one request took of the budget, shared by its body (which takes) and the
/// middleware (which gives back once the route answered).
#[derive(Default)]
struct Held {
    taken: Mutex<Option<OwnedSemaphorePermit>>,
    /// The body could not take what it needed: the answer is 503.
    refused: AtomicBool,
    /// The body sent nothing for the stall limit: the answer is 408.
    stalled: AtomicBool,
}

impl Held {
    fn add(&self, permit: OwnedSemaphorePermit) {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        match taken.as_mut() {
            Some(t) => t.merge(permit),
            None => *taken = Some(permit),
        }
    }

    fn give_back(&self) {
        self.taken.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// The error a body yields when its bytes could not be had (the route sees a body that
/// failed to read; the middleware answers 503 instead of whatever the route said).
#[derive(Debug, thiserror::Error)]
#[error("the server holds as many request bytes as it may; retry later")]
struct OverBudget;

/// The error a body yields when it sent nothing for the stall limit.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled")]
struct Stalled;

/// Reading state of a budgeted body.
struct Reading {
    data: axum::body::BodyDataStream,
    budget: Budget,
    held: Arc<Held>,
    /// `Content-Length` when declared and within the budget: taken whole at the first read.
    declared: Option<u64>,
    /// Bytes taken and not yet read.
    credit: u64,
    done: bool,
}

impl Reading {
    async fn next(mut self) -> Option<(Result<axum::body::Bytes, axum::Error>, Reading)> {
        if self.done {
            return None;
        }
        if let Some(n) = self.declared.take() {
            match self.budget.take(n).await {
                Some(p) => {
                    self.held.add(p);
                    self.credit = n;
                }
                None => return Some(self.refuse()),
            }
        }
        let next = match tokio::time::timeout(self.budget.stall, self.data.next()).await {
            Ok(next) => next?,
            Err(_) => {
                self.held.stalled.store(true, Ordering::Relaxed);
                self.done = true;
                return Some((Err(axum::Error::new(Stalled)), self));
            }
        };
        let chunk = match next {
            Ok(c) => c,
            Err(e) => {
                self.done = true;
                return Some((Err(e), self));
            }
        };
        let len = chunk.len() as u64;
        if len > self.credit {
            let need = len - self.credit;
            self.credit = 0;
            match self.budget.take(need).await {
                Some(p) => self.held.add(p),
                None => return Some(self.refuse()),
            }
        } else {
            self.credit -= len;
        }
        Some((Ok(chunk), self))
    }

    fn refuse(mut self) -> (Result<axum::body::Bytes, axum::Error>, Reading) {
        self.held.refused.store(true, Ordering::Relaxed);
        self.done = true;
        (Err(axum::Error::new(OverBudget)), self)
    }
}

/// The middleware every listener runs its router behind (see the module documentation).
pub(crate) async fn admit(State(budget): State<Budget>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    // No body (most requests: GET, HEAD): nothing to take.
    if body.size_hint().exact() == Some(0) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let held = Arc::new(Held::default());
    let declared = body.size_hint().exact().filter(|&n| n <= budget.total);
    let reading = Reading {
        data: body.into_data_stream(),
        budget,
        held: held.clone(),
        declared,
        credit: 0,
        done: false,
    };
    let body = Body::from_stream(futures::stream::unfold(reading, Reading::next));
    let response = next.run(Request::from_parts(parts, body)).await;
    held.give_back();
    if held.refused.load(Ordering::Relaxed) {
        return busy();
    }
    if held.stalled.load(Ordering::Relaxed) {
        let mut r = crate::http::text(
            StatusCode::REQUEST_TIMEOUT,
            "the request body stalled; the connection is closed\n",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    response
}

/// `503` with `Retry-After`.
fn busy() -> Response {
    let mut r = crate::http::text(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server holds as many request bytes as it may at once; retry later\n",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    //! The budget over real TCP on 127.0.0.1, through the connection loop every listener
    //! runs (`listen::serve`), with a route that reads its body whole and holds it until the
    //! test lets it go, so bodies held at once can be counted.

    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use axum::Router;
    use axum::routing::post;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{oneshot, watch};

    use super::*;
    use crate::listen::Limits;

    /// Long enough for any answer on a loaded 2-core machine.
    const WAIT: Duration = Duration::from_secs(20);
    /// The budget of these tests: 64 KiB (small, so every body fits the sockets' buffers
    /// and a refused client has written all before it reads the answer).
    const BUDGET: usize = 64 << 10;
    /// A body of 40 KB: one fits the budget, two do not.
    const BODY: usize = 40_000;

    /// What the route saw: bodies read whole and held now, the most held at once.
    #[derive(Default)]
    struct Gauge {
        now: AtomicUsize,
        most: AtomicUsize,
        read: AtomicUsize,
    }

    struct Running {
        addr: SocketAddr,
        gauge: Arc<Gauge>,
        /// `true` lets every held body go.
        release: watch::Sender<bool>,
        stop: Option<oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        async fn start(limits: Limits) -> Running {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let gauge = Arc::new(Gauge::default());
            let (release, released) = watch::channel(false);
            let g = gauge.clone();
            let router = Router::new().route(
                "/hold",
                post(move |body: Body| {
                    let g = g.clone();
                    let mut released = released.clone();
                    async move {
                        let Ok(bytes) = axum::body::to_bytes(body, 4 << 20).await else {
                            return (StatusCode::BAD_REQUEST, "unread\n");
                        };
                        let now = g.now.fetch_add(bytes.len(), Ordering::SeqCst) + bytes.len();
                        g.most.fetch_max(now, Ordering::SeqCst);
                        g.read.fetch_add(1, Ordering::SeqCst);
                        let _ = released.wait_for(|r| *r).await;
                        g.now.fetch_sub(bytes.len(), Ordering::SeqCst);
                        drop(bytes);
                        (StatusCode::OK, "held\n")
                    }
                }),
            );
            let (tx, rx) = oneshot::channel::<()>();
            let task = tokio::spawn(crate::listen::serve(listener, router, limits, async move {
                let _ = rx.await;
            }));
            Running {
                addr,
                gauge,
                release,
                stop: Some(tx),
                task,
            }
        }

        async fn stop(mut self) {
            let _ = self.release.send(true);
            if let Some(s) = self.stop.take() {
                let _ = s.send(());
            }
            tokio::time::timeout(WAIT, self.task)
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// POSTs `len` bytes to `/hold` (chunked in pieces of 8 KiB when `chunked`, else with a
    /// `Content-Length`) on a fresh connection and reads the answer while writing (a
    /// refused body is not read): the answer's head.
    async fn post_body(addr: SocketAddr, len: usize, chunked: bool) -> String {
        let (mut read, mut write) = TcpStream::connect(addr).await.unwrap().into_split();
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_owned()
        } else {
            format!("Content-Length: {len}")
        };
        let head =
            format!("POST /hold HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{framing}\r\n\r\n");
        let writer = tokio::spawn(async move {
            write.write_all(head.as_bytes()).await?;
            let piece = vec![b'x'; 8 << 10];
            let mut left = len;
            while left > 0 {
                let n = left.min(piece.len());
                if chunked {
                    write.write_all(format!("{n:x}\r\n").as_bytes()).await?;
                }
                write.write_all(&piece[..n]).await?;
                if chunked {
                    write.write_all(b"\r\n").await?;
                }
                left -= n;
            }
            if chunked {
                write.write_all(b"0\r\n\r\n").await?;
            }
            // Kept open until the answer is read.
            Ok::<_, std::io::Error>(write)
        });
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(WAIT, async {
            while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        writer.abort();
        let text = String::from_utf8_lossy(&raw).into_owned();
        text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
    }

    fn status(head: &str) -> &str {
        head.split(' ').nth(1).unwrap_or("none")
    }

    /// Waits until `cond` holds (bounded by [`WAIT`]).
    async fn until(cond: impl Fn() -> bool) {
        tokio::time::timeout(WAIT, async {
            while !cond() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the condition did not come true in time");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_beyond_the_budget_get_503_and_the_budget_is_never_exceeded() {
        let limits = Limits::default()
            .with_inflight_body_bytes(BUDGET)
            .with_body_wait(Duration::from_millis(300));
        let server = Running::start(limits).await;
        let posts: Vec<_> = (0..4)
            .map(|_| tokio::spawn(post_body(server.addr, BODY, false)))
            .collect();
        // One body is read and held; the others cannot have their bytes while it is, and
        // are refused once their wait is over.
        let gauge = server.gauge.clone();
        until(|| gauge.read.load(Ordering::SeqCst) >= 1).await;
        until(|| posts.iter().filter(|p| p.is_finished()).count() >= 3).await;
        let _ = server.release.send(true);
        let mut heads = Vec::new();
        for p in posts {
            heads.push(p.await.unwrap());
        }
        let ok = heads.iter().filter(|h| status(h) == "200").count();
        let busy: Vec<&String> = heads.iter().filter(|h| status(h) == "503").collect();
        assert_eq!(ok, 1, "{heads:?}");
        assert_eq!(busy.len(), 3, "{heads:?}");
        for h in busy {
            assert!(
                h.to_ascii_lowercase().contains("retry-after: 2"),
                "no Retry-After: {h}"
            );
        }
        assert_eq!(server.gauge.read.load(Ordering::SeqCst), 1);
        let most = server.gauge.most.load(Ordering::SeqCst);
        assert!(
            most <= BUDGET,
            "{most} bytes held at once, the budget is {BUDGET}"
        );
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_waits_for_room_and_is_served_once_the_held_one_is_done() {
        let limits = Limits::default()
            .with_inflight_body_bytes(BUDGET)
            .with_body_wait(WAIT);
        let server = Running::start(limits).await;
        let gauge = server.gauge.clone();
        let first = tokio::spawn(post_body(server.addr, BODY, false));
        until(|| gauge.read.load(Ordering::SeqCst) == 1).await;
        let second = tokio::spawn(post_body(server.addr, BODY, false));
        // The second is held back (not read, not answered) while the first holds its bytes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(gauge.read.load(Ordering::SeqCst), 1);
        assert!(!second.is_finished());
        let _ = server.release.send(true);
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        assert_eq!(status(&first), "200", "{first}");
        assert_eq!(status(&second), "200", "{second}");
        assert_eq!(gauge.read.load(Ordering::SeqCst), 2);
        let most = gauge.most.load(Ordering::SeqCst);
        assert!(
            most <= BUDGET,
            "{most} bytes held at once, the budget is {BUDGET}"
        );
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunked_bodies_take_their_bytes_as_they_are_read() {
        let limits = Limits::default()
            .with_inflight_body_bytes(BUDGET)
            .with_body_wait(Duration::from_millis(300));
        let server = Running::start(limits).await;
        // Two chunked bodies that do not fit together: at least one is refused (both, when
        // each has part of the budget and waits for the rest), none waits forever.
        let posts: Vec<_> = (0..2)
            .map(|_| tokio::spawn(post_body(server.addr, BODY, true)))
            .collect();
        let gauge = server.gauge.clone();
        until(|| {
            posts.iter().filter(|p| p.is_finished()).count() + gauge.read.load(Ordering::SeqCst)
                >= 2
        })
        .await;
        let _ = server.release.send(true);
        let mut heads = Vec::new();
        for p in posts {
            heads.push(p.await.unwrap());
        }
        let busy = heads.iter().filter(|h| status(h) == "503").count();
        let ok = heads.iter().filter(|h| status(h) == "200").count();
        assert!(busy >= 1 && busy + ok == 2, "{heads:?}");
        let most = gauge.most.load(Ordering::SeqCst);
        assert!(
            most <= BUDGET,
            "{most} bytes held at once, the budget is {BUDGET}"
        );
        // A chunked body larger than the whole budget can never be held.
        let alone = post_body(server.addr, BUDGET + 1, true).await;
        assert_eq!(status(&alone), "503", "{alone}");
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_stalls_is_cut_and_gives_its_bytes_back() {
        // Header (and body stall) timeout 1 s; bodies may wait the whole test for room.
        let limits = Limits::new(Duration::from_secs(1), 16)
            .with_inflight_body_bytes(BUDGET)
            .with_body_wait(WAIT);
        let server = Running::start(limits).await;
        let _ = server.release.send(true);
        // Declares a body that takes most of the budget, sends a little of it, then nothing.
        let mut stalled = TcpStream::connect(server.addr).await.unwrap();
        let head = format!("POST /hold HTTP/1.1\r\nHost: test\r\nContent-Length: {BODY}\r\n\r\n");
        stalled.write_all(head.as_bytes()).await.unwrap();
        stalled.write_all(&[b'x'; 1000]).await.unwrap();
        let started = std::time::Instant::now();
        let mut raw = Vec::new();
        tokio::time::timeout(WAIT, stalled.read_to_end(&mut raw))
            .await
            .unwrap()
            .unwrap();
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(took < Duration::from_secs(5), "cut after {took:?}");
        // Its bytes are back: a body of the same size is read and answered.
        let next = post_body(server.addr, BODY, false).await;
        assert_eq!(status(&next), "200", "{next}");
        server.stop().await;
    }
}
