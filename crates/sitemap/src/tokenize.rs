//! The tokenizer half of the reader: XML events, namespaces and document structure. It
//! reads the header completely, then copies the raw pieces of each entry (texts and the start
//! tags of `<rs:md>`/`<rs:ln>`) into a [`RawBatch`]; the builder (`build.rs`) turns those into
//! typed entries and checks them. The split lets the two halves run on two cores.
//!
//! Namespaces are resolved with quick-xml's `NamespaceResolver`, pushed only for elements that
//! declare namespaces (see [`Scopes`]); the rules are in the `reader` module documentation.
//!
//! Entries of the common shape (plain text children, empty `<rs:md/>`/`<rs:ln/>` with plain
//! attributes, nothing to report) are read by a fast path straight from the input buffer
//! (`tokenize/fast.rs`); anything else goes through quick-xml here. Both ways yield the same
//! raw entries and problems.

use std::borrow::Cow;
use std::io;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{NamespaceResolver, QName, ResolveResult};
use rsagg_model::validate::{apply_ln_attr, apply_md_attr};
use rsagg_model::{
    ExtAttr, Header, HeaderSpans, Link, Md, Pos, Problem, RS_NS, Root, Rule, SITEMAP_NS, Validator,
};
use std::io::BufRead;

use crate::counting::{Counting, LimitExceeded};
use crate::{Error, ReadOptions};

mod fast;
use fast::{FastEntry, same};

/// Reads the next event into `self.buf`, giving `(event, offset where it starts)`; returns
/// from the enclosing function on an XML error. A macro, not a method: the event borrows
/// `self.buf` while the caller goes on using the other fields.
macro_rules! next_event {
    ($self:ident) => {{
        let before = $self.offset();
        $self.buf.clear();
        match $self.xml.read_event_into(&mut $self.buf) {
            Ok(ev) => {
                let after = $self.xml.buffer_position() + $self.skipped;
                let start = event_start(before, after, &ev);
                (ev, start)
            }
            Err(e) => return Err($self.xml_error(e)),
        }
    }};
}

/// Namespace of an element, as far as the format cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ns {
    Sitemap,
    Rs,
    /// Looks like the ResourceSync namespace but is not it (typo, missing slash, https).
    WrongRs(String),
    /// Some other namespace: an extension, skipped.
    Other(String),
    /// No namespace at all.
    None,
    /// A prefix that is not declared.
    UnknownPrefix(String),
}

fn classify(r: &ResolveResult<'_>) -> Ns {
    match r {
        ResolveResult::Bound(ns) => match ns.as_ref() {
            b if b == SITEMAP_NS.as_bytes() => Ns::Sitemap,
            b if b == RS_NS.as_bytes() => Ns::Rs,
            b => {
                let s = String::from_utf8_lossy(b).into_owned();
                if s.contains("openarchives.org/rs") {
                    Ns::WrongRs(s)
                } else {
                    Ns::Other(s)
                }
            }
        },
        ResolveResult::Unbound => Ns::None,
        ResolveResult::Unknown(p) => Ns::UnknownPrefix(String::from_utf8_lossy(p).into_owned()),
    }
}

/// Namespace scopes: only elements that declare namespaces open one, so the common element
/// costs no push or pop (the resolver itself is quick-xml's).
#[derive(Debug, Default)]
struct Scopes {
    ns: NamespaceResolver,
    /// Depths of the open elements that declared namespaces.
    declared_at: Vec<u32>,
    depth: u32,
    /// Qualified names already classified under the current bindings (cleared when they
    /// change): resolving and comparing namespace URIs for every element is measurable.
    known: Vec<(Box<[u8]>, Tag)>,
    /// Changes whenever the bindings change.
    generation: u32,
}

impl Scopes {
    fn start(&mut self, e: &BytesStart<'_>) -> Result<(), String> {
        self.depth += 1;
        static XMLNS: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"xmlns"));
        let raw = e.attributes_raw();
        if !raw.is_empty() && XMLNS.find(raw).is_some() {
            std::str::from_utf8(raw)
                .map_err(|_| "namespace declaration is not valid UTF-8".to_owned())?;
            self.ns.push(e).map_err(|err| err.to_string())?;
            self.declared_at.push(self.depth);
            self.known.clear();
            self.generation += 1;
        }
        Ok(())
    }

    fn end(&mut self) {
        if self.declared_at.last() == Some(&self.depth) {
            self.declared_at.pop();
            self.ns.pop();
            self.known.clear();
            self.generation += 1;
        }
        self.depth = self.depth.saturating_sub(1);
    }

    /// [`Scopes::tag`] for the fast path, which only needs to tell a few simple tags apart:
    /// no clone of the cached [`Tag`] (measurable at several elements per entry).
    fn simple_tag(&mut self, name: &[u8]) -> Simple {
        let simple = |t: &Tag| match t {
            Tag::Md => Simple::Md,
            Tag::Ln => Simple::Ln,
            Tag::Loc => Simple::Text(0),
            Tag::Lastmod => Simple::Text(1),
            Tag::Changefreq => Simple::Text(2),
            Tag::Priority => Simple::Text(3),
            Tag::Url => Simple::Url,
            Tag::Sitemap => Simple::Sitemap,
            _ => Simple::Other,
        };
        match self.known.iter().find(|(k, _)| same(k, name)) {
            Some((_, t)) => simple(t),
            None => simple(&self.tag(QName(name))),
        }
    }

    /// What the element called `name` is, under the current bindings.
    fn tag(&mut self, name: QName<'_>) -> Tag {
        let q = name.as_ref();
        if let Some((_, t)) = self.known.iter().find(|(k, _)| same(k, q)) {
            return t.clone();
        }
        let (res, local) = self.ns.resolve_element(name);
        let tag = tag_of(classify(&res), local.as_ref());
        if !matches!(tag, Tag::Unknown(..) | Tag::BadNs(..) | Tag::Extension)
            && self.known.len() < 32
        {
            self.known.push((q.into(), tag.clone()));
        }
        tag
    }
}

