//! The structure check run by [`crate::Package::open`] before any data is inflated.
//!
//! The `zip` crate parses the central directory (it knows ZIP64 and the end-of-central-
//! directory search); everything it reports is then checked against the raw bytes here: the
//! central directory record and the local file header of every entry are read at the
//! offsets the central directory gives and compared field by field (name, flags, method,
//! CRC-32, sizes), and the entries' byte ranges must neither overlap each other nor the
//! central directory. A package that a streaming reader (walking local headers) and a
//! central-directory reader would see differently is refused, as is anything that is not a
//! plain, unencrypted, stored or deflated regular file with a safe name.
//!
//! Before the `zip` crate parses anything, the entry counts of every end-of-central-directory
//! candidate are checked against [`Limits::max_entries`], so a forged count cannot make the
//! parser allocate for millions of entries.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use zip::ZipArchive;
use zip::read::{ArchiveOffset, Config};

use crate::names::unsafe_reason;
use crate::{Error, Limits};

/// Inflated bytes allowed beyond `max_ratio × compressed` so that tiny files (whose ratio is
/// meaningless: 100 zero bytes deflate to 5) pass.
pub(crate) const RATIO_SLACK: u64 = 64 * 1024;

/// The manifest's name (spec 11.2, 13.2).
pub(crate) const MANIFEST: &str = "manifest.xml";

const SIG_LOCAL: u32 = 0x0403_4b50;
const SIG_CENTRAL: u32 = 0x0201_4b50;
const SIG_EOCD: u32 = 0x0605_4b50;
const SIG_ZIP64_LOCATOR: u32 = 0x0706_4b50;
const SIG_ZIP64_EOCD: u32 = 0x0606_4b50;
const SIG_DATA_DESCRIPTOR: u32 = 0x0807_4b50;

const FLAG_ENCRYPTED: u16 = 1;
const FLAG_DATA_DESCRIPTOR: u16 = 1 << 3;
const FLAG_STRONG_ENCRYPTION: u16 = 1 << 6;
const FLAG_MASKED_HEADERS: u16 = 1 << 13;

/// Stored (0) and deflated (8), APPNOTE 4.4.5.
pub(crate) const METHOD_STORED: u16 = 0;
pub(crate) const METHOD_DEFLATED: u16 = 8;

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;
/// MS-DOS directory attribute in the low byte of the external attributes.
const DOS_DIRECTORY: u32 = 0x10;

/// One checked entry of the package, in central directory order.
#[derive(Debug, Clone)]
pub(crate) struct FileInfo {
    /// Entry name (UTF-8, checked by [`unsafe_reason`]); directories without the trailing `/`.
    pub name: String,
    /// An empty directory entry (tolerated, never read).
    pub dir: bool,
    /// [`METHOD_STORED`] or [`METHOD_DEFLATED`].
    pub method: u16,
    /// Compressed size (central directory, equal to the local header's).
    pub compressed: u64,
    /// Declared uncompressed size.
    pub size: u64,
    /// Declared CRC-32.
    pub crc: u32,
    /// Offset of the compressed data.
    pub data_start: u64,
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64le(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn read_at(mut file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

struct Ctx<'a> {
    package: &'a str,
}

impl Ctx<'_> {
    fn io(&self, context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            package: self.package.to_owned(),
            context: context.into(),
            source,
        }
    }

    fn mismatch(
        &self,
        entry: &str,
        field: &'static str,
        central: impl ToString,
        local: impl ToString,
    ) -> Error {
        Error::HeaderMismatch {
            package: self.package.to_owned(),
            entry: entry.to_owned(),
            field,
            central: central.to_string(),
            local: local.to_string(),
        }
    }
}

