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
//! A new blob is written straight to its address, created exclusively (`O_EXCL`): no staging
//! file and no rename, which were about a fifth of a baseline's harvest CPU. That is safe
//! because the address is the content: nothing refers to a blob before it is written whole
//! (the state commit that points at it comes after), and an existing file is never written
//! in place. When the address exists and the file holds the body (compared), it is left as it
//! is and its modification time renewed, which garbage collection's grace period relies on, as
//! a rewrite would; any other file there (short: a writer that crashed half-way, or one still
//! writing; or gone bad) is replaced as `LocalFileSystem` writes: the body goes to a staging file `{dest}#{n}`
//! (object_store's listing hides names ending in `#` and digits, so a staging file a crash
//! leaves behind is never taken for an object), then renamed onto `{dest}`, so a reader of
//! the existing file sees the whole blob or none. Like `LocalFileSystem` without `fsync`,
//! durability is the operating system's.

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
                    let result = write_blob(&job.dest, &job.chunks);
                    // The caller may have gone away (its task was cancelled): the blob
                    // is written anyway, which is harmless (content-addressed).
                    let _ = job.done.send(result);
                }
            })?;
    }
    Ok(tx)
}

/// Writes `chunks` as the blob `dest`: a new file when there is none, else nothing (the file
/// already holds these bytes: its modification time is renewed) or, when the file there is
/// not whole, a replacement through [`write_atomically`].
fn write_blob(dest: &Path, chunks: &[Bytes]) -> io::Result<()> {
    let length: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    match create_new(dest) {
        Ok(mut file) => {
            // A failed write leaves a short file, which the next write of this blob
            // replaces; it is not removed here, as by then it may be another writer's whole
            // replacement.
            chunks.iter().try_for_each(|c| file.write_all(c))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let whole = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(dest)
            {
                Ok(mut file) => holds(&mut file, length, chunks)?.then_some(file),
                Err(_) => None,
            };
            match whole {
                Some(file) => file.set_modified(std::time::SystemTime::now()),
                None => write_atomically(dest, chunks),
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether `file` holds exactly the bytes of `chunks` (`length` in all). Compared, not
/// assumed from the length: `run --baseline` stores every body again so that a blob gone bad
/// is written anew.
fn holds(file: &mut std::fs::File, length: u64, chunks: &[Bytes]) -> io::Result<bool> {
    if file.metadata()?.len() != length {
        return Ok(false);
    }
    let mut held = Vec::with_capacity(length as usize);
    io::Read::read_to_end(file, &mut held)?;
    let mut at = 0;
    for c in chunks {
        if held.get(at..at + c.len()) != Some(&c[..]) {
            return Ok(false);
        }
        at += c.len();
    }
    Ok(at == held.len())
}

/// Creates `dest` exclusively, creating its parent directories when missing.
fn create_new(dest: &Path) -> io::Result<std::fs::File> {
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest.parent().ok_or(e)?)?;
            open()
        }
        other => other,
    }
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

    #[tokio::test]
    async fn a_blob_is_written_in_place_once_and_a_short_one_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("blobs/sha256/ab/abcd");
        let w = LocalWriter::default();
        w.put(dest.clone(), vec![Bytes::from_static(b"whole body")])
            .await
            .unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole body");
        // Written again: the same file, its modification time renewed (garbage collection
        // spares blobs younger than its grace period).
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&dest)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = inode(&dest);
        w.put(dest.clone(), vec![Bytes::from_static(b"whole body")])
            .await
            .unwrap();
        assert_eq!(inode(&dest), before, "rewritten although whole");
        assert!(std::fs::metadata(&dest).unwrap().modified().unwrap() > old);
        // A blob gone bad (same length, other bytes) is written anew.
        std::fs::write(&dest, b"WHOLE body").unwrap();
        w.put(
            dest.clone(),
            vec![Bytes::from_static(b"whole "), Bytes::from_static(b"body")],
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole body");
        // What a writer that crashed half-way leaves: replaced by the whole blob, through a
        // rename (a reader that had the short file open keeps its bytes).
        std::fs::write(&dest, b"whole").unwrap();
        let mut short = std::fs::File::open(&dest).unwrap();
        w.put(dest.clone(), vec![Bytes::from_static(b"whole body")])
            .await
            .unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole body");
        let mut held = Vec::new();
        std::io::Read::read_to_end(&mut short, &mut held).unwrap();
        assert_eq!(held, b"whole");
        let names: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
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
