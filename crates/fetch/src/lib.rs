//! rsagg's HTTP client for upstream Sources: bounded concurrency (overall and per host), an
//! optional request rate per host and a configurable `User-Agent` (politeness towards Sources),
//! retries with exponential backoff and full jitter, conditional GET, size caps counted on the
//! bytes actually read (after any gzip inflation), a limit on redirects, per-upstream
//! credentials sent only to the hosts they belong to, and a guard that refuses private,
//! loopback and link-local targets where connections are made. On top of it, ResourceSync
//! discovery (spec section 6.3) from any entry point to the Capability Lists of a Source.
//!
//! Upstreams are not trusted (see the design brief): every body is capped, every redirect hop
//! is checked again, and the guard judges the address a connection is actually made to, not
//! the text of a URL.
//!
//! # Layout
//!
//! - [`config`]: [`FetchConfig`] (client-wide limits), [`Access`] and [`Auth`] (per upstream),
//!   [`Request`] (per request).
//! - [`client`]: [`Fetcher`] (`get`, `get_bytes`) and [`Fetched`], the response head;
//!   [`HostLimits`], the per-host politeness several fetchers share (a fleet run).
//! - [`body`]: [`Body`], the streamed, capped, optionally inflated response body that holds
//!   the concurrency permits until dropped, with its deadline and minimum rate (counted on
//!   the time spent waiting for the upstream).
//! - [`cause`]: [`Cause`], what a transport failure was (DNS, refused, reset, TLS, …), read
//!   from the causes reqwest hides behind `error sending request`, and the chain written out.
//! - [`guard`]: the address classifier, the resolver that enforces it, and the client
//!   builder and target check the other outgoing requests of rsagg (the hub's, the
//!   subscriber's) reuse.
//! - [`link`]: HTTP `Link` header parsing (RFC 8288) into [`LinkValue`]s.
//! - [`mod@discover`]: [`discover()`], the six discovery routes of spec section 6.3.
//! - [`counters`]: [`FetchCounts`], requests by outcome, retries, body bytes and attempt
//!   durations since the fetcher was built (for the run report and `/metrics`).
//! - `rate`: the per-host request rate (spaced send slots per host).
//! - [`html`]: a tolerant scan for `<link rel="resourcesync">` in HTML pages (public for
//!   the fuzz target in `fuzz/`; discovery is its user).

pub mod body;
pub mod cause;
pub mod client;
pub mod config;
pub mod counters;
pub mod discover;
pub mod guard;
pub mod html;
pub mod link;
mod rate;

pub use body::Body;
pub use cause::{Cause, Transport};
pub use client::{Fetched, Fetcher, HostLimits};
pub use config::{Access, Auth, DEFAULT_USER_AGENT, FetchConfig, Request};
pub use counters::{DURATION_BOUNDS, FetchCounts};
pub use discover::{CapabilitySet, Channel, Discovery, Route, discover};
pub use link::LinkValue;

use url::Url;

