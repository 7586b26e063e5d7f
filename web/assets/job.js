// #/job/NAME: one job's page: actions, schedule, running executions, queue, backfills, a chart
// of recent runs, notifications, spec.

import { app, executorsText, h, handlerOf, isPaused, jobTime, labelText, localTime, needs, pauseText, runAsText, stateBadge, statusBadge, svg } from "./format.js";
import { api, explain, getJson, jobPath } from "./api.js";
import { autoRefresh } from "./nav.js";
import { button } from "./controls.js";
import { alertsText, expressionsOf, notifyText, unheardAlerts } from "./forms.js";
import { jobActions } from "./actions.js";
import { durationChart } from "./charts.js";
import { executionsTable } from "./executions.js";

/** A backfill's progress: a bar of its finished items (succeeded, failed, not run) of all,
 * then running and cancelled ones (never requested, or not started, before the cancel), and
 * the counts in words. */
function backfillProgress(c) {
  const finished = c.succeeded + c.failed + c.not_run;
  const total = Math.max(1, c.total);
  let at = 0;
  const part = (n, status) => {
    if (!n) return null;
    const rect = svg("rect", { x: (at / total) * 100, y: 0, width: (n / total) * 100, height: 6, class: `bar s-${status}` });
    at += n;
    return rect;
  };
  const parts = [part(c.succeeded, "succeeded"), part(c.failed, "failed"), part(c.not_run, "skipped"), part(c.running, "running"), part(c.cancelled, "cancelled")].filter(Boolean);
  const words = [`${c.succeeded} succeeded`, `${c.failed} failed`, `${c.not_run} not run`];
  if (c.running) words.push(`${c.running} running`);
  if (c.pending) words.push(`${c.pending} pending`);
  if (c.cancelled) words.push(`${c.cancelled} cancelled`);
  const text = `${finished} of ${c.total} finished: ${words.join(", ")}`;
  return h("div", { class: "backfill-progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": String(c.total), "aria-valuenow": String(finished), "aria-valuetext": text },
    svg("svg", { viewBox: "0 0 100 6", preserveAspectRatio: "none", class: "progress", "aria-hidden": "true" },
      svg("rect", { x: 0, y: 0, width: 100, height: 6, class: "track" }), parts),
    h("div", { class: "small muted" }, text));
}

/** The job page's Backfills section: the job's backfills (newest first) with their progress, a
 * Cancel for running ones, and the items of the one opened (`?backfill=ID` in the URL, so it
 * stays open while the page refreshes). */
