//! [`PackageWriter`]: writing a package for republishing (spec 11.2, 13.2).
//!
//! Files are streamed in first (deflated, regular files, mode 0644, fixed timestamps so the
//! same input gives the same bytes), `manifest.xml` is written last, when the entries are
//! known. The writer holds rsagg's own output to the strict rules: every manifest entry must
//! pass strict validation, every `path` must name a file added, and every file added must be
//! named by an entry, so whatever it writes [`crate::Package::open`] accepts without
//! problems.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};

use rsagg_model::{
    Change, DocumentKind, EntrySpans, HeaderSpans, Mode, Pos, Root, Severity, UrlEntry, Validator,
};
use rsagg_sitemap::writer::{encode_entry, encode_header};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::Error;
use crate::names::{normalise_path, unsafe_reason};
use crate::structure::MANIFEST;

const FLUSH_AT: usize = 256 * 1024;

/// Writes a package (used later to republish dumps): files streamed in, manifest.xml written
/// at finish.
pub struct PackageWriter {
    zip: ZipWriter<File>,
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

fn options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .unix_permissions(0o644)
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
            zip: ZipWriter::new(file).set_auto_large_file(),
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
        let source = match e {
            zip::result::ZipError::Io(io) => io,
            other => io::Error::other(other),
        };
        Error::Io {
            package: self.name.clone(),
            context,
            source,
        }
    }

    /// Adds one file at `path` (leading '/' as in rs:md path; stored without it), copying
    /// from `body`; returns bytes written.
    ///
    /// `path` must be a safe relative name (no `..`, `.` or empty components, backslashes,
    /// NUL, drive letters), must not repeat, and must not be `/manifest.xml`; such a refusal
    /// leaves the writer usable. When reading `body` or writing fails, the package holds a
    /// partial file and every later call fails.
    pub fn add(&mut self, path: &str, body: &mut dyn Read) -> Result<u64, Error> {
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
        self.broken = true;
        self.zip
            .start_file(name, options())
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
            .start_file(MANIFEST, options())
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
        self.zip.finish().map_err(|e| {
            let source = match e {
                zip::result::ZipError::Io(io) => io,
                other => io::Error::other(other),
            };
            Error::Io {
                package: name,
                context: "finishing the ZIP".into(),
                source,
            }
        })
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

    #[test]
    fn the_manifest_copy_is_byte_identical_to_the_manifest_in_the_package() {
        let mut header = Header::new(Root::Urlset, Capability::ResourceDumpManifest);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(W3cDateTime::parse("2013-01-03T09:00:00Z").unwrap().value);
        }
        header
            .links
            .push(Link::new("up", "http://example.com/capabilitylist.xml"));
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