/// Refuses the archive when any end-of-central-directory candidate in the file's tail
/// declares more than `max` entries (APPNOTE 4.3.16, 4.3.14 for ZIP64).
fn check_declared_entry_count(file: &File, len: u64, max: u64, cx: &Ctx<'_>) -> Result<(), Error> {
    let tail_len = len.min(22 + 65_535);
    let tail_start = len - tail_len;
    let mut tail = vec![0u8; tail_len as usize];
    read_at(file, tail_start, &mut tail).map_err(|e| cx.io("reading the archive end", e))?;
    if tail.len() < 22 {
        return Ok(());
    }
    for i in (0..=tail.len() - 22).rev() {
        if u32le(&tail, i) != SIG_EOCD {
            continue;
        }
        let on_disk = u16le(&tail, i + 8);
        let total = u16le(&tail, i + 10);
        let mut count = u64::from(on_disk.max(total));
        let pos = tail_start + i as u64;
        if (on_disk == 0xFFFF || total == 0xFFFF) && pos >= 20 {
            let mut loc = [0u8; 20];
            read_at(file, pos - 20, &mut loc).map_err(|e| cx.io("reading the ZIP64 locator", e))?;
            if u32le(&loc, 0) == SIG_ZIP64_LOCATOR {
                let at = u64le(&loc, 8);
                let mut rec = [0u8; 56];
                if at.checked_add(56).is_some_and(|end| end <= len) {
                    read_at(file, at, &mut rec)
                        .map_err(|e| cx.io("reading the ZIP64 end of central directory", e))?;
                    if u32le(&rec, 0) == SIG_ZIP64_EOCD {
                        count = count.max(u64le(&rec, 24)).max(u64le(&rec, 32));
                    }
                }
            }
        }
        if count > max {
            return Err(Error::TooManyEntries {
                package: cx.package.to_owned(),
                count,
                limit: max,
            });
        }
    }
    Ok(())
}

/// The raw central directory record of one entry.
struct CentralRecord {
    made_by: u16,
    flags: u16,
    method: u16,
    crc: u32,
    external: u32,
    name: Vec<u8>,
}

fn read_central(file: &File, at: u64, cx: &Ctx<'_>) -> Result<CentralRecord, Error> {
    let mut h = [0u8; 46];
    read_at(file, at, &mut h).map_err(|e| cx.io("reading a central directory record", e))?;
    if u32le(&h, 0) != SIG_CENTRAL {
        return Err(cx.mismatch(
            "?",
            "central directory signature",
            SIG_CENTRAL,
            u32le(&h, 0),
        ));
    }
    let mut name = vec![0u8; usize::from(u16le(&h, 28))];
    read_at(file, at + 46, &mut name).map_err(|e| cx.io("reading a central directory name", e))?;
    Ok(CentralRecord {
        made_by: u16le(&h, 4),
        flags: u16le(&h, 8),
        method: u16le(&h, 10),
        crc: u32le(&h, 16),
        external: u32le(&h, 38),
        name,
    })
}

/// The local file header of one entry.
struct LocalHeader {
    flags: u16,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    name: Vec<u8>,
    /// Offset of the data.
    data_start: u64,
}

