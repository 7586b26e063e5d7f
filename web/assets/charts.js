// The hand-drawn SVG charts, drawn at the page's width: executions per minute by status
// (overview) and the duration and outcome of a job's recent runs (job page).

import { STATUSES, app, clock, duration, h, localTime, svg } from "./format.js";

/** Charts are drawn at the page's width, so their text stays at its real size on a phone. */
const chartWidth = () => Math.max(320, Math.min(1248, (app().clientWidth || 960) - 32));

/** Executions per minute by status, stacked, one bar per bucket. */
export function activityChart(data) {
  const W = chartWidth(), H = 220, left = 44, bottom = 24, top = 10;
  const perMinute = data.bucket_ms / 60000;
  const buckets = data.buckets.map((b) => ({ ...b, rates: STATUSES.map((s) => (b.counts[s] || 0) / perMinute) }));
  const max = Math.max(1, ...buckets.map((b) => b.rates.reduce((a, x) => a + x, 0)));
  const bw = (W - left) / buckets.length;
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const total = buckets.reduce((a, b) => a + Object.values(b.counts).reduce((x, n) => x + n, 0), 0);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `Executions per minute by status, ${total} in the last ${data.window}` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("line", { x1: left, x2: W, y1: y(max), y2: y(max), class: "grid" }),
    svg("text", { x: left - 6, y: y(max) + 4, class: "tick", "text-anchor": "end" }, max >= 10 ? Math.round(max) : max.toFixed(1)),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
  buckets.forEach((b, i) => {
    let acc = 0;
    const parts = STATUSES.map((s, k) => {
      const v = b.rates[k];
      if (!v) return null;
      const rect = svg("rect", { x: left + i * bw + 0.5, width: Math.max(1, bw - 1), y: y(acc + v), height: y(acc) - y(acc + v), class: `bar s-${s}` });
      acc += v;
      return rect;
    }).filter(Boolean);
    const counts = Object.entries(b.counts).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
    chart.append(svg("g", { "data-start": b.start_ms }, svg("title", {}, `${clock(b.start_ms)}: ${counts}`), parts));
    if (i % Math.ceil(buckets.length / Math.max(2, Math.floor(W / 150))) === 0) {
      chart.append(svg("text", { x: left + i * bw, y: H - 6, class: "tick" }, clock(b.start_ms)));
    }
  });
  return h("figure", { class: "chart-box" }, chart, legend(STATUSES.filter((s) => buckets.some((b) => b.counts[s]))));
}

const legend = (statuses) => h("figcaption", { class: "legend" }, statuses.map((s) => h("span", { class: `key s-${s}` }, s)));

/** Duration of the job's recent executions (oldest left), colored by outcome. */
export function durationChart(executions) {
  const runs = [...executions].reverse();
  const W = chartWidth(), H = 180, left = 56, bottom = 22, top = 10;
  const max = Math.max(1, ...runs.map((r) => r.duration_ms || 0));
  const bw = (W - left) / Math.max(runs.length, 20);
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `Duration and outcome of the last ${runs.length} executions` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("line", { x1: left, x2: W, y1: y(max), y2: y(max), class: "grid" }),
    svg("text", { x: left - 6, y: y(max) + 4, class: "tick", "text-anchor": "end" }, duration(max)),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
  runs.forEach((r, i) => {
    const d = r.duration_ms || 0;
    // Runs without a duration (missed, skipped, running) show as a short mark on the axis.
    const height = Math.max(3, y(0) - y(d));
    const link = svg("a", { href: `#/execution/${encodeURIComponent(r.id)}` },
      svg("title", {}, `${r.id}: ${r.status}${r.duration_ms == null ? "" : `, ${duration(r.duration_ms)}`}`),
      svg("rect", { x: left + i * bw + 1, width: Math.max(2, bw - 2), y: y(0) - height, height, class: `bar s-${r.status}`, "data-status": r.status }));
    chart.append(link);
  });
  if (runs.length) {
    chart.append(svg("text", { x: left, y: H - 5, class: "tick" }, localTime(runs[0].scheduled_at)));
    const end = left + runs.length * bw;
    if (end - left > 360) {
      chart.append(svg("text", { x: end, y: H - 5, class: "tick", "text-anchor": "end" }, localTime(runs[runs.length - 1].scheduled_at)));
    }
  }
  return h("figure", { class: "chart-box", id: "duration-chart" }, chart, legend(STATUSES.filter((s) => runs.some((r) => r.status === s))));
}
