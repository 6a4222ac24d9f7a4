//! What a run did, as `rsagg run` prints it and as the stats object ([`RunStats`] at
//! [`crate::paths::STATS_OBJECT`]) keeps it for `rsagg serve` (`/metrics`, `/status`).
//!
//! One set of types for both sides: the pipeline writes them, the server reads them. Every
//! struct reads with `#[serde(default)]`, so an object written by an older or newer rsagg
//! still shows what it has (a field it lacks reads as its default, one it does not know is
//! ignored).

use bytesize::ByteSize;
use rsagg_model::{W3cDateTime, bounded};
use rsagg_store::{QuarantineRecord, StoreRequests};
use serde::{Deserialize, Serialize};

/// The stats object of a run ([`crate::paths::STATS_OBJECT`]): the run report, when it
/// ended, and the resources in quarantine (with upstream URI, expected and received), so the
/// status page can show them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunStats {
    /// When the run ended.
    pub finished: Option<W3cDateTime>,
    /// What it did.
    pub report: RunReport,
    /// Resources in quarantine (the first ones, see `quarantine_truncated`).
    pub quarantine: Vec<QuarantineRecord>,
    /// True when more resources are in quarantine than `quarantine` lists.
    pub quarantine_truncated: bool,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunReport {
    /// Collection name.
    pub collection: String,
    /// Per upstream.
    pub upstreams: Vec<UpstreamReport>,
    /// What the publish stage did (absent when the run was fenced out before it).
    pub publish: Option<PublishReport>,
    /// What the notification step did (absent without `[notify]`, or when the run was
    /// fenced out before it).
    pub notify: Option<NotifyReport>,
    /// Wall time.
    pub seconds: f64,
    /// Push intake counters (`run --follow --listen` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushStats>,
    /// Object-store requests by kind and bytes moved, since the store was opened (the whole
    /// run for `run --once`; the process's life for `run --follow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreRequests>,
}

impl RunReport {
    /// Exit status for a scheduler: 0 all went well, 1 some upstream, publish step or
    /// notification delivery failed (the rest was done and committed), per the contract of
    /// `rsagg run`.
    pub fn exit_code(&self, fail_on_quarantine: bool) -> i32 {
        let failed = self
            .upstreams
            .iter()
            .any(|u| u.verdict == Verdict::Failed || (fail_on_quarantine && u.quarantined > 0));
        let publish_failed = self.publish.as_ref().is_some_and(|p| !p.errors.is_empty());
        let notify_failed = self.notify.as_ref().is_some_and(NotifyReport::failed);
        i32::from(failed || publish_failed || notify_failed)
    }

    /// True when the pass did something worth a summary in `run --follow`: a resource
    /// created, updated, deleted, quarantined, gone or failed, a failed upstream,
    /// a publish error, a rebuilt dump, a closed Change List, a garbage collection that freed
    /// something, or notifications prepared, delivered or failing. An idle poll (everything
    /// unchanged) is not: its report still goes to the stats object. Nor is a re-sync that
    /// changed nothing: an upstream without a Change List is re-synced at every poll, and a
    /// re-sync after a gap is logged as a warning anyway.
    pub fn eventful(&self) -> bool {
        let upstreams = self.upstreams.iter().any(|u| {
            u.created + u.updated + u.deleted + u.quarantined + u.gone + u.failed > 0 || !u.ok()
        });
        let publish = self.publish.as_ref().is_some_and(|p| {
            !p.errors.is_empty()
                || p.resource_dump.is_some()
                || p.change_lists
                    .as_ref()
                    .is_some_and(|c| c.closed_now > 0 || c.dropped > 0)
                || p.change_dumps
                    .as_ref()
                    .is_some_and(|c| c.packages_now > 0 || c.dropped > 0)
                || p.gc.as_ref().is_some_and(|g| g.deleted > 0)
        });
        let notify = self.notify.as_ref().is_some_and(|n| {
            n.failed()
                || n.prepared.as_ref().is_some_and(|p| p.payloads > 0)
                || n.delivery.delivered > 0
                || n.delivery.failures > 0
        });
        upstreams || publish || notify
    }

