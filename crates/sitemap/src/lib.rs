//! Streaming, namespace-correct reading and writing of ResourceSync documents (Sitemap
//! `<urlset>` and `<sitemapindex>` with the `rs:` extensions; spec sections 6.1, 7, 10.2).
//!
//! Nothing here builds a tree of a whole document: the reader yields the header and then one
//! entry at a time, the writers take entries one at a time, so a million-entry list costs the
//! memory of a few batches of entries plus I/O buffers (measured: under 40 MiB peak RSS for a
//! 1,000,000-entry list, parse or write).
//!
//! # Layout
//!
//! - [`reader`]: [`SyncReader`] over any `BufRead`, with byte and entry caps, no entity
//!   expansion, line:column for every problem, validation as it streams.
//! - [`stream`]: [`DocumentReader`] for async (or blocking) input on two cores: the tokenizer
//!   on a blocking thread hands raw entries over in bounded batches, the builder runs on the
//!   caller's task.
//! - [`writer`]: [`DocumentWriter`] for any document, and [`SplitWriter`], which turns a
//!   stream of entries into `<urlset>` parts of at most 50,000 entries / 50 MB plus a
//!   `<sitemapindex>` over them.
//! - `tokenize` and `build`: the two halves of the reader (XML structure; typed values and
//!   validation), which [`DocumentReader`] runs on two threads; `tokenize/fast.rs` is the
//!   tokenizer's byte-level fast path for entries of the common shape.
//! - `counting`: the byte-counting, line-tracking input adapter behind the reader.

mod build;
mod counting;
pub mod reader;
pub mod stream;
mod tokenize;
pub mod writer;

pub use reader::{Document, ReadOptions, SyncReader, read_document};
pub use stream::{DocumentReader, Tally};
pub use writer::{DocumentWriter, FsPartSink, PartSink, SplitOptions, SplitOutcome, SplitWriter};

/// Errors that stop reading or writing a document. Each names the input and, where there is
/// one, the line and column.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not well-formed XML (XML 1.0; spec section 7 builds on the Sitemap XML format).
    #[error("{source_name}:{line}:{column}: not well-formed XML: {message}")]
    Syntax {
        /// Input name.
        source_name: String,
        /// Line.
        line: u32,
        /// Column.
        column: u32,
        /// What the parser found.
        message: String,
    },
    /// The root is not `<urlset>`/`<sitemapindex>` in the Sitemap namespace (spec section 7).
    #[error("{source_name}:{line}:{column}: {message} (spec section 7)")]
    Root {
        /// Input name.
        source_name: String,
        /// Line.
        line: u32,
        /// Column.
        column: u32,
        /// Details.
        message: String,
    },
    /// A DOCTYPE declaration: refused so that no entity is ever declared or expanded.
    #[error(
        "{source_name}:{line}:{column}: DOCTYPE declarations are refused (no entity expansion)"
    )]
    Doctype {
        /// Input name.
        source_name: String,
        /// Line.
        line: u32,
        /// Column.
        column: u32,
    },
    /// Declared encoding other than UTF-8.
    #[error(
        "{source_name}: encoding `{encoding}` is not supported; ResourceSync documents are UTF-8"
    )]
    Encoding {
        /// Input name.
        source_name: String,
        /// Declared encoding.
        encoding: String,
    },
    /// The byte cap was reached (counted on bytes actually read).
    #[error("{source_name}: document is larger than the limit of {limit} bytes")]
    TooLarge {
        /// Input name.
        source_name: String,
        /// The cap.
        limit: u64,
    },
    /// The entry cap was reached.
    #[error("{source_name}: document has more than the limit of {limit} entries")]
    TooManyEntries {
        /// Input name.
        source_name: String,
        /// The cap.
        limit: u64,
    },
    /// Reading or writing failed.
    #[error("{source_name}: {error}")]
    Io {
        /// Input or output name.
        source_name: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The parsing thread of a [`DocumentReader`] ended without a result (it panicked or the
    /// runtime is shutting down).
    #[error("the document parser stopped unexpectedly")]
    Stopped,
    /// A writer was given something that cannot be written (e.g. an index over more than
    /// 50,000 parts).
    #[error("{0}")]
    Write(String),
}

impl Error {
    /// Line and column, when the error has them.
    pub fn pos(&self) -> Option<rsagg_model::Pos> {
        match self {
            Error::Syntax { line, column, .. }
            | Error::Root { line, column, .. }
            | Error::Doctype { line, column, .. } => Some(rsagg_model::Pos {
                line: *line,
                column: *column,
            }),
            _ => None,
        }
    }
}
