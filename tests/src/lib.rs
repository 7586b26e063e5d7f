//! Test harness: starts REAL etcd, `etcron-master` and `etcron-worker` processes on free
//! loopback ports with temporary data dirs, plus helpers to wait on conditions with deadlines
//! and to read what tasks wrote. Every process is killed when its handle drops.

pub mod etcd_cluster;
pub mod grpc_server;
pub mod mongo_rs;
pub mod netns;
pub mod proxy;
pub mod records;
pub mod sse;
pub mod webhook;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
pub use nix::sys::signal::Signal as Sig;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A free TCP port on 127.0.0.1, below the kernel's ephemeral range (32768 and up on Linux):
/// a port a process binds as `:0` is drawn from that range, so a port from outside it cannot be
/// taken between this check and its use by some listener of port 0 — the worker's own output
/// and progress listeners took one released port this way.
pub fn free_port() -> u16 {
    // Each test process (one per test under nextest) starts at its own place in 20000..32000.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let offset = (std::process::id() % 1_000) * 12;
    for _ in 0..12_000 {
        let step = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = u16::try_from(20_000 + (offset + step) % 12_000).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Directory holding the workspace's built binaries (`ETCRON_BIN_DIR` overrides).
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("ETCRON_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // Test executables live in target/<profile>/deps; binaries in target/<profile>.
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

pub fn bin(name: &str) -> Result<PathBuf> {
    let path = bin_dir().join(name);
    if !path.exists() {
        bail!("{} not found; build the binaries first (cargo build --workspace --bins)", path.display());
    }
    Ok(path)
}

/// Where process logs of a test go: `target/test-logs/<name>-<pid>-<n>`.
pub fn log_dir(test: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = bin_dir().join("test-logs").join(format!("{test}-{}-{n}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Result<Self> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd.spawn().with_context(|| format!("spawning {name}"))?;
        Ok(Self { name: name.to_owned(), child: Some(child), log })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn signal(&self, sig: Signal) -> Result<()> {
        let pid = self.pid().context("process already reaped")?;
        kill(Pid::from_raw(i32::try_from(pid)?), sig).with_context(|| format!("signalling {}", self.name))
    }

    /// Is the process still running (not exited)?
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits for exit up to `limit`; returns the exit code (None for a signal).
    pub fn wait_exit(&mut self, limit: Duration) -> Result<Option<i32>> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().context("already reaped")?;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                bail!("{} did not exit within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or fails after `limit` with `what`.
pub async fn wait_for<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The storage flags of every etcd the project starts (`deploy/local/up.sh`, the compose file,
/// the docs, these tests): compaction keeping 5 minutes of history, etcd's 2 GiB quota stated,
/// and a snapshot every 10 000 raft entries (etcd 3.5's default; 3.4 keeps 100 000 entries in
/// memory, which grew its heap without bound in the soak). docs/operations.md has the sizing.
pub const ETCD_STORAGE_FLAGS: &[&str] = &[
    "--auto-compaction-mode=periodic",
    "--auto-compaction-retention=5m",
    "--quota-backend-bytes=2147483648",
    "--snapshot-count=10000",
];

/// A single-member etcd on free ports with its own data dir.
pub struct Etcd {
    pub endpoint: String,
    pub client_port: u16,
    peer_port: u16,
    data: tempfile::TempDir,
    logs: PathBuf,
    flags: Vec<String>,
    pub proc: Proc,
}

impl Etcd {
    /// With the production storage flags ([`ETCD_STORAGE_FLAGS`]).
    pub async fn start(logs: &Path) -> Result<Self> {
        Self::start_with(logs, ETCD_STORAGE_FLAGS).await
    }

    /// With these storage flags instead (a small quota, compaction off, ...).
    /// A port found free may be taken by a test running beside this one before etcd binds it
    /// (etcd then exits, and the etcd answering on it is the other test's): such a start is
    /// retried on new ports.
    pub async fn start_with(logs: &Path, flags: &[&str]) -> Result<Self> {
        let flags: Vec<String> = flags.iter().map(|f| (*f).to_owned()).collect();
        let mut tries = 0;
        loop {
            let data = tempfile::tempdir()?;
            let client_port = free_port();
            let peer_port = free_port();
            let proc = Self::spawn(data.path(), client_port, peer_port, logs, &flags)?;
            let mut etcd = Self {
                endpoint: format!("127.0.0.1:{client_port}"),
                client_port,
                peer_port,
                data,
                logs: logs.to_path_buf(),
                flags: flags.clone(),
                proc,
            };
            etcd.wait_ready().await?;
            tries += 1;
            if etcd.proc.running() && etcd.answers_as_itself().await {
                return Ok(etcd);
            }
            if tries == 5 {
                bail!("etcd could not bind free ports in 5 tries (see {})", logs.join("etcd.log").display());
            }
            etcd.proc.kill9();
        }
    }

    /// Whether the etcd answering on this endpoint is this one (its member's peer URL is ours).
    async fn answers_as_itself(&self) -> bool {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let Ok(mut c) = self.client().await else { return false };
        c.member_list().await.is_ok_and(|m| m.members().iter().any(|m| m.peer_urls().contains(&peer)))
    }

    fn spawn(data: &Path, client_port: u16, peer_port: u16, logs: &Path, flags: &[String]) -> Result<Proc> {
        let mut cmd = Command::new(std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned()));
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        cmd.args(["--name", "t", "--data-dir"]).arg(data.join("etcd"));
        cmd.args(["--listen-client-urls", &client, "--advertise-client-urls", &client]);
        cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
        cmd.args(["--initial-cluster", &format!("t={peer}"), "--log-level", "warn"]);
        cmd.args(flags);
        Proc::spawn("etcd", cmd, logs.join("etcd.log"))
    }

    /// Restarts etcd on the same ports and data after it was stopped or killed.
    pub async fn restart(&mut self) -> Result<()> {
        self.proc.kill9();
        self.proc = Self::spawn(self.data.path(), self.client_port, self.peer_port, &self.logs, &self.flags)?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<()> {
        let endpoint = self.endpoint.clone();
        wait_for(Duration::from_secs(20), "etcd to serve", || {
            let endpoint = endpoint.clone();
            async move {
                let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
                c.get("/", None).await.ok().map(|_| ())
            }
        })
        .await
    }

    pub async fn client(&self) -> Result<etcd_client::Client> {
        Ok(etcd_client::Client::connect([self.endpoint.clone()], None).await?)
    }

    /// Sums etcd's own Prometheus metric `name` over label sets containing `labels`.
    pub async fn metric_with(&self, name: &str, labels: &str) -> Result<f64> {
        let text = reqwest::get(format!("http://{}/metrics", self.endpoint)).await?.text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(labels))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                let base = k.split('{').next()?;
                (base == name).then(|| v.parse::<f64>().ok()).flatten()
            })
            .sum())
    }

    /// Counts from etcd's own Prometheus metrics (e.g. `etcd_mvcc_put_total`).
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = reqwest::get(format!("http://{}/metrics", self.endpoint)).await?.text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                let base = k.split('{').next()?;
                (base == name).then(|| v.parse::<f64>().ok()).flatten()
            })
            .sum())
    }
}