    /// Human summary, one line per upstream.
    pub fn summary(&self) -> String {
        let mut s = format!("collection {} ({:.1} s)\n", self.collection, self.seconds);
        if let Some(p) = &self.publish {
            s.push_str(&p.summary());
        }
        if let Some(n) = &self.notify {
            s.push_str(&n.summary());
        }
        if let Some(r) = &self.store {
            s.push_str(&format!(
                "  store: {} request(s) (GET {}, PUT {}, LIST {}, DELETE {}, HEAD {}, COPY {}), {} read, {} written\n",
                r.total(),
                r.get,
                r.put,
                r.list,
                r.delete,
                r.head,
                r.copy,
                ByteSize(r.bytes_read),
                ByteSize(r.bytes_written)
            ));
        }
        if let Some(p) = &self.push {
            s.push_str(&format!(
                "  push: {} subscription(s), {} received, {} applied, dropped {} (signature) {} (unknown) {} (invalid), {} busy, {} gap(s) recovered, latency max {} ms\n",
                p.subscriptions,
                p.received,
                p.applied,
                p.dropped_signature,
                p.dropped_unknown,
                p.dropped_invalid,
                p.busy,
                p.gaps_recovered,
                p.max_latency_ms
            ));
        }
        for u in &self.upstreams {
            s.push_str(&format!(
                "  {:<16} {:<6} created {} updated {} deleted {} unchanged {} replayed {} quarantined {} gone {} failed {}{}{}{}\n",
                u.name,
                match u.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Failed => "FAILED",
                },
                u.created,
                u.updated,
                u.deleted,
                u.unchanged,
                u.replayed,
                u.quarantined,
                u.gone,
                u.failed,
                if u.mirrored > 0 {
                    format!(" mirrored {}", u.mirrored)
                } else {
                    String::new()
                },
                if u.skipped > 0 {
                    format!(" skipped {}", u.skipped)
                } else {
                    String::new()
                },
                u.route.as_ref().map(|r| format!(" (via {r})")).unwrap_or_default(),
            ));
            for r in &u.resyncs {
                s.push_str(&format!("    re-synced: {r}\n"));
            }
            if let Some(e) = &u.error {
                s.push_str(&format!("    error: {e}\n"));
            }
        }
        s
    }
}

/// What the publish stage did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
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
                "  resource dump rebuilt: {} package(s), {} resources, {}",
                d.packages,
                d.resources,
                ByteSize(d.bytes)
            ));
            if d.copied > 0 {
                s.push_str(&format!(", {} copied from the previous dump", d.copied));
            }
            if d.unusable > 0 {
                s.push_str(&format!(
                    " ({} previous package(s) unusable, read from the blobs)",
                    d.unusable
                ));
            }
            s.push('\n');
        }
        if let Some(g) = &self.gc {
            s.push_str(&format!(
                "  garbage collection: {} blob(s) scanned, {} deleted, {} freed\n",
                g.scanned,
                g.deleted,
                ByteSize(g.bytes_freed)
            ));
        }
        for e in &self.errors {
            s.push_str(&format!("  publishing FAILED: {e}\n"));
        }
        s
    }
}

/// How an upstream's run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Everything was harvested and committed.
    #[default]
    Ok,
    /// Something failed; what was done before is committed and the rest is retried next run.
    Failed,
}

/// How far an OAI-PMH pass has listed (`UpstreamReport::listing`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Listing {
    /// Records listed (stored, unchanged, deleted or left out) in the windows of the pass.
    pub done: u64,
    /// What the provider's `completeListSize`s say the windows begun hold, when it sends
    /// them; windows not begun are not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Date windows done, of all.
    pub windows_done: u64,
    /// Date windows in the pass.
    pub windows: u64,
}

