//! A webhook receiver for tests: a small HTTP/1.1 server on a free loopback port that records
//! every request (method, path, headers, body) and answers 200, or as told per path: a status
//! for the next n requests, or no answer at all (the connection is held until the client
//! gives up).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When its head arrived (Unix ms).
    pub at_ms: i64,
}

impl Received {
    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (Null when it is not JSON).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    /// Path -> (requests still to refuse, status to refuse them with).
    refuse: HashMap<String, (u32, u16)>,
    /// Paths that get no answer.
    hang: HashSet<String>,
}

/// The receiver; the server stops when it is dropped.
pub struct Receiver {
    /// `http://127.0.0.1:{port}`.
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Ok(Self { url, state, task })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `{url}{path}`.
    #[must_use]
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Answers the next `n` requests to `path` with `status` (then 200 again).
    pub fn refuse_next(&self, path: &str, n: u32, status: u16) {
        self.lock().refuse.insert(path.to_owned(), (n, status));
    }

    /// Never answers requests to `path`.
    pub fn hang(&self, path: &str) {
        self.lock().hang.insert(path.to_owned());
    }

    /// The requests to `path` so far, oldest first.
    #[must_use]
    pub fn received(&self, path: &str) -> Vec<Received> {
        self.lock().received.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// Every request so far.
    #[must_use]
    pub fn all(&self) -> Vec<Received> {
        self.lock().received.clone()
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    // One request per connection: every answer says `Connection: close`.
    let Some(request) = read_request(&mut stream).await else { return };
    let (hang, status) = {
        let mut s = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let hang = s.hang.contains(&request.path);
        let status = match s.refuse.get_mut(&request.path) {
            Some((n, status)) if *n > 0 => {
                *n -= 1;
                *status
            }
            _ => 200,
        };
        s.received.push(request);
        (hang, status)
    };
    if hang {
        // Hold the connection until the client closes it (its timeout).
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(300), stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    }
    let body = if status == 200 { "ok" } else { "receiver told to refuse" };
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads one request with a `Content-Length` body; `None` if the connection ends first.
async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received { method, path, headers, body, at_ms: etcron_model::now_ms() })
}
