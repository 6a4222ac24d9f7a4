//! [`Package`]: reading one ZIP package of a Resource Dump (spec 11.1, 11.2) or Change Dump
//! (13.1, 13.2).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};

use rsagg_model::{Change, DocumentKind, Header, Mode, Problem, Rule, Severity, UrlEntry};
use rsagg_sitemap::{ReadOptions, SyncReader};

use crate::item::ItemReader;
use crate::names::normalise_path;
use crate::structure::{self, FileInfo, MANIFEST};
use crate::{Error, Limits};

/// Problems of the package itself (beyond those of the manifest's reader) kept; more are
/// counted in one summary problem.
const MAX_PACKAGE_PROBLEMS: usize = 1000;

/// One entry of the manifest and where its bitstream is.
#[derive(Clone, Debug)]
pub struct ManifestItem {
    /// The manifest entry (`<loc>`, `<lastmod>`, `<rs:md>` with `path`, `hash`, `length`,
    /// `change`…, `<rs:ln>`s).
    pub entry: UrlEntry,
    /// The entry's `rs:md` `path` with the leading `/` stripped: the ZIP entry name it is
    /// looked up by. `None` when the entry has no `path`.
    pub path: Option<String>,
    /// Index of the ZIP entry holding the bitstream. `None` for a Change Dump deletion (no
    /// bitstream, spec 13.2), and for an entry whose `path` is missing or names no file
    /// (reported in [`Package::problems`]).
    pub zip_index: Option<usize>,
}

impl ManifestItem {
    /// True for a `change="deleted"` entry of a Change Dump Manifest.
    pub fn is_deletion(&self) -> bool {
        self.entry
            .md
            .as_ref()
            .is_some_and(|m| m.change == Some(Change::Deleted))
    }
}

/// One ZIP package of a Resource Dump or Change Dump, opened from a local file the caller
/// downloaded.
///
/// [`Package::open`] checks everything before a single byte of an item is handed out: the ZIP
/// structure (names, types, encryption, methods, central directory against local headers,
/// overlaps, declared sizes against [`Limits`]) and `manifest.xml` (read in lenient mode,
/// streaming, within [`Limits::max_manifest_bytes`]). A package that fails any of these is
/// refused as a whole, so it never yields bytes. What is wrong with single manifest entries
/// (a `path` naming no file, a `length` that disagrees with the ZIP) or harmless (files the
/// manifest does not name) is reported in [`Package::problems`] instead, so the rest of an
/// upstream's package can still be used.
pub struct Package {
    file: File,
    name: String,
    limits: Limits,
    header: Header,
    kind: DocumentKind,
    items: Vec<ManifestItem>,
    files: Vec<FileInfo>,
    problems: Vec<Problem>,
    inflated: u64,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("items", &self.items.len())
            .field("files", &self.files.len())
            .field("problems", &self.problems.len())
            .finish()
    }
}

struct Problems {
    kept: Vec<Problem>,
    omitted: u64,
}

impl Problems {
    fn push(
        &mut self,
        severity: Severity,
        rule: Rule,
        section: &'static str,
        code: &'static str,
        entry: Option<usize>,
        message: String,
    ) {
        if self.kept.len() >= MAX_PACKAGE_PROBLEMS {
            self.omitted += 1;
            return;
        }
        self.kept.push(Problem {
            severity,
            line: 0,
            column: 0,
            section,
            code,
            message,
            entry: entry.map(|i| i as u64),
            rule,
        });
    }
}

impl Package {
    /// Opens and checks the whole structure before anything is extracted.
    ///
    /// `name` (a URL or path) is used in errors and problems. Errors: every structural check
    /// of the ZIP (see [`Error`]), a missing or unparsable `manifest.xml`, a manifest that is
    /// not a Resource Dump Manifest or Change Dump Manifest, limits exceeded.
    pub fn open(file: File, name: &str, limits: Limits) -> Result<Package, Error> {
        let files = structure::scan(&file, name, &limits)?;
        let by_name: HashMap<&str, usize> = files
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.dir)
            .map(|(i, f)| (f.name.as_str(), i))
            .collect();
        let Some(&manifest_index) = by_name.get(MANIFEST) else {
            return Err(Error::MissingManifest {
                package: name.to_owned(),
            });
        };
        let mut inflated = 0u64;
        let (header, entries, reader_problems) =
            read_manifest(&file, &files[manifest_index], name, &limits, &mut inflated)?;
        let kind = header.kind();
        let section = kind.section();

