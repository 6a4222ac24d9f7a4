//! `Fetcher` against real loopback HTTP servers (axum on 127.0.0.1:0): retries, backoff,
//! Retry-After, caps, gzip, conditional GET, redirects, the address guard, concurrency limits
//! where credentials go, the `User-Agent` and the per-host request rate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body as AxBody;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt;
use rsagg_fetch::{Access, Auth, Error, FetchConfig, Fetcher, Request};
use tokio::io::AsyncReadExt;
use url::Url;

async fn serve(app: Router) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    addr
}

fn cfg() -> FetchConfig {
    FetchConfig {
        retries: 3,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_secs(2),
        read_timeout: Duration::from_secs(5),
        ..FetchConfig::default()
    }
}

fn fetcher() -> Fetcher {
    Fetcher::new(cfg()).unwrap()
}

fn open() -> Access {
    Access {
        allow_private: true,
        ..Access::default()
    }
}

/// GET `/` of `addr` with default access and request options.
async fn get_root(f: &Fetcher, addr: SocketAddr) -> Result<rsagg_fetch::Fetched, Error> {
    f.get(&url(addr, "/"), &open(), &Request::default()).await
}

fn url(addr: SocketAddr, path: &str) -> Url {
    Url::parse(&format!("http://{addr}{path}")).unwrap()
}

async fn read_all(f: rsagg_fetch::Fetched) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut body = f.body;
    while let Some(c) = body.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}

#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);
impl Hits {
    fn inc(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn retries_503_then_succeeds() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                if h.inc() <= 2 {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
                } else {
                    "ok".into_response()
                }
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let f = get_root(&fetcher(), addr).await.unwrap();
    assert_eq!(f.status, 200);
    assert_eq!(read_all(f).await.unwrap(), b"ok");
    assert_eq!(hits.get(), 3);
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                if h.inc() == 1 {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [(header::RETRY_AFTER, "1")],
                        "slow down",
                    )
                        .into_response()
                } else {
                    "ok".into_response()
                }
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let t = Instant::now();
    let f = get_root(&fetcher(), addr).await.unwrap();
    assert_eq!(f.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "waited only {:?}",
        t.elapsed()
    );
    assert_eq!(hits.get(), 2);
}

/// A `Retry-After` longer than `retry_after_max` is neither waited for nor retried: the
/// request ends at once with how long the server asked for, for the caller to park its work.
#[tokio::test]
async fn a_retry_after_beyond_retry_after_max_ends_the_request_unretried() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                h.inc();
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "3600")],
                    "maintenance",
                )
                    .into_response()
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let t = Instant::now();
    match get_root(&fetcher(), addr).await {
        Err(Error::RetryAfter {
            status,
            retry_after,
            ..
        }) => {
            assert_eq!((status, retry_after), (503, Duration::from_secs(3600)));
        }
        other => panic!("{:?}", other.map(|f| f.status)),
    }
    assert_eq!(hits.get(), 1, "no retry");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

/// A server answering `status` to every GET of `/`, counting the hits.
async fn always(status: StatusCode) -> (Hits, SocketAddr) {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(move |State(h): State<Hits>| async move {
                h.inc();
                status
            }),
        )
        .with_state(hits.clone());
    (hits, serve(app).await)
}

#[tokio::test]
async fn does_not_retry_404() {
    let (hits, addr) = always(StatusCode::NOT_FOUND).await;
    let u = url(addr, "/");
    let err = fetcher()
        .get(&u, &open(), &Request::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Status {
                status: 404,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(u.as_str()), "{err}");
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn gives_up_after_the_retries() {
    let (hits, addr) = always(StatusCode::INTERNAL_SERVER_ERROR).await;
    let f = Fetcher::new(FetchConfig {
        retries: 2,
        ..cfg()
    })
    .unwrap();
    let err = get_root(&f, addr).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Status {
                status: 500,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(hits.get(), 3, "first attempt + 2 retries");
}

#[tokio::test]
async fn times_out_and_retries_a_silent_server() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                h.inc();
                tokio::time::sleep(Duration::from_secs(3)).await;
                "late"
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let f = Fetcher::new(FetchConfig {
        retries: 1,
        read_timeout: Duration::from_millis(300),
        ..cfg()
    })
    .unwrap();
    let err = get_root(&f, addr).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { attempts: 2, .. }), "{err:?}");
    assert_eq!(hits.get(), 2);
}

