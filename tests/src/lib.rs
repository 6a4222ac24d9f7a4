//! rsagg-e2e: the harness for rsagg's end-to-end tests (`tests/tests/e2e/*.rs`).
//!
//! It starts real peers on loopback, each on free ports chosen at start, and stops them again:
//!
//! - [`Seaweed`]: SeaweedFS `weed mini` as the S3 store ([`Seaweed::shared`] = one per test
//!   binary; give every test its own prefix, e.g. from [`unique_prefix`]).
//! - [`Simulator`]: resync-simulator, a changing ResourceSync Source, through
//!   `scripts/peers/sim_local.py`.
//! - [`FixtureServer`]: an in-process HTTP server over a directory, with scripted failures,
//!   extra headers, gzip, conditional GET and hit counters.
//! - [`OaiProvider`]: an OAI-PMH 2.0 data provider (pyoai's server, through
//!   `scripts/peers/oai_provider.py`) over a JSON repository file a test edits.
//! - [`resync_sync`]: the reference Destination `resync-sync`.
//! - [`rsagg_bin`]: the `rsagg` binary under test.
//! - WebSub (`websub.rs`): [`FlaskHub`] (flask-websub, the stock hub,
//!   through `scripts/peers/websub_hub.py`), [`RsaggHub`] (`rsagg hub`), [`TestSubscriber`]
//!   (records verifications and deliveries, checks signatures, fails on demand) and
//!   [`NotifyingSource`] (a fixture Source with a change-notification channel that publishes
//!   its payloads in either form).
//! - [`dump_dom`]: headless Chromium (Debian's `chromium`, from `scripts/peers.sh install`)
//!   loading a page and printing its DOM.
//!
//! The Python peers come from `bash scripts/peers.sh install` (a venv under
//! `${RSAGG_CACHE:-~/.cache/rsagg}/peers/venv`); `scripts/test.sh` installs them and
//! exports `RSAGG_PEERS_VENV`, `RSAGG_WEED`, `RSAGG_SIM_WRAPPER` and `RSAGG_WEBSUB_HUB`,
//! which this crate reads (falling back to the default cache location and this checkout's
//! `scripts/`).
//!
//! No process outlives the test binary: every peer runs under a watchdog shell that stops it
//! when the test process's end closes a pipe (see `proc.rs`), whether or not Drop runs.

mod browser;
mod fixture;
mod oai;
mod proc;
mod resync;
mod seaweed;
mod serve;
mod simulator;
mod websub;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

pub use browser::{chromium_bin, dump_dom, dump_dom_sized};
pub use fixture::{Failure, FixtureServer, Gzip, RequestRecord, ServerThread};
pub use oai::{OaiOptions, OaiProvider};
pub use proc::Watched;
pub use resync::{ResyncOutput, resync_sync};
pub use seaweed::Seaweed;
pub use serve::RsaggServer;
pub use simulator::{SimOptions, Simulator};
pub use websub::{
    Delivery, FlaskHub, FlaskMode, HubUnderTest, NotifyingSource, Payload, PublishForm, Published,
    RsaggHub, SignatureCheck, Subscription, TestSubscriber, Verification, capability_entry,
    encode_document, tick_after,
};

/// The peers venv: `$RSAGG_PEERS_VENV`, else `$PEERS_DIR/venv`, else
/// `${RSAGG_CACHE:-$HOME/.cache/rsagg}/peers/venv` (the layout of `scripts/peers.sh`).
pub fn peers_venv() -> PathBuf {
    if let Some(v) = std::env::var_os("RSAGG_PEERS_VENV").filter(|v| !v.is_empty()) {
        return PathBuf::from(v);
    }
    if let Some(p) = std::env::var_os("PEERS_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(p).join("venv");
    }
    let cache = std::env::var_os("RSAGG_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into()))
                .join(".cache/rsagg")
        });
    cache.join("peers/venv")
}

/// An executable of the peers venv (`bin/NAME`), or an error saying how to install it.
pub fn venv_bin(name: &str) -> Result<PathBuf> {
    let p = peers_venv().join("bin").join(name);
    if !p.is_file() {
        bail!(
            "{} not found: install the test peers with `bash scripts/peers.sh install` \
             (or run `bash scripts/test.sh`), or set RSAGG_PEERS_VENV",
            p.display()
        );
    }
    Ok(p)
}

/// This checkout's root directory (the workspace, parent of `tests/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A peer's launcher script: `$VAR` when set, else `scripts/peers/NAME` of this checkout; an
/// error naming `what` when it is not a file.
pub(crate) fn peer_script(var: &str, name: &str, what: &str) -> Result<PathBuf> {
    let p = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("scripts/peers").join(name));
    if !p.is_file() {
        bail!("{what} {} not found", p.display());
    }
    Ok(p)
}

