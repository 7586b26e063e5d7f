//! A genuine 3-member MongoDB replica set on loopback, as production runs one: find the primary,
//! make it step down, kill a member and start it again on its data.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use mongodb::bson::doc;

use crate::{free_port, mongod_bin, wait_for, Proc};

struct Member {
    port: u16,
    dir: PathBuf,
    proc: Option<Proc>,
}

/// `n` `mongod` members forming the replica set `rs0`.
pub struct MongoReplicaSet {
    /// The replica-set URI masters and workers get (every member named).
    pub uri: String,
    members: Vec<Member>,
    _data: tempfile::TempDir,
    logs: PathBuf,
}

impl MongoReplicaSet {
    pub async fn start(logs: &Path, n: usize) -> Result<Self> {
        let data = tempfile::tempdir()?;
        let members: Vec<Member> = (0..n)
            .map(|i| {
                let dir = data.path().join(format!("m{i}"));
                std::fs::create_dir_all(&dir).map(|()| Member { port: free_port(), dir, proc: None })
            })
            .collect::<std::io::Result<_>>()?;
        let hosts: Vec<String> = members.iter().map(|m| format!("127.0.0.1:{}", m.port)).collect();
        let uri = format!("mongodb://{}/?replicaSet=rs0", hosts.join(","));
        let mut set = Self { uri, members, _data: data, logs: logs.to_path_buf() };
        for i in 0..n {
            set.spawn(i)?;
        }
        set.initiate(&hosts).await?;
        set.wait_primary().await?;
        Ok(set)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &self.members[i];
        let mut cmd = Command::new(mongod_bin());
        cmd.arg("--dbpath").arg(&m.dir).args(["--port", &m.port.to_string(), "--bind_ip", "127.0.0.1"]);
        cmd.args(["--replSet", "rs0", "--wiredTigerCacheSizeGB", "0.25"]);
        cmd.args(["--wiredTigerEngineConfigString", "log=(prealloc=false,file_max=10MB)"]);
        let log = self.logs.join(format!("mongodb-rs-m{i}.log"));
        self.members[i].proc = Some(Proc::spawn(&format!("mongod m{i}"), cmd, log)?);
        Ok(())
    }

    fn direct(&self, i: usize) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.members[i].port)
    }

    async fn initiate(&self, hosts: &[String]) -> Result<()> {
        let admin = etcron_common::store::MongoStore::connect(&self.direct(0), "admin").await?;
        let members: Vec<_> =
            hosts.iter().enumerate().map(|(i, h)| doc! {"_id": i32::try_from(i).unwrap_or(0), "host": h}).collect();
        let config = doc! {"_id": "rs0", "members": members};
        wait_for(Duration::from_secs(60), "the replica set to be initiated", || {
            let (db, config) = (admin.database().clone(), config.clone());
            async move {
                match db.run_command(doc! {"replSetInitiate": config}).await {
                    Ok(_) => Some(()),
                    Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 23) => Some(()),
                    Err(_) => None,
                }
            }
        })
        .await
    }

    /// Waits until a member is primary and the replica-set URI answers; its index.
    pub async fn wait_primary(&self) -> Result<usize> {
        let primary = wait_for(Duration::from_secs(60), "a MongoDB primary", || async { self.primary().await }).await?;
        let store = etcron_common::store::MongoStore::connect(&self.uri, "ping").await?;
        wait_for(Duration::from_secs(60), "MongoDB to answer through the replica-set URI", || {
            let store = store.clone();
            async move { store.ping().await.ok() }
        })
        .await?;
        Ok(primary)
    }

    /// The member that is primary now, as the members themselves say.
    pub async fn primary(&self) -> Option<usize> {
        for i in 0..self.members.len() {
            if self.members[i].proc.is_none() {
                continue;
            }
            let Ok(admin) = etcron_common::store::MongoStore::connect(&self.direct(i), "admin").await else {
                continue;
            };
            let hello = tokio::time::timeout(Duration::from_secs(2), admin.database().run_command(doc! {"hello": 1}));
            if let Ok(Ok(hello)) = hello.await {
                if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Asks the primary to step down (`replSetStepDown`, 10 s); its index.
    pub async fn step_down(&self) -> Result<usize> {
        let i = self.primary().await.context("no primary to step down")?;
        let admin = etcron_common::store::MongoStore::connect(&self.direct(i), "admin").await?;
        // The primary closes its connections as it steps down: an error here is expected.
        let _ = admin.database().run_command(doc! {"replSetStepDown": 10, "force": true}).await;
        Ok(i)
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].proc.take() {
            p.kill9();
        }
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        self.spawn(i)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}
