//! Who a request comes from: the connection's peer address, or, when that peer is one of the
//! configured trusted proxies (`[auth] trusted_proxies`, CIDRs), the client `X-Forwarded-For`
//! names. `X-Forwarded-For` from any other sender is ignored: anyone can write the header.

use std::net::IpAddr;

use axum::http::HeaderMap;

/// An address block, `10.0.0.0/8`, `::1/128`, or one address (`192.0.2.7`, the whole address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDRESS/PREFIX` or one address.
    ///
    /// # Errors
    /// A line saying what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (address, prefix) = text.split_once('/').map_or((text, None), |(a, p)| (a, Some(p)));
        let network: IpAddr =
            address.trim().parse().map_err(|_| format!("{text:?}: expected an IP address or ADDRESS/PREFIX"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Self { network, prefix })
    }

    /// Whether `ip` is in the block (IPv4-mapped IPv6 addresses count as IPv4).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        let (a, b, bits) = match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)) << 96, u128::from(u32::from(i)) << 96, 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
            _ => return false,
        };
        let prefix = u32::from(self.prefix.min(bits));
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        a & mask == b & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Whether `ip` is in one of `blocks`.
fn trusted(blocks: &[Cidr], ip: IpAddr) -> bool {
    blocks.iter().any(|b| b.contains(ip))
}

/// The client of a request from `peer`: `peer` itself, unless it is a trusted proxy; then the
/// nearest address of `X-Forwarded-For` (read right to left, every header line) that is not a
/// trusted proxy. A value that is not an address ends the walk at the hop before it (that hop
/// is what a trusted proxy vouched for), and so does a list of trusted proxies only.
#[must_use]
pub fn client_address(peer: IpAddr, headers: &HeaderMap, proxies: &[Cidr]) -> IpAddr {
    if !trusted(proxies, peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.into_iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else { return client };
        client = ip;
        if !trusted(proxies, ip) {
            return ip;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn blocks_parse_and_match() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains(ip("10.1.200.3")) && !net.contains(ip("10.2.0.1")));
        assert!(net.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped");
        assert!(!net.contains(ip("::1")));
        assert!(Cidr::parse("127.0.0.4").unwrap().contains(ip("127.0.0.4")));
        assert!(!Cidr::parse("127.0.0.4").unwrap().contains(ip("127.0.0.5")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("192.0.2.1")));
        assert!(Cidr::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
        assert!(Cidr::parse("10.0.0.0/33").unwrap_err().contains("0 to 32"));
        assert!(Cidr::parse("proxy.example").unwrap_err().contains("IP address"));
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
    }

    #[test]
    fn forwarded_for_counts_only_from_trusted_proxies() {
        let proxies = [Cidr::parse("127.0.0.4/32").unwrap(), Cidr::parse("10.0.0.0/8").unwrap()];
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1, 192.0.2.9, 10.0.0.7"));
        assert_eq!(client_address(ip("127.0.0.4"), &h, &proxies), ip("192.0.2.9"), "the nearest untrusted hop");
        assert_eq!(client_address(ip("127.0.0.5"), &h, &proxies), ip("127.0.0.5"), "an untrusted sender");
        assert_eq!(client_address(ip("127.0.0.4"), &HeaderMap::new(), &proxies), ip("127.0.0.4"));
        h.insert("x-forwarded-for", HeaderValue::from_static("junk, 10.0.0.8"));
        assert_eq!(client_address(ip("127.0.0.4"), &h, &proxies), ip("10.0.0.8"), "stops at what is not an address");
        assert_eq!(client_address(ip("127.0.0.4"), &h, &[]), ip("127.0.0.4"), "no proxies trusted");
    }
}
