//! The cross-document rules ([`Cross`]) and the pure checks behind them. The walker fetches
//! and reads; everything it judges between documents is decided here, so each rule is
//! tested on good and broken values without a server.

use std::cmp::Ordering;

use md5::Digest as _;
use rsagg_model::{HashAlgorithm, HashValue, Hashes, Mode, Severity, W3cDateTime};
use url::Url;

/// Every rule that holds between documents (or between a document and the bytes it
/// describes). Codes are stable; the section is given where each is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cross {
    /// A document the Source names (a Capability List entry, an index part, a package, a
    /// manifest copy, an `up` target) answers 404 or 410.
    DocumentMissing,
    /// A document the Source names could not be fetched for another reason (an HTTP error
    /// status, a transport failure, a body over its bound).
    DocumentUnreachable,
    /// A document is not of the capability the document naming it implies (a Capability
    /// List entry's `capability`, an index's, a Source Description's `capabilitylist`).
    CapabilityMismatch,
    /// An index names an index as its part (spec 10.2, 12.2: the parts are `<urlset>`s).
    IndexNested,
    /// An `up` link points elsewhere than the spec requires: a Capability List's to the
    /// Source Description listing it (9), a list's or part's to its Capability List (10.1,
    /// 11.1, 12.1, 13.1).
    UpLinkMismatch,
    /// A part's `index` link points elsewhere than the index that names it (spec 7, 10.2).
    IndexLinkMismatch,
    /// A part has no `index` link to its index (recommended: spec 10.1, 11.1, 12.1, 13.1).
    IndexLinkMissing,
    /// A Capability List given directly is not listed by the Source Description its `up`
    /// names (spec 8, 9).
    CapabilityListUnlisted,
    /// Consecutive parts of a Change List Index or Change Dump Index (or consecutive Change
    /// Notification payloads) leave a gap: a part's `until` is before the next part's `from`
    /// (spec 12.2, 13.1, CN 3).
    IntervalGap,
    /// ... or overlap (`until` after the next `from`), or a part before the last is open.
    IntervalOverlap,
    /// A part's (or a package manifest's) `at`/`completed`/`from`/`until` differ from what
    /// the index (the dump's entry) says of it.
    PartIntervalMismatch,
    /// A dump package's bytes are not the `length` its dump entry states (spec 11.1, 13.1).
    PackageLengthMismatch,
    /// ... not the `hash` it states.
    PackageHashMismatch,
    /// ... served with another media type than its `type` (Content-Type).
    PackageTypeMismatch,
    /// A package could not be opened as a ResourceSync ZIP package (structure, names, limits,
    /// a missing or unreadable `manifest.xml`; spec 11.2, 13.2).
    PackageInvalid,
    /// A Resource Dump's package holds a Change Dump Manifest or the other way round.
    ManifestKindMismatch,
    /// A bitstream in a package does not have the `hash` its manifest entry states.
    ZipHashMismatch,
    /// A bitstream in a package could not be read (CRC-32, size, limits).
    ZipItemInvalid,
    /// The manifest copy the dump entry links to (`rs:ln rel="contents"`) is not the
    /// `manifest.xml` of the package: other bytes, or another `hash`/`length` than the link
    /// states (spec 11.1, 13.1).
    ManifestCopyMismatch,
    /// A change-notification topic or hub link is not an absolute http(s) URL (CN 1.0.1
    /// section 5).
    ChannelLinkInvalid,
    /// A sampled resource could not be fetched.
    ResourceUnavailable,
    /// A sampled resource's bytes are not the `length` its Resource List states (spec 7).
    ResourceLengthMismatch,
    /// ... not the `hash` it states.
    ResourceHashMismatch,
    /// ... served with another media type than its `type`.
    ResourceTypeMismatch,
    /// A bound of the walk was reached; what is behind it was not checked.
    BoundReached,
}

