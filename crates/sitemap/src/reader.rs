//! Streaming reader: the header first, then one entry at a time, in constant memory.
//!
//! Namespace handling follows the XML Namespaces recommendation, with quick-xml's
//! `NamespaceResolver`: any prefix bound to the ResourceSync namespace works, an element whose
//! name looks like ResourceSync's but whose namespace URI is wrong is reported (never silently
//! accepted), and elements of other namespaces (Sitemap extensions such as `image:`) are
//! skipped. DOCTYPE declarations are refused, so no entity can be declared or expanded; only
//! the five predefined entities and character references are resolved.
//!
//! Reading is split in two halves: the tokenizer (`tokenize.rs`: XML events, namespaces,
//! structure) and the builder (`build.rs`: typed values and validation). [`SyncReader`] runs
//! them one after the other on the caller's thread; [`crate::DocumentReader`] runs them on two
//! threads.

use std::io::BufRead;

use rsagg_model::{Header, HeaderSpans, Mode, Problem, UrlEntry, Validator};

use crate::Error;
use crate::build::Builder;
use crate::tokenize::{RawBatch, Tokenizer};

/// Limits and mode of a read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Strict (own output) or lenient (upstream) judgement.
    pub mode: Mode,
    /// Hard cap on bytes read (the whole document, as parsed).
    pub max_bytes: u64,
    /// Hard cap on entries.
    pub max_entries: u64,
    /// Problems kept (all are counted).
    pub max_problems: usize,
    /// Longest `<loc>` or `<rs:ln href>` of an entry, in bytes: an entry with a longer one is
    /// skipped (not returned; a [`rsagg_model::Rule::UriTooLong`] error quoting an excerpt,
    /// and counted in [`crate::Tally::skipped`]), so an upstream's 50 MB `<loc>` is never
    /// fetched, stored or echoed into logs and reports. Default
    /// [`ReadOptions::DEFAULT_MAX_URI_BYTES`].
    pub max_uri_bytes: usize,
    /// Name of the input (path or URL) used in error messages.
    pub source: String,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            mode: Mode::Lenient,
            max_bytes: 1 << 30,
            max_entries: 10_000_000,
            max_problems: 1000,
            max_uri_bytes: ReadOptions::DEFAULT_MAX_URI_BYTES,
            source: "<input>".into(),
        }
    }
}

impl ReadOptions {
    /// Default of [`ReadOptions::max_uri_bytes`]: 8 KiB, four times the 2,048 characters
    /// the Sitemap protocol allows a `<loc>` and about what HTTP servers accept in a request
    /// line.
    pub const DEFAULT_MAX_URI_BYTES: usize = 8 * 1024;

    /// Options for reading `source` in `mode` with default limits.
    pub fn new(mode: Mode, source: impl Into<String>) -> Self {
        ReadOptions {
            mode,
            source: source.into(),
            ..ReadOptions::default()
        }
    }
}

/// Entries tokenized ahead of building in [`SyncReader`].
const AHEAD: usize = 64;

/// Reads a ResourceSync document from buffered input on the caller's thread:
/// [`SyncReader::open`] parses up to the first entry and yields the [`Header`];
/// [`SyncReader::next_entry`] yields entries until the end of the document, checking each with
/// the [`Validator`] of the chosen mode.
pub struct SyncReader<R> {
    tokenizer: Tokenizer<R>,
    builder: Builder,
    batch: RawBatch,
    next: usize,
    /// End of document seen by the tokenizer, checked once the last batch is built.
    end: Option<(rsagg_model::Pos, u64)>,
    finished: bool,
}

impl<R: BufRead> SyncReader<R> {
    /// Parses the prolog, the root and its `<rs:md>`/`<rs:ln>` children.
    pub fn open(input: R, opts: ReadOptions) -> Result<Self, Error> {
        let mut builder = Builder::new(&opts);
        let mut tokenizer = Tokenizer::open(input, opts)?;
        let problems = tokenizer.take_problems();
        builder.header(tokenizer.header(), tokenizer.header_spans(), problems);
        Ok(SyncReader {
            tokenizer,
            builder,
            batch: RawBatch::with_capacity(AHEAD),
            next: 0,
            end: None,
            finished: false,
        })
    }

    /// The document header.
    pub fn header(&self) -> &Header {
        self.tokenizer.header()
    }

    /// Where the header's parts were found.
    pub fn header_spans(&self) -> &HeaderSpans {
        self.tokenizer.header_spans()
    }

    /// The validator (problems so far, counts, kind).
    pub fn validator(&self) -> &Validator {
        &self.builder.validator
    }

    /// Takes the problems found so far. Problems of the tokenizer may run a few entries ahead
    /// of the entries returned; [`Problem::entry`] tells which entry each concerns.
    pub fn take_problems(&mut self) -> Vec<Problem> {
        self.builder.validator.take_problems()
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.tokenizer.bytes_read()
    }

    /// Entries returned so far.
    pub fn entries_read(&self) -> u64 {
        self.builder.validator.entries()
    }

    /// Entries skipped so far (a URI over [`ReadOptions::max_uri_bytes`]).
    pub fn skipped(&self) -> u64 {
        self.builder.skipped
    }

    /// The next entry, or `None` at the end of the document (after the whole input was read
    /// and the document-level rules were checked). Entries with a URI over
    /// [`ReadOptions::max_uri_bytes`] are passed over.
    pub fn next_entry(&mut self) -> Result<Option<UrlEntry>, Error> {
        loop {
            let e = self.next_built()?;
            if !self.builder.last_skipped {
                return Ok(e);
            }
        }
    }

    fn next_built(&mut self) -> Result<Option<UrlEntry>, Error> {
        self.builder.last_skipped = false;
        if self.next == self.batch.entries.len() {
            if !self.finished && self.end.is_none() {
                self.batch.clear();
                self.next = 0;
                while self.batch.entries.len() < AHEAD
                    && self.tokenizer.next_raw(&mut self.batch)?
                {}
                self.end = self.batch.end.take();
                self.builder.absorb(&mut self.batch);
            }
            if self.next == self.batch.entries.len() {
                if let Some((end, bytes)) = self.end.take() {
                    self.builder.finish(end, bytes);
                    self.finished = true;
                }
                return Ok(None);
            }
        }
        let e = self.builder.build(&self.batch, self.next);
        if e.is_ok() {
            self.next += 1;
        }
        e
    }
}

/// A small document read whole: for rsagg's own documents in tests and checks, where holding
/// every entry is fine (large or untrusted documents are read entry by entry instead).
#[derive(Debug, Clone)]
pub struct Document {
    /// The root and its `rs:md`/`rs:ln`.
    pub header: Header,
    /// Every entry, in document order.
    pub entries: Vec<UrlEntry>,
    /// Every problem the validator reported (kept ones, see [`ReadOptions`]).
    pub problems: Vec<Problem>,
}

impl Document {
    /// The problems of severity error.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == rsagg_model::Severity::Error)
    }
}

/// Reads the whole document in `xml` with `opts`.
pub fn read_document(xml: &[u8], opts: ReadOptions) -> Result<Document, Error> {
    let mut r = SyncReader::open(xml, opts)?;
    let header = r.header().clone();
    let mut entries = Vec::new();
    while let Some(e) = r.next_entry()? {
        entries.push(e);
    }
    let problems = r.take_problems();
    Ok(Document {
        header,
        entries,
        problems,
    })
}
