//! Serving a bound listener with inbound limits: every listener rsagg runs (`serve`,
//! `run --follow --listen`, `hub`) goes through [`serve`].
//!
//! `axum::serve` gives hyper no timer, so hyper enforces no header read timeout and a client
//! that sends half a request head keeps its connection (and its task) forever; it also
//! accepts every connection it is offered. This loop is `axum::serve` with those two holes
//! closed:
//!
//! - **Header read timeout** ([`Limits::header_timeout`]): hyper's HTTP/1 header read
//!   timeout with a Tokio timer. A client that has not sent a complete request head within
//!   it is disconnected. hyper starts the same timer when it waits for the next request on
//!   a kept-alive connection, so it is also the idle keep-alive limit: an idle connection is
//!   closed after it.
//! - **HTTP/1 only**: hyper's header read timeout guards HTTP/1 only; a prior-knowledge
//!   HTTP/2 (h2c) connection could hold streams open without it. rsagg serves plain HTTP,
//!   behind a proxy when exposed, and proxies speak HTTP/1.1 to their backends.
//! - **Concurrent connections** ([`Limits::max_connections`]): a semaphore permit is taken
//!   *before* accepting, and held by the connection's task until the connection ends. At the
//!   limit the loop stops accepting, so further connections wait in the kernel's accept
//!   backlog (they are not refused) and are served as soon as one closes; with the header
//!   timeout, a connection that sends nothing frees its slot within that time.
//! - **Request bytes held at once** ([`Limits::max_inflight_body_bytes`]): one budget of
//!   bytes per listener that every request body draws from as it is read, with a short wait
//!   and a 503 beyond it (see `budget.rs`).
//! - **A probe listener of its own** ([`serve_with_probes`], `--probe-listen`): `/healthz`
//!   and `/readyz` only, with a connection pool of its own
//!   ([`PROBE_MAX_CONNECTIONS`]). A flood of idle or half-sent connections on the main
//!   listener fills its `--max-connections` slots, and the rest wait in the kernel's
//!   backlog, where a probe would wait behind them (and, since the path is only known once
//!   the head is read, no admission on one listener can tell a probe from the flood). The
//!   probe listener's slots are taken only by probes, so a liveness probe keeps answering
//!   and the orchestrator does not restart a healthy process for being busy.
//!
//! Graceful shutdown is kept: when the shutdown future resolves the loop stops accepting,
//! every connection is told to finish (hyper closes idle ones at once and lets a request in
//! flight complete, without keep-alive), and [`serve`] returns once all have ended.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Limits on what clients may hold of a listener (`--header-timeout`, `--max-connections`,
/// `--max-inflight-body-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// How long a client may take to send a request head, and how long a kept-alive
    /// connection may stay idle between requests (hyper times both with one timer).
    /// Default [`Limits::DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// Connections served at once; beyond it new connections wait in the accept backlog
    /// until one closes. Default [`Limits::DEFAULT_MAX_CONNECTIONS`]; at least 1.
    pub max_connections: usize,
    /// Request body bytes held at once by all connections together; a body that cannot
    /// take its bytes within [`Limits::body_wait`] gets 503 with `Retry-After` (see
    /// `budget.rs`). Default [`Limits::DEFAULT_MAX_INFLIGHT_BODY_BYTES`]; at least 1.
    pub max_inflight_body_bytes: usize,
    /// How long a body waits for its bytes of the budget before the request is refused.
    /// Default [`Limits::DEFAULT_BODY_WAIT`].
    pub body_wait: Duration,
}

impl Limits {
    /// Ten seconds: far more than any real client needs for a request head, short enough
    /// that a connection held half-sent frees its slot quickly.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// 1024: below the usual soft limit of open files (1024 is common, the process needs
    /// some for its stores), far above what one aggregator's Destinations and hub need.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// 128 MiB: two of the hub's largest publications (50 MiB) at once and room for small
    /// requests beside them, within the 512 MiB the listening pods of `deploy/k8s` may use.
    pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = 128 << 20;
    /// Five seconds: long enough for a body in flight to be read and answered on any link
    /// that could send it, so a burst is served in turn rather than refused; short enough
    /// that the refused client's own timeout has not run out before it hears 503.
    pub const DEFAULT_BODY_WAIT: Duration = Duration::from_secs(5);