/// A genuine `mongod` (MongoDB 6.0.5, installed by `deploy/local/test.sh`) run as the one-node
/// replica set `rs0`, as production runs a replica set; or an external MongoDB when
/// `ETCRON_MONGODB_URI` is set (then `stop`/`restart` are unavailable).
pub struct Mongo {
    pub uri: String,
    port: u16,
    /// The data dir (None for an external server) and the temporary dir holding it, if any.
    dir: Option<PathBuf>,
    _temp: Option<tempfile::TempDir>,
    opts: MongoOpts,
    logs: PathBuf,
    pub proc: Option<Proc>,
}

/// How the harness runs its own `mongod`.
#[derive(Debug, Clone, Default)]
pub struct MongoOpts {
    /// WiredTiger cache in GiB: 0.25 when None (tests), MongoDB's own default (half of the
    /// memory less 1 GiB) when Some(0.0), as a production server would run.
    pub cache_gb: Option<f64>,
    /// A data dir that outlives the server (benchmarks reuse loaded data); a temporary one when
    /// None.
    pub dir: Option<PathBuf>,
}

/// The `mongod` binary: `ETCRON_MONGOD`, else where `deploy/local/lib.sh` caches it, else `PATH`.
pub fn mongod_bin() -> PathBuf {
    if let Ok(path) = std::env::var("ETCRON_MONGOD") {
        return PathBuf::from(path);
    }
    let cache = std::env::var("ETCRON_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache").join("etcron"));
    let cached = cache.join("mongodb-6.0.5").join("mongod");
    if cached.exists() {
        cached
    } else {
        PathBuf::from("mongod")
    }
}

impl Mongo {
    /// Uses `ETCRON_MONGODB_URI` if set, otherwise starts a server of our own.
    pub async fn start(logs: &Path) -> Result<Self> {
        if let Ok(uri) = std::env::var("ETCRON_MONGODB_URI") {
            return Ok(Self {
                uri,
                port: 0,
                dir: None,
                _temp: None,
                opts: MongoOpts::default(),
                logs: logs.to_path_buf(),
                proc: None,
            });
        }
        Self::start_own(logs).await
    }

    /// Always starts a server of our own (for tests that stop and restart it).
    pub async fn start_own(logs: &Path) -> Result<Self> {
        Self::start_own_with(logs, MongoOpts::default()).await
    }

