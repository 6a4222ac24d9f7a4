//! Writer → reader round trips, spec example manifests, and the writer's refusals.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};

use common::*;
use rsagg_dump::{Error, Limits, Package, PackageWriter};
use rsagg_model::{
    Capability, Change, DocumentKind, Header, Link, Md, Root, Severity, UrlEntry, W3cDateTime,
};

fn dt(s: &str) -> W3cDateTime {
    W3cDateTime::parse(s).unwrap().value
}

fn up() -> Link {
    Link::new("up", "http://example.com/dataset1/capabilitylist.xml")
}

fn rd_header() -> Header {
    let mut h = Header::new(Root::Urlset, Capability::ResourceDumpManifest);
    h.md.as_mut().unwrap().at = Some(dt(AT));
    h.links.push(up());
    h
}

fn cd_header() -> Header {
    let mut h = Header::new(Root::Urlset, Capability::ChangeDumpManifest);
    let md = h.md.as_mut().unwrap();
    md.from = Some(dt("2013-01-02T00:00:00Z"));
    md.until = Some(dt("2013-01-03T00:00:00Z"));
    h.links.push(up());
    h
}

fn entry(loc: &str, path: Option<&str>, len: u64, change: Option<Change>, at: &str) -> UrlEntry {
    UrlEntry {
        loc: loc.to_owned(),
        md: Some(Md {
            path: path.map(str::to_owned),
            length: path.map(|_| len),
            mime_type: path.map(|_| "application/octet-stream".to_owned()),
            datetime: change.as_ref().map(|_| dt(at)),
            change,
            ..Md::default()
        }),
        ..UrlEntry::default()
    }
}

fn read_item(p: &mut Package, i: usize) -> Vec<u8> {
    let mut out = Vec::new();
    p.open_item(i).unwrap().read_to_end(&mut out).unwrap();
    out
}

fn reopen(mut f: std::fs::File, limits: Limits) -> Result<Package, Error> {
    f.seek(SeekFrom::Start(0)).unwrap();
    Package::open(f, "roundtrip.zip", limits)
}

#[test]
fn resource_dump_round_trip() {
    let small = b"hello, resource one\n".to_vec();
    let big = [noise(3 << 20, 7), vec![b'x'; 1 << 20]].concat();
    let mut w = PackageWriter::with_name(tempfile::tempfile().unwrap(), "rd.zip");
    assert_eq!(
        w.add("/resources/res1", &mut &small[..]).unwrap(),
        small.len() as u64
    );
    assert_eq!(
        w.add("/resources/sub/res2", &mut &big[..]).unwrap(),
        big.len() as u64
    );
    let entries = vec![
        entry(
            "http://example.com/res1",
            Some("/resources/res1"),
            small.len() as u64,
            None,
            AT,
        ),
        entry(
            "http://example.com/res2",
            Some("/resources/sub/res2"),
            big.len() as u64,
            None,
            AT,
        ),
    ];
    let f = w
        .finish(&rd_header(), &mut entries.clone().into_iter())
        .unwrap();

    let mut p = reopen(f, Limits::default()).unwrap();
    assert_eq!(p.kind(), DocumentKind::ResourceDumpManifest);
    assert_eq!(p.header(), &rd_header());
    assert!(p.problems().is_empty(), "{:?}", p.problems());
    assert_eq!(p.entries().len(), 2);
    assert_eq!(p.entries()[0].entry, entries[0]);
    assert_eq!(p.entries()[1].entry, entries[1]);
    assert_eq!(p.entries()[0].path.as_deref(), Some("resources/res1"));
    assert_eq!(p.entries()[1].path.as_deref(), Some("resources/sub/res2"));
    assert!(p.entries().iter().all(|e| e.zip_index.is_some()));
    assert_eq!(read_item(&mut p, 1), big);
    assert_eq!(read_item(&mut p, 0), small);
    // Reading again works and counts again.
    assert_eq!(read_item(&mut p, 0), small);
    assert!(p.inflated_bytes() >= (2 * small.len() + big.len()) as u64);
}

