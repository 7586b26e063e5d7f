//! A TCP proxy between a process and etcd that a test can pause (stop forwarding, keeping the
//! connections), cut (close every connection and refuse new ones) and restore, to put a
//! watcher behind while etcd moves on or to make a client reconnect.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    Paused,
    /// Connections of generation < `gen` are closed; new ones are refused.
    Cut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    mode: Mode,
    generation: u64,
}

pub struct Proxy {
    pub endpoint: String,
    state: watch::Sender<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = listener.local_addr()?.to_string();
        let (state, rx) = watch::channel(State { mode: Mode::Open, generation: 0 });
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let current = *rx.borrow();
                if current.mode == Mode::Cut {
                    drop(down);
                    continue;
                }
                let upstream = upstream.clone();
                let rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pump(dr, uw, rx.clone(), current.generation));
                    tokio::spawn(pump(ur, dw, rx, current.generation));
                });
            }
        });
        Ok(Self { endpoint, state, task })
    }

    /// Stop forwarding bytes in both directions (connections stay open).
    pub fn pause(&self) {
        self.state.send_modify(|s| s.mode = Mode::Paused);
    }

    /// Close every connection and refuse new ones until `restore`.
    pub fn cut(&self) {
        self.state.send_modify(|s| {
            s.mode = Mode::Cut;
            s.generation += 1;
        });
    }

    /// Forward again (after `pause` or `cut`).
    pub fn resume(&self) {
        self.state.send_modify(|s| s.mode = Mode::Open);
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
    mut state: watch::Receiver<State>,
    generation: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Waits while paused; false once this connection has been cut.
    async fn may_forward(state: &mut watch::Receiver<State>, generation: u64) -> bool {
        match state.wait_for(|s| s.generation != generation || s.mode == Mode::Open).await {
            Ok(s) => s.generation == generation,
            Err(_) => false,
        }
    }
    loop {
        if !may_forward(&mut state, generation).await {
            return;
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = state.wait_for(|s| s.generation != generation) => return,
        };
        if !may_forward(&mut state, generation).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
