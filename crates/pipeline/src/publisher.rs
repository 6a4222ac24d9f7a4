//! The publish stage of a run: every document of the collection, in an order that keeps
//! each reader's view consistent.
//!
//! 1. side by side, as none depends on another: the Resource List (parts that changed, then
//!    its index); the Change Lists (new closed lists, the open list, the index, the open
//!    alias), then the Change Dumps for newly closed lists; the Resource Dump, when its
//!    interval has passed;
//! 2. the Capability List and the collection's Source Description, last, advertising only
//!    documents that exist (spec 9: a Destination starting from the Capability List never
//!    meets a capability whose document is not there yet);
//! 3. blob garbage collection, when its interval has passed (it reads what the Change Lists
//!    still name, so it runs after them).
//!
//! Change notifications (`notify.rs`) come after this stage, from what it published.
//!
//! A failing step is reported and the next ones still run: documents already out there stay
//! consistent on their own (each is swapped atomically), and the harvest is committed
//! whatever happens here.

use std::sync::Arc;
use std::time::Instant;

use futures::future::OptionFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_store::{State, StoreLocation};
use serde::Serialize;
use tokio_util::task::AbortOnDropHandle;

use crate::capability::Advertised;
use crate::changedump::ChangeDumpReport;
use crate::changelist::ChangeListReport;
use crate::gc::GcReport;
use crate::links::LinkPolicy;
use crate::resourcedump::ResourceDumpReport;
use crate::resourcelist::PART_TARGET;
use crate::{Error, Pipeline};

/// What the publish stage did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PublishReport {
    /// Parts of the Resource List rewritten.
    pub resource_list_parts: Option<usize>,
    /// Change Lists.
    pub change_lists: Option<ChangeListReport>,
    /// Change Dumps.
    pub change_dumps: Option<ChangeDumpReport>,
    /// The Resource Dump, when it was rebuilt by this run.
    pub resource_dump: Option<ResourceDumpReport>,
    /// Blob garbage collection, when it ran in this run.
    pub gc: Option<GcReport>,
    /// Steps that failed: `step: error`.
    pub errors: Vec<String>,
    /// Wall time of each step that ran (skipped steps are absent), so an operator can see
    /// where a publish spends its time (a Resource Dump rebuild or a garbage collection
    /// costs O(collection), the other steps O(changes)).
    pub seconds: StageSeconds,
}

/// Wall time of the publish steps, in seconds (`None`: the step did not run). The lists and
/// dumps are built side by side, so their times overlap and may add up to more than `total`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StageSeconds {
    /// The Resource List.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_list: Option<f64>,
    /// The Change Lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_lists: Option<f64>,
    /// The Change Dumps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_dumps: Option<f64>,
    /// The Resource Dump (also when it was not due: checking and sweeping take time too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_dump: Option<f64>,
    /// The Capability List and Source Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability_list: Option<f64>,
    /// Blob garbage collection (also when it was not due).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc: Option<f64>,
    /// The whole publish stage.
    pub total: f64,
}

impl StageSeconds {
    /// `  publish: 1.23 s (resource list 0.10, …)`, the steps that ran in order.
    fn summary(&self) -> String {
        let steps = [
            ("resource list", self.resource_list),
            ("change lists", self.change_lists),
            ("change dumps", self.change_dumps),
            ("resource dump", self.resource_dump),
            ("capability list", self.capability_list),
            ("gc", self.gc),
        ];
        let parts: Vec<String> = steps
            .iter()
            .filter_map(|(name, s)| s.map(|s| format!("{name} {s:.2}")))
            .collect();
        format!("  publish: {:.2} s ({})\n", self.total, parts.join(", "))
    }
}

impl PublishReport {
    /// Human summary lines (for `rsagg run`'s output).
    pub fn summary(&self) -> String {
        let mut s = self.seconds.summary();
        if let Some(n) = self.resource_list_parts {
            s.push_str(&format!("  resource list: {n} part(s) rewritten\n"));
        }
        if let Some(c) = &self.change_lists {
            s.push_str(&format!(
                "  change lists: {} open entries, {} closed now, {} closed kept, {} dropped by retention\n",
                c.open_entries, c.closed_now, c.closed_total, c.dropped
            ));
        }
        if let Some(c) = &self.change_dumps {
            s.push_str(&format!(
                "  change dumps: {} new package(s), {} kept, {} dropped\n",
                c.packages_now, c.packages_total, c.dropped
            ));
        }
        if let Some(d) = &self.resource_dump {
            s.push_str(&format!(
                "  resource dump rebuilt: {} package(s), {} resources, {} bytes\n",
                d.packages, d.resources, d.bytes
            ));
        }
        if let Some(g) = &self.gc {
            s.push_str(&format!(
                "  garbage collection: {} blob(s) scanned, {} deleted, {} bytes freed\n",
                g.scanned, g.deleted, g.bytes_freed
            ));
        }
        for e in &self.errors {
            s.push_str(&format!("  publishing FAILED: {e}\n"));
        }
        s
    }
}

/// Options of [`publish`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PublishOptions {
    /// Rebuild the Resource Dump and collect garbage whatever their intervals say.
    pub force: bool,
    /// Publish only the documents a change notification needs at once: the Resource List
    /// (through which copies are found), the Change Lists and the Capability List. The
    /// Change Dumps, the Resource Dump and garbage collection wait for the next full
    /// publish. `run --follow` uses this after push passes: those stages are heavy (a Change
    /// Dump packages every version a closed list names, seconds for 10,000 changes) and
    /// none of them is announced by a notification, so they must not hold up the next one;
    /// its poll passes publish in full.
    pub lists_only: bool,
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
                tracing::error!(step, error = %e, "publishing");
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
        branch("resource list", async move {
            crate::resourcelist::publish_with(
                &s.state,
                &s.store.objects,
                &s.base,
                &s.policy,
                PART_TARGET,
                s.cfg.grace,
            )
            .await
            .map(|parts| parts.len())
        })
    };
    // Change Dumps package what the Change Lists just closed: one after the other.
    let changes = async {
        let s = shared.clone();
        let lists = branch("change lists", async move {
            crate::changelist::publish(&s.state, &s.store.objects, &s.base, &s.policy, &s.cfg).await
        })
        .await;
        let dumps = (cfg.change_dumps && !opts.lists_only).then(|| {
            let s = shared.clone();
            branch("change dumps", async move {
                crate::changedump::publish(&s.state, &s.store, &s.base, &s.policy, &s.cfg).await
            })
        });
        (lists, OptionFuture::from(dumps).await)
    };
    let resource_dump = OptionFuture::from((cfg.resource_dump && !opts.lists_only).then(|| {
        let (s, force) = (shared.clone(), opts.force);
        branch("resource dump", async move {
            crate::resourcedump::publish(&s.state, &s.store, &s.base, &s.policy, &s.cfg, force)
                .await
        })
    }));
    let ((rl, rl_t), ((cl, cl_t), cd), rd) = futures::join!(resource_list, changes, resource_dump);
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
    cfg: crate::config::PublishConfig,
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
        resource_list: exists("resourcelist.xml").await?,
        resource_dump: exists("resourcedump.xml").await?,
        change_list: exists("changelist.xml").await?,
        change_dump: exists("changedump.xml").await?,
        // CN 5: topic URI and hub. The topic answers (with an empty body) before the first
        // payload, as CN 4.1 allows, so it is advertised from the first publish on.
        notification: p
            .config
            .notify
            .as_ref()
            .map(|n| (crate::notify::topic_url(p.base_url.as_str()), n.hub.clone())),
    })
}