function backfillsSection(name, list, opened, openId) {
  const section = h("section", { id: "backfills", "aria-labelledby": "backfills-heading" }, h("h2", { id: "backfills-heading" }, "Backfills"));
  if (list.error) {
    section.append(h("p", { class: "warn" }, explain(list.error)));
    return section;
  }
  const here = `#/job/${encodeURIComponent(name)}`;
  if (list.backfills.length === 0) {
    section.append(h("p", { class: "muted", id: "no-backfills" }, "No backfill yet. “Backfill…” runs a range of past ticks again."));
  } else {
    section.append(h("table", { id: "backfills-table" },
      h("thead", {}, h("tr", {}, ["Backfill", "State", "Range", "Which", "Progress", "Created by", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, list.backfills.map((b) => h("tr", { "data-backfill": b.id, class: b.id === openId ? "selected" : null },
        h("td", { "data-label": "Backfill" }, h("a", { href: `${here}?backfill=${encodeURIComponent(b.id)}`, "aria-current": b.id === openId ? "true" : null, "aria-label": `Backfill ${b.id}: its ticks` }, b.id)),
        h("td", { "data-label": "State" }, h("span", { class: `badge backfill-${b.state}` }, b.state)),
        h("td", { "data-label": "Range" }, `${localTime(b.from)} → ${localTime(b.to)}`),
        h("td", { "data-label": "Which" }, b.which, h("div", { class: "muted small" }, b.overlap === "parallel" ? `parallel, ${b.max_parallel} at once` : "serial")),
        h("td", { "data-label": "Progress" }, backfillProgress(b.counts)),
        h("td", { "data-label": "Created by" }, b.created_by, h("div", { class: "muted small" }, localTime(b.created_at)),
          b.reason ? h("div", { class: "muted small" }, b.reason) : "",
          b.cancelled_by ? h("div", { class: "warn small" }, `cancelled by ${b.cancelled_by}${b.cancelled_at ? ` at ${localTime(b.cancelled_at)}` : ""}`) : ""),
        h("td", { "data-label": "Actions", class: "actions" }, b.state === "running" ? button("Cancel", async () => {
          if (!confirm(`Cancel backfill ${b.id} of ${name}? No further tick is requested; a run already started finishes (kill it to stop it).`)) return false;
          await api(`${jobPath(name)}/backfills/${encodeURIComponent(b.id)}/cancel`, { method: "POST" });
          return true;
        }, { "aria-label": `Cancel backfill ${b.id}`, class: "danger" }) : ""))))));
  }
  if (!openId) return section;
  const panel = h("div", { id: "backfill-items", "aria-live": "polite" });
  if (opened.error) {
    panel.append(h("p", { class: "warn" }, opened.error.status === 404 ? `No backfill ${openId} (finished ones are removed beyond the newest 20).` : explain(opened.error)));
  } else {
    panel.append(
      h("div", { class: "heading start" }, h("h3", {}, `Backfill ${opened.id}`), h("a", { href: here }, "Hide")),
      h("table", {},
        h("thead", {}, h("tr", {}, ["Tick", "Execution", "Status"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, opened.items.map((item) => h("tr", { "data-execution": item.execution_id },
          h("td", { "data-label": "Tick" }, localTime(item.at)),
          h("td", { "data-label": "Execution" }, ["pending", "cancelled"].includes(item.status)
            ? h("span", { class: "muted" }, item.execution_id)
            : h("a", { href: `#/execution/${encodeURIComponent(item.execution_id)}` }, item.execution_id)),
          h("td", { "data-label": "Status" }, statusBadge(item.status)))))));
  }
  section.append(panel);
  return section;
}

/** The job page's Notifications section: the job's newest webhook deliveries (`list`, from
 * `GET /api/notifications?job=…`), each with its event, state (`silenced`: not sent, the
 * target's silence window was open; `no_target`: an alert no target listens for), target, attempts and the execution it is about. A
 * `stale` delivery is about no execution (its id is `{job}@stale-{ms}`): not linked. */
export function notificationsSection(list) {
  const section = h("section", { id: "notifications", "aria-labelledby": "notifications-heading" }, h("h2", { id: "notifications-heading" }, "Notifications"));
  if (list.error) {
    section.append(h("p", { class: "warn" }, explain(list.error)));
    return section;
  }
  if (list.notifications.length === 0) {
    section.append(h("p", { class: "muted", id: "no-notifications" }, "No notifications."));
    return section;
  }
  const realExecution = (id) => Boolean(id) && !id.includes("@stale-");
  section.append(h("table", { id: "notifications-table" },
    h("thead", {}, h("tr", {}, ["Time", "Event", "State", "Target", "Attempts", "Execution"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, list.notifications.map((n) => {
      const attempts = n.attempts || [];
      const last = attempts[attempts.length - 1];
      return h("tr", { "data-delivery": n.id, "data-event": n.event, "data-state": n.state },
        h("td", { "data-label": "Time", title: n.created_at }, localTime(n.created_at)),
        h("td", { "data-label": "Event" }, h("code", {}, n.event)),
        h("td", { "data-label": "State" }, h("span", {
          class: `badge notify-${n.state}`,
          title: n.state === "silenced" ? "Not sent: the target's silence window for this event of the job was open"
            : n.state === "no_target" ? `Not sent: no notify target listens for ${n.event}` : null,
        }, n.state)),
        h("td", { "data-label": "Target", title: n.target }, n.target_name || n.target || h("span", { class: "muted" }, "none"),
          n.default_target ? h("div", { class: "muted small" }, "the worker's default target") : ""),
        h("td", { "data-label": "Attempts" }, String(attempts.length),
          last && last.error ? h("div", { class: "muted small" }, last.error) : ""),
        h("td", { "data-label": "Execution" }, realExecution(n.execution_id)
          ? h("a", { href: `#/execution/${encodeURIComponent(n.execution_id)}` }, n.execution_id)
          : h("span", { class: "muted" }, n.execution_id)));
    }))));
  return section;
}

/** One job: actions, schedule, running executions, backfills, a chart of recent runs, its
 * notifications, its spec. Refreshes every 5 s, every 2 s while a backfill runs. */
export async function jobView(params, rest) {
  const name = decodeURIComponent(rest);
  const openId = params.get("backfill") || "";
  const [{ body: j }, workers, recent, backfills, opened, notifications] = await Promise.all([
    api(jobPath(name)),
    getJson("/api/workers"),
    getJson(`/api/executions?job=${encodeURIComponent(name)}&limit=100`).catch((e) => ({ error: e })),
    getJson(`${jobPath(name)}/backfills`).catch((e) => ({ error: e })),
    openId ? getJson(`${jobPath(name)}/backfills/${encodeURIComponent(openId)}`).catch((e) => ({ error: e })) : null,
    getJson(`/api/notifications?job=${encodeURIComponent(name)}&limit=20`).catch((e) => ({ error: e })),
  ]);
  const spec = j.spec || {};
  const running = workers.workers.flatMap((w) => w.running_executions || []).filter((r) => r.job === name);
  const alerts = alertsText(spec.alerts);
  const unheard = unheardAlerts(spec);
  const root = app();
  root.replaceChildren(
    h("div", { class: "heading start" }, h("h1", {}, j.name), stateBadge(j), healthBadge(recent)),
    spec.description ? h("p", { class: "muted" }, spec.description) : "",
    summaryLine(spec),
    isPaused(j) ? h("p", { class: "warn", id: "pause" }, `This job is ${pauseText(j)}.`,
      j.paused && j.paused.execution_id
        ? [" ", h("a", { href: `#/execution/${encodeURIComponent(j.paused.execution_id)}` }, "The failure that paused it")] : "") : "",
    h("div", { class: "toolbar actions" }, jobActions(j, { detail: true, running: running.length })),
    h("dl", { class: "fields" },
      h("dt", {}, "Team"), h("dd", { id: "team" }, spec.team || h("span", { class: "muted" }, "none (global roles only)")),
      h("dt", {}, "Schedule"), h("dd", {}, h("code", {}, expressionsOf(spec).join("; ")), ` — ${j.schedule_description} (${spec.timezone || "UTC"})`),
      h("dt", {}, "Next runs"), h("dd", {}, (j.next_runs || []).length
        ? h("ul", { class: "plain" }, j.next_runs.map((t) => h("li", {}, `${jobTime(t)} · ${localTime(t)} local`)))
        : h("span", { class: "muted" }, isPaused(j) ? "paused" : "none")),
      h("dt", {}, "Task"), h("dd", { id: "task" }, taskText(spec.task)),
      h("dt", {}, "Workers"), h("dd", { id: "workers" }, handlerOf(j)
        ? [executorsText(j, workers.workers), Object.keys(spec.selector || {}).length ? ` (selector ${labelText(spec.selector)})` : ""]
        : j.eligible_workers === 0
          ? h("span", { class: "warn" }, `no live worker ${needs(spec.selector, spec.task && spec.task.user)}`)
          : `${j.eligible_workers} eligible${Object.keys(spec.selector || {}).length ? ` (selector ${labelText(spec.selector)})` : ""}`),
      spec.pool ? [h("dt", {}, "Pool"), h("dd", { id: "pool" }, h("a", { href: `#/pools/${encodeURIComponent(spec.pool)}` }, spec.pool),
        ` — ${spec.pool_slots || 1} slot${(spec.pool_slots || 1) === 1 ? "" : "s"} per run`)] : "",
      h("dt", {}, "Priority"), h("dd", { id: "priority" }, String(spec.priority ?? 50), spec.priority == null ? h("span", { class: "muted" }, " (the default)") : ""),
      alerts ? [h("dt", {}, "Alerts"), h("dd", {}, h("span", { id: "alerts" }, alerts), unheard.length
        ? h("div", { class: "warn", id: "alerts-unheard" }, `No notify target listens for ${unheard.join(", ")}: each one raised is recorded no_target and sent nowhere.`)
        : "")] : "",
      h("dt", {}, "Revision"), h("dd", {}, String(j.revision))),
    h("h2", {}, "Running"),
    running.length === 0
      ? h("p", { class: "muted", id: "running" }, "Nothing running.")
      : h("ul", { id: "running" }, running.map((r) => h("li", {},
        h("a", { href: `#/execution/${encodeURIComponent(r.id)}` }, r.id), ` on ${r.worker_id} since ${localTime(r.started_at)} `,
        button("Kill", async () => {
          if (!confirm(`Kill ${r.id}?`)) return false;
          await api(`${jobPath(name)}/kill?execution=${encodeURIComponent(r.id)}`, { method: "POST" });
          return true;
        }, { "aria-label": `Kill ${r.id}`, class: "danger" })))),
    spec.concurrency === "queue" || (j.queue || []).length ? queueSection(j) : "",
    backfillsSection(name, backfills, opened, openId));
  root.append(h("h2", {}, "Recent executions"));
  if (recent.error) {
    root.append(h("p", { class: "warn" }, explain(recent.error)));
  } else if (recent.executions.length === 0) {
    root.append(h("div", { class: "empty" }, "No execution yet."));
  } else {
    root.append(durationChart(recent.executions), executionsTable(recent.executions.slice(0, 20)),
      h("p", {}, h("a", { href: `#/executions?job=${encodeURIComponent(name)}` }, "All executions of this job →")));
  }
  root.append(notificationsSection(notifications));
  root.append(h("h2", {}, "Spec"), h("pre", { class: "output", "aria-label": "Spec" }, JSON.stringify(spec, null, 2)));
  const backfilling = !backfills.error && backfills.backfills.some((b) => b.state === "running");
  autoRefresh(backfilling ? 2000 : 5000);
}

/** The job's health from its recent records (newest first): how many of its latest ended runs
 * failed, timed out or were lost in a row (runs still going, skipped and missed ticks do not
 * count), else whether its last run succeeded, or that it never ran. */
function health(executions) {
  const ended = executions.filter((r) => !["running", "skipped", "missed"].includes(r.status));
  if (!ended.length) return { word: "never run", level: "muted" };
  const streak = ended.findIndex((r) => !["failed", "timed_out", "lost"].includes(r.status));
  const failures = streak < 0 ? ended.length : streak;
  if (failures === 1) return { word: "last run failed", level: "bad" };
  if (failures > 1) return { word: `${failures}${streak < 0 && ended.length >= 100 ? "+" : ""} failures in a row`, level: "bad" };
  return ended[0].status === "succeeded" ? { word: "healthy: last run succeeded", level: "ok" } : { word: `last run ${ended[0].status}`, level: "warn" };
}

/** The health badge of the job page's heading ("records unavailable" without MongoDB). */
function healthBadge(recent) {
  const { word, level } = recent.error ? { word: "records unavailable", level: "muted" } : health(recent.executions);
  return h("span", { class: `badge health-${level}`, id: "health" }, word);
}

/** The job page's summary line: timeout, retries, concurrency, labels, notify targets. */
function summaryLine(spec) {
  const r = spec.retries;
  const item = (name, id, ...value) => h("span", { class: "summary-item" }, h("span", { class: "muted" }, `${name} `), h("span", { id }, ...value));
  const labels = Object.entries(spec.labels || {});
  return h("p", { class: "summary", id: "summary" },
    item("timeout", "summary-timeout", spec.timeout || "none"),
    item("retries", "summary-retries", r && r.max ? `${r.max} (backoff ${r.backoff || "10s"}${r.max_backoff ? `, at most ${r.max_backoff}` : ""})` : "none"),
    item("concurrency", "summary-concurrency", spec.concurrency || "allow"),
    item("labels", "summary-labels", labels.length ? labels.map(([k, v]) => h("span", { class: "chip" }, `${k}=${v}`)) : "none"),
    item("notify", "notify", Array.isArray(spec.notify)
      ? spec.notify.length ? notifyText(spec.notify) : "nobody (notify: [])"
      : h("span", { class: "muted" }, "the workers' default targets")));
}

/** The executions waiting in a `concurrency: queue` job's queue, oldest first (the next to run
 * first), each with when it was due and what it waits behind. */
function queueSection(j) {
  const queue = j.queue || [];
  const limit = (j.spec && j.spec.max_queue) || 5;
  return h("section", { "aria-label": "Queue" },
    h("h2", {}, `Queue (${queue.length} of ${limit})`),
    queue.length === 0
      ? h("p", { class: "muted", id: "queue" }, "Nothing waiting.")
      : h("ol", { id: "queue" }, queue.map((q) => h("li", {},
        h("code", {}, q.execution_id), ` due ${jobTime(q.scheduled_at)} (${q.trigger}), waiting since ${localTime(q.queued_at)}`,
        q.behind ? [" behind ", h("a", { href: `#/execution/${encodeURIComponent(q.behind)}` }, q.behind)] : ""))));
}

/** A job's task on its page: the command, the HTTP request, the gRPC call or the handler. */
function taskText(task) {
  if (!task) return "";
  if (task.kind === "handler") return ["handler ", h("code", {}, task.name)];
  if (task.kind === "http") return h("code", {}, `${task.method || "GET"} ${task.url}`);
  if (task.kind === "grpc") return ["gRPC ", h("code", {}, task.method), " at ", h("code", {}, task.endpoint)];
  return [h("code", {}, task.command), runAsText(task)];
}