fn big_router() -> Router {
    Router::new()
        // Honest Content-Length.
        .route("/sized", get(|| async { vec![b'x'; 2000] }))
        // Chunked, no Content-Length: only counting the bytes read can catch it.
        .route(
            "/chunked",
            get(|| async {
                let chunks = futures::stream::iter(
                    (0..20).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 100])),
                );
                AxBody::from_stream(chunks)
            }),
        )
}

#[tokio::test]
async fn caps_body_size_with_and_without_content_length() {
    let addr = serve(big_router()).await;
    let f = fetcher();
    let capped = |n| Request {
        max_bytes: n,
        ..Request::default()
    };
    // Announced larger than the cap: refused before reading.
    let err = f
        .get(&url(addr, "/sized"), &open(), &capped(1000))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 1000, .. }), "{err}");
    // No Content-Length: the cap trips while reading.
    let got = f
        .get(&url(addr, "/chunked"), &open(), &capped(1000))
        .await
        .unwrap();
    assert_eq!(got.content_length, None);
    let err = read_all(got).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 1000, .. }), "{err}");
    // Through AsyncRead the crate error comes back out of the io::Error.
    let got = f
        .get(&url(addr, "/chunked"), &open(), &capped(1999))
        .await
        .unwrap();
    let mut r = got.body.into_async_read();
    let mut buf = Vec::new();
    let ioerr = r.read_to_end(&mut buf).await.unwrap_err();
    let err = Error::from_io(&url(addr, "/chunked"), ioerr);
    assert!(matches!(err, Error::TooLarge { limit: 1999, .. }), "{err}");
    // Exactly at the cap is fine.
    let got = f
        .get(&url(addr, "/chunked"), &open(), &capped(2000))
        .await
        .unwrap();
    assert_eq!(read_all(got).await.unwrap().len(), 2000);
    let (_, bytes) = f
        .get_bytes(&url(addr, "/sized"), &open(), 2000)
        .await
        .unwrap();
    assert_eq!(bytes.len(), 2000);
    let err = f
        .get_bytes(&url(addr, "/chunked"), &open(), 500)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 500, .. }), "{err}");
}

async fn gzip(data: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncWriteExt;
    let mut enc = async_compression::tokio::write::GzipEncoder::new(Vec::new());
    enc.write_all(data).await.unwrap();
    enc.shutdown().await.unwrap();
    enc.into_inner()
}

