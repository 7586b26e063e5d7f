// etcron console: a dependency-free single-page app over the JSON API. Views are chosen by the
// URL hash (#/jobs), so deep links work without server-side routing.
"use strict";

const app = () => document.getElementById("app");

/** Fetches JSON from the API; throws an Error carrying the API's message. */
async function api(path, options = {}) {
  const resp = await fetch(path, { headers: { "Accept": "application/json" }, ...options });
  const text = await resp.text();
  const body = text ? JSON.parse(text) : null;
  if (!resp.ok) {
    const message = body && body.error ? body.error.message : `${resp.status} ${resp.statusText}`;
    const err = new Error(message);
    err.status = resp.status;
    err.code = body && body.error ? body.error.code : undefined;
    throw err;
  }
  return body;
}

/** Shows (or clears) the error banner at the top of the page. */
function banner(message) {
  const el = document.getElementById("banner");
  el.textContent = message || "";
  el.hidden = !message;
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

/** "2026-11-23T02:30:00.000+01:00" → "2026-11-23 02:30:00 +01:00" (the job's own zone). */
function jobTime(rfc3339) {
  return rfc3339.replace("T", " ").replace(/\.\d+/, "").replace(/([+-]\d\d:\d\d|Z)$/, " $1");
}

function localTime(rfc3339) {
  const d = new Date(rfc3339);
  return isNaN(d) ? rfc3339 : d.toLocaleString();
}

/** The jobs list: name, state, schedule in words, next run, last result, eligible workers. */
async function jobsView(params) {
  const filter = (params.get("q") || "").toLowerCase();
  const data = await api("/api/jobs");
  const jobs = data.jobs.filter((j) => {
    if (!filter) return true;
    const labels = Object.entries((j.spec && j.spec.labels) || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    return `${j.name} ${labels}`.toLowerCase().includes(filter);
  });
  const search = h("input", { type: "search", placeholder: "Filter by name or label", "aria-label": "Filter jobs", value: filter });
  search.addEventListener("change", () => { location.hash = `#/jobs?q=${encodeURIComponent(search.value)}`; });
  const root = app();
  root.replaceChildren(h("h1", {}, "Jobs"), h("div", { class: "toolbar" }, search));
  if (jobs.length === 0) {
    root.append(h("div", { class: "empty" }, data.jobs.length ? "No job matches the filter." : "No jobs yet. Create one with PUT /api/jobs/{name}."));
    return;
  }
  const rows = jobs.map((j) => {
    const spec = j.spec || {};
    const last = j.summary && j.summary.last_execution;
    const next = (j.next_runs || [])[0];
    return h("tr", { "data-job": j.name },
      h("td", { "data-label": "Job" }, h("strong", {}, j.name), spec.description ? h("div", { class: "muted" }, spec.description) : ""),
      h("td", { "data-label": "State" }, h("span", { class: `badge ${spec.enabled === false ? "paused" : "enabled"}` }, spec.enabled === false ? "paused" : "enabled")),
      h("td", { "data-label": "Schedule" }, h("code", {}, spec.schedule || ""), h("div", { class: "muted" }, j.schedule_description || "")),
      h("td", { "data-label": "Next run" }, next
        ? [h("div", { title: spec.timezone || "UTC" }, `${jobTime(next)} (${spec.timezone || "UTC"})`), h("div", { class: "muted" }, `${localTime(next)} local`)]
        : h("span", { class: "muted" }, "—")),
      h("td", { "data-label": "Last result" }, last ? h("span", { class: `status-${last.status}` }, last.status) : h("span", { class: "muted" }, "none yet")),
      h("td", { "data-label": "Workers" }, j.eligible_workers === 0 ? h("span", { class: "warn" }, "no live worker matches") : String(j.eligible_workers ?? "")),
      h("td", { "data-label": "Actions", class: "actions" }, jobActions(j)));
  });
  root.append(h("table", {},
    h("thead", {}, h("tr", {}, ["Job", "State", "Schedule", "Next run", "Last result", "Workers", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}

/** A button that runs `action`, then re-renders the current view; errors go to the banner. */
function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await action();
      await route();
    } catch (e) {
      banner(`${label} failed: ${e.message}`);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

function jobActions(j) {
  const path = `/api/jobs/${encodeURIComponent(j.name)}`;
  const paused = j.spec && j.spec.enabled === false;
  return [
    button("Run now", () => api(`${path}/run`, { method: "POST" }), { "aria-label": `Run ${j.name} now` }),
    paused
      ? button("Resume", () => api(`${path}/resume`, { method: "POST" }), { "aria-label": `Resume ${j.name}` })
      : button("Pause", () => api(`${path}/pause`, { method: "POST" }), { "aria-label": `Pause ${j.name}` }),
    button("Kill", () => api(`${path}/kill`, { method: "POST" }), { "aria-label": `Kill running executions of ${j.name}` }),
    button("Delete", async () => {
      if (!confirm(`Delete job ${j.name}? Its pending retries and runs are withdrawn.`)) return;
      await api(path, { method: "DELETE" });
    }, { "aria-label": `Delete ${j.name}`, class: "danger" }),
  ];
}

const FILTERS = ["job", "status", "trigger", "worker", "since", "until", "q"];

/** Execution search: every filter of GET /api/executions, kept in the URL; cursor pages. */
async function executionsView(params) {
  const query = new URLSearchParams();
  for (const f of [...FILTERS, "cursor"]) if (params.get(f)) query.set(f, params.get(f));
  const data = await api(`/api/executions?${query}`);
  const form = h("form", { class: "toolbar", role: "search" },
    FILTERS.map((f) => h("label", {}, h("span", { class: "muted" }, `${f} `),
      h("input", { name: f, value: params.get(f) || "", size: f === "q" ? 20 : 12,
        placeholder: f === "since" || f === "until" ? "2026-11-22T00:00:00Z" : f === "status" ? "failed,timed_out" : "" }))),
    h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const f of FILTERS) { const v = form.elements[f].value.trim(); if (v) q.set(f, v); }
    location.hash = `#/executions?${q}`;
  });
  const root = app();
  root.replaceChildren(h("h1", {}, "Executions"), form);
  if (data.executions.length === 0) {
    root.append(h("div", { class: "empty" }, "No execution matches."));
    return;
  }
  const rows = data.executions.map((r) => h("tr", { "data-id": r.id },
    h("td", { "data-label": "Execution" }, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)),
    h("td", { "data-label": "Status" }, h("span", { class: `status-${r.status}` }, r.status)),
    h("td", { "data-label": "Trigger" }, r.trigger),
    h("td", { "data-label": "Scheduled" }, localTime(r.scheduled_at)),
    h("td", { "data-label": "Duration" }, r.duration_ms == null ? "" : `${r.duration_ms} ms`),
    h("td", { "data-label": "Worker" }, r.worker_id || "")));
  root.append(h("table", {},
    h("thead", {}, h("tr", {}, ["Execution", "Status", "Trigger", "Scheduled", "Duration", "Worker"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
  if (data.next_cursor) {
    const next = new URLSearchParams(params);
    next.set("cursor", data.next_cursor);
    root.append(h("p", {}, h("a", { href: `#/executions?${next}`, rel: "next" }, "Older executions →")));
  }
}

/** One execution: timings, attempt, worker, fencing token, why it did not run, output. */
async function executionView(params, rest) {
  const id = decodeURIComponent(rest);
  const r = await api(`/api/executions/${encodeURIComponent(id)}`);
  const field = (k, v) => v == null || v === "" ? [] : [h("dt", {}, k), h("dd", {}, String(v))];
  const output = h("pre", { class: "output wrap", tabindex: "0", "aria-label": "Output" }, r.output || "");
  const wrap = h("button", { type: "button", "aria-pressed": "true" }, "Wrap lines");
  wrap.addEventListener("click", () => {
    const on = output.classList.toggle("wrap");
    wrap.setAttribute("aria-pressed", String(on));
  });
  const copy = h("button", { type: "button" }, "Copy output");
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(r.output || ""); copy.textContent = "Copied"; } catch { banner("The browser refused clipboard access."); }
  });
  app().replaceChildren(
    h("h1", {}, r.id),
    h("p", {}, h("span", { class: `status-${r.status} big` }, r.status), " ", r.error ? h("span", { class: "muted" }, r.error) : ""),
    r.reason ? h("p", { class: "reason" }, r.reason) : "",
    h("dl", { class: "fields" },
      field("Job", r.job), field("Trigger", r.trigger), field("Attempt", r.attempt), field("Worker", r.worker_id),
      field("Scheduled", r.scheduled_at), field("Claimed", r.claimed_at), field("Started", r.started_at),
      field("Finished", r.finished_at), field("Duration", r.duration_ms == null ? null : `${r.duration_ms} ms`),
      field("Exit code", r.exit_code), field("Signal", r.signal), field("HTTP status", r.http_status),
      field("Fencing token", r.fencing_token), field("Parent", r.parent),
      field("Shard", r.shard ? `${r.shard[0]} of ${r.shard[1]}` : null)),
    h("div", { class: "toolbar" }, wrap, copy, r.output_truncated ? h("span", { class: "warn" }, "output truncated (head and tail kept)") : ""),
    output);
}

function uptime(startedAt) {
  const s = Math.max(0, Math.floor((Date.now() - new Date(startedAt)) / 1000));
  if (isNaN(s)) return "";
  const d = Math.floor(s / 86400), hr = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

const labelText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");

/** Live workers, and the jobs that no live worker matches. */
async function workersView() {
  const data = await api("/api/workers");
  const root = app();
  root.replaceChildren(h("h1", {}, "Workers"));
  if (data.workers.length === 0) {
    root.append(h("div", { class: "empty" }, "No live worker. Start one with etcron-worker; jobs do not run until then."));
  } else {
    root.append(h("table", {},
      h("thead", {}, h("tr", {}, ["Worker", "Labels", "Running / capacity", "Uptime", "Version"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, data.workers.map((w) => h("tr", { "data-worker": w.id },
        h("td", { "data-label": "Worker" }, h("strong", {}, w.id), h("div", { class: "muted" }, `${w.hostname} pid ${w.pid}`)),
        h("td", { "data-label": "Labels" }, labelText(w.labels) || h("span", { class: "muted" }, "none")),
        h("td", { "data-label": "Running" }, `${w.running} / ${w.capacity}`),
        h("td", { "data-label": "Uptime", title: w.started_at }, uptime(w.started_at)),
        h("td", { "data-label": "Version" }, w.version))))));
  }
  const unmatched = data.unmatched_jobs || [];
  root.append(h("h2", {}, "Jobs no live worker matches"));
  root.append(unmatched.length === 0
    ? h("p", { class: "muted", id: "unmatched" }, "None: every job has a worker that may run it.")
    : h("ul", { id: "unmatched" }, unmatched.map((j) => h("li", {}, h("strong", {}, j.job), ` needs ${labelText(j.selector)}`))));
}

const views = { jobs: jobsView, executions: executionsView, execution: executionView, workers: workersView };

async function route() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "jobs").split("?");
  const slash = path.indexOf("/");
  const name = slash < 0 ? path : path.slice(0, slash);
  const rest = slash < 0 ? "" : path.slice(slash + 1);
  const view = views[name] || jobsView;
  for (const a of document.querySelectorAll("[data-nav]")) {
    const current = a.dataset.nav === name || (name === "execution" && a.dataset.nav === "executions");
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  try {
    await view(new URLSearchParams(query || ""), rest);
    banner("");
  } catch (e) {
    banner(e.code === "etcd_unavailable" ? "The master cannot reach etcd: jobs cannot be read or changed right now." : `Error: ${e.message}`);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
