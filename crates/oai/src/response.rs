//! OAI-PMH responses (section 3.2), one page at a time.
//!
//! A page is read whole from memory: the harvester caps its size (a `ListRecords` page is a
//! provider's batch, typically 100 records), and what grows with the repository is the
//! number of pages, which it follows one by one. Records keep their metadata as the bytes
//! the provider sent (the content of `<metadata>`), which become the resource's body.
//!
//! One bad record never loses the page: a record whose header lacks its identifier or
//! datestamp, or whose metadata holds characters XML 1.0 does not allow (section 2.2 of XML
//! 1.0; real providers emit control characters from their databases), is left out and
//! reported as a [`RecordProblem`], and the rest is harvested.

use quick_xml::NsReader;
use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};

use crate::datestamp::{Datestamp, Granularity};
use crate::{Error, OAI_NS};

/// How a repository keeps deletions (`Identify`'s `deletedRecord`, section 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletedRecord {
    /// Deletions are not kept: only a full re-list finds them.
    No,
    /// Deletions are kept forever (a header with `status="deleted"`).
    Persistent,
    /// Deletions may be kept for a while: incremental harvests see some, a periodic full
    /// re-list finds the rest.
    Transient,
}

impl DeletedRecord {
    /// The value as `Identify` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletedRecord::No => "no",
            DeletedRecord::Persistent => "persistent",
            DeletedRecord::Transient => "transient",
        }
    }
}

/// What `Identify` says (section 4.2), as far as a harvester uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identify {
    /// `repositoryName`.
    pub repository_name: String,
    /// `baseURL`.
    pub base_url: String,
    /// `protocolVersion` (2.0).
    pub protocol_version: String,
    /// `earliestDatestamp`, when readable.
    pub earliest: Option<Datestamp>,
    /// `deletedRecord`.
    pub deleted: DeletedRecord,
    /// `granularity`.
    pub granularity: Granularity,
}

/// One `metadataFormat` of `ListMetadataFormats` (section 4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataFormat {
    /// `metadataPrefix`.
    pub prefix: String,
    /// `schema`.
    pub schema: String,
    /// `metadataNamespace`.
    pub namespace: String,
}

/// A record's header (section 2.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The item's unique identifier (section 2.4).
    pub identifier: String,
    /// When the record was created, changed or deleted.
    pub datestamp: Datestamp,
    /// `setSpec`s of the sets the item belongs to.
    pub sets: Vec<String>,
    /// `status="deleted"`: the record is gone (section 2.5.1).
    pub deleted: bool,
}

/// A record of `ListRecords` or `GetRecord`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its header.
    pub header: Header,
    /// The content of `<metadata>` as sent (none for a deleted record).
    pub metadata: Option<Vec<u8>>,
    /// How its datestamp departs from the protocol's forms, when it was read leniently
    /// ([`Datestamp::read`]): for one warning per list.
    pub datestamp_quirk: Option<&'static str>,
}

/// A record left out of a page, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordProblem {
    /// Its identifier, when the header had one.
    pub identifier: Option<String>,
    /// What was wrong (bounded: no metadata is echoed).
    pub message: String,
}

/// A `resumptionToken` (section 3.5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResumptionToken {
    /// The token; empty on the last page of a list (the list is complete).
    pub value: String,
    /// `expirationDate`, as written.
    pub expiration: Option<String>,
    /// `completeListSize`.
    pub complete_list_size: Option<u64>,
    /// `cursor`.
    pub cursor: Option<u64>,
}

/// An OAI-PMH error (section 3.6): `code` is one of `badArgument`, `badResumptionToken`,
/// `badVerb`, `cannotDisseminateFormat`, `idDoesNotExist`, `noRecordsMatch`,
/// `noMetadataFormats`, `noSetHierarchy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaiError {
    /// The error code.
    pub code: String,
    /// The provider's message.
    pub message: String,
}

/// What a page said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `Identify`.
    Identify(Identify),
    /// `ListMetadataFormats`.
    MetadataFormats(Vec<MetadataFormat>),
    /// `ListRecords` or `GetRecord`: the records of this page, the problems of those left
    /// out, and the token of the next page (none, or an empty one, on the last).
    Records {
        /// The records read.
        records: Vec<Record>,
        /// Records left out.
        problems: Vec<RecordProblem>,
        /// The list's `resumptionToken`, if the page has one.
        token: Option<ResumptionToken>,
    },
    /// `ListSets`: the `setSpec`s of this page and the list's token.
    Sets {
        /// The `setSpec`s.
        specs: Vec<String>,
        /// The list's `resumptionToken`, if the page has one.
        token: Option<ResumptionToken>,
    },
    /// The protocol's errors instead of a result. `noRecordsMatch` alone is an empty
    /// result, not a failure (see [`Response::is_no_records`]).
    Errors(Vec<OaiError>),
}

impl Response {
    /// True for the `noRecordsMatch` error: a selective harvest that found nothing.
    pub fn is_no_records(&self) -> bool {
        matches!(self, Response::Errors(e) if e.iter().all(|e| e.code == "noRecordsMatch"))
    }

    /// True for `badResumptionToken` (typically an expired token): the harvest restarts
    /// from its `from`.
    pub fn is_bad_token(&self) -> bool {
        matches!(self, Response::Errors(e) if e.iter().any(|e| e.code == "badResumptionToken"))
    }
}

/// A response page with its `responseDate` (the provider's clock: the `until` bound of an
/// incremental harvest, section 3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// `responseDate`.
    pub response_date: Option<Datestamp>,
    /// The body.
    pub response: Response,
    /// Why the page is not well-formed XML, when it is not and its records were salvaged
    /// one by one ([`parse`]): the records read are in `response`, those that could not be
    /// read are its problems.
    pub damage: Option<String>,
    /// True when the page is damaged and its `resumptionToken` could not be read (the page
    /// was cut short, or the token itself is damaged): the list cannot go on from it.
    pub token_unreadable: bool,
}

/// Longest provider text (a message, an identifier) kept in a problem.
const EXCERPT: usize = 200;