/// Everything that can go wrong fetching or discovering; every variant names the URL
/// concerned (and the spec section where one applies) so that a log line is enough to act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The client could not be built (TLS backend, invalid user agent).
    #[error("building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// Only `http` and `https` URLs are fetched.
    #[error("{url}: unsupported URL (only http and https with a host are fetched)")]
    Scheme {
        /// The URL.
        url: Url,
    },
    /// The address guard refused the target: it is (or resolves to) a private, loopback,
    /// link-local or otherwise non-public address, and the upstream does not allow those.
    #[error("{url}: refused by the address guard: {reason} (set allow_private to allow it)")]
    Refused {
        /// The URL whose connection was refused (a redirect hop, if it was one).
        url: Url,
        /// Which address and why.
        reason: String,
    },
    /// The server answered with a status that is not success (after the retries, for 5xx and
    /// 429).
    #[error("{url}: HTTP status {status} after {attempts} attempt(s)")]
    Status {
        /// The URL (the redirect hop that answered).
        url: Url,
        /// The status code.
        status: u16,
        /// Attempts made.
        attempts: u32,
    },
    /// The server asked to be left alone longer than `FetchConfig::retry_after_max`
    /// (`Retry-After` with 429 or 503, RFC 9110 section 10.2.3): not waited for, not
    /// retried; the caller parks its work until `Retry-After` has passed.
    #[error(
        "{url}: HTTP status {status} with Retry-After {}: longer than [fetch] retry_after_max, so not retried before then",
        humantime::format_duration(*retry_after)
    )]
    RetryAfter {
        /// The URL (the redirect hop that answered).
        url: Url,
        /// 429 or 503.
        status: u16,
        /// How long the server asked to wait.
        retry_after: std::time::Duration,
    },
    /// More redirects than `FetchConfig::max_redirects`.
    #[error("{url}: more than {limit} redirects")]
    TooManyRedirects {
        /// The URL first requested.
        url: Url,
        /// The limit.
        limit: usize,
    },
    /// A redirect without a usable `Location`.
    #[error("{url}: redirect status {status} without a usable Location header")]
    BadRedirect {
        /// The URL that answered with the redirect.
        url: Url,
        /// The status code.
        status: u16,
    },
    /// The body (as read, after any inflation) is larger than the cap, or the server
    /// announced a larger `Content-Length`.
    #[error("{url}: body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL.
        url: Url,
        /// The cap.
        limit: u64,
    },
    /// No response (headers or the next part of the body) within the configured time, after
    /// the retries where retries apply. The transport errors keep reqwest's error as text
    /// only (`detail`, the whole chain): as a `source` a log writing the chain would repeat
    /// it, and this enum stays small.
    #[error("{url}: timed out after {attempts} attempt(s): {}", transport.chain)]
    Timeout {
        /// The URL.
        url: Url,
        /// Attempts made.
        attempts: u32,
        /// What the transport said, its causes written out.
        transport: Box<Transport>,
    },
    /// The response was not read within its deadline (headers and body, counting the time
    /// spent waiting for the upstream), or it came slower than the minimum transfer rate.
    /// Not retried: a Source that slow is not asked again in the same pass.
    #[error("{url}: {reason}")]
    Deadline {
        /// The URL.
        url: Url,
        /// Which bound, and its value.
        reason: String,
    },
    /// Connection, protocol or body transfer error (after the retries where retries apply).
    /// reqwest's own message hides what happened (`error sending request`), so the message
    /// names the [`Cause`] and writes out the chain of causes.
    #[error("{url}: {transport} (after {attempts} attempt(s))")]
    Http {
        /// The URL.
        url: Url,
        /// Attempts made.
        attempts: u32,
        /// What kind of failure it was (DNS, refused, reset, TLS, …) and the chain of
        /// causes ([`Transport::cause`], [`Transport::chain`]).
        transport: Box<Transport>,
    },
    /// The connection ended before the body had the length its `Content-Length` announced
    /// (a server that crashed or a proxy that cut the transfer).
    #[error("{url}: body ended after {read} of {expected} bytes (Content-Length)")]
    Truncated {
        /// The URL.
        url: Url,
        /// Body bytes received.
        read: u64,
        /// Body bytes announced.
        expected: u64,
    },
    /// A gzip body could not be inflated.
    #[error("{url}: cannot inflate gzip body: {source}")]
    Decode {
        /// The URL.
        url: Url,
        /// The decoder's error.
        #[source]
        source: std::io::Error,
    },
    /// A document could not be read as a ResourceSync document (spec section 7).
    #[error("{url}: {source}")]
    Document {
        /// The URL.
        url: Url,
        /// The reader's error (boxed: it is large and rare).
        #[source]
        source: Box<rsagg_sitemap::Error>,
    },
    /// Discovery found no Capability List (spec section 6.3); `details` says what was tried.
    #[error("{url}: no ResourceSync Capability List found (spec section 6.3): {details}")]
    NotDiscovered {
        /// The entry point.
        url: Url,
        /// Every route tried and why it failed.
        details: String,
    },
    /// A document that should lead to its Capability List has no `rs:ln rel="up"` (spec
    /// sections 6.2 and 10–13).
    #[error("{url}: {kind} has no rs:ln rel=\"up\" to its Capability List (spec section 6.2)")]
    NoUpLink {
        /// The document.
        url: Url,
        /// Its kind, as the spec names it.
        kind: &'static str,
    },
    /// Discovery met a document it already visited, or went deeper than its hop limit.
    #[error("{url}: discovery stopped: {reason} (spec section 6.2)")]
    Navigation {
        /// The document that would have been fetched.
        url: Url,
        /// Loop or depth.
        reason: String,
    },
}

impl Error {
    /// The URL the error concerns, where there is one.
    pub fn url(&self) -> Option<&Url> {
        match self {
            Error::Client(_) => None,
            Error::Scheme { url }
            | Error::Refused { url, .. }
            | Error::Status { url, .. }
            | Error::RetryAfter { url, .. }
            | Error::TooManyRedirects { url, .. }
            | Error::BadRedirect { url, .. }
            | Error::TooLarge { url, .. }
            | Error::Timeout { url, .. }
            | Error::Deadline { url, .. }
            | Error::Http { url, .. }
            | Error::Truncated { url, .. }
            | Error::Decode { url, .. }
            | Error::Document { url, .. }
            | Error::NotDiscovered { url, .. }
            | Error::NoUpLink { url, .. }
            | Error::Navigation { url, .. } => Some(url),
        }
    }

    /// What kind of transport failure it was, for [`Error::Http`].
    pub fn cause(&self) -> Option<Cause> {
        match self {
            Error::Http { transport, .. } => Some(transport.cause),
            _ => None,
        }
    }

    /// True when the host could not be reached at all: its name does not resolve, nothing
    /// accepts connections at its address, or connecting timed out. Every other URL of the
    /// same host (its `/.well-known/resourcesync`, its `robots.txt`) fails the same way.
    pub fn host_unreachable(&self) -> bool {
        matches!(
            self.cause(),
            Some(Cause::Dns | Cause::ConnectionRefused | Cause::ConnectTimeout)
        )
    }

    /// The HTTP status, for [`Error::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Turns an I/O error back into the crate error it carries (see
    /// [`Body::into_async_read`]), or wraps it as a decoding error of `url`.
    pub fn from_io(url: &Url, e: std::io::Error) -> Error {
        if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            if let Some(Ok(inner)) = e.into_inner().map(|b| b.downcast::<Error>()) {
                return *inner;
            }
            // Not reachable: the check above saw an `Error` inside.
            return Error::Decode {
                url: url.clone(),
                source: std::io::Error::other("inner error lost"),
            };
        }
        Error::Decode {
            url: url.clone(),
            source: e,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Errors are returned by value through every layer (`clippy::result_large_err` warns
    /// from 128 bytes, and the crates wrapping this error add their own tag): the variants
    /// keep their text boxed.
    #[test]
    fn the_error_stays_small() {
        assert!(
            std::mem::size_of::<super::Error>() <= 120,
            "{} bytes",
            std::mem::size_of::<super::Error>()
        );
    }
}
