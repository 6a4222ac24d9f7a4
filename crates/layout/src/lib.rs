//! rsagg-layout: what rsagg publishes, where, and in what shape.
//!
//! The one place that names every object a collection's store holds beside its blobs and
//! state, and the types of the JSON objects kept there. Writers (`rsagg-publish`,
//! `rsagg-notify`, `rsagg-pipeline`) and the reader (`rsagg-server`) both depend on it, so
//! the server reads what a run wrote without depending on the harvest (see
//! `docs/contract.md`, URL map, and `docs/architecture.md`).
//!
//! # Layout
//!
//! - `paths.rs`: every object's path (also its path under `collection.base_url` for
//!   published documents) and the URLs derived from the base URL (Capability List, Source
//!   Description, topic, callbacks).
//! - `uris.rs`: rsagg's own, reversible URIs for its copies (spec 14.8).
//! - `capability.rs`: the Capability List (spec 9) and Source Description (spec 8)
//!   documents.
//! - `meta.rs`: what the publisher and notifier keep beside their documents
//!   (`published/*.json`, `notify/*.json`).
//! - `history.rs`: the run history ([`history::RunHistory`]): the last runs as chart
//!   points and totals since the first run (counters and histograms for `/metrics`), with
//!   each upstream's last success (the lag).
//! - `report.rs`: what a run did ([`report::RunReport`] and its parts) and the stats object
//!   `rsagg serve` reads, tolerant of fields older or newer rsagg versions wrote.

pub mod capability;
pub mod history;
pub mod meta;
pub mod paths;
pub mod report;
pub mod uris;

#[doc(hidden)]
pub mod testing {
    //! Helpers for the tests of crates that write rsagg's documents.

    use rsagg_model::{Header, Mode, UrlEntry};

    /// Parses `xml` strictly and panics, printing the document, on any error: rsagg's own
    /// output must be strictly valid.
    pub fn strict(xml: &[u8]) -> (Header, Vec<UrlEntry>) {
        let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "own document");
        let d = rsagg_sitemap::read_document(xml, opts).unwrap();
        let errors: Vec<_> = d.errors().collect();
        assert!(
            errors.is_empty(),
            "{errors:#?}\n{}",
            String::from_utf8_lossy(xml)
        );
        (d.header, d.entries)
    }
}