        let mut problems = Problems {
            kept: Vec::new(),
            omitted: 0,
        };
        let mut named = vec![false; files.len()];
        named[manifest_index] = true;
        let mut items = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let md = entry.md.as_ref();
            let deleted = md.is_some_and(|m| m.change == Some(Change::Deleted));
            let path = md
                .and_then(|m| m.path.as_deref())
                .map(|p| normalise_path(p).to_owned());
            let found = path.as_deref().and_then(|p| by_name.get(p).copied());
            if let Some(z) = found {
                named[z] = true;
            }
            let zip_index = if deleted { None } else { found };
            if !deleted && let (Some(p), None) = (&path, found) {
                problems.push(
                    Severity::Error,
                    Rule::PathMissing,
                    section,
                    "zip-file-missing",
                    Some(i),
                    format!(
                        "{}: `path` `/{p}` of {} names no file in the package",
                        name, entry.loc
                    ),
                );
            }
            if let (Some(z), Some(length)) = (zip_index, md.and_then(|m| m.length))
                && length != files[z].size
            {
                problems.push(
                    Severity::Error,
                    Rule::Length,
                    "7",
                    "zip-length-mismatch",
                    Some(i),
                    format!(
                        "{}: `length` {length} of {} differs from the {} bytes of `{}` in the package",
                        name, entry.loc, files[z].size, files[z].name
                    ),
                );
            }
            // Links into the package (e.g. a patch, spec 14.4) name files too.
            for link in &entry.links {
                let Some(p) = link.path.as_deref().map(normalise_path) else {
                    continue;
                };
                match by_name.get(p) {
                    Some(&z) => named[z] = true,
                    None => problems.push(
                        Severity::Warning,
                        Rule::PathMissing,
                        "14.4",
                        "zip-link-file-missing",
                        Some(i),
                        format!(
                            "{}: `path` `/{p}` of the `{}` link of {} names no file in the package",
                            name, link.rel, entry.loc
                        ),
                    ),
                }
            }
            items.push(ManifestItem {
                entry,
                path,
                zip_index,
            });
        }
        for (z, f) in files.iter().enumerate() {
            if !f.dir && !named[z] {
                problems.push(
                    Severity::Warning,
                    Rule::Misplaced,
                    section,
                    "zip-file-unlisted",
                    None,
                    format!(
                        "{}: `{}` is in the package but no manifest entry names it",
                        name, f.name
                    ),
                );
            }
        }
        let mut all = reader_problems;
        all.append(&mut problems.kept);
        if problems.omitted > 0 {
            all.push(Problem {
                severity: Severity::Warning,
                line: 0,
                column: 0,
                section,
                code: "problems-omitted",
                message: format!(
                    "{name}: {} more package problems not listed",
                    problems.omitted
                ),
                entry: None,
                rule: Rule::Recommended,
            });
        }
        tracing::debug!(
            package = name,
            kind = kind.name(),
            items = items.len(),
            files = files.len(),
            problems = all.len(),
            "package opened"
        );
        Ok(Package {
            file,
            name: name.to_owned(),
            limits,
            header,
            kind,
            items,
            files,
            problems: all,
            inflated,
        })
    }

    /// The package name given to [`Package::open`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// [`DocumentKind::ResourceDumpManifest`] or [`DocumentKind::ChangeDumpManifest`].
    pub fn kind(&self) -> DocumentKind {
        self.kind
    }

    /// The manifest's root `<rs:md>` and `<rs:ln>`s.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The manifest's entries in manifest order (at most [`Limits::max_entries`]).
    pub fn entries(&self) -> &[ManifestItem] {
        &self.items
    }

    /// Problems found: lenient-mode validation of `manifest.xml` (with line and column), then
    /// the package's own (line 0): `zip-file-missing` (error: a `path` names no file),
    /// `zip-length-mismatch` (error: `length` differs from the ZIP entry's size),
    /// `zip-link-file-missing` (warning: an `<rs:ln>` `path` names no file),
    /// `zip-file-unlisted` (warning: a file no entry names).
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Inflated bytes counted so far against [`Limits::max_total_bytes`] (the manifest
    /// included).
    pub fn inflated_bytes(&self) -> u64 {
        self.inflated
    }

    /// Streams one item's bytes; inflated bytes are counted and capped (per entry, ratio and
    /// total) while reading, never trusted from headers. Returns Error for deletions (no
    /// bitstream).
    ///
    /// The reader's errors are `io::Error`s wrapping an [`Error`] (recover it with
    /// [`Error::from_io`]): limits, a size or CRC-32 other than declared (checked at the end;
    /// the read returning the last declared byte already checks), corrupt data. Bytes handed
    /// out before an error belong to a bad item: a caller keeps an item only once the reader
    /// returned `Ok(0)`.
    pub fn open_item(&mut self, index: usize) -> Result<Box<dyn Read + '_>, Error> {
        let Some(item) = self.items.get(index) else {
            return Err(Error::NoSuchItem {
                package: self.name.clone(),
                index,
                count: self.items.len(),
            });
        };
        if item.is_deletion() {
            return Err(Error::NoBitstream {
                package: self.name.clone(),
                index,
                loc: item.entry.loc.clone(),
            });
        }
        let Some(z) = item.zip_index else {
            return Err(Error::MissingFile {
                package: self.name.clone(),
                index,
                loc: item.entry.loc.clone(),
                path: item.entry.md.as_ref().and_then(|m| m.path.clone()),
            });
        };
        let reader = ItemReader::new(
            &self.file,
            &self.files[z],
            &self.name,
            &self.limits,
            self.limits.max_entry_bytes,
            &mut self.inflated,
        )?;
        Ok(Box::new(reader))
    }
}

