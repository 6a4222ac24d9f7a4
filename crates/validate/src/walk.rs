//! The walker: documents to visit in a bounded queue, each fetched and read as a stream
//! (header, then one entry at a time), checked by the single-document reader and against
//! what the document naming it implies.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use futures::TryStreamExt;
use rsagg_fetch::{Access, Fetcher, Request};
use rsagg_model::{
    Capability, DocumentKind, Header, Md, Problem, Rule, Severity, UrlEntry, W3cDateTime,
};
use rsagg_sitemap::{DocumentReader, ReadOptions};
use url::Url;

use crate::Options;
use crate::report::Collector;
use crate::reservoir::Reservoir;
use crate::rules::{
    Computed, Cross, Digests, LinkCheck, Step, channel_url, interval_step, link_target,
};

/// One document to visit and what the document naming it implies.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) url: Url,
    /// The document naming it.
    pub(crate) referrer: Option<Url>,
    /// Its entry there.
    pub(crate) entry: Option<u64>,
    pub(crate) expect: Expect,
}

#[derive(Debug)]
pub(crate) enum Expect {
    /// The start: any kind.
    Start,
    /// A part of a Source Description Index (spec 8).
    DescriptionPart { index: Vec<Url> },
    /// A Capability List named by a Source Description: its `up` must lead back (spec 9).
    CapabilityList { description: Vec<Url> },
    /// A capability document named by a Capability List (spec 9).
    Capability {
        capability: Capability,
        capability_list: Vec<Url>,
    },
    /// A part of an index.
    Part {
        capability: Capability,
        capability_list: Vec<Url>,
        index: Vec<Url>,
        index_kind: DocumentKind,
        /// The index entry's `<rs:md>` (times the part must agree with).
        md: Option<Box<Md>>,
        /// The interval chain of a Change List Index or Change Dump Index.
        chain: Option<usize>,
    },
    /// The Source Description a Capability List given directly names as `up`: it must list
    /// that Capability List (spec 8, 9).
    UpOf { capability_list: Vec<Url> },
    /// The published copy of a package's manifest (`rs:ln rel="contents"`, spec 11.1, 13.1).
    ManifestCopy {
        change: bool,
        capability_list: Vec<Url>,
    },
    /// A dump package (spec 11.1, 13.1).
    Package {
        entry: Box<UrlEntry>,
        change: bool,
        capability_list: Vec<Url>,
    },
}

impl Job {
    /// The spec section that names this document where it is named.
    fn section(&self) -> &'static str {
        match &self.expect {
            Expect::Start => "6.3",
            Expect::DescriptionPart { .. } | Expect::CapabilityList { .. } => "8",
            Expect::Capability { .. } | Expect::UpOf { .. } => "9",
            Expect::Part { index_kind, .. } => index_kind.section(),
            Expect::Package { change: true, .. } | Expect::ManifestCopy { change: true, .. } => {
                "13.1"
            }
            Expect::Package { change: false, .. } | Expect::ManifestCopy { change: false, .. } => {
                "11.1"
            }
        }
    }

    /// What this document is, for messages.
    fn what(&self) -> String {
        match &self.expect {
            Expect::Start => "the start document".into(),
            Expect::DescriptionPart { .. } => "the Source Description part".into(),
            Expect::CapabilityList { .. } => "the Capability List".into(),
            Expect::Capability { capability, .. } => format!("the `{capability}` document"),
            Expect::Part { index_kind, .. } => format!("the part of the {}", index_kind.name()),
            Expect::UpOf { .. } => "the Source Description (`up` of the Capability List)".into(),
            Expect::Package { .. } => "the dump package".into(),
            Expect::ManifestCopy { .. } => "the manifest copy (`contents` link)".into(),
        }
    }
}

/// The previous part of an interval chain.
#[derive(Debug, Default)]
struct Chain {
    prev: Option<(String, Option<W3cDateTime>)>,
}

/// What entries of one document taught the walker.
#[derive(Debug, Default)]
struct Seen {
    /// An [`Expect::UpOf`] Source Description lists the Capability List.
    listed: bool,
    /// The interval chain of this index's parts.
    chain: Option<usize>,
}

