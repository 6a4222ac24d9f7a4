//! Configuration: [`FetchConfig`] for the whole client, [`Access`] and [`Auth`] per upstream,
//! [`Request`] per request.

use std::fmt;
use std::time::Duration;

use url::Url;

/// Client-wide limits. One [`crate::Fetcher`] serves every upstream of a run, so these bound
/// what the whole process does to the network.
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// Requests in flight overall (a request holds its permit until its body is dropped).
    pub max_connections: usize,
    /// Requests in flight per `host:port`, so that one slow or small Source is not flooded.
    pub per_host: usize,
    /// Time allowed to establish a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Longest silence allowed while waiting for headers or the next part of a body.
    pub read_timeout: Duration,
    /// How long a kept-alive connection may stay idle before it is closed. Each open
    /// connection costs ~24 KiB of buffers and a socket, and a fleet run talks to thousands
    /// of hosts in turn through one shared client: with the usual 90 s, every host of the
    /// last minute and a half kept its connections (one worker's no-change pass over 4,000
    /// pipelines held ~4,000 sockets and 142 MiB). A short bound makes the idle connections a
    /// worker holds follow how many hosts it asked within this time, not how many it has.
    /// Requests to one host during a harvest follow each other within milliseconds, so the
    /// bound costs a reconnection only where requests are spaced further apart
    /// (`per_host_rate` below one per `idle_timeout`).
    pub idle_timeout: Duration,
    /// Longest time one response may take, headers and body, per attempt (unless the
    /// request gives its own, [`Request::timeout`]). Counted as the time spent waiting for
    /// the upstream, so a caller that pauses reading (a Resource List streamed while its
    /// resources are fetched) is not charged for it. `read_timeout` only bounds silence: an
    /// upstream dripping a byte a second passes it forever, this does not.
    pub body_timeout: Duration,
    /// The deadline of one ResourceSync document, robots.txt or HTML page (discovery and
    /// every list read), in place of `body_timeout`.
    pub document_timeout: Duration,
    /// Average bytes per second below which a body is abandoned, once it has been waited for
    /// longer than `read_timeout` (0: no minimum).
    pub min_rate: u64,
    /// Retries after the first attempt, for timeouts, connection errors, 5xx, 408 and 429.
    pub retries: u32,
    /// First backoff step; the step doubles per retry, the wait is drawn uniformly from
    /// zero to the step ("full jitter"), so retrying clients spread out.
    pub backoff_base: Duration,
    /// Largest backoff step (without a `Retry-After`).
    pub backoff_max: Duration,
    /// Longest `Retry-After` (429, 503; RFC 9110 section 10.2.3) waited for: a shorter one
    /// is waited in full before the retry (never a busy retry sooner than the server
    /// asked), a longer one ends the request at once with [`crate::Error::RetryAfter`], so
    /// the caller parks what it was doing until then and goes on with other work.
    pub retry_after_max: Duration,
    /// Redirects followed per request.
    pub max_redirects: usize,
    /// Requests per second to one host (all its ports), retries and redirect hops included;
    /// `None` for no limit. Sources ask harvesters for a bounded rate, which the concurrency
    /// limits do not give (a fast Source answers many requests per second per connection).
    /// Requests are spaced `1 / rate` apart, without bursts.
    pub per_host_rate: Option<f64>,
    /// `User-Agent` header: Sources' operators look for who is harvesting and how to reach
    /// them there, so the default names the project ([`DEFAULT_USER_AGENT`]) and a deployment
    /// should put its own contact in (`[fetch] contact`).
    pub user_agent: String,
}

/// The `User-Agent` sent when none is configured: product and version, and where to find out
/// about it in the common crawler form `(+URL)`.
pub const DEFAULT_USER_AGENT: &str = concat!(
    "rsagg/",
    env!("CARGO_PKG_VERSION"),
    " (+https://github.com/rsagg/rsagg)"
);

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_connections: 32,
            per_host: 8,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(30 * 60),
            document_timeout: Duration::from_secs(10 * 60),
            min_rate: 1024,
            retries: 4,
            backoff_base: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            retry_after_max: Duration::from_secs(600),
            max_redirects: 5,
            per_host_rate: None,
            user_agent: DEFAULT_USER_AGENT.to_owned(),
        }
    }
}

/// What one upstream may reach and with which credentials.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Allow private, loopback, link-local, unspecified and other non-public targets (for
    /// Sources inside the same network, and tests).
    pub allow_private: bool,
    /// Credentials for the upstream.
    pub auth: Option<Auth>,
    /// Hosts the credentials may be sent to: `host` (any port) or `host:port` (`[v6]:port`
    /// for IPv6), compared case-insensitively with each request's URL, redirect hops included.
    /// Empty means the credentials are never sent.
    pub auth_hosts: Vec<String>,
    /// The upstream the requests are made for, named in log lines (`upstream` field of a
    /// retry) so they can be told apart when several upstreams share one client.
    pub upstream: Option<String>,
}

