//! One dump package (spec 11.1, 11.2, 13.1, 13.2): downloaded to a temporary file (hashed as
//! it comes), compared with its dump entry (`length`, `hash`, `type`), opened with
//! [`rsagg_dump::Package`] (ZIP structure, names, zip bombs, each manifest `path` present and
//! its `length`), its `manifest.xml` read again in the walk's mode as a document of its own,
//! every bitstream read and hashed against its manifest entry, and the manifest's published
//! copy (`rs:ln rel="contents"` of the dump entry) compared with the one in the package.

use std::io::{BufReader, Read, Write};

use futures::StreamExt;
use rsagg_dump::{Limits, Package};
use rsagg_fetch::Request;
use rsagg_model::{DocumentKind, Hashes, Header, Mode, Problem};
use rsagg_sitemap::{ReadOptions, SyncReader};
use url::Url;

use crate::Error;
use crate::rules::{Computed, Cross, Digests, media_type_matches};
use crate::walk::{Expect, Job, OpenError, Walker, fatal_problem};

/// What the blocking part found.
struct Outcome {
    /// [`Package::open`] refused the package: why.
    invalid: Option<String>,
    /// The package's own problems (`zip-…`).
    package: Vec<Problem>,
    /// `manifest.xml` read in the walk's mode.
    manifest: Option<Manifest>,
    /// Bitstreams that do not verify: (rule, manifest entry, message).
    items: Vec<(Cross, u64, String)>,
}

struct Manifest {
    header: Option<Header>,
    kind: DocumentKind,
    problems: Vec<Problem>,
    errors: u64,
    warnings: u64,
    entries: u64,
    digest: Option<Computed>,
}