/// Reads `manifest.xml` in lenient mode, streaming, within the manifest limits; the data is
/// read to its end so that its size and CRC-32 are verified too.
fn read_manifest(
    file: &File,
    info: &FileInfo,
    package: &str,
    limits: &Limits,
    inflated: &mut u64,
) -> Result<(Header, Vec<UrlEntry>, Vec<Problem>), Error> {
    let mut data = ItemReader::new(
        file,
        info,
        package,
        limits,
        limits.max_manifest_bytes,
        inflated,
    )?;
    let opts = ReadOptions {
        mode: Mode::Lenient,
        max_bytes: limits.max_manifest_bytes,
        max_entries: u64::try_from(limits.max_entries).unwrap_or(u64::MAX),
        max_problems: MAX_PACKAGE_PROBLEMS,
        source: format!("{package}!/{MANIFEST}"),
        ..ReadOptions::default()
    };
    let manifest_error = |e: rsagg_sitemap::Error| match e {
        rsagg_sitemap::Error::TooManyEntries { limit, .. } => Error::TooManyEntries {
            package: package.to_owned(),
            count: limit + 1,
            limit,
        },
        source => Error::Manifest {
            package: package.to_owned(),
            source,
        },
    };
    let parsed = (|| {
        let mut reader = SyncReader::open(BufReader::with_capacity(64 * 1024, &mut data), opts)?;
        let header = reader.header().clone();
        if !matches!(
            header.kind(),
            DocumentKind::ResourceDumpManifest | DocumentKind::ChangeDumpManifest
        ) {
            return Ok(Err(header.kind()));
        }
        let mut entries = Vec::new();
        while let Some(e) = reader.next_entry()? {
            entries.push(e);
        }
        Ok(Ok((header, entries, reader.take_problems())))
    })();
    let (header, entries, problems) = match parsed {
        Ok(Ok(done)) => done,
        Ok(Err(kind)) => {
            return Err(Error::ManifestKind {
                package: package.to_owned(),
                kind,
            });
        }
        // A failure of the data (limits, CRC, size) reaches the parser as an I/O error that
        // it turns into text; report the original.
        Err(e) => return Err(data.take_failure().unwrap_or_else(|| manifest_error(e))),
    };
    // Whatever follows the document is read too, so the size and CRC-32 are checked.
    io::copy(&mut data, &mut io::sink())
        .map_err(|e| Error::unwrap_io(e, package, "reading manifest.xml"))?;
    Ok((header, entries, problems))
}
