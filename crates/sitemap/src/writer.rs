//! Streaming writers. Output is UTF-8, declares the Sitemap namespace as default and the
//! ResourceSync namespace as `rs`, writes ResourceSync attributes without prefix (spec 7) and
//! escapes every value with quick-xml's escaper, so any model read by the reader writes back
//! to a document that reads to an equal model — but for datetimes, which are always written
//! in UTC with `Z` ([`W3cDateTime::write_utc_to`]; same instant and precision): whatever an
//! upstream wrote (no designator, an offset), what rsagg writes is a strict W3C Datetime
//! (spec 7), so its own documents pass strict validation.

use std::future::Future;
use std::io;
use std::path::PathBuf;

use quick_xml::escape::escape;
use rsagg_model::validate::{MAX_BYTES, MAX_ENTRIES};
use rsagg_model::{
    DocumentKind, ExtAttr, Hashes, Header, Link, Md, RS_NS, Root, SITEMAP_NS, UrlEntry, W3cDateTime,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::Error;

const FLUSH_AT: usize = 1024 * 1024;

/// Bytes that need escaping in attribute values and text.
const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'&' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'"' as usize] = true;
    t[b'\'' as usize] = true;
    t
};

/// Appends `value` escaped; the common value needs no escaping and is copied as is.
fn escaped(out: &mut Vec<u8>, value: &str) {
    // No early exit: a branch-free scan of these short values is faster.
    if value
        .bytes()
        .fold(false, |hit, b| hit | SPECIAL[usize::from(b)])
    {
        out.extend_from_slice(escape(value).as_bytes());
    } else {
        out.extend_from_slice(value.as_bytes());
    }
}

fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escaped(out, value);
    out.push(b'"');
}

fn attr_dt(out: &mut Vec<u8>, name: &str, value: &Option<W3cDateTime>) {
    if let Some(v) = value {
        out.push(b' ');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=\"");
        v.write_utc_to(out);
        out.push(b'"');
    }
}

fn attr_opt(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
    if let Some(v) = value {
        attr(out, name, v);
    }
}

fn attr_num(out: &mut Vec<u8>, name: &str, value: Option<u64>) {
    if let Some(v) = value {
        out.push(b' ');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=\"");
        out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        out.push(b'"');
    }
}

fn attr_hash(out: &mut Vec<u8>, name: &str, value: Option<&Hashes>) {
    if let Some(h) = value {
        out.push(b' ');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=\"");
        for (i, v) in h.0.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            escaped(out, v.algorithm.as_str());
            out.push(b':');
            escaped(out, &v.digest);
        }
        out.push(b'"');
    }
}

/// True when `s` is an XML name without a colon (an NCName, XML 1.0 fifth edition section
/// 2.3 and Namespaces in XML section 3).
fn is_ncname(s: &str) -> bool {
    let start = |c: char| {
        matches!(c, 'A'..='Z' | '_' | 'a'..='z' | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}'
            | '\u{F8}'..='\u{2FF}' | '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}'
            | '\u{200C}'..='\u{200D}' | '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}'
            | '\u{3001}'..='\u{D7FF}' | '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}'
            | '\u{10000}'..='\u{EFFFF}')
    };
    let mut chars = s.chars();
    chars.next().is_some_and(start)
        && chars.all(|c| {
            start(c)
                || matches!(c, '-' | '.' | '0'..='9' | '\u{B7}' | '\u{300}'..='\u{36F}'
                    | '\u{203F}'..='\u{2040}')
        })
}

/// Whether the writers write extension attribute `a`: its local name, and its prefix when it
/// has one, must be XML names. A lenient read can yield others (quick-xml accepts an
/// attribute name such as `a"b`), and written they would make rsagg's own document not
/// well-formed; found with the `sitemap_reader` fuzz target (`fuzz/`).
pub fn writable_ext(a: &ExtAttr) -> bool {
    is_ncname(&a.local) && (a.prefix.is_empty() || is_ncname(&a.prefix))
}

