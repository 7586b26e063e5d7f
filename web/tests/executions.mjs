// Browser test of the executions pages and the job actions, run by tests/tests/it/features/ui.rs:
//   node executions.mjs <master url> <screenshot dir>
// The harness has created echo-job (prints "needle-7", one succeeded run) and long-job
// (prints "live-start", then sleeps 300 s; never run yet).
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, jobAction, launch, open, waitRows as reload } from "./lib.mjs";

const { base, shots } = args("executions.mjs");
const waitRows = (page, hash, selector, count) => reload(page, base, hash, selector, count);

const browser = await launch();
try {
  const { page, check } = await open(browser, base);

  // Search by text: the record, its job, and under it the output line that matched with the
  // word marked.
  await waitRows(page, "#/executions?q=needle", "tbody tr[data-id]", 1);
  assert.equal(await page.locator("input[name=q]").inputValue(), "needle", "filters stay in the form and the URL");
  assert.equal(await page.locator('tbody tr[data-id] td[data-label="Job"]').innerText(), "echo-job");
  const matched = page.locator("tbody tr.output-match");
  assert.equal(await matched.innerText(), "needle-7");
  assert.equal(await matched.locator("mark").innerText(), "needle");
  await page.screenshot({ path: path.join(shots, "executions-search.png"), fullPage: true });
  // The job is typed, with suggestions of the names starting with it asked of the master (never
  // the list of every job); lists search at once; a time range in local time, sent as UTC.
  const suggested = () => page.locator("#job-suggestions option").evaluateAll((os) => os.map((o) => o.value));
  await page.locator("input[name=job]").pressSequentially("e", { delay: 20 });
  await page.waitForFunction(() => [...document.querySelectorAll("#job-suggestions option")].map((o) => o.value).join() === "echo-job");
  await page.locator("input[name=job]").fill("");
  await page.locator("input[name=job]").pressSequentially("l", { delay: 20 });
  await page.waitForFunction(() => [...document.querySelectorAll("#job-suggestions option")].map((o) => o.value).join() === "long-job");
  assert.deepEqual(await suggested(), ["long-job"]);
  await page.locator("input[name=job]").fill("echo-job");
  await page.locator("input[name=job]").press("Enter");
  await page.waitForFunction(() => location.hash === "#/executions?job=echo-job&q=needle");
  await page.locator("select[name=status]").selectOption("failed,timed_out,lost");
  await page.waitForFunction(() => location.hash === "#/executions?job=echo-job&status=failed%2Ctimed_out%2Clost&q=needle");
  await page.locator(".empty").waitFor();
  await page.locator("select[name=status]").selectOption("");
  await page.locator("select[name=trigger]").selectOption("manual");
  await page.waitForFunction(() => location.hash === "#/executions?job=echo-job&trigger=manual&q=needle");
  await page.locator("tbody tr[data-id]").first().waitFor();
  const hourAgo = new Date(Date.now() - 3600e3);
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60e3).toISOString().slice(0, 16);
  await page.getByLabel("Scheduled from (local time)").fill(local(hourAgo));
  await page.getByLabel("Scheduled until (local time)").fill(local(new Date(Date.now() + 3600e3)));
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForFunction(() => location.hash.includes("since="));
  const range = new URLSearchParams(await page.evaluate(() => location.hash.split("?")[1]));
  const since = new Date(hourAgo);
  since.setSeconds(0, 0);
  assert.equal(range.get("since"), since.toISOString(), "the local time as UTC");
  await page.locator("tbody tr[data-id]").first().waitFor();
  assert.equal(await page.getByLabel("Scheduled from (local time)").inputValue(), local(hourAgo), "shown back in local time");
  await page.screenshot({ path: path.join(shots, "executions-filters.png"), fullPage: true });
  await page.locator("tbody tr a").first().click();
  const output = page.getByLabel("Output");
  await output.waitFor();
  assert.match(await output.innerText(), /needle-7/);
  assert.match(await page.locator("dl.fields").innerText(), /Fencing token/);
  const wrap = page.getByRole("button", { name: "Wrap lines" });
  await wrap.click();
  assert.equal(await wrap.getAttribute("aria-pressed"), "false");
  await page.screenshot({ path: path.join(shots, "execution-detail.png"), fullPage: true });

  // Run a long job from the jobs list, see it running, kill it from the UI.
  await page.goto(`${base}/#/jobs`);
  const [ran] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/long-job/run") && r.status() === 202),
    jobAction(page, "long-job", "Run long-job now"),
  ]);
  // It lands on the run's page.
  const runId = (await ran.json()).execution_id;
  await page.waitForFunction((want) => location.hash === want, `#/execution/${encodeURIComponent(runId)}`);
  assert.equal(await page.title(), `${runId} · Execution — etcron`, "the tab says which run");
  await waitRows(page, "#/executions?job=long-job&status=running", "tbody tr", 1);
  // Its page, in a second tab, follows the output as it is printed: the record holds no output
  // until the run ends, so "live-start" here came through the stream.
  const viewer = await open(browser, base);
  await viewer.page.goto(`${base}/${await page.locator("tbody tr a").first().getAttribute("href")}`);
  await viewer.page.locator(".live").waitFor();
  await viewer.page.getByLabel("Output").filter({ hasText: "live-start" }).waitFor();
  // A running run's page says how long it has run and offers its Kill.
  assert.match(await viewer.page.locator("#elapsed").innerText(), /^running for \d/);
  assert.equal(await viewer.page.getByRole("button", { name: /^Kill long-job@/ }).count(), 1);
  await viewer.page.screenshot({ path: path.join(shots, "execution-live.png"), fullPage: true });
  await page.goto(`${base}/#/jobs`);
  // Kill asks first: dismissing sends nothing, accepting kills.
  let killRequests = 0;
  const countKills = (r) => { if (r.url().endsWith("/api/jobs/long-job/kill")) killRequests += 1; };
  page.on("request", countKills);
  page.once("dialog", (d) => d.dismiss());
  await jobAction(page, "long-job", "Kill running executions of long-job");
  // The item is enabled again once its action returned.
  await page.waitForFunction(() => !document.querySelector('[aria-label="Kill running executions of long-job"]').disabled);
  assert.equal(killRequests, 0, "a dismissed kill sends nothing");
  page.once("dialog", (d) => d.accept());
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/long-job/kill") && r.status() === 202),
    jobAction(page, "long-job", "Kill running executions of long-job"),
  ]);
  page.off("request", countKills);
  // The stream ends with the final record, and the open page shows it without a reload.
  await viewer.page.locator(".status-killed.big").waitFor();
  assert.equal(await viewer.page.locator(".live").count(), 0, "no longer live");
  assert.match(await viewer.page.getByLabel("Output").innerText(), /live-start/);
  viewer.check();
  await viewer.context.close();
  await waitRows(page, "#/executions?job=long-job&status=killed", "tbody tr", 1);

  // Pause and resume.
  await page.goto(`${base}/#/jobs`);
  // Pause opens a dialog: a reason (optional) and how long (presets, or a time); the list
  // shows who paused it, until when and why.
  await jobAction(page, "long-job", "Pause long-job");
  const pause = page.locator("#pause-dialog");
  await pause.waitFor();
  await pause.locator("#pause-reason").fill("waiting for the backup");
  await pause.locator("#pause-until").selectOption("4");
  assert.match(await pause.locator("#pause-until-hint").innerText(), /recorded skipped until .*; then it runs again by itself/);
  await page.screenshot({ path: path.join(shots, "pause-dialog.png"), fullPage: true });
  const [paused] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith("/api/jobs/long-job/pause") && r.method() === "POST"),
    pause.getByRole("button", { name: "Pause", exact: true }).click(),
  ]);
  const sent = paused.postDataJSON();
  assert.equal(sent.reason, "waiting for the backup");
  const ahead = Date.parse(sent.until) - Date.now();
  assert.ok(ahead > 3.9 * 3600e3 && ahead <= 4 * 3600e3, `until 4 hours ahead: ${sent.until}`);
  await page.locator('tr[data-job="long-job"] .badge.paused').waitFor();
  assert.match(await page.locator('tr[data-job="long-job"]').innerText(), /paused by anonymous at .* until .*: waiting for the backup/);
  await jobAction(page, "long-job", "Resume long-job");
  await page.locator('tr[data-job="long-job"] .badge.enabled').waitFor();
  await page.screenshot({ path: path.join(shots, "jobs-actions.png"), fullPage: true });

  // Delete asks first; dismissing keeps the job, accepting deletes it.
  page.once("dialog", (d) => d.dismiss());
  await jobAction(page, "echo-job", "Delete echo-job");
  await page.locator('tr[data-job="echo-job"]').waitFor();
  page.once("dialog", (d) => d.accept());
  await jobAction(page, "echo-job", "Delete echo-job");
  await page.locator('tr[data-job="echo-job"]').waitFor({ state: "detached" });

  // A running execution's page shows its real claim and start times from the first, told by
  // its claim then by its marker (not the scheduled time twice): they are the record's.
  assert.equal((await call(base, "PUT", "/api/jobs/five-seconds", { schedule: "@yearly", task: { kind: "shell", command: "sleep 5" } })).status, 201);
  const five = (await call(base, "POST", "/api/jobs/five-seconds/run")).body.execution_id;
  await page.goto(`${base}/#/execution/${encodeURIComponent(five)}`);
  await page.locator("#claimed").waitFor({ timeout: 20_000 });
  await page.locator("#started:not(.muted)").waitFor({ timeout: 20_000 });
  const stamps = await page.evaluate(() => Object.fromEntries(["scheduled", "claimed", "started"].map((id) => [id, document.getElementById(id).textContent])));
  assert.equal(await page.locator(".status-running.big").count(), 1, `shown while running: ${JSON.stringify(stamps)}`);
  const ms = (k) => Date.parse(stamps[k]);
  assert.ok(ms("scheduled") <= ms("claimed") && ms("claimed") <= ms("started"), `scheduled ≤ claimed ≤ started: ${JSON.stringify(stamps)}`);
  assert.ok(ms("started") > ms("scheduled"), `the real start, not the scheduled time: ${JSON.stringify(stamps)}`);
  await page.screenshot({ path: path.join(shots, "execution-stamps.png"), fullPage: true });
  await page.locator(".status-succeeded.big").waitFor({ timeout: 30_000 });
  const record = (await call(base, "GET", `/api/executions/${encodeURIComponent(five)}`)).body;
  assert.deepEqual(stamps, { scheduled: record.scheduled_at, claimed: record.claimed_at, started: record.started_at }, "the record's own times");

  check();
  console.log("executions and job actions: ok");
} finally {
  await browser.close();
}
