//! The OAI-PMH operator commands (`rsagg oai …`, `docs/contract.md`, Operator commands):
//! the date windows of each set's pass as the state keeps them, a date range marked to be
//! harvested again by the next run, and given records asked again by `GetRecord` now.

use std::sync::Arc;

use rsagg_config::UpstreamConfig;
use rsagg_layout::report::UpstreamReport;
use rsagg_model::W3cDateTime;
use rsagg_store::{Checkpoint, OaiPass, OaiWindow, State, StoreFailure as _, WindowStatus};
use serde::Serialize;

use crate::Error;
use crate::commit::Committer;
use crate::context::{Ctx, Harvest};
use crate::oai::{oai_sets, record_uri};
use crate::upstream::discover_sets;

/// One set of an OAI-PMH upstream with its pass (`rsagg oai windows`).
#[derive(Debug, Clone, Serialize)]
pub struct SetWindows {
    /// The upstream.
    pub upstream: String,
    /// The set (its `ListRecords` URL without `from`/`until`).
    pub set: String,
    /// The checkpoint: every record up to it is held.
    pub checkpoint: Option<W3cDateTime>,
    /// The pass in progress, or the last one made; `None` before the first.
    pub pass: Option<OaiPass>,
}

/// The windows of every set of the OAI-PMH upstreams of `upstreams` (only `only` when
/// given), from the state alone.
pub async fn windows(
    state: &State,
    upstreams: &[UpstreamConfig],
    only: Option<&str>,
) -> Result<Vec<SetWindows>, Error> {
    let mut out = Vec::new();
    for up in upstreams
        .iter()
        .filter(|u| u.is_oai() && only.is_none_or(|n| n == u.name))
    {
        for set in oai_sets(up) {
            let cp = state.checkpoint(&up.name, set.url.as_str()).await?;
            out.push(SetWindows {
                upstream: up.name.clone(),
                set: set.url.to_string(),
                checkpoint: cp.as_ref().and_then(|c| c.instant),
                pass: cp.and_then(|c| c.oai),
            });
        }
    }
    Ok(out)
}

/// `rsagg oai reharvest`: the range `from`..=`until` (`until` at most the checkpoint)
/// added to each selected set's pass as a window to list again (the pass in progress, or a
/// new one ending at the checkpoint, which the next run extends to the provider's clock).
/// The records of the range are compared with their copies again; the checkpoint does not
/// move back. Returns the sets marked.
pub async fn reharvest(
    state: &State,
    up: &UpstreamConfig,
    set: Option<&str>,
    from: W3cDateTime,
    until: Option<W3cDateTime>,
) -> Result<Vec<SetWindows>, Error> {
    let sets = oai_sets(up);
    let chosen: Vec<_> = sets
        .iter()
        .filter(|s| {
            set.is_none_or(|spec| s.url.query_pairs().any(|(k, v)| k == "set" && v == spec))
        })
        .collect();
    if chosen.is_empty() {
        return Err(Error::Oai {
            url: up.url.to_string(),
            section: "3.4",
            message: format!(
                "upstream `{}` harvests no set `{}` (its sets: {})",
                up.name,
                set.unwrap_or_default(),
                up.sets.as_deref().unwrap_or_default().join(", ")
            ),
        });
    }
    let mut marked = Vec::new();
    for s in chosen {
        let cp = state.checkpoint(&up.name, s.url.as_str()).await?;
        let Some(mut cp) = cp.filter(|c| c.instant.is_some()) else {
            return Err(Error::Oai {
                url: s.url.to_string(),
                section: "3.4",
                message: "no pass of this set is complete yet: the next run harvests it whole"
                    .into(),
            });
        };
        let done = cp.instant.expect("filtered");
        let until = until
            .filter(|u| u.cmp_instant(&done).is_lt())
            .unwrap_or(done);
        if from.cmp_instant(&until).is_gt() {
            return Err(Error::Oai {
                url: s.url.to_string(),
                section: "3.3.1",
                message: format!(
                    "--from {} is after the range's end {} (the checkpoint, or --until)",
                    from.to_utc(),
                    until.to_utc()
                ),
            });
        }
        let mut pass = match cp.oai.take() {
            Some(p) if !p.complete => p,
            _ => OaiPass {
                until: Some(done),
                ..OaiPass::default()
            },
        };
        pass.windows.push(OaiWindow {
            from: Some(from),
            until: Some(until),
            status: WindowStatus::Pending,
            reharvest: true,
            ..OaiWindow::default()
        });
        cp.oai = Some(pass);
        put_checkpoint(state, &up.name, s.url.as_str(), cp.clone()).await?;
        marked.push(SetWindows {
            upstream: up.name.clone(),
            set: s.url.to_string(),
            checkpoint: cp.instant,
            pass: cp.oai,
        });
    }
    Ok(marked)
}

async fn put_checkpoint(
    state: &State,
    upstream: &str,
    set: &str,
    cp: Checkpoint,
) -> Result<(), Error> {
    let commit = rsagg_store::Commit {
        upstream: upstream.to_owned(),
        set: set.to_owned(),
        checkpoint: Some(cp),
        ..rsagg_store::Commit::default()
    };
    state.commit(commit).await?;
    Ok(())
}

/// `rsagg oai refetch`: each of `identifiers` asked by `GetRecord` now (section 4.1) and
/// stored through the harvest's one path (found unchanged when the copy holds its bytes; a
/// deletion deletes the copy), under the set that holds its copy, else the upstream's
/// first. An identifier the provider does not have (`idDoesNotExist`) is a warning.
pub async fn refetch(
    ctx: Arc<Ctx>,
    up: Arc<UpstreamConfig>,
    identifiers: &[String],
) -> UpstreamReport {
    let mut report = UpstreamReport::new(&up.name);
    let Some((access, sets)) = discover_sets(&ctx, &up, &mut report, None).await else {
        return report;
    };
    let h = Harvest::unbounded(ctx.clone(), up.clone(), access);
    let Some(first) = sets.first() else {
        return report;
    };
    for id in identifiers {
        let uri = record_uri(&up, id).to_string();
        let held = match ctx.state.resource(&up.name, &uri).await {
            Ok(r) => r.map(|r| r.set),
            Err(e) => {
                report.fail(e.to_string());
                return report;
            }
        };
        let set = held
            .and_then(|held| sets.iter().find(|s| s.url.as_str() == held))
            .unwrap_or(first);
        let mut committer = Committer::new(&ctx, &up.name, set.url.as_str());
        tracing::info!(upstream = %up.name, %uri, "refetching an OAI-PMH record");
        match h.oai_get_record(set, &uri).await {
            Ok(Some(outcome)) => {
                let added = committer.add(outcome, &mut report).await;
                if let Err(e) = async {
                    added?;
                    committer.flush().await
                }
                .await
                {
                    if e.is_fenced() {
                        report.fenced = true;
                    }
                    report.fail(e.to_string());
                    return report;
                }
            }
            Ok(None) => report.warn(format!(
                "{uri}: the provider has no record `{id}` (idDoesNotExist, OAI-PMH 2.0 section 3.6)"
            )),
            Err(e) if e.is_fenced() || e.is_store() => {
                report.fenced = e.is_fenced();
                report.fail(e.to_string());
                return report;
            }
            Err(e) => report.fail_at(
                Some(&uri),
                "refetching the record failed",
                &rsagg_model::ErrorChain(&e).to_string(),
            ),
        }
    }
    report
}