pub(crate) struct Walker<'a> {
    pub(crate) opts: &'a Options,
    pub(crate) fetcher: Fetcher,
    pub(crate) access: Access,
    pub(crate) out: Collector,
    queue: VecDeque<Job>,
    /// Every document queued (and the start): a document named twice is visited once, and
    /// its size is the bound on what the walk holds.
    named: HashSet<Url>,
    chains: Vec<Chain>,
    pub(crate) sample: Reservoir,
    /// A bound ended the walk.
    pub(crate) stopped: bool,
}

/// A document opened for reading, and its bytes' digests when asked for.
pub(crate) struct Opened {
    pub(crate) url: Url,
    pub(crate) reader: DocumentReader,
    pub(crate) digests: Option<Arc<Mutex<Digests>>>,
}

/// Why a document could not be opened.
pub(crate) enum OpenError {
    /// The fetch failed (or the body, while the header was read).
    Fetch(rsagg_fetch::Error),
    /// It was fetched but is not a readable ResourceSync document (not well-formed, wrong
    /// root, a DOCTYPE): one fatal problem.
    Unreadable(Url, Problem),
}

impl<'a> Walker<'a> {
    /// A walk with nothing queued yet.
    pub(crate) fn new(opts: &'a Options, fetcher: Fetcher, access: Access) -> Self {
        Walker {
            opts,
            fetcher,
            access,
            out: Collector::new(opts.mode, opts.max_problems),
            queue: VecDeque::new(),
            named: HashSet::new(),
            chains: Vec::new(),
            sample: Reservoir::new(opts.sample, opts.seed),
            stopped: false,
        }
    }

    /// The next document queued.
    pub(crate) fn next_job(&mut self) -> Option<Job> {
        self.queue.pop_front()
    }

    /// Bytes the walk may still read.
    pub(crate) fn remaining_bytes(&self) -> u64 {
        self.opts.max_bytes.saturating_sub(self.out.summary.bytes)
    }

    /// Ends the walk (max-bytes) or its growth (max-documents) with one warning.
    pub(crate) fn bound(&mut self, which: &'static str, at: &Url) {
        if self.out.summary.truncated.is_some() {
            if which == "max-bytes" {
                self.stopped = true;
            }
            return;
        }
        self.out.summary.truncated = Some(which);
        let (limit, what) = match which {
            "max-bytes" => (self.opts.max_bytes, "bytes"),
            _ => (self.opts.max_documents, "documents"),
        };
        self.out.cross(
            Cross::BoundReached,
            "7",
            at.as_str(),
            format!(
                "the walk reached --{which} ({limit} {what}) here; documents beyond it were not checked"
            ),
        );
        if which == "max-bytes" {
            self.stopped = true;
        }
    }

    /// Takes a document slot for `url`: false when it was named before (visited once) or
    /// when the document bound is reached (then reported once).
    pub(crate) fn claim(&mut self, url: &Url) -> bool {
        if self.named.contains(url) {
            return false;
        }
        if self.named.len() as u64 >= self.opts.max_documents {
            self.bound("max-documents", url);
            return false;
        }
        self.named.insert(url.clone());
        true
    }

    fn enqueue(&mut self, job: Job) {
        if !self.stopped && self.claim(&job.url) {
            self.queue.push_back(job);
        }
    }

    /// Fetches `url` and opens it as a document, within what is left of the byte bound;
    /// with `hash`, the digests of its bytes (after inflation) are computed as it is read.
    pub(crate) async fn open(&mut self, url: &Url, hash: bool) -> Result<Opened, OpenError> {
        let cap = self.remaining_bytes();
        let req = Request {
            max_bytes: cap,
            inflate_gzip: true,
            timeout: Some(self.fetcher.config().document_timeout),
            ..Request::default()
        };
        let fetched = self
            .fetcher
            .get(url, &self.access, &req)
            .await
            .map_err(OpenError::Fetch)?;
        let final_url = fetched.url.clone();
        let opts = ReadOptions {
            mode: self.opts.mode,
            max_bytes: cap,
            max_entries: self.opts.max_entries,
            max_problems: self.out.room(),
            ..ReadOptions::new(self.opts.mode, final_url.to_string())
        };
        let digests = hash.then(|| Arc::new(Mutex::new(Digests::default())));
        let body = fetched.body;
        let opened = match &digests {
            Some(d) => {
                let d = d.clone();
                let stream = body.inspect_ok(move |chunk| {
                    if let Ok(mut d) = d.lock() {
                        d.update(chunk);
                    }
                });
                let read = tokio_util::io::StreamReader::new(stream.map_err(std::io::Error::other));
                DocumentReader::open(read, opts).await
            }
            None => DocumentReader::open(body.into_async_read(), opts).await,
        };
        match opened {
            Ok(reader) => Ok(Opened {
                url: final_url,
                reader,
                digests,
            }),
            Err(e) => Err(match document_failure(&final_url, e) {
                Failure::Fetch(e) => OpenError::Fetch(e),
                Failure::Fatal(p) => OpenError::Unreadable(final_url, p),
            }),
        }
    }

