//! The publish stage of a run: every document of the collection, in an order that keeps
//! each reader's view consistent.
//!
//! 1. the Resource List (parts that changed, then its index);
//! 2. the Change Lists (new closed lists, the open list, the index, the open alias);
//! 3. the Change Dumps for newly closed lists;
//! 4. the Resource Dump, when its interval has passed;
//! 5. the Capability List and the collection's Source Description, last, advertising only
//!    documents that exist (spec 9: a Destination starting from the Capability List never
//!    meets a capability whose document is not there yet);
//! 6. blob garbage collection, when its interval has passed (it reads what the Change Lists
//!    still name, so it runs after them).
//!
//! Change notifications (`notify.rs`) come after this stage, from what it published.
//!
//! A failing step is reported and the next ones still run: documents already out there stay
//! consistent on their own (each is swapped atomically), and the harvest is committed
//! whatever happens here.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_store::State;
use serde::Serialize;

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
}

impl PublishReport {
    /// Human summary lines (for `rsagg run`'s output).
    pub fn summary(&self) -> String {
        let mut s = String::new();
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

/// Publishes every document of `p`'s collection from `state` into `objects`.
pub async fn publish(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    p: &Pipeline,
    opts: PublishOptions,
) -> PublishReport {
    let cfg = &p.config.publish;
    let base = p.base_url.as_str();
    let policy = LinkPolicy::new(&cfg.links);
    let mut report = PublishReport::default();
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
    let e = &mut report.errors;
    let t = std::time::Instant::now();
    report.resource_list_parts = note(
        e,
        "resource list",
        crate::resourcelist::publish_with(state, objects, base, &policy, PART_TARGET, cfg.grace)
            .await
            .map(|parts| parts.len()),
    );
    let resource_list_ms = t.elapsed().as_millis() as u64;
    let t = std::time::Instant::now();
    report.change_lists = note(
        e,
        "change lists",
        crate::changelist::publish(state, objects, base, &policy, cfg).await,
    );
    let change_lists_ms = t.elapsed().as_millis() as u64;
    let t = std::time::Instant::now();
    if cfg.change_dumps && !opts.lists_only {
        report.change_dumps = note(
            e,
            "change dumps",
            crate::changedump::publish(state, objects, base, &policy, cfg).await,
        );
    }
    if !opts.lists_only {
        report.resource_dump = note(
            e,
            "resource dump",
            crate::resourcedump::publish(state, objects, base, &policy, cfg, opts.force).await,
        )
        .flatten();
    }
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
    let rest_ms = t.elapsed().as_millis() as u64;
    let t = std::time::Instant::now();
    if !opts.lists_only {
        report.gc = note(
            e,
            "garbage collection",
            crate::gc::collect(state, objects, cfg, opts.force).await,
        )
        .flatten();
    }
    // Where a publish spends its time (the follower publishes after every push pass).
    tracing::debug!(
        resource_list_ms,
        change_lists_ms,
        dumps_and_capability_list_ms = rest_ms,
        gc_ms = t.elapsed().as_millis() as u64,
        "published"
    );
    report
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