/// The tags [`scan_entry`] handles; `Text` by [`RawEntry::slot`] number.
#[derive(Debug, Clone, Copy)]
enum Simple {
    Md,
    Ln,
    Text(u8),
    Url,
    Sitemap,
    Other,
}

/// What one element start means inside a document.
#[derive(Debug, Clone)]
enum Tag {
    Md,
    Ln,
    Loc,
    Lastmod,
    Changefreq,
    Priority,
    Url,
    Sitemap,
    Urlset,
    Sitemapindex,
    /// Unknown element of the Sitemap or ResourceSync namespace.
    Unknown(Ns, String),
    /// Element of a foreign namespace (skipped silently).
    Extension,
    /// Element with a bad namespace (reported).
    BadNs(Ns, String),
}

fn tag_of(ns: Ns, local: &[u8]) -> Tag {
    let local_s = || String::from_utf8_lossy(local).into_owned();
    match ns {
        Ns::Sitemap => match local {
            b"loc" => Tag::Loc,
            b"lastmod" => Tag::Lastmod,
            b"changefreq" => Tag::Changefreq,
            b"priority" => Tag::Priority,
            b"url" => Tag::Url,
            b"sitemap" => Tag::Sitemap,
            b"urlset" => Tag::Urlset,
            b"sitemapindex" => Tag::Sitemapindex,
            _ => Tag::Unknown(Ns::Sitemap, local_s()),
        },
        Ns::Rs => match local {
            b"md" => Tag::Md,
            b"ln" => Tag::Ln,
            _ => Tag::Unknown(Ns::Rs, local_s()),
        },
        // `md`/`ln` are ResourceSync's names; in any other namespace they are almost surely a
        // mistyped ResourceSync namespace, which must not pass as an extension.
        Ns::Other(uri) if matches!(local, b"md" | b"ln") => Tag::BadNs(Ns::WrongRs(uri), local_s()),
        Ns::Other(_) => Tag::Extension,
        other => Tag::BadNs(other, local_s()),
    }
}

fn ns_message(ns: &Ns, local: &str) -> String {
    match ns {
        Ns::WrongRs(uri) => format!(
            "element `{local}` is in namespace `{uri}`, not the ResourceSync namespace `{RS_NS}`"
        ),
        Ns::UnknownPrefix(p) => {
            format!("element `{p}:{local}` uses prefix `{p}`, which is not declared")
        }
        Ns::None => format!(
            "element `{local}` is in no namespace; Sitemap elements must be in `{SITEMAP_NS}`"
        ),
        Ns::Sitemap | Ns::Rs | Ns::Other(_) => format!("element `{local}` is not expected here"),
    }
}

/// One `<rs:md>` or `<rs:ln>` start tag, kept raw: `arena[start..end]` is the tag's content
/// (name and attributes), re-read by the builder with `BytesStart::from_content`.
#[derive(Debug, Clone)]
pub(crate) struct RawElem {
    pub(crate) is_md: bool,
    pub(crate) pos: Pos,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) name_len: usize,
    /// Namespace bindings in force (see [`RawBatch::resolvers`]).
    pub(crate) scope_gen: u32,
    /// `batch.attrs[a..b]`: the attributes, already split by the tokenizer when they are all
    /// plain (see [`split_attrs`]); `None`: the builder reads them from the raw tag.
    pub(crate) attrs: Option<(usize, usize)>,
}

/// One plain attribute split by the tokenizer: `arena[name.0..name.1]` and
/// `arena[value.0..value.1]`, the value needing no normalization.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawAttr {
    pub(crate) name: (usize, usize),
    pub(crate) value: (usize, usize),
}

/// A text child (`<loc>`, `<lastmod>`, …): `arena[start..end]`, untrimmed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawText {
    pub(crate) pos: Pos,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// One entry as the tokenizer saw it.
#[derive(Debug, Clone)]
pub(crate) struct RawEntry {
    pub(crate) pos: Pos,
    pub(crate) loc: Option<RawText>,
    pub(crate) lastmod: Option<RawText>,
    pub(crate) changefreq: Option<RawText>,
    pub(crate) priority: Option<RawText>,
    /// `elems[elems.0..elems.1]` are this entry's `<rs:md>` (at most one) and `<rs:ln>`s.
    pub(crate) elems: (usize, usize),
}

impl RawEntry {
    /// Text slot `i`: 0 `<loc>`, 1 `<lastmod>`, 2 `<changefreq>`, 3 `<priority>`.
    fn slot(&mut self, i: u8) -> &mut Option<RawText> {
        match i {
            0 => &mut self.loc,
            1 => &mut self.lastmod,
            2 => &mut self.changefreq,
            _ => &mut self.priority,
        }
    }
}

