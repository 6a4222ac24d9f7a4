//! Validation of ResourceSync documents, one entry at a time.
//!
//! Every rule the specification states for a document type is a [`Rule`]; each problem names
//! the rule's code, the spec section, and the line:column where it was found. Two modes:
//! [`Mode::Strict`] for rsagg's own output, where every deviation is an error, and
//! [`Mode::Lenient`] for upstream documents, where known quirks of real Sources (a missing
//! `from`, non-hex hash values, a plain Sitemap without `<rs:md>`, a missing `up` link, times
//! without a zone, capability values of earlier specifications ([`crate::Legacy`]), …)
//! become warnings so harvesting can go on. Recommendations ("should", "recommended") are
//! warnings in strict mode and silent in lenient mode.
//!
//! The [`Validator`] holds only what the rules need across entries (the previous datetime, the
//! capabilities seen in a Capability List, counters), so it runs in constant memory beside a
//! streaming reader. Problems beyond [`Validator::with_max_problems`] are counted, not kept.

use std::cmp::Ordering;

use crate::datetime::W3cDateTime;
use crate::document::{
    Capability, Change, ChangeFreq, DocumentKind, EntrySpans, Header, HeaderSpans, Link, Md, Pos,
    UrlEntry,
};
use crate::hash::{HashIssue, Hashes};

/// Sitemap protocol limit on entries per document (spec section 7).
pub const MAX_ENTRIES: u64 = 50_000;
/// Sitemap protocol limit on document size, 50 MiB uncompressed (spec section 7).
pub const MAX_BYTES: u64 = 50 * 1024 * 1024;

/// How strictly to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// rsagg's own output: every deviation from the spec is an error.
    Strict,
    /// Upstream documents: known quirks are warnings.
    #[default]
    Lenient,
}

/// Severity of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The document (or entry) breaks a rule.
    Error,
    /// Tolerated deviation or unmet recommendation.
    Warning,
}

/// Every rule checked, with its code and severity in each mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// Not well-formed XML, or a limit of the reader was hit.
    XmlSyntax,
    /// A DOCTYPE declaration; rejected so no entity can be declared or expanded.
    Doctype,
    /// The root element is not `<urlset>`/`<sitemapindex>` in the Sitemap namespace.
    Root,
    /// An element of the document format in a wrong namespace (e.g. `rs:` bound to a wrong URI).
    Namespace,
    /// An element where the format does not allow it (`<url>` in an index, `<rs:md>` after
    /// the entries, text in the root, …).
    Misplaced,
    /// An element that is not repeatable appears twice.
    Repeated,
    /// The root has no `<rs:md>` (a plain Sitemap).
    RootMdMissing,
    /// `<rs:md>` without `capability` where it is mandatory.
    CapabilityMissing,
    /// A `capability` value that no ResourceSync specification defines.
    CapabilityUnknown,
    /// A `capability` value of an earlier ResourceSync specification ([`crate::Legacy`]):
    /// read as its 1.1 equivalent when lenient, an error in rsagg's own output.
    CapabilityLegacy,
    /// A capability that does not fit the root element or the position.
    CapabilityMisplaced,
    /// A Capability List lists a capability twice.
    CapabilityDuplicate,
    /// `<loc>` missing or empty.
    LocMissing,
    /// `<loc>` is not an absolute URI.
    LocNotAbsolute,
    /// Not a W3C Datetime.
    DateTimeSyntax,
    /// A time without a time zone designator.
    DateTimeTimezone,
    /// A mandatory `at` is missing (Appendix A).
    AtMissing,
    /// A mandatory `from` is missing (Appendix A).
    FromMissing,
    /// A mandatory `until` is missing (Change Notification 3).
    UntilMissing,
    /// `completed` before `at`, or `until` before `from`.
    IntervalOrder,
    /// An attribute used where the spec says it is not used.
    AttributeNotUsed,
    /// An unprefixed attribute that ResourceSync does not define.
    AttributeUnknown,
    /// A ResourceSync attribute written with a namespace prefix.
    AttributePrefixed,
    /// A mandatory `up` link is missing.
    UpLinkMissing,
    /// `<rs:ln>` without `rel` or `href`.
    LinkIncomplete,
    /// `pri` not an integer in 1..=999999.
    Pri,
    /// A `hash` value that is not `algorithm:hex` with the right length.
    HashSyntax,
    /// A `hash` algorithm other than md5, sha-1, sha-256.
    HashAlgorithm,
    /// `length` not a non-negative integer.
    Length,
    /// `<changefreq>` value not defined by the Sitemap protocol.
    ChangeFreq,
    /// A `type` value that is not a media type.
    MediaType,
    /// `<rs:md>` missing where mandatory.
    MdMissing,
    /// `change` missing where mandatory.
    ChangeMissing,
    /// `change` not created, updated or deleted.
    ChangeValue,
    /// `path` missing where mandatory.
    PathMissing,
    /// `path` without a leading slash.
    PathSlash,
    /// Entries not in forward chronological order.
    ChronologicalOrder,
    /// `datetime` outside the document's `from`/`until`, or a child interval outside its index's.
    DateTimeInterval,
    /// An open Change List that is not the last in its index.
    OpenListNotLast,
    /// Capability List advertises a change-notification channel without a `hub` link.
    HubLinkMissing,
    /// More than 50,000 entries.
    EntriesLimit,
    /// More than 50 MB.
    SizeLimit,
    /// A `<loc>` or `<rs:ln href>` longer than the reader's limit (the Sitemap protocol
    /// allows 2,048 characters; rsagg's limit, 8 KiB by default, is a setting): the entry is
    /// skipped, so its URI is never fetched, stored or echoed whole.
    UriTooLong,
    /// A recommendation of the spec is not followed.
    Recommended,
}

