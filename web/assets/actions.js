// A job's actions (run, pause/resume, kill, edit, history, delete) in one menu, and their
// dialogs: run with parameters, pause (why and until when), backfill.

import { h, isPaused, localTime } from "./format.js";
import { api, explain, jobPath } from "./api.js";
import { button, dialogButton, menu } from "./controls.js";
import { clearFieldErrors, formField, input, numberOr, parseMap, select, showFieldError } from "./forms.js";
import { route } from "./nav.js";

/** The parameters a job's shell task declares (`task.params`), as the run dialog lists them. */
function declaredParams(j) {
  const params = ((j.spec || {}).task || {}).params || {};
  const names = Object.keys(params);
  if (!names.length) return "This job declares no parameters (task.params): a run can set none.";
  const one = (n) => n + (params[n].default !== undefined ? ` (default ${params[n].default})` : "")
    + (params[n].pattern ? ` matching ${params[n].pattern}` : "");
  return `Parameters it declares: ${names.map(one).join(", ")}.`;
}

/** A dialog `id` (named `label` to assistive technology), its submit button saying `action`,
 * and a Cancel that closes it. */
function dialogParts(id, label, action) {
  const dialog = h("dialog", { id, "aria-label": label });
  const submit = h("button", { type: "submit" }, action);
  const cancel = h("button", { type: "button" }, "Cancel");
  cancel.addEventListener("click", () => dialog.close());
  return { dialog, submit, cancel };
}

/** POSTs `body` to `path` for a dialog's form: its submit button disabled meanwhile; on success
 * the dialog closes and `then(answer)` runs; an API error shows in `error`, naming its field. */
async function postFromDialog({ dialog, submit, error }, path, body, then) {
  submit.disabled = true;
  try {
    const { body: answer } = await api(path, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    dialog.close();
    then(answer);
  } catch (e) {
    error.textContent = `${e.field ? `${e.field}: ` : ""}${e.message}`;
    error.hidden = false;
  } finally {
    submit.disabled = false;
  }
}

/** The "run with parameters" dialog: declared parameters and a time to run as of. On success
 * it opens the execution's page. */
function runDialog(j) {
  const env = h("textarea", { id: "run-env", rows: 3, class: "mono", placeholder: "REPORT_DAY=2026-11-01" });
  const asOf = h("input", { id: "run-as-of", type: "text", autocomplete: "off", placeholder: "2026-11-01T00:00:00Z" });
  const error = h("p", { class: "field-error", id: "run-error", role: "alert", hidden: true });
  const { dialog, submit, cancel } = dialogParts("run-dialog", `Run ${j.name} with parameters`, "Run");
  const form = h("form", { method: "dialog" },
    h("h2", {}, `Run ${j.name}`),
    h("div", { class: "field" }, h("label", { for: "run-env" }, "Parameters"), env,
      h("div", { class: "hint", id: "run-params-hint" }, `One NAME=value per line (shell tasks). ${declaredParams(j)}`)),
    h("div", { class: "field" }, h("label", { for: "run-as-of" }, "Run as of"), asOf,
      h("div", { class: "hint" }, "RFC 3339; ETCRON_SCHEDULED_AT is this time. Empty: now.")),
    error,
    h("div", { class: "toolbar" }, submit, cancel));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const body = {};
    try {
      const vars = parseMap(env.value, "=");
      if (Object.keys(vars).length) body.env = vars;
    } catch (e) {
      error.textContent = `Parameters: ${e.message}`;
      error.hidden = false;
      return;
    }
    if (asOf.value.trim()) body.scheduled_at = asOf.value.trim();
    await postFromDialog({ dialog, submit, error }, `${jobPath(j.name)}/run`, body, (answer) => {
      location.hash = `#/execution/${encodeURIComponent(answer.execution_id)}`;
    });
  });
  dialog.append(form);
  return dialog;
}

