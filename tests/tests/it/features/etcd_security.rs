//! Masters and workers reach a secured etcd: TLS with a CA made in the test and client
//! certificates (etcd's `--client-cert-auth`), and etcd's own user/password auth with a role
//! limited to the namespace. Real etcd, a real `mongod` and processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use etcron_common::etcd::{connect, EtcdConfig, EtcdTls};
use etcron_tests::{
    bin, db_name, free_port, log_dir, make_certs, wait_for, Etcd, Master, Mongo, Proc, Worker, WorkerOpts,
};
use serde_json::json;

/// etcd serving clients over TLS only, requiring a client certificate signed by the CA.
async fn tls_etcd(dir: &Path, logs: &Path) -> (Proc, String) {
    let (client_port, peer_port) = (free_port(), free_port());
    let client = format!("https://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut cmd = Command::new("etcd");
    cmd.args(["--name", "tls", "--data-dir"]).arg(dir.join("etcd-data"));
    cmd.args(["--listen-client-urls", &client, "--advertise-client-urls", &client]);
    cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
    cmd.args(["--initial-cluster", &format!("tls={peer}"), "--log-level", "warn"]);
    cmd.arg("--cert-file").arg(dir.join("server.pem")).arg("--key-file").arg(dir.join("server.key"));
    cmd.arg("--trusted-ca-file").arg(dir.join("ca.pem")).arg("--client-cert-auth");
    let proc = Proc::spawn("etcd-tls", cmd, logs.join("etcd-tls.log")).unwrap();
    let config = EtcdConfig {
        endpoints: vec![client.clone()],
        tls: Some(EtcdTls {
            ca_pem: Some(std::fs::read(dir.join("ca.pem")).unwrap()),
            identity: Some((
                std::fs::read(dir.join("client.pem")).unwrap(),
                std::fs::read(dir.join("client.key")).unwrap(),
            )),
        }),
        ..EtcdConfig::default()
    };
    wait_for(Duration::from_secs(20), "etcd to serve over TLS", || async {
        let mut c = connect(&config).await.ok()?;
        c.get("/", None).await.ok().map(|_| ())
    })
    .await
    .unwrap();
    (proc, client)
}

fn path_arg(p: PathBuf) -> String {
    p.display().to_string()
}

/// Creates a job that writes a file through the master, and waits until a worker ran it.
async fn job_runs(master: &Master, out: &Path) {
    let http = reqwest::Client::new();
    let spec =
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": format!("touch {}", out.display())}});
    let resp = http.put(format!("{}/api/jobs/secured", master.url)).json(&spec).send().await.unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    wait_for(Duration::from_secs(20), "the job to run", || async { out.exists().then_some(()) }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn masters_and_workers_use_etcd_over_tls_with_client_certificates() -> anyhow::Result<()> {
    let logs = log_dir("etcd-tls");
    let certs = tempfile::tempdir()?;
    make_certs(certs.path())?;
    let (_etcd, endpoint) = tls_etcd(certs.path(), &logs).await;
    let mongo = Mongo::start(&logs).await?;
    let db = db_name("etcd-tls");
    let c = |f: &str| path_arg(certs.path().join(f));
    let tls_args = [
        "--etcd-ca-file".to_owned(),
        c("ca.pem"),
        "--etcd-cert-file".to_owned(),
        c("client.pem"),
        "--etcd-key-file".to_owned(),
        c("client.key"),
    ];
    let mut master_args: Vec<&str> = vec!["--mongodb-uri", &mongo.uri, "--mongodb-db", &db];
    master_args.extend(tls_args.iter().map(String::as_str));
    let master = Master::start(&endpoint, "/t-tls", &logs, &master_args).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.mongodb = Some((mongo.uri.clone(), db.clone()));
    opts.extra = tls_args.to_vec();
    let _worker = Worker::start(&endpoint, "/t-tls", &logs, opts)?;
    let out = certs.path().join("ran");
    job_runs(&master, &out).await;

    // Without the client certificate etcd refuses the connection: the master cannot read etcd,
    // and says so in its readiness answer (or stops at start-up).
    let port = free_port();
    let mut cmd = Command::new(bin("etcron-master")?);
    cmd.args(["--etcd-endpoints", &endpoint, "--etcd-ca-file", &c("ca.pem"), "--listen", &format!("127.0.0.1:{port}")]);
    cmd.args(["--mongodb-uri", &mongo.uri, "--mongodb-db", &db]);
    let mut lone = Proc::spawn("master-no-cert", cmd, logs.join("master-no-cert.log"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if !lone.running() {
            assert!(lone.log_text().contains("etcd"), "{}", lone.log_text());
            break;
        }
        if let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await {
            let body: serde_json::Value = resp.json().await?;
            if body["etcd"]["ok"] == false {
                break;
            }
            assert_ne!(body["etcd"]["ok"], true, "etcd accepted a client without a certificate: {body}");
        }
        assert!(std::time::Instant::now() < deadline, "the master without a certificate neither stopped nor failed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lone.kill9();
    // A missing file is refused at start-up, naming the setting.
    let out = Command::new(bin("etcron-worker")?)
        .args(["--etcd-endpoints", &endpoint, "--etcd-ca-file", "/nonexistent/ca.pem"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("etcd_ca_file: cannot read /nonexistent/ca.pem"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn masters_and_workers_authenticate_to_etcd_with_a_role_limited_to_the_namespace() -> anyhow::Result<()> {
    let logs = log_dir("etcd-auth");
    let etcd = Etcd::start(&logs).await?;
    let ctl = |args: &[&str]| {
        let out = Command::new("etcdctl").args(["--endpoints", &etcd.endpoint]).args(args).output().unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ctl(&["role", "add", "etcron"]);
    ctl(&["role", "grant-permission", "etcron", "--prefix=true", "readwrite", "/t-auth/"]);
    ctl(&["user", "add", "etcron:s3cret-pw"]);
    ctl(&["user", "grant-role", "etcron", "etcron"]);
    ctl(&["role", "add", "root"]);
    ctl(&["user", "add", "root:root-pw"]);
    ctl(&["user", "grant-role", "root", "root"]);
    ctl(&["auth", "enable"]);

    let mongo = Mongo::start(&logs).await?;
    let db = db_name("etcd-auth");
    let dir = tempfile::tempdir()?;
    let password_file = dir.path().join("etcd-password");
    std::fs::write(&password_file, "s3cret-pw\n")?;
    let password_file = path_arg(password_file);
    let master = Master::start(
        &etcd.endpoint,
        "/t-auth",
        &logs,
        &[
            "--mongodb-uri",
            &mongo.uri,
            "--mongodb-db",
            &db,
            "--etcd-user",
            "etcron",
            "--etcd-password-file",
            &password_file,
        ],
    )
    .await?;
    let mut opts = WorkerOpts::new("w1");
    opts.mongodb = Some((mongo.uri.clone(), db.clone()));
    opts.extra = vec!["--etcd-user".to_owned(), "etcron".to_owned()];
    opts.env = vec![("ETCRON_ETCD_PASSWORD".to_owned(), "s3cret-pw".to_owned())];
    let _worker = Worker::start(&etcd.endpoint, "/t-auth", &logs, opts)?;
    let out = dir.path().join("ran");
    job_runs(&master, &out).await;

    // A wrong password stops the worker at start-up with a line that says why.
    let mut cmd = Command::new(bin("etcron-worker")?);
    cmd.args(["--etcd-endpoints", &etcd.endpoint, "--namespace", "/t-auth", "--etcd-user", "etcron"]);
    cmd.env("ETCRON_ETCD_PASSWORD", "wrong").arg("--data-dir").arg(dir.path().join("w2"));
    let mut wrong = Proc::spawn("worker-wrong-password", cmd, logs.join("worker-wrong-password.log"))?;
    let code = wrong.wait_exit(Duration::from_secs(30))?;
    assert!(code.is_some_and(|c| c != 0), "exit code {code:?}");
    let text = wrong.log_text();
    assert!(text.contains("authentication failed") || text.contains("invalid"), "{text}");
    // Outside its namespace the role may do nothing.
    let mut cmd = Command::new(bin("etcron-worker")?);
    cmd.args(["--etcd-endpoints", &etcd.endpoint, "--namespace", "/elsewhere", "--etcd-user", "etcron"]);
    cmd.env("ETCRON_ETCD_PASSWORD", "s3cret-pw").arg("--data-dir").arg(dir.path().join("w3"));
    let mut outside = Proc::spawn("worker-outside", cmd, logs.join("worker-outside.log"))?;
    wait_for(Duration::from_secs(30), "the worker outside its namespace to be refused", || async {
        outside.log_text().contains("permission denied").then_some(())
    })
    .await?;
    outside.kill9();
    Ok(())
}
