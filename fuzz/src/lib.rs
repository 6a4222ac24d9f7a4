//! Helpers shared by the fuzz targets in `fuzz_targets/` (see README.md).

pub mod dump;

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::{Mutex, OnceLock};

/// One scratch file per process, rewritten by every run: `rsagg_dump::Package::open` reads a
/// `File`. Created in `/dev/shm` when it exists (no disk I/O per run), else the temp dir,
/// and unlinked at once (`tempfile::tempfile_in`), so nothing is left behind.
pub fn scratch_file(bytes: &[u8]) -> File {
    static FILE: OnceLock<Mutex<File>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let dir = std::path::Path::new("/dev/shm");
        let f = if dir.is_dir() {
            tempfile::tempfile_in(dir)
        } else {
            tempfile::tempfile()
        };
        Mutex::new(f.expect("creating the scratch file"))
    });
    let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
    f.set_len(0).expect("truncating the scratch file");
    f.seek(SeekFrom::Start(0))
        .expect("rewinding the scratch file");
    f.write_all(bytes).expect("writing the scratch file");
    f.seek(SeekFrom::Start(0))
        .expect("rewinding the scratch file");
    f.try_clone().expect("cloning the scratch file handle")
}

/// Splits `data` at the first `\n\n`: (before, after); all of `data` is `after` without one.
pub fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (&[], data),
    }
}
