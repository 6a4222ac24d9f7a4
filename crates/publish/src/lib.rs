//! rsagg-publish: the writing side. The publish stage of a run: every document of the collection, in an order that keeps
//! each reader's view consistent.
//!
//! 1. side by side, as none depends on another: the Resource List (parts that changed, then
//!    its index; or, on `publish.resourcelist = "interval"`, a snapshot rebuilt when due and
//!    the pending parts in between); the Change Lists (new closed lists, the open list, the index, the open
//!    alias), then the Change Dumps for newly closed lists; the Resource Dump, when its
//!    interval has passed (the first Change Dumps hear from it which changes it holds, and
//!    leave a baseline to it);
//! 2. the Capability List and the collection's Source Description, last, advertising only
//!    documents that exist (spec 9: a Destination starting from the Capability List never
//!    meets a capability whose document is not there yet);
//! 3. blob garbage collection, when its interval has passed (it reads what the Change Lists
//!    still name, so it runs after them).
//!
//! Change notifications (`rsagg-notify`) come after this stage, from what it published; the
//! runner (`rsagg-pipeline`) sequences the two.
//!
//! A failing step is reported and the next ones still run: documents already out there stay
//! consistent on their own (each is swapped atomically), and the harvest is committed
//! whatever happens here.

//!
//! # Layout
//!
//! - `lib.rs`: [`publish`], the stage: the steps below in a reader-safe order, each timed.
//! - `entry.rs`: how a copy or a change is described in rsagg's own documents (spec 14.8).
//! - `links.rs`: provenance (`via`) and the inherited-link policy of republished entries.
//! - `resourcelist.rs`: the Resource List (or index), part by part (hash-slot ranges), only
//!   the parts that changed.
//! - `changelist.rs`: Change Lists from the change log: one open list, immutable closed ones,
//!   the index, the `changelist-open.xml` alias, retention.
//! - `package.rs`, `resourcedump.rs`, `changedump.rs`: dump packages built from stored blobs
//!   (a `file://` store's read as files on one thread, others through object_store); the
//!   Resource Dump on its interval, a Change Dump per closed Change List; `previous.rs`:
//!   the previous Resource Dump's packages, which a rebuild copies unchanged bitstreams from.
//! - `capability.rs`: writing the Capability List and Source Description (rendered by
//!   `rsagg-layout`), last.
//! - `gc.rs`: blob garbage collection with a grace period.
//!
//! Object names and the metadata kept beside the documents are `rsagg-layout`'s.

pub mod capability;
pub mod changedump;
pub mod changelist;
pub mod entry;
pub mod gc;
pub mod links;
mod package;
mod previous;
pub mod resourcedump;
pub mod resourcelist;

/// Errors of the publish stage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// A dump package could not be written.
    #[error(transparent)]
    Dump(#[from] rsagg_dump::Error),
    /// Local I/O (temporary files, the package writer's thread) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl rsagg_store::StoreFailure for Error {
    fn store_error(&self) -> Option<&rsagg_store::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

use std::sync::Arc;
use std::time::Instant;

use futures::future::OptionFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_store::{State, StoreLocation};
use tokio_util::task::AbortOnDropHandle;

use rsagg_config::Pipeline;
use rsagg_layout::capability::Advertised;
use rsagg_layout::paths::{CHANGE_DUMP, CHANGE_LIST, RESOURCE_DUMP, RESOURCE_LIST, topic_url};
use rsagg_layout::report::{PublishReport, StageSeconds};

use crate::links::LinkPolicy;

/// Options of [`publish`].
#[derive(Debug, Clone, Copy)]
pub struct PublishOptions {
    /// Rebuild the Resource Dump (and, under `publish.resourcelist = "interval"`, the
    /// Resource List's snapshot) and collect garbage whatever their intervals say.
    pub force: bool,
    /// Publish only the documents a change notification needs at once: the Resource List
    /// (through which copies are found), the Change Lists and the Capability List. The
    /// Change Dumps, the Resource Dump and garbage collection wait for the next full
    /// publish. `run --follow` uses this after push passes: those stages are heavy (a Change
    /// Dump packages every version a closed list names, seconds for 10,000 changes) and
    /// none of them is announced by a notification, so they must not hold up the next one;
    /// its poll passes publish in full.
    pub lists_only: bool,
    /// Write the state's memtable to the store as soon as the Resource List, the Change
    /// Lists (and Change Dumps) and the Resource Dump's listing no longer read it, while the
    /// dump's writer finishes its package: the flush the state's `close` would do after the
    /// publish then overlaps it. For `run --once`, which closes the state right after;
    /// `run --follow` keeps the state open and leaves flushing to slatedb.
    pub flush_state: bool,
    /// Most packages one Resource Dump or Change Dump document names: a dump with more is
    /// published as a Resource Dump Index or Change Dump Index (spec 11.1, 13.1) of parts of
    /// at most this many. The spec's limit by default (spec 7: 50,000 entries a document,
    /// [`entry::MAX_DOCUMENT_ENTRIES`]); clamped to 1..=50,000, and lowered only by tests,
    /// which reach an index with a handful of packages.
    pub document_entries: u64,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            force: false,
            lists_only: false,
            flush_state: false,
            document_entries: entry::MAX_DOCUMENT_ENTRIES,
        }
    }
}

