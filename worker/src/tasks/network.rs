//! Where HTTP and gRPC tasks may connect (`task_network_allow`): the addresses a task's request,
//! each redirect hop, each status poll, the cancel request and each gRPC connection would use
//! are resolved here and every one is checked, with its port, before anything is sent; the
//! connection then uses exactly the checked addresses (no second lookup a rebinding DNS answer
//! could change).
//!
//! Refused unless allowed:
//! - **The control plane**: the worker's etcd endpoints, the MongoDB hosts of `mongodb_uri`, and
//!   the worker's own listeners (live output and progress, metrics), by name and port, by their
//!   resolved addresses and port, and, for one on this host, that port on any address of this
//!   host. Only an entry naming it exactly (`host:port`) allows one: a network does not.
//! - **Loopback, link-local and unspecified addresses** (`127.0.0.0/8`, `::1`, `169.254.0.0/16`,
//!   `fe80::/10`, `0.0.0.0/8`, `::`, and their IPv4-mapped forms): allowed by an entry whose
//!   network holds the address, or one naming the host (or address) and port exactly.
//!
//! Every other address is allowed. A refusal is logged and counted
//! (`etcron_worker_task_connections_refused_total{class}`), and ends the run failed, its reason
//! naming the address and this setting.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::METRICS;

/// The setting that allows what is refused here.
pub const SETTING: &str = "task_network_allow";
/// Most entries in `task_network_allow`.
pub const MAX_ENTRIES: usize = 256;
/// How long the resolved addresses of control-plane names are used before they are looked up
/// again (a failed lookup keeps the previous ones).
const CONTROL_REFRESH: Duration = Duration::from_secs(30);
/// Longest DNS lookup of a task's host.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One entry of `task_network_allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Addresses of a network (`10.0.0.0/8`; an address alone is one address), any port; never
    /// a control-plane endpoint.
    Net { addr: IpAddr, prefix: u8 },
    /// Exactly this host (a name, or an address) and port, control-plane endpoints included.
    Exact { host: String, port: u16 },
}

impl Allow {
    /// Parses `CIDR`, `ADDRESS`, `HOST:PORT` or `[IPv6]:PORT`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = |why: &str| format!("{SETTING}: {text:?} {why}");
        if let Some((addr, prefix)) = text.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| bad("is not a network (address/prefix length)"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or_else(|| bad("has a bad prefix length"))?;
            return Ok(Self::Net { addr, prefix });
        }
        if let Ok(addr) = text.parse::<IpAddr>() {
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(Self::Net { addr, prefix });
        }
        if let Ok(sock) = text.parse::<SocketAddr>() {
            return Ok(Self::Exact { host: sock.ip().to_string(), port: sock.port() });
        }
        let (host, port) = text.rsplit_once(':').ok_or_else(|| bad("is neither a network nor host:port"))?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| bad("has a bad port"))?;
        let host = normal_name(host);
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !name_ok {
            return Err(bad("has a bad host name"));
        }
        Ok(Self::Exact { host, port })
    }

    fn holds(&self, ip: IpAddr) -> bool {
        let Self::Net { addr, prefix } = self else { return false };
        match (canonical(*addr), ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    fn names(&self, name: &str, ip: IpAddr, port: u16) -> bool {
        let Self::Exact { host, port: p } = self else { return false };
        *p == port && (host == name || host.parse::<IpAddr>().is_ok_and(|h| canonical(h) == ip))
    }
}

impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Net { addr, prefix } => write!(f, "{addr}/{prefix}"),
            Self::Exact { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Self::Exact { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Lists the refusal counter of every class from the first scrape.
pub fn init_metrics() {
    for class in Class::ALL {
        METRICS.task_connections_refused.with_label_values(&[class.label()]);
    }
}

/// Parses every entry; the error names the setting and the entry.
pub fn parse_allow(entries: &[String]) -> Result<Vec<Allow>, String> {
    if entries.len() > MAX_ENTRIES {
        return Err(format!("{SETTING}: at most {MAX_ENTRIES} entries"));
    }
    entries.iter().map(|e| Allow::parse(e)).collect()
}

/// Why an address needs an allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    ControlPlane,
    Loopback,
    LinkLocal,
    Unspecified,
}

impl Class {
    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::ControlPlane => "control_plane",
            Self::Loopback => "loopback",
            Self::LinkLocal => "link_local",
            Self::Unspecified => "unspecified",
        }
    }

    pub const ALL: [Self; 4] = [Self::ControlPlane, Self::Loopback, Self::LinkLocal, Self::Unspecified];
}

