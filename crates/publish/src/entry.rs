//! The publish stage: how one of rsagg's copies is described in its own documents.
//!
//! An entry of rsagg's Resource List (spec 10, 14.8) says what rsagg holds: `<loc>` is
//! rsagg's own URI for the copy, `lastmod` when rsagg's copy last changed, and `rs:md`
//! `hash` (md5 and sha-256), `length`, `encoding` and `type` describe rsagg's bytes exactly
//! as `serve` returns them (a copy kept encoded, as its upstream served and described it, is
//! served with that `Content-Encoding` and described by the encoded bytes, spec 7). Where
//! the copy came from is the `via` link (the upstream URI with the upstream's `modified`,
//! `hash`, `length`, `encoding`, `type`), followed by the inherited links the pipeline's
//! policy lets through.
//!
//! An entry describing a change (Change Lists, spec 12.1; Change Dump Manifests, 13.2) says
//! the same of the copy that change made, with rsagg's datetime of the change.
//!
//! Every document made whole in memory is encoded by [`document`](rsagg_sitemap::writer::document).

use rsagg_model::{Change, HashAlgorithm, HashValue, Hashes, Link, Md, UrlEntry};
use rsagg_store::{BlobInfo, LogEntry, ResourceRecord, ResourceStatus, UpstreamMeta};

use crate::links::{LinkPolicy, via_link};
use rsagg_layout::uris::own_uri;

/// Most entries of one document (spec 7: 50,000 per Sitemap): of a Change List, of the
/// Change Lists an index names, of the packages a dump names.
pub const MAX_DOCUMENT_ENTRIES: u64 = 50_000;

/// Targets of rewritten links that rsagg holds: upstream URI → rsagg's URI ([`held_targets`]).
pub type Held = std::collections::HashMap<String, String>;

/// The targets of `links` (inherited links of a resource of `upstream`) that `policy`
/// rewrites and that rsagg holds a present copy of, each with rsagg's URI: what the `held`
/// of [`resource_entry`] may answer. A target rsagg does not hold keeps the upstream's
/// href: rewritten, the link would answer 404 at rsagg, which is not true of its target
/// (spec 7: a link's attributes describe the linked resource). One state lookup per such
/// link; none for the entries (most) without a link to rewrite.
pub async fn held_targets(
    state: &rsagg_store::State,
    base_url: &str,
    upstream: &str,
    links: &[Link],
    policy: &LinkPolicy,
) -> Result<Held, rsagg_store::Error> {
    let mut held = Held::new();
    for l in links {
        if l.has_rel("via")
            || rsagg_config::is_derived(l)
            || policy.action(&l.rel) != crate::links::LinkAction::Rewrite
            || held.contains_key(&l.href)
        {
            continue;
        }
        let Some(own) = own_uri(base_url, upstream, &l.href) else {
            continue;
        };
        if let Some(r) = state.resource(upstream, &l.href).await?
            && r.status == ResourceStatus::Present
            && r.copy.is_some()
        {
            held.insert(l.href.clone(), own);
        }
    }
    Ok(held)
}

/// The inherited links of the entry of logged change `e` (`current`: the resource's record
/// now, for entries logged by an older rsagg without their upstream metadata).
pub fn change_links<'a>(e: &'a LogEntry, current: Option<&'a ResourceRecord>) -> &'a [Link] {
    match (&e.upstream_meta, current) {
        (Some(meta), _) => &meta.links,
        (None, Some(r)) => &r.upstream_meta.links,
        (None, None) => &[],
    }
}

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
    Some(UrlEntry {
        loc,
        lastmod: Some(record.lastmod),
        md: Some(copy_md(
            copy,
            record.mime_type.as_deref(),
            copy_encoding(&record.upstream_meta),
        )),
        links: entry_links(record, policy, held),
        ..UrlEntry::default()
    })
}

