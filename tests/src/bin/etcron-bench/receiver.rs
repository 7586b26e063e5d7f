//! A minimal HTTP/1.1 server for the e2e benchmark's HTTP tasks: answers every request `204`
//! (keep-alive) and notes when it arrived, with the `X-Etcron-*` identity headers.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Hit {
    pub execution_id: String,
    pub job: String,
    pub scheduled_ms: i64,
    pub worker_id: String,
    pub received_ms: i64,
}

pub struct Receiver {
    pub url: String,
    pub hits: Arc<Mutex<Vec<Hit>>>,
}

impl Receiver {
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hit", listener.local_addr()?);
        let hits = Arc::new(Mutex::new(Vec::new()));
        let shared = hits.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Ok(Self { url, hits })
    }

    /// Requests received so far.
    pub fn count(&self) -> usize {
        self.hits.lock().map(|h| h.len()).unwrap_or_default()
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

async fn serve(mut stream: tokio::net::TcpStream, hits: Arc<Mutex<Vec<Hit>>>) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // Requests carry no body (GET): a request ends at the blank line.
        let end = loop {
            if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break pos + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let received_ms = etcron_model::now_ms();
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let header = |name: &str| {
            head.lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()))
                .unwrap_or_default()
                .to_owned()
        };
        let scheduled_ms =
            chrono::DateTime::parse_from_rfc3339(&header("x-etcron-scheduled-at")).map_or(0, |t| t.timestamp_millis());
        let hit = Hit {
            execution_id: header("x-etcron-execution-id"),
            job: header("x-etcron-job"),
            scheduled_ms,
            worker_id: header("x-etcron-worker-id"),
            received_ms,
        };
        if let Ok(mut h) = hits.lock() {
            h.push(hit);
        }
        if stream.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").await.is_err() {
            return;
        }
    }
}
