//! The router: dispatch by path to the collections served, and the listening server.
//!
//! Collections live under base paths that come from configuration, so instead of a fixed
//! route table one handler takes every request: the server-wide paths first (the Source
//! Description, `robots.txt`, the probes `/healthz` and `/readyz`, `/metrics`, `/status`,
//! `/status/{collection}`),
//! then a collection's base path itself (with or without its final `/`: a page pointing to
//! its Capability List), then the collection with the longest base path that prefixes the
//! request path, then within it the copies (`r/…`), the change-notification topic
//! (`change/`) or the allowlisted documents. Everything else is 404.
//!
//! Every answer is counted (by collection, kind and status, with the body bytes sent) for
//! `/metrics`, and so is every request the server makes to the collections' stores (each
//! store is wrapped in one server-wide [`CountedStore`]): `rsagg_serve_store_requests_total`.
//! `/metrics`, `/status` and `/readyz` reuse what they learnt of a collection's store for
//! the refresh bound ([`Options::stats_refresh`]; see `stats.rs`).
//!
//! Around the handler, two layers: tower-http's compression (gzip or brotli, as the client's
//! `Accept-Encoding` prefers) of the `200` answers marked [`Compressible`] (XML documents
//! and the pages, from [`MIN_COMPRESSED`] bytes; never copies, ZIP packages, or ranges), and
//! outside it the counting, so the bytes counted are the bytes sent. A compressed answer's
//! entity tag is made weak (`W/`), as its bytes differ from the identity representation's:
//! conditional GETs (compared weakly) still match, `If-Range` (compared strongly) does not.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::Response;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use rsagg_layout::paths::{CAPABILITY_LIST, TOPIC, capability_list_url};
use rsagg_store::{CountedStore, StoreCounters};
use tokio::time::Instant;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{Predicate, SizeAbove};

use crate::Error;
use crate::callbacks::{Push, SEGMENT, callback as callback_answer};
use crate::collection::{Collection, check_collections};
use crate::copies::{Copies, serve_copy};
use crate::documents::{
    Generated, Refused, base_page, method_not_allowed, object_for, percent_decode, robots,
    serve_object, source_description,
};
use crate::http::{Compressible, compressible, not_found, store_failed, text};
use crate::listen::{Limits, Listeners};
use crate::metrics::{CollectionMetrics, Exposition, HttpCounters, Kind};
use crate::stats::{Observed, StatsReader, StatsRefresh};
use crate::status::{CollectionStatus, Filter};
use crate::topic::Topic;

/// Where `rsagg serve` listens unless told otherwise: loopback only, since exposing the
/// server is a deployment decision (a proxy, or an explicit `--listen 0.0.0.0:8080`).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Liveness: answers `200 ok` whenever the process serves requests.
pub const HEALTHZ: &str = "/healthz";
/// Readiness: `200` when every collection has been published and its store answers, else
/// `503` naming those that are not, and why.
pub const READYZ: &str = "/readyz";
/// Prometheus text exposition (format 0.0.4).
pub const METRICS: &str = "/metrics";
/// The HTML status page: the overview of every collection; `/status/{collection}` is the
/// collection's own page.
pub const STATUS: &str = "/status";

/// Collections whose stores are checked at once by `/metrics` and `/status` (a check is a
/// HEAD or a few, usually answered from what was read: see `stats.rs`).
const OBSERVE_CONCURRENCY: usize = 64;

/// How `/metrics`, `/status` and `/readyz` treat the collections' stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long what a collection's store said is reused (`serve --stats-refresh`).
    pub stats_refresh: StatsRefresh,
    /// `/metrics` writes the series per upstream (`serve --metrics-upstreams`).
    pub metrics_upstreams: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            stats_refresh: StatsRefresh::Auto,
            metrics_upstreams: true,
        }
    }
}

/// The smallest body compressed: below a kilobyte the saving is a few hundred bytes at
/// most, less than the cost of the encoder's state.
pub(crate) const MIN_COMPRESSED: u16 = 1024;

/// How long `/readyz` waits for a store (probes usually give up after a few seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(3);

