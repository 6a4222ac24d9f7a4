//! The address guard: which IP addresses count as public, and the DNS resolver that refuses
//! names resolving to anything else.
//!
//! The guard is enforced where connections are made: the guarded client resolves every host
//! name through `GuardedResolver`, which refuses a name if any of its addresses is not
//! public (so a name cannot mix a public and a private address and let the connector pick),
//! and IP-literal hosts, which skip DNS, are checked by `check_target` before every request
//! and every redirect hop (the client follows redirects itself for this reason). Proxies are
//! disabled on both clients, so a proxy cannot connect on the guard's behalf.
//!
//! The pieces are public so that the other outgoing requests rsagg makes on behalf of
//! someone else — the hub's verifications, deliveries and topic fetches (`rsagg-websub`), the
//! subscriber's requests to an upstream's hub — go through the same guard rather than a copy
//! of it: [`client_builder`] gives a `reqwest` client set up as the guard needs,
//! [`check_target`] judges a URL before a request, and [`find_refusal`] recognises the
//! resolver's refusal in a request's error.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use crate::Error;

use rsagg_model::net::is_localhost_name;
pub use rsagg_model::net::is_public;

/// A `reqwest` client builder set up as the guard needs; the caller adds timeouts and the
/// user agent, then builds.
///
/// - No proxy, ever: a proxy would make the connection on the guard's behalf, and the
///   resolver would only see the proxy's address.
/// - No automatic redirects: a hop is a new target, so it must either be checked again
///   ([`check_target`], then the request through the same client; `Fetcher::get` does this)
///   or not followed at all (the hub and the subscriber take a 3xx as the answer).
/// - Unless `allow_private`, host names resolve through [`GuardedResolver`], so the address a
///   connection is made to is the address that was judged. IP literals skip DNS: check them
///   with [`check_target`] before every request.
pub fn client_builder(allow_private: bool) -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if allow_private {
        b.dns_resolver(std::sync::Arc::new(SystemResolver))
    } else {
        b.dns_resolver(std::sync::Arc::new(GuardedResolver))
    }
}

/// Checks what can be checked before a request to `url`: the scheme, and, unless
/// `allow_private`, the address when the host is an IP literal (those skip DNS, so
/// [`GuardedResolver`] never sees them) and `localhost` names (RFC 6761 6.3: always
/// loopback). Other host names are judged by the resolver at connect time.
///
/// Errors: [`Error::Scheme`] for anything but `http`/`https` with a host,
/// [`Error::Refused`] (the `reason` names the address) for a non-public target.
pub fn check_target(url: &Url, allow_private: bool) -> Result<(), Error> {
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Error::Scheme { url: url.clone() });
    }
    if allow_private {
        return Ok(());
    }
    let ip = match url.host() {
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(Host::Domain(d)) if is_localhost_name(d) => {
            return Err(Error::Refused {
                url: url.clone(),
                reason: format!("{d} is a loopback name (RFC 6761 6.3)"),
            });
        }
        _ => return Ok(()),
    };
    if is_public(ip) {
        Ok(())
    } else {
        Err(Error::Refused {
            url: url.clone(),
            reason: format!("{ip} is not a public address"),
        })
    }
}

/// Why the resolver refused a name; found again in the source chain of the client's error.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) host: String,
    pub(crate) addr: IpAddr,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves to {}, which is not a public address",
            self.host, self.addr
        )
    }
}

impl std::error::Error for Refusal {}

/// Finds the resolver's refusal in an error's source chain (a request of a client built by
/// [`client_builder`] fails with it when a name resolves to a non-public address) and
/// returns its text, which names the host and the address.
pub fn find_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Refusal>() {
            return Some(r.to_string());
        }
        cur = err.source();
    }
    None
}

/// A host name the system resolver could not resolve: its own error type, so that a DNS
/// failure can be told from the other connect failures (see `cause.rs`).
#[derive(Debug)]
pub(crate) struct Unresolved {
    pub(crate) host: String,
    pub(crate) source: std::io::Error,
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot resolve {}", self.host)
    }
}

impl std::error::Error for Unresolved {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The addresses of `host` from the system resolver (through Tokio).
async fn lookup(host: &str) -> Result<Vec<SocketAddr>, Unresolved> {
    match tokio::net::lookup_host((host, 0)).await {
        Ok(addrs) => Ok(addrs.collect()),
        Err(source) => Err(Unresolved {
            host: host.to_owned(),
            source,
        }),
    }
}

/// DNS resolver of the unguarded client (`allow_private`): the system resolver, as hyper's
/// own would be, with failures as [`Unresolved`].
#[derive(Debug, Default, Clone, Copy)]
struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = lookup(&host).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// DNS resolver of the guarded client: the system resolver (through Tokio), then the guard
/// on every address returned. [`client_builder`] installs it.
#[derive(Debug, Default, Clone, Copy)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = lookup(&host).await?;
            if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(Box::new(Refusal {
                    host,
                    addr: bad.ip(),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_addresses() {
        for s in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::127.0.0.1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "2001:db8::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
            "2001:0:4136:e378::1",
        ] {
            assert!(!is_public(ip(s)), "{s} must not be public");
        }
        for s in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2a00:1450:4001::1",
        ] {
            assert!(is_public(ip(s)), "{s} must be public");
        }
    }

    #[test]
    fn checks_ip_literal_targets_and_schemes() {
        let refused = |u: &str| {
            matches!(
                check_target(&Url::parse(u).unwrap(), false),
                Err(Error::Refused { .. })
            )
        };
        assert!(refused("http://127.0.0.1:8080/"));
        assert!(refused("http://[::ffff:127.0.0.1]/"));
        assert!(refused("http://[::1]/"));
        assert!(refused("http://2130706433/"), "decimal form of 127.0.0.1");
        assert!(refused("http://0x7f.1/"), "hex form of 127.0.0.1");
        assert!(refused("https://169.254.169.254/latest/meta-data"));
        assert!(check_target(&Url::parse("http://8.8.8.8/").unwrap(), false).is_ok());
        // Names are judged by the resolver at connect time, not here…
        assert!(check_target(&Url::parse("http://example.org/").unwrap(), false).is_ok());
        // …except the loopback names of RFC 6761 6.3.
        assert!(refused("http://localhost:8080/"));
        assert!(refused("http://LocalHost./"));
        assert!(refused("http://api.localhost/"));
        assert!(check_target(&Url::parse("http://localhost/").unwrap(), true).is_ok());
        assert!(check_target(&Url::parse("http://notlocalhost/").unwrap(), false).is_ok());
        assert!(check_target(&Url::parse("http://127.0.0.1/").unwrap(), true).is_ok());
        assert!(matches!(
            check_target(&Url::parse("file:///etc/passwd").unwrap(), true),
            Err(Error::Scheme { .. })
        ));
        assert!(matches!(
            check_target(&Url::parse("ftp://8.8.8.8/").unwrap(), false),
            Err(Error::Scheme { .. })
        ));
    }

    #[tokio::test]
    async fn resolver_refuses_names_of_loopback() {
        let r = GuardedResolver;
        let err = match r.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let msg = find_refusal(err.as_ref()).expect("a Refusal");
        assert!(msg.contains("localhost"), "{msg}");
    }
}
