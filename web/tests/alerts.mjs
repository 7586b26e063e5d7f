// Browser test of SLA alerts (`alerts` of a job spec) and of the job page's Notifications
// section, run by tests/tests/it/features/ui.rs:
//   node alerts.mjs <master url> <screenshot dir> [mongodb]
// The harness runs one worker (its default notify settings: no default target, retries with
// backoff) and no jobs. The test sets a job's alerts in the editor (an out-of-range one is
// flagged at its field), clears them again, then creates through the API a job every second
// whose output matches its `on_output_match`, notifying a target that refuses connections
// (port 9) with `silence: 1h`: its page lists the first delivery (sent, so pending or failed)
// and the following ones silenced. A job that never succeeds within `no_success_within` is
// alerted `stale`, a delivery about no execution (not linked). With `mongodb` (the harness
// stopped it), the job page still shows, its Notifications section saying why it is empty.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open, waitRows } from "./lib.mjs";

const { base, shots, rest } = args("alerts.mjs");
const FORM_JOB = "sla-form";
const NOISY = "boom-every-second";
const STALE = "never-succeeds";
const UNHEARD = "failures-only";
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
const ALERT_INPUTS = {
  late_start: "#f-alerts-late-start",
  max_duration: "#f-alerts-max-duration",
  no_success_within: "#f-alerts-no-success-within",
  on_output_match: "#f-alerts-on-output-match",
};

const browser = await launch();
try {
  const { page, check } = await open(browser, base, { height: 1000 });

  if (rest[0] === "mongodb") await mongodbDown(page);
  else await alertsAndNotifications(page);
  check();
  console.log(rest[0] === "mongodb" ? "alerts with mongodb down: ok" : "alerts in the editor and notifications on the job page: ok");
} finally {
  await browser.close();
}

