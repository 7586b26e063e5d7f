// The editor's form: a control for every spec field, read into a spec and filled from one.

import { h } from "./format.js";
import { ALERT_FIELDS, expressionsOf, formField, formatMap, idOf, input, names, numberOr, parseMap, scheduleLines, secrets, select, textarea } from "./forms.js";

/** The editor's form; `read()` gives the spec, `fill(spec)` shows one. */
export function jobForm(isNew) {
  const f = {};
  const add = (name, el) => { f[name] = el; return el; };
  const fields = {
    name: formField("name", "Name", add("name", input({ required: true, pattern: "[a-z0-9][a-z0-9._-]{0,127}", placeholder: "nightly-report", disabled: !isNew })),
      "Lowercase letters, digits, . _ -; cannot be changed later."),
    description: formField("description", "Description", add("description", input({ placeholder: "What this job is for" }))),
    team: formField("team", "Team", add("team", input({ pattern: "[a-z0-9][a-z0-9-]{0,62}", placeholder: "payments", list: "team-list" })),
      "Who may see and change the job: callers with a role on this team (and global roles). Empty: global roles only."),
    enabled: h("div", { class: "field check", "data-field": "enabled" },
      h("label", {}, add("enabled", h("input", { type: "checkbox", name: "enabled", id: idOf("enabled") })), " Enabled (runs on schedule)")),
    labels: formField("labels", "Labels", add("labels", textarea({ rows: 2, placeholder: "team=data" })), "One key=value per line."),
    schedule: formField("schedule", "Schedule", add("schedule", textarea({ rows: 2, required: true, class: "mono", placeholder: "0 30 2 * * *  or  @every 5m  or  @daily" })),
      "Crontab (5 fields, or 6/7 with seconds first), @hourly/@daily/…, @every 30s, @at 2026-12-01T00:00:00Z. One per line: several lines merge their ticks, one run per instant."),
    activeFrom: formField("active_from", "Active from", add("active_from", input({ placeholder: "always, e.g. 2026-12-01T00:00:00Z" })), "No tick before this instant (RFC 3339)."),
    activeUntil: formField("active_until", "Active until", add("active_until", input({ placeholder: "always, e.g. 2027-01-01T00:00:00Z" })), "No tick after this instant (RFC 3339)."),
    skipCalendars: formField("skip_calendars", "Skip calendars", add("skip_calendars", input({ placeholder: "holidays-de" })),
      "No run on the days of these calendars (#/calendars); comma-separated."),
    jitter: formField("jitter", "Jitter", add("jitter", input({ placeholder: "none, e.g. 30s" })), "Each tick moved later by up to this long, the same on every worker; spreads jobs due at the same moment."),
    timezone: formField("timezone", "Timezone", add("timezone", input({ placeholder: "UTC", list: "timezones" })), "IANA name, e.g. Europe/Berlin."),
    kind: formField("task.kind", "Task", add("task.kind", select("task.kind"))),
    command: formField("task.command", "Command", add("task.command", textarea({ rows: 3, placeholder: "pg_dump db > /backups/db.sql", class: "mono" })), "Runs with /bin/sh -c in its own process group."),
    env: formField("task.env", "Environment", add("task.env", textarea({ rows: 2, placeholder: "KEY=value", class: "mono" })), "One KEY=value per line."),
    secretEnv: formField("task.secret_env", "Secret environment", add("task.secret_env", textarea({ rows: 2, placeholder: "DB_PASSWORD=…", class: "mono" })),
      "KEY=value per line. Values are never shown again; KEY= with nothing after it keeps the stored value."),
    params: formField("task.params", "Run parameters", add("task.params", textarea({ rows: 2, class: "mono", placeholder: '{"REPORT_DAY": {"default": "today", "pattern": "[0-9-]+|today"}}' })),
      "JSON: the only variables a manual run may set (a list of names, or NAME: {default, pattern, description}); empty for none."),
    handlerName: formField("task.name", "Handler", add("task.name", input({ placeholder: "hot-list", pattern: "[A-Za-z0-9][A-Za-z0-9._-]{0,127}", class: "mono" })),
      "A handler an executor registered (an application embedding etcron-sdk): only the live executors that have it run the job. Its environment and run parameters reach it as ctx.env(NAME)."),
    cwd: formField("task.cwd", "Working directory", add("task.cwd", input({ placeholder: "/srv/app" }))),
    user: formField("task.user", "Run as user", add("task.user", input({ placeholder: "the worker's own" })),
      "Only workers running as root that list this user in run_as_users run the job."),
    group: formField("task.group", "Run as group", add("task.group", input({ placeholder: "the user's primary group" })), "One of the user's groups."),
    method: formField("task.method", "Method", add("task.method", select("task.method"))),
    url: formField("task.url", "URL", add("task.url", input({ placeholder: "https://example.internal/hook", type: "url" }))),
    headers: formField("task.headers", "Headers", add("task.headers", textarea({ rows: 2, placeholder: "Accept: application/json", class: "mono" })), "One Name: value per line."),
    secretHeaders: formField("task.secret_headers", "Secret headers", add("task.secret_headers", textarea({ rows: 2, placeholder: "Authorization: Bearer …", class: "mono" })),
      "Name: value per line. Never shown again; Name: with nothing after it keeps the stored value."),
    body: formField("task.body", "Body", add("task.body", textarea({ rows: 3, class: "mono" }))),
    expect: formField("task.expect_status", "Expected status", add("task.expect_status", input({ inputmode: "numeric", placeholder: "any 2xx" }))),
    resultPointer: formField("task.result_pointer", "Result pointer", add("task.result_pointer", input({ placeholder: "none, e.g. /data (\"\" the whole body)", class: "mono" })),
      "A JSON pointer into a successful response's body: the run's result."),
    asynchronous: formField("task.async", "Asynchronous", add("task.async", textarea({ rows: 3, class: "mono", placeholder: '{"interval": "5s", "timeout": "2h"}' })),
      "JSON; empty for a plain request. Set, a 202 Accepted answer's status URL (its Location) is polled until its state is done or failed; a kill or timeout sends DELETE there."),
    endpoint: formField("task.endpoint", "Endpoint", add("task.endpoint", input({ placeholder: "http://10.0.0.5:50051", type: "url" })),
      "http:// for plaintext, https:// for TLS: scheme, host and port only."),
    grpcMethod: formField("task.method", "Method", add("grpc.method", input({ placeholder: "package.Service/Method", class: "mono" })),
      "A unary method. Its descriptors come from the server's reflection service, or from the descriptor set below.", "f-task-grpc-method"),
    request: formField("task.request", "Request (JSON)", add("task.request", textarea({ rows: 4, placeholder: "{\"month\": \"2026-11\"}", class: "mono" })),
      "The request message in proto3 JSON; empty for {} (every field at its default)."),
    metadata: formField("task.metadata", "Metadata", add("task.metadata", textarea({ rows: 2, placeholder: "x-team: data", class: "mono" })), "One name: value per line; lowercase names."),
    secretMetadata: formField("task.secret_metadata", "Secret metadata", add("task.secret_metadata", textarea({ rows: 2, placeholder: "authorization: Bearer …", class: "mono" })),
      "name: value per line. Never shown again; name: with nothing after it keeps the stored value."),
    descriptorSet: formField("task.descriptor_set", "Descriptor set", add("task.descriptor_set", textarea({ rows: 2, placeholder: "none: ask the server's reflection service", class: "mono" })),
      "Base64 of a FileDescriptorSet (protoc --include_imports --descriptor_set_out=set.pb; base64 -w0 set.pb)."),
    timeout: formField("timeout", "Timeout", add("timeout", input({ placeholder: "none, e.g. 10m" })), "TERM, then KILL, after this long."),
    retries: formField("retries.max", "Retries", add("retries.max", input({ inputmode: "numeric", placeholder: "0" })), "Extra attempts after a failure."),
    backoff: formField("retries.backoff", "Backoff", add("retries.backoff", input({ placeholder: "10s" })), "Doubles per attempt."),
    maxBackoff: formField("retries.max_backoff", "Max backoff", add("retries.max_backoff", input({ placeholder: "5m" }))),
    concurrency: formField("concurrency", "Concurrency", add("concurrency", select("concurrency"))),
    maxQueue: formField("max_queue", "Max queue", add("max_queue", input({ inputmode: "numeric", placeholder: "5" })), "With queue: most ticks waiting; a tick finding it full is skipped."),
    misfire: formField("misfire", "Missed ticks", add("misfire", select("misfire")), "What to do with ticks missed while no worker ran."),
    maxCatchup: formField("max_catchup", "Max catch-up", add("max_catchup", input({ inputmode: "numeric", placeholder: "100" }))),
    startDeadline: formField("start_deadline", "Start deadline", add("start_deadline", input({ placeholder: "10s" })), "A tick not started this long after its time goes to the missed-tick policy."),
    pauseAfter: formField("pause_after_failures", "Pause after failures", add("pause_after_failures", input({ inputmode: "numeric", placeholder: "never" })),
      "Pause the job after this many final failures in a row."),
    loss: formField("on_worker_loss", "On worker loss", add("on_worker_loss", select("on_worker_loss"))),
    memory: formField("limits.memory", "Memory limit", add("limits.memory", input({ placeholder: "none, e.g. 256MiB" })), "Address space of each process; allocations beyond it fail."),
    cpu: formField("limits.cpu", "CPU limit", add("limits.cpu", input({ placeholder: "none, e.g. 30s" })), "CPU time of each process; SIGXCPU when used up."),
    openFiles: formField("limits.open_files", "Open files limit", add("limits.open_files", input({ inputmode: "numeric", placeholder: "none, e.g. 1024" }))),
    mode: formField("mode", "Mode", add("mode", select("mode"))),
    shards: formField("mode.sharded", "Shards", add("mode.sharded", input({ inputmode: "numeric", placeholder: "4" }))),
    pool: formField("pool", "Pool", add("pool", input({ placeholder: "none, e.g. reporting-db", pattern: "[a-z0-9][a-z0-9._-]{0,127}" })),
      "A resource pool (#/pools): each run holds its slots from its claim to its close; a tick that finds the pool full waits in its queue until its start deadline. Concurrency allow or forbid only."),
    poolSlots: formField("pool_slots", "Pool slots", add("pool_slots", input({ inputmode: "numeric", placeholder: "1" })), "Slots of the pool each run holds (1 to 16)."),
    priority: formField("priority", "Priority", add("priority", input({ inputmode: "numeric", placeholder: "50" })),
      "0 to 100: under contention for a pool's slots or a worker's capacity, runs of a higher priority go first."),
    selector: formField("selector", "Selector", add("selector", textarea({ rows: 2, placeholder: "region=eu" })), "Only workers with all these labels run the job."),
    onSuccess: formField("on_success", "On success, run", add("on_success", input({ placeholder: "job-b, job-c" }))),
    onFailure: formField("on_failure", "On failure, run", add("on_failure", input({ placeholder: "alert" }))),
    after: formField("after", "After (workflow)", add("after", input({ placeholder: "extract, transform" })),
      "Runs once per workflow run, after every job listed succeeded in it."),
    paramsFrom: formField("params_from", "Parameters from parents", add("params_from", textarea({ rows: 2, placeholder: "DATE=$.date", class: "mono" })),
      "NAME=path per line: a run parameter taken from the parents' results ($.field, or $job.field)."),
    maxOutput: formField("max_output", "Output kept (bytes)", add("max_output", input({ inputmode: "numeric", placeholder: "the worker's limit" }))),
    lateStart: formField("alerts.late_start", "Late start alert", add("alerts.late_start", input({ placeholder: "none, e.g. 1m" })),
      "Event late: a tick's run has not started this long after its time; 1s to 24h."),
    maxDuration: formField("alerts.max_duration", "Max duration alert", add("alerts.max_duration", input({ placeholder: "none, e.g. 10m" })),
      "Event long_running: a run is still going this long after it started; 1s to 24h."),
    noSuccess: formField("alerts.no_success_within", "No success within", add("alerts.no_success_within", input({ placeholder: "none, e.g. 2h" })),
      "Event stale: no run of the job succeeded for this long; 1s to 30d."),
    outputMatch: formField("alerts.on_output_match", "Output match (regex)", add("alerts.on_output_match", input({ placeholder: "none, e.g. ERROR|panic", class: "mono" })),
      "Event output_match: a run's output matches this regular expression (Rust regex syntax)."),
  };
  const preview = h("div", { class: "preview", id: "preview", "aria-live": "polite" });
  fields.schedule.append(preview);
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  fields.timezone.append(h("datalist", { id: "timezones" }, ["UTC", ...zones].map((z) => h("option", { value: z }))));
  const shellOnly = [fields.command, fields.cwd, fields.user, fields.group];
  // A shell task's values, which a handler task has too.
  const valueFields = [fields.env, fields.secretEnv, fields.params];
  const limitFields = [fields.memory, fields.cpu, fields.openFiles];
  const httpOnly = [fields.method, fields.url, fields.headers, fields.secretHeaders, fields.body, fields.expect, fields.resultPointer, fields.asynchronous];
  const grpcOnly = [fields.endpoint, fields.grpcMethod, fields.request, fields.metadata, fields.secretMetadata, fields.descriptorSet];
  const sync = () => {
    const kind = f["task.kind"].value;
    for (const el of [...shellOnly, ...limitFields]) el.hidden = kind !== "shell";
    for (const el of valueFields) el.hidden = kind !== "shell" && kind !== "handler";
    fields.handlerName.hidden = kind !== "handler";
    for (const el of httpOnly) el.hidden = kind !== "http";
    for (const el of grpcOnly) el.hidden = kind !== "grpc";
    fields.shards.hidden = f.mode.value !== "sharded";
  };
  f["task.kind"].addEventListener("change", sync);
  f.mode.addEventListener("change", sync);
  const group = (legend, ...children) => h("fieldset", {}, h("legend", {}, legend), children);
  const form = h("form", { id: "job-form", novalidate: true, "aria-label": "Job" },
    group("Job", fields.name, fields.team, fields.description, fields.enabled, fields.labels),
    group("Schedule", fields.schedule, fields.timezone, fields.activeFrom, fields.activeUntil, fields.jitter, fields.skipCalendars),
    group("Task", fields.kind, fields.handlerName, fields.command, ...valueFields, fields.cwd, fields.user, fields.group, ...httpOnly, ...grpcOnly),
    group("When things go wrong", fields.timeout, fields.retries, fields.backoff, fields.maxBackoff, fields.concurrency, fields.maxQueue, fields.misfire, fields.maxCatchup, fields.startDeadline, fields.pauseAfter, fields.loss, ...limitFields),
    group("Where it runs", fields.mode, fields.shards, fields.selector, fields.pool, fields.poolSlots, fields.priority),
    group("What runs next", fields.onSuccess, fields.onFailure, fields.after, fields.paramsFrom, fields.maxOutput),
    group("Alerts", h("p", { class: "hint" }, "Sent as notifications to the job's notify targets that ask for the event (notify is edited in the JSON tab). Leave a field empty for no alert."),
      fields.lateStart, fields.maxDuration, fields.noSuccess, fields.outputMatch));

  /** The spec the form describes; a field that cannot be read throws {field, message}. */
  const read = () => {
    const map = (name, sep) => {
      try { return parseMap(f[name].value, sep); } catch (e) { throw Object.assign(new Error(e.message), { field: name }); }
    };
    const spec = { timezone: f.timezone.value.trim() || "UTC", enabled: f.enabled.checked };
    const expressions = scheduleLines(f.schedule.value);
    if (expressions.length > 1) spec.schedules = expressions; else spec.schedule = expressions[0] || "";
    if (f.active_from.value.trim()) spec.active_from = f.active_from.value.trim();
    if (f.active_until.value.trim()) spec.active_until = f.active_until.value.trim();
    if (f.jitter.value.trim()) spec.jitter = f.jitter.value.trim();
    if (names(f.skip_calendars.value).length) spec.skip_calendars = names(f.skip_calendars.value);
    if (f["task.kind"].value === "http") {
      spec.task = { kind: "http", method: f["task.method"].value, url: f["task.url"].value.trim() };
      const headers = map("task.headers", ":");
      if (Object.keys(headers).length) spec.task.headers = headers;
      const secretHeaders = secrets(map("task.secret_headers", ":"));
      if (Object.keys(secretHeaders).length) spec.task.secret_headers = secretHeaders;
      if (f["task.body"].value) spec.task.body = f["task.body"].value;
      if (f["task.expect_status"].value.trim()) spec.task.expect_status = numberOr(f["task.expect_status"].value);
      if (f["task.result_pointer"].value.trim()) {
        const pointer = f["task.result_pointer"].value.trim();
        spec.task.result_pointer = pointer === '""' ? "" : pointer;
      }
      if (f["task.async"].value.trim()) {
        try { spec.task.async = JSON.parse(f["task.async"].value); } catch (e) {
          throw Object.assign(new Error(`Not valid JSON: ${e.message}`), { field: "task.async" });
        }
      }
    } else if (f["task.kind"].value === "grpc") {
      spec.task = { kind: "grpc", endpoint: f["task.endpoint"].value.trim(), method: f["grpc.method"].value.trim() };
      const request = f["task.request"].value.trim();
      try { spec.task.request = request ? JSON.parse(request) : {}; } catch (e) {
        throw Object.assign(new Error(`not valid JSON: ${e.message}`), { field: "task.request" });
      }
      const metadata = map("task.metadata", ":");
      if (Object.keys(metadata).length) spec.task.metadata = metadata;
      const secretMetadata = secrets(map("task.secret_metadata", ":"));
      if (Object.keys(secretMetadata).length) spec.task.secret_metadata = secretMetadata;
      if (f["task.descriptor_set"].value.trim()) spec.task.descriptor_set = f["task.descriptor_set"].value.replace(/\s+/g, "");
    } else {
      const handler = f["task.kind"].value === "handler";
      spec.task = handler ? { kind: "handler", name: f["task.name"].value.trim() } : { kind: "shell", command: f["task.command"].value };
      const env = map("task.env", "=");
      if (Object.keys(env).length) spec.task.env = env;
      const secretEnv = secrets(map("task.secret_env", "="));
      if (Object.keys(secretEnv).length) spec.task.secret_env = secretEnv;
      if (f["task.params"].value.trim()) {
        try { spec.task.params = JSON.parse(f["task.params"].value); } catch (e) {
          throw Object.assign(new Error(`Not valid JSON: ${e.message}`), { field: "task.params" });
        }
      }
    }
    if (spec.task.kind === "shell") {
      if (f["task.cwd"].value.trim()) spec.task.cwd = f["task.cwd"].value.trim();
      if (f["task.user"].value.trim()) spec.task.user = f["task.user"].value.trim();
      if (f["task.group"].value.trim()) spec.task.group = f["task.group"].value.trim();
    }
    if (f.timeout.value.trim()) spec.timeout = f.timeout.value.trim();
    if (f.start_deadline.value.trim()) spec.start_deadline = f.start_deadline.value.trim();
    spec.retries = { max: numberOr(f["retries.max"].value || "0") };
    if (f["retries.backoff"].value.trim()) spec.retries.backoff = f["retries.backoff"].value.trim();
    if (f["retries.max_backoff"].value.trim()) spec.retries.max_backoff = f["retries.max_backoff"].value.trim();
    spec.concurrency = f.concurrency.value;
    if (f.max_queue.value.trim()) spec.max_queue = numberOr(f.max_queue.value);
    spec.misfire = f.misfire.value;
    if (f.max_catchup.value.trim()) spec.max_catchup = numberOr(f.max_catchup.value);
    if (f.pause_after_failures.value.trim()) spec.pause_after_failures = numberOr(f.pause_after_failures.value);
    spec.on_worker_loss = f.on_worker_loss.value;
    spec.mode = f.mode.value === "sharded" ? { sharded: numberOr(f["mode.sharded"].value || "") } : f.mode.value;
    const selector = map("selector", "=");
    if (Object.keys(selector).length) spec.selector = selector;
    if (f.pool.value.trim()) spec.pool = f.pool.value.trim();
    if (f.pool_slots.value.trim()) spec.pool_slots = numberOr(f.pool_slots.value);
    if (f.priority.value.trim()) spec.priority = numberOr(f.priority.value);
    if (names(f.on_success.value).length) spec.on_success = names(f.on_success.value);
    if (names(f.on_failure.value).length) spec.on_failure = names(f.on_failure.value);
    if (names(f.after.value).length) spec.after = names(f.after.value);
    const paramsFrom = map("params_from", "=");
    if (Object.keys(paramsFrom).length) spec.params_from = paramsFrom;
    if (f.description.value.trim()) spec.description = f.description.value.trim();
    if (f.team.value.trim()) spec.team = f.team.value.trim();
    const labels = map("labels", "=");
    if (Object.keys(labels).length) spec.labels = labels;
    if (f.max_output.value.trim()) spec.max_output = numberOr(f.max_output.value);
    const limits = {};
    if (spec.task.kind === "shell") {
      if (f["limits.memory"].value.trim()) limits.memory = numberOr(f["limits.memory"].value);
      if (f["limits.cpu"].value.trim()) limits.cpu = f["limits.cpu"].value.trim();
      if (f["limits.open_files"].value.trim()) limits.open_files = numberOr(f["limits.open_files"].value);
    }
    // `limits.output` (another name for max_output) has no control of its own: keep it.
    if (keptOutput !== undefined && !spec.max_output) limits.output = keptOutput;
    if (Object.keys(limits).length) spec.limits = limits;
    // `alerts` only with the fields filled in; none: no `alerts` at all. The pattern goes as
    // typed (its spaces may matter), the durations trimmed.
    const alerts = {};
    for (const key of ALERT_FIELDS) {
      const value = f[`alerts.${key}`].value;
      if (value.trim()) alerts[key] = key === "on_output_match" ? value : value.trim();
    }
    if (Object.keys(alerts).length) spec.alerts = alerts;
    // `notify` has no controls (edit it in the JSON tab): keep it as loaded, its withheld
    // secrets as `null`, which the API reads as "keep the stored value".
    if (keptNotify !== undefined) spec.notify = keptNotify;
    return spec;
  };

  let keptOutput;
  let keptNotify;
  const fill = (spec, name) => {
    const task = spec.task || { kind: "shell" };
    const limits = spec.limits || {};
    keptOutput = limits.output;
    keptNotify = spec.notify;
    const retries = spec.retries || {};
    const mode = spec.mode && typeof spec.mode === "object" ? "sharded" : spec.mode || "single";
    const alerts = spec.alerts || {};
    const values = {
      name: name || "", team: spec.team || "", description: spec.description || "", labels: formatMap(spec.labels, "="),
      schedule: expressionsOf(spec).join("\n"), timezone: spec.timezone || "UTC", "task.kind": task.kind || "shell",
      active_from: spec.active_from || "", active_until: spec.active_until || "", jitter: spec.jitter || "", skip_calendars: (spec.skip_calendars || []).join(", "),
      "task.command": task.command || "", "task.name": task.kind === "handler" ? task.name || "" : "",
      "task.env": formatMap(task.env, "="), "task.cwd": task.cwd || "",
      "task.params": task.params ? JSON.stringify(task.params, null, 2) : "",
      "task.user": task.user || "", "task.group": task.group || "",
      "task.secret_env": formatMap(task.secret_env, "="), "task.secret_headers": formatMap(task.secret_headers, ": "),
      "task.method": task.kind === "http" ? task.method || "GET" : "GET", "task.url": task.url || "", "task.headers": formatMap(task.headers, ": "),
      "task.endpoint": task.endpoint || "", "grpc.method": task.kind === "grpc" ? task.method || "" : "",
      "task.request": task.kind === "grpc" ? JSON.stringify(task.request || {}, null, 2) : "",
      "task.metadata": formatMap(task.metadata, ": "), "task.secret_metadata": formatMap(task.secret_metadata, ": "),
      "task.descriptor_set": task.descriptor_set || "",
      "task.body": task.body || "", "task.expect_status": task.expect_status ?? "",
      "task.result_pointer": task.result_pointer === "" ? '""' : (task.result_pointer ?? ""),
      "task.async": task.async ? JSON.stringify(task.async, null, 2) : "", timeout: spec.timeout || "", start_deadline: spec.start_deadline || "",
      "retries.max": retries.max ?? 0, "retries.backoff": retries.backoff || "", "retries.max_backoff": retries.max_backoff || "",
      concurrency: spec.concurrency || "allow", max_queue: spec.max_queue ?? "", misfire: spec.misfire || "skip", max_catchup: spec.max_catchup ?? "",
      pause_after_failures: spec.pause_after_failures ?? "",
      on_worker_loss: spec.on_worker_loss || "rerun", mode, "mode.sharded": mode === "sharded" ? spec.mode.sharded : "",
      selector: formatMap(spec.selector, "="), pool: spec.pool || "", pool_slots: spec.pool_slots ?? "", priority: spec.priority ?? "",
      on_success: (spec.on_success || []).join(", "),
      on_failure: (spec.on_failure || []).join(", "), max_output: spec.max_output ?? "",
      after: (spec.after || []).join(", "), params_from: formatMap(spec.params_from, "="),
      "limits.memory": limits.memory ?? "", "limits.cpu": limits.cpu || "", "limits.open_files": limits.open_files ?? "",
      ...Object.fromEntries(ALERT_FIELDS.map((key) => [`alerts.${key}`, alerts[key] ?? ""])),
    };
    for (const [k, v] of Object.entries(values)) f[k].value = String(v);
    f.enabled.checked = spec.enabled !== false;
    sync();
  };
  return { form, f, preview, read, fill };
}
