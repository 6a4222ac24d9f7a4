//! Content-addressed bodies: `blobs/sha256/ab/abcdef…`.
//!
//! The address is only known once the whole body was hashed, so small bodies are buffered
//! (bounded by [`SMALL_BODY`]) and written with one `PUT` (an existing blob at that address is
//! the same bitstream, so overwriting it is harmless), while large bodies stream through
//! a multipart upload to a temporary key and are then copied to their address. Memory stays
//! bounded either way. Either way every store renews the blob's last-modified time: garbage
//! collection spares blobs younger than its grace period, so a blob a harvest has just
//! stored again survives until the record pointing at it is committed.

use std::fmt::Display;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use md5::Digest;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use rsagg_model::{HashAlgorithm, HashValue};

use crate::Error;
use crate::StoreLocation;
use crate::local::LocalWriter;
use crate::recent::{self, RecentBlobs};
use crate::spool::Spool;

/// Bodies up to this size are buffered and written with one request.
pub const SMALL_BODY: usize = 8 * 1024 * 1024;
/// Part size and parts in flight of a multipart upload (bounds memory for large bodies).
const PART: usize = 8 * 1024 * 1024;
const PARTS_IN_FLIGHT: usize = 2;

/// What a stored body is: its digests (lowercase hex) and length.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobInfo {
    /// SHA-256, the address.
    pub sha256: String,
    /// MD5 (republished as `md5:` in `rs:md hash`).
    pub md5: String,
    /// SHA-1, computed only when an upstream gave one to check against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    /// Bytes.
    pub length: u64,
}

/// The blob area of a store.
#[derive(Debug, Clone)]
pub struct Blobs {
    objects: Arc<dyn ObjectStore>,
    /// A `file://` store's root and the writer threads for its small bodies (see
    /// `local.rs`).
    local: Option<(std::path::PathBuf, LocalWriter)>,
    /// Where the bodies of small blobs go once stored (see `recent.rs`).
    recent: RecentBlobs,
    /// Where the bodies of resources go once stored, for the Resource Dump (see `spool.rs`).
    spool: Spool,
}

struct Hashers {
    md5: md5::Md5,
    sha256: sha2::Sha256,
    sha1: Option<sha1::Sha1>,
    length: u64,
}

impl Hashers {
    fn update(&mut self, chunk: &[u8]) {
        self.md5.update(chunk);
        self.sha256.update(chunk);
        if let Some(s) = &mut self.sha1 {
            s.update(chunk);
        }
        self.length += chunk.len() as u64;
    }

    fn finish(self) -> BlobInfo {
        BlobInfo {
            sha256: hex(HashAlgorithm::Sha256, &self.sha256.finalize()),
            md5: hex(HashAlgorithm::Md5, &self.md5.finalize()),
            sha1: self.sha1.map(|s| hex(HashAlgorithm::Sha1, &s.finalize())),
            length: self.length,
        }
    }
}

/// Lowercase hex, as `rs:md hash` values are written.
fn hex(algorithm: HashAlgorithm, digest: &[u8]) -> String {
    HashValue::from_bytes(algorithm, digest).digest
}

impl Blobs {
    /// The blob area of `objects`.
    pub fn new(objects: Arc<dyn ObjectStore>) -> Self {
        Blobs {
            objects,
            local: None,
            recent: RecentBlobs::none(),
            spool: Spool::none(),
        }
    }

    /// The blob area of an opened store: for a `file://` store, small bodies are written by
    /// two dedicated threads instead of one blocking-pool hand-off each (see `local.rs`);
    /// the files are the ones `objects` reads. Small bodies stored are kept in
    /// [`StoreLocation::recent`], and the bodies of resources ([`Blobs::put_resource`]) in
    /// [`StoreLocation::spool`].
    pub fn for_location(loc: &StoreLocation) -> Self {
        Blobs {
            objects: loc.objects.clone(),
            local: loc
                .local_root
                .clone()
                .map(|root| (root, LocalWriter::default())),
            recent: loc.recent.clone(),
            spool: loc.spool.clone(),
        }
    }

