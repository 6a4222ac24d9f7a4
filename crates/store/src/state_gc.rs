//! The state's garbage collection (slatedb's tables, WAL files and manifests no longer
//! used), run beside the writer on rsagg's schedule rather than inside it on slatedb's.
//!
//! slatedb's own collector, embedded in the writer, passes over every directory of the
//! state as soon as the writer opens (its ticker fires at once) and then every 10 minutes;
//! closing the writer waits for a pass in flight. A `run --once` process is short, so every
//! run paid a whole pass: listings of four directories and a read of each manifest a
//! compaction checkpoint still references, three times over (~36 of an incremental run's
//! ~430 requests at 10^6 resources), and, in the first run after a baseline, the deletion of
//! everything the baseline's last compactions left: at 10^7 resources 2,932 tables and WAL
//! files, 1.4 s that the run spent after its work was done, waiting to close.
//!
//! Here a pass runs when one is due: when no pass has completed for [`DUE_AFTER`] (the time
//! of the last complete one is kept in the state, under `m/state-gc`), and then every
//! [`PASS_EVERY`] while the run lasts, so a long baseline leaves little behind. A pass runs
//! beside the run's work and never holds it up: closing the state stops a pass in flight.
//! That is safe at any point: a pass deletes only objects no manifest or checkpoint refers
//! to, each deletion on its own, and the next due pass starts over from the listings.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::ObjectStore;
use slatedb::Db;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The state key holding when the last complete pass started (Unix seconds).
pub(crate) const LAST_PASS_KEY: &str = "m/state-gc";

/// A pass is due when none has completed for this long (slatedb's own interval).
pub const DUE_AFTER: Duration = Duration::from_secs(600);

/// Once a pass ran in a process, the next one starts this long after it (a long baseline
/// compacts all along; its tables are deleted as their checkpoints expire, not all in the
/// next run).
pub const PASS_EVERY: Duration = Duration::from_secs(60);

/// Whether a pass is due at `now`, the last complete one having started at `last` (Unix
/// seconds; `None` when no pass ever completed). A clock that went back counts as due: a
/// pass too many costs requests, one too few costs storage for ever.
pub(crate) fn is_due(last: Option<u64>, now: u64) -> bool {
    match last {
        None => true,
        Some(last) => now < last || now - last >= DUE_AFTER.as_secs(),
    }
}

/// A garbage collector supervised beside a writer (see the module documentation).
pub(crate) struct StateGc {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    schedule: watch::Receiver<Schedule>,
}

/// Where the collector of one process stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// Passes completed by this process.
    pub(crate) passes: u32,
    /// The wait before the next pass, once the collector has settled on it.
    pub(crate) next_in: Option<Duration>,
}

impl StateGc {
    /// Starts collecting the state under `objects` (at `state_path`) that `db` writes;
    /// `path` names it in logs.
    pub(crate) fn start(
        path: String,
        state_path: &'static str,
        objects: Arc<dyn ObjectStore>,
        db: Db,
    ) -> StateGc {
        let (stop, stopped) = watch::channel(false);
        let (schedule_tx, schedule) = watch::channel(Schedule::default());
        let task = tokio::spawn(collect(path, state_path, objects, db, stopped, schedule_tx));
        StateGc {
            stop,
            task: Some(task),
            schedule,
        }
    }

    /// Where the collector stands (what it did in this process, when it passes next).
    #[cfg(test)]
    pub(crate) fn schedule(&self) -> watch::Receiver<Schedule> {
        self.schedule.clone()
    }

    /// Stops the collector, abandoning a pass in flight, and waits until it has (before the
    /// writer closes, so that nothing writes `m/state-gc` to a closing database).
    pub(crate) async fn stop(mut self) {
        tracing::debug!(
            passes = self.schedule.borrow().passes,
            "stopping the state's garbage collection"
        );
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for StateGc {
    /// A state dropped without [`crate::State::close`]: the collector stops on its own task.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn last_pass(db: &Db) -> Result<Option<u64>, slatedb::Error> {
    Ok(db
        .get(LAST_PASS_KEY.as_bytes())
        .await?
        .and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok()))
}

async fn collect(
    path: String,
    state_path: &'static str,
    objects: Arc<dyn ObjectStore>,
    db: Db,
    mut stopped: watch::Receiver<bool>,
    schedule: watch::Sender<Schedule>,
) {
    // slatedb's collector with its default ages (tables, WAL files and manifests 5 minutes
    // old; checkpoints honoured), its own schedule unused: `run_gc_once` is one pass.
    let collector = slatedb::GarbageCollectorBuilder::new(state_path, objects).build();
    // Like a pass, the read is given up when the state closes: closing never waits on it.
    let read = tokio::select! {
        read = last_pass(&db) => read,
        _ = stopped.wait_for(|s| *s) => return,
    };
    let last = match read {
        Ok(last) => last,
        Err(e) => {
            tracing::debug!(state = %path, error = %e, "reading when the state was last collected");
            return;
        }
    };
    let now = unix_now();
    let mut wait = match last {
        Some(last) if !is_due(Some(last), now) => {
            // Due later; a run that lasts until then collects then.
            DUE_AFTER.saturating_sub(Duration::from_secs(now - last))
        }
        _ => Duration::ZERO,
    };
    loop {
        schedule.send_modify(|s| s.next_in = Some(wait));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        let started = unix_now();
        tokio::select! {
            _ = collector.run_gc_once() => {}
            // Abandoned half-way: what it deleted stays deleted, the rest waits for the
            // next due pass (the module documentation says why that is safe).
            _ = stopped.wait_for(|s| *s) => return,
        }
        if let Err(e) = db.put(LAST_PASS_KEY, started.to_string()).await {
            // A fenced or closing writer: the next writer's run collects.
            tracing::debug!(state = %path, error = %e, "recording the state's collection");
            return;
        }
        schedule.send_modify(|s| {
            s.passes += 1;
            s.next_in = None;
        });
        tracing::debug!(state = %path, "state garbage collected");
        wait = PASS_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_due_when_none_completed_for_the_interval() {
        let due = DUE_AFTER.as_secs();
        assert!(is_due(None, 1_000_000));
        assert!(!is_due(Some(1_000_000), 1_000_000));
        assert!(!is_due(Some(1_000_000), 1_000_000 + due - 1));
        assert!(is_due(Some(1_000_000), 1_000_000 + due));
        // A clock that went back.
        assert!(is_due(Some(1_000_000), 999_999));
    }
}
