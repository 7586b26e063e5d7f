// Shared helpers: the page's main element, building HTML and SVG elements, times and durations,
// and a job's state, needs and executors in words.

export const app = () => document.getElementById("app");

export const STATUSES = ["succeeded", "failed", "timed_out", "lost", "killed", "skipped", "missed", "running"];

/** Builds an element: h("td", {class: "x", "data-label": "Job"}, child, "text"). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** The same for SVG elements. */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** "2026-11-23T02:30:00.000+01:00" → "2026-11-23 02:30:00 +01:00" (the job's own zone). */
export function jobTime(rfc3339) {
  return rfc3339.replace("T", " ").replace(/\.\d+/, "").replace(/([+-]\d\d:\d\d|Z)$/, " $1");
}

export function localTime(rfc3339) {
  const d = new Date(rfc3339);
  return isNaN(d) ? rfc3339 : d.toLocaleString();
}

export const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
export const statusBadge = (status) => h("span", { class: `status-${status}` }, status);

export const labelText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");

/** Whether a job's schedule is held: an operator paused it (`paused`, kept outside the spec) or
 * its spec says `enabled: false`. A job fires only when neither holds (the API's rule). */
export const isPaused = (j) => Boolean(j.paused) || (j.spec || {}).enabled === false;

/** Who paused the job, when and why; or that its spec disables it. */
export function pauseText(j) {
  const p = j.paused;
  if (!p) return (j.spec || {}).enabled === false ? "disabled in its spec (enabled: false)" : "";
  return `paused${p.by ? ` by ${p.by}` : ""}${p.at ? ` at ${localTime(p.at)}` : ""}${p.until ? ` until ${localTime(p.until)}` : ""}${p.reason ? `: ${p.reason}` : ""}${p.next_run_after ? `; next run after it ${localTime(p.next_run_after)}` : ""}`;
}

/** The state badge: "paused" for either kind of hold, the detail in its title. */
export const stateBadge = (j) => isPaused(j)
  ? h("span", { class: "badge paused", title: pauseText(j) }, "paused")
  : h("span", { class: "badge enabled" }, "enabled");

export function duration(ms) {
  if (ms == null) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.round((ms % 60000) / 1000)}s`;
}

/** " as user:group" for a shell task run as a user, else "". */
export function runAsText(task) {
  if (!task || !task.user) return "";
  return h("span", { class: "run-as" }, ` as ${task.user}${task.group ? `:${task.group}` : ""}`);
}

/** What a worker needs to run a job: its selector's labels, its task's user, its team. */
export function needs(selector, user, team) {
  const parts = [];
  if (Object.keys(selector || {}).length) parts.push(`matches ${labelText(selector)}`);
  if (user) parts.push(`may run tasks as ${user}`);
  parts.push(team ? `is shared or bound to team ${team}` : "is shared (bound to no team)");
  return parts.join(" and ");
}

/** The handler a job's task names (`{"kind": "handler", "name": …}`: run by executors, the
 * applications that embed etcron-sdk), or null for a shell, HTTP or gRPC task. */
export const handlerOf = (j) => {
  const task = (j.spec || {}).task || {};
  return task.kind === "handler" ? task.name : null;
};

/** Which live executors have a handler job's handler, from `GET /api/workers` (`workers`: its
 * list, or null when it could not be read): "executors app-1, app-2 have it", or, in the warn
 * style, that none has it, or that those that have it may not run the job (`eligible_workers`
 * 0: its selector, team, or a cordon). */
export function executorsText(j, workers) {
  const name = handlerOf(j);
  const ids = workers ? workers.filter((w) => (w.handlers || []).includes(name)).map((w) => w.id) : null;
  if ((ids && ids.length === 0) || (!ids && j.eligible_workers === 0)) {
    return h("span", { class: "warn", "data-executors": "0" }, "no live executor has it");
  }
  if (!ids) return `${j.eligible_workers} eligible executor(s)`;
  const have = `${ids.length === 1 ? "executor" : "executors"} ${ids.join(", ")} ${ids.length === 1 ? "has" : "have"} it`;
  return j.eligible_workers === 0
    ? h("span", { class: "warn", "data-executors": String(ids.length) }, `${have}, but none may run it (selector, team or cordon)`)
    : h("span", { "data-executors": String(ids.length) }, have);
}