    /// Limits with the given values (`max_connections` of 0 is taken as 1) and the default
    /// body budget.
    pub fn new(header_timeout: Duration, max_connections: usize) -> Limits {
        Limits {
            header_timeout,
            max_connections: max_connections.max(1),
            max_inflight_body_bytes: Limits::DEFAULT_MAX_INFLIGHT_BODY_BYTES,
            body_wait: Limits::DEFAULT_BODY_WAIT,
        }
    }

    /// These limits with a budget of `bytes` request body bytes held at once (0 is taken
    /// as 1).
    pub fn with_inflight_body_bytes(mut self, bytes: usize) -> Limits {
        self.max_inflight_body_bytes = bytes.max(1);
        self
    }

    /// These limits with bodies waiting at most `wait` for their bytes of the budget.
    pub fn with_body_wait(mut self, wait: Duration) -> Limits {
        self.body_wait = wait;
        self
    }

    /// The limits of the probe listener: the same header timeout, a pool of
    /// [`PROBE_MAX_CONNECTIONS`] and a small body budget (probes send no body).
    fn probes(&self) -> Limits {
        Limits::new(self.header_timeout, PROBE_MAX_CONNECTIONS)
            .with_inflight_body_bytes(PROBE_BODY_BYTES)
            .with_body_wait(Duration::ZERO)
    }
}

/// Connections the probe listener serves at once: kubelet (or any orchestrator) opens one
/// per probe and closes it after the answer, so a few suffice; more leave room for a
/// monitoring agent probing beside it.
pub const PROBE_MAX_CONNECTIONS: usize = 64;

/// Body bytes the probe listener holds at once: its routes read no body.
const PROBE_BODY_BYTES: usize = 64 << 10;

/// `router` reduced to the probes: `/healthz` and `/readyz` as the router answers them
/// (the same handlers, so the probe listener says what the main one would), 404 for every
/// other path.
pub fn probes_only(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(
        |request: axum::extract::Request, next: axum::middleware::Next| async move {
            let path = request.uri().path();
            if path == crate::HEALTHZ || path == crate::READYZ {
                next.run(request).await
            } else {
                crate::http::not_found()
            }
        },
    ))
}

/// [`serve`] of `router` on `listener` and, with `probes`, of [`probes_only`] of it on that
/// second listener (its own connection pool: see the module documentation), until
/// `shutdown` resolves; returns once both have finished.
pub(crate) async fn serve_with_probes<F>(
    listener: TcpListener,
    probes: Option<TcpListener>,
    router: Router,
    limits: Limits,
    shutdown: F,
) where
    F: Future<Output = ()> + Send + 'static,
{
    let Some(probes) = probes else {
        return serve(listener, router, limits, shutdown).await;
    };
    let shutdown = futures::FutureExt::shared(shutdown);
    let probe_router = probes_only(router.clone());
    futures::future::join(
        serve(listener, router, limits, shutdown.clone()),
        serve(probes, probe_router, limits.probes(), shutdown),
    )
    .await;
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::new(
            Limits::DEFAULT_HEADER_TIMEOUT,
            Limits::DEFAULT_MAX_CONNECTIONS,
        )
    }
}

/// Binds `listen` (`HOST:PORT`).
async fn bind(listen: &str) -> Result<TcpListener, crate::Error> {
    TcpListener::bind(listen)
        .await
        .map_err(|source| crate::Error::Bind {
            addr: listen.to_owned(),
            source,
        })
}

/// The sockets of one server, bound before it is served (so `--listen …:0` can report,
/// or give the hub, its address first): the main listener, the probe listener when bound,
/// and the [`Limits`] both are served within. `Server` and `HubServer` each hold one.
#[derive(Debug)]
pub(crate) struct Listeners {
    main: TcpListener,
    /// The probe listener (`--probe-listen`), when bound.
    probes: Option<TcpListener>,
    limits: Limits,
}

impl Listeners {
    /// Binds `listen` (`HOST:PORT`; port 0 picks a free one), with [`Limits::default`].
    pub(crate) async fn bind(listen: &str) -> Result<Listeners, crate::Error> {
        Ok(Listeners {
            main: bind(listen).await?,
            probes: None,
            limits: Limits::default(),
        })
    }

