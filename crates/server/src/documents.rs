//! The documents: published objects served by path, and the two documents made on the fly.
//!
//! Only the documents a Destination reads are served, by an allowlist of names: the store
//! also holds the state database (`state/`), the blobs (`blobs/`, served only as copies, by
//! their own URIs), the publisher's metadata (`published/`) and run statistics (`stats/`),
//! none of which is anyone's business over HTTP.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use rsagg_layout::capability::{self, capability_list_url};

use crate::collection::Collection;
use crate::http::{
    Ranged, Validators, accept_ranges, compressible, not_found, partial, range_not_satisfiable,
    store_failed,
};

/// Documents at the top of a collection, served from the object of the same name.
const TOP: &[&str] = &[
    "capabilitylist.xml",
    "resourcelist.xml",
    "changelist.xml",
    "changelist-open.xml",
    "resourcedump.xml",
    "changedump.xml",
    "sourcedescription.xml",
];

/// Folders of parts, packages and manifests, served with everything under them.
const FOLDERS: &[&str] = &[
    "resourcelist/",
    "changelist/",
    "resourcedump/",
    "changedump/",
];

/// Why a path is not served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not percent-decodable to UTF-8 (a malformed request: 400).
    BadEncoding,
    /// Not a document (404).
    NotListed,
}

/// The object behind `rest` (the request path after the collection's base path, still
/// percent-encoded), when `rest` names a published document.
pub(crate) fn object_for(rest: &str) -> Result<Path, Refused> {
    let name = percent_decode(rest).ok_or(Refused::BadEncoding)?;
    let listed = TOP.contains(&name.as_str())
        || FOLDERS.iter().any(|f| {
            name.strip_prefix(f).is_some_and(|inner| {
                // No empty, `.` or `..` segment: nothing may climb out of the folder.
                !inner.is_empty()
                    && inner
                        .split('/')
                        .all(|s| !s.is_empty() && s != "." && s != "..")
            })
        });
    if !listed {
        return Err(Refused::NotListed);
    }
    Path::parse(&name).map_err(|_| Refused::NotListed)
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            // Two hex digits: ASCII, so the slice is a str and the value fits a byte.
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The media type of the XML documents.
const XML: &str = "application/xml";

/// The media type of a published object, by its extension.
fn content_type(path: &Path) -> &'static str {
    match path.extension() {
        Some("xml") => XML,
        Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

/// Answers GET or HEAD (`head`) of the published object `path`: streamed from the store with
/// its length and validators, `304` when the request's conditions say the client has it,
/// `206` with only the bytes of a single `Range` (a ranged read of the store, never the
/// whole object), `416` when the range is outside the object.
pub(crate) async fn serve_object(
    objects: &Arc<dyn ObjectStore>,
    path: &Path,
    head: bool,
    request: &HeaderMap,
) -> Response {
    let conditional = request.contains_key(header::IF_NONE_MATCH)
        || request.contains_key(header::IF_MODIFIED_SINCE);
    let ranged = !head && request.contains_key(header::RANGE);
    // HEAD, a conditional GET (likely answered 304) and a range (resolved against the
    // size) ask for the metadata first; an unconditional GET gets bytes and metadata in one
    // request.
    let meta = if head || conditional || ranged {
        match objects.head(path).await {
            Ok(meta) => Some(meta),
            Err(object_store::Error::NotFound { .. }) => return not_found(),
            Err(e) => return failed(path, e),
        }
    } else {
        None
    };
    if let Some(meta) = &meta {
        let v = Validators::of_object(meta);
        if v.not_modified(request) {
            return v.not_modified_response(HeaderMap::new());
        }
        if head {
            return ok(path, meta.size, &v, Body::empty());
        }
        match v.range(request, meta.size) {
            Ranged::Full => {}
            Ranged::Unsatisfiable => return range_not_satisfiable(meta.size),
            Ranged::Part(range) => {
                // Only the bytes of the version the validators describe: a rewrite between
                // the HEAD and this read fails the precondition and is answered in full.
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range.clone())),
                    if_match: meta.e_tag.clone(),
                    ..GetOptions::default()
                };
                match objects.get_opts(path, options).await {
                    Ok(r) => {
                        let mut headers = HeaderMap::new();
                        headers.insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(content_type(path)),
                        );
                        v.apply(&mut headers);
                        return partial(
                            headers,
                            &range,
                            meta.size,
                            Body::from_stream(r.into_stream()),
                        );
                    }
                    Err(object_store::Error::Precondition { .. }) => {}
                    Err(object_store::Error::NotFound { .. }) => return not_found(),
                    Err(e) => return failed(path, e),
                }
            }
        }
    }
    match objects.get(path).await {
        Ok(r) => {
            let v = Validators::of_object(&r.meta);
            let size = r.meta.size;
            ok(path, size, &v, Body::from_stream(r.into_stream()))
        }
        Err(object_store::Error::NotFound { .. }) => not_found(),
        Err(e) => failed(path, e),
    }
}

