// #/jobs: the jobs the token sees, a page at a time (GET /api/jobs?limit=100), one compact row
// each: filtered on the master by name prefix or label (typed in the box), state, health and
// team; Next/Previous by cursor; a column sorts the rows of the page shown. Filters, sort and
// cursor are in the URL.

import { app, executorsText, h, handlerOf, isPaused, jobTime, localTime, pauseText, stateBadge, statusBadge } from "./format.js";
import { banner, getJson, whoami } from "./api.js";
import { expressionsOf } from "./forms.js";
import { jobActions } from "./actions.js";

/** Jobs a page asks the master for. */
const PAGE = 100;

/** Typing waits this long (ms) for the next key before asking the master. */
const DEBOUNCE_MS = 250;

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

/** The master's filters of the box's text: `key=value` is a label, anything else the start of
 * job names (lowercase, as names are). */
function textFilter(q) {
  if (!q) return {};
  const eq = q.indexOf("=");
  return eq > 0 ? { label: q } : { prefix: q.toLowerCase() };
}

/** A cell's line that never wraps: cut with an ellipsis, the whole text in its title. */
const line = (attrs, ...children) => h("div", { ...attrs, class: `one-line ${attrs.class || ""}`.trim() }, ...children);

/** A label's chip: a click (or Enter) lists the jobs with that label. */
function labelChip(label, onLabel) {
  const chip = h("span", { class: "chip", title: `label ${label}: list the jobs with it`, role: "button", tabindex: "0" }, label);
  chip.addEventListener("click", () => onLabel(label));
  chip.addEventListener("keydown", (ev) => { if (ev.key === "Enter") onLabel(label); });
  return chip;
}

/** One job's row: two lines at most in every cell. */
function jobRow(j, { workers, records, running, onLabel }) {
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
        labels.map(([k, v]) => labelChip(`${k}=${v}`, onLabel))),
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

/** The jobs list, a page at a time: name (labels, description), team, state, schedule in words,
 * next run, last result, workers, one actions menu per row. The master lists only the jobs of
 * the token's teams (every job for a global role) and filters them: the box's text as the start
 * of names or a `key=value` label, the state, the health of the last 24 h, the team. A handler
 * job shows its handler and which live executors have it (the live workers also say what runs
 * now: Kill is offered only then). Typing asks the master once it pauses (DEBOUNCE_MS); an
 * answer to an older request than the latest is dropped. The filters, sort and cursor go into
 * the URL without reloading the page; the cursors of the pages before are kept in the history
 * entry's state (Previous after a reload), a bookmark's Previous goes to the first page. */
