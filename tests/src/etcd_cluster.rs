//! A real multi-member etcd cluster on loopback, for fault injection: kill a member (the leader,
//! or enough to lose quorum), restart it on its data, find the leader.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::{free_port, wait_for, Proc};

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    proc: Option<Proc>,
}

/// `n` etcd members forming one cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    data: tempfile::TempDir,
    logs: PathBuf,
}

impl EtcdCluster {
    pub async fn start(logs: &Path, n: usize) -> Result<Self> {
        let members: Vec<Member> = (0..n)
            .map(|i| Member { name: format!("m{i}"), client_port: free_port(), peer_port: free_port(), proc: None })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self { members, initial_cluster, data: tempfile::tempdir()?, logs: logs.to_path_buf() };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned()));
        cmd.args(["--name", &m.name, "--data-dir"]).arg(self.data.path().join(&m.name));
        cmd.args(["--listen-client-urls", &client, "--advertise-client-urls", &client]);
        cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
        cmd.args(["--initial-cluster", &self.initial_cluster, "--initial-cluster-token", "etcron-test"]);
        cmd.args(["--initial-cluster-state", "new", "--log-level", "warn"]);
        cmd.args(crate::ETCD_STORAGE_FLAGS);
        let proc = Proc::spawn(&format!("etcd {}", m.name), cmd, self.logs.join(format!("etcd-{}.log", m.name)))?;
        self.members[i].proc = Some(proc);
        Ok(())
    }

    /// `host:port,host:port,…` of every member, for `--etcd-endpoints`.
    #[must_use]
    pub fn endpoints(&self) -> String {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client_port)).collect::<Vec<_>>().join(",")
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
                let Ok(mut c) = etcd_client::Client::connect([format!("127.0.0.1:{}", m.client_port)], None).await
                else {
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
            let endpoint = format!("127.0.0.1:{}", m.client_port);
            wait_for(Duration::from_secs(60), &format!("etcd {} to serve", m.name), || {
                let endpoint = endpoint.clone();
                async move {
                    let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
                    c.get("/", None).await.ok().map(|_| ())
                }
            })
            .await
            .with_context(|| format!("etcd member {}", m.name))?;
        }
        Ok(())
    }
}