#[test]
fn change_dump_round_trip_with_deletion() {
    let v1 = b"<html>v1</html>".to_vec();
    let v2 = b"<html>version two</html>".to_vec();
    let pdf = noise(40_000, 3);
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    w.add("/changes/res7.html", &mut &v1[..]).unwrap();
    w.add("/changes/res9.pdf", &mut &pdf[..]).unwrap();
    w.add("/changes/res7-v2.html", &mut &v2[..]).unwrap();
    let entries = vec![
        entry(
            "http://example.com/res7.html",
            Some("/changes/res7.html"),
            v1.len() as u64,
            Some(Change::Created),
            "2013-01-02T12:00:00Z",
        ),
        entry(
            "http://example.com/res9.pdf",
            Some("/changes/res9.pdf"),
            pdf.len() as u64,
            Some(Change::Updated),
            "2013-01-02T13:00:00Z",
        ),
        entry(
            "http://example.com/res5.tiff",
            None,
            0,
            Some(Change::Deleted),
            "2013-01-02T19:00:00Z",
        ),
        entry(
            "http://example.com/res7.html",
            Some("/changes/res7-v2.html"),
            v2.len() as u64,
            Some(Change::Updated),
            "2013-01-02T20:00:00Z",
        ),
    ];
    let f = w
        .finish(&cd_header(), &mut entries.clone().into_iter())
        .unwrap();

    let mut p = reopen(f, Limits::default()).unwrap();
    assert_eq!(p.kind(), DocumentKind::ChangeDumpManifest);
    assert!(p.problems().is_empty(), "{:?}", p.problems());
    let got: Vec<UrlEntry> = p.entries().iter().map(|i| i.entry.clone()).collect();
    assert_eq!(got, entries);
    let deletion = &p.entries()[2];
    assert!(deletion.is_deletion());
    assert_eq!(deletion.path, None);
    assert_eq!(deletion.zip_index, None);
    assert!(matches!(
        p.open_item(2),
        Err(Error::NoBitstream { index: 2, .. })
    ));
    assert_eq!(read_item(&mut p, 0), v1);
    assert_eq!(read_item(&mut p, 1), pdf);
    assert_eq!(read_item(&mut p, 3), v2);
    assert!(matches!(
        p.open_item(4),
        Err(Error::NoSuchItem {
            index: 4,
            count: 4,
            ..
        })
    ));
}

