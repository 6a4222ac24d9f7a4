//! What republished entries say about where they came from and what they link to
//! (spec 14.8 and the inherited-link policy of the design brief).
//!
//! - Every link says only what is true of its target (spec 7: a link's attributes pertain
//!   to the related resource).
//! - Provenance: every republished entry carries one `rs:ln rel="via"` to the upstream
//!   resource, with `modified`, `hash`, `length`, `encoding` and `type` of the upstream
//!   representation (what its URI answers). When the upstream entry already has a `via`
//!   link (the upstream is itself an aggregator), that link is kept unchanged instead: it
//!   names the original. An OAI-PMH record's `via` is the one the harvest derived from its
//!   header ([`rsagg_config::is_derived`]): its `GetRecord` URL with the datestamp as
//!   `modified` and no fixity, because that URL answers the whole OAI-PMH envelope (with a
//!   fresh `responseDate`), never the metadata bytes rsagg holds.
//! - Inherited links (the upstream entry's other `rs:ln`) pass an allowlist by relation:
//!   `describedby`, `describes`, `alternate` are rewritten to rsagg's copy when rsagg holds
//!   the target, else kept; `duplicate`, `memento`, `profile` and `collection` (membership
//!   stays true of the copy, and the upstream's collection is where a Destination can
//!   dereference it; spec 14.7) are kept; everything else (`canonical`, `up`, `index`,
//!   `contents`, `patch`, `timegate`, `timemap` and any relation not listed) is dropped,
//!   because it describes the upstream's own documents or services, which rsagg does not
//!   republish. `[publish.links]` moves any relation to another action.
//! - Links rsagg derived from an OAI-PMH header other than `via`: each `setSpec` as a
//!   `collection` link to the set's `ListRecords` URL, published when `[publish.links]
//!   oai_sets` is on (the default), never otherwise; the policy does not apply to them
//!   (they are rsagg's own statement, not an upstream's link).
//! - Relation types compare case-insensitively everywhere (RFC 8288 section 2.1.1: an
//!   upstream's `describedBy` is `describedby`, and so are `[publish.links]` keys), and are
//!   written as their lowercase registered names ([`Link::normalised_rel`]).
//! - ResourceSync's own relation types are URIs (spec 7, 14.4:
//!   `http://www.openarchives.org/rs/terms/patch`); the policy and `[publish.links]` name
//!   them by that URI or by the short name alike (`patch`; [`rsagg_config::relation_key`]),
//!   each token of a `rel` with several, and rsagg writes them as the URI.
//! - Datetimes an upstream wrote (`modified`) are written in UTC with `Z`
//!   ([`rsagg_model::W3cDateTime::to_utc`]): a zone-less `2018-11-06T17:41:16.901455`
//!   republished verbatim would make rsagg's own documents fail strict validation (spec 7).

use std::collections::HashMap;

use rsagg_model::Link;
use rsagg_store::UpstreamMeta;

use rsagg_config::{LinkPolicyConfig, is_derived, relation_key, relation_uri, underived};

/// What happens to an inherited link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAction {
    /// Point it at rsagg's copy of the target when rsagg holds one, else keep it.
    Rewrite,
    /// Republish it unchanged.
    Keep,
    /// Leave it out.
    Drop,
}

const DEFAULTS: &[(&str, LinkAction)] = &[
    ("describedby", LinkAction::Rewrite),
    ("describes", LinkAction::Rewrite),
    ("alternate", LinkAction::Rewrite),
    ("duplicate", LinkAction::Keep),
    ("memento", LinkAction::Keep),
    ("profile", LinkAction::Keep),
    ("collection", LinkAction::Keep),
    ("canonical", LinkAction::Drop),
    ("up", LinkAction::Drop),
    ("index", LinkAction::Drop),
    ("contents", LinkAction::Drop),
    ("patch", LinkAction::Drop),
    ("timegate", LinkAction::Drop),
    ("timemap", LinkAction::Drop),
];

/// The inherited-link policy of one pipeline.
#[derive(Debug, Clone)]
pub struct LinkPolicy {
    actions: HashMap<String, LinkAction>,
    /// Publish the `collection` links derived from OAI-PMH `setSpec`s (`[publish.links]
    /// oai_sets`).
    oai_sets: bool,
}