/// Extension attributes: each foreign namespace is declared on the element itself, under its
/// own prefix unless that prefix would clash with `rs`. Those that cannot be written
/// ([`writable_ext`]) are left out.
fn ext_attrs(out: &mut Vec<u8>, ext: &[ExtAttr]) {
    for (i, a) in ext.iter().enumerate() {
        if !writable_ext(a) {
            continue;
        }
        if a.namespace.is_empty() {
            attr(out, &a.local, &a.value);
            continue;
        }
        let prefix = if a.prefix.is_empty() || a.prefix == "rs" || a.prefix == "xmlns" {
            format!("ext{i}")
        } else {
            a.prefix.clone()
        };
        if a.prefix != "xml" {
            attr(out, &format!("xmlns:{prefix}"), &a.namespace);
        }
        attr(out, &format!("{prefix}:{}", a.local), &a.value);
    }
}

fn md_element(out: &mut Vec<u8>, indent: &str, md: &Md) {
    out.extend_from_slice(indent.as_bytes());
    out.extend_from_slice(b"<rs:md");
    if let Some(c) = &md.capability {
        attr(out, "capability", c.as_str());
    }
    attr_dt(out, "at", &md.at);
    attr_dt(out, "completed", &md.completed);
    attr_dt(out, "from", &md.from);
    attr_dt(out, "until", &md.until);
    if let Some(c) = &md.change {
        attr(out, "change", c.as_str());
    }
    attr_dt(out, "datetime", &md.datetime);
    attr_hash(out, "hash", md.hash.as_ref());
    attr_num(out, "length", md.length);
    attr_opt(out, "type", md.mime_type.as_deref());
    attr_opt(out, "encoding", md.encoding.as_deref());
    attr_opt(out, "path", md.path.as_deref());
    ext_attrs(out, &md.ext);
    out.extend_from_slice(b"/>\n");
}

fn ln_element(out: &mut Vec<u8>, indent: &str, l: &Link) {
    out.extend_from_slice(indent.as_bytes());
    out.extend_from_slice(b"<rs:ln");
    attr(out, "rel", &l.rel);
    attr(out, "href", &l.href);
    attr_num(out, "pri", l.pri.map(u64::from));
    attr_dt(out, "modified", &l.modified);
    attr_hash(out, "hash", l.hash.as_ref());
    attr_num(out, "length", l.length);
    attr_opt(out, "type", l.mime_type.as_deref());
    attr_opt(out, "encoding", l.encoding.as_deref());
    attr_opt(out, "path", l.path.as_deref());
    ext_attrs(out, &l.ext);
    out.extend_from_slice(b"/>\n");
}

fn text_element(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(b"    <");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    escaped(out, value);
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b">\n");
}

/// The XML of the document `header` + `entries` (`<urlset>` or `<sitemapindex>`, as the
/// header's root says).
pub fn document(header: &Header, entries: impl IntoIterator<Item = UrlEntry>) -> Vec<u8> {
    let mut xml = Vec::new();
    encode_header(header, &mut xml);
    for e in entries {
        encode_entry(header.root, &e, &mut xml);
    }
    xml.extend_from_slice(end_tag(header.root));
    xml
}

/// The end tag of a document with root `root`, for documents encoded piece by piece.
pub fn end_tag(root: Root) -> &'static [u8] {
    match root {
        Root::Urlset => b"</urlset>\n",
        Root::Sitemapindex => b"</sitemapindex>\n",
    }
}

/// Where the entries of a document written by [`encode_header`], [`encode_entry`] and
/// [`end_tag`] lie in `doc`: from the first entry's start tag to the root's end tag (an empty
/// range just before the end tag when there is no entry). `None` when `doc` does not end as
/// this writer ends a document. Lets rsagg extend or patch a document it wrote itself without
/// parsing it again; markup cannot occur inside text, where `<` is always escaped.
pub fn entries_span(doc: &[u8], root: Root) -> Option<std::ops::Range<usize>> {
    let end = memchr::memmem::rfind(doc, end_tag(root))?;
    let start = memchr::memmem::find(&doc[..end], &entry_start(root)).unwrap_or(end);
    Some(start..end)
}

/// How [`encode_entry`] starts an entry: `  <url>\n` or `  <sitemap>\n`.
fn entry_start(root: Root) -> Vec<u8> {
    format!("  <{}>\n", root.child()).into_bytes()
}