impl Rule {
    /// Stable kebab-case code used in reports.
    pub fn code(self) -> &'static str {
        use Rule::*;
        match self {
            XmlSyntax => "xml-syntax",
            Doctype => "doctype",
            Root => "root-element",
            Namespace => "namespace",
            Misplaced => "element-misplaced",
            Repeated => "element-repeated",
            RootMdMissing => "root-md-missing",
            CapabilityMissing => "capability-missing",
            CapabilityUnknown => "capability-unknown",
            CapabilityLegacy => "capability-legacy",
            CapabilityMisplaced => "capability-misplaced",
            CapabilityDuplicate => "capability-duplicate",
            LocMissing => "loc-missing",
            LocNotAbsolute => "loc-not-absolute",
            DateTimeSyntax => "datetime-syntax",
            DateTimeTimezone => "datetime-timezone",
            AtMissing => "at-missing",
            FromMissing => "from-missing",
            UntilMissing => "until-missing",
            IntervalOrder => "interval-order",
            AttributeNotUsed => "attribute-not-used",
            AttributeUnknown => "attribute-unknown",
            AttributePrefixed => "attribute-prefixed",
            UpLinkMissing => "up-link-missing",
            LinkIncomplete => "link-incomplete",
            Pri => "pri-range",
            HashSyntax => "hash-syntax",
            HashAlgorithm => "hash-algorithm",
            Length => "length-syntax",
            ChangeFreq => "changefreq-value",
            MediaType => "type-syntax",
            MdMissing => "md-missing",
            ChangeMissing => "change-missing",
            ChangeValue => "change-value",
            PathMissing => "path-missing",
            PathSlash => "path-leading-slash",
            ChronologicalOrder => "chronological-order",
            DateTimeInterval => "datetime-interval",
            OpenListNotLast => "open-list-not-last",
            HubLinkMissing => "hub-link-missing",
            EntriesLimit => "entries-limit",
            SizeLimit => "size-limit",
            UriTooLong => "uri-too-long",
            Recommended => "recommended",
        }
    }

    /// Severity in `mode`; `None` means the rule is not reported in that mode.
    pub fn severity(self, mode: Mode) -> Option<Severity> {
        use Rule::*;
        use Severity::{Error as E, Warning as W};
        let (strict, lenient) = match self {
            // Never tolerated: the document cannot be read as intended.
            XmlSyntax | Doctype | Root | Namespace | Misplaced | CapabilityMissing
            | CapabilityDuplicate | LocMissing | LocNotAbsolute | DateTimeSyntax
            | IntervalOrder | LinkIncomplete | Length | MdMissing | ChangeMissing | ChangeValue
            | PathMissing | ChronologicalOrder | DateTimeInterval | OpenListNotLast
            | CapabilityMisplaced | UriTooLong => (Some(E), Some(E)),
            // Quirks of real Sources, tolerated in upstream documents.
            Repeated | RootMdMissing | CapabilityUnknown | CapabilityLegacy | DateTimeTimezone
            | AtMissing | FromMissing | UntilMissing | AttributeNotUsed | AttributeUnknown
            | AttributePrefixed | UpLinkMissing | Pri | HashSyntax | ChangeFreq | PathSlash
            | HubLinkMissing | EntriesLimit | SizeLimit => (Some(E), Some(W)),
            HashAlgorithm | MediaType => (Some(W), Some(W)),
            Recommended => (Some(W), None),
        };
        match mode {
            Mode::Strict => strict,
            Mode::Lenient => lenient,
        }
    }
}

/// `message` cut to [`crate::redact::MESSAGE_BYTES`] with a marker.
fn bounded_message(message: String) -> String {
    match crate::excerpt(&message, crate::redact::MESSAGE_BYTES) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(o) => o,
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Error or warning (depends on the mode).
    pub severity: Severity,
    /// Line, from 1 (0 when the problem concerns the whole document).
    pub line: u32,
    /// Column, from 1.
    pub column: u32,
    /// Spec section: `"12.1"`, `"Appendix A"`, `"CN 3"` (Change Notification 1.0.1), …
    pub section: &'static str,
    /// The rule's code ([`Rule::code`]).
    pub code: &'static str,
    /// What is wrong, with the offending value.
    pub message: String,
    /// Index (from 0) of the entry concerned, when it is about one entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<u64>,
    /// The rule.
    #[serde(skip)]
    pub rule: Rule,
}

/// Checks a document as it streams past: [`Validator::header`] once, [`Validator::entry`] per
/// entry, then [`Validator::finish`].
#[derive(Debug)]
pub struct Validator {
    mode: Mode,
    kind: DocumentKind,
    from: Option<W3cDateTime>,
    until: Option<W3cDateTime>,
    entries: u64,
    current_entry: Option<u64>,
    prev_instant: Option<W3cDateTime>,
    prev_until: Option<W3cDateTime>,
    open_entry_at: Option<Pos>,
    capabilities: Vec<Capability>,
    problems: Vec<Problem>,
    max_problems: usize,
    errors: u64,
    warnings: u64,
}

impl Validator {
    /// A validator keeping at most 1,000 problems.
    pub fn new(mode: Mode) -> Self {
        Validator {
            mode,
            kind: DocumentKind::Other,
            from: None,
            until: None,
            entries: 0,
            current_entry: None,
            prev_instant: None,
            prev_until: None,
            open_entry_at: None,
            capabilities: Vec::new(),
            problems: Vec::new(),
            max_problems: 1000,
            errors: 0,
            warnings: 0,
        }
    }

