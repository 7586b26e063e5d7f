//! The HTTP client of the master's API: base URL, bearer token, per-request timeout, and API
//! error bodies turned into [`ApiError`]s. etcronctl talks to the master only, never to etcd.

use std::time::Duration;

use anyhow::Context as _;
use reqwest::Method;
use serde_json::Value;

use crate::exit::{ApiError, Unreachable, Usage};

/// The master's API as etcronctl calls it.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `http(s)://host:port` without a trailing slash.
    server: String,
    token: Option<String>,
    timeout: Duration,
    /// The command sending the requests (`etcronctl apply`), as `X-Etcron-Client`: the master
    /// keeps it in the saved versions of the jobs it writes.
    note: Option<String>,
    /// The namespace asked for (`--namespace`), as `X-Etcron-Namespace`; none: the master's default.
    namespace: Option<String>,
}

/// An answer with a 2xx status.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The JSON body; `Null` when empty.
    pub body: Value,
}

/// Percent-encodes a path segment (job names and execution ids hold `@`, `#`, `:`).
pub use etcron_model::percent_encode as segment;

/// `?a=1&b=2` from the pairs whose value is set (empty when none is).
#[must_use]
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let set: Vec<(&str, &str)> = pairs.iter().filter_map(|(k, v)| v.as_deref().map(|v| (*k, v))).collect();
    if set.is_empty() {
        return String::new();
    }
    format!("?{}", serde_urlencoded::to_string(set).unwrap_or_default())
}

impl Client {
    /// A client of the master at `server`; `token` is sent as `Authorization: Bearer`.
    pub fn new(server: &str, token: Option<String>, timeout: Duration) -> anyhow::Result<Self> {
        let server = server.trim().trim_end_matches('/');
        // `host:port` (no scheme) is a plain-HTTP master, as `curl` reads it.
        let server = if server.contains("://") { server.to_owned() } else { format!("http://{server}") };
        let url = reqwest::Url::parse(&server)
            .map_err(|e| Usage(format!("--server {server:?} is not a URL ({e}); e.g. http://127.0.0.1:8070")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(Usage(format!("--server {server:?} must be an http:// or https:// URL")).into());
        }
        let token = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .user_agent(concat!("etcronctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the HTTP client")?;
        Ok(Self { http, server, token, timeout, note: None, namespace: None })
    }

    /// The same client, asking for `namespace` (`--namespace`) in every request: a valid key
    /// namespace (`/etcron-b`), or a usage error.
    pub fn with_namespace(self, namespace: Option<String>) -> anyhow::Result<Self> {
        let namespace = namespace.filter(|n| !n.is_empty());
        if let Some(ns) = &namespace {
            etcron_model::keys::Keys::new(ns).map_err(|e| Usage(format!("--namespace {ns:?}: {e}")))?;
        }
        Ok(Self { namespace, ..self })
    }

    /// The same client, naming `command` (`etcronctl jobs edit`) in every request.
    #[must_use]
    pub fn with_note(self, command: String) -> Self {
        Self { note: Some(command), ..self }
    }

    #[cfg(test)]
    #[must_use]
    pub fn server(&self) -> &str {
        &self.server
    }

    /// A request to `path` (starting with `/`), with the token.
    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.server));
        if let Some(note) = &self.note {
            req = req.header("X-Etcron-Client", note);
        }
        if let Some(namespace) = &self.namespace {
            req = req.header("X-Etcron-Namespace", namespace);
        }
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> Unreachable {
        let cause = if e.is_timeout() {
            format!("no answer within {} (--timeout)", humantime::format_duration(self.timeout))
        } else {
            // reqwest's own text is generic ("error sending request"); the root cause says why.
            let mut cause: &dyn std::error::Error = e;
            while let Some(next) = cause.source() {
                cause = next;
            }
            cause.to_string()
        };
        Unreachable { server: self.server.clone(), cause }
    }

    /// Sends a request with optional JSON body and headers; a non-2xx answer is an
    /// [`ApiError`]. A `429` is waited out as its `Retry-After` says (the master refused it before
    /// doing anything, so sending it again is safe), for at most `--timeout` in all.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) -> anyhow::Result<Reply> {
        let mut waited = Duration::ZERO;
        let resp = loop {
            let mut req = self.request(method.clone(), path).timeout(self.timeout);
            for (name, value) in headers {
                req = req.header(*name, value);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
            match retry_after(&resp) {
                Some(wait) if waited + wait <= self.timeout => {
                    tokio::time::sleep(wait).await;
                    waited += wait;
                }
                _ => break resp,
            }
        };
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
        let value =
            if text.trim().is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::Null) };
        if !(200..300).contains(&status) {
            return Err(ApiError::from_body(status, &value, &text).into());
        }
        Ok(Reply { body: value })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.send(Method::GET, path, None, &[]).await?.body)
    }

    pub async fn post(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.send(Method::POST, path, None, &[]).await?.body)
    }

    /// Opens a streaming GET (server-sent events): no overall timeout, only the connect one.
    pub async fn open_stream(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let resp = self
            .request(Method::GET, path)
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let text = resp.text().await.unwrap_or_default();
            let value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Err(ApiError::from_body(status, &value, &text).into());
        }
        Ok(resp)
    }

    /// The next chunk of a streaming body; `None` at its end.
    pub async fn chunk(&self, resp: &mut reqwest::Response) -> anyhow::Result<Option<Vec<u8>>> {
        let chunk = resp.chunk().await;
        chunk
            .map(|c| c.map(|b| b.to_vec()))
            .map_err(|e| anyhow::Error::new(self.unreachable(&e)).context("reading the stream"))
    }
}

/// How long a `429` answer asks to wait (`Retry-After` in seconds, 1 s when absent, at most
/// a minute); `None` for any other answer.
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    if resp.status() != reqwest::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let secs = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    Some(Duration::from_secs(secs.clamp(1, 60)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_are_encoded_as_one_path_segment() {
        assert_eq!(segment("nightly-report"), "nightly-report");
        assert_eq!(segment("a@manual-1f#1"), "a%40manual-1f%231");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn queries_leave_out_unset_parameters() {
        assert_eq!(query(&[("job", None)]), "");
        let q = query(&[("job", Some("a".into())), ("status", None), ("q", Some("disk full".into()))]);
        assert_eq!(q, "?job=a&q=disk+full");
    }

    #[test]
    fn the_server_is_an_http_url_or_host_and_port() {
        let t = Duration::from_secs(1);
        assert!(Client::new("http://127.0.0.1:8070/", None, t).is_ok());
        assert_eq!(Client::new("http://127.0.0.1:8070/", None, t).unwrap().server(), "http://127.0.0.1:8070");
        assert_eq!(Client::new("127.0.0.1:8070", None, t).unwrap().server(), "http://127.0.0.1:8070");
        assert_eq!(Client::new("master-1:8070/", None, t).unwrap().server(), "http://master-1:8070");
        let c = Client::new("127.0.0.1:8070", None, t).unwrap();
        assert!(c.clone().with_namespace(Some("/etcron-b".to_owned())).is_ok());
        assert!(c.clone().with_namespace(None).is_ok());
        let e = c.with_namespace(Some("etcron-b".to_owned())).unwrap_err();
        assert!(e.to_string().starts_with("--namespace \"etcron-b\""), "{e}");
        for bad in ["ftp://x", "not a url", "http://[::1"] {
            let e = Client::new(bad, None, t).unwrap_err();
            assert!(e.is::<Usage>(), "{bad}: {e}");
        }
    }
}