fn excerpt(s: &str) -> String {
    if s.len() <= EXCERPT {
        return s.to_owned();
    }
    let mut end = EXCERPT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Reads one response page of request `url`.
pub fn parse(url: &str, page: &[u8]) -> Result<Page, Error> {
    // quick-xml skips a UTF-8 byte order mark and counts its positions after it, while the
    // metadata is cut from `input` by those positions: both must start after the mark (found
    // by fuzzing: with a mark, every record's bytes were three bytes off).
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let page = page.strip_prefix(BOM).unwrap_or(page);
    if page.starts_with(BOM) {
        // quick-xml would skip this one too: U+FEFF before the root is text, not a mark.
        return Err(Error::Xml {
            url: url.to_owned(),
            position: 3,
            message: "a second byte order mark: text before the root element".into(),
        });
    }
    match strict(url, page) {
        Err(e @ Error::Xml { .. }) => salvage(url, page, e),
        other => other,
    }
}

fn strict(url: &str, page: &[u8]) -> Result<Page, Error> {
    let mut p = Parser {
        r: NsReader::from_reader(page),
        url,
        input: page,
    };
    // Not `trim_text`: it trims each piece of text between references, so `a &amp; b` read
    // as `a&b` (found by fuzzing); `text` trims the whole instead.
    p.document()
}

/// Where `needle` occurs in `hay` from `from` on.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Where a `<record>` element starts in `hay` from `from` on (`<record>` or `<record `).
fn record_start(hay: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = find(hay, b"<record", at) {
        if matches!(hay.get(i + 7), Some(b'>' | b' ' | b'\t' | b'\r' | b'\n')) {
            return Some(i);
        }
        at = i + 7;
    }
    None
}

/// A `ListRecords` page that is not well-formed XML (an illegal character outside any
/// record's metadata, a body cut short, a broken tag), read record by record: each
/// `<record>…</record>` is parsed on its own inside the page's own envelope (its start tags,
/// so its namespace declarations hold), the records read are kept, and those that are not
/// become problems under the identifier found in their bytes (else none). The
/// `resumptionToken` is read the same way; when it cannot be, `token_unreadable` says so.
/// Anything but a `ListRecords` page is the error it was.
fn salvage(url: &str, page: &[u8], error: Error) -> Result<Page, Error> {
    let Some(list) = find(page, b"<ListRecords", 0) else {
        return Err(error);
    };
    let Some(head_end) = find(page, b">", list).map(|i| i + 1) else {
        return Err(error);
    };
    let head = &page[..head_end];
    const TAIL: &[u8] = b"</ListRecords></OAI-PMH>";
    let wrapped = |fragment: &[u8]| -> Vec<u8> {
        let mut doc = Vec::with_capacity(head.len() + fragment.len() + TAIL.len());
        doc.extend_from_slice(head);
        doc.extend_from_slice(fragment);
        doc.extend_from_slice(TAIL);
        doc
    };
    // The envelope alone must read: otherwise nothing on the page can be trusted.
    let response_date = match strict(url, &wrapped(b"")) {
        Ok(p) => p.response_date,
        Err(_) => return Err(error),
    };
    let damage = error.to_string();
    let token_at = find(page, b"<resumptionToken", head_end);
    let records_end = token_at
        .or_else(|| find(page, b"</ListRecords>", head_end))
        .unwrap_or(page.len());
    let mut records = Vec::new();
    let mut problems = Vec::new();
    let mut at = record_start(page, head_end).filter(|&i| i < records_end);
    while let Some(start) = at {
        let next = record_start(page, start + 7).filter(|&i| i < records_end);
        let chunk = &page[start..next.unwrap_or(records_end)];
        let read = find(chunk, b"</record>", 0)
            .map(|end| &chunk[..end + b"</record>".len()])
            .and_then(|whole| match strict(url, &wrapped(whole)) {
                Ok(Page {
                    response:
                        Response::Records {
                            records: r,
                            problems: p,
                            ..
                        },
                    ..
                }) if r.len() + p.len() == 1 => Some((r, p)),
                _ => None,
            });
        match read {
            Some((r, p)) => {
                records.extend(r);
                problems.extend(p);
            }
            None => problems.push(RecordProblem {
                identifier: identifier_in(chunk),
                message: format!(
                    "the page is not well-formed XML ({}); this record could not be read from it",
                    excerpt(&damage)
                ),
            }),
        }
        at = next;
    }
    let (token, token_unreadable) = match token_at {
        Some(t) => {
            let end = find(page, b"</resumptionToken>", t)
                .map(|e| e + b"</resumptionToken>".len())
                .or_else(|| find(page, b"/>", t).map(|e| e + 2));
            match end.map(|e| strict(url, &wrapped(&page[t..e]))) {
                Some(Ok(Page {
                    response:
                        Response::Records {
                            token: Some(tok), ..
                        },
                    ..
                })) => (Some(tok), false),
                _ => (None, true),
            }
        }
        // No token: the last page of a list, unless the list was cut short before its end.
        None => (None, find(page, b"</ListRecords>", head_end).is_none()),
    };
    Ok(Page {
        response_date,
        response: Response::Records {
            records,
            problems,
            token,
        },
        damage: Some(damage),
        token_unreadable,
    })
}

/// The first `<identifier>` text in a record's bytes (its header's), for naming a record
/// that could not be read; bounded and only when it is plain text.
fn identifier_in(chunk: &[u8]) -> Option<String> {
    let start = find(chunk, b"<identifier>", 0)? + b"<identifier>".len();
    let end = find(chunk, b"</identifier>", start)?;
    let text = std::str::from_utf8(&chunk[start..end]).ok()?.trim();
    (!text.is_empty() && !text.contains(['<', '&']) && !text.chars().any(char::is_control))
        .then(|| excerpt(text))
}

struct Parser<'a> {
    r: NsReader<&'a [u8]>,
    url: &'a str,
    input: &'a [u8],
}

/// An element start, owned (the reader's buffer moves on).
struct Start {
    oai: bool,
    local: Vec<u8>,
    raw: BytesStart<'static>,
    empty: bool,
}

impl<'a> Parser<'a> {
    fn xml_err(&self, e: impl std::fmt::Display) -> Error {
        Error::Xml {
            url: self.url.to_owned(),
            position: self.r.buffer_position(),
            message: e.to_string(),
        }
    }

    fn not_oai(&self, message: impl Into<String>) -> Error {
        Error::NotOai {
            url: self.url.to_owned(),
            message: message.into(),
        }
    }

