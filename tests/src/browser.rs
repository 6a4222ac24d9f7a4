//! Headless Chromium (Debian's `chromium` package, installed by `scripts/peers.sh install`)
//! loading a page and printing its DOM after load, for tests of what a browser shows.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The browser: `$RSAGG_CHROMIUM`, else `/usr/bin/chromium`; an error saying how to install
/// it when it is missing (tests that need it fail rather than skip).
pub fn chromium_bin() -> Result<PathBuf> {
    let p = std::env::var_os("RSAGG_CHROMIUM")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !p.is_file() {
        bail!(
            "{} not found: the browser tests need Debian's chromium; run `bash scripts/peers.sh install` \
             (as root, or with sudo; it runs `apt-get install -y chromium` when /usr/bin/chromium is missing) \
             or set RSAGG_CHROMIUM",
            p.display()
        );
    }
    Ok(p)
}

/// Loads `url` in headless Chromium (a fresh profile, no background networking, which this
/// machine's closed network refuses) and returns the DOM after load (`--dump-dom`), as
/// HTML. Fails after `timeout`, stopping the browser's process group.
pub fn dump_dom(url: &str, timeout: Duration) -> Result<String> {
    dump_dom_with(url, timeout, &[])
}

/// [`dump_dom`] in a window `width` × `height` CSS pixels (what a layout check measures
/// against).
pub fn dump_dom_sized(url: &str, width: u32, height: u32, timeout: Duration) -> Result<String> {
    dump_dom_with(url, timeout, &[format!("--window-size={width},{height}")])
}

fn dump_dom_with(url: &str, timeout: Duration, extra: &[String]) -> Result<String> {
    let bin = chromium_bin()?;
    let profile = tempfile::Builder::new()
        .prefix("rsagg-e2e-chromium-")
        .tempdir()?;
    let stderr_path = profile.path().join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path)?;
    let mut child = Command::new(&bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .args(extra)
        .arg(format!(
            "--user-data-dir={}",
            profile.path().join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Its own process group, so a timeout stops its helpers too.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().context("chromium stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > timeout {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            bail!(
                "chromium did not finish loading {url} within {timeout:?}; stderr:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
    if !status.success() || dom.trim().is_empty() {
        bail!(
            "chromium --dump-dom {url} exited with {status} and printed {} bytes; stderr:\n{}",
            dom.len(),
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
    }
    Ok(dom)
}
