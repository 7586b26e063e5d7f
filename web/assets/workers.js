// #/workers: live workers (an executor with the handlers it runs) with their recent runs, their
// cordons (with Cordon / Drain / Uncordon for global admins), the workers recently departed,
// and the jobs no live worker may run.

import { app, h, labelText, localTime, needs, statusBadge } from "./format.js";
import { api, explain, getJson, whoami } from "./api.js";
import { autoRefresh } from "./nav.js";
import { button } from "./controls.js";

function uptime(startedAt) {
  const s = Math.max(0, Math.floor((Date.now() - new Date(startedAt)) / 1000));
  if (isNaN(s)) return "";
  const d = Math.floor(s / 86400), hr = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

/** A worker's state in a word, as `etcronctl workers ls` says it. */
function state(w) {
  if (!w.cordon) return "ready";
  return w.cordon.state === "draining" && w.cordon.empty ? "drained" : w.cordon.state;
}

/** The state, who cordoned the worker and when. */
function stateCell(w) {
  const c = w.cordon;
  const word = state(w);
  return h("td", { "data-label": "State" },
    h("span", { class: word === "ready" ? "" : "warn", "data-state": word }, word),
    c ? h("div", { class: "muted small" }, [c.by ? `by ${c.by}` : "", c.at ? ` at ${c.at}` : ""].join("")) : "",
    c && c.state === "draining" && !c.empty ? h("div", { class: "muted small" }, `${c.running} still running`) : "");
}

/** Cordon / Drain / Uncordon (a global admin's). */
function cordonActions(w) {
  const path = `/api/workers/${encodeURIComponent(w.id)}`;
  const post = (action) => () => api(`${path}/${action}`, { method: "POST" });
  if (w.cordon) return [button("Uncordon", post("uncordon"), { "aria-label": `Uncordon ${w.id}` })];
  return [
    button("Cordon", async () => {
      if (!confirm(`Cordon ${w.id}? It races for no new run; what runs on it goes on.`)) return false;
      await post("cordon")();
      return true;
    }, { "aria-label": `Cordon ${w.id}` }),
    button("Drain", async () => {
      if (!confirm(`Drain ${w.id}? It races for no new run; this page says when its runs have ended.`)) return false;
      await post("drain")();
      return true;
    }, { "aria-label": `Drain ${w.id}` }),
  ];
}

/** Runs shown per worker. */
const RECENT_RUNS = 5;

/** A worker's latest runs (from the executions search by worker): status, job, when. */
function recentRuns(runs) {
  if (!runs) return h("span", { class: "muted small" }, "records unavailable");
  if (!runs.length) return h("span", { class: "muted small" }, "none recorded");
  return h("ul", { class: "plain small recent-runs" }, runs.map((r) => h("li", {},
    h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, statusBadge(r.status)), " ",
    h("a", { href: `#/job/${encodeURIComponent(r.job)}` }, r.job), " ",
    h("span", { class: "muted", title: r.scheduled_at }, localTime(r.scheduled_at)))));
}

/** Workers the records of the last 24 h name that are not live now (stopped, crashed, cut
 * off): when each was last seen, its runs, its last one. */
