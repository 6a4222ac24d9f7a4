//! The publish stage: how one of rsagg's copies is described in its own documents.
//!
//! An entry of rsagg's Resource List (spec 10, 14.8) says what rsagg holds: `<loc>` is
//! rsagg's own URI for the copy, `lastmod` when rsagg's copy last changed, and `rs:md`
//! `hash` (md5 and sha-256), `length` and `type` describe rsagg's bytes. Where the copy came
//! from is the `via` link (the upstream URI with the upstream's `modified`, `hash`, `length`,
//! `type`), followed by the inherited links the pipeline's policy lets through.

use rsagg_model::{HashAlgorithm, HashValue, Hashes, Md, UrlEntry};
use rsagg_store::{ResourceRecord, ResourceStatus};

use crate::links::{LinkPolicy, via_link};
use crate::uris::own_uri;

/// The Resource List entry for `record`, or `None` when the copy is deleted (a Resource List
/// lists what exists; deletions go to Change Lists) or has no URI of its own. `held` gives
/// rsagg's URI for an upstream URI of the same collection it holds a copy of (for rewritten
/// links).
pub fn resource_entry(
    base_url: &str,
    record: &ResourceRecord,
    policy: &LinkPolicy,
    held: impl Fn(&str) -> Option<String>,
) -> Option<UrlEntry> {
    if record.status != ResourceStatus::Present {
        return None;
    }
    let copy = record.copy.as_ref()?;
    let loc = own_uri(base_url, &record.upstream, &record.uri)?;
    let hash = |algorithm, digest: &str| HashValue {
        algorithm,
        digest: digest.to_owned(),
    };
    let md = Md {
        hash: Some(Hashes(vec![
            hash(HashAlgorithm::Md5, &copy.md5),
            hash(HashAlgorithm::Sha256, &copy.sha256),
        ])),
        length: Some(copy.length),
        mime_type: record.mime_type.clone(),
        ..Md::default()
    };
    let mut links = vec![via_link(&record.uri, &record.upstream_meta)];
    links.extend(policy.apply(&record.upstream_meta.links, held));
    Some(UrlEntry {
        loc,
        lastmod: Some(record.lastmod),
        md: Some(md),
        links,
        ..UrlEntry::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Link, W3cDateTime};
    use rsagg_store::{BlobInfo, UpstreamMeta};

    const BASE: &str = "https://agg.example.org/maps/";

    fn record(status: ResourceStatus) -> ResourceRecord {
        ResourceRecord {
            upstream: "museum".into(),
            uri: "http://museum.example.org/res/1".into(),
            status,
            copy: Some(BlobInfo {
                sha256: "ab".repeat(32),
                md5: "cd".repeat(16),
                sha1: None,
                length: 1234,
            }),
            mime_type: Some("text/plain".into()),
            set: "http://museum.example.org/capabilitylist.xml".into(),
            lastmod: W3cDateTime::parse("2026-11-21T10:00:00.5Z").unwrap().value,
            seq: 9,
            upstream_meta: UpstreamMeta {
                lastmod: Some(W3cDateTime::parse("2020-01-01").unwrap().value),
                length: Some(1234),
                links: vec![
                    Link::new("describedby", "http://museum.example.org/res/1.xml"),
                    Link::new("up", "http://museum.example.org/capabilitylist.xml"),
                    Link::new("memento", "http://archive.example.org/m/1"),
                ],
                ..UpstreamMeta::default()
            },
        }
    }

    #[test]
    fn entries_describe_rsaggs_copy_and_its_provenance() {
        let held = |u: &str| own_uri(BASE, "museum", u).filter(|_| u.ends_with(".xml"));
        let e = resource_entry(
            BASE,
            &record(ResourceStatus::Present),
            &LinkPolicy::default(),
            held,
        )
        .unwrap();
        assert_eq!(
            e.loc,
            "https://agg.example.org/maps/r/museum/http/museum.example.org/res/1"
        );
        assert_eq!(e.lastmod.unwrap().to_string(), "2026-11-21T10:00:00.5Z");
        let md = e.md.unwrap();
        assert_eq!(
            md.hash.unwrap().to_string(),
            format!("md5:{} sha-256:{}", "cd".repeat(16), "ab".repeat(32))
        );
        assert_eq!(
            (md.length, md.mime_type.as_deref()),
            (Some(1234), Some("text/plain"))
        );
        let rels: Vec<(&str, &str)> = e
            .links
            .iter()
            .map(|l| (l.rel.as_str(), l.href.as_str()))
            .collect();
        assert_eq!(
            rels,
            [
                ("via", "http://museum.example.org/res/1"),
                (
                    "describedby",
                    "https://agg.example.org/maps/r/museum/http/museum.example.org/res/1.xml"
                ),
                ("memento", "http://archive.example.org/m/1"),
            ]
        );
        assert_eq!(e.links[0].modified.unwrap().to_string(), "2020-01-01");
    }

    #[test]
    fn a_resource_list_of_such_entries_passes_strict_validation() {
        use rsagg_model::{Capability, Header, Mode, Root, Severity};
        let mut header = Header::new(Root::Urlset, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(W3cDateTime::now());
        }
        header
            .links
            .push(Link::new("up", format!("{BASE}capabilitylist.xml")));
        let mut xml = Vec::new();
        rsagg_sitemap::writer::encode_header(&header, &mut xml);
        let e = resource_entry(
            BASE,
            &record(ResourceStatus::Present),
            &LinkPolicy::default(),
            |_| None,
        )
        .unwrap();
        rsagg_sitemap::writer::encode_entry(Root::Urlset, &e, &mut xml);
        xml.extend_from_slice(b"</urlset>\n");
        let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "own resource list");
        let mut r = rsagg_sitemap::SyncReader::open(xml.as_slice(), opts).unwrap();
        let back = r.next_entry().unwrap().unwrap();
        assert_eq!(back, e, "round-trips");
        assert!(r.next_entry().unwrap().is_none());
        let errors: Vec<_> = r
            .take_problems()
            .into_iter()
            .filter(|p| p.severity == Severity::Error)
            .collect();
        assert!(
            errors.is_empty(),
            "{errors:#?}\n{}",
            String::from_utf8_lossy(&xml)
        );
    }

    #[test]
    fn deleted_copies_are_not_listed() {
        assert!(
            resource_entry(
                BASE,
                &record(ResourceStatus::Deleted),
                &LinkPolicy::default(),
                |_| None
            )
            .is_none()
        );
    }
}
