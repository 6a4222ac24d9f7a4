//! Recognising an `http(s)` URI that is already in its normalised form, without parsing it.
//!
//! Several steps take a resource's URI in the form `url::Url` writes it (the WHATWG URL
//! Standard's serialisation): the slot a resource belongs to ([`crate::slot_of`]) and
//! rsagg's own URI for the copy (`rsagg_layout::uris::own_uri`), so that
//! `http://H.example:80/a` and `http://h.example/a` are one resource. They run several times
//! per resource in a harvest and once per resource in every publish that lists the whole
//! collection (the Resource List, the Resource Dump), and a full parse (host to ASCII, path
//! normalised, percent-encoding checked) was a few percent of a baseline's CPU. Nearly every
//! URI an upstream lists is already normalised, so [`normal_http`] checks that cheaply and
//! conservatively: it says yes only for a form the parser would give back unchanged
//! (anything unusual gets the full parse), which a unit test checks against `url::Url` on a
//! generated corpus of tricky URIs.

/// The parts of a normalised `http` or `https` URI, borrowed from it: what `url::Url`
/// would return for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormalUri<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The host: a lowercase domain name or a dotted-decimal IPv4 address.
    pub host: &'a str,
    /// The port, when not the scheme's default (`url::Url::port`).
    pub port: Option<u16>,
    /// The path, starting with `/`.
    pub path: &'a str,
    /// The query, without its `?`.
    pub query: Option<&'a str>,
}

/// `uri`'s parts when `uri` is an `http` or `https` URI exactly as `url::Url` serialises it,
/// without a fragment; `None` when it is not, or may not be (the caller then parses it).
pub fn normal_http(uri: &str) -> Option<NormalUri<'_>> {
    let (scheme, rest) = if let Some(rest) = uri.strip_prefix("http://") {
        ("http", rest)
    } else if let Some(rest) = uri.strip_prefix("https://") {
        ("https", rest)
    } else {
        return None;
    };
    // The authority ends at the path's `/`; a `?` or `#` first (no path) is normalised by
    // the parser (a `/` added), so not taken here.
    let end = rest.find(['/', '?', '#', '\\'])?;
    if rest.as_bytes()[end] != b'/' {
        return None;
    }
    let (authority, tail) = rest.split_at(end);
    let (host, port) = match authority.split_once(':') {
        None => (authority, None),
        Some((host, port)) => (host, Some(normal_port(scheme, port)?)),
    };
    if !normal_host(host) {
        return None;
    }
    let (path, query) = match tail.split_once('?') {
        None => (tail, None),
        Some((path, query)) => (path, Some(query)),
    };
    if !normal_path(path) || !query.is_none_or(normal_query) {
        return None;
    }
    Some(NormalUri {
        scheme,
        host,
        port,
        path,
        query,
    })
}

/// A port as the parser keeps it: decimal without leading zeros, at most 65535, and not the
/// scheme's default (which it drops).
fn normal_port(scheme: &str, port: &str) -> Option<u16> {
    if port.is_empty() || port.len() > 5 || port.starts_with('0') {
        return None;
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u16 = port.parse().ok()?;
    let default = if scheme == "http" { 80 } else { 443 };
    (n != default).then_some(n)
}

/// A host the parser leaves as it is: labels of lowercase ASCII letters, digits and hyphens
/// (no empty label, no `xn--` label, which it would check as Punycode), the last not starting
/// with a digit (else the parser reads the host as an IPv4 address); or a dotted-decimal
/// IPv4 address in its canonical form.
fn normal_host(host: &str) -> bool {
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    if canonical_ipv4(host) {
        return true;
    }
    let mut last = "";
    for label in host.split('.') {
        if label.is_empty()
            || label.len() > 63
            || label.starts_with("xn--")
            || !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return false;
        }
        last = label;
    }
    !last.starts_with(|c: char| c.is_ascii_digit())
}

/// Four decimal numbers of 0 to 255 without leading zeros, separated by dots.
fn canonical_ipv4(host: &str) -> bool {
    let mut n = 0;
    for part in host.split('.') {
        n += 1;
        let ok = !part.is_empty()
            && part.len() <= 3
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
            && part.parse::<u16>().is_ok_and(|v| v <= 255);
        if !ok {
            return false;
        }
    }
    n == 4
}

/// Characters the parser keeps as they are in a path and a query (RFC 3986's unreserved
/// characters and sub-delimiters, `:`, `@` and `/`), besides a valid percent-encoding. The
/// apostrophe is left to the full parse: the parser encodes it in the query of special schemes.
fn plain_char(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

/// Whether `s` has only [`plain_char`]s (and `?` when `query`) and `%` followed by two hex
/// digits.
fn plain_chars(s: &str, query: bool) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
            }
            b'?' if query => i += 1,
            c if plain_char(c) => i += 1,
            _ => return false,
        }
    }
    true
}

/// A path the parser leaves as it is: plain characters and no dot segment (`.`, `..`, or
/// their percent-encoded forms, which it resolves).
fn normal_path(path: &str) -> bool {
    plain_chars(path, false)
        && !path.split('/').any(|seg| {
            let seg = seg.as_bytes();
            seg.len() <= 6 && !seg.is_empty() && {
                let lower = seg.to_ascii_lowercase();
                let mut s = &lower[..];
                loop {
                    if let Some(rest) = s.strip_prefix(b".") {
                        s = rest;
                    } else if let Some(rest) = s.strip_prefix(b"%2e") {
                        s = rest;
                    } else {
                        break s.is_empty();
                    }
                }
            }
        })
}