    pub async fn start_own_with(logs: &Path, opts: MongoOpts) -> Result<Self> {
        let mut port = free_port();
        let (dir, temp) = match &opts.dir {
            Some(dir) => {
                // The replica set's configuration names the member's port: a kept data dir is
                // served on the port it was made with.
                std::fs::create_dir_all(dir)?;
                let port_file = dir.join("etcron-port");
                match std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
                    Some(p) => port = p,
                    None => std::fs::write(&port_file, port.to_string())?,
                }
                (dir.clone(), None)
            }
            None => {
                let temp = tempfile::tempdir()?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        let proc = Self::spawn(port, &dir, logs, &opts)?;
        let mongo = Self {
            uri: format!("mongodb://127.0.0.1:{port}/?replicaSet=rs0"),
            port,
            dir: Some(dir),
            _temp: temp,
            opts,
            logs: logs.to_path_buf(),
            proc: Some(proc),
        };
        mongo.wait_primary().await?;
        Ok(mongo)
    }

    fn spawn(port: u16, dir: &Path, logs: &Path, opts: &MongoOpts) -> Result<Proc> {
        let bin = mongod_bin();
        let mut cmd = Command::new(&bin);
        cmd.arg("--dbpath").arg(dir).args(["--port", &port.to_string(), "--bind_ip", "127.0.0.1"]);
        cmd.args(["--replSet", "rs0"]);
        match opts.cache_gb {
            None => {
                cmd.args(["--wiredTigerCacheSizeGB", "0.25"]);
            }
            Some(gb) if gb > 0.0 => {
                cmd.args(["--wiredTigerCacheSizeGB", &gb.to_string()]);
            }
            Some(_) => {}
        }
        // A small data dir (~11 MB, not ~300 MB of preallocated journal), and TTL deletions
        // every second so retention is testable.
        cmd.args(["--wiredTigerEngineConfigString", "log=(prealloc=false,file_max=10MB)"]);
        cmd.args(["--setParameter", "ttlMonitorSleepSecs=1"]);
        Proc::spawn("mongodb", cmd, logs.join(format!("mongodb-{port}.log"))).with_context(|| {
            format!("starting {} (deploy/local/test.sh installs it; ETCRON_MONGOD names another)", bin.display())
        })
    }

    /// Initiates the one-node replica set (once: a restart keeps its configuration) and waits
    /// until the member is primary.
    async fn wait_primary(&self) -> Result<()> {
        let direct = format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port);
        let admin = etcron_common::store::MongoStore::connect(&direct, "admin").await?;
        let config =
            mongodb::bson::doc! {"_id": "rs0", "members": [{"_id": 0, "host": format!("127.0.0.1:{}", self.port)}]};
        wait_for(Duration::from_secs(30), "mongod to become primary of its replica set", || {
            let (db, config) = (admin.database().clone(), config.clone());
            async move {
                match db.run_command(mongodb::bson::doc! {"replSetInitiate": config}).await {
                    Ok(_) => {}
                    // AlreadyInitialized: restarted on the same data.
                    Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 23) => {}
                    Err(_) => return None,
                }
                let hello = db.run_command(mongodb::bson::doc! {"hello": 1}).await.ok()?;
                hello.get_bool("isWritablePrimary").unwrap_or(false).then_some(())
            }
        })
        .await?;
        // The replica-set URI is what masters and workers get: wait until it selects the primary.
        let store = etcron_common::store::MongoStore::connect(&self.uri, "ping").await?;
        wait_for(Duration::from_secs(30), "mongod to answer through the replica-set URI", || {
            let store = store.clone();
            async move { store.ping().await.ok() }
        })
        .await
    }

    /// Stops the server (an outage); data stays.
    pub fn stop(&mut self) -> Result<()> {
        let proc = self.proc.as_mut().context("an external MongoDB cannot be stopped by the tests")?;
        proc.signal(Signal::SIGTERM)?;
        if proc.wait_exit(Duration::from_secs(20)).is_err() {
            proc.kill9();
        }
        Ok(())
    }

    /// Starts it again on the same port and data.
    pub async fn restart(&mut self) -> Result<()> {
        let dir = self.dir.as_ref().context("an external MongoDB cannot be restarted by the tests")?;
        if let Some(p) = self.proc.as_mut() {
            p.kill9();
        }
        self.proc = Some(Self::spawn(self.port, dir, &self.logs, &self.opts)?);
        self.wait_primary().await
    }

    pub async fn store(&self, db: &str) -> Result<etcron_common::store::MongoStore> {
        Ok(etcron_common::store::MongoStore::connect(&self.uri, db).await?)
    }
}