/// What happened to one upstream in a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamReport {
    /// Upstream name.
    pub name: String,
    /// Ok or failed.
    pub verdict: Verdict,
    /// How the Capability Lists were found.
    pub route: Option<String>,
    /// Sets of resources (Capability Lists) harvested.
    pub sets: usize,
    /// Resources created in rsagg's copy.
    pub created: u64,
    /// Resources updated.
    pub updated: u64,
    /// Resources deleted (marked; history kept).
    pub deleted: u64,
    /// Resources found unchanged (skipped or identical bytes).
    pub unchanged: u64,
    /// Upstream changes already processed (replays, overlaps) that were dropped.
    pub replayed: u64,
    /// Resources quarantined (persistent, unexplained mismatch).
    pub quarantined: u64,
    /// Listed resources the upstream no longer has (404/410), skipped.
    pub gone: u64,
    /// Changes superseded by a later change of the same resource in the same list.
    pub superseded: u64,
    /// Resources that could not be fetched.
    pub failed: u64,
    /// Of the resources stored or found unchanged, those whose bytes came from a mirror (an
    /// `rs:ln rel="duplicate"` of their entry, spec 14.2) because the upstream's own URI
    /// failed; verified against the entry's hash and length like any copy. Not an outcome
    /// of its own: each is also counted as created, updated or unchanged.
    pub mirrored: u64,
    /// Entries of the upstream's lists passed over unread: a URI (`<loc>`, `<rs:ln href>`)
    /// longer than `[fetch] max_uri_bytes` (each logged with an excerpt, never whole).
    pub skipped: u64,
    /// OAI-PMH: lists (date windows) that ended with fewer records than the provider's
    /// `completeListSize` announced (OAI-PMH 2.0 section 3.5), each also a warning: records
    /// may be missing from what the provider lists.
    pub incomplete_lists: u64,
    /// The provider answered `Retry-After` beyond `[fetch] retry_after_max` (429/503): the
    /// upstream is parked, asked nothing before this time (this run went on with the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_until: Option<W3cDateTime>,
    /// OAI-PMH: records of the pass in progress listed so far, and of how many
    /// (`completeListSize` of the windows begun, when the provider sends it): for progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing: Option<Listing>,
    /// Why the upstream was re-synced from its Resource List, if it was.
    pub resyncs: Vec<String>,
    /// Warnings (upstream quirks, accepted mismatches).
    pub warnings: Vec<String>,
    /// The first error, when the verdict is failed.
    pub error: Option<String>,
    /// The upstream's checkpoint after the run: the last upstream instant processed (the
    /// oldest among its sets; `None` while some set has none yet). `serve` derives the
    /// upstream's lag from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<W3cDateTime>,
    /// Another writer of the same state fenced this run out (exit code 3).
    #[serde(skip)]
    pub fenced: bool,
}

impl UpstreamReport {
    /// A report of upstream `name` with nothing done yet.
    pub fn new(name: &str) -> Self {
        UpstreamReport {
            name: name.to_owned(),
            verdict: Verdict::Ok,
            route: None,
            sets: 0,
            created: 0,
            updated: 0,
            deleted: 0,
            unchanged: 0,
            replayed: 0,
            quarantined: 0,
            gone: 0,
            superseded: 0,
            failed: 0,
            mirrored: 0,
            skipped: 0,
            incomplete_lists: 0,
            parked_until: None,
            listing: None,
            resyncs: Vec::new(),
            warnings: Vec::new(),
            error: None,
            checkpoint: None,
            fenced: false,
        }
    }

    /// Logs a warning and keeps it (the first 100). Like every message of the report, it is
    /// redacted and bounded ([`rsagg_model::bounded`]): it may quote upstream input or a
    /// configured URL with credentials.
    pub fn warn(&mut self, message: String) {
        let message = bounded(&message);
        tracing::warn!(upstream = %self.name, "{message}");
        self.keep_warning(message.into_owned());
    }

    /// Logs a warning about one resource or document, with `upstream`, `uri` and `error` as fields of the
    /// line (log collectors filter on them) and `what` as its message; keeps
    /// `{uri}: {what} ({error})` among the warnings.
    pub fn warn_at(&mut self, uri: &str, what: &str, error: &str) {
        tracing::warn!(upstream = %self.name, uri = %bounded(uri), error = %bounded(error), "{what}");
        self.keep_warning(bounded(&resource_message(uri, what, error)).into_owned());
    }

    fn keep_warning(&mut self, message: String) {
        if self.warnings.len() < 100 {
            self.warnings.push(message);
        }
    }