impl Cross {
    /// Stable kebab-case code used in reports.
    pub fn code(self) -> &'static str {
        use Cross::*;
        match self {
            DocumentMissing => "document-missing",
            DocumentUnreachable => "document-unreachable",
            CapabilityMismatch => "capability-mismatch",
            IndexNested => "index-nested",
            UpLinkMismatch => "up-link-mismatch",
            IndexLinkMismatch => "index-link-mismatch",
            IndexLinkMissing => "index-link-missing",
            CapabilityListUnlisted => "capability-list-unlisted",
            IntervalGap => "interval-gap",
            IntervalOverlap => "interval-overlap",
            PartIntervalMismatch => "part-interval-mismatch",
            PackageLengthMismatch => "package-length-mismatch",
            PackageHashMismatch => "package-hash-mismatch",
            PackageTypeMismatch => "package-type-mismatch",
            PackageInvalid => "package-invalid",
            ManifestKindMismatch => "manifest-kind-mismatch",
            ZipHashMismatch => "zip-hash-mismatch",
            ZipItemInvalid => "zip-item-invalid",
            ManifestCopyMismatch => "manifest-copy-mismatch",
            ChannelLinkInvalid => "channel-link-invalid",
            ResourceUnavailable => "resource-unavailable",
            ResourceLengthMismatch => "resource-length-mismatch",
            ResourceHashMismatch => "resource-hash-mismatch",
            ResourceTypeMismatch => "resource-type-mismatch",
            BoundReached => "bound-reached",
        }
    }

    /// Severity in `mode`; `None`: not reported in that mode. As for single documents:
    /// what makes the Source unusable is an error in both modes; what a Destination can
    /// work around (a wrong `up`, a media type) an error in strict mode and a warning in
    /// lenient mode; unmet recommendations a warning in strict mode only.
    pub fn severity(self, mode: Mode) -> Option<Severity> {
        use Cross::*;
        use Severity::{Error as E, Warning as W};
        let (strict, lenient) = match self {
            DocumentMissing
            | DocumentUnreachable
            | CapabilityMismatch
            | IndexNested
            | IntervalGap
            | IntervalOverlap
            | PackageLengthMismatch
            | PackageHashMismatch
            | PackageInvalid
            | ManifestKindMismatch
            | ZipHashMismatch
            | ZipItemInvalid
            | ManifestCopyMismatch
            | ResourceLengthMismatch
            | ResourceHashMismatch => (Some(E), Some(E)),
            UpLinkMismatch
            | IndexLinkMismatch
            | CapabilityListUnlisted
            | PartIntervalMismatch
            | PackageTypeMismatch
            | ChannelLinkInvalid
            | ResourceUnavailable
            | ResourceTypeMismatch => (Some(E), Some(W)),
            IndexLinkMissing => (Some(W), None),
            BoundReached => (Some(W), Some(W)),
        };
        match mode {
            Mode::Strict => strict,
            Mode::Lenient => lenient,
        }
    }
}

/// Where a link of a document leads, compared with where it must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCheck {
    /// The document has no such link.
    Missing,
    /// It leads to one of the expected documents.
    Matches,
    /// It leads elsewhere (resolved against the document's URL).
    Elsewhere(Url),
    /// Its `href` is not a URI reference.
    Unresolvable(String),
}

/// Resolves `href` (of a link of the document at `base`) and compares it with `expected`
/// (a document's URL as named, and as fetched after redirects).
pub fn link_target(base: &Url, href: Option<&str>, expected: &[Url]) -> LinkCheck {
    let Some(href) = href else {
        return LinkCheck::Missing;
    };
    match base.join(href.trim()) {
        Ok(u) if expected.iter().any(|e| same_document(e, &u)) => LinkCheck::Matches,
        Ok(u) => LinkCheck::Elsewhere(u),
        Err(_) => LinkCheck::Unresolvable(href.to_owned()),
    }
}

/// Two URLs name the same document: equal once parsed (scheme and host case, default
/// ports, dot segments normalised by the URL parser), fragments aside.
pub fn same_document(a: &Url, b: &Url) -> bool {
    let strip = |u: &Url| {
        let mut u = u.clone();
        u.set_fragment(None);
        u
    };
    strip(a) == strip(b)
}

/// How a part's interval follows the previous part's (spec 12.2, 13.1: closed parts in
/// forward chronological order, each `until` the next `from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `until` of the previous equals `from` of this one.
    Consecutive,
    /// The previous ends before this one begins.
    Gap,
    /// The previous ends after this one begins.
    Overlap,
    /// The previous part is open (no `until`) but not the last.
    OpenBefore,
    /// This part has no `from`: nothing to compare (the single-document checks report it).
    Unknown,
}

/// Judges the step from a part ending at `prev_until` to one beginning at `from`.
pub fn interval_step(prev_until: Option<&W3cDateTime>, from: Option<&W3cDateTime>) -> Step {
    let Some(from) = from else {
        return Step::Unknown;
    };
    let Some(until) = prev_until else {
        return Step::OpenBefore;
    };
    match until.cmp_instant(from) {
        Ordering::Equal => Step::Consecutive,
        Ordering::Less => Step::Gap,
        Ordering::Greater => Step::Overlap,
    }
}

/// True when both times are given and are not the same instant.
pub fn times_differ(a: Option<&W3cDateTime>, b: Option<&W3cDateTime>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.cmp_instant(b) != Ordering::Equal)
}

/// Digests and length of bytes as they stream past.
#[derive(Default, Clone)]
pub struct Digests {
    md5: md5::Md5,
    sha1: sha1::Sha1,
    sha256: sha2::Sha256,
    length: u64,
}