fn failed(path: &Path, source: object_store::Error) -> Response {
    let e = crate::Error::ObjectStore {
        path: path.to_string(),
        source,
    };
    store_failed("reading a published document", &e)
}

/// `200` with the object's type, length and validators; XML documents are marked
/// [`compressible`], ZIP packages are not (already deflated).
fn ok(path: &Path, size: u64, v: &Validators, body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    let content_type = content_type(path);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    accept_ranges(h);
    v.apply(h);
    if content_type == XML {
        compressible(r)
    } else {
        r
    }
}

/// A document made once at start-up (the set of collections served does not change while
/// the server runs), with an `ETag` from its bytes so pollers get `304`s.
#[derive(Debug, Clone)]
pub(crate) struct Generated {
    body: Bytes,
    content_type: &'static str,
    validators: Validators,
}

impl Generated {
    fn new(body: Vec<u8>, content_type: &'static str) -> Generated {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut h);
        Generated {
            validators: Validators {
                etag: format!("\"{:016x}-{:x}\"", h.finish(), body.len()),
                last_modified: None,
            },
            body: Bytes::from(body),
            content_type,
        }
    }

    /// Answers GET or HEAD (`head`).
    pub(crate) fn respond(&self, head: bool, request: &HeaderMap) -> Response {
        if self.validators.not_modified(request) {
            return self.validators.not_modified_response(HeaderMap::new());
        }
        let body = if head {
            Body::empty()
        } else {
            Body::from(self.body.clone())
        };
        let mut r = Response::new(body);
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(self.body.len()));
        self.validators.apply(h);
        if self.content_type == XML {
            compressible(r)
        } else {
            r
        }
    }
}

/// The Source Description (spec 8): one `<url>` per collection, pointing at its Capability
/// List. Served at `/.well-known/resourcesync` (spec 6.3.2), so a Destination finds every
/// collection from the server's root.
pub(crate) fn source_description(collections: &[Collection]) -> Generated {
    let lists = collections.iter().map(|c| capability::Listed {
        capability_list: capability_list_url(c.base_url()),
        describedby: c.describedby().map(str::to_owned),
    });
    Generated::new(capability::source_description(lists), XML)
}

/// `robots.txt` with a `Sitemap:` line per collection's Resource List (spec 6.3.4), the
/// discovery path of crawlers that know Sitemaps but not ResourceSync.
pub(crate) fn robots(collections: &[Collection]) -> Generated {
    let mut text = String::from("User-agent: *\nAllow: /\n\n");
    for c in collections {
        text.push_str("Sitemap: ");
        text.push_str(c.base_url());
        text.push_str("resourcelist.xml\n");
    }
    Generated::new(text.into_bytes(), "text/plain; charset=utf-8")
}