/// Publishes every document of `p`'s collection from `state` into `store`.
pub async fn publish(
    state: &Arc<State>,
    store: &StoreLocation,
    p: &Pipeline,
    opts: PublishOptions,
) -> PublishReport {
    let objects = &store.objects;
    let cfg = &p.config.publish;
    let base = p.base_url.as_str();
    let policy = LinkPolicy::new(&cfg.links);
    let mut report = PublishReport::default();
    let started = Instant::now();
    let mut times = StageSeconds::default();
    let mut step = Instant::now();
    // The time since the previous call (each step's own wall time).
    let mut lap = move || {
        let now = Instant::now();
        let s = now.duration_since(step).as_secs_f64();
        step = now;
        Some(s)
    };
    fn note<T>(errors: &mut Vec<String>, step: &str, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(step, error = %rsagg_model::ErrorChain(&e), "publishing");
                errors.push(format!("{step}: {e}"));
                None
            }
        }
    }
    // The Resource List, the Change Lists (then their dumps) and the Resource Dump are
    // independent of each other: built in parallel, as tasks of their own (in one task they
    // would only take turns on one thread, and each reads every record of the collection),
    // while the ordering readers rely on is kept: documents before the Capability List that
    // advertises them, garbage collection after the Change Lists. Dropping this future
    // (shutdown) aborts them, as it would have stopped them in one task.
    // What every task reads, owned (a task of its own outlives no borrow).
    let shared = Arc::new(Shared {
        state: state.clone(),
        store: store.clone(),
        base: base.to_owned(),
        policy: policy.clone(),
        cfg: cfg.clone(),
    });
    let resource_list = {
        let s = shared.clone();
        let list = crate::resourcelist::ListOptions::of(cfg, opts.force);
        branch("resource list", async move {
            crate::resourcelist::publish_list(&s.state, &s.store.objects, &s.base, &s.policy, list)
                .await
                .map(|parts| parts.len())
        })
    };
    // Dropped by the Resource Dump once its listing ended (or at once when it is not built).
    let (dump_listed, dump_listing) = tokio::sync::oneshot::channel::<()>();
    // What a Resource Dump built now holds, which the Change Dumps may leave to it.
    let (holds, dump_holds) = tokio::sync::oneshot::channel::<u64>();
    // Change Dumps package what the Change Lists just closed: one after the other.
    let changes = async {
        let s = shared.clone();
        let lists = branch("change lists", async move {
            crate::changelist::publish(&s.state, &s.store.objects, &s.base, &s.policy, &s.cfg).await
        })
        .await;
        let dumps = (cfg.change_dumps && !opts.lists_only).then(|| {
            let (s, per_document) = (shared.clone(), opts.document_entries);
            branch("change dumps", async move {
                crate::changedump::publish(
                    &s.state,
                    &s.store,
                    &s.base,
                    &s.policy,
                    &s.cfg,
                    per_document,
                    dump_holds,
                )
                .await
            })
        });
        (lists, OptionFuture::from(dumps).await)
    };
    let resource_dump = OptionFuture::from((cfg.resource_dump && !opts.lists_only).then(|| {
        let s = shared.clone();
        let dump = crate::resourcedump::DumpOptions {
            force: opts.force,
            document_entries: opts.document_entries,
        };
        branch("resource dump", async move {
            crate::resourcedump::publish(
                &s.state,
                &s.store,
                &s.base,
                &s.policy,
                &s.cfg,
                dump,
                crate::resourcedump::Signals {
                    listed: dump_listed,
                    holds,
                },
            )
            .await
        })
    }));
    // The lists, then (when asked) the state's flush once nothing of this step reads it.
    let lists = async {
        let lists = futures::join!(resource_list, changes);
        let flushing = opts.flush_state.then(|| {
            let state = state.clone();
            AbortOnDropHandle::new(tokio::spawn(async move {
                // Err: the sender was dropped, which is the signal too.
                let _ = dump_listing.await;
                state.flush_memtable().await
            }))
        });
        (lists, flushing)
    };
    let ((((rl, rl_t), ((cl, cl_t), cd)), flushing), rd) = futures::join!(lists, resource_dump);
    if let Some(flushing) = flushing {
        // Not an error of the publish: the state's `close` flushes again.
        match flushing.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %rsagg_model::ErrorChain(&e),
                "flushing the state after publishing (its close retries)"
            ),
            Err(e) => tracing::warn!(error = %e, "flushing the state after publishing"),
        }
    }
    let e = &mut report.errors;
    report.resource_list_parts = note(e, "resource list", rl);
    times.resource_list = rl_t;
    report.change_lists = note(e, "change lists", cl);
    times.change_lists = cl_t;
    if let Some((r, t)) = cd {
        report.change_dumps = note(e, "change dumps", r);
        times.change_dumps = t;
    }
    if let Some((r, t)) = rd {
        report.resource_dump = note(e, "resource dump", r).flatten();
        times.resource_dump = t;
    }
    lap();
    let advertised = match advertised(objects, p).await {
        Ok(a) => Some(a),
        Err(err) => {
            e.push(format!("capability list: {err}"));
            None
        }
    };
    if let Some(a) = advertised {
        note(
            e,
            "capability list",
            crate::capability::publish(objects, base, &a).await,
        );
    }
    times.capability_list = lap();
    if !opts.lists_only {
        report.gc = note(
            e,
            "garbage collection",
            crate::gc::collect(state, objects, cfg, opts.force).await,
        )
        .flatten();
        times.gc = lap();
    }
    times.total = started.elapsed().as_secs_f64();
    report.seconds = times;
    report
}

