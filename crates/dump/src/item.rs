//! [`ItemReader`]: the bytes of one entry, inflated here and counted as they come.
//!
//! Nothing the headers say is taken on trust: every inflated byte is counted against the
//! entry limit, the ratio limit (× the compressed size, which the structure check made sure is
//! the real extent of the data) and the package's total, and against the declared size too
//! (data running past it is an error at once, data ending short of it at the end); the read
//! that would cross a bound fails without handing out its bytes. The limits are checked
//! first, so the error names the limit whenever one read crosses both. At the end the CRC-32
//! must equal the declared one; the read that delivers the last declared byte already looks
//! for the end, so a caller that stops after exactly the declared size still gets the
//! verdict. After any error the reader only returns errors.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};

use crate::structure::{FileInfo, METHOD_DEFLATED, RATIO_SLACK};
use crate::{Error, Limits};

enum State {
    Reading,
    Verified,
    Failed,
}

/// Reader over one entry's inflated bytes; see the module documentation.
pub(crate) struct ItemReader<'a> {
    inner: Box<dyn Read + 'a>,
    package: &'a str,
    entry: &'a str,
    declared: u64,
    crc: u32,
    compressed: u64,
    entry_limit: u64,
    ratio: u64,
    ratio_limit: u64,
    total_limit: u64,
    total: &'a mut u64,
    count: u64,
    hasher: crc32fast::Hasher,
    state: State,
    /// A copy of the error that stopped reading, for callers whose own reader (the manifest
    /// parser) turns `io::Error`s into text.
    failure: Option<Error>,
}

impl<'a> ItemReader<'a> {
    /// Positions `file` at the entry's data and starts the reader. `entry_limit` is the per
    /// entry cap (the manifest has its own).
    pub(crate) fn new(
        file: &'a File,
        info: &'a FileInfo,
        package: &'a str,
        limits: &Limits,
        entry_limit: u64,
        total: &'a mut u64,
    ) -> Result<Self, Error> {
        let mut f = file;
        f.seek(SeekFrom::Start(info.data_start))
            .map_err(|source| Error::Io {
                package: package.to_owned(),
                context: format!("seeking to the data of `{}`", info.name),
                source,
            })?;
        let raw = f.take(info.compressed);
        let inner: Box<dyn Read + 'a> = if info.method == METHOD_DEFLATED {
            Box::new(flate2::bufread::DeflateDecoder::new(
                BufReader::with_capacity(64 * 1024, raw),
            ))
        } else {
            Box::new(raw)
        };
        Ok(ItemReader {
            inner,
            package,
            entry: &info.name,
            declared: info.size,
            crc: info.crc,
            compressed: info.compressed,
            entry_limit,
            ratio: limits.max_ratio,
            ratio_limit: limits
                .max_ratio
                .saturating_mul(info.compressed)
                .saturating_add(RATIO_SLACK),
            total_limit: limits.max_total_bytes,
            total,
            count: 0,
            hasher: crc32fast::Hasher::new(),
            state: State::Reading,
            failure: None,
        })
    }

    fn fail(&mut self, e: Error) -> io::Error {
        self.state = State::Failed;
        self.failure = Some(e.replicate());
        e.into_io()
    }

    /// The error that stopped reading, if one did.
    pub(crate) fn take_failure(&mut self) -> Option<Error> {
        self.failure.take()
    }

    fn inner_error(&mut self, e: io::Error) -> io::Error {
        let err = match e.kind() {
            io::ErrorKind::InvalidData
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::UnexpectedEof => Error::Corrupt {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                message: e.to_string(),
            },
            _ => Error::Io {
                package: self.package.to_owned(),
                context: format!("reading `{}`", self.entry),
                source: e,
            },
        };
        self.fail(err)
    }

    /// The end of the data: sizes and CRC must match what the headers declare.
    fn verify(&mut self) -> io::Result<()> {
        if self.count != self.declared {
            let e = Error::SizeMismatch {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                declared: self.declared,
                actual: self.count,
                overrun: false,
            };
            return Err(self.fail(e));
        }
        let actual = self.hasher.clone().finalize();
        if actual != self.crc {
            let e = Error::Crc {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                declared: self.crc,
                actual,
            };
            return Err(self.fail(e));
        }
        self.state = State::Verified;
        Ok(())
    }

    fn overrun(&mut self, actual: u64) -> io::Error {
        let e = Error::SizeMismatch {
            package: self.package.to_owned(),
            entry: self.entry.to_owned(),
            declared: self.declared,
            actual,
            overrun: true,
        };
        self.fail(e)
    }
}

impl Read for ItemReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.state {
            State::Failed => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: `{}`: reading stopped after an earlier error",
                        self.package, self.entry
                    ),
                ));
            }
            State::Verified => return Ok(0),
            State::Reading => {}
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(e),
            Err(e) => return Err(self.inner_error(e)),
        };
        if n == 0 {
            self.verify()?;
            return Ok(0);
        }
        let count = self.count + n as u64;
        if count > self.entry_limit {
            let e = Error::EntryTooLarge {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                size: count,
                limit: self.entry_limit,
                declared: false,
            };
            return Err(self.fail(e));
        }
        if count > self.ratio_limit {
            let e = Error::RatioTooHigh {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                size: count,
                compressed: self.compressed,
                ratio: self.ratio,
                declared: false,
            };
            return Err(self.fail(e));
        }
        let total = self.total.saturating_add(n as u64);
        if total > self.total_limit {
            let e = Error::TotalTooLarge {
                package: self.package.to_owned(),
                entry: self.entry.to_owned(),
                total,
                limit: self.total_limit,
                declared: false,
            };
            return Err(self.fail(e));
        }
        if count > self.declared {
            return Err(self.overrun(count));
        }
        self.count = count;
        *self.total = total;
        self.hasher.update(&buf[..n]);
        if count == self.declared {
            // Look for the end now, so the last bytes come with the verdict.
            let mut probe = [0u8; 1];
            loop {
                match self.inner.read(&mut probe) {
                    Ok(0) => break,
                    Ok(_) => return Err(self.overrun(count + 1)),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.inner_error(e)),
                }
            }
            self.verify()?;
        }
        Ok(n)
    }
}