/// The entry of one logged change `e` (spec 12.1, 14.8), or `None` when the resource has no
/// URI of rsagg's own. `<loc>` is rsagg's URI; `datetime` is rsagg's datetime of the change
/// and so is `lastmod` for a creation or update, whose `hash`, `length` and `type` describe
/// the copy that change made (kept in the log, so they stay right after later changes). A
/// deletion has no bytes to describe: no `hash`, `length`, `type` or `lastmod` (as the
/// deletions of spec examples 3 and 19). The `via` link describes the upstream
/// representation of the version `e` made, and the inherited links follow, from what the log
/// kept of it (`e.upstream_meta`); no record is needed then, and callers pass `None`. For an
/// entry logged by an older rsagg without it, `current` is the resource's record now: only
/// while it still holds the version `e` made (`current.seq == e.seq`) does the `via` link
/// describe the upstream representation, since the upstream metadata kept in a record is
/// that of the latest version and must not be attributed to an earlier change; otherwise the
/// `via` link names the upstream URI alone.
pub fn change_entry(
    base_url: &str,
    e: &LogEntry,
    current: Option<&ResourceRecord>,
    policy: &LinkPolicy,
    held: &Held,
) -> Option<UrlEntry> {
    let loc = own_uri(base_url, &e.upstream, &e.uri)?;
    let version = e
        .upstream_meta
        .as_ref()
        .or(current.filter(|r| r.seq == e.seq).map(|r| &r.upstream_meta));
    let (mut md, lastmod) = match &e.copy {
        Some(copy) if e.change != Change::Deleted => (
            copy_md(
                copy,
                e.mime_type.as_deref(),
                version.and_then(copy_encoding),
            ),
            Some(e.at),
        ),
        _ => (Md::default(), None),
    };
    md.change = Some(e.change.clone());
    md.datetime = Some(e.at);
    let held = |u: &str| held.get(u).cloned();
    let links = match (&e.upstream_meta, current.filter(|r| r.seq == e.seq)) {
        (Some(meta), _) => {
            let mut links = vec![via_link(&e.uri, meta)];
            links.extend(policy.apply(&meta.links, held));
            links
        }
        (None, Some(record)) => entry_links(record, policy, held),
        (None, None) => vec![Link::new("via", e.uri.as_str())],
    };
    Some(UrlEntry {
        loc,
        lastmod,
        md: Some(md),
        links,
        ..UrlEntry::default()
    })
}

/// `rs:md` describing one of rsagg's copies (spec 7, 14.8): `hash` (md5 for Destinations
/// that only check that, sha-256 as the address), `length`, `encoding` (the content coding
/// the stored bytes are in, [`copy_encoding`]) and `type` of rsagg's bytes, which is what a
/// Destination checks what it fetched from `<loc>` against.
pub fn copy_md(copy: &BlobInfo, mime_type: Option<&str>, encoding: Option<&str>) -> Md {
    Md {
        hash: Some(hashes(&copy.md5, &copy.sha256)),
        length: Some(copy.length),
        encoding: encoding.map(str::to_owned),
        mime_type: mime_type.map(str::to_owned),
        ..Md::default()
    }
}

/// The content coding a copy's bytes are in (spec 7 `encoding`, RFC 9110 8.4): the one its
/// upstream entry described them in, since the harvest keeps such bytes as served (still
/// encoded) and verified them against that description; `None` for the identity
/// representation (no `encoding`, or `identity`).
pub fn copy_encoding(meta: &UpstreamMeta) -> Option<&str> {
    meta.encoding
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
}

/// `rs:md hash` with both digests rsagg keeps (md5 for the spec's examples and older
/// clients, sha-256 for strength; spec 7), of a copy or of a dump package.
pub fn hashes(md5: &str, sha256: &str) -> Hashes {
    let value = |algorithm, digest: &str| HashValue {
        algorithm,
        digest: digest.to_owned(),
    };
    Hashes(vec![
        value(HashAlgorithm::Md5, md5),
        value(HashAlgorithm::Sha256, sha256),
    ])
}