/// Appends the XML of one entry (`<url>` or `<sitemap>` per `root`) to `out`.
pub fn encode_entry(root: Root, e: &UrlEntry, out: &mut Vec<u8>) {
    let child = root.child();
    out.extend_from_slice(b"  <");
    out.extend_from_slice(child.as_bytes());
    out.extend_from_slice(b">\n");
    text_element(out, "loc", &e.loc);
    if let Some(lm) = &e.lastmod {
        out.extend_from_slice(b"    <lastmod>");
        lm.write_utc_to(out);
        out.extend_from_slice(b"</lastmod>\n");
    }
    if let Some(cf) = &e.changefreq {
        text_element(out, "changefreq", cf.as_str());
    }
    if let Some(p) = &e.priority {
        text_element(out, "priority", p);
    }
    if let Some(md) = &e.md {
        md_element(out, "    ", md);
    }
    for l in &e.links {
        ln_element(out, "    ", l);
    }
    out.extend_from_slice(b"  </");
    out.extend_from_slice(child.as_bytes());
    out.extend_from_slice(b">\n");
}

/// Appends the XML declaration, root start tag, and root `<rs:md>`/`<rs:ln>` to `out`.
pub fn encode_header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<");
    out.extend_from_slice(h.root.element().as_bytes());
    attr(out, "xmlns", SITEMAP_NS);
    attr(out, "xmlns:rs", RS_NS);
    out.extend_from_slice(b">\n");
    if let Some(md) = &h.md {
        md_element(out, "  ", md);
    }
    for l in &h.links {
        ln_element(out, "  ", l);
    }
}

fn closing(root: Root) -> &'static str {
    match root {
        Root::Urlset => "</urlset>\n",
        Root::Sitemapindex => "</sitemapindex>\n",
    }
}

/// Writes one document to an `AsyncWrite`, entry by entry, through a 1 MiB buffer.
pub struct DocumentWriter<W> {
    out: W,
    buf: Vec<u8>,
    root: Root,
    bytes: u64,
    entries: u64,
}

impl<W: AsyncWrite + Unpin> DocumentWriter<W> {
    /// Writes the header and returns the writer for the entries.
    pub async fn start(out: W, header: &Header) -> io::Result<Self> {
        let mut buf = Vec::with_capacity(FLUSH_AT * 2);
        encode_header(header, &mut buf);
        Ok(DocumentWriter {
            out,
            bytes: buf.len() as u64,
            buf,
            root: header.root,
            entries: 0,
        })
    }

    /// Writes one entry.
    pub async fn write_entry(&mut self, e: &UrlEntry) -> io::Result<()> {
        let before = self.buf.len();
        encode_entry(self.root, e, &mut self.buf);
        self.bytes += (self.buf.len() - before) as u64;
        self.entries += 1;
        self.maybe_flush().await
    }

    async fn maybe_flush(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Bytes of the document so far, including what is still buffered.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entries written so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the closing tag and flushes; returns the output and the document size. Call
    /// `shutdown` on the output when it needs one (object uploads, files to be synced).
    pub async fn finish(mut self) -> io::Result<(W, u64)> {
        let c = closing(self.root);
        self.buf.extend_from_slice(c.as_bytes());
        self.bytes += c.len() as u64;
        self.out.write_all(&self.buf).await?;
        self.out.flush().await?;
        Ok((self.out, self.bytes))
    }
}

/// Where a [`SplitWriter`] puts its documents.
pub trait PartSink {
    /// The writer of one document; shut down when the document is complete.
    type Part: AsyncWrite + Unpin + Send;
    /// Starts the document called `name` (relative to the split's base URL).
    fn create(&mut self, name: &str) -> impl Future<Output = io::Result<Self::Part>> + Send;
}

/// A [`PartSink`] writing files into a directory.
#[derive(Debug, Clone)]
pub struct FsPartSink {
    dir: PathBuf,
}

impl FsPartSink {
    /// Files go into `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FsPartSink { dir: dir.into() }
    }
}

impl PartSink for FsPartSink {
    /// No extra buffering: the writers already hand over 1 MiB at a time.
    type Part = tokio::fs::File;
    fn create(&mut self, name: &str) -> impl Future<Output = io::Result<Self::Part>> + Send {
        let path = self.dir.join(name);
        async move { tokio::fs::File::create(path).await }
    }
}

/// How to split.
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// URL prefix of the index and parts (ends with `/`).
    pub base_url: String,
    /// Name of the index document, e.g. `resourcelist.xml`.
    pub index_name: String,
    /// Parts are named `{part_stem}-{n:05}.xml`, n from 1.
    pub part_stem: String,
    /// Entries per part, at most 50,000 (spec 7).
    pub max_entries: u64,
    /// Bytes per part, at most 50 MB (spec 7).
    pub max_bytes: u64,
}

