//! [`DocumentReader`]: the reader for async input. Parsing is CPU work, so the
//! [`SyncReader`] runs on a blocking thread (reading the async input through
//! `tokio_util::io::SyncIoBridge`) and hands entries over in batches through a bounded
//! channel: the async side never blocks the runtime, parsing overlaps with whatever the
//! consumer does, and at most `CHANNEL_BATCHES × BATCH` entries are in flight.

use rsagg_model::{DocumentKind, Header, Problem, UrlEntry};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;

use crate::{Error, ReadOptions, SyncReader};

/// Entries per batch handed from the parsing thread.
const BATCH: usize = 512;
/// Batches buffered between the threads.
const CHANNEL_BATCHES: usize = 4;

/// Counters of a read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Errors found (all, including those not kept).
    pub errors: u64,
    /// Warnings found.
    pub warnings: u64,
    /// Entries parsed.
    pub entries: u64,
    /// Bytes read (after any decompression).
    pub bytes: u64,
}

enum Msg {
    Batch {
        entries: Vec<UrlEntry>,
        problems: Vec<Problem>,
        tally: Tally,
    },
    End {
        problems: Vec<Problem>,
        tally: Tally,
    },
    Failed(Error),
}

/// Streaming reader over async input; see the module documentation.
pub struct DocumentReader {
    header: Header,
    kind: DocumentKind,
    rx: mpsc::Receiver<Msg>,
    current: std::vec::IntoIter<UrlEntry>,
    problems: Vec<Problem>,
    max_problems: usize,
    tally: Tally,
    returned: u64,
    done: bool,
}

fn tally_of<R: std::io::BufRead>(r: &SyncReader<R>) -> Tally {
    let v = r.validator();
    Tally {
        errors: v.errors(),
        warnings: v.warnings(),
        entries: r.entries_read(),
        bytes: r.bytes_read(),
    }
}

impl DocumentReader {
    /// Starts reading `input` and returns once the header has been parsed. Must be called
    /// inside a Tokio runtime.
    pub async fn open<R>(input: R, opts: ReadOptions) -> Result<Self, Error>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let max_problems = opts.max_problems;
        let bridge = tokio_util::io::SyncIoBridge::new(input);
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        tokio::task::spawn_blocking(move || {
            let input = std::io::BufReader::with_capacity(256 * 1024, bridge);
            let mut r = match SyncReader::open(input, opts) {
                Ok(r) => r,
                Err(e) => {
                    let _ = head_tx.send(Err(e));
                    return;
                }
            };
            let head = (
                r.header().clone(),
                r.validator().kind(),
                r.take_problems(),
                tally_of(&r),
            );
            if head_tx.send(Ok(head)).is_err() {
                return;
            }
            loop {
                let mut entries = Vec::with_capacity(BATCH);
                let mut end = false;
                while entries.len() < BATCH {
                    match r.next_entry() {
                        Ok(Some(e)) => entries.push(e),
                        Ok(None) => {
                            end = true;
                            break;
                        }
                        Err(e) => {
                            if !entries.is_empty() {
                                let _ = tx.blocking_send(Msg::Batch {
                                    entries,
                                    problems: r.take_problems(),
                                    tally: tally_of(&r),
                                });
                            }
                            let _ = tx.blocking_send(Msg::Failed(e));
                            return;
                        }
                    }
                }
                // A closed channel means the reader was dropped: stop parsing.
                if !entries.is_empty()
                    && tx
                        .blocking_send(Msg::Batch {
                            entries,
                            problems: r.take_problems(),
                            tally: tally_of(&r),
                        })
                        .is_err()
                {
                    return;
                }
                if end {
                    let _ = tx.blocking_send(Msg::End {
                        problems: r.take_problems(),
                        tally: tally_of(&r),
                    });
                    return;
                }
            }
        });
        let (header, kind, problems, tally) = match head_rx.await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Write(
                    "the parsing thread stopped before reading the header".into(),
                ));
            }
        };
        let mut reader = DocumentReader {
            header,
            kind,
            rx,
            current: Vec::new().into_iter(),
            problems: Vec::new(),
            max_problems,
            tally,
            returned: 0,
            done: false,
        };
        reader.keep(problems);
        Ok(reader)
    }

    fn keep(&mut self, problems: Vec<Problem>) {
        let room = self.max_problems.saturating_sub(self.problems.len());
        self.problems.extend(problems.into_iter().take(room));
    }

    /// The document header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The kind of document the header announces.
    pub fn kind(&self) -> DocumentKind {
        self.kind
    }

    /// The next entry; `None` once the whole document was read and checked.
    pub async fn next_entry(&mut self) -> Result<Option<UrlEntry>, Error> {
        loop {
            if let Some(e) = self.current.next() {
                self.returned += 1;
                return Ok(Some(e));
            }
            if self.done {
                return Ok(None);
            }
            match self.rx.recv().await {
                Some(Msg::Batch {
                    entries,
                    problems,
                    tally,
                }) => {
                    self.tally = tally;
                    self.keep(problems);
                    self.current = entries.into_iter();
                }
                Some(Msg::End { problems, tally }) => {
                    self.tally = tally;
                    self.keep(problems);
                    self.done = true;
                }
                Some(Msg::Failed(e)) => {
                    self.done = true;
                    return Err(e);
                }
                None => {
                    self.done = true;
                    return Err(Error::Write(
                        "the parsing thread stopped unexpectedly".into(),
                    ));
                }
            }
        }
    }

    /// Problems found so far (up to `max_problems`), in document order. They may run ahead
    /// of the entries returned; [`Problem::entry`] tells which entry each concerns.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Takes the problems kept so far.
    pub fn take_problems(&mut self) -> Vec<Problem> {
        std::mem::take(&mut self.problems)
    }

    /// Counters so far (final once `next_entry` returned `None`).
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// Entries returned by [`DocumentReader::next_entry`] so far.
    pub fn entries_returned(&self) -> u64 {
        self.returned
    }
}
