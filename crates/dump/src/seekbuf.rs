//! [`SeekBuf`]: a write buffer over a file that can seek without flushing.
//!
//! The `zip` crate writes each file's local header, then its data, then seeks back to fill in
//! the header's CRC and sizes and forward again, and asks for the stream position several
//! times per file. `std::io::BufWriter` writes its buffer out on every seek (and
//! `stream_position` is a seek), so a package of many small files cost a `write` and a few
//! `lseek`s per file whatever the buffer's size. Here a seek is only arithmetic: writes that
//! land in the buffered tail of the file go to the buffer, writes before it (a header already
//! written out) go to the file at their offset (`pwrite`), and the buffer is written out
//! when full, on `flush`, and at the end.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

/// A buffered, seekable writer over `File`.
pub(crate) struct SeekBuf {
    file: File,
    /// Bytes not yet in the file, which belong at offset `base` on.
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    /// Where the next write goes.
    pos: u64,
    /// The buffer is written out rather than grow past this.
    capacity: usize,
    /// Whether `base` and `pos` were taken from the file yet (on first use, so that making
    /// one cannot fail).
    started: bool,
}

impl SeekBuf {
    /// A writer starting at `file`'s position when it is first used.
    pub(crate) fn new(file: File, capacity: usize) -> Self {
        SeekBuf {
            file,
            buf: Vec::new(),
            base: 0,
            pos: 0,
            capacity,
            started: false,
        }
    }

    fn start(&mut self) -> io::Result<()> {
        if !self.started {
            self.base = self.file.stream_position()?;
            self.pos = self.base;
            self.buf.reserve(self.capacity);
            self.started = true;
        }
        Ok(())
    }

    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// Writes the buffer out; the file then holds everything written so far.
    fn spill(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all_at(&self.buf, self.base)?;
            self.base += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// The file with everything written to it, its position where the next write would
    /// have gone (as `BufWriter::into_inner` leaves it).
    pub(crate) fn into_inner(mut self) -> io::Result<File> {
        self.start()?;
        self.spill()?;
        self.file.seek(SeekFrom::Start(self.pos))?;
        Ok(self.file)
    }
}

impl Write for SeekBuf {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.start()?;
        let mut data = data;
        let n = data.len();
        if self.pos > self.end() {
            // Past the end (a gap): what is buffered goes out first, the gap is left to the
            // file system.
            self.spill()?;
            self.base = self.pos;
        }
        if self.pos < self.base {
            // Before the buffer: that part goes straight to the file.
            let before = usize::try_from(self.base - self.pos)
                .unwrap_or(usize::MAX)
                .min(data.len());
            self.file.write_all_at(&data[..before], self.pos)?;
            self.pos += before as u64;
            data = &data[before..];
        }
        if data.is_empty() {
            return Ok(n);
        }
        if self.pos == self.end() && self.buf.len() + data.len() > self.capacity {
            // Appending past the capacity: what is buffered goes out first, so the buffer
            // never grows, and a piece as large as the buffer goes straight to the file.
            self.spill()?;
            if data.len() >= self.capacity {
                self.file.write_all_at(data, self.pos)?;
                self.pos += data.len() as u64;
                self.base = self.pos;
                return Ok(n);
            }
        }
        // Within or at the end of the buffer: overwrite, then extend.
        let at = (self.pos - self.base) as usize;
        let overlap = (self.buf.len() - at).min(data.len());
        self.buf[at..at + overlap].copy_from_slice(&data[..overlap]);
        self.buf.extend_from_slice(&data[overlap..]);
        self.pos += data.len() as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.start()?;
        self.spill()?;
        self.file.flush()
    }
}

impl Seek for SeekBuf {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.start()?;
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => {
                let len = self.file.metadata()?.len().max(self.end());
                len.checked_add_signed(d)
            }
        };
        self.pos = target.ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "seek to a negative position")
        })?;
        Ok(self.pos)
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        self.start()?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// The same writes and seeks through `SeekBuf` and straight to a file give the same bytes,
    /// whatever the buffer's size (tiny buffers make writes straddle what was written out).
    #[test]
    fn writes_and_seeks_give_the_same_file_as_unbuffered() {
        fn script(w: &mut (impl Write + Seek)) {
            for i in 0..50u32 {
                let header = w.stream_position().unwrap();
                w.write_all(&[0u8; 10]).unwrap();
                let body: Vec<u8> = (0..(i * 7 % 23)).map(|b| b as u8 ^ i as u8).collect();
                w.write_all(&body).unwrap();
                let end = w.stream_position().unwrap();
                w.seek(SeekFrom::Start(header + 2)).unwrap();
                w.write_all(&i.to_le_bytes()).unwrap();
                w.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
                w.seek(SeekFrom::Start(end)).unwrap();
            }
            let end = w.seek(SeekFrom::End(0)).unwrap();
            w.seek(SeekFrom::Current(-5)).unwrap();
            w.write_all(b"0123456789").unwrap();
            assert_eq!(w.stream_position().unwrap(), end + 5);
            // Past the end leaves a gap of zeros.
            w.seek(SeekFrom::Start(end + 20)).unwrap();
            w.write_all(b"tail").unwrap();
        }
        let mut plain = tempfile::tempfile().unwrap();
        script(&mut plain);
        let mut expected = Vec::new();
        plain.rewind().unwrap();
        plain.read_to_end(&mut expected).unwrap();
        for capacity in [1, 3, 16, 100, 1 << 16] {
            let mut w = SeekBuf::new(tempfile::tempfile().unwrap(), capacity);
            script(&mut w);
            let mut file = w.into_inner().unwrap();
            file.rewind().unwrap();
            let mut got = Vec::new();
            file.read_to_end(&mut got).unwrap();
            assert!(got == expected, "capacity {capacity}");
        }
    }
}
