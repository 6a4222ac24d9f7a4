//! The allocator's settings, applied before anything else runs.
//!
//! mimalloc keeps the memory a thread freed for reuse and gives it back to the system only
//! when that thread allocates again after its purge delay (10 ms): the blocking threads that
//! local file I/O and dump packages run on go idle holding it. In a 300,000-resource
//! baseline that retained memory was a third of the peak RSS (517 MiB, 330 MiB with purging
//! at free; `rsagg-bench scale`). mimalloc reads its options from the environment when the
//! process starts, and setting one from Rust takes `unsafe` (which the workspace forbids), so
//! rsagg re-executes itself once with `MIMALLOC_PURGE_DELAY=0` (purge at free) unless the
//! variable is set: an operator's own value wins, and the process keeps its PID.
//!
//! Profilers that wrap the process (heaptrack, valgrind) follow only the first one, which
//! ends in that `exec`: set `MIMALLOC_PURGE_DELAY=0` in their environment so there is none.

/// The variable mimalloc reads its purge delay (milliseconds) from.
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// Re-executes the process with [`PURGE_DELAY`] set to 0 unless it is set; returns only when
/// it is set already or the re-execution failed (then the defaults stay).
pub fn purge_at_free() {
    if std::env::var_os(PURGE_DELAY).is_some() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // `exec` returns only on failure: the process then goes on as it is.
        let _failed = std::process::Command::new(&exe)
            .arg0(arg0)
            .args(args)
            .env(PURGE_DELAY, "0")
            .exec();
    }
}
