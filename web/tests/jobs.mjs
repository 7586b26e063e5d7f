// Browser test of the jobs list, run by tests/tests/ui.rs against a real cluster:
//   node jobs.mjs <master url> <screenshot dir>
// The harness has created: nightly-report (labels team=data, one succeeded run), paused-job
// (enabled: false) and mars-only (selector region=mars, no worker matches); worker w1 runs.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import path from "node:path";

const [base, shots] = process.argv.slice(2);
assert.ok(base && shots, "usage: node jobs.mjs <master url> <screenshot dir>");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
const external = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("request", (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));

  await page.goto(base + "/");
  const rows = page.locator("tbody tr");
  await rows.first().waitFor();
  assert.equal(await rows.count(), 3);
  const row = (name) => page.locator(`tr[data-job="${name}"]`);
  assert.match(await row("nightly-report").innerText(), /enabled/);
  assert.match(await row("nightly-report").innerText(), /succeeded/);
  assert.match(await row("paused-job").innerText(), /paused/);
  assert.match(await row("mars-only").innerText(), /no live worker matches/);
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

  // Phone width and dark scheme stay readable (screenshots are kept as test artifacts).
  const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, colorScheme: "dark" });
  const small = await phone.newPage();
  await small.goto(base + "/");
  await small.locator("tbody tr").first().waitFor();
  await small.screenshot({ path: path.join(shots, "jobs-375-dark.png"), fullPage: true });

  // Workers: the live one with its labels, and the job nobody matches.
  await page.goto(base + "/#/workers");
  await page.locator('tr[data-worker="w1"]').waitFor();
  assert.match(await page.locator('tr[data-worker="w1"]').innerText(), /0 \/ 64/);
  assert.match(await page.locator("#unmatched").innerText(), /mars-only needs region=mars/);
  await page.screenshot({ path: path.join(shots, "workers-1280.png"), fullPage: true });

  assert.deepEqual(errors, [], "no script errors");
  assert.deepEqual(external, [], "no requests outside the master");
  console.log("jobs list: ok");
} finally {
  await browser.close();
}