impl Default for LinkPolicy {
    fn default() -> Self {
        LinkPolicy {
            actions: DEFAULTS
                .iter()
                .map(|(rel, a)| ((*rel).to_owned(), *a))
                .collect(),
            oai_sets: LinkPolicyConfig::default().oai_sets,
        }
    }
}

impl LinkPolicy {
    /// The default policy with the pipeline's `[publish.links]` overrides applied.
    pub fn new(cfg: &LinkPolicyConfig) -> Self {
        let mut p = LinkPolicy::default();
        for (rels, action) in [
            (&cfg.keep, LinkAction::Keep),
            (&cfg.rewrite, LinkAction::Rewrite),
            (&cfg.drop, LinkAction::Drop),
        ] {
            for rel in rels {
                p.actions.insert(relation_key(rel), action);
            }
        }
        p.oai_sets = cfg.oai_sets;
        p
    }

    /// A stable text naming every relation and its action: published entries rendered
    /// under another policy are stale, and the Resource List compares this to know when it
    /// has to re-render every entry rather than patch the changed ones.
    pub fn fingerprint(&self) -> String {
        let mut rels: Vec<_> = self.actions.iter().collect();
        rels.sort_by(|a, b| a.0.cmp(b.0));
        let mut text = rels
            .iter()
            .map(|(rel, a)| format!("{rel}={a:?}"))
            .collect::<Vec<_>>()
            .join(",");
        // Before the switch existed no entry had derived collection links, and the `via`
        // of an OAI-PMH record claimed the metadata's fixity: entries rendered then are
        // stale too.
        text.push_str(if self.oai_sets {
            ";oai_sets=on"
        } else {
            ";oai_sets=off"
        });
        text
    }

    /// The action for a `rel` value. Relation types compare by [`relation_key`]:
    /// case-insensitively (RFC 8288), and a ResourceSync relation by its short name or its
    /// URI alike (`http://www.openarchives.org/rs/terms/patch` is `patch`); a value with
    /// several types takes the most permissive of their actions.
    pub fn action(&self, rel: &str) -> LinkAction {
        let mut best = LinkAction::Drop;
        for token in rel.split_ascii_whitespace() {
            match self
                .actions
                .get(&relation_key(token))
                .copied()
                .unwrap_or(LinkAction::Drop)
            {
                LinkAction::Rewrite => return LinkAction::Rewrite,
                LinkAction::Keep => best = LinkAction::Keep,
                LinkAction::Drop => {}
            }
        }
        best
    }

    /// The inherited links to republish, in their order, as rsagg writes them
    /// ([`republished`]). `own` gives rsagg's URI for an upstream URI when rsagg holds a
    /// copy of it. `via` links are not inherited here (see [`via_link`]). Links rsagg
    /// derived itself ([`is_derived`]) are not the policy's: a `collection` one (an OAI-PMH
    /// `setSpec`) is published when `oai_sets` is on, any other is left out.
    pub fn apply(&self, links: &[Link], own: impl Fn(&str) -> Option<String>) -> Vec<Link> {
        links
            .iter()
            .filter(|l| !l.has_rel("via"))
            .filter_map(|l| match is_derived(l) {
                true => (self.oai_sets && l.has_rel("collection")).then(|| republished(l.clone())),
                false => self.inherited(l, &own),
            })
            .collect()
    }

    /// An inherited link as the policy republishes it, if it does.
    fn inherited(&self, l: &Link, own: &impl Fn(&str) -> Option<String>) -> Option<Link> {
        match self.action(&l.rel) {
            LinkAction::Drop => None,
            LinkAction::Keep => Some(republished(l.clone())),
            LinkAction::Rewrite => Some(republished(match own(&l.href) {
                // The copy is the same bitstream: hash, length and type still hold.
                Some(href) => Link { href, ..l.clone() },
                None => l.clone(),
            })),
        }
    }
}

