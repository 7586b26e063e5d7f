//! The HTTP client of HTTP tasks, shared by the request ([`crate::tasks::http`]) and the polls
//! and cancel of asynchronous tasks ([`crate::tasks::http_poll`]): one pooled `reqwest::Client` per
//! process, redirects followed here (secret headers kept to the origin), every hop's host
//! resolved and checked by [`crate::tasks::network`] and connected to at exactly the checked
//! addresses ([`PinnedResolver`]), and errors that name the step and the URL without
//! repeating credentials.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use etcron_model::spec::http_async::AsyncPoll;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};

use crate::tasks::network::{NoAddress, TaskNetwork};
use crate::tasks::progress::Tracker;

/// How long establishing a connection (DNS, TCP, TLS) may take, whatever the job's timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Redirect hops followed before a request counts as failed.
pub const MAX_REDIRECTS: usize = 5;

/// An HTTP task ready to run.
#[derive(Debug, Clone)]
pub struct HttpJob {
    pub method: String,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    /// Names of the headers in `headers` that are the job's `secret_headers`: never sent on to
    /// another origin.
    pub secret_headers: Vec<String>,
    pub body: Option<String>,
    /// The status that counts as success; any 2xx when `None`.
    pub expect_status: Option<u16>,
    /// Limit of the whole exchange; none when `None` (connecting is still limited).
    pub timeout: Option<Duration>,
    /// A `202 Accepted` answer names a status URL to poll (`task.async`), and how long.
    pub asynchronous: Option<(AsyncPoll, Duration)>,
    /// Where the progress of status documents goes.
    pub tracker: Option<Arc<Tracker>>,
    /// Where the request, its redirects, polls and cancel may connect.
    pub network: Arc<TaskNetwork>,
    /// Where the run's result is in a successful answer's JSON body (`task.result_pointer`).
    pub result_pointer: Option<String>,
    /// Lines for the end of the output (a parents' results header left out).
    pub notes: Vec<String>,
}

/// The run's result from `doc` (`what` names it: the response body, the final status
/// document) at `pointer`, or why there is none: the pointer finds nothing (or `null`), or the
/// value passes the result's limit.
pub(crate) fn pointed_result(pointer: &str, doc: &serde_json::Value, what: &str) -> Result<serde_json::Value, String> {
    let found = match doc.pointer(pointer) {
        None | Some(serde_json::Value::Null) => {
            let nothing = if doc.pointer(pointer).is_some() { "null" } else { "nothing" };
            return Err(format!("result_pointer {pointer:?} finds {nothing} in {what}"));
        }
        Some(found) => found,
    };
    let len = serde_json::to_vec(found).map_or(usize::MAX, |v| v.len());
    let max = etcron_model::progress::MAX_RESULT_BYTES;
    if len > max {
        return Err(format!(
            "the value at result_pointer {pointer:?} in {what} is {len} bytes as JSON; a result is at most {max}"
        ));
    }
    Ok(found.clone())
}

/// The shared client, or why there is none.
struct SharedClient {
    client: Result<reqwest::Client, String>,
    /// Set when the client could only be built without certificate roots: https cannot work.
    tls_unavailable: Option<String>,
}

static CLIENT: LazyLock<SharedClient> = LazyLock::new(build_client);

fn build_client() -> SharedClient {
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // Redirects are followed by `send`, which knows which headers are secret.
            .redirect(reqwest::redirect::Policy::none())
            // Names resolve to the addresses `send` checked, nothing else.
            .dns_resolver(Arc::new(PinnedResolver))
            .user_agent(concat!("etcron-worker/", env!("CARGO_PKG_VERSION")))
    };
    match builder().build() {
        Ok(client) => SharedClient { client: Ok(client), tls_unavailable: None },
        Err(e) => {
            // Most likely no CA certificates on this machine; plain http can still work.
            let cause = error_chain(&e);
            tracing::error!(error = %cause, "cannot set up TLS for HTTP tasks; https:// tasks will fail");
            let fallback = builder().tls_certs_only(std::iter::empty()).build().map_err(|e2| error_chain(&e2));
            SharedClient { client: fallback, tls_unavailable: Some(cause) }
        }
    }
}

/// Headers that carry credentials of their own: never sent on to another origin, as browsers
/// do; the progress token and the URL it goes to are the worker's credentials for the task.
const CREDENTIAL_HEADERS: [&str; 5] =
    ["authorization", "cookie", "proxy-authorization", "x-etcron-progress-token", "x-etcron-progress-url"];

/// The host a request is sent to and the addresses it was checked for.
#[derive(Debug, Clone)]
struct Pin {
    host: String,
    addrs: Vec<std::net::SocketAddr>,
}