#[tokio::test]
async fn inflates_gzip_with_a_cap_on_inflated_bytes() {
    let plain: Vec<u8> = b"<urlset/>".repeat(10_000); // 90,000 bytes
    let packed = gzip(&plain).await;
    assert!(packed.len() < 2000);
    let p1 = packed.clone();
    let p2 = packed.clone();
    let app = Router::new()
        .route(
            "/encoded.xml",
            get(move || async move {
                (
                    [
                        (header::CONTENT_ENCODING, "gzip"),
                        (header::CONTENT_TYPE, "application/xml"),
                    ],
                    p1,
                )
            }),
        )
        .route(
            "/list.xml.gz",
            get(move || async move { ([(header::CONTENT_TYPE, "application/gzip")], p2) }),
        );
    let addr = serve(app).await;
    let f = fetcher();
    let req = |max_bytes, inflate_gzip| Request {
        max_bytes,
        inflate_gzip,
        ..Request::default()
    };
    // Content-Encoding: gzip, inflated by the client whatever inflate_gzip says.
    let got = f
        .get(&url(addr, "/encoded.xml"), &open(), &req(100_000, false))
        .await
        .unwrap();
    assert_eq!(read_all(got).await.unwrap(), plain);
    let got = f
        .get(&url(addr, "/encoded.xml"), &open(), &req(50_000, false))
        .await
        .unwrap();
    assert!(matches!(read_all(got).await, Err(Error::TooLarge { .. })));
    // Raw .xml.gz: inflated by magic number only when asked.
    let got = f
        .get(&url(addr, "/list.xml.gz"), &open(), &req(100_000, true))
        .await
        .unwrap();
    assert_eq!(got.content_length, Some(packed.len() as u64));
    assert_eq!(read_all(got).await.unwrap(), plain);
    let got = f
        .get(&url(addr, "/list.xml.gz"), &open(), &req(100_000, false))
        .await
        .unwrap();
    assert_eq!(read_all(got).await.unwrap(), packed);
    // The cap applies to the inflated bytes (the compressed body is far below it).
    let got = f
        .get(&url(addr, "/list.xml.gz"), &open(), &req(50_000, true))
        .await
        .unwrap();
    let err = read_all(got).await.unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { limit: 50_000, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn conditional_get_gives_not_modified() {
    const LM: &str = "Wed, 21 Oct 2015 07:28:00 GMT";
    let app = Router::new().route(
        "/doc",
        get(|h: HeaderMap| async move {
            let inm = h
                .get(header::IF_NONE_MATCH)
                .map(|v| v.to_str().unwrap().to_owned());
            let ims = h
                .get(header::IF_MODIFIED_SINCE)
                .map(|v| v.to_str().unwrap().to_owned());
            if inm.as_deref() == Some("\"v1\"") || ims.as_deref() == Some(LM) {
                return (StatusCode::NOT_MODIFIED, [(header::ETAG, "\"v1\"")]).into_response();
            }
            (
                [(header::ETAG, "\"v1\""), (header::LAST_MODIFIED, LM)],
                "content",
            )
                .into_response()
        }),
    );
    let addr = serve(app).await;
    let f = fetcher();
    let first = f
        .get(&url(addr, "/doc"), &open(), &Request::default())
        .await
        .unwrap();
    assert!(!first.not_modified);
    assert_eq!(first.etag.as_deref(), Some("\"v1\""));
    assert_eq!(first.last_modified.as_deref(), Some(LM));
    let etag = first.etag.clone();
    assert_eq!(read_all(first).await.unwrap(), b"content");
    let again = f
        .get(
            &url(addr, "/doc"),
            &open(),
            &Request {
                if_none_match: etag,
                ..Request::default()
            },
        )
        .await
        .unwrap();
    assert!(again.not_modified);
    assert_eq!(again.status, 304);
    assert!(read_all(again).await.unwrap().is_empty());
    let again = f
        .get(
            &url(addr, "/doc"),
            &open(),
            &Request {
                if_modified_since: Some(LM.into()),
                ..Request::default()
            },
        )
        .await
        .unwrap();
    assert!(again.not_modified);
}

#[tokio::test]
async fn limits_redirects_and_checks_every_hop() {
    let app = Router::new()
        .route(
            "/r/{n}",
            get(|Path(n): Path<u32>| async move {
                if n == 0 {
                    "arrived".into_response()
                } else {
                    (
                        StatusCode::FOUND,
                        [(header::LOCATION, format!("/r/{}", n - 1))],
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/to-file",
            get(|| async {
                (
                    StatusCode::MOVED_PERMANENTLY,
                    [(header::LOCATION, "file:///etc/passwd")],
                )
            }),
        )
        .route("/nowhere", get(|| async { StatusCode::SEE_OTHER }));
    let addr = serve(app).await;
    let f = fetcher(); // max_redirects 5
    let got = f
        .get(&url(addr, "/r/5"), &open(), &Request::default())
        .await
        .unwrap();
    assert_eq!(got.url, url(addr, "/r/0"));
    assert_eq!(read_all(got).await.unwrap(), b"arrived");
    let err = f
        .get(&url(addr, "/r/6"), &open(), &Request::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::TooManyRedirects { limit: 5, .. }),
        "{err}"
    );
    let err = f
        .get(&url(addr, "/to-file"), &open(), &Request::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Scheme { .. }), "{err}");
    let err = f
        .get(&url(addr, "/nowhere"), &open(), &Request::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::BadRedirect { status: 303, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn guard_refuses_loopback_unless_allowed() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                h.inc();
                "hello"
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let port = addr.port();
    let f = fetcher();
    let guarded = Access::default();
    for u in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://2130706433:{port}/"),
    ] {
        let u = Url::parse(&u).unwrap();
        let err = f.get(&u, &guarded, &Request::default()).await.unwrap_err();
        assert!(matches!(err, Error::Refused { .. }), "{u}: {err:?}");
        assert!(err.to_string().contains("address guard"), "{err}");
    }
    assert_eq!(hits.get(), 0, "no refused request reached the server");
    // The same targets work for an upstream that allows private addresses.
    for u in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
    ] {
        let got = f
            .get(&Url::parse(&u).unwrap(), &open(), &Request::default())
            .await
            .unwrap();
        assert_eq!(read_all(got).await.unwrap(), b"hello");
    }
    assert_eq!(hits.get(), 2);
}

#[derive(Clone, Default)]
struct InFlight {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

async fn slow(State(s): State<InFlight>) -> &'static str {
    let n = s.now.fetch_add(1, Ordering::SeqCst) + 1;
    s.max.fetch_max(n, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.now.fetch_sub(1, Ordering::SeqCst);
    "done"
}

#[tokio::test]
async fn bounds_concurrency_per_host_and_overall() {
    let a = InFlight::default();
    let addr_a = serve(Router::new().route("/", get(slow)).with_state(a.clone())).await;
    let f = Fetcher::new(FetchConfig {
        per_host: 3,
        ..cfg()
    })
    .unwrap();
    let access = open();
    let jobs = (0..12).map(|_| {
        let f = f.clone();
        let access = access.clone();
        async move {
            let got = f
                .get(&url(addr_a, "/"), &access, &Request::default())
                .await?;
            read_all(got).await
        }
    });
    for r in futures::future::join_all(jobs).await {
        assert_eq!(r.unwrap(), b"done");
    }
    assert_eq!(
        a.max.load(Ordering::SeqCst),
        3,
        "per-host limit reached, never exceeded"
    );

    // Overall limit across two hosts (host:port).
    let shared = InFlight::default();
    let addr_b = serve(
        Router::new()
            .route("/", get(slow))
            .with_state(shared.clone()),
    )
    .await;
    let addr_c = serve(
        Router::new()
            .route("/", get(slow))
            .with_state(shared.clone()),
    )
    .await;
    let f = Fetcher::new(FetchConfig {
        per_host: 8,
        max_connections: 2,
        ..cfg()
    })
    .unwrap();
    let jobs = (0..10).map(|i| {
        let f = f.clone();
        let access = access.clone();
        let addr = if i % 2 == 0 { addr_b } else { addr_c };
        async move {
            let got = f.get(&url(addr, "/"), &access, &Request::default()).await?;
            read_all(got).await
        }
    });
    for r in futures::future::join_all(jobs).await {
        assert_eq!(r.unwrap(), b"done");
    }
    assert_eq!(shared.max.load(Ordering::SeqCst), 2);
}

#[derive(Clone, Default)]
struct Seen(Arc<std::sync::Mutex<Vec<Option<String>>>>);

async fn record(State(s): State<Seen>, h: HeaderMap) -> &'static str {
    s.0.lock().unwrap().push(
        h.get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_owned()),
    );
    "seen"
}

#[tokio::test]
async fn credentials_go_to_auth_hosts_only() {
    let seen_b = Seen::default();
    let addr_b = serve(
        Router::new()
            .route("/", get(record))
            .with_state(seen_b.clone()),
    )
    .await;
    let seen_a = Seen::default();
    let to_b_by_name = format!("http://localhost:{}/", addr_b.port());
    let to_b_by_ip = format!("http://127.0.0.1:{}/", addr_b.port());
    let app_a = Router::new()
        .route("/", get(record))
        .route(
            "/away",
            get(move || async move { (StatusCode::FOUND, [(header::LOCATION, to_b_by_name)]) }),
        )
        .route(
            "/other-port",
            get(move || async move {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, to_b_by_ip)],
                )
            }),
        )
        .route(
            "/home",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/")]) }),
        )
        .with_state(seen_a.clone());
    let addr_a = serve(app_a).await;
    let f = fetcher();
    let access = Access {
        allow_private: true,
        auth: Some(Auth::Bearer("tok".into())),
        auth_hosts: vec![format!("127.0.0.1:{}", addr_a.port())],
        upstream: None,
    };
    for path in ["/", "/home", "/away", "/other-port"] {
        let got = f
            .get(&url(addr_a, path), &access, &Request::default())
            .await
            .unwrap();
        assert_eq!(read_all(got).await.unwrap(), b"seen");
    }
    let a: Vec<_> = seen_a.0.lock().unwrap().clone();
    let b: Vec<_> = seen_b.0.lock().unwrap().clone();
    assert_eq!(
        a,
        vec![Some("Bearer tok".to_owned()); 2],
        "direct and same-host redirect"
    );
    assert_eq!(
        b,
        vec![None, None],
        "never after a redirect to another host:port"
    );

    let basic = Access {
        allow_private: true,
        auth: Some(Auth::Basic {
            user: "u".into(),
            password: "p".into(),
        }),
        auth_hosts: vec!["localhost".into()],
        upstream: None,
    };
    let got = f
        .get(
            &Url::parse(&format!("http://localhost:{}/", addr_b.port())).unwrap(),
            &basic,
            &Request::default(),
        )
        .await
        .unwrap();
    read_all(got).await.unwrap();
    let got = f
        .get(&url(addr_a, "/"), &basic, &Request::default())
        .await
        .unwrap();
    read_all(got).await.unwrap();
    assert_eq!(
        seen_b.0.lock().unwrap().last().unwrap().as_deref(),
        Some("Basic dTpw")
    );
    assert_eq!(seen_a.0.lock().unwrap().last().unwrap().as_deref(), None);
}