/// Entries handed from the tokenizer to the builder, with the problems the tokenizer found
/// for them and whatever namespace bindings changed.
#[derive(Debug, Default)]
pub(crate) struct RawBatch {
    pub(crate) arena: String,
    pub(crate) elems: Vec<RawElem>,
    pub(crate) attrs: Vec<RawAttr>,
    pub(crate) entries: Vec<RawEntry>,
    pub(crate) problems: Vec<Problem>,
    /// New namespace bindings, by generation, in the order they took effect.
    pub(crate) resolvers: Vec<(u32, NamespaceResolver)>,
    /// End of document: its position and size, once the whole input was read.
    pub(crate) end: Option<(Pos, u64)>,
    /// Bytes read when the batch was handed over.
    pub(crate) bytes: u64,
}

impl RawBatch {
    /// A batch sized for `entries` entries of ordinary size, so it rarely grows.
    pub(crate) fn with_capacity(entries: usize) -> Self {
        RawBatch {
            arena: String::with_capacity(entries * 192),
            elems: Vec::with_capacity(entries * 2),
            attrs: Vec::with_capacity(entries * 4),
            entries: Vec::with_capacity(entries),
            ..RawBatch::default()
        }
    }

    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.elems.clear();
        self.attrs.clear();
        self.entries.clear();
        self.problems.clear();
        self.resolvers.clear();
        self.end = None;
    }

    pub(crate) fn text(&self, t: RawText) -> &str {
        &self.arena[t.start..t.end]
    }
}

/// Reads the structure of a ResourceSync document from buffered input: the header, then raw
/// entries.
pub(crate) struct Tokenizer<R> {
    xml: Reader<Counting<R>>,
    scopes: Scopes,
    buf: Vec<u8>,
    skip_buf: Vec<u8>,
    validator: Validator,
    header: Header,
    header_spans: HeaderSpans,
    /// The first entry's start tag, consumed while reading the header.
    pending: Option<(Pos, bool, Tag)>,
    root_closed: bool,
    finished: bool,
    entries: u64,
    /// The generation of the bindings last sent to the builder.
    sent_gen: Option<u32>,
    /// Bytes consumed by [`Tokenizer::fast_entry`] behind the XML reader's back: its
    /// `buffer_position` lags the input by this much (see [`Tokenizer::offset`]).
    skipped: u64,
    /// Scratch space of [`Tokenizer::fast_entry`].
    fast: FastEntry,
    opts: ReadOptions,
}

impl<R: BufRead> Tokenizer<R> {
    /// Parses the prolog, the root and its `<rs:md>`/`<rs:ln>` children.
    pub(crate) fn open(input: R, opts: ReadOptions) -> Result<Self, Error> {
        let mut xml = Reader::from_reader(Counting::new(input, opts.max_bytes));
        let cfg = xml.config_mut();
        cfg.expand_empty_elements = false;
        cfg.check_end_names = true;
        cfg.check_comments = true;
        let validator = Validator::new(opts.mode).with_max_problems(opts.max_problems);
        let mut r = Tokenizer {
            xml,
            scopes: Scopes::default(),
            buf: Vec::with_capacity(4096),
            skip_buf: Vec::new(),
            validator,
            header: Header {
                root: Root::Urlset,
                md: None,
                links: Vec::new(),
            },
            header_spans: HeaderSpans::default(),
            pending: None,
            root_closed: false,
            finished: false,
            entries: 0,
            sent_gen: None,
            skipped: 0,
            fast: FastEntry::default(),
            opts,
        };
        r.read_prolog_and_header()?;
        Ok(r)
    }

    /// The document header.
    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    /// Where the header's parts were found.
    pub(crate) fn header_spans(&self) -> &HeaderSpans {
        &self.header_spans
    }

    /// Takes the problems found so far (structure and header attributes).
    pub(crate) fn take_problems(&mut self) -> Vec<Problem> {
        self.validator.take_problems()
    }

