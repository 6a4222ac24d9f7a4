//! Small blobs of a `file://` store, written by a few dedicated threads.
//!
//! Through object_store's `LocalFileSystem`, every `put` is one `spawn_blocking` hand-off:
//! a baseline storing thousands of small bodies at once grows tokio's blocking pool to dozens
//! of threads, each creating and renaming files in the same few fan-out directories (the
//! kernel serialises those on the directory's lock) and each warming its own allocator heap.
//! On the 2-core machine of record that cost about a fifth of a 10,000-resource baseline.
//! A fixed pair of writer threads fed by a bounded queue does the same writes with no lock
//! convoy and no thread churn, and lets the async side keep fetching meanwhile.
//!
//! The files are exactly what `LocalFileSystem` writes: the body goes to a staging file
//! `{dest}#{n}` (object_store's listing hides names ending in `#` and digits, so a staging
//! file a crash leaves behind is never taken for an object), which is then renamed onto
//! `{dest}`: a reader sees the whole blob or none. Like `LocalFileSystem` without `fsync`,
//! durability is the operating system's; the state commit that points at the blob comes
//! after the rename.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::Error;

/// Writer threads per store.
const THREADS: usize = 2;
/// Blobs queued for the writers (bounds the bodies held in memory waiting to be written).
const QUEUE: usize = 64;

struct Job {
    dest: PathBuf,
    chunks: Vec<Bytes>,
    done: oneshot::Sender<io::Result<()>>,
}

/// The writer threads of one local store, started at the first write; they stop when the
/// last clone is dropped.
#[derive(Clone, Default)]
pub(crate) struct LocalWriter {
    tx: Arc<OnceLock<mpsc::Sender<Job>>>,
}

impl std::fmt::Debug for LocalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalWriter")
            .field("started", &self.tx.get().is_some())
            .finish()
    }
}

impl LocalWriter {
    fn sender(&self) -> io::Result<&mpsc::Sender<Job>> {
        if let Some(tx) = self.tx.get() {
            return Ok(tx);
        }
        let tx = start()?;
        // Two first writes may race: the loser's threads stop at once (its sender drops).
        Ok(self.tx.get_or_init(|| tx))
    }

    /// Writes `chunks` as the file `dest` (staged, then renamed into place) and returns once
    /// it is there.
    pub(crate) async fn put(&self, dest: PathBuf, chunks: Vec<Bytes>) -> Result<(), Error> {
        let err = |source| Error::Io {
            path: dest.clone(),
            source,
        };
        let closed = || err(io::Error::other("the blob writer threads stopped"));
        let (done, rx) = oneshot::channel();
        let job = Job {
            dest: dest.clone(),
            chunks,
            done,
        };
        self.sender()
            .map_err(err)?
            .send(job)
            .await
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?.map_err(err)
    }
}

/// Starts the writer threads; they stop when every sender is dropped.
fn start() -> io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>(QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..THREADS {
        let rx = rx.clone();
        std::thread::Builder::new()
            .name(format!("rsagg-blob-writer-{i}"))
            .spawn(move || {
                loop {
                    // One thread waits on the queue while the other waits on the lock;
                    // a poisoned lock means the other thread panicked: stop too.
                    let job = match rx.lock() {
                        Ok(mut rx) => rx.blocking_recv(),
                        Err(_) => None,
                    };
                    let Some(job) = job else { break };
                    let result = write_atomically(&job.dest, &job.chunks);
                    // The caller may have gone away (its task was cancelled): the blob
                    // is written anyway, which is harmless (content-addressed).
                    let _ = job.done.send(result);
                }
            })?;
    }
    Ok(tx)
}

/// Writes `chunks` to a fresh staging file next to `dest`, then renames it onto `dest`.
fn write_atomically(dest: &Path, chunks: &[Bytes]) -> io::Result<()> {
    let (mut file, staging) = create_staging(dest)?;
    let written = chunks
        .iter()
        .try_for_each(|c| file.write_all(c))
        .and_then(|()| std::fs::rename(&staging, dest));
    if written.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    written
}

/// Creates `{dest}#{n}` exclusively (the first free `n`, so concurrent writers of the same
/// content never share a staging file), creating parent directories when missing.
fn create_staging(dest: &Path) -> io::Result<(std::fs::File, PathBuf)> {
    let mut n = 1u32;
    loop {
        let mut staging = dest.as_os_str().to_owned();
        staging.push(format!("#{n}"));
        let staging = PathBuf::from(staging);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staging)
        {
            Ok(f) => return Ok((f, staging)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = dest.parent().ok_or(e)?;
                std::fs::create_dir_all(parent)?;
                // Retried with the same `n`: the directory now exists.
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&staging);
                match f {
                    Ok(f) => return Ok((f, staging)),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_whole_files_and_leaves_no_staging_files() {
        let dir = tempfile::tempdir().unwrap();
        let w = LocalWriter::default();
        let chunks = vec![Bytes::from_static(b"hello "), Bytes::from_static(b"world")];
        w.put(dir.path().join("blobs/sha256/ab/abcd"), chunks.clone())
            .await
            .unwrap();
        // Overwriting the same content is harmless, as for any content-addressed store.
        w.put(dir.path().join("blobs/sha256/ab/abcd"), chunks)
            .await
            .unwrap();
        let p = dir.path().join("blobs/sha256/ab/abcd");
        assert_eq!(std::fs::read(&p).unwrap(), b"hello world");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("abcd")]);
    }

    #[test]
    fn a_taken_staging_name_moves_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x");
        std::fs::write(dir.path().join("x#1"), b"left by a crash").unwrap();
        let (_, staging) = create_staging(&dest).unwrap();
        assert_eq!(staging, dir.path().join("x#2"));
    }

    #[tokio::test]
    async fn a_failed_write_names_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        // A file where a directory is needed.
        std::fs::write(dir.path().join("blobs"), b"").unwrap();
        let w = LocalWriter::default();
        let e = w
            .put(
                dir.path().join("blobs/sha256/ab/abcd"),
                vec![Bytes::from_static(b"x")],
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("blobs/sha256/ab/abcd"), "{e}");
        // The writers survive a failed write.
        w.put(dir.path().join("other"), vec![Bytes::from_static(b"y")])
            .await
            .unwrap();
        assert_eq!(std::fs::read(dir.path().join("other")).unwrap(), b"y");
    }
}