/// `tests/fixtures/` of this checkout.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("tests/fixtures")
}

/// A prefix no other test of this run (nor of an earlier run) uses: `NAME-PID-NANOS-N`,
/// for object-store keys on the shared [`Seaweed`].
pub fn unique_prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{nanos:09}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// `n` distinct free TCP ports on 127.0.0.1, chosen by binding port 0 (all held at once, so
/// they differ), never handed out twice by this process. The ports are released before the
/// caller binds them: a small race with other processes remains.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    free_ports_with_offset(n, None)
}

/// Like [`free_ports`], but each port `p` also has `p + offset` free (and not handed out):
/// for servers that derive a second port, like SeaweedFS's gRPC port `p + 10000`. Returns the
/// base ports only.
pub fn free_port_pairs(n: usize, offset: u16) -> Result<Vec<u16>> {
    free_ports_with_offset(n, Some(offset))
}

fn free_ports_with_offset(n: usize, offset: Option<u16>) -> Result<Vec<u16>> {
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut held = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    let taken = |p: u16, given: &Vec<u16>, ports: &Vec<u16>| {
        given.contains(&p)
            || ports.contains(&p)
            || offset.is_some_and(|o| ports.iter().any(|q| q.checked_add(o) == Some(p)))
    };
    for _ in 0..(n * 50 + 200) {
        if ports.len() == n {
            break;
        }
        let l = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        held.push(l);
        if taken(port, &given, &ports) {
            continue;
        }
        match offset {
            None => ports.push(port),
            Some(o) => {
                let Some(second) = port.checked_add(o) else {
                    continue;
                };
                if taken(second, &given, &ports) {
                    continue;
                }
                if let Ok(l2) = TcpListener::bind(("127.0.0.1", second)) {
                    held.push(l2);
                    ports.push(port);
                }
            }
        }
    }
    if ports.len() < n {
        bail!("could not find {n} free loopback ports");
    }
    given.extend(&ports);
    if let Some(o) = offset {
        given.extend(ports.iter().map(|p| p + o));
    }
    Ok(ports)
}

/// The `rsagg` binary under test.
///
/// Tests in `tests/tests/e2e/` belong to package `rsagg-e2e`, so Cargo does not set
/// `CARGO_BIN_EXE_rsagg` for them. Order of search: `$RSAGG_BIN`; then `rsagg` next to the
/// test executable's `deps/` directory (`<target>/<profile>/rsagg`), which
/// `cargo test --workspace` (what `scripts/test.sh` runs) builds because `rsagg-cli` is a
/// workspace member with integration tests. When it is missing (e.g. after
/// `cargo test -p rsagg-e2e` alone) this runs `cargo build -p rsagg-cli --bin rsagg` once
/// (same target directory, debug profile) and, if that fails, returns an error saying so.
/// That fallback can take minutes on a cold or differently-featured target directory (seen: 7 min
/// on 2 cores). It does not rebuild a stale binary: run the whole workspace's tests, or
/// `cargo build -p rsagg-cli` first.
pub fn rsagg_bin() -> Result<PathBuf> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    if let Some(p) = std::env::var_os("RSAGG_BIN").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("RSAGG_BIN={} is not a file", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("current_exe")?;
    // <target>/<profile>/deps/<test>-<hash>  →  <target>/<profile>/rsagg
    let profile_dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .context("test executable has no parent directory")?
        .to_path_buf();
    let bin = profile_dir.join(format!("rsagg{}", std::env::consts::EXE_SUFFIX));
    if bin.is_file() {
        return Ok(bin);
    }
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.as_ref() {
        return Ok(p.clone());
    }
    let target_dir = profile_dir
        .parent()
        .context("profile dir has no parent")?
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "[rsagg-e2e] {} missing: running cargo build -p rsagg-cli --bin rsagg \
         (can take minutes: building one package unifies features differently from the workspace)",
        bin.display()
    );
    let st = std::process::Command::new(cargo)
        .args(["build", "-p", "rsagg-cli", "--bin", "rsagg"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .current_dir(repo_root())
        .status();
    match st {
        Ok(s) if s.success() && bin.is_file() => {
            *built = Some(bin.clone());
            Ok(bin)
        }
        other => bail!(
            "the rsagg binary is not built ({} missing; building it gave {other:?}): \
             run `cargo build -p rsagg-cli` (same CARGO_TARGET_DIR) or `cargo test --workspace`",
            bin.display()
        ),
    }
}
