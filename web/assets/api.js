// The JSON API: requests with the session's bearer token (kept in sessionStorage), errors
// carrying the API's code and field, the page's error banner and etcd's warning banners, and
// who the token is.

export const TOKEN_KEY = "etcron-token";

/** Fetches JSON from the API with the session's token; throws an Error carrying the API's error. */
export async function api(path, options = {}) {
  // The master keeps "console" as the tool of each job version a write saves.
  const headers = { "Accept": "application/json", "X-Etcron-Client": "console", ...(options.headers || {}) };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const resp = await fetch(path, { ...options, headers });
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  if (!resp.ok) {
    const error = body && body.error ? body.error : {};
    const err = new Error(error.message || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    err.code = error.code;
    err.field = error.field;
    throw err;
  }
  return { body, etag: resp.headers.get("ETag") };
}
export const getJson = async (path) => (await api(path)).body;

export const jobPath = (name) => `/api/jobs/${encodeURIComponent(name)}`;

/** Shows (or clears) the banner at the top of the page; `level` is "error" or "warn". */
export function banner(message, level = "error") {
  const el = document.getElementById("banner");
  el.textContent = message || "";
  el.className = level;
  el.hidden = !message;
}

/** Shows etcd's storage warning (its database near its quota, or an alarm) above every page,
 * from `/api/cluster/storage`; checked at load and every 30 s. */
export async function checkStorage() {
  const el = document.getElementById("etcd-storage-banner");
  try {
    const storage = await getJson("/api/cluster/storage");
    el.textContent = storage && storage.warning ? storage.warning : "";
    el.hidden = !(storage && storage.warning);
  } catch { /* no reading yet, or no token: the page's own banner says what is wrong */ }
}

/** Names the stored job specs this master's version refuses (they do not run: an upgrade with
 * stricter rules, a value written around the API), from `/api/cluster/specs` (only the jobs
 * the token sees); checked at load and every 60 s. */
export async function checkSpecs() {
  const el = document.getElementById("specs-banner");
  try {
    const specs = await getJson("/api/cluster/specs");
    const refused = (specs && specs.refused) || [];
    const named = refused.slice(0, 5).map((r) => `${r.job} (${r.field ? r.field + ": " : ""}${r.error})`).join("; ");
    const more = refused.length > 5 ? `; and ${refused.length - 5} more` : "";
    el.textContent = refused.length
      ? `${refused.length} stored job${refused.length === 1 ? " is refused by this version and does" : "s are refused by this version and do"} not run: ${named}${more}. Fix each field (etcronctl jobs check lists them).`
      : "";
    el.hidden = refused.length === 0;
  } catch { /* not checked yet, or no token: the page's own banner says what is wrong */ }
}

/** Shows which etcd members the master deems unhealthy (no leader, or no answer while the
 * others answer), from `/api/cluster/etcd` (a global role; others see no banner); checked at
 * load and every 5 s. Requests go to the other members meanwhile, so this is a warning, not an
 * outage. */
export async function checkMembers() {
  const el = document.getElementById("etcd-members-banner");
  try {
    const cluster = await getJson("/api/cluster/etcd");
    const sick = (cluster.members || []).filter((m) => !m.healthy);
    el.textContent = sick.map((m) =>
      `etcd member ${m.endpoint} is unhealthy for ${Math.round(m.for_ms / 1000)} s (${m.reason}): ` +
      "requests go to the other members.").join(" ");
    el.hidden = sick.length === 0;
  } catch { /* no global role, or the master did not answer: the page's own banner says so */ }
}

/** What the banner says about a failed request. */
export function explain(e) {
  if (e.code === "etcd_nospace") return "etcd's database is full (NOSPACE alarm): it refuses every write, so jobs cannot be changed and nothing runs until an operator compacts, defragments and disarms it (docs/operations.md).";
  if (e.code === "etcd_unavailable") return "The master cannot reach etcd: jobs cannot be read or changed right now. It retries on every request.";
  if (e.code === "mongodb_unavailable") return "The master cannot reach MongoDB: execution records cannot be searched right now. Jobs still run and their records are kept until MongoDB is back.";
  if (e instanceof TypeError) return "The master did not answer: is etcron-master running?";
  return `Error: ${e.message}`;
}

/** Who the token is (`GET /api/auth/whoami`: name, global role, role per team), asked once
 * per token. */
let meCache = { token: undefined, me: null };
export async function whoami() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (meCache.token !== token || !meCache.me) meCache = { token, me: getJson("/api/auth/whoami") };
  try {
    return await meCache.me;
  } catch (e) {
    meCache = { token: undefined, me: null };
    throw e;
  }
}

/** A caller's roles in words: "admin", "viewer, payments: operator", "search: admin". */
export const rolesText = (me) => [me.role, ...Object.entries(me.teams || {}).map(([t, r]) => `${t}: ${r}`)].filter(Boolean).join(", ");
