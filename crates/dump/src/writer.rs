//! [`PackageWriter`]: writing a package for republishing (spec 11.2, 13.2).
//!
//! Files are streamed in first (deflated, or stored where deflating does not pay; regular
//! files, mode 0644, fixed timestamps so the same input gives the same bytes), `manifest.xml`
//! is written last, when the entries are known. The ZIP goes through a buffer that seeks
//! without writing out ([`SeekBuf`]): the `zip` crate writes a file's local header, data and
//! sizes in many small pieces and seeks back to each header, and a package of many small
//! files would otherwise cost several system calls per file. The writer holds rsagg's own
//! output to the strict rules: every manifest entry must pass strict validation, every
//! `path` must name a file added, and every file added must be named by an entry, so
//! whatever it writes [`crate::Package::open`] accepts without problems.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};

use rsagg_model::{
    Change, DocumentKind, EntrySpans, HashAlgorithm, HeaderSpans, Mode, Pos, Root, Severity,
    UrlEntry, Validator,
};
use rsagg_sitemap::writer::{encode_entry, encode_header};
use rsagg_sitemap::{ReadOptions, SyncReader};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::Error;
use crate::names::{normalise_path, unsafe_reason};
use crate::seekbuf::SeekBuf;
use crate::structure::MANIFEST;

const FLUSH_AT: usize = 256 * 1024;
/// The ZIP's write buffer.
const ZIP_BUFFER: usize = 256 * 1024;
/// Bodies shorter than this are stored: deflate's block overhead leaves nothing to gain.
const DEFLATE_MIN: usize = 64;
/// The deflate level. Level 2 is zlib-rs's fastest with dynamic Huffman codes (greedy
/// matching, short hash chains): on the harvest benchmark's 10,000 resources of 1 KB (random
/// letters) it made a ZIP within 0.5% of the default level's (6) size, deflating in about
/// half the time. Level 1 is faster still but codes with the fixed Huffman table, which made
/// that ZIP 50% larger.
const DEFLATE_LEVEL: i64 = 2;

/// How a file's bytes go into the package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Deflated (method 8).
    Deflated,
    /// Stored as they are (method 0).
    Stored,
}

impl Compression {
    /// The method for a body that begins with `head` (its first bytes, at least 16 where the
    /// body has them) and is `length` bytes long: stored when deflating cannot pay (tiny
    /// bodies, and formats that are compressed already, recognised by their signature:
    /// archives, compressed streams, images, audio and video), else deflated. Deflating
    /// compressed data burns CPU for a slightly larger result.
    pub fn for_body(head: &[u8], length: u64) -> Compression {
        if length < DEFLATE_MIN as u64 || compressed_signature(head) {
            Compression::Stored
        } else {
            Compression::Deflated
        }
    }

    fn method(self) -> CompressionMethod {
        match self {
            Compression::Deflated => CompressionMethod::Deflated,
            Compression::Stored => CompressionMethod::Stored,
        }
    }
}

/// Whether `head` starts like a format that is already compressed.
fn compressed_signature(head: &[u8]) -> bool {
    const PREFIXES: &[&[u8]] = &[
        b"PK\x03\x04",           // ZIP (and docx, epub, jar, odt)
        b"\x1f\x8b",             // gzip
        b"BZh",                  // bzip2
        b"\xfd7zXZ\x00",         // xz
        b"\x28\xb5\x2f\xfd",     // zstd
        b"7z\xbc\xaf\x27\x1c",   // 7-Zip
        b"\x89PNG",              // PNG
        b"\xff\xd8\xff",         // JPEG
        b"GIF8",                 // GIF
        b"\x00\x00\x00\x0cjP  ", // JPEG 2000
        b"\xff\x4f\xff\x51",     // JPEG 2000 codestream
        b"OggS",                 // Ogg
        b"fLaC",                 // FLAC
        b"ID3",                  // MP3
        b"\x1a\x45\xdf\xa3",     // Matroska, WebM
    ];
    PREFIXES.iter().any(|p| head.starts_with(p))
        // RIFF containers that hold compressed data (WebP; WAV and AVI often do not).
        || (head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP"))
        // ISO base media (MP4, MOV, HEIC, AVIF): a box of type `ftyp` first.
        || head.get(4..8) == Some(b"ftyp")
}

/// What a [`CopySource`] reads: a file, or bytes in memory (`std::io::Cursor`).
pub trait ReadSeek: Read + io::Seek + Send {}

impl<T: Read + io::Seek + Send> ReadSeek for T {}

/// A package, written by [`PackageWriter`] and published before, whose entries a new package
/// copies without recompressing them ([`PackageWriter::copy_entry`]).
pub struct CopySource {
    zip: zip::ZipArchive<Box<dyn ReadSeek>>,
    name: String,
}

impl std::fmt::Debug for CopySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopySource")
            .field("name", &self.name)
            .field("entries", &self.zip.len())
            .finish()
    }
}

