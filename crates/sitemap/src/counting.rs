//! An `AsyncBufRead` adapter that counts the bytes the parser consumes, refuses to read past a
//! cap, and remembers where lines start so byte offsets can be turned into line:column.
//!
//! Only newlines between the parser's position and the end of the read-ahead buffer are kept,
//! so memory stays bounded by the buffer size whatever the document length.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rsagg_model::Pos;
use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

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

impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // The XML reader only uses the buffered interface; plain reads are passed through
        // uncounted only for completeness of the trait.
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<R: AsyncBufRead + Unpin> AsyncBufRead for Counting<R> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        let buf = match Pin::new(&mut this.inner).poll_fill_buf(cx) {
            Poll::Ready(Ok(b)) => b,
            other => return other,
        };
        let end = this.consumed + buf.len() as u64;
        if end > this.limit {
            return Poll::Ready(Err(io::Error::other(LimitExceeded(this.limit))));
        }
        if end > this.scanned {
            let skip = (this.scanned - this.consumed) as usize;
            for i in memchr::memchr_iter(b'\n', &buf[skip..]) {
                this.newlines.push_back(this.scanned + i as u64);
            }
            this.scanned = end;
        }
        Poll::Ready(Ok(buf))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        let this = self.get_mut();
        this.consumed += amt as u64;
        Pin::new(&mut this.inner).consume(amt);
    }
}

/// The error inside the `io::Error` returned when the byte cap is hit.
#[derive(Debug, thiserror::Error)]
#[error("document is larger than the limit of {0} bytes")]
pub struct LimitExceeded(pub u64);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;

    #[tokio::test]
    async fn positions_follow_lines() {
        let data = b"ab\ncde\n\nf".as_slice();
        let mut r = Counting::new(tokio::io::BufReader::with_capacity(2, data), 100);
        let mut all = Vec::new();
        loop {
            let n = {
                let b = r.fill_buf().await.unwrap();
                if b.is_empty() {
                    break;
                }
                all.extend_from_slice(b);
                b.len()
            };
            Pin::new(&mut r).consume(n);
        }
        assert_eq!(r.pos(0), Pos { line: 1, column: 1 });
        assert_eq!(r.pos(1), Pos { line: 1, column: 2 });
        assert_eq!(r.pos(3), Pos { line: 2, column: 1 });
        assert_eq!(r.pos(5), Pos { line: 2, column: 3 });
        assert_eq!(r.pos(8), Pos { line: 4, column: 1 });
    }

    #[tokio::test]
    async fn cap_counts_bytes_actually_read() {
        let data = vec![b'x'; 100];
        let mut r = Counting::new(tokio::io::BufReader::with_capacity(16, data.as_slice()), 40);
        let mut total = 0;
        let err = loop {
            match r.fill_buf().await {
                Ok(b) if b.is_empty() => panic!("cap not hit"),
                Ok(b) => {
                    let n = b.len();
                    total += n;
                    Pin::new(&mut r).consume(n);
                }
                Err(e) => break e,
            }
        };
        assert!(total <= 40);
        assert!(err.to_string().contains("limit of 40 bytes"));
    }
}
