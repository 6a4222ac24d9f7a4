//! The collection's Capability List (spec 9) and its own Source Description (spec 8).
//!
//! The Capability List is written last in a publish, after the documents it names, so a
//! Destination starting from it never meets a capability whose document is not there yet. It
//! advertises only what exists. Its `up` link names the Source Description at the server's
//! `/.well-known/resourcesync` (spec 8: the Source Description of a Source lives there;
//! `rsagg serve` builds it for every pipeline it serves); `sourcedescription.xml` in the
//! collection's store is the same document for this collection alone, for deployments that
//! serve the store directly.

use rsagg_model::{Capability, Header, Link, Md, Root, UrlEntry};
use rsagg_sitemap::writer::document;

use crate::paths::{CHANGE_DUMP, CHANGE_LIST, RESOURCE_DUMP, RESOURCE_LIST};
pub use crate::paths::{capability_list_url, source_description_url};

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

/// The `rs:ln rel="up"` every other document of the collection has, to its Capability List
/// (spec 10.1, 11.1, 11.2, 12.1, 12.2, 13.1, 13.2).
pub fn up_link(base_url: &str) -> Link {
    Link::new("up", capability_list_url(base_url))
}

/// The entry naming a document of capability `capability` at `loc` (spec 8, 9.1).
fn capability_entry(loc: String, capability: Capability, links: Vec<Link>) -> UrlEntry {
    UrlEntry {
        loc,
        md: Some(Md {
            capability: Some(capability),
            ..Md::default()
        }),
        links,
        ..UrlEntry::default()
    }
}

/// The Capability List of the collection at `base_url` (spec 9.1; Change Notification 5 for
/// the channel).
pub fn capability_list(base_url: &str, what: &Advertised) -> Vec<u8> {
    let mut header = Header::new(Root::Urlset, Capability::CapabilityList);
    header
        .links
        .push(Link::new("up", source_description_url(base_url)));
    let mut entries = Vec::new();
    // The order of the spec's examples (9.1): resource list, dump, change list, dump.
    for (present, name, capability) in [
        (what.resource_list, RESOURCE_LIST, Capability::ResourceList),
        (what.resource_dump, RESOURCE_DUMP, Capability::ResourceDump),
        (what.change_list, CHANGE_LIST, Capability::ChangeList),
        (what.change_dump, CHANGE_DUMP, Capability::ChangeDump),
    ] {
        if present {
            entries.push(capability_entry(
                format!("{base_url}{name}"),
                capability,
                Vec::new(),
            ));
        }
    }
    if let Some((topic, hub)) = &what.notification {
        entries.push(capability_entry(
            topic.clone(),
            Capability::ChangeNotification,
            vec![Link::new("hub", hub.clone())],
        ));
    }
    document(&header, entries)
}

/// A Source Description (spec 8) listing the Capability Lists at `capability_lists`: of this
/// collection alone in its store, of every collection served at the server's
/// `/.well-known/resourcesync`.
pub fn source_description(
    capability_lists: impl IntoIterator<Item = impl Into<String>>,
) -> Vec<u8> {
    let header = Header::new(Root::Urlset, Capability::Description);
    let entries = capability_lists
        .into_iter()
        .map(|loc| capability_entry(loc.into(), Capability::CapabilityList, Vec::new()));
    document(&header, entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::strict;

    const BASE: &str = "https://agg.example.org/maps/";

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