/// Visits the package `job` names (an [`Expect::Package`] job).
pub(crate) async fn visit(w: &mut Walker<'_>, job: Job) -> Result<(), Error> {
    let Expect::Package {
        entry,
        change,
        capability_list,
    } = &job.expect
    else {
        return Ok(());
    };
    let change = *change;
    let section = if change { "13.1" } else { "11.1" };
    let manifest_section = if change { "13.2" } else { "11.2" };
    let req = Request {
        max_bytes: w.remaining_bytes(),
        ..Request::default()
    };
    let fetched = match w.fetcher.get(&job.url, &w.access, &req).await {
        Ok(f) => f,
        Err(e) => {
            w.fetch_failed(&job, e);
            return Ok(());
        }
    };
    let url = fetched.url.clone();
    let content_type = fetched.content_type.clone();
    let mut tmp =
        tempfile::NamedTempFile::new().map_err(|e| io("creating a temporary file", &url, e))?;
    let mut digests = Digests::default();
    let mut body = fetched.body;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => {
                digests.update(&c);
                tmp.as_file_mut()
                    .write_all(&c)
                    .map_err(|e| io("writing a temporary file", &url, e))?;
            }
            Err(e) => {
                w.out.summary.bytes += digests.finish().length;
                w.fetch_failed(&job, e);
                return Ok(());
            }
        }
    }
    let got = digests.finish();
    w.out.summary.bytes += got.length;
    w.out.summary.packages += 1;
    let u = url.as_str();
    let md = entry.md.as_ref();
    if let Some(l) = md.and_then(|m| m.length)
        && l != got.length
    {
        w.out
            .cross(
                Cross::PackageLengthMismatch,
                section,
                u,
                format!(
                    "the dump entry states `length` {l}, the package served has {} bytes",
                    got.length
                ),
            )
            .related(job.referrer.as_ref().map_or("", Url::as_str));
    }
    for (stated, ours) in got.hash_mismatches(md.and_then(|m| m.hash.as_ref())) {
        w.out
            .cross(
                Cross::PackageHashMismatch,
                section,
                u,
                format!("the dump entry states `hash` {stated}, the package served has {ours}"),
            )
            .related(job.referrer.as_ref().map_or("", Url::as_str));
    }
    if let Some(t) = md.and_then(|m| m.mime_type.as_deref())
        && !media_type_matches(t, content_type.as_deref())
    {
        w.out.cross(
            Cross::PackageTypeMismatch,
            section,
            u,
            format!(
                "the dump entry states `type` {t}, the package is served as {}",
                content_type.as_deref().unwrap_or("")
            ),
        );
    }

    let (name, mode, room) = (url.to_string(), w.opts.mode, w.out.room());
    let outcome = tokio::task::spawn_blocking(move || check(tmp, &name, mode, room))
        .await
        .map_err(|e| Error::Io {
            what: format!("checking the package {url}"),
            source: std::io::Error::other(e),
        })?;
    if let Some(why) = outcome.invalid {
        w.out.cross(
            Cross::PackageInvalid,
            manifest_section,
            u,
            format!("not a usable package: {why}"),
        );
        return Ok(());
    }
    for p in outcome.package {
        w.out.problem(u, p);
    }
    let manifest_url = format!("{u}!/manifest.xml");
    let mut manifest_digest = None;
    if let Some(m) = outcome.manifest {
        w.out
            .document(&manifest_url, m.problems, m.errors, m.warnings);
        w.out.read(m.kind.name(), m.entries, 0);
        let expected = if change {
            DocumentKind::ChangeDumpManifest
        } else {
            DocumentKind::ResourceDumpManifest
        };
        if m.kind != expected {
            w.out.cross(
                Cross::ManifestKindMismatch,
                manifest_section,
                &manifest_url,
                format!(
                    "a package of a {} holds a {}, not a {}",
                    if change {
                        "Change Dump"
                    } else {
                        "Resource Dump"
                    },
                    m.kind.name(),
                    expected.name()
                ),
            );
        }
        if let Some(h) = &m.header {
            let base = Url::parse(u).unwrap_or_else(|_| url.clone());
            w.up_link(
                &base,
                &manifest_url,
                h.link("up").map(|l| l.href.as_str()),
                capability_list,
                manifest_section,
                "its Capability List",
            );
            w.part_times(&manifest_url, &url, h.md.as_ref(), md, manifest_section);
        }
        manifest_digest = m.digest;
    }
    for (rule, i, message) in outcome.items {
        w.out
            .cross(rule, manifest_section, &manifest_url, message)
            .entry(i);
    }

    // The published copy of the manifest (spec 11.1, 13.1: `contents`).
    let Some(link) = entry.link("contents") else {
        return Ok(());
    };
    if let Some(d) = &manifest_digest {
        if let Some(l) = link.length
            && l != d.length
        {
            w.out.cross(
                Cross::ManifestCopyMismatch,
                section,
                u,
                format!("the `contents` link states `length` {l}, the package's manifest.xml has {} bytes", d.length),
            );
        }
        for (stated, ours) in d.hash_mismatches(link.hash.as_ref()) {
            w.out.cross(
                Cross::ManifestCopyMismatch,
                section,
                u,
                format!("the `contents` link states `hash` {stated}, the package's manifest.xml has {ours}"),
            );
        }
    }
    let Ok(copy) = url.join(link.href.trim()) else {
        return Ok(());
    };
    if !w.claim(&copy) {
        return Ok(());
    }
    let copy_job = Job {
        url: copy.clone(),
        referrer: Some(url.clone()),
        entry: job.entry,
        expect: Expect::ManifestCopy {
            change,
            capability_list: capability_list.clone(),
        },
    };
    match w.open(&copy, true).await {
        Ok(o) => {
            let read = w.read(copy_job, o).await;
            if let (Some(theirs), Some(ours)) = (read.digest, manifest_digest)
                && (theirs.sha256 != ours.sha256 || theirs.length != ours.length)
            {
                w.out
                    .cross(
                        Cross::ManifestCopyMismatch,
                        section,
                        read.url.as_str(),
                        format!(
                            "the manifest copy ({} bytes, sha-256:{}) is not the package's manifest.xml ({} bytes, sha-256:{})",
                            theirs.length, theirs.sha256, ours.length, ours.sha256
                        ),
                    )
                    .related(u);
            }
        }
        Err(OpenError::Fetch(e)) => w.fetch_failed(&copy_job, e),
        Err(OpenError::Unreadable(at, p)) => {
            w.out.document(at.as_str(), vec![p], 1, 0);
            w.out.read(DocumentKind::Other.name(), 0, 0);
        }
    }
    Ok(())
}

fn io(what: &str, url: &Url, source: std::io::Error) -> Error {
    Error::Io {
        what: format!("{what} for the package {url}"),
        source,
    }
}

