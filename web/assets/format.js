// Shared helpers: the page's main element, building HTML and SVG elements, times and durations,
// and a job's state and needs in words.

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
  return `paused${p.by ? ` by ${p.by}` : ""}${p.at ? ` at ${localTime(p.at)}` : ""}${p.until ? ` until ${localTime(p.until)}` : ""}${p.reason ? `: ${p.reason}` : ""}`;
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
