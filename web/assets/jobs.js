// #/jobs: every job the token sees, one compact row each: filtered as you type by name, label
// or description, by state and team, sorted by a column (filter and sort in the URL).

import { app, executorsText, h, handlerOf, isPaused, jobTime, localTime, pauseText, stateBadge, statusBadge } from "./format.js";
import { banner, getJson, whoami } from "./api.js";
import { expressionsOf } from "./forms.js";
import { jobActions } from "./actions.js";

const FAILED = ["failed", "timed_out", "lost"];

/** How a last result sorts (`sort=last`): failures first, then other endings, running,
 * succeeded, none. */
const RESULT_RANK = { failed: 0, timed_out: 0, lost: 0, killed: 1, missed: 1, skipped: 1, running: 2, succeeded: 3 };

/** The sortable columns: [key in the URL, header, value to compare]. */
const SORTS = [
  ["name", "Job", (j) => j.name],
  ["state", "State", (j) => (isPaused(j) ? 1 : 0)],
  ["next", "Next run", (j) => ((j.next_runs || [])[0] ? Date.parse(j.next_runs[0]) : Infinity)],
  ["last", "Last result", (j) => { const l = (j.summary || {}).last_execution; return l ? RESULT_RANK[l.status] ?? 1 : 4; }],
];

/** `jobs` sorted by `sort` (`next`, or `-next` for descending), ties by name. */
function sorted(jobs, sort) {
  const desc = sort.startsWith("-");
  const column = SORTS.find(([key]) => key === sort.replace(/^-/, ""));
  if (!column) return jobs;
  const value = column[2];
  const cmp = (a, b) => {
    const [x, y] = [value(a), value(b)];
    const by = typeof x === "string" ? x.localeCompare(y) : x === y ? 0 : x < y ? -1 : 1;
    return (desc ? -by : by) || a.name.localeCompare(b.name);
  };
  return [...jobs].sort(cmp);
}

/** Whether job `j` passes the filter text `q` (name, labels, description) and `state`. */
function matches(j, q, state) {
  const spec = j.spec || {};
  const last = j.summary && j.summary.last_execution;
  if (state === "enabled" && isPaused(j)) return false;
  if (state === "paused" && !isPaused(j)) return false;
  if (state === "failing" && !(last && FAILED.includes(last.status))) return false;
  if (!q) return true;
  const labels = Object.entries(spec.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  return `${j.name} ${labels} ${spec.description || ""}`.toLowerCase().includes(q.toLowerCase());
}

/** A cell's line that never wraps: cut with an ellipsis, the whole text in its title. */
const line = (attrs, ...children) => h("div", { ...attrs, class: `one-line ${attrs.class || ""}`.trim() }, ...children);

/** One job's row: two lines at most in every cell. */
function jobRow(j, { workers, records, running }) {
  const spec = j.spec || {};
  const summary = j.summary || {};
  const last = summary.last_execution;
  const next = (j.next_runs || [])[0];
  const zone = spec.timezone || "UTC";
  const expressions = expressionsOf(spec).join("; ");
  const labels = Object.entries(spec.labels || {});
  const pause = isPaused(j) ? pauseText(j) : "";
  return h("tr", { "data-job": j.name },
    h("td", { "data-label": "Job" },
      line({ class: "name-line" }, h("a", { href: `#/job/${encodeURIComponent(j.name)}` }, h("strong", {}, j.name)),
        labels.map(([k, v]) => h("span", { class: "chip", title: `label ${k}=${v}` }, `${k}=${v}`))),
      spec.description ? line({ class: "muted small description", title: spec.description }, spec.description) : "",
      j.invalid ? line({ class: "warn small", title: j.invalid }, `invalid spec: ${j.invalid}`) : ""),
    h("td", { "data-label": "Team" }, spec.team ? h("a", { href: `#/jobs?team=${encodeURIComponent(spec.team)}` }, spec.team) : h("span", { class: "muted" }, "—")),
    h("td", { "data-label": "State" }, stateBadge(j), pause ? line({ class: "muted small", title: pause }, pause) : ""),
    h("td", { "data-label": "Schedule" },
      line({ class: "schedule-words", title: `${j.schedule_description || ""} (${expressions})` }, j.schedule_description || expressions),
      line({ class: "muted small", title: expressions }, h("code", {}, expressions))),
    h("td", { "data-label": "Next run" }, next
      ? [line({ title: `${jobTime(next)} (${zone})` }, jobTime(next).replace(/(\d\d:\d\d):00 /, "$1 ")), line({ class: "muted small" }, `${localTime(next)} local`)]
      : h("span", { class: "muted" }, "—")),
    h("td", { "data-label": "Last result" }, last
      ? [line({}, h("a", { href: `#/execution/${encodeURIComponent(last.id)}` }, statusBadge(last.status))),
        summary.total_24h ? line({ class: "muted small", title: `last 24 h: ${summary.succeeded_24h} succeeded, ${summary.failed_24h} failed of ${summary.total_24h}` },
          `${summary.succeeded_24h}/${summary.total_24h} ok in 24 h${summary.failed_24h ? `, ${summary.failed_24h} failed` : ""}`) : ""]
      : h("span", { class: "muted" }, records === false ? "unavailable" : "none yet")),
    h("td", { "data-label": "Workers" }, handlerOf(j)
      ? [line({ class: "muted small handler" }, "handler ", h("code", {}, handlerOf(j))), line({ class: "small" }, executorsText(j, workers))]
      : j.eligible_workers === 0 ? line({ class: "warn small", title: "no live worker matches" }, "no live worker matches") : String(j.eligible_workers ?? "")),
    h("td", { "data-label": "Actions", class: "actions" }, jobActions(j, { running })));
}

/** The column headers; a sortable one is a button that sorts by it (again: the other way). */
function headerRow(sort, onSort) {
  const th = (key, title) => {
    if (!key) return h("th", { scope: "col" }, title);
    const dir = sort === key ? "ascending" : sort === `-${key}` ? "descending" : null;
    const b = h("button", { type: "button", class: "sort", "data-sort": key }, title, h("span", { "aria-hidden": "true" }, dir === "ascending" ? " ▲" : dir === "descending" ? " ▼" : ""));
    b.addEventListener("click", () => onSort(sort === key ? `-${key}` : key));
    return h("th", { scope: "col", "aria-sort": dir || "none", class: `col-${key}` }, b);
  };
  const by = Object.fromEntries(SORTS.map(([key, title]) => [title, key]));
  return h("tr", {}, ["Job", "Team", "State", "Schedule", "Next run", "Last result", "Workers", "Actions"]
    .map((t) => t === "Actions" ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, t)) : th(by[t], t)));
}