/// The page at a collection's base URL (`{base}`, or its path without the final `/`), for
/// whoever was given only the collection's address: an HTML page pointing to its Capability
/// List, the server's Source Description (`/.well-known/resourcesync`) and the collection's
/// status page (`/status/{collection}`), with the discovery links of spec 6.3.3 to the
/// Capability List (`Link: <…>; rel="resourcesync"`, here `link`, and the page's own
/// `<link rel="resourcesync">`). `200` once the collection has been published (its
/// Capability List is in its store), else `404` with the same pointers and a word on why.
/// No body for HEAD; never cached, since a first run turns the `404` into a `200`.
pub(crate) fn base_page(
    c: &Collection,
    link: &HeaderValue,
    published: bool,
    head: bool,
) -> Response {
    use crate::html::esc;
    let list = capability_list_url(c.base_url());
    let origin = url::Url::parse(c.base_url())
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    let description = format!("{origin}/.well-known/resourcesync");
    let status = format!("{origin}/status/{}", c.name());
    let (code, state) = if published {
        (
            StatusCode::OK,
            "A ResourceSync collection republished by rsagg. A Destination starts at its \
             Capability List."
                .to_owned(),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            "This collection is not published yet: no run has completed a pass, so its \
             Capability List is not in its store. The links below answer once one has; the \
             status page says what its runs did."
                .to_owned(),
        )
    };
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{name}: a ResourceSync collection</title>\n\
         <link rel=\"resourcesync\" href=\"{list}\">\n</head>\n<body>\n\
         <h1>Collection <code>{name}</code></h1>\n<p>{state}</p>\n<ul>\n\
         <li><a href=\"{list}\">{list}</a>: its Capability List</li>\n\
         <li><a href=\"{description}\">{description}</a>: the Source Description of \
         every collection this server serves</li>\n\
         <li><a href=\"{status}\">{status}</a>: its status page (last run, upstreams, \
         quarantine)</li>\n</ul>\n</body>\n</html>\n",
        name = esc(c.name()),
        list = esc(&list),
        description = esc(&description),
        status = esc(&status),
        state = esc(&state),
    );
    let len = body.len();
    let mut r = Response::new(if head {
        Body::empty()
    } else {
        Body::from(body)
    });
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::LINK, link.clone());
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `405 Method Not Allowed` for anything but GET and HEAD: the server is read-only.
pub(crate) fn method_not_allowed() -> Response {
    let mut r = crate::http::text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_published_documents_are_objects() {
        let ok = |rest: &str| object_for(rest).map(|p| p.to_string());
        assert_eq!(ok("resourcelist.xml").unwrap(), "resourcelist.xml");
        assert_eq!(ok("changelist-open.xml").unwrap(), "changelist-open.xml");
        assert_eq!(
            ok("resourcelist/part-00000-g3.xml").unwrap(),
            "resourcelist/part-00000-g3.xml"
        );
        assert_eq!(
            ok("changedump/p%2D1.zip").unwrap(),
            "changedump/p-1.zip",
            "escapes are decoded"
        );
        for refused in [
            "",
            "state/manifest/00000000000000000001.manifest",
            "blobs/sha256/ab/abcd",
            "published/resourcelist.json",
            "stats/last-run.json",
            "resourcelist/",
            "resourcelist//x.xml",
            "resourcelist/../state/x",
            "resourcelist/%2E%2E/state/x",
            "resourcelist/a%2F..%2F..%2Fstate",
            "resourcelist.xml/x",
            "Resourcelist.xml",
        ] {
            assert_eq!(
                object_for(refused),
                Err(Refused::NotListed),
                "{refused:?} must not be served"
            );
        }
        assert_eq!(object_for("resourcelist/%zz"), Err(Refused::BadEncoding));
        assert_eq!(
            object_for("resourcelist/%ff.xml"),
            Err(Refused::BadEncoding)
        );
        assert_eq!(
            object_for("resourcelist/%+1.xml"),
            Err(Refused::BadEncoding)
        );
        assert_eq!(object_for("resourcelist/%4"), Err(Refused::BadEncoding));
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type(&Path::from("a/b.xml")), "application/xml");
        assert_eq!(content_type(&Path::from("a/b.zip")), "application/zip");
        assert_eq!(content_type(&Path::from("a/b")), "application/octet-stream");
    }
}
