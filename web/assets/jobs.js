// #/jobs: every job the token sees, filtered by name/label, state and team (in the URL).

import { app, executorsText, h, handlerOf, isPaused, jobTime, localTime, pauseText, stateBadge, statusBadge } from "./format.js";
import { banner, getJson, whoami } from "./api.js";
import { expressionsOf } from "./forms.js";
import { jobActions } from "./actions.js";

/** The jobs list: name, team, state, schedule in words, next run, last result, recent outcomes.
 * The master lists only the jobs of the token's teams (every job for a global role). A handler
 * job (run by executors, the applications that embed etcron-sdk) shows its handler and which
 * live executors have it (the live workers also say what runs now: Kill is offered only then). */
export async function jobsView(params) {
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
  // The live workers: who may run a handler job, and what runs now (Kill is offered only then).
  const workers = await getJson("/api/workers").then((w) => w.workers, () => null);
  const runningOf = (name) => workers ? workers.flatMap((w) => w.running_executions || []).filter((r) => r.job === name).length : undefined;
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
        handlerOf(j) ? h("div", { class: "muted handler" }, "handler ", h("code", {}, handlerOf(j))) : "",
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
      h("td", { "data-label": "Workers" }, handlerOf(j) ? executorsText(j, workers)
        : j.eligible_workers === 0 ? h("span", { class: "warn" }, "no live worker matches") : String(j.eligible_workers ?? "")),
      h("td", { "data-label": "Actions", class: "actions" }, jobActions(j, { running: runningOf(j.name) })));
  });
  root.append(h("table", {},
    h("thead", {}, h("tr", {}, ["Job", "Team", "State", "Schedule", "Next run", "Last result", "Workers", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}
