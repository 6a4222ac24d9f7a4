//! Reading upstream lists: one document, or an index and its parts, as a stream of entries.
//!
//! Documents are parsed while they download (never held whole); upstream documents are read
//! in lenient mode, and their problems are logged and counted, not fatal, unless the document
//! cannot be read at all.
//!
//! Archives of 0.9/1.0-era Sources (ResourceSync Archives, [`rsagg_model::Legacy`]) are
//! followed as their 1.1 equivalents: an archive of Change Lists (Change Dumps) as an index of
//! them, in `from` order; an archive of Resource Lists (Resource Dumps), which lists
//! snapshots over time rather than parts of one, by its newest snapshot alone (reading them
//! all would bring back resources deleted since).
//!
//! Dumps (spec 11.1, 13.1) are read by document ([`Docs::dump_documents`]): the dump, or the
//! parts of a Resource Dump Index or Change Dump Index one after the other, each part's
//! package entries held (at most [`MAX_DUMP_ENTRIES`]) while its packages are taken, and the
//! next part fetched only then, so a pass over a dump of any size holds one index and one
//! part of it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::Stream;

use rsagg_fetch::{Access, Fetcher, Request};
use rsagg_model::{Header, Legacy, Mode, Root, Severity, UrlEntry};
use rsagg_sitemap::{DocumentReader, ReadOptions};
use tokio::sync::mpsc;
use url::Url;

use crate::Error;

/// How many entries a list's reader may be ahead of their consumer ([`Docs::read_entries`]):
/// the bound on what a pass over a list holds of it.
pub(crate) const ENTRIES_AHEAD: usize = 1024;

/// The entries of a list, in document order, each with the URL of the document it is in
/// (the list, or the part of an index): the consumer's half of [`Docs::read_entries`].
#[derive(Debug)]
pub(crate) struct Entries(mpsc::Receiver<(Url, UrlEntry)>);