struct Served {
    collection: Collection,
    copies: Copies,
    stats: StatsReader,
    http: HttpCounters,
    /// Position among the collections as given (the order `/status` and `/metrics` use).
    order: usize,
    /// `Link: <{base_url}capabilitylist.xml>; rel="resourcesync"` of the copies.
    link: HeaderValue,
    /// The change-notification topic, when the collection has a hub.
    topic: Option<Topic>,
    /// How far back its first check is dated (spreads the fleet's checks over the bound).
    phase: Duration,
    /// `/readyz`'s last answer for it before it was found published, and when, reused for
    /// the refresh bound.
    ready: tokio::sync::Mutex<Option<(Instant, Option<String>)>>,
    /// Its Capability List has been found: `/readyz` only asks whether its store answers.
    published: std::sync::atomic::AtomicBool,
}

struct App {
    /// Longest base path first, so the most specific collection answers.
    served: Vec<Served>,
    /// Indexes into `served`, in the order the collections were given.
    given: Vec<usize>,
    description: Generated,
    robots: Generated,
    /// Requests outside every collection.
    http: HttpCounters,
    /// The WebSub callbacks of one collection (`run --follow --listen` only).
    push: Option<Push>,
    /// Every request to the collections' stores.
    store_requests: Arc<StoreCounters>,
    /// How long a check of a store is reused.
    refresh: Duration,
    /// Per-upstream series on `/metrics`.
    metrics_upstreams: bool,
}

impl App {
    fn collection_for<'a>(&'a self, path: &'a str) -> Option<(usize, &'a Served, &'a str)> {
        self.served.iter().enumerate().find_map(move |(i, s)| {
            path.strip_prefix(s.collection.base_path())
                .map(|rest| (i, s, rest))
        })
    }

    /// What the last run of every collection left, in the order given (reused within the
    /// refresh bound; at most [`OBSERVE_CONCURRENCY`] stores asked at once).
    async fn observe(&self) -> Vec<(&Served, Observed)> {
        use futures::StreamExt;
        let now = Instant::now();
        // Made first, then driven (a stream `map` over borrowed collections makes the
        // handler's future not general enough for axum).
        let checks: Vec<_> = self
            .given
            .iter()
            .map(|&i| {
                let s = &self.served[i];
                async move { (s, s.stats.observe(now, s.phase).await) }
            })
            .collect();
        futures::stream::iter(checks)
            .buffered(OBSERVE_CONCURRENCY)
            .collect()
            .await
    }

    /// The collection whose base path is `path`, or `path` and a `/` (its base URL as
    /// someone may type it).
    fn base_of(&self, path: &str) -> Option<(usize, &Served)> {
        self.served.iter().enumerate().find(|(_, s)| {
            let base = s.collection.base_path();
            path == base || base.strip_suffix('/') == Some(path)
        })
    }

    /// The collection named `name`.
    fn named(&self, name: &str) -> Option<&Served> {
        self.served.iter().find(|s| s.collection.name() == name)
    }
}

/// The router serving `collections`: `/.well-known/resourcesync`, `/robots.txt`,
/// `/healthz`, `/readyz`, `/metrics`, `/status` and, under each collection's base path, its
/// published documents and copies. GET and HEAD only.
///
/// Call [`check_collections`] first (as [`Server::bind`] does): of collections sharing a
/// base path, only the first given answers.
pub fn router(collections: Vec<Collection>) -> Router {
    router_with(collections, None)
}

/// [`router`] plus, with `push`, the WebSub callbacks `{base}websub/{upstream}` of that
/// collection (see `callbacks.rs`); without, those paths answer 404 like any other.
pub fn router_with(collections: Vec<Collection>, push: Option<Push>) -> Router {
    router_with_options(collections, push, Options::default())
}