    /// Bytes read so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.xml.get_ref().total()
    }

    /// Offset in the input of the XML reader's position: its own count plus what the fast
    /// path consumed without it.
    fn offset(&self) -> u64 {
        self.xml.buffer_position() + self.skipped
    }

    /// Appends the next entry to `batch`; false at the end of the document, when `batch.end`
    /// is set.
    pub(crate) fn next_raw(&mut self, batch: &mut RawBatch) -> Result<bool, Error> {
        if self.finished {
            return Ok(false);
        }
        if let Some((pos, empty, tag)) = self.pending.take() {
            return self.read_entry(pos, empty, tag, batch).map(|()| true);
        }
        if !self.root_closed {
            // The XML reader is between two pieces of markup here (the previous call ended
            // on an end tag or an empty element), which the fast path requires.
            let mut after_markup = true;
            // The same walk over root children as in the header, kept separate on purpose:
            // merged into one function it measured 5% slower on the parse benchmark.
            loop {
                if after_markup && self.fast_entry(batch) {
                    return Ok(true);
                }
                let (ev, start) = next_event!(self);
                let empty = matches!(ev, Event::Empty(_));
                after_markup = !matches!(ev, Event::Text(_) | Event::GeneralRef(_));
                match ev {
                    Event::Start(e) | Event::Empty(e) => {
                        self.scopes.start(&e).map_err(|m| {
                            syntax_err(&self.opts.source, self.xml.get_mut().pos(start), m)
                        })?;
                        let tag = self.scopes.tag(e.name());
                        let pos = self.xml.get_mut().pos(start);
                        if matches!(tag, Tag::Url | Tag::Sitemap) {
                            no_attributes(&e, &mut self.validator, pos);
                            return self.read_entry(pos, empty, tag, batch).map(|()| true);
                        }
                        let name = e.name().as_ref().to_vec();
                        match tag {
                            Tag::Md | Tag::Ln => {
                                self.validator.report(
                                    Rule::Misplaced,
                                    "7",
                                    pos,
                                    "<rs:md> and <rs:ln> of the document must come before its entries; ignored",
                                );
                                if !empty {
                                    self.skip(&name)?;
                                }
                            }
                            other => self.unexpected(other, pos, &name, empty)?,
                        }
                        self.scopes.end();
                    }
                    Event::End(_) => {
                        self.scopes.end();
                        self.root_closed = true;
                        break;
                    }
                    Event::Eof => return Err(self.eof_error()),
                    ev => stray(
                        self.xml.get_mut(),
                        &mut self.validator,
                        &self.opts.source,
                        ev,
                        start,
                    )?,
                }
            }
        }
        let end = self.read_epilog()?;
        batch.end = Some(end);
        batch.problems.append(&mut self.validator.take_problems());
        batch.bytes = self.bytes_read();
        Ok(false)
    }

    fn xml_error(&mut self, e: quick_xml::Error) -> Error {
        if let quick_xml::Error::Io(io) = &e {
            if let Some(l) = io.get_ref().and_then(|i| i.downcast_ref::<LimitExceeded>()) {
                return Error::TooLarge {
                    source_name: self.opts.source.clone(),
                    limit: l.0,
                };
            }
            return Error::Io {
                source_name: self.opts.source.clone(),
                error: io::Error::new(io.kind(), io.to_string()),
            };
        }
        let at = (self.xml.error_position() + self.skipped).max(self.offset().saturating_sub(1));
        let pos = self.xml.get_mut().pos(at);
        syntax_err(&self.opts.source, pos, e.to_string())
    }

    /// A syntax error at byte `offset`.
    fn error_at(&mut self, offset: u64, message: &str) -> Error {
        let pos = self.xml.get_mut().pos(offset);
        syntax_err(&self.opts.source, pos, message.to_owned())
    }

    fn eof_error(&mut self) -> Error {
        let at = self.offset();
        let pos = self.xml.get_mut().pos(at);
        syntax_err(
            &self.opts.source,
            pos,
            "unexpected end of document: the root element is not closed".into(),
        )
    }

    fn skip(&mut self, name: &[u8]) -> Result<(), Error> {
        self.skip_buf.clear();
        match self.xml.read_to_end_into(QName(name), &mut self.skip_buf) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.xml_error(e)),
        }
    }

    /// An element that is neither expected here nor an extension: report and skip.
    fn unexpected(&mut self, tag: Tag, pos: Pos, name: &[u8], empty: bool) -> Result<(), Error> {
        match tag {
            Tag::Extension => {}
            Tag::BadNs(ns, local) => {
                let msg = ns_message(&ns, &local);
                self.validator.report(Rule::Namespace, "4", pos, msg);
            }
            Tag::Unknown(ns, local) => {
                let msg = ns_message(&ns, &local);
                self.validator.report(Rule::Misplaced, "7", pos, msg);
            }
            _ => {
                let local = String::from_utf8_lossy(name).into_owned();
                self.validator.report(
                    Rule::Misplaced,
                    "7",
                    pos,
                    format!("element `{local}` is not allowed here"),
                );
            }
        }
        if !empty {
            self.skip(name)?;
        }
        Ok(())
    }

    fn read_prolog_and_header(&mut self) -> Result<(), Error> {
        // Prolog up to the root element.
        let root_empty = loop {
            let (ev, start) = next_event!(self);
            let empty = matches!(ev, Event::Empty(_));
            match ev {
                Event::Decl(d) => {
                    if std::str::from_utf8(&d).is_err() {
                        return Err(self.error_at(start, "XML declaration is not valid UTF-8"));
                    }
                    if let Some(Ok(enc)) = d.encoding()
                        && !enc.eq_ignore_ascii_case(b"utf-8")
                        && !enc.eq_ignore_ascii_case(b"utf8")
                    {
                        let enc = String::from_utf8_lossy(&enc).into_owned();
                        return Err(Error::Encoding {
                            source_name: self.opts.source.clone(),
                            encoding: enc,
                        });
                    }
                }
                Event::Start(e) | Event::Empty(e) => {
                    self.scopes.start(&e).map_err(|m| {
                        syntax_err(&self.opts.source, self.xml.get_mut().pos(start), m)
                    })?;
                    let (res, local) = self.scopes.ns.resolve_element(e.name());
                    let ns = classify(&res);
                    let local_s = String::from_utf8_lossy(local.as_ref()).into_owned();
                    let pos = self.xml.get_mut().pos(start);
                    let root = match (&ns, local.as_ref()) {
                        (Ns::Sitemap, b"urlset") => Root::Urlset,
                        (Ns::Sitemap, b"sitemapindex") => Root::Sitemapindex,
                        _ => {
                            let message = match ns {
                                Ns::Sitemap | Ns::Rs | Ns::WrongRs(_) => {
                                    format!(
                                        "root element is `{local_s}`, not <urlset> or <sitemapindex>"
                                    )
                                }
                                Ns::None => format!(
                                    "root element `{local_s}` is in no namespace; it must be in the Sitemap namespace `{SITEMAP_NS}`"
                                ),
                                Ns::Other(uri) => format!(
                                    "root element `{local_s}` is in namespace `{uri}`; it must be <urlset> or <sitemapindex> in `{SITEMAP_NS}`"
                                ),
                                Ns::UnknownPrefix(p) => {
                                    format!("root element uses undeclared prefix `{p}`")
                                }
                            };
                            self.validator.report(Rule::Root, "7", pos, message.clone());
                            return Err(Error::Root {
                                source_name: self.opts.source.clone(),
                                line: pos.line,
                                column: pos.column,
                                message,
                            });
                        }
                    };
                    self.header.root = root;
                    self.header_spans.root = pos;
                    // Inside the root, whitespace between elements is not worth an event.
                    self.xml.config_mut().trim_text_start = true;
                    break empty;
                }
                Event::Eof => {
                    return Err(self.error_at(start, "document has no root element"));
                }
                Event::Text(t) if !t.as_ref().iter().all(u8::is_ascii_whitespace) => {
                    return Err(self.error_at(start, "text before the root element"));
                }
                ev => stray(
                    self.xml.get_mut(),
                    &mut self.validator,
                    &self.opts.source,
                    ev,
                    start,
                )?,
            }
        };
        if root_empty {
            self.scopes.end();
            self.root_closed = true;
        } else {
            // Root children up to the first entry.
            loop {
                let (ev, start) = next_event!(self);
                let empty = matches!(ev, Event::Empty(_));
                match ev {
                    Event::Start(e) | Event::Empty(e) => {
                        self.scopes.start(&e).map_err(|m| {
                            syntax_err(&self.opts.source, self.xml.get_mut().pos(start), m)
                        })?;
                        let tag = self.scopes.tag(e.name());
                        let name = e.name().as_ref().to_vec();
                        let pos = self.xml.get_mut().pos(start);
                        match tag {
                            Tag::Md => {
                                let md = parse_attrs::<Md>(
                                    &e,
                                    &self.scopes.ns,
                                    &mut self.validator,
                                    pos,
                                )
                                .map_err(|m| syntax_err(&self.opts.source, pos, m))?;
                                if self.header.md.is_some() {
                                    self.validator.report(
                                        Rule::Repeated,
                                        "7",
                                        pos,
                                        "the root has more than one <rs:md>; the first is used",
                                    );
                                } else {
                                    self.header.md = Some(md);
                                    self.header_spans.md = pos;
                                }
                                if !empty {
                                    self.empty_content(pos)?;
                                }
                            }
                            Tag::Ln => {
                                let ln = parse_attrs::<Link>(
                                    &e,
                                    &self.scopes.ns,
                                    &mut self.validator,
                                    pos,
                                )
                                .map_err(|m| syntax_err(&self.opts.source, pos, m))?;
                                self.header.links.push(ln);
                                self.header_spans.links.push(pos);
                                if !empty {
                                    self.empty_content(pos)?;
                                }
                            }
                            Tag::Url | Tag::Sitemap => {
                                no_attributes(&e, &mut self.validator, pos);
                                // Its scope ends when read_entry has read it.
                                self.pending = Some((pos, empty, tag));
                                break;
                            }
                            other => self.unexpected(other, pos, &name, empty)?,
                        }
                        self.scopes.end();
                    }
                    Event::End(_) => {
                        self.scopes.end();
                        self.root_closed = true;
                        break;
                    }
                    Event::Eof => return Err(self.eof_error()),
                    ev => stray(
                        self.xml.get_mut(),
                        &mut self.validator,
                        &self.opts.source,
                        ev,
                        start,
                    )?,
                }
            }
        }
        if self.header_spans.md == Pos::default() {
            self.header_spans.md = self.header_spans.root;
        }
        Ok(())
    }

    /// `<rs:md>` and `<rs:ln>` have no content; anything inside is reported and skipped.
    fn empty_content(&mut self, pos: Pos) -> Result<(), Error> {
        let mut reported = false;
        loop {
            let (ev, _) = next_event!(self);
            let content = match ev {
                Event::End(_) => return Ok(()),
                Event::Eof => return Err(self.eof_error()),
                Event::Text(t) => !t.as_ref().iter().all(u8::is_ascii_whitespace),
                Event::Comment(_) | Event::PI(_) => false,
                Event::Start(e) => {
                    let name = e.name().as_ref().to_vec();
                    self.skip(&name)?;
                    true
                }
                _ => true,
            };
            if content && !reported {
                reported = true;
                self.validator.report(
                    Rule::Misplaced,
                    "7",
                    pos,
                    "<rs:md> and <rs:ln> must be empty; content ignored",
                );
            }
        }
    }

    fn read_epilog(&mut self) -> Result<(Pos, u64), Error> {
        loop {
            let (ev, start) = next_event!(self);
            match ev {
                Event::Eof => break,
                Event::Start(_) | Event::Empty(_) => {
                    return Err(self.error_at(start, "element after the end of the root element"));
                }
                Event::Text(t) if !t.as_ref().iter().all(u8::is_ascii_whitespace) => {
                    return Err(self.error_at(start, "text after the end of the root element"));
                }
                ev => stray(
                    self.xml.get_mut(),
                    &mut self.validator,
                    &self.opts.source,
                    ev,
                    start,
                )?,
            }
        }
        let end = self.offset();
        let pos = self.xml.get_mut().pos(end);
        let bytes = self.bytes_read();
        self.finished = true;
        Ok((pos, bytes))
    }

    /// Reads one `<url>`/`<sitemap>` (its start tag already read, and its scope opened) into
    /// `batch`.
    fn read_entry(
        &mut self,
        pos: Pos,
        empty: bool,
        tag: Tag,
        batch: &mut RawBatch,
    ) -> Result<(), Error> {
        if self.entries >= self.opts.max_entries {
            return Err(Error::TooManyEntries {
                source_name: self.opts.source.clone(),
                limit: self.opts.max_entries,
            });
        }
        self.begin_entry(matches!(tag, Tag::Url), pos);
        let first_elem = batch.elems.len();
        let mut raw = RawEntry {
            pos,
            loc: None,
            lastmod: None,
            changefreq: None,
            priority: None,
            elems: (first_elem, first_elem),
        };
        let mut seen_md = false;
        if !empty {
            loop {
                let (ev, start) = next_event!(self);
                let empty = matches!(ev, Event::Empty(_));
                match ev {
                    Event::Start(e) | Event::Empty(e) => {
                        self.scopes.start(&e).map_err(|m| {
                            syntax_err(&self.opts.source, self.xml.get_mut().pos(start), m)
                        })?;
                        let tag = self.scopes.tag(e.name());
                        let epos = self.xml.get_mut().pos(start);
                        match tag {
                            Tag::Md if seen_md => {
                                self.validator.report(
                                    Rule::Repeated,
                                    "7",
                                    epos,
                                    "<rs:md> is not repeatable in an entry; the first is used",
                                );
                                if !empty {
                                    self.empty_content(epos)?;
                                }
                            }
                            Tag::Md | Tag::Ln => {
                                let is_md = matches!(tag, Tag::Md);
                                seen_md |= is_md;
                                record_elem(
                                    &self.scopes,
                                    &mut self.sent_gen,
                                    &self.opts.source,
                                    &e,
                                    is_md,
                                    epos,
                                    batch,
                                )?;
                                if !empty {
                                    self.empty_content(epos)?;
                                }
                            }
                            Tag::Loc | Tag::Lastmod | Tag::Changefreq | Tag::Priority => {
                                no_attributes(&e, &mut self.validator, epos);
                                let (element, slot) = match tag {
                                    Tag::Loc => ("loc", &mut raw.loc),
                                    Tag::Lastmod => ("lastmod", &mut raw.lastmod),
                                    Tag::Changefreq => ("changefreq", &mut raw.changefreq),
                                    _ => ("priority", &mut raw.priority),
                                };
                                let start = batch.arena.len();
                                if !empty {
                                    self.read_text(element, epos, &mut batch.arena)?;
                                }
                                if slot.is_some() {
                                    batch.arena.truncate(start);
                                    self.validator.report(
                                        Rule::Repeated,
                                        "7",
                                        epos,
                                        format!("<{element}> is not repeatable; the first is used"),
                                    );
                                } else {
                                    *slot = Some(RawText {
                                        pos: epos,
                                        start,
                                        end: batch.arena.len(),
                                    });
                                }
                            }
                            other => {
                                let name = e.name().as_ref().to_vec();
                                self.unexpected(other, epos, &name, empty)?;
                            }
                        }
                        self.scopes.end();
                    }
                    Event::End(_) => break,
                    Event::Eof => return Err(self.eof_error()),
                    ev => stray(
                        self.xml.get_mut(),
                        &mut self.validator,
                        &self.opts.source,
                        ev,
                        start,
                    )?,
                }
            }
        }
        // The scope of the <url>/<sitemap> element itself (opened by the caller).
        self.scopes.end();
        raw.elems.1 = batch.elems.len();
        batch.entries.push(raw);
        batch.problems.append(&mut self.validator.take_problems());
        batch.bytes = self.bytes_read();
        Ok(())
    }

    /// Counts a new entry and checks that its element fits the root.
    fn begin_entry(&mut self, is_url: bool, pos: Pos) {
        self.validator.begin_entry(self.entries);
        self.entries += 1;
        let expected = self.header.root.child();
        let got = if is_url { "url" } else { "sitemap" };
        if got != expected {
            self.validator.report(
                Rule::Misplaced,
                "7",
                pos,
                format!(
                    "<{got}> in a <{}>; entries of this root are <{expected}>",
                    self.header.root.element()
                ),
            );
        }
    }

    /// Text content of a simple element up to its end tag; entity references other than the
    /// predefined five are refused.
    /// The text is appended to `out` (the batch's arena), untrimmed.
    fn read_text(&mut self, element: &str, pos: Pos, out: &mut String) -> Result<(), Error> {
        // Text values are read exactly as written (trimmed as a whole by the builder).
        self.xml.config_mut().trim_text_start = false;
        loop {
            let (ev, start) = next_event!(self);
            let empty = matches!(ev, Event::Empty(_));
            match ev {
                Event::Text(t) => {
                    let s = t
                        .decode()
                        .map_err(|e| syntax_err(&self.opts.source, pos, e.to_string()))?;
                    out.push_str(&s);
                }
                Event::CData(c) => {
                    let s = c
                        .decode()
                        .map_err(|e| syntax_err(&self.opts.source, pos, e.to_string()))?;
                    out.push_str(&s);
                }
                Event::GeneralRef(r) => {
                    if r.is_char_ref() {
                        match r.resolve_char_ref() {
                            Ok(Some(c)) => out.push(c),
                            _ => {
                                let p = self.xml.get_mut().pos(start);
                                return Err(syntax_err(
                                    &self.opts.source,
                                    p,
                                    "invalid character reference".into(),
                                ));
                            }
                        }
                    } else {
                        let name = String::from_utf8_lossy(r.as_ref()).into_owned();
                        match quick_xml::escape::resolve_predefined_entity(&name) {
                            Some(s) => out.push_str(s),
                            None => {
                                let p = self.xml.get_mut().pos(start);
                                return Err(syntax_err(
                                    &self.opts.source,
                                    p,
                                    format!(
                                        "undefined entity `&{name};` (entities are never expanded)"
                                    ),
                                ));
                            }
                        }
                    }
                }
                Event::End(_) => break,
                Event::Start(e) | Event::Empty(e) => {
                    self.scopes.start(&e).map_err(|m| {
                        syntax_err(&self.opts.source, self.xml.get_mut().pos(start), m)
                    })?;
                    let child = e.name().as_ref().to_vec();
                    let p = self.xml.get_mut().pos(start);
                    self.validator.report(
                        Rule::Misplaced,
                        "7",
                        p,
                        format!("<{element}> holds text only; child element ignored"),
                    );
                    if !empty {
                        self.skip(&child)?;
                    }
                    self.scopes.end();
                }
                Event::Eof => return Err(self.eof_error()),
                _ => {}
            }
        }
        self.xml.config_mut().trim_text_start = true;
        Ok(())
    }
}

