//! rsagg's own URIs for its copies (spec 14.8: the aggregator's `<loc>` is its own URI).
//!
//! `{base_url}r/{upstream}/{scheme}/{authority}{path}{?query}`, with `%` written `%25` and
//! `?` written `%3F`. The mapping is stable (a function of the upstream name and URI only)
//! and reversible, hence collision-free across upstreams and across URIs that differ only
//! in scheme, port, case of the path or query. The `r/` prefix keeps copies apart from the
//! collection's documents, topic and callbacks (`capabilitylist.xml`, `change/`,
//! `websub/…`). Fragments are not part of a resource's identity (they are never sent to the
//! server), so they are left out.

use url::Url;

/// rsagg's URI for the copy of `uri` harvested from `upstream`, under `base_url` (which ends
/// with `/`). `None` when `uri` is not an absolute URI with a host.
pub fn own_uri(base_url: &str, upstream: &str, uri: &str) -> Option<String> {
    // Most URIs are normalised already: taken apart without a parse.
    if let Some(n) = rsagg_store::uri::normal_http(uri) {
        return Some(own_uri_of(
            base_url, upstream, n.scheme, n.host, n.port, n.path, n.query,
        ));
    }
    let u = Url::parse(uri).ok()?;
    let host = u.host_str()?;
    Some(own_uri_of(
        base_url,
        upstream,
        u.scheme(),
        host,
        u.port(),
        u.path(),
        u.query(),
    ))
}

/// [`own_uri`] from the parts of the normalised URI.
fn own_uri_of(
    base_url: &str,
    upstream: &str,
    scheme: &str,
    host: &str,
    port: Option<u16>,
    path: &str,
    query: Option<&str>,
) -> String {
    let mut out = String::with_capacity(
        base_url.len() + upstream.len() + scheme.len() + host.len() + path.len() + 16,
    );
    out.push_str(base_url);
    out.push_str("r/");
    out.push_str(upstream);
    out.push('/');
    out.push_str(scheme);
    out.push('/');
    escape_into(&mut out, host);
    if let Some(port) = port {
        out.push(':');
        out.push_str(&port.to_string());
    }
    escape_into(&mut out, path);
    if let Some(q) = query {
        out.push_str("%3F");
        escape_into(&mut out, q);
    }
    out
}

/// The upstream name and URI behind a path produced by [`own_uri`], given the part after
/// `base_url` (e.g. `r/museum/https/museum.example.org/a%3Fb=1`).
pub fn parse_own_path(rest: &str) -> Option<(String, String)> {
    let rest = rest.strip_prefix("r/")?;
    let (upstream, rest) = rest.split_once('/')?;
    let (scheme, rest) = rest.split_once('/')?;
    if upstream.is_empty() || scheme.is_empty() || rest.is_empty() {
        return None;
    }
    let mut uri = String::with_capacity(rest.len() + scheme.len() + 3);
    uri.push_str(scheme);
    uri.push_str("://");
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '%' {
            match rest.get(i + 1..i + 3) {
                Some("25") => {
                    uri.push('%');
                    chars.next();
                    chars.next();
                    continue;
                }
                Some(s) if s.eq_ignore_ascii_case("3F") => {
                    uri.push('?');
                    chars.next();
                    chars.next();
                    continue;
                }
                _ => return None,
            }
        }
        uri.push(c);
    }
    Some((upstream.to_owned(), uri))
}

fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3F"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "https://agg.example.org/maps/";

    fn round_trip(upstream: &str, uri: &str) -> String {
        let own = own_uri(BASE, upstream, uri).unwrap();
        let rest = own.strip_prefix(BASE).unwrap();
        let (u, back) = parse_own_path(rest).unwrap();
        assert_eq!(u, upstream);
        // The same resource as the input (the url crate's normalisation aside).
        assert_eq!(
            Url::parse(&back).unwrap(),
            Url::parse(uri).unwrap(),
            "{own}"
        );
        own
    }

    /// The shortcut for normalised URIs builds what the full parse builds, and the URI
    /// with a fragment or in another form of the same resource gets the same own URI.
    #[test]
    fn normalised_uris_taken_apart_without_a_parse_give_the_same_own_uri() {
        for uri in [
            "http://museum.example.org/res/1.txt",
            "http://h.example:8080/a/b?x=1&y=%20",
            "https://127.0.0.1:40149/res/0",
            "https://e.org/a;b=c/(1)~x?q=/a:b@c",
            "https://e.org/%41%2f",
        ] {
            assert!(rsagg_store::uri::normal_http(uri).is_some(), "{uri}");
            let u = Url::parse(uri).unwrap();
            let parsed = own_uri_of(
                BASE,
                "up",
                u.scheme(),
                u.host_str().unwrap(),
                u.port(),
                u.path(),
                u.query(),
            );
            assert_eq!(own_uri(BASE, "up", uri).unwrap(), parsed, "{uri}");
        }
        assert_eq!(
            own_uri(BASE, "up", "HTTP://H.example:80/a#f"),
            own_uri(BASE, "up", "http://h.example/a")
        );
    }

    #[test]
    fn copies_live_under_the_collection_and_the_upstream() {
        let own = round_trip("museum", "http://museum.example.org/res/1.txt");
        assert_eq!(
            own,
            "https://agg.example.org/maps/r/museum/http/museum.example.org/res/1.txt"
        );
    }

    #[test]
    fn query_strings_ports_and_escapes_survive() {
        round_trip("m", "http://h.example:8080/a/b?x=1&y=%20");
        round_trip("m", "https://h.example/a%2Fb%3Fc/d?q=%3F");
        round_trip("m", "http://h.example");
        round_trip("m", "http://[::1]:81/x");
    }

    #[test]
    fn no_two_resources_share_a_uri() {
        let uris = [
            "http://h.example/a",
            "https://h.example/a",
            "http://h.example:8080/a",
            "http://h.example/a?",
            "http://h.example/a?b",
            "http://h.example/a%3Fb",
            "http://h.example/A",
            "http://h.example/a/",
        ];
        let mut seen = std::collections::HashSet::new();
        for up in ["one", "two"] {
            for u in uris {
                assert!(seen.insert(round_trip(up, u)), "{up} {u}");
            }
        }
    }

    #[test]
    fn foreign_paths_are_not_copies() {
        assert!(parse_own_path("capabilitylist.xml").is_none());
        assert!(parse_own_path("r/museum").is_none());
        assert!(parse_own_path("r/museum/http/h.example/%zz").is_none());
        assert!(own_uri(BASE, "m", "urn:isbn:123").is_none());
    }
}