    /// The next element start or end among the children of the current element: `None` at
    /// its end (or at the end of the input).
    fn next_child(&mut self) -> Result<Option<Start>, Error> {
        loop {
            let (url, position) = (self.url, self.r.buffer_position());
            let (ns, ev) = self.r.read_resolved_event().map_err(|e| Error::Xml {
                url: url.to_owned(),
                position,
                message: e.to_string(),
            })?;
            let oai = matches!(ns, ResolveResult::Bound(Namespace(n)) if n == OAI_NS.as_bytes());
            if let Event::Start(e) | Event::Empty(e) = &ev {
                // The envelope's attributes are read strictly: quick-xml reads them only on
                // demand, and a record's metadata inherits the envelope's namespace
                // declarations (found by fuzzing: a malformed attribute list, and `xmlns:`,
                // which quick-xml binds as if it declared the default namespace).
                for a in e.attributes() {
                    let message = match a {
                        Err(err) => format!("a malformed attribute: {err}"),
                        Ok(a) if a.key.as_ref() == b"xmlns:" => "a namespace declaration with an empty prefix (`xmlns:`, Namespaces in XML 1.0 section 3)".into(),
                        Ok(_) => continue,
                    };
                    return Err(Error::Xml {
                        url: url.to_owned(),
                        position,
                        message,
                    });
                }
            }
            match ev {
                Event::Start(e) => {
                    return Ok(Some(Start {
                        oai,
                        local: e.local_name().as_ref().to_vec(),
                        raw: e.into_owned(),
                        empty: false,
                    }));
                }
                Event::Empty(e) => {
                    return Ok(Some(Start {
                        oai,
                        local: e.local_name().as_ref().to_vec(),
                        raw: e.into_owned(),
                        empty: true,
                    }));
                }
                Event::End(_) | Event::Eof => return Ok(None),
                _ => {}
            }
        }
    }

    /// Skips the content of `s` (when it is not empty).
    fn skip(&mut self, s: &Start) -> Result<(), Error> {
        if !s.empty {
            self.r
                .read_to_end(s.raw.name())
                .map_err(|e| self.xml_err(e))?;
        }
        Ok(())
    }

    /// The text content of `s` (entity and character references resolved, CDATA kept),
    /// trimmed; child elements are an error of the response.
    fn text(&mut self, s: &Start) -> Result<String, Error> {
        let mut out = String::new();
        if s.empty {
            return Ok(out);
        }
        loop {
            let ev = self.r.read_event().map_err(|e| self.xml_err(e))?;
            match ev {
                Event::Text(t) => out.push_str(&t.decode().map_err(|e| self.xml_err(e))?),
                Event::CData(t) => out.push_str(&t.decode().map_err(|e| self.xml_err(e))?),
                Event::GeneralRef(g) => {
                    if let Some(c) = g.resolve_char_ref().map_err(|e| self.xml_err(e))? {
                        out.push(c);
                    } else {
                        let name = g.decode().map_err(|e| self.xml_err(e))?;
                        out.push(match &*name {
                            "amp" => '&',
                            "lt" => '<',
                            "gt" => '>',
                            "quot" => '"',
                            "apos" => '\'',
                            other => {
                                return Err(self.not_oai(format!(
                                    "unknown entity `&{}`; in <{}>",
                                    excerpt(other),
                                    String::from_utf8_lossy(&s.local)
                                )));
                            }
                        });
                    }
                }
                Event::End(_) => return Ok(out.trim().to_owned()),
                Event::Start(e) => {
                    return Err(self.not_oai(format!(
                        "element <{}> inside <{}>, which holds text",
                        String::from_utf8_lossy(e.local_name().as_ref()),
                        String::from_utf8_lossy(&s.local)
                    )));
                }
                Event::Eof => return Err(self.xml_err("unexpected end of the response")),
                _ => {}
            }
        }
    }

    fn attr(&self, s: &Start, name: &[u8]) -> Option<String> {
        s.raw
            .attributes()
            .flatten()
            .find(|a| a.key.local_name().as_ref() == name)
            .and_then(|a| {
                a.normalized_value(XmlVersion::Implicit1_0)
                    .ok()
                    .map(|v| v.trim().to_owned())
            })
    }

    fn document(&mut self) -> Result<Page, Error> {
        let root = self
            .next_child()?
            .ok_or_else(|| self.not_oai("no root element"))?;
        if !(root.oai && root.local == b"OAI-PMH") {
            return Err(self.not_oai(format!(
                "the root element is <{}>, not <OAI-PMH> in {OAI_NS}",
                String::from_utf8_lossy(&root.local)
            )));
        }
        let mut response_date = None;
        let mut errors = Vec::new();
        let mut response = None;
        while let Some(c) = self.next_child()? {
            match (c.oai, c.local.as_slice()) {
                (true, b"responseDate") => {
                    let t = self.text(&c)?;
                    response_date = Datestamp::parse(&t);
                }
                (true, b"error") => {
                    let code = self.attr(&c, b"code").unwrap_or_default();
                    let message = excerpt(&self.text(&c)?);
                    errors.push(OaiError { code, message });
                }
                (true, b"Identify") => response = Some(Response::Identify(self.identify(&c)?)),
                (true, b"ListMetadataFormats") => {
                    response = Some(Response::MetadataFormats(self.formats(&c)?));
                }
                (true, b"ListSets") => response = Some(self.sets(&c)?),
                (true, b"ListRecords" | b"GetRecord" | b"ListIdentifiers") => {
                    let mut scope = declarations(&root.raw);
                    scope.extend(declarations(&c.raw));
                    response = Some(self.records(&c, &scope)?);
                }
                _ => self.skip(&c)?,
            }
        }
        let response = match (response, errors.is_empty()) {
            (_, false) => Response::Errors(errors),
            (Some(r), true) => r,
            (None, true) => return Err(self.not_oai("neither a result nor an <error>")),
        };
        Ok(Page {
            response_date,
            response,
            damage: None,
            token_unreadable: false,
        })
    }

    fn identify(&mut self, s: &Start) -> Result<Identify, Error> {
        let (mut name, mut base, mut version) = (String::new(), String::new(), String::new());
        let (mut earliest, mut deleted, mut granularity) = (None, None, None);
        if !s.empty {
            while let Some(c) = self.next_child()? {
                match c.local.as_slice() {
                    b"repositoryName" => name = self.text(&c)?,
                    b"baseURL" => base = self.text(&c)?,
                    b"protocolVersion" => version = self.text(&c)?,
                    b"earliestDatestamp" => earliest = Some(self.text(&c)?),
                    b"deletedRecord" => deleted = Some(self.text(&c)?),
                    b"granularity" => granularity = Some(self.text(&c)?),
                    _ => self.skip(&c)?,
                }
            }
        }
        let value = |message: String| Error::Value {
            url: self.url.to_owned(),
            message,
            section: "4.2",
        };
        let granularity = granularity.unwrap_or_default();
        let granularity = Granularity::parse(&granularity).ok_or_else(|| {
            value(format!(
                "Identify's granularity `{}` is neither YYYY-MM-DD nor YYYY-MM-DDThh:mm:ssZ",
                excerpt(&granularity)
            ))
        })?;
        let deleted = match deleted.as_deref().unwrap_or_default() {
            "no" => DeletedRecord::No,
            "persistent" => DeletedRecord::Persistent,
            "transient" => DeletedRecord::Transient,
            other => {
                return Err(value(format!(
                    "Identify's deletedRecord `{}` is none of no, persistent, transient",
                    excerpt(other)
                )));
            }
        };
        Ok(Identify {
            repository_name: name,
            base_url: base,
            protocol_version: version,
            earliest: earliest.as_deref().and_then(Datestamp::parse),
            deleted,
            granularity,
        })
    }

