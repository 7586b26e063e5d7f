// #/execution/ID: one execution: status and why, timings, progress, checkpoint, a handler's
// result, output (live while it runs), and its notifications (alerts included).

import { app, duration, h, localTime } from "./format.js";
import { api, banner, getJson } from "./api.js";
import { button } from "./controls.js";
import { autoRefresh, route } from "./nav.js";
import { formatMap } from "./forms.js";
import { followOutput } from "./stream.js";
import { notificationsSection } from "./job.js";

/** One execution: timings, attempt, worker, fencing token, why it did not run, output. */
export async function executionView(params, rest) {
  const id = decodeURIComponent(rest);
  let r;
  // The run's alerts and other deliveries (an alert no target listens for: `no_target`).
  const deliveries = getJson(`/api/notifications?execution=${encodeURIComponent(id)}&limit=20`).catch((e) => ({ error: e }));
  try {
    r = await getJson(`/api/executions/${encodeURIComponent(id)}`);
  } catch (e) {
    if (e.status !== 404) throw e;
    // A run just requested ("Run with…" opens its page at once) has neither a record nor a
    // running marker until a worker claims it, nor a short one between its end and its record.
    app().replaceChildren(h("h1", { class: "id" }, id),
      h("p", { class: "muted", role: "status", id: "no-record" }, "No record of this execution yet: a run just requested appears once a worker starts it. This page looks again every 2 s."));
    autoRefresh(2000);
    return;
  }
  const field = (k, v) => v == null || v === "" ? [] : [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : String(v))];
  const output = h("pre", { class: "output wrap", tabindex: "0", "aria-label": "Output" }, r.output || "");
  const wrap = h("button", { type: "button", "aria-pressed": "true" }, "Wrap lines");
  wrap.addEventListener("click", () => {
    const on = output.classList.toggle("wrap");
    wrap.setAttribute("aria-pressed", String(on));
  });
  // What the task reported: its progress as a bar, its stored checkpoint (both move while it runs).
  const progress = h("div", { id: "progress", class: "progress-line" });
  const checkpoint = h("code", { id: "checkpoint" }, r.checkpoint === undefined ? "" : JSON.stringify(r.checkpoint));
  showProgress(progress, r.progress);
  const copy = h("button", { type: "button" }, "Copy output");
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(output.textContent); copy.textContent = "Copied"; } catch { banner("The browser refused clipboard access."); }
  });
  app().replaceChildren(
    h("h1", { class: "id" }, r.id),
    h("p", {}, h("span", { class: `status-${r.status} big` }, r.status), " ", r.error ? h("span", { class: "muted" }, r.error) : ""),
    r.reason ? h("p", { class: "reason" }, r.reason) : "",
    h("dl", { class: "fields" },
      field("Job", h("a", { href: `#/job/${encodeURIComponent(r.job)}` }, r.job)), field("Trigger", r.trigger), field("Attempt", r.attempt),
      field("Worker", r.worker_id), field("Host", r.hostname),
      field("Scheduled", h("span", { id: "scheduled" }, r.scheduled_at)), field("Jitter", r.jitter_ms == null ? null : h("span", { id: "jitter" }, `+${duration(r.jitter_ms)} (the job's jitter moved this tick)`)),
      field("Claimed", r.claimed_at && h("span", { id: "claimed" }, r.claimed_at)),
      field("Started", r.started_at ? h("span", { id: "started" }, r.started_at)
        : r.status === "running" ? h("span", { id: "started", class: "muted" }, "starting…") : null),
      field("Finished", r.finished_at), field("Duration", r.duration_ms == null ? null : duration(r.duration_ms)),
      field("Exit code", r.exit_code), field("Signal", r.signal), field("HTTP status", r.http_status),
      field("Fencing token", r.fencing_token),
      field("Parent", r.parent ? h("a", { href: `#/execution/${encodeURIComponent(r.parent)}` }, r.parent) : null),
      field("Workflow run", r.workflow ? h("a", { href: `#/workflows/${encodeURIComponent(r.workflow)}`, id: "workflow-link" }, r.workflow) : null),
      field("Shard", r.shard ? `${r.shard[0]} of ${r.shard[1]}` : null),
      field("Run as of", r.params && r.params.as_of_ms != null ? r.scheduled_at : null),
      field("Environment", r.params && r.params.env ? h("code", { id: "run-params" }, formatMap(r.params.env, "=")) : null),
      field("Resumed from", r.resumed_from ? h("span", { id: "resumed-from" },
        h("a", { href: `#/execution/${encodeURIComponent(r.resumed_from.execution_id)}` }, r.resumed_from.execution_id),
        ` at checkpoint `, h("code", {}, JSON.stringify(r.resumed_from.checkpoint))) : null),
      // A running task may store one any moment: the field is there to be filled.
      field("Checkpoint", r.checkpoint === undefined && r.status !== "running" ? null : checkpoint),
      // The JSON a handler returned (an executor's run).
      field("Result", r.result == null ? null : h("code", { id: "result" }, JSON.stringify(r.result)))),
    progress,
    h("div", { class: "toolbar" }, wrap, copy, r.output_truncated ? h("span", { class: "warn" }, "output truncated (head and tail kept)") : ""),
    output,
    notificationsSection(await deliveries));
  if (r.status !== "running") return;
  // Running: how long so far, a Kill, its output as it is printed, then the final record (the
  // view re-renders).
  runningControls(r, wrap.parentNode);
  if (!r.started_at) awaitStart(r.id);
  const live = h("span", { class: "live", role: "status" }, "● live output");
  wrap.parentNode.append(live);
  output.textContent = "";
  followOutput(r.id, {
    output: (d) => { output.append(d.text); if (output.scrollHeight - output.scrollTop - output.clientHeight < 80) output.scrollTop = output.scrollHeight; },
    gap: (d) => output.append(`\n[... ${d.skipped_bytes} bytes not kept ...]\n`),
    progress: (d) => {
      showProgress(progress, d.progress);
      if (d.checkpoint !== undefined) checkpoint.textContent = JSON.stringify(d.checkpoint);
    },
    status: () => { live.remove(); route({ quiet: true }); },
    error: (d) => { live.remove(); banner(d.message, "warn"); },
    // The master closed a stream that had nothing new for a while: following again is a click.
    idle: () => {
      const again = h("button", { type: "button", id: "follow-again" }, "Follow again");
      again.addEventListener("click", () => route({ quiet: true }));
      live.replaceChildren("following paused: nothing new for a while ", again);
    },
  }).catch((e) => {
    // No stream (an older master, a proxy in the way): fall back to re-reading the record.
    if (e.name === "AbortError") return;
    live.textContent = "output refreshes every 3 s";
    output.textContent = r.output || "";
    autoRefresh(3000);
  });
}

