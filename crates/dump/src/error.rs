//! The one error type of this crate.
//!
//! Every variant names the package (the name given to [`crate::Package::open`] or
//! [`crate::PackageWriter::with_name`]) and, where there is one, the ZIP entry, and its
//! message cites the rule broken: ResourceSync Framework 1.1 sections 11.2 / 13.2 for the
//! package layout, PKWARE APPNOTE 6.3.3 sections (the ZIP reference the ResourceSync spec
//! cites) for the container format.

use std::io;

use rsagg_model::DocumentKind;

/// Why a package could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing the underlying file failed.
    #[error("{package}: {context}: {source}")]
    Io {
        /// Package name.
        package: String,
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is not a ZIP archive this crate can read (no end of central directory, a
    /// truncated or malformed central directory, multi-disk archives; APPNOTE 4.3).
    #[error("{package}: not a readable ZIP archive: {message} (APPNOTE 4.3)")]
    Zip {
        /// Package name.
        package: String,
        /// What the ZIP parser found.
        message: String,
    },
    /// More entries than [`crate::Limits::max_entries`], counted from the end of central
    /// directory record before the central directory is parsed, or manifest entries beyond it.
    #[error("{package}: {count} entries exceed the limit of {limit}")]
    TooManyEntries {
        /// Package name.
        package: String,
        /// Entries declared or found.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// An entry name that is not a plain relative path inside the package: `..` components,
    /// absolute paths, drive letters, backslashes, NUL, empty or `.` components. Section 11.2
    /// and 13.2 define `path` as "the relative file system path where the bitstream would
    /// reside if the ZIP were unpacked", so anything that could land elsewhere is refused.
    #[error("{package}: entry `{entry}`: unsafe name: {reason} (spec 11.2/13.2, APPNOTE 4.4.17)")]
    UnsafeName {
        /// Package name.
        package: String,
        /// The name (lossy UTF-8).
        entry: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Two entries with the same name: which one a reader sees would depend on the reader.
    #[error("{package}: entry `{entry}` appears more than once in the central directory")]
    Duplicate {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
    },
    /// A symbolic link (unix mode `S_IFLNK` in the external attributes): extracting it could
    /// redirect later writes outside the target directory.
    #[error("{package}: entry `{entry}` is a symbolic link (APPNOTE 4.4.15)")]
    Symlink {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
    },
    /// A device, FIFO, socket, or a directory entry with content: a package holds regular
    /// files (and, tolerated, empty directory entries).
    #[error("{package}: entry `{entry}` is not a regular file (mode {mode:o}; APPNOTE 4.4.15)")]
    NotRegular {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// The unix mode from the external attributes.
        mode: u32,
    },
    /// An encrypted entry (general purpose flag bit 0 or 6): it cannot be verified.
    #[error("{package}: entry `{entry}` is encrypted (APPNOTE 4.4.4)")]
    Encrypted {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
    },
    /// A compression method other than stored (0) or deflated (8), the two every ZIP reader
    /// supports.
    #[error(
        "{package}: entry `{entry}` uses unsupported compression method {method} (APPNOTE 4.4.5)"
    )]
    UnsupportedMethod {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// The method number.
        method: u16,
    },
    /// The local file header of an entry disagrees with its central directory record, or
    /// the ZIP structure is otherwise inconsistent (entries overlapping each other or the
    /// central directory, local headers not listed in the central directory). Readers that
    /// walk local headers (streaming unzip) and readers that use the central directory would
    /// see different packages, so neither view is trusted.
    #[error(
        "{package}: entry `{entry}`: {field}: central directory has {central}, local header has {local} (APPNOTE 4.3.7, 4.3.12)"
    )]
    HeaderMismatch {
        /// Package name.
        package: String,
        /// The name (central directory's).
        entry: String,
        /// Which field or check.
        field: &'static str,
        /// Value in the central directory.
        central: String,
        /// Value in the local header (or what was found instead).
        local: String,
    },
    /// The `zip` crate's own consistency check failed after ours passed (e.g. a local header
    /// in a gap that the central directory does not list: a hidden entry).
    #[error("{package}: inconsistent ZIP structure: {message} (APPNOTE 4.3.6)")]
    Inconsistent {
        /// Package name.
        package: String,
        /// What the check found.
        message: String,
    },
    /// An entry's inflated size is beyond [`crate::Limits::max_entry_bytes`] (or
    /// [`crate::Limits::max_manifest_bytes`] for `manifest.xml`).
    #[error("{package}: entry `{entry}` {} {size} bytes, more than the limit of {limit}", if *.declared { "declares" } else { "inflated to at least" })]
    EntryTooLarge {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// Size declared or inflated so far.
        size: u64,
        /// The limit.
        limit: u64,
        /// True when found at open from the declared size, false when counted while reading.
        declared: bool,
    },
    /// An entry inflates to more than [`crate::Limits::max_ratio`] times its compressed size
    /// plus a small allowance for tiny files: a zip bomb.
    #[error("{package}: entry `{entry}` {} {size} bytes from {compressed} compressed bytes, beyond the ratio limit of {ratio}:1", if *.declared { "declares" } else { "inflated to at least" })]
    RatioTooHigh {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// Inflated size declared or counted so far.
        size: u64,
        /// Compressed size.
        compressed: u64,
        /// The limit.
        ratio: u64,
        /// True when found at open from the declared size, false when counted while reading.
        declared: bool,
    },
    /// The package inflates to more than [`crate::Limits::max_total_bytes`] in total.
    #[error("{package}: entry `{entry}`: the package {} {total} bytes in total, more than the limit of {limit}", if *.declared { "declares" } else { "inflated to at least" })]
    TotalTooLarge {
        /// Package name.
        package: String,
        /// The entry that crossed the limit.
        entry: String,
        /// Total declared or counted so far.
        total: u64,
        /// The limit.
        limit: u64,
        /// True when found at open from the declared sizes, false when counted while reading.
        declared: bool,
    },
    /// An entry inflated to a size other than the one its headers declare.
    #[error("{package}: entry `{entry}` declares {declared} bytes but inflated to {actual}{} (APPNOTE 4.4.9)", if *.overrun { " or more" } else { "" })]
    SizeMismatch {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// Declared uncompressed size.
        declared: u64,
        /// Bytes inflated.
        actual: u64,
        /// True when reading stopped because the data went on past the declared size.
        overrun: bool,
    },
    /// The CRC-32 of the inflated bytes differs from the declared one: the data is corrupt.
    #[error(
        "{package}: entry `{entry}`: CRC-32 is {actual:08x}, the headers declare {declared:08x} (APPNOTE 4.4.7)"
    )]
    Crc {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// Declared CRC-32.
        declared: u32,
        /// Computed CRC-32.
        actual: u32,
    },
    /// The compressed data is not a valid deflate stream.
    #[error("{package}: entry `{entry}`: corrupt compressed data: {message}")]
    Corrupt {
        /// Package name.
        package: String,
        /// The name.
        entry: String,
        /// What the inflater said.
        message: String,
    },
    /// No `manifest.xml` at the top level of the package (spec 11.2, 13.2: "The file must be
    /// named `manifest.xml` and must be located at the top level of the ZIP package").
    #[error("{package}: no manifest.xml at the top level of the package (spec 11.2, 13.2)")]
    MissingManifest {
        /// Package name.
        package: String,
    },
    /// `manifest.xml` could not be parsed (not well-formed, not a Sitemap, DOCTYPE, over the
    /// byte or entry limit).
    #[error("{package}: manifest.xml: {source}")]
    Manifest {
        /// Package name.
        package: String,
        /// The reader's error.
        #[source]
        source: rsagg_sitemap::Error,
    },
    /// `manifest.xml` is a ResourceSync document, but not a Resource Dump Manifest or a Change
    /// Dump Manifest (spec 11.2, 13.2).
    #[error("{package}: manifest.xml is a {}, not a Resource Dump Manifest (11.2) or Change Dump Manifest (13.2)", .kind.name())]
    ManifestKind {
        /// Package name.
        package: String,
        /// What it is.
        kind: DocumentKind,
    },
    /// [`crate::Package::open_item`] with an index past the manifest's entries.
    #[error("{package}: no manifest entry {index} (the manifest has {count})")]
    NoSuchItem {
        /// Package name.
        package: String,
        /// Index asked for.
        index: usize,
        /// Entries in the manifest.
        count: usize,
    },
    /// The manifest entry is a deletion of a Change Dump Manifest: there is no bitstream
    /// (spec 13.2).
    #[error(
        "{package}: manifest entry {index} ({loc}) is a deletion and has no bitstream (spec 13.2)"
    )]
    NoBitstream {
        /// Package name.
        package: String,
        /// Manifest entry index.
        index: usize,
        /// Its `<loc>`.
        loc: String,
    },
    /// The manifest entry has no `path`, or its `path` names no file in the package (spec
    /// 11.2, 13.2). Reported as a problem at open; an error only when the item is opened.
    #[error("{package}: manifest entry {index} ({loc}): {}", match .path { Some(p) => format!("path `{p}` names no file in the package (spec 11.2/13.2)"), None => "no path (spec 11.2/13.2)".to_owned() })]
    MissingFile {
        /// Package name.
        package: String,
        /// Manifest entry index.
        index: usize,
        /// Its `<loc>`.
        loc: String,
        /// Its `path`, as written.
        path: Option<String>,
    },
    /// [`crate::PackageWriter`] was given something that would make an invalid package: a
    /// reserved or repeated name, a manifest that does not pass strict validation, a manifest
    /// path that names no file, a file no manifest entry names.
    #[error("{package}: cannot write package: {message} (spec {section})")]
    Invalid {
        /// Package name.
        package: String,
        /// Spec section of the rule.
        section: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// The package name the error is about.
    pub fn package(&self) -> &str {
        match self {
            Error::Io { package, .. }
            | Error::Zip { package, .. }
            | Error::TooManyEntries { package, .. }
            | Error::UnsafeName { package, .. }
            | Error::Duplicate { package, .. }
            | Error::Symlink { package, .. }
            | Error::NotRegular { package, .. }
            | Error::Encrypted { package, .. }
            | Error::UnsupportedMethod { package, .. }
            | Error::HeaderMismatch { package, .. }
            | Error::Inconsistent { package, .. }
            | Error::EntryTooLarge { package, .. }
            | Error::RatioTooHigh { package, .. }
            | Error::TotalTooLarge { package, .. }
            | Error::SizeMismatch { package, .. }
            | Error::Crc { package, .. }
            | Error::Corrupt { package, .. }
            | Error::MissingManifest { package }
            | Error::Manifest { package, .. }
            | Error::ManifestKind { package, .. }
            | Error::NoSuchItem { package, .. }
            | Error::NoBitstream { package, .. }
            | Error::MissingFile { package, .. }
            | Error::Invalid { package, .. } => package,
        }
    }

    /// The crate error inside an `io::Error` returned by a reader from
    /// [`crate::Package::open_item`] (limits, CRC, sizes, corrupt data), if it is one.
    pub fn from_io(error: &io::Error) -> Option<&Error> {
        error.get_ref().and_then(|e| e.downcast_ref::<Error>())
    }

    /// A copy of an error made while reading an item (the variants [`crate::Package`]'s
    /// readers produce are copied exactly; an I/O error keeps its kind and text; other
    /// variants, which readers never produce, become [`Error::Io`] with their text).
    pub(crate) fn replicate(&self) -> Error {
        match self {
            Error::EntryTooLarge {
                package,
                entry,
                size,
                limit,
                declared,
            } => Error::EntryTooLarge {
                package: package.clone(),
                entry: entry.clone(),
                size: *size,
                limit: *limit,
                declared: *declared,
            },
            Error::RatioTooHigh {
                package,
                entry,
                size,
                compressed,
                ratio,
                declared,
            } => Error::RatioTooHigh {
                package: package.clone(),
                entry: entry.clone(),
                size: *size,
                compressed: *compressed,
                ratio: *ratio,
                declared: *declared,
            },
            Error::TotalTooLarge {
                package,
                entry,
                total,
                limit,
                declared,
            } => Error::TotalTooLarge {
                package: package.clone(),
                entry: entry.clone(),
                total: *total,
                limit: *limit,
                declared: *declared,
            },
            Error::SizeMismatch {
                package,
                entry,
                declared,
                actual,
                overrun,
            } => Error::SizeMismatch {
                package: package.clone(),
                entry: entry.clone(),
                declared: *declared,
                actual: *actual,
                overrun: *overrun,
            },
            Error::Crc {
                package,
                entry,
                declared,
                actual,
            } => Error::Crc {
                package: package.clone(),
                entry: entry.clone(),
                declared: *declared,
                actual: *actual,
            },
            Error::Corrupt {
                package,
                entry,
                message,
            } => Error::Corrupt {
                package: package.clone(),
                entry: entry.clone(),
                message: message.clone(),
            },
            Error::Io {
                package,
                context,
                source,
            } => Error::Io {
                package: package.clone(),
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            other => Error::Io {
                package: other.package().to_owned(),
                context: "reading".to_owned(),
                source: io::Error::other(other.to_string()),
            },
        }
    }

    /// Wraps this error into an `io::Error` (for `Read` implementations); recover it with
    /// [`Error::from_io`].
    pub(crate) fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }

    /// Unwraps an `io::Error` made by [`Error::into_io`], or wraps any other as [`Error::Io`].
    pub(crate) fn unwrap_io(error: io::Error, package: &str, context: &str) -> Error {
        if Error::from_io(&error).is_none() {
            return Error::Io {
                package: package.to_owned(),
                context: context.to_owned(),
                source: error,
            };
        }
        let kind = error.kind();
        match error.into_inner().map(|inner| inner.downcast::<Error>()) {
            Some(Ok(e)) => *e,
            Some(Err(other)) => Error::Io {
                package: package.to_owned(),
                context: context.to_owned(),
                source: io::Error::new(kind, other),
            },
            None => Error::Io {
                package: package.to_owned(),
                context: context.to_owned(),
                source: io::Error::from(kind),
            },
        }
    }
}