/// The links of a republished entry for the version `record` holds (spec 14.8): the
/// provenance (`via`, describing the upstream representation) first, then the inherited links
/// the pipeline's policy lets through. `held` as in [`resource_entry`].
pub fn entry_links(
    record: &ResourceRecord,
    policy: &LinkPolicy,
    held: impl Fn(&str) -> Option<String>,
) -> Vec<Link> {
    let mut links = vec![via_link(&record.uri, &record.upstream_meta)];
    links.extend(policy.apply(&record.upstream_meta.links, held));
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_layout::testing::strict;
    use rsagg_model::W3cDateTime;
    use rsagg_model::{Header, Root};
    use rsagg_sitemap::writer::document;

    const BASE: &str = "https://agg.example.org/maps/";

    /// Reads rsagg's own document `xml` back with the strict validator (as a Destination's
    /// strictest reading) and fails on any Error-severity problem; returns what it read.
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
        use rsagg_model::Capability;
        let mut header = Header::new(Root::Urlset, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(W3cDateTime::now());
        }
        header.links.push(rsagg_layout::capability::up_link(BASE));
        let e = resource_entry(
            BASE,
            &record(ResourceStatus::Present),
            &LinkPolicy::default(),
            |_| None,
        )
        .unwrap();
        let (_, back) = strict(&document(&header, [e.clone()]));
        assert_eq!(back, [e], "round-trips");
    }

    /// A record harvested from a document shaped like real producers' (see
    /// `tests/fixtures/real-world/resourcelist.xml`): zone-less microsecond `lastmod`, a
    /// `describedBy` link with a zone-less `modified`, an offset on another link.
    fn real_world_record() -> ResourceRecord {
        let t = |s: &str| W3cDateTime::parse(s).unwrap().value;
        let mut r = record(ResourceStatus::Present);
        r.upstream_meta.lastmod = Some(t("2018-11-06T17:41:16.901455"));
        r.upstream_meta.links = vec![
            Link {
                modified: Some(t("2018-11-06T17:41:16.901471")),
                ..Link::new("describedBy", "http://museum.example.org/res/1.json")
            },
            Link {
                modified: Some(t("2018-11-06T18:41:16+01:00")),
                ..Link::new("Memento", "http://archive.example.org/m/1")
            },
            Link::new("UP", "http://museum.example.org/capabilitylist.xml"),
        ];
        r
    }

    /// Checks the links of an entry made from [`real_world_record`].
    fn assert_normalised(links: &[Link]) {
        let got: Vec<(&str, String)> = links
            .iter()
            .map(|l| {
                (
                    l.rel.as_str(),
                    l.modified.map(|m| m.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("via", "2018-11-06T17:41:16.901455Z".to_owned()),
                ("describedby", "2018-11-06T17:41:16.901471Z".to_owned()),
                ("memento", "2018-11-06T17:41:16Z".to_owned()),
            ]
        );
    }

    #[test]
    fn own_resource_list_entries_for_zoneless_upstream_times_are_strictly_valid() {
        use rsagg_model::Capability;
        let record = real_world_record();
        let mut header = Header::new(Root::Urlset, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(W3cDateTime::now());
        }
        header.links.push(rsagg_layout::capability::up_link(BASE));
        let e = resource_entry(BASE, &record, &LinkPolicy::default(), |_| None).unwrap();
        assert_normalised(&e.links);
        // The instant the upstream gave is kept.
        assert!(
            e.links[0]
                .modified
                .unwrap()
                .cmp_instant(&record.upstream_meta.lastmod.unwrap())
                .is_eq()
        );
        let xml = document(&header, [e.clone()]);
        let text = String::from_utf8_lossy(&xml);
        assert!(
            text.contains(r#"<rs:ln rel="via" href="http://museum.example.org/res/1" modified="2018-11-06T17:41:16.901455Z""#),
            "{text}"
        );
        let (_, back) = strict(&xml);
        assert_eq!(back, [e], "round-trips");
    }

    #[test]
    fn own_change_list_entries_for_zoneless_upstream_times_are_strictly_valid() {
        use rsagg_model::Capability;
        let record = real_world_record();
        let logged = LogEntry {
            seq: record.seq,
            at: record.lastmod,
            upstream: record.upstream.clone(),
            uri: record.uri.clone(),
            change: Change::Updated,
            copy: record.copy.clone(),
            mime_type: record.mime_type.clone(),
            upstream_meta: None,
        };
        let mut header = Header::new(Root::Urlset, Capability::ChangeList);
        if let Some(md) = header.md.as_mut() {
            md.from = W3cDateTime::parse("2026-11-21T00:00:00Z")
                .ok()
                .map(|p| p.value);
        }
        header.links.push(rsagg_layout::capability::up_link(BASE));
        let e = change_entry(
            BASE,
            &logged,
            Some(&record),
            &LinkPolicy::default(),
            &Held::new(),
        )
        .unwrap();
        assert_normalised(&e.links);
        // The same entry from what a log entry keeps of its version, without the record.
        let carried = LogEntry {
            upstream_meta: Some(record.upstream_meta.clone()),
            ..logged.clone()
        };
        assert_eq!(
            change_entry(BASE, &carried, None, &LinkPolicy::default(), &Held::new()).as_ref(),
            Some(&e)
        );
        let (_, back) = strict(&document(&header, [e.clone()]));
        assert_eq!(back, [e], "round-trips");
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