/// An upstream link as rsagg writes it: `rel` as lowercase registered names
/// ([`Link::normalised_rel`]), ResourceSync's own relations as the spec writes them (its
/// URI, `http://www.openarchives.org/rs/terms/patch`, also for an upstream's `patch`;
/// spec 7, 14.4), and `modified` in UTC with `Z` ([`rsagg_model::W3cDateTime::to_utc`],
/// same instant and precision), so rsagg's own documents stay strictly valid whatever the
/// upstream wrote (spec 7; RFC 8288 2.1.1).
pub fn republished(link: Link) -> Link {
    let mut link = underived(link);
    link.rel = link
        .normalised_rel()
        .split(' ')
        .map(|t| relation_uri(t).unwrap_or_else(|| t.to_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    link.modified = link.modified.map(|m| m.to_utc());
    link
}

/// The provenance link of a republished entry (spec 14.8): the upstream's own `via` when it
/// has one (a chain of aggregators names the original) or the one the harvest derived (an
/// OAI-PMH record's `GetRecord` URL and datestamp, no fixity: see the module's
/// documentation), else a new one to `upstream_uri` describing the upstream representation
/// (its `hash`, `length`, `encoding` and `type`: what that URI answers). Either way its `modified` is written in UTC
/// with `Z` ([`republished`]): the upstream's `lastmod` is copied here, and real Sources
/// write it without a time zone (`2018-11-06T17:41:16.901455`), which is not a W3C Datetime
/// and would fail rsagg's own strict validation if republished verbatim.
pub fn via_link(upstream_uri: &str, meta: &UpstreamMeta) -> Link {
    if let Some(existing) = meta.links.iter().find(|l| l.has_rel("via")) {
        return republished(existing.clone());
    }
    republished(Link {
        modified: meta.lastmod,
        hash: meta.hash.clone(),
        length: meta.length,
        encoding: meta.encoding.clone(),
        mime_type: meta.mime_type.clone(),
        ..Link::new("via", upstream_uri)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Hashes, W3cDateTime};

    const UP: &str = "http://up.example.org/res/1";
    const TARGET: &str = "http://up.example.org/res/1.meta";
    const OURS: &str = "https://agg.example.org/c/up/res/1.meta";

    fn own(uri: &str) -> Option<String> {
        (uri == TARGET).then(|| OURS.to_owned())
    }

    fn one(policy: &LinkPolicy, rel: &str, href: &str) -> Option<Link> {
        let links = vec![Link {
            length: Some(42),
            ..Link::new(rel, href)
        }];
        let out = policy.apply(&links, own);
        assert!(out.len() <= 1);
        out.into_iter().next()
    }

    #[test]
    fn describedby_is_rewritten_when_held_else_kept() {
        let p = LinkPolicy::default();
        let l = one(&p, "describedby", TARGET).unwrap();
        assert_eq!((l.href.as_str(), l.length), (OURS, Some(42)));
        let l = one(&p, "describedby", "http://elsewhere.example/x").unwrap();
        assert_eq!(l.href, "http://elsewhere.example/x");
    }

    #[test]
    fn describes_is_rewritten_when_held_else_kept() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "describes", TARGET).unwrap().href, OURS);
        assert_eq!(
            one(&p, "describes", "http://x/y").unwrap().href,
            "http://x/y"
        );
    }

    #[test]
    fn alternate_is_rewritten_when_held_else_kept() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "alternate", TARGET).unwrap().href, OURS);
        assert_eq!(
            one(&p, "alternate", "http://x/y").unwrap().href,
            "http://x/y"
        );
    }

    #[test]
    fn duplicate_is_kept_unchanged() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "duplicate", TARGET).unwrap().href, TARGET);
    }

    #[test]
    fn memento_is_kept_unchanged() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "memento", TARGET).unwrap().href, TARGET);
    }

    #[test]
    fn profile_is_kept_unchanged() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "profile", TARGET).unwrap().href, TARGET);
    }

    /// One test per dropped relation, so a failure names it.
    macro_rules! dropped {
        ($($name:ident => $rel:literal),* $(,)?) => {$(
            #[test]
            fn $name() {
                assert!(one(&LinkPolicy::default(), $rel, TARGET).is_none(), "{} must be dropped", $rel);
            }
        )*};
    }

    dropped! {
        canonical_is_dropped => "canonical",
        up_is_dropped => "up",
        index_is_dropped => "index",
        contents_is_dropped => "contents",
        patch_is_dropped => "patch",
        timegate_is_dropped => "timegate",
        timemap_is_dropped => "timemap",
    }

    /// Collection membership (spec 14.7) stays true of the copy: an upstream's `collection`
    /// link is kept, pointing at the upstream's collection, unless the policy says otherwise.
    #[test]
    fn collection_is_kept_unless_the_policy_drops_it() {
        let p = LinkPolicy::default();
        let l = one(&p, "Collection", TARGET).unwrap();
        assert_eq!((l.rel.as_str(), l.href.as_str()), ("collection", TARGET));
        let p = LinkPolicy::new(&LinkPolicyConfig {
            drop: vec!["collection".into()],
            ..LinkPolicyConfig::default()
        });
        assert!(one(&p, "collection", TARGET).is_none());
    }

    const SET: &str = "http://repo.example/oai?verb=ListRecords&metadataPrefix=oai_dc&set=a";

    /// An OAI-PMH record's links, as the harvest derives them from its header.
    fn derived_links() -> Vec<Link> {
        vec![
            rsagg_config::derived(
                Link {
                    modified: Some(W3cDateTime::parse("2024-05-01T10:00:00Z").unwrap().value),
                    ..Link::new("via", UP)
                },
                "oai-pmh",
            ),
            rsagg_config::derived(Link::new("collection", SET), "oai-pmh"),
            rsagg_config::derived(Link::new("describedby", TARGET), "oai-pmh"),
        ]
    }

    /// The links rsagg derived are not the policy's: `oai_sets` alone decides on the
    /// `collection` ones, anything else derived is never published, and the mark never is.
    #[test]
    fn derived_collection_links_follow_oai_sets_not_the_policy() {
        let links = derived_links();
        let on = LinkPolicy::new(&LinkPolicyConfig {
            drop: vec!["collection".into()],
            ..LinkPolicyConfig::default()
        });
        let out = on.apply(&links, own);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(
            (out[0].rel.as_str(), out[0].href.as_str()),
            ("collection", SET)
        );
        assert!(out[0].ext.is_empty(), "the mark is not published");
        let off = LinkPolicy::new(&LinkPolicyConfig {
            oai_sets: false,
            keep: vec!["collection".into()],
            ..LinkPolicyConfig::default()
        });
        assert!(off.apply(&links, own).is_empty());
        assert_ne!(on.fingerprint(), off.fingerprint());
        // An inherited collection link is still the policy's with the switch off.
        assert_eq!(one(&off, "collection", TARGET).unwrap().href, TARGET);
    }

    /// An OAI-PMH record's `via` is the derived one: its `GetRecord` URL and datestamp, no
    /// fixity (that URL answers the envelope, not the metadata bytes), though the record's
    /// upstream metadata keeps the metadata's SHA-256 and length for the harvest.
    #[test]
    fn an_oai_record_via_claims_no_fixity() {
        let meta = UpstreamMeta {
            lastmod: Some(W3cDateTime::parse("2024-05-01T10:00:00Z").unwrap().value),
            hash: Some(Hashes::parse(
                &format!("sha-256:{}", "ab".repeat(32)),
                |_| {},
            )),
            length: Some(321),
            mime_type: Some("application/xml".into()),
            links: derived_links(),
            ..UpstreamMeta::default()
        };
        let via = via_link(UP, &meta);
        assert_eq!((via.rel.as_str(), via.href.as_str()), ("via", UP));
        assert_eq!(via.modified, meta.lastmod);
        assert_eq!(
            (&via.hash, via.length, &via.mime_type, &via.encoding),
            (&None, None, &None, &None)
        );
        assert!(via.ext.is_empty(), "the mark is not published");
    }

    #[test]
    fn unlisted_relations_are_dropped() {
        let p = LinkPolicy::default();
        assert!(one(&p, "license", TARGET).is_none());
        assert!(one(&p, "http://example.org/rel/custom", TARGET).is_none());
    }

    #[test]
    fn every_relation_can_be_overridden() {
        let p = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["license".into(), "describedby".into()],
            rewrite: vec!["canonical".into()],
            drop: vec!["Duplicate".into()],
            ..LinkPolicyConfig::default()
        });
        assert_eq!(one(&p, "license", TARGET).unwrap().href, TARGET);
        assert_eq!(one(&p, "describedby", TARGET).unwrap().href, TARGET);
        assert_eq!(one(&p, "canonical", TARGET).unwrap().href, OURS);
        assert!(one(&p, "duplicate", TARGET).is_none());
    }

    #[test]
    fn relation_types_compare_case_insensitively_and_the_most_permissive_wins() {
        let p = LinkPolicy::default();
        assert_eq!(one(&p, "DescribedBy", TARGET).unwrap().href, OURS);
        assert_eq!(one(&p, "up describedby", TARGET).unwrap().href, OURS);
        assert_eq!(one(&p, "index memento", TARGET).unwrap().href, TARGET);
        assert!(one(&p, "Canonical", TARGET).is_none());
        // An upstream `via` in any case is provenance, never an inherited link.
        assert!(one(&p, "VIA", TARGET).is_none());
    }

    #[test]
    fn described_by_in_mixed_case_is_rewritten_and_written_lowercase() {
        let p = LinkPolicy::default();
        let l = one(&p, "describedBy", TARGET).unwrap();
        assert_eq!((l.rel.as_str(), l.href.as_str()), ("describedby", OURS));
        let l = one(&p, "describedBy", "http://elsewhere.example/x").unwrap();
        assert_eq!(l.rel, "describedby", "kept links are written lowercase too");
        let l = one(&p, "Memento", TARGET).unwrap();
        assert_eq!(l.rel, "memento");
        // Extension relation types (URIs) are written as the upstream wrote them.
        let p = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["http://example.org/Rel/Custom".into()],
            ..LinkPolicyConfig::default()
        });
        let l = one(&p, "http://example.org/Rel/Custom", TARGET).unwrap();
        assert_eq!(l.rel, "http://example.org/Rel/Custom");
    }

    #[test]
    fn config_keys_compare_case_insensitively() {
        let p = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["DescribedBy".into()],
            drop: vec!["MEMENTO".into()],
            rewrite: vec!["License".into()],
            ..LinkPolicyConfig::default()
        });
        assert_eq!(one(&p, "describedBy", TARGET).unwrap().href, TARGET);
        assert_eq!(one(&p, "describedby", TARGET).unwrap().rel, "describedby");
        assert!(one(&p, "memento", TARGET).is_none());
        assert_eq!(one(&p, "LICENSE", TARGET).unwrap().href, OURS);
    }

    const PATCH: &str = "http://www.openarchives.org/rs/terms/patch";

    /// `[publish.links]` names a ResourceSync relation by its short name or its URI alike
    /// (spec 14.4 writes `rel="http://www.openarchives.org/rs/terms/patch"`).
    #[test]
    fn patch_and_its_uri_are_one_relation() {
        let short = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["patch".into()],
            ..LinkPolicyConfig::default()
        });
        let long = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec![PATCH.into()],
            ..LinkPolicyConfig::default()
        });
        for p in [&short, &long] {
            for rel in [PATCH, "patch", "HTTP://WWW.OPENARCHIVES.ORG/rs/terms/Patch"] {
                let l = one(p, rel, TARGET).unwrap_or_else(|| panic!("{rel} dropped"));
                assert_eq!(l.rel, PATCH, "written as the spec writes it");
                assert_eq!(l.href, TARGET);
            }
        }
        assert_eq!(short.fingerprint(), long.fingerprint());
        // The default drops it in either form.
        assert!(one(&LinkPolicy::default(), PATCH, TARGET).is_none());
        assert!(one(&LinkPolicy::default(), "patch", TARGET).is_none());
        // `rewrite` by URI reaches a short `rel`, `drop` by name a URI `rel`.
        let p = LinkPolicy::new(&LinkPolicyConfig {
            rewrite: vec![PATCH.into()],
            ..LinkPolicyConfig::default()
        });
        assert_eq!(one(&p, "patch", TARGET).unwrap().href, OURS);
        let p = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["duplicate".into()],
            drop: vec!["patch".into()],
            ..LinkPolicyConfig::default()
        });
        assert!(one(&p, PATCH, TARGET).is_none());
    }

    /// A `rel` holding several relation types is matched token by token, a ResourceSync URI
    /// among them included, and written with each in its written form.
    #[test]
    fn several_relation_types_in_one_rel_are_each_normalised() {
        let p = LinkPolicy::new(&LinkPolicyConfig {
            keep: vec!["patch".into()],
            ..LinkPolicyConfig::default()
        });
        let l = one(&p, &format!("up {PATCH}"), TARGET).unwrap();
        assert_eq!(l.rel, format!("up {PATCH}"));
        let l = one(&p, "Patch  Canonical", TARGET).unwrap();
        assert_eq!(l.rel, format!("{PATCH} canonical"));
        let l = one(
            &LinkPolicy::default(),
            &format!("{PATCH} Alternate"),
            TARGET,
        )
        .unwrap();
        assert_eq!(
            (l.rel, l.href.as_str()),
            (format!("{PATCH} alternate"), OURS)
        );
        // Other URIs stay as the upstream wrote them.
        let l = one(&p, "patch http://example.org/Rel/X", TARGET).unwrap();
        assert_eq!(l.rel, format!("{PATCH} http://example.org/Rel/X"));
    }

    #[test]
    fn upstream_datetimes_are_written_in_utc() {
        let zoneless = W3cDateTime::parse("2018-11-06T17:41:16.901455")
            .unwrap()
            .value;
        let meta = UpstreamMeta {
            lastmod: Some(zoneless),
            links: vec![Link {
                modified: Some(
                    W3cDateTime::parse("2018-11-06T18:41:16.5+01:00")
                        .unwrap()
                        .value,
                ),
                ..Link::new("describedBy", TARGET)
            }],
            ..UpstreamMeta::default()
        };
        let via = via_link(UP, &meta);
        let modified = via.modified.unwrap();
        assert_eq!(modified.to_string(), "2018-11-06T17:41:16.901455Z");
        assert!(modified.cmp_instant(&zoneless).is_eq());
        let inherited = LinkPolicy::default().apply(&meta.links, own);
        assert_eq!(
            inherited[0].modified.unwrap().to_string(),
            "2018-11-06T17:41:16.5Z"
        );
        // A kept upstream `via` (a chain of aggregators) is normalised the same way.
        let chain = UpstreamMeta {
            links: vec![Link {
                modified: Some(zoneless),
                ..Link::new("Via", "http://original.example.org/a")
            }],
            ..UpstreamMeta::default()
        };
        let via = via_link(UP, &chain);
        assert_eq!(via.rel, "via");
        assert_eq!(via.href, "http://original.example.org/a");
        assert_eq!(
            via.modified.unwrap().to_string(),
            "2018-11-06T17:41:16.901455Z"
        );
    }

    #[test]
    fn a_new_via_describes_the_upstream_representation() {
        let meta = UpstreamMeta {
            lastmod: Some(W3cDateTime::parse("2024-05-01T10:00:00Z").unwrap().value),
            hash: Some(Hashes::parse(
                "md5:1e0d5cb8ef6ba40c99b14c0237be735e",
                |_| {},
            )),
            length: Some(8876),
            encoding: Some("gzip".into()),
            mime_type: Some("text/html".into()),
            ..UpstreamMeta::default()
        };
        let via = via_link(UP, &meta);
        assert_eq!((via.rel.as_str(), via.href.as_str()), ("via", UP));
        assert_eq!(via.modified, meta.lastmod);
        assert_eq!(via.hash, meta.hash);
        assert_eq!(via.length, Some(8876));
        assert_eq!(via.encoding.as_deref(), Some("gzip"));
        assert_eq!(via.mime_type.as_deref(), Some("text/html"));
    }

    #[test]
    fn chain_an_upstream_via_is_kept_and_never_inherited_twice() {
        let original = Link {
            modified: Some(W3cDateTime::parse("2020-01-01").unwrap().value),
            ..Link::new("via", "http://original.example.org/a")
        };
        let meta = UpstreamMeta {
            links: vec![original.clone(), Link::new("describedby", TARGET)],
            ..UpstreamMeta::default()
        };
        assert_eq!(via_link(UP, &meta), original);
        // The policy never passes a `via` on: the one above is the entry's only via.
        let inherited = LinkPolicy::default().apply(&meta.links, own);
        assert_eq!(inherited.len(), 1);
        assert_eq!(inherited[0].href, OURS);
    }
}