impl Stream for Entries {
    type Item = (Url, UrlEntry);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Documents one archive may list (its own entries, or those of its parts).
pub(crate) const MAX_ARCHIVE_ENTRIES: usize = 100_000;

/// Most entries read from one dump document or dump index (twice the spec's 50,000 per
/// document, spec 7): the bound on what a pass over a dump holds of it at once.
pub(crate) const MAX_DUMP_ENTRIES: usize = 100_000;

/// A document a dump is made of, in the order it is read ([`DumpDocuments`]).
#[derive(Debug)]
enum DumpDoc {
    /// Read already: its URL and its entries (the packages).
    Read(Url, Vec<UrlEntry>),
    /// Listed by an index, or by a legacy archive (then it may be an index itself), with its
    /// entry there; opened when its turn comes.
    Listed {
        url: Url,
        entry: Box<UrlEntry>,
        may_be_index: bool,
    },
}

/// The documents of packages a dump's URL leads to, read one after the other
/// ([`DumpDocuments::next`]): the dump itself, or the parts of its index (spec 11.1: a
/// Resource Dump Index; 13.1: a Change Dump Index) in `from` order (document order when
/// they have none), or what a legacy archive stands for.
#[derive(Debug)]
pub(crate) struct DumpDocuments {
    /// The header of the document at the dump's URL (an index's, when it is one; the newest
    /// snapshot's, for a legacy archive of snapshots).
    pub header: Header,
    queue: VecDeque<DumpDoc>,
}

impl DumpDocuments {
    /// The next document of packages: its URL (which its entries are resolved against) and
    /// its entries; `None` after the last. A part for which `skip` says so (from its entry
    /// in the index) is not fetched.
    pub async fn next(
        &mut self,
        docs: &Docs<'_>,
        skip: impl Fn(&UrlEntry) -> bool,
    ) -> Result<Option<(Url, Vec<UrlEntry>)>, Error> {
        while let Some(d) = self.queue.pop_front() {
            match d {
                DumpDoc::Read(url, entries) => return Ok(Some((url, entries))),
                DumpDoc::Listed {
                    url,
                    entry,
                    may_be_index,
                } => {
                    if skip(&entry) {
                        continue;
                    }
                    let doc = docs.open(&url).await?;
                    if archive_of(doc.header()).is_some() {
                        return Err(Error::Upstream {
                            url: url.to_string(),
                            section: "7",
                            message: "listed as a part of a dump but is an archive".into(),
                        });
                    }
                    for d in read_dump_doc(doc, may_be_index).await?.into_iter().rev() {
                        self.queue.push_front(d);
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Reads the open dump document `doc` whole: a `<urlset>` as its package entries, an index
/// (refused unless `may_be_index`: an index lists dumps, not indexes) as its parts, in
/// `from` order. More than [`MAX_DUMP_ENTRIES`] entries is an error of the document.
async fn read_dump_doc(mut doc: OpenDoc, may_be_index: bool) -> Result<Vec<DumpDoc>, Error> {
    let root = doc.header().root;
    let url = doc.url.clone();
    if root == Root::Sitemapindex && !may_be_index {
        return Err(Error::Upstream {
            url: url.to_string(),
            section: "11.1",
            message: "a part of a dump index must be a <urlset>, not another index".into(),
        });
    }
    let mut entries = Vec::new();
    while let Some(e) = doc.next().await? {
        if entries.len() == MAX_DUMP_ENTRIES {
            return Err(Error::Upstream {
                url: url.to_string(),
                section: "7",
                message: format!("more than {MAX_DUMP_ENTRIES} entries in one document"),
            });
        }
        entries.push(e);
    }
    if root == Root::Urlset {
        return Ok(vec![DumpDoc::Read(url, entries)]);
    }
    let mut parts = entries
        .into_iter()
        .map(|e| Ok((entry_url(&url, &e, "11.1", "part ")?, e)))
        .collect::<Result<Vec<_>, Error>>()?;
    by_from(&mut parts);
    Ok(parts
        .into_iter()
        .map(|(url, entry)| DumpDoc::Listed {
            url,
            entry: Box::new(entry),
            may_be_index: false,
        })
        .collect())
}

/// The archive capability of a document header, if it has one ([`Legacy::is_archive`]).
pub(crate) fn archive_of(h: &Header) -> Option<Legacy> {
    h.capability()
        .and_then(|c| c.legacy())
        .filter(|l| l.is_archive())
}

/// The newest snapshot an archive of Resource Lists or Dumps lists: the greatest `at`
/// (compared as instants), else `lastmod`, else the last listed.
pub(crate) fn newest(listed: &[(Url, UrlEntry)]) -> Option<&Url> {
    let instant = |e: &UrlEntry| e.md.as_ref().and_then(|m| m.at).or(e.lastmod);
    let mut best: Option<&(Url, UrlEntry)> = None;
    for item in listed {
        best = match (best, instant(&item.1)) {
            (None, _) => Some(item),
            (Some(b), Some(t)) => match instant(&b.1) {
                Some(bt) if t.cmp_instant(&bt).is_lt() => Some(b),
                _ => Some(item),
            },
            (Some(b), None) if instant(&b.1).is_some() => Some(b),
            (Some(_), None) => Some(item),
        };
    }
    best.map(|(u, _)| u)
}

/// Orders what an archive of changes lists by `from` (as instants; entries without keep
/// their place), as an index's parts are read.
pub(crate) fn by_from(listed: &mut [(Url, UrlEntry)]) {
    listed.sort_by(|a, b| {
        match (
            a.1.md.as_ref().and_then(|m| m.from),
            b.1.md.as_ref().and_then(|m| m.from),
        ) {
            (Some(x), Some(y)) => x.cmp_instant(&y),
            _ => std::cmp::Ordering::Equal,
        }
    });
}

/// What the list reader needs from the harvest.
pub(crate) struct Docs<'a> {
    pub fetcher: &'a Fetcher,
    pub access: &'a Access,
    pub max_bytes: u64,
    /// Longest URI of an entry (`[fetch] max_uri_bytes`); longer entries are skipped by the
    /// reader and counted in `skipped`.
    pub max_uri_bytes: usize,
    /// Entries skipped for an over-long URI, over every document read for the upstream.
    pub skipped: Arc<AtomicU64>,
    /// Counts the entries [`Docs::stream_entries`] hands on (the total of a progress
    /// display) and the lists it is still reading.
    pub progress: &'a crate::Progress,
}

/// An open upstream document.
pub(crate) struct OpenDoc {
    /// Its URL after redirects.
    pub url: Url,
    pub reader: DocumentReader,
    /// Entries of it skipped so far (already added to `skipped`).
    seen_skipped: u64,
    skipped: Arc<AtomicU64>,
}

/// The URL an entry's `<loc>` names, resolved against `base` (the document listing it); one
/// that is not a URL is an error of that document under spec `section`, naming the entry as
/// `what` ("part ", "package ", or "").
pub(crate) fn entry_url(
    base: &Url,
    e: &UrlEntry,
    section: &'static str,
    what: &str,
) -> Result<Url, Error> {
    base.join(e.loc.trim()).map_err(|err| Error::Upstream {
        url: base.to_string(),
        section,
        message: format!("{what}`{}` is not a URL: {err}", e.loc),
    })
}

impl OpenDoc {
    pub fn header(&self) -> &Header {
        self.reader.header()
    }

    /// The next entry, `None` at the end (then the document's problems are logged).
    pub async fn next(&mut self) -> Result<Option<UrlEntry>, Error> {
        let next = self.reader.next_entry().await;
        let skipped = self.reader.tally().skipped;
        if skipped > self.seen_skipped {
            self.skipped
                .fetch_add(skipped - self.seen_skipped, Ordering::Relaxed);
            self.seen_skipped = skipped;
        }
        match next {
            Ok(Some(e)) => Ok(Some(e)),
            Ok(None) => {
                self.log_problems();
                Ok(None)
            }
            Err(source) => Err(Error::Document {
                url: self.url.to_string(),
                source,
            }),
        }
    }

    fn log_problems(&mut self) {
        let tally = self.reader.tally();
        if tally.errors + tally.warnings == 0 {
            return;
        }
        for p in self.reader.take_problems().iter().take(5) {
            let level = matches!(p.severity, Severity::Error);
            if level {
                tracing::warn!(url = %self.url, line = p.line, column = p.column, section = %p.section, code = %p.code, "{}", p.message);
            } else {
                tracing::info!(url = %self.url, line = p.line, column = p.column, section = %p.section, code = %p.code, "{}", p.message);
            }
        }
        tracing::warn!(url = %self.url, errors = tally.errors, warnings = tally.warnings, "upstream document has problems (lenient mode: read anyway)");
    }
}

impl Docs<'_> {
    /// Fetches and opens `url` (gzip-compressed documents included).
    pub async fn open(&self, url: &Url) -> Result<OpenDoc, Error> {
        let req = Request {
            max_bytes: self.max_bytes,
            inflate_gzip: true,
            timeout: Some(self.fetcher.config().document_timeout),
            ..Request::default()
        };
        let fetched = self.fetcher.get(url, self.access, &req).await?;
        let final_url = fetched.url.clone();
        let opts = ReadOptions {
            mode: Mode::Lenient,
            max_bytes: self.max_bytes,
            max_uri_bytes: self.max_uri_bytes,
            ..ReadOptions::new(Mode::Lenient, final_url.to_string())
        };
        let reader = DocumentReader::open(fetched.body.into_async_read(), opts)
            .await
            .map_err(|source| Error::Document {
                url: final_url.to_string(),
                source,
            })?;
        Ok(OpenDoc {
            url: final_url,
            reader,
            seen_skipped: 0,
            skipped: self.skipped.clone(),
        })
    }

    /// The documents an archive lists, each with its entry: the archive's own entries, or
    /// when it is a `<sitemapindex>`, those of each archive part it lists (resolved against
    /// the document naming them).
    pub async fn archive_entries(&self, mut doc: OpenDoc) -> Result<Vec<(Url, UrlEntry)>, Error> {
        let mut out = Vec::new();
        let mut parts = Vec::new();
        let is_index = doc.header().root == Root::Sitemapindex;
        let base = doc.url.clone();
        while let Some(e) = doc.next().await? {
            let u = entry_url(&base, &e, "7", "")?;
            if is_index {
                parts.push(u);
            } else {
                out.push((u, e));
            }
            if out.len() + parts.len() > MAX_ARCHIVE_ENTRIES {
                break;
            }
        }
        for part in parts {
            let mut p = self.open(&part).await?;
            if p.header().root != Root::Urlset {
                return Err(Error::Upstream {
                    url: part.to_string(),
                    section: "7",
                    message: "a part of an archive index must be a <urlset>".into(),
                });
            }
            let base = p.url.clone();
            while let Some(e) = p.next().await? {
                if let Ok(u) = base.join(e.loc.trim()) {
                    out.push((u, e));
                }
                if out.len() > MAX_ARCHIVE_ENTRIES {
                    return Err(Error::Upstream {
                        url: doc.url.to_string(),
                        section: "7",
                        message: format!("more than {MAX_ARCHIVE_ENTRIES} documents archived"),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The newest snapshot an archive of snapshots lists (its `at`, else its `lastmod`),
    /// opened: what a legacy `*-archive` of Resource Lists or Resource Dumps stands for.
    async fn open_newest(
        &self,
        listed: &[(Url, UrlEntry)],
        archive: &Url,
        legacy: Legacy,
    ) -> Result<OpenDoc, Error> {
        let Some(latest) = newest(listed).cloned() else {
            return Err(Error::Upstream {
                url: archive.to_string(),
                section: "7",
                message: format!("the `{}` lists no document", legacy.as_str()),
            });
        };
        self.open_archived(&latest, archive).await
    }

    /// Opens a document an archive lists; it must be a list or an index, not another archive.
    async fn open_archived(&self, url: &Url, archive: &Url) -> Result<OpenDoc, Error> {
        let doc = self.open(url).await?;
        if archive_of(doc.header()).is_some() {
            return Err(Error::Upstream {
                url: url.to_string(),
                section: "7",
                message: format!("listed in the archive {archive} but is an archive itself"),
            });
        }
        Ok(doc)
    }

    /// The documents of packages the dump at `url` is made of (see [`DumpDocuments`]): the
    /// dump document or its index is read now, the parts of an index when their turn comes.
    /// A legacy archive (see the module documentation) is read as its 1.1 equivalent: an
    /// archive of Change Dumps as an index of them, an archive of Resource Dumps by its
    /// newest snapshot.
    pub async fn dump_documents(&self, url: &Url) -> Result<DumpDocuments, Error> {
        let doc = self.open(url).await?;
        let Some(legacy) = archive_of(doc.header()) else {
            let header = doc.header().clone();
            let queue = read_dump_doc(doc, true).await?.into();
            return Ok(DumpDocuments { header, queue });
        };
        let header = doc.header().clone();
        let archive = doc.url.clone();
        let mut listed = self.archive_entries(doc).await?;
        tracing::info!(url = %archive, documents = listed.len(), "{}", legacy.message());
        if legacy.is_snapshot_archive() {
            let doc = self.open_newest(&listed, &archive, legacy).await?;
            let header = doc.header().clone();
            let queue = read_dump_doc(doc, true).await?.into();
            return Ok(DumpDocuments { header, queue });
        }
        by_from(&mut listed);
        let queue = listed
            .into_iter()
            .map(|(url, entry)| DumpDoc::Listed {
                url,
                entry: Box::new(entry),
                may_be_index: true,
            })
            .collect();
        Ok(DumpDocuments { header, queue })
    }

    /// The list at `url` as two halves to run together (`futures::join!`): the reader, which
    /// resolves to the list's header once [`Docs::stream_entries`] has handed on every
    /// entry, and the [`Entries`] it hands them to, at most [`ENTRIES_AHEAD`] ahead of their
    /// consumer. Dropping the entries stops the reader (Ok): what every pass over a whole
    /// list (baseline, audit, dry run, quarantine retry) is built on.
    pub fn read_entries<'a>(
        &'a self,
        url: &'a Url,
    ) -> (impl Future<Output = Result<Header, Error>> + 'a, Entries) {
        let (tx, rx) = mpsc::channel(ENTRIES_AHEAD);
        (self.stream_entries(url, tx), Entries(rx))
    }

    /// Sends every entry of the list at `url` — or, when it is an index, of every part it
    /// lists, in order — into `tx`; returns the header of the document at `url`. Stops early
    /// (Ok) when the receiver is gone. A legacy archive (see the module documentation) is
    /// read as its 1.1 equivalent: for an archive of snapshots the header returned is the
    /// newest snapshot's (its `at` is what was read).
    pub async fn stream_entries(
        &self,
        url: &Url,
        tx: mpsc::Sender<(Url, UrlEntry)>,
    ) -> Result<Header, Error> {
        let _reading = self.progress.reading();
        let doc = self.open(url).await?;
        let Some(legacy) = archive_of(doc.header()) else {
            return self.stream_doc(doc, &tx).await;
        };
        let header = doc.header().clone();
        let archive = doc.url.clone();
        let mut listed = self.archive_entries(doc).await?;
        tracing::info!(url = %archive, documents = listed.len(), "{}", legacy.message());
        if legacy.is_snapshot_archive() {
            let doc = self.open_newest(&listed, &archive, legacy).await?;
            return self.stream_doc(doc, &tx).await;
        }
        by_from(&mut listed);
        for (u, _) in listed {
            if tx.is_closed() {
                break;
            }
            let doc = self.open_archived(&u, &archive).await?;
            self.stream_doc(doc, &tx).await?;
        }
        Ok(header)
    }

    /// [`Docs::stream_entries`] of a document already open (a list or an index).
    async fn stream_doc(
        &self,
        mut doc: OpenDoc,
        tx: &mpsc::Sender<(Url, UrlEntry)>,
    ) -> Result<Header, Error> {
        let header = doc.header().clone();
        match header.root {
            Root::Urlset => {
                while let Some(e) = doc.next().await? {
                    if tx.send((doc.url.clone(), e)).await.is_err() {
                        break;
                    }
                    self.progress.listed(1);
                }
            }
            Root::Sitemapindex => {
                // Parts are read one after the other; an index listing an index is refused
                // (spec 10.2/12.2: indexes list lists, not indexes).
                let index_url = doc.url.clone();
                while let Some(part) = doc.next().await? {
                    let part_url = entry_url(&index_url, &part, "10.2", "part ")?;
                    let mut p = self.open(&part_url).await?;
                    if p.header().root != Root::Urlset {
                        return Err(Error::Upstream {
                            url: part_url.to_string(),
                            section: "10.2",
                            message: "an index part must be a <urlset>, not another index".into(),
                        });
                    }
                    while let Some(e) = p.next().await? {
                        if tx.send((p.url.clone(), e)).await.is_err() {
                            return Ok(header);
                        }
                        self.progress.listed(1);
                    }
                }
            }
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::{Capability, Md, W3cDateTime};

    fn listed(loc: &str, at: Option<&str>, from: Option<&str>) -> (Url, UrlEntry) {
        let t = |s: &str| W3cDateTime::parse(s).unwrap().value;
        let url = Url::parse(&format!("http://e.org/{loc}")).unwrap();
        let e = UrlEntry {
            loc: url.to_string(),
            md: Some(Md {
                at: at.map(t),
                from: from.map(t),
                ..Md::default()
            }),
            ..UrlEntry::default()
        };
        (url, e)
    }

    #[test]
    fn the_newest_snapshot_is_chosen_by_instant() {
        // Zone-less, offset and UTC times compared as instants, not as text.
        let l = [
            listed("a.xml", Some("2018-11-06T17:41:16.901455"), None),
            listed("b.xml", Some("2018-11-07T18:00:00+01:00"), None),
            listed("c.xml", Some("2018-11-07T16:59:59Z"), None),
        ];
        assert_eq!(newest(&l).unwrap().as_str(), "http://e.org/b.xml");
        // Without times, the last listed.
        let l = [listed("a.xml", None, None), listed("b.xml", None, None)];
        assert_eq!(newest(&l).unwrap().as_str(), "http://e.org/b.xml");
        // A dated snapshot wins over undated ones.
        let l = [
            listed("a.xml", Some("2018-11-06T00:00:00Z"), None),
            listed("b.xml", None, None),
        ];
        assert_eq!(newest(&l).unwrap().as_str(), "http://e.org/a.xml");
        assert!(newest(&[]).is_none());
    }

    #[test]
    fn archived_change_lists_are_read_oldest_first() {
        let mut l = [
            listed("2.xml", None, Some("2018-11-07T00:00:00Z")),
            listed("1.xml", None, Some("2018-11-06T17:41:16.901455")),
            listed("3.xml", None, Some("2018-11-08T01:00:00+01:00")),
        ];
        by_from(&mut l);
        let order: Vec<&str> = l.iter().map(|(u, _)| u.path()).collect();
        assert_eq!(order, ["/1.xml", "/2.xml", "/3.xml"]);
    }

    #[test]
    fn only_archives_are_archives() {
        let h = |c: &str| Header::new(Root::Urlset, Capability::parse(c));
        assert_eq!(
            archive_of(&h("changelist-archive")),
            Some(Legacy::ChangeListArchive)
        );
        assert_eq!(
            archive_of(&h("resourcelist-archive")),
            Some(Legacy::ResourceListArchive)
        );
        assert_eq!(archive_of(&h("resourcesync")), None);
        assert_eq!(archive_of(&h("changelist")), None);
    }
}