/** MongoDB is down: the job (from etcd) still shows; the section says why it lists nothing. */
async function mongodbDown(page) {
  await page.goto(`${base}/#/job/${NOISY}`);
  const warning = page.locator("#notifications p.warn");
  await warning.waitFor({ timeout: 20_000 });
  assert.match(await warning.innerText(), /cannot reach MongoDB/);
  assert.equal(await page.locator("#notifications tr[data-event]").count(), 0);
  assert.match(await page.locator("#alerts").innerText(), /output matches \/BOOM\//);
  await shot(page, "alerts-mongodb-down.png");
}

/** The editor's alerts, then the Notifications section of jobs that raise them. */
async function alertsAndNotifications(page) {
  // The editor: the four alerts of a new job.
  await page.goto(`${base}/#/new`);
  await page.locator("#f-name").waitFor();
  await page.locator("#f-name").fill(FORM_JOB);
  await page.locator("#f-task-command").fill("true");
  await page.locator("#f-timezone").fill("UTC");
  await page.locator("#f-schedule").fill("@yearly");
  for (const selector of Object.values(ALERT_INPUTS)) {
    assert.match(await page.locator(selector).getAttribute("placeholder"), /^none/, `${selector} says none`);
  }
  const alerts = { late_start: "1s", max_duration: "2s", no_success_within: "1h", on_output_match: "BOOM" };
  for (const [key, value] of Object.entries(alerts)) await page.locator(ALERT_INPUTS[key]).fill(value);
  const [created] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith(`/api/jobs/${FORM_JOB}`) && r.method() === "PUT"),
    page.getByRole("button", { name: "Create job" }).click(),
  ]);
  assert.deepEqual(created.postDataJSON().alerts, alerts, "the form sends the four alerts");
  await page.waitForFunction((want) => location.hash === want, `#/job/${FORM_JOB}`);
  const saved = (await call(base, "GET", `/api/jobs/${FORM_JOB}`)).body.spec;
  assert.deepEqual(saved.alerts, alerts, "saved exactly as filled in");
  // Its page: the alerts in words, and no notification yet.
  await page.locator("#alerts").waitFor();
  assert.equal(await page.locator("#alerts").innerText(), "late after 1s · running over 2s · stale after 1h · output matches /BOOM/");
  await page.locator("#notifications #no-notifications").waitFor();
  assert.equal(await page.locator("#no-notifications").innerText(), "No notifications.");

  // Back in the editor, the alerts are loaded; one out of range is refused at its field.
  await page.goto(`${base}/#/edit/${FORM_JOB}`);
  await page.waitForFunction(() => document.getElementById("f-alerts-late-start")?.value === "1s");
  for (const [key, value] of Object.entries(alerts)) assert.equal(await page.locator(ALERT_INPUTS[key]).inputValue(), value, key);
  await page.locator(ALERT_INPUTS.late_start).fill("0s");
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/jobs/${FORM_JOB}`) && r.request().method() === "PUT"),
    page.getByRole("button", { name: "Save changes" }).click(),
  ]);
  assert.equal(refused.status(), 400);
  assert.equal((await refused.json()).error.field, "alerts.late_start");
  const lateError = page.locator("#err-f-alerts-late-start");
  await lateError.waitFor();
  assert.match(await lateError.innerText(), /between 1s and/);
  assert.equal(await page.locator(ALERT_INPUTS.late_start).getAttribute("aria-invalid"), "true");
  assert.equal(await page.locator("#err-f-alerts-max-duration").isHidden(), true, "only that field");
  // Above the form, the summary of what stopped the save, in view and focused; its entry takes
  // the focus to the field (near the form's bottom), shown clear of the sticky Save bar.
  const summary = page.locator("#error-summary");
  assert.equal(await page.evaluate(() => document.activeElement.id), "error-summary", "focus goes to the summary");
  const inView = (el) => { const r = el.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; };
  assert.ok(await summary.evaluate(inView), "the summary is in view");
  assert.match(await summary.innerText(), /not saved: 1 error[\s\S]*Late start alert \(alerts\.late_start\): [\s\S]*between 1s and/);
  await shot(page, "editor-error-summary.png");
  await summary.getByRole("button", { name: /^Late start alert/ }).click();
  assert.equal(await page.evaluate(() => document.activeElement.id), "f-alerts-late-start", "then to the field");
  const clear = await lateError.evaluate((el) => {
    const r = el.getBoundingClientRect();
    const bar = document.querySelector(".toolbar.sticky").getBoundingClientRect();
    return { inView: r.top >= 0 && r.bottom <= window.innerHeight, overBar: r.bottom > bar.top && r.top < bar.bottom, error: r.bottom, bar: bar.top };
  });
  assert.ok(clear.inView && !clear.overBar, `the field's error shows above the Save bar: ${JSON.stringify(clear)}`);
  // Focused by the keyboard (Tab), a field near the bottom scrolls clear of the bar too.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.locator("#f-alerts-max-duration").focus();
  const tabbed = await page.locator("#f-alerts-max-duration").evaluate((el) => el.getBoundingClientRect().bottom <= document.querySelector(".toolbar.sticky").getBoundingClientRect().top);
  assert.ok(tabbed, "a focused field is not under the Save bar");
  await shot(page, "alerts-editor-error.png");

  // Every alert emptied: the spec has no `alerts` at all (JSON tab, then saved).
  for (const selector of Object.values(ALERT_INPUTS)) await page.locator(selector).fill("");
  await page.getByRole("tab", { name: "JSON" }).click();
  const emptied = JSON.parse(await page.getByLabel("Job spec JSON").inputValue());
  assert.equal("alerts" in emptied, false, "no alerts key");
  await page.getByRole("tab", { name: "Form" }).click();
  await page.locator("#job-form").waitFor();
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.waitForFunction((want) => location.hash === want, `#/job/${FORM_JOB}`);
  await page.locator("#notifications").waitFor();
  assert.equal(await page.locator("#alerts").count(), 0, "no alerts shown");
  assert.equal("alerts" in (await call(base, "GET", `/api/jobs/${FORM_JOB}`)).body.spec, false);

  // A job every second whose output matches, notifying a target that refuses (port 9) at most
  // once an hour: the first delivery is sent (and fails, retried), the next ones silenced.
  const notify = [{ name: "pager", url: "http://127.0.0.1:9/hook", on: ["output_match"], silence: "1h" }];
  const put = await call(base, "PUT", `/api/jobs/${NOISY}`, {
    schedule: "* * * * * *", timezone: "UTC", task: { kind: "shell", command: "echo BOOM" },
    alerts: { on_output_match: "BOOM" }, notify,
  });
  assert.ok([200, 201].includes(put.status), JSON.stringify(put.body));
  const silencedRows = '#notifications tr[data-event="output_match"][data-state="silenced"]';
  await waitRows(page, base, `#/job/${NOISY}`, silencedRows, (n) => n >= 1);
  const sentRows = page.locator('#notifications tr[data-event="output_match"]:not([data-state="silenced"])');
  assert.equal(await sentRows.count(), 1, "one delivery sent within the silence window");
  assert.match(await sentRows.getAttribute("data-state"), /^(pending|failed)$/, "port 9 refuses it");
  const silenced = page.locator(silencedRows).first();
  assert.equal(await silenced.locator(".badge.notify-silenced").innerText(), "silenced");
  assert.equal(await silenced.locator('td[data-label="Event"]').innerText(), "output_match");
  assert.equal(await silenced.locator('td[data-label="Target"]').innerText(), "pager", "the target's name");
  assert.equal(await silenced.locator('td[data-label="Attempts"]').innerText(), "0", "never sent");
  // What the section shows is what the API records: the execution linked, the time local.
  const listed = (await call(base, "GET", `/api/notifications?job=${NOISY}&event=output_match&limit=100`)).body.notifications;
  const id = await silenced.getAttribute("data-delivery");
  const record = listed.find((n) => n.id === id);
  assert.ok(record, `${id} is recorded`);
  assert.equal(record.state, "silenced");
  assert.equal(await silenced.locator('td[data-label="Execution"] a').getAttribute("href"), `#/execution/${encodeURIComponent(record.execution_id)}`);
  const localShown = await page.evaluate((t) => new Date(t).toLocaleString(), record.created_at);
  assert.equal(await silenced.locator('td[data-label="Time"]').innerText(), localShown);
  const first = listed.filter((n) => n.state !== "silenced");
  assert.equal(first.length, 1, JSON.stringify(first));
  assert.ok(Date.parse(first[0].created_at) <= Date.parse(record.created_at), "the sent one came first");
  assert.match(await page.locator("#alerts").innerText(), /^output matches \/BOOM\/$/);
  await page.locator("#notifications").scrollIntoViewIfNeeded();
  await shot(page, "alerts-notifications.png");
  // The execution's own page lists its deliveries too.
  await page.goto(`${base}/#/execution/${encodeURIComponent(record.execution_id)}`);
  const own = page.locator('#notifications tr[data-event="output_match"]');
  await own.first().waitFor();
  assert.equal(await own.first().getAttribute("data-state"), record.state);

  // Its editor: the form shows the alert, the JSON tab the alert and the targets (which have no
  // form controls), and a save from the form keeps the targets as they were.
  const before = (await call(base, "GET", `/api/jobs/${NOISY}`)).body.spec;
  await page.goto(`${base}/#/edit/${NOISY}`);
  await page.waitForFunction(() => document.getElementById("f-alerts-on-output-match")?.value === "BOOM");
  assert.equal(await page.locator(ALERT_INPUTS.late_start).inputValue(), "");
  await page.getByRole("tab", { name: "JSON" }).click();
  const asJson = JSON.parse(await page.getByLabel("Job spec JSON").inputValue());
  assert.deepEqual(asJson.alerts, { on_output_match: "BOOM" });
  assert.deepEqual(asJson.notify, before.notify, "the targets as loaded");
  assert.equal(before.notify[0].silence, "1h");
  await page.getByRole("tab", { name: "Form" }).click();
  await page.locator("#f-description").fill("pages once an hour");
  await page.getByRole("button", { name: "Save changes" }).click();
  await page.waitForFunction((want) => location.hash === want, `#/job/${NOISY}`);
  const after = (await call(base, "GET", `/api/jobs/${NOISY}`)).body.spec;
  assert.equal(after.description, "pages once an hour");
  assert.deepEqual(after.notify, before.notify, "notify kept");
  assert.deepEqual(after.alerts, { on_output_match: "BOOM" }, "alerts kept");

  // `stale`: a job with no success within 1s. Its delivery is about no execution: not linked.
  const stale = await call(base, "PUT", `/api/jobs/${STALE}`, {
    schedule: "@yearly", timezone: "UTC", task: { kind: "shell", command: "true" },
    alerts: { no_success_within: "1s" }, notify: [{ url: "http://127.0.0.1:9/stale", on: ["stale"] }],
  });
  assert.ok([200, 201].includes(stale.status), JSON.stringify(stale.body));
  await waitRows(page, base, `#/job/${STALE}`, '#notifications tr[data-event="stale"]', (n) => n >= 1);
  const staleRow = page.locator('#notifications tr[data-event="stale"]').first();
  const staleExecution = staleRow.locator('td[data-label="Execution"]');
  assert.match(await staleExecution.innerText(), new RegExp(`^${STALE}@stale-\\d+$`));
  assert.equal(await staleExecution.locator("a").count(), 0, "not a link");
  assert.equal(await staleRow.locator('td[data-label="Target"]').innerText(), "http://127.0.0.1:9/stale", "no name: the URL");
  assert.equal(await page.locator("#alerts").innerText(), "stale after 1s");
  assert.equal(await page.locator("#notify").innerText(), "http://127.0.0.1:9/stale → stale");
  assert.equal(await page.locator("#alerts-unheard").count(), 0, "its one alert is heard");
  await shot(page, "alerts-stale.png");

  // The usual choice, a target for failures only: the page says nobody hears the alert.
  const unheard = await call(base, "PUT", `/api/jobs/${UNHEARD}`, {
    schedule: "@yearly", timezone: "UTC", task: { kind: "shell", command: "true" },
    alerts: { max_duration: "3s" }, notify: [{ name: "oncall", url: "http://127.0.0.1:9/fail", on: ["failure"] }],
  });
  assert.equal(unheard.body.warnings[0].field, "alerts.max_duration", JSON.stringify(unheard.body));
  await page.goto(`${base}/#/job/${UNHEARD}`);
  await page.locator("#alerts-unheard").waitFor();
  assert.match(await page.locator("#alerts-unheard").innerText(), /No notify target listens for long_running: each one raised is recorded no_target/);
  assert.equal(await page.locator("#notify").innerText(), "oncall → failure");
  await shot(page, "alerts-unheard.png");
}