/// A database name unique to one test run.
pub fn db_name(test: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let clean: String = test.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("t_{clean}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// A running `etcron-master`.
pub struct Master {
    pub url: String,
    pub proc: Proc,
}

impl Master {
    pub async fn start(etcd_endpoint: &str, namespace: &str, logs: &Path, extra: &[&str]) -> Result<Self> {
        let port = free_port();
        let mut cmd = Command::new(bin("etcron-master")?);
        cmd.args([
            "--etcd-endpoints",
            etcd_endpoint,
            "--namespace",
            namespace,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]);
        if !extra.contains(&"--mutation-rate") {
            // Tests create jobs in bulk from one address; the limit itself is tested on its own.
            cmd.args(["--mutation-rate", "100000", "--mutation-burst", "1000000"]);
        }
        cmd.args(extra);
        cmd.env("RUST_LOG", "info");
        let proc = Proc::spawn("master", cmd, logs.join(format!("master-{port}.log")))?;
        let url = format!("http://127.0.0.1:{port}");
        let health = format!("{url}/healthz");
        wait_for(Duration::from_secs(20), "master to serve /healthz", || {
            let health = health.clone();
            async move { reqwest::get(health).await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await?;
        Ok(Self { url, proc })
    }
}

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerOpts {
    pub id: String,
    pub session_ttl: String,
    pub labels: BTreeMap<String, String>,
    /// `(uri, database)` for execution records.
    pub mongodb: Option<(String, String)>,
    /// Spool directory; `<logs>/data-<id>` when absent.
    pub data_dir: Option<PathBuf>,
    /// Start without `--worker-id` and `--data-dir`, as an operator with the defaults does (`id`
    /// then only names the log file): set `STATE_DIRECTORY` in `env` to keep it off the machine's
    /// own state directory.
    pub default_identity: bool,
    pub extra: Vec<String>,
    /// `--task-user`: who tasks without `task.user` run as. `root` by default here (the tests'
    /// tasks write into root's temporary directories); `None` for the worker's own default (a
    /// uid per team on a worker running as root).
    pub task_user: Option<String>,
    /// Extra environment, e.g. `faketime_env(..)`.
    pub env: Vec<(String, String)>,
    /// `--task-network-allow`: loopback ([`LOOPBACK_ALLOW`]) by default, as tests' HTTP and gRPC
    /// tasks call servers the test starts there; cleared, the worker refuses them.
    pub task_network_allow: Vec<String>,
}

/// The networks harness workers let tasks reach: loopback, where every test server listens.
pub const LOOPBACK_ALLOW: [&str; 2] = ["127.0.0.0/8", "::1"];

/// Environment that runs a process under libfaketime (Debian package `faketime`) with the given
/// `FAKETIME` spec (`"+2s"`, `"-2s"`, `"@2027-03-14 06:59:50"`), faking only the wall clock.
/// The library is preloaded into the process itself, so the harness still holds its pid.
pub fn faketime_env(spec: &str) -> Result<Vec<(String, String)>> {
    let lib = std::fs::read_dir("/usr/lib")?
        .filter_map(std::result::Result::ok)
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .ok_or_else(|| anyhow::anyhow!("libfaketime not found under /usr/lib/*/faketime (apt-get install faketime)"))?;
    Ok(vec![
        ("LD_PRELOAD".to_owned(), lib.display().to_string()),
        ("FAKETIME".to_owned(), spec.to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
        ("TZ".to_owned(), "UTC".to_owned()),
    ])
}

impl WorkerOpts {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            session_ttl: "3s".to_owned(),
            labels: BTreeMap::new(),
            mongodb: None,
            data_dir: None,
            default_identity: false,
            extra: Vec::new(),
            task_user: Some("root".to_owned()),
            env: Vec::new(),
            task_network_allow: LOOPBACK_ALLOW.iter().map(|&n| n.to_owned()).collect(),
        }
    }
}

/// A running `etcron-worker`.
pub struct Worker {
    pub opts: WorkerOpts,
    etcd_endpoint: String,
    namespace: String,
    logs: PathBuf,
    pub proc: Proc,
}

impl Worker {
    pub fn start(etcd_endpoint: &str, namespace: &str, logs: &Path, opts: WorkerOpts) -> Result<Self> {
        let proc = Self::spawn(etcd_endpoint, namespace, logs, &opts)?;
        Ok(Self {
            opts,
            etcd_endpoint: etcd_endpoint.to_owned(),
            namespace: namespace.to_owned(),
            logs: logs.to_path_buf(),
            proc,
        })
    }

    fn spawn(etcd_endpoint: &str, namespace: &str, logs: &Path, opts: &WorkerOpts) -> Result<Proc> {
        let mut cmd = Command::new(bin("etcron-worker")?);
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        cmd.args(["--etcd-endpoints", etcd_endpoint, "--namespace", namespace]);
        cmd.args(["--session-ttl", &opts.session_ttl, "--kill-grace", "2s"]);
        if !opts.default_identity {
            cmd.args(["--worker-id", &opts.id]);
            let data_dir = opts.data_dir.clone().unwrap_or_else(|| logs.join(format!("data-{}", opts.id)));
            cmd.arg("--data-dir").arg(data_dir);
        }
        if let Some((uri, db)) = &opts.mongodb {
            cmd.args(["--mongodb-uri", uri, "--mongodb-db", db]);
        }
        if !opts.labels.is_empty() {
            let labels: Vec<String> = opts.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            cmd.args(["--labels", &labels.join(",")]);
        }
        if !opts.task_network_allow.is_empty() {
            cmd.args(["--task-network-allow", &opts.task_network_allow.join(",")]);
        }
        match &opts.task_user {
            Some(user) => {
                cmd.args(["--task-user", user]);
            }
            // A uid per team: the cluster's workers share a table of their own, as the workers
            // of one machine do (never the machine's own /var/lib/etcron).
            None => {
                cmd.arg("--task-uid-table").arg(logs.join("task-uids.json"));
            }
        }
        cmd.args(&opts.extra);
        cmd.env("RUST_LOG", "info");
        Proc::spawn(&format!("worker {}", opts.id), cmd, logs.join(format!("worker-{}.log", opts.id)))
    }

    /// Starts the same worker again (after it was killed or stopped).
    pub fn restart(&mut self) -> Result<()> {
        self.proc.kill9();
        self.proc = Self::spawn(&self.etcd_endpoint, &self.namespace, &self.logs, &self.opts)?;
        Ok(())
    }
}

/// etcd + one master + N workers in a fresh namespace, and a directory tasks write into.
pub struct Cluster {
    pub etcd: Etcd,
    pub mongo: Mongo,
    /// The database this cluster's records go to.
    pub db: String,
    pub master: Master,
    pub workers: Vec<Worker>,
    pub namespace: String,
    pub logs: PathBuf,
    pub work: tempfile::TempDir,
    pub http: reqwest::Client,
}

/// The harness's HTTP client: it sends the master's `--api-token`, if one is among its flags.
fn api_client(master_args: &[&str]) -> Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(i) = master_args.iter().position(|a| *a == "--api-token") {
        let token = master_args.get(i + 1).context("--api-token needs a value")?;
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse()?);
    }
    Ok(reqwest::Client::builder().default_headers(headers).build()?)
}

impl Cluster {
    pub async fn start(test: &str, workers: usize) -> Result<Self> {
        Self::start_with(test, workers, false, &[]).await
    }

    /// `own_mongo`: a `mongod` only this cluster uses (so it can be stopped);
    /// `master_args`: extra flags for the master.
    pub async fn start_with(test: &str, workers: usize, own_mongo: bool, master_args: &[&str]) -> Result<Self> {
        Self::start_with_etcd(test, workers, own_mongo, master_args, ETCD_STORAGE_FLAGS).await
    }

    /// As [`Cluster::start_with`], with etcd's storage flags given (instead of
    /// [`ETCD_STORAGE_FLAGS`]).
    pub async fn start_with_etcd(
        test: &str,
        workers: usize,
        own_mongo: bool,
        master_args: &[&str],
        etcd_flags: &[&str],
    ) -> Result<Self> {
        let logs = log_dir(test);
        let etcd = Etcd::start_with(&logs, etcd_flags).await?;
        let mongo = if own_mongo { Mongo::start_own(&logs).await? } else { Mongo::start(&logs).await? };
        let db = db_name(test);
        let namespace = format!("/t-{test}");
        let mut args = vec!["--mongodb-uri", mongo.uri.as_str(), "--mongodb-db", db.as_str()];
        args.extend_from_slice(master_args);
        let master = Master::start(&etcd.endpoint, &namespace, &logs, &args).await?;
        let mut cluster = Self {
            etcd,
            mongo,
            db,
            master,
            workers: Vec::new(),
            namespace,
            logs,
            work: tempfile::tempdir()?,
            http: api_client(master_args)?,
        };
        for i in 1..=workers {
            cluster.add_worker(WorkerOpts::new(&format!("w{i}")))?;
        }
        cluster.wait_workers(workers).await?;
        Ok(cluster)
    }

    pub fn add_worker(&mut self, mut opts: WorkerOpts) -> Result<()> {
        if opts.mongodb.is_none() {
            opts.mongodb = Some((self.mongo.uri.clone(), self.db.clone()));
        }
        let w = Worker::start(&self.etcd.endpoint, &self.namespace, &self.logs, opts)?;
        self.workers.push(w);
        Ok(())
    }

    /// Waits until exactly `n` workers are registered.
    pub async fn wait_workers(&self, n: usize) -> Result<()> {
        wait_for(Duration::from_secs(30), &format!("{n} registered workers"), || async {
            let v = self.get("/api/workers").await.ok()?;
            (v["workers"].as_array()?.len() == n).then_some(())
        })
        .await
    }

    /// The record of execution `id` once it shows `status`. Records reach MongoDB through each
    /// worker's sink, so one can land after what it caused (a failover rerun) is visible.
    pub async fn record_when(&self, id: &str, status: &str) -> Result<serde_json::Value> {
        let path = format!("/api/executions/{}", urlencode(id));
        wait_for(Duration::from_secs(40), &format!("{id} recorded {status}"), || async {
            let r = self.get(&path).await.ok()?;
            (r["status"] == status).then_some(r)
        })
        .await
    }

    /// The final record of run `id`: any status but `running`, with its `finished_at`.
    pub async fn final_record(&self, id: &str) -> Result<serde_json::Value> {
        let path = format!("/api/executions/{}", urlencode(id));
        wait_for(Duration::from_secs(30), &format!("the record of {id}"), || async {
            let v = self.get(&path).await.ok()?;
            (v["status"] != "running" && v["finished_at"].is_string()).then_some(v)
        })
        .await
    }

    /// Waits until every claim of a schedule tick at or before `up_to_ms`, and of every manual or
    /// dependency run, is closed: every such run, and a second one were there a duplicate, has
    /// ended and written what it writes. Tests judge exactly-once after this, not after a
    /// grace sleep.
    pub async fn settle_claims(&self, up_to_ms: i64) -> Result<()> {
        let keys = etcron_model::keys::Keys::new(&self.namespace)?;
        let client = self.etcd.client().await?;
        wait_for(Duration::from_secs(30), &format!("every claim up to {up_to_ms} closed"), || {
            let (keys, mut client) = (&keys, client.clone());
            async move { open_claims(keys, &mut client, up_to_ms).await.ok().filter(Vec::is_empty).map(|_| ()) }
        })
        .await
    }

    /// Waits until the running marker of execution `id` is in etcd: what a failover rerun of it
    /// reads its parameters from.
    pub async fn wait_running_marker(&self, id: &str) -> Result<()> {
        let keys = etcron_model::keys::Keys::new(&self.namespace)?;
        let id: etcron_model::keys::ExecutionId = id.parse().map_err(anyhow::Error::msg)?;
        let key = keys.running(&id);
        let client = self.etcd.client().await?;
        wait_for(Duration::from_secs(30), &format!("the running marker of {id}"), || {
            let (key, mut client) = (&key, client.clone());
            async move { (client.get(key.as_str(), None).await.ok()?.count() == 1).then_some(()) }
        })
        .await
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    pub async fn get(&self, path: &str) -> Result<serde_json::Value> {
        let resp = self.http.get(format!("{}{path}", self.master.url)).send().await?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await?;
        if !status.is_success() {
            bail!("GET {path}: {status} {body}");
        }
        Ok(body)
    }

    /// Runs `job` now (`POST /api/jobs/{job}/run`): the execution id, or an error naming
    /// what the master answered when it was not 202.
    pub async fn run_now(&self, job: &str) -> Result<String> {
        let (status, body) = self.call(reqwest::Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
        anyhow::ensure!(status == 202, "run {job}: {status} {body}");
        body["execution_id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("run {job}: no execution_id in {body}"))
    }

    /// Sends a request; returns status and JSON body (Null when empty).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, serde_json::Value)> {
        self.call_with(None, method, path, body).await
    }

    /// As [`Cluster::call`], with `token` as the bearer token. A body that is not JSON reads
    /// as a JSON string.
    pub async fn call_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, serde_json::Value)> {
        self.call_with(Some(token), method, path, body).await
    }

    async fn call_with(
        &self,
        token: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, serde_json::Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.master.url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let value = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
        };
        Ok((status, value))
    }

    /// PUTs a job and fails unless the master accepted it.
    pub async fn put_job(&self, name: &str, spec: serde_json::Value) -> Result<serde_json::Value> {
        let (status, body) = self.call(reqwest::Method::PUT, &format!("/api/jobs/{name}"), Some(spec)).await?;
        if status != 200 && status != 201 {
            bail!("PUT job {name}: {status} {body}");
        }
        Ok(body)
    }

    /// Creates `n` jobs `{prefix}-{i}` that fire every second and append a `Fired` line to `file`.
    pub async fn every_second_jobs(&self, prefix: &str, n: usize, file: &Path) -> Result<Vec<String>> {
        let jobs: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        let spec =
            serde_json::json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}});
        for job in &jobs {
            self.put_job(job, spec.clone()).await?;
        }
        Ok(jobs)
    }

    /// Polls `GET /api/executions?{query}` until `check` accepts the list.
    pub async fn wait_executions<F>(&self, query: &str, what: &str, check: F) -> Result<Vec<serde_json::Value>>
    where
        F: Fn(&[serde_json::Value]) -> bool,
    {
        let path = format!("/api/executions?{query}");
        wait_for(Duration::from_secs(30), what, || async {
            let v = self.get(&path).await.ok()?;
            let list = v["executions"].as_array()?.clone();
            check(&list).then_some(list)
        })
        .await
    }

    /// Dumps every process log to stderr (for failing tests).
    pub fn dump_logs(&self) {
        for w in &self.workers {
            eprintln!("===== {} ({}) =====\n{}", w.proc.name, w.proc.log.display(), tail(&w.proc.log_text(), 60));
        }
        eprintln!("===== master =====\n{}", tail(&self.master.proc.log_text(), 40));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One line a test task appended: `job scheduled_ms attempt worker fencing_token [extra]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub job: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
    pub worker: String,
    pub fencing_token: i64,
    pub extra: Vec<String>,
}

/// A replica of `sdk/examples/hot_list.rs` registered as executor `id` against `c` (its
/// README's way: a worker's flags and `ETCRON_*` variables), with `env` (`HOT_LIST_*`) added.
pub fn hot_list_replica(c: &Cluster, id: &str, env: &[(&str, &str)]) -> Result<Proc> {
    let mut cmd = Command::new(bin_dir().join("examples").join("hot_list"));
    cmd.args(["--worker-id", id, "--session-ttl", "3s", "--kill-grace", "2s"]);
    cmd.arg("--data-dir").arg(c.logs.join(format!("data-{id}")));
    cmd.env("ETCRON_ETCD_ENDPOINTS", &c.etcd.endpoint)
        .env("ETCRON_NAMESPACE", &c.namespace)
        .env("ETCRON_MONGODB_URI", &c.mongo.uri)
        .env("ETCRON_MONGODB_DB", &c.db)
        .env("ETCRON_SERVER", &c.master.url);
    cmd.envs(env.iter().copied());
    Proc::spawn(&format!("hot_list {id}"), cmd, c.logs.join(format!("{id}.log")))
}

/// A shell command that appends one `Fired` line to `file` (atomic O_APPEND write).
pub fn record_command(file: &Path) -> String {
    format!(
        "echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN $(date +%s%3N)\" >> {}",
        file.display()
    )
}

/// Waits until every job in `jobs` has recorded a tick at or after `tick_ms`'s whole second.
pub async fn wait_tick(file: &Path, jobs: &[String], tick_ms: i64) -> Result<()> {
    let tick = (tick_ms / 1000) * 1000;
    wait_for(Duration::from_secs(30), "every job to reach the tick", || async {
        let fired = read_fired(file);
        jobs.iter().all(|j| fired.iter().any(|f| &f.job == j && f.scheduled_ms >= tick)).then_some(())
    })
    .await
}

pub fn read_fired(file: &Path) -> Vec<Fired> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some(Fired {
                job: parts.next()?.to_owned(),
                scheduled_ms: parts.next()?.parse().ok()?,
                attempt: parts.next()?.parse().ok()?,
                worker: parts.next()?.to_owned(),
                fencing_token: parts.next()?.parse().ok()?,
                extra: parts.map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// Duplicates per (job, tick, attempt) and ticks missing from the expected set.
#[derive(Debug, Default)]
pub struct TickReport {
    pub fired: usize,
    pub duplicates: Vec<(String, i64, u32)>,
    pub missing: Vec<(String, i64)>,
}

/// Checks that every job fired exactly once for each whole second in `[from_ms, to_ms]`.
pub fn check_every_second(fired: &[Fired], jobs: &[String], from_ms: i64, to_ms: i64) -> TickReport {
    let mut seen: BTreeMap<(String, i64, u32), usize> = BTreeMap::new();
    for f in fired {
        *seen.entry((f.job.clone(), f.scheduled_ms, f.attempt)).or_default() += 1;
    }
    let mut report = TickReport { fired: fired.len(), ..TickReport::default() };
    report.duplicates = seen.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k.clone()).collect();
    let first = (from_ms / 1000 + 1) * 1000;
    for job in jobs {
        let mut t = first;
        while t <= to_ms {
            if !seen.contains_key(&(job.clone(), t, 1)) {
                report.missing.push((job.clone(), t));
            }
            t += 1000;
        }
    }
    report
}

/// Every change etcd kept of `key` since revision 1, oldest first: `(deleted, lease)` per event.
/// Reads a watch until it has been quiet for half a second (the history arrives at once).
pub async fn key_history(client: &mut etcd_client::Client, key: &str) -> Result<Vec<(bool, i64)>> {
    let opts = etcd_client::WatchOptions::new().with_start_revision(1);
    let mut stream = client.watch(key, Some(opts)).await?;
    let mut events = Vec::new();
    while let Ok(msg) = tokio::time::timeout(Duration::from_millis(500), stream.message()).await {
        let Some(resp) = msg? else { break };
        for e in resp.events() {
            let lease = e.kv().map_or(0, etcd_client::KeyValue::lease);
            events.push((e.event_type() == etcd_client::EventType::Delete, lease));
        }
    }
    Ok(events)
}

pub fn now_ms() -> i64 {
    etcron_model::now_ms()
}

/// Unix ms of an RFC 3339 timestamp as the API writes it; panics on anything else.
pub fn ms(rfc3339: &serde_json::Value) -> i64 {
    let text = rfc3339.as_str().unwrap_or_else(|| panic!("not a timestamp: {rfc3339}"));
    chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}")).timestamp_millis()
}

/// CPU seconds (user + system) and resident memory in bytes of a process, from /proc.
pub fn proc_usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15 (1-based in proc(5)).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    // USER_HZ is 100 on Linux.
    Some(((utime + stime) / 100.0, rss_kb * 1024))
}

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// True while `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
        }
        Err(_) => false,
    }
}

