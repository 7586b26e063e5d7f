// Browser test of the backfill dialog and the job page's Backfills section, run by
// tests/tests/it/features/ui.rs:
//   node backfill.mjs <master url> <screenshot dir>
// The harness runs one worker and has created, then paused, two jobs: every-2s (`*/2 * * * * *`,
// `true`; at least 3 scheduled runs succeeded before the pause) and slow-hourly (`@hourly`,
// `sleep 300`). The page runs in Asia/Kolkata (+05:30), so the dialog's local times must reach
// the API as the right UTC instants.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, jobAction, launch, open } from "./lib.mjs";

const { base, shots } = args("backfill.mjs");
const JOB = "every-2s";
const SLOW = "slow-hourly";
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });

/** Polls `check` (async, truthy when done) every 250 ms; fails after `ms`. */
async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const browser = await launch();
try {
  const { context, page, check } = await open(browser, base, { height: 1000 });
  const cdp = await context.newCDPSession(page);
  await cdp.send("Emulation.setTimezoneOverride", { timezoneId: "Asia/Kolkata" });

  /** An instant as the browser shows it in a datetime-local input (its zone, to the second;
   * Chromium leaves out ":00" seconds, and Playwright's fill checks the value reads back). */
  const localValue = (iso) => page.evaluate((t) => {
    const d = new Date(t);
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`.replace(/:00$/, "");
  }, iso);

  // The range: from the first to the last scheduled run recorded before the pause. Its ticks,
  // as the executions search shows them, are what a backfill of `all` must run.
  const succeeded = (await call(base, "GET", `/api/executions?job=${JOB}&trigger=schedule&status=succeeded&limit=500`)).body.executions;
  assert.ok(succeeded.length >= 3, `at least 3 runs before the pause: ${succeeded.length}`);
  const times = succeeded.map((r) => Date.parse(r.scheduled_at)).sort((a, b) => a - b);
  const from = new Date(times[0]).toISOString();
  const to = new Date(times[times.length - 1]).toISOString();
  const inRange = (await call(base, "GET", `/api/executions?job=${JOB}&trigger=schedule&since=${from}&until=${to}&limit=500`)).body;
  assert.equal(inRange.next_cursor, null, "one page holds the range");
  assert.ok(inRange.executions.every((r) => r.status !== "running"), "no tick of the range is running");
  const expected = [...new Set(inRange.executions.map((r) => Date.parse(r.scheduled_at)))].sort((a, b) => a - b);
  assert.ok(expected.length >= 3, `ticks in the range: ${expected.length}`);

  await page.goto(`${base}/#/job/${JOB}`);
  await page.locator("#backfills #no-backfills").waitFor();
  assert.equal(await page.evaluate(() => new Date().getTimezoneOffset()), -330, "the page runs at +05:30");

  // The dialog: the last 24 h ending now by default; Max parallel only for parallel.
  await jobAction(page, JOB, `Backfill past ticks of ${JOB}`);
  const dialog = page.locator("#backfill-dialog");
  await dialog.waitFor();
  const [fromDefault, toDefault] = await page.evaluate(() => ["f-from", "f-to"].map((id) => Date.parse(document.getElementById(id).value)));
  assert.ok(Math.abs(toDefault - Date.now()) < 60_000, "To is now");
  assert.equal(toDefault - fromDefault, 86_400_000, "From is 24 h before");
  assert.equal(await page.locator("#f-which").inputValue(), "missing");
  assert.equal(await page.locator("#f-max-parallel").isHidden(), true);
  await page.locator("#f-overlap").selectOption("parallel");
  await page.locator("#f-max-parallel").waitFor();
  await page.locator("#f-overlap").selectOption("serial");
  await page.locator("#f-max-parallel").waitFor({ state: "hidden" });

  // To in the future: the API refuses it, and the dialog says so at To.
  await page.locator("#f-to").fill(await localValue(new Date(Date.now() + 3_600_000).toISOString()));
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/jobs/${JOB}/backfill`) && r.status() === 400),
    dialog.getByRole("button", { name: "Preview" }).click(),
  ]);
  const toError = page.locator("#err-f-to");
  await toError.waitFor();
  assert.match(await toError.innerText(), /in the future/);
  assert.equal(await page.locator("#f-to").getAttribute("aria-invalid"), "true");
  assert.equal(await page.locator("#backfill-error").isHidden(), true, "not a general error: at the field");
  assert.equal(await page.locator("#backfill-preview li").count(), 0, "no preview");
  await shot(page, "backfill-error.png");

  // The recorded range, every tick: the preview lists exactly the ticks the search shows.
  await page.locator("#f-from").fill(await localValue(from));
  await page.locator("#f-to").fill(await localValue(to));
  await page.locator("#f-which").selectOption("all");
  await page.locator("#f-reason").fill("ui test");
  const [previewRequest] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith(`/api/jobs/${JOB}/backfill`) && r.method() === "POST"),
    dialog.getByRole("button", { name: "Preview" }).click(),
  ]);
  const sent = previewRequest.postDataJSON();
  assert.equal(Date.parse(sent.from), Date.parse(from), `From reaches the API as the instant: ${sent.from}`);
  assert.equal(Date.parse(sent.to), Date.parse(to), `To reaches the API as the instant: ${sent.to}`);
  assert.deepEqual({ ...sent, from: undefined, to: undefined }, { from: undefined, to: undefined, which: "all", overlap: "serial", reason: "ui test", dry_run: true });
  const count = page.locator("#backfill-count");
  await count.waitFor();
  assert.equal(await toError.isHidden(), true, "the error is gone");
  assert.equal(Number(await count.getAttribute("data-count")), expected.length, await count.innerText());
  assert.match(await count.innerText(), new RegExp(`^${expected.length} ticks would run, one at a time`));
  const listed = await page.locator("#backfill-preview ol li").evaluateAll((lis) => lis.map((li) => Date.parse(li.dataset.at)));
  assert.deepEqual(listed, expected.slice(0, 50), "the ticks listed are the range's");
  assert.equal(await page.locator("#backfill-excluded").count(), 0, "nothing left out");
  await shot(page, "backfill-preview.png");

  // Start: the dialog closes and the section shows the backfill, refreshing until it is done.
  const [created] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/jobs/${JOB}/backfill`) && r.request().method() === "POST" && r.status() === 201),
    dialog.getByRole("button", { name: "Start backfill" }).click(),
  ]);
  const id = (await created.json()).id;
  await dialog.waitFor({ state: "detached" });
  await page.waitForFunction((want) => location.hash === want, `#/job/${JOB}?backfill=${id}`);
  const row = page.locator(`#backfills tr[data-backfill="${id}"]`);
  await row.waitFor();
  await row.locator(".badge.backfill-done").waitFor({ timeout: 60_000 });
  const bar = row.getByRole("progressbar");
  assert.equal(await bar.getAttribute("aria-valuemax"), String(expected.length));
  assert.equal(await bar.getAttribute("aria-valuenow"), String(expected.length), "a full bar");
  assert.match(await bar.innerText(), new RegExp(`${expected.length} of ${expected.length} finished: ${expected.length} succeeded, 0 failed, 0 not run`));
  assert.match(await row.innerText(), /\ball\b[\s\S]*serial[\s\S]*anonymous[\s\S]*ui test/);
  assert.equal(await row.getByRole("button", { name: `Cancel backfill ${id}` }).count(), 0, "nothing to cancel");
  // Its items, opened from the URL: each tick, its execution (linked), succeeded.
  const items = page.locator("#backfill-items tbody tr");
  await until("every item shown succeeded", async () => (await page.locator("#backfill-items .status-succeeded").count()) === expected.length);
  assert.equal(await items.count(), expected.length);
  await shot(page, "backfill-done.png");

  // Through the API: every item succeeded, one more attempt of each tick of the range.
  const done = (await call(base, "GET", `/api/jobs/${JOB}/backfills/${id}`)).body;
  assert.equal(done.state, "done");
  const { total, pending, running, succeeded: ok, failed, not_run: notRun } = done.counts;
  assert.deepEqual({ total, pending, running, ok, failed, notRun }, { total: expected.length, pending: 0, running: 0, ok: expected.length, failed: 0, notRun: 0 });
  assert.deepEqual(done.items.map((i) => Date.parse(i.at)), expected);
  for (const item of done.items) {
    assert.equal(item.status, "succeeded", JSON.stringify(item));
    assert.match(item.execution_id, /#2$/, "the attempt after the scheduled run");
    const link = page.locator(`#backfill-items tr[data-execution="${item.execution_id}"] a`);
    assert.equal(await link.getAttribute("href"), `#/execution/${encodeURIComponent(item.execution_id)}`);
  }
  await page.locator(`#backfill-items tr[data-execution="${done.items[0].execution_id}"] a`).click();
  await page.locator(".status-succeeded.big").waitFor();
  assert.match(await page.locator("dl.fields").innerText(), /Trigger\s+backfill/);

  // A backfill still running is cancelled from the section: the slow job's last 24 h (the
  // dialog's defaults), whose first run sleeps.
  await page.goto(`${base}/#/job/${SLOW}`);
  await page.locator("#backfills #no-backfills").waitFor();
  await jobAction(page, SLOW, `Backfill past ticks of ${SLOW}`);
  await dialog.waitFor();
  const [slowCreated] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/jobs/${SLOW}/backfill`) && r.status() === 201),
    dialog.getByRole("button", { name: "Start backfill" }).click(),
  ]);
  const slowId = (await slowCreated.json()).id;
  const slowRow = page.locator(`#backfills tr[data-backfill="${slowId}"]`);
  await slowRow.locator(".badge.backfill-running").waitFor();
  await page.locator("#backfill-items .status-running").waitFor({ timeout: 30_000 });
  page.once("dialog", (d) => d.accept());
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/jobs/${SLOW}/backfills/${slowId}/cancel`) && r.status() === 200),
    slowRow.getByRole("button", { name: `Cancel backfill ${slowId}` }).click(),
  ]);
  await slowRow.locator(".badge.backfill-cancelled").waitFor();
  assert.equal(await slowRow.getByRole("button", { name: `Cancel backfill ${slowId}` }).count(), 0);
  assert.match(await slowRow.innerText(), /cancelled by anonymous/);
  const slowItems = await page.locator("#backfill-items tbody tr td:last-child").allInnerTexts();
  assert.equal(slowItems[0], "running", "the run already started goes on");
  assert.ok(slowItems.length > 1 && slowItems.slice(1).every((s) => s === "cancelled"), slowItems.join(" "));
  assert.match(await slowRow.getByRole("progressbar").innerText(), new RegExp(`^0 of ${slowItems.length} finished: .*1 running, ${slowItems.length - 1} cancelled$`));
  await shot(page, "backfill-cancelled.png");
  // The sleeping run is killed, so nothing outlives the test.
  assert.equal((await call(base, "POST", `/api/jobs/${SLOW}/kill`)).status, 202);
  await until("the slow run killed", async () => {
    const b = (await call(base, "GET", `/api/jobs/${SLOW}/backfills/${slowId}`)).body;
    return b.items[0].status === "killed";
  });

  check();
  console.log("backfill dialog and section: ok");
} finally {
  await browser.close();
}
