//! What every server command (`serve`, `hub`, `run --follow --listen`) shares: the
//! `listening http://HOST:PORT` line once it accepts connections (`docs/contract.md`), and
//! stopping on SIGINT or SIGTERM.

use std::io::Write;

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
