//! The links rsagg derives from an OAI-PMH record's header (`docs/contract.md`, "OAI-PMH
//! upstreams"), kept with the record's upstream links and marked as rsagg's own
//! ([`rsagg_config::derived`]), so the publisher tells them from links an upstream wrote:
//!
//! - `via`: the record's `GetRecord` URL (OAI-PMH 2.0 section 4.1) with its datestamp as
//!   `modified` and no `hash`, `length` or `type`. That URL answers the whole OAI-PMH
//!   envelope, with a `responseDate` of its own at every request, never the metadata bytes
//!   rsagg holds; fixity on it could never match (spec 7: a link's attributes pertain to the
//!   linked resource). The metadata's own SHA-256 and length stay on the entry the harvest
//!   compares and verifies copies by.
//! - `collection`, one per `setSpec` of the header (section 2.5.1; spec 14.7): the set's
//!   `ListRecords` URL, `{base}?verb=ListRecords&metadataPrefix=P&set=S` (section 3.4,
//!   selective harvesting): dereferenceable at the provider, it lists exactly the set's
//!   members in the metadata format republished, and it is the name rsagg gives a set it
//!   harvests (stats, checkpoints). Published only with `[publish.links] oai_sets`.

use rsagg_config::{UpstreamConfig, derived};
use rsagg_model::Link;
use rsagg_oai::{Granularity, Header, Request};
use url::Url;

/// What the mark on derived links says they come from.
const FROM: &str = "oai-pmh";

/// Most `collection` links one record gets: a header naming more sets is cut there (and
/// logged), so one record cannot make its entry, and each document holding it, unbounded.
pub(crate) const MAX_SET_LINKS: usize = 64;

/// The set `spec`'s `ListRecords` URL at `up` (section 3.4), in `up`'s metadata prefix.
pub(crate) fn set_url(up: &UpstreamConfig, spec: &str) -> Url {
    Request::ListRecords {
        identifiers: false,
        prefix: up.metadata_prefix().to_owned(),
        from: None,
        until: None,
        set: Some(spec.to_owned()),
        granularity: Granularity::Second,
    }
    .url(&up.url)
}

/// The links of the resource a record of `up` becomes, at `uri` (its `GetRecord` URL): its
/// `via` and one `collection` per distinct `setSpec` (at most [`MAX_SET_LINKS`]), all
/// marked as derived.
pub(crate) fn record_links(up: &UpstreamConfig, header: &Header, uri: &str) -> Vec<Link> {
    let mut links = vec![derived(
        Link {
            modified: Some(header.datestamp.to_w3c()),
            ..Link::new("via", uri)
        },
        FROM,
    )];
    let mut specs: Vec<&str> = Vec::new();
    for spec in header
        .sets
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
    {
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    if specs.len() > MAX_SET_LINKS {
        tracing::warn!(upstream = %up.name, uri = %rsagg_model::bounded(uri), sets = specs.len(), "an OAI-PMH record in more sets than rsagg republishes as collection links (OAI-PMH 2.0 section 2.5.1; spec 14.7): the first {MAX_SET_LINKS} are");
        specs.truncate(MAX_SET_LINKS);
    }
    links.extend(
        specs
            .into_iter()
            .map(|spec| derived(Link::new("collection", set_url(up, spec).as_str()), FROM)),
    );
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_config::is_derived;
    use rsagg_oai::Datestamp;

    fn up() -> UpstreamConfig {
        toml::from_str(
            "name = \"repo\"\nurl = \"http://repo.example/oai\"\nkind = \"oai-pmh\"\nmetadata_prefix = \"mods\"\n",
        )
        .unwrap()
    }

    fn header(sets: &[&str]) -> Header {
        Header {
            identifier: "oai:repo:1".into(),
            datestamp: Datestamp::parse("2024-05-01T10:00:00Z").unwrap(),
            sets: sets.iter().map(|s| (*s).to_owned()).collect(),
            deleted: false,
        }
    }

    #[test]
    fn a_record_gets_a_via_without_fixity_and_a_collection_link_per_set() {
        let uri =
            "http://repo.example/oai?verb=GetRecord&identifier=oai%3Arepo%3A1&metadataPrefix=mods";
        let links = record_links(&up(), &header(&["com_1", "col_1:a", "com_1"]), uri);
        assert!(links.iter().all(is_derived));
        let via = &links[0];
        assert_eq!((via.rel.as_str(), via.href.as_str()), ("via", uri));
        assert_eq!(via.modified.unwrap().to_string(), "2024-05-01T10:00:00Z");
        assert_eq!(
            (via.hash.as_ref(), via.length, via.mime_type.as_ref()),
            (None, None, None)
        );
        let sets: Vec<&str> = links[1..].iter().map(|l| l.href.as_str()).collect();
        assert_eq!(
            sets,
            [
                "http://repo.example/oai?verb=ListRecords&metadataPrefix=mods&set=com_1",
                "http://repo.example/oai?verb=ListRecords&metadataPrefix=mods&set=col_1%3Aa",
            ]
        );
        assert!(links[1..].iter().all(|l| l.rel == "collection"));
    }

    #[test]
    fn the_sets_of_one_record_are_bounded() {
        let many: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let links = record_links(&up(), &header(&refs), "http://repo.example/oai?x");
        assert_eq!(links.len(), 1 + MAX_SET_LINKS);
    }
}
