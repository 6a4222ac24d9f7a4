//! A tolerant scan of an HTML page for `<link rel="resourcesync" href="…">` (spec section
//! 6.3.3) and `<base href>`.
//!
//! Why a scan and not an HTML parser: the only thing needed is the attributes of `<link>` and
//! `<base>` start tags, and no small maintained tokenizer crate is in the workspace
//! (html5ever/scraper would add a large dependency tree and a DOM for one attribute). The scan
//! follows the HTML tokenizer where it matters: comments are skipped, the content of
//! `<script>`, `<style>`, `<textarea>` and `<title>` is skipped, attribute values may be
//! double-, single- or un-quoted, names compare case-insensitively, `rel` is a set of
//! space-separated tokens, and the common character references in `href` are decoded.

use url::Url;

/// Targets of `<link rel="resourcesync">` in `html`, resolved against `<base href>` (if any,
/// itself resolved against `page`) or `page`.
pub fn resourcesync_links(html: &str, page: &Url) -> Vec<Url> {
    let mut base = page.clone();
    let mut base_seen = false;
    let mut out = Vec::new();
    let lower = html.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut i = 0;
    while let Some(off) = lower[i..].find('<') {
        i += off;
        if lower[i..].starts_with("<!--") {
            i = lower[i + 4..]
                .find("-->")
                .map_or(b.len(), |e| i + 4 + e + 3);
            continue;
        }
        let name_start = i + 1;
        let mut j = name_start;
        while j < b.len() && b[j].is_ascii_alphanumeric() {
            j += 1;
        }
        let name = &lower[name_start..j];
        if name.is_empty() {
            i += 1;
            continue;
        }
        let (attrs, end) = attributes(html, j);
        i = end;
        match name {
            "link" => {
                let rel = attr(&attrs, "rel").unwrap_or_default();
                if rel
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("resourcesync"))
                    && let Some(href) = attr(&attrs, "href")
                    && !href.trim().is_empty()
                    && let Ok(u) = base.join(href.trim())
                {
                    out.push(u);
                }
            }
            "base" if !base_seen => {
                if let Some(href) = attr(&attrs, "href")
                    && let Ok(u) = page.join(href.trim())
                {
                    base = u;
                    base_seen = true;
                }
            }
            "script" | "style" | "textarea" | "title" => {
                let close = format!("</{name}");
                i = lower[i..].find(&close).map_or(b.len(), |e| i + e);
            }
            _ => {}
        }
    }
    out
}

fn attr(attrs: &[(String, String)], name: &str) -> Option<String> {
    attrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| decode_refs(v))
}

/// Attributes of a start tag from `i` (just after the tag name) to its `>`; returns them
/// (names lowercased) and the index after the tag.
fn attributes(html: &str, mut i: usize) -> (Vec<(String, String)>, usize) {
    let b = html.as_bytes();
    let mut attrs = Vec::new();
    loop {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        if i >= b.len() {
            return (attrs, i);
        }
        if b[i] == b'>' {
            return (attrs, i + 1);
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && !matches!(b[i], b'=' | b'>' | b'/') {
            i += 1;
        }
        let name = html[start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let vs = i + 1;
                let ve = html[vs..]
                    .bytes()
                    .position(|c| c == q)
                    .map_or(b.len(), |p| vs + p);
                value = html[vs..ve].to_owned();
                i = (ve + 1).min(b.len());
            } else {
                let vs = i;
                while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' {
                    i += 1;
                }
                value = html[vs..i].to_owned();
            }
        }
        if !name.is_empty() && !attrs.iter().any(|(n, _)| *n == name) {
            attrs.push((name, value));
        }
    }
}

/// Decodes the character references that occur in URLs in practice, in one pass: what a
/// reference decodes to is never read again, so `&amp;lt;` is the text `&lt;` (as in HTML),
/// not `<`. Chained `str::replace` calls decoded it twice; seen on reading the scan and
/// confirmed by the reference-decoding invariant of the `html_links` fuzz
/// target (`fuzz/`).
fn decode_refs(s: &str) -> String {
    const REFS: [(&str, char); 8] = [
        ("&amp;", '&'),
        ("&#38;", '&'),
        ("&#x26;", '&'),
        ("&quot;", '"'),
        ("&#39;", '\''),
        ("&apos;", '\''),
        ("&lt;", '<'),
        ("&gt;", '>'),
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        match REFS.iter().find(|(r, _)| rest.starts_with(r)) {
            Some((r, c)) => {
                out.push(*c);
                rest = &rest[r.len()..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_resourcesync_links() {
        let page = Url::parse("http://example.com/a/page.html").unwrap();
        let html = r#"<!DOCTYPE html><HTML><head>
            <!-- <link rel="resourcesync" href="/commented-out.xml"> -->
            <script>var s = '<link rel="resourcesync" href="/in-script.xml">';</script>
            <link rel=stylesheet href=/style.css>
            <LINK REL="Alternate ResourceSync" HREF='capabilitylist.xml?a=1&amp;b=2'/>
            <link href=/second.xml rel=resourcesync>
            <link rel="resourcesyncx" href="/not.xml">
          </head><body></body></html>"#;
        let v = resourcesync_links(html, &page);
        let got: Vec<&str> = v.iter().map(Url::as_str).collect();
        assert_eq!(
            got,
            [
                "http://example.com/a/capabilitylist.xml?a=1&b=2",
                "http://example.com/second.xml"
            ]
        );
    }

    #[test]
    fn honours_base_and_survives_truncation() {
        let page = Url::parse("http://example.com/a/page.html").unwrap();
        let html = r#"<head><base href="http://other.example.org/x/"><link rel="resourcesync" href="cl.xml"><link rel="resourcesync" href="#;
        let v = resourcesync_links(html, &page);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].as_str(), "http://other.example.org/x/cl.xml");
        assert!(resourcesync_links("<", &page).is_empty());
        assert!(resourcesync_links("<link rel='resourcesync' href='", &page).is_empty());
    }

    /// Confirmed with the `html_links` fuzz target: references are decoded once, left to right.
    #[test]
    fn references_are_decoded_once() {
        assert_eq!(decode_refs("a&amp;lt;b"), "a&lt;b");
        assert_eq!(decode_refs("&#38;gt;&amp;amp;&quot;"), "&gt;&amp;\"");
        assert_eq!(decode_refs("x&y&lt;&unknown;&"), "x&y<&unknown;&");
        assert_eq!(decode_refs("é&apos;ü&#39;"), "é'ü'");
        let page = Url::parse("http://example.com/a/page.html").unwrap();
        let v = resourcesync_links(r#"<link rel=resourcesync href="?q=a&amp;lt;b">"#, &page);
        assert_eq!(v[0].as_str(), "http://example.com/a/page.html?q=a&lt;b");
    }
}
