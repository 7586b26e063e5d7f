//! A TCP proxy between a process and etcd that a test can pause (stop forwarding, keeping the
//! connections) and resume, to put a watcher behind while etcd moves on.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub endpoint: String,
    paused: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = listener.local_addr()?.to_string();
        let (paused, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pump(dr, uw, rx.clone()));
                    tokio::spawn(pump(ur, dw, rx));
                });
            }
        });
        Ok(Self {
            endpoint,
            paused,
            task,
        })
    }

    /// Stop forwarding bytes in both directions (connections stay open).
    pub fn pause(&self) {
        let _ = self.paused.send(true);
    }

    pub fn resume(&self) {
        let _ = self.paused.send(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