impl SplitOptions {
    /// Limits of the Sitemap protocol; names from `base_url`, `index_name` and `part_stem`.
    pub fn new(
        base_url: impl Into<String>,
        index_name: impl Into<String>,
        part_stem: impl Into<String>,
    ) -> Self {
        SplitOptions {
            base_url: base_url.into(),
            index_name: index_name.into(),
            part_stem: part_stem.into(),
            max_entries: MAX_ENTRIES,
            max_bytes: MAX_BYTES,
        }
    }
}

/// One part written by a [`SplitWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartInfo {
    /// Name given to the sink.
    pub name: String,
    /// Public URL.
    pub url: String,
    /// Entries in the part.
    pub entries: u64,
    /// Bytes of the part.
    pub bytes: u64,
    /// `from` of a change document part.
    pub from: Option<W3cDateTime>,
    /// `until` of a change document part (closed parts only).
    pub until: Option<W3cDateTime>,
}

/// What a [`SplitWriter`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitOutcome {
    /// The parts, in order.
    pub parts: Vec<PartInfo>,
    /// Name of the index document.
    pub index_name: String,
    /// Bytes of the index document.
    pub index_bytes: u64,
    /// Entries over all parts.
    pub entries: u64,
}

enum Body<P> {
    /// Snapshot documents: the part header is known up front, so entries stream to the sink.
    Direct(DocumentWriter<P>),
    /// Change documents: a part's `until` is only known when the next part starts, so its
    /// entries are held (at most `max_bytes`) and written with the header when it closes.
    Held(Vec<u8>),
}

impl<P> Body<P> {
    /// Where the next entry is encoded.
    fn buffer(&mut self) -> &mut Vec<u8> {
        match self {
            Body::Direct(w) => &mut w.buf,
            Body::Held(b) => b,
        }
    }
}

struct OpenPart<P> {
    name: String,
    body: Body<P>,
    header_len: u64,
    bytes: u64,
    entries: u64,
    from: Option<W3cDateTime>,
    last_instant: Option<W3cDateTime>,
}

/// Turns a stream of entries into `<urlset>` parts of at most 50,000 entries and 50 MB, each
/// with an `<rs:ln rel="index">` to the index, plus a `<sitemapindex>` listing the parts with
/// their `at`/`completed` (snapshot documents) or `from`/`until` (change documents)
/// (spec 6.1, 7, 10.2, 12.2).
///
/// For change documents, a part's `from` is the previous part's `until`, and a closed part's
/// `until` is the change instant of the next part's first entry, so consecutive parts cover
/// consecutive intervals (callers give strictly increasing datetimes, so no instant is split).
pub struct SplitWriter<S: PartSink> {
    sink: S,
    opts: SplitOptions,
    header: Header,
    kind: DocumentKind,
    current: Option<OpenPart<S::Part>>,
    parts: Vec<PartInfo>,
    scratch: Vec<u8>,
    entries: u64,
}

impl<S: PartSink> SplitWriter<S> {
    /// `header` is the header of the whole list (capability, `at`/`completed` or
    /// `from`/`until`, `up` link); parts add an `index` link, the index drops it.
    pub fn new(sink: S, opts: SplitOptions, header: Header) -> Result<Self, Error> {
        if opts.max_entries == 0 || opts.max_entries > MAX_ENTRIES || opts.max_bytes > MAX_BYTES {
            return Err(Error::Write(format!(
                "parts must hold 1..={MAX_ENTRIES} entries and at most {MAX_BYTES} bytes (spec 7)"
            )));
        }
        let kind = DocumentKind::of(Root::Urlset, header.capability());
        Ok(SplitWriter {
            sink,
            opts,
            kind,
            header: Header {
                root: Root::Urlset,
                ..header
            },
            current: None,
            parts: Vec::new(),
            scratch: Vec::with_capacity(1024),
            entries: 0,
        })
    }

    fn part_header(&self, from: Option<W3cDateTime>, until: Option<W3cDateTime>) -> Header {
        let mut h = self.header.clone();
        h.links.retain(|l| !l.has_rel("index"));
        h.links.push(Link::new(
            "index",
            format!("{}{}", self.opts.base_url, self.opts.index_name),
        ));
        if self.kind.is_change_document()
            && let Some(md) = h.md.as_mut()
        {
            md.from = from.or(md.from);
            md.until = until;
        }
        h
    }

