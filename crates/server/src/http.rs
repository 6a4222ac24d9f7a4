//! Validators, conditional GET (RFC 9110 section 13) and small responses shared by the
//! routes.
//!
//! Destinations poll documents and re-fetch copies; answering `304 Not Modified` to a
//! Destination that already holds the current bytes saves the transfer, so every route
//! answers with an `ETag` and, where it knows one, a `Last-Modified`.

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