#[tokio::test]
async fn parses_link_headers() {
    let app = Router::new().route(
        "/page",
        get(|| async {
            // Two header fields, the second with two link-values.
            (
                axum::response::AppendHeaders([
                    (header::LINK, "</cl.xml>; rel=\"resourcesync\""),
                    (
                        header::LINK,
                        "<http://hub.example.org/>; rel=hub, <self>; rel=self",
                    ),
                ]),
                "x",
            )
        }),
    );
    let addr = serve(app).await;
    let got = fetcher()
        .get(&url(addr, "/page"), &open(), &Request::default())
        .await
        .unwrap();
    assert_eq!(got.links.len(), 3);
    assert_eq!(
        got.link("resourcesync").unwrap().target,
        url(addr, "/cl.xml")
    );
    assert_eq!(
        got.link("hub").unwrap().target.as_str(),
        "http://hub.example.org/"
    );
    assert_eq!(got.link("self").unwrap().target, url(addr, "/self"));
}

#[tokio::test]
async fn body_holds_its_permits_until_dropped() {
    let app = Router::new().route("/", get(|| async { "x".repeat(10) }));
    let addr = serve(app).await;
    let f = Fetcher::new(FetchConfig {
        per_host: 1,
        ..cfg()
    })
    .unwrap();
    let first = get_root(&f, addr).await.unwrap();
    // The unread body of `first` holds the only permit for this host.
    let f2 = f.clone();
    let mut second = tokio::spawn(async move {
        let got = get_root(&f2, addr).await?;
        read_all(got).await
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut second)
            .await
            .is_err(),
        "second request must wait for the first body"
    );
    drop(first);
    let body = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("released by the drop")
        .unwrap()
        .unwrap();
    assert_eq!(body.len(), 10);
}