    /// The run's counters by outcome, in a fixed order (metric label values and table
    /// columns).
    pub fn outcomes(&self) -> [(&'static str, u64); 9] {
        [
            ("created", self.created),
            ("updated", self.updated),
            ("deleted", self.deleted),
            ("unchanged", self.unchanged),
            ("replayed", self.replayed),
            ("superseded", self.superseded),
            ("quarantined", self.quarantined),
            ("gone", self.gone),
            ("failed", self.failed),
        ]
    }

    /// The verdict is ok.
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Ok
    }

    /// Logs an error, marks the upstream failed and keeps the first error.
    pub fn fail(&mut self, message: String) {
        let message = bounded(&message);
        tracing::error!(upstream = %self.name, "{message}");
        self.failed_with(message.into_owned());
    }

    /// [`Self::fail`] for one resource or document: `upstream`, `uri` (when known) and `error` are fields
    /// of the line, `what` its message; the error kept reads `{uri}: {what} ({error})`.
    pub fn fail_at(&mut self, uri: Option<&str>, what: &str, error: &str) {
        tracing::error!(
            upstream = %self.name,
            uri = uri.map(|u| tracing::field::display(bounded(u))),
            error = %bounded(error),
            "{what}"
        );
        let message = match uri {
            Some(uri) => resource_message(uri, what, error),
            None => format!("{what}: {error}"),
        };
        self.failed_with(bounded(&message).into_owned());
    }

    fn failed_with(&mut self, message: String) {
        self.verdict = Verdict::Failed;
        if self.error.is_none() {
            self.error = Some(message);
        }
    }
}

/// `{uri}: {what} ({error})`, without the URI when the error already names it (most fetch
/// errors begin with their URL).
fn resource_message(uri: &str, what: &str, error: &str) -> String {
    if error.contains(uri) {
        format!("{what}: {error}")
    } else {
        format!("{uri}: {what} ({error})")
    }
}

/// What [`Notifier::prepare`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Prepared {
    /// Payloads added to the outbox.
    pub payloads: u64,
    /// Changes they announce.
    pub entries: u64,
    /// The change-log sequence number the channel has reached.
    pub seq: u64,
}

/// What [`Notifier::deliver`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveryReport {
    /// Payloads the hub took in this call.
    pub delivered: u64,
    /// Payloads left in the outbox afterwards.
    pub pending: u64,
    /// Publish requests sent.
    pub attempts: u64,
    /// Of those, the ones that failed (no 2xx).
    pub failures: u64,
    /// `form = "websub"`: payloads the hub took but did not fetch from the topic within
    /// `notify.fetch_wait` (receivers recover them from the Change List).
    pub unfetched: u64,
    /// Payloads the hub has taken since the channel began.
    pub sent_total: u64,
    /// The last failure, naming the hub or the object.
    pub last_error: Option<String>,
}

/// The notification step of a run (in [`RunReport`] and the stats object).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NotifyReport {
    /// The topic URI.
    pub topic: String,
    /// The hub URL.
    pub hub: String,
    /// `resourcesync` or `websub`.
    pub form: String,
    /// What was turned into payloads (absent when nothing could be prepared).
    pub prepared: Option<Prepared>,
    /// What was sent.
    pub delivery: DeliveryReport,
    /// What went wrong preparing (delivery failures are in `delivery`).
    pub errors: Vec<String>,
}

impl NotifyReport {
    /// True when notifications were not prepared or the outbox could not be delivered
    /// (exit status 1 of `rsagg run`: "some upstream or delivery failed").
    pub fn failed(&self) -> bool {
        !self.errors.is_empty() || (self.delivery.pending > 0 && self.delivery.last_error.is_some())
    }

