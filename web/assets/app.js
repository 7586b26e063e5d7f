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
      h("td", { "data-label": "Workers" }, j.eligible_workers === 0 ? h("span", { class: "warn" }, "no live worker matches") : String(j.eligible_workers ?? "")));
  });
  root.append(h("table", {},
    h("thead", {}, h("tr", {}, ["Job", "State", "Schedule", "Next run", "Last result", "Workers"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}

const views = { jobs: jobsView };

async function route() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "jobs").split("?");
  const name = path.split("/")[0];
  const view = views[name] || jobsView;
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.toggleAttribute("aria-current", a.dataset.nav === name);
    if (a.dataset.nav === name) a.setAttribute("aria-current", "page");
  }
  try {
    await view(new URLSearchParams(query || ""));
    banner("");
  } catch (e) {
    banner(e.code === "etcd_unavailable" ? "The master cannot reach etcd: jobs cannot be read or changed right now." : `Error: ${e.message}`);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
