//! Network namespaces for partition tests: each etcd member in a namespace of its own, with a
//! client link (a veth pair to this host) and a peer link (a veth pair to a bridge in one more
//! namespace), so a test can cut a member from its peers, from its clients, or both, while
//! everything else keeps running. Needs root and `ip` (iproute2).
//!
//! Addresses are `10.213.<slot>.0/24` (client links, one /30 per member) and
//! `10.214.<slot>.0/24` (the peers' bridge); the host routes only the client /30s, to the
//! veths it owns. A cut sets the member's end of a link down: the host's end keeps its route
//! (flagged `linkdown`) and drops what it would send, so nothing ever leaves for another
//! network, and the member sees no reset, as in a real partition.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

/// Which of a member's links a cut takes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// From the other members (the raft traffic); clients still reach it.
    Peers,
    /// From clients; its peers still reach it.
    Clients,
    /// Both.
    Both,
}

/// The namespaces, links and bridge of one partitionable cluster; deleted on drop.
pub struct Network {
    slot: u32,
    members: usize,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Network {
    /// Creates the namespaces and links for `members` members (at most 8).
    pub fn create(members: usize) -> Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        if members > 8 {
            bail!("at most 8 members per network");
        }
        // A slot of its own per network of this process; other processes start elsewhere.
        let first = (std::process::id().wrapping_mul(7) + N.fetch_add(1, Ordering::SeqCst)) % 250;
        for k in 0..250 {
            let slot = (first + k) % 250;
            if std::path::Path::new(&format!("/run/netns/etcron{slot}br")).exists() {
                continue;
            }
            let net = Self { slot, members };
            net.build().with_context(|| format!("building the partition network in slot {slot}"))?;
            return Ok(net);
        }
        bail!("no free network slot (every /run/netns/etcron*br exists)")
    }

    fn bridge_ns(&self) -> String {
        format!("etcron{}br", self.slot)
    }

    /// The namespace member `i` runs in.
    #[must_use]
    pub fn member_ns(&self, i: usize) -> String {
        format!("etcron{}m{i}", self.slot)
    }

    /// The address clients reach member `i` at.
    #[must_use]
    pub fn client_ip(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.slot, 4 * i + 2)
    }

    /// The address member `i`'s peers reach it at.
    #[must_use]
    pub fn peer_ip(&self, i: usize) -> String {
        format!("10.214.{}.{}", self.slot, i + 1)
    }

    fn build(&self) -> Result<()> {
        let s = self.slot;
        let br = self.bridge_ns();
        ip(&["netns", "add", &br])?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..self.members {
            let ns = self.member_ns(i);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            // Client link: host end `ec<s>c<i>`, member end `cl`.
            let (host, far) = (format!("ec{s}c{i}"), format!("ec{s}x{i}"));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &far])?;
            ip(&["link", "set", &far, "netns", &ns])?;
            ip(&["-n", &ns, "link", "set", &far, "name", "cl"])?;
            ip(&["addr", "add", &format!("10.213.{s}.{}/30", 4 * i + 1), "dev", &host])?;
            ip(&["link", "set", &host, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/30", self.client_ip(i)), "dev", "cl"])?;
            ip(&["-n", &ns, "link", "set", "cl", "up"])?;
            // Peer link: bridge end `b<i>`, member end `pl`.
            let (port, far) = (format!("ec{s}b{i}"), format!("ec{s}p{i}"));
            ip(&["link", "add", &port, "type", "veth", "peer", "name", &far])?;
            ip(&["link", "set", &port, "netns", &br])?;
            ip(&["link", "set", &far, "netns", &ns])?;
            ip(&["-n", &br, "link", "set", &port, "name", &format!("b{i}")])?;
            ip(&["-n", &br, "link", "set", &format!("b{i}"), "master", "br0", "up"])?;
            ip(&["-n", &ns, "link", "set", &far, "name", "pl"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.peer_ip(i)), "dev", "pl"])?;
            ip(&["-n", &ns, "link", "set", "pl", "up"])?;
        }
        Ok(())
    }

    /// Takes member `i`'s links down as `cut` says.
    pub fn cut(&self, i: usize, cut: Cut) -> Result<()> {
        self.set(i, cut, "down")
    }

    /// Brings every link of member `i` up again.
    pub fn heal(&self, i: usize) -> Result<()> {
        self.set(i, Cut::Both, "up")
    }

    fn set(&self, i: usize, cut: Cut, state: &str) -> Result<()> {
        let ns = self.member_ns(i);
        if matches!(cut, Cut::Peers | Cut::Both) {
            ip(&["-n", &ns, "link", "set", "pl", state])?;
        }
        if matches!(cut, Cut::Clients | Cut::Both) {
            ip(&["-n", &ns, "link", "set", "cl", state])?;
        }
        Ok(())
    }

    /// `ip netns exec <member ns>` as a command prefix, for starting member `i`.
    #[must_use]
    pub fn exec_in(&self, i: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.member_ns(i), program]);
        cmd
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veths in it, and with them their ends on the host.
        for i in 0..self.members {
            let _ = ip(&["netns", "del", &self.member_ns(i)]);
        }
        let _ = ip(&["netns", "del", &self.bridge_ns()]);
    }
}
