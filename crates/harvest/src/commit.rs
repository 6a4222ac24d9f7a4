//! What harvesting one resource came to ([`Outcome`]) and the batched commits that record
//! outcomes, state and the checkpoint together, after the bytes they point at.

use rsagg_model::Change;
use rsagg_store::{Applied, Checkpoint, Commit, QuarantineRecord, ResourceRecord, State};

use crate::Error;
use crate::context::Ctx;
use rsagg_layout::report::UpstreamReport;

/// Commits carry at most this many resource changes.
pub(crate) const COMMIT_BATCH: usize = 256;

/// What became of one resource.
pub(crate) enum Outcome {
    Stored {
        change: Change,
        record: ResourceRecord,
        /// Lift the resource's quarantine.
        release: bool,
    },
    /// Same bytes as the copy held; the record may carry new upstream metadata.
    Unchanged {
        /// The record with new upstream metadata, when it has some.
        touched: Option<ResourceRecord>,
        /// The URI whose quarantine is lifted: the copy held is what the upstream
        /// announces now.
        release: Option<String>,
    },
    Deleted(ResourceRecord),
    /// Nothing to do (deletion of an unknown resource).
    Skipped,
    /// Listed, but the upstream answers 404/410 (deleted since the list was made).
    Gone {
        uri: String,
        /// The fetch error, with its causes.
        error: String,
    },
    /// A later change of the same resource in the same list supersedes this one.
    Superseded,
    Quarantined(QuarantineRecord),
    /// The upstream's URI failed and a mirror (an `rs:ln rel="duplicate"` of the entry,
    /// spec 14.2) served the announced bytes: `outcome` (stored or unchanged) is what they
    /// came to, under the upstream's URI.
    Mirrored {
        /// The resource (the upstream's URI).
        uri: String,
        /// The mirror the bytes came from.
        mirror: String,
        /// How the upstream's URI failed, with its causes.
        primary: String,
        /// What the mirror's bytes came to.
        outcome: Box<Outcome>,
    },
    Failed {
        /// The resource (`None` when its task was lost before it could say).
        uri: Option<String>,
        /// What was being done.
        what: &'static str,
        /// Why, with its causes.
        error: String,
    },
}

impl Outcome {
    /// True for a resource cut at the pass deadline (its transfer was still in flight).
    pub(crate) fn cut_at_deadline(&self) -> bool {
        matches!(self, Outcome::Failed { what, .. } if *what == crate::context::CUT_AT_DEADLINE)
    }

    /// A failure of `what` for the resource `uri`, because of `error` (with its causes).
    pub(crate) fn failed(uri: &str, what: &'static str, error: &dyn std::error::Error) -> Self {
        Outcome::Failed {
            uri: Some(uri.to_owned()),
            what,
            error: rsagg_model::ErrorChain(error).to_string(),
        }
    }
}

/// Accumulates outcomes into bounded, atomic commits.
pub(crate) struct Committer<'a> {
    state: &'a State,
    progress: &'a crate::Progress,
    commit: Commit,
    pending: usize,
}

impl<'a> Committer<'a> {
    pub(crate) fn new(ctx: &'a Ctx, upstream: &str, set: &str) -> Self {
        Committer {
            state: &ctx.state,
            progress: &ctx.progress,
            commit: Commit {
                upstream: upstream.to_owned(),
                set: set.to_owned(),
                ..Commit::default()
            },
            pending: 0,
        }
    }

    pub(crate) async fn add(
        &mut self,
        outcome: Outcome,
        report: &mut UpstreamReport,
    ) -> Result<bool, Error> {
        let ok = match outcome {
            Outcome::Stored {
                change,
                record,
                release,
            } => {
                match change {
                    Change::Created => report.created += 1,
                    _ => report.updated += 1,
                }
                if release {
                    self.commit.release.push(record.uri.clone());
                }
                self.commit.changes.push(Applied { change, record });
                true
            }
            Outcome::Unchanged { touched, release } => {
                report.unchanged += 1;
                if let Some(uri) = release {
                    self.commit.release.push(uri);
                }
                if let Some(r) = touched {
                    self.commit.touched.push(r);
                }
                true
            }
            Outcome::Deleted(record) => {
                report.deleted += 1;
                self.commit.changes.push(Applied {
                    change: Change::Deleted,
                    record,
                });
                true
            }
            Outcome::Skipped => true,
            Outcome::Superseded => {
                report.superseded += 1;
                true
            }
            Outcome::Gone { uri, error } => {
                report.gone += 1;
                report.warn_at(
                    &uri,
                    "listed but gone; a later change is expected to delete it",
                    &error,
                );
                true
            }
            Outcome::Quarantined(q) => {
                report.quarantined += 1;
                report.warn_at(
                    &q.uri,
                    "quarantined",
                    &format!("{} (expected {}, got {})", q.reason, q.expected, q.got),
                );
                self.commit.quarantine.push(q);
                true
            }
            Outcome::Mirrored {
                uri,
                mirror,
                primary,
                outcome,
            } => {
                report.mirrored += 1;
                report.warn_at(
                    &uri,
                    "the upstream's URI failed: copied from a mirror (rs:ln rel=\"duplicate\")",
                    &format!("from {mirror}; the upstream: {primary}"),
                );
                // Counted as what it came to (created, updated or unchanged), once.
                return Box::pin(self.add(*outcome, report)).await;
            }
            Outcome::Failed { uri, what, error } => {
                report.failed += 1;
                report.fail_at(uri.as_deref(), what, &error);
                false
            }
        };
        self.pending += 1;
        self.progress.done();
        if self.pending >= COMMIT_BATCH {
            self.flush().await?;
        }
        Ok(ok)
    }

    pub(crate) fn checkpoint(&mut self, cp: Checkpoint) {
        self.commit.checkpoint = Some(cp);
    }

    pub(crate) async fn flush(&mut self) -> Result<(), Error> {
        let c = &mut self.commit;
        if c.changes.is_empty()
            && c.touched.is_empty()
            && c.quarantine.is_empty()
            && c.release.is_empty()
            && c.checkpoint.is_none()
        {
            return Ok(());
        }
        let next = Commit {
            upstream: c.upstream.clone(),
            set: c.set.clone(),
            ..Commit::default()
        };
        let commit = std::mem::replace(c, next);
        self.pending = 0;
        // Only a commit that moves the checkpoint waits for durability (which covers every
        // earlier batch too); the others do not stall the harvest.
        let durable = commit.checkpoint.is_some();
        self.state.commit_with(commit, durable).await?;
        Ok(())
    }
}
