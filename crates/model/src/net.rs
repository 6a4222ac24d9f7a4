//! Which addresses are public: the address guard's judgement, without I/O, shared by the
//! HTTP client's guard (`rsagg-fetch`, which resolves names and checks every hop) and the
//! pipeline config's check (`rsagg check` refuses an IP-literal or `localhost` upstream
//! without `allow_private`, as a run would at its first request).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Whether `host` is a name that means this machine whatever DNS says: `localhost` and the
/// names under it (RFC 6761 section 6.3 reserves them for loopback), with or without
/// trailing dots: `x.localhost..` is such a name too, whatever a resolver makes of its empty
/// label (found by the `websub_form` fuzz target).
pub fn is_localhost_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::is_localhost_name;

    #[test]
    fn localhost_names_with_any_trailing_dots_are_localhost() {
        for h in [
            "localhost",
            "LocalHost.",
            "a.localhost",
            "aa00000.localhost...",
            "x.localhost..",
        ] {
            assert!(is_localhost_name(h), "{h}");
        }
        for h in [
            "example.com",
            "localhost.example",
            "notlocalhost",
            "example.com.",
        ] {
            assert!(!is_localhost_name(h), "{h}");
        }
    }
}