    async fn open_part(&mut self, from: Option<W3cDateTime>) -> Result<(), Error> {
        let n = self.parts.len() + 1;
        if n as u64 > MAX_ENTRIES {
            return Err(Error::Write(format!(
                "more than {MAX_ENTRIES} parts would be needed; an index cannot list them (spec 7)"
            )));
        }
        let name = format!("{}-{n:05}.xml", self.opts.part_stem);
        let (body, header_len) = if self.kind.is_change_document() {
            // Measure the header with a worst-case `until` so the size cap holds after closing.
            let mut probe = Vec::new();
            encode_header(
                &self.part_header(from, Some(W3cDateTime::now())),
                &mut probe,
            );
            (Body::Held(Vec::new()), probe.len() as u64 + 16)
        } else {
            let out = self
                .sink
                .create(&name)
                .await
                .map_err(|e| io_err(&name, e))?;
            let w = DocumentWriter::start(out, &self.part_header(None, None))
                .await
                .map_err(|e| io_err(&name, e))?;
            let len = w.bytes();
            (Body::Direct(w), len)
        };
        self.current = Some(OpenPart {
            name,
            body,
            header_len,
            bytes: header_len,
            entries: 0,
            from,
            last_instant: from,
        });
        Ok(())
    }

    async fn close_part(&mut self, until: Option<W3cDateTime>) -> Result<(), Error> {
        let Some(part) = self.current.take() else {
            return Ok(());
        };
        let name = part.name.clone();
        let bytes = match part.body {
            Body::Direct(w) => {
                let (mut out, bytes) = w.finish().await.map_err(|e| io_err(&name, e))?;
                out.shutdown().await.map_err(|e| io_err(&name, e))?;
                bytes
            }
            Body::Held(body) => {
                let header = self.part_header(part.from, until);
                let out = self
                    .sink
                    .create(&name)
                    .await
                    .map_err(|e| io_err(&name, e))?;
                let mut w = DocumentWriter::start(out, &header)
                    .await
                    .map_err(|e| io_err(&name, e))?;
                w.buf.extend_from_slice(&body);
                w.bytes += body.len() as u64;
                let (mut out, bytes) = w.finish().await.map_err(|e| io_err(&name, e))?;
                out.shutdown().await.map_err(|e| io_err(&name, e))?;
                bytes
            }
        };
        self.parts.push(PartInfo {
            url: format!("{}{}", self.opts.base_url, name),
            name,
            entries: part.entries,
            bytes,
            from: part.from,
            until,
        });
        Ok(())
    }

    /// Adds one entry, starting a new part when the current one is full.
    pub async fn write_entry(&mut self, e: &UrlEntry) -> Result<(), Error> {
        let instant = e.change_instant().copied();
        let closing_len = closing(Root::Urlset).len() as u64;
        if self.current.is_none() {
            let from = self.header.md.as_ref().and_then(|m| m.from);
            self.open_part(from).await?;
        }
        // Encode straight into the open part; in the rare case it does not fit, move the bytes
        // to the next part.
        let (len, fits) = {
            let part = self
                .current
                .as_mut()
                .ok_or_else(|| Error::Write("no open part".into()))?;
            let buf = part.body.buffer();
            let before = buf.len();
            encode_entry(Root::Urlset, e, buf);
            let len = (buf.len() - before) as u64;
            let fits = part.entries < self.opts.max_entries
                && part.bytes + len + closing_len <= self.opts.max_bytes;
            if !fits {
                self.scratch.clear();
                self.scratch.extend_from_slice(&buf[before..]);
                buf.truncate(before);
            }
            (len, fits)
        };
        if !fits {
            let boundary = instant.or(self.current.as_ref().and_then(|p| p.last_instant));
            self.close_part(boundary).await?;
            self.open_part(boundary).await?;
            let part = self
                .current
                .as_mut()
                .ok_or_else(|| Error::Write("no open part".into()))?;
            if part.header_len + len + closing_len > self.opts.max_bytes {
                return Err(Error::Write(format!(
                    "entry {} alone exceeds the part size limit of {} bytes",
                    e.loc, self.opts.max_bytes
                )));
            }
            part.body.buffer().extend_from_slice(&self.scratch);
        }
        let part = self
            .current
            .as_mut()
            .ok_or_else(|| Error::Write("no open part".into()))?;
        part.bytes += len;
        part.entries += 1;
        if instant.is_some() {
            part.last_instant = instant;
        }
        if let Body::Direct(w) = &mut part.body {
            w.bytes += len;
            w.entries += 1;
            w.maybe_flush()
                .await
                .map_err(|err| io_err(&part.name, err))?;
        }
        self.entries += 1;
        Ok(())
    }

