// #/history/NAME: a job's saved versions, what changed since one, rollback.

import { app, h, localTime } from "./format.js";
import { api, getJson, jobPath } from "./api.js";
import { button } from "./controls.js";

/** A job's saved versions, newest first: who saved each, when and how; what changed from one
 * to the current spec; a rollback to one (only over the revision shown: a 409 says someone
 * saved meanwhile). */
export async function historyView(params, rest) {
  const name = decodeURIComponent(rest);
  const history = await getJson(`${jobPath(name)}/history`);
  const diff = h("div", { id: "history-diff", "aria-live": "polite" });
  const showDiff = async (revision) => {
    const d = await getJson(`${jobPath(name)}/history/diff?from=${revision}`);
    const show = (v) => v === undefined || v === null ? "—" : JSON.stringify(v);
    diff.replaceChildren(h("h2", {}, `Revision ${d.from} → current (${d.to})`), d.changes.length === 0
      ? h("p", { class: "muted" }, "No difference.")
      : h("ul", { class: "plain mono" }, d.changes.map((c) => h("li", {}, `${c.path}: ${show(c.old)} → ${show(c.new)}`))));
    return false;
  };
  const rows = history.versions.map((v) => h("tr", { "data-revision": String(v.revision) },
    h("td", { "data-label": "Version" }, `v${v.version}`, v.current ? h("span", { class: "badge enabled" }, "current") : ""),
    h("td", { "data-label": "Revision" }, String(v.revision)),
    h("td", { "data-label": "Saved" }, localTime(v.at)),
    h("td", { "data-label": "By" }, v.by),
    h("td", { "data-label": "Via", title: v.via }, savedHow(v), v.restored ? h("div", { class: "muted" }, `restores ${v.restored}`) : ""),
    h("td", { "data-label": "Actions" }, v.current ? "" : [
      button("Diff", () => showDiff(v.revision), { "aria-label": `Diff revision ${v.revision} with the current spec` }),
      button("Roll back", async () => {
        if (!confirm(`Save the spec of revision ${v.revision} again as ${name}'s newest version?`)) return false;
        await api(`${jobPath(name)}/rollback`, {
          method: "POST", headers: { "Content-Type": "application/json", "If-Match": String(history.revision) },
          body: JSON.stringify({ revision: v.revision }),
        });
        return true;
      }, { "aria-label": `Roll back to revision ${v.revision}` }),
    ])));
  app().replaceChildren(
    h("div", { class: "heading start" }, h("h1", {}, `History of ${name}`)),
    h("p", {}, h("a", { href: `#/job/${encodeURIComponent(name)}` }, `← ${name}`)),
    h("table", { id: "history" },
      h("thead", {}, h("tr", {}, ["Version", "Revision", "Saved", "By", "Via", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)),
    diff);
}

/** How a version was saved: the tool and file the client named (`etcronctl apply jobs/x.toml`,
 * `console`), else the API route. */
function savedHow(v) {
  const tool = v.client || (v.source ? v.via : "");
  return tool ? [tool, v.source].filter(Boolean).join(" ") : v.via;
}
