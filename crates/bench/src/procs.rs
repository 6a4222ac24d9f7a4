//! What a measured process took, read from `/proc` (procfs): peak memory and CPU time, for
//! the benchmarks that run each measured operation as a process of its own.

/// Peak resident set size of process `pid` (`VmHWM`), in KiB; 0 once it is gone.
pub(crate) fn vm_hwm_kib(pid: u32) -> u64 {
    procfs::process::Process::new(pid as i32)
        .and_then(|p| p.status())
        .ok()
        .and_then(|s| s.vmhwm)
        .unwrap_or(0)
}

/// CPU seconds (user + system) of the children this process has waited for.
pub(crate) fn waited_children_cpu() -> f64 {
    procfs::process::Process::myself()
        .and_then(|p| p.stat())
        .map_or(0.0, |s| {
            (s.cutime + s.cstime) as f64 / procfs::ticks_per_second() as f64
        })
}

/// CPU seconds (user + system) of process `pid` and of its direct children (nginx's
/// workers).
pub(crate) fn tree_cpu(pid: u32) -> f64 {
    if pid == 0 {
        return 0.0;
    }
    let Ok(all) = procfs::process::all_processes() else {
        return 0.0;
    };
    let ticks: u64 = all
        .filter_map(|p| p.ok()?.stat().ok())
        .filter(|s| s.pid as u32 == pid || s.ppid as u32 == pid)
        .map(|s| s.utime + s.stime)
        .sum();
    ticks as f64 / procfs::ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::{tree_cpu, waited_children_cpu};

    #[test]
    fn a_waited_for_child_shows_in_the_cpu_of_children() {
        let before = waited_children_cpu();
        let st = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(st.success());
        assert!(waited_children_cpu() > before, "{before}");
        // A process's own CPU (and its live children's): this one, after spinning.
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(100) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(tree_cpu(std::process::id()) > 0.0);
    }
}
