//! Pure rules over upstream entries: their instants, ordering and keys, whether a held copy
//! is unchanged, and verification of fetched bytes against what the list announced.

use rsagg_model::{Change, HashAlgorithm, UrlEntry, W3cDateTime};
use rsagg_store::{BlobInfo, ResourceRecord, ResourceStatus, SeenKey, UpstreamMeta};
use sha2::Digest;

/// The ordering instant of a change: `datetime`, else `lastmod`.
pub(crate) fn change_instant(e: &UrlEntry) -> Option<W3cDateTime> {
    e.md.as_ref().and_then(|m| m.datetime).or(e.lastmod)
}

pub(crate) fn change_of(e: &UrlEntry) -> Change {
    e.md.as_ref()
        .and_then(|m| m.change.clone())
        .unwrap_or(Change::Updated)
}

pub(crate) fn seen_key(e: &UrlEntry) -> SeenKey {
    let tag =
        e.md.as_ref()
            .and_then(|m| m.hash.as_ref())
            .map(|h| h.to_string())
            // In UTC: the same change read once with a zone-less time and once with `Z`
            // (a Change List and a notification) gives the same key.
            .or_else(|| e.lastmod.map(|t| t.to_utc().to_string()))
            .unwrap_or_default();
    SeenKey {
        uri: e.loc.trim().to_owned(),
        change: change_of(e),
        tag,
    }
}

/// Whether the upstream entry describes the copy already held (so it need not be fetched).
pub(crate) fn unchanged(e: &UrlEntry, prior: &ResourceRecord) -> bool {
    let Some(copy) = (prior.status == ResourceStatus::Present)
        .then_some(prior.copy.as_ref())
        .flatten()
    else {
        return false;
    };
    let md = e.md.as_ref();
    if let Some(len) = md.and_then(|m| m.length)
        && len != copy.length
    {
        return false;
    }
    if let Some(hashes) = md.and_then(|m| m.hash.as_ref()) {
        let mut compared = false;
        for h in &hashes.0 {
            let ours = match h.algorithm {
                HashAlgorithm::Md5 => Some(copy.md5.as_str()),
                HashAlgorithm::Sha256 => Some(copy.sha256.as_str()),
                HashAlgorithm::Sha1 => copy.sha1.as_deref(),
                HashAlgorithm::Other(_) => None,
            };
            if let Some(ours) = ours {
                if !ours.eq_ignore_ascii_case(&h.digest) {
                    return false;
                }
                compared = true;
            }
        }
        if compared {
            return true;
        }
    }
    match (e.lastmod, prior.upstream_meta.lastmod) {
        (Some(a), Some(b)) => a.cmp_instant(&b).is_eq(),
        _ => false,
    }
}

/// True when the entry announces a length or a hash the held copy does not have: the upstream
/// says its bytes changed. An HTTP validator (`ETag`, `Last-Modified`) cannot override that:
/// common servers derive both from the file's mtime in whole seconds and its size, so a file
/// rewritten within the same second at the same size still answers 304 to the old validator.
pub(crate) fn announces_other_bytes(e: &UrlEntry, prior: &ResourceRecord) -> bool {
    let (Some(copy), Some(md)) = (prior.copy.as_ref(), e.md.as_ref()) else {
        return false;
    };
    if md.length.is_some_and(|len| len != copy.length) {
        return true;
    }
    md.hash.iter().flat_map(|h| &h.0).any(|h| {
        let ours = match h.algorithm {
            HashAlgorithm::Md5 => Some(copy.md5.as_str()),
            HashAlgorithm::Sha256 => Some(copy.sha256.as_str()),
            HashAlgorithm::Sha1 => copy.sha1.as_deref(),
            HashAlgorithm::Other(_) => None,
        };
        ours.is_some_and(|ours| !ours.eq_ignore_ascii_case(&h.digest))
    })
}

