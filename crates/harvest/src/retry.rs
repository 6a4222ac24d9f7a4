//! `rsagg quarantine retry`: the quarantined resources of an upstream fetched again,
//! verified against what the upstream's Resource List says of them now (the list may have
//! been corrected, or the bytes), and stored through the harvest's one path
//! (`Harvest::store_entry`): a copy that verifies lifts the quarantine, one that still does
//! not is quarantined again with what was received this time.
//!
//! What the upstream says of a resource now is its Resource List entry, unless a change after
//! the list's `at` concerns it (`later.rs`): then its last change.
//!
//! Only the quarantined URIs are held (a quarantine is small by nature: persistent,
//! unexplained mismatches), and the last changes after the list's `at` (bounded, see
//! `later.rs`); the lists are streamed. A quarantined URI that no Resource List
//! names any more stays in quarantine and is reported: the next change of it, or its
//! deletion, settles it.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;

use rsagg_config::UpstreamConfig;
use rsagg_layout::report::UpstreamReport;
use rsagg_model::{Capability, UrlEntry};
use rsagg_store::StoreFailure as _;

use crate::Error;
use crate::commit::{Committer, Outcome};
use crate::context::{Ctx, Harvest};
use crate::later::{Later, is_deletion};
use crate::upstream::discover_sets;

/// Retries the quarantined resources of `up` (only `uri` when given). The report counts
/// what became of them (`created`, `updated`, `unchanged` — each of these released —,
/// `quarantined` again, `gone`, `failed`); a URI no list names is a warning.
pub async fn retry_quarantined(
    ctx: Arc<Ctx>,
    up: Arc<UpstreamConfig>,
    uri: Option<&str>,
) -> UpstreamReport {
    let mut report = UpstreamReport::new(&up.name);
    let mut wanted = HashSet::new();
    match ctx.state.quarantine().await {
        Ok(mut q) => loop {
            match q.next().await {
                Ok(Some(r)) if r.upstream == up.name && uri.is_none_or(|u| u == r.uri) => {
                    wanted.insert(r.uri);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    report.fail(e.to_string());
                    return report;
                }
            }
        },
        Err(e) => {
            report.fail(e.to_string());
            return report;
        }
    }
    if wanted.is_empty() {
        return report;
    }
    let Some((access, sets)) = discover_sets(&ctx, &up, &mut report, None).await else {
        return report;
    };
    let h = Harvest {
        quarantined: Arc::new(std::sync::Mutex::new(wanted.clone())),
        ..Harvest::unbounded(ctx.clone(), up, access)
    };
    let mut pending = wanted;
    for set in &sets {
        if pending.is_empty() {
            break;
        }
        if let Err(e) = retry_set(&h, set, &mut pending, &mut report).await {
            if e.is_fenced() {
                report.fenced = true;
            }
            report.fail(format!("set {}: {e}", set.url));
        }
    }
    let mut left: Vec<String> = pending.into_iter().collect();
    left.sort();
    for uri in left {
        report.warn(if h.up.is_oai() {
            format!(
                "{uri}: the provider no longer has this record (idDoesNotExist, OAI-PMH 2.0 section 3.6); kept in quarantine"
            )
        } else {
            format!(
                "{uri}: not in the upstream's state now (no Resource List names it, or a change after the list deleted it); kept in quarantine"
            )
        });
    }
    report
}

async fn retry_set(
    h: &Harvest,
    set: &rsagg_fetch::CapabilitySet,
    pending: &mut HashSet<String>,
    report: &mut UpstreamReport,
) -> Result<(), Error> {
    if h.up.is_oai() {
        return retry_oai(h, set, pending, report).await;
    }
    let Some(list_url) = set.get(Capability::ResourceList).cloned() else {
        return Ok(());
    };
    // What the upstream announces now is its list plus the changes after the list's `at`
    // (`later.rs`): a resource changed since is verified against its last change, not its
    // stale list entry.
    let later = h
        .later_changes(set, &list_url, true)
        .await?
        .map(|(_, later)| later)
        .unwrap_or_else(Later::none);
    let docs = h.docs();
    let (producer, mut entries) = docs.read_entries(&list_url);
    let mut committer = Committer::new(&h.ctx, &h.up.name, set.url.as_str());
    let set = Arc::new(set.clone());
    let consumer = async {
        // The quarantined entries are few: one after the other.
        while let Some((_, e)) = entries.next().await {
            let uri = e.loc.trim().to_owned();
            if later.contains(&uri) || !pending.remove(&uri) {
                continue;
            }
            retry_one(h, &set, e, &mut committer, report).await?;
        }
        Ok::<_, Error>(())
    };
    let (header, consumed) = futures::join!(producer, consumer);
    consumed?;
    header?;
    // Those changed after the list: against their last change (a deletion: not in the
    // upstream's state, so nothing to verify; kept, and reported as not listed).
    let mut changed: Vec<String> = pending
        .iter()
        .filter(|u| later.get(u).is_some_and(|e| !is_deletion(e)))
        .cloned()
        .collect();
    changed.sort();
    for uri in changed {
        if let Some(e) = later.get(&uri) {
            pending.remove(&uri);
            retry_one(h, &set, e.clone(), &mut committer, report).await?;
        }
    }
    committer.flush().await
}

/// The quarantined records of an OAI-PMH upstream, each asked again at its URI (its
/// `GetRecord` URL): a record that reads well now is stored (or found unchanged) and
/// released, one that still does not is quarantined again, one the provider no longer has
/// (`idDoesNotExist`) stays in quarantine and is reported.
async fn retry_oai(
    h: &Harvest,
    set: &rsagg_fetch::CapabilitySet,
    pending: &mut HashSet<String>,
    report: &mut UpstreamReport,
) -> Result<(), Error> {
    let mut committer = Committer::new(&h.ctx, &h.up.name, set.url.as_str());
    let mut uris: Vec<String> = pending.iter().cloned().collect();
    uris.sort();
    for uri in uris {
        tracing::info!(upstream = %h.up.name, %uri, "retrying a quarantined OAI-PMH record");
        match h.oai_get_record(set, &uri).await {
            Ok(Some(mut outcome)) => {
                pending.remove(&uri);
                if let Outcome::Unchanged { release, .. } = &mut outcome {
                    release.get_or_insert(uri);
                }
                committer.add(outcome, report).await?;
            }
            Ok(None) => {}
            Err(e) if e.is_fenced() || e.is_store() => return Err(e),
            Err(e) => {
                // The error names the request (the record's URI).
                pending.remove(&uri);
                report.fail(e.to_string());
            }
        }
    }
    committer.flush().await
}

/// Fetches one quarantined resource again, verified against `e`, and commits the outcome.
async fn retry_one(
    h: &Harvest,
    set: &rsagg_fetch::CapabilitySet,
    e: UrlEntry,
    committer: &mut Committer<'_>,
    report: &mut UpstreamReport,
) -> Result<(), Error> {
    let uri = e.loc.trim().to_owned();
    tracing::info!(upstream = %h.up.name, %uri, "retrying a quarantined resource");
    let mut outcome = h.store_entry(set, e, true).await;
    if let Outcome::Unchanged { release, .. } = &mut outcome {
        // The copy held is what the upstream says now: nothing to store, the quarantine is
        // lifted all the same.
        release.get_or_insert(uri);
    }
    committer.add(outcome, report).await?;
    Ok(())
}
