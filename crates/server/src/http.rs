//! Validators, conditional GET (RFC 9110 section 13), range requests (section 14) and small
//! responses shared by the routes.
//!
//! Destinations poll documents and re-fetch copies; answering `304 Not Modified` to a
//! Destination that already holds the current bytes saves the transfer, so every route
//! answers with an `ETag` and, where it knows one, a `Last-Modified`. A client resuming a
//! large dump package asks for the bytes it lacks (`Range`); stored objects answer one range
//! with `206 Partial Content`, read from the store as a ranged GET.

use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use object_store::ObjectMeta;
use rsagg_model::W3cDateTime;

/// What a conditional request is compared against.
#[derive(Debug, Clone)]
pub(crate) struct Validators {
    /// A quoted entity tag (`"…"`, or weak `W/"…"`).
    pub etag: String,
    /// When the representation last changed.
    pub last_modified: Option<SystemTime>,
}

impl Validators {
    /// The validators of a stored object: the store's ETag when it gives a usable one, else
    /// one derived from size and modification time (which change whenever the object is
    /// rewritten).
    pub fn of_object(meta: &ObjectMeta) -> Validators {
        let last_modified = SystemTime::from(meta.last_modified);
        let etag = meta
            .e_tag
            .as_deref()
            .and_then(quote_etag)
            .unwrap_or_else(|| {
                let nanos = last_modified
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                format!("\"{:x}-{nanos:x}\"", meta.size)
            });
        Validators {
            etag,
            last_modified: Some(last_modified),
        }
    }

    /// Sets `ETag` and `Last-Modified` on `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_str(&self.etag) {
            headers.insert(header::ETAG, v);
        }
        if let Some(t) = self.last_modified
            && let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(t))
        {
            headers.insert(header::LAST_MODIFIED, v);
        }
    }

    /// Whether a GET or HEAD with these request headers is answered `304 Not Modified`.
    /// `If-None-Match` takes precedence over `If-Modified-Since` (RFC 9110 13.1.3), and
    /// entity tags are compared weakly (13.1.2), as GET and HEAD allow.
    pub fn not_modified(&self, request: &HeaderMap) -> bool {
        if let Some(inm) = request.get(header::IF_NONE_MATCH) {
            let Ok(inm) = inm.to_str() else {
                return false;
            };
            let ours = opaque(&self.etag);
            return inm
                .split(',')
                .map(str::trim)
                .any(|t| t == "*" || opaque(t) == ours);
        }
        if let (Some(ims), Some(lm)) = (request.get(header::IF_MODIFIED_SINCE), self.last_modified)
        {
            let Some(since) = ims
                .to_str()
                .ok()
                .and_then(|s| httpdate::parse_http_date(s).ok())
            else {
                // An invalid date is ignored (RFC 9110 13.1.3).
                return false;
            };
            // HTTP dates have whole seconds: compare at that precision, or a copy changed at
            // 10:00:00.5 would never match the `Last-Modified: 10:00:00` it was sent with.
            return truncate_to_seconds(lm) <= since;
        }
        false
    }

    /// The `304 Not Modified` answer: validators (and `extra` headers) without a body.
    pub fn not_modified_response(&self, extra: HeaderMap) -> Response {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        r.headers_mut().extend(extra);
        self.apply(r.headers_mut());
        r
    }
}

/// What a GET's `Range` header (RFC 9110 14.2) asks of a representation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ranged {
    /// The whole representation, `200`: no `Range`, an `If-Range` that does not match, a
    /// header that is not a valid `bytes` range, or several ranges (a server may answer
    /// those in full; one range is what resuming clients ask).
    Full,
    /// These bytes, `206 Partial Content`.
    Part(Range<u64>),
    /// No byte of the representation is in the range, `416 Range Not Satisfiable`.
    Unsatisfiable,
}

impl Validators {
    /// What `request`'s `Range` asks of this representation of `size` bytes. `If-Range`
    /// is honoured (13.1.5): an entity tag must match strongly (a weak tag never does), a
    /// date must equal `Last-Modified`; otherwise the whole representation is sent.
    pub fn range(&self, request: &HeaderMap, size: u64) -> Ranged {
        let Some(range) = request.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
            return Ranged::Full;
        };
        if let Some(if_range) = request.get(header::IF_RANGE)
            && !self.if_range_matches(if_range)
        {
            return Ranged::Full;
        }
        // Syntax errors (and the other units) mean the header is ignored (14.2).
        let Ok(parsed) = http_range_header::parse_range_header(range) else {
            return Ranged::Full;
        };
        let [one] = parsed.ranges.as_slice() else {
            return Ranged::Full;
        };
        use http_range_header::{EndPosition, StartPosition};
        if size == 0 {
            return Ranged::Unsatisfiable;
        }
        let last = size - 1;
        let start = match one.start {
            StartPosition::Index(first) if first > last => return Ranged::Unsatisfiable,
            StartPosition::Index(first) => first,
            // A suffix longer than the representation means all of it (14.1.3); a zero
            // suffix is refused by the parser.
            StartPosition::FromLast(n) => size.saturating_sub(n),
        };
        let end = match one.end {
            // `last-pos` < `first-pos` is an invalid range-spec: the header is ignored.
            EndPosition::Index(end) if end < start => return Ranged::Full,
            EndPosition::Index(end) => end.min(last),
            EndPosition::LastByte => last,
        };
        Ranged::Part(start..end + 1)
    }

    fn if_range_matches(&self, if_range: &HeaderValue) -> bool {
        let Ok(value) = if_range.to_str() else {
            return false;
        };
        let value = value.trim();
        if value.starts_with('"') || value.starts_with("W/") {
            // Strong comparison: both tags strong and equal.
            return !value.starts_with("W/") && !self.etag.starts_with("W/") && value == self.etag;
        }
        match (httpdate::parse_http_date(value), self.last_modified) {
            (Ok(date), Some(lm)) => truncate_to_seconds(lm) == date,
            _ => false,
        }
    }
}