type AttrResult<T> = Result<T, String>;

fn for_each_attr(
    e: &BytesStart<'_>,
    resolver: &NamespaceResolver,
    mut f: impl FnMut(Ns, &str, &str, Cow<'_, str>) -> AttrResult<()>,
) -> AttrResult<()> {
    for a in e.attributes() {
        let a = a.map_err(|e| e.to_string())?;
        if a.key.as_namespace_binding().is_some() {
            continue;
        }
        // An unprefixed attribute is in no namespace (the default namespace does not apply to
        // attributes), so only prefixed ones need resolving.
        let (ns, local, prefix) = match a.key.prefix() {
            None => (Ns::None, a.key.into_inner(), ""),
            Some(p) => {
                let (res, local) = resolver.resolve_attribute(a.key);
                let prefix = std::str::from_utf8(p.into_inner()).map_err(|e| e.to_string())?;
                (classify(&res), local.into_inner(), prefix)
            }
        };
        let local = std::str::from_utf8(local).map_err(|e| e.to_string())?;
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|e| format!("attribute `{local}`: {e}"))?;
        f(ns, prefix, local, value)?;
    }
    Ok(())
}

fn ext(ns: Ns, prefix: &str, local: &str, value: &str) -> ExtAttr {
    let namespace = match ns {
        Ns::Other(u) | Ns::WrongRs(u) => u,
        Ns::Sitemap => SITEMAP_NS.into(),
        Ns::Rs => RS_NS.into(),
        Ns::None | Ns::UnknownPrefix(_) => String::new(),
    };
    ExtAttr {
        namespace,
        prefix: prefix.to_owned(),
        local: local.to_owned(),
        value: value.to_owned(),
    }
}

