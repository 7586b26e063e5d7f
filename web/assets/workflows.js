// #/workflows/RUN: one workflow run as a graph (SVG): its jobs in layers (the longest path from
// the root), the edges between them (after, on_success, on_failure), each job coloured by its
// state in the run and linked to its step's execution; the steps as a table with their
// results; Resume (its failed steps rerun) when the run failed.

import { app, h, localTime, svg } from "./format.js";
import { api, banner, getJson } from "./api.js";
import { autoRefresh, route } from "./nav.js";
import { button } from "./controls.js";

const runPath = (run) => `/api/workflows/${encodeURIComponent(run)}`;
const executionHref = (id) => `#/execution/${encodeURIComponent(id)}`;

const NODE_W = 168, NODE_H = 46, GAP_X = 64, GAP_Y = 20, PAD = 8;

/** Each job's layer: the longest path to it from the roots (the root job, or the jobs no edge
 * leads to when the root is not shown); a job on a cycle stays where it was first put. */
export function layers(steps, edges, rootJob) {
  const jobs = steps.map((s) => s.job);
  const into = new Set(edges.map((e) => e.to));
  const depth = new Map(jobs.filter((j) => j === rootJob || (!jobs.includes(rootJob) && !into.has(j))).map((j) => [j, 0]));
  for (let round = 0; round < jobs.length; round++) {
    let changed = false;
    for (const e of edges) {
      if (!depth.has(e.from) || e.to === rootJob) continue;
      const d = depth.get(e.from) + 1;
      if (!depth.has(e.to) || depth.get(e.to) < d) { depth.set(e.to, d); changed = true; }
    }
    if (!changed) break;
  }
  const last = Math.max(0, ...depth.values());
  for (const j of jobs) if (!depth.has(j)) depth.set(j, last + 1);
  return depth;
}

/** The run's graph: a node per step (a link to its execution when it has one), an arrow per edge. */
function graph(wf) {
  const depth = layers(wf.steps, wf.edges, wf.root_job);
  const columns = [];
  for (const s of wf.steps) (columns[depth.get(s.job)] ||= []).push(s);
  const at = new Map();
  columns.forEach((col, x) => (col || []).forEach((s, y) => at.set(s.job, { x: PAD + x * (NODE_W + GAP_X), y: PAD + y * (NODE_H + GAP_Y) })));
  const width = PAD * 2 + columns.length * NODE_W + Math.max(0, columns.length - 1) * GAP_X;
  const height = PAD * 2 + Math.max(1, ...columns.map((c) => (c || []).length)) * (NODE_H + GAP_Y) - GAP_Y;
  const arrow = svg("marker", { id: "wf-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "wf-arrow" }));
  const lines = wf.edges.filter((e) => at.has(e.from) && at.has(e.to)).map((e) => {
    const a = at.get(e.from), b = at.get(e.to);
    return svg("line", { x1: a.x + NODE_W, y1: a.y + NODE_H / 2, x2: b.x, y2: b.y + NODE_H / 2, class: `wf-edge wf-${e.kind}`, "marker-end": "url(#wf-arrow)", "data-edge": `${e.from}>${e.to}`, "data-kind": e.kind },
      svg("title", {}, `${e.from} → ${e.to} (${e.kind})`));
  });
  const nodes = wf.steps.map((s) => {
    const { x, y } = at.get(s.job);
    const label = s.execution_id ? `${s.state}, attempt ${s.attempt}` : s.state.replace("_", " ");
    const body = svg("g", { class: `wf-node wf-${s.state}`, "data-job": s.job, "data-state": s.state },
      svg("title", {}, `${s.job}: ${s.state}${s.execution_id ? ` (${s.execution_id})` : ""}`),
      svg("rect", { x, y, width: NODE_W, height: NODE_H, rx: 6 }),
      svg("text", { x: x + 10, y: y + 19, class: "wf-job" }, s.job.length > 22 ? `${s.job.slice(0, 21)}…` : s.job),
      svg("text", { x: x + 10, y: y + 36, class: "wf-state" }, label));
    return s.execution_id ? svg("a", { href: executionHref(s.execution_id), "aria-label": `${s.job}: ${s.state}` }, body) : body;
  });
  return svg("svg", { id: "workflow-graph", class: "workflow", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `The run's ${wf.steps.length} jobs and ${wf.edges.length} edges` },
    svg("defs", {}, arrow), ...lines, ...nodes);
}

/** The steps as a table: state, attempt, execution, when it ended, its result. */
function stepsTable(wf) {
  return h("table", { id: "workflow-steps" },
    h("thead", {}, h("tr", {}, ["Job", "State", "Attempt", "Execution", "Ended", "Result"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, wf.steps.map((s) => h("tr", { "data-job": s.job },
      h("td", { "data-label": "Job" }, h("a", { href: `#/job/${encodeURIComponent(s.job)}` }, s.job)),
      h("td", { "data-label": "State" }, h("span", { class: `status-${s.state}` }, s.state)),
      h("td", { "data-label": "Attempt" }, s.attempt == null ? "" : String(s.attempt)),
      h("td", { "data-label": "Execution" }, s.execution_id ? h("a", { href: executionHref(s.execution_id) }, s.execution_id) : ""),
      h("td", { "data-label": "Ended" }, s.at ? localTime(s.at) : ""),
      h("td", { "data-label": "Result" }, s.result == null ? "" : h("code", {}, JSON.stringify(s.result)))))));
}

/** Resume: the run's failed steps run again (their next attempt); says which, over the page
 * rendered again (quietly, so the message stays). */
const resumeButton = (run) => button("Resume", async () => {
  const { body } = await api(`${runPath(run)}/resume`, { method: "POST" });
  banner(`Resumed: ${body.rerun.map((r) => `${r.job} (${r.execution_id})`).join(", ")} requested.`, "warn");
  await route({ quiet: true });
  return false;
}, { id: "resume-workflow", class: "primary" });

export async function workflowsView(params, rest) {
  const run = decodeURIComponent(rest);
  let wf;
  try {
    wf = await getJson(runPath(run));
  } catch (e) {
    if (e.status !== 404) throw e;
    app().replaceChildren(h("h1", { class: "id" }, `Workflow run ${run}`), h("p", { class: "muted", id: "no-run" }, e.message));
    return;
  }
  app().replaceChildren(
    h("h1", { class: "id" }, `Workflow run ${wf.run}`),
    h("p", {}, h("span", { class: `status-${wf.state} big`, id: "workflow-state" }, wf.state), " ",
      wf.root ? h("span", { class: "muted" }, "started by ", h("a", { href: executionHref(wf.root) }, wf.root)) : ""),
    wf.state === "failed" ? h("div", { class: "toolbar" }, resumeButton(wf.run),
      h("span", { class: "muted" }, "runs the failed steps again; the steps that succeeded keep their results")) : "",
    h("div", { class: "workflow-scroll" }, graph(wf)),
    h("p", { class: "small muted wf-legend" }, "Edges: ", h("span", { class: "wf-key wf-after" }, "after"), " ",
      h("span", { class: "wf-key wf-on_success" }, "on_success"), " ", h("span", { class: "wf-key wf-on_failure" }, "on_failure"),
      ". A job without a step is pending (about to run), waiting (for a parent) or not reached (it will not run unless resumed)."),
    h("h2", {}, "Steps"), stepsTable(wf));
  if (wf.state === "running") autoRefresh(5000);
}
