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
