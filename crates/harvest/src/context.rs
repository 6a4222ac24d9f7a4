//! What the harvest works with: the run-wide [`Ctx`] and one upstream's [`Harvest`], which
//! every step (`baseline.rs`, `incremental.rs`, `from_dump.rs`, `resource.rs`, `push.rs`)
//! extends with its own `impl Harvest` block.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rsagg_config::{DeadlinesConfig, FetchSection, UpstreamConfig};
use rsagg_fetch::{Access, Fetcher};
use rsagg_store::{Blobs, State};

use crate::Error;

/// A response body cut at the pass deadline ([`Harvest::cut_at_deadline`]).
pub(crate) type CutBody =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<bytes::Bytes, String>> + Send>>;

/// What a resource cut at the pass deadline failed at (its body was still downloading, or
/// its request not yet answered).
pub(crate) const CUT_AT_DEADLINE: &str = "cut at the pass deadline";

/// Shared by every upstream of a run.
pub struct Ctx {
    /// The HTTP client (the pipeline's `[fetch]` bounds).
    pub fetcher: Fetcher,
    /// Where copies go.
    pub blobs: Blobs,
    /// The collection's state, opened as the writer.
    pub state: Arc<State>,
    /// The pipeline's `[fetch]` settings.
    pub fetch: FetchSection,
    /// How far the run is (for a progress display).
    pub progress: Arc<crate::Progress>,
    /// `run --baseline`: every set is re-synced from its Resource List although it has a
    /// checkpoint, and every listed resource is fetched again (unconditionally, nothing
    /// skipped as unchanged), so stored bytes that went missing or bad are written again.
    pub baseline: bool,
    /// The pipeline's `[deadlines]` (each upstream's pass is bounded by `pass`).
    pub deadlines: DeadlinesConfig,
    /// When the run's harvest must be over (`[deadlines] run` of `run --once`): every pass
    /// ends by then at the latest.
    pub run_deadline: Option<tokio::time::Instant>,
    /// Memory for the URIs a baseline or re-sync has seen listed (`[store]
    /// listed_memory_bytes`, `listed_filter_bytes`; the rest on local disk).
    pub listed: crate::SeenLimits,
    /// What each OAI-PMH upstream's `Identify` said at its pass's discovery, so that the
    /// pass's sets do not ask it again (OAI-PMH 2.0 section 4.2: once per pass).
    pub identified: IdentifyCache,
}

/// The `Identify` answers of the OAI-PMH upstreams of a run, by upstream name: asked once
/// at each pass's discovery and reused by its sets, with the provider's clock moved on by
/// the time elapsed since (`Identify`'s `responseDate` is the pass's `until`).
#[derive(Default)]
pub struct IdentifyCache(
    Mutex<
        std::collections::HashMap<
            String,
            (
                rsagg_oai::Identify,
                rsagg_oai::Datestamp,
                std::time::Instant,
            ),
        >,
    >,
);

impl IdentifyCache {
    /// Records `upstream`'s answer, asked just now.
    pub(crate) fn put(
        &self,
        upstream: &str,
        identify: rsagg_oai::Identify,
        now: rsagg_oai::Datestamp,
    ) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(
                upstream.to_owned(),
                (identify, now, std::time::Instant::now()),
            );
        }
    }

    /// `upstream`'s answer, with its clock moved on to now.
    pub(crate) fn get(
        &self,
        upstream: &str,
    ) -> Option<(rsagg_oai::Identify, rsagg_oai::Datestamp)> {
        let m = self.0.lock().ok()?;
        let (identify, now, at) = m.get(upstream)?;
        let elapsed = i64::try_from(at.elapsed().as_secs()).unwrap_or(i64::MAX);
        Some((
            identify.clone(),
            rsagg_oai::Datestamp::from_unix(now.unix().saturating_add(elapsed)),
        ))
    }
}

