//! What a transport failure was, read from the causes reqwest keeps behind its own message.
//!
//! reqwest's message for every connection failure is `error sending request`, and for a body
//! cut short `error decoding response body`; what happened (a name that does not resolve, a
//! port nobody listens on, a TLS handshake that failed, a peer that hung up) is only in the
//! chain of `source()`s, which a log line with `%error` never shows. [`Cause`] names it, and
//! [`chain`] writes the whole chain, so the crate's errors say both.

use std::fmt;
use std::io;

use crate::guard::Unresolved;

/// What kind of transport failure an [`Error::Http`](crate::Error::Http) was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The host name does not resolve (DNS).
    Dns,
    /// Nothing accepts connections at that address and port.
    ConnectionRefused,
    /// The peer reset or closed the connection during the exchange.
    ConnectionReset,
    /// Connecting took longer than the connect timeout.
    ConnectTimeout,
    /// The TLS handshake failed (certificate, protocol, a peer that does not speak TLS).
    Tls,
    /// Any other failure (HTTP protocol errors, …); the chain says which.
    Other,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::Dns => "DNS lookup failed",
            Cause::ConnectionRefused => "connection refused",
            Cause::ConnectionReset => "connection reset by the peer",
            Cause::ConnectTimeout => "connect timed out",
            Cause::Tls => "TLS handshake failed",
            Cause::Other => "transport error",
        })
    }
}

/// A transport failure as the crate's errors carry it (boxed, so they stay small): its
/// kind, and reqwest's error with its causes written out. reqwest's error itself is kept as
/// text only: as a `source`, a log writing the chain would repeat it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transport {
    /// What kind of failure it was.
    pub cause: Cause,
    /// The error's message and its sources', joined with `: ` ([`chain`]).
    pub chain: String,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.cause, self.chain)
    }
}

/// The kind of failure `e` was, from the errors in its chain.
pub(crate) fn classify(e: &reqwest::Error) -> Cause {
    let connecting = e.is_connect();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<Unresolved>() {
            return Cause::Dns;
        }
        // An I/O error may wrap another (hyper-util wraps the TLS stream's), and its
        // `source()` skips the wrapped one: look inside.
        let mut io = err.downcast_ref::<io::Error>();
        while let Some(e) = io {
            match e.kind() {
                io::ErrorKind::ConnectionRefused => return Cause::ConnectionRefused,
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof => return Cause::ConnectionReset,
                // While connecting, only the TLS handshake reads data it can find invalid
                // (tokio-rustls reports rustls' errors, certificates included, this way).
                io::ErrorKind::InvalidData if connecting => return Cause::Tls,
                _ => {}
            }
            io = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<io::Error>());
        }
        cur = err.source();
    }
    if e.is_connect() && e.is_timeout() {
        Cause::ConnectTimeout
    } else {
        Cause::Other
    }
}

/// `e`'s message and those of its sources, joined with `: ` (a source whose message the
/// previous one already ends with is left out: some errors repeat their cause).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        let msg = err.to_string();
        if !msg.is_empty() && !out.ends_with(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        cur = err.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error sending request")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_chain_is_written_out() {
        let e = Outer(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        assert_eq!(chain(&e), "error sending request: refused");
        let plain = io::Error::other("alone");
        assert_eq!(chain(&plain), "alone");
    }
}
