// etcron console: a dependency-free single-page app over the JSON API. Views are chosen by the
// URL hash (#/jobs, #/job/NAME, #/edit/NAME, #/new, #/executions?…, #/execution/ID, #/workers,
// #/calendars, #/overview), so deep links work without server-side routing. Charts are hand-drawn SVG.
"use strict";

const app = () => document.getElementById("app");
const TOKEN_KEY = "etcron-token";
const STATUSES = ["succeeded", "failed", "timed_out", "lost", "killed", "skipped", "missed", "running"];

/** Fetches JSON from the API with the session's token; throws an Error carrying the API's error. */
async function api(path, options = {}) {
  const headers = { "Accept": "application/json", ...(options.headers || {}) };
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
const getJson = async (path) => (await api(path)).body;

/** Shows (or clears) the banner at the top of the page; `level` is "error" or "warn". */
function banner(message, level = "error") {
  const el = document.getElementById("banner");
  el.textContent = message || "";
  el.className = level;
  el.hidden = !message;
}

/** Shows etcd's storage warning (its database near its quota, or an alarm) above every page,
 * from `/api/cluster/storage`; checked at load and every 30 s. */
async function checkStorage() {
  const el = document.getElementById("etcd-storage-banner");
  try {
    const storage = await getJson("/api/cluster/storage");
    el.textContent = storage && storage.warning ? storage.warning : "";
    el.hidden = !(storage && storage.warning);
  } catch { /* no reading yet, or no token: the page's own banner says what is wrong */ }
}

/** Shows which etcd members the master deems unhealthy (no leader, or no answer while the
 * others answer), from `/api/cluster/etcd` (a global role; others see no banner); checked at
 * load and every 5 s. Requests go to the other members meanwhile, so this is a warning, not an
 * outage. */
async function checkMembers() {
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
function explain(e) {
  if (e.code === "etcd_nospace") return "etcd's database is full (NOSPACE alarm): it refuses every write, so jobs cannot be changed and nothing runs until an operator compacts, defragments and disarms it (docs/operations.md).";
  if (e.code === "etcd_unavailable") return "The master cannot reach etcd: jobs cannot be read or changed right now. It retries on every request.";
  if (e.code === "mongodb_unavailable") return "The master cannot reach MongoDB: execution records cannot be searched right now. Jobs still run and their records are kept until MongoDB is back.";
  if (e instanceof TypeError) return "The master did not answer: is etcron-master running?";
  return `Error: ${e.message}`;
}

/** Builds an element: h("td", {class: "x", "data-label": "Job"}, child, "text"). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** The same for SVG elements. */
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** "2026-11-23T02:30:00.000+01:00" → "2026-11-23 02:30:00 +01:00" (the job's own zone). */
function jobTime(rfc3339) {
  return rfc3339.replace("T", " ").replace(/\.\d+/, "").replace(/([+-]\d\d:\d\d|Z)$/, " $1");
}

function localTime(rfc3339) {
  const d = new Date(rfc3339);
  return isNaN(d) ? rfc3339 : d.toLocaleString();
}

const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
const statusBadge = (status) => h("span", { class: `status-${status}` }, status);
const jobPath = (name) => `/api/jobs/${encodeURIComponent(name)}`;
const labelText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");

/** Whether a job's schedule is held: an operator paused it (`paused`, kept outside the spec) or
 * its spec says `enabled: false`. A job fires only when neither holds (the API's rule). */
const isPaused = (j) => Boolean(j.paused) || (j.spec || {}).enabled === false;

/** Who paused the job, when and why; or that its spec disables it. */
function pauseText(j) {
  const p = j.paused;
  if (!p) return (j.spec || {}).enabled === false ? "disabled in its spec (enabled: false)" : "";
  return `paused${p.by ? ` by ${p.by}` : ""}${p.at ? ` at ${localTime(p.at)}` : ""}${p.until ? ` until ${localTime(p.until)}` : ""}${p.reason ? `: ${p.reason}` : ""}`;
}

/** The state badge: "paused" for either kind of hold, the detail in its title. */
const stateBadge = (j) => isPaused(j)
  ? h("span", { class: "badge paused", title: pauseText(j) }, "paused")
  : h("span", { class: "badge enabled" }, "enabled");

function duration(ms) {
  if (ms == null) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.round((ms % 60000) / 1000)}s`;
}

/** Re-renders the current view after `ms` unless the operator navigated or is typing. */
let refreshTimer = null;
function autoRefresh(ms) {
  clearTimeout(refreshTimer);
  const hash = location.hash;
  refreshTimer = setTimeout(() => {
    if (location.hash !== hash) return;
    const active = document.activeElement;
    if (active && ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName) && app().contains(active)) {
      autoRefresh(ms);
      return;
    }
    route({ quiet: true });
  }, ms);
}

// ---------------------------------------------------------------------------------------------
// Jobs

/** Who the token is (`GET /api/auth/whoami`: name, global role, role per team), asked once
 * per token. */
let meCache = { token: undefined, me: null };
async function whoami() {
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
const rolesText = (me) => [me.role, ...Object.entries(me.teams || {}).map(([t, r]) => `${t}: ${r}`)].filter(Boolean).join(", ");

/** The jobs list: name, team, state, schedule in words, next run, last result, recent outcomes.
 * The master lists only the jobs of the token's teams (every job for a global role). */
async function jobsView(params) {
  const filter = (params.get("q") || "").toLowerCase();
  const state = params.get("state") || "";
  const team = params.get("team") || "";
  const [data, me] = await Promise.all([getJson(team ? `/api/jobs?team=${encodeURIComponent(team)}` : "/api/jobs"), whoami()]);
  const jobs = data.jobs.filter((j) => {
    const spec = j.spec || {};
    const last = j.summary && j.summary.last_execution;
    if (state === "enabled" && isPaused(j)) return false;
    if (state === "paused" && !isPaused(j)) return false;
    if (state === "failing" && !(last && ["failed", "timed_out", "lost"].includes(last.status))) return false;
    if (!filter) return true;
    const labels = Object.entries(spec.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    return `${j.name} ${labels}`.toLowerCase().includes(filter);
  });
  const search = h("input", { type: "search", placeholder: "Filter by name or label (press /)", "aria-label": "Filter jobs", value: filter, "data-shortcut": "/" });
  const select = h("select", { "aria-label": "Job state" },
    [["", "Any state"], ["enabled", "Enabled"], ["paused", "Paused"], ["failing", "Last run failed"]]
      .map(([v, t]) => h("option", { value: v, selected: v === state }, t)));
  // The teams to choose from: the token's, and those of the jobs it sees (a global role).
  const teams = [...new Set([...Object.keys(me.teams || {}), ...data.jobs.map((j) => (j.spec || {}).team).filter(Boolean), team].filter(Boolean))].sort();
  const teamSelect = h("select", { "aria-label": "Team", name: "team" },
    [["", "Any team"], ...teams.map((t) => [t, t])].map(([v, t]) => h("option", { value: v, selected: v === team }, t)));
  const apply = () => {
    const q = new URLSearchParams();
    if (search.value) q.set("q", search.value);
    if (select.value) q.set("state", select.value);
    if (teamSelect.value) q.set("team", teamSelect.value);
    location.hash = `#/jobs?${q}`;
  };
  search.addEventListener("change", apply);
  select.addEventListener("change", apply);
  teamSelect.addEventListener("change", apply);
  const root = app();
  root.replaceChildren(
    h("div", { class: "heading" }, h("h1", {}, "Jobs"), h("a", { class: "button primary", href: "#/new" }, "New job")),
    h("div", { class: "toolbar" }, search, select, teamSelect));
  if (data.records && data.records.available === false) {
    banner("Execution records are unavailable (the master cannot reach MongoDB): last results are not shown.", "warn");
  }
  if (jobs.length === 0) {
    root.append(h("div", { class: "empty" }, data.jobs.length
      ? "No job matches the filter."
      : ["No jobs yet. ", h("a", { href: "#/new" }, "Create one"), " here, with etcronctl, or with PUT /api/jobs/{name}."]));
    return;
  }
  const rows = jobs.map((j) => {
    const spec = j.spec || {};
    const summary = j.summary || {};
    const last = summary.last_execution;
    const next = (j.next_runs || [])[0];
    return h("tr", { "data-job": j.name },
      h("td", { "data-label": "Job" }, h("a", { href: `#/job/${encodeURIComponent(j.name)}` }, h("strong", {}, j.name)),
        spec.description ? h("div", { class: "muted" }, spec.description) : "",
        j.invalid ? h("div", { class: "warn" }, `invalid spec: ${j.invalid}`) : ""),
      h("td", { "data-label": "Team" }, spec.team ? h("a", { href: `#/jobs?team=${encodeURIComponent(spec.team)}` }, spec.team) : h("span", { class: "muted" }, "—")),
      h("td", { "data-label": "State" }, stateBadge(j), isPaused(j) ? h("div", { class: "muted" }, pauseText(j)) : ""),
      h("td", { "data-label": "Schedule" }, h("code", {}, expressionsOf(spec).join("; ")), h("div", { class: "muted" }, j.schedule_description || "")),
      h("td", { "data-label": "Next run" }, next
        ? [h("div", { title: spec.timezone || "UTC" }, `${jobTime(next)} (${spec.timezone || "UTC"})`), h("div", { class: "muted" }, `${localTime(next)} local`)]
        : h("span", { class: "muted" }, "—")),
      h("td", { "data-label": "Last result" }, last
        ? [h("a", { href: `#/execution/${encodeURIComponent(last.id)}` }, statusBadge(last.status)),
          h("div", { class: "muted" }, summary.total_24h ? `24 h: ${summary.succeeded_24h} ok, ${summary.failed_24h} failed of ${summary.total_24h}` : "")]
        : h("span", { class: "muted" }, data.records && data.records.available === false ? "unavailable" : "none yet")),
      h("td", { "data-label": "Workers" }, j.eligible_workers === 0 ? h("span", { class: "warn" }, "no live worker matches") : String(j.eligible_workers ?? "")),
      h("td", { "data-label": "Actions", class: "actions" }, jobActions(j)));
  });
  root.append(h("table", {},
    h("thead", {}, h("tr", {}, ["Job", "Team", "State", "Schedule", "Next run", "Last result", "Workers", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}

/** A button that runs `action`, then re-renders the current view; errors go to the banner. */
function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      if (await action() === false) return;
      await route();
    } catch (e) {
      banner(`${label} failed: ${e.message}`);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

/** The parameters a job's shell task declares (`task.params`), as the run dialog lists them. */
function declaredParams(j) {
  const params = ((j.spec || {}).task || {}).params || {};
  const names = Object.keys(params);
  if (!names.length) return "This job declares no parameters (task.params): a run can set none.";
  const one = (n) => n + (params[n].default !== undefined ? ` (default ${params[n].default})` : "")
    + (params[n].pattern ? ` matching ${params[n].pattern}` : "");
  return `Parameters it declares: ${names.map(one).join(", ")}.`;
}

/** The "run with parameters" dialog: declared parameters and a time to run as of. On success
 * it opens the execution's page. */
function runDialog(j) {
  const env = h("textarea", { id: "run-env", rows: 3, class: "mono", placeholder: "REPORT_DAY=2026-11-01" });
  const asOf = h("input", { id: "run-as-of", type: "text", autocomplete: "off", placeholder: "2026-11-01T00:00:00Z" });
  const error = h("p", { class: "field-error", id: "run-error", role: "alert", hidden: true });
  const dialog = h("dialog", { id: "run-dialog", "aria-label": `Run ${j.name} with parameters` });
  const submit = h("button", { type: "submit" }, "Run");
  const cancel = h("button", { type: "button" }, "Cancel");
  cancel.addEventListener("click", () => dialog.close());
  const form = h("form", { method: "dialog" },
    h("h2", {}, `Run ${j.name}`),
    h("div", { class: "field" }, h("label", { for: "run-env" }, "Parameters"), env,
      h("div", { class: "hint", id: "run-params-hint" }, `One NAME=value per line (shell tasks). ${declaredParams(j)}`)),
    h("div", { class: "field" }, h("label", { for: "run-as-of" }, "Run as of"), asOf,
      h("div", { class: "hint" }, "RFC 3339; ETCRON_SCHEDULED_AT is this time. Empty: now.")),
    error,
    h("div", { class: "toolbar" }, submit, cancel));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const body = {};
    try {
      const vars = parseMap(env.value, "=");
      if (Object.keys(vars).length) body.env = vars;
    } catch (e) {
      error.textContent = `Parameters: ${e.message}`;
      error.hidden = false;
      return;
    }
    if (asOf.value.trim()) body.scheduled_at = asOf.value.trim();
    submit.disabled = true;
    try {
      const { body: answer } = await api(`${jobPath(j.name)}/run`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      dialog.close();
      location.hash = `#/execution/${encodeURIComponent(answer.execution_id)}`;
    } catch (e) {
      error.textContent = `${e.field ? `${e.field}: ` : ""}${e.message}`;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  dialog.append(form);
  return dialog;
}

/** A Date as the value of a datetime-local input: the browser's local time, to the second. */
function localInputValue(date) {
  const p = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())}T${p(date.getHours())}:${p(date.getMinutes())}:${p(date.getSeconds())}`;
}

/** A datetime-local value (local time, no offset) as RFC 3339 in UTC; a value that does not
 * parse goes as typed, for the API to name the field. */
function rfc3339FromLocal(value) {
  const date = new Date(value);
  return value && !isNaN(date) ? date.toISOString() : value;
}

/** Most ticks a backfill preview lists (it says how many more there are), and excluded ones. */
const PREVIEW_TICKS = 50;
const PREVIEW_EXCLUDED = 10;

/** The backfill dialog: a range of past ticks (local time), which of them, how they overlap,
 * a cap and a reason. "Preview" (and Enter) asks the API for a dry run and lists the ticks;
 * "Start backfill" creates it, closes the dialog and opens it in the job page's Backfills
 * section. API errors appear at the field they name. */
function backfillDialog(j) {
  const now = new Date();
  now.setMilliseconds(0);
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const f = {
    from: h("input", { type: "datetime-local", step: "1", value: localInputValue(new Date(now.getTime() - 86_400_000)) }),
    to: h("input", { type: "datetime-local", step: "1", value: localInputValue(now) }),
    which: select("which"),
    overlap: select("overlap"),
    max_parallel: input({ inputmode: "numeric", placeholder: "5" }),
    max_runs: input({ inputmode: "numeric", placeholder: "100" }),
    reason: input({ placeholder: "rerun after the outage" }),
  };
  const maxParallel = formField("max_parallel", "Max parallel", f.max_parallel, "Runs at once, 1 to 50.");
  const sync = () => { maxParallel.hidden = f.overlap.value !== "parallel"; };
  f.overlap.addEventListener("change", sync);
  sync();
  const preview = h("div", { class: "preview", id: "backfill-preview", "aria-live": "polite" });
  const error = h("p", { class: "field-error", id: "backfill-error", role: "alert", hidden: true });
  const dialog = h("dialog", { id: "backfill-dialog", "aria-label": `Backfill ${j.name}` });
  const previewButton = h("button", { type: "submit" }, "Preview");
  const start = h("button", { type: "button", class: "primary" }, "Start backfill");
  const close = h("button", { type: "button" }, "Close");
  close.addEventListener("click", () => dialog.close());
  const form = h("form", { method: "dialog", novalidate: true },
    h("h2", {}, `Backfill ${j.name}`),
    h("p", { class: "muted small" }, "Runs past ticks of the schedule again, each as one more attempt of its tick (also while the job is paused)."),
    formField("from", "From", f.from, `Your browser's time (${zone}); the range includes both ends.`),
    formField("to", "To", f.to, "Not in the future: later ticks belong to the schedule."),
    formField("which", "Which ticks", f.which),
    formField("overlap", "Overlap", f.overlap),
    maxParallel,
    formField("max_runs", "Max runs", f.max_runs, "A range selecting more ticks is refused; 1 to 500."),
    formField("reason", "Reason", f.reason),
    error,
    h("div", { class: "toolbar" }, previewButton, start, close),
    preview);
  // A preview describes the fields as they were: changing one withdraws it.
  form.addEventListener("input", () => preview.replaceChildren());
  form.addEventListener("change", () => preview.replaceChildren());

  const request = (dryRun) => {
    const body = { from: rfc3339FromLocal(f.from.value), to: rfc3339FromLocal(f.to.value), which: f.which.value, overlap: f.overlap.value };
    if (f.overlap.value === "parallel" && f.max_parallel.value.trim()) body.max_parallel = numberOr(f.max_parallel.value);
    if (f.max_runs.value.trim()) body.max_runs = numberOr(f.max_runs.value);
    if (f.reason.value.trim()) body.reason = f.reason.value.trim();
    if (dryRun) body.dry_run = true;
    return body;
  };
  const showPreview = (p) => {
    const more = p.count - Math.min(p.count, PREVIEW_TICKS);
    const excludedMore = p.excluded_count - Math.min(p.excluded.length, PREVIEW_EXCLUDED);
    preview.replaceChildren(
      h("p", { class: "reading", id: "backfill-count", "data-count": String(p.count) }, p.count === 0
        ? "No tick of the range qualifies."
        : `${p.count} tick${p.count === 1 ? "" : "s"} would run, ${p.overlap === "parallel" ? `up to ${p.max_parallel} at once` : "one at a time"}:`),
      p.ticks.length ? h("ol", { class: "next backfill-ticks", "aria-label": "Ticks the backfill would run" },
        p.ticks.slice(0, PREVIEW_TICKS).map((t) => h("li", { title: t.execution_id, "data-at": t.at }, `${localTime(t.at)}`))) : "",
      more > 0 ? h("p", { class: "muted small" }, `… and ${more} more.`) : "",
      p.excluded_count ? [
        h("p", { class: "reading", id: "backfill-excluded", "data-count": String(p.excluded_count) }, `${p.excluded_count} tick${p.excluded_count === 1 ? "" : "s"} of the range left out:`),
        h("ul", { class: "plain small" }, p.excluded.slice(0, PREVIEW_EXCLUDED).map((x) => h("li", {}, `${localTime(x.at)} — ${x.why}`))),
        excludedMore > 0 ? h("p", { class: "muted small" }, `… and ${excludedMore} more.`) : "",
      ] : "");
  };
  const send = async (dryRun) => {
    clearFieldErrors(form);
    error.hidden = true;
    preview.replaceChildren();
    previewButton.disabled = true;
    start.disabled = true;
    try {
      const { body: answer } = await api(`${jobPath(j.name)}/backfill`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request(dryRun)),
      });
      if (dryRun) { showPreview(answer); return; }
      dialog.close();
      location.hash = `#/job/${encodeURIComponent(j.name)}?backfill=${encodeURIComponent(answer.id)}`;
    } catch (e) {
      const at = e.status === 400 ? showFieldError(form, e.field, e.message) : null;
      if (at) { at.focus(); return; }
      error.textContent = e.status === 400 || e.status === 409 ? `${e.field ? `${e.field}: ` : ""}${e.message}` : explain(e);
      error.hidden = false;
    } finally {
      previewButton.disabled = false;
      start.disabled = false;
    }
  };
  // Enter previews: starting a backfill (many runs) takes the button.
  form.addEventListener("submit", (event) => { event.preventDefault(); send(true); });
  start.addEventListener("click", () => send(false));
  dialog.append(form);
  return dialog;
}

/** A button opening the dialog `make()` builds; the dialog goes when it closes. */
const dialogButton = (label, make, attrs) => button(label, () => {
  const dialog = make();
  document.body.append(dialog);
  dialog.addEventListener("close", () => dialog.remove());
  dialog.showModal();
  return false;
}, attrs);

function jobActions(j, { detail = false } = {}) {
  const path = jobPath(j.name);
  const withParams = detail ? [
    dialogButton("Run with…", () => runDialog(j), { "aria-label": `Run ${j.name} with parameters` }),
    dialogButton("Backfill…", () => backfillDialog(j), { "aria-label": `Backfill past ticks of ${j.name}` }),
  ] : [];
  return [
    button("Run now", () => api(`${path}/run`, { method: "POST" }), { "aria-label": `Run ${j.name} now` }),
    ...withParams,
    isPaused(j)
      ? button("Resume", () => api(`${path}/resume`, { method: "POST" }), { "aria-label": `Resume ${j.name}` })
      : button("Pause", async () => {
        const reason = prompt(`Pause ${j.name}: its ticks are recorded skipped until it is resumed. Reason (optional):`, "");
        if (reason === null) return false;
        const body = reason.trim() ? { reason: reason.trim() } : {};
        await api(`${path}/pause`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        return true;
      }, { "aria-label": `Pause ${j.name}` }),
    button("Kill", async () => {
      if (!confirm(`Kill every running execution of ${j.name}?`)) return false;
      await api(`${path}/kill`, { method: "POST" });
      return true;
    }, { "aria-label": `Kill running executions of ${j.name}`, class: "danger" }),
    h("a", { class: "button", href: `#/edit/${encodeURIComponent(j.name)}`, "aria-label": `Edit ${j.name}` }, "Edit"),
    h("a", { class: "button", href: `#/history/${encodeURIComponent(j.name)}`, "aria-label": `History of ${j.name}` }, "History"),
    button("Delete", async () => {
      if (!confirm(`Delete job ${j.name}? Its pending retries and runs are withdrawn.`)) return false;
      await api(path, { method: "DELETE" });
      if (detail) location.hash = "#/jobs";
      return true;
    }, { "aria-label": `Delete ${j.name}`, class: "danger" }),
  ];
}

/** A backfill's progress: a bar of its finished items (succeeded, failed, not run) of all,
 * then running and cancelled ones (never requested, or not started, before the cancel), and
 * the counts in words. */
function backfillProgress(c) {
  const finished = c.succeeded + c.failed + c.not_run;
  const total = Math.max(1, c.total);
  let at = 0;
  const part = (n, status) => {
    if (!n) return null;
    const rect = svg("rect", { x: (at / total) * 100, y: 0, width: (n / total) * 100, height: 6, class: `bar s-${status}` });
    at += n;
    return rect;
  };
  const parts = [part(c.succeeded, "succeeded"), part(c.failed, "failed"), part(c.not_run, "skipped"), part(c.running, "running"), part(c.cancelled, "cancelled")].filter(Boolean);
  const words = [`${c.succeeded} succeeded`, `${c.failed} failed`, `${c.not_run} not run`];
  if (c.running) words.push(`${c.running} running`);
  if (c.pending) words.push(`${c.pending} pending`);
  if (c.cancelled) words.push(`${c.cancelled} cancelled`);
  const text = `${finished} of ${c.total} finished: ${words.join(", ")}`;
  return h("div", { class: "backfill-progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": String(c.total), "aria-valuenow": String(finished), "aria-valuetext": text },
    svg("svg", { viewBox: "0 0 100 6", preserveAspectRatio: "none", class: "progress", "aria-hidden": "true" },
      svg("rect", { x: 0, y: 0, width: 100, height: 6, class: "track" }), parts),
    h("div", { class: "small muted" }, text));
}

/** The job page's Backfills section: the job's backfills (newest first) with their progress, a
 * Cancel for running ones, and the items of the one opened (`?backfill=ID` in the URL, so it
 * stays open while the page refreshes). */
function backfillsSection(name, list, opened, openId) {
  const section = h("section", { id: "backfills", "aria-labelledby": "backfills-heading" }, h("h2", { id: "backfills-heading" }, "Backfills"));
  if (list.error) {
    section.append(h("p", { class: "warn" }, explain(list.error)));
    return section;
  }
  const here = `#/job/${encodeURIComponent(name)}`;
  if (list.backfills.length === 0) {
    section.append(h("p", { class: "muted", id: "no-backfills" }, "No backfill yet. “Backfill…” runs a range of past ticks again."));
  } else {
    section.append(h("table", { id: "backfills-table" },
      h("thead", {}, h("tr", {}, ["Backfill", "State", "Range", "Which", "Progress", "Created by", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, list.backfills.map((b) => h("tr", { "data-backfill": b.id, class: b.id === openId ? "selected" : null },
        h("td", { "data-label": "Backfill" }, h("a", { href: `${here}?backfill=${encodeURIComponent(b.id)}`, "aria-current": b.id === openId ? "true" : null, "aria-label": `Backfill ${b.id}: its ticks` }, b.id)),
        h("td", { "data-label": "State" }, h("span", { class: `badge backfill-${b.state}` }, b.state)),
        h("td", { "data-label": "Range" }, `${localTime(b.from)} → ${localTime(b.to)}`),
        h("td", { "data-label": "Which" }, b.which, h("div", { class: "muted small" }, b.overlap === "parallel" ? `parallel, ${b.max_parallel} at once` : "serial")),
        h("td", { "data-label": "Progress" }, backfillProgress(b.counts)),
        h("td", { "data-label": "Created by" }, b.created_by, h("div", { class: "muted small" }, localTime(b.created_at)),
          b.reason ? h("div", { class: "muted small" }, b.reason) : "",
          b.cancelled_by ? h("div", { class: "warn small" }, `cancelled by ${b.cancelled_by}${b.cancelled_at ? ` at ${localTime(b.cancelled_at)}` : ""}`) : ""),
        h("td", { "data-label": "Actions", class: "actions" }, b.state === "running" ? button("Cancel", async () => {
          if (!confirm(`Cancel backfill ${b.id} of ${name}? No further tick is requested; a run already started finishes (kill it to stop it).`)) return false;
          await api(`${jobPath(name)}/backfills/${encodeURIComponent(b.id)}/cancel`, { method: "POST" });
          return true;
        }, { "aria-label": `Cancel backfill ${b.id}`, class: "danger" }) : ""))))));
  }
  if (!openId) return section;
  const panel = h("div", { id: "backfill-items", "aria-live": "polite" });
  if (opened.error) {
    panel.append(h("p", { class: "warn" }, opened.error.status === 404 ? `No backfill ${openId} (finished ones are removed beyond the newest 20).` : explain(opened.error)));
  } else {
    panel.append(
      h("div", { class: "heading start" }, h("h3", {}, `Backfill ${opened.id}`), h("a", { href: here }, "Hide")),
      h("table", {},
        h("thead", {}, h("tr", {}, ["Tick", "Execution", "Status"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, opened.items.map((item) => h("tr", { "data-execution": item.execution_id },
          h("td", { "data-label": "Tick" }, localTime(item.at)),
          h("td", { "data-label": "Execution" }, ["pending", "cancelled"].includes(item.status)
            ? h("span", { class: "muted" }, item.execution_id)
            : h("a", { href: `#/execution/${encodeURIComponent(item.execution_id)}` }, item.execution_id)),
          h("td", { "data-label": "Status" }, statusBadge(item.status)))))));
  }
  section.append(panel);
  return section;
}

/** The job page's Notifications section: the job's newest webhook deliveries (`list`, from
 * `GET /api/notifications?job=…`), each with its event, state (`silenced`: not sent, the
 * target's silence window was open), target, attempts and the execution it is about. A
 * `stale` delivery is about no execution (its id is `{job}@stale-{ms}`): not linked. */
function notificationsSection(list) {
  const section = h("section", { id: "notifications", "aria-labelledby": "notifications-heading" }, h("h2", { id: "notifications-heading" }, "Notifications"));
  if (list.error) {
    section.append(h("p", { class: "warn" }, explain(list.error)));
    return section;
  }
  if (list.notifications.length === 0) {
    section.append(h("p", { class: "muted", id: "no-notifications" }, "No notifications."));
    return section;
  }
  const realExecution = (id) => Boolean(id) && !id.includes("@stale-");
  section.append(h("table", { id: "notifications-table" },
    h("thead", {}, h("tr", {}, ["Time", "Event", "State", "Target", "Attempts", "Execution"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, list.notifications.map((n) => {
      const attempts = n.attempts || [];
      const last = attempts[attempts.length - 1];
      return h("tr", { "data-delivery": n.id, "data-event": n.event, "data-state": n.state },
        h("td", { "data-label": "Time", title: n.created_at }, localTime(n.created_at)),
        h("td", { "data-label": "Event" }, h("code", {}, n.event)),
        h("td", { "data-label": "State" }, h("span", {
          class: `badge notify-${n.state}`,
          title: n.state === "silenced" ? "Not sent: the target's silence window for this event of the job was open" : null,
        }, n.state)),
        h("td", { "data-label": "Target", title: n.target }, n.target_name || n.target,
          n.default_target ? h("div", { class: "muted small" }, "the worker's default target") : ""),
        h("td", { "data-label": "Attempts" }, String(attempts.length),
          last && last.error ? h("div", { class: "muted small" }, last.error) : ""),
        h("td", { "data-label": "Execution" }, realExecution(n.execution_id)
          ? h("a", { href: `#/execution/${encodeURIComponent(n.execution_id)}` }, n.execution_id)
          : h("span", { class: "muted" }, n.execution_id)));
    }))));
  return section;
}

/** One job: actions, schedule, running executions, backfills, a chart of recent runs, its
 * notifications, its spec. Refreshes every 5 s, every 2 s while a backfill runs. */
async function jobView(params, rest) {
  const name = decodeURIComponent(rest);
  const openId = params.get("backfill") || "";
  const [{ body: j }, workers, recent, backfills, opened, notifications] = await Promise.all([
    api(jobPath(name)),
    getJson("/api/workers"),
    getJson(`/api/executions?job=${encodeURIComponent(name)}&limit=100`).catch((e) => ({ error: e })),
    getJson(`${jobPath(name)}/backfills`).catch((e) => ({ error: e })),
    openId ? getJson(`${jobPath(name)}/backfills/${encodeURIComponent(openId)}`).catch((e) => ({ error: e })) : null,
    getJson(`/api/notifications?job=${encodeURIComponent(name)}&limit=20`).catch((e) => ({ error: e })),
  ]);
  const spec = j.spec || {};
  const running = workers.workers.flatMap((w) => w.running_executions || []).filter((r) => r.job === name);
  const alerts = alertsText(spec.alerts);
  const root = app();
  root.replaceChildren(
    h("div", { class: "heading start" }, h("h1", {}, j.name), stateBadge(j)),
    spec.description ? h("p", { class: "muted" }, spec.description) : "",
    isPaused(j) ? h("p", { class: "warn", id: "pause" }, `This job is ${pauseText(j)}.`,
      j.paused && j.paused.execution_id
        ? [" ", h("a", { href: `#/execution/${encodeURIComponent(j.paused.execution_id)}` }, "The failure that paused it")] : "") : "",
    h("div", { class: "toolbar actions" }, jobActions(j, { detail: true })),
    h("dl", { class: "fields" },
      h("dt", {}, "Team"), h("dd", { id: "team" }, spec.team || h("span", { class: "muted" }, "none (global roles only)")),
      h("dt", {}, "Schedule"), h("dd", {}, h("code", {}, expressionsOf(spec).join("; ")), ` — ${j.schedule_description} (${spec.timezone || "UTC"})`),
      h("dt", {}, "Next runs"), h("dd", {}, (j.next_runs || []).length
        ? h("ul", { class: "plain" }, j.next_runs.map((t) => h("li", {}, `${jobTime(t)} · ${localTime(t)} local`)))
        : h("span", { class: "muted" }, isPaused(j) ? "paused" : "none")),
      h("dt", {}, "Task"), h("dd", { id: "task" }, taskText(spec.task)),
      h("dt", {}, "Workers"), h("dd", {}, j.eligible_workers === 0
        ? h("span", { class: "warn" }, `no live worker ${needs(spec.selector, spec.task && spec.task.user)}`)
        : `${j.eligible_workers} eligible${Object.keys(spec.selector || {}).length ? ` (selector ${labelText(spec.selector)})` : ""}`),
      alerts ? [h("dt", {}, "Alerts"), h("dd", { id: "alerts" }, alerts)] : "",
      h("dt", {}, "Revision"), h("dd", {}, String(j.revision))),
    h("h2", {}, "Running"),
    running.length === 0
      ? h("p", { class: "muted", id: "running" }, "Nothing running.")
      : h("ul", { id: "running" }, running.map((r) => h("li", {},
        h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id), ` on ${r.worker_id} since ${localTime(r.started_at)} `,
        button("Kill", async () => {
          if (!confirm(`Kill ${r.id}?`)) return false;
          await api(`${jobPath(name)}/kill?execution=${encodeURIComponent(r.id)}`, { method: "POST" });
          return true;
        }, { "aria-label": `Kill ${r.id}`, class: "danger" })))),
    spec.concurrency === "queue" || (j.queue || []).length ? queueSection(j) : "",
    backfillsSection(name, backfills, opened, openId));
  root.append(h("h2", {}, "Recent executions"));
  if (recent.error) {
    root.append(h("p", { class: "warn" }, explain(recent.error)));
  } else if (recent.executions.length === 0) {
    root.append(h("div", { class: "empty" }, "No execution yet."));
  } else {
    root.append(durationChart(recent.executions), executionsTable(recent.executions.slice(0, 20)),
      h("p", {}, h("a", { href: `#/executions?job=${encodeURIComponent(name)}` }, "All executions of this job →")));
  }
  root.append(notificationsSection(notifications));
  root.append(h("h2", {}, "Spec"), h("pre", { class: "output", "aria-label": "Spec" }, JSON.stringify(spec, null, 2)));
  const backfilling = !backfills.error && backfills.backfills.some((b) => b.state === "running");
  autoRefresh(backfilling ? 2000 : 5000);
}

/** The executions waiting in a `concurrency: queue` job's queue, oldest first (the next to run
 * first), each with when it was due and what it waits behind. */
function queueSection(j) {
  const queue = j.queue || [];
  const limit = (j.spec && j.spec.max_queue) || 5;
  return h("section", { "aria-label": "Queue" },
    h("h2", {}, `Queue (${queue.length} of ${limit})`),
    queue.length === 0
      ? h("p", { class: "muted", id: "queue" }, "Nothing waiting.")
      : h("ol", { id: "queue" }, queue.map((q) => h("li", {},
        h("code", {}, q.execution_id), ` due ${jobTime(q.scheduled_at)} (${q.trigger}), waiting since ${localTime(q.queued_at)}`,
        q.behind ? [" behind ", h("a", { href: `#/execution/${encodeURIComponent(q.behind)}` }, q.behind)] : ""))));
}

/** A job's saved versions, newest first: who saved each, when and how; what changed from one
 * to the current spec; a rollback to one (only over the revision shown: a 409 says someone
 * saved meanwhile). */
async function historyView(params, rest) {
  const name = decodeURIComponent(rest);
  const history = await getJson(`${jobPath(name)}/history`);
  const diff = h("div", { id: "history-diff", "aria-live": "polite" });
  const showDiff = async (revision) => {
    const d = await getJson(`${jobPath(name)}/history/diff?from=${revision}`);
    const show = (v) => v === undefined || v === null ? "—" : JSON.stringify(v);
    diff.replaceChildren(h("h2", {}, `Revision ${d.from} → current (${d.to})`), d.changes.length === 0
      ? h("p", { class: "muted" }, "No difference.")
      : h("ul", { class: "plain mono" }, d.changes.map((c) => h("li", {}, `${c.path}: ${show(c.old)} → ${show(c.new)}`))));
    return false;
  };
  const rows = history.versions.map((v) => h("tr", { "data-revision": String(v.revision) },
    h("td", { "data-label": "Revision" }, String(v.revision), v.current ? h("span", { class: "badge enabled" }, "current") : ""),
    h("td", { "data-label": "Saved" }, localTime(v.at)),
    h("td", { "data-label": "By" }, v.by),
    h("td", { "data-label": "Via" }, v.via, v.restored ? h("div", { class: "muted" }, `restores ${v.restored}`) : ""),
    h("td", { "data-label": "Actions" }, v.current ? "" : [
      button("Diff", () => showDiff(v.revision), { "aria-label": `Diff revision ${v.revision} with the current spec` }),
      button("Roll back", async () => {
        if (!confirm(`Save the spec of revision ${v.revision} again as ${name}'s newest version?`)) return false;
        await api(`${jobPath(name)}/rollback`, {
          method: "POST", headers: { "Content-Type": "application/json", "If-Match": String(history.revision) },
          body: JSON.stringify({ revision: v.revision }),
        });
        return true;
      }, { "aria-label": `Roll back to revision ${v.revision}` }),
    ])));
  app().replaceChildren(
    h("div", { class: "heading start" }, h("h1", {}, `History of ${name}`)),
    h("p", {}, h("a", { href: `#/job/${encodeURIComponent(name)}` }, `← ${name}`)),
    h("table", { id: "history" },
      h("thead", {}, h("tr", {}, ["Revision", "Saved", "By", "Via", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)),
    diff);
}

/** A job's task on its page: the command, the HTTP request or the gRPC call. */
function taskText(task) {
  if (!task) return "";
  if (task.kind === "http") return h("code", {}, `${task.method || "GET"} ${task.url}`);
  if (task.kind === "grpc") return ["gRPC ", h("code", {}, task.method), " at ", h("code", {}, task.endpoint)];
  return [h("code", {}, task.command), runAsText(task)];
}

// ---------------------------------------------------------------------------------------------
// Job editor

/** The form's fields: [name (the API's field path), label, kind, options]. */
const SELECTS = {
  "task.kind": [["shell", "Shell command"], ["http", "HTTP request"], ["grpc", "gRPC call"]],
  concurrency: [["allow", "allow — runs may overlap"], ["forbid", "forbid — skip a tick while one runs"], ["replace", "replace — kill the running one"], ["queue", "queue — wait for the running one, oldest first"]],
  misfire: [["skip", "skip — record missed ticks"], ["run_once", "run once — run the newest missed tick"], ["run_all", "run all — run every missed tick (up to max catch-up)"]],
  on_worker_loss: [["rerun", "rerun on another worker"], ["mark_lost", "mark lost"]],
  mode: [["single", "single — one worker per tick"], ["broadcast", "broadcast — every eligible worker"], ["sharded", "sharded — N parts per tick"]],
  "task.method": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"].map((m) => [m, m]),
  // The backfill dialog's.
  which: [["missing", "missing — ticks without a successful run"], ["failed", "failed — ticks whose latest attempt failed, timed out or was lost"], ["all", "all — every tick"]],
  overlap: [["serial", "serial — one run at a time, oldest first"], ["parallel", "parallel — several runs at once"]],
};

const idOf = (name) => `f-${name.replace(/[^a-z0-9]/gi, "-")}`;

/**
 * A labelled control with room for a hint and an error; `data-field` is the API's field path
 * (two fields of different task kinds may share one: errors go to the visible one).
 */
function formField(name, label, control, hint, id = idOf(name)) {
  control.id = id;
  control.name = name;
  const error = h("div", { class: "field-error", id: `err-${id}`, hidden: true });
  return h("div", { class: "field", "data-field": name },
    h("label", { for: control.id }, label), control, hint ? h("div", { class: "hint" }, hint) : "", error);
}

const input = (attrs = {}) => h("input", { type: "text", autocomplete: "off", spellcheck: "false", ...attrs });
const textarea = (attrs = {}) => h("textarea", { rows: 3, spellcheck: "false", ...attrs });
const select = (name) => h("select", {}, SELECTS[name].map(([v, t]) => h("option", { value: v }, t)));

/** `k=v` (or `Name: value`) lines ↔ an object. Throws naming the line that does not parse. */
function parseMap(text, sep) {
  const out = {};
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const at = line.indexOf(sep);
    if (at <= 0) throw new Error(`line ${i + 1}: expected key${sep}value`);
    out[line.slice(0, at).trim()] = line.slice(at + sep.length).trim();
  });
  return out;
}
const formatMap = (obj, sep) => Object.entries(obj || {}).map(([k, v]) => `${k}${sep}${v ?? ""}`).join("\n").replace(/[ ]+$/gm, "");
/** Secret entries left empty are sent as null: "keep the stored value". */
const secrets = (map) => Object.fromEntries(Object.entries(map).map(([k, v]) => [k, v === "" ? null : v]));
const names = (text) => text.split(/[\s,]+/).filter(Boolean);
const numberOr = (text) => (/^\d+$/.test(text.trim()) ? Number(text.trim()) : text.trim());

/** The editor's form; `read()` gives the spec, `fill(spec)` shows one. */
function jobForm(isNew) {
  const f = {};
  const add = (name, el) => { f[name] = el; return el; };
  const fields = {
    name: formField("name", "Name", add("name", input({ required: true, pattern: "[a-z0-9][a-z0-9._-]{0,127}", placeholder: "nightly-report", disabled: !isNew })),
      "Lowercase letters, digits, . _ -; cannot be changed later."),
    description: formField("description", "Description", add("description", input({ placeholder: "What this job is for" }))),
    team: formField("team", "Team", add("team", input({ pattern: "[a-z0-9][a-z0-9-]{0,62}", placeholder: "payments", list: "team-list" })),
      "Who may see and change the job: callers with a role on this team (and global roles). Empty: global roles only."),
    enabled: h("div", { class: "field check", "data-field": "enabled" },
      h("label", {}, add("enabled", h("input", { type: "checkbox", name: "enabled", id: idOf("enabled") })), " Enabled (runs on schedule)")),
    labels: formField("labels", "Labels", add("labels", textarea({ rows: 2, placeholder: "team=data" })), "One key=value per line."),
    schedule: formField("schedule", "Schedule", add("schedule", textarea({ rows: 2, required: true, class: "mono", placeholder: "0 30 2 * * *  or  @every 5m  or  @daily" })),
      "Crontab (5 fields, or 6/7 with seconds first), @hourly/@daily/…, @every 30s, @at 2026-12-01T00:00:00Z. One per line: several lines merge their ticks, one run per instant."),
    activeFrom: formField("active_from", "Active from", add("active_from", input({ placeholder: "always, e.g. 2026-12-01T00:00:00Z" })), "No tick before this instant (RFC 3339)."),
    activeUntil: formField("active_until", "Active until", add("active_until", input({ placeholder: "always, e.g. 2027-01-01T00:00:00Z" })), "No tick after this instant (RFC 3339)."),
    skipCalendars: formField("skip_calendars", "Skip calendars", add("skip_calendars", input({ placeholder: "holidays-de" })),
      "No run on the days of these calendars (#/calendars); comma-separated."),
    jitter: formField("jitter", "Jitter", add("jitter", input({ placeholder: "none, e.g. 30s" })), "Each tick moved later by up to this long, the same on every worker; spreads jobs due at the same moment."),
    timezone: formField("timezone", "Timezone", add("timezone", input({ placeholder: "UTC", list: "timezones" })), "IANA name, e.g. Europe/Berlin."),
    kind: formField("task.kind", "Task", add("task.kind", select("task.kind"))),
    command: formField("task.command", "Command", add("task.command", textarea({ rows: 3, placeholder: "pg_dump db > /backups/db.sql", class: "mono" })), "Runs with /bin/sh -c in its own process group."),
    env: formField("task.env", "Environment", add("task.env", textarea({ rows: 2, placeholder: "KEY=value", class: "mono" })), "One KEY=value per line."),
    secretEnv: formField("task.secret_env", "Secret environment", add("task.secret_env", textarea({ rows: 2, placeholder: "DB_PASSWORD=…", class: "mono" })),
      "KEY=value per line. Values are never shown again; KEY= with nothing after it keeps the stored value."),
    params: formField("task.params", "Run parameters", add("task.params", textarea({ rows: 2, class: "mono", placeholder: '{"REPORT_DAY": {"default": "today", "pattern": "[0-9-]+|today"}}' })),
      "JSON: the only variables a manual run may set (a list of names, or NAME: {default, pattern, description}); empty for none."),
    cwd: formField("task.cwd", "Working directory", add("task.cwd", input({ placeholder: "/srv/app" }))),
    user: formField("task.user", "Run as user", add("task.user", input({ placeholder: "the worker's own" })),
      "Only workers running as root that list this user in run_as_users run the job."),
    group: formField("task.group", "Run as group", add("task.group", input({ placeholder: "the user's primary group" })), "One of the user's groups."),
    method: formField("task.method", "Method", add("task.method", select("task.method"))),
    url: formField("task.url", "URL", add("task.url", input({ placeholder: "https://example.internal/hook", type: "url" }))),
    headers: formField("task.headers", "Headers", add("task.headers", textarea({ rows: 2, placeholder: "Accept: application/json", class: "mono" })), "One Name: value per line."),
    secretHeaders: formField("task.secret_headers", "Secret headers", add("task.secret_headers", textarea({ rows: 2, placeholder: "Authorization: Bearer …", class: "mono" })),
      "Name: value per line. Never shown again; Name: with nothing after it keeps the stored value."),
    body: formField("task.body", "Body", add("task.body", textarea({ rows: 3, class: "mono" }))),
    expect: formField("task.expect_status", "Expected status", add("task.expect_status", input({ inputmode: "numeric", placeholder: "any 2xx" }))),
    asynchronous: formField("task.async", "Asynchronous", add("task.async", textarea({ rows: 3, class: "mono", placeholder: '{"interval": "5s", "timeout": "2h"}' })),
      "JSON; empty for a plain request. Set, a 202 Accepted answer's status URL (its Location) is polled until its state is done or failed; a kill or timeout sends DELETE there."),
    endpoint: formField("task.endpoint", "Endpoint", add("task.endpoint", input({ placeholder: "http://10.0.0.5:50051", type: "url" })),
      "http:// for plaintext, https:// for TLS: scheme, host and port only."),
    grpcMethod: formField("task.method", "Method", add("grpc.method", input({ placeholder: "package.Service/Method", class: "mono" })),
      "A unary method. Its descriptors come from the server's reflection service, or from the descriptor set below.", "f-task-grpc-method"),
    request: formField("task.request", "Request (JSON)", add("task.request", textarea({ rows: 4, placeholder: "{\"month\": \"2026-11\"}", class: "mono" })),
      "The request message in proto3 JSON; empty for {} (every field at its default)."),
    metadata: formField("task.metadata", "Metadata", add("task.metadata", textarea({ rows: 2, placeholder: "x-team: data", class: "mono" })), "One name: value per line; lowercase names."),
    secretMetadata: formField("task.secret_metadata", "Secret metadata", add("task.secret_metadata", textarea({ rows: 2, placeholder: "authorization: Bearer …", class: "mono" })),
      "name: value per line. Never shown again; name: with nothing after it keeps the stored value."),
    descriptorSet: formField("task.descriptor_set", "Descriptor set", add("task.descriptor_set", textarea({ rows: 2, placeholder: "none: ask the server's reflection service", class: "mono" })),
      "Base64 of a FileDescriptorSet (protoc --include_imports --descriptor_set_out=set.pb; base64 -w0 set.pb)."),
    timeout: formField("timeout", "Timeout", add("timeout", input({ placeholder: "none, e.g. 10m" })), "TERM, then KILL, after this long."),
    retries: formField("retries.max", "Retries", add("retries.max", input({ inputmode: "numeric", placeholder: "0" })), "Extra attempts after a failure."),
    backoff: formField("retries.backoff", "Backoff", add("retries.backoff", input({ placeholder: "10s" })), "Doubles per attempt."),
    maxBackoff: formField("retries.max_backoff", "Max backoff", add("retries.max_backoff", input({ placeholder: "5m" }))),
    concurrency: formField("concurrency", "Concurrency", add("concurrency", select("concurrency"))),
    maxQueue: formField("max_queue", "Max queue", add("max_queue", input({ inputmode: "numeric", placeholder: "5" })), "With queue: most ticks waiting; a tick finding it full is skipped."),
    misfire: formField("misfire", "Missed ticks", add("misfire", select("misfire")), "What to do with ticks missed while no worker ran."),
    maxCatchup: formField("max_catchup", "Max catch-up", add("max_catchup", input({ inputmode: "numeric", placeholder: "100" }))),
    startDeadline: formField("start_deadline", "Start deadline", add("start_deadline", input({ placeholder: "10s" })), "A tick not started this long after its time goes to the missed-tick policy."),
    pauseAfter: formField("pause_after_failures", "Pause after failures", add("pause_after_failures", input({ inputmode: "numeric", placeholder: "never" })),
      "Pause the job after this many final failures in a row."),
    loss: formField("on_worker_loss", "On worker loss", add("on_worker_loss", select("on_worker_loss"))),
    memory: formField("limits.memory", "Memory limit", add("limits.memory", input({ placeholder: "none, e.g. 256MiB" })), "Address space of each process; allocations beyond it fail."),
    cpu: formField("limits.cpu", "CPU limit", add("limits.cpu", input({ placeholder: "none, e.g. 30s" })), "CPU time of each process; SIGXCPU when used up."),
    openFiles: formField("limits.open_files", "Open files limit", add("limits.open_files", input({ inputmode: "numeric", placeholder: "none, e.g. 1024" }))),
    mode: formField("mode", "Mode", add("mode", select("mode"))),
    shards: formField("mode.sharded", "Shards", add("mode.sharded", input({ inputmode: "numeric", placeholder: "4" }))),
    selector: formField("selector", "Selector", add("selector", textarea({ rows: 2, placeholder: "region=eu" })), "Only workers with all these labels run the job."),
    onSuccess: formField("on_success", "On success, run", add("on_success", input({ placeholder: "job-b, job-c" }))),
    onFailure: formField("on_failure", "On failure, run", add("on_failure", input({ placeholder: "alert" }))),
    maxOutput: formField("max_output", "Output kept (bytes)", add("max_output", input({ inputmode: "numeric", placeholder: "the worker's limit" }))),
    lateStart: formField("alerts.late_start", "Late start alert", add("alerts.late_start", input({ placeholder: "none, e.g. 1m" })),
      "Event late: a tick's run has not started this long after its time; 1s to 24h."),
    maxDuration: formField("alerts.max_duration", "Max duration alert", add("alerts.max_duration", input({ placeholder: "none, e.g. 10m" })),
      "Event long_running: a run is still going this long after it started; 1s to 24h."),
    noSuccess: formField("alerts.no_success_within", "No success within", add("alerts.no_success_within", input({ placeholder: "none, e.g. 2h" })),
      "Event stale: no run of the job succeeded for this long; 1s to 30d."),
    outputMatch: formField("alerts.on_output_match", "Output match (regex)", add("alerts.on_output_match", input({ placeholder: "none, e.g. ERROR|panic", class: "mono" })),
      "Event output_match: a run's output matches this regular expression (Rust regex syntax)."),
  };
  const preview = h("div", { class: "preview", id: "preview", "aria-live": "polite" });
  fields.schedule.append(preview);
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  fields.timezone.append(h("datalist", { id: "timezones" }, ["UTC", ...zones].map((z) => h("option", { value: z }))));
  const shellOnly = [fields.command, fields.env, fields.secretEnv, fields.params, fields.cwd, fields.user, fields.group];
  const limitFields = [fields.memory, fields.cpu, fields.openFiles];
  const httpOnly = [fields.method, fields.url, fields.headers, fields.secretHeaders, fields.body, fields.expect, fields.asynchronous];
  const grpcOnly = [fields.endpoint, fields.grpcMethod, fields.request, fields.metadata, fields.secretMetadata, fields.descriptorSet];
  const sync = () => {
    const kind = f["task.kind"].value;
    for (const el of [...shellOnly, ...limitFields]) el.hidden = kind !== "shell";
    for (const el of httpOnly) el.hidden = kind !== "http";
    for (const el of grpcOnly) el.hidden = kind !== "grpc";
    fields.shards.hidden = f.mode.value !== "sharded";
  };
  f["task.kind"].addEventListener("change", sync);
  f.mode.addEventListener("change", sync);
  const group = (legend, ...children) => h("fieldset", {}, h("legend", {}, legend), children);
  const form = h("form", { id: "job-form", novalidate: true, "aria-label": "Job" },
    group("Job", fields.name, fields.team, fields.description, fields.enabled, fields.labels),
    group("Schedule", fields.schedule, fields.timezone, fields.activeFrom, fields.activeUntil, fields.jitter, fields.skipCalendars),
    group("Task", fields.kind, ...shellOnly, ...httpOnly, ...grpcOnly),
    group("When things go wrong", fields.timeout, fields.retries, fields.backoff, fields.maxBackoff, fields.concurrency, fields.maxQueue, fields.misfire, fields.maxCatchup, fields.startDeadline, fields.pauseAfter, fields.loss, ...limitFields),
    group("Where it runs", fields.mode, fields.shards, fields.selector),
    group("What runs next", fields.onSuccess, fields.onFailure, fields.maxOutput),
    group("Alerts", h("p", { class: "hint" }, "Sent as notifications to the job's notify targets that ask for the event (notify is edited in the JSON tab). Leave a field empty for no alert."),
      fields.lateStart, fields.maxDuration, fields.noSuccess, fields.outputMatch));

  /** The spec the form describes; a field that cannot be read throws {field, message}. */
  const read = () => {
    const map = (name, sep) => {
      try { return parseMap(f[name].value, sep); } catch (e) { throw Object.assign(new Error(e.message), { field: name }); }
    };
    const spec = { timezone: f.timezone.value.trim() || "UTC", enabled: f.enabled.checked };
    const expressions = scheduleLines(f.schedule.value);
    if (expressions.length > 1) spec.schedules = expressions; else spec.schedule = expressions[0] || "";
    if (f.active_from.value.trim()) spec.active_from = f.active_from.value.trim();
    if (f.active_until.value.trim()) spec.active_until = f.active_until.value.trim();
    if (f.jitter.value.trim()) spec.jitter = f.jitter.value.trim();
    if (names(f.skip_calendars.value).length) spec.skip_calendars = names(f.skip_calendars.value);
    if (f["task.kind"].value === "http") {
      spec.task = { kind: "http", method: f["task.method"].value, url: f["task.url"].value.trim() };
      const headers = map("task.headers", ":");
      if (Object.keys(headers).length) spec.task.headers = headers;
      const secretHeaders = secrets(map("task.secret_headers", ":"));
      if (Object.keys(secretHeaders).length) spec.task.secret_headers = secretHeaders;
      if (f["task.body"].value) spec.task.body = f["task.body"].value;
      if (f["task.expect_status"].value.trim()) spec.task.expect_status = numberOr(f["task.expect_status"].value);
      if (f["task.async"].value.trim()) {
        try { spec.task.async = JSON.parse(f["task.async"].value); } catch (e) {
          throw Object.assign(new Error(`Not valid JSON: ${e.message}`), { field: "task.async" });
        }
      }
    } else if (f["task.kind"].value === "grpc") {
      spec.task = { kind: "grpc", endpoint: f["task.endpoint"].value.trim(), method: f["grpc.method"].value.trim() };
      const request = f["task.request"].value.trim();
      try { spec.task.request = request ? JSON.parse(request) : {}; } catch (e) {
        throw Object.assign(new Error(`not valid JSON: ${e.message}`), { field: "task.request" });
      }
      const metadata = map("task.metadata", ":");
      if (Object.keys(metadata).length) spec.task.metadata = metadata;
      const secretMetadata = secrets(map("task.secret_metadata", ":"));
      if (Object.keys(secretMetadata).length) spec.task.secret_metadata = secretMetadata;
      if (f["task.descriptor_set"].value.trim()) spec.task.descriptor_set = f["task.descriptor_set"].value.replace(/\s+/g, "");
    } else {
      spec.task = { kind: "shell", command: f["task.command"].value };
      const env = map("task.env", "=");
      if (Object.keys(env).length) spec.task.env = env;
      const secretEnv = secrets(map("task.secret_env", "="));
      if (Object.keys(secretEnv).length) spec.task.secret_env = secretEnv;
      if (f["task.params"].value.trim()) {
        try { spec.task.params = JSON.parse(f["task.params"].value); } catch (e) {
          throw Object.assign(new Error(`Not valid JSON: ${e.message}`), { field: "task.params" });
        }
      }
      if (f["task.cwd"].value.trim()) spec.task.cwd = f["task.cwd"].value.trim();
      if (f["task.user"].value.trim()) spec.task.user = f["task.user"].value.trim();
      if (f["task.group"].value.trim()) spec.task.group = f["task.group"].value.trim();
    }
    if (f.timeout.value.trim()) spec.timeout = f.timeout.value.trim();
    if (f.start_deadline.value.trim()) spec.start_deadline = f.start_deadline.value.trim();
    spec.retries = { max: numberOr(f["retries.max"].value || "0") };
    if (f["retries.backoff"].value.trim()) spec.retries.backoff = f["retries.backoff"].value.trim();
    if (f["retries.max_backoff"].value.trim()) spec.retries.max_backoff = f["retries.max_backoff"].value.trim();
    spec.concurrency = f.concurrency.value;
    if (f.max_queue.value.trim()) spec.max_queue = numberOr(f.max_queue.value);
    spec.misfire = f.misfire.value;
    if (f.max_catchup.value.trim()) spec.max_catchup = numberOr(f.max_catchup.value);
    if (f.pause_after_failures.value.trim()) spec.pause_after_failures = numberOr(f.pause_after_failures.value);
    spec.on_worker_loss = f.on_worker_loss.value;
    spec.mode = f.mode.value === "sharded" ? { sharded: numberOr(f["mode.sharded"].value || "") } : f.mode.value;
    const selector = map("selector", "=");
    if (Object.keys(selector).length) spec.selector = selector;
    if (names(f.on_success.value).length) spec.on_success = names(f.on_success.value);
    if (names(f.on_failure.value).length) spec.on_failure = names(f.on_failure.value);
    if (f.description.value.trim()) spec.description = f.description.value.trim();
    if (f.team.value.trim()) spec.team = f.team.value.trim();
    const labels = map("labels", "=");
    if (Object.keys(labels).length) spec.labels = labels;
    if (f.max_output.value.trim()) spec.max_output = numberOr(f.max_output.value);
    const limits = {};
    if (spec.task.kind === "shell") {
      if (f["limits.memory"].value.trim()) limits.memory = numberOr(f["limits.memory"].value);
      if (f["limits.cpu"].value.trim()) limits.cpu = f["limits.cpu"].value.trim();
      if (f["limits.open_files"].value.trim()) limits.open_files = numberOr(f["limits.open_files"].value);
    }
    // `limits.output` (another name for max_output) has no control of its own: keep it.
    if (keptOutput !== undefined && !spec.max_output) limits.output = keptOutput;
    if (Object.keys(limits).length) spec.limits = limits;
    // `alerts` only with the fields filled in; none: no `alerts` at all. The pattern goes as
    // typed (its spaces may matter), the durations trimmed.
    const alerts = {};
    for (const key of ALERT_FIELDS) {
      const value = f[`alerts.${key}`].value;
      if (value.trim()) alerts[key] = key === "on_output_match" ? value : value.trim();
    }
    if (Object.keys(alerts).length) spec.alerts = alerts;
    // `notify` has no controls (edit it in the JSON tab): keep it as loaded, its withheld
    // secrets as `null`, which the API reads as "keep the stored value".
    if (keptNotify !== undefined) spec.notify = keptNotify;
    return spec;
  };

  let keptOutput;
  let keptNotify;
  const fill = (spec, name) => {
    const task = spec.task || { kind: "shell" };
    const limits = spec.limits || {};
    keptOutput = limits.output;
    keptNotify = spec.notify;
    const retries = spec.retries || {};
    const mode = spec.mode && typeof spec.mode === "object" ? "sharded" : spec.mode || "single";
    const alerts = spec.alerts || {};
    const values = {
      name: name || "", team: spec.team || "", description: spec.description || "", labels: formatMap(spec.labels, "="),
      schedule: expressionsOf(spec).join("\n"), timezone: spec.timezone || "UTC", "task.kind": task.kind || "shell",
      active_from: spec.active_from || "", active_until: spec.active_until || "", jitter: spec.jitter || "", skip_calendars: (spec.skip_calendars || []).join(", "),
      "task.command": task.command || "", "task.env": formatMap(task.env, "="), "task.cwd": task.cwd || "",
      "task.params": task.params ? JSON.stringify(task.params, null, 2) : "",
      "task.user": task.user || "", "task.group": task.group || "",
      "task.secret_env": formatMap(task.secret_env, "="), "task.secret_headers": formatMap(task.secret_headers, ": "),
      "task.method": task.kind === "http" ? task.method || "GET" : "GET", "task.url": task.url || "", "task.headers": formatMap(task.headers, ": "),
      "task.endpoint": task.endpoint || "", "grpc.method": task.kind === "grpc" ? task.method || "" : "",
      "task.request": task.kind === "grpc" ? JSON.stringify(task.request || {}, null, 2) : "",
      "task.metadata": formatMap(task.metadata, ": "), "task.secret_metadata": formatMap(task.secret_metadata, ": "),
      "task.descriptor_set": task.descriptor_set || "",
      "task.body": task.body || "", "task.expect_status": task.expect_status ?? "",
      "task.async": task.async ? JSON.stringify(task.async, null, 2) : "", timeout: spec.timeout || "", start_deadline: spec.start_deadline || "",
      "retries.max": retries.max ?? 0, "retries.backoff": retries.backoff || "", "retries.max_backoff": retries.max_backoff || "",
      concurrency: spec.concurrency || "allow", max_queue: spec.max_queue ?? "", misfire: spec.misfire || "skip", max_catchup: spec.max_catchup ?? "",
      pause_after_failures: spec.pause_after_failures ?? "",
      on_worker_loss: spec.on_worker_loss || "rerun", mode, "mode.sharded": mode === "sharded" ? spec.mode.sharded : "",
      selector: formatMap(spec.selector, "="), on_success: (spec.on_success || []).join(", "),
      on_failure: (spec.on_failure || []).join(", "), max_output: spec.max_output ?? "",
      "limits.memory": limits.memory ?? "", "limits.cpu": limits.cpu || "", "limits.open_files": limits.open_files ?? "",
      ...Object.fromEntries(ALERT_FIELDS.map((key) => [`alerts.${key}`, alerts[key] ?? ""])),
    };
    for (const [k, v] of Object.entries(values)) f[k].value = String(v);
    f.enabled.checked = spec.enabled !== false;
    sync();
  };
  return { form, f, preview, read, fill };
}

/** The fields of a spec's `alerts`, each a control `alerts.{field}` of the editor. */
const ALERT_FIELDS = ["late_start", "max_duration", "no_success_within", "on_output_match"];

/** A job's alerts in words ("late after 1m · running over 10m · …"); "" when it has none. */
function alertsText(alerts) {
  const a = alerts || {};
  return [
    a.late_start ? `late after ${a.late_start}` : "",
    a.max_duration ? `running over ${a.max_duration}` : "",
    a.no_success_within ? `stale after ${a.no_success_within}` : "",
    a.on_output_match ? `output matches /${a.on_output_match}/` : "",
  ].filter(Boolean).join(" · ");
}

/** The editor's fields that change a job's fire times, which the preview reads. */
const SHAPE_FIELDS = ["schedule", "timezone", "active_from", "active_until", "jitter", "skip_calendars"];

/** A schedule field's expressions, one per non-empty line. */
function scheduleLines(text) { return text.split("\n").map((l) => l.trim()).filter(Boolean); }

/** A spec's schedule expressions: `schedules`, or the one `schedule`. */
function expressionsOf(spec) { return spec.schedules && spec.schedules.length ? spec.schedules : [spec.schedule || ""]; }

/** Marks the control of API field `path` (e.g. `task.command`, `on_success[0]`) with `message`. */
function showFieldError(form, path, message) {
  // `schedules[i]` is a line of the one schedule field.
  let key = (path || "").replace(/^schedules\b(\[\d+\])?/, "schedule");
  while (key) {
    const holder = [...form.querySelectorAll(`[data-field="${CSS.escape(key)}"]`)].find((el) => !el.hidden);
    if (holder) {
      const err = holder.querySelector(".field-error");
      const control = holder.querySelector("input, textarea, select");
      err.textContent = message;
      err.hidden = false;
      if (control) {
        control.setAttribute("aria-invalid", "true");
        control.setAttribute("aria-describedby", err.id);
      }
      return control || holder;
    }
    const cut = Math.max(key.lastIndexOf("."), key.lastIndexOf("["));
    key = cut > 0 ? key.slice(0, cut) : "";
  }
  return null;
}

function clearFieldErrors(form, only) {
  for (const holder of form.querySelectorAll("[data-field]")) {
    if (only && holder.dataset.field !== only) continue;
    const err = holder.querySelector(".field-error");
    if (err) { err.hidden = true; err.textContent = ""; }
    const control = holder.querySelector("[aria-invalid]");
    if (control) { control.removeAttribute("aria-invalid"); control.removeAttribute("aria-describedby"); }
  }
}

/** Create (#/new) or edit (#/edit/NAME) a job: form or JSON, live schedule preview, 409 handling. */
async function editView(params, rest) {
  const name = rest ? decodeURIComponent(rest) : "";
  const isNew = !name;
  let revision = null;
  const ui = jobForm(isNew);
  const { form, f, preview } = ui;
  const status = h("div", { class: "form-status", role: "status", "aria-live": "polite" });
  const json = textarea({ rows: 24, class: "mono json", "aria-label": "Job spec JSON", id: "spec-json" });
  const jsonError = h("div", { class: "field-error", id: "err-json", hidden: true });
  const jsonPanel = h("section", { hidden: true, id: "json-panel", "aria-label": "JSON" },
    h("p", { class: "muted" }, "The whole spec as the API takes it. Paste one here, or copy this one."),
    json, jsonError,
    h("div", { class: "toolbar" },
      button("Apply to form", () => { toForm(); return false; }),
      button("Copy JSON", async () => { await navigator.clipboard.writeText(json.value); status.textContent = "Copied."; return false; })));
  const formTab = h("button", { type: "button", role: "tab", "aria-selected": "true", "aria-controls": "job-form" }, "Form");
  const jsonTab = h("button", { type: "button", role: "tab", "aria-selected": "false", "aria-controls": "json-panel" }, "JSON");
  const showJson = (on) => {
    form.hidden = on;
    jsonPanel.hidden = !on;
    formTab.setAttribute("aria-selected", String(!on));
    jsonTab.setAttribute("aria-selected", String(on));
  };
  const toForm = () => {
    let spec;
    try { spec = JSON.parse(json.value); } catch (e) {
      jsonError.textContent = `Not valid JSON: ${e.message}`;
      jsonError.hidden = false;
      return false;
    }
    jsonError.hidden = true;
    ui.fill(spec, isNew ? f.name.value : name);
    showJson(false);
    schedulePreview();
    return true;
  };
  formTab.addEventListener("click", () => { if (!jsonPanel.hidden) toForm(); });
  jsonTab.addEventListener("click", () => {
    clearFieldErrors(form);
    try { json.value = JSON.stringify(ui.read(), null, 2); } catch (e) { showFieldError(form, e.field, e.message); return; }
    showJson(true);
  });

  // The schedule reads back in words with its next 10 fire times, as the operator types.
  let previewTimer = null;
  let previewSeq = 0;
  const schedulePreview = () => {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const seq = ++previewSeq;
      for (const field of SHAPE_FIELDS) clearFieldErrors(form, field);
      const expressions = scheduleLines(f.schedule.value);
      if (!expressions.length) { preview.replaceChildren(); return; }
      const query = new URLSearchParams(expressions.map((e) => ["schedule", e]));
      query.set("timezone", f.timezone.value.trim() || "UTC");
      query.set("count", "10");
      for (const field of ["active_from", "active_until", "jitter"]) if (f[field].value.trim()) query.set(field, f[field].value.trim());
      // A tick's jitter depends on the job's name: a new job's preview needs one first.
      if (query.has("jitter")) query.set("job", f.name.value.trim() || "unnamed");
      for (const c of names(f.skip_calendars.value)) query.append("skip_calendar", c);
      try {
        const p = await getJson(`/api/schedule/preview?${query}`);
        if (seq !== previewSeq) return;
        preview.replaceChildren(h("p", { class: "reading" }, p.description),
          h("ol", { class: "next", "aria-label": "Next fire times" }, p.next.map((t) => {
            const skip = (p.skipped || []).find((k) => k.at === t);
            return h("li", skip ? { class: "skipped" } : {}, `${jobTime(t)} · ${localTime(t)} local`, skip ? ` — skipped (calendar ${skip.calendar})` : "");
          })));
      } catch (e) {
        if (seq !== previewSeq) return;
        preview.replaceChildren();
        // The preview's `skip_calendar` parameter is the spec's `skip_calendars` field.
        const field = e.field === "skip_calendar" ? "skip_calendars" : e.field;
        if (e.status === 400) showFieldError(form, field || "schedule", e.message); else preview.append(h("p", { class: "warn" }, explain(e)));
      }
    }, 250);
  };
  for (const field of [...SHAPE_FIELDS, "name"]) f[field].addEventListener("input", schedulePreview);

  const load = async () => {
    const { body } = await api(jobPath(name));
    revision = body.revision;
    ui.fill(body.spec || {}, name);
    status.textContent = "";
    schedulePreview();
  };

  const save = async () => {
    clearFieldErrors(form);
    jsonError.hidden = true;
    status.textContent = "";
    let body;
    let jobName = isNew ? f.name.value.trim() : name;
    if (!jsonPanel.hidden) {
      try { JSON.parse(json.value); } catch (e) { jsonError.textContent = `Not valid JSON: ${e.message}`; jsonError.hidden = false; return; }
      body = json.value;
    } else {
      try { body = JSON.stringify(ui.read()); } catch (e) { showFieldError(form, e.field, e.message).focus(); return; }
    }
    if (!jobName) { showFieldError(form, "name", "A job needs a name.").focus(); return; }
    const headers = { "Content-Type": "application/json" };
    if (isNew) headers["If-None-Match"] = "*"; else headers["If-Match"] = `"${revision}"`;
    try {
      await api(jobPath(jobName), { method: "PUT", headers, body });
      location.hash = `#/job/${encodeURIComponent(jobName)}`;
    } catch (e) {
      if (e.status === 409 && !isNew) {
        status.replaceChildren(h("div", { class: "conflict", role: "alert" },
          h("strong", {}, "Someone else changed this job while you were editing. "), e.message, " ",
          button("Reload their version", async () => { await load(); return false; }),
          " Reloading discards your changes; copy them from the JSON tab first if you need them."));
        status.scrollIntoView({ block: "center" });
        return;
      }
      if (e.status === 409 && isNew) {
        showFieldError(form, "name", e.message).focus();
        return;
      }
      // 403 naming `team`: the token may not save a job into that team.
      if (e.status === 400 || e.status === 413 || (e.status === 403 && e.field)) {
        if (!jsonPanel.hidden) {
          jsonError.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
          jsonError.hidden = false;
          return;
        }
        const at = showFieldError(form, e.field, e.message);
        if (at) { at.focus(); return; }
        status.replaceChildren(h("div", { class: "field-error", role: "alert" }, e.message));
        status.scrollIntoView({ block: "center" });
        return;
      }
      banner(`Saving failed: ${explain(e)}`);
    }
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); save(); });
  const saveButton = h("button", { type: "button", class: "primary" }, isNew ? "Create job" : "Save changes");
  saveButton.addEventListener("click", save);

  // The token's teams to pick from; a new job of a token with one team and no global role
  // starts in that team (the only place it may create one).
  const me = await whoami().catch(() => ({ teams: {} }));
  const myTeams = Object.keys(me.teams || {});
  app().replaceChildren(
    h("h1", {}, isNew ? "New job" : `Edit ${name}`),
    h("div", { class: "tabs", role: "tablist" }, formTab, jsonTab),
    status, form, jsonPanel,
    h("datalist", { id: "team-list" }, myTeams.map((t) => h("option", { value: t }))),
    h("div", { class: "toolbar sticky" }, saveButton,
      h("a", { class: "button", href: isNew ? "#/jobs" : `#/job/${encodeURIComponent(name)}` }, "Cancel")));
  if (isNew) {
    const team = !me.role && myTeams.length === 1 ? myTeams[0] : undefined;
    ui.fill({ schedule: "", timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC", task: { kind: "shell" }, team });
    f.name.focus();
  } else {
    await load();
    f.description.focus();
  }
}

// ---------------------------------------------------------------------------------------------
// Executions

const FILTERS = ["job", "team", "status", "trigger", "worker", "since", "until", "q"];

function executionsTable(executions) {
  return h("table", {},
    h("thead", {}, h("tr", {}, ["Execution", "Status", "Trigger", "Scheduled", "Duration", "Worker"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, executions.map((r) => h("tr", { "data-id": r.id },
      h("td", { "data-label": "Execution" }, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)),
      h("td", { "data-label": "Status" }, statusBadge(r.status), r.reason ? h("div", { class: "muted small" }, r.reason) : ""),
      h("td", { "data-label": "Trigger" }, r.trigger),
      h("td", { "data-label": "Scheduled" }, localTime(r.scheduled_at)),
      h("td", { "data-label": "Duration" }, duration(r.duration_ms)),
      h("td", { "data-label": "Worker" }, r.worker_id || "")))));
}

/** Execution search: every filter of GET /api/executions, kept in the URL; cursor pages. */
async function executionsView(params) {
  const query = new URLSearchParams();
  for (const f of [...FILTERS, "cursor"]) if (params.get(f)) query.set(f, params.get(f));
  const live = sessionStorage.getItem("etcron-live") !== "off";
  const form = h("form", { class: "toolbar", role: "search" },
    FILTERS.map((f) => h("label", {}, h("span", { class: "muted" }, `${f} `),
      h("input", { name: f, value: params.get(f) || "", size: f === "q" ? 20 : 12, "data-shortcut": f === "q" ? "/" : null,
        placeholder: f === "since" || f === "until" ? "2026-11-22T00:00:00Z" : f === "status" ? "failed,timed_out" : f === "q" ? "text in output" : "" }))),
    h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const f of FILTERS) { const v = form.elements[f].value.trim(); if (v) q.set(f, v); }
    location.hash = `#/executions?${q}`;
  });
  const liveButton = h("button", { type: "button", "aria-pressed": String(live), title: "Refresh the first page every 5 seconds" }, "Auto-refresh");
  liveButton.addEventListener("click", () => {
    sessionStorage.setItem("etcron-live", live ? "off" : "on");
    route();
  });
  const root = app();
  root.replaceChildren(h("div", { class: "heading" }, h("h1", {}, "Executions"), liveButton), form);
  let data;
  try {
    data = await getJson(`/api/executions?${query}`);
  } catch (e) {
    if (e.status === 400) {
      const input = e.field && form.elements[e.field];
      root.append(h("p", { class: "field-error", role: "alert" }, e.field ? `${e.field}: ${e.message}` : e.message));
      if (input) input.setAttribute("aria-invalid", "true");
      return;
    }
    throw e;
  }
  if (data.executions.length === 0) {
    const none = data.partial ? "No match among the records searched so far." : query.toString() ? "No execution matches these filters." : "No executions recorded yet.";
    root.append(h("div", { class: "empty" }, none));
  } else {
    root.append(executionsTable(data.executions));
  }
  if (data.partial) {
    root.append(h("p", { class: "partial", role: "status" }, "Words are matched on the records read, 1 000 a page: this page searched part of the history. Older records may match: search older below."));
  }
  const nav = h("p", { class: "pager" });
  if (params.get("cursor")) {
    const first = new URLSearchParams(params);
    first.delete("cursor");
    nav.append(h("a", { href: `#/executions?${first}` }, "← Newest"), " ");
  }
  if (data.next_cursor) {
    const next = new URLSearchParams(params);
    next.set("cursor", data.next_cursor);
    nav.append(h("a", { href: `#/executions?${next}`, rel: "next" }, data.partial ? "Search older →" : "Older executions →"));
  }
  root.append(nav);
  if (live && !params.get("cursor")) autoRefresh(5000);
}

/** One execution: timings, attempt, worker, fencing token, why it did not run, output. */
async function executionView(params, rest) {
  const id = decodeURIComponent(rest);
  let r;
  try {
    r = await getJson(`/api/executions/${encodeURIComponent(id)}`);
  } catch (e) {
    if (e.status !== 404) throw e;
    // A run just requested ("Run with…" opens its page at once) has neither a record nor a
    // running marker until a worker claims it, nor a short one between its end and its record.
    app().replaceChildren(h("h1", { class: "id" }, id),
      h("p", { class: "muted", role: "status", id: "no-record" }, "No record of this execution yet: a run just requested appears once a worker starts it. This page looks again every 2 s."));
    autoRefresh(2000);
    return;
  }
  const field = (k, v) => v == null || v === "" ? [] : [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : String(v))];
  const output = h("pre", { class: "output wrap", tabindex: "0", "aria-label": "Output" }, r.output || "");
  const wrap = h("button", { type: "button", "aria-pressed": "true" }, "Wrap lines");
  wrap.addEventListener("click", () => {
    const on = output.classList.toggle("wrap");
    wrap.setAttribute("aria-pressed", String(on));
  });
  // What the task reported: its progress as a bar, its stored checkpoint (both move while it runs).
  const progress = h("div", { id: "progress", class: "progress-line" });
  const checkpoint = h("code", { id: "checkpoint" }, r.checkpoint === undefined ? "" : JSON.stringify(r.checkpoint));
  showProgress(progress, r.progress);
  const copy = h("button", { type: "button" }, "Copy output");
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(output.textContent); copy.textContent = "Copied"; } catch { banner("The browser refused clipboard access."); }
  });
  app().replaceChildren(
    h("h1", { class: "id" }, r.id),
    h("p", {}, h("span", { class: `status-${r.status} big` }, r.status), " ", r.error ? h("span", { class: "muted" }, r.error) : ""),
    r.reason ? h("p", { class: "reason" }, r.reason) : "",
    h("dl", { class: "fields" },
      field("Job", h("a", { href: `#/job/${encodeURIComponent(r.job)}` }, r.job)), field("Trigger", r.trigger), field("Attempt", r.attempt),
      field("Worker", r.worker_id), field("Host", r.hostname),
      field("Scheduled", r.scheduled_at), field("Jitter", r.jitter_ms == null ? null : h("span", { id: "jitter" }, `+${duration(r.jitter_ms)} (the job's jitter moved this tick)`)),
      field("Claimed", r.claimed_at), field("Started", r.started_at),
      field("Finished", r.finished_at), field("Duration", r.duration_ms == null ? null : duration(r.duration_ms)),
      field("Exit code", r.exit_code), field("Signal", r.signal), field("HTTP status", r.http_status),
      field("Fencing token", r.fencing_token),
      field("Parent", r.parent ? h("a", { href: `#/execution/${encodeURIComponent(r.parent)}` }, r.parent) : null),
      field("Shard", r.shard ? `${r.shard[0]} of ${r.shard[1]}` : null),
      field("Run as of", r.params && r.params.as_of_ms != null ? r.scheduled_at : null),
      field("Environment", r.params && r.params.env ? h("code", { id: "run-params" }, formatMap(r.params.env, "=")) : null),
      field("Resumed from", r.resumed_from ? h("span", { id: "resumed-from" },
        h("a", { href: `#/execution/${encodeURIComponent(r.resumed_from.execution_id)}` }, r.resumed_from.execution_id),
        ` at checkpoint `, h("code", {}, JSON.stringify(r.resumed_from.checkpoint))) : null),
      // A running task may store one any moment: the field is there to be filled.
      field("Checkpoint", r.checkpoint === undefined && r.status !== "running" ? null : checkpoint)),
    progress,
    h("div", { class: "toolbar" }, wrap, copy, r.output_truncated ? h("span", { class: "warn" }, "output truncated (head and tail kept)") : ""),
    output);
  if (r.status !== "running") return;
  // Running: its output as it is printed, then the final record (the view re-renders).
  const live = h("span", { class: "live", role: "status" }, "● live output");
  wrap.parentNode.append(live);
  output.textContent = "";
  followOutput(r.id, {
    output: (d) => { output.append(d.text); if (output.scrollHeight - output.scrollTop - output.clientHeight < 80) output.scrollTop = output.scrollHeight; },
    gap: (d) => output.append(`\n[... ${d.skipped_bytes} bytes not kept ...]\n`),
    progress: (d) => {
      showProgress(progress, d.progress);
      if (d.checkpoint !== undefined) checkpoint.textContent = JSON.stringify(d.checkpoint);
    },
    status: () => { live.remove(); route({ quiet: true }); },
    error: (d) => { live.remove(); banner(d.message, "warn"); },
    // The master closed a stream that had nothing new for a while: following again is a click.
    idle: () => {
      const again = h("button", { type: "button", id: "follow-again" }, "Follow again");
      again.addEventListener("click", () => route({ quiet: true }));
      live.replaceChildren("following paused: nothing new for a while ", again);
    },
  }).catch((e) => {
    // No stream (an older master, a proxy in the way): fall back to re-reading the record.
    if (e.name === "AbortError") return;
    live.textContent = "output refreshes every 3 s";
    output.textContent = r.output || "";
    autoRefresh(3000);
  });
}

/** Shows a task's progress (`p`: `{percent, message, at}`) in `el`: a bar when it reported a
 * percentage, its message; nothing when it reported none. */
function showProgress(el, p) {
  if (!p) {
    el.replaceChildren();
    return;
  }
  const pct = typeof p.percent === "number" ? p.percent : null;
  const bar = h("progress", { max: "100", "aria-label": "Progress" });
  if (pct != null) bar.value = pct;
  el.replaceChildren(bar, " ",
    h("span", { class: "progress-text" }, [pct != null ? `${pct}%` : "", p.message || ""].filter(Boolean).join(" · ")),
    p.at ? h("span", { class: "muted small", title: p.at }, ` reported ${localTime(p.at)}`) : "");
}

/** The open live-output stream, closed when the view changes. */
let following = null;
function stopFollowing() {
  if (following) following.abort();
  following = null;
}

/**
 * Follows `GET /api/executions/{id}/stream` (Server-Sent Events read through fetch, so the
 * session's token goes along) and calls `handlers[event](data)` for each event.
 */
async function followOutput(id, handlers) {
  stopFollowing();
  const ctl = new AbortController();
  following = ctl;
  const headers = { "Accept": "text/event-stream" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const resp = await fetch(`/api/executions/${encodeURIComponent(id)}/stream`, { headers, signal: ctl.signal });
  if (!resp.ok || !resp.body) throw new Error(`stream: ${resp.status}`);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = val;
        else if (field === "data") data.push(val);
      }
      if (!data.length || !handlers[event]) continue;
      try { handlers[event](JSON.parse(data.join("\n"))); } catch (e) { console.error(e); }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Workers

function uptime(startedAt) {
  const s = Math.max(0, Math.floor((Date.now() - new Date(startedAt)) / 1000));
  if (isNaN(s)) return "";
  const d = Math.floor(s / 86400), hr = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

/** " as user:group" for a shell task run as a user, else "". */
function runAsText(task) {
  if (!task || !task.user) return "";
  return h("span", { class: "run-as" }, ` as ${task.user}${task.group ? `:${task.group}` : ""}`);
}

/** What a worker needs to run a job: its selector's labels, its task's user, its team. */
function needs(selector, user, team) {
  const parts = [];
  if (Object.keys(selector || {}).length) parts.push(`matches ${labelText(selector)}`);
  if (user) parts.push(`may run tasks as ${user}`);
  parts.push(team ? `is shared or bound to team ${team}` : "is shared (bound to no team)");
  return parts.join(" and ");
}

/** Live workers, and the jobs that no live worker matches. */
async function workersView() {
  const data = await getJson("/api/workers");
  const root = app();
  root.replaceChildren(h("h1", {}, "Workers"));
  if (data.workers.length === 0) {
    root.append(h("div", { class: "empty" }, "No live worker. Start one with etcron-worker; jobs do not run until then."));
  } else {
    root.append(h("table", {},
      h("thead", {}, h("tr", {}, ["Worker", "Labels", "Teams", "Runs as", "Running / capacity", "Uptime", "Version"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, data.workers.map((w) => h("tr", { "data-worker": w.id },
        h("td", { "data-label": "Worker" }, h("strong", {}, w.id), h("div", { class: "muted" }, `${w.hostname} pid ${w.pid}`)),
        h("td", { "data-label": "Labels" }, labelText(w.labels) || h("span", { class: "muted" }, "none")),
        h("td", { "data-label": "Teams" }, (w.teams || []).join(", ") || h("span", { class: "muted" }, "shared")),
        h("td", { "data-label": "Runs as", title: "who shell tasks without task.user run as; below, the users task.user may name" },
          w.task_user || h("span", { class: "muted" }, "its own user"),
          (w.run_as_users || []).length ? h("div", { class: "muted" }, `task.user: ${w.run_as_users.join(", ")}`) : ""),
        h("td", { "data-label": "Running" }, `${w.running} / ${w.capacity}`,
          (w.running_executions || []).length ? h("ul", { class: "plain small" }, w.running_executions.map((r) => h("li", {}, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)))) : ""),
        h("td", { "data-label": "Uptime", title: w.started_at }, uptime(w.started_at)),
        h("td", { "data-label": "Version" }, w.version))))));
  }
  const unmatched = data.unmatched_jobs || [];
  root.append(h("h2", {}, "Jobs no live worker may run"));
  root.append(unmatched.length === 0
    ? h("p", { class: "muted", id: "unmatched" }, "None: every job has a worker that may run it.")
    : h("ul", { id: "unmatched" }, unmatched.map((j) => h("li", {}, h("a", { href: `#/job/${encodeURIComponent(j.job)}` }, h("strong", {}, j.job)), ` needs a worker that ${needs(j.selector, j.user, j.team)}`))));
  autoRefresh(10000);
}

/** Skip calendars: every one with its days; a form saves one (lines of YYYY-MM-DD or FROM..TO). */
async function calendarsView() {
  const data = await getJson("/api/calendars");
  const root = app();
  root.replaceChildren(h("h1", {}, "Skip calendars"),
    h("p", { class: "muted" }, "Jobs naming a calendar in skip_calendars do not run on its days (in its timezone): those ticks are recorded skipped, naming the calendar."));
  const days = (c) => [...(c.dates || []), ...(c.ranges || []).map((r) => `${r.from}..${r.to}`)];
  if (data.calendars.length === 0) root.append(h("div", { class: "empty" }, "No calendar yet."));
  else root.append(h("table", { id: "calendars" },
    h("thead", {}, h("tr", {}, ["Calendar", "Timezone", "Days", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, data.calendars.map((c) => {
      const del = h("button", { type: "button", "aria-label": `Delete calendar ${c.name}` }, "Delete");
      del.addEventListener("click", async () => {
        if (!confirm(`Delete calendar ${c.name}?`)) return;
        try { await api(`/api/calendars/${encodeURIComponent(c.name)}`, { method: "DELETE" }); route(); } catch (e) { banner(e.message); }
      });
      const edit = h("button", { type: "button", "aria-label": `Edit calendar ${c.name}` }, "Edit");
      edit.addEventListener("click", () => fill(c));
      return h("tr", { "data-calendar": c.name },
        h("td", { "data-label": "Calendar" }, h("strong", {}, c.name), c.calendar.description ? h("div", { class: "muted" }, c.calendar.description) : ""),
        h("td", { "data-label": "Timezone" }, c.calendar.timezone),
        h("td", { "data-label": "Days" }, h("code", {}, days(c.calendar).join(", "))),
        h("td", { "data-label": "Actions" }, edit, " ", del));
    }))));
  const f = {
    name: input({ required: true, pattern: "[a-z0-9][a-z0-9._-]{0,127}", placeholder: "holidays-de" }),
    timezone: input({ placeholder: "UTC", list: "timezones" }),
    days: textarea({ rows: 5, class: "mono", placeholder: "2026-12-25\n2026-12-31..2027-01-01" }),
    description: input({ placeholder: "public holidays" }),
  };
  const fields = [
    formField("name", "Name", f.name), formField("timezone", "Timezone", f.timezone, "The days are days in this IANA timezone."),
    formField("dates", "Days", f.days, "One per line: a day (YYYY-MM-DD) or a range FROM..TO, both included."),
    formField("description", "Description", f.description)];
  const fill = (c) => {
    f.name.value = c.name; f.timezone.value = c.calendar.timezone; f.description.value = c.calendar.description || "";
    f.days.value = days(c.calendar).join("\n");
  };
  const form = h("form", { id: "calendar-form", novalidate: true, "aria-label": "Calendar" },
    h("fieldset", {}, h("legend", {}, "Add or replace a calendar"), fields), h("button", { type: "submit", class: "primary" }, "Save calendar"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    const lines = scheduleLines(f.days.value);
    const body = { timezone: f.timezone.value.trim() || "UTC", dates: lines.filter((l) => !l.includes("..")),
      ranges: lines.filter((l) => l.includes("..")).map((l) => { const [from, to] = l.split(".."); return { from: from.trim(), to: to.trim() }; }) };
    if (f.description.value.trim()) body.description = f.description.value.trim();
    try {
      await api(`/api/calendars/${encodeURIComponent(f.name.value.trim())}`, { method: "PUT", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
      route();
    } catch (e) {
      if (e.status === 400) showFieldError(form, (e.field || "dates").replace(/^ranges\b/, "dates"), e.message); else banner(explain(e));
    }
  });
  root.append(h("h2", {}, "Add or replace"), form);
}

// ---------------------------------------------------------------------------------------------
// Overview and charts

/** Charts are drawn at the page's width, so their text stays at its real size on a phone. */
const chartWidth = () => Math.max(320, Math.min(1248, (app().clientWidth || 960) - 32));

/** Executions per minute by status, stacked, one bar per bucket. */
function activityChart(data) {
  const W = chartWidth(), H = 220, left = 44, bottom = 24, top = 10;
  const perMinute = data.bucket_ms / 60000;
  const buckets = data.buckets.map((b) => ({ ...b, rates: STATUSES.map((s) => (b.counts[s] || 0) / perMinute) }));
  const max = Math.max(1, ...buckets.map((b) => b.rates.reduce((a, x) => a + x, 0)));
  const bw = (W - left) / buckets.length;
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const total = buckets.reduce((a, b) => a + Object.values(b.counts).reduce((x, n) => x + n, 0), 0);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `Executions per minute by status, ${total} in the last ${data.window}` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("line", { x1: left, x2: W, y1: y(max), y2: y(max), class: "grid" }),
    svg("text", { x: left - 6, y: y(max) + 4, class: "tick", "text-anchor": "end" }, max >= 10 ? Math.round(max) : max.toFixed(1)),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
  buckets.forEach((b, i) => {
    let acc = 0;
    const parts = STATUSES.map((s, k) => {
      const v = b.rates[k];
      if (!v) return null;
      const rect = svg("rect", { x: left + i * bw + 0.5, width: Math.max(1, bw - 1), y: y(acc + v), height: y(acc) - y(acc + v), class: `bar s-${s}` });
      acc += v;
      return rect;
    }).filter(Boolean);
    const counts = Object.entries(b.counts).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
    chart.append(svg("g", { "data-start": b.start_ms }, svg("title", {}, `${clock(b.start_ms)}: ${counts}`), parts));
    if (i % Math.ceil(buckets.length / Math.max(2, Math.floor(W / 150))) === 0) {
      chart.append(svg("text", { x: left + i * bw, y: H - 6, class: "tick" }, clock(b.start_ms)));
    }
  });
  return h("figure", { class: "chart-box" }, chart, legend(STATUSES.filter((s) => buckets.some((b) => b.counts[s]))));
}

const legend = (statuses) => h("figcaption", { class: "legend" }, statuses.map((s) => h("span", { class: `key s-${s}` }, s)));

/** Duration of the job's recent executions (oldest left), colored by outcome. */
function durationChart(executions) {
  const runs = [...executions].reverse();
  const W = chartWidth(), H = 180, left = 56, bottom = 22, top = 10;
  const max = Math.max(1, ...runs.map((r) => r.duration_ms || 0));
  const bw = (W - left) / Math.max(runs.length, 20);
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `Duration and outcome of the last ${runs.length} executions` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("line", { x1: left, x2: W, y1: y(max), y2: y(max), class: "grid" }),
    svg("text", { x: left - 6, y: y(max) + 4, class: "tick", "text-anchor": "end" }, duration(max)),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
  runs.forEach((r, i) => {
    const d = r.duration_ms || 0;
    // Runs without a duration (missed, skipped, running) show as a short mark on the axis.
    const height = Math.max(3, y(0) - y(d));
    const link = svg("a", { href: `#/execution/${encodeURIComponent(r.id)}` },
      svg("title", {}, `${r.id}: ${r.status}${r.duration_ms == null ? "" : `, ${duration(r.duration_ms)}`}`),
      svg("rect", { x: left + i * bw + 1, width: Math.max(2, bw - 2), y: y(0) - height, height, class: `bar s-${r.status}`, "data-status": r.status }));
    chart.append(link);
  });
  if (runs.length) {
    chart.append(svg("text", { x: left, y: H - 5, class: "tick" }, localTime(runs[0].scheduled_at)));
    const end = left + runs.length * bw;
    if (end - left > 360) {
      chart.append(svg("text", { x: end, y: H - 5, class: "tick", "text-anchor": "end" }, localTime(runs[runs.length - 1].scheduled_at)));
    }
  }
  return h("figure", { class: "chart-box", id: "duration-chart" }, chart, legend(STATUSES.filter((s) => runs.some((r) => r.status === s))));
}

/** Activity over the last hour or day, recent failures and missed ticks. */
async function overviewView(params) {
  const window = params.get("window") === "24h" ? "24h" : "1h";
  const data = await getJson(`/api/overview?window=${window}`);
  const pick = (w, label) => h("a", { href: `#/overview?window=${w}`, class: "button", "aria-pressed": String(w === window) }, label);
  const totals = STATUSES.filter((s) => data.totals[s]).map((s) => h("li", { "data-status": s }, h("strong", { class: `status-${s}` }, String(data.totals[s])), ` ${s}`));
  const list = (records, empty, id) => records.length === 0
    ? h("p", { class: "muted", id }, empty)
    : h("ul", { class: "plain", id }, records.map((r) => h("li", {},
      h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id), " ", statusBadge(r.status), " ",
      h("span", { class: "muted" }, `${localTime(r.scheduled_at)}${r.error ? ` — ${r.error}` : ""}${r.reason ? ` — ${r.reason}` : ""}`))));
  app().replaceChildren(
    h("div", { class: "heading" }, h("h1", {}, "Overview"), h("div", { class: "toolbar" }, pick("1h", "Last hour"), pick("24h", "Last day"))),
    totals.length ? h("ul", { class: "totals", "aria-label": "Totals" }, totals) : h("div", { class: "empty" }, `No executions in the last ${window === "1h" ? "hour" : "day"}.`),
    activityChart(data),
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "Recent failures"), list(data.recent_failures, "No failures. ", "failures"),
        h("a", { href: `#/executions?status=failed,timed_out,lost&since=${encodeURIComponent(data.since)}` }, "All failures →")),
      h("section", {}, h("h2", {}, "Missed ticks"), list(data.recent_missed, "No missed ticks.", "missed"),
        h("a", { href: `#/executions?status=missed&since=${encodeURIComponent(data.since)}` }, "All missed ticks →"))));
  autoRefresh(15000);
}

// ---------------------------------------------------------------------------------------------
// Token prompt and routing

/** The API answered 401: ask for a token, keep it for this browser session, retry. */
function tokenView(refused) {
  const field = h("input", { type: "password", id: "api-token", autocomplete: "current-password", "aria-label": "API token", required: true });
  const form = h("form", { class: "token", "aria-label": "Sign in" },
    h("h1", {}, "API token needed"),
    h("p", {}, "This master requires a bearer token. It is kept for this browser tab only, until you close it."),
    refused ? h("p", { class: "field-error", role: "alert" }, "That token was refused; check it and try again.") : "",
    h("label", { for: "api-token" }, "Token"), field, h("button", { type: "submit", class: "primary" }, "Continue"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, field.value.trim());
    route();
  });
  app().replaceChildren(form);
  field.focus();
}

const views = { overview: overviewView, jobs: jobsView, job: jobView, history: historyView, new: editView, edit: editView, executions: executionsView, execution: executionView, workers: workersView, calendars: calendarsView };
const NAV_OF = { job: "jobs", history: "jobs", new: "jobs", edit: "jobs", execution: "executions" };

/** Shows who the token belongs to, with a way to forget it (only when the API has tokens). */
let whoShown = null;
async function showWho() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (whoShown === token) return;
  whoShown = token;
  const el = document.getElementById("who");
  if (!token) { el.replaceChildren(); return; }
  try {
    const me = await whoami();
    const out = h("button", { type: "button", class: "link" }, "Sign out");
    out.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
    el.replaceChildren(h("span", { class: "muted", id: "who-name" }, `${me.name} (${rolesText(me)}) `), out);
  } catch { el.replaceChildren(); }
}

/** The newest route started, and the newest whose view has rendered. */
let routeSeq = 0;
let renderedSeq = 0;

async function route({ quiet = false } = {}) {
  const seq = ++routeSeq;
  clearTimeout(refreshTimer);
  stopFollowing();
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "jobs").split("?");
  const slash = path.indexOf("/");
  const name = slash < 0 ? path : path.slice(0, slash);
  const rest = slash < 0 ? "" : path.slice(slash + 1);
  const view = views[name] || jobsView;
  const nav = NAV_OF[name] || name;
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (!quiet) banner("");
  try {
    await view(new URLSearchParams(query || ""), rest);
    // A route started earlier that rendered after a newer one (its requests were slower) has
    // put an old page over the current one: render the current one again.
    if (seq < renderedSeq) { route({ quiet: true }); return; }
    renderedSeq = seq;
    showWho();
    if (quiet && document.getElementById("banner").className === "error") banner("");
  } catch (e) {
    if (e.status === 401) {
      const had = !!sessionStorage.getItem(TOKEN_KEY);
      sessionStorage.removeItem(TOKEN_KEY);
      tokenView(had);
      return;
    }
    banner(explain(e));
    const transient = e.status === 503 || e instanceof TypeError;
    if (app().textContent.trim() === "Loading…" || !quiet) {
      app().replaceChildren(h("div", { class: "empty" },
        transient ? "Nothing to show until the master can answer; retrying every 10 seconds. " : `${e.message} `,
        button("Retry now", async () => {})));
    }
    if (transient) autoRefresh(10000);
  }
}

/** "/" focuses the page's search field, as in most consoles. */
document.addEventListener("keydown", (ev) => {
  if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  if (t && (["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName) || t.isContentEditable)) return;
  const search = app().querySelector('[data-shortcut="/"]');
  if (search) { ev.preventDefault(); search.focus(); }
});

window.addEventListener("hashchange", () => { route().then(() => { if (!app().contains(document.activeElement)) app().focus({ preventScroll: true }); }); });
window.addEventListener("DOMContentLoaded", () => {
  route();
  checkStorage();
  setInterval(checkStorage, 30000);
  checkMembers();
  setInterval(checkMembers, 5000);
});
