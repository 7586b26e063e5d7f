// Browser test of the jobs list, run by tests/tests/it/features/ui.rs against a real cluster:
//   node jobs.mjs <master url> <screenshot dir> <execution id of the hot-list run>
// The harness has created: nightly-report (labels team=data, one succeeded run), paused-job
// (enabled: false), mars-only (selector region=mars, no worker matches) and as-backup (runs as
// user backup, which no worker allows) and auto-paused (paused by its failures); worker w1 runs,
// its tasks as root (the harness's --task-user root). Executor app-1 (sdk/examples/hot_list.rs)
// runs the handler hot-list, and declared its job hot-list, which has run once.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, jobAction, launch, open } from "./lib.mjs";

const { base, shots, rest: [hotListRun] } = args("jobs.mjs");
const browser = await launch();
try {
  const { context, page, check } = await open(browser, base);

  await page.goto(base + "/");
  const rows = page.locator("tbody tr");
  await rows.first().waitFor();
  assert.equal(await rows.count(), 6);
  const row = (name) => page.locator(`tr[data-job="${name}"]`);
  assert.match(await row("nightly-report").innerText(), /enabled/);
  assert.match(await row("nightly-report").innerText(), /succeeded/);
  assert.match(await row("paused-job").innerText(), /paused/);
  assert.match(await row("paused-job").innerText(), /disabled in its spec/);
  assert.match(await row("mars-only").innerText(), /no live worker matches/);
  // A handler job: its handler, and the executor that has it.
  assert.match(await row("hot-list").innerText(), /handler hot-list/);
  assert.match(await row("hot-list").innerText(), /executor app-1 has it/);
  await page.screenshot({ path: path.join(shots, "jobs-1280.png"), fullPage: true });

  // Filter by label; the filter lives in the URL, so the deep link shows the same list.
  const filter = page.getByLabel("Filter jobs");
  await filter.fill("team=data");
  await filter.press("Enter");
  await page.waitForFunction(() => location.hash === "#/jobs?q=team%3Ddata");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  assert.equal(await rows.first().getAttribute("data-job"), "nightly-report");
  const deep = await context.newPage();
  await deep.goto(base + "/#/jobs?q=team%3Ddata");
  await deep.locator("tbody tr").first().waitFor();
  assert.equal(await deep.locator("tbody tr").count(), 1);

  // Keyboard: "/" focuses the filter, Enter applies it; actions are buttons that Enter presses.
  await page.goto(base + "/#/jobs");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 6);
  await page.keyboard.press("/");
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "Filter jobs");
  await page.keyboard.type("nightly");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => location.hash === "#/jobs?q=nightly");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  // The tab has an icon (inline: no request that could fail) and says what it shows.
  assert.match(await page.locator('link[rel="icon"]').getAttribute("href"), /^data:image\/svg\+xml,/);
  assert.equal(await page.title(), "Jobs — etcron");
  // Nothing of it runs: no Kill on its row.
  const runningNow = (await call(base, "GET", "/api/workers")).body.workers.flatMap((w) => w.running_executions || []);
  if (!runningNow.some((r) => r.job === "nightly-report")) {
    assert.equal(await page.locator('[aria-label="Kill running executions of nightly-report"]').count(), 0);
  }
  // The row's actions: one menu, opened and chosen from the keyboard.
  await page.getByRole("button", { name: "Actions for nightly-report" }).focus();
  await page.keyboard.press("Enter");
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "Run nightly-report now");
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/nightly-report/run") && r.status() === 202),
    page.keyboard.press("Enter"),
  ]);

  // Phone width and dark scheme stay readable (screenshots are kept as test artifacts).
  const { page: small } = await open(browser, base, { width: 375, height: 740, colorScheme: "dark" });
  await small.goto(base + "/");
  await small.locator("tbody tr").first().waitFor();
  await small.screenshot({ path: path.join(shots, "jobs-375-dark.png"), fullPage: true });

  // Workers: the live one with its labels, and the job nobody matches.
  // The run started above may still hold a slot when the page first loads: it is read again
  // until the worker shows it free (the page shows the load the worker last registered).
  await page.goto(base + "/#/workers");
  const w1 = page.locator('tr[data-worker="w1"]');
  await w1.waitFor();
  for (const deadline = Date.now() + 20_000; !/0 \/ 64/.test(await w1.innerText()); ) {
    assert.ok(Date.now() < deadline, `the worker's slots never showed free: ${await w1.innerText()}`);
    await page.waitForTimeout(250);
    await page.reload();
    await w1.waitFor();
  }
  assert.match(await page.locator('tr[data-worker="w1"]').innerText(), /\broot\b/);
  assert.doesNotMatch(await w1.innerText(), /executor:/);
  assert.match(await page.locator('tr[data-worker="app-1"]').innerText(), /executor: hot-list/);
  const unmatched = await page.locator("#unmatched").innerText();
  assert.match(unmatched, /mars-only needs a worker that matches region=mars/);
  assert.match(unmatched, /as-backup needs a worker that may run tasks as backup/);
  assert.equal(await page.locator("#unmatched-more").count(), 0);
  await page.screenshot({ path: path.join(shots, "workers-1280.png"), fullPage: true });
  // Over 100 unmatched jobs: the API names the first 100 and counts the rest, which the page says.
  const marsJobs = Array.from({ length: 100 }, (_, i) => `zz-mars-${String(i).padStart(3, "0")}`);
  const mars = { schedule: "@daily", selector: { region: "mars" }, task: { kind: "shell", command: "true" } };
  const batch = async (changes) => assert.equal((await call(base, "POST", "/api/batch", { changes })).status, 200);
  await batch(marsJobs.map((job) => ({ job, op: "put", spec: mars })));
  await page.reload();
  await page.locator("#unmatched-more").waitFor();
  assert.equal(await page.locator("#unmatched li").count(), 100);
  assert.equal(await page.locator("#unmatched-more").innerText(), "and 2 more");
  await batch(marsJobs.map((job) => ({ job, op: "delete" })));

  // A job run as a user: its page says as whom and that no worker may; the form edits it.
  await page.goto(base + "/#/job/as-backup");
  await page.locator(".run-as").waitFor();
  const main = await page.locator("main").innerText();
  assert.match(main, /as backup:backup/);
  assert.match(main, /no live worker may run tasks as backup/);
  await page.goto(base + "/#/edit/as-backup");
  await page.waitForFunction(() => document.getElementById("f-task-user").value === "backup");
  assert.equal(await page.locator("#f-task-group").inputValue(), "backup");
  await page.locator("#f-task-user").fill("nobody");
  await page.locator("#f-task-group").fill("");
  await page.locator("#f-pause-after-failures").fill("4");
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/as-backup") && r.request().method() === "PUT" && r.status() === 200),
    page.getByRole("button", { name: "Save changes" }).click(),
  ]);
  const saved = await call(base, "GET", "/api/jobs/as-backup");
  assert.equal(saved.body.spec.task.user, "nobody");
  assert.equal(saved.body.spec.task.group, undefined, "an emptied group is dropped");
  assert.equal(saved.body.spec.pause_after_failures, 4);

  // Its history: the harness's save and the form's; the diff of the first with the current
  // one; a rollback to it (confirmed) is a third version that restores it.
  await page.goto(base + "/#/history/as-backup");
  await page.locator("#history tbody tr").nth(1).waitFor();
  assert.equal(await page.locator("#history tbody tr").count(), 2);
  const first = await page.locator("#history tbody tr").nth(1).getAttribute("data-revision");
  // Each version's number, and the tool that saved it: the console's save says "console".
  assert.match(await page.locator("#history tbody tr").first().innerText(), /^v2\s*current[\s\S]*\bconsole\b/);
  assert.match(await page.locator("#history tbody tr").nth(1).innerText(), /^v1\b[\s\S]*PUT \/api\/jobs\/as-backup/);
  await page.getByRole("button", { name: `Diff revision ${first} with the current spec` }).click();
  await page.locator("#history-diff li").first().waitFor();
  const changes = await page.locator("#history-diff").innerText();
  assert.match(changes, /task\.user: "backup" → "nobody"/);
  assert.match(changes, /pause_after_failures: — → 4/);
  await page.screenshot({ path: path.join(shots, "history-1280.png"), fullPage: true });
  page.once("dialog", (d) => d.accept());
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/as-backup/rollback") && r.status() === 200),
    page.getByRole("button", { name: `Roll back to revision ${first}` }).click(),
  ]);
  await page.locator("#history tbody tr").nth(2).waitFor();
  assert.match(await page.locator("#history tbody tr").first().innerText(), new RegExp(`^v3\\s*current[\\s\\S]*console[\\s\\S]*restores ${first}`));
  assert.equal((await call(base, "GET", "/api/jobs/as-backup")).body.spec.task.user, "backup");

  // A job its failures paused: the list and its page say why, and link the failure.
  await page.goto(base + "/#/jobs");
  await row("auto-paused").waitFor();
  assert.match(await row("auto-paused").innerText(), /paused by etcron .*: pause_after_failures: 3 final failures in a row/);
  await page.goto(base + "/#/job/auto-paused");
  await page.locator("#pause").waitFor();
  assert.match(await page.locator("#pause").innerText(), /paused by etcron .*3 final failures in a row/);
  assert.equal(await page.locator("#pause a").getAttribute("href"), "#/execution/auto-paused%401764037206000%231");

  // Run with parameters: a bad value is named in the dialog; a good run opens its execution,
  // which shows the parameters.
  await page.goto(base + "/#/job/nightly-report");
  await jobAction(page, "nightly-report", "Run nightly-report with parameters");
  const dialog = page.locator("#run-dialog");
  await dialog.waitFor();
  assert.match(await page.locator("#run-params-hint").innerText(), /Parameters it declares: REPORT_DAY matching /);
  await page.locator("#run-env").fill("MODE=x");
  await dialog.getByRole("button", { name: "Run" }).click();
  await page.locator("#run-error").waitFor();
  assert.match(await page.locator("#run-error").innerText(), /env\.MODE: is not a parameter of this job \(it declares REPORT_DAY\)/);
  await page.locator("#run-env").fill("REPORT_DAY=2026-11-01\nETCRON_JOB=x");
  await page.locator("#run-as-of").fill("2026-11-02T00:00:00Z");
  await dialog.getByRole("button", { name: "Run" }).click();
  await page.locator("#run-error").waitFor();
  assert.match(await page.locator("#run-error").innerText(), /env\.ETCRON_JOB: .*reserved/);
  await page.locator("#run-env").fill("REPORT_DAY=2026-11-01");
  await page.screenshot({ path: path.join(shots, "run-dialog.png") });
  await dialog.getByRole("button", { name: "Run" }).click();
  await page.waitForFunction(() => location.hash.startsWith("#/execution/nightly-report%40manual-"));
  await page.locator("#run-params").waitFor();
  assert.equal(await page.locator("#run-params").innerText(), "REPORT_DAY=2026-11-01");
  assert.match(await page.locator("main").innerText(), /Run as of\s+2026-11-02T00:00:00.000Z/);

  // The handler job's page: its task and the executor that has it; its run's result.
  await page.goto(base + "/#/job/hot-list");
  await page.locator("#task").waitFor();
  assert.equal(await page.locator("#task").innerText(), "handler hot-list");
  assert.match(await page.locator("#workers").innerText(), /^executor app-1 has it$/);
  await page.goto(base + `/#/execution/${encodeURIComponent(hotListRun)}`);
  await page.locator("#result").waitFor();
  const result = JSON.parse(await page.locator("#result").innerText());
  assert.deepEqual(result, { resumed_at: 0, steps: 2 });

  // A handler no live executor has: the list and the page say so, in the warn style; the
  // editor shows the handler task and saves it with its environment.
  const orphan = await call(base, "PUT", "/api/jobs/sdk-orphan", { schedule: "@daily", task: { kind: "handler", name: "nobody-has-it" } });
  assert.equal(orphan.status, 201, JSON.stringify(orphan.body));
  await page.goto(base + "/#/jobs");
  await row("sdk-orphan").waitFor();
  assert.match(await row("sdk-orphan").innerText(), /handler nobody-has-it/);
  assert.equal(await row("sdk-orphan").locator(".warn").innerText(), "no live executor has it");
  await page.goto(base + "/#/job/sdk-orphan");
  await page.locator("#task").waitFor();
  assert.equal(await page.locator("#task").innerText(), "handler nobody-has-it");
  assert.equal(await page.locator("#workers .warn").innerText(), "no live executor has it");
  await page.goto(base + "/#/edit/sdk-orphan");
  await page.waitForFunction(() => document.getElementById("f-task-name").value === "nobody-has-it");
  assert.equal(await page.locator("#f-task-kind").inputValue(), "handler");
  assert.ok(await page.locator("#f-task-command").isHidden(), "no command for a handler task");
  await page.locator("#f-task-env").fill("REGION=eu");
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/sdk-orphan") && r.request().method() === "PUT" && r.status() === 200),
    page.getByRole("button", { name: "Save changes" }).click(),
  ]);
  assert.deepEqual((await call(base, "GET", "/api/jobs/sdk-orphan")).body.spec.task, { kind: "handler", name: "nobody-has-it", env: { REGION: "eu" } });

  check();
  console.log("jobs list: ok");
} finally {
  await browser.close();
}
