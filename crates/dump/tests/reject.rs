//! Every refusal at open, each with a crafted ZIP: a refused package yields no `Package`, so
//! no bytes.

mod common;

use common::*;
use rsagg_dump::{Error, Limits, Package};
use rsagg_model::Severity;

const BODY: &[u8] = b"some resource body, long enough to deflate a little bit bit bit bit";

fn refused(bytes: &[u8], limits: Limits) -> Error {
    match open(bytes, limits) {
        Ok(p) => panic!("package accepted: {p:?}"),
        Err(e) => {
            assert_eq!(e.package(), "test.zip");
            e
        }
    }
}

/// A valid package with `victim` as an extra entry named `placeholder`, renamed in both
/// headers to `name`.
fn with_renamed_entry(placeholder: &str, name: &[u8]) -> Vec<u8> {
    let mut zip = zip_bytes(&[
        deflated(
            "manifest.xml",
            rd_manifest(&[("http://example.com/a", "/a")]).as_bytes(),
        ),
        deflated("a", BODY),
        deflated(placeholder, BODY),
    ]);
    rename(&mut zip, placeholder, name);
    zip
}

#[test]
fn control_package_opens() {
    // The base every crafted package is derived from is fine as it is.
    let p = open(
        &with_renamed_entry("xx/passwd", b"yy/passwd"),
        Limits::default(),
    )
    .unwrap();
    assert_eq!(p.entries().len(), 1);
    let unlisted: Vec<_> = p
        .problems()
        .iter()
        .filter(|x| x.code == "zip-file-unlisted")
        .collect();
    assert_eq!(unlisted.len(), 1, "{:?}", p.problems());
    assert_eq!(unlisted[0].severity, Severity::Warning);
    assert!(unlisted[0].message.contains("yy/passwd"));
}

#[test]
fn path_traversal() {
    for name in [&b"../passwd"[..], b"aa/../../x"] {
        let placeholder = std::str::from_utf8(&vec![b'q'; name.len()])
            .unwrap()
            .to_owned();
        let e = refused(&with_renamed_entry(&placeholder, name), Limits::default());
        assert!(
            matches!(&e, Error::UnsafeName { reason, .. } if reason.contains("..")),
            "{e}"
        );
    }
}

#[test]
fn absolute_paths_drive_letters_backslashes_nul() {
    for (name, why) in [
        (&b"/etc/passwd"[..], "absolute"),
        (b"C:/Windows/x", "drive letter"),
        (b"c:x", "drive letter"),
        (b"..\\evil", "backslash"),
        (b"a\\b", "backslash"),
        (b"a\0b", "NUL"),
        (b"./a", "`.`"),
        (b"a//b", "empty component"),
    ] {
        let placeholder = std::str::from_utf8(&vec![b'q'; name.len()])
            .unwrap()
            .to_owned();
        let e = refused(&with_renamed_entry(&placeholder, name), Limits::default());
        assert!(
            matches!(&e, Error::UnsafeName { reason, .. } if reason.contains(why)),
            "{name:?}: {e}"
        );
    }
}

#[test]
fn non_utf8_name() {
    let e = refused(&with_renamed_entry("qq", b"\xff\xfe"), Limits::default());
    assert!(
        matches!(&e, Error::UnsafeName { reason, .. } if reason.contains("UTF-8")),
        "{e}"
    );
}

#[test]
fn symlink() {
    let zip = zip_bytes(&[
        deflated(
            "manifest.xml",
            rd_manifest(&[("http://example.com/a", "/a")]).as_bytes(),
        ),
        Item {
            name: "a",
            data: b"/etc/passwd",
            kind: Kind::Symlink,
        },
    ]);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::Symlink { entry, .. } if entry == "a"),
        "{e}"
    );
}

#[test]
fn symlink_mode_on_a_dos_made_entry() {
    // The mode bits alone make it a link for some extractors, whatever `made by` says.
    let mut zip = package_bytes(&[("a", BODY)]);
    let c = central_record(&zip, "a");
    put_u16(&mut zip, c + 4, 20); // made by MS-DOS, version 2.0
    put_u32(&mut zip, c + 38, 0o120_777 << 16);
    let e = refused(&zip, Limits::default());
    assert!(matches!(&e, Error::Symlink { .. }), "{e}");
}

