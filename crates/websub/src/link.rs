//! The HTTP `Link` header (RFC 8288) as far as WebSub and CN 1.0.1 4.1 need it: the targets
//! of `rel="self"` (the topic) and `rel="hub"` (the hub).
//!
//! A publisher may send several `Link` headers or one with several comma-separated values,
//! `rel` may be quoted or not and may list several space-separated relations (RFC 8288 3.3);
//! all of that is read here. Commas inside `<…>` or quotes do not split values.

use url::Url;

pub use rsagg_fetch::LinkValue;

/// Parses every link-value of the given `Link` header values (several headers are the same as
/// one joined with commas), resolving targets against `base`; malformed values are skipped.
/// The parser is rsagg-fetch's (the one discovery uses for `rel="resourcesync"`).
pub fn parse(values: &[String], base: &Url) -> Vec<LinkValue> {
    values
        .iter()
        .flat_map(|v| rsagg_fetch::link::parse_link_header(v, base))
        .collect()
}

/// The target of the first link-value with relation `rel` (case-insensitive).
pub fn find<'a>(links: &'a [LinkValue], rel: &str) -> Option<&'a str> {
    links
        .iter()
        .find(|l| l.has_rel(rel))
        .map(|l| l.target.as_str())
}

/// The `Link` header a hub sends with a delivery (CN 1.0.1 4.3, WebSub 7):
/// `<topic>; rel="self", <hub>; rel="hub"`.
pub fn format(topic: &str, hub: &str) -> String {
    format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(values: &[&str]) -> Vec<LinkValue> {
        let base = Url::parse("http://hub.example/").unwrap();
        parse(
            &values.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &base,
        )
    }

    #[test]
    fn reads_the_spec_example_and_variants() {
        // CN 1.0.1 Example 2, folded onto one line.
        let links = p(&["<http://example.com/dataset1/change/> ; rel=\"self\", \
             <http://hub.example.org/websub/> ; rel=\"hub\", \
             <http://www.example.com/dataset1/capabilitylist.xml> ; rel=\"resourcesync\""]);
        assert_eq!(links.len(), 3);
        assert_eq!(
            find(&links, "self"),
            Some("http://example.com/dataset1/change/")
        );
        assert_eq!(find(&links, "HUB"), Some("http://hub.example.org/websub/"));

        let links = p(&[
            "<http://t/a,b>;rel=self",
            "<http://h/>; title=\"x, y\"; rel=\"Hub other\"",
        ]);
        assert_eq!(find(&links, "self"), Some("http://t/a,b"));
        assert_eq!(find(&links, "hub"), Some("http://h/"));
        assert_eq!(find(&links, "other"), Some("http://h/"));

        // Only the first rel parameter counts; garbage is skipped.
        let links = p(&["garbage, <http://x/>; rel=hub; rel=self, <http://y/>"]);
        assert_eq!(find(&links, "hub"), Some("http://x/"));
        assert_eq!(find(&links, "self"), None);
        assert_eq!(links.len(), 2);
    }

    #[test]
    fn formats_what_it_reads() {
        let header = format("http://t/c/", "http://h/");
        let links = p(&[&header]);
        assert_eq!(find(&links, "self"), Some("http://t/c/"));
        assert_eq!(find(&links, "hub"), Some("http://h/"));
    }
}
