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
    /// `collection.describedby`: a document describing the collection, linked with
    /// `rs:ln rel="describedby"` (spec 9.1 and 8 recommend one on the Capability List and
    /// the Source Description).
    pub describedby: Option<String>,
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
    if let Some(d) = &what.describedby {
        header.links.push(Link::new("describedby", d.clone()));
    }
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

/// One Capability List a Source Description lists: its URL and the document describing its
/// set of resources (`collection.describedby`), when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The Capability List's URL.
    pub capability_list: String,
    /// `rs:ln rel="describedby"` of its entry (spec 8: recommended).
    pub describedby: Option<String>,
}

/// A Source Description (spec 8) listing `capability_lists`: of this collection alone in its
/// store, of every collection served at the server's `/.well-known/resourcesync`. Each
/// entry links to the document describing its set (`describedby`), and the Source
/// Description itself to every distinct one of them (spec 8 recommends an `rs:ln
/// rel="describedby"` of the Source Description; rsagg's Source is its collections, so
/// their descriptions describe it).
pub fn source_description(capability_lists: impl IntoIterator<Item = Listed>) -> Vec<u8> {
    let mut header = Header::new(Root::Urlset, Capability::Description);
    let mut entries = Vec::new();
    for l in capability_lists {
        let mut links = Vec::new();
        if let Some(d) = l.describedby {
            if !header.links.iter().any(|h| h.href == d) {
                header.links.push(Link::new("describedby", d.clone()));
            }
            links.push(Link::new("describedby", d));
        }
        entries.push(capability_entry(
            l.capability_list,
            Capability::CapabilityList,
            links,
        ));
    }
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
            describedby: None,
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
        let listed = |u: &str| Listed {
            capability_list: u.to_owned(),
            describedby: None,
        };
        let xml = source_description([
            listed("https://agg.example.org/maps/capabilitylist.xml"),
            listed("https://agg.example.org/books/capabilitylist.xml"),
        ]);
        let (header, entries) = strict(&xml);
        assert_eq!(header.md.unwrap().capability, Some(Capability::Description));
        assert_eq!(entries.len(), 2);
    }

    /// Every problem, warnings included, of one of rsagg's own documents read strictly.
    fn problems(xml: &[u8]) -> Vec<String> {
        let opts = rsagg_sitemap::ReadOptions::new(rsagg_model::Mode::Strict, "own document");
        let d = rsagg_sitemap::read_document(xml, opts).unwrap();
        d.problems.iter().map(|p| format!("{p:?}")).collect()
    }

    #[test]
    fn with_describedby_both_documents_are_warning_free_in_strict_mode() {
        const ABOUT: &str = "https://agg.example.org/about/maps.html";
        let what = Advertised {
            resource_list: true,
            describedby: Some(ABOUT.to_owned()),
            ..Advertised::default()
        };
        let list = capability_list(BASE, &what);
        assert_eq!(problems(&list), Vec::<String>::new());
        let (header, _) = strict(&list);
        let d = header
            .links
            .iter()
            .find(|l| l.rel == "describedby")
            .unwrap();
        assert_eq!(d.href, ABOUT);
        let description = source_description([
            Listed {
                capability_list: capability_list_url(BASE),
                describedby: Some(ABOUT.to_owned()),
            },
            Listed {
                capability_list: "https://agg.example.org/books/capabilitylist.xml".to_owned(),
                describedby: Some(ABOUT.to_owned()),
            },
        ]);
        assert_eq!(problems(&description), Vec::<String>::new());
        let (header, entries) = strict(&description);
        assert_eq!(header.links.len(), 1, "one link per distinct description");
        assert_eq!(entries[0].links[0].rel, "describedby");
        // Without it, the recommendation is unmet (a warning, the reason for the setting).
        let bare = capability_list(BASE, &Advertised::default());
        assert!(
            problems(&bare).iter().any(|p| p.contains("describedby")),
            "{:?}",
            problems(&bare)
        );
    }
}
