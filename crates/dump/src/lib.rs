//! ZIP packages of Resource Dumps and Change Dumps (ResourceSync Framework 1.1, sections 11.1,
//! 11.2, 13.1, 13.2): each package holds bitstreams plus a `manifest.xml` at its top level
//! that names each bitstream's URI and its `path` in the ZIP.
//!
//! Packages come from upstream Sources and are not trusted. [`Package::open`] checks the whole
//! ZIP before anything is extracted (names, file types, encryption, compression methods, the
//! central directory against every local header, overlapping entries, declared sizes) and
//! parses the manifest; [`Package::open_item`] then streams one bitstream, counting every
//! inflated byte against [`Limits`] and verifying its size and CRC-32, so neither a zip bomb
//! nor a lying header gets more than the limits out. Nothing is ever written to disk by the
//! reader: items are streamed to the caller, who decides where they go.
//!
//! [`PackageWriter`] writes packages for republishing; it holds rsagg's own output to the
//! strict rules, so what it writes opens without problems.
//!
//! All I/O is blocking (local files); async callers run it on a blocking thread.
//!
//! ```
//! use std::io::{Read, Seek};
//! use rsagg_dump::{Limits, Package, PackageWriter};
//! use rsagg_model::{Capability, Header, Link, Md, Root, UrlEntry, W3cDateTime};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut header = Header::new(Root::Urlset, Capability::ResourceDumpManifest);
//! header.md.as_mut().unwrap().at = Some(W3cDateTime::parse("2013-01-03T09:00:00Z")?.value);
//! header.links.push(Link::new("up", "http://example.com/capabilitylist.xml"));
//! let entry = UrlEntry {
//!     loc: "http://example.com/res1".into(),
//!     md: Some(Md {
//!         path: Some("/resources/res1".into()),
//!         mime_type: Some("text/plain".into()),
//!         length: Some(5),
//!         ..Md::default()
//!     }),
//!     ..UrlEntry::default()
//! };
//!
//! let mut writer = PackageWriter::new(tempfile::tempfile()?);
//! writer.add("/resources/res1", &mut &b"hello"[..])?;
//! let mut file = writer.finish(&header, &mut std::iter::once(entry))?;
//!
//! file.rewind()?;
//! let mut package = Package::open(file, "resourcedump.zip", Limits::default())?;
//! assert!(package.problems().is_empty());
//! assert_eq!(package.entries()[0].path.as_deref(), Some("resources/res1"));
//! let mut body = String::new();
//! package.open_item(0)?.read_to_string(&mut body)?; // Ok only once size and CRC-32 check out
//! assert_eq!(body, "hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - `package`: [`Package`], [`ManifestItem`]: opening, manifest cross-checks, item access.
//! - `structure`: the ZIP structure check (raw central directory records and local headers
//!   compared with what the `zip` crate parsed; overlaps; declared sizes).
//! - `item`: the counting, verifying reader behind [`Package::open_item`].
//! - `names`: what a safe entry name is (shared by reader and writer).
//! - `writer`: [`PackageWriter`].
//! - `seekbuf`: the writer's buffered file, which absorbs the `zip` crate's seeks back to
//!   each entry's header instead of flushing on every one.
//! - `error`: [`Error`], one variant per reason, each naming package and entry.

mod error;
mod item;
mod names;
mod package;
mod seekbuf;
mod structure;
mod writer;

pub use error::Error;
pub use package::{ManifestItem, Package};
pub use writer::{Compression, CopySource, PackageWriter, ReadSeek};

/// Caps applied to one package. Sizes are counted on bytes actually inflated while reading,
/// and the declared sizes are checked against the same caps at open, so an honest package over
/// a limit is refused before anything is read and a lying one when the count crosses it.
#[derive(Clone, Debug)]
pub struct Limits {
    /// ZIP entries (default 100,000); checked against the end of central directory record
    /// before the central directory is parsed, and on manifest entries.
    pub max_entries: usize,
    /// Inflated size of one file (default 1 GiB).
    pub max_entry_bytes: u64,
    /// Inflated total of the package, `manifest.xml` included (default 16 GiB).
    pub max_total_bytes: u64,
    /// Maximum inflated/compressed ratio of one entry (default 200), against zip bombs; an
    /// entry may always inflate to 64 KiB beyond `max_ratio × compressed size`, since tiny
    /// files compress at ratios that mean nothing.
    pub max_ratio: u64,
    /// Inflated size of `manifest.xml` (default 64 MiB).
    pub max_manifest_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 100_000,
            max_entry_bytes: 1 << 30,
            max_total_bytes: 16 << 30,
            max_ratio: 200,
            max_manifest_bytes: 64 << 20,
        }
    }
}