/// The class of an address that is refused unless allowed, if it is one.
#[must_use]
pub fn special(ip: IpAddr) -> Option<Class> {
    match canonical(ip) {
        IpAddr::V4(v4) if v4.is_loopback() => Some(Class::Loopback),
        IpAddr::V4(v4) if v4.is_link_local() => Some(Class::LinkLocal),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(Class::Unspecified),
        IpAddr::V6(v6) if v6.is_loopback() => Some(Class::Loopback),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(Class::Unspecified),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some(Class::LinkLocal),
        _ => None,
    }
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they are.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// A host name compared as DNS does: lowercase, without a final dot or IPv6 brackets.
fn normal_name(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase()
}

/// True for an address of this host: loopback, unspecified, or one of its interfaces' (which
/// a socket can be bound to; nothing is sent).
fn is_local(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    ip.is_loopback() || ip.is_unspecified() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// An endpoint of the cluster's control plane.
#[derive(Debug, Clone)]
pub struct ControlEndpoint {
    /// What it is, as refusals name it (`etcd endpoint etcd-1:2379`).
    pub what: String,
    pub host: String,
    pub port: u16,
    /// As an entry of `task_network_allow` names it (`[::1]:2379`).
    pub entry: String,
}

impl ControlEndpoint {
    #[must_use]
    pub fn new(what: &str, host: &str, port: u16) -> Self {
        let host = normal_name(host);
        let shown = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        Self { what: format!("{what} {shown}"), host, port, entry: shown }
    }
}

/// The control-plane endpoints of the worker's settings: its etcd endpoints (`host:port` or
/// URLs; port 2379 when none), the hosts of a `mongodb://` URI (port 27017 when none; a
/// `mongodb+srv://` name is only known as itself), and its listeners.
#[must_use]
pub fn control_plane(etcd: &[String], mongodb_uri: &str, listeners: &[SocketAddr]) -> Vec<ControlEndpoint> {
    let mut out = Vec::new();
    for endpoint in etcd {
        let rest = endpoint.split_once("://").map_or(endpoint.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or_default();
        if let Some((host, port)) = host_port(authority, 2379) {
            out.push(ControlEndpoint::new("etcd endpoint", &host, port));
        }
    }
    if let Some((scheme, rest)) = mongodb_uri.split_once("://") {
        let hosts = rest.split(['/', '?']).next().unwrap_or_default();
        let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
        for authority in hosts.split(',') {
            // An SRV name has no port of its own: its members' are 27017 most often.
            if let Some((host, port)) = host_port(authority, 27017) {
                let what = if scheme == "mongodb+srv" { "MongoDB SRV name" } else { "MongoDB host" };
                out.push(ControlEndpoint::new(what, &host, port));
            }
        }
    }
    for addr in listeners {
        out.push(ControlEndpoint::new("the worker's own listener", &addr.ip().to_string(), addr.port()));
    }
    out
}

/// `host[:port]` or `[v6][:port]` with `default` as the port when none is given.
fn host_port(authority: &str, default: u16) -> Option<(String, u16)> {
    let authority = authority.trim();
    if authority.is_empty() {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(default);
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host.to_owned(), port.parse().ok()?)),
        _ => Some((authority.to_owned(), default)),
    }
}

/// A connection refused here: why, for the record, and the class, for the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub message: String,
    pub class: Class,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

/// Why a task's host has no address to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAddress {
    /// Refused by the rules above: nothing was sent, and trying again won't help.
    Refused(Refused),
    /// The lookup failed or found nothing.
    Lookup(String),
}

impl fmt::Display for NoAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(r) => r.fmt(f),
            Self::Lookup(e) => f.write_str(e),
        }
    }
}

/// An address of a control-plane endpoint: the endpoint's index, and the address.
type ControlAddress = (usize, IpAddr);