/// A query the parser leaves as it is.
fn normal_query(query: &str) -> bool {
    plain_chars(query, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scheme, host, port, path and query.
    type Parts = (String, String, Option<u16>, String, Option<String>);

    /// What `url::Url` makes of `uri`, in [`NormalUri`]'s terms, when it serialises it
    /// unchanged.
    fn oracle(uri: &str) -> Option<Parts> {
        let u = url::Url::parse(uri).ok()?;
        (u.as_str() == uri).then(|| {
            (
                u.scheme().to_owned(),
                u.host_str().unwrap_or_default().to_owned(),
                u.port(),
                u.path().to_owned(),
                u.query().map(str::to_owned),
            )
        })
    }

    fn check(uri: &str) {
        if let Some(n) = normal_http(uri) {
            let parsed = oracle(uri).unwrap_or_else(|| {
                panic!("{uri:?} taken as normalised, but the parser changes or refuses it")
            });
            let ours = (
                n.scheme.to_owned(),
                n.host.to_owned(),
                n.port,
                n.path.to_owned(),
                n.query.map(str::to_owned),
            );
            assert_eq!(ours, parsed, "{uri:?}");
        }
    }

    #[test]
    fn common_uris_are_recognised() {
        for uri in [
            "http://example.org/",
            "https://example.org/a/b.xml",
            "https://data.example.org/r/1?format=xml&x=%2F",
            "http://127.0.0.1:40149/res/0",
            "http://h-1.example:8080/a;b=c/d@e:f",
            "https://example.org/~u/a(1)*,+!$",
        ] {
            assert!(normal_http(uri).is_some(), "{uri}");
            check(uri);
        }
    }

    #[test]
    fn forms_the_parser_changes_are_not_recognised() {
        for uri in [
            "http://Example.org/",
            "http://example.org",
            "http://example.org?q",
            "http://example.org:80/",
            "https://example.org:443/",
            "http://example.org:/",
            "http://example.org:080/",
            "http://1.2.3/",
            "http://01.2.3.4/",
            "http://0x7f.1/",
            "http://256.1.1.1/",
            "http://example.123/",
            "http://xn--nxasmq6b.example/",
            "http://a..b/",
            "http://example.org./",
            "http://u@example.org/",
            "http://example.org/a/../b",
            "http://example.org/a/./b",
            "http://example.org/a/%2e%2E/b",
            "http://example.org/a/.%2e",
            "http://example.org/a b",
            "http://example.org/a\\b",
            "http://example.org/a#f",
            "http://example.org/a?b'c",
            "http://example.org/%zz",
            "http://example.org/%4",
            "ftp://example.org/",
            "HTTP://example.org/",
        ] {
            assert!(normal_http(uri).is_none(), "{uri}");
        }
    }

    /// Generated URIs from pieces the parser treats specially: whatever [`normal_http`]
    /// accepts, the parser gives back unchanged with the same parts.
    #[test]
    fn agrees_with_the_parser_on_a_generated_corpus() {
        const SCHEMES: &[&str] = &["http://", "https://", "HTTP://", "http:/", "ftp://"];
        const HOSTS: &[&str] = &[
            "example.org",
            "a.b-c.d",
            "1.2.3.4",
            "255.255.255.255",
            "h0.example",
            "Example.org",
            "256.0.0.1",
            "1.2.3",
            "01.2.3.4",
            "0x7f.0.0.1",
            "example.123",
            "example.1a",
            "xn--nxasmq6b.example",
            "a..b",
            "example.org.",
            "",
            "u:p@example.org",
            "exa_mple.org",
            "[::1]",
            "ex%41mple.org",
            "éxample.org",
            "-a.example",
            "a-.example",
            "ab--c.example",
            "x.-",
            "a.b.c.d.e.f.g.h",
            "0.0.0.0",
            "1.2.3.4.5",
        ];
        const PORTS: &[&str] = &[
            "", ":8080", ":0", ":65535", ":80", ":443", ":65536", ":", ":08",
        ];
        const SEGMENTS: &[&str] = &[
            "a",
            "a.b",
            "%41",
            "~u",
            "",
            ".",
            "..",
            "%2e",
            "%2E%2e",
            ".%2e",
            "%zz",
            "%4",
            "a b",
            "a\"b",
            "a<b",
            "a`b",
            "a{b}",
            "a|b",
            "a^b",
            "a'b",
            "a\\b",
            "a\tb",
            "é",
            "!$&()*+,;=:@",
            "a%2Fb",
        ];
        const QUERIES: &[&str] = &[
            "", "?a=b", "?a?b", "?", "?a'b", "?a b", "?%2e", "?a#b", "?/x", "?é", "?a\"b",
        ];
        let mut rng = fastrand::Rng::with_seed(24);
        // Each list starts with its plain pieces (`plain` of them), picked half the time, so
        // that a good share of the URIs is normalised and the rest differs in one piece.
        let mut pick = |list: &[&'static str], plain: usize| {
            if rng.bool() {
                list[rng.usize(..plain)]
            } else {
                list[rng.usize(..list.len())]
            }
        };
        let mut accepted = 0;
        for _ in 0..200_000 {
            let mut uri = String::new();
            uri.push_str(pick(SCHEMES, 2));
            uri.push_str(pick(HOSTS, 5));
            uri.push_str(pick(PORTS, 4));
            let segments = pick(&["0", "1", "2", "3"], 4).parse().unwrap_or(0);
            for _ in 0..segments {
                uri.push('/');
                uri.push_str(pick(SEGMENTS, 4));
            }
            uri.push_str(pick(QUERIES, 3));
            uri.push_str(pick(&["", "", "", "#f"], 3));
            if normal_http(&uri).is_some() {
                accepted += 1;
            }
            check(&uri);
        }
        // Not vacuous: a good share of the corpus is normalised and recognised.
        assert!(accepted > 5_000, "only {accepted} recognised");
    }
}
