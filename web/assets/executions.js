// #/executions: the search over execution records (filters in the URL, cursor pages,
// auto-refresh, the output line a text search matched), and the executions table the job page
// and the workers page show too.

import { STATUSES, app, duration, h, localTime, statusBadge } from "./format.js";
import { getJson } from "./api.js";
import { autoRefresh, route } from "./nav.js";

const FILTERS = ["job", "team", "status", "trigger", "worker", "since", "until", "q"];
const TRIGGERS = ["schedule", "manual", "retry", "dependency", "catchup", "failover", "backfill"];

/** `line` with every whole-word occurrence of the words of `q` (any case) marked. */
export function highlighted(line, q) {
  const words = (q || "").split(/[^\p{L}\p{N}_]+/u).filter((w) => w.length >= 2).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  if (!words.length) return [line];
  const re = new RegExp(`(?<![\\p{L}\\p{N}_])(${words.join("|")})(?![\\p{L}\\p{N}_])`, "giu");
  const parts = [];
  let at = 0;
  for (const m of line.matchAll(re)) {
    parts.push(line.slice(at, m.index), h("mark", {}, m[0]));
    at = m.index + m[0].length;
  }
  parts.push(line.slice(at));
  return parts;
}

/** The executions table: id, job (`withJob`), status, trigger, times, worker; under a record a
 * text search matched, the output line that matched (`q`'s words marked). */
export function executionsTable(executions, { withJob = false, q = "" } = {}) {
  const heads = ["Execution", ...(withJob ? ["Job"] : []), "Status", "Trigger", "Scheduled", "Duration", "Worker"];
  return h("table", {},
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, executions.flatMap((r) => [h("tr", { "data-id": r.id, class: r.output_match ? "matched" : null },
      h("td", { "data-label": "Execution" }, h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id)),
      withJob ? h("td", { "data-label": "Job" }, h("a", { href: `#/job/${encodeURIComponent(r.job)}` }, r.job)) : "",
      h("td", { "data-label": "Status" }, statusBadge(r.status), r.reason ? h("div", { class: "muted small" }, r.reason) : ""),
      h("td", { "data-label": "Trigger" }, r.trigger),
      h("td", { "data-label": "Scheduled" }, localTime(r.scheduled_at)),
      h("td", { "data-label": "Duration" }, duration(r.duration_ms)),
      h("td", { "data-label": "Worker" }, r.worker_id ? h("a", { href: `#/executions?worker=${encodeURIComponent(r.worker_id)}` }, r.worker_id) : "")),
    r.output_match ? h("tr", { class: "output-match", "data-match-of": r.id },
      h("td", { colspan: String(heads.length) }, h("code", { class: "match-line", title: "the output line that matched" }, highlighted(r.output_match, q)))) : ""])));
}

/** Job names a suggestion list offers; typing waits this long (ms) before asking the master. */
const SUGGESTIONS = 20;
const SUGGEST_MS = 250;

/** The job filter: a text input whose suggestions are the first SUGGESTIONS job names starting
 * with what is typed (GET /api/jobs?prefix=…&limit=…, once typing pauses; an answer to an older
 * request than the latest is dropped). Never the list of every job: there may be a million. */
function jobInput(value) {
  const list = h("datalist", { id: "job-suggestions" });
  const input = h("input", { name: "job", list: "job-suggestions", value, size: 16, autocomplete: "off", placeholder: "any job", "aria-label": "Job" });
  let [typing, asked] = [null, 0];
  const suggest = async () => {
    const prefix = input.value.trim().toLowerCase();
    if (!/^[a-z0-9._-]*$/.test(prefix)) return list.replaceChildren();
    const mine = ++asked;
    const names = await getJson(`/api/jobs?${new URLSearchParams({ limit: String(SUGGESTIONS), prefix })}`)
      .then((d) => d.jobs.map((j) => j.name), () => []);
    if (mine === asked) list.replaceChildren(...names.map((n) => h("option", { value: n })));
  };
  input.addEventListener("input", (ev) => {
    clearTimeout(typing);
    // A suggestion picked searches at once (the browser fills it in without a key).
    if (!(ev instanceof InputEvent) || ev.inputType === "insertReplacementText") {
      input.form.requestSubmit();
      return;
    }
    typing = setTimeout(suggest, SUGGEST_MS);
  });
  input.addEventListener("focus", () => { if (!list.children.length) suggest(); }, { once: true });
  return [input, list];
}

/** A Date as a datetime-local input's value (local time, to the minute); "" for none. */
function localValue(rfc3339) {
  const d = new Date(rfc3339 || "");
  if (!rfc3339 || isNaN(d)) return "";
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** The search form: the job as text with suggestions, selects for status and trigger, text for
 * team, worker and words, the
 * time range as local date-times (sent as the API's `since`/`until` in UTC). */
function searchForm(params) {
  const option = (value, text, current) => h("option", { value, selected: value === current }, text);
  const choose = (name, label, options) => h("select", { name, "aria-label": label }, options);
  const job = params.get("job") || "";
  const status = params.get("status") || "";
  const trigger = params.get("trigger") || "";
  const statusOptions = [["", "Any status"], ["failed,timed_out,lost", "failed, timed out or lost"], ...STATUSES.map((s) => [s, s])];
  if (status && !statusOptions.some(([v]) => v === status)) statusOptions.push([status, status]);
  const field = (label, control) => h("label", {}, h("span", { class: "muted" }, `${label} `), control);
  const text = (name, attrs) => h("input", { name, value: params.get(name) || "", ...attrs });
  return h("form", { class: "toolbar", role: "search" },
    field("job", jobInput(job)),
    field("status", choose("status", "Status", statusOptions.map(([v, t]) => option(v, t, status)))),
    field("trigger", choose("trigger", "Trigger", [option("", "Any trigger", trigger), ...TRIGGERS.map((t) => option(t, t, trigger))])),
    field("from", h("input", { type: "datetime-local", name: "since", "aria-label": "Scheduled from (local time)", value: localValue(params.get("since")) })),
    field("to", h("input", { type: "datetime-local", name: "until", "aria-label": "Scheduled until (local time)", value: localValue(params.get("until")) })),
    field("team", text("team", { size: 8 })),
    field("worker", text("worker", { size: 8 })),
    field("text", text("q", { size: 18, "data-shortcut": "/", placeholder: "words in output", "aria-label": "Text search" })),
    h("button", { type: "submit" }, "Search"));
}

/** The form's filters as the URL's query (the times as RFC 3339 in UTC). */
function queryOf(form) {
  const q = new URLSearchParams();
  for (const f of FILTERS) {
    let v = form.elements[f].value.trim();
    if (v && (f === "since" || f === "until")) {
      const d = new Date(v);
      // `until` from a minute's input means the end of that minute.
      v = isNaN(d) ? v : new Date(d.getTime() + (f === "until" ? 59_999 : 0)).toISOString();
    }
    if (v) q.set(f, v);
  }
  return q;
}

/** Execution search: every filter of GET /api/executions, kept in the URL; cursor pages. */
export async function executionsView(params) {
  const query = new URLSearchParams();
  for (const f of [...FILTERS, "cursor"]) if (params.get(f)) query.set(f, params.get(f));
  const live = sessionStorage.getItem("etcron-live") !== "off";
  const form = searchForm(params);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/executions?${queryOf(form)}`;
  });
  // A choice in a list searches at once.
  for (const name of ["status", "trigger"]) form.elements[name].addEventListener("change", () => form.requestSubmit());
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
    root.append(executionsTable(data.executions, { withJob: true, q: params.get("q") || "" }));
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
