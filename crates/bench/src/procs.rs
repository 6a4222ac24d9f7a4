//! What a measured process took, read from `/proc` (procfs): peak memory and CPU time, for
//! the benchmarks that run each measured operation as a process of its own.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

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

/// What one measured process took, and what it printed.
pub(crate) struct Measured {
    /// Wall seconds, spawn to exit.
    pub seconds: f64,
    /// Its peak RSS, in KiB.
    pub peak_kib: u64,
    /// Its CPU seconds (user + system, its waited-for children included).
    pub cpu: f64,
    /// The CPU seconds meanwhile of the process beside it (the upstream server, the OAI-PMH
    /// provider): on 2 cores it competes with the measured one for the same cores.
    pub beside_cpu: f64,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to its end, polling its peak RSS every 5 ms; its CPU and that of process
/// `beside` (0: none) are read from `/proc` around it (in clock ticks, 10 ms).
pub(crate) fn measure(cmd: &mut Command, beside: u32) -> anyhow::Result<Measured> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (cpu0, beside0) = (waited_children_cpu(), tree_cpu(beside));
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("spawning {cmd:?}"))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        peak = peak.max(vm_hwm_kib(pid));
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Measured {
        seconds: start.elapsed().as_secs_f64(),
        peak_kib: peak,
        cpu: waited_children_cpu() - cpu0,
        beside_cpu: tree_cpu(beside) - beside0,
        success: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Reads a child's pipe to its end on a thread of its own, so that neither pipe fills while
/// the other is read.
fn drain(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
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
