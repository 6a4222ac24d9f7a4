//! The `Link` header parser (`rsagg_fetch::link::parse_link_header`, RFC 8288; used by
//! discovery for `rel="resourcesync"` and by the hub and subscriber for `rel="self"`/`"hub"`)
//! on arbitrary header text.
//!
//! Invariants beyond "no panic":
//! - no more link-values than `<` in the input; relation types lowercase, non-empty, without
//!   whitespace; parameter names lowercase, non-empty, never `rel`;
//! - what was parsed, written back as `<target>; rel="…"; name="…"` (values quoted and
//!   escaped), parses again to the same link-values, also when joined with commas;
//! - `rsagg_websub::link::parse` of the same text as one header gives the same values.
//!
//! The input is split at the first `\n\n`: the part before (when it parses as an absolute
//! http(s) URL, as the URL of a response always is) is the base the targets are resolved
//! against.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsagg_fetch::LinkValue;
use rsagg_fetch::link::parse_link_header;
use url::Url;

fn quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn format(links: &[LinkValue]) -> String {
    let mut out = String::new();
    for (i, l) in links.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('<');
        out.push_str(l.target.as_str());
        out.push('>');
        if !l.rels.is_empty() {
            out.push_str("; rel=");
            quoted(&mut out, &l.rels.join(" "));
        }
        for (name, value) in &l.params {
            out.push_str("; ");
            out.push_str(name);
            out.push('=');
            quoted(&mut out, value);
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let (base, header) = rsagg_fuzz::split_head(data);
    let base = std::str::from_utf8(base)
        .ok()
        .and_then(|b| Url::parse(b).ok())
        .filter(|b| matches!(b.scheme(), "http" | "https"))
        .unwrap_or_else(|| Url::parse("http://example.com/dataset1/page.html").unwrap());
    // Header values reach the parser as text (`HeaderValue::to_str` or lossy).
    let header = String::from_utf8_lossy(header);
    let links = parse_link_header(&header, &base);
    assert!(
        links.len() <= header.matches('<').count(),
        "more links than `<`"
    );
    for l in &links {
        for r in &l.rels {
            assert!(!r.is_empty(), "empty rel in {l:?}");
            assert!(!r.bytes().any(|b| b.is_ascii_whitespace()), "rel {r:?}");
            assert_eq!(*r, r.to_ascii_lowercase(), "rel {r:?} not lowercase");
        }
        for (n, _) in &l.params {
            assert!(!n.is_empty() && n != "rel", "parameter name {n:?}");
            assert_eq!(*n, n.to_ascii_lowercase(), "name {n:?} not lowercase");
        }
    }
    let written = format(&links);
    let again = parse_link_header(&written, &base);
    assert_eq!(links, again, "round trip through {written:?}");
    let hub_view = rsagg_websub::link::parse(&[header.into_owned()], &base);
    assert_eq!(links, hub_view);
});
