//! The collection's Capability List (spec 9) and its own Source Description (spec 8).
//!
//! The Capability List is written last in a publish, after the documents it names, so a
//! Destination starting from it never meets a capability whose document is not there yet. It
//! advertises only what exists. Its `up` link names the Source Description at the server's
//! `/.well-known/resourcesync` (spec 8: the Source Description of a Source lives there;
//! `rsagg serve` builds it for every pipeline it serves); `sourcedescription.xml` in the
//! collection's store is the same document for this collection alone, for deployments that
//! serve the store directly.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::{Capability, Header, Link, Md, Root, UrlEntry};
use url::Url;

use crate::Error;

/// What a publish has out there, for the Capability List to advertise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Advertised {
    /// `resourcelist.xml` exists.
    pub resource_list: bool,
    /// `resourcedump.xml` exists.
    pub resource_dump: bool,
    /// `changelist.xml` exists.
    pub change_list: bool,
    /// `changedump.xml` exists.
    pub change_dump: bool,
    /// The change-notification channel: (topic URI, hub URL) (Change Notification 1.0.1
    /// section 5).
    pub notification: Option<(String, String)>,
}

/// Where the Source Description of the server publishing `base_url` is: the
/// `/.well-known/resourcesync` of its origin (spec 8).
pub fn source_description_url(base_url: &str) -> String {
    match Url::parse(base_url) {
        Ok(u) => format!(
            "{}/.well-known/resourcesync",
            u.origin().ascii_serialization()
        ),
        Err(_) => format!("{base_url}.well-known/resourcesync"),
    }
}

/// The Capability List of the collection at `base_url` (spec 9.1; Change Notification 5 for
/// the channel).
pub fn capability_list(base_url: &str, what: &Advertised) -> Vec<u8> {
    let mut header = Header::new(Root::Urlset, Capability::CapabilityList);
    header
        .links
        .push(Link::new("up", source_description_url(base_url)));
    let mut xml = Vec::new();
    rsagg_sitemap::writer::encode_header(&header, &mut xml);
    let entry = |loc: String, capability: Capability, links: Vec<Link>| UrlEntry {
        loc,
        md: Some(Md {
            capability: Some(capability),
            ..Md::default()
        }),
        links,
        ..UrlEntry::default()
    };
    // The order of the spec's examples (9.1): resource list, dump, change list, dump.
    for (present, name, capability) in [
        (
            what.resource_list,
            "resourcelist.xml",
            Capability::ResourceList,
        ),
        (
            what.resource_dump,
            "resourcedump.xml",
            Capability::ResourceDump,
        ),
        (what.change_list, "changelist.xml", Capability::ChangeList),
        (what.change_dump, "changedump.xml", Capability::ChangeDump),
    ] {
        if present {
            let e = entry(format!("{base_url}{name}"), capability, Vec::new());
            rsagg_sitemap::writer::encode_entry(Root::Urlset, &e, &mut xml);
        }
    }
    if let Some((topic, hub)) = &what.notification {
        let e = entry(
            topic.clone(),
            Capability::ChangeNotification,
            vec![Link::new("hub", hub.clone())],
        );
        rsagg_sitemap::writer::encode_entry(Root::Urlset, &e, &mut xml);
    }
    xml.extend_from_slice(b"</urlset>\n");
    xml
}

/// A Source Description (spec 8) listing the Capability Lists at `capability_lists`.
pub fn source_description<'a>(capability_lists: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let header = Header::new(Root::Urlset, Capability::Description);
    let mut xml = Vec::new();
    rsagg_sitemap::writer::encode_header(&header, &mut xml);
    for loc in capability_lists {
        let e = UrlEntry {
            loc: loc.to_owned(),
            md: Some(Md {
                capability: Some(Capability::CapabilityList),
                ..Md::default()
            }),
            ..UrlEntry::default()
        };
        rsagg_sitemap::writer::encode_entry(Root::Urlset, &e, &mut xml);
    }
    xml.extend_from_slice(b"</urlset>\n");
    xml
}

/// Writes `capabilitylist.xml` and `sourcedescription.xml` of the collection at `base_url`.
pub async fn publish(
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    what: &Advertised,
) -> Result<(), Error> {
    let cl = format!("{base_url}capabilitylist.xml");
    for (name, body) in [
        ("sourcedescription.xml", source_description([cl.as_str()])),
        ("capabilitylist.xml", capability_list(base_url, what)),
    ] {
        let path = Path::from(name);
        objects
            .put(&path, body.into())
            .await
            .map_err(|e| Error::Io {
                what: format!("object {path}"),
                source: std::io::Error::other(e),
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Mode, Severity};

    const BASE: &str = "https://agg.example.org/maps/";

    fn strict(xml: &[u8]) -> (Header, Vec<UrlEntry>) {
        let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "own document");
        let mut r = rsagg_sitemap::SyncReader::open(xml, opts).unwrap();
        let header = r.header().clone();
        let mut entries = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            entries.push(e);
        }
        let errors: Vec<_> = r
            .take_problems()
            .into_iter()
            .filter(|p| p.severity == Severity::Error)
            .collect();
        assert!(
            errors.is_empty(),
            "{errors:#?}\n{}",
            String::from_utf8_lossy(xml)
        );
        (header, entries)
    }

    #[test]
    fn the_capability_list_advertises_only_what_exists_and_points_up() {
        let what = Advertised {
            resource_list: true,
            change_list: true,
            ..Advertised::default()
        };
        let (header, entries) = strict(&capability_list(BASE, &what));
        assert_eq!(
            header.links[0].href,
            "https://agg.example.org/.well-known/resourcesync"
        );
        let locs: Vec<_> = entries.iter().map(|e| e.loc.as_str()).collect();
        assert_eq!(
            locs,
            [
                "https://agg.example.org/maps/resourcelist.xml",
                "https://agg.example.org/maps/changelist.xml"
            ]
        );
    }

    #[test]
    fn a_full_capability_list_with_a_notification_channel_is_valid() {
        let what = Advertised {
            resource_list: true,
            resource_dump: true,
            change_list: true,
            change_dump: true,
            notification: Some((
                format!("{BASE}change/"),
                "https://hub.example.org/".to_owned(),
            )),
        };
        let (_, entries) = strict(&capability_list(BASE, &what));
        assert_eq!(entries.len(), 5);
        let channel = &entries[4];
        assert_eq!(
            channel.md.as_ref().unwrap().capability,
            Some(Capability::ChangeNotification)
        );
        assert_eq!(channel.links[0].rel, "hub");
    }

    #[test]
    fn the_source_description_lists_capability_lists() {
        let xml = source_description([
            "https://agg.example.org/maps/capabilitylist.xml",
            "https://agg.example.org/books/capabilitylist.xml",
        ]);
        let (header, entries) = strict(&xml);
        assert_eq!(header.md.unwrap().capability, Some(Capability::Description));
        assert_eq!(entries.len(), 2);
    }
}