/// Compares the stored bytes with what the entry announced; `Err((expected, got))`.
pub(crate) fn verify(e: &UrlEntry, info: &BlobInfo) -> Result<(), (String, String)> {
    let md = e.md.as_ref();
    if let Some(len) = md.and_then(|m| m.length)
        && len != info.length
    {
        return Err((format!("length {len}"), format!("length {}", info.length)));
    }
    for h in md
        .and_then(|m| m.hash.as_ref())
        .map(|h| h.0.as_slice())
        .unwrap_or_default()
    {
        let (name, ours) = match h.algorithm {
            HashAlgorithm::Md5 => ("md5", Some(info.md5.as_str())),
            HashAlgorithm::Sha256 => ("sha-256", Some(info.sha256.as_str())),
            HashAlgorithm::Sha1 => ("sha-1", info.sha1.as_deref()),
            HashAlgorithm::Other(_) => continue,
        };
        if !h.is_well_formed() {
            // Lenient: a malformed digest (a known upstream quirk) cannot be checked.
            continue;
        }
        if let Some(ours) = ours
            && !ours.eq_ignore_ascii_case(&h.digest)
        {
            return Err((format!("{name}:{}", h.digest), format!("{name}:{ours}")));
        }
    }
    Ok(())
}

/// The mirror locations of an entry, in the order to try them (spec 14.2: its
/// `rs:ln rel="duplicate"`): ascending `pri`, a link without one last (spec 7: absent is
/// 999,999), document order among equals; only `http`/`https` URLs (the fetcher's), and
/// neither the entry's own URI nor a repeat of one already listed.
pub(crate) fn mirrors(e: &UrlEntry) -> Vec<url::Url> {
    let own = url::Url::parse(e.loc.trim()).ok();
    let mut found: Vec<(u32, url::Url)> = e
        .links
        .iter()
        .filter(|l| l.has_rel("duplicate"))
        .filter_map(|l| {
            Some((
                l.pri.unwrap_or(999_999),
                url::Url::parse(l.href.trim()).ok()?,
            ))
        })
        .filter(|(_, u)| matches!(u.scheme(), "http" | "https") && Some(u) != own.as_ref())
        .collect();
    // Stable: document order among equal priorities.
    found.sort_by_key(|(pri, _)| *pri);
    let mut out: Vec<url::Url> = Vec::with_capacity(found.len());
    for (_, u) in found {
        if !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// True when the entry announces a hash rsagg can check (md5, sha-1 or sha-256, well
/// formed): only then are a mirror's bytes known to be the resource's (a length alone, or
/// nothing, would let any host's bytes stand for it).
pub(crate) fn announces_fixity(e: &UrlEntry) -> bool {
    e.md.as_ref()
        .and_then(|m| m.hash.as_ref())
        .is_some_and(|h| {
            h.0.iter()
                .any(|h| h.is_well_formed() && !matches!(h.algorithm, HashAlgorithm::Other(_)))
        })
}

/// True when the upstream's own URI failed in a way a mirror may make up for: it could not
/// be reached or did not answer in time (connection, DNS, TLS, timeouts, a body cut short or
/// too slow), or it was unavailable after the retries (5xx, 408, 429). Not when it answered
/// for the resource itself (404/410: gone, to be deleted by a later change; 401/403 and other
/// 4xx: refused), nor when rsagg refused the request (the address guard, the scheme, a body
/// over the cap): a mirror would serve what the upstream says is gone, or stand for a
/// request rsagg does not make.
pub(crate) fn mirror_may_serve(err: &rsagg_fetch::Error) -> bool {
    use rsagg_fetch::Error as E;
    match err {
        E::Status { status, .. } => *status >= 500 || matches!(status, 408 | 429),
        E::Http { .. } | E::Timeout { .. } | E::Deadline { .. } | E::Truncated { .. } => true,
        _ => false,
    }
}

/// A `Last-Modified` value as an instant: HTTP-date, or ISO 8601 as some servers send.
pub(crate) fn http_time(v: &str) -> Option<W3cDateTime> {
    if let Ok(t) = httpdate::parse_http_date(v) {
        let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
        return Some(W3cDateTime::from_unix(i64::try_from(secs).ok()?, 0));
    }
    W3cDateTime::parse(v.trim()).ok().map(|p| p.value)
}

/// 128 bits of SHA-256 of a URI: the listed set of a re-sync in bounded memory (16 bytes
/// per resource; a collision needs ~2^64 resources).
pub(crate) fn uri_digest(uri: &str) -> u128 {
    let d = sha2::Sha256::digest(uri.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    u128::from_le_bytes(b)
}

/// Forward chronological order of a batch of changes (spec 12.1, CN 1.0.1 3): by
/// `datetime`, else `lastmod`; an entry without a time keeps its place after the previous
/// one. Stable, so changes at one instant keep document order.
pub(crate) fn in_order(entries: Vec<UrlEntry>) -> Vec<(Option<W3cDateTime>, UrlEntry)> {
    let mut last = None;
    let mut keyed: Vec<(Option<W3cDateTime>, usize, UrlEntry)> = entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let t = change_instant(&e).or(last);
            last = t;
            (t, i, e)
        })
        .collect();
    keyed.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp_instant(&y).then(a.1.cmp(&b.1)),
        _ => a.1.cmp(&b.1),
    });
    keyed.into_iter().map(|(t, _, e)| (t, e)).collect()
}