/// Records every request's `User-Agent`.
async fn record_agent(State(s): State<Seen>, h: HeaderMap) -> &'static str {
    s.0.lock().unwrap().push(
        h.get(header::USER_AGENT)
            .map(|v| v.to_str().unwrap().to_owned()),
    );
    "seen"
}

#[tokio::test]
async fn sends_the_configured_user_agent() {
    let seen = Seen::default();
    let addr = serve(
        Router::new()
            .route("/", get(record_agent))
            .with_state(seen.clone()),
    )
    .await;
    get_root(&fetcher(), addr).await.unwrap();
    let agent = "rsagg/1.2.3 (+mailto:harvest@agg.example.org)";
    let f = Fetcher::new(FetchConfig {
        user_agent: agent.into(),
        ..cfg()
    })
    .unwrap();
    get_root(&f, addr).await.unwrap();
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            Some(rsagg_fetch::DEFAULT_USER_AGENT.to_owned()),
            Some(agent.to_owned())
        ]
    );
    assert!(
        rsagg_fetch::DEFAULT_USER_AGENT.ends_with(" (+https://github.com/rsagg/rsagg)"),
        "the default says where to find out about the harvester"
    );
}

/// When each request reached the server, in arrival order.
#[derive(Clone, Default)]
struct Arrivals(Arc<std::sync::Mutex<Vec<Instant>>>);

async fn arrive(State(s): State<Arrivals>) -> &'static str {
    s.0.lock().unwrap().push(Instant::now());
    "ok"
}

/// A server on `ip` (any loopback address: 127.0.0.2 is another host than 127.0.0.1).
async fn serve_arrivals(ip: &str) -> (Arrivals, SocketAddr) {
    let a = Arrivals::default();
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = Router::new().route("/", get(arrive)).with_state(a.clone());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (a, addr)
}

/// `n` concurrent GETs of `/` on `addr`, each read to the end.
async fn burst(f: &Fetcher, addr: SocketAddr, n: usize) {
    let jobs = (0..n).map(|_| async move {
        let got = get_root(f, addr).await?;
        read_all(got).await
    });
    for r in futures::future::join_all(jobs).await {
        assert_eq!(r.unwrap(), b"ok");
    }
}

/// How long after `t0` the last request reached the server.
fn last_arrival(a: &Arrivals, t0: Instant) -> Duration {
    a.0.lock()
        .unwrap()
        .iter()
        .max()
        .map_or(Duration::ZERO, |t| *t - t0)
}

