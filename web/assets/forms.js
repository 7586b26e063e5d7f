// Form controls shared by the editor, the backfill dialog and the calendars page: labelled
// fields, `k=v` lines, API errors at their field; a spec's schedules and alerts.

import { h } from "./format.js";

/** The form's fields: [name (the API's field path), label, kind, options]. */
const SELECTS = {
  "task.kind": [["shell", "Shell command"], ["http", "HTTP request"], ["grpc", "gRPC call"], ["handler", "Handler of an executor"]],
  concurrency: [["allow", "allow — runs may overlap"], ["forbid", "forbid — skip a tick while one runs"], ["replace", "replace — kill the running one"], ["queue", "queue — wait for the running one, oldest first"]],
  misfire: [["skip", "skip — record missed ticks"], ["run_once", "run once — run the newest missed tick"], ["run_all", "run all — run every missed tick (up to max catch-up)"]],
  on_worker_loss: [["rerun", "rerun on another worker"], ["mark_lost", "mark lost"]],
  mode: [["single", "single — one worker per tick"], ["broadcast", "broadcast — every eligible worker"], ["sharded", "sharded — N parts per tick"]],
  "task.method": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"].map((m) => [m, m]),
  // The backfill dialog's.
  which: [["missing", "missing — ticks without a successful run"], ["failed", "failed — ticks whose latest attempt failed, timed out or was lost"], ["all", "all — every tick"]],
  overlap: [["serial", "serial — one run at a time, oldest first"], ["parallel", "parallel — several runs at once"]],
};

export const idOf = (name) => `f-${name.replace(/[^a-z0-9]/gi, "-")}`;

/**
 * A labelled control with room for a hint and an error; `data-field` is the API's field path
 * (two fields of different task kinds may share one: errors go to the visible one).
 */
export function formField(name, label, control, hint, id = idOf(name)) {
  control.id = id;
  control.name = name;
  const error = h("div", { class: "field-error", id: `err-${id}`, hidden: true });
  return h("div", { class: "field", "data-field": name },
    h("label", { for: control.id }, label), control, hint ? h("div", { class: "hint" }, hint) : "", error);
}

export const input = (attrs = {}) => h("input", { type: "text", autocomplete: "off", spellcheck: "false", ...attrs });
export const textarea = (attrs = {}) => h("textarea", { rows: 3, spellcheck: "false", ...attrs });
export const select = (name) => h("select", {}, SELECTS[name].map(([v, t]) => h("option", { value: v }, t)));

/** `k=v` (or `Name: value`) lines ↔ an object. Throws naming the line that does not parse. */
export function parseMap(text, sep) {
  const out = {};
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const at = line.indexOf(sep);
    if (at <= 0) throw new Error(`line ${i + 1}: expected key${sep}value`);
    out[line.slice(0, at).trim()] = line.slice(at + sep.length).trim();
  });
  return out;
}
export const formatMap = (obj, sep) => Object.entries(obj || {}).map(([k, v]) => `${k}${sep}${v ?? ""}`).join("\n").replace(/[ ]+$/gm, "");
/** Secret entries left empty are sent as null: "keep the stored value". */
export const secrets = (map) => Object.fromEntries(Object.entries(map).map(([k, v]) => [k, v === "" ? null : v]));
export const names = (text) => text.split(/[\s,]+/).filter(Boolean);
export const numberOr = (text) => (/^\d+$/.test(text.trim()) ? Number(text.trim()) : text.trim());

/** The fields of a spec's `alerts`, each a control `alerts.{field}` of the editor. */
export const ALERT_FIELDS = ["late_start", "max_duration", "no_success_within", "on_output_match"];

/** A job's alerts in words ("late after 1m · running over 10m · …"); "" when it has none. */
export function alertsText(alerts) {
  const a = alerts || {};
  return [
    a.late_start ? `late after ${a.late_start}` : "",
    a.max_duration ? `running over ${a.max_duration}` : "",
    a.no_success_within ? `stale after ${a.no_success_within}` : "",
    a.on_output_match ? `output matches /${a.on_output_match}/` : "",
  ].filter(Boolean).join(" · ");
}