tokio::task_local! {
    /// Set by [`send`] around each request: what its connection may resolve its host to.
    static PINNED: Pin;
}

/// The shared client's resolver: the host of a request made by [`send`] resolves to the
/// addresses `send` checked; another name within such a request (the proxy of the worker's
/// `HTTP(S)_PROXY`) is looked up as usual; outside one, nothing resolves.
struct PinnedResolver;

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let pinned = PINNED.try_with(|pin| pin.host.eq_ignore_ascii_case(name.as_str()).then(|| pin.addrs.clone()));
        Box::pin(async move {
            match pinned {
                Ok(Some(addrs)) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Ok(None) => {
                    let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
                    Ok(Box::new(found.collect::<Vec<_>>().into_iter()) as reqwest::dns::Addrs)
                }
                Err(_) => Err(format!("{} was not checked for this connection", name.as_str()).into()),
            }
        })
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendError {
    /// Nothing was sent, or a redirect was not followed: trying again won't help.
    Refused(String),
    /// The connection or the exchange failed.
    Failed(String),
}

impl SendError {
    pub(crate) fn message(self) -> String {
        match self {
            Self::Refused(m) | Self::Failed(m) => m,
        }
    }
}

/// One request to send: redirects are followed, and `secret_headers` (names in `headers`) go
/// only to the origin of `url`.
pub(crate) struct Outgoing<'a> {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<String>,
    pub secret_headers: &'a [String],
    pub network: &'a TaskNetwork,
    /// The step, as the log names it (`an HTTP task's request`).
    pub what: &'static str,
}

/// The shared client for a request to `url`, or why there is none.
pub(crate) fn client_for(url: &Url) -> Result<&'static reqwest::Client, String> {
    let shared = &*CLIENT;
    let client = shared.client.as_ref().map_err(|e| format!("the worker cannot make HTTP requests: {e}"))?;
    if let (Some(cause), "https") = (&shared.tls_unavailable, url.scheme()) {
        return Err(format!("requesting {} failed: https is unavailable on this worker: {cause}", redacted(url)));
    }
    Ok(client)
}

/// Removes the headers that may not leave the origin: `secret_headers` and credentials.
pub(crate) fn keep_to_origin(headers: &mut HeaderMap, secret_headers: &[String]) {
    for name in secret_headers.iter().map(String::as_str).chain(CREDENTIAL_HEADERS) {
        headers.remove(name);
    }
}

/// Sends the request and follows redirects per [`next_hop`], each hop's host checked first;
/// errors name the step and the URL.
pub(crate) async fn send(out: Outgoing<'_>) -> Result<reqwest::Response, SendError> {
    let Outgoing { mut method, mut url, mut headers, mut body, secret_headers, network, what } = out;
    let client = client_for(&url).map_err(SendError::Failed)?;
    let first = redacted(&url);
    for hop in 0..=MAX_REDIRECTS {
        let pin = checked(network, what, &url).await?;
        let mut request = client.request(method.clone(), url.clone()).headers(headers.clone());
        if let Some(body) = &body {
            request = request.body(body.clone());
        }
        let response =
            PINNED.scope(pin, request.send()).await.map_err(|e| SendError::Failed(describe(&e, &redacted(&url))))?;
        let location = response.headers().get(reqwest::header::LOCATION).cloned();
        let (true, Some(location)) = (is_followed(response.status()), location) else { return Ok(response) };
        if hop == MAX_REDIRECTS {
            break;
        }
        let location = location.to_str().unwrap_or_default();
        let next = next_hop(&url, response.status(), location, &method)
            .map_err(|why| SendError::Refused(format!("following redirects from {first} failed: {why}")))?;
        if !next.same_origin {
            keep_to_origin(&mut headers, secret_headers);
        }
        if next.drop_body {
            body = None;
            headers.remove(reqwest::header::CONTENT_TYPE);
        }
        (url, method) = (next.url, next.method);
    }
    Err(SendError::Refused(format!("following redirects from {first} failed: more than {MAX_REDIRECTS} redirects")))
}

/// The addresses `url`'s host may be reached at, checked by `network`.
async fn checked(network: &TaskNetwork, what: &str, url: &Url) -> Result<Pin, SendError> {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err(SendError::Refused(format!("{} has no host", redacted(url))));
    };
    match network.addresses(what, host, port).await {
        Ok(addrs) => Ok(Pin { host: host.trim_start_matches('[').trim_end_matches(']').to_owned(), addrs }),
        Err(NoAddress::Refused(r)) => Err(SendError::Refused(format!("{} was not requested: {r}", redacted(url)))),
        Err(NoAddress::Lookup(e)) => Err(SendError::Failed(format!("connecting to {} failed: {e}", redacted(url)))),
    }
}