#[test]
fn fifo_and_device_entries() {
    for mode in [0o010_644u32, 0o020_644, 0o060_644, 0o140_644] {
        let mut zip = package_bytes(&[("a", BODY)]);
        let c = central_record(&zip, "a");
        put_u32(&mut zip, c + 38, mode << 16);
        let e = refused(&zip, Limits::default());
        assert!(
            matches!(&e, Error::NotRegular { mode: m, .. } if *m == mode),
            "{mode:o}: {e}"
        );
    }
}

#[test]
fn directory_entries_are_tolerated_but_not_with_content() {
    let zip = zip_bytes(&[
        deflated(
            "manifest.xml",
            rd_manifest(&[("http://example.com/a", "/d/a")]).as_bytes(),
        ),
        Item {
            name: "d/",
            data: b"",
            kind: Kind::Dir,
        },
        deflated("d/a", BODY),
    ]);
    let p = open(&zip, Limits::default()).unwrap();
    assert!(p.problems().is_empty(), "{:?}", p.problems());

    // A directory mode on an entry with data.
    let mut zip = package_bytes(&[("a", BODY)]);
    let c = central_record(&zip, "a");
    put_u32(&mut zip, c + 38, 0o040_755 << 16);
    let e = refused(&zip, Limits::default());
    assert!(matches!(&e, Error::NotRegular { .. }), "{e}");
}

#[test]
fn duplicate_names() {
    let mut zip = zip_bytes(&[
        deflated(
            "manifest.xml",
            rd_manifest(&[("http://example.com/a", "/a")]).as_bytes(),
        ),
        deflated("a", BODY),
        deflated("b", b"other body"),
    ]);
    rename(&mut zip, "b", b"a");
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::Duplicate { entry, .. } if entry == "a"),
        "{e}"
    );
}

#[test]
fn encrypted_entry() {
    let mut zip = package_bytes(&[("a", BODY)]);
    let (l, c) = (local_header(&zip, "a"), central_record(&zip, "a"));
    let flags = u16::from_le_bytes([zip[c + 8], zip[c + 9]]) | 1;
    put_u16(&mut zip, l + 6, flags);
    put_u16(&mut zip, c + 8, flags);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::Encrypted { entry, .. } if entry == "a"),
        "{e}"
    );
}

#[test]
fn unsupported_compression_method() {
    // bzip2, LZMA, zstd, shrink, AES.
    for method in [12u16, 14, 93, 1, 99] {
        let mut zip = package_bytes(&[("a", BODY)]);
        let (l, c) = (local_header(&zip, "a"), central_record(&zip, "a"));
        put_u16(&mut zip, l + 8, method);
        put_u16(&mut zip, c + 10, method);
        let e = refused(&zip, Limits::default());
        assert!(
            matches!(&e, Error::UnsupportedMethod { method: m, .. } if *m == method),
            "{method}: {e}"
        );
    }
}

#[test]
fn too_many_entries() {
    let zip = package_bytes(&[("a", BODY), ("b", BODY), ("c", BODY)]);
    let limits = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let e = refused(&zip, limits);
    assert!(
        matches!(
            e,
            Error::TooManyEntries {
                count: 4,
                limit: 3,
                ..
            }
        ),
        "{e}"
    );
    // Exactly at the limit is fine.
    open(
        &zip,
        Limits {
            max_entries: 4,
            ..Limits::default()
        },
    )
    .unwrap();
}

#[test]
fn forged_entry_count_is_refused_before_parsing() {
    let mut zip = package_bytes(&[("a", BODY)]);
    let eocd = zip.len() - 22;
    assert_eq!(&zip[eocd..eocd + 4], b"PK\x05\x06");
    put_u16(&mut zip, eocd + 8, 60_000);
    put_u16(&mut zip, eocd + 10, 60_000);
    let e = refused(
        &zip,
        Limits {
            max_entries: 1000,
            ..Limits::default()
        },
    );
    assert!(
        matches!(e, Error::TooManyEntries { count: 60_000, .. }),
        "{e}"
    );
}