/// Sets `Accept-Ranges: bytes` (RFC 9110 14.3): the routes streaming stored objects answer
/// single ranges.
pub(crate) fn accept_ranges(headers: &mut HeaderMap) {
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

/// The `206 Partial Content` head of `range` of a representation of `size` bytes
/// (`Content-Range`, `Content-Length`), on `headers` that already carry the type and
/// validators.
pub(crate) fn partial(
    mut headers: HeaderMap,
    range: &Range<u64>,
    size: u64,
    body: Body,
) -> Response {
    let content_range = format!("bytes {}-{}/{size}", range.start, range.end - 1);
    if let Ok(v) = HeaderValue::from_str(&content_range) {
        headers.insert(header::CONTENT_RANGE, v);
    }
    headers.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(range.end - range.start),
    );
    accept_ranges(&mut headers);
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::PARTIAL_CONTENT;
    *r.headers_mut() = headers;
    r
}

/// `416 Range Not Satisfiable` with `Content-Range: bytes */{size}` (RFC 9110 15.5.17).
pub(crate) fn range_not_satisfiable(size: u64) -> Response {
    let mut r = text(
        StatusCode::RANGE_NOT_SATISFIABLE,
        "the range is outside the representation\n",
    );
    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
        r.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    accept_ranges(r.headers_mut());
    r
}

/// Marks a response whose body may be compressed when the client asks (`Accept-Encoding`):
/// the XML documents and the pages made per request, text that shrinks several-fold. Copies
/// (the upstream's bytes, whatever their type) and ZIP packages are never marked; the
/// router's compression layer compresses only marked `200` answers (see `router.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Compressible;

/// Marks `r` [`Compressible`].
pub(crate) fn compressible(mut r: Response) -> Response {
    r.extensions_mut().insert(Compressible);
    r
}

/// `etag` as a valid quoted entity tag: kept when it already is one, quoted when it is a bare
/// token of valid characters, `None` otherwise (object stores differ: S3 quotes its ETags,
/// the local file system's are bare).
fn quote_etag(etag: &str) -> Option<String> {
    let valid = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    };
    let inner = etag.strip_prefix("W/").unwrap_or(etag);
    if let Some(tag) = inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        return (tag.is_empty() || valid(tag)).then(|| etag.to_owned());
    }
    valid(etag)
        .then(|| format!("\"{etag}\""))
        .filter(|q| HeaderValue::from_str(q).is_ok())
}

/// The opaque tag of an entity tag, for weak comparison (the `W/` prefix is ignored).
fn opaque(etag: &str) -> &str {
    etag.strip_prefix("W/").unwrap_or(etag)
}

fn truncate_to_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

/// A W3C datetime as a `SystemTime` (for `Last-Modified`); `None` before 1970.
pub(crate) fn system_time(t: &W3cDateTime) -> Option<SystemTime> {
    let (secs, nanos) = t.instant();
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// A short plain-text answer (errors, `robots.txt`).
pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `404 Not Found`.
pub(crate) fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "not found\n")
}

