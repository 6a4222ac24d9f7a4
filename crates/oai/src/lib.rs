//! rsagg-oai: the OAI-PMH 2.0 protocol, as an rsagg upstream speaks it.
//!
//! Most repositories an aggregator harvests (DSpace, EPrints, OJS, Invenio, Fedora) expose
//! the Open Archives Initiative Protocol for Metadata Harvesting 2.0, not ResourceSync; the
//! ResourceSync framework (ANSI/NISO Z39.99-2017, section 1) names metadata harvesting as
//! its first motivation. This crate is the protocol only: the request URLs of the six verbs
//! a harvester uses, the parsing of their responses (one page at a time, records kept as
//! the bytes the provider sent), and the datestamps with the repository's granularity. It
//! does no I/O: fetching (politeness, `503` with `Retry-After`, size caps) is
//! `rsagg-fetch`'s, the harvest loop (`resumptionToken`s, `from`/`until`) `rsagg-harvest`'s,
//! like `rsagg-sitemap` for ResourceSync documents.
//!
//! Section numbers in errors and comments are those of the OAI-PMH 2.0 specification
//! (<http://www.openarchives.org/OAI/openarchivesprotocol.html>).
//!
//! # Layout
//!
//! - `datestamp.rs`: [`Granularity`] and [`Datestamp`]: UTC datestamps of day or second
//!   granularity (section 3.3.1), read leniently (with or without `Z`), the `from` of an
//!   incremental harvest one unit before the last datestamp seen.
//! - `request.rs`: [`Request`], the verbs and arguments (section 3.1), as URLs.
//! - `response.rs`: [`parse`]: a response page into a [`Response`] — `Identify`
//!   (section 4.2), `ListMetadataFormats` (4.4), `ListRecords`/`GetRecord` records (4.5,
//!   4.1) with their `resumptionToken` (3.5), or the protocol's errors (3.6) — with the
//!   problems of single records counted apart so one bad record never loses the page.

mod datestamp;
mod request;
mod response;

pub use datestamp::{Datestamp, Granularity};
pub use request::Request;
pub use response::{
    DeletedRecord, Header, Identify, MetadataFormat, OaiError, Page, Record, RecordProblem,
    Response, ResumptionToken, parse,
};

/// The OAI-PMH 2.0 namespace (section 3.2).
pub const OAI_NS: &str = "http://www.openarchives.org/OAI/2.0/";

/// Why an OAI-PMH response could not be read at all (a single bad record is a
/// [`RecordProblem`], not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The response is not well-formed XML.
    #[error("{url}: not well-formed XML at byte {position}: {message} (OAI-PMH 2.0 section 3.2)")]
    Xml {
        /// The request URL.
        url: String,
        /// Byte offset of the error.
        position: u64,
        /// quick-xml's message.
        message: String,
    },
    /// Well-formed, but not an OAI-PMH response of the verb asked.
    #[error("{url}: not an OAI-PMH response: {message} (OAI-PMH 2.0 section 3.2)")]
    NotOai {
        /// The request URL.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// A value the protocol defines could not be read (a datestamp, a granularity).
    #[error("{url}: {message} (OAI-PMH 2.0 section {section})")]
    Value {
        /// The request URL.
        url: String,
        /// What was wrong, with the value (bounded).
        message: String,
        /// The section of the specification.
        section: &'static str,
    },
}
