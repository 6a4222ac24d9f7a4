//! Reading a blob back, checked against its address: the bytes are SHA-256 hashed and
//! counted while they are read, and handed out only when they are the blob its address and
//! length name. A corrupt, truncated or missing blob is `None` (warned about), never bytes
//! that are not what the address promises: a reader (a dump package, an audit) cannot tell
//! them apart afterwards.
//!
//! Two ways in, both ending in [`Verified`]: through object_store ([`Blobs::read_verified`],
//! any store, async) and from a `file://` store's directory ([`Blobs::read_local_verified`],
//! blocking, for a thread that reads many blobs in a row without a blocking-thread hand-off
//! per blob).

use std::fs::File;
use std::io::{self, Read, Seek, Write};

use bytes::Bytes;
use futures::StreamExt;
use md5::Digest;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::{Blobs, Error};

/// Blobs up to this size are read into memory; larger ones are left in their file (local) or
/// spooled to a temporary file. Creating (and deleting) a file per resource costs more than
/// reading it for the small resources collections are mostly made of.
pub const IN_MEMORY: u64 = 256 << 10;
/// Bytes read from a local file at a time.
const READ_CHUNK: usize = 1 << 20;

/// A blob's bytes, checked against its address and length.
#[derive(Debug)]
pub enum Verified {
    /// Small: its bytes.
    Memory(Bytes),
    /// Large: a file (temporary, or the local blob itself) whose bytes start at `start`.
    /// Blobs are replaced by renaming, never rewritten in place, so the open file keeps the
    /// bytes that were hashed.
    File {
        /// The file.
        file: File,
        /// Where the blob starts in it.
        start: u64,
    },
}

impl Blobs {
    /// Blob `sha256` (`length` bytes) of `objects`, read whole (into memory up to
    /// [`IN_MEMORY`] bytes, else into a temporary file) and verified; `None` (warned) when it
    /// is missing or its bytes are not what its address and length say.
    pub async fn read_verified(
        objects: &dyn ObjectStore,
        sha256: &str,
        length: u64,
    ) -> Result<Option<Verified>, Error> {
        read_verified(objects, &Blobs::path(sha256), sha256, length, IN_MEMORY).await
    }

    /// Blob `sha256` (`length` bytes) of the `file://` store whose directory is `root` (see
    /// [`crate::StoreLocation::local_root`]), read on the calling thread (blocking) and
    /// verified: into memory up to [`IN_MEMORY`] bytes, else hashed in place and handed back
    /// as the open file. `None` (warned) when it is missing, `sha256` is not a blob address,
    /// or the bytes are not what the address and length say.
    pub fn read_local_verified(
        root: &std::path::Path,
        sha256: &str,
        length: u64,
    ) -> Result<Option<Verified>, Error> {
        let Some(file) = Blobs::local_path(root, sha256) else {
            tracing::warn!(sha256 = %sha256, "not a blob address");
            return Ok(None);
        };
        match File::open(&file) {
            Ok(f) => verify_file(f, 0, &Blobs::path(sha256), sha256, length, IN_MEMORY),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::warn!(blob = %file.display(), "blob missing");
                Ok(None)
            }
            Err(source) => Err(Error::Io { path: file, source }),
        }
    }
}

/// The object at `path` of `objects`, `length` bytes of SHA-256 `sha256`, read whole (into
/// memory up to `in_memory` bytes, else into a temporary file, or, from a local store, left in
/// its own file) and verified; `None` (warned) when it is missing or its bytes are not what
/// `sha256` and `length` say. A blob is checked against its address; a Resource Dump
/// package against the SHA-256 the dump published for it.
pub async fn read_verified(
    objects: &dyn ObjectStore,
    path: &Path,
    sha256: &str,
    length: u64,
    in_memory: u64,
) -> Result<Option<Verified>, Error> {
    let got = match objects.get(path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            tracing::warn!(object = %path, "object missing");
            return Ok(None);
        }
        Err(e) => return Err(Error::object_store(path, e)),
    };
    let start = got.range.start;
    let mut stream = match got.payload {
        object_store::GetResultPayload::File(file, _) => {
            let (sha256, path2) = (sha256.to_owned(), path.clone());
            return tokio::task::spawn_blocking(move || {
                verify_file(file, start, &path2, &sha256, length, in_memory)
            })
            .await
            .map_err(|e| io_error(path, io::Error::other(e)))?;
        }
        object_store::GetResultPayload::Stream(s) => s,
    };
    let mut file = if length <= in_memory {
        None
    } else {
        Some(tempfile::tempfile().map_err(|e| io_error(path, e))?)
    };
    // The first chunk is usually the whole of a small object: kept as it is, not copied.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut hasher = sha2::Sha256::new();
    let mut got_length = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::object_store(path, e))?;
        got_length += chunk.len() as u64;
        if got_length > length {
            break;
        }
        hasher.update(&chunk);
        match &mut file {
            // Small writes to a local temporary file; the download is the slow part.
            Some(f) => f.write_all(&chunk).map_err(|e| io_error(path, e))?,
            None => chunks.push(chunk),
        }
    }
    if !matches_address(path, sha256, length, got_length, hasher) {
        return Ok(None);
    }
    Ok(Some(match file {
        Some(file) => Verified::File { file, start: 0 },
        None if chunks.len() == 1 => Verified::Memory(chunks.swap_remove(0)),
        None => Verified::Memory(chunks.concat().into()),
    }))
}

