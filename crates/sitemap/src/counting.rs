//! An `AsyncBufRead` adapter that counts the bytes the parser consumes, refuses to read past a
//! cap, and remembers where lines start so byte offsets can be turned into line:column.
//!
//! Only newlines between the parser's position and the end of the read-ahead buffer are kept,
//! so memory stays bounded by the buffer size whatever the document length.
//!
//! A UTF-8 byte order mark at the very start is removed here, before the XML parser sees the
//! input: quick-xml recognises one only when its first buffer holds all three bytes (a
//! response whose first read returns one or two bytes made the document "text before the root
//! element"), and it leaves the mark out of its own byte positions while the line starts kept
//! here counted it, so every line:column reported after a mark was three bytes off. Offsets
//! ([`Counting::consumed`], [`Counting::pos`]) are therefore counted from after the mark; the
//! mark still counts towards the byte cap and [`Counting::total`].

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
    /// Where the check for a byte order mark at the start stands.
    start: Start,
    /// Bytes of byte order marks removed (3 per mark).
    bom: u64,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// The byte order mark check, done on the first `fill_buf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Nothing read yet.
    Unchecked,
    /// The input began with `len` bytes of a mark but not the whole mark: those bytes were
    /// taken from the inner reader and are handed out first, from `at`.
    Held { len: u8, at: u8 },
    /// Checked (and any mark removed); everything comes from the inner reader.
    Done,
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
            start: Start::Unchecked,
            bom: 0,
        }
    }

    /// Bytes consumed by the parser so far, after any byte order mark: the offset of the
    /// parser's position, in the same terms as the XML reader's own.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Bytes read from the input so far, a byte order mark included (what the cap counts).
    pub fn total(&self) -> u64 {
        self.consumed + self.bom
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

impl<R: BufRead> Counting<R> {
    /// Removes byte order marks at the start, reading them byte by byte so that they are
    /// found whatever the inner reader's buffers; bytes that began like one but were not are
    /// held and handed out first. Several marks are all removed: quick-xml would remove a
    /// second one only when its first buffer held it whole.
    #[cold]
    fn check_start(&mut self) -> io::Result<()> {
        let mut seen = 0u8;
        loop {
            let buf = self.inner.fill_buf()?;
            match buf.first() {
                Some(&b) if b == BOM[usize::from(seen)] => {
                    if self.bom + u64::from(seen) + 1 > self.limit {
                        return Err(io::Error::other(LimitExceeded(self.limit)));
                    }
                    self.inner.consume(1);
                    seen += 1;
                    if seen == 3 {
                        self.bom += 3;
                        seen = 0;
                    }
                }
                _ => break,
            }
        }
        self.start = match seen {
            0 => Start::Done,
            len => Start::Held { len, at: 0 },
        };
        Ok(())
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    /// Called several times per XML event, so the common case (nothing new) is one compare.
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start != Start::Done {
            if self.start == Start::Unchecked {
                self.check_start()?;
            }
            if let Start::Held { len, at } = self.start {
                // No newline among them, nothing to scan; within the cap, checked on reading.
                self.scanned = self.scanned.max(self.consumed + u64::from(len - at));
                return Ok(&BOM[usize::from(at)..usize::from(len)]);
            }
        }
        let buf = self.inner.fill_buf()?;
        let end = self.consumed + buf.len() as u64;
        if end > self.scanned {
            if end + self.bom > self.limit {
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
        if let Start::Held { len, at } = self.start {
            // Only what `fill_buf` returned, that is the held bytes, can be consumed here.
            let at = at + u8::try_from(amt).unwrap_or(u8::MAX).min(len - at);
            self.start = if at == len {
                Start::Done
            } else {
                Start::Held { len, at }
            };
            return;
        }
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

    /// Found by the `sitemap_tokenizer` fuzz target: a mark read in buffers of one or two
    /// bytes, and positions after a mark. The mark is gone whatever the buffer size, offsets
    /// start after it, and it still counts towards the total.
    #[test]
    fn byte_order_mark_is_removed_whatever_the_buffers() {
        let data = b"\xEF\xBB\xBF<a>\n<b/>".as_slice();
        for cap in [1, 2, 3, 64] {
            let mut r = Counting::new(io::BufReader::with_capacity(cap, data), 100);
            let mut out = Vec::new();
            r.read_to_end(&mut out).unwrap();
            assert_eq!(out, b"<a>\n<b/>", "buffers of {cap}");
            assert_eq!(r.consumed(), 8);
            assert_eq!(r.total(), 11);
            assert_eq!(r.pos(4), Pos { line: 2, column: 1 }, "buffers of {cap}");
        }
        // Two marks: both removed.
        let mut r = Counting::new(
            io::BufReader::with_capacity(1, &b"\xEF\xBB\xBF\xEF\xBB\xBFa"[..]),
            100,
        );
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!((out.as_slice(), r.total()), (&b"a"[..], 7));
        // The beginning of a mark that is not one is input like any other.
        for data in [&b"\xEF\xBBx"[..], b"\xEF", b"\xEF\xBB"] {
            for cap in [1, 2, 64] {
                let mut r = Counting::new(io::BufReader::with_capacity(cap, data), 100);
                let mut out = Vec::new();
                r.read_to_end(&mut out).unwrap();
                assert_eq!(out, data, "buffers of {cap}");
                assert_eq!(r.total(), data.len() as u64);
            }
        }
        // The mark counts towards the cap.
        let mut r = Counting::new(io::BufReader::with_capacity(64, data), 10);
        assert!(drain(&mut r).is_err());
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