/// [`router_with`], treating the stores as `options` say.
pub fn router_with_options(
    collections: Vec<Collection>,
    push: Option<Push>,
    options: Options,
) -> Router {
    let description = source_description(&collections);
    let robots = robots(&collections);
    let store_requests = Arc::new(StoreCounters::default());
    let n = collections.len();
    let refresh = options.stats_refresh.bound(n);
    let mut served: Vec<Served> = collections
        .into_iter()
        .map(|c| {
            let counted: Arc<dyn object_store::ObjectStore> = Arc::new(CountedStore::new(
                c.objects().clone(),
                store_requests.clone(),
            ));
            c.with_objects(counted)
        })
        .enumerate()
        .map(|(order, collection)| {
            let link = format!(
                "<{}>; rel=\"resourcesync\"",
                capability_list_url(collection.base_url())
            );
            Served {
                topic: collection.hub().map(|hub| {
                    Topic::new(collection.objects().clone(), collection.base_url(), hub)
                }),
                copies: Copies::new(&collection),
                stats: StatsReader::new(collection.objects(), refresh),
                http: HttpCounters::default(),
                order,
                // Collection `i` of `n` first comes due `refresh × (1 − i/n)` after it is
                // first read.
                phase: refresh.mul_f64(order as f64 / n.max(1) as f64),
                ready: tokio::sync::Mutex::new(None),
                published: std::sync::atomic::AtomicBool::new(false),
                // A base URL that parsed as a URL has no characters a header refuses.
                link: HeaderValue::from_str(&link).unwrap_or_else(|_| HeaderValue::from_static("")),
                collection,
            }
        })
        .collect();
    // Stable: of equal base paths the first given stays first.
    served.sort_by_key(|s| std::cmp::Reverse(s.collection.base_path().len()));
    let mut given: Vec<usize> = (0..served.len()).collect();
    given.sort_by_key(|&i| served[i].order);
    let app = Arc::new(App {
        served,
        given,
        description,
        robots,
        http: HttpCounters::default(),
        push,
        store_requests,
        refresh,
        metrics_upstreams: options.metrics_upstreams,
    });
    // Layers added later are outer: counting sees what compression made.
    Router::new()
        .fallback(handle)
        .with_state(app.clone())
        .layer(
            CompressionLayer::new()
                .gzip(true)
                .br(true)
                .compress_when(SizeAbove::new(MIN_COMPRESSED).and(marked_ok)),
        )
        .layer(axum::middleware::map_response_with_state(app, finish))
}

/// Compress only `200` answers marked [`Compressible`] (tower-http already leaves alone
/// answers with a `Content-Range` or a `Content-Encoding`).
fn marked_ok(status: StatusCode, _: Version, _: &HeaderMap, extensions: &Extensions) -> bool {
    status == StatusCode::OK && extensions.get::<Compressible>().is_some()
}

/// Which counters an answer counts for: set by [`handle`], read by [`finish`] outside the
/// compression layer.
#[derive(Debug, Clone, Copy)]
struct Tally {
    /// Index into `served`; `None` for the server-wide paths.
    collection: Option<usize>,
    kind: Kind,
}

fn tallied(mut r: Response, collection: Option<usize>, kind: Kind) -> Response {
    r.extensions_mut().insert(Tally { collection, kind });
    r
}

/// The last step of every answer: a weak entity tag when the body was compressed, and the
/// count of the answer and of the bytes it sends.
async fn finish(State(app): State<Arc<App>>, mut response: Response) -> Response {
    if response.headers().contains_key(header::CONTENT_ENCODING)
        && let Some(etag) = response.headers().get(header::ETAG)
        && !etag.as_bytes().starts_with(b"W/")
    {
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(etag.as_bytes());
        if let Ok(weak) = HeaderValue::from_bytes(&weak) {
            response.headers_mut().insert(header::ETAG, weak);
        }
    }
    let tally = response
        .extensions()
        .get::<Tally>()
        .copied()
        .unwrap_or(Tally {
            collection: None,
            kind: Kind::Other,
        });
    let counters = match tally.collection.and_then(|i| app.served.get(i)) {
        Some(s) => &s.http,
        None => &app.http,
    };
    counted(counters, tally.kind, response)
}

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    if let Some(push) = &app.push {
        let callback = app
            .collection_for(request.uri().path())
            .filter(|(_, s, _)| s.collection.name() == push.collection)
            .and_then(|(i, _, rest)| rest.strip_prefix(SEGMENT).map(|up| (i, up.to_owned())));
        if let Some((i, upstream)) = callback {
            let response = callback_answer(&*push.intake, &upstream, request).await;
            return tallied(response, Some(i), Kind::Other);
        }
    }
    // The body is not `Sync`: only the head is kept across awaits.
    let (parts, _) = request.into_parts();
    let (collection, kind, response) = dispatch(&app, &parts).await;
    tallied(response, collection, kind)
}