    /// Closes the last part and writes the index; returns what was written. The last part of a
    /// change document gets the list's own `until` (none while the list is open).
    pub async fn finish(mut self) -> Result<SplitOutcome, Error> {
        if self.current.is_none() && self.parts.is_empty() {
            let from = self.header.md.as_ref().and_then(|m| m.from);
            self.open_part(from).await?;
        }
        let until = self.header.md.as_ref().and_then(|m| m.until);
        self.close_part(until).await?;
        let mut index = self.header.clone();
        index.root = Root::Sitemapindex;
        index.links.retain(|l| !l.has_rel("index"));
        let name = self.opts.index_name.clone();
        let out = self
            .sink
            .create(&name)
            .await
            .map_err(|e| io_err(&name, e))?;
        let mut w = DocumentWriter::start(out, &index)
            .await
            .map_err(|e| io_err(&name, e))?;
        let snapshot = self.header.md.clone().unwrap_or_default();
        for p in &self.parts {
            let md = if self.kind.is_change_document() {
                Md {
                    from: p.from,
                    until: p.until,
                    ..Md::default()
                }
            } else {
                Md {
                    at: snapshot.at,
                    completed: snapshot.completed,
                    ..Md::default()
                }
            };
            let entry = UrlEntry {
                loc: p.url.clone(),
                md: (md != Md::default()).then_some(md),
                ..UrlEntry::default()
            };
            w.write_entry(&entry).await.map_err(|e| io_err(&name, e))?;
        }
        let (mut out, index_bytes) = w.finish().await.map_err(|e| io_err(&name, e))?;
        out.shutdown().await.map_err(|e| io_err(&name, e))?;
        Ok(SplitOutcome {
            parts: self.parts,
            index_name: name,
            index_bytes,
            entries: self.entries,
        })
    }
}

fn io_err(name: &str, error: io::Error) -> Error {
    Error::Io {
        source_name: name.to_owned(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_of_a_written_document_are_found_without_parsing() {
        let header = Header::new(Root::Urlset, rsagg_model::Capability::ResourceList);
        let entry = UrlEntry {
            loc: "http://example.org/a?b&c".into(),
            ..UrlEntry::default()
        };
        let doc = document(&header, [entry.clone()]);
        let span = entries_span(&doc, Root::Urlset).unwrap();
        let mut one = Vec::new();
        encode_entry(Root::Urlset, &entry, &mut one);
        assert_eq!(&doc[span], &one[..]);
        let empty = document(&header, []);
        let span = entries_span(&empty, Root::Urlset).unwrap();
        assert!(span.is_empty() && empty[span.start..].starts_with(b"</urlset>"));
        assert_eq!(entries_span(b"<urlset>", Root::Urlset), None);
    }

    /// Found by the `sitemap_reader` fuzz target: an extension attribute whose name is not an
    /// XML name (a lenient read accepts `U"?`) is left out, so the document stays well-formed.
    #[test]
    fn extension_attributes_that_are_not_xml_names_are_left_out() {
        let ext = |prefix: &str, local: &str| ExtAttr {
            namespace: if prefix.is_empty() {
                String::new()
            } else {
                "http://x.test/".into()
            },
            prefix: prefix.into(),
            local: local.into(),
            value: "v".into(),
        };
        let md = Md {
            change: Some(rsagg_model::Change::Created),
            ext: vec![
                ext("", "U\"?"),
                ext("", "ok"),
                ext("x", "a b"),
                ext("1x", "c"),
                ext("x", "é-1.b"),
            ],
            ..Md::default()
        };
        let mut out = Vec::new();
        md_element(&mut out, "", &md);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "<rs:md change=\"created\" ok=\"v\" xmlns:x=\"http://x.test/\" x:é-1.b=\"v\"/>\n"
        );
        assert!(!is_ncname("") && !is_ncname("a:b") && !is_ncname("-a") && is_ncname("_a·1"));
    }
}