fn read_local(file: &File, at: u64, entry: &str, cx: &Ctx<'_>) -> Result<LocalHeader, Error> {
    let mut h = [0u8; 30];
    read_at(file, at, &mut h)
        .map_err(|e| cx.io(format!("reading the local header of `{entry}`"), e))?;
    if u32le(&h, 0) != SIG_LOCAL {
        return Err(cx.mismatch(
            entry,
            "local header signature",
            format!("{SIG_LOCAL:08x} at offset {at}"),
            format!("{:08x}", u32le(&h, 0)),
        ));
    }
    let name_len = usize::from(u16le(&h, 26));
    let extra_len = usize::from(u16le(&h, 28));
    let mut rest = vec![0u8; name_len + extra_len];
    read_at(file, at + 30, &mut rest)
        .map_err(|e| cx.io(format!("reading the local header of `{entry}`"), e))?;
    let extra = rest.split_off(name_len);
    let mut compressed = u64::from(u32le(&h, 18));
    let mut size = u64::from(u32le(&h, 22));
    if compressed == 0xFFFF_FFFF || size == 0xFFFF_FFFF {
        // APPNOTE 4.5.3: in a local header the ZIP64 extra field holds both sizes.
        let mut i = 0;
        while i + 4 <= extra.len() {
            let id = u16le(&extra, i);
            let len = usize::from(u16le(&extra, i + 2));
            let body = &extra[(i + 4).min(extra.len())..(i + 4 + len).min(extra.len())];
            if id == 0x0001 && body.len() >= 16 {
                size = u64le(body, 0);
                compressed = u64le(body, 8);
                break;
            }
            i += 4 + len;
        }
    }
    Ok(LocalHeader {
        flags: u16le(&h, 6),
        method: u16le(&h, 8),
        crc: u32le(&h, 14),
        compressed,
        size,
        name: rest,
        data_start: at + 30 + (name_len + extra_len) as u64,
    })
}