/// What the publish tasks share.
struct Shared {
    state: Arc<State>,
    store: StoreLocation,
    base: String,
    policy: LinkPolicy,
    cfg: rsagg_config::PublishConfig,
}

/// `work` as a task of its own, joined with how long it took (wall time). Dropping the
/// returned future aborts the task; a task that panicked is an error of `step`.
fn branch<T: Send + 'static>(
    step: &'static str,
    work: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> impl Future<Output = (Result<T, Error>, Option<f64>)> {
    let t = Instant::now();
    let task = AbortOnDropHandle::new(tokio::spawn(work));
    async move {
        let r = task.await.unwrap_or_else(|e| {
            Err(Error::Io {
                what: format!("publishing the {step}"),
                source: std::io::Error::other(e),
            })
        });
        (r, Some(t.elapsed().as_secs_f64()))
    }
}

/// The documents that exist now (a step that never succeeded has none to advertise), and
/// the change-notification channel when `[notify]` is configured.
async fn advertised(objects: &Arc<dyn ObjectStore>, p: &Pipeline) -> Result<Advertised, Error> {
    let exists = |name: &'static str| async move {
        match objects.head(&Path::from(name)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(rsagg_store::Error::object_store(name, e)),
        }
    };
    Ok(Advertised {
        resource_list: exists(RESOURCE_LIST).await?,
        resource_dump: exists(RESOURCE_DUMP).await?,
        change_list: exists(CHANGE_LIST).await?,
        change_dump: exists(CHANGE_DUMP).await?,
        // CN 5: topic URI and hub. The topic answers (with an empty body) before the first
        // payload, as CN 4.1 allows, so it is advertised from the first publish on.
        notification: p
            .config
            .notify
            .as_ref()
            .map(|n| (topic_url(p.base_url.as_str()), n.hub.to_string())),
        describedby: p
            .config
            .collection
            .describedby
            .as_ref()
            .map(|u| u.to_string()),
    })
}
