//! Which addresses a fetch may connect to. Everything that is not plainly a public unicast
//! address is refused, including the IPv6 forms that embed an IPv4 address (mapped,
//! compatible, NAT64, 6to4), judged by the address they embed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public address, or None when it is.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4),
        IpAddr::V6(v6) => refusal_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn refusal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const RANGES: &[([u8; 4], u32, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified (0.0.0.0/8)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([10, 0, 0, 0], 8, "private (10.0.0.0/8)"),
        ([172, 16, 0, 0], 12, "private (172.16.0.0/12)"),
        ([192, 168, 0, 0], 16, "private (192.168.0.0/16)"),
        ([169, 254, 0, 0], 16, "link-local (169.254.0.0/16)"),
        ([100, 64, 0, 0], 10, "carrier-grade NAT (100.64.0.0/10)"),
        (
            [192, 0, 0, 0],
            24,
            "IETF protocol assignments (192.0.0.0/24)",
        ),
        ([192, 0, 2, 0], 24, "documentation (192.0.2.0/24)"),
        ([198, 51, 100, 0], 24, "documentation (198.51.100.0/24)"),
        ([203, 0, 113, 0], 24, "documentation (203.0.113.0/24)"),
        ([198, 18, 0, 0], 15, "benchmarking (198.18.0.0/15)"),
        ([192, 88, 99, 0], 24, "6to4 relay anycast (192.88.99.0/24)"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([240, 0, 0, 0], 4, "reserved (240.0.0.0/4)"),
    ];
    RANGES
        .iter()
        .find(|(net, bits, _)| in_v4(ip, *net, *bits))
        .map(|(_, _, why)| *why)
}

fn refusal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded = |hi: usize| {
        Ipv4Addr::new(
            (s[hi] >> 8) as u8,
            s[hi] as u8,
            (s[hi + 1] >> 8) as u8,
            s[hi + 1] as u8,
        )
    };
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // ::ffff:a.b.c.d is judged as the IPv4 address it maps; ::a.b.c.d is deprecated.
    if s[..6] == [0, 0, 0, 0, 0, 0xffff] {
        return refusal_v4(embedded(6)).map(|_| "IPv4-mapped form of a non-public address");
    }
    if s[..6] == [0; 6] {
        return Some("IPv4-compatible form (deprecated)");
    }
    // 64:ff9b::/96 NAT64 and 2002::/16 6to4 carry an IPv4 address.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && refusal_v4(embedded(6)).is_some() {
        return Some("NAT64 form of a non-public address");
    }
    if s[0] == 0x2002 && refusal_v4(embedded(1)).is_some() {
        return Some("6to4 form of a non-public address");
    }
    let first = s[0];
    if first & 0xfe00 == 0xfc00 {
        return Some("unique local (fc00::/7)");
    }
    if first & 0xffc0 == 0xfe80 {
        return Some("link-local (fe80::/10)");
    }
    if first & 0xffc0 == 0xfec0 {
        return Some("site-local (fec0::/10)");
    }
    if first & 0xff00 == 0xff00 {
        return Some("multicast");
    }
    if s[0] == 0x2001 && s[1] == 0x0db8 {
        return Some("documentation (2001:db8::/32)");
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some("Teredo (2001::/32), which can reach any IPv4 address");
    }
    if s[..4] == [0x100, 0, 0, 0] {
        return Some("discard-only (100::/64)");
    }
    None
}