    /// The object path of the blob with this SHA-256 (hex).
    pub fn path(sha256: &str) -> Path {
        let fan = sha256.get(..2).unwrap_or("00");
        Path::from(format!("blobs/sha256/{fan}/{sha256}"))
    }

    /// The file of the blob with this SHA-256 in a `file://` store rooted at `root`
    /// ([`crate::StoreLocation::local_root`]): where the store keeps [`Blobs::path`]. `None`
    /// when `sha256` is not 64 lowercase hex digits, which no blob's address is (and which
    /// must not become a file name).
    pub fn local_path(root: &std::path::Path, sha256: &str) -> Option<std::path::PathBuf> {
        let hex = sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        hex.then(|| root.join(Self::path(sha256).as_ref()))
    }

    /// Stores `body` (read to its end), hashing it on the way; returns what was stored.
    /// `uri` names the body in errors. SHA-1 is computed when `sha1` is set.
    pub async fn put_stream<S, E>(&self, uri: &str, body: S, sha1: bool) -> Result<BlobInfo, Error>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Display,
    {
        self.put(uri, None, body, sha1).await
    }

    /// [`Blobs::put_stream`] for the body of resource `uri` of upstream `upstream`: once
    /// stored, a body the store holds in memory anyway (up to [`SMALL_BODY`]) is also spooled
    /// ([`StoreLocation::spool`]) under the resource's slot ([`crate::slot_of`]), where the
    /// Resource Dump, listing the collection in slot order, finds it without a GET.
    pub async fn put_resource<S, E>(
        &self,
        upstream: &str,
        uri: &str,
        body: S,
        sha1: bool,
    ) -> Result<BlobInfo, Error>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Display,
    {
        let slot = (!self.spool.is_off()).then(|| crate::slot_of(upstream, uri));
        self.put(uri, slot, body, sha1).await
    }