impl CopySource {
    /// Opens `package` (its central directory read; `name` for errors). Meant for rsagg's
    /// own packages, checked by the caller (see [`PackageWriter::copy_entry`]); an
    /// upstream's package goes through [`crate::Package::open`] instead. Each seek of a copy
    /// reads anew, so give it bytes in memory, or a buffered file.
    pub fn open(package: impl ReadSeek + 'static, name: &str) -> Result<CopySource, Error> {
        let package: Box<dyn ReadSeek> = Box::new(package);
        let zip = zip::ZipArchive::new(package)
            .map_err(|e| zip_io(name, "reading the central directory to copy from it", e))?;
        Ok(CopySource {
            zip,
            name: name.to_owned(),
        })
    }

    /// The bitstreams the package's `manifest.xml` names, as (ZIP entry name, SHA-256 in
    /// lowercase hex): each entry with a `path` naming a file of the package and a `sha-256`
    /// hash (rsagg writes both for every bitstream). The manifest is read leniently: the
    /// package is one rsagg wrote, checked by the caller.
    pub fn digests(&mut self) -> Result<Vec<(String, String)>, Error> {
        let name = self.name.clone();
        let manifest = self
            .zip
            .by_name(MANIFEST)
            .map_err(|e| zip_io(&name, "opening manifest.xml", e))?;
        let opts = ReadOptions::new(Mode::Lenient, format!("{name} manifest.xml"));
        let invalid = |e: rsagg_sitemap::Error| Error::Invalid {
            package: name.clone(),
            section: "11.2",
            message: format!("manifest.xml: {e}"),
        };
        let mut reader = SyncReader::open(io::BufReader::new(manifest), opts).map_err(invalid)?;
        let mut named = Vec::new();
        while let Some(e) = reader.next_entry().map_err(invalid)? {
            let Some(md) = e.md else { continue };
            let (Some(path), Some(hashes)) = (md.path, md.hash) else {
                continue;
            };
            if let Some(h) = hashes.get(&HashAlgorithm::Sha256) {
                named.push((normalise_path(&path).to_owned(), h.digest.clone()));
            }
        }
        drop(reader);
        named.retain(|(path, _)| self.zip.index_for_name(path).is_some());
        Ok(named)
    }
}

fn zip_io(package: &str, context: &str, e: zip::result::ZipError) -> Error {
    Error::Io {
        package: package.to_owned(),
        context: context.to_owned(),
        source: match e {
            zip::result::ZipError::Io(io) => io,
            other => io::Error::other(other),
        },
    }
}

/// Writes a package (used later to republish dumps): files streamed in, manifest.xml written
/// at finish.
pub struct PackageWriter {
    zip: ZipWriter<SeekBuf>,
    name: String,
    files: HashSet<String>,
    /// Set when an `add` failed half-way: the ZIP then holds a partial entry, so the package
    /// must not be finished.
    broken: bool,
}

impl std::fmt::Debug for PackageWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackageWriter")
            .field("name", &self.name)
            .field("files", &self.files.len())
            .finish()
    }
}

fn options(compression: Compression) -> SimpleFileOptions {
    let options = SimpleFileOptions::default()
        .compression_method(compression.method())
        .unix_permissions(0o644);
    match compression {
        Compression::Deflated => options.compression_level(Some(DEFLATE_LEVEL)),
        Compression::Stored => options,
    }
}

impl PackageWriter {
    /// A writer into `file`, which must be empty (freshly created or truncated): the ZIP is
    /// written from its current position and nothing after it is removed.
    pub fn new(file: File) -> Self {
        Self::with_name(file, "<new package>")
    }

    /// Like [`PackageWriter::new`], with a name for error messages.
    pub fn with_name(file: File, name: &str) -> Self {
        PackageWriter {
            zip: ZipWriter::new(SeekBuf::new(file, ZIP_BUFFER)).set_auto_large_file(),
            name: name.to_owned(),
            files: HashSet::new(),
            broken: false,
        }
    }

