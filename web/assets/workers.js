// #/workers: live workers (an executor with the handlers it runs), their cordons (with Cordon /
// Drain / Uncordon for global admins), and the jobs no live worker may run.

import { app, h, labelText, needs } from "./format.js";
import { api, getJson, whoami } from "./api.js";
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

/** Live workers, and the jobs that no live worker matches. */
export async function workersView() {
  const [data, me] = await Promise.all([getJson("/api/workers"), whoami().catch(() => ({}))]);
  const admin = me.role === "admin";
  const root = app();
  root.replaceChildren(h("h1", {}, "Workers"));
  if (data.workers.length === 0) {
    root.append(h("div", { class: "empty" }, "No live worker. Start one with etcron-worker; jobs do not run until then."));
  } else {
    root.append(h("table", {},
      h("thead", {}, h("tr", {}, ["Worker", "State", "Labels", "Teams", "Runs as", "Running / capacity", "Uptime", "Version", ...(admin ? [""] : [])].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, data.workers.map((w) => h("tr", { "data-worker": w.id },
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
        h("td", { "data-label": "Uptime", title: w.started_at }, uptime(w.started_at)),
        h("td", { "data-label": "Version" }, w.version),
        admin ? h("td", { class: "actions" }, cordonActions(w)) : "")))));
  }
  const unmatched = data.unmatched_jobs || [];
  root.append(h("h2", {}, "Jobs no live worker may run"));
  root.append(unmatched.length === 0
    ? h("p", { class: "muted", id: "unmatched" }, "None: every job has a worker that may run it.")
    : h("ul", { id: "unmatched" }, unmatched.map((j) => h("li", {}, h("a", { href: `#/job/${encodeURIComponent(j.job)}` }, h("strong", {}, j.job)), j.handler ? ` needs a live executor with handler ${j.handler}` : ` needs a worker that ${needs(j.selector, j.user, j.team)}`))));
  autoRefresh(10000);
}
