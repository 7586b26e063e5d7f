// #/new and #/edit/NAME: the job editor (form or JSON), the live schedule preview, API errors
// at their field, a 409 explained with a reload.

import { app, h, jobTime, localTime } from "./format.js";
import { api, banner, explain, getJson, jobPath, whoami } from "./api.js";
import { button } from "./controls.js";
import { clearFieldErrors, names, scheduleLines, showErrorSummary, showFieldError, textarea } from "./forms.js";
import { jobForm } from "./jobform.js";

/** The editor's fields that change a job's fire times, which the preview reads. */
const SHAPE_FIELDS = ["schedule", "timezone", "active_from", "active_until", "jitter", "skip_calendars"];

/** Create (#/new) or edit (#/edit/NAME) a job: form or JSON, live schedule preview, 409 handling. */
export async function editView(params, rest) {
  const name = rest ? decodeURIComponent(rest) : "";
  const isNew = !name;
  let revision = null;
  const ui = jobForm(isNew);
  const { form, f, preview } = ui;
  const status = h("div", { class: "form-status", role: "status", "aria-live": "polite" });
  // What stopped the last save, each error leading to its field.
  const summary = h("div", { class: "error-summary", id: "error-summary", role: "alert", tabindex: "-1", hidden: true });
  const refused = (field, message) => {
    showFieldError(form, field, message);
    showErrorSummary(summary, form);
  };
  const json = textarea({ rows: 24, class: "mono json", "aria-label": "Job spec JSON", id: "spec-json" });
  const jsonError = h("div", { class: "field-error", id: "err-json", hidden: true });
  const jsonPanel = h("section", { hidden: true, id: "json-panel", "aria-label": "JSON" },
    h("p", { class: "muted" }, "The whole spec as the API takes it. Paste one here, or copy this one."),
    json, jsonError,
    h("div", { class: "toolbar" },
      button("Apply to form", () => { toForm(); return false; }),
      button("Copy JSON", async () => { await navigator.clipboard.writeText(json.value); status.textContent = "Copied."; return false; })));
  const formTab = h("button", { type: "button", role: "tab", "aria-selected": "true", "aria-controls": "job-form" }, "Form");
  const jsonTab = h("button", { type: "button", role: "tab", "aria-selected": "false", "aria-controls": "json-panel" }, "JSON");
  const showJson = (on) => {
    form.hidden = on;
    jsonPanel.hidden = !on;
    formTab.setAttribute("aria-selected", String(!on));
    jsonTab.setAttribute("aria-selected", String(on));
  };
  const toForm = () => {
    let spec;
    try { spec = JSON.parse(json.value); } catch (e) {
      jsonError.textContent = `Not valid JSON: ${e.message}`;
      jsonError.hidden = false;
      return false;
    }
    jsonError.hidden = true;
    ui.fill(spec, isNew ? f.name.value : name);
    showJson(false);
    schedulePreview();
    return true;
  };
  formTab.addEventListener("click", () => { if (!jsonPanel.hidden) toForm(); });
  jsonTab.addEventListener("click", () => {
    clearFieldErrors(form);
    try { json.value = JSON.stringify(ui.read(), null, 2); } catch (e) { showFieldError(form, e.field, e.message); return; }
    showJson(true);
  });

  // The schedule reads back in words with its next 10 fire times, as the operator types.
  let previewTimer = null;
  let previewSeq = 0;
  const schedulePreview = () => {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const seq = ++previewSeq;
      for (const field of SHAPE_FIELDS) clearFieldErrors(form, field);
      const expressions = scheduleLines(f.schedule.value);
      if (!expressions.length) { preview.replaceChildren(); return; }
      const query = new URLSearchParams(expressions.map((e) => ["schedule", e]));
      query.set("timezone", f.timezone.value.trim() || "UTC");
      query.set("count", "10");
      for (const field of ["active_from", "active_until", "jitter"]) if (f[field].value.trim()) query.set(field, f[field].value.trim());
      // A tick's jitter depends on the job's name: a new job's preview needs one first.
      if (query.has("jitter")) query.set("job", f.name.value.trim() || "unnamed");
      for (const c of names(f.skip_calendars.value)) query.append("skip_calendar", c);
      try {
        const p = await getJson(`/api/schedule/preview?${query}`);
        if (seq !== previewSeq) return;
        preview.replaceChildren(h("p", { class: "reading" }, p.description),
          h("ol", { class: "next", "aria-label": "Next fire times" }, p.next.map((t) => {
            const skip = (p.skipped || []).find((k) => k.at === t);
            return h("li", skip ? { class: "skipped" } : {}, `${jobTime(t)} · ${localTime(t)} local`, skip ? ` — skipped (calendar ${skip.calendar})` : "");
          })));
      } catch (e) {
        if (seq !== previewSeq) return;
        preview.replaceChildren();
        // The preview's `skip_calendar` parameter is the spec's `skip_calendars` field.
        const field = e.field === "skip_calendar" ? "skip_calendars" : e.field;
        if (e.status === 400) showFieldError(form, field || "schedule", e.message); else preview.append(h("p", { class: "warn" }, explain(e)));
      }
    }, 250);
  };
  for (const field of [...SHAPE_FIELDS, "name"]) f[field].addEventListener("input", schedulePreview);

  const load = async () => {
    const { body } = await api(jobPath(name));
    revision = body.revision;
    ui.fill(body.spec || {}, name);
    status.textContent = "";
    schedulePreview();
  };

  const save = async () => {
    clearFieldErrors(form);
    summary.hidden = true;
    jsonError.hidden = true;
    status.textContent = "";
    let body;
    let jobName = isNew ? f.name.value.trim() : name;
    if (!jsonPanel.hidden) {
      try { JSON.parse(json.value); } catch (e) { jsonError.textContent = `Not valid JSON: ${e.message}`; jsonError.hidden = false; return; }
      body = json.value;
    } else {
      try { body = JSON.stringify(ui.read()); } catch (e) { refused(e.field, e.message); return; }
    }
    if (!jobName) { refused("name", "A job needs a name."); return; }
    const headers = { "Content-Type": "application/json" };
    if (isNew) headers["If-None-Match"] = "*"; else headers["If-Match"] = `"${revision}"`;
    try {
      await api(jobPath(jobName), { method: "PUT", headers, body });
      location.hash = `#/job/${encodeURIComponent(jobName)}`;
    } catch (e) {
      if (e.status === 409 && !isNew) {
        status.replaceChildren(h("div", { class: "conflict", role: "alert" },
          h("strong", {}, "Someone else changed this job while you were editing. "), e.message, " ",
          button("Reload their version", async () => { await load(); return false; }),
          " Reloading discards your changes; copy them from the JSON tab first if you need them."));
        status.scrollIntoView({ block: "center" });
        return;
      }
      if (e.status === 409 && isNew) {
        refused("name", e.message);
        return;
      }
      // 403 naming `team`: the token may not save a job into that team.
      if (e.status === 400 || e.status === 413 || (e.status === 403 && e.field)) {
        if (!jsonPanel.hidden) {
          jsonError.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
          jsonError.hidden = false;
          return;
        }
        if (showFieldError(form, e.field, e.message)) showErrorSummary(summary, form);
        else showErrorSummary(summary, form, [e.field ? `${e.field}: ${e.message}` : e.message]);
        return;
      }
      banner(`Saving failed: ${explain(e)}`);
    }
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); save(); });
  const saveButton = h("button", { type: "button", class: "primary" }, isNew ? "Create job" : "Save changes");
  saveButton.addEventListener("click", save);

  // The token's teams to pick from; a new job of a token with one team and no global role
  // starts in that team (the only place it may create one).
  const me = await whoami().catch(() => ({ teams: {} }));
  const myTeams = Object.keys(me.teams || {});
  app().replaceChildren(
    h("h1", {}, isNew ? "New job" : `Edit ${name}`),
    h("div", { class: "tabs", role: "tablist" }, formTab, jsonTab),
    status, summary, form, jsonPanel,
    h("datalist", { id: "team-list" }, myTeams.map((t) => h("option", { value: t }))),
    h("div", { class: "toolbar sticky" }, saveButton,
      h("a", { class: "button", href: isNew ? "#/jobs" : `#/job/${encodeURIComponent(name)}` }, "Cancel")));
  if (isNew) {
    const team = !me.role && myTeams.length === 1 ? myTeams[0] : undefined;
    ui.fill({ schedule: "", timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC", task: { kind: "shell" }, team });
    f.name.focus();
  } else {
    await load();
    f.description.focus();
  }
}