/// The worker's rules for where tasks connect.
#[derive(Debug)]
pub struct TaskNetwork {
    allow: Vec<Allow>,
    control: Vec<ControlEndpoint>,
    /// The control plane's addresses and when they were looked up.
    resolved: Mutex<Option<(Instant, Vec<ControlAddress>)>>,
}

impl TaskNetwork {
    #[must_use]
    pub fn new(allow: Vec<Allow>, control: Vec<ControlEndpoint>) -> Self {
        Self { allow, control, resolved: Mutex::new(None) }
    }

    /// The entries, as `task_network_allow` shows them.
    #[must_use]
    pub fn allowed(&self) -> Vec<String> {
        self.allow.iter().map(ToString::to_string).collect()
    }

    /// The checked addresses to connect to for `host:port` (`what` names the step in the log):
    /// an address as given, or every address `host` resolves to, each allowed.
    pub async fn addresses(&self, what: &str, host: &str, port: u16) -> Result<Vec<SocketAddr>, NoAddress> {
        let name = normal_name(host);
        let addrs: Vec<SocketAddr> = match name.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let lookup = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name.as_str(), port)));
                match lookup.await {
                    Ok(Ok(found)) => found.collect(),
                    Ok(Err(e)) => return Err(NoAddress::Lookup(format!("resolving {name} failed: {e}"))),
                    Err(_) => {
                        return Err(NoAddress::Lookup(format!(
                            "resolving {name} took longer than {}",
                            humantime::format_duration(LOOKUP_TIMEOUT)
                        )))
                    }
                }
            }
        };
        if addrs.is_empty() {
            return Err(NoAddress::Lookup(format!("{name} has no address")));
        }
        let control = self.control_addresses().await;
        for addr in &addrs {
            if let Err(refused) = self.judge(&name, *addr, &control) {
                METRICS.task_connections_refused.with_label_values(&[refused.class.label()]).inc();
                tracing::warn!(host = %name, address = %addr, class = refused.class.label(), "{what} refused: {refused}");
                return Err(NoAddress::Refused(refused));
            }
        }
        Ok(addrs)
    }

    /// Whether a task may connect to `addr` (what `name` resolved to).
    fn judge(&self, name: &str, addr: SocketAddr, control: &[ControlAddress]) -> Result<(), Refused> {
        let (ip, port) = (canonical(addr.ip()), addr.port());
        if self.allow.iter().any(|a| a.names(name, ip, port)) {
            return Ok(());
        }
        let shown = if name == ip.to_string() {
            SocketAddr::new(ip, port).to_string()
        } else {
            format!("{name}:{port} ({ip})")
        };
        if let Some(endpoint) = self.control_endpoint(name, ip, port, control) {
            return Err(Refused {
                message: format!(
                    "refused to connect to {shown}: it is {}, part of the cluster's control plane; tasks may not reach it \
                     unless the worker's {SETTING} names it exactly (\"{}\")",
                    endpoint.what, endpoint.entry
                ),
                class: Class::ControlPlane,
            });
        }
        let Some(class) = special(ip) else { return Ok(()) };
        if self.allow.iter().any(|a| a.holds(ip)) {
            return Ok(());
        }
        let kind = match class {
            Class::Loopback => "a loopback address",
            Class::LinkLocal => "a link-local address",
            _ => "an unspecified address (this host)",
        };
        Err(Refused {
            message: format!(
                "refused to connect to {shown}: {ip} is {kind}; tasks may not reach it unless the worker's {SETTING} \
                 allows it (a network such as \"{ip}/{}\", or \"{}\")",
                if ip.is_ipv4() { 32 } else { 128 },
                SocketAddr::new(ip, port)
            ),
            class,
        })
    }

    fn control_endpoint(
        &self,
        name: &str,
        ip: IpAddr,
        port: u16,
        control: &[ControlAddress],
    ) -> Option<&ControlEndpoint> {
        let by_name = self.control.iter().find(|e| e.port == port && e.host == name);
        by_name.or_else(|| {
            let mut local = None;
            let found = control.iter().find(|(i, eip)| {
                self.control[*i].port == port
                    && (*eip == ip || (is_local(*eip) && *local.get_or_insert_with(|| is_local(ip))))
            });
            found.map(|(i, _)| &self.control[*i])
        })
    }

    /// The control plane's addresses, looked up again every [`CONTROL_REFRESH`].
    async fn control_addresses(&self) -> Vec<ControlAddress> {
        let kept = self.resolved.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some((at, addrs)) = &kept {
            if at.elapsed() < CONTROL_REFRESH {
                return addrs.clone();
            }
        }
        let mut addrs = Vec::new();
        for (i, endpoint) in self.control.iter().enumerate() {
            if let Ok(ip) = endpoint.host.parse::<IpAddr>() {
                addrs.push((i, canonical(ip)));
                continue;
            }
            let lookup =
                tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port)));
            match lookup.await {
                Ok(Ok(found)) => addrs.extend(found.map(|a| (i, canonical(a.ip())))),
                _ => {
                    tracing::warn!(endpoint = %endpoint.what, "cannot resolve a control-plane endpoint; its last known addresses are kept");
                    addrs.extend(kept.iter().flat_map(|(_, old)| old.iter().filter(|(j, _)| *j == i).copied()));
                }
            }
        }
        *self.resolved.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), addrs.clone()));
        addrs
    }
}