/** A Date as the value of a datetime-local input: the browser's local time, to the second. */
function localInputValue(date) {
  const p = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())}T${p(date.getHours())}:${p(date.getMinutes())}:${p(date.getSeconds())}`;
}

/** A datetime-local value (local time, no offset) as RFC 3339 in UTC; a value that does not
 * parse goes as typed, for the API to name the field. */
function rfc3339FromLocal(value) {
  const date = new Date(value);
  return value && !isNaN(date) ? date.toISOString() : value;
}

/** When a pause preset ends, from `now`: a number of hours ahead, or the next 08:00 local. */
function presetUntil(preset, now = new Date()) {
  if (preset === "morning") {
    const at = new Date(now);
    at.setHours(8, 0, 0, 0);
    if (at <= now) at.setDate(at.getDate() + 1);
    return at;
  }
  return new Date(now.getTime() + Number(preset) * 3600 * 1000);
}

/** The pause dialog: why (shown with the job and in its skipped ticks' records) and until when
 * (until resumed, presets, or a local time); the API's errors at the field they name. */
function pauseDialog(j) {
  const reason = h("input", { id: "pause-reason", type: "text", autocomplete: "off", maxlength: 500, placeholder: "db migration" });
  const presets = [["", "until resumed"], ["1", "for 1 hour"], ["4", "for 4 hours"], ["24", "for 24 hours"],
    ["morning", "until 08:00 (local)"], ["custom", "until a time…"]];
  const until = h("select", { id: "pause-until" }, presets.map(([v, t]) => h("option", { value: v }, t)));
  const at = h("input", { id: "pause-at", type: "datetime-local", step: 1, hidden: true, "aria-label": "Pause until (local time)" });
  const shown = h("div", { class: "hint", id: "pause-until-hint" }, "Its ticks are recorded skipped until it is resumed.");
  const error = h("p", { class: "field-error", id: "pause-error", role: "alert", hidden: true });
  const ends = () => until.value === "custom" ? (at.value ? new Date(at.value) : null) : until.value ? presetUntil(until.value) : null;
  const explainUntil = () => {
    at.hidden = until.value !== "custom";
    const end = ends();
    shown.textContent = end && !isNaN(end)
      ? `Its ticks are recorded skipped until ${localTime(end.toISOString())}; then it runs again by itself.`
      : "Its ticks are recorded skipped until it is resumed.";
  };
  until.addEventListener("change", explainUntil);
  at.addEventListener("input", explainUntil);
  const { dialog, submit, cancel } = dialogParts("pause-dialog", `Pause ${j.name}`, "Pause");
  const form = h("form", { method: "dialog" },
    h("h2", {}, `Pause ${j.name}`),
    h("div", { class: "field" }, h("label", { for: "pause-reason" }, "Reason"), reason,
      h("div", { class: "hint" }, "Optional; shown with the job and in the records of the ticks it skips.")),
    h("div", { class: "field" }, h("label", { for: "pause-until" }, "How long"), until, at, shown),
    error,
    h("div", { class: "toolbar" }, submit, cancel));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const body = {};
    if (reason.value.trim()) body.reason = reason.value.trim();
    const end = ends();
    if (until.value === "custom" && !end) {
      error.textContent = "until: choose a time, or another length";
      error.hidden = false;
      return;
    }
    if (end) body.until = isNaN(end) ? at.value : end.toISOString();
    await postFromDialog({ dialog, submit, error }, `${jobPath(j.name)}/pause`, body, () => route({ quiet: true }));
  });
  dialog.append(form);
  return dialog;
}

/** Most ticks a backfill preview lists (it says how many more there are), and excluded ones. */
const PREVIEW_TICKS = 50;
const PREVIEW_EXCLUDED = 10;

/** The backfill dialog: a range of past ticks (local time), which of them, how they overlap,
 * a cap and a reason. "Preview" (and Enter) asks the API for a dry run and lists the ticks;
 * "Start backfill" creates it, closes the dialog and opens it in the job page's Backfills
 * section. API errors appear at the field they name. */
function backfillDialog(j) {
  const now = new Date();
  now.setMilliseconds(0);
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const f = {
    from: h("input", { type: "datetime-local", step: "1", value: localInputValue(new Date(now.getTime() - 86_400_000)) }),
    to: h("input", { type: "datetime-local", step: "1", value: localInputValue(now) }),
    which: select("which"),
    overlap: select("overlap"),
    max_parallel: input({ inputmode: "numeric", placeholder: "5" }),
    max_runs: input({ inputmode: "numeric", placeholder: "100" }),
    reason: input({ placeholder: "rerun after the outage" }),
  };
  const maxParallel = formField("max_parallel", "Max parallel", f.max_parallel, "Runs at once, 1 to 50.");
  const sync = () => { maxParallel.hidden = f.overlap.value !== "parallel"; };
  f.overlap.addEventListener("change", sync);
  sync();
  const preview = h("div", { class: "preview", id: "backfill-preview", "aria-live": "polite" });
  const error = h("p", { class: "field-error", id: "backfill-error", role: "alert", hidden: true });
  const dialog = h("dialog", { id: "backfill-dialog", "aria-label": `Backfill ${j.name}` });
  const previewButton = h("button", { type: "submit" }, "Preview");
  const start = h("button", { type: "button", class: "primary" }, "Start backfill");
  const close = h("button", { type: "button" }, "Close");
  close.addEventListener("click", () => dialog.close());
  const form = h("form", { method: "dialog", novalidate: true },
    h("h2", {}, `Backfill ${j.name}`),
    h("p", { class: "muted small" }, "Runs past ticks of the schedule again, each as one more attempt of its tick (also while the job is paused)."),
    formField("from", "From", f.from, `Your browser's time (${zone}); the range includes both ends.`),
    formField("to", "To", f.to, "Not in the future: later ticks belong to the schedule."),
    formField("which", "Which ticks", f.which),
    formField("overlap", "Overlap", f.overlap),
    maxParallel,
    formField("max_runs", "Max runs", f.max_runs, "A range selecting more ticks is refused; 1 to 500."),
    formField("reason", "Reason", f.reason),
    error,
    h("div", { class: "toolbar" }, previewButton, start, close),
    preview);
  // A preview describes the fields as they were: changing one withdraws it.
  form.addEventListener("input", () => preview.replaceChildren());
  form.addEventListener("change", () => preview.replaceChildren());

  const request = (dryRun) => {
    const body = { from: rfc3339FromLocal(f.from.value), to: rfc3339FromLocal(f.to.value), which: f.which.value, overlap: f.overlap.value };
    if (f.overlap.value === "parallel" && f.max_parallel.value.trim()) body.max_parallel = numberOr(f.max_parallel.value);
    if (f.max_runs.value.trim()) body.max_runs = numberOr(f.max_runs.value);
    if (f.reason.value.trim()) body.reason = f.reason.value.trim();
    if (dryRun) body.dry_run = true;
    return body;
  };
  const showPreview = (p) => {
    const more = p.count - Math.min(p.count, PREVIEW_TICKS);
    const excludedMore = p.excluded_count - Math.min(p.excluded.length, PREVIEW_EXCLUDED);
    preview.replaceChildren(
      h("p", { class: "reading", id: "backfill-count", "data-count": String(p.count) }, p.count === 0
        ? "No tick of the range qualifies."
        : `${p.count} tick${p.count === 1 ? "" : "s"} would run, ${p.overlap === "parallel" ? `up to ${p.max_parallel} at once` : "one at a time"}:`),
      p.ticks.length ? h("ol", { class: "next backfill-ticks", "aria-label": "Ticks the backfill would run" },
        p.ticks.slice(0, PREVIEW_TICKS).map((t) => h("li", { title: t.execution_id, "data-at": t.at }, `${localTime(t.at)}`))) : "",
      more > 0 ? h("p", { class: "muted small" }, `… and ${more} more.`) : "",
      p.excluded_count ? [
        h("p", { class: "reading", id: "backfill-excluded", "data-count": String(p.excluded_count) }, `${p.excluded_count} tick${p.excluded_count === 1 ? "" : "s"} of the range left out:`),
        h("ul", { class: "plain small" }, p.excluded.slice(0, PREVIEW_EXCLUDED).map((x) => h("li", {}, `${localTime(x.at)} — ${x.why}`))),
        excludedMore > 0 ? h("p", { class: "muted small" }, `… and ${excludedMore} more.`) : "",
      ] : "");
  };
  const send = async (dryRun) => {
    clearFieldErrors(form);
    error.hidden = true;
    preview.replaceChildren();
    previewButton.disabled = true;
    start.disabled = true;
    try {
      const { body: answer } = await api(`${jobPath(j.name)}/backfill`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request(dryRun)),
      });
      if (dryRun) { showPreview(answer); return; }
      dialog.close();
      location.hash = `#/job/${encodeURIComponent(j.name)}?backfill=${encodeURIComponent(answer.id)}`;
    } catch (e) {
      const at = e.status === 400 ? showFieldError(form, e.field, e.message) : null;
      if (at) { at.focus(); return; }
      error.textContent = e.status === 400 || e.status === 409 ? `${e.field ? `${e.field}: ` : ""}${e.message}` : explain(e);
      error.hidden = false;
    } finally {
      previewButton.disabled = false;
      start.disabled = false;
    }
  };
  // Enter previews: starting a backfill (many runs) takes the button.
  form.addEventListener("submit", (event) => { event.preventDefault(); send(true); });
  start.addEventListener("click", () => send(false));
  dialog.append(form);
  return dialog;
}