function departedSection(departed) {
  const section = h("section", { id: "departed", "aria-labelledby": "departed-heading" }, h("h2", { id: "departed-heading" }, "Recently departed"));
  if (departed.error) {
    section.append(h("p", { class: "warn" }, explain(departed.error)));
  } else if (!departed.workers.length) {
    section.append(h("p", { class: "muted" }, "None: every worker the records of the last 24 hours name is live."));
  } else {
    section.append(h("p", { class: "muted small" }, "Named by execution records of the last 24 hours, not live now."),
      h("table", {},
        h("thead", {}, h("tr", {}, ["Worker", "Last seen", "Runs (24 h)", "Last run"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, departed.workers.map((w) => h("tr", { "data-departed": w.id },
          h("td", { "data-label": "Worker" }, h("a", { href: `#/executions?worker=${encodeURIComponent(w.id)}` }, h("strong", {}, w.id))),
          h("td", { "data-label": "Last seen", title: w.last_seen }, localTime(w.last_seen)),
          h("td", { "data-label": "Runs (24 h)" }, String(w.executions)),
          h("td", { "data-label": "Last run" }, h("a", { href: `#/execution/${encodeURIComponent(w.last_execution.id)}` }, statusBadge(w.last_execution.status)),
            " ", h("a", { href: `#/job/${encodeURIComponent(w.last_job)}` }, w.last_job)))))));
  }
  return section;
}

/** Live workers with their recent runs, the workers recently departed, and the jobs that no
 * live worker matches. */
export async function workersView() {
  const [data, me, departed] = await Promise.all([getJson("/api/workers"), whoami().catch(() => ({})),
    getJson("/api/workers/departed").catch((e) => ({ error: e }))]);
  const runs = await Promise.all(data.workers.map((w) =>
    getJson(`/api/executions?worker=${encodeURIComponent(w.id)}&limit=${RECENT_RUNS}`).then((p) => p.executions, () => null)));
  const admin = me.role === "admin";
  const root = app();
  root.replaceChildren(h("h1", {}, "Workers"));
  if (data.workers.length === 0) {
    root.append(h("div", { class: "empty" }, "No live worker. Start one with etcron-worker; jobs do not run until then."));
  } else {
    root.append(h("table", {},
      h("thead", {}, h("tr", {}, ["Worker", "State", "Labels", "Teams", "Runs as", "Running / capacity", "Recent runs", "Uptime", "Version", ...(admin ? [""] : [])].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, data.workers.map((w, i) => h("tr", { "data-worker": w.id },
        h("td", { "data-label": "Worker" }, h("strong", {}, w.id), h("div", { class: "muted" }, `${w.hostname} pid ${w.pid}`),
          (w.handlers || []).length ? h("div", { class: "muted executor" }, `executor: ${w.handlers.join(", ")}`) : ""),
        stateCell(w),
        h("td", { "data-label": "Labels" }, labelText(w.labels) || h("span", { class: "muted" }, "none")),
        h("td", { "data-label": "Teams" }, (w.teams || []).join(", ") || h("span", { class: "muted" }, "shared")),
        h("td", { "data-label": "Runs as", title: "who shell tasks without task.user run as; below, the users task.user may name" },
          // An executor runs its handlers only, inside its own process.
          (w.handlers || []).length ? h("span", { class: "muted" }, "no shell tasks")
            : w.task_user || h("span", { class: "muted" }, w.os_user ? `the worker's own user, ${w.os_user}` : "the worker's own user"),
          w.task_user === "root" ? h("div", { class: "warn small" }, "every task without task.user runs as root") : "",
          w.os_user ? h("div", { class: "muted small os-user" }, `worker process: ${w.os_user}`) : "",
          (w.run_as_users || []).length ? h("div", { class: "muted" }, `task.user: ${w.run_as_users.join(", ")}`) : ""),
        h("td", { "data-label": "Running" }, `${w.running} / ${w.capacity}`,
          (w.running_executions || []).length ? h("ul", { class: "plain small" }, w.running_executions.map((r) => h("li", {}, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)))) : ""),
        h("td", { "data-label": "Recent runs" }, recentRuns(runs[i])),
        h("td", { "data-label": "Uptime", title: w.started_at }, uptime(w.started_at)),
        h("td", { "data-label": "Version" }, w.version),
        admin ? h("td", { class: "actions" }, cordonActions(w)) : "")))));
  }
  root.append(departedSection(departed));
  const unmatched = data.unmatched_jobs || [];
  root.append(h("h2", {}, "Jobs no live worker may run"));
  root.append(unmatched.length === 0
    ? h("p", { class: "muted", id: "unmatched" }, "None: every job has a worker that may run it.")
    : h("ul", { id: "unmatched" }, unmatched.map((j) => h("li", {}, h("a", { href: `#/job/${encodeURIComponent(j.job)}` }, h("strong", {}, j.job)), j.handler ? ` needs a live executor with handler ${j.handler}` : ` needs a worker that ${needs(j.selector, j.user, j.team)}`))));
  // The API names the first of them (in name order) and counts them all.
  const more = (data.unmatched_total || 0) - unmatched.length;
  if (more > 0) root.append(h("p", { class: "muted", id: "unmatched-more" }, `and ${more} more`));
  autoRefresh(10000);
}
