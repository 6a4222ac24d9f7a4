//! [`Fetcher`]: GET with bounded concurrency, retries, manual redirects and the address guard.
//!
//! Redirects are followed here rather than by reqwest, so that every hop goes through the same
//! steps as the first request: the address guard on IP literals, the per-host permit and the
//! rate limit of the hop's host, credentials only if the hop's host is in `auth_hosts`, and the retry policy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use tokio::sync::Semaphore;
use tracing::warn;
use url::Url;

use crate::body::{Body, Clock, Permits};
use crate::config::{Access, Auth, FetchConfig, Request};
use crate::counters::{Counters, FetchCounts, Outcome as Counted};
use crate::guard::{check_target, client_builder, find_refusal};
use crate::link::{LinkValue, parse_link_header};
use crate::rate::HostRate;
use crate::{Cause, Error};

/// Per-host semaphores kept before idle ones are dropped from the map.
const HOST_MAP_PRUNE: usize = 1024;

/// The head of a successful response (200-299 or 304) and its body.
#[derive(Debug)]
pub struct Fetched {
    /// Final URL, after redirects.
    pub url: Url,
    /// Status code.
    pub status: u16,
    /// True for 304 Not Modified (conditional GET): the stored copy is current.
    pub not_modified: bool,
    /// `ETag`, as sent.
    pub etag: Option<String>,
    /// `Last-Modified`, raw header value (reuse it for `If-Modified-Since`).
    pub last_modified: Option<String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Content-Length` as announced (absent when reqwest inflated `Content-Encoding: gzip`;
    /// of the compressed bytes when the body is inflated by magic number). Never trusted for
    /// the cap.
    pub content_length: Option<u64>,
    /// `Content-Encoding` as sent, when the body was handed over undecoded
    /// ([`Request::encoded`]; reqwest removes it from a body it decoded).
    pub content_encoding: Option<String>,
    /// Parsed `Link` headers (RFC 8288), targets resolved against `url`.
    pub links: Vec<LinkValue>,
    /// The body (empty for 304).
    pub body: Body,
}

impl Fetched {
    /// The first `Link` header value with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<&LinkValue> {
        self.links.iter().find(|l| l.has_rel(rel))
    }
}

/// Politeness towards hosts shared by several [`Fetcher`]s: the pipelines of one fleet run
/// (`rsagg run P.toml…`), each with its own client and `[fetch]` settings, ask one host
/// through one set of limits, so N pipelines naming the same Source do not send it N times
/// what one may. Per `host:port`, at most `per_host` requests in flight from all of them
/// together; per host, one schedule of send slots that every fetcher's rate
/// (`per_host_rate`, or the fleet's `rate` when stricter) spaces its requests on.
///
/// It also keeps the HTTP clients the fetchers are built on, one pair (guarded, open) per
/// distinct client setting: building one loads the TLS roots (milliseconds each, which a
/// fleet of thousands of pipelines would pay twice per pipeline), and a shared client shares
/// its pool of kept-alive connections, so pipelines asking one host reuse its connections.
#[derive(Debug)]
pub struct HostLimits {
    per_host: usize,
    /// The fleet's own spacing per host, if any.
    rate: Option<Duration>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    slots: HostRate,
    clients: Mutex<HashMap<ClientKey, Clients>>,
}

/// What a client is built with: user agent, connect timeout, read timeout, idle timeout.
type ClientKey = (String, Duration, Duration, Duration);

/// A client pair: guarded, open.
type Clients = (reqwest::Client, reqwest::Client);

/// Client pairs [`HostLimits`] keeps at most (distinct `[fetch]` settings); beyond, the
/// fetchers of further settings build their own.
const CLIENTS_KEPT: usize = 64;

impl HostLimits {
    /// Limits of at most `per_host` requests in flight per `host:port` (at least 1) and,
    /// with `rate`, at most `rate` requests per second per host, from every fetcher sharing
    /// them.
    pub fn new(per_host: usize, rate: Option<f64>) -> HostLimits {
        HostLimits {
            per_host: per_host.max(1),
            rate: HostRate::interval_of(rate),
            hosts: Mutex::new(HashMap::new()),
            slots: HostRate::shared(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The client pair for `cfg`'s settings: kept, or built by `build` (and kept).
    fn clients(
        &self,
        cfg: &FetchConfig,
        build: impl Fn(bool) -> Result<reqwest::Client, Error>,
    ) -> Result<Clients, Error> {
        let key = (
            cfg.user_agent.clone(),
            cfg.connect_timeout,
            cfg.read_timeout,
            cfg.idle_timeout,
        );
        let mut kept = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = kept.get(&key) {
            return Ok(c.clone());
        }
        let pair = (build(true)?, build(false)?);
        if kept.len() < CLIENTS_KEPT {
            kept.insert(key, pair.clone());
        }
        Ok(pair)
    }

    /// The semaphore of `key` (`host:port`), made on first use; idle ones are dropped once
    /// the map is large.
    fn semaphore(&self, key: String) -> Arc<Semaphore> {
        host_semaphore(&self.hosts, key, self.per_host)
    }
}

/// The semaphore of `key` in `hosts` (`per_host` permits), made on first use; once the map
/// holds [`HOST_MAP_PRUNE`] hosts, those nobody holds or waits for are dropped first.
fn host_semaphore(
    hosts: &Mutex<HashMap<String, Arc<Semaphore>>>,
    key: String,
    per_host: usize,
) -> Arc<Semaphore> {
    let mut hosts = hosts.lock().unwrap_or_else(|p| p.into_inner());
    if hosts.len() >= HOST_MAP_PRUNE {
        hosts.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < per_host);
    }
    hosts
        .entry(key)
        .or_insert_with(|| Arc::new(Semaphore::new(per_host)))
        .clone()
}

struct Inner {
    cfg: FetchConfig,
    /// Limits shared with other fetchers (a fleet run), on top of this one's own.
    shared: Option<Arc<HostLimits>>,
    /// Resolves through the guard; for upstreams without `allow_private`.
    guarded: reqwest::Client,
    /// Plain resolver; for upstreams with `allow_private`.
    open: reqwest::Client,
    /// The same two without decoding `Content-Encoding` (guarded, open), for resources
    /// described in an encoding ([`Request::encoded`]); built on first use (few Sources
    /// describe encoded resources, and building a client loads the TLS roots).
    undecoded: tokio::sync::OnceCell<Clients>,
    global: Arc<Semaphore>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Send slots per host, when `per_host_rate` is set.
    rate: Option<HostRate>,
    /// Requests by outcome, retries, bytes, durations.
    counters: Counters,
}

/// The HTTP client of a run; cheap to clone (an `Arc` inside), share one everywhere so the
/// concurrency limits hold for the whole process.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("cfg", &self.inner.cfg)
            .finish()
    }
}

/// One client of `cfg`'s settings: `guarded` (through the address guard's resolver) or
/// open, decoding `Content-Encoding: gzip` (reqwest's default) or handing bodies over as
/// sent (`decode` false: no `Accept-Encoding` is added either).
fn build_client(cfg: &FetchConfig, guarded: bool, decode: bool) -> Result<reqwest::Client, Error> {
    let b = client_builder(!guarded)
        .user_agent(cfg.user_agent.clone())
        .connect_timeout(cfg.connect_timeout)
        .read_timeout(cfg.read_timeout)
        .pool_idle_timeout(cfg.idle_timeout);
    let b = if decode { b } else { b.no_gzip() };
    b.build().map_err(Error::Client)
}

/// What one attempt ended with, for the retry decision.
enum Outcome {
    /// The response, its permits, and how long its headers took.
    Done(reqwest::Response, Permits, Duration),
    Retry {
        reason: String,
        retry_after: Option<Duration>,
        last: Error,
    },
    Fail(Error),
}

impl Fetcher {
    /// Builds the two clients (guarded and open) with the configured timeouts and user agent,
    /// no proxies (a proxy would connect on the guard's behalf) and no automatic redirects.
    pub fn new(cfg: FetchConfig) -> Result<Self, Error> {
        Fetcher::sharing(cfg, None)
    }

    /// [`Fetcher::new`], and every request also within `shared` (the per-host limits of all
    /// the pipelines of a fleet run): its own limits still hold as well.
    pub fn sharing(cfg: FetchConfig, shared: Option<Arc<HostLimits>>) -> Result<Self, Error> {
        let build = |guarded: bool| build_client(&cfg, guarded, true);
        let (guarded, open) = match &shared {
            Some(limits) => limits.clients(&cfg, build)?,
            None => (build(true)?, build(false)?),
        };
        Ok(Fetcher {
            inner: Arc::new(Inner {
                guarded,
                open,
                undecoded: tokio::sync::OnceCell::new(),
                global: Arc::new(Semaphore::new(cfg.max_connections.max(1))),
                hosts: Mutex::new(HashMap::new()),
                rate: HostRate::new(cfg.per_host_rate),
                counters: Counters::default(),
                shared,
                cfg,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FetchConfig {
        &self.inner.cfg
    }

    /// What this fetcher (and its clones) sent and received so far.
    pub fn counts(&self) -> FetchCounts {
        self.inner.counters.snapshot()
    }

    /// The deadline of one response to `req`.
    fn timeout_of(&self, req: &Request) -> Duration {
        req.timeout.unwrap_or(self.inner.cfg.body_timeout)
    }

    /// GET with retries; returns once headers arrived (status 2xx or 304). Redirects
    /// (301, 302, 303, 307, 308) are followed up to `max_redirects`, each hop checked by the
    /// guard and given credentials only if its host is in `access.auth_hosts`.
    ///
    /// Errors: other 4xx at once, 5xx/429/408 and transport errors after the retries, a
    /// `Content-Length` above the cap (unless inflating), guard refusal, too many redirects.
    /// The returned body holds two concurrency permits until it is dropped or read to the end.
    pub async fn get(&self, url: &Url, access: &Access, req: &Request) -> Result<Fetched, Error> {
        let mut current = url.clone();
        let mut redirects = 0usize;
        loop {
            let (resp, permits, waited) = self.send_retrying(&current, access, req).await?;
            let status = resp.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let next = resp
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|loc| current.join(loc.trim()).ok());
                drop(resp);
                drop(permits);
                let Some(next) = next else {
                    return Err(Error::BadRedirect {
                        url: current,
                        status: status.as_u16(),
                    });
                };
                if redirects >= self.inner.cfg.max_redirects {
                    return Err(Error::TooManyRedirects {
                        url: url.clone(),
                        limit: self.inner.cfg.max_redirects,
                    });
                }
                redirects += 1;
                current = next;
                continue;
            }
            return self.fetched(current, resp, permits, req, waited).await;
        }
    }

    /// Small documents (robots.txt, HTML pages): the whole body, at most `max_bytes`
    /// (more is [`Error::TooLarge`]). `Content-Encoding: gzip` is inflated; the returned
    /// [`Fetched::body`] is empty.
    pub async fn get_bytes(
        &self,
        url: &Url,
        access: &Access,
        max_bytes: u64,
    ) -> Result<(Fetched, Bytes), Error> {
        let req = Request {
            max_bytes,
            timeout: Some(self.inner.cfg.document_timeout),
            ..Request::default()
        };
        self.get_whole(url, access, &req).await
    }

    /// [`Fetcher::get_bytes`] with every option of `req` (its `max_bytes` bounds the body).
    pub async fn get_whole(
        &self,
        url: &Url,
        access: &Access,
        req: &Request,
    ) -> Result<(Fetched, Bytes), Error> {
        let mut f = self.get(url, access, req).await?;
        let body = std::mem::replace(&mut f.body, Body::empty(f.url.clone()));
        let bytes = body.bytes().await?;
        Ok((f, bytes))
    }

    async fn fetched(
        &self,
        url: Url,
        resp: reqwest::Response,
        permits: Permits,
        req: &Request,
        waited: Duration,
    ) -> Result<Fetched, Error> {
        let h = resp.headers();
        let text = |name: header::HeaderName| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_owned())
        };
        let status = resp.status();
        let etag = text(header::ETAG);
        let last_modified = text(header::LAST_MODIFIED);
        let content_type = text(header::CONTENT_TYPE);
        let content_length = text(header::CONTENT_LENGTH).and_then(|s| s.parse::<u64>().ok());
        let content_encoding = text(header::CONTENT_ENCODING);
        let links = h
            .get_all(header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| parse_link_header(v, &url))
            .collect();
        let not_modified = status == StatusCode::NOT_MODIFIED;
        let body = if not_modified {
            drop(resp);
            drop(permits);
            Body::empty(url.clone())
        } else {
            if !req.inflate_gzip && content_length.is_some_and(|n| n > req.max_bytes) {
                return Err(Error::TooLarge {
                    url,
                    limit: req.max_bytes,
                });
            }
            let u = url.clone();
            // With the bytes counted, a connection that ends early says how early.
            let raw = resp.bytes_stream().scan(0u64, move |read, chunk| {
                let chunk = match chunk {
                    Ok(b) => {
                        *read += b.len() as u64;
                        Ok(b)
                    }
                    Err(e) => Err(body_error(&u, e, *read, content_length)),
                };
                futures::future::ready(Some(chunk))
            });
            let cfg = &self.inner.cfg;
            let clock = Clock::new(self.timeout_of(req), cfg.min_rate, cfg.read_timeout, waited);
            Body::new(
                url.clone(),
                Box::pin(raw),
                req.max_bytes,
                req.inflate_gzip,
                Some(permits),
                Some(clock),
            )
            .await?
            .counting(self.inner.counters.bytes.clone())
        };
        Ok(Fetched {
            url,
            status: status.as_u16(),
            not_modified,
            etag,
            last_modified,
            content_type,
            content_length,
            content_encoding,
            links,
            body,
        })
    }

    /// One hop, with retries and backoff.
    async fn send_retrying(
        &self,
        url: &Url,
        access: &Access,
        req: &Request,
    ) -> Result<(reqwest::Response, Permits, Duration), Error> {
        let cfg = &self.inner.cfg;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.attempt(url, access, req, attempt).await {
                Outcome::Done(resp, permits, waited) => return Ok((resp, permits, waited)),
                Outcome::Fail(e) => return Err(e),
                Outcome::Retry {
                    reason,
                    retry_after,
                    last,
                } => {
                    if let (Some(ra), Error::Status { url, status, .. }) = (retry_after, &last)
                        && ra > cfg.retry_after_max
                    {
                        return Err(Error::RetryAfter {
                            url: url.clone(),
                            status: *status,
                            retry_after: ra,
                        });
                    }
                    if attempt > cfg.retries {
                        return Err(last);
                    }
                    // The server's `Retry-After` in full: retrying sooner than it asked is
                    // what gets a harvester blocked.
                    let wait = match retry_after {
                        Some(ra) => ra,
                        None => backoff(cfg.backoff_base, cfg.backoff_max, attempt - 1),
                    };
                    warn!(
                        upstream = access.upstream.as_deref(),
                        uri = %url,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        error = %reason,
                        "retrying request"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn attempt(&self, url: &Url, access: &Access, req: &Request, attempt: u32) -> Outcome {
        if let Err(e) = check_target(url, access.allow_private) {
            return Outcome::Fail(e);
        }
        let permits = self.permits(url).await;
        let pair = match &req.encoded {
            None => (&self.inner.guarded, &self.inner.open),
            Some(_) => {
                let cfg = &self.inner.cfg;
                let built = self
                    .inner
                    .undecoded
                    .get_or_try_init(|| async {
                        Ok::<_, Error>((
                            build_client(cfg, true, false)?,
                            build_client(cfg, false, false)?,
                        ))
                    })
                    .await;
                match built {
                    Ok((guarded, open)) => (guarded, open),
                    Err(e) => return Outcome::Fail(e),
                }
            }
        };
        let client = if access.allow_private { pair.1 } else { pair.0 };
        let mut rb = client.get(url.clone());
        if let Some(coding) = &req.encoded {
            rb = rb.header(header::ACCEPT_ENCODING, coding.as_str());
        }
        if let Some(v) = &req.if_none_match {
            rb = rb.header(header::IF_NONE_MATCH, v);
        }
        if let Some(v) = &req.if_modified_since {
            rb = rb.header(header::IF_MODIFIED_SINCE, v);
        }
        match access.auth_for(url) {
            Some(Auth::Bearer(token)) => rb = rb.bearer_auth(token),
            Some(Auth::Basic { user, password }) => rb = rb.basic_auth(user, Some(password)),
            None => {}
        }
        // The headers count towards the response's deadline (a server may drip them too).
        let limit = self.timeout_of(req);
        let started = tokio::time::Instant::now();
        let answer = match tokio::time::timeout(limit, rb.send()).await {
            Ok(r) => r,
            Err(_) => {
                self.inner
                    .counters
                    .attempt(Counted::Transport, started.elapsed(), attempt);
                return Outcome::Fail(Error::Deadline {
                    url: url.clone(),
                    reason: format!(
                        "no response headers within the deadline of {}",
                        crate::body::humanize(limit)
                    ),
                });
            }
        };
        let waited = started.elapsed();
        let counted = match &answer {
            Ok(resp) => Counted::of(resp.status().as_u16()),
            Err(e) if e.is_builder() || find_refusal(e).is_some() => {
                return self.answer(url, answer, permits, attempt, waited, req.error_body);
            }
            Err(_) => Counted::Transport,
        };
        self.inner.counters.attempt(counted, waited, attempt);
        self.answer(url, answer, permits, attempt, waited, req.error_body)
    }

    /// The retry decision on what one attempt got (`waited`: how long its headers took).
    fn answer(
        &self,
        url: &Url,
        answer: Result<reqwest::Response, reqwest::Error>,
        permits: Permits,
        attempt: u32,
        waited: Duration,
        error_body: bool,
    ) -> Outcome {
        match answer {
            Ok(resp) => {
                let status = resp.status();
                if status.is_success() || status.is_redirection() {
                    return Outcome::Done(resp, permits, waited);
                }
                if error_body
                    && status.is_client_error()
                    && status != StatusCode::TOO_MANY_REQUESTS
                    && status != StatusCode::REQUEST_TIMEOUT
                {
                    return Outcome::Done(resp, permits, waited);
                }
                let code = status.as_u16();
                let last = Error::Status {
                    url: url.clone(),
                    status: code,
                    attempts: attempt,
                };
                if status.is_server_error()
                    || status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::REQUEST_TIMEOUT
                {
                    let retry_after = retry_after(resp.headers());
                    Outcome::Retry {
                        reason: format!("HTTP status {code}"),
                        retry_after,
                        last,
                    }
                } else {
                    Outcome::Fail(last)
                }
            }
            Err(e) => {
                if let Some(reason) = find_refusal(&e) {
                    return Outcome::Fail(Error::Refused {
                        url: url.clone(),
                        reason,
                    });
                }
                // A name that does not resolve does not start resolving a second later:
                // retrying it only delays the error (5 retries took 4 s per URL).
                if e.is_builder() || crate::cause::classify(&e) == Cause::Dns {
                    return Outcome::Fail(transport_error(url, e, attempt));
                }
                let reason = crate::cause::chain(&e);
                Outcome::Retry {
                    reason,
                    retry_after: None,
                    last: transport_error(url, e, attempt),
                }
            }
        }
    }

    /// Waits for the host's permit first, then the host's send slot (`per_host_rate`), then
    /// the global permit, so a request queued behind a busy or rate-limited host does not hold
    /// a global slot other hosts could use. The slot is taken while holding the host permit so
    /// that requests waiting for a permit do not bank slots and then go out in a burst.
    async fn permits(&self, url: &Url) -> Permits {
        let key = format!(
            "{}:{}",
            url.host_str().unwrap_or(""),
            url.port_or_known_default().unwrap_or(0)
        );
        let per_host = self.inner.cfg.per_host.max(1);
        let sem = host_semaphore(&self.inner.hosts, key.clone(), per_host);
        // The semaphores are never closed, so acquiring cannot fail.
        let host = sem
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable_closed());
        // Then the fleet's permit for the host (after this fetcher's own, so a pipeline's
        // queue behind its own limit holds none of the fleet's).
        let shared = match &self.inner.shared {
            Some(limits) => Some(
                limits
                    .semaphore(key)
                    .acquire_owned()
                    .await
                    .unwrap_or_else(|_| unreachable_closed()),
            ),
            None => None,
        };
        // Per host, not per port: the rate protects the machine behind the name.
        let host_name = url.host_str().unwrap_or("");
        match &self.inner.shared {
            // One schedule for the fleet: each request is spaced by the stricter of this
            // pipeline's rate and the fleet's.
            Some(limits) => {
                let own = self.inner.rate.as_ref().map(HostRate::interval);
                if let Some(interval) = own.into_iter().chain(limits.rate).max() {
                    limits.slots.wait_for(host_name, interval).await;
                }
            }
            None => {
                if let Some(rate) = &self.inner.rate {
                    rate.wait(host_name).await;
                }
            }
        }
        let global = self
            .inner
            .global
            .clone()
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable_closed());
        Permits {
            _host: host,
            _shared: shared,
            _global: global,
        }
    }
}

#[cold]
fn unreachable_closed() -> ! {
    panic!("rsagg-fetch semaphores are never closed")
}

/// Maps a reqwest error to the crate error, keeping timeouts apart, with the cause chain
/// written out (without reqwest's copy of the URL, which the crate error names first).
pub(crate) fn transport_error(url: &Url, e: reqwest::Error, attempts: u32) -> Error {
    let e = e.without_url();
    let transport = Box::new(crate::Transport {
        cause: crate::cause::classify(&e),
        chain: crate::cause::chain(&e),
    });
    if e.is_timeout() && transport.cause != Cause::ConnectTimeout {
        Error::Timeout {
            url: url.clone(),
            attempts,
            transport,
        }
    } else {
        Error::Http {
            url: url.clone(),
            attempts,
            transport,
        }
    }
}

/// A body transfer error of `url`: [`Error::Truncated`] when fewer than the `expected`
/// (`Content-Length`) bytes had come (what reqwest calls `error decoding response body`),
/// else as [`transport_error`].
fn body_error(url: &Url, e: reqwest::Error, read: u64, expected: Option<u64>) -> Error {
    match expected {
        Some(expected) if read < expected => Error::Truncated {
            url: url.clone(),
            read,
            expected,
        },
        _ => transport_error(url, e, 1),
    }
}

/// Full-jitter exponential backoff: uniform in `[0, min(max, base * 2^retry)]`.
pub(crate) fn backoff(base: Duration, max: Duration, retry: u32) -> Duration {
    let step = base
        .checked_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max);
    let nanos = step.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(fastrand::u64(0..=nanos))
}

/// `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 section 10.2.3); a date in the
/// past means no wait.
pub(crate) fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_is_bounded_and_grows() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for retry in 0..40 {
            let cap = (base * 2u32.saturating_pow(retry.min(20))).min(max);
            for _ in 0..50 {
                assert!(backoff(base, max, retry) <= cap);
            }
        }
        // Jitter: not always the same value.
        let v: Vec<_> = (0..20).map(|_| backoff(base, max, 5)).collect();
        assert!(v.iter().any(|d| *d != v[0]));
    }

    #[test]
    fn parses_retry_after() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