fn io_error(path: &Path, source: io::Error) -> Error {
    Error::Io {
        path: path.as_ref().into(),
        source,
    }
}

/// The object `path` in `file` (bytes from `start`) read and checked against `sha256` and
/// `length`: into memory up to `in_memory` bytes, else left in `file`.
fn verify_file(
    mut file: File,
    start: u64,
    path: &Path,
    sha256: &str,
    length: u64,
    in_memory: u64,
) -> Result<Option<Verified>, Error> {
    let local = |e| io_error(path, e);
    file.seek(io::SeekFrom::Start(start)).map_err(local)?;
    let mut hasher = sha2::Sha256::new();
    // One byte more than expected, to notice a longer blob without reading all of it.
    let mut limited = Read::by_ref(&mut file).take(length.saturating_add(1));
    let (got_length, data) = if length <= in_memory {
        let mut all = Vec::with_capacity(length as usize + 1);
        limited.read_to_end(&mut all).map_err(local)?;
        hasher.update(&all);
        (all.len() as u64, Some(all))
    } else {
        let mut buf = vec![0u8; READ_CHUNK];
        let mut got = 0u64;
        loop {
            let n = limited.read(&mut buf).map_err(local)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            got += n as u64;
        }
        (got, None)
    };
    if !matches_address(path, sha256, length, got_length, hasher) {
        return Ok(None);
    }
    Ok(Some(match data {
        Some(bytes) => Verified::Memory(bytes.into()),
        None => Verified::File { file, start },
    }))
}

/// Whether `got_length` bytes hashed by `hasher` are the object `sha256` of `length` bytes;
/// warns when they are not.
fn matches_address(
    path: &Path,
    sha256: &str,
    length: u64,
    got_length: u64,
    hasher: sha2::Sha256,
) -> bool {
    let got = hex(&hasher.finalize());
    let ok = length == got_length && got == sha256;
    if !ok {
        tracing::warn!(
            object = %path,
            expected_length = length,
            length = got_length,
            sha256 = %got,
            expected_sha256 = %sha256,
            "object does not match its SHA-256 and length (corrupt or truncated)"
        );
    }
    ok
}

fn hex(digest: &[u8]) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;

    async fn stored(objects: &Arc<dyn ObjectStore>, body: &[u8]) -> crate::BlobInfo {
        let chunks = futures::stream::iter([Ok::<_, io::Error>(Bytes::copy_from_slice(body))]);
        Blobs::new(objects.clone())
            .put_stream("test", chunks, false)
            .await
            .unwrap()
    }

    fn bytes_of(v: Verified) -> Vec<u8> {
        match v {
            Verified::Memory(b) => b.to_vec(),
            Verified::File { mut file, start } => {
                file.seek(io::SeekFrom::Start(start)).unwrap();
                let mut out = Vec::new();
                file.read_to_end(&mut out).unwrap();
                out
            }
        }
    }

    #[tokio::test]
    async fn small_and_large_blobs_read_back_verified_and_corrupt_ones_are_none() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let large = vec![7u8; IN_MEMORY as usize + 10];
        for body in [b"small body".to_vec(), large] {
            let info = stored(&objects, &body).await;
            let v = Blobs::read_verified(objects.as_ref(), &info.sha256, info.length)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(bytes_of(v), body);
            // Another length, or other bytes at the address: refused.
            let wrong = Blobs::read_verified(objects.as_ref(), &info.sha256, info.length + 1)
                .await
                .unwrap();
            assert!(wrong.is_none());
            objects
                .put(&Blobs::path(&info.sha256), b"tampered".to_vec().into())
                .await
                .unwrap();
            let tampered = Blobs::read_verified(objects.as_ref(), &info.sha256, 8)
                .await
                .unwrap();
            assert!(tampered.is_none());
        }
        let missing = Blobs::read_verified(objects.as_ref(), &"0".repeat(64), 1)
            .await
            .unwrap();
        assert!(missing.is_none());
    }

    #[tokio::test]
    async fn a_local_store_reads_the_same_on_both_paths() {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let loc = crate::open_object_store(url.as_str()).unwrap();
        let root = loc.local_root.clone().unwrap();
        let large = vec![3u8; IN_MEMORY as usize * 2];
        for body in [b"a local body".to_vec(), large] {
            let info = stored(&loc.objects, &body).await;
            let local = Blobs::read_local_verified(&root, &info.sha256, info.length)
                .unwrap()
                .unwrap();
            assert_eq!(bytes_of(local), body);
            let through = Blobs::read_verified(loc.objects.as_ref(), &info.sha256, info.length)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(bytes_of(through), body);
            assert!(
                Blobs::read_local_verified(&root, &info.sha256, info.length - 1)
                    .unwrap()
                    .is_none()
            );
        }
        assert!(
            Blobs::read_local_verified(&root, "../etc", 1)
                .unwrap()
                .is_none()
        );
        assert!(
            Blobs::read_local_verified(&root, &"a".repeat(64), 1)
                .unwrap()
                .is_none()
        );
    }
}