    /// Keeps at most `n` problems (all are still counted).
    pub fn with_max_problems(mut self, n: usize) -> Self {
        self.max_problems = n;
        self
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The kind of document, once the header was seen.
    pub fn kind(&self) -> DocumentKind {
        self.kind
    }

    /// Problems kept so far.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Takes the problems kept so far (counters stay).
    pub fn take_problems(&mut self) -> Vec<Problem> {
        std::mem::take(&mut self.problems)
    }

    /// Number of errors found (including those not kept).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Number of warnings found (including those not kept).
    pub fn warnings(&self) -> u64 {
        self.warnings
    }

    /// Entries seen.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Records a finding of `rule` at `pos`, unless the mode does not report it. The message
    /// is kept to [`crate::redact::MESSAGE_BYTES`] ([`crate::excerpt()`]): it may quote a
    /// value of the document, which an upstream controls.
    pub fn report(
        &mut self,
        rule: Rule,
        section: &'static str,
        pos: Pos,
        message: impl Into<String>,
    ) {
        let Some(severity) = rule.severity(self.mode) else {
            return;
        };
        match severity {
            Severity::Error => self.errors += 1,
            Severity::Warning => self.warnings += 1,
        }
        if self.problems.len() < self.max_problems {
            self.problems.push(Problem {
                severity,
                line: pos.line,
                column: pos.column,
                section,
                code: rule.code(),
                message: bounded_message(message.into()),
                entry: self.current_entry,
                rule,
            });
        }
    }

    /// Takes in problems found elsewhere for the same document (a reader's tokenizer on
    /// another thread), counting each by its severity and keeping them within the cap.
    pub fn absorb(&mut self, problems: impl IntoIterator<Item = Problem>) {
        for p in problems {
            match p.severity {
                Severity::Error => self.errors += 1,
                Severity::Warning => self.warnings += 1,
            }
            if self.problems.len() < self.max_problems {
                self.problems.push(Problem {
                    message: bounded_message(p.message),
                    ..p
                });
            }
        }
    }

    /// Marks the start of entry `index` for the problems that follow (reader use).
    pub fn begin_entry(&mut self, index: u64) {
        self.current_entry = Some(index);
    }

    /// Checks the root `<rs:md>` and `<rs:ln>`s.
    pub fn header(&mut self, h: &Header, spans: &HeaderSpans) {
        self.current_entry = None;
        let kind = h.kind();
        self.kind = kind;
        let Some(md) = &h.md else {
            self.report(
                Rule::RootMdMissing,
                "7",
                spans.root,
                format!(
                    "<{}> has no <rs:md>: a plain Sitemap, not a ResourceSync document; read as a {}",
                    h.root.element(),
                    if h.root == crate::Root::Urlset { "Resource List" } else { "Resource List Index" }
                ),
            );
            self.header_links(h, spans, kind);
            return;
        };
        match &md.capability {
            None => self.report(
                Rule::CapabilityMissing,
                "7",
                spans.md,
                "the root <rs:md> has no `capability` attribute, which is mandatory in all ResourceSync documents",
            ),
            Some(Capability::Other(v)) => self.report(
                Rule::CapabilityUnknown,
                "7",
                spans.md,
                format!("capability `{v}` is not defined by ResourceSync 1.1 or Change Notification 1.0.1"),
            ),
            // Read as the 1.1 document it stands for (its kind says which); named with the
            // specification it comes from, so a lenient reader's warning tells the Source
            // what to update.
            Some(Capability::Legacy(l)) => {
                self.report(Rule::CapabilityLegacy, "7", spans.md, l.message());
            }
            Some(c) => match kind {
                DocumentKind::CapabilityListIndex => self.report(
                    Rule::Recommended,
                    "9",
                    spans.root,
                    "a Capability List should not be a <sitemapindex>",
                ),
                DocumentKind::Other => self.report(
                    Rule::CapabilityMisplaced,
                    if *c == Capability::ChangeNotification { "CN 3" } else { "7" },
                    spans.root,
                    format!("capability `{c}` is not used with a <{}> root", h.root.element()),
                ),
                _ => {}
            },
        }
        self.from = md.from;
        self.until = md.until;
        let pos = spans.md;
        // Appendix A: at/completed vs from/until.
        // An archive (ResourceSync Archives) is not a 1.1 document and had no `at`/`from`
        // of its own; its legacy value is reported above, the times of what it lists are
        // checked per entry.
        let archive = md
            .capability
            .as_ref()
            .and_then(Capability::legacy)
            .is_some_and(|l| l.is_archive());
        if kind.is_snapshot_document() {
            if md.at.is_none()
                && !archive
                && !matches!(
                    kind,
                    DocumentKind::PlainSitemap | DocumentKind::PlainSitemapIndex
                )
            {
                self.report(
                    Rule::AtMissing,
                    "Appendix A",
                    pos,
                    format!("a {} must have `at` on its root <rs:md>", kind.name()),
                );
            }
            for (name, v) in [("from", &md.from), ("until", &md.until)] {
                if v.is_some() {
                    self.report(
                        Rule::AttributeNotUsed,
                        "Appendix A",
                        pos,
                        format!("`{name}` is not used in a {}", kind.name()),
                    );
                }
            }
        } else if kind.is_change_document() {
            if md.from.is_none() && !archive {
                self.report(
                    Rule::FromMissing,
                    "Appendix A",
                    pos,
                    format!("a {} must have `from` on its root <rs:md>", kind.name()),
                );
            }
            if kind == DocumentKind::ChangeNotification && md.until.is_none() {
                self.report(
                    Rule::UntilMissing,
                    "CN 3",
                    pos,
                    "a change notification must have `until` on its root <rs:md>",
                );
            }
            for (name, v) in [("at", &md.at), ("completed", &md.completed)] {
                if v.is_some() {
                    self.report(
                        Rule::AttributeNotUsed,
                        "Appendix A",
                        pos,
                        format!("`{name}` is not used in a {}", kind.name()),
                    );
                }
            }
        } else if kind != DocumentKind::Other {
            for (name, v) in [
                ("at", &md.at),
                ("completed", &md.completed),
                ("from", &md.from),
                ("until", &md.until),
            ] {
                if v.is_some() {
                    self.report(
                        Rule::AttributeNotUsed,
                        "7",
                        pos,
                        format!("`{name}` is not used in a {}", kind.name()),
                    );
                }
            }
        }
        self.interval(md, pos, "7");
        for (name, present) in [
            ("change", md.change.is_some()),
            ("datetime", md.datetime.is_some()),
            ("path", md.path.is_some()),
        ] {
            if present {
                self.report(
                    Rule::AttributeNotUsed,
                    "7",
                    pos,
                    format!("`{name}` describes a resource and is not used on the root <rs:md>"),
                );
            }
        }
        self.header_links(h, spans, kind);
    }

    fn header_links(&mut self, h: &Header, spans: &HeaderSpans, kind: DocumentKind) {
        for (i, l) in h.links.iter().enumerate() {
            self.link(l, spans.link(i));
        }
        let needs_up = matches!(
            kind,
            DocumentKind::CapabilityList
                | DocumentKind::ResourceList
                | DocumentKind::ResourceListIndex
                | DocumentKind::ResourceDump
                | DocumentKind::ResourceDumpIndex
                | DocumentKind::ResourceDumpManifest
                | DocumentKind::ChangeList
                | DocumentKind::ChangeListIndex
                | DocumentKind::ChangeDump
                | DocumentKind::ChangeDumpIndex
                | DocumentKind::ChangeDumpManifest
        );
        if needs_up && h.link("up").is_none() {
            let target = if kind == DocumentKind::CapabilityList {
                "Source Description"
            } else {
                "Capability List"
            };
            self.report(
                Rule::UpLinkMissing,
                kind.section(),
                spans.root,
                format!(
                    "a {} must have an <rs:ln rel=\"up\"> to its {target}",
                    kind.name()
                ),
            );
        }
        if matches!(
            kind,
            DocumentKind::SourceDescription | DocumentKind::CapabilityList
        ) && h.link("describedby").is_none()
        {
            self.report(
                Rule::Recommended,
                kind.section(),
                spans.root,
                format!(
                    "a {} should have an <rs:ln rel=\"describedby\">",
                    kind.name()
                ),
            );
        }
    }

    fn interval(&mut self, md: &Md, pos: Pos, section: &'static str) {
        if let (Some(a), Some(c)) = (&md.at, &md.completed)
            && c.cmp_instant(a) == Ordering::Less
        {
            self.report(
                Rule::IntervalOrder,
                section,
                pos,
                format!("`completed` {c} is before `at` {a}"),
            );
        }
        if let (Some(f), Some(u)) = (&md.from, &md.until)
            && u.cmp_instant(f) == Ordering::Less
        {
            self.report(
                Rule::IntervalOrder,
                section,
                pos,
                format!("`until` {u} is before `from` {f}"),
            );
        }
    }

    fn link(&mut self, l: &Link, pos: Pos) {
        if l.rel.is_empty() {
            self.report(
                Rule::LinkIncomplete,
                "7",
                pos,
                "<rs:ln> has no `rel` attribute, which is mandatory",
            );
        }
        if l.href.is_empty() {
            self.report(
                Rule::LinkIncomplete,
                "7",
                pos,
                "<rs:ln> has no `href` attribute, which is mandatory",
            );
        }
    }

    /// Counts an entry that is not checked (the reader skipped it, [`Rule::UriTooLong`]), so
    /// the entry numbers of the problems after it still match the document.
    pub fn skip_entry(&mut self) {
        self.entries += 1;
    }

    /// Checks one entry.
    pub fn entry(&mut self, e: &UrlEntry, spans: &EntrySpans) {
        use DocumentKind as K;
        let index = self.entries;
        self.entries += 1;
        self.current_entry = Some(index);
        let kind = self.kind;
        let sec = kind.section();
        if e.loc.is_empty() {
            self.report(
                Rule::LocMissing,
                "7",
                spans.entry,
                "entry has no <loc>, which is mandatory",
            );
        } else if !is_absolute_uri(&e.loc) {
            self.report(
                Rule::LocNotAbsolute,
                "7",
                spans.loc,
                format!("<loc> `{}` is not an absolute URI", e.loc),
            );
        }
        if let Some(ChangeFreq::Other(v)) = &e.changefreq {
            self.report(Rule::ChangeFreq, "7", spans.entry, format!("<changefreq> `{v}` is not one of always, hourly, daily, weekly, monthly, yearly, never"));
        }
        for (i, l) in e.links.iter().enumerate() {
            self.link(l, spans.link(i));
        }
        let md = e.md.as_ref();
        let mpos = spans.md;
        // Where <rs:md> is mandatory.
        let md_required = matches!(
            kind,
            K::CapabilityList
                | K::ResourceDumpManifest
                | K::ChangeList
                | K::ChangeDumpManifest
                | K::ChangeNotification
        );
        if md.is_none() {
            if md_required {
                self.report(
                    Rule::MdMissing,
                    sec,
                    spans.entry,
                    format!("each entry of a {} must have an <rs:md>", kind.name()),
                );
            }
            if matches!(kind, K::ResourceDump | K::ChangeDump) {
                self.report(Rule::Recommended, sec, spans.entry, format!("an entry of a {} should have an <rs:md> with `type` and `length` of the package", kind.name()));
            }
            if matches!(
                kind,
                K::ChangeListIndex | K::ChangeDumpIndex | K::ChangeDump
            ) {
                self.report(
                    Rule::Recommended,
                    "Appendix A",
                    spans.entry,
                    format!(
                        "an entry of a {} should have an <rs:md> with `from`",
                        kind.name()
                    ),
                );
            }
            if matches!(kind, K::ChangeListIndex) {
                self.index_order(None, spans.entry);
            }
            return;
        }
        let md = md.unwrap_or_else(|| unreachable!());
        self.entry_attributes_used(md, mpos);
        self.interval(md, mpos, "7");
        match kind {
            K::SourceDescription | K::SourceDescriptionIndex => {
                let want = if kind == K::SourceDescription {
                    Capability::CapabilityList
                } else {
                    Capability::Description
                };
                if let Some(c) = &md.capability
                    && !c.means(&want)
                {
                    self.report(
                        Rule::CapabilityMisplaced,
                        "8",
                        mpos,
                        format!(
                            "an entry of a {} must have capability `{want}`, not `{c}`",
                            kind.name()
                        ),
                    );
                } else if let Some(Capability::Legacy(l)) = &md.capability {
                    self.report(Rule::CapabilityLegacy, "8", mpos, l.message());
                }
            }
            K::CapabilityList => self.capability_entry(e, md, spans),
            K::ResourceDump | K::ChangeDump => {
                if md.mime_type.is_none() || md.length.is_none() {
                    self.report(
                        Rule::Recommended,
                        sec,
                        mpos,
                        "the <rs:md> of a package should give its `type` and `length`",
                    );
                }
                if kind == K::ChangeDump {
                    if md.from.is_none() {
                        self.report(
                            Rule::Recommended,
                            "Appendix A",
                            mpos,
                            "the <rs:md> of a Change Dump package should give `from`",
                        );
                    }
                    self.index_order(Some(md), mpos);
                }
            }
            K::ChangeListIndex | K::ChangeDumpIndex => {
                if md.from.is_none() {
                    self.report(
                        Rule::Recommended,
                        "Appendix A",
                        mpos,
                        format!("an entry of a {} should have `from`", kind.name()),
                    );
                }
                self.index_order(Some(md), mpos);
            }
            K::ResourceDumpManifest => {
                match &md.path {
                    None => self.report(
                        Rule::PathMissing,
                        "11.2",
                        mpos,
                        "each entry of a Resource Dump Manifest must have `path`",
                    ),
                    Some(p) => self.path(p, "11.2", mpos),
                }
                if md.mime_type.is_none() {
                    self.report(
                        Rule::Recommended,
                        "11.2",
                        mpos,
                        "the `type` attribute is recommended in a Resource Dump Manifest",
                    );
                }
            }
            K::ChangeList | K::ChangeDumpManifest | K::ChangeNotification => {
                match &md.change {
                    None => self.report(
                        Rule::ChangeMissing,
                        sec,
                        mpos,
                        format!("each entry of a {} must have `change`", kind.name()),
                    ),
                    Some(Change::Other(v)) => self.report(
                        Rule::ChangeValue,
                        "7",
                        mpos,
                        format!("`change` `{v}` is not created, updated or deleted"),
                    ),
                    Some(_) => {}
                }
                if kind == K::ChangeDumpManifest {
                    match (&md.path, &md.change) {
                        (Some(p), _) => self.path(p, "13.2", mpos),
                        (None, Some(Change::Deleted)) => {}
                        (None, _) => self.report(Rule::PathMissing, "13.2", mpos, "each entry of a Change Dump Manifest except deletions must have `path`"),
                    }
                    if md.mime_type.is_none() && md.change != Some(Change::Deleted) {
                        self.report(Rule::Recommended, "13.2", mpos, "the `type` attribute is strongly recommended in a Change Dump Manifest");
                    }
                }
                if let Some(dt) = md.datetime {
                    self.change_datetime(dt, sec, mpos);
                }
            }
            _ => {}
        }
    }

    /// Appendix A and section 7: which attributes an entry's <rs:md> may carry in this kind.
    fn entry_attributes_used(&mut self, md: &Md, pos: Pos) {
        use DocumentKind as K;
        let kind = self.kind;
        if kind == K::Other {
            return;
        }
        let snapshot_ok = matches!(
            kind,
            K::ResourceListIndex | K::ResourceDump | K::ResourceDumpIndex | K::PlainSitemapIndex
        );
        let interval_ok = matches!(
            kind,
            K::ChangeListIndex | K::ChangeDump | K::ChangeDumpIndex
        );
        let change_ok = matches!(
            kind,
            K::ChangeList | K::ChangeDumpManifest | K::ChangeNotification
        );
        let path_ok = matches!(kind, K::ResourceDumpManifest | K::ChangeDumpManifest);
        let capability_ok = matches!(
            kind,
            K::SourceDescription
                | K::SourceDescriptionIndex
                | K::CapabilityList
                | K::CapabilityListIndex
        );
        let checks: [(&str, bool, bool, &'static str); 8] = [
            ("at", md.at.is_some(), snapshot_ok, "Appendix A"),
            (
                "completed",
                md.completed.is_some(),
                snapshot_ok,
                "Appendix A",
            ),
            ("from", md.from.is_some(), interval_ok, "Appendix A"),
            ("until", md.until.is_some(), interval_ok, "Appendix A"),
            ("change", md.change.is_some(), change_ok, "7"),
            ("datetime", md.datetime.is_some(), change_ok, "7"),
            ("path", md.path.is_some(), path_ok, "7"),
            ("capability", md.capability.is_some(), capability_ok, "7"),
        ];
        for (name, present, ok, section) in checks {
            if present && !ok {
                self.report(
                    Rule::AttributeNotUsed,
                    section,
                    pos,
                    format!("`{name}` is not used on entries of a {}", kind.name()),
                );
            }
        }
    }

    fn capability_entry(&mut self, e: &UrlEntry, md: &Md, spans: &EntrySpans) {
        let pos = spans.md;
        let Some(c) = &md.capability else {
            self.report(
                Rule::CapabilityMissing,
                "9",
                pos,
                "each entry of a Capability List must have an <rs:md> with `capability`",
            );
            return;
        };
        match c {
            Capability::ResourceList | Capability::ChangeList | Capability::ResourceDump | Capability::ChangeDump | Capability::ChangeNotification => {}
            Capability::Other(v) => self.report(Rule::CapabilityUnknown, "9", pos, format!("capability `{v}` is not defined by ResourceSync 1.1 or Change Notification 1.0.1")),
            // An archive advertised beside the core capabilities, as ResourceSync Archives
            // had it; the 0.9 Description does not belong here.
            Capability::Legacy(l) if l.is_archive() => self.report(Rule::CapabilityLegacy, "9", pos, l.message()),
            other => self.report(Rule::CapabilityMisplaced, "9", pos, format!("capability `{other}` does not belong in a Capability List")),
        }
        if *c == Capability::ChangeNotification && e.link("hub").is_none() {
            self.report(
                Rule::HubLinkMissing,
                "CN 5",
                spans.entry,
                "a change-notification channel must have an <rs:ln rel=\"hub\"> with the hub URI",
            );
        }
        if self.capabilities.contains(c) {
            self.report(Rule::CapabilityDuplicate, "9", pos, format!("capability `{c}` is listed more than once; a Capability List must only contain one entry per capability"));
        } else if self.capabilities.len() < 256 {
            self.capabilities.push(c.clone());
        }
    }

    fn path(&mut self, p: &str, section: &'static str, pos: Pos) {
        if !p.starts_with('/') {
            self.report(
                Rule::PathSlash,
                section,
                pos,
                format!("`path` `{p}` must start with a slash"),
            );
        }
    }

    fn change_datetime(&mut self, dt: W3cDateTime, section: &'static str, pos: Pos) {
        if let Some(f) = &self.from
            && dt.cmp_instant(f) == Ordering::Less
        {
            self.report(
                Rule::DateTimeInterval,
                "7",
                pos,
                format!("`datetime` {dt} is before the document's `from` {f}"),
            );
        }
        if let Some(u) = &self.until
            && dt.cmp_instant(u) == Ordering::Greater
        {
            self.report(
                Rule::DateTimeInterval,
                "7",
                pos,
                format!("`datetime` {dt} is after the document's `until` {u}"),
            );
        }
        if let Some(prev) = &self.prev_instant
            && dt.cmp_instant(prev) == Ordering::Less
        {
            self.report(Rule::ChronologicalOrder, section, pos, format!("`datetime` {dt} is before the previous entry's {prev}: entries must be in forward chronological order"));
        }
        self.prev_instant = Some(dt);
    }

    /// Change List Index, Change Dump (Index): child intervals in forward chronological order,
    /// inside the document's interval, and only the last one open (12.2, 13.1).
    fn index_order(&mut self, md: Option<&Md>, pos: Pos) {
        let kind = self.kind;
        let section = kind.section();
        let order_rule = if kind == DocumentKind::ChangeListIndex {
            Rule::ChronologicalOrder
        } else {
            Rule::Recommended
        };
        if let Some(open_pos) = self.open_entry_at.take()
            && kind == DocumentKind::ChangeListIndex
        {
            self.report(
                Rule::OpenListNotLast,
                "12.2",
                open_pos,
                "a Change List without `until` (open) is followed by another Change List; only the last one can be open",
            );
        }
        let Some(md) = md else {
            if kind == DocumentKind::ChangeListIndex {
                self.open_entry_at = Some(pos);
            }
            return;
        };
        if let Some(from) = md.from {
            if let Some(root_from) = &self.from
                && from.cmp_instant(root_from) == Ordering::Less
            {
                self.report(
                    Rule::DateTimeInterval,
                    section,
                    pos,
                    format!("`from` {from} is before the index's `from` {root_from}"),
                );
            }
            if let Some(prev) = self.prev_instant
                && from.cmp_instant(&prev) == Ordering::Less
            {
                self.report(order_rule, section, pos, format!("`from` {from} is before the previous entry's `from` {prev}: entries must be in forward chronological order"));
            }
            if let Some(prev_until) = self.prev_until
                && from.cmp_instant(&prev_until) == Ordering::Less
            {
                self.report(order_rule, section, pos, format!("`from` {from} is before the previous entry's `until` {prev_until}: intervals overlap"));
            }
            self.prev_instant = Some(from);
        }
        if let Some(until) = md.until {
            if let Some(root_until) = &self.until
                && until.cmp_instant(root_until) == Ordering::Greater
            {
                self.report(
                    Rule::DateTimeInterval,
                    section,
                    pos,
                    format!("`until` {until} is after the index's `until` {root_until}"),
                );
            }
            self.prev_until = Some(until);
        } else if kind == DocumentKind::ChangeListIndex {
            self.open_entry_at = Some(pos);
        }
    }

    /// Whole-document checks at the end: entry count and size limits (spec section 7).
    pub fn finish(&mut self, end: Pos, bytes: u64) {
        self.current_entry = None;
        if self.entries > MAX_ENTRIES {
            self.report(Rule::EntriesLimit, "7", end, format!("{} entries exceed the limit of {MAX_ENTRIES} per document; split into an index", self.entries));
        }
        if bytes > MAX_BYTES {
            self.report(Rule::SizeLimit, "7", end, format!("{bytes} bytes exceed the limit of {MAX_BYTES} bytes (50 MB) per document; split into an index"));
        }
    }
}

/// A cheap check for an absolute URI: `scheme ":" rest` with a non-empty rest.
pub fn is_absolute_uri(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(colon) = b.iter().position(|&c| c == b':') else {
        return false;
    };
    let scheme = &b[..colon];
    scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
        && colon + 1 < b.len()
        && !b.iter().fold(false, |ws, &c| ws | (c <= b' '))
        && (s.is_ascii() || !s.contains(char::is_whitespace))
}

/// Reads one unprefixed ResourceSync attribute of `<rs:md>` into `md`, reporting malformed
/// values. Returns false when the name is not a ResourceSync attribute of `<rs:md>`.
pub fn apply_md_attr(md: &mut Md, name: &str, value: &str, v: &mut Validator, pos: Pos) -> bool {
    match name {
        "capability" => md.capability = Some(Capability::parse(value)),
        "at" => md.at = datetime(value, name, v, pos),
        "completed" => md.completed = datetime(value, name, v, pos),
        "from" => md.from = datetime(value, name, v, pos),
        "until" => md.until = datetime(value, name, v, pos),
        "datetime" => md.datetime = datetime(value, name, v, pos),
        "change" => md.change = Some(Change::parse(value)),
        "encoding" => md.encoding = Some(value.to_owned()),
        "hash" => md.hash = Some(hashes(value, v, pos)),
        "length" => md.length = length(value, v, pos),
        "path" => md.path = Some(value.to_owned()),
        "type" => md.mime_type = Some(media_type(value, v, pos)),
        _ => return false,
    }
    true
}

/// Reads one unprefixed ResourceSync attribute of `<rs:ln>` into `link`, reporting malformed
/// values. Returns false when the name is not a ResourceSync attribute of `<rs:ln>`.
pub fn apply_ln_attr(
    link: &mut Link,
    name: &str,
    value: &str,
    v: &mut Validator,
    pos: Pos,
) -> bool {
    match name {
        "rel" => link.rel = value.to_owned(),
        "href" => link.href = value.to_owned(),
        "encoding" => link.encoding = Some(value.to_owned()),
        "hash" => link.hash = Some(hashes(value, v, pos)),
        "length" => link.length = length(value, v, pos),
        "modified" => link.modified = datetime(value, name, v, pos),
        "path" => link.path = Some(value.to_owned()),
        "type" => link.mime_type = Some(media_type(value, v, pos)),
        "pri" => link.pri = pri(value, v, pos),
        _ => return false,
    }
    true
}

/// Parses a datetime value of attribute or element `name`, reporting problems.
pub fn datetime(value: &str, name: &str, v: &mut Validator, pos: Pos) -> Option<W3cDateTime> {
    match W3cDateTime::parse(value) {
        Ok(p) => {
            if p.missing_tzd {
                v.report(
                    Rule::DateTimeTimezone,
                    "7",
                    pos,
                    format!(
                        "`{name}` `{value}` has a time but no time zone designator; read as UTC"
                    ),
                );
            }
            Some(p.value)
        }
        Err(e) => {
            v.report(Rule::DateTimeSyntax, "7", pos, format!("`{name}`: {e}"));
            None
        }
    }
}

fn hashes(value: &str, v: &mut Validator, pos: Pos) -> Hashes {
    Hashes::parse(value, |issue| {
        let rule = match issue {
            HashIssue::UnknownAlgorithm(_) => Rule::HashAlgorithm,
            _ => Rule::HashSyntax,
        };
        v.report(rule, "7", pos, issue.to_string());
    })
}

fn length(value: &str, v: &mut Validator, pos: Pos) -> Option<u64> {
    match value.trim().parse::<u64>() {
        Ok(n) => Some(n),
        Err(_) => {
            v.report(
                Rule::Length,
                "7",
                pos,
                format!("`length` `{value}` is not a non-negative integer"),
            );
            None
        }
    }
}

fn pri(value: &str, v: &mut Validator, pos: Pos) -> Option<u32> {
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=999_999).contains(&n) => Some(n),
        Ok(n) => {
            v.report(
                Rule::Pri,
                "7",
                pos,
                format!("`pri` {n} is outside 1..999999"),
            );
            Some(n)
        }
        Err(_) => {
            v.report(
                Rule::Pri,
                "7",
                pos,
                format!("`pri` `{value}` is not an integer in 1..999999"),
            );
            None
        }
    }
}