pub(crate) fn upstream_meta(
    e: &UrlEntry,
    etag: Option<String>,
    http_last_modified: Option<String>,
) -> UpstreamMeta {
    let md = e.md.as_ref();
    UpstreamMeta {
        lastmod: e.lastmod,
        hash: md.and_then(|m| m.hash.clone()),
        length: md.and_then(|m| m.length),
        mime_type: md.and_then(|m| m.mime_type.clone()),
        encoding: md.and_then(|m| m.encoding.clone()),
        links: e.links.clone(),
        etag,
        http_last_modified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Hashes, Md};

    fn entry(uri: &str, md5: Option<&str>, len: Option<u64>, lastmod: Option<&str>) -> UrlEntry {
        UrlEntry {
            loc: uri.into(),
            lastmod: lastmod.map(|t| W3cDateTime::parse(t).unwrap().value),
            md: Some(Md {
                hash: md5.map(|h| Hashes::parse(&format!("md5:{h}"), |_| {})),
                length: len,
                ..Md::default()
            }),
            ..UrlEntry::default()
        }
    }

    fn info(md5: &str, length: u64) -> BlobInfo {
        BlobInfo {
            sha256: "0".repeat(64),
            md5: md5.into(),
            sha1: None,
            length,
        }
    }

    #[test]
    fn verification_compares_length_and_hashes() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        assert!(verify(&entry("u", Some(h), Some(11), None), &info(h, 11)).is_ok());
        let (exp, got) = verify(&entry("u", Some(h), Some(12), None), &info(h, 11)).unwrap_err();
        assert_eq!((exp.as_str(), got.as_str()), ("length 12", "length 11"));
        let other = "00000000000000000000000000000000";
        let (exp, _) = verify(&entry("u", Some(other), None, None), &info(h, 11)).unwrap_err();
        assert_eq!(exp, format!("md5:{other}"));
        // Upper-case hex from an upstream is the same digest.
        assert!(
            verify(
                &entry("u", Some(&h.to_uppercase()), None, None),
                &info(h, 11)
            )
            .is_ok()
        );
        // A malformed digest (lenient quirk) cannot be checked and is not a mismatch.
        assert!(verify(&entry("u", Some("xyz"), None, None), &info(h, 11)).is_ok());
    }

    fn with_links(links: Vec<rsagg_model::Link>) -> UrlEntry {
        UrlEntry {
            links,
            ..entry("http://up.example/r", None, None, None)
        }
    }

    fn dup(href: &str, pri: Option<u32>) -> rsagg_model::Link {
        rsagg_model::Link {
            pri,
            ..rsagg_model::Link::new("duplicate", href)
        }
    }

    #[test]
    fn mirrors_in_pri_order_unranked_last_document_order_among_equals() {
        let e = with_links(vec![
            dup("http://m.example/none-a", None),
            dup("http://m.example/three", Some(3)),
            rsagg_model::Link::new("alternate", "http://m.example/alt"),
            dup("gsiftp://grid.example/r", Some(1)),
            dup("http://m.example/one", Some(1)),
            dup("http://up.example/r", Some(1)),
            dup("http://m.example/none-b", None),
            dup("https://m.example/two-a", Some(2)),
            rsagg_model::Link {
                pri: Some(2),
                ..rsagg_model::Link::new("Duplicate", "http://m.example/two-b")
            },
            dup("http://m.example/three", Some(1)),
            dup("not a url", Some(1)),
        ]);
        let got: Vec<String> = mirrors(&e).iter().map(|u| u.to_string()).collect();
        assert_eq!(
            got,
            [
                "http://m.example/one",
                "http://m.example/three",
                "https://m.example/two-a",
                "http://m.example/two-b",
                "http://m.example/none-a",
                "http://m.example/none-b",
            ]
        );
        assert!(mirrors(&with_links(vec![])).is_empty());
    }

    #[test]
    fn only_a_checkable_hash_lets_a_mirror_stand_for_the_resource() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        assert!(announces_fixity(&entry("u", Some(h), Some(11), None)));
        assert!(!announces_fixity(&entry("u", None, Some(11), None)));
        assert!(!announces_fixity(&entry("u", Some("xyz"), None, None)));
        let other = UrlEntry {
            md: Some(Md {
                hash: Some(Hashes::parse("sha-512:abcd", |_| {})),
                ..Md::default()
            }),
            ..UrlEntry::default()
        };
        assert!(!announces_fixity(&other));
    }

    #[test]
    fn only_an_unavailable_upstream_sends_to_a_mirror() {
        let url = url::Url::parse("http://up.example/r").unwrap();
        let status = |status| rsagg_fetch::Error::Status {
            url: url.clone(),
            status,
            attempts: 3,
        };
        for s in [500, 502, 503, 504, 408, 429] {
            assert!(mirror_may_serve(&status(s)), "{s}");
        }
        for s in [404, 410, 401, 403, 400, 451] {
            assert!(!mirror_may_serve(&status(s)), "{s}");
        }
        assert!(mirror_may_serve(&rsagg_fetch::Error::Truncated {
            url: url.clone(),
            read: 1,
            expected: 2,
        }));
        assert!(mirror_may_serve(&rsagg_fetch::Error::Deadline {
            url: url.clone(),
            reason: "slow".into(),
        }));
        assert!(!mirror_may_serve(&rsagg_fetch::Error::Refused {
            url: url.clone(),
            reason: "10.0.0.1 is private".into(),
        }));
        assert!(!mirror_may_serve(&rsagg_fetch::Error::TooLarge {
            url,
            limit: 1
        }));
    }

    #[test]
    fn http_times_in_both_forms() {
        let a = http_time("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let b = http_time("1994-11-06T08:49:37Z").unwrap();
        assert!(a.cmp_instant(&b).is_eq());
        assert!(http_time("yesterday").is_none());
    }

    #[test]
    fn unchanged_by_hash_else_lastmod() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        let mut prior = ResourceRecord {
            upstream: "u".into(),
            uri: "u".into(),
            status: ResourceStatus::Present,
            copy: Some(info(h, 11)),
            mime_type: None,
            set: String::new(),
            lastmod: W3cDateTime::now(),
            seq: 1,
            upstream_meta: UpstreamMeta {
                lastmod: Some(W3cDateTime::parse("2020-01-01").unwrap().value),
                ..UpstreamMeta::default()
            },
        };
        assert!(unchanged(&entry("u", Some(h), Some(11), None), &prior));
        assert!(!unchanged(
            &entry("u", Some("00000000000000000000000000000000"), None, None),
            &prior
        ));
        assert!(unchanged(
            &entry("u", None, None, Some("2020-01-01T00:00:00Z")),
            &prior
        ));
        assert!(!unchanged(
            &entry("u", None, None, Some("2020-01-02")),
            &prior
        ));
        prior.status = ResourceStatus::Deleted;
        assert!(!unchanged(&entry("u", Some(h), Some(11), None), &prior));
    }

    #[test]
    fn another_announced_hash_or_length_means_other_bytes() {
        let h = "5eb63bbbe01eeed093cb22bb8f5acdc3";
        let held = ResourceRecord {
            upstream: "u".into(),
            uri: "u".into(),
            status: ResourceStatus::Present,
            copy: Some(info(h, 11)),
            mime_type: None,
            set: String::new(),
            lastmod: W3cDateTime::now(),
            seq: 1,
            upstream_meta: UpstreamMeta::default(),
        };
        assert!(!announces_other_bytes(
            &entry("u", Some(h), Some(11), None),
            &held
        ));
        let other = entry(
            "u",
            Some("00000000000000000000000000000000"),
            Some(11),
            None,
        );
        assert!(announces_other_bytes(&other, &held));
        assert!(announces_other_bytes(
            &entry("u", None, Some(12), None),
            &held
        ));
        let silent = entry("u", None, None, Some("2020-01-01"));
        assert!(!announces_other_bytes(&silent, &held));
    }
}
