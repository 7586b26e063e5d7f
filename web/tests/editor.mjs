// Browser test of the job editor and the job page, run by tests/tests/it/features/ui.rs:
//   node editor.mjs <master url> <screenshot dir>
// The harness runs one worker and no jobs (and a gRPC server at $GRPC_ENDPOINT). The test creates
// a job through the form (a wrong schedule first), watches it run, opens its output, loses a
// concurrent edit and reloads, edits it as JSON, makes a gRPC job and runs it, and deletes a job
// from its page.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, jobAction, launch, open } from "./lib.mjs";

const { base, shots } = args("editor.mjs");
const browser = await launch();
const COMMAND = 'echo "made-by-form attempt $ETCRON_ATTEMPT"; test "$PW" = "hunter$((1 + 1))" && echo secret-reached-the-task';
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
try {
  const { page, check } = await open(browser, base, { height: 1000 });
  await page.goto(base + "/#/jobs");
  await page.locator(".empty").waitFor();
  await page.getByRole("link", { name: "New job" }).first().click();
  await page.locator("#f-name").waitFor();

  // A schedule that does not parse: the live preview flags it, and so does the API on save.
  await page.locator("#f-name").fill("made-in-ui");
  await page.locator("#f-description").fill("created through the form");
  await page.locator("#f-task-command").fill(COMMAND);
  await page.locator("#f-task-secret-env").fill("PW=hunter2");
  await page.locator("#f-task-params").fill('["REPORT_DAY"]');
  await page.locator("#f-timezone").fill("UTC");
  await page.locator("#f-schedule").fill("every two seconds");
  await page.locator("#err-f-schedule").waitFor();
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/made-in-ui") && r.status() === 400),
    page.getByRole("button", { name: "Create job" }).click(),
  ]);
  const scheduleError = page.locator("#err-f-schedule");
  await scheduleError.waitFor();
  assert.match(await scheduleError.innerText(), /\S/, "the error says what is wrong");
  assert.equal(await page.locator("#f-schedule").getAttribute("aria-invalid"), "true");
  // The error summary above the form takes the focus; its entry leads to the field.
  assert.equal(await page.evaluate(() => document.activeElement.id), "error-summary", "focus goes to the summary");
  await page.locator("#error-summary").getByRole("button", { name: /^Schedule \(schedule\): / }).click();
  assert.equal(await page.evaluate(() => document.activeElement.id), "f-schedule", "then to the field");
  assert.equal(page.url().endsWith("#/new"), true, "still on the form");
  await shot(page, "editor-invalid-schedule.png");

  // Fixed: the preview reads it back in words and lists the next 10 fire times.
  await page.locator("#f-schedule").fill("*/2 * * * * *");
  await page.locator("#preview ol.next li").nth(9).waitFor();
  assert.equal(await page.locator("#preview ol.next li").count(), 10);
  assert.match(await page.locator("#preview .reading").innerText(), /\S/);
  assert.equal(await page.locator("#err-f-schedule").isHidden(), true, "the error is gone");
  await shot(page, "editor-preview.png");
  await page.getByRole("button", { name: "Create job" }).click();
  await page.waitForFunction(() => location.hash === "#/job/made-in-ui");

  // The job page: it runs (the page refreshes itself), with the chart and the runs listed.
  await page.locator("#duration-chart rect.s-succeeded").nth(1).waitFor({ timeout: 30_000 });
  assert.match(await page.locator("main").innerText(), /created through the form/);
  assert.match(await page.locator("pre[aria-label=Spec]").innerText(), /"schedule": "\*\/2 \* \* \* \* \*"/);
  await shot(page, "job-detail.png");
  await page.locator("tbody tr a").first().click();
  await page.getByLabel("Output").waitFor();
  assert.match(await page.getByLabel("Output").innerText(), /made-by-form attempt 1\nsecret-reached-the-task/);
  // The secret reached the task, but the API never shows it.
  const shown = await call(base, "GET", "/api/jobs/made-in-ui");
  assert.equal(shown.body.spec.task.secret_env.PW, null);
  assert.ok(!JSON.stringify(shown.body).includes("hunter2"));

  // A concurrent edit: someone else saves between our read and our save.
  await page.goto(`${base}/#/edit/made-in-ui`);
  await page.waitForFunction(() => document.getElementById("f-schedule").value === "*/2 * * * * *");
  assert.equal(await page.locator("#f-task-secret-env").inputValue(), "PW=", "a kept secret shows without its value");
  const current = await call(base, "GET", "/api/jobs/made-in-ui");
  const theirs = { ...current.body.spec, description: "changed by someone else" };
  assert.equal((await call(base, "PUT", "/api/jobs/made-in-ui", theirs)).status, 200);
  await page.locator("#f-description").fill("my change");
  await page.getByRole("button", { name: "Save changes" }).click();
  const conflict = page.locator(".conflict");
  await conflict.waitFor();
  assert.match(await conflict.innerText(), /changed this job while you were editing/);
  await shot(page, "editor-conflict.png");
  await page.getByRole("button", { name: "Reload their version" }).click();
  await page.waitForFunction(() => document.getElementById("f-description").value === "changed by someone else");
  await page.locator("#f-description").fill("my change, after reloading");
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.waitForFunction(() => location.hash === "#/job/made-in-ui");
  await page.locator("main > p.muted", { hasText: "my change, after reloading" }).waitFor();

  // The JSON view: copy out the whole spec, paste one back; API errors name the field there too.
  await page.goto(`${base}/#/edit/made-in-ui`);
  await page.waitForFunction(() => document.getElementById("f-schedule").value === "*/2 * * * * *");
  await page.getByRole("tab", { name: "JSON" }).click();
  const json = page.getByLabel("Job spec JSON");
  const spec = JSON.parse(await json.inputValue());
  assert.equal(spec.schedule, "*/2 * * * * *");
  assert.equal(spec.task.command, COMMAND);
  assert.deepEqual(spec.task.secret_env, { PW: null }, "null keeps the stored secret");
  assert.deepEqual(spec.task.params, { REPORT_DAY: {} }, "the run parameters survive saves from the form");
  await json.fill(JSON.stringify({ ...spec, timeout: "soon" }, null, 2));
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.locator("#err-json").waitFor();
  assert.match(await page.locator("#err-json").innerText(), /^timeout: /);
  const limits = { memory: "64MiB", cpu: "30s", open_files: 64, output: 4096 };
  await json.fill(JSON.stringify({ ...spec, enabled: false, labels: { team: "ui" }, limits }, null, 2));
  await shot(page, "editor-json.png");
  await page.getByRole("button", { name: "Apply to form" }).click();
  await page.locator("#job-form").waitFor();
  assert.equal(await page.locator("#f-labels").inputValue(), "team=ui");
  assert.equal(await page.locator("#f-enabled").isChecked(), false);
  assert.equal(await page.locator("#f-limits-memory").inputValue(), "64MiB");
  assert.equal(await page.locator("#f-limits-cpu").inputValue(), "30s");
  assert.equal(await page.locator("#f-limits-open-files").inputValue(), "64");
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.waitForFunction(() => location.hash === "#/job/made-in-ui");
  await page.locator("h1 + .badge.paused").waitFor();
  const saved = (await call(base, "GET", "/api/jobs/made-in-ui")).body.spec;
  assert.equal(saved.labels.team, "ui");
  assert.deepEqual(saved.limits, { memory: "64MiB", cpu: "30s", open_files: 64, output: "4KiB" }, "limits.output is kept");

  // An HTTP task shows its own fields; a name already taken is refused at the name.
  await page.goto(`${base}/#/new`);
  await page.locator("#f-task-kind").selectOption("http");
  assert.equal(await page.locator("#f-task-command").isHidden(), true);
  await page.locator("#f-name").fill("made-in-ui");
  await page.locator("#f-schedule").fill("@daily");
  await page.locator("#f-task-url").fill("http://127.0.0.1:9/hook");
  await page.getByRole("button", { name: "Create job" }).click();
  await page.locator("#err-f-name").waitFor();
  assert.match(await page.locator("#err-f-name").innerText(), /already exists/);

  // An asynchronous HTTP task: its polling as JSON; a bad value is flagged at the field.
  await page.locator("#f-name").fill("async-in-ui");
  await page.locator("#f-task-async").fill('{"interval": "10ms"}');
  await page.getByRole("button", { name: "Create job" }).click();
  await page.locator("#err-f-task-async").waitFor();
  assert.match(await page.locator("#err-f-task-async").innerText(), /between 100ms and 1h/);
  await page.locator("#f-task-async").fill('{"interval": "2s", "timeout": "1h"}');
  await page.getByRole("button", { name: "Create job" }).click();
  await page.waitForFunction(() => location.hash === "#/job/async-in-ui");
  const polled = (await call(base, "GET", "/api/jobs/async-in-ui")).body.spec.task.async;
  assert.equal(polled.interval, "2s");
  assert.equal(polled.timeout, "1h");
  await page.goto(`${base}/#/edit/async-in-ui`);
  await page.waitForFunction(() => JSON.parse(document.getElementById("f-task-async")?.value || "{}").interval === "2s");
  assert.equal((await call(base, "DELETE", "/api/jobs/async-in-ui")).status, 204);
  // A gRPC call (at the server tests/tests/it/features/ui.rs started): its own fields; a request that is not
  // JSON is flagged at the request, a method the API refuses at the method; then it runs from its
  // page and the output is the server's answer.
  const grpcEndpoint = process.env.GRPC_ENDPOINT;
  assert.ok(grpcEndpoint, "GRPC_ENDPOINT: the test gRPC server's address");
  await page.goto(`${base}/#/new`);
  await page.locator("#f-task-kind").selectOption("grpc");
  assert.equal(await page.locator("#f-task-command").isHidden(), true);
  assert.equal(await page.locator("#f-task-url").isHidden(), true);
  await page.locator("#f-name").fill("grpc-in-ui");
  await page.locator("#f-schedule").fill("@yearly");
  await page.locator("#f-task-endpoint").fill(grpcEndpoint);
  await page.locator("#f-task-grpc-method").fill("etcron.test.Echo.Echo");
  await page.locator("#f-task-request").fill('{"text": "from the form",');
  await page.getByRole("button", { name: "Create job" }).click();
  await page.locator("#err-f-task-request").waitFor();
  assert.match(await page.locator("#err-f-task-request").innerText(), /not valid JSON/);
  await page.locator("#f-task-request").fill('{"text": "from the form", "count": 2}');
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/grpc-in-ui") && r.status() === 400),
    page.getByRole("button", { name: "Create job" }).click(),
  ]);
  await page.locator("#err-f-task-grpc-method").waitFor();
  assert.match(await page.locator("#err-f-task-grpc-method").innerText(), /package\.Service\/Method/);
  await page.locator("#f-task-grpc-method").fill("etcron.test.Echo/Echo");
  await page.locator("#f-task-metadata").fill("x-team: ui");
  await page.locator("#f-task-secret-metadata").fill("authorization: Bearer from-the-form");
  await shot(page, "editor-grpc.png");
  await page.getByRole("button", { name: "Create job" }).click();
  await page.waitForFunction(() => location.hash === "#/job/grpc-in-ui");
  await page.locator("#task", { hasText: "etcron.test.Echo/Echo" }).waitFor();
  assert.deepEqual((await call(base, "GET", "/api/jobs/grpc-in-ui")).body.spec.task, {
    kind: "grpc", endpoint: grpcEndpoint, method: "etcron.test.Echo/Echo", request: { text: "from the form", count: 2 },
    metadata: { "x-team": "ui" }, secret_metadata: { authorization: null },
  });
  // "Run now" lands on the run's own page, which shows the record once a worker ran it.
  await jobAction(page, "grpc-in-ui", "Run grpc-in-ui now");
  await page.waitForFunction(() => location.hash.startsWith("#/execution/grpc-in-ui"));
  await page.getByLabel("Output").filter({ hasText: "gRPC OK" }).waitFor({ timeout: 30_000 });
  const answer = await page.getByLabel("Output").innerText();
  assert.match(answer, /^gRPC OK\n/);
  assert.equal(JSON.parse(answer.slice(answer.indexOf("\n") + 1)).text, "from the form");
  // Edited again: the form shows the call as saved, the kept secret without its value.
  await page.goto(`${base}/#/edit/grpc-in-ui`);
  await page.waitForFunction(() => document.getElementById("f-task-grpc-method").value === "etcron.test.Echo/Echo");
  assert.deepEqual(JSON.parse(await page.locator("#f-task-request").inputValue()), { text: "from the form", count: 2 });
  assert.equal(await page.locator("#f-task-secret-metadata").inputValue(), "authorization:");
  assert.equal(await page.locator("#f-task-method").isHidden(), true, "the HTTP method is not shown");
  assert.equal((await call(base, "DELETE", "/api/jobs/grpc-in-ui")).status, 204);

  // Delete from the job page, after confirming.
  await page.goto(`${base}/#/job/made-in-ui`);
  page.once("dialog", (d) => d.accept());
  await jobAction(page, "made-in-ui", "Delete made-in-ui");
  await page.waitForFunction(() => location.hash === "#/jobs");
  await page.locator(".empty").waitFor();

  // Several schedules (one per line) within a window: the preview merges them, the API stores
  // them as `schedules`, a bad line is flagged at the schedule field, the job page shows both.
  await page.goto(`${base}/#/new`);
  await page.locator("#f-name").fill("two-schedules");
  await page.locator("#f-task-command").fill("true");
  await page.locator("#f-timezone").fill("UTC");
  await page.locator("#f-active-from").fill("2030-01-04T00:00:00Z");
  await page.locator("#f-jitter").fill("4m");
  await page.locator("#f-schedule").fill("0 9 * * 1-5\nbad");
  await page.locator("#err-f-schedule").waitFor();
  await page.locator("#f-schedule").fill("0 9 * * 1-5\n0 12 * * 6,0");
  await page.locator("#preview ol.next li").nth(2).waitFor();
  const merged = await page.locator("#preview ol.next li").allInnerTexts();
  // Jitter moves each of them by up to 4 minutes.
  assert.match(merged[0], /2030-01-04 09:0[0-4]/, "Friday 09:00, the first tick from active_from");
  assert.match(merged[1], /2030-01-05 12:0[0-4]/, "then Saturday noon");
  assert.match(merged[2], /2030-01-06 12:0[0-4]/, "and Sunday noon");
  assert.match(await page.locator("#preview .reading").innerText(), /; .*from 2030-01-04.*up to 4m/);
  await shot(page, "editor-schedules.png");
  await page.getByRole("button", { name: "Create job" }).click();
  await page.waitForFunction(() => location.hash === "#/job/two-schedules");
  await page.locator("main dd code", { hasText: "0 9 * * 1-5; 0 12 * * 6,0" }).waitFor();
  const stored = (await call(base, "GET", "/api/jobs/two-schedules")).body.spec;
  assert.deepEqual(stored.schedules, ["0 9 * * 1-5", "0 12 * * 6,0"]);
  assert.equal(stored.schedule, undefined);
  assert.equal(stored.active_from, "2030-01-04T00:00:00Z");
  assert.equal(stored.jitter, "4m");
  await page.goto(`${base}/#/edit/two-schedules`);
  await page.waitForFunction(() => document.getElementById("f-schedule").value === "0 9 * * 1-5\n0 12 * * 6,0");
  assert.equal(await page.locator("#f-active-from").inputValue(), "2030-01-04T00:00:00Z");

  // Skip calendars: one made on the calendars page (a bad day is named first), then named by
  // the job: the preview marks the ticks it skips.
  await page.goto(`${base}/#/calendars`);
  await page.locator(".empty").waitFor();
  await page.locator("#f-name").fill("ui-days");
  await page.locator("#f-dates").fill("2030-02-30");
  await page.getByRole("button", { name: "Save calendar" }).click();
  await page.locator("#err-f-dates").waitFor();
  assert.match(await page.locator("#err-f-dates").innerText(), /YYYY-MM-DD/);
  await page.locator("#f-dates").fill("2030-01-05\n2030-01-06..2030-01-07");
  await page.getByRole("button", { name: "Save calendar" }).click();
  await page.locator('tr[data-calendar="ui-days"]').waitFor();
  assert.match(await page.locator('tr[data-calendar="ui-days"]').innerText(), /2030-01-05, 2030-01-06\.\.2030-01-07/);
  await shot(page, "calendars.png");
  await page.goto(`${base}/#/edit/two-schedules`);
  await page.waitForFunction(() => document.getElementById("f-schedule").value.includes("0 12"));
  await page.locator("#f-skip-calendars").fill("ui-days");
  await page.locator("#preview li.skipped").nth(2).waitFor();
  const skippedTicks = await page.locator("#preview li.skipped").allInnerTexts();
  assert.match(skippedTicks[0], /^2030-01-05 12:0\d.*skipped \(calendar ui-days\)$/);
  assert.match(skippedTicks[2], /^2030-01-07 09:0\d/, "Monday 09:00 is in the range");
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.waitForFunction(() => location.hash === "#/job/two-schedules");
  assert.deepEqual((await call(base, "GET", "/api/jobs/two-schedules")).body.spec.skip_calendars, ["ui-days"]);
  assert.equal((await call(base, "GET", "/api/jobs/made-in-ui")).status, 404);

  check();
  console.log("editor and job page: ok");
} finally {
  await browser.close();
}