fn media_type(value: &str, v: &mut Validator, pos: Pos) -> String {
    let ok = value.split_once('/').is_some_and(|(t, s)| {
        let token = |x: &str| {
            !x.is_empty()
                && x.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c))
        };
        token(t) && token(s.split(';').next().unwrap_or("").trim())
    });
    if !ok {
        v.report(
            Rule::MediaType,
            "7",
            pos,
            format!("`type` `{value}` is not a media type (type/subtype)"),
        );
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Root;

    #[test]
    fn absolute_uris() {
        assert!(is_absolute_uri("http://example.com/a"));
        assert!(is_absolute_uri("urn:isbn:123"));
        assert!(is_absolute_uri("gsiftp://gridftp.example.com/res1"));
        assert!(!is_absolute_uri("/res1"));
        assert!(!is_absolute_uri("res1"));
        assert!(!is_absolute_uri("1http://x"));
        assert!(!is_absolute_uri("http://exa mple.com/"));
    }

    #[test]
    fn severities_differ_by_mode() {
        assert_eq!(
            Rule::FromMissing.severity(Mode::Strict),
            Some(Severity::Error)
        );
        assert_eq!(
            Rule::FromMissing.severity(Mode::Lenient),
            Some(Severity::Warning)
        );
        assert_eq!(Rule::Recommended.severity(Mode::Lenient), None);
        assert_eq!(
            Rule::ChronologicalOrder.severity(Mode::Lenient),
            Some(Severity::Error)
        );
    }

    #[test]
    fn problems_beyond_the_cap_are_counted() {
        let mut v = Validator::new(Mode::Strict).with_max_problems(2);
        for _ in 0..5 {
            v.report(Rule::LocMissing, "7", Pos::default(), "x");
        }
        assert_eq!(v.problems().len(), 2);
        assert_eq!(v.errors(), 5);
    }

    fn codes(v: &Validator) -> Vec<(&'static str, Severity)> {
        v.problems().iter().map(|p| (p.code, p.severity)).collect()
    }

    #[test]
    fn legacy_capabilities_warn_naming_their_version_when_lenient_and_fail_when_strict() {
        for (value, version, kind) in [
            (
                "resourcesync",
                "ResourceSync 0.9",
                DocumentKind::SourceDescription,
            ),
            (
                "changelist-archive",
                "ResourceSync Archives",
                DocumentKind::ChangeListIndex,
            ),
            (
                "resourcelist-archive",
                "ResourceSync Archives",
                DocumentKind::ResourceListIndex,
            ),
        ] {
            let mut h = Header::new(Root::Urlset, Capability::parse(value));
            h.links
                .push(Link::new("UP", "http://example.com/capabilitylist.xml"));
            h.links
                .push(Link::new("describedBy", "http://example.com/about.xml"));
            for (mode, severity) in [
                (Mode::Lenient, Severity::Warning),
                (Mode::Strict, Severity::Error),
            ] {
                let mut v = Validator::new(mode);
                v.header(&h, &HeaderSpans::default());
                assert_eq!(v.kind(), kind, "{value}");
                // The legacy value is the only finding: an archive had no `at`/`from` of
                // its own, and the mixed-case `up` and `describedby` links are found.
                assert_eq!(
                    codes(&v),
                    [("capability-legacy", severity)],
                    "{value} {mode:?}"
                );
                let p = &v.problems()[0];
                assert!(p.message.contains(version), "{}", p.message);
                assert!(p.message.contains(value), "{}", p.message);
                assert_eq!(p.section, "7");
            }
        }
    }

    #[test]
    fn a_capability_list_with_an_archive_beside_its_list_is_no_duplicate() {
        let mut h = Header::new(Root::Urlset, Capability::CapabilityList);
        h.links.push(Link::new("Up", "http://example.com/rs"));
        h.links
            .push(Link::new("DescribedBy", "http://example.com/about"));
        let entry = |loc: &str, c: &str| UrlEntry {
            loc: format!("http://example.com/{loc}"),
            md: Some(Md {
                capability: Some(Capability::parse(c)),
                ..Md::default()
            }),
            ..UrlEntry::default()
        };
        for (mode, severity) in [
            (Mode::Lenient, Severity::Warning),
            (Mode::Strict, Severity::Error),
        ] {
            let mut v = Validator::new(mode);
            v.header(&h, &HeaderSpans::default());
            for e in [
                entry("resourcelist.xml", "resourcelist"),
                entry("changelist.xml", "changelist"),
                entry("changelist-archive.xml", "changelist-archive"),
            ] {
                v.entry(&e, &EntrySpans::default());
            }
            assert_eq!(codes(&v), [("capability-legacy", severity)], "{mode:?}");
            assert_eq!(v.problems()[0].section, "9");
            assert_eq!(v.problems()[0].entry, Some(2));
        }
        // The 0.9 Description is no capability of a set.
        let mut v = Validator::new(Mode::Lenient);
        v.header(&h, &HeaderSpans::default());
        v.entry(&entry("rs", "resourcesync"), &EntrySpans::default());
        assert_eq!(codes(&v), [("capability-misplaced", Severity::Error)]);
    }

    #[test]
    fn plain_sitemap_is_a_warning_only_when_lenient() {
        let h = Header {
            root: Root::Urlset,
            md: None,
            links: vec![],
        };
        for (mode, sev) in [
            (Mode::Strict, Severity::Error),
            (Mode::Lenient, Severity::Warning),
        ] {
            let mut v = Validator::new(mode);
            v.header(&h, &HeaderSpans::default());
            assert_eq!(v.problems()[0].severity, sev);
            assert_eq!(v.problems()[0].code, "root-md-missing");
        }
    }
}
