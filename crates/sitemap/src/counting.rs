//! An `AsyncBufRead` adapter that counts the bytes the parser consumes, refuses to read past a
//! cap, and remembers where lines start so byte offsets can be turned into line:column.
//!
//! Only newlines between the parser's position and the end of the read-ahead buffer are kept,
//! so memory stays bounded by the buffer size whatever the document length.

use std::collections::VecDeque;
use std::io::{self, BufRead, Read};

use rsagg_model::Pos;

/// Counting, capped, line-tracking reader.
#[derive(Debug)]
pub struct Counting<R> {
    inner: R,
    limit: u64,
    consumed: u64,
    scanned: u64,
    newlines: VecDeque<u64>,
    lines_before: u64,
    last_newline: Option<u64>,
}

impl<R> Counting<R> {
    /// Wraps `inner`, failing reads that would take the total past `limit` bytes.
    pub fn new(inner: R, limit: u64) -> Self {
        Counting {
            inner,
            limit,
            consumed: 0,
            scanned: 0,
            newlines: VecDeque::new(),
            lines_before: 0,
            last_newline: None,
        }
    }

    /// Bytes consumed by the parser so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Line and column of byte `offset`. Offsets must not decrease between calls (the parser
    /// only moves forward) and must not exceed what was consumed.
    pub fn pos(&mut self, offset: u64) -> Pos {
        while let Some(&nl) = self.newlines.front() {
            if nl >= offset {
                break;
            }
            self.newlines.pop_front();
            self.lines_before += 1;
            self.last_newline = Some(nl);
        }
        let line_start = self.last_newline.map_or(0, |nl| nl + 1);
        Pos {
            line: u32::try_from(self.lines_before + 1).unwrap_or(u32::MAX),
            column: u32::try_from(offset.saturating_sub(line_start) + 1).unwrap_or(u32::MAX),
        }
    }
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let buf = self.fill_buf()?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    /// Called several times per XML event, so the common case (nothing new) is one compare.
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let buf = self.inner.fill_buf()?;
        let end = self.consumed + buf.len() as u64;
        if end > self.scanned {
            if end > self.limit {
                return Err(io::Error::other(LimitExceeded(self.limit)));
            }
            let skip = (self.scanned - self.consumed) as usize;
            for i in memchr::memchr_iter(b'\n', &buf[skip..]) {
                self.newlines.push_back(self.scanned + i as u64);
            }
            self.scanned = end;
        }
        Ok(buf)
    }

    #[inline]
    fn consume(&mut self, amt: usize) {
        self.consumed += amt as u64;
        self.inner.consume(amt);
    }
}

/// The error inside the `io::Error` returned when the byte cap is hit.
#[derive(Debug, thiserror::Error)]
#[error("document is larger than the limit of {0} bytes")]
pub struct LimitExceeded(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut impl BufRead) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let n = r.fill_buf()?.len();
            if n == 0 {
                return Ok(total);
            }
            total += n;
            r.consume(n);
        }
    }

    #[test]
    fn positions_follow_lines() {
        let data = b"ab\ncde\n\nf".as_slice();
        let mut r = Counting::new(io::BufReader::with_capacity(2, data), 100);
        drain(&mut r).unwrap();
        assert_eq!(r.pos(0), Pos { line: 1, column: 1 });
        assert_eq!(r.pos(1), Pos { line: 1, column: 2 });
        assert_eq!(r.pos(3), Pos { line: 2, column: 1 });
        assert_eq!(r.pos(5), Pos { line: 2, column: 3 });
        assert_eq!(r.pos(8), Pos { line: 4, column: 1 });
    }

    #[test]
    fn cap_counts_bytes_actually_read() {
        let data = vec![b'x'; 100];
        let mut r = Counting::new(io::BufReader::with_capacity(16, data.as_slice()), 40);
        let err = drain(&mut r).unwrap_err();
        assert!(r.consumed() <= 40);
        assert!(err.to_string().contains("limit of 40 bytes"));
    }
}