export async function jobsView(params) {
  const view = {
    q: params.get("q") || "", state: params.get("state") || "", health: params.get("health") || "",
    team: params.get("team") || "", sort: params.get("sort") || "name", cursor: params.get("cursor") || "",
  };
  // An older link's "failing" state is the health filter now.
  if (view.state === "failing") [view.state, view.health] = ["", "failing"];
  const back = [...((history.state && history.state.jobsBack) || [])];
  const me = await whoami();
  // The live workers: who may run a handler job, and what runs now (Kill is offered only then).
  const workers = await getJson("/api/workers").then((w) => w.workers, () => null);
  const runningOf = (name) => workers ? workers.flatMap((w) => w.running_executions || []).filter((r) => r.job === name).length : undefined;
  const search = h("input", { type: "search", class: "job-filter", placeholder: "Name prefix, or label key=value (press /)", "aria-label": "Filter jobs", value: view.q, "data-shortcut": "/" });
  const choice = (label, name, options, current) => h("select", { "aria-label": label, name },
    options.map(([v, t]) => h("option", { value: v, selected: v === current }, t)));
  const select = choice("Job state", "state", [["", "Any state"], ["enabled", "Enabled"], ["paused", "Paused"], ["invalid", "Invalid spec"]], view.state);
  const healthSelect = choice("Health", "health", [["", "Any health"], ["failing", "Last run failed"], ["ok", "Last run succeeded"], ["never", "No run in 24 h"]], view.health);
  // The teams to choose from: the token's, and the one asked for.
  const teams = [...new Set([...Object.keys(me.teams || {}), view.team].filter(Boolean))].sort();
  const teamSelect = choice("Team", "team", [["", "Any team"], ...teams.map((t) => [t, t])], view.team);
  const count = h("span", { class: "muted count", role: "status" });
  const hashOf = () => {
    const q = new URLSearchParams();
    for (const key of ["q", "state", "health", "team"]) if (view[key]) q.set(key, view[key]);
    if (view.sort !== "name") q.set("sort", view.sort);
    if (view.cursor) q.set("cursor", view.cursor);
    const query = q.toString();
    return query ? `#/jobs?${query}` : "#/jobs";
  };
  const apiQuery = () => {
    const q = new URLSearchParams({ limit: String(PAGE), ...textFilter(view.q) });
    for (const key of ["state", "health", "team", "cursor"]) if (view[key]) q.set(key, view[key]);
    return q;
  };
  const body = h("tbody", {});
  const head = h("thead", {});
  const empty = h("div", { class: "empty", hidden: true });
  const problem = h("p", { class: "field-error", role: "alert", hidden: true });
  const scan = h("p", { class: "partial", role: "status", hidden: true });
  const pager = h("p", { class: "pager" });
  const previous = h("button", { type: "button", rel: "prev" }, "← Previous");
  const next = h("button", { type: "button", rel: "next" }, "Next →");
  pager.append(previous, " ", next);
  const table = h("table", { class: "jobs", id: "jobs-table" },
    h("colgroup", {}, ["job", "team", "state", "schedule", "next", "last", "workers", "actions"].map((c) => h("col", { class: `c-${c}` }))),
    head, body);
  let data = null;
  const render = () => {
    const records = data.records && data.records.available === false ? false : undefined;
    const shown = sorted(data.jobs, view.sort);
    const onLabel = (label) => { search.value = label; filter({ q: label }); };
    body.replaceChildren(...shown.map((j) => jobRow(j, { workers, records, running: runningOf(j.name), onLabel })));
    head.replaceChildren(headerRow(view.sort, (sort) => { view.sort = sort; history.replaceState({ jobsBack: back }, "", hashOf()); render(); }));
    const paged = Boolean(view.cursor || data.next_cursor);
    const n = `${shown.length} job${shown.length === 1 ? "" : "s"}`;
    count.textContent = paged ? `${n} on ${view.cursor && !back.length ? "this page" : `page ${back.length + 1}`}${view.sort.replace(/^-/, "") !== "name" ? " (sorted within the page)" : ""}` : n;
    const filtered = view.q || view.state || view.health || view.team || view.cursor;
    empty.replaceChildren(...(filtered ? [data.partial ? "No match among the jobs scanned." : "No job matches the filter."]
      : ["No jobs yet. ", h("a", { href: "#/new" }, "Create one"), " here, with etcronctl, or with PUT /api/jobs/{name}."]));
    empty.hidden = shown.length > 0;
    table.hidden = shown.length === 0;
    scan.hidden = !data.partial;
    scan.textContent = data.partial ? `The master stopped scanning after 10 000 jobs before it filled the page (${n} found so far). Continue to scan the jobs after ${data.next_cursor}.` : "";
    next.textContent = data.partial ? "Continue scanning →" : "Next →";
    next.disabled = !data.next_cursor;
    previous.disabled = !view.cursor;
    pager.hidden = !paged;
    if (records === false) banner("Execution records are unavailable (the master cannot reach MongoDB): last results are not shown.", "warn");
  };
  // Each request has its number: an answer to any but the latest is dropped.
  // A refused filter (400) and a health filter without MongoDB are said above the list; any
  // other failure of the first request is the route's (its banner and retry), of a later one
  // the banner's.
  let asked = 0;
  const load = async ({ first = false } = {}) => {
    const mine = ++asked;
    history.replaceState({ jobsBack: back }, "", hashOf());
    try {
      const answer = await getJson(`/api/jobs?${apiQuery()}`);
      if (mine !== asked) return;
      data = answer;
      problem.hidden = true;
      render();
    } catch (e) {
      if (mine !== asked) return;
      if (e.status !== 400 && e.code !== "mongodb_unavailable") {
        if (first) throw e;
        return banner(e.message);
      }
      problem.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
      problem.hidden = false;
      data = { jobs: [], records: {}, next_cursor: null, partial: false };
      render();
      empty.hidden = true;
    }
  };
  // A filter changed: its first page.
  const filter = (change) => {
    Object.assign(view, change, { cursor: "" });
    back.length = 0;
    return load();
  };
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => filter({ q: search.value.trim() }), DEBOUNCE_MS);
  });
  search.addEventListener("change", () => {
    clearTimeout(typing);
    if (search.value.trim() !== view.q) filter({ q: search.value.trim() });
  });
  select.addEventListener("change", () => filter({ state: select.value }));
  healthSelect.addEventListener("change", () => filter({ health: healthSelect.value }));
  teamSelect.addEventListener("change", () => filter({ team: teamSelect.value }));
  next.addEventListener("click", () => {
    back.push(view.cursor);
    view.cursor = data.next_cursor;
    load();
  });
  previous.addEventListener("click", () => {
    view.cursor = back.pop() || "";
    load();
  });
  const root = app();
  root.replaceChildren(
    h("div", { class: "heading" }, h("h1", {}, "Jobs"), h("a", { class: "button primary", href: "#/new" }, "New job")),
    h("div", { class: "toolbar" }, search, select, healthSelect, teamSelect, count),
    problem, table, empty, scan, pager);
  await load({ first: true });
}