impl Access {
    /// True when the credentials (if any) may be sent to `url`'s host and port.
    pub fn auth_allowed(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let port = url.port_or_known_default();
        self.auth_hosts.iter().any(|p| host_matches(p, host, port))
    }

    /// The credentials to send to `url`, if any and if allowed there.
    pub fn auth_for(&self, url: &Url) -> Option<&Auth> {
        self.auth.as_ref().filter(|_| self.auth_allowed(url))
    }
}

/// `pattern` is `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_matches(pattern: &str, host: &str, port: Option<u16>) -> bool {
    let pattern = pattern.trim().to_ascii_lowercase();
    let (phost, pport) = if let Some(rest) = pattern.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, tail)) => (h.to_owned(), tail.strip_prefix(':').map(str::to_owned)),
            None => return false,
        }
    } else if pattern.matches(':').count() == 1 {
        let (h, p) = pattern.split_once(':').unwrap_or((&pattern, ""));
        (h.to_owned(), Some(p.to_owned()))
    } else {
        // A bare host, or an unbracketed IPv6 address without port.
        (pattern.clone(), None)
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if !phost.eq_ignore_ascii_case(host) || phost.is_empty() {
        return false;
    }
    match pport {
        None => true,
        Some(p) => p.parse::<u16>().ok().is_some_and(|p| Some(p) == port),
    }
}

/// Credentials of an upstream. `Debug` never prints a secret.
#[derive(Clone)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic …` (RFC 7617).
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Basic { user, .. } => f
                .debug_struct("Basic")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// Per-request options of [`crate::Fetcher::get`].
#[derive(Clone, Debug)]
pub struct Request {
    /// Cap on the body, counted on the bytes actually read (after any gzip inflation), never
    /// trusted from `Content-Length` (a larger announced length fails early, though).
    pub max_bytes: u64,
    /// `If-None-Match` (an ETag from an earlier response).
    pub if_none_match: Option<String>,
    /// `If-Modified-Since` (a `Last-Modified` value from an earlier response).
    pub if_modified_since: Option<String>,
    /// Also inflate bodies that start with the gzip magic number although the server did not
    /// say `Content-Encoding: gzip` (a `.xml.gz` served as `application/gzip`). For documents,
    /// not for resources, whose bytes must stay as served.
    pub inflate_gzip: bool,
    /// The deadline of this response (headers and body); `None`: the client's
    /// [`FetchConfig::body_timeout`]. Documents have their own (`[deadlines] document`).
    pub timeout: Option<Duration>,
    /// Return a 4xx answer that is not retried (all but 408 and 429) with its body, as
    /// [`crate::Fetched::status`] says, instead of failing with [`crate::Error::Status`]:
    /// for protocols whose errors are in the body whatever the status (OAI-PMH 2.0 section
    /// 3.6; InvenioRDM answers `noRecordsMatch` with 422).
    pub error_body: bool,
    /// The content coding the resource is described in (its entry's `encoding`, spec 7,
    /// e.g. `gzip`): asked for with `Accept-Encoding` and the body handed over as sent,
    /// never decoded, so that it can be verified against a `hash` and `length` of the encoded
    /// bytes ([`crate::Fetched::content_encoding`] says what the server applied). `None`: the
    /// client's default (gzip asked for and decoded, as reqwest does).
    pub encoded: Option<String>,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            timeout: None,
            max_bytes: 1 << 30,
            if_none_match: None,
            if_modified_since: None,
            inflate_gzip: false,
            error_body: false,
            encoded: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(hosts: &[&str]) -> Access {
        Access {
            allow_private: false,
            auth: Some(Auth::Bearer("s3cret".into())),
            auth_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            upstream: None,
        }
    }

    #[test]
    fn auth_hosts_match_host_and_port() {
        let a = access(&["Example.org", "api.example.org:8443", "[::1]:9000"]);
        let ok = |u: &str| a.auth_allowed(&Url::parse(u).unwrap());
        assert!(ok("https://example.org/x"));
        assert!(
            ok("http://EXAMPLE.org:8080/x"),
            "bare host matches any port"
        );
        assert!(ok("https://api.example.org:8443/"));
        assert!(!ok("https://api.example.org/"), "port 443 is not 8443");
        assert!(!ok("https://evil.example.org/"));
        assert!(!ok("https://example.org.evil.net/"));
        assert!(ok("http://[::1]:9000/"));
        assert!(!ok("http://[::1]:9001/"));
        assert!(
            Access::default()
                .auth_for(&Url::parse("http://a/").unwrap())
                .is_none()
        );
        assert!(
            access(&[])
                .auth_for(&Url::parse("http://a/").unwrap())
                .is_none()
        );
    }

    #[test]
    fn auth_debug_hides_secrets() {
        let b = format!("{:?}", Auth::Bearer("tok123".into()));
        let c = format!(
            "{:?}",
            Auth::Basic {
                user: "u".into(),
                password: "pw456".into()
            }
        );
        assert!(!b.contains("tok123") && !c.contains("pw456"), "{b} {c}");
        assert!(!format!("{:?}", access(&["x"])).contains("s3cret"));
    }
}
