// #/overview: executions per minute by status, totals, recent failures and missed ticks.

import { STATUSES, app, h, localTime, statusBadge } from "./format.js";
import { getJson } from "./api.js";
import { autoRefresh } from "./nav.js";
import { activityChart } from "./charts.js";

/** Activity over the last hour or day, recent failures and missed ticks. */
export async function overviewView(params) {
  const window = params.get("window") === "24h" ? "24h" : "1h";
  const data = await getJson(`/api/overview?window=${window}`);
  const pick = (w, label) => h("a", { href: `#/overview?window=${w}`, class: "button", "aria-pressed": String(w === window) }, label);
  const totals = STATUSES.filter((s) => data.totals[s]).map((s) => h("li", { "data-status": s }, h("strong", { class: `status-${s}` }, String(data.totals[s])), ` ${s}`));
  const list = (records, empty, id) => records.length === 0
    ? h("p", { class: "muted", id }, empty)
    : h("ul", { class: "plain", id }, records.map((r) => h("li", {},
      h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id), " ", statusBadge(r.status), " ",
      h("span", { class: "muted" }, `${localTime(r.scheduled_at)}${r.error ? ` — ${r.error}` : ""}${r.reason ? ` — ${r.reason}` : ""}`))));
  app().replaceChildren(
    h("div", { class: "heading" }, h("h1", {}, "Overview"), h("div", { class: "toolbar" }, pick("1h", "Last hour"), pick("24h", "Last day"))),
    totals.length ? h("ul", { class: "totals", "aria-label": "Totals" }, totals) : h("div", { class: "empty" }, `No executions in the last ${window === "1h" ? "hour" : "day"}.`),
    activityChart(data),
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "Recent failures"), list(data.recent_failures, "No failures. ", "failures"),
        h("a", { href: `#/executions?status=failed,timed_out,lost&since=${encodeURIComponent(data.since)}` }, "All failures →")),
      h("section", {}, h("h2", {}, "Missed ticks"), list(data.recent_missed, "No missed ticks.", "missed"),
        h("a", { href: `#/executions?status=missed&since=${encodeURIComponent(data.since)}` }, "All missed ticks →"))));
  autoRefresh(15000);
}