/// The blocking part: opening the package, reading its manifest in `mode`, hashing every
/// bitstream.
fn check(tmp: tempfile::NamedTempFile, name: &str, mode: Mode, room: usize) -> Outcome {
    let mut out = Outcome {
        invalid: None,
        package: Vec::new(),
        manifest: None,
        items: Vec::new(),
    };
    let reopen = || tmp.reopen();
    let file = match reopen() {
        Ok(f) => f,
        Err(e) => {
            out.invalid = Some(format!("cannot read the downloaded package: {e}"));
            return out;
        }
    };
    let mut package = match Package::open(file, name, Limits::default()) {
        Ok(p) => p,
        Err(e) => {
            out.invalid = Some(e.to_string());
            return out;
        }
    };
    // Its own checks; the manifest's reader problems (lenient) are replaced by the read
    // below in the walk's mode.
    out.package = package
        .problems()
        .iter()
        .filter(|p| p.code.starts_with("zip-") || p.code == "problems-omitted")
        .cloned()
        .collect();
    out.manifest = match reopen() {
        Ok(f) => Some(read_manifest(f, name, mode, room)),
        Err(e) => {
            out.invalid = Some(format!("cannot read the downloaded package: {e}"));
            return out;
        }
    };
    let wanted: Vec<(usize, Option<Hashes>, String)> = package
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, item)| !item.is_deletion() && item.zip_index.is_some())
        .map(|(i, item)| {
            (
                i,
                item.entry.md.as_ref().and_then(|m| m.hash.clone()),
                item.entry.loc.clone(),
            )
        })
        .collect();
    let mut buf = vec![0u8; 64 * 1024];
    for (i, hashes, loc) in wanted {
        let mut d = Digests::default();
        let read = match package.open_item(i) {
            Ok(mut r) => loop {
                match r.read(&mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(n) => d.update(&buf[..n]),
                    Err(e) => {
                        break Err(rsagg_dump::Error::from_io(&e)
                            .map_or_else(|| e.to_string(), ToString::to_string));
                    }
                }
            },
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = read {
            out.items.push((
                Cross::ZipItemInvalid,
                i as u64,
                format!("the bitstream of {loc} cannot be read: {e}"),
            ));
            continue;
        }
        for (stated, ours) in d.finish().hash_mismatches(hashes.as_ref()) {
            out.items.push((
                Cross::ZipHashMismatch,
                i as u64,
                format!("the manifest states `hash` {stated} for {loc}, its bitstream in the package has {ours}"),
            ));
        }
    }
    out
}

/// Reads `manifest.xml` of a package `rsagg-dump` has already checked whole, as a document
/// in `mode`, hashing its bytes.
fn read_manifest(file: std::fs::File, name: &str, mode: Mode, room: usize) -> Manifest {
    let limits = Limits::default();
    let mut m = Manifest {
        header: None,
        kind: DocumentKind::Other,
        problems: Vec::new(),
        errors: 0,
        warnings: 0,
        entries: 0,
        digest: None,
    };
    let fatal_of = |m: &mut Manifest, p: Problem| {
        m.problems.push(p);
        m.errors += 1;
    };
    let mut zip = match zip::ZipArchive::new(BufReader::new(file)) {
        Ok(z) => z,
        Err(e) => {
            fatal_of(
                &mut m,
                other_problem(format!("the ZIP cannot be read again: {e}")),
            );
            return m;
        }
    };
    let inner = match zip.by_name("manifest.xml") {
        Ok(f) => f,
        Err(e) => {
            fatal_of(
                &mut m,
                other_problem(format!("manifest.xml cannot be read: {e}")),
            );
            return m;
        }
    };
    let mut hashing = Hashing {
        inner: inner.take(limits.max_manifest_bytes),
        digests: Digests::default(),
    };
    let opts = ReadOptions {
        max_bytes: limits.max_manifest_bytes,
        max_entries: limits.max_entries as u64,
        max_problems: room,
        ..ReadOptions::new(mode, format!("{name}!/manifest.xml"))
    };
    let complete = match SyncReader::open(BufReader::new(&mut hashing), opts) {
        Ok(mut reader) => {
            m.header = Some(reader.header().clone());
            m.kind = reader.header().kind();
            let fatal = loop {
                match reader.next_entry() {
                    Ok(Some(_)) => {}
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            m.problems = reader.take_problems();
            m.errors = reader.validator().errors();
            m.warnings = reader.validator().warnings();
            m.entries = reader.entries_read();
            match fatal {
                None => true,
                Some(e) => {
                    fatal_of(&mut m, fatal_problem(&e));
                    false
                }
            }
        }
        Err(e) => {
            fatal_of(&mut m, fatal_problem(&e));
            false
        }
    };
    m.problems.sort_by_key(|p| (p.line, p.column));
    // The rest of the file (after the root's end) belongs to its bytes too.
    if complete && std::io::copy(&mut hashing, &mut std::io::sink()).is_ok() {
        m.digest = Some(hashing.digests.finish());
    }
    m
}

fn other_problem(message: String) -> Problem {
    fatal_problem(&rsagg_sitemap::Error::Write(message))
}

/// Hashes what is read through it.
struct Hashing<R> {
    inner: R,
    digests: Digests,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digests.update(&buf[..n]);
        Ok(n)
    }
}