    /// One summary line (for `rsagg run`'s output).
    pub fn summary(&self) -> String {
        let d = &self.delivery;
        let mut s = format!("  notifications ({} to {}): ", self.form, self.hub);
        if let Some(p) = &self.prepared {
            s.push_str(&format!(
                "{} payload(s) prepared ({} change(s)), ",
                p.payloads, p.entries
            ));
        }
        s.push_str(&format!(
            "{} delivered, {} pending, {} attempt(s), {} failed, {} sent in all",
            d.delivered, d.pending, d.attempts, d.failures, d.sent_total
        ));
        if d.unfetched > 0 {
            s.push_str(&format!(
                ", {} not fetched by the hub (receivers recover them from the Change List)",
                d.unfetched
            ));
        }
        s.push('\n');
        if let Some(e) = &d.last_error {
            s.push_str(&format!("    last delivery error: {e}\n"));
        }
        for e in &self.errors {
            s.push_str(&format!("    notifications FAILED: {e}\n"));
        }
        s
    }
}

/// Counters of the push intake since the follower started (in the run report and
/// `/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PushStats {
    /// Deliveries received at a callback.
    pub received: u64,
    /// Payloads applied (their changes committed or recognised as replays).
    pub applied: u64,
    /// Dropped: signature missing or wrong.
    pub dropped_signature: u64,
    /// Dropped: no subscription of that callback for that topic, or no set to apply to.
    pub dropped_unknown: u64,
    /// Dropped: not a valid change notification (CN 1.0.1 3).
    pub dropped_invalid: u64,
    /// Answered 503 because the queue was full.
    pub busy: u64,
    /// Payloads that did not follow the previous one (gap or reordering) and made the
    /// follower read the Change List.
    pub gaps_recovered: u64,
    /// Verified subscriptions whose lease runs.
    pub subscriptions: u64,
    /// Push→publish latency of the last push pass, in milliseconds (oldest payload).
    pub last_latency_ms: u64,
    /// The largest such latency.
    pub max_latency_ms: u64,
}

/// What one garbage collection did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    /// Objects listed under `blobs/` (blobs and temporary uploads).
    pub scanned: u64,
    /// Objects not deleted (referenced, younger than the grace period, not a blob address, or
    /// gone meanwhile).
    pub kept: u64,
    /// Objects deleted.
    pub deleted: u64,
    /// Bytes those objects held.
    pub bytes_freed: u64,
    /// When the collection started.
    pub at: W3cDateTime,
}

/// What a publish of the Change Lists did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeListReport {
    /// Changes listed in the open Change List after the publish.
    pub open_entries: u64,
    /// Change Lists closed by this publish (a large batch is cut into several).
    pub closed_now: u64,
    /// Closed Change Lists the index names after the publish (those retained).
    pub closed_total: u64,
    /// Closed Change Lists this publish dropped from the index (retention); their objects
    /// are deleted once the grace period has passed.
    pub dropped: u64,
}

/// What a Change Dump publish did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeDumpReport {
    /// Packages made by this publish.
    pub packages_now: u64,
    /// Packages `changedump.xml` names now.
    pub packages_total: u64,
    /// Packages dropped by this publish because their Change List is no longer retained.
    pub dropped: u64,
    /// Changes left out of new packages: blob missing or not matching its address, no URI
    /// of rsagg's own, or no safe name in the ZIP (each is logged as a warning).
    pub skipped: u64,
    /// Closed Change Lists this publish left to the Resource Dump built alongside, without a
    /// package: when Change Dumps begin, the changes that dump holds (a collection's
    /// baseline) are not packaged a second time (`publish.change_dump_baseline`).
    pub left_to_resource_dump: u64,
}