// Time assertions here are lower bounds a rate limiter guarantees, not benchmarks: a busy
// machine only makes the requests slower. The one upper bound (hosts are independent) has
// half the run's time as slack.
#[tokio::test]
async fn limits_the_request_rate_per_host_independently() {
    let (arr_a, a) = serve_arrivals("127.0.0.1").await;
    let (arr_b, b) = serve_arrivals("127.0.0.2").await;
    let f = Fetcher::new(FetchConfig {
        per_host: 8,
        per_host_rate: Some(20.0),
        ..cfg()
    })
    .unwrap();

    // 30 requests to one host at 20/s: 29 gaps of 50 ms, however many run concurrently.
    let t0 = Instant::now();
    burst(&f, a, 30).await;
    let one = t0.elapsed();
    assert!(one >= Duration::from_millis(1_400), "{one:?}");
    assert_eq!(arr_a.0.lock().unwrap().len(), 30);
    let last = last_arrival(&arr_a, t0);
    assert!(last >= Duration::from_millis(1_400), "{last:?}");

    // Both hosts at once: each keeps its own 20/s. A shared limit would need 59 gaps of
    // 50 ms (2.95 s) for the 60 requests.
    arr_a.0.lock().unwrap().clear();
    let t0 = Instant::now();
    futures::future::join(burst(&f, a, 30), burst(&f, b, 30)).await;
    let both = t0.elapsed();
    assert!(both >= Duration::from_millis(1_400), "{both:?}");
    assert!(
        both < Duration::from_millis(2_900),
        "hosts are limited independently: {both:?}"
    );
    for arr in [&arr_a, &arr_b] {
        assert_eq!(arr.0.lock().unwrap().len(), 30);
        let last = last_arrival(arr, t0);
        assert!(
            last >= Duration::from_millis(1_400),
            "each host at 20/s: {last:?}"
        );
    }
}

#[tokio::test]
async fn retries_are_rate_limited_too() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                if h.inc() < 4 {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
                } else {
                    "ok".into_response()
                }
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let f = Fetcher::new(FetchConfig {
        per_host_rate: Some(10.0),
        ..cfg()
    })
    .unwrap();
    let t0 = Instant::now();
    let got = get_root(&f, addr).await.unwrap();
    assert_eq!(read_all(got).await.unwrap(), b"ok");
    assert_eq!(hits.get(), 4);
    // Four attempts at 10/s: at least three gaps of 100 ms, whatever the (10 ms) backoff.
    assert!(
        t0.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t0.elapsed()
    );
}

/// A raw TCP server on loopback answering every connection with `answer` (after reading the
/// request head, or at once for a TLS ClientHello), then closing the connection.
async fn raw_server(answer: &'static [u8]) -> SocketAddr {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_says_so() {
    static ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n\
        0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";
    let addr = raw_server(ANSWER).await;
    let fetched = get_root(&fetcher(), addr).await.unwrap();
    assert_eq!(fetched.content_length, Some(1000));
    let err = read_all(fetched).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Truncated {
                read: 100,
                expected: 1000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("http://{addr}/: body ended after 100 of 1000 bytes (Content-Length)")
    );
}

#[tokio::test]
async fn a_refused_connection_and_a_dns_failure_read_differently() {
    // A port nobody listens on: bound, then closed.
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let f = Fetcher::new(FetchConfig {
        retries: 1,
        ..cfg()
    })
    .unwrap();
    let refused = get_root(&f, closed).await.unwrap_err();
    assert!(
        matches!(refused, Error::Http { attempts: 2, .. }),
        "{refused:?}"
    );
    assert_eq!(refused.cause(), Some(rsagg_fetch::Cause::ConnectionRefused));
    let msg = refused.to_string();
    eprintln!("refused: {msg}");
    assert!(msg.contains("connection refused"), "{msg}");
    assert!(
        msg.to_lowercase().contains("os error"),
        "the OS's words: {msg}"
    );

    // `.invalid` never resolves (RFC 6761 6.4), with the guard's resolver and without.
    let url = Url::parse("http://nonexistent.invalid/").unwrap();
    for allow_private in [true, false] {
        let access = Access {
            allow_private,
            ..Access::default()
        };
        let dns = f.get(&url, &access, &Request::default()).await.unwrap_err();
        assert_eq!(dns.cause(), Some(rsagg_fetch::Cause::Dns), "{dns:?}");
        // Not retried as if transient (a refused connection is, above).
        assert!(matches!(dns, Error::Http { attempts: 1, .. }), "{dns:?}");
        let msg = dns.to_string();
        eprintln!("dns (allow_private {allow_private}): {msg}");
        assert!(
            msg.contains("DNS lookup failed") && msg.contains("cannot resolve nonexistent.invalid"),
            "{msg}"
        );
        assert_ne!(msg, refused.to_string());
    }
}