/// A pid a task wrote into `path`.
pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Percent-encodes everything but unreserved characters (for ids in paths and queries).
pub use etcron_model::percent_encode as urlencode;

/// One scrape of a Prometheus text endpoint: samples by name with their labels.
#[derive(Debug, Default)]
pub struct Scrape {
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
    pub text: String,
}

impl Scrape {
    /// Parses the text format (`name{k="v",...} value`; comments skipped).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let mut labels = BTreeMap::new();
                    for pair in rest.trim_end_matches('}').split("\",").filter(|p| !p.is_empty()) {
                        if let Some((k, v)) = pair.split_once("=\"") {
                            labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                        }
                    }
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            samples.push((name, labels, value));
        }
        Self { samples, text: text.to_owned() }
    }

    /// Sum of the samples named `name` whose labels include all of `labels`; `None` when no
    /// sample matches.
    #[must_use]
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, v)| *v)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// Like [`Scrape::get`], 0 when absent.
    #[must_use]
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// Whether a metric family of this name is declared (`# TYPE name ...`).
    #[must_use]
    pub fn declares(&self, name: &str) -> bool {
        self.text.lines().any(|l| l.strip_prefix("# TYPE ").is_some_and(|rest| rest.split(' ').next() == Some(name)))
    }
}

/// GETs a metrics endpoint (with a bearer token when given) and parses it; an error unless 200.
pub async fn scrape(url: &str, token: Option<&str>) -> Result<Scrape> {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    if status != reqwest::StatusCode::OK {
        bail!("GET {url}: {status}: {text}");
    }
    Ok(Scrape::parse(&text))
}