    async fn put<S, E>(
        &self,
        uri: &str,
        slot: Option<u16>,
        body: S,
        sha1: bool,
    ) -> Result<BlobInfo, Error>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Display,
    {
        let mut body = body;
        let mut h = Hashers {
            md5: md5::Md5::new(),
            sha256: sha2::Sha256::new(),
            sha1: sha1.then(sha1::Sha1::new),
            length: 0,
        };
        let body_err = |e: &dyn Display| Error::Body {
            uri: uri.to_owned(),
            message: e.to_string(),
        };
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut buffered = 0usize;
        let mut upload: Option<(Path, WriteMultipart)> = None;
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    abort(upload).await;
                    return Err(body_err(&e));
                }
            };
            h.update(&chunk);
            if let Some((_, w)) = &mut upload {
                if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    let path = upload
                        .as_ref()
                        .map(|(p, _)| p.to_string())
                        .unwrap_or_default();
                    abort(upload).await;
                    return Err(Error::ObjectStore { path, source: e });
                }
                w.write(&chunk);
                continue;
            }
            buffered += chunk.len();
            chunks.push(chunk);
            if buffered > SMALL_BODY {
                let tmp = Path::from(format!(
                    "blobs/tmp/{:016x}{:016x}",
                    fastrand::u64(..),
                    fastrand::u64(..)
                ));
                let mp = self.objects.put_multipart(&tmp).await.map_err(|source| {
                    Error::ObjectStore {
                        path: tmp.to_string(),
                        source,
                    }
                })?;
                let mut w = WriteMultipart::new_with_chunk_size(mp, PART);
                for c in chunks.drain(..) {
                    w.write(&c);
                }
                upload = Some((tmp, w));
            }
        }
        let info = h.finish();
        let dest = Self::path(&info.sha256);
        let os_err = |path: &Path| {
            let path = path.to_string();
            move |source| Error::ObjectStore { path, source }
        };
        match upload {
            None => {
                // Kept once the store has it: the bytes just hashed to this address. Copied,
                // because a chunk is often a slice of the client's read buffer, which it
                // would keep alive whole.
                let keep = (info.length <= recent::MAX_BODY as u64 && !self.recent.is_off())
                    .then(|| Bytes::from(chunks.concat()));
                // Spooled once the store has it, as it is kept (the spool copies).
                let spooled = slot.map(|slot| (slot, chunks.clone()));
                // A plain overwrite: the key is the content, so replacing an existing blob
                // (another upstream's identical bitstream, or a concurrent writer) changes
                // nothing, and it costs one rename locally and one PUT on S3, where a
                // conditional create costs a link and an unlink, or a 412 round trip.
                let local = self.local.as_ref().and_then(|(root, writer)| {
                    Some((Self::local_path(root, &info.sha256)?, writer))
                });
                match local {
                    Some((file, writer)) => writer.put(file, chunks).await?,
                    None => {
                        self.objects
                            .put(&dest, PutPayload::from_iter(chunks))
                            .await
                            .map_err(os_err(&dest))?;
                    }
                }
                if let Some(body) = keep {
                    self.recent.insert(&info.sha256, body);
                }
                if let Some((slot, chunks)) = spooled {
                    self.spool.insert(slot, &info.sha256, &chunks).await;
                }
            }
            Some((tmp, w)) => {
                w.finish().await.map_err(os_err(&tmp))?;
                // Copied even when the address exists (same address, same bytes: overwriting
                // is harmless): the copy renews the blob's last-modified time, which garbage
                // collection's grace period relies on to spare a blob a harvest has just
                // stored but not yet committed a record for.
                self.objects
                    .copy(&tmp, &dest)
                    .await
                    .map_err(os_err(&dest))?;
                if let Err(e) = self.objects.delete(&tmp).await {
                    tracing::warn!(path = %tmp, error = %rsagg_model::ErrorChain(&e), "could not delete temporary upload");
                }
            }
        }
        Ok(info)
    }

    /// Whether the blob exists.
    pub async fn exists(&self, sha256: &str) -> Result<bool, Error> {
        let p = Self::path(sha256);
        match self.objects.head(&p).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(Error::ObjectStore {
                path: p.to_string(),
                source,
            }),
        }
    }

    /// The blob's bytes, streamed.
    pub async fn get(
        &self,
        sha256: &str,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes, object_store::Error>>, Error>
    {
        let p = Self::path(sha256);
        let r = self
            .objects
            .get(&p)
            .await
            .map_err(|source| Error::ObjectStore {
                path: p.to_string(),
                source,
            })?;
        Ok(r.into_stream())
    }
}

async fn abort(upload: Option<(Path, WriteMultipart)>) {
    if let Some((path, w)) = upload
        && let Err(e) = w.abort().await
    {
        tracing::warn!(%path, error = %rsagg_model::ErrorChain(&e), "could not abort multipart upload");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(HashAlgorithm::Md5, &[0x00, 0xab, 0x7f]), "00ab7f");
    }

    #[test]
    fn paths_fan_out_by_prefix() {
        assert_eq!(Blobs::path("abcd").to_string(), "blobs/sha256/ab/abcd");
    }

    #[tokio::test]
    async fn a_local_stores_blob_is_the_file_at_its_local_path() {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let loc = crate::open_object_store(url.as_str()).unwrap();
        let body = Bytes::from_static(b"a body");
        let info = Blobs::new(loc.objects.clone())
            .put_stream(
                "u",
                futures::stream::iter([Ok::<_, std::convert::Infallible>(body.clone())]),
                false,
            )
            .await
            .unwrap();
        let root = loc.local_root.unwrap();
        let file = Blobs::local_path(&root, &info.sha256).unwrap();
        assert_eq!(std::fs::read(file).unwrap(), body);
        for not_an_address in [
            "abcd",
            "../../../../etc/passwd",
            &info.sha256.to_uppercase(),
        ] {
            assert_eq!(Blobs::local_path(&root, not_an_address), None);
        }
    }
}