/** The events of the alerts a spec sets that no target in its `notify` listens for (a raise of
 * one is recorded `no_target` and sent nowhere); none for a spec without `notify`, whose alerts
 * go to the workers' default targets. */
export function unheardAlerts(spec) {
  const a = spec.alerts || {};
  if (!Array.isArray(spec.notify)) return [];
  const set = [["late_start", "late"], ["max_duration", "long_running"], ["no_success_within", "stale"], ["on_output_match", "output_match"]];
  return set.filter(([field, event]) => a[field] && !spec.notify.some((t) => (t.on || []).includes(event))).map(([, event]) => event);
}

/** A spec's notify targets with their events ("oncall → failure, recovery; https://… → stale"). */
export function notifyText(notify) {
  return (notify || []).map((t) => `${t.name || t.url || "a secret URL"} → ${(t.on || []).join(", ") || "nothing"}`).join("; ");
}

/** A schedule field's expressions, one per non-empty line. */
export function scheduleLines(text) { return text.split("\n").map((l) => l.trim()).filter(Boolean); }

/** A spec's schedule expressions: `schedules`, or the one `schedule`. */
export function expressionsOf(spec) { return spec.schedules && spec.schedules.length ? spec.schedules : [spec.schedule || ""]; }

/** Marks the control of API field `path` (e.g. `task.command`, `on_success[0]`) with `message`. */
export function showFieldError(form, path, message) {
  // `schedules[i]` is a line of the one schedule field.
  let key = (path || "").replace(/^schedules\b(\[\d+\])?/, "schedule");
  while (key) {
    const holder = [...form.querySelectorAll(`[data-field="${CSS.escape(key)}"]`)].find((el) => !el.hidden);
    if (holder) {
      const err = holder.querySelector(".field-error");
      const control = holder.querySelector("input, textarea, select");
      err.textContent = message;
      err.hidden = false;
      if (control) {
        control.setAttribute("aria-invalid", "true");
        control.setAttribute("aria-describedby", err.id);
      }
      return control || holder;
    }
    const cut = Math.max(key.lastIndexOf("."), key.lastIndexOf("["));
    key = cut > 0 ? key.slice(0, cut) : "";
  }
  return null;
}

/**
 * Fills `box` (above the form) with every field error `form` shows, each a button that focuses
 * its field, scrolled to the middle of the screen (never under the sticky Save bar); `extra`:
 * messages no field holds. The box is shown, scrolled into view and focused (it is an alert).
 */
export function showErrorSummary(box, form, extra = []) {
  const holders = [...form.querySelectorAll("[data-field]")].filter((el) => !el.hidden && el.querySelector(".field-error:not([hidden])"));
  const entries = holders.map((holder) => {
    const control = holder.querySelector("input, textarea, select");
    const label = holder.querySelector("label");
    const message = holder.querySelector(".field-error").textContent;
    const go = h("button", { type: "button", class: "link", "data-goes-to": control ? control.id : "" },
      `${label ? label.textContent : holder.dataset.field} (${holder.dataset.field}): ${message}`);
    go.addEventListener("click", () => {
      if (!control) return;
      control.focus({ preventScroll: true });
      control.scrollIntoView({ block: "center" });
    });
    return h("li", {}, go);
  });
  const count = entries.length + extra.length;
  box.replaceChildren(h("h2", {}, count === 1 ? "The job was not saved: 1 error" : `The job was not saved: ${count} errors`),
    h("ul", {}, entries, extra.map((m) => h("li", {}, m))));
  box.hidden = false;
  box.scrollIntoView({ block: "start" });
  box.focus({ preventScroll: true });
}

export function clearFieldErrors(form, only) {
  for (const holder of form.querySelectorAll("[data-field]")) {
    if (only && holder.dataset.field !== only) continue;
    const err = holder.querySelector(".field-error");
    if (err) { err.hidden = true; err.textContent = ""; }
    const control = holder.querySelector("[aria-invalid]");
    if (control) { control.removeAttribute("aria-invalid"); control.removeAttribute("aria-describedby"); }
  }
}
