// #/pools: the resource pools with their slots in use and ticks waiting; #/pools/NAME: one pool,
// the runs holding its slots and its queue. A global admin adds, changes or deletes one.

import { app, duration, h, localTime, svg } from "./format.js";
import { api, banner, explain, getJson, whoami } from "./api.js";
import { autoRefresh, route } from "./nav.js";
import { clearFieldErrors, formField, input, showFieldError } from "./forms.js";

const poolPath = (name) => `/api/pools/${encodeURIComponent(name)}`;
const jobLink = (job) => h("a", { href: `#/job/${encodeURIComponent(job)}` }, job);
const since = (rfc3339) => h("span", { title: localTime(rfc3339) }, duration(Math.max(0, Date.now() - new Date(rfc3339))));

/** The slots in use of all as a bar (over when more are held than the pool has), and in words. */
function usage(p) {
  const of = Math.max(1, p.slots);
  const used = Math.min(p.in_use, of);
  const text = `${p.in_use} of ${p.slots} in use`;
  return h("div", { class: "pool-usage", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": String(p.slots), "aria-valuenow": String(p.in_use), "aria-valuetext": text },
    svg("svg", { viewBox: "0 0 100 6", preserveAspectRatio: "none", class: "progress", "aria-hidden": "true" },
      svg("rect", { x: 0, y: 0, width: 100, height: 6, class: "track" }),
      used ? svg("rect", { x: 0, y: 0, width: (used / of) * 100, height: 6, class: `bar ${p.in_use >= p.slots ? "s-failed" : "s-running"}` }) : ""),
    h("div", { class: "small muted" }, text));
}

/** A job's execution, linked; a job the token does not see, said so. */
const execution = (item) => item.execution_id
  ? [jobLink(item.job), h("div", { class: "small" }, h("a", { href: `#/execution/${encodeURIComponent(item.execution_id)}` }, item.execution_id))]
  : [h("span", { class: "muted" }, "a job you cannot see")];

/** The jobs the API names (the first, in name order), and how many more it counted. */
const jobsList = (jobs, total = jobs.length) => (jobs.length
  ? [...jobs.flatMap((j, i) => [i ? ", " : "", jobLink(j)]), total > jobs.length ? h("span", { class: "muted" }, ` and ${total - jobs.length} more`) : ""]
  : h("span", { class: "muted" }, "none"));

/** The form that saves a pool (a global admin's); `fill(p)` shows one to change. */
function poolForm(fixedName) {
  const f = {
    name: input({ required: true, pattern: "[a-z0-9][a-z0-9._-]{0,127}", placeholder: "reporting-db", disabled: Boolean(fixedName) }),
    slots: input({ inputmode: "numeric", required: true, placeholder: "4" }),
    description: input({ placeholder: "connections to the reporting database" }),
  };
  const form = h("form", { id: "pool-form", novalidate: true, "aria-label": "Pool" },
    h("fieldset", {}, h("legend", {}, fixedName ? "Change the pool" : "Add or replace a pool"),
      formField("name", "Name", f.name), formField("slots", "Slots", f.slots, "How many slots the pool's runs hold at most, together (1 to 10000)."),
      formField("description", "Description", f.description)),
    h("button", { type: "submit", class: "primary" }, "Save pool"));
  const fill = (p) => { f.name.value = p.name; f.slots.value = String(p.slots); f.description.value = p.description || ""; };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    const slots = f.slots.value.trim();
    const body = { slots: /^\d+$/.test(slots) ? Number(slots) : slots };
    if (f.description.value.trim()) body.description = f.description.value.trim();
    try {
      await api(poolPath(f.name.value.trim()), { method: "PUT", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
      route();
    } catch (e) {
      if (e.status === 400) showFieldError(form, e.field || "slots", e.message); else banner(explain(e));
    }
  });
  if (fixedName) f.name.value = fixedName;
  return { form, fill };
}

/** Delete (asks first; refused, naming the jobs, while jobs name the pool). */
function deleteButton(name, after) {
  const del = h("button", { type: "button", "aria-label": `Delete pool ${name}` }, "Delete");
  del.addEventListener("click", async () => {
    if (!confirm(`Delete pool ${name}?`)) return;
    try { await api(poolPath(name), { method: "DELETE" }); after(); } catch (e) { banner(e.message); }
  });
  return del;
}

/** Every pool: slots, in use, waiting, the jobs naming it; a global admin's form. */
async function listView() {
  const [data, me] = await Promise.all([getJson("/api/pools"), whoami().catch(() => ({}))]);
  const admin = me.role === "admin";
  const root = app();
  root.replaceChildren(h("h1", {}, "Pools"),
    h("p", { class: "muted" }, "A run of a job naming a pool holds its pool_slots from its claim to its close; across the cluster a pool's runs never hold more than its slots. A tick that finds the pool full waits in its queue (priority, then scheduled time) until its start deadline."));
  const { form, fill } = poolForm(null);
  if (data.pools.length === 0) root.append(h("div", { class: "empty" }, "No pool yet."));
  else root.append(h("table", { id: "pools" },
    h("thead", {}, h("tr", {}, ["Pool", "Slots", "In use", "Waiting", "Jobs", ...(admin ? [""] : [])].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, data.pools.map((p) => {
      const edit = h("button", { type: "button", "aria-label": `Edit pool ${p.name}` }, "Edit");
      edit.addEventListener("click", () => fill(p));
      return h("tr", { "data-pool": p.name },
        h("td", { "data-label": "Pool" }, h("a", { href: `#/pools/${encodeURIComponent(p.name)}` }, h("strong", {}, p.name)), p.description ? h("div", { class: "muted" }, p.description) : ""),
        h("td", { "data-label": "Slots" }, String(p.slots)),
        h("td", { "data-label": "In use" }, usage(p)),
        h("td", { "data-label": "Waiting", "data-waiting": String(p.waiting.length) }, String(p.waiting.length)),
        h("td", { "data-label": "Jobs" }, jobsList(p.jobs, p.jobs_total)),
        admin ? h("td", { class: "actions" }, edit, " ", deleteButton(p.name, () => route())) : "");
    }))));
  if (admin) root.append(h("h2", {}, "Add or replace"), form);
}

/** One pool: the runs holding its slots (by slot) and the ticks waiting (first served first). */
async function poolView(name) {
  const [p, me] = await Promise.all([getJson(poolPath(name)), whoami().catch(() => ({}))]);
  const root = app();
  const head = (cols) => h("thead", {}, h("tr", {}, cols.map((t) => h("th", { scope: "col" }, t))));
  root.replaceChildren(h("p", {}, h("a", { href: "#/pools" }, "← Pools")), h("h1", {}, `Pool ${p.name}`),
    p.description ? h("p", { class: "muted" }, p.description) : "",
    h("div", { id: "pool-usage" }, usage(p)), h("p", { id: "pool-jobs" }, "Jobs: ", jobsList(p.jobs, p.jobs_total)),
    h("h2", {}, `Holders (${p.holders.length})`),
    p.holders.length === 0 ? h("p", { class: "muted", id: "holders" }, "No slot is held.")
      : h("table", { id: "holders" }, head(["Slot", "Execution", "Worker", "Priority", "Held for"]),
        h("tbody", {}, p.holders.map((x) => h("tr", { "data-slot": String(x.slot) },
          h("td", { "data-label": "Slot" }, String(x.slot)), h("td", { "data-label": "Execution" }, execution(x)),
          h("td", { "data-label": "Worker" }, x.worker_id), h("td", { "data-label": "Priority" }, String(x.priority)),
          h("td", { "data-label": "Held for" }, since(x.since)))))),
    h("h2", {}, `Waiting (${p.waiting.length})`),
    p.waiting.length === 0 ? h("p", { class: "muted", id: "waiting" }, "Nothing waits.")
      : h("table", { id: "waiting" }, head(["#", "Execution", "Priority", "Scheduled at", "Waiting for"]),
        h("tbody", {}, p.waiting.map((w, i) => h("tr", {},
          h("td", { "data-label": "#" }, String(i + 1)), h("td", { "data-label": "Execution" }, execution(w)),
          h("td", { "data-label": "Priority" }, String(w.priority)), h("td", { "data-label": "Scheduled at" }, localTime(w.scheduled_at)),
          h("td", { "data-label": "Waiting for" }, since(w.since)))))));
  if (me.role === "admin") {
    const { form, fill } = poolForm(p.name);
    fill(p);
    root.append(h("h2", {}, "Change"), form, h("p", {}, deleteButton(p.name, () => { location.hash = "#/pools"; })));
  }
  autoRefresh(10000);
}

/** `#/pools` or `#/pools/NAME`. */
export async function poolsView(_query, rest) {
  if (rest) return poolView(decodeURIComponent(rest));
  return listView();
}