/// Loopback addresses (v4 and v6), as a test allows them.
#[must_use]
pub fn loopback() -> Vec<Allow> {
    vec![
        Allow::Net { addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), prefix: 8 },
        Allow::Net { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix: 128 },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn net(allow: &[&str], control: Vec<ControlEndpoint>) -> TaskNetwork {
        let entries: Vec<String> = allow.iter().map(|s| (*s).to_owned()).collect();
        TaskNetwork::new(parse_allow(&entries).unwrap_or_else(|e| panic!("{e}")), control)
    }

    #[test]
    fn entries_parse_and_bad_ones_are_named() {
        assert_eq!(Allow::parse("127.0.0.0/8").map(|a| a.to_string()), Ok("127.0.0.0/8".to_owned()));
        assert_eq!(Allow::parse("::1").map(|a| a.to_string()), Ok("::1/128".to_owned()));
        assert_eq!(Allow::parse("[::1]:8080").map(|a| a.to_string()), Ok("[::1]:8080".to_owned()));
        assert_eq!(Allow::parse("Etcd-1.:2379").map(|a| a.to_string()), Ok("etcd-1:2379".to_owned()));
        for bad in ["10.0.0.0/33", "x/8", "host", "host:0", "host:port", "bad host:1", ""] {
            let err = Allow::parse(bad).unwrap_err();
            assert!(err.starts_with("task_network_allow: "), "{bad}: {err}");
        }
    }

    #[test]
    fn classes_cover_mapped_forms() {
        for (ip, class) in [
            ("127.0.0.1", Some(Class::Loopback)),
            ("127.9.9.9", Some(Class::Loopback)),
            ("::1", Some(Class::Loopback)),
            ("::ffff:127.0.0.1", Some(Class::Loopback)),
            ("169.254.169.254", Some(Class::LinkLocal)),
            ("fe80::1", Some(Class::LinkLocal)),
            ("0.0.0.0", Some(Class::Unspecified)),
            ("::", Some(Class::Unspecified)),
            ("10.1.2.3", None),
            ("93.184.216.34", None),
        ] {
            assert_eq!(special(ip.parse().unwrap()), class, "{ip}");
        }
    }

    #[test]
    fn the_control_plane_is_read_from_the_settings() {
        let cp = control_plane(
            &["127.0.0.1:2379".into(), "https://Etcd-2:2380".into(), "etcd-3".into()],
            "mongodb://u:p@m1:27018,[::1]/etcron?replicaSet=rs",
            &[sock("0.0.0.0:8071")],
        );
        let shown: Vec<(&str, u16)> = cp.iter().map(|e| (e.host.as_str(), e.port)).collect();
        assert_eq!(
            shown,
            [("127.0.0.1", 2379), ("etcd-2", 2380), ("etcd-3", 2379), ("m1", 27018), ("::1", 27017), ("0.0.0.0", 8071)]
        );
    }

    #[test]
    fn loopback_and_the_control_plane_are_refused_unless_allowed() {
        let cp = control_plane(&["127.0.0.1:2379".into()], "mongodb://db.internal:27017", &[sock("0.0.0.0:8071")]);
        let control =
            vec![(0, "127.0.0.1".parse().unwrap()), (1, "10.9.9.9".parse().unwrap()), (2, "0.0.0.0".parse().unwrap())];
        let strict = net(&[], cp.clone());
        let refused =
            |n: &TaskNetwork, name: &str, addr: &str| n.judge(name, sock(addr), &control).err().map(|r| r.class);
        assert_eq!(refused(&strict, "127.0.0.1", "127.0.0.1:8080"), Some(Class::Loopback));
        assert_eq!(refused(&strict, "localhost", "[::ffff:127.0.0.1]:8080"), Some(Class::Loopback));
        assert_eq!(refused(&strict, "169.254.169.254", "169.254.169.254:80"), Some(Class::LinkLocal));
        assert_eq!(refused(&strict, "0.0.0.0", "0.0.0.0:80"), Some(Class::Unspecified));
        assert_eq!(refused(&strict, "api.example", "93.184.216.34:443"), None);
        // MongoDB by its address and by its name, whatever the name resolves to.
        assert_eq!(refused(&strict, "x.example", "10.9.9.9:27017"), Some(Class::ControlPlane));
        assert_eq!(refused(&strict, "db.internal", "10.1.1.1:27017"), Some(Class::ControlPlane));
        assert_eq!(refused(&strict, "x.example", "10.9.9.9:443"), None);

        let lo = net(&["127.0.0.0/8", "::1"], cp.clone());
        assert_eq!(refused(&lo, "127.0.0.1", "127.0.0.1:8080"), None);
        // The control plane stays refused on an allowed network: etcd on another loopback
        // address too, the worker's listener on any address of this host.
        assert_eq!(refused(&lo, "127.0.0.1", "127.0.0.1:2379"), Some(Class::ControlPlane));
        assert_eq!(refused(&lo, "127.0.0.2", "127.0.0.2:2379"), Some(Class::ControlPlane));
        assert_eq!(refused(&lo, "localhost", "[::1]:8071"), Some(Class::ControlPlane));
        // Unless named exactly.
        let named = net(&["127.0.0.0/8", "127.0.0.1:2379"], cp);
        assert_eq!(refused(&named, "127.0.0.1", "127.0.0.1:2379"), None);
        assert_eq!(refused(&named, "127.0.0.2", "127.0.0.2:2379"), Some(Class::ControlPlane));
    }

    #[test]
    fn refusals_name_the_address_and_the_setting() {
        let n = net(&[], control_plane(&["127.0.0.1:2379".into()], "mongodb://m:27017", &[]));
        let control = vec![(0, "127.0.0.1".parse().unwrap())];
        let r = n.judge("127.0.0.1", sock("127.0.0.1:2379"), &control).unwrap_err();
        assert!(r.message.contains("127.0.0.1:2379") && r.message.contains("etcd endpoint"), "{r}");
        assert!(r.message.contains("task_network_allow"), "{r}");
        let r = n.judge("localhost", sock("127.0.0.1:9"), &control).unwrap_err();
        assert!(r.message.starts_with("refused to connect to localhost:9 (127.0.0.1): "), "{r}");
        let v6 = net(&["::1"], control_plane(&["[::1]:2379".into()], "mongodb://m:27017", &[]));
        let r = v6.judge("::1", sock("[::1]:2379"), &[(0, "::1".parse().unwrap())]).unwrap_err();
        assert!(r.message.contains("names it exactly (\"[::1]:2379\")"), "{r}");
    }

    #[tokio::test]
    async fn names_are_resolved_and_every_address_checked() {
        let n = net(&[], Vec::new());
        let err = n.addresses("an HTTP request", "localhost", 80).await.unwrap_err();
        assert!(matches!(err, NoAddress::Refused(Refused { class: Class::Loopback, .. })), "{err}");
        let ok = net(&["127.0.0.0/8", "::1"], Vec::new()).addresses("an HTTP request", "127.0.0.1", 80).await;
        assert_eq!(ok, Ok(vec![sock("127.0.0.1:80")]));
        let err = net(&[], Vec::new()).addresses("t", "[::1]", 80).await.unwrap_err();
        assert!(matches!(err, NoAddress::Refused(_)), "{err}");
    }
}
