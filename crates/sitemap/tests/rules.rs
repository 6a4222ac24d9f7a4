//! One failing document per validation rule, read through the streaming reader, checking the
//! code, the spec section, the line:column and the severity in each mode.

use rsagg_model::{Mode, Problem, Severity};
use rsagg_sitemap::{Error, ReadOptions, SyncReader};

const NS: &str = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;
const UP: &str = r#"<rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>"#;

/// A `<urlset>` with the given root `<rs:md>` attributes and body.
fn urlset(md: &str, body: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {NS}>\n<rs:md {md}/>\n{body}\n</urlset>\n"
    )
}

fn index(md: &str, body: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<sitemapindex {NS}>\n<rs:md {md}/>\n{body}\n</sitemapindex>\n"
    )
}

async fn problems(xml: &str, mode: Mode) -> Result<Vec<Problem>, Error> {
    let mut r = SyncReader::open(xml.as_bytes(), ReadOptions::new(mode, "t.xml"))?;
    while r.next_entry()?.is_some() {}
    Ok(r.validator().problems().to_vec())
}

/// Asserts that `xml` yields `code` (in `section`) with the given severities in strict and
/// lenient mode (`None`: not reported in that mode).
async fn expect(
    xml: &str,
    code: &str,
    section: &str,
    strict: Option<Severity>,
    lenient: Option<Severity>,
) {
    for (mode, want) in [(Mode::Strict, strict), (Mode::Lenient, lenient)] {
        let ps = problems(xml, mode)
            .await
            .unwrap_or_else(|e| panic!("{code}: read failed: {e}\n{xml}"));
        let found: Vec<_> = ps.iter().filter(|p| p.code == code).collect();
        match want {
            Some(sev) => {
                let p = found.first().unwrap_or_else(|| {
                    panic!("{code} not reported in {mode:?}; got {ps:#?}\n{xml}")
                });
                assert_eq!(p.severity, sev, "{code} in {mode:?}");
                assert_eq!(p.section, section, "{code} section");
                assert!(p.line > 0 && p.column > 0, "{code}: position missing");
            }
            None => assert!(found.is_empty(), "{code} reported in {mode:?}: {found:#?}"),
        }
    }
}

const E: Option<Severity> = Some(Severity::Error);
const W: Option<Severity> = Some(Severity::Warning);

fn url(inner: &str) -> String {
    format!("<url><loc>http://example.com/r</loc>{inner}</url>")
}

