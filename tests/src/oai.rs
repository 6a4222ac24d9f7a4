//! [`OaiProvider`]: an OAI-PMH 2.0 data provider, pyoai's server (`scripts/peers/oai_provider.py`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;

use crate::proc::Watched;
use crate::simulator::wait_for_200;
use crate::{free_ports, venv_bin};

/// How to start an [`OaiProvider`]: real providers' quirks, on demand.
#[derive(Debug, Clone, Default)]
pub struct OaiOptions {
    /// Records a page (pyoai's `resumption_batch_size`); 0: 10.
    pub batch: usize,
    /// Answer `ListRecords` as if no `from`/`until` was given.
    pub ignore_from: bool,
    /// Answer the first N requests `503` with `Retry-After: 1`.
    pub busy: usize,
    /// Answer the Nth request carrying a `resumptionToken` with `badResumptionToken`.
    pub expire_token: usize,
}

/// An OAI-PMH provider over a JSON repository file (format: the script's documentation),
/// read again whenever it changes, so a test edits the repository between harvests.
///
/// [`OaiProvider::start`] blocks until `Identify` answers 200. Drop stops the process; it
/// also stops when the test process exits.
#[derive(Debug)]
pub struct OaiProvider {
    watched: Mutex<Watched>,
    port: u16,
    dir: PathBuf,
}

impl OaiProvider {
    /// Starts a provider over `data` (the JSON repository file). Blocking: about 0.5 s.
    pub fn start(data: &Path, opts: &OaiOptions) -> Result<OaiProvider> {
        let python = venv_bin("python")?;
        let script = crate::peer_script(
            "RSAGG_OAI_PROVIDER",
            "oai_provider.py",
            "OAI-PMH provider script",
        )?;
        let port = free_ports(1)?[0];
        let dir = tempfile::Builder::new()
            .prefix("rsagg-oai-")
            .tempdir()?
            .keep();
        let mut cmd = Command::new(python);
        cmd.arg(&script)
            .arg(format!("--data={}", data.display()))
            .arg(format!("--port={port}"))
            .arg(format!(
                "--batch={}",
                if opts.batch == 0 { 10 } else { opts.batch }
            ))
            .arg(format!("--busy={}", opts.busy))
            .arg(format!("--expire-token={}", opts.expire_token))
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&dir);
        if opts.ignore_from {
            cmd.arg("--ignore-from");
        }
        let watched = Watched::spawn(
            "oai-provider",
            &cmd,
            &dir.join("provider.log"),
            &[dir.display().to_string()],
            Duration::from_secs(1),
        )?;
        let p = OaiProvider {
            watched: Mutex::new(watched),
            port,
            dir,
        };
        p.wait_ready(Duration::from_secs(30), opts.busy == 0)?;
        Ok(p)
    }

    /// The provider's base URL, `http://127.0.0.1:PORT/oai`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/oai", self.port)
    }

    /// Requests answered so far, per verb (`GET /counts`).
    pub fn counts_url(&self) -> String {
        format!("http://127.0.0.1:{}/counts", self.port)
    }

    /// The last lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(n)
    }

    /// Blocks until the provider answers (`/counts`, which neither counts nor consumes the
    /// `--busy` answers; with `identify`, also `Identify` with 200).
    fn wait_ready(&self, timeout: Duration, identify: bool) -> Result<()> {
        let path = if identify {
            "/oai?verb=Identify"
        } else {
            "/counts"
        };
        wait_for_200(
            &self.watched,
            "the OAI-PMH provider",
            self.port,
            path,
            timeout,
        )
    }
}

impl Drop for OaiProvider {
    fn drop(&mut self) {
        self.watched
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