/// `<rs:md>` or `<rs:ln>`, as far as reading their attributes goes.
pub(crate) trait AttrTarget: Default {
    const ELEMENT: &'static str;
    fn apply(&mut self, name: &str, value: &str, v: &mut Validator, pos: Pos) -> bool;
    fn ext(&mut self) -> &mut Vec<ExtAttr>;
}

impl AttrTarget for Md {
    const ELEMENT: &'static str = "<rs:md>";
    fn apply(&mut self, name: &str, value: &str, v: &mut Validator, pos: Pos) -> bool {
        apply_md_attr(self, name, value, v, pos)
    }
    fn ext(&mut self) -> &mut Vec<ExtAttr> {
        &mut self.ext
    }
}

impl AttrTarget for Link {
    const ELEMENT: &'static str = "<rs:ln>";
    fn apply(&mut self, name: &str, value: &str, v: &mut Validator, pos: Pos) -> bool {
        apply_ln_attr(self, name, value, v, pos)
    }
    fn ext(&mut self) -> &mut Vec<ExtAttr> {
        &mut self.ext
    }
}

/// Reads the attributes of `<rs:md>`/`<rs:ln>`. ResourceSync attributes are unprefixed
/// (spec 7); attributes of other namespaces are kept as extensions.
pub(crate) fn parse_attrs<T: AttrTarget>(
    e: &BytesStart<'_>,
    resolver: &NamespaceResolver,
    v: &mut Validator,
    pos: Pos,
) -> AttrResult<T> {
    let mut target = T::default();
    parse_attrs_into(&mut target, e, resolver, v, pos)?;
    Ok(target)
}

