//! Who may call the API: bearer tokens with a global role and roles per team (`crate::access`),
//! kept as SHA-256 hashes in the master's config (`[[auth.tokens]]`) plus optionally one admin
//! token from `ETCRON_API_TOKEN`, and a per-caller rate limit on requests that change something.
//!
//! With no token configured the API is open (every caller is `anonymous`, a global admin);
//! the master refuses to start that way on a non-loopback address unless told
//! `--insecure-no-auth`. The console's page and assets, `/healthz` and `/readyz` stay open so a
//! browser can load the page and then ask for a token.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use crate::access::{Access, Caller, Role, Scope};
use crate::error::ApiError;
use crate::layers::client::Cidr;

/// One `[[auth.tokens]]` entry of the config file: a global `role`, roles per team (`teams =
/// { payments = "operator" }`), or both; at least one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it; recorded in the audit log.
    pub name: String,
    /// The role on every job.
    #[serde(default)]
    pub role: Option<Role>,
    /// The role on the jobs of each team.
    #[serde(default)]
    pub teams: BTreeMap<String, Role>,
    /// Hex SHA-256 of the token (`etcron-master hash-token` prints one).
    pub sha256: String,
}

struct Token {
    name: String,
    access: Access,
    hash: [u8; 32],
}

/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest caller name.
const MAX_NAME_LEN: usize = 64;

/// The accepted tokens and the mutation rate limit.
#[derive(Clone)]
pub struct Auth {
    tokens: Arc<Vec<Token>>,
    limiter: Option<Arc<RateLimiter>>,
    /// Wrong tokens per client address: a budget, then 429 for wrong tokens (a valid token
    /// always passes).
    failures: Arc<RateLimiter>,
    /// Proxies whose `X-Forwarded-For` names the client (`crate::layers::client`).
    proxies: Arc<Vec<Cidr>>,
}

/// Failed authentications one address may make: `AUTH_FAILURE_BURST` at once, then one every
/// `1 / AUTH_FAILURE_RATE` seconds.
pub const AUTH_FAILURE_RATE: f64 = 1.0;
pub const AUTH_FAILURE_BURST: u32 = 20;