impl std::fmt::Debug for Digests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digests")
            .field("length", &self.length)
            .finish()
    }
}

/// The digests of some bytes, hex, and their length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computed {
    /// `md5` digest.
    pub md5: String,
    /// `sha-1` digest.
    pub sha1: String,
    /// `sha-256` digest.
    pub sha256: String,
    /// Bytes.
    pub length: u64,
}

impl Digests {
    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.md5.update(bytes);
        self.sha1.update(bytes);
        self.sha256.update(bytes);
        self.length += bytes.len() as u64;
    }

    /// The digests of everything added.
    pub fn finish(self) -> Computed {
        let hex = |a, d: &[u8]| HashValue::from_bytes(a, d).digest;
        Computed {
            md5: hex(HashAlgorithm::Md5, &self.md5.finalize()),
            sha1: hex(HashAlgorithm::Sha1, &self.sha1.finalize()),
            sha256: hex(HashAlgorithm::Sha256, &self.sha256.finalize()),
            length: self.length,
        }
    }
}

impl Computed {
    /// The digest of `algorithm`, when it is one computed.
    pub fn digest(&self, algorithm: &HashAlgorithm) -> Option<&str> {
        match algorithm {
            HashAlgorithm::Md5 => Some(&self.md5),
            HashAlgorithm::Sha1 => Some(&self.sha1),
            HashAlgorithm::Sha256 => Some(&self.sha256),
            HashAlgorithm::Other(_) => None,
        }
    }

    /// Every well-formed token of `stated` (of a known algorithm) that these bytes do not
    /// have, as (`algorithm:stated`, `algorithm:computed`). Malformed tokens are the
    /// single-document checks' (`hash-syntax`), not compared.
    pub fn hash_mismatches(&self, stated: Option<&Hashes>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for h in stated.map(|h| h.0.as_slice()).unwrap_or_default() {
            let Some(ours) = self.digest(&h.algorithm) else {
                continue;
            };
            if h.is_well_formed() && !ours.eq_ignore_ascii_case(&h.digest) {
                let a = h.algorithm.as_str();
                out.push((format!("{a}:{}", h.digest), format!("{a}:{ours}")));
            }
        }
        out
    }
}

/// The media type without parameters, lower case (`Text/HTML; charset=utf-8` → `text/html`).
pub fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether a resource served as `served` (its Content-Type) has the `stated` `type`: the
/// same type and subtype, parameters aside (RFC 9110 8.3.1: case-insensitive). A response
/// without Content-Type does not contradict.
pub fn media_type_matches(stated: &str, served: Option<&str>) -> bool {
    served.is_none_or(|s| essence(s) == essence(stated))
}