    /// Reports a document that could not be fetched, naming the document that names it.
    pub(crate) fn fetch_failed(&mut self, job: &Job, e: rsagg_fetch::Error) {
        if too_large(&e) {
            self.bound("max-bytes", &job.url);
            return;
        }
        let rule = match e.status() {
            Some(404 | 410) => Cross::DocumentMissing,
            _ => Cross::DocumentUnreachable,
        };
        let by = match &job.referrer {
            Some(r) => format!(" named by {r}"),
            None => String::new(),
        };
        let message = format!("{}{by} cannot be fetched: {e}", job.what());
        let section = job.section();
        let mut f = self.out.cross(rule, section, job.url.as_str(), message);
        if let Some(r) = &job.referrer {
            f = f.related(r.as_str());
        }
        if let Some(i) = job.entry {
            f.entry(i);
        }
    }

    pub(crate) async fn visit(&mut self, job: Job) {
        match self.open(&job.url, false).await {
            Ok(o) => {
                self.read(job, o).await;
            }
            Err(OpenError::Fetch(e)) => {
                self.break_chain(&job);
                self.fetch_failed(&job, e);
            }
            Err(OpenError::Unreadable(url, p)) => {
                self.break_chain(&job);
                self.out.document(url.as_str(), vec![p], 1, 0);
                self.out.read(DocumentKind::Other.name(), 0, 0);
            }
        }
    }

    /// A part that could not be read leaves nothing to compare the next one with.
    fn break_chain(&mut self, job: &Job) {
        if let Expect::Part { chain: Some(c), .. } = &job.expect {
            self.chains[*c].prev = None;
        }
    }

