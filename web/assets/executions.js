// #/executions: the search over execution records (filters in the URL, cursor pages,
// auto-refresh), and the executions table the job page shows too.

import { app, duration, h, localTime, statusBadge } from "./format.js";
import { getJson } from "./api.js";
import { autoRefresh, route } from "./nav.js";

const FILTERS = ["job", "team", "status", "trigger", "worker", "since", "until", "q"];

export function executionsTable(executions) {
  return h("table", {},
    h("thead", {}, h("tr", {}, ["Execution", "Status", "Trigger", "Scheduled", "Duration", "Worker"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, executions.map((r) => h("tr", { "data-id": r.id },
      h("td", { "data-label": "Execution" }, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)),
      h("td", { "data-label": "Status" }, statusBadge(r.status), r.reason ? h("div", { class: "muted small" }, r.reason) : ""),
      h("td", { "data-label": "Trigger" }, r.trigger),
      h("td", { "data-label": "Scheduled" }, localTime(r.scheduled_at)),
      h("td", { "data-label": "Duration" }, duration(r.duration_ms)),
      h("td", { "data-label": "Worker" }, r.worker_id || "")))));
}

/** Execution search: every filter of GET /api/executions, kept in the URL; cursor pages. */
export async function executionsView(params) {
  const query = new URLSearchParams();
  for (const f of [...FILTERS, "cursor"]) if (params.get(f)) query.set(f, params.get(f));
  const live = sessionStorage.getItem("etcron-live") !== "off";
  const form = h("form", { class: "toolbar", role: "search" },
    FILTERS.map((f) => h("label", {}, h("span", { class: "muted" }, `${f} `),
      h("input", { name: f, value: params.get(f) || "", size: f === "q" ? 20 : 12, "data-shortcut": f === "q" ? "/" : null,
        placeholder: f === "since" || f === "until" ? "2026-11-22T00:00:00Z" : f === "status" ? "failed,timed_out" : f === "q" ? "text in output" : "" }))),
    h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const f of FILTERS) { const v = form.elements[f].value.trim(); if (v) q.set(f, v); }
    location.hash = `#/executions?${q}`;
  });
  const liveButton = h("button", { type: "button", "aria-pressed": String(live), title: "Refresh the first page every 5 seconds" }, "Auto-refresh");
  liveButton.addEventListener("click", () => {
    sessionStorage.setItem("etcron-live", live ? "off" : "on");
    route();
  });
  const root = app();
  root.replaceChildren(h("div", { class: "heading" }, h("h1", {}, "Executions"), liveButton), form);
  let data;
  try {
    data = await getJson(`/api/executions?${query}`);
  } catch (e) {
    if (e.status === 400) {
      const input = e.field && form.elements[e.field];
      root.append(h("p", { class: "field-error", role: "alert" }, e.field ? `${e.field}: ${e.message}` : e.message));
      if (input) input.setAttribute("aria-invalid", "true");
      return;
    }
    throw e;
  }
  if (data.executions.length === 0) {
    const none = data.partial ? "No match among the records searched so far." : query.toString() ? "No execution matches these filters." : "No executions recorded yet.";
    root.append(h("div", { class: "empty" }, none));
  } else {
    root.append(executionsTable(data.executions));
  }
  if (data.partial) {
    root.append(h("p", { class: "partial", role: "status" }, "Words are matched on the records read, 1 000 a page: this page searched part of the history. Older records may match: search older below."));
  }
  const nav = h("p", { class: "pager" });
  if (params.get("cursor")) {
    const first = new URLSearchParams(params);
    first.delete("cursor");
    nav.append(h("a", { href: `#/executions?${first}` }, "← Newest"), " ");
  }
  if (data.next_cursor) {
    const next = new URLSearchParams(params);
    next.set("cursor", data.next_cursor);
    nav.append(h("a", { href: `#/executions?${next}`, rel: "next" }, data.partial ? "Search older →" : "Older executions →"));
  }
  root.append(nav);
  if (live && !params.get("cursor")) autoRefresh(5000);
}