/// The answer to a request the store behind it failed: logged with its cause, answered
/// `502 Bad Gateway` (the object store is the server's upstream) without details.
pub(crate) fn store_failed(what: &str, error: &crate::Error) -> Response {
    tracing::error!(%error, "{what}");
    text(
        StatusCode::BAD_GATEWAY,
        "the store failed; try again later\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validators() -> Validators {
        Validators {
            etag: "\"abc\"".into(),
            last_modified: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)),
        }
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn if_none_match_compares_weakly_and_wins_over_the_date() {
        let v = validators();
        assert!(v.not_modified(&headers(&[(header::IF_NONE_MATCH, "\"x\", W/\"abc\"")])));
        assert!(v.not_modified(&headers(&[(header::IF_NONE_MATCH, "*")])));
        assert!(!v.not_modified(&headers(&[(header::IF_NONE_MATCH, "\"abd\"")])));
        // A non-matching tag is not overridden by a matching date.
        assert!(!v.not_modified(&headers(&[
            (header::IF_NONE_MATCH, "\"abd\""),
            (header::IF_MODIFIED_SINCE, "Tue, 14 Nov 2023 22:13:20 GMT"),
        ])));
    }

    #[test]
    fn if_modified_since_is_compared_in_whole_seconds() {
        let v = validators();
        // 1_700_000_000 s is Tue, 14 Nov 2023 22:13:20 GMT; the object changed 0.5 s later.
        assert!(v.not_modified(&headers(&[(
            header::IF_MODIFIED_SINCE,
            "Tue, 14 Nov 2023 22:13:20 GMT"
        )])));
        assert!(!v.not_modified(&headers(&[(
            header::IF_MODIFIED_SINCE,
            "Tue, 14 Nov 2023 22:13:19 GMT"
        )])));
        assert!(!v.not_modified(&headers(&[(header::IF_MODIFIED_SINCE, "yesterday")])));
        assert!(!v.not_modified(&HeaderMap::new()));
    }

    #[test]
    fn single_ranges_are_resolved_against_the_size() {
        let v = validators();
        let ask = |range: &str, size| v.range(&headers(&[(header::RANGE, range)]), size);
        assert_eq!(v.range(&HeaderMap::new(), 10), Ranged::Full);
        assert_eq!(ask("bytes=0-99", 1000), Ranged::Part(0..100));
        assert_eq!(
            ask("bytes=0-99", 10),
            Ranged::Part(0..10),
            "clamped to the end"
        );
        assert_eq!(ask("bytes=5-", 10), Ranged::Part(5..10));
        assert_eq!(ask("bytes=-3", 10), Ranged::Part(7..10));
        assert_eq!(
            ask("bytes=-30", 10),
            Ranged::Part(0..10),
            "a long suffix is all"
        );
        assert_eq!(ask("bytes=9-9", 10), Ranged::Part(9..10));
        assert_eq!(ask("bytes=10-", 10), Ranged::Unsatisfiable);
        assert_eq!(ask("bytes=10-20", 10), Ranged::Unsatisfiable);
        assert_eq!(ask("bytes=-1", 0), Ranged::Unsatisfiable);
        // Ignored: invalid syntax, other units, reversed, several ranges.
        for ignored in [
            "bytes=a-b",
            "items=0-1",
            "bytes=5-2",
            "bytes=0-1,4-5",
            "bytes 0-1",
        ] {
            assert_eq!(ask(ignored, 10), Ranged::Full, "{ignored}");
        }
    }

    #[test]
    fn if_range_needs_a_strong_match_or_the_exact_date() {
        let v = validators();
        let ask = |if_range: &str| {
            v.range(
                &headers(&[(header::RANGE, "bytes=0-0"), (header::IF_RANGE, if_range)]),
                10,
            )
        };
        assert_eq!(ask("\"abc\""), Ranged::Part(0..1));
        assert_eq!(ask("W/\"abc\""), Ranged::Full, "weak tags never match");
        assert_eq!(ask("\"abd\""), Ranged::Full);
        assert_eq!(ask("Tue, 14 Nov 2023 22:13:20 GMT"), Ranged::Part(0..1));
        assert_eq!(ask("Tue, 14 Nov 2023 22:13:21 GMT"), Ranged::Full);
        assert_eq!(ask("soon"), Ranged::Full);
        let weak = Validators {
            etag: "W/\"abc\"".into(),
            last_modified: None,
        };
        let h = headers(&[
            (header::RANGE, "bytes=0-0"),
            (header::IF_RANGE, "W/\"abc\""),
        ]);
        assert_eq!(weak.range(&h, 10), Ranged::Full);
    }

    #[test]
    fn store_etags_are_quoted_or_replaced() {
        assert_eq!(quote_etag("\"a1\"").as_deref(), Some("\"a1\""));
        assert_eq!(quote_etag("W/\"a1\"").as_deref(), Some("W/\"a1\""));
        assert_eq!(quote_etag("7b-5f3").as_deref(), Some("\"7b-5f3\""));
        assert_eq!(quote_etag("a b"), None);
        assert_eq!(quote_etag("a\"b"), None);
        // The meta of a real object, with the ETag a store may not give.
        let mut meta = futures::executor::block_on(async {
            use object_store::ObjectStoreExt;
            let s = object_store::memory::InMemory::new();
            let p = object_store::path::Path::from("x");
            s.put(&p, vec![7u8; 255].into()).await.unwrap();
            s.head(&p).await.unwrap()
        });
        meta.e_tag = None;
        let v = Validators::of_object(&meta);
        assert!(
            v.etag.starts_with("\"ff-") && v.etag.ends_with('"'),
            "{}",
            v.etag
        );
        meta.size = 256;
        assert_ne!(
            Validators::of_object(&meta).etag,
            v.etag,
            "size changes the tag"
        );
    }
}