/// The redirect statuses that are followed (as reqwest and browsers do).
fn is_followed(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Where a redirect goes and what is sent there.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    pub url: Url,
    pub method: Method,
    /// 301/302/303: the body (and its `Content-Type`) is not sent again.
    pub drop_body: bool,
    /// Same scheme, host and port: secret headers may go along.
    pub same_origin: bool,
}

/// The next request after a `status` answer naming `location`, or why it is not made: only
/// `http`/`https` targets, never from `https` to `http`.
pub(crate) fn next_hop(from: &Url, status: StatusCode, location: &str, method: &Method) -> Result<Hop, String> {
    let url = from.join(location).map_err(|e| format!("the redirect's Location {location:?} is not a URL: {e}"))?;
    let shown = redacted(&url);
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("a redirect to {shown} is not followed (only http and https)"));
    }
    if from.scheme() == "https" && url.scheme() == "http" {
        return Err(format!("a redirect from https to {shown} (plain http) is not followed"));
    }
    let drop_body = matches!(status.as_u16(), 301..=303);
    let method = if drop_body && *method != Method::HEAD { Method::GET } else { method.clone() };
    let same_origin = url.origin() == from.origin();
    Ok(Hop { url, method, drop_body, same_origin })
}

pub(crate) fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid header name {name:?}"))?;
        // The value itself is not repeated: it may be a credential.
        let value = HeaderValue::from_str(value).map_err(|_| format!("invalid value for header {name}"))?;
        // Append, not insert: names differing only in case are both sent.
        map.append(header, value);
    }
    Ok(map)
}

pub(crate) fn status_line(code: StatusCode) -> String {
    match code.canonical_reason() {
        Some(reason) => format!("HTTP {} {reason}\n", code.as_u16()),
        None => format!("HTTP {}\n", code.as_u16()),
    }
}

/// The URL as shown in errors, without a password it may carry.
pub(crate) fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some("redacted"));
    }
    shown.to_string()
}

/// What failed, naming the step and the URL.
fn describe(e: &reqwest::Error, shown: &str) -> String {
    let step = if e.is_connect() {
        "connecting to"
    } else if e.is_redirect() {
        "following redirects from"
    } else if e.is_timeout() {
        "waiting for"
    } else {
        "requesting"
    };
    format!("{step} {shown} failed: {}", error_chain(e))
}

/// The causes below a reqwest error, most specific last, without reqwest's own summary (it
/// repeats the URL unredacted) and without wrappers that add nothing.
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let io = c.downcast_ref::<std::io::Error>();
        let tls = is_tls(c);
        let text = match io {
            // "connection refused" reads better than "Connection refused (os error 111)".
            Some(io) if io.raw_os_error().is_some() && io.kind() != std::io::ErrorKind::Other => io.kind().to_string(),
            _ if tls => format!("TLS: {c}"),
            _ => c.to_string(),
        };
        let wrapper = text.starts_with("client error (") || text == "tcp connect error";
        if !wrapper && !parts.iter().any(|p| p == &text) {
            parts.push(text);
        }
        cause = c.source();
    }
    if parts.is_empty() {
        // Nothing below it: reqwest's own summary, without the URL.
        let mut text = e.to_string();
        if let Some(cut) = text.find(" for url (") {
            text.truncate(cut);
        }
        parts.push(text);
    }
    parts.join(": ")
}

/// Whether `e` is a rustls error, also when wrapped in (nested) `io::Error`s, whose `source()`
/// skips the error they wrap.
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = e;
    loop {
        if current.is::<rustls::Error>() {
            return true;
        }
        match current.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => current = inner,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve as _;

    fn name(host: &str) -> reqwest::dns::Name {
        host.parse().unwrap_or_else(|e| panic!("{host}: {e:?}"))
    }

    #[tokio::test]
    async fn the_resolver_answers_only_the_checked_addresses() {
        // Outside a checked request nothing resolves: a connection could not pick its own address.
        assert!(PinnedResolver.resolve(name("localhost")).await.is_err());
        let pin = Pin { host: "api.example".to_owned(), addrs: vec!["192.0.2.7:0".parse().unwrap()] };
        let found: Vec<_> =
            PINNED.scope(pin, async { PinnedResolver.resolve(name("API.example")).await.unwrap().collect() }).await;
        assert_eq!(found, vec!["192.0.2.7:0".parse::<std::net::SocketAddr>().unwrap()], "the checked one, no lookup");
    }
}