/// Checks the whole ZIP structure (see the module documentation) and returns its entries in
/// central directory order.
pub(crate) fn scan(file: &File, package: &str, limits: &Limits) -> Result<Vec<FileInfo>, Error> {
    let cx = Ctx { package };
    let len = file
        .metadata()
        .map_err(|e| cx.io("reading the file's metadata", e))?
        .len();
    let max_entries = u64::try_from(limits.max_entries).unwrap_or(u64::MAX);
    check_declared_entry_count(file, len, max_entries, &cx)?;

    let config = Config {
        archive_offset: ArchiveOffset::Known(0),
    };
    let zip_err = |e: zip::result::ZipError| Error::Zip {
        package: package.to_owned(),
        message: e.to_string(),
    };
    let mut archive = ZipArchive::with_config(config, file).map_err(zip_err)?;
    if archive.len() as u64 > max_entries {
        return Err(Error::TooManyEntries {
            package: package.to_owned(),
            count: archive.len() as u64,
            limit: max_entries,
        });
    }
    if archive.has_duplicate_names() {
        return Err(Error::Duplicate {
            package: package.to_owned(),
            entry: find_duplicate(file, archive.central_directory_start(), max_entries, &cx)
                .unwrap_or_else(|| "?".to_owned()),
        });
    }
    let cd_start = archive.central_directory_start();

    let mut files = Vec::with_capacity(archive.len());
    let mut names = HashSet::with_capacity(archive.len());
    // (start, end, index) of each entry's bytes, for the overlap check.
    let mut extents = Vec::with_capacity(archive.len());
    let mut declared_total: u128 = 0;
    for i in 0..archive.len() {
        let entry = archive.by_index_data(i).map_err(zip_err)?;
        let raw_name = entry.name_raw().to_vec();
        let lossy = String::from_utf8_lossy(&raw_name).into_owned();
        let central = read_central(file, entry.central_header_start(), &cx)?;
        if central.name != raw_name {
            return Err(cx.mismatch(
                &lossy,
                "name (central directory record vs. parsed name)",
                String::from_utf8_lossy(&central.name),
                &lossy,
            ));
        }
        let Ok(full_name) = String::from_utf8(raw_name) else {
            return Err(Error::UnsafeName {
                package: package.to_owned(),
                entry: lossy,
                reason: "name is not UTF-8",
            });
        };
        let unix_mode = central.external >> 16;
        let file_type = unix_mode & S_IFMT;
        let dir = full_name.ends_with('/')
            || file_type == S_IFDIR
            || (file_type == 0 && central.external & DOS_DIRECTORY != 0);
        let name = if dir {
            full_name.strip_suffix('/').unwrap_or(&full_name).to_owned()
        } else {
            full_name.clone()
        };
        if let Some(reason) = unsafe_reason(&name) {
            return Err(Error::UnsafeName {
                package: package.to_owned(),
                entry: full_name,
                reason,
            });
        }
        if !names.insert(name.clone()) {
            return Err(Error::Duplicate {
                package: package.to_owned(),
                entry: full_name,
            });
        }
        if central.flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION | FLAG_MASKED_HEADERS) != 0
            || entry.encrypted()
        {
            return Err(Error::Encrypted {
                package: package.to_owned(),
                entry: full_name,
            });
        }
        if central.method != METHOD_STORED && central.method != METHOD_DEFLATED {
            return Err(Error::UnsupportedMethod {
                package: package.to_owned(),
                entry: full_name,
                method: central.method,
            });
        }
        // The mode is checked whatever system `made_by` names: some extractors honour it anyway.
        if file_type == S_IFLNK || entry.is_symlink() {
            return Err(Error::Symlink {
                package: package.to_owned(),
                entry: full_name,
            });
        }
        if !matches!(file_type, 0 | S_IFREG | S_IFDIR) || (file_type == S_IFDIR && !dir) {
            return Err(Error::NotRegular {
                package: package.to_owned(),
                entry: full_name,
                mode: unix_mode,
            });
        }
        if dir && (entry.size() != 0 || entry.compressed_size() != 0) {
            return Err(Error::NotRegular {
                package: package.to_owned(),
                entry: full_name,
                mode: unix_mode,
            });
        }
        tracing::trace!(entry = %full_name, made_by = central.made_by, "central record");

        // Cross-check against the local header.
        let local = read_local(file, entry.header_start(), &full_name, &cx)?;
        if local.name != central.name {
            return Err(cx.mismatch(
                &full_name,
                "name",
                &full_name,
                String::from_utf8_lossy(&local.name),
            ));
        }
        if local.method != central.method {
            return Err(cx.mismatch(
                &full_name,
                "compression method",
                central.method,
                local.method,
            ));
        }
        let relevant = FLAG_ENCRYPTED | FLAG_DATA_DESCRIPTOR | FLAG_STRONG_ENCRYPTION;
        if local.flags & relevant != central.flags & relevant {
            return Err(cx.mismatch(
                &full_name,
                "general purpose flags",
                format!("{:#06x}", central.flags),
                format!("{:#06x}", local.flags),
            ));
        }
        if central.crc != entry.crc32() {
            return Err(cx.mismatch(
                &full_name,
                "CRC-32 (record vs. parsed)",
                central.crc,
                entry.crc32(),
            ));
        }
        // With a data descriptor (flag bit 3) the local header may carry zeros (APPNOTE 4.4.4).
        let deferred = central.flags & FLAG_DATA_DESCRIPTOR != 0;
        let agrees = |local: u64, central: u64| local == central || (deferred && local == 0);
        if !agrees(u64::from(local.crc), u64::from(central.crc)) {
            return Err(cx.mismatch(
                &full_name,
                "CRC-32",
                format!("{:08x}", central.crc),
                format!("{:08x}", local.crc),
            ));
        }
        if !agrees(local.compressed, entry.compressed_size()) {
            return Err(cx.mismatch(
                &full_name,
                "compressed size",
                entry.compressed_size(),
                local.compressed,
            ));
        }
        if !agrees(local.size, entry.size()) {
            return Err(cx.mismatch(&full_name, "uncompressed size", entry.size(), local.size));
        }
        if central.method == METHOD_STORED && entry.compressed_size() != entry.size() {
            return Err(cx.mismatch(
                &full_name,
                "stored entry sizes (compressed vs. uncompressed)",
                entry.compressed_size(),
                entry.size(),
            ));
        }
        let data_end = local
            .data_start
            .checked_add(entry.compressed_size())
            .filter(|&end| end <= cd_start)
            .ok_or_else(|| {
                cx.mismatch(
                    &full_name,
                    "data range",
                    format!("data ending before the central directory at {cd_start}"),
                    format!(
                        "{} bytes from offset {}",
                        entry.compressed_size(),
                        local.data_start
                    ),
                )
            })?;
        let mut end = data_end;
        if deferred {
            // APPNOTE 4.3.9: optional signature, then the CRC-32.
            let mut dd = [0u8; 8];
            if data_end + 8 > cd_start {
                return Err(cx.mismatch(&full_name, "data descriptor", "present", "missing"));
            }
            read_at(file, data_end, &mut dd)
                .map_err(|e| cx.io(format!("reading the data descriptor of `{full_name}`"), e))?;
            let (crc, len) = if u32le(&dd, 0) == SIG_DATA_DESCRIPTOR {
                (u32le(&dd, 4), 16)
            } else {
                (u32le(&dd, 0), 12)
            };
            if crc != central.crc {
                return Err(cx.mismatch(
                    &full_name,
                    "data descriptor CRC-32",
                    format!("{:08x}", central.crc),
                    format!("{crc:08x}"),
                ));
            }
            end = (data_end + len).min(cd_start);
        }
        extents.push((entry.header_start(), end, i));

        // Declared sizes against the limits (checked again, on counted bytes, when reading).
        let size = entry.size();
        let compressed = entry.compressed_size();
        let entry_limit = if name == MANIFEST {
            limits.max_manifest_bytes
        } else {
            limits.max_entry_bytes
        };
        if size > entry_limit {
            return Err(Error::EntryTooLarge {
                package: package.to_owned(),
                entry: full_name,
                size,
                limit: entry_limit,
                declared: true,
            });
        }
        if u128::from(size)
            > u128::from(limits.max_ratio) * u128::from(compressed) + u128::from(RATIO_SLACK)
        {
            return Err(Error::RatioTooHigh {
                package: package.to_owned(),
                entry: full_name,
                size,
                compressed,
                ratio: limits.max_ratio,
                declared: true,
            });
        }
        declared_total += u128::from(size);
        if declared_total > u128::from(limits.max_total_bytes) {
            return Err(Error::TotalTooLarge {
                package: package.to_owned(),
                entry: full_name,
                total: u64::try_from(declared_total).unwrap_or(u64::MAX),
                limit: limits.max_total_bytes,
                declared: true,
            });
        }
        files.push(FileInfo {
            name,
            dir,
            method: central.method,
            compressed,
            size,
            crc: central.crc,
            data_start: local.data_start,
        });
    }

    // No two entries may share bytes (overlapping entries are how non-recursive zip bombs
    // multiply their output), and none may reach into the central directory.
    extents.sort_unstable();
    for pair in extents.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if end > start {
            return Err(cx.mismatch(
                &files[a].name,
                "entry byte ranges",
                format!("`{}` ending at {end}", files[a].name),
                format!("`{}` starting at {start} (overlap)", files[b].name),
            ));
        }
    }
    // Last, the `zip` crate's own consistency check (it also finds local headers in gaps that
    // the central directory does not list).
    archive
        .validate_header_consistency()
        .map_err(|e| Error::Inconsistent {
            package: package.to_owned(),
            message: e.to_string(),
        })?;
    Ok(files)
}

/// Walks the raw central directory to name the first repeated entry name (at most `max`
/// records).
fn find_duplicate(file: &File, cd_start: u64, max: u64, cx: &Ctx<'_>) -> Option<String> {
    let mut seen = HashSet::new();
    let mut at = cd_start;
    for _ in 0..=max {
        let mut h = [0u8; 46];
        read_at(file, at, &mut h).ok()?;
        if u32le(&h, 0) != SIG_CENTRAL {
            return None;
        }
        let rec = read_central(file, at, cx).ok()?;
        let name = String::from_utf8_lossy(&rec.name).into_owned();
        if !seen.insert(name.clone()) {
            return Some(name);
        }
        at += 46 + u64::from(u16le(&h, 28)) + u64::from(u16le(&h, 30)) + u64::from(u16le(&h, 32));
    }
    None
}
