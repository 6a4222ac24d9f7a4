//! [`DocumentReader`]: the reader for async input, on two cores. The tokenizer (XML events,
//! namespaces, structure) runs on a blocking thread, reading the async input through
//! `tokio_util::io::SyncIoBridge`, and hands raw entries over in batches through a bounded
//! channel; the builder (typed values, validation) runs in `next_entry` on the caller's task.
//! Parsing never blocks the runtime, the two halves overlap, and at most
//! `CHANNEL_BATCHES × BATCH` entries are in flight.

use rsagg_model::{DocumentKind, Header, Problem, UrlEntry};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;

use crate::build::Builder;
use crate::tokenize::{RawBatch, Tokenizer};
use crate::{Error, ReadOptions};

/// Entries per batch handed from the tokenizer thread.
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
    /// Entries skipped: a URI over [`ReadOptions::max_uri_bytes`] (each also an error).
    pub skipped: u64,
}

enum Msg {
    Batch(RawBatch),
    Failed(Error),
}

/// Streaming reader over async input; see the module documentation.
pub struct DocumentReader {
    header: Header,
    builder: Builder,
    rx: mpsc::Receiver<Msg>,
    /// Consumed batches go back to the tokenizer, so their buffers are reused instead of
    /// fresh pages being faulted in for every batch.
    recycle: std::sync::mpsc::SyncSender<RawBatch>,
    batch: RawBatch,
    next: usize,
    bytes: u64,
    done: bool,
}

impl DocumentReader {
    /// Starts reading async `input` and returns once the header has been parsed. Must be
    /// called inside a Tokio runtime.
    pub async fn open<R>(input: R, opts: ReadOptions) -> Result<Self, Error>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        Self::open_blocking(tokio_util::io::SyncIoBridge::new(input), opts).await
    }

    /// Like [`DocumentReader::open`], for input that is read with blocking calls (a local
    /// file): the tokenizer thread reads it directly, without a hop through the runtime.
    pub async fn open_blocking<R>(input: R, opts: ReadOptions) -> Result<Self, Error>
    where
        R: std::io::Read + Send + 'static,
    {
        let mut builder = Builder::new(&opts);
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        // Bounded like the forward channel: at most that many spare batches wait.
        let (recycle, recycled) = std::sync::mpsc::sync_channel::<RawBatch>(CHANNEL_BATCHES);
        tokio::task::spawn_blocking(move || {
            let input = std::io::BufReader::with_capacity(256 * 1024, input);
            let mut t = match Tokenizer::open(input, opts) {
                Ok(t) => t,
                Err(e) => {
                    let _ = head_tx.send(Err(e));
                    return;
                }
            };
            let head = (
                t.header().clone(),
                t.header_spans().clone(),
                t.take_problems(),
                t.bytes_read(),
            );
            if head_tx.send(Ok(head)).is_err() {
                return;
            }
            loop {
                let mut batch = match recycled.try_recv() {
                    Ok(mut b) => {
                        b.clear();
                        b
                    }
                    Err(_) => RawBatch::with_capacity(BATCH),
                };
                let more = loop {
                    match t.next_raw(&mut batch) {
                        Ok(true) if batch.entries.len() < BATCH => {}
                        Ok(more) => break more,
                        Err(e) => {
                            if !batch.entries.is_empty() {
                                let _ = tx.blocking_send(Msg::Batch(batch));
                            }
                            let _ = tx.blocking_send(Msg::Failed(e));
                            return;
                        }
                    }
                };
                batch.bytes = t.bytes_read();
                // A closed channel means the reader was dropped: stop parsing.
                if tx.blocking_send(Msg::Batch(batch)).is_err() || !more {
                    return;
                }
            }
        });
        let (header, spans, problems, bytes) = match head_rx.await {
            Ok(r) => r?,
            Err(_) => return Err(Error::Stopped),
        };
        builder.header(&header, &spans, problems);
        Ok(DocumentReader {
            header,
            builder,
            rx,
            recycle,
            batch: RawBatch::default(),
            next: 0,
            bytes,
            done: false,
        })
    }

    /// The document header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The kind of document the header announces.
    pub fn kind(&self) -> DocumentKind {
        self.builder.validator.kind()
    }

    /// The next entry; `None` once the whole document was read and checked. Entries with a
    /// URI over [`ReadOptions::max_uri_bytes`] are passed over (counted in
    /// [`Tally::skipped`]).
    pub async fn next_entry(&mut self) -> Result<Option<UrlEntry>, Error> {
        loop {
            let e = self.next_built().await?;
            if !self.builder.last_skipped {
                return Ok(e);
            }
        }
    }

    async fn next_built(&mut self) -> Result<Option<UrlEntry>, Error> {
        self.builder.last_skipped = false;
        while self.next == self.batch.entries.len() {
            if let Some((end, bytes)) = self.batch.end.take() {
                self.builder.finish(end, bytes);
                self.done = true;
            }
            if self.done {
                return Ok(None);
            }
            match self.rx.recv().await {
                Some(Msg::Batch(mut b)) => {
                    self.builder.absorb(&mut b);
                    self.bytes = b.bytes;
                    let old = std::mem::replace(&mut self.batch, b);
                    // Full or closed: the batch is simply dropped. The first, empty placeholder
                    // is not worth sending back: it would be grown again from nothing.
                    if old.entries.capacity() > 0 {
                        let _ = self.recycle.try_send(old);
                    }
                    self.next = 0;
                }
                Some(Msg::Failed(e)) => {
                    self.done = true;
                    return Err(e);
                }
                None => {
                    self.done = true;
                    return Err(Error::Stopped);
                }
            }
        }
        let e = self.builder.build(&self.batch, self.next);
        if e.is_ok() {
            self.next += 1;
        }
        e
    }

    /// Problems found so far (up to `max_problems`). Problems of the tokenizer may run ahead
    /// of the entries returned; [`Problem::entry`] tells which entry each concerns.
    pub fn problems(&self) -> &[Problem] {
        self.builder.validator.problems()
    }

    /// Takes the problems kept so far.
    pub fn take_problems(&mut self) -> Vec<Problem> {
        self.builder.validator.take_problems()
    }

    /// Counters so far (final once `next_entry` returned `None`).
    pub fn tally(&self) -> Tally {
        let v = &self.builder.validator;
        Tally {
            errors: v.errors(),
            warnings: v.warnings(),
            entries: v.entries(),
            bytes: self.bytes,
            skipped: self.builder.skipped,
        }
    }
}
