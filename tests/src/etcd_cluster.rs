//! A real multi-member etcd cluster for fault injection: kill a member (the leader, or enough to
//! lose quorum), freeze it, restart it on its data, find the leader. On loopback, or with each
//! member in a network namespace of its own ([`EtcdCluster::start_partitionable`]), where a member
//! can also be cut from its peers, its clients, or both ([`crate::netns`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::netns::{Cut, Network};
use crate::{free_port, wait_for, Proc};

struct Member {
    name: String,
    /// `host:port` clients use.
    client: String,
    /// `host:port` peers use.
    peer: String,
    proc: Option<Proc>,
}

/// `n` etcd members forming one cluster.
pub struct EtcdCluster {
    // Members before the network: their processes stop before their namespaces go.
    members: Vec<Member>,
    network: Option<Network>,
    initial_cluster: String,
    data: tempfile::TempDir,
    logs: PathBuf,
}

/// Options for the harness's own calls: a member that does not answer is not waited for.
fn quick() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(1)).with_timeout(Duration::from_secs(2))
}

/// etcd's pre-vote (the default from etcd 3.5; 3.4 has it off): a member cut from its peers
/// does not raise the term while alone, so healing it does not depose a healthy leader.
pub const PRE_VOTE: &str = "--pre-vote=true";

impl EtcdCluster {
    /// On loopback, on free ports.
    pub async fn start(logs: &Path, n: usize) -> Result<Self> {
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("127.0.0.1:{}", free_port()),
                peer: format!("127.0.0.1:{}", free_port()),
                proc: None,
            })
            .collect();
        Self::start_members(logs, members, None).await
    }

    /// Each member in a network namespace of its own ([`crate::netns`]), so that it can be cut
    /// from its peers or its clients. Needs root.
    pub async fn start_partitionable(logs: &Path, n: usize) -> Result<Self> {
        let network = Network::create(n)?;
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("{}:2379", network.client_ip(i)),
                peer: format!("{}:2380", network.peer_ip(i)),
                proc: None,
            })
            .collect();
        Self::start_members(logs, members, Some(network)).await
    }

    async fn start_members(logs: &Path, members: Vec<Member>, network: Option<Network>) -> Result<Self> {
        let initial_cluster =
            members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let n = members.len();
        let mut cluster =
            Self { members, network, initial_cluster, data: tempfile::tempdir()?, logs: logs.to_path_buf() };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &self.members[i];
        let client = format!("http://{}", m.client);
        let peer = format!("http://{}", m.peer);
        let program = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned());
        let mut cmd = match &self.network {
            Some(net) => net.exec_in(i, &program),
            None => Command::new(&program),
        };
        cmd.args(["--name", &m.name, "--data-dir"]).arg(self.data.path().join(&m.name));
        cmd.args(["--listen-client-urls", &client, "--advertise-client-urls", &client]);
        cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
        cmd.args(["--initial-cluster", &self.initial_cluster, "--initial-cluster-token", "etcron-test"]);
        cmd.args(["--initial-cluster-state", "new", "--log-level", "warn"]);
        cmd.args(crate::ETCD_STORAGE_FLAGS);
        if self.network.is_some() {
            cmd.arg(PRE_VOTE);
        }
        let proc = Proc::spawn(&format!("etcd {}", m.name), cmd, self.logs.join(format!("etcd-{}.log", m.name)))?;
        self.members[i].proc = Some(proc);
        Ok(())
    }

    /// `host:port,host:port,…` of every member, for `--etcd-endpoints`.
    #[must_use]
    pub fn endpoints(&self) -> String {
        self.members.iter().map(|m| m.client.clone()).collect::<Vec<_>>().join(",")
    }

    /// Member `i`'s `host:port` for clients.
    #[must_use]
    pub fn endpoint(&self, i: usize) -> &str {
        &self.members[i].client
    }

    /// Cuts member `i` off as `cut` says (a partitionable cluster only).
    pub fn cut(&self, i: usize, cut: Cut) -> Result<()> {
        self.network.as_ref().context("not a partitionable cluster")?.cut(i, cut)
    }

    /// Heals every cut of member `i`.
    pub fn heal(&self, i: usize) -> Result<()> {
        self.network.as_ref().context("not a partitionable cluster")?.heal(i)
    }

    /// SIGSTOPs member `i` (`thaw` resumes it).
    pub fn freeze(&self, i: usize) -> Result<()> {
        self.members[i].proc.as_ref().context("member not running")?.signal(nix::sys::signal::Signal::SIGSTOP)
    }

    /// SIGCONTs member `i`.
    pub fn thaw(&self, i: usize) -> Result<()> {
        self.members[i].proc.as_ref().context("member not running")?.signal(nix::sys::signal::Signal::SIGCONT)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    #[must_use]
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].proc.as_ref().and_then(Proc::pid)
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].proc.take() {
            p.kill9();
        }
    }

    /// Starts member `i` again on its data directory.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        self.spawn(i)
    }

    /// The index of the member that leads, as the members themselves report it.
    pub async fn leader(&self) -> Result<usize> {
        wait_for(Duration::from_secs(20), "an etcd leader", || async {
            for m in &self.members {
                if m.proc.is_none() {
                    continue;
                }
                let Ok(mut c) = etcd_client::Client::connect([m.client.as_str()], Some(quick())).await else {
                    continue;
                };
                let Ok(status) = c.status().await else { continue };
                let me = status.header().map(|h| h.member_id());
                if me.is_some() && Some(status.leader()) == me {
                    return Some(self.members.iter().position(|x| x.name == m.name).unwrap_or(0));
                }
            }
            None
        })
        .await
    }

    /// Waits until every running member answers a linearizable read (so the cluster has a
    /// quorum and each member has joined it).
    pub async fn wait_healthy(&self) -> Result<()> {
        for m in self.members.iter().filter(|m| m.proc.is_some()) {
            let endpoint = m.client.clone();
            wait_for(Duration::from_secs(60), &format!("etcd {} to serve", m.name), || {
                let endpoint = endpoint.clone();
                async move {
                    let mut c = etcd_client::Client::connect([endpoint], Some(quick())).await.ok()?;
                    c.get("/", None).await.ok().map(|_| ())
                }
            })
            .await
            .with_context(|| format!("etcd member {}", m.name))?;
        }
        Ok(())
    }
}
