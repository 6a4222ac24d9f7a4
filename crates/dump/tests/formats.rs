//! ZIP variants real producers write: data descriptors (streaming writers), ZIP64 extra
//! fields, stored entries, directory entries. Each must open and read back unchanged.

mod common;

use std::io::{Read, Write};

use common::*;
use rsagg_dump::Limits;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

fn manifest_for(names: &[&str]) -> String {
    let entries: Vec<(String, String)> = names
        .iter()
        .map(|n| (format!("http://example.com/{n}"), format!("/{n}")))
        .collect();
    let refs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    rd_manifest(&refs)
}

fn read_back(zip: &[u8], expect: &[&[u8]]) {
    let mut p = open(zip, Limits::default()).unwrap();
    assert!(p.problems().is_empty(), "{:?}", p.problems());
    assert_eq!(p.entries().len(), expect.len());
    for (i, want) in expect.iter().enumerate() {
        let mut got = Vec::new();
        p.open_item(i).unwrap().read_to_end(&mut got).unwrap();
        assert_eq!(&got, want, "item {i}");
    }
}

/// A writer to a non-seekable stream puts sizes and CRC-32 in data descriptors after the
/// data (general purpose flag bit 3), with zeros in the local headers.
#[test]
fn data_descriptors_from_a_streaming_writer() {
    let a = noise(70_000, 21);
    let b = b"second body".repeat(100);
    let mut w = ZipWriter::new_stream(Vec::new());
    let opts = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    w.start_file("manifest.xml", opts).unwrap();
    w.write_all(manifest_for(&["a", "b"]).as_bytes()).unwrap();
    w.start_file("a", opts).unwrap();
    w.write_all(&a).unwrap();
    w.start_file("b", opts).unwrap();
    w.write_all(&b).unwrap();
    let zip = w.finish().unwrap().into_inner();
    let l = local_header(&zip, "a");
    assert_ne!(
        u16::from_le_bytes([zip[l + 6], zip[l + 7]]) & 8,
        0,
        "no data descriptor written"
    );
    read_back(&zip, &[&a, &b]);

    // And a data descriptor whose CRC-32 disagrees with the central directory is refused.
    let mut bad = zip.clone();
    let c = central_record(&bad, "a");
    let crc = get_u32(&bad, c + 16).to_le_bytes();
    let dd = bad
        .windows(8)
        .position(|w| w[..4] == *b"PK\x07\x08" && w[4..] == crc)
        .expect("data descriptor of a");
    bad[dd + 4] ^= 1;
    let e = open(&bad, Limits::default()).unwrap_err();
    assert!(
        matches!(
            e,
            rsagg_dump::Error::HeaderMismatch {
                field: "data descriptor CRC-32",
                ..
            }
        ),
        "{e}"
    );
}

/// ZIP64 extra fields in local headers and central records (forced for small files).
#[test]
fn zip64_extra_fields() {
    let a = noise(5_000, 22);
    let mut w = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .large_file(true);
    w.start_file("manifest.xml", opts).unwrap();
    w.write_all(manifest_for(&["a"]).as_bytes()).unwrap();
    w.start_file("a", opts).unwrap();
    w.write_all(&a).unwrap();
    let zip = w.finish().unwrap().into_inner();
    let l = local_header(&zip, "a");
    assert_eq!(
        get_u32(&zip, l + 18),
        0xFFFF_FFFF,
        "no ZIP64 sizes in the local header"
    );
    read_back(&zip, &[&a]);
}

#[test]
fn stored_entries_and_directories() {
    let a = noise(3_000, 23);
    let zip = zip_bytes(&[
        Item {
            name: "d/",
            data: b"",
            kind: Kind::Dir,
        },
        stored("manifest.xml", manifest_for(&["d/a", "e"]).as_bytes()),
        stored("d/a", &a),
        stored("e", b""),
    ]);
    read_back(&zip, &[&a, b""]);
}

/// The manifest as the reference implementation (`resync` 2.x, `Dump.write_zip`) writes it:
/// `path` without the leading slash, no `at`, single-quoted XML declaration. Lenient reading
/// takes it with warnings; the paths resolve.
#[test]
fn manifest_written_by_resync() {
    let manifest = "<?xml version='1.0' encoding='utf-8'?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\"><rs:md capability=\"resourcedump-manifest\" /><url><loc>http://example.com/a.txt</loc><lastmod>2013-01-01T00:00:00Z</lastmod><rs:md length=\"5\" path=\"a.txt\" /></url><url><loc>http://example.com/b.txt</loc><lastmod>2013-01-01T00:00:00Z</lastmod><rs:md length=\"9\" path=\"b.txt\" /></url></urlset>";
    let zip = zip_bytes(&[
        stored("manifest.xml", manifest.as_bytes()),
        stored("a.txt", b"alpha"),
        stored("b.txt", b"beta beta"),
    ]);
    let mut p = open(&zip, Limits::default()).unwrap();
    assert!(
        p.problems()
            .iter()
            .all(|x| x.severity == rsagg_model::Severity::Warning),
        "{:?}",
        p.problems()
    );
    assert!(
        p.problems().iter().any(|x| x.code == "path-leading-slash"),
        "{:?}",
        p.problems()
    );
    assert_eq!(p.entries()[1].path.as_deref(), Some("b.txt"));
    let mut got = String::new();
    p.open_item(1).unwrap().read_to_string(&mut got).unwrap();
    assert_eq!(got, "beta beta");
}
