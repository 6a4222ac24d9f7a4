//! Reading upstream lists: one document, or an index and its parts, as a stream of entries.
//!
//! Documents are parsed while they download (never held whole); upstream documents are read
//! in lenient mode, and their problems are logged and counted, not fatal, unless the document
//! cannot be read at all.

use rsagg_fetch::{Access, Fetcher, Request};
use rsagg_model::{Header, Mode, Root, Severity, UrlEntry};
use rsagg_sitemap::{DocumentReader, ReadOptions};
use tokio::sync::mpsc;
use url::Url;

use crate::Error;

/// What the list reader needs from the harvest.
pub(crate) struct Docs<'a> {
    pub fetcher: &'a Fetcher,
    pub access: &'a Access,
    pub max_bytes: u64,
}

/// An open upstream document.
pub(crate) struct OpenDoc {
    /// Its URL after redirects.
    pub url: Url,
    pub reader: DocumentReader,
}

impl OpenDoc {
    pub fn header(&self) -> &Header {
        self.reader.header()
    }

    /// The next entry, `None` at the end (then the document's problems are logged).
    pub async fn next(&mut self) -> Result<Option<UrlEntry>, Error> {
        match self.reader.next_entry().await {
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
            ..Request::default()
        };
        let fetched = self.fetcher.get(url, self.access, &req).await?;
        let final_url = fetched.url.clone();
        let opts = ReadOptions {
            mode: Mode::Lenient,
            max_bytes: self.max_bytes,
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
        })
    }

    /// Sends every entry of the list at `url` — or, when it is an index, of every part it
    /// lists, in order — into `tx`; returns the header of the document at `url`. Stops early
    /// (Ok) when the receiver is gone.
    pub async fn stream_entries(
        &self,
        url: &Url,
        tx: mpsc::Sender<(Url, UrlEntry)>,
    ) -> Result<Header, Error> {
        let mut doc = self.open(url).await?;
        let header = doc.header().clone();
        match header.root {
            Root::Urlset => {
                while let Some(e) = doc.next().await? {
                    if tx.send((doc.url.clone(), e)).await.is_err() {
                        break;
                    }
                }
            }
            Root::Sitemapindex => {
                // Parts are read one after the other; an index listing an index is refused
                // (spec 10.2/12.2: indexes list lists, not indexes).
                let index_url = doc.url.clone();
                while let Some(part) = doc.next().await? {
                    let part_url =
                        index_url
                            .join(part.loc.trim())
                            .map_err(|e| Error::Upstream {
                                url: index_url.to_string(),
                                section: "10.2",
                                message: format!("part `{}` is not a URL: {e}", part.loc),
                            })?;
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
                    }
                }
            }
        }
        Ok(header)
    }
}