impl Default for Auth {
    fn default() -> Self {
        Self {
            tokens: Arc::default(),
            limiter: None,
            failures: Arc::new(RateLimiter::new(AUTH_FAILURE_RATE, AUTH_FAILURE_BURST)),
            proxies: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<(&str, &Access)> = self.tokens.iter().map(|t| (t.name.as_str(), &t.access)).collect();
        f.debug_struct("Auth").field("tokens", &names).finish_non_exhaustive()
    }
}

/// SHA-256 of `token`, in hex.
#[must_use]
pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token (32 bytes, hex).
#[must_use]
pub fn new_token() -> String {
    (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

fn check_token_text(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!("must be at least {MIN_TOKEN_LEN} characters"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces".to_owned());
    }
    Ok(())
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Auth {
    /// No authentication.
    #[must_use]
    pub fn open() -> Self {
        Self::default()
    }

    /// One token with every permission (the `ETCRON_API_TOKEN` case), named `api-token`.
    ///
    /// # Errors
    /// When the token is shorter than [`MIN_TOKEN_LEN`] or holds spaces or control characters.
    pub fn with_token(token: &str) -> Result<Self, String> {
        Self::new(&[], Some(token))
    }

    /// The configured tokens, plus `env_token` (admin) when given.
    ///
    /// # Errors
    /// A line naming the bad entry: a malformed hash, a bad name, a bad team, no role at all,
    /// a duplicate.
    pub fn new(configured: &[TokenConfig], env_token: Option<&str>) -> Result<Self, String> {
        let mut tokens = Vec::new();
        for (i, t) in configured.iter().enumerate() {
            let at = format!("auth.tokens[{i}]");
            if t.name.is_empty()
                || t.name.len() > MAX_NAME_LEN
                || !t.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
            {
                return Err(format!("{at}.name: 1 to {MAX_NAME_LEN} letters, digits, . _ @ -"));
            }
            let hash = parse_hash(&t.sha256.to_ascii_lowercase())
                .ok_or_else(|| format!("{at}.sha256: must be 64 hex digits (etcron-master hash-token prints one)"))?;
            for team in t.teams.keys() {
                etcron_model::spec::validate_team(team).map_err(|e| format!("{at}.teams: {e}"))?;
            }
            if t.role.is_none() && t.teams.is_empty() {
                return Err(format!(
                    "{at}: {:?} has no role: give it a role (viewer, operator, admin), teams = {{ TEAM = \"ROLE\" }}, or both",
                    t.name
                ));
            }
            tokens.push(Token { name: t.name.clone(), access: Access { role: t.role, teams: t.teams.clone() }, hash });
        }
        if let Some(token) = env_token {
            check_token_text(token).map_err(|e| format!("ETCRON_API_TOKEN: {e}"))?;
            let access = Access::global(Role::Admin);
            tokens.push(Token { name: "api-token".to_owned(), access, hash: Sha256::digest(token).into() });
        }
        for (i, a) in tokens.iter().enumerate() {
            if let Some(b) = tokens[..i].iter().find(|b| b.name == a.name || b.hash == a.hash) {
                return Err(format!("auth tokens: {:?} and {:?} repeat a name or a token", b.name, a.name));
            }
        }
        Ok(Self { tokens: Arc::new(tokens), ..Self::default() })
    }

    /// Limits each caller to `per_second` changing requests on average, `burst` at once.
    #[must_use]
    pub fn with_rate_limit(mut self, per_second: f64, burst: u32) -> Self {
        self.limiter = Some(Arc::new(RateLimiter::new(per_second, burst)));
        self
    }

    /// Takes the client's address from `X-Forwarded-For` when the peer is in `proxies`.
    #[must_use]
    pub fn with_trusted_proxies(mut self, proxies: Vec<Cidr>) -> Self {
        self.proxies = Arc::new(proxies);
        self
    }

    /// The client of a request from `peer` (see `crate::layers::client::client_address`).
    #[must_use]
    pub fn client(&self, peer: std::net::IpAddr, headers: &axum::http::HeaderMap) -> std::net::IpAddr {
        crate::layers::client::client_address(peer, headers, &self.proxies)
    }

    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The names and roles of the tokens (never the hashes), as `whoami` shows a caller.
    #[must_use]
    pub fn list(&self) -> Vec<serde_json::Value> {
        self.tokens.iter().map(|t| Caller { name: t.name.clone(), access: t.access.clone() }.shown()).collect()
    }

    /// The holder of `presented`, comparing its hash with every token in constant time.
    fn identify(&self, presented: &str) -> Option<Caller> {
        let hash: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        // Every token is compared, found or not, so timing says nothing about which matched.
        for t in self.tokens.iter() {
            if constant_time_eq(&t.hash, &hash) {
                found = Some(Caller { name: t.name.clone(), access: t.access.clone() });
            }
        }
        found
    }
}

/// Compares in time that depends only on the lengths, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// Requests that change something: everything but GET, HEAD and OPTIONS.
#[must_use]
pub fn is_mutation(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The role a request needs: reads need viewer; run, kill, pause, resume, backfill, a
/// backfill's cancel and a workflow run's resume need operator;
/// everything else that changes something (job PUT and DELETE) needs admin, as does the list
/// of tokens. On a job's routes it is the role needed on the job's team (checked by the job
/// store with the request's [`Scope`]); on the routes of [`global_only`], a global role.
#[must_use]
pub fn required_role(method: &Method, path: &str) -> Role {
    if path == "/api/auth/tokens" {
        return Role::Admin;
    }
    if !is_mutation(method) {
        return Role::Viewer;
    }
    let operator_action =
        path.strip_prefix("/api/jobs/").and_then(|rest| rest.split_once('/')).is_some_and(|(_, action)| {
            matches!(action, "run" | "kill" | "pause" | "resume" | "backfill")
                || action.strip_prefix("backfills/").is_some_and(|id| id.ends_with("/cancel"))
        });
    let resume_workflow = path.strip_prefix("/api/workflows/").is_some_and(|rest| rest.ends_with("/resume"));
    if *method == Method::POST && (operator_action || resume_workflow) {
        Role::Operator
    } else {
        Role::Admin
    }
}

/// Routes about the whole cluster rather than some team's jobs, which need the role as a
/// global role: the token list, the master's metrics (they name every job), etcd's members
/// (their addresses), changes to the shared skip calendars and resource pools, and cordons of
/// workers. Every other route is open to a role held on any team, and shows or touches only
/// what the caller's teams hold.
#[must_use]
pub fn global_only(method: &Method, path: &str) -> bool {
    let shared = ["/api/calendars/", "/api/pools/", "/api/workers/"];
    matches!(path, "/api/auth/tokens" | "/metrics" | "/api/cluster/etcd")
        || (shared.iter().any(|p| path.starts_with(p)) && is_mutation(method))
}

fn error(status: StatusCode, code: &'static str, message: String) -> ApiError {
    ApiError { status, code, message, field: None }
}

/// The middleware: identifies the caller of `/api/` requests (401 without a valid token, 403
/// without the role), applies the rate limit to changes (429), and hands the [`Caller`] to the
/// handlers (request extension) and to the audit layer around it (response extension).
pub async fn authorize(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    // `/metrics` names jobs (execution counts per job on workers, routes here): same tokens.
    if !path.starts_with("/api/") && path != "/metrics" {
        return next.run(req).await;
    }
    let peer =
        req.extensions().get::<ConnectInfo<std::net::SocketAddr>>().map(|c| auth.client(c.0.ip(), req.headers()));
    let caller = if auth.enabled() {
        match authenticate(&auth, &req, peer) {
            Ok(caller) => caller,
            Err(resp) => return *resp,
        }
    } else {
        Caller::anonymous()
    };
    // The rate limit comes before the role check: refusals cost the caller's budget too, so a
    // low role cannot flood the audit log with them.
    if let (Some(limiter), true) = (&auth.limiter, is_mutation(req.method())) {
        // Callers are told apart by token; without tokens, by address.
        let key = if auth.enabled() { caller.name.clone() } else { peer.map_or_else(String::new, |ip| ip.to_string()) };
        if let Err(wait) = limiter.check(&key, Instant::now()) {
            tracing::warn!(caller = %key, %path, "rate limit hit");
            return too_many(format!("too many changes from {key}"), wait);
        }
    }
    let needed = required_role(req.method(), &path);
    // A team role counts here (what it allows is checked per job by the job store); a route
    // about the whole cluster needs the role as a global one.
    let global = global_only(req.method(), &path);
    let held = if global { caller.access.role } else { caller.access.highest() };
    if held < Some(needed) {
        tracing::warn!(caller = %caller.name, roles = %caller.roles(), method = %req.method(), %path, "request refused: role too low");
        let (kind, roles) = if global {
            (
                "global ",
                caller.access.role.map_or("no global role".to_owned(), |r| format!("the global {} role", r.as_str())),
            )
        } else {
            ("", format!("the role(s) {}", caller.roles()))
        };
        let mut resp = error(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("{} holds {roles}; {} {} needs {kind}{}", caller.name, req.method(), path, needed.as_str()),
        )
        .into_response();
        // Read only now, and at most a spec's size, so the audit layer can say what was
        // attempted: the caller is known and its refusals count against its rate limit.
        let _ = axum::body::to_bytes(req.into_body(), crate::layers::limits::MAX_SENT_KEPT).await;
        // The audit layer records refusals too, with who was refused.
        resp.extensions_mut().insert(caller);
        return resp;
    }
    let action = format!("{} {}", req.method(), path);
    req.extensions_mut().insert(caller.clone());
    req.extensions_mut().insert(Scope { caller: caller.clone(), needed, action });
    let mut resp = next.run(req).await;
    resp.extensions_mut().insert(caller);
    resp
}

/// 429 with `Retry-After`.
fn too_many(message: String, wait: std::time::Duration) -> Response {
    let secs = wait.as_secs().max(1);
    let mut resp =
        error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("{message}; retry in {secs} s")).into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// The caller named by the request's bearer token, or the answer to give: 401, or 429 for a
/// wrong token once the client address has spent its budget of wrong tokens. A valid token
/// always passes (compared in constant time first, whatever the budget), so a flood of wrong
/// tokens from an address shared with others (a proxy, a NAT) never locks out its valid
/// callers. Every wrong token is logged with the address. The body is never read here.
fn authenticate(auth: &Auth, req: &Request, peer: Option<std::net::IpAddr>) -> Result<Caller, Box<Response>> {
    let address = peer.map_or_else(|| "?".to_owned(), |ip| ip.to_string());
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    if let Some(caller) = presented.and_then(|p| auth.identify(p)) {
        return Ok(caller);
    }
    let message = if presented.is_some() {
        // A missing token is a page loading before it asked for one; a wrong one is an attempt.
        if let Err(wait) = auth.failures.check(&address, Instant::now()) {
            // Past the budget, not logged again: a flood of guesses must not flood the log.
            tracing::debug!(peer = %address, path = %req.uri().path(), "authentication failed: a wrong bearer token past the address's budget");
            return Err(Box::new(too_many(format!("too many failed authentications from {address}"), wait)));
        }
        tracing::warn!(peer = %address, path = %req.uri().path(), "authentication failed: the bearer token is not valid");
        "the bearer token is not valid"
    } else {
        "this API needs a bearer token: send Authorization: Bearer <token>"
    };
    let mut resp = ApiError {
        status: StatusCode::UNAUTHORIZED,
        code: "unauthorized",
        message: message.to_owned(),
        field: Some("Authorization".to_owned()),
    }
    .into_response();
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"etcron\""));
    Err(Box::new(resp))
}

/// Token buckets per caller. Idle buckets are dropped once the map grows past its bound, so
/// many distinct callers cannot grow it without limit.
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// Callers tracked at once before idle ones are dropped.
const MAX_BUCKETS: usize = 10_000;

impl RateLimiter {
    #[must_use]
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self { per_second: per_second.max(0.001), burst: f64::from(burst.max(1)), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token from `key`'s bucket, or says how long until one is there.
    pub fn check(&self, key: &str, now: Instant) -> Result<(), std::time::Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            let full = self.burst;
            let rate = self.per_second;
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < full);
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((self.burst, now));
        let refilled = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Ok(())
        } else {
            *tokens = refilled;
            Err(std::time::Duration::from_secs_f64((1.0 - refilled) / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_matched_by_hash_with_their_role() {
        let viewer = "viewer-token-0123456789";
        let config = [TokenConfig {
            name: "dash".into(),
            role: Some(Role::Viewer),
            teams: BTreeMap::new(),
            sha256: hash_token(viewer),
        }];
        let auth = Auth::new(&config, Some("admin-token-0123456789")).unwrap();
        assert_eq!(auth.identify(viewer), Some(Caller { name: "dash".into(), access: Access::global(Role::Viewer) }));
        assert_eq!(auth.identify("admin-token-0123456789").unwrap().access, Access::global(Role::Admin));
        assert_eq!(auth.identify("viewer-token-0123456780"), None);
        assert_eq!(auth.identify(""), None);
        assert!(!Auth::open().enabled());
        assert!(Auth::with_token("short").is_err());
        assert!(Auth::with_token("0123456789 abcdef").is_err());
        let bad =
            [TokenConfig { name: "x".into(), role: Some(Role::Admin), teams: BTreeMap::new(), sha256: "abc".into() }];
        assert!(Auth::new(&bad, None).unwrap_err().contains("auth.tokens[0].sha256"));
        let twice = [config[0].clone(), TokenConfig { name: "dash2".into(), ..config[0].clone() }];
        assert!(Auth::new(&twice, None).is_err(), "the same token twice");
        assert_eq!(hash_token("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(new_token().len(), 64);
        assert_ne!(new_token(), new_token());
    }

    #[test]
    fn tokens_carry_team_roles_and_need_at_least_one_role() {
        let parse = |toml_text: &str| -> Result<Auth, String> {
            #[derive(Deserialize)]
            struct File {
                tokens: Vec<TokenConfig>,
            }
            let file: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
            Auth::new(&file.tokens, None)
        };
        let hash = hash_token("payments-token-0123456789");
        let auth = parse(&format!(
            "[[tokens]]\nname = \"pay\"\nteams = {{ payments = \"operator\", search = \"viewer\" }}\nsha256 = \"{hash}\"\n"
        ))
        .unwrap();
        let caller = auth.identify("payments-token-0123456789").unwrap();
        assert_eq!(caller.access.role, None);
        assert_eq!(caller.access.on(Some("payments")), Some(Role::Operator));
        assert_eq!(caller.access.on(Some("search")), Some(Role::Viewer));
        assert_eq!(caller.shown()["teams"]["payments"], "operator");
        assert_eq!(caller.shown()["role"], serde_json::Value::Null);
        let none = parse(&format!("[[tokens]]\nname = \"x\"\nsha256 = \"{hash}\"\n")).unwrap_err();
        assert!(none.contains("auth.tokens[0]") && none.contains("no role"), "{none}");
        let bad_team =
            parse(&format!("[[tokens]]\nname = \"x\"\nteams = {{ Pay = \"admin\" }}\nsha256 = \"{hash}\"\n"))
                .unwrap_err();
        assert!(bad_team.contains("auth.tokens[0].teams") && bad_team.contains("\"Pay\""), "{bad_team}");
        let bad_role =
            parse(&format!("[[tokens]]\nname = \"x\"\nteams = {{ pay = \"owner\" }}\nsha256 = \"{hash}\"\n"))
                .unwrap_err();
        assert!(bad_role.contains("owner"), "{bad_role}");
    }

    #[test]
    fn cluster_routes_need_a_global_role() {
        use Method as M;
        assert!(global_only(&M::GET, "/api/auth/tokens"));
        assert!(global_only(&M::GET, "/metrics") && global_only(&M::GET, "/api/cluster/etcd"));
        assert!(global_only(&M::PUT, "/api/calendars/h") && global_only(&M::DELETE, "/api/calendars/h"));
        assert!(!global_only(&M::GET, "/api/calendars/h") && !global_only(&M::GET, "/api/calendars"));
        assert!(global_only(&M::PUT, "/api/pools/db") && global_only(&M::DELETE, "/api/pools/db"));
        assert!(!global_only(&M::GET, "/api/pools/db") && !global_only(&M::GET, "/api/pools"));
        assert_eq!(required_role(&M::PUT, "/api/pools/db"), Role::Admin);
        assert!(!global_only(&M::PUT, "/api/jobs/a") && !global_only(&M::GET, "/api/workers"));
        assert!(global_only(&M::POST, "/api/workers/w1/cordon") && global_only(&M::POST, "/api/workers/w1/uncordon"));
        assert_eq!(required_role(&M::POST, "/api/workers/w1/drain"), Role::Admin);
    }

    #[test]
    fn roles_follow_the_route() {
        use Method as M;
        assert_eq!(required_role(&M::GET, "/api/jobs"), Role::Viewer);
        assert_eq!(required_role(&M::GET, "/api/audit"), Role::Viewer);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/run"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/kill"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/pause"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/resume"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/backfill"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/jobs/a/backfills/b1/cancel"), Role::Operator);
        assert_eq!(required_role(&M::POST, "/api/workflows/r1/resume"), Role::Operator);
        assert_eq!(required_role(&M::GET, "/api/workflows/r1"), Role::Viewer);
        assert_eq!(required_role(&M::PUT, "/api/jobs/a"), Role::Admin);
        assert_eq!(required_role(&M::DELETE, "/api/jobs/a"), Role::Admin);
        assert_eq!(required_role(&M::PUT, "/api/jobs/run"), Role::Admin, "a job named run");
        assert_eq!(required_role(&M::GET, "/api/auth/tokens"), Role::Admin);
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
    }

    #[test]
    fn the_rate_limit_allows_a_burst_then_the_rate() {
        let limiter = RateLimiter::new(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            limiter.check("a", t0).unwrap();
        }
        let wait = limiter.check("a", t0).unwrap_err();
        assert!(wait > std::time::Duration::from_millis(400) && wait <= std::time::Duration::from_millis(500));
        limiter.check("b", t0).unwrap();
        limiter.check("a", t0 + std::time::Duration::from_millis(500)).unwrap();
        assert!(limiter.check("a", t0 + std::time::Duration::from_millis(500)).is_err());
    }
}