#[tokio::test]
async fn appendix_a_time_attributes() {
    // Mandatory `at` in snapshot documents.
    expect(
        &urlset(r#"capability="resourcelist""#, UP),
        "at-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &index(r#"capability="resourcelist""#, UP),
        "at-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(r#"capability="resourcedump""#, UP),
        "at-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(r#"capability="resourcedump-manifest""#, UP),
        "at-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    // Mandatory `from` in change documents (a missing `from` is a known upstream quirk).
    expect(
        &urlset(r#"capability="changelist""#, UP),
        "from-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &index(r#"capability="changelist""#, UP),
        "from-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(r#"capability="changedump""#, UP),
        "from-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(r#"capability="changedump-manifest""#, UP),
        "from-missing",
        "Appendix A",
        E,
        W,
    )
    .await;
    // Mandatory `until` in a notification.
    expect(
        &urlset(
            r#"capability="change-notification" from="2013-01-01T00:00:00Z""#,
            "",
        ),
        "until-missing",
        "CN 3",
        E,
        W,
    )
    .await;
    // Forbidden attributes.
    expect(
        &urlset(
            r#"capability="changelist" from="2013-01-01T00:00:00Z" at="2013-01-01T00:00:00Z""#,
            UP,
        ),
        "attribute-not-used",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(
            r#"capability="resourcelist" at="2013-01-01T00:00:00Z" until="2013-01-01T00:00:00Z""#,
            UP,
        ),
        "attribute-not-used",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(
            r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#,
            &format!("{UP}{}", url(r#"<rs:md at="2013-01-01T00:00:00Z"/>"#)),
        ),
        "attribute-not-used",
        "Appendix A",
        E,
        W,
    )
    .await;
    expect(
        &urlset(
            r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#,
            &format!("{UP}{}", url(r#"<rs:md change="created"/>"#)),
        ),
        "attribute-not-used",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &urlset(
            r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#,
            &format!("{UP}{}", url(r#"<rs:md path="/a"/>"#)),
        ),
        "attribute-not-used",
        "7",
        E,
        W,
    )
    .await;
    // Intervals.
    expect(&urlset(r#"capability="resourcelist" at="2013-01-02T00:00:00Z" completed="2013-01-01T00:00:00Z""#, UP), "interval-order", "7", E, E).await;
    expect(&urlset(r#"capability="changelist" from="2013-01-02T00:00:00Z" until="2013-01-01T23:59:59+00:00""#, UP), "interval-order", "7", E, E).await;
}

#[tokio::test]
async fn capabilities() {
    expect(
        &urlset(r#"at="2013-01-01T00:00:00Z""#, UP),
        "capability-missing",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &urlset(r#"capability="resourcelists""#, UP),
        "capability-unknown",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &index(
            r#"capability="resourcedump-manifest" at="2013-01-01T00:00:00Z""#,
            UP,
        ),
        "capability-misplaced",
        "7",
        E,
        E,
    )
    .await;
    expect(&index(r#"capability="change-notification" from="2013-01-01T00:00:00Z" until="2013-01-01T00:00:00Z""#, ""), "capability-misplaced", "CN 3", E, E).await;
    let cap = |body: &str| {
        urlset(
            r#"capability="capabilitylist""#,
            &format!(
                r#"<rs:ln rel="up" href="http://example.com/.well-known/resourcesync"/>{body}"#
            ),
        )
    };
    // One entry per capability (9).
    let dup = cap(
        r#"<url><loc>http://example.com/rl1.xml</loc><rs:md capability="resourcelist"/></url><url><loc>http://example.com/rl2.xml</loc><rs:md capability="resourcelist"/></url>"#,
    );
    expect(&dup, "capability-duplicate", "9", E, E).await;
    expect(
        &cap(r#"<url><loc>http://example.com/rl.xml</loc></url>"#),
        "md-missing",
        "9",
        E,
        E,
    )
    .await;
    expect(
        &cap(r#"<url><loc>http://example.com/rl.xml</loc><rs:md type="application/xml"/></url>"#),
        "capability-missing",
        "9",
        E,
        E,
    )
    .await;
    expect(
        &cap(r#"<url><loc>http://example.com/d.xml</loc><rs:md capability="description"/></url>"#),
        "capability-misplaced",
        "9",
        E,
        E,
    )
    .await;
    expect(&cap(r#"<url><loc>http://example.com/change/</loc><rs:md capability="change-notification"/></url>"#), "hub-link-missing", "CN 5", E, W).await;
    // Source Description entries point at Capability Lists (8).
    let sd = urlset(
        r#"capability="description""#,
        r#"<url><loc>http://example.com/rl.xml</loc><rs:md capability="resourcelist"/></url>"#,
    );
    expect(&sd, "capability-misplaced", "8", E, E).await;
    // A Capability List should not be an index (9).
    expect(
        &index(r#"capability="capabilitylist""#, UP),
        "recommended",
        "9",
        W,
        None,
    )
    .await;
}

#[tokio::test]
async fn up_links_are_mandatory() {
    for (doc, section) in [
        (urlset(r#"capability="capabilitylist""#, ""), "9"),
        (
            urlset(r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#, ""),
            "10.1",
        ),
        (
            index(r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#, ""),
            "10.2",
        ),
        (
            urlset(r#"capability="resourcedump" at="2013-01-01T00:00:00Z""#, ""),
            "11.1",
        ),
        (
            urlset(
                r#"capability="resourcedump-manifest" at="2013-01-01T00:00:00Z""#,
                "",
            ),
            "11.2",
        ),
        (
            urlset(r#"capability="changelist" from="2013-01-01T00:00:00Z""#, ""),
            "12.1",
        ),
        (
            index(r#"capability="changelist" from="2013-01-01T00:00:00Z""#, ""),
            "12.2",
        ),
        (
            urlset(r#"capability="changedump" from="2013-01-01T00:00:00Z""#, ""),
            "13.1",
        ),
        (
            urlset(
                r#"capability="changedump-manifest" from="2013-01-01T00:00:00Z""#,
                "",
            ),
            "13.2",
        ),
    ] {
        expect(&doc, "up-link-missing", section, E, W).await;
    }
    // Not mandatory in a notification or a Source Description.
    let cn = urlset(
        r#"capability="change-notification" from="2013-01-01T00:00:00Z" until="2013-01-02T00:00:00Z""#,
        "",
    );
    expect(&cn, "up-link-missing", "CN 3", None, None).await;
}

fn changelist(body: &str) -> String {
    urlset(
        r#"capability="changelist" from="2013-01-01T00:00:00Z" until="2013-01-02T00:00:00Z""#,
        &format!("{UP}{body}"),
    )
}

#[tokio::test]
async fn change_entries() {
    expect(
        &changelist(r#"<url><loc>http://example.com/r</loc></url>"#),
        "md-missing",
        "12.1",
        E,
        E,
    )
    .await;
    expect(
        &changelist(&url(r#"<rs:md datetime="2013-01-01T01:00:00Z"/>"#)),
        "change-missing",
        "12.1",
        E,
        E,
    )
    .await;
    expect(
        &changelist(&url(r#"<rs:md change="modified"/>"#)),
        "change-value",
        "7",
        E,
        E,
    )
    .await;
    // Forward chronological order, compared as instants: 01:00+01:00 is 00:00Z, before 00:30Z.
    let order = changelist(&format!(
        "{}{}",
        url(r#"<rs:md change="created" datetime="2013-01-01T00:30:00Z"/>"#),
        url(r#"<rs:md change="updated" datetime="2013-01-01T01:00:00+01:00"/>"#)
    ));
    expect(&order, "chronological-order", "12.1", E, E).await;
    // Same text order, but in order as instants: no problem.
    let fine = changelist(&format!(
        "{}{}",
        url(r#"<rs:md change="created" datetime="2013-01-01T02:00:00+03:00"/>"#),
        url(r#"<rs:md change="updated" datetime="2013-01-01T00:00:00.5Z"/>"#)
    ));
    expect(&fine, "chronological-order", "12.1", None, None).await;
    expect(
        &changelist(&url(
            r#"<rs:md change="created" datetime="2012-12-31T23:59:59Z"/>"#,
        )),
        "datetime-interval",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &changelist(&url(
            r#"<rs:md change="created" datetime="2013-01-02T00:00:00.001Z"/>"#,
        )),
        "datetime-interval",
        "7",
        E,
        E,
    )
    .await;
    // Manifests.
    let cdm = |inner: &str| {
        urlset(
            r#"capability="changedump-manifest" from="2013-01-01T00:00:00Z""#,
            &format!("{UP}{}", url(inner)),
        )
    };
    expect(
        &cdm(r#"<rs:md change="updated" type="text/html"/>"#),
        "path-missing",
        "13.2",
        E,
        E,
    )
    .await;
    expect(
        &cdm(r#"<rs:md change="deleted"/>"#),
        "path-missing",
        "13.2",
        None,
        None,
    )
    .await;
    expect(
        &cdm(r#"<rs:md change="updated" type="text/html" path="changes/a"/>"#),
        "path-leading-slash",
        "13.2",
        E,
        W,
    )
    .await;
    let rdm = |inner: &str| {
        urlset(
            r#"capability="resourcedump-manifest" at="2013-01-01T00:00:00Z""#,
            &format!("{UP}{}", url(inner)),
        )
    };
    expect(
        &rdm(r#"<rs:md type="text/html"/>"#),
        "path-missing",
        "11.2",
        E,
        E,
    )
    .await;
    expect(&rdm(""), "md-missing", "11.2", E, E).await;
    expect(
        &rdm(r#"<rs:md type="text/html" path="a"/>"#),
        "path-leading-slash",
        "11.2",
        E,
        W,
    )
    .await;
    // Notifications keep forward chronological order too (CN 3).
    let cn = urlset(
        r#"capability="change-notification" from="2013-01-01T00:00:00Z" until="2013-01-02T00:00:00Z""#,
        &format!(
            "{}{}",
            url(r#"<rs:md change="created" datetime="2013-01-01T05:00:00Z"/>"#),
            url(r#"<rs:md change="updated" datetime="2013-01-01T04:00:00Z"/>"#)
        ),
    );
    expect(&cn, "chronological-order", "CN 3", E, E).await;
    let cdm_order = urlset(
        r#"capability="changedump-manifest" from="2013-01-01T00:00:00Z""#,
        &format!(
            "{UP}{}{}",
            url(
                r#"<rs:md change="created" type="a/b" path="/a" datetime="2013-01-01T05:00:00Z"/>"#
            ),
            url(
                r#"<rs:md change="updated" type="a/b" path="/b" datetime="2013-01-01T04:00:00Z"/>"#
            )
        ),
    );
    expect(&cdm_order, "chronological-order", "13.2", E, E).await;
}

#[tokio::test]
async fn change_list_index_order() {
    let cli = |body: &str| {
        index(
            r#"capability="changelist" from="2013-01-01T00:00:00Z""#,
            &format!("{UP}{body}"),
        )
    };
    let sm = |from: &str, until: Option<&str>| match until {
        Some(u) => format!(
            r#"<sitemap><loc>http://example.com/{from}.xml</loc><rs:md from="{from}" until="{u}"/></sitemap>"#
        ),
        None => format!(
            r#"<sitemap><loc>http://example.com/{from}.xml</loc><rs:md from="{from}"/></sitemap>"#
        ),
    };
    let reversed = cli(&format!(
        "{}{}",
        sm("2013-01-02T00:00:00Z", Some("2013-01-03T00:00:00Z")),
        sm("2013-01-01T00:00:00Z", Some("2013-01-02T00:00:00Z"))
    ));
    expect(&reversed, "chronological-order", "12.2", E, E).await;
    let open_first = cli(&format!(
        "{}{}",
        sm("2013-01-01T00:00:00Z", None),
        sm("2013-01-02T00:00:00Z", None)
    ));
    expect(&open_first, "open-list-not-last", "12.2", E, E).await;
    let before_index = cli(&sm("2012-12-01T00:00:00Z", Some("2013-01-02T00:00:00Z")));
    expect(&before_index, "datetime-interval", "12.2", E, E).await;
    let fine = cli(&format!(
        "{}{}",
        sm("2013-01-01T00:00:00Z", Some("2013-01-02T00:00:00Z")),
        sm("2013-01-02T00:00:00Z", None)
    ));
    for code in [
        "chronological-order",
        "open-list-not-last",
        "datetime-interval",
    ] {
        expect(&fine, code, "12.2", None, None).await;
    }
    let no_from = cli(r#"<sitemap><loc>http://example.com/a.xml</loc></sitemap>"#);
    expect(&no_from, "recommended", "Appendix A", W, None).await;
}

fn resourcelist(body: &str) -> String {
    urlset(
        r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#,
        &format!("{UP}{body}"),
    )
}

#[tokio::test]
async fn attribute_syntax() {
    // Hash syntax: hex of the right length; non-hex is a known upstream quirk.
    expect(
        &resourcelist(&url(r#"<rs:md hash="md5:xyz"/>"#)),
        "hash-syntax",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(
            r#"<rs:md hash="sha-1:1584abdf8ebdc9802ac0c6a7402c03b6"/>"#,
        )),
        "hash-syntax",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md hash="1584abdf8ebdc9802ac0c6a7402c03b6"/>"#)),
        "hash-syntax",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md hash="sha-512:00"/>"#)),
        "hash-algorithm",
        "7",
        W,
        W,
    )
    .await;
    expect(&resourcelist(&url(r#"<rs:md hash="md5:1584ABDF8EBDC9802AC0C6A7402C03B6 sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784"/>"#)), "hash-syntax", "7", None, None).await;
    expect(
        &resourcelist(&url(r#"<rs:md length="-4"/>"#)),
        "length-syntax",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &resourcelist(&url(
            r#"<rs:ln rel="duplicate" href="http://m.example.com/r" pri="0"/>"#,
        )),
        "pri-range",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(
            r#"<rs:ln rel="duplicate" href="http://m.example.com/r" pri="1000000"/>"#,
        )),
        "pri-range",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(
            r#"<rs:ln rel="duplicate" href="http://m.example.com/r" pri="999999"/>"#,
        )),
        "pri-range",
        "7",
        None,
        None,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:ln href="http://m.example.com/r"/>"#)),
        "link-incomplete",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<lastmod>2013-02-30</lastmod>"#)),
        "datetime-syntax",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<lastmod>2013-01-01T10:00:00</lastmod>"#)),
        "datetime-timezone",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<changefreq>sometimes</changefreq>"#)),
        "changefreq-value",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md type="html"/>"#)),
        "type-syntax",
        "7",
        W,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md colour="red"/>"#)),
        "attribute-unknown",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md rs:length="3"/>"#)),
        "attribute-prefixed",
        "7",
        E,
        W,
    )
    .await;
    // Sitemap elements have no attributes; they are reported, not dropped silently.
    expect(
        &resourcelist(r#"<url priority="1"><loc>http://e.com/a</loc></url>"#),
        "attribute-unknown",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(r#"<url><loc lang="en">http://e.com/a</loc></url>"#),
        "attribute-unknown",
        "7",
        E,
        W,
    )
    .await;
    expect(
        &resourcelist(r#"<url><rs:md length="3"/></url>"#),
        "loc-missing",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &resourcelist(r#"<url><loc>/relative</loc></url>"#),
        "loc-not-absolute",
        "7",
        E,
        E,
    )
    .await;
    expect(
        &resourcelist(&url(r#"<rs:md length="1"/><rs:md length="2"/>"#)),
        "element-repeated",
        "7",
        E,
        W,
    )
    .await;
    // Attributes of other namespaces are extensions, not problems.
    let ext = resourcelist(&url(
        r#"<rs:md xmlns:x="urn:x" x:colour="red" length="3"/>"#,
    ));
    expect(&ext, "attribute-unknown", "7", None, None).await;
}

#[tokio::test]
async fn namespaces_and_structure() {
    // Any prefix bound to the rs namespace works.
    let other_prefix = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:r="http://www.openarchives.org/rs/terms/"><r:ln rel="up" href="http://e.com/c.xml"/><r:md capability="resourcelist" at="2013-01-01"/><url><loc>http://e.com/a</loc><r:md length="3"/></url></urlset>"#;
    assert!(
        problems(other_prefix, Mode::Strict)
            .await
            .unwrap()
            .is_empty()
    );
    // A wrong namespace URI for rs: is an error, never silently accepted.
    let wrong = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms"><rs:md capability="resourcelist" at="2013-01-01"/></urlset>"#;
    expect(wrong, "namespace", "4", E, E).await;
    // A mistyped namespace that no longer looks like ResourceSync's is still not an extension.
    let typo = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchive.org/rs/terms/"><rs:md capability="resourcelist" at="2013-01-01"/></urlset>"#;
    expect(typo, "namespace", "4", E, E).await;
    // Undeclared prefix.
    let undeclared = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><rs:md capability="resourcelist" at="2013-01-01"/></urlset>"#;
    expect(undeclared, "namespace", "4", E, E).await;
    // Plain Sitemap without rs:md: a known quirk in lenient mode.
    let plain = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://e.com/a</loc></url></urlset>"#;
    expect(plain, "root-md-missing", "7", E, W).await;
    // <url> inside a <sitemapindex>.
    expect(
        &index(
            r#"capability="resourcelist" at="2013-01-01T00:00:00Z""#,
            &format!("{UP}<url><loc>http://e.com/a</loc></url>"),
        ),
        "element-misplaced",
        "7",
        E,
        E,
    )
    .await;
    // rs:md after the entries.
    expect(
        &resourcelist(&format!("{}<rs:md capability=\"resourcelist\"/>", url(""))),
        "element-misplaced",
        "7",
        E,
        E,
    )
    .await;
    // Extension elements of other namespaces are skipped.
    let image = resourcelist(&url(
        r#"<image:image xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"><image:loc>http://e.com/i.png</image:loc></image:image>"#,
    ));
    assert!(problems(&image, Mode::Strict).await.unwrap().is_empty());
}

#[tokio::test]
async fn fatal_errors_name_the_position() {
    // Wrong root namespace.
    let e = problems(
        r#"<urlset xmlns="http://www.google.com/schemas/sitemap/0.84"></urlset>"#,
        Mode::Lenient,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Root {
                line: 1,
                column: 1,
                ..
            }
        ),
        "{e}"
    );
    // No entity expansion: a DOCTYPE is refused before anything is declared.
    let bomb = "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;\">]>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"><url><loc>&lol2;</loc></url></urlset>";
    let e = problems(bomb, Mode::Lenient).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Doctype {
                line: 2,
                column: 1,
                ..
            }
        ),
        "{e}"
    );
    // An undefined entity is not expanded.
    let e = problems(
        &resourcelist(r#"<url><loc>http://e.com/&custom;</loc></url>"#),
        Mode::Lenient,
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("undefined entity `&custom;`"), "{e}");
    // Predefined entities and character references are resolved.
    let amp = resourcelist(r#"<url><loc>http://e.com/a?b=1&amp;c=&#50;</loc></url>"#);
    let mut r = SyncReader::open(amp.as_bytes(), ReadOptions::default()).unwrap();
    assert_eq!(
        r.next_entry().unwrap().unwrap().loc,
        "http://e.com/a?b=1&c=2"
    );
    // Whitespace inside a value is kept, around references too (only the ends are trimmed).
    let spaced =
        resourcelist("<url><loc>\n  http://e.com/a b &amp; c <![CDATA[ d ]]> e\n</loc></url>");
    let mut r = SyncReader::open(spaced.as_bytes(), ReadOptions::default()).unwrap();
    assert_eq!(
        r.next_entry().unwrap().unwrap().loc,
        "http://e.com/a b & c  d  e"
    );
    assert!(
        r.validator()
            .problems()
            .iter()
            .any(|p| p.code == "loc-not-absolute")
    );
    // Not well-formed, with line:column.
    let e = problems("<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n  <url><loc>x</lox></url>\n</urlset>", Mode::Lenient).await.unwrap_err();
    match e {
        Error::Syntax { line, .. } => assert_eq!(line, 2),
        other => panic!("{other}"),
    }
    // Caps: bytes counted on what is read, entries counted as they stream.
    let big = resourcelist(&url("").repeat(100));
    let opts = ReadOptions {
        max_bytes: 200,
        ..ReadOptions::default()
    };
    let e = async {
        let mut r = SyncReader::open(big.as_bytes(), opts)?;
        while r.next_entry()?.is_some() {}
        Ok::<_, Error>(())
    }
    .await
    .unwrap_err();
    assert!(matches!(e, Error::TooLarge { limit: 200, .. }), "{e}");
    let opts = ReadOptions {
        max_entries: 10,
        ..ReadOptions::default()
    };
    let e = async {
        let mut r = SyncReader::open(big.as_bytes(), opts)?;
        while r.next_entry()?.is_some() {}
        Ok::<_, Error>(())
    }
    .await
    .unwrap_err();
    assert!(matches!(e, Error::TooManyEntries { limit: 10, .. }), "{e}");
    // Non-UTF-8 encodings are refused explicitly.
    let e = problems(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><urlset/>",
        Mode::Lenient,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::Encoding { .. }), "{e}");
}

#[tokio::test]
async fn limits_of_the_sitemap_protocol() {
    let body = url("").repeat(50_001);
    let doc = resourcelist(&body);
    expect(&doc, "entries-limit", "7", E, W).await;
    let just = resourcelist(&url("").repeat(50_000));
    expect(&just, "entries-limit", "7", None, None).await;
    let long = format!("http://example.com/{}", "a".repeat(1000));
    let doc = resourcelist(&format!("<url><loc>{long}</loc></url>").repeat(53_000));
    expect(&doc, "size-limit", "7", E, W).await;
}

#[tokio::test]
async fn positions_are_exact() {
    let doc = "<?xml version=\"1.0\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"\n        xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n  <rs:ln rel=\"up\" href=\"http://e.com/c.xml\"/>\n  <rs:md capability=\"changelist\" from=\"2013-01-01T00:00:00Z\"/>\n  <url>\n    <loc>http://e.com/a</loc>\n      <rs:md change=\"gone\"/>\n  </url>\n</urlset>\n";
    let ps = problems(doc, Mode::Strict).await.unwrap();
    let p = ps.iter().find(|p| p.code == "change-value").unwrap();
    assert_eq!((p.line, p.column), (8, 7));
    assert_eq!(p.entry, Some(0));
}

/// Issue 26: an entry whose `<loc>` or `<rs:ln href>` is longer than `max_uri_bytes` is
/// skipped by both readers (counted, reported as `uri-too-long` with an excerpt, never
/// returned); the entries around it are read, and problems after it keep their entry
/// numbers.
#[tokio::test]
async fn over_long_uris_are_skipped_with_an_excerpt() {
    let long = format!("http://example.com/{}", "a".repeat(1 << 20));
    let body = format!(
        "<url><loc>http://example.com/1</loc></url>\
         <url><loc>{long}</loc></url>\
         <url><loc>http://example.com/3</loc><rs:ln rel=\"alternate\" href=\"{long}\"/></url>\
         <url><loc>relative</loc></url>"
    );
    let xml = resourcelist(&body);
    expect(&xml, "uri-too-long", "7", E, E).await;
    let check = |locs: Vec<String>, ps: &[Problem], skipped: u64| {
        assert_eq!(locs, ["http://example.com/1", "relative"]);
        assert_eq!(skipped, 2);
        let long: Vec<&Problem> = ps.iter().filter(|p| p.code == "uri-too-long").collect();
        assert_eq!(long.len(), 2, "{ps:#?}");
        assert_eq!(long[0].entry, Some(1));
        assert!(
            long[0].message.contains("<loc> of 1048595 bytes"),
            "{}",
            long[0].message
        );
        assert!(
            long[1].message.contains("<rs:ln href>"),
            "{}",
            long[1].message
        );
        for p in ps {
            assert!(p.message.len() < 1024, "{} bytes", p.message.len());
        }
        // The next entry is entry 3 of the document.
        let rel = ps.iter().find(|p| p.code == "loc-not-absolute").unwrap();
        assert_eq!(rel.entry, Some(3));
    };
    let mut r = SyncReader::open(xml.as_bytes(), ReadOptions::new(Mode::Lenient, "t")).unwrap();
    let mut locs = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        locs.push(e.loc);
    }
    check(locs, r.validator().problems(), r.skipped());
    let mut r = rsagg_sitemap::DocumentReader::open_blocking(
        std::io::Cursor::new(xml.into_bytes()),
        ReadOptions::new(Mode::Lenient, "t"),
    )
    .await
    .unwrap();
    let mut locs = Vec::new();
    while let Some(e) = r.next_entry().await.unwrap() {
        locs.push(e.loc);
    }
    check(locs, r.problems(), r.tally().skipped);
    // Within the limit nothing is skipped.
    let opts = ReadOptions {
        max_uri_bytes: 2 << 20,
        ..ReadOptions::new(Mode::Lenient, "t")
    };
    let xml = resourcelist(&body);
    let mut r = SyncReader::open(xml.as_bytes(), opts).unwrap();
    let mut n = 0;
    while r.next_entry().unwrap().is_some() {
        n += 1;
    }
    assert_eq!((n, r.skipped()), (4, 0));
}
