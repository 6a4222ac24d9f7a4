//! Documents shaped like real producers' (`tests/fixtures/real-world/`): the reader takes their
//! quirks leniently (as warnings), strict reading still flags them, and what the writer makes
//! of the model they read is strictly valid.

use std::collections::BTreeSet;
use std::path::Path;

use rsagg_model::{
    Capability, DocumentKind, Legacy, Mode, Precision, Severity, Tzd, UrlEntry, W3cDateTime,
};
use rsagg_sitemap::{Document, ReadOptions, read_document, writer};

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../../tests/fixtures/real-world")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn read(name: &str, mode: Mode) -> Document {
    read_document(&fixture(name), ReadOptions::new(mode, name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The (code, severity) pairs of a document's problems, without repetition.
fn codes(d: &Document) -> BTreeSet<(&'static str, Severity)> {
    d.problems.iter().map(|p| (p.code, p.severity)).collect()
}

fn t(s: &str) -> W3cDateTime {
    W3cDateTime::parse(s).unwrap().value
}

#[test]
fn a_resource_list_with_zoneless_microsecond_times_close_tags_and_spread_attributes() {
    let d = read("resourcelist.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::ResourceList);
    // The only quirk worth a word: times without a designator, read as UTC.
    assert_eq!(
        codes(&d),
        BTreeSet::from([("datetime-timezone", Severity::Warning)]),
        "{:#?}",
        d.problems
    );
    // `rel="UP"` is the up link.
    assert_eq!(
        d.header.link("up").unwrap().href,
        "http://upstream.example.org/capabilitylist.xml"
    );
    let at = d.header.md.as_ref().unwrap().at.unwrap();
    assert_eq!(
        at.cmp_instant(&t("2018-11-06T17:41:16.901455Z")),
        std::cmp::Ordering::Equal
    );
    assert_eq!(
        (at.precision(), at.tzd()),
        (Precision::Fraction(6), Tzd::None)
    );

    let [a, b] = &d.entries[..] else {
        panic!("{:#?}", d.entries)
    };
    // White space and newlines around the text are not part of it.
    assert_eq!(a.loc, "http://upstream.example.org/res/a.txt");
    let lastmod = a.lastmod.unwrap();
    assert_eq!(
        lastmod.to_string(),
        "2018-11-06T17:41:16.901455",
        "kept as read"
    );
    assert_eq!(lastmod.to_utc().to_string(), "2018-11-06T17:41:16.901455Z");
    let md = a.md.as_ref().unwrap();
    assert_eq!(
        (md.length, md.mime_type.as_deref()),
        (Some(1), Some("text/plain"))
    );
    assert!(md.hash.is_some());
    // `describedBy` is `describedby` (RFC 8288: relation types are case-insensitive).
    let described = a.link("describedby").unwrap();
    assert_eq!(described.href, "http://upstream.example.org/res/a.txt.json");
    assert_eq!(
        described.modified.unwrap().to_utc().to_string(),
        "2018-11-06T17:41:16.901471Z"
    );
    // An offset: the same instant as in UTC.
    assert_eq!(b.loc, "http://upstream.example.org/res/b.txt");
    assert_eq!(
        b.lastmod.unwrap().cmp_instant(&t("2018-11-06T17:41:16.5Z")),
        std::cmp::Ordering::Equal
    );

    // Strict reading (rsagg's own output) does not accept a missing designator.
    let strict = read("resourcelist.xml", Mode::Strict);
    assert!(
        codes(&strict).contains(&("datetime-timezone", Severity::Error)),
        "{:#?}",
        strict.problems
    );
    assert_eq!(
        strict.entries, d.entries,
        "both modes read the same entries"
    );
}

#[test]
fn what_the_writer_makes_of_an_upstream_document_is_strictly_valid() {
    for name in [
        "resourcelist.xml",
        "resourcelist-index.xml",
        "changelist.xml",
    ] {
        let d = read(name, Mode::Lenient);
        let xml = writer::document(&d.header, d.entries.clone());
        let text = String::from_utf8_lossy(&xml);
        let back = read_document(&xml, ReadOptions::new(Mode::Strict, name)).unwrap();
        let timezone: Vec<_> = back
            .problems
            .iter()
            .filter(|p| p.code == "datetime-timezone")
            .collect();
        assert!(timezone.is_empty(), "{name}: {timezone:#?}\n{text}");
        // Every datetime is written in UTC with `Z`, fraction digits kept.
        assert!(!text.contains("+01:00"), "{text}");
        if name == "resourcelist.xml" {
            assert!(
                text.contains("<lastmod>2018-11-06T17:41:16.901455Z</lastmod>"),
                "{text}"
            );
            assert!(
                text.contains("<lastmod>2018-11-06T17:41:16.5Z</lastmod>"),
                "{text}"
            );
            assert!(
                text.contains("modified=\"2018-11-06T17:41:16.901471Z\""),
                "{text}"
            );
            assert!(
                text.contains("at=\"2018-11-06T17:41:16.901455Z\""),
                "{text}"
            );
        }
        // The same instants, read back.
        let instants = |es: &[UrlEntry]| -> Vec<Option<(i64, u32)>> {
            es.iter().map(|e| e.lastmod.map(|l| l.instant())).collect()
        };
        assert_eq!(instants(&back.entries), instants(&d.entries), "{name}");
        assert_eq!(back.entries.len(), d.entries.len(), "{name}");
    }
}

#[test]
fn an_index_with_links_first_and_close_tags() {
    let d = read("resourcelist-index.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::ResourceListIndex);
    assert_eq!(
        codes(&d),
        BTreeSet::from([("datetime-timezone", Severity::Warning)])
    );
    assert_eq!(d.entries.len(), 1);
    assert_eq!(
        d.entries[0].loc,
        "http://upstream.example.org/resourcelist.xml"
    );
    assert!(d.entries[0].md.as_ref().unwrap().at.is_some());
}

#[test]
fn a_change_list_with_zoneless_times_and_mixed_case_relations() {
    let d = read("changelist.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::ChangeList);
    assert_eq!(
        codes(&d),
        BTreeSet::from([("datetime-timezone", Severity::Warning)]),
        "{:#?}",
        d.problems
    );
    assert!(d.header.link("up").is_some(), "`Up` is the up link");
    assert_eq!(d.entries[0].loc, "http://upstream.example.org/res/a.txt");
    assert!(d.entries[0].link("describedby").is_some());
}

#[test]
fn a_0_9_description_is_a_source_description_with_a_warning_naming_the_version() {
    let d = read("sourcedescription-0.9.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::SourceDescription);
    assert_eq!(
        d.header.capability(),
        Some(&Capability::Legacy(Legacy::ResourceSyncDescription))
    );
    assert_eq!(
        codes(&d),
        BTreeSet::from([("capability-legacy", Severity::Warning)]),
        "{:#?}",
        d.problems
    );
    let p = &d.problems[0];
    assert!(p.message.contains("ResourceSync 0.9"), "{}", p.message);
    assert!(p.message.contains("`resourcesync`"), "{}", p.message);
    assert_eq!((p.section, p.line), ("7", 6));
    assert_eq!(
        d.entries[0].loc,
        "http://upstream.example.org/capabilitylist.xml"
    );
    let strict = read("sourcedescription-0.9.xml", Mode::Strict);
    assert_eq!(
        codes(&strict),
        BTreeSet::from([("capability-legacy", Severity::Error)]),
        "{:#?}",
        strict.problems
    );
}

#[test]
fn a_capability_list_advertising_a_change_list_archive() {
    let d = read("capabilitylist.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::CapabilityList);
    assert_eq!(
        codes(&d),
        BTreeSet::from([("capability-legacy", Severity::Warning)]),
        "{:#?}",
        d.problems
    );
    let p = &d.problems[0];
    assert!(
        p.message.contains("ResourceSync Archives") && p.message.contains("changelist-archive"),
        "{}",
        p.message
    );
    assert_eq!((p.section, p.entry), ("9", Some(1)));
    let archive = &d.entries[1];
    assert_eq!(
        archive.loc,
        "http://upstream.example.org/changelist-archive.xml"
    );
    let c = archive.md.as_ref().unwrap().capability.as_ref().unwrap();
    assert!(c.means(&Capability::ChangeList));
    // `Up` and `describedBy`: nothing missing.
    assert!(d.header.link("up").is_some() && d.header.link("describedby").is_some());
    let strict = read("capabilitylist.xml", Mode::Strict);
    assert_eq!(
        codes(&strict),
        BTreeSet::from([("capability-legacy", Severity::Error)]),
        "{:#?}",
        strict.problems
    );
}

#[test]
fn archives_read_as_indexes() {
    let d = read("changelist-archive.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::ChangeListIndex);
    assert_eq!(
        codes(&d),
        BTreeSet::from([
            ("capability-legacy", Severity::Warning),
            ("datetime-timezone", Severity::Warning)
        ]),
        "{:#?}",
        d.problems
    );
    let md = d.entries[0].md.as_ref().unwrap();
    assert!(md.from.is_some() && md.until.is_some());

    let d = read("resourcelist-archive.xml", Mode::Lenient);
    assert_eq!(d.header.kind(), DocumentKind::ResourceListIndex);
    assert_eq!(
        codes(&d),
        BTreeSet::from([
            ("capability-legacy", Severity::Warning),
            ("datetime-timezone", Severity::Warning)
        ]),
        "{:#?}",
        d.problems
    );
    assert_eq!(d.entries.len(), 3);
}