/// [`parse_attrs`] into an existing target (the builder fills the entry in place rather than
/// moving a large `Md` into it).
pub(crate) fn parse_attrs_into<T: AttrTarget>(
    target: &mut T,
    e: &BytesStart<'_>,
    resolver: &NamespaceResolver,
    v: &mut Validator,
    pos: Pos,
) -> AttrResult<()> {
    for_each_attr(e, resolver, |ns, prefix, local, value| {
        match ns {
            Ns::None => apply_unprefixed(target, local, &value, v, pos),
            Ns::Rs => {
                v.report(
                    Rule::AttributePrefixed,
                    "7",
                    pos,
                    format!("attribute `{prefix}:{local}` must not have a namespace prefix"),
                );
                if !target.apply(local, &value, v, pos) {
                    target.ext().push(ext(Ns::Rs, prefix, local, &value));
                }
            }
            Ns::UnknownPrefix(p) => {
                v.report(
                    Rule::Namespace,
                    "4",
                    pos,
                    format!("attribute `{p}:{local}` uses prefix `{p}`, which is not declared"),
                );
            }
            other => target.ext().push(ext(other, prefix, local, &value)),
        }
        Ok(())
    })
}

/// An unprefixed attribute (in no namespace): a ResourceSync attribute, or else reported
/// and kept as an extension.
pub(crate) fn apply_unprefixed<T: AttrTarget>(
    target: &mut T,
    local: &str,
    value: &str,
    v: &mut Validator,
    pos: Pos,
) {
    if !target.apply(local, value, v, pos) {
        v.report(
            Rule::AttributeUnknown,
            "7",
            pos,
            format!(
                "`{local}` is not an attribute of {}; other attributes must be in their own namespace",
                T::ELEMENT
            ),
        );
        target.ext().push(ext(Ns::None, "", local, value));
    }
}

