//! The ResourceSync document model: every document of ResourceSync Framework 1.1
//! (ANSI/NISO Z39.99-2017) and the Change Notification 1.0.1 payload, as plain types, plus the
//! rules that make a document valid. No I/O here: reading and writing XML is `rsagg-sitemap`.
//!
//! # Layout
//!
//! - [`datetime`]: W3C Datetime in every granularity, compared as instants.
//! - [`hash`]: the `hash` attribute (`md5:`, `sha-1:`, `sha-256:`, several per attribute).
//! - [`document`]: root, `<rs:md>`, `<rs:ln>`, entries, and the [`DocumentKind`] they add up to.
//! - [`validate`]: every rule of the spec with its section, judged in strict or lenient mode by
//!   a streaming [`Validator`].
//! - [`chain`]: [`ErrorChain`], an error with its causes on one line (for the `error` field of
//!   log lines in every crate; not part of the document model, but this is the one crate they
//!   all depend on).
//! - [`redact`]: credentials in URLs hidden ([`Redacted`], [`redact()`]) and upstream text cut
//!   to a bounded excerpt ([`Excerpt`], [`excerpt()`]) wherever text leaves the process.
//! - [`net`]: which IP addresses and host names are public (the address guard's judgement,
//!   shared by the HTTP client and the config check).

pub mod chain;
pub mod datetime;
pub mod document;
pub mod hash;
pub mod net;
pub mod redact;
pub mod validate;

pub use chain::ErrorChain;
pub use datetime::{Clock, DateTimeError, Precision, Tzd, W3cDateTime};
pub use document::{
    Capability, Change, ChangeFreq, DocumentKind, EntrySpans, ExtAttr, Header, HeaderSpans, Legacy,
    Link, Md, Pos, RS_NS, Root, SITEMAP_NS, UrlEntry,
};
pub use hash::{HashAlgorithm, HashValue, Hashes};
pub use redact::{Excerpt, Redacted, bounded, excerpt, redact};
pub use validate::{Mode, Problem, Rule, Severity, Validator};
