//! Shared helpers: real ZIP files built with the `zip` crate's writer, byte patches for the
//! malicious ones, manifests written as XML text.
#![allow(dead_code)]

use std::io::{Cursor, Read, Seek, SeekFrom, Write};

use rsagg_dump::{Error, Limits, Package};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// How an entry of a test ZIP is written.
#[derive(Clone, Copy)]
pub enum Kind {
    Stored,
    Deflated,
    Symlink,
    Dir,
}

/// One entry of a test ZIP.
pub struct Item<'a> {
    pub name: &'a str,
    pub data: &'a [u8],
    pub kind: Kind,
}

pub fn deflated<'a>(name: &'a str, data: &'a [u8]) -> Item<'a> {
    Item {
        name,
        data,
        kind: Kind::Deflated,
    }
}

pub fn stored<'a>(name: &'a str, data: &'a [u8]) -> Item<'a> {
    Item {
        name,
        data,
        kind: Kind::Stored,
    }
}

/// A ZIP with `items` in order, written by the `zip` crate.
pub fn zip_bytes(items: &[Item<'_>]) -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    for it in items {
        let opts = SimpleFileOptions::default().unix_permissions(0o644);
        match it.kind {
            Kind::Stored => {
                w.start_file(it.name, opts.compression_method(CompressionMethod::Stored))
                    .unwrap();
                w.write_all(it.data).unwrap();
            }
            Kind::Deflated => {
                w.start_file(
                    it.name,
                    opts.compression_method(CompressionMethod::Deflated),
                )
                .unwrap();
                w.write_all(it.data).unwrap();
            }
            Kind::Symlink => {
                w.add_symlink(
                    it.name,
                    std::str::from_utf8(it.data).unwrap(),
                    SimpleFileOptions::default(),
                )
                .unwrap();
            }
            Kind::Dir => w
                .add_directory(it.name, SimpleFileOptions::default())
                .unwrap(),
        }
    }
    w.finish().unwrap().into_inner()
}

pub const AT: &str = "2013-01-03T09:00:00Z";

/// A Resource Dump Manifest naming `(loc, path, length)` entries.
pub fn rd_manifest(entries: &[(&str, &str)]) -> String {
    let mut s = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="http://example.com/dataset1/capabilitylist.xml"/>
  <rs:md capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"/>
"#,
    );
    for (loc, path) in entries {
        s.push_str(&format!(
            "  <url><loc>{loc}</loc><rs:md type=\"text/plain\" path=\"{path}\"/></url>\n"
        ));
    }
    s.push_str("</urlset>\n");
    s
}

/// Writes `bytes` to a temporary file and opens it as a package named `name`.
pub fn open(bytes: &[u8], limits: Limits) -> Result<Package, Error> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(bytes).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    Package::open(f, "test.zip", limits)
}

/// A package holding `manifest.xml` for `files` (each named `/name`) plus `files`.
pub fn package_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
    let entries: Vec<(String, String)> = files
        .iter()
        .map(|(n, _)| (format!("http://example.com/{n}"), format!("/{n}")))
        .collect();
    let refs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let manifest = rd_manifest(&refs);
    let mut items = vec![deflated("manifest.xml", manifest.as_bytes())];
    items.extend(files.iter().map(|(n, d)| deflated(n, d)));
    zip_bytes(&items)
}

fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// Offset of the local header of entry `name`.
pub fn local_header(zip: &[u8], name: &str) -> usize {
    find_all(zip, b"PK\x03\x04")
        .into_iter()
        .find(|&i| {
            let n = u16::from_le_bytes([zip[i + 26], zip[i + 27]]) as usize;
            zip.get(i + 30..i + 30 + n) == Some(name.as_bytes())
        })
        .unwrap_or_else(|| panic!("no local header for {name}"))
}

/// Offset of the central directory record of entry `name`.
pub fn central_record(zip: &[u8], name: &str) -> usize {
    find_all(zip, b"PK\x01\x02")
        .into_iter()
        .find(|&i| {
            let n = u16::from_le_bytes([zip[i + 28], zip[i + 29]]) as usize;
            zip.get(i + 46..i + 46 + n) == Some(name.as_bytes())
        })
        .unwrap_or_else(|| panic!("no central record for {name}"))
}

pub fn put_u16(zip: &mut [u8], at: usize, v: u16) {
    zip[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u32(zip: &mut [u8], at: usize, v: u32) {
    zip[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn get_u32(zip: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([zip[at], zip[at + 1], zip[at + 2], zip[at + 3]])
}

/// Renames entry `from` to `to` (same length) in its local header and central record.
pub fn rename(zip: &mut [u8], from: &str, to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let l = local_header(zip, from);
    let c = central_record(zip, from);
    zip[l + 30..l + 30 + to.len()].copy_from_slice(to);
    zip[c + 46..c + 46 + to.len()].copy_from_slice(to);
}

/// Sets the declared uncompressed size of `name` in both headers (a consistent lie).
pub fn set_declared_size(zip: &mut [u8], name: &str, size: u32) {
    let l = local_header(zip, name);
    let c = central_record(zip, name);
    put_u32(zip, l + 22, size);
    put_u32(zip, c + 24, size);
}

/// Offset of the data of `name`.
pub fn data_offset(zip: &[u8], name: &str) -> usize {
    let l = local_header(zip, name);
    let n = u16::from_le_bytes([zip[l + 26], zip[l + 27]]) as usize;
    let m = u16::from_le_bytes([zip[l + 28], zip[l + 29]]) as usize;
    l + 30 + n + m
}

/// What reading an item to its end gave: the bytes returned and the error that stopped it.
pub fn read_all(r: &mut dyn Read, chunk: usize) -> (Vec<u8>, Option<std::io::Error>) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// The crate error inside a reader's `io::Error`.
pub fn inner(e: &std::io::Error) -> &Error {
    Error::from_io(e).unwrap_or_else(|| panic!("not a crate error: {e}"))
}

/// Deterministic bytes that do not compress (xorshift).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
