//! The address guard: which IP addresses count as public, and the DNS resolver that refuses
//! names resolving to anything else.
//!
//! The guard is enforced where connections are made: the guarded client resolves every host
//! name through `GuardedResolver`, which refuses a name if any of its addresses is not
//! public (so a name cannot mix a public and a private address and let the connector pick),
//! and IP-literal hosts, which skip DNS, are checked by `check_target` before every request
//! and every redirect hop (the client follows redirects itself for this reason). Proxies are
//! disabled on both clients, so a proxy cannot connect on the guard's behalf.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use crate::Error;

/// True for addresses on the public internet: not unspecified, loopback, private (RFC 1918,
/// unique local), shared (CGNAT), link-local, multicast, broadcast, documentation,
/// benchmarking, reserved, nor an IPv6 form that embeds one of those (IPv4-mapped,
/// IPv4-compatible, NAT64, 6to4). Teredo is refused outright, since it tunnels to an
/// address this check cannot see.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network", unspecified
        || a == 10                             // private
        || a == 127                            // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)              // link-local
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)      // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)      // documentation
        || (a == 192 && b == 88 && c == 99)    // 6to4 relay anycast
        || (a == 192 && b == 168)              // private
        || (a == 198 && (b == 18 || b == 19))  // benchmarking
        || (a == 198 && b == 51 && c == 100)   // documentation
        || (a == 203 && b == 0 && c == 113)    // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // IPv4-compatible (deprecated), also covers :: and ::1.
    if s[..6] == [0; 6] {
        return false;
    }
    // NAT64 well-known prefix 64:ff9b::/96 and local-use 64:ff9b:1::/48: judge the embedded v4.
    if s[0] == 0x64 && s[1] == 0xff9b {
        if s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0 {
            let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
            return is_public_v4(v4);
        }
        return false;
    }
    // 6to4 2002::/16 embeds an IPv4 address in bits 16..48.
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return is_public_v4(v4);
    }
    !((s[0] & 0xfe00) == 0xfc00            // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80       // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0       // site-local (deprecated) fec0::/10
        || (s[0] & 0xff00) == 0xff00       // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x3fff && s[1] < 0x1000)  // documentation 3fff::/20
        || (s[0] == 0x2001 && s[1] == 0)   // Teredo
        || (s[0] == 0x2001 && s[1] < 0x200) // other IETF protocol assignments 2001::/23
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0)) // discard-only 100::/64
}

/// Checks what can be checked before a request to `url`: the scheme, and the address when
/// the host is an IP literal (those skip DNS, so [`GuardedResolver`] never sees them).
/// Host names are judged by the resolver at connect time.
pub(crate) fn check_target(url: &Url, allow_private: bool) -> Result<(), Error> {
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Error::Scheme { url: url.clone() });
    }
    if allow_private {
        return Ok(());
    }
    let ip = match url.host() {
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
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

/// Finds a [`Refusal`] in an error's source chain.
pub(crate) fn find_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Refusal>() {
            return Some(r.to_string());
        }
        cur = err.source();
    }
    None
}

/// DNS resolver of the guarded client: the system resolver (through Tokio), then the guard
/// on every address returned.
#[derive(Debug, Default)]
pub(crate) struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
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
        // Names are judged by the resolver at connect time, not here.
        assert!(check_target(&Url::parse("http://localhost/").unwrap(), false).is_ok());
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