/** A run younger than a second is told by its claim, which says when it was claimed but not
 * when its task started: its record is read again each second until it says (its marker and
 * `running` record are written once it has lasted a second), and the times are filled in. */
function awaitStart(id) {
  const poll = async () => {
    const started = document.getElementById("started");
    if (!started) return;
    const r = await getJson(`/api/executions/${encodeURIComponent(id)}`).catch(() => null);
    if (!started.isConnected) return;
    if (!r || !r.started_at) {
      if (!r || r.status === "running") setTimeout(poll, 1000);
      return;
    }
    started.textContent = r.started_at;
    started.classList.remove("muted");
    for (const [el, at] of [["scheduled", r.scheduled_at], ["claimed", r.claimed_at]]) {
      const shown = document.getElementById(el);
      if (shown && at) shown.textContent = at;
    }
  };
  setTimeout(poll, 1000);
}

/** A running execution's elapsed time (ticking each second while the page shows it) and its
 * Kill (asks first), added to `bar`. */
function runningControls(r, bar) {
  const started = Date.parse(r.started_at || r.claimed_at || r.scheduled_at);
  const elapsed = h("span", { id: "elapsed", class: "muted" });
  const tick = () => {
    if (!elapsed.isConnected && elapsed.dataset.shown) return;
    elapsed.dataset.shown = "1";
    elapsed.textContent = isNaN(started) ? "" : `running for ${duration(Math.max(0, Date.now() - started))}`;
    setTimeout(tick, 1000);
  };
  tick();
  const kill = button("Kill", async () => {
    if (!confirm(`Kill ${r.id}?`)) return false;
    await api(`/api/jobs/${encodeURIComponent(r.job)}/kill?execution=${encodeURIComponent(r.id)}`, { method: "POST" });
    return true;
  }, { "aria-label": `Kill ${r.id}`, class: "danger" });
  bar.prepend(kill, elapsed);
}

/** Shows a task's progress (`p`: `{percent, message, at}`) in `el`: a bar when it reported a
 * percentage, its message; nothing when it reported none. */
function showProgress(el, p) {
  if (!p) {
    el.replaceChildren();
    return;
  }
  const pct = typeof p.percent === "number" ? p.percent : null;
  const bar = h("progress", { max: "100", "aria-label": "Progress" });
  if (pct != null) bar.value = pct;
  el.replaceChildren(bar, " ",
    h("span", { class: "progress-text" }, [pct != null ? `${pct}%` : "", p.message || ""].filter(Boolean).join(" · ")),
    p.at ? h("span", { class: "muted small", title: p.at }, ` reported ${localTime(p.at)}`) : "");
}
