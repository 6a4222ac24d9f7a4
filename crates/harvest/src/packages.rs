//! Resource Dump and Change Dump packages (spec 11, 13): downloaded to a temporary file
//! (hash and length checked against the dump's entry), opened with every safety check of
//! `rsagg-dump` before anything is extracted, then read item by item on a blocking thread
//! and streamed to the caller through bounded channels.

use std::io::{Read, Seek, SeekFrom, Write};

use bytes::Bytes;
use futures::StreamExt;
use md5::Digest;
use rsagg_dump::{Limits, ManifestItem, Package};
use rsagg_fetch::{Access, Fetcher, Request};
use rsagg_model::{HashAlgorithm, UrlEntry};
use tokio::sync::mpsc;
use url::Url;

use crate::Error;

/// Bytes of one item, as they are inflated.
pub(crate) type ItemBody = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

enum Msg {
    Item(usize, mpsc::Receiver<Result<Bytes, std::io::Error>>),
    Failed(rsagg_dump::Error),
}

/// An opened package: its manifest items, and their bytes in manifest order.
pub(crate) struct PackageItems {
    /// The package URL.
    pub url: Url,
    /// Manifest items, in manifest order.
    pub items: Vec<ManifestItem>,
    rx: mpsc::Receiver<Msg>,
}

impl PackageItems {
    /// The next item with its bytes (`None` for a deletion), in manifest order.
    pub async fn next(&mut self) -> Option<Result<(ManifestItem, Option<ItemBody>), Error>> {
        match self.rx.recv().await? {
            Msg::Item(i, rx) => {
                let item = self.items.get(i)?.clone();
                let body: Option<ItemBody> = (!item.is_deletion()).then(|| {
                    futures::stream::unfold(
                        rx,
                        |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
                    )
                    .boxed()
                });
                Some(Ok((item, body)))
            }
            Msg::Failed(e) => Some(Err(Error::Dump(e))),
        }
    }
}

/// Downloads the package of dump entry `entry` (relative to `base`) and opens it.
pub(crate) async fn open_package(
    fetcher: &Fetcher,
    access: &Access,
    base: &Url,
    entry: &UrlEntry,
    max_bytes: u64,
) -> Result<PackageItems, Error> {
    let url = crate::lists::entry_url(base, entry, "11.1", "package ")?;
    let req = Request {
        max_bytes,
        ..Request::default()
    };
    let fetched = fetcher.get(&url, access, &req).await?;
    let io = |what: &str| {
        let what = format!("{what} {url}");
        move |source| Error::Io { what, source }
    };
    let mut file = tempfile::tempfile().map_err(io("creating a temporary file for"))?;
    let mut md5 = md5::Md5::new();
    let mut sha256 = sha2::Sha256::new();
    let mut length = 0u64;
    let mut body = fetched.body;
    // Small synchronous writes to a local temporary file; the download is the slow part.
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        md5.update(&chunk);
        sha256.update(&chunk);
        length += chunk.len() as u64;
        file.write_all(&chunk).map_err(io("writing"))?;
    }
    let md = entry.md.as_ref();
    let mismatch = |expected: String, got: String| Error::Upstream {
        url: url.to_string(),
        section: "11.1",
        message: format!("package differs from the dump's entry: expected {expected}, got {got}"),
    };
    if let Some(l) = md.and_then(|m| m.length)
        && l != length
    {
        return Err(mismatch(format!("length {l}"), format!("length {length}")));
    }
    let hex = |a, d: &[u8]| rsagg_model::HashValue::from_bytes(a, d).digest;
    let (md5, sha256) = (
        hex(HashAlgorithm::Md5, &md5.finalize()),
        hex(HashAlgorithm::Sha256, &sha256.finalize()),
    );
    for h in md
        .and_then(|m| m.hash.as_ref())
        .map(|h| h.0.as_slice())
        .unwrap_or_default()
    {
        let ours = match h.algorithm {
            HashAlgorithm::Md5 => &md5,
            HashAlgorithm::Sha256 => &sha256,
            _ => continue,
        };
        if h.is_well_formed() && !ours.eq_ignore_ascii_case(&h.digest) {
            return Err(mismatch(
                format!("{}:{}", h.algorithm.as_str(), h.digest),
                format!("{}:{ours}", h.algorithm.as_str()),
            ));
        }
    }
    file.seek(SeekFrom::Start(0)).map_err(io("rewinding"))?;
    let name = url.to_string();
    let package =
        tokio::task::spawn_blocking(move || Package::open(file, &name, Limits::default()))
            .await
            .map_err(|e| Error::Io {
                what: "opening a package".into(),
                source: std::io::Error::other(e),
            })??;
    for p in package.problems().iter().take(5) {
        tracing::warn!(package = %url, code = %p.code, "{}", p.message);
    }
    let items = package.entries().to_vec();
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || feed(package, tx));
    Ok(PackageItems { url, items, rx })
}

/// Reads every item on the blocking thread, 64 KiB at a time, into bounded channels.
fn feed(mut package: Package, tx: mpsc::Sender<Msg>) {
    for i in 0..package.entries().len() {
        let deletion = package.entries()[i].is_deletion();
        let (ctx, crx) = mpsc::channel(4);
        if tx.blocking_send(Msg::Item(i, crx)).is_err() {
            return;
        }
        if deletion {
            continue;
        }
        let mut reader = match package.open_item(i) {
            Ok(r) => r,
            Err(e) => {
                drop(ctx);
                let _ = tx.blocking_send(Msg::Failed(e));
                return;
            }
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // A receiver that is gone does not want this item: go on with the next.
                    if ctx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        break;
                    }
                }
                Err(e) => {
                    // The item's bytes end in an error, so nothing of it is kept.
                    let _ = ctx.blocking_send(Err(e));
                    return;
                }
            }
        }
    }
}