/// A change-notification topic or hub URL as advertised: it must be an absolute http(s)
/// URL with a host (CN 1.0.1 section 5: Destinations subscribe to it at the hub).
pub fn channel_url(base: &Url, href: &str) -> Result<Url, String> {
    let href = href.trim();
    let u = Url::parse(href)
        .or_else(|_| base.join(href).map_err(|e| e.to_string()))
        .map_err(|e| format!("`{href}` is not a URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{href}` is not an http(s) URL with a host"));
    }
    if Url::parse(href).is_err() {
        return Err(format!(
            "`{href}` is relative; a channel is named by an absolute URL"
        ));
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn t(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    #[test]
    fn codes_are_stable_and_distinct() {
        use Cross::*;
        let all = [
            DocumentMissing,
            DocumentUnreachable,
            CapabilityMismatch,
            IndexNested,
            UpLinkMismatch,
            IndexLinkMismatch,
            IndexLinkMissing,
            CapabilityListUnlisted,
            IntervalGap,
            IntervalOverlap,
            PartIntervalMismatch,
            PackageLengthMismatch,
            PackageHashMismatch,
            PackageTypeMismatch,
            PackageInvalid,
            ManifestKindMismatch,
            ZipHashMismatch,
            ZipItemInvalid,
            ManifestCopyMismatch,
            ChannelLinkInvalid,
            ResourceUnavailable,
            ResourceLengthMismatch,
            ResourceHashMismatch,
            ResourceTypeMismatch,
            BoundReached,
        ];
        let codes: std::collections::HashSet<_> = all.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(UpLinkMismatch.code(), "up-link-mismatch");
        assert_eq!(IntervalGap.code(), "interval-gap");
        for r in all {
            assert!(
                r.severity(Mode::Strict).is_some(),
                "{r:?} silent in strict mode"
            );
        }
    }

    #[test]
    fn severities_follow_the_modes() {
        assert_eq!(
            Cross::UpLinkMismatch.severity(Mode::Strict),
            Some(Severity::Error)
        );
        assert_eq!(
            Cross::UpLinkMismatch.severity(Mode::Lenient),
            Some(Severity::Warning)
        );
        assert_eq!(
            Cross::IndexLinkMissing.severity(Mode::Strict),
            Some(Severity::Warning)
        );
        assert_eq!(Cross::IndexLinkMissing.severity(Mode::Lenient), None);
        assert_eq!(
            Cross::PackageHashMismatch.severity(Mode::Lenient),
            Some(Severity::Error)
        );
        assert_eq!(
            Cross::BoundReached.severity(Mode::Strict),
            Some(Severity::Warning)
        );
    }

    #[test]
    fn an_up_link_is_resolved_and_compared() {
        let doc = url("http://example.com/dataset1/resourcelist.xml");
        let cl = [url("http://example.com/dataset1/capabilitylist.xml")];
        assert_eq!(
            link_target(&doc, Some("capabilitylist.xml"), &cl),
            LinkCheck::Matches
        );
        assert_eq!(
            link_target(
                &doc,
                Some("HTTP://Example.COM:80/dataset1/capabilitylist.xml"),
                &cl
            ),
            LinkCheck::Matches
        );
        assert_eq!(
            link_target(&doc, Some("/capabilitylist.xml"), &cl),
            LinkCheck::Elsewhere(url("http://example.com/capabilitylist.xml"))
        );
        assert_eq!(link_target(&doc, None, &cl), LinkCheck::Missing);
        assert!(matches!(
            link_target(&doc, Some("http://[::1"), &cl),
            LinkCheck::Unresolvable(_)
        ));
        // Redirected documents are accepted under either URL.
        let both = [
            url("http://example.com/.well-known/resourcesync"),
            url("http://example.com/sd.xml"),
        ];
        assert_eq!(
            link_target(&doc, Some("/sd.xml"), &both),
            LinkCheck::Matches
        );
    }

    #[test]
    fn consecutive_intervals_gaps_and_overlaps() {
        let (a, b, c) = (
            t("2013-01-02T00:00:00Z"),
            t("2013-01-02T01:00:00+01:00"),
            t("2013-01-03T00:00:00Z"),
        );
        assert_eq!(interval_step(Some(&a), Some(&b)), Step::Consecutive);
        assert_eq!(interval_step(Some(&a), Some(&c)), Step::Gap);
        assert_eq!(interval_step(Some(&c), Some(&a)), Step::Overlap);
        assert_eq!(interval_step(None, Some(&a)), Step::OpenBefore);
        assert_eq!(interval_step(Some(&a), None), Step::Unknown);
    }

    #[test]
    fn times_differ_only_when_both_are_given() {
        let a = t("2013-01-02T00:00:00Z");
        let b = t("2013-01-02T00:00:01Z");
        assert!(times_differ(Some(&a), Some(&b)));
        assert!(!times_differ(
            Some(&a),
            Some(&t("2013-01-02T02:00:00+02:00"))
        ));
        assert!(!times_differ(Some(&a), None));
        assert!(!times_differ(None, Some(&b)));
    }

    #[test]
    fn digests_are_compared_with_well_formed_tokens() {
        let mut d = Digests::default();
        d.update(b"hel");
        d.update(b"lo");
        let c = d.finish();
        assert_eq!(c.length, 5);
        assert_eq!(c.md5, "5d41402abc4b2a76b9719d911017c592");
        let ok = Hashes::parse(
            "md5:5D41402ABC4B2A76B9719D911017C592 sha-256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
            |_| {},
        );
        assert!(c.hash_mismatches(Some(&ok)).is_empty());
        assert!(c.hash_mismatches(None).is_empty());
        let bad = Hashes::parse("md5:00000000000000000000000000000000", |_| {});
        let m = c.hash_mismatches(Some(&bad));
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].1, "md5:5d41402abc4b2a76b9719d911017c592");
        // A malformed token is the single-document checks' business.
        let malformed = Hashes::parse("md5:xyz", |_| {});
        assert!(c.hash_mismatches(Some(&malformed)).is_empty());
    }

    #[test]
    fn media_types_compare_without_parameters() {
        assert!(media_type_matches(
            "text/html",
            Some("Text/HTML; charset=utf-8")
        ));
        assert!(media_type_matches("application/zip", None));
        assert!(!media_type_matches(
            "application/zip",
            Some("application/octet-stream")
        ));
    }

    #[test]
    fn channel_urls_must_be_absolute_http() {
        let base = url("http://example.com/capabilitylist.xml");
        assert!(channel_url(&base, "https://hub.example.org/").is_ok());
        assert!(channel_url(&base, " http://example.com/change/ ").is_ok());
        assert!(channel_url(&base, "ftp://example.com/hub").is_err());
        assert!(channel_url(&base, "/hub").is_err());
        assert!(channel_url(&base, "http://").is_err());
    }
}