    pub(crate) fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Also binds `listen` for the probes only, served with a pool of their own.
    pub(crate) async fn bind_probes(&mut self, listen: &str) -> Result<(), crate::Error> {
        self.probes = Some(bind(listen).await?);
        Ok(())
    }

    /// The address the main listener bound.
    pub(crate) fn local_addr(&self) -> Result<std::net::SocketAddr, crate::Error> {
        self.main.local_addr().map_err(crate::Error::Serve)
    }

    /// The address the probe listener bound, if any.
    pub(crate) fn probe_addr(&self) -> Result<Option<std::net::SocketAddr>, crate::Error> {
        self.probes
            .as_ref()
            .map(|l| l.local_addr().map_err(crate::Error::Serve))
            .transpose()
    }

    /// [`serve_with_probes`] of `router` until `shutdown` resolves.
    pub(crate) async fn serve<F>(self, router: Router, shutdown: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        serve_with_probes(self.main, self.probes, router, self.limits, shutdown).await;
    }
}

/// The semaphore takes permits as `u32` when waiting for all of them back.
const MAX_PERMITS: usize = u32::MAX as usize;

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then stops
/// accepting and returns once every connection has finished (see the module documentation).
pub(crate) async fn serve<F>(listener: TcpListener, router: Router, limits: Limits, shutdown: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let max = limits.max_connections.clamp(1, MAX_PERMITS);
    let router = router.layer(axum::middleware::from_fn_with_state(
        crate::budget::Budget::new(
            limits.max_inflight_body_bytes,
            limits.body_wait,
            limits.header_timeout,
        ),
        crate::budget::admit,
    ));
    let slots = Arc::new(Semaphore::new(max));
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    // `true` once shutting down; every connection task watches it.
    let (stopping, _) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        // The permit first: at the limit, nothing is accepted (the kernel queues).
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break, // never closed; nothing left to serve if it were
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning, as
                    // axum::serve does.
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let mut stop = stopping.subscribe();
        tokio::spawn(async move {
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut asked = pin!(async move {
                // An error means the sender is gone: the server is gone, stop as well.
                let _ = stop.wait_for(|s| *s).await;
            });
            let mut finishing = false;
            loop {
                tokio::select! {
                    served = conn.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = &mut asked, if !finishing => {
                        finishing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    stopping.send_replace(true);
    // Every connection task holds a permit until it ends: all of them back means all done.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// Errors of one incoming connection (it was reset before it was accepted), not of the
/// listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    //! The loop over real TCP on 127.0.0.1, with a router of its own (a slow route shows
    //! graceful shutdown letting a request in flight finish).

    use std::net::SocketAddr;
    use std::time::Instant;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    use super::*;

    /// Long enough for any answer on a loaded 2-core machine.
    const WAIT: Duration = Duration::from_secs(10);

    struct Running {
        addr: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
        /// Notified when a `/slow` request reaches its handler.
        slow_started: Arc<tokio::sync::Notify>,
    }

    impl Running {
        async fn start(limits: Limits) -> Running {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let slow_started = Arc::new(tokio::sync::Notify::new());
            let started = slow_started.clone();
            let router = Router::new().route("/", get(|| async { "ok\n" })).route(
                "/slow",
                get(move || async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    "slow\n"
                }),
            );
            let (tx, rx) = oneshot::channel::<()>();
            let task = tokio::spawn(serve(listener, router, limits, async move {
                let _ = rx.await;
            }));
            Running {
                addr,
                stop: Some(tx),
                task,
                slow_started,
            }
        }

        async fn connect(&self) -> TcpStream {
            TcpStream::connect(self.addr).await.unwrap()
        }

        fn stop(&mut self) {
            if let Some(s) = self.stop.take() {
                let _ = s.send(());
            }
        }
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";

    /// Reads until the peer closes (or resets) the connection, at most `within`: what was
    /// read, and whether it closed.
    async fn read_to_close(s: &mut TcpStream, within: Duration) -> (String, bool) {
        let mut got = Vec::new();
        let closed = tokio::time::timeout(within, async {
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .is_ok();
        (String::from_utf8_lossy(&got).into_owned(), closed)
    }

    /// Reads one response whose body ends with `body`, at most `within`; `None` if it did
    /// not come.
    async fn read_response(s: &mut TcpStream, body: &str, within: Duration) -> Option<String> {
        let mut got = Vec::new();
        tokio::time::timeout(within, async {
            let mut buf = [0u8; 4096];
            while !got.ends_with(body.as_bytes()) {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .ok()?;
        let text = String::from_utf8_lossy(&got).into_owned();
        text.ends_with(body).then_some(text)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_sent_head_is_cut_after_the_header_timeout() {
        let mut server = Running::start(Limits::new(Duration::from_secs(1), 16)).await;
        let mut held = server.connect().await;
        let started = Instant::now();
        held.write_all(b"GET / HTTP/1.1\r\nHost: te").await.unwrap();
        let (got, closed) = read_to_close(&mut held, WAIT).await;
        let took = started.elapsed();
        assert!(closed, "the held connection stayed open for {took:?}");
        // hyper answers nothing (or at most a 408) and closes; never a 200.
        assert!(!got.contains("200 OK"), "{got}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "closed after {took:?}, expected about 1 s"
        );
        // A head that arrives in pieces, but within the timeout, is served.
        let mut slow = server.connect().await;
        slow.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        slow.write_all(b"Host: test\r\n\r\n").await.unwrap();
        let answer = read_response(&mut slow, "ok\n", WAIT).await;
        assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
        server.stop();
        tokio::time::timeout(WAIT, server.task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_kept_alive_connection_is_closed_after_the_timeout() {
        let mut server = Running::start(Limits::new(Duration::from_secs(1), 16)).await;
        let mut conn = server.connect().await;
        for _ in 0..2 {
            conn.write_all(GET).await.unwrap();
            let answer = read_response(&mut conn, "ok\n", WAIT).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(!answer.to_ascii_lowercase().contains("connection: close"));
        }
        let idle = Instant::now();
        let (got, closed) = read_to_close(&mut conn, WAIT).await;
        let took = idle.elapsed();
        assert!(closed, "idle connection still open after {took:?}");
        assert!(got.is_empty(), "{got}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "closed after {took:?}"
        );
        server.stop();
        tokio::time::timeout(WAIT, server.task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_beyond_the_limit_wait_until_one_closes() {
        // A header timeout far beyond the test, so only closing frees a slot.
        let mut server = Running::start(Limits::new(Duration::from_secs(60), 2)).await;
        let first = server.connect().await;
        let mut second = server.connect().await;
        // The second is served: both slots are taken by connections that were accepted.
        second.write_all(GET).await.unwrap();
        assert!(read_response(&mut second, "ok\n", WAIT).await.is_some());
        let mut third = server.connect().await; // the kernel completes the handshake
        third.write_all(GET).await.unwrap();
        assert!(
            read_response(&mut third, "ok\n", Duration::from_millis(700))
                .await
                .is_none(),
            "the third connection was served beyond the limit of 2"
        );
        drop(first);
        let answer = read_response(&mut third, "ok\n", WAIT).await;
        assert!(
            answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")),
            "the waiting connection was not served once a slot freed"
        );
        server.stop();
        // Held keep-alive connections are closed at shutdown, so the loop ends.
        tokio::time::timeout(WAIT, server.task)
            .await
            .unwrap()
            .unwrap();
        drop((second, third));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn graceful_shutdown_lets_a_request_in_flight_finish() {
        let mut server = Running::start(Limits::default()).await;
        let mut idle = server.connect().await;
        idle.write_all(GET).await.unwrap();
        assert!(read_response(&mut idle, "ok\n", WAIT).await.is_some());
        let mut busy = server.connect().await;
        busy.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        tokio::time::timeout(WAIT, server.slow_started.notified())
            .await
            .expect("the slow request reaches its handler");
        server.stop();
        // The idle kept-alive connection is closed at once, long before the header timeout.
        let (_, closed) = read_to_close(&mut idle, Duration::from_secs(5)).await;
        assert!(closed, "an idle connection kept the server from stopping");
        // The slow request still gets its whole answer, then the connection closes.
        let (answer, closed) = read_to_close(&mut busy, WAIT).await;
        assert!(closed);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow\n"),
            "{answer}"
        );
        tokio::time::timeout(WAIT, server.task)
            .await
            .unwrap()
            .unwrap();
        // Nothing listens any more.
        assert!(TcpStream::connect(server.addr).await.is_err());
    }
}
