//! Child processes that cannot outlive the test process.
//!
//! Every peer is started as `sh -c WATCHDOG sh COMMAND…` in a process group of its own, with
//! the shell's standard input a pipe whose only write end this process holds (Rust opens its
//! pipes close-on-exec, so no other child inherits it). The watchdog shell starts the command in
//! the background, prints its PID, then reads its standard input until end of file. End of file
//! comes when [`Watched`] is dropped, or when this process exits in any way (panic, `exit`,
//! SIGKILL): the kernel closes the write end. The shell then sends SIGTERM to the command, waits
//! up to the grace period, sends SIGKILL, waits for it and removes the paths it was given.
//! So a `static` peer (never dropped) still goes away when the test binary ends.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The watchdog. `$1` grace in tenths of a second, then the command and its arguments.
/// `RSAGG_WATCH_RM`: whitespace-separated paths (shell globs allowed) removed at the end.
const WATCHDOG: &str = r#"
grace=$1; shift
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
while read -r _line; do :; done
kill -TERM "$pid" 2>/dev/null
i=0
while kill -0 "$pid" 2>/dev/null && [ "$i" -lt "$grace" ]; do sleep 0.1; i=$((i+1)); done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
for p in $RSAGG_WATCH_RM; do rm -rf -- $p; done
exit 0
"#;

/// A command running under the watchdog shell (see the module docs).
#[derive(Debug)]
pub struct Watched {
    name: String,
    shell: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    log: PathBuf,
    grace: Duration,
}

impl Watched {
    /// Start `cmd` (program and arguments; its environment and working directory are kept)
    /// with stdout and stderr appended to `log`. `cleanup` is removed once it has exited.
    pub fn spawn(
        name: &str,
        cmd: &Command,
        log: &Path,
        cleanup: &[String],
        grace: Duration,
    ) -> Result<Watched> {
        for c in cleanup {
            if c.chars().any(char::is_whitespace) {
                bail!("cleanup path with whitespace not supported: {c:?}");
            }
        }
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open log {}", log.display()))?;
        let err = out.try_clone()?;
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(((grace.as_millis() / 100).max(1)).to_string())
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .env("RSAGG_WATCH_RM", cleanup.join(" "))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .process_group(0);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            sh.current_dir(dir);
        }
        // the command's output goes to the shell's stderr (the log); stdout only carries the PID
        drop(out);
        let mut shell = sh.spawn().context("spawn sh")?;
        let stdin = shell.stdin.take();
        let stdout = shell.stdout.take().context("no stdout pipe")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("read pid from watchdog")?;
        let pid: u32 = line
            .trim()
            .parse()
            .with_context(|| format!("watchdog printed {line:?}, not a pid"))?;
        Ok(Watched {
            name: name.to_string(),
            shell,
            stdin,
            pid,
            log: log.to_path_buf(),
            grace,
        })
    }

    /// PID of the command itself (not of the watchdog shell).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the command is still running (Linux: `/proc`; elsewhere assumed running while
    /// the watchdog is).
    pub fn is_running(&mut self) -> bool {
        if let Ok(Some(_)) = self.shell.try_wait() {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => {
                // state is the field after the parenthesised command name
                let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
                !matches!(state, Some(Some('Z' | 'X')))
            }
            Err(_) => !Path::new("/proc/self").exists(),
        }
    }

    /// The last `n` lines of the log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    /// An error naming the command, with the tail of its log, once it is no longer running.
    pub fn ensure_running(&mut self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        bail!(
            "{} exited; log {}:\n{}",
            self.name,
            self.log.display(),
            self.log_tail(40)
        )
    }

    /// Whether a line of the log satisfies `found`; an error when the command is gone.
    pub fn log_has(&mut self, found: impl Fn(&str) -> bool) -> Result<bool> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        if text.lines().any(found) {
            return Ok(true);
        }
        self.ensure_running()?;
        Ok(false)
    }

    /// The URL of the `listening http://HOST:PORT` line in the log (`docs/contract.md`:
    /// every rsagg server prints it once it accepts connections), with a trailing `/`.
    pub fn wait_listening(&mut self, timeout: Duration) -> Result<String> {
        let t0 = Instant::now();
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(url) = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("listening "))
                .filter(|u| u.starts_with("http://"))
            {
                return Ok(format!("{}/", url.trim_end_matches('/')));
            }
            self.ensure_running()?;
            if t0.elapsed() > timeout {
                bail!(
                    "{} printed no `listening` line within {timeout:?}; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop the command (SIGTERM, SIGKILL after the grace period) and wait for the watchdog.
    pub fn stop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + self.grace + Duration::from_secs(3);
        loop {
            match self.shell.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => break,
            }
        }
        // the watchdog did not finish: kill the whole group (watchdog and command)
        let pgid = self.shell.id();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.shell.kill();
        let _ = self.shell.wait();
        eprintln!(
            "[rsagg-e2e] {} (pid {}) had to be killed",
            self.name, self.pid
        );
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn log_tail(path: &Path, n: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
