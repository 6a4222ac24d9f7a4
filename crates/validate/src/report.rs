//! The result of a walk: every problem found ([`Finding`]) and what was read ([`Summary`]).
//! The JSON shape is `rsagg validate --source --json`'s (docs/contract.md).

use std::collections::BTreeMap;

use rsagg_model::{Mode, Problem, Severity};
use serde::Serialize;

use crate::rules::Cross;

/// One problem: of one document (the single-document checks, with line:column) or between
/// documents (a [`Cross`] rule; line 0 when it concerns a document as a whole).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable kebab-case code: a [`rsagg_model::Rule`]'s, a package check's (`zip-…`) or a
    /// [`Cross`] rule's.
    pub code: &'static str,
    /// Error or warning, in the walk's mode.
    pub severity: Severity,
    /// The document (or package, or resource) the problem is in; a package's manifest is
    /// `PACKAGE!/manifest.xml`.
    pub url: String,
    /// Line, from 1; 0 when the problem is not at one place of the document.
    pub line: u32,
    /// Column, from 1; 0 as for `line`.
    pub column: u32,
    /// Spec section: `"12.2"`, `"Appendix A"`, `"CN 3"`, …
    pub section: &'static str,
    /// What is wrong, with the values concerned.
    pub message: String,
    /// Index (from 0) of the entry concerned, when the problem is about one entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<u64>,
    /// The other document of a cross-document problem (the index of a part, the document
    /// naming a missing one, the previous part of an interval chain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related: Option<String>,
}

/// Counts of a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Documents read, by kind as `rsagg validate --json` names them (`document.kind`:
    /// `"Resource List Index"`, `"Change Dump Manifest"`, …; a manifest inside a package and
    /// its published copy count each).
    pub documents: BTreeMap<&'static str, u64>,
    /// Dump packages downloaded and opened.
    pub packages: u64,
    /// Entries of all documents read.
    pub entries: u64,
    /// Bytes read: documents (after inflation), packages, sampled resources.
    pub bytes: u64,
    /// Resources of the sample fetched.
    pub resources_sampled: u64,
    /// Change Notification payload files checked.
    pub notifications: u64,
    /// Errors found (all, also those beyond the problems kept).
    pub errors: u64,
    /// Warnings found.
    pub warnings: u64,
    /// The bound that ended the walk early (`"max-documents"`, `"max-bytes"`), or `None`
    /// when everything reachable was walked.
    pub truncated: Option<&'static str>,
}

/// The result of [`crate::validate_source`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// No error was found (warnings allowed).
    pub valid: bool,
    /// The start URL.
    pub source: String,
    /// `"strict"` or `"lenient"`.
    pub mode: &'static str,
    /// The problems kept, in the order found (documents in walk order, each sorted by
    /// position).
    pub problems: Vec<Finding>,
    /// The counts.
    pub summary: Summary,
}

/// Gathers findings within the cap and counts all of them.
#[derive(Debug)]
pub(crate) struct Collector {
    pub(crate) mode: Mode,
    max: usize,
    pub(crate) findings: Vec<Finding>,
    pub(crate) summary: Summary,
}

impl Collector {
    pub(crate) fn new(mode: Mode, max: usize) -> Self {
        Collector {
            mode,
            max,
            findings: Vec::new(),
            summary: Summary::default(),
        }
    }

    /// How many more findings may be kept.
    pub(crate) fn room(&self) -> usize {
        self.max.saturating_sub(self.findings.len())
    }

    /// Records a finding of cross-document rule `rule`, unless the mode does not report it.
    pub(crate) fn cross(
        &mut self,
        rule: Cross,
        section: &'static str,
        url: &str,
        message: impl Into<String>,
    ) -> CrossRef<'_> {
        let index = match rule.severity(self.mode) {
            Some(severity) => {
                self.count(severity);
                self.keep(Finding {
                    code: rule.code(),
                    severity,
                    url: url.to_owned(),
                    line: 0,
                    column: 0,
                    section,
                    message: bounded(message.into()),
                    entry: None,
                    related: None,
                })
            }
            None => None,
        };
        CrossRef {
            collector: self,
            index,
        }
    }

    /// Takes in the problems of one document read by the single-document reader: `kept`
    /// are those it kept, `errors` and `warnings` its counts of all of them.
    pub(crate) fn document(&mut self, url: &str, kept: Vec<Problem>, errors: u64, warnings: u64) {
        self.summary.errors += errors;
        self.summary.warnings += warnings;
        for p in kept {
            self.keep(from_problem(url, p));
        }
    }

    /// One problem found outside the reader (a package's own checks), counted and kept.
    pub(crate) fn problem(&mut self, url: &str, p: Problem) {
        self.count(p.severity);
        self.keep(from_problem(url, p));
    }

    fn count(&mut self, s: Severity) {
        match s {
            Severity::Error => self.summary.errors += 1,
            Severity::Warning => self.summary.warnings += 1,
        }
    }

    fn keep(&mut self, f: Finding) -> Option<usize> {
        (self.findings.len() < self.max).then(|| {
            self.findings.push(f);
            self.findings.len() - 1
        })
    }

    /// Counts one document of `kind` read, with its entries and bytes.
    pub(crate) fn read(&mut self, kind: &'static str, entries: u64, bytes: u64) {
        *self.summary.documents.entry(kind).or_default() += 1;
        self.summary.entries += entries;
        self.summary.bytes += bytes;
    }

    pub(crate) fn into_report(self, source: &str) -> Report {
        let mode = match self.mode {
            Mode::Strict => "strict",
            Mode::Lenient => "lenient",
        };
        Report {
            valid: self.summary.errors == 0,
            source: source.to_owned(),
            mode,
            problems: self.findings,
            summary: self.summary,
        }
    }
}

/// A finding just recorded, to add its entry or related document to.
pub(crate) struct CrossRef<'a> {
    collector: &'a mut Collector,
    index: Option<usize>,
}

impl CrossRef<'_> {
    /// The entry (from 0) of the document the finding concerns.
    pub(crate) fn entry(self, entry: u64) -> Self {
        if let Some(i) = self.index {
            self.collector.findings[i].entry = Some(entry);
        }
        self
    }

    /// The other document concerned.
    pub(crate) fn related(self, url: &str) -> Self {
        if let Some(i) = self.index {
            self.collector.findings[i].related = Some(url.to_owned());
        }
        self
    }
}

fn from_problem(url: &str, p: Problem) -> Finding {
    Finding {
        code: p.code,
        severity: p.severity,
        url: url.to_owned(),
        line: p.line,
        column: p.column,
        section: p.section,
        message: p.message,
        entry: p.entry,
        related: None,
    }
}

/// Messages quote upstream values: kept to a bounded excerpt, as the reader's are.
fn bounded(message: String) -> String {
    match rsagg_model::excerpt(&message, rsagg_model::redact::MESSAGE_BYTES) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(o) => o,
    }
}