    fn formats(&mut self, s: &Start) -> Result<Vec<MetadataFormat>, Error> {
        let mut out = Vec::new();
        if s.empty {
            return Ok(out);
        }
        while let Some(c) = self.next_child()? {
            if c.local != b"metadataFormat" || c.empty {
                self.skip(&c)?;
                continue;
            }
            let (mut prefix, mut schema, mut namespace) = Default::default();
            while let Some(f) = self.next_child()? {
                match f.local.as_slice() {
                    b"metadataPrefix" => prefix = self.text(&f)?,
                    b"schema" => schema = self.text(&f)?,
                    b"metadataNamespace" => namespace = self.text(&f)?,
                    _ => self.skip(&f)?,
                }
            }
            out.push(MetadataFormat {
                prefix,
                schema,
                namespace,
            });
        }
        Ok(out)
    }

    /// `scope`: the namespace declarations of the elements around the records.
    fn records(&mut self, s: &Start, scope: &[(Vec<u8>, Vec<u8>)]) -> Result<Response, Error> {
        let mut records = Vec::new();
        let mut problems = Vec::new();
        let mut token = None;
        if !s.empty {
            while let Some(c) = self.next_child()? {
                match c.local.as_slice() {
                    b"record" => match self.record(&c, scope)? {
                        Ok(r) => records.push(r),
                        Err(p) => problems.push(p),
                    },
                    // A `<header>` is a record only in `ListIdentifiers` (section 4.3). In
                    // `ListRecords` or `GetRecord` (sections 4.5, 4.1) one outside a
                    // `<record>` is a malformed record, not a record without metadata
                    // (found by fuzzing: it passed as a live record with no metadata).
                    b"header" if s.local == b"ListIdentifiers" => match self.record(&c, scope)? {
                        Ok(r) => records.push(r),
                        Err(p) => problems.push(p),
                    },
                    b"header" => {
                        let (identifier, ..) = self.header(&c)?;
                        problems.push(RecordProblem {
                            identifier: identifier.filter(|i| !i.is_empty()).map(|i| excerpt(&i)),
                            message: format!(
                                "a <header> outside any <record> in {} (OAI-PMH 2.0 section 2.5): \
                                 the record is left out",
                                String::from_utf8_lossy(&s.local)
                            ),
                        });
                    }
                    b"resumptionToken" => token = Some(self.token(&c)?),
                    _ => self.skip(&c)?,
                }
            }
        }
        Ok(Response::Records {
            records,
            problems,
            token,
        })
    }

    /// `ListSets` (section 4.6): the `setSpec`s of this page and its token.
    fn sets(&mut self, s: &Start) -> Result<Response, Error> {
        let mut specs = Vec::new();
        let mut token = None;
        if !s.empty {
            while let Some(c) = self.next_child()? {
                match c.local.as_slice() {
                    b"set" if !c.empty => {
                        while let Some(f) = self.next_child()? {
                            match f.local.as_slice() {
                                b"setSpec" => specs.push(self.text(&f)?),
                                _ => self.skip(&f)?,
                            }
                        }
                    }
                    b"resumptionToken" => token = Some(self.token(&c)?),
                    _ => self.skip(&c)?,
                }
            }
        }
        Ok(Response::Sets { specs, token })
    }

    /// A `<resumptionToken>` (section 3.5) with its attributes.
    fn token(&mut self, c: &Start) -> Result<ResumptionToken, Error> {
        let num = |n: &[u8]| self.attr(c, n).and_then(|v| v.parse().ok());
        let (expiration, complete_list_size, cursor) = (
            self.attr(c, b"expirationDate"),
            num(b"completeListSize"),
            num(b"cursor"),
        );
        Ok(ResumptionToken {
            value: self.text(c)?,
            expiration,
            complete_list_size,
            cursor,
        })
    }

