// Browser test of the pools pages, run by tests/tests/it/features/ui.rs after it made pool `db`
// (2 slots) held by two runs of `report` with one tick of `export` waiting, as workers write them:
// the list shows each pool's use, queue and jobs; a pool's page its holders and queue; a pool is
// added (a wrong value shown at its field), changed and deleted; a pool in use is not; the editor
// shows a job's pool and priority.
//   node pools.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open, waitRows } from "./lib.mjs";

const { base, shots } = args("pools.mjs");
const browser = await launch();
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
try {
  const { page, check } = await open(browser, base);
  await waitRows(page, base, "#/pools", "tr[data-pool]", 1);
  const db = page.locator('tr[data-pool="db"]');
  assert.match(await db.innerText(), /reporting db/);
  assert.equal(await db.locator('[role="progressbar"]').getAttribute("aria-valuetext"), "2 of 2 in use");
  assert.equal(await db.locator("[data-waiting]").innerText(), "1");
  assert.deepEqual(await db.locator('td[data-label="Jobs"] a').allInnerTexts(), ["export", "report"]);
  await shot(page, "pools.png");

  // Add a pool: a wrong value is shown at its field, then it saves and is listed.
  const form = page.locator("#pool-form");
  await form.locator('input[name="name"]').fill("cache");
  await form.locator('input[name="slots"]').fill("0");
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/pools/cache") && r.status() === 400),
    form.getByRole("button", { name: "Save pool" }).click(),
  ]);
  const slotsError = page.locator('#pool-form [data-field="slots"] .field-error');
  await slotsError.waitFor();
  assert.match(await slotsError.innerText(), /1 to 10000/);
  await form.locator('input[name="slots"]').fill("3");
  await form.getByRole("button", { name: "Save pool" }).click();
  await page.locator('tr[data-pool="cache"]').waitFor();
  assert.equal((await call(base, "GET", "/api/pools/cache")).body.slots, 3);

  // Edit fills the form with the pool; saved with more slots.
  await page.getByRole("button", { name: "Edit pool cache" }).click();
  assert.equal(await page.locator('#pool-form input[name="slots"]').inputValue(), "3");
  await page.locator('#pool-form input[name="slots"]').fill("5");
  await page.locator('#pool-form input[name="description"]').fill("the cache's connections");
  await page.locator("#pool-form").getByRole("button", { name: "Save pool" }).click();
  await page.waitForFunction(() => document.querySelector('tr[data-pool="cache"]')?.innerText.includes("cache's connections"));
  assert.equal((await call(base, "GET", "/api/pools/cache")).body.slots, 5);

  // Delete it (a dismissed confirm first, which keeps it).
  page.once("dialog", (d) => d.dismiss());
  // `confirm` is the handler's first, synchronous step: once the click returns, a dismissed
  // one has returned from the handler without a request.
  await page.getByRole("button", { name: "Delete pool cache" }).click();
  assert.equal((await call(base, "GET", "/api/pools/cache")).status, 200);
  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Delete pool cache" }).click();
  await page.locator('tr[data-pool="cache"]').waitFor({ state: "detached" });
  assert.equal((await call(base, "GET", "/api/pools/cache")).status, 404);

  // A pool's page: its holders by slot, its queue with the job waiting.
  await page.locator('tr[data-pool="db"] td[data-label="Pool"] a').click();
  await page.waitForFunction(() => location.hash === "#/pools/db");
  await page.locator("#holders tbody tr").nth(1).waitFor();
  assert.deepEqual(await page.locator("#holders tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.slot)), ["0", "1"]);
  assert.match(await page.locator('#holders tr[data-slot="1"]').innerText(), /report@1000#1[\s\S]*w1/);
  const waiting = await page.locator("#waiting tbody tr").allInnerTexts();
  assert.equal(waiting.length, 1);
  assert.match(waiting[0], /export@5000#1/);
  assert.match(waiting[0], /\b80\b/, "its priority");
  assert.match(await page.locator("#pool-jobs").innerText(), /export, report/);
  await shot(page, "pool-detail.png");

  // In use, it is not deleted: the refusal names the jobs.
  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Delete pool db" }).click();
  await page.waitForFunction(() => /used by jobs: export, report/.test(document.getElementById("banner").textContent));
  assert.equal((await call(base, "GET", "/api/pools/db")).status, 200);

  // The editor shows a job's pool, its slots per run and its priority.
  await page.goto(`${base}/#/edit/export`);
  await page.waitForFunction(() => document.querySelector('input[name="name"]')?.value === "export", null, { timeout: 10_000 });
  assert.equal(await page.locator('input[name="pool"]').inputValue(), "db");
  assert.equal(await page.locator('input[name="pool_slots"]').inputValue(), "2");
  assert.equal(await page.locator('input[name="priority"]').inputValue(), "80");
  // And the job page, with a link to the pool.
  await page.goto(`${base}/#/job/export`);
  await page.locator("#pool a").waitFor();
  assert.match(await page.locator("#pool").innerText(), /db — 2 slots per run/);
  assert.equal(await page.locator("#priority").innerText(), "80");
  check();
  console.log("pools: ok");
} finally {
  await browser.close();
}
