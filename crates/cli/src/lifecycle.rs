//! What every server command (`serve`, `hub`, `run --follow --listen`) shares: the
//! `listening http://HOST:PORT` line once it accepts connections (`docs/contract.md`),
//! stopping on SIGINT or SIGTERM, and the inbound limits of the listener.

use std::io::Write;
use std::time::Duration;

use rsagg_server::Limits;

/// `--header-timeout` and `--max-connections`: what a client may hold of a listener, so a
/// client holding half-sent requests or many idle connections cannot keep the server's
/// connections (and tasks) for itself.
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
}

impl LimitArgs {
    /// The server crate's limits.
    pub(crate) fn limits(&self) -> Limits {
        Limits::new(self.header_timeout, self.max_connections)
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
