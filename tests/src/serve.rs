//! `rsagg serve` as a child process, on a port chosen before its pipelines are written
//! (the collection's `base_url` names it, so the documents' URIs are the ones a Destination
//! can fetch).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};

use crate::proc::Watched;
use crate::simulator::http_status;
use crate::{free_ports, rsagg_bin};

/// A running `rsagg serve`, stopped (by PID, under the watchdog) when dropped.
#[derive(Debug)]
pub struct RsaggServer {
    watched: Mutex<Watched>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RsaggServer {
    /// A free port on 127.0.0.1 for a server to be started later with [`RsaggServer::start`].
    pub fn pick_port() -> Result<u16> {
        Ok(free_ports(1)?[0])
    }

    /// Starts `rsagg serve PIPELINES… --listen 127.0.0.1:port` with `env` added, and waits
    /// until `/robots.txt` answers 200.
    pub fn start(port: u16, pipelines: &[&Path], env: &[(String, String)]) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-serve-")
            .tempdir()?;
        let log: PathBuf = dir.path().join("serve.log");
        let mut cmd = Command::new(rsagg_bin()?);
        cmd.arg("serve")
            .args(pipelines)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let watched = Watched::spawn("rsagg-serve", &cmd, &log, &[], Duration::from_secs(2))?;
        let server = RsaggServer {
            watched: Mutex::new(watched),
            port,
            _dir: dir,
        };
        server.wait_ready(Duration::from_secs(30))?;
        Ok(server)
    }

    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            {
                let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
                if !w.is_running() {
                    bail!("rsagg serve exited; log:\n{}", w.log_tail(30));
                }
            }
            let last = match http_status(self.port, "/robots.txt") {
                Ok(200) => return Ok(()),
                Ok(code) => code.to_string(),
                Err(e) => e.to_string(),
            };
            if t0.elapsed() > timeout {
                return Err(anyhow!(
                    "rsagg serve did not answer within {timeout:?} (last: {last}); log:\n{}",
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(n)
    }
}