/// What a Resource Dump rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceDumpReport {
    /// Packages in the new dump.
    pub packages: u64,
    /// Resources (bitstreams) in them.
    pub resources: u64,
    /// Bytes of the packages (what a Destination downloads).
    pub bytes: u64,
    /// Resources left out because their blob was missing or did not match its address, or
    /// no safe name could be found for them (each is logged as a warning).
    pub skipped: u64,
    /// Of `resources`, those whose bitstream was copied, still compressed, from the
    /// previous dump's packages: no blob read, nothing deflated.
    pub copied: u64,
    /// Packages of the previous dump that could not be copied from (a failed download, or
    /// bytes other than those published: logged as warnings); their resources were read
    /// from the blobs instead.
    pub unusable: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> RunReport {
        RunReport {
            collection: "c".into(),
            upstreams: vec![UpstreamReport {
                unchanged: 5,
                replayed: 2,
                ..UpstreamReport::new("up")
            }],
            publish: Some(PublishReport {
                change_lists: Some(ChangeListReport {
                    open_entries: 3,
                    closed_total: 1,
                    ..ChangeListReport::default()
                }),
                ..PublishReport::default()
            }),
            ..RunReport::default()
        }
    }

    #[test]
    fn an_idle_pass_is_not_eventful_a_change_or_a_failure_is() {
        assert!(!idle().eventful());
        let mut r = idle();
        r.upstreams[0].updated = 1;
        assert!(r.eventful());
        let mut r = idle();
        r.upstreams[0].verdict = Verdict::Failed;
        assert!(r.eventful());
        let mut r = idle();
        r.upstreams[0].resyncs.push("no Change List".into());
        assert!(!r.eventful(), "a re-sync that changed nothing");
        let mut r = idle();
        r.publish.as_mut().unwrap().errors.push("gc: boom".into());
        assert!(r.eventful());
        let mut r = idle();
        r.notify = Some(NotifyReport {
            delivery: DeliveryReport {
                delivered: 1,
                ..DeliveryReport::default()
            },
            ..NotifyReport::default()
        });
        assert!(r.eventful());
        let mut r = idle();
        r.notify = Some(NotifyReport::default());
        assert!(!r.eventful(), "nothing prepared, delivered or failing");
    }

    #[test]
    fn summary_sizes_are_human_readable() {
        let mut r = idle();
        r.store = Some(StoreRequests {
            get: 1,
            bytes_read: 1536,
            bytes_written: 3 * 1024 * 1024,
            ..StoreRequests::default()
        });
        r.publish.as_mut().unwrap().resource_dump = Some(ResourceDumpReport {
            packages: 1,
            resources: 2,
            bytes: 2048,
            skipped: 0,
            copied: 1,
            unusable: 0,
        });
        let s = r.summary();
        assert!(s.contains("1.5 KiB read, 3.0 MiB written"), "{s}");
        assert!(
            s.contains("2 resources, 2.0 KiB, 1 copied from the previous dump\n"),
            "{s}"
        );
    }

    /// `mirrored` is in the summary when a mirror was used, and a stats object written
    /// before the counter existed still reads (as 0).
    #[test]
    fn mirrored_resources_are_counted_and_older_stats_still_read() {
        let mut r = idle();
        assert!(!r.summary().contains("mirrored"), "{}", r.summary());
        r.upstreams[0].created = 2;
        r.upstreams[0].mirrored = 1;
        let s = r.summary();
        assert!(s.contains("failed 0 mirrored 1\n"), "{s}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["upstreams"][0]["mirrored"], 1);
        let old = r#"{"report": {"upstreams": [{"name": "up", "created": 3}]}}"#;
        let stats: RunStats = serde_json::from_str(old).unwrap();
        assert_eq!(stats.report.upstreams[0].mirrored, 0);
        assert_eq!(stats.report.upstreams[0].created, 3);
    }

    #[test]
    fn messages_are_redacted_and_bounded() {
        let mut r = UpstreamReport::new("up");
        r.warn("from http://alice:pw@up/.well-known/resourcesync: 404".into());
        let huge = format!("http://up/{}", "a".repeat(50 << 20));
        r.warn_at(&huge, "fetching failed", "HTTP status 500");
        r.fail_at(Some("http://up/x?token=t0k"), "discovery failed", "refused");
        assert_eq!(
            r.warnings[0],
            "from http://***@up/.well-known/resourcesync: 404"
        );
        assert!(r.warnings[1].len() < 20_000, "{}", r.warnings[1].len());
        assert!(r.warnings[1].ends_with("more bytes]"));
        assert_eq!(
            r.error.as_deref(),
            Some("http://up/x?token=***: discovery failed (refused)")
        );
    }

    #[test]
    fn resource_messages_name_the_uri_once() {
        assert_eq!(
            resource_message(
                "http://u/a",
                "fetching failed",
                "http://u/a: HTTP status 500"
            ),
            "fetching failed: http://u/a: HTTP status 500"
        );
        assert_eq!(
            resource_message("http://u/a", "quarantined", "bytes differ"),
            "http://u/a: quarantined (bytes differ)"
        );
    }
}
