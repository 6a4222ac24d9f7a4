//! The state's compactor, run beside the writer rather than inside it.
//!
//! slatedb fences compactors by an epoch of their own, apart from the writer's. Embedded in
//! the writer (its `compactor_options`), a compactor fenced by another process's compactor
//! closes the whole database as fenced. Two `rsagg run` started together on one store then
//! could both end fenced: the later writer fences the earlier one's writer while the earlier
//! one's compactor, started last, fences the later one's compactor, which closes the later
//! writer too. Nobody published; a run that holds the state must not stop for that.
//!
//! So the writer opens without a compactor and [`Compaction`] runs one beside it. When the
//! compactor is fenced, the writer asks the manifest whether it still holds the state
//! (`Db::refresh_manifest`, which fails, and closes the writer as fenced, when another
//! writer took over): if it does, a new compactor claims the next compactor epoch (fencing
//! the stale process's compactor in turn); if not, compaction ends with the writer. Any
//! other compactor error is retried a bounded number of times, then closes the writer, as
//! the embedded compactor's failure did, so that a run cannot stall waiting for a
//! compaction that will never come.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slatedb::Db;
use slatedb::compactor::Compactor;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Compactor restarts (after a fence or a failure) one writer allows; a stale process's
/// compactor can fence this one at most once per stale process, so only a flapping store
/// comes near it.
pub const MAX_RESTARTS: u32 = 16;

/// Wait before restarting a compactor that failed for another reason than a fence (a
/// store fault), doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long closing the state waits for the compactor to stop. A compaction in flight is
/// abandoned beyond it (the compactor is aborted): what it wrote is not in the manifest yet,
/// so nothing is lost, and the next compactor starts it again. Closing must never hang on it.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// A compactor supervised beside a writer: restarted while the writer holds the state,
/// stopped with it (see the module documentation).
pub(crate) struct Compaction {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    /// Compactors started after the first (fenced or failed ones replaced).
    restarts: Arc<AtomicU32>,
}

/// Why a compactor run ended.
enum Ended {
    /// Asked to stop (the state is closing).
    Stopped,
    /// Returned without an error (its own shutdown).
    Done,
    /// Fenced by another compactor.
    Fenced(slatedb::Error),
    /// Any other failure.
    Failed(slatedb::Error),
}

impl Compaction {
    /// Starts compacting the state `db` writes, with compactors made by `build` (one per
    /// start and restart). `path` names the state in logs.
    pub(crate) fn start(
        path: String,
        db: Db,
        build: impl Fn() -> Compactor + Send + 'static,
    ) -> Compaction {
        let (stop, stopped) = watch::channel(false);
        let restarts = Arc::new(AtomicU32::new(0));
        let task = tokio::spawn(supervise(path, db, build, stopped, restarts.clone()));
        Compaction {
            stop,
            task: Some(task),
            restarts,
        }
    }

    /// Compactors started after the first.
    pub(crate) fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Stops the compactor and waits until it has (before the writer closes, so nothing
    /// compacts a database that is closing).
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_WAIT, &mut task).await.is_err()
        {
            tracing::warn!(
                wait = ?STOP_WAIT,
                "the compactor did not stop in time; abandoning its compaction"
            );
            task.abort();
        }
    }
}

impl Drop for Compaction {
    /// A state dropped without [`crate::State::close`] (an error path): the compactor is
    /// told to stop, and stops on its own task.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn supervise(
    path: String,
    db: Db,
    build: impl Fn() -> Compactor,
    mut stopped: watch::Receiver<bool>,
    started: Arc<AtomicU32>,
) {
    let mut restarts = 0u32;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if db.subscribe().borrow().close_reason.is_some() {
            // The writer closed (fenced, or closing): nothing left to compact for.
            return;
        }
        let compactor = build();
        let ended = tokio::select! {
            r = compactor.run() => match r {
                Ok(()) => Ended::Done,
                Err(e) if is_fenced(&e) => Ended::Fenced(e),
                Err(e) => Ended::Failed(e),
            },
            _ = stopped.wait_for(|s| *s) => Ended::Stopped,
        };
        match ended {
            Ended::Stopped => {
                if let Err(e) = compactor.stop().await {
                    tracing::debug!(state = %path, error = %e, "stopping the compactor");
                }
                return;
            }
            Ended::Done => return,
            Ended::Fenced(e) => {
                // Does the writer still hold the state? A fenced writer's refresh fails and
                // closes it as fenced (the state's watcher then marks the store fenced).
                if let Err(w) = db.refresh_manifest().await {
                    tracing::debug!(state = %path, compactor = %e, writer = %w,
                        "compactor fenced, and the writer no longer holds the state");
                    return;
                }
                if restarts >= MAX_RESTARTS {
                    give_up(&path, &db, &e, restarts).await;
                    return;
                }
                tracing::debug!(state = %path, error = %e,
                    "compactor fenced by a stale writer's compactor; the writer holds the state: restarting it");
            }
            Ended::Failed(e) => {
                if restarts >= MAX_RESTARTS {
                    give_up(&path, &db, &e, restarts).await;
                    return;
                }
                tracing::warn!(state = %path, error = %e, retry_in = ?backoff,
                    "compaction failed; restarting the compactor");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        restarts += 1;
        started.store(restarts, Ordering::Relaxed);
        if *stopped.borrow() {
            return;
        }
    }
}

/// Closes the writer after the compactor failed [`MAX_RESTARTS`] times: its next request
/// fails (a store error, exit 1) rather than waiting on tables nothing compacts.
async fn give_up(path: &str, db: &Db, e: &slatedb::Error, restarts: u32) {
    tracing::error!(state = %path, error = %e, restarts,
        "compaction keeps failing; closing the state");
    if let Err(c) = db.close().await {
        tracing::debug!(state = %path, error = %c, "closing the state after compaction failed");
    }
}

fn is_fenced(e: &slatedb::Error) -> bool {
    matches!(
        e.kind(),
        slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced)
    )
}