#[test]
fn reading_exactly_the_declared_size_is_verified() {
    let data = noise(10_000, 11);
    let bytes = package_bytes(&[("a.bin", &data)]);
    let mut p = open(&bytes, Limits::default()).unwrap();
    let mut buf = vec![0u8; data.len()];
    let mut r = p.open_item(0).unwrap();
    r.read_exact(&mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(r.read(&mut [0u8; 16]).unwrap(), 0);
}

/// Spec examples 18 (Resource Dump Manifest) and 23 (Change Dump Manifest) as the manifests
/// of packages holding bitstreams of the lengths they declare.
#[test]
fn spec_example_manifests_open() {
    let root = format!(
        "{}/../../tests/fixtures/spec-1.1/",
        std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")
    );
    let ex18 = std::fs::read(format!("{root}resourcesync_ex_18.xml")).unwrap();
    let res1 = vec![b'1'; 8876];
    let res2 = vec![b'2'; 14599];
    let zip = zip_bytes(&[
        deflated("manifest.xml", &ex18),
        deflated("resources/res1", &res1),
        deflated("resources/res2", &res2),
    ]);
    let mut p = open(&zip, Limits::default()).unwrap();
    assert_eq!(p.kind(), DocumentKind::ResourceDumpManifest);
    assert_eq!(p.entries().len(), 2);
    assert!(
        p.problems().iter().all(|x| x.severity == Severity::Warning),
        "{:?}",
        p.problems()
    );
    assert_eq!(read_item(&mut p, 1), res2);

    let ex23 = std::fs::read(format!("{root}resourcesync_ex_23.xml")).unwrap();
    let zip = zip_bytes(&[
        deflated("manifest.xml", &ex23),
        deflated("changes/res7.html", &[b'7'; 4339]),
        deflated("changes/res9.pdf", &noise(38297, 9)),
        deflated("changes/res7-v2.html", &[b'v'; 5426]),
    ]);
    let mut p = open(&zip, Limits::default()).unwrap();
    assert_eq!(p.kind(), DocumentKind::ChangeDumpManifest);
    assert_eq!(p.entries().len(), 4);
    assert!(p.problems().is_empty(), "{:?}", p.problems());
    assert!(p.entries()[2].is_deletion());
    assert!(matches!(p.open_item(2), Err(Error::NoBitstream { .. })));
    assert_eq!(read_item(&mut p, 3), vec![b'v'; 5426]);
}

#[test]
fn writer_refuses_unsafe_and_repeated_names() {
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    for bad in [
        "/../etc/passwd",
        "/a/../../b",
        "//abs",
        "/a\\b",
        "/C:/x",
        "/a\0b",
        "/a//b",
        "/",
    ] {
        assert!(
            matches!(w.add(bad, &mut &b"x"[..]), Err(Error::UnsafeName { .. })),
            "{bad:?} accepted"
        );
    }
    w.add("/ok", &mut &b"x"[..]).unwrap();
    assert!(matches!(
        w.add("/ok", &mut &b"y"[..]),
        Err(Error::Duplicate { .. })
    ));
    assert!(matches!(
        w.add("/manifest.xml", &mut &b"y"[..]),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn writer_refuses_inconsistent_manifests() {
    // A path naming no file.
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    w.add("/a", &mut &b"x"[..]).unwrap();
    let es = [
        entry("http://example.com/a", Some("/a"), 1, None, AT),
        entry("http://example.com/b", Some("/b"), 1, None, AT),
    ];
    let e = w.finish(&rd_header(), &mut es.into_iter()).unwrap_err();
    assert!(
        matches!(&e, Error::Invalid { message, .. } if message.contains("`/b` names no file")),
        "{e}"
    );

    // A file no entry names.
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    w.add("/a", &mut &b"x"[..]).unwrap();
    w.add("/extra", &mut &b"x"[..]).unwrap();
    let es = [entry("http://example.com/a", Some("/a"), 1, None, AT)];
    let e = w.finish(&rd_header(), &mut es.into_iter()).unwrap_err();
    assert!(
        matches!(&e, Error::Invalid { message, .. } if message.contains("/extra")),
        "{e}"
    );

    // Strict validation: no `at` on a Resource Dump Manifest (Appendix A).
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    w.add("/a", &mut &b"x"[..]).unwrap();
    let mut h = rd_header();
    h.md.as_mut().unwrap().at = None;
    let es = [entry("http://example.com/a", Some("/a"), 1, None, AT)];
    let e = w.finish(&h, &mut es.into_iter()).unwrap_err();
    assert!(
        matches!(&e, Error::Invalid { message, .. } if message.contains("at-missing")),
        "{e}"
    );

    // Not a manifest header.
    let w = PackageWriter::new(tempfile::tempfile().unwrap());
    let h = Header::new(Root::Urlset, Capability::ResourceList);
    let e = w.finish(&h, &mut std::iter::empty()).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
}

/// The package written to a file by name can be reopened from a fresh handle (nothing relies
/// on the writer's file position).
#[test]
fn written_package_reopens_from_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.zip");
    let mut w = PackageWriter::new(std::fs::File::create(&path).unwrap());
    w.add("/x.txt", &mut &b"x body"[..]).unwrap();
    let es = [entry("http://example.com/x", Some("/x.txt"), 6, None, AT)];
    let mut f = w.finish(&rd_header(), &mut es.into_iter()).unwrap();
    f.flush().unwrap();
    drop(f);
    let mut p = Package::open(
        std::fs::File::open(&path).unwrap(),
        "p.zip",
        Limits::default(),
    )
    .unwrap();
    assert_eq!(read_item(&mut p, 0), b"x body");
}

/// A body that fails half-way leaves a partial file in the ZIP: the writer refuses to go on.
#[test]
fn writer_is_unusable_after_a_failed_add() {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("upstream went away"));
            }
            self.0 -= 1;
            buf[0] = b'x';
            Ok(1)
        }
    }
    let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
    w.add("/a", &mut &b"a"[..]).unwrap();
    assert!(matches!(
        w.add("/b", &mut Failing(10)),
        Err(Error::Io { .. })
    ));
    assert!(matches!(
        w.add("/c", &mut &b"c"[..]),
        Err(Error::Invalid { .. })
    ));
    let es = [entry("http://example.com/a", Some("/a"), 1, None, AT)];
    assert!(matches!(
        w.finish(&rd_header(), &mut es.into_iter()),
        Err(Error::Invalid { .. })
    ));
}