#[test]
fn missing_manifest() {
    let zip = zip_bytes(&[deflated("a", BODY)]);
    assert!(matches!(
        refused(&zip, Limits::default()),
        Error::MissingManifest { .. }
    ));
    // Not at the top level.
    let zip = zip_bytes(&[
        deflated(
            "sub/manifest.xml",
            rd_manifest(&[("http://example.com/a", "/a")]).as_bytes(),
        ),
        deflated("a", BODY),
    ]);
    assert!(matches!(
        refused(&zip, Limits::default()),
        Error::MissingManifest { .. }
    ));
}

#[test]
fn bad_manifest_xml() {
    // A good header, then a broken entry: the error comes from the entries, after the kind
    // was already accepted.
    let good = rd_manifest(&[("http://example.com/a", "/a")]);
    let broken = good.replace("</loc>", "</lco>");
    let truncated = &good[..good.len() - 20];
    let cases: [(&str, &[u8]); 6] = [
        ("not well-formed entry", broken.as_bytes()),
        ("truncated", truncated.as_bytes()),
        ("not well-formed root", b"<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"><url><loc>x</url>"),
        ("not xml", b"PK garbage \x00\x01"),
        (
            "doctype",
            b"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaa\">]><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"/>",
        ),
        ("wrong root", b"<feed xmlns=\"http://www.w3.org/2005/Atom\"/>"),
    ];
    for (what, manifest) in cases {
        let zip = zip_bytes(&[deflated("manifest.xml", manifest), deflated("a", BODY)]);
        let e = refused(&zip, Limits::default());
        assert!(
            matches!(e, Error::Manifest { .. })
                || (what == "not well-formed root" && matches!(e, Error::ManifestKind { .. })),
            "{what}: {e}"
        );
    }
}

#[test]
fn manifest_of_the_wrong_kind() {
    let list = rd_manifest(&[("http://example.com/a", "/a")])
        .replace("resourcedump-manifest", "resourcelist");
    let zip = zip_bytes(&[
        deflated("manifest.xml", list.as_bytes()),
        deflated("a", BODY),
    ]);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(
            e,
            Error::ManifestKind {
                kind: rsagg_model::DocumentKind::ResourceList,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn manifest_over_its_limits() {
    let zip = package_bytes(&[("a", BODY)]);
    let e = refused(
        &zip,
        Limits {
            max_manifest_bytes: 100,
            ..Limits::default()
        },
    );
    assert!(
        matches!(&e, Error::EntryTooLarge { entry, declared: true, limit: 100, .. } if entry == "manifest.xml"),
        "{e}"
    );
    // More manifest entries than max_entries.
    let many: Vec<(String, String)> = (0..5)
        .map(|i| (format!("http://example.com/{i}"), "/a".to_owned()))
        .collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let zip = zip_bytes(&[
        deflated("manifest.xml", rd_manifest(&refs).as_bytes()),
        deflated("a", BODY),
    ]);
    let e = refused(
        &zip,
        Limits {
            max_entries: 4,
            ..Limits::default()
        },
    );
    assert!(matches!(e, Error::TooManyEntries { limit: 4, .. }), "{e}");
}

#[test]
fn manifest_path_missing_in_zip_is_a_problem_and_the_item_cannot_be_opened() {
    let manifest = rd_manifest(&[
        ("http://example.com/a", "/a"),
        ("http://example.com/b", "/nowhere/b"),
    ]);
    let zip = zip_bytes(&[
        deflated("manifest.xml", manifest.as_bytes()),
        deflated("a", BODY),
    ]);
    let mut p = open(&zip, Limits::default()).unwrap();
    let missing: Vec<_> = p
        .problems()
        .iter()
        .filter(|x| x.code == "zip-file-missing")
        .collect();
    assert_eq!(missing.len(), 1, "{:?}", p.problems());
    assert_eq!(missing[0].severity, Severity::Error);
    assert_eq!(missing[0].entry, Some(1));
    assert_eq!(missing[0].section, "11.2");
    assert_eq!(p.entries()[1].zip_index, None);
    assert!(matches!(
        p.open_item(1),
        Err(Error::MissingFile { index: 1, .. })
    ));
    // The other item is still usable.
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut p.open_item(0).unwrap(), &mut out).unwrap();
    assert_eq!(out, BODY);
}

#[test]
fn length_disagreeing_with_the_zip_is_a_problem() {
    let manifest = rd_manifest(&[("http://example.com/a", "/a")])
        .replace("type=\"text/plain\"", "type=\"text/plain\" length=\"3\"");
    let zip = zip_bytes(&[
        deflated("manifest.xml", manifest.as_bytes()),
        deflated("a", BODY),
    ]);
    let p = open(&zip, Limits::default()).unwrap();
    assert!(
        p.problems()
            .iter()
            .any(|x| x.code == "zip-length-mismatch" && x.severity == Severity::Error),
        "{:?}",
        p.problems()
    );
}

#[test]
fn central_directory_and_local_header_names_differ() {
    let mut zip = package_bytes(&[("good.txt", BODY)]);
    let l = local_header(&zip, "good.txt");
    zip[l + 30..l + 38].copy_from_slice(b"evil.exe");
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::HeaderMismatch { field: "name", entry, local, .. } if entry == "good.txt" && local == "evil.exe"),
        "{e}"
    );
}

#[test]
fn central_directory_and_local_header_disagree_on_crc_size_method_flags() {
    let base = package_bytes(&[("a", BODY)]);
    let l = local_header(&base, "a");
    let cases: [(&str, usize, u32, bool); 4] = [
        ("CRC-32", l + 14, 0xdead_beef, false),
        ("compressed size", l + 18, 3, false),
        ("uncompressed size", l + 22, 5, false),
        ("compression method", l + 8, 0, true),
    ];
    for (field, at, value, short) in cases {
        let mut zip = base.clone();
        if short {
            put_u16(&mut zip, at, value as u16);
        } else {
            put_u32(&mut zip, at, value);
        }
        let e = refused(&zip, Limits::default());
        assert!(
            matches!(&e, Error::HeaderMismatch { field: f, .. } if *f == field),
            "{field}: {e}"
        );
    }
    // Data descriptor flag set in the local header only.
    let mut zip = base.clone();
    let flags = u16::from_le_bytes([zip[l + 6], zip[l + 7]]) | 8;
    put_u16(&mut zip, l + 6, flags);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(
            &e,
            Error::HeaderMismatch {
                field: "general purpose flags",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn local_header_offset_pointing_elsewhere() {
    // The central record of `b` points at the local header of `a`.
    let mut zip = package_bytes(&[("a", BODY), ("b", BODY)]);
    let la = local_header(&zip, "a") as u32;
    let cb = central_record(&zip, "b");
    put_u32(&mut zip, cb + 42, la);
    let e = refused(&zip, Limits::default());
    assert!(matches!(&e, Error::HeaderMismatch { .. }), "{e}");
}

/// Entry `b`'s central record points at a genuine local header of `b` that lies inside the
/// data of entry `a`: both headers agree, but the bytes are shared (the trick of overlapping
/// zip bombs).
#[test]
fn overlapping_entries() {
    let b_body = noise(1000, 31);
    let z1 = zip_bytes(&[stored("b", &b_body)]);
    let lb = local_header(&z1, "b");
    let seg = z1[lb..data_offset(&z1, "b") + b_body.len()].to_vec();
    let manifest = rd_manifest(&[
        ("http://example.com/a", "/a"),
        ("http://example.com/b", "/b"),
    ]);
    let mut zip = zip_bytes(&[
        deflated("manifest.xml", manifest.as_bytes()),
        stored("a", &seg),
        stored("b", &b_body),
    ]);
    let inside_a = data_offset(&zip, "a") as u32;
    let cb = central_record(&zip, "b");
    put_u32(&mut zip, cb + 42, inside_a);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(
            &e,
            Error::HeaderMismatch {
                field: "entry byte ranges",
                ..
            }
        ),
        "{e}"
    );
}

/// Entry `hidden` has a local header and data but no central directory record: a streaming
/// reader would extract it, a central-directory reader would not see it.
#[test]
fn local_header_missing_from_the_central_directory() {
    let mut zip = package_bytes(&[("a", BODY), ("hidden", b"hidden payload")]);
    let c = central_record(&zip, "hidden");
    let n = u16::from_le_bytes([zip[c + 28], zip[c + 29]]) as usize;
    let m = u16::from_le_bytes([zip[c + 30], zip[c + 31]]) as usize;
    let k = u16::from_le_bytes([zip[c + 32], zip[c + 33]]) as usize;
    let len = 46 + n + m + k;
    zip.drain(c..c + len);
    let eocd = zip.len() - 22;
    assert_eq!(&zip[eocd..eocd + 4], b"PK\x05\x06");
    let count = u16::from_le_bytes([zip[eocd + 10], zip[eocd + 11]]) - 1;
    put_u16(&mut zip, eocd + 8, count);
    put_u16(&mut zip, eocd + 10, count);
    let size = get_u32(&zip, eocd + 12) - len as u32;
    put_u32(&mut zip, eocd + 12, size);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::Inconsistent { message, .. } if message.contains("missing from central directory")),
        "{e}"
    );
}

#[test]
fn zip_bomb_by_declared_ratio() {
    let zeros = vec![0u8; 8 << 20];
    let zip = package_bytes(&[("bomb", &zeros)]);
    let e = refused(&zip, Limits::default());
    assert!(
        matches!(&e, Error::RatioTooHigh { entry, declared: true, ratio: 200, size, .. } if entry == "bomb" && *size == 8 << 20),
        "{e}"
    );
    // The same file passes with a ratio limit that allows it.
    open(
        &zip,
        Limits {
            max_ratio: 2000,
            ..Limits::default()
        },
    )
    .unwrap();
}

#[test]
fn entry_over_max_entry_bytes_declared() {
    let data = noise(200_000, 5);
    let zip = package_bytes(&[("big", &data)]);
    let e = refused(
        &zip,
        Limits {
            max_entry_bytes: 100_000,
            ..Limits::default()
        },
    );
    assert!(
        matches!(&e, Error::EntryTooLarge { entry, size: 200_000, limit: 100_000, declared: true, .. } if entry == "big"),
        "{e}"
    );
}

#[test]
fn total_over_max_total_bytes_declared() {
    let a = noise(60_000, 1);
    let b = noise(60_000, 2);
    let zip = package_bytes(&[("a", &a), ("b", &b)]);
    let e = refused(
        &zip,
        Limits {
            max_total_bytes: 100_000,
            ..Limits::default()
        },
    );
    assert!(
        matches!(
            &e,
            Error::TotalTooLarge {
                declared: true,
                limit: 100_000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn not_a_zip() {
    for bytes in [&b""[..], b"PK\x03\x04 truncated", &noise(10_000, 4)] {
        let e = refused(bytes, Limits::default());
        assert!(matches!(e, Error::Zip { .. }), "{e}");
    }
}

/// Every package refused above is refused as a whole: `open` returns no `Package`, so there
/// is nothing to read bytes from. Also checked here for all of them at once, with the
/// defaults, so a future change that turned one refusal into a problem would show.
#[test]
fn rejected_packages_never_yield_a_package() {
    let mut crafted: Vec<(&str, Vec<u8>)> = vec![
        ("traversal", with_renamed_entry("qqqqqqqqq", b"../passwd")),
        (
            "absolute",
            with_renamed_entry("qqqqqqqqqqq", b"/etc/passwd"),
        ),
        ("missing manifest", zip_bytes(&[deflated("a", BODY)])),
    ];
    let mut dup = package_bytes(&[("a", BODY), ("b", BODY)]);
    rename(&mut dup, "b", b"a");
    crafted.push(("duplicate", dup));
    let mut mismatch = package_bytes(&[("good.txt", BODY)]);
    let l = local_header(&mismatch, "good.txt");
    mismatch[l + 30..l + 38].copy_from_slice(b"evil.exe");
    crafted.push(("header mismatch", mismatch));
    crafted.push(("bomb", package_bytes(&[("bomb", &vec![0u8; 8 << 20])])));
    for (what, bytes) in crafted {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &bytes).unwrap();
        std::io::Seek::rewind(&mut f).unwrap();
        let r: Result<Package, Error> = Package::open(f, "x.zip", Limits::default());
        assert!(r.is_err(), "{what} accepted");
    }
}
