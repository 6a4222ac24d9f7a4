//! The walk as a whole: the start document first (without it there is no Source to speak
//! of), then the queue of documents and packages it names, then the sample of resources
//! and the notification payloads given; the one module that uses all the others.

use rsagg_fetch::{Access, Fetcher};
use rsagg_model::DocumentKind;
use url::Url;

use crate::report::Collector;
use crate::walk::{Expect, Job, OpenError, Walker};
use crate::{Error, Options, Report};

/// Walks the Source at `start` (its Source Description, `/.well-known/resourcesync`, or a
/// Capability List; any other ResourceSync document is checked with what it names) and
/// returns every problem found. Errors only when nothing could be walked: bad options, a
/// start URL that is not http(s), a start document that cannot be fetched, a notification
/// file that cannot be read.
pub async fn validate_source(start: &str, opts: &Options) -> Result<Report, Error> {
    opts.check()?;
    let url = Url::parse(start)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| Error::Start {
            url: start.to_owned(),
        })?;
    let fetcher = Fetcher::new(opts.fetch.clone()).map_err(Error::Client)?;
    let access = Access {
        allow_private: opts.allow_private,
        ..Access::default()
    };
    let mut w = Walker::new(opts, fetcher, access);
    w.claim(&url);
    w.run(Job {
        url,
        referrer: None,
        entry: None,
        expect: Expect::Start,
    })
    .await?;
    crate::sample::check(&mut w).await;
    let out = std::mem::replace(&mut w.out, Collector::new(opts.mode, 0));
    let out = crate::notification::check(&opts.notifications, opts, out).await?;
    Ok(out.into_report(start))
}

impl Walker<'_> {
    /// The start, then every document it leads to, in the order named.
    pub(crate) async fn run(&mut self, start: Job) -> Result<(), Error> {
        // The start is fetched first: when it cannot be, there is no Source to speak of.
        match self.open(&start.url, false).await {
            Ok(o) => {
                self.read(start, o).await;
            }
            Err(OpenError::Fetch(e)) => {
                return Err(Error::StartFetch {
                    url: start.url.to_string(),
                    source: Box::new(e),
                });
            }
            Err(OpenError::Unreadable(url, p)) => {
                self.out.document(url.as_str(), vec![p], 1, 0);
                self.out.read(DocumentKind::Other.name(), 0, 0);
            }
        }
        while let Some(job) = self.next_job() {
            if self.stopped {
                break;
            }
            if self.remaining_bytes() == 0 {
                self.bound("max-bytes", &job.url);
                break;
            }
            if matches!(job.expect, Expect::Package { .. }) {
                crate::package::visit(self, job).await?;
            } else {
                self.visit(job).await;
            }
        }
        Ok(())
    }
}