    fn invalid(&self, section: &'static str, message: String) -> Error {
        Error::Invalid {
            package: self.name.clone(),
            section,
            message,
        }
    }

    fn zip_error(&self, context: String, e: zip::result::ZipError) -> Error {
        zip_io(&self.name, &context, e)
    }

    /// Adds one file at `path` (leading '/' as in rs:md path; stored without it), copying
    /// from `body`; returns bytes written.
    ///
    /// `path` must be a safe relative name (no `..`, `.` or empty components, backslashes,
    /// NUL, drive letters), must not repeat, and must not be `/manifest.xml`; such a refusal
    /// leaves the writer usable. When reading `body` or writing fails, the package holds a
    /// partial file and every later call fails.
    pub fn add(&mut self, path: &str, body: &mut dyn Read) -> Result<u64, Error> {
        self.add_with(path, body, Compression::Deflated)
    }

    /// Like [`PackageWriter::add`] for a body in memory, deflated or stored as
    /// [`Compression::for_body`] says.
    pub fn add_bytes(&mut self, path: &str, body: &[u8]) -> Result<u64, Error> {
        let compression = Compression::for_body(body, body.len() as u64);
        self.add_with(path, &mut &body[..], compression)
    }

    /// Like [`PackageWriter::add`], with the given compression.
    pub fn add_with(
        &mut self,
        path: &str,
        body: &mut dyn Read,
        compression: Compression,
    ) -> Result<u64, Error> {
        let name = self.admit(path)?;
        self.broken = true;
        self.zip
            .start_file(name, options(compression))
            .map_err(|e| self.zip_error(format!("starting `{name}`"), e))?;
        let n = io::copy(body, &mut self.zip).map_err(|source| Error::Io {
            package: self.name.clone(),
            context: format!("writing `{name}`"),
            source,
        })?;
        self.broken = false;
        self.files.insert(name.to_owned());
        Ok(n)
    }

    /// Adds one file at `path` (as [`PackageWriter::add`] names it) whose data is copied as
    /// it is, still compressed, from the entry `entry` of `from`: no inflating, no deflating.
    /// A rebuilt dump takes the bitstreams its previous generation already holds this way
    /// (see [`CopySource`]). Returns the bytes of the bitstream (inflated).
    ///
    /// The copy carries the entry's CRC-32 and sizes, so what it holds is what `from` holds:
    /// the caller vouches for `from` (rsagg checks a whole package's SHA-256 against what it
    /// published before copying from it). Refusals are those of [`PackageWriter::add`], plus
    /// an `entry` `from` does not have; they leave the writer usable.
    pub fn copy_entry(
        &mut self,
        path: &str,
        from: &mut CopySource,
        entry: &str,
    ) -> Result<u64, Error> {
        let name = self.admit(path)?;
        let file = from
            .zip
            .by_name_raw(entry.as_bytes())
            .map_err(|e| zip_io(&from.name, &format!("reading `{entry}` to copy it"), e))?;
        let size = file.size();
        self.broken = true;
        self.zip
            .raw_copy_file_rename(file, name)
            .map_err(|e| self.zip_error(format!("copying `{name}` from {}", from.name), e))?;
        self.broken = false;
        self.files.insert(name.to_owned());
        Ok(size)
    }