/** A job's actions in one menu (the jobs list's "⋯", the job page's "Actions"): run now (and
 * on its page "Run with…" and "Backfill…"), pause or resume, kill (only while something of it
 * runs: `running`, how many; unknown: offered), edit, history, delete (both ask first). */
export function jobActions(j, { detail = false, running } = {}) {
  return menu(detail ? "Actions ▾" : "⋯", jobActionItems(j, { detail, running }), { "aria-label": `Actions for ${j.name}`, title: "Actions" });
}

function jobActionItems(j, { detail, running }) {
  const path = jobPath(j.name);
  const withParams = detail ? [
    dialogButton("Run with…", () => runDialog(j), { "aria-label": `Run ${j.name} with parameters` }),
    dialogButton("Backfill…", () => backfillDialog(j), { "aria-label": `Backfill past ticks of ${j.name}` }),
  ] : [];
  return [
    // Lands on the run's page, which follows it live (and waits for its record until a worker
    // takes it).
    button("Run now", async () => {
      const { body } = await api(`${path}/run`, { method: "POST" });
      location.hash = `#/execution/${encodeURIComponent(body.execution_id)}`;
      return false;
    }, { "aria-label": `Run ${j.name} now` }),
    ...withParams,
    isPaused(j)
      ? button("Resume", () => api(`${path}/resume`, { method: "POST" }), { "aria-label": `Resume ${j.name}` })
      : dialogButton("Pause…", () => pauseDialog(j), { "aria-label": `Pause ${j.name}` }),
    // Kill only while something runs (`running`: how many; unknown: offered).
    running === 0 ? "" : button("Kill", async () => {
      if (!confirm(`Kill every running execution of ${j.name}?`)) return false;
      await api(`${path}/kill`, { method: "POST" });
      return true;
    }, { "aria-label": `Kill running executions of ${j.name}`, class: "danger" }),
    h("a", { class: "button", href: `#/edit/${encodeURIComponent(j.name)}`, "aria-label": `Edit ${j.name}` }, "Edit"),
    h("a", { class: "button", href: `#/history/${encodeURIComponent(j.name)}`, "aria-label": `History of ${j.name}` }, "History"),
    button("Delete", async () => {
      if (!confirm(`Delete job ${j.name}? Its pending retries and runs are withdrawn.`)) return false;
      await api(path, { method: "DELETE" });
      if (detail) location.hash = "#/jobs";
      return true;
    }, { "aria-label": `Delete ${j.name}`, class: "danger" }),
  ];
}