/** The jobs list: name (labels, description), team, state, schedule in words, next run, last
 * result, workers, one actions menu per row. The master lists only the jobs of the token's
 * teams (every job for a global role). A handler job (run by executors, the applications that
 * embed etcron-sdk) shows its handler and which live executors have it (the live workers also
 * say what runs now: Kill is offered only then). Typing filters at once; the filter and the
 * sort go into the URL without reloading the page. */
export async function jobsView(params) {
  const view = { q: params.get("q") || "", state: params.get("state") || "", sort: params.get("sort") || "name" };
  const team = params.get("team") || "";
  const [data, me] = await Promise.all([getJson(team ? `/api/jobs?team=${encodeURIComponent(team)}` : "/api/jobs"), whoami()]);
  // The live workers: who may run a handler job, and what runs now (Kill is offered only then).
  const workers = await getJson("/api/workers").then((w) => w.workers, () => null);
  const runningOf = (name) => workers ? workers.flatMap((w) => w.running_executions || []).filter((r) => r.job === name).length : undefined;
  const records = data.records && data.records.available === false ? false : undefined;
  const search = h("input", { type: "search", placeholder: "Filter by name, label or description (press /)", "aria-label": "Filter jobs", value: view.q, "data-shortcut": "/" });
  const select = h("select", { "aria-label": "Job state" },
    [["", "Any state"], ["enabled", "Enabled"], ["paused", "Paused"], ["failing", "Last run failed"]]
      .map(([v, t]) => h("option", { value: v, selected: v === view.state }, t)));
  // The teams to choose from: the token's, and those of the jobs it sees (a global role).
  const teams = [...new Set([...Object.keys(me.teams || {}), ...data.jobs.map((j) => (j.spec || {}).team).filter(Boolean), team].filter(Boolean))].sort();
  const teamSelect = h("select", { "aria-label": "Team", name: "team" },
    [["", "Any team"], ...teams.map((t) => [t, t])].map(([v, t]) => h("option", { value: v, selected: v === team }, t)));
  const count = h("span", { class: "muted count", role: "status" });
  const query = () => {
    const q = new URLSearchParams();
    if (view.q) q.set("q", view.q);
    if (view.state) q.set("state", view.state);
    if (team) q.set("team", team);
    if (view.sort !== "name") q.set("sort", view.sort);
    return `#/jobs?${q}`;
  };
  const body = h("tbody", {});
  const head = h("thead", {});
  const empty = h("div", { class: "empty", hidden: true });
  const render = () => {
    const shown = sorted(data.jobs.filter((j) => matches(j, view.q, view.state)), view.sort);
    body.replaceChildren(...shown.map((j) => jobRow(j, { workers, records, running: runningOf(j.name) })));
    head.replaceChildren(headerRow(view.sort, (sort) => { view.sort = sort; update(); }));
    count.textContent = shown.length === data.jobs.length ? `${shown.length} job${shown.length === 1 ? "" : "s"}` : `${shown.length} of ${data.jobs.length} jobs`;
    empty.hidden = shown.length > 0;
    table.hidden = shown.length === 0;
  };
  // The URL follows (replaced, not pushed: no reload, the focus stays where it is).
  const update = () => {
    history.replaceState(null, "", query());
    render();
  };
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { view.q = search.value.trim(); update(); }, 150);
  });
  search.addEventListener("change", () => { clearTimeout(typing); view.q = search.value.trim(); update(); });
  select.addEventListener("change", () => { view.state = select.value; update(); });
  // Another team is another list from the master.
  teamSelect.addEventListener("change", () => {
    const q = new URLSearchParams(query().replace(/^#\/jobs\?/, ""));
    if (teamSelect.value) q.set("team", teamSelect.value); else q.delete("team");
    location.hash = `#/jobs?${q}`;
  });
  const table = h("table", { class: "jobs", id: "jobs-table" },
    h("colgroup", {}, ["job", "team", "state", "schedule", "next", "last", "workers", "actions"].map((c) => h("col", { class: `c-${c}` }))),
    head, body);
  const root = app();
  root.replaceChildren(
    h("div", { class: "heading" }, h("h1", {}, "Jobs"), h("a", { class: "button primary", href: "#/new" }, "New job")),
    h("div", { class: "toolbar" }, search, select, teamSelect, count));
  if (records === false) {
    banner("Execution records are unavailable (the master cannot reach MongoDB): last results are not shown.", "warn");
  }
  if (data.jobs.length === 0) {
    root.append(h("div", { class: "empty" }, "No jobs yet. ", h("a", { href: "#/new" }, "Create one"), " here, with etcronctl, or with PUT /api/jobs/{name}."));
    return;
  }
  empty.textContent = "No job matches the filter.";
  root.append(table, empty);
  render();
}