/// Sitemap elements (`<url>`, `<loc>`, …) have no attributes; any found are reported (namespace
/// declarations aside) rather than silently dropped.
fn no_attributes(e: &BytesStart<'_>, v: &mut Validator, pos: Pos) {
    if e.attributes_raw().iter().all(u8::is_ascii_whitespace) {
        return;
    }
    for a in e.attributes().with_checks(false).flatten() {
        if a.key.as_namespace_binding().is_none() {
            v.report(
                Rule::AttributeUnknown,
                "7",
                pos,
                format!(
                    "<{}> has no attributes in the Sitemap format; `{}` ignored",
                    String::from_utf8_lossy(e.name().as_ref()),
                    String::from_utf8_lossy(a.key.as_ref())
                ),
            );
        }
    }
}

/// Records the raw start tag `e` of an `<rs:md>`/`<rs:ln>` in `batch`, with the namespace
/// bindings in force when they changed since the last one sent.
fn record_elem(
    scopes: &Scopes,
    sent_gen: &mut Option<u32>,
    source: &str,
    e: &BytesStart<'_>,
    is_md: bool,
    pos: Pos,
    batch: &mut RawBatch,
) -> Result<(), Error> {
    let content = std::str::from_utf8(e).map_err(|err| syntax_err(source, pos, err.to_string()))?;
    if *sent_gen != Some(scopes.generation) {
        batch.resolvers.push((scopes.generation, scopes.ns.clone()));
        *sent_gen = Some(scopes.generation);
    }
    let start = batch.arena.len();
    batch.arena.push_str(content);
    batch.elems.push(RawElem {
        is_md,
        pos,
        start,
        end: batch.arena.len(),
        name_len: e.name().as_ref().len(),
        scope_gen: scopes.generation,
        attrs: None,
    });
    Ok(())
}

/// Where the event just read started. Whitespace-only text between elements is skipped by the
/// XML reader (`trim_text_start`), so the position before the read may be earlier; the start
/// is computed back from the end of the event instead.
fn event_start(before: u64, after: u64, ev: &Event<'_>) -> u64 {
    let back =
        |len: usize, delimiters: u64| after.saturating_sub(len as u64 + delimiters).max(before);
    match ev {
        Event::Start(e) => back(e.len(), 2),
        Event::Empty(e) => back(e.len(), 3),
        Event::Text(t) => back(t.len(), 0),
        _ => before,
    }
}

pub(crate) fn syntax_err(source: &str, pos: Pos, message: String) -> Error {
    Error::Syntax {
        source_name: source.to_owned(),
        line: pos.line,
        column: pos.column,
        message,
    }
}

/// Text, comments and the like between elements.
fn stray<R>(
    counting: &mut Counting<R>,
    v: &mut Validator,
    source: &str,
    ev: Event<'_>,
    start: u64,
) -> Result<(), Error> {
    match ev {
        Event::Text(t) if !t.as_ref().iter().all(u8::is_ascii_whitespace) => {
            v.report(
                Rule::Misplaced,
                "7",
                counting.pos(start),
                "text is not allowed here; ignored",
            );
        }
        Event::CData(_) | Event::GeneralRef(_) => {
            v.report(
                Rule::Misplaced,
                "7",
                counting.pos(start),
                "character data is not allowed here; ignored",
            );
        }
        // Markup the reader otherwise ignores is still part of the document, which must be
        // UTF-8 throughout.
        Event::Comment(ref c) if std::str::from_utf8(c).is_err() => {
            return Err(syntax_err(
                source,
                counting.pos(start),
                "comment is not valid UTF-8".into(),
            ));
        }
        Event::PI(ref p) if std::str::from_utf8(p).is_err() => {
            return Err(syntax_err(
                source,
                counting.pos(start),
                "processing instruction is not valid UTF-8".into(),
            ));
        }
        Event::DocType(_) => {
            let pos = counting.pos(start);
            v.report(
                Rule::Doctype,
                "7",
                pos,
                "DOCTYPE declarations are refused (no entity expansion)",
            );
            return Err(Error::Doctype {
                source_name: source.to_owned(),
                line: pos.line,
                column: pos.column,
            });
        }
        _ => {}
    }
    Ok(())
}