/// A small deterministic generator (xorshift64*): a seed replays the same faults (chaos suite)
/// or the same deadlines (benchmarks).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A duration uniform in `from..=to` milliseconds.
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// Runs the browser test `web/tests/{script}` (playwright-core driving Debian's Chromium)
/// against the master at `url`, screenshots into `shots`; fails with its output unless it
/// exits 0.
pub fn browser_with(script: &str, url: &str, shots: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web/tests");
    anyhow::ensure!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `npm ci --prefix web/tests` (deploy/local/test.sh does)"
    );
    let mut cmd = Command::new("node");
    cmd.arg(script).arg(url).arg(shots).args(args).current_dir(&dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{script}: {text}");
    anyhow::ensure!(out.status.success(), "{script} failed:\n{text}");
    Ok(())
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().context("openssl (apt-get install openssl)")?;
    anyhow::ensure!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// In `dir`: a CA (`ca.pem`), a server certificate for 127.0.0.1 and localhost (`server.pem`,
/// `server.key`) and a client certificate (`client.pem`, `client.key`), both signed by the CA.
pub fn make_certs(dir: &Path) -> Result<()> {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=etcron test CA"]);
    openssl(dir, &ca)?;
    for (name, ext) in [
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext)?;
        let mut req = vec!["req"];
        req.extend(ec);
        let (key, csr, subj) = (format!("{name}.key"), format!("{name}.csr"), format!("/CN=etcron-{name}"));
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req)?;
        let (pem, ext) = (format!("{name}.pem"), format!("{name}.ext"));
        let sign = ["x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", &pem];
        openssl(dir, &[&sign[..], &["-days", "2", "-extfile", &ext]].concat())?;
    }
    Ok(())
}

/// The claims not yet closed (`done`) of schedule ticks at or before `up_to_ms` and of manual
/// and dependency runs, by key.
async fn open_claims(
    keys: &etcron_model::keys::Keys,
    client: &mut etcd_client::Client,
    up_to_ms: i64,
) -> Result<Vec<String>> {
    use etcron_model::keys::Key;
    let prefix = keys.claims_prefix();
    let resp = client.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    let mut open = Vec::new();
    for kv in resp.kvs() {
        let Some(Key::Claim(id)) = keys.parse(kv.key()) else { continue };
        if id.tick.scheduled_ms().is_some_and(|ms| ms > up_to_ms) {
            continue;
        }
        let claim: etcron_model::stored::Claim = serde_json::from_slice(kv.value())?;
        if claim.status.is_none() {
            open.push(String::from_utf8_lossy(kv.key()).into_owned());
        }
    }
    Ok(open)
}