/// One upstream's harvest; cheap to clone, so each resource's work can run as its own task
/// (on either core) rather than all inside the one task that drives the list.
#[derive(Clone)]
pub struct Harvest {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) up: Arc<UpstreamConfig>,
    pub(crate) access: Access,
    /// URIs of this upstream in quarantine (few): those quarantined when the run started,
    /// and those the run quarantines itself, so that a later verified copy of the same run
    /// (a change after a baseline) releases them too.
    pub(crate) quarantined: Arc<Mutex<HashSet<String>>>,
    /// When this pass must end (`[deadlines] pass`, or the run's deadline if sooner), and
    /// which of the two it is; `None` for push passes (bounded per resource).
    pub(crate) deadline: Option<(tokio::time::Instant, Arc<str>)>,
    /// Entries of this upstream's lists skipped for a URI over `[fetch] max_uri_bytes`
    /// (the reader passes over them; the report counts them as `skipped`).
    pub(crate) skipped: Arc<std::sync::atomic::AtomicU64>,
}

impl Harvest {
    /// A harvest of `up` with no pass deadline and no URI in quarantine yet: what the
    /// inspections (`audit`, `plan`) and the retry of quarantined resources read with, each
    /// bounded per request rather than per pass.
    pub(crate) fn unbounded(ctx: Arc<Ctx>, up: Arc<UpstreamConfig>, access: Access) -> Self {
        Harvest {
            ctx,
            up,
            access,
            quarantined: Arc::default(),
            deadline: None,
            skipped: Arc::default(),
        }
    }

    /// Notes that `uri` is being quarantined.
    pub(crate) fn note_quarantined(&self, uri: &str) {
        if let Ok(mut q) = self.quarantined.lock() {
            q.insert(uri.to_owned());
        }
    }

    /// Whether `uri` is in quarantine, taking it out of the set: the caller releases it
    /// with its commit.
    pub(crate) fn take_quarantined(&self, uri: &str) -> bool {
        self.quarantined.lock().is_ok_and(|mut q| q.remove(uri))
    }

    /// The error of a pass cut short by its deadline.
    pub(crate) fn deadline_error(&self) -> Error {
        Error::PassDeadline {
            upstream: self.up.name.clone(),
            deadline: self
                .deadline
                .as_ref()
                .map_or_else(String::new, |(_, what)| what.to_string()),
        }
    }

    /// True once the pass deadline passed.
    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline
            .as_ref()
            .is_some_and(|(at, _)| tokio::time::Instant::now() >= *at)
    }

    /// Resolves when the pass deadline passes (never without one).
    pub(crate) async fn deadline_passed(&self) {
        match &self.deadline {
            Some((at, _)) => tokio::time::sleep_until(*at).await,
            None => std::future::pending().await,
        }
    }

    /// `body`, ending with an error once the pass deadline passes: a transfer still in
    /// flight then is cut (its upload aborted by the store, the resource counted failed and
    /// fetched again by the next run) instead of running on to its own body deadline. A
    /// body dripping at a few bytes per second kept a `pass = "20s"` run going for 500 s
    /// and held back the publish of every other upstream.
    pub(crate) fn cut_at_deadline<S, E>(&self, body: S) -> CutBody
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin + 'static,
        E: std::fmt::Display,
    {
        use futures::StreamExt;
        let Some((at, what)) = self.deadline.clone() else {
            return Box::pin(body.map(|r| r.map_err(|e| e.to_string())));
        };
        Box::pin(futures::stream::unfold(Some(body), move |body| {
            let what = what.clone();
            async move {
                let mut body = body?;
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(at) => {
                        Some((Err(format!("{CUT_AT_DEADLINE} ({what})")), None))
                    }
                    chunk = body.next() => {
                        chunk.map(|c| (c.map_err(|e| e.to_string()), Some(body)))
                    }
                }
            }
        }))
    }

    /// `work`, unless the pass deadline passes first (then [`Error::PassDeadline`]; `work` is
    /// dropped, so only what commits by itself in order may be cut this way: reading
    /// documents, not applying changes).
    pub(crate) async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::select! {
            r = work => r,
            () = self.deadline_passed() => Err(self.deadline_error()),
        }
    }
}
