//! The reference ResourceSync Destination, `resync-sync` (PyPI `resync` 2.0.1).

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::venv_bin;

const TIMEOUT: Duration = Duration::from_secs(300);

/// What one `resync-sync` run printed.
///
/// resync-sync exits 0 even after a `FatalError`, so judge a run by [`ResyncOutput::status`]
/// and [`ResyncOutput::failed`], not by the exit status.
#[derive(Debug, Clone)]
pub struct ResyncOutput {
    /// The process's exit status (0 nearly always).
    pub exit: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error (resync logs here).
    pub stderr: String,
    /// Every `Status:` line of stdout, then of stderr, without the `Status:` label and
    /// with runs of spaces collapsed: e.g. `SYNCED (created=2)`,
    /// `CHANGES APPLIED (created=1, updated=1, deleted=1)`, `IN SYNC (same=6, …)`.
    pub status_lines: Vec<String>,
}

impl ResyncOutput {
    /// The last `Status:` value, if any.
    pub fn status(&self) -> Option<&str> {
        self.status_lines.last().map(String::as_str)
    }

    /// Whether the last status starts with `word` (e.g. `"SYNCED"`, `"IN SYNC"`,
    /// `"CHANGES APPLIED"`, `"NO CHANGES"`).
    pub fn status_is(&self, word: &str) -> bool {
        self.status().is_some_and(|s| s.starts_with(word))
    }

    /// Whether the run failed: a Python traceback, a `FatalError`/`Error:` line, or no
    /// `Status:` line at all.
    pub fn failed(&self) -> bool {
        let all = self.combined();
        all.contains("Traceback (most recent call last)")
            || all.contains("FatalError")
            || all.lines().any(|l| l.trim_start().starts_with("Error:"))
            || self.status_lines.is_empty()
    }

    /// stdout followed by stderr, for assertion messages.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The `resync-sync` command of the peers venv (working directory and arguments not set yet).
pub fn resync_sync_command() -> Result<Command> {
    let mut cmd = Command::new(venv_bin("resync-sync")?);
    cmd.env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    Ok(cmd)
}

/// Run `resync-sync ARGS…` in `cwd` and collect its output (blocking; 5 minutes at most).
///
/// `cwd` matters: resync-sync keeps its incremental state in `.resync-client-status.cfg` in
/// its working directory. Typical arguments: `["--baseline", "--delete", SOURCE_URL, DIR]`,
/// `["--incremental", "--delete", SOURCE_URL, DIR]` (it then reads `SOURCE_URL/changelist.xml`
/// or `--changelist-uri`), `["--audit", SOURCE_URL, DIR]`; use `--hash md5`, not `--checksum`
/// (which crashes); `--noauth` plus `URI=DIR` mappings for resources on other hosts.
pub fn resync_sync<I, S>(args: I, cwd: &Path) -> Result<ResyncOutput>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = resync_sync_command()?;
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("spawn resync-sync")?;
    let mut out = child.stdout.take().context("stdout")?;
    let mut err = child.stderr.take().context("stderr")?;
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let t0 = Instant::now();
    let exit = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("resync-sync did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    let status_lines = stdout
        .lines()
        .chain(stderr.lines())
        .filter_map(|l| l.trim_start().strip_prefix("Status:"))
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    Ok(ResyncOutput {
        exit,
        stdout,
        stderr,
        status_lines,
    })
}