#[tokio::test]
async fn a_failed_tls_handshake_is_named() {
    // A server that answers a ClientHello in plain HTTP.
    let addr = raw_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
    let f = Fetcher::new(FetchConfig {
        retries: 0,
        ..cfg()
    })
    .unwrap();
    let url = Url::parse(&format!("https://{addr}/")).unwrap();
    let err = f.get(&url, &open(), &Request::default()).await.unwrap_err();
    assert_eq!(err.cause(), Some(rsagg_fetch::Cause::Tls), "{err:?}");
    eprintln!("tls: {err}");
    assert!(err.to_string().contains("TLS handshake failed"), "{err}");
}

/// `n` bytes, one every `gap`: never silent for long, always slow.
fn dripping(n: usize, gap: Duration) -> AxBody {
    AxBody::from_stream(futures::stream::unfold(0usize, move |i| async move {
        if i >= n {
            return None;
        }
        tokio::time::sleep(gap).await;
        Some((Ok::<_, std::io::Error>(vec![b'd']), i + 1))
    }))
}

#[tokio::test]
async fn a_dripping_body_falls_below_the_minimum_rate() {
    let app = Router::new().route(
        "/",
        get(|| async { dripping(10_000, Duration::from_millis(100)) }),
    );
    let addr = serve(app).await;
    // 10 bytes/s against a minimum of 100, once 500 ms were waited; the silence between
    // bytes (100 ms) never reaches read_timeout.
    let f = Fetcher::new(FetchConfig {
        read_timeout: Duration::from_millis(500),
        min_rate: 100,
        body_timeout: Duration::from_secs(600),
        ..cfg()
    })
    .unwrap();
    let err = read_all(get_root(&f, addr).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Deadline { reason, .. } if reason.contains("minimum rate of 100 bytes/s")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_body_past_its_deadline_fails_although_never_silent() {
    let app = Router::new().route(
        "/",
        get(|| async { dripping(10_000, Duration::from_millis(20)) }),
    );
    let addr = serve(app).await;
    let f = Fetcher::new(FetchConfig {
        read_timeout: Duration::from_secs(5),
        min_rate: 0,
        body_timeout: Duration::from_millis(700),
        ..cfg()
    })
    .unwrap();
    let err = read_all(get_root(&f, addr).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Deadline { reason, .. } if reason.contains("deadline of 700ms")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_request_deadline_bounds_the_wait_for_headers() {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/",
            get(|State(h): State<Hits>| async move {
                h.inc();
                tokio::time::sleep(Duration::from_secs(3)).await;
                "late"
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let f = fetcher();
    // A document's own deadline, shorter than read_timeout (5 s): not retried.
    let req = Request {
        timeout: Some(Duration::from_millis(300)),
        ..Request::default()
    };
    let err = f.get(&url(addr, "/"), &open(), &req).await.unwrap_err();
    assert!(
        matches!(&err, Error::Deadline { reason, .. } if reason.contains("no response headers")),
        "{err:?}"
    );
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn a_reader_that_pauses_is_not_charged_for_it() {
    // The whole body is sent at once; the reader takes its time (backpressure, as a
    // Resource List read while its resources are fetched).
    let app = Router::new().route(
        "/",
        get(|| async {
            AxBody::from_stream(futures::stream::iter(
                (0..10).map(|_| Ok::<_, std::io::Error>(vec![b'p'; 1000])),
            ))
        }),
    );
    let addr = serve(app).await;
    let f = Fetcher::new(FetchConfig {
        body_timeout: Duration::from_millis(400),
        ..cfg()
    })
    .unwrap();
    let mut body = get_root(&f, addr).await.unwrap().body;
    let mut n = 0;
    while let Some(c) = body.next().await {
        n += c.unwrap().len();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(n, 10_000);
}

/// A fleet run's pipelines each have their own fetcher; sharing [`HostLimits`] bounds and
/// spaces what they send one host together. Without it, two fetchers of `per_host = 3`
/// would have 6 requests in flight there, and two at 20/s would send 40/s.
#[tokio::test]
async fn fetchers_sharing_host_limits_bound_and_space_one_host_together() {
    use rsagg_fetch::HostLimits;
    let a = InFlight::default();
    let addr = serve(Router::new().route("/", get(slow)).with_state(a.clone())).await;
    let shared = Arc::new(HostLimits::new(2, None));
    let own = || {
        Fetcher::sharing(
            FetchConfig {
                per_host: 3,
                ..cfg()
            },
            Some(shared.clone()),
        )
        .unwrap()
    };
    let (f1, f2) = (own(), own());
    let access = open();
    let jobs = (0..12).map(|i| {
        let f = if i % 2 == 0 { f1.clone() } else { f2.clone() };
        let access = access.clone();
        async move {
            let got = f.get(&url(addr, "/"), &access, &Request::default()).await?;
            read_all(got).await
        }
    });
    for r in futures::future::join_all(jobs).await {
        assert_eq!(r.unwrap(), b"done");
    }
    assert_eq!(
        a.max.load(Ordering::SeqCst),
        2,
        "the shared per-host limit holds for both fetchers together"
    );

    // The rate: two fetchers at 20/s each, 15 requests each to one host: one schedule, so
    // 29 gaps of 50 ms (separate schedules would take about 0.7 s).
    let (arr, addr) = serve_arrivals("127.0.0.1").await;
    let shared = Arc::new(HostLimits::new(8, None));
    let rated = || {
        Fetcher::sharing(
            FetchConfig {
                per_host: 8,
                per_host_rate: Some(20.0),
                ..cfg()
            },
            Some(shared.clone()),
        )
        .unwrap()
    };
    let (f1, f2) = (rated(), rated());
    let t0 = Instant::now();
    futures::future::join(burst(&f1, addr, 15), burst(&f2, addr, 15)).await;
    assert_eq!(arr.0.lock().unwrap().len(), 30);
    let last = last_arrival(&arr, t0);
    assert!(
        last >= Duration::from_millis(1_400),
        "one schedule for the host: {last:?}"
    );

    // The fleet's own rate applies to fetchers without one.
    let (arr, addr) = serve_arrivals("127.0.0.1").await;
    let shared = Arc::new(HostLimits::new(8, Some(20.0)));
    let f = Fetcher::sharing(cfg(), Some(shared)).unwrap();
    let t0 = Instant::now();
    burst(&f, addr, 10).await;
    let last = last_arrival(&arr, t0);
    assert!(last >= Duration::from_millis(450), "{last:?}");
}

/// A bare HTTP/1.1 server that answers every request on a connection with `ok` and keeps
/// the connection open until the client closes it; the count is of connections open now.
async fn serve_counting_connections() -> (Arc<AtomicUsize>, SocketAddr) {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let count = open.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = l.accept().await else {
                return;
            };
            let count = count.clone();
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if sock.write_all(reply).await.is_err() {
                            break;
                        }
                    }
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (open, addr)
}

/// `idle_timeout` closes a kept-alive connection once it has been idle that long: a fleet
/// worker asks thousands of hosts through one shared client, and with the usual 90 s every
/// host of the last minute and a half kept its sockets and buffers (a worker's memory grew
/// with its pipelines). The connection of a fetcher with a long idle timeout stays open
/// meanwhile, so what closed the other is the setting, not the server.
#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    use rsagg_fetch::HostLimits;
    let shared = Arc::new(HostLimits::new(8, None));
    let fetcher = |idle: Duration| {
        Fetcher::sharing(
            FetchConfig {
                idle_timeout: idle,
                ..cfg()
            },
            Some(shared.clone()),
        )
        .unwrap()
    };
    let (short_open, short_addr) = serve_counting_connections().await;
    let (long_open, long_addr) = serve_counting_connections().await;
    let short = fetcher(Duration::from_millis(200));
    let long = fetcher(Duration::from_secs(600));
    for (f, addr) in [(&short, short_addr), (&long, long_addr)] {
        assert_eq!(
            read_all(get_root(f, addr).await.unwrap()).await.unwrap(),
            b"ok"
        );
    }
    assert_eq!(long_open.load(Ordering::SeqCst), 1, "kept alive");
    let deadline = Instant::now() + Duration::from_secs(30);
    while short_open.load(Ordering::SeqCst) > 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not closed within 30 s of its 200 ms idle timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        long_open.load(Ordering::SeqCst),
        1,
        "the connection of the 600 s idle timeout stays open"
    );
}
