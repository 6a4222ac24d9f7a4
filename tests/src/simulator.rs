//! resync-simulator, a changing ResourceSync Source, started through
//! `scripts/peers/sim_local.py` (loopback only, Python 3.11 fix, no autoreload).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::proc::Watched;
use crate::{free_ports, venv_bin};

/// How the simulated Source behaves (the simulator's `source.*` and `changememory.*` config).
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// `number_of_resources` at bootstrap (default 20).
    pub resources: usize,
    /// Seconds between change events (default 1.0; fractions allowed).
    pub change_delay: f64,
    /// Number of change events, then the Source stays as it is (default -1 = forever).
    pub max_events: i64,
    /// Changes the Change List keeps; older ones are dropped silently (default 1000).
    pub max_changes: usize,
    /// Any of `create`, `update`, `delete` (default all three).
    pub event_types: Vec<String>,
    /// Payload sizes are random in 0..=2×this many bytes (default 1000).
    pub average_payload: usize,
    /// `1.1` (default) or `1.0`.
    pub spec_version: String,
    /// Leave `lastmod` out of 1.1 documents.
    pub no_lastmod: bool,
    /// Seed of the random event sequence (resource ids, payload sizes, event kinds).
    pub seed: Option<u64>,
    /// Make [`Simulator::start`] also wait until `changelist.xml` answers 200 (it answers 500
    /// until the first change event); ignored when `max_events` is 0.
    pub wait_for_changelist: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            resources: 20,
            change_delay: 1.0,
            max_events: -1,
            max_changes: 1000,
            event_types: vec!["create".into(), "update".into(), "delete".into()],
            average_payload: 1000,
            spec_version: "1.1".into(),
            no_lastmod: false,
            seed: None,
            wait_for_changelist: false,
        }
    }
}

/// A running resync-simulator on `127.0.0.1:PORT` (a free port).
///
/// Serves `/.well-known/resourcesync`, `/capabilitylist.xml`, `/resourcelist.xml`,
/// `/changelist.xml` (500 until the first change) and `/resources/N`. Quirks worth knowing
/// (see `tests/README.md`): HEAD answers 405, conditional GET is ignored, `Last-Modified` is
/// ISO 8601, a Change List whose oldest kept change is a deletion has no `from`.
///
/// [`Simulator::start`] blocks until the Source Description answers 200 (and, with
/// [`SimOptions::wait_for_changelist`], the Change List). Drop stops the process (SIGTERM,
/// SIGKILL after 1 s); it also stops when the test process exits.
#[derive(Debug)]
pub struct Simulator {
    watched: Mutex<Watched>,
    port: u16,
    dir: PathBuf,
}

impl Simulator {
    /// Start a simulator. Blocking: about 0.5 s, plus up to the first change event with
    /// `wait_for_changelist` (from async code use [`Simulator::start_async`], or accept that
    /// this blocks the calling worker thread).
    pub fn start(opts: SimOptions) -> Result<Simulator> {
        let python = venv_bin("python")?;
        let wrapper = crate::peer_script("RSAGG_SIM_WRAPPER", "sim_local.py", "simulator wrapper")?;
        let port = free_ports(1)?[0];
        let dir = tempfile::Builder::new()
            .prefix("rsagg-sim-")
            .tempdir()?
            .keep();
        let log = dir.join("simulator.log");
        let mut cmd = Command::new(python);
        cmd.arg(&wrapper)
            .arg(format!("--port={port}"))
            .arg(format!("--resources={}", opts.resources))
            .arg(format!("--change-delay={}", opts.change_delay))
            .arg(format!("--max-events={}", opts.max_events))
            .arg(format!("--max-changes={}", opts.max_changes))
            .arg(format!("--event-types={}", opts.event_types.join(",")))
            .arg(format!("--average-payload={}", opts.average_payload))
            .arg(format!("--spec-version={}", opts.spec_version))
            .arg(format!(
                "--write-config={}",
                dir.join("simulator.yaml").display()
            ))
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&dir);
        if opts.no_lastmod {
            cmd.arg("--no-lastmod");
        }
        if let Some(seed) = opts.seed {
            cmd.arg(format!("--seed={seed}"));
        }
        let watched = Watched::spawn(
            "resync-simulator",
            &cmd,
            &log,
            &[dir.display().to_string()],
            Duration::from_secs(1),
        )?;
        let sim = Simulator {
            watched: Mutex::new(watched),
            port,
            dir,
        };
        sim.wait_for("/.well-known/resourcesync", Duration::from_secs(30))?;
        if opts.wait_for_changelist && opts.max_events != 0 {
            let t = Duration::from_secs_f64(30.0 + opts.change_delay * 3.0);
            sim.wait_for("/changelist.xml", t)?;
        }
        Ok(sim)
    }

    /// [`Simulator::start`] on tokio's blocking pool.
    pub async fn start_async(opts: SimOptions) -> Result<Simulator> {
        tokio::task::spawn_blocking(move || Simulator::start(opts)).await?
    }

    /// `http://127.0.0.1:PORT` (no trailing slash), the `--base-uri` of its documents.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `base_url()` + `path` (`path` starts with `/` or gets one).
    pub fn url(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{path}", self.base_url())
        } else {
            format!("{}/{path}", self.base_url())
        }
    }

    /// Its Source Description, `…/.well-known/resourcesync`.
    pub fn source_description_url(&self) -> String {
        self.url("/.well-known/resourcesync")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the Python process.
    pub fn pid(&self) -> u32 {
        self.watched.lock().unwrap_or_else(|e| e.into_inner()).pid()
    }

    /// The last lines of its log (one line per request and per change event).
    pub fn log_tail(&self, n: usize) -> String {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(n)
    }

    /// Block until `changelist.xml` answers 200 (after the first change event).
    pub fn wait_for_changelist(&self, timeout: Duration) -> Result<()> {
        self.wait_for("/changelist.xml", timeout)
    }

    /// Block until GET `path` answers 200.
    pub fn wait_for(&self, path: &str, timeout: Duration) -> Result<()> {
        wait_for_200(&self.watched, "the simulator", self.port, path, timeout)
    }
}

/// Blocks until GET `path` on 127.0.0.1:`port` answers 200, failing early (with its log) when
/// the peer process `watched` (named `what` in errors) has exited.
pub(crate) fn wait_for_200(
    watched: &Mutex<Watched>,
    what: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<()> {
    let t0 = Instant::now();
    let tail = |n| {
        watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(n)
    };
    loop {
        if !watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_running()
        {
            bail!("{what} exited; log:\n{}", tail(30));
        }
        let last = match http_status(port, path) {
            Ok(200) => return Ok(()),
            Ok(code) => code.to_string(),
            Err(e) => e.to_string(),
        };
        if t0.elapsed() > timeout {
            return Err(anyhow!(
                "GET {path} on {what} did not answer 200 within {timeout:?} \
                 (last: {last}); log:\n{}",
                tail(30)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.watched
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Status code of `GET path` on 127.0.0.1:port, with a minimal blocking HTTP/1.0 client (no
/// runtime needed).
pub(crate) fn http_status(port: u16, path: &str) -> Result<u16> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < head.len() {
        let k = s.read(&mut head[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    let line = String::from_utf8_lossy(&head[..n]);
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status in {line:?}"))?;
    Ok(code)
}