    /// `path` as a ZIP entry name when the package can take it: a safe name, not the
    /// manifest's, not there yet, and the writer not broken.
    fn admit<'p>(&self, path: &'p str) -> Result<&'p str, Error> {
        let name = normalise_path(path);
        if let Some(reason) = unsafe_reason(name) {
            return Err(Error::UnsafeName {
                package: self.name.clone(),
                entry: path.to_owned(),
                reason,
            });
        }
        if name == MANIFEST {
            return Err(self.invalid("11.2", format!("`{path}` is reserved for the manifest")));
        }
        if self.files.contains(name) {
            return Err(Error::Duplicate {
                package: self.name.clone(),
                entry: name.to_owned(),
            });
        }
        self.check_not_broken()?;
        Ok(name)
    }

    /// Writes manifest.xml (via rsagg_sitemap's DocumentWriter/encode functions; header +
    /// entries) and finishes the ZIP.
    ///
    /// `header` must be a Resource Dump Manifest or Change Dump Manifest header. The manifest
    /// is validated in strict mode as it is written; the first error fails the package
    /// ([`Error::Invalid`]), as does a `path` (of an `<rs:md>` or `<rs:ln>`) naming no file
    /// added, or a file added that no entry names. On error the file holds an incomplete
    /// package and must be discarded.
    pub fn finish(
        self,
        header: &rsagg_model::Header,
        entries: &mut dyn Iterator<Item = UrlEntry>,
    ) -> Result<File, Error> {
        self.finish_inner(header, entries, None)
    }

    /// Like [`PackageWriter::finish`], and writes the same `manifest.xml` bytes to `copy` as
    /// well: a Source that links a copy of the manifest from its dump (`rs:ln
    /// rel="contents"`) must make sure it matches the one in the package (spec 11.1, 13.1),
    /// and one encoding written twice is the way to be sure. On error `copy` holds an
    /// incomplete manifest, to be discarded with the package.
    pub fn finish_with_copy(
        self,
        header: &rsagg_model::Header,
        entries: &mut dyn Iterator<Item = UrlEntry>,
        copy: &mut dyn Write,
    ) -> Result<File, Error> {
        self.finish_inner(header, entries, Some(copy))
    }

    fn finish_inner(
        mut self,
        header: &rsagg_model::Header,
        entries: &mut dyn Iterator<Item = UrlEntry>,
        mut copy: Option<&mut dyn Write>,
    ) -> Result<File, Error> {
        self.check_not_broken()?;
        let kind = header.kind();
        if !matches!(
            kind,
            DocumentKind::ResourceDumpManifest | DocumentKind::ChangeDumpManifest
        ) {
            return Err(self.invalid(
                "11.2, 13.2",
                format!(
                    "the manifest header is a {}, not a Resource Dump Manifest or Change Dump Manifest",
                    kind.name()
                ),
            ));
        }
        let section = kind.section();
        self.zip
            .start_file(MANIFEST, options(Compression::Deflated))
            .map_err(|e| self.zip_error("starting manifest.xml".into(), e))?;
        let mut validator = Validator::new(Mode::Strict);
        validator.header(header, &HeaderSpans::default());
        let mut buf = Vec::with_capacity(FLUSH_AT * 2);
        encode_header(header, &mut buf);
        let mut bytes = 0u64;
        let mut named = HashSet::new();
        for (i, e) in entries.enumerate() {
            validator.begin_entry(i as u64);
            validator.entry(&e, &EntrySpans::default());
            let md = e.md.as_ref();
            let deleted = md.is_some_and(|m| m.change == Some(Change::Deleted));
            let paths = md
                .and_then(|m| m.path.as_deref())
                .into_iter()
                .chain(e.links.iter().filter_map(|l| l.path.as_deref()));
            for p in paths {
                let key = normalise_path(p);
                if self.files.contains(key) {
                    named.insert(key.to_owned());
                } else if !deleted {
                    return Err(self.invalid(
                        section,
                        format!("entry {i} ({}): `path` `{p}` names no file added", e.loc),
                    ));
                }
            }
            encode_entry(Root::Urlset, &e, &mut buf);
            if buf.len() >= FLUSH_AT {
                self.write_manifest(&buf, &mut copy)?;
                bytes += buf.len() as u64;
                buf.clear();
            }
        }
        buf.extend_from_slice(b"</urlset>\n");
        self.write_manifest(&buf, &mut copy)?;
        bytes += buf.len() as u64;
        validator.finish(Pos::default(), bytes);
        if validator.errors() > 0 {
            let first = validator
                .problems()
                .iter()
                .find(|p| p.severity == Severity::Error);
            return Err(match first {
                Some(p) => {
                    let at = p.entry.map(|e| format!(" (entry {e})")).unwrap_or_default();
                    self.invalid(
                        p.section,
                        format!(
                            "manifest.xml fails strict validation: {}{at}: {}",
                            p.code, p.message
                        ),
                    )
                }
                None => self.invalid(
                    section,
                    format!(
                        "manifest.xml fails strict validation with {} errors",
                        validator.errors()
                    ),
                ),
            });
        }
        if let Some(unlisted) = self.files.iter().find(|f| !named.contains(*f)) {
            return Err(self.invalid(
                section,
                format!("`/{unlisted}` was added but no manifest entry names it"),
            ));
        }
        let name = self.name.clone();
        let finishing = |source| Error::Io {
            package: name.clone(),
            context: "finishing the ZIP".into(),
            source,
        };
        let buffered = self.zip.finish().map_err(|e| {
            finishing(match e {
                zip::result::ZipError::Io(io) => io,
                other => io::Error::other(other),
            })
        })?;
        buffered.into_inner().map_err(finishing)
    }

    fn check_not_broken(&self) -> Result<(), Error> {
        if self.broken {
            return Err(self.invalid(
                "11.2, 13.2",
                "an earlier `add` failed half-way; the package holds a partial file".to_owned(),
            ));
        }
        Ok(())
    }

    fn write_manifest(
        &mut self,
        buf: &[u8],
        copy: &mut Option<&mut dyn Write>,
    ) -> Result<(), Error> {
        self.zip.write_all(buf).map_err(|source| Error::Io {
            package: self.name.clone(),
            context: "writing manifest.xml".into(),
            source,
        })?;
        if let Some(copy) = copy {
            copy.write_all(buf).map_err(|source| Error::Io {
                package: self.name.clone(),
                context: "writing the copy of manifest.xml".into(),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek};

    use rsagg_model::{Capability, Header, Link, Md, W3cDateTime};

    use super::*;

    /// A Resource Dump manifest header as spec 11.2 shows it.
    fn manifest_header() -> Header {
        let mut header = Header::new(Root::Urlset, Capability::ResourceDumpManifest);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(W3cDateTime::parse("2013-01-03T09:00:00Z").unwrap().value);
        }
        header
            .links
            .push(Link::new("up", "http://example.com/capabilitylist.xml"));
        header
    }

    #[test]
    fn deflate_is_skipped_where_it_cannot_pay_and_either_way_the_package_reads_back() {
        use crate::{Limits, Package};
        let text = b"a resource of plain text, long enough to be worth deflating. ".repeat(4);
        let mut jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF".to_vec();
        jpeg.resize(300, 7);
        let mut mp4 = b"\x00\x00\x00\x18ftypmp42".to_vec();
        mp4.resize(300, 9);
        assert_eq!(
            Compression::for_body(&text, text.len() as u64),
            Compression::Deflated
        );
        assert_eq!(Compression::for_body(b"tiny", 4), Compression::Stored);
        assert_eq!(Compression::for_body(&jpeg, 300), Compression::Stored);
        assert_eq!(Compression::for_body(&mp4, 300), Compression::Stored);
        assert_eq!(
            Compression::for_body(b"RIFF\x00\x00\x00\x00WAVEfmt ", 300),
            Compression::Deflated
        );

        let header = manifest_header();
        let bodies: [(&str, &[u8]); 3] = [("/t", &text), ("/j", &jpeg), ("/s", b"tiny")];
        let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
        for (path, body) in bodies {
            w.add_bytes(path, body).unwrap();
        }
        let entries = bodies.map(|(path, body)| UrlEntry {
            loc: format!("http://example.com{path}"),
            md: Some(Md {
                path: Some(path.into()),
                length: Some(body.len() as u64),
                ..Md::default()
            }),
            ..UrlEntry::default()
        });
        let mut file = w.finish(&header, &mut entries.into_iter()).unwrap();
        file.rewind().unwrap();
        let mut zip = zip::ZipArchive::new(&mut file).unwrap();
        let methods: Vec<_> = ["t", "j", "s"]
            .iter()
            .map(|n| zip.by_name(n).unwrap().compression())
            .collect();
        assert_eq!(
            methods,
            [
                CompressionMethod::Deflated,
                CompressionMethod::Stored,
                CompressionMethod::Stored
            ]
        );
        file.rewind().unwrap();
        let mut package = Package::open(file, "p.zip", Limits::default()).unwrap();
        assert!(package.problems().is_empty(), "{:?}", package.problems());
        for (i, (_, body)) in bodies.iter().enumerate() {
            let mut back = Vec::new();
            package
                .open_item(i)
                .unwrap()
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(&back, body);
        }
    }

    /// A package of `bodies` (each entry named by its path), as `add_bytes` writes it.
    fn package_of(bodies: &[(&str, &[u8])]) -> File {
        let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
        for (path, body) in bodies {
            w.add_bytes(path, body).unwrap();
        }
        let mut file = w.finish(&manifest_header(), &mut entries(bodies)).unwrap();
        file.rewind().unwrap();
        file
    }

    /// Manifest entries of `bodies`, each with a made-up SHA-256 ([`digest_of`]).
    fn entries(bodies: &[(&str, &[u8])]) -> impl Iterator<Item = UrlEntry> {
        let entries: Vec<UrlEntry> = bodies
            .iter()
            .map(|(path, body)| UrlEntry {
                loc: format!("http://example.com{path}"),
                md: Some(Md {
                    path: Some((*path).into()),
                    length: Some(body.len() as u64),
                    hash: Some(rsagg_model::Hashes(vec![rsagg_model::HashValue {
                        algorithm: HashAlgorithm::Sha256,
                        digest: digest_of(body),
                    }])),
                    ..Md::default()
                }),
                ..UrlEntry::default()
            })
            .collect();
        entries.into_iter()
    }

    /// A well-formed SHA-256 value standing for `body` (its length, repeated).
    fn digest_of(body: &[u8]) -> String {
        format!("{:02x}", body.len() % 256).repeat(32)
    }

    #[test]
    fn an_entry_copied_from_another_package_is_the_entry_written_afresh() {
        let text = b"a resource of plain text, long enough to be worth deflating. ".repeat(8);
        let old: [(&str, &[u8]); 3] = [("/a", &text), ("/b", b"tiny"), ("/gone", b"old bytes")];
        let mut from = CopySource::open(io::BufReader::new(package_of(&old)), "old.zip").unwrap();
        let digests: Vec<(String, String)> = old
            .iter()
            .map(|(path, body)| (path[1..].to_owned(), digest_of(body)))
            .collect();
        assert_eq!(from.digests().unwrap(), digests);

        // The new package: `a` and `b` copied (`b` under a new name), `c` added.
        let new: [(&str, &[u8]); 3] = [("/a", &text), ("/b2", b"tiny"), ("/c", b"new")];
        let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
        assert_eq!(
            w.copy_entry("/a", &mut from, "a").unwrap(),
            text.len() as u64
        );
        assert_eq!(w.copy_entry("/b2", &mut from, "b").unwrap(), 4);
        // Refusals leave the writer usable: a name already there, one the source lacks.
        assert!(matches!(
            w.copy_entry("/a", &mut from, "a"),
            Err(Error::Duplicate { .. })
        ));
        assert!(matches!(
            w.copy_entry("/x", &mut from, "no-such-entry"),
            Err(Error::Io { .. })
        ));
        w.add_bytes("/c", b"new").unwrap();
        let mut copied = w.finish(&manifest_header(), &mut entries(&new)).unwrap();
        copied.rewind().unwrap();

        // Byte for byte what a writer given every body makes.
        let mut fresh = package_of(&new);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        copied.read_to_end(&mut a).unwrap();
        fresh.read_to_end(&mut b).unwrap();
        assert_eq!(a, b);
        // And it reads back, every CRC checked.
        copied.rewind().unwrap();
        let mut package =
            crate::Package::open(copied, "new.zip", crate::Limits::default()).unwrap();
        assert!(package.problems().is_empty(), "{:?}", package.problems());
        for (i, (_, body)) in new.iter().enumerate() {
            let mut back = Vec::new();
            package
                .open_item(i)
                .unwrap()
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(&back, body);
        }
    }

    #[test]
    fn the_manifest_copy_is_byte_identical_to_the_manifest_in_the_package() {
        let header = manifest_header();
        let mut w = PackageWriter::new(tempfile::tempfile().unwrap());
        // Enough entries that the manifest is flushed in several pieces.
        let n = 3000;
        for i in 0..n {
            w.add(&format!("/r/{i}"), &mut &b"x"[..]).unwrap();
        }
        let mut entries = (0..n).map(|i| UrlEntry {
            loc: format!("http://example.com/a-rather-long-uri-to-fill-the-buffer/{i}"),
            md: Some(Md {
                path: Some(format!("/r/{i}")),
                length: Some(1),
                mime_type: Some("text/plain".into()),
                ..Md::default()
            }),
            ..UrlEntry::default()
        });
        let mut copy = Vec::new();
        let mut file = w
            .finish_with_copy(&header, &mut entries, &mut copy)
            .unwrap();
        assert!(copy.len() > FLUSH_AT, "{} bytes", copy.len());
        file.rewind().unwrap();
        let mut zip = zip::ZipArchive::new(file).unwrap();
        let mut inside = Vec::new();
        zip.by_name(MANIFEST)
            .unwrap()
            .read_to_end(&mut inside)
            .unwrap();
        assert!(inside == copy, "the copy differs from manifest.xml");
    }
}