/// Counts `response` and the body bytes it sends (as they are sent, when it streams).
fn counted(counters: &HttpCounters, kind: Kind, response: Response) -> Response {
    counters.request(kind, response.status().as_u16());
    let bytes = counters.bytes(kind).clone();
    let (parts, body) = response.into_parts();
    if let Some(n) = body.size_hint().exact() {
        bytes.fetch_add(n, Ordering::Relaxed);
        return Response::from_parts(parts, body);
    }
    // Streamed bodies carry their Content-Length as a header, which hyper keeps.
    let stream = body.into_data_stream().inspect_ok(move |chunk| {
        bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The answer to `request`, with the collection (index into `served`) and kind it counts
/// for.
async fn dispatch(app: &App, request: &Parts) -> (Option<usize>, Kind, Response) {
    let path = request.uri.path();
    let method = &request.method;
    let head = if method == Method::GET {
        false
    } else if method == Method::HEAD {
        true
    } else {
        let c = app.collection_for(path).map(|(i, _, _)| i);
        return (c, Kind::Other, method_not_allowed());
    };
    let headers = &request.headers;
    // Paths are compared as sent, but one that cannot be decoded is malformed everywhere.
    if percent_decode(path).is_none() {
        let c = app.collection_for(path).map(|(i, _, _)| i);
        return (
            c,
            Kind::Other,
            text(
                StatusCode::BAD_REQUEST,
                "malformed percent-encoding in the path\n",
            ),
        );
    }
    match path {
        "/.well-known/resourcesync" => {
            return (None, Kind::Document, app.description.respond(head, headers));
        }
        "/robots.txt" => return (None, Kind::Document, app.robots.respond(head, headers)),
        HEALTHZ => return (None, Kind::Other, uncached(text(StatusCode::OK, "ok\n"))),
        READYZ => return (None, Kind::Other, ready(app).await),
        METRICS => return (None, Kind::Other, metrics(app, head).await),
        STATUS => {
            let r = status(app, head, request.uri.query()).await;
            return (None, Kind::Other, r);
        }
        _ => {}
    }
    // `/status/{collection}`: one segment (a collection whose base path is `/status/` serves
    // its documents further down, or under other names).
    if let Some(name) = path
        .strip_prefix("/status/")
        .filter(|n| !n.is_empty() && !n.contains('/'))
    {
        let r = match percent_decode(name).and_then(|n| app.named(&n)) {
            Some(s) => status_of(s, head).await,
            None => uncached(not_found()),
        };
        return (None, Kind::Other, r);
    }
    // A collection's base URL itself: nothing is published under the empty name, so the
    // page that says where to go (`documents::base_page`).
    if let Some((i, served)) = app.base_of(path) {
        return (Some(i), Kind::Other, base_of(served, head).await);
    }
    let Some((i, served, rest)) = app.collection_for(path) else {
        return (None, Kind::Other, not_found());
    };
    let objects = served.collection.objects();
    if rest.starts_with("r/") {
        let r = match served.copies.lookup(rest).await {
            Ok(Some(info)) => serve_copy(objects, &info, &served.link, head, headers).await,
            Ok(None) => not_found(),
            Err(e) => store_failed("looking up a copy", &e),
        };
        return (Some(i), Kind::Copy, r);
    }
    if rest == TOPIC {
        return match &served.topic {
            Some(topic) => (Some(i), Kind::Document, topic.respond(head).await),
            None => (Some(i), Kind::Other, not_found()),
        };
    }
    let r = match object_for(rest) {
        Ok(object) => {
            return (
                Some(i),
                Kind::Document,
                serve_object(objects, &object, head, headers).await,
            );
        }
        Err(Refused::BadEncoding) => text(
            StatusCode::BAD_REQUEST,
            "malformed percent-encoding in the path\n",
        ),
        Err(Refused::NotListed) => not_found(),
    };
    (Some(i), Kind::Other, r)
}

/// The page at the base URL of the collection of `s`: `200` when it has been published (its
/// Capability List found once, as `/readyz` records, or now by a HEAD), `404` before, `502`
/// when its store fails.
async fn base_of(s: &Served, head: bool) -> Response {
    let published = s.published.load(Ordering::Relaxed) || {
        let list = object_store::path::Path::from(CAPABILITY_LIST);
        match s.collection.objects().head(&list).await {
            Ok(_) => {
                // The publisher replaces it in place and never deletes it.
                s.published.store(true, Ordering::Relaxed);
                true
            }
            Err(object_store::Error::NotFound { .. }) => false,
            Err(source) => {
                let e = Error::ObjectStore {
                    path: CAPABILITY_LIST.to_owned(),
                    source,
                };
                return store_failed("looking for the Capability List", &e);
            }
        }
    };
    base_page(&s.collection, &s.link, published, head)
}

/// `Cache-Control: no-store`: probes, metrics and the status page are always current.
fn uncached(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A page made for this request (`/metrics`, `/status`); no body for HEAD. Redacted
/// ([`rsagg_model::redact()`]): the pages show what the stats objects and the configs hold —
/// warnings and errors quoting URLs, hub URLs — and a credential in one of them (an older
/// stats object, written before runs redacted theirs) must not be served to anyone.
fn page(content_type: &'static str, body: String, head: bool) -> Response {
    let body = match rsagg_model::redact(&body) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(o) => o,
    };
    let len = body.len();
    let mut r = Response::new(if head {
        Body::empty()
    } else {
        Body::from(body)
    });
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    compressible(uncached(r))
}

/// `/readyz`: every collection has been published (its Capability List exists: what
/// `/.well-known/resourcesync` advertises can be fetched) and its store answers, each within
/// [`READY_TIMEOUT`]; else `503` with one line per collection that is not, saying why (a
/// missing bucket, a store that does not answer, a collection no run has published yet).
/// The state database is never touched. See [`not_ready_now`] for what a probe asks.
async fn ready(app: &App) -> Response {
    let list = object_store::path::Path::from(CAPABILITY_LIST);
    let now = Instant::now();
    let checks = app.given.iter().map(|&i| {
        let s = &app.served[i];
        let list = &list;
        async move {
            let why =
                match tokio::time::timeout(READY_TIMEOUT, not_ready_now(app, s, list, now)).await {
                    Ok(why) => why?,
                    Err(_) => format!("the store does not answer within {READY_TIMEOUT:?}"),
                };
            tracing::warn!(collection = s.collection.name(), reason = %why, "not ready");
            Some(format!("collection `{}`: {why}\n", s.collection.name()))
        }
    });
    let failed: Vec<String> = futures::future::join_all(checks)
        .await
        .into_iter()
        .flatten()
        .collect();
    if failed.is_empty() {
        return uncached(text(StatusCode::OK, "ready\n"));
    }
    let body = std::iter::once("not ready\n".to_owned())
        .chain(failed)
        .collect::<String>();
    uncached(text(StatusCode::SERVICE_UNAVAILABLE, body))
}

/// Why the collection of `s` is not ready at `now`, at little cost: a probe every few
/// seconds must not ask every store each time. Until its Capability List has been found,
/// [`not_ready`], its answer reused for the refresh bound. Once found (the publisher
/// replaces it in place, never deletes it), only whether the store answered the last check
/// of what the runs left: the check `/metrics` and `/status` share, reused for the bound,
/// so a scraped server's probes ask nothing more.
async fn not_ready_now(
    app: &App,
    s: &Served,
    list: &object_store::path::Path,
    now: Instant,
) -> Option<String> {
    if s.published.load(Ordering::Relaxed) {
        let observed = s.stats.observe(now, s.phase).await;
        return observed
            .store
            .err()
            .map(|e| format!("the store does not answer: {e}"));
    }
    let mut last = s.ready.lock().await;
    if let Some((at, why)) = last.as_ref()
        && now.saturating_duration_since(*at) < app.refresh
    {
        return why.clone();
    }
    let why = not_ready(&s.collection, list).await;
    if why.is_none() {
        s.published.store(true, Ordering::Relaxed);
    }
    let at = match last.as_ref() {
        None => now.checked_sub(s.phase).unwrap_or(now),
        Some(_) => now,
    };
    *last = Some((at, why.clone()));
    why
}

/// Why the collection `c` cannot be served yet, or `None` when it can. A HEAD of its
/// Capability List; when that is not found, a LIST of one object tells a store that
/// answers (nothing published there yet) from one that cannot (S3 answers a HEAD in a
/// missing bucket with a bare 404, a LIST with `NoSuchBucket`).
async fn not_ready(c: &Collection, list: &object_store::path::Path) -> Option<String> {
    match c.objects().head(list).await {
        Ok(_) => None,
        Err(object_store::Error::NotFound { .. }) => {
            let mut objects = c.objects().list(None);
            match objects.try_next().await {
                Err(e) => Some(rsagg_store::one_line(&e)),
                Ok(_) => Some(format!(
                    "not published yet ({CAPABILITY_LIST} is not in its store: no run has completed a pass)"
                )),
            }
        }
        Err(e) => Some(format!(
            "the store does not answer: {}",
            rsagg_store::one_line(&e)
        )),
    }
}

/// `/metrics`.
async fn metrics(app: &App, head: bool) -> Response {
    let observed = app.observe().await;
    let collections: Vec<CollectionMetrics<'_>> = observed
        .iter()
        .map(|(s, o)| CollectionMetrics {
            name: s.collection.name(),
            observed: o,
            http: &s.http,
            live_push: app
                .push
                .as_ref()
                .filter(|p| p.collection == s.collection.name())
                .and_then(|p| p.stats.as_ref())
                .map(|stats| stats()),
        })
        .collect();
    let exposition = Exposition {
        upstreams: app.metrics_upstreams,
        store_requests: app.store_requests.snapshot().total(),
    };
    let body = crate::metrics::render(&collections, &app.http, SystemTime::now(), exposition);
    page(crate::metrics::CONTENT_TYPE, body, head)
}

fn status_row<'a>(s: &'a Served, o: &'a Observed) -> CollectionStatus<'a> {
    CollectionStatus {
        name: s.collection.name(),
        base_url: s.collection.base_url(),
        base_path: s.collection.base_path(),
        observed: o,
    }
}

/// `/status`: the overview, filtered as the query asks (400 for a filter it cannot use).
async fn status(app: &App, head: bool, query: Option<&str>) -> Response {
    let filter = match Filter::parse(query) {
        Ok(f) => f,
        Err(e) => return uncached(text(StatusCode::BAD_REQUEST, format!("/status: {e}\n"))),
    };
    let observed = app.observe().await;
    let collections: Vec<CollectionStatus<'_>> =
        observed.iter().map(|(s, o)| status_row(s, o)).collect();
    let body = crate::status::render_overview(&collections, &filter, SystemTime::now());
    page(crate::status::CONTENT_TYPE, body, head)
}

/// `/status/{collection}`: that collection's page.
async fn status_of(s: &Served, head: bool) -> Response {
    let observed = s.stats.observe(Instant::now(), s.phase).await;
    let body = crate::status::render_detail(&status_row(s, &observed), SystemTime::now());
    page(crate::status::CONTENT_TYPE, body, head)
}

/// A bound listener with the router of the collections it serves.
#[derive(Debug)]
pub struct Server {
    listeners: Listeners,
    router: Router,
}

impl Server {
    /// Checks that `collections` can be served together, then binds `listen`
    /// (`HOST:PORT`; port 0 picks a free one, see [`Server::local_addr`]).
    pub async fn bind(listen: &str, collections: Vec<Collection>) -> Result<Server, Error> {
        Server::bind_with(listen, collections, None).await
    }

    /// [`Server::bind`] with the WebSub callbacks of one collection (`run --follow
    /// --listen`).
    pub async fn bind_with(
        listen: &str,
        collections: Vec<Collection>,
        push: Option<Push>,
    ) -> Result<Server, Error> {
        Server::bind_with_options(listen, collections, push, Options::default()).await
    }

    /// [`Server::bind_with`], treating the stores as `options` say (`serve
    /// --stats-refresh`, `--metrics-upstreams`).
    pub async fn bind_with_options(
        listen: &str,
        collections: Vec<Collection>,
        push: Option<Push>,
        options: Options,
    ) -> Result<Server, Error> {
        check_collections(&collections)?;
        Ok(Server {
            listeners: Listeners::bind(listen).await?,
            router: router_with_options(collections, push, options),
        })
    }

    /// Serves within `limits` (header read timeout, concurrent connections) instead of
    /// [`Limits::default`].
    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.listeners.set_limits(limits);
        self
    }

    /// The address actually bound (what `listening http://HOST:PORT` reports).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listeners.local_addr()
    }

    /// Also binds `listen` (`HOST:PORT`) for the probes only (`/healthz`, `/readyz`), served
    /// with a connection pool of their own so a flood of the main listener cannot starve
    /// them (see `listen.rs`).
    pub async fn bind_probes(mut self, listen: &str) -> Result<Server, Error> {
        self.listeners.bind_probes(listen).await?;
        Ok(self)
    }

    /// The address the probe listener bound, if any.
    pub fn probe_addr(&self) -> Result<Option<SocketAddr>, Error> {
        self.listeners.probe_addr()
    }

    /// Serves within its [`Limits`] until `shutdown` resolves, then stops accepting and lets
    /// requests in flight finish (graceful shutdown, so a restart does not cut a
    /// Destination's download).
    pub async fn run<F>(self, shutdown: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.listeners.serve(self.router, shutdown).await;
        Ok(())
    }
}