    /// One `<record>` (or a `<header>` of `ListIdentifiers`): the record, or the problem
    /// that leaves it out.
    fn record(
        &mut self,
        s: &Start,
        scope: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Result<Record, RecordProblem>, Error> {
        let mut header = None;
        let mut metadata = None;
        let mut problem = None;
        // A `<header>` of `ListIdentifiers` (section 4.3): a record without its metadata.
        let headers_only = s.local == b"header";
        if headers_only {
            header = Some(self.header(s)?);
        } else if !s.empty {
            while let Some(c) = self.next_child()? {
                match c.local.as_slice() {
                    b"header" => header = Some(self.header(&c)?),
                    b"metadata" if !c.empty => {
                        let span = self
                            .r
                            .read_to_end(c.raw.name())
                            .map_err(|e| self.xml_err(e))?;
                        let bytes = &self.input[span.start as usize..span.end as usize];
                        match invalid_xml_char(bytes) {
                            None => {
                                let (record, meta) = (declarations(&s.raw), declarations(&c.raw));
                                let inherited: Vec<&(Vec<u8>, Vec<u8>)> =
                                    scope.iter().chain(&record).chain(&meta).collect();
                                // The declarations it inherits are the envelope's bytes, not
                                // checked with the record's (found by fuzzing: a bad byte in
                                // the root's `xmlns:xsi` made every copy invalid UTF-8):
                                // `standalone` checks those it adds.
                                match standalone(trim(bytes), &inherited) {
                                    Ok(alone) => metadata = Some(alone),
                                    Err(why) => problem = Some(why),
                                }
                            }
                            Some(why) => problem = Some(why),
                        }
                    }
                    _ => self.skip(&c)?,
                }
            }
        }
        let (identifier, datestamp, sets, deleted) = match header {
            Some(h) => h,
            None => {
                return Ok(Err(RecordProblem {
                    identifier: None,
                    message: "a record without a header (OAI-PMH 2.0 section 2.5)".into(),
                }));
            }
        };
        let Some(identifier) = identifier.filter(|i| !i.is_empty()) else {
            return Ok(Err(RecordProblem {
                identifier: None,
                message: "a record header without an identifier (OAI-PMH 2.0 section 2.5)".into(),
            }));
        };
        let problem_of = |message: String| RecordProblem {
            identifier: Some(excerpt(&identifier)),
            message,
        };
        if identifier.chars().any(char::is_control) {
            // Not a URI (found by fuzzing: a NUL or a line break inside an identifier, which
            // the record's GetRecord URL and every log line would carry).
            return Ok(Err(problem_of(
                "its identifier holds control characters: not a URI (OAI-PMH 2.0 section 2.4)"
                    .into(),
            )));
        }
        if let Some(why) = problem {
            return Ok(Err(problem_of(format!(
                "its metadata {why} (XML 1.0 section 2.2); the record is left out"
            ))));
        }
        let (datestamp, datestamp_quirk) =
            match datestamp.as_deref().map(|d| (d, Datestamp::read(d))) {
                Some((_, Some(d))) => d,
                Some((raw, None)) => {
                    return Ok(Err(problem_of(format!(
                        "datestamp `{}` is not a UTC datestamp (OAI-PMH 2.0 section 3.3.1)",
                        excerpt(raw)
                    ))));
                }
                None => {
                    return Ok(Err(problem_of(
                        "a record header without a datestamp (OAI-PMH 2.0 section 2.5)".into(),
                    )));
                }
            };
        if !deleted && metadata.is_none() && !headers_only {
            return Ok(Err(problem_of(
                "a record that is not deleted has no metadata (OAI-PMH 2.0 section 2.5)".into(),
            )));
        }
        Ok(Ok(Record {
            header: Header {
                identifier,
                datestamp,
                sets,
                deleted,
            },
            metadata: if deleted { None } else { metadata },
            datestamp_quirk,
        }))
    }

    #[allow(clippy::type_complexity)]
    fn header(
        &mut self,
        s: &Start,
    ) -> Result<(Option<String>, Option<String>, Vec<String>, bool), Error> {
        let deleted = self.attr(s, b"status").as_deref() == Some("deleted");
        let (mut identifier, mut datestamp, mut sets) = (None, None, Vec::new());
        if !s.empty {
            while let Some(c) = self.next_child()? {
                match c.local.as_slice() {
                    b"identifier" => identifier = Some(self.text(&c)?),
                    b"datestamp" => datestamp = Some(self.text(&c)?),
                    b"setSpec" => sets.push(self.text(&c)?),
                    _ => self.skip(&c)?,
                }
            }
        }
        Ok((identifier, datestamp, sets, deleted))
    }
}

/// The namespace declarations (`xmlns`, `xmlns:p`) of a start tag, as written.
fn declarations(e: &BytesStart<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    e.attributes()
        .flatten()
        .filter(|a| a.key.as_ref() == b"xmlns" || a.key.as_ref().starts_with(b"xmlns:"))
        .map(|a| (a.key.as_ref().to_vec(), a.value.to_vec()))
        .collect()
}

/// The metadata record `content` as a document of its own: the declarations it inherits
/// from the response (`inherited`, outermost first; providers commonly declare `xsi` on
/// `<OAI-PMH>` and use it in the record) are added to its root element's start tag, unless
/// that tag declares the same prefix. Without them the stored body would use prefixes
/// nothing binds. The rest of the bytes are as the provider sent them. A declaration added
/// that XML 1.0 cannot carry (`content` itself was checked) is the error: the copy would
/// not be XML.
fn standalone(content: &[u8], inherited: &[&(Vec<u8>, Vec<u8>)]) -> Result<Vec<u8>, String> {
    // The root element's start: the first `<` followed by a name (not `<!--` or `<?`).
    let Some(lt) = (0..content.len()).find(|&i| {
        content[i] == b'<'
            && content
                .get(i + 1)
                .is_some_and(|c| !matches!(c, b'!' | b'?' | b'/'))
    }) else {
        return Ok(content.to_vec());
    };
    let name_end = content[lt + 1..]
        .iter()
        .position(|c| c.is_ascii_whitespace() || matches!(c, b'/' | b'>'))
        .map_or(content.len(), |p| lt + 1 + p);
    let own: Vec<Vec<u8>> = {
        let mut r = quick_xml::Reader::from_reader(&content[lt..]);
        match r.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) => {
                declarations(&e).into_iter().map(|(k, _)| k).collect()
            }
            _ => Vec::new(),
        }
    };
    // The innermost declaration of each prefix wins.
    let mut add: Vec<&(Vec<u8>, Vec<u8>)> = Vec::new();
    for d in inherited.iter().rev() {
        if !own.contains(&d.0) && !add.iter().any(|a| a.0 == d.0) {
            add.push(d);
        }
    }
    for (k, v) in &add {
        if let Some(why) = invalid_xml_char(k).or_else(|| invalid_xml_char(v)) {
            return Err(format!(
                "{why} once given the namespace declarations it inherits (in `{}`)",
                excerpt(&String::from_utf8_lossy(k))
            ));
        }
    }
    let mut out = Vec::with_capacity(content.len() + add.len() * 64);
    out.extend_from_slice(&content[..name_end]);
    for (k, v) in add.iter().rev() {
        let quote = if v.contains(&b'"') { b'\'' } else { b'"' };
        out.push(b' ');
        out.extend_from_slice(k);
        out.push(b'=');
        out.push(quote);
        out.extend_from_slice(v);
        out.push(quote);
    }
    out.extend_from_slice(&content[name_end..]);
    Ok(out)
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// Why `bytes` cannot be XML 1.0 content, if so: not UTF-8, a character outside XML 1.0's
/// `Char` production, or a character reference to one (`&#1;`, `&#xFFFE;`).
fn invalid_xml_char(bytes: &[u8]) -> Option<String> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => return Some(format!("is not UTF-8 at byte {}", e.valid_up_to())),
    };
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    };
    // Valid UTF-8 holds no surrogates, so what `Char` excludes is a C0 control other than
    // tab, line feed and carriage return, or U+FFFE/U+FFFF (whose encoding starts with
    // 0xEF): bytes a metadata record almost never has, so the walk by characters is only
    // taken when one is there (a byte scan the compiler vectorises; the walk was 1.5% of a
    // harvest's CPU).
    let suspect = |b: &u8| (*b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || *b == 0xEF;
    if bytes.iter().any(suspect)
        && let Some((i, c)) = text.char_indices().find(|&(_, c)| !allowed(c))
    {
        return Some(format!("holds U+{:04X} at byte {i}", c as u32));
    }
    let mut rest = text;
    while let Some(i) = rest.find("&#") {
        rest = &rest[i + 2..];
        let end = rest.find(';')?;
        let (digits, radix) = match rest[..end].strip_prefix(['x', 'X']) {
            Some(h) => (h, 16),
            None => (&rest[..end], 10),
        };
        match u32::from_str_radix(digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(c) if allowed(c) => {}
            _ => {
                return Some(format!(
                    "refers to a character XML 1.0 does not allow (`&#{};`)",
                    excerpt(&rest[..end])
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://repo.example.org/oai?verb=ListRecords";

    fn oai(body: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <responseDate>2024-03-01T12:00:00Z</responseDate>
  <request verb="ListRecords">http://repo.example.org/oai</request>
  {body}
</OAI-PMH>"#
        )
    }

    const DC: &str = r#"<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>A &amp; B</dc:title></oai_dc:dc>"#;

    fn rec(id: &str, title: &str) -> String {
        format!(
            r#"<record><header><identifier>{id}</identifier><datestamp>2024-01-01</datestamp></header><metadata><oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></oai_dc:dc></metadata></record>"#
        )
    }

    fn ids(r: &Response) -> (Vec<String>, Vec<Option<String>>, Option<String>) {
        match r {
            Response::Records {
                records,
                problems,
                token,
            } => (
                records
                    .iter()
                    .map(|r| r.header.identifier.clone())
                    .collect(),
                problems.iter().map(|p| p.identifier.clone()).collect(),
                token.as_ref().map(|t| t.value.clone()),
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_header_outside_a_record_in_list_records_is_a_problem_not_a_record() {
        // Found by fuzzing (fuzz/regressions/oai_response/crash-4af7cea7…): a stray
        // `<header>` in `ListRecords` passed as a live record with no metadata.
        let page = oai(&format!(
            r#"<ListRecords><record/><header><identifier>oai:r:9</identifier><datestamp>2024-01-01</datestamp></header>{}</ListRecords>"#,
            rec("oai:r:1", "A")
        ));
        let p = parse(URL, page.as_bytes()).unwrap();
        assert_eq!(
            ids(&p.response),
            (
                vec!["oai:r:1".to_owned()],
                vec![None, Some("oai:r:9".to_owned())],
                None
            )
        );
        let Response::Records { problems, .. } = &p.response else {
            unreachable!()
        };
        assert!(
            problems[1]
                .message
                .contains("outside any <record> in ListRecords"),
            "{}",
            problems[1].message
        );
    }

    #[test]
    fn list_identifiers_headers_and_list_sets() {
        let page = oai(
            r#"<ListIdentifiers><header><identifier>oai:r:1</identifier><datestamp>2024-01-01</datestamp><setSpec>a</setSpec></header><header status="deleted"><identifier>oai:r:2</identifier><datestamp>2024-01-02</datestamp></header><header><identifier>oai:r:3</identifier></header><resumptionToken completeListSize="9">t-1</resumptionToken></ListIdentifiers>"#,
        );
        let p = parse(URL, page.as_bytes()).unwrap();
        assert_eq!(
            ids(&p.response),
            (
                vec!["oai:r:1".to_owned(), "oai:r:2".to_owned()],
                vec![Some("oai:r:3".to_owned())],
                Some("t-1".to_owned())
            )
        );
        let Response::Records { records, .. } = &p.response else {
            unreachable!()
        };
        assert_eq!(records[0].header.sets, ["a"]);
        assert!(records[0].metadata.is_none() && !records[0].header.deleted);
        assert!(records[1].header.deleted);

        let page = oai(
            r#"<ListSets><set><setSpec>math</setSpec><setName>Mathematics</setName></set><set><setSpec>math:algebra</setSpec><setName>Algebra</setName><setDescription><x/></setDescription></set><resumptionToken>s-2</resumptionToken></ListSets>"#,
        );
        match parse(URL, page.as_bytes()).unwrap().response {
            Response::Sets { specs, token } => {
                assert_eq!(specs, ["math", "math:algebra"]);
                assert_eq!(token.unwrap().value, "s-2");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_page_that_is_not_well_formed_is_read_record_by_record() {
        // An unescaped `&` in one record's title breaks the page as a whole: the records
        // around it are read, it is a problem under its identifier, the token is read.
        let page = oai(&format!(
            "<ListRecords>{}{}{}<resumptionToken cursor=\"0\">next-1</resumptionToken></ListRecords>",
            rec("oai:r:1", "one"),
            rec("oai:r:2", "Tom & Jerry"),
            rec("oai:r:3", "three")
        ));
        let p = parse(URL, page.as_bytes()).unwrap();
        assert!(
            p.damage
                .as_deref()
                .is_some_and(|d| d.contains("not well-formed")),
            "{p:?}"
        );
        assert!(!p.token_unreadable);
        assert_eq!(
            ids(&p.response),
            (
                vec!["oai:r:1".to_owned(), "oai:r:3".to_owned()],
                vec![Some("oai:r:2".to_owned())],
                Some("next-1".to_owned())
            )
        );
        // The metadata of a salvaged record is the same bytes as from a sound page.
        let sound = oai(&format!(
            "<ListRecords>{}</ListRecords>",
            rec("oai:r:3", "three")
        ));
        let sound = parse(URL, sound.as_bytes()).unwrap();
        let meta = |r: &Response| match r {
            Response::Records { records, .. } => records.last().unwrap().metadata.clone(),
            _ => None,
        };
        assert_eq!(meta(&p.response), meta(&sound.response));
        assert!(sound.damage.is_none());
    }

    #[test]
    fn a_page_cut_short_keeps_its_whole_records_and_says_its_token_is_unreadable() {
        let whole = oai(&format!(
            "<ListRecords>{}{}{}<resumptionToken>next-2</resumptionToken></ListRecords>",
            rec("oai:c:1", "one"),
            rec("oai:c:2", "two"),
            rec("oai:c:3", "three")
        ));
        let cut = &whole.as_bytes()[..whole.find("three").unwrap()];
        let p = parse(URL, cut).unwrap();
        assert!(p.token_unreadable, "{p:?}");
        assert_eq!(
            ids(&p.response),
            (
                vec!["oai:c:1".to_owned(), "oai:c:2".to_owned()],
                vec![Some("oai:c:3".to_owned())],
                None
            )
        );
        // A page that is not ListRecords stays the error it was.
        let broken = oai("<Identify><repositoryName>A & B</repositoryName></Identify>");
        assert!(matches!(
            parse(URL, broken.as_bytes()),
            Err(Error::Xml { .. })
        ));
    }

    #[test]
    fn identify_gives_granularity_deletions_and_earliest() {
        let page = oai(r#"<Identify>
            <repositoryName>Repo</repositoryName>
            <baseURL>http://repo.example.org/oai</baseURL>
            <protocolVersion>2.0</protocolVersion>
            <adminEmail>a@example.org</adminEmail>
            <earliestDatestamp>2001-01-01</earliestDatestamp>
            <deletedRecord>transient</deletedRecord>
            <granularity>YYYY-MM-DD</granularity>
            <description><x xmlns="urn:x"><granularity>ignored</granularity></x></description>
          </Identify>"#);
        let p = parse(URL, page.as_bytes()).unwrap();
        assert_eq!(p.response_date, Datestamp::parse("2024-03-01T12:00:00Z"));
        let Response::Identify(id) = p.response else {
            panic!("{p:?}")
        };
        assert_eq!(id.granularity, Granularity::Day);
        assert_eq!(id.deleted, DeletedRecord::Transient);
        assert_eq!(id.earliest, Datestamp::parse("2001-01-01"));
        assert_eq!(id.repository_name, "Repo");
        let bad = oai(
            "<Identify><deletedRecord>no</deletedRecord><granularity>YYYY</granularity></Identify>",
        );
        let e = parse(URL, bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("granularity `YYYY`") && e.contains("4.2"), "{e}");
    }

    #[test]
    fn records_keep_their_metadata_bytes_and_the_token_its_attributes() {
        let page = oai(&format!(
            r#"<ListRecords>
              <record><header><identifier>oai:r:1</identifier><datestamp>2024-02-01T10:00:00Z</datestamp>
                <setSpec>a</setSpec><setSpec>a:b</setSpec></header>
                <metadata>
                  {DC}
                </metadata>
                <about><x xmlns="urn:x"/></about></record>
              <record><header status="deleted"><identifier>oai:r:2</identifier><datestamp>2024-02-02T10:00:00</datestamp></header></record>
              <resumptionToken expirationDate="2024-03-02T12:00:00Z" completeListSize="1000" cursor="0">tok&amp;1</resumptionToken>
            </ListRecords>"#
        ));
        let p = parse(URL, page.as_bytes()).unwrap();
        let Response::Records {
            records,
            problems,
            token,
        } = p.response
        else {
            panic!()
        };
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].header.identifier, "oai:r:1");
        assert_eq!(records[0].header.sets, ["a", "a:b"]);
        // As sent, with the declarations it inherits from the response added to its root.
        let standalone = DC.replacen(
            "<oai_dc:dc",
            "<oai_dc:dc xmlns=\"http://www.openarchives.org/OAI/2.0/\" \
             xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"",
            1,
        );
        assert_eq!(
            std::str::from_utf8(records[0].metadata.as_deref().unwrap()).unwrap(),
            standalone
        );
        assert!(records[1].header.deleted);
        assert_eq!(records[1].metadata, None);
        assert_eq!(
            records[1].header.datestamp,
            Datestamp::parse("2024-02-02T10:00:00Z").unwrap()
        );
        let token = token.unwrap();
        assert_eq!(token.value, "tok&1");
        assert_eq!(token.complete_list_size, Some(1000));
        assert_eq!(token.cursor, Some(0));
        assert_eq!(token.expiration.as_deref(), Some("2024-03-02T12:00:00Z"));
    }

    /// Providers declare `xsi` (and others) on `<OAI-PMH>` and use them in the record: the
    /// stored body binds every prefix it uses, and keeps its own declarations.
    #[test]
    fn a_record_binds_the_prefixes_it_inherits() {
        let page = oai(
            r#"<ListRecords xmlns:x="urn:list"><record xmlns:y='urn:"y"'><header><identifier>i</identifier><datestamp>2024-02-01</datestamp></header>
            <metadata><!-- c --><x:r xmlns:x="urn:own" xsi:schemaLocation="urn:own r.xsd"><y:v/><w>t</w></x:r></metadata></record></ListRecords>"#,
        );
        let Response::Records { records, .. } = parse(URL, page.as_bytes()).unwrap().response
        else {
            panic!()
        };
        let body = records[0].metadata.clone().unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.starts_with("<!-- c --><x:r xmlns="), "{text}");
        assert!(!text.contains("urn:list"), "its own x wins: {text}");
        let mut r = NsReader::from_reader(&body[..]);
        let mut names = Vec::new();
        loop {
            match r.read_resolved_event().unwrap() {
                (ns, Event::Start(e) | Event::Empty(e)) => {
                    let ResolveResult::Bound(Namespace(n)) = ns else {
                        panic!("unbound {:?} in {text}", e.name())
                    };
                    names.push(String::from_utf8(n.to_vec()).unwrap());
                    for a in e.attributes().flatten() {
                        let (ns, _) = r.resolver().resolve_attribute(a.key);
                        assert!(!matches!(ns, ResolveResult::Unknown(_)), "{text}");
                    }
                }
                (_, Event::Eof) => break,
                _ => {}
            }
        }
        assert_eq!(names, ["urn:own", "urn:\"y\"", OAI_NS]);
    }

    #[test]
    fn an_empty_token_ends_the_list() {
        let page = oai(&format!(
            r#"<ListRecords><record><header><identifier>i</identifier><datestamp>2024-02-01</datestamp></header><metadata>{DC}</metadata></record>
               <resumptionToken completeListSize="1" cursor="0"/></ListRecords>"#
        ));
        let Response::Records { token, records, .. } =
            parse(URL, page.as_bytes()).unwrap().response
        else {
            panic!()
        };
        assert_eq!(records.len(), 1);
        assert_eq!(token.unwrap().value, "");
    }

    #[test]
    fn a_bad_record_is_left_out_and_the_rest_read() {
        let page = oai(&format!(
            "<ListRecords>\
             <record><header><identifier>ok</identifier><datestamp>2024-02-01</datestamp></header><metadata>{DC}</metadata></record>\
             <record><header><identifier>ctl</identifier><datestamp>2024-02-01</datestamp></header><metadata><t xmlns=\"urn:t\">a\u{1}b</t></metadata></record>\
             <record><header><identifier>ref</identifier><datestamp>2024-02-01</datestamp></header><metadata><t xmlns=\"urn:t\">a&#x1;b</t></metadata></record>\
             <record><header><identifier>when</identifier><datestamp>last tuesday</datestamp></header><metadata>{DC}</metadata></record>\
             <record><header><datestamp>2024-02-01</datestamp></header><metadata>{DC}</metadata></record>\
             <record><header><identifier>empty</identifier><datestamp>2024-02-01</datestamp></header></record>\
             </ListRecords>"
        ));
        let Response::Records {
            records, problems, ..
        } = parse(URL, page.as_bytes()).unwrap().response
        else {
            panic!()
        };
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].header.identifier, "ok");
        let said: Vec<_> = problems
            .iter()
            .map(|p| (p.identifier.as_deref(), p.message.as_str()))
            .collect();
        assert_eq!(said.len(), 5, "{said:?}");
        assert!(
            said[0].0 == Some("ctl") && said[0].1.contains("U+0001"),
            "{said:?}"
        );
        assert!(
            said[1].0 == Some("ref") && said[1].1.contains("&#x1;"),
            "{said:?}"
        );
        assert!(said[2].1.contains("`last tuesday`"), "{said:?}");
        assert!(said[3].0.is_none() && said[3].1.contains("without an identifier"));
        assert!(said[4].1.contains("no metadata"), "{said:?}");
    }

    #[test]
    fn protocol_errors() {
        let none = oai(r#"<error code="noRecordsMatch">nothing</error>"#);
        let p = parse(URL, none.as_bytes()).unwrap();
        assert!(p.response.is_no_records() && !p.response.is_bad_token());
        let expired = oai(r#"<error code="badResumptionToken">expired</error>"#);
        let p = parse(URL, expired.as_bytes()).unwrap();
        assert!(p.response.is_bad_token() && !p.response.is_no_records());
    }

    #[test]
    fn not_an_oai_response() {
        let e = parse(URL, b"<html><body>503</body></html>").unwrap_err();
        assert!(e.to_string().contains("not <OAI-PMH>"), "{e}");
        // A list that never closes: damaged, its one record unreadable, and whether a token
        // would have followed cannot be known.
        let p = parse(URL, oai("<ListRecords><record>").as_bytes()).unwrap();
        assert!(p.damage.is_some() && p.token_unreadable, "{p:?}");
        let e = parse(URL, oai("").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("neither a result"), "{e}");
    }

    #[test]
    fn metadata_formats() {
        let page = oai(r#"<ListMetadataFormats>
          <metadataFormat><metadataPrefix>oai_dc</metadataPrefix>
            <schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>
            <metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace></metadataFormat>
          <metadataFormat><metadataPrefix>marc21</metadataPrefix><schema>s</schema><metadataNamespace>n</metadataNamespace></metadataFormat>
        </ListMetadataFormats>"#);
        let Response::MetadataFormats(f) = parse(URL, page.as_bytes()).unwrap().response else {
            panic!()
        };
        let prefixes: Vec<_> = f.iter().map(|f| f.prefix.as_str()).collect();
        assert_eq!(prefixes, ["oai_dc", "marc21"]);
    }

    #[test]
    fn characters_xml_does_not_allow_are_found_past_the_byte_scan() {
        assert_eq!(invalid_xml_char("plain <a>text</a>\t\r\n".as_bytes()), None);
        // characters encoded with 0xEF that XML allows (U+F000, U+FFFD) are walked and pass
        assert_eq!(invalid_xml_char("\u{F000} \u{FFFD}".as_bytes()), None);
        assert_eq!(
            invalid_xml_char("ab\u{1}".as_bytes()).as_deref(),
            Some("holds U+0001 at byte 2")
        );
        assert_eq!(
            invalid_xml_char("é\u{FFFE}".as_bytes()).as_deref(),
            Some("holds U+FFFE at byte 2")
        );
        assert_eq!(
            invalid_xml_char("x\u{FFFF}".as_bytes()).as_deref(),
            Some("holds U+FFFF at byte 1")
        );
        assert!(invalid_xml_char(b"a &#1; b").unwrap().contains("&#1;"));
        assert!(invalid_xml_char(b"\xff").unwrap().contains("not UTF-8"));
    }

    #[test]
    fn a_bad_byte_in_an_inherited_declaration_leaves_the_record_out_not_the_page() {
        let mut page =
            br#"<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:x="urn:b"#.to_vec();
        page.push(0x98);
        page.extend_from_slice(
            br#"d"><responseDate>2024-01-01T00:00:00Z</responseDate><ListRecords><record><header><identifier>i</identifier><datestamp>2024-02-01</datestamp></header><metadata><x:r>t</x:r></metadata></record><record><header><identifier>j</identifier><datestamp>2024-02-01</datestamp></header><metadata><r xmlns="urn:own">t</r></metadata></record></ListRecords></OAI-PMH>"#,
        );
        let Response::Records {
            records, problems, ..
        } = parse("u", &page).unwrap().response
        else {
            panic!()
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].message.contains("not UTF-8"), "{problems:?}");
        assert!(
            problems[0]
                .message
                .contains("namespace declarations it inherits"),
            "{problems:?}"
        );
        assert!(records.is_empty(), "{records:?}");
    }

    #[test]
    fn an_identifier_with_control_characters_leaves_its_record_out() {
        let page = "<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>2024-01-01T00:00:00Z</responseDate><ListRecords><record><header><identifier>oai:a\nb</identifier><datestamp>2024-02-01</datestamp></header><metadata><r xmlns=\"urn:own\">t</r></metadata></record></ListRecords></OAI-PMH>";
        let Response::Records {
            records, problems, ..
        } = parse("u", page.as_bytes()).unwrap().response
        else {
            panic!()
        };
        assert!(records.is_empty());
        assert!(
            problems[0].message.contains("control characters"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_empty_namespace_prefix_is_not_well_formed() {
        let page = b"<OAI-PMH xmlns:=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>2024-01-01T00:00:00Z</responseDate><ListRecords/></OAI-PMH>";
        assert!(
            matches!(parse("u", page), Err(Error::Xml { message, .. }) if message.contains("empty prefix"))
        );
    }

    #[test]
    fn spaces_beside_references_are_kept() {
        let page = b"<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>2024-01-01T00:00:00Z</responseDate>\n  <Identify>\n <repositoryName> Arts &amp; Sciences </repositoryName><baseURL>http://r/oai</baseURL><protocolVersion>2.0</protocolVersion><earliestDatestamp>2000-01-01</earliestDatestamp><deletedRecord>no</deletedRecord><granularity>YYYY-MM-DD</granularity></Identify></OAI-PMH>";
        let Response::Identify(i) = parse("u", page).unwrap().response else {
            panic!()
        };
        assert_eq!(i.repository_name, "Arts & Sciences");
    }

    #[test]
    fn a_byte_order_mark_does_not_shift_the_metadata() {
        let mut page = b"\xEF\xBB\xBF".to_vec();
        page.extend_from_slice(
            br#"<?xml version="1.0"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>2024-01-01T00:00:00Z</responseDate><GetRecord><record><header><identifier>i</identifier><datestamp>2024-02-01</datestamp></header><metadata><r xmlns="urn:own">t</r></metadata></record></GetRecord></OAI-PMH>"#,
        );
        let Response::Records { records, .. } = parse("u", &page).unwrap().response else {
            panic!()
        };
        assert_eq!(
            records[0].metadata.as_deref(),
            Some(&br#"<r xmlns="urn:own">t</r>"#[..])
        );
        let mut twice = b"\xEF\xBB\xBF".to_vec();
        twice.extend_from_slice(&page);
        assert!(matches!(parse("u", &twice), Err(Error::Xml { .. })));
    }
}
