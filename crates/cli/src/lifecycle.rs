//! What every server command (`serve`, `hub`, `run --follow --listen`) shares: the
//! `listening http://HOST:PORT` line once it accepts connections (`docs/contract.md`),
//! stopping on SIGINT or SIGTERM, and the inbound limits of the listener.

use std::io::Write;
use std::time::Duration;

use rsagg_server::Limits;

/// `--header-timeout`, `--max-connections` and `--max-inflight-body-bytes`: what a client may
/// hold of a listener, so a client holding half-sent requests, many idle connections or many
/// large bodies cannot keep the server's connections (and tasks, and memory) for itself; and
/// `--probe-listen`, the probes' own listener, which such clients cannot fill.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LimitArgs {
    /// Disconnect a client that has not sent a complete request head within this time;
    /// also how long a kept-alive connection may stay idle between requests.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = positive_duration)]
    header_timeout: Duration,
    /// Connections served at once; beyond it new connections wait (in the listen backlog,
    /// not accepted) until one closes.
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_CONNECTIONS, value_name = "N",
          value_parser = at_least_one)]
    max_connections: usize,
    /// Request body bytes held at once by all connections together; a body that cannot
    /// have its bytes within 5 s is answered 503 with Retry-After. At least the largest body
    /// one request may send (the hub: 52428800; run --listen: 10485760).
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_INFLIGHT_BODY_BYTES, value_name = "BYTES",
          value_parser = at_least_one)]
    max_inflight_body_bytes: usize,
    /// Also answer /healthz and /readyz (only those) on this address (`HOST:PORT`), with
    /// connections of their own: a flood of the main listener cannot starve the probes.
    /// Port 0 picks a free port, reported on stdout as `probes http://HOST:PORT`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) probe_listen: Option<String>,
}

impl LimitArgs {
    /// The server crate's limits, once `--max-inflight-body-bytes` is checked against
    /// `largest_body`, the most one request of this server may send: a smaller budget would
    /// answer such a request 503 forever.
    pub(crate) fn limits(&self, largest_body: usize) -> Result<Limits, String> {
        if self.max_inflight_body_bytes < largest_body {
            return Err(format!(
                "--max-inflight-body-bytes {} is less than the {largest_body} bytes one request \
                 may send",
                self.max_inflight_body_bytes
            ));
        }
        Ok(Limits::new(self.header_timeout, self.max_connections)
            .with_inflight_body_bytes(self.max_inflight_body_bytes))
    }
}

/// A `humantime` duration above zero (a zero header timeout would cut every connection).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be more than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// A count of at least one (no connection at all would serve nothing).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Prints the one line tests and scripts wait for (`--listen 127.0.0.1:0` picks the port),
/// `listening http://HOST:PORT`, and flushes it.
pub(crate) fn announce(addr: std::net::SocketAddr) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening http://{addr}")?;
    out.flush()
}

/// Prints `probes http://HOST:PORT`, the probe listener's address (before the `listening`
/// line, so whoever waits for that one knows both), and flushes it.
pub(crate) fn announce_probes(addr: Option<std::net::SocketAddr>) -> std::io::Result<()> {
    let Some(addr) = addr else { return Ok(()) };
    let mut out = std::io::stdout().lock();
    writeln!(out, "probes http://{addr}")?;
    out.flush()
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