    /// Reads an opened document to its end: its header against the job's expectations,
    /// each entry as its kind says (documents to visit queued, resources offered to the
    /// sample), then its own problems.
    pub(crate) async fn read(&mut self, job: Job, opened: Opened) -> ReadDoc {
        let Opened {
            url,
            mut reader,
            digests,
        } = opened;
        let header = reader.header().clone();
        let kind = reader.kind();
        let mut names = vec![job.url.clone()];
        if url != job.url {
            names.push(url.clone());
        }
        self.header(&job, &url, &names, &header, kind);
        let mut seen = Seen::default();
        let mut i = 0u64;
        let fatal = loop {
            match reader.next_entry().await {
                Ok(Some(e)) => {
                    self.entry(&job, &url, &names, &header, kind, i, &e, &mut seen);
                    i += 1;
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        let tally = reader.tally();
        let mut problems = reader.take_problems();
        let mut errors = tally.errors;
        let mut complete = true;
        if let Some(e) = fatal {
            complete = false;
            match document_failure(&url, e) {
                Failure::Fetch(e) => {
                    self.break_chain(&job);
                    self.fetch_failed(&job, e);
                }
                Failure::Fatal(p) => {
                    problems.push(p);
                    errors += 1;
                }
            }
        }
        problems.sort_by_key(|p| (p.line, p.column));
        self.out
            .document(url.as_str(), problems, errors, tally.warnings);
        self.out.read(kind.name(), tally.entries, tally.bytes);
        if complete
            && let Expect::UpOf { capability_list } = &job.expect
            && kind == DocumentKind::SourceDescription
            && !seen.listed
        {
            self.out
                .cross(
                    Cross::CapabilityListUnlisted,
                    "8",
                    url.as_str(),
                    format!(
                        "the Source Description does not list the Capability List {} whose `up` names it",
                        capability_list[0]
                    ),
                )
                .related(capability_list[0].as_str());
        }
        ReadDoc {
            url,
            digest: match (complete, digests) {
                (true, Some(d)) => d.lock().ok().map(|d| d.clone().finish()),
                _ => None,
            },
        }
    }

    /// The header against what the naming document implies.
    fn header(&mut self, job: &Job, url: &Url, names: &[Url], header: &Header, kind: DocumentKind) {
        let up = header.link("up").map(|l| l.href.as_str());
        let capability = header.capability().map(Capability::current);
        if matches!(kind, DocumentKind::CapabilityList)
            && let Some(hub) = header.link("hub")
            && let Err(why) = channel_url(url, &hub.href)
        {
            self.out.cross(
                Cross::ChannelLinkInvalid,
                "CN 5",
                url.as_str(),
                format!("the Capability List's rs:ln rel=\"hub\": {why}"),
            );
        }
        match &job.expect {
            Expect::Start => {
                if kind == DocumentKind::CapabilityList
                    && let Some(href) = up
                    && let Ok(target) = url.join(href.trim())
                {
                    self.enqueue(Job {
                        url: target,
                        referrer: Some(url.clone()),
                        entry: None,
                        expect: Expect::UpOf {
                            capability_list: names.to_vec(),
                        },
                    });
                }
            }
            Expect::DescriptionPart { index } => {
                self.expect_kind(job, url, kind, &[DocumentKind::SourceDescription], "8");
                self.index_link(url, header, index, "8");
            }
            Expect::CapabilityList { description } => {
                self.expect_kind(job, url, kind, &[DocumentKind::CapabilityList], "8");
                self.up_link(
                    url,
                    url.as_str(),
                    up,
                    description,
                    "9",
                    "the Source Description listing it",
                );
            }
            Expect::Capability {
                capability: expected,
                capability_list,
            } => {
                if capability.as_ref() != Some(expected) {
                    self.mismatch(job, url, kind, &format!("`{expected}`"), "9");
                }
                self.up_link(
                    url,
                    url.as_str(),
                    up,
                    capability_list,
                    kind.section(),
                    "its Capability List",
                );
            }
            Expect::Part {
                capability: expected,
                capability_list,
                index,
                index_kind,
                md,
                chain,
            } => {
                let section = index_kind.section();
                if kind.is_index() {
                    self.out
                        .cross(
                            Cross::IndexNested,
                            section,
                            url.as_str(),
                            format!(
                                "a part of the {} is itself an index ({}); an index names `<urlset>` documents",
                                index_kind.name(),
                                kind.name()
                            ),
                        )
                        .related(index[0].as_str());
                } else if capability.as_ref() != Some(expected) {
                    self.mismatch(job, url, kind, &format!("`{expected}`"), section);
                }
                self.up_link(
                    url,
                    url.as_str(),
                    up,
                    capability_list,
                    kind.section(),
                    "its Capability List",
                );
                self.index_link(url, header, index, kind.section());
                self.part_times(
                    url.as_str(),
                    &index[0],
                    header.md.as_ref(),
                    md.as_deref(),
                    section,
                );
                if let Some(c) = chain {
                    let from = header.md.as_ref().and_then(|m| m.from.as_ref());
                    let until = header.md.as_ref().and_then(|m| m.until);
                    self.chain_step(*c, url, from, section);
                    self.chains[*c].prev = Some((url.to_string(), until));
                }
            }
            Expect::UpOf { .. } => {
                self.expect_kind(
                    job,
                    url,
                    kind,
                    &[
                        DocumentKind::SourceDescription,
                        DocumentKind::SourceDescriptionIndex,
                    ],
                    "9",
                );
            }
            Expect::ManifestCopy {
                change,
                capability_list,
            } => {
                let (expected, section) = if *change {
                    (DocumentKind::ChangeDumpManifest, "13.2")
                } else {
                    (DocumentKind::ResourceDumpManifest, "11.2")
                };
                self.expect_kind(job, url, kind, &[expected], section);
                self.up_link(
                    url,
                    url.as_str(),
                    up,
                    capability_list,
                    section,
                    "its Capability List",
                );
            }
            Expect::Package { .. } => {}
        }
    }

    fn expect_kind(
        &mut self,
        job: &Job,
        url: &Url,
        kind: DocumentKind,
        allowed: &[DocumentKind],
        section: &'static str,
    ) {
        if !allowed.contains(&kind) {
            let names: Vec<&str> = allowed.iter().map(|k| k.name()).collect();
            self.mismatch(job, url, kind, &names.join(" or "), section);
        }
    }

    fn mismatch(
        &mut self,
        job: &Job,
        url: &Url,
        kind: DocumentKind,
        expected: &str,
        section: &'static str,
    ) {
        let by = job
            .referrer
            .as_ref()
            .map(|r| format!(" by {r}"))
            .unwrap_or_default();
        let mut f = self.out.cross(
            Cross::CapabilityMismatch,
            section,
            url.as_str(),
            format!("named as {expected}{by}, but it is a {}", kind.name()),
        );
        if let Some(r) = &job.referrer {
            f = f.related(r.as_str());
        }
        if let Some(i) = job.entry {
            f.entry(i);
        }
    }

    /// An `up` link must lead to one of `expected` (when known). A missing one is the
    /// single-document checks' `up-link-missing`.
    pub(crate) fn up_link(
        &mut self,
        url: &Url,
        at: &str,
        up: Option<&str>,
        expected: &[Url],
        section: &'static str,
        what: &str,
    ) {
        if expected.is_empty() {
            return;
        }
        match link_target(url, up, expected) {
            LinkCheck::Missing | LinkCheck::Matches => {}
            LinkCheck::Elsewhere(to) => {
                self.out
                    .cross(
                        Cross::UpLinkMismatch,
                        section,
                        at,
                        format!(
                            "rs:ln rel=\"up\" points to {to}, not to {what} {}",
                            expected[0]
                        ),
                    )
                    .related(expected[0].as_str());
            }
            LinkCheck::Unresolvable(href) => {
                self.out
                    .cross(
                        Cross::UpLinkMismatch,
                        section,
                        at,
                        format!("rs:ln rel=\"up\" href `{href}` is not a URI; it must point to {what} {}", expected[0]),
                    )
                    .related(expected[0].as_str());
            }
        }
    }

    /// A part's `index` link: recommended, and when given it must lead to its index.
    fn index_link(&mut self, url: &Url, header: &Header, index: &[Url], section: &'static str) {
        let href = header.link("index").map(|l| l.href.as_str());
        match link_target(url, href, index) {
            LinkCheck::Matches => {}
            LinkCheck::Missing => {
                self.out
                    .cross(
                        Cross::IndexLinkMissing,
                        section,
                        url.as_str(),
                        format!(
                            "no rs:ln rel=\"index\" to the index {} that names it (recommended)",
                            index[0]
                        ),
                    )
                    .related(index[0].as_str());
            }
            LinkCheck::Elsewhere(to) => {
                self.out
                    .cross(
                        Cross::IndexLinkMismatch,
                        section,
                        url.as_str(),
                        format!(
                            "rs:ln rel=\"index\" points to {to}, not to the index {} that names it",
                            index[0]
                        ),
                    )
                    .related(index[0].as_str());
            }
            LinkCheck::Unresolvable(href) => {
                self.out
                    .cross(
                        Cross::IndexLinkMismatch,
                        section,
                        url.as_str(),
                        format!(
                            "rs:ln rel=\"index\" href `{href}` is not a URI; it must point to {}",
                            index[0]
                        ),
                    )
                    .related(index[0].as_str());
            }
        }
    }

    /// The times a document states of itself against those the document naming it states
    /// of it (an index entry, a dump entry).
    pub(crate) fn part_times(
        &mut self,
        url: &str,
        named_by: &Url,
        own: Option<&Md>,
        named: Option<&Md>,
        section: &'static str,
    ) {
        let (Some(own), Some(named)) = (own, named) else {
            return;
        };
        let pairs = [
            ("at", own.at.as_ref(), named.at.as_ref()),
            (
                "completed",
                own.completed.as_ref(),
                named.completed.as_ref(),
            ),
            ("from", own.from.as_ref(), named.from.as_ref()),
            ("until", own.until.as_ref(), named.until.as_ref()),
        ];
        for (attr, a, b) in pairs {
            if crate::rules::times_differ(a, b)
                && let (Some(a), Some(b)) = (a, b)
            {
                self.out
                    .cross(
                        Cross::PartIntervalMismatch,
                        section,
                        url,
                        format!("`{attr}` is {a} here but {b} where {named_by} names it"),
                    )
                    .related(named_by.as_str());
            }
        }
    }

    /// The step from the chain's previous part to a part beginning at `from`.
    fn chain_step(
        &mut self,
        c: usize,
        url: &Url,
        from: Option<&W3cDateTime>,
        section: &'static str,
    ) {
        let Some((prev, prev_until)) = self.chains[c].prev.take() else {
            return;
        };
        let (rule, message) = match interval_step(prev_until.as_ref(), from) {
            Step::Consecutive | Step::Unknown => return,
            Step::Gap => (
                Cross::IntervalGap,
                format!(
                    "a gap: the previous part {prev} ends (`until`) at {} but this one begins (`from`) at {}",
                    fmt(prev_until.as_ref()),
                    fmt(from)
                ),
            ),
            Step::Overlap => (
                Cross::IntervalOverlap,
                format!(
                    "an overlap: the previous part {prev} ends (`until`) at {} after this one begins (`from`) at {}",
                    fmt(prev_until.as_ref()),
                    fmt(from)
                ),
            ),
            Step::OpenBefore => (
                Cross::IntervalOverlap,
                format!("the previous part {prev} is open (no `until`) but is not the last"),
            ),
        };
        self.out
            .cross(rule, section, url.as_str(), message)
            .related(&prev);
    }

    /// One entry of a document, as its kind says.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &mut self,
        job: &Job,
        url: &Url,
        names: &[Url],
        header: &Header,
        kind: DocumentKind,
        i: u64,
        e: &UrlEntry,
        seen: &mut Seen,
    ) {
        // A `<loc>` that is not a URI is the single-document checks' `loc-not-absolute`.
        let Ok(loc) = url.join(e.loc.trim()) else {
            return;
        };
        let capability =
            e.md.as_ref()
                .and_then(|m| m.capability.as_ref())
                .map(Capability::current);
        let child = |expect| Job {
            url: loc.clone(),
            referrer: Some(url.clone()),
            entry: Some(i),
            expect,
        };
        match kind {
            DocumentKind::SourceDescription => {
                if let Expect::UpOf { capability_list } = &job.expect {
                    if capability_list
                        .iter()
                        .any(|c| crate::rules::same_document(c, &loc))
                    {
                        seen.listed = true;
                    }
                } else if capability.is_none_or(|c| c == Capability::CapabilityList) {
                    self.enqueue(child(Expect::CapabilityList {
                        description: names.to_vec(),
                    }));
                }
            }
            DocumentKind::SourceDescriptionIndex if !matches!(job.expect, Expect::UpOf { .. }) => {
                self.enqueue(child(Expect::DescriptionPart {
                    index: names.to_vec(),
                }));
            }
            DocumentKind::CapabilityList => match capability {
                Some(
                    c @ (Capability::ResourceList
                    | Capability::ChangeList
                    | Capability::ResourceDump
                    | Capability::ChangeDump),
                ) => self.enqueue(child(Expect::Capability {
                    capability: c,
                    capability_list: names.to_vec(),
                })),
                Some(Capability::ChangeNotification) => {
                    // The topic and its hub (CN 1.0.1 section 5); nothing is subscribed to.
                    if let Err(why) = channel_url(url, &e.loc) {
                        self.out
                            .cross(
                                Cross::ChannelLinkInvalid,
                                "CN 5",
                                url.as_str(),
                                format!("the change-notification topic: {why}"),
                            )
                            .entry(i);
                    }
                    if let Some(hub) = e.link("hub")
                        && let Err(why) = channel_url(url, &hub.href)
                    {
                        self.out
                            .cross(
                                Cross::ChannelLinkInvalid,
                                "CN 5",
                                url.as_str(),
                                format!("the change-notification entry's rs:ln rel=\"hub\": {why}"),
                            )
                            .entry(i);
                    }
                }
                _ => {}
            },
            DocumentKind::ResourceListIndex
            | DocumentKind::ChangeListIndex
            | DocumentKind::ResourceDumpIndex
            | DocumentKind::ChangeDumpIndex
            | DocumentKind::PlainSitemapIndex => {
                let own = header
                    .capability()
                    .map(Capability::current)
                    .unwrap_or(Capability::ResourceList);
                let chain = if matches!(
                    kind,
                    DocumentKind::ChangeListIndex | DocumentKind::ChangeDumpIndex
                ) {
                    Some(*seen.chain.get_or_insert_with(|| {
                        self.chains.push(Chain::default());
                        self.chains.len() - 1
                    }))
                } else {
                    None
                };
                let capability_list = self.capability_list_of(job, url, header);
                self.enqueue(child(Expect::Part {
                    capability: own,
                    capability_list,
                    index: names.to_vec(),
                    index_kind: kind,
                    md: e.md.clone().map(Box::new),
                    chain,
                }));
            }
            DocumentKind::ResourceList | DocumentKind::PlainSitemap => {
                self.sample.offer(loc, e.md.as_ref(), url, i);
            }
            DocumentKind::ResourceDump | DocumentKind::ChangeDump => {
                let capability_list = self.capability_list_of(job, url, header);
                self.enqueue(child(Expect::Package {
                    entry: Box::new(e.clone()),
                    change: kind == DocumentKind::ChangeDump,
                    capability_list,
                }));
            }
            _ => {}
        }
    }

    /// The Capability List a document's parts and packages must name as `up`: the one that
    /// named the document, else the document's own `up`.
    fn capability_list_of(&self, job: &Job, url: &Url, header: &Header) -> Vec<Url> {
        match &job.expect {
            Expect::Capability {
                capability_list, ..
            }
            | Expect::Part {
                capability_list, ..
            } if !capability_list.is_empty() => capability_list.clone(),
            _ => header
                .link("up")
                .and_then(|l| url.join(l.href.trim()).ok())
                .into_iter()
                .collect(),
        }
    }
}

/// What [`Walker::read`] learnt of a document.
pub(crate) struct ReadDoc {
    pub(crate) url: Url,
    /// The digests of its bytes, when asked for and read to the end.
    pub(crate) digest: Option<Computed>,
}

/// The body went over its bound (the byte bound of the walk): also when that was found
/// while a gzip body was inflated.
pub(crate) fn too_large(e: &rsagg_fetch::Error) -> bool {
    fn within(e: &(dyn std::error::Error + 'static)) -> bool {
        if let Some(f) = e.downcast_ref::<rsagg_fetch::Error>()
            && matches!(f, rsagg_fetch::Error::TooLarge { .. })
        {
            return true;
        }
        // An I/O error carries the fetcher's inside (the decoder passes it on).
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|i| within(i));
        inner || e.source().is_some_and(within)
    }
    // The reader's and the decoder's layers keep the fetcher's error as text only in some
    // paths (`cannot inflate gzip body: …: body is larger than the limit`): its message is
    // the fetcher's own `TooLarge` text.
    within(e)
        || rsagg_model::ErrorChain(e)
            .to_string()
            .contains("body is larger than the limit of")
}

fn fmt(t: Option<&W3cDateTime>) -> String {
    t.map_or_else(|| "(none)".to_owned(), ToString::to_string)
}

pub(crate) enum Failure {
    Fetch(rsagg_fetch::Error),
    Fatal(Problem),
}

/// A reader error: a failure of the fetch underneath (the body), or of the document.
pub(crate) fn document_failure(url: &Url, e: rsagg_sitemap::Error) -> Failure {
    match e {
        rsagg_sitemap::Error::Io { error, .. } => {
            Failure::Fetch(rsagg_fetch::Error::from_io(url, error))
        }
        rsagg_sitemap::Error::TooLarge { limit, .. } => {
            Failure::Fetch(rsagg_fetch::Error::TooLarge {
                url: url.clone(),
                limit,
            })
        }
        other => Failure::Fatal(fatal_problem(&other)),
    }
}

/// The one problem of a document that cannot be read on (as `rsagg validate` reports it).
pub(crate) fn fatal_problem(e: &rsagg_sitemap::Error) -> Problem {
    let pos = e.pos().unwrap_or_default();
    let (rule, message) = match e {
        rsagg_sitemap::Error::Syntax { message, .. } => {
            (Rule::XmlSyntax, format!("not well-formed XML: {message}"))
        }
        rsagg_sitemap::Error::Root { message, .. } => (Rule::Root, message.clone()),
        rsagg_sitemap::Error::Doctype { .. } => (
            Rule::Doctype,
            "DOCTYPE declarations are refused (no entity expansion)".to_owned(),
        ),
        other => (Rule::XmlSyntax, other.to_string()),
    };
    Problem {
        severity: Severity::Error,
        line: pos.line,
        column: pos.column,
        section: "7",
        code: rule.code(),
        message,
        entry: None,
        rule,
    }
}
