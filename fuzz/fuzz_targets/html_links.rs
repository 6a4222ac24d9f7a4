//! The HTML scan for `<link rel="resourcesync" href>` and `<base href>`
//! (`rsagg_fetch::html::resourcesync_links`, discovery, spec section 6.3.3) on arbitrary pages.
//!
//! Invariants beyond "no panic":
//! - no more links than `<link` tags (ASCII case-insensitive) in the page;
//! - each link found, written back as `<link rel="resourcesync" href="…">` (with `&` as
//!   `&amp;` and `"` as `&quot;`: an opaque URL such as `x:a"b` keeps its quote), is found
//!   again, in order, by a scan of the written page;
//! - a comment or an unrelated element put before the page changes nothing (the scan
//!   starts over in the same state after either);
//! - character references are undone exactly once: the input's text, escaped as an HTML
//!   writer escapes an attribute value (`&` → `&amp;`, `"` → `&quot;`) and put into an
//!   `href`, is found as `page.join(text)` — or not at all when that does not resolve.
//!
//! The input is split at the first `\n\n`: the part before (when it parses as an absolute
//! http(s) URL, as a response's URL always is) is the page's URL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsagg_fetch::html::resourcesync_links;
use url::Url;

fuzz_target!(|data: &[u8]| {
    let (page, html) = rsagg_fuzz::split_head(data);
    let page = std::str::from_utf8(page)
        .ok()
        .and_then(|p| Url::parse(p).ok())
        .filter(|p| matches!(p.scheme(), "http" | "https"))
        .unwrap_or_else(|| Url::parse("http://example.com/a/page.html").unwrap());
    // Discovery hands the scan the lossy UTF-8 of the body.
    let html = String::from_utf8_lossy(html);
    let links = resourcesync_links(&html, &page);
    let tags = html.to_ascii_lowercase().matches("<link").count();
    assert!(
        links.len() <= tags,
        "{} links from {tags} <link> tags",
        links.len()
    );

    let mut written = String::from("<!DOCTYPE html><html><head>\n");
    for l in &links {
        written.push_str("<link rel=\"resourcesync\" href=\"");
        written.push_str(&l.as_str().replace('&', "&amp;").replace('"', "&quot;"));
        written.push_str("\">\n");
    }
    written.push_str("</head></html>\n");
    let again = resourcesync_links(&written, &page);
    assert_eq!(links, again, "round trip through {written:?}");

    let text: String = html.chars().take(200).collect();
    let escaped = text.replace('&', "&amp;").replace('"', "&quot;");
    let one = format!("<link rel=\"resourcesync\" href=\"{escaped}\">");
    let want: Vec<Url> = match text.trim() {
        "" => Vec::new(),
        t => page.join(t).into_iter().collect(),
    };
    assert_eq!(resourcesync_links(&one, &page), want, "href of {text:?}");

    for prefix in [
        "<!-- a <link rel=resourcesync href=/no> -->",
        "<p class=\"x\">",
    ] {
        let prefixed = format!("{prefix}{html}");
        assert_eq!(
            links,
            resourcesync_links(&prefixed, &page),
            "prefix {prefix:?} changed the links"
        );
    }
});
