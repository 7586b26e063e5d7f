// #/calendars: the skip calendars; add, replace or delete one.

import { app, h } from "./format.js";
import { api, banner, explain, getJson } from "./api.js";
import { route } from "./nav.js";
import { clearFieldErrors, formField, input, scheduleLines, showFieldError, textarea } from "./forms.js";

/** Skip calendars: every one with its days; a form saves one (lines of YYYY-MM-DD or FROM..TO). */
export async function calendarsView() {
  const data = await getJson("/api/calendars");
  const root = app();
  root.replaceChildren(h("h1", {}, "Skip calendars"),
    h("p", { class: "muted" }, "Jobs naming a calendar in skip_calendars do not run on its days (in its timezone): those ticks are recorded skipped, naming the calendar."));
  const days = (c) => [...(c.dates || []), ...(c.ranges || []).map((r) => `${r.from}..${r.to}`)];
  if (data.calendars.length === 0) root.append(h("div", { class: "empty" }, "No calendar yet."));
  else root.append(h("table", { id: "calendars" },
    h("thead", {}, h("tr", {}, ["Calendar", "Timezone", "Days", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, data.calendars.map((c) => {
      const del = h("button", { type: "button", "aria-label": `Delete calendar ${c.name}` }, "Delete");
      del.addEventListener("click", async () => {
        if (!confirm(`Delete calendar ${c.name}?`)) return;
        try { await api(`/api/calendars/${encodeURIComponent(c.name)}`, { method: "DELETE" }); route(); } catch (e) { banner(e.message); }
      });
      const edit = h("button", { type: "button", "aria-label": `Edit calendar ${c.name}` }, "Edit");
      edit.addEventListener("click", () => fill(c));
      return h("tr", { "data-calendar": c.name },
        h("td", { "data-label": "Calendar" }, h("strong", {}, c.name), c.calendar.description ? h("div", { class: "muted" }, c.calendar.description) : ""),
        h("td", { "data-label": "Timezone" }, c.calendar.timezone),
        h("td", { "data-label": "Days" }, h("code", {}, days(c.calendar).join(", "))),
        h("td", { "data-label": "Actions" }, edit, " ", del));
    }))));
  const f = {
    name: input({ required: true, pattern: "[a-z0-9][a-z0-9._-]{0,127}", placeholder: "holidays-de" }),
    timezone: input({ placeholder: "UTC", list: "timezones" }),
    days: textarea({ rows: 5, class: "mono", placeholder: "2026-12-25\n2026-12-31..2027-01-01" }),
    description: input({ placeholder: "public holidays" }),
  };
  const fields = [
    formField("name", "Name", f.name), formField("timezone", "Timezone", f.timezone, "The days are days in this IANA timezone."),
    formField("dates", "Days", f.days, "One per line: a day (YYYY-MM-DD) or a range FROM..TO, both included."),
    formField("description", "Description", f.description)];
  const fill = (c) => {
    f.name.value = c.name; f.timezone.value = c.calendar.timezone; f.description.value = c.calendar.description || "";
    f.days.value = days(c.calendar).join("\n");
  };
  const form = h("form", { id: "calendar-form", novalidate: true, "aria-label": "Calendar" },
    h("fieldset", {}, h("legend", {}, "Add or replace a calendar"), fields), h("button", { type: "submit", class: "primary" }, "Save calendar"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    const lines = scheduleLines(f.days.value);
    const body = { timezone: f.timezone.value.trim() || "UTC", dates: lines.filter((l) => !l.includes("..")),
      ranges: lines.filter((l) => l.includes("..")).map((l) => { const [from, to] = l.split(".."); return { from: from.trim(), to: to.trim() }; }) };
    if (f.description.value.trim()) body.description = f.description.value.trim();
    try {
      await api(`/api/calendars/${encodeURIComponent(f.name.value.trim())}`, { method: "PUT", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
      route();
    } catch (e) {
      if (e.status === 400) showFieldError(form, (e.field || "dates").replace(/^ranges\b/, "dates"), e.message); else banner(explain(e));
    }
  });
  root.append(h("h2", {}, "Add or replace"), form);
}
